//! The step scope on an arena: `Arena::step`, `planned_step` and
//! `capture_step`. They live with autograd, which owns the tape, and reach
//! the arena only through its byte-level services; the arena keeps the tape
//! between steps as opaque host state, so recording allocates nothing once
//! the first step has sized its vectors.

use super::tape::{Candidate, Tape};
use super::Step;
use crate::memory::{Arena, StepGraph};
use crate::Result;

impl Arena {
    /// Runs one step. Everything the step allocates is released when `body`
    /// returns, successfully or not. The higher-ranked `'s` keeps every
    /// `Tensor<'s>` inside `body`: only `R`, which cannot name `'s`, escapes.
    pub fn step<R>(&mut self, body: impl for<'s> FnOnce(&mut Step<'s>) -> Result<R>) -> Result<R> {
        let mut tape: Box<Tape> = self.take_host_state();
        tape.clear();
        let result = self.run_step(|arena| body(&mut Step::new(arena, &mut tape)));
        self.keep_host_state(tape);
        result
    }

    /// Runs one step of kind `key` on the memory plan of that kind: every
    /// buffer at its planned offset, the bytes of dead buffers reused. The
    /// first step of a kind runs bump-allocated and traced, and its plan is
    /// made from the trace; a step that leaves its plan is finished above
    /// it and re-planned ([`Arena::take_replanned`] says which).
    pub fn planned_step<R>(&mut self, key: u32, body: impl for<'s> FnOnce(&mut Step<'s>) -> Result<R>) -> Result<R> {
        self.run_planned(key, |arena| arena.step(body))
    }

    /// Records one step's device work as a CUDA graph, without running it:
    /// replay it with [`Arena::replay_step`] (once right away, to perform
    /// this step). `body` runs as a normal step on the host (the tape, the
    /// bump allocations); it must not read from the device. During capture
    /// the driver refuses any device allocation, so a graph that captures
    /// at all allocates nothing when replayed either.
    pub fn capture_step(
        &mut self,
        key: Option<u32>,
        body: impl for<'s> FnOnce(&mut Step<'s>) -> Result<()>,
    ) -> Result<StepGraph> {
        self.run_captured(|arena| match key {
            Some(key) => arena.planned_step(key, body),
            None => arena.step(body),
        })
    }

    /// Which candidates for recomputation (convolution outputs, numbered in
    /// forward order from 0) the steps from now on recompute in backward
    /// rather than keep: what a memory budget chose, and whether chains of
    /// them are remade for each reader rather than held (see
    /// `Tape::transient_chains`). Set before the first step (it allocates;
    /// steps then do not).
    pub fn set_recomputed(&mut self, candidates: &[u32], transient_chains: bool) {
        let mut tape: Box<Tape> = self.take_host_state();
        tape.transient_chains = transient_chains;
        tape.dropped = candidates.to_vec();
        tape.dropped.sort_unstable();
        tape.dropped.dedup();
        self.keep_host_state(tape);
    }

    /// The candidates for recomputation the last step saw, in forward
    /// order.
    pub fn recompute_candidates(&mut self) -> Vec<Candidate> {
        let tape: Box<Tape> = self.take_host_state();
        let all = tape.candidates.clone();
        self.keep_host_state(tape);
        all
    }
}
