//! The cheapest choice of drops under a budget, exactly, for the liveness
//! model: an integer program in the manner of Checkmate (Jain et al.,
//! 2020), small because the model is.
//!
//! Variables: `x[c]`, candidate `c` dropped; `s[c, k]`, its bytes gone in
//! stretch `k` of the step (the ticks between two consecutive ends of the
//! candidates' idle stretches, so the same candidates may be gone
//! throughout). Minimise the recomputations' seconds `Σ cost[c]·x[c]`
//! subject to, for every stretch `k` inside `c`'s idle one:
//!
//! - `s[c, k] ≤ x[c]`: only a dropped candidate is gone;
//! - for each candidate `d` whose recomputation reads `c`: once `d` has
//!   been read in backward (`k` after `d`'s idle stretch), `s[c, k] ≤ 1 −
//!   x[d]`; within it, `s[c, k] ≤ 1 − x[d] + s[d, k]`: a dropped reader
//!   made again has made `c` again too;
//! - `Σ bytes[c]·s[c, k] ≥ live[k] − budget`, with `live[k]` the most
//!   bytes alive in the stretch without drops.
//!
//! With `x` whole, the best `s` is exactly the model's (a candidate is gone
//! until it, or a dropped reader, is made again), so the optimum is the
//! model's. The memory rows are added lazily: the program starts with the
//! fullest stretch, and each round adds the stretch the model finds most
//! over the budget with the last answer, until the answer fits. A
//! ResNet-50 needs about ten of its hundred-odd stretches.

//!
//! The solver is contained: microlp's documentation allows that it may
//! cycle or panic. Each solve runs under a time limit (the search's time
//! left) beside its node limit, and inside `catch_unwind`, so that a panic
//! becomes [`SolverPanicked`], never an abort.

use super::liveness::Liveness;
use microlp::{ComparisonOp, OptimizationDirection, Problem, SolveOptions, Variable};
use std::time::Duration;

/// The solver panicked: what it said.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct SolverPanicked(pub String);

#[cfg(test)]
thread_local! {
    /// Makes every solve on this thread panic inside the solver's guard:
    /// the tests' way to see a panic contained.
    pub(super) static PANIC_IN_SOLVER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// A choice the program found.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Cheapest {
    /// Candidate numbers, sorted.
    pub dropped: Vec<u32>,
    /// Its cost, as the program summed it.
    pub seconds: f64,
    /// What the branch and bound proved no choice the model holds within
    /// the budget costs less than: within [`GAP`] of `seconds`, unless it
    /// stopped at [`NODES`] nodes.
    pub bound: f64,
}

/// Rounds of added stretches at most.
const ROUNDS: usize = 64;
/// Branch-and-bound nodes per round at most, so that planning ends in
/// seconds and the same way every run: for a ResNet-50 at batch 256 under a
/// third of its step, 2,000 plan 1.1% cheaper than 500 and 20,000 no
/// cheaper, in twice the time (21 s on the CPU).
const NODES: u64 = 2_000;
/// The branch and bound stops within this fraction of the cheapest: 1%,
/// for a ResNet-50 a few seconds rather than tens.
pub(crate) const GAP: f64 = 0.01;
/// Memory rows are in MiB, so that bytes and seconds sit at similar scales.
const UNIT: f64 = (1 << 20) as f64;

