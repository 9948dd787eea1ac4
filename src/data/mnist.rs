//! MNIST on the host: finds the four IDX files in a data directory, checks
//! them against `SHA256SUMS` when one is present, parses them, and proves
//! the result is MNIST-shaped before anyone trains on it.
//!
//! Invariants of a MNIST's [`ImageSet`] (established by [`load`], kept by
//! [`ImageSet::limit_train`]):
//! - every image is 28×28 and each set holds at least one image;
//! - each set has exactly one label per image, and every label is below 10;
//! - a file listed in `SHA256SUMS` was hashed over its stored bytes (still
//!   compressed) and matched *before* it was parsed, so a corrupt download is
//!   reported as corrupt rather than as some confusing parse error.

use std::path::{Path, PathBuf};

use sha2::{Digest, Sha256};

use super::idx::{self, Images};
use super::{DataError, ImageSet};

/// Rows of an MNIST image.
pub const IMAGE_ROWS: usize = 28;
/// Columns of an MNIST image.
pub const IMAGE_COLS: usize = 28;
/// MNIST's classes: the digits.
pub const CLASSES: usize = 10;

/// Name of the optional checksum list, in `sha256sum` output format.
pub const CHECKSUM_FILE: &str = "SHA256SUMS";

const TRAIN_IMAGES: &str = "train-images-idx3-ubyte";
const TRAIN_LABELS: &str = "train-labels-idx1-ubyte";
const TEST_IMAGES: &str = "t10k-images-idx3-ubyte";
const TEST_LABELS: &str = "t10k-labels-idx1-ubyte";

/// MNIST's pixel statistics (of pixels scaled to [0, 1]), as every MNIST
/// example normalises with: (mean, standard deviation) of its one channel.
pub const NORMALIZE: &[(f32, f32)] = &[(0.1307, 0.3081)];

/// Whether `dir` holds any of MNIST's four files (raw or gzipped).
pub fn present(dir: &Path) -> bool {
    [TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS]
        .iter()
        .any(|name| dir.join(name).exists() || dir.join(format!("{name}.gz")).exists())
}

/// Loads the four MNIST files from `dir`, each as `<name>.gz` or raw
/// `<name>` (the gzipped one wins if both exist).
pub fn load(dir: &Path) -> Result<ImageSet, DataError> {
    // Locate everything first so a missing file is reported before any
    // time is spent hashing or decompressing the others.
    let paths = [TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS].map(|name| locate(dir, name));
    let [train_images_path, train_labels_path, test_images_path, test_labels_path] = paths;
    let (train_images_path, train_labels_path) = (train_images_path?, train_labels_path?);
    let (test_images_path, test_labels_path) = (test_images_path?, test_labels_path?);

    let sums = Checksums::load(dir)?;
    let train_images = idx::images_from_file(sums.read(&train_images_path)?, &train_images_path)?;
    let train_labels = idx::labels_from_file(sums.read(&train_labels_path)?, &train_labels_path)?;
    let test_images = idx::images_from_file(sums.read(&test_images_path)?, &test_images_path)?;
    let test_labels = idx::labels_from_file(sums.read(&test_labels_path)?, &test_labels_path)?;

    check_set(&train_images, &train_images_path, &train_labels, &train_labels_path)?;
    check_set(&test_images, &test_images_path, &test_labels, &test_labels_path)?;
    Ok(ImageSet {
        name: "MNIST".into(),
        synthetic: false,
        train_images,
        train_labels,
        test_images,
        test_labels,
        classes: CLASSES,
        class_names: (0..CLASSES).map(|digit| digit.to_string()).collect(),
        normalize: NORMALIZE.to_vec(),
        notes: Vec::new(),
    })
}

/// `dir/<name>.gz` if it exists, else `dir/<name>`; if neither, the error
/// names the `.gz` form since that is what a download produces.
fn locate(dir: &Path, name: &str) -> Result<PathBuf, DataError> {
    let gz = dir.join(format!("{name}.gz"));
    for candidate in [gz.clone(), dir.join(name)] {
        match std::fs::metadata(&candidate) {
            Ok(_) => return Ok(candidate),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(source) => {
                return Err(DataError::Io {
                    path: candidate,
                    source,
                })
            }
        }
    }
    Err(DataError::MissingFile { path: gz })
}

