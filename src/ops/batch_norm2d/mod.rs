//! batch_norm2d: PyTorch's `nn.BatchNorm2d` over `[N, C, H, W]`, per channel
//! `y = (x − μ)·invstd·w + b` with `invstd = 1/√(σ² + eps)`.
//!
//! In training `μ` and `σ²` are the batch's (the biased variance over the
//! `n = N·H·W` values of the channel), and the step updates the layer's
//! [`RunningStats`] in place, as PyTorch does:
//! `running_mean = m·μ + (1 − m)·running_mean`,
//! `running_var = m·σ²·n/(n − 1) + (1 − m)·running_var` (the unbiased
//! variance), `num_batches_tracked += 1`. Those writes go to persistent
//! buffers, declared like every other touch, so a captured step graph
//! replays them. In evaluation `μ` and `σ²` are the running statistics and
//! nothing is written.
//!
//! Forward keeps the `μ` and `invstd` it used, per channel, in step buffers;
//! backward recomputes `x̂ = (x − μ)·invstd` from them and the saved input:
//! `dw = Σ dy·x̂`, `db = Σ dy`, and `dx = w·invstd·(dy − db/n − x̂·dw/n)` in
//! training (the batch statistics depend on `x`), `dx = w·invstd·dy` in
//! evaluation.
//!
//! The fused forms, [`Tensor::batch_norm2d_relu`] and
//! [`Tensor::batch_norm2d_add_relu`], are a ResNet's `relu(bn(x))` and
//! `relu(bn(x) + residual)` in one pass over memory forward and one
//! backward, bit for bit what the separate ops give. `relu(bn(x))` is not
//! kept for backward: its mask is recomputed from `x`, and the convolution
//! that reads it registers it as recomputable (see [`Step::saved`]), so the
//! step keeps one tensor per convolution where separate ops keep two.
//!
//! The CPU sums in f64, each channel's in order (two passes in forward:
//! the mean, then the squared deviations from it), so a statistic is
//! accurate to the f32 it is stored in. The GPU splits each channel into
//! runs summed by blocks of their own (one pass, Chan's merge of the runs'
//! variances), then adds the runs in order: fixed trees, no atomics; the
//! two agree to 1e-4 of the scale.
//!
//! In a mixed-precision step (PyTorch's bf16 autocast) the input, the
//! residual, the output and their gradients are of the input's type, bf16;
//! the weight, the bias and every statistic stay fp32, and the GPU computes
//! every sum in fp32, rounding a value to bf16 once, when it stores it.
//!
//! The op runs in its input's layout (a bf16 step's convolutions leave NHWC,
//! channels last): the output and the input's gradient are in it, and a
//! residual in the other layout is converted to it. The GPU's channels-last
//! kernels (`_nhwc`) read a pixel's channels together and write the same
//! per-run partial sums as the NCHW ones, which the same kernels finish.
//! The CPU runs a channels-last batch norm on NCHW copies.

mod cpu;
#[cfg(test)]
mod tests;

use crate::autograd::Candidate;
use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Grid, KernelSource};
use crate::backend::{BackendError, Sizing};
use crate::memory::{Buf, DType, FloatBuf};
use crate::ops::Step;
use crate::tensor::{Layout, Param, Shape, Tensor, TensorRef};
use crate::{Error, Result};
use cpu::Mask;

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "batch_norm2d",
    source: include_str!("kernels.cu"),
    entries: &[
        BN_STATS_PARTIAL.f32,
        BN_STATS_PARTIAL.bf16,
        BN_STATS_FINISH,
        BN_EVAL_STATS,
        BN_APPLY.f32,
        BN_APPLY.bf16,
        BN_BACKWARD_PARTIAL.f32,
        BN_BACKWARD_PARTIAL.bf16,
        BN_BACKWARD_FINISH,
        BN_BACKWARD_INPUT.f32,
        BN_BACKWARD_INPUT.bf16,
        BN_STATS_PARTIAL_NHWC.f32,
        BN_STATS_PARTIAL_NHWC.bf16,
        BN_APPLY_NHWC.f32,
        BN_APPLY_NHWC.bf16,
        BN_BACKWARD_PARTIAL_NHWC.f32,
        BN_BACKWARD_PARTIAL_NHWC.bf16,
        BN_BACKWARD_INPUT_NHWC.f32,
        BN_BACKWARD_INPUT_NHWC.bf16,
    ],
};
// The kernels that read or write x-shaped tensors have an entry per type;
// the others read and write per-channel fp32 only.
const BN_STATS_PARTIAL: FloatKernel = float_kernel!("bn_stats_partial");
const BN_STATS_FINISH: &str = "bn_stats_finish";
const BN_EVAL_STATS: &str = "bn_eval_stats";
const BN_APPLY: FloatKernel = float_kernel!("bn_apply");
const BN_BACKWARD_PARTIAL: FloatKernel = float_kernel!("bn_backward_partial");
const BN_BACKWARD_FINISH: &str = "bn_backward_finish";
const BN_BACKWARD_INPUT: FloatKernel = float_kernel!("bn_backward_input");
// The same four over channels-last tensors (kernels.cu; the finishing
// kernels merge their partials unchanged).
const BN_STATS_PARTIAL_NHWC: FloatKernel = float_kernel!("bn_stats_partial_nhwc");
const BN_APPLY_NHWC: FloatKernel = float_kernel!("bn_apply_nhwc");
const BN_BACKWARD_PARTIAL_NHWC: FloatKernel = float_kernel!("bn_backward_partial_nhwc");
const BN_BACKWARD_INPUT_NHWC: FloatKernel = float_kernel!("bn_backward_input_nhwc");

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

