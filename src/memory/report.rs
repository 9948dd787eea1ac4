//! The memory report: where every byte of the arena goes, as a table for
//! people, JSON for machines, and an SVG timeline of one step (a band per
//! buffer at its planned offset, from the op that makes it to the last op
//! that touches it — in the spirit of PyTorch's memory snapshot viewer).

use super::plan::{PlannedBuf, StepPlan};
use super::PersistentBuf;
use crate::base::ByteSize;
use std::fmt::Write;

/// The steps of a task whose every step differs (a batch of parse trees),
/// each bump-allocated above the mark: the largest any epoch can take,
/// which sizes the arena, and what the first epoch's steps hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct DynamicSteps {
    /// The largest step's bytes, bump-allocated: the step region.
    pub largest_bytes: usize,
    /// The most of them alive at one op: no placement of that step needs
    /// less.
    pub largest_lower_bound_bytes: usize,
    /// The first epoch's steps.
    pub steps: usize,
    /// What they hold on average...
    pub mean_bytes: usize,
    /// ...and at most.
    pub most_bytes: usize,
}

/// Everything `bumpgrad memory` prints.
#[derive(Debug, Clone, serde::Serialize)]
pub struct MemoryReport {
    /// The one allocation: persistent bytes plus the largest plan's peak.
    pub arena_bytes: usize,
    /// The persistent region: parameters, optimizer state, the data set.
    pub persistent_bytes: usize,
    /// The training step's planned peak, its lower bound, and what bump
    /// allocation would hold.
    pub plan_peak_bytes: usize,
    /// The most bytes alive at one op of the training step: no placement
    /// needs less.
    pub lower_bound_bytes: usize,
    /// What the training step would hold bump-allocated, every buffer
    /// until the reset.
    pub bump_bytes: usize,
    /// Bytes lost to 256-byte alignment: persistent region plus the
    /// training step's buffers.
    pub alignment_waste_bytes: usize,
    /// Every persistent allocation, in order.
    pub persistent: Vec<PersistentBuf>,
    /// Every step kind's plan; the training step's first.
    pub plans: Vec<StepPlan>,
    /// Each plan's name, in the order of `plans`, where the planner named
    /// them (a step of each length bucket); else the table asks its caller.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub plan_names: Vec<String>,
    /// Bytes `train` adds to the arena for timed convolution algorithms'
    /// workspaces, where it times them (a measured arena on a GPU).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tuning_bytes: Option<usize>,
    /// Under a memory budget: what the training step recomputes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recomputed: Option<Recomputed>,
    /// The persistent region's bytes by element type (alignment padding
    /// included), largest first.
    pub persistent_by_type: Vec<TypeBytes>,
    /// The bytes alive at the training step's peak by element type
    /// (padding included, so they sum to the bytes live there), largest
    /// first: what a mixed-precision step keeps in bf16 against fp32.
    pub step_peak_by_type: Vec<TypeBytes>,
    /// For a task whose every step is a shape of its own (trees): the
    /// bump-allocated steps, in place of plans.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub dynamic: Option<DynamicSteps>,
}

/// Bytes of one element type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct TypeBytes {
    /// The element type's name: "f32", "bf16", "u32", "u8".
    pub element: &'static str,
    /// Its bytes.
    pub bytes: usize,
}

