//! global_avg_pool2d: the mean of each `H × W` plane, `[N, C, H, W]` to
//! `[N, C]` (PyTorch's `AdaptiveAvgPool2d(1)` then `flatten(1)`). Each mean
//! is the plane's sum in row-major order divided by `H·W`, on both devices;
//! backward spreads `dy / (H·W)` over the plane.
//!
//! A channels-last input ([`Layout::Nhwc`], a mixed-precision step's
//! activations) has kernels of its own that read it in place: each mean
//! sums the same values in the same order, so both layouts give the same
//! bits; the output `[N, C]` is row-major either way, and the input's
//! gradient is in the input's layout.

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Grid, KernelSource};
use crate::ops::Step;
use crate::tensor::{Layout, Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "global_avg_pool2d",
    source: include_str!("kernels.cu"),
    entries: &[
        GLOBAL_AVG_POOL_FORWARD.f32,
        GLOBAL_AVG_POOL_FORWARD.bf16,
        GLOBAL_AVG_POOL_BACKWARD.f32,
        GLOBAL_AVG_POOL_BACKWARD.bf16,
        GLOBAL_AVG_POOL_NHWC_FORWARD.f32,
        GLOBAL_AVG_POOL_NHWC_FORWARD.bf16,
        GLOBAL_AVG_POOL_NHWC_BACKWARD.f32,
        GLOBAL_AVG_POOL_NHWC_BACKWARD.bf16,
    ],
};
const GLOBAL_AVG_POOL_FORWARD: FloatKernel = float_kernel!("global_avg_pool_forward");
const GLOBAL_AVG_POOL_BACKWARD: FloatKernel = float_kernel!("global_avg_pool_backward");

const GLOBAL_AVG_POOL_NHWC_FORWARD: FloatKernel = float_kernel!("global_avg_pool_nhwc_forward");
const GLOBAL_AVG_POOL_NHWC_BACKWARD: FloatKernel = float_kernel!("global_avg_pool_nhwc_backward");

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    y: TensorRef,
}

impl<'s> Tensor<'s> {
    /// The mean over `H × W` of `self` `[N, C, H, W]`, as `[N, C]`.
    pub fn global_avg_pool2d(self, s: &mut Step<'s>) -> Result<Tensor<'s>> {
        let x = self.shape();
        if x.rank() != 4 || x.dim(2) == 0 || x.dim(3) == 0 {
            return Err(Error::shape(
                "global_avg_pool2d",
                format!("input [N, C, H ≥ 1, W ≥ 1], got {x}"),
            ));
        }
        let y = s.output("global-avg-pool output", Shape::new(&[x.dim(0), x.dim(1)]), &[&self])?;
        let (planes, area) = (x.dim(0) * x.dim(1), x.dim(2) * x.dim(3));
        let nhwc = self.layout() == Layout::Nhwc;
        s.launch(
            &[self.buf().into(), y.buf().into()],
            |v| {
                let (x_, y_) = (v.read(self.buf())?, v.write(y.buf())?);
                if nhwc {
                    cpu::forward_nhwc(x.dim(1), area, x_, y_);
                } else {
                    cpu::forward(area, x_, y_);
                }
                Ok(())
            },
            |gpu| {
                if nhwc {
                    gpu.launch(
                        GLOBAL_AVG_POOL_NHWC_FORWARD.of(y.dtype()),
                        Grid::over(planes),
                        &[
                            self.buf().into(),
                            y.buf().into(),
                            Arg::U32(x.dim(0) as u32),
                            Arg::U32(x.dim(1) as u32),
                            Arg::U32(area as u32),
                        ],
                    )
                } else {
                    gpu.launch(
                        GLOBAL_AVG_POOL_FORWARD.of(y.dtype()),
                        Grid::over(planes),
                        &[
                            self.buf().into(),
                            y.buf().into(),
                            Arg::U32(planes as u32),
                            Arg::U32(area as u32),
                        ],
                    )
                }
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
        let x = self.x.shape;
        let (planes, area) = (x.dim(0) * x.dim(1), x.dim(2) * x.dim(3));
        let gx = s.grad_buffer(&self.x, "global-avg-pool input grad")?;
        let nhwc = self.x.layout == Layout::Nhwc;
        s.launch(
            &[gy.into(), gx.into()],
            |v| {
                let (gy, gx) = (v.read(gy)?, v.write(gx)?);
                if nhwc {
                    cpu::backward_nhwc(x.dim(1), area, gy, gx);
                } else {
                    cpu::backward(area, gy, gx);
                }
                Ok(())
            },
            |gpu| {
                if nhwc {
                    gpu.launch(
                        GLOBAL_AVG_POOL_NHWC_BACKWARD.of(gx.dtype()),
                        Grid::over(planes * area),
                        &[
                            gy.into(),
                            gx.into(),
                            Arg::U32(x.dim(0) as u32),
                            Arg::U32(x.dim(1) as u32),
                            Arg::U32(area as u32),
                        ],
                    )
                } else {
                    gpu.launch(
                        GLOBAL_AVG_POOL_BACKWARD.of(gx.dtype()),
                        Grid::over(planes * area),
                        &[gy.into(), gx.into(), Arg::U32(planes as u32), Arg::U32(area as u32)],
                    )
                }
            },
        )?;
        s.accumulate(&self.x, gx)
    }
}
