//! A run's settings, in three parts: what the run trains ([`RunConfig`]),
//! what its memory may be ([`MemoryConfig`]) and which device computes how
//! ([`DeviceConfig`]), composed into the [`TrainConfig`] the CLI fills.
//! The pipeline reads them; the session it builds sees none of them.
//!
//! All four are `#[non_exhaustive]`, so a setting can be added without
//! breaking a caller: outside the crate a configuration is made by
//! [`TrainConfig::builder`] (or from [`TrainConfig::default`]) and its
//! fields read or changed in place, never written as a struct literal.

use crate::backend::{DeviceRequest, Precision};
use crate::data::ImageOptions;
use crate::distributed::DataParallel;
use crate::nn::{ModelChoice, OptimizerChoice};
use crate::optim::Schedule;
use crate::tasks::TaskChoice;
use crate::{Error, Result, Setting};
use std::path::PathBuf;

use super::CheckpointPolicy;

/// Everything `bumpgrad train` can be told. Written out (in checkpoints)
/// as one flat object, as before the parts were split.
///
/// Made with [`TrainConfig::builder`], which starts from the defaults
/// (the MNIST CNN on `data/mnist`, 4 epochs of batch 100, SGD at 0.05, on
/// the GPU when one is usable):
///
/// ```
/// use bumpgrad::optim::SgdConfig;
/// use bumpgrad::train::TrainConfig;
/// use bumpgrad::DeviceRequest;
///
/// let cfg = TrainConfig::builder()
///     .epochs(2)
///     .batch(64)
///     .optimizer(SgdConfig::default().momentum(0.9).choice())
///     .lr(0.01)
///     .train_limit(1000)
///     .device(DeviceRequest::Cpu)
///     .build();
/// assert_eq!((cfg.run.epochs, cfg.run.batch, cfg.run.train_limit), (2, 64, Some(1000)));
/// assert_eq!(cfg.run.optimizer.name(), "sgd");
/// cfg.validate()?; // as `train` does before anything is loaded
/// # Ok::<(), bumpgrad::Error>(())
/// ```
#[derive(Debug, Clone, Default, serde::Serialize)]
#[non_exhaustive]
pub struct TrainConfig {
    /// What the run trains, on what, and for how long.
    #[serde(flatten)]
    pub run: RunConfig,
    /// How the arena is sized and used.
    #[serde(flatten)]
    pub memory: MemoryConfig,
    /// The device and how it computes.
    #[serde(flatten)]
    pub device: DeviceConfig,
}

/// What the run trains, on what, and for how long.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct RunConfig {
    /// Passes over the training set.
    pub epochs: usize,
    /// Examples per step (on each rank of a data-parallel run).
    pub batch: usize,
    /// Other batch sizes the session may step at ([`super::Session::set_batch`]),
    /// each with its own plans (and graph) in the one arena, which is sized
    /// for the largest. Empty for a run of one batch size, as the CLI's.
    /// The learning-rate table and a checkpoint's fingerprint are laid out
    /// for `batch`'s steps.
    pub other_batches: Vec<usize>,
    /// The network to train.
    pub model: ModelChoice,
    /// The optimizer and its settings.
    pub optimizer: OptimizerChoice,
    /// What a batch means: the loss and the metric (with their settings,
    /// such as label smoothing and augmentation).
    pub task: TaskChoice,
    /// The base learning rate.
    pub lr: f32,
    /// How the rate changes over the run (with any warm-up); every step's
    /// rate is computed before the first and read by the update on the device.
    #[serde(serialize_with = "as_text")]
    pub schedule: Schedule,
    /// Seeds initialisation, the epochs' order, dropout and augmentation:
    /// a run repeats bit for bit on the CPU.
    pub seed: u64,
    /// The data set: a directory of MNIST or CIFAR-10 files, or a synthetic
    /// source such as `synthetic:cifar10:1000` (see [`crate::data::DataSource::parse`]).
    pub data_dir: PathBuf,
    /// How an image folder is read: its image size and validation split
    /// (the defaults for any other data).
    pub image_options: ImageOptions,
    /// Train on the first this many training examples only; `None`: all.
    pub train_limit: Option<usize>,
    /// Evaluate on the first this many test examples only; `None`: all.
    pub test_limit: Option<usize>,
    /// Where and how often to write checkpoints; `None`: never.
    pub checkpoints: Option<CheckpointPolicy>,
    /// Continue from the newest valid checkpoint in this directory.
    pub resume: Option<PathBuf>,
    /// This process is one rank of a data-parallel run; `batch` is then
    /// the examples per step on each rank.
    pub data_parallel: Option<DataParallel>,
    /// The words that set this run up, as its caller wrote them (the CLI's
    /// flags), kept in every checkpoint so that a resumed run can start
    /// from them. The library only stores them.
    pub command_line: Vec<String>,
    /// Word vectors (GloVe's text format, or word2vec's) to start the
    /// model's word embedding from: each word of the task's vocabulary the
    /// file has takes its vector; the others keep their random draw.
    pub embeddings: Option<PathBuf>,
}

