//! The optimizer ops against PyTorch's own SGD, AdamW and Adagrad on the
//! CPU, with and without `clip_grad_norm_` before them: every parameter,
//! every state value (and the norm and the clipped gradients) after each of
//! six updates, within 1e-6 relative (`tests/support/optim_fixtures.rs`; the GPU runs the same body
//! in `tests/gpu.rs`).

use bumpgrad::{Device, Engine};

#[path = "support/optim_fixtures.rs"]
mod optim_fixtures;

fn check(name: &str) {
    let case = optim_fixtures::case(name);
    let mut engine = Engine::new(Device::cpu(2).expect("cpu"), 1 << 20).expect("arena");
    optim_fixtures::check(&mut engine, name, &case);
}

#[test]
fn every_fixture_has_a_test() {
    let tested = [
        "sgd_plain",
        "sgd_momentum",
        "sgd_nesterov_weight_decay",
        "sgd_momentum_weight_decay",
        "adamw_defaults",
        "adamw_betas",
        "adamw_low_beta1",
        "adagrad_tree_lstm",
        "adagrad_every_knob",
        "sgd_momentum_clip",
        "adagrad_clip",
        "adamw_clip_none",
    ];
    let mut on_disk: Vec<String> = std::fs::read_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/optim"))
        .expect("the fixtures")
        .map(|e| {
            e.expect("entry")
                .file_name()
                .to_string_lossy()
                .trim_end_matches(".json")
                .to_string()
        })
        .collect();
    on_disk.sort();
    let mut listed: Vec<&str> = optim_fixtures::CASES.iter().map(|(n, _)| *n).collect();
    listed.sort();
    let mut tested = tested.to_vec();
    tested.sort();
    assert_eq!(
        listed, on_disk,
        "a fixture file not in optim_fixtures::CASES, or the reverse"
    );
    assert_eq!(tested, listed, "a case without its test here");
}

#[test]
fn sgd_plain_matches_pytorch() {
    check("sgd_plain");
}

#[test]
fn sgd_momentum_matches_pytorch() {
    check("sgd_momentum");
}

#[test]
fn sgd_nesterov_with_weight_decay_matches_pytorch() {
    check("sgd_nesterov_weight_decay");
}

#[test]
fn sgd_momentum_with_weight_decay_matches_pytorch() {
    check("sgd_momentum_weight_decay");
}

#[test]
fn adamw_with_pytorchs_defaults_matches_pytorch() {
    check("adamw_defaults");
}

#[test]
fn adamw_with_other_betas_eps_and_decay_matches_pytorch() {
    check("adamw_betas");
}

#[test]
fn adamw_with_beta1_below_a_half_matches_pytorch() {
    check("adamw_low_beta1");
}

#[test]
fn adagrad_with_the_tree_lstm_papers_settings_matches_pytorch() {
    check("adagrad_tree_lstm");
}

#[test]
fn adagrad_with_lr_decay_weight_decay_a_starting_sum_and_a_large_eps_matches_pytorch() {
    check("adagrad_every_knob");
}

#[test]
fn sgd_with_momentum_after_clipping_every_step_matches_pytorch() {
    check("sgd_momentum_clip");
}

#[test]
fn adagrad_after_clipping_every_step_matches_pytorch() {
    check("adagrad_clip");
}

#[test]
fn adamw_after_a_clip_that_never_clips_matches_pytorch() {
    check("adamw_clip_none");
}
