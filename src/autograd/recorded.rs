//! What the tape holds, as autograd sees it: a node an op recorded, and a
//! recipe for making a tensor again in backward. The op registry (the
//! `registry!` lines of `ops/mod.rs`) makes one enum of each from its lines
//! and implements [`Recorded`] for them; autograd stores, replays and
//! recomputes through the trait and names no op.
//!
//! A step is generic over its node set ([`super::Step`]`<'s, N>`) rather
//! than holding boxed trait objects: a node is a small `Copy` value pushed
//! into a vector that keeps its capacity (no heap allocation per node), and
//! backward's dispatch is a `match` the compiler sees whole, as it was when
//! the tape named every op.

use super::Step;
use crate::memory::FloatBuf;
use crate::Result;
use std::fmt::Debug;

/// A tape's node set: one value per recorded op, with what its backward
/// needs.
pub trait Recorded: Copy + Debug + Send + 'static {
    /// How backward makes a dropped tensor again (see `Step::saved`).
    type Recipe: Copy + Debug + Send + 'static;

    /// Runs the recorded op's backward: reads its output's gradient and
    /// adds its inputs'.
    fn backward(self, s: &mut Step<'_, Self>) -> Result<()>;

    /// The tensors (by id) `recipe` reads through `Step::saved`.
    fn reads(recipe: &Self::Recipe) -> [Option<u32>; 2];

    /// Makes `recipe`'s tensor again, into a new step buffer.
    fn recompute(recipe: Self::Recipe, s: &mut Step<'_, Self>) -> Result<FloatBuf>;
}
