//! What a network is to the engine: parameters declared on a
//! [`ParamBuilder`], and a forward pass on a [`Step`] in a [`Mode`].

use super::params::ParamBuilder;
use super::tree_lstm::Forest;
use crate::memory::Buf;
use crate::ops::dropout::DropoutSeed;
use crate::tensor::{Labels, Param, Shape, Tensor};
use crate::Result;
use crate::{Error, Step};
use std::fmt;
use std::sync::Arc;

/// Training draws dropout masks; evaluation does not drop (and, for
/// batch-norm, uses the running statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// A training step: dropout drops, batch-norm normalises by the batch.
    Train {
        /// Where the step's dropout masks are drawn from.
        dropout: DropoutSeed,
        /// Where this batch starts in the step's whole batch (a
        /// data-parallel shard), so its rows draw the masks they would draw
        /// on one device.
        first_row: usize,
    },
    /// Evaluation: nothing dropped, batch-norm's running statistics used.
    Eval,
}

/// What a model is built for, taken from the data set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Input {
    /// One example: `[channels, rows, cols]` of an image; `[T]`, the
    /// tokens a stream reads per step, for a model of [`Reads::Tokens`].
    pub example: Shape,
    /// The classes out; for a model of tokens, the vocabulary (its ids in
    /// and its classes out alike).
    pub classes: usize,
}

/// What a model's forward pass reads, so that a model and a task that do
/// not fit are refused before anything is built.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Reads {
    /// A float tensor `[N, …example]`: images.
    Pixels,
    /// Token ids, time-major windows `[T, B]` (a language model's).
    Tokens,
    /// Sentences of token ids, `[T, B]` time-major and right-padded, each
    /// read at its own length (a sentence classifier's).
    SentenceIds,
    /// Parse trees: their shapes on the host and their words' ids, every
    /// node classified (a Tree-LSTM's).
    Trees,
}

impl Reads {
    /// In words, for messages: "images".
    pub fn describe(self) -> &'static str {
        match self {
            Reads::Pixels => "images",
            Reads::Tokens => "token ids",
            Reads::SentenceIds => "sentences of token ids",
            Reads::Trees => "parse trees",
        }
    }
}

/// A window of token ids for `streams` streams of `steps` tokens each, as
/// `[T, B]` time-major ids (`ids[t·B + b]` is stream `b`'s token at step
/// `t`), and where the model keeps what each stream carries to its next
/// window.
#[derive(Debug, Clone, Copy)]
pub struct Tokens<'s> {
    /// The ids, `[T, B]` time-major.
    pub ids: Labels<'s>,
    /// `T`: tokens each stream reads this window.
    pub steps: usize,
    /// `B`: the streams.
    pub streams: usize,
    /// [`Model::carried`] floats per stream, stream-minor within each of the
    /// model's pieces of state (the model lays them out), in the
    /// persistent region: read as the window's initial state, written with
    /// its final one. Empty for a model that carries nothing.
    pub carried: Buf<f32>,
}

/// A batch of `batch` sentences right-padded to `steps` words, as `[T, B]`
/// time-major ids (`ids[t·B + b]` is sentence `b`'s word `t`; words past a
/// sentence's length are padding), and where each sentence ends: `last[b]`
/// is the row of a time-major `[T·B, …]` output at its last word,
/// `(length − 1)·B + b`. A model reads each sentence's state there, so the
/// padding after it changes nothing.
#[derive(Debug, Clone, Copy)]
pub struct SentenceInput<'s> {
    /// The word ids, `[T, B]` time-major, right-padded.
    pub ids: Labels<'s>,
    /// Each sentence's row at its last word, `(length − 1)·B + b`.
    pub last: Labels<'s>,
    /// `T`: the longest sentence's words (the bucket's length).
    pub steps: usize,
    /// `B`: the sentences.
    pub batch: usize,
}

/// A batch of parse trees: their shapes (and level plan) on the host, and
/// the ids of their leaves' words on the device, tree by tree, each tree's
/// in sentence order. A model gives every node's logits, tree by tree,
/// each tree's nodes in post-order.
#[derive(Debug, Clone)]
pub struct TreeInput<'s> {
    /// Word ids: each leaf's, `[Σ leaves]`, or with `leaves` each of the
    /// batch's distinct words once.
    pub words: Labels<'s>,
    /// Each leaf's row of `words`, `[Σ leaves]`, where `words` lists
    /// distinct words ([`crate::nn::TreeLstm::forward_levels_shared`]).
    pub leaves: Option<Labels<'s>>,
    /// The trees, built before the step (a task's epoch makes them), so a
    /// step only reads them.
    pub forest: Arc<Forest>,
    /// Every node of one height across the trees at once
    /// ([`crate::nn::TreeLstm::forward_levels`]) rather than one node at
    /// a time in post-order.
    pub levels: bool,
}

/// What a model's forward pass reads: a float tensor, token windows,
/// sentences or trees.
#[derive(Debug, Clone)]
pub enum Batch<'s> {
    /// Images, `[N, channels, rows, cols]`, for [`Reads::Pixels`].
    Images(Tensor<'s>),
    /// A window of token ids, for [`Reads::Tokens`].
    Tokens(Tokens<'s>),
    /// Padded sentences, for [`Reads::SentenceIds`].
    Sentences(SentenceInput<'s>),
    /// Parse trees, for [`Reads::Trees`].
    Trees(TreeInput<'s>),
}

impl<'s> From<Tensor<'s>> for Batch<'s> {
    fn from(x: Tensor<'s>) -> Self {
        Batch::Images(x)
    }
}

impl<'s> From<Tokens<'s>> for Batch<'s> {
    fn from(x: Tokens<'s>) -> Self {
        Batch::Tokens(x)
    }
}

impl<'s> From<TreeInput<'s>> for Batch<'s> {
    fn from(x: TreeInput<'s>) -> Self {
        Batch::Trees(x)
    }
}

