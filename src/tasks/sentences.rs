//! Sentence classification on a sentiment treebank: each sentence is its
//! words in order, labelled by its tree's root (five classes, or two with
//! the neutral roots dropped); the model reads a batch of `B` sentences of
//! one length bucket as `[T, B]` ids and gives each its class's logits from
//! its state at its own last word; the loss is the mean cross-entropy over
//! the batch's sentences; the metric is root accuracy on the development
//! split.
//!
//! The sentences are grouped by length into at most `k` buckets chosen from
//! the training split (`data::text::LengthBuckets`), and every batch of a
//! bucket is `[B, bucket length]`: a bucket's last batch is filled with
//! padding rows of length 0. So the task steps at one length per bucket
//! ([`Task::lengths`]), and the session plans a step and captures a graph
//! for each.
//!
//! Everything is uploaded once: per split and bucket, its sentences'
//! padded ids, lengths and classes (`ops::sentences::SentenceRows`, in
//! the bucket's sentence order, one padding row after them), and the
//! development split's batches in a fixed order. At an epoch's start the
//! task shuffles its batches (`SentenceBatches::shuffle`: sentences within
//! each bucket, batches across buckets) on the host and uploads the
//! epoch's order, each batch's rows as places in their bucket's table; a
//! step reads its batch at the step cursor, so a captured graph gathers the
//! next batch on every replay with no copy from the host.
//!
//! Padding rows weigh nothing: the gather writes each row's weight in the
//! loss (`B / real`, or 0 for padding) into a persistent buffer the loss
//! reads, and the model reads each sentence at its own length, so a
//! sentence's logits and gradient are the same padded or alone.

use super::classification::argmax;
use super::{BuildArgs, LengthSample, Metric, Pretrained, Scores, Task, TaskChoice, TaskConfig};
use crate::data::text::{Classes, LengthBuckets, SentenceBatches, Sentences, SentimentSet, PADDING_ROW};
use crate::data::{DataError, DataSet};
use crate::memory::Buf;
use crate::nn::{Batch, Input, Reads, SentenceInput};
use crate::ops::cross_entropy::CrossEntropyArgs;
use crate::ops::gather::BatchAt;
use crate::ops::sentences::{SentenceBatch, SentenceRows};
use crate::tensor::{Labels, Persistent, Shape, Tensor};
use crate::{Engine, Error, Result, Setting, Step};

/// The settings of [`SentenceClassification`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentenceClassificationConfig {
    /// 5 (the root's label) or 2 (negative and positive, neutral dropped).
    pub classes: usize,
    /// At most this many length buckets: each is a step shape, with its
    /// own plan and graph; more buckets pad fewer words.
    pub buckets: usize,
}

impl Default for SentenceClassificationConfig {
    fn default() -> Self {
        Self { classes: 5, buckets: 8 }
    }
}

/// The most buckets a run may ask for: each is a step plan and a graph,
/// and SST's training sentences have about 50 distinct lengths.
pub const MAX_BUCKETS: usize = 64;

impl SentenceClassificationConfig {
    fn classes(&self) -> Result<Classes> {
        Classes::from_count(self.classes).map_err(|_| {
            Error::setting(
                Setting::Classes,
                format!(
                    "sentiment is sorted into 5 classes (the root's label) or 2 (neutral sentences dropped), not {}",
                    self.classes
                ),
                Some("5 or 2".into()),
            )
        })
    }

    /// The sentences of `set` in these classes, and the buckets for them.
    fn sentences(&self, set: &DataSet) -> Result<(SentimentSet, LengthBuckets)> {
        let bank = set.treebank().ok_or_else(|| {
            Error::setting(
                Setting::Data,
                format!(
                    "a sentence classifier trains on a treebank of sentences, and the data is {}",
                    set.kind().describe()
                ),
                None,
            )
        })?;
        let sentences = SentimentSet::new(bank, self.classes()?);
        if sentences.train.is_empty() || sentences.dev.is_empty() {
            return Err(Error::setting(
                Setting::Data,
                format!(
                    "the treebank keeps {} training and {} development sentences in {} classes: each split needs at least one",
                    sentences.train.len(),
                    sentences.dev.len(),
                    self.classes
                ),
                None,
            ));
        }
        let mut buckets = LengthBuckets::choose(sentences.train.lengths(), self.buckets).map_err(DataError::from)?;
        buckets.cover(sentences.longest());
        Ok((sentences, buckets))
    }
}

