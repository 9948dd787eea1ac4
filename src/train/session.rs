//! A training session: an arena whose persistent region holds the model,
//! the optimizer, the data set and the step's device-side inputs, and the
//! host buffers the loop reuses. After construction, a step touches no heap:
//! the epoch order, the losses read back and the evaluation logits all live
//! in buffers made here.
//!
//! A step reads which batch it trains on, its dropout seed and where its
//! loss goes from the step cursor in the arena, and advances it; so on a GPU
//! the first full step is captured as a CUDA graph and every later full step
//! is one replay, with no host work but the launch. The host reads the
//! losses back every [`READBACK`] steps.

use super::checkpoints::{self, CheckpointPolicy, Every, Position};
use super::report::{resident_bytes, EpochReport, Observer, StepProfile};
use super::task::{Classification, Task};
use super::TrainConfig;
use crate::backend::cuda::OpTime;
use crate::checkpoint::{optimizer_state_name, Checkpoint, NamedTensor};
use crate::data::{shuffle_into, ImageSet};
use crate::distributed::buckets::{Buckets, Queued};
use crate::distributed::World;
use crate::memory::{Arena, Buf, StepGraph};
use crate::nn::{Mode, Network, Optimizer, ParamStore};
use crate::ops::cursor::StepCursor;
use crate::ops::dropout::DropoutSeed;
use crate::ops::gather::BatchAt;
use crate::ops::lr::LrAt;
use crate::tensor::Shape;
use crate::{Error, Result, Setting};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;

/// Steps between two reads of the losses: each read waits for the device,
/// so reading every step would forfeit the queue of graph launches.
pub const READBACK: usize = 20;

/// Ops one step may time (`--profile`): a ResNet-50 step queues about 700,
/// and the events are host objects, cheap to keep.
const TIMED_OPS: usize = 4096;

/// The global step whose op times `--profile` reads: far enough in that
/// one-time costs (first launches, lazy loading) are over, early enough that
/// every run has it.
const PROFILED_STEP: u64 = 40;

/// The kinds of step a session runs; each has its own memory plan, since
/// each allocates its own sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    Train = 1,
    /// The last training batch of an epoch, when it is shorter.
    TrainLast = 2,
    Eval = 3,
    EvalLast = 4,
}

impl StepKind {
    pub fn name(key: u32) -> &'static str {
        match key {
            1 => "training step",
            2 => "last, shorter training step",
            3 => "evaluation step",
            4 => "last, shorter evaluation step",
            _ => "step",
        }
    }
}

/// What the epoch loop checks between steps: a stop request (a signal) and
/// the checkpoint policy.
pub struct Control<'a> {
    pub stop: &'a AtomicBool,
    pub checkpoints: Option<&'a CheckpointPolicy>,
    /// The run's configuration as JSON, recorded in each checkpoint.
    pub config_json: &'a str,
    /// Counts steps done, for a watchdog that ends a run that stopped
    /// making progress (a data-parallel rank stuck in a collective).
    pub progress: Option<&'a AtomicU64>,
}