/// The cheapest drops whose step the model holds within `budget`, costing
/// `seconds[c]` each; `None` when no choice does (or the solver fails).
/// `rows`: the stretches whose memory rows the program starts with (those
/// of an earlier solve of a model that has since learnt more, say); on
/// return, those it ended with.
/// `gap`: the branch and bound stops at a choice within this fraction of
/// the cheapest ([`GAP`]; 1 for the first it finds). `time`: how long the
/// solves may take in all (each stops at what is left).
pub(crate) fn cheapest(
    model: &Liveness,
    seconds: &[f64],
    budget: usize,
    gap: f64,
    rows: &mut Vec<usize>,
    time: Duration,
) -> Result<Option<Cheapest>, SolverPanicked> {
    let started = std::time::Instant::now();
    let left = || time.saturating_sub(started.elapsed());
    let stretches = stretches(model);
    let fullest = |live: &[usize], (lo, hi): (usize, usize)| live[lo..hi].iter().copied().max().unwrap_or(0);
    // A stretch that every candidate idle in it, gone, leaves over the
    // budget makes the program infeasible: said before any solve.
    let out_of_reach = stretches.iter().any(|&(lo, hi)| {
        let gone: usize = model
            .held
            .iter()
            .flatten()
            .filter(|h| lo > h.from as usize && hi <= h.to as usize)
            .map(|h| h.bytes)
            .sum();
        fullest(&model.base, (lo, hi)).saturating_sub(gone) > budget
    });
    if out_of_reach {
        return Ok(None);
    }
    let mut live = match rows.is_empty() {
        true => model.live(&vec![false; model.held.len()]),
        false => {
            let Some(answer) = solve(model, seconds, budget, gap, &stretches, rows, left())? else {
                return Ok(None);
            };
            let live = model.live(&model.flags(&answer.dropped));
            if live.iter().all(|&l| l <= budget) {
                return Ok(Some(answer));
            }
            live
        }
    };
    for _ in 0..ROUNDS {
        let worst = (0..stretches.len()).max_by_key(|&k| (fullest(&live, stretches[k]), std::cmp::Reverse(k)));
        let Some(worst) = worst else { return Ok(None) };
        if fullest(&live, stretches[worst]) <= budget {
            break;
        }
        if rows.contains(&worst) {
            // The program's answer meets a row the model says it breaks:
            // the two disagree, which is a bug, not a budget out of reach.
            return Ok(None);
        }
        rows.push(worst);
        let Some(answer) = solve(model, seconds, budget, gap, &stretches, rows, left())? else {
            return Ok(None);
        };
        let flags = model.flags(&answer.dropped);
        live = model.live(&flags);
        if live.iter().all(|&l| l <= budget) {
            return Ok(Some(answer));
        }
    }
    if live.iter().all(|&l| l <= budget) {
        return Ok(Some(Cheapest {
            dropped: Vec::new(),
            seconds: 0.0,
            bound: 0.0,
        }));
    }
    Ok(None)
}

/// The stretches of ticks between consecutive ends of idle stretches, as
/// `[lo, hi)`.
fn stretches(model: &Liveness) -> Vec<(usize, usize)> {
    let mut cuts: Vec<usize> = vec![0, model.base.len()];
    for h in model.held.iter().flatten() {
        cuts.push(h.from as usize + 1);
        cuts.push(h.to as usize);
    }
    cuts.sort_unstable();
    cuts.dedup();
    cuts.windows(2)
        .map(|w| (w[0], w[1]))
        .filter(|(lo, hi)| lo < hi)
        .collect()
}

/// One round's program, with the memory rows of `rows` (stretch numbers),
/// solved within `time`, a panic of the solver's caught: `Ok(None)` where
/// it found no choice in time (or none exists).
fn solve(
    model: &Liveness,
    seconds: &[f64],
    budget: usize,
    gap: f64,
    stretches: &[(usize, usize)],
    rows: &[usize],
    time: Duration,
) -> Result<Option<Cheapest>, SolverPanicked> {
    let solved = std::panic::catch_unwind(|| {
        #[cfg(test)]
        if PANIC_IN_SOLVER.with(|p| p.get()) {
            panic!("a panic planted in the solver");
        }
        program(model, seconds, budget, gap, stretches, rows, time)
    });
    solved.map_err(|payload| {
        let said = payload
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| payload.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "no message".into());
        SolverPanicked(said)
    })
}