/// How the arena is sized and used.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct MemoryConfig {
    /// `None`: measured from a dry run of every step.
    pub arena_size: Option<usize>,
    /// Place step buffers by a liveness plan (reusing the bytes of dead
    /// ones) rather than bump-allocating every one until the reset.
    pub memory_plan: bool,
    /// Bytes of step memory a training step may use: above it, convolution
    /// and block outputs are recomputed in backward rather than kept (see
    /// `budget.rs`). `None`: no budget.
    pub memory_budget: Option<usize>,
    /// What a step recomputes with no budget given ([`Recompute`]).
    pub recompute: Recompute,
    /// How much the timed convolution algorithms' workspaces may grow the
    /// step over the heuristic's, as a fraction of it ([`TUNING_GROWTH`]
    /// by default).
    pub workspace_growth: f64,
    /// Fill the step region with NaNs at every reset; `None`: on in debug
    /// builds only.
    pub poison_step: Option<bool>,
}

/// The device and how it computes.
#[derive(Debug, Clone, serde::Serialize)]
#[non_exhaustive]
pub struct DeviceConfig {
    /// Which device (`--device`): the GPU, the CPU, or the GPU when one is
    /// usable.
    #[serde(rename = "device")]
    pub request: DeviceRequest,
    /// CPU worker threads; 0: one per core.
    pub threads: usize,
    /// The arithmetic of convolutions and matrix products: fp32 FMA math,
    /// TF32 tensor-core math, or bf16 mixed precision (both GPU only). Not
    /// part of the model: a checkpoint resumes under any of them.
    pub precision: Precision,
    /// Convolutions by deterministic algorithms only, so that a GPU run
    /// repeats bit for bit (slower; the CPU is deterministic anyway).
    pub deterministic: bool,
    /// How a GPU chooses its convolution algorithms (see [`ConvAlgos`]);
    /// deterministic convolutions are always the heuristic's.
    pub conv_algos: ConvAlgos,
    /// Whole-step CUDA graphs; `None`: on for the GPU, off for the CPU.
    pub graph: Option<bool>,
    /// Time every op of one step (the GPU or the CPU) and report where the
    /// time goes.
    pub profile: bool,
}

/// A setting written as the text it is parsed from.
fn as_text<T: std::fmt::Display, S: serde::Serializer>(value: &T, s: S) -> std::result::Result<S::Ok, S::Error> {
    s.serialize_str(&value.to_string())
}

impl Default for RunConfig {
    fn default() -> Self {
        Self {
            epochs: 4,
            batch: 100,
            other_batches: Vec::new(),
            command_line: Vec::new(),
            embeddings: None,
            model: ModelChoice::default(),
            optimizer: OptimizerChoice::default(),
            task: TaskChoice::default(),
            lr: 0.05,
            schedule: Schedule::default(),
            seed: 42,
            data_dir: PathBuf::from("data/mnist"),
            image_options: ImageOptions::default(),
            train_limit: None,
            test_limit: None,
            checkpoints: None,
            resume: None,
            data_parallel: None,
        }
    }
}

impl Default for MemoryConfig {
    fn default() -> Self {
        Self {
            arena_size: None,
            memory_plan: true,
            memory_budget: None,
            recompute: Recompute::default(),
            workspace_growth: TUNING_GROWTH,
            poison_step: None,
        }
    }
}

impl Default for DeviceConfig {
    fn default() -> Self {
        Self {
            request: DeviceRequest::Auto,
            threads: 0,
            precision: Precision::Fp32,
            deterministic: false,
            conv_algos: ConvAlgos::Timed,
            graph: None,
            profile: false,
        }
    }
}

impl DeviceConfig {
    /// The CPU with `threads` workers (0: one per core), otherwise the defaults.
    pub fn cpu(threads: usize) -> Self {
        Self {
            request: DeviceRequest::Cpu,
            threads,
            ..Self::default()
        }
    }

    /// The GPU, otherwise the defaults.
    pub fn cuda() -> Self {
        Self {
            request: DeviceRequest::Cuda,
            ..Self::default()
        }
    }
}

impl TrainConfig {
    /// A builder starting from the defaults.
    pub fn builder() -> TrainConfigBuilder {
        TrainConfigBuilder::default()
    }

