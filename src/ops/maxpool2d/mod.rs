//! max-pool, NCHW, with PyTorch's semantics: a square `kernel`, `stride` and
//! `padding` (padding never wins: it acts as −∞), output size by floor or
//! ceil ([`Pool2dArgs`]), ties to the first maximum in window order, NaN
//! propagates. Forward keeps, per output, the index of its winner within
//! the window (one byte, hence `kernel² ≤ 255`), so backward routes the
//! gradient without the saved input.
//!
//! 2×2 stride 2 without padding (the MNIST CNN's pool) keeps its own kernels,
//! whose arithmetic `tests/recorded_losses.rs` pins bit for bit; every other
//! shape takes the general kernels, which backward by gathering, per input,
//! the outputs whose window won there (no atomics: deterministic).
//!
//! `max_pool2d_relu` fuses the relu that follows a pool in most CNNs: one
//! kernel and one buffer fewer each way, and `relu(max(x)) = max(relu(x))`,
//! so the result is the unfused pair's.
//!
//! The kernels are NCHW's: a channels-last input ([`Layout::Nhwc`]) is
//! converted to NCHW first (a recorded cast, whose backward converts the
//! gradient back), and the output is NCHW.

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Grid, KernelSource};
use crate::memory::Buf;
use crate::ops::Step;
use crate::tensor::{Layout, Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "maxpool2d",
    source: include_str!("kernels.cu"),
    entries: &[
        MAXPOOL_FORWARD.f32,
        MAXPOOL_FORWARD.bf16,
        MAXPOOL_RELU_FORWARD.f32,
        MAXPOOL_RELU_FORWARD.bf16,
        MAXPOOL_BACKWARD.f32,
        MAXPOOL_BACKWARD.bf16,
        MAXPOOL_WINDOW_FORWARD.f32,
        MAXPOOL_WINDOW_FORWARD.bf16,
        MAXPOOL_WINDOW_BACKWARD.f32,
        MAXPOOL_WINDOW_BACKWARD.bf16,
    ],
};
const MAXPOOL_FORWARD: FloatKernel = float_kernel!("maxpool_forward");
const MAXPOOL_RELU_FORWARD: FloatKernel = float_kernel!("maxpool_relu_forward");
const MAXPOOL_BACKWARD: FloatKernel = float_kernel!("maxpool_backward");
const MAXPOOL_WINDOW_FORWARD: FloatKernel = float_kernel!("maxpool_window_forward");
const MAXPOOL_WINDOW_BACKWARD: FloatKernel = float_kernel!("maxpool_window_backward");

/// A square pooling window, as PyTorch's `MaxPool2d` / `AvgPool2d` take it
/// (dilation 1). `ceil_mode` rounds the output size up, but a last window
/// must still start inside the input or its left padding.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pool2dArgs {
    /// The window's side.
    pub kernel: usize,
    /// The step between windows.
    pub stride: usize,
    /// Padding on every side; a max never picks it (it acts as −∞).
    pub padding: usize,
    /// Round the output size up rather than down.
    pub ceil_mode: bool,
}

impl Pool2dArgs {
    /// No padding, output size rounded down.
    pub const fn new(kernel: usize, stride: usize) -> Self {
        Self {
            kernel,
            stride,
            padding: 0,
            ceil_mode: false,
        }
    }

    /// The sizes of pooling an input of shape `x`, or the reason PyTorch
    /// would refuse it.
    pub(crate) fn geometry(self, op: &'static str, x: Shape) -> Result<PoolGeometry> {
        let bad = |detail: String| Err(Error::shape(op, detail));
        let Self {
            kernel: k,
            stride,
            padding: p,
            ceil_mode,
        } = self;
        if x.rank() != 4 {
            return bad(format!("input [N, C, H, W], got {x}"));
        }
        if k == 0 || stride == 0 {
            return bad(format!("kernel {k} and stride {stride} must be positive"));
        }
        if p > k / 2 {
            return bad(format!("padding {p} is more than half the kernel {k}"));
        }
        let (h, w) = (x.dim(2), x.dim(3));
        if h + 2 * p < k || w + 2 * p < k {
            return bad(format!("kernel {k} does not fit input {h}×{w} padded by {p}"));
        }
        let out = |len: usize| {
            let span = len + 2 * p - k;
            let o = if ceil_mode {
                span.div_ceil(stride)
            } else {
                span / stride
            } + 1;
            // PyTorch's rule: a last window starting in the right padding
            // would pool padding alone, so ceil mode drops it.
            if ceil_mode && (o - 1) * stride >= len + p {
                o - 1
            } else {
                o
            }
        };
        Ok(PoolGeometry {
            planes: x.dim(0) * x.dim(1),
            h,
            w,
            oh: out(h),
            ow: out(w),
            k,
            stride,
            pad: p,
        })
    }
}