/// [`solve`]'s program, built and solved.
fn program(
    model: &Liveness,
    seconds: &[f64],
    budget: usize,
    gap: f64,
    stretches: &[(usize, usize)],
    rows: &[usize],
    time: Duration,
) -> Option<Cheapest> {
    let mut p = Problem::new(OptimizationDirection::Minimize);
    let x: Vec<Option<Variable>> = model
        .held
        .iter()
        .zip(seconds)
        .map(|(h, &cost)| h.as_ref().map(|_| p.add_binary_var(cost)))
        .collect();
    // s[c, k] for the stretches in `rows` inside c's idle stretch.
    let inside = |c: usize, k: usize| {
        let (lo, hi) = stretches[k];
        model.held[c]
            .as_ref()
            .is_some_and(|h| lo > h.from as usize && hi <= h.to as usize)
    };
    let mut s: Vec<Vec<Option<Variable>>> = vec![vec![None; rows.len()]; model.held.len()];
    for (c, per) in s.iter_mut().enumerate() {
        for (r, &k) in rows.iter().enumerate() {
            if inside(c, k) {
                per[r] = Some(p.add_var(0.0, (0.0, 1.0)));
            }
        }
    }
    for (c, h) in model.held.iter().enumerate() {
        let (Some(h), Some(xc)) = (h, x[c]) else { continue };
        for (r, &k) in rows.iter().enumerate() {
            let Some(sc) = s[c][r] else { continue };
            p.add_constraint([(sc, 1.0), (xc, -1.0)], ComparisonOp::Le, 0.0);
            for &d in &h.readers {
                let d = d as usize;
                let (Some(dh), Some(xd)) = (&model.held[d], x[d]) else {
                    continue;
                };
                if stretches[k].0 >= dh.to as usize {
                    p.add_constraint([(sc, 1.0), (xd, 1.0)], ComparisonOp::Le, 1.0);
                } else if let Some(sd) = s[d][r] {
                    p.add_constraint([(sc, 1.0), (xd, 1.0), (sd, -1.0)], ComparisonOp::Le, 1.0);
                }
            }
        }
    }
    // Once made again a candidate stays: gone in a stretch only if gone in
    // every earlier one (implied by the rows above with x whole; stated, it
    // tightens the relaxation the branch and bound prunes by).
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&r| rows[r]);
    for per in &s {
        let gone: Vec<Variable> = order.iter().filter_map(|&r| per[r]).collect();
        for w in gone.windows(2) {
            p.add_constraint([(w[1], 1.0), (w[0], -1.0)], ComparisonOp::Le, 0.0);
        }
    }
    for (r, &k) in rows.iter().enumerate() {
        let (lo, hi) = stretches[k];
        let live = model.base[lo..hi].iter().copied().max().unwrap_or(0);
        let gone: Vec<(Variable, f64)> = (0..model.held.len())
            .filter_map(|c| Some((s[c][r]?, model.held[c].as_ref()?.bytes as f64 / UNIT)))
            .collect();
        p.add_constraint(&gone[..], ComparisonOp::Ge, live.saturating_sub(budget) as f64 / UNIT);
    }
    let mut options = SolveOptions::default();
    options.node_limit = Some(NODES);
    options.mip_gap = gap;
    // A limit of nothing left still lets the solver start; it stops at
    // its first check.
    options.time_limit = Some(time.max(Duration::from_millis(1)));
    let solution = p.solve_with(options).ok()?.into_solution().ok()?;
    let dropped: Vec<u32> = x
        .iter()
        .enumerate()
        .filter(|(_, v)| v.is_some_and(|v| solution.var_value(v) > 0.5))
        .map(|(c, _)| c as u32)
        .collect();
    let total = dropped.iter().map(|&c| seconds[c as usize]).sum();
    Some(Cheapest {
        seconds: total,
        dropped,
        bound: solution.stats().best_bound.unwrap_or(total).min(total),
    })
}

#[cfg(test)]
mod tests {
    use super::super::liveness::Held;
    use super::*;

