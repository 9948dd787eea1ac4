//! Liveness-planned step memory.
//!
//! A step allocates the same sequence every time, so one traced step says
//! everything: each buffer's size, the op tick it is born at and the last op
//! tick that touches it (ops declare every buffer a kernel reads or writes,
//! [`crate::Step::uses`]; the CPU backend refuses a kernel touching a buffer
//! its op did not declare, so the declarations cannot fall behind the
//! kernels). From that trace [`plan`] gives every buffer an offset so that
//! buffers alive at the same time never share a byte, reusing the bytes of
//! those that died — greedy by size, best fit, as XLA's heap simulator and
//! Pisarchyk & Lee (2020) do — and [`StepPlan`] records the plan's peak
//! against the lower bound no placement can beat: the most bytes alive at
//! any one tick.

use super::Shape;

/// One step allocation as traced: its aligned size, where it was placed,
/// and the ticks it is alive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Lifetime {
    /// The first op tick that can touch it (the op that allocated it).
    pub born: u32,
    /// The last op tick that touched it (`born` if none did).
    pub last: u32,
}

impl Lifetime {
    pub fn overlaps(&self, other: &Lifetime) -> bool {
        self.born <= other.last && other.born <= self.last
    }
}

/// A step buffer with its lifetime and its offset above the mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PlannedBuf {
    pub what: &'static str,
    /// Its element type's name ([`super::Element::NAME`]).
    pub element: &'static str,
    #[serde(serialize_with = "shape_dims")]
    pub shape: Shape,
    /// Bytes asked for.
    pub bytes: usize,
    /// Bytes held: `bytes` rounded up to the arena's alignment.
    pub size: usize,
    pub life: Lifetime,
    /// The longest stretch it sits untouched while alive: from a touch
    /// (`born`) to the next one (`last`), if two touches are a tick or more
    /// apart. What recomputing it could save: a value kept from forward for
    /// backward is idle in between.
    pub idle: Option<Lifetime>,
    /// Bytes above the mark.
    pub offset: usize,
}

fn shape_dims<S: serde::Serializer>(shape: &Shape, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(shape.dims())
}

impl PlannedBuf {
    pub fn end(&self) -> usize {
        self.offset + self.size
    }

    /// A buffer of `size` bytes alive from `born` to `last`, not yet placed
    /// (for tests of planning and of what uses plans).
    #[cfg(test)]
    pub(crate) fn unplaced(what: &'static str, size: usize, born: u32, last: u32) -> Self {
        Self {
            what,
            element: "f32",
            shape: Shape::new(&[size / 4]),
            bytes: size,
            size,
            life: Lifetime { born, last },
            idle: None,
            offset: 0,
        }
    }
}

/// The offsets of one kind of step (a full training step, an evaluation
/// step, a shorter last batch...), keyed by the caller.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StepPlan {
    pub key: u32,
    /// In allocation order.
    pub bufs: Vec<PlannedBuf>,
    /// Bytes above the mark the planned step needs.
    pub peak: usize,
    /// The most bytes alive at any one tick: no placement needs less.
    pub lower_bound: usize,
    /// What bump allocation (every buffer until the reset) needs.
    pub bump_bytes: usize,
    /// Bytes lost to alignment, summed over the buffers.
    pub alignment_waste: usize,
    /// The ticks of ops that recomputed a value backward read, rather than
    /// ran the step's own ops, in order (see [`Trace::recompute_ticks`]).
    #[serde(skip)]
    pub recompute_ticks: Vec<u32>,
    /// Seconds the step's convolutions take beyond the fastest algorithms
    /// timed on the device, where workspaces were held below theirs (see
    /// [`Trace::slower_seconds`]).
    #[serde(skip)]
    pub slower_seconds: f64,
}

impl StepPlan {
    /// The tick at which the most bytes are alive, and those bytes.
    pub fn peak_tick(&self) -> (u32, usize) {
        let last = self.bufs.iter().map(|b| b.life.last).max().unwrap_or(0);
        (0..=last)
            .map(|t| (t, self.live_at(t).map(|b| b.size).sum::<usize>()))
            .max_by_key(|&(t, bytes)| (bytes, std::cmp::Reverse(t)))
            .unwrap_or((0, 0))
    }

