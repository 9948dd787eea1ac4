//! What a memory budget has a training step recompute (`--memory-budget`,
//! or an `--arena-size` below the step's need).
//!
//! A candidate is a tensor the step keeps from forward for backward that
//! backward can make again instead: a convolution's output, or a residual
//! block's output. A dropped one dies when forward is done with it, and the
//! first backward op that reads it (through `Step::saved`) runs its op
//! again, from inputs that may have been dropped and are made again in
//! turn; later readers share the copy. Which to drop is a choice of the
//! least extra time whose planned step fits the budget:
//!
//! - **Costs** come from a model of the device ([`Speed`]): a
//!   recomputation's multiply-adds at the device's convolution rate plus
//!   the bytes it reads and writes at its memory bandwidth.
//! - **The choice is solved for**: a model of the step's live bytes op by
//!   op as a function of the drops ([`liveness`], read off one dry run of
//!   the step without) makes the choice an integer program, solved by
//!   branch and bound to within 1% of its optimum ([`ilp`]).
//! - **Every choice is checked by a dry run** of the step with those
//!   candidates dropped, planned as training will follow it (a few
//!   milliseconds for a ResNet-50, since a dry arena draws no initial
//!   values). The model leaves out what a recomputation holds for a moment;
//!   a dry run over the budget shows where, the model learns it, and the
//!   program is solved again. Single changes then close a last gap, drops
//!   the step can do without are given back and costly ones exchanged for
//!   cheaper ones that still fit.
//! - **Where the model cannot be read** (a step whose candidates its plan
//!   does not show), or the program finds nothing, dry runs alone decide:
//!   a descent from every candidate dropped to the least step single
//!   changes reach (the step's floor, where the model misses most), and a
//!   local search over candidates in order of bytes kept per second, each
//!   toggled if that lowers the bytes held above the budget.
//! - **A lower bound says how good the choice is**: what the branch and
//!   bound proves no choice within the budget undercuts, by the model as
//!   first read (before it learns anything). The report puts the chosen
//!   drops' cost against it.
//! - **Every plan that fits is weighed**: the search keeps the cheapest by
//!   predicted time, every remaking counted (chains remade for each reader
//!   cost each time); polishing keeps a change only if the measured step
//!   fits and costs less, and tries chains held for a choice found with
//!   them remade. The floors come last, and only where nothing cheaper
//!   fits.
//!   Where the model's first choice does not fit as measured, the
//!   program's choices for a few percent less are weighed too: the one
//!   repaired for the budget can cost far more. Over a sweep of budgets
//!   the plan's predicted time does not rise as the budget grows (the
//!   tests sweep a small ResNet-18 and ResNet-50, and hold a full-width
//!   ResNet-50's pair of budgets where it rose).
//! - **The search is bounded**: a budget below what the step holds with
//!   every candidate gone wherever it can be ([`liveness::least_bytes`],
//!   read off the step without, no dry run) is refused without the program
//!   or the local search, only the floors run to name the least budget
//!   that works; the program itself says a stretch of the step out of
//!   reach before it solves; past [`SEARCH_SECONDS`] the search takes the
//!   cheapest plan it has (the floors, if it has none) and says so; the
//!   solver runs under the time left and cannot abort the process (see
//!   [`ilp`]).

mod cheap;
mod ilp;
mod liveness;

pub(crate) use cheap::cheap_floor;

use super::pipeline::{ArenaNeeds, Measure, StepChoice};
use super::StepKind;
use crate::autograd::{Candidate, GRADIENT_SEED};
use crate::backend::{DeviceKind, Precision};
use crate::memory::{align_up, ByteSize, SearchReport, StepPlan};
use crate::{Error, Result, Setting};
use std::cell::Cell;
use std::time::{Duration, Instant};
// The tests below measure real steps through these.
#[cfg(test)]
use {super::measure_dropping, crate::Engine};

/// Rates of a device for the cost model: multiply-adds of a convolution
/// and bytes of an elementwise pass, per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Speed {
    pub multiply_adds_per_s: f64,
    pub bytes_per_s: f64,
}

