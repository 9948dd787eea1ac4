//! Sentiment over parse trees: every node of a treebank's trees is a
//! phrase with a label (five classes), a model of [`Reads::Trees`] gives
//! each node's logits, and the loss is the cross-entropy summed over every
//! node of a tree, averaged over the step's trees (with one tree a step,
//! Lantern's and the paper's sum over the tree's nodes). Evaluation reads
//! back every node's logits of the development split and scores the
//! roots over five classes, the non-neutral roots by sign, and every node.
//!
//! Every step is a shape of its own ([`Task::dynamic`]): its trees are
//! known only when the epoch's order is. At an epoch's start the task
//! shuffles the training trees (seeded by the run and the epoch), cuts
//! them into batches and makes each batch's `nn::Forest` (shapes and level
//! plan), words, labels and loss weights on the host; a step uploads its
//! batch's words and labels into the step region and the model runs it.
//! Nothing is planned or captured: a step bump-allocates above the mark.
//!
//! The arena is sized before any epoch exists, by a dry run of the task's
//! largest step: the `B` trees of most nodes of all three splits, and the
//! tallest tree besides. A step's bytes are sums over its nodes (so over
//! its leaves and inner nodes, both largest in those `B` trees) and over
//! its levels (the tallest tree has the most), each allocation rounded up
//! to the arena's alignment; the extra tree adds a node to every level,
//! more than that rounding. By levels a batch lists each distinct word
//! once, and its bytes grow with those words too: the dry run gives every
//! leaf a word of its own, the most its leaves can have. So no batch of
//! any epoch, and no evaluation batch (forward alone), needs more than
//! that step.

use super::classification::argmax;
use super::{BuildArgs, Metric, Pretrained, Scores, Task, TaskChoice, TaskConfig};
use crate::data::text::{Node, Tree, Vocab};
use crate::data::{shuffle_into, DataSet};
use crate::memory::FloatBuf;
use crate::nn::{Batch, Forest, Input, Reads, TreeInput, TreeNode};
use crate::ops::cross_entropy::CrossEntropyArgs;
use crate::ops::gather::BatchAt;
use crate::tensor::{Labels, Persistent, Shape, Tensor};
use crate::{Engine, Error, Result, Setting, Step};
use std::sync::Arc;

/// The classes every node is sorted into: SST's five labels.
const CLASSES: usize = 5;

/// How a batch of trees is run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TreeBatching {
    /// Levels when a batch holds more than one tree, else one node at a
    /// time.
    #[default]
    Auto,
    /// Each tree's nodes one at a time in post-order (Lantern's way).
    PostOrder,
    /// Every node of one height across the batch's trees at once.
    Levels,
}

impl TreeBatching {
    /// Whether a batch of `batch` trees runs by levels.
    pub fn levels(self, batch: usize) -> bool {
        match self {
            TreeBatching::Auto => batch > 1,
            TreeBatching::PostOrder => false,
            TreeBatching::Levels => true,
        }
    }
}

/// The settings of [`TreeSentiment`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct TreeSentimentConfig {
    /// How a batch's trees are run.
    pub batching: TreeBatching,
}

impl TreeSentimentConfig {
    fn bank<'d>(&self, set: &'d DataSet) -> Result<&'d crate::data::text::Treebank> {
        let bank = set.treebank().ok_or_else(|| {
            Error::setting(
                Setting::Data,
                format!(
                    "a Tree-LSTM trains on a treebank of parse trees, and the data is {}",
                    set.kind().describe()
                ),
                None,
            )
        })?;
        if bank.train.is_empty() || bank.dev.is_empty() {
            return Err(Error::setting(
                Setting::Data,
                format!(
                    "the treebank holds {} training and {} development trees: each split needs at least one",
                    bank.train.len(),
                    bank.dev.len()
                ),
                None,
            ));
        }
        Ok(bank)
    }
}

