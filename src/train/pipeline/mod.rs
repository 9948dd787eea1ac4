//! One pipeline from a run's settings to a session ready to train:
//!
//! 1. **open**: the settings checked, the data loaded, the device opened
//!    and set to the run's arithmetic (a data-parallel rank's joins its
//!    group);
//! 2. **size**: one dry run of every step the run takes (at each batch
//!    size, full and last training and evaluation steps) measures the
//!    persistent bytes and plans each step's memory;
//! 3. **budget**: under a memory budget, or a given arena too small for the
//!    step, what backward recomputes is searched for (`budget/`);
//! 4. **arena**: the one allocation is made, as large as the run needs
//!    (plus room for timed convolution algorithms' workspaces on a GPU) or
//!    as large as given;
//! 5. **tune**: a GPU times its convolution algorithms in the arena's free
//!    bytes and keeps the fastest whose step still fits (`tuning.rs`);
//! 6. **plan**: the arena adopts the plans of the steps as finally chosen,
//!    and the run's parts are built in it (`assemble.rs`).
//!
//! Steps 2, 3 and 5 see a step only through one seam, a dry run of a
//! candidate step ([`DryRuns::measure`], `measure.rs`); `bumpgrad memory`
//! runs 1 to 3 and reports, `--max-batch` repeats 2 and 3 per batch.
//! Arenas are made in one file (`arenas.rs`).

mod arenas;
mod assemble;
mod embeddings;
mod measure;
mod report;
mod tuning;

#[cfg(test)]
pub(crate) use measure::measure_on;
pub(crate) use measure::Measure;
pub use measure::{ArenaNeeds, DryRuns, StepChoice};
pub use report::memory_report;
pub(crate) use tuning::tuning_bytes;

use super::budget::{cheap_floor, meet_budget, Budgeted, Speed};
use super::config::gpu_precision_on_cpu;
use super::report::{RecomputePlan, RunInfo};
use super::session::Session;
use super::{Recompute, TrainConfig};
use crate::backend::{Device, DeviceKind, Precision};
use crate::data::{DataSet, DataSource};
use crate::distributed::Join;
use crate::memory::{ArenaError, ByteSize, MemoryReport, RecomputeReason, SearchReport};
use crate::{Error, Result, Setting};
use arenas::Algorithms;
use assemble::{assemble, Live};

/// A run opened: its settings, its data and its device, ready to be
/// measured, planned and built.
pub struct Pipeline<'c> {
    cfg: &'c TrainConfig,
    host: DataSet,
    device: Device,
    /// Why `--device auto` chose the CPU, if it did.
    device_note: Option<String>,
    /// Whether the run's full steps are captured as CUDA graphs.
    graph: bool,
}

impl<'c> Pipeline<'c> {
    /// Checks `cfg`, loads its data and opens its device, set to the run's
    /// arithmetic (cuDNN's algorithms, and so their workspaces, depend on
    /// it, so it is set before anything is planned). A rank of a
    /// data-parallel run joins its group (`join`) here.
    pub fn open(cfg: &'c TrainConfig, join: Option<Join>) -> Result<Self> {
        cfg.validate()?;
        let host = load_data(cfg)?;
        let ordinal = join.as_ref().map_or(0, |j| j.ordinal);
        let (mut device, device_note) =
            Device::open_on(cfg.device.request, cfg.device.threads, ordinal, crate::ops::KERNELS)?;
        configure(cfg, &mut device, device_note.as_deref())?;
        if let Some(join) = join {
            device.join(join.group)?;
        }
        let graph = use_graph(cfg, device_kind(&device))?;
        Ok(Self {
            cfg,
            host,
            device,
            device_note,
            graph,
        })
    }

    /// The data set, as loaded and cut to the run's limits.
    pub fn data(&self) -> &DataSet {
        &self.host
    }

    /// The data set, to change before the run is built (evaluating a
    /// checkpoint normalises as the checkpoint's run did).
    pub fn data_mut(&mut self) -> &mut DataSet {
        &mut self.host
    }

    /// "cpu (2 threads)", "NVIDIA H200 (sm_90)".
    pub fn device_name(&self) -> String {
        self.device.describe()
    }

