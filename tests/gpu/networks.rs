//! The networks on the GPU. A whole step of ResNet-18, ResNet-50 and
//! SqueezeNet: PyTorch's logits, loss, gradients and updated running
//! statistics (the fixtures of `bench/pytorch_steps.py`), and the CPU's,
//! within 1e-4 of scale. And 200 ResNet steps that allocate no device
//! memory but the arena.

use super::*;

#[path = "../support/pytorch_step.rs"]
mod pytorch_step;

use pytorch_step::Fixture;

#[test]
fn a_resnet18_step_on_the_gpu_matches_pytorch_and_the_cpu() {
    same_step_as_pytorch_and_the_cpu("resnet18_step", Fixture::ResNet18);
}

#[test]
fn a_resnet50_step_on_the_gpu_matches_pytorch_and_the_cpu() {
    same_step_as_pytorch_and_the_cpu("resnet50_step", Fixture::ResNet50);
}

#[test]
fn a_squeezenet_step_on_the_gpu_matches_pytorch_and_the_cpu() {
    same_step_as_pytorch_and_the_cpu("squeezenet_step", Fixture::SqueezeNet);
}

fn same_step_as_pytorch_and_the_cpu(test: &str, net: Fixture) {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu(test) else { return };
    let on_gpu = pytorch_step::bumpgrad_step(gpu, net);
    pytorch_step::assert_matches_pytorch("gpu", net, &on_gpu);
    let on_cpu = pytorch_step::bumpgrad_step(Device::cpu(2).expect("cpu"), net);
    let names = |t: &pytorch_step::Tensors| t.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&on_cpu),
        names(&on_gpu),
        "the backends returned different tensors"
    );
    for (name, (_, c)) in &on_cpu {
        assert_close(&format!("{test}: {name}"), c, &on_gpu[name].1);
    }
}

/// 200 training steps of ResNet-18 and of ResNet-50 at batch 128 on
/// CIFAR-10-shaped data, augmented on the device, with the step captured as
/// one graph: the arena is the one device allocation, and the step
/// high-water is the same every epoch.
#[test]
fn resnets_train_200_steps_without_moving_device_memory() {
    use bumpgrad::models::{Depth, ResNet};
    use bumpgrad::ops::gather::Augment;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_probe) = gpu("resnets_200_steps") else { return };
    drop(_probe);
    for depth in [Depth::R18, Depth::R50] {
        let reports = train_on(&{
            let mut cfg = TrainConfig::default();
            cfg.device.request = DeviceRequest::Cuda;
            cfg.run.model = ResNet::choice(depth, 1.0);
            cfg.run.data_dir = "synthetic:cifar10:6400".into();
            cfg.run.epochs = 4;
            cfg.run.batch = 128;
            cfg.run.lr = 0.1;
            cfg.run.task = bumpgrad::tasks::Classification::choice(bumpgrad::tasks::ClassificationConfig {
                augment: Augment { crop: 4, flip: true },
                ..Default::default()
            });
            cfg
        });
        assert_eq!(reports.len(), 4);
        assert_allocated_once(&format!("{depth:?}"), &reports);
        for r in &reports {
            assert!(r.graph, "{depth:?}: the step is captured");
            assert_eq!(
                r.arena.step_high_water_bytes, reports[0].arena.step_high_water_bytes,
                "{depth:?}, epoch {}: the step high-water moved",
                r.epoch
            );
        }
    }
}