/// `(element, bytes)` pairs summed by element, largest first.
fn by_type(items: impl Iterator<Item = (&'static str, usize)>) -> Vec<TypeBytes> {
    let mut sums: Vec<TypeBytes> = Vec::new();
    for (element, bytes) in items {
        match sums.iter_mut().find(|t| t.element == element) {
            Some(t) => t.bytes += bytes,
            None => sums.push(TypeBytes { element, bytes }),
        }
    }
    sums.sort_by_key(|t| (std::cmp::Reverse(t.bytes), t.element));
    sums
}

impl MemoryReport {
    /// A report of `persistent` and `plans` (the first plan is the training
    /// step's).
    pub fn new(persistent: &[PersistentBuf], plans: &[StepPlan]) -> Self {
        let persistent_bytes = persistent.iter().map(|p| p.offset + p.size).max().unwrap_or(0);
        let step = plans.first();
        let peak_all = plans.iter().map(|p| p.peak).max().unwrap_or(0);
        Self {
            arena_bytes: persistent_bytes + peak_all,
            persistent_bytes,
            plan_peak_bytes: step.map_or(0, |p| p.peak),
            lower_bound_bytes: step.map_or(0, |p| p.lower_bound),
            bump_bytes: step.map_or(0, |p| p.bump_bytes),
            alignment_waste_bytes: persistent.iter().map(|p| p.size - p.bytes).sum::<usize>()
                + step.map_or(0, |p| p.alignment_waste),
            persistent: persistent.to_vec(),
            plans: plans.to_vec(),
            plan_names: Vec::new(),
            tuning_bytes: None,
            recomputed: None,
            persistent_by_type: by_type(persistent.iter().map(|p| (p.element, p.size))),
            step_peak_by_type: step.map_or_else(Vec::new, |plan| {
                let (tick, _) = plan.peak_tick();
                by_type(plan.live_at(tick).map(|b| (b.element, b.size)))
            }),
            dynamic: None,
        }
    }

    /// The same report, its plans called `names` (in the order of `plans`).
    pub fn named(self, names: Vec<String>) -> Self {
        Self {
            plan_names: names,
            ..self
        }
    }

    /// The tables a person reads.
    pub fn table(&self, kind_name: impl Fn(u32) -> &'static str) -> String {
        let mut out = String::new();
        let b = |n: usize| ByteSize(n).to_string();
        let _ = writeln!(out, "arena: {} in one allocation", b(self.arena_bytes));
        if let Some(r) = &self.recomputed {
            let kinds: Vec<String> = r
                .kinds
                .iter()
                .map(|k| format!("{} of {} {}s ({})", k.dropped, k.of, k.what, b(k.bytes)))
                .collect();
            let _ = writeln!(
                out,
                "{}: the training step recomputes {} in backward rather than keep them{} (step {} without)",
                match r.reason {
                    RecomputeReason::Cheap => "recomputed by default, made again without a multiply-add",
                    RecomputeReason::Lean => "recomputed by default, the least step within the allowed time",
                    RecomputeReason::MemoryBudget | RecomputeReason::ArenaSize => "memory budget",
                },
                kinds.join(", "),
                match r.transient_chains {
                    true => ", chains of them made again for each reader rather than held",
                    false => "",
                },
                b(r.unbudgeted_step_bytes),
            );
            let _ = writeln!(
                out,
                "  predicted extra time: {:.2} ms a step ({:.1}% more convolution multiply-adds); by the model of the step's live bytes, no choice {} adds less than {:.2} ms",
                r.predicted_extra_seconds * 1e3,
                100.0 * r.extra_multiply_adds as f64 / r.step_multiply_adds.max(1) as f64,
                match r.reason {
                    RecomputeReason::Cheap | RecomputeReason::Lean => "of as small a step",
                    RecomputeReason::MemoryBudget | RecomputeReason::ArenaSize => "within the budget",
                },
                r.least_extra_seconds * 1e3,
            );
            if let Some(w) = r.workspace_extra_seconds {
                let _ = writeln!(
                    out,
                    "  convolution algorithms timed on the device, as `train` times them: {:.2} ms a step more for workspaces held to fit, {:.2} ms in all",
                    w * 1e3,
                    (w + r.predicted_extra_seconds) * 1e3,
                );
            }
            // The default's drops are read off a few dry runs, and its
            // search for a smaller step says its own.
            if matches!(r.reason, RecomputeReason::MemoryBudget | RecomputeReason::ArenaSize) {
                let _ = writeln!(out, "  {}", r.search.describe());
            }
            if let Some(lean) = &r.lean {
                let _ = writeln!(out, "  {}", lean.describe());
            }
        }
        if let Some(t) = self.tuning_bytes {
            let _ = writeln!(
                out,
                "  (with cuDNN's heuristic convolution algorithms: `train` makes it {} larger, {} in all, so that the timed ones may take larger workspaces; the plans below are the heuristic's)",
                b(t),
                b(self.arena_bytes + t)
            );
        }
        let types = |t: &[TypeBytes]| {
            t.iter()
                .map(|t| format!("{} {}", t.element, b(t.bytes)))
                .collect::<Vec<_>>()
                .join(", ")
        };
        match self.step_peak_by_type.is_empty() {
            // Bump-allocated steps have no plan to read a peak from.
            true => writeln!(out, "  by type: persistent {}", types(&self.persistent_by_type)),
            false => writeln!(
                out,
                "  by type: persistent {}; the training step at its peak {}",
                types(&self.persistent_by_type),
                types(&self.step_peak_by_type)
            ),
        }
        .ok();
        if let Some(d) = &self.dynamic {
            let _ = writeln!(
                out,
                "  step region {}: every step its own shape, bump-allocated (no plan, no graph), sized by the largest any epoch can take; at most {} of it alive at once (a lower bound no placement of that step beats); the first epoch's {} steps hold {} on average, {} at most",
                b(d.largest_bytes),
                b(d.largest_lower_bound_bytes),
                d.steps,
                b(d.mean_bytes),
                b(d.most_bytes),
            );
        }
        let _ = writeln!(out, "\npersistent region: {}", b(self.persistent_bytes));
        let _ = writeln!(out, "  {:>10}  {:>10}  what", "offset", "bytes");
        for p in &self.persistent {
            let _ = writeln!(out, "  {:>10}  {:>10}  {} {}", p.offset, b(p.bytes), p.what, p.element);
        }
        for (i, plan) in self.plans.iter().enumerate() {
            let name = self
                .plan_names
                .get(i)
                .map_or_else(|| kind_name(plan.key), String::as_str);
            let _ = writeln!(
                out,
                "\nstep region, {}: planned peak {} against a lower bound of {} ({:.3}×); bump allocation would hold {}",
                name,
                b(plan.peak),
                b(plan.lower_bound),
                plan.ratio(),
                b(plan.bump_bytes)
            );
            let _ = writeln!(out, "  {:>10}  {:>10}  {:>9}  what", "offset", "bytes", "live ops");
            for buf in &plan.bufs {
                let _ = writeln!(
                    out,
                    "  {:>10}  {:>10}  {:>4}–{:<4}  {} {} {}",
                    buf.offset,
                    b(buf.bytes),
                    buf.life.born,
                    buf.life.last,
                    buf.what,
                    buf.element,
                    buf.shape
                );
            }
            let (tick, bytes) = plan.peak_tick();
            let _ = writeln!(out, "  live at op {tick}, the most at once ({}):", b(bytes));
            for buf in plan.top_live(5) {
                let _ = writeln!(
                    out,
                    "    {:>10}  {} {} {}",
                    b(buf.size),
                    buf.what,
                    buf.element,
                    buf.shape
                );
            }
        }
        let _ = writeln!(
            out,
            "\nbytes lost to 256-byte alignment: {}",
            b(self.alignment_waste_bytes)
        );
        out
    }

    /// An SVG timeline of the training step's plan.
    pub fn svg(&self, title: &str) -> String {
        let Some(plan) = self.plans.first() else {
            return String::from("<svg xmlns=\"http://www.w3.org/2000/svg\"/>");
        };
        timeline(plan, title)
    }
}

/// A colour per kind of buffer, so that gradients, activations and scratch
/// read apart at a glance.
fn colour(buf: &PlannedBuf) -> &'static str {
    let w = buf.what;
    if w.contains("grad") {
        "#d9822b"
    } else if w.contains("workspace") || w.contains("packed") || w.contains("partial") || w.contains("indices") {
        "#8c8c8c"
    } else if w.contains("batch") || w.contains("label") {
        "#4a7fb5"
    } else {
        "#2e8b57"
    }
}