impl TaskConfig for SentenceClassificationConfig {
    fn validate(&self) -> Result<()> {
        self.classes()?;
        if !(1..=MAX_BUCKETS).contains(&self.buckets) {
            return Err(Error::setting(
                Setting::Buckets,
                format!(
                    "sentences go in 1 to {MAX_BUCKETS} length buckets (each a step plan and a graph), not {}",
                    self.buckets
                ),
                Some("8".into()),
            ));
        }
        Ok(())
    }

    fn reads(&self) -> Reads {
        Reads::SentenceIds
    }

    /// A sentence's ids are below the vocabulary: `example` is `[V]`, its
    /// length varying from step to step.
    fn input_of(&self, set: &DataSet) -> Result<Input> {
        let (sentences, _) = self.sentences(set)?;
        Ok(Input {
            example: Shape::new(&[sentences.vocab.len()]),
            classes: self.classes,
        })
    }

    fn check(&self, set: &DataSet, batch: usize) -> Result<()> {
        self.validate()?;
        let (sentences, _) = self.sentences(set)?;
        if batch == 0 || batch > sentences.train.len() {
            return Err(Error::setting(
                Setting::Batch,
                format!(
                    "a batch of {batch} sentences, and the training split keeps {}",
                    sentences.train.len()
                ),
                Some(format!("1 to {}", sentences.train.len())),
            ));
        }
        Ok(())
    }

    fn draws(&self) -> String {
        "none".into()
    }

    /// Other classes keep other sentences; other buckets group them into
    /// other batches, so a resumed epoch would not continue the same one.
    fn fingerprint(&self) -> Vec<(&'static str, String)> {
        vec![
            ("classes", self.classes.to_string()),
            ("buckets", self.buckets.to_string()),
        ]
    }

    /// Rows of every batch of an epoch, padding rows included: the loop
    /// counts `B` of them a step.
    fn train_len(&self, set: &DataSet, batch: usize) -> Result<usize> {
        let (sentences, buckets) = self.sentences(set)?;
        let batches = SentenceBatches::new(&sentences.train, &buckets, batch).map_err(DataError::from)?;
        Ok(batches.len() * batch)
    }

    fn build(&self, set: &DataSet, p: &mut Persistent<'_>, args: BuildArgs) -> Result<Box<dyn Task>> {
        Ok(Box::new(SentenceClassification::new(self, set, p, args.batch)?))
    }

    fn pretrained(&self, set: &DataSet, path: &std::path::Path, embed: usize) -> Result<Option<Pretrained>> {
        super::read_pretrained(path, &self.sentences(set)?.0.vocab, embed).map(Some)
    }
}

/// One split resident in the persistent region, with the host's view of
/// its batches.
struct Split {
    batches: SentenceBatches,
    /// Per bucket, its table (`None` for a bucket with no sentence).
    rows: Vec<Option<SentenceRows>>,
    /// Each sentence's place in its bucket's table.
    place: Vec<u32>,
    /// Per bucket, the place of its padding row (after its sentences).
    padding: Vec<u32>,
    /// The order the steps read: batch `k`'s rows from `k·B`.
    order: Buf<u32>,
    /// The host's copy of `order`, and each batch's bucket.
    host_order: Vec<u32>,
    bucket_of: Vec<u32>,
    /// Each row's class in the epoch's order, [`PADDING_ROW`] for a padding
    /// row (the development split's, for scoring).
    classes: Vec<u32>,
    /// Each sentence's class.
    labels: Vec<u32>,
    bucket_lengths: Vec<usize>,
}

