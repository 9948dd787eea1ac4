//! A run stopped mid-epoch and resumed from its checkpoint, against the same
//! run uninterrupted, for each kind of state a checkpoint must carry or a
//! resumed run must rebuild: batch-norm running statistics and
//! `num_batches_tracked` (a ResNet), AdamW's moments and update count,
//! Adagrad's sums and decaying rate after a gradient clip, a
//! warm-up schedule's place, augmentation draws, and a step recomputed
//! under a memory budget. One body for every case and device: the CPU test
//! (`tests/resume.rs`) holds the runs to the same bits; the GPU test
//! (`tests/gpu/resume.rs`) runs them with deterministic algorithms, prints
//! how far apart they are, and holds them to the same bits too.
//!
//! Each case writes a checkpoint every `every` steps, a number that does
//! not divide the epoch's steps, so checkpoints fall mid-epoch. Its run is
//! asked to stop right after the checkpoint at `resume_at` steps (in epoch
//! 2); it stops one step later with a checkpoint of its own, which is then
//! removed, as if the process had been killed: the resumed run starts from
//! the periodic checkpoint. The runs are driven here as `train::train`
//! drives them (the pipeline's session, resume from the newest valid
//! checkpoint, epochs),
//! so that the final state can be read from the session itself.

// Each test binary that includes this file uses part of it.
#![allow(dead_code)]

use bumpgrad::checkpoint::{self, NamedTensor};
use bumpgrad::models::{Depth, ResNet};
use bumpgrad::nn::Kind;
use bumpgrad::optim::{AdagradConfig, AdamWConfig, ClipGradNorm, Schedule, SgdConfig};
use bumpgrad::train::{
    CheckpointPolicy, Control, EpochReport, Every, Observer, Pipeline, Position, RunInfo, TrainConfig,
};
use bumpgrad::Error;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};

/// One run to stop and resume.
pub struct Case {
    pub name: &'static str,
    /// The run, without checkpoints or resume.
    pub cfg: TrainConfig,
    /// Steps between periodic checkpoints: not a divisor of the epoch's.
    pub every: u64,
    /// The checkpoint resumed from, in steps done: mid-epoch in epoch 2.
    pub resume_at: u64,
    /// Endings of tensor names the state must hold (what the case is
    /// about: `num_batches_tracked`, `exp_avg`, ...).
    pub holds: &'static [&'static str],
}

/// The run every case changes: 300 training images in steps of 32 (nine
/// full, then one of 12), 100 test images, two epochs, the MNIST CNN with
/// SGD and momentum, on what `on` asks for (device, threads, algorithms).
fn small(on: &TrainConfig) -> TrainConfig {
    let mut cfg = on.clone();
    cfg.run.epochs = 2;
    cfg.run.batch = 32;
    cfg.run.data_dir = concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist").into();
    cfg.run.train_limit = Some(300);
    cfg.run.test_limit = Some(100);
    cfg.memory.poison_step = Some(true);
    cfg.run.optimizer = SgdConfig::default().momentum(0.9).choice();
    cfg.run.checkpoints = None;
    cfg.run.resume = None;
    cfg
}

/// A ResNet-18 at an eighth of its width on 128 images (five steps of 24,
/// then one of 8): its batch norms' running statistics and
/// `num_batches_tracked` live in the parameter store's buffers, which no
/// training loss reads (a step normalises by its batch's statistics), so
/// only the final state shows whether they came back (the test accuracy,
/// which reads them, is near chance after these 12 steps: 8 to 11%).
pub fn resnet(on: &TrainConfig) -> Case {
    Case {
        name: "resnet",
        cfg: {
            let mut cfg = small(on);
            cfg.run.model = ResNet::choice(Depth::R18, 0.125);
            cfg.run.batch = 24;
            cfg.run.train_limit = Some(128);
            cfg
        },
        every: 4,
        resume_at: 8,
        holds: &["running_mean", "running_var", "num_batches_tracked", "momentum_buffer"],
    }
}

/// AdamW: its two moments are checkpointed; its update count, which sets
/// the bias corrections, is the step cursor's global step, which a resume
/// sets from the checkpoint's step.
pub fn adamw(on: &TrainConfig) -> Case {
    Case {
        name: "adamw",
        cfg: {
            let mut cfg = small(on);
            cfg.run.optimizer = AdamWConfig::default().choice();
            cfg.run.lr = 1e-3;
            cfg
        },
        every: 4,
        resume_at: 16,
        holds: &["exp_avg", "exp_avg_sq"],
    }
}