fn escape(s: &str) -> String {
    s.replace('&', "&amp;").replace('<', "&lt;").replace('>', "&gt;")
}

fn timeline(plan: &StepPlan, title: &str) -> String {
    let (w, h, left, top, bottom, right) = (1100.0, 580.0, 80.0, 76.0, 60.0, 330.0);
    let ticks = plan.bufs.iter().map(|b| b.life.last).max().unwrap_or(0) + 1;
    let peak = plan.peak.max(1) as f64;
    let x = |t: f64| left + (w - left - right) * t / ticks as f64;
    let y = |bytes: f64| top + (h - top - bottom) * (1.0 - bytes / peak);
    let mut s = String::new();
    let _ = writeln!(
        s,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" font-family="sans-serif" font-size="11">"#
    );
    let _ = writeln!(s, r#"<rect width="{w}" height="{h}" fill="white"/>"#);
    let _ = writeln!(
        s,
        r#"<text x="{left}" y="22" font-size="15" font-weight="bold">{}</text>"#,
        escape(title)
    );
    let _ = writeln!(
        s,
        r##"<text x="{left}" y="40" fill="#444">one training step: a band per buffer at its planned offset, from the op that makes it to the last op that touches it</text><text x="{left}" y="56" fill="#444">planned peak {}, lower bound {} ({:.3}×); bump allocation would hold {}</text>"##,
        ByteSize(plan.peak),
        ByteSize(plan.lower_bound),
        plan.ratio(),
        ByteSize(plan.bump_bytes)
    );
    // Axes and a grid line per quarter of the peak.
    for q in 0..=4 {
        let bytes = peak * q as f64 / 4.0;
        let yy = y(bytes);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#e5e5e5"/><text x="{}" y="{:.1}" text-anchor="end" fill="#555">{}</text>"##,
            w - right,
            left - 6.0,
            yy + 4.0,
            ByteSize(bytes as usize)
        );
    }
    for buf in plan.bufs.iter().filter(|b| b.size > 0) {
        let (x0, x1) = (x(buf.life.born as f64), x(buf.life.last as f64 + 1.0));
        let (y0, y1) = (y(buf.end() as f64), y(buf.offset as f64));
        let _ = writeln!(
            s,
            r##"<rect x="{x0:.1}" y="{y0:.1}" width="{:.1}" height="{:.1}" fill="{}" fill-opacity="0.75" stroke="white" stroke-width="0.6"><title>{} {} — {} at offset {}, ops {}–{}</title></rect>"##,
            (x1 - x0).max(1.0),
            (y1 - y0).max(0.5),
            colour(buf),
            escape(buf.what),
            buf.shape,
            ByteSize(buf.size),
            buf.offset,
            buf.life.born,
            buf.life.last
        );
    }
    // The lower bound and the peak.
    for (bytes, label, dash, dy) in [
        (plan.lower_bound as f64, "lower bound", "4 3", 14.0),
        (plan.peak as f64, "planned peak", "", -4.0),
    ] {
        let yy = y(bytes);
        let _ = writeln!(
            s,
            r##"<line x1="{left}" x2="{}" y1="{yy:.1}" y2="{yy:.1}" stroke="#b03060" stroke-dasharray="{dash}"/><text x="{}" y="{:.1}" fill="#b03060">{label}</text>"##,
            w - right,
            w - right + 4.0,
            yy + dy
        );
    }
    for t in (0..=ticks).step_by(5) {
        let xx = x(t as f64);
        let _ = writeln!(
            s,
            r##"<text x="{xx:.1}" y="{}" text-anchor="middle" fill="#555">{t}</text>"##,
            h - bottom + 14.0
        );
    }
    let _ = writeln!(
        s,
        r##"<text x="{}" y="{}" text-anchor="middle" fill="#555">op of the step (forward, then backward, then the update) →</text>"##,
        (left + w - right) / 2.0,
        h - 22.0
    );
    // Legend: the buffers alive at the peak.
    let (tick, _) = plan.peak_tick();
    let lx = w - right + 90.0;
    let lx = lx.min(w - 230.0);
    let _ = writeln!(
        s,
        r#"<text x="{lx}" y="{top}" font-weight="bold">alive at op {tick}:</text>"#
    );
    for (i, buf) in plan.top_live(12).iter().enumerate() {
        let yy = top + 18.0 * (i as f64 + 1.0);
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{:.1}" width="10" height="10" fill="{}"/><text x="{}" y="{:.1}">{} {}</text>"#,
            yy - 9.0,
            colour(buf),
            lx + 14.0,
            yy,
            ByteSize(buf.size),
            escape(buf.what)
        );
    }
    let legend = [
        ("#2e8b57", "activations"),
        ("#d9822b", "gradients"),
        ("#4a7fb5", "batch"),
        ("#8c8c8c", "scratch"),
    ];
    for (i, (c, name)) in legend.iter().enumerate() {
        let yy = h - 40.0 - 16.0 * (legend.len() - 1 - i) as f64;
        let _ = writeln!(
            s,
            r#"<rect x="{lx}" y="{:.1}" width="10" height="10" fill="{c}"/><text x="{}" y="{:.1}">{name}</text>"#,
            yy - 9.0,
            lx + 14.0,
            yy
        );
    }
    s.push_str("</svg>\n");
    s
}

