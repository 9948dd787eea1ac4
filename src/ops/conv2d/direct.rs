//! Our own GPU kernels for small valid convolutions (fp32, NCHW, stride 1,
//! no padding, a filter wider than one pixel of at most
//! [`TAPS`] taps): the MNIST CNN's two. cuDNN's kernels for such shapes
//! took most of that network's step (its five passes 95 of 189 µs of
//! kernel time at batch 100, the weight gradients 57 of them); here a
//! block holds one image (or its gradient) and a few filters in shared
//! memory and each thread sums four outputs (kernels.cu's
//! `conv_direct_*`). Where the filter is 3 or 5 wide a thread takes a row:
//! four outputs (or inputs) of a run of DIRECT_RUN pixels, or a weight
//! gradient's whole row of taps, keeping the inputs they share in
//! registers, so its shared-memory reads feed several times the
//! multiply-adds (the per-pixel kernels wait on shared memory). Every sum
//! runs in a fixed order, so a run repeats bit for bit. Which passes they
//! run is [`chosen`]'s, by the lent H100's timings.
//!
//! [`Direct::of`] sizes the launches and says whether a geometry is one of
//! these: a shape whose blocks would not fit [`SMEM`] floats of shared
//! memory stays with cuDNN.

use crate::backend::cuda::ConvPass;
use crate::backend::cuda::{Arg, CudaBackend, Grid};
use crate::backend::{BackendError, ConvDims, Policy};
use crate::memory::{DType, FloatBuf};

/// Shared memory a block may use, in floats: kernels.cu's `DIRECT_SMEM`.
const SMEM: usize = 8192;
/// The most taps (`C·KH·KW`) a filter may have: `DIRECT_TAPS`. A weight
/// gradient's block gives each tap of four filters a thread.
const TAPS: usize = 256;
/// Threads a block runs at most.
const THREADS: usize = 256;
/// Warps of a block adding the weight gradient's group sums, 32 weights
/// a block: kernels.cu's `DIRECT_SUMMERS`.
const SUMMERS: usize = 8;
/// Blocks a launch aims for: two per multiprocessor of an H100 or H200
/// (132), so the few images of a small batch still fill the device.
const BLOCKS: usize = 264;

/// The kernels, in kernels.cu.
pub(super) const ENTRIES: [&str; 10] = [
    FORWARD,
    FORWARD_ROWS[0].1,
    FORWARD_ROWS[1].1,
    INPUT_GRAD,
    INPUT_GRAD_ROWS[0].1,
    INPUT_GRAD_ROWS[1].1,
    WEIGHT_GRAD,
    WEIGHT_GRAD_ROWS[0].1,
    WEIGHT_GRAD_ROWS[1].1,
    WEIGHT_GRAD_SUM,
];
const FORWARD: &str = "conv_direct_forward";
const INPUT_GRAD: &str = "conv_direct_input_grad";
const WEIGHT_GRAD: &str = "conv_direct_weight_grad";
/// The forward kernels that give a thread a run of a row's outputs, by the
/// filter's width.
const FORWARD_ROWS: [(usize, &str); 2] = [(3, "conv_direct_forward_rows3"), (5, "conv_direct_forward_rows5")];
/// The input-gradient kernels that give a thread a run of a row's inputs,
/// by the filter's width.
const INPUT_GRAD_ROWS: [(usize, &str); 2] = [(3, "conv_direct_input_grad_rows3"), (5, "conv_direct_input_grad_rows5")];
/// The weight-gradient kernels that give a thread a whole row of taps, by
/// the filter's width.
const WEIGHT_GRAD_ROWS: [(usize, &str); 2] = [
    (3, "conv_direct_weight_grad_rows3"),
    (5, "conv_direct_weight_grad_rows5"),
];
const WEIGHT_GRAD_SUM: &str = "conv_direct_weight_grad_sum";

/// The launch sizes of one geometry's three passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Direct {
    g: ConvDims,
    /// Filters a forward block computes (a multiple of 4).
    forward_filters: usize,
    /// Input channels an input-gradient block computes (a multiple of 4);
    /// `None` where the padded gradient planes do not fit (cuDNN then runs
    /// that pass: the MNIST CNN's first convolution, whose input needs no
    /// gradient).
    input_channels: Option<usize>,
    /// Filters a weight-gradient block sums for (a multiple of 4).
    grad_filters: usize,
    /// Images a weight-gradient block sums over, and so the groups whose
    /// partial sums are added at the end.
    images_per_group: usize,
    /// Threads of a weight-gradient block sharing one tap, each summing
    /// every `slices`-th row.
    slices: usize,
}

