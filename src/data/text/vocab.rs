//! Words to ids: a vocabulary built from a training split, with one id for
//! every word it has not seen.
//!
//! Invariants of a [`Vocab`]: id [`UNKNOWN`] (0) is the unknown word; ids
//! `1..len()` are the distinct words it was built from in ascending byte
//! order, so the same words always give the same ids, whatever order they
//! came in.

use std::collections::HashMap;

/// The id of every word outside the vocabulary.
pub const UNKNOWN: u32 = 0;

/// How the unknown word is shown.
pub const UNKNOWN_WORD: &str = "<unk>";

/// A vocabulary; see the module's invariants.
#[derive(Debug, Clone)]
pub struct Vocab {
    words: Vec<String>,
    ids: HashMap<String, u32>,
}

/// The vocabulary of no words: only the unknown one.
impl Default for Vocab {
    fn default() -> Self {
        Self::from_words([])
    }
}

impl Vocab {
    /// The vocabulary of `words` (repeats allowed). A word spelled like
    /// [`UNKNOWN_WORD`] is the unknown word, not a word of its own.
    pub fn from_words<'w>(words: impl IntoIterator<Item = &'w str>) -> Self {
        let mut distinct: Vec<&str> = words.into_iter().filter(|&w| w != UNKNOWN_WORD).collect();
        distinct.sort_unstable();
        distinct.dedup();
        let words: Vec<String> = std::iter::once(UNKNOWN_WORD)
            .chain(distinct)
            .map(str::to_string)
            .collect();
        let ids = words.iter().enumerate().map(|(id, w)| (w.clone(), id as u32)).collect();
        Vocab { words, ids }
    }

    /// Ids, the unknown word's among them.
    pub fn len(&self) -> usize {
        self.words.len()
    }

    /// Never: the unknown word is always there.
    pub fn is_empty(&self) -> bool {
        false
    }

    /// `word`'s id, or `None` if it is not in the vocabulary.
    pub fn id(&self, word: &str) -> Option<u32> {
        self.ids.get(word).copied()
    }

    /// `word`'s id, or [`UNKNOWN`].
    pub fn id_or_unknown(&self, word: &str) -> u32 {
        self.id(word).unwrap_or(UNKNOWN)
    }

    /// The word of `id`, if the vocabulary has one.
    pub fn word(&self, id: u32) -> Option<&str> {
        self.words.get(id as usize).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_sorted_distinct_words_after_the_unknown_one() {
        let vocab = Vocab::from_words("the cat saw the dog <unk>".split(' '));
        assert_eq!(vocab.len(), 5);
        let ids: Vec<Option<u32>> = ["<unk>", "cat", "dog", "saw", "the", "bird"]
            .map(|w| vocab.id(w))
            .to_vec();
        assert_eq!(ids, [Some(0), Some(1), Some(2), Some(3), Some(4), None]);
        assert_eq!(vocab.id_or_unknown("bird"), UNKNOWN);
        assert_eq!(
            (vocab.word(3), vocab.word(0), vocab.word(5)),
            (Some("saw"), Some("<unk>"), None)
        );
        // The order words come in does not matter.
        let shuffled = Vocab::from_words("dog the saw cat".split(' '));
        assert_eq!(shuffled.id("saw"), Some(3));
        let empty = Vocab::default();
        assert_eq!(
            (empty.len(), empty.word(UNKNOWN), empty.id("<unk>")),
            (1, Some("<unk>"), Some(UNKNOWN))
        );
    }
}