impl Speed {
    /// The rates a step's recomputations see on `device`. The H200's are
    /// what cuDNN's convolutions reached by `--profile` (CIFAR-shaped
    /// ResNets): fp32 the forward passes of a ResNet-50 at batch 128 (166 G
    /// multiply-adds in 7.65 ms, each pass on the faster of cuDNN's two
    /// APIs; 10.9 ms on the legacy API alone, when this rate was 15 T/s),
    /// TF32 the forward passes of a ResNet-18 at batch 512 (287 G in 1.97
    /// ms, channels last), bf16 the same network's three passes together
    /// (860 G in 3.62 ms); the bandwidth is what the batch-norm kernels
    /// move. Checked against runs (docs/memory-budget.md): a ResNet-50 at
    /// batch 256 under a third of its step memory took 6.48 ms more a step
    /// than without, which 15 T/s put at 8.70 (+34%) and this rate at
    /// 6.79. The CPU's are this crate's kernels on one core of the
    /// development machine, times the threads.
    pub fn of(device: DeviceKind, precision: Precision, threads: usize) -> Self {
        match device {
            DeviceKind::Cpu => Self {
                multiply_adds_per_s: 10e9 * threads as f64,
                bytes_per_s: 5e9 * threads as f64,
            },
            DeviceKind::Cuda | DeviceKind::Dry => Self {
                multiply_adds_per_s: match precision {
                    Precision::Fp32 => 22e12,
                    Precision::Tf32 => 145e12,
                    Precision::Bf16 => 237e12,
                },
                bytes_per_s: 3e12,
            },
        }
    }

    /// Seconds recomputing `c` takes: the device's own timing of it where
    /// there is one (a timed convolution: ResNet-18's fp32 forward passes
    /// on the H100 run well above the model's rate, which over-predicted
    /// a budget's recomputation 0.80 ms against 0.38 measured), else its
    /// multiply-adds and bytes at these rates.
    pub fn seconds(&self, c: &Candidate) -> f64 {
        c.timed_seconds.unwrap_or_else(|| {
            c.multiply_adds as f64 / self.multiply_adds_per_s + c.bytes_moved as f64 / self.bytes_per_s
        })
    }
}

/// The multiply-adds of a training step's convolutions: each runs three
/// times (forward, input and weight gradients), and each convolution's
/// output is a candidate whose multiply-adds are its forward's.
pub fn step_multiply_adds(candidates: &[Candidate]) -> u64 {
    3 * candidates.iter().map(|c| c.multiply_adds).sum::<u64>()
}

/// A training step's predicted seconds by the cost model: its
/// convolutions' multiply-adds at the device's rate (ResNet-18 fp32 at
/// batch 512 on the H100: 853 G at 22 T/s, 38.8 ms, against 37.0 ms
/// measured; bf16 and TF32 steps spend more of their time outside the
/// convolutions, so this is less than theirs).
pub fn predicted_step_seconds(candidates: &[Candidate], speed: &Speed) -> f64 {
    step_multiply_adds(candidates) as f64 / speed.multiply_adds_per_s
}

/// Seconds recomputing `dropped` of `candidates` adds to a step: each
/// once, or as many times as a dry step counted it made again (chains
/// remade for each reader).
pub fn extra_seconds(candidates: &[Candidate], dropped: &[u32], speed: &Speed) -> f64 {
    dropped
        .iter()
        .map(|&i| {
            let c = &candidates[i as usize];
            speed.seconds(c) * f64::from(c.remade.max(1))
        })
        .sum()
}

/// The bytes alive in `plan` when backward starts (at its gradient seed),
/// if it has a backward.
fn live_at_backward(plan: &StepPlan) -> Option<usize> {
    let seed = plan.bufs.iter().find(|b| b.what == GRADIENT_SEED)?;
    Some(plan.live_at(seed.life.born).map(|b| b.size).sum())
}

/// A lower bound on the extra seconds of any choice of drops whose training
/// step fits `budget`, from the step measured without (see the module's
/// notes): what the branch and bound proves of the liveness model, or where
/// it has none, the cheapest removal of the excess alive when backward
/// starts.
pub fn least_extra_seconds(unbudgeted: &ArenaNeeds, budget: usize, speed: &Speed) -> f64 {
    let seconds: Vec<f64> = unbudgeted.candidates.iter().map(|c| speed.seconds(c)).collect();
    let by_model = liveness::Liveness::of(unbudgeted)
        .and_then(|model| ilp::cheapest(&model, &seconds, budget, ilp::GAP, &mut Vec::new(), bound()).ok()?)
        .map_or(0.0, |c| c.bound);
    by_model.max(fractional_bound(unbudgeted, budget, speed))
}

