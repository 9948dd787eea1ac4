//! Minibatches of sentences whose shapes repeat: each sentence belongs to
//! the shortest length bucket that holds it, a batch takes `B` sentences of
//! one bucket, and every batch of a bucket is `[B, bucket length]`, so a run
//! plans one step and captures one graph per bucket, not per length.
//!
//! - [`LengthBuckets::choose`] picks at most `k` bucket lengths from the training
//!   sentences' lengths, the ones that pad the fewest words (an exact
//!   dynamic programme over the distinct lengths), so the number of distinct
//!   shapes is bounded by `k` whatever the data.
//! - Sentences are padded at the end with [`UNKNOWN`] (0) to their bucket's
//!   length; each row's length says which positions are words. A bucket's
//!   last batch, if it has fewer than `B` sentences, is filled with
//!   [`PADDING_ROW`]s of length 0: the shape stays, and the rows count for
//!   nothing.
//! - An epoch visits every sentence exactly once. [`SentenceBatches::shuffle`]
//!   reorders the sentences within each bucket and the batches across
//!   buckets as a pure function of `(seed, epoch)`, allocating nothing; a
//!   new [`SentenceBatches`] is in a fixed order, for evaluation.
//!
//! [`UNKNOWN`]: super::vocab::UNKNOWN

use super::sentences::Sentences;
use super::vocab::UNKNOWN;
use super::TextError;
use crate::data::order::shuffle_into;
use crate::rng::{mix64, GAMMA};

/// A row of a batch that holds no sentence.
pub const PADDING_ROW: u32 = u32::MAX;

/// Bucket lengths, ascending: a sentence of `n` words goes in the first
/// bucket at least `n` long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LengthBuckets {
    lengths: Vec<usize>,
}

impl LengthBuckets {
    /// At most `count` bucket lengths for sentences of the given `lengths`,
    /// the ones that minimise the padding words; the longest bucket is the
    /// longest length.
    pub fn choose(lengths: impl IntoIterator<Item = usize>, count: usize) -> Result<Self, TextError> {
        if count == 0 {
            return Err(TextError::ZeroBatches { buckets: 0, batch: 1 });
        }
        // (length, how many sentences have it), ascending.
        let mut sorted: Vec<usize> = lengths.into_iter().collect();
        sorted.sort_unstable();
        let mut distinct: Vec<(usize, usize)> = Vec::new();
        for n in sorted {
            match distinct.last_mut() {
                Some((len, times)) if *len == n => *times += 1,
                _ => distinct.push((n, 1)),
            }
        }
        if distinct.is_empty() {
            return Err(TextError::NoLengths);
        }
        let m = distinct.len();
        let k = count.min(m);
        // Prefix sums of sentences and of their words, so that pad(i, j),
        // the padding when lengths i..=j share bucket length j, is O(1).
        let (mut sentences, mut words) = (vec![0u64; m + 1], vec![0u64; m + 1]);
        for (i, &(n, c)) in distinct.iter().enumerate() {
            sentences[i + 1] = sentences[i] + c as u64;
            words[i + 1] = words[i] + (n * c) as u64;
        }
        let pad = |i: usize, j: usize| -> u64 {
            distinct[j].0 as u64 * (sentences[j + 1] - sentences[i]) - (words[j + 1] - words[i])
        };
        // best[b][j]: least padding covering lengths 0..=j with b + 1
        // buckets, the last one ending at j; from[b][j]: where it starts.
        let mut best = vec![vec![u64::MAX; m]; k];
        let mut from = vec![vec![0usize; m]; k];
        for (j, one) in best[0].iter_mut().enumerate() {
            *one = pad(0, j);
        }
        for b in 1..k {
            for j in b..m {
                for i in b..=j {
                    let cost = best[b - 1][i - 1].saturating_add(pad(i, j));
                    if cost < best[b][j] {
                        (best[b][j], from[b][j]) = (cost, i);
                    }
                }
            }
        }
        let mut lengths = Vec::with_capacity(k);
        let (mut b, mut j) = (k - 1, m - 1);
        loop {
            lengths.push(distinct[j].0);
            if b == 0 {
                break;
            }
            j = from[b][j] - 1;
            b -= 1;
        }
        lengths.reverse();
        Ok(LengthBuckets { lengths })
    }

