//! max-pool 2×2, stride 2, NCHW (a trailing odd row or column is dropped, as
//! PyTorch does). Forward keeps, per output, which of its four inputs won (one
//! byte), so backward routes the gradient without the saved input.
//!
//! `max_pool2d_relu` fuses the relu that follows a pool in most CNNs: one
//! kernel and one buffer fewer each way, and `relu(max(x)) = max(relu(x))`,
//! so the result is the unfused pair's.

mod cpu;
#[cfg(test)]
mod tests;

use crate::autograd::{Node, Step};
use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::backend::Backend;
use crate::memory::Buf;
use crate::tensor::{Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "maxpool2d",
    source: include_str!("kernels.cu"),
    entries: &[MAXPOOL_FORWARD, MAXPOOL_RELU_FORWARD, MAXPOOL_BACKWARD],
};
const MAXPOOL_FORWARD: &str = "maxpool_forward";
const MAXPOOL_RELU_FORWARD: &str = "maxpool_relu_forward";
const MAXPOOL_BACKWARD: &str = "maxpool_backward";

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    y: TensorRef,
    winner: Buf<u8>,
    relu: bool,
}

impl<'s> Tensor<'s> {
    pub fn max_pool2d(self, s: &mut Step<'s>) -> Result<Tensor<'s>> {
        self.pool(s, false)
    }

    /// `relu(max_pool2d(self))` in one kernel.
    pub fn max_pool2d_relu(self, s: &mut Step<'s>) -> Result<Tensor<'s>> {
        self.pool(s, true)
    }

    fn pool(self, s: &mut Step<'s>, relu: bool) -> Result<Tensor<'s>> {
        let x = self.shape();
        if x.rank() != 4 || x.dim(2) < 2 || x.dim(3) < 2 {
            return Err(Error::shape(
                "max_pool2d",
                format!("input [N, C, H ≥ 2, W ≥ 2], got {x}"),
            ));
        }
        let out = Shape::new(&[x.dim(0), x.dim(1), x.dim(2) / 2, x.dim(3) / 2]);
        let what = if relu {
            "max-pool+relu output"
        } else {
            "max-pool output"
        };
        let y = s.output(what, out, &[&self])?;
        let winner = s.alloc::<u8>("max-pool winners", out)?;
        match s.uses(&[self.buf().into(), y.buf().into(), winner.into()]) {
            Backend::Cpu(cpu) => cpu.run(|v, _| {
                let out = v.write(y.buf())?;
                cpu::forward(x, v.read(self.buf())?, out, v.write(winner)?);
                if relu {
                    out.iter_mut().for_each(|v| *v = v.max(0.0));
                }
                Ok(())
            })?,
            Backend::Cuda(gpu) => gpu.launch(
                if relu { MAXPOOL_RELU_FORWARD } else { MAXPOOL_FORWARD },
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
                relu,
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
        match s.uses(&[gy.into(), self.y.buf.into(), self.winner.into(), gx.into()]) {
            Backend::Cpu(cpu) => cpu.run(|v, _| {
                let relu_of = if self.relu { Some(v.read(self.y.buf)?) } else { None };
                cpu::backward(self.x.shape, v.read(gy)?, relu_of, v.read(self.winner)?, v.write(gx)?);
                Ok(())
            })?,
            Backend::Cuda(gpu) => {
                let x = self.x.shape;
                let relu_of = if self.relu { Arg::from(self.y.buf) } else { Arg::Null };
                gpu.launch(
                    MAXPOOL_BACKWARD,
                    Grid::over(x.numel()),
                    &[
                        gy.into(),
                        relu_of,
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
