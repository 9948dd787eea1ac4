//! What a network is to the engine: parameters declared on a
//! [`ParamBuilder`], and a forward pass on a [`Step`] in a [`Mode`].

use super::params::ParamBuilder;
use crate::ops::dropout::DropoutSeed;
use crate::tensor::{Shape, Tensor};
use crate::Result;
use crate::Step;
use std::fmt;
use std::sync::Arc;

/// Training draws dropout masks; evaluation does not drop (and, for
/// batch-norm, uses the running statistics).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `first_row`: where this batch starts in the step's whole batch (a
    /// data-parallel shard), so its rows draw the masks they would draw on
    /// one device.
    Train {
        dropout: DropoutSeed,
        first_row: usize,
    },
    Eval,
}

/// What a model is built for, taken from the data set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Input {
    /// One example: `[channels, rows, cols]`.
    pub example: Shape,
    pub classes: usize,
}

/// A network: its configuration, its parameters declared on a
/// [`ParamBuilder`] (so every tensor gets its PyTorch `state_dict` name),
/// and its forward pass. Logits come out; the loss is the task's.
pub trait Model: Send + Sync + Sized + 'static {
    type Config: fmt::Debug + Clone + Send + Sync + 'static;

    /// Declares the parameters on `pb` and keeps their handles. Called
    /// twice by [`crate::nn::ParamStore::build`]; must declare the same
    /// tensors both times.
    fn new(config: &Self::Config, input: Input, pb: &ParamBuilder<'_>) -> Result<Self>;

    /// Logits `[N, classes]` for a batch `[N, …input.example]`.
    fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, mode: Mode) -> Result<Tensor<'s>>;
}

/// A built model behind a pointer: what the training loop holds.
pub trait Network: Send + Sync {
    fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, mode: Mode) -> Result<Tensor<'s>>;
}

impl<M: Model> Network for M {
    fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, mode: Mode) -> Result<Tensor<'s>> {
        Model::forward(self, s, x, mode)
    }
}

type Build = dyn Fn(Input, &ParamBuilder<'_>) -> Result<Box<dyn Network>> + Send + Sync;

/// A model picked by name with its configuration, not yet built: what a
/// run's settings carry, so the training loop builds whatever it is given.
#[derive(Clone)]
pub struct ModelChoice {
    name: &'static str,
    config: String,
    build: Arc<Build>,
}

impl ModelChoice {
    /// Model `M` under `name` (as `--model` spells it) with `config`.
    pub fn new<M: Model>(name: &'static str, config: M::Config) -> Self {
        let text = format!("{config:?}");
        Self {
            name,
            config: text,
            build: Arc::new(move |input, pb| Ok(Box::new(M::new(&config, input, pb)?) as Box<dyn Network>)),
        }
    }

    pub fn name(&self) -> &'static str {
        self.name
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
