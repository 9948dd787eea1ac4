//! cast: a tensor in another float type. A mixed-precision step casts what
//! a convolution or a matrix product reads (its input, its weights) to
//! bf16, as PyTorch's autocast does; backward casts the gradient back, so a
//! weight's bf16 gradient lands in its fp32 slot of the gradient slab.
//!
//! fp32 to bf16 rounds to nearest even (the `half` crate's rounding, and
//! our kernels'); bf16 to fp32 is exact.

#[cfg(test)]
mod tests;

use crate::autograd::{Node, Step};
use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::backend::{Backend, BackendError};
use crate::memory::{bf16, DType, FloatBuf};
use crate::tensor::{Tensor, TensorRef};
use crate::Result;

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "cast",
    source: include_str!("kernels.cu"),
    entries: &[CAST_F32_BF16, CAST_BF16_F32],
};
const CAST_F32_BF16: &str = "cast_f32_bf16";
const CAST_BF16_F32: &str = "cast_bf16_f32";

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    y: TensorRef,
}

impl<'s> Tensor<'s> {
    /// `self` in `dtype`: itself when it is of that type already.
    pub fn cast(self, s: &mut Step<'s>, dtype: DType) -> Result<Tensor<'s>> {
        if self.dtype() == dtype {
            return Ok(self);
        }
        let what = match dtype {
            DType::Bf16 => "bf16 copy",
            DType::F32 => "f32 copy",
        };
        let y = s.output_of(what, self.shape(), dtype, &[&self])?;
        convert(s, self.buf(), y.buf())?;
        if y.requires_grad() {
            s.record(Node::Cast(Saved {
                x: self.inner,
                y: y.inner,
            }));
        }
        Ok(y)
    }
}

/// `dst = src` across the float types (of one length).
fn convert(s: &mut Step<'_>, src: FloatBuf, dst: FloatBuf) -> Result<()> {
    let n = src.len();
    match s.uses(&[src.into(), dst.into()]) {
        Backend::Cpu(cpu) => cpu.run(|v, _| {
            match (src, dst) {
                (FloatBuf::F32(a), FloatBuf::Bf16(b)) => {
                    let (a, b) = (v.read(a)?, v.write(b)?);
                    b.iter_mut().zip(a).for_each(|(b, &a)| *b = bf16::from_f32(a));
                }
                (FloatBuf::Bf16(a), FloatBuf::F32(b)) => {
                    let (a, b) = (v.read(a)?, v.write(b)?);
                    b.iter_mut().zip(a).for_each(|(b, a)| *b = a.to_f32());
                }
                _ => return Err(BackendError::Internal("a cast from a type to itself")),
            }
            Ok(())
        })?,
        Backend::Cuda(gpu) => {
            let entry = match (src.dtype(), dst.dtype()) {
                (DType::F32, DType::Bf16) => CAST_F32_BF16,
                (DType::Bf16, DType::F32) => CAST_BF16_F32,
                _ => return Err(BackendError::Internal("a cast from a type to itself").into()),
            };
            gpu.launch(entry, Grid::over(n), &[src.into(), dst.into(), Arg::U32(n as u32)])?
        }
        Backend::Dry(_) => {}
    }
    Ok(())
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        if !self.x.requires_grad {
            return Ok(());
        }
        // A parameter's first gradient is cast straight into its slot.
        let gx = s.grad_buffer(&self.x, "cast input grad")?;
        convert(s, gy, gx)?;
        s.accumulate(&self.x, gx)
    }
}