/// A GPU run times its convolution algorithms before the first step and
/// plans the step with the timed choices' workspaces: the arena is the
/// measured one plus the headroom it announced, every step follows the
/// plan made after timing (its high-water is that plan's peak, to the
/// byte: a plan made before would have been left), and the losses are the
/// CPU's within the tests' tolerance. With deterministic convolutions
/// nothing is timed.
#[test]
fn timed_convolutions_are_planned_for_and_train_as_the_cpu_does() {
    use bumpgrad::train::{Pipeline, StepKind};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_probe) = gpu("timed_convolutions") else {
        return;
    };
    drop(_probe);
    let cfg = half_width_resnet18(128);
    let (session, info) = Pipeline::open(&cfg, None).and_then(Pipeline::build).expect("prepare");
    let tuning = info.conv_tuning.expect("a GPU times its convolutions");
    assert!(tuning.kept, "{tuning:?}");
    let memory = info.memory.as_ref().expect("a memory plan");
    let planned = memory
        .plans
        .iter()
        .find(|p| p.key == StepKind::Train as u32)
        .expect("a training plan")
        .peak;
    trains_on_its_plan_as_the_cpu(&cfg, session, planned);
    let mut deterministic = cfg;
    deterministic.device.deterministic = true;
    let (_, info) = Pipeline::open(&deterministic, None)
        .and_then(Pipeline::build)
        .expect("prepare");
    assert!(info.conv_tuning.is_none(), "deterministic runs time nothing");
}

/// A ResNet-18 at half width on synthetic CIFAR-10 on the GPU at `batch`,
/// with the default's timed convolutions and recomputation.
fn half_width_resnet18(batch: usize) -> TrainConfig {
    use bumpgrad::models::{Depth, ResNet};
    let mut cfg = TrainConfig::default();
    cfg.device.request = DeviceRequest::Cuda;
    cfg.run.model = ResNet::choice(Depth::R18, 0.5);
    cfg.run.data_dir = "synthetic:cifar10:1024".into();
    cfg.run.epochs = 2;
    cfg.run.batch = batch;
    cfg.run.lr = 0.02;
    cfg
}

/// Trains `session` (built from `cfg`) for its epochs: every step on its
/// plan, whose peak is `planned` (to the byte: a plan made before timing
/// would have been left), within the arena; the losses held to the CPU's
/// (random labels: accuracy is noise).
fn trains_on_its_plan_as_the_cpu(cfg: &TrainConfig, mut session: bumpgrad::train::Session, planned: usize) {
    let mut seen = Collect(Vec::new());
    let gpu = (1..=cfg.run.epochs)
        .map(|e| session.epoch(e, &mut seen).expect("epoch"))
        .collect::<Vec<_>>();
    for r in &gpu {
        assert_eq!(
            r.arena.step_high_water_bytes, planned,
            "epoch {} left its plan",
            r.epoch
        );
        assert!(r.arena.persistent_bytes + planned <= r.arena.capacity_bytes);
    }
    let cpu = train_on(&{
        let mut cfg = cfg.clone();
        cfg.device.request = DeviceRequest::Cpu;
        cfg
    });
    assert_same_losses("cpu vs gpu", &cpu, &gpu, 2e-3);
}

/// A narrow ResNet-18 on the GPU with heuristic algorithms (the same
/// every run), under `budget` if any; without one, every output kept (the
/// budgets are fractions of that step; the default's own recomputation is
/// tested below).
pub(crate) fn narrow_under(budget: Option<usize>) -> TrainConfig {
    use bumpgrad::models::{Depth, ResNet};
    let mut cfg = TrainConfig::default();
    cfg.device.request = DeviceRequest::Cuda;
    cfg.run.model = ResNet::choice(Depth::R18, 0.25);
    cfg.run.data_dir = "synthetic:cifar10:512".into();
    cfg.run.epochs = 2;
    cfg.run.batch = 64;
    cfg.run.lr = 0.02;
    cfg.device.conv_algos = bumpgrad::train::ConvAlgos::Heuristic;
    cfg.memory.memory_budget = budget;
    cfg.memory.recompute = bumpgrad::train::Recompute::Nothing;
    cfg
}