/// A batch-norm layer's running statistics: non-trainable buffers of the
/// parameter store (`running_mean`, `running_var` of shape `[C]`,
/// `num_batches_tracked` of shape `[]`), written by the step in training
/// mode.
///
/// `num_batches_tracked` is an int64 in PyTorch; here it is an f32 like
/// every buffer, exact up to 2²⁴ (16.7 million) training steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunningStats {
    pub mean: Param,
    pub var: Param,
    pub batches: Param,
}

/// How a batch-norm step normalises: with the batch's statistics (and
/// updating the running ones) in training, with the running ones in
/// evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchNormArgs {
    pub training: bool,
    /// Weight of the batch's statistics in the running ones' update.
    pub momentum: f32,
    /// Added to the variance before its square root.
    pub eps: f32,
}

impl BatchNormArgs {
    /// Training with PyTorch's defaults: momentum 0.1, eps 1e-5.
    pub const fn train() -> Self {
        Self {
            training: true,
            momentum: 0.1,
            eps: 1e-5,
        }
    }

    /// Evaluation with PyTorch's default eps (momentum is unused).
    pub const fn eval() -> Self {
        Self {
            training: false,
            ..Self::train()
        }
    }
}

/// Sizes of one batch norm: `n` images of `c` planes of `hw` pixels, of
/// type `dtype` and in `layout` (x's, and so everything x-shaped's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    n: usize,
    c: usize,
    hw: usize,
    dtype: DType,
    layout: Layout,
}

