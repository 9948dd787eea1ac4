//! Where a step buffer goes: at its planned offset when the step follows a
//! plan, else bumped above the last one; and the trace a plan is made from
//! (what each op declared it touches, which ops recompute, what a held-down
//! workspace costs).

use super::arena::{Arena, Region, Touch};
use super::plan::{self, StepPlan};
use super::ArenaError;
use crate::base::{align_up, bf16, Buf, DType, Element, FloatBuf, Shape};

impl Arena {
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

    /// Runs `run` (one step, begun and ended inside it) as a step of kind
    /// `key` on the memory plan of that kind: every step buffer at its
    /// planned offset, the bytes of dead buffers reused. The first step of
    /// a kind runs bump-allocated and traced, and its plan is made from the
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
            plan.tags = self.trace.tags.clone();
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
    pub(super) fn largest_live(&self) -> Vec<(&'static str, usize)> {
        let mut live: Vec<(&'static str, usize)> = self.trace.bufs.iter().map(|b| (b.what, b.size)).collect();
        live.sort_by_key(|&(_, size)| std::cmp::Reverse(size));
        live.truncate(4);
        live
    }

    /// The memory plans made so far, by step kind.
    pub fn plans(&self) -> &[StepPlan] {
        &self.plans
    }

    /// Takes plans made elsewhere (by the planning engine that sized this
    /// arena): the same steps allocate the same sequences here.
    pub fn adopt_plans(&mut self, plans: &[StepPlan]) {
        self.plans = plans.to_vec();
    }

    /// Keys of step kinds re-planned since the last call.
    pub(crate) fn take_replanned(&mut self) -> Vec<u32> {
        std::mem::take(&mut self.replanned)
    }

    /// An op declares what its kernels will touch: it extends the traced
    /// lifetimes of step buffers (the runtime is told too, and the CPU
    /// refuses any other range).
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

    /// The step buffer allocated last carries `tag` in the plan made from
    /// this trace (see [`StepPlan::tags`]); nothing while not tracing.
    pub(crate) fn tag_last_step(&mut self, tag: u32) {
        if self.tracing {
            self.trace.tag_last(tag);
        }
    }
}
