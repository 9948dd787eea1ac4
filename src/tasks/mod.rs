//! Tasks: what a batch means. A task turns the data resident in the
//! persistent region into a step's input and targets, the model's output
//! into a loss, and what evaluation reads back into a metric. The training
//! loop holds one as a `Box<dyn Task>` and names none (`tests/layering.rs`).
//!
//! Image classification ([`Classification`]) takes images and scores
//! accuracy; language modelling ([`LanguageModel`]) takes a character
//! corpus, gathers a window of token ids `[T, B]` at the cursor (the next
//! `[T, B]` ids as targets), takes the mean next-token cross-entropy as its
//! loss and perplexity as its metric, and carries each stream's recurrent
//! state from one window to the next. A tree task will gather a batch of
//! parse trees (their nodes batched by level) and sum a loss over every
//! node. Each reads its own batch from device memory at the step cursor, so
//! a captured graph draws the next batch on every replay.
//!
//! Adding one: a file here with its config (a [`TaskConfig`]) and its
//! [`Task`], and a line in the CLI where it is picked.

mod classification;
mod language_model;
mod sentences;
mod tree_sentiment;

pub use classification::{Classification, ClassificationConfig};
pub use language_model::{LanguageModel, LanguageModelConfig};
pub use sentences::{SentenceClassification, SentenceClassificationConfig, MAX_BUCKETS};
pub use tree_sentiment::{TreeBatching, TreeSentiment, TreeSentimentConfig};

use crate::data::text::{Vocab, WordVectors};
use crate::data::{DataError, DataSet};
use crate::nn::{Batch, Input, Reads};
use crate::ops::gather::BatchAt;
use crate::tensor::Persistent;
use crate::tensor::{Labels, Tensor};
use crate::Engine;
use crate::Result;
use crate::Step;
use std::fmt;
use std::path::Path;
use std::sync::Arc;

/// A task over a data set resident in the persistent region.
pub trait Task: Send + Sync {
    /// What the model is built for.
    fn input(&self) -> Input;
    /// Examples in the training split, which the epoch's order shuffles.
    fn train_len(&self) -> usize;
    /// Examples in the test split, which evaluation walks.
    fn test_len(&self) -> usize;
    /// The training examples `at` points to, as the model's input and the
    /// loss's targets (read from device memory at the cursor, so a
    /// captured graph gathers the next batch on every replay), `length`
    /// long (the step's [`Task::train_length`]).
    fn train_batch<'s>(&self, s: &mut Step<'s>, at: BatchAt, length: usize) -> Result<(Batch<'s>, Labels<'s>)>;
    /// The test examples `indices`, as the model's input, and their targets
    /// where evaluation computes on the device what it reads back.
    fn test_batch<'s>(&self, s: &mut Step<'s>, indices: &[u32]) -> Result<(Batch<'s>, Option<Labels<'s>>)>;
    /// What evaluation reads back of the model's `output` for a test batch
    /// (the logits themselves, unless the task overrides it).
    fn test_readback<'s>(
        &self,
        _s: &mut Step<'s>,
        output: Tensor<'s>,
        _targets: Option<Labels<'s>>,
    ) -> Result<Tensor<'s>> {
        Ok(output)
    }
    /// The loss of the model's `output` against `targets`, as a share of
    /// a mean over `over` examples (a data-parallel rank's shard of a
    /// larger step).
    fn loss<'s>(&self, s: &mut Step<'s>, output: Tensor<'s>, targets: Labels<'s>, over: usize) -> Result<Tensor<'s>>;
    /// Floats evaluation reads back for a test batch of `examples` (rows
    /// of logits, or one loss); for a task whose batches differ, the most
    /// any batch of `examples` reads back (what the host keeps room for).
    fn readback_len(&self, examples: usize) -> usize;
    /// Floats evaluation reads back for the test batch of `examples` from
    /// `first`: [`Task::readback_len`] unless batches differ (trees).
    fn readback_at(&self, _first: usize, examples: usize) -> usize {
        self.readback_len(examples)
    }
    /// The shares of the metric's sums of the test examples from `first`
    /// on, whose readback is `outputs`: how many are correct, or their
    /// loss, first; a task of several figures (trees) uses the others.
    fn score(&self, outputs: &[f32], first: usize) -> Scores;
    /// The metric from the sums of every test batch's [`Task::score`] over
    /// the `examples` of the test set.
    fn metric(&self, sums: Scores, examples: usize) -> Metric;
    /// Called before an epoch's first training step and before evaluation:
    /// a task that carries state between steps resets it here.
    fn reset(&self, _engine: &mut Engine) -> Result<()> {
        Ok(())
    }

    /// The lengths its steps take, each a shape of its own (one step plan
    /// and one captured graph per length): empty for a task whose steps
    /// all have one shape. Fixed once the task is built.
    fn lengths(&self) -> &[usize] {
        &[]
    }

    /// The length of training step `step` of the current epoch (one of
    /// [`Task::lengths`], or 0 if there are none). Allocates nothing.
    fn train_length(&self, _step: usize) -> usize {
        0
    }

    /// The length of the test batch whose first example is `first`.
    fn test_length(&self, _first: usize) -> usize {
        0
    }

    /// What the task made of its data, a line each, for the run's first
    /// lines (a vocabulary, length buckets): nothing unless it says.
    fn describe(&self) -> Vec<String> {
        Vec::new()
    }

    /// A step of each length, for the dry run that plans them all.
    fn samples(&self) -> Vec<LengthSample> {
        Vec::new()
    }

    /// Turns evaluation to the held-out test split, for the figure a run
    /// reports once after its last epoch; returns the split's examples,
    /// or `None` for a task without one (then nothing changes).
    fn use_test_split(&mut self) -> Result<Option<usize>> {
        Ok(None)
    }

    /// Whether every step is a shape of its own, built on the host (a
    /// batch of trees): then steps bump-allocate, no plan is kept and no
    /// graph captured, and until the first epoch begins every training
    /// step is the task's largest, which the dry run sizes the arena by.
    fn dynamic(&self) -> bool {
        false
    }

    /// Puts epoch `epoch` of a run seeded `seed` in the task's own order,
    /// where its steps read it, for a task that does not follow the
    /// session's shuffled order of examples. Called before the epoch's
    /// first step.
    fn begin_epoch(&mut self, _engine: &mut Engine, _seed: u64, _epoch: usize) -> Result<()> {
        Ok(())
    }
}

