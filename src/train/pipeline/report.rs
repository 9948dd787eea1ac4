//! The memory plan of a run without running it (and without allocating
//! its arena): what `bumpgrad memory` prints.

use super::{device_kind, ArenaNeeds, Pipeline};
use crate::autograd::Candidate;
use crate::memory::{
    chain_mode, MemoryReport, RecomputeReason, Recomputed, RecomputedKind, RecomputedOutput, SearchReport,
};
use crate::train::budget::{extra_seconds, least_extra_seconds, step_multiply_adds, Speed};
use crate::train::{Recompute, TrainConfig};
use crate::Result;

impl Pipeline<'_> {
    /// Where every byte of the run's arena would go, planned on the device
    /// it asks for (so cuDNN's workspaces are the GPU's when one is used),
    /// and the device's name. What the training step recomputes under a
    /// budget is what the run recomputes with the same settings.
    pub fn memory_report(&self) -> Result<(MemoryReport, String)> {
        let planned = TrainConfig {
            memory: crate::train::MemoryConfig {
                memory_plan: true,
                ..self.cfg.memory.clone()
            },
            ..self.cfg.clone()
        };
        let (unbudgeted, budgeted) = self.budgeted(&planned)?;
        let needs = budgeted.needs;
        self.capacity(&planned, &needs)?;
        let mut report = MemoryReport::new(&needs.persistent, &needs.plans).named(needs.plan_names.clone());
        report.dynamic = self.dry_runs().dynamic_steps()?;
        if report.dynamic.is_some() {
            // Bump-allocated: the step region is the largest step's, no plan's.
            report.arena_bytes = needs.total();
        }
        // The default's drops are weighed against any choice of as small a
        // step.
        let why = super::recompute_reason(self.cfg, &budgeted.search);
        report.recomputed = match (self.cfg.memory.memory_budget, why) {
            (Some(budget), _) => Some(budget),
            (None, RecomputeReason::Cheap) if !needs.dropped.is_empty() => Some(needs.step_bytes),
            (None, _) => None,
        }
        .map(|budget| {
            let search = budgeted.search.unwrap_or_default();
            recomputed(&needs, &unbudgeted, budget, &self.speed(), search, why)
        });
        // As the run: no room to time convolutions where there are none.
        let grown_from = super::grown_from(self.cfg, &unbudgeted, &needs, &budgeted.search);
        report.tuning_bytes = super::tuning_bytes(self.cfg, device_kind(&self.device), needs.step_bytes, grown_from)
            .filter(|_| !needs.candidates.is_empty());
        Ok((report, self.device.describe()))
    }
}

/// The memory plan of a run of `cfg` (see [`Pipeline::memory_report`]).
/// Under a memory budget on a GPU that times its convolutions (the
/// default), the plan is `train`'s own: the arena is made, the algorithms
/// are timed in it, and what is recomputed is chosen with their
/// workspaces, as `train` chooses it (see [`Pipeline::timed_memory_report`]).
pub fn memory_report(cfg: &TrainConfig) -> Result<(MemoryReport, String)> {
    let pipeline = Pipeline::open(cfg, None)?;
    let timed = super::tuning::times_convolutions(cfg, device_kind(&pipeline.device));
    // The default's search for a smaller step runs on the timed algorithms
    // too: reported from them, as under a budget.
    let searched = cfg.memory.memory_budget.is_some() || cfg.memory.recompute == Recompute::Lean;
    match timed && searched && cfg.memory.memory_plan {
        true => pipeline.timed_memory_report(),
        false => pipeline.memory_report(),
    }
}