/// Validates one split: shape, labels, pairing, non-emptiness.
fn check_set(images: &Images, images_path: &Path, labels: &[u8], labels_path: &Path) -> Result<(), DataError> {
    if (images.rows, images.cols) != (IMAGE_ROWS, IMAGE_COLS) {
        return Err(DataError::ImageSize {
            path: images_path.to_path_buf(),
            rows: images.rows,
            cols: images.cols,
            expected_rows: IMAGE_ROWS,
            expected_cols: IMAGE_COLS,
        });
    }
    if let Some((index, &label)) = labels
        .iter()
        .enumerate()
        .find(|(_, &label)| usize::from(label) >= CLASSES)
    {
        return Err(DataError::LabelOutOfRange {
            path: labels_path.to_path_buf(),
            index,
            label,
            classes: CLASSES,
        });
    }
    if images.count != labels.len() {
        return Err(DataError::CountMismatch {
            images_path: images_path.to_path_buf(),
            images: images.count,
            labels_path: labels_path.to_path_buf(),
            labels: labels.len(),
        });
    }
    if images.count == 0 {
        return Err(DataError::EmptySet {
            path: images_path.to_path_buf(),
        });
    }
    Ok(())
}

/// The parsed `SHA256SUMS` of a data directory; empty when there is none.
/// The text data sets check their files with it too.
pub(crate) struct Checksums {
    /// (file name, lowercase hex digest).
    entries: Vec<(String, String)>,
}

impl Checksums {
    pub(crate) fn load(dir: &Path) -> Result<Self, DataError> {
        let path = dir.join(CHECKSUM_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Checksums { entries: Vec::new() }),
            Err(source) => return Err(DataError::Io { path, source }),
        };
        let mut entries = Vec::new();
        for (index, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            match parse_sum_line(line) {
                Some(entry) => entries.push(entry),
                None => return Err(DataError::ChecksumList { path, line: index + 1 }),
            }
        }
        Ok(Checksums { entries })
    }

    /// Reads `path`'s stored bytes and, if `SHA256SUMS` lists the file,
    /// checks them against it.
    fn read(&self, path: &Path) -> Result<Vec<u8>, DataError> {
        let stored = idx::read_file(path)?;
        self.check(path, &stored)?;
        Ok(stored)
    }

    /// Checks `stored`, the bytes of `path`, against its entry if
    /// `SHA256SUMS` lists the file.
    pub(crate) fn check(&self, path: &Path, stored: &[u8]) -> Result<(), DataError> {
        let name = path.file_name().and_then(|n| n.to_str());
        let listed = self.entries.iter().find(|(file, _)| Some(file.as_str()) == name);
        if let Some((_, expected)) = listed {
            let found = sha256_hex(stored);
            if found != *expected {
                return Err(DataError::Checksum {
                    path: path.to_path_buf(),
                    expected: expected.clone(),
                    found,
                });
            }
        }
        Ok(())
    }
}

/// One `sha256sum` line: `<64 hex>` then a space, then either a space (text
/// mode) or `*` (binary mode), then the name. A leading `./` is dropped so
/// `sha256sum ./*.gz` output also matches.
fn parse_sum_line(line: &str) -> Option<(String, String)> {
    let (hex, rest) = line.split_once(char::is_whitespace)?;
    if hex.len() != 64 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let name = rest.trim_start();
    let name = name.strip_prefix('*').unwrap_or(name);
    let name = name.strip_prefix("./").unwrap_or(name);
    if name.is_empty() {
        return None;
    }
    Some((name.to_string(), hex.to_ascii_lowercase()))
}

