//! The `bumpgrad` binary as a user meets it: JSON on stdout, and a clear
//! message with a non-zero status for every bad input, never a panic.

use std::io::BufRead;
use std::path::Path;
use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

fn bumpgrad(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bumpgrad"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .expect("run bumpgrad")
}

/// A small CPU run that writes no periodic checkpoints (tests run at once
/// and must not share a checkpoint directory).
const QUICK: [&str; 10] = [
    "--train-limit",
    "300",
    "--test-limit",
    "100",
    "--threads",
    "2",
    "--device",
    "cpu",
    "--checkpoint-every",
    "off",
];

fn train_args<'a>(extra: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec!["train"];
    args.extend_from_slice(&QUICK);
    args.extend_from_slice(extra);
    args
}

fn train(extra: &[&str]) -> Output {
    bumpgrad(&train_args(extra))
}

#[test]
fn json_prints_one_object_per_epoch() {
    // How the GPU chooses its convolutions is no matter on the CPU: taken, and
    // no cuDNN line printed.
    let out = train(&["--epochs", "2", "--json", "--conv-algos", "heuristic"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!String::from_utf8_lossy(&out.stderr).contains("cuDNN"));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    for (i, epoch) in lines.iter().enumerate() {
        assert_eq!(epoch["epoch"], i + 1);
        assert_eq!(epoch["precision"], "fp32", "the default precision, said in every epoch");
        assert!(epoch["train_loss"].as_f64().unwrap() > 0.0);
        assert!((0.0..=1.0).contains(&epoch["test_accuracy"].as_f64().unwrap()));
        assert!(epoch["seconds"].as_f64().unwrap() > 0.0);
        for key in ["capacity_bytes", "persistent_bytes", "step_high_water_bytes"] {
            assert!(epoch["arena"][key].as_u64().unwrap() > 0, "{key}");
        }
    }
    assert_eq!(
        lines[0]["arena"]["step_high_water_bytes"],
        lines[1]["arena"]["step_high_water_bytes"]
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("epoch   2"), "human text goes to stderr");
    assert!(
        stderr.contains("bumpgrad: cpu (2 threads), precision fp32, MNIST"),
        "{stderr}"
    );
}

fn fails_with(out: Output, code: i32, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// `bumpgrad` with every GPU hidden (CUDA_VISIBLE_DEVICES set, to
/// nothing): what a machine without one sees, on any machine, so that what
/// needs no GPU is checked on GPU machines too rather than skipped there.
fn bumpgrad_without_gpus(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bumpgrad"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CUDA_VISIBLE_DEVICES", "")
        .args(args)
        .output()
        .expect("run bumpgrad")
}

#[test]
fn cuda_without_a_gpu_is_a_clear_error() {
    let train = |extra: &[&str]| bumpgrad_without_gpus(&train_args(extra));
    fails_with(train(&["--device", "cuda"]), 1, "or pass --device cpu");
    // `auto` falls back to the CPU, which cannot do what was asked of it.
    fails_with(
        train(&["--device", "auto", "--precision", "tf32"]),
        1,
        "the CPU computes in fp32 only; TF32 runs on a GPU's tensor cores (the device was chosen automatically: no usable GPU",
    );
    fails_with(
        train(&["--device", "auto", "--precision", "tf32"]),
        1,
        "; pass --precision fp32, or train on the GPU",
    );
    fails_with(
        train(&["--device", "auto", "--precision", "bf16"]),
        1,
        "bf16 mixed precision runs on a GPU's tensor cores (the CPU backend has no bf16 kernels) (the device was chosen automatically: no usable GPU",
    );
    // Counted before any rank starts, not found out by a failing rank.
    let counted = bumpgrad_without_gpus(&[
        "train",
        "--gpus",
        "2",
        "--train-limit",
        "300",
        "--checkpoint-every",
        "off",
    ]);
    fails_with(counted.clone(), 1, "--gpus 2 needs 2 GPUs, but none is usable");
    let stderr = String::from_utf8_lossy(&counted.stderr);
    assert!(!stderr.contains("rank"), "no rank was started: {stderr}");
}

#[test]
fn bad_settings_are_refused_with_what_to_pass() {
    let garbage = std::env::temp_dir().join(format!("bumpgrad-cli-garbage-{}", std::process::id()));
    std::fs::create_dir_all(&garbage).unwrap();
    std::fs::write(garbage.join("ckpt-000000000010.safetensors"), b"not a checkpoint").unwrap();
    let garbage = garbage.to_str().unwrap().to_string();
    // A path that can be written, for a row whose flags clash instead.
    let report_ok = std::env::temp_dir().join(format!("bumpgrad-cli-report-{}.svg", std::process::id()));
    let report_ok = report_ok.to_str().unwrap();
    // (flags, exit status, what the message must say: the remedy the README
    // promises, "Errors say what to do"); 2 is clap's status for a flag it
    // cannot parse, 1 ours for a setting that cannot train.
    let table: &[(&[&str], i32, &str)] = &[
        (&["--batch", "0"], 1, "the batch must be at least 1; pass --batch 1"),
        (
            &["--tree-batching", "levels"],
            1,
            "--tree-batching says how tree-lstm runs a batch of trees; mnist-cnn reads no trees, so drop it",
        ),
        (&["--model", "tree-lstm", "--layers", "2"], 1, "tree-lstm is one Tree-LSTM, sized by --embed and --hidden"),
        (
            &["--embeddings", "Cargo.toml"],
            1,
            "--embeddings starts a model's word embedding, and mnist-cnn has none (sst-lstm and tree-lstm do); drop it",
        ),
        (
            &["--model", "tree-lstm", "--embeddings", "no-such-vectors.txt"],
            1,
            "--embeddings no-such-vectors.txt: no such file; pass a file of word vectors",
        ),
        (
            &["--model", "tree-lstm", "--freeze-embeddings"],
            1,
            "--freeze-embeddings keeps pretrained word vectors fixed; pass them with --embeddings FILE",
        ),
        (&["--batch", "-5"], 2, "'--batch <BATCH>': expected a whole number"),
        // Once aborted the process sizing a 4 TB host buffer.
        (
            &["--batch", "99999999999"],
            1,
            "a batch of 99999999999 is larger than the 300 training images; pass --batch 300 or less",
        ),
        (
            &["--lr", "-1"],
            1,
            "must be a positive number, got -1; pass --lr a positive number",
        ),
        (
            &["--lr", "nan"],
            1,
            "must be a positive number, got NaN; pass --lr a positive number",
        ),
        (
            &["--epochs", "0"],
            1,
            "the number of epochs must be at least 1; pass --epochs 1",
        ),
        (&["--momentum", "1.5"], 1, "--momentum must be in [0, 1)"),
        (&["--nesterov"], 1, "--nesterov needs a --momentum above 0"),
        (&["--weight-decay", "-1"], 1, "--weight-decay must be 0 or more"),
        (
            &["--optimizer", "adamw", "--momentum", "0.9"],
            1,
            "--momentum and --nesterov are SGD's",
        ),
        (
            &["--betas", "0.9,0.999"],
            1,
            "--betas and --eps are AdamW's (--eps Adagrad's too); pass --optimizer adamw or adagrad",
        ),
        (
            &["--lr-decay", "0.1"],
            1,
            "--lr-decay and --initial-accumulator are Adagrad's; pass --optimizer adagrad",
        ),
        (
            &["--optimizer", "adamw", "--initial-accumulator", "0.1"],
            1,
            "--lr-decay and --initial-accumulator are Adagrad's",
        ),
        (
            &["--optimizer", "adagrad", "--momentum", "0.9"],
            1,
            "--momentum, --nesterov and --betas are SGD's and AdamW's; Adagrad takes --lr-decay",
        ),
        (&["--optimizer", "adagrad", "--lr-decay", "-1"], 1, "--lr-decay must be 0 or more, got -1"),
        (
            &["--optimizer", "adagrad", "--initial-accumulator", "inf"],
            1,
            "--initial-accumulator must be 0 or more, got inf",
        ),
        (&["--optimizer", "adagrad", "--eps", "0"], 1, "--eps must be above 0, got 0"),
        (&["--clip-norm", "0"], 1, "--clip-norm must be above 0, got 0"),
        (&["--clip-norm", "nan"], 1, "--clip-norm must be above 0, got NaN"),
        (&["--optimizer", "adamw", "--betas", "0.9"], 2, "write e.g. 0.9,0.999"),
        (
            &["--optimizer", "adamw", "--betas", "0.9,1.5"],
            1,
            "--betas must both be in [0, 1)",
        ),
        (&["--optimizer", "adamw", "--eps", "0"], 1, "--eps must be above 0"),
        (&["--optimizer", "lion"], 2, "[possible values: sgd, adamw, adagrad]"),
        (
            &["--schedule", "cosinus"],
            2,
            "unknown schedule 'cosinus'; expected constant",
        ),
        (&["--schedule", "step:0,0.1"], 2, "step:EPOCHS,GAMMA"),
        (&["--warmup-epochs", "-1"], 1, "--warmup-epochs must be 0 or more"),
        (
            &["--label-smoothing", "1"],
            1,
            "the label smoothing must be in [0, 1), got 1; pass --label-smoothing a value in [0, 1) such as 0.1",
        ),
        (
            &["--model", "resnet9000"],
            2,
            "unknown model \"resnet9000\"; the models are mnist-cnn",
        ),
        (
            &["--model", "resnet18", "--width-mult", "-0.5"],
            2,
            "the width multiplier must be above 0, got -0.5",
        ),
        (
            &["--width-mult", "0.5"],
            1,
            "--width-mult scales resnet18, resnet50 and squeezenet; mnist-cnn has fixed widths, so drop it",
        ),
        (&["--arena-size", "lots"], 2, "(examples: 64MiB, 2GiB"),
        (
            &["--arena-size", "1KiB"],
            1,
            "would fit (pass --arena-size 5MiB or more)",
        ),
        (&["--device", "tpu"], 2, "[possible values: auto, cpu, cuda]"),
        (
            &["--precision", "tf32"],
            1,
            "the CPU computes in fp32 only; TF32 runs on a GPU's tensor cores; pass --precision fp32, or train on the GPU",
        ),
        (
            &["--precision", "bf16"],
            1,
            "the CPU computes in fp32 only; bf16 mixed precision runs on a GPU's tensor cores (the CPU backend has no bf16 kernels); pass --precision fp32, or train on the GPU",
        ),
        (&["--precision", "bogus"], 2, "[possible values: fp32, tf32, bf16]"),
        (&["--conv-algos", "fastest"], 2, "[possible values: timed, heuristic]"),
        (&["--graph", "on"], 1, "pass --graph off or --device cuda"),
        (
            &["--train-limit", "0"],
            1,
            "limit must be at least 1; pass --train-limit 1",
        ),
        (
            &["--test-limit", "0"],
            1,
            "limit must be at least 1; pass --test-limit 1",
        ),
        (
            &["--data", "/nonexistent/mnist"],
            1,
            "download MNIST there or point --data at it",
        ),
        (
            &["--data", "Cargo.toml"],
            1,
            "the model mnist-cnn reads images, but the data is a text corpus and its task, language model, feeds token ids: it needs a model of token ids (a language model); pass --model char-lstm or char-rnn for a text corpus",
        ),
        (
            &["--data", "data/sst"],
            1,
            "the model mnist-cnn reads images, but the data is a treebank of sentences and its task, sentence classification, feeds sentences of token ids: it needs a model of sentences (a sentence classifier); pass --model char-lstm or char-rnn for a text corpus, sst-lstm or tree-lstm for a treebank, or mnist-cnn",
        ),
        (
            &["--model", "sst-lstm"],
            1,
            "the model sst-lstm reads sentences of token ids, but the data is an image data set",
        ),
        (
            &["--model", "sst-lstm", "--data", "data/sst", "--classes", "3"],
            1,
            "not 3; pass --classes 5 or 2",
        ),
        (
            &["--model", "sst-lstm", "--data", "data/sst", "--buckets", "0"],
            1,
            "not 0; pass --buckets 8",
        ),
        (&["--checkpoint-every", "0"], 2, "at least 1 (500steps, 1epoch)"),
        (
            &["--checkpoint-every", "5fortnights"],
            2,
            "write e.g. 500steps or 2epochs",
        ),
        (
            &["--keep-checkpoints", "0"],
            1,
            "checkpoints kept must be at least 1; pass --keep-checkpoints 1",
        ),
        (
            &["--resume", "/nonexistent/ckpts"],
            1,
            "start without resuming; it is the directory given with --resume",
        ),
        (
            &["--resume", garbage.as_str()],
            1,
            "restore one from a backup, or move them away to start from scratch",
        ),
        // Unwritable even for root, who passes every permission check: a
        // path under a regular file, and /proc. Refused before training,
        // though these runs (--checkpoint-every off) would write only when
        // stopped by a signal: that checkpoint must not be the first to know.
        (
            &["--checkpoint-dir", "Cargo.toml/sub"],
            1,
            "pass --checkpoint-dir a directory you can write to",
        ),
        (
            &["--checkpoint-dir", "/proc"],
            1,
            "pass --checkpoint-dir a directory you can write to",
        ),
        (
            &["--memory-report", "Cargo.toml/timeline.svg"],
            1,
            "pass --memory-report a file in a directory you can write to",
        ),
        (
            &["--memory-report", report_ok, "--memory-plan", "off"],
            1,
            "--memory-plan off turns off; drop one of the two",
        ),
        // Data-parallel settings are refused on a run alone too: the same
        // command line with --gpus would fail only once the GPUs were busy.
        (&["--bucket-kib", "0"], 1, "--bucket-kib must be at least 1"),
        (
            &["--rendezvous-timeout", "0"],
            1,
            "--rendezvous-timeout must be at least 1 second",
        ),
        (
            &["--collective-timeout", "0"],
            1,
            "--collective-timeout must be at least 1 second",
        ),
        (&["--gpus", "0"], 1, "--gpus must be at least 1"),
        (&["--gpus", "2"], 1, "drop --device cpu"),
        (
            &["--rendezvous-token-file", "/nonexistent/token"],
            1,
            "--rendezvous-token-file: cannot use /nonexistent/token as the rendezvous token: cannot open it",
        ),
        (
            &["--rendezvous-token-file", "/dev/null"],
            1,
            "it is empty; put one line of secret text in it",
        ),
    ];
    for (flags, status, needle) in table {
        refused(&train_args(flags), *status, needle);
    }
    let _ = std::fs::remove_dir_all(&garbage);
    let _ = std::fs::remove_file(report_ok);
}

/// `bumpgrad memory` takes `train`'s flags and refuses what `train` refuses,
/// though it never trains: a plan for settings that cannot run would mislead.
#[test]
fn memory_refuses_bad_flags_as_train_does() {
    let table: &[(&[&str], i32, &str)] = &[
        (&["--batch", "0"], 1, "the batch must be at least 1; pass --batch 1"),
        (
            &["--threads", "-2"],
            2,
            "'--threads <THREADS>': expected a whole number",
        ),
        (&["--bach", "100"], 2, "a similar argument exists: '--batch'"),
        (&["--arena-size", "lots"], 2, "(examples: 64MiB, 2GiB"),
        (
            &["--arena-size", "3MiB"],
            1,
            "would fit (pass --arena-size 5MiB or more)",
        ),
        (&["--graph", "on"], 1, "pass --graph off or --device cuda"),
        (
            &["--precision", "tf32"],
            1,
            "the CPU computes in fp32 only; TF32 runs on a GPU's tensor cores; pass --precision fp32, or train on the GPU",
        ),
        (
            &["--precision", "bf16"],
            1,
            "the CPU computes in fp32 only; bf16 mixed precision runs on a GPU's tensor cores (the CPU backend has no bf16 kernels); pass --precision fp32, or train on the GPU",
        ),
        (&["--precision", "fp16"], 2, "[possible values: fp32, tf32, bf16]"),
        (
            &["--data", "/nonexistent/mnist"],
            1,
            "download MNIST there or point --data at it",
        ),
        (
            &["--train-limit", "70000"],
            1,
            "pass --train-limit from 1 to 60000, or omit the flag",
        ),
        (
            &["--memory-report", "Cargo.toml/timeline.svg"],
            1,
            "pass --memory-report a file in a directory you can write to",
        ),
        (&["--gpus", "0"], 1, "--gpus must be at least 1"),
        (&["--bucket-kib", "0"], 1, "--bucket-kib must be at least 1"),
    ];
    for (flags, status, needle) in table {
        let mut args = vec!["memory"];
        args.extend_from_slice(&QUICK);
        args.extend_from_slice(flags);
        refused(&args, *status, needle);
    }
}

/// Runs bumpgrad with `args` and checks it is refused the way the README
/// says: `status`, a message holding `needle`, no panic, and nothing trained.
fn refused(args: &[&str], status: i32, needle: &str) {
    let out = bumpgrad(args);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(status), "{args:?}: {stderr}");
    assert!(stderr.contains(needle), "{args:?}: expected {needle:?} in: {stderr}");
    assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    // A cause is said once, inside the message, before what to do.
    assert!(stderr.matches("(os error").count() <= 1, "{args:?}: {stderr}");
    assert!(
        !stdout.contains("epoch "),
        "{args:?} trained before it was refused: {stdout}"
    );
}

