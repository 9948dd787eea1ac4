//! A batch norm's sizes, checked once when the op is recorded, and how the
//! GPU's kernels split it: per-channel runs summed by blocks of their own
//! (NCHW), or tiles of a pixel's channels read together (NHWC, channels
//! last), and the vector widths each kernel reads at.

use super::{BatchNormArgs, RunningStats};
use crate::backend::cuda::{Arg, Grid};
use crate::backend::{BackendError, Sizing};
use crate::memory::{Buf, DType, FloatBuf};
use crate::ops::Step;
use crate::tensor::{Layout, Shape};
use crate::{Error, Result};

/// Threads of a block that sums (a power of two: `block_sum` halves it).
const REDUCE_THREADS: u32 = 256;
/// Values of a channel one block sums on the GPU: 16 per thread, enough
/// work to hide the final tree, few enough runs that a channel of a
/// ResNet's first stage (128 images × 32×32) spreads over 32 blocks.
const RUN_LEN: usize = 4096;
/// At most this many runs per channel: the finishing block adds them.
const MAX_RUNS: usize = 1024;
/// Threads of an NHWC block (kernels.cu): along channels × along rows.
const NHWC_THREADS: usize = 256;
/// Fewest rows (pixels) of an NHWC run, where a channel has that many: a
/// block's rows of threads (32 of them at 16 bytes per thread) read 8 each.
const NHWC_MIN_RUN: usize = 256;
/// Blocks an NHWC sum aims at over all its channel tiles: a few per
/// streaming multiprocessor, so that wide layers with few pixels (ResNet's
/// last stage) fill the GPU as the NCHW runs of a channel do.
const NHWC_BLOCKS: usize = 1024;
/// Rows per thread of the elementwise NHWC kernels.
const NHWC_ROWS_PER_THREAD: usize = 4;
/// Channels of a finishing block that gives each channel a warp...
const WARP_FINISH_CHANNELS: u32 = 8;
/// ...which it does where a channel has at most this many runs (NHWC's
/// wide layers: `NHWC_BLOCKS` over their tiles): a block of 256 threads
/// then has a run or less a thread. Where runs are more (NCHW, and NHWC's
/// first stage), a block each adds them faster (measured with
/// `bench/bn_kernels.sh` on an H100: 512 runs 9.4 µs a block against
/// 11.8 a warp, 8 runs 7.0 against 5.9, statistics of 64 and 512
/// channels at batch 128).
const WARP_FINISH_RUNS: usize = 128;

/// Sizes of one batch norm: `n` images of `c` planes of `hw` pixels, of
/// type `dtype` and in `layout` (x's, and so everything x-shaped's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub(super) n: usize,
    pub(super) c: usize,
    pub(super) hw: usize,
    pub(super) dtype: DType,
    pub(super) layout: Layout,
}

impl Geometry {
    pub(super) fn new(
        x: Shape,
        (dtype, layout): (DType, Layout),
        weight: Shape,
        bias: Shape,
        stats: &RunningStats,
        args: &BatchNormArgs,
    ) -> Result<Self> {
        let bad = |detail: String| Err(Error::shape("batch_norm2d", detail));
        if x.rank() != 4 {
            return bad(format!("input [N, C, H, W], got {x}"));
        }
        let (n, c, hw) = (x.dim(0), x.dim(1), x.dim(2) * x.dim(3));
        let channels = Shape::new(&[c]);
        for (what, shape) in [
            ("weight", weight),
            ("bias", bias),
            ("running mean", stats.mean.shape()),
            ("running variance", stats.var.shape()),
        ] {
            if shape != channels {
                return bad(format!("{what} {channels} for an input of {c} channels, got {shape}"));
            }
        }
        if stats.batches.shape() != Shape::new(&[]) {
            return bad(format!(
                "num_batches_tracked of shape [] (a scalar, as PyTorch's), got {}",
                stats.batches.shape()
            ));
        }
        if x.numel() == 0 {
            return bad(format!("a non-empty input, got {x}"));
        }
        // The GPU kernels index with 32-bit counts.
        if x.numel() > u32::MAX as usize {
            let per_example = x.numel() / n.max(1);
            return bad(format!(
                "at most {} elements (the kernels count in 32 bits), got {x}: at most {} examples of {per_example} elements fit",
                u32::MAX,
                u32::MAX as usize / per_example.max(1)
            ));
        }
        if args.training && n * hw < 2 {
            return bad(format!(
                "more than one value per channel in training (the unbiased variance divides by n − 1), got {x}"
            ));
        }
        if !(args.eps.is_finite() && args.eps > 0.0) {
            return Err(Error::Config(format!(
                "batch_norm2d: eps must be above 0, got {}",
                args.eps
            )));
        }
        if !args.momentum.is_finite() {
            return Err(Error::Config(format!(
                "batch_norm2d: momentum must be finite, got {}",
                args.momentum
            )));
        }
        Ok(Self {
            n,
            c,
            hw,
            dtype,
            layout,
        })
    }

