//! The training loop: sizes the arena, fills its persistent region (model,
//! optimizer, data set), then runs epochs of steps, each reset to the mark.
//!
//! Sizing: unless `--arena-size` is given, the loop builds the whole session
//! on a dry arena (same allocation sequence, no memory, no kernels), runs one
//! training step and one evaluation step on it, and allocates exactly the
//! persistent bytes plus the step high-water it measured.

mod budget;
mod checkpoints;
mod max_batch;
mod report;
mod session;
mod task;

pub use budget::{extra_seconds, least_extra_seconds, Speed};
pub use checkpoints::{CheckpointPolicy, Every, Position};
pub use max_batch::{max_batch, MaxBatch, Probe};
pub use report::{resident_bytes, ConvTuning, EpochReport, Observer, Quiet, RecomputePlan, RunInfo, StepProfile};
pub use session::{Control, Session, StepKind, READBACK};
pub use task::{Classification, Task};

use crate::autograd::Candidate;
use crate::backend::{Device, DeviceKind, DeviceRequest, Group, Precision};
use crate::data::{DataSource, ImageSet};
use crate::distributed::DataParallel;
use crate::memory::{Arena, ArenaError, MemoryReport, Recomputed, RecomputedKind};
use crate::nn::{ModelChoice, OptimizerChoice};
use crate::ops::gather::Augment;
use crate::optim::Schedule;
use crate::{Error, Result, Setting};
use budget::meet_budget;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};

/// Everything `bumpgrad train` can be told.
#[derive(Debug, Clone, serde::Serialize)]
pub struct TrainConfig {
    pub device: DeviceRequest,
    pub epochs: usize,
    pub batch: usize,
    /// The network to train.
    pub model: ModelChoice,
    /// The optimizer and its settings.
    pub optimizer: OptimizerChoice,
    /// The base learning rate.
    pub lr: f32,
    /// How the rate changes over the run (with any warm-up); every step's
    /// rate is computed before the first and read by the update on the device.
    #[serde(serialize_with = "as_text")]
    pub schedule: Schedule,
    /// The loss's label smoothing ε, in [0, 1): the target is
    /// `(1 − ε)·onehot + ε/C` (PyTorch's `label_smoothing`).
    pub label_smoothing: f32,
    pub seed: u64,
    /// The data set: a directory of MNIST or CIFAR-10 files, or a synthetic
    /// source such as `synthetic:cifar10:1000` (see [`DataSource::parse`]).
    pub data_dir: PathBuf,
    /// Random changes to each training image as it is gathered.
    #[serde(serialize_with = "as_text")]
    pub augment: Augment,
    /// `None`: measured from a dry run of one step.
    pub arena_size: Option<usize>,
    /// 0: one per core.
    pub threads: usize,
    pub train_limit: Option<usize>,
    pub test_limit: Option<usize>,
    /// Whole-step CUDA graphs; `None`: on for the GPU, off for the CPU.
    pub graph: Option<bool>,
    /// Time every op of one step on the GPU and report where the time goes.
    pub profile: bool,
    /// Fill the step region with NaNs at every reset; `None`: on in debug
    /// builds only.
    pub poison_step: Option<bool>,
    /// Where and how often to write checkpoints; `None`: never.
    pub checkpoints: Option<CheckpointPolicy>,
    /// Continue from the newest valid checkpoint in this directory.
    pub resume: Option<PathBuf>,
    /// Place step buffers by a liveness plan (reusing the bytes of dead
    /// ones) rather than bump-allocating every one until the reset.
    pub memory_plan: bool,
    /// Convolutions by deterministic algorithms only, so that a GPU run
    /// repeats bit for bit (slower; the CPU is deterministic anyway).
    pub deterministic: bool,
    /// The arithmetic of convolutions and matrix products: fp32 FMA math,
    /// TF32 tensor-core math, or bf16 mixed precision (both GPU only). Not
    /// part of the model: a checkpoint resumes under any of them.
    pub precision: Precision,
    /// How a GPU chooses its convolution algorithms (see [`ConvAlgos`]);
    /// deterministic convolutions are always the heuristic's.
    pub conv_algos: ConvAlgos,
    /// How much the timed convolution algorithms' workspaces may grow the
    /// step over the heuristic's, as a fraction of it ([`TUNING_GROWTH`]
    /// by default).
    pub workspace_growth: f64,
    /// Bytes of step memory a training step may use: above it, convolution
    /// and block outputs are recomputed in backward rather than kept (see
    /// `budget.rs`). `None`: no budget.
    pub memory_budget: Option<usize>,
    /// This process is one rank of a data-parallel run; `batch` is then
    /// the examples per step on each rank.
    pub data_parallel: Option<DataParallel>,
}

