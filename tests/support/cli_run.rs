//! Running the built binary from the repository root, for the CLI tests.

use std::process::{Command, Output};

/// `bumpgrad ARGS…`, run in the repository root.
pub fn bumpgrad(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_bumpgrad"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(args)
        .output()
        .expect("run bumpgrad")
}

/// What a run that must succeed printed on stdout.
pub fn stdout(out: &Output) -> String {
    assert!(
        out.status.success(),
        "bumpgrad failed ({}): {}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout.clone()).expect("utf-8")
}
