//! select: slot `t` of a tensor's first dimension, `x[t]` (PyTorch's
//! `x.select(0, t)`), as a view: no copy, the output is the slot's bytes.
//! A recurrent layer reads time step `t` of `[T, B, …]` this way, the
//! input projection of every step having been made in one product.
//!
//! Backward adds the slot's gradient into the matching slot of one
//! gradient for the whole input, zeroed by the first select to reach it
//! (the last time step, backward running in reverse), so `T` selects of
//! one tensor cost one zeroing of it and `T` slot-sized adds, not `T`
//! whole-tensor gradients.

#[cfg(test)]
mod tests;

use crate::backend::BackendError;
use crate::memory::{bf16, FloatBuf};
use crate::ops::Step;
use crate::tensor::{Layout, Shape, Tensor, TensorRef};
use crate::{Error, Result};

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    y: TensorRef,
    /// The slot: its first element and its length.
    first: usize,
    len: usize,
}

impl<'s> Tensor<'s> {
    /// `self[t]`: of `self`'s shape less its first dimension, `t` below
    /// that dimension; a view of `self`'s bytes.
    pub fn select(self, s: &mut Step<'s>, t: usize) -> Result<Tensor<'s>> {
        let shape = self.shape();
        if shape.rank() < 2 || t >= shape.dim(0) {
            return Err(Error::shape(
                "select",
                format!("a slot below the first dimension of a tensor of rank 2 or more, got slot {t} of {shape}"),
            ));
        }
        if self.layout() != Layout::Nchw {
            return self.to_layout(s, Layout::Nchw)?.select(s, t);
        }
        let rest = Shape::new(&shape.dims()[1..]);
        let len = rest.numel();
        let buf = slot(self.buf(), t * len, len)?;
        let requires_grad = self.requires_grad() && s.grad_enabled();
        let y = s.alias(buf, rest, requires_grad);
        if requires_grad {
            s.record(Saved {
                x: self.inner,
                y: y.inner,
                first: t * len,
                len,
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
        let gx = whole_grad(s, &self.x, "select input grad")?;
        let target = slot(gx, self.first, self.len)?;
        s.uses(&[target.into(), gy.into()]).add_assign(target, gy)?;
        Ok(())
    }
}

/// `len` elements of `buf` from `first`: a slot the op has checked lies
/// inside it.
pub(crate) fn slot(buf: FloatBuf, first: usize, len: usize) -> Result<FloatBuf> {
    Ok(buf
        .slice(first, len)
        .ok_or(BackendError::Internal("a slot past the end of its tensor"))?)
}

/// The gradient of `x` that slots are added into: the one backward holds
/// when this op may write over it, else a new one, zeroed, holding what
/// `x` had so far. Never the gradient backward started from: that one is
/// the caller's.
pub(crate) fn whole_grad(s: &mut Step<'_>, x: &TensorRef, what: &'static str) -> Result<FloatBuf> {
    let prior = s.grad_of(x);
    if prior.is_some() && s.owns_grad(x) {
        return Ok(prior.unwrap_or_default());
    }
    let g = s.grad_buffer(x, what)?;
    zero(s, g)?;
    if let Some(p) = prior {
        s.uses(&[g.into(), p.into()]).add_assign(g, p)?;
        s.release_grad(x);
    }
    s.accumulate(x, g)?;
    Ok(g)
}

/// Sets every element of `buf` to zero, in its type.
pub(crate) fn zero(s: &mut Step<'_>, buf: FloatBuf) -> Result<()> {
    let backend = s.uses(&[buf.into()]);
    match buf {
        FloatBuf::F32(b) => backend.fill(b, 0.0)?,
        FloatBuf::Bf16(b) => backend.fill(b, bf16::ZERO)?,
    }
    Ok(())
}