    /// LengthBuckets of the given lengths, sorted and deduplicated; a zero
    /// length is dropped.
    pub fn from_lengths(mut lengths: Vec<usize>) -> Result<Self, TextError> {
        lengths.retain(|&n| n > 0);
        lengths.sort_unstable();
        lengths.dedup();
        if lengths.is_empty() {
            return Err(TextError::NoLengths);
        }
        Ok(LengthBuckets { lengths })
    }

    /// Stretches the longest bucket to `longest` words if it is shorter, so
    /// that sentences of other splits fit (SST's test split has a sentence
    /// of 56 words; its training split's longest is 52).
    pub fn cover(&mut self, longest: usize) {
        if let Some(top) = self.lengths.last_mut() {
            *top = (*top).max(longest);
        }
    }

    /// The bucket lengths, ascending.
    pub fn lengths(&self) -> &[usize] {
        &self.lengths
    }

    /// The bucket a sentence of `length` words goes in, if one holds it.
    pub fn of(&self, length: usize) -> Option<usize> {
        self.lengths.iter().position(|&n| n >= length)
    }
}

/// Which sentences batch `k` holds, and its bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchRows<'a> {
    /// Its bucket: an index into [`LengthBuckets`]'s lengths.
    pub bucket: usize,
    /// The bucket's length: the batch is `[B, seq_len]`.
    pub seq_len: usize,
    /// `B` sentence indices, [`PADDING_ROW`] where there is none.
    pub rows: &'a [u32],
}

/// A split's sentences as an epoch of batches; see the module's doc.
#[derive(Debug, Clone)]
pub struct SentenceBatches {
    batch: usize,
    buckets: LengthBuckets,
    /// Per bucket, its sentences ascending.
    members: Vec<Vec<u32>>,
    /// Per bucket, its sentences in the epoch's order, then
    /// [`PADDING_ROW`]s to a whole number of batches.
    rows: Vec<Vec<u32>>,
    /// Every batch as (bucket, first row in `rows[bucket]`), in fixed order.
    all: Vec<(u32, u32)>,
    /// The epoch's order of `all`.
    order: Vec<u32>,
}

impl SentenceBatches {
    /// `sentences` in batches of `batch` by `buckets`. Refuses a sentence
    /// longer than the longest bucket.
    pub fn new(sentences: &Sentences, buckets: &LengthBuckets, batch: usize) -> Result<Self, TextError> {
        if batch == 0 {
            return Err(TextError::ZeroBatches {
                buckets: buckets.lengths.len(),
                batch,
            });
        }
        let mut members = vec![Vec::new(); buckets.lengths.len()];
        for (index, length) in sentences.lengths().enumerate() {
            let bucket = buckets.of(length).ok_or(TextError::SentenceTooLong {
                index,
                length,
                longest: buckets.lengths.last().copied().unwrap_or(0),
            })?;
            members[bucket].push(index as u32);
        }
        let (mut all, mut rows) = (Vec::new(), Vec::new());
        for (bucket, members) in members.iter().enumerate() {
            let batches = members.len().div_ceil(batch);
            let mut padded = members.clone();
            padded.resize(batches * batch, PADDING_ROW);
            rows.push(padded);
            all.extend((0..batches).map(|k| (bucket as u32, (k * batch) as u32)));
        }
        Ok(SentenceBatches {
            batch,
            buckets: buckets.clone(),
            rows,
            members,
            order: (0..all.len() as u32).collect(),
            all,
        })
    }

    /// Batches per epoch.
    pub fn len(&self) -> usize {
        self.all.len()
    }

    /// Whether an epoch has no batch.
    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    /// The sentences per batch, `B`.
    pub fn batch(&self) -> usize {
        self.batch
    }

    /// The distinct shapes `[B, T]` of the epoch's batches, one per bucket
    /// that holds a sentence: the step plans a run needs.
    pub fn shapes(&self) -> Vec<[usize; 2]> {
        let used = self.members.iter().zip(&self.buckets.lengths);
        used.filter(|(rows, _)| !rows.is_empty())
            .map(|(_, &len)| [self.batch, len])
            .collect()
    }