/// A setting written as the text it is parsed from.
fn as_text<T: std::fmt::Display, S: serde::Serializer>(value: &T, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&value.to_string())
}

/// How a rank's device joins its data-parallel group before its arena is
/// made: the group, and which GPU of the host the rank uses.
pub struct Join {
    pub group: Group,
    pub ordinal: usize,
}

impl Default for TrainConfig {
    fn default() -> Self {
        Self {
            device: DeviceRequest::Auto,
            epochs: 4,
            batch: 100,
            model: ModelChoice::default(),
            optimizer: OptimizerChoice::default(),
            lr: 0.05,
            schedule: Schedule::default(),
            label_smoothing: 0.0,
            seed: 42,
            data_dir: PathBuf::from("data/mnist"),
            augment: Augment::NONE,
            arena_size: None,
            threads: 0,
            train_limit: None,
            test_limit: None,
            graph: None,
            profile: false,
            poison_step: None,
            checkpoints: None,
            resume: None,
            memory_plan: true,
            deterministic: false,
            precision: Precision::Fp32,
            conv_algos: ConvAlgos::Timed,
            workspace_growth: TUNING_GROWTH,
            memory_budget: None,
            data_parallel: None,
        }
    }
}

impl TrainConfig {
    /// Rejects settings that cannot train, naming the setting and a value
    /// that works.
    pub fn validate(&self) -> Result<()> {
        let at_least_one = |setting, what: &str| {
            Err(Error::setting(
                setting,
                format!("{what} must be at least 1"),
                Some("1".into()),
            ))
        };
        if self.epochs == 0 {
            return at_least_one(Setting::Epochs, "the number of epochs");
        }
        if self.batch == 0 {
            return at_least_one(Setting::Batch, "the batch");
        }
        if !(self.lr.is_finite() && self.lr > 0.0) {
            return Err(Error::setting(
                Setting::LearningRate,
                format!("the learning rate must be a positive number, got {}", self.lr),
                Some("a positive number such as 0.05".into()),
            ));
        }
        self.optimizer.validate()?;
        if !(0.0..1.0).contains(&self.label_smoothing) {
            return Err(Error::setting(
                Setting::LabelSmoothing,
                format!("the label smoothing must be in [0, 1), got {}", self.label_smoothing),
                Some("a value in [0, 1) such as 0.1".into()),
            ));
        }
        if self.test_limit == Some(0) {
            return at_least_one(Setting::TestLimit, "the test-set limit");
        }
        if self.train_limit == Some(0) {
            return at_least_one(Setting::TrainLimit, "the training-set limit");
        }
        if self.device == DeviceRequest::Cpu && self.precision != Precision::Fp32 {
            return Err(gpu_precision_on_cpu(self.precision, None));
        }
        if !(self.workspace_growth >= 0.0 && self.workspace_growth.is_finite()) {
            return Err(Error::setting(
                Setting::WorkspaceGrowth,
                format!(
                    "the workspace growth is a fraction of the step, 0 or more, got {}",
                    self.workspace_growth
                ),
                Some(TUNING_GROWTH.to_string()),
            ));
        }
        if self.checkpoints.as_ref().is_some_and(|p| p.keep == 0) {
            return at_least_one(Setting::KeepCheckpoints, "the number of checkpoints kept");
        }
        if let Some(dp) = &self.data_parallel {
            if dp.world.size == 0 || dp.world.rank >= dp.world.size {
                return Err(Error::setting(
                    Setting::Ranks,
                    format!("rank {} of {} ranks does not exist", dp.world.rank, dp.world.size),
                    None,
                ));
            }
            if dp.bucket_bytes < 4 {
                return Err(Error::setting(
                    Setting::BucketSize,
                    "a gradient bucket must hold at least one value",
                    None,
                ));
            }
        }
        Ok(())
    }
}

