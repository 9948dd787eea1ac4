//! One training step: planned or bump-allocated, captured as a CUDA graph
//! the first time a full step of its shape (batch size and length) runs and
//! replayed after;
//! and the probe a dry session runs to be measured.

use super::{Session, PROFILED_STEP};
use crate::autograd::Candidate;
use crate::backend::DeviceKind;
use crate::distributed::buckets::Queued;
use crate::nn::Mode;
use crate::ops::dropout::DropoutSeed;
use crate::ops::gather::BatchAt;
use crate::train::report::{StepProfile, Timed};
use crate::train::shapes::{StepKind, StepShape};
use crate::{Error, Result};

impl Session {
    /// The arena key of the plan of a step of `kind` and `length` at the
    /// session's batch.
    pub(super) fn key(&self, kind: StepKind, length: usize) -> Result<u32> {
        let shape = StepShape {
            kind,
            batch: self.batch(),
            length,
        };
        // The session's batch is always one of its shapes' (`set_batch`);
        // a length is the task's, unless the task contradicts itself.
        self.shapes.key(shape).ok_or_else(|| self.unplanned(length))
    }

    /// What the plan of arena key `key` is, for people: its kind, and its
    /// length where the task's steps have lengths.
    pub(crate) fn plan_name(&self, key: u32) -> String {
        match self.shapes.length_of_key(key) {
            Some(length) if length > 0 => format!("{} of length {length}", StepKind::name(key)),
            _ => StepKind::name(key).to_string(),
        }
    }

    /// The slot of the graph of a step of `length` at the session's batch.
    fn slot(&self, length: usize) -> Result<usize> {
        self.shapes
            .slot(self.batch(), length)
            .ok_or_else(|| self.unplanned(length))
    }

    fn unplanned(&self, length: usize) -> Error {
        Error::Config(format!(
            "a step of length {length} at batch {}, but the session was planned for lengths {:?}",
            self.batch(),
            self.shapes.lengths()
        ))
    }