/// The default's recomputation of cheap outputs on the GPU, fp32 and bf16
/// (channels last): a narrow ResNet-18 with deterministic convolutions (so
/// that two runs compute the same bits) recomputes block outputs by
/// default, plans a smaller step than with every output kept, stays on
/// that plan, and trains bit for bit as the run that keeps them.
#[test]
fn by_default_block_outputs_are_recomputed_on_the_gpu_bit_for_bit() {
    use bumpgrad::backend::Precision;
    use bumpgrad::memory::RecomputeReason;
    use bumpgrad::train::{memory_report, Recompute};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_probe) = gpu("recompute_cheap") else {
        return;
    };
    drop(_probe);
    for precision in [Precision::Fp32, Precision::Bf16] {
        let mut kept = narrow_under(None);
        (kept.device.deterministic, kept.device.precision) = (true, precision);
        let mut cheap = kept.clone();
        cheap.memory.recompute = Recompute::Cheap;
        let (all, _) = memory_report(&kept).expect("plan keeping every output");
        let (fewer, _) = memory_report(&cheap).expect("plan by default");
        let r = fewer.recomputed.expect("the default recomputes");
        assert_eq!(r.reason, RecomputeReason::Cheap);
        assert!(r.dropped > 0 && r.extra_multiply_adds == 0, "{precision:?}: {r:?}");
        assert!(
            fewer.plan_peak_bytes < all.plan_peak_bytes,
            "{precision:?}: {} against {}",
            fewer.plan_peak_bytes,
            all.plan_peak_bytes
        );
        let (with, without) = (train_on(&cheap), train_on(&kept));
        for (a, b) in with.iter().zip(&without) {
            assert_eq!(
                a.train_loss.to_bits(),
                b.train_loss.to_bits(),
                "{precision:?}, epoch {}",
                a.epoch
            );
            assert_eq!(a.arena.step_high_water_bytes, fewer.plan_peak_bytes, "{precision:?}");
            assert_eq!(b.arena.step_high_water_bytes, all.plan_peak_bytes, "{precision:?}");
        }
        assert_eq!(with.len(), 2);
    }
}

/// The default's search for a smaller step (`--recompute lean`) on a GPU
/// that times its convolutions: `bumpgrad memory` reports the search as
/// the run does; the step the run keeps is within the budget it was kept
/// for and its predicted cost within what the search allowed; the run
/// stays on that plan, and trains as the CPU does (which recomputes only
/// what it would anyway: the recomputed outputs are the same values). The
/// timings decide how far the search goes, so what it keeps is not
/// asserted, only that what it kept holds.
#[test]
fn the_default_keeps_a_smaller_step_within_its_allowance_and_trains_as_the_cpu() {
    use bumpgrad::memory::RecomputeReason;
    use bumpgrad::train::{memory_report, Pipeline};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_probe) = gpu("recompute_lean") else {
        return;
    };
    drop(_probe);
    let cfg = half_width_resnet18(256);
    assert_eq!(cfg.memory.recompute, bumpgrad::train::Recompute::Lean, "the default");
    let (report, _) = memory_report(&cfg).expect("plan by default");
    let reported = report.recomputed.expect("the default recomputes");
    let reported_search = reported
        .lean
        .expect("memory runs the default's search, as the run does");
    let (session, info) = Pipeline::open(&cfg, None).and_then(Pipeline::build).expect("prepare");
    let tuning = info.conv_tuning.expect("a GPU times its convolutions");
    let search = tuning.lean.expect("the run searched for a smaller step");
    let plan = info.recomputed.clone().expect("the run recomputes");
    let planned = training_plan_peak(&info);
    let _ = writeln!(
        std::io::stderr(),
        "recompute_lean: memory: {}; the run: {}; recomputes {:?} ({:?}), {:.3} ms predicted, step {planned}",
        reported_search.describe(),
        search.describe(),
        plan.dropped,
        plan.reason,
        plan.predicted_step_extra_seconds * 1e3
    );
    assert!(
        search.budgets_tried >= 1 && search.seconds <= search.bound_seconds + 1.0,
        "{search:?}"
    );
    assert!(
        plan.predicted_step_extra_seconds <= search.allowed_seconds * (1.0 + 1e-9),
        "{plan:?} {search:?}"
    );
    match search.fraction {
        Some(f) => {
            assert_eq!(plan.reason, RecomputeReason::Lean);
            assert!(
                planned as f64 <= (search.from_bytes as f64 * f).round(),
                "{planned} {search:?}"
            );
            if f < 1.0 {
                assert!(planned < search.from_bytes, "{planned} {search:?}");
            }
        }
        None => assert_eq!(plan.reason, RecomputeReason::Cheap),
    }
    trains_on_its_plan_as_the_cpu(&cfg, session, planned);
}

