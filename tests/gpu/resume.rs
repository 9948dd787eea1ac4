//! Resume on the GPU (issue 29): a run stopped and resumed from its
//! checkpoint against the same run uninterrupted. With deterministic
//! algorithms a GPU run repeats bit for bit: cuDNN's deterministic
//! convolutions, our own kernels summing in fixed orders (no atomics), and
//! a replayed step graph computing what the eager step computes
//! (`replaying_a_captured_step_gives_the_uncaptured_runs_loss_curve`). So
//! the resumed run is held to the uninterrupted one's bits, as on the CPU.
//! Each test prints how far apart its runs are before it compares them, so
//! that a failure shows the size of the difference (and a second
//! uninterrupted run shows whether the device repeats itself at all).

use super::*;
use bumpgrad::checkpoint::{self, Checkpoint};
use bumpgrad::train::{CheckpointPolicy, Every};
use std::path::{Path, PathBuf};

#[path = "../support/resume_cases.rs"]
mod resume_cases;

use resume_cases::Case;

/// A fresh directory under the system's temporary one.
fn scratch(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("bumpgrad-gpu-resume-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// Relative gap of `b` from `a`; 0 when they are equal.
fn rel(a: f64, b: f64) -> f64 {
    if a == b {
        0.0
    } else {
        (a - b).abs() / a.abs().max(f64::MIN_POSITIVE)
    }
}

/// The largest difference between the tensors of two checkpoints, relative
/// to the largest magnitude of its tensor, and that tensor's name.
fn worst_tensor(a: &Checkpoint, b: &Checkpoint) -> (f64, String) {
    let mut worst = (0.0, "none".to_string());
    for x in &a.tensors {
        let Some(y) = b.tensor(&x.name) else { continue };
        let scale = x.values.iter().fold(0.0f32, |m, v| m.max(v.abs())) as f64;
        let gap = x
            .values
            .iter()
            .zip(&y.values)
            .map(|(p, q)| (p - q).abs() as f64)
            .fold(0.0, f64::max);
        if gap > 0.0 && gap / scale.max(f64::MIN_POSITIVE) > worst.0 {
            worst = (gap / scale.max(f64::MIN_POSITIVE), x.name.clone());
        }
    }
    worst
}

/// A run resumed by `train` after epoch 1 trains epoch 2 alone, and with
/// deterministic algorithms gives the uninterrupted run's epoch 2 (loss and
/// accuracy) and final checkpoint bit for bit. (It compared them at 1e-4
/// with cuDNN's fastest heuristic algorithms, which may sum in another
/// order from run to run, when it was in `gpu.rs`.)
#[test]
fn a_run_resumed_on_the_gpu_continues_where_it_stopped() {
    let test = "gpu_resume";
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_probe) = gpu(test) else { return };
    drop(_probe);
    let cfg = |dir: &Path, epochs| {
        let mut cfg = gpu_config(epochs);
        cfg.run.train_limit = Some(3000);
        cfg.device.deterministic = true;
        cfg.run.checkpoints = Some(CheckpointPolicy {
            dir: dir.to_path_buf(),
            every: Some(Every::Epochs(1)),
            keep: 2,
        });
        cfg
    };
    let (straight, split) = (scratch("straight"), scratch("split"));
    let whole = train_on(&cfg(&straight, 2));
    train_on(&cfg(&split, 1));
    let resumed = train_on(&{
        let mut cfg = cfg(&split, 2);
        cfg.run.resume = Some(split.clone());
        cfg
    });
    // A resumed run starts at epoch 2; one that ignored the checkpoint
    // would train epochs 1 and 2 again.
    assert_eq!(
        resumed.iter().map(|r| r.epoch).collect::<Vec<_>>(),
        vec![2],
        "{test}: the resumed run skips the epoch it was given"
    );
    let newest = |d: &Path| checkpoint::latest_valid(d).unwrap().unwrap().checkpoint;
    let (a, b) = (newest(&straight), newest(&split));
    let (w, r) = (&whole[1], &resumed[0]);
    let (gap, name) = worst_tensor(&a, &b);
    let _ = writeln!(
        std::io::stderr(),
        "{test}: epoch 2 loss {} resumed against {} ({:.3e} relative), accuracy {} against {}, final state {gap:.3e} of its scale ({name})",
        r.train_loss,
        w.train_loss,
        rel(w.train_loss, r.train_loss),
        r.test_accuracy,
        w.test_accuracy
    );
    assert_eq!(
        (r.train_loss.to_bits(), r.test_accuracy.to_bits()),
        (w.train_loss.to_bits(), w.test_accuracy.to_bits()),
        "{test}: epoch 2's loss and accuracy, resumed against uninterrupted"
    );
    assert_eq!(a.step, b.step);
    let names = |c: &Checkpoint| c.tensors.iter().map(|t| t.name.clone()).collect::<Vec<_>>();
    assert_eq!(names(&a), names(&b), "{test}: the checkpoints hold other tensors");
    for (x, y) in a.tensors.iter().zip(&b.tensors) {
        let differs = x
            .values
            .iter()
            .zip(&y.values)
            .position(|(p, q)| p.to_bits() != q.to_bits());
        if let Some(i) = differs {
            panic!(
                "{test}: {}[{i}] is {} after resuming, {} uninterrupted",
                x.name, y.values[i], x.values[i]
            );
        }
    }
    let _ = (std::fs::remove_dir_all(&straight), std::fs::remove_dir_all(&split));
}

/// What every case asks of the GPU: deterministic algorithms (whose
/// convolutions are the heuristic's), steps captured as a graph.
fn on_the_gpu() -> TrainConfig {
    let mut cfg = TrainConfig::default();
    cfg.device.request = DeviceRequest::Cuda;
    cfg.device.deterministic = true;
    cfg.device.conv_algos = ConvAlgos::Heuristic;
    cfg.device.graph = Some(true);
    cfg
}

/// The case stopped mid-epoch after a periodic checkpoint and resumed from
/// it (`support/resume_cases.rs`, the CPU's body), against it run straight
/// through, and a second straight run against the first: prints both
/// spreads, then holds both pairs to the same bits.
fn resumes_bit_for_bit(test: &str, case: fn(&TrainConfig) -> Case) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_probe) = gpu(test) else { return };
    drop(_probe);
    let case = case(&on_the_gpu());
    let (straight, resumed) = resume_cases::stop_and_resume(&case);
    let again = resume_cases::run(&case.cfg, None);
    let from = resume_cases::resume_point(&case, straight.info.steps_per_epoch);
    let _ = writeln!(
        std::io::stderr(),
        "{test}: resumed at epoch {} step {} against uninterrupted: {}",
        from.0,
        from.1,
        resume_cases::spread(&straight, &resumed, from)
    );
    let _ = writeln!(
        std::io::stderr(),
        "{test}: a second uninterrupted run against the first: {}",
        resume_cases::spread(&straight, &again, (1, 0))
    );
    for (what, run) in [("uninterrupted", &straight), ("resumed", &resumed), ("again", &again)] {
        assert!(
            run.reports.iter().all(|r| r.graph),
            "{test}: the {what} run did not replay a captured step"
        );
    }
    let differ = resume_cases::differences(&straight, &again, (1, 0));
    assert!(
        differ.is_empty(),
        "{test}: two uninterrupted runs with deterministic algorithms differ (second against first):\n  {}",
        differ.join("\n  ")
    );
    resume_cases::assert_same_from(&case, &straight, &resumed);
}

