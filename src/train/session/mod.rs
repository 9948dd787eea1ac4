//! A training session: an arena whose persistent region holds the model,
//! the optimizer, the task's data set and the step's device-side inputs,
//! and the host buffers the loop reuses. After construction, a step touches
//! no heap: the epoch order, the losses read back and the evaluation
//! outputs all live in buffers made here.
//!
//! A session is given its parts already built ([`Parts`]) and what its loop
//! needs to know ([`Loop`]); it never sees the run's settings, and names no
//! model, optimizer, task or data set: the pipeline (`super::pipeline`)
//! builds them, on a planning engine to plan and on the real one to train.
//!
//! A step reads which batch it trains on, its dropout seed and where its
//! loss goes from the step cursor in the arena, and advances it; so on a GPU
//! the first full step of each shape (a batch size, and a length where the
//! task's steps have lengths: [`Task::lengths`]) is captured as a CUDA
//! graph and
//! every later one is one replay, with no host work but the launch. The
//! host reads the losses back every [`READBACK`] steps.
//!
//! - `step.rs`: one training step (planned, captured, replayed), and the
//!   probe a dry session runs to be measured;
//! - `epoch.rs`: the epoch loop, evaluation, losses, checkpoints;
//! - `state.rs`: the state a checkpoint holds, saved and resumed;
//! - `dynamic.rs`: what a task whose every step differs holds, for the
//!   memory report.

mod dynamic;
mod epoch;
mod state;
mod step;
#[cfg(test)]
mod tests;

use super::checkpoints::CheckpointPolicy;
use super::report::StepProfile;
use super::shapes::Shapes;
use crate::autograd::StepGraph;
use crate::backend::OpTime;
use crate::backend::Precision;
use crate::data::shuffle_into;
use crate::distributed::buckets::Buckets;
use crate::distributed::World;
use crate::memory::Buf;
use crate::nn::{Network, Optimizer, ParamStore};
use crate::ops::cursor::StepCursor;
use crate::tasks::Task;
use crate::tensor::{Param, Shape};
use crate::Engine;
use crate::{Error, Result};
use std::sync::atomic::{AtomicBool, AtomicU64};

/// Steps between two reads of the losses: each read waits for the device,
/// so reading every step would forfeit the queue of graph launches.
pub const READBACK: usize = 20;

/// Ops one step may time (`--profile`): a ResNet-50 step queues about 700,
/// and the events are host objects, cheap to keep.
pub(crate) const TIMED_OPS: usize = 4096;

/// The global step (from 0) whose op times `--profile` reads: far enough in
/// that one-time costs (first launches, lazy loading) are over, early
/// enough that most runs have it.
pub const PROFILED_STEP: u64 = 40;

/// What the epoch loop checks between steps: a stop request (a signal) and
/// the checkpoint policy.
pub struct Control<'a> {
    /// Set by a signal handler: the run stops after the step in progress, with
    /// a checkpoint.
    pub stop: &'a AtomicBool,
    /// Where and how often checkpoints are written; `None`: never.
    pub checkpoints: Option<&'a CheckpointPolicy>,
    /// The run's configuration as JSON, recorded in each checkpoint.
    pub config_json: &'a str,
    /// Counts steps done, for a watchdog that ends a run that stopped
    /// making progress (a data-parallel rank stuck in a collective).
    pub progress: Option<&'a AtomicU64>,
}

/// What a session is made of, each already built in the arena's
/// persistent region.
pub struct Parts {
    pub engine: Engine,
    pub model: Box<dyn Network>,
    /// The model's parameters, gradients and buffers.
    pub store: ParamStore,
    pub optimizer: Box<dyn Optimizer>,
    /// What a batch means, over its data set.
    pub task: Box<dyn Task>,
    /// The learning rate of every step of the run, where kernels read it
    /// (the optimizer reads it too).
    pub lr_table: Buf<f32>,
    pub cursor: StepCursor,
    /// Where a data-parallel rank's gradients are summed; `None` alone.
    pub buckets: Option<Buckets>,
}

