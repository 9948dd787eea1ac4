//! The `bumpgrad` command: parses flags, calls the library, prints.

mod args;
mod choices;
mod curves;
mod hints;
mod inspect;
mod progress;
mod resume;

use anyhow::Context;
use args::{report_unwritable, MemoryArgs, ModelsArgs, TrainArgs};
use bumpgrad::backend::DeviceRequest;
use bumpgrad::distributed::env::{env_var, token_from};
use bumpgrad::distributed::launcher::{self, LaunchOptions};
use bumpgrad::distributed::rank::{run_rank as run_as_rank, RankEnd, RankFailure};
use bumpgrad::distributed::rendezvous::RendezvousConfig;
use bumpgrad::distributed::token::Token;
use bumpgrad::distributed::{DataParallel, World};
use bumpgrad::memory::ByteSize;
use bumpgrad::train::{self, Hooks, Observer, TrainConfig};
use clap::{Parser, Subcommand};
use std::ffi::OsString;
use std::process::ExitCode;
use std::sync::atomic::{AtomicBool, Ordering};
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
    /// Evaluate a checkpoint on a test split: accuracy, loss, each class's accuracy and the
    /// confusion matrix.
    Eval(inspect::EvalArgs),
    /// Classify images with a checkpoint: the most probable classes of each.
    Predict(inspect::PredictArgs),
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

fn run_train(args: &TrainArgs) -> anyhow::Result<ExitCode> {
    args.check()?;
    warn_threads(args.threads);
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
    let mut printer =
        progress::Printer::new(args.json, args.memory_report.clone()).with_curves(curves::Curves::new(&cfg));
    catch_signals();
    note_budget_planning(&cfg);
    let trained = train::train(&cfg, Hooks::new(&mut printer).stop_on(&STOP));
    // Ctrl-C and a failed epoch too: the epochs done so far are drawn.
    printer.finish_curves();
    trained.map_err(|e| on_data(e, &cfg.run.data_dir))?;
    if args.profile && !printer.printed_a_profile() {
        printer.note(&format!(
            "--profile printed nothing: it times training step {} of the run (a resumed run counts from its first start), and this process did not run that step; train on more data, a smaller --batch or more --epochs, from the start",
            train::PROFILED_STEP + 1
        ));
    }
    Ok(ExitCode::SUCCESS)
}