    /// Dry runs of this run's steps on the device's own convolution
    /// algorithms: the seam everything before the arena measures through.
    pub fn dry_runs(&self) -> DryRuns<'_> {
        self.dry_runs_of(self.cfg)
    }

    /// The device's cost model, for the budget's search.
    pub(crate) fn speed(&self) -> Speed {
        Speed::of(
            device_kind(&self.device),
            self.cfg.device.precision,
            self.device.threads(),
        )
    }

    /// Dry runs of `cfg` (this run's settings, or a variant of them) on
    /// this data and device, on the device's own convolution algorithms.
    pub(crate) fn dry_runs_of<'a>(&'a self, cfg: &'a TrainConfig) -> DryRuns<'a> {
        DryRuns::new(cfg, &self.host, Algorithms::Heuristic(&self.device))
    }

    /// The steps of `cfg` measured without a budget, then within it: what
    /// the run recomputes, as `bumpgrad memory` reports it, and how the
    /// search went. Dry runs only: a budget out of reach is refused here,
    /// before any arena is made.
    fn budgeted(&self, cfg: &TrainConfig) -> Result<(ArenaNeeds, Budgeted)> {
        let runs = self.dry_runs_of(cfg);
        let unbudgeted = runs.plain()?;
        let measure = |choice: &StepChoice| runs.measure(choice);
        let budgeted = match (cfg.memory.memory_budget, cfg.memory.recompute) {
            (None, Recompute::Cheap | Recompute::Lean) => Budgeted {
                needs: cheap_floor(&measure, unbudgeted.clone())?,
                search: None,
            },
            (budget, _) => meet_budget(
                &measure,
                budget,
                &self.speed(),
                cfg.run.model.name(),
                unbudgeted.clone(),
            )?,
        };
        Ok((unbudgeted, budgeted))
    }

    /// The arena's capacity: what `needs` measured, or the given arena
    /// size when it holds that; a given size too small is refused with the
    /// buffers that do not fit and the size that would.
    fn capacity(&self, cfg: &TrainConfig, needs: &ArenaNeeds) -> Result<usize> {
        let memory = &cfg.memory;
        match memory.arena_size {
            None => Ok(needs.total()),
            Some(given) if given >= needs.total() => Ok(given),
            Some(given) if given >= needs.persistent_bytes && memory.memory_budget.is_some() => {
                // Both given, and the arena is the one too small: say so,
                // with the arena that holds the budget's step.
                let room = given - needs.persistent_bytes;
                let budget = memory.memory_budget.unwrap_or(room);
                Err(Error::setting(
                    Setting::ArenaSize,
                    format!(
                        "an arena of {} leaves {} above its persistent region of {}, and the step planned within the memory budget of {} needs {}: the arena is the one to raise{}",
                        ByteSize(given),
                        ByteSize(room),
                        ByteSize(needs.persistent_bytes),
                        ByteSize(budget),
                        ByteSize(needs.step_bytes),
                        match budget > room {
                            true => format!(" (or the budget to lower, to {} or less, if a step fits that)", ByteSize(room)),
                            false => String::new(),
                        },
                    ),
                    Some(format!("{} or more", crate::memory::suggest(needs.total()))),
                ))
            }
            Some(given) if given >= needs.persistent_bytes && memory.memory_plan => {
                // The step does not fit: name the buffers alive at the plan's
                // peak, and the size that fits.
                let plan = needs.plans.iter().max_by_key(|p| p.peak);
                let top = plan.map(|p| p.top_live(4)).unwrap_or_default();
                Err(Error::Arena(ArenaError::StepTooLarge {
                    step_bytes: needs.step_bytes,
                    persistent_bytes: needs.persistent_bytes,
                    capacity: given,
                    would_fit: needs.total(),
                    live: top.iter().map(|b| (b.what, b.size)).collect(),
                }))
            }
            Some(given) => {
                // Replay on a planning engine of the given arena size to name the allocation
                // that fails, then report the size that fits the whole step.
                let err = match self.dry_runs_of(cfg).replay_within(given) {
                    Err(e) => e,
                    Ok(()) => Error::setting(
                        Setting::ArenaSize,
                        format!(
                            "an arena of {given} bytes is below the {} bytes this run needs",
                            needs.total()
                        ),
                        Some(crate::memory::suggest(needs.total())),
                    ),
                };
                Err(match err {
                    Error::Arena(ArenaError::Exhausted {
                        region,
                        what,
                        shape,
                        requested,
                        in_use,
                        capacity,
                        live,
                        ..
                    }) => Error::Arena(ArenaError::Exhausted {
                        region,
                        what,
                        shape,
                        requested,
                        in_use,
                        capacity,
                        would_fit: needs.total(),
                        live,
                    }),
                    other => other,
                })
            }
        }
    }

    /// The needs of the step recomputing convolution and block outputs to
    /// fit the given arena's room above the persistent region (`plain`:
    /// the step measured with nothing recomputed; `needs`: what the run
    /// chose without the arena), if any recomputation does; with the
    /// memory plan only, and not where a budget already chose.
    fn arena_as_budget(&self, plain: &ArenaNeeds, needs: &ArenaNeeds) -> Option<Budgeted> {
        let memory = &self.cfg.memory;
        let given = memory.arena_size?;
        let room = given.checked_sub(plain.persistent_bytes)?;
        if !memory.memory_plan || memory.memory_budget.is_some() && !needs.dropped.is_empty() {
            return None;
        }
        let runs = self.dry_runs();
        let measure = |choice: &StepChoice| runs.measure(choice);
        meet_budget(
            &measure,
            Some(room),
            &self.speed(),
            self.cfg.run.model.name(),
            plain.clone(),
        )
        .ok()
        .filter(|fit| fit.needs.total() <= given)
    }

    /// Sizes and budgets `cfg`'s steps (this run's settings, or a variant
    /// of them), makes the arena and times the convolutions in it: all but
    /// building the run's parts. `memory` reports from here what `train`
    /// then builds on.
    fn prepare(self, cfg: &TrainConfig) -> Result<Prepared> {
        let kind = device_kind(&self.device);
        let speed = self.speed();
        // Every refusal (a budget out of reach, an arena too small) comes
        // from dry runs, before the arena is made.
        let (unbudgeted, Budgeted { mut needs, mut search }) = self.budgeted(cfg)?;
        let mut capacity = match self.capacity(cfg, &needs) {
            Ok(capacity) => capacity,
            // A given arena too small for the step is a budget too: recompute
            // convolution and block outputs if that fits it, else refuse it as
            // before.
            Err(too_small) => match self.arena_as_budget(&unbudgeted, &needs) {
                Some(fit) => {
                    (needs, search) = (fit.needs, fit.search);
                    self.capacity(cfg, &needs)?
                }
                None => return Err(too_small),
            },
        };
        // A GPU times its convolution algorithms in the new arena's free
        // bytes before the first step (nothing is in it yet: the whole arena
        // is free to time with), as PyTorch's cudnn.benchmark does. The
        // fastest may want more workspace than the heuristic's choice. The
        // liveness plan puts a backward convolution's workspace in bytes the
        // step has freed, so the step grows far less than the workspaces
        // (ResNet-18 at batch 128 on the H200: 13% for 9.9 rather than 23.5
        // ms a step); where it would grow more than the workspace growth,
        // or past a given arena or budget, they are held down (`tuning.rs`).
        // A step without convolutions (a language model) has nothing to
        // time: no room for it, and no line saying none changed. Only
        // convolutions and their batch norms are candidates for
        // recomputation, so a step with none has no convolution.
        let tuning = tuning::times_convolutions(cfg, kind) && !needs.candidates.is_empty();
        let grown_from = grown_from(cfg, &unbudgeted, &needs, &search);
        if tuning {
            capacity += tuning_bytes(cfg, kind, needs.step_bytes, grown_from).unwrap_or(0);
        }
        let Self {
            host,
            device,
            device_note,
            graph,
            ..
        } = self;
        let mut engine = arenas::real(device, capacity)?;
        let conv_tuning = match tuning {
            true => Some(tuning::time_convolutions(
                cfg,
                &host,
                &mut engine,
                &mut needs,
                tuning::Room { capacity, grown_from },
                &speed,
                &mut search,
            )?),
            false => None,
        };
        Ok(Prepared {
            engine,
            host,
            device_note,
            graph,
            needs,
            unbudgeted,
            search,
            conv_tuning,
            speed,
        })
    }

    /// Sizes, budgets, makes and tunes the arena, and builds the run's
    /// session in it, with what the caller should know.
    pub fn build(self) -> Result<(Session, RunInfo)> {
        let cfg = self.cfg;
        let nccl_bytes = match &self.device {
            Device::Cuda(gpu) => gpu.nccl_bytes(),
            Device::Cpu(_) => None,
        };
        let threads = self.device.threads();
        let device_name = self.device.describe();
        let Prepared {
            mut engine,
            host,
            device_note,
            graph,
            needs,
            search,
            conv_tuning,
            speed,
            ..
        } = self.prepare(cfg)?;
        let reason = final_reason(cfg, &search, conv_tuning.as_ref());
        // After timing: the timed algorithms may recompute others.
        engine.set_recomputed(&needs.dropped, needs.transient_chains);
        if cfg.memory.memory_plan {
            engine.arena_mut().adopt_plans(&needs.plans);
        }
        if let Some(on) = cfg.memory.poison_step {
            engine.arena_mut().set_poison_step(on);
        }
        let apis = engine.runtime().convolution_apis();
        let fp32_passes_on_graph = apis
            .iter()
            .filter_map(|(_, api)| match api {
                crate::backend::cuda::ConvApi::Either { graph_passes } => Some((*graph_passes, 3)),
                _ => None,
            })
            .reduce(|a, b| (a.0 + b.0, a.1 + b.1));
        let legacy_convolutions = apis
            .into_iter()
            .filter_map(|(dims, api)| match api {
                crate::backend::cuda::ConvApi::Legacy {
                    graph_refused: Some(why),
                } => Some((dims, why)),
                _ => None,
            })
            .collect();
        let live = Live {
            graph,
            profile: cfg.device.profile,
        };
        let session = assemble(cfg, &host, engine, live)?;
        let run = &cfg.run;
        let info = RunInfo {
            device: session.engine().runtime().kind(),
            device_name,
            precision: cfg.device.precision,
            threads,
            device_note,
            data: host.name().to_string(),
            synthetic: host.synthetic(),
            data_notes: host.notes().iter().cloned().chain(session.task_notes()).collect(),
            augment: run.task.draws().to_string(),
            train_examples: host.sizes().0,
            test_examples: host.sizes().1,
            example_unit: host.unit(),
            steps_per_epoch: session.steps_per_epoch(),
            arena_size_measured: cfg.memory.arena_size.is_none(),
            arena: session.engine().arena().stats(),
            memory: (!needs.plans.is_empty())
                .then(|| MemoryReport::new(&needs.persistent, &needs.plans).named(needs.plan_names.clone())),
            world: session.world(),
            batch: run.batch,
            model: run.model.name(),
            parameters: session.store().param_count(),
            optimizer: run.optimizer.describe(),
            schedule: format!("lr {} {}", run.lr, run.schedule),
            buckets: session.bucket_layout(),
            nccl_bytes,
            workspace_growth: cfg.memory.workspace_growth,
            conv_tuning,
            legacy_convolutions,
            fp32_passes_on_graph,
            recomputed: (!needs.dropped.is_empty()).then(|| {
                let recomputing = super::budget::extra_seconds(&needs.candidates, &needs.dropped, &speed);
                let workspaces = conv_tuning.map_or(0.0, |t| t.seconds_lost);
                RecomputePlan {
                    reason,
                    dropped: needs.dropped.clone(),
                    candidates: needs.candidates.len(),
                    predicted_extra_seconds: recomputing,
                    transient_chains: needs.transient_chains,
                    chain_mode: crate::memory::chain_mode(needs.transient_chains),
                    outputs: report::outputs(&needs),
                    workspace_extra_seconds: workspaces,
                    predicted_step_extra_seconds: recomputing + workspaces,
                    search,
                    lean: conv_tuning.and_then(|t| t.lean),
                }
            }),
        };
        Ok((session, info))
    }
}

