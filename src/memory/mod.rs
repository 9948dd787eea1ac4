//! Memory: the arena, its typed handles, and sizes.
//!
//! Bytes and offsets only: the arena knows nothing of what runs on them (no
//! tape, no op, no data set), and reaches device capabilities (graphs,
//! timing, declared ranges) through methods of the backend, never by
//! matching on which backend it holds. [`Shape`] lives here because every
//! allocation is asked for by shape; [`crate::tensor`] re-exports it.

mod arena;
mod buf;
pub mod plan;
mod report;
mod shape;
mod size;

pub use arena::{suggest, Arena, ArenaError, ArenaStats, Persistent, PersistentBuf, Region, StepGraph, Touch};
pub use buf::{align_up, bf16, Buf, DType, Element, FloatBuf, Typed, ALIGN};
pub use plan::{PlannedBuf, StepPlan};
pub use report::{chain_mode, MemoryReport, Recomputed, RecomputedKind, RecomputedOutput, SearchReport, TypeBytes};
pub use shape::{Shape, MAX_RANK};
pub use size::{ByteSize, SizeParseError};
