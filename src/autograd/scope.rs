//! The step scope on an arena, for any node set: what `Arena::step`,
//! `planned_step` and `capture_step` run (the op registry declares those
//! methods for its own nodes, `ops/step.rs`). The scope lives with
//! autograd, which owns the tape, and reaches the arena only through its
//! byte-level services; the arena keeps the tape between steps as opaque
//! host state, so recording allocates nothing once the first step has sized
//! its vectors.

use super::tape::{Candidate, Tape};
use super::{Recorded, Step};
use crate::memory::{Arena, StepGraph};
use crate::Result;

/// One step on `arena` (see `Arena::step`).
pub(crate) fn step<N: Recorded, R>(
    arena: &mut Arena,
    body: impl for<'s> FnOnce(&mut Step<'s, N>) -> Result<R>,
) -> Result<R> {
    let mut tape: Box<Tape<N>> = arena.take_host_state();
    tape.clear();
    let result = arena.run_step(|arena| body(&mut Step::new(arena, &mut tape)));
    arena.keep_host_state(tape);
    result
}

/// One step of kind `key` on its memory plan (see `Arena::planned_step`).
pub(crate) fn planned_step<N: Recorded, R>(
    arena: &mut Arena,
    key: u32,
    body: impl for<'s> FnOnce(&mut Step<'s, N>) -> Result<R>,
) -> Result<R> {
    arena.run_planned(key, |arena| step(arena, body))
}

/// One step's device work recorded as a graph (see `Arena::capture_step`).
pub(crate) fn capture_step<N: Recorded>(
    arena: &mut Arena,
    key: Option<u32>,
    body: impl for<'s> FnOnce(&mut Step<'s, N>) -> Result<()>,
) -> Result<StepGraph> {
    arena.run_captured(|arena| match key {
        Some(key) => planned_step(arena, key, body),
        None => step(arena, body),
    })
}

/// The candidates the steps from now on recompute (see
/// `Arena::set_recomputed`).
pub(crate) fn set_recomputed<N: Recorded>(arena: &mut Arena, candidates: &[u32], transient_chains: bool) {
    let mut tape: Box<Tape<N>> = arena.take_host_state();
    tape.transient_chains = transient_chains;
    tape.dropped = candidates.to_vec();
    tape.dropped.sort_unstable();
    tape.dropped.dedup();
    arena.keep_host_state(tape);
}

/// The candidates for recomputation the last step saw, in forward order.
pub(crate) fn recompute_candidates<N: Recorded>(arena: &mut Arena) -> Vec<Candidate> {
    let tape: Box<Tape<N>> = arena.take_host_state();
    let all = tape.candidates.clone();
    arena.keep_host_state(tape);
    all
}
