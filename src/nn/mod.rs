//! Networks as the engine sees them: parameters with names in slabs
//! ([`ParamBuilder`], [`ParamStore`]), the [`Model`] trait, and the
//! [`Optimizer`] trait. Models and optimizers are written against this
//! module and [`crate::ops`] only, never against a backend.

mod init;
mod layers;
mod model;
mod optimizer;
mod params;
mod recurrent;
mod tree_lstm;

pub use init::{kaiming_uniform_fan_in, normal, uniform_fan_in};
pub use layers::{scaled, BatchNorm2d, Conv2d, ConvSpec, Linear};
pub use model::{Batch, Input, Mode, Model, ModelChoice, Network, Reads, SentenceInput, Tokens, TreeInput};
pub use optimizer::{runs_with_grads, Optimizer, OptimizerChoice, OptimizerConfig};
pub use params::{count_params, Entry, Init, Kind, ParamBuilder, ParamStore};
pub use recurrent::{Embedding, Lstm, LstmState, Rnn, Sequence};
pub use tree_lstm::{Forest, TreeLstm, TreeNode};