impl Geometry {
    fn new(
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
            return bad(format!("at most {} elements, got {x}", u32::MAX));
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

    fn numel(&self) -> usize {
        self.n * self.c * self.hw
    }

    fn dims(&self) -> [Arg<'static>; 3] {
        [
            Arg::U32(self.n as u32),
            Arg::U32(self.c as u32),
            Arg::U32(self.hw as u32),
        ]
    }
}

impl Geometry {
    /// How the GPU splits a channel's `n·hw` values: (runs, values per run).
    fn runs(&self) -> (usize, usize) {
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

    /// Values per thread of `bn_apply`: consecutive ones of a plane, 16
    /// bytes of them where the plane allows (kernels.cu).
    fn apply_vec(&self) -> usize {
        match self.dtype {
            DType::Bf16 if self.hw.is_multiple_of(8) => 8,
            _ if self.hw.is_multiple_of(4) => 4,
            _ => 1,
        }
    }

    /// Values per thread of `bn_backward_input`: bf16's as `bn_apply`'s (the
    /// kernel decides alike), fp32's one, as it always took.
    fn input_grad_vec(&self) -> usize {
        match self.dtype {
            DType::Bf16 => self.apply_vec(),
            DType::F32 => 1,
        }
    }

    /// The type of the x-shaped buffers a GPU kernel is handed, which must
    /// all be this batch norm's: one kernel entry reads them all as one
    /// type, so a mix is refused rather than misread.
    fn dtype_of(&self, bufs: &[Option<FloatBuf>]) -> Result<DType, BackendError> {
        match bufs.iter().flatten().all(|b| b.dtype() == self.dtype) {
            true => Ok(self.dtype),
            false => Err(BackendError::Internal("batch-norm tensors of different float types")),
        }
    }

    /// The GPU's per-run partial sums, two per run and channel, in the step
    /// region; none on the CPU, which sums a channel in one task.
    fn partials(&self, s: &mut Step<'_>, what: &'static str) -> Result<Option<Buf<f32>>> {
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
    fn run_grid(&self) -> Grid {
        match self.layout {
            Layout::Nchw => Grid {
                blocks: (self.runs().0 as u32, self.c as u32),
                threads: (REDUCE_THREADS, 1),
            },
            Layout::Nhwc => self.nhwc_grid(self.runs().0),
        }
    }

    /// Rows of an NHWC tensor: its pixels, `n·hw`.
    fn rows(&self) -> Arg<'static> {
        Arg::U32((self.n * self.hw) as u32)
    }

    /// Channels per thread of the NHWC kernels: consecutive ones of a
    /// pixel, 16 bytes of them where `c` allows (kernels.cu).
    fn nhwc_vec(&self) -> usize {
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
    fn nhwc_threads(&self) -> (usize, usize) {
        let vec = self.nhwc_vec();
        let widest = 128 / (vec * self.dtype.size());
        let along = self.c.div_ceil(vec).next_power_of_two().min(widest);
        (along, NHWC_THREADS / along)
    }

    /// Channel tiles of the NHWC kernels: a block's channels each.
    fn nhwc_tiles(&self) -> usize {
        self.c.div_ceil(self.nhwc_threads().0 * self.nhwc_vec())
    }

    /// An NHWC grid of `columns` blocks along the rows per channel tile.
    fn nhwc_grid(&self, columns: usize) -> Grid {
        let (along, rows) = self.nhwc_threads();
        Grid {
            blocks: (columns as u32, self.nhwc_tiles() as u32),
            threads: (along as u32, rows as u32),
        }
    }

    /// The grid of an elementwise NHWC kernel: a few rows per thread, the
    /// rows split evenly over the block columns (the kernel divides).
    fn nhwc_elementwise_grid(&self) -> Grid {
        let rows_per_block = self.nhwc_threads().1 * NHWC_ROWS_PER_THREAD;
        self.nhwc_grid((self.n * self.hw).div_ceil(rows_per_block))
    }

    /// The CPU kernels read NCHW only: an NHWC batch norm on a CPU is run on
    /// NCHW copies (see `normalized`), so one here is a bug.
    fn cpu_layout(&self) -> std::result::Result<(), crate::backend::BackendError> {
        match self.layout {
            Layout::Nchw => Ok(()),
            Layout::Nhwc => Err(crate::backend::BackendError::Internal(
                "a channels-last batch norm on the CPU",
            )),
        }
    }
}

/// What follows the normalisation in the same kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Fused {
    Nothing,
    Relu,
    AddRelu,
}

impl Fused {
    /// The GPU kernels' `mask` (see `bn_masked` in kernels.cu).
    fn mask_code(self) -> u32 {
        self as u32
    }
}

/// `bn_masked`'s mask 3: a relu after a residual, from the pre-activation
/// plus the residual rather than from the output.
const MASK_PLUS_RESIDUAL: u32 = 3;

/// What backward reads besides x to know where the relu passed.
enum MaskSource {
    None,
    Output(FloatBuf),
    Residual(FloatBuf),
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    g: Geometry,
    training: bool,
    fused: Fused,
    x: TensorRef,
    weight: TensorRef,
    bias: TensorRef,
    residual: Option<TensorRef>,
    y: TensorRef,
    /// Per channel, the mean and `1/√(σ² + eps)` forward normalised with.
    mean: Buf<f32>,
    invstd: Buf<f32>,
}

impl<'s> Tensor<'s> {
    /// Batch normalisation of `self` `[N, C, H, W]` per channel, scaled by
    /// `weight` and shifted by `bias` (both `[C]`, trainable: they come
    /// from [`Step::param`]). In training it updates `stats` in place.
    pub fn batch_norm2d(
        self,
        s: &mut Step<'s>,
        weight: Tensor<'s>,
        bias: Tensor<'s>,
        stats: RunningStats,
        args: BatchNormArgs,
    ) -> Result<Tensor<'s>> {
        self.normalized(s, [weight, bias], stats, args, Fused::Nothing, None)
    }

