//! The `bumpgrad` command: parses flags, calls the library, prints.

mod choices;
mod hints;
mod progress;

use anyhow::Context;
use bumpgrad::backend::{DeviceRequest, Group, Precision};
use bumpgrad::data::DataSource;
use bumpgrad::distributed::env::{env_var, token_from};
use bumpgrad::distributed::launcher::{self, LaunchOptions};
use bumpgrad::distributed::rendezvous::{rendezvous, RendezvousConfig, WatchOptions};
use bumpgrad::distributed::token::Token;
use bumpgrad::distributed::{DataParallel, World};
use bumpgrad::memory::ByteSize;
use bumpgrad::ops::gather::Augment;
use bumpgrad::train::{self, CheckpointPolicy, ConvAlgos, Every, Join, TrainConfig};
use clap::{Parser, Subcommand, ValueEnum};
use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

#[derive(Parser)]
#[command(
    name = "bumpgrad",
    version,
    about = "Deep-learning training whose memory is an arena",
    args_override_self = true
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Train a network (Lantern's MNIST CNN by default) and report loss, test accuracy and
    /// memory per epoch.
    #[command(args_override_self = true)]
    Train(TrainArgs),
    /// Print where every byte of the arena would go (the persistent region and each step's
    /// liveness plan) without training and without allocating it; same flags as `train`.
    #[command(args_override_self = true)]
    Memory(MemoryArgs),
    /// List the models `--model` takes, with their parameter counts for the data set.
    Models(ModelsArgs),
}

#[derive(clap::Args)]
struct MemoryArgs {
    #[command(flatten)]
    train: TrainArgs,
    /// Instead of one batch's plan, find the largest --batch whose whole arena (persistent region
    /// and the largest step) fits --arena-size, by dry runs (progress on stderr).
    #[arg(long)]
    max_batch: bool,
}

#[derive(clap::Args)]
struct ModelsArgs {
    /// The data set whose image shape and classes the models are counted for (a directory or
    /// `synthetic:cifar10[:N]`, as `train --data`).
    #[arg(long, default_value = "data/mnist", value_parser = parse_data)]
    data: DataSource,
}

/// `--data`: parsed by the library, so a bad synthetic source is refused
/// before anything runs.
fn parse_data(text: &str) -> Result<DataSource, String> {
    DataSource::parse(text).map_err(|e| e.to_string())
}

#[derive(Clone, Copy, ValueEnum)]
enum DeviceArg {
    /// The GPU when one is usable, else the CPU.
    Auto,
    Cpu,
    Cuda,
}

/// `--precision`: the arithmetic of convolutions and matrix products.
#[derive(Clone, Copy, ValueEnum)]
enum PrecisionArg {
    /// IEEE single-precision FMA math everywhere (the default; GPU results match the CPU's
    /// within float rounding).
    Fp32,
    /// Convolutions and matrix products on the tensor cores with TF32 inputs (10-bit mantissa)
    /// and fp32 accumulation, as PyTorch's allow_tf32; GPU only.
    Tf32,
    /// Mixed precision, as PyTorch's bf16 autocast: convolutions and matrix products on the tensor
    /// cores in bf16 with fp32 accumulation, activations and their gradients kept in bf16;
    /// batch-norm statistics, the loss and sums in fp32; fp32 weights, gradients and optimizer
    /// state (checkpoints stay fp32); GPU only.
    Bf16,
}

/// `--conv-algos`: how a GPU chooses each convolution's algorithms.
#[derive(Clone, Copy, ValueEnum)]
enum ConvAlgosArg {
    /// Time every algorithm on the device before the first step and keep the fastest, as
    /// PyTorch's cudnn.benchmark (the default): a larger workspace where the step stays within
    /// 20% of the heuristic's; two runs may choose, and so round, differently.
    Timed,
    /// cuDNN's heuristic choice with at most 8 MiB of workspace: the same algorithms every run.
    Heuristic,
}

impl From<ConvAlgosArg> for ConvAlgos {
    fn from(arg: ConvAlgosArg) -> Self {
        match arg {
            ConvAlgosArg::Timed => Self::Timed,
            ConvAlgosArg::Heuristic => Self::Heuristic,
        }
    }
}