/// A memory budget on the GPU: a narrow ResNet-18 under 60% of its own
/// step recomputes convolution and block outputs (the relu masks of the
/// dropped block outputs then come from their residuals, kernels' mask 3),
/// stays within the budget in every epoch, and trains as the CPU does.
#[test]
fn a_memory_budget_trains_on_the_gpu_as_on_the_cpu() {
    use bumpgrad::train::memory_report;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_probe) = gpu("memory_budget") else {
        return;
    };
    drop(_probe);
    let cfg = narrow_under;
    let (free, _) = memory_report(&cfg(None)).expect("plan");
    let budget = free.plan_peak_bytes * 6 / 10;
    let (report, _) = memory_report(&cfg(Some(budget))).expect("plan under the budget");
    let kinds = report.recomputed.expect("recomputed").kinds;
    assert!(kinds.iter().all(|k| k.dropped > 0), "{kinds:?}");
    let gpu = train_on(&cfg(Some(budget)));
    for r in &gpu {
        assert!(
            r.arena.step_high_water_bytes <= budget,
            "epoch {}: {} above {budget}",
            r.epoch,
            r.arena.step_high_water_bytes
        );
    }
    // The CPU without a budget: with one it trains bit for bit the same
    // (tests/memory_budget.rs), and its own workspaces would plan another.
    let cpu = train_on(&{
        let mut cfg = cfg(None);
        cfg.device.request = DeviceRequest::Cpu;
        cfg
    });
    assert_same_losses("cpu vs gpu", &cpu, &gpu, 2e-3);
}

