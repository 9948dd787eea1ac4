//! Where steps run: an arena and the tape its steps record on, kept
//! together and typed by the node set (`bumpgrad::Engine` is the one over
//! the op registry's nodes). The tape lives here between steps, so its
//! vectors keep the capacity the first step gave them and a step allocates
//! nothing on the heap; the arena stays bytes only.

use super::tape::{Candidate, Tape};
use super::{Recorded, Step};
use crate::backend::{Device, Workers};
use crate::memory::{Arena, Buf, Element, Persistent, StepGraph};
use crate::Result;

/// An arena and the tape of its steps (see the module documentation).
pub struct Engine<N: Recorded> {
    arena: Arena,
    tape: Tape<N>,
}

impl<N: Recorded> Engine<N> {
    /// Makes the device's one allocation of `capacity` bytes (rounded up
    /// to the alignment).
    pub fn new(device: Device, capacity: usize) -> Result<Self> {
        Ok(Self::on(Arena::new(device, capacity)?))
    }

    /// An engine that allocates nothing and runs no kernel, shaped like one
    /// on `device`: running a step on it measures the bytes the step needs
    /// and plans them.
    pub fn planning(device: &Device, capacity: Option<usize>) -> Self {
        Self::on(Arena::dry(device, capacity))
    }

    /// A planning engine shaped like this one (same device and sizes),
    /// without a capacity: running a step on it measures what the step
    /// needs with this engine's convolution choices.
    pub fn planning_twin(&self) -> Self {
        Self::on(self.arena.dry_twin())
    }

    fn on(arena: Arena) -> Self {
        Self {
            arena,
            tape: Tape::default(),
        }
    }

    /// The arena: its regions, plans and statistics.
    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    pub fn arena_mut(&mut self) -> &mut Arena {
        &mut self.arena
    }

    /// The device's workers; run a training loop through them (see [`Workers`]).
    pub fn workers(&self) -> Workers {
        self.arena.workers()
    }

