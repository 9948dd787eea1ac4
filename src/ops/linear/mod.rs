//! linear: `y = x · Wᵀ + b` with `x` `[N, IN]`, `W` `[OUT, IN]` (PyTorch's
//! layout, so checkpoints carry over), `b` `[OUT]`.

pub(crate) mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Gemm, Grid, KernelSource, BLAS_WORKSPACE};
use crate::backend::{BackendError, Sizing};
use crate::memory::{Buf, FloatBuf};
use crate::ops::Step;
use crate::tensor::{Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "linear",
    source: include_str!("kernels.cu"),
    entries: &[BIAS_ROWS.f32, BIAS_ROWS.bf16, BIAS_ROWS_GRAD.f32, BIAS_ROWS_GRAD.bf16],
};
const BIAS_ROWS: FloatKernel = float_kernel!("bias_rows");
const BIAS_ROWS_GRAD: FloatKernel = float_kernel!("bias_rows_grad");

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    w: TensorRef,
    bias: Option<TensorRef>,
    y: TensorRef,
}

/// `(N, IN, OUT)` of `x · Wᵀ + b`, or why the shapes do not fit (for
/// `linear` and `dense` alike).
pub(crate) fn dims(op: &'static str, x: Shape, w: Shape, bias: Option<Shape>) -> Result<(usize, usize, usize)> {
    if x.rank() != 2 || w.rank() != 2 || x.dim(1) != w.dim(1) {
        return Err(Error::shape(
            op,
            format!("input [N, IN] and weight [OUT, IN], got {x} and {w}"),
        ));
    }
    let (n, inp, out) = (x.dim(0), x.dim(1), w.dim(0));
    match bias {
        Some(b) if b != Shape::new(&[out]) => Err(Error::shape(op, format!("bias [{out}], got {b}"))),
        _ => Ok((n, inp, out)),
    }
}

