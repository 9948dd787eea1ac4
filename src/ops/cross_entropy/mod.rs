//! cross_entropy: log-softmax fused with the negative log-likelihood of
//! integer labels, with PyTorch's label smoothing, averaged over the batch:
//! `loss = mean_n [(1 − ε)·(−logp_n[label_n]) + ε·mean_k(−logp_nk)]`, where
//! `logp_n = log_softmax(x_n)` (`F.cross_entropy(x, labels, label_smoothing=ε)`).
//!
//! Fused because the gradient is then `softmax(x) − (1 − ε)·onehot − ε/C`
//! times the upstream gradient over N, with no division by a small
//! probability. Stable for any logits: every row is shifted by its maximum
//! before exponentiating.
//!
//! Invariants:
//! - With ε = 0 the CPU computes exactly the float operations, in the same
//!   order, as the loss this op replaced (the recorded MNIST losses are
//!   bit-exact); the smoothing terms are skipped, not multiplied by zero.
//! - Forward saves one log-sum-exp per row, not the `[N, C]` log-softmax:
//!   backward recomputes `x − lse`, the same subtraction with the same bits.
//! - The batch mean is a fixed-order sum (no atomics on the GPU): a run
//!   repeats bit for bit.
//! - With row weights `w` (a batch whose padding rows must count for
//!   nothing) row `n`'s loss and gradient are multiplied by `w_n` before the
//!   mean; without them nothing is multiplied, so the unweighted loss keeps
//!   its bits.
//! - A label ≥ C is an error on the CPU; on the GPU, which cannot stop to
//!   report it, it makes the loss NaN, which training reports.

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Grid, KernelSource};
use crate::memory::{Buf, DType, Touch};
use crate::ops::Step;
use crate::tensor::{Labels, Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "cross_entropy",
    source: include_str!("kernels.cu"),
    entries: &[CE_ROWS.f32, CE_ROWS.bf16, CE_MEAN, CE_BACKWARD.f32, CE_BACKWARD.bf16],
};
const CE_ROWS: FloatKernel = float_kernel!("ce_rows");
const CE_MEAN: &str = "ce_mean";
const CE_BACKWARD: FloatKernel = float_kernel!("ce_backward");

/// Threads of the per-row block: one warp for a few classes, up to 256 (the
/// kernels' shared arrays) for many. A power of two, as the tree reductions
/// need.
fn row_threads(classes: usize) -> u32 {
    classes.next_power_of_two().clamp(32, 256) as u32
}

/// Row blocks launched at most; the kernel strides over any rows beyond.
const MAX_ROW_BLOCKS: usize = 1 << 16;

/// How the loss is taken, beyond the logits and labels.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct CrossEntropyArgs {
    /// ε in [0, 1]: the target is `(1 − ε)·onehot + ε/C` (0: plain NLL).
    pub label_smoothing: f32,
    /// One weight per row multiplying its loss (`N` floats), where the
    /// batch has rows that must weigh less or nothing: padding rows weigh 0
    /// and the real ones `N / real` so the mean over `N` is the real rows'.
    pub weights: Option<Buf<f32>>,
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    logits: TensorRef,
    loss: TensorRef,
    /// Each row's log-sum-exp: `log_softmax(x) = x − lse`.
    lse: Buf<f32>,
    labels: Buf<u32>,
    /// The examples the mean is over (N, or more for a shard of a batch).
    over: usize,
    smoothing: f32,
    weights: Option<Buf<f32>>,
}