    /// `relu(batch_norm2d(…))` in one pass. In training the output is
    /// recomputed in backward where an op needs it (a convolution's weight
    /// gradient) rather than kept.
    pub fn batch_norm2d_relu(
        self,
        s: &mut Step<'s>,
        weight: Tensor<'s>,
        bias: Tensor<'s>,
        stats: RunningStats,
        args: BatchNormArgs,
    ) -> Result<Tensor<'s>> {
        self.normalized(s, [weight, bias], stats, args, Fused::Relu, None)
    }

    /// `relu(batch_norm2d(…) + residual)` in one pass: the end of a
    /// residual block. `residual` has `self`'s shape, and is cast to its
    /// type where it is of the other.
    pub fn batch_norm2d_add_relu(
        self,
        s: &mut Step<'s>,
        weight: Tensor<'s>,
        bias: Tensor<'s>,
        stats: RunningStats,
        args: BatchNormArgs,
        residual: Tensor<'s>,
    ) -> Result<Tensor<'s>> {
        if residual.shape() != self.shape() {
            return Err(Error::shape(
                "batch_norm2d_add_relu",
                format!(
                    "a residual of the input's shape {}, got {}",
                    self.shape(),
                    residual.shape()
                ),
            ));
        }
        self.normalized(s, [weight, bias], stats, args, Fused::AddRelu, Some(residual))
    }

    fn normalized(
        self,
        s: &mut Step<'s>,
        [weight, bias]: [Tensor<'s>; 2],
        stats: RunningStats,
        args: BatchNormArgs,
        fused: Fused,
        residual: Option<Tensor<'s>>,
    ) -> Result<Tensor<'s>> {
        let g = Geometry::new(
            self.shape(),
            (self.dtype(), self.layout()),
            weight.shape(),
            bias.shape(),
            &stats,
            &args,
        )?;
        // The CPU kernels read NCHW: a channels-last batch norm there runs
        // on NCHW copies, its output made channels last again.
        if g.layout == Layout::Nhwc && matches!(s.sizing(), Sizing::Cpu { .. }) {
            let x = self.to_layout(s, Layout::Nchw)?;
            let residual = residual.map(|r| r.to_layout(s, Layout::Nchw)).transpose()?;
            let y = x.normalized(s, [weight, bias], stats, args, fused, residual)?;
            return y.to_layout(s, Layout::Nhwc);
        }
        // The kernels read the weight and bias as fp32 and everything
        // x-shaped as x's type and in x's layout, as autocast does: a bf16
        // weight is widened (its gradient goes back through the cast) and a
        // residual of the other type or layout made x's.
        let weight = weight.cast(s, DType::F32)?;
        let bias = bias.cast(s, DType::F32)?;
        let residual = residual
            .map(|r| r.convert(s, self.dtype(), self.layout()))
            .transpose()?;
        let what = match fused {
            Fused::Nothing => "batch-norm output",
            Fused::Relu => "batch-norm relu output",
            Fused::AddRelu => "batch-norm + residual relu output",
        };
        let y = match residual {
            Some(r) => s.output(what, self.shape(), &[&self, &weight, &bias, &r])?,
            None => s.output(what, self.shape(), &[&self, &weight, &bias])?,
        };
        let channels = Shape::new(&[g.c]);
        let mean = s.alloc::<f32>("batch-norm mean", channels)?;
        let invstd = s.alloc::<f32>("batch-norm inverse std", channels)?;
        if args.training {
            batch_stats(s, &g, self.buf(), stats, args, mean, invstd)?;
        } else {
            eval_stats(s, &g, stats, args, mean, invstd)?;
        }
        let saved = Saved {
            g,
            training: args.training,
            fused,
            x: self.inner,
            weight: weight.inner,
            bias: bias.inner,
            residual: residual.map(|r| r.inner),
            y: y.inner,
            mean,
            invstd,
        };
        saved.apply(s, self.buf(), residual.map(|r| r.buf()), y.buf())?;
        // A block's output (after the residual) is kept for the next
        // convolution's weight gradient and its own mask: a memory budget
        // may drop it. Counted in every step, as convolutions are.
        let dropped = fused == Fused::AddRelu && {
            let bytes = g.numel() * g.dtype.size();
            s.drops_next_candidate(
                &y.inner,
                [Some(&self.inner), residual.as_ref().map(|r| &r.inner)],
                Candidate {
                    what,
                    bytes,
                    multiply_adds: 0,
                    bytes_moved: 3 * bytes as u64,
                    reads: Vec::new(),
                    remade: 0,
                },
            )
        };
        if y.requires_grad() {
            s.record(saved);
            // Recomputing an output no backward reads costs nothing: the
            // plain forms are registered always (a shortcut's batch norm is
            // read again only to recompute a dropped block output).
            if fused != Fused::AddRelu || dropped {
                s.recomputable(&y.inner, saved);
            }
        }
        Ok(y)
    }
}