/// Adagrad with every knob, its gradients clipped to a norm of 0.5 (the
/// MNIST CNN's are larger at every step: checked where the case runs): its
/// sums are checkpointed; its rate decays with the update count, the step
/// cursor's global step, which a resume sets from the checkpoint's step.
pub const ADAGRAD_CLIP: f32 = 0.5;

pub fn adagrad_clipped(on: &TrainConfig) -> Case {
    Case {
        name: "adagrad clipped",
        cfg: {
            let mut cfg = small(on);
            let adagrad = AdagradConfig::default()
                .lr_decay(0.05)
                .weight_decay(1e-4)
                .initial_accumulator_value(0.1)
                .eps(1e-10);
            cfg.run.optimizer = ClipGradNorm::around(adagrad.choice(), ADAGRAD_CLIP);
            cfg.run.lr = 0.01;
            cfg
        },
        every: 4,
        resume_at: 16,
        holds: &["sum"],
    }
}

/// A warm-up of 1.5 epochs (15 of the 20 steps) before a cosine: the
/// resume at step 12 falls inside the warm-up and the run goes on past its
/// end, so a rate table that started over, or was shifted, gives other
/// rates at every resumed step.
pub fn warmup(on: &TrainConfig) -> Case {
    Case {
        name: "warm-up + cosine",
        cfg: {
            let mut cfg = small(on);
            cfg.run.schedule = "cosine"
                .parse::<Schedule>()
                .expect("a schedule")
                .with_warmup(1.5)
                .expect("a warm-up");
            cfg
        },
        every: 4,
        resume_at: 12,
        holds: &["momentum_buffer"],
    }
}

/// `--augment crop4,flip`: each image's crop and flip are drawn from the
/// global step's seed, which a resumed run must continue, not restart.
pub fn augment(on: &TrainConfig) -> Case {
    Case {
        name: "crop4,flip",
        cfg: {
            let mut cfg = small(on);
            cfg.run.task = bumpgrad::tasks::Classification::choice(bumpgrad::tasks::ClassificationConfig {
                augment: "crop4,flip".parse().expect("an augmentation"),
                ..Default::default()
            });
            cfg
        },
        every: 4,
        resume_at: 16,
        holds: &["momentum_buffer"],
    }
}

/// The ResNet case under 80% of its own planned step: some convolution
/// outputs are recomputed in backward (5 of 28 on the CPU), in the resumed
/// run as in the uninterrupted one (checked: see [`assert_same_from`]). A
/// tighter budget recomputes more but costs seconds more in the planner's
/// search at every start (60%: about 3 s on the CPU, against 0.6 s).
pub fn budget(on: &TrainConfig) -> Case {
    let resnet = resnet(on);
    let (free, _) = bumpgrad::train::memory_report(&resnet.cfg).expect("the ResNet's plan");
    Case {
        name: "resnet under a memory budget",
        cfg: {
            let mut cfg = resnet.cfg;
            cfg.memory.memory_budget = Some(free.plan_peak_bytes * 8 / 10);
            cfg
        },
        ..resnet
    }
}

/// The MNIST CNN with SGD and momentum, as `tests/resume.rs`'s own tests
/// run it on the CPU.
pub fn mnist_cnn(on: &TrainConfig) -> Case {
    Case {
        name: "mnist cnn",
        cfg: small(on),
        every: 4,
        resume_at: 16,
        holds: &["momentum_buffer"],
    }
}

/// Every case, for a loop over them.
pub const CASES: [fn(&TrainConfig) -> Case; 6] = [resnet, adamw, warmup, augment, budget, mnist_cnn];

/// What a run reported and the state it ended in.
pub struct Run {
    /// (epoch, step in epoch, loss) of every step, as heard.
    pub steps: Vec<(usize, usize, f32)>,
    /// (epoch, first step) of every epoch the run entered.
    pub starts: Vec<(usize, usize)>,
    pub reports: Vec<EpochReport>,
    pub info: RunInfo,
    /// How the run ended: done, or stopped ([`Error::Interrupted`]).
    pub ended: bumpgrad::Result<()>,
    /// The parameters, buffers and optimizer state at the end, read from
    /// the session's arena, by name.
    pub state: Vec<NamedTensor>,
    /// The name of every tensor the state must hold, from the model's
    /// declarations and the optimizer's state (not from the code that
    /// gathers the state, so that a tensor it left out is missed).
    pub declared: Vec<String>,
    pub steps_done: u64,
}

/// Hears a run; sets `stop` once step `stop_after` (epoch, step) is heard.
struct Watch<'a> {
    stop: &'a AtomicBool,
    stop_after: Option<(usize, usize)>,
    steps: Vec<(usize, usize, f32)>,
    starts: Vec<(usize, usize)>,
    reports: Vec<EpochReport>,
}

