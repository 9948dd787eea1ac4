//! The bytes a training step holds, op by op, as a function of what it
//! drops: read off one trace of the step without drops, so that a solver
//! can weigh thousands of choices in the time one dry run takes.
//!
//! A candidate kept from forward for backward sits untouched in between:
//! from its last forward read to its first backward read (the trace's
//! [`PlannedBuf::idle`]). Dropped, it is gone for that stretch, until
//! backward makes it again: at its own first read, or earlier, when a
//! dropped candidate that reads it is made again first (a block's output
//! is rebuilt from the block's last convolution and the block before).
//! Everything else of the step is as traced.
//!
//! Time is counted in the step's own ops, the ticks of recomputations
//! folded into the op they serve: those are the same whatever is dropped,
//! so a dry run of a choice lines up with the model op by op. What the
//! model leaves out, the buffers a recomputation holds for a moment (a
//! relu'd input made again early, a shortcut's batch norm made again for a
//! block's output), a dry run shows, and [`Liveness::learn`] adds.

use super::StepKind;
use crate::autograd::Candidate;
use crate::memory::{align_up, StepPlan};
use crate::train::ArenaNeeds;

/// One candidate as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Held {
    /// Bytes it holds (aligned).
    pub bytes: usize,
    /// The ops between which it sits untouched while kept: dropping it
    /// frees its bytes strictly between `from` and `to`, or until it is
    /// made again.
    pub from: u32,
    pub to: u32,
    /// The candidates whose recomputation reads it.
    pub readers: Vec<u32>,
}

#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Liveness {
    /// The most bytes alive at each op of the training step that drops
    /// nothing, with what dry runs of choices showed the model misses.
    pub base: Vec<usize>,
    /// Per candidate, in forward order; `None` for one that is never idle
    /// (dropping it saves nothing).
    pub held: Vec<Option<Held>>,
}

/// The op each tick of `plan` counts as: the step's own ops in order
/// (from 1), a recomputation's ticks as the op they serve, the next one.
fn ops(plan: &StepPlan) -> Vec<u32> {
    let ticks = plan.bufs.iter().map(|b| b.life.last as usize + 1).max().unwrap_or(1);
    let mut op = vec![0u32; ticks];
    let mut own = 0;
    let mut recomputing = plan.recompute_ticks.iter().peekable();
    for (t, op) in op.iter_mut().enumerate().skip(1) {
        if recomputing.next_if(|&&r| r as usize == t).is_some() {
            *op = own + 1;
        } else {
            own += 1;
            *op = own;
        }
    }
    op
}

/// The most bytes `plan` holds at each op (see [`ops`]).
fn live_by_op(plan: &StepPlan, op: &[u32]) -> Vec<usize> {
    let mut delta = vec![0isize; op.len() + 1];
    for b in &plan.bufs {
        delta[b.life.born as usize] += b.size as isize;
        delta[b.life.last as usize + 1] -= b.size as isize;
    }
    let mut by_op = vec![0usize; op.last().map_or(0, |&o| o as usize + 1)];
    let mut live = 0isize;
    for (t, &o) in op.iter().enumerate() {
        live += delta[t];
        by_op[o as usize] = by_op[o as usize].max(live as usize);
    }
    by_op
}

impl Liveness {
    /// The model of the training step of `unbudgeted` (measured dropping
    /// nothing). `None` if its plan does not show every candidate: each is
    /// the next buffer of its name, of its size, in allocation order.
    pub fn of(unbudgeted: &ArenaNeeds) -> Option<Self> {
        Self::from_plan(train_plan(unbudgeted)?, &unbudgeted.candidates)
    }

    fn from_plan(plan: &StepPlan, candidates: &[Candidate]) -> Option<Self> {
        let op = ops(plan);
        let base = live_by_op(plan, &op);
        let held = buffers_of(plan, candidates)?
            .into_iter()
            .map(|at| {
                let b = &plan.bufs[at];
                b.idle.map(|i| Held {
                    bytes: b.size,
                    from: op[i.born as usize],
                    to: op[i.last as usize],
                    readers: Vec::new(),
                })
            })
            .collect();
        let mut model = Self { base, held };
        for (d, c) in candidates.iter().enumerate() {
            for &r in &c.reads {
                if let Some(Some(h)) = model.held.get_mut(r as usize) {
                    h.readers.push(d as u32);
                }
            }
        }
        Some(model)
    }

