//! Convolution tuning: a GPU times its convolution algorithms in the new
//! arena's free bytes before the first step, and the fastest are kept where
//! their step still fits (see [`time_convolutions`]).

use super::arenas::Algorithms;
use super::measure::{ArenaNeeds, DryRuns, StepChoice};
use crate::backend::DeviceKind;
use crate::data::ImageSet;
use crate::train::report::ConvTuning;
use crate::train::{ConvAlgos, TrainConfig};
use crate::Engine;
use crate::Result;

/// Bytes a timed choice may add to a step of `step_bytes` (see
/// [`crate::train::MemoryConfig::workspace_growth`]): a measured arena is
/// made that much larger.
pub fn tuning_headroom(cfg: &TrainConfig, step_bytes: usize) -> usize {
    (step_bytes as f64 * cfg.memory.workspace_growth) as usize
}

/// The bytes `train` adds to a measured arena of a step of `step_bytes`
/// on `device` so that timed convolution algorithms may take larger
/// workspaces (see [`time_convolutions`]); `None` where it times nothing or the
/// arena size is given.
pub fn tuning_bytes(cfg: &TrainConfig, device: DeviceKind, step_bytes: usize) -> Option<usize> {
    // Under a budget the timed step may not pass it: no more room than that.
    let room = cfg
        .memory
        .memory_budget
        .map_or(usize::MAX, |b| b.saturating_sub(step_bytes));
    (times_convolutions(cfg, device) && cfg.memory.arena_size.is_none())
        .then(|| tuning_headroom(cfg, step_bytes).min(room))
}

/// Whether a run of `cfg` on `device` times its convolution algorithms.
pub(super) fn times_convolutions(cfg: &TrainConfig, device: DeviceKind) -> bool {
    device == DeviceKind::Cuda && !cfg.device.deterministic && cfg.device.conv_algos == ConvAlgos::Timed
}

/// Times the convolution algorithms on `arena` (see [`super::Pipeline::build`]) and
/// keeps the fastest whose step fits: at most the workspace growth over the
/// heuristic's `needs`, the budget, and `capacity`. On success `needs`
/// becomes the timed choices' (their plans are the ones to follow).
///
/// What the step recomputes stays what `needs` chose on the heuristic's
/// algorithms, which is what `bumpgrad memory` reports for the same
/// settings: the timed algorithms' workspaces are held down until that
/// choice's step fits, never traded for more recomputation. (Searching
/// again with the timed workspaces let a run drop far more than `memory`
/// said, at several times its predicted cost.)
pub(super) fn time_convolutions(
    cfg: &TrainConfig,
    host: &ImageSet,
    engine: &mut Engine,
    needs: &mut ArenaNeeds,
    capacity: usize,
) -> Result<ConvTuning> {
    let free = engine.arena().free();
    let changed = engine.runtime_mut().tune_convolutions(free)?;
    if changed == 0 {
        return Ok(ConvTuning {
            changed,
            workspace_limit: None,
            kept: true,
            seconds_lost: 0.0,
        });
    }
    let bound = (needs.step_bytes + tuning_headroom(cfg, needs.step_bytes))
        .min(capacity - needs.persistent_bytes)
        .min(cfg.memory.memory_budget.unwrap_or(usize::MAX).max(needs.step_bytes));
    let choice = StepChoice {
        dropped: needs.dropped.clone(),
        transient_chains: needs.transient_chains,
    };
    let largest = engine.runtime().select_convolutions(usize::MAX);
    let mut fitted = None;
    let settled = settle_workspaces(
        largest,
        crate::backend::cuda::WORKSPACE_LIMIT,
        |limit| Ok(engine.runtime().select_convolutions(limit)),
        || {
            let timed = DryRuns::new(cfg, host, Algorithms::TimedOn(&*engine)).measure(&choice)?;
            let fits = timed.step_bytes <= bound && timed.total() <= capacity;
            if fits {
                fitted = Some(timed);
            }
            Ok(fits)
        },
    )?;
    match (settled, fitted) {
        (Some(limit), Some(timed)) => {
            *needs = timed;
            Ok(ConvTuning {
                changed,
                workspace_limit: limit,
                kept: true,
                seconds_lost: needs.slower_seconds(),
            })
        }
        _ => {
            engine.runtime().untune_convolutions();
            Ok(ConvTuning {
                changed,
                workspace_limit: None,
                kept: false,
                seconds_lost: 0.0,
            })
        }
    }
}