pub struct Session {
    // Field order is drop order: the captured graph goes before the arena,
    // whose backend holds the NCCL communicator. NCCL keeps a resource of
    // the communicator alive for each graph that captured its sums, and
    // destroying the communicator first would wait for it forever.
    graph: Option<StepGraph>,
    arena: Arena,
    /// Settings a resume must match (see `checkpoints::fingerprint`).
    fingerprint: Vec<(&'static str, String)>,
    model: Box<dyn Network>,
    /// The model's parameters, gradients and buffers.
    store: ParamStore,
    optimizer: Box<dyn Optimizer>,
    task: Box<dyn Task>,
    /// The learning rate of every step of the run, where kernels read it.
    lr_table: Buf<f32>,
    order: Vec<u32>,
    test_order: Vec<u32>,
    logits: Vec<f32>,
    /// Examples per step on this rank (a step is `batch × world.size`).
    batch: usize,
    /// This rank of a data-parallel run (0 of 1 alone).
    world: World,
    /// Where a data-parallel rank's gradients are summed; `None` alone.
    buckets: Option<Buckets>,
    /// A rank's wish to stop, summed over the ranks so all stop together.
    stop_vote: Buf<f32>,
    /// A rank's correct test predictions, summed over the ranks.
    eval_correct: Buf<f32>,
    seed: u64,
    /// The arithmetic the device was set to, for the reports.
    precision: crate::backend::Precision,
    /// Training steps run since the start (the cursor's global step).
    steps_done: u64,
    /// The epoch's order, where the gather kernel reads it.
    order_buf: Buf<u32>,
    cursor: StepCursor,
    /// One loss per step of the epoch, written by the steps themselves.
    losses: Buf<f32>,
    host_losses: Vec<f32>,
    /// Capture full steps as a CUDA graph and replay it.
    use_graph: bool,
    /// Follow the arena's memory plans (see [`crate::memory::plan`]).
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
}

/// Whether full steps run as replays of a captured CUDA graph on `device`;
/// `--graph on` is refused anywhere but on the GPU (a dry arena, which only
/// measures, takes it either way).
pub(crate) fn use_graph(cfg: &TrainConfig, device: crate::backend::DeviceKind) -> Result<bool> {
    use crate::backend::DeviceKind;
    let on_gpu = device == DeviceKind::Cuda;
    match cfg.graph {
        Some(true) if !on_gpu && device != DeviceKind::Dry => Err(Error::setting(
            Setting::Graph,
            "whole-step graphs need the GPU (CUDA graphs)",
            None,
        )),
        Some(on) => Ok(on && on_gpu),
        None => Ok(on_gpu),
    }
}

impl Session {
    /// Fills `arena`'s persistent region: parameters, optimizer state, both
    /// splits of the data set, the step cursor, the epoch order and losses.
    pub fn new(cfg: &TrainConfig, host: &ImageSet, mut arena: Arena) -> Result<Self> {
        cfg.validate()?;
        let use_graph = use_graph(cfg, arena.device())?;
        let profile = cfg.profile && arena.enable_op_timing(TIMED_OPS)?;
        let train_len = host.train_images.count;
        let world = cfg.data_parallel.map_or(World::ALONE, |d| d.world);
        // Checked before anything is sized by it: a step larger than the
        // training set would only size host and arena buffers for examples
        // that do not exist (a huge --batch once aborted the process).
        let global = match cfg.batch.checked_mul(world.size) {
            Some(global) if global <= train_len => global,
            _ => {
                let step = match world.size {
                    1 => format!("a batch of {}", cfg.batch),
                    n => format!("a step of {n} ranks × {} examples", cfg.batch),
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
        let side = host.train_images.rows.min(host.train_images.cols);
        if cfg.augment.crop > side {
            return Err(Error::setting(
                Setting::Augment,
                format!(
                    "a crop padding of {} is wider than the {side}-pixel side of {}'s images",
                    cfg.augment.crop, host.name
                ),
                Some(format!("crop{side} or less")),
            ));
        }
        let steps = train_len.div_ceil(global);
        let mut p = arena.persistent();
        let input = Classification::input_of(host);
        let (store, model) = ParamStore::build(&mut p, cfg.seed, |pb| cfg.model.build(input, pb))?;
        let cursor = StepCursor::new(&mut p)?;
        let rates = cfg.schedule.table(cfg.lr, steps, cfg.epochs);
        let lr_table = p.upload("learning rates", Shape::new(&[rates.len()]), &rates)?;
        let optimizer = cfg.optimizer.build(
            &store,
            &mut p,
            LrAt {
                table: lr_table,
                cursor,
            },
        )?;
        let buckets = match cfg.data_parallel {
            Some(dp) => Some(Buckets::new(&store, dp.bucket_bytes)?),
            None => None,
        };
        let (stop_vote, eval_correct) = match cfg.data_parallel {
            Some(_) => (
                p.zeros::<f32>("stop vote", Shape::new(&[1]))?,
                p.zeros::<f32>("evaluation count", Shape::new(&[1]))?,
            ),
            None => (Buf::default(), Buf::default()),
        };
        let task: Box<dyn Task> = Box::new(
            Classification::upload(host, &mut p)?
                .with_label_smoothing(cfg.label_smoothing)
                .with_augment(cfg.augment, cfg.seed),
        );
        let order_buf = p.zeros::<u32>("epoch order", Shape::new(&[train_len]))?;
        let losses = p.zeros::<f32>("step losses", Shape::new(&[steps]))?;
        let test_len = task.test_len() as u32;
        let classes = input.classes;
        Ok(Self {
            arena,
            // A checkpoint is bound to the step's whole batch, not to how
            // it is shared: 2 GPUs × 50 may resume 1 GPU × 100.
            fingerprint: checkpoints::fingerprint(
                global,
                cfg.train_limit,
                &cfg.model.describe(),
                &cfg.optimizer.describe(),
                &cfg.augment.to_string(),
            ),
            model,
            store,
            optimizer,
            task,
            lr_table,
            order: (0..train_len as u32).collect(),
            test_order: (0..test_len).collect(),
            logits: vec![0.0; cfg.batch * classes],
            batch: cfg.batch,
            world,
            buckets,
            stop_vote,
            eval_correct,
            seed: cfg.seed,
            precision: cfg.precision,
            steps_done: 0,
            order_buf,
            cursor,
            losses,
            host_losses: vec![0.0; steps],
            use_graph,
            memory_plan: cfg.memory_plan,
            graph: None,
            profile,
            op_times: Vec::with_capacity(TIMED_OPS),
            profiled: None,
            profile_reported: false,
            kernels_per_step: None,
            ops_per_step: None,
            first_step_free: None,
        })
    }

    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    /// The model's parameters, gradients and buffers.
    pub fn store(&self) -> &ParamStore {
        &self.store
    }

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

    /// Steps in one epoch; the last batch may be smaller, as PyTorch's default.
    pub fn steps_per_epoch(&self) -> usize {
        self.order.len().div_ceil(self.global_batch())
    }

    /// Examples per step over all ranks.
    fn global_batch(&self) -> usize {
        self.batch * self.world.size
    }

    /// This rank and the number of ranks.
    pub fn world(&self) -> World {
        self.world
    }

    /// The gradient buckets of a data-parallel run: each one's parameters
    /// and bytes.
    pub fn bucket_layout(&self) -> Vec<(Vec<String>, usize)> {
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
                self.arena.write_persistent(slab, &vec![0.0; slab.len()])?;
            }
            self.arena.all_reduce_persistent(slab)?;
        }
        for bucket in self.buckets.as_ref().map(Buckets::bufs).unwrap_or_default() {
            self.arena.all_reduce_persistent(bucket)?;
        }
        Ok(())
    }

    /// Whether any rank asked to stop (alone: whether this one did). Every
    /// rank must ask at the same steps.
    fn agree_stop(&mut self, asked: bool) -> Result<bool> {
        if !self.data_parallel() {
            return Ok(asked);
        }
        self.arena.write_persistent(self.stop_vote, &[asked as u32 as f32])?;
        self.arena.all_reduce_persistent(self.stop_vote)?;
        let mut votes = [0.0];
        self.arena.read_persistent(self.stop_vote, &mut votes)?;
        Ok(votes[0] > 0.0)
    }

    /// Puts the training set in epoch `epoch`'s shuffled order, on the host
    /// and where the kernels read it, and points the cursor at `first_step`.
    pub fn begin_epoch(&mut self, epoch: usize, first_step: usize) -> Result<()> {
        shuffle_into(&mut self.order, self.seed, epoch as u64);
        self.arena.write_persistent(self.order_buf, &self.order)?;
        self.cursor.set(&mut self.arena, first_step as u32, self.steps_done)?;
        Ok(())
    }

    /// Training steps done since the run began (a resumed run included).
    pub fn steps_done(&self) -> u64 {
        self.steps_done
    }

    /// Every tensor a checkpoint holds, each with its persistent buffer:
    /// the model's parameters and buffers by their `state_dict` names, then
    /// the optimizer's state per parameter (`optimizer.<name>.<state>`).
    fn checkpointed(&self) -> Vec<(String, Shape, Buf<f32>)> {
        let mut out = Vec::new();
        self.store
            .visit(&mut |entry, param| out.push((entry.name.clone(), entry.shape, param.buf())));
        for (state, slab) in self.optimizer.state() {
            for param in self.store.params() {
                if let Some(slot) = self.store.slot_in(slab, &param) {
                    out.push((
                        optimizer_state_name(self.store.name(&param), state),
                        param.shape(),
                        slot,
                    ));
                }
            }
        }
        out
    }

    /// The model's tensors and the optimizer's state, read from the arena
    /// and named as PyTorch's `state_dict`s name them.
    pub fn state_tensors(&mut self) -> Result<Vec<NamedTensor>> {
        let mut out = Vec::new();
        for (name, shape, buf) in self.checkpointed() {
            let mut values = vec![0.0; shape.numel()];
            self.arena.read_persistent(buf, &mut values)?;
            out.push(NamedTensor::new(name, shape.dims(), values));
        }
        Ok(out)
    }

    /// Writes a checkpoint of the session at `at`.
    pub fn save(&mut self, policy: &CheckpointPolicy, at: Position, config_json: &str) -> Result<PathBuf> {
        let tensors = self.state_tensors()?;
        let ckpt = checkpoints::make(
            tensors,
            at,
            self.steps_done,
            self.seed,
            config_json.to_string(),
            &self.fingerprint,
        );
        checkpoints::write(policy, &ckpt)
    }

    /// Loads a checkpoint's parameters, momentum and step count; returns
    /// where its run stood. Every tensor is checked before any is written,
    /// so a refused checkpoint leaves the session as it was.
    pub fn resume(&mut self, ckpt: &Checkpoint) -> Result<Position> {
        let at = checkpoints::position(ckpt, self.seed, &self.fingerprint)?;
        let writes = self.checkpointed();
        for (name, shape, _) in &writes {
            match ckpt.tensor(name) {
                Some(t) if t.shape == shape.dims() => {}
                Some(t) => {
                    return Err(Error::Config(format!(
                        "cannot resume: the checkpoint's {name} is {:?}, the model's is {shape}",
                        t.shape
                    )))
                }
                None => return Err(Error::Config(format!("cannot resume: the checkpoint has no {name}"))),
            }
        }
        for (name, _, buf) in &writes {
            if let Some(t) = ckpt.tensor(name) {
                self.arena.write_persistent(*buf, &t.values)?;
            }
        }
        self.steps_done = ckpt.step;
        Ok(at)
    }

    /// Queues training step `step` of the current epoch. Its loss lands in
    /// the epoch's loss slots; read it with [`Session::losses`].
    pub fn train_step(&mut self, step: usize) -> Result<()> {
        let global = self.global_batch();
        let step_len = global.min(self.order.len().saturating_sub(step * global));
        // A data-parallel rank trains on its shard of the step's examples;
        // its loss is its share of the step's mean, so the shares and their
        // gradients sum to one device's over the whole step.
        let (first_row, len) = self.world.shard(step_len, self.batch);
        let at = BatchAt {
            order: self.order_buf,
            cursor: self.cursor,
            stride: global,
            len,
            offset: first_row,
        };
        let dropout = DropoutSeed::PerStep {
            base: self.seed,
            cursor: self.cursor,
            first: 0,
        };
        let (model, optimizer, task, store) = (&self.model, &self.optimizer, &self.task, &self.store);
        let (losses, cursor, buckets) = (self.losses, self.cursor, self.buckets.as_ref());
        let body = |s: &mut crate::Step<'_>| {
            let (x, labels) = task.train_batch(s, at)?;
            let logits = model.forward(s, x, Mode::Train { dropout, first_row })?;
            let loss = task.loss(s, logits, labels, step_len)?;
            let grads = match buckets {
                Some(buckets) => {
                    let mut queued = Queued::default();
                    let grads = s.backward_with(loss, &mut |s| buckets.queue_ready(s, store, &mut queued))?;
                    buckets.finish(s, store, &mut queued)?;
                    grads
                }
                None => s.backward(loss)?,
            };
            optimizer.update(s, store, &grads)?;
            s.finish_step(loss, losses, cursor)
        };
        // --profile: with a graph, the captured step carries the events, so
        // any replay is timed with no host work between its ops; without
        // one, step PROFILED_STEP itself is bracketed as it is queued.
        let kind = if step_len == global {
            StepKind::Train
        } else {
            StepKind::TrainLast
        };
        let key = self.memory_plan.then_some(kind as u32);
        if self.use_graph && step_len == global {
            if self.graph.is_none() {
                let timing = self.profile && self.arena.start_op_timing();
                let ops_before = self.arena.ops_queued().unwrap_or(0);
                let graph = self.arena.capture_step(key, body);
                self.arena.pause_op_timing();
                let graph = graph?;
                let ops = (self.arena.ops_queued().unwrap_or(0) - ops_before) as usize;
                // Two event nodes bracket each op when timing.
                let events = if timing { 2 * ops } else { 0 };
                self.kernels_per_step = Some(graph.nodes() - events);
                self.ops_per_step = Some(ops);
                self.graph = Some(graph);
                self.profile &= timing;
            }
            if let Some(graph) = &self.graph {
                self.arena.replay_step(graph)?;
            }
        } else {
            let timing = self.profile && self.steps_done == PROFILED_STEP && self.arena.start_op_timing();
            let ops_before = self.arena.ops_queued();
            match key {
                Some(key) => self.arena.planned_step(key, body)?,
                None => self.arena.step(body)?,
            }
            self.arena.pause_op_timing();
            let ops = self.arena.ops_queued().zip(ops_before).map(|(a, b)| (a - b) as usize);
            if !self.use_graph {
                self.kernels_per_step = self.kernels_per_step.or(ops);
                self.ops_per_step = self.ops_per_step.or(ops);
            }
            if timing {
                let span = self.arena.read_op_times(&mut self.op_times)?;
                self.profiled = Some(StepProfile::new(&self.op_times, ops, span, false));
            }
        }
        if self.profile && self.use_graph && self.steps_done == PROFILED_STEP && self.profiled.is_none() {
            let span = self.arena.read_op_times(&mut self.op_times)?;
            self.profiled = Some(StepProfile::new(&self.op_times, self.kernels_per_step, span, true));
        }
        self.steps_done += 1;
        Ok(())
    }

