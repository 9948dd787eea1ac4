//! Checkpoints and resume on the CPU: an interrupted run, resumed, starts
//! where it stopped (it does not run the steps before again) and from there
//! on gives exactly the losses, reports, parameters and momentum of an
//! uninterrupted one; a damaged checkpoint is skipped for the one before it.

use bumpgrad::backend::DeviceRequest;
use bumpgrad::checkpoint::{self, Checkpoint};
use bumpgrad::optim::SgdConfig;
use bumpgrad::train::{train, CheckpointPolicy, EpochReport, Every, Hooks, Observer, TrainConfig};
use bumpgrad::Error;
use bumpgrad::Setting;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// A fresh directory under the system's temporary one.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bumpgrad-resume-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn config(dir: &Path, epochs: usize, every: Every) -> TrainConfig {
    let mut cfg = TrainConfig::default();
    cfg.device.request = DeviceRequest::Cpu;
    cfg.run.epochs = epochs;
    cfg.run.batch = 50;
    cfg.device.threads = 2;
    cfg.run.data_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist").into();
    cfg.run.train_limit = Some(1000);
    cfg.run.test_limit = Some(200);
    cfg.memory.poison_step = Some(true);
    cfg.run.checkpoints = Some(CheckpointPolicy {
        dir: dir.to_path_buf(),
        every: Some(every),
        keep: 3,
    });
    cfg
}

fn newest(dir: &Path) -> Checkpoint {
    checkpoint::latest_valid(dir)
        .expect("readable")
        .expect("a checkpoint")
        .checkpoint
}

/// Collects what a run reports: every step's loss as read back, where each
/// epoch started, notes and epoch reports; sets `stop` once it has seen step
/// `stop_after`.
struct Watch<'a> {
    stop: &'a AtomicBool,
    stop_after: Option<usize>,
    /// (epoch, step in epoch, loss), in the order heard.
    steps: Vec<(usize, usize, f32)>,
    /// (epoch, first step) of every epoch the run entered.
    starts: Vec<(usize, usize)>,
    notes: Vec<String>,
    reports: Vec<EpochReport>,
}

impl Observer for Watch<'_> {
    fn step(&mut self, epoch: usize, step: usize, loss: f32) {
        self.steps.push((epoch, step, loss));
        if Some(step) == self.stop_after {
            self.stop.store(true, Ordering::SeqCst);
        }
    }
    fn resumed_at(&mut self, epoch: usize, step: usize) {
        self.starts.push((epoch, step));
    }
    fn note(&mut self, line: &str) {
        self.notes.push(line.to_string());
    }
    fn epoch(&mut self, r: &EpochReport) {
        self.reports.push(r.clone());
    }
}

fn watch(stop: &AtomicBool, stop_after: Option<usize>) -> Watch<'_> {
    Watch {
        stop,
        stop_after,
        steps: Vec::new(),
        starts: Vec::new(),
        notes: Vec::new(),
        reports: Vec::new(),
    }
}

/// A run straight through, watched.
fn run_straight(cfg: &TrainConfig) -> Watch<'static> {
    static NEVER: AtomicBool = AtomicBool::new(false);
    let mut seen = watch(&NEVER, None);
    train(cfg, Hooks::new(&mut seen).stop_on(&NEVER)).unwrap();
    seen
}

/// The model's six parameters (with momentum, also their six momentum buffers).
#[path = "support/mnist_cnn_names.rs"]
mod mnist_cnn_names;
use mnist_cnn_names::PARAMS;

