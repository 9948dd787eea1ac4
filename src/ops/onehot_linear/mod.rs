//! onehot_linear: a linear layer applied to one-hot tokens, `y[n] =
//! W·onehot(tokens[n]) + b` for a weight `[R, V]` (as `nn.Linear(V, R)` or
//! an `nn.LSTM(input_size=V)`'s `weight_ih_l0` holds it) and a bias `[R]`:
//! `[N, R]` for `N` tokens. The product with a one-hot vector is column
//! `tokens[n]` of `W`, so the op gathers columns and adds the bias, never
//! making the `[N, V]` one-hot matrix or multiplying by its zeros: `N·R`
//! reads, against a product's `N·R·V` multiply-adds.
//!
//! A token past the weight's `V` columns is an error on the CPU
//! ([`BackendError::Token`]) and a NaN row on the GPU, as in `embedding`.
//!
//! Backward is deterministic on both devices, as `embedding`'s: the
//! weight's gradient element `(r, v)` is the sum of `dy[n, r]` over the
//! tokens `n` equal to `v`, added in the order of `n` (columns no token
//! names get zeros), and the bias's element `r` the sum of `dy[n, r]` over
//! every `n` in order.
//!
//! [`BackendError::Token`]: crate::backend::BackendError::Token

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Grid, KernelSource};
use crate::backend::{BackendError, Sizing};
use crate::memory::Buf;
use crate::ops::Step;
use crate::tensor::{Labels, Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "onehot_linear",
    source: include_str!("kernels.cu"),
    entries: &[
        ONEHOT_FORWARD.f32,
        ONEHOT_FORWARD.bf16,
        ONEHOT_WEIGHT_GRAD.f32,
        ONEHOT_WEIGHT_GRAD.bf16,
        ONEHOT_BIAS_GRAD.f32,
        ONEHOT_BIAS_GRAD.bf16,
    ],
};
const ONEHOT_FORWARD: FloatKernel = float_kernel!("onehot_linear_forward");
const ONEHOT_WEIGHT_GRAD: FloatKernel = float_kernel!("onehot_linear_weight_grad");
const ONEHOT_BIAS_GRAD: FloatKernel = float_kernel!("onehot_linear_bias_grad");

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    w: TensorRef,
    bias: TensorRef,
    tokens: Buf<u32>,
    y: TensorRef,
}

impl<'s> Tensor<'s> {
    /// `self` (a weight `[R, V]`) times the one-hot vector of each of
    /// `tokens`, plus `bias` `[R]`: column `tokens[n]` of `self` plus the
    /// bias as row `n` of the output `[N, R]`, in `self`'s type.
    pub fn onehot_linear(self, s: &mut Step<'s>, tokens: Labels<'s>, bias: Tensor<'s>) -> Result<Tensor<'s>> {
        let w = self.shape();
        if w.rank() != 2 || bias.shape() != Shape::new(&[w.dim(0)]) || bias.dtype() != self.dtype() {
            return Err(Error::shape(
                "onehot_linear",
                format!(
                    "a weight [R, V] and a bias [R] of its type, got {w} {} and {} {}",
                    self.dtype(),
                    bias.shape(),
                    bias.dtype()
                ),
            ));
        }
        let (rows, vocab, n) = (w.dim(0), w.dim(1), tokens.len());
        let y = s.output("onehot_linear output", Shape::new(&[n, rows]), &[&self, &bias])?;
        let (wb, bb, out, ids) = (self.buf(), bias.buf(), y.buf(), tokens.buf);
        if n > 0 && rows > 0 {
            s.launch(
                &[wb.into(), bb.into(), ids.into(), out.into()],
                |v| cpu::forward(v.read(wb)?, v.read(bb)?, v.read(ids)?, v.write(out)?),
                |gpu| {
                    gpu.launch(
                        ONEHOT_FORWARD.of(out.dtype()),
                        Grid::over(n * rows),
                        &[
                            wb.into(),
                            bb.into(),
                            ids.into(),
                            out.into(),
                            Arg::U32(n as u32),
                            Arg::U32(rows as u32),
                            Arg::U32(vocab as u32),
                        ],
                    )
                },
            )?;
        }
        if y.requires_grad() {
            s.record(Saved {
                w: self.inner,
                bias: bias.inner,
                tokens: ids,
                y: y.inner,
            });
        }
        Ok(y)
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        let (rows, vocab) = (self.w.shape.dim(0), self.w.shape.dim(1));
        let (n, ids) = (self.tokens.len(), self.tokens);
        if rows == 0 {
            return Ok(());
        }
        if self.w.requires_grad && vocab > 0 {
            // Written whole, zeros included: never added into.
            let gw = s.grad_buffer(&self.w, "onehot_linear weight grad")?;
            // The CPU sums each band of the gradient transposed first.
            let sums = match s.sizing() {
                Sizing::Cpu { .. } => Some(s.alloc::<f32>("onehot_linear weight grad sums", self.w.shape)?),
                Sizing::Cuda(_) => None,
            };
            s.launch(
                &[ids.into(), gy.into(), gw.into(), sums.unwrap_or_default().into()],
                |v| {
                    let sums = sums.ok_or(BackendError::Internal("onehot_linear's sums not made for the CPU"))?;
                    cpu::weight_grad(rows, v.read(ids)?, v.read(gy)?, v.write(gw)?, v.write(sums)?)
                },
                |gpu| {
                    gpu.launch(
                        ONEHOT_WEIGHT_GRAD.of(gw.dtype()),
                        Grid::over(rows * vocab),
                        &[
                            ids.into(),
                            gy.into(),
                            gw.into(),
                            Arg::U32(n as u32),
                            Arg::U32(rows as u32),
                            Arg::U32(vocab as u32),
                        ],
                    )
                },
            )?;
            s.accumulate(&self.w, gw)?;
        }
        if self.bias.requires_grad {
            let gb = s.grad_buffer(&self.bias, "onehot_linear bias grad")?;
            s.launch(
                &[gy.into(), gb.into()],
                |v| {
                    cpu::bias_grad(v.read(gy)?, v.write(gb)?);
                    Ok(())
                },
                |gpu| {
                    gpu.launch(
                        ONEHOT_BIAS_GRAD.of(gb.dtype()),
                        Grid::over(rows),
                        &[gy.into(), gb.into(), Arg::U32(n as u32), Arg::U32(rows as u32)],
                    )
                },
            )?;
            s.accumulate(&self.bias, gb)?;
        }
        Ok(())
    }
}
