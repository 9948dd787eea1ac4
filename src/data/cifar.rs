//! CIFAR-10 on the host: the binary version's six batch files
//! (`data_batch_1.bin` … `data_batch_5.bin`, `test_batch.bin`), each a run
//! of 3,073-byte records: one label byte, then the image as 3×32×32 bytes,
//! channel-major (all red, then all green, then all blue), each channel
//! row-major. Also a synthetic set of the same shape, for speed and memory
//! runs that need no download.
//!
//! Invariants of a CIFAR-10 [`ImageSet`] (established by [`load`] and
//! [`synthetic`], kept by [`ImageSet::limit_train`]):
//! - every image is 3×32×32 and each split holds at least one image;
//! - each split has exactly one label per image, and every label is below 10;
//! - the pixels are stored exactly as the file holds them: the record
//!   layout *is* [`Images`]' channel-major layout, so parsing only drops the
//!   label bytes.
//! - parsing never panics, whatever the bytes ([`parse_records`] is fuzzed).

use std::path::{Path, PathBuf};

use super::idx::Images;
use super::{DataError, ImageSet};

/// Channels of a CIFAR-10 image: red, green, blue.
pub const CHANNELS: usize = 3;
/// Rows of a CIFAR-10 image.
pub const IMAGE_ROWS: usize = 32;
/// Columns of a CIFAR-10 image.
pub const IMAGE_COLS: usize = 32;
/// CIFAR-10's classes.
pub const CLASSES: usize = 10;
/// Bytes of one record: the label, then the image.
pub const RECORD_BYTES: usize = 1 + CHANNELS * IMAGE_ROWS * IMAGE_COLS;

/// The training batches, in the order their images are concatenated.
pub const TRAIN_FILES: [&str; 5] = [
    "data_batch_1.bin",
    "data_batch_2.bin",
    "data_batch_3.bin",
    "data_batch_4.bin",
    "data_batch_5.bin",
];
/// The test batch's file.
pub const TEST_FILE: &str = "test_batch.bin";

/// CIFAR-10's per-channel (R, G, B) statistics of pixels scaled to [0, 1],
/// as the usual PyTorch recipes normalise with: (mean, standard deviation).
pub const NORMALIZE: &[(f32, f32)] = &[(0.4914, 0.2470), (0.4822, 0.2435), (0.4465, 0.2616)];

/// CIFAR-10's classes, in label order (as its `batches.meta.txt` lists them).
pub const CLASS_NAMES: [&str; CLASSES] = [
    "airplane",
    "automobile",
    "bird",
    "cat",
    "deer",
    "dog",
    "frog",
    "horse",
    "ship",
    "truck",
];

fn class_names() -> Vec<String> {
    CLASS_NAMES.iter().map(|name| name.to_string()).collect()
}

/// Whether `dir` looks like a CIFAR-10 directory: it holds any of the six
/// batch files (so that a missing one is then reported by name).
pub fn present(dir: &Path) -> bool {
    TRAIN_FILES
        .iter()
        .chain([&TEST_FILE])
        .any(|name| dir.join(name).exists())
}

/// Loads the six CIFAR-10 batch files from `dir`.
pub fn load(dir: &Path) -> Result<ImageSet, DataError> {
    // Every file is located before any is read, so a missing one is
    // reported before time is spent reading 150 MB of the others.
    let train_paths: Vec<PathBuf> = TRAIN_FILES.iter().map(|name| dir.join(name)).collect();
    let test_path = dir.join(TEST_FILE);
    for path in train_paths.iter().chain([&test_path]) {
        if !path.exists() {
            return Err(DataError::MissingCifarFile { path: path.clone() });
        }
    }
    let mut train_images = empty_images();
    let mut train_labels = Vec::new();
    for path in &train_paths {
        let (images, labels) = read_records(path)?;
        train_images.count += images.count;
        train_images.pixels.extend_from_slice(&images.pixels);
        train_labels.extend_from_slice(&labels);
    }
    if train_images.count == 0 {
        return Err(DataError::EmptySet {
            path: train_paths[0].clone(),
        });
    }
    let (test_images, test_labels) = read_records(&test_path)?;
    if test_images.count == 0 {
        return Err(DataError::EmptySet { path: test_path });
    }
    Ok(ImageSet {
        name: "CIFAR-10".into(),
        synthetic: false,
        train_images,
        train_labels,
        test_images,
        test_labels,
        classes: CLASSES,
        class_names: class_names(),
        normalize: NORMALIZE.to_vec(),
        notes: Vec::new(),
    })
}

