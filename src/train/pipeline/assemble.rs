//! A run's parts built in an arena's persistent region, and the session
//! made of them: where a run's settings become a session, on a planning engine to
//! be measured and on the real one to train. The same settings allocate
//! the same sequence on both, which is what lets the dry run plan the real
//! one.

use crate::data::DataSet;
use crate::distributed::buckets::Buckets;
use crate::distributed::World;
use crate::nn::{ParamStore, Reads};
use crate::ops::cursor::StepCursor;
use crate::ops::lr::LrAt;
use crate::tasks::BuildArgs;
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
pub(crate) fn assemble(cfg: &TrainConfig, host: &DataSet, mut engine: Engine, live: Live) -> Result<Session> {
    let run = &cfg.run;
    let world = run.data_parallel.map_or(World::ALONE, |d| d.world);
    check_fit(cfg, host, world)?;
    let profile = live.profile && engine.runtime_mut().enable_op_timing(TIMED_OPS)?;
    let shapes = Shapes::new(run.batch, &run.other_batches);
    if let Some(images) = host.images() {
        for &batch in shapes.batches() {
            check_batch(batch, world, images.train_images.count)?;
        }
    }
    run.task.check(host, run.batch)?;
    let global = run.batch * world.size;
    let mut p = engine.persistent();
    let input = run.task.input_of(host)?;
    let (store, model) = ParamStore::build(&mut p, run.seed, |pb| run.model.build(input, pb))?;
    let embedding_note = super::embeddings::start_embedding(run, host, &mut engine, model.as_ref())?;
    let mut p = engine.persistent();
    let steps = run.task.train_len(host, run.batch)?.div_ceil(global);
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
    let args = BuildArgs {
        seed: run.seed,
        batch: run.batch,
        carried: model.carried(),
    };
    let task = run.task.build(host, &mut p, args)?;
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
    let mut session = Session::new(
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
                &input.example.to_string(),
            )
            .into_iter()
            .chain(run.task.fingerprint().iter().cloned())
            .collect(),
        },
    )?;
    session.add_notes(embedding_note);
    Ok(session)
}

/// Refuses a model, task and data set that do not fit together, before
/// anything is allocated: a model of images on a text corpus, or one of
/// tokens on images, says what each reads; a model that reads tokens
/// trains alone at one batch size (the streams it carries state for).
fn check_fit(cfg: &TrainConfig, host: &DataSet, world: World) -> Result<()> {
    let run = &cfg.run;
    let (model, task) = (run.model.reads(), run.task.reads());
    if model != task {
        let fits = match task {
            Reads::Pixels => "a model of images",
            Reads::Tokens => "a model of token ids (a language model)",
            Reads::SentenceIds => "a model of sentences (a sentence classifier)",
            Reads::Trees => "a model of parse trees (tree-lstm)",
        };
        return Err(Error::setting(
            Setting::Model,
            format!(
                "the model {} reads {}, but the data is {} and its task, {}, feeds {}: it needs {fits}",
                run.model.name(),
                model.describe(),
                host.kind().describe(),
                run.task.name(),
                task.describe(),
            ),
            None,
        ));
    }
    let limits = [
        (run.train_limit, Setting::TrainLimit),
        (run.test_limit, Setting::TestLimit),
    ];
    // A limit cuts an image set's examples; a corpus's windows and a
    // treebank's sentences are read whole.
    let limited = limits.iter().find(|(limit, _)| limit.is_some());
    if let (None, Some((_, setting))) = (host.images(), limited) {
        let kind = host.kind();
        return Err(Error::setting(
            *setting,
            format!(
                "a limit counts images, but the data is {}, whose epochs read {}: only an image data set is cut to a limit",
                kind.describe(),
                kind.epoch_reads(),
            ),
            None,
        ));
    }
    if matches!(model, Reads::SentenceIds | Reads::Trees) && (world.size > 1 || !run.other_batches.is_empty()) {
        return Err(Error::setting(
            Setting::Batch,
            format!(
                "the model {} trains on one device at one batch size: its sentences are batched at that size, not split between ranks (got {} ranks and {} other batch sizes)",
                run.model.name(),
                world.size,
                run.other_batches.len()
            ),
            None,
        ));
    }
    if model == Reads::Tokens && (world.size > 1 || !run.other_batches.is_empty()) {
        return Err(Error::setting(
            Setting::Batch,
            format!(
                "the model {} carries each stream's state from step to step, so it trains on one device at one batch size (got {} ranks and {} other batch sizes)",
                run.model.name(),
                world.size,
                run.other_batches.len()
            ),
            None,
        ));
    }
    Ok(())
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
