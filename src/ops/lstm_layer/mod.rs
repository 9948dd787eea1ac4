//! lstm_layer: one LSTM layer over a whole sequence, as one op. Given the
//! gates' input summand for every step, `proj` `[T, B, 4H]` (`x·W_ihᵀ +
//! b_ih + b_hh`, made for all steps in one product), the recurrent weight
//! `W_hh` `[4H, H]` and the initial state `h0`, `c0` `[B, H]` (absent:
//! zero), it runs `lstm_cell`'s step `T` times, `h_{t−1}·W_hhᵀ` one product
//! a step, and returns every step's `h` and `c`, `[T, B, H]` each.
//!
//! Why one op rather than `T` cells and `T` linears: backward then needs
//! one product a step (the gradient reaching `h_{t−1}`), and `W_hh`'s
//! gradient is ONE product over all steps, `d(gates)[1..]ᵀ · h[..T−1]`
//! (plus `d(gates)[0]ᵀ · h0`), where a step at a time made `T` products and
//! `T` additions into it; the gates' gradient lands in one `[T, B, 4H]`
//! buffer, `proj`'s gradient, with no per-step slot additions. On an H200
//! that was 775 products and 1,020 additions a step of a 2 × 512 character
//! model; on one CPU thread it is `T` ops' dispatch saved.
//!
//! Backward keeps what `lstm_cell` keeps, for every step: the activations
//! `(i, f, g, o)` `[T, B, 4H]`, and the cells, which are an output; the
//! gates' gradient is written over the activations, step by step. A
//! forward no backward will read (evaluation, or no input wanting a
//! gradient) keeps one step's activations, `[1, B, 4H]`, each step's
//! written over the last's: a 2 × 512 character model's evaluation step
//! at T 128, B 64 holds 63.5 MiB less.
//!
//! The cells are fp32 whatever the layer's type (`c0`, `c` and their
//! gradients): a cell is a running sum, `c_t = f·c_{t−1} + i·g`, and in
//! bf16 (8 bits of mantissa) each step's `i·g` would be rounded against
//! the whole sum. Under `--precision bf16` the weights, `h` and the gates
//! are bf16 and the cells cost fp32's bytes, `[T, B, H]` a layer.

mod cpu;
#[cfg(test)]
mod tests;

mod gpu;

use crate::backend::cuda::KernelSource;
use crate::backend::Sizing;
use crate::memory::{DType, FloatBuf};
use crate::ops::linear::{blas_workspace, NO_WORKSPACE};
use crate::ops::Step;
use crate::tensor::{Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "lstm_layer",
    source: include_str!("kernels.cu"),
    entries: &gpu::ENTRIES,
};

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    proj: TensorRef,
    w_hh: TensorRef,
    h0: Option<TensorRef>,
    c0: Option<TensorRef>,
    /// Every step's `(i, f, g, o)` after their activations, `[T, B, 4H]`.
    acts: FloatBuf,
    h: TensorRef,
    c: TensorRef,
}

/// How many partial sums a recurrent product of `[rows, k] · [k, cols]`
/// is split into: on a GPU enough to fill it (`gpu::Product`), on the CPU
/// one.
fn product_parts(s: &mut Step<'_>, rows: usize, cols: usize, k: usize) -> usize {
    match s.sizing() {
        Sizing::Cuda(_) => gpu::Product::parts(rows, cols, k),
        Sizing::Cpu { .. } => 1,
    }
}

/// `(T, B, H)` of a layer, or why the shapes do not fit.
fn dims(proj: Shape, w_hh: Shape, h0: Option<Shape>, c0: Option<Shape>) -> Result<(usize, usize, usize)> {
    let bad = |what: String| Err(Error::shape("lstm_layer", what));
    if proj.rank() != 3 || proj.dim(2) == 0 || !proj.dim(2).is_multiple_of(4) || proj.dim(0) == 0 {
        return bad(format!("gates [T, B, 4H] with T and H at least 1, got {proj}"));
    }
    let (steps, batch, hidden) = (proj.dim(0), proj.dim(1), proj.dim(2) / 4);
    if w_hh != Shape::new(&[4 * hidden, hidden]) {
        return bad(format!("a recurrent weight [{}, {hidden}], got {w_hh}", 4 * hidden));
    }
    let state = Shape::new(&[batch, hidden]);
    for (what, s) in [("initial hidden state", h0), ("initial cell", c0)] {
        if let Some(s) = s.filter(|&s| s != state) {
            return bad(format!("an {what} {state}, got {s}"));
        }
    }
    Ok((steps, batch, hidden))
}