    /// Allocates in the persistent region. Allowed whenever no step runs
    /// (`&mut self` proves it): the step region is then empty.
    pub fn persistent(&mut self) -> Persistent<'_> {
        self.arena.persistent()
    }

    /// Runs one step. Everything the step allocates is released when `body`
    /// returns, successfully or not. The higher-ranked `'s` keeps every
    /// `Tensor<'s>` inside `body`: only `R`, which cannot name `'s`, escapes.
    pub fn step<R>(&mut self, body: impl for<'s> FnOnce(&mut Step<'s, N>) -> Result<R>) -> Result<R> {
        step_on(&mut self.arena, &mut self.tape, body)
    }

    /// Runs one step of kind `key` on the memory plan of that kind: every
    /// buffer at its planned offset, the bytes of dead buffers reused. The
    /// first step of a kind runs bump-allocated and traced, and its plan is
    /// made from the trace; a step that leaves its plan is finished above
    /// it and re-planned ([`Arena::take_replanned`] says which).
    pub fn planned_step<R>(&mut self, key: u32, body: impl for<'s> FnOnce(&mut Step<'s, N>) -> Result<R>) -> Result<R> {
        let tape = &mut self.tape;
        self.arena.run_planned(key, |arena| step_on(arena, tape, body))
    }

    /// Records one step's device work as a CUDA graph, without running it:
    /// replay it with [`Engine::replay_step`] (once right away, to perform
    /// this step). `body` runs as a normal step on the host (the tape, the
    /// bump allocations); it must not read from the device. During capture
    /// the driver refuses any device allocation, so a graph that captures
    /// at all allocates nothing when replayed either.
    pub fn capture_step(
        &mut self,
        key: Option<u32>,
        body: impl for<'s> FnOnce(&mut Step<'s, N>) -> Result<()>,
    ) -> Result<StepGraph> {
        let tape = &mut self.tape;
        self.arena.run_captured(|arena| match key {
            Some(key) => arena.run_planned(key, |arena| step_on(arena, tape, body)),
            None => step_on(arena, tape, body),
        })
    }

    /// Queues one replay of a step captured on this engine. Refused if the
    /// persistent region has grown since: the graph's step addresses would
    /// then overlap it.
    pub fn replay_step(&mut self, graph: &StepGraph) -> Result<()> {
        Ok(self.arena.replay_step(graph)?)
    }

    /// Which candidates for recomputation (convolution outputs, numbered in
    /// forward order from 0) the steps from now on recompute in backward
    /// rather than keep: what a memory budget chose, and whether chains of
    /// them are remade for each reader rather than held (see the tape's
    /// `transient_chains`). Set before the first step (it allocates; steps
    /// then do not).
    pub fn set_recomputed(&mut self, candidates: &[u32], transient_chains: bool) {
        let tape = &mut self.tape;
        tape.transient_chains = transient_chains;
        tape.dropped = candidates.to_vec();
        tape.dropped.sort_unstable();
        tape.dropped.dedup();
    }

    /// The candidates for recomputation the last step saw, in forward
    /// order.
    pub fn recompute_candidates(&self) -> Vec<Candidate> {
        self.tape.candidates.clone()
    }

    /// Overwrites a persistent buffer between steps (`&mut self`: no step
    /// runs): how the loop hands a new epoch's order or a cursor to kernels.
    pub fn write_persistent<T: Element>(&mut self, buf: Buf<T>, values: &[T]) -> Result<()> {
        Ok(self.arena.write_persistent(buf, values)?)
    }

    /// Copies a persistent buffer to the host between steps.
    pub fn read_persistent<T: Element>(&mut self, buf: Buf<T>, out: &mut [T]) -> Result<()> {
        Ok(self.arena.read_persistent(buf, out)?)
    }

    /// Sums a persistent buffer over the data-parallel group's ranks, in
    /// place, between steps; every rank must call it in the same order.
    pub fn all_reduce_persistent(&mut self, buf: Buf<f32>) -> Result<()> {
        Ok(self.arena.all_reduce_persistent(buf)?)
    }
}

/// One step on `arena`, recording on `tape`: the step region is empty when
/// it starts and reset to the mark when it returns.
fn step_on<N: Recorded, R>(
    arena: &mut Arena,
    tape: &mut Tape<N>,
    body: impl for<'s> FnOnce(&mut Step<'s, N>) -> Result<R>,
) -> Result<R> {
    tape.clear();
    arena.run_step(|arena| body(&mut Step::new(arena, tape)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::FloatBuf;

    /// A node set of one node that does nothing: enough to record.
    #[derive(Clone, Copy, Debug)]
    struct Noted;

    impl Recorded for Noted {
        type Recipe = ();
        fn backward(self, _: &mut Step<'_, Self>) -> Result<()> {
            Ok(())
        }
        fn reads(_: &()) -> [Option<u32>; 2] {
            [None; 2]
        }
        fn recompute(_: (), _: &mut Step<'_, Self>) -> Result<FloatBuf> {
            Err(crate::backend::BackendError::Internal("nothing to recompute").into())
        }
    }

    /// What keeps a step free of heap allocations: the tape is the
    /// engine's, cleared and never freed, so a later step records into the
    /// vectors the first one grew.
    #[test]
    fn the_tape_keeps_its_capacity_from_one_step_to_the_next() {
        let mut engine = Engine::<Noted>::new(Device::cpu(1).unwrap(), 1 << 16).unwrap();
        let mut capacities = Vec::new();
        for nodes in [3, 2] {
            engine
                .step(|s| {
                    (0..nodes).for_each(|_| s.record(Noted));
                    Ok(())
                })
                .unwrap();
            assert_eq!(
                engine.tape.nodes.len(),
                nodes,
                "this step's nodes, the last step's cleared"
            );
            capacities.push(engine.tape.nodes.capacity());
        }
        assert!(capacities[0] >= 3);
        assert_eq!(capacities[0], capacities[1], "the same vector, not a new one");
    }
}
