//! sentences: a sentence classifier's step input, gathered on the device.
//!
//! A split's sentences are uploaded once per length bucket
//! ([`SentenceRows`]: every sentence of the bucket right-padded to its
//! length `T`, each row's length and class). [`Step::gather_sentences`]
//! reads batch `which[0]` of an order table of bucket rows (`B` per batch)
//! and makes what the model and the loss need, all in the step region:
//!
//! - the ids `[T, B]` time-major (`ids[t·B + b]` is row `b`'s word `t`);
//! - each row's class;
//! - where each row's last word is in the `[T·B]` rows of a time-major
//!   output, `(length − 1)·B + b`, so the model reads each sentence's
//!   hidden state at its own length and right-padding changes nothing;
//! - each row's weight in the batch's mean loss: `B / real` for the `real`
//!   rows that hold a sentence, 0 for a padding row (length 0), so a
//!   bucket's last, part-filled batch keeps the bucket's shape and its mean
//!   is over its sentences alone. Written where the caller says: a task
//!   keeps them in a persistent buffer its loss reads later in the step
//!   (the weights are not the model's input, and the loss is handed only
//!   the classes).
//!
//! Which batch is read on the device, so a captured step reads the next
//! one on every replay: `which` is the step cursor (its first word is the
//! step in the epoch, the order table the epoch's order, uploaded at the
//! epoch's start), or an index the step uploaded (evaluation). A batch or
//! row past its table is an error on the CPU; on a GPU the ids and classes
//! are `0xffffffff`, the loss turns NaN and training stops at that step.

#[cfg(test)]
mod tests;

use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::backend::BackendError;
use crate::memory::Buf;
use crate::ops::Step;
use crate::tensor::{Labels, Shape};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "sentences",
    source: include_str!("kernels.cu"),
    entries: &[GATHER_SENTENCES],
};
const GATHER_SENTENCES: &str = "gather_sentences";

/// One length bucket of a split's sentences in the persistent region: rows
/// of `steps` ids, right-padded, with each row's length in words (0 for a
/// padding row) and its class.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SentenceRows {
    /// The rows' word ids, `[rows, T]`, right-padded.
    pub tokens: Buf<u32>,
    /// Each row's length in words, 0 for a padding row.
    pub lengths: Buf<u32>,
    /// Each row's class.
    pub labels: Buf<u32>,
    /// The bucket's length `T`.
    pub steps: usize,
}

impl SentenceRows {
    /// Rows in the bucket.
    pub fn rows(&self) -> usize {
        self.lengths.len()
    }

    /// Refuses tables that do not hold `rows × steps` ids and a length
    /// and class per row.
    pub fn check(&self) -> Result<()> {
        let rows = self.rows();
        if rows == 0 || self.steps == 0 || self.tokens.len() != rows * self.steps || self.labels.len() != rows {
            return Err(Error::shape(
                "gather_sentences",
                format!(
                    "at least one row of at least one id, {rows} × {} ids and {rows} classes, got {} ids and {} classes",
                    self.steps,
                    self.tokens.len(),
                    self.labels.len()
                ),
            ));
        }
        Ok(())
    }
}

/// A batch of sentences of one bucket, in the step region.
#[derive(Debug, Clone, Copy)]
pub struct SentenceBatch<'s> {
    /// `[T·B]` ids, time-major.
    pub ids: Labels<'s>,
    /// `B` classes.
    pub labels: Labels<'s>,
    /// `B` rows of a time-major `[T·B, …]` output: each row's last word.
    pub last: Labels<'s>,
}

impl<'s> Step<'s> {
    /// Batch `which[0]` of `order` (`batch` rows of `rows` per batch) as a
    /// [`SentenceBatch`], the rows' weights written into `weights`.
    pub fn gather_sentences(
        &mut self,
        rows: SentenceRows,
        order: Buf<u32>,
        batch: usize,
        which: Buf<u32>,
        weights: Buf<f32>,
    ) -> Result<SentenceBatch<'s>> {
        rows.check()?;
        if weights.len() != batch {
            return Err(Error::shape(
                "gather_sentences",
                format!("room for the weights of {batch} rows, got {}", weights.len()),
            ));
        }
        if batch == 0 || which.is_empty() || order.len() < batch {
            return Err(Error::shape(
                "gather_sentences",
                format!(
                    "a batch of at least one row, an order of at least one batch and a batch index, got a batch of {batch}, an order of {} and {} indices",
                    order.len(),
                    which.len()
                ),
            ));
        }
        let SentenceRows {
            tokens,
            lengths,
            labels,
            steps,
        } = rows;
        let count = rows.rows();
        let n = steps * batch;
        let ids = self.alloc::<u32>("sentence ids", Shape::new(&[n]))?;
        let classes = self.alloc::<u32>("sentence classes", Shape::new(&[batch]))?;
        let last = self.alloc::<u32>("sentence ends", Shape::new(&[batch]))?;
        self.launch(
            &[
                tokens.into(),
                lengths.into(),
                labels.into(),
                order.into(),
                which.into(),
                ids.into(),
                classes.into(),
                last.into(),
                weights.into(),
            ],
            |v| {
                let k = v.read(which)?[0] as usize;
                let order = v.read(order)?;
                let batches = order.len() / batch;
                if k >= batches {
                    return Err(BackendError::Index {
                        index: k as u32,
                        count: batches,
                    });
                }
                let picked = &order[k * batch..(k + 1) * batch];
                let (tokens, lengths, labels) = (v.read(tokens)?, v.read(lengths)?, v.read(labels)?);
                if let Some(&row) = picked.iter().find(|&&r| r as usize >= count) {
                    return Err(BackendError::Index { index: row, count });
                }
                if picked.iter().any(|&r| lengths[r as usize] as usize > steps) {
                    return Err(BackendError::Internal("a sentence longer than its bucket"));
                }
                let real = picked.iter().filter(|&&r| lengths[r as usize] > 0).count();
                let ids = v.write(ids)?;
                for (i, id) in ids.iter_mut().enumerate() {
                    let (t, b) = (i / batch, i % batch);
                    *id = tokens[picked[b] as usize * steps + t];
                }
                let (classes, last, weights) = (v.write(classes)?, v.write(last)?, v.write(weights)?);
                for (b, &row) in picked.iter().enumerate() {
                    let length = lengths[row as usize] as usize;
                    classes[b] = labels[row as usize];
                    last[b] = (length.saturating_sub(1) * batch + b) as u32;
                    weights[b] = match length > 0 && real > 0 {
                        true => batch as f32 / real as f32,
                        false => 0.0,
                    };
                }
                Ok(())
            },
            |gpu| {
                gpu.launch(
                    GATHER_SENTENCES,
                    Grid::over(n),
                    &[
                        tokens.into(),
                        lengths.into(),
                        labels.into(),
                        order.into(),
                        which.into(),
                        ids.into(),
                        classes.into(),
                        last.into(),
                        weights.into(),
                        Arg::U32(steps as u32),
                        Arg::U32(batch as u32),
                        Arg::U32(count as u32),
                        Arg::U32(order.len() as u32),
                    ],
                )
            },
        )?;
        Ok(SentenceBatch {
            ids: self.labels_from(ids),
            labels: self.labels_from(classes),
            last: self.labels_from(last),
        })
    }

    /// Index `k` in the step region, for [`Step::gather_sentences`]
    /// outside a captured step.
    pub fn batch_index(&mut self, k: usize) -> Result<Buf<u32>> {
        let buf = self.alloc::<u32>("batch index", Shape::new(&[1]))?;
        self.copy_in(buf, &[k as u32])?;
        Ok(buf)
    }
}