impl<'s> Tensor<'s> {
    /// Every step's `(h, c)`, `[T, B, H]` each, of an LSTM layer whose gates'
    /// input summand is `self` `[T, B, 4H]`, recurrent weight `w_hh` `[4H,
    /// H]`, from `h0` and `c0` `[B, H]` (`None`: zero). `w_hh`, `h0` and
    /// `h` are of `self`'s type; `c0` and `c` are fp32 (see the module).
    pub fn lstm_layer(
        self,
        s: &mut Step<'s>,
        w_hh: Tensor<'s>,
        h0: Option<Tensor<'s>>,
        c0: Option<Tensor<'s>>,
    ) -> Result<(Tensor<'s>, Tensor<'s>)> {
        let (steps, batch, hidden) = dims(self.shape(), w_hh.shape(), h0.map(|t| t.shape()), c0.map(|t| t.shape()))?;
        for t in [Some(w_hh), h0].into_iter().flatten() {
            if t.dtype() != self.dtype() {
                return Err(Error::shape(
                    "lstm_layer",
                    format!(
                        "gates, weight and hidden state {}, got a {} one",
                        self.dtype(),
                        t.dtype()
                    ),
                ));
            }
        }
        if let Some(c0) = c0.filter(|c0| c0.dtype() != DType::F32) {
            return Err(Error::shape(
                "lstm_layer",
                format!(
                    "an f32 initial cell (cells are fp32 at any precision), got a {} one",
                    c0.dtype()
                ),
            ));
        }
        // An absent state stands in as `self` again: the outputs want a
        // gradient if any input does, and a step allocates nothing on the heap.
        let inputs = [&self, &w_hh, h0.as_ref().unwrap_or(&self), c0.as_ref().unwrap_or(&self)];
        let states = Shape::new(&[steps, batch, hidden]);
        let h = s.output("lstm hidden states", states, &inputs)?;
        let c = s.output_of("lstm cell states", states, DType::F32, &inputs)?;
        // Backward reads every step's activations; without one, each step's
        // only live until its own kernel has written h and c.
        let slots = if h.requires_grad() { steps } else { 1 };
        let acts = s.alloc_float(
            "lstm gate activations",
            Shape::new(&[slots, batch, 4 * hidden]),
            self.dtype(),
        )?;
        // The recurrent summand of one step, in fp32: on a GPU as the partial
        // sums of `gpu::Product`'s split, which the cell kernel adds up.
        let parts = product_parts(s, batch, 4 * hidden, hidden);
        let from_h = s.alloc::<f32>("lstm recurrent summand", Shape::new(&[parts, batch, 4 * hidden]))?;
        // The CPU reads `W_hhᵀ` row by row at every step: transposed once
        // here, the product skips packing it `T` times.
        let w_t = match s.sizing() {
            Sizing::Cpu { .. } => {
                Some(s.alloc::<f32>("lstm recurrent weight, transposed", Shape::new(&[hidden, 4 * hidden]))?)
            }
            Sizing::Cuda(_) => None,
        };
        let saved = Saved {
            proj: self.inner,
            w_hh: w_hh.inner,
            h0: h0.map(|t| t.inner),
            c0: c0.map(|t| t.inner),
            acts,
            h: h.inner,
            c: c.inner,
        };
        let layer = saved.layer();
        let (x, w, hb, cb) = (self.buf(), w_hh.buf(), h.buf(), c.buf());
        let (h0b, c0b) = (h0.map(|t| t.buf()), c0.map(|t| t.buf()));
        s.launch(
            &[
                x.into(),
                w.into(),
                h0b.unwrap_or_default().into(),
                c0b.unwrap_or_default().into(),
                acts.into(),
                from_h.into(),
                w_t.unwrap_or_default().into(),
                hb.into(),
                cb.into(),
            ],
            |v| {
                let h0 = h0b.map(|b| v.read(b)).transpose()?;
                let c0 = c0b.map(|b| v.read(b)).transpose()?;
                let io = cpu::Forward {
                    proj: v.read(x)?,
                    w_hh: v.read(w)?,
                    w_t: w_t.map(|b| v.write(b)).transpose()?,
                    h0,
                    c0,
                };
                cpu::forward(hidden, io, v.write(acts)?, v.write(from_h)?, v.write(hb)?, v.write(cb)?);
                Ok(())
            },
            |gpu| layer.forward(gpu, x, h0b, c0b, from_h, parts),
        )?;
        if h.requires_grad() {
            s.record(saved);
        }
        Ok((h, c))
    }
}

