//! tree_lstm_cell: the pointwise part of one node of the binary (N-ary,
//! N = 2) constituency Tree-LSTM of Tai et al. (2015), as Lantern's
//! sentiment model computes it, fused. An inner node reads its two
//! children's cells `c_l`, `c_r` `[B, H]` and its gates' pre-activations
//! `[B, 5H]` (made by one `linear` over the children's `[h_l, h_r]`), in
//! the order (i, f_l, f_r, o, u); a leaf has no children and three gates,
//! `[B, 3H]` (i, o, u), made from its word's embedding:
//!
//! ```text
//! inner: i, f_l, f_r, o = σ(·), u = tanh(·)    c = i·u + f_l·c_l + f_r·c_r
//! leaf:  i, o = σ(·), u = tanh(·)               c = i·u
//!        h = o·tanh(c)
//! ```
//!
//! A row is a node: a batch is one node of each of `B` trees, or all the
//! nodes of one height across a minibatch's trees. The activations are
//! kept for backward in a buffer shaped like the gates; `tanh(c)` is made
//! again there from `c`. Either output may go unused (a root's `c`): its
//! gradient counts as zero.

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Grid, KernelSource};
use crate::memory::FloatBuf;
use crate::ops::Step;
use crate::tensor::{Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "tree_lstm_cell",
    source: include_str!("kernels.cu"),
    entries: &[
        TREE_FORWARD.f32,
        TREE_FORWARD.bf16,
        TREE_BACKWARD.f32,
        TREE_BACKWARD.bf16,
    ],
};
const TREE_FORWARD: FloatKernel = float_kernel!("tree_lstm_cell_forward");
const TREE_BACKWARD: FloatKernel = float_kernel!("tree_lstm_cell_backward");

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    gates: TensorRef,
    /// The children's cells, `(c_l, c_r)`; `None` for leaves.
    children: Option<(TensorRef, TensorRef)>,
    /// The gates after their activations, shaped like them.
    acts: FloatBuf,
    h: TensorRef,
    c: TensorRef,
}