/// TF32 or bf16 asked of the CPU: `fell_back` is why `auto` chose the CPU,
/// if it did.
fn gpu_precision_on_cpu(precision: Precision, fell_back: Option<&str>) -> Error {
    let chosen = fell_back.map_or_else(String::new, |why| {
        format!(" (the device was chosen automatically: {why})")
    });
    let what = match precision {
        Precision::Bf16 => "bf16 mixed precision runs on a GPU's tensor cores (the CPU backend has no bf16 kernels)",
        _ => "TF32 runs on a GPU's tensor cores",
    };
    Error::setting(
        Setting::Precision,
        format!("the CPU computes in fp32 only; {what}{chosen}"),
        Some(Precision::Fp32.to_string()),
    )
}

/// Sets what `cfg` asks of the device's arithmetic, before anything is
/// planned on it (cuDNN's algorithms, and so their workspaces, depend on
/// both). `fell_back`: why `--device auto` chose the CPU, if it did.
fn configure(cfg: &TrainConfig, device: &Device, fell_back: Option<&str>) -> Result<()> {
    device.set_deterministic(cfg.deterministic);
    if cfg.precision != Precision::Fp32 && matches!(device, Device::Cpu(_)) {
        return Err(gpu_precision_on_cpu(cfg.precision, fell_back));
    }
    device.set_precision(cfg.precision)?;
    Ok(())
}

/// How a GPU chooses each convolution's algorithms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ConvAlgos {
    /// Every algorithm timed on the device before the first step, the
    /// fastest kept (as PyTorch's `cudnn.benchmark`): a larger workspace
    /// is taken where the step stays within `--workspace-growth` of the
    /// heuristic's. Two runs may time differently and so round
    /// differently.
    #[default]
    Timed,
    /// cuDNN's heuristic choice for the shape, with at most 8 MiB of
    /// workspace: the same algorithms every run.
    Heuristic,
}

/// How much a timed choice may grow the step over the heuristic's by
/// default (`--workspace-growth`): 20%.
/// Measured on the H200 (fp32), the fastest choices grew ResNet-18's step
/// by 13% at batch 128 and 7% at batch 512, ResNet-50's by 1% at batch
/// 128, for steps 2.4×, 2.5× and 1.5× faster than the heuristic's; held
/// to 5%, ResNet-18 kept only half of that speed.
pub const TUNING_GROWTH: f64 = 0.2;

/// Bytes a timed choice may add to a step of `step_bytes` (see
/// [`TrainConfig::workspace_growth`]): a measured arena is made that much
/// larger.
pub fn tuning_headroom(cfg: &TrainConfig, step_bytes: usize) -> usize {
    (step_bytes as f64 * cfg.workspace_growth) as usize
}

/// The persistent bytes and step bytes a session needs on `device`,
/// measured by running one step of every kind it will run (full and last
/// training and evaluation batches) on a dry arena; with the memory plan
/// on, also the plans of those steps, for the real arena to follow.
pub fn measure(cfg: &TrainConfig, host: &ImageSet, device: &Device) -> Result<ArenaNeeds> {
    measure_on(cfg, host, Arena::dry(device, None))
}

/// [`measure`] on a given dry arena.
fn measure_on(cfg: &TrainConfig, host: &ImageSet, dry: Arena) -> Result<ArenaNeeds> {
    measure_dropping(cfg, host, dry, &[])
}

/// [`measure_on`] with `dropped` candidates recomputed in backward, chains
/// of them held (see [`Arena::set_recomputed`]).
fn measure_dropping(cfg: &TrainConfig, host: &ImageSet, dry: Arena, dropped: &[u32]) -> Result<ArenaNeeds> {
    measure_chains(cfg, host, dry, dropped, false)
}

/// [`measure_dropping`], with chains of drops remade for each reader where
/// `transient_chains`.
fn measure_chains(
    cfg: &TrainConfig,
    host: &ImageSet,
    mut dry: Arena,
    dropped: &[u32],
    transient_chains: bool,
) -> Result<ArenaNeeds> {
    dry.set_recomputed(dropped, transient_chains);
    let mut session = Session::new(cfg, host, dry)?;
    let candidates = session.probe()?;
    let arena = session.arena();
    let plans = arena.plans().to_vec();
    let step_bytes = match plans.iter().map(|p| p.peak).max() {
        Some(peak) if cfg.memory_plan => peak,
        _ => arena.stats().step_high_water_bytes,
    };
    Ok(ArenaNeeds {
        persistent_bytes: arena.stats().persistent_bytes,
        step_bytes,
        persistent: arena.persistent_log().to_vec(),
        plans,
        candidates,
        dropped: dropped.to_vec(),
        transient_chains,
    })
}

