//! lstm_cell: the pointwise part of one LSTM step, fused, with PyTorch's
//! gate order (i, f, g, o). Given the gates' pre-activations as two
//! summands, `x·W_ihᵀ + b_ih + b_hh` and `h·W_hhᵀ` (each `[B, 4H]`, made by
//! `linear`; the second absent where the previous `h` is zero), and the
//! previous cell `c_prev` `[B, H]` (absent: zero):
//!
//! ```text
//! i, f, o = σ(gates[0H..1H]), σ(gates[1H..2H]), σ(gates[3H..4H])
//! g = tanh(gates[2H..3H])
//! c = f·c_prev + i·g        h = o·tanh(c)
//! ```
//!
//! Adding the summands here saves a `[B, 4H]` tensor and a kernel per time
//! step; the activations `(i, f, g, o)` are kept for backward in a
//! `[B, 4H]` buffer of the step (cuDNN keeps them in its reserve space
//! likewise), and `tanh(c)` is made again there from `c`. Backward gives
//! both summands the same gradient, `d(gates)`, and `c_prev`
//! `d(c)·f`, where `d(c)` is the gradient reaching `c` plus that reaching
//! `h` through `tanh(c)`. Either output may go unused (the last step's `c`,
//! a classifier's every `h` but the last): its gradient counts as zero.

pub(crate) mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Grid, KernelSource};
use crate::memory::FloatBuf;
use crate::ops::Step;
use crate::tensor::{Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "lstm_cell",
    source: include_str!("kernels.cu"),
    entries: &[
        LSTM_FORWARD.f32,
        LSTM_FORWARD.bf16,
        LSTM_BACKWARD.f32,
        LSTM_BACKWARD.bf16,
    ],
};
const LSTM_FORWARD: FloatKernel = float_kernel!("lstm_cell_forward");
const LSTM_BACKWARD: FloatKernel = float_kernel!("lstm_cell_backward");

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    from_h: Option<TensorRef>,
    c_prev: Option<TensorRef>,
    /// `(i, f, g, o)` after their activations, `[B, 4H]`.
    acts: FloatBuf,
    h: TensorRef,
    c: TensorRef,
}

