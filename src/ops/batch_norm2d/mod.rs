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
//! The CPU sums in f64, each channel's in order (two passes in forward:
//! the mean, then the squared deviations from it), so a statistic is
//! accurate to the f32 it is stored in. The GPU sums in f32 trees, one
//! block per channel, also two passes; the two agree to 1e-4 of the scale.

mod cpu;
#[cfg(test)]
mod tests;

use crate::autograd::{Node, Step};
use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::backend::Backend;
use crate::memory::Buf;
use crate::tensor::{Param, Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "batch_norm2d",
    source: include_str!("kernels.cu"),
    entries: &[
        BN_BATCH_STATS,
        BN_EVAL_STATS,
        BN_NORMALIZE,
        BN_BACKWARD_SUMS,
        BN_BACKWARD_INPUT,
    ],
};
const BN_BATCH_STATS: &str = "bn_batch_stats";
const BN_EVAL_STATS: &str = "bn_eval_stats";
const BN_NORMALIZE: &str = "bn_normalize";
const BN_BACKWARD_SUMS: &str = "bn_backward_sums";
const BN_BACKWARD_INPUT: &str = "bn_backward_input";

/// Threads of a block that reduces one channel (a power of two: the
/// kernels' tree reductions halve it).
const REDUCE_THREADS: u32 = 256;

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

/// Sizes of one batch norm: `n` images of `c` planes of `hw` pixels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    n: usize,
    c: usize,
    hw: usize,
}

