//! A checkpoint evaluated on a data set's test split: accuracy, the mean
//! cross-entropy loss, and the confusion matrix the per-class accuracies
//! come from. The network is built and its arena sized by the same
//! pipeline as training, so evaluation runs the very steps (same plans,
//! same kernels) whose accuracy the training run reported.

use super::pipeline::Pipeline;
use super::predictor::ImageInput;
use super::TrainConfig;
use crate::checkpoint::Checkpoint;
use crate::data::{DataError, ImageSet};
use crate::{Error, Result, Setting};

/// What evaluating a classifier on a test split measured.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct Evaluation {
    /// Test examples evaluated.
    pub examples: usize,
    /// How many the network classified correctly (its largest logit, the
    /// first on ties, is the label).
    pub correct: usize,
    /// Mean cross-entropy of the logits against the labels, in nats.
    pub loss: f64,
    /// `confusion[label][predicted]`: how many examples of each class went
    /// to each class.
    pub confusion: Vec<Vec<u64>>,
    /// The classes' names, in label order.
    pub class_names: Vec<String>,
}

impl Evaluation {
    /// The fraction classified correctly, in [0, 1].
    pub fn accuracy(&self) -> f64 {
        self.correct as f64 / self.examples.max(1) as f64
    }

    /// Each class's accuracy (the fraction of its examples classified as
    /// it); `None` for a class with no test example.
    pub fn class_accuracy(&self) -> Vec<Option<f64>> {
        self.confusion
            .iter()
            .enumerate()
            .map(|(class, row)| {
                let total: u64 = row.iter().sum();
                (total > 0).then(|| row[class] as f64 / total as f64)
            })
            .collect()
    }

    /// Adds one example's logits and label.
    fn add(&mut self, logits: &[f32], label: usize) {
        let predicted = argmax(logits);
        self.examples += 1;
        self.correct += usize::from(predicted == label);
        self.loss += cross_entropy(logits, label);
        if let Some(cell) = self.confusion.get_mut(label).and_then(|row| row.get_mut(predicted)) {
            *cell += 1;
        }
    }
}

/// Evaluates `checkpoint`'s network (the model `cfg` names, which must be
/// the one that wrote it) on the test split of `cfg`'s data set, in
/// batches of `cfg`'s batch size, its pixels normalised as the
/// checkpoint's run normalised them. Only the model's parameters and
/// buffers are read from the checkpoint: any optimizer may have written it.
pub fn evaluate(cfg: &TrainConfig, checkpoint: &Checkpoint) -> Result<Evaluation> {
    let mut pipeline = Pipeline::open(cfg, None)?;
    let unit = pipeline.data().unit();
    let set = pipeline.data_mut().images_mut().ok_or_else(|| {
        Error::Config(format!(
            "evaluating takes an image classifier and its images; {} holds {unit}",
            cfg.run.data_dir.display(),
        ))
    })?;
    // A checkpoint written before it stored its input is evaluated with
    // the data set's own normalisation, as it was trained.
    if let Ok(input) = ImageInput::of_checkpoint(checkpoint) {
        fits(&input, set)?;
        set.normalize = input.normalize;
    }
    if set.test_images.count == 0 {
        return Err(DataError::NoValidation { name: set.name.clone() }.into());
    }
    let labels = set.test_labels.clone();
    let classes = set.classes;
    let class_names = set.class_names.clone();
    let (mut session, _) = pipeline.build()?;
    session.load_model(&checkpoint.tensors)?;
    let mut eval = Evaluation {
        examples: 0,
        correct: 0,
        loss: 0.0,
        confusion: vec![vec![0; classes]; classes],
        class_names,
    };
    session.test_outputs(&mut |first, logits| {
        for (row, &label) in logits.chunks_exact(classes).zip(&labels[first..]) {
            eval.add(row, label as usize);
        }
    })?;
    eval.loss /= eval.examples.max(1) as f64;
    Ok(eval)
}

/// Refuses a data set whose images or classes are not those the
/// checkpoint's model was trained on.
fn fits(input: &ImageInput, set: &ImageSet) -> Result<()> {
    let example = set.example().dims().to_vec();
    if example != input.example || set.classes != input.classes {
        return Err(Error::setting(
            Setting::Data,
            format!(
                "the checkpoint's model reads {:?} images of {} classes, and {} holds {example:?} images of {} classes",
                input.example, input.classes, set.name, set.classes
            ),
            None,
        ));
    }
    if !input.class_names.is_empty() && input.class_names != set.class_names {
        return Err(Error::setting(
            Setting::Data,
            format!(
                "the checkpoint's classes are {}, and {}'s are {}",
                input.class_names.join(", "),
                set.name,
                set.class_names.join(", ")
            ),
            None,
        ));
    }
    Ok(())
}

/// Index of the largest value; the first on ties, as PyTorch's argmax and
/// the training run's own evaluation.
pub(crate) fn argmax(row: &[f32]) -> usize {
    let mut best = 0;
    for (i, &v) in row.iter().enumerate() {
        if v > row[best] {
            best = i;
        }
    }
    best
}

/// `-log softmax(logits)[label]`, in f64 so a confident network's small
/// losses keep their digits.
fn cross_entropy(logits: &[f32], label: usize) -> f64 {
    let max = logits.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    let sum: f64 = logits.iter().map(|&v| (v as f64 - max).exp()).sum();
    max + sum.ln() - logits.get(label).map_or(f64::NAN, |&v| v as f64)
}

/// Probabilities from logits: softmax, in f64 and back.
pub(crate) fn softmax(logits: &[f32]) -> Vec<f32> {
    let max = logits.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
    let exps: Vec<f64> = logits.iter().map(|&v| (v as f64 - max).exp()).collect();
    let sum: f64 = exps.iter().sum();
    exps.iter().map(|e| (e / sum) as f32).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_confusion_matrix_counts_each_label_against_its_prediction() {
        let mut eval = Evaluation {
            examples: 0,
            correct: 0,
            loss: 0.0,
            confusion: vec![vec![0; 3]; 3],
            class_names: vec!["a".into(), "b".into(), "c".into()],
        };
        eval.add(&[3.0, 1.0, 0.0], 0);
        eval.add(&[0.0, 1.0, 3.0], 1);
        eval.add(&[0.0, 2.0, 2.0], 1); // a tie goes to the first
        assert_eq!(eval.confusion, vec![vec![1, 0, 0], vec![0, 1, 1], vec![0, 0, 0]]);
        assert_eq!((eval.examples, eval.correct), (3, 2));
        assert_eq!(eval.class_accuracy(), vec![Some(1.0), Some(0.5), None]);
    }

    #[test]
    fn cross_entropy_and_softmax_agree_with_their_definitions() {
        let logits = [1.0f32, 2.0, 3.0];
        let p = softmax(&logits);
        let z: f64 = logits.iter().map(|&v| (v as f64).exp()).sum();
        for (i, &pi) in p.iter().enumerate() {
            assert!((pi as f64 - (logits[i] as f64).exp() / z).abs() < 1e-7);
            assert!((cross_entropy(&logits, i) + (pi as f64).ln()).abs() < 1e-6);
        }
    }
}
