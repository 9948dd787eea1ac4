//! Optimizers: they update parameters in place in the persistent region,
//! reading gradients from the step region, and keep their own state (momentum)
//! in the persistent region.

pub mod schedule;
pub(crate) mod sgd;

pub use sgd::Sgd;
