//! log-softmax fused with the negative log-likelihood loss, averaged over the
//! batch: `loss = -mean_n log_softmax(x_n)[label_n]`. Fused because the
//! gradient is then simply `(softmax(x) - onehot(label)) / N`, with no
//! division by small probabilities.

mod cpu;
#[cfg(test)]
mod tests;

use crate::autograd::{Node, Step};
use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::backend::Backend;
use crate::memory::Buf;
use crate::tensor::{Labels, Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "log_softmax_nll",
    source: include_str!("kernels.cu"),
    entries: &[NLL_FORWARD, NLL_BACKWARD],
};
const NLL_FORWARD: &str = "nll_forward";
const NLL_BACKWARD: &str = "nll_backward";

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    logits: TensorRef,
    loss: TensorRef,
    log_probs: Buf<f32>,
    labels: Buf<u32>,
    /// The examples the mean is over (N, or more for a shard of a batch).
    over: usize,
}

impl<'s> Tensor<'s> {
    /// Mean NLL of `log_softmax(self)` `[N, C]` at `labels` (N of them, < C).
    pub fn log_softmax_nll(self, s: &mut Step<'s>, labels: Labels<'s>) -> Result<Tensor<'s>> {
        let n = self.shape().dim(0);
        self.log_softmax_nll_over(s, labels, n)
    }

    /// The NLL summed over this batch and divided by `over` ≥ N: this
    /// batch's share of the mean over a larger one. Data-parallel ranks each
    /// take a shard of a global batch; their shares (and gradients) sum to
    /// the global batch's mean loss (and its gradient).
    pub fn log_softmax_nll_over(self, s: &mut Step<'s>, labels: Labels<'s>, over: usize) -> Result<Tensor<'s>> {
        let x = self.shape();
        if x.rank() != 2 || x.dim(0) != labels.len() || x.dim(0) == 0 {
            return Err(Error::shape(
                "log_softmax_nll",
                format!("logits [N, C] and N labels, got {x} and {} labels", labels.len()),
            ));
        }
        if over < x.dim(0) {
            return Err(Error::shape(
                "log_softmax_nll",
                format!("a mean over at least the batch's {} examples, got {over}", x.dim(0)),
            ));
        }
        let log_probs = s.alloc::<f32>("log-softmax", x)?;
        let loss = s.output("loss", Shape::new(&[1]), &[&self])?;
        match s.uses(&[
            self.buf().into(),
            labels.buf.into(),
            log_probs.into(),
            loss.buf().into(),
        ]) {
            Backend::Cpu(cpu) => cpu.run(|v, _| {
                cpu::forward(
                    x,
                    over,
                    v.read(self.buf())?,
                    v.read(labels.buf)?,
                    v.write(log_probs)?,
                    v.write(loss.buf())?,
                )
            })?,
            Backend::Cuda(gpu) => gpu.launch(
                NLL_FORWARD,
                Grid::blocks(1, 256),
                &[
                    self.buf().into(),
                    labels.buf.into(),
                    log_probs.into(),
                    loss.buf().into(),
                    Arg::U32(x.dim(0) as u32),
                    Arg::U32(x.dim(1) as u32),
                    Arg::U32(over as u32),
                ],
            )?,
            Backend::Dry(_) => {}
        }
        if loss.requires_grad() {
            s.record(Node::LogSoftmaxNll(Saved {
                logits: self.inner,
                loss: loss.inner,
                log_probs,
                labels: labels.buf,
                over,
            }));
        }
        Ok(loss)
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gloss) = s.grad_of(&self.loss) else {
            return Ok(());
        };
        let gx = s.alloc::<f32>("logits grad", self.logits.shape)?;
        match s.uses(&[self.log_probs.into(), self.labels.into(), gloss.into(), gx.into()]) {
            Backend::Cpu(cpu) => cpu.run(|v, _| {
                cpu::backward(
                    self.logits.shape,
                    self.over,
                    v.read(self.log_probs)?,
                    v.read(self.labels)?,
                    v.read(gloss)?,
                    v.write(gx)?,
                );
                Ok(())
            })?,
            Backend::Cuda(gpu) => {
                let x = self.logits.shape;
                gpu.launch(
                    NLL_BACKWARD,
                    Grid::over(x.numel()),
                    &[
                        self.log_probs.into(),
                        self.labels.into(),
                        gloss.into(),
                        gx.into(),
                        Arg::U32(x.dim(0) as u32),
                        Arg::U32(x.dim(1) as u32),
                        Arg::U32(self.over as u32),
                    ],
                )?
            }
            Backend::Dry(_) => {}
        }
        s.accumulate(&self.logits, gx)
    }
}