/// The cheapest removal of the excess alive when backward starts, taking
/// fractions of candidates: nothing has been made again yet then, so any
/// choice that fits removes at least that.
fn fractional_bound(unbudgeted: &ArenaNeeds, budget: usize, speed: &Speed) -> f64 {
    let train = unbudgeted.plans.iter().find(|p| p.key == StepKind::Train as u32);
    let Some(live) = train.and_then(live_at_backward) else {
        return 0.0;
    };
    let mut need = live.saturating_sub(budget) as f64;
    let mut by_cost: Vec<(f64, f64)> = unbudgeted
        .candidates
        .iter()
        .map(|c| (speed.seconds(c), align_up(c.bytes) as f64))
        .collect();
    by_cost.sort_by(|a, b| (a.0 / a.1).total_cmp(&(b.0 / b.1)));
    let mut seconds = 0.0;
    for (cost, bytes) in by_cost {
        if need <= 0.0 {
            break;
        }
        let take = (need / bytes).min(1.0);
        seconds += take * cost;
        need -= take * bytes;
    }
    seconds
}

/// How far a step is from a budget: the bytes its plans hold above it, op
/// by op (from the lifetimes, as the plan's lower bound), then its planned
/// peak's excess.
fn distance(needs: &ArenaNeeds, budget: usize) -> (u128, usize) {
    let mut above = 0u128;
    for plan in &needs.plans {
        let end = plan.bufs.iter().map(|b| b.life.last as usize + 1).max().unwrap_or(0);
        let mut delta = vec![0i128; end + 1];
        for b in &plan.bufs {
            delta[b.life.born as usize] += b.size as i128;
            delta[b.life.last as usize + 1] -= b.size as i128;
        }
        let mut live = 0i128;
        for d in &delta[..end] {
            live += d;
            above += (live - budget as i128).max(0) as u128;
        }
    }
    (above, needs.step_bytes.saturating_sub(budget))
}

/// The search's stated time bound, in seconds: past it, the cheapest plan
/// found so far is taken (the floors, where none was), and the report says
/// so. A ResNet-50 at batch 256 plans in tens of seconds on the H200.
pub const SEARCH_SECONDS: u64 = 60;

/// [`SEARCH_SECONDS`] as a duration.
fn bound() -> Duration {
    Duration::from_secs(SEARCH_SECONDS)
}

/// When a search stops looking for cheaper plans.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Deadline {
    started: Instant,
    bound: Duration,
}

impl Deadline {
    /// `bound` from now.
    pub(crate) fn after(bound: Duration) -> Self {
        Self {
            started: Instant::now(),
            bound,
        }
    }

    pub(crate) fn passed(&self) -> bool {
        self.started.elapsed() >= self.bound
    }

    /// The first quarter of this deadline's time, from when it started.
    fn quarter(&self) -> Self {
        Self {
            started: self.started,
            bound: self.bound / 4,
        }
    }

    fn left(&self) -> Duration {
        self.bound.saturating_sub(self.started.elapsed())
    }
}

/// The predicted extra seconds of a measured step: each drop times the
/// times the step made it again.
fn cost(needs: &ArenaNeeds, speed: &Speed) -> f64 {
    extra_seconds(&needs.candidates, &needs.dropped, speed)
}

/// One candidate's part of [`cost`] in `needs`.
fn cost_of(needs: &ArenaNeeds, c: u32, speed: &Speed) -> f64 {
    let c = &needs.candidates[c as usize];
    speed.seconds(c) * f64::from(c.remade.max(1))
}

/// Passes over the candidates at most; a ResNet-50's search settles in
/// under ten.
const PASSES: usize = 16;

/// The search: from `start`, tries the candidates in order of bytes kept
/// per second of recomputation, dropping each if kept and keeping it if
/// dropped, and keeps the change if the step gets closer to the budget
/// (keeping one again is what breaks a run of dropped block outputs that
/// backward would rebuild all at once), until it fits, a pass changes
/// nothing, or the deadline passes. Returns the closest step found.
fn approach(
    start: ArenaNeeds,
    budget: usize,
    speed: &Speed,
    measure: &dyn Fn(&[u32]) -> Result<ArenaNeeds>,
    deadline: &Deadline,
) -> Result<ArenaNeeds> {
    let ranked = rank(&start.candidates, speed);
    let mut current = start;
    let mut score = distance(&current, budget);
    for _ in 0..PASSES {
        let mut changed = false;
        for &c in &ranked {
            if current.step_bytes <= budget || deadline.passed() {
                return Ok(current);
            }
            let (trial, _) = toggled(&current.dropped, c);
            let needs = measure(&trial)?;
            let s = distance(&needs, budget);
            if s < score {
                (current, score, changed) = (needs, s, true);
            }
        }
        if !changed {
            break;
        }
    }
    Ok(current)
}