/// What the session's loop needs to know, and no more.
pub struct Loop {
    /// The batch sizes it steps at (per rank), the first to begin with;
    /// the session adds its task's lengths.
    pub shapes: Shapes,
    /// This rank of a data-parallel run ([`World::ALONE`] alone).
    pub world: World,
    /// Seeds the epoch order and dropout.
    pub seed: u64,
    /// Capture full training steps as CUDA graphs and replay them.
    pub graph: bool,
    /// Follow the arena's memory plans (see [`crate::memory::plan`]).
    pub memory_plan: bool,
    /// Time every op of one step; the runtime's op timing must be enabled.
    pub profile: bool,
    /// The arithmetic the device was set to, for the reports.
    pub precision: Precision,
    /// Settings a resumed run must share with the one that saved a
    /// checkpoint (see `checkpoints::fingerprint`).
    pub fingerprint: Vec<(&'static str, String)>,
}

/// A run built: its engine, network, parameters, optimizer and task in one
/// arena, and the epoch loop over them (see the module's doc).
pub struct Session {
    // Field order is drop order: the captured graphs go before the engine,
    // whose runtime holds the NCCL communicator. NCCL keeps a resource of
    // the communicator alive for each graph that captured its sums, and
    // destroying the communicator first would wait for it forever.
    /// One captured full training step per shape, by its slot
    /// ([`Shapes::slot`]).
    graphs: Vec<Option<StepGraph>>,
    engine: Engine,
    fingerprint: Vec<(&'static str, String)>,
    model: Box<dyn Network>,
    store: ParamStore,
    /// The model's convolution weights (its 4-D parameters), which a step
    /// in another type or layout than theirs converts in one launch.
    conv_weights: Vec<Param>,
    optimizer: Box<dyn Optimizer>,
    task: Box<dyn Task>,
    lr_table: Buf<f32>,
    order: Vec<u32>,
    test_order: Vec<u32>,
    /// What evaluation reads back of one batch's outputs.
    outputs: Vec<f32>,
    /// The batch sizes and the task's lengths.
    shapes: Shapes,
    /// The place among `shapes` of the batch size the session steps at.
    at: usize,
    /// This rank of a data-parallel run (0 of 1 alone).
    world: World,
    buckets: Option<Buckets>,
    /// A rank's wish to stop, summed over the ranks so all stop together.
    stop_vote: Buf<f32>,
    /// A rank's correct test predictions, summed over the ranks.
    eval_correct: Buf<f32>,
    seed: u64,
    precision: Precision,
    /// Training steps run since the start (the cursor's global step).
    steps_done: u64,
    /// The epoch's order, where the gather kernel reads it.
    order_buf: Buf<u32>,
    cursor: StepCursor,
    /// One loss per step of the epoch, written by the steps themselves.
    losses: Buf<f32>,
    host_losses: Vec<f32>,
    use_graph: bool,
    memory_plan: bool,
    /// Time every op of the run's second step (`--profile`).
    profile: bool,
    op_times: Vec<OpTime>,
    profiled: Option<StepProfile>,
    profile_reported: bool,
    kernels_per_step: Option<usize>,
    ops_per_step: Option<usize>,
    /// Free device memory after the first training step (GPU only).
    first_step_free: Option<usize>,
    /// Lines for the run's report beyond the task's own.
    notes: Vec<String>,
}

impl Session {
    /// Adds the loop's own buffers to `parts`' persistent region: the
    /// data-parallel votes, the epoch order and one loss slot per step of
    /// the longest epoch.
    pub(crate) fn new(parts: Parts, settings: Loop) -> Result<Self> {
        let Parts {
            mut engine,
            model,
            store,
            optimizer,
            task,
            lr_table,
            cursor,
            buckets,
        } = parts;
        let Loop {
            shapes,
            world,
            seed,
            graph,
            memory_plan,
            profile,
            precision,
            fingerprint,
        } = settings;
        let shapes = shapes.with_lengths(task.lengths());
        let task_dynamic = task.dynamic();
        let train_len = task.train_len();
        let smallest = shapes.batches().iter().min().copied().unwrap_or(1);
        let steps = train_len.div_ceil(smallest.saturating_mul(world.size).max(1));
        let widest = shapes.batches().iter().max().copied().unwrap_or(0);
        let mut p = engine.persistent();
        let (stop_vote, eval_correct) = match buckets {
            Some(_) => (
                p.zeros::<f32>("stop vote", Shape::new(&[1]))?,
                p.zeros::<f32>("evaluation scores", Shape::new(&[crate::tasks::SCORES]))?,
            ),
            None => (Buf::default(), Buf::default()),
        };
        let order_buf = p.zeros::<u32>("epoch order", Shape::new(&[train_len]))?;
        let losses = p.zeros::<f32>("step losses", Shape::new(&[steps]))?;
        let test_len = task.test_len() as u32;
        let outputs = vec![0.0; task.readback_len(widest)];
        let conv_weights = store.params().filter(|p| p.shape().rank() == 4).collect();
        Ok(Self {
            graphs: (0..shapes.count()).map(|_| None).collect(),
            engine,
            fingerprint,
            model,
            store,
            conv_weights,
            optimizer,
            task,
            lr_table,
            order: (0..train_len as u32).collect(),
            test_order: (0..test_len).collect(),
            outputs,
            shapes,
            at: 0,
            world,
            buckets,
            stop_vote,
            eval_correct,
            seed,
            precision,
            steps_done: 0,
            order_buf,
            cursor,
            losses,
            host_losses: vec![0.0; steps],
            // A task whose every step differs has no shape to plan or
            // capture: its steps bump-allocate.
            use_graph: graph && !task_dynamic,
            memory_plan: memory_plan && !task_dynamic,
            profile,
            op_times: Vec::with_capacity(TIMED_OPS),
            profiled: None,
            profile_reported: false,
            kernels_per_step: None,
            ops_per_step: None,
            first_step_free: None,
            notes: Vec::new(),
        })
    }

