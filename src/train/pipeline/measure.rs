//! The one seam through which the pipeline sees a step before it runs: a
//! dry run of the run's steps with a given choice (which candidates backward
//! recomputes, whether chains of them are held, on which convolution
//! algorithms), returning what they need ([`ArenaNeeds`]). Sizing, the
//! memory budget's search, convolution tuning, `memory` and `--max-batch`
//! all measure through it; none builds a session itself.

use super::arenas::Algorithms;
use super::assemble::{assemble, Live};
use crate::autograd::Candidate;
use crate::data::DataSet;
use crate::memory::{PersistentBuf, StepPlan};
use crate::train::shapes::StepKind;
use crate::train::TrainConfig;
use crate::Engine;
use crate::Result;

/// A candidate step: what its dry run does differently from the plain one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StepChoice {
    /// Candidates for recomputation (numbered in forward order) that
    /// backward makes again rather than keeps.
    pub dropped: Vec<u32>,
    /// Whether chains of dropped candidates are made again for each
    /// reader rather than held (see [`crate::Step`]'s `saved`).
    pub transient_chains: bool,
}

impl StepChoice {
    /// `dropped` recomputed, chains of them held.
    pub fn held(dropped: &[u32]) -> Self {
        Self {
            dropped: dropped.to_vec(),
            transient_chains: false,
        }
    }

    /// `dropped` recomputed, chains of them made again for each reader.
    pub fn transient(dropped: &[u32]) -> Self {
        Self {
            dropped: dropped.to_vec(),
            transient_chains: true,
        }
    }
}

/// A measuring of candidate steps: the seam as the budget's search takes
/// it (a closure in its tests).
pub(crate) type Measure<'a> = dyn Fn(&StepChoice) -> Result<ArenaNeeds> + 'a;

/// What a run needs of its arena, measured by a dry run of every step it
/// takes.
///
/// The step bytes are those of the liveness plans, so an arena of
/// [`ArenaNeeds::total`] bytes holds the run only with the plans adopted:
/// without them the steps bump-allocate and run out of room.
/// [`ArenaNeeds::engine`] makes the arena and adopts them, ready to use:
///
/// ```
/// use bumpgrad::train::{Pipeline, TrainConfig};
/// use bumpgrad::{Device, DeviceRequest};
///
/// let mut cfg = TrainConfig::default(); // the MNIST CNN on data/mnist
/// (cfg.run.train_limit, cfg.run.test_limit) = (Some(200), Some(100));
/// (cfg.device.request, cfg.device.threads) = (DeviceRequest::Cpu, 1);
/// let needs = Pipeline::open(&cfg, None)?.dry_runs().plain()?;
/// let engine = needs.engine(Device::cpu(1)?)?;
/// assert!(engine.arena().capacity() >= needs.total());
/// assert_eq!(engine.arena().plans(), &needs.plans[..]);
/// # Ok::<(), bumpgrad::Error>(())
/// ```
#[derive(Debug, Clone, PartialEq)]
pub struct ArenaNeeds {
    /// The persistent region: model, optimizer state, the data set, the
    /// per-step tables.
    pub persistent_bytes: usize,
    /// The largest step: the largest plan's peak with the memory plan, the
    /// bump high-water without.
    pub step_bytes: usize,
    /// Candidates for recomputation (convolution and block outputs) in a
    /// full training step, and
    /// those a memory budget has the step recompute rather than keep.
    pub(crate) candidates: Vec<Candidate>,
    /// The candidates the choice recomputes, by number.
    pub dropped: Vec<u32>,
    /// Whether chains of dropped candidates are remade for each reader
    /// rather than held (see [`crate::Step`]'s `saved`).
    pub transient_chains: bool,
    /// The persistent allocations, for the memory report.
    pub persistent: Vec<PersistentBuf>,
    /// The step plans, by key: a [`StepKind`] plus four times the place
    /// of the step's shape (its batch size and length) among the run's.
    pub plans: Vec<StepPlan>,
    /// Each plan's name for people, in the order of `plans`: its kind, and
    /// its length where the task's steps have lengths.
    pub plan_names: Vec<String>,
}