fn sha256_hex(bytes: &[u8]) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    let digest = Sha256::digest(bytes);
    let mut out = String::with_capacity(2 * digest.len());
    for byte in digest {
        out.push(char::from(HEX[usize::from(byte >> 4)]));
        out.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::testutil::{self, gzip, idx_images, idx_labels, ramp_pixels, TempDir};

    const TRAIN_N: usize = 5;
    const TEST_N: usize = 3;

    fn images_file(count: usize, rows: usize, cols: usize) -> Vec<u8> {
        let pixels = ramp_pixels(count, rows, cols);
        idx_images(count as u32, rows as u32, cols as u32, &pixels)
    }

    fn labels_file(count: usize) -> Vec<u8> {
        let labels: Vec<u8> = (0..count).map(|i| (i % CLASSES) as u8).collect();
        idx_labels(&labels)
    }

    /// A well-formed miniature MNIST directory, gzipped or raw.
    fn write_set(dir: &TempDir, gzipped: bool) {
        let files = [
            (TRAIN_IMAGES, images_file(TRAIN_N, 28, 28)),
            (TRAIN_LABELS, labels_file(TRAIN_N)),
            (TEST_IMAGES, images_file(TEST_N, 28, 28)),
            (TEST_LABELS, labels_file(TEST_N)),
        ];
        for (name, bytes) in files {
            if gzipped {
                dir.write(&format!("{name}.gz"), &gzip(&bytes));
            } else {
                dir.write(name, &bytes);
            }
        }
    }

    fn load_err(dir: &TempDir) -> DataError {
        match load(dir.path()) {
            Ok(_) => panic!("load unexpectedly succeeded"),
            Err(e) => e,
        }
    }

    #[test]
    fn loads_gzip_and_raw_sets() {
        for gzipped in [true, false] {
            let dir = TempDir::new("mnist-happy");
            write_set(&dir, gzipped);
            let host = load(dir.path()).unwrap();
            assert_eq!(host.train_images.count, TRAIN_N);
            assert_eq!(host.train_images.pixels, ramp_pixels(TRAIN_N, 28, 28));
            assert_eq!(host.train_labels, vec![0, 1, 2, 3, 4]);
            assert_eq!(host.test_images.count, TEST_N);
            assert_eq!(host.test_labels, vec![0, 1, 2]);
        }
    }

    #[test]
    fn count_mismatch_is_reported() {
        let dir = TempDir::new("mnist-count");
        write_set(&dir, true);
        dir.write("t10k-labels-idx1-ubyte.gz", &gzip(&labels_file(TEST_N + 1)));
        match load_err(&dir) {
            DataError::CountMismatch {
                images_path,
                images,
                labels_path,
                labels,
            } => {
                assert!(images_path.ends_with("t10k-images-idx3-ubyte.gz"));
                assert!(labels_path.ends_with("t10k-labels-idx1-ubyte.gz"));
                assert_eq!((images, labels), (TEST_N, TEST_N + 1));
            }
            other => panic!("expected CountMismatch, got {other:?}"),
        }
    }

    #[test]
    fn wrong_image_size_is_reported() {
        let dir = TempDir::new("mnist-size");
        write_set(&dir, true);
        dir.write("train-images-idx3-ubyte.gz", &gzip(&images_file(TRAIN_N, 27, 28)));
        assert!(matches!(
            load_err(&dir),
            DataError::ImageSize {
                rows: 27,
                cols: 28,
                expected_rows: 28,
                expected_cols: 28,
                ..
            }
        ));
    }

    #[test]
    fn label_out_of_range_is_reported() {
        let dir = TempDir::new("mnist-label");
        write_set(&dir, true);
        dir.write("train-labels-idx1-ubyte.gz", &gzip(&idx_labels(&[0, 1, 2, 10, 4])));
        match load_err(&dir) {
            DataError::LabelOutOfRange {
                path,
                index,
                label,
                classes,
            } => {
                assert!(path.ends_with("train-labels-idx1-ubyte.gz"));
                assert_eq!((index, label, classes), (3, 10, 10));
            }
            other => panic!("expected LabelOutOfRange, got {other:?}"),
        }
    }

    #[test]
    fn empty_set_is_reported() {
        let dir = TempDir::new("mnist-empty");
        write_set(&dir, true);
        dir.write("t10k-images-idx3-ubyte.gz", &gzip(&images_file(0, 28, 28)));
        dir.write("t10k-labels-idx1-ubyte.gz", &gzip(&labels_file(0)));
        assert!(matches!(load_err(&dir), DataError::EmptySet { .. }));
    }

    #[test]
    fn missing_file_is_reported() {
        let dir = TempDir::new("mnist-missing");
        write_set(&dir, true);
        std::fs::remove_file(dir.path().join("t10k-labels-idx1-ubyte.gz")).unwrap();
        match load_err(&dir) {
            DataError::MissingFile { path } => {
                assert_eq!(path, dir.path().join("t10k-labels-idx1-ubyte.gz"))
            }
            other => panic!("expected MissingFile, got {other:?}"),
        }
        let nowhere = dir.path().join("no-such-dir");
        assert!(matches!(load(&nowhere), Err(DataError::MissingFile { .. })));
    }

    /// Writes `SHA256SUMS` listing the set's gzip files with their true
    /// hashes, except `wrong`, whose hash is replaced.
    fn write_sums(dir: &TempDir, wrong: Option<&str>) -> String {
        let mut text = String::from("# produced by the test\n");
        let bogus = "ab".repeat(32);
        for name in [TRAIN_IMAGES, TRAIN_LABELS, TEST_IMAGES, TEST_LABELS] {
            let file = format!("{name}.gz");
            let bytes = std::fs::read(dir.path().join(&file)).unwrap();
            let hex = if wrong == Some(file.as_str()) {
                bogus.clone()
            } else {
                testutil::sha256_hex(&bytes)
            };
            text.push_str(&format!("{hex}  {file}\n"));
        }
        // Files not loaded may be listed too; they are ignored.
        text.push_str(&format!("{}  README.md\n", "00".repeat(32)));
        dir.write(CHECKSUM_FILE, text.as_bytes());
        bogus
    }

    #[test]
    fn matching_checksums_load() {
        let dir = TempDir::new("mnist-sums-ok");
        write_set(&dir, true);
        write_sums(&dir, None);
        assert!(load(dir.path()).is_ok());
    }

    #[test]
    fn checksum_mismatch_is_reported() {
        let dir = TempDir::new("mnist-sums-bad");
        write_set(&dir, true);
        let bogus = write_sums(&dir, Some("train-labels-idx1-ubyte.gz"));
        let stored = std::fs::read(dir.path().join("train-labels-idx1-ubyte.gz")).unwrap();
        match load_err(&dir) {
            DataError::Checksum { path, expected, found } => {
                assert_eq!(path, dir.path().join("train-labels-idx1-ubyte.gz"));
                assert_eq!(expected, bogus);
                assert_eq!(found, testutil::sha256_hex(&stored));
            }
            other => panic!("expected Checksum, got {other:?}"),
        }
    }

    #[test]
    fn checksum_runs_before_parsing() {
        // A file that is both corrupt and listed must fail the checksum, not
        // the parser: that message tells the user what actually happened.
        let dir = TempDir::new("mnist-sums-first");
        write_set(&dir, true);
        write_sums(&dir, None);
        dir.write("t10k-images-idx3-ubyte.gz", b"\x1f\x8bnot really gzip");
        assert!(matches!(load_err(&dir), DataError::Checksum { .. }));
    }

    #[test]
    fn malformed_checksum_list_is_reported() {
        let dir = TempDir::new("mnist-sums-malformed");
        write_set(&dir, true);
        dir.write(CHECKSUM_FILE, b"\nnot-a-hash  train-images-idx3-ubyte.gz\n");
        assert!(matches!(load_err(&dir), DataError::ChecksumList { line: 2, .. }));
    }

    #[test]
    fn sum_lines_in_all_sha256sum_forms() {
        let hex = "0123456789ABCDEF".repeat(4);
        let want = Some(("a.gz".to_string(), hex.to_ascii_lowercase()));
        assert_eq!(parse_sum_line(&format!("{hex}  a.gz")), want);
        assert_eq!(parse_sum_line(&format!("{hex} *a.gz")), want);
        assert_eq!(parse_sum_line(&format!("{hex}  ./a.gz")), want);
        assert_eq!(parse_sum_line(&format!("{hex}  ")), None);
        assert_eq!(parse_sum_line(&format!("{}  a.gz", &hex[1..])), None);
        assert_eq!(parse_sum_line("SHA256 (a.gz) = 00"), None);
    }

    #[test]
    fn limit_train_keeps_the_first_n() {
        let dir = TempDir::new("mnist-limit");
        write_set(&dir, true);
        let mut host = load(dir.path()).unwrap();
        let full = host.clone();
        host.limit_train(2).unwrap();
        assert_eq!(host.train_images.count, 2);
        assert_eq!(host.train_images.pixels, full.train_images.pixels[..2 * 784]);
        assert_eq!(host.train_labels, full.train_labels[..2]);
        assert_eq!(host.test_images, full.test_images);
        host.limit_train(2).unwrap();
        assert_eq!(host.train_images.count, 2);
    }

    #[test]
    fn limit_train_rejects_zero_and_too_many() {
        let dir = TempDir::new("mnist-limit-bad");
        write_set(&dir, true);
        let mut host = load(dir.path()).unwrap();
        for n in [0, TRAIN_N + 1] {
            match host.limit_train(n) {
                Err(DataError::TrainLimit { requested, available }) => assert_eq!((requested, available), (n, TRAIN_N)),
                other => panic!("n = {n}: expected TrainLimit, got {other:?}"),
            }
        }
        assert_eq!(host.train_images.count, TRAIN_N, "a rejected limit changes nothing");
    }

    #[test]
    fn messages_name_the_file_and_the_remedy() {
        let dir = TempDir::new("mnist-messages");
        write_set(&dir, true);
        dir.write("train-labels-idx1-ubyte.gz", &gzip(&idx_labels(&[0, 1, 2, 10, 4])));
        let message = load_err(&dir).to_string();
        assert!(message.contains("train-labels-idx1-ubyte.gz"), "{message}");
        assert!(message.contains("re-download"), "{message}");
    }

    fn histogram(labels: &[u8]) -> [usize; CLASSES] {
        let mut counts = [0; CLASSES];
        for &label in labels {
            counts[usize::from(label)] += 1;
        }
        counts
    }

    #[test]
    fn loads_the_shipped_mnist() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("data/mnist");
        let host = load(&dir).unwrap();
        assert_eq!(host.train_images.count, 60_000);
        assert_eq!(host.test_images.count, 10_000);
        assert_eq!(host.train_images.pixels.len(), 60_000 * 784);
        assert_eq!(
            histogram(&host.train_labels),
            [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]
        );
        assert_eq!(
            histogram(&host.test_labels),
            [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009]
        );
    }
}
