//! After the first step, training makes no heap allocation: the tape's
//! vectors keep their capacity, tensors are handles, and every byte a step
//! needs comes from the arena. A counting global allocator proves it over
//! two whole epochs run by `Session::epoch_from`, as `bumpgrad train` runs
//! them: full steps and a shorter last one, SGD with momentum, the step
//! region poisoned after every step, read-backs, evaluation with its own
//! shorter last batch, the epoch reports, and a checkpoint after every step.
//! And under a memory budget, whose steps recompute in backward what they
//! dropped in forward.

use bumpgrad::backend::DeviceRequest;
use bumpgrad::models::{Depth, ResNet, SqueezeNet};
use bumpgrad::nn::ModelChoice;
use bumpgrad::optim::{ClipGradNorm, SgdConfig};
use bumpgrad::train::{
    memory_report, CheckpointPolicy, Control, EpochReport, Every, Observer, Pipeline, Position, StepKind, TrainConfig,
};
use std::path::Path;
use std::sync::atomic::AtomicBool;

#[path = "support/counting_alloc.rs"]
mod counting_alloc;

/// Counts the allocations made between checkpoints.
///
/// Writing a checkpoint allocates, and must: it reads the parameters and
/// momentum into host vectors, serialises them, and creates, renames and
/// deletes files. So the count leaves out, for every checkpoint, exactly
/// the span from the last step whose loss the loop reported before it
/// (`step`, the last thing the loop does before writing) to the moment the
/// checkpoint is written (`checkpoint_written`); everything else from the
/// first checkpoint to the end of the second epoch is counted. Before the
/// first checkpoint is the warm-up: the first step sizes the tape's and the
/// trace's vectors.
///
/// The observer itself allocates nothing: it only reads the counter and
/// keeps fixed-size records.
struct Counter {
    /// Where counting started again after the last checkpoint; `None`
    /// before the first.
    since: Option<usize>,
    /// The counter at the last step reported.
    at_step: usize,
    counted: usize,
    checkpoints: usize,
    steps_heard: usize,
    /// Epoch, steps, train loss and test accuracy of each epoch report.
    reports: [(usize, usize, f64, f64); 2],
    epochs: usize,
}

impl Observer for Counter {
    fn step(&mut self, _epoch: usize, _step: usize, loss: f32) {
        assert!(loss.is_finite());
        self.at_step = counting_alloc::allocations();
        self.steps_heard += 1;
    }
    fn checkpoint_written(&mut self, _path: &Path) {
        if let Some(since) = self.since {
            self.counted += self.at_step - since;
        }
        self.checkpoints += 1;
        self.since = Some(counting_alloc::allocations());
    }
    fn epoch(&mut self, r: &EpochReport) {
        self.reports[self.epochs] = (r.epoch, r.steps, r.train_loss, r.test_accuracy);
        self.epochs += 1;
    }
}

/// One test, the networks one after the other: the counter is the whole
/// process's, so nothing else may run beside a count.
#[test]
fn two_epochs_allocate_nothing_between_checkpoints() {
    // Lantern's CNN (dense epilogue, dropout), then a narrow ResNet-18
    // (strided and padded convolutions, batch-norm writing its running
    // statistics, residual adds, global pooling) and a narrow SqueezeNet
    // (1×1 convolutions, concatenation, ceil-mode pools, dropout on maps).
    for (name, model) in [
        ("mnist-cnn", ModelChoice::default()),
        ("resnet18", ResNet::choice(Depth::R18, 0.125)),
        ("squeezenet", SqueezeNet::choice(0.25)),
    ] {
        two_epochs_of(name, model, None);
    }
    // The narrow ResNet-18 under 60% of its step: convolution and block
    // outputs are dropped in forward and made again in backward, into
    // buffers of the step's plan, by ops the tape already holds.
    let resnet = || ResNet::choice(Depth::R18, 0.125);
    let (free, _) = memory_report(&config("resnet18-sized", resnet(), None)).expect("plan");
    two_epochs_of("resnet18-budget", resnet(), Some(free.plan_peak_bytes * 3 / 5));
}