/// Training's statistics: the batch's mean and inverse std, and the
/// running statistics moved towards them.
fn batch_stats(
    s: &mut Step<'_>,
    g: &Geometry,
    x: FloatBuf,
    stats: RunningStats,
    args: BatchNormArgs,
    mean: Buf<f32>,
    invstd: Buf<f32>,
) -> Result<()> {
    let (rm, rv, batches) = (stats.mean.buf(), stats.var.buf(), stats.batches.buf());
    let partial = g.partials(s, "batch-norm run statistics")?;
    s.launch(
        &[
            x.into(),
            partial.unwrap_or_default().into(),
            mean.into(),
            invstd.into(),
            rm.into(),
            rv.into(),
            batches.into(),
        ],
        |v| {
            g.cpu_layout()?;
            cpu::batch_stats(
                g.c,
                g.hw,
                v.read(x)?,
                args,
                cpu::Stats {
                    mean: v.write(mean)?,
                    invstd: v.write(invstd)?,
                    running_mean: v.write(rm)?,
                    running_var: v.write(rv)?,
                },
            );
            v.write(batches)?[0] += 1.0;
            Ok(())
        },
        |gpu| {
            let partial = partial.ok_or(crate::backend::BackendError::Internal(
                "batch-norm statistics on a GPU without their partial sums",
            ))?;
            let [n, c, hw] = g.dims();
            let (runs, run_len) = g.runs();
            let dtype = g.dtype_of(&[Some(x)])?;
            match g.layout {
                Layout::Nchw => gpu.launch(
                    BN_STATS_PARTIAL.of(dtype),
                    g.run_grid(),
                    &[x.into(), partial.into(), n, c, hw, Arg::U32(run_len as u32)],
                )?,
                Layout::Nhwc => gpu.launch(
                    BN_STATS_PARTIAL_NHWC.of(dtype),
                    g.run_grid(),
                    &[
                        x.into(),
                        partial.into(),
                        g.rows(),
                        c,
                        Arg::U32(run_len as u32),
                        Arg::U32(g.nhwc_vec() as u32),
                    ],
                )?,
            }
            gpu.launch(
                BN_STATS_FINISH,
                Grid::blocks(g.c, REDUCE_THREADS),
                &[
                    partial.into(),
                    mean.into(),
                    invstd.into(),
                    rm.into(),
                    rv.into(),
                    batches.into(),
                    n,
                    hw,
                    Arg::U32(runs as u32),
                    Arg::U32(run_len as u32),
                    Arg::F32(args.momentum),
                    Arg::F32(args.eps),
                ],
            )?;
            Ok(())
        },
    )?;
    Ok(())
}

/// Evaluation's statistics: the running ones.
fn eval_stats(
    s: &mut Step<'_>,
    g: &Geometry,
    stats: RunningStats,
    args: BatchNormArgs,
    mean: Buf<f32>,
    invstd: Buf<f32>,
) -> Result<()> {
    let (rm, rv) = (stats.mean.buf(), stats.var.buf());
    s.launch(
        &[rm.into(), rv.into(), mean.into(), invstd.into()],
        |v| {
            cpu::eval_stats(v.read(rm)?, v.read(rv)?, args.eps, v.write(mean)?, v.write(invstd)?);
            Ok(())
        },
        |gpu| {
            gpu.launch(
                BN_EVAL_STATS,
                Grid::over(g.c),
                &[
                    rm.into(),
                    rv.into(),
                    mean.into(),
                    invstd.into(),
                    Arg::U32(g.c as u32),
                    Arg::F32(args.eps),
                ],
            )
        },
    )?;
    Ok(())
}

impl Saved {
    /// The tensors [`Saved::recompute`] reads through [`Step::saved`].
    pub(crate) fn reads(&self) -> [Option<u32>; 2] {
        [Some(self.x.id), self.residual.map(|r| r.id)]
    }

