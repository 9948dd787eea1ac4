//! Labelled sentences for sequence classification: each tree's words in
//! order as vocabulary ids, labelled by its root.
//!
//! Invariants:
//! - a [`Sentences`] keeps its trees' order (those [`Classes`] drops left
//!   out) and knows which tree each sentence came from, for models that read
//!   the tree;
//! - a [`SentimentSet`]'s vocabulary is drawn from the training sentences it
//!   keeps, so only the development and test splits have unknown words.

use super::tree::Tree;
use super::treebank::Treebank;
use super::vocab::{Vocab, UNKNOWN};
use super::TextError;

/// How many sentiment classes a sentence is sorted into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Classes {
    /// The root's label, 0–4.
    Five,
    /// Negative (0–1) as 0, positive (3–4) as 1; neutral (2) roots dropped,
    /// as the binary task of the literature does.
    Two,
}

impl Classes {
    /// The classes for a count of 5 or 2.
    pub fn from_count(count: usize) -> Result<Self, TextError> {
        match count {
            5 => Ok(Classes::Five),
            2 => Ok(Classes::Two),
            given => Err(TextError::Classes { given }),
        }
    }

    /// How many classes: 5 or 2.
    pub fn count(self) -> usize {
        match self {
            Classes::Five => 5,
            Classes::Two => 2,
        }
    }

    /// A sentence's class from its root's label, or `None` if it is dropped.
    pub fn of(self, root: u8) -> Option<u8> {
        match (self, root) {
            (Classes::Five, label) => Some(label),
            (Classes::Two, 0 | 1) => Some(0),
            (Classes::Two, 3 | 4) => Some(1),
            (Classes::Two, _) => None,
        }
    }
}

/// One split's sentences: their ids back to back, each one's class, and
/// how many of their words the vocabulary did not know.
#[derive(Debug, Clone, Default)]
pub struct Sentences {
    tokens: Vec<u32>,
    /// Sentence `i` is `tokens[starts[i]..starts[i + 1]]`.
    starts: Vec<usize>,
    labels: Vec<u8>,
    trees: Vec<u32>,
    unknown: usize,
}

impl Sentences {
    /// The sentences of `trees` that `classes` keeps, their words mapped by
    /// `vocab`.
    pub fn new(trees: &[Tree], classes: Classes, vocab: &Vocab) -> Self {
        let mut out = Sentences {
            starts: vec![0],
            ..Sentences::default()
        };
        for (index, tree) in trees.iter().enumerate() {
            let Some(label) = classes.of(tree.label()) else {
                continue;
            };
            for word in tree.words() {
                let id = vocab.id_or_unknown(word);
                out.unknown += usize::from(id == UNKNOWN);
                out.tokens.push(id);
            }
            out.starts.push(out.tokens.len());
            out.labels.push(label);
            out.trees.push(index as u32);
        }
        out
    }

    /// How many sentences.
    pub fn len(&self) -> usize {
        self.labels.len()
    }

    /// Whether there are no sentences.
    pub fn is_empty(&self) -> bool {
        self.labels.is_empty()
    }

    /// Sentence `i`'s ids.
    pub fn tokens(&self, i: usize) -> &[u32] {
        &self.tokens[self.starts[i]..self.starts[i + 1]]
    }

    /// Sentence `i`'s length in words.
    pub fn length(&self, i: usize) -> usize {
        self.starts[i + 1] - self.starts[i]
    }

    /// Every sentence's length, in order.
    pub fn lengths(&self) -> impl ExactSizeIterator<Item = usize> + '_ {
        self.starts.windows(2).map(|w| w[1] - w[0])
    }

    /// Sentence `i`'s class.
    pub fn label(&self, i: usize) -> u8 {
        self.labels[i]
    }

    /// Every sentence's class, in order.
    pub fn labels(&self) -> &[u8] {
        &self.labels
    }

    /// The index, in the split's trees, of sentence `i`'s tree.
    pub fn tree(&self, i: usize) -> usize {
        self.trees[i] as usize
    }

    /// Words in all the sentences.
    pub fn words(&self) -> usize {
        self.tokens.len()
    }

    /// Words the vocabulary did not know, now [`UNKNOWN`].
    pub fn unknown(&self) -> usize {
        self.unknown
    }
}

/// SST as sentences to classify: the training split's vocabulary and the
/// three splits' sentences.
#[derive(Debug, Clone)]
pub struct SentimentSet {
    /// Five classes, or two with the neutral sentences dropped.
    pub classes: Classes,
    /// The training split's words, to ids.
    pub vocab: Vocab,
    /// The training sentences.
    pub train: Sentences,
    /// The development sentences, what a run validates on.
    pub dev: Sentences,
    /// The test sentences.
    pub test: Sentences,
}