impl Split {
    fn new(
        names: &Names,
        sentences: &Sentences,
        buckets: &LengthBuckets,
        batch: usize,
        p: &mut Persistent<'_>,
    ) -> Result<Self> {
        let batches = SentenceBatches::new(sentences, buckets, batch).map_err(DataError::from)?;
        let count = buckets.lengths().len();
        let mut members: Vec<Vec<usize>> = vec![Vec::new(); count];
        let mut place = vec![0u32; sentences.len()];
        for (i, length) in sentences.lengths().enumerate() {
            // `SentenceBatches::new` placed every sentence in a bucket.
            let bucket = buckets.of(length).unwrap_or(count - 1);
            place[i] = members[bucket].len() as u32;
            members[bucket].push(i);
        }
        let mut rows = Vec::with_capacity(count);
        for (members, &steps) in members.iter().zip(buckets.lengths()) {
            if members.is_empty() {
                rows.push(None);
                continue;
            }
            // The sentences, then one padding row of length 0.
            let n = members.len() + 1;
            let mut tokens = vec![0u32; n * steps];
            let mut lengths = vec![0u32; n];
            let mut labels = vec![0u32; n];
            for (r, &i) in members.iter().enumerate() {
                tokens[r * steps..][..sentences.length(i)].copy_from_slice(sentences.tokens(i));
                lengths[r] = sentences.length(i) as u32;
                labels[r] = sentences.label(i) as u32;
            }
            rows.push(Some(SentenceRows {
                tokens: p.upload(names.ids, Shape::new(&[n * steps]), &tokens)?,
                lengths: p.upload(names.lengths, Shape::new(&[n]), &lengths)?,
                labels: p.upload(names.classes, Shape::new(&[n]), &labels)?,
                steps,
            }));
        }
        let total = batches.len() * batch;
        let mut split = Split {
            padding: members.iter().map(|m| m.len() as u32).collect(),
            order: Buf::default(),
            host_order: vec![0; total],
            bucket_of: vec![0; batches.len()],
            classes: vec![PADDING_ROW; total],
            labels: sentences.labels().iter().map(|&l| l as u32).collect(),
            bucket_lengths: buckets.lengths().to_vec(),
            batches,
            rows,
            place,
        };
        split.arrange()?;
        split.order = p.upload(names.order, Shape::new(&[total]), &split.host_order)?;
        Ok(split)
    }

    /// Fills the host's order, buckets and classes from the batches' order.
    fn arrange(&mut self) -> Result<()> {
        let batch = self.batches.batch();
        for k in 0..self.batches.len() {
            let rows = self.batches.rows(k).map_err(DataError::from)?;
            self.bucket_of[k] = rows.bucket as u32;
            let order = &mut self.host_order[k * batch..][..batch];
            let classes = &mut self.classes[k * batch..][..batch];
            for ((at, class), &row) in order.iter_mut().zip(classes).zip(rows.rows) {
                (*at, *class) = match row {
                    PADDING_ROW => (self.padding[rows.bucket], PADDING_ROW),
                    i => (self.place[i as usize], self.labels[i as usize]),
                };
            }
        }
        Ok(())
    }

    /// The lengths of the buckets its batches use.
    fn lengths(&self) -> impl Iterator<Item = usize> + '_ {
        self.rows
            .iter()
            .zip(&self.bucket_lengths)
            .filter(|(rows, _)| rows.is_some())
            .map(|(_, &n)| n)
    }

    /// Batch `k`'s length.
    fn length(&self, k: usize) -> usize {
        self.bucket_of.get(k).map_or(0, |&b| self.bucket_lengths[b as usize])
    }

    /// The first batch of `length`, if any.
    fn first_of(&self, length: usize) -> Option<usize> {
        (0..self.bucket_of.len()).find(|&k| self.length(k) == length)
    }

    /// The table of the bucket of `length`.
    fn rows_of(&self, length: usize) -> Result<SentenceRows> {
        let bucket = self.bucket_lengths.iter().position(|&n| n == length);
        bucket.and_then(|b| self.rows[b]).ok_or_else(|| {
            Error::shape(
                "sentence classification",
                format!(
                    "a step of one of the buckets' lengths {:?}, got {length}",
                    self.bucket_lengths
                ),
            )
        })
    }
}