    /// Writes the forward's output into `y`: normalised, plus the residual,
    /// through the relu, as `fused` says. Recomputation calls it again with
    /// the same inputs, so it gives the same bits.
    fn apply(&self, s: &mut Step<'_>, x: FloatBuf, r: Option<FloatBuf>, y: FloatBuf) -> Result<()> {
        let g = self.g;
        let (w, b) = (self.weight.buf, self.bias.buf);
        let relu = self.fused != Fused::Nothing;
        s.launch(
            &[
                x.into(),
                self.mean.into(),
                self.invstd.into(),
                w.into(),
                b.into(),
                r.unwrap_or_default().into(),
                y.into(),
            ],
            |v| {
                g.cpu_layout()?;
                let residual = match r {
                    Some(r) => Some(v.read(r)?),
                    None => None,
                };
                cpu::normalize(
                    g.c,
                    g.hw,
                    cpu::Channels {
                        mean: v.read(self.mean)?,
                        invstd: v.read(self.invstd)?,
                        weight: v.read(w)?,
                        bias: v.read(b)?,
                    },
                    v.read(x)?,
                    residual,
                    relu,
                    v.write(y)?,
                );
                Ok(())
            },
            |gpu| {
                if g.layout == Layout::Nhwc {
                    let dtype = g.dtype_of(&[Some(x), r, Some(y)])?;
                    let [_, c, _] = g.dims();
                    gpu.launch(
                        BN_APPLY_NHWC.of(dtype),
                        g.nhwc_elementwise_grid(),
                        &[
                            x.into(),
                            self.mean.into(),
                            self.invstd.into(),
                            w.into(),
                            b.into(),
                            r.map_or(Arg::Null, Arg::from),
                            y.into(),
                            g.rows(),
                            c,
                            Arg::U32(relu as u32),
                            Arg::U32(g.nhwc_vec() as u32),
                        ],
                    )
                } else {
                    let dtype = g.dtype_of(&[Some(x), r, Some(y)])?;
                    let [n, c, hw] = g.dims();
                    let vec = g.apply_vec();
                    gpu.launch(
                        BN_APPLY.of(dtype),
                        Grid::over(g.numel() / vec),
                        &[
                            x.into(),
                            self.mean.into(),
                            self.invstd.into(),
                            w.into(),
                            b.into(),
                            r.map_or(Arg::Null, Arg::from),
                            y.into(),
                            n,
                            c,
                            hw,
                            Arg::U32(relu as u32),
                            Arg::U32(vec as u32),
                        ],
                    )
                }
            },
        )?;
        Ok(())
    }

