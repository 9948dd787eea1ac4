//! The library's error type: every failure a caller can meet, typed.

use crate::backend::BackendError;
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
    #[error("{op}: wrong shape: expected {detail}")]
    Shape { op: &'static str, detail: String },
    #[error("backward: the tensor does not depend on anything that needs a gradient (was the step recording?)")]
    NoGradient,
    #[error("invalid setting: {0}")]
    Config(String),
    #[error("training diverged: the loss became {loss} at epoch {epoch}, step {step}; lower --lr")]
    Diverged { epoch: usize, step: usize, loss: f32 },
}

impl Error {
    pub(crate) fn shape(op: &'static str, detail: String) -> Self {
        Self::Shape { op, detail }
    }
}
