//! Steps of two batch sizes in one session (`RunConfig::other_batches`):
//! the body the CPU test (`tests/shapes.rs`) and the GPU test
//! (`tests/gpu/shapes.rs`) share.
//!
//! One session plans batch 100 and batch 50 in one arena and trains an
//! epoch at each; two single-size sessions train the same epochs, the
//! second continuing from the first's state (its parameters, optimizer
//! state and step count, written in with `Session::load_state`), so that
//! every step of the two-size session has a single-size twin that starts
//! from the same parameters. Each step runs on its own size's plans, the
//! arena is sized for the larger, and the losses and accuracies are the
//! twins' bit for bit (on a GPU, with deterministic algorithms).

// Each test binary that includes this file uses part of it.
#![allow(dead_code)]

use bumpgrad::memory::StepPlan;
use bumpgrad::train::{DeviceConfig, EpochReport, Observer, Pipeline, Session, TrainConfig};

/// 1,050 training images: batch 100 ends each epoch with a step of 50,
/// batch 50 divides them; 250 test images: evaluation at 100 ends with 50.
fn config(batch: usize, other_batches: &[usize], device: &DeviceConfig) -> TrainConfig {
    TrainConfig::builder()
        .batch(batch)
        .other_batches(other_batches.to_vec())
        .data_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist"))
        .train_limit(1050)
        .test_limit(250)
        .device_config(device.clone())
        .build()
}

/// Every step's loss, as the bits read back.
#[derive(Default)]
struct Losses(Vec<u32>);

impl Observer for Losses {
    fn step(&mut self, _epoch: usize, _step: usize, loss: f32) {
        self.0.push(loss.to_bits());
    }
}

/// One epoch of `session` at `batch`: its step losses and its report.
fn epoch(session: &mut Session, number: usize, batch: usize) -> (Vec<u32>, EpochReport) {
    session.set_batch(batch).expect("a planned batch size");
    let mut losses = Losses::default();
    let report = session.on_workers(|s| s.epoch(number, &mut losses)).expect("epoch");
    (losses.0, report)
}

fn session(cfg: &TrainConfig) -> (Session, Vec<StepPlan>) {
    let (session, info) = Pipeline::open(cfg, None).and_then(Pipeline::build).expect("session");
    let plans = info.memory.expect("planned").plans;
    (session, plans)
}

/// The plan of key `key` among `plans`.
fn plan(plans: &[StepPlan], key: u32) -> &StepPlan {
    plans
        .iter()
        .find(|p| p.key == key)
        .unwrap_or_else(|| panic!("no plan {key}"))
}

/// What a run of the case shows, for a caller to print or check further.
pub struct Seen {
    /// Full training steps captured as graphs, in the two-size session.
    pub graphs: usize,
    /// The two-size session's arena capacity and persistent bytes.
    pub capacity: usize,
    pub persistent: usize,
}

/// Runs the case on `device` and holds it to the twins' bits.
pub fn two_batch_sizes(device: &DeviceConfig) -> Seen {
    let (mut both, plans) = session(&config(100, &[50], device));
    let (mut hundred, plans_100) = session(&config(100, &[], device));
    let (mut fifty, plans_50) = session(&config(50, &[], device));
    assert_eq!(both.batches(), [100, 50]);

    // Its own plans per batch size: keys 1 to 4 for batch 100 (training,
    // the last, shorter training step, evaluation, the last evaluation), 5
    // and 7 for batch 50 (which divides both sets). Each is the
    // single-size run's plan of that step, buffer for buffer.
    let keys: Vec<u32> = plans.iter().map(|p| p.key).collect();
    assert_eq!(keys, [1, 2, 3, 4, 5, 7]);
    for (key, twin, twin_key) in [
        (1, &plans_100, 1),
        (2, &plans_100, 2),
        (3, &plans_100, 3),
        (4, &plans_100, 4),
        (5, &plans_50, 1),
        (7, &plans_50, 3),
    ] {
        let (ours, theirs) = (plan(&plans, key), plan(twin, twin_key));
        assert_eq!(ours.bufs, theirs.bufs, "plan {key}");
        assert_eq!(ours.peak, theirs.peak, "plan {key}");
    }
    // One arena, sized for the larger.
    let peak = |keys: &[u32]| keys.iter().map(|&k| plan(&plans, k).peak).max().unwrap();
    let (peak_100, peak_50) = (peak(&[1, 2, 3, 4]), peak(&[5, 7]));
    assert!(peak_100 > peak_50, "{peak_100} vs {peak_50}");
    let stats = both.engine().arena().stats();
    assert_eq!(stats.capacity_bytes, stats.persistent_bytes + peak_100.max(peak_50));

    // Epoch 1 at 100, as the batch-100 run.
    let (losses, report) = epoch(&mut both, 1, 100);
    let (twin_losses, twin) = epoch(&mut hundred, 1, 100);
    assert_eq!(losses.len(), 11);
    assert_eq!(losses, twin_losses, "epoch 1, batch 100");
    assert_eq!(report.test_accuracy.to_bits(), twin.test_accuracy.to_bits());
    // Each step on its plan: the most any step held is the largest peak
    // of the plans it ran on.
    assert_eq!(report.arena.step_high_water_bytes, peak_100);
    assert_eq!(twin.arena.step_high_water_bytes, peak_100);

    // Epoch 2 at 50, as the batch-50 run continuing from the same state.
    let state = hundred.state_tensors().expect("state");
    fifty.load_state(&state, hundred.steps_done()).expect("load");
    let (losses, report) = epoch(&mut both, 2, 50);
    let (twin_losses, twin) = epoch(&mut fifty, 2, 50);
    assert_eq!(losses.len(), 21);
    assert_eq!(losses, twin_losses, "epoch 2, batch 50");
    assert_eq!(report.test_accuracy.to_bits(), twin.test_accuracy.to_bits());
    assert_eq!(twin.arena.step_high_water_bytes, peak_50);
    assert_eq!(
        report.arena.last_step_bytes,
        plan(&plans, 7).peak,
        "the last step, an evaluation at 50"
    );

    // Back to 100: its plans and graph are still there.
    let state = fifty.state_tensors().expect("state");
    hundred.load_state(&state, fifty.steps_done()).expect("load");
    let (losses, report) = epoch(&mut both, 3, 100);
    let (twin_losses, twin) = epoch(&mut hundred, 3, 100);
    assert_eq!(losses, twin_losses, "epoch 3, batch 100");
    assert_eq!(report.test_accuracy.to_bits(), twin.test_accuracy.to_bits());
    assert_eq!(report.arena.step_high_water_bytes, peak_100);
    assert_eq!(
        report.arena.capacity_bytes, stats.capacity_bytes,
        "the arena never grows"
    );
    assert_eq!(
        both.state_tensors().expect("state"),
        hundred.state_tensors().expect("state")
    );
    assert!(both.set_batch(70).is_err(), "a batch size never planned is refused");
    Seen {
        graphs: both.graphs_captured(),
        capacity: stats.capacity_bytes,
        persistent: stats.persistent_bytes,
    }
}
