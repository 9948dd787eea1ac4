//! cast: a tensor in another float type and/or layout. A mixed-precision
//! step casts what a convolution or a matrix product reads (its input, its
//! weights) to bf16, as PyTorch's autocast does, and a convolution's 4-D
//! operands to channels last (see [`Layout`]); backward casts the gradient
//! back, so a weight's bf16 channels-last gradient lands in its fp32 NCHW
//! slot of the gradient slab.
//!
//! fp32 to bf16 rounds to nearest even (the `half` crate's rounding, and
//! our kernels'); bf16 to fp32 is exact; a layout change moves values only.

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_weights;
mod weights;

use crate::backend::cpu::Views;
use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::backend::BackendError;
use crate::memory::{bf16, DType, FloatBuf};
use crate::ops::Step;
use crate::tensor::{Layout, Shape, Tensor, TensorRef};
use crate::Result;

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "cast",
    source: include_str!("kernels.cu"),
    entries: &[
        CONVERT[0][0],
        CONVERT[0][1],
        CONVERT[1][0],
        CONVERT[1][1],
        weights::CONVERT_WEIGHTS[0],
        weights::CONVERT_WEIGHTS[1],
    ],
};
/// By source type, then destination type (fp32, bf16).
const CONVERT: [[&str; 2]; 2] = [
    ["convert_f32_f32", "convert_f32_bf16"],
    ["convert_bf16_f32", "convert_bf16_bf16"],
];

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    y: TensorRef,
}

