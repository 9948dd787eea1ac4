//! Where steps run: a runtime (the device), an arena (its bookkeeping) and
//! the tape its steps record on, kept together and typed by the node set
//! (`bumpgrad::Engine` is the one over the op registry's nodes), with
//! whether its steps run or only plan. A step is assembled from these
//! explicitly ([`Step::new`]): the runtime, the arena's step memory, the
//! tape, the runtime's compute policy (a copy) and the mode.
//!
//! The tape lives here between steps, so its vectors keep the capacity the
//! first step gave them and a step allocates nothing on the heap. Captured
//! steps are in `capture.rs`.

use super::tape::{Candidate, Tape};
use super::{Recorded, Step};
use crate::backend::{Device, Mode, Runtime};
use crate::memory::{Arena, Buf, Element, POISON};
use crate::tensor::Persistent;
use crate::Result;

/// A runtime, its arena and the tape of their steps (see the module
/// documentation).
pub struct Engine<N: Recorded> {
    pub(super) runtime: Runtime,
    pub(super) arena: Arena,
    pub(super) tape: Tape<N>,
    pub(super) mode: Mode,
}

impl<N: Recorded> Engine<N> {
    /// Makes the device's one allocation of `capacity` bytes (rounded up
    /// to the alignment).
    pub fn new(device: Device, capacity: usize) -> Result<Self> {
        let arena = Arena::new(capacity);
        let runtime = Runtime::new(device, arena.capacity())?;
        Ok(Self::of(runtime, arena, Mode::Run))
    }

    /// An engine whose steps only plan: shaped like one on `device`, it
    /// allocates nothing and runs no kernel, and running a step on it
    /// measures the bytes the step needs and plans them. `capacity`: the
    /// arena to plan within (`None`: unbounded).
    pub fn planning(device: &Device, capacity: Option<usize>) -> Self {
        let arena = capacity.map_or_else(Arena::unbounded, Arena::new);
        Self::of(Runtime::planning(device), arena, Mode::Plan)
    }

    /// A planning engine shaped like this one (same device and sizes),
    /// unbounded: running a step on it measures what the step needs with
    /// this engine's convolution choices.
    pub(crate) fn planning_twin(&self) -> Self {
        Self::of(self.runtime.planning_twin(), Arena::unbounded(), Mode::Plan)
    }

    fn of(runtime: Runtime, arena: Arena, mode: Mode) -> Self {
        Self {
            runtime,
            arena,
            tape: Tape::default(),
            mode,
        }
    }

    /// The arena: its regions, plans and statistics.
    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    /// The arena, to adopt plans or set poisoning between steps.
    pub fn arena_mut(&mut self) -> &mut Arena {
        &mut self.arena
    }

    /// The device: its kernels, convolution tuning, op timing, collectives.
    pub fn runtime(&self) -> &Runtime {
        &self.runtime
    }

    /// The device, to change its compute policy between steps.
    pub fn runtime_mut(&mut self) -> &mut Runtime {
        &mut self.runtime
    }

