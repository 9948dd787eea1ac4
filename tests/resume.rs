//! Checkpoints and resume on the CPU: an interrupted run, resumed, ends with
//! exactly the parameters of an uninterrupted one, and a damaged checkpoint
//! is skipped for the one before it.

use bumpgrad::backend::DeviceRequest;
use bumpgrad::checkpoint::{self, Checkpoint};
use bumpgrad::train::{train, train_until, CheckpointPolicy, EpochReport, Every, Observer, TrainConfig};
use bumpgrad::Error;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// A fresh directory under the system's temporary one.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bumpgrad-resume-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

fn config(dir: &Path, epochs: usize, every: Every) -> TrainConfig {
    TrainConfig {
        device: DeviceRequest::Cpu,
        epochs,
        batch: 50,
        threads: 2,
        data_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist").into(),
        train_limit: Some(1000),
        test_limit: Some(200),
        poison_step: Some(true),
        checkpoints: Some(CheckpointPolicy {
            dir: dir.to_path_buf(),
            every: Some(every),
            keep: 3,
        }),
        ..TrainConfig::default()
    }
}

fn newest(dir: &Path) -> Checkpoint {
    checkpoint::latest_valid(dir)
        .expect("readable")
        .expect("a checkpoint")
        .checkpoint
}

/// Collects reports and notes; sets `stop` once it has seen step `stop_after`.
struct Watch<'a> {
    stop: &'a AtomicBool,
    stop_after: Option<usize>,
    notes: Vec<String>,
    reports: Vec<EpochReport>,
}

impl Observer for Watch<'_> {
    fn step(&mut self, _epoch: usize, step: usize, _loss: f32) {
        if Some(step) == self.stop_after {
            self.stop.store(true, Ordering::SeqCst);
        }
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
        notes: Vec::new(),
        reports: Vec::new(),
    }
}

fn assert_same_state(a: &Checkpoint, b: &Checkpoint) {
    assert_eq!(a.step, b.step);
    assert_eq!(a.tensors.len(), b.tensors.len());
    for (x, y) in a.tensors.iter().zip(&b.tensors) {
        assert_eq!(x.name, y.name);
        let same = x.values.iter().zip(&y.values).all(|(p, q)| p.to_bits() == q.to_bits());
        assert!(same, "{} differs", x.name);
    }
}

#[test]
fn one_epoch_then_resume_equals_two_epochs_straight_bit_for_bit() {
    let (straight, split) = (scratch("straight"), scratch("split"));
    let reports = train(&config(&straight, 2, Every::Epochs(1)), &mut bumpgrad::train::Quiet).unwrap();
    train(&config(&split, 1, Every::Epochs(1)), &mut bumpgrad::train::Quiet).unwrap();
    let stop = AtomicBool::new(false);
    let mut seen = watch(&stop, None);
    let resumed_cfg = TrainConfig {
        resume: Some(split.clone()),
        ..config(&split, 2, Every::Epochs(1))
    };
    train_until(&resumed_cfg, &mut seen, &stop).unwrap();
    assert!(
        seen.notes.iter().any(|n| n.contains("resuming from")),
        "{:?}",
        seen.notes
    );
    assert_eq!(seen.reports.len(), 1, "only epoch 2 runs again");
    assert_eq!(seen.reports[0].train_loss, reports[1].train_loss);
    assert_same_state(&newest(&straight), &newest(&split));
    let names: Vec<_> = newest(&split).tensors.iter().map(|t| t.name.clone()).collect();
    for want in [
        "conv1.weight",
        "conv2.weight",
        "fc1.weight",
        "fc1.bias",
        "fc2.weight",
        "fc2.bias",
    ] {
        assert!(names.iter().any(|n| n == want), "{want} missing from {names:?}");
    }
}

#[test]
fn a_stop_mid_epoch_checkpoints_and_the_resumed_run_ends_identically() {
    let (straight, stopped) = (scratch("mid-straight"), scratch("mid-stopped"));
    let every = Every::Steps(7);
    train(&config(&straight, 2, every), &mut bumpgrad::train::Quiet).unwrap();
    // The observer hears of steps at each read-back (here each checkpoint,
    // every 7 steps); the loop stops after the step it is running then.
    let stop = AtomicBool::new(false);
    let mut seen = watch(&stop, Some(5));
    let err = train_until(&config(&stopped, 2, every), &mut seen, &stop).unwrap_err();
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
    assert!(err.to_string().contains("--resume"), "{err}");
    assert_eq!(newest(&stopped).step, 8);

    let stop = AtomicBool::new(false);
    let mut seen = watch(&stop, None);
    let resumed = TrainConfig {
        resume: Some(stopped.clone()),
        ..config(&stopped, 2, every)
    };
    train_until(&resumed, &mut seen, &stop).unwrap();
    // Both runs' last checkpoints are at step 35 (every 7 of 40 steps).
    assert_same_state(&newest(&straight), &newest(&stopped));
}

#[test]
fn a_damaged_newest_checkpoint_is_skipped_for_the_one_before() {
    let (straight, damaged) = (scratch("dmg-straight"), scratch("dmg"));
    train(&config(&straight, 2, Every::Epochs(1)), &mut bumpgrad::train::Quiet).unwrap();
    train(&config(&damaged, 2, Every::Epochs(1)), &mut bumpgrad::train::Quiet).unwrap();
    // Cut the newest (epoch 2) in half: a crash mid-copy, a full disk.
    let newest_path = checkpoint::latest_valid(&damaged).unwrap().unwrap().path;
    let bytes = std::fs::read(&newest_path).unwrap();
    std::fs::write(&newest_path, &bytes[..bytes.len() / 2]).unwrap();
    let stop = AtomicBool::new(false);
    let mut seen = watch(&stop, None);
    let resumed = TrainConfig {
        resume: Some(damaged.clone()),
        ..config(&damaged, 2, Every::Epochs(1))
    };
    train_until(&resumed, &mut seen, &stop).unwrap();
    assert!(
        seen.notes
            .iter()
            .any(|n| n.contains("skipped") && n.contains(newest_path.to_str().unwrap())),
        "{:?}",
        seen.notes
    );
    assert_eq!(seen.reports.len(), 1, "epoch 2 runs again from epoch 1's checkpoint");
    assert_same_state(&newest(&straight), &newest(&damaged));
}

#[test]
fn a_checkpoint_from_other_settings_is_refused() {
    let dir = scratch("other");
    train(&config(&dir, 1, Every::Epochs(1)), &mut bumpgrad::train::Quiet).unwrap();
    let other = TrainConfig {
        batch: 100,
        resume: Some(dir.clone()),
        ..config(&dir, 2, Every::Epochs(1))
    };
    let err = train(&other, &mut bumpgrad::train::Quiet).unwrap_err().to_string();
    assert!(err.contains("--batch") && err.contains("cannot resume"), "{err}");
}

#[test]
fn a_diverging_run_stops_at_the_step_and_keeps_the_last_good_checkpoint() {
    let dir = scratch("diverge");
    let cfg = TrainConfig {
        lr: 1e5,
        ..config(&dir, 2, Every::Steps(1))
    };
    let err = train(&cfg, &mut bumpgrad::train::Quiet).unwrap_err();
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