/// A training error, naming the data only where the data is what failed
/// (an arena, a setting or a checkpoint has nothing to do with its path).
fn on_data(err: bumpgrad::Error, data: &std::path::Path) -> anyhow::Error {
    let is_data = matches!(err, bumpgrad::Error::Data(_));
    let err = anyhow::Error::new(err);
    if is_data {
        err.context(format!("training on {}", data.display()))
    } else {
        err
    }
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
    if matches!(cfg.device.request, DeviceRequest::Cpu) {
        anyhow::bail!("rank {rank}: data-parallel training runs on GPUs (through NCCL); drop --device cpu");
    }
    cfg.device.request = DeviceRequest::Cuda;
    cfg.run.data_parallel = Some(DataParallel {
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
    let mut printer = progress::Printer::new(args.json, args.memory_report.clone()).for_rank(rank);
    // Until the group has formed, an interrupt simply ends the process.
    let ended = run_as_rank(
        &rv,
        Duration::from_secs(args.collective_timeout),
        &mut |line| eprintln!("bumpgrad: rank {rank}: {line}"),
        move |why| eprintln!("error: rank {rank} of {size}: {why}"),
        |join, progress| {
            catch_signals();
            let hooks = Hooks::new(&mut printer)
                .stop_on(&STOP)
                .count_steps(progress)
                .as_rank(join);
            train::train(&cfg, hooks)
        },
    );
    match ended {
        Ok(RankEnd::Trained) => Ok(ExitCode::SUCCESS),
        Ok(end @ RankEnd::StoppedWithOthers { epoch, step }) => {
            eprintln!("bumpgrad: rank {rank} of {size} stopped with the others after step {step} of epoch {epoch}");
            Ok(ExitCode::from(end.exit_code()))
        }
        Err(RankFailure::Joining(e)) => {
            Err(e).with_context(|| format!("rank {rank} of {size} joining the others at {}", rv.addr))
        }
        Err(RankFailure::Training(e)) => {
            let data = args.data.to_string();
            Err(e).with_context(|| format!("rank {rank} of {size} training on {data}"))
        }
    }
}

/// Under a budget, what to recompute is solved for before the first step:
/// a fraction of a second for a small network, tens of seconds for a
/// ResNet-50. Said first, so that a quiet start is not taken for a hang.
fn note_budget_planning(cfg: &TrainConfig) {
    if let Some(budget) = cfg.memory.memory_budget {
        eprintln!(
            "bumpgrad: choosing what to recompute to fit the memory budget of {} (tens of seconds for a large network; past {} s the cheapest plan found by then)",
            ByteSize(budget),
            train::SEARCH_SECONDS
        );
    }
}

/// Flags only a training run acts on: `memory` trains nothing, so taking
/// one would look as though it had been honoured.
const TRAIN_ONLY: &[&str] = &[
    "--epochs",
    "--resume",
    "--checkpoint-dir",
    "--keep-checkpoints",
    "--profile",
];

/// Refuses the first flag of `args` that only `train` acts on.
fn refuse_train_only(args: impl Iterator<Item = OsString>) -> anyhow::Result<()> {
    for arg in args {
        let Some(arg) = arg.to_str() else { continue };
        let flag = arg.split('=').next().unwrap_or(arg);
        if TRAIN_ONLY.contains(&flag) {
            anyhow::bail!("{flag} is a flag of `bumpgrad train`; `memory` plans one step of each kind and trains nothing, so drop {flag}");
        }
    }
    Ok(())
}

/// `--threads` above the cores only adds threads that wait for a core
/// (and slows the step's barriers): said, not refused.
fn warn_threads(threads: usize) {
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    if cores > 0 && threads > cores {
        eprintln!(
            "bumpgrad: warning: --threads {threads} is more than this machine's {cores} cores; the extra threads only wait for a core (pass --threads {cores}, or 0 for every core)"
        );
    }
}

fn run_memory(memory: &MemoryArgs) -> anyhow::Result<()> {
    let args = &memory.train;
    refuse_train_only(std::env::args_os().skip(2))?;
    args.check()?;
    warn_threads(args.threads);
    if memory.max_batch {
        return run_max_batch(args);
    }
    let cfg = args.config();
    note_budget_planning(&cfg);
    let (report, device) =
        train::memory_report(&cfg).with_context(|| format!("planning memory for {}", cfg.run.data_dir.display()))?;
    if let Some(path) = &args.memory_report {
        let title = format!(
            "bumpgrad step memory: {}, batch {}, {device}",
            cfg.run.model.name(),
            cfg.run.batch
        );
        std::fs::write(path, report.svg(&title)).map_err(|e| report_unwritable(path, e))?;
        eprintln!("bumpgrad: wrote the step's memory timeline to {}", path.display());
    }
    let text = if args.json {
        serde_json::to_string(&report).context("encoding the report")? + "\n"
    } else {
        // The library names no flags: the way out of the default's
        // recomputation is said here.
        let keep = match report.recomputed.as_ref().map(|r| r.reason) {
            Some(bumpgrad::memory::RecomputeReason::Cheap) => {
                "(block outputs are recomputed by default, below; --recompute none keeps them)\n"
            }
            Some(bumpgrad::memory::RecomputeReason::Lean) => {
                "(outputs are recomputed by default for a smaller step, below; --recompute cheap recomputes fewer, none keeps them)\n"
            }
            _ => "",
        };
        format!(
            "bumpgrad memory: {}, batch {}, precision {}, on {device}\n{keep}{}",
            cfg.run.model.name(),
            cfg.run.batch,
            cfg.device.precision,
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
    .with_context(|| format!("finding the largest batch for {}", cfg.run.data_dir.display()))?;
    // What stopped the search, if the data did, and the flags that change
    // how many a batch of it may hold.
    let (stopped, flags, whole) = match found.batch_holds {
        "streams" => (
            "streams, as many as the text's splits hold a window for",
            "--seq-len, --data",
            "every stream the text holds",
        ),
        "sentences" => ("sentences of the training split", "--data", "the whole training split"),
        _ => (
            "images of the training set",
            "--train-limit, --data",
            "the whole training set",
        ),
    };
    if let Some(most) = found.capped_by_training_set {
        eprintln!("bumpgrad: the search stopped at the {most} {stopped}: no batch may exceed them ({flags})");
    }
    if args.json {
        progress::stdout_line(&serde_json::to_string(&found).context("encoding the result")?);
    } else {
        progress::stdout_line(&format!(
            "bumpgrad memory: {}, precision {}, on {}",
            found.model, found.precision, found.device
        ));
        progress::stdout_line(&format!(
            "largest batch that fits {}: {} (arena {}: persistent {}, step {}){}",
            ByteSize(found.capacity_bytes),
            found.max_batch,
            ByteSize(found.arena_bytes),
            ByteSize(found.persistent_bytes),
            ByteSize(found.step_bytes),
            match found.capped_by_training_set {
                Some(_) => format!(", {whole}"),
                None => String::new(),
            }
        ));
        if let (Some(without), Some(outputs)) = (found.without_recomputation, found.recomputed_outputs) {
            let why = match cfg.memory.memory_budget {
                Some(_) => "to fit --memory-budget",
                None => "by default, block outputs made again without a multiply-add; --recompute none keeps them",
            };
            progress::stdout_line(&format!(
                "  recomputing {outputs} convolution and block outputs in backward ({why}); without recomputing any: {without}"
            ));
        }
    }
    Ok(())
}

fn run_models(args: &ModelsArgs) -> anyhow::Result<()> {
    // Read as `train` reads it, so the counts are those of the network
    // training would build.
    let options = bumpgrad::data::ImageOptions {
        size: args.image_size,
        ..Default::default()
    };
    let set = bumpgrad::data::ImageSet::open_with(&args.data, &options)
        .with_context(|| format!("reading the data set in {}", args.data))?;
    let input = bumpgrad::nn::Input {
        example: set.example(),
        classes: set.classes,
    };
    progress::stdout_line(&format!(
        "parameters for {}'s {} images and {} classes ({}){}:",
        set.name,
        input.example,
        input.classes,
        args.data,
        match args.width_mult {
            Some(f) => format!(", widths scaled by {f}"),
            None => String::new(),
        }
    ));
    if set.synthetic {
        progress::stdout_line("synthetic CIFAR-10-shaped data: accuracy means nothing");
    }
    let flags = choices::ModelFlags {
        width_mult: args.width_mult,
        ..Default::default()
    };
    for (name, make) in choices::MODELS {
        // A model the flag does not size (the MNIST CNN, the text models)
        // is counted at its own widths, and says so.
        let (model, unscaled) = match make(&flags) {
            Ok(model) => (model, false),
            Err(_) => (make(&Default::default()).map_err(anyhow::Error::msg)?, true),
        };
        let note = match unscaled {
            true => "  (fixed widths: --width-mult does not scale it)",
            false => "",
        };
        if model.reads() != bumpgrad::nn::Reads::Pixels {
            progress::stdout_line(&format!(
                "  {name:<12} {:>12}  (reads text: count it with `train --data` a text file)",
                "-"
            ));
            continue;
        }
        match bumpgrad::nn::count_params(|pb| model.build(input, pb)) {
            Ok(n) => progress::stdout_line(&format!("  {name:<12} {n:>12}{note}")),
            Err(why) => progress::stdout_line(&format!("  {name:<12} {:>12}  ({why})", "-")),
        }
    }
    Ok(())
}

fn main() -> ExitCode {
    let raw: Vec<OsString> = std::env::args_os().collect();
    let mut cli = Cli::parse_from(&raw);
    let mut line = raw;
    if let Command::Train(TrainArgs { resume: Some(dir), .. }) = &cli.command {
        match resume::restored_command_line(dir, &line) {
            Ok(Some(restored)) => {
                cli = Cli::parse_from(&restored);
                line = restored;
            }
            Ok(None) => {}
            Err(err) => {
                eprintln!("error: {err:#}");
                return ExitCode::FAILURE;
            }
        }
    }
    if let Command::Train(args) = &mut cli.command {
        args.command_line = resume::recorded(&resume::train_words(&line));
    }
    let result = match &cli.command {
        Command::Train(args) => run_train(args),
        Command::Memory(args) => run_memory(args).map(|()| ExitCode::SUCCESS),
        Command::Models(args) => run_models(args).map(|()| ExitCode::SUCCESS),
        Command::Eval(args) => inspect::run_eval(args).map(|()| ExitCode::SUCCESS),
        Command::Predict(args) => inspect::run_predict(args).map(|()| ExitCode::SUCCESS),
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