    /// Adds to the model what a dry run of `dropped` held above it, op by
    /// op. False if the dry run's ops do not line up with the model's, or
    /// it held nothing more.
    pub fn learn(&mut self, measured: &ArenaNeeds) -> bool {
        let Some(plan) = train_plan(measured) else {
            return false;
        };
        let real = live_by_op(plan, &ops(plan));
        if real.len() != self.base.len() {
            return false;
        }
        let model = self.live(&self.flags(&measured.dropped));
        let mut learnt = false;
        for ((base, &real), &model) in self.base.iter_mut().zip(&real).zip(&model) {
            if real > model {
                *base += real - model;
                learnt = true;
            }
        }
        learnt
    }

    /// The op each dropped candidate is made again at (`None` for a kept
    /// one): its own first read in backward, or the earlier one of a dropped
    /// reader made again first.
    pub fn remade_at(&self, dropped: &[bool]) -> Vec<Option<u32>> {
        let mut at: Vec<Option<u32>> = vec![None; self.held.len()];
        // Readers come after what they read, so one pass from the last
        // candidate back sees every reader settled.
        for c in (0..self.held.len()).rev() {
            let Some(h) = &self.held[c] else { continue };
            if !dropped[c] {
                continue;
            }
            let by_reader = h.readers.iter().filter_map(|&d| at[d as usize]).min();
            at[c] = Some(by_reader.map_or(h.to, |r| r.min(h.to)));
        }
        at
    }

    /// Bytes alive at each op with `dropped` (by candidate number) dropped.
    pub fn live(&self, dropped: &[bool]) -> Vec<usize> {
        let mut live = self.base.clone();
        for (c, at) in self.remade_at(dropped).into_iter().enumerate() {
            let (Some(at), Some(h)) = (at, &self.held[c]) else {
                continue;
            };
            for l in &mut live[(h.from + 1) as usize..at.max(h.from + 1) as usize] {
                *l -= h.bytes;
            }
        }
        live
    }

    /// `dropped` by number, as flags.
    pub fn flags(&self, dropped: &[u32]) -> Vec<bool> {
        let mut flags = vec![false; self.held.len()];
        for &d in dropped {
            flags[d as usize] = true;
        }
        flags
    }
}

/// Where each candidate sits in `plan` (its buffer's index): the buffers
/// of a candidate's name are the candidates of that name, in allocation
/// order. `None` if the plan does not show one of them.
fn buffers_of(plan: &StepPlan, candidates: &[Candidate]) -> Option<Vec<usize>> {
    let mut seen: Vec<(&str, usize)> = Vec::new();
    let mut found = Vec::with_capacity(candidates.len());
    for c in candidates {
        // Resume after the last one of this name matched.
        let after = seen.iter().find(|(w, _)| *w == c.what).map_or(0, |&(_, i)| i);
        let at = after + plan.bufs[after..].iter().position(|b| b.what == c.what)?;
        if plan.bufs[at].size != align_up(c.bytes) {
            return None;
        }
        match seen.iter_mut().find(|(w, _)| *w == c.what) {
            Some(s) => s.1 = at + 1,
            None => seen.push((c.what, at + 1)),
        }
        found.push(at);
    }
    Some(found)
}

/// Bytes no choice of drops brings a step below, read off `unbudgeted`
/// (measured dropping nothing): the training step's most bytes alive at
/// one tick with every candidate gone wherever it could be (alive only at
/// the tick that makes it in forward, which every choice runs; chains
/// remade for each reader may free one between its backward reads, so
/// not even those are counted). Everything else it holds every choice
/// holds too, and recomputation only adds. Cheap (no dry run,
/// no program), so a budget below it is refused before any search.
/// `None` where the plan does not show the candidates.
pub fn least_bytes(unbudgeted: &ArenaNeeds) -> Option<usize> {
    let plan = train_plan(unbudgeted)?;
    let mut candidate = vec![false; plan.bufs.len()];
    for at in buffers_of(plan, &unbudgeted.candidates)? {
        candidate[at] = true;
    }
    let ticks = plan.bufs.iter().map(|b| b.life.last as usize + 1).max().unwrap_or(0);
    let mut delta = vec![0isize; ticks + 1];
    for (b, &is) in plan.bufs.iter().zip(&candidate) {
        let last = if is { b.life.born } else { b.life.last };
        delta[b.life.born as usize] += b.size as isize;
        delta[last as usize + 1] -= b.size as isize;
    }
    let (mut live, mut most) = (0isize, 0isize);
    for d in &delta[..ticks] {
        live += d;
        most = most.max(live);
    }
    Some(most as usize)
}