/// What a split's persistent buffers are called in the memory report.
struct Names {
    ids: &'static str,
    lengths: &'static str,
    classes: &'static str,
    order: &'static str,
}

const TRAINING: Names = Names {
    ids: "training sentence ids",
    lengths: "training sentence lengths",
    classes: "training sentence classes",
    order: "training batch order",
};

const DEVELOPMENT: Names = Names {
    ids: "development sentence ids",
    lengths: "development sentence lengths",
    classes: "development sentence classes",
    order: "development batch order",
};

/// Sentence classification over a treebank resident in the persistent
/// region.
pub struct SentenceClassification {
    vocab: usize,
    /// Words of the development and test splits the vocabulary did not
    /// know.
    unknown: [usize; 2],
    classes: usize,
    bucket_lengths: Vec<usize>,
    /// The lengths the steps take: the buckets either split uses.
    lengths: Vec<usize>,
    train: Split,
    dev: Split,
    /// Development sentences, padding rows not counted.
    dev_real: usize,
    /// Each row's weight in the step's mean loss, written by the gather.
    weights: Buf<f32>,
    batch: usize,
}

impl SentenceClassification {
    /// The task as a run's settings carry it.
    pub fn choice(config: SentenceClassificationConfig) -> TaskChoice {
        TaskChoice::new("sentence classification", config)
    }

    /// `set`'s sentences as `config` keeps them, in batches of `batch`,
    /// uploaded into `p`.
    fn new(config: &SentenceClassificationConfig, set: &DataSet, p: &mut Persistent<'_>, batch: usize) -> Result<Self> {
        let (sentences, buckets) = config.sentences(set)?;
        let train = Split::new(&TRAINING, &sentences.train, &buckets, batch, p)?;
        let dev = Split::new(&DEVELOPMENT, &sentences.dev, &buckets, batch, p)?;
        let mut lengths: Vec<usize> = train.lengths().chain(dev.lengths()).collect();
        lengths.sort_unstable();
        lengths.dedup();
        Ok(SentenceClassification {
            vocab: sentences.vocab.len(),
            unknown: [sentences.dev.unknown(), sentences.test.unknown()],
            classes: config.classes,
            bucket_lengths: buckets.lengths().to_vec(),
            lengths,
            train,
            dev,
            dev_real: sentences.dev.len(),
            weights: p.zeros::<f32>("sentence weights", Shape::new(&[batch]))?,
            batch,
        })
    }

    /// The words the model's embedding has a row for (the unknown word's
    /// included).
    pub fn vocab(&self) -> usize {
        self.vocab
    }

    /// The bucket lengths, ascending.
    pub fn bucket_lengths(&self) -> &[usize] {
        &self.bucket_lengths
    }

    fn input<'s>(&self, batch: SentenceBatch<'s>, length: usize) -> Batch<'s> {
        SentenceInput {
            ids: batch.ids,
            last: batch.last,
            steps: length,
            batch: self.batch,
        }
        .into()
    }
}

impl Task for SentenceClassification {
    fn input(&self) -> Input {
        Input {
            example: Shape::new(&[self.vocab]),
            classes: self.classes,
        }
    }

    fn train_len(&self) -> usize {
        self.train.host_order.len()
    }

    fn test_len(&self) -> usize {
        self.dev.host_order.len()
    }

