//! Optimizers, each an [`crate::nn::Optimizer`]: they update the parameter
//! slab in place from the gradient slab, inside the step, and keep their
//! state in slabs of the same layout in the persistent region. Adding one:
//! a file here, its update as an op in `src/ops/` (one flat launch over the
//! slabs), and a line in the CLI's list of optimizers.

mod adagrad;
mod adamw;
pub mod clip;
pub mod schedule;
mod sgd;

pub use adagrad::{Adagrad, AdagradConfig};
pub use adamw::{AdamW, AdamWConfig};
pub use clip::ClipGradNorm;
pub use schedule::Schedule;
pub use sgd::{Sgd, SgdConfig};

/// The optimizer a run uses when none is named: plain SGD.
impl Default for crate::nn::OptimizerChoice {
    fn default() -> Self {
        SgdConfig::default().choice()
    }
}