    /// The losses of steps `range` of the current epoch (waits for them).
    /// On a data-parallel rank each is the rank's share of the step's loss
    /// until the epoch loop reads it back, which sums the shares in place.
    pub fn losses(&mut self, range: std::ops::Range<usize>) -> Result<&[f32]> {
        // Only the slots asked for cross to the host.
        let slots = self.loss_slots(range.clone())?;
        let host = &mut self.host_losses[range];
        self.arena.read_persistent(slots, host)?;
        Ok(host)
    }

    /// Where the losses of steps `range` of the current epoch are.
    fn loss_slots(&self, range: std::ops::Range<usize>) -> Result<Buf<f32>> {
        self.losses.slice(range.start, range.len()).ok_or_else(|| {
            Error::Config(format!(
                "steps {range:?} are past the epoch's {} steps",
                self.host_losses.len()
            ))
        })
    }

    /// Whether this session is a rank of a data-parallel run.
    fn data_parallel(&self) -> bool {
        self.buckets.is_some()
    }

    /// Fraction of the test set the model classifies correctly. A
    /// data-parallel rank evaluates its share of the test set (see
    /// [`World::share`]) and the ranks sum their counts, so each gets the
    /// whole set's figure; alone, the share is the whole set.
    pub fn evaluate(&mut self) -> Result<f64> {
        let n = self.test_order.len();
        let shard = self.eval_shard();
        let mut correct = 0usize;
        for start in shard.clone().step_by(self.batch) {
            correct += self.evaluate_batch(start, shard.end)?;
        }
        if self.data_parallel() {
            // Exact: f32 holds every whole number up to 2^24, past any
            // test set's size.
            self.arena.write_persistent(self.eval_correct, &[correct as f32])?;
            self.arena.all_reduce_persistent(self.eval_correct)?;
            let mut total = [0.0];
            self.arena.read_persistent(self.eval_correct, &mut total)?;
            correct = total[0] as usize;
        }
        Ok(correct as f64 / n as f64)
    }