impl<'s> From<SentenceInput<'s>> for Batch<'s> {
    fn from(x: SentenceInput<'s>) -> Self {
        Batch::Sentences(x)
    }
}

/// A network: its configuration, its parameters declared on a
/// [`ParamBuilder`] (so every tensor gets its PyTorch `state_dict` name),
/// and its forward pass. Logits come out; the loss is the task's.
pub trait Model: Send + Sync + Sized + 'static {
    /// Its settings (widths, depths), given to [`Model::new`]; their
    /// `Debug` form is what a checkpoint records of them.
    type Config: fmt::Debug + Clone + Send + Sync + 'static;

    /// What its forward pass reads.
    const READS: Reads = Reads::Pixels;

    /// Declares the parameters on `pb` and keeps their handles. Called
    /// twice by [`crate::nn::ParamStore::build`]; must declare the same
    /// tensors both times.
    fn new(config: &Self::Config, input: Input, pb: &ParamBuilder<'_>) -> Result<Self>;

    /// Logits `[N, classes]` for a batch `[N, …input.example]`.
    fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, mode: Mode) -> Result<Tensor<'s>>;

    /// Logits `[T·B, classes]`, time-major, for a window of tokens: a model
    /// of [`Reads::Tokens`] overrides it; one of images refuses.
    fn forward_tokens<'s>(&self, _s: &mut Step<'s>, _x: Tokens<'s>, _mode: Mode) -> Result<Tensor<'s>> {
        Err(Error::shape("forward", "a model of images reads no token ids".into()))
    }

    /// Logits `[B, classes]` for a batch of sentences: a model of
    /// [`Reads::SentenceIds`] overrides it; others refuse.
    fn forward_sentences<'s>(&self, _s: &mut Step<'s>, _x: SentenceInput<'s>, _mode: Mode) -> Result<Tensor<'s>> {
        Err(Error::shape("forward", "a model that reads no sentences".into()))
    }

    /// Logits `[Σ nodes, classes]` for a batch of trees, tree by tree,
    /// each tree's nodes in post-order: a model of [`Reads::Trees`]
    /// overrides it; others refuse.
    fn forward_trees<'s>(&self, _s: &mut Step<'s>, _x: TreeInput<'s>, _mode: Mode) -> Result<Tensor<'s>> {
        Err(Error::shape("forward", "a model that reads no trees".into()))
    }

    /// Floats each stream carries from one window to the next (a recurrent
    /// model's state): 0 for a model that carries nothing.
    fn carried(&self) -> usize {
        0
    }

    /// Its table of word vectors, `[vocab, dim]`, which pretrained vectors
    /// may start from: `None` for a model without one.
    fn word_embedding(&self) -> Option<Param> {
        None
    }
}

/// A built model behind a pointer: what the training loop holds.
pub trait Network: Send + Sync {
    /// The model's output for `x`, images or tokens as it reads.
    fn forward<'s>(&self, s: &mut Step<'s>, x: Batch<'s>, mode: Mode) -> Result<Tensor<'s>>;
    /// See [`Model::carried`].
    fn carried(&self) -> usize;
    /// See [`Model::word_embedding`].
    fn word_embedding(&self) -> Option<Param>;
}

impl<M: Model> Network for M {
    fn forward<'s>(&self, s: &mut Step<'s>, x: Batch<'s>, mode: Mode) -> Result<Tensor<'s>> {
        match x {
            Batch::Images(x) => Model::forward(self, s, x, mode),
            Batch::Tokens(x) => Model::forward_tokens(self, s, x, mode),
            Batch::Sentences(x) => Model::forward_sentences(self, s, x, mode),
            Batch::Trees(x) => Model::forward_trees(self, s, x, mode),
        }
    }

    fn carried(&self) -> usize {
        Model::carried(self)
    }

    fn word_embedding(&self) -> Option<Param> {
        Model::word_embedding(self)
    }
}

type Build = dyn Fn(Input, &ParamBuilder<'_>) -> Result<Box<dyn Network>> + Send + Sync;

/// A model picked by name with its configuration, not yet built: what a
/// run's settings carry, so the training loop builds whatever it is given.
#[derive(Clone)]
pub struct ModelChoice {
    name: &'static str,
    reads: Reads,
    config: String,
    build: Arc<Build>,
}

impl ModelChoice {
    /// Model `M` under `name` (as `--model` spells it) with `config`.
    pub fn new<M: Model>(name: &'static str, config: M::Config) -> Self {
        let text = format!("{config:?}");
        Self {
            name,
            reads: M::READS,
            config: text,
            build: Arc::new(move |input, pb| Ok(Box::new(M::new(&config, input, pb)?) as Box<dyn Network>)),
        }
    }

    /// As `--model` spells it.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// What the model reads.
    pub fn reads(&self) -> Reads {
        self.reads
    }

    /// The name and configuration, as a checkpoint's fingerprint records
    /// them: a resumed run must build the same network.
    pub fn describe(&self) -> String {
        format!("{} {}", self.name, self.config)
    }

    /// Declares the model's parameters on `pb` and returns it.
    pub fn build(&self, input: Input, pb: &ParamBuilder<'_>) -> Result<Box<dyn Network>> {
        (self.build)(input, pb)
    }
}

impl fmt::Debug for ModelChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl serde::Serialize for ModelChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.describe())
    }
}
