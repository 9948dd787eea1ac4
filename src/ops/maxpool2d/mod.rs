//! max-pool 2×2, stride 2, NCHW (a trailing odd row or column is dropped, as
//! PyTorch does). Forward keeps, per output, which of its four inputs won (one
//! byte), so backward routes the gradient without the saved input.

mod cpu;
#[cfg(test)]
mod tests;

use crate::autograd::{Node, Step};
use crate::backend::cuda::{Arg, Grid, Kernel};
use crate::backend::Backend;
use crate::memory::Buf;
use crate::tensor::{Shape, Tensor, TensorRef};
use crate::{Error, Result};

pub(crate) const CUDA_SOURCE: &str = include_str!("kernels.cu");

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    y: TensorRef,
    winner: Buf<u8>,
}

impl<'s> Tensor<'s> {
    pub fn max_pool2d(self, s: &mut Step<'s>) -> Result<Tensor<'s>> {
        let x = self.shape();
        if x.rank() != 4 || x.dim(2) < 2 || x.dim(3) < 2 {
            return Err(Error::shape(
                "max_pool2d",
                format!("input [N, C, H ≥ 2, W ≥ 2], got {x}"),
            ));
        }
        let out = Shape::new(&[x.dim(0), x.dim(1), x.dim(2) / 2, x.dim(3) / 2]);
        let y = s.output("max-pool output", out, &[&self])?;
        let winner = s.alloc::<u8>("max-pool winners", out)?;
        match s.backend() {
            Backend::Cpu(cpu) => cpu.run(|v, _| {
                cpu::forward(x, v.read(self.buf())?, v.write(y.buf())?, v.write(winner)?);
                Ok(())
            })?,
            Backend::Cuda(gpu) => gpu.launch(
                Kernel::MaxPoolForward,
                Grid::over(out.numel()),
                &[
                    self.buf().into(),
                    y.buf().into(),
                    winner.into(),
                    Arg::U32((x.dim(0) * x.dim(1)) as u32),
                    Arg::U32(x.dim(2) as u32),
                    Arg::U32(x.dim(3) as u32),
                ],
            )?,
            Backend::Dry(_) => {}
        }
        if y.requires_grad() {
            s.record(Node::MaxPool2d(Saved {
                x: self.inner,
                y: y.inner,
                winner,
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
        let gx = s.alloc::<f32>("max-pool input grad", self.x.shape)?;
        match s.backend() {
            Backend::Cpu(cpu) => cpu.run(|v, _| {
                cpu::backward(self.x.shape, v.read(gy)?, v.read(self.winner)?, v.write(gx)?);
                Ok(())
            })?,
            Backend::Cuda(gpu) => {
                let x = self.x.shape;
                gpu.launch(
                    Kernel::MaxPoolBackward,
                    Grid::over(x.numel()),
                    &[
                        gy.into(),
                        self.winner.into(),
                        gx.into(),
                        Arg::U32((x.dim(0) * x.dim(1)) as u32),
                        Arg::U32(x.dim(2) as u32),
                        Arg::U32(x.dim(3) as u32),
                    ],
                )?
            }
            Backend::Dry(_) => {}
        }
        s.accumulate(&self.x, gx)
    }
}