    /// The test examples this rank evaluates.
    fn eval_shard(&self) -> std::ops::Range<usize> {
        let (first, count) = self.world.share(self.test_order.len());
        first..first + count
    }

    /// Correct predictions among the test examples from `start` on, one
    /// batch, not past `limit`.
    fn evaluate_batch(&mut self, start: usize, limit: usize) -> Result<usize> {
        let end = (start + self.batch).min(limit);
        let indices = &self.test_order[start..end];
        let classes = self.task.input().classes;
        let logits = &mut self.logits[..indices.len() * classes];
        let (model, task) = (&self.model, &self.task);
        let body = |s: &mut crate::Step<'_>| {
            s.set_grad_enabled(false);
            let x = task.test_batch(s, indices)?;
            let y = model.forward(s, x, Mode::Eval)?;
            s.read(y, logits)
        };
        let kind = if indices.len() == self.batch {
            StepKind::Eval
        } else {
            StepKind::EvalLast
        };
        match self.memory_plan {
            true => self.arena.planned_step(kind as u32, body)?,
            false => self.arena.step(body)?,
        }
        Ok(self.task.correct(logits, start))
    }

    /// Runs `body` on the device's workers (see [`crate::backend::Workers`]):
    /// inside, a training step allocates nothing on the heap.
    pub fn on_workers<R: Send>(&mut self, body: impl FnOnce(&mut Self) -> R + Send) -> R {
        let workers = self.arena.workers();
        workers.run(|| body(self))
    }