impl<'s> Tensor<'s> {
    /// Mean cross-entropy of the logits `self` `[N, C]` against `labels`
    /// (N of them, each < C).
    pub fn cross_entropy(self, s: &mut Step<'s>, labels: Labels<'s>, args: CrossEntropyArgs) -> Result<Tensor<'s>> {
        let n = self.shape().dim(0);
        self.cross_entropy_over(s, labels, n, args)
    }

    /// The loss summed over this batch and divided by `over` ≥ N: this
    /// batch's share of the mean over a larger one. Data-parallel ranks each
    /// take a shard of a global batch; their shares (and gradients) sum to
    /// the global batch's mean loss (and its gradient).
    pub fn cross_entropy_over(
        self,
        s: &mut Step<'s>,
        labels: Labels<'s>,
        over: usize,
        args: CrossEntropyArgs,
    ) -> Result<Tensor<'s>> {
        let x = self.shape();
        if x.rank() != 2 || x.dim(0) != labels.len() || x.dim(0) == 0 || x.dim(1) == 0 {
            return Err(Error::shape(
                "cross_entropy",
                format!(
                    "logits [N, C] with N, C ≥ 1 and N labels, got {x} and {} labels",
                    labels.len()
                ),
            ));
        }
        if over < x.dim(0) {
            return Err(Error::shape(
                "cross_entropy",
                format!("a mean over at least the batch's {} examples, got {over}", x.dim(0)),
            ));
        }
        let smoothing = args.label_smoothing;
        // As PyTorch: ε = 1 is a uniform target, legal if useless.
        if !(0.0..=1.0).contains(&smoothing) {
            return Err(Error::shape(
                "cross_entropy",
                format!("a label smoothing in [0, 1], got {smoothing}"),
            ));
        }
        let (n, c) = (x.dim(0), x.dim(1));
        let weights = args.weights;
        if let Some(w) = weights.filter(|w| w.len() != n) {
            return Err(Error::shape(
                "cross_entropy",
                format!("one weight for each of the {n} rows, got {}", w.len()),
            ));
        }
        let weights_arg = || weights.map_or(Arg::Null, |w| w.into());
        let lse = s.alloc::<f32>("log-sum-exp", Shape::new(&[n]))?;
        let row_loss = s.alloc::<f32>("row losses", Shape::new(&[n]))?;
        // The loss is fp32 whatever the logits are, as under autocast.
        let loss = s.output_of("loss", Shape::new(&[1]), DType::F32, &[&self])?;
        // On the stack: a step allocates nothing on the heap.
        let touched: [Touch; 6] = [
            self.buf().into(),
            labels.buf.into(),
            lse.into(),
            row_loss.into(),
            loss.buf().into(),
            weights.map_or(lse.into(), Into::into),
        ];
        s.launch(
            &touched[..5 + usize::from(weights.is_some())],
            |v| {
                let weights = weights.map(|w| v.read(w)).transpose()?;
                cpu::forward(
                    cpu::Rows { c, over, smoothing },
                    v.read(self.buf())?,
                    v.read(labels.buf)?,
                    weights,
                    v.write(lse)?,
                    v.write(row_loss)?,
                    v.write(loss.buf())?,
                )
            },
            |gpu| {
                gpu.launch(
                    CE_ROWS.of(self.dtype()),
                    Grid::blocks(n.min(MAX_ROW_BLOCKS), row_threads(c)),
                    &[
                        self.buf().into(),
                        labels.buf.into(),
                        lse.into(),
                        row_loss.into(),
                        weights_arg(),
                        Arg::U32(n as u32),
                        Arg::U32(c as u32),
                        Arg::F32(smoothing),
                    ],
                )?;
                gpu.launch(
                    CE_MEAN,
                    Grid::blocks(1, 256),
                    &[
                        row_loss.into(),
                        loss.buf().into(),
                        Arg::U32(n as u32),
                        Arg::U32(over as u32),
                    ],
                )
            },
        )?;
        if loss.requires_grad() {
            s.record(Saved {
                logits: self.inner,
                loss: loss.inner,
                lse,
                labels: labels.buf,
                over,
                smoothing,
                weights,
            });
        }
        Ok(loss)
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gloss) = s.grad_of(&self.loss) else {
            return Ok(());
        };
        let x = self.logits.shape;
        let gx = s.alloc_like("logits grad", &self.logits)?;
        let weights = self.weights;
        let touched: [Touch; 6] = [
            self.logits.buf.into(),
            self.lse.into(),
            self.labels.into(),
            gloss.into(),
            gx.into(),
            weights.map_or(self.lse.into(), Into::into),
        ];
        s.launch(
            &touched[..5 + usize::from(weights.is_some())],
            |v| {
                let weights = weights.map(|w| v.read(w)).transpose()?;
                cpu::backward(
                    cpu::Rows {
                        c: x.dim(1),
                        over: self.over,
                        smoothing: self.smoothing,
                    },
                    v.read(self.logits.buf)?,
                    v.read(self.lse)?,
                    v.read(self.labels)?,
                    weights,
                    v.read(gloss)?[0],
                    v.write(gx)?,
                );
                Ok(())
            },
            |gpu| {
                gpu.launch(
                    CE_BACKWARD.of(gx.dtype()),
                    Grid::over(x.numel()),
                    &[
                        self.logits.buf.into(),
                        self.lse.into(),
                        self.labels.into(),
                        gloss.into(),
                        gx.into(),
                        weights.map_or(Arg::Null, |w| w.into()),
                        Arg::U32(x.dim(0) as u32),
                        Arg::U32(x.dim(1) as u32),
                        Arg::U32(self.over as u32),
                        Arg::F32(self.smoothing),
                    ],
                )
            },
        )?;
        s.accumulate(&self.logits, gx)
    }
}
