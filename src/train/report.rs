//! What a training run tells its caller: per-step progress and per-epoch
//! reports, through an [`Observer`] (the CLI draws bars, tests collect).

use crate::backend::OpTime;
use crate::backend::{DeviceKind, Precision};
use crate::memory::ArenaStats;

/// Facts fixed when the run starts.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunInfo {
    /// The kind of device the arena is on.
    pub device: DeviceKind,
    /// "cpu (2 threads)", "NVIDIA H200 (sm_90)".
    pub device_name: String,
    /// The arithmetic of convolutions and matrix products.
    pub precision: Precision,
    /// The CPU's worker threads (1 on a GPU).
    pub threads: usize,
    /// Why `--device auto` did not pick the GPU, if it did not.
    pub device_note: Option<String>,
    /// The data set, for people ("MNIST", "synthetic CIFAR-10").
    pub data: String,
    /// Random data: the accuracy means nothing.
    pub synthetic: bool,
    /// What the task made of the data, a line each (a vocabulary, its
    /// unknown words, length buckets): see [`crate::tasks::Task::describe`].
    pub data_notes: Vec<String>,
    /// How training images are augmented (`none`, `crop4,flip`, ...).
    pub augment: String,
    /// Training examples, counted in `example_unit`s.
    pub train_examples: usize,
    /// Test (or validation) examples, counted in `example_unit`s.
    pub test_examples: usize,
    /// What the examples are: "images", or a corpus's "tokens".
    pub example_unit: &'static str,
    /// Training steps an epoch takes on this rank.
    pub steps_per_epoch: usize,
    /// Whether the arena size was measured (`auto`) or given.
    pub arena_size_measured: bool,
    /// The arena as made, before the first step.
    pub arena: ArenaStats,
    /// Where the arena's bytes go, with the step plans (when planning).
    #[serde(skip)]
    pub memory: Option<crate::memory::MemoryReport>,
    /// This rank and the ranks of a data-parallel run (0 of 1 alone).
    pub world: crate::distributed::World,
    /// Examples per step on this rank.
    pub batch: usize,
    /// The network trained (as `--model` names it).
    pub model: &'static str,
    /// Its trainable values.
    pub parameters: usize,
    /// The optimizer with its settings, and the learning-rate schedule.
    pub optimizer: String,
    /// The learning-rate schedule, as `--schedule` writes it.
    pub schedule: String,
    /// Data-parallel gradient buckets: each one's parameters and bytes.
    pub buckets: Vec<(Vec<String>, usize)>,
    /// Device memory NCCL took for its communicator, outside the arena.
    pub nccl_bytes: Option<usize>,
    /// How much the timed choices' workspaces could grow the step
    /// (`--workspace-growth`).
    pub workspace_growth: f64,
    /// On a GPU, unless convolutions must be deterministic: the timing of
    /// the convolution algorithms before the first step.
    pub conv_tuning: Option<ConvTuning>,
    /// bf16 or TF32 convolutions cuDNN's graph API refused, which therefore
    /// run on its slower legacy API: each shape and what the graph API said.
    pub legacy_convolutions: Vec<(crate::backend::cuda::ConvDims, String)>,
    /// fp32 convolutions with FMA math, timed on both of cuDNN's APIs:
    /// how many of their passes run the graph API's engines, of how many.
    pub fp32_passes_on_graph: Option<(usize, usize)>,
    /// Under a memory budget (or a given arena too small for the step), or
    /// by default where that lowers the step's peak: what the step
    /// recomputes in backward rather than keep.
    pub recomputed: Option<RecomputePlan>,
}