    /// The buffers alive at tick `t`.
    pub fn live_at(&self, t: u32) -> impl Iterator<Item = &PlannedBuf> + '_ {
        self.bufs.iter().filter(move |b| b.life.born <= t && t <= b.life.last)
    }

    /// The largest buffers alive at the lower bound's tick, largest first.
    pub fn top_live(&self, n: usize) -> Vec<PlannedBuf> {
        let (t, _) = self.peak_tick();
        let mut live: Vec<PlannedBuf> = self.live_at(t).copied().collect();
        live.sort_by_key(|b| std::cmp::Reverse(b.size));
        live.truncate(n);
        live
    }

    pub fn ratio(&self) -> f64 {
        if self.lower_bound == 0 {
            1.0
        } else {
            self.peak as f64 / self.lower_bound as f64
        }
    }
}

/// What a traced step records, in allocation order; cleared (never freed)
/// at every step.
#[derive(Debug, Default)]
pub(crate) struct Trace {
    pub bufs: Vec<PlannedBuf>,
    /// Op ticks so far in this step.
    pub clock: u32,
    /// Recomputations under way: their ops' ticks are...
    pub recomputing: u32,
    /// ...these, in order. The step's own ops are the same whatever it
    /// recomputes, so its ticks less these line two traces up op by op.
    pub recompute_ticks: Vec<u32>,
    /// Seconds the ops so far lose to slower algorithms than the fastest
    /// the device timed: a workspace is part of the plan, so holding one
    /// down is a cost the memory budget weighs like a recomputation's.
    pub slower_seconds: f64,
}

impl Trace {
    pub fn clear(&mut self) {
        self.bufs.clear();
        self.clock = 0;
        self.recomputing = 0;
        self.recompute_ticks.clear();
        self.slower_seconds = 0.0;
    }

    /// A buffer allocated now, at `offset` above the mark.
    pub fn alloc(
        &mut self,
        what: &'static str,
        element: &'static str,
        shape: Shape,
        bytes: usize,
        size: usize,
        offset: usize,
    ) {
        let born = self.clock + 1;
        self.bufs.push(PlannedBuf {
            what,
            element,
            shape,
            bytes,
            size,
            life: Lifetime { born, last: born },
            idle: None,
            offset,
        });
    }

    /// The next op tick: the op's kernels touch what it declares next.
    pub fn tick(&mut self) {
        self.clock += 1;
        if self.recomputing > 0 {
            self.recompute_ticks.push(self.clock);
        }
    }

    /// Bytes `[start, end)` above the mark were touched at the current tick.
    /// Two buffers share bytes only if their lifetimes are disjoint, so the
    /// touched one is the latest born of those overlapping the range.
    pub fn touch(&mut self, start: usize, end: usize) {
        let t = self.clock;
        let hit = self
            .bufs
            .iter_mut()
            .rev()
            .find(|b| b.life.born <= t && b.size > 0 && b.offset < end && start < b.end());
        if let Some(b) = hit {
            let gap = t.saturating_sub(b.life.last);
            if gap > 1 && b.idle.is_none_or(|i| gap > i.last - i.born) {
                b.idle = Some(Lifetime {
                    born: b.life.last,
                    last: t,
                });
            }
            b.life.last = b.life.last.max(t);
        }
    }
}

