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

const QUICK: [&str; 8] = [
    "--train-limit",
    "300",
    "--test-limit",
    "100",
    "--threads",
    "2",
    "--device",
    "cpu",
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
    if bumpgrad::backend::cuda::open().is_ok() {
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
    fails_with(train(&["--batch", "0"]), 1, "--batch must be at least 1");
    fails_with(train(&["--lr", "-1"]), 1, "--lr must be a positive number");
    fails_with(train(&["--epochs", "0"]), 1, "--epochs must be at least 1");
    fails_with(train(&["--momentum", "1.5"]), 1, "--momentum must be in [0, 1)");
    fails_with(train(&["--arena-size", "lots"]), 2, "cannot read \"lots\" as a size");
    fails_with(train(&["--device", "tpu"]), 2, "invalid value 'tpu'");
}

#[test]
fn missing_data_names_the_files_and_the_flag() {
    fails_with(train(&["--data", "/nonexistent/mnist"]), 1, "--data");
}

#[test]
fn an_arena_too_small_says_which_size_fits() {
    fails_with(train(&["--arena-size", "4MiB"]), 1, "arena exhausted");
    fails_with(train(&["--arena-size", "4MiB"]), 1, "pass --arena-size");
}

#[test]
fn a_train_limit_past_the_data_is_refused() {
    fails_with(
        train(&["--train-limit", "70000"]),
        1,
        "--train-limit 70000 is out of range",
    );
}