    /// One epoch: shuffle, train every batch, evaluate. Run epochs inside
    /// one [`Session::on_workers`] call, as [`super::train`] does: then no
    /// step touches the heap, and one thread runs the loop from start to end.
    pub fn epoch(&mut self, epoch: usize, observer: &mut dyn Observer) -> Result<EpochReport> {
        if epoch == 0 {
            return Err(Error::Config(
                "epochs are numbered from 1; epoch 0 does not exist".into(),
            ));
        }
        let stop = AtomicBool::new(false);
        let control = Control {
            stop: &stop,
            checkpoints: None,
            config_json: "{}",
            progress: None,
        };
        self.epoch_from(epoch, Position::epoch_start(epoch - 1), observer, &control)
    }

    /// Epoch `epoch` from `start` on (a resumed run starts mid-epoch),
    /// writing checkpoints as `control` says. A stop request ends the epoch
    /// after the current step with a checkpoint and [`Error::Interrupted`].
    pub fn epoch_from(
        &mut self,
        epoch: usize,
        start: Position,
        observer: &mut dyn Observer,
        control: &Control<'_>,
    ) -> Result<EpochReport> {
        let steps = self.steps_per_epoch();
        observer.epoch_started(epoch, steps);
        let first = start.step_in_epoch.min(steps);
        observer.resumed_at(epoch, first);
        self.begin_epoch(epoch, first)?;
        let started = Instant::now();
        let mut total = start.loss_sum;
        let mut read = first;
        for step in first..steps {
            self.train_step(step)?;
            if let Some(progress) = control.progress {
                progress.fetch_add(1, Ordering::Relaxed);
            }
            if self.steps_done == 1 {
                self.first_step_free = self.arena.device_free_bytes()?;
            }
            let asked = control.stop.load(Ordering::Relaxed);
            let due = matches!(control.checkpoints.and_then(|p| p.every), Some(Every::Steps(n)) if self.steps_done.is_multiple_of(n));
            // Alone, a stop request is acted on after the current step;
            // data-parallel ranks settle it at the next read-back, which all
            // reach after the same step, so all stop together.
            let boundary = step + 1 - read >= READBACK || step + 1 == steps || due;
            let readback = boundary || (asked && !self.data_parallel());
            let stopping = readback && self.agree_stop(asked)?;
            if readback {
                // A checkpoint is written only after its steps' losses were
                // read and found finite: a diverged step never overwrites
                // the last good checkpoint.
                total += self.report_losses(epoch, read..step + 1, observer)?;
                read = step + 1;
            }
            if (stopping || due) && step + 1 < steps {
                let at = Position {
                    epochs_done: epoch - 1,
                    step_in_epoch: step + 1,
                    loss_sum: total,
                };
                let written = self.checkpoint(control, at, observer)?;
                if stopping {
                    return Err(Error::Interrupted {
                        epoch,
                        step: step + 1,
                        checkpoint: written,
                    });
                }
            }
        }
        let seconds = started.elapsed().as_secs_f64();
        for key in self.arena.take_replanned() {
            observer.note(&format!(
                "the {} allocated another sequence than its memory plan; it was re-planned",
                StepKind::name(key)
            ));
        }
        if let (Some(profile), false) = (&self.profiled, self.profile_reported) {
            observer.profiled(profile, seconds / steps as f64);
            self.profile_reported = true;
        }
        observer.evaluating(epoch);
        let started = Instant::now();
        let test_accuracy = self.evaluate()?;
        let memory = self.arena.device_memory()?;
        let report = EpochReport {
            epoch,
            rank: self.world.rank,
            world_size: self.world.size,
            train_loss: total / steps as f64,
            test_accuracy,
            seconds,
            eval_seconds: started.elapsed().as_secs_f64(),
            steps,
            precision: self.precision,
            arena: self.arena.stats(),
            resident_bytes: resident_bytes(),
            device_free_bytes: memory.map(|(_, free)| free),
            device_total_bytes: memory.map(|(total, _)| total),
            device_free_bytes_first_step: self.first_step_free,
            device_allocations: self.arena.cuda_calls().map(|c| c.allocations),
            graph: self.use_graph,
            kernels_per_step: self.kernels_per_step,
            ops_per_step: self.ops_per_step,
            kernel_seconds_per_step: self.profiled.as_ref().map(|p| p.kernel_seconds),
            span_seconds_per_step: self.profiled.as_ref().and_then(|p| p.span_seconds),
        };
        observer.epoch(&report);
        let stopping = self.agree_stop(control.stop.load(Ordering::Relaxed))?;
        let due = matches!(control.checkpoints.and_then(|p| p.every), Some(Every::Epochs(n)) if (epoch as u64).is_multiple_of(n));
        if stopping || due {
            let written = self.checkpoint(control, Position::epoch_start(epoch), observer)?;
            if stopping {
                return Err(Error::Interrupted {
                    epoch,
                    step: steps,
                    checkpoint: written,
                });
            }
        }
        Ok(report)
    }