impl Observer for Watch<'_> {
    fn step(&mut self, epoch: usize, step: usize, loss: f32) {
        self.steps.push((epoch, step, loss));
        if self.stop_after == Some((epoch, step)) {
            self.stop.store(true, Ordering::SeqCst);
        }
    }
    fn resumed_at(&mut self, epoch: usize, step: usize) {
        self.starts.push((epoch, step));
    }
    fn epoch(&mut self, r: &EpochReport) {
        self.reports.push(r.clone());
    }
}

/// Runs `cfg` as `train::train` does, from the newest valid checkpoint in
/// `cfg.run.resume` if there is one, asking it to stop once it has heard step
/// `stop_after`; returns what it reported and its final state.
pub fn run(cfg: &TrainConfig, stop_after: Option<(usize, usize)>) -> Run {
    let (mut session, info) = Pipeline::open(cfg, None)
        .and_then(Pipeline::build)
        .unwrap_or_else(|e| panic!("prepare: {e}"));
    let start = match &cfg.run.resume {
        Some(dir) => {
            let latest = checkpoint::latest_valid(dir)
                .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
                .unwrap_or_else(|| panic!("no checkpoint in {}", dir.display()));
            session
                .resume(&latest.checkpoint)
                .unwrap_or_else(|e| panic!("resume from {}: {e}", latest.path.display()))
        }
        None => Position::default(),
    };
    let stop = AtomicBool::new(false);
    let mut seen = Watch {
        stop: &stop,
        stop_after,
        steps: Vec::new(),
        starts: Vec::new(),
        reports: Vec::new(),
    };
    let control = Control {
        stop: &stop,
        checkpoints: cfg.run.checkpoints.as_ref(),
        config_json: "{}",
        progress: None,
    };
    let ended = session.on_workers(|session| {
        for epoch in start.epochs_done + 1..=cfg.run.epochs {
            let from = match epoch == start.epochs_done + 1 {
                true => start,
                false => Position::epoch_start(epoch - 1),
            };
            session.epoch_from(epoch, from, &mut seen, &control)?;
        }
        Ok(())
    });
    let entries = session.store().entries();
    let mut declared: Vec<String> = entries.iter().map(|e| e.name.clone()).collect();
    for (state, _) in session.optimizer().state() {
        for e in entries.iter().filter(|e| e.kind == Kind::Param) {
            declared.push(checkpoint::optimizer_state_name(&e.name, state));
        }
    }
    Run {
        steps: seen.steps,
        starts: seen.starts,
        reports: seen.reports,
        info,
        ended,
        state: session.state_tensors().expect("read the state"),
        declared,
        steps_done: session.steps_done(),
    }
}