/// Floats of shared memory an image's `len` values take: kernels.cu rounds
/// to a whole number of float4s.
fn rounded(len: usize) -> usize {
    len.div_ceil(4) * 4
}

/// Of `chunks` groups of four, how many a block takes so that `blocks_of`
/// such blocks per image (or group) come near [`BLOCKS`] blocks in all,
/// with `images` images, and at most `most` per block.
fn chunks_per_block(chunks: usize, images: usize, most: usize) -> usize {
    let split = BLOCKS.div_ceil(images.max(1)).clamp(1, chunks);
    chunks.div_ceil(split).clamp(1, most.max(1))
}

impl Direct {
    /// The launch sizes for `g`, where `g` is one of the convolutions these
    /// kernels run (see the module documentation); else `None`.
    pub(super) fn of(g: &ConvDims) -> Option<Self> {
        let taps = g.k();
        let fits_u32 = [g.n, g.c, g.h, g.w, g.f, g.n * g.c * g.h * g.w, g.n * g.f * g.p()]
            .iter()
            .all(|&v| u32::try_from(v).is_ok());
        if g.dtype != DType::F32
            || g.nhwc
            || g.stride != 1
            || g.padding != 0
            || (g.kh, g.kw) == (1, 1)
            || taps > TAPS
            || !fits_u32
        {
            return None;
        }
        let image = rounded(g.c * g.h * g.w);
        let chunks = |v: usize| v.div_ceil(4);

        // Forward: the image and taps × filters.
        let most = (SMEM.checked_sub(image)? / (4 * taps)).min(chunks(g.f));
        if most == 0 {
            return None;
        }
        let forward_filters = 4 * chunks_per_block(chunks(g.f), g.n, most);

        // Input gradient: the padded gradient planes and F·KH·KW taps of
        // each of the block's channels.
        let padded = rounded(g.f * (g.h + g.kh - 1) * (g.w + g.kw - 1));
        let most = (SMEM.saturating_sub(padded) / (4 * g.f * g.kh * g.kw)).min(chunks(g.c));
        let input_channels = (most > 0).then(|| 4 * chunks_per_block(chunks(g.c), g.n, most));

        // Weight gradient: the image and the block's filters' gradient
        // planes; a thread per row of taps (a filter 3 or 5 wide) or per
        // tap, of four filters, the rest of the block's threads sharing the
        // output's rows. A row kernel's block takes fewer filters where a
        // small batch would leave the GPU idle.
        let per_chunk = weight_grad_items_per_chunk(g);
        let most = ((SMEM.checked_sub(image)? / (4 * g.p())).min(THREADS / per_chunk)).min(chunks(g.f));
        if most == 0 {
            return None;
        }
        let grad_chunks = match rows_kernel(g.kw) {
            Some(_) => chunks_per_block(chunks(g.f), g.n, most),
            None => most,
        };
        let grad_filters = 4 * grad_chunks;
        let items = per_chunk * grad_chunks;
        let slices = (THREADS / items).clamp(1, g.oh());
        let filter_blocks = chunks(g.f).div_ceil(grad_chunks);
        let groups = BLOCKS.div_ceil(filter_blocks).clamp(1, g.n);
        let images_per_group = g.n.div_ceil(groups);
        Some(Self {
            g: *g,
            forward_filters,
            input_channels,
            grad_filters,
            images_per_group,
            slices,
        })
    }

    /// The launch sizes for pass `pass` of `g`, where these kernels run it
    /// under `policy` (see [`chosen`]).
    pub(super) fn runs(g: &ConvDims, policy: Policy, pass: ConvPass) -> Option<Self> {
        if !chosen(pass, policy.deterministic) {
            return None;
        }
        Self::of(g).filter(|d| pass != ConvPass::InputGrad || d.input_channels.is_some())
    }

    /// Partial sums the weight gradient writes before adding them: none
    /// where one group holds the whole batch (it writes the gradient).
    pub(super) fn weight_grad_scratch_len(&self) -> usize {
        match self.groups() {
            1 => 0,
            groups => groups * self.g.f * self.g.k(),
        }
    }

    /// A weight-gradient block's threads but for its slices: one per row
    /// of taps or per tap, of four filters.
    fn weight_grad_items(&self) -> usize {
        weight_grad_items_per_chunk(&self.g) * self.grad_filters / 4
    }

    fn groups(&self) -> usize {
        self.g.n.div_ceil(self.images_per_group)
    }

