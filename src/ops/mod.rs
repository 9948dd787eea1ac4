//! Ops: one folder each, holding the op's forward, its backward, its CPU
//! kernels and its tests (gradient checks against finite differences).
//!
//! Each op checks shapes when called (so kernels may assume them), allocates
//! its outputs in the step region, runs each kernel through `Step::launch`
//! (`launch.rs`: what it touches, its CPU body, its CUDA body), and records
//! what its backward needs. The `registry!` below is the only
//! list of ops: adding one is its folder and one line there.

#[macro_use]
mod registry;
mod launch;
mod step;

pub mod lr;
pub(crate) mod math;
pub use step::{Engine, Step};

#[cfg(test)]
pub(crate) mod gradcheck;

// One line per op: its folder and its roles (see `registry.rs`). The line
// makes its module, its tape entry, its backward and recomputation dispatch
// and its kernels known; nothing else in the crate lists ops. The order is
// the one a GPU compiles their kernels in, as one source: a source may use
// what one above it defines (the step cursor's counter, dropout's mask), so
// a new op goes below those it uses, at the end if in doubt.
registry! {
    cursor: kernels;
    cast: backward, kernels;
    gather: kernels;
    window: kernels;
    relu: backward, kernels;
    maxpool2d: backward, kernels;
    avg_pool2d: backward, kernels;
    global_avg_pool2d: backward, kernels;
    add: backward, kernels;
    concat: backward, kernels;
    dropout: backward, kernels;
    cross_entropy: backward, kernels;
    linear: backward, kernels;
    conv2d: backward, recompute, kernels;
    dense: backward, kernels;
    batch_norm2d: backward, recompute, kernels;
    sgd_update: kernels;
    adamw_update: kernels;
    adagrad_update: kernels;
    clip_grad_norm: kernels;
    reshape: backward;
    sigmoid: backward, kernels;
    tanh: backward, kernels;
    select: backward;
    stack: backward;
    embedding: backward, kernels;
    lstm_cell: backward, kernels;
    lstm_layer: backward, kernels;
    tree_lstm_cell: backward, kernels;
    sentences: kernels;
    onehot_linear: backward, kernels;
}

/// Rows per rayon task in elementwise kernels: big enough that scheduling is
/// noise, small enough that two cores share a 100-image batch.
pub(crate) const CHUNK: usize = 1 << 14;

#[cfg(test)]
mod tests;