/// Why a training step recomputes outputs in backward rather than keep
/// them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum RecomputeReason {
    /// `--memory-budget`: the least extra time the search finds within it.
    MemoryBudget,
    /// A given `--arena-size` below the step's need: the same search, the
    /// arena's room above its persistent region the budget.
    ArenaSize,
    /// No budget (`--recompute cheap`, or the default where its search
    /// found no smaller step): the outputs made again without a
    /// multiply-add that lower the step's peak.
    Cheap,
    /// No budget (`--recompute lean`, the default) on a GPU that times its
    /// convolutions: the least step its search for a budget found within
    /// the allowed predicted cost (see [`LeanSearch`]).
    Lean,
}

/// What a memory budget, or the default recomputation, has a step
/// recompute.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Recomputed {
    /// Why it recomputes them.
    pub reason: RecomputeReason,
    /// Candidates (convolution and block outputs) recomputed in backward...
    pub dropped: usize,
    /// ...which ones, by their index in the order the training step makes
    /// its candidates (what a run under the same settings follows)...
    pub which: Vec<u32>,
    /// ...of those the step has...
    pub candidates: usize,
    /// ...the bytes they would have kept...
    pub dropped_bytes: usize,
    /// ...the same by what they are...
    pub kinds: Vec<RecomputedKind>,
    /// ...and the multiply-adds recomputing them costs, against the
    /// step's convolutions' (forward and both gradients).
    pub extra_multiply_adds: u64,
    /// The step's convolutions' multiply-adds, forward and both gradients.
    pub step_multiply_adds: u64,
    /// Seconds a step takes longer, by the device's cost model...
    pub predicted_extra_seconds: f64,
    /// ...and no fewer than any choice within the budget would add, by the
    /// same costs and the model of the step's live bytes, which leaves out
    /// what a recomputation holds for a moment (a lower bound, not a
    /// choice).
    pub least_extra_seconds: f64,
    /// Seconds the step's convolutions take beyond their fastest
    /// algorithms, held to smaller workspaces to fit, by cuDNN's timings;
    /// `None` where the plan is on the heuristic's algorithms (nothing
    /// timed).
    pub workspace_extra_seconds: Option<f64>,
    /// The step's planned peak without the budget.
    pub unbudgeted_step_bytes: usize,
    /// Whether chains of them are made again for each reader rather than
    /// held (the least steps: more recomputation, fewer bytes)...
    pub transient_chains: bool,
    /// ...the same in words: "held" or "remade for each reader".
    pub chain_mode: &'static str,
    /// Each one recomputed: what a run with the same settings follows.
    pub outputs: Vec<RecomputedOutput>,
    /// How the choice was searched for.
    pub search: SearchReport,
    /// What the default's search for a smaller step did, where it ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lean: Option<LeanSearch>,
}

