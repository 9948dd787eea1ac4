//! Optimizers, each an [`crate::nn::Optimizer`]: they update the parameter
//! slab in place from the gradient slab, inside the step, and keep their
//! state in slabs of the same layout in the persistent region. Adding one:
//! a file here, and a line in the CLI's list of optimizers.

pub(crate) mod sgd;

pub use sgd::{Sgd, SgdConfig};

/// The optimizer a run uses when none is named: plain SGD.
impl Default for crate::nn::OptimizerChoice {
    fn default() -> Self {
        SgdConfig::default().choice()
    }
}
