//! conv2d: valid padding, stride 1, NCHW, any channel counts, optional bias.
//!
//! The CPU kernels compute convolution as matrix products over the patch
//! matrix without writing it (implicit im2col): per image, `y = W · col` with
//! `W` the `[F, C·KH·KW]` filters and `col` the `[C·KH·KW, OH·OW]` patches,
//! whose entries the kernels read from the input in place. Backward forms
//! `dW = Σ dy · colᵀ` from the saved input the same way, and `dx` as
//! `col2im(Wᵀ · dy)`, adding each product straight into `dx`. The filters are
//! repacked per call into small step-region buffers in the order the kernels
//! broadcast them.
//!
//! On a GPU, cuDNN runs all three passes, each with the algorithm and the
//! step-region workspace its plan chose; the bias is our own kernel.

mod cpu;
#[cfg(test)]
mod tests;

use crate::autograd::{Node, Step};
use crate::backend::cuda::{Arg, ConvDims, ConvPass, Grid, KernelSource};
use crate::backend::{Backend, BackendError, Sizing};
use crate::memory::Buf;
use crate::tensor::{Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "conv2d",
    source: include_str!("kernels.cu"),
    entries: &[CONV_BIAS_ADD, CONV_BIAS_GRAD],
};
const CONV_BIAS_ADD: &str = "conv_bias_add";
const CONV_BIAS_GRAD: &str = "conv_bias_grad";

/// Sizes of one convolution, checked once when the op is recorded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Geometry {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub f: usize,
    pub kh: usize,
    pub kw: usize,
    pub oh: usize,
    pub ow: usize,
}

impl Geometry {
    fn new(x: Shape, w: Shape, bias: Option<Shape>) -> Result<Self> {
        let bad = |detail: String| Err(Error::shape("conv2d", detail));
        if x.rank() != 4 || w.rank() != 4 {
            return bad(format!("input [N, C, H, W] and weight [F, C, KH, KW], got {x} and {w}"));
        }
        let (n, c, h, wd) = (x.dim(0), x.dim(1), x.dim(2), x.dim(3));
        let (f, wc, kh, kw) = (w.dim(0), w.dim(1), w.dim(2), w.dim(3));
        if c != wc {
            return bad(format!("input has {c} channels but weight {w} expects {wc}"));
        }
        if kh == 0 || kw == 0 || kh > h || kw > wd {
            return bad(format!("kernel {kh}×{kw} does not fit input {h}×{wd}"));
        }
        if let Some(b) = bias {
            if b != Shape::new(&[f]) {
                return bad(format!("bias {b} for {f} filters"));
            }
        }
        Ok(Self {
            n,
            c,
            h,
            w: wd,
            f,
            kh,
            kw,
            oh: h - kh + 1,
            ow: wd - kw + 1,
        })
    }

    /// Rows of the patch matrix: one per filter weight.
    pub fn k(&self) -> usize {
        self.c * self.kh * self.kw
    }

    /// Columns of the patch matrix: one per output pixel.
    pub fn p(&self) -> usize {
        self.oh * self.ow
    }

    fn output(&self) -> Shape {
        Shape::new(&[self.n, self.f, self.oh, self.ow])
    }

    fn dims(&self) -> ConvDims {
        ConvDims {
            n: self.n,
            c: self.c,
            h: self.h,
            w: self.w,
            f: self.f,
            kh: self.kh,
            kw: self.kw,
        }
    }