    /// Queues training step `step` of the current epoch. Its loss lands in
    /// the epoch's loss slots; read it with [`Session::losses`].
    pub fn train_step(&mut self, step: usize) -> Result<()> {
        let global = self.global_batch();
        let length = self.task.train_length(step);
        let step_len = global.min(self.order.len().saturating_sub(step * global));
        // A data-parallel rank trains on its shard of the step's examples;
        // its loss is its share of the step's mean, so the shares and their
        // gradients sum to one device's over the whole step.
        let (first_row, len) = self.world.shard(step_len, self.batch());
        let at = BatchAt {
            order: self.order_buf,
            cursor: self.cursor,
            stride: global,
            len,
            offset: first_row,
            step,
        };
        let dropout = DropoutSeed::PerStep {
            base: self.seed,
            cursor: self.cursor,
            first: 0,
        };
        let (model, optimizer, task, store) = (&self.model, &self.optimizer, &self.task, &self.store);
        let (losses, cursor, buckets) = (self.losses, self.cursor, self.buckets.as_ref());
        let weights = &self.conv_weights;
        let body = |s: &mut crate::Step<'_>| {
            let (x, targets) = task.train_batch(s, at, length)?;
            s.convert_weights(weights, s.compute_dtype(), s.compute_layout())?;
            let output = model.forward(s, x, Mode::Train { dropout, first_row })?;
            let loss = task.loss(s, output, targets, step_len)?;
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
        let full = step_len == global;
        let kind = if full { StepKind::Train } else { StepKind::TrainLast };
        let key = match self.memory_plan {
            true => Some(self.key(kind, length)?),
            false => None,
        };
        let slot = self.slot(length)?;
        if self.use_graph && full {
            if self.graphs[slot].is_none() {
                let timing = self.profile && self.engine.runtime_mut().start_op_timing();
                let ops_before = self.engine.runtime().ops_queued().unwrap_or(0);
                let graph = self.engine.capture_step(key, body);
                self.engine.runtime_mut().pause_op_timing();
                let graph = graph?;
                let ops = (self.engine.runtime().ops_queued().unwrap_or(0) - ops_before) as usize;
                // Two event nodes bracket each op when timing.
                let events = if timing { 2 * ops } else { 0 };
                self.kernels_per_step = self.kernels_per_step.or(Some(graph.nodes() - events));
                self.ops_per_step = self.ops_per_step.or(Some(ops));
                self.graphs[slot] = Some(graph);
                self.profile &= timing;
            }
            if let Some(graph) = &self.graphs[slot] {
                self.engine.replay_step(graph)?;
            }
        } else {
            let timing =
                self.profile && self.steps_done == PROFILED_STEP && self.engine.runtime_mut().start_op_timing();
            let ops_before = self.engine.runtime().ops_queued();
            match key {
                Some(key) => self.engine.planned_step(key, body)?,
                None => self.engine.step(body)?,
            }
            self.engine.runtime_mut().pause_op_timing();
            let ops = self
                .engine
                .runtime()
                .ops_queued()
                .zip(ops_before)
                .map(|(a, b)| (a - b) as usize);
            if !self.use_graph {
                self.kernels_per_step = self.kernels_per_step.or(ops);
                self.ops_per_step = self.ops_per_step.or(ops);
            }
            if timing {
                let span = self.engine.runtime_mut().read_op_times(&mut self.op_times)?;
                let timed = match self.engine.runtime().kind() {
                    DeviceKind::Cpu => Timed::Cpu,
                    _ => Timed::GpuQueued,
                };
                self.profiled = Some(StepProfile::new(&self.op_times, ops, span, timed));
            }
        }
        if self.profile && self.use_graph && self.steps_done == PROFILED_STEP && self.profiled.is_none() {
            let span = self.engine.runtime_mut().read_op_times(&mut self.op_times)?;
            self.profiled = Some(StepProfile::new(
                &self.op_times,
                self.kernels_per_step,
                span,
                Timed::GpuReplayed,
            ));
        }
        self.steps_done += 1;
        Ok(())
    }

    /// One step of every shape the run will take (at each batch size, a
    /// full and a last, shorter training and evaluation batch; for a task
    /// with lengths, a training and an evaluation step of each length), for
    /// sizing and planning, on a planning engine. Returns the candidates
    /// for recomputation of the first batch size's first full training
    /// step.
    pub(crate) fn probe(&mut self) -> Result<Vec<Candidate>> {
        let samples = self.task.samples();
        let mut candidates = None;
        for at in 0..self.shapes.batches().len() {
            self.at = at;
            if !samples.is_empty() {
                for sample in &samples {
                    if let Some(step) = sample.train_step {
                        self.train_step(step)?;
                        candidates.get_or_insert_with(|| self.engine.recompute_candidates());
                    }
                    if let Some(first) = sample.test_first {
                        let end = self.eval_shard().end;
                        self.evaluate_batch(first, end)?;
                    }
                }
                continue;
            }
            self.train_step(0)?;
            // A full training step's: the only step a memory budget shapes
            // (the same network at another batch makes the same candidates,
            // in the same order).
            candidates.get_or_insert_with(|| self.engine.recompute_candidates());
            let steps = self.steps_per_epoch();
            if steps > 1 && !self.order.len().is_multiple_of(self.global_batch()) {
                self.train_step(steps - 1)?;
            }
            let shard = self.eval_shard();
            let tests = shard.len();
            if tests > 0 {
                self.evaluate_batch(shard.start, shard.end)?;
            }
            let batch = self.batch();
            if tests > batch && !tests.is_multiple_of(batch) {
                self.evaluate_batch(shard.end - tests % batch, shard.end)?;
            }
        }
        self.at = 0;
        Ok(candidates.unwrap_or_default())
    }
}
