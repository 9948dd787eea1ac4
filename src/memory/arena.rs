//! The arena: one allocation per device, a persistent region, a mark, and a
//! step region that is reset to the mark after every step.
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
//! - a step's tensors cannot outlive the step: `Arena::step` hands them a
//!   brand that cannot escape its closure, and only then resets.
//!
//! The arena knows bytes only. The step scope, its tape and backward are
//! autograd's (`Engine::step`, `planned_step` and `capture_step`, which
//! also keeps the tape between steps); they reach the arena through the
//! crate-only services here: step allocation, a step run between a begin
//! and a reset ([`Arena::run_step`]), on a plan ([`Arena::run_planned`]) or
//! captured ([`Arena::run_captured`]), and declared ranges.

use super::plan::{self, StepPlan, Trace};
use crate::backend::{Backend, BackendError, CapturedGraph, Device, DeviceKind, OpTime, Workers};
use crate::base::{align_up, bf16, Buf, ByteSize, DType, Element, FloatBuf, Shape};
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

/// Distinguishes arenas, so a step graph is only replayed on its own.
static NEXT_ARENA: AtomicU64 = AtomicU64::new(1);

/// Which side of the mark an allocation was made on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Region {
    Persistent,
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

#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    /// The arena cannot hold an allocation. `would_fit` is the capacity that
    /// would have held everything allocated so far plus this request; the
    /// trainer replaces it with the exact size a whole step needs.
    #[error(
        "arena exhausted: {what} {shape} needs {} in the {region} region, but {} of the arena's {} are in use{}; an arena of {} would fit",
        ByteSize(*.requested), ByteSize(*.in_use), ByteSize(*.capacity), largest(live), ByteSize(*.would_fit)
    )]
    Exhausted {
        region: Region,
        what: &'static str,
        shape: Shape,
        requested: usize,
        in_use: usize,
        capacity: usize,
        would_fit: usize,
        /// The largest step buffers alive at that point, largest first.
        live: Vec<(&'static str, usize)>,
    },
    /// A planned step does not fit above the persistent region.
    #[error(
        "arena exhausted: a step needs {} above the persistent region's {}, but the arena holds {}{}; an arena of {} would fit",
        ByteSize(*.step_bytes), ByteSize(*.persistent_bytes), ByteSize(*.capacity), largest(live), ByteSize(*.would_fit)
    )]
    StepTooLarge {
        step_bytes: usize,
        persistent_bytes: usize,
        capacity: usize,
        would_fit: usize,
        /// The largest buffers alive at the step's peak.
        live: Vec<(&'static str, usize)>,
    },
    /// A step graph replayed where its addresses no longer hold.
    #[error("a step graph was replayed on another arena, or after the persistent region grew; capture it again")]
    StaleGraph,
    #[error(transparent)]
    Backend(#[from] BackendError),
}

fn largest(live: &[(&'static str, usize)]) -> String {
    if live.is_empty() {
        return String::new();
    }
    let list: Vec<String> = live.iter().map(|(w, b)| format!("{w} {}", ByteSize(*b))).collect();
    format!(" (the largest live step buffers: {})", list.join(", "))
}

/// A `--arena-size` value that is at least `bytes`, rounded up to a MiB.
pub fn suggest(bytes: usize) -> String {
    format!("{}MiB", bytes.div_ceil(1 << 20).max(1))
}

/// Memory statistics, public API: the CLI prints them and `--json` emits them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct ArenaStats {
    pub device: DeviceKind,
    pub capacity_bytes: usize,
    /// Bytes below the mark, padding included.
    pub persistent_bytes: usize,
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
struct Counters {
    persistent_allocations: usize,
    persistent_padding: usize,
    step_high_water: usize,
    step_allocations: usize,
    step_padding: usize,
    last_step_bytes: usize,
    max_step_allocations: usize,
    last_step_padding: usize,
    resets: u64,
}

pub struct Arena {
    id: u64,
    backend: Backend,
    capacity: usize,
    mark: usize,
    top: usize,
    counters: Counters,
    /// Fill the step region with NaNs at every reset (`--poison-step`).
    poison: bool,
    /// Every persistent allocation, for the memory report.
    persistent_log: Vec<PersistentBuf>,
    /// Planned steps: the trace of the step running, the plans by key, the
    /// plan in use and how far the step has followed it.
    trace: Trace,
    tracing: bool,
    plans: Vec<StepPlan>,
    active: Option<usize>,
    plan_cursor: usize,
    /// The running step left its plan (another sequence): the rest of it
    /// is bump-allocated above the plan's peak, and it is re-planned.
    off_plan: bool,
    /// Keys re-planned because a step left its plan, until taken.
    replanned: Vec<u32>,
}

/// A persistent allocation, for the memory report.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PersistentBuf {
    pub what: &'static str,
    /// Its element type's name ([`Element::NAME`]).
    pub element: &'static str,
    pub offset: usize,
    pub bytes: usize,
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

impl Arena {
    /// Makes the device's one allocation of `capacity` bytes (rounded up to
    /// the alignment).
    pub fn new(device: Device, capacity: usize) -> Result<Self, ArenaError> {
        let capacity = align_up(capacity);
        Ok(Self::with_backend(Backend::new(device, capacity)?, capacity))
    }

    /// An arena that allocates nothing and runs no kernel, shaped like one
    /// on `device`: running a step on it measures the bytes the step needs.
    pub fn dry(device: &Device, capacity: Option<usize>) -> Self {
        let capacity = capacity.map_or(usize::MAX / 4, align_up);
        Self::with_backend(Backend::dry_like(device), capacity)
    }

    fn with_backend(backend: Backend, capacity: usize) -> Self {
        Self {
            id: NEXT_ARENA.fetch_add(1, Ordering::Relaxed),
            backend,
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

    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Whether every reset fills the step region with NaNs (on by default in
    /// debug builds and the crate's unit tests). Lantern zeroed the freed
    /// range; a NaN is louder: a stale read shows up in the loss at once.
    pub fn set_poison_step(&mut self, on: bool) {
        self.poison = on;
    }

    pub fn poisons_steps(&self) -> bool {
        self.poison
    }

    pub fn device(&self) -> DeviceKind {
        self.backend.kind()
    }

    /// The device's workers; run a training loop through them (see [`Workers`]).
    pub fn workers(&self) -> Workers {
        self.backend.workers()
    }

    pub fn stats(&self) -> ArenaStats {
        let c = &self.counters;
        ArenaStats {
            device: self.backend.kind(),
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

    /// Allocates in the persistent region. Allowed whenever no step runs
    /// (`&mut self` proves it): the step region is then empty.
    pub fn persistent(&mut self) -> Persistent<'_> {
        Persistent { arena: self }
    }

    /// Runs `run` as one step: the step region is empty when it starts and
    /// reset to the mark when it returns, successfully or not. How a step
    /// uses the region is up to `run` (autograd's `Arena::step`).
    pub(crate) fn run_step<R, E: From<BackendError>>(
        &mut self,
        run: impl FnOnce(&mut Self) -> Result<R, E>,
    ) -> Result<R, E> {
        debug_assert_eq!(self.top, self.mark, "a step began with a non-empty step region");
        let result = run(self);
        let reset = self.reset();
        let r = result?;
        reset?;
        Ok(r)
    }

    /// Records the device work of `run` (one step) as a graph, without
    /// running it: see autograd's `Arena::capture_step`.
    pub(crate) fn run_captured<E: From<BackendError>>(
        &mut self,
        run: impl FnOnce(&mut Self) -> Result<(), E>,
    ) -> Result<StepGraph, E> {
        self.backend.begin_capture()?;
        let resets = self.counters.resets;
        let ran = run(self);
        // A capture queues nothing: it is not a step the arena ran.
        self.counters.resets = resets;
        let graph = self.backend.end_capture();
        ran?;
        let c = &self.counters;
        Ok(StepGraph {
            graph: graph?,
            arena: self.id,
            mark: self.mark,
            step_bytes: c.last_step_bytes,
            padding: c.last_step_padding,
        })
    }

    /// Queues one replay of a step captured on this arena. Refused if the
    /// persistent region has grown since: the graph's step addresses would
    /// then overlap it.
    pub fn replay_step(&mut self, graph: &StepGraph) -> Result<(), ArenaError> {
        if graph.arena != self.id || graph.mark != self.mark {
            return Err(ArenaError::StaleGraph);
        }
        self.backend.replay(&graph.graph)?;
        let c = &mut self.counters;
        c.step_high_water = c.step_high_water.max(graph.step_bytes);
        c.last_step_bytes = graph.step_bytes;
        c.last_step_padding = graph.padding;
        c.resets += 1;
        Ok(())
    }

    /// Work items the device has queued so far (GPU only): kernels, library
    /// calls, copies, graph launches.
    pub fn ops_queued(&self) -> Option<u64> {
        self.backend.ops_queued()
    }

    /// The CUDA calls the device has made so far, by kind (GPU only): a
    /// difference of two readings is what the steps between them called.
    pub fn cuda_calls(&self) -> Option<crate::backend::cuda::CudaCalls> {
        self.backend.cuda_calls()
    }

    /// Resets the step region to the mark and records the step's figures.
    fn reset(&mut self) -> Result<(), BackendError> {
        let used = match self.active {
            Some(i) if !self.off_plan => self.plans[i].peak,
            _ => self.top - self.mark,
        };
        // Poison what the step used (captured into a step graph, this
        // becomes the graph's last node, so replays poison too).
        let poisoned = if self.poison && used > 0 {
            self.backend.fill(Buf::<u32>::new(self.mark, used / 4), POISON)
        } else {
            Ok(())
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
        poisoned
    }

    fn bump<T: Element>(&mut self, region: Region, what: &'static str, shape: Shape) -> Result<Buf<T>, ArenaError> {
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

    pub(crate) fn alloc_step<T: Element>(&mut self, what: &'static str, shape: Shape) -> Result<Buf<T>, ArenaError> {
        let bytes = shape.numel() * T::SIZE;
        let size = align_up(bytes);
        if let (Some(i), false) = (self.active, self.off_plan) {
            let planned = self.plans[i].bufs.get(self.plan_cursor).copied();
            match planned {
                Some(p) if p.what == what && p.bytes == bytes => {
                    self.plan_cursor += 1;
                    let c = &mut self.counters;
                    c.step_allocations += 1;
                    c.step_padding += size - bytes;
                    if self.tracing {
                        self.trace.alloc(what, T::NAME, shape, bytes, size, p.offset);
                    }
                    return Ok(Buf::new(self.mark + p.offset, shape.numel()));
                }
                // Another sequence than planned: the rest of the step goes
                // above everything the plan placed, and the step is
                // re-planned after it; a stale plan is never followed.
                _ => {
                    self.off_plan = true;
                    self.top = self.mark + self.plans[i].peak;
                }
            }
        }
        let buf = self.bump(Region::Step, what, shape)?;
        if self.tracing {
            self.trace
                .alloc(what, T::NAME, shape, bytes, size, buf.offset() - self.mark);
        }
        Ok(buf)
    }

    /// A step buffer of `dtype` (a tensor's values or gradient).
    pub(crate) fn alloc_step_float(
        &mut self,
        what: &'static str,
        shape: Shape,
        dtype: DType,
    ) -> Result<FloatBuf, ArenaError> {
        Ok(match dtype {
            DType::F32 => FloatBuf::F32(self.alloc_step(what, shape)?),
            DType::Bf16 => FloatBuf::Bf16(self.alloc_step::<bf16>(what, shape)?),
        })
    }

    /// Runs `run` (one step, through [`Arena::run_step`]) as a step of kind
    /// `key` on the memory plan of that kind: every step buffer at its
    /// planned offset, the bytes of dead buffers reused. The first step of a
    /// kind runs bump-allocated and traced, and its plan is made from the
    /// trace; a step that leaves its plan is finished above it and
    /// re-planned ([`Arena::take_replanned`] says which).
    pub(crate) fn run_planned<R, E: From<ArenaError>>(
        &mut self,
        key: u32,
        run: impl FnOnce(&mut Self) -> Result<R, E>,
    ) -> Result<R, E> {
        let index = self.plans.iter().position(|p| p.key == key);
        if let Some(i) = index {
            let need = self.mark + self.plans[i].peak;
            if need > self.capacity {
                let plan = &self.plans[i];
                return Err(ArenaError::StepTooLarge {
                    step_bytes: plan.peak,
                    persistent_bytes: self.mark,
                    capacity: self.capacity,
                    would_fit: need,
                    live: plan.top_live(4).iter().map(|b| (b.what, b.size)).collect(),
                }
                .into());
            }
        }
        self.active = index;
        self.plan_cursor = 0;
        self.off_plan = false;
        self.trace.clear();
        self.tracing = true;
        let ran = run(self);
        self.tracing = false;
        if ran.is_ok() && (index.is_none() || self.off_plan) {
            let mut plan = plan::plan(key, &self.trace.bufs);
            plan.recompute_ticks = self.trace.recompute_ticks.clone();
            plan.slower_seconds = self.trace.slower_seconds;
            match index {
                Some(i) => {
                    self.plans[i] = plan;
                    self.replanned.push(key);
                }
                None => self.plans.push(plan),
            }
        }
        self.active = None;
        self.off_plan = false;
        ran
    }

    /// The largest step buffers allocated so far in a traced step (in a
    /// bump-allocated step every one of them is still held).
    fn largest_live(&self) -> Vec<(&'static str, usize)> {
        let mut live: Vec<(&'static str, usize)> = self.trace.bufs.iter().map(|b| (b.what, b.size)).collect();
        live.sort_by_key(|&(_, size)| std::cmp::Reverse(size));
        live.truncate(4);
        live
    }

    /// The memory plans made so far, by step kind.
    pub fn plans(&self) -> &[StepPlan] {
        &self.plans
    }

    /// Takes plans made elsewhere (by the dry arena that sized this one):
    /// the same steps allocate the same sequences here.
    pub fn adopt_plans(&mut self, plans: &[StepPlan]) {
        self.plans = plans.to_vec();
    }

    /// Keys of step kinds re-planned since the last call.
    pub fn take_replanned(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.replanned)
    }

    /// Every persistent allocation so far.
    pub fn persistent_log(&self) -> &[PersistentBuf] {
        &self.persistent_log
    }

    /// An op declares what its kernels will touch: it extends the traced
    /// lifetimes of step buffers, and the CPU backend refuses any other range.
    pub(crate) fn record_uses(&mut self, touches: &[Touch]) {
        if self.tracing {
            self.trace.tick();
            for t in touches {
                if t.offset >= self.mark {
                    let start = t.offset - self.mark;
                    self.trace.touch(start, start + t.bytes);
                }
            }
        }
        self.backend
            .declare(touches.iter().map(|t| (t.offset, t.offset + t.bytes)));
    }

    /// Marks the ops from now until [`Arena::end_recompute`] as recomputing
    /// a value backward reads (see [`StepPlan::recompute_ticks`]).
    pub(crate) fn begin_recompute(&mut self) {
        self.trace.recomputing += 1;
    }

    pub(crate) fn end_recompute(&mut self) {
        self.trace.recomputing -= 1;
    }

    /// An op of a traced step runs `seconds()` slower than the fastest
    /// algorithm the device timed for it (see [`StepPlan::slower_seconds`]);
    /// asked only while tracing, so a step on its plan pays nothing.
    pub(crate) fn note_slower(&mut self, seconds: impl FnOnce() -> f64) {
        if self.tracing {
            self.trace.slower_seconds += seconds();
        }
    }

    pub(crate) fn backend(&mut self) -> &mut Backend {
        &mut self.backend
    }

    /// Free device memory as the driver reports it, on a GPU; `None` on the
    /// CPU. Waits for queued work first.
    pub fn device_free_bytes(&mut self) -> Result<Option<usize>, ArenaError> {
        Ok(self.backend.device_memory()?.map(|(_, free)| free))
    }

    /// `(total, free)` device memory on a GPU; `None` on the CPU.
    pub fn device_memory(&mut self) -> Result<Option<(usize, usize)>, ArenaError> {
        Ok(self.backend.device_memory()?)
    }

    /// Times the convolution algorithms of every shape planned so far in
    /// the arena's free bytes (before anything is allocated in it: they
    /// hold nothing) and chooses the fastest of each pass (GPU only). Plans
    /// of steps must be made again: workspace sizes may have changed.
    /// Returns how many shapes changed an algorithm.
    pub fn tune_convolutions(&mut self) -> Result<usize, ArenaError> {
        let free = self.capacity - self.top;
        Ok(self.backend.tune_convolutions(self.top, free)?)
    }

    /// Chooses among the timed algorithms again, with workspaces of at
    /// most `limit` bytes; returns the largest workspace chosen.
    pub fn select_convolutions(&self, limit: usize) -> usize {
        self.backend.select_convolutions(limit)
    }

    /// Which of cuDNN's APIs runs each convolution planned so far; none
    /// off the GPU.
    pub fn convolution_apis(&self) -> Vec<(crate::backend::cuda::ConvDims, crate::backend::cuda::ConvApi)> {
        self.backend.convolution_apis()
    }

    /// Undoes [`Arena::tune_convolutions`].
    pub fn untune_convolutions(&self) {
        self.backend.untune_convolutions();
    }

    /// A dry arena shaped like this one (same device and sizes), without a
    /// capacity: running a step on it measures what the step needs with
    /// this arena's convolution choices.
    pub fn dry_twin(&self) -> Self {
        Self::with_backend(self.backend.dry_twin(), usize::MAX / 4)
    }

    /// Prepares to time up to `ops` ops of one step (GPU only; false on the
    /// CPU). Call at start-up: the events it creates may take device memory.
    pub fn enable_op_timing(&mut self, ops: usize) -> Result<bool, ArenaError> {
        Ok(self.backend.enable_timing(ops)?)
    }

    /// Brackets every device op queued from now with events (GPU only,
    /// after [`Arena::enable_op_timing`]), until [`Arena::pause_op_timing`].
    /// Ops queued while a step is captured keep their events in the graph.
    pub fn start_op_timing(&mut self) -> bool {
        self.backend.start_timing()
    }

    pub fn pause_op_timing(&mut self) {
        self.backend.pause_timing();
    }

    /// Waits for the device and reads the bracketed ops' latest times, and
    /// the GPU time from the first op's start to the last op's end.
    pub fn read_op_times(&mut self, times: &mut Vec<OpTime>) -> Result<Option<f64>, ArenaError> {
        times.clear();
        Ok(self.backend.finish_timing(times)?)
    }

    /// Overwrites a persistent buffer between steps (`&mut self`: no step
    /// runs): how the loop hands a new epoch's order or a cursor to kernels.
    pub fn write_persistent<T: Element>(&mut self, buf: Buf<T>, values: &[T]) -> Result<(), ArenaError> {
        self.check_persistent(buf)?;
        Ok(self.backend.upload(buf, values)?)
    }

    /// Sums a persistent buffer over the data-parallel group's ranks, in
    /// place, between steps; every rank must call it in the same order.
    pub fn all_reduce_persistent(&mut self, buf: Buf<f32>) -> Result<(), ArenaError> {
        self.check_persistent(buf)?;
        self.backend.all_reduce_sum(buf)?;
        Ok(self.backend.join_collectives()?)
    }

    /// This device's rank in its data-parallel group, and the group's size
    /// (`(0, 1)` alone).
    pub fn world(&self) -> (usize, usize) {
        self.backend.world()
    }

    /// Copies a persistent buffer to the host between steps.
    pub fn read_persistent<T: Element>(&mut self, buf: Buf<T>, out: &mut [T]) -> Result<(), ArenaError> {
        self.check_persistent(buf)?;
        Ok(self.backend.download(buf, out)?)
    }

    pub(crate) fn check_persistent<T: Element>(&self, buf: Buf<T>) -> Result<(), ArenaError> {
        if buf.byte_range().end > self.mark {
            return Err(BackendError::Internal("a persistent-region access outside the persistent region").into());
        }
        Ok(())
    }
}

/// One training step's device work captured as a CUDA graph, bound to the
/// arena and the mark it was captured at.
pub struct StepGraph {
    graph: CapturedGraph,
    arena: u64,
    mark: usize,
    step_bytes: usize,
    padding: usize,
}

impl StepGraph {
    /// Nodes the graph runs per replay: kernels (cuDNN's and cuBLAS's
    /// included), memsets and copies.
    pub fn nodes(&self) -> usize {
        self.graph.nodes()
    }
}

/// Allocator for the persistent region; borrowed from the arena between steps.
pub struct Persistent<'a> {
    arena: &'a mut Arena,
}

impl Persistent<'_> {
    /// Where the next allocation starts, in bytes from the arena's start
    /// (a multiple of 256): for callers that lay out memory with a coarser
    /// alignment of their own.
    pub fn offset(&self) -> usize {
        self.arena.top
    }

    /// Uninitialised-by-contract space (it holds whatever was there before).
    pub fn alloc<T: Element>(&mut self, what: &'static str, shape: Shape) -> Result<Buf<T>, ArenaError> {
        self.arena.bump(Region::Persistent, what, shape)
    }

    /// Whether allocations here hold values: false on a dry arena, which
    /// only measures, so callers may skip computing what they would upload.
    pub fn holds_values(&self) -> bool {
        self.arena.backend.kind() != DeviceKind::Dry
    }

    /// Space holding zeros.
    pub fn zeros<T: Element>(&mut self, what: &'static str, shape: Shape) -> Result<Buf<T>, ArenaError> {
        let buf = self.alloc(what, shape)?;
        self.arena.backend.fill(buf, T::default())?;
        Ok(buf)
    }

    /// Space holding a copy of `values`.
    pub fn upload<T: Element>(&mut self, what: &'static str, shape: Shape, values: &[T]) -> Result<Buf<T>, ArenaError> {
        let buf = self.alloc(what, shape)?;
        self.arena.backend.upload(buf, values)?;
        Ok(buf)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::base::ALIGN;

    // These tests drive the arena through its byte-level services alone
    // (`run_step`, `alloc_step`, the backend); steps with tensors and ops
    // are tested in ops (`ops/tests.rs`), whose step builds them on these
    // services.

    fn cpu_arena(bytes: usize) -> Arena {
        Arena::new(Device::cpu(1).unwrap(), bytes).unwrap()
    }

    #[test]
    fn the_poison_is_a_nan_read_as_f32_and_as_either_bf16_half() {
        assert!(f32::from_bits(POISON).is_nan());
        assert!(bf16::from_bits(POISON as u16).is_nan());
        assert!(bf16::from_bits((POISON >> 16) as u16).is_nan());
    }

    #[test]
    fn a_bf16_step_buffer_takes_half_the_bytes_and_is_traced_as_bf16() {
        let mut arena = cpu_arena(1 << 16);
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

    /// One step that only allocates.
    fn step<R>(arena: &mut Arena, run: impl FnOnce(&mut Arena) -> Result<R, ArenaError>) -> Result<R, ArenaError> {
        arena.run_step(run)
    }

    #[test]
    fn every_allocation_is_aligned_and_disjoint() {
        let mut arena = cpu_arena(1 << 20);
        let mut p = arena.persistent();
        let a = p.alloc::<u8>("a", Shape::new(&[3])).unwrap();
        let b = p.alloc::<f32>("b", Shape::new(&[100])).unwrap();
        let c = p.alloc::<u32>("c", Shape::new(&[1])).unwrap();
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
        let mut arena = cpu_arena(1 << 20);
        arena.persistent().alloc::<f32>("w", Shape::new(&[10])).unwrap();
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
        arena.persistent().alloc::<u8>("late", Shape::new(&[1])).unwrap();
        assert_eq!(arena.stats().persistent_bytes, 2 * ALIGN);
    }

    #[test]
    fn poison_step_turns_a_stale_read_into_nan() {
        for poison in [false, true] {
            let mut arena = cpu_arena(1 << 16);
            arena.set_poison_step(poison);
            step(&mut arena, |a| {
                let x = a.alloc_step::<f32>("written", Shape::new(&[8]))?;
                Ok(a.backend().upload(x, &[1.5; 8])?)
            })
            .unwrap();
            // The planted bug: a step reads a buffer it never wrote, at the
            // address the last step's input had.
            let stale = step(&mut arena, |a| {
                let buf = a.alloc_step::<f32>("never written", Shape::new(&[8]))?;
                let mut out = [0.0; 8];
                a.backend().download(buf, &mut out)?;
                Ok(out)
            })
            .unwrap();
            if poison {
                assert!(stale.iter().all(|v| v.is_nan()), "{stale:?}");
            } else {
                assert_eq!(stale, [1.5; 8], "without poison the last step's values leak through");
            }
        }
    }

    #[test]
    fn a_failed_step_still_resets() {
        let mut arena = cpu_arena(4096);
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
        let mut arena = cpu_arena(2048);
        arena
            .persistent()
            .alloc::<f32>("conv1.weight", Shape::new(&[250]))
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
        let mut arena = cpu_arena(capacity);
        arena.persistent().alloc::<f32>("w", Shape::new(&[250])).unwrap();
        step(&mut arena, |a| {
            a.alloc_step::<f32>("conv2d output", Shape::new(&[100, 20, 8, 8]))
                .map(|_| ())
        })
        .unwrap_err()
        .to_string()
    }

    #[test]
    fn persistent_exhaustion_is_an_error_too() {
        let mut arena = cpu_arena(1024);
        let err = arena
            .persistent()
            .alloc::<u8>("train images", Shape::new(&[60_000, 28, 28]))
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
    fn dry_arena_measures_without_memory() {
        let device = Device::cpu(1).unwrap();
        let mut dry = Arena::dry(&device, None);
        dry.persistent().alloc::<u8>("data", Shape::new(&[1 << 30])).unwrap();
        step(&mut dry, |a| a.alloc_step::<f32>("x", Shape::new(&[1000])).map(|_| ())).unwrap();
        let stats = dry.stats();
        assert_eq!(stats.persistent_bytes, 1 << 30);
        assert_eq!(stats.step_high_water_bytes, align_up(4000));
    }
}