    /// The geometry's sizes as the kernels take them (checked by `of`).
    fn dims(&self) -> [Arg<'static>; 6] {
        let g = &self.g;
        [g.c, g.h, g.w, g.f, g.kh, g.kw].map(|v| Arg::U32(v as u32))
    }

    pub(super) fn forward(
        &self,
        gpu: &mut CudaBackend,
        x: FloatBuf,
        w: FloatBuf,
        y: FloatBuf,
    ) -> Result<(), BackendError> {
        let blocks = full((self.g.f.div_ceil(self.forward_filters), self.g.n));
        let [c, h, wd, f, kh, kw] = self.dims();
        let fpb = Arg::U32(self.forward_filters as u32);
        match kernel_for(&FORWARD_ROWS, self.g.kw) {
            Some(rows) => gpu.launch(rows, blocks, &[x.into(), w.into(), y.into(), c, h, wd, f, kh, fpb]),
            None => gpu.launch(
                FORWARD,
                blocks,
                &[x.into(), w.into(), y.into(), c, h, wd, f, kh, kw, fpb],
            ),
        }
    }

    /// `gx = ∂y/∂x · gy`, or `gx += ` it where `accumulate`.
    pub(super) fn input_grad(
        &self,
        gpu: &mut CudaBackend,
        gy: FloatBuf,
        w: FloatBuf,
        gx: FloatBuf,
        accumulate: bool,
    ) -> Result<(), BackendError> {
        let channels = self.input_channels.ok_or(BackendError::Internal(
            "the direct kernels do not run this input gradient",
        ))?;
        let blocks = full((self.g.c.div_ceil(channels), self.g.n));
        let [c, h, wd, f, kh, kw] = self.dims();
        let [cpb, accumulate] = [channels as u32, accumulate as u32].map(Arg::U32);
        match kernel_for(&INPUT_GRAD_ROWS, self.g.kw) {
            Some(rows) => gpu.launch(
                rows,
                blocks,
                &[gy.into(), w.into(), gx.into(), c, h, wd, f, kh, cpb, accumulate],
            ),
            None => gpu.launch(
                INPUT_GRAD,
                blocks,
                &[gy.into(), w.into(), gx.into(), c, h, wd, f, kh, kw, cpb, accumulate],
            ),
        }
    }

    /// `gw = ∂y/∂w · gy`, through `partials` (of
    /// [`Direct::weight_grad_scratch_len`] floats) where the batch is split
    /// into groups.
    pub(super) fn weight_grad(
        &self,
        gpu: &mut CudaBackend,
        x: FloatBuf,
        gy: FloatBuf,
        partials: FloatBuf,
        gw: FloatBuf,
    ) -> Result<(), BackendError> {
        let groups = self.groups();
        let into = if groups == 1 { gw } else { partials };
        let blocks = (self.g.f.div_ceil(self.grad_filters), groups);
        let threads = self.weight_grad_items() * self.slices;
        let [c, h, wd, f, kh, kw] = self.dims();
        let [fpb, ipg, slices] = [self.grad_filters, self.images_per_group, self.slices].map(|v| Arg::U32(v as u32));
        let n = Arg::U32(self.g.n as u32);
        match rows_kernel(self.g.kw) {
            Some(rows) => gpu.launch(
                rows,
                grid(blocks, threads),
                &[x.into(), gy.into(), into.into(), n, c, h, wd, f, kh, fpb, ipg, slices],
            )?,
            None => gpu.launch(
                WEIGHT_GRAD,
                grid(blocks, threads),
                &[
                    x.into(),
                    gy.into(),
                    into.into(),
                    n,
                    c,
                    h,
                    wd,
                    f,
                    kh,
                    kw,
                    fpb,
                    ipg,
                    slices,
                ],
            )?,
        }
        if groups > 1 {
            let len = self.g.f * self.g.k();
            gpu.launch(
                WEIGHT_GRAD_SUM,
                Grid::blocks(len.div_ceil(32), (32 * SUMMERS) as u32),
                &[
                    partials.into(),
                    gw.into(),
                    Arg::U32(len as u32),
                    Arg::U32(groups as u32),
                ],
            )?;
        }
        Ok(())
    }
}

