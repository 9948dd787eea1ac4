//! tanh: `y = tanh x`, elementwise; backward multiplies the gradient by
//! `1 − y²`, from the output it keeps. An LSTM's cell input and output.
//!
//! Both devices compute in fp32 (a bf16 tensor's values are widened, the
//! output rounded once as it is stored); `y` saturates at ±1.

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Grid, KernelSource};
use crate::ops::Step;
use crate::tensor::{Tensor, TensorRef};
use crate::Result;

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "tanh",
    source: include_str!("kernels.cu"),
    entries: &[
        TANH_FORWARD.f32,
        TANH_FORWARD.bf16,
        TANH_BACKWARD.f32,
        TANH_BACKWARD.bf16,
    ],
};
const TANH_FORWARD: FloatKernel = float_kernel!("tanh_forward");
const TANH_BACKWARD: FloatKernel = float_kernel!("tanh_backward");

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    y: TensorRef,
}

impl<'s> Tensor<'s> {
    /// The hyperbolic tangent of every element, in `self`'s type, shape and
    /// layout.
    pub fn tanh(self, s: &mut Step<'s>) -> Result<Tensor<'s>> {
        let y = s.output("tanh output", self.shape(), &[&self])?;
        let (x, out) = (self.buf(), y.buf());
        s.launch(
            &[x.into(), out.into()],
            |v| cpu::forward(v.read(x)?, v.write(out)?),
            |gpu| {
                let n = out.len();
                gpu.launch(
                    TANH_FORWARD.of(out.dtype()),
                    Grid::over(n),
                    &[x.into(), out.into(), Arg::U32(n as u32)],
                )
            },
        )?;
        if y.requires_grad() {
            s.record(Saved {
                x: self.inner,
                y: y.inner,
            });
        }
        Ok(y)
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        if !self.x.requires_grad {
            return Ok(());
        }
        let gx = s.alloc_like("tanh input grad", &self.x)?;
        let y = self.y.buf;
        s.launch(
            &[y.into(), gy.into(), gx.into()],
            |v| cpu::backward(v.read(y)?, v.read(gy)?, v.write(gx)?),
            |gpu| {
                let n = gx.len();
                gpu.launch(
                    TANH_BACKWARD.of(gx.dtype()),
                    Grid::over(n),
                    &[y.into(), gy.into(), gx.into(), Arg::U32(n as u32)],
                )
            },
        )?;
        s.accumulate(&self.x, gx)
    }
}