/// `dropped` (sorted) with candidate `c` dropped if kept, kept if dropped;
/// and whether it is now dropped.
fn toggled(dropped: &[u32], c: u32) -> (Vec<u32>, bool) {
    let mut trial = dropped.to_vec();
    match trial.binary_search(&c) {
        Ok(at) => {
            trial.remove(at);
            (trial, false)
        }
        Err(at) => {
            trial.insert(at, c);
            (trial, true)
        }
    }
}

/// Candidate numbers, most bytes kept per second of recomputation first
/// (ties: forward order).
fn rank(candidates: &[Candidate], speed: &Speed) -> Vec<u32> {
    let mut order: Vec<u32> = (0..candidates.len() as u32).collect();
    let value = |i: u32| {
        let c = &candidates[i as usize];
        c.bytes as f64 / speed.seconds(c).max(f64::MIN_POSITIVE)
    };
    order.sort_by(|&a, &b| value(b).total_cmp(&value(a)));
    order
}

/// Gives back the drops of `fit` (a step within `budget`) that it can do
/// without, the most costly first (each remaking counted), where the step
/// then fits and costs no more; then exchanges costly drops for cheaper
/// ones ([`exchange`]). Stops at the deadline.
fn give_back(
    mut fit: ArenaNeeds,
    budget: usize,
    speed: &Speed,
    measure: &dyn Fn(&[u32]) -> Result<ArenaNeeds>,
    deadline: &Deadline,
) -> Result<ArenaNeeds> {
    let mut order = fit.dropped.clone();
    let costs: Vec<f64> = order.iter().map(|&c| cost_of(&fit, c, speed)).collect();
    let mut by_cost: Vec<usize> = (0..order.len()).collect();
    by_cost.sort_by(|&a, &b| costs[b].total_cmp(&costs[a]));
    order = by_cost.into_iter().map(|i| order[i]).collect();
    for c in order {
        if deadline.passed() {
            return Ok(fit);
        }
        let trial: Vec<u32> = fit.dropped.iter().copied().filter(|&d| d != c).collect();
        let needs = measure(&trial)?;
        if needs.step_bytes <= budget && cost(&needs, speed) <= cost(&fit, speed) {
            fit = needs;
        }
    }
    exchange(fit, budget, speed, measure, deadline)
}

/// Exchanges drops of `fit` (a step within `budget`) for cheaper ones:
/// each dropped candidate, the most costly first (each remaking counted),
/// is kept again in exchange for the first kept one, the cheapest first,
/// whose drop keeps the step within the budget and the whole step's
/// predicted cost, measured, lower.
fn exchange(
    mut fit: ArenaNeeds,
    budget: usize,
    speed: &Speed,
    measure: &dyn Fn(&[u32]) -> Result<ArenaNeeds>,
    deadline: &Deadline,
) -> Result<ArenaNeeds> {
    for _ in 0..EXCHANGE_PASSES {
        let before = fit.dropped.clone();
        fit = exchange_pass(fit, budget, speed, measure, deadline)?;
        if fit.dropped == before || deadline.passed() {
            break;
        }
    }
    Ok(fit)
}

/// Passes of [`exchange`] at most: a ResNet-50's gains after the second
/// are under 1%.
const EXCHANGE_PASSES: usize = 3;

fn exchange_pass(
    mut fit: ArenaNeeds,
    budget: usize,
    speed: &Speed,
    measure: &dyn Fn(&[u32]) -> Result<ArenaNeeds>,
    deadline: &Deadline,
) -> Result<ArenaNeeds> {
    // A kept candidate costs at least its one remaking once dropped.
    let once: Vec<f64> = fit.candidates.iter().map(|c| speed.seconds(c)).collect();
    let mut dropped = fit.dropped.clone();
    let costs: Vec<f64> = (0..once.len() as u32).map(|c| cost_of(&fit, c, speed)).collect();
    dropped.sort_by(|&a, &b| costs[b as usize].total_cmp(&costs[a as usize]));
    for d in dropped {
        let mut kept: Vec<u32> = (0..once.len() as u32)
            .filter(|k| !fit.dropped.contains(k) && once[*k as usize] < costs[d as usize])
            .collect();
        kept.sort_by(|&a, &b| once[a as usize].total_cmp(&once[b as usize]));
        for k in kept {
            if deadline.passed() {
                return Ok(fit);
            }
            let mut trial: Vec<u32> = fit.dropped.iter().copied().filter(|&x| x != d).collect();
            trial.push(k);
            trial.sort_unstable();
            let needs = measure(&trial)?;
            if needs.step_bytes <= budget && cost(&needs, speed) < cost(&fit, speed) {
                fit = needs;
                break;
            }
        }
    }
    Ok(fit)
}