/// The vocabulary of the training trees' words.
fn vocabulary(bank: &crate::data::text::Treebank) -> Vocab {
    Vocab::from_words(bank.train.iter().flat_map(|t| t.words()).map(String::as_str))
}

impl TaskConfig for TreeSentimentConfig {
    fn reads(&self) -> Reads {
        Reads::Trees
    }

    /// A word's id is below the vocabulary: `example` is `[V]`.
    fn input_of(&self, set: &DataSet) -> Result<Input> {
        Ok(Input {
            example: Shape::new(&[vocabulary(self.bank(set)?).len()]),
            classes: CLASSES,
        })
    }

    fn check(&self, set: &DataSet, batch: usize) -> Result<()> {
        let trees = self.bank(set)?.train.len();
        if batch == 0 || batch > trees {
            return Err(Error::setting(
                Setting::Batch,
                format!("a batch of {batch} trees, and the training split holds {trees}"),
                Some(format!("1 to {trees}")),
            ));
        }
        Ok(())
    }

    fn draws(&self) -> String {
        "none".into()
    }

    fn train_len(&self, set: &DataSet, _batch: usize) -> Result<usize> {
        Ok(self.bank(set)?.train.len())
    }

    fn build(&self, set: &DataSet, _p: &mut Persistent<'_>, args: BuildArgs) -> Result<Box<dyn Task>> {
        Ok(Box::new(TreeSentiment::new(self, set, args.batch)?))
    }

    fn pretrained(&self, set: &DataSet, path: &std::path::Path, embed: usize) -> Result<Option<Pretrained>> {
        super::read_pretrained(path, &vocabulary(self.bank(set)?), embed).map(Some)
    }
}

/// One tree as a step reads it: its shape, its leaves' word ids and its
/// nodes' labels, both in the tree's order.
struct HostTree {
    shape: Vec<TreeNode>,
    words: Vec<u32>,
    labels: Vec<u32>,
    height: usize,
}

impl HostTree {
    fn new(tree: &Tree, vocab: &Vocab) -> Self {
        let mut heights: Vec<usize> = Vec::with_capacity(tree.nodes().len());
        let shape = tree
            .nodes()
            .iter()
            .map(|node| match *node {
                Node::Leaf { word, .. } => {
                    heights.push(0);
                    TreeNode::Leaf { word }
                }
                Node::Inner { left, right, .. } => {
                    heights.push(1 + heights[left as usize].max(heights[right as usize]));
                    TreeNode::Inner { left, right }
                }
            })
            .collect();
        HostTree {
            shape,
            words: tree.words().iter().map(|w| vocab.id_or_unknown(w)).collect(),
            labels: tree.nodes().iter().map(|n| u32::from(n.label())).collect(),
            height: heights.last().copied().unwrap_or(0),
        }
    }
}

/// How a batch lists its leaves' words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum WordRows {
    /// Each leaf's word, leaf after leaf (one node at a time reads them
    /// so).
    Each,
    /// Each distinct word once, and each leaf's row of them: by levels, a
    /// word's leaf gates are computed once
    /// (`nn::TreeLstm::forward_levels_shared`).
    Distinct,
    /// As `Distinct`, but a row for every leaf, as if no two leaves shared
    /// a word: the largest a `Distinct` batch of these trees can be (the
    /// arena's bound).
    Unshared,
}

impl WordRows {
    /// How a batch run by levels (or not) lists its words.
    fn of(levels: bool) -> Self {
        match levels {
            true => WordRows::Distinct,
            false => WordRows::Each,
        }
    }
}

/// A batch of trees made on the host before its step: what the step
/// uploads and the model runs.
struct TreeBatch {
    forest: Arc<Forest>,
    words: Vec<u32>,
    /// Each leaf's row of `words` (not `WordRows::Each`).
    leaves: Option<Vec<u32>>,
    labels: Vec<u32>,
    /// Each tree's root, as a row of the batch's nodes.
    roots: Vec<usize>,
}

