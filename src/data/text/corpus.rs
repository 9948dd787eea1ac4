//! A character corpus: one text file's bytes as tokens, for a character
//! language model.
//!
//! Invariants of a [`CharCorpus`]:
//! - its vocabulary is the file's distinct bytes in ascending order, and a
//!   token is a byte's index in it, so the same file always gives the same
//!   tokens;
//! - the training split is the first `⌊9n/10⌋` bytes of the `n` and the
//!   validation split the rest, as `data[:int(0.9 * n)]` cuts it in
//!   Python (the usual split of tiny-shakespeare: 1,003,854 and 111,540);
//! - the vocabulary covers both splits (it is drawn from the whole file), so
//!   validation has no unknown characters.

use std::path::Path;

use super::windows::Windows;
use super::TextError;
use crate::data::mnist::Checksums;
use crate::data::DataError;

/// A text file's bytes as tokens, split for training and validation.
#[derive(Debug, Clone)]
pub struct CharCorpus {
    vocab: Vec<u8>,
    train: Vec<u32>,
    valid: Vec<u32>,
}

impl CharCorpus {
    /// Reads the text file at `path`, checking it against a `SHA256SUMS`
    /// beside it when that lists the file.
    pub fn load(path: &Path) -> Result<Self, DataError> {
        let bytes = std::fs::read(path).map_err(|source| DataError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        let dir = path.parent().unwrap_or(Path::new("."));
        Checksums::load(dir)?.check(path, &bytes)?;
        if let Some(offset) = bytes.iter().position(|&b| b == 0) {
            let path = path.to_path_buf();
            return Err(TextError::NotText { path, offset }.into());
        }
        if bytes.is_empty() {
            return Err(TextError::EmptyCorpus {
                path: path.to_path_buf(),
            }
            .into());
        }
        Ok(Self::from_bytes(&bytes))
    }

    /// The corpus of `bytes`, whatever they hold.
    pub fn from_bytes(bytes: &[u8]) -> Self {
        let mut present = [false; 256];
        for &b in bytes {
            present[usize::from(b)] = true;
        }
        let vocab: Vec<u8> = (0..=u8::MAX).filter(|&b| present[usize::from(b)]).collect();
        let mut token = [0u32; 256];
        for (id, &b) in vocab.iter().enumerate() {
            token[usize::from(b)] = id as u32;
        }
        let tokens = bytes.iter().map(|&b| token[usize::from(b)]);
        // ⌊9n/10⌋ without overflow for any n a Vec can hold.
        let cut = bytes.len() / 10 * 9 + bytes.len() % 10 * 9 / 10;
        let mut train: Vec<u32> = tokens.collect();
        let valid = train.split_off(cut);
        CharCorpus { vocab, train, valid }
    }

    /// The distinct bytes, ascending; token `i` is byte `vocab()[i]`.
    pub fn vocab(&self) -> &[u8] {
        &self.vocab
    }

    /// The training split's tokens.
    pub fn train(&self) -> &[u32] {
        &self.train
    }

    /// The validation split's tokens.
    pub fn valid(&self) -> &[u32] {
        &self.valid
    }

    /// The bytes `tokens` stand for (a token outside the vocabulary is
    /// skipped): for showing samples to people.
    pub fn decode(&self, tokens: &[u32]) -> Vec<u8> {
        tokens
            .iter()
            .filter_map(|&t| self.vocab.get(t as usize).copied())
            .collect()
    }

    /// The training split cut into `streams` streams read `seq_len` tokens
    /// at a time.
    pub fn train_windows(&self, streams: usize, seq_len: usize) -> Result<Windows<'_>, TextError> {
        Windows::new("training", &self.train, streams, seq_len)
    }

    /// The validation split cut likewise.
    pub fn valid_windows(&self, streams: usize, seq_len: usize) -> Result<Windows<'_>, TextError> {
        Windows::new("validation", &self.valid, streams, seq_len)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::testutil::{sha256_hex, TempDir};
    use crate::data::text::shipped;