#[test]
fn missing_data_names_the_files_and_the_flag() {
    fails_with(train(&["--data", "/nonexistent/mnist"]), 1, "--data");
}

#[test]
fn an_arena_too_small_says_which_size_fits() {
    // Above the persistent region, below the step's planned peak: the
    // message names the buffers alive at the peak.
    fails_with(train(&["--arena-size", "3MiB"]), 1, "arena exhausted");
    fails_with(
        train(&["--arena-size", "3MiB"]),
        1,
        "the largest live step buffers: max-pool input grad",
    );
    fails_with(train(&["--arena-size", "3MiB"]), 1, "pass --arena-size 5MiB");
    // Below the persistent region: the allocation that fails is named.
    fails_with(train(&["--arena-size", "256KiB"]), 1, "train images");
}

#[test]
fn a_train_limit_past_the_data_is_refused() {
    fails_with(
        train(&["--train-limit", "70000"]),
        1,
        "a limit of 70000 training images is out of range: the training set has 60000 — pass --train-limit from 1 to 60000",
    );
}

/// A training run in a child process whose stderr is read line by line as
/// it comes, so that a test waits for what the run says, not for a clock.
/// With `--json` every human line goes to stderr.
struct Run {
    child: Child,
    lines: mpsc::Receiver<String>,
    seen: Vec<String>,
}

