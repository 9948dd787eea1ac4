//! Our own GPU kernels for small valid convolutions (fp32, NCHW, stride 1,
//! no padding, a filter wider than one pixel of at most
//! [`TAPS`] taps): the MNIST CNN's two. cuDNN's kernels for such shapes
//! took most of that network's step (its five passes 95 of 189 µs of
//! kernel time at batch 100, the weight gradients 57 of them); here a
//! block holds one image (or its gradient) and a few filters in shared
//! memory and each thread sums four outputs (kernels.cu's
//! `conv_direct_*`). Every sum runs in a fixed order, so a run repeats bit
//! for bit. Which passes they run is [`chosen`]'s, by the lent H100's
//! timings.
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
/// Blocks a launch aims for: two per multiprocessor of an H100 or H200
/// (132), so the few images of a small batch still fill the device.
const BLOCKS: usize = 264;

/// The kernels, in kernels.cu.
pub(super) const ENTRIES: [&str; 4] = [FORWARD, INPUT_GRAD, WEIGHT_GRAD, WEIGHT_GRAD_SUM];
const FORWARD: &str = "conv_direct_forward";
const INPUT_GRAD: &str = "conv_direct_input_grad";
const WEIGHT_GRAD: &str = "conv_direct_weight_grad";
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
        // planes; a thread per tap of four filters, the rest of the block's
        // threads sharing the taps' rows.
        let most = ((SMEM.checked_sub(image)? / (4 * g.p())).min(THREADS / taps)).min(chunks(g.f));
        let grad_chunks = chunks(g.f).min(most);
        if grad_chunks == 0 {
            return None;
        }
        let grad_filters = 4 * grad_chunks;
        let items = taps * grad_chunks;
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
        let blocks = self.g.f.div_ceil(self.forward_filters);
        let [c, h, wd, f, kh, kw] = self.dims();
        gpu.launch(
            FORWARD,
            full((blocks, self.g.n)),
            &[
                x.into(),
                w.into(),
                y.into(),
                c,
                h,
                wd,
                f,
                kh,
                kw,
                Arg::U32(self.forward_filters as u32),
            ],
        )
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
        let blocks = self.g.c.div_ceil(channels);
        let [c, h, wd, f, kh, kw] = self.dims();
        gpu.launch(
            INPUT_GRAD,
            full((blocks, self.g.n)),
            &[
                gy.into(),
                w.into(),
                gx.into(),
                c,
                h,
                wd,
                f,
                kh,
                kw,
                Arg::U32(channels as u32),
                Arg::U32(accumulate as u32),
            ],
        )
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
        let blocks = self.g.f.div_ceil(self.grad_filters);
        let items = self.g.k() * self.grad_filters / 4 * self.slices;
        let [c, h, wd, f, kh, kw] = self.dims();
        gpu.launch(
            WEIGHT_GRAD,
            grid((blocks, groups), items),
            &[
                x.into(),
                gy.into(),
                into.into(),
                Arg::U32(self.g.n as u32),
                c,
                h,
                wd,
                f,
                kh,
                kw,
                Arg::U32(self.grad_filters as u32),
                Arg::U32(self.images_per_group as u32),
                Arg::U32(self.slices as u32),
            ],
        )?;
        if groups > 1 {
            let len = self.g.f * self.g.k();
            gpu.launch(
                WEIGHT_GRAD_SUM,
                Grid::over(len),
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
/// `--deterministic`. On the lent H100 (MNIST CNN, batch 100, `--profile`,
/// µs for the two convolutions) our weight gradients take 25 against
/// cuDNN's 57, our forward 25 against its 24, our input gradient 36
/// against 14. Whole steps alternated in one call: with the forward ours,
/// 107.2 against 106.6 µs at batch 100 and 487.5 against 508.7 at batch
/// 1000. Under `--deterministic` cuDNN's deterministic algorithms are
/// slower still (batch 100: 200.7 µs a step through cuDNN alone against
/// 143.7 with our kernels when they came, 125.3 now), so there every pass
/// is ours (`bench/results/direct-conv-2026-12-06-h100.txt`,
/// `bench/results/staged-loads-2026-12-06-h100.txt`).
fn chosen(pass: ConvPass, deterministic: bool) -> bool {
    deterministic || pass != ConvPass::InputGrad
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
                            let items = g.k() * d.grad_filters / 4;
                            assert!(items * d.slices <= THREADS, "{g:?}: a thread per tap and slice");
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