impl From<PrecisionArg> for Precision {
    fn from(arg: PrecisionArg) -> Self {
        match arg {
            PrecisionArg::Fp32 => Self::Fp32,
            PrecisionArg::Tf32 => Self::Tf32,
            PrecisionArg::Bf16 => Self::Bf16,
        }
    }
}

#[derive(Clone, Copy, ValueEnum)]
enum GraphArg {
    /// On for the GPU, off for the CPU.
    Auto,
    On,
    Off,
}

#[derive(clap::Args)]
struct TrainArgs {
    /// Where to train.
    #[arg(long, value_enum, default_value = "auto")]
    device: DeviceArg,
    /// Passes over the training set.
    #[arg(long, default_value_t = 4, value_parser = count::<usize>, allow_negative_numbers = true)]
    epochs: usize,
    /// Examples per step (training and evaluation).
    #[arg(long, default_value_t = 100, value_parser = count::<usize>, allow_negative_numbers = true)]
    batch: usize,
    /// The network to train (`bumpgrad models` lists them).
    #[arg(long, default_value = choices::MODELS[0].0, value_parser = choices::model_name)]
    model: &'static str,
    /// Scales every channel count of resnet18, resnet50 and squeezenet (0.125 trains a small
    /// ResNet quickly on a CPU); default 1.
    #[arg(long, value_parser = choices::width_mult, allow_negative_numbers = true)]
    width_mult: Option<f32>,
    /// The optimizer.
    #[arg(long, value_enum, default_value = "sgd")]
    optimizer: choices::OptimizerArg,
    /// Base learning rate (the schedule scales it step by step).
    #[arg(long, default_value_t = 0.05, allow_negative_numbers = true)]
    lr: f32,
    /// How the rate changes: constant, step:EPOCHS,GAMMA (times GAMMA every EPOCHS epochs) or
    /// cosine (to 0 at the end of the run).
    #[arg(long, default_value = "constant")]
    schedule: bumpgrad::optim::Schedule,
    /// Epochs of linear warm-up (from lr/W to lr over the first W steps) before the schedule.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    warmup_epochs: f64,
    /// Label smoothing ε of the cross-entropy loss, in [0, 1): the target is (1 − ε)·onehot + ε/C.
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    label_smoothing: f32,
    /// SGD momentum, in [0, 1) (default 0).
    #[arg(long, allow_negative_numbers = true)]
    momentum: Option<f32>,
    /// SGD with Nesterov momentum (needs --momentum above 0).
    #[arg(long)]
    nesterov: bool,
    /// Weight decay: an L2 term added to the gradient (SGD, default 0) or decoupled decay
    /// (AdamW, default 0.01).
    #[arg(long, allow_negative_numbers = true)]
    weight_decay: Option<f64>,
    /// AdamW's betas (default 0.9,0.999).
    #[arg(long, value_parser = choices::betas, allow_negative_numbers = true)]
    betas: Option<(f64, f64)>,
    /// AdamW's eps, above 0 (default 1e-8).
    #[arg(long, allow_negative_numbers = true)]
    eps: Option<f64>,
    /// Seeds the initial weights, the epoch order and dropout.
    #[arg(long, default_value_t = 42, value_parser = count::<u64>, allow_negative_numbers = true)]
    seed: u64,
    /// The data set: a directory holding MNIST's four IDX files (gzip or raw) or CIFAR-10's six
    /// binary batch files, or `synthetic:cifar10[:N]` (N random CIFAR-10-shaped training images,
    /// default 50000, and N/5 test images: for speed and memory runs).
    #[arg(long, default_value = "data/mnist", value_parser = parse_data)]
    data: DataSource,
    /// Random changes to each training image: `crop4` (pad 4 zero pixels, crop at a random
    /// offset), `flip` (mirror left-right half the time), `crop4,flip`, or `none`.
    #[arg(long, default_value = "none")]
    augment: Augment,
    /// Arena size (64MiB, 2GiB, ...), or `auto` to measure exactly what the run needs.
    #[arg(long, default_value = "auto", value_parser = parse_arena_size)]
    arena_size: ArenaSize,
    /// CPU worker threads; 0 uses every core.
    #[arg(long, default_value_t = 0, value_parser = count::<usize>, allow_negative_numbers = true)]
    threads: usize,
    /// Train on the first N training images only.
    #[arg(long, value_parser = count::<usize>, allow_negative_numbers = true)]
    train_limit: Option<usize>,
    /// Evaluate on the first N test images only.
    #[arg(long, value_parser = count::<usize>, allow_negative_numbers = true)]
    test_limit: Option<usize>,
    /// Capture the first full training step as a CUDA graph and replay it for every later one.
    #[arg(long, value_enum, default_value = "auto")]
    graph: GraphArg,
    /// Time every op of the second step on the GPU and print where a step's time goes.
    #[arg(long)]
    profile: bool,
    /// Fill the step region with NaNs after every step, so a kernel reading memory it did not
    /// write shows up as a NaN loss (on by default in debug builds).
    #[arg(long)]
    poison_step: bool,
    /// Where checkpoints go [default: the --resume directory, else ./checkpoints].
    #[arg(long)]
    checkpoint_dir: Option<PathBuf>,
    /// How often to write a checkpoint: 500steps, 2epochs, or `off` (then only when stopped by
    /// Ctrl-C or SIGTERM).
    #[arg(long, default_value = "1epoch", value_parser = parse_every)]
    checkpoint_every: EveryArg,
    /// How many of the newest checkpoints to keep.
    #[arg(long, default_value_t = 3, value_parser = count::<usize>, allow_negative_numbers = true)]
    keep_checkpoints: usize,
    /// Continue from the newest valid checkpoint in DIR (damaged newer ones are reported and skipped).
    #[arg(long, value_name = "DIR")]
    resume: Option<PathBuf>,
    /// Place step buffers by a liveness plan, reusing the bytes of buffers that died (`off`: every
    /// buffer stays until the step's reset).
    #[arg(long, value_enum, default_value = "on")]
    memory_plan: Switch,
    /// Convolutions by deterministic cuDNN algorithms only, so that a GPU run repeats bit for bit
    /// (1.3× to 2.5× slower steps on the MNIST CNN; the CPU is deterministic anyway).
    #[arg(long)]
    deterministic: bool,
    /// The arithmetic of convolutions and matrix products.
    #[arg(long, value_enum, default_value = "fp32")]
    precision: PrecisionArg,
    /// Step memory a training step may use (512MiB, 2GiB, ...): above it, convolution and block
    /// outputs are recomputed in backward rather than kept, chosen for the least extra time (the
    /// same losses, more time).
    #[arg(long, value_parser = parse_budget)]
    memory_budget: Option<usize>,
    /// How the GPU chooses each convolution's algorithms (--deterministic: the heuristic's,
    /// deterministic ones).
    #[arg(long, value_enum, default_value = "timed")]
    conv_algos: ConvAlgosArg,
    /// How much the timed convolution algorithms' workspaces may grow the step over the
    /// heuristic's, as a fraction of it: more is faster where cuDNN's fastest algorithms need
    /// large workspaces, for more step memory.
    #[arg(long, value_name = "F", default_value_t = bumpgrad::train::TUNING_GROWTH)]
    workspace_growth: f64,
    /// Write the training step's memory timeline (SVG) to FILE before training.
    #[arg(long, value_name = "FILE")]
    memory_report: Option<PathBuf>,
    /// Print one JSON object per epoch on stdout; human text goes to stderr.
    #[arg(long)]
    json: bool,
    /// Train data-parallel on N GPUs of this host, one process per GPU, each with --batch
    /// examples per step (a step is N × --batch). On several hosts, start one process per GPU with
    /// srun, mpirun, or RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR and MASTER_PORT set as torchrun does.
    #[arg(long, value_name = "N", value_parser = count::<usize>, allow_negative_numbers = true)]
    gpus: Option<usize>,
    /// Data-parallel gradient bucket size in KiB: each bucket is summed across the GPUs as soon as
    /// backward has produced it.
    #[arg(long, value_name = "KIB", default_value_t = 4, value_parser = count::<usize>, allow_negative_numbers = true)]
    bucket_kib: usize,
    /// Seconds the processes of a data-parallel run wait for each other to start.
    #[arg(long, value_name = "SECS", default_value_t = 120, value_parser = count::<u64>, allow_negative_numbers = true)]
    rendezvous_timeout: u64,
    /// File holding this job's rendezvous token (instead of BUMPGRAD_RENDEZVOUS_TOKEN): only
    /// processes that know it can join the run. --gpus makes one itself.
    #[arg(long, value_name = "FILE")]
    rendezvous_token_file: Option<PathBuf>,
    /// Seconds a data-parallel process may go without finishing a step before the whole run is
    /// ended (another process stuck or gone).
    #[arg(long, value_name = "SECS", default_value_t = 300, value_parser = count::<u64>, allow_negative_numbers = true)]
    collective_timeout: u64,
}

