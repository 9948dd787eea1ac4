//! bumpgrad: deep-learning training whose memory is an arena.
//!
//! One allocation per device at start-up; a persistent region (parameters,
//! optimizer state, the data set), a mark, and a step region that every
//! minibatch bump-allocates into and that is reset to the mark after it.
//! Step tensors carry the step's lifetime, so keeping one past its reset
//! does not compile.
//!
//! The crate, from the bottom up:
//! - [`memory`]: the arena, its regions, statistics and typed handles;
//! - [`backend`]: where memory lives and kernels run (CPU now; the seam for
//!   CUDA) — the only home of `unsafe`;
//! - [`tensor`]: shapes, step tensors and persistent parameters;
//! - [`autograd`]: the step scope, the tape and backward;
//! - [`ops`]: one folder per op — forward, backward, kernels, tests;
//! - [`models`]: networks built from ops (the MNIST CNN);
//! - [`optim`]: optimizers updating parameters in place;
//! - [`data`]: IDX files, MNIST, the epoch's shuffled order;
//! - [`train`]: the training loop and its reports, used by the CLI.

pub mod autograd;
pub mod backend;
pub mod data;
mod error;
pub mod memory;
pub mod models;
pub mod ops;
pub mod optim;
pub mod tensor;
pub mod train;

pub use autograd::{Grads, Step};
pub use backend::{Device, DeviceRequest};
pub use error::{Error, Result};
pub use memory::{Arena, ArenaError, ArenaStats, ByteSize};
pub use tensor::{Labels, Param, Shape, Tensor};
