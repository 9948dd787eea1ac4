//! Reverse-mode automatic differentiation whose gradients live in the step
//! region, and where steps run ([`Engine`], `engine.rs`; captured as graphs
//! in `capture.rs`): a runtime, an arena and the tape their steps record
//! on, kept between steps typed by the node set.
//!
//! Ops record a small `Copy` node when the step records and an input wants a
//! gradient; `Step::backward` walks the nodes in reverse, each node asking
//! for its output's gradient and adding its inputs' gradients. Gradients of
//! tensors that need none are never computed (the input image, for one).
//!
//! Autograd names no op: a step is generic over its node set, which the op
//! registry gives it ([`Recorded`], implemented by the enums `ops/mod.rs`
//! generates), and backward and recomputation dispatch through that trait.

mod capture;
mod engine;
mod recorded;
mod step;
mod tape;

pub use capture::StepGraph;
pub use engine::Engine;
pub use recorded::Recorded;
pub(crate) use step::GRADIENT_SEED;
pub use step::{Grads, Step};
pub(crate) use tape::Candidate;