/// `a` and `b` hold the same tensors (the model's parameters and, with
/// momentum, their momentum buffers), bit for bit.
fn assert_same_state(a: &Checkpoint, b: &Checkpoint, momentum: bool) {
    assert_eq!(a.step, b.step);
    let want = if momentum { 2 * PARAMS.len() } else { PARAMS.len() };
    assert_eq!(
        a.tensors.len(),
        want,
        "{:?}",
        a.tensors.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    assert_eq!(
        b.tensors.len(),
        want,
        "{:?}",
        b.tensors.iter().map(|t| &t.name).collect::<Vec<_>>()
    );
    for (x, y) in a.tensors.iter().zip(&b.tensors) {
        assert_eq!(x.name, y.name);
        assert_eq!(x.shape, y.shape, "{}", x.name);
        assert_eq!(x.values.len(), y.values.len(), "{}", x.name);
        let same = x.values.iter().zip(&y.values).all(|(p, q)| p.to_bits() == q.to_bits());
        assert!(same, "{} differs", x.name);
    }
    for name in PARAMS {
        assert!(a.tensor(name).is_some(), "{name} missing");
        let buffer = a.tensor(&checkpoint::momentum_buffer_name(name));
        assert_eq!(buffer.is_some(), momentum, "{name}'s momentum buffer");
        if let Some(buffer) = buffer {
            assert!(
                buffer.values.iter().any(|v| *v != 0.0),
                "{name}'s momentum buffer is all zeros"
            );
        }
    }
}

/// A resumed run's epoch reports, and every step it ran, equal those of the
/// straight run from where it resumed on, bit for bit.
fn assert_same_from(straight: &Watch<'_>, resumed: &Watch<'_>, epoch: usize, step: usize) {
    let later = |&&(e, s, _): &&(usize, usize, f32)| (e, s) >= (epoch, step);
    let want: Vec<_> = straight.steps.iter().filter(later).collect();
    let got: Vec<_> = resumed.steps.iter().collect();
    assert_eq!(
        got.len(),
        want.len(),
        "steps run after resuming at epoch {epoch} step {step}"
    );
    for (g, w) in got.iter().zip(&want) {
        assert_eq!((g.0, g.1, g.2.to_bits()), (w.0, w.1, w.2.to_bits()), "{g:?} vs {w:?}");
    }
    let want: Vec<_> = straight.reports.iter().filter(|r| r.epoch >= epoch).collect();
    assert_eq!(resumed.reports.len(), want.len());
    for (g, w) in resumed.reports.iter().zip(want) {
        assert_eq!(g.epoch, w.epoch);
        assert_eq!(g.train_loss.to_bits(), w.train_loss.to_bits(), "epoch {}", g.epoch);
        assert_eq!(g.test_accuracy, w.test_accuracy, "epoch {}", g.epoch);
    }
}

#[test]
fn one_epoch_then_resume_equals_two_epochs_straight_bit_for_bit() {
    let (straight, split) = (scratch("straight"), scratch("split"));
    let straight_run = run_straight(&config(&straight, 2, Every::Epochs(1)));
    train(
        &config(&split, 1, Every::Epochs(1)),
        Hooks::new(&mut bumpgrad::train::Quiet),
    )
    .unwrap();
    let stop = AtomicBool::new(false);
    let mut seen = watch(&stop, None);
    let resumed_cfg = {
        let mut cfg = config(&split, 2, Every::Epochs(1));
        cfg.run.resume = Some(split.clone());
        cfg
    };
    train(&resumed_cfg, Hooks::new(&mut seen).stop_on(&stop)).unwrap();
    assert!(
        seen.notes.iter().any(|n| n.contains("resuming from")),
        "{:?}",
        seen.notes
    );
    assert_eq!(seen.starts, [(2, 0)], "only epoch 2 runs again");
    assert_same_from(&straight_run, &seen, 2, 0);
    assert_same_state(&newest(&straight), &newest(&split), false);
}

/// Stops a run after step 8 of 20 in epoch 1 and resumes it: the resumed
/// run starts at step 8 and from there on hears every loss, ends every
/// epoch and writes every tensor exactly as a run straight through.
fn stop_mid_epoch_then_resume(name: &str, momentum: f32) {
    let (straight, stopped) = (scratch(&format!("{name}-straight")), scratch(name));
    let every = Every::Steps(7);
    let cfg = |dir: &Path| {
        let mut cfg = config(dir, 2, every);
        cfg.run.optimizer = SgdConfig::default().momentum(momentum).choice();
        cfg
    };
    let straight_run = run_straight(&cfg(&straight));
    assert_eq!(straight_run.steps.len(), 40);
    // The observer hears of steps at each read-back (here each checkpoint,
    // every 7 steps); the loop stops after the step it is running then.
    let stop = AtomicBool::new(false);
    let mut seen = watch(&stop, Some(5));
    let err = train(&cfg(&stopped), Hooks::new(&mut seen).stop_on(&stop)).unwrap_err();
    let Error::Interrupted {
        epoch,
        step,
        checkpoint,
    } = &err
    else {
        panic!("{err}")
    };
    assert_eq!((*epoch, *step), (1, 8), "{err}");
    assert!(checkpoint.as_ref().is_some_and(|p| p.exists()), "{err}");
    let path = checkpoint.as_ref().unwrap().display().to_string();
    assert!(err.to_string().contains(&path), "{err} should name {path}");
    assert_eq!(newest(&stopped).step, 8);

    let stop = AtomicBool::new(false);
    let mut seen = watch(&stop, None);
    let resumed = {
        let mut cfg = cfg(&stopped);
        cfg.run.resume = Some(stopped.clone());
        cfg
    };
    train(&resumed, Hooks::new(&mut seen).stop_on(&stop)).unwrap();
    assert!(
        seen.notes
            .iter()
            .any(|n| n.contains("resuming from") && n.contains("0 epochs and 8 steps")),
        "{:?}",
        seen.notes
    );
    // Steps 0..8 are not run again: 12 of epoch 1, then all 20 of epoch 2.
    assert_eq!(seen.starts, [(1, 8), (2, 0)]);
    assert_same_from(&straight_run, &seen, 1, 8);
    // Both runs' last checkpoints are at step 35 (every 7 of 40 steps).
    assert_same_state(&newest(&straight), &newest(&stopped), momentum > 0.0);
}

#[test]
fn a_stop_mid_epoch_checkpoints_and_the_resumed_run_ends_identically() {
    stop_mid_epoch_then_resume("mid", 0.0);
}

#[test]
fn with_momentum_a_stop_mid_epoch_resumes_bit_for_bit() {
    // The momentum buffers go into the checkpoint and come back from it:
    // without them the resumed steps would take other values.
    stop_mid_epoch_then_resume("mid-momentum", 0.9);
}

#[test]
fn a_damaged_newest_checkpoint_is_skipped_for_the_one_before() {
    let (straight, damaged) = (scratch("dmg-straight"), scratch("dmg"));
    let straight_run = run_straight(&config(&straight, 2, Every::Epochs(1)));
    train(
        &config(&damaged, 2, Every::Epochs(1)),
        Hooks::new(&mut bumpgrad::train::Quiet),
    )
    .unwrap();
    // Cut the newest (epoch 2) in half: a crash mid-copy, a full disk.
    let newest_path = checkpoint::latest_valid(&damaged).unwrap().unwrap().path;
    let bytes = std::fs::read(&newest_path).unwrap();
    std::fs::write(&newest_path, &bytes[..bytes.len() / 2]).unwrap();
    let stop = AtomicBool::new(false);
    let mut seen = watch(&stop, None);
    let resumed = {
        let mut cfg = config(&damaged, 2, Every::Epochs(1));
        cfg.run.resume = Some(damaged.clone());
        cfg
    };
    train(&resumed, Hooks::new(&mut seen).stop_on(&stop)).unwrap();
    assert!(
        seen.notes
            .iter()
            .any(|n| n.contains("skipped") && n.contains(newest_path.to_str().unwrap())),
        "{:?}",
        seen.notes
    );
    assert!(
        seen.notes.iter().any(|n| n.contains("resuming from")),
        "{:?}",
        seen.notes
    );
    assert_eq!(seen.starts, [(2, 0)], "epoch 2 runs again from epoch 1's checkpoint");
    assert_same_from(&straight_run, &seen, 2, 0);
    assert_same_state(&newest(&straight), &newest(&damaged), false);
}

#[test]
fn a_checkpoint_from_other_settings_is_refused() {
    let dir = scratch("other");
    train(
        &config(&dir, 1, Every::Epochs(1)),
        Hooks::new(&mut bumpgrad::train::Quiet),
    )
    .unwrap();
    let other = {
        let mut cfg = config(&dir, 2, Every::Epochs(1));
        cfg.run.batch = 100;
        cfg.run.resume = Some(dir.clone());
        cfg
    };
    let err = train(&other, Hooks::new(&mut bumpgrad::train::Quiet)).unwrap_err();
    assert!(err.to_string().contains("cannot resume"), "{err}");
    assert!(
        matches!(&err, Error::Setting { setting: Setting::Batch, fix: Some(f), .. } if f == "50"),
        "{err:?}"
    );
    // Another optimizer, or the same with other settings, is refused too:
    // its state would not be the one the checkpoint holds.
    let momentum = {
        let mut cfg = config(&dir, 2, Every::Epochs(1));
        cfg.run.optimizer = SgdConfig::default().momentum(0.9).choice();
        cfg.run.resume = Some(dir.clone());
        cfg
    };
    let err = train(&momentum, Hooks::new(&mut bumpgrad::train::Quiet)).unwrap_err();
    assert!(
        matches!(
            &err,
            Error::Setting {
                setting: Setting::Optimizer,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("momentum: 0.9"), "{err}");
}

#[test]
fn a_diverging_run_stops_at_the_step_and_keeps_the_last_good_checkpoint() {
    let dir = scratch("diverge");
    let cfg = {
        let mut cfg = config(&dir, 2, Every::Steps(1));
        cfg.run.lr = 1e5;
        cfg
    };
    let err = train(&cfg, Hooks::new(&mut bumpgrad::train::Quiet)).unwrap_err();
    let Error::Diverged { epoch, step, loss } = err else {
        panic!("{err}")
    };
    assert!(!loss.is_finite());
    assert!(err.to_string().contains(&format!("step {step}")), "{err}");
    // Checkpoints were written after every step whose loss was finite, and
    // none after the step that diverged.
    let last = newest(&dir);
    let diverged_at = ((epoch - 1) * 20 + step) as u64;
    assert_eq!(last.step, diverged_at - 1, "{err}");
    assert!(last.tensors.iter().all(|t| t.values.iter().all(|v| v.is_finite())));
}

/// Stopped mid-epoch after a periodic checkpoint and resumed from it, on the
/// CPU: one body for every case (`support/resume_cases.rs`).
#[path = "support/resume_cases.rs"]
mod resume_cases;

fn resumes_bit_for_bit(case: fn(&TrainConfig) -> resume_cases::Case) {
    let on_the_cpu = {
        let mut cfg = TrainConfig::default();
        cfg.device.request = DeviceRequest::Cpu;
        cfg.device.threads = 2;
        cfg
    };
    let case = case(&on_the_cpu);
    let (straight, resumed) = resume_cases::stop_and_resume(&case);
    resume_cases::assert_same_from(&case, &straight, &resumed);
}

#[test]
fn a_resnet_resumed_mid_epoch_gets_its_batch_norm_statistics_back() {
    resumes_bit_for_bit(resume_cases::resnet);
}

#[test]
fn adamw_resumed_mid_epoch_continues_its_moments_and_update_count() {
    resumes_bit_for_bit(resume_cases::adamw);
}

#[test]
fn adagrad_after_a_clip_resumed_mid_epoch_continues_its_sums_and_decay() {
    resumes_bit_for_bit(resume_cases::adagrad_clipped);
}

/// The case's clip clips: every epoch's mean norm before it is above the
/// largest norm (and a run without a clip reports none).
#[test]
fn a_clipped_run_reports_its_mean_gradient_norm_per_epoch() {
    let mut on_the_cpu = TrainConfig::default();
    on_the_cpu.device.request = DeviceRequest::Cpu;
    on_the_cpu.device.threads = 2;
    let case = resume_cases::adagrad_clipped(&on_the_cpu);
    let clipped = resume_cases::run(&case.cfg, None);
    clipped.ended.as_ref().expect("the run ends");
    for r in &clipped.reports {
        let norm = r.grad_norm.expect("a clipped run's epoch reports its norm");
        assert!(
            norm > 2.0 * resume_cases::ADAGRAD_CLIP as f64,
            "epoch {}: {norm}",
            r.epoch
        );
    }
    let plain = resume_cases::run(&resume_cases::mnist_cnn(&on_the_cpu).cfg, None);
    assert!(plain.reports.iter().all(|r| r.grad_norm.is_none()));
}

#[test]
fn a_warm_up_schedule_resumed_mid_epoch_continues_where_it_was() {
    resumes_bit_for_bit(resume_cases::warmup);
}

#[test]
fn augmentation_resumed_mid_epoch_continues_its_draws() {
    resumes_bit_for_bit(resume_cases::augment);
}

#[test]
fn a_run_under_a_memory_budget_resumed_mid_epoch_recomputes_as_before() {
    resumes_bit_for_bit(resume_cases::budget);
}
