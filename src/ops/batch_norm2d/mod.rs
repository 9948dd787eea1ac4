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
//! that reads it registers it as recomputable (see `Step::saved`), so the
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
//!
//! Here: the API (the plain and fused forms) and what a step records;
//! `geometry.rs` the sizes and the GPU's launch geometry, NCHW and NHWC;
//! `forward.rs` the statistics and the normalising pass; `backward.rs`
//! the gradients; `cpu.rs` the CPU kernels, `kernels.cu` the GPU's.

mod backward;
mod cpu;
mod forward;
mod geometry;
#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_in_place;
#[cfg(test)]
mod tests_sums;

use crate::autograd::Candidate;
use crate::backend::cuda::{float_kernel, FloatKernel, KernelSource};
use crate::backend::Sizing;
use crate::memory::{Buf, DType, FloatBuf};
use crate::ops::Step;
use crate::tensor::{Layout, Param, Shape, Tensor, TensorRef};
use crate::{Error, Result};
use forward::{batch_stats, eval_stats};
use geometry::Geometry;

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

/// A batch-norm layer's running statistics: non-trainable buffers of the
/// parameter store (`running_mean`, `running_var` of shape `[C]`,
/// `num_batches_tracked` of shape `[]`), written by the step in training
/// mode.
///
/// `num_batches_tracked` is an int64 in PyTorch; here it is an f32 like
/// every buffer, exact up to 2²⁴ (16.7 million) training steps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RunningStats {
    /// `running_mean`, `[C]`.
    pub mean: Param,
    /// `running_var`, `[C]` (unbiased, as PyTorch keeps it).
    pub var: Param,
    /// `num_batches_tracked`, `[]`.
    pub batches: Param,
}

/// How a batch-norm step normalises: with the batch's statistics (and
/// updating the running ones) in training, with the running ones in
/// evaluation.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BatchNormArgs {
    /// Normalise by the batch's statistics and update the running ones (else by
    /// the running ones).
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
                    timed_seconds: None,
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

impl Saved {
    /// The tensors [`Saved::recompute`] reads through [`Step::saved`].
    pub(crate) fn reads(&self) -> [Option<u32>; 2] {
        [Some(self.x.id), self.residual.map(|r| r.id)]
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
        // Normalising is elementwise: where nothing else reads the copy of
        // `x` this chain made, the output takes its place.
        let y = match s.may_overwrite(&self.x) {
            true => x,
            false => s.alloc_like(what, &self.y)?,
        };
        self.apply(s, x, r, y)?;
        Ok(y)
    }
}
