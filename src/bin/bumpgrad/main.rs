//! The `bumpgrad` command: parses flags, calls the library, prints.

mod progress;

use anyhow::Context;
use bumpgrad::backend::DeviceRequest;
use bumpgrad::memory::ByteSize;
use bumpgrad::train::{self, TrainConfig};
use clap::{Parser, Subcommand, ValueEnum};
use std::path::PathBuf;
use std::process::ExitCode;

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
    /// Train Lantern's MNIST CNN and report loss, test accuracy and memory per epoch.
    #[command(args_override_self = true)]
    Train(TrainArgs),
}

#[derive(Clone, Copy, ValueEnum)]
enum DeviceArg {
    /// The GPU when one is usable, else the CPU.
    Auto,
    Cpu,
    Cuda,
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
    #[arg(long, default_value_t = 4)]
    epochs: usize,
    /// Examples per step (training and evaluation).
    #[arg(long, default_value_t = 100)]
    batch: usize,
    /// SGD learning rate.
    #[arg(long, default_value_t = 0.05, allow_negative_numbers = true)]
    lr: f32,
    /// SGD momentum, in [0, 1).
    #[arg(long, default_value_t = 0.0, allow_negative_numbers = true)]
    momentum: f32,
    /// Seeds the initial weights, the epoch order and dropout.
    #[arg(long, default_value_t = 42)]
    seed: u64,
    /// Directory holding the four MNIST IDX files (gzip or raw).
    #[arg(long, default_value = "data/mnist")]
    data: PathBuf,
    /// Arena size (64MiB, 2GiB, ...), or `auto` to measure exactly what the run needs.
    #[arg(long, default_value = "auto", value_parser = parse_arena_size)]
    arena_size: ArenaSize,
    /// CPU worker threads; 0 uses every core.
    #[arg(long, default_value_t = 0)]
    threads: usize,
    /// Train on the first N training images only.
    #[arg(long)]
    train_limit: Option<usize>,
    /// Evaluate on the first N test images only.
    #[arg(long)]
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
    /// Print one JSON object per epoch on stdout; human text goes to stderr.
    #[arg(long)]
    json: bool,
}

#[derive(Clone, Copy)]
struct ArenaSize(Option<usize>);

fn parse_arena_size(s: &str) -> Result<ArenaSize, String> {
    if s.eq_ignore_ascii_case("auto") {
        return Ok(ArenaSize(None));
    }
    s.parse::<ByteSize>()
        .map(|b| ArenaSize(Some(b.0)))
        .map_err(|e| e.to_string())
}

impl TrainArgs {
    fn config(&self) -> TrainConfig {
        TrainConfig {
            device: match self.device {
                DeviceArg::Auto => DeviceRequest::Auto,
                DeviceArg::Cpu => DeviceRequest::Cpu,
                DeviceArg::Cuda => DeviceRequest::Cuda,
            },
            epochs: self.epochs,
            batch: self.batch,
            lr: self.lr,
            momentum: self.momentum,
            seed: self.seed,
            data_dir: self.data.clone(),
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
        }
    }
}

fn run_train(args: &TrainArgs) -> anyhow::Result<()> {
    let cfg = args.config();
    let mut printer = progress::Printer::new(args.json);
    train::train(&cfg, &mut printer).with_context(|| format!("training on {}", cfg.data_dir.display()))?;
    Ok(())
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Train(args) => run_train(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}
