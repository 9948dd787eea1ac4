//! The largest batch whose arena fits a given size, found by dry runs.
//!
//! A batch fits when the arena `train` would need for it — the persistent
//! region (model, optimizer state, the resident data set, the per-step
//! tables) plus the largest step of the run (full and last training and
//! evaluation steps, planned or bumped as the memory plan setting says) — is at
//! most the size given: exactly the test `train` applies before it
//! allocates. Each candidate is one dry run on the device asked for, so on
//! a GPU the convolutions' workspaces are that GPU's.
//!
//! The search doubles from 1 until a batch does not fit (or the training
//! set, which no batch may exceed, is reached), then bisects. What it
//! reports was measured: the batch fits, and the next one does not (unless
//! the training set stopped the search). That no batch further above fits
//! rests on the need growing with the batch past the smallest ones: the
//! step's activations grow with it, while the persistent region's per-step
//! tables (a learning rate per step of the run, a loss per step of the
//! epoch) shrink as the steps get fewer, which outweighs the activations
//! only among the smallest batches, all of which fit when batch 1 does. On
//! a GPU cuDNN may choose another algorithm, with another workspace, for
//! another batch, so there a batch above the one reported may fit again by
//! a workspace's few MiB; the one reported is the largest below the first
//! that does not fit.
//!
//! With a memory budget (the run's memory budget), a batch whose step does not
//! fit may still fit by recomputing convolution and block outputs in backward (see
//! `meet_budget`; its step's budget is the arena's room above the
//! persistent region, or the budget given if smaller): the search runs
//! twice and reports both batches, with recomputation and without.

use super::pipeline::{ArenaNeeds, Pipeline};
use super::{budget, Recompute, RunConfig, TrainConfig};
use crate::backend::Precision;
use crate::data::DataSet;
use crate::memory::{suggest, ByteSize};
use crate::{Error, Result, Setting};

/// What [`max_batch`] found.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct MaxBatch {
    /// The largest batch that fits.
    pub max_batch: usize,
    /// The arena that batch needs (`persistent_bytes + step_bytes`), at
    /// most `capacity_bytes`.
    pub arena_bytes: usize,
    /// Its persistent region.
    pub persistent_bytes: usize,
    /// The largest step's bytes: the planned peak (or the bump high-water
    /// without the memory plan) of the training or evaluation step.
    pub step_bytes: usize,
    /// The arena size searched within.
    pub capacity_bytes: usize,
    /// The most examples a batch of the data may hold, when that stopped
    /// the search (a larger batch might fit the arena, but the data has no
    /// more): the training images, the treebank's training sentences, or
    /// the streams a corpus's splits each hold a window for.
    pub capped_by_training_set: Option<usize>,
    /// What the data's batch holds, in the plural: "images", "streams" or
    /// "sentences" ([`crate::data::DataKind::batch_holds`]).
    pub batch_holds: &'static str,
    /// The arithmetic the dry runs planned for.
    pub precision: Precision,
    /// The network, as `--model` names it.
    pub model: &'static str,
    /// The device the dry runs were shaped like ("cpu (2 threads)").
    pub device: String,
    /// With a memory budget, or by default: the convolution and block outputs the largest
    /// batch's step recomputes in backward (to fit, or the default's cheap ones)...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub recomputed_outputs: Option<usize>,
    /// ...and the largest batch that fits without recomputing any.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub without_recomputation: Option<usize>,
}

/// One dry run of the search, for progress lines.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Probe {
    /// The batch tried.
    pub batch: usize,
    /// The arena this batch needs.
    pub arena_bytes: usize,
    /// The arena size searched within.
    pub capacity_bytes: usize,
}

impl Probe {
    /// Whether the batch fits the arena.
    pub fn fits(&self) -> bool {
        self.arena_bytes <= self.capacity_bytes
    }
}