/// The words for a chain mode (see [`Recomputed::transient_chains`]).
pub fn chain_mode(transient_chains: bool) -> &'static str {
    match transient_chains {
        true => "remade for each reader",
        false => "held",
    }
}

/// One output a step recomputes in backward rather than keep.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RecomputedOutput {
    /// Its number, in the order the training step makes its candidates.
    pub id: u32,
    /// What it is, as the plan names it ("conv2d output").
    pub what: &'static str,
    /// Bytes it would have kept.
    pub bytes: usize,
    /// Times the step makes it again (more than once only with chains
    /// remade for each reader).
    pub remade: u32,
}

/// How a memory budget's search went: its time against its stated bound
/// (past which the cheapest plan found by then is taken), the plans that
/// fitted and were weighed by predicted time, and the dry runs it took.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize)]
pub struct SearchReport {
    /// Seconds it took.
    pub seconds: f64,
    /// Seconds it may take ([`crate::train::SEARCH_SECONDS`]).
    pub bound_seconds: f64,
    /// It, or a part of it with a bound of its own, reached its bound, and
    /// took the cheapest plan found by then.
    pub stopped_at_bound: bool,
    /// Plans that fitted the budget, weighed by predicted time.
    pub plans_weighed: usize,
    /// Dry runs of the step it took.
    pub dry_runs: usize,
}

