//! Reverse-mode automatic differentiation whose gradients live in the step
//! region, and the step scope itself (`Arena::step`, in `scope.rs`): the
//! tape is autograd's, kept by the arena between steps as opaque host state.
//!
//! Ops record a small `Copy` node when the step records and an input wants a
//! gradient; `Step::backward` walks the nodes in reverse, each node asking
//! for its output's gradient and adding its inputs' gradients. Gradients of
//! tensors that need none are never computed (the input image, for one).

mod backward;
mod scope;
mod step;
mod tape;

pub use step::{Grads, Step, GRADIENT_SEED};
pub use tape::Candidate;
pub(crate) use tape::{Node, Recompute};

#[cfg(test)]
mod tests;