/// The largest batch of `cfg`'s run (its `batch` aside) whose arena fits
/// the given arena size, which must be given; `progress` hears of every dry run.
/// Batch 1 not fitting is an error naming the size it needs.
pub fn max_batch(cfg: &TrainConfig, progress: &mut dyn FnMut(&Probe)) -> Result<MaxBatch> {
    let Some(capacity) = cfg.memory.arena_size else {
        return Err(Error::setting(
            Setting::ArenaSize,
            "the largest batch is searched within a given arena size, and none was given (a measured arena fits any batch)",
            Some("a size such as 4GiB".into()),
        ));
    };
    let at = |batch: usize| TrainConfig {
        run: RunConfig {
            batch,
            ..cfg.run.clone()
        },
        ..cfg.clone()
    };
    // Batch 1 is always a valid setting: checks that name the batch see it.
    let first = at(1);
    let pipeline = Pipeline::open(&first, None)?;
    let limit = most_examples(cfg, pipeline.data())?;
    let speed = pipeline.speed();
    // A step that does not fit may fit recomputing convolution and block outputs,
    // when a budget asks for that: the step's budget is then the arena's
    // room above the persistent region (or the budget given, if smaller).
    let measure_at = |batch: usize, recompute: Recomputing| -> Result<Measured> {
        let at = at(batch);
        let runs = pipeline.dry_runs_of(&at);
        let needs = runs.plain()?;
        let plain = |needs: ArenaNeeds| Measured {
            least: needs.step_bytes,
            needs,
        };
        let measure = |choice: &super::StepChoice| runs.measure(choice);
        if recompute == Recomputing::Cheap {
            // As `train` with no budget: the default's drops, fitting or not.
            return Ok(plain(budget::cheap_floor(&measure, needs)?));
        }
        if recompute == Recomputing::Nothing || needs.total() <= capacity {
            return Ok(plain(needs));
        }
        let Some(room) = capacity.checked_sub(needs.persistent_bytes) else {
            return Ok(plain(needs));
        };
        let budget = cfg.memory.memory_budget.unwrap_or(room).min(room);
        match budget::search(&measure, needs.clone(), budget, &speed, budget::Mode::Probe)? {
            budget::Outcome::Fits(fit) => Ok(plain(fit)),
            // No recomputation fits it: the batch does not fit, and the
            // least step found says by how much.
            budget::Outcome::Short { least } => Ok(Measured { needs, least }),
        }
    };
    let recompute = match (cfg.memory.memory_budget, cfg.memory.recompute) {
        (Some(_), _) => Recomputing::Budget,
        (None, Recompute::Cheap | Recompute::Lean) => Recomputing::Cheap,
        (None, Recompute::Nothing) => Recomputing::Nothing,
    };
    let without_recomputation = match recompute {
        Recomputing::Nothing => None,
        _ => Some(largest(limit, capacity, &mut |b| measure_at(b, Recomputing::Nothing), progress)?.0),
    };
    let (lo, best) = largest(limit, capacity, &mut |b| measure_at(b, recompute), progress)?;
    Ok(MaxBatch {
        max_batch: lo,
        arena_bytes: best.total(),
        persistent_bytes: best.persistent_bytes,
        step_bytes: best.step_bytes,
        capacity_bytes: capacity,
        capped_by_training_set: (lo == limit).then_some(limit),
        batch_holds: pipeline.data().kind().batch_holds(),
        precision: cfg.device.precision,
        model: cfg.run.model.name(),
        device: pipeline.device_name(),
        recomputed_outputs: (recompute != Recomputing::Nothing).then_some(best.dropped.len()),
        without_recomputation,
    })
}

/// What a batch's step may recompute in the search: as `train` would
/// with the same settings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Recomputing {
    /// Nothing (`--recompute none`, or the search without recomputation
    /// beside a budget's).
    Nothing,
    /// The default's cheap outputs, where they lower the peak.
    Cheap,
    /// Whatever fits the budget (or the arena's room), where the step does
    /// not fit without.
    Budget,
}

/// The next probe of [`largest`]'s narrowing.
#[derive(Debug, Clone, Copy)]
enum Next {
    /// From the last batch that did not fit, in proportion to its least
    /// step.
    Guess,
    /// Just above the largest that fits.
    Above,
    /// Halfway between the largest that fits and the least that does not.
    Bisect,
}

/// A batch's dry run for the search: what it needs (with recomputation,
/// the choice that fits, else the plain step), and the least step found
/// for it (the plain step's bytes, or with recomputation, where none
/// fits, the least the search reached).
pub(crate) struct Measured {
    needs: ArenaNeeds,
    least: usize,
}

/// The most examples a batch of `set` may hold for `cfg`'s task: the
/// largest batch, at most the training examples, that the task takes
/// (a corpus holds a window for only so many streams).
fn most_examples(cfg: &TrainConfig, set: &DataSet) -> Result<usize> {
    let task = &cfg.run.task;
    let takes = |batch: usize| task.check(set, batch).is_ok();
    // Batch 1 is refused only for reasons that no batch escapes: say them.
    task.check(set, 1)?;
    let (mut lo, mut hi) = (1, set.sizes().0.max(1));
    if takes(hi) {
        return Ok(hi);
    }
    // `lo` is taken, `hi` is not: a task that takes a batch takes every
    // smaller one.
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        match takes(mid) {
            true => lo = mid,
            false => hi = mid,
        }
    }
    Ok(lo)
}

