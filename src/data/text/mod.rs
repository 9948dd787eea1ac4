//! Text on the host: a character corpus read window by window for language
//! models, and the Stanford Sentiment Treebank's trees, their sentences and
//! the minibatches of sentences a classifier trains on.
//!
//! - [`corpus`]: a text file's bytes as tokens over its sorted distinct
//!   bytes, split 90% / 10% into training and validation;
//! - [`windows`]: a split cut into `B` contiguous streams read `T` tokens at
//!   a time, so a stream's recurrent state carries from one window to the
//!   next (truncated backpropagation through time);
//! - [`tree`]: one PTB-style tree, parsed from one line;
//! - [`treebank`]: SST's three files of trees;
//! - [`vocab`]: words to ids, with an unknown word;
//! - [`sentences`]: a split's sentences as ids with their root labels, in
//!   five classes or two;
//! - [`batches`]: lengths grouped into a few buckets and an epoch's
//!   minibatches of sentences, each padded to its bucket's length.
//!
//! Invariants:
//! - Everything is read and checked before anything runs: a malformed file
//!   is a [`TextError`] (inside [`super::DataError`]) naming the file and,
//!   for a tree, its line and column; nothing here panics on bad input.
//! - Every order (vocabularies, buckets, an epoch's batches) is a pure
//!   function of the files and the seed, the same on every platform.

pub mod batches;
pub mod corpus;
pub mod sentences;
pub mod tree;
pub mod treebank;
pub mod vocab;
pub mod windows;

use std::path::PathBuf;

pub use batches::{BatchRows, LengthBuckets, SentenceBatches, PADDING_ROW};
pub use corpus::CharCorpus;
pub use sentences::{Classes, Sentences, SentimentSet};
pub use tree::{Node, Tree};
pub use treebank::Treebank;
pub use vocab::{Vocab, UNKNOWN, UNKNOWN_WORD};
pub use windows::Windows;

/// What can be wrong with a text data set or with how it is asked to be
/// cut. Each message gives the sizes involved; the CLI adds the flags.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    #[error(
        "{}:{line}:{column}: {why} — each line must hold one tree such as `(3 (2 It) (4 (2 's) \
         (2 fine)))`: a label 0–4 and either a word or two subtrees, in brackets",
        path.display()
    )]
    TreeSyntax {
        path: PathBuf,
        /// 1-based.
        line: usize,
        /// 1-based, in characters.
        column: usize,
        why: String,
    },

    #[error("{} holds no trees — re-download it", path.display())]
    NoTrees { path: PathBuf },

    #[error(
        "{} is not text: it has a NUL byte at offset {offset} (an image or compressed file?) — a \
         character corpus is a plain text file",
        path.display()
    )]
    NotText { path: PathBuf, offset: usize },

    #[error("{} is empty — a character corpus needs some text", path.display())]
    EmptyCorpus { path: PathBuf },

    #[error("cannot cut text into windows of {seq_len} tokens in {streams} streams: both must be at least 1")]
    ZeroWindow { streams: usize, seq_len: usize },

    #[error(
        "the {split} split has {tokens} tokens, too few for {streams} streams of one window of \
         {seq_len} tokens: that needs at least {needed} (each window's targets are the next \
         tokens); use fewer streams or shorter windows"
    )]
    SplitTooShort {
        split: &'static str,
        tokens: usize,
        streams: usize,
        seq_len: usize,
        needed: usize,
    },

    #[error("window {index} does not exist: an epoch has {count} windows")]
    NoSuchWindow { index: usize, count: usize },

    #[error("a window is [{streams}, {seq_len}] tokens, but the buffers hold {inputs} and {targets}")]
    WindowBuffers {
        streams: usize,
        seq_len: usize,
        inputs: usize,
        targets: usize,
    },

    #[error("sentiment has 5 classes or 2 (neutral sentences dropped), not {given}")]
    Classes { given: usize },

    #[error("cannot group sentences into {buckets} buckets of batches of {batch}: both must be at least 1")]
    ZeroBatches { buckets: usize, batch: usize },

    #[error("there are no sentence lengths to choose buckets from")]
    NoLengths,

    #[error(
        "sentence {index} has {length} tokens, longer than the longest bucket ({longest}) — \
         choose the buckets from lengths that include it"
    )]
    SentenceTooLong {
        index: usize,
        length: usize,
        longest: usize,
    },

    #[error("batch {index} does not exist: an epoch has {count} batches")]
    NoSuchBatch { index: usize, count: usize },

    #[error(
        "a batch of {batch} sentences of up to {seq_len} tokens needs buffers of {tokens_needed} \
         tokens and {batch} lengths and labels, but they hold {tokens}, {lengths} and {labels}"
    )]
    BatchBuffers {
        batch: usize,
        seq_len: usize,
        tokens_needed: usize,
        tokens: usize,
        lengths: usize,
        labels: usize,
    },
}

/// The tests' view of the shipped text data sets.
#[cfg(test)]
pub(crate) mod shipped {
    use std::path::PathBuf;

    pub fn tiny_shakespeare() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/tinyshakespeare/input.txt")
    }

    pub fn sst() -> PathBuf {
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("data/sst")
    }
}