#[derive(Clone, Copy, PartialEq, Eq, ValueEnum)]
enum Switch {
    On,
    Off,
}

#[derive(Clone, Copy)]
struct EveryArg(Option<Every>);

fn parse_every(s: &str) -> Result<EveryArg, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(EveryArg(None));
    }
    s.parse::<Every>().map(|e| EveryArg(Some(e)))
}

/// A count or a number of seconds. Negative numbers reach this parser
/// rather than being taken for a flag, so `--batch -5` is told what the flag
/// takes, not "unexpected argument '-5'".
fn count<T: std::str::FromStr>(s: &str) -> Result<T, String> {
    s.parse()
        .map_err(|_| format!("expected a whole number (0, 1, 2, ...), got {s:?}"))
}

#[derive(Clone, Copy)]
struct ArenaSize(Option<usize>);

fn parse_budget(s: &str) -> Result<usize, String> {
    match s.parse::<ByteSize>() {
        Ok(b) if b.0 > 0 => Ok(b.0),
        Ok(_) => Err("a budget of 0 bytes fits no step".into()),
        Err(e) => Err(e.to_string()),
    }
}

fn parse_arena_size(s: &str) -> Result<ArenaSize, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(ArenaSize(None));
    }
    s.parse::<ByteSize>()
        .map(|b| ArenaSize(Some(b.0)))
        .map_err(|e| e.to_string())
}

