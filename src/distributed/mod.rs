//! Data-parallel training: one process per GPU (in tests, one thread per
//! CPU arena), each training on its shard of every batch, gradients summed
//! across them after every backward.
//!
//! - [`rendezvous`]: how the ranks find each other (rank 0 listens; the
//!   others connect, prove they know the job's [`token`], and receive
//!   NCCL's id) and then watch each other, so a rank that dies ends the
//!   others within a bounded time; strangers on the port are dropped;
//! - [`env`](mod@env): a rank's place in the group from its environment
//!   (bumpgrad's launcher, torchrun, Open MPI, Slurm);
//! - [`launcher`]: `bumpgrad train --gpus N`, one child process per GPU;
//! - [`rank`]: one rank's run: the rendezvous, a watch that ends the
//!   process when the group fails, and its exit status;
//! - `buckets`: the gradients in the persistent region, summed bucket by
//!   bucket while backward runs;
//! - [`local`]: an in-process group of threads with the same arithmetic.

pub(crate) mod buckets;
pub mod env;
pub mod error;
pub mod launcher;
/// The CPU's in-process collective, which lives with the CPU backend (a
/// device owns its collectives); named here too, where ranks are made.
pub use crate::backend::cpu::collective as local;
pub mod rank;
pub mod rendezvous;
pub mod token;

pub use error::DistError;

/// Default gradient bucket size. Small: every weight larger than this gets
/// a bucket of its own, summed as soon as backward produced it, while the
/// layers below are still in backward. On 2 H200s, MNIST CNN at batch 100 a
/// GPU, 4 KiB buckets (4 sums a step) ran 1.785× one GPU's throughput and
/// 128 KiB (one sum of all 86 KiB at the end of backward) 1.765×
/// (`bench/data_parallel.py --only throughput --batches 100 --epochs 4
/// --repeats 3 --bucket-kibs 4`, 2026-11-30).
pub const DEFAULT_BUCKET_BYTES: usize = 4 << 10;

/// A rank's place in a data-parallel run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct World {
    /// This rank, from 0.
    pub rank: usize,
    /// The ranks in the run.
    pub size: usize,
}

impl World {
    /// A run of one rank: not data-parallel.
    pub const ALONE: Self = Self { rank: 0, size: 1 };

    /// This rank's rows of a step of `len` examples, where a full step is
    /// `per_rank` examples on each rank: `(first row, rows)`. A full step
    /// splits evenly; a shorter last one as evenly as it can.
    pub fn shard(&self, len: usize, per_rank: usize) -> (usize, usize) {
        if len == per_rank * self.size {
            (self.rank * per_rank, per_rank)
        } else {
            self.share(len)
        }
    }

    /// This rank's contiguous share of `len` items, `(first, count)`: the
    /// ranks' shares cover them once, in order, as evenly as they can.
    pub fn share(&self, len: usize) -> (usize, usize) {
        let (a, b) = (self.rank * len / self.size, (self.rank + 1) * len / self.size);
        (a, b - a)
    }
}

/// How a rank's device joins its data-parallel group before its arena is
/// made: the group, and which GPU of the host the rank uses.
pub struct Join {
    /// The group the device joins.
    pub group: crate::backend::Group,
    /// The GPU of the host the rank uses.
    pub ordinal: usize,
}

/// How a rank trains with the others.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DataParallel {
    /// This rank's place.
    pub world: World,
    /// Gradient bucket size in bytes.
    pub bucket_bytes: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shards_cover_each_step_once_in_order() {
        for size in 1..5 {
            for len in [size, 7, 100, 3 * size + 1, 40 * size] {
                let mut next = 0;
                for rank in 0..size {
                    let (first, rows) = World { rank, size }.shard(len, 40);
                    assert_eq!(first, next, "size {size} len {len} rank {rank}");
                    assert!(rows >= 1);
                    next += rows;
                }
                assert_eq!(next, len);
            }
        }
        assert_eq!(World { rank: 1, size: 2 }.shard(100, 50), (50, 50));
        assert_eq!(World { rank: 1, size: 3 }.shard(10, 50), (3, 3));
    }

    #[test]
    fn shares_cover_every_item_once_even_with_fewer_items_than_ranks() {
        for size in 1..6 {
            for len in [0, 1, size - 1, size, 7, 10_000] {
                let mut next = 0;
                for rank in 0..size {
                    let (first, count) = World { rank, size }.share(len);
                    assert_eq!(first, next, "size {size} len {len} rank {rank}");
                    assert!(count <= len.div_ceil(size), "even: size {size} len {len}");
                    next += count;
                }
                assert_eq!(next, len);
            }
        }
        assert_eq!(World { rank: 2, size: 3 }.share(10_000), (6666, 3334));
        assert_eq!(World::ALONE.share(200), (0, 200));
    }
}
