//! reshape: the same elements under another shape. No copy: the output
//! aliases the input's buffer, and so does the input's gradient; a
//! channels-last input is made NCHW first, since a shape's elements are in
//! row-major order.

#[cfg(test)]
mod tests;

use crate::ops::Step;
use crate::tensor::{Layout, Shape, Tensor, TensorRef};
use crate::{Error, Result};

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    y: TensorRef,
}

impl<'s> Tensor<'s> {
    /// The same values in `shape` (of as many elements): a view, no copy.
    pub fn reshape(self, s: &mut Step<'s>, shape: Shape) -> Result<Tensor<'s>> {
        if shape.numel() != self.shape().numel() {
            return Err(Error::shape(
                "reshape",
                format!("{} elements into {shape}", self.shape().numel()),
            ));
        }
        if self.layout() != Layout::Nchw {
            return self.to_layout(s, Layout::Nchw)?.reshape(s, shape);
        }
        let requires_grad = self.requires_grad() && s.grad_enabled();
        let y = s.alias(self.buf(), shape, requires_grad);
        if requires_grad {
            s.record(Saved {
                x: self.inner,
                y: y.inner,
            });
        }
        Ok(y)
    }

    /// `[N, ...]` to `[N, rest]`.
    pub fn flatten(self, s: &mut Step<'s>) -> Result<Tensor<'s>> {
        let n = self.shape().dim(0);
        let rest = self.shape().numel() / n.max(1);
        self.reshape(s, Shape::new(&[n, rest]))
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        match s.grad_of(&self.y) {
            Some(gy) if self.x.requires_grad => s.accumulate(&self.x, gy),
            _ => Ok(()),
        }
    }
}
