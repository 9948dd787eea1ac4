//! The MNIST CNN's training losses on the CPU, recorded bit for bit before
//! the engine was made generic over models and optimizers: refactoring the
//! engine must not move a single bit of them. A change of arithmetic
//! re-records them and says so in its commit: the cross-entropy's vector
//! `exp` (issue 32) moved 1 ulp in 1 of the plain run's 22 losses and 5 of
//! the momentum run's.
//!
//! Recorded on an x86-64 CPU with AVX2 and FMA (the CPU kernels' vector
//! path), `--threads 2`, seed 42, 1,050 training images (so every epoch
//! ends with a shorter step of 50), batch 100, two epochs, learning rate
//! 0.05. A CPU without AVX2+FMA rounds its multiply-adds differently; there
//! each test says so on stderr ("SKIPPED …", past the harness's capture)
//! and compares nothing. A runner meant to check the recordings sets
//! `BUMPGRAD_REQUIRE_RECORDED_LOSSES=1` (CI does, in `.ci/run`), under which
//! that skip is a failure. `BUMPGRAD_REQUIRE_GPU` does not make it one: a
//! GPU run is not there to check CPU recordings, and a GPU host need not be
//! x86-64 (an aarch64 Grace Hopper has no AVX2).

use bumpgrad::optim::SgdConfig;
use bumpgrad::train::{train, DeviceConfig, Hooks, Observer, TrainConfig};

#[path = "support/skip.rs"]
mod skip;

#[derive(Default)]
struct Losses(Vec<u32>);

impl Observer for Losses {
    fn step(&mut self, _epoch: usize, _step: usize, loss: f32) {
        self.0.push(loss.to_bits());
    }
}

fn losses(momentum: f32) -> Vec<u32> {
    let cfg = TrainConfig::builder()
        .epochs(2)
        .batch(100)
        .optimizer(SgdConfig::default().momentum(momentum).choice())
        .data_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist"))
        .train_limit(1050)
        .test_limit(100)
        .device_config(DeviceConfig::cpu(2))
        .build();
    let mut seen = Losses::default();
    train(&cfg, Hooks::new(&mut seen)).expect("training");
    seen.0
}

fn vector_path() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma")
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

fn check(test: &str, momentum: f32, recorded: &[u32]) {
    if !vector_path() {
        skip::unless_required(
            test,
            "the recorded losses are those of an AVX2+FMA CPU, and this one lacks them",
            "BUMPGRAD_REQUIRE_RECORDED_LOSSES",
        );
        return;
    }
    let now = losses(momentum);
    let show = |v: &[u32]| v.iter().map(|b| format!("{:#010x}", b)).collect::<Vec<_>>().join(", ");
    assert_eq!(now, recorded, "momentum {momentum}: now [{}]", show(&now));
}

#[test]
fn plain_sgd_losses_are_bit_identical_to_the_recording() {
    check(
        "plain_sgd_losses_are_bit_identical_to_the_recording",
        0.0,
        &[
            0x40123317, 0x40137e63, 0x4011b8e3, 0x40112948, 0x4011b334, 0x401003e6, 0x400f9783, 0x400f26df, 0x4010eb60,
            0x400eb72c, 0x400da3fc, 0x400d1f8a, 0x400b4546, 0x400995fb, 0x4007d959, 0x40076f62, 0x4005cfce, 0x40048064,
            0x40063727, 0x4002984a, 0x400546a9, 0x3ff5c145,
        ],
    );
}

#[test]
fn momentum_sgd_losses_are_bit_identical_to_the_recording() {
    check(
        "momentum_sgd_losses_are_bit_identical_to_the_recording",
        0.9,
        &[
            0x40123317, 0x40137e63, 0x4011dfb8, 0x4010529f, 0x40100afd, 0x400e0578, 0x400b298b, 0x40070ab5, 0x40081d92,
            0x3fff88b3, 0x3fe91366, 0x3fdb066c, 0x3fce1cd7, 0x3fb56744, 0x3fb8343e, 0x3f9b9fc5, 0x3f93189d, 0x3f925012,
            0x3f9b9bef, 0x3f99d97d, 0x3f977042, 0x3f3e7b2d,
        ],
    );
}