impl Geometry {
    fn new(x: Shape, weight: Shape, bias: Shape, stats: &RunningStats, args: &BatchNormArgs) -> Result<Self> {
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
        Ok(Self { n, c, hw })
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

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    g: Geometry,
    training: bool,
    x: TensorRef,
    weight: TensorRef,
    bias: TensorRef,
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
        let g = Geometry::new(self.shape(), weight.shape(), bias.shape(), &stats, &args)?;
        let y = s.output("batch-norm output", self.shape(), &[&self, &weight, &bias])?;
        let channels = Shape::new(&[g.c]);
        let mean = s.alloc::<f32>("batch-norm mean", channels)?;
        let invstd = s.alloc::<f32>("batch-norm inverse std", channels)?;
        let (rm, rv, batches) = (stats.mean.buf(), stats.var.buf(), stats.batches.buf());
        if args.training {
            match s.uses(&[
                self.buf().into(),
                mean.into(),
                invstd.into(),
                rm.into(),
                rv.into(),
                batches.into(),
            ]) {
                Backend::Cpu(cpu) => cpu.run(|v, _| {
                    cpu::batch_stats(
                        g.c,
                        g.hw,
                        v.read(self.buf())?,
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
                })?,
                Backend::Cuda(gpu) => {
                    let [n, c, hw] = g.dims();
                    gpu.launch(
                        BN_BATCH_STATS,
                        Grid::blocks(g.c, REDUCE_THREADS),
                        &[
                            self.buf().into(),
                            mean.into(),
                            invstd.into(),
                            rm.into(),
                            rv.into(),
                            batches.into(),
                            n,
                            c,
                            hw,
                            Arg::F32(args.momentum),
                            Arg::F32(args.eps),
                        ],
                    )?
                }
                Backend::Dry(_) => {}
            }
        } else {
            match s.uses(&[rm.into(), rv.into(), mean.into(), invstd.into()]) {
                Backend::Cpu(cpu) => cpu.run(|v, _| {
                    cpu::eval_stats(v.read(rm)?, v.read(rv)?, args.eps, v.write(mean)?, v.write(invstd)?);
                    Ok(())
                })?,
                Backend::Cuda(gpu) => gpu.launch(
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
                )?,
                Backend::Dry(_) => {}
            }
        }
        match s.uses(&[
            self.buf().into(),
            mean.into(),
            invstd.into(),
            weight.buf().into(),
            bias.buf().into(),
            y.buf().into(),
        ]) {
            Backend::Cpu(cpu) => cpu.run(|v, _| {
                cpu::normalize(
                    g.c,
                    g.hw,
                    v.read(self.buf())?,
                    v.read(mean)?,
                    v.read(invstd)?,
                    v.read(weight.buf())?,
                    v.read(bias.buf())?,
                    v.write(y.buf())?,
                );
                Ok(())
            })?,
            Backend::Cuda(gpu) => {
                let [n, c, hw] = g.dims();
                gpu.launch(
                    BN_NORMALIZE,
                    Grid::over(g.numel()),
                    &[
                        self.buf().into(),
                        mean.into(),
                        invstd.into(),
                        weight.buf().into(),
                        bias.buf().into(),
                        y.buf().into(),
                        n,
                        c,
                        hw,
                    ],
                )?
            }
            Backend::Dry(_) => {}
        }
        if y.requires_grad() {
            s.record(Node::BatchNorm2d(Saved {
                g,
                training: args.training,
                x: self.inner,
                weight: weight.inner,
                bias: bias.inner,
                y: y.inner,
                mean,
                invstd,
            }));
        }
        Ok(y)
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        let g = self.g;
        let channels = Shape::new(&[g.c]);
        // Σ dy·x̂ and Σ dy are the weight's and the bias's gradients, and the
        // training dx needs both: they are summed once, into the parameters'
        // gradient buffers when those want them, else into scratch.
        let gw = match self.weight.requires_grad {
            true => s.grad_buffer(&self.weight, "batch-norm weight grad")?,
            false => s.alloc::<f32>("batch-norm Σ dy·x̂", channels)?,
        };
        let gb = match self.bias.requires_grad {
            true => s.grad_buffer(&self.bias, "batch-norm bias grad")?,
            false => s.alloc::<f32>("batch-norm Σ dy", channels)?,
        };
        let (x, mean, invstd) = (self.x.buf, self.mean, self.invstd);
        match s.uses(&[x.into(), gy.into(), mean.into(), invstd.into(), gw.into(), gb.into()]) {
            Backend::Cpu(cpu) => cpu.run(|v, _| {
                cpu::backward_sums(
                    g.c,
                    g.hw,
                    v.read(x)?,
                    v.read(gy)?,
                    v.read(mean)?,
                    v.read(invstd)?,
                    v.write(gw)?,
                    v.write(gb)?,
                );
                Ok(())
            })?,
            Backend::Cuda(gpu) => {
                let [n, c, hw] = g.dims();
                gpu.launch(
                    BN_BACKWARD_SUMS,
                    Grid::blocks(g.c, REDUCE_THREADS),
                    &[
                        x.into(),
                        gy.into(),
                        mean.into(),
                        invstd.into(),
                        gw.into(),
                        gb.into(),
                        n,
                        c,
                        hw,
                    ],
                )?
            }
            Backend::Dry(_) => {}
        }
        if self.x.requires_grad {
            let gx = s.alloc::<f32>("batch-norm input grad", self.x.shape)?;
            let w = self.weight.buf;
            match s.uses(&[
                x.into(),
                gy.into(),
                mean.into(),
                invstd.into(),
                w.into(),
                gw.into(),
                gb.into(),
                gx.into(),
            ]) {
                Backend::Cpu(cpu) => cpu.run(|v, _| {
                    cpu::input_grad(
                        g.c,
                        g.hw,
                        self.training,
                        cpu::Channels {
                            mean: v.read(mean)?,
                            invstd: v.read(invstd)?,
                            weight: v.read(w)?,
                            sum_dy_xhat: v.read(gw)?,
                            sum_dy: v.read(gb)?,
                        },
                        v.read(x)?,
                        v.read(gy)?,
                        v.write(gx)?,
                    );
                    Ok(())
                })?,
                Backend::Cuda(gpu) => {
                    let [n, c, hw] = g.dims();
                    gpu.launch(
                        BN_BACKWARD_INPUT,
                        Grid::over(g.numel()),
                        &[
                            x.into(),
                            gy.into(),
                            mean.into(),
                            invstd.into(),
                            w.into(),
                            gw.into(),
                            gb.into(),
                            gx.into(),
                            n,
                            c,
                            hw,
                            Arg::U32(self.training as u32),
                        ],
                    )?
                }
                Backend::Dry(_) => {}
            }
            s.accumulate(&self.x, gx)?;
        }
        if self.weight.requires_grad {
            s.accumulate(&self.weight, gw)?;
        }
        if self.bias.requires_grad {
            s.accumulate(&self.bias, gb)?;
        }
        Ok(())
    }
}