impl TrainArgs {
    /// Refuses values no run can use, whether or not this run would reach
    /// the code that reads them (a data-parallel setting on a run alone),
    /// the same for `train` and `memory`, and a `--memory-report` file that
    /// cannot be written. Values that depend on the data or the device are
    /// the library's to refuse.
    fn check(&self) -> anyhow::Result<()> {
        if self.gpus == Some(0) {
            anyhow::bail!("--gpus must be at least 1");
        }
        if self.gpus.is_some() && matches!(self.device, DeviceArg::Cpu) {
            anyhow::bail!(
                "--gpus trains on GPUs (through NCCL); drop --device cpu, or drop --gpus to train on the CPU"
            );
        }
        choices::model(self.model, self.width_mult).map_err(anyhow::Error::msg)?;
        if let Some(m) = self.momentum.filter(|m| !(0.0..1.0).contains(m)) {
            anyhow::bail!("--momentum must be in [0, 1), got {m}");
        }
        if self.nesterov && self.momentum.unwrap_or(0.0) == 0.0 {
            anyhow::bail!("--nesterov needs a --momentum above 0 (e.g. --momentum 0.9)");
        }
        if let Some(wd) = self.weight_decay.filter(|wd| !(wd.is_finite() && *wd >= 0.0)) {
            anyhow::bail!("--weight-decay must be 0 or more, got {wd}");
        }
        if let Some((b1, b2)) = self
            .betas
            .filter(|(a, b)| !((0.0..1.0).contains(a) && (0.0..1.0).contains(b)))
        {
            anyhow::bail!("--betas must both be in [0, 1), got {b1},{b2}");
        }
        if let Some(eps) = self.eps.filter(|e| !(e.is_finite() && *e > 0.0)) {
            anyhow::bail!("--eps must be above 0, got {eps}");
        }
        if !(self.warmup_epochs.is_finite() && self.warmup_epochs >= 0.0) {
            anyhow::bail!("--warmup-epochs must be 0 or more, got {}", self.warmup_epochs);
        }
        self.optimizer_choice()?;
        if self.bucket_kib == 0 {
            anyhow::bail!("--bucket-kib must be at least 1 (KiB of gradients summed at once; the default is 4)");
        }
        if self.rendezvous_timeout == 0 {
            anyhow::bail!("--rendezvous-timeout must be at least 1 second (the default is 120)");
        }
        if self.collective_timeout == 0 {
            anyhow::bail!("--collective-timeout must be at least 1 second (the default is 300)");
        }
        if self.memory_report.is_some() && self.memory_plan == Switch::Off {
            // The timeline draws the plan; without one there is nothing to draw.
            anyhow::bail!(
                "--memory-report draws the step's memory plan, which --memory-plan off turns off; drop one of the two"
            );
        }
        if let Some(path) = &self.memory_report {
            check_report_path(path)?;
        }
        Ok(())
    }