impl Saved {
    /// The layer's sizes and buffers, as the GPU's passes take them.
    fn layer(&self) -> gpu::Layer {
        let d = self.h.shape;
        gpu::Layer {
            steps: d.dim(0),
            batch: d.dim(1),
            hidden: d.dim(2),
            w_hh: self.w_hh.buf,
            h: self.h.buf,
            c: self.c.buf,
            acts: self.acts,
        }
    }

    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let (dh, dc) = (s.grad_of(&self.h), s.grad_of(&self.c));
        if dh.is_none() && dc.is_none() {
            return Ok(());
        }
        let wants = |t: Option<TensorRef>| t.filter(|t| t.requires_grad);
        let (h0, c0) = (self.h0, self.c0);
        let (want_h0, want_c0) = (wants(h0), wants(c0));
        if !self.proj.requires_grad && !self.w_hh.requires_grad && want_h0.is_none() && want_c0.is_none() {
            return Ok(());
        }
        let d = self.h.shape;
        let (batch, hidden) = (d.dim(1), d.dim(2));
        let dtype = self.proj.dtype();
        let h0b = h0.map(|t| s.saved(&t)).transpose()?;
        let c0b = c0.map(|t| s.saved(&t)).transpose()?;
        // The gates' gradient for every step (proj's, and what W_hh's is
        // made of) overwrites their activations in place: step
        // t's backward reads only step t's activations, each thread its own
        // four before it writes them, so the layer's backward needs no
        // second [T, B, 4H] buffer (64 MiB a layer of a 2 × 512 model at
        // T 128, B 64: its step's peak held three of them).
        let dgates = self.acts;
        // The gradient reaching the previous step's h, in fp32 partial sums
        // on a GPU (see the forward's summand); h0's, if it wants one, summed.
        let parts = product_parts(s, batch, hidden, 4 * hidden);
        let carry_h = s.alloc::<f32>("lstm hidden state grad", Shape::new(&[parts, batch, hidden]))?;
        let carry_c = s.alloc_float("lstm cell grad", Shape::new(&[batch, hidden]), DType::F32)?;
        let gw = match self.w_hh.requires_grad {
            true => Some(s.grad_buffer(&self.w_hh, "lstm recurrent weight grad")?),
            false => None,
        };
        let gh0 = match (want_h0, parts) {
            (Some(h0), p) if p > 1 || dtype != DType::F32 => Some(s.alloc_like("lstm initial state grad", &h0)?),
            (Some(_), _) => Some(FloatBuf::F32(carry_h)),
            (None, _) => None,
        };
        let workspace = blas_workspace(s)?;
        let tf32 = s.policy().tf32();
        let layer = self.layer();
        let (acts, hb, cb, w) = (self.acts, self.h.buf, self.c.buf, self.w_hh.buf);
        let any = |b: Option<FloatBuf>| b.unwrap_or_default();
        s.launch(
            &[
                acts.into(),
                hb.into(),
                cb.into(),
                w.into(),
                any(h0b).into(),
                any(c0b).into(),
                any(dh).into(),
                any(dc).into(),
                carry_h.into(),
                any(gh0).into(),
                carry_c.into(),
                any(gw).into(),
                workspace.unwrap_or_default().into(),
            ],
            |v| {
                let io = cpu::Backward {
                    h: v.read(hb)?,
                    c: v.read(cb)?,
                    w_hh: v.read(w)?,
                    h0: h0b.map(|b| v.read(b)).transpose()?,
                    c0: c0b.map(|b| v.read(b)).transpose()?,
                    dh: dh.map(|b| v.read(b)).transpose()?,
                    dc: dc.map(|b| v.read(b)).transpose()?,
                };
                let gw = gw.map(|b| v.write(b)).transpose()?;
                cpu::backward(hidden, io, v.write(acts)?, v.write(carry_h)?, v.write(carry_c)?, gw);
                Ok(())
            },
            |gpu| {
                let carry = gpu::Carry {
                    h: carry_h,
                    parts,
                    c: carry_c,
                    h0_grad: gh0,
                };
                layer.backward(gpu, (h0b, c0b), (dh, dc), dgates, carry)?;
                match gw {
                    Some(gw) => layer.weight_grad(gpu, h0b, dgates, gw, workspace.ok_or(NO_WORKSPACE)?, tf32),
                    None => Ok(()),
                }
            },
        )?;
        if self.proj.requires_grad {
            s.accumulate(&self.proj, dgates)?;
        }
        if let Some(gw) = gw {
            s.accumulate(&self.w_hh, gw)?;
        }
        if let (Some(h0), Some(g)) = (want_h0, gh0) {
            s.accumulate(&h0, g)?;
        }
        if let Some(c0) = want_c0 {
            s.accumulate(&c0, carry_c)?;
        }
        Ok(())
    }
}