/// The convolution and block outputs a training step recomputes in
/// backward (under a memory budget, or the default's cheap ones): the
/// choice `bumpgrad memory` reports for the same settings.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct RecomputePlan {
    /// Why: a budget (given, or a given arena's), or the default's cheap
    /// outputs...
    pub reason: crate::memory::RecomputeReason,
    /// The recomputed candidates, by their index in the order the step
    /// makes them...
    pub dropped: Vec<u32>,
    /// ...of this many...
    pub candidates: usize,
    /// ...the seconds a step takes longer for it, by the device's cost
    /// model...
    pub predicted_extra_seconds: f64,
    /// ...whether chains of them are made again for each reader rather
    /// than held...
    pub transient_chains: bool,
    /// ...the same in words ("held", "remade for each reader")...
    pub chain_mode: &'static str,
    /// ...each one, with what it is and the times the step makes it again...
    pub outputs: Vec<crate::memory::RecomputedOutput>,
    /// ...the seconds the timed convolutions' workspaces, held down so the
    /// step fits, add by cuDNN's timings (0 where none are held)...
    pub workspace_extra_seconds: f64,
    /// ...the two together, the step's predicted extra time...
    pub predicted_step_extra_seconds: f64,
    /// ...how the search went (`None`: the step needed no search)...
    pub search: Option<crate::memory::SearchReport>,
    /// ...and what the default's search for a smaller step did, where it
    /// ran.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub lean: Option<crate::memory::LeanSearch>,
}

/// One epoch as `--json` prints it: the report, the measured time of a
/// step, and under a memory budget the plan the run follows, so that the
/// predicted and the measured time read off one line.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EpochLine<'a> {
    /// The epoch's report, its fields at the line's top level.
    #[serde(flatten)]
    pub epoch: &'a EpochReport,
    /// The epoch's training seconds per step.
    pub step_seconds: f64,
    /// What the step recomputes under a memory budget, if anything.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recomputed: Option<&'a RecomputePlan>,
}

impl<'a> EpochLine<'a> {
    /// The line of `epoch`, with the run's recomputation plan if it has one.
    pub fn new(epoch: &'a EpochReport, recomputed: Option<&'a RecomputePlan>) -> Self {
        Self {
            epoch,
            step_seconds: epoch.seconds / epoch.steps.max(1) as f64,
            recomputed,
        }
    }
}

/// One epoch, as `--json` prints it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EpochReport {
    /// The epoch, from 1.
    pub epoch: usize,
    /// The data-parallel rank that reports (0 alone) and the ranks.
    pub rank: usize,
    /// The ranks (1 alone).
    pub world_size: usize,
    /// The mean of the epoch's training losses, as the task defines a step's.
    pub train_loss: f64,
    /// Fraction of the test set classified correctly, in [0, 1]; NaN
    /// (`null` in JSON) for a task without one (a language model).
    pub test_accuracy: f64,
    /// For trees: the non-neutral roots' accuracy by sign
    /// (`test_accuracy` is the roots' over five classes).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub binary_accuracy: Option<f64>,
    /// For trees: every node's accuracy over five classes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_accuracy: Option<f64>,
    /// A language model's validation loss per token (nats), its `exp`, and
    /// the loss in bits.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub valid_loss: Option<f64>,
    /// `exp` of the validation loss.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub perplexity: Option<f64>,
    /// The validation loss in bits per character.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bits_per_char: Option<f64>,
    /// Training time of the epoch, evaluation excluded.
    pub seconds: f64,
    /// Evaluation's seconds.
    pub eval_seconds: f64,
    /// Training steps taken on this rank.
    pub steps: usize,
    /// The arithmetic of convolutions and matrix products ("fp32", "tf32",
    /// "bf16").
    pub precision: Precision,
    /// The device the epoch ran on.
    pub device: DeviceKind,
    /// The arena after the epoch: its high-water marks and resets.
    pub arena: ArenaStats,
    /// The process's resident memory after the epoch, where the OS tells it.
    pub resident_bytes: Option<u64>,
    /// On a GPU: free device memory (`cuMemGetInfo`) after the epoch...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_free_bytes: Option<usize>,
    /// ...and after the run's first training step. Nothing of this run
    /// allocates device memory but the arena, made before it, so the two
    /// are equal unless another process took or gave back memory on the
    /// GPU meanwhile: a figure to report, not to hold a run to.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_free_bytes_first_step: Option<usize>,
    /// On a GPU: the device allocations made on it since it opened, which
    /// is one, the arena's, in every epoch (the libraries' workspaces and
    /// scratch come from the arena too). Unlike the free bytes above, which
    /// any other process on the GPU moves, this is bumpgrad's alone.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_allocations: Option<u64>,
    /// The device's memory in all (so `total - free` is what every process
    /// on it holds, this one's context and libraries included).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_total_bytes: Option<usize>,
    /// Whether full steps ran as replays of one captured CUDA graph.
    pub graph: bool,
    /// Work per step on the GPU: the captured graph's nodes (every kernel,
    /// cuDNN's and cuBLAS's included), or without a graph the ops queued (a
    /// library call counts once).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernels_per_step: Option<usize>,
    /// On the GPU: the work bumpgrad itself queued for a step (kernels,
    /// library calls, copies, fills), each of which a graph holds as one
    /// node or more (a library call may expand to several kernels).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ops_per_step: Option<usize>,
    /// With `--profile`: the sum of one step's op times on the GPU, the floor
    /// a step could reach with no gaps between kernels...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub kernel_seconds_per_step: Option<f64>,
    /// ...and from its first op's start to its last op's end on the GPU.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub span_seconds_per_step: Option<f64>,
    /// With a gradient clip: the mean of the steps' gradient norms before
    /// clipping (of the steps this process ran, a resumed epoch's first
    /// ones not among them).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub grad_norm: Option<f64>,
}