/// Under a budget near the least step, with timed convolutions (the
/// default): `bumpgrad memory` times the convolutions as the run does and
/// reports the run's own decision — what is recomputed chosen with the
/// timed algorithms' workspaces in view (a ladder of caps, each weighed by
/// recomputation plus cuDNN's timings), held workspaces priced. Both time
/// on the device, so a close call can fall either way between two
/// processes' timings; the two predictions agree within 25%, and the run
/// trains within the budget on its plan.
#[test]
fn held_workspaces_are_priced_and_the_run_recomputes_what_memory_reports() {
    use bumpgrad::models::{Depth, ResNet};
    use bumpgrad::train::{memory_report, Pipeline};
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_probe) = gpu("held_workspaces") else {
        return;
    };
    drop(_probe);
    let cfg = |budget: Option<usize>| {
        let mut cfg = TrainConfig::default();
        cfg.device.request = DeviceRequest::Cuda;
        cfg.run.model = ResNet::choice(Depth::R18, 0.5);
        cfg.run.data_dir = "synthetic:cifar10:1024".into();
        cfg.run.batch = 256;
        cfg.run.epochs = 2;
        cfg.memory.memory_budget = budget;
        cfg.memory.recompute = bumpgrad::train::Recompute::Nothing;
        cfg
    };
    let (free, _) = memory_report(&cfg(None)).expect("plan");
    // The tightest of a few fractions the step meets.
    let (budget, reported) = [30, 40, 50, 60]
        .iter()
        .map(|pct| free.plan_peak_bytes / 100 * pct)
        .find_map(|b| memory_report(&cfg(Some(b))).ok().map(|(r, _)| (b, r)))
        .expect("some budget fits");
    let reported = reported.recomputed.expect("the report says what is recomputed");
    let reported_workspaces = reported
        .workspace_extra_seconds
        .expect("memory timed the convolutions, as the run does");
    let (mut session, info) = Pipeline::open(&cfg(Some(budget)), None)
        .and_then(Pipeline::build)
        .expect("prepare");
    let tuning = info.conv_tuning.expect("a GPU times its convolutions");
    let followed = info.recomputed.clone().expect("the run recomputes");
    let _ = writeln!(
        std::io::stderr(),
        "held_workspaces: budget {budget}: {tuning:?}; memory recomputes {:?} ({} chains remade, {:.3} + {:.3} ms), the run {:?}",
        reported.which,
        reported.transient_chains,
        reported.predicted_extra_seconds * 1e3,
        reported_workspaces * 1e3,
        followed
    );
    assert!(tuning.kept, "{tuning:?}");
    assert!(tuning.seconds_lost >= 0.0 && tuning.seconds_lost < 1.0, "{tuning:?}");
    let memory_says = reported.predicted_extra_seconds + reported_workspaces;
    let run_says = followed.predicted_step_extra_seconds;
    assert!(
        (memory_says - run_says).abs() <= 0.25 * memory_says.max(run_says),
        "memory predicts {memory_says} s, the run {run_says} s"
    );
    if followed.dropped == reported.which {
        assert_eq!(followed.outputs, reported.outputs);
        assert_eq!(followed.chain_mode, reported.chain_mode);
    }
    assert_eq!(followed.workspace_extra_seconds, tuning.seconds_lost);
    assert_eq!(
        followed.predicted_step_extra_seconds,
        followed.predicted_extra_seconds + tuning.seconds_lost
    );
    let search = followed.search.expect("the run searched");
    assert!(
        !search.stopped_at_bound && search.seconds <= search.bound_seconds,
        "{search:?}"
    );
    let planned = training_plan_peak(&info);
    assert!(planned <= budget, "the plan's peak {planned} above the budget {budget}");
    // Every workspace in every plan says whose it is: what holding only
    // the peak's workspaces down reads.
    for plan in session.engine().arena().plans() {
        let workspaces: Vec<usize> = (0..plan.bufs.len())
            .filter(|&i| plan.bufs[i].what == "cuDNN workspace")
            .collect();
        let tagged: Vec<usize> = plan.tags.iter().map(|t| t.0).collect();
        assert!(!workspaces.is_empty(), "plan {}: no workspace", plan.key);
        assert_eq!(tagged, workspaces, "plan {}", plan.key);
    }
    let mut seen = Collect(Vec::new());
    for epoch in 1..=2 {
        let r = session.epoch(epoch, &mut seen).expect("epoch");
        assert_eq!(r.arena.step_high_water_bytes, planned, "epoch {epoch} left its plan");
        assert!(r.train_loss.is_finite(), "epoch {epoch}: loss {}", r.train_loss);
    }
}

/// The least step the GPU's planner finds (chains of drops remade for each
/// reader) trains on the GPU within it, as the CPU trains without a budget.
#[test]
fn the_least_step_trains_on_the_gpu_as_on_the_cpu() {
    use bumpgrad::train::memory_report;
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_probe) = gpu("least_step") else {
        return;
    };
    drop(_probe);
    let cfg = narrow_under;
    let err = memory_report(&cfg(Some(1 << 18))).expect_err("a quarter MiB fits no step");
    let bumpgrad::Error::Setting { fix: Some(fix), .. } = err else {
        panic!("{err}")
    };
    let least = fix.trim_end_matches("MiB or more").parse::<usize>().expect(&fix) << 20;
    let (report, _) = memory_report(&cfg(Some(least))).expect("the least budget");
    assert!(report.recomputed.expect("recomputed").transient_chains);
    let gpu = train_on(&cfg(Some(least)));
    for r in &gpu {
        assert!(r.arena.step_high_water_bytes <= least, "epoch {}", r.epoch);
    }
    let cpu = train_on(&{
        let mut cfg = cfg(None);
        cfg.device.request = DeviceRequest::Cpu;
        cfg
    });
    assert_same_losses("cpu vs gpu", &cpu, &gpu, 2e-3);
}