/// Places every buffer of a traced step: largest first, each at the lowest
/// best-fitting gap among the buffers already placed that are alive at the
/// same time.
pub fn plan(key: u32, traced: &[PlannedBuf]) -> StepPlan {
    let mut order: Vec<usize> = (0..traced.len()).collect();
    order.sort_by_key(|&i| (std::cmp::Reverse(traced[i].size), traced[i].life.born, i));
    let mut bufs: Vec<PlannedBuf> = traced.to_vec();
    let mut placed: Vec<usize> = Vec::with_capacity(bufs.len());
    let mut busy: Vec<(usize, usize)> = Vec::new();
    for &i in &order {
        let me = bufs[i];
        busy.clear();
        busy.extend(
            placed
                .iter()
                .map(|&j| bufs[j])
                .filter(|o| o.life.overlaps(&me.life) && o.size > 0)
                .map(|o| (o.offset, o.end())),
        );
        busy.sort_unstable();
        // Best fit: the smallest gap that holds it; else above them all.
        let mut best: Option<(usize, usize)> = None;
        let mut cursor = 0;
        for &(start, end) in &busy {
            if start > cursor {
                let gap = start - cursor;
                if gap >= me.size && best.is_none_or(|(g, _)| gap < g) {
                    best = Some((gap, cursor));
                }
            }
            cursor = cursor.max(end);
        }
        bufs[i].offset = best.map_or(cursor, |(_, at)| at);
        placed.push(i);
    }
    let peak = bufs.iter().map(|b| b.end()).max().unwrap_or(0);
    let bump_bytes = traced.iter().map(|b| b.size).sum();
    let mut plan = StepPlan {
        key,
        bufs,
        peak,
        lower_bound: 0,
        bump_bytes,
        alignment_waste: traced.iter().map(|b| b.size - b.bytes).sum(),
        recompute_ticks: Vec::new(),
        slower_seconds: 0.0,
    };
    plan.lower_bound = plan.peak_tick().1;
    plan
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buf(size: usize, born: u32, last: u32) -> PlannedBuf {
        PlannedBuf::unplaced("b", size, born, last)
    }

    /// Every pair of buffers alive at the same time is disjoint in bytes.
    /// Checked op tick by op tick, from the lifetimes alone (not through
    /// [`Lifetime::overlaps`], which the planner itself relies on): at each
    /// tick, the live buffers sorted by offset must each end before the
    /// next begins.
    pub(crate) fn assert_no_overlap(plan: &StepPlan) {
        let last = plan.bufs.iter().map(|b| b.life.last).max().unwrap_or(0);
        let mut live: Vec<&PlannedBuf> = Vec::new();
        for t in 0..=last {
            live.clear();
            live.extend(
                plan.bufs
                    .iter()
                    .filter(|b| b.size > 0 && b.life.born <= t && t <= b.life.last),
            );
            live.sort_by_key(|b| b.offset);
            for pair in live.windows(2) {
                assert!(
                    pair[0].end() <= pair[1].offset,
                    "at op {t}, {:?} and {:?} are both alive and share bytes",
                    pair[0],
                    pair[1]
                );
            }
        }
    }

    #[test]
    fn dead_buffers_give_their_bytes_to_later_ones() {
        let traced = [buf(1024, 1, 2), buf(1024, 3, 4), buf(256, 1, 4)];
        let p = plan(0, &traced);
        assert_no_overlap(&p);
        assert_eq!(p.bufs[0].offset, p.bufs[1].offset, "disjoint lifetimes share");
        assert_eq!(p.peak, 1280);
        assert_eq!(p.lower_bound, 1280);
        assert_eq!(p.bump_bytes, 2304);
    }

    #[test]
    fn random_traces_never_overlap_and_stay_near_the_lower_bound() {
        let mut rng = crate::rng::SplitMix64::new(7);
        let mut worst: f64 = 1.0;
        for _ in 0..300 {
            let n = 1 + rng.below(40) as usize;
            let traced: Vec<PlannedBuf> = (0..n)
                .map(|_| {
                    let born = 1 + rng.below(30) as u32;
                    let last = born + rng.below(10) as u32;
                    buf(256 * (1 + rng.below(64) as usize), born, last)
                })
                .collect();
            let p = plan(1, &traced);
            assert_no_overlap(&p);
            assert!(p.peak >= p.lower_bound);
            worst = worst.max(p.ratio());
        }
        // Random interval sets are harder than a network's; still close.
        assert!(worst < 1.6, "worst peak / lower bound {worst}");
    }

    #[test]
    fn a_touch_extends_the_latest_born_buffer_over_the_range() {
        let mut t = Trace::default();
        t.alloc("a", "f32", Shape::new(&[64]), 256, 256, 0);
        t.tick();
        t.touch(0, 256);
        // A later buffer placed over a's bytes (a is dead by then).
        t.tick();
        t.alloc("b", "f32", Shape::new(&[64]), 256, 256, 0);
        t.tick();
        t.touch(0, 256);
        assert_eq!(t.bufs[0].life, Lifetime { born: 1, last: 1 });
        assert_eq!(t.bufs[1].life, Lifetime { born: 3, last: 3 });
    }
}