    /// The output again, in backward, into a new step buffer, from the
    /// statistics forward kept: what an op that saved it reads instead of
    /// keeping it. Its inputs are read through [`Step::saved`] too, so a
    /// block's output may come back from recomputed convolutions.
    pub(crate) fn recompute(self, s: &mut Step<'_>) -> Result<FloatBuf> {
        let x = s.saved(&self.x)?;
        let r = match self.residual {
            Some(r) => Some(s.saved(&r)?),
            None => None,
        };
        let what = match self.fused {
            Fused::Nothing => "batch-norm output, recomputed",
            Fused::Relu => "batch-norm relu output, recomputed",
            Fused::AddRelu => "batch-norm + residual relu output, recomputed",
        };
        let y = s.alloc_like(what, &self.y)?;
        self.apply(s, x, r, y)?;
        Ok(y)
    }

    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        let g = self.g;
        let channels = Shape::new(&[g.c]);
        // Σ g·x̂ and Σ g (g: dy where the relu passed it) are the weight's and
        // the bias's gradients, and the training dx needs both: they are
        // summed once, into the parameters' gradient buffers when those want
        // them, else into scratch.
        let gw = match self.weight.requires_grad {
            true => s.grad_buffer(&self.weight, "batch-norm weight grad")?,
            false => s.alloc::<f32>("batch-norm Σ dy·x̂", channels)?.into(),
        };
        let gb = match self.bias.requires_grad {
            true => s.grad_buffer(&self.bias, "batch-norm bias grad")?,
            false => s.alloc::<f32>("batch-norm Σ dy", channels)?.into(),
        };
        // The input may have been dropped under a memory budget and be
        // recomputed here.
        let x = s.saved(&self.x)?;
        let (mean, invstd, w, b) = (self.mean, self.invstd, self.weight.buf, self.bias.buf);
        // Only the relu after a residual reads more than x for its mask
        // (the plain relu's comes from x): the output, or, where a budget
        // dropped it and the residual is at hand, the residual, so that a
        // recomputed output need not live on from the next block's
        // backward to this one.
        let mask = match self.fused {
            Fused::AddRelu => match self.residual {
                Some(r) if s.is_dropped(&self.y) && s.at_hand(&r) => MaskSource::Residual(s.saved(&r)?),
                _ => MaskSource::Output(s.saved(&self.y)?),
            },
            Fused::Nothing | Fused::Relu => MaskSource::None,
        };
        let (y, mask_code) = match mask {
            MaskSource::Output(y) => (Some(y), self.fused.mask_code()),
            MaskSource::Residual(r) => (Some(r), MASK_PLUS_RESIDUAL),
            MaskSource::None => (None, self.fused.mask_code()),
        };
        let partial = g.partials(s, "batch-norm run gradient sums")?;
        s.launch(
            &[
                x.into(),
                gy.into(),
                y.unwrap_or_default().into(),
                mean.into(),
                invstd.into(),
                w.into(),
                b.into(),
                partial.unwrap_or_default().into(),
                gw.into(),
                gb.into(),
            ],
            |v| {
                g.cpu_layout()?;
                let mask = self.mask(v.read(w)?, v.read(b)?, mask_code, y.map(|y| v.read(y)).transpose()?);
                cpu::backward_sums(
                    g.c,
                    g.hw,
                    v.read(x)?,
                    v.read(gy)?,
                    v.read(mean)?,
                    v.read(invstd)?,
                    &mask,
                    v.write(gw)?,
                    v.write(gb)?,
                );
                Ok(())
            },
            |gpu| {
                let partial = partial.ok_or(crate::backend::BackendError::Internal(
                    "batch-norm backward on a GPU without its partial sums",
                ))?;
                let dtype = g.dtype_of(&[Some(x), Some(gy), y])?;
                let [n, c, hw] = g.dims();
                let (runs, run_len) = g.runs();
                match g.layout {
                    Layout::Nchw => gpu.launch(
                        BN_BACKWARD_PARTIAL.of(dtype),
                        g.run_grid(),
                        &[
                            x.into(),
                            gy.into(),
                            y.map_or(Arg::Null, Arg::from),
                            mean.into(),
                            invstd.into(),
                            w.into(),
                            b.into(),
                            partial.into(),
                            n,
                            c,
                            hw,
                            Arg::U32(run_len as u32),
                            Arg::U32(mask_code),
                        ],
                    )?,
                    Layout::Nhwc => gpu.launch(
                        BN_BACKWARD_PARTIAL_NHWC.of(dtype),
                        g.run_grid(),
                        &[
                            x.into(),
                            gy.into(),
                            y.map_or(Arg::Null, Arg::from),
                            mean.into(),
                            invstd.into(),
                            w.into(),
                            b.into(),
                            partial.into(),
                            g.rows(),
                            c,
                            Arg::U32(run_len as u32),
                            Arg::U32(mask_code),
                            Arg::U32(g.nhwc_vec() as u32),
                        ],
                    )?,
                }
                gpu.launch(
                    BN_BACKWARD_FINISH,
                    Grid::blocks(g.c, REDUCE_THREADS),
                    &[
                        partial.into(),
                        invstd.into(),
                        gw.into(),
                        gb.into(),
                        Arg::U32(runs as u32),
                    ],
                )?;
                Ok(())
            },
        )?;
        let residual = self.residual.filter(|r| r.requires_grad);
        // Nothing reads the output's gradient after this op (but the one
        // backward started from, the caller's): one of the gradients it
        // makes goes into those bytes instead of new ones, the residual's
        // where there is one (the input's needs the masked values only), so
        // a block's backward holds two such tensors at once, not three.
        // A parameter's gradient goes to its slot of the gradient slab
        // instead (see `Step::grad_buffer`).
        let reuse = s.owns_grad(&self.y);
        let gx = match self.x.requires_grad {
            true if reuse && residual.is_none() && !s.is_param(&self.x) => Some(gy),
            true => Some(s.alloc_like("batch-norm input grad", &self.x)?),
            false => None,
        };
        let gr = match residual {
            Some(r) if reuse && !s.is_param(&r) => Some(gy),
            Some(r) => Some(s.grad_buffer(&r, "batch-norm residual grad")?),
            None => None,
        };
        if reuse && (gx == Some(gy) || gr == Some(gy)) {
            s.release_grad(&self.y);
        }
        if gx.is_some() || gr.is_some() {
            s.launch(
                &[
                    x.into(),
                    gy.into(),
                    y.unwrap_or_default().into(),
                    mean.into(),
                    invstd.into(),
                    w.into(),
                    b.into(),
                    gw.into(),
                    gb.into(),
                    gx.unwrap_or_default().into(),
                    gr.unwrap_or_default().into(),
                ],
                |v| {
                    g.cpu_layout()?;
                    let (wv, bv) = (v.read(w)?, v.read(b)?);
                    let mask = self.mask(wv, bv, mask_code, y.map(|y| v.read(y)).transpose()?);
                    let k = cpu::Channels {
                        mean: v.read(mean)?,
                        invstd: v.read(invstd)?,
                        weight: wv,
                        bias: bv,
                    };
                    let (xv, sums) = (v.read(x)?, (v.read(gw)?, v.read(gb)?));
                    let into = match (gx, gr) {
                        (Some(gx), _) if gx == gy => Some(cpu::InPlace::Input),
                        (gx, Some(gr)) if gr == gy => Some(cpu::InPlace::Residual {
                            gx: gx.map(|gx| v.write(gx)).transpose()?,
                        }),
                        _ => None,
                    };
                    if let Some(into) = into {
                        let t = self.training;
                        cpu::grads_in_place(g.c, g.hw, t, &k, sums, &mask, xv, v.write(gy)?, into);
                        return Ok(());
                    }
                    let gyv = v.read(gy)?;
                    if let Some(gx) = gx {
                        cpu::input_grad(g.c, g.hw, self.training, &k, sums, &mask, xv, gyv, v.write(gx)?);
                    }
                    if let Some(gr) = gr {
                        cpu::passed_grad(g.c, g.hw, &k, &mask, xv, gyv, v.write(gr)?);
                    }
                    Ok(())
                },
                |gpu| {
                    if g.layout == Layout::Nhwc {
                        let dtype = g.dtype_of(&[Some(x), Some(gy), y, gx, gr])?;
                        let [_, c, _] = g.dims();
                        gpu.launch(
                            BN_BACKWARD_INPUT_NHWC.of(dtype),
                            g.nhwc_elementwise_grid(),
                            &[
                                x.into(),
                                gy.into(),
                                y.map_or(Arg::Null, Arg::from),
                                mean.into(),
                                invstd.into(),
                                w.into(),
                                b.into(),
                                gw.into(),
                                gb.into(),
                                gx.map_or(Arg::Null, Arg::from),
                                gr.map_or(Arg::Null, Arg::from),
                                g.rows(),
                                c,
                                Arg::U32(self.training as u32),
                                Arg::U32(mask_code),
                                Arg::U32(g.nhwc_vec() as u32),
                            ],
                        )
                    } else {
                        let dtype = g.dtype_of(&[Some(x), Some(gy), y, gx, gr])?;
                        let [n, c, hw] = g.dims();
                        let vec = g.input_grad_vec();
                        gpu.launch(
                            BN_BACKWARD_INPUT.of(dtype),
                            Grid::over(g.numel() / vec),
                            &[
                                x.into(),
                                gy.into(),
                                y.map_or(Arg::Null, Arg::from),
                                mean.into(),
                                invstd.into(),
                                w.into(),
                                b.into(),
                                gw.into(),
                                gb.into(),
                                gx.map_or(Arg::Null, Arg::from),
                                gr.map_or(Arg::Null, Arg::from),
                                n,
                                c,
                                hw,
                                Arg::U32(self.training as u32),
                                Arg::U32(mask_code),
                            ],
                        )
                    }
                },
            )?;
        }
        if let Some(gx) = gx {
            s.accumulate(&self.x, gx)?;
        }
        if let (Some(r), Some(gr)) = (residual, gr) {
            s.accumulate(&r, gr)?;
        }
        if self.weight.requires_grad {
            s.accumulate(&self.weight, gw)?;
        }
        if self.bias.requires_grad {
            s.accumulate(&self.bias, gb)?;
        }
        Ok(())
    }

    /// Where the gradient passes, for the CPU kernels.
    /// The CPU's mask for the GPU's `mask_code`, `y` its operand.
    fn mask<'a>(&self, weight: &'a [f32], bias: &'a [f32], mask_code: u32, y: Option<&'a [f32]>) -> Mask<'a> {
        match (self.fused, mask_code, y) {
            (Fused::Relu, _, _) => Mask::PreActivation { weight, bias },
            (Fused::AddRelu, MASK_PLUS_RESIDUAL, Some(residual)) => Mask::PlusResidual { weight, bias, residual },
            (Fused::AddRelu, _, Some(y)) => Mask::Output(y),
            _ => Mask::All,
        }
    }
}