/// The search behind [`time_convolutions`]: with the timed choices (the
/// largest workspace among them `largest`), asks `fits` whether their step
/// fits; while not, halves the largest workspace allowed (`select` chooses
/// again under a limit and returns the new largest) until it fits or is no
/// more than `floor` (the heuristic's limit, whose step was measured).
/// `Some(None)`: the fastest fit; `Some(Some(limit))`: they fit held to
/// `limit`; `None`: nothing timed fits.
fn settle_workspaces(
    mut largest: usize,
    floor: usize,
    mut select: impl FnMut(usize) -> Result<usize>,
    mut fits: impl FnMut() -> Result<bool>,
) -> Result<Option<Option<usize>>> {
    let mut limit = None;
    loop {
        if fits()? {
            return Ok(Some(limit));
        }
        if largest <= floor {
            return Ok(None);
        }
        limit = Some(largest / 2);
        largest = select(largest / 2)?;
    }
}

#[cfg(test)]
mod tests {
    use super::settle_workspaces;
    use std::cell::Cell;

    /// A fake device whose step fits once the largest workspace chosen is at
    /// most `fits_at`; choosing under a limit gives the limit itself.
    fn search(largest: usize, floor: usize, fits_at: usize) -> (Option<Option<usize>>, usize) {
        let now = Cell::new(largest);
        let measured = Cell::new(0);
        let out = settle_workspaces(
            largest,
            floor,
            |limit| {
                now.set(limit);
                Ok(limit)
            },
            || {
                measured.set(measured.get() + 1);
                Ok(now.get() <= fits_at)
            },
        )
        .expect("search");
        (out, measured.get())
    }

    #[test]
    fn a_measured_gpu_arena_grows_by_a_fifth_of_the_step_where_it_times() {
        use super::{tuning_bytes, ConvAlgos, TrainConfig};
        use crate::backend::DeviceKind;
        use crate::train::MemoryConfig;
        let cfg = TrainConfig::default();
        let mib = 1 << 20;
        assert_eq!(tuning_bytes(&cfg, DeviceKind::Cuda, 100 * mib), Some(20 * mib));
        assert_eq!(tuning_bytes(&cfg, DeviceKind::Cpu, 100 * mib), None);
        let with = |change: &dyn Fn(&mut TrainConfig)| {
            let mut c = cfg.clone();
            change(&mut c);
            c
        };
        let doubling = with(&|c| c.memory.workspace_growth = 1.0);
        assert_eq!(tuning_bytes(&doubling, DeviceKind::Cuda, 100 * mib), Some(100 * mib));
        for bad in [-0.1, f64::NAN, f64::INFINITY] {
            let err = TrainConfig {
                memory: MemoryConfig {
                    workspace_growth: bad,
                    ..MemoryConfig::default()
                },
                ..TrainConfig::default()
            }
            .validate()
            .unwrap_err()
            .to_string();
            assert!(
                err.contains("the workspace growth is a fraction of the step, 0 or more"),
                "{err}"
            );
        }
        let nothing_timed = [
            with(&|c| c.device.deterministic = true),
            with(&|c| c.device.conv_algos = ConvAlgos::Heuristic),
            with(&|c| c.memory.arena_size = Some(1 << 30)),
        ];
        for c in &nothing_timed {
            assert_eq!(tuning_bytes(c, DeviceKind::Cuda, 100 * mib), None);
        }
        // Under a budget, no more than the budget leaves above the step.
        let budgeted = with(&|c| c.memory.memory_budget = Some(105 * mib));
        assert_eq!(tuning_bytes(&budgeted, DeviceKind::Cuda, 100 * mib), Some(5 * mib));
    }

    #[test]
    fn the_fastest_choices_are_kept_when_their_step_fits() {
        assert_eq!(search(800, 8, 1000), (Some(None), 1));
    }

    #[test]
    fn the_largest_workspace_is_halved_until_the_step_fits() {
        // 800 → 400 → 200 → 100: three halvings, four measurements.
        assert_eq!(search(800, 8, 150), (Some(Some(100)), 4));
    }

    #[test]
    fn nothing_timed_is_kept_when_even_the_floor_does_not_fit() {
        // 800 → 400 → … → 12 → 6 (below the floor of 8): measured at each.
        let (out, measured) = search(800, 8, 1);
        assert_eq!(out, None);
        assert_eq!(measured, 8);
    }
}
