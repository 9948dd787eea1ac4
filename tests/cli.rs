//! The `bumpgrad` binary as a user meets it: JSON on stdout, and a clear
//! message with a non-zero status for every bad input, never a panic.

use std::process::{Command, Output};

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

fn train(extra: &[&str]) -> Output {
    let mut args = vec!["train"];
    args.extend_from_slice(&QUICK);
    args.extend_from_slice(extra);
    bumpgrad(&args)
}

#[test]
fn json_prints_one_object_per_epoch() {
    let out = train(&["--epochs", "2", "--json"]);
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let stdout = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<serde_json::Value> = stdout.lines().map(|l| serde_json::from_str(l).expect("JSON")).collect();
    assert_eq!(lines.len(), 2, "{stdout}");
    for (i, epoch) in lines.iter().enumerate() {
        assert_eq!(epoch["epoch"], i + 1);
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
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("epoch   2"),
        "human text goes to stderr"
    );
}

fn fails_with(out: Output, code: i32, needle: &str) {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(code), "{stderr}");
    assert!(stderr.contains(needle), "expected {needle:?} in: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[test]
fn cuda_without_a_gpu_is_a_clear_error() {
    if bumpgrad::backend::cuda::open(0).is_ok() {
        use std::io::Write;
        let _ = writeln!(
            std::io::stderr(),
            "SKIPPED cuda_without_a_gpu: this machine has a usable GPU"
        );
        return;
    }
    fails_with(train(&["--device", "cuda"]), 1, "or pass --device cpu");
}

#[test]
fn bad_settings_are_refused_with_what_to_pass() {
    let garbage = std::env::temp_dir().join(format!("bumpgrad-cli-garbage-{}", std::process::id()));
    std::fs::create_dir_all(&garbage).unwrap();
    std::fs::write(garbage.join("ckpt-000000000010.safetensors"), b"not a checkpoint").unwrap();
    let garbage = garbage.to_str().unwrap().to_string();
    // (flags, exit status, what the message must say); 2 is clap's status
    // for a flag it cannot parse, 1 ours for a setting that cannot train.
    let table: &[(&[&str], i32, &str)] = &[
        (&["--batch", "0"], 1, "--batch must be at least 1"),
        (&["--batch", "-5"], 2, "unexpected argument '-5'"),
        (&["--lr", "-1"], 1, "--lr must be a positive number"),
        (&["--lr", "nan"], 1, "--lr must be a positive number"),
        (&["--epochs", "0"], 1, "--epochs must be at least 1"),
        (&["--momentum", "1.5"], 1, "--momentum must be in [0, 1)"),
        (&["--arena-size", "lots"], 2, "cannot read \"lots\" as a size"),
        (&["--arena-size", "1KiB"], 1, "arena exhausted"),
        (&["--device", "tpu"], 2, "invalid value 'tpu'"),
        (&["--graph", "on"], 1, "--graph on needs the GPU"),
        (&["--train-limit", "0"], 1, "--train-limit must be at least 1"),
        (&["--test-limit", "0"], 1, "--test-limit must be at least 1"),
        (&["--data", "/nonexistent/mnist"], 1, "--data"),
        (&["--data", "Cargo.toml"], 1, "--data"),
        (&["--checkpoint-every", "0"], 2, "at least 1"),
        (&["--checkpoint-every", "5fortnights"], 2, "unknown unit"),
        (&["--keep-checkpoints", "0"], 1, "--keep-checkpoints must be at least 1"),
        (&["--resume", "/nonexistent/ckpts"], 1, "/nonexistent/ckpts"),
        (&["--resume", garbage.as_str()], 1, "reads cleanly"),
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
        let out = train(flags);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(*status), "{flags:?}: {stderr}");
        assert!(stderr.contains(needle), "{flags:?}: expected {needle:?} in: {stderr}");
        assert!(!stderr.contains("panicked"), "{flags:?}: {stderr}");
    }
    let _ = std::fs::remove_dir_all(&garbage);
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
        "--train-limit 70000 is out of range",
    );
}

/// Sends SIGINT to a child process (through `kill`, to stay free of libc).
fn interrupt(child: &std::process::Child) {
    let status = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .expect("run kill");
    assert!(status.success());
}

fn spawn_train(extra: &[&str]) -> std::process::Child {
    Command::new(env!("CARGO_BIN_EXE_bumpgrad"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["train", "--device", "cpu", "--threads", "2", "--test-limit", "100"])
        .args(extra)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("start bumpgrad")
}

#[test]
fn ctrl_c_finishes_the_step_writes_a_checkpoint_and_resume_continues() {
    let dir = std::env::temp_dir().join(format!("bumpgrad-cli-sigint-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    let d = dir.to_str().unwrap();
    let child = spawn_train(&["--epochs", "50", "--checkpoint-dir", d, "--checkpoint-every", "off"]);
    // Data loading takes under a second; by 3 s it is training.
    std::thread::sleep(std::time::Duration::from_secs(3));
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(
        stderr.contains("stopped by a signal") && stderr.contains("--resume"),
        "{stderr}"
    );
    let latest = bumpgrad::checkpoint::latest_valid(&dir).unwrap().expect("a checkpoint");
    assert!(latest.checkpoint.step > 0);

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
fn a_second_ctrl_c_exits_at_once() {
    let dir = std::env::temp_dir().join(format!("bumpgrad-cli-sigint2-{}", std::process::id()));
    // Steps of 10,000 images take far longer than the 100 ms between the
    // two signals, so the second always arrives while the run is still
    // loading or in its first step: the first asks for a checkpoint after
    // the current step, the second must not wait for it.
    let child = spawn_train(&[
        "--epochs",
        "50",
        "--batch",
        "10000",
        "--train-limit",
        "20000",
        "--checkpoint-dir",
        dir.to_str().unwrap(),
    ]);
    std::thread::sleep(std::time::Duration::from_millis(150));
    interrupt(&child);
    std::thread::sleep(std::time::Duration::from_millis(100));
    interrupt(&child);
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(130), "{stderr}");
    assert!(stderr.contains("second interrupt"), "{stderr}");
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
}
