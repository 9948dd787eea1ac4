//! The arena: the bookkeeping of one allocation per device, a persistent
//! region, a mark, and a step region that is reset to the mark after every
//! step.
//!
//! ```text
//!  0                    mark                      top            capacity
//!  | persistent region   | step region: bump ---> |   free        |
//!  | params, optimizer,  | activations, grads,    |               |
//!  | data set            | workspaces of 1 step   |               |
//! ```
//!
//! Invariants:
//! - every allocation starts on a 256-byte boundary and never overlaps a live
//!   allocation: the bump pointer only grows until a reset;
//! - the step region is empty whenever no step runs, so the persistent region
//!   may grow between steps (the mark moves up with it);
//! - a step's tensors cannot outlive the step: `Engine::step` hands them a
//!   brand that cannot escape its closure, and only then resets.
//!
//! The arena is offsets and figures only: it holds no memory and runs
//! nothing. The runtime owns the device's bytes and writes them; autograd's
//! engine pairs the two and runs steps, through the crate-only services
//! here: step allocation, a step between [`Arena::begin_step`] and
//! [`Arena::end_step`] (which says what to poison), on a plan
//! ([`Arena::run_planned`], `placement.rs`), and declared ranges.

use super::plan::{StepPlan, Trace};
use super::ArenaError;
use crate::base::{align_up, Buf, Element, FloatBuf, Shape};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinguishes arenas, so a step graph is only replayed on its own.
static NEXT_ARENA: AtomicU64 = AtomicU64::new(1);

/// Which side of the mark an allocation was made on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Region {
    /// Below the mark: what lives as long as the run.
    Persistent,
    /// Above the mark: one step's buffers, gone at its reset.
    Step,
}

impl fmt::Display for Region {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Persistent => "persistent",
            Self::Step => "step",
        })
    }
}

/// Memory statistics, public API: the CLI prints them and `--json` emits them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ArenaStats {
    /// The arena's bytes: its one allocation.
    pub capacity_bytes: usize,
    /// Bytes below the mark, padding included.
    pub persistent_bytes: usize,
    /// Allocations below the mark.
    pub persistent_allocations: usize,
    /// The most bytes any step has used above the mark.
    pub step_high_water_bytes: usize,
    /// Bytes the last completed step used above the mark.
    pub last_step_bytes: usize,
    /// The most allocations any step has made.
    pub allocations_per_step: usize,
    /// How many times the step region was reset to the mark.
    pub resets: u64,
    /// Bytes lost to 256-byte alignment: persistent region plus last step.
    pub alignment_padding_bytes: usize,
}

#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counters {
    persistent_allocations: usize,
    persistent_padding: usize,
    step_high_water: usize,
    pub(super) step_allocations: usize,
    pub(super) step_padding: usize,
    last_step_bytes: usize,
    max_step_allocations: usize,
    last_step_padding: usize,
    resets: u64,
}

/// The bookkeeping of one device allocation: the persistent region, the
/// mark, the step region and its plans (see the module's doc). Offsets
/// only; the runtime beside it owns the bytes.
pub struct Arena {
    id: u64,
    pub(super) capacity: usize,
    pub(super) mark: usize,
    pub(super) top: usize,
    pub(super) counters: Counters,
    /// Fill the step region with NaNs at every reset (`--poison-step`).
    poison: bool,
    /// Every persistent allocation, for the memory report.
    persistent_log: Vec<PersistentBuf>,
    /// Planned steps (`placement.rs`): the trace of the step running, the
    /// plans by key, the plan in use and how far the step has followed it.
    pub(super) trace: Trace,
    pub(super) tracing: bool,
    pub(super) plans: Vec<StepPlan>,
    pub(super) active: Option<usize>,
    pub(super) plan_cursor: usize,
    /// The running step left its plan (another sequence): the rest of it
    /// is bump-allocated above the plan's peak, and it is re-planned.
    pub(super) off_plan: bool,
    /// Keys re-planned because a step left its plan, until taken.
    pub(super) replanned: Vec<u32>,
}

/// A persistent allocation, for the memory report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PersistentBuf {
    /// What it holds ("fc1.weight", "sgd momentum", "train images").
    pub what: &'static str,
    /// Its element type's name ([`Element::NAME`]).
    pub element: &'static str,
    /// Bytes from the arena's start.
    pub offset: usize,
    /// Bytes asked for.
    pub bytes: usize,
    /// Bytes held: `bytes` rounded up to the alignment.
    pub size: usize,
}