/// Reads and parses one batch file.
pub fn read_records(path: &Path) -> Result<(Images, Vec<u8>), DataError> {
    let bytes = std::fs::read(path).map_err(|source| DataError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    parse_records_at(&bytes, path)
}

/// Parses a batch file's bytes: the images and their labels. Errors name
/// the path as `<in-memory buffer>`.
pub fn parse_records(bytes: &[u8]) -> Result<(Images, Vec<u8>), DataError> {
    parse_records_at(bytes, Path::new("<in-memory buffer>"))
}

fn parse_records_at(bytes: &[u8], path: &Path) -> Result<(Images, Vec<u8>), DataError> {
    if !bytes.len().is_multiple_of(RECORD_BYTES) {
        return Err(DataError::PartialRecord {
            path: path.to_path_buf(),
            bytes: bytes.len() as u64,
            record: RECORD_BYTES,
        });
    }
    let count = bytes.len() / RECORD_BYTES;
    let mut images = empty_images();
    images.pixels.reserve_exact(count * (RECORD_BYTES - 1));
    let mut labels = Vec::with_capacity(count);
    for (record, chunk) in bytes.chunks_exact(RECORD_BYTES).enumerate() {
        let (&label, pixels) = chunk.split_first().ok_or(DataError::PartialRecord {
            path: path.to_path_buf(),
            bytes: bytes.len() as u64,
            record: RECORD_BYTES,
        })?;
        if usize::from(label) >= CLASSES {
            return Err(DataError::LabelOutOfRange {
                path: path.to_path_buf(),
                index: record,
                label,
                classes: CLASSES,
            });
        }
        labels.push(label);
        images.pixels.extend_from_slice(pixels);
    }
    images.count = count;
    Ok((images, labels))
}

fn empty_images() -> Images {
    Images {
        count: 0,
        channels: CHANNELS,
        rows: IMAGE_ROWS,
        cols: IMAGE_COLS,
        pixels: Vec::new(),
    }
}

/// `train` training and `test` test images of CIFAR-10's shape with
/// uniformly random pixels and labels, a pure function of `seed` (SplitMix64):
/// for measuring speed and memory, never accuracy. Both counts must be at
/// least 1.
pub fn synthetic(train: usize, test: usize, seed: u64) -> Result<ImageSet, DataError> {
    if train == 0 || test == 0 {
        return Err(DataError::SyntheticSize { train, test });
    }
    let mut rng = crate::rng::SplitMix64::new(seed);
    let mut split = |count: usize| {
        let mut images = empty_images();
        images.count = count;
        images.pixels = vec![0; count * (RECORD_BYTES - 1)];
        // Eight pixels a draw: 150 MB of pixels in a fraction of a second.
        for chunk in images.pixels.chunks_mut(8) {
            let word = rng.next_u64().to_le_bytes();
            chunk.copy_from_slice(&word[..chunk.len()]);
        }
        let labels: Vec<u8> = (0..count).map(|_| rng.below(CLASSES as u64) as u8).collect();
        (images, labels)
    };
    let (train_images, train_labels) = split(train);
    let (test_images, test_labels) = split(test);
    Ok(ImageSet {
        name: "synthetic CIFAR-10".into(),
        synthetic: true,
        train_images,
        train_labels,
        test_images,
        test_labels,
        classes: CLASSES,
        class_names: class_names(),
        normalize: NORMALIZE.to_vec(),
        notes: Vec::new(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::testutil::TempDir;

    /// `count` records whose labels are `first_label + i` (mod 10) and whose
    /// pixels are a ramp that tells records and channels apart.
    fn records(count: usize, first_label: usize) -> Vec<u8> {
        let mut out = Vec::new();
        for i in 0..count {
            out.push(((first_label + i) % CLASSES) as u8);
            out.extend((0..RECORD_BYTES - 1).map(|k| ((i * 7 + k) % 251) as u8));
        }
        out
    }

    fn write_set(dir: &TempDir) {
        for (b, name) in TRAIN_FILES.iter().enumerate() {
            dir.write(name, &records(2, b));
        }
        dir.write(TEST_FILE, &records(3, 5));
    }

    fn load_err(dir: &TempDir) -> DataError {
        match load(dir.path()) {
            Ok(_) => panic!("load unexpectedly succeeded"),
            Err(e) => e,
        }
    }

    #[test]
    fn good_files_round_trip() {
        let dir = TempDir::new("cifar-happy");
        write_set(&dir);
        let set = load(dir.path()).unwrap();
        assert_eq!(set.name, "CIFAR-10");
        assert!(!set.synthetic);
        assert_eq!(set.train_images.count, 10);
        assert_eq!(
            (set.train_images.channels, set.train_images.rows, set.train_images.cols),
            (3, 32, 32)
        );
        assert_eq!(set.train_labels, [0, 1, 1, 2, 2, 3, 3, 4, 4, 5]);
        assert_eq!(set.test_labels, [5, 6, 7]);
        // Image j of batch b is record j of file b, label byte dropped.
        let file = records(2, 3);
        assert_eq!(set.train_images.image(7).unwrap(), &file[RECORD_BYTES + 1..]);
        assert_eq!(set.test_images.image(0).unwrap(), &records(3, 5)[1..RECORD_BYTES]);
        assert_eq!(set.example(), crate::tensor::Shape::new(&[3, 32, 32]));
        assert_eq!(set.normalize, NORMALIZE);
        // And through the format-recognising loader.
        let via = ImageSet::load(dir.path()).unwrap();
        assert_eq!(via.train_images, set.train_images);
    }

    #[test]
    fn a_missing_file_is_named() {
        let dir = TempDir::new("cifar-missing");
        write_set(&dir);
        std::fs::remove_file(dir.path().join("data_batch_4.bin")).unwrap();
        match load_err(&dir) {
            DataError::MissingCifarFile { path } => assert_eq!(path, dir.path().join("data_batch_4.bin")),
            other => panic!("expected MissingCifarFile, got {other:?}"),
        }
        // Through ImageSet::load too: one CIFAR file present makes it CIFAR.
        let message = ImageSet::load(dir.path()).unwrap_err().to_string();
        assert!(message.contains("data_batch_4.bin"), "{message}");
    }

    #[test]
    fn a_partial_record_names_the_file_and_the_size() {
        let dir = TempDir::new("cifar-partial");
        write_set(&dir);
        let mut bytes = records(2, 0);
        bytes.pop();
        dir.write("test_batch.bin", &bytes);
        match load_err(&dir) {
            DataError::PartialRecord { path, bytes, record } => {
                assert_eq!(path, dir.path().join("test_batch.bin"));
                assert_eq!((bytes, record), (2 * 3073 - 1, 3073));
            }
            other => panic!("expected PartialRecord, got {other:?}"),
        }
        let message = load_err(&dir).to_string();
        assert!(
            message.contains("test_batch.bin") && message.contains("6145"),
            "{message}"
        );
    }

    #[test]
    fn a_label_past_the_classes_names_the_file_and_the_record() {
        let dir = TempDir::new("cifar-label");
        write_set(&dir);
        let mut bytes = records(3, 0);
        bytes[2 * RECORD_BYTES] = 10;
        dir.write("data_batch_2.bin", &bytes);
        match load_err(&dir) {
            DataError::LabelOutOfRange {
                path,
                index,
                label,
                classes,
            } => {
                assert_eq!(path, dir.path().join("data_batch_2.bin"));
                assert_eq!((index, label, classes), (2, 10, 10));
            }
            other => panic!("expected LabelOutOfRange, got {other:?}"),
        }
    }

    #[test]
    fn empty_files_are_an_empty_set() {
        let dir = TempDir::new("cifar-empty");
        write_set(&dir);
        dir.write(TEST_FILE, &[]);
        assert!(matches!(load_err(&dir), DataError::EmptySet { .. }));
    }

    #[test]
    fn neither_format_says_what_was_looked_for() {
        let dir = TempDir::new("cifar-neither");
        dir.write("README", b"nothing here");
        let err = ImageSet::load(dir.path()).unwrap_err();
        assert!(matches!(err, DataError::UnknownFormat { .. }), "{err:?}");
        let message = err.to_string();
        for looked_for in ["train-images-idx3-ubyte", "data_batch_1.bin", "test_batch.bin"] {
            assert!(message.contains(looked_for), "{message}");
        }
    }

    #[test]
    fn parsing_never_panics_on_short_or_odd_input() {
        for len in [0, 1, RECORD_BYTES - 1, RECORD_BYTES, RECORD_BYTES + 1] {
            let bytes = vec![3u8; len];
            match parse_records(&bytes) {
                Ok((images, labels)) => {
                    assert_eq!(images.count, len / RECORD_BYTES);
                    assert_eq!(labels.len(), images.count);
                    assert_eq!(images.pixels.len(), images.count * (RECORD_BYTES - 1));
                }
                Err(e) => assert!(matches!(e, DataError::PartialRecord { .. }), "{e:?}"),
            }
        }
    }

    #[test]
    fn the_synthetic_set_has_cifars_shape_and_is_a_function_of_the_seed() {
        let set = synthetic(20, 4, 7).unwrap();
        assert!(set.synthetic);
        assert_eq!(set.example(), crate::tensor::Shape::new(&[3, 32, 32]));
        assert_eq!((set.train_images.count, set.test_images.count), (20, 4));
        assert_eq!(set.train_images.pixels.len(), 20 * 3072);
        assert_eq!(set.test_images.pixels.len(), 4 * 3072);
        assert_eq!((set.train_labels.len(), set.test_labels.len()), (20, 4));
        assert!(set.train_labels.iter().chain(&set.test_labels).all(|&l| l < 10));
        // Random, not constant: several labels and pixel values appear.
        let mut seen = [false; 10];
        set.train_labels.iter().for_each(|&l| seen[l as usize] = true);
        assert!(seen.iter().filter(|&&s| s).count() > 3);
        assert!(set.train_images.pixels.iter().any(|&p| p > 200));
        assert!(set.train_images.pixels.iter().any(|&p| p < 50));
        let again = synthetic(20, 4, 7).unwrap();
        assert_eq!(again.train_images, set.train_images);
        assert_eq!(again.test_labels, set.test_labels);
        let other = synthetic(20, 4, 8).unwrap();
        assert!(
            other.train_images.pixels != set.train_images.pixels,
            "another seed, the same pixels"
        );
        assert!(matches!(synthetic(0, 1, 7), Err(DataError::SyntheticSize { .. })));
        assert!(matches!(synthetic(1, 0, 7), Err(DataError::SyntheticSize { .. })));
    }
}
