//! Memory: the arena, its plans and reports.
//!
//! Bytes and offsets only: the arena knows nothing of what runs on them (no
//! tape, no op, no data set), and reaches device capabilities (graphs,
//! timing, declared ranges) through methods of the backend, never by
//! matching on which backend it holds. The handles it hands out and the
//! shapes it is asked for are the base layer's ([`crate::base`]),
//! re-exported here for the layers that allocate.

mod arena;
pub mod plan;
mod report;

pub use crate::base::{
    align_up, bf16, Buf, ByteSize, DType, Element, FloatBuf, Shape, SizeParseError, Typed, ALIGN, MAX_RANK,
};
pub use arena::{suggest, Arena, ArenaError, ArenaStats, Persistent, PersistentBuf, Region, StepGraph, Touch};
pub use plan::{PlannedBuf, StepPlan};
pub use report::{MemoryReport, Recomputed, RecomputedKind, TypeBytes};