/// What a search with a budget found, and how the search went.
pub(super) struct Budgeted {
    pub needs: ArenaNeeds,
    /// `None` where the step fitted without recomputing.
    pub search: Option<SearchReport>,
}

/// Meets a memory budget (if there is one) by recomputing candidates in
/// backward, measuring candidate steps through `step`: `unbudgeted` is the
/// step measured without (see the module's notes). A budget no choice the
/// search finds can meet is an error naming the least step it found (of
/// `model`), a budget that then works.
pub(super) fn meet_budget(
    step: &Measure<'_>,
    budget: Option<usize>,
    speed: &Speed,
    model: &str,
    unbudgeted: ArenaNeeds,
) -> Result<Budgeted> {
    let Some(budget) = budget else {
        return Ok(Budgeted {
            needs: unbudgeted,
            search: None,
        });
    };
    let fits_without = unbudgeted.step_bytes <= budget;
    let candidates = unbudgeted.candidates.len();
    let without = unbudgeted.step_bytes;
    let least_possible = liveness::least_bytes(&unbudgeted);
    let (outcome, report) = search_until(step, unbudgeted, budget, speed, Mode::Plan, Deadline::after(bound()))?;
    match outcome {
        Outcome::Fits(needs) => Ok(Budgeted {
            needs,
            search: (!fits_without).then_some(report),
        }),
        Outcome::Short { least } => Err(Error::setting(
            Setting::MemoryBudget,
            format!(
                "the least step of {} the planner finds, recomputing among its {} convolution and block outputs, needs {} (without: {}{}), above the budget of {}",
                model,
                candidates,
                ByteSize(least),
                ByteSize(without),
                match least_possible {
                    Some(l) if budget < l => format!("; no choice holds less than {}", ByteSize(l)),
                    _ => String::new(),
                },
                ByteSize(budget),
            ),
            Some(format!("{} or more", crate::memory::suggest(least))),
        )),
    }
}

/// The cheapest choice the search finds whose step (measured through
/// `step`, from `unbudgeted`) fits `budget`, searched until `deadline`,
/// and how the search went; `None` with the report where none fits. For
/// a search among several candidate steps (the timed convolutions' under
/// each workspace cap, `pipeline::tuning`): no least step is sought.
/// `mode`: [`Mode::Weigh`], or [`Mode::Room`] for a budget lowered to
/// leave workspaces room.
pub(super) fn cheapest_within(
    step: &Measure<'_>,
    unbudgeted: ArenaNeeds,
    budget: usize,
    speed: &Speed,
    mode: Mode,
    deadline: Deadline,
) -> Result<(Option<ArenaNeeds>, SearchReport)> {
    let (outcome, report) = search_until(step, unbudgeted, budget, speed, mode, deadline)?;
    Ok(match outcome {
        Outcome::Fits(needs) => (Some(needs), report),
        Outcome::Short { .. } => (None, report),
    })
}

/// What a search is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    /// The plan a run follows: the cheapest choice found, and for a budget
    /// out of reach the least step found.
    Plan,
    /// Whether any choice fits: the program's as it is, else the floors'
    /// (see [`descend`]); no local search, and no least step sought.
    Probe,
    /// The cheapest plan the program and the local search find, polished,
    /// where one is among several steps weighed (see [`cheapest_within`]):
    /// no floors, whose plans cost most, and no least step sought.
    Weigh,
    /// As [`Mode::Weigh`], and where nothing fits, the floors too, within
    /// the deadline: for a budget lowered below the step's to leave the
    /// timed workspaces room where it peaks, which only chains remade for
    /// each reader may reach (ResNet-18 at batch 512 under half its step:
    /// the least step with chains held is about the budget itself).
    Room,
}

/// A choice that fits `budget` (a probe's: the program's cheapest where it
/// found one) made as cheap as the search can, by the predicted time of the
/// measured step: with chains remade for each reader, the same drops with
/// chains held where that fits (each made again once); then drops it can
/// do without given back, and costly ones exchanged for cheaper.
pub(super) fn polish(
    step: &Measure<'_>,
    mut fit: ArenaNeeds,
    budget: usize,
    speed: &Speed,
    deadline: &Deadline,
) -> Result<ArenaNeeds> {
    if fit.transient_chains {
        let held = step(&StepChoice::held(&fit.dropped))?;
        if held.step_bytes <= budget && cost(&held, speed) <= cost(&fit, speed) {
            fit = held;
        }
    }
    // Changes to a choice keep its way with chains.
    let transient_chains = fit.transient_chains;
    let measure = |dropped: &[u32]| {
        step(&StepChoice {
            dropped: dropped.to_vec(),
            transient_chains,
        })
    };
    give_back(fit, budget, speed, &measure, deadline)
}

