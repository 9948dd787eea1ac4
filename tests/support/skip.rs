//! How a test that cannot run here says so: on the process's stderr, past
//! the test harness's capture, and as a failure instead where the run was
//! meant to check what the test checks.
//!
//! The harness captures `eprintln!` and shows it only for a failing test,
//! so a skip written with it passes in silence; these write to the
//! process's stderr directly. Shared by the GPU tests (`tests/gpu.rs`) and
//! the CPU tests that need something of the machine
//! (`tests/recorded_losses.rs`): `#[path = "support/skip.rs"] mod skip;`.

// Each test binary that includes this file uses part of it.
#![allow(dead_code)]

use std::io::Write;

/// Says that `test` did not run, and why; when `required` names what made
/// this run responsible for it, fails with both instead.
pub fn skip_or_fail(test: &str, why: &str, required: Option<String>) {
    if let Some(required) = required {
        panic!("{test} did not run ({why}), but {required}");
    }
    let _ = writeln!(std::io::stderr(), "SKIPPED {test}: {why}");
}

/// How many GPUs this run insists on: `BUMPGRAD_REQUIRE_GPU=N` (set by
/// `scripts/gpu.sh` to the GPUs `nvidia-smi` lists) turns the skip of every
/// test that needs at most N GPUs into a failure, so a GPU machine cannot
/// pass the GPU tests by skipping them.
pub fn required_gpus() -> usize {
    match std::env::var("BUMPGRAD_REQUIRE_GPU") {
        Err(_) => 0,
        Ok(v) => v
            .trim()
            .parse()
            .unwrap_or_else(|_| panic!("BUMPGRAD_REQUIRE_GPU={v:?}: expected a number of GPUs, e.g. 1")),
    }
}

/// `test` did not run for want of `needs` GPUs; a failure when the run
/// requires that many.
pub fn for_want_of_gpus(test: &str, needs: usize, why: &str) {
    let required = required_gpus();
    skip_or_fail(
        test,
        why,
        (needs <= required).then(|| format!("it needs {needs} GPU(s) and BUMPGRAD_REQUIRE_GPU={required}")),
    );
}

/// `test` did not run for want of something of this machine; a failure
/// when `var` is set (to anything but empty or `0`): the variable a runner
/// meant to check that test sets, so that it cannot pass by skipping.
pub fn unless_required(test: &str, why: &str, var: &str) {
    let set = std::env::var(var).is_ok_and(|v| !v.trim().is_empty() && v.trim() != "0");
    skip_or_fail(test, why, set.then(|| format!("{var} is set")));
}