    /// The optimizer and its settings, or which flag does not belong to it.
    fn optimizer_choice(&self) -> anyhow::Result<bumpgrad::nn::OptimizerChoice> {
        let flags = choices::OptimizerFlags {
            momentum: self.momentum,
            nesterov: self.nesterov,
            weight_decay: self.weight_decay,
            betas: self.betas,
            eps: self.eps,
        };
        choices::optimizer(self.optimizer, &flags).map_err(anyhow::Error::msg)
    }

    fn config(&self) -> TrainConfig {
        TrainConfig {
            device: match self.device {
                DeviceArg::Auto => DeviceRequest::Auto,
                DeviceArg::Cpu => DeviceRequest::Cpu,
                DeviceArg::Cuda => DeviceRequest::Cuda,
            },
            epochs: self.epochs,
            batch: self.batch,
            // Checked in `check`, which every command runs first.
            model: choices::model(self.model, self.width_mult).unwrap_or_default(),
            // Checked in `check`, which every command runs first.
            optimizer: self.optimizer_choice().unwrap_or_default(),
            lr: self.lr,
            schedule: self.schedule.with_warmup(self.warmup_epochs).unwrap_or(self.schedule),
            label_smoothing: self.label_smoothing,
            seed: self.seed,
            data_dir: PathBuf::from(self.data.to_string()),
            augment: self.augment,
            arena_size: self.arena_size.0,
            threads: self.threads,
            train_limit: self.train_limit,
            test_limit: self.test_limit,
            graph: match self.graph {
                GraphArg::Auto => None,
                GraphArg::On => Some(true),
                GraphArg::Off => Some(false),
            },
            profile: self.profile,
            poison_step: self.poison_step.then_some(true),
            checkpoints: Some(CheckpointPolicy {
                dir: self
                    .checkpoint_dir
                    .clone()
                    .or_else(|| self.resume.clone())
                    .unwrap_or_else(|| PathBuf::from("checkpoints")),
                every: self.checkpoint_every.0,
                keep: self.keep_checkpoints,
            }),
            resume: self.resume.clone(),
            memory_plan: self.memory_plan == Switch::On,
            deterministic: self.deterministic,
            precision: self.precision.into(),
            conv_algos: self.conv_algos.into(),
            workspace_growth: self.workspace_growth,
            memory_budget: self.memory_budget,
            data_parallel: None,
        }
    }
}

/// Set by the first Ctrl-C or SIGTERM: the run stops after its current step.
static STOP: AtomicBool = AtomicBool::new(false);

/// Exit status of a run stopped by a signal (as a shell reports SIGINT).
const INTERRUPTED: u8 = launcher::INTERRUPTED as u8;

/// The first signal asks the loop to stop after the current step and write
/// a checkpoint; a second one ends the process at once.
fn catch_signals() {
    let installed = ctrlc::set_handler(|| {
        if STOP.swap(true, Ordering::SeqCst) {
            eprintln!("\nbumpgrad: second interrupt: exiting now without a checkpoint");
            std::process::exit(INTERRUPTED as i32);
        }
        eprintln!("\nbumpgrad: stopping after this step to write a checkpoint (interrupt again to quit at once)");
    });
    if let Err(e) = installed {
        eprintln!("bumpgrad: warning: cannot catch Ctrl-C ({e}); an interrupt will lose the current epoch");
    }
}

/// Exit status of a data-parallel process ended because another one failed
/// or the group stopped making progress.
const PEER_LOST: i32 = 3;

/// Makes sure `--memory-report`'s file can be written before the work that
/// fills it: a bad path is refused at once, not after planning (`memory`)
/// or as a warning once training has started (`train`). An existing file is
/// not truncated here.
fn check_report_path(path: &std::path::Path) -> anyhow::Result<()> {
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map(drop)
        .map_err(|e| report_unwritable(path, e))
}

