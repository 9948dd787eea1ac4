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
//!
//! [`Tensor::fill_rows`] is the same op over blocks of rows of any count:
//! tables `[rows, width]` filled block after block, where the closure
//! making a block is handed the tables so far, to read the rows already
//! written (a Tree-LSTM's level gathers its children from the levels
//! below). Each table is allocated once, so filling it costs its size,
//! where growing it by concatenation would copy it once per block.
//! Backward is sound for the same reason as the stack's: a block's rows
//! are read only by what was recorded after the block was written, so
//! backward has added every reader's gradient into the block's slot before
//! it hands the slot to the block.

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

impl<'s> Tensor<'s> {
    /// `N` tables of `rows` rows, each as wide as its part of `first`,
    /// filled block by block: `first` (each `[n₀, width]`), then
    /// `block(s, k, tables)` for `k` in `1..blocks`, each `[n_k, width]`,
    /// appended below the rows before. The tables a block is handed hold
    /// the blocks before it and zeros below them; a block may read only the
    /// rows before it (see the module). The blocks must fill every row.
    /// Parts want a gradient as `first[0]` does.
    pub fn fill_rows<const N: usize>(
        s: &mut Step<'s>,
        rows: usize,
        first: [Tensor<'s>; N],
        blocks: usize,
        mut block: impl FnMut(&mut Step<'s>, usize, [Tensor<'s>; N]) -> Result<[Tensor<'s>; N]>,
    ) -> Result<[Tensor<'s>; N]> {
        let bad = |detail: String| Err(Error::shape("fill_rows", detail));
        let Some(lead) = first.first() else {
            return bad("at least one table, got none".into());
        };
        let (dtype, wants) = (lead.dtype(), lead.requires_grad() && s.grad_enabled());
        let mut tables = first;
        for (i, part) in first.iter().enumerate() {
            let width = match part.shape().dims() {
                &[_, width] => width,
                _ => return bad(format!("parts [rows, width], got {} for table {i}", part.shape())),
            };
            let table = s.output_of("filled rows", Shape::new(&[rows, width]), dtype, &[part])?;
            zero(s, table.buf())?;
            tables[i] = table;
        }
        let mut filled = [0usize; N];
        let mut parts = first;
        for k in 0..blocks {
            if k > 0 {
                parts = block(s, k, tables)?;
            }
            for (i, (p, table)) in parts.iter().zip(&tables).enumerate() {
                let width = table.shape().dim(1);
                let n = match p.shape().dims() {
                    &[n, w] if w == width && filled[i] + n <= rows => n,
                    _ => {
                        return bad(format!(
                            "blocks [n, {width}] filling table {i}'s {rows} rows, but block {k} is {} below {} rows",
                            p.shape(),
                            filled[i]
                        ))
                    }
                };
                if p.dtype() != dtype || (p.requires_grad() && s.grad_enabled()) != wants {
                    return bad(format!(
                        "every block {dtype}, wanting a gradient as block 0 does ({wants}); block {k} of table {i} is {} ({})",
                        p.dtype(),
                        p.requires_grad() && s.grad_enabled()
                    ));
                }
                let target = slot(table.buf(), filled[i] * width, n * width)?;
                s.uses(&[target.into(), p.buf().into()]).add_assign(target, p.buf())?;
                if wants {
                    s.record(Saved {
                        part: p.inner,
                        y: table.inner,
                        first: filled[i] * width,
                    });
                }
                filled[i] += n;
            }
        }
        if let Some(i) = filled.iter().position(|&n| n != rows) {
            return bad(format!(
                "blocks filling all {rows} rows of each table, but table {i}'s fill {}",
                filled[i]
            ));
        }
        Ok(tables)
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
