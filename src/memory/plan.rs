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
    /// The tick at which the most bytes are alive (the first of equally
    /// full ones), and those bytes.
    ///
    /// One sweep over the ticks: the budget's search asks this of every dry
    /// run, and summing the live buffers tick by tick was a fifth of a
    /// ResNet-50's search.
    pub fn peak_tick(&self) -> (u32, usize) {
        let last = self.bufs.iter().map(|b| b.life.last).max().unwrap_or(0) as usize;
        // Bytes born at each tick, and bytes whose last tick it is.
        let mut born = vec![0usize; last + 1];
        let mut dying = vec![0usize; last + 1];
        for b in &self.bufs {
            born[b.life.born as usize] += b.size;
            dying[b.life.last as usize] += b.size;
        }
        let mut live = 0;
        let mut peak = (0, 0);
        for t in 0..=last {
            live += born[t];
            if live > peak.1 {
                peak = (t as u32, live);
            }
            live -= dying[t];
        }
        peak
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
#[derive(Debug)]
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
    /// Whether every buffer so far lies at or above the end of every one
    /// before it, as in a bump-allocated step: then [`Trace::touch`] finds
    /// the touched buffer by its offset rather than by a scan of them all.
    bumped: bool,
    /// The end of the highest buffer so far.
    top: usize,
}

impl Default for Trace {
    fn default() -> Self {
        Self {
            bufs: Vec::new(),
            clock: 0,
            recomputing: 0,
            recompute_ticks: Vec::new(),
            slower_seconds: 0.0,
            tags: Vec::new(),
            bumped: true,
            top: 0,
        }
    }
}

