//! Training under a memory budget (`MemoryConfig::memory_budget`, the CLI's
//! `--memory-budget`): convolution and block outputs are recomputed in backward
//! rather than kept, as few as bring the step within the budget, and the
//! run is the run without a budget, bit for bit on the CPU.

use bumpgrad::memory::RecomputeReason;
use bumpgrad::models::{Depth, ResNet};
use bumpgrad::train::{self, DeviceConfig, EpochReport, Hooks, Recompute, Reports, TrainConfig};
use bumpgrad::{ArenaError, ByteSize, Error, Setting};

fn config(budget: Option<usize>) -> TrainConfig {
    let mut cfg = TrainConfig::builder()
        .model(ResNet::choice(Depth::R18, 0.125))
        .data_dir("synthetic:cifar10:96")
        .batch(16)
        .epochs(2)
        .lr(0.05)
        .poison_step(true)
        .device_config(DeviceConfig::cpu(2))
        .build();
    cfg.memory.memory_budget = budget;
    // "Without a budget" here is the step that keeps every output: the
    // default's own cheap recomputation is tested on its own below.
    cfg.memory.recompute = Recompute::Nothing;
    cfg
}

/// Trains `cfg`, keeping every epoch's report.
fn trained(cfg: &TrainConfig) -> bumpgrad::Result<Vec<EpochReport>> {
    let mut reports = Reports::default();
    train::train(cfg, Hooks::new(&mut reports))?;
    Ok(reports.0)
}

const MIB: usize = 1 << 20;

/// Plans the step under `percent` of its unbudgeted peak, checks what the
/// report says, trains two epochs with and without the budget and checks
/// the losses are the same bits and the step stayed within the budget.
/// Returns the kinds recomputed, by what they are.
fn trains_as_without_under(percent: usize) -> Vec<(&'static str, usize)> {
    let (free, _) = train::memory_report(&config(None)).expect("plan");
    let unbudgeted = free.plan_peak_bytes;
    let budget = unbudgeted * percent / 100;
    let (report, _) = train::memory_report(&config(Some(budget))).expect("plan under a budget");
    let recomputed = report.recomputed.clone().expect("the report says what is recomputed");
    assert!(
        recomputed.dropped > 0 && recomputed.dropped < recomputed.candidates,
        "{recomputed:?}"
    );
    assert_eq!(recomputed.unbudgeted_step_bytes, unbudgeted);
    assert!(
        report.plan_peak_bytes <= budget,
        "{} > {budget}",
        report.plan_peak_bytes
    );
    // The bound is a bound: no choice, this one included, costs less.
    assert!(
        recomputed.least_extra_seconds <= recomputed.predicted_extra_seconds && recomputed.least_extra_seconds > 0.0,
        "{recomputed:?}"
    );
    let train = |cfg: TrainConfig| {
        let reports = trained(&cfg).expect("train");
        let losses: Vec<u64> = reports.iter().map(|r| r.train_loss.to_bits()).collect();
        (losses, reports.last().unwrap().arena.step_high_water_bytes)
    };
    let (free_losses, free_peak) = train(config(None));
    let (budget_losses, budget_peak) = train(config(Some(budget)));
    assert_eq!(free_losses, budget_losses, "recomputation changes no bit on the CPU");
    assert_eq!(free_peak, unbudgeted);
    assert!(
        budget_peak <= budget,
        "step high-water {budget_peak} above the budget {budget}"
    );
    recomputed.kinds.iter().map(|k| (k.what, k.dropped)).collect()
}

/// With no budget, the step recomputes by default the outputs that cost no
/// multiply-add (block outputs) where that lowers its peak: the report
/// says which and why, the step is smaller than with `--recompute none`,
/// and the run trains bit for bit as that one, within the smaller step.
/// On the CPU the default (`lean`) is `--recompute cheap`, drop for drop.
#[test]
fn by_default_block_outputs_are_recomputed_where_that_lowers_the_peak_bit_for_bit() {
    let kept = config(None);
    let mut cheap = kept.clone();
    cheap.memory.recompute = Recompute::default();
    let (all, _) = train::memory_report(&kept).expect("plan keeping every output");
    let (fewer, _) = train::memory_report(&cheap).expect("plan by default");
    assert_eq!(all.recomputed, None, "--recompute none keeps every output");
    let r = fewer
        .recomputed
        .clone()
        .expect("the report says what is recomputed by default");
    assert_eq!(r.reason, RecomputeReason::Cheap);
    assert!(r.dropped > 0, "{r:?}");
    assert_eq!(
        r.extra_multiply_adds, 0,
        "only outputs made again without a multiply-add"
    );
    assert!(!r.transient_chains, "chains held");
    assert!(
        r.kinds
            .iter()
            .all(|k| k.dropped == 0 || k.what == "batch-norm + residual relu output"),
        "{r:?}"
    );
    assert_eq!(r.unbudgeted_step_bytes, all.plan_peak_bytes);
    // The default, `lean`, searches for a smaller step only on a GPU that
    // times its convolutions: on the CPU it is `cheap`, drop for drop.
    assert_eq!(cheap.memory.recompute, Recompute::Lean);
    let mut only_cheap = cheap.clone();
    only_cheap.memory.recompute = Recompute::Cheap;
    let (as_cheap, _) = train::memory_report(&only_cheap).expect("plan with --recompute cheap");
    assert_eq!(as_cheap.recomputed, fewer.recomputed);
    assert_eq!(as_cheap.plan_peak_bytes, fewer.plan_peak_bytes);
    assert!(
        fewer.plan_peak_bytes < all.plan_peak_bytes,
        "{} against {}",
        fewer.plan_peak_bytes,
        all.plan_peak_bytes
    );
    let train = |cfg: &TrainConfig| {
        let reports = trained(cfg).expect("train");
        let losses: Vec<u64> = reports.iter().map(|r| r.train_loss.to_bits()).collect();
        (losses, reports.last().unwrap().arena.step_high_water_bytes)
    };
    let (kept_losses, kept_peak) = train(&kept);
    let (cheap_losses, cheap_peak) = train(&cheap);
    assert_eq!(kept_losses, cheap_losses, "recomputation changes no bit on the CPU");
    assert_eq!((kept_peak, cheap_peak), (all.plan_peak_bytes, fewer.plan_peak_bytes));
}

