//! add: `y = a + b`, elementwise, for two tensors of one shape (a residual
//! connection). Backward hands `dy` to both inputs.
//!
//! Each input's gradient is a copy of `dy` in a buffer of its own (its
//! parameter slot when it is a parameter), never `dy` itself: two tensors
//! sharing one gradient buffer would each see the other's later
//! contributions, and `x.add(s, x)` reaches `2·dy` through `Step::accumulate`
//! adding the second copy to the first.
//!
//! Both operands are read in one layout: a second operand in another layout
//! than the first's is converted to the first's (see
//! [`Layout`](crate::tensor::Layout)), and the sum is in the first's layout.
//! The kernels are elementwise over memory, whatever that layout.

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Grid, KernelSource};
use crate::memory::DType;
use crate::ops::Step;
use crate::tensor::{Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "add",
    source: include_str!("kernels.cu"),
    entries: &[ADD_FORWARD.f32, ADD_FORWARD.bf16, ADD_GRAD_COPY.f32, ADD_GRAD_COPY.bf16],
};
const ADD_FORWARD: FloatKernel = float_kernel!("add_forward");
const ADD_GRAD_COPY: FloatKernel = float_kernel!("add_grad_copy");

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    a: TensorRef,
    b: TensorRef,
    y: TensorRef,
}

impl<'s> Tensor<'s> {
    /// `self + other`, elementwise; both must have the same shape. Of their
    /// type, or fp32 when their types differ (PyTorch's promotion: the
    /// bf16 one is cast up). In `self`'s layout: `other` is converted to
    /// it when its own differs.
    pub fn add(self, s: &mut Step<'s>, other: Tensor<'s>) -> Result<Tensor<'s>> {
        if self.shape() != other.shape() {
            return Err(Error::shape(
                "add",
                format!("operands of one shape, got {} and {}", self.shape(), other.shape()),
            ));
        }
        if self.dtype() != other.dtype() {
            // `other` in `self`'s layout too, in the same copy.
            let a = self.cast(s, DType::F32)?;
            let b = other.convert(s, DType::F32, self.layout())?;
            return a.add(s, b);
        }
        if self.layout() != other.layout() {
            let b = other.to_layout(s, self.layout())?;
            return self.add(s, b);
        }
        let y = s.output("add output", self.shape(), &[&self, &other])?;
        s.launch(
            &[self.buf().into(), other.buf().into(), y.buf().into()],
            |v| {
                cpu::forward(v.read(self.buf())?, v.read(other.buf())?, v.write(y.buf())?);
                Ok(())
            },
            |gpu| {
                let n = y.shape().numel();
                gpu.launch(
                    ADD_FORWARD.of(y.dtype()),
                    Grid::over(n),
                    &[
                        self.buf().into(),
                        other.buf().into(),
                        y.buf().into(),
                        Arg::U32(n as u32),
                    ],
                )
            },
        )?;
        if y.requires_grad() {
            s.record(Saved {
                a: self.inner,
                b: other.inner,
                y: y.inner,
            });
        }
        Ok(y)
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        // One input after the other: the second's buffer is asked for after
        // the first's gradient is in place, so `x + x` gets two buffers.
        for x in [self.a, self.b] {
            if !x.requires_grad {
                continue;
            }
            let gx = s.grad_buffer(&x, "add input grad")?;
            s.launch(
                &[gy.into(), gx.into()],
                |v| {
                    cpu::copy(v.read(gy)?, v.write(gx)?);
                    Ok(())
                },
                |gpu| {
                    let n = gx.len();
                    gpu.launch(
                        ADD_GRAD_COPY.of(gx.dtype()),
                        Grid::over(n),
                        &[gy.into(), gx.into(), Arg::U32(n as u32)],
                    )
                },
            )?;
            s.accumulate(&x, gx)?;
        }
        Ok(())
    }
}
