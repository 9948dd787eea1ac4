//! Messages that say what to do: each case of issue 34's list that this
//! branch fixed, as a user meets it.

use std::io::Read;
use std::process::{Command, Output, Stdio};

fn bumpgrad(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bumpgrad"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .expect("run bumpgrad")
}

const QUICK: [&str; 8] = [
    "--train-limit",
    "300",
    "--test-limit",
    "100",
    "--device",
    "cpu",
    "--checkpoint-every",
    "off",
];

#[test]
fn a_closed_stdout_ends_quietly() {
    // `bumpgrad train | head -1`: the reader closes the pipe after one line.
    let mut child = Command::new(env!("CARGO_BIN_EXE_bumpgrad"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["train", "--epochs", "2", "--threads", "2"])
        .args(QUICK)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start bumpgrad");
    let mut first = [0u8; 1];
    child
        .stdout
        .take()
        .expect("stdout")
        .read_exact(&mut first)
        .expect("a first byte");
    // Dropped here: the pipe's reader is gone before the run has printed all.
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut stderr)
        .expect("stderr reads");
    let status = child.wait().expect("bumpgrad ends");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert_eq!(status.code(), Some(0), "{stderr}");
}

#[test]
fn gpu_is_taken_as_cuda() {
    let gpu = bumpgrad(&["memory", "--device", "gpu"]);
    let err = String::from_utf8_lossy(&gpu.stderr);
    assert!(!err.contains("invalid value 'gpu'"), "{err}");
    // What `--device cuda` does: plan on the GPU, or say why there is none.
    let cuda = bumpgrad(&["memory", "--device", "cuda"]);
    assert_eq!(gpu.status.code(), cuda.status.code(), "{err}");
    assert_eq!(err, String::from_utf8_lossy(&cuda.stderr));
}

/// Built without the `cuda` feature (`--no-default-features --features
/// cli`): asking for the GPU says why there is none and what to do, and
/// `auto` trains on the CPU, saying why.
#[cfg(not(feature = "cuda"))]
#[test]
fn without_the_cuda_feature_the_gpu_is_refused_with_what_to_do() {
    let cuda = bumpgrad(&["memory", "--device", "cuda"]);
    let err = String::from_utf8_lossy(&cuda.stderr);
    assert_eq!(cuda.status.code(), Some(1), "{err}");
    assert!(
        err.contains("built without the `cuda` feature, so it has no GPU backend; rebuild it with default features"),
        "{err}"
    );
    assert!(err.contains("or pass --device cpu"), "{err}");
    let gpus = bumpgrad(&["train", "--gpus", "2"]);
    let err = String::from_utf8_lossy(&gpus.stderr);
    assert!(
        err.contains("none is usable (built without the `cuda` feature); drop --gpus"),
        "{err}"
    );
    let auto = bumpgrad(&[
        "train",
        "--epochs",
        "1",
        "--train-limit",
        "300",
        "--test-limit",
        "100",
        "--checkpoint-every",
        "off",
    ]);
    let err = String::from_utf8_lossy(&auto.stderr);
    assert!(auto.status.success(), "{err}");
    assert!(
        err.contains("no usable GPU (built without the `cuda` feature); training on the CPU"),
        "{err}"
    );
}

#[test]
fn threads_above_the_cores_are_warned_about() {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    let many = (cores + 1).to_string();
    let out = bumpgrad(&["memory", "--device", "cpu", "--threads", &many]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(&format!("--threads {many} is more than this machine's {cores} cores")),
        "{err}"
    );
    let out = bumpgrad(&["memory", "--device", "cpu", "--threads", "1"]);
    assert!(!String::from_utf8_lossy(&out.stderr).contains("warning: --threads"));
}

#[test]
fn memory_refuses_the_flags_only_train_acts_on() {
    for flags in [
        &["--epochs", "3"][..],
        &["--resume", "checkpoints"],
        &["--checkpoint-dir=elsewhere"],
        &["--keep-checkpoints", "1"],
        &["--profile"],
    ] {
        let mut args = vec!["memory", "--device", "cpu"];
        args.extend_from_slice(flags);
        let out = bumpgrad(&args);
        let err = String::from_utf8_lossy(&out.stderr);
        let flag = flags[0].split('=').next().unwrap();
        assert_eq!(out.status.code(), Some(1), "{flags:?}: {err}");
        assert!(
            err.contains(&format!("{flag} is a flag of `bumpgrad train`")) && err.contains(&format!("drop {flag}")),
            "{flags:?}: {err}"
        );
        assert!(out.stdout.is_empty(), "{flags:?} planned anyway");
    }
}

#[test]
fn profile_on_the_cpu_prints_its_ops_or_says_why_not() {
    // 300 images at batch 5: 60 steps, so step 41 is timed.
    let mut args = vec!["train", "--batch", "5", "--epochs", "1", "--profile"];
    args.extend_from_slice(&QUICK);
    let out = bumpgrad(&args);
    // Without --json, what the run says goes to stdout.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(said.contains("profile (a step on the CPU, each op timed"), "{said}");
    assert!(said.contains("conv2d::forward_into (src/ops/conv2d/mod.rs:"), "{said}");
    assert!(!said.contains("--profile printed nothing"), "{said}");
    // At batch 100 the run takes 3 steps: none is timed, and it says so.
    let mut args = vec!["train", "--batch", "100", "--epochs", "1", "--profile"];
    args.extend_from_slice(&QUICK);
    let out = bumpgrad(&args);
    // Without --json, what the run says goes to stdout.
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(!said.contains("profile ("), "{said}");
    assert!(
        said.contains("--profile printed nothing: it times training step 41 of the run (a resumed run counts from its first start), and this process did not run that step"),
        "{said}"
    );
}