/// A run of `model` as the count makes it, under memory budget `budget`.
fn config(name: &str, model: ModelChoice, budget: Option<usize>) -> TrainConfig {
    let mut cfg = TrainConfig::default();
    cfg.device.request = DeviceRequest::Cpu;
    cfg.device.threads = 2;
    cfg.run.data_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist").into();
    // 11 steps an epoch at batch 100, the last of 50 examples; 3
    // evaluation steps, the last of 50.
    cfg.run.batch = 100;
    cfg.run.train_limit = Some(1050);
    cfg.run.test_limit = Some(250);
    // Clipped, so the clip's launches and the epoch's read of its norms
    // are among what must not allocate.
    let sgd = SgdConfig::default().momentum(0.9);
    cfg.run.optimizer = ClipGradNorm::around(sgd.choice(), 1.0);
    cfg.memory.poison_step = Some(true);
    cfg.run.checkpoints = Some(policy(name));
    cfg.memory.memory_budget = budget;
    cfg.run.model = model;
    cfg
}

fn policy(name: &str) -> CheckpointPolicy {
    CheckpointPolicy {
        dir: std::env::temp_dir().join(format!("bumpgrad-zero-alloc-{}-{name}", std::process::id())),
        // After every step but an epoch's last (which the epoch's end
        // follows), so the warm-up is the first step alone.
        every: Some(Every::Steps(1)),
        keep: 2,
    }
}

fn two_epochs_of(name: &str, model: ModelChoice, budget: Option<usize>) {
    let policy = policy(name);
    let dir = policy.dir.clone();
    let _ = std::fs::remove_dir_all(&dir);
    let cfg = config(name, model, budget);
    let (mut session, info) = Pipeline::open(&cfg, None).and_then(Pipeline::build).expect("session");
    assert_eq!(info.steps_per_epoch, 11);
    if budget.is_some() {
        // The run's own report: it recomputes, and its training step's
        // plan holds the ops that do.
        let plan = info.recomputed.as_ref().expect("the report says what is recomputed");
        let (dropped, candidates) = (plan.dropped.len(), plan.candidates);
        assert!(
            dropped > 0 && dropped < candidates,
            "{name}: {dropped} of {candidates} dropped"
        );
        let memory = info.memory.as_ref().expect("a memory plan");
        let train = memory
            .plans
            .iter()
            .find(|p| p.key == StepKind::Train as u32)
            .expect("a training plan");
        assert!(
            !train.recompute_ticks.is_empty(),
            "{name}: no op of the step recomputes"
        );
    }
    assert_eq!(session.optimizer().state().len(), 1, "momentum is on");
    assert!(session.engine().arena().poisons_steps(), "poisoning is on");
    let stop = AtomicBool::new(false);
    let control = Control {
        stop: &stop,
        checkpoints: Some(&policy),
        config_json: "{}",
        progress: None,
    };
    let mut counter = Counter {
        since: None,
        at_step: 0,
        counted: 0,
        checkpoints: 0,
        steps_heard: 0,
        reports: [(0, 0, 0.0, 0.0); 2],
        epochs: 0,
    };
    // The epoch loop runs on the device's workers, as `bumpgrad train` runs it.
    let end = session.on_workers(|session| {
        for epoch in 1..=2 {
            let start = Position::epoch_start(epoch - 1);
            session.epoch_from(epoch, start, &mut counter, &control).expect("epoch");
        }
        counting_alloc::allocations()
    });
    let since = counter.since.expect("a checkpoint was written");
    counter.counted += end - since;

    // Checkpoints after steps 1 to 10 of each epoch. Counted: steps 2 to
    // 22; between the checkpoints after steps 10 and 12 lie epoch 1's short
    // last step, its evaluation (two full batches and a short one) and
    // report, and the start of epoch 2; after the last checkpoint, epoch
    // 2's short step, evaluation and report.
    assert_eq!(counter.checkpoints, 20);
    assert_eq!(counter.steps_heard, 22);
    assert_eq!(session.steps_done(), 22);
    for (i, &(epoch, steps, loss, accuracy)) in counter.reports.iter().enumerate() {
        assert_eq!((epoch, steps), (i + 1, 11));
        assert!(loss.is_finite() && loss > 0.0, "{loss}");
        assert!((0.0..=1.0).contains(&accuracy));
    }
    assert_eq!(
        counter.counted, 0,
        "{name}: 21 training steps, 2 evaluations and 2 epoch reports made {} heap allocations",
        counter.counted
    );
    let _ = std::fs::remove_dir_all(&dir);
}
