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

use crate::base::Shape;

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
    /// Whether the two are alive at one tick: then they may not share a byte.
    pub fn overlaps(&self, other: &Lifetime) -> bool {
        self.born <= other.last && other.born <= self.last
    }
}

/// A step buffer with its lifetime and its offset above the mark.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct PlannedBuf {
    /// What it holds, as its op names it ("conv2d output").
    pub what: &'static str,
    /// Its element type's name ([`super::Element::NAME`]).
    pub element: &'static str,
    /// Its shape.
    #[serde(serialize_with = "shape_dims")]
    pub shape: Shape,
    /// Bytes asked for.
    pub bytes: usize,
    /// Bytes held: `bytes` rounded up to the arena's alignment.
    pub size: usize,
    /// The ticks it is alive.
    pub life: Lifetime,
    /// The longest stretch it sits untouched while alive (the first of
    /// equally long ones): from a touch (`born`) to the next one (`last`),
    /// if two touches are more than a tick apart. What recomputing it could
    /// save: a value kept from forward for backward is idle in between.
    pub idle: Option<Lifetime>,
    /// Bytes above the mark.
    pub offset: usize,
}

fn shape_dims<S: serde::Serializer>(shape: &Shape, s: S) -> Result<S::Ok, S::Error> {
    s.collect_seq(shape.dims())
}

impl PlannedBuf {
    /// Bytes above the mark where it ends.
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
    /// Which step it plans, as its caller numbers its kinds of step (a
    /// training session: see [`crate::train::StepKind`]).
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
    /// ran the step's own ops, in order (see `Trace::recompute_ticks`).
    #[serde(skip)]
    pub recompute_ticks: Vec<u32>,
    /// Seconds the step's convolutions take beyond the fastest algorithms
    /// timed on the device, where workspaces were held below theirs (see
    /// `Trace::slower_seconds`).
    #[serde(skip)]
    pub slower_seconds: f64,
    /// Buffers the op that allocated them numbered, as `(index in bufs,
    /// tag)` in allocation order: what the number means is the op's (a
    /// convolution's workspace: which shape and pass; see
    /// `Trace::tag_last`).
    #[serde(skip)]
    pub tags: Vec<(usize, u32)>,
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

    /// The peak against the lower bound: 1 is a placement no plan can beat.
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
    /// See [`StepPlan::tags`].
    pub tags: Vec<(usize, u32)>,
}

impl Trace {
    pub fn clear(&mut self) {
        self.bufs.clear();
        self.clock = 0;
        self.recomputing = 0;
        self.recompute_ticks.clear();
        self.slower_seconds = 0.0;
        self.tags.clear();
    }

