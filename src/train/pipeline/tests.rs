//! The pipeline's refusals come from dry runs, before its one allocation.

use super::arenas::REAL_ARENAS;
use super::Pipeline;
use crate::models::{Depth, ResNet};
use crate::train::{DeviceConfig, MemoryConfig, RunConfig, TrainConfig};
use crate::{Error, Setting};

/// A small ResNet-18 on the CPU under `budget`, in `arena` bytes if given.
fn small(budget: Option<usize>, arena: Option<usize>) -> TrainConfig {
    TrainConfig {
        run: RunConfig {
            model: ResNet::choice(Depth::R18, 0.125),
            data_dir: "synthetic:cifar10:96".into(),
            batch: 16,
            epochs: 1,
            test_limit: Some(16),
            ..RunConfig::default()
        },
        memory: MemoryConfig {
            memory_budget: budget,
            arena_size: arena,
            ..MemoryConfig::default()
        },
        device: DeviceConfig::cpu(2),
    }
}

/// Builds `cfg`'s session; the error if refused, and the real arenas made
/// meanwhile.
fn build(cfg: &TrainConfig) -> (Option<Error>, usize) {
    let before = REAL_ARENAS.with(|n| n.get());
    let built = Pipeline::open(cfg, None).and_then(|p| p.build());
    (built.err(), REAL_ARENAS.with(|n| n.get()) - before)
}

/// A budget below the least that works, and a budget with an arena too
/// small for its step, are refused before the arena is made: nothing is
/// allocated on the device first. A run that fits makes its one arena.
#[test]
fn a_budget_out_of_reach_or_an_arena_too_small_for_it_is_refused_before_the_arena_is_made() {
    let (free, _) = crate::train::memory_report(&small(None, None)).unwrap();
    let (peak, persistent) = (free.plan_peak_bytes, free.persistent_bytes);
    let (err, arenas) = build(&small(Some(peak / 20), None));
    match err {
        Some(Error::Setting {
            setting: Setting::MemoryBudget,
            fix: Some(fix),
            ..
        }) => assert!(fix.ends_with("MiB or more"), "{fix}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(arenas, 0, "an arena was made before the budget was refused");
    let (err, arenas) = build(&small(Some(peak * 7 / 10), Some(persistent + peak / 2)));
    match err {
        Some(Error::Setting {
            setting: Setting::ArenaSize,
            problem,
            fix: Some(_),
        }) => assert!(problem.contains("the arena is the one to raise"), "{problem}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(arenas, 0, "an arena was made before the arena size was refused");
    let (err, arenas) = build(&small(Some(peak * 7 / 10), None));
    assert!(err.is_none(), "{err:?}");
    assert_eq!(arenas, 1);
}

/// What `measure` returns is ready to use: the engine
/// [`ArenaNeeds::engine`](super::ArenaNeeds::engine) makes runs the
/// measured steps, here with half the candidates recomputed, in exactly
/// the bytes measured. An arena of the same size made bare holds neither
/// the plans nor the recomputation, and its first step runs out of room.
#[test]
fn measured_needs_make_an_engine_that_runs_the_steps_measured() {
    use super::assemble::{assemble, Live};
    use super::StepChoice;
    use crate::backend::Device;
    use crate::{ArenaError, Engine};

    let cfg = small(None, None);
    let pipeline = Pipeline::open(&cfg, None).unwrap();
    let runs = pipeline.dry_runs();
    let plain = runs.plain().unwrap();
    let dropped: Vec<u32> = (0..plain.candidates.len() as u32).step_by(2).collect();
    let needs = runs.measure(&StepChoice::held(&dropped)).unwrap();
    assert!(
        needs.step_bytes < plain.step_bytes,
        "{} vs {}",
        needs.step_bytes,
        plain.step_bytes
    );
    let steps = |engine: Engine| assemble(&cfg, pipeline.data(), engine, Live::DRY)?.probe().map(drop);

    let engine = needs.engine(Device::cpu(2).unwrap()).unwrap();
    assert_eq!(engine.arena().capacity(), needs.total());
    steps(engine).expect("the steps measured fit the engine made for them");

    let bare = Engine::new(Device::cpu(2).unwrap(), needs.total()).unwrap();
    match steps(bare) {
        Err(Error::Arena(ArenaError::Exhausted { .. })) => {}
        other => panic!("a bare arena of the measured size held the steps: {other:?}"),
    }
}