/// Where a dry run finds a step of one length ([`Task::samples`]): a
/// training step of the epoch's first order and the first example of a
/// test batch, where the length has them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LengthSample {
    /// The step length sampled, in tokens.
    pub length: usize,
    /// A training step of that length, if the epoch's first order has one.
    pub train_step: Option<usize>,
    /// The first example of a test batch of that length, if there is one.
    pub test_first: Option<usize>,
}

/// Figures a test batch adds to evaluation's sums ([`Task::score`]): the
/// first is the metric's own (correct examples, or a loss).
pub type Scores = [f64; SCORES];

/// How many figures [`Scores`] holds.
pub const SCORES: usize = 3;

/// What evaluation measured.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub enum Metric {
    /// The fraction of the test set classified correctly, in [0, 1].
    Accuracy(f64),
    /// The mean cross-entropy per token of the validation split, in nats.
    TokenLoss(f64),
    /// A treebank's trees, every node classified: the roots classified
    /// correctly (the sentences, five classes), the non-neutral roots whose
    /// sign (classes 0–1 against 3–4) is right, and every node correct,
    /// each a fraction in [0, 1].
    TreeAccuracy {
        /// Root accuracy over five classes.
        root: f64,
        /// Root accuracy as positive or negative, neutral roots dropped.
        binary: f64,
        /// Accuracy over every node (phrase) of every tree.
        nodes: f64,
    },
}

impl Metric {
    /// The accuracy, for a metric that is one.
    pub fn accuracy(self) -> Option<f64> {
        match self {
            Metric::Accuracy(a) | Metric::TreeAccuracy { root: a, .. } => Some(a),
            Metric::TokenLoss(_) => None,
        }
    }

    /// For trees, the non-neutral roots' accuracy by sign.
    pub fn binary_accuracy(self) -> Option<f64> {
        match self {
            Metric::TreeAccuracy { binary, .. } => Some(binary),
            _ => None,
        }
    }

    /// For trees, every node's accuracy.
    pub fn node_accuracy(self) -> Option<f64> {
        match self {
            Metric::TreeAccuracy { nodes, .. } => Some(nodes),
            _ => None,
        }
    }

