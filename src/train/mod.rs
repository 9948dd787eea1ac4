//! Training: one pipeline from a run's settings to a session in an arena
//! sized for it, and the session's epochs.
//!
//! - [`config`](TrainConfig): what a run trains ([`RunConfig`]), its memory
//!   ([`MemoryConfig`]) and its device ([`DeviceConfig`]);
//! - [`Pipeline`]: open → size → budget → arena → tune → plan, measuring
//!   every candidate step through one seam ([`DryRuns::measure`]); also
//!   what `bumpgrad memory` reports ([`memory_report`]) and the largest
//!   batch that fits ([`max_batch`]);
//! - [`Session`]: the parts built (network, parameter store, optimizer,
//!   task, arena) and the epoch loop over them, at one or more batch sizes
//!   (`shapes.rs`), each with its own plans and graph in the one arena;
//! - [`train`]: the one entry point that trains, heard through [`Hooks`];
//! - checkpoints and resume, and the reports a run makes.
//!
//! Nothing here names a model, optimizer, task or data set: they arrive as
//! choices in the settings (`tests/layering.rs` checks).

mod budget;
mod checkpoints;
mod config;
mod evaluate;
mod max_batch;
mod pipeline;
mod predictor;
mod report;
mod run;
mod session;
pub(crate) mod shapes;

pub use budget::SEARCH_SECONDS;
pub use checkpoints::{CheckpointPolicy, Every, Position};
pub use config::{
    ConvAlgos, DeviceConfig, MemoryConfig, Recompute, RunConfig, TrainConfig, TrainConfigBuilder, TUNING_GROWTH,
};
pub use evaluate::{evaluate, Evaluation};
pub use max_batch::{max_batch, MaxBatch, Probe};
pub use pipeline::{memory_report, ArenaNeeds, DryRuns, Pipeline, StepChoice};
pub use predictor::{open_checkpoint, ImageInput, Predictor, IMAGE_INPUT_KEY};
pub use report::{
    resident_bytes, ConvTuning, EpochLine, EpochReport, Observer, Quiet, RecomputePlan, Reports, RunInfo, StepProfile,
    Timed, WorkspaceHold,
};
pub use run::{train, Hooks};
pub use session::PROFILED_STEP;
pub use session::{Control, Session, READBACK};
pub use shapes::StepKind;

#[cfg(test)]
pub(crate) use test_support::{measure_chains, measure_dropping, open_for_planning};

/// What the budget's tests measure with, by the names they had before the
/// seam: a dry run of `cfg` on a given planning engine.
#[cfg(test)]
mod test_support {
    use super::pipeline::{measure_on, ArenaNeeds, Pipeline, StepChoice};
    use super::TrainConfig;
    use crate::backend::Device;
    use crate::data::DataSet;
    use crate::Engine;
    use crate::Result;

    pub(crate) fn measure_dropping(
        cfg: &TrainConfig,
        host: &DataSet,
        dry: Engine,
        dropped: &[u32],
    ) -> Result<ArenaNeeds> {
        measure_on(cfg, host, dry, &StepChoice::held(dropped))
    }

    pub(crate) fn measure_chains(
        cfg: &TrainConfig,
        host: &DataSet,
        dry: Engine,
        dropped: &[u32],
        transient_chains: bool,
    ) -> Result<ArenaNeeds> {
        let choice = StepChoice {
            dropped: dropped.to_vec(),
            transient_chains,
        };
        measure_on(cfg, host, dry, &choice)
    }

    pub(crate) fn open_for_planning(cfg: &TrainConfig) -> Result<(DataSet, Device)> {
        Ok(Pipeline::open(cfg, None)?.into_parts())
    }
}
