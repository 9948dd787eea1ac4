//! relu: `y = max(x, 0)`; backward passes the gradient where `y > 0`.

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Grid, KernelSource};
use crate::ops::Step;
use crate::tensor::{Tensor, TensorRef};
use crate::Result;

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "relu",
    source: include_str!("kernels.cu"),
    entries: &[
        RELU_FORWARD.f32,
        RELU_FORWARD.bf16,
        RELU_BACKWARD.f32,
        RELU_BACKWARD.bf16,
    ],
};
const RELU_FORWARD: FloatKernel = float_kernel!("relu_forward");
const RELU_BACKWARD: FloatKernel = float_kernel!("relu_backward");

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    y: TensorRef,
    x: TensorRef,
}

impl<'s> Tensor<'s> {
    /// `max(x, 0)`, elementwise.
    pub fn relu(self, s: &mut Step<'s>) -> Result<Tensor<'s>> {
        let y = s.output("relu output", self.shape(), &[&self])?;
        let (x, out) = (self.buf(), y.buf());
        s.launch(
            &[x.into(), out.into()],
            |v| cpu::forward(v.read(x)?, v.write(out)?),
            |gpu| {
                let n = out.len();
                gpu.launch(
                    RELU_FORWARD.of(out.dtype()),
                    Grid::over(n),
                    &[x.into(), out.into(), Arg::U32(n as u32)],
                )
            },
        )?;
        if y.requires_grad() {
            s.record(Saved {
                y: y.inner,
                x: self.inner,
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
        let gx = s.alloc_like("relu input grad", &self.x)?;
        let y = self.y.buf;
        s.launch(
            &[y.into(), gy.into(), gx.into()],
            |v| cpu::backward(v.read(y)?, v.read(gy)?, v.write(gx)?),
            |gpu| {
                let n = gx.len();
                gpu.launch(
                    RELU_BACKWARD.of(gx.dtype()),
                    Grid::over(n),
                    &[y.into(), gy.into(), gx.into(), Arg::U32(n as u32)],
                )
            },
        )?;
        s.accumulate(&self.x, gx)
    }
}
