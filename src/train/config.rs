//! A run's settings, in three parts: what the run trains ([`RunConfig`]),
//! what its memory may be ([`MemoryConfig`]) and which device computes how
//! ([`DeviceConfig`]), composed into the [`TrainConfig`] the CLI fills.
//! The pipeline reads them; the session it builds sees none of them.

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
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct TrainConfig {
    #[serde(flatten)]
    pub run: RunConfig,
    #[serde(flatten)]
    pub memory: MemoryConfig,
    #[serde(flatten)]
    pub device: DeviceConfig,
}

/// What the run trains, on what, and for how long.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunConfig {
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
    pub seed: u64,
    /// The data set: a directory of MNIST or CIFAR-10 files, or a synthetic
    /// source such as `synthetic:cifar10:1000` (see [`crate::data::DataSource::parse`]).
    pub data_dir: PathBuf,
    /// How an image folder is read: its image size and validation split
    /// (the defaults for any other data).
    pub image_options: ImageOptions,
    pub train_limit: Option<usize>,
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
}

/// How the arena is sized and used.
#[derive(Debug, Clone, serde::Serialize)]
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
pub struct DeviceConfig {
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
    /// Time every op of one step on the GPU and report where the time goes.
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

/// How much a timed choice may grow the step over the heuristic's by
/// default (`--workspace-growth`): 20%.
/// Measured on the H200 (fp32), the fastest choices grew ResNet-18's step
/// by 13% at batch 128 and 7% at batch 512, ResNet-50's by 1% at batch
/// 128, for steps 2.4×, 2.5× and 1.5× faster than the heuristic's; held
/// to 5%, ResNet-18 kept only half of that speed.
pub const TUNING_GROWTH: f64 = 0.2;
