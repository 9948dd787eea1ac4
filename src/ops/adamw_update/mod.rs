//! adamw_update: one step of AdamW over flat slices, `torch.optim.AdamW`'s
//! rule (bias-corrected moments, decoupled weight decay, not amsgrad):
//!
//! ```text
//! p = p·(1 − lr·wd)
//! m = lerp(m, g, 1 − β₁)        v = β₂·v + (1 − β₂)·g²
//! p = p − lr/(1 − β₁ᵗ) · m / (√v / √(1 − β₂ᵗ) + ε)
//! ```
//!
//! `t`, the number of this update (1 for the first), and the rate are read
//! from device memory ([`LrAt`]), so a replayed step graph counts its
//! updates and follows a schedule. `β₁ᵗ` and `β₂ᵗ` are `pow` in f64 on both
//! backends; every coefficient is formed in f64 and rounded to f32 once, and
//! the per-element arithmetic is f32 in PyTorch's order, so the CPU kernel
//! and the GPU kernel agree with PyTorch's CPU update to a few ulps.
//!
//! Zero padding between the entries of a slab stays zero: a zero gradient
//! leaves zero moments, and `0 / (0 + ε)` moves nothing — which is why `ε`
//! must be positive here.

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
    owner: "adamw_update",
    source: include_str!("kernels.cu"),
    entries: &[ADAMW_UPDATE],
};
const ADAMW_UPDATE: &str = "adamw_update";

/// AdamW's settings besides the rate. f64, as PyTorch's are: `1 − β₂`
/// formed from an f32 `β₂ = 0.999` is 1.3e-5 away from PyTorch's.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AdamwHyper {
    /// Decay of the gradient's running mean.
    pub beta1: f64,
    /// Decay of the squared gradient's running mean.
    pub beta2: f64,
    /// Added to `√v` so the step stays finite.
    pub eps: f64,
    /// Decoupled weight decay: `p *= 1 − lr·wd` before the step.
    pub weight_decay: f64,
}

impl Default for AdamwHyper {
    /// PyTorch's defaults: betas (0.9, 0.999), eps 1e-8, weight decay 1e-2.
    fn default() -> Self {
        Self {
            beta1: 0.9,
            beta2: 0.999,
            eps: 1e-8,
            weight_decay: 1e-2,
        }
    }
}

impl AdamwHyper {
    /// Betas in `[0, 1)`, a positive `eps` (zero would turn a zero
    /// gradient's update, and the slab's padding, into NaN), a weight decay
    /// of 0 or more.
    pub fn check(&self) -> Result<()> {
        for (name, beta) in [("beta1", self.beta1), ("beta2", self.beta2)] {
            if !(0.0..1.0).contains(&beta) {
                return Err(Error::Config(format!("AdamW {name} must be in [0, 1), got {beta}")));
            }
        }
        if !(self.eps.is_finite() && self.eps > 0.0) {
            return Err(Error::Config(format!("AdamW eps must be positive, got {}", self.eps)));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(Error::Config(format!(
                "AdamW weight decay must be 0 or more, got {}",
                self.weight_decay
            )));
        }
        Ok(())
    }
}

impl Step<'_> {
    /// Updates `param` in place from `grad`: one AdamW step at the rate and
    /// update number `lr` reads. `exp_avg` and `exp_avg_sq` (zeros before the
    /// first update) are the moments; all four are equally long.
    pub fn adamw_update(
        &mut self,
        param: Buf<f32>,
        grad: Buf<f32>,
        exp_avg: Buf<f32>,
        exp_avg_sq: Buf<f32>,
        lr: LrAt,
        h: AdamwHyper,
    ) -> Result<()> {
        h.check()?;
        lr.check("adamw_update")?;
        check_slabs(
            "adamw_update",
            param,
            &[("gradients", grad), ("exp_avg", exp_avg), ("exp_avg_sq", exp_avg_sq)],
        )?;
        let [table, cursor] = lr.touches();
        self.launch(
            &[
                param.into(),
                grad.into(),
                exp_avg.into(),
                exp_avg_sq.into(),
                table,
                cursor,
            ],
            |v| {
                let (rate, t) = LrAt::read(v.read(lr.table)?, v.read(lr.cursor.buf)?);
                let (p, g) = (v.write(param)?, v.read(grad)?);
                let (m, s) = (v.write(exp_avg)?, v.write(exp_avg_sq)?);
                cpu::adamw(p, g, m, s, cpu::Coefficients::new(rate, t, h));
                Ok(())
            },
            |gpu| {
                gpu.launch(
                    ADAMW_UPDATE,
                    flat_grid(param.len()),
                    &[
                        param.into(),
                        grad.into(),
                        exp_avg.into(),
                        exp_avg_sq.into(),
                        Arg::U64(param.len() as u64),
                        lr.table.into(),
                        Arg::U32(lr.table.len() as u32),
                        lr.cursor.buf.into(),
                        // The kernel's `double` parameters: 8 bytes, the bits.
                        Arg::U64(h.beta1.to_bits()),
                        Arg::U64(h.beta2.to_bits()),
                        Arg::F32(h.eps as f32),
                        Arg::U64(h.weight_decay.to_bits()),
                    ],
                )
            },
        )?;
        Ok(())
    }
}