    /// A small xorshift, so the instances are the same every run.
    struct Rng(u64);
    impl Rng {
        fn next(&mut self, below: u64) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0 % below
        }
    }

    /// A step of `n` candidates made in forward order (candidate `c` at op
    /// `c + 1`, read last at op `c + 2`) and read in backward in reverse
    /// (at op `2n + 3 - c`), each read by the next one's recomputation and
    /// some by the one after too (a residual), over a base of the kept
    /// candidates plus a transient at every op.
    fn instance(rng: &mut Rng, n: usize) -> (Liveness, Vec<f64>) {
        let ops = 2 * n + 4;
        let mut held: Vec<Option<Held>> = (0..n)
            .map(|c| {
                Some(Held {
                    bytes: (1 + rng.next(8) as usize) << 20,
                    from: c as u32 + 2,
                    to: (2 * n + 3 - c) as u32,
                    readers: Vec::new(),
                })
            })
            .collect();
        for (c, h) in held.iter_mut().enumerate() {
            for d in [c + 1, c + 2] {
                if d < n && (d == c + 1 || rng.next(2) == 0) {
                    h.as_mut().unwrap().readers.push(d as u32);
                }
            }
        }
        let mut base = vec![0usize; ops];
        for (op, live) in base.iter_mut().enumerate() {
            *live = (rng.next(4) as usize) << 20;
            for h in held.iter().flatten() {
                if op as u32 >= h.from - 1 && op as u32 <= h.to {
                    *live += h.bytes;
                }
            }
        }
        let seconds = (0..n).map(|_| 1.0 + rng.next(100) as f64).collect();
        (Liveness { base, held }, seconds)
    }

    /// Every subset, by the model: the cheapest that fits, if any.
    fn by_brute_force(model: &Liveness, seconds: &[f64], budget: usize) -> Option<f64> {
        let n = model.held.len();
        (0u32..1 << n)
            .filter_map(|set| {
                let flags: Vec<bool> = (0..n).map(|c| set >> c & 1 == 1).collect();
                let fits = model.live(&flags).iter().all(|&l| l <= budget);
                fits.then(|| (0..n).filter(|&c| flags[c]).map(|c| seconds[c]).sum::<f64>())
            })
            .min_by(f64::total_cmp)
    }

    /// A budget some stretch cannot meet with every candidate idle in it
    /// gone is refused before the solver runs (a solver that panics is
    /// never reached); one every stretch can meet is solved.
    #[test]
    fn a_stretch_out_of_reach_is_refused_before_the_solver_runs() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let (model, seconds) = instance(&mut rng, 8);
        let stretches = stretches(&model);
        let least = stretches
            .iter()
            .map(|&(lo, hi)| {
                let gone: usize = model
                    .held
                    .iter()
                    .flatten()
                    .filter(|h| lo > h.from as usize && hi <= h.to as usize)
                    .map(|h| h.bytes)
                    .sum();
                model.base[lo..hi].iter().max().unwrap() - gone
            })
            .max()
            .unwrap();
        PANIC_IN_SOLVER.with(|p| p.set(true));
        let below = cheapest(&model, &seconds, least - 1, GAP, &mut Vec::new(), Duration::MAX);
        let at = cheapest(&model, &seconds, least, GAP, &mut Vec::new(), Duration::MAX);
        PANIC_IN_SOLVER.with(|p| p.set(false));
        assert_eq!(below, Ok(None));
        assert_eq!(at, Err(SolverPanicked("a panic planted in the solver".into())));
    }

    #[test]
    fn the_program_finds_the_cheapest_choice_every_subset_shows() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut compared = 0;
        for _ in 0..40 {
            let n = 6 + rng.next(5) as usize;
            let (model, seconds) = instance(&mut rng, n);
            let peak = model.base.iter().copied().max().unwrap();
            let budget = peak / 100 * (35 + rng.next(55) as usize);
            let best = by_brute_force(&model, &seconds, budget);
            let found = cheapest(&model, &seconds, budget, GAP, &mut Vec::new(), Duration::MAX).unwrap();
            match (best, found) {
                (None, None) => {}
                (Some(best), Some(found)) => {
                    let live = model.live(&model.flags(&found.dropped));
                    assert!(live.iter().all(|&l| l <= budget), "the program's choice does not fit");
                    // Within the branch and bound's tolerance of the
                    // cheapest, and its bound below that.
                    assert!(
                        found.seconds <= best * (1.0 + GAP) + 1e-9,
                        "{} vs the cheapest {best}",
                        found.seconds
                    );
                    assert!(
                        found.bound <= best + 1e-9,
                        "bound {} above the cheapest {best}",
                        found.bound
                    );
                    compared += 1;
                }
                (best, found) => panic!("every subset: {best:?}; the program: {found:?}"),
            }
        }
        assert!(compared >= 20, "only {compared} instances had a choice that fits");
    }
}
