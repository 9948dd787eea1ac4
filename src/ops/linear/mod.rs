//! linear: `y = x · Wᵀ + b` with `x` `[N, IN]`, `W` `[OUT, IN]` (PyTorch's
//! layout, so checkpoints carry over), `b` `[OUT]`.

mod cpu;
#[cfg(test)]
mod tests;

use crate::autograd::{Node, Step};
use crate::backend::Backend;
use crate::tensor::{Shape, Tensor, TensorRef};
use crate::{Error, Result};

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    w: TensorRef,
    bias: Option<TensorRef>,
    y: TensorRef,
}

impl<'s> Tensor<'s> {
    pub fn linear(self, s: &mut Step<'s>, weight: Tensor<'s>, bias: Option<Tensor<'s>>) -> Result<Tensor<'s>> {
        let (x, w) = (self.shape(), weight.shape());
        if x.rank() != 2 || w.rank() != 2 || x.dim(1) != w.dim(1) {
            return Err(Error::shape(
                "linear",
                format!("input [N, IN] and weight [OUT, IN], got {x} and {w}"),
            ));
        }
        let (n, inp, out) = (x.dim(0), x.dim(1), w.dim(0));
        if let Some(b) = bias {
            if b.shape() != Shape::new(&[out]) {
                return Err(Error::shape("linear", format!("bias [{out}], got {}", b.shape())));
            }
        }
        let y = match bias {
            Some(b) => s.output("linear output", Shape::new(&[n, out]), &[&self, &weight, &b])?,
            None => s.output("linear output", Shape::new(&[n, out]), &[&self, &weight])?,
        };
        match s.backend() {
            Backend::Cpu(cpu) => cpu.run(|v, _| {
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
            })?,
            Backend::Dry { .. } => {}
        }
        if y.requires_grad() {
            s.record(Node::Linear(Saved {
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
        let dims = (self.x.shape.dim(0), self.x.shape.dim(1), self.w.shape.dim(0));
        if self.x.requires_grad {
            let gx = s.alloc::<f32>("linear input grad", self.x.shape)?;
            match s.backend() {
                Backend::Cpu(cpu) => cpu.run(|v, _| {
                    cpu::input_grad(dims, v.read(gy)?, v.read(self.w.buf)?, v.write(gx)?);
                    Ok(())
                })?,
                Backend::Dry { .. } => {}
            }
            s.accumulate(&self.x, gx)?;
        }
        if self.w.requires_grad {
            let gw = s.alloc::<f32>("linear weight grad", self.w.shape)?;
            match s.backend() {
                Backend::Cpu(cpu) => cpu.run(|v, _| {
                    cpu::weight_grad(dims, v.read(gy)?, v.read(self.x.buf)?, v.write(gw)?);
                    Ok(())
                })?,
                Backend::Dry { .. } => {}
            }
            s.accumulate(&self.w, gw)?;
        }
        if let Some(b) = self.bias.filter(|b| b.requires_grad) {
            let gb = s.alloc::<f32>("linear bias grad", b.shape)?;
            match s.backend() {
                Backend::Cpu(cpu) => cpu.run(|v, _| {
                    cpu::bias_grad(dims, v.read(gy)?, v.write(gb)?);
                    Ok(())
                })?,
                Backend::Dry { .. } => {}
            }
            s.accumulate(&b, gb)?;
        }
        Ok(())
    }
}
