//! adagrad_update: one step of Adagrad over flat slices, `torch.optim.Adagrad`'s
//! rule (dense gradients, not `maximize`), update `t` (1 for the first):
//!
//! ```text
//! d = g + wd·p                      (when wd ≠ 0)
//! clr = lr / (1 + (t − 1)·lr_decay)
//! sum = sum + d·d
//! p = p + (−clr)·d / (√sum + ε)
//! ```
//!
//! `t` and the rate are read from device memory ([`LrAt`]), so a replayed
//! step graph counts its updates and follows a schedule. `clr` is formed in
//! f64 and rounded to f32 once, as PyTorch forms it from Python floats; the
//! per-element arithmetic is f32 in PyTorch's CPU order (the weight decay
//! fused, as its vector path does), so both kernels agree with PyTorch's
//! CPU update to a few ulps.
//!
//! Zero padding between the entries of a slab stays zero: a zero gradient
//! adds nothing to the sum and `0 / (√sum + ε)` moves nothing, which is why
//! `ε` must be positive here (PyTorch allows 0, which turns an element
//! whose sum is still 0 into NaN).

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{Arg, KernelSource};
use crate::memory::Buf;
use crate::ops::lr::LrAt;
use crate::ops::sgd_update::{check_slabs, flat_grid};
use crate::ops::Step;
use crate::{Error, Result};

/// Its CUDA kernel, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
/// It calls the step cursor's device helpers, which come first in the
/// translation unit the device compiles.
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "adagrad_update",
    source: include_str!("kernels.cu"),
    entries: &[ADAGRAD_UPDATE],
};
const ADAGRAD_UPDATE: &str = "adagrad_update";

/// Adagrad's settings besides the rate and the accumulator's starting
/// value (which is the state's, set when it is made). f64, as PyTorch's are.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdagradHyper {
    /// The rate at update `t` is `lr / (1 + (t − 1)·lr_decay)`.
    pub lr_decay: f64,
    /// L2 penalty added to the gradient.
    pub weight_decay: f64,
    /// Added to `√sum` so the step stays finite.
    pub eps: f64,
}

impl Default for AdagradHyper {
    /// PyTorch's defaults: no rate decay, no weight decay, eps 1e-10.
    fn default() -> Self {
        Self {
            lr_decay: 0.0,
            weight_decay: 0.0,
            eps: 1e-10,
        }
    }
}

impl AdagradHyper {
    /// A rate decay and weight decay of 0 or more (PyTorch's bounds) and a
    /// positive `eps` (zero would turn a zero gradient's update, and the
    /// slab's padding, into NaN).
    pub fn check(&self) -> Result<()> {
        for (name, value) in [("lr decay", self.lr_decay), ("weight decay", self.weight_decay)] {
            if !(value.is_finite() && value >= 0.0) {
                return Err(Error::Config(format!("Adagrad {name} must be 0 or more, got {value}")));
            }
        }
        // Below f32's smallest normal it would round to a denormal or to 0.
        if !(self.eps.is_finite() && self.eps >= f32::MIN_POSITIVE as f64) {
            return Err(Error::Config(format!(
                "Adagrad eps must be positive (at least {:e}), got {:e}",
                f32::MIN_POSITIVE,
                self.eps
            )));
        }
        Ok(())
    }

    /// `−lr / (1 + (t − 1)·lr_decay)` in f64, rounded to f32 once.
    pub(crate) fn neg_clr(&self, lr: f32, t: u64) -> f32 {
        -((lr as f64 / (1.0 + (t as f64 - 1.0) * self.lr_decay)) as f32)
    }
}

impl Step<'_> {
    /// Updates `param` in place from `grad`: one Adagrad step at the rate
    /// and update number `lr` reads. `sum` (the accumulator, holding the
    /// initial value before the first update) is as long as both.
    pub fn adagrad_update(
        &mut self,
        param: Buf<f32>,
        grad: Buf<f32>,
        sum: Buf<f32>,
        lr: LrAt,
        h: AdagradHyper,
    ) -> Result<()> {
        h.check()?;
        lr.check("adagrad_update")?;
        check_slabs("adagrad_update", param, &[("gradients", grad), ("sum", sum)])?;
        let [table, cursor] = lr.touches();
        self.launch(
            &[param.into(), grad.into(), sum.into(), table, cursor],
            |v| {
                let (rate, t) = LrAt::read(v.read(lr.table)?, v.read(lr.cursor.buf)?);
                let (p, g, s) = (v.write(param)?, v.read(grad)?, v.write(sum)?);
                cpu::adagrad(p, g, s, h.neg_clr(rate, t), h.weight_decay as f32, h.eps as f32);
                Ok(())
            },
            |gpu| {
                gpu.launch(
                    ADAGRAD_UPDATE,
                    flat_grid(param.len()),
                    &[
                        param.into(),
                        grad.into(),
                        sum.into(),
                        Arg::U64(param.len() as u64),
                        lr.table.into(),
                        Arg::U32(lr.table.len() as u32),
                        lr.cursor.buf.into(),
                        // The kernel's `double` parameter: 8 bytes, the bits.
                        Arg::U64(h.lr_decay.to_bits()),
                        Arg::F32(h.weight_decay as f32),
                        Arg::F32(h.eps as f32),
                    ],
                )
            },
        )?;
        Ok(())
    }
}
