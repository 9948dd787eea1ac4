//! sgd_update: one step of SGD over flat slices, `torch.optim.SGD`'s rule
//! with dampening 0 (momentum, Nesterov, weight decay):
//!
//! ```text
//! d = g + wd·p            (when wd ≠ 0)
//! v = μ·v + d             (when μ ≠ 0; v starts at 0, so v₁ = d exactly)
//! d = nesterov ? d + μ·v : v
//! p = p − lr·d
//! ```
//!
//! Written for slabs: the parameters of a model in one buffer, their
//! gradients in another of the same layout, so an update is one flat launch
//! (llm.c's way). Zero padding between entries stays zero: a zero gradient
//! moves neither a zero parameter nor a zero velocity. The rate is read from
//! device memory ([`LrAt`]), so a captured step follows a schedule.
//!
//! Without momentum and weight decay the CPU arithmetic is, operation for
//! operation, the one the MNIST CNN's recorded losses were trained with
//! (`p −= lr·g`, and `v = μ·v + g; p −= lr·v`).

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::memory::{Buf, Touch};
use crate::ops::lr::LrAt;
use crate::ops::Step;
use crate::{Error, Result};

/// Its CUDA kernel, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
/// It calls the step cursor's device helpers, which come first in the
/// translation unit the device compiles.
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "sgd_update",
    source: include_str!("kernels.cu"),
    entries: &[SGD_UPDATE],
};
const SGD_UPDATE: &str = "sgd_update";

/// Blocks of 256 threads an update launches at most: enough to fill any
/// current GPU; a larger slab is covered by the kernel's grid-stride loop.
pub(crate) const MAX_BLOCKS: usize = 4096;

/// The launch shape of a flat update over `n` elements.
pub(crate) fn flat_grid(n: usize) -> Grid {
    Grid::blocks(n.div_ceil(256).min(MAX_BLOCKS), 256)
}

/// SGD's settings besides the rate (dampening is always 0).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SgdHyper {
    /// The velocity's decay; 0: no velocity.
    pub momentum: f32,
    /// Nesterov's momentum.
    pub nesterov: bool,
    /// L2 penalty added to the gradient.
    pub weight_decay: f32,
}

impl SgdHyper {
    /// Plain SGD: no momentum, no weight decay.
    pub const PLAIN: Self = Self {
        momentum: 0.0,
        nesterov: false,
        weight_decay: 0.0,
    };

    /// Refuses what `torch.optim.SGD` refuses: a negative momentum or weight
    /// decay, and Nesterov without momentum.
    pub fn check(&self) -> Result<()> {
        if !(self.momentum.is_finite() && self.momentum >= 0.0) {
            return Err(Error::Config(format!(
                "SGD momentum must be 0 or more, got {}",
                self.momentum
            )));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(Error::Config(format!(
                "SGD weight decay must be 0 or more, got {}",
                self.weight_decay
            )));
        }
        if self.nesterov && self.momentum == 0.0 {
            return Err(Error::Config(
                "Nesterov momentum needs a momentum above 0; set one or turn Nesterov off".into(),
            ));
        }
        Ok(())
    }
}

/// `param` and each of `others` (name, buffer) are equally long and share
/// no byte: an update reads and writes them element by element.
pub(crate) fn check_slabs(op: &'static str, param: Buf<f32>, others: &[(&'static str, Buf<f32>)]) -> Result<()> {
    for &(name, b) in others {
        if b.len() != param.len() {
            return Err(Error::shape(
                op,
                format!(
                    "{name} as long as the parameters ({} elements), got {}",
                    param.len(),
                    b.len()
                ),
            ));
        }
    }
    let all = std::iter::once(("parameters", param)).chain(others.iter().copied());
    for (i, (a, x)) in all.clone().enumerate() {
        for (b, y) in all.clone().skip(i + 1) {
            let (x, y) = (x.byte_range(), y.byte_range());
            if !x.is_empty() && !y.is_empty() && x.start < y.end && y.start < x.end {
                return Err(Error::shape(
                    op,
                    format!("{a} and {b} in separate buffers, but they overlap"),
                ));
            }
        }
    }
    Ok(())
}

impl Step<'_> {
    /// Updates `param` in place from `grad`: one SGD step at the rate `lr`
    /// reads. `velocity` (zeros before the first update) is required when
    /// `h.momentum > 0` and refused otherwise; all three are equally long.
    pub fn sgd_update(
        &mut self,
        param: Buf<f32>,
        grad: Buf<f32>,
        velocity: Option<Buf<f32>>,
        lr: LrAt,
        h: SgdHyper,
    ) -> Result<()> {
        h.check()?;
        lr.check("sgd_update")?;
        match (velocity, h.momentum > 0.0) {
            (Some(v), true) => check_slabs("sgd_update", param, &[("gradients", grad), ("velocity", v)])?,
            (None, false) => check_slabs("sgd_update", param, &[("gradients", grad)])?,
            (None, true) => {
                return Err(Error::Config(format!(
                    "sgd_update: momentum {} needs a velocity buffer",
                    h.momentum
                )))
            }
            (Some(_), false) => {
                return Err(Error::Config(
                    "sgd_update: a velocity buffer without momentum would never be read; pass none".into(),
                ))
            }
        }
        let [table, cursor] = lr.touches();
        let touches: [Touch; 5] = [
            param.into(),
            grad.into(),
            table,
            cursor,
            velocity.unwrap_or_default().into(),
        ];
        let declared = if velocity.is_some() {
            &touches[..]
        } else {
            &touches[..4]
        };
        self.launch(
            declared,
            |v| {
                let (rate, _) = LrAt::read(v.read(lr.table)?, v.read(lr.cursor.buf)?);
                let (p, g) = (v.write(param)?, v.read(grad)?);
                let vel = match velocity {
                    Some(b) => Some(v.write(b)?),
                    None => None,
                };
                cpu::sgd(p, g, vel, rate, h);
                Ok(())
            },
            |gpu| {
                gpu.launch(
                    SGD_UPDATE,
                    flat_grid(param.len()),
                    &[
                        param.into(),
                        grad.into(),
                        velocity.map_or(Arg::Null, Into::into),
                        Arg::U64(param.len() as u64),
                        lr.table.into(),
                        Arg::U32(lr.table.len() as u32),
                        lr.cursor.buf.into(),
                        Arg::F32(h.momentum),
                        Arg::U32(h.nesterov as u32),
                        Arg::F32(h.weight_decay),
                    ],
                )
            },
        )?;
        Ok(())
    }
}
