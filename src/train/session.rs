//! A training session: an arena whose persistent region holds the model,
//! the optimizer and the data set, and the host buffers the loop reuses.
//! After construction, a step touches no heap: the epoch order, the batch's
//! indices and the evaluation logits all live in buffers made here.

use super::report::{resident_bytes, EpochReport, Observer};
use super::TrainConfig;
use crate::data::{shuffle_into, MnistHost, ResidentMnist};
use crate::memory::Arena;
use crate::models::{MnistCnn, Mode};
use crate::ops::gather::Normalize;
use crate::optim::Sgd;
use crate::{Error, Result};
use std::time::Instant;

/// MNIST's pixel statistics, as every MNIST example normalises with.
pub const MNIST_NORMALIZE: Normalize = Normalize {
    mean: 0.1307,
    std: 0.3081,
};

pub struct Session {
    arena: Arena,
    model: MnistCnn,
    sgd: Sgd,
    data: ResidentMnist,
    test_labels: Vec<u8>,
    order: Vec<u32>,
    test_order: Vec<u32>,
    logits: Vec<f32>,
    batch: usize,
    seed: u64,
    steps_done: u64,
    /// Free device memory after the first training step (GPU only).
    first_step_free: Option<usize>,
}

impl Session {
    /// Fills `arena`'s persistent region: parameters, optimizer state and
    /// both splits of the data set.
    pub fn new(cfg: &TrainConfig, host: &MnistHost, mut arena: Arena) -> Result<Self> {
        cfg.validate()?;
        let mut p = arena.persistent();
        let model = MnistCnn::init(&mut p, cfg.seed)?;
        let sgd = Sgd::new(&model.params(), &mut p, cfg.lr, cfg.momentum)?;
        let data = host.upload(&mut p)?;
        let train_len = data.train.len() as u32;
        let test_len = data.test.len() as u32;
        Ok(Self {
            arena,
            model,
            sgd,
            data,
            test_labels: host.test_labels.clone(),
            order: (0..train_len).collect(),
            test_order: (0..test_len).collect(),
            logits: vec![0.0; cfg.batch * MnistCnn::CLASSES],
            batch: cfg.batch,
            seed: cfg.seed,
            steps_done: 0,
            first_step_free: None,
        })
    }

    pub fn arena(&self) -> &Arena {
        &self.arena
    }

    pub fn model(&self) -> &MnistCnn {
        &self.model
    }

    /// Steps in one epoch; the last batch may be smaller, as PyTorch's default.
    pub fn steps_per_epoch(&self) -> usize {
        self.order.len().div_ceil(self.batch)
    }

    /// Puts the training set in epoch `epoch`'s shuffled order.
    pub fn shuffle(&mut self, epoch: usize) {
        shuffle_into(&mut self.order, self.seed, epoch as u64);
    }

    /// One training step on batch `step` of the current order; returns the loss.
    pub fn train_step(&mut self, step: usize) -> Result<f32> {
        let start = step * self.batch;
        let end = (start + self.batch).min(self.order.len());
        let indices = &self.order[start..end];
        let dropout_seed = dropout_seed(self.seed, self.steps_done);
        let (model, sgd, train) = (&self.model, &self.sgd, &self.data.train);
        let loss = self.arena.step(|s| {
            let x = s.gather_images(&train.images, indices, MNIST_NORMALIZE)?;
            let labels = s.gather_labels(train.labels, indices)?;
            let logits = model.forward(s, x, Mode::Train { dropout_seed })?;
            let loss = logits.log_softmax_nll(s, labels)?;
            let grads = s.backward(loss)?;
            sgd.update(s, &grads)?;
            s.scalar(loss)
        })?;
        self.steps_done += 1;
        Ok(loss)
    }

    /// Fraction of the test set the model classifies correctly.
    pub fn evaluate(&mut self) -> Result<f64> {
        let mut correct = 0usize;
        let n = self.test_order.len();
        for start in (0..n).step_by(self.batch) {
            correct += self.evaluate_batch(start)?;
        }
        Ok(correct as f64 / n as f64)
    }

    /// Correct predictions among the test examples from `start` on, one batch.
    fn evaluate_batch(&mut self, start: usize) -> Result<usize> {
        let end = (start + self.batch).min(self.test_order.len());
        let indices = &self.test_order[start..end];
        let logits = &mut self.logits[..indices.len() * MnistCnn::CLASSES];
        let (model, test) = (&self.model, &self.data.test);
        self.arena.step(|s| {
            s.set_grad_enabled(false);
            let x = s.gather_images(&test.images, indices, MNIST_NORMALIZE)?;
            let y = model.forward(s, x, Mode::Eval)?;
            s.read(y, logits)
        })?;
        let predictions = logits.chunks_exact(MnistCnn::CLASSES).map(argmax);
        Ok(predictions
            .zip(&self.test_labels[start..end])
            .filter(|(p, &label)| *p == label as usize)
            .count())
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
        let steps = self.steps_per_epoch();
        observer.epoch_started(epoch, steps);
        self.shuffle(epoch);
        let started = Instant::now();
        let mut total = 0.0f64;
        for step in 0..steps {
            let loss = self.train_step(step)?;
            if !loss.is_finite() {
                return Err(Error::Diverged {
                    epoch,
                    step: step + 1,
                    loss,
                });
            }
            total += loss as f64;
            if self.steps_done == 1 {
                self.first_step_free = self.arena.device_free_bytes()?;
            }
            observer.step(epoch, step, loss);
        }
        let seconds = started.elapsed().as_secs_f64();
        observer.evaluating(epoch);
        let started = Instant::now();
        let test_accuracy = self.evaluate()?;
        let report = EpochReport {
            epoch,
            train_loss: total / steps as f64,
            test_accuracy,
            seconds,
            eval_seconds: started.elapsed().as_secs_f64(),
            steps,
            arena: self.arena.stats(),
            resident_bytes: resident_bytes(),
            device_free_bytes: self.arena.device_free_bytes()?,
            device_free_bytes_first_step: self.first_step_free,
        };
        observer.epoch(&report);
        Ok(report)
    }

    /// One training step and one evaluation step, for sizing on a dry arena.
    pub(crate) fn probe(&mut self) -> Result<()> {
        self.train_step(0)?;
        self.evaluate_batch(0)?;
        Ok(())
    }
}

/// A fresh dropout seed per step, from the run's seed and the step count.
fn dropout_seed(seed: u64, step: u64) -> u64 {
    crate::data::SplitMix64::new(seed ^ step.wrapping_mul(0xD6E8_FEB8_6659_FD93)).next_u64()
}

/// Index of the largest value; the first on ties, as PyTorch's argmax.
fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}