impl Pipeline<'_> {
    /// The plan `train` follows under a budget on a GPU that times its
    /// convolutions: what [`Pipeline::build`] decides before it builds the
    /// run's parts (the arena is made and the algorithms timed in it), so
    /// the outputs recomputed, the chain mode, the algorithms and their
    /// workspaces are the run's. On a shared GPU another process can move
    /// cuDNN's timings, and with them a close choice.
    pub fn timed_memory_report(self) -> Result<(MemoryReport, String)> {
        let name = self.device.describe();
        let cfg = self.cfg;
        let prepared = self.prepare(cfg)?;
        let needs = &prepared.needs;
        let mut report = MemoryReport::new(&needs.persistent, &needs.plans).named(needs.plan_names.clone());
        let lean = prepared.conv_tuning.and_then(|t| t.lean);
        let why = super::final_reason(cfg, &prepared.search, prepared.conv_tuning.as_ref());
        // The default's drops are weighed against any choice of as small a
        // step; a budget's, against any within it.
        let budget = match cfg.memory.memory_budget {
            Some(budget) => Some(budget),
            None => (!needs.dropped.is_empty()).then_some(needs.step_bytes),
        };
        if let Some(budget) = budget {
            let search = prepared.search.unwrap_or_default();
            let mut r = recomputed(needs, &prepared.unbudgeted, budget, &prepared.speed, search, why);
            r.workspace_extra_seconds = prepared.conv_tuning.map(|t| t.seconds_lost);
            r.lean = lean;
            report.recomputed = Some(r);
        }
        Ok((report, name))
    }
}

/// Each output `needs` recomputes: what a run with the same settings
/// follows, for the reports.
pub(super) fn outputs(needs: &ArenaNeeds) -> Vec<RecomputedOutput> {
    needs
        .dropped
        .iter()
        .map(|&id| {
            let c = &needs.candidates[id as usize];
            RecomputedOutput {
                id,
                what: c.what,
                bytes: c.bytes,
                remade: c.remade,
            }
        })
        .collect()
}

/// What `needs` recomputes under `budget` (for the default's drops, its
/// own step), against the step without (`unbudgeted`), for the report;
/// `search`: how it was found; `reason`: what for.
fn recomputed(
    needs: &ArenaNeeds,
    unbudgeted: &ArenaNeeds,
    budget: usize,
    speed: &Speed,
    search: SearchReport,
    reason: RecomputeReason,
) -> Recomputed {
    let dropped: Vec<Candidate> = needs
        .dropped
        .iter()
        .map(|&i| needs.candidates[i as usize].clone())
        .collect();
    let mut kinds: Vec<RecomputedKind> = Vec::new();
    for c in &needs.candidates {
        let at = match kinds.iter().position(|k| k.what == c.what) {
            Some(at) => at,
            None => {
                kinds.push(RecomputedKind {
                    what: c.what,
                    dropped: 0,
                    of: 0,
                    bytes: 0,
                });
                kinds.len() - 1
            }
        };
        kinds[at].of += 1;
    }
    for c in &dropped {
        if let Some(k) = kinds.iter_mut().find(|k| k.what == c.what) {
            k.dropped += 1;
            k.bytes += c.bytes;
        }
    }
    // Recomputing a convolution runs its forward again.
    let step_macs = step_multiply_adds(&needs.candidates);
    Recomputed {
        reason,
        dropped: dropped.len(),
        which: needs.dropped.clone(),
        candidates: needs.candidates.len(),
        dropped_bytes: dropped.iter().map(|c| c.bytes).sum(),
        kinds,
        extra_multiply_adds: dropped
            .iter()
            .map(|c| c.multiply_adds * u64::from(c.remade.max(1)))
            .sum(),
        step_multiply_adds: step_macs,
        predicted_extra_seconds: extra_seconds(&needs.candidates, &needs.dropped, speed),
        least_extra_seconds: least_extra_seconds(unbudgeted, budget, speed),
        workspace_extra_seconds: None,
        unbudgeted_step_bytes: unbudgeted.step_bytes,
        transient_chains: needs.transient_chains,
        chain_mode: chain_mode(needs.transient_chains),
        outputs: outputs(needs),
        search,
        lean: None,
    }
}