/// What a search found.
pub(super) enum Outcome {
    Fits(ArenaNeeds),
    /// Nothing within the budget; the least step found (when asked for),
    /// which a search for it as a budget meets.
    Short {
        least: usize,
    },
}

/// The search behind [`meet_budget`], measuring candidate steps through
/// `step`, bounded by [`SEARCH_SECONDS`].
pub(super) fn search(
    step: &Measure<'_>,
    unbudgeted: ArenaNeeds,
    budget: usize,
    speed: &Speed,
    mode: Mode,
) -> Result<Outcome> {
    Ok(search_until(step, unbudgeted, budget, speed, mode, Deadline::after(bound()))?.0)
}

/// The cheapest fitting step seen, by predicted time.
struct Best<'s> {
    budget: usize,
    speed: &'s Speed,
    best: Option<(f64, ArenaNeeds)>,
    weighed: usize,
}

impl Best<'_> {
    fn weigh(&mut self, needs: ArenaNeeds) {
        if needs.step_bytes > self.budget {
            return;
        }
        self.weighed += 1;
        let c = cost(&needs, self.speed);
        if self.best.as_ref().is_none_or(|(b, _)| c < *b) {
            self.best = Some((c, needs));
        }
    }

    fn found(&self) -> bool {
        self.best.is_some()
    }
}

/// The search behind [`meet_budget`] until `deadline`: the cheapest choice
/// found whose step fits `budget`, by predicted time, and how the search
/// went.
pub(super) fn search_until(
    step: &Measure<'_>,
    unbudgeted: ArenaNeeds,
    budget: usize,
    speed: &Speed,
    mode: Mode,
    deadline: Deadline,
) -> Result<(Outcome, SearchReport)> {
    let started = Instant::now();
    let dry_runs = Cell::new(0usize);
    let counted = |choice: &StepChoice| {
        dry_runs.set(dry_runs.get() + 1);
        step(choice)
    };
    let step: &Measure<'_> = &counted;
    let report = |best: &Best<'_>| SearchReport {
        seconds: started.elapsed().as_secs_f64(),
        bound_seconds: deadline.bound.as_secs_f64(),
        stopped_at_bound: deadline.passed(),
        plans_weighed: best.weighed,
        dry_runs: dry_runs.get(),
    };
    let mut best = Best {
        budget,
        speed,
        best: None,
        weighed: 0,
    };
    if unbudgeted.step_bytes <= budget {
        best.weigh(unbudgeted.clone());
        return Ok((Outcome::Fits(unbudgeted), report(&best)));
    }
    let measure = |dropped: &[u32]| step(&StepChoice::held(dropped));
    let transient = |dropped: &[u32]| step(&StepChoice::transient(dropped));
    let fit = |needs: &ArenaNeeds| needs.step_bytes <= budget;
    let n = unbudgeted.candidates.len();
    let mut least = usize::MAX;
    // Below what the step holds with every candidate gone wherever it can
    // be, nothing fits: no program, no local search. A plan still names the
    // least the floors reach, a budget that works; a probe needs no least.
    if let Some(possible) = liveness::least_bytes(&unbudgeted).filter(|&l| budget < l) {
        if mode != Mode::Plan {
            return Ok((Outcome::Short { least: possible }, report(&best)));
        }
        for measure in [&measure as &dyn Fn(&[u32]) -> Result<ArenaNeeds>, &transient] {
            least = least.min(descend(n, measure, &Deadline::after(Duration::MAX))?.step_bytes);
        }
        return Ok((Outcome::Short { least }, report(&best)));
    }
    // The program's cheapest first; where it finds none that fits, dry
    // runs alone (below). The model may miss a choice that fits: it keeps a
    // dropped block output made again until its block's backward, where the
    // step frees it once the next block's convolutions are done with it, up
    // to 600 MiB at ResNet-50's largest batches. (A probe takes the
    // cheapest too: the model's cheap choices are its least chained, the
    // likeliest to fit when checked; with the first within 25% of the
    // cheapest, ResNet-18's largest batch in 4 GiB fell by 5%.)
    let polished = |found: ArenaNeeds, best: &mut Best<'_>, until: &Deadline| -> Result<()> {
        if mode != Mode::Probe && !until.passed() {
            best.weigh(polish(step, found.clone(), budget, speed, until)?);
        }
        best.weigh(found);
        Ok(())
    };
    let mut missed = true;
    if let Some((found, fitted_at_once)) = cheapest(&unbudgeted, budget, speed, &measure, &deadline)? {
        missed = !fitted_at_once;
        polished(found, &mut best, &deadline)?;
    }
    // Where the model missed (its choice did not fit as measured), a plan
    // also weighs the program's choices for a little less: the choice
    // repaired for the budget itself can end far costlier than one made
    // for less, which fits too (ResNet-50 b128 on the CPU: 1,117 ms
    // predicted within 1,500 MiB, 642 within 1,450). Each is a few solves
    // of the program (seconds for a ResNet-50), so only then, and only in
    // the first quarter of the search's time: a search that is long
    // already (a ResNet-50 at batch 256 on the GPU, whose timed
    // convolutions search again after it) keeps its time for the rest.
    let quarter = deadline.quarter();
    for k in 1..PROGRAM_AIMS {
        if mode != Mode::Plan || !missed || quarter.passed() {
            break;
        }
        let aim = budget / 100 * (100 - AIM_STEP_PERCENT * k);
        if let Some((found, _)) = cheapest(&unbudgeted, aim, speed, &measure, &quarter)? {
            polished(found, &mut best, &quarter)?;
        }
    }
    // Where the program found nothing, dry runs alone. For a plan, the
    // local search first: where it ends depends on where it aims, and
    // aiming a little lower can end within the budget where aiming at it
    // did not.
    for k in 0..AIMS_BELOW {
        if mode == Mode::Probe || best.found() || deadline.passed() {
            break;
        }
        let aim = budget / 100 * (100 - AIM_STEP_PERCENT * k);
        let found = approach(unbudgeted.clone(), aim, speed, &measure, &deadline)?;
        if fit(&found) {
            polished(found, &mut best, &deadline)?;
        }
    }
    // Then the floors, the least steps single changes reach from every
    // candidate dropped, chains held, then remade for each reader: their
    // choices the costliest to recompute, so only where nothing fits yet,
    // and polished before they are weighed, never taken merely because
    // they fit. None depends on the budget, so the least they find is met
    // when asked for as a budget. Past the deadline they still run, to
    // have a plan or a least (a search for room, which may do without one,
    // stops there).
    for measure in [&measure as &dyn Fn(&[u32]) -> Result<ArenaNeeds>, &transient] {
        if best.found() || mode == Mode::Weigh || (mode == Mode::Room && deadline.passed()) {
            break;
        }
        let until = match mode {
            Mode::Room => deadline,
            _ => Deadline::after(Duration::MAX),
        };
        let floor = descend(n, measure, &until)?;
        least = least.min(floor.step_bytes);
        if fit(&floor) {
            polished(floor, &mut best, &deadline)?;
        }
    }
    let outcome = match best.best.take() {
        Some((_, needs)) => Outcome::Fits(needs),
        None => Outcome::Short { least },
    };
    Ok((outcome, report(&best)))
}