/// The one message for a memory timeline that cannot be written.
fn report_unwritable(path: &std::path::Path, e: std::io::Error) -> anyhow::Error {
    anyhow::anyhow!(
        "cannot write the memory timeline to {}: {e}; pass --memory-report a file in a directory you can write to",
        path.display()
    )
}

fn run_train(args: &TrainArgs) -> anyhow::Result<ExitCode> {
    args.check()?;
    // Read even where no group forms, so that a wrong path shows now, not
    // in the next data-parallel run.
    let token =
        token_from(env_var, args.rendezvous_token_file.as_deref()).context("reading --rendezvous-token-file")?;
    if let Some(gpus) = args.gpus {
        return launch(args, gpus, token);
    }
    let timeout = Duration::from_secs(args.rendezvous_timeout);
    let ranked = RendezvousConfig::from_lookup(env_var, timeout).context("reading the data-parallel environment")?;
    if let Some(rank) = ranked {
        return run_rank(args, rank.with_token(token));
    }
    let cfg = args.config();
    let mut printer = progress::Printer::new(args.json, args.memory_report.clone());
    catch_signals();
    note_budget_planning(&cfg);
    train::train_streaming(&cfg, &mut printer, &STOP)
        .with_context(|| format!("training on {}", cfg.data_dir.display()))?;
    Ok(ExitCode::SUCCESS)
}

/// `--gpus N`: this process starts and supervises one process per GPU.
fn launch(args: &TrainArgs, gpus: usize, token: Option<Token>) -> anyhow::Result<ExitCode> {
    // Counted before any rank starts: a rank without a GPU of its own would
    // only fail after the others had loaded their data and joined.
    let none = |why: String| {
        anyhow::anyhow!("--gpus {gpus} needs {gpus} GPUs, but none is usable ({why}); drop --gpus to train on the CPU")
    };
    match bumpgrad::backend::cuda::device_count() {
        Err(why) => return Err(none(why.reason())),
        Ok(0) => return Err(none("the driver sees no GPU".into())),
        Ok(found) if found < gpus => anyhow::bail!(
            "--gpus {gpus} needs {gpus} GPUs, but this host has {found} (check CUDA_VISIBLE_DEVICES); pass --gpus {found} or fewer"
        ),
        Ok(_) => {}
    }
    let exe = std::env::current_exe().context("finding this program to start one process per GPU")?;
    let rank_args = without_gpus(std::env::args_os().skip(1));
    // Every interrupt is the launcher's to pass on (see launcher::launch).
    if let Err(e) = ctrlc::set_handler(|| STOP.store(true, Ordering::SeqCst)) {
        eprintln!("bumpgrad: warning: cannot catch Ctrl-C ({e}); an interrupt will stop the GPUs' processes without a checkpoint");
    }
    let opts = LaunchOptions {
        gpus,
        rendezvous_timeout: Duration::from_secs(args.rendezvous_timeout),
        token,
        ..LaunchOptions::default()
    };
    let code = launcher::launch(&exe, &rank_args, &opts, &STOP, &mut |line| {
        eprintln!("bumpgrad: {line}")
    })
    .context("starting one process per GPU")?;
    Ok(ExitCode::from(code.clamp(0, 255) as u8))
}

/// The command line without `--gpus N` (or `--gpus=N`).
fn without_gpus(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut skip_next = false;
    for arg in args {
        if std::mem::take(&mut skip_next) {
            continue;
        }
        match arg.to_str() {
            Some("--gpus") => skip_next = true,
            Some(a) if a.starts_with("--gpus=") => {}
            _ => out.push(arg),
        }
    }
    out
}