impl ArenaNeeds {
    /// The arena's bytes: the persistent region and the largest step. Its
    /// steps fit only as measured, following the plans and recomputing what
    /// was dropped: make the arena with [`ArenaNeeds::engine`], not
    /// `Engine::new(device, needs.total())`, whose first step runs out of
    /// room.
    pub fn total(&self) -> usize {
        self.persistent_bytes + self.step_bytes
    }

    /// An engine on `device` whose arena holds what was measured: the step
    /// plans adopted and the dropped candidates recomputed, as the dry runs
    /// did (its steps fit only so).
    pub fn engine(&self, device: crate::backend::Device) -> Result<Engine> {
        let mut engine = super::arenas::real(device, self.total())?;
        engine.set_recomputed(&self.dropped, self.transient_chains);
        engine.arena_mut().adopt_plans(&self.plans);
        Ok(engine)
    }

    /// Seconds the training step's convolutions take beyond the fastest
    /// algorithms the device timed (see [`crate::memory::StepPlan::slower_seconds`]).
    pub fn slower_seconds(&self) -> f64 {
        self.plans
            .iter()
            .find(|p| p.key == StepKind::Train as u32)
            .map_or(0.0, |p| p.slower_seconds)
    }
}

/// Dry runs of one run's steps: its settings, its data, and the
/// convolution algorithms they run on.
pub struct DryRuns<'a> {
    cfg: &'a TrainConfig,
    host: &'a DataSet,
    algorithms: Algorithms<'a>,
}

impl<'a> DryRuns<'a> {
    pub(crate) fn new(cfg: &'a TrainConfig, host: &'a DataSet, algorithms: Algorithms<'a>) -> Self {
        Self { cfg, host, algorithms }
    }

    /// The seam: what the run's steps need with `choice`.
    pub fn measure(&self, choice: &StepChoice) -> Result<ArenaNeeds> {
        measure_on(self.cfg, self.host, self.algorithms.dry(None), choice)
    }

    /// The plain step, nothing recomputed.
    pub fn plain(&self) -> Result<ArenaNeeds> {
        self.measure(&StepChoice::default())
    }

    /// For a task whose every step differs: its largest step and what the
    /// first epoch's steps hold (see `Session::dynamic_steps`).
    pub(crate) fn dynamic_steps(&self) -> Result<Option<crate::memory::DynamicSteps>> {
        assemble(self.cfg, self.host, self.algorithms.dry(None), Live::DRY)?.dynamic_steps()
    }

    /// Runs the steps on a planning engine whose arena has `capacity` bytes, on the device's
    /// own algorithms: the error names the first allocation that does not
    /// fit.
    pub(crate) fn replay_within(&self, capacity: usize) -> Result<()> {
        let dry = self.algorithms.dry(Some(capacity));
        assemble(self.cfg, self.host, dry, Live::DRY)?.probe().map(drop)
    }
}

/// [`DryRuns::measure`] on `dry`, a planning engine.
pub(crate) fn measure_on(
    cfg: &TrainConfig,
    host: &DataSet,
    mut dry: Engine,
    choice: &StepChoice,
) -> Result<ArenaNeeds> {
    dry.set_recomputed(&choice.dropped, choice.transient_chains);
    let mut session = assemble(cfg, host, dry, Live::DRY)?;
    let candidates = session.probe()?;
    let arena = session.engine().arena();
    let plans = arena.plans().to_vec();
    // Named only where steps have lengths: the other runs' reports keep
    // their kinds' names, and their JSON its fields.
    let plan_names = match session.lengths().is_empty() {
        true => Vec::new(),
        false => plans.iter().map(|p| session.plan_name(p.key)).collect(),
    };
    let step_bytes = match plans.iter().map(|p| p.peak).max() {
        Some(peak) if cfg.memory.memory_plan => peak,
        _ => arena.stats().step_high_water_bytes,
    };
    Ok(ArenaNeeds {
        persistent_bytes: arena.stats().persistent_bytes,
        step_bytes,
        persistent: arena.persistent_log().to_vec(),
        plans,
        plan_names,
        candidates,
        dropped: choice.dropped.clone(),
        transient_chains: choice.transient_chains,
    })
}