    /// The batch at the cursor's step of the epoch's order, of the bucket
    /// of `length`.
    fn train_batch<'s>(&self, s: &mut Step<'s>, at: BatchAt, length: usize) -> Result<(Batch<'s>, Labels<'s>)> {
        if at.len != self.batch || at.offset != 0 {
            return Err(Error::shape(
                "sentence classification",
                format!("a step of all {} rows, got {} from {}", self.batch, at.len, at.offset),
            ));
        }
        let rows = self.train.rows_of(length)?;
        let got = s.gather_sentences(rows, self.train.order, self.batch, at.cursor.buf, self.weights)?;
        Ok((self.input(got, length), got.labels))
    }

    /// Development batch `k` for `indices` `k·B..(k + 1)·B`.
    fn test_batch<'s>(&self, s: &mut Step<'s>, indices: &[u32]) -> Result<(Batch<'s>, Option<Labels<'s>>)> {
        let first = indices.first().map_or(0, |&i| i as usize);
        if indices.len() != self.batch || !first.is_multiple_of(self.batch) {
            return Err(Error::shape(
                "sentence classification",
                format!(
                    "a test batch of the {} rows of one batch, got {} from {first}",
                    self.batch,
                    indices.len()
                ),
            ));
        }
        let length = self.test_length(first);
        let rows = self.dev.rows_of(length)?;
        let which = s.batch_index(first / self.batch)?;
        let got = s.gather_sentences(rows, self.dev.order, self.batch, which, self.weights)?;
        Ok((self.input(got, length), Some(got.labels)))
    }

    /// The mean over the batch's sentences: each row weighs `B / real`, a
    /// padding row 0.
    fn loss<'s>(&self, s: &mut Step<'s>, output: Tensor<'s>, targets: Labels<'s>, over: usize) -> Result<Tensor<'s>> {
        let args = CrossEntropyArgs {
            weights: Some(self.weights),
            ..CrossEntropyArgs::default()
        };
        output.cross_entropy_over(s, targets, over, args)
    }

    fn readback_len(&self, examples: usize) -> usize {
        examples * self.classes
    }

    /// The batch's sentences whose largest logit is their class's.
    fn score(&self, outputs: &[f32], first: usize) -> Scores {
        let classes = self.dev.classes.get(first..).unwrap_or_default();
        let rows = outputs.chunks_exact(self.classes).zip(classes);
        let correct = rows
            .filter(|&(_, &class)| class != PADDING_ROW)
            .filter(|(row, &class)| argmax(row) == class as usize)
            .count();
        [correct as f64, 0.0, 0.0]
    }

    fn metric(&self, sums: Scores, _examples: usize) -> Metric {
        Metric::Accuracy(sums[0] / self.dev_real.max(1) as f64)
    }

    fn lengths(&self) -> &[usize] {
        &self.lengths
    }

    /// The vocabulary and its unknown words, and each bucket's length and
    /// batches.
    fn describe(&self) -> Vec<String> {
        let [dev, test] = self.unknown;
        let buckets: Vec<String> = self
            .bucket_lengths
            .iter()
            .enumerate()
            .map(|(b, &n)| {
                let count = |split: &Split| split.bucket_of.iter().filter(|&&k| k as usize == b).count();
                format!("{n} ({} + {})", count(&self.train), count(&self.dev))
            })
            .collect();
        vec![
            format!(
                "vocabulary of {} words from the training sentences (id 0 the unknown word: {dev} words of the development split, {test} of the test split)",
                self.vocab
            ),
            format!(
                "{} length buckets, each its own step plan and graph: length (training + development batches of {}) {}",
                self.bucket_lengths.len(),
                self.batch,
                buckets.join(", ")
            ),
        ]
    }

    fn train_length(&self, step: usize) -> usize {
        self.train.length(step)
    }

    fn test_length(&self, first: usize) -> usize {
        self.dev.length(first / self.batch.max(1))
    }

    fn samples(&self) -> Vec<LengthSample> {
        let sample = |&length: &usize| LengthSample {
            length,
            train_step: self.train.first_of(length),
            test_first: self.dev.first_of(length).map(|k| k * self.batch),
        };
        self.lengths.iter().map(sample).collect()
    }

    /// Shuffles the training batches (sentences within each bucket, the
    /// batches across buckets) and uploads the epoch's order.
    fn begin_epoch(&mut self, engine: &mut Engine, seed: u64, epoch: usize) -> Result<()> {
        self.train.batches.shuffle(seed, epoch as u64);
        self.train.arrange()?;
        engine.write_persistent(self.train.order, &self.train.host_order)
    }
}

#[cfg(test)]
#[path = "sentences_tests.rs"]
mod tests;
