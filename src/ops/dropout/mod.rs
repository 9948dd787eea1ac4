//! dropout: keeps each element with probability `1 - p` and scales kept ones
//! by `1 / (1 - p)`. Whether element `i` is kept is a pure function of
//! `(seed, i)` ([`keep`]), so backward recomputes the mask instead of storing
//! it, and a GPU kernel draws exactly the same mask.

mod cpu;
#[cfg(test)]
mod tests;

use crate::autograd::{Node, Step};
use crate::backend::cuda::{Arg, Grid, Kernel};
use crate::backend::Backend;
use crate::memory::Buf;
use crate::tensor::{Tensor, TensorRef};
use crate::{Error, Result};

/// A counter-based draw: mixes the seed and the element index through the
/// SplitMix64 finaliser and keeps the element when the top 24 bits, read as
/// a fraction, are at least `p`.
pub fn keep(seed: u64, index: u64, p: f32) -> bool {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 40) as f32) * (1.0 / (1u64 << 24) as f32) >= p
}

pub(crate) const CUDA_SOURCE: &str = include_str!("kernels.cu");

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    y: TensorRef,
    p: f32,
    seed: u64,
}

impl<'s> Tensor<'s> {
    /// Dropout with probability `p` in `[0, 1)` and the step's `seed`.
    pub fn dropout(self, s: &mut Step<'s>, p: f32, seed: u64) -> Result<Tensor<'s>> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::shape("dropout", format!("a probability in [0, 1), got {p}")));
        }
        let y = s.output("dropout output", self.shape(), &[&self])?;
        match s.backend() {
            Backend::Cpu(cpu) => cpu.run(|v, _| {
                cpu::apply(v.read(self.buf())?, v.write(y.buf())?, p, seed);
                Ok(())
            })?,
            Backend::Cuda(gpu) => cuda_apply(gpu, self.buf(), y.buf(), p, seed)?,
            Backend::Dry(_) => {}
        }
        if y.requires_grad() {
            s.record(Node::Dropout(Saved {
                x: self.inner,
                y: y.inner,
                p,
                seed,
            }));
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
        let gx = s.alloc::<f32>("dropout input grad", self.x.shape)?;
        match s.backend() {
            // The mask is linear in its input: backward is the same map.
            Backend::Cpu(cpu) => cpu.run(|v, _| {
                cpu::apply(v.read(gy)?, v.write(gx)?, self.p, self.seed);
                Ok(())
            })?,
            Backend::Cuda(gpu) => cuda_apply(gpu, gy, gx, self.p, self.seed)?,
            Backend::Dry(_) => {}
        }
        s.accumulate(&self.x, gx)
    }
}

/// `out = x / (1 - p)` where kept, else 0, on the GPU: the scale is computed
/// here, as on the CPU, so both backends multiply by the same float.
fn cuda_apply(
    gpu: &mut crate::backend::cuda::CudaBackend,
    x: Buf<f32>,
    out: Buf<f32>,
    p: f32,
    seed: u64,
) -> std::result::Result<(), crate::backend::BackendError> {
    let n = out.len();
    gpu.launch(
        Kernel::Dropout,
        Grid::over(n),
        &[
            x.into(),
            out.into(),
            Arg::U32(n as u32),
            Arg::F32(p),
            Arg::F32(1.0 / (1.0 - p)),
            Arg::U64(seed),
        ],
    )
}