impl TreeBatch {
    fn of<'t>(trees: impl Iterator<Item = &'t HostTree> + Clone, rows: WordRows) -> Result<Self> {
        let shapes: Vec<&[TreeNode]> = trees.clone().map(|t| t.shape.as_slice()).collect();
        let (mut words, mut labels, mut roots) = (Vec::new(), Vec::new(), Vec::new());
        for tree in trees {
            words.extend_from_slice(&tree.words);
            labels.extend_from_slice(&tree.labels);
            roots.push(labels.len() - 1);
        }
        let leaves = match rows {
            WordRows::Each => None,
            WordRows::Unshared => Some((0..words.len() as u32).collect()),
            WordRows::Distinct => {
                let (distinct, leaves) = distinct_words(&words);
                words = distinct;
                Some(leaves)
            }
        };
        Ok(TreeBatch {
            forest: Arc::new(Forest::new(&shapes)?),
            words,
            leaves,
            labels,
            roots,
        })
    }

    fn input<'s>(&self, s: &mut Step<'s>, levels: bool) -> Result<(Batch<'s>, Labels<'s>)> {
        let words = s.labels(&self.words)?;
        let leaves = self.leaves.as_ref().map(|rows| s.labels(rows)).transpose()?;
        let labels = s.labels(&self.labels)?;
        let input = TreeInput {
            words,
            leaves,
            forest: Arc::clone(&self.forest),
            levels,
        };
        Ok((input.into(), labels))
    }
}

/// Sentiment over every node of a treebank's trees; see the module.
pub struct TreeSentiment {
    vocab: usize,
    /// Words of the development and test splits the vocabulary lacks.
    unknown: [usize; 2],
    train: Vec<HostTree>,
    /// The current epoch's training batches (empty before the first).
    epoch: Vec<TreeBatch>,
    /// The largest step any epoch can take, which every step is until the
    /// first epoch begins (the dry run's).
    bound: TreeBatch,
    /// The split evaluation reads in batches, in order: the development
    /// split, and the test split after the last epoch.
    dev: Vec<TreeBatch>,
    /// Its trees, their non-neutral roots, and their nodes.
    dev_counts: [usize; 3],
    /// The test split, in batches, with its counts.
    test: Vec<TreeBatch>,
    test_counts: [usize; 3],
    batch: usize,
    levels: bool,
}

impl TreeSentiment {
    /// The task as a run's settings carry it.
    pub fn choice(config: TreeSentimentConfig) -> TaskChoice {
        TaskChoice::new("tree sentiment", config)
    }

    fn new(config: &TreeSentimentConfig, set: &DataSet, batch: usize) -> Result<Self> {
        let bank = config.bank(set)?;
        config.check(set, batch)?;
        let vocab = vocabulary(bank);
        let host = |trees: &[Tree]| trees.iter().map(|t| HostTree::new(t, &vocab)).collect::<Vec<_>>();
        let (train, dev, test) = (host(&bank.train), host(&bank.dev), host(&bank.test));
        let unknown = |trees: &[Tree]| {
            let words = trees.iter().flat_map(|t| t.words());
            words.filter(|w| vocab.id(w).is_none()).count()
        };
        // The bound: the `batch` trees of most nodes of any split, and the
        // tallest besides (see the module).
        let all: Vec<&HostTree> = train.iter().chain(&dev).chain(&test).collect();
        let mut by_size: Vec<usize> = (0..all.len()).collect();
        by_size.sort_by_key(|&i| std::cmp::Reverse(all[i].shape.len()));
        let tallest = (0..all.len()).max_by_key(|&i| all[i].height).unwrap_or(0);
        let picks = by_size.iter().take(batch).chain([&tallest]);
        let levels = config.batching.levels(batch);
        let rows = WordRows::of(levels);
        let bound_rows = match rows {
            WordRows::Distinct => WordRows::Unshared,
            rows => rows,
        };
        let bound = TreeBatch::of(picks.map(|&i| all[i]), bound_rows)?;
        let batches = |trees: &[HostTree]| {
            trees
                .chunks(batch)
                .map(|c| TreeBatch::of(c.iter(), rows))
                .collect::<Result<Vec<_>>>()
        };
        let counts = |trees: &[HostTree]| {
            let non_neutral = trees.iter().filter(|t| t.labels.last() != Some(&2)).count();
            [trees.len(), non_neutral, trees.iter().map(|t| t.labels.len()).sum()]
        };
        Ok(TreeSentiment {
            vocab: vocab.len(),
            unknown: [unknown(&bank.dev), unknown(&bank.test)],
            dev_counts: counts(&dev),
            test_counts: counts(&test),
            dev: batches(&dev)?,
            test: batches(&test)?,
            train,
            epoch: Vec::new(),
            bound,
            batch,
            levels,
        })
    }