impl SentimentSet {
    /// The sentences of `bank` in `classes`, over the vocabulary of the
    /// training sentences kept.
    pub fn new(bank: &Treebank, classes: Classes) -> Self {
        let kept = bank.train.iter().filter(|t| classes.of(t.label()).is_some());
        let vocab = Vocab::from_words(kept.flat_map(|t| t.words()).map(String::as_str));
        SentimentSet {
            classes,
            train: Sentences::new(&bank.train, classes, &vocab),
            dev: Sentences::new(&bank.dev, classes, &vocab),
            test: Sentences::new(&bank.test, classes, &vocab),
            vocab,
        }
    }

    /// The longest sentence of any split, in words.
    pub fn longest(&self) -> usize {
        [&self.train, &self.dev, &self.test]
            .iter()
            .flat_map(|s| s.lengths())
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::text::shipped;
    use std::sync::OnceLock;

    fn bank() -> &'static Treebank {
        static BANK: OnceLock<Treebank> = OnceLock::new();
        BANK.get_or_init(|| Treebank::load(&shipped::sst()).unwrap())
    }

    fn sizes(set: &SentimentSet) -> [usize; 3] {
        [set.train.len(), set.dev.len(), set.test.len()]
    }

    fn histogram(labels: &[u8], classes: usize) -> Vec<usize> {
        (0..classes as u8)
            .map(|c| labels.iter().filter(|&&l| l == c).count())
            .collect()
    }

    #[test]
    fn classes_map_root_labels() {
        let two: Vec<Option<u8>> = (0..5).map(|l| Classes::Two.of(l)).collect();
        assert_eq!(two, [Some(0), Some(0), None, Some(1), Some(1)]);
        assert!((0..5).all(|l| Classes::Five.of(l) == Some(l)));
        assert_eq!(Classes::from_count(2).unwrap(), Classes::Two);
        assert_eq!(Classes::from_count(5).unwrap().count(), 5);
        assert!(matches!(Classes::from_count(3), Err(TextError::Classes { given: 3 })));
    }

    #[test]
    fn five_classes_keep_every_sentence() {
        let set = SentimentSet::new(bank(), Classes::Five);
        assert_eq!(sizes(&set), [8_544, 1_101, 2_210]);
        // SST's published root-label counts.
        assert_eq!(histogram(set.train.labels(), 5), [1_092, 2_218, 1_624, 2_322, 1_288]);
        assert_eq!(histogram(set.test.labels(), 5), [279, 633, 389, 510, 399]);
        assert_eq!(set.train.unknown(), 0);
        assert_eq!(set.longest(), 56);
        // The first sentence, through the vocabulary and back.
        let words: Vec<&str> = set
            .train
            .tokens(0)
            .iter()
            .filter_map(|&id| set.vocab.word(id))
            .collect();
        assert_eq!(words, bank().train[0].words());
        assert_eq!(set.train.length(0), words.len());
    }

    #[test]
    fn two_classes_drop_neutral_roots() {
        let set = SentimentSet::new(bank(), Classes::Two);
        assert_eq!(sizes(&set), [6_920, 872, 1_821]);
        assert_eq!(histogram(set.train.labels(), 2), [3_310, 3_610]);
        assert_eq!(histogram(set.dev.labels(), 2), [428, 444]);
        assert_eq!(histogram(set.test.labels(), 2), [912, 909]);
        // Each kept sentence points back at its tree, whose root is not neutral.
        for i in 0..set.dev.len() {
            let tree = &bank().dev[set.dev.tree(i)];
            assert_eq!(Classes::Two.of(tree.label()), Some(set.dev.label(i)));
            assert_eq!(tree.words().len(), set.dev.length(i));
        }
    }

    #[test]
    fn unknown_words_are_counted() {
        let set = SentimentSet::new(bank(), Classes::Five);
        for split in [&set.dev, &set.test] {
            let zeros = (0..split.len())
                .flat_map(|i| split.tokens(i))
                .filter(|&&id| id == UNKNOWN)
                .count();
            assert_eq!(split.unknown(), zeros);
            assert!(
                split.unknown() > 0 && split.unknown() < split.words() / 10,
                "{}",
                split.unknown()
            );
        }
        let one = Tree::parse("(3 (2 good) (2 gravy))").unwrap();
        let vocab = Vocab::from_words(["good"]);
        let sentences = Sentences::new(&[one], Classes::Five, &vocab);
        assert_eq!((sentences.tokens(0), sentences.unknown()), (&[1, UNKNOWN][..], 1));
    }
}