/// What the default's search for a smaller step did (`--recompute lean`,
/// on a GPU that times its convolutions): budgets of fractions of the
/// step the cheap drops make on the timed algorithms, tried in turn while
/// the cheapest plan under each stays within an allowed predicted cost.
#[derive(Debug, Clone, Copy, PartialEq, serde::Serialize)]
pub struct LeanSearch {
    /// The step it started from: the cheap drops on the timed algorithms.
    pub from_bytes: usize,
    /// Predicted extra seconds a step it keeps may cost in all
    /// (recomputation and held workspaces, against every output kept on
    /// the fastest algorithms).
    pub allowed_seconds: f64,
    /// The step's predicted seconds the allowance is a share of: its
    /// convolutions' multiply-adds at the device's rate.
    pub step_seconds: f64,
    /// The fraction of `from_bytes` whose budget's plan it kept (1: a
    /// plan of the same size that costs less); `None` where none stayed
    /// within the allowance or cost less.
    pub fraction: Option<f64>,
    /// Budgets searched.
    pub budgets_tried: usize,
    /// Seconds it took...
    pub seconds: f64,
    /// ...and may take, past which it keeps the least step found by then.
    pub bound_seconds: f64,
    /// It reached its bound and kept the least step found by then.
    pub stopped_at_bound: bool,
}

impl LeanSearch {
    /// For people: what it kept, and what it cost to find.
    pub fn describe(&self) -> String {
        let kept = match self.fraction {
            Some(f) if f >= 1.0 => format!(
                "kept a plan of the {} step the cheap drops make that costs less than theirs",
                ByteSize(self.from_bytes)
            ),
            Some(f) => format!(
                "kept the plan for a budget of {:.1}% of the {} step the cheap drops make",
                f * 100.0,
                ByteSize(self.from_bytes)
            ),
            None => format!(
                "found no step below the cheap drops' {} within it",
                ByteSize(self.from_bytes)
            ),
        };
        format!(
            "the default's search for a smaller step allowed {:.2} ms more a step ({:.1}% of its predicted {:.2} ms, or the cheap drops' own cost where more) and {kept}: {} budgets in {:.1} s{}",
            self.allowed_seconds * 1e3,
            100.0 * self.allowed_seconds / self.step_seconds.max(f64::MIN_POSITIVE),
            self.step_seconds * 1e3,
            self.budgets_tried,
            self.seconds,
            match self.stopped_at_bound {
                true => format!(", stopped at its bound of {:.0} s", self.bound_seconds),
                false => String::new(),
            }
        )
    }
}

impl SearchReport {
    /// For people: its time against its bound, and whether it stopped
    /// there.
    pub fn describe(&self) -> String {
        format!(
            "the plan was chosen in {:.1} s ({} dry runs, {} plans that fit weighed by predicted time){}",
            self.seconds,
            self.dry_runs,
            self.plans_weighed,
            // A search made of parts (the heuristic's, then the timed
            // algorithms' ladder) bounds each part: one may stop at its own
            // bound well before the whole's.
            match (self.stopped_at_bound, self.seconds < self.bound_seconds) {
                (true, false) => format!(
                    "; the search reached its bound of {:.0} s and took the cheapest plan found by then",
                    self.bound_seconds
                ),
                (true, true) => format!(
                    "; a part of the search reached its own bound (the whole may take {:.0} s) and took the cheapest plan found by then",
                    self.bound_seconds
                ),
                (false, _) => format!(", within its bound of {:.0} s", self.bound_seconds),
            }
        )
    }
}

/// Candidates of one kind a budget recomputes.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct RecomputedKind {
    /// The tensor, as the plan names it ("conv2d output").
    pub what: &'static str,
    /// How many of them are recomputed...
    pub dropped: usize,
    /// ...of this many in the step.
    pub of: usize,
    /// Bytes the dropped ones would have kept.
    pub bytes: usize,
}

#[cfg(test)]
mod tests {
    use super::SearchReport;

    #[test]
    fn a_search_says_which_bound_it_reached() {
        let report = |seconds, stopped_at_bound| SearchReport {
            seconds,
            bound_seconds: 120.0,
            stopped_at_bound,
            plans_weighed: 6,
            dry_runs: 4225,
        };
        let whole = report(120.4, true).describe();
        assert!(
            whole.ends_with("the search reached its bound of 120 s and took the cheapest plan found by then"),
            "{whole}"
        );
        // A part stopped at its own bound (the heuristic's 60 s of a
        // 120 s whole): the whole's bound was not reached.
        let part = report(64.8, true).describe();
        assert!(
            part.contains("a part of the search reached its own bound (the whole may take 120 s)"),
            "{part}"
        );
        assert!(!part.contains("reached its bound of 120 s"), "{part}");
        let within = report(9.4, false).describe();
        assert!(within.ends_with(", within its bound of 120 s"), "{within}");
    }
}
