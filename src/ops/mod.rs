//! Ops: one folder each, holding the op's forward, its backward, its CPU
//! kernels and its tests (gradient checks against finite differences).
//!
//! Each op checks shapes when called (so kernels may assume them), allocates
//! its outputs in the step region, dispatches on the backend in one `match`,
//! and records what its backward needs.

pub mod adamw_update;
pub mod add;
pub mod avg_pool2d;
pub mod batch_norm2d;
pub mod cast;
pub mod concat;
pub mod conv2d;
pub mod cross_entropy;
pub mod cursor;
pub mod dense;
pub mod dropout;
pub mod gather;
pub mod global_avg_pool2d;
pub mod linear;
pub mod lr;
pub mod maxpool2d;
pub mod relu;
pub mod reshape;
pub mod sgd_update;

#[cfg(test)]
pub(crate) mod gradcheck;

use crate::backend::KernelSource;

/// Every op's CUDA kernels, one line per op: what a GPU compiles when it
/// opens (`Device::open(request, threads, ops::KERNELS)`). An op's kernels
/// are launched by the names registered here.
pub const KERNELS: &[KernelSource] = &[
    cursor::KERNELS,
    cast::KERNELS,
    gather::KERNELS,
    relu::KERNELS,
    maxpool2d::KERNELS,
    avg_pool2d::KERNELS,
    global_avg_pool2d::KERNELS,
    add::KERNELS,
    concat::KERNELS,
    dropout::KERNELS,
    cross_entropy::KERNELS,
    linear::KERNELS,
    conv2d::KERNELS,
    dense::KERNELS,
    batch_norm2d::KERNELS,
    sgd_update::KERNELS,
    adamw_update::KERNELS,
];

/// Rows per rayon task in elementwise kernels: big enough that scheduling is
/// noise, small enough that two cores share a 100-image batch.
pub(crate) const CHUNK: usize = 1 << 14;

#[cfg(test)]
mod tests {
    use super::KERNELS;
    use crate::backend::cuda::kernels::tests::registration_errors;
    use crate::backend::cuda::kernels::KernelTable;

    /// A kernel a source defines but nobody registered, or a name registered
    /// that its source does not define, fails here, on a machine without a
    /// GPU, rather than when a GPU first opens.
    #[test]
    fn every_kernel_is_registered_exactly_as_its_source_defines_it() {
        let errors: Vec<String> = KERNELS.iter().flat_map(registration_errors).collect();
        assert!(
            errors.is_empty(),
            "kernel registrations disagree with their sources:\n{}",
            errors.join("\n")
        );
        let table = KernelTable::new(KERNELS, |_| Ok(()));
        assert!(table.is_ok(), "{:?}", table.err());
    }
}