impl<'s> Tensor<'s> {
    /// `self · weightᵀ + bias`; in a mixed-precision step all three are
    /// cast to bf16 first, and so is the output (as under autocast).
    pub fn linear(self, s: &mut Step<'s>, weight: Tensor<'s>, bias: Option<Tensor<'s>>) -> Result<Tensor<'s>> {
        let (n, inp, out) = dims("linear", self.shape(), weight.shape(), bias.map(|b| b.shape()))?;
        let dtype = s.compute_dtype();
        let x = self.cast(s, dtype)?;
        let weight = weight.cast(s, dtype)?;
        let bias = bias.map(|b| b.cast(s, dtype)).transpose()?;
        x.linear_cast(s, (n, inp, out), weight, bias)
    }

    fn linear_cast(
        self,
        s: &mut Step<'s>,
        (n, inp, out): (usize, usize, usize),
        weight: Tensor<'s>,
        bias: Option<Tensor<'s>>,
    ) -> Result<Tensor<'s>> {
        let y = match bias {
            Some(b) => s.output("linear output", Shape::new(&[n, out]), &[&self, &weight, &b])?,
            None => s.output("linear output", Shape::new(&[n, out]), &[&self, &weight])?,
        };
        let workspace = blas_workspace(s)?;
        let tf32 = s.policy().tf32();
        s.launch(
            &[
                self.buf().into(),
                weight.buf().into(),
                bias.map_or(FloatBuf::default(), |b| b.buf()).into(),
                y.buf().into(),
                workspace.unwrap_or_default().into(),
            ],
            |v| {
                let b = match bias {
                    Some(b) => Some(v.read(b.buf())?),
                    None => None,
                };
                cpu::forward(
                    (n, inp, out),
                    v.read(self.buf())?,
                    v.read(weight.buf())?,
                    b,
                    v.write(y.buf())?,
                );
                Ok(())
            },
            |gpu| {
                if let Some(b) = bias {
                    gpu.launch(
                        BIAS_ROWS.of(y.dtype()),
                        Grid::over(n * out),
                        &[b.buf().into(), y.buf().into(), Arg::U32(n as u32), Arg::U32(out as u32)],
                    )?;
                }
                // Column-major: yᵀ (out × n) = Wᵀ-as-stored (out × in) · xᵀ (in × n).
                gpu.gemm(Gemm {
                    transa: true,
                    transb: false,
                    m: out,
                    n,
                    k: inp,
                    a: weight.buf(),
                    lda: inp,
                    b: self.buf(),
                    ldb: inp,
                    beta: if bias.is_some() { 1.0 } else { 0.0 },
                    c: y.buf(),
                    ldc: out,
                    workspace: workspace.ok_or(NO_WORKSPACE)?,
                    tf32,
                })
            },
        )?;
        if y.requires_grad() {
            s.record(Saved {
                x: self.inner,
                w: weight.inner,
                bias: bias.map(|b| b.inner),
                y: y.inner,
            });
        }
        Ok(y)
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        let dims = (self.x.shape.dim(0), self.x.shape.dim(1), self.w.shape.dim(0));
        let (n, inp, out) = dims;
        let workspace = if self.x.requires_grad || self.w.requires_grad {
            blas_workspace(s)?
        } else {
            None
        };
        let tf32 = s.policy().tf32();
        if self.x.requires_grad {
            let gx = s.alloc_like("linear input grad", &self.x)?;
            s.launch(
                &[
                    gy.into(),
                    self.w.buf.into(),
                    gx.into(),
                    workspace.unwrap_or_default().into(),
                ],
                |v| {
                    cpu::input_grad(dims, v.read(gy)?, v.read(self.w.buf)?, v.write(gx)?);
                    Ok(())
                },
                // Column-major: gxᵀ (in × n) = W-as-stored (in × out) · gyᵀ (out × n).
                |gpu| {
                    gpu.gemm(Gemm {
                        transa: false,
                        transb: false,
                        m: inp,
                        n,
                        k: out,
                        a: self.w.buf,
                        lda: inp,
                        b: gy,
                        ldb: out,
                        beta: 0.0,
                        c: gx,
                        ldc: inp,
                        workspace: workspace.ok_or(NO_WORKSPACE)?,
                        tf32,
                    })
                },
            )?;
            s.accumulate(&self.x, gx)?;
        }
        if self.w.requires_grad {
            // A weight used again (a recurrence, a tree's nodes) adds each
            // use's product into its gradient in place.
            let (gw, add) = s.grad_into(&self.w, "linear weight grad")?;
            s.launch(
                &[
                    gy.into(),
                    self.x.buf.into(),
                    gw.into(),
                    workspace.unwrap_or_default().into(),
                ],
                |v| {
                    cpu::weight_grad(dims, v.read(gy)?, v.read(self.x.buf)?, v.write(gw)?, add);
                    Ok(())
                },
                // Column-major: gWᵀ (in × out) = xᵀ (in × n) · gy (n × out).
                |gpu| {
                    gpu.gemm(Gemm {
                        transa: false,
                        transb: true,
                        m: inp,
                        n: out,
                        k: n,
                        a: self.x.buf,
                        lda: inp,
                        b: gy,
                        ldb: out,
                        beta: if add { 1.0 } else { 0.0 },
                        c: gw,
                        ldc: inp,
                        workspace: workspace.ok_or(NO_WORKSPACE)?,
                        tf32,
                    })
                },
            )?;
            if !add {
                s.accumulate(&self.w, gw)?;
            }
        }
        if let Some(b) = self.bias.filter(|b| b.requires_grad) {
            let gb = s.grad_buffer(&b, "linear bias grad")?;
            s.launch(
                &[gy.into(), gb.into()],
                |v| {
                    cpu::bias_grad(dims, v.read(gy)?, v.write(gb)?);
                    Ok(())
                },
                |gpu| {
                    gpu.launch(
                        BIAS_ROWS_GRAD.of(gb.dtype()),
                        Grid::tiles(32, out, 32),
                        &[gy.into(), gb.into(), Arg::U32(n as u32), Arg::U32(out as u32)],
                    )
                },
            )?;
            s.accumulate(&b, gb)?;
        }
        Ok(())
    }
}

pub(crate) const NO_WORKSPACE: BackendError = BackendError::Internal("a GPU matrix product got no cuBLAS workspace");

/// cuBLAS's workspace for this op's products, in the step region, on a GPU.
pub(crate) fn blas_workspace(s: &mut Step<'_>) -> Result<Option<Buf<f32>>> {
    match s.sizing() {
        Sizing::Cuda(_) => Ok(Some(
            s.alloc::<f32>("cuBLAS workspace", Shape::new(&[BLAS_WORKSPACE / 4]))?,
        )),
        Sizing::Cpu { .. } => Ok(None),
    }
}