/// The full training step's plan.
fn train_plan(needs: &ArenaNeeds) -> Option<&StepPlan> {
    needs.plans.iter().find(|p| p.key == StepKind::Train as u32)
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::models::{Depth, ResNet};
    use crate::train::{measure_dropping, open_for_planning, DeviceConfig, RunConfig, TrainConfig};
    use crate::Engine;

    /// A narrow ResNet of `depth` planned on the CPU, small enough for
    /// many dry runs.
    pub(in crate::train::budget) fn small(depth: Depth) -> TrainConfig {
        let mut cfg = TrainConfig {
            run: RunConfig {
                model: ResNet::choice(depth, 0.125),
                data_dir: "synthetic:cifar10:160".into(),
                batch: 16,
                test_limit: Some(16),
                ..RunConfig::default()
            },
            device: DeviceConfig::cpu(2),
            ..TrainConfig::default()
        };
        cfg.memory.memory_plan = true;
        cfg
    }

    fn blocks_of(needs: &ArenaNeeds) -> Vec<u32> {
        (0..needs.candidates.len() as u32)
            .filter(|&c| needs.candidates[c as usize].what != "conv2d output")
            .collect()
    }

    /// The model against dry runs of a small ResNet-18 and ResNet-50,
    /// every candidate dropped, every block output (chains of them made
    /// again at once), and two mixes.
    #[test]
    fn the_model_follows_dry_runs_op_by_op_and_learns_what_it_misses() {
        for depth in [Depth::R18, Depth::R50] {
            let cfg = small(depth);
            let (host, device) = open_for_planning(&cfg).unwrap();
            let measure = |d: &[u32]| measure_dropping(&cfg, &host, Engine::planning(&device, None), d);
            let base = measure(&[]).unwrap();
            let model = Liveness::of(&base).expect("every candidate found in the plan");
            // The dependencies: every block output's recomputation reads
            // the block's last convolution and the block before's output
            // or its shortcut's convolution.
            for &c in &blocks_of(&base) {
                assert_eq!(base.candidates[c as usize].reads.len(), 2, "{depth:?} block output {c}");
            }
            let n = base.candidates.len() as u32;
            let blocks = blocks_of(&base);
            let largest = base.candidates.iter().map(|c| align_up(c.bytes)).max().unwrap();
            let peak = |v: &[usize]| v.iter().copied().max().unwrap();
            for (d, within) in [
                ((0..n).collect::<Vec<u32>>(), 0.35),
                (blocks, 0.1),
                ((0..n).filter(|c| c % 2 == 0).collect(), 0.1),
                ((0..n).filter(|c| c % 3 != 1).collect(), 0.35),
            ] {
                let needs = measure(&d).unwrap();
                let plan = train_plan(&needs).unwrap();
                let real = live_by_op(plan, &ops(plan));
                let mine = model.live(&model.flags(&d));
                assert_eq!(mine.len(), real.len(), "{depth:?}: the ops line up");
                // The one excess the model allows itself: a remade block
                // output it keeps until its block's backward, where the
                // step frees it once the next block's convolution is done.
                for (op, (&m, &r)) in mine.iter().zip(&real).enumerate() {
                    assert!(
                        m <= r + largest,
                        "{depth:?}, {} dropped, op {op}: model {m} > dry run {r}",
                        d.len()
                    );
                }
                // What it leaves out, the transients of recomputations, is
                // small unless nearly everything is made again.
                let (m, r) = (peak(&mine) as f64, peak(&real) as f64);
                assert!(
                    m >= r * (1.0 - within),
                    "{depth:?}, {} dropped: model {m} against {r}",
                    d.len()
                );
                let mut taught = model.clone();
                assert!(taught.learn(&needs), "the dry run held more somewhere");
                let after = taught.live(&taught.flags(&d));
                assert!(
                    after.iter().zip(&real).all(|(a, r)| a >= r),
                    "learnt, the model holds what the dry run held"
                );
                assert!(!taught.learn(&needs), "nothing more to learn from the same dry run");
            }
        }
    }
}