/// One process of a data-parallel run: joins the others, then trains its
/// shard of every step on its own GPU. A failure anywhere in the group ends
/// this process within a bounded time.
fn run_rank(args: &TrainArgs, rv: RendezvousConfig) -> anyhow::Result<ExitCode> {
    let (rank, size) = (rv.rank, rv.world_size);
    let mut cfg = args.config();
    if matches!(cfg.device, DeviceRequest::Cpu) {
        anyhow::bail!("rank {rank}: data-parallel training runs on GPUs (through NCCL); drop --device cpu");
    }
    cfg.device = DeviceRequest::Cuda;
    cfg.data_parallel = Some(DataParallel {
        world: World { rank, size },
        bucket_bytes: args.bucket_kib.saturating_mul(1024),
    });
    if rank == 0 {
        eprintln!(
            "bumpgrad: rank 0 of {size} (GPU {} of its host), placed by {}; rendezvous at {}",
            rv.local_rank(),
            rv.source,
            rv.addr
        );
        if rv.token.is_none() {
            eprintln!(
                "bumpgrad: warning: no rendezvous token (BUMPGRAD_RENDEZVOUS_TOKEN or --rendezvous-token-file): any \
                 process that can reach {} can join this run as a rank, or stop it",
                rv.addr
            );
        }
    }
    // Until the group has formed, an interrupt simply ends the process.
    let make_id = || bumpgrad::backend::cuda::unique_id().map_err(|e| e.to_string());
    let (id, links) = rendezvous(&rv, make_id, &mut |line| eprintln!("bumpgrad: rank {rank}: {line}"))
        .with_context(|| format!("rank {rank} of {size} joining the others at {}", rv.addr))?;
    catch_signals();
    let progress = Arc::new(AtomicU64::new(0));
    let options = WatchOptions {
        stall_timeout: Some(Duration::from_secs(args.collective_timeout)),
        launched: rv.launched,
        ..WatchOptions::default()
    };
    let watch = links.watch(progress.clone(), options, move |why| {
        // The main thread may be blocked inside a collective that will never
        // complete; only ending the process ends the wait.
        eprintln!("error: rank {rank} of {size}: {why}");
        launcher::exit_now(PEER_LOST);
    });
    let mut printer = progress::Printer::new(args.json, args.memory_report.clone()).for_rank(rank);
    let join = Join {
        group: Group::Nccl { id, rank, world: size },
        ordinal: rv.local_rank(),
    };
    let result = train::train_streaming_rank(&cfg, join, &mut printer, &STOP, &progress);
    match &result {
        // A clean end (or a stop all ranks agreed on) says goodbye; any other
        // error leaves without one, which tells the others to stop too.
        Ok(()) | Err(bumpgrad::Error::Interrupted { .. }) => watch.finish(),
        Err(_) => drop(watch),
    }
    match result {
        // Rank 0 says where the checkpoint is; the others just follow.
        Err(bumpgrad::Error::Interrupted { epoch, step, .. }) if rank != 0 => {
            eprintln!("bumpgrad: rank {rank} of {size} stopped with the others after step {step} of epoch {epoch}");
            Ok(ExitCode::from(INTERRUPTED))
        }
        other => {
            other.with_context(|| format!("rank {rank} of {size} training on {}", cfg.data_dir.display()))?;
            Ok(ExitCode::SUCCESS)
        }
    }
}

/// Under a budget, what to recompute is solved for before the first step:
/// a fraction of a second for a small network, tens of seconds for a
/// ResNet-50. Said first, so that a quiet start is not taken for a hang.
fn note_budget_planning(cfg: &TrainConfig) {
    if let Some(budget) = cfg.memory_budget {
        eprintln!(
            "bumpgrad: choosing what to recompute to fit the memory budget of {} (tens of seconds for a large network)",
            ByteSize(budget)
        );
    }
}

fn run_memory(memory: &MemoryArgs) -> anyhow::Result<()> {
    let args = &memory.train;
    args.check()?;
    if memory.max_batch {
        return run_max_batch(args);
    }
    let cfg = args.config();
    note_budget_planning(&cfg);
    let (report, device) =
        train::memory_report(&cfg).with_context(|| format!("planning memory for {}", cfg.data_dir.display()))?;
    if let Some(path) = &args.memory_report {
        let title = format!(
            "bumpgrad step memory: {}, batch {}, {device}",
            cfg.model.name(),
            cfg.batch
        );
        std::fs::write(path, report.svg(&title)).map_err(|e| report_unwritable(path, e))?;
        eprintln!("bumpgrad: wrote the step's memory timeline to {}", path.display());
    }
    let text = if args.json {
        serde_json::to_string(&report).context("encoding the report")? + "\n"
    } else {
        format!(
            "bumpgrad memory: {}, batch {}, precision {}, on {device}\n{}",
            cfg.model.name(),
            cfg.batch,
            cfg.precision,
            report.table(train::StepKind::name)
        )
    };
    emit(&text)
}