    /// The engine: its arena and device.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The model's parameters, gradients and buffers.
    pub fn store(&self) -> &ParamStore {
        &self.store
    }

    /// The optimizer, with its state.
    pub fn optimizer(&self) -> &dyn Optimizer {
        self.optimizer.as_ref()
    }

    /// Where the run's per-step learning rates are (one per global step;
    /// the last holds for every later step).
    pub fn lr_table(&self) -> Buf<f32> {
        self.lr_table
    }

    /// Whether full steps run as replays of a captured CUDA graph.
    pub fn uses_graph(&self) -> bool {
        self.use_graph
    }

    /// How many shapes' full training steps have been captured as graphs
    /// so far (each batch size, and each length of a task with lengths,
    /// has its own).
    pub fn graphs_captured(&self) -> usize {
        self.graphs.iter().filter(|g| g.is_some()).count()
    }

    /// The batch size the session steps at (per rank).
    pub fn batch(&self) -> usize {
        self.shapes.batches()[self.at]
    }

    /// The batch sizes the session was planned for, the first its own.
    pub fn batches(&self) -> &[usize] {
        self.shapes.batches()
    }

    /// What the task made of the data, for the run's report.
    pub fn task_notes(&self) -> Vec<String> {
        self.task
            .describe()
            .into_iter()
            .chain(self.notes.iter().cloned())
            .collect()
    }

    /// Adds lines to what the run's report says of its setup (where the
    /// word embedding started).
    pub(crate) fn add_notes(&mut self, notes: impl IntoIterator<Item = String>) {
        self.notes.extend(notes);
    }

    /// The lengths its task steps at (empty when steps have none).
    pub fn lengths(&self) -> &[usize] {
        self.shapes.lengths()
    }

    /// Steps at `batch` from the next epoch on: call it between epochs (a
    /// step finds its examples at its index in the epoch times the batch).
    /// Each batch size has its own plans and graph; one the session was not
    /// planned for is refused.
    pub fn set_batch(&mut self, batch: usize) -> Result<()> {
        self.at = self.shapes.place(batch).ok_or_else(|| {
            Error::Config(format!(
                "the session was planned for batches {:?}, not {batch}",
                self.shapes.batches()
            ))
        })?;
        Ok(())
    }