    /// Writes a checkpoint if the run has a policy, and says where.
    fn checkpoint(
        &mut self,
        control: &Control<'_>,
        at: Position,
        observer: &mut dyn Observer,
    ) -> Result<Option<PathBuf>> {
        let Some(policy) = control.checkpoints else {
            return Ok(None);
        };
        // The ranks hold the same state; rank 0 writes it.
        if self.world.rank != 0 {
            return Ok(None);
        }
        let path = self.save(policy, at, control.config_json)?;
        observer.checkpoint_written(&path);
        Ok(Some(path))
    }

    /// Reads the losses of `steps` back, tells the observer, and stops at
    /// the first that is not finite. Returns their sum.
    fn report_losses(
        &mut self,
        epoch: usize,
        steps: std::ops::Range<usize>,
        observer: &mut dyn Observer,
    ) -> Result<f64> {
        let first = steps.start;
        let mut sum = 0.0;
        if self.data_parallel() {
            // Each rank holds its share of every step's loss.
            let slots = self.loss_slots(steps.clone())?;
            self.arena.all_reduce_persistent(slots)?;
        }
        for (i, &loss) in self.losses(steps)?.iter().enumerate() {
            if !loss.is_finite() {
                return Err(Error::Diverged {
                    epoch,
                    step: first + i + 1,
                    loss,
                });
            }
            sum += loss as f64;
            observer.step(epoch, first + i, loss);
        }
        Ok(sum)
    }

