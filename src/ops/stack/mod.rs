//! stack: parts of one shape made one after another, `T` of them, side by
//! side along a new first dimension, `[T, …]` (PyTorch's `stack(dim=0)`):
//! a recurrent layer's output, one hidden state per time step.
//!
//! The parts come from a closure called for `t` in `0..T`, not from a
//! list: a step allocates nothing on the heap, and a layer makes each part
//! from the one before. Each is copied into its slot as it comes (the
//! output is zeroed once and each part added into its slot: two of the
//! backend's own kernels, no kernel of this op) and records a node naming
//! its slot. Backward hands each part its slot of the output's gradient:
//! that very slot, without a copy, when this op may write over the
//! gradient (a part's other consumers may then add into it), else a copy.

#[cfg(test)]
mod tests;

use crate::ops::select::{slot, zero};
use crate::ops::Step;
use crate::tensor::{Layout, Shape, Tensor, TensorRef, MAX_RANK};
use crate::{Error, Result};

/// One part of a stack, for backward.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    part: TensorRef,
    y: TensorRef,
    first: usize,
}

impl<'s> Tensor<'s> {
    /// `[part(0), …, part(steps − 1)]` along a new first dimension. Every
    /// part has the shape and type of the first, and wants a gradient if
    /// and only if the first does (the output's is decided when the first
    /// comes).
    pub fn stack(
        s: &mut Step<'s>,
        steps: usize,
        mut part: impl FnMut(&mut Step<'s>, usize) -> Result<Tensor<'s>>,
    ) -> Result<Tensor<'s>> {
        let bad = |detail: String| Err(Error::shape("stack", detail));
        if steps == 0 {
            return bad("at least one part, got none".into());
        }
        let first = part(s, 0)?.to_layout(s, Layout::Nchw)?;
        let each = first.shape();
        if each.rank() >= MAX_RANK {
            return bad(format!("parts of rank below {MAX_RANK}, got {each}"));
        }
        let mut dims = [steps; MAX_RANK];
        dims[1..=each.rank()].copy_from_slice(each.dims());
        let shape = Shape::new(&dims[..=each.rank()]);
        let y = s.output_of("stack output", shape, first.dtype(), &[&first])?;
        zero(s, y.buf())?;
        let mut p = first;
        for t in 0..steps {
            if t > 0 {
                p = part(s, t)?.to_layout(s, Layout::Nchw)?;
            }
            if p.shape() != each || p.dtype() != first.dtype() {
                return bad(format!(
                    "every part {each} {} like part 0, but part {t} is {} {}",
                    first.dtype(),
                    p.shape(),
                    p.dtype()
                ));
            }
            let wants = p.requires_grad() && s.grad_enabled();
            if wants != y.requires_grad() {
                return bad(format!(
                    "every part wanting a gradient as part 0 does ({}), but part {t} does not",
                    y.requires_grad()
                ));
            }
            let n = each.numel();
            let target = slot(y.buf(), t * n, n)?;
            s.uses(&[target.into(), p.buf().into()]).add_assign(target, p.buf())?;
            if wants {
                s.record(Saved {
                    part: p.inner,
                    y: y.inner,
                    first: t * n,
                });
            }
        }
        Ok(y)
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        let n = self.part.shape.numel();
        let g = slot(gy, self.first, n)?;
        if s.owns_grad(&self.y) {
            return s.accumulate(&self.part, g);
        }
        let gx = s.grad_buffer(&self.part, "stack part grad")?;
        zero(s, gx)?;
        s.uses(&[gx.into(), g.into()]).add_assign(gx, g)?;
        s.accumulate(&self.part, gx)
    }
}
