//! The library's error type: every failure a caller can meet, typed.

use crate::backend::BackendError;
use crate::checkpoint::CheckpointError;
use crate::data::DataError;
use crate::memory::ArenaError;

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Arena(#[from] ArenaError),
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Data(#[from] DataError),
    #[error(transparent)]
    Checkpoint(#[from] CheckpointError),
    #[error("{op}: wrong shape: expected {detail}")]
    Shape { op: &'static str, detail: String },
    #[error("backward: the tensor does not depend on anything that needs a gradient (was the step recording?)")]
    NoGradient,
    #[error("invalid setting: {0}")]
    Config(String),
    /// A run setting that cannot work, named as a setting (not as a flag:
    /// the command-line tool adds which flag sets it and `fix`).
    #[error("invalid setting: {problem}")]
    Setting {
        setting: Setting,
        problem: String,
        /// A value that would work, where one can be named.
        fix: Option<String>,
    },
    #[error("training diverged: the loss became {loss} at epoch {epoch}, step {step} (the last checkpoint written, if any, is from before it)")]
    Diverged { epoch: usize, step: usize, loss: f32 },
    #[error(
        "stopped by a signal after step {step} of epoch {epoch}; {}",
        match checkpoint {
            Some(path) => format!("checkpoint written to {}", path.display()),
            None => "no checkpoint was written (no checkpoint directory was set)".into(),
        }
    )]
    Interrupted {
        epoch: usize,
        step: usize,
        checkpoint: Option<std::path::PathBuf>,
    },
}

/// The settings of a run that an [`Error::Setting`] can name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Setting {
    Epochs,
    Batch,
    LearningRate,
    Seed,
    TrainLimit,
    TestLimit,
    KeepCheckpoints,
    Graph,
    ArenaSize,
    BucketSize,
    Ranks,
    Model,
    Optimizer,
    Schedule,
    LabelSmoothing,
    Augment,
    Precision,
    MemoryBudget,
    WorkspaceGrowth,
    SeqLen,
    Data,
    Classes,
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