#[test]
fn a_resnet_resumed_mid_epoch_on_the_gpu_gets_its_batch_norm_statistics_back() {
    resumes_bit_for_bit("gpu resume resnet", resume_cases::resnet);
}

#[test]
fn adamw_resumed_mid_epoch_on_the_gpu_continues_its_moments_and_update_count() {
    resumes_bit_for_bit("gpu resume adamw", resume_cases::adamw);
}

#[test]
fn adagrad_after_a_clip_resumed_mid_epoch_continues_its_sums_and_decay_on_the_gpu() {
    resumes_bit_for_bit("gpu resume adagrad clipped", resume_cases::adagrad_clipped);
}

#[test]
fn a_warm_up_schedule_resumed_mid_epoch_on_the_gpu_continues_where_it_was() {
    resumes_bit_for_bit("gpu resume warm-up", resume_cases::warmup);
}

#[test]
fn augmentation_resumed_mid_epoch_on_the_gpu_continues_its_draws() {
    resumes_bit_for_bit("gpu resume augment", resume_cases::augment);
}

#[test]
fn a_run_under_a_memory_budget_resumed_mid_epoch_on_the_gpu_recomputes_as_before() {
    resumes_bit_for_bit("gpu resume budget", resume_cases::budget);
}

#[test]
fn the_mnist_cnn_resumed_mid_epoch_on_the_gpu_continues_bit_for_bit() {
    resumes_bit_for_bit("gpu resume mnist cnn", resume_cases::mnist_cnn);
}
