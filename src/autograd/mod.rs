//! Reverse-mode automatic differentiation whose tape lives beside the arena
//! and whose gradients live in the step region.
//!
//! Ops record a small `Copy` node when the step records and an input wants a
//! gradient; `Step::backward` walks the nodes in reverse, each node asking
//! for its output's gradient and adding its inputs' gradients. Gradients of
//! tensors that need none are never computed (the input image, for one).

mod backward;
mod step;
mod tape;

pub use step::{Grads, Step};
pub(crate) use tape::Node;
pub use tape::Tape;

#[cfg(test)]
mod tests;