impl Run {
    fn start(extra: &[&str]) -> Self {
        let mut child = Command::new(env!("CARGO_BIN_EXE_bumpgrad"))
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args([
                "train",
                "--device",
                "cpu",
                "--threads",
                "2",
                "--test-limit",
                "100",
                "--json",
            ])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start bumpgrad");
        let stderr = std::io::BufReader::new(child.stderr.take().unwrap());
        let (send, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in stderr.lines().map_while(Result::ok) {
                if send.send(line).is_err() {
                    break;
                }
            }
        });
        Self {
            child,
            lines,
            seen: Vec::new(),
        }
    }

    fn stderr(&self) -> String {
        self.seen.join("\n")
    }

    /// Waits for a line holding `needle`; `limit` only keeps a broken run
    /// from hanging the test.
    fn wait_for(&mut self, needle: &str, limit: Duration) {
        let deadline = Instant::now() + limit;
        loop {
            match self
                .lines
                .recv_timeout(deadline.saturating_duration_since(Instant::now()))
            {
                Ok(line) => {
                    let found = line.contains(needle);
                    self.seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(e) => {
                    let _ = self.child.kill();
                    panic!("no line with {needle:?} ({e:?}); stderr so far:\n{}", self.stderr());
                }
            }
        }
    }

    /// Sends `signal` to the run.
    fn signal(&self, signal: libc::c_int) {
        assert_eq!(kill(self.child.id(), signal), 0, "kill({}, {signal})", self.child.id());
    }

    /// Waits for the run to end, at most `limit` (then kills it and fails),
    /// and returns how it ended and all it wrote to stderr.
    fn finish(mut self, limit: Duration) -> (ExitStatus, String) {
        let pid = self.child.id();
        let (send, exited) = mpsc::channel();
        let mut child = self.child;
        std::thread::spawn(move || {
            let _ = send.send(child.wait());
        });
        let status = match exited.recv_timeout(limit) {
            Ok(status) => status.expect("wait for bumpgrad"),
            Err(_) => {
                kill(pid, libc::SIGKILL);
                panic!(
                    "the run was still going {limit:?} later (killed now); stderr:\n{}",
                    self.seen.join("\n")
                );
            }
        };
        // The pipe closes with the process: the rest of stderr is all here.
        self.seen.extend(self.lines.iter());
        (status, self.seen.join("\n"))
    }
}