    /// Whether its steps run or only plan.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Allocates in the persistent region. Allowed whenever no step runs
    /// (`&mut self` proves it): the step region is then empty.
    pub fn persistent(&mut self) -> Persistent<'_> {
        Persistent::new(&mut self.arena, &mut self.runtime, self.mode)
    }

    /// Runs one step. Everything the step allocates is released when `body`
    /// returns, successfully or not. The higher-ranked `'s` keeps every
    /// `Tensor<'s>` inside `body`: only `R`, which cannot name `'s`, escapes.
    pub fn step<R>(&mut self, body: impl for<'s> FnOnce(&mut Step<'s, N>) -> Result<R>) -> Result<R> {
        let Self {
            runtime,
            arena,
            tape,
            mode,
        } = self;
        step_on(runtime, arena, tape, *mode, body)
    }

    /// Runs one step of kind `key` on the memory plan of that kind: every
    /// buffer at its planned offset, the bytes of dead buffers reused. The
    /// first step of a kind runs bump-allocated and traced, and its plan is
    /// made from the trace; a step that leaves its plan is finished above
    /// it and re-planned (the arena lists which until they are taken).
    pub fn planned_step<R>(&mut self, key: u32, body: impl for<'s> FnOnce(&mut Step<'s, N>) -> Result<R>) -> Result<R> {
        let Self {
            runtime,
            arena,
            tape,
            mode,
        } = self;
        arena.run_planned(key, |arena| step_on(runtime, arena, tape, *mode, body))
    }

    /// Which candidates for recomputation (convolution outputs, numbered in
    /// forward order from 0) the steps from now on recompute in backward
    /// rather than keep: what a memory budget chose, and whether chains of
    /// them are remade for each reader rather than held (see the tape's
    /// `transient_chains`). Set before the first step (it allocates; steps
    /// then do not).
    pub(crate) fn set_recomputed(&mut self, candidates: &[u32], transient_chains: bool) {
        let tape = &mut self.tape;
        tape.transient_chains = transient_chains;
        tape.dropped = candidates.to_vec();
        tape.dropped.sort_unstable();
        tape.dropped.dedup();
    }

    /// The candidates for recomputation the last step saw, in forward
    /// order.
    pub(crate) fn recompute_candidates(&self) -> Vec<Candidate> {
        self.tape.candidates.clone()
    }

    /// Overwrites a persistent buffer between steps (`&mut self`: no step
    /// runs): how the loop hands a new epoch's order or a cursor to kernels.
    pub fn write_persistent<T: Element>(&mut self, buf: Buf<T>, values: &[T]) -> Result<()> {
        self.arena.check_persistent(buf)?;
        Ok(self.runtime.backend().upload(buf, values)?)
    }

    /// Copies a persistent buffer to the host between steps.
    pub fn read_persistent<T: Element>(&mut self, buf: Buf<T>, out: &mut [T]) -> Result<()> {
        self.arena.check_persistent(buf)?;
        Ok(self.runtime.backend().download(buf, out)?)
    }

    /// Sums a persistent buffer over the data-parallel group's ranks, in
    /// place, between steps; every rank must call it in the same order.
    pub(crate) fn all_reduce_persistent(&mut self, buf: Buf<f32>) -> Result<()> {
        self.arena.check_persistent(buf)?;
        let backend = self.runtime.backend();
        backend.all_reduce_sum(buf)?;
        Ok(backend.join_collectives()?)
    }
}

/// One step assembled from its parts: the step region is empty when it
/// starts and reset to the mark when it returns, successfully or not (and
/// poisoned, when the arena asks).
fn step_on<N: Recorded, R>(
    runtime: &mut Runtime,
    arena: &mut Arena,
    tape: &mut Tape<N>,
    mode: Mode,
    body: impl for<'s> FnOnce(&mut Step<'s, N>) -> Result<R>,
) -> Result<R> {
    tape.clear();
    arena.begin_step();
    let policy = runtime.policy();
    let result = body(&mut Step::new(runtime, arena, tape, policy, mode));
    let poisoned = match arena.end_step() {
        Some(used) => runtime.backend().fill(used, POISON),
        None => Ok(()),
    };
    let r = result?;
    poisoned?;
    Ok(r)
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

    /// Runs one step of `body` on `engine` (a buffer of eight floats).
    fn on_eight<R>(engine: &mut Engine<Noted>, body: impl FnOnce(&mut Step<'_, Noted>, Buf<f32>) -> Result<R>) -> R {
        engine
            .step(|s| {
                let buf = s.alloc::<f32>("eight", crate::base::Shape::new(&[8]))?;
                body(s, buf)
            })
            .unwrap()
    }

    #[test]
    fn poison_step_turns_a_stale_read_into_nan() {
        for poison in [false, true] {
            let mut engine = Engine::<Noted>::new(Device::cpu(1).unwrap(), 1 << 16).unwrap();
            engine.arena_mut().set_poison_step(poison);
            on_eight(&mut engine, |s, x| Ok(s.uses(&[x.into()]).upload(x, &[1.5; 8])?));
            // The planted bug: a step reads a buffer it never wrote, at the
            // address the last step's input had.
            let stale = on_eight(&mut engine, |s, never_written| {
                let mut out = [0.0; 8];
                s.uses(&[never_written.into()]).download(never_written, &mut out)?;
                Ok(out)
            });
            if poison {
                assert!(stale.iter().all(|v| v.is_nan()), "{stale:?}");
            } else {
                assert_eq!(stale, [1.5; 8], "without poison the last step's values leak through");
            }
        }
    }

    /// A planning engine's persistent region keeps no values, and says so;
    /// a running one's does.
    #[test]
    fn whether_values_are_kept_is_the_engines_mode() {
        let device = Device::cpu(1).unwrap();
        let mut planning = Engine::<Noted>::planning(&device, None);
        assert_eq!(planning.mode(), Mode::Plan);
        assert!(!planning.persistent().holds_values());
        let mut running = Engine::<Noted>::new(device, 1 << 16).unwrap();
        assert_eq!(running.mode(), Mode::Run);
        assert!(running.persistent().holds_values());
    }
}