/// A range an op's kernels touch ([`crate::Step::uses`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Touch {
    pub offset: usize,
    pub bytes: usize,
}

impl<T: Element> From<Buf<T>> for Touch {
    fn from(b: Buf<T>) -> Self {
        Self {
            offset: b.offset(),
            bytes: b.bytes(),
        }
    }
}

impl From<FloatBuf> for Touch {
    fn from(b: FloatBuf) -> Self {
        Self {
            offset: b.offset(),
            bytes: b.bytes(),
        }
    }
}

/// What `--poison-step` writes over the step region at every reset: a quiet
/// NaN in every 4-byte word, whose halves are bf16 quiet NaNs too, so a
/// kernel that reads memory it did not write in this step computes NaN in
/// either type, and the loss says so at once.
pub const POISON: u32 = 0x7FC0_7FC0;

/// Where a captured step's buffers lie and what it uses: a graph of the
/// step is bound to it, and replays only where it still holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepFootprint {
    arena: u64,
    mark: usize,
    step_bytes: usize,
    padding: usize,
}

impl Arena {
    /// An arena of `capacity` bytes (rounded up to the alignment), empty.
    pub fn new(capacity: usize) -> Self {
        Self::of(align_up(capacity))
    }

    /// An arena without a bound, for a step that only plans: it measures
    /// what the step needs.
    pub fn unbounded() -> Self {
        Self::of(usize::MAX / 4)
    }

    fn of(capacity: usize) -> Self {
        Self {
            id: NEXT_ARENA.fetch_add(1, Ordering::Relaxed),
            capacity,
            mark: 0,
            top: 0,
            counters: Counters::default(),
            poison: cfg!(debug_assertions) || cfg!(test),
            persistent_log: Vec::new(),
            trace: Trace::default(),
            tracing: false,
            plans: Vec::new(),
            active: None,
            plan_cursor: 0,
            off_plan: false,
            replanned: Vec::new(),
        }
    }

    /// The arena's bytes.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// The bytes nothing is allocated in (before the first allocation, the
    /// whole arena): where a GPU may time its convolutions.
    pub(crate) fn free(&self) -> std::ops::Range<usize> {
        self.top..self.capacity
    }

    /// Whether every reset fills the step region with NaNs (on by default in
    /// debug builds and the crate's unit tests). Lantern zeroed the freed
    /// range; a NaN is louder: a stale read shows up in the loss at once.
    pub fn set_poison_step(&mut self, on: bool) {
        self.poison = on;
    }

    /// Whether every reset fills the step region with NaNs.
    pub fn poisons_steps(&self) -> bool {
        self.poison
    }

    /// What the arena holds and has held, as the reports print it.
    pub fn stats(&self) -> ArenaStats {
        let c = &self.counters;
        ArenaStats {
            capacity_bytes: self.capacity,
            persistent_bytes: self.mark,
            persistent_allocations: c.persistent_allocations,
            step_high_water_bytes: c.step_high_water,
            last_step_bytes: c.last_step_bytes,
            allocations_per_step: c.max_step_allocations,
            resets: c.resets,
            alignment_padding_bytes: c.persistent_padding + c.last_step_padding,
        }
    }

    /// Where the next persistent allocation starts, in bytes from the
    /// arena's start (a multiple of 256).
    pub(crate) fn top(&self) -> usize {
        self.top
    }

    /// Allocates in the persistent region; only between steps (the step
    /// region is then empty, so the mark may move up).
    pub(crate) fn alloc_persistent<T: Element>(
        &mut self,
        what: &'static str,
        shape: Shape,
    ) -> Result<Buf<T>, ArenaError> {
        debug_assert_eq!(self.top, self.mark, "a persistent allocation during a step");
        self.bump(Region::Persistent, what, shape)
    }

    /// A step begins: its region is empty.
    pub(crate) fn begin_step(&mut self) {
        debug_assert_eq!(self.top, self.mark, "a step began with a non-empty step region");
    }