    /// Images per thread in backward, and so the number of partial sums.
    fn images_per_group(&self, threads: usize) -> usize {
        self.n.div_ceil(threads.max(1)).max(1)
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    g: Geometry,
    x: TensorRef,
    w: TensorRef,
    bias: Option<TensorRef>,
    y: TensorRef,
}

impl<'s> Tensor<'s> {
    /// Convolves `self` `[N, C, H, W]` with `weight` `[F, C, KH, KW]`.
    pub fn conv2d(self, s: &mut Step<'s>, weight: Tensor<'s>, bias: Option<Tensor<'s>>) -> Result<Tensor<'s>> {
        let g = Geometry::new(self.shape(), weight.shape(), bias.map(|b| b.shape()))?;
        let y = match bias {
            Some(b) => s.output("conv2d output", g.output(), &[&self, &weight, &b])?,
            None => s.output("conv2d output", g.output(), &[&self, &weight])?,
        };
        let packed = scratch(s, &g, ConvPass::Forward)?;
        match s.uses(&[
            self.buf().into(),
            weight.buf().into(),
            bias.map_or(Buf::<f32>::default(), |b| b.buf()).into(),
            packed.into(),
            y.buf().into(),
        ]) {
            Backend::Cpu(cpu) => cpu.run(|v, _| {
                let b = match bias {
                    Some(b) => Some(v.read(b.buf())?),
                    None => None,
                };
                cpu::forward(
                    &g,
                    v.read(self.buf())?,
                    v.read(weight.buf())?,
                    b,
                    v.write(packed)?,
                    v.write(y.buf())?,
                );
                Ok(())
            })?,
            Backend::Cuda(gpu) => {
                gpu.conv(g.dims(), ConvPass::Forward, self.buf(), weight.buf(), packed, y.buf())?;
                if let Some(b) = bias {
                    gpu.launch(
                        CONV_BIAS_ADD,
                        Grid::over(g.output().numel()),
                        &[
                            b.buf().into(),
                            y.buf().into(),
                            Arg::U32(g.n as u32),
                            Arg::U32(g.f as u32),
                            Arg::U32(g.p() as u32),
                        ],
                    )?;
                }
            }
            Backend::Dry(_) => {}
        }
        if y.requires_grad() {
            s.record(Node::Conv2d(Saved {
                g,
                x: self.inner,
                w: weight.inner,
                bias: bias.map(|b| b.inner),
                y: y.inner,
            }));
        }
        Ok(y)
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        let g = self.g;
        if self.w.requires_grad {
            let threads = s.threads();
            let partials = scratch(s, &g, ConvPass::WeightGrad)?;
            let gw = s.grad_buffer(&self.w, "conv2d weight grad")?;
            match s.uses(&[gy.into(), self.x.buf.into(), partials.into(), gw.into()]) {
                Backend::Cpu(cpu) => cpu.run(|v, _| {
                    cpu::weight_grad(
                        &g,
                        g.images_per_group(threads),
                        v.read(gy)?,
                        v.read(self.x.buf)?,
                        v.write(partials)?,
                        v.write(gw)?,
                    );
                    Ok(())
                })?,
                Backend::Cuda(gpu) => gpu.conv(g.dims(), ConvPass::WeightGrad, self.x.buf, gy, partials, gw)?,
                Backend::Dry(_) => {}
            }
            s.accumulate(&self.w, gw)?;
        }
        if let Some(b) = self.bias.filter(|b| b.requires_grad) {
            let gb = s.grad_buffer(&b, "conv2d bias grad")?;
            match s.uses(&[gy.into(), gb.into()]) {
                Backend::Cpu(cpu) => cpu.run(|v, _| {
                    cpu::bias_grad(&g, v.read(gy)?, v.write(gb)?);
                    Ok(())
                })?,
                Backend::Cuda(gpu) => gpu.launch(
                    CONV_BIAS_GRAD,
                    Grid::blocks(g.f, 256),
                    &[
                        gy.into(),
                        gb.into(),
                        Arg::U32(g.n as u32),
                        Arg::U32(g.f as u32),
                        Arg::U32(g.p() as u32),
                    ],
                )?,
                Backend::Dry(_) => {}
            }
            s.accumulate(&b, gb)?;
        }
        if self.x.requires_grad {
            let packed = scratch(s, &g, ConvPass::InputGrad)?;
            let gx = s.alloc::<f32>("conv2d input grad", self.x.shape)?;
            match s.uses(&[gy.into(), self.w.buf.into(), packed.into(), gx.into()]) {
                Backend::Cpu(cpu) => cpu.run(|v, _| {
                    cpu::input_grad(&g, v.read(gy)?, v.read(self.w.buf)?, v.write(packed)?, v.write(gx)?);
                    Ok(())
                })?,
                Backend::Cuda(gpu) => gpu.conv(g.dims(), ConvPass::InputGrad, self.w.buf, gy, packed, gx)?,
                Backend::Dry(_) => {}
            }
            s.accumulate(&self.x, gx)?;
        }
        Ok(())
    }
}

/// A pass's scratch in the step region, sized for the device: the CPU
/// kernels' packed filters or per-thread partial sums, or cuDNN's workspace
/// for the algorithm its plan chose.
fn scratch(s: &mut Step<'_>, g: &Geometry, pass: ConvPass) -> Result<Buf<f32>> {
    let (what, len) = match s.backend().sizing() {
        Sizing::Cpu { threads } => match pass {
            ConvPass::Forward => ("conv2d packed filters", cpu::forward_packed_len(g)),
            ConvPass::InputGrad => ("conv2d packed filters (input grad)", cpu::input_grad_packed_len(g)),
            ConvPass::WeightGrad => (
                "conv2d weight-grad partial sums",
                g.n.div_ceil(g.images_per_group(threads)) * g.f * g.k(),
            ),
        },
        Sizing::Cuda(gpu) => {
            let plan = gpu.conv_plan(g.dims()).map_err(BackendError::from)?;
            ("cuDNN workspace", plan.workspace_bytes(pass).div_ceil(4))
        }
    };
    s.alloc::<f32>(what, Shape::new(&[len]))
}
