//! The one entry point that trains: a run's settings in, its epochs out
//! through [`Hooks`] (an [`Observer`] hears progress, reports and
//! checkpoints; a flag stops the run; a counter feeds a watchdog).

use super::checkpoints::Position;
use super::pipeline::Pipeline;
use super::report::Observer;
use super::session::Control;
use super::TrainConfig;
use crate::distributed::Join;
use crate::Result;
use std::sync::atomic::{AtomicBool, AtomicU64};

/// How a run is heard and steered.
pub struct Hooks<'a> {
    observer: &'a mut (dyn Observer + Send),
    stop: &'a AtomicBool,
    progress: Option<&'a AtomicU64>,
    join: Option<Join>,
}

/// A stop that is never asked for.
static NEVER: AtomicBool = AtomicBool::new(false);

impl<'a> Hooks<'a> {
    /// `observer` hears everything: progress, each epoch's report (kept by
    /// nothing else, so a run's memory stays flat however many epochs it
    /// runs), checkpoints written, notes.
    pub fn new(observer: &'a mut (dyn Observer + Send)) -> Self {
        Self {
            observer,
            stop: &NEVER,
            progress: None,
            join: None,
        }
    }

    /// Stops after the current step once `stop` is set (by a signal
    /// handler): a checkpoint is written and [`crate::Error::Interrupted`]
    /// returned.
    pub fn stop_on(self, stop: &'a AtomicBool) -> Self {
        Self { stop, ..self }
    }

    /// Counts the steps done in `progress`, for a watchdog.
    pub fn count_steps(self, progress: &'a AtomicU64) -> Self {
        Self {
            progress: Some(progress),
            ..self
        }
    }

    /// Trains as one rank of a data-parallel run, whose device joins the
    /// group as `join` says.
    pub fn as_rank(self, join: Join) -> Self {
        Self {
            join: Some(join),
            ..self
        }
    }
}

/// Trains for `cfg`'s epochs. With a resume directory, continues from the
/// newest valid checkpoint there (damaged newer ones are reported through
/// the observer and skipped).
pub fn train(cfg: &TrainConfig, hooks: Hooks<'_>) -> Result<()> {
    let Hooks {
        observer,
        stop,
        progress,
        join,
    } = hooks;
    let run = &cfg.run;
    cfg.validate()?;
    // Before anything is loaded: the checkpoint to resume from, then whether
    // checkpoints could be written at all. Nothing is made there: the first
    // checkpoint makes the directory, so a run refused on the way (its data,
    // its model, its arena) leaves none behind.
    let latest = match &run.resume {
        Some(dir) => Some(crate::checkpoint::latest_valid(dir)?),
        None => None,
    };
    let writes_checkpoints = run.data_parallel.is_none_or(|dp| dp.world.rank == 0);
    if let Some(policy) = run.checkpoints.as_ref().filter(|_| writes_checkpoints) {
        crate::checkpoint::check_writable(&policy.dir)?;
    }
    let pipeline = Pipeline::open(cfg, join)?;
    let config_json = config_json(cfg, pipeline.data());
    let (mut session, info) = pipeline.build()?;
    let mut start = Position::default();
    if let (Some(dir), Some(latest)) = (&run.resume, latest) {
        match latest {
            Some(latest) => {
                for (path, why) in &latest.skipped {
                    observer.note(&format!("skipped {}: {why}", path.display()));
                }
                start = session.resume(&latest.checkpoint)?;
                observer.note(&format!(
                    "resuming from {}: {} epochs and {} steps of the next done ({} steps in all)",
                    latest.path.display(),
                    start.epochs_done,
                    start.step_in_epoch,
                    session.steps_done()
                ));
            }
            None => observer.note(&format!(
                "no checkpoint in {} yet; starting from scratch",
                dir.display()
            )),
        }
    }
    // Every rank starts from rank 0's state, fresh or resumed.
    session.sync_replicas()?;
    let control = Control {
        stop,
        checkpoints: run.checkpoints.as_ref(),
        config_json: &config_json,
        progress,
    };
    observer.started(&info);
    if start.epochs_done >= run.epochs {
        observer.note(&format!(
            "the checkpoint has {} epochs done already, all this run asks for; ask for {} or more to train further",
            start.epochs_done,
            start.epochs_done + 1
        ));
    }
    session.on_workers(|session| {
        for epoch in start.epochs_done + 1..=run.epochs {
            let from = if epoch == start.epochs_done + 1 {
                start
            } else {
                Position::epoch_start(epoch - 1)
            };
            session.epoch_from(epoch, from, observer, &control)?;
        }
        if let Some(metric) = session.final_test()? {
            observer.tested(&metric);
        }
        Ok(())
    })
}

/// The settings a checkpoint stores, with what an image model was built
/// for (its input, classes and normalisation: what a predictor needs).
fn config_json(cfg: &TrainConfig, data: &crate::data::DataSet) -> String {
    let mut config = serde_json::to_value(cfg).unwrap_or_default();
    if let (Some(set), Some(map)) = (data.images(), config.as_object_mut()) {
        let input = super::predictor::ImageInput {
            example: set.example().dims().to_vec(),
            classes: set.classes,
            normalize: set.normalize.clone(),
            class_names: set.class_names.clone(),
        };
        if let Ok(value) = serde_json::to_value(input) {
            map.insert(super::predictor::IMAGE_INPUT_KEY.into(), value);
        }
    }
    config.to_string()
}