    /// The step ends: the step region is reset to the mark and the step's
    /// figures recorded. Returns what the step used, to be filled with
    /// [`POISON`] when poisoning is on (captured into a step graph, that
    /// fill becomes the graph's last node, so replays poison too).
    pub(crate) fn end_step(&mut self) -> Option<Buf<u32>> {
        let used = match self.active {
            Some(i) if !self.off_plan => self.plans[i].peak,
            _ => self.top - self.mark,
        };
        let c = &mut self.counters;
        c.step_high_water = c.step_high_water.max(used);
        c.last_step_bytes = used;
        c.max_step_allocations = c.max_step_allocations.max(c.step_allocations);
        c.last_step_padding = c.step_padding;
        c.step_allocations = 0;
        c.step_padding = 0;
        c.resets += 1;
        self.top = self.mark;
        (self.poison && used > 0).then(|| Buf::new(self.mark, used / 4))
    }

    /// The steps since the arena counted `resets` were recorded, not run (a
    /// capture queues nothing): their resets are not counted, and the last
    /// one's footprint is what a graph of it is bound to.
    pub(crate) fn captured(&mut self, resets: u64) -> StepFootprint {
        let c = &mut self.counters;
        c.resets = resets;
        StepFootprint {
            arena: self.id,
            mark: self.mark,
            step_bytes: c.last_step_bytes,
            padding: c.last_step_padding,
        }
    }

    /// Refuses a replay where `footprint` no longer holds: another arena,
    /// or a persistent region that has grown since (the graph's step
    /// addresses would then overlap it).
    pub(crate) fn check_replay(&self, footprint: &StepFootprint) -> Result<(), ArenaError> {
        if footprint.arena != self.id || footprint.mark != self.mark {
            return Err(ArenaError::StaleGraph);
        }
        Ok(())
    }

    /// Counts one replay of a step of `footprint` as a step run.
    pub(crate) fn replayed(&mut self, footprint: &StepFootprint) {
        let c = &mut self.counters;
        c.step_high_water = c.step_high_water.max(footprint.step_bytes);
        c.last_step_bytes = footprint.step_bytes;
        c.last_step_padding = footprint.padding;
        c.resets += 1;
    }

    pub(super) fn bump<T: Element>(
        &mut self,
        region: Region,
        what: &'static str,
        shape: Shape,
    ) -> Result<Buf<T>, ArenaError> {
        let len = shape.numel();
        let bytes = len * T::SIZE;
        let padded = align_up(bytes);
        let start = self.top;
        let in_use = start;
        let exhausted = || ArenaError::Exhausted {
            region,
            what,
            shape,
            requested: bytes,
            in_use,
            capacity: self.capacity,
            would_fit: align_up(in_use + padded),
            live: self.largest_live(),
        };
        let end = start.checked_add(padded).ok_or_else(exhausted)?;
        if end > self.capacity {
            return Err(exhausted());
        }
        self.top = end;
        let c = &mut self.counters;
        match region {
            Region::Persistent => {
                self.mark = end;
                c.persistent_allocations += 1;
                c.persistent_padding += padded - bytes;
                self.persistent_log.push(PersistentBuf {
                    what,
                    element: T::NAME,
                    offset: start,
                    bytes,
                    size: padded,
                });
            }
            Region::Step => {
                c.step_allocations += 1;
                c.step_padding += padded - bytes;
            }
        }
        Ok(Buf::new(start, len))
    }

    /// Every persistent allocation so far.
    pub(crate) fn persistent_log(&self) -> &[PersistentBuf] {
        &self.persistent_log
    }

