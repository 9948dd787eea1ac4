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
//! - [`vectors`]: pretrained word vectors (GloVe's text format) for a
//!   vocabulary;
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
pub mod vectors;
pub mod vocab;
pub mod windows;

use std::path::PathBuf;

pub use batches::{BatchRows, LengthBuckets, SentenceBatches, PADDING_ROW};
pub use corpus::CharCorpus;
pub use sentences::{Classes, Sentences, SentimentSet};
pub use tree::{Node, Tree};
pub use treebank::Treebank;
pub use vectors::WordVectors;
pub use vocab::{Vocab, UNKNOWN, UNKNOWN_WORD};
pub use windows::Windows;

/// What can be wrong with a text data set or with how it is asked to be
/// cut. Each message gives the sizes involved; the CLI adds the flags.
#[derive(Debug, thiserror::Error)]
pub enum TextError {
    /// A line of a treebank that is not one bracketed binary tree.
    #[error(
        "{}:{line}:{column}: {why} — each line must hold one tree such as `(3 (2 It) (4 (2 's) \
         (2 fine)))`: a label 0–4 and either a word or two subtrees, in brackets",
        path.display()
    )]
    TreeSyntax {
        /// The file.
        path: PathBuf,
        /// 1-based.
        line: usize,
        /// 1-based, in characters.
        column: usize,
        /// What the parser found there.
        why: String,
    },

    /// A treebank split with no tree.
    #[error("{} holds no trees — re-download it", path.display())]
    NoTrees {
        /// The split's file.
        path: PathBuf,
    },

    /// A corpus with a NUL byte: not text.
    #[error(
        "{} is not text: it has a NUL byte at offset {offset} (an image or compressed file?) — a \
         character corpus is a plain text file",
        path.display()
    )]
    NotText {
        /// The file.
        path: PathBuf,
        /// The NUL byte's offset.
        offset: usize,
    },

    /// A corpus with no text.
    #[error("{} is empty — a character corpus needs some text", path.display())]
    EmptyCorpus {
        /// The file.
        path: PathBuf,
    },

    /// Windows of no streams or no tokens.
    #[error("cannot cut text into windows of {seq_len} tokens in {streams} streams: both must be at least 1")]
    ZeroWindow {
        /// Streams asked for (the batch).
        streams: usize,
        /// Tokens a window asked for.
        seq_len: usize,
    },

    /// A corpus split too short for one window of every stream.
    #[error(
        "the {split} split has {tokens} tokens, too few for {streams} streams of one window of \
         {seq_len} tokens: that needs at least {needed} (each window's targets are the next \
         tokens); use fewer streams or shorter windows"
    )]
    SplitTooShort {
        /// "training" or "validation".
        split: &'static str,
        /// The split's tokens.
        tokens: usize,
        /// Streams asked for (the batch).
        streams: usize,
        /// Tokens a window reads.
        seq_len: usize,
        /// The fewest tokens that would do.
        needed: usize,
    },

    /// A window past the epoch's last.
    #[error("window {index} does not exist: an epoch has {count} windows")]
    NoSuchWindow {
        /// The window asked for.
        index: usize,
        /// Windows an epoch has.
        count: usize,
    },

    /// Buffers of the wrong length for a window.
    #[error("a window is [{streams}, {seq_len}] tokens, but the buffers hold {inputs} and {targets}")]
    WindowBuffers {
        /// Streams in the window.
        streams: usize,
        /// Tokens each stream reads.
        seq_len: usize,
        /// Tokens the input buffer holds.
        inputs: usize,
        /// Tokens the target buffer holds.
        targets: usize,
    },

    /// A class count sentiment does not have.
    #[error("sentiment has 5 classes or 2 (neutral sentences dropped), not {given}")]
    Classes {
        /// The classes asked for.
        given: usize,
    },

    /// Sentence batches of no buckets or no sentences.
    #[error("cannot group sentences into {buckets} buckets of batches of {batch}: both must be at least 1")]
    ZeroBatches {
        /// Length buckets asked for.
        buckets: usize,
        /// Sentences a batch asked for.
        batch: usize,
    },

    /// Buckets asked of a split with no sentence.
    #[error("there are no sentence lengths to choose buckets from")]
    NoLengths,

    /// A sentence longer than every bucket.
    #[error(
        "sentence {index} has {length} tokens, longer than the longest bucket ({longest}) — \
         choose the buckets from lengths that include it"
    )]
    SentenceTooLong {
        /// The sentence, in its split.
        index: usize,
        /// Its tokens.
        length: usize,
        /// The longest bucket's length.
        longest: usize,
    },

    /// A batch past the epoch's last.
    #[error("batch {index} does not exist: an epoch has {count} batches")]
    NoSuchBatch {
        /// The batch asked for.
        index: usize,
        /// Batches an epoch has.
        count: usize,
    },

    /// A word-vectors file with a line that is not a word and its numbers.
    #[error(
        "{}:{line}: {why} — a word-vectors file holds a word a line, then its numbers separated \
         by spaces (GloVe's text format)",
        path.display()
    )]
    VectorsSyntax {
        /// The file.
        path: PathBuf,
        /// 1-based.
        line: usize,
        /// What was wrong.
        why: String,
    },

    /// A word-vectors file with no vector.
    #[error("{} holds no word vectors — is it the right file?", path.display())]
    NoVectors {
        /// The file.
        path: PathBuf,
    },

    /// Word vectors of another length than the embedding's.
    #[error(
        "{} gives vectors of {dim} numbers, but the embedding has {embed}: the embedding must be \
         {dim} wide to take them",
        path.display()
    )]
    VectorsDim {
        /// The file.
        path: PathBuf,
        /// Numbers per word in the file.
        dim: usize,
        /// The embedding's width.
        embed: usize,
    },

    /// Buffers of the wrong length for a batch of sentences.
    #[error(
        "a batch of {batch} sentences of up to {seq_len} tokens needs buffers of {tokens_needed} \
         tokens and {batch} lengths and labels, but they hold {tokens}, {lengths} and {labels}"
    )]
    BatchBuffers {
        /// Sentences in the batch.
        batch: usize,
        /// The bucket's length, in tokens.
        seq_len: usize,
        /// Tokens the batch needs.
        tokens_needed: usize,
        /// Tokens the token buffer holds.
        tokens: usize,
        /// Entries the lengths buffer holds.
        lengths: usize,
        /// Entries the labels buffer holds.
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