/// What the chosen step's drops (if any) were made for, from how they were
/// chosen: a budget given; a given arena's room (a search ran without a
/// budget); else the default's cheap drops, which no search chooses.
fn recompute_reason(cfg: &TrainConfig, search: &Option<SearchReport>) -> RecomputeReason {
    match (cfg.memory.memory_budget, search) {
        (Some(_), _) => RecomputeReason::MemoryBudget,
        (None, Some(_)) => RecomputeReason::ArenaSize,
        (None, None) => RecomputeReason::Cheap,
    }
}

/// What the run's drops were made for, once the convolutions are timed:
/// as [`recompute_reason`], or the default's search for a smaller step
/// where it kept one.
fn final_reason(
    cfg: &TrainConfig,
    search: &Option<SearchReport>,
    tuning: Option<&super::report::ConvTuning>,
) -> RecomputeReason {
    match tuning.and_then(|t| t.lean).and_then(|l| l.fraction) {
        Some(_) => RecomputeReason::Lean,
        None => recompute_reason(cfg, search),
    }
}

/// The step the timed convolutions' workspaces may grow from (see
/// [`tuning::tuning_bound`]): with the default's cheap drops, the step
/// that keeps every output (`plain`); else the step as chosen (`needs`).
fn grown_from(cfg: &TrainConfig, plain: &ArenaNeeds, needs: &ArenaNeeds, search: &Option<SearchReport>) -> usize {
    match recompute_reason(cfg, search) {
        RecomputeReason::Cheap | RecomputeReason::Lean => plain.step_bytes,
        RecomputeReason::MemoryBudget | RecomputeReason::ArenaSize => needs.step_bytes,
    }
}