    /// Refuses a read or write between steps of bytes the persistent region
    /// does not hold.
    pub(crate) fn check_persistent<T: Element>(&self, buf: Buf<T>) -> Result<(), ArenaError> {
        if buf.byte_range().end > self.mark {
            return Err(ArenaError::OutsidePersistent);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::{bf16, ByteSize, DType, ALIGN};

    // These tests drive the arena's bookkeeping alone; steps with a device
    // under them are tested with autograd's engine (`autograd/engine.rs`)
    // and, with tensors and ops, in ops (`ops/tests.rs`).

    /// One step that only allocates.
    fn step<R>(arena: &mut Arena, run: impl FnOnce(&mut Arena) -> Result<R, ArenaError>) -> Result<R, ArenaError> {
        arena.begin_step();
        let ran = run(arena);
        arena.end_step();
        ran
    }

    #[test]
    fn the_poison_is_a_nan_read_as_f32_and_as_either_bf16_half() {
        assert!(f32::from_bits(POISON).is_nan());
        assert!(bf16::from_bits(POISON as u16).is_nan());
        assert!(bf16::from_bits((POISON >> 16) as u16).is_nan());
    }

    #[test]
    fn a_bf16_step_buffer_takes_half_the_bytes_and_is_traced_as_bf16() {
        let mut arena = Arena::new(1 << 16);
        arena.tracing = true;
        let shape = Shape::new(&[3, 100]);
        let half = arena.alloc_step_float("half", shape, DType::Bf16).unwrap();
        let full = arena.alloc_step_float("full", shape, DType::F32).unwrap();
        assert_eq!((half.dtype(), half.bytes()), (DType::Bf16, 600));
        assert_eq!((full.dtype(), full.bytes()), (DType::F32, 1200));
        assert_eq!(full.offset() - half.offset(), align_up(600));
        let traced: Vec<_> = arena.trace.bufs.iter().map(|b| (b.what, b.element, b.bytes)).collect();
        assert_eq!(traced, [("half", "bf16", 600), ("full", "f32", 1200)]);
    }

    #[test]
    fn every_allocation_is_aligned_and_disjoint() {
        let mut arena = Arena::new(1 << 20);
        let a = arena.alloc_persistent::<u8>("a", Shape::new(&[3])).unwrap();
        let b = arena.alloc_persistent::<f32>("b", Shape::new(&[100])).unwrap();
        let c = arena.alloc_persistent::<u32>("c", Shape::new(&[1])).unwrap();
        for off in [a.offset(), b.offset(), c.offset()] {
            assert_eq!(off % ALIGN, 0);
        }
        assert!(a.byte_range().end <= b.offset() && b.byte_range().end <= c.offset());
        step(&mut arena, |a| {
            let x = a.alloc_step::<f32>("x", Shape::new(&[7]))?;
            assert_eq!(x.offset() % ALIGN, 0);
            assert!(x.offset() >= c.byte_range().end, "step memory starts above the mark");
            Ok(())
        })
        .unwrap();
    }

    #[test]
    fn reset_returns_to_the_mark_and_counts() {
        let mut arena = Arena::new(1 << 20);
        arena.alloc_persistent::<f32>("w", Shape::new(&[10])).unwrap();
        let mark = arena.stats().persistent_bytes;
        assert_eq!(mark, ALIGN);
        let mut first = None;
        for _ in 0..3 {
            let off = step(&mut arena, |arena| {
                let a = arena.alloc_step::<f32>("a", Shape::new(&[64]))?; // exactly 256 bytes
                let b = arena.alloc_step::<f32>("b", Shape::new(&[65]))?; // 260 -> 512
                Ok((a.offset(), b.offset()))
            })
            .unwrap();
            assert_eq!(*first.get_or_insert(off), off, "same sequence, same addresses");
        }
        let stats = arena.stats();
        assert_eq!(first.unwrap().0, mark);
        assert_eq!(stats.resets, 3);
        assert_eq!(stats.allocations_per_step, 2);
        assert_eq!(stats.step_high_water_bytes, 768);
        assert_eq!(stats.last_step_bytes, 768);
        assert_eq!(stats.alignment_padding_bytes, (256 - 40) + (512 - 260));
        // The persistent region can grow between steps; the mark follows.
        arena.alloc_persistent::<u8>("late", Shape::new(&[1])).unwrap();
        assert_eq!(arena.stats().persistent_bytes, 2 * ALIGN);
    }

    /// The end of a step names exactly what it used, for the poison; with
    /// poisoning off, nothing.
    #[test]
    fn a_step_poisons_what_it_used_and_only_when_asked() {
        for poison in [false, true] {
            let mut arena = Arena::new(1 << 16);
            arena.alloc_persistent::<f32>("w", Shape::new(&[10])).unwrap();
            arena.set_poison_step(poison);
            arena.begin_step();
            arena.alloc_step::<f32>("x", Shape::new(&[65])).unwrap();
            let filled = arena.end_step();
            assert_eq!(filled, poison.then(|| Buf::new(ALIGN, 512 / 4)));
        }
    }

    #[test]
    fn a_failed_step_still_resets() {
        let mut arena = Arena::new(4096);
        let err = step(&mut arena, |a| {
            a.alloc_step::<f32>("big", Shape::new(&[100]))?;
            a.alloc_step::<f32>("too big", Shape::new(&[10_000]))?;
            Ok(())
        });
        assert!(err.is_err());
        assert_eq!(arena.stats().last_step_bytes, 512);
        step(&mut arena, |a| {
            a.alloc_step::<f32>("again", Shape::new(&[100])).map(|_| ())
        })
        .unwrap();
    }

    #[test]
    fn exhaustion_names_the_allocation_and_the_size_that_fits() {
        let mut arena = Arena::new(2048);
        arena
            .alloc_persistent::<f32>("conv1.weight", Shape::new(&[250]))
            .unwrap(); // 1000 -> 1024
        let err = step(&mut arena, |a| {
            a.alloc_step::<f32>("conv2d output", Shape::new(&[100, 20, 8, 8]))
                .map(|_| ())
        })
        .unwrap_err();
        let ArenaError::Exhausted {
            region,
            what,
            shape,
            requested,
            in_use,
            capacity,
            would_fit,
            ..
        } = err
        else {
            panic!("expected exhaustion, got {err}");
        };
        assert_eq!(region, Region::Step);
        assert_eq!(what, "conv2d output");
        assert_eq!(shape, Shape::new(&[100, 20, 8, 8]));
        assert_eq!(requested, 512_000);
        assert_eq!(in_use, 1024);
        assert_eq!(capacity, 2048);
        assert_eq!(would_fit, 1024 + 512_000);
        let text = err_text(2048);
        assert!(
            text.contains("conv2d output [100, 20, 8, 8]")
                && text.contains(&format!("an arena of {} would fit", ByteSize(1024 + 512_000))),
            "{text}"
        );
        // The flag to pass is the CLI's to add (its hints).
        assert!(!text.contains("--"), "{text}");
    }

    fn err_text(capacity: usize) -> String {
        let mut arena = Arena::new(capacity);
        arena.alloc_persistent::<f32>("w", Shape::new(&[250])).unwrap();
        step(&mut arena, |a| {
            a.alloc_step::<f32>("conv2d output", Shape::new(&[100, 20, 8, 8]))
                .map(|_| ())
        })
        .unwrap_err()
        .to_string()
    }

    #[test]
    fn persistent_exhaustion_is_an_error_too() {
        let mut arena = Arena::new(1024);
        let err = arena
            .alloc_persistent::<u8>("train images", Shape::new(&[60_000, 28, 28]))
            .unwrap_err();
        assert!(matches!(
            err,
            ArenaError::Exhausted {
                region: Region::Persistent,
                ..
            }
        ));
    }

    #[test]
    fn an_unbounded_arena_measures_without_memory() {
        let mut dry = Arena::unbounded();
        dry.alloc_persistent::<u8>("data", Shape::new(&[1 << 30])).unwrap();
        step(&mut dry, |a| a.alloc_step::<f32>("x", Shape::new(&[1000])).map(|_| ())).unwrap();
        let stats = dry.stats();
        assert_eq!(stats.persistent_bytes, 1 << 30);
        assert_eq!(stats.step_high_water_bytes, align_up(4000));
    }

    /// A graph of a step replays only on the arena and mark it was
    /// captured at, and each replay counts as the step it performs.
    #[test]
    fn a_captured_footprint_replays_only_where_it_holds() {
        let mut arena = Arena::new(1 << 16);
        arena.alloc_persistent::<f32>("w", Shape::new(&[10])).unwrap();
        step(&mut arena, |a| a.alloc_step::<f32>("x", Shape::new(&[100])).map(|_| ())).unwrap();
        let footprint = arena.captured(0);
        assert_eq!(arena.stats().resets, 0, "a capture is not a step run");
        arena.check_replay(&footprint).unwrap();
        arena.replayed(&footprint);
        assert_eq!((arena.stats().resets, arena.stats().last_step_bytes), (1, 512));
        assert!(matches!(
            Arena::new(1 << 16).check_replay(&footprint),
            Err(ArenaError::StaleGraph)
        ));
        arena.alloc_persistent::<u8>("late", Shape::new(&[1])).unwrap();
        assert!(matches!(arena.check_replay(&footprint), Err(ArenaError::StaleGraph)));
    }
}
