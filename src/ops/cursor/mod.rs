//! The step cursor: which step of the epoch and of the run this is, kept in
//! the persistent region so that kernels read it. A captured step graph has
//! every host value baked in; what changes from step to step (which batch,
//! the dropout seed, where the loss goes) must therefore come from device
//! memory the step itself updates, and both backends read it the same way,
//! so a replayed graph, an eager GPU step and a CPU step agree.

#[cfg(test)]
mod tests;

use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::memory::Buf;
use crate::ops::{Engine, Step};
use crate::tensor::{Persistent, Shape, Tensor};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "cursor",
    source: include_str!("kernels.cu"),
    entries: &[FINISH_STEP],
};
const FINISH_STEP: &str = "finish_step";

/// `[step in epoch, global step low, global step high, 0]` as `u32`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepCursor {
    pub(crate) buf: Buf<u32>,
}

/// The dropout seed of global step `step` of a run seeded with `base`.
pub fn step_seed(base: u64, step: u64) -> u64 {
    crate::rng::SplitMix64::new(base ^ step.wrapping_mul(0xD6E8_FEB8_6659_FD93)).next_u64()
}

impl StepCursor {
    /// A cursor at step 0, in the persistent region.
    pub fn new(p: &mut Persistent<'_>) -> Result<Self> {
        Ok(Self {
            buf: p.zeros::<u32>("step cursor", Shape::new(&[4]))?,
        })
    }

    /// Sets the cursor between steps (at an epoch's start, or a resume).
    pub fn set(&self, engine: &mut Engine, step_in_epoch: u32, global_step: u64) -> Result<()> {
        let words = [step_in_epoch, global_step as u32, (global_step >> 32) as u32, 0];
        engine.write_persistent(self.buf, &words)
    }

    /// Reads `(step in epoch, global step)` back between steps.
    pub fn get(&self, engine: &mut Engine) -> Result<(u32, u64)> {
        let mut words = [0u32; 4];
        engine.read_persistent(self.buf, &mut words)?;
        Ok((words[0], words[1] as u64 | (words[2] as u64) << 32))
    }

    /// The cursor's global step, as the CPU kernels read it.
    pub(crate) fn global_step(words: &[u32]) -> u64 {
        words[1] as u64 | (words[2] as u64) << 32
    }
}

impl<'s> Step<'s> {
    /// Ends a training step: stores `loss` at the cursor's slot of `losses`
    /// (one per step of the epoch) and advances the cursor. Recorded as
    /// device work, so it runs in a replayed graph too.
    pub fn finish_step(&mut self, loss: Tensor<'s>, losses: Buf<f32>, cursor: StepCursor) -> Result<()> {
        if loss.shape().numel() != 1 {
            return Err(Error::shape(
                "finish_step",
                format!("a one-element loss, got {}", loss.shape()),
            ));
        }
        self.launch(
            &[loss.buf().into(), losses.into(), cursor.buf.into()],
            |v| {
                let (l, slots, c) = (v.read(loss.buf())?, v.write(losses)?, v.write(cursor.buf)?);
                if let Some(slot) = slots.get_mut(c[0] as usize) {
                    *slot = l[0];
                }
                let global = StepCursor::global_step(c) + 1;
                c[0] += 1;
                c[1] = global as u32;
                c[2] = (global >> 32) as u32;
                Ok(())
            },
            |gpu| {
                gpu.launch(
                    FINISH_STEP,
                    Grid::blocks(1, 32),
                    &[
                        loss.buf().into(),
                        losses.into(),
                        Arg::U32(losses.len() as u32),
                        cursor.buf.into(),
                    ],
                )
            },
        )?;
        Ok(())
    }
}