/// The least step single changes reach from every candidate dropped: each
/// pass over the candidates, in forward order, keeps a change (keeping one
/// again, or dropping it again) that lowers the planned peak, until a pass
/// changes nothing or the deadline passes. Dropping everything rebuilds
/// every chain at once in backward; keeping a few links again breaks them.
/// A ResNet-18 settles in three passes.
fn descend(
    candidates: usize,
    measure: &dyn Fn(&[u32]) -> Result<ArenaNeeds>,
    deadline: &Deadline,
) -> Result<ArenaNeeds> {
    let mut current = measure(&(0..candidates as u32).collect::<Vec<_>>())?;
    for _ in 0..PASSES {
        let mut changed = false;
        for c in 0..candidates as u32 {
            if deadline.passed() {
                return Ok(current);
            }
            let (trial, _) = toggled(&current.dropped, c);
            let needs = measure(&trial)?;
            if needs.step_bytes < current.step_bytes {
                (current, changed) = (needs, true);
            }
        }
        if !changed {
            break;
        }
    }
    Ok(current)
}

/// The liveness model's cheapest choice within `budget`, measured by a dry
/// run. The model leaves out what a recomputation holds for a moment: a
/// choice the dry run finds over teaches it that, and it chooses again,
/// [`LESSONS`] times at most; then single changes bring the last one within
/// ([`repair`]). `None` where the model has no choice, or the repair fails;
/// else the step, and whether the model's first choice fitted as it was.
/// A panic of the solver is an error naming the budget.
fn cheapest(
    unbudgeted: &ArenaNeeds,
    budget: usize,
    speed: &Speed,
    measure: &dyn Fn(&[u32]) -> Result<ArenaNeeds>,
    deadline: &Deadline,
) -> Result<Option<(ArenaNeeds, bool)>> {
    let Some(mut model) = liveness::Liveness::of(unbudgeted) else {
        return Ok(None);
    };
    let seconds: Vec<f64> = unbudgeted.candidates.iter().map(|c| speed.seconds(c)).collect();
    let mut last = None;
    let mut rows = Vec::new();
    let mut aim = budget;
    for _ in 0..LESSONS {
        if deadline.passed() {
            break;
        }
        let solved = ilp::cheapest(&model, &seconds, aim, ilp::GAP, &mut rows, deadline.left());
        let choice = match solved {
            Ok(Some(choice)) => choice,
            Ok(None) => break,
            Err(ilp::SolverPanicked(said)) => {
                return Err(Error::setting(
                    Setting::MemoryBudget,
                    format!(
                        "the integer program choosing what to recompute within the budget of {} failed: its solver panicked ({said})",
                        ByteSize(budget)
                    ),
                    None,
                ))
            }
        };
        let needs = measure(&choice.dropped)?;
        if needs.step_bytes <= budget {
            return Ok(Some((needs, last.is_none())));
        }
        // Over with every op's live bytes within the aim: the placement's
        // own excess, which the model cannot see, so it aims that much
        // lower; else it learns where the dry run held more.
        if distance(&needs, aim).0 == 0 {
            aim -= needs.step_bytes - budget;
        } else if !model.learn(&needs) {
            last = Some(needs);
            break;
        }
        last = Some(needs);
    }
    match last {
        Some(needs) => Ok(repair(needs, budget, speed, measure, deadline)?.map(|n| (n, false))),
        None => Ok(None),
    }
}