    /// Rejects settings that cannot train, naming the setting and a value
    /// that works.
    pub fn validate(&self) -> Result<()> {
        let (run, memory, device) = (&self.run, &self.memory, &self.device);
        let at_least_one = |setting, what: &str| {
            Err(Error::setting(
                setting,
                format!("{what} must be at least 1"),
                Some("1".into()),
            ))
        };
        if run.epochs == 0 {
            return at_least_one(Setting::Epochs, "the number of epochs");
        }
        if run.batch == 0 || run.other_batches.contains(&0) {
            return at_least_one(Setting::Batch, "the batch");
        }
        if !(run.lr.is_finite() && run.lr > 0.0) {
            return Err(Error::setting(
                Setting::LearningRate,
                format!("the learning rate must be a positive number, got {}", run.lr),
                Some("a positive number such as 0.05".into()),
            ));
        }
        run.optimizer.validate()?;
        run.task.validate()?;
        if run.test_limit == Some(0) {
            return at_least_one(Setting::TestLimit, "the test-set limit");
        }
        if run.train_limit == Some(0) {
            return at_least_one(Setting::TrainLimit, "the training-set limit");
        }
        if device.request == DeviceRequest::Cpu && device.precision != Precision::Fp32 {
            return Err(gpu_precision_on_cpu(device.precision, None));
        }
        if !(memory.workspace_growth >= 0.0 && memory.workspace_growth.is_finite()) {
            return Err(Error::setting(
                Setting::WorkspaceGrowth,
                format!(
                    "the workspace growth is a fraction of the step, 0 or more, got {}",
                    memory.workspace_growth
                ),
                Some(TUNING_GROWTH.to_string()),
            ));
        }
        if run.checkpoints.as_ref().is_some_and(|p| p.keep == 0) {
            return at_least_one(Setting::KeepCheckpoints, "the number of checkpoints kept");
        }
        if let Some(dp) = &run.data_parallel {
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

/// Makes a [`TrainConfig`] a setting at a time, from the defaults; each
/// setter names the field it sets. [`build`](Self::build) checks nothing:
/// [`train`](super::train) and [`Pipeline::open`](super::Pipeline::open)
/// validate (see [`TrainConfig::validate`]).
#[derive(Debug, Clone, Default)]
#[must_use = "a builder makes nothing until `build` is called"]
pub struct TrainConfigBuilder {
    cfg: TrainConfig,
}

/// One setter per field: `name(arg: Type) => part.field = value;`.
macro_rules! setters {
    ($($(#[$doc:meta])* $name:ident($arg:ident: $ty:ty) => $part:ident.$field:ident = $value:expr;)*) => {
        impl TrainConfigBuilder {
            $(
                $(#[$doc])*
                pub fn $name(mut self, $arg: $ty) -> Self {
                    self.cfg.$part.$field = $value;
                    self
                }
            )*
        }
    };
}

setters! {
    /// Passes over the training set ([`RunConfig::epochs`]).
    epochs(epochs: usize) => run.epochs = epochs;
    /// Examples per step ([`RunConfig::batch`]).
    batch(batch: usize) => run.batch = batch;
    /// More batch sizes the session may step at ([`RunConfig::other_batches`]).
    other_batches(batches: Vec<usize>) => run.other_batches = batches;
    /// The network: one of the crate's (`MnistCnn::choice()`) or one's own,
    /// through [`ModelChoice::new`] ([`RunConfig::model`]).
    model(model: ModelChoice) => run.model = model;
    /// The optimizer, such as `SgdConfig::default().momentum(0.9).choice()`
    /// ([`RunConfig::optimizer`]).
    optimizer(optimizer: OptimizerChoice) => run.optimizer = optimizer;
    /// What a batch means: the loss and the metric ([`RunConfig::task`]).
    task(task: TaskChoice) => run.task = task;
    /// The base learning rate ([`RunConfig::lr`]).
    lr(lr: f32) => run.lr = lr;
    /// How the rate changes over the run ([`RunConfig::schedule`]).
    schedule(schedule: Schedule) => run.schedule = schedule;
    /// The seed of everything drawn at random ([`RunConfig::seed`]).
    seed(seed: u64) => run.seed = seed;
    /// The data set: a directory, a text file or a synthetic source
    /// ([`RunConfig::data_dir`]).
    data_dir(dir: impl Into<PathBuf>) => run.data_dir = dir.into();
    /// How an image folder is read ([`RunConfig::image_options`]).
    image_options(options: ImageOptions) => run.image_options = options;
    /// Train on the first `examples` only ([`RunConfig::train_limit`]).
    train_limit(examples: usize) => run.train_limit = Some(examples);
    /// Evaluate on the first `examples` only ([`RunConfig::test_limit`]).
    test_limit(examples: usize) => run.test_limit = Some(examples);
    /// Where and how often checkpoints are written
    /// ([`RunConfig::checkpoints`]).
    checkpoints(policy: CheckpointPolicy) => run.checkpoints = Some(policy);
    /// Continue from the newest valid checkpoint in `dir`
    /// ([`RunConfig::resume`]).
    resume(dir: impl Into<PathBuf>) => run.resume = Some(dir.into());
    /// This process as one rank of a data-parallel run
    /// ([`RunConfig::data_parallel`]).
    data_parallel(rank: DataParallel) => run.data_parallel = Some(rank);
    /// The words that set the run up, kept in its checkpoints
    /// ([`RunConfig::command_line`]).
    command_line(words: Vec<String>) => run.command_line = words;
    /// The arena's size in bytes, rather than measured
    /// ([`MemoryConfig::arena_size`]).
    arena_size(bytes: usize) => memory.arena_size = Some(bytes);
    /// Liveness-planned step memory, or bump allocation
    /// ([`MemoryConfig::memory_plan`]).
    memory_plan(on: bool) => memory.memory_plan = on;
    /// The bytes a training step may use, recomputing above them
    /// ([`MemoryConfig::memory_budget`]).
    memory_budget(bytes: usize) => memory.memory_budget = Some(bytes);
    /// What a step recomputes without a budget ([`MemoryConfig::recompute`]).
    recompute(what: Recompute) => memory.recompute = what;
    /// How far timed convolutions may grow the step
    /// ([`MemoryConfig::workspace_growth`]).
    workspace_growth(fraction: f64) => memory.workspace_growth = fraction;
    /// Whether every reset fills the step region with NaNs
    /// ([`MemoryConfig::poison_step`]).
    poison_step(on: bool) => memory.poison_step = Some(on);
    /// Which device ([`DeviceConfig::request`]).
    device(request: DeviceRequest) => device.request = request;
    /// CPU worker threads, 0 for one per core ([`DeviceConfig::threads`]).
    threads(threads: usize) => device.threads = threads;
    /// The arithmetic of convolutions and matrix products
    /// ([`DeviceConfig::precision`]).
    precision(precision: Precision) => device.precision = precision;
    /// Deterministic convolutions only ([`DeviceConfig::deterministic`]).
    deterministic(on: bool) => device.deterministic = on;
    /// How a GPU chooses its convolution algorithms
    /// ([`DeviceConfig::conv_algos`]).
    conv_algos(algos: ConvAlgos) => device.conv_algos = algos;
    /// Whole-step CUDA graphs on or off ([`DeviceConfig::graph`]).
    graph(on: bool) => device.graph = Some(on);
    /// Time every op of one step ([`DeviceConfig::profile`]).
    profile(on: bool) => device.profile = on;
}

impl TrainConfigBuilder {
    /// The whole device part at once, such as [`DeviceConfig::cpu`].
    pub fn device_config(mut self, device: DeviceConfig) -> Self {
        self.cfg.device = device;
        self
    }

    /// The configuration as set.
    pub fn build(self) -> TrainConfig {
        self.cfg
    }
}

/// TF32 or bf16 asked of the CPU: `fell_back` is why `auto` chose the CPU,
/// if it did.
pub(super) fn gpu_precision_on_cpu(precision: Precision, fell_back: Option<&str>) -> Error {
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

/// What a training step recomputes in backward when no memory budget is
/// given (a budget chooses among every convolution and block output).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Recompute {
    /// [`Recompute::Cheap`]'s drops, then on a GPU that times its
    /// convolutions a search for a smaller step: budgets below the step
    /// those drops make with the timed workspaces, searched as a memory
    /// budget is, the least kept whose predicted cost stays within 2.5% of
    /// the step's predicted time, or the cheap drops' own cost where more
    /// (`train::pipeline::tuning`). Elsewhere, `Cheap`.
    #[default]
    Lean,
    /// The outputs backward makes again without a multiply-add (a residual
    /// block's batch norm + add + relu, read from tensors backward keeps
    /// anyway), where that lowers the step's peak: an elementwise pass
    /// each, for up to a fifth of a ResNet's step memory.
    Cheap,
    /// Nothing: every output backward reads is kept.
    Nothing,
}

/// How much a timed choice may grow the step over the heuristic's by
/// default (`--workspace-growth`): 20%.
/// Measured on the H200 (fp32), the fastest choices grew ResNet-18's step
/// by 13% at batch 128 and 7% at batch 512, ResNet-50's by 1% at batch
/// 128, for steps 2.4×, 2.5× and 1.5× faster than the heuristic's; held
/// to 5%, ResNet-18 kept only half of that speed.
pub const TUNING_GROWTH: f64 = 0.2;
