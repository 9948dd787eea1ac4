//! Host-side data: reading MNIST, CIFAR-10 or a folder of one's own images
//! ([`folder`]) from disk (or making up a CIFAR-10-shaped set) into
//! validated host buffers, and
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
//!   synthetic) 3×32×32, an image folder's the same size for every image;
//!   each has one label per image, every label below its classes (10 for
//!   MNIST and CIFAR-10), a name per class, and one `(mean, std)` per
//!   channel; [`ImageSet::limit_train`] preserves all of that.
//! - [`shuffle_into`] writes a permutation of `0..len` that depends only on
//!   `(seed, epoch)`, identically on every platform, and allocates nothing.
//! - Malformed input never panics: every failure is a [`DataError`] that
//!   names the offending file (where one is involved) and says what to do.

pub mod cifar;
pub mod folder;
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
pub use image_set::{DataSource, ImageOptions, ImageSet, ImageSize};
pub use kind::DataKind;
pub use order::shuffle_into;
pub use resident::{ResidentSet, ResidentSplit};
pub use set::DataSet;

/// Everything that can go wrong between a data directory and validated host
/// buffers. Each message says what is wrong and, where it needs no flag, the
/// remedy; the CLI adds the flags to pass (its hints).
#[derive(Debug, thiserror::Error)]
pub enum DataError {
    /// A file could not be read.
    #[error(
        "cannot read {}: {source}",
        path.display()
    )]
    Io {
        /// The file.
        path: PathBuf,
        /// What the system said.
        #[source]
        source: std::io::Error,
    },

    /// A `.gz` file that does not decompress: a download cut short.
    #[error(
        "{} starts like gzip but does not decompress ({source}) — the download is probably \
         incomplete or corrupt; re-download the file",
        path.display()
    )]
    Gzip {
        /// The file.
        path: PathBuf,
        /// What the decoder said.
        #[source]
        source: std::io::Error,
    },

    /// An IDX file whose magic number is not the one its slot needs.
    #[error(
        "{} has magic number {found:#010x}, expected {expected:#010x} — it is not the IDX file \
         this slot needs (images and labels swapped?)",
        path.display()
    )]
    BadMagic {
        /// The file.
        path: PathBuf,
        /// The magic number read.
        found: u32,
        /// The one images (`0x803`) or labels (`0x801`) have.
        expected: u32,
    },

    /// An IDX file shorter than its header says.
    #[error(
        "{} is truncated: its header implies {expected_bytes} bytes (after decompression) but it \
         has {found_bytes} — re-download the file",
        path.display()
    )]
    Truncated {
        /// The file.
        path: PathBuf,
        /// Bytes the header implies.
        expected_bytes: u64,
        /// Bytes there are.
        found_bytes: u64,
    },

    /// An IDX file longer than its header says.
    #[error(
        "{} has trailing bytes: its header implies {expected_bytes} bytes (after decompression) \
         but it has {found_bytes} — the file is corrupt or not MNIST; re-download the file",
        path.display()
    )]
    TrailingBytes {
        /// The file.
        path: PathBuf,
        /// Bytes the header implies.
        expected_bytes: u64,
        /// Bytes there are.
        found_bytes: u64,
    },

    /// A file whose SHA-256 is not the one `SHA256SUMS` lists.
    #[error(
        "{} fails its checksum: SHA-256 is {found} but SHA256SUMS lists {expected} — the file is \
         corrupt or was replaced; re-download it (or fix SHA256SUMS if the new file is intended)",
        path.display()
    )]
    Checksum {
        /// The file.
        path: PathBuf,
        /// The digest listed, in hex.
        expected: String,
        /// The file's digest, in hex.
        found: String,
    },

    /// A line of `SHA256SUMS` that is not a digest and a file name.
    #[error(
        "{} line {line} is not `<64 hex digits>  <file name>` — regenerate it with \
         `sha256sum *.gz > SHA256SUMS` in the data directory, or delete it",
        path.display()
    )]
    ChecksumList {
        /// The `SHA256SUMS` file.
        path: PathBuf,
        /// The line, from 1.
        line: usize,
    },

    /// One of MNIST's four files is missing.
    #[error(
        "{} not found — the data directory must hold train-images-idx3-ubyte, \
         train-labels-idx1-ubyte, t10k-images-idx3-ubyte and t10k-labels-idx1-ubyte (each raw, \
         or gzipped with a .gz suffix); download MNIST there",
        path.display()
    )]
    MissingFile {
        /// The file looked for.
        path: PathBuf,
    },

    /// One of CIFAR-10's six files is missing.
    #[error(
        "{} not found — a CIFAR-10 directory must hold data_batch_1.bin to data_batch_5.bin and \
         test_batch.bin (CIFAR-10's binary version); download CIFAR-10 there",
        path.display()
    )]
    MissingCifarFile {
        /// The file looked for.
        path: PathBuf,
    },

    /// A CIFAR-10 file that is not a whole number of records.
    #[error(
        "{} has {bytes} bytes, not a whole number of {record}-byte CIFAR-10 records — the file is \
         truncated or not CIFAR-10's binary version; re-download it",
        path.display()
    )]
    PartialRecord {
        /// The file.
        path: PathBuf,
        /// Its bytes.
        bytes: u64,
        /// Bytes per record: a label and 3×32×32 pixels.
        record: usize,
    },

    /// A directory that holds none of the formats read.
    #[error(
        "{} holds no data set: looked for MNIST (train-images-idx3-ubyte, train-labels-idx1-ubyte, \
         t10k-images-idx3-ubyte, t10k-labels-idx1-ubyte, each raw or .gz), for CIFAR-10 \
         (data_batch_1.bin to data_batch_5.bin, test_batch.bin) and for an image folder (one \
         subfolder of PNG or JPEG images per class)",
        dir.display()
    )]
    UnknownFormat {
        /// The directory.
        dir: PathBuf,
    },

    /// An image folder with nothing in it.
    #[error(
        "{} is empty — an image folder holds one subfolder of PNG or JPEG images per class \
         (such as cats/1.png and dogs/1.jpg); put your images there",
        dir.display()
    )]
    EmptyDir {
        /// The folder.
        dir: PathBuf,
    },

    /// An image folder with fewer than two classes.
    #[error(
        "{} holds {} class folder{}{} — a classifier needs at least 2: put one subfolder of PNG \
         or JPEG images per class in it",
        dir.display(),
        found.len(),
        if found.len() == 1 { "" } else { "s" },
        if found.is_empty() { String::new() } else { format!(" ({})", found.join(", ")) }
    )]
    FewClasses {
        /// The folder.
        dir: PathBuf,
        /// The class folders found.
        found: Vec<String>,
    },

    /// An image folder with more classes than labels of a byte can name.
    #[error(
        "{} holds {found} class folders; at most {max} classes are supported",
        dir.display(),
        max = folder::MAX_CLASSES
    )]
    TooManyClasses {
        /// The folder.
        dir: PathBuf,
        /// The class folders found.
        found: usize,
    },

    /// A class folder without an image.
    #[error(
        "{} holds no PNG or JPEG image (.png, .jpg, .jpeg) — put the class's images in it, or \
         remove the folder",
        path.display()
    )]
    EmptyClass {
        /// The class folder.
        path: PathBuf,
    },

    /// A file with an image's extension that does not decode.
    #[error(
        "{} is not a readable PNG or JPEG image ({why}) — replace or remove the file",
        path.display()
    )]
    BadImage {
        /// The file.
        path: PathBuf,
        /// What the decoder said.
        why: String,
    },

    /// Images of two sizes in a folder read without `--image-size`.
    #[error(
        "{} is {}×{} pixels (height×width) but {} is {}×{}: images of different sizes must be \
         resized to one size",
        first.display(),
        first_size.0,
        first_size.1,
        other.display(),
        other_size.0,
        other_size.1
    )]
    MixedSizes {
        /// The first image read.
        first: PathBuf,
        /// Its height and width.
        first_size: (usize, usize),
        /// An image of another size.
        other: PathBuf,
        /// Its height and width.
        other_size: (usize, usize),
    },

    /// An image size that does not parse as `HxW`.
    #[error("`{given}` is not an image size: {why}")]
    BadImageSize {
        /// The text given.
        given: String,
        /// What is wrong with it.
        why: String,
    },

    /// A validation split outside (0, 1).
    #[error("a validation split of {given} is not a fraction between 0 and 1 (both excluded)")]
    ValSplit {
        /// The fraction given.
        given: f64,
    },

    /// A split asked of a folder that has a `val/` already.
    #[error(
        "{} holds the validation images already, and a split of the training images was asked \
         for too: choose one",
        dir.display()
    )]
    ValTwice {
        /// The folder.
        dir: PathBuf,
    },

    /// A subfolder of `val/` that names no training class.
    #[error(
        "{} is not a training class ({}) — each subfolder of val/ must be named as a class folder \
         beside it",
        path.display(),
        classes.join(", ")
    )]
    ValUnknownClass {
        /// The subfolder.
        path: PathBuf,
        /// The training classes.
        classes: Vec<String>,
    },

    /// A `val/` folder without an image in its class folders.
    #[error(
        "{} holds no PNG or JPEG image in class subfolders — put validation images in \
         val/<class>/, or remove it",
        dir.display()
    )]
    ValEmpty {
        /// The `val/` folder.
        dir: PathBuf,
    },

    /// A split too small to hold out one image.
    #[error(
        "a validation split of {fraction} holds out no image of the {total} (each class keeps at \
         least one for training) — ask for a larger fraction or add images"
    )]
    SplitTooSmall {
        /// The fraction asked for.
        fraction: f64,
        /// The training images.
        total: usize,
    },

    /// Evaluation asked of a set that has no validation images.
    #[error(
        "{name} has no validation images to evaluate on: it has no val/ folder, and its run split \
         none of its training images off"
    )]
    NoValidation {
        /// The set, for people.
        name: String,
    },

    /// Images asked for in a channel count other than 1 or 3.
    #[error("images are read with 1 channel (greyscale) or 3 (RGB), not {channels}")]
    FolderChannels {
        /// The channels asked for.
        channels: usize,
    },

    /// Folder options (a size, a split) given for data that is not an image
    /// folder.
    #[error(
        "{} holds {name}, not an image folder: resizing and validation splits apply to image \
         folders only",
        dir.display()
    )]
    NotAFolder {
        /// The data's path.
        dir: PathBuf,
        /// What it holds, in words.
        name: String,
    },

    /// Images asked of a path that holds another kind of data.
    #[error("{} holds {}, not images", path.display(), holds.describe())]
    NotImages {
        /// The path.
        path: PathBuf,
        /// What it holds.
        holds: DataKind,
    },

    /// A text corpus or a treebank that cannot be used.
    #[error(transparent)]
    Text(#[from] text::TextError),

    /// A `--data` value that is not a directory or a synthetic source.
    #[error("`{given}` is not a data source: {why}")]
    BadSource {
        /// The text given.
        given: String,
        /// What is wrong with it.
        why: String,
    },

    /// A synthetic set with an empty split.
    #[error("a synthetic set needs at least 1 training and 1 test image, not {train} and {test}")]
    SyntheticSize {
        /// Training images asked for.
        train: usize,
        /// Test images asked for.
        test: usize,
    },

    /// An images file and a labels file of different counts.
    #[error(
        "{} holds {images} images but {} holds {labels} labels — the two files belong to \
         different sets or one is damaged; re-download both",
        images_path.display(),
        labels_path.display()
    )]
    CountMismatch {
        /// The images file.
        images_path: PathBuf,
        /// Images in it.
        images: usize,
        /// The labels file.
        labels_path: PathBuf,
        /// Labels in it.
        labels: usize,
    },

    /// A file that holds no images.
    #[error(
        "{} holds no images — a set must not be empty; re-download the file",
        path.display()
    )]
    EmptySet {
        /// The file.
        path: PathBuf,
    },

    /// Images of another size than the set's format has.
    #[error(
        "{} holds {rows}×{cols} images but the model expects {expected_rows}×{expected_cols}",
        path.display()
    )]
    ImageSize {
        /// The file.
        path: PathBuf,
        /// Its images' rows.
        rows: usize,
        /// Its images' columns.
        cols: usize,
        /// The rows expected.
        expected_rows: usize,
        /// The columns expected.
        expected_cols: usize,
    },

    /// A label past the set's classes.
    #[error(
        "{} has label {label} at index {index}, but there are only {classes} classes — the file \
         is corrupt or of another data set; re-download it",
        path.display()
    )]
    LabelOutOfRange {
        /// The labels file.
        path: PathBuf,
        /// The label's index in it.
        index: usize,
        /// The label.
        label: u8,
        /// The set's classes.
        classes: usize,
    },

    /// `--train-limit` past the training images.
    #[error("a limit of {requested} training images is out of range: the training set has {available}")]
    TrainLimit {
        /// The limit.
        requested: usize,
        /// The training images.
        available: usize,
    },
    /// `--test-limit` past the test images.
    #[error("a limit of {requested} test images is out of range: the test set has {available}")]
    TestLimit {
        /// The limit.
        requested: usize,
        /// The test images.
        available: usize,
    },
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
