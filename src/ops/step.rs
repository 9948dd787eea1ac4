//! The step users hold, `bumpgrad::Step<'s>`: autograd's step over the
//! registry's node set, and the arena methods that run one. Autograd's
//! scope (`autograd/scope.rs`) does the work for any node set; these name
//! ours, so that a step's closure needs no type annotation.

use super::tape::Node;
use crate::autograd::{self, Candidate};
use crate::memory::{Arena, StepGraph};
use crate::Result;

/// One step of work on an arena: the scope in which tensors exist. `'s`
/// brands every tensor made here; ops record on its tape (see
/// [`autograd::Step`]).
pub type Step<'s> = autograd::Step<'s, Node>;

impl Arena {
    /// Runs one step. Everything the step allocates is released when `body`
    /// returns, successfully or not. The higher-ranked `'s` keeps every
    /// `Tensor<'s>` inside `body`: only `R`, which cannot name `'s`, escapes.
    pub fn step<R>(&mut self, body: impl for<'s> FnOnce(&mut Step<'s>) -> Result<R>) -> Result<R> {
        autograd::scope::step(self, body)
    }

    /// Runs one step of kind `key` on the memory plan of that kind: every
    /// buffer at its planned offset, the bytes of dead buffers reused. The
    /// first step of a kind runs bump-allocated and traced, and its plan is
    /// made from the trace; a step that leaves its plan is finished above
    /// it and re-planned ([`Arena::take_replanned`] says which).
    pub fn planned_step<R>(&mut self, key: u32, body: impl for<'s> FnOnce(&mut Step<'s>) -> Result<R>) -> Result<R> {
        autograd::scope::planned_step(self, key, body)
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
        autograd::scope::capture_step(self, key, body)
    }

    /// Which candidates for recomputation (convolution outputs, numbered in
    /// forward order from 0) the steps from now on recompute in backward
    /// rather than keep: what a memory budget chose, and whether chains of
    /// them are remade for each reader rather than held (see the tape's
    /// `transient_chains`). Set before the first step (it allocates; steps
    /// then do not).
    pub fn set_recomputed(&mut self, candidates: &[u32], transient_chains: bool) {
        autograd::scope::set_recomputed::<Node>(self, candidates, transient_chains);
    }

    /// The candidates for recomputation the last step saw, in forward
    /// order.
    pub fn recompute_candidates(&mut self) -> Vec<Candidate> {
        autograd::scope::recompute_candidates::<Node>(self)
    }
}