#[test]
fn a_budget_recomputes_convolutions_and_trains_bit_for_bit_as_without() {
    // 90% of the step: some outputs must go, not all.
    trains_as_without_under(90);
}

/// Tight enough that block outputs go too: they come back from recomputed
/// convolutions, and their relu's mask from the residual.
#[test]
fn a_tight_budget_recomputes_block_outputs_and_trains_bit_for_bit_as_without() {
    let kinds = trains_as_without_under(60);
    let dropped = |what: &str| kinds.iter().find(|k| k.0 == what).map_or(0, |k| k.1);
    assert!(dropped("conv2d output") > 0, "{kinds:?}");
    assert!(dropped("batch-norm + residual relu output") > 0, "{kinds:?}");
}

#[test]
fn a_budget_no_recomputation_can_meet_names_the_least_that_works() {
    let err = train::memory_report(&config(Some(MIB / 4))).expect_err("a quarter MiB fits no step");
    match err {
        Error::Setting {
            setting: Setting::MemoryBudget,
            problem,
            fix: Some(fix),
        } => {
            assert!(
                problem.contains("recomputing among its 28 convolution and block outputs"),
                "{problem}"
            );
            let least: usize = fix.trim_end_matches("MiB or more").parse().expect(&fix);
            // The least budget that works does work.
            let (report, _) = train::memory_report(&config(Some(least * MIB))).expect("the least budget");
            assert!(report.plan_peak_bytes <= least * MIB);
        }
        other => panic!("{other}"),
    }
}

/// A given arena too small for the step is a budget too: the step
/// recomputes to fit it, and trains as without; one too small for that is
/// refused as before, with the arena that would fit without recomputing.
/// (Half fits once chains are remade for each reader.)
#[test]
fn an_arena_too_small_for_the_step_recomputes_to_fit_or_is_refused_as_before() {
    let (free, _) = train::memory_report(&config(None)).expect("plan");
    let whole = free.arena_bytes;
    let run = |arena: usize| {
        let mut cfg = config(None);
        cfg.memory.arena_size = Some(arena);
        trained(&cfg)
    };
    let tight = free.persistent_bytes + free.plan_peak_bytes * 9 / 10;
    let reports = run(tight).expect("recomputing fits 90% of the step");
    let unbudgeted = trained(&config(None)).expect("train");
    let bits = |r: &[EpochReport]| r.iter().map(|e| e.train_loss.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&reports), bits(&unbudgeted));
    assert!(reports[0].arena.step_high_water_bytes <= tight - free.persistent_bytes);
    let third = free.persistent_bytes + free.plan_peak_bytes / 3;
    match run(third) {
        // Either refusal names the arena that holds the whole step without
        // recomputing: the field the CLI's hint is made from, and the text.
        Err(Error::Arena(
            e @ (ArenaError::StepTooLarge { would_fit, .. } | ArenaError::Exhausted { would_fit, .. }),
        )) => {
            assert_eq!(would_fit, whole, "the arena that would fit: {e}");
            let text = e.to_string();
            assert!(
                text.ends_with(&format!("an arena of {} would fit", ByteSize(whole))),
                "{text}"
            );
            assert!(
                text.contains(&format!("{}", ByteSize(third))),
                "the given arena: {text}"
            );
        }
        other => panic!("a third of the step fits no recomputation: {other:?}"),
    }
}

/// The least step remakes chains of drops for each reader rather than hold
/// them all at once in backward (more recomputation, fewer bytes), says so,
/// and trains as without a budget, bit for bit, within it.
#[test]
fn the_least_step_remakes_chains_for_each_reader_and_trains_bit_for_bit_as_without() {
    let err = train::memory_report(&config(Some(MIB / 4))).expect_err("a quarter MiB fits no step");
    let Error::Setting { fix: Some(fix), .. } = err else {
        panic!("{err}")
    };
    let least = fix.trim_end_matches("MiB or more").parse::<usize>().expect(&fix) * MIB;
    let (report, _) = train::memory_report(&config(Some(least))).expect("the least budget");
    let recomputed = report.recomputed.expect("recomputed");
    assert!(recomputed.transient_chains, "{recomputed:?}");
    let bits = |cfg: TrainConfig| {
        let reports = trained(&cfg).expect("train");
        let peak = reports.iter().map(|r| r.arena.step_high_water_bytes).max().unwrap();
        (reports.iter().map(|r| r.train_loss.to_bits()).collect::<Vec<_>>(), peak)
    };
    let (free_losses, _) = bits(config(None));
    let (least_losses, peak) = bits(config(Some(least)));
    assert_eq!(free_losses, least_losses, "recomputation changes no bit on the CPU");
    assert!(peak <= least, "step high-water {peak} above the budget {least}");
}
