//! Ops: one folder each, holding the op's forward, its backward, its CPU
//! kernels and its tests (gradient checks against finite differences).
//!
//! Each op checks shapes when called (so kernels may assume them), allocates
//! its outputs in the step region, dispatches on the backend in one `match`,
//! and records what its backward needs.

pub mod adamw_update;
pub mod conv2d;
pub mod cursor;
pub mod dense;
pub mod dropout;
pub mod gather;
pub mod linear;
pub mod log_softmax_nll;
pub mod lr;
pub mod maxpool2d;
pub mod relu;
pub mod reshape;
pub mod sgd_update;

#[cfg(test)]
pub(crate) mod gradcheck;

/// Rows per rayon task in elementwise kernels: big enough that scheduling is
/// noise, small enough that two cores share a 100-image batch.
pub(crate) const CHUNK: usize = 1 << 14;
