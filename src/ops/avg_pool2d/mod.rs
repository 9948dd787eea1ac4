//! avg_pool2d: average pooling, NCHW, with PyTorch's `AvgPool2d` semantics
//! for a square window ([`Pool2dArgs`]): `count_include_pad = true`, so a
//! window's sum of real inputs is divided by the window's size counting its
//! padding; in ceil mode a last window that runs past the right padding is
//! divided by the part of it inside input + padding, as PyTorch clips it.
//!
//! Backward gathers, per input, `dy / divisor` of every output whose window
//! covers it, in output order: each gradient element is written once, with
//! no atomics, and the CUDA kernels mirror the CPU's arithmetic.
//!
//! The kernels are NCHW's: a channels-last input ([`Layout::Nhwc`]) is
//! converted to NCHW first (a recorded cast, whose backward converts the
//! gradient back), and the output is NCHW.

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, FloatKernel, Grid, KernelSource};
use crate::ops::maxpool2d::{Pool2dArgs, PoolGeometry};
use crate::ops::Step;
use crate::tensor::{Layout, Tensor, TensorRef};
use crate::Result;

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "avg_pool2d",
    source: include_str!("kernels.cu"),
    entries: &[
        AVGPOOL_FORWARD.f32,
        AVGPOOL_FORWARD.bf16,
        AVGPOOL_BACKWARD.f32,
        AVGPOOL_BACKWARD.bf16,
    ],
};
const AVGPOOL_FORWARD: FloatKernel = float_kernel!("avgpool_forward");
const AVGPOOL_BACKWARD: FloatKernel = float_kernel!("avgpool_backward");

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    y: TensorRef,
    g: PoolGeometry,
}

/// The divisor of window `o` along one axis of length `len`: the window's
/// extent clipped to the input and its padding on both sides (PyTorch's
/// `pool_size` with `count_include_pad`).
#[inline]
pub(crate) fn divisor(g: &PoolGeometry, o: usize, len: usize) -> usize {
    let start = o * g.stride;
    (start + g.k).min(len + 2 * g.pad) - start
}

impl<'s> Tensor<'s> {
    /// Average-pools `self` `[N, C, H, W]`; see [`Pool2dArgs`]. A
    /// channels-last input is pooled as its NCHW copy, into NCHW.
    pub fn avg_pool2d(self, s: &mut Step<'s>, args: Pool2dArgs) -> Result<Tensor<'s>> {
        let this = self.to_layout(s, Layout::Nchw)?;
        this.avg_pool2d_nchw(s, args)
    }

    fn avg_pool2d_nchw(self, s: &mut Step<'s>, args: Pool2dArgs) -> Result<Tensor<'s>> {
        let x = self.shape();
        let g = args.geometry("avg_pool2d", x)?;
        let y = s.output("avg-pool output", g.output(x), &[&self])?;
        s.launch(
            &[self.buf().into(), y.buf().into()],
            |v| {
                cpu::forward(&g, v.read(self.buf())?, v.write(y.buf())?);
                Ok(())
            },
            |gpu| {
                let [a, b, c, d, e, f, h, i] = g.args();
                gpu.launch(
                    AVGPOOL_FORWARD.of(y.dtype()),
                    Grid::over(y.shape().numel()),
                    &[self.buf().into(), y.buf().into(), a, b, c, d, e, f, h, i],
                )
            },
        )?;
        if y.requires_grad() {
            s.record(Saved {
                x: self.inner,
                y: y.inner,
                g,
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
        let g = self.g;
        let gx = s.grad_buffer(&self.x, "avg-pool input grad")?;
        s.launch(
            &[gy.into(), gx.into()],
            |v| {
                cpu::backward(&g, v.read(gy)?, v.write(gx)?);
                Ok(())
            },
            |gpu| {
                let [a, b, c, d, e, f, h, i] = g.args();
                gpu.launch(
                    AVGPOOL_BACKWARD.of(gx.dtype()),
                    Grid::over(self.x.shape.numel()),
                    &[gy.into(), gx.into(), a, b, c, d, e, f, h, i],
                )
            },
        )?;
        s.accumulate(&self.x, gx)
    }
}