/// Sizes of one pooling, checked once when the op is recorded: `planes`
/// (N·C) planes of `h × w` pooled to `oh × ow`. Output row `o`'s window
/// covers input rows `o·stride − pad ..` (`k` of them, clipped to the input).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct PoolGeometry {
    pub planes: usize,
    pub h: usize,
    pub w: usize,
    pub oh: usize,
    pub ow: usize,
    pub k: usize,
    pub stride: usize,
    pub pad: usize,
}

impl PoolGeometry {
    pub(crate) fn output(&self, x: Shape) -> Shape {
        Shape::new(&[x.dim(0), x.dim(1), self.oh, self.ow])
    }

    /// The range of output positions (along one axis) whose window covers
    /// input position `i`: `o·stride − pad ≤ i < o·stride − pad + k`, within
    /// `0..out`. The CUDA kernels compute the same range.
    #[inline]
    pub(crate) fn covering(&self, i: usize, out: usize) -> std::ops::Range<usize> {
        let lo = (i + self.pad + 1).saturating_sub(self.k).div_ceil(self.stride);
        let hi = ((i + self.pad) / self.stride + 1).min(out);
        lo..hi.max(lo)
    }

    /// The input rows (or columns) window `o` covers, clipped to `0..len`,
    /// and where the unclipped window starts (in the padding when < 0).
    #[inline]
    pub(crate) fn window(&self, o: usize, len: usize) -> (std::ops::Range<usize>, isize) {
        let start = (o * self.stride) as isize - self.pad as isize;
        let end = (start + self.k as isize).min(len as isize) as usize;
        (start.max(0) as usize..end, start)
    }