/// Sends `signal` to process `pid`, a child of this test not yet waited for
/// (so its pid cannot have been reused).
fn kill(pid: u32, signal: libc::c_int) -> libc::c_int {
    let pid = libc::pid_t::try_from(pid).unwrap();
    // SAFETY: kill takes no pointer and has no precondition.
    unsafe { libc::kill(pid, signal) }
}

/// The line the run prints once it is about to train; the signal handlers
/// are installed before it (`catch_signals` runs before the session starts).
const STARTED: &str = "steps per epoch";

/// The files in `dir` (none when it does not exist).
fn files_in(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut names: Vec<String> = entries
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// Stops a run of 600 steps an epoch with `signal` as soon as it trains,
/// and checks what the README promises for Ctrl-C and SIGTERM alike: the
/// current step finishes, a checkpoint is written in the middle of epoch 1
/// (not at its end), status 130 and the line to resume with. Returns the
/// checkpoint directory.
fn a_signal_stops_after_the_step_with_a_checkpoint(signal: libc::c_int, name: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("bumpgrad-cli-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let mut run = Run::start(&[
        "--epochs",
        "50",
        "--checkpoint-dir",
        dir.to_str().unwrap(),
        "--checkpoint-every",
        "off",
    ]);
    run.wait_for(STARTED, Duration::from_secs(120));
    run.signal(signal);
    // One step and one checkpoint: milliseconds; the bound is a guard only.
    let (status, stderr) = run.finish(Duration::from_secs(60));
    assert_eq!(status.code(), Some(130), "{status:?}: {stderr}");
    assert!(
        stderr.contains("stopping after this step to write a checkpoint"),
        "{stderr}"
    );
    let resume = format!("continue with --resume {}", dir.display());
    assert!(
        stderr.contains("stopped by a signal") && stderr.contains(&resume),
        "{stderr}"
    );
    let latest = bumpgrad::checkpoint::latest_valid(&dir).unwrap().expect("a checkpoint");
    let ckpt = &latest.checkpoint;
    let in_epoch: u64 = ckpt.extra["step_in_epoch"].parse().unwrap();
    assert_eq!(ckpt.epoch, 0, "stopped after a step, not at the end of an epoch");
    assert!(
        (1..600).contains(&in_epoch) && ckpt.step == in_epoch,
        "step {} of the run, {in_epoch} of its epoch",
        ckpt.step
    );
    assert_eq!(
        files_in(&dir),
        [bumpgrad::checkpoint::file_name(ckpt.step)],
        "one checkpoint, nothing else"
    );
    dir
}