    /// Steps in one epoch; the last batch may be smaller, as PyTorch's default.
    pub fn steps_per_epoch(&self) -> usize {
        self.order.len().div_ceil(self.global_batch())
    }

    /// Examples per step over all ranks.
    fn global_batch(&self) -> usize {
        self.batch() * self.world.size
    }

    /// This rank and the number of ranks.
    pub fn world(&self) -> World {
        self.world
    }

    /// The gradient buckets of a data-parallel run: each one's parameters
    /// and bytes.
    pub(crate) fn bucket_layout(&self) -> Vec<(Vec<String>, usize)> {
        self.buckets.as_ref().map(|b| b.layout(&self.store)).unwrap_or_default()
    }

    /// Makes every rank start from rank 0's parameters, buffers and
    /// optimizer state: the others zero theirs and all sum each slab once
    /// (exact: x + 0 = x). Then sums each (still zero) gradient bucket
    /// once, a precaution: NCCL may set up connections lazily, at the first
    /// sum of a size, and that first sum is better made here than inside
    /// the step's graph capture. (It was added while chasing a hang whose
    /// cause turned out to be elsewhere; whether NCCL 2.28 needs it was not
    /// isolated.) Alone, nothing to do.
    pub fn sync_replicas(&mut self) -> Result<()> {
        if self.world.size < 2 {
            return Ok(());
        }
        let mut slabs = vec![self.store.values(), self.store.buffers()];
        slabs.extend(self.optimizer.state().into_iter().map(|(_, slab)| slab));
        for slab in slabs.into_iter().filter(|s| !s.is_empty()) {
            if self.world.rank != 0 {
                self.engine.write_persistent(slab, &vec![0.0; slab.len()])?;
            }
            self.engine.all_reduce_persistent(slab)?;
        }
        for bucket in self.buckets.as_ref().map(Buckets::bufs).unwrap_or_default() {
            self.engine.all_reduce_persistent(bucket)?;
        }
        Ok(())
    }

    /// Whether any rank asked to stop (alone: whether this one did). Every
    /// rank must ask at the same steps.
    fn agree_stop(&mut self, asked: bool) -> Result<bool> {
        if !self.data_parallel() {
            return Ok(asked);
        }
        self.engine.write_persistent(self.stop_vote, &[asked as u32 as f32])?;
        self.engine.all_reduce_persistent(self.stop_vote)?;
        let mut votes = [0.0];
        self.engine.read_persistent(self.stop_vote, &mut votes)?;
        Ok(votes[0] > 0.0)
    }

    /// Puts the training set in epoch `epoch`'s shuffled order, on the host
    /// and where the kernels read it, and points the cursor at `first_step`.
    pub fn begin_epoch(&mut self, epoch: usize, first_step: usize) -> Result<()> {
        shuffle_into(&mut self.order, self.seed, epoch as u64);
        self.engine.write_persistent(self.order_buf, &self.order)?;
        self.task.begin_epoch(&mut self.engine, self.seed, epoch)?;
        self.task.reset(&mut self.engine)?;
        self.cursor.set(&mut self.engine, first_step as u32, self.steps_done)?;
        if let Some(figures) = self.optimizer.clip_figures() {
            // The norms' sum and count start over; the last step's stay.
            let norms = figures
                .slice(2, 2)
                .ok_or_else(|| Error::Config("a clip's figures are 4".into()))?;
            self.engine.write_persistent(norms, &[0.0, 0.0])?;
        }
        Ok(())
    }

    /// Training steps done since the run began (a resumed run included).
    pub fn steps_done(&self) -> u64 {
        self.steps_done
    }

    /// Whether this session is a rank of a data-parallel run.
    fn data_parallel(&self) -> bool {
        self.buckets.is_some()
    }

    /// Runs `body` on the device's workers (see [`crate::backend::Workers`]):
    /// inside, a training step allocates nothing on the heap.
    pub fn on_workers<R: Send>(&mut self, body: impl FnOnce(&mut Self) -> R + Send) -> R {
        let workers = self.engine.runtime().workers();
        workers.run(|| body(self))
    }
}