/// One step with every op timed (`--profile`): on the GPU by events
/// around each launch, on the CPU by the host's clock around each op.
#[derive(Debug, Clone, serde::Serialize)]
pub struct StepProfile {
    /// Each op's time, summed over the op's calls in the step, slowest
    /// first: the op ([`OpTime::label`]), its calls, its seconds.
    pub ops: Vec<(String, usize, f64)>,
    /// The sum of all op times.
    pub kernel_seconds: f64,
    /// Ops (eager) or graph nodes (replayed) of the step.
    pub ops_queued: Option<usize>,
    /// Device time from the first op's start to the last op's end: the ops
    /// plus the gaps between them.
    pub span_seconds: Option<f64>,
    /// How the ops were timed.
    pub timed: Timed,
}

/// How a profiled step's ops were timed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Timed {
    /// On the CPU by the host's clock: each op's time is all of it, its
    /// kernels and its workers' joins.
    Cpu,
    /// On the GPU, the step queued op by op: each op's time includes the
    /// host's work inside the op.
    GpuQueued,
    /// On the GPU, a graph replay: GPU time only.
    GpuReplayed,
}

impl StepProfile {
    pub(crate) fn new(times: &[OpTime], ops_queued: Option<usize>, span_seconds: Option<f64>, timed: Timed) -> Self {
        let mut ops: Vec<(String, usize, f64)> = Vec::new();
        for t in times {
            let label = t.label();
            match ops.iter_mut().find(|(op, _, _)| *op == label) {
                Some(entry) => {
                    entry.1 += 1;
                    entry.2 += t.seconds;
                }
                None => ops.push((label, 1, t.seconds)),
            }
        }
        ops.sort_by(|a, b| b.2.total_cmp(&a.2));
        Self {
            kernel_seconds: times.iter().map(|t| t.seconds).sum(),
            ops,
            ops_queued,
            span_seconds,
            timed,
        }
    }
}