    /// One step of every kind the run will take (a full and a last, shorter
    /// training and evaluation batch), for sizing and planning on a dry arena.
    pub(crate) fn probe(&mut self) -> Result<Vec<crate::autograd::Candidate>> {
        self.train_step(0)?;
        // A full training step's: the only step a memory budget shapes.
        let candidates = self.arena.recompute_candidates();
        let steps = self.steps_per_epoch();
        if steps > 1 && !self.order.len().is_multiple_of(self.global_batch()) {
            self.train_step(steps - 1)?;
        }
        let shard = self.eval_shard();
        let tests = shard.len();
        if tests > 0 {
            self.evaluate_batch(shard.start, shard.end)?;
        }
        if tests > self.batch && !tests.is_multiple_of(self.batch) {
            self.evaluate_batch(shard.end - tests % self.batch, shard.end)?;
        }
        Ok(candidates)
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::DeviceRequest;
    use crate::train::{prepare, Quiet, TrainConfig};
    use crate::{Error, Setting};

    #[test]
    fn epoch_zero_is_an_error_not_an_underflow() {
        let cfg = TrainConfig {
            device: DeviceRequest::Cpu,
            threads: 1,
            data_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist").into(),
            train_limit: Some(200),
            test_limit: Some(100),
            ..TrainConfig::default()
        };
        let (mut session, _) = prepare(&cfg).expect("session");
        assert!(matches!(session.epoch(0, &mut Quiet), Err(Error::Config(_))));
        session.epoch(1, &mut Quiet).expect("epoch 1 runs");
    }

    #[test]
    fn a_batch_larger_than_the_training_set_is_refused_before_anything_is_sized_by_it() {
        let cfg = |batch| TrainConfig {
            device: DeviceRequest::Cpu,
            threads: 1,
            batch,
            data_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist").into(),
            train_limit: Some(100),
            test_limit: Some(100),
            ..TrainConfig::default()
        };
        for batch in [101, 99_999_999_999, usize::MAX] {
            match prepare(&cfg(batch)) {
                Err(Error::Setting {
                    setting: Setting::Batch,
                    problem,
                    fix,
                }) => {
                    assert!(
                        problem.contains(&format!("a batch of {batch} is larger than the 100 training images")),
                        "{problem}"
                    );
                    assert_eq!(fix.as_deref(), Some("100 or less"));
                }
                Err(other) => panic!("batch {batch}: {other}"),
                Ok(_) => panic!("batch {batch} was accepted for 100 images"),
            }
        }
        prepare(&cfg(100)).expect("a batch of the whole training set is fine");
    }

    #[test]
    fn tf32_on_the_cpu_is_a_setting_error_before_the_data_is_read() {
        let cfg = TrainConfig {
            device: DeviceRequest::Cpu,
            precision: crate::backend::Precision::Tf32,
            data_dir: "/nonexistent/mnist".into(),
            ..TrainConfig::default()
        };
        match prepare(&cfg) {
            Err(Error::Setting {
                setting: Setting::Precision,
                problem,
                fix,
            }) => {
                assert!(problem.contains("the CPU computes in fp32 only"), "{problem}");
                assert_eq!(fix.as_deref(), Some("fp32"));
            }
            Err(other) => panic!("{other}"),
            Ok(_) => panic!("TF32 was accepted on the CPU"),
        }
    }
}