/// A fresh directory under the system's temporary one.
pub fn scratch(name: &str) -> PathBuf {
    let name: String = name
        .chars()
        .map(|c| if c.is_alphanumeric() { c } else { '-' })
        .collect();
    let dir = std::env::temp_dir().join(format!("bumpgrad-resume-case-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    dir
}

/// `case.cfg` writing its checkpoints into `dir`.
pub fn checkpointed(case: &Case, dir: &Path) -> TrainConfig {
    let mut cfg = case.cfg.clone();
    cfg.run.checkpoints = Some(CheckpointPolicy {
        dir: dir.to_path_buf(),
        every: Some(Every::Steps(case.every)),
        keep: 3,
    });
    cfg
}

/// Where a resumed run of `case` starts: (epoch, step in epoch).
pub fn resume_point(case: &Case, steps_per_epoch: usize) -> (usize, usize) {
    let at = case.resume_at as usize;
    (at / steps_per_epoch + 1, at % steps_per_epoch)
}

/// The case run straight through, and stopped after its checkpoint at
/// `resume_at` and resumed from it; checks that the stop and the resume
/// happened where they should.
pub fn stop_and_resume(case: &Case) -> (Run, Run) {
    let name = case.name;
    let (straight_dir, split_dir) = (scratch(&format!("{name}-straight")), scratch(name));
    let straight = run(&checkpointed(case, &straight_dir), None);
    straight.ended.as_ref().unwrap_or_else(|e| panic!("{name}: {e}"));
    let steps = straight.info.steps_per_epoch;
    assert_eq!(straight.reports.len(), 2, "{name}: two epochs");
    assert!(
        !(steps as u64).is_multiple_of(case.every) && case.resume_at.is_multiple_of(case.every),
        "{name}: a checkpoint every {} steps of {steps} must fall mid-epoch, and one at step {}",
        case.every,
        case.resume_at
    );
    let (epoch, step) = resume_point(case, steps);
    assert!(
        epoch == 2 && step > 0 && step + 1 < steps,
        "{name}: step {} is not mid-epoch in epoch 2 of {steps} steps an epoch",
        case.resume_at
    );

    // Stopped once the checkpoint at `resume_at` is written: the observer
    // hears the steps before it when they are read back for it.
    let stopped = run(&checkpointed(case, &split_dir), Some((epoch, step - 1)));
    match &stopped.ended {
        Err(Error::Interrupted {
            epoch: e,
            step: s,
            checkpoint: Some(path),
        }) if (*e, *s) == (epoch, step + 1) => {
            std::fs::remove_file(path).unwrap_or_else(|err| panic!("{}: {err}", path.display()))
        }
        other => panic!(
            "{name}: expected a stop at epoch {epoch} step {} with a checkpoint, got {other:?}",
            step + 1
        ),
    }
    let resumed = run(
        &{
            let mut cfg = checkpointed(case, &split_dir);
            cfg.run.resume = Some(split_dir.clone());
            cfg
        },
        None,
    );
    resumed
        .ended
        .as_ref()
        .unwrap_or_else(|e| panic!("{name}, resumed: {e}"));
    assert_eq!(
        resumed.starts,
        [(epoch, step)],
        "{name}: the resumed run starts at the checkpoint at step {}, mid-epoch",
        case.resume_at
    );
    let _ = (
        std::fs::remove_dir_all(&straight_dir),
        std::fs::remove_dir_all(&split_dir),
    );
    (straight, resumed)
}

/// Every difference of `b` from `a` (the reference) from step `from` on,
/// each written "`b`'s value against `a`'s": step losses, epoch losses and
/// accuracies, steps done, and the final state tensor by tensor, bit for
/// bit; empty when they are the same run.
pub fn differences(a: &Run, b: &Run, from: (usize, usize)) -> Vec<String> {
    let mut out = Vec::new();
    let want: Vec<_> = a.steps.iter().filter(|s| (s.0, s.1) >= from).collect();
    if want.len() != b.steps.len() {
        out.push(format!(
            "{} steps heard from epoch {} step {} on, {} expected",
            b.steps.len(),
            from.0,
            from.1,
            want.len()
        ));
    }
    for (w, g) in want.iter().zip(&b.steps) {
        if (w.0, w.1) != (g.0, g.1) {
            out.push(format!(
                "heard epoch {} step {} where epoch {} step {} was due",
                g.0, g.1, w.0, w.1
            ));
        } else if w.2.to_bits() != g.2.to_bits() {
            out.push(format!("epoch {} step {}: loss {} against {}", g.0, g.1, g.2, w.2));
        }
    }
    let want: Vec<_> = a.reports.iter().filter(|r| r.epoch >= from.0).collect();
    if want.len() != b.reports.len() {
        out.push(format!("{} epoch reports, {} expected", b.reports.len(), want.len()));
    }
    for (w, g) in want.iter().zip(&b.reports) {
        if g.train_loss.to_bits() != w.train_loss.to_bits() {
            out.push(format!(
                "epoch {}: loss {} against {}",
                g.epoch, g.train_loss, w.train_loss
            ));
        }
        if g.test_accuracy.to_bits() != w.test_accuracy.to_bits() {
            out.push(format!(
                "epoch {}: test accuracy {} against {}",
                g.epoch, g.test_accuracy, w.test_accuracy
            ));
        }
    }
    if a.steps_done != b.steps_done {
        out.push(format!("{} steps done against {}", b.steps_done, a.steps_done));
    }
    for t in &b.state {
        let Some(w) = a.state.iter().find(|w| w.name == t.name) else {
            out.push(format!("{} is not in the other state", t.name));
            continue;
        };
        if w.shape != t.shape {
            out.push(format!("{} is {:?} against {:?}", t.name, t.shape, w.shape));
            continue;
        }
        let differ: Vec<usize> = (0..t.values.len())
            .filter(|&i| t.values[i].to_bits() != w.values[i].to_bits())
            .collect();
        if let Some(&i) = differ.first() {
            out.push(format!(
                "{}: {} of {} values differ, [{i}] is {} against {}",
                t.name,
                differ.len(),
                t.values.len(),
                t.values[i],
                w.values[i]
            ));
        }
    }
    for w in a.state.iter().filter(|w| !b.state.iter().any(|t| t.name == w.name)) {
        out.push(format!("{} is missing", w.name));
    }
    out
}

/// How far apart `b` is from `a` (the reference) from step `from` on: the
/// largest relative gap of a step's loss, of an epoch's loss, the largest
/// gap in test accuracy, and the largest gap of a state tensor's value
/// relative to the largest magnitude in that tensor, with its name.
pub fn spread(a: &Run, b: &Run, from: (usize, usize)) -> String {
    let rel = |x: f64, y: f64| {
        if x == y {
            0.0
        } else {
            (x - y).abs() / x.abs().max(f64::MIN_POSITIVE)
        }
    };
    let want = a.steps.iter().filter(|s| (s.0, s.1) >= from);
    let step = want
        .zip(&b.steps)
        .map(|(w, g)| rel(w.2 as f64, g.2 as f64))
        .fold(0.0, f64::max);
    let want: Vec<_> = a.reports.iter().filter(|r| r.epoch >= from.0).collect();
    let epoch = want
        .iter()
        .zip(&b.reports)
        .map(|(w, g)| rel(w.train_loss, g.train_loss))
        .fold(0.0, f64::max);
    let accuracy = want
        .iter()
        .zip(&b.reports)
        .map(|(w, g)| (w.test_accuracy - g.test_accuracy).abs())
        .fold(0.0, f64::max);
    let mut worst = (0.0f64, "none");
    for t in &b.state {
        let Some(w) = a.state.iter().find(|w| w.name == t.name) else {
            continue;
        };
        let scale = w.values.iter().fold(0.0f32, |m, v| m.max(v.abs())) as f64;
        let gap = w
            .values
            .iter()
            .zip(&t.values)
            .map(|(x, y)| (x - y).abs() as f64)
            .fold(0.0, f64::max);
        let gap = if gap == 0.0 {
            0.0
        } else {
            gap / scale.max(f64::MIN_POSITIVE)
        };
        if gap > worst.0 {
            worst = (gap, &t.name);
        }
    }
    format!(
        "step loss {step:.3e}, epoch loss {epoch:.3e} (relative), test accuracy {accuracy:.4}, state {:.3e} of its scale ({})",
        worst.0, worst.1
    )
}

/// The state holds every declared tensor and nothing else, with what the
/// case is about among them; every `num_batches_tracked` counts the run's
/// steps.
pub fn assert_whole_state(what: &str, case: &Case, run: &Run) {
    let mut held: Vec<&str> = run.state.iter().map(|t| t.name.as_str()).collect();
    let mut declared: Vec<&str> = run.declared.iter().map(String::as_str).collect();
    held.sort_unstable();
    declared.sort_unstable();
    let missing: Vec<_> = declared.iter().filter(|n| !held.contains(n)).collect();
    let extra: Vec<_> = held.iter().filter(|n| !declared.contains(n)).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{what}: the state lacks {missing:?} and has {extra:?} beyond what the model and optimizer declare"
    );
    for ending in case.holds {
        assert!(
            held.iter().any(|n| n.ends_with(ending)),
            "{what}: no {ending} in the state: {held:?}"
        );
    }
    for t in run.state.iter().filter(|t| t.name.ends_with("num_batches_tracked")) {
        assert_eq!(
            t.values,
            [run.steps_done as f32],
            "{what}: {} after {} steps",
            t.name,
            run.steps_done
        );
    }
}

/// The resumed run is the uninterrupted one from its resume point on: the
/// same bits in every later step's loss, every later epoch's loss and
/// accuracy, and every tensor of the final state; both states whole; and
/// under a memory budget, both runs recomputed within it.
pub fn assert_same_from(case: &Case, straight: &Run, resumed: &Run) {
    let name = case.name;
    assert_whole_state(&format!("{name}, uninterrupted"), case, straight);
    assert_whole_state(&format!("{name}, resumed"), case, resumed);
    if let Some(budget) = case.cfg.memory.memory_budget {
        for (what, run) in [("uninterrupted", straight), ("resumed", resumed)] {
            let recomputed = run.info.recomputed.as_ref().map_or(0, |r| r.dropped.len());
            assert!(recomputed > 0, "{name}, {what}: nothing recomputed");
            for r in &run.reports {
                assert!(
                    r.arena.step_high_water_bytes <= budget,
                    "{name}, {what}, epoch {}: step {} above the budget {budget}",
                    r.epoch,
                    r.arena.step_high_water_bytes
                );
            }
        }
    }
    let from = resume_point(case, straight.info.steps_per_epoch);
    let differ = differences(straight, resumed, from);
    assert!(
        differ.is_empty(),
        "{name}: resumed at epoch {} step {}, the run differs from the uninterrupted one (resumed against uninterrupted):\n  {}",
        from.0,
        from.1,
        differ.join("\n  ")
    );
}
