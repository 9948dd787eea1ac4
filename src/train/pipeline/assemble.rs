//! A run's parts built in an arena's persistent region, and the session
//! made of them: where a run's settings become a session, on a planning engine to
//! be measured and on the real one to train. The same settings allocate
//! the same sequence on both, which is what lets the dry run plan the real
//! one.

use crate::data::ImageSet;
use crate::distributed::buckets::Buckets;
use crate::distributed::World;
use crate::nn::ParamStore;
use crate::ops::cursor::StepCursor;
use crate::ops::lr::LrAt;
use crate::tensor::Shape;
use crate::train::checkpoints;
use crate::train::session::{Loop, Parts, Session, TIMED_OPS};
use crate::train::shapes::Shapes;
use crate::train::TrainConfig;
use crate::Engine;
use crate::{Error, Result, Setting};

/// What only the run that trains does: replay graphs, time ops.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Live {
    pub graph: bool,
    pub profile: bool,
}

impl Live {
    /// A dry run, which only measures.
    pub const DRY: Self = Self {
        graph: false,
        profile: false,
    };
}

/// Fills `arena`'s persistent region with `cfg`'s run on `host`:
/// parameters, the step cursor, the learning rates, optimizer state, the
/// task's data set; then the session's own buffers.
pub(crate) fn assemble(cfg: &TrainConfig, host: &ImageSet, mut engine: Engine, live: Live) -> Result<Session> {
    let run = &cfg.run;
    let profile = live.profile && engine.runtime_mut().enable_op_timing(TIMED_OPS)?;
    let train_len = host.train_images.count;
    let world = run.data_parallel.map_or(World::ALONE, |d| d.world);
    let shapes = Shapes::new(run.batch, &run.other_batches);
    for &batch in shapes.batches() {
        check_batch(batch, world, train_len)?;
    }
    run.task.check(host)?;
    let global = run.batch * world.size;
    let steps = train_len.div_ceil(global);
    let mut p = engine.persistent();
    let input = run.task.input_of(host);
    let (store, model) = ParamStore::build(&mut p, run.seed, |pb| run.model.build(input, pb))?;
    let cursor = StepCursor::new(&mut p)?;
    let rates = run.schedule.table(run.lr, steps, run.epochs);
    let lr_table = p.upload("learning rates", Shape::new(&[rates.len()]), &rates)?;
    let optimizer = run.optimizer.build(
        &store,
        &mut p,
        LrAt {
            table: lr_table,
            cursor,
        },
    )?;
    let buckets = match run.data_parallel {
        Some(dp) => Some(Buckets::new(&store, dp.bucket_bytes)?),
        None => None,
    };
    let task = run.task.build(host, &mut p, run.seed)?;
    let parts = Parts {
        engine,
        model,
        store,
        optimizer,
        task,
        lr_table,
        cursor,
        buckets,
    };
    Session::new(
        parts,
        Loop {
            shapes,
            world,
            seed: run.seed,
            graph: live.graph,
            memory_plan: cfg.memory.memory_plan,
            profile,
            precision: cfg.device.precision,
            // A checkpoint is bound to the step's whole batch, not to how
            // it is shared: 2 GPUs × 50 may resume 1 GPU × 100.
            fingerprint: checkpoints::fingerprint(
                global,
                run.train_limit,
                &run.model.describe(),
                &run.optimizer.describe(),
                run.task.draws(),
            ),
        },
    )
}

/// The examples of a step of `batch` on each of `world`'s ranks, checked
/// against the `train_len` training examples before anything is sized by
/// it: a step larger than the training set would only size host and arena
/// buffers for examples that do not exist (a huge --batch once aborted the
/// process).
fn check_batch(batch: usize, world: World, train_len: usize) -> Result<usize> {
    let global = match batch.checked_mul(world.size) {
        Some(global) if global <= train_len => global,
        _ => {
            let step = match world.size {
                1 => format!("a batch of {batch}"),
                n => format!("a step of {n} ranks × {batch} examples"),
            };
            return Err(Error::setting(
                Setting::Batch,
                format!("{step} is larger than the {train_len} training images"),
                Some(format!("{} or less", (train_len / world.size).max(1))),
            ));
        }
    };
    let tail = train_len % global;
    if tail != 0 && tail < world.size {
        return Err(Error::setting(
            Setting::Batch,
            format!(
                "the epoch's last step has {tail} examples, too few to give each of the {} GPUs one (another batch or training-set limit avoids it)",
                world.size
            ),
            None,
        ));
    }
    Ok(global)
}