    #[test]
    fn the_vocabulary_is_the_sorted_distinct_bytes() {
        let corpus = CharCorpus::from_bytes(b"hello, world");
        assert_eq!(corpus.vocab(), b" ,dehlorw");
        let all: Vec<u32> = corpus.train().iter().chain(corpus.valid()).copied().collect();
        assert_eq!(all, [4, 3, 5, 5, 6, 1, 0, 8, 6, 7, 5, 2]);
        assert_eq!(corpus.decode(&all), b"hello, world");
    }

    #[test]
    fn the_split_is_the_first_nine_tenths() {
        for (n, train) in [
            (1, 0),
            (9, 8),
            (10, 9),
            (11, 9),
            (19, 17),
            (20, 18),
            (1_115_394, 1_003_854),
        ] {
            let bytes: Vec<u8> = (0..n).map(|i| (i % 7) as u8 + b'a').collect();
            let corpus = CharCorpus::from_bytes(&bytes);
            assert_eq!(
                (corpus.train().len(), corpus.valid().len()),
                (train, n - train),
                "{n} bytes"
            );
            // The boundary is in the right place, not just the sizes.
            let joined = corpus.decode(&[corpus.train(), corpus.valid()].concat());
            assert_eq!(joined, bytes, "{n} bytes");
        }
    }

    #[test]
    fn the_shipped_tiny_shakespeare_loads() {
        let corpus = CharCorpus::load(&shipped::tiny_shakespeare()).unwrap();
        assert_eq!(corpus.vocab().len(), 65);
        assert_eq!((corpus.train().len(), corpus.valid().len()), (1_003_854, 111_540));
        assert_eq!(&corpus.decode(&corpus.train()[..14]), b"First Citizen:");
        assert_eq!(corpus.vocab()[..3], *b"\n !");
    }

    #[test]
    fn the_shipped_copy_matches_its_checksum() {
        let path = shipped::tiny_shakespeare();
        let sums = std::fs::read_to_string(path.with_file_name("SHA256SUMS")).unwrap();
        let listed = format!("{}  input.txt", sha256_hex(&std::fs::read(&path).unwrap()));
        assert_eq!(sums.trim(), listed);
    }

    #[test]
    fn a_corrupt_copy_fails_its_checksum() {
        let dir = TempDir::new("corpus-sum");
        let path = dir.write("input.txt", b"To be, or not to be");
        dir.write(
            "SHA256SUMS",
            format!("{}  input.txt\n", sha256_hex(b"To be, or not to be?")).as_bytes(),
        );
        let err = CharCorpus::load(&path).unwrap_err();
        assert!(matches!(err, DataError::Checksum { .. }), "{err:?}");
        // Unlisted files are not checked.
        let other = dir.write("other.txt", b"To be");
        assert_eq!(CharCorpus::load(&other).unwrap().vocab(), b" Tbeo");
    }

    #[test]
    fn binary_and_empty_files_are_refused() {
        let dir = TempDir::new("corpus-bad");
        let binary = dir.write("images.gz", b"\x1f\x8b\x08\x00\x00rest");
        match CharCorpus::load(&binary) {
            Err(DataError::Text(TextError::NotText { offset, .. })) => assert_eq!(offset, 3),
            other => panic!("expected NotText, got {other:?}"),
        }
        let empty = dir.write("empty.txt", b"");
        let err = CharCorpus::load(&empty).unwrap_err();
        assert!(matches!(err, DataError::Text(TextError::EmptyCorpus { .. })), "{err:?}");
        assert!(err.to_string().contains("empty.txt"), "{err}");
        let missing = CharCorpus::load(&dir.path().join("absent.txt")).unwrap_err();
        assert!(matches!(missing, DataError::Io { .. }), "{missing:?}");
    }
}
