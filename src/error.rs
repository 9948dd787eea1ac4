//! The library's error type: every failure a caller can meet, typed.

use crate::backend::BackendError;
use crate::checkpoint::CheckpointError;
use crate::data::DataError;
use crate::memory::ArenaError;

/// The crate's result: its [`Error`] unless said otherwise.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Every failure the library reports, typed, so a caller can match on it; the
/// CLI adds the flag that fixes it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The arena could not hold an allocation, or was used out of turn.
    #[error(transparent)]
    Arena(#[from] ArenaError),
    /// A device failed, or a kernel was refused its buffers.
    #[error(transparent)]
    Backend(#[from] BackendError),
    /// A data set could not be read or cut as asked.
    #[error(transparent)]
    Data(#[from] DataError),
    /// A checkpoint could not be written, read or resumed from.
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    /// An op given a tensor of a shape it cannot take.
    #[error("{op}: wrong shape: expected {detail}")]
    Shape {
        /// The op.
        op: &'static str,
        /// The shapes it expected and was given.
        detail: String,
    },
    /// `backward` from a tensor that no parameter or variable fed.
    #[error("backward: the tensor does not depend on anything that needs a gradient (was the step recording?)")]
    NoGradient,
    /// A setting that cannot work, said in words, where no [`Setting`] names
    /// it.
    #[error("invalid setting: {0}")]
    Config(String),
    /// A run setting that cannot work, named as a setting (not as a flag:
    /// the command-line tool adds which flag sets it and `fix`).
    #[error("invalid setting: {problem}")]
    Setting {
        /// Which setting.
        setting: Setting,
        /// What is wrong with its value.
        problem: String,
        /// A value that would work, where one can be named.
        fix: Option<String>,
    },
    /// The loss became NaN or infinite, and training stopped before a
    /// checkpoint could keep it.
    #[error("training diverged: the loss became {loss} at epoch {epoch}, step {step} (the last checkpoint written, if any, is from before it)")]
    Diverged {
        /// The epoch, from 1.
        epoch: usize,
        /// The step of the epoch, from 1.
        step: usize,
        /// The loss.
        loss: f32,
    },
    /// A stop request (a signal) ended the run between two steps.
    #[error(
        "stopped by a signal after step {step} of epoch {epoch}; {}",
        match checkpoint {
            Some(path) => format!("checkpoint written to {}", path.display()),
            None => "no checkpoint was written (no checkpoint directory was set)".into(),
        }
    )]
    Interrupted {
        /// The epoch, from 1.
        epoch: usize,
        /// Steps of it done.
        step: usize,
        /// The checkpoint written on the way out, where the run had a
        /// checkpoint directory.
        checkpoint: Option<std::path::PathBuf>,
    },
}

/// The settings of a run that an [`Error::Setting`] can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    /// The epochs.
    Epochs,
    /// The batch, or one of the other batch sizes.
    Batch,
    /// The learning rate.
    LearningRate,
    /// The seed.
    Seed,
    /// The training-set limit.
    TrainLimit,
    /// The test-set limit.
    TestLimit,
    /// How many checkpoints are kept.
    KeepCheckpoints,
    /// Whole-step CUDA graphs.
    Graph,
    /// The arena's size.
    ArenaSize,
    /// A data-parallel run's gradient bucket size.
    BucketSize,
    /// A data-parallel run's rank and number of ranks.
    Ranks,
    /// The model, or how it fits the data.
    Model,
    /// The optimizer or one of its settings.
    Optimizer,
    /// The learning-rate schedule or its warm-up.
    Schedule,
    /// Label smoothing.
    LabelSmoothing,
    /// Augmentation.
    Augment,
    /// The arithmetic: fp32, TF32 or bf16.
    Precision,
    /// The memory budget.
    MemoryBudget,
    /// How far timed convolutions may grow the step.
    WorkspaceGrowth,
    /// A language model's window, in tokens.
    SeqLen,
    /// The data set, as the model and task take it.
    Data,
    /// A treebank's classes.
    Classes,
    /// A treebank's length buckets.
    Buckets,
    /// A model's sizes (its layers, units, widths).
    ModelSize,
}

impl Setting {
    /// The setting a checkpoint's fingerprint records under `key` (the
    /// run's own settings, and a task's, `TaskConfig::fingerprint`).
    pub fn of_fingerprint_key(key: &str) -> Option<Self> {
        Some(match key {
            "batch" => Self::Batch,
            "train_limit" => Self::TrainLimit,
            "model" => Self::Model,
            "optimizer" => Self::Optimizer,
            "augment" => Self::Augment,
            "classes" => Self::Classes,
            "buckets" => Self::Buckets,
            _ => return None,
        })
    }
}

impl Error {
    pub(crate) fn setting(setting: Setting, problem: impl Into<String>, fix: Option<String>) -> Self {
        Self::Setting {
            setting,
            problem: problem.into(),
            fix,
        }
    }

    pub(crate) fn shape(op: &'static str, detail: String) -> Self {
        Self::Shape { op, detail }
    }
}