/// The needs of `cfg`'s step recomputing convolution and block outputs to fit the
/// given arena's room above the persistent region (`needs` measured
/// without), if any recomputation does; with the memory plan only.
fn arena_as_budget(cfg: &TrainConfig, host: &ImageSet, device: &Device, needs: &ArenaNeeds) -> Option<ArenaNeeds> {
    let room = cfg.arena_size?.checked_sub(needs.persistent_bytes)?;
    if !cfg.memory_plan || !needs.dropped.is_empty() {
        return None;
    }
    let budgeted = TrainConfig {
        memory_budget: Some(room),
        ..cfg.clone()
    };
    meet_budget(&budgeted, host, device, needs.clone())
        .ok()
        .filter(|fit| fit.total() <= cfg.arena_size.unwrap_or(0))
}

#[derive(Debug, Clone, PartialEq)]
pub struct ArenaNeeds {
    pub persistent_bytes: usize,
    pub step_bytes: usize,
    /// Candidates for recomputation (convolution and block outputs) in a
    /// full training step, and
    /// those a memory budget has the step recompute rather than keep.
    pub candidates: Vec<Candidate>,
    pub dropped: Vec<u32>,
    /// Whether chains of dropped candidates are remade for each reader
    /// rather than held (see [`crate::Step`]'s `saved`).
    pub transient_chains: bool,
    /// The persistent allocations, for the memory report.
    pub persistent: Vec<crate::memory::PersistentBuf>,
    /// The step plans, by kind (see [`session::StepKind`]).
    pub plans: Vec<crate::memory::StepPlan>,
}