#[test]
fn ctrl_c_finishes_the_step_writes_a_checkpoint_and_resume_continues() {
    let dir = a_signal_stops_after_the_step_with_a_checkpoint(libc::SIGINT, "sigint");
    let d = dir.to_str().unwrap();
    let out = bumpgrad(&[
        "train",
        "--device",
        "cpu",
        "--threads",
        "2",
        "--test-limit",
        "100",
        "--epochs",
        "1",
        "--resume",
        d,
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("resuming from"), "{stdout}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn sigterm_finishes_the_step_and_writes_a_checkpoint_as_ctrl_c_does() {
    let dir = a_signal_stops_after_the_step_with_a_checkpoint(libc::SIGTERM, "sigterm");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn a_second_ctrl_c_exits_at_once_and_writes_nothing() {
    let dir = std::env::temp_dir().join(format!("bumpgrad-cli-sigint2-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    // Steps of 10,000 images (about half a second each here), so the second
    // signal, sent as soon as the run has acknowledged the first, lands
    // while the step the first one waits for is still running.
    let mut run = Run::start(&[
        "--epochs",
        "50",
        "--batch",
        "10000",
        "--train-limit",
        "20000",
        "--checkpoint-dir",
        dir.to_str().unwrap(),
        "--checkpoint-every",
        "off",
    ]);
    run.wait_for(STARTED, Duration::from_secs(120));
    let before = files_in(&dir);
    run.signal(libc::SIGINT);
    run.wait_for("interrupt again to quit at once", Duration::from_secs(60));
    run.signal(libc::SIGINT);
    // "At once": no step to finish, no checkpoint to write. A run that went
    // on would be stopped here and fail the test. Measured on a 2-core
    // machine under load (two busy loops on both cores and four other cargo
    // builds, load average 11): 0.21 to 0.42 s from the second signal to
    // the exit over 8 runs (0.04 to 0.08 s without the busy loops), so 5 s
    // is 12 times the worst.
    let (status, stderr) = run.finish(Duration::from_secs(5));
    assert_eq!(status.code(), Some(130), "{status:?}: {stderr}");
    assert!(
        stderr.contains("second interrupt: exiting now without a checkpoint"),
        "{stderr}"
    );
    // Nothing written, whole or in part: the directory is as it was.
    assert_eq!(files_in(&dir), before, "files in {}: {stderr}", dir.display());
    assert!(before.is_empty(), "{before:?}");
    assert!(
        !stderr.contains("stopped by a signal after step"),
        "the run went on to stop by itself: {stderr}"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn memory_prints_the_plan_as_json_without_training() {
    let out = bumpgrad(&[
        "memory",
        "--device",
        "cpu",
        "--threads",
        "2",
        "--train-limit",
        "300",
        "--test-limit",
        "100",
        "--json",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).expect("one JSON object");
    for key in [
        "arena_bytes",
        "persistent_bytes",
        "plan_peak_bytes",
        "lower_bound_bytes",
        "alignment_waste_bytes",
    ] {
        assert!(report[key].as_u64().is_some_and(|v| v > 0), "{key} in {report}");
    }
    let (peak, bound) = (
        report["plan_peak_bytes"].as_u64().unwrap(),
        report["lower_bound_bytes"].as_u64().unwrap(),
    );
    assert!(peak as f64 <= 1.05 * bound as f64, "{peak} vs {bound}");
    assert_eq!(
        report["arena_bytes"].as_u64().unwrap(),
        report["persistent_bytes"].as_u64().unwrap() + peak.max(report["plans"][1]["peak"].as_u64().unwrap_or(0))
    );
    // Bytes by element type add up to the region's bytes: the persistent
    // region (one buffer after another), and what is alive at the step's
    // peak (its lower bound). An fp32 run keeps no bf16.
    let sum = |key: &str| -> (u64, Vec<String>) {
        let types = report[key].as_array().unwrap_or_else(|| panic!("{key} in {report}"));
        let total = types.iter().map(|t| t["bytes"].as_u64().unwrap()).sum();
        (
            total,
            types
                .iter()
                .map(|t| t["element"].as_str().unwrap().to_string())
                .collect(),
        )
    };
    let (persistent, kinds) = sum("persistent_by_type");
    assert_eq!(persistent, report["persistent_bytes"].as_u64().unwrap(), "{kinds:?}");
    assert!(
        kinds.contains(&"f32".to_string()) && kinds.contains(&"u8".to_string()),
        "{kinds:?}"
    );
    let (live, kinds) = sum("step_peak_by_type");
    assert_eq!(live, bound, "{kinds:?}");
    assert_eq!(kinds[0], "f32", "{kinds:?}");
    assert!(!kinds.contains(&"bf16".to_string()), "{kinds:?}");
}

#[test]
fn models_lists_every_model_with_its_parameter_count() {
    let out = bumpgrad(&["models"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("MNIST's [1, 28, 28] images and 10 classes"), "{text}");
    // 250 + 5,000 + 16,000 + 50 + 500 + 10: conv1, conv2, fc1, fc2.
    let row = text
        .lines()
        .find(|l| l.trim_start().starts_with("mnist-cnn"))
        .expect(&text);
    assert_eq!(row.split_whitespace().collect::<Vec<_>>(), ["mnist-cnn", "21810"]);
    let missing = bumpgrad(&["models", "--data", "/nonexistent/mnist"]);
    assert_eq!(missing.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&missing.stderr).contains("--data"));
}

#[test]
fn adamw_with_a_cosine_schedule_trains() {
    let mut args = vec!["train"];
    args.extend(QUICK);
    args.extend([
        "--epochs",
        "2",
        "--optimizer",
        "adamw",
        "--lr",
        "0.002",
        "--schedule",
        "cosine",
        "--warmup-epochs",
        "0.5",
        "--json",
    ]);
    let out = bumpgrad(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let losses: Vec<f64> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .map(|v| v["train_loss"].as_f64().unwrap())
        .collect();
    assert_eq!(losses.len(), 2);
    assert!(losses[1] < losses[0] && losses[0] < 2.3, "{losses:?}");
}

/// Adagrad as Lantern trained its language models (lr 0.1), its gradients
/// clipped on the device: the JSON carries each epoch's mean norm before
/// the clip, and the line says it.
#[test]
fn adagrad_with_a_clip_trains_and_reports_the_gradients_norm() {
    let mut args = vec!["train"];
    args.extend(QUICK);
    args.extend([
        "--epochs",
        "2",
        "--optimizer",
        "adagrad",
        "--lr",
        "0.02",
        "--lr-decay",
        "0.001",
        "--initial-accumulator",
        "0.1",
        "--clip-norm",
        "1",
        "--json",
    ]);
    let out = bumpgrad(&args);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let epochs: Vec<serde_json::Value> = stdout
        .lines()
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .collect();
    assert_eq!(epochs.len(), 2, "{stdout}");
    let losses: Vec<f64> = epochs.iter().map(|v| v["train_loss"].as_f64().unwrap()).collect();
    assert!(losses[1] < losses[0] && losses[0] < 2.3, "{losses:?}");
    for e in &epochs {
        let norm = e["grad_norm"].as_f64().expect("a clipped run's grad_norm");
        assert!(norm > 0.0 && norm.is_finite(), "{norm}");
    }
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("grad norm "),
        "with --json the line goes to stderr: {stderr}"
    );
}

/// `models --width-mult F` counts the image models as `train --width-mult
/// F` builds them: a ResNet-18 at half width has about a quarter of the
/// parameters (its convolutions' weights scale with both widths); the
/// MNIST CNN, which has fixed widths, is counted as it is and says so.
#[test]
fn models_counts_the_widths_width_mult_gives() {
    let count = |out: &Output, model: &str| -> (u64, String) {
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        let line = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(model))
            .unwrap_or_else(|| panic!("no {model} line: {stdout}"))
            .to_string();
        let n = line.split_whitespace().nth(1).and_then(|n| n.parse().ok());
        (n.unwrap_or_else(|| panic!("no count: {line}")), line)
    };
    let data = ["models", "--data", "synthetic:cifar10:100"];
    let full = bumpgrad(&data);
    let half = bumpgrad(&[&data[..], &["--width-mult", "0.5"]].concat());
    assert!(
        String::from_utf8_lossy(&half.stdout).contains("widths scaled by 0.5"),
        "{}",
        String::from_utf8_lossy(&half.stdout)
    );
    let (r18, _) = count(&full, "resnet18");
    let (r18_half, _) = count(&half, "resnet18");
    let ratio = r18_half as f64 / r18 as f64;
    assert!((0.2..0.3).contains(&ratio), "resnet18: {r18_half} of {r18}");
    let (r50, _) = count(&full, "resnet50");
    assert!(count(&half, "resnet50").0 < r50 / 3);
    let mnist = bumpgrad(&["models", "--width-mult", "0.5"]);
    let (cnn, line) = count(&mnist, "mnist-cnn");
    assert_eq!(cnn, count(&bumpgrad(&["models"]), "mnist-cnn").0);
    assert!(line.contains("fixed widths: --width-mult does not scale it"), "{line}");
    refused(
        &["models", "--width-mult", "-0.5"],
        2,
        "the width multiplier must be above 0, got -0.5",
    );
}

#[test]
fn synthetic_cifar_data_is_made_and_the_model_must_take_its_images() {
    let out = bumpgrad(&["models", "--data", "synthetic:cifar10:100"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(
        stdout.contains("synthetic CIFAR-10's [3, 32, 32] images and 10 classes"),
        "{stdout}"
    );
    assert!(stdout.contains("accuracy means nothing"), "{stdout}");
    // The MNIST CNN takes 1×28×28 images: refused before any training.
    let synthetic = [
        "train",
        "--data",
        "synthetic:cifar10:100",
        "--device",
        "cpu",
        "--checkpoint-every",
        "off",
    ];
    refused(
        &synthetic,
        1,
        "mnist-cnn takes [1, 28, 28] images, and the data set's are [3, 32, 32]",
    );
    refused(
        &["train", "--data", "synthetic:cifar10:0"],
        2,
        "must be a whole number of at least 1",
    );
    refused(
        &["models", "--data", "synthetic:imagenet"],
        2,
        "the synthetic data sets are: cifar10",
    );
}

#[test]
fn augmentation_is_printed_and_a_bad_value_refused() {
    let out = train(&["--epochs", "1", "--augment", "crop4,flip"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("MNIST: 300 training / 100 test images"), "{stdout}");
    assert!(stdout.contains("augment crop4,flip"), "{stdout}");
    for bad in ["crop4,flap", "crop0", "crop"] {
        refused(&train_args(&["--augment", bad]), 2, "--augment");
    }
    refused(
        &train_args(&["--augment", "rotate"]),
        2,
        "expected none, crop4, flip or crop4,flip",
    );
}

#[test]
fn a_crop_wider_than_the_images_is_refused() {
    refused(&train_args(&["--augment", "crop29"]), 1, "crop28 or less");
}

/// `memory --max-batch` on the CPU, as bench/resnet_vs_pytorch.py reads it
/// (the last stdout line's "max_batch"): the batch it reports fits the arena
/// by `memory --batch B` itself, and B + 1 does not, so the search is exact,
/// not merely close.
#[test]
fn memory_max_batch_finds_the_exact_largest_batch_that_fits() {
    let cases: &[&[&str]] = &[
        &["--train-limit", "3000", "--test-limit", "500"],
        &[
            "--model",
            "resnet18",
            "--width-mult",
            "0.125",
            "--data",
            "synthetic:cifar10:2000",
        ],
    ];
    for case in cases {
        let memory = |extra: &[&str]| {
            let mut args = vec!["memory", "--device", "cpu", "--threads", "2", "--arena-size", "64MiB"];
            args.extend_from_slice(case);
            args.extend_from_slice(extra);
            bumpgrad(&args)
        };
        let out = memory(&["--max-batch", "--json"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(0), "{case:?}: {stderr}");
        assert!(
            stderr.contains("bumpgrad: batch 1: fits ("),
            "{case:?}: progress lines: {stderr}"
        );
        assert!(stderr.contains("does not fit ("), "{case:?}: {stderr}");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let found: serde_json::Value = serde_json::from_str(stdout.trim().lines().last().unwrap()).expect("JSON");
        let batch = found["max_batch"].as_u64().expect("max_batch") as usize;
        let arena = found["arena_bytes"].as_u64().unwrap();
        assert!(batch > 1, "{case:?}: {found}");
        assert!(arena <= 64 << 20, "{case:?}: {found}");
        assert_eq!(
            arena,
            found["persistent_bytes"].as_u64().unwrap() + found["step_bytes"].as_u64().unwrap(),
            "{found}"
        );
        assert_eq!(found["precision"], "fp32");
        assert!(found["capped_by_training_set"].is_null(), "{found}");
        let model = if case.contains(&"resnet18") {
            "resnet18"
        } else {
            "mnist-cnn"
        };
        assert_eq!(found["model"], model);
        // B fits, and its arena is the one reported...
        let fits = memory(&["--batch", &batch.to_string(), "--json"]);
        assert_eq!(
            fits.status.code(),
            Some(0),
            "{case:?}: batch {batch}: {}",
            String::from_utf8_lossy(&fits.stderr)
        );
        let plan: serde_json::Value = serde_json::from_slice(&fits.stdout).expect("one JSON object");
        assert_eq!(plan["arena_bytes"].as_u64(), Some(arena), "{case:?}: batch {batch}");
        let header = memory(&["--batch", &batch.to_string()]);
        let header = String::from_utf8_lossy(&header.stdout);
        assert!(
            header.starts_with(&format!(
                "bumpgrad memory: {model}, batch {batch}, precision fp32, on cpu"
            )),
            "{header}"
        );
        // ...and B + 1 does not.
        refused(
            &[
                &[
                    "memory",
                    "--device",
                    "cpu",
                    "--threads",
                    "2",
                    "--arena-size",
                    "64MiB",
                    "--batch",
                ][..],
                &[&(batch + 1).to_string()],
                case,
            ]
            .concat(),
            1,
            "would fit (pass --arena-size 65MiB or more)",
        );
    }
}

/// The search stops at the training set (no batch may exceed it) and says
/// so; a batch of 1 that does not fit names the arena it needs; a measured
/// arena is refused, as is --max-batch on `train`.
#[test]
fn memory_max_batch_is_capped_by_the_training_set_and_refuses_what_it_cannot_search() {
    let args = |extra: &[&'static str]| {
        let mut args = vec![
            "memory",
            "--device",
            "cpu",
            "--threads",
            "2",
            "--model",
            "resnet18",
            "--width-mult",
            "0.125",
            "--data",
            "synthetic:cifar10:100",
            "--max-batch",
        ];
        args.extend_from_slice(extra);
        args
    };
    let out = bumpgrad(&args(&["--arena-size", "1GiB"]));
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "the search stopped at the 100 images of the training set: no batch may exceed them (--train-limit, --data)"
        ),
        "{stderr}"
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("largest batch that fits 1.00 GiB: 100 (arena "),
        "{stdout}"
    );
    assert!(stdout.contains("), the whole training set"), "{stdout}");
    refused(
        &args(&["--arena-size", "1MiB"]),
        1,
        "even a batch of 1 needs an arena of",
    );
    refused(
        &args(&["--arena-size", "1MiB"]),
        1,
        "above the 1.00 MiB given; pass --arena-size 3MiB or more",
    );
    refused(
        &args(&["--arena-size", "auto"]),
        1,
        "--max-batch searches within a given arena: pass --arena-size SIZE",
    );
    refused(&args(&[]), 1, "pass --arena-size SIZE");
    refused(
        &args(&["--arena-size", "1GiB", "--memory-report", "/tmp/never.svg"]),
        1,
        "drop --memory-report",
    );
    refused(
        &args(&["--arena-size", "1GiB", "--precision", "tf32"]),
        1,
        "the CPU computes in fp32 only",
    );
    refused(
        &train_args(&["--max-batch", "--arena-size", "1GiB"]),
        2,
        "unexpected argument '--max-batch'",
    );
}

/// `bumpgrad memory | head`: a reader that closes the pipe before the table
/// is written ends the run quietly and successfully, not with a panic.
#[test]
fn memory_into_a_closed_pipe_is_no_error() {
    use std::process::Stdio;
    let mut child = Command::new(env!("CARGO_BIN_EXE_bumpgrad"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["memory", "--device", "cpu", "--threads", "1"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run bumpgrad");
    // Closed before the plan is made: every write meets a closed pipe.
    drop(child.stdout.take());
    let out = child.wait_with_output().expect("wait");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{:?}: {stderr}", out.status);
    assert!(!stderr.contains("panicked"), "{stderr}");
}

/// A small ResNet-18 on synthetic CIFAR-shaped data: a step with
/// convolution and block outputs to recompute, planned in seconds.
const SMALL_RESNET: [&str; 14] = [
    "--device",
    "cpu",
    "--threads",
    "2",
    "--model",
    "resnet18",
    "--width-mult",
    "0.125",
    "--data",
    "synthetic:cifar10:96",
    "--batch",
    "16",
    "--test-limit",
    "16",
];

fn small_resnet(command: &str, extra: &[&str]) -> Output {
    let mut args = vec![command];
    args.extend_from_slice(&SMALL_RESNET);
    args.extend_from_slice(extra);
    bumpgrad(&args)
}

/// `memory --json`'s report of the small ResNet's step, under `budget`.
fn small_resnet_plan(budget: Option<usize>) -> serde_json::Value {
    let budget = budget.map(|b| b.to_string());
    let mut extra = vec!["--json"];
    extra.extend(budget.iter().flat_map(|b| ["--memory-budget", b.as_str()]));
    let out = small_resnet("memory", &extra);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    serde_json::from_slice(&out.stdout).expect("one JSON object")
}

/// Under a memory budget `--json` carries the plan: `memory`'s report and
/// every epoch line of `train`, beside the step's measured time, name the
/// same outputs recomputed (numbers and kinds), the same chain mode and
/// predicted time, and how the search went; the run's first lines say
/// the predicted time. Without a budget an epoch line carries the
/// default's cheap drops, and with `--recompute none` no plan.
#[test]
fn a_budgets_plan_is_in_the_json_of_memory_and_of_every_epoch() {
    let peak = small_resnet_plan(None)["plan_peak_bytes"].as_u64().unwrap() as usize;
    let budget = peak * 6 / 10;
    let planned = small_resnet_plan(Some(budget));
    let plan = &planned["recomputed"];
    let which: Vec<u64> = plan["which"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    let outputs = plan["outputs"].as_array().expect("each output recomputed");
    assert!(!which.is_empty() && outputs.len() == which.len(), "{plan}");
    for (o, &id) in outputs.iter().zip(&which) {
        assert_eq!(o["id"].as_u64(), Some(id), "{o}");
        let what = o["what"].as_str().unwrap();
        assert!(
            what == "conv2d output" || what == "batch-norm + residual relu output",
            "{what}"
        );
        assert!(
            o["bytes"].as_u64().unwrap() > 0 && o["remade"].as_u64().unwrap() >= 1,
            "{o}"
        );
    }
    let kinds: u64 = plan["kinds"]
        .as_array()
        .unwrap()
        .iter()
        .map(|k| k["dropped"].as_u64().unwrap())
        .sum();
    assert_eq!(kinds, which.len() as u64);
    let chains = plan["chain_mode"].as_str().unwrap();
    assert_eq!(
        chains == "remade for each reader",
        plan["transient_chains"].as_bool().unwrap()
    );
    assert!(chains == "held" || chains == "remade for each reader", "{chains}");
    let predicted = plan["predicted_extra_seconds"].as_f64().unwrap();
    assert!(predicted > 0.0, "{plan}");
    let search = &plan["search"];
    assert_eq!(search["bound_seconds"].as_f64(), Some(60.0), "{search}");
    assert_eq!(search["stopped_at_bound"].as_bool(), Some(false), "{search}");
    assert!(search["plans_weighed"].as_u64().unwrap() >= 1 && search["dry_runs"].as_u64().unwrap() >= 1);

    let budget = budget.to_string();
    let out = small_resnet(
        "train",
        &[
            "--epochs",
            "2",
            "--json",
            "--checkpoint-every",
            "off",
            "--memory-budget",
            &budget,
        ],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "memory: the step recomputes {} of its 28 convolution and block outputs (",
            which.len()
        )) && stderr.contains(&format!("(predicted {:.2} ms more a step)", predicted * 1e3)),
        "{stderr}"
    );
    assert!(stderr.contains("memory: the plan was chosen in"), "{stderr}");
    let lines: Vec<serde_json::Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("JSON"))
        .collect();
    assert_eq!(lines.len(), 2);
    for epoch in &lines {
        let measured = epoch["seconds"].as_f64().unwrap() / epoch["steps"].as_f64().unwrap();
        assert!(
            (epoch["step_seconds"].as_f64().unwrap() - measured).abs() < 1e-12,
            "{epoch}"
        );
        let run = &epoch["recomputed"];
        assert_eq!(run["reason"], "memory-budget", "{run}");
        assert_eq!(
            run["dropped"].as_array(),
            plan["which"].as_array(),
            "train runs what memory planned"
        );
        assert_eq!(run["outputs"], plan["outputs"]);
        assert_eq!(run["chain_mode"], plan["chain_mode"]);
        assert_eq!(run["predicted_extra_seconds"].as_f64(), Some(predicted));
        // No workspaces are timed on the CPU: the whole prediction is the
        // recomputation's.
        assert_eq!(run["workspace_extra_seconds"].as_f64(), Some(0.0));
        assert_eq!(run["predicted_step_extra_seconds"].as_f64(), Some(predicted));
        assert!(run["search"]["dry_runs"].as_u64().unwrap() >= 1, "{run}");
    }
    // Without a budget, the default's cheap drops: `memory`'s, said so,
    // and found with no search...
    let unbudgeted = small_resnet("train", &["--epochs", "1", "--json", "--checkpoint-every", "off"]);
    let stderr = String::from_utf8_lossy(&unbudgeted.stderr);
    assert!(
        stderr.contains("in backward rather than keep them, by default"),
        "{stderr}"
    );
    let epoch: serde_json::Value = serde_json::from_slice(&unbudgeted.stdout).expect("one epoch line");
    let cheap = &epoch["recomputed"];
    assert_eq!(cheap["reason"], "cheap", "{epoch}");
    assert!(cheap["search"].is_null(), "{epoch}");
    let default_plan = small_resnet_plan(None);
    assert_eq!(cheap["dropped"], default_plan["recomputed"]["which"], "{epoch}");
    assert_eq!(default_plan["recomputed"]["reason"], "cheap");
    // ...and with --recompute none, no plan.
    let kept = small_resnet(
        "train",
        &[
            "--epochs",
            "1",
            "--json",
            "--checkpoint-every",
            "off",
            "--recompute",
            "none",
        ],
    );
    let epoch: serde_json::Value = serde_json::from_slice(&kept.stdout).expect("one epoch line");
    assert!(
        epoch["step_seconds"].as_f64().unwrap() > 0.0 && epoch.get("recomputed").is_none(),
        "{epoch}"
    );
}

/// A budget below the least that works is refused with that least; with
/// an arena too small for the budget's step, the arena is the one named
/// to raise. Both before training.
#[test]
fn a_budget_out_of_reach_names_the_least_and_a_small_arena_is_the_one_to_raise() {
    let out = small_resnet("train", &["--memory-budget", "256KiB", "--checkpoint-every", "off"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("no choice holds less than") && stderr.contains("above the budget of 256.00 KiB"),
        "{stderr}"
    );
    let least = stderr
        .split("pass --memory-budget ")
        .nth(1)
        .and_then(|s| s.split("MiB or more").next())
        .expect(&stderr);
    let works = format!("{least}MiB");
    assert!(
        small_resnet("memory", &["--memory-budget", &works]).status.success(),
        "{works}"
    );

    let free = small_resnet_plan(None);
    let (peak, persistent) = (
        free["plan_peak_bytes"].as_u64().unwrap() as usize,
        free["persistent_bytes"].as_u64().unwrap() as usize,
    );
    let budget = (peak * 7 / 10).to_string();
    let arena = (persistent + peak / 2).to_string();
    for command in ["train", "memory"] {
        let out = small_resnet(command, &["--memory-budget", &budget, "--arena-size", &arena]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command}: {stderr}");
        assert!(
            stderr.contains("the step planned within the memory budget of")
                && stderr.contains("the arena is the one to raise")
                && stderr.contains("; pass --arena-size "),
            "{command}: {stderr}"
        );
        assert!(!stderr.contains("epoch"), "{command}: {stderr}");
    }
}

#[test]
fn every_epoch_appends_its_metrics_and_the_run_draws_them() {
    let dir = std::env::temp_dir().join(format!("bumpgrad-cli-curves-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec![
            "train",
            "--train-limit",
            "300",
            "--test-limit",
            "100",
            "--threads",
            "2",
            "--device",
            "cpu",
        ];
        args.extend_from_slice(extra);
        bumpgrad(&args)
    };
    // A row left by an earlier run in the directory is not this run's.
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("metrics.csv"),
        "epoch,train_loss,valid_loss,accuracy,lr,examples_per_second,seconds\n7,1,,,,,1\n",
    )
    .unwrap();
    let out = run(&["--epochs", "2", "--checkpoint-dir", d]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("curves: ") && stderr.contains("curves.svg"), "{stderr}");
    let rows = |dir: &Path| -> Vec<Vec<String>> {
        let text = std::fs::read_to_string(dir.join("metrics.csv")).expect("metrics.csv");
        let mut lines = text.lines();
        assert_eq!(
            lines.next(),
            Some("epoch,train_loss,valid_loss,accuracy,lr,examples_per_second,seconds")
        );
        lines.map(|l| l.split(',').map(str::to_string).collect()).collect()
    };
    let first = rows(&dir);
    assert_eq!(first.len(), 2, "{first:?}");
    for (i, row) in first.iter().enumerate() {
        assert_eq!(row[0], (i + 1).to_string());
        let loss: f64 = row[1].parse().unwrap();
        let accuracy: f64 = row[3].parse().unwrap();
        assert!(loss > 0.0 && (0.0..=1.0).contains(&accuracy), "{row:?}");
        assert_eq!(row[4], "0.05", "the default learning rate");
        assert!(row[5].parse::<f64>().unwrap() > 0.0, "examples per second: {row:?}");
    }
    let svg = std::fs::read_to_string(dir.join("curves.svg")).unwrap();
    assert_eq!(svg.matches("<polyline").count(), 2, "the train loss and the accuracy");
    // A resumed run goes on appending, and draws every epoch.
    let out = run(&["--epochs", "3", "--resume", d]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let all = rows(&dir);
    assert_eq!(all.len(), 3, "{all:?}");
    assert_eq!(all[..2], first[..]);
    let svg = std::fs::read_to_string(dir.join("curves.svg")).unwrap();
    assert_eq!(svg.matches("<circle").count(), 6, "three epochs, two series");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn resume_restores_the_runs_flags_and_refuses_a_contradicting_one() {
    let dir = std::env::temp_dir().join(format!("bumpgrad-cli-remember-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let common = ["--device", "cpu", "--threads", "2"];
    let run = |extra: &[&str]| {
        let mut args = vec!["train"];
        args.extend_from_slice(&common);
        args.extend_from_slice(extra);
        bumpgrad(&args)
    };
    let first = run(&[
        "--train-limit",
        "300",
        "--test-limit",
        "100",
        "--batch",
        "50",
        "--optimizer",
        "adamw",
        "--lr",
        "0.001",
        "--epochs",
        "1",
        "--checkpoint-dir",
        d,
    ]);
    assert_eq!(
        first.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&first.stderr)
    );
    // Nothing but where and how long: the model, optimizer, batch and
    // limits come from the checkpoint.
    let resumed = run(&["--resume", d, "--epochs", "2"]);
    let stderr = format!(
        "{}{}",
        String::from_utf8_lossy(&resumed.stderr),
        String::from_utf8_lossy(&resumed.stdout)
    );
    assert_eq!(resumed.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(
            "resuming with the checkpoint's flags: --train-limit 300 --test-limit 100 --batch 50 --optimizer adamw --lr 0.001"
        ),
        "{stderr}"
    );
    assert!(
        stderr.contains("adamw (beta1 0.9, beta2 0.999, eps 1e-8, weight decay 0.01)"),
        "settings in words: {stderr}"
    );
    assert!(
        stderr.contains("300 training / 100 test images, 6 steps per epoch"),
        "{stderr}"
    );
    // A flag that would change what the checkpoint fixes is refused, both
    // values named as flags; one it does not fix is taken.
    let refused = run(&["--resume", d, "--epochs", "3", "--batch", "100"]);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert_eq!(refused.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "--batch 100 contradicts the checkpoint in {d}, made with --batch 50; drop --batch"
        )),
        "{stderr}"
    );
    let lower = run(&["--resume", d, "--epochs", "3", "--lr", "0.0005"]);
    let stderr = format!(
        "{}{}",
        String::from_utf8_lossy(&lower.stderr),
        String::from_utf8_lossy(&lower.stdout)
    );
    assert_eq!(lower.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("lr 0.0005 constant"), "{stderr}");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn only_errors_about_the_data_name_the_data() {
    // Past any 64-bit address space of today (128 TiB for a process), so
    // no overcommitting kernel can say yes.
    let huge = train(&["--arena-size", "1000000GiB"]);
    let stderr = String::from_utf8_lossy(&huge.stderr);
    assert_eq!(huge.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("error: could not allocate the arena's 976.56 TiB of host memory; pass a smaller --arena-size"),
        "sizes in TiB, no data prefix: {stderr}"
    );
    assert!(stderr.contains("a smaller --batch, or a --memory-budget"), "{stderr}");
    let missing = train(&["--data", "/nonexistent-bumpgrad-data"]);
    let stderr = String::from_utf8_lossy(&missing.stderr);
    assert!(
        stderr.contains("error: training on /nonexistent-bumpgrad-data: "),
        "{stderr}"
    );
}

#[test]
fn train_help_groups_its_flags() {
    let out = bumpgrad(&["train", "--help"]);
    let help = String::from_utf8_lossy(&out.stdout);
    let headings: Vec<&str> = help
        .lines()
        .filter(|l| !l.starts_with(' ') && l.ends_with(':'))
        .collect();
    for heading in [
        "Model:",
        "Data:",
        "Optimisation:",
        "Memory:",
        "Device and GPU:",
        "Checkpoints:",
        "Distributed:",
        "Output:",
    ] {
        assert!(headings.contains(&heading), "{heading} in {headings:?}");
    }
    // Under its heading: the lines after "Model:" up to the next heading.
    let model: Vec<&str> = help
        .split("\nModel:\n")
        .nth(1)
        .unwrap()
        .lines()
        .take_while(|l| l.is_empty() || l.starts_with(' '))
        .collect();
    let model = model.join("\n");
    assert!(model.contains("--hidden") && !model.contains("--lr "), "{model}");
}

#[test]
fn a_batch_past_the_kernels_element_count_says_the_largest_that_fits() {
    // ResNet-50 on MNIST: its first 256-channel batch norm holds 200,704
    // elements an example; 32-bit counts allow 21,399 of them.
    let out = bumpgrad(&[
        "train",
        "--model",
        "resnet50",
        "--batch",
        "50000",
        "--device",
        "cpu",
        "--threads",
        "2",
        "--checkpoint-every",
        "off",
    ]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains("at most 21399 examples of 200704 elements fit; pass --batch 21399 or less"),
        "{stderr}"
    );
}