    /// The kernels' sizes, in the order every pooling kernel takes them.
    pub(crate) fn args(&self) -> [Arg<'static>; 8] {
        [
            self.planes,
            self.h,
            self.w,
            self.oh,
            self.ow,
            self.k,
            self.stride,
            self.pad,
        ]
        .map(|v| Arg::U32(v as u32))
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    y: TensorRef,
    winner: Buf<u8>,
    relu: bool,
    /// `None` for the 2×2 stride-2 kernels.
    general: Option<PoolGeometry>,
}

impl<'s> Tensor<'s> {
    /// Max-pools `self` `[N, C, H, W]`; see [`Pool2dArgs`].
    /// A channels-last input is pooled as its NCHW copy, into NCHW.
    pub fn max_pool2d(self, s: &mut Step<'s>, args: Pool2dArgs) -> Result<Tensor<'s>> {
        let x = self.to_layout(s, Layout::Nchw)?;
        if args == Pool2dArgs::new(2, 2) {
            return x.pool(s, false);
        }
        x.pool_window(s, args)
    }

    /// `relu(max_pool2d(self, Pool2dArgs::new(2, 2)))` in one kernel (of a
    /// channels-last input's NCHW copy, into NCHW).
    pub fn max_pool2d_relu(self, s: &mut Step<'s>) -> Result<Tensor<'s>> {
        self.to_layout(s, Layout::Nchw)?.pool(s, true)
    }

    fn pool_window(self, s: &mut Step<'s>, args: Pool2dArgs) -> Result<Tensor<'s>> {
        let x = self.shape();
        let g = args.geometry("max_pool2d", x)?;
        if g.k * g.k > u8::MAX as usize {
            return Err(Error::shape(
                "max_pool2d",
                format!(
                    "kernel {0}×{0}: a winner's index must fit in a byte (kernel² ≤ 255)",
                    g.k
                ),
            ));
        }
        let out = g.output(x);
        let y = s.output("max-pool output", out, &[&self])?;
        let winner = s.alloc::<u8>("max-pool winners", out)?;
        s.launch(
            &[self.buf().into(), y.buf().into(), winner.into()],
            |v| {
                cpu::window_forward(&g, v.read(self.buf())?, v.write(y.buf())?, v.write(winner)?);
                Ok(())
            },
            |gpu| {
                let [a, b, c, d, e, f, h, i] = g.args();
                gpu.launch(
                    MAXPOOL_WINDOW_FORWARD.of(y.dtype()),
                    Grid::over(out.numel()),
                    &[self.buf().into(), y.buf().into(), winner.into(), a, b, c, d, e, f, h, i],
                )
            },
        )?;
        if y.requires_grad() {
            s.record(Saved {
                x: self.inner,
                y: y.inner,
                winner,
                relu: false,
                general: Some(g),
            });
        }
        Ok(y)
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
        s.launch(
            &[self.buf().into(), y.buf().into(), winner.into()],
            |v| {
                let out = v.write(y.buf())?;
                cpu::forward(x, v.read(self.buf())?, out, v.write(winner)?);
                if relu {
                    out.iter_mut().for_each(|v| *v = v.max(0.0));
                }
                Ok(())
            },
            |gpu| {
                gpu.launch(
                    if relu { MAXPOOL_RELU_FORWARD } else { MAXPOOL_FORWARD }.of(y.dtype()),
                    Grid::over(out.numel()),
                    &[
                        self.buf().into(),
                        y.buf().into(),
                        winner.into(),
                        Arg::U32((x.dim(0) * x.dim(1)) as u32),
                        Arg::U32(x.dim(2) as u32),
                        Arg::U32(x.dim(3) as u32),
                    ],
                )
            },
        )?;
        if y.requires_grad() {
            s.record(Saved {
                x: self.inner,
                y: y.inner,
                winner,
                relu,
                general: None,
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
        let gx = s.alloc_like("max-pool input grad", &self.x)?;
        if let Some(g) = self.general {
            s.launch(
                &[gy.into(), self.winner.into(), gx.into()],
                |v| {
                    cpu::window_backward(&g, v.read(gy)?, v.read(self.winner)?, v.write(gx)?);
                    Ok(())
                },
                |gpu| {
                    let [a, b, c, d, e, f, h, i] = g.args();
                    gpu.launch(
                        MAXPOOL_WINDOW_BACKWARD.of(gx.dtype()),
                        Grid::over(self.x.shape.numel()),
                        &[gy.into(), self.winner.into(), gx.into(), a, b, c, d, e, f, h, i],
                    )
                },
            )?;
            return s.accumulate(&self.x, gx);
        }
        s.launch(
            &[gy.into(), self.y.buf.into(), self.winner.into(), gx.into()],
            |v| {
                let relu_of = if self.relu { Some(v.read(self.y.buf)?) } else { None };
                cpu::backward(self.x.shape, v.read(gy)?, relu_of, v.read(self.winner)?, v.write(gx)?);
                Ok(())
            },
            |gpu| {
                let x = self.x.shape;
                let relu_of = if self.relu { Arg::from(self.y.buf) } else { Arg::Null };
                // A thread per window: ⌈h/2⌉ × ⌈w/2⌉ of them a plane.
                let windows = x.dim(0) * x.dim(1) * x.dim(2).div_ceil(2) * x.dim(3).div_ceil(2);
                gpu.launch(
                    MAXPOOL_BACKWARD.of(gx.dtype()),
                    Grid::over(windows),
                    &[
                        gy.into(),
                        relu_of,
                        self.winner.into(),
                        gx.into(),
                        Arg::U32((x.dim(0) * x.dim(1)) as u32),
                        Arg::U32(x.dim(2) as u32),
                        Arg::U32(x.dim(3) as u32),
                    ],
                )
            },
        )?;
        s.accumulate(&self.x, gx)
    }
}