impl ArenaNeeds {
    pub fn total(&self) -> usize {
        self.persistent_bytes + self.step_bytes
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

/// The data set `cfg` names, cut to its limits.
fn load_data(cfg: &TrainConfig) -> Result<ImageSet> {
    let mut host = ImageSet::open(&DataSource::of_path(&cfg.data_dir)?)?;
    if let Some(n) = cfg.train_limit {
        host.limit_train(n)?;
    }
    if let Some(n) = cfg.test_limit {
        host.limit_test(n)?;
    }
    Ok(host)
}

/// The arena's capacity: what `needs` measured, or `--arena-size` when it
/// holds that; a given size too small is refused with the buffers that do
/// not fit and the size that would.
fn capacity(cfg: &TrainConfig, host: &ImageSet, device: &Device, needs: &ArenaNeeds) -> Result<usize> {
    match cfg.arena_size {
        None => Ok(needs.total()),
        Some(given) if given >= needs.total() => Ok(given),
        Some(given) if given >= needs.persistent_bytes && cfg.memory_plan => {
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
            // Replay on a dry arena of the given size to name the allocation
            // that fails, then report the size that fits the whole step.
            let replay = Session::new(cfg, host, Arena::dry(device, Some(given))).and_then(|mut s| s.probe().map(drop));
            let err = match replay {
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

/// The data and the device, set up as `cfg` asks, for dry runs that plan
/// a run without making its arena; what training with these settings would
/// refuse, this refuses too.
fn device_kind(device: &Device) -> DeviceKind {
    match device {
        Device::Cpu(_) => DeviceKind::Cpu,
        Device::Cuda(_) => DeviceKind::Cuda,
    }
}

fn open_for_planning(cfg: &TrainConfig) -> Result<(ImageSet, Device)> {
    cfg.validate()?;
    let host = load_data(cfg)?;
    let (device, fell_back) = Device::open(cfg.device, cfg.threads, crate::ops::KERNELS)?;
    configure(cfg, &device, fell_back.as_deref())?;
    session::use_graph(cfg, device_kind(&device))?;
    Ok((host, device))
}

/// The memory plan of a run without running it (and without allocating the
/// arena): what `bumpgrad memory` prints. On the device `cfg` asks for, so
/// cuDNN's workspaces are the GPU's when one is used.
pub fn memory_report(cfg: &TrainConfig) -> Result<(MemoryReport, String)> {
    let (host, device) = open_for_planning(cfg)?;
    let planned = TrainConfig {
        memory_plan: true,
        ..cfg.clone()
    };
    let unbudgeted = measure(&planned, &host, &device)?;
    let needs = meet_budget(&planned, &host, &device, unbudgeted.clone())?;
    capacity(&planned, &host, &device, &needs)?;
    let mut report = MemoryReport::new(&needs.persistent, &needs.plans);
    if let Some(budget) = cfg.memory_budget {
        report.recomputed = Some(recomputed(&needs, &unbudgeted, budget, &budget::speed(cfg, &device)));
    }
    report.tuning_bytes = tuning_bytes(cfg, device_kind(&device), needs.step_bytes);
    Ok((report, device.describe()))
}

/// What `needs` recomputes under `budget`, against the step without
/// (`unbudgeted`), for the report.
fn recomputed(needs: &ArenaNeeds, unbudgeted: &ArenaNeeds, budget: usize, speed: &Speed) -> Recomputed {
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
    // A training step runs each convolution three times (forward, input
    // and weight gradients); recomputing one runs its forward again.
    let step_macs: u64 = 3 * needs.candidates.iter().map(|c| c.multiply_adds).sum::<u64>();
    Recomputed {
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
        unbudgeted_step_bytes: unbudgeted.step_bytes,
        transient_chains: needs.transient_chains,
    }
}

/// The bytes `train` adds to a measured arena of a step of `step_bytes`
/// on `device` so that timed convolution algorithms may take larger
/// workspaces (see [`prepare_in`]); `None` where it times nothing or the
/// arena size is given.
pub fn tuning_bytes(cfg: &TrainConfig, device: DeviceKind, step_bytes: usize) -> Option<usize> {
    // Under a budget the timed step may not pass it: no more room than that.
    let room = cfg.memory_budget.map_or(usize::MAX, |b| b.saturating_sub(step_bytes));
    (times_convolutions(cfg, device) && cfg.arena_size.is_none()).then(|| tuning_headroom(cfg, step_bytes).min(room))
}

/// Whether a run of `cfg` on `device` times its convolution algorithms.
fn times_convolutions(cfg: &TrainConfig, device: DeviceKind) -> bool {
    device == DeviceKind::Cuda && !cfg.deterministic && cfg.conv_algos == ConvAlgos::Timed
}

/// Loads the data, opens the device, sizes and allocates the arena, and
/// returns a session ready to train, with what the caller should know.
pub fn prepare(cfg: &TrainConfig) -> Result<(Session, RunInfo)> {
    prepare_in(cfg, None)
}

/// Times the convolution algorithms on `arena` (see [`prepare_in`]) and
/// keeps the fastest whose step fits: at most `cfg.workspace_growth` over the
/// heuristic's `needs`, the budget, and `capacity`. On success `needs`
/// becomes the timed choices' (their plans are the ones to follow).
///
/// What the step recomputes stays what `needs` chose on the heuristic's
/// algorithms, which is what `bumpgrad memory` reports for the same
/// settings: the timed algorithms' workspaces are held down until that
/// choice's step fits, never traded for more recomputation. (Searching
/// again with the timed workspaces let a run drop far more than `memory`
/// said, at several times its predicted cost.)
fn time_convolutions(
    cfg: &TrainConfig,
    host: &ImageSet,
    arena: &mut Arena,
    needs: &mut ArenaNeeds,
    capacity: usize,
) -> Result<ConvTuning> {
    let changed = arena.tune_convolutions()?;
    if changed == 0 {
        return Ok(ConvTuning {
            changed,
            workspace_limit: None,
            kept: true,
            seconds_lost: 0.0,
        });
    }
    let bound = (needs.step_bytes + tuning_headroom(cfg, needs.step_bytes))
        .min(capacity - needs.persistent_bytes)
        .min(cfg.memory_budget.unwrap_or(usize::MAX).max(needs.step_bytes));
    let (dropped, transient_chains) = (needs.dropped.clone(), needs.transient_chains);
    let largest = arena.select_convolutions(usize::MAX);
    let mut fitted = None;
    let settled = settle_workspaces(
        largest,
        crate::backend::cuda::WORKSPACE_LIMIT,
        |limit| Ok(arena.select_convolutions(limit)),
        || {
            let timed = measure_chains(cfg, host, arena.dry_twin(), &dropped, transient_chains)?;
            let fits = timed.step_bytes <= bound && timed.total() <= capacity;
            if fits {
                fitted = Some(timed);
            }
            Ok(fits)
        },
    )?;
    match (settled, fitted) {
        (Some(limit), Some(timed)) => {
            *needs = timed;
            Ok(ConvTuning {
                changed,
                workspace_limit: limit,
                kept: true,
                seconds_lost: needs.slower_seconds(),
            })
        }
        _ => {
            arena.untune_convolutions();
            Ok(ConvTuning {
                changed,
                workspace_limit: None,
                kept: false,
                seconds_lost: 0.0,
            })
        }
    }
}

/// The search behind [`time_convolutions`]: with the timed choices (the
/// largest workspace among them `largest`), asks `fits` whether their step
/// fits; while not, halves the largest workspace allowed (`select` chooses
/// again under a limit and returns the new largest) until it fits or is no
/// more than `floor` (the heuristic's limit, whose step was measured).
/// `Some(None)`: the fastest fit; `Some(Some(limit))`: they fit held to
/// `limit`; `None`: nothing timed fits.
fn settle_workspaces(
    mut largest: usize,
    floor: usize,
    mut select: impl FnMut(usize) -> Result<usize>,
    mut fits: impl FnMut() -> Result<bool>,
) -> Result<Option<Option<usize>>> {
    let mut limit = None;
    loop {
        if fits()? {
            return Ok(Some(limit));
        }
        if largest <= floor {
            return Ok(None);
        }
        limit = Some(largest / 2);
        largest = select(largest / 2)?;
    }
}

/// [`prepare`] for one rank of a data-parallel run: its device joins the
/// group first.
pub fn prepare_in(cfg: &TrainConfig, join: Option<Join>) -> Result<(Session, RunInfo)> {
    cfg.validate()?;
    let host = load_data(cfg)?;
    let ordinal = join.as_ref().map_or(0, |j| j.ordinal);
    let (mut device, device_note) = Device::open_on(cfg.device, cfg.threads, ordinal, crate::ops::KERNELS)?;
    configure(cfg, &device, device_note.as_deref())?;
    if let Some(join) = join {
        device.join(join.group)?;
    }
    let nccl_bytes = match &device {
        Device::Cuda(gpu) => gpu.nccl_bytes(),
        Device::Cpu(_) => None,
    };
    let threads = device.threads();
    let device_name = device.describe();
    let speed = budget::speed(cfg, &device);
    let mut needs = meet_budget(cfg, &host, &device, measure(cfg, &host, &device)?)?;
    let mut capacity = match capacity(cfg, &host, &device, &needs) {
        Ok(capacity) => capacity,
        // A given arena too small for the step is a budget too: recompute
        // convolution and block outputs if that fits it, else refuse it as
        // before.
        Err(too_small) => match arena_as_budget(cfg, &host, &device, &needs) {
            Some(fit) => {
                needs = fit;
                capacity(cfg, &host, &device, &needs)?
            }
            None => return Err(too_small),
        },
    };
    // A GPU times its convolution algorithms in the new arena's free bytes
    // before the first step (nothing is in it yet: the whole arena is free
    // to time with), as PyTorch's cudnn.benchmark does. The fastest may
    // want more workspace than the heuristic's choice. The liveness plan
    // puts a backward convolution's workspace in bytes the step has freed,
    // so the step grows far less than the workspaces (ResNet-18 at batch
    // 128 on the H200: 13% for 9.9 rather than 23.5 ms a step); where it
    // would grow more than TUNING_GROWTH, or past a given arena, the
    // largest workspace allowed is halved until it does not.
    let tuning = times_convolutions(cfg, device_kind(&device));
    capacity += tuning_bytes(cfg, device_kind(&device), needs.step_bytes).unwrap_or(0);
    let mut arena = Arena::new(device, capacity)?;
    let conv_tuning = if tuning {
        Some(time_convolutions(cfg, &host, &mut arena, &mut needs, capacity)?)
    } else {
        None
    };
    // After timing: the timed algorithms may recompute others.
    arena.set_recomputed(&needs.dropped, needs.transient_chains);
    if cfg.memory_plan {
        arena.adopt_plans(&needs.plans);
    }
    if let Some(on) = cfg.poison_step {
        arena.set_poison_step(on);
    }
    let legacy_bf16_convolutions = arena
        .convolution_apis()
        .into_iter()
        .filter_map(|(dims, api)| match api {
            crate::backend::cuda::ConvApi::Legacy {
                graph_refused: Some(why),
            } => Some((dims, why)),
            _ => None,
        })
        .collect();
    let session = Session::new(cfg, &host, arena)?;
    let info = RunInfo {
        device: session.arena().device(),
        device_name,
        precision: cfg.precision,
        threads,
        device_note,
        data: host.name,
        synthetic: host.synthetic,
        augment: cfg.augment.to_string(),
        train_examples: host.train_images.count,
        test_examples: host.test_images.count,
        steps_per_epoch: session.steps_per_epoch(),
        arena_size_measured: cfg.arena_size.is_none(),
        arena: session.arena().stats(),
        memory: (!needs.plans.is_empty()).then(|| MemoryReport::new(&needs.persistent, &needs.plans)),
        world: session.world(),
        batch: cfg.batch,
        model: cfg.model.name(),
        parameters: session.store().param_count(),
        optimizer: cfg.optimizer.describe(),
        schedule: format!("lr {} {}", cfg.lr, cfg.schedule),
        buckets: session.bucket_layout(),
        nccl_bytes,
        workspace_growth: cfg.workspace_growth,
        conv_tuning,
        legacy_bf16_convolutions,
        recomputed: (!needs.dropped.is_empty()).then(|| RecomputePlan {
            dropped: needs.dropped.clone(),
            candidates: needs.candidates.len(),
            predicted_extra_seconds: extra_seconds(&needs.candidates, &needs.dropped, &speed),
            transient_chains: needs.transient_chains,
        }),
    };
    Ok((session, info))
}

/// Trains for `cfg.epochs`, reporting to `observer`.
pub fn train(cfg: &TrainConfig, observer: &mut (dyn Observer + Send)) -> Result<Vec<EpochReport>> {
    train_until(cfg, observer, &AtomicBool::new(false))
}

/// [`train`], stopping after the current step once `stop` is set (by a
/// signal handler): a checkpoint is written and [`Error::Interrupted`]
/// returned. With `cfg.resume`, continues from the newest valid checkpoint
/// there (damaged newer ones are reported through the observer and skipped).
pub fn train_until(
    cfg: &TrainConfig,
    observer: &mut (dyn Observer + Send),
    stop: &AtomicBool,
) -> Result<Vec<EpochReport>> {
    train_rank(cfg, None, observer, stop, None)
}

/// [`train_until`] as one rank of a data-parallel run (`join`), counting
/// steps in `progress` for a watchdog.
pub fn train_rank(
    cfg: &TrainConfig,
    join: Option<Join>,
    observer: &mut (dyn Observer + Send),
    stop: &AtomicBool,
    progress: Option<&AtomicU64>,
) -> Result<Vec<EpochReport>> {
    let mut reports = Vec::new();
    run(cfg, join, observer, stop, progress, &mut |r| reports.push(r))?;
    Ok(reports)
}

/// [`train_until`] keeping no report: each reaches the observer only, so the
/// process's memory stays flat however many epochs run (the CLI uses this).
pub fn train_streaming(cfg: &TrainConfig, observer: &mut (dyn Observer + Send), stop: &AtomicBool) -> Result<()> {
    run(cfg, None, observer, stop, None, &mut |_| {})
}

/// [`train_streaming`] as one rank of a data-parallel run.
pub fn train_streaming_rank(
    cfg: &TrainConfig,
    join: Join,
    observer: &mut (dyn Observer + Send),
    stop: &AtomicBool,
    progress: &AtomicU64,
) -> Result<()> {
    run(cfg, Some(join), observer, stop, Some(progress), &mut |_| {})
}

fn run(
    cfg: &TrainConfig,
    join: Option<Join>,
    observer: &mut (dyn Observer + Send),
    stop: &AtomicBool,
    progress: Option<&AtomicU64>,
    keep: &mut (dyn FnMut(EpochReport) + Send),
) -> Result<()> {
    cfg.validate()?;
    // Before anything is loaded: the checkpoint to resume from, then whether
    // checkpoints can be written at all (in that order, so that a --resume
    // directory that does not exist is reported, not made).
    let latest = match &cfg.resume {
        Some(dir) => Some(crate::checkpoint::latest_valid(dir)?),
        None => None,
    };
    let writes_checkpoints = cfg.data_parallel.is_none_or(|dp| dp.world.rank == 0);
    if let Some(policy) = cfg.checkpoints.as_ref().filter(|_| writes_checkpoints) {
        crate::checkpoint::ensure_writable(&policy.dir)?;
    }
    let (mut session, info) = prepare_in(cfg, join)?;
    let mut start = Position::default();
    if let (Some(dir), Some(latest)) = (&cfg.resume, latest) {
        match latest {
            Some(latest) => {
                for (path, why) in &latest.skipped {
                    observer.note(&format!("skipped {}: {why}", path.display()));
                }
                start = session.resume(&latest.checkpoint)?;
                observer.note(&format!(
                    "resuming from {}: {} epochs and {} steps of the next done ({} steps in all)",
                    latest.path.display(),
                    start.epochs_done,
                    start.step_in_epoch,
                    session.steps_done()
                ));
            }
            None => observer.note(&format!(
                "no checkpoint in {} yet; starting from scratch",
                dir.display()
            )),
        }
    }
    // Every rank starts from rank 0's state, fresh or resumed.
    session.sync_replicas()?;
    let config_json = serde_json::to_string(cfg).unwrap_or_else(|_| "{}".into());
    let control = Control {
        stop,
        checkpoints: cfg.checkpoints.as_ref(),
        config_json: &config_json,
        progress,
    };
    observer.started(&info);
    if start.epochs_done >= cfg.epochs {
        observer.note(&format!(
            "the checkpoint has {} epochs done already, all this run asks for; ask for {} or more to train further",
            start.epochs_done,
            start.epochs_done + 1
        ));
    }
    session.on_workers(|session| {
        for epoch in start.epochs_done + 1..=cfg.epochs {
            let from = if epoch == start.epochs_done + 1 {
                start
            } else {
                Position::epoch_start(epoch - 1)
            };
            keep(session.epoch_from(epoch, from, observer, &control)?);
        }
        Ok(())
    })
}

#[cfg(test)]
mod tuning_tests {
    use super::settle_workspaces;
    use std::cell::Cell;

    /// A fake device whose step fits once the largest workspace chosen is at
    /// most `fits_at`; choosing under a limit gives the limit itself.
    fn search(largest: usize, floor: usize, fits_at: usize) -> (Option<Option<usize>>, usize) {
        let now = Cell::new(largest);
        let measured = Cell::new(0);
        let out = settle_workspaces(
            largest,
            floor,
            |limit| {
                now.set(limit);
                Ok(limit)
            },
            || {
                measured.set(measured.get() + 1);
                Ok(now.get() <= fits_at)
            },
        )
        .expect("search");
        (out, measured.get())
    }

    #[test]
    fn a_measured_gpu_arena_grows_by_a_fifth_of_the_step_where_it_times() {
        use super::{tuning_bytes, ConvAlgos, TrainConfig};
        use crate::backend::DeviceKind;
        let cfg = TrainConfig::default();
        let mib = 1 << 20;
        assert_eq!(tuning_bytes(&cfg, DeviceKind::Cuda, 100 * mib), Some(20 * mib));
        assert_eq!(tuning_bytes(&cfg, DeviceKind::Cpu, 100 * mib), None);
        let doubling = TrainConfig {
            workspace_growth: 1.0,
            ..TrainConfig::default()
        };
        assert_eq!(tuning_bytes(&doubling, DeviceKind::Cuda, 100 * mib), Some(100 * mib));
        for bad in [-0.1, f64::NAN, f64::INFINITY] {
            let err = TrainConfig {
                workspace_growth: bad,
                ..TrainConfig::default()
            }
            .validate()
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("the workspace growth is a fraction of the step, 0 or more"),
                "{err}"
            );
        }
        let nothing_timed = [
            TrainConfig {
                deterministic: true,
                ..cfg.clone()
            },
            TrainConfig {
                conv_algos: ConvAlgos::Heuristic,
                ..cfg.clone()
            },
            TrainConfig {
                arena_size: Some(1 << 30),
                ..cfg.clone()
            },
        ];
        for c in &nothing_timed {
            assert_eq!(tuning_bytes(c, DeviceKind::Cuda, 100 * mib), None);
        }
        // Under a budget, no more than the budget leaves above the step.
        let budgeted = TrainConfig {
            memory_budget: Some(105 * mib),
            ..cfg.clone()
        };
        assert_eq!(tuning_bytes(&budgeted, DeviceKind::Cuda, 100 * mib), Some(5 * mib));
    }

    #[test]
    fn the_fastest_choices_are_kept_when_their_step_fits() {
        assert_eq!(search(800, 8, 1000), (Some(None), 1));
    }

    #[test]
    fn the_largest_workspace_is_halved_until_the_step_fits() {
        // 800 → 400 → 200 → 100: three halvings, four measurements.
        assert_eq!(search(800, 8, 150), (Some(Some(100)), 4));
    }

    #[test]
    fn nothing_timed_is_kept_when_even_the_floor_does_not_fit() {
        // 800 → 400 → … → 12 → 6 (below the floor of 8): measured at each.
        let (out, measured) = search(800, 8, 1);
        assert_eq!(out, None);
        assert_eq!(measured, 8);
    }
}