/// A run with its arena made and its convolutions timed (see
/// [`Pipeline::prepare`]).
struct Prepared {
    engine: crate::Engine,
    host: DataSet,
    device_note: Option<String>,
    graph: bool,
    /// What the run follows: the steps as budgeted and timed.
    needs: ArenaNeeds,
    /// The steps measured without a budget, on the heuristic's algorithms.
    unbudgeted: ArenaNeeds,
    search: Option<crate::memory::SearchReport>,
    conv_tuning: Option<super::report::ConvTuning>,
    speed: Speed,
}

/// The data set `cfg` names, cut to its limits.
fn load_data(cfg: &TrainConfig) -> Result<DataSet> {
    let run = &cfg.run;
    let mut host = DataSet::open_with(&DataSource::of_path(&run.data_dir)?, &run.image_options)?;
    // Limits on other data are refused once the model is known to fit it
    // (`assemble`), so a text file given to a model of images says that.
    if let Some(set) = host.images_mut() {
        if let Some(n) = run.train_limit {
            set.limit_train(n)?;
        }
        if let Some(n) = run.test_limit {
            set.limit_test(n)?;
        }
    }
    Ok(host)
}

/// Sets what `cfg` asks of the device's arithmetic. `fell_back`: why
/// `--device auto` chose the CPU, if it did.
fn configure(cfg: &TrainConfig, device: &mut Device, fell_back: Option<&str>) -> Result<()> {
    let precision = cfg.device.precision;
    device.set_deterministic(cfg.device.deterministic);
    if precision != Precision::Fp32 && matches!(device, Device::Cpu(_)) {
        return Err(gpu_precision_on_cpu(precision, fell_back));
    }
    device.set_precision(precision)?;
    Ok(())
}

fn device_kind(device: &Device) -> DeviceKind {
    match device {
        Device::Cpu(_) => DeviceKind::Cpu,
        Device::Cuda(_) => DeviceKind::Cuda,
    }
}

/// Whether full steps run as replays of a captured CUDA graph on `device`;
/// graphs asked for anywhere but on the GPU are refused.
fn use_graph(cfg: &TrainConfig, device: DeviceKind) -> Result<bool> {
    let on_gpu = device == DeviceKind::Cuda;
    match cfg.device.graph {
        Some(true) if !on_gpu => Err(Error::setting(
            Setting::Graph,
            "whole-step graphs need the GPU (CUDA graphs)",
            None,
        )),
        Some(on) => Ok(on && on_gpu),
        None => Ok(on_gpu),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
impl Pipeline<'_> {
    /// The data and the device, for tests that plan on them directly.
    pub(crate) fn into_parts(self) -> (DataSet, Device) {
        (self.host, self.device)
    }
}
