//! sigmoid: `y = 1 / (1 + e^−x)`, elementwise; backward multiplies the
//! gradient by `y·(1 − y)`, from the output it keeps. An LSTM's gates.
//!
//! Both devices compute in fp32 (a bf16 tensor's values are widened, the
//! output rounded once as it is stored) and saturate rather than overflow:
//! `e^−x` is infinite far below 0, where `y` is 0, and 0 far above, where it
//! is 1.

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Grid, KernelSource};
use crate::ops::Step;
use crate::tensor::{Tensor, TensorRef};
use crate::Result;

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "sigmoid",
    source: include_str!("kernels.cu"),
    entries: &[
        SIGMOID_FORWARD.f32,
        SIGMOID_FORWARD.bf16,
        SIGMOID_BACKWARD.f32,
        SIGMOID_BACKWARD.bf16,
    ],
};
const SIGMOID_FORWARD: FloatKernel = float_kernel!("sigmoid_forward");
const SIGMOID_BACKWARD: FloatKernel = float_kernel!("sigmoid_backward");

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    y: TensorRef,
}

impl<'s> Tensor<'s> {
    /// The logistic function of every element, in `self`'s type, shape and
    /// layout.
    pub fn sigmoid(self, s: &mut Step<'s>) -> Result<Tensor<'s>> {
        let y = s.output("sigmoid output", self.shape(), &[&self])?;
        let (x, out) = (self.buf(), y.buf());
        s.launch(
            &[x.into(), out.into()],
            |v| cpu::forward(v.read(x)?, v.write(out)?),
            |gpu| {
                let n = out.len();
                gpu.launch(
                    SIGMOID_FORWARD.of(out.dtype()),
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
        let gx = s.alloc_like("sigmoid input grad", &self.x)?;
        let y = self.y.buf;
        s.launch(
            &[y.into(), gy.into(), gx.into()],
            |v| cpu::backward(v.read(y)?, v.read(gy)?, v.write(gx)?),
            |gpu| {
                let n = gx.len();
                gpu.launch(
                    SIGMOID_BACKWARD.of(gx.dtype()),
                    Grid::over(n),
                    &[y.into(), gy.into(), gx.into(), Arg::U32(n as u32)],
                )
            },
        )?;
        s.accumulate(&self.x, gx)
    }
}
