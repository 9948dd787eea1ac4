//! Tasks: what a batch means. A task turns the data resident in the
//! persistent region into a step's input and targets, the model's output
//! into a loss, and what evaluation reads back into a metric. The training
//! loop holds one as a `Box<dyn Task>` and names none (`tests/layering.rs`).
//!
//! Image classification ([`classification`]) is today's. The shape of the
//! trait is what the next ones need too: a language model gathers a batch
//! of token sequences at the cursor (`[B, T]` ids in, the next `[B, T]` ids
//! as targets) and takes the mean next-token cross-entropy as its loss,
//! perplexity as its metric; a tree task gathers a batch of parse trees
//! (their nodes batched by level) and sums a loss over every node. Each
//! reads its own batch from device memory at the step cursor, so a captured
//! graph draws the next batch on every replay.
//!
//! Adding one: a file here with its config (a [`TaskConfig`]) and its
//! [`Task`], and a line in the CLI where it is picked.

mod classification;

pub use classification::{Classification, ClassificationConfig};

use crate::data::ImageSet;
use crate::nn::Input;
use crate::ops::gather::BatchAt;
use crate::tensor::Persistent;
use crate::tensor::{Labels, Tensor};
use crate::Result;
use crate::Step;
use std::fmt;
use std::sync::Arc;

/// A task over a data set resident in the persistent region.
pub trait Task: Send + Sync {
    /// What the model is built for.
    fn input(&self) -> Input;
    /// Examples in the training and test splits: what the epoch's order
    /// shuffles and evaluation walks.
    fn train_len(&self) -> usize;
    fn test_len(&self) -> usize;
    /// The training examples `at` points to, as the model's input and the
    /// loss's targets (read from device memory at the cursor, so a
    /// captured graph gathers the next batch on every replay).
    fn train_batch<'s>(&self, s: &mut Step<'s>, at: BatchAt) -> Result<(Tensor<'s>, Labels<'s>)>;
    /// The test examples `indices`, as the model's input.
    fn test_batch<'s>(&self, s: &mut Step<'s>, indices: &[u32]) -> Result<Tensor<'s>>;
    /// The loss of the model's `output` against `targets`, as a share of
    /// a mean over `over` examples (a data-parallel rank's shard of a
    /// larger step).
    fn loss<'s>(&self, s: &mut Step<'s>, output: Tensor<'s>, targets: Labels<'s>, over: usize) -> Result<Tensor<'s>>;
    /// Floats of the model's output evaluation reads back per test
    /// example (a row of logits).
    fn readback_per_example(&self) -> usize;
    /// How many of the test examples from `first` on, whose outputs were
    /// read back (`readback_per_example` floats each), count towards the
    /// metric: the metric is their fraction of the test set.
    fn correct(&self, outputs: &[f32], first: usize) -> usize;
}

/// A task's settings, before it is built.
pub trait TaskConfig: fmt::Debug + Clone + Send + Sync + 'static {
    /// Refuses settings that cannot train, whatever the data.
    fn validate(&self) -> Result<()> {
        Ok(())
    }
    /// What a model trained on `set` is built for.
    fn input_of(&self, set: &ImageSet) -> Input;
    /// Refuses settings that cannot train on `set`, before anything is
    /// allocated for it.
    fn check(&self, _set: &ImageSet) -> Result<()> {
        Ok(())
    }
    /// What the task draws at random into its batches, as a checkpoint
    /// records it (a resumed run must draw the same): `none` for nothing.
    fn draws(&self) -> String;
    /// Uploads `set` into the persistent region and returns the task; `seed`
    /// is the run's (its random draws are seeded from it).
    fn build(&self, set: &ImageSet, p: &mut Persistent<'_>, seed: u64) -> Result<Box<dyn Task>>;
}

/// A [`TaskConfig`] behind a pointer (`Clone` keeps the trait itself from
/// being one).
trait AnyTaskConfig: Send + Sync {
    fn validate(&self) -> Result<()>;
    fn input_of(&self, set: &ImageSet) -> Input;
    fn check(&self, set: &ImageSet) -> Result<()>;
    fn build(&self, set: &ImageSet, p: &mut Persistent<'_>, seed: u64) -> Result<Box<dyn Task>>;
}

impl<C: TaskConfig> AnyTaskConfig for C {
    fn validate(&self) -> Result<()> {
        TaskConfig::validate(self)
    }

    fn input_of(&self, set: &ImageSet) -> Input {
        TaskConfig::input_of(self, set)
    }

    fn check(&self, set: &ImageSet) -> Result<()> {
        TaskConfig::check(self, set)
    }

    fn build(&self, set: &ImageSet, p: &mut Persistent<'_>, seed: u64) -> Result<Box<dyn Task>> {
        TaskConfig::build(self, set, p, seed)
    }
}

/// A task picked by name with its settings, not yet built: what a run's
/// settings carry, so the training loop builds whatever it is given.
#[derive(Clone)]
pub struct TaskChoice {
    name: &'static str,
    settings: String,
    draws: String,
    config: Arc<dyn AnyTaskConfig>,
}

impl TaskChoice {
    pub fn new<C: TaskConfig>(name: &'static str, config: C) -> Self {
        Self {
            name,
            settings: format!("{config:?}"),
            draws: config.draws(),
            config: Arc::new(config),
        }
    }

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

    pub fn validate(&self) -> Result<()> {
        self.config.validate()
    }

    pub fn input_of(&self, set: &ImageSet) -> Input {
        self.config.input_of(set)
    }

    pub fn check(&self, set: &ImageSet) -> Result<()> {
        self.config.check(set)
    }

    pub fn build(&self, set: &ImageSet, p: &mut Persistent<'_>, seed: u64) -> Result<Box<dyn Task>> {
        self.config.build(set, p, seed)
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