/// Receives progress; every method has a do-nothing default.
pub trait Observer {
    /// The run is built and about to take its first step.
    fn started(&mut self, _info: &RunInfo) {}
    /// Epoch `epoch` (from 1) begins, of `steps` training steps.
    fn epoch_started(&mut self, _epoch: usize, _steps: usize) {}
    /// Step `step` (from 0) of `epoch` ended with `loss`; losses are read
    /// back every [`READBACK`](crate::train::READBACK) steps, so they come in
    /// bursts.
    fn step(&mut self, _epoch: usize, _step: usize, _loss: f32) {}
    /// `epoch`'s evaluation begins.
    fn evaluating(&mut self, _epoch: usize) {}
    /// An epoch continues from `step` (a resumed run); 0 for a fresh epoch.
    fn resumed_at(&mut self, _epoch: usize, _step: usize) {}
    /// A checkpoint was written.
    fn checkpoint_written(&mut self, _path: &std::path::Path) {}
    /// A line for people (resuming, skipped checkpoints).
    fn note(&mut self, _line: &str) {}
    /// A step was timed op by op; `wall_per_step` is the epoch's seconds per step.
    fn profiled(&mut self, _profile: &StepProfile, _wall_per_step: f64) {}
    /// `epoch`'s report, evaluation included.
    fn epoch(&mut self, _report: &EpochReport) {}
    /// The held-out test split's figures, after the last epoch, for a task
    /// that keeps one apart from the split it validates on (trees).
    fn tested(&mut self, _metric: &crate::tasks::Metric) {}
}

/// An observer that ignores everything.
pub struct Quiet;
impl Observer for Quiet {}

/// An observer that keeps every epoch's report and ignores the rest.
#[derive(Debug, Default)]
pub struct Reports(pub Vec<EpochReport>);

impl Observer for Reports {
    fn epoch(&mut self, report: &EpochReport) {
        self.0.push(report.clone());
    }
}

/// The process's resident set size, from `/proc/self/statm` (Linux only),
/// which counts it in pages of the system's size. Read into the stack:
/// every epoch report calls this, and the epoch loop makes no heap
/// allocation (`tests/zero_alloc.rs`).
pub fn resident_bytes() -> Option<u64> {
    use std::io::Read;
    // Seven decimal numbers: far below 256 bytes, read whole at once.
    let mut buf = [0u8; 256];
    let n = std::fs::File::open("/proc/self/statm").ok()?.read(&mut buf).ok()?;
    let statm = std::str::from_utf8(&buf[..n]).ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    pages.checked_mul(crate::backend::cpu::page_size()? as u64)
}

/// What timing the convolution algorithms did (see `train::Pipeline::build`).
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct ConvTuning {
    /// Convolution shapes whose fastest algorithm of some pass was not the
    /// heuristic's.
    pub changed: usize,
    /// How the kept choices' workspaces were held down, where the fastest
    /// would have grown the step too much.
    pub held: WorkspaceHold,
    /// Whether the timed choices are the ones the run uses (else the
    /// heuristic's, as no timed step fitted).
    pub kept: bool,
    /// Seconds a training step's convolutions take beyond the fastest
    /// algorithms timed, by cuDNN's timings: what holding the workspaces
    /// as `held` says costs (0 where nothing is held).
    pub seconds_lost: f64,
    /// Convolution passes held below their fastest workspace that run as
    /// two halves of their batch, each within about half the workspace.
    pub halved: usize,
    /// What the default's search for a smaller step did, where it ran.
    pub lean: Option<crate::memory::LeanSearch>,
}

/// How a run's timed convolutions were held to fit its step (see
/// `train::pipeline::tuning`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkspaceHold {
    /// Every pass runs its fastest timed algorithm.
    Fastest,
    /// `at_peak` of the shapes' passes, those that run where the step
    /// peaks, take smaller workspaces than their fastest, each to what is
    /// left beside everything alive with it; and, with a `cap`, every
    /// workspace at most that many bytes.
    Held {
        /// Passes held below their fastest where the step peaks.
        at_peak: usize,
        /// The largest workspace any pass may take, if one was set.
        cap: Option<usize>,
    },
}
