//! The epoch loop: shuffle, train every batch (reading the losses back
//! every [`READBACK`] steps, writing checkpoints as asked), evaluate,
//! report.

use super::{Control, Session, READBACK};
use crate::memory::Buf;
use crate::nn::Mode;
use crate::tasks::{Metric, Scores, SCORES};
use crate::train::checkpoints::{Every, Position};
use crate::train::report::{resident_bytes, EpochReport, Observer};
use crate::train::shapes::StepKind;
use crate::{Error, Result};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

impl Session {
    /// The losses of steps `range` of the current epoch (waits for them).
    /// The losses of steps `range` of the current epoch (waits for them).
    /// On a data-parallel rank each is the rank's share of the step's loss
    /// until the epoch loop reads it back, which sums the shares in place.
    pub fn losses(&mut self, range: std::ops::Range<usize>) -> Result<&[f32]> {
        // Only the slots asked for cross to the host.
        let slots = self.loss_slots(range.clone())?;
        let host = &mut self.host_losses[range];
        self.engine.read_persistent(slots, host)?;
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

    /// The task's metric's headline ([`Metric::headline`]): the fraction
    /// of the test set classified correctly, or a language model's
    /// validation loss per token.
    pub fn evaluate(&mut self) -> Result<f64> {
        Ok(self.evaluation()?.headline())
    }

    /// The task's metric over the test set. A data-parallel rank evaluates
    /// its share of the test set (see
    /// [`World::share`](crate::distributed::World::share)) and the ranks sum
    /// their scores, so each gets the whole set's figure; alone, the share
    /// is the whole set.
    pub fn evaluation(&mut self) -> Result<Metric> {
        let n = self.test_order.len();
        self.task.reset(&mut self.engine)?;
        let shard = self.eval_shard();
        let mut sums: Scores = [0.0; SCORES];
        for start in shard.clone().step_by(self.batch()) {
            let scores = self.evaluate_batch(start, shard.end)?;
            sums.iter_mut().zip(scores).for_each(|(sum, score)| *sum += score);
        }
        if self.data_parallel() {
            // A count is exact: f32 holds every whole number up to 2^24,
            // past any test set's size.
            self.engine
                .write_persistent(self.eval_correct, &sums.map(|v| v as f32))?;
            self.engine.all_reduce_persistent(self.eval_correct)?;
            let mut total = [0.0; SCORES];
            self.engine.read_persistent(self.eval_correct, &mut total)?;
            sums = total.map(f64::from);
        }
        Ok(self.task.metric(sums, n))
    }

    /// The metric over the task's held-out test split, where it keeps one
    /// apart from the split it validates on (see
    /// [`crate::tasks::Task::use_test_split`]); evaluation reads that
    /// split from then on.
    pub fn final_test(&mut self) -> Result<Option<Metric>> {
        let Some(examples) = self.task.use_test_split()? else {
            return Ok(None);
        };
        self.test_order = (0..examples as u32).collect();
        self.evaluation().map(Some)
    }

    /// The test examples this rank evaluates.
    pub(super) fn eval_shard(&self) -> std::ops::Range<usize> {
        let (first, count) = self.world.share(self.test_order.len());
        first..first + count
    }

    /// The task's score of the test examples from `start` on, one batch,
    /// not past `limit` (how many are correct, or their loss).
    pub(super) fn evaluate_batch(&mut self, start: usize, limit: usize) -> Result<Scores> {
        let end = self.run_eval_batch(start, limit)?;
        let outputs = &self.outputs[..self.task.readback_at(start, end - start)];
        Ok(self.task.score(outputs, start))
    }

    /// Hands `each` what evaluation reads back of every test batch (for a
    /// classifier, its rows of logits), with the index of the batch's first
    /// example: what a checkpoint's evaluation scores beyond the task's
    /// metric (a loss, a confusion matrix).
    pub fn test_outputs(&mut self, each: &mut dyn FnMut(usize, &[f32])) -> Result<()> {
        self.task.reset(&mut self.engine)?;
        let shard = self.eval_shard();
        for start in shard.clone().step_by(self.batch()) {
            let end = self.run_eval_batch(start, shard.end)?;
            each(start, &self.outputs[..self.task.readback_at(start, end - start)]);
        }
        Ok(())
    }

    /// Runs the test batch from `start` (not past `limit`) into
    /// `self.outputs`; returns where the batch ends.
    fn run_eval_batch(&mut self, start: usize, limit: usize) -> Result<usize> {
        let batch = self.batch();
        let end = (start + batch).min(limit);
        let kind = if end - start == batch {
            StepKind::Eval
        } else {
            StepKind::EvalLast
        };
        let key = self.key(kind, self.task.test_length(start))?;
        let indices = &self.test_order[start..end];
        let outputs = &mut self.outputs[..self.task.readback_at(start, indices.len())];
        let (model, task, weights) = (&self.model, &self.task, &self.conv_weights);
        let body = |s: &mut crate::Step<'_>| {
            s.set_grad_enabled(false);
            let (x, targets) = task.test_batch(s, indices)?;
            s.convert_weights(weights, s.compute_dtype(), s.compute_layout())?;
            let y = model.forward(s, x, Mode::Eval)?;
            let y = task.test_readback(s, y, targets)?;
            s.read(y, outputs)
        };
        match self.memory_plan {
            true => self.engine.planned_step(key, body)?,
            false => self.engine.step(body)?,
        }
        Ok(end)
    }

