//! Step shapes: a session may step at several batch sizes, each with its
//! own memory plans (and, on a GPU, its own captured graph), all inside the
//! one arena, which is sized for the largest. A plan is found by its key,
//! a number the arena keeps: a step's kind plus four times the place of its
//! batch among the session's batch sizes, so a session of one batch size
//! keys its plans 1 to 4 as [`StepKind`] numbers them.
//!
//! The batch is the shape a fixed-shape network has to vary; a sequence
//! model adds the length of its bucket to the shape, and a key per
//! (kind, batch, length) in the same way.

/// The kinds of step a session runs; each has its own memory plan, since
/// each allocates its own sequence.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StepKind {
    Train = 1,
    /// The last training batch of an epoch, when it is shorter.
    TrainLast = 2,
    Eval = 3,
    EvalLast = 4,
}

/// Kinds of step per batch size: the stride of the keys.
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

/// A step's shape: its kind, and the batch size of the epoch it is in (a
/// last, shorter step belongs to its epoch's batch).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepShape {
    pub kind: StepKind,
    pub batch: usize,
}

/// The batch sizes a session steps at, the first its own; fixed when the
/// session is made, so keying a step allocates nothing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shapes {
    batches: Vec<usize>,
}

impl Shapes {
    /// `first`, then each of `others` not already listed.
    pub fn new(first: usize, others: &[usize]) -> Self {
        let mut batches = vec![first];
        for &b in others {
            if !batches.contains(&b) {
                batches.push(b);
            }
        }
        Self { batches }
    }

    pub fn batches(&self) -> &[usize] {
        &self.batches
    }

    /// Where `batch` is among the batch sizes, if it is one.
    pub fn place(&self, batch: usize) -> Option<usize> {
        self.batches.iter().position(|&b| b == batch)
    }

    /// The arena key of the plan of `shape`, if its batch is one of these.
    pub fn key(&self, shape: StepShape) -> Option<u32> {
        let place = self.place(shape.batch)? as u32;
        Some(shape.kind as u32 + KINDS * place)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_batch_size_keys_its_plans_as_the_kinds_are_numbered_and_others_follow() {
        let shapes = Shapes::new(100, &[50, 100, 25]);
        assert_eq!(shapes.batches(), [100, 50, 25]);
        let key = |kind, batch| shapes.key(StepShape { kind, batch });
        assert_eq!(key(StepKind::Train, 100), Some(1));
        assert_eq!(key(StepKind::EvalLast, 100), Some(4));
        assert_eq!(key(StepKind::Train, 50), Some(5));
        assert_eq!(key(StepKind::Eval, 25), Some(11));
        assert_eq!(key(StepKind::Train, 70), None);
        assert_eq!(StepKind::name(5), "training step");
        assert_eq!(StepKind::name(8), "last, shorter evaluation step");
        assert_eq!(StepKind::name(0), "step");
    }
}