    fn dev_batch(&self, first: usize) -> Result<&TreeBatch> {
        self.dev.get(first / self.batch.max(1)).ok_or_else(|| {
            Error::shape(
                "tree sentiment",
                format!(
                    "a development batch from one of the {} batches of {}, got one from tree {first}",
                    self.dev.len(),
                    self.batch
                ),
            )
        })
    }
}

impl Task for TreeSentiment {
    fn input(&self) -> Input {
        Input {
            example: Shape::new(&[self.vocab]),
            classes: CLASSES,
        }
    }

    fn train_len(&self) -> usize {
        self.train.len()
    }

    fn test_len(&self) -> usize {
        self.dev_counts[0]
    }

    /// The epoch's batch of the host's step, or the largest step before
    /// the first epoch (the dry run's).
    fn train_batch<'s>(&self, s: &mut Step<'s>, at: BatchAt, _length: usize) -> Result<(Batch<'s>, Labels<'s>)> {
        let batch = match self.epoch.is_empty() {
            true => &self.bound,
            false => self.epoch.get(at.step).ok_or_else(|| {
                Error::shape(
                    "tree sentiment",
                    format!("a step of the epoch's {}, got step {}", self.epoch.len(), at.step),
                )
            })?,
        };
        batch.input(s, self.levels)
    }

    fn test_batch<'s>(&self, s: &mut Step<'s>, indices: &[u32]) -> Result<(Batch<'s>, Option<Labels<'s>>)> {
        let first = indices.first().map_or(0, |&i| i as usize);
        let (batch, labels) = self.dev_batch(first)?.input(s, self.levels)?;
        Ok((batch, Some(labels)))
    }

    /// The cross-entropy summed over the nodes and averaged over the
    /// `over` trees: each of the `N` rows weighs `N / over` in a mean over
    /// `N`.
    fn loss<'s>(&self, s: &mut Step<'s>, output: Tensor<'s>, targets: Labels<'s>, over: usize) -> Result<Tensor<'s>> {
        let nodes = targets.len();
        let weight = nodes as f32 / over.max(1) as f32;
        let weights = s.input("node weights", Shape::new(&[nodes]), &vec![weight; nodes])?;
        let FloatBuf::F32(weights) = weights.buf() else {
            return Err(Error::shape("tree sentiment", "fp32 loss weights".into()));
        };
        let args = CrossEntropyArgs {
            weights: Some(weights),
            ..CrossEntropyArgs::default()
        };
        output.cross_entropy_over(s, targets, nodes, args)
    }

    /// The logits of the largest development or test batch's nodes.
    fn readback_len(&self, _examples: usize) -> usize {
        let most = self
            .dev
            .iter()
            .chain(&self.test)
            .map(|b| b.labels.len())
            .max()
            .unwrap_or(0);
        most * CLASSES
    }

    fn readback_at(&self, first: usize, _examples: usize) -> usize {
        self.dev_batch(first).map_or(0, |b| b.labels.len() * CLASSES)
    }

    /// The batch's roots right over five classes and by sign (neutral
    /// roots dropped: a root is called positive when classes 3 and 4 are
    /// likelier together than 0 and 1), and its nodes right.
    fn score(&self, outputs: &[f32], first: usize) -> Scores {
        let Ok(batch) = self.dev_batch(first) else {
            return [0.0; 3];
        };
        let rows: Vec<&[f32]> = outputs.chunks_exact(CLASSES).collect();
        let right = |k: usize| argmax(rows[k]) == batch.labels[k] as usize;
        let nodes = (0..rows.len().min(batch.labels.len())).filter(|&k| right(k)).count();
        let roots = batch.roots.iter().filter(|&&k| k < rows.len() && right(k)).count();
        let signs = batch
            .roots
            .iter()
            .filter(|&&k| k < rows.len() && batch.labels[k] != 2)
            .filter(|&&k| positive(rows[k]) == (batch.labels[k] > 2));
        [roots as f64, signs.count() as f64, nodes as f64]
    }

    fn metric(&self, sums: Scores, _examples: usize) -> Metric {
        let [trees, non_neutral, nodes] = self.dev_counts.map(|n| n.max(1) as f64);
        Metric::TreeAccuracy {
            root: sums[0] / trees,
            binary: sums[1] / non_neutral,
            nodes: sums[2] / nodes,
        }
    }

    fn dynamic(&self) -> bool {
        true
    }

    /// The test split's trees, scored as the development split's.
    fn use_test_split(&mut self) -> Result<Option<usize>> {
        if !self.test.is_empty() {
            self.dev = std::mem::take(&mut self.test);
            self.dev_counts = self.test_counts;
        }
        Ok(Some(self.dev_counts[0]))
    }

    fn describe(&self) -> Vec<String> {
        let [dev, test] = self.unknown;
        vec![
            format!(
                "vocabulary of {} words from the training trees (id 0 the unknown word: {dev} words of the development split, {test} of the test split)",
                self.vocab
            ),
            format!(
                "every step its own shape, run {} and bump-allocated; the arena is sized by the largest: {} trees of {} nodes, {} levels high",
                match self.levels {
                    true => "level by level",
                    false => "one node at a time",
                },
                self.bound.forest.len(),
                self.bound.forest.nodes(),
                self.bound.forest.height() + 1
            ),
        ]
    }

    /// Shuffles the training trees (seeded by the run and the epoch) and
    /// makes the epoch's batches.
    fn begin_epoch(&mut self, _engine: &mut Engine, seed: u64, epoch: usize) -> Result<()> {
        let mut order = vec![0u32; self.train.len()];
        shuffle_into(&mut order, seed, epoch as u64);
        self.epoch = order
            .chunks(self.batch)
            .map(|chunk| {
                TreeBatch::of(
                    chunk.iter().map(|&i| &self.train[i as usize]),
                    WordRows::of(self.levels),
                )
            })
            .collect::<Result<Vec<_>>>()?;
        Ok(())
    }
}

/// `words`' distinct words in the order they first appear, and each
/// word's row of them.
fn distinct_words(words: &[u32]) -> (Vec<u32>, Vec<u32>) {
    let mut row_of = std::collections::HashMap::with_capacity(words.len());
    let mut distinct = Vec::new();
    let rows = words
        .iter()
        .map(|&w| {
            *row_of.entry(w).or_insert_with(|| {
                distinct.push(w);
                distinct.len() as u32 - 1
            })
        })
        .collect();
    (distinct, rows)
}

/// Whether classes 3 and 4 are together likelier than 0 and 1 under
/// `row`'s softmax: its sums of `exp`, the normaliser cancelling.
fn positive(row: &[f32]) -> bool {
    let top = row.iter().fold(f32::NEG_INFINITY, |m, &v| m.max(v));
    let p = |c: usize| f64::from(row[c] - top).exp();
    p(3) + p(4) > p(0) + p(1)
}

#[cfg(test)]
#[path = "tree_sentiment_tests.rs"]
mod tests;
