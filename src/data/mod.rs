//! Host-side data: reading MNIST or CIFAR-10 from disk (or making up a
//! CIFAR-10-shaped set) into validated host buffers, and
//! the per-epoch shuffled order in which training visits them; text (a
//! character corpus, the Sentiment Treebank's trees) in [`text`], and which
//! of them a path holds in [`DataKind`].
//!
//! Reading ends at "bytes on the host, proven well-formed"; only
//! [`resident`] touches the arena, uploading a whole set into the persistent
//! region once, from which every step gathers its minibatch on the device.
//!
//! Invariants:
//! - Every [`Images`] satisfies `pixels.len() == count * channels * rows * cols`.
//! - A loaded MNIST [`ImageSet`] has 1×28×28 images, a CIFAR-10 one (read or
//!   synthetic) 3×32×32; each has one label per image, every label below 10,
//!   and one `(mean, std)` per channel; [`ImageSet::limit_train`] preserves
//!   all of that.
//! - [`shuffle_into`] writes a permutation of `0..len` that depends only on
//!   `(seed, epoch)`, identically on every platform, and allocates nothing.
//! - Malformed input never panics: every failure is a [`DataError`] that
//!   names the offending file (where one is involved) and says what to do.

pub mod cifar;
pub mod idx;
mod image_set;
mod kind;
pub mod mnist;
pub mod order;
pub mod resident;
mod set;
pub mod text;

use std::path::PathBuf;

pub use idx::{parse_images, parse_labels, read_images, read_labels, Images};
pub use image_set::{DataSource, ImageSet};
pub use kind::DataKind;
pub use order::shuffle_into;
pub use resident::{ResidentSet, ResidentSplit};
pub use set::DataSet;

/// Everything that can go wrong between a data directory and validated host
/// buffers. Each message says what is wrong and, where it needs no flag, the
/// remedy; the CLI adds the flags to pass (its hints).
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    #[error(
        "cannot read {}: {source}",
        path.display()
    )]
    Io {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "{} starts like gzip but does not decompress ({source}) — the download is probably \
         incomplete or corrupt; re-download the file",
        path.display()
    )]
    Gzip {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "{} has magic number {found:#010x}, expected {expected:#010x} — it is not the IDX file \
         this slot needs (images and labels swapped?)",
        path.display()
    )]
    BadMagic { path: PathBuf, found: u32, expected: u32 },

    #[error(
        "{} is truncated: its header implies {expected_bytes} bytes (after decompression) but it \
         has {found_bytes} — re-download the file",
        path.display()
    )]
    Truncated {
        path: PathBuf,
        expected_bytes: u64,
        found_bytes: u64,
    },

    #[error(
        "{} has trailing bytes: its header implies {expected_bytes} bytes (after decompression) \
         but it has {found_bytes} — the file is corrupt or not MNIST; re-download the file",
        path.display()
    )]
    TrailingBytes {
        path: PathBuf,
        expected_bytes: u64,
        found_bytes: u64,
    },

    #[error(
        "{} fails its checksum: SHA-256 is {found} but SHA256SUMS lists {expected} — the file is \
         corrupt or was replaced; re-download it (or fix SHA256SUMS if the new file is intended)",
        path.display()
    )]
    Checksum {
        path: PathBuf,
        expected: String,
        found: String,
    },

    #[error(
        "{} line {line} is not `<64 hex digits>  <file name>` — regenerate it with \
         `sha256sum *.gz > SHA256SUMS` in the data directory, or delete it",
        path.display()
    )]
    ChecksumList { path: PathBuf, line: usize },

    #[error(
        "{} not found — the data directory must hold train-images-idx3-ubyte, \
         train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each raw, \
         or gzipped with a .gz suffix); download MNIST there",
        path.display()
    )]
    MissingFile { path: PathBuf },

    #[error(
        "{} not found — a CIFAR-10 directory must hold data_batch_1.bin to data_batch_5.bin and \
         test_batch.bin (CIFAR-10's binary version); download CIFAR-10 there",
        path.display()
    )]
    MissingCifarFile { path: PathBuf },

    #[error(
        "{} has {bytes} bytes, not a whole number of {record}-byte CIFAR-10 records — the file is \
         truncated or not CIFAR-10's binary version; re-download it",
        path.display()
    )]
    PartialRecord { path: PathBuf, bytes: u64, record: usize },

    #[error(
        "{} holds no data set: looked for MNIST (train-images-idx3-ubyte, train-labels-idx1-ubyte, \
         t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each raw or .gz) and for CIFAR-10 \
         (data_batch_1.bin to data_batch_5.bin, test_batch.bin)",
        dir.display()
    )]
    UnknownFormat { dir: PathBuf },

    #[error("{} holds {}, not images", path.display(), holds.describe())]
    NotImages { path: PathBuf, holds: DataKind },

    #[error(transparent)]
    Text(#[from] text::TextError),

    #[error("`{given}` is not a data source: {why}")]
    BadSource { given: String, why: String },

    #[error("a synthetic set needs at least 1 training and 1 test image, not {train} and {test}")]
    SyntheticSize { train: usize, test: usize },

    #[error(
        "{} holds {images} images but {} holds {labels} labels — the two files belong to \
         different sets or one is damaged; re-download both",
        images_path.display(),
        labels_path.display()
    )]
    CountMismatch {
        images_path: PathBuf,
        images: usize,
        labels_path: PathBuf,
        labels: usize,
    },

    #[error(
        "{} holds no images — a set must not be empty; re-download the file",
        path.display()
    )]
    EmptySet { path: PathBuf },

    #[error(
        "{} holds {rows}×{cols} images but the model expects {expected_rows}×{expected_cols}",
        path.display()
    )]
    ImageSize {
        path: PathBuf,
        rows: usize,
        cols: usize,
        expected_rows: usize,
        expected_cols: usize,
    },

    #[error(
        "{} has label {label} at index {index}, but there are only {classes} classes — the file \
         is corrupt or of another data set; re-download it",
        path.display()
    )]
    LabelOutOfRange {
        path: PathBuf,
        index: usize,
        label: u8,
        classes: usize,
    },

    #[error("a limit of {requested} training images is out of range: the training set has {available}")]
    TrainLimit { requested: usize, available: usize },
    #[error("a limit of {requested} test images is out of range: the test set has {available}")]
    TestLimit { requested: usize, available: usize },
}

