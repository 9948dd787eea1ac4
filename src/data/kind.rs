//! What a data path holds, recognised by its files, so a run can pick the
//! task and the reader that fit before reading anything.
//!
//! - a file: a text corpus (a character language model's data);
//! - a directory with `train.txt`, `dev.txt` and `test.txt`: a treebank;
//! - anything else (a directory, a synthetic source, or a path that does
//!   not exist, which the image reader then reports as missing): images.

use std::path::Path;

use super::text::treebank;
use super::DataSource;

/// The kinds of data set a `DataSource` can hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DataKind {
    /// An image-classification set: MNIST, CIFAR-10 or a synthetic one.
    Images,
    /// A plain text file, read as characters.
    Corpus,
    /// A directory of sentiment trees, one a line, in three splits.
    Treebank,
}

impl DataKind {
    /// What `path` holds, by its files.
    pub fn of_path(path: &Path) -> DataKind {
        if path.is_file() {
            DataKind::Corpus
        } else if path.is_dir() && treebank::present(path) {
            DataKind::Treebank
        } else {
            DataKind::Images
        }
    }

    /// What `source` holds.
    pub fn of(source: &DataSource) -> DataKind {
        match source {
            DataSource::Dir(path) => Self::of_path(path),
            DataSource::Synthetic { .. } => DataKind::Images,
        }
    }

    /// The kind in words, for messages: "a text corpus".
    pub fn describe(self) -> &'static str {
        match self {
            DataKind::Images => "an image data set",
            DataKind::Corpus => "a text corpus",
            DataKind::Treebank => "a treebank of sentences",
        }
    }

    /// What one step's batch of this data holds, counted, for messages that
    /// count a batch: "images", "streams" (of characters, each reading its
    /// next window), "sentences".
    pub fn batch_holds(self) -> &'static str {
        match self {
            DataKind::Images => "images",
            DataKind::Corpus => "streams",
            DataKind::Treebank => "sentences",
        }
    }

    /// What an epoch of this data reads, one example at a time, for
    /// messages that count them: "images", "windows of characters" (each
    /// stream's next `seq_len` characters), "sentences".
    pub fn epoch_reads(self) -> &'static str {
        match self {
            DataKind::Images => "images",
            DataKind::Corpus => "windows of characters",
            DataKind::Treebank => "sentences",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::testutil::TempDir;
    use crate::data::{DataError, ImageSet};

    #[test]
    fn paths_are_recognised_by_their_files() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
        assert_eq!(DataKind::of_path(&root.join("mnist")), DataKind::Images);
        assert_eq!(
            DataKind::of_path(&root.join("tinyshakespeare/input.txt")),
            DataKind::Corpus
        );
        assert_eq!(DataKind::of_path(&root.join("sst")), DataKind::Treebank);
        assert_eq!(DataKind::of_path(&root.join("absent")), DataKind::Images);
        assert_eq!(
            DataKind::of(&DataSource::parse("synthetic:cifar10:4").unwrap()),
            DataKind::Images
        );
        let dir = TempDir::new("kind");
        for name in ["train.txt", "dev.txt"] {
            dir.write(name, b"(2 a)\n");
        }
        assert_eq!(
            DataKind::of_path(dir.path()),
            DataKind::Images,
            "two of the three files"
        );
    }

    #[test]
    fn each_kind_names_what_its_epochs_read() {
        let reads = [DataKind::Images, DataKind::Corpus, DataKind::Treebank].map(DataKind::epoch_reads);
        assert_eq!(reads, ["images", "windows of characters", "sentences"]);
    }

    #[test]
    fn the_image_reader_refuses_text() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("data");
        for (path, kind) in [
            ("tinyshakespeare/input.txt", DataKind::Corpus),
            ("sst", DataKind::Treebank),
        ] {
            match ImageSet::load(&root.join(path)) {
                Err(DataError::NotImages { holds, .. }) => assert_eq!(holds, kind),
                other => panic!("{path}: expected NotImages, got {other:?}"),
            }
        }
    }
}