impl<'s> Tensor<'s> {
    /// One LSTM step from `self`, the gates' input summand `[B, 4H]`,
    /// `from_h`, their hidden-state summand (`None`: zero), and `c_prev`,
    /// the previous cell `[B, H]` (`None`: zero): `(h, c)`, each `[B, H]`,
    /// in `self`'s type (the summands and `c_prev` must share it).
    pub fn lstm_cell(
        self,
        s: &mut Step<'s>,
        from_h: Option<Tensor<'s>>,
        c_prev: Option<Tensor<'s>>,
    ) -> Result<(Tensor<'s>, Tensor<'s>)> {
        let gates = self.shape();
        if gates.rank() != 2 || !gates.dim(1).is_multiple_of(4) || gates.dim(1) == 0 {
            return Err(Error::shape(
                "lstm_cell",
                format!("gates [B, 4H] with H at least 1, got {gates}"),
            ));
        }
        let (batch, hidden) = (gates.dim(0), gates.dim(1) / 4);
        let state = Shape::new(&[batch, hidden]);
        for (what, t, want) in [("hidden summand", from_h, gates), ("previous cell", c_prev, state)] {
            match t {
                Some(t) if t.shape() != want || t.dtype() != self.dtype() => {
                    return Err(Error::shape(
                        "lstm_cell",
                        format!(
                            "a {what} {want} {} like the gates {gates}, got {} {}",
                            self.dtype(),
                            t.shape(),
                            t.dtype()
                        ),
                    ))
                }
                _ => {}
            }
        }
        let mut inputs = [&self; 3];
        if let Some(t) = from_h.as_ref() {
            inputs[1] = t;
        }
        if let Some(t) = c_prev.as_ref() {
            inputs[2] = t;
        }
        let h = s.output("lstm hidden state", state, &inputs)?;
        let c = s.output("lstm cell state", state, &inputs)?;
        let acts = s.alloc_float("lstm gate activations", gates, self.dtype())?;
        let (x, hg, cp) = (self.buf(), from_h.map(|t| t.buf()), c_prev.map(|t| t.buf()));
        let (hb, cb) = (h.buf(), c.buf());
        s.launch(
            &[
                x.into(),
                hg.unwrap_or_default().into(),
                cp.unwrap_or_default().into(),
                acts.into(),
                hb.into(),
                cb.into(),
            ],
            |v| {
                let hg = hg.map(|b| v.read(b)).transpose()?;
                let cp = cp.map(|b| v.read(b)).transpose()?;
                cpu::forward(hidden, v.read(x)?, hg, cp, v.write(acts)?, v.write(hb)?, v.write(cb)?);
                Ok(())
            },
            |gpu| {
                gpu.launch(
                    LSTM_FORWARD.of(x.dtype()),
                    Grid::over(batch * hidden),
                    &[
                        x.into(),
                        hg.map_or(Arg::Null, Arg::from),
                        cp.map_or(Arg::Null, Arg::from),
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
                x: self.inner,
                from_h: from_h.map(|t| t.inner),
                c_prev: c_prev.map(|t| t.inner),
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
        let wants = |t: Option<TensorRef>| t.filter(|t| t.requires_grad);
        let (x, hg, cp) = (wants(Some(self.x)), wants(self.from_h), self.c_prev);
        let cp_value = cp.map(|t| s.saved(&t)).transpose()?;
        let gx = x.map(|t| s.alloc_like("lstm gates grad", &t)).transpose()?;
        let ghg = hg.map(|t| s.alloc_like("lstm hidden summand grad", &t)).transpose()?;
        let gcp = wants(cp)
            .map(|t| s.alloc_like("lstm previous cell grad", &t))
            .transpose()?;
        if gx.is_none() && ghg.is_none() && gcp.is_none() {
            return Ok(());
        }
        let hidden = self.h.shape.dim(1);
        let batch = self.h.shape.dim(0);
        let (acts, c) = (self.acts, self.c.buf);
        let any = |b: Option<FloatBuf>| b.unwrap_or_default();
        s.launch(
            &[
                acts.into(),
                c.into(),
                any(cp_value).into(),
                any(dh).into(),
                any(dc).into(),
                any(gx).into(),
                any(ghg).into(),
                any(gcp).into(),
            ],
            |v| {
                let cp = cp_value.map(|b| v.read(b)).transpose()?;
                let dh = dh.map(|b| v.read(b)).transpose()?;
                let dc = dc.map(|b| v.read(b)).transpose()?;
                let gx = gx.map(|b| v.write(b)).transpose()?;
                let ghg = ghg.map(|b| v.write(b)).transpose()?;
                let gcp = gcp.map(|b| v.write(b)).transpose()?;
                let inputs = cpu::Upstream {
                    acts: v.read(acts)?,
                    c: v.read(c)?,
                    c_prev: cp,
                    dh,
                    dc,
                };
                cpu::backward(hidden, inputs, gx, ghg, gcp);
                Ok(())
            },
            |gpu| {
                let arg = |b: Option<FloatBuf>| b.map_or(Arg::Null, Arg::from);
                gpu.launch(
                    LSTM_BACKWARD.of(acts.dtype()),
                    Grid::over(batch * hidden),
                    &[
                        acts.into(),
                        c.into(),
                        arg(cp_value),
                        arg(dh),
                        arg(dc),
                        arg(gx),
                        arg(ghg),
                        arg(gcp),
                        Arg::U32(batch as u32),
                        Arg::U32(hidden as u32),
                    ],
                )
            },
        )?;
        for (t, g) in [(x, gx), (hg, ghg), (wants(cp), gcp)] {
            if let (Some(t), Some(g)) = (t, g) {
                s.accumulate(&t, g)?;
            }
        }
        Ok(())
    }
}