    /// Puts epoch `epoch` of a run seeded `seed` in its order: the same
    /// pair gives the same order on every platform.
    pub fn shuffle(&mut self, seed: u64, epoch: u64) {
        for (bucket, (rows, members)) in self.rows.iter_mut().zip(&self.members).enumerate() {
            // Draw the permutation in place, then look the sentences up:
            // `rows` holds indices into `members` for a moment. The padding
            // rows stay at the end, all in the bucket's last batch.
            let rows = &mut rows[..members.len()];
            shuffle_into(rows, stream(seed, bucket as u64 + 1), epoch);
            for row in rows.iter_mut() {
                *row = members[*row as usize];
            }
        }
        shuffle_into(&mut self.order, stream(seed, 0), epoch);
    }

    /// Batch `index` of the epoch.
    pub fn rows(&self, index: usize) -> Result<BatchRows<'_>, TextError> {
        let count = self.order.len();
        let &at = self.order.get(index).ok_or(TextError::NoSuchBatch { index, count })?;
        let (bucket, first) = self.all[at as usize];
        let (bucket, first) = (bucket as usize, first as usize);
        Ok(BatchRows {
            bucket,
            seq_len: self.buckets.lengths[bucket],
            rows: &self.rows[bucket][first..first + self.batch],
        })
    }

    /// Writes batch `index`: `tokens` `[B, T]` row-major (padded with
    /// [`UNKNOWN`]), each row's `lengths` and `labels` (0 for padding rows).
    /// Returns the batch's bucket.
    pub fn fill(
        &self,
        index: usize,
        sentences: &Sentences,
        tokens: &mut [u32],
        lengths: &mut [u32],
        labels: &mut [u8],
    ) -> Result<usize, TextError> {
        let BatchRows { bucket, seq_len, rows } = self.rows(index)?;
        if tokens.len() < self.batch * seq_len || lengths.len() != self.batch || labels.len() != self.batch {
            return Err(TextError::BatchBuffers {
                batch: self.batch,
                seq_len,
                tokens_needed: self.batch * seq_len,
                tokens: tokens.len(),
                lengths: lengths.len(),
                labels: labels.len(),
            });
        }
        let tokens = &mut tokens[..self.batch * seq_len];
        for (r, (&row, out)) in rows.iter().zip(tokens.chunks_exact_mut(seq_len)).enumerate() {
            let words = match row {
                PADDING_ROW => &[][..],
                row => sentences.tokens(row as usize),
            };
            out[..words.len()].copy_from_slice(words);
            out[words.len()..].fill(UNKNOWN);
            lengths[r] = words.len() as u32;
            labels[r] = match row {
                PADDING_ROW => 0,
                row => sentences.label(row as usize),
            };
        }
        Ok(bucket)
    }
}

