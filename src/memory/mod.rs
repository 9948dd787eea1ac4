//! Memory: the arena, its plans and reports.
//!
//! Bytes and offsets only: the arena knows nothing of what runs on them (no
//! tape, no op, no data set, no device). It holds no memory either: the
//! runtime owns the device's one allocation and writes it, and autograd's
//! engine pairs the two. The handles it hands out and the shapes it is
//! asked for are the base layer's ([`crate::base`]), re-exported here for
//! the layers that allocate.
//!
//! - `arena.rs`: the regions, the mark, a step's begin and end, the
//!   statistics, the persistent log;
//! - `placement.rs`: where a step buffer goes (its plan's offset, or
//!   bumped) and the trace plans are made from;
//! - `plan.rs`: liveness plans; `report.rs`: the memory report;
//!   `error.rs`: exhaustion, with the size that would fit.

mod arena;
mod error;
mod placement;
pub(crate) mod plan;
mod report;

pub use crate::base::{
    align_up, bf16, Buf, ByteSize, DType, Element, FloatBuf, Shape, SizeParseError, Typed, ALIGN, MAX_RANK,
};
pub use arena::{Arena, ArenaStats, PersistentBuf, Region, POISON};
pub(crate) use arena::{StepFootprint, Touch};
pub use error::{suggest, ArenaError};
pub use plan::{Lifetime, PlannedBuf, StepPlan};
pub use report::{
    chain_mode, DynamicSteps, LeanSearch, MemoryReport, RecomputeReason, Recomputed, RecomputedKind, RecomputedOutput,
    SearchReport, TypeBytes,
};