/// Whether these kernels run `pass` where they can: the forward and the
/// weight gradient always, the input gradient only under
/// `--deterministic`. On the lent H100 (MNIST CNN, `--profile`, µs for the
/// two convolutions, batch 100 / 1000) with a thread per row (filters 3 or
/// 5 wide): our forward 20 / 79 against cuDNN's 24 / 123, our weight
/// gradient 29 / 83 against 57 / 184; our input gradient 33 / 162 against
/// cuDNN's 14 / 83. Whole steps alternated in one call, the input gradient
/// ours against cuDNN's: 120.1 against 104.9 µs at batch 100, 422.6
/// against 352.2 at batch 1000. Under `--deterministic` cuDNN's
/// deterministic algorithms are slower still (batch 100: 200.7 µs a step
/// through cuDNN alone), so there every pass is ours: 119.7 µs at batch 100,
/// 422.7 at 1000 (`bench/results/direct-conv-2026-12-06-h100.txt`,
/// `bench/results/rows-and-splits-2026-12-06-h100.txt`).
fn chosen(pass: ConvPass, deterministic: bool) -> bool {
    deterministic || pass != ConvPass::InputGrad
}

/// The weight-gradient row kernel for filters `kw` wide, if there is one.
fn rows_kernel(kw: usize) -> Option<&'static str> {
    kernel_for(&WEIGHT_GRAD_ROWS, kw)
}

/// A weight-gradient block's threads for each four filters, bar slices:
/// one per row of taps where a row kernel runs `g`, else one per tap.
fn weight_grad_items_per_chunk(g: &ConvDims) -> usize {
    g.k() / rows_kernel(g.kw).map_or(1, |_| g.kw)
}