impl<'s> Tensor<'s> {
    /// One Tree-LSTM node for each row of `self`, the gates'
    /// pre-activations: `[B, 5H]` (i, f_l, f_r, o, u) with `children`, the
    /// left and right children's cells `[B, H]`; `[B, 3H]` (i, o, u)
    /// without (leaves). Gives `(h, c)`, each `[B, H]`, in `self`'s type
    /// (the children's cells must share it).
    pub fn tree_lstm_cell(
        self,
        s: &mut Step<'s>,
        children: Option<(Tensor<'s>, Tensor<'s>)>,
    ) -> Result<(Tensor<'s>, Tensor<'s>)> {
        let gates = self.shape();
        let per = if children.is_some() { 5 } else { 3 };
        if gates.rank() != 2 || !gates.dim(1).is_multiple_of(per) || gates.dim(1) == 0 {
            let what = match children {
                Some(_) => "an inner node's gates [B, 5H] (i, f_l, f_r, o, u)",
                None => "a leaf's gates [B, 3H] (i, o, u)",
            };
            return Err(Error::shape(
                "tree_lstm_cell",
                format!("{what} with H at least 1, got {gates}"),
            ));
        }
        let (batch, hidden) = (gates.dim(0), gates.dim(1) / per);
        let state = Shape::new(&[batch, hidden]);
        if let Some((left, right)) = children {
            for (which, t) in [("left", left), ("right", right)] {
                if t.shape() != state || t.dtype() != self.dtype() {
                    return Err(Error::shape(
                        "tree_lstm_cell",
                        format!(
                            "the {which} child's cell {state} {} for gates {gates}, got {} {}",
                            self.dtype(),
                            t.shape(),
                            t.dtype()
                        ),
                    ));
                }
            }
        }
        let mut inputs = [&self; 3];
        if let Some((l, r)) = children.as_ref() {
            inputs[1] = l;
            inputs[2] = r;
        }
        let h = s.output("tree lstm hidden state", state, &inputs)?;
        let c = s.output("tree lstm cell state", state, &inputs)?;
        let acts = s.alloc_float("tree lstm gate activations", gates, self.dtype())?;
        let g = self.buf();
        let (cl, cr) = (children.map(|(l, _)| l.buf()), children.map(|(_, r)| r.buf()));
        let (hb, cb) = (h.buf(), c.buf());
        s.launch(
            &[
                g.into(),
                cl.unwrap_or_default().into(),
                cr.unwrap_or_default().into(),
                acts.into(),
                hb.into(),
                cb.into(),
            ],
            |v| {
                let kids = match (cl, cr) {
                    (Some(l), Some(r)) => Some((v.read(l)?, v.read(r)?)),
                    _ => None,
                };
                cpu::forward(hidden, v.read(g)?, kids, v.write(acts)?, v.write(hb)?, v.write(cb)?);
                Ok(())
            },
            |gpu| {
                gpu.launch(
                    TREE_FORWARD.of(g.dtype()),
                    Grid::over(batch * hidden),
                    &[
                        g.into(),
                        cl.map_or(Arg::Null, Arg::from),
                        cr.map_or(Arg::Null, Arg::from),
                        acts.into(),
                        hb.into(),
                        cb.into(),
                        Arg::U32(batch as u32),
                        Arg::U32(hidden as u32),
                    ],
                )
            },
        )?;
        if h.requires_grad() {
            s.record(Saved {
                gates: self.inner,
                children: children.map(|(l, r)| (l.inner, r.inner)),
                acts,
                h: h.inner,
                c: c.inner,
            });
        }
        Ok((h, c))
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let (dh, dc) = (s.grad_of(&self.h), s.grad_of(&self.c));
        if dh.is_none() && dc.is_none() {
            return Ok(());
        }
        let wants = |t: TensorRef| t.requires_grad.then_some(t);
        let kids = match self.children {
            Some((l, r)) => Some((s.saved(&l)?, s.saved(&r)?)),
            None => None,
        };
        let gg = wants(self.gates)
            .map(|t| s.alloc_like("tree lstm gates grad", &t))
            .transpose()?;
        let (mut gl, mut gr) = (None, None);
        if let Some((l, r)) = self.children {
            gl = wants(l)
                .map(|t| s.alloc_like("tree lstm left cell grad", &t))
                .transpose()?;
            gr = wants(r)
                .map(|t| s.alloc_like("tree lstm right cell grad", &t))
                .transpose()?;
        }
        if gg.is_none() && gl.is_none() && gr.is_none() {
            return Ok(());
        }
        let (batch, hidden) = (self.h.shape.dim(0), self.h.shape.dim(1));
        let (acts, c) = (self.acts, self.c.buf);
        let (cl, cr) = (kids.map(|(l, _)| l), kids.map(|(_, r)| r));
        let any = |b: Option<FloatBuf>| b.unwrap_or_default();
        s.launch(
            &[
                acts.into(),
                c.into(),
                any(cl).into(),
                any(cr).into(),
                any(dh).into(),
                any(dc).into(),
                any(gg).into(),
                any(gl).into(),
                any(gr).into(),
            ],
            |v| {
                let children = match (cl, cr) {
                    (Some(l), Some(r)) => Some((v.read(l)?, v.read(r)?)),
                    _ => None,
                };
                let up = cpu::Upstream {
                    acts: v.read(acts)?,
                    c: v.read(c)?,
                    children,
                    dh: dh.map(|b| v.read(b)).transpose()?,
                    dc: dc.map(|b| v.read(b)).transpose()?,
                };
                let out = cpu::Grads {
                    gates: gg.map(|b| v.write(b)).transpose()?,
                    c_left: gl.map(|b| v.write(b)).transpose()?,
                    c_right: gr.map(|b| v.write(b)).transpose()?,
                };
                cpu::backward(hidden, up, out);
                Ok(())
            },
            |gpu| {
                let arg = |b: Option<FloatBuf>| b.map_or(Arg::Null, Arg::from);
                gpu.launch(
                    TREE_BACKWARD.of(acts.dtype()),
                    Grid::over(batch * hidden),
                    &[
                        acts.into(),
                        c.into(),
                        arg(cl),
                        arg(cr),
                        arg(dh),
                        arg(dc),
                        arg(gg),
                        arg(gl),
                        arg(gr),
                        Arg::U32(batch as u32),
                        Arg::U32(hidden as u32),
                    ],
                )
            },
        )?;
        let targets = [
            (Some(self.gates), gg),
            (self.children.map(|(l, _)| l), gl),
            (self.children.map(|(_, r)| r), gr),
        ];
        for (t, g) in targets {
            if let (Some(t), Some(g)) = (t, g) {
                s.accumulate(&t, g)?;
            }
        }
        Ok(())
    }
}