/// Writes `text` to standard output. A reader that stops early (`bumpgrad
/// memory | head`) is no error: the table's first lines were what it wanted.
fn emit(text: &str) -> anyhow::Result<()> {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => Ok(()),
        other => other.context("writing to standard output"),
    }
}

/// `memory --max-batch`: the largest batch that fits `--arena-size`.
fn run_max_batch(args: &TrainArgs) -> anyhow::Result<()> {
    if args.arena_size.0.is_none() {
        anyhow::bail!(
            "--max-batch searches within a given arena: pass --arena-size SIZE (e.g. 4GiB), not auto (a measured arena fits any batch)"
        );
    }
    if args.memory_report.is_some() {
        anyhow::bail!(
            "--memory-report draws one batch's plan and --max-batch plans many; drop --memory-report, then draw the batch found with --batch"
        );
    }
    let cfg = args.config();
    let found = train::max_batch(&cfg, &mut |p| {
        eprintln!(
            "bumpgrad: batch {}: {} ({} of {})",
            p.batch,
            if p.fits() { "fits" } else { "does not fit" },
            ByteSize(p.arena_bytes),
            ByteSize(p.capacity_bytes)
        )
    })
    .with_context(|| format!("finding the largest batch for {}", cfg.data_dir.display()))?;
    if let Some(images) = found.capped_by_training_set {
        eprintln!(
            "bumpgrad: the search stopped at the training set's {images} images: no batch may exceed them (--train-limit, --data)"
        );
    }
    if args.json {
        println!("{}", serde_json::to_string(&found).context("encoding the result")?);
    } else {
        println!(
            "bumpgrad memory: {}, precision {}, on {}",
            found.model, found.precision, found.device
        );
        println!(
            "largest batch that fits {}: {} (arena {}: persistent {}, step {}){}",
            ByteSize(found.capacity_bytes),
            found.max_batch,
            ByteSize(found.arena_bytes),
            ByteSize(found.persistent_bytes),
            ByteSize(found.step_bytes),
            if found.capped_by_training_set.is_some() {
                ", the whole training set"
            } else {
                ""
            }
        );
        if let (Some(without), Some(outputs)) = (found.without_recomputation, found.recomputed_outputs) {
            println!(
                "  recomputing {outputs} convolution and block outputs in backward (--memory-budget); without recomputing any: {without}"
            );
        }
    }
    Ok(())
}

fn run_models(args: &ModelsArgs) -> anyhow::Result<()> {
    let set =
        bumpgrad::data::ImageSet::open(&args.data).with_context(|| format!("reading the data set in {}", args.data))?;
    let input = bumpgrad::nn::Input {
        example: set.example(),
        classes: set.classes,
    };
    println!(
        "parameters for {}'s {} images and {} classes ({}):",
        set.name, input.example, input.classes, args.data
    );
    if set.synthetic {
        println!("synthetic CIFAR-10-shaped data: accuracy means nothing");
    }
    for (name, make) in choices::MODELS {
        let model = make(None).map_err(anyhow::Error::msg)?;
        match bumpgrad::nn::count_params(|pb| model.build(input, pb)) {
            Ok(n) => println!("  {name:<12} {n:>12}"),
            Err(why) => println!("  {name:<12} {:>12}  ({why})", "-"),
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Train(args) => run_train(args),
        Command::Memory(args) => run_memory(args).map(|()| ExitCode::SUCCESS),
        Command::Models(args) => run_models(args).map(|()| ExitCode::SUCCESS),
    };
    match result {
        Ok(code) => code,
        Err(err) => {
            eprintln!("error: {}", hints::line(&err));
            match err.downcast_ref::<bumpgrad::Error>() {
                Some(bumpgrad::Error::Interrupted { .. }) => ExitCode::from(INTERRUPTED),
                _ => ExitCode::FAILURE,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::without_gpus;
    use std::ffi::OsString;

    #[test]
    fn the_ranks_command_line_is_the_launchers_without_gpus() {
        let args = |a: &[&str]| a.iter().map(OsString::from).collect::<Vec<_>>();
        let given = args(&["train", "--gpus", "2", "--batch", "50", "--gpus=4", "--json"]);
        assert_eq!(
            without_gpus(given.into_iter()),
            args(&["train", "--batch", "50", "--json"])
        );
    }
}