impl Trace {
    pub fn clear(&mut self) {
        self.bumped = true;
        self.top = 0;
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
        self.bumped &= offset >= self.top;
        self.top = self.top.max(offset + size);
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
        let touched = |b: &PlannedBuf| b.life.born <= t && b.size > 0 && b.offset < end && start < b.end();
        let hit = match self.bumped {
            // Offsets rise with the buffers, each above the last's end: only
            // those below `end` may overlap, and once one ends at or below
            // `start` every earlier one does too.
            true => {
                let below = self.bufs.partition_point(|b| b.offset < end);
                self.bufs[..below]
                    .iter_mut()
                    .rev()
                    .take_while(|b| b.end() > start)
                    .find(|b| touched(b))
            }
            false => self.bufs.iter_mut().rev().find(|b| touched(b)),
        };
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
    let last = bufs.iter().map(|b| b.life.last).max().unwrap_or(0);
    let mut placed = ByTicks::new(last);
    let mut busy: Vec<(usize, usize)> = Vec::new();
    for &i in &order {
        let me = bufs[i];
        busy.clear();
        placed.overlapping(me.life, &mut busy);
        bufs[i].offset = best_fit(&mut busy, me.size);
        if me.size > 0 {
            placed.insert(me.life, bufs[i].offset, bufs[i].end());
        }
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

/// Where `size` bytes go among the byte ranges `busy` (sorted here): the
/// smallest gap that holds them, the lowest of equal ones; else above
/// them all.
fn best_fit(busy: &mut [(usize, usize)], size: usize) -> usize {
    busy.sort_unstable();
    let mut best: Option<(usize, usize)> = None;
    let mut cursor = 0;
    for &(start, end) in busy.iter() {
        if start > cursor {
            let gap = start - cursor;
            if gap >= size && best.is_none_or(|(g, _)| gap < g) {
                best = Some((gap, cursor));
            }
        }
        cursor = cursor.max(end);
    }
    best.map_or(cursor, |(_, at)| at)
}

/// Ticks in a block of [`ByTicks`].
const BLOCK_TICKS: u32 = 32;

/// The buffers placed so far that hold bytes, filed under every block of
/// [`BLOCK_TICKS`] ticks their lifetimes reach, so that a buffer being
/// placed reads only those alive near its own ticks. Planning is most of a
/// dry run and a budget's search makes thousands; reading every placed
/// buffer for each one was a quarter of a ResNet-50's search.
struct ByTicks {
    /// Each block's buffers: lifetime, first byte, end.
    blocks: Vec<Vec<(Lifetime, usize, usize)>>,
}

impl ByTicks {
    fn new(last_tick: u32) -> Self {
        Self {
            blocks: vec![Vec::new(); (last_tick / BLOCK_TICKS) as usize + 1],
        }
    }

    fn insert(&mut self, life: Lifetime, start: usize, end: usize) {
        for block in &mut self.blocks[(life.born / BLOCK_TICKS) as usize..=(life.last / BLOCK_TICKS) as usize] {
            block.push((life, start, end));
        }
    }

    /// The byte ranges of those alive at some tick of `life`, each once.
    fn overlapping(&self, life: Lifetime, out: &mut Vec<(usize, usize)>) {
        let first = life.born / BLOCK_TICKS;
        for k in first..=life.last / BLOCK_TICKS {
            for &(other, start, end) in &self.blocks[k as usize] {
                // One found in several blocks is taken in the first of
                // those that both lifetimes reach.
                if other.overlaps(&life) && (other.born / BLOCK_TICKS).max(first) == k {
                    out.push((start, end));
                }
            }
        }
    }
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

    /// Every buffer goes where a scan of all the placed buffers (the
    /// planner before it filed them by ticks, with the same best fit) puts it: lifetimes across
    /// many blocks of ticks, empty buffers and equal sizes included.
    #[test]
    fn filing_placed_buffers_by_ticks_places_as_a_scan_of_them_all() {
        fn by_scan(traced: &[PlannedBuf]) -> Vec<usize> {
            let mut order: Vec<usize> = (0..traced.len()).collect();
            order.sort_by_key(|&i| (std::cmp::Reverse(traced[i].size), traced[i].life.born, i));
            let mut bufs = traced.to_vec();
            let mut placed: Vec<usize> = Vec::new();
            for &i in &order {
                let me = bufs[i];
                let mut busy: Vec<(usize, usize)> = placed
                    .iter()
                    .map(|&j| bufs[j])
                    .filter(|o| o.life.overlaps(&me.life) && o.size > 0)
                    .map(|o| (o.offset, o.end()))
                    .collect();
                bufs[i].offset = best_fit(&mut busy, me.size);
                placed.push(i);
            }
            bufs.iter().map(|b| b.offset).collect()
        }
        let mut rng = crate::rng::SplitMix64::new(3);
        for _ in 0..200 {
            let n = rng.below(80) as usize;
            let traced: Vec<PlannedBuf> = (0..n)
                .map(|_| {
                    let born = rng.below(300) as u32;
                    let long = [1, 10, 100, 400][rng.below(4) as usize];
                    buf(256 * rng.below(8) as usize, born, born + rng.below(long) as u32)
                })
                .collect();
            let offsets: Vec<usize> = plan(1, &traced).bufs.iter().map(|b| b.offset).collect();
            assert_eq!(offsets, by_scan(&traced));
        }
    }

    /// The sweep finds what summing the live buffers tick by tick finds:
    /// the fullest tick, the first of equally full ones.
    #[test]
    fn the_peak_tick_is_the_first_fullest_one() {
        let mut rng = crate::rng::SplitMix64::new(11);
        for _ in 0..300 {
            let n = rng.below(30) as usize;
            let traced: Vec<PlannedBuf> = (0..n)
                .map(|_| {
                    let born = rng.below(20) as u32;
                    // Sizes from a few values, so that ties are common.
                    buf(256 * rng.below(3) as usize, born, born + rng.below(6) as u32)
                })
                .collect();
            let p = plan(1, &traced);
            let last = p.bufs.iter().map(|b| b.life.last).max().unwrap_or(0);
            let mut summed = (0, 0);
            for t in 0..=last {
                let bytes: usize = p.live_at(t).map(|b| b.size).sum();
                if bytes > summed.1 {
                    summed = (t, bytes);
                }
            }
            assert_eq!(p.peak_tick(), summed, "{traced:?}");
        }
    }

    /// In a bump-allocated step a touch finds its buffer by offset; it
    /// must reach the same one a scan of every buffer reaches, empty
    /// buffers, touches across several buffers and buffers not yet born
    /// included.
    #[test]
    fn a_bumped_trace_touches_what_a_scan_of_every_buffer_touches() {
        let mut rng = crate::rng::SplitMix64::new(5);
        for _ in 0..200 {
            let (mut bumped, mut scanned) = (Trace::default(), Trace::default());
            scanned.bumped = false;
            let mut top = 0;
            for _ in 0..60 {
                match rng.below(4) {
                    0 => {
                        let size = 256 * rng.below(3) as usize;
                        for t in [&mut bumped, &mut scanned] {
                            t.alloc("b", "f32", Shape::new(&[size / 4]), size, size, top);
                        }
                        top += size + 256 * rng.below(2) as usize;
                    }
                    1 => {
                        bumped.tick();
                        scanned.tick();
                    }
                    _ => {
                        let start = rng.below(top as u64 + 1) as usize;
                        let end = start + 1 + rng.below(600) as usize;
                        bumped.touch(start, end);
                        scanned.touch(start, end);
                    }
                }
                assert!(bumped.bumped);
                assert_eq!(bumped.bufs, scanned.bufs);
            }
        }
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