/// Choices of the model checked by a dry run at most.
const LESSONS: usize = 4;

/// Brings `start` within `budget` by single changes: dropping a kept
/// candidate, or keeping a dropped one (which can end a chain of drops made
/// again at once). Each round takes the change that fits at the least
/// cost, else the one that takes the most bytes above the budget away per
/// second it adds (a change that adds none first; bytes alive above it at
/// each op, then the planned peak's excess, as [`distance`] orders them).
/// What a change costs is measured: the step's predicted time after it,
/// every remaking counted, less before. `None` if no change brings it
/// closer, or the deadline passes first.
fn repair(
    start: ArenaNeeds,
    budget: usize,
    speed: &Speed,
    measure: &dyn Fn(&[u32]) -> Result<ArenaNeeds>,
    deadline: &Deadline,
) -> Result<Option<ArenaNeeds>> {
    let mut current = start;
    for _ in 0..REPAIRS {
        if current.step_bytes <= budget {
            return Ok(Some(current));
        }
        let (above, over) = distance(&current, budget);
        let before = cost(&current, speed);
        let mut cheapest_fit: Option<(f64, ArenaNeeds)> = None;
        let mut best_closer: Option<((f64, f64), ArenaNeeds)> = None;
        for k in 0..current.candidates.len() as u32 {
            if deadline.passed() {
                return Ok(None);
            }
            let (trial, _) = toggled(&current.dropped, k);
            let needs = measure(&trial)?;
            let added = cost(&needs, speed) - before;
            if needs.step_bytes <= budget {
                if cheapest_fit.as_ref().is_none_or(|(c, _)| added < *c) {
                    cheapest_fit = Some((added, needs));
                }
                continue;
            }
            let (after, over_after) = distance(&needs, budget);
            let per_second = |gone: f64| gone / added.max(f64::MIN_POSITIVE);
            let gain = (
                per_second(above.saturating_sub(after) as f64),
                per_second(over.saturating_sub(over_after) as f64),
            );
            let closer = (after, over_after) < (above, over);
            if closer && best_closer.as_ref().is_none_or(|(g, _)| gain > *g) {
                best_closer = Some((gain, needs));
            }
        }
        match (cheapest_fit, best_closer) {
            (Some((_, fit)), _) => return Ok(Some(fit)),
            (None, Some((_, closer))) => current = closer,
            (None, None) => return Ok(None),
        }
    }
    Ok((current.step_bytes <= budget).then_some(current))
}

/// Rounds of [`repair`] at most.
const REPAIRS: usize = 8;

/// Aims of a search for a budget: the budget, then this many percent lower
/// each time...
const AIM_STEP_PERCENT: usize = 3;
/// ...this many aims in all.
const AIMS_BELOW: usize = 8;

/// Aims of the program for a plan: the budget, then [`AIM_STEP_PERCENT`]
/// below it each.
const PROGRAM_AIMS: usize = 4;

#[cfg(test)]
mod tests;