/// Of `kernels` (by filter width), the one for filters `kw` wide.
fn kernel_for(kernels: &[(usize, &'static str)], kw: usize) -> Option<&'static str> {
    kernels.iter().find(|&&(w, _)| w == kw).map(|&(_, name)| name)
}

/// `blocks` (x, y) of as many threads as `items` needs, in whole warps, at
/// most [`THREADS`] (a block's threads then take several items each).
fn grid(blocks: (usize, usize), items: usize) -> Grid {
    let threads = (items.div_ceil(32) * 32).clamp(32, THREADS);
    Grid {
        blocks: (blocks.0 as u32, blocks.1 as u32),
        threads: (threads as u32, 1),
    }
}

/// `blocks` (x, y) of [`THREADS`] threads, however few outputs a block
/// has: the forward and input-gradient blocks spend much of their time
/// loading shared memory, which more threads have more of in flight (on
/// the lent H100, MNIST at batch 100 with every pass ours: 130.3 µs a step
/// with as many threads as outputs, 127.5 with 256).
fn full(blocks: (usize, usize)) -> Grid {
    grid(blocks, THREADS)
}

#[cfg(test)]
mod tests {
    use super::*;

    const DETERMINISTIC: Policy = Policy {
        precision: crate::backend::Precision::Fp32,
        deterministic: true,
    };

    fn dims(n: usize, c: usize, hw: usize, f: usize, k: usize) -> ConvDims {
        ConvDims::new([n, c, hw, hw], [f, k, k], 1, 0, DType::F32, false)
    }

    /// The sizes this file launches by are the ones kernels.cu indexes by:
    /// a block of fewer summing warps than the kernel adds would leave
    /// groups out of a weight's gradient; a larger shared-memory bound here
    /// would overrun the kernel's arrays.
    #[test]
    fn the_launch_sizes_are_the_kernels_own() {
        let source = include_str!("kernels.cu");
        let define = |name: &str| -> usize {
            let line = source
                .lines()
                .find_map(|l| l.strip_prefix(&format!("#define {name} ")))
                .unwrap_or_else(|| panic!("kernels.cu defines no {name}"));
            line.trim().parse().unwrap_or_else(|e| panic!("{name} {line:?}: {e}"))
        };
        assert_eq!(define("DIRECT_SMEM"), SMEM);
        assert_eq!(define("DIRECT_TAPS"), TAPS);
        assert_eq!(define("DIRECT_SUMMERS"), SUMMERS);
    }

    /// The MNIST CNN's two convolutions, at the batches the README and the
    /// benchmarks train with, run here; ResNet's padded and 1×1 ones, a
    /// bf16 or channels-last step's, and filters of more than 256 taps do
    /// not.
    #[test]
    fn the_mnist_cnns_convolutions_run_here_and_resnets_do_not() {
        for n in [1, 100, 1000] {
            let conv1 = dims(n, 1, 28, 10, 5);
            assert!(
                Direct::runs(&conv1, DETERMINISTIC, ConvPass::Forward).is_some(),
                "conv1 at batch {n}"
            );
            assert!(
                Direct::runs(&conv1, DETERMINISTIC, ConvPass::WeightGrad).is_some(),
                "conv1 at batch {n}"
            );
            // Its input needs no gradient; its padded planes would not fit.
            assert!(
                Direct::runs(&conv1, DETERMINISTIC, ConvPass::InputGrad).is_none(),
                "conv1 at batch {n}"
            );
            for pass in [ConvPass::Forward, ConvPass::InputGrad, ConvPass::WeightGrad] {
                assert!(
                    Direct::runs(&dims(n, 10, 12, 20, 5), DETERMINISTIC, pass).is_some(),
                    "conv2 at batch {n}"
                );
            }
        }
        let padded = ConvDims::new([8, 64, 32, 32], [64, 3, 3], 1, 1, DType::F32, false);
        let strided = ConvDims::new([8, 3, 32, 32], [8, 3, 3], 2, 0, DType::F32, false);
        let bf16 = ConvDims::new([8, 1, 28, 28], [10, 5, 5], 1, 0, DType::Bf16, true);
        let nhwc = ConvDims::new([8, 1, 28, 28], [10, 5, 5], 1, 0, DType::F32, true);
        for (what, g) in [
            ("padded", padded),
            ("strided", strided),
            ("bf16", bf16),
            ("channels last", nhwc),
            ("1x1", dims(8, 16, 8, 16, 1)),
            ("289 taps", dims(8, 1, 40, 4, 17)),
            ("an image too large for shared memory", dims(8, 3, 64, 8, 3)),
        ] {
            assert_eq!(Direct::of(&g), None, "{what}");
        }
    }

    /// Every block's shared memory fits `SMEM` floats and every thread
    /// count stays within a block, over a sweep of small shapes: the
    /// kernels index shared memory by these sizes without checking.
    #[test]
    fn every_launch_fits_its_shared_memory_and_block() {
        let mut seen = 0;
        for n in [1, 3, 64, 100, 1000] {
            for c in [1, 2, 3, 10, 16, 32] {
                for hw in [5, 8, 12, 28, 40] {
                    for f in [1, 4, 5, 10, 20, 64] {
                        for k in [2, 3, 5] {
                            if k > hw {
                                continue;
                            }
                            let g = dims(n, c, hw, f, k);
                            let Some(d) = Direct::of(&g) else { continue };
                            seen += 1;
                            let image = rounded(c * hw * hw);
                            assert!(image + d.forward_filters * g.k() <= SMEM, "{g:?} forward");
                            if let Some(channels) = d.input_channels {
                                let padded = rounded(f * (hw + k - 1) * (hw + k - 1));
                                assert!(padded + channels * f * k * k <= SMEM, "{g:?} input grad");
                                assert!(channels > 0 && channels % 4 == 0, "{g:?}");
                            }
                            assert!(image + d.grad_filters * g.p() <= SMEM, "{g:?} weight grad");
                            let threads = d.weight_grad_items() * d.slices;
                            assert!(threads <= THREADS, "{g:?}: a thread per tap or row, and slice");
                            // A row kernel's slice sums: kw float4s a thread.
                            assert!(threads * k * 4 <= SMEM, "{g:?}: the row kernel's slice sums");
                            assert!(d.slices <= g.oh(), "{g:?}: every slice has a row");
                            assert!(d.images_per_group * (d.groups() - 1) < n, "{g:?}: no empty group");
                            for v in [d.forward_filters, d.grad_filters] {
                                assert!(v > 0 && v % 4 == 0, "{g:?}");
                            }
                        }
                    }
                }
            }
        }
        assert!(seen > 100, "the sweep reached only {seen} shapes the kernels run");
    }

    /// Without `--deterministic` the MNIST CNN's second convolution runs
    /// its forward and weight gradient here and its input gradient on
    /// cuDNN (which the lent H100 measured faster for that pass alone).
    #[test]
    fn by_default_only_the_input_gradient_stays_with_cudnn() {
        let default = Policy {
            deterministic: false,
            ..DETERMINISTIC
        };
        let conv2 = dims(100, 10, 12, 20, 5);
        assert!(Direct::runs(&conv2, default, ConvPass::Forward).is_some());
        assert!(Direct::runs(&conv2, default, ConvPass::WeightGrad).is_some());
        assert!(Direct::runs(&conv2, default, ConvPass::InputGrad).is_none());
    }

    /// A batch the launch splits into groups writes partial sums; one
    /// group writes the gradient itself.
    #[test]
    fn partial_sums_only_where_the_batch_is_split() {
        let one = Direct::of(&dims(1, 10, 12, 20, 5)).unwrap();
        assert_eq!(one.groups(), 1);
        assert_eq!(one.weight_grad_scratch_len(), 0);
        let many = Direct::of(&dims(100, 10, 12, 20, 5)).unwrap();
        assert!(many.groups() > 1);
        assert_eq!(many.weight_grad_scratch_len(), many.groups() * 20 * 250);
    }
}