    /// The mean loss per token.
    pub fn loss(self) -> Option<f64> {
        match self {
            Metric::TokenLoss(l) => Some(l),
            Metric::Accuracy(_) | Metric::TreeAccuracy { .. } => None,
        }
    }

    /// `exp` of the mean loss per token.
    pub fn perplexity(self) -> Option<f64> {
        self.loss().map(f64::exp)
    }

    /// The mean loss per token in bits (per character, for a character
    /// model).
    pub fn bits_per_token(self) -> Option<f64> {
        self.loss().map(|l| l / std::f64::consts::LN_2)
    }

    /// The one number a run is judged by, higher or lower as the metric
    /// goes: the accuracy, or the loss.
    pub fn headline(self) -> f64 {
        match self {
            Metric::Accuracy(v) | Metric::TokenLoss(v) | Metric::TreeAccuracy { root: v, .. } => v,
        }
    }
}

/// What a task is built with besides its data set.
#[derive(Debug, Clone, Copy)]
pub struct BuildArgs {
    /// The run's seed (its random draws are seeded from it).
    pub seed: u64,
    /// Examples per step on one device: images, or a language model's
    /// streams.
    pub batch: usize,
    /// Floats per example the model carries from one step to the next
    /// ([`crate::nn::Model::carried`]).
    pub carried: usize,
}

/// A task's settings, before it is built.
pub trait TaskConfig: fmt::Debug + Clone + Send + Sync + 'static {
    /// Refuses settings that cannot train, whatever the data.
    fn validate(&self) -> Result<()> {
        Ok(())
    }
    /// What the model must read.
    fn reads(&self) -> Reads;
    /// What a model trained on `set` is built for; refuses a set of a kind
    /// the task does not train on.
    fn input_of(&self, set: &DataSet) -> Result<Input>;
    /// Refuses settings that cannot train on `set` with steps of `batch`
    /// examples, before anything is allocated for it.
    fn check(&self, _set: &DataSet, _batch: usize) -> Result<()> {
        Ok(())
    }
    /// What the task draws at random into its batches, as a checkpoint
    /// records it (a resumed run must draw the same): `none` for nothing.
    fn draws(&self) -> String;
    /// Settings of the task a checkpoint must have been made with (a key,
    /// as its flag names it, and a value), beyond the run's own: what
    /// changes which examples an epoch holds or how they are grouped.
    fn fingerprint(&self) -> Vec<(&'static str, String)> {
        Vec::new()
    }
    /// The training examples an epoch of steps of `batch` visits (the
    /// built task's [`Task::train_len`]).
    fn train_len(&self, set: &DataSet, batch: usize) -> Result<usize>;
    /// Uploads `set` into the persistent region and returns the task.
    fn build(&self, set: &DataSet, p: &mut Persistent<'_>, args: BuildArgs) -> Result<Box<dyn Task>>;
    /// The vectors `path` gives the task's words, `embed` numbers each,
    /// as a table by word id: `None` for a task that reads no words.
    fn pretrained(&self, _set: &DataSet, _path: &Path, _embed: usize) -> Result<Option<Pretrained>> {
        Ok(None)
    }
}

/// Pretrained word vectors matched to a task's vocabulary.
#[derive(Debug, Clone, PartialEq)]
pub struct Pretrained {
    /// `[V, embed]`, row `id` word `id`'s vector (zeros where not found).
    pub table: Vec<f32>,
    /// Whether the file gave word `id` a vector.
    pub found: Vec<bool>,
}

/// `path`'s vectors for `vocab`, `embed` numbers each.
fn read_pretrained(path: &Path, vocab: &Vocab, embed: usize) -> Result<Pretrained> {
    let vectors = WordVectors::read(path, vocab)?;
    vectors.check_dim(path, embed).map_err(DataError::from)?;
    Ok(Pretrained {
        table: vectors.table().to_vec(),
        found: (0..vocab.len() as u32).map(|id| vectors.found(id)).collect(),
    })
}