impl<'s> Tensor<'s> {
    /// `self` in `dtype`, in its own layout: itself when it is of that type
    /// already.
    pub fn cast(self, s: &mut Step<'s>, dtype: DType) -> Result<Tensor<'s>> {
        self.convert(s, dtype, self.layout())
    }

    /// `self` in `layout`, of its own type (a 4-D tensor; any other is
    /// row-major already).
    pub fn to_layout(self, s: &mut Step<'s>, layout: Layout) -> Result<Tensor<'s>> {
        self.convert(s, self.dtype(), layout)
    }

    /// `self` in `dtype` and `layout` (the layout of a tensor not 4-D stays
    /// row-major): itself when it is both already.
    pub fn convert(self, s: &mut Step<'s>, dtype: DType, layout: Layout) -> Result<Tensor<'s>> {
        let layout = if self.shape().rank() == 4 { layout } else { Layout::Nchw };
        if self.dtype() == dtype && self.layout() == layout {
            return Ok(self);
        }
        // Made ahead, with the step's other weights (see `weights.rs`): the
        // first use records it, so backward casts its gradient back here.
        if let Some((copy, first)) = s.take_prepared(&self.inner, dtype, layout) {
            if first && copy.requires_grad {
                s.record(Saved { x: self.inner, y: copy });
            }
            return Ok(Tensor::from_ref(copy));
        }
        let what = copy_name((self.dtype(), self.layout()), (dtype, layout));
        let y = s.output_as(what, self.shape(), dtype, layout, &[&self])?;
        convert(s, self.shape(), (self.buf(), self.layout()), (y.buf(), layout))?;
        if y.requires_grad() {
            s.record(Saved {
                x: self.inner,
                y: y.inner,
            });
        }
        Ok(y)
    }
}

/// What a copy from `from` to `to` (type, layout) is called in memory reports.
fn copy_name(from: (DType, Layout), to: (DType, Layout)) -> &'static str {
    match (to.0, to.1 == from.1, to.1) {
        (DType::Bf16, true, _) => "bf16 copy",
        (DType::F32, true, _) => "f32 copy",
        (d, false, Layout::Nhwc) if d == from.0 => "channels-last copy",
        (d, false, Layout::Nchw) if d == from.0 => "NCHW copy",
        (DType::Bf16, false, Layout::Nhwc) => "bf16 channels-last copy",
        (DType::Bf16, false, Layout::Nchw) => "bf16 NCHW copy",
        (DType::F32, false, Layout::Nhwc) => "f32 channels-last copy",
        (DType::F32, false, Layout::Nchw) => "f32 NCHW copy",
    }
}

/// `dst = src` across the float types and layouts (of one shape).
pub(crate) fn convert(
    s: &mut Step<'_>,
    shape: Shape,
    (src, from): (FloatBuf, Layout),
    (dst, to): (FloatBuf, Layout),
) -> Result<()> {
    let (n, c, hw) = dims(shape);
    let mode = mode(from, to);
    s.launch(
        &[src.into(), dst.into()],
        |v| convert_on_cpu(v, shape, (src, from), (dst, to)),
        |gpu| {
            let index = |d: DType| match d {
                DType::F32 => 0,
                DType::Bf16 => 1,
            };
            let entry = CONVERT[index(src.dtype())][index(dst.dtype())];
            let u32 = |v: usize| u32::try_from(v).map_err(|_| BackendError::Internal("a tensor too large to cast"));
            gpu.launch(
                entry,
                Grid::over(dst.len()),
                &[
                    src.into(),
                    dst.into(),
                    Arg::U32(u32(n)?),
                    Arg::U32(u32(c)?),
                    Arg::U32(u32(hw)?),
                    Arg::U32(mode),
                ],
            )
        },
    )?;
    Ok(())
}

/// `[n, c, hw]` of a 4-D shape (any other is one plane of its values).
fn dims(shape: Shape) -> (usize, usize, usize) {
    match shape.rank() {
        4 => (shape.dim(0), shape.dim(1), shape.dim(2) * shape.dim(3)),
        _ => (1, 1, shape.numel()),
    }
}

/// The kernels' `mode`: 1 writes NCHW as NHWC, 2 NHWC as NCHW, 0 keeps it.
fn mode(from: Layout, to: Layout) -> u32 {
    match (from, to) {
        (Layout::Nchw, Layout::Nhwc) => 1,
        (Layout::Nhwc, Layout::Nchw) => 2,
        _ => 0,
    }
}

/// `convert`'s CPU body, value for value the kernels' (`convert_t`).
fn convert_on_cpu(
    v: &mut Views<'_>,
    shape: Shape,
    (src, from): (FloatBuf, Layout),
    (dst, to): (FloatBuf, Layout),
) -> Result<(), BackendError> {
    let (_, c, hw) = dims(shape);
    let mode = mode(from, to);
    // Where element `i` of `dst` comes from in `src`.
    let source = move |i: usize| match mode {
        1 => {
            let (ch, p, img) = (i % c, i / c % hw, i / (c * hw));
            (img * c + ch) * hw + p
        }
        2 => {
            let (p, ch, img) = (i % hw, i / hw % c, i / (c * hw));
            (img * hw + p) * c + ch
        }
        _ => i,
    };
    match (src, dst) {
        (FloatBuf::F32(a), FloatBuf::Bf16(b)) => {
            let (a, b) = (v.read(a)?, v.write(b)?);
            b.iter_mut()
                .enumerate()
                .for_each(|(i, b)| *b = bf16::from_f32(a[source(i)]));
        }
        (FloatBuf::Bf16(a), FloatBuf::F32(b)) => {
            let (a, b) = (v.read(a)?, v.write(b)?);
            b.iter_mut().enumerate().for_each(|(i, b)| *b = a[source(i)].to_f32());
        }
        (FloatBuf::F32(a), FloatBuf::F32(b)) => {
            let (a, b) = (v.read(a)?, v.write(b)?);
            b.iter_mut().enumerate().for_each(|(i, b)| *b = a[source(i)]);
        }
        (FloatBuf::Bf16(a), FloatBuf::Bf16(b)) => {
            let (a, b) = (v.read(a)?, v.write(b)?);
            b.iter_mut().enumerate().for_each(|(i, b)| *b = a[source(i)]);
        }
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
        convert(s, self.x.shape, (gy, self.y.layout), (gx, self.x.layout))?;
        s.accumulate(&self.x, gx)
    }
}
