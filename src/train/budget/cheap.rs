//! What a step recomputes with no budget given ([`Recompute::Cheap`]): the
//! outputs backward can make again without a multiply-add, where dropping
//! them lowers the step's peak.
//!
//! A residual block's output (batch norm, add, relu) is kept from forward
//! for the next convolution's weight gradient and for its own relu. Made
//! again in backward it costs one elementwise pass over its two inputs,
//! which backward keeps anyway (the convolution output under the batch
//! norm and the shortcut), like the dozens of such passes a step already
//! makes; kept, it is up to a fifth of a ResNet's step. Which ones to drop
//! is read off dry runs, not assumed: dropping one whose chain of inputs
//! backward would rebuild all at once where the step peaks saves nothing,
//! and costs time.
//!
//! [`Recompute::Cheap`]: crate::train::Recompute::Cheap

use crate::train::pipeline::{ArenaNeeds, Measure, StepChoice};
use crate::Result;

/// The step `plain` (measured with nothing recomputed) with the cheap
/// candidates (no multiply-adds) dropped that lower its peak, chains held,
/// measured through `step`: greedily, the drop that lowers the peak most
/// (the fewest bytes among equals) until none lowers it; `plain` itself
/// where none helps. Each drop lowered the peak when it was taken (the
/// tests check, on small ResNets, that none can then be kept again without
/// raising it). Greedy, it stops where only two drops together
/// would lower the peak (two peaks of equal height); on the ResNets it
/// ends within 1% of the bound the budget's program proves for a step as
/// small (ResNet-50 at batch 128: 1.73 GiB from 2.54). At most a dry run
/// per cheap candidate per drop (ResNet-50: 16 candidates, a third of a
/// second on one core).
pub(crate) fn cheap_floor(step: &Measure<'_>, plain: ArenaNeeds) -> Result<ArenaNeeds> {
    let mut cheap: Vec<u32> = (0..plain.candidates.len() as u32)
        .filter(|&i| plain.candidates[i as usize].multiply_adds == 0)
        .collect();
    cheap.sort_by_key(|&i| plain.candidates[i as usize].bytes);
    let mut best = plain;
    loop {
        let mut next: Option<ArenaNeeds> = None;
        for &c in &cheap {
            let Err(at) = best.dropped.binary_search(&c) else {
                continue;
            };
            let mut trial = best.dropped.clone();
            trial.insert(at, c);
            let needs = step(&StepChoice::held(&trial))?;
            let lowest = next.as_ref().map_or(best.step_bytes, |n| n.step_bytes);
            if needs.step_bytes < lowest {
                next = Some(needs);
            }
        }
        match next {
            Some(n) => best = n,
            None => break,
        }
    }
    Ok(best)
}