    /// One epoch: shuffle, train every batch, evaluate. Run epochs inside
    /// one [`Session::on_workers`] call, as [`crate::train::train`] does: then no
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
                self.first_step_free = self.engine.runtime_mut().device_free_bytes()?;
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
        for key in self.engine.arena_mut().take_replanned() {
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
        let metric = self.evaluation()?;
        let grad_norm = self.mean_grad_norm()?;
        let memory = self.engine.runtime_mut().device_memory()?;
        let report = EpochReport {
            epoch,
            rank: self.world.rank,
            world_size: self.world.size,
            train_loss: total / steps as f64,
            // NaN (JSON null) where the task has no accuracy.
            test_accuracy: metric.accuracy().unwrap_or(f64::NAN),
            binary_accuracy: metric.binary_accuracy(),
            node_accuracy: metric.node_accuracy(),
            valid_loss: metric.loss(),
            perplexity: metric.perplexity(),
            bits_per_char: metric.bits_per_token(),
            seconds,
            eval_seconds: started.elapsed().as_secs_f64(),
            steps,
            precision: self.precision,
            device: self.engine.runtime().kind(),
            arena: self.engine.arena().stats(),
            resident_bytes: resident_bytes(),
            device_free_bytes: memory.map(|(_, free)| free),
            device_total_bytes: memory.map(|(total, _)| total),
            device_free_bytes_first_step: self.first_step_free,
            device_allocations: self.engine.runtime().cuda_calls().map(|c| c.allocations),
            graph: self.use_graph,
            kernels_per_step: self.kernels_per_step,
            ops_per_step: self.ops_per_step,
            kernel_seconds_per_step: self.profiled.as_ref().map(|p| p.kernel_seconds),
            span_seconds_per_step: self.profiled.as_ref().and_then(|p| p.span_seconds),
            grad_norm,
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

    /// With a gradient clip, the mean of the norms its steps found since
    /// the epoch began: one read of the figures the steps add up on the
    /// device.
    fn mean_grad_norm(&mut self) -> Result<Option<f64>> {
        let Some(figures) = self.optimizer.clip_figures() else {
            return Ok(None);
        };
        let mut host = [0.0f32; 4];
        self.engine.read_persistent(figures, &mut host)?;
        Ok((host[3] > 0.0).then(|| host[2] as f64 / host[3] as f64))
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
            self.engine.all_reduce_persistent(slots)?;
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
}