/// The seed of one of a run's orders (0: the batches', b + 1: bucket b's
/// sentences), unrelated to the others.
fn stream(seed: u64, which: u64) -> u64 {
    mix64(seed ^ which.wrapping_mul(GAMMA))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::text::sentences::{Classes, SentimentSet};
    use crate::data::text::tree::Tree;
    use crate::data::text::treebank::Treebank;
    use crate::data::text::{shipped, Vocab};

    /// Sentences of the given lengths, sentence i's words all `i + 1` and
    /// its label i % 5.
    fn sentences(lengths: &[usize]) -> Sentences {
        let trees: Vec<Tree> = lengths
            .iter()
            .enumerate()
            .map(|(i, &n)| {
                let mut line = format!("({} w{i})", i % 5);
                for _ in 1..n {
                    line = format!("({} {line} ({} w{i}))", i % 5, i % 5);
                }
                Tree::parse(&line).unwrap()
            })
            .collect();
        let words: Vec<String> = (0..lengths.len()).map(|i| format!("w{i}")).collect();
        // `w0` … `w9` sort as their numbers, so below 10 sentences word i
        // has id i + 1 (the tests that read ids stay below).
        let vocab = Vocab::from_words(words.iter().map(String::as_str));
        let sentences = Sentences::new(&trees, Classes::Five, &vocab);
        assert!(sentences.lengths().eq(lengths.iter().copied()));
        sentences
    }

    /// Padding words of sentences of `lengths` in `buckets`.
    fn padding(lengths: &[usize], buckets: &LengthBuckets) -> usize {
        lengths
            .iter()
            .map(|&n| buckets.lengths()[buckets.of(n).unwrap()] - n)
            .sum()
    }

    #[test]
    fn buckets_minimise_padding() {
        let lengths = [1, 2, 2, 3, 9, 10, 10, 10, 30];
        let buckets = LengthBuckets::choose(lengths, 3).unwrap();
        assert_eq!(buckets.lengths(), [3, 10, 30]);
        assert_eq!(padding(&lengths, &buckets), 2 + 1 + 1 + 1);
        // Every other choice of 3 lengths pads at least as much.
        for a in 1..30 {
            for b in a + 1..30 {
                let other = LengthBuckets::from_lengths(vec![a, b, 30]).unwrap();
                assert!(padding(&lengths, &other) >= 5, "{a} {b}");
            }
        }
        // More buckets than lengths: one per length, nothing padded.
        let each = LengthBuckets::choose(lengths, 50).unwrap();
        assert_eq!(each.lengths(), [1, 2, 3, 9, 10, 30]);
        assert_eq!(LengthBuckets::choose(lengths, 1).unwrap().lengths(), [30]);
        assert!(matches!(LengthBuckets::choose([], 4), Err(TextError::NoLengths)));
        assert!(LengthBuckets::choose(lengths, 0).is_err());
    }

    #[test]
    fn buckets_place_and_cover_lengths() {
        let mut buckets = LengthBuckets::from_lengths(vec![20, 0, 5, 10, 5]).unwrap();
        assert_eq!(buckets.lengths(), [5, 10, 20]);
        assert_eq!(
            [1, 5, 6, 10, 20, 21].map(|n| buckets.of(n)),
            [Some(0), Some(0), Some(1), Some(1), Some(2), None]
        );
        buckets.cover(15);
        assert_eq!(buckets.lengths(), [5, 10, 20]);
        buckets.cover(21);
        assert_eq!(buckets.of(21), Some(2));
    }

    #[test]
    fn batches_pad_to_their_bucket_and_say_the_lengths() {
        let set = sentences(&[3, 1, 4, 2, 5]);
        let buckets = LengthBuckets::from_lengths(vec![2, 5]).unwrap();
        let batches = SentenceBatches::new(&set, &buckets, 2).unwrap();
        // Bucket 2: sentences 1, 3; bucket 5: sentences 0, 2, 4 and a padding row.
        assert_eq!(batches.len(), 3);
        assert_eq!(batches.shapes(), [[2, 2], [2, 5]]);
        let (mut tokens, mut lengths, mut labels) = (vec![9; 10], vec![9; 2], vec![9; 2]);
        assert_eq!(
            batches.fill(0, &set, &mut tokens, &mut lengths, &mut labels).unwrap(),
            0
        );
        assert_eq!(
            (&tokens[..4], &lengths[..], &labels[..]),
            (&[2, 0, 4, 4][..], &[1, 2][..], &[1, 3][..])
        );
        assert_eq!(
            batches.fill(1, &set, &mut tokens, &mut lengths, &mut labels).unwrap(),
            1
        );
        assert_eq!(tokens, [1, 1, 1, 0, 0, 3, 3, 3, 3, 0]);
        assert_eq!((lengths.as_slice(), labels.as_slice()), (&[3, 4][..], &[0, 2][..]));
        batches.fill(2, &set, &mut tokens, &mut lengths, &mut labels).unwrap();
        assert_eq!(tokens, [5, 5, 5, 5, 5, 0, 0, 0, 0, 0]);
        assert_eq!((lengths.as_slice(), labels.as_slice()), (&[5, 0][..], &[4, 0][..]));
        assert_eq!(batches.rows(2).unwrap().rows, [4, PADDING_ROW]);
    }

    #[test]
    fn bad_batch_requests_are_errors() {
        let set = sentences(&[3, 1, 6]);
        let buckets = LengthBuckets::from_lengths(vec![4]).unwrap();
        match SentenceBatches::new(&set, &buckets, 2) {
            Err(TextError::SentenceTooLong { index, length, longest }) => {
                assert_eq!((index, length, longest), (2, 6, 4))
            }
            other => panic!("expected SentenceTooLong, got {other:?}"),
        }
        assert!(matches!(
            SentenceBatches::new(&set, &buckets, 0),
            Err(TextError::ZeroBatches { .. })
        ));
        let batches = SentenceBatches::new(&set, &LengthBuckets::from_lengths(vec![6]).unwrap(), 2).unwrap();
        let (mut tokens, mut lengths, mut labels) = (vec![0; 12], vec![0; 2], vec![0; 2]);
        let err = batches
            .fill(2, &set, &mut tokens, &mut lengths, &mut labels)
            .unwrap_err();
        assert!(matches!(err, TextError::NoSuchBatch { index: 2, count: 2 }), "{err:?}");
        let err = batches
            .fill(0, &set, &mut tokens[..11], &mut lengths, &mut labels)
            .unwrap_err();
        assert!(
            matches!(err, TextError::BatchBuffers { tokens_needed: 12, .. }),
            "{err:?}"
        );
    }

    /// Every batch's rows of an epoch, in order.
    fn epoch_rows(batches: &SentenceBatches) -> Vec<(usize, Vec<u32>)> {
        (0..batches.len())
            .map(|k| {
                let b = batches.rows(k).unwrap();
                (b.bucket, b.rows.to_vec())
            })
            .collect()
    }

    #[test]
    fn an_sst_epoch_has_few_shapes_and_every_sentence_once() {
        let bank = Treebank::load(&shipped::sst()).unwrap();
        let set = SentimentSet::new(&bank, Classes::Five);
        let mut buckets = LengthBuckets::choose(set.train.lengths(), 6).unwrap();
        buckets.cover(set.longest());
        assert_eq!(buckets.lengths().len(), 6);
        assert_eq!(*buckets.lengths().last().unwrap(), 56);
        for (split, seed) in [(&set.train, 7), (&set.dev, 8), (&set.test, 9)] {
            let mut batches = SentenceBatches::new(split, &buckets, 25).unwrap();
            assert!(batches.shapes().len() <= 6);
            for epoch in 0..2 {
                batches.shuffle(seed, epoch);
                let mut seen = vec![0u32; split.len()];
                let mut shapes = std::collections::BTreeSet::new();
                for (bucket, rows) in epoch_rows(&batches) {
                    let seq_len = buckets.lengths()[bucket];
                    shapes.insert(seq_len);
                    assert_eq!(rows.len(), 25);
                    for row in rows.into_iter().filter(|&r| r != PADDING_ROW) {
                        seen[row as usize] += 1;
                        // In the shortest bucket that holds it.
                        assert_eq!(buckets.of(split.length(row as usize)), Some(bucket));
                        assert!(split.length(row as usize) <= seq_len);
                    }
                }
                assert!(seen.iter().all(|&n| n == 1), "a sentence missing or repeated");
                assert_eq!(shapes.len(), batches.shapes().len());
                // At most one batch per bucket has padding rows.
                let padded = epoch_rows(&batches)
                    .iter()
                    .filter(|(_, r)| r.contains(&PADDING_ROW))
                    .count();
                assert!(padded <= batches.shapes().len());
            }
        }
    }

    #[test]
    fn the_order_is_a_function_of_seed_and_epoch() {
        let lengths: Vec<usize> = (0..500).map(|i| 1 + i * 37 % 40).collect();
        let set = sentences(&lengths);
        let buckets = LengthBuckets::choose(lengths.iter().copied(), 4).unwrap();
        let mut a = SentenceBatches::new(&set, &buckets, 16).unwrap();
        let mut b = a.clone();
        let fixed = epoch_rows(&a);
        a.shuffle(3, 1);
        b.shuffle(3, 0);
        b.shuffle(3, 1);
        assert_eq!(epoch_rows(&a), epoch_rows(&b), "the order depends on the last epoch");
        let first = epoch_rows(&a);
        assert_ne!(first, fixed);
        a.shuffle(3, 2);
        assert_ne!(epoch_rows(&a), first);
        a.shuffle(4, 1);
        assert_ne!(epoch_rows(&a), first);
        // Batches from different buckets interleave.
        let buckets_in_order: Vec<usize> = first.iter().map(|(b, _)| *b).collect();
        assert!(buckets_in_order.windows(2).filter(|w| w[0] != w[1]).count() > 4);
    }
}