/// The largest batch up to `limit` whose arena, as `measure` finds it,
/// fits `capacity`: doubling from 1, then narrowing down between a batch
/// that fits and one that does not; with what it needs.
///
/// A step's least bytes grow about in proportion to the batch, so the
/// batch whose least step meets the room is guessed from the last that
/// did not fit: the room times its batch over its least step. The part of
/// a step that does not grow with the batch makes the guess fall a little
/// above the answer, by a fraction of the distance from that batch (that
/// part over the step): guesses close in from above, so the batch just
/// above one that fits is tried next, to prove it the largest. A guess
/// that does not halve the interval, or one above a guess that fits too,
/// hands over to one bisection. With recomputation every probe is a
/// search (seconds for a ResNet-50 near 4 GiB), so a few guesses save most
/// of bisection's probes.
fn largest(
    limit: usize,
    capacity: usize,
    measure: &mut dyn FnMut(usize) -> Result<Measured>,
    progress: &mut dyn FnMut(&Probe),
) -> Result<(usize, ArenaNeeds)> {
    let mut probe = |batch: usize| -> Result<(bool, Measured)> {
        let measured = measure(batch)?;
        let probe = Probe {
            batch,
            arena_bytes: measured.needs.total(),
            capacity_bytes: capacity,
        };
        progress(&probe);
        Ok((probe.fits(), measured))
    };
    let (fits, first) = probe(1)?;
    let mut best = first.needs;
    if !fits {
        return Err(Error::setting(
            Setting::ArenaSize,
            format!(
                "even a batch of 1 needs an arena of {} (persistent {}, step {}), above the {} given",
                ByteSize(best.total()),
                ByteSize(best.persistent_bytes),
                ByteSize(best.step_bytes),
                ByteSize(capacity)
            ),
            Some(format!("{} or more", suggest(best.total()))),
        ));
    }
    // `lo` fits; `hi`, once found, was measured not to, its least step
    // and persistent region beside it.
    let mut lo = 1;
    let mut hi = None;
    while hi.is_none() && lo < limit {
        let batch = lo.saturating_mul(2).min(limit);
        match probe(batch)? {
            (true, m) => (lo, best) = (batch, m.needs),
            (false, m) => hi = Some((batch, m.least, m.needs.persistent_bytes)),
        }
    }
    let Some((mut hi, mut least, mut persistent)) = hi else {
        return Ok((lo, best));
    };
    let mut next = Next::Guess;
    while hi - lo > 1 {
        let width = hi - lo;
        let room = capacity.saturating_sub(persistent);
        let batch = match next {
            Next::Guess => (hi as u128 * room as u128 / least.max(1) as u128) as usize,
            Next::Above => lo + 1,
            Next::Bisect => lo + width / 2,
        }
        .clamp(lo + 1, hi - 1);
        let fits = match probe(batch)? {
            (true, m) => {
                (lo, best) = (batch, m.needs);
                true
            }
            (false, m) => {
                (hi, least, persistent) = (batch, m.least, m.needs.persistent_bytes);
                false
            }
        };
        next = match (next, fits) {
            // Guesses fall a little above the answer: one that fits is
            // likely it, proved by the batch above it not fitting.
            (Next::Guess, true) => Next::Above,
            (Next::Guess, false) if 2 * (hi - lo) <= width => Next::Guess,
            (Next::Guess, false) | (Next::Above, true) => Next::Bisect,
            (Next::Above, false) | (Next::Bisect, _) => Next::Guess,
        };
    }
    Ok((lo, best))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::train::{DeviceConfig, MemoryConfig};

    #[test]
    fn without_an_arena_size_there_is_nothing_to_search_within() {
        let cfg = TrainConfig {
            device: DeviceConfig::cpu(0),
            ..TrainConfig::default()
        };
        let mut probes = 0;
        match max_batch(&cfg, &mut |_| probes += 1) {
            Err(Error::Setting {
                setting: Setting::ArenaSize,
                fix,
                ..
            }) => assert_eq!(fix.as_deref(), Some("a size such as 4GiB")),
            other => panic!("{other:?}"),
        }
        assert_eq!(probes, 0, "refused before any dry run");
    }

    /// [`largest`] on a fake step of `persistent` bytes and a least step
    /// of `least(batch)` bytes, within `capacity`: the batch found (checked
    /// against every batch up to `limit`) and the probes it took.
    fn search(limit: usize, capacity: usize, persistent: usize, least: &dyn Fn(usize) -> usize) -> (usize, usize) {
        let needs = |b: usize| ArenaNeeds {
            persistent_bytes: persistent,
            step_bytes: least(b),
            candidates: Vec::new(),
            dropped: Vec::new(),
            transient_chains: false,
            persistent: Vec::new(),
            plans: Vec::new(),
            plan_names: Vec::new(),
        };
        let mut probes = 0;
        let (found, best) = largest(
            limit,
            capacity,
            &mut |b| {
                Ok(Measured {
                    needs: needs(b),
                    least: least(b),
                })
            },
            &mut |_| probes += 1,
        )
        .expect("search");
        let exact = (1..=limit).take_while(|&b| persistent + least(b) <= capacity).last();
        assert_eq!(Some(found), exact, "{probes} probes");
        assert_eq!(best.step_bytes, least(found));
        (found, probes)
    }

    #[test]
    fn the_largest_batch_is_guessed_from_the_least_step_and_proved() {
        let mib = 1 << 20;
        // ResNet-50 near 4 GiB: 5 MiB a sample above 100 MiB, 446 MiB
        // persistent. After doubling to 1024 (11 probes), bisection
        // between 512 and 1024 takes 9 more; the guesses close in from
        // above in 3.
        let r50 = |b: usize| 100 * mib + 5 * mib * b;
        let (found, probes) = search(50_000, 4096 * mib, 446 * mib, &r50);
        assert_eq!(found, 710);
        assert!(probes <= 11 + 3, "{probes} probes");
        // A step that grows faster than in proportion (the guess falls
        // short and fits): bisection takes over, the answer is still exact.
        let steep = |b: usize| b * b * 1024;
        let (_, probes) = search(50_000, 4096 * mib, 0, &steep);
        assert!(probes <= 13 + 11, "{probes} probes");
        // Jagged (cuDNN choosing another workspace at some batches), but
        // growing: exact, and never many more probes than bisection.
        let jagged = |b: usize| 3 * mib * b + (b % 7) * 256 * 1024;
        let (_, probes) = search(50_000, 2048 * mib, 0, &jagged);
        assert!(probes <= 11 + 9, "{probes} probes");
        // The training set first: no guessing.
        assert_eq!(search(300, 4096 * mib, 0, &r50), (300, 10));
    }

    #[test]
    fn recomputation_fits_a_larger_batch_and_exactly_the_largest() {
        use crate::models::{Depth, ResNet};
        let cfg = |budget, recompute| TrainConfig {
            run: RunConfig {
                model: ResNet::choice(Depth::R18, 0.125),
                data_dir: "synthetic:cifar10:2000".into(),
                ..RunConfig::default()
            },
            memory: MemoryConfig {
                arena_size: Some(48 << 20),
                memory_budget: budget,
                recompute,
                ..MemoryConfig::default()
            },
            device: DeviceConfig::cpu(2),
        };
        let plain = max_batch(&cfg(None, Recompute::Nothing), &mut |_| {}).expect("search");
        let cheap = max_batch(&cfg(None, Recompute::Cheap), &mut |_| {}).expect("search by default");
        let found =
            max_batch(&cfg(Some(usize::MAX), Recompute::Nothing), &mut |_| {}).expect("search with recomputation");
        assert_eq!(plain.without_recomputation, None);
        assert_eq!(found.without_recomputation, Some(plain.max_batch));
        assert_eq!(cheap.without_recomputation, Some(plain.max_batch));
        // The default's cheap drops fit more than keeping everything, a
        // budget's choice among every output at least as many.
        assert!(cheap.max_batch > plain.max_batch, "{cheap:?} vs {plain:?}");
        assert!(cheap.recomputed_outputs.is_some_and(|n| n > 0), "{cheap:?}");
        assert!(found.max_batch >= cheap.max_batch, "{found:?} vs {cheap:?}");
        assert!(found.recomputed_outputs.is_some_and(|n| n > 0), "{found:?}");
        assert!(found.arena_bytes <= found.capacity_bytes);
        // Exactly the largest: the next batch fits no recomputation.
        let mut next = cfg(None, Recompute::Nothing);
        next.run.batch = found.max_batch + 1;
        next.memory.memory_budget = Some((48 << 20) - found.persistent_bytes);
        assert!(
            super::super::memory_report(&next).is_err(),
            "batch {} fits too",
            found.max_batch + 1
        );
    }
}