    pub(super) fn numel(&self) -> usize {
        self.n * self.c * self.hw
    }

    pub(super) fn dims(&self) -> [Arg<'static>; 3] {
        [
            Arg::U32(self.n as u32),
            Arg::U32(self.c as u32),
            Arg::U32(self.hw as u32),
        ]
    }
}

impl Geometry {
    /// How the GPU splits a channel's `n·hw` values: (runs, values per run).
    pub(super) fn runs(&self) -> (usize, usize) {
        let count = self.n * self.hw;
        if self.layout == Layout::Nhwc {
            // Runs of rows, a block per run and channel tile: enough blocks
            // to fill the GPU, enough rows per block to hide its tree.
            let runs = count
                .div_ceil(NHWC_MIN_RUN)
                .min(NHWC_BLOCKS.div_ceil(self.nhwc_tiles()))
                .clamp(1, MAX_RUNS);
            let len = count.div_ceil(runs);
            return (count.div_ceil(len), len);
        }
        let runs = count.div_ceil(RUN_LEN).clamp(1, MAX_RUNS);
        let len = count.div_ceil(runs);
        // The bf16 sums read four values at a time where runs start on a
        // multiple of 4 in planes of a multiple of 4 (kernels.cu): rounding
        // the length up may leave a run fewer, never more.
        if self.dtype == DType::Bf16 && self.hw.is_multiple_of(4) {
            let len = len.next_multiple_of(4);
            return (count.div_ceil(len), len);
        }
        (runs, len)
    }

    /// Values per thread of `bn_apply` and `bn_backward_input`: consecutive
    /// ones of a plane, 16 bytes of them where the plane allows (kernels.cu;
    /// `bn_backward_input` decides alike from `hw`).
    pub(super) fn apply_vec(&self) -> usize {
        match self.dtype {
            DType::Bf16 if self.hw.is_multiple_of(8) => 8,
            _ if self.hw.is_multiple_of(4) => 4,
            _ => 1,
        }
    }

    /// The type of the x-shaped buffers a GPU kernel is handed, which must
    /// all be this batch norm's: one kernel entry reads them all as one
    /// type, so a mix is refused rather than misread.
    pub(super) fn dtype_of(&self, bufs: &[Option<FloatBuf>]) -> Result<DType, BackendError> {
        match bufs.iter().flatten().all(|b| b.dtype() == self.dtype) {
            true => Ok(self.dtype),
            false => Err(BackendError::Internal("batch-norm tensors of different float types")),
        }
    }

    /// The GPU's per-run partial sums, two per run and channel, in the step
    /// region; none on the CPU, which sums a channel in one task.
    pub(super) fn partials(&self, s: &mut Step<'_>, what: &'static str) -> Result<Option<Buf<f32>>> {
        match s.sizing() {
            Sizing::Cpu { .. } => Ok(None),
            Sizing::Cuda(_) => {
                let (runs, _) = self.runs();
                Ok(Some(s.alloc::<f32>(what, Shape::new(&[self.c, runs, 2]))?))
            }
        }
    }

