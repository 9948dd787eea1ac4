//! Image classification: normalised pixels in, cross-entropy (with any
//! label smoothing) as the loss, accuracy as the metric.

use super::{BuildArgs, Metric, Scores, Task, TaskChoice, TaskConfig};
use crate::data::{DataSet, ImageSet, ResidentSet};
use crate::nn::{Batch, Input, Reads};
use crate::ops::cross_entropy::CrossEntropyArgs;
use crate::ops::gather::{Augment, BatchAt, Normalize};
use crate::tensor::Persistent;
use crate::tensor::{Labels, Shape, Tensor};
use crate::Step;
use crate::{Error, Result, Setting};
use std::fmt;

/// The settings of [`Classification`].
#[derive(Clone, Copy, PartialEq)]
pub struct ClassificationConfig {
    /// The loss's label smoothing ε, in [0, 1): the target is
    /// `(1 − ε)·onehot + ε/C` (PyTorch's `label_smoothing`); the metric
    /// still counts exact labels.
    pub label_smoothing: f32,
    /// Random changes to each training image as it is gathered (never to
    /// the test images).
    pub augment: Augment,
}

impl Default for ClassificationConfig {
    fn default() -> Self {
        Self {
            label_smoothing: 0.0,
            augment: Augment::NONE,
        }
    }
}

impl fmt::Debug for ClassificationConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "label smoothing {}, augment {}", self.label_smoothing, self.augment)
    }
}

impl TaskConfig for ClassificationConfig {
    fn validate(&self) -> Result<()> {
        if !(0.0..1.0).contains(&self.label_smoothing) {
            return Err(Error::setting(
                Setting::LabelSmoothing,
                format!("the label smoothing must be in [0, 1), got {}", self.label_smoothing),
                Some("a value in [0, 1) such as 0.1".into()),
            ));
        }
        Ok(())
    }

    fn reads(&self) -> Reads {
        Reads::Pixels
    }

    fn input_of(&self, set: &DataSet) -> Result<Input> {
        Ok(Classification::input_of(images(set)?))
    }

    fn check(&self, set: &DataSet, _batch: usize) -> Result<()> {
        let set = images(set)?;
        let side = set.train_images.rows.min(set.train_images.cols);
        if self.augment.crop > side {
            return Err(Error::setting(
                Setting::Augment,
                format!(
                    "a crop padding of {} is wider than the {side}-pixel side of {}'s images",
                    self.augment.crop, set.name
                ),
                Some(format!("crop{side} or less")),
            ));
        }
        Ok(())
    }

    fn train_len(&self, set: &DataSet, _batch: usize) -> Result<usize> {
        Ok(images(set)?.train_images.count)
    }

    fn draws(&self) -> String {
        self.augment.to_string()
    }

    fn build(&self, set: &DataSet, p: &mut Persistent<'_>, args: BuildArgs) -> Result<Box<dyn Task>> {
        Ok(Box::new(
            Classification::upload(images(set)?, p)?
                .with_label_smoothing(self.label_smoothing)
                .with_augment(self.augment, args.seed),
        ))
    }
}

/// The images of `set`, or why classification cannot train on it.
fn images(set: &DataSet) -> Result<&ImageSet> {
    set.images().ok_or_else(|| {
        Error::setting(
            Setting::Data,
            format!(
                "image classification trains on images, and the data is {}",
                set.kind().describe()
            ),
            None,
        )
    })
}

/// Image classification over a set resident in the persistent region.
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
    /// The task as a run's settings carry it.
    pub fn choice(config: ClassificationConfig) -> TaskChoice {
        TaskChoice::new("classification", config)
    }

    /// What a model classifying `set` is built for.
    pub fn input_of(set: &ImageSet) -> Input {
        Input {
            example: set.example(),
            classes: set.classes,
        }
    }

    /// Uploads `set` into the persistent region.
    pub fn upload(set: &ImageSet, p: &mut Persistent<'_>) -> Result<Self> {
        let normalize = Normalize::per_channel(&set.normalize)?;
        Ok(Self {
            data: set.upload(p)?,
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
                ..self.loss
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

    fn train_batch<'s>(&self, s: &mut Step<'s>, at: BatchAt, _length: usize) -> Result<(Batch<'s>, Labels<'s>)> {
        let train = &self.data.train;
        let (x, labels) = s.gather_batch_augmented(
            &train.images,
            train.labels,
            at,
            self.normalize,
            self.augment,
            self.augment_base,
        )?;
        Ok((x.into(), labels))
    }

    fn test_batch<'s>(&self, s: &mut Step<'s>, indices: &[u32]) -> Result<(Batch<'s>, Option<Labels<'s>>)> {
        let x = s.gather_images(&self.data.test.images, indices, self.normalize)?;
        Ok((x.into(), None))
    }

    fn loss<'s>(&self, s: &mut Step<'s>, output: Tensor<'s>, targets: Labels<'s>, over: usize) -> Result<Tensor<'s>> {
        output.cross_entropy_over(s, targets, over, self.loss)
    }

    fn readback_len(&self, examples: usize) -> usize {
        examples * self.data.classes
    }

    /// How many of the examples are classified correctly.
    fn score(&self, outputs: &[f32], first: usize) -> Scores {
        let classes = self.data.classes;
        let predictions = outputs.chunks_exact(classes).map(argmax);
        let correct = predictions
            .zip(&self.test_labels[first..])
            .filter(|(p, &label)| *p == label as usize)
            .count();
        [correct as f64, 0.0, 0.0]
    }

    fn metric(&self, sums: Scores, examples: usize) -> Metric {
        Metric::Accuracy(sums[0] / examples as f64)
    }
}

/// Index of the largest value; the first on ties, as PyTorch's argmax.
pub(super) fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}