/// A [`TaskConfig`] behind a pointer (`Clone` keeps the trait itself from
/// being one).
trait AnyTaskConfig: Send + Sync {
    fn validate(&self) -> Result<()>;
    fn reads(&self) -> Reads;
    fn input_of(&self, set: &DataSet) -> Result<Input>;
    fn check(&self, set: &DataSet, batch: usize) -> Result<()>;
    fn train_len(&self, set: &DataSet, batch: usize) -> Result<usize>;
    fn build(&self, set: &DataSet, p: &mut Persistent<'_>, args: BuildArgs) -> Result<Box<dyn Task>>;
    fn pretrained(&self, set: &DataSet, path: &Path, embed: usize) -> Result<Option<Pretrained>>;
}

impl<C: TaskConfig> AnyTaskConfig for C {
    fn pretrained(&self, set: &DataSet, path: &Path, embed: usize) -> Result<Option<Pretrained>> {
        TaskConfig::pretrained(self, set, path, embed)
    }

    fn validate(&self) -> Result<()> {
        TaskConfig::validate(self)
    }

    fn reads(&self) -> Reads {
        TaskConfig::reads(self)
    }

    fn input_of(&self, set: &DataSet) -> Result<Input> {
        TaskConfig::input_of(self, set)
    }

    fn check(&self, set: &DataSet, batch: usize) -> Result<()> {
        TaskConfig::check(self, set, batch)
    }

    fn train_len(&self, set: &DataSet, batch: usize) -> Result<usize> {
        TaskConfig::train_len(self, set, batch)
    }

    fn build(&self, set: &DataSet, p: &mut Persistent<'_>, args: BuildArgs) -> Result<Box<dyn Task>> {
        TaskConfig::build(self, set, p, args)
    }
}

/// A task picked by name with its settings, not yet built: what a run's
/// settings carry, so the training loop builds whatever it is given.
#[derive(Clone)]
pub struct TaskChoice {
    name: &'static str,
    settings: String,
    draws: String,
    fingerprint: Vec<(&'static str, String)>,
    config: Arc<dyn AnyTaskConfig>,
}

impl TaskChoice {
    /// Task `C` under `name` with `config`, whose `Debug` form a checkpoint
    /// records.
    pub fn new<C: TaskConfig>(name: &'static str, config: C) -> Self {
        Self {
            name,
            settings: format!("{config:?}"),
            draws: config.draws(),
            fingerprint: config.fingerprint(),
            config: Arc::new(config),
        }
    }

    /// Its name in words ("classification", "language model").
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The name and every setting.
    pub fn describe(&self) -> String {
        format!("{} {}", self.name, self.settings)
    }

    /// See [`TaskConfig::draws`].
    pub fn draws(&self) -> &str {
        &self.draws
    }

    /// See [`TaskConfig::fingerprint`].
    pub fn fingerprint(&self) -> &[(&'static str, String)] {
        &self.fingerprint
    }

    /// Refuses settings that cannot train, whatever the data (see
    /// [`TaskConfig::validate`]).
    pub fn validate(&self) -> Result<()> {
        self.config.validate()
    }

    /// What the model must read.
    pub fn reads(&self) -> Reads {
        self.config.reads()
    }

    /// What a model trained on `set` is built for (see
    /// [`TaskConfig::input_of`]).
    pub fn input_of(&self, set: &DataSet) -> Result<Input> {
        self.config.input_of(set)
    }

    /// Refuses settings `set` cannot train with at `batch` (see
    /// [`TaskConfig::check`]).
    pub fn check(&self, set: &DataSet, batch: usize) -> Result<()> {
        self.config.check(set, batch)
    }

    /// See [`TaskConfig::train_len`].
    pub fn train_len(&self, set: &DataSet, batch: usize) -> Result<usize> {
        self.config.train_len(set, batch)
    }

    /// See [`TaskConfig::pretrained`].
    pub fn pretrained(&self, set: &DataSet, path: &Path, embed: usize) -> Result<Option<Pretrained>> {
        self.config.pretrained(set, path, embed)
    }

    /// Uploads `set` and builds the task (see [`TaskConfig::build`]).
    pub fn build(&self, set: &DataSet, p: &mut Persistent<'_>, args: BuildArgs) -> Result<Box<dyn Task>> {
        self.config.build(set, p, args)
    }
}

impl fmt::Debug for TaskChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl serde::Serialize for TaskChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.describe())
    }
}

/// The task a run trains at when none is named: classifying images, no
/// label smoothing, no augmentation.
impl Default for TaskChoice {
    fn default() -> Self {
        Classification::choice(ClassificationConfig::default())
    }
}