    /// The buffer allocated last carries `tag`, the allocating op's number
    /// for it: so that what reads the plan can tell, say, which
    /// convolution a workspace at the peak belongs to.
    pub fn tag_last(&mut self, tag: u32) {
        if let Some(last) = self.bufs.len().checked_sub(1) {
            self.tags.push((last, tag));
        }
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
        tags: Vec::new(),
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
    fn random_traces_never_overlap_and_stay_between_the_lower_bound_and_bump() {
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
            // Never above what bump allocation holds, so an arena sized for
            // a step's bump bytes holds its plan (the Tree-LSTM's notes in
            // docs/language-models.md rely on it).
            assert!(p.peak <= p.bump_bytes, "peak {} above bump {}", p.peak, p.bump_bytes);
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

    fn trace_alloc(t: &mut Trace, what: &'static str, size: usize, offset: usize) {
        t.alloc(what, "f32", Shape::new(&[size / 4]), size, size, offset);
    }

    /// A touch of `[256, 512)` reaches the buffer that holds those bytes and
    /// none beside it: not one that ends where the range starts, not one
    /// that starts where it ends, not an empty one inside it, and not one
    /// over the same bytes whose op has not run yet. Each of those is
    /// allocated after the one touched, so a touch that wrongly reached it
    /// would stop there first.
    #[test]
    fn a_touch_reaches_only_the_buffer_holding_its_bytes() {
        let mut t = Trace::default();
        trace_alloc(&mut t, "held", 256, 256);
        trace_alloc(&mut t, "below", 256, 0);
        trace_alloc(&mut t, "above", 256, 512);
        trace_alloc(&mut t, "empty", 0, 300);
        for _ in 0..3 {
            t.tick();
        }
        // Allocated by the op after this one (born at tick 4).
        trace_alloc(&mut t, "unborn", 256, 256);
        t.touch(256, 512);
        let lives: Vec<(&str, Lifetime)> = t.bufs.iter().map(|b| (b.what, b.life)).collect();
        let life = |born, last| Lifetime { born, last };
        assert_eq!(
            lives,
            [
                ("held", life(1, 3)),
                ("below", life(1, 1)),
                ("above", life(1, 1)),
                ("empty", life(1, 1)),
                ("unborn", life(4, 4)),
            ]
        );
    }

    /// A buffer's idle stretch is the longest between two of its touches
    /// (the first of equally long ones), and none while every touch follows
    /// the last by one tick.
    #[test]
    fn the_idle_stretch_is_the_first_longest_gap_between_touches() {
        let mut t = Trace::default();
        trace_alloc(&mut t, "kept", 256, 0);
        let mut touch_at = |tick: u32| {
            while t.clock < tick {
                t.tick();
            }
            t.touch(0, 256);
            (t.bufs[0].life, t.bufs[0].idle)
        };
        let life = |born, last| Lifetime { born, last };
        assert_eq!(touch_at(1), (life(1, 1), None));
        assert_eq!(touch_at(2), (life(1, 2), None), "one tick apart: never idle");
        assert_eq!(touch_at(4), (life(1, 4), Some(life(2, 4))));
        assert_eq!(
            touch_at(7),
            (life(1, 7), Some(life(4, 7))),
            "a longer stretch replaces it"
        );
        assert_eq!(
            touch_at(10),
            (life(1, 10), Some(life(4, 7))),
            "as long: the first stays"
        );
        assert_eq!(
            touch_at(12),
            (life(1, 12), Some(life(4, 7))),
            "shorter: the first stays"
        );
    }

    #[test]
    fn ticks_count_ops_and_name_those_that_recompute() {
        let mut t = Trace::default();
        t.tick();
        t.recomputing = 1;
        t.tick();
        t.tick();
        t.recomputing = 0;
        t.tick();
        assert_eq!((t.clock, t.recompute_ticks.clone()), (4, vec![2, 3]));
        // A buffer allocated now is born with the next op.
        trace_alloc(&mut t, "next", 256, 0);
        assert_eq!(t.bufs[0].life, Lifetime { born: 5, last: 5 });
    }

    #[test]
    fn a_cleared_trace_starts_the_next_step_from_nothing() {
        let mut t = Trace::default();
        trace_alloc(&mut t, "a", 256, 0);
        t.recomputing = 1;
        t.tick();
        t.slower_seconds = 0.5;
        t.clear();
        assert!(t.bufs.is_empty() && t.recompute_ticks.is_empty());
        assert_eq!((t.clock, t.recomputing, t.slower_seconds), (0, 0, 0.0));
    }

    /// Lifetimes are closed ranges of ticks: two that share only an end
    /// overlap, two a tick apart do not, whichever comes first.
    #[test]
    fn lifetimes_that_share_a_tick_overlap() {
        let life = |born, last| Lifetime { born, last };
        for (a, b, overlap) in [
            (life(1, 3), life(3, 5), true),
            (life(1, 3), life(4, 5), false),
            (life(2, 2), life(2, 2), true),
            (life(1, 9), life(4, 5), true),
        ] {
            assert_eq!(a.overlaps(&b), overlap, "{a:?} and {b:?}");
            assert_eq!(b.overlaps(&a), overlap, "{b:?} and {a:?}");
        }
    }

    /// Best fit: a buffer born after others died takes the smallest gap
    /// between those still alive that holds it, and the lowest of equally
    /// small ones. Buffers of 256 bytes, all alive at tick 1, are stacked;
    /// those alive at tick 5 (marked) leave the gaps a sixth, born then,
    /// chooses from.
    #[test]
    fn a_buffer_takes_the_smallest_gap_that_fits_the_lowest_of_equal_ones() {
        for (alive, at) in [
            // Free at 5: [0, 256) and [512, 768), the same size: the lower.
            (&[false, true, false, true][..], 0),
            // Free at 5: [0, 512) and [768, 1024): the smaller.
            (&[false, false, true, false, true][..], 768),
        ] {
            let mut traced: Vec<PlannedBuf> = alive.iter().map(|&on| buf(256, 1, if on { 5 } else { 1 })).collect();
            traced.push(buf(256, 5, 5));
            let p = plan(0, &traced);
            assert_no_overlap(&p);
            let offsets: Vec<usize> = p.bufs.iter().map(|b| b.offset).collect();
            let stacked: Vec<usize> = (0..alive.len()).map(|i| 256 * i).collect();
            assert_eq!(offsets[..alive.len()], stacked[..]);
            assert_eq!(offsets[alive.len()], at, "{alive:?}: {offsets:?}");
            assert_eq!(p.peak, 256 * alive.len(), "it fits below the others' top");
        }
    }

    /// A plan's figures, exactly: its peak tick (the first of equal ones),
    /// what is alive there, the largest of those, the ratio of its peak to
    /// the lower bound, and the bytes lost to alignment.
    #[test]
    fn a_plans_figures_are_read_off_its_buffers() {
        let mut traced = vec![
            buf(512, 1, 2),
            buf(256, 2, 3),
            buf(1024, 3, 3),
            buf(768, 4, 6),
            buf(512, 5, 6),
        ];
        // Asked for 1000 of its 1024 bytes.
        traced[2].bytes = 1000;
        let p = plan(0, &traced);
        assert_no_overlap(&p);
        // Alive: 512 at 1, 768 at 2, 1280 at 3, 768 at 4, 1280 at 5 and 6.
        assert_eq!(p.peak_tick(), (3, 1280));
        assert_eq!(p.lower_bound, 1280);
        let live = |t| p.live_at(t).map(|b| b.size).collect::<Vec<_>>();
        assert_eq!(live(2), [512, 256], "born and last ticks are both alive");
        assert_eq!(live(3), [256, 1024]);
        assert_eq!(live(7), Vec::<usize>::new());
        let sizes = |v: Vec<PlannedBuf>| v.iter().map(|b| b.size).collect::<Vec<_>>();
        assert_eq!(sizes(p.top_live(1)), [1024]);
        assert_eq!(sizes(p.top_live(5)), [1024, 256], "largest first, only those alive");
        assert_eq!(p.alignment_waste, 24);
        assert_eq!(p.bump_bytes, 512 + 256 + 1024 + 768 + 512);
        // The 256 bytes alive at 2 and 3 go above the 1024: the peak is
        // the bound.
        assert_eq!(p.peak, 1280);
        assert_eq!(p.ratio(), 1.0);
        let against = |peak, lower_bound| {
            StepPlan {
                peak,
                lower_bound,
                ..p.clone()
            }
            .ratio()
        };
        assert_eq!(against(1920, 1280), 1.5);
        assert_eq!(against(0, 0), 1.0, "an empty step is at its bound");
    }
}
