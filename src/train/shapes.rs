//! Step shapes: a session may step at several batch sizes and, for a
//! sequence task, at several lengths (a sentence-length bucket), each shape
//! with its own memory plans (and, on a GPU, its own captured graph), all
//! inside the one arena, which is sized for the largest. A plan is found by
//! its key, a number the arena keeps: a step's kind plus four times the
//! place of its shape, the shape's place being its batch's place times the
//! number of lengths plus its length's place. A session of one batch size
//! and no lengths keys its plans 1 to 4 as [`StepKind`] numbers them, and
//! one of several batch sizes as before lengths existed.
//!
//! The shapes are fixed when the session is made (the batch sizes by the
//! run's settings, the lengths by its task), so keying a step allocates
//! nothing.

/// The kinds of step a session runs; each has its own memory plan, since
/// each allocates its own sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    /// A full training step.
    Train = 1,
    /// The last training batch of an epoch, when it is shorter.
    TrainLast = 2,
    /// A full evaluation step.
    Eval = 3,
    /// The last evaluation batch, when it is shorter.
    EvalLast = 4,
}

/// Kinds of step per shape: the stride of the keys.
const KINDS: u32 = 4;

impl StepKind {
    /// What a plan of arena key `key` is, for people.
    pub fn name(key: u32) -> &'static str {
        match key.checked_sub(1).map(|k| k % KINDS + 1) {
            Some(1) => "training step",
            Some(2) => "last, shorter training step",
            Some(3) => "evaluation step",
            Some(4) => "last, shorter evaluation step",
            _ => "step",
        }
    }
}

/// A step's shape: its kind, the batch size of the epoch it is in (a
/// last, shorter step belongs to its epoch's batch), and its length (0
/// for a task whose steps have no length of their own).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepShape {
    pub kind: StepKind,
    pub batch: usize,
    pub length: usize,
}

/// The batch sizes a session steps at, the first its own, and the lengths
/// its task steps at; fixed when the session is made, so keying a step
/// allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shapes {
    batches: Vec<usize>,
    /// Empty when the task's steps have no length (images, windows of one
    /// length): then every step's length is 0.
    lengths: Vec<usize>,
}

impl Shapes {
    /// `first`, then each of `others` not already listed; no lengths.
    pub fn new(first: usize, others: &[usize]) -> Self {
        let mut batches = vec![first];
        for &b in others {
            if !batches.contains(&b) {
                batches.push(b);
            }
        }
        Self {
            batches,
            lengths: Vec::new(),
        }
    }

    /// The same batch sizes at each of `lengths` (repeats and zeros
    /// dropped, the order kept).
    pub fn with_lengths(mut self, lengths: &[usize]) -> Self {
        self.lengths.clear();
        for &n in lengths {
            if n > 0 && !self.lengths.contains(&n) {
                self.lengths.push(n);
            }
        }
        self
    }

    pub fn batches(&self) -> &[usize] {
        &self.batches
    }

    /// The lengths steps take; empty when they have none.
    pub fn lengths(&self) -> &[usize] {
        &self.lengths
    }

    /// Where `batch` is among the batch sizes, if it is one.
    pub fn place(&self, batch: usize) -> Option<usize> {
        self.batches.iter().position(|&b| b == batch)
    }

    /// Lengths per batch size: at least 1 (the one length 0 of a task
    /// without lengths).
    fn per_batch(&self) -> usize {
        self.lengths.len().max(1)
    }

    /// How many shapes there are: each has its own plans and graph.
    pub fn count(&self) -> usize {
        self.batches.len() * self.per_batch()
    }

    /// The place of the shape (`batch`, `length`) among all of them, in
    /// `0..count()`, if both are the session's.
    pub fn slot(&self, batch: usize, length: usize) -> Option<usize> {
        let length = match self.lengths.is_empty() {
            true => (length == 0).then_some(0)?,
            false => self.lengths.iter().position(|&n| n == length)?,
        };
        Some(self.place(batch)? * self.per_batch() + length)
    }

    /// The arena key of the plan of `shape`, if its batch and length are
    /// these shapes'.
    pub fn key(&self, shape: StepShape) -> Option<u32> {
        let slot = self.slot(shape.batch, shape.length)? as u32;
        Some(shape.kind as u32 + KINDS * slot)
    }

    /// The length of the shape a plan of arena key `key` is for (0 where
    /// steps have no length), if the key is one of these shapes'.
    pub fn length_of_key(&self, key: u32) -> Option<usize> {
        let slot = (key.checked_sub(1)? / KINDS) as usize;
        if slot >= self.count() {
            return None;
        }
        Some(self.lengths.get(slot % self.per_batch()).copied().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_batch_size_keys_its_plans_as_the_kinds_are_numbered_and_others_follow() {
        let shapes = Shapes::new(100, &[50, 100, 25]);
        assert_eq!(shapes.batches(), [100, 50, 25]);
        let key = |kind, batch| shapes.key(StepShape { kind, batch, length: 0 });
        assert_eq!(key(StepKind::Train, 100), Some(1));
        assert_eq!(key(StepKind::EvalLast, 100), Some(4));
        assert_eq!(key(StepKind::Train, 50), Some(5));
        assert_eq!(key(StepKind::Eval, 25), Some(11));
        assert_eq!(key(StepKind::Train, 70), None);
        assert_eq!(
            shapes.key(StepShape {
                kind: StepKind::Train,
                batch: 100,
                length: 3
            }),
            None
        );
        assert_eq!(StepKind::name(5), "training step");
        assert_eq!(StepKind::name(8), "last, shorter evaluation step");
        assert_eq!(StepKind::name(0), "step");
        assert_eq!(shapes.count(), 3);
    }

    #[test]
    fn lengths_key_a_plan_per_batch_and_length_and_say_which() {
        let shapes = Shapes::new(25, &[10]).with_lengths(&[7, 0, 19, 7, 56]);
        assert_eq!(shapes.lengths(), [7, 19, 56]);
        assert_eq!(shapes.count(), 6);
        let key = |kind, batch, length| shapes.key(StepShape { kind, batch, length });
        // Batch 25 at lengths 7, 19, 56; then batch 10 at each.
        assert_eq!(key(StepKind::Train, 25, 7), Some(1));
        assert_eq!(key(StepKind::Eval, 25, 19), Some(7));
        assert_eq!(key(StepKind::Train, 25, 56), Some(9));
        assert_eq!(key(StepKind::Train, 10, 7), Some(13));
        assert_eq!(key(StepKind::Eval, 10, 56), Some(23));
        assert_eq!(key(StepKind::Train, 25, 8), None);
        assert_eq!(key(StepKind::Train, 25, 0), None, "a task with lengths has no length 0");
        let keys: Vec<u32> = [7, 19, 56]
            .iter()
            .flat_map(|&n| [StepKind::Train, StepKind::Eval].map(|k| key(k, 25, n).unwrap()))
            .collect();
        let mut distinct = keys.clone();
        distinct.sort_unstable();
        distinct.dedup();
        assert_eq!(distinct.len(), keys.len(), "every (kind, length) has its own key");
        assert_eq!(
            [1, 7, 9, 13, 23].map(|k| shapes.length_of_key(k)),
            [Some(7), Some(19), Some(56), Some(7), Some(56)]
        );
        assert_eq!(shapes.length_of_key(25), None);
        assert_eq!(Shapes::new(4, &[]).length_of_key(3), Some(0));
    }
}