/// Fixtures shared by the tests of `idx` and `mnist`: IDX buffers built in
/// memory and scratch directories that clean up after themselves.
#[cfg(test)]
pub(crate) mod testutil {
    use std::io::Write;
    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicU64, Ordering};

    pub fn idx_images(count: u32, rows: u32, cols: u32, pixels: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + pixels.len());
        for word in [0x0000_0803, count, rows, cols] {
            out.extend_from_slice(&word.to_be_bytes());
        }
        out.extend_from_slice(pixels);
        out
    }

    pub fn idx_labels(labels: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + labels.len());
        out.extend_from_slice(&0x0000_0801u32.to_be_bytes());
        // Tests never build more than u32::MAX labels.
        out.extend_from_slice(&(labels.len() as u32).to_be_bytes());
        out.extend_from_slice(labels);
        out
    }

    /// `count` images of `rows`×`cols` whose pixels are a recognisable ramp,
    /// so a test can tell images apart after truncation.
    pub fn ramp_pixels(count: usize, rows: usize, cols: usize) -> Vec<u8> {
        (0..count * rows * cols).map(|i| (i % 251) as u8).collect()
    }

    pub fn gzip(bytes: &[u8]) -> Vec<u8> {
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(bytes).unwrap();
        enc.finish().unwrap()
    }

    pub fn sha256_hex(bytes: &[u8]) -> String {
        use sha2::Digest;
        sha2::Sha256::digest(bytes).iter().map(|b| format!("{b:02x}")).collect()
    }

    /// A fresh directory under the system temp dir, removed on drop. Unique
    /// per process and per call, so parallel tests never share one.
    pub struct TempDir(PathBuf);

    impl TempDir {
        pub fn new(tag: &str) -> Self {
            static NEXT: AtomicU64 = AtomicU64::new(0);
            let n = NEXT.fetch_add(1, Ordering::Relaxed);
            let dir = std::env::temp_dir().join(format!("bumpgrad-data-{tag}-{}-{n}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(&dir).unwrap();
            TempDir(dir)
        }

        pub fn path(&self) -> &Path {
            &self.0
        }

        pub fn write(&self, name: &str, bytes: &[u8]) -> PathBuf {
            let path = self.0.join(name);
            std::fs::write(&path, bytes).unwrap();
            path
        }
    }

    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