    /// A per-run kernel's grid: x over a channel's runs, y over channels
    /// (over channel tiles in NHWC).
    pub(super) fn run_grid(&self) -> Grid {
        match self.layout {
            Layout::Nchw => Grid {
                blocks: (self.runs().0 as u32, self.c as u32),
                threads: (REDUCE_THREADS, 1),
            },
            Layout::Nhwc => self.nhwc_grid(self.runs().0),
        }
    }

    /// The grid of a finishing kernel (kernels.cu), which adds each
    /// channel's runs: a block per channel, or a warp where the runs are
    /// few (NHWC only, so that NCHW's sums keep their bits).
    pub(super) fn finish_grid(&self) -> Grid {
        let (runs, _) = self.runs();
        match self.layout {
            Layout::Nhwc if runs <= WARP_FINISH_RUNS => Grid {
                blocks: (self.c.div_ceil(WARP_FINISH_CHANNELS as usize) as u32, 1),
                threads: (32, WARP_FINISH_CHANNELS),
            },
            _ => Grid::blocks(self.c, REDUCE_THREADS),
        }
    }

    /// Rows of an NHWC tensor: its pixels, `n·hw`.
    pub(super) fn rows(&self) -> Arg<'static> {
        Arg::U32((self.n * self.hw) as u32)
    }

    /// Channels per thread of the NHWC kernels: consecutive ones of a
    /// pixel, 16 bytes of them where `c` allows (kernels.cu).
    pub(super) fn nhwc_vec(&self) -> usize {
        let most = match self.dtype {
            DType::Bf16 => 8,
            DType::F32 => 4,
        };
        [8, 4, 2, 1]
            .into_iter()
            .find(|&v| v <= most && self.c.is_multiple_of(v))
            .unwrap_or(1)
    }

    /// Threads of an NHWC block: (along channels, along rows), powers of
    /// two. Along channels as many as a row of the channels needs, up to
    /// 128 bytes of it (a warp then reads whole 128-byte lines).
    pub(super) fn nhwc_threads(&self) -> (usize, usize) {
        let vec = self.nhwc_vec();
        let widest = 128 / (vec * self.dtype.size());
        let along = self.c.div_ceil(vec).next_power_of_two().min(widest);
        (along, NHWC_THREADS / along)
    }

    /// Channel tiles of the NHWC kernels: a block's channels each.
    pub(super) fn nhwc_tiles(&self) -> usize {
        self.c.div_ceil(self.nhwc_threads().0 * self.nhwc_vec())
    }

    /// An NHWC grid of `columns` blocks along the rows per channel tile.
    pub(super) fn nhwc_grid(&self, columns: usize) -> Grid {
        let (along, rows) = self.nhwc_threads();
        Grid {
            blocks: (columns as u32, self.nhwc_tiles() as u32),
            threads: (along as u32, rows as u32),
        }
    }

    /// The grid of an elementwise NHWC kernel: a few rows per thread, the
    /// rows split evenly over the block columns (the kernel divides).
    pub(super) fn nhwc_elementwise_grid(&self) -> Grid {
        let rows_per_block = self.nhwc_threads().1 * NHWC_ROWS_PER_THREAD;
        self.nhwc_grid((self.n * self.hw).div_ceil(rows_per_block))
    }

    /// The CPU kernels read NCHW only: an NHWC batch norm on a CPU is run on
    /// NCHW copies (see `normalized`), so one here is a bug.
    pub(super) fn cpu_layout(&self) -> Result<(), BackendError> {
        match self.layout {
            Layout::Nchw => Ok(()),
            Layout::Nhwc => Err(BackendError::Internal("a channels-last batch norm on the CPU")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{Geometry, MAX_RUNS, NHWC_BLOCKS, NHWC_MIN_RUN, NHWC_ROWS_PER_THREAD, NHWC_THREADS};
    use super::{WARP_FINISH_CHANNELS, WARP_FINISH_RUNS};
    use crate::memory::DType;
    use crate::tensor::Layout;

    #[test]
    fn the_kernels_launch_bounds_are_an_nhwc_blocks_threads() {
        // kernels.cu holds its NHWC kernels' registers to blocks of this
        // many threads: a larger block would fail to launch.
        let line = format!("#define BN_NHWC_THREADS {NHWC_THREADS}\n");
        assert!(include_str!("kernels.cu").contains(&line), "kernels.cu lacks {line:?}");
    }

    #[test]
    fn the_kernel_bench_launches_as_the_runs_do() {
        // bench/bn_kernels/harness.cu mirrors these sizes by hand: one it
        // missed would time launches that no run makes.
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/bench/bn_kernels/harness.cu");
        let Ok(harness) = std::fs::read_to_string(path) else {
            eprintln!("SKIPPED the_kernel_bench_launches_as_the_runs_do: no {path} (the packaged crate has no bench/)");
            return;
        };
        for line in [
            format!("#define MIN_RUN {NHWC_MIN_RUN}\n"),
            format!("#define BLOCKS {NHWC_BLOCKS}\n"),
            format!("#define ROWS_PER_THREAD {NHWC_ROWS_PER_THREAD}\n"),
            format!("#define FINISH_WARP_RUNS {WARP_FINISH_RUNS}\n"),
            format!("#define MAX_RUNS {MAX_RUNS}\n"),
            format!("#define WARP_FINISH_CHANNELS {WARP_FINISH_CHANNELS}\n"),
        ] {
            assert!(
                harness.contains(&line),
                "{path} lacks {line:?}: carry geometry.rs's size there"
            );
        }
    }

    #[test]
    fn nhwc_launch_sizes_cover_every_row_and_channel_once() {
        for dtype in [DType::F32, DType::Bf16] {
            for (n, c, hw) in [
                (512, 64, 1024),
                (512, 128, 256),
                (512, 256, 64),
                (512, 512, 16),
                (8, 6, 144),
                (40, 5, 1),
                (2, 3, 12),
                (1, 1, 2),
                (37, 24, 320),
                (4096, 1000, 1),
            ] {
                let g = Geometry {
                    n,
                    c,
                    hw,
                    dtype,
                    layout: Layout::Nhwc,
                };
                let what = format!("{dtype} n {n} c {c} hw {hw}");
                let (vec, (along, rows)) = (g.nhwc_vec(), g.nhwc_threads());
                assert!(c.is_multiple_of(vec) && vec * dtype.size() <= 16, "{what}: vec {vec}");
                assert_eq!(along * rows, NHWC_THREADS, "{what}");
                assert!(along.is_power_of_two() && rows.is_power_of_two(), "{what}");
                // The tiles cover the channels, the last tile not wholly idle.
                let tile = along * vec;
                assert!(g.nhwc_tiles() * tile >= c && (g.nhwc_tiles() - 1) * tile < c, "{what}");
                // Every run non-empty, together every row once.
                let (runs, len) = g.runs();
                assert!((1..=MAX_RUNS).contains(&runs), "{what}: {runs} runs");
                assert!(
                    runs * len >= n * hw && (runs - 1) * len < n * hw,
                    "{what}: {runs} × {len}"
                );
                let grid = g.run_grid();
                assert_eq!(grid.blocks, (runs as u32, g.nhwc_tiles() as u32), "{what}");
                assert_eq!(grid.threads, (along as u32, rows as u32), "{what}");
                // The finishing grid gives every channel one group: a block
                // of 256 threads (one channel) or warps of 8 channels.
                let finish = g.finish_grid();
                let per_block = match finish.threads {
                    (256, 1) => 1,
                    (32, k) => {
                        assert!(runs <= 128, "{what}: a warp adds {runs} runs");
                        k as usize
                    }
                    other => panic!("{what}: finishing threads {other:?}"),
                };
                let blocks = finish.blocks.0 as usize;
                assert!(
                    blocks * per_block >= c && (blocks - 1) * per_block < c,
                    "{what}: finish {finish:?}"
                );
                // A fp32 tile of a row of 16-byte threads spans 128 bytes.
                if dtype == DType::F32 && c.is_multiple_of(32) {
                    assert_eq!(tile * dtype.size(), 128, "{what}");
                }
            }
        }
    }
}
