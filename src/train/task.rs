//! What a session trains at, apart from the network and the optimizer: how
//! a batch is gathered and normalised, the loss, and the metric.

use crate::data::{ImageSet, ResidentSet};
use crate::memory::Persistent;
use crate::nn::Input;
use crate::ops::cross_entropy::CrossEntropyArgs;
use crate::ops::gather::{Augment, BatchAt, Normalize};
use crate::tensor::{Labels, Shape, Tensor};
use crate::Result;
use crate::Step;

/// A task over a data set resident in the persistent region.
pub trait Task: Send + Sync {
    /// What the model is built for.
    fn input(&self) -> Input;
    fn train_len(&self) -> usize;
    fn test_len(&self) -> usize;
    /// The training examples `at` points to (read from device memory, so a
    /// captured graph gathers the next batch on every replay).
    fn train_batch<'s>(&self, s: &mut Step<'s>, at: BatchAt) -> Result<(Tensor<'s>, Labels<'s>)>;
    /// The test examples `indices`.
    fn test_batch<'s>(&self, s: &mut Step<'s>, indices: &[u32]) -> Result<Tensor<'s>>;
    /// The loss of `logits` against `labels`, as a share of a mean over
    /// `over` examples (a data-parallel rank's shard of a larger step).
    fn loss<'s>(&self, s: &mut Step<'s>, logits: Tensor<'s>, labels: Labels<'s>, over: usize) -> Result<Tensor<'s>>;
    /// How many of the test examples from `first` on, whose `logits` were
    /// read back (one row per example), the model got right.
    fn correct(&self, logits: &[f32], first: usize) -> usize;
}

/// Image classification: normalised pixels in, cross-entropy (with any
/// label smoothing) as the loss, accuracy as the metric.
pub struct Classification {
    data: ResidentSet,
    test_labels: Vec<u8>,
    normalize: Normalize,
    example: Shape,
    loss: CrossEntropyArgs,
    augment: Augment,
    /// The base of the augmentation draws' per-step seeds.
    augment_base: u64,
}

/// Mixed into the run's seed for the augmentation draws, so that they do
/// not repeat the dropout draws of the same step.
const AUGMENT_SALT: u64 = 0xA076_1D64_78BD_642F;

impl Classification {
    /// What a model classifying `set` is built for.
    pub fn input_of(set: &ImageSet) -> Input {
        Input {
            example: set.example(),
            classes: set.classes,
        }
    }

    /// Uploads `set` into the persistent region.
    pub fn upload(set: &ImageSet, p: &mut Persistent<'_>) -> Result<Self> {
        let normalize = Normalize::per_channel(set.normalize)?;
        Ok(Self {
            data: set.upload(p).map_err(crate::Error::from)?,
            test_labels: set.test_labels.clone(),
            normalize,
            example: Self::input_of(set).example,
            loss: CrossEntropyArgs::default(),
            augment: Augment::NONE,
            augment_base: 0,
        })
    }

    /// The same task with its loss's targets smoothed by `epsilon` (see
    /// [`CrossEntropyArgs`]); the metric still counts exact labels.
    pub fn with_label_smoothing(self, epsilon: f32) -> Self {
        Self {
            loss: CrossEntropyArgs {
                label_smoothing: epsilon,
            },
            ..self
        }
    }

    /// Augments the training batches (never the test batches) as `augment`
    /// says, with draws seeded by the run's `seed`.
    pub fn with_augment(self, augment: Augment, seed: u64) -> Self {
        Self {
            augment,
            augment_base: seed ^ AUGMENT_SALT,
            ..self
        }
    }
}

impl Task for Classification {
    fn input(&self) -> Input {
        Input {
            example: self.example,
            classes: self.data.classes,
        }
    }

    fn train_len(&self) -> usize {
        self.data.train.len()
    }

    fn test_len(&self) -> usize {
        self.data.test.len()
    }

    fn train_batch<'s>(&self, s: &mut Step<'s>, at: BatchAt) -> Result<(Tensor<'s>, Labels<'s>)> {
        let train = &self.data.train;
        s.gather_batch_augmented(
            &train.images,
            train.labels,
            at,
            self.normalize,
            self.augment,
            self.augment_base,
        )
    }

    fn test_batch<'s>(&self, s: &mut Step<'s>, indices: &[u32]) -> Result<Tensor<'s>> {
        s.gather_images(&self.data.test.images, indices, self.normalize)
    }

    fn loss<'s>(&self, s: &mut Step<'s>, logits: Tensor<'s>, labels: Labels<'s>, over: usize) -> Result<Tensor<'s>> {
        logits.cross_entropy_over(s, labels, over, self.loss)
    }

    fn correct(&self, logits: &[f32], first: usize) -> usize {
        let classes = self.data.classes;
        let predictions = logits.chunks_exact(classes).map(argmax);
        predictions
            .zip(&self.test_labels[first..])
            .filter(|(p, &label)| *p == label as usize)
            .count()
    }
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
