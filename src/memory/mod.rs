//! Memory: the arena, its typed handles, and sizes.

mod arena;
mod buf;
pub mod plan;
mod report;
mod size;

pub use arena::{suggest, Arena, ArenaError, ArenaStats, Persistent, PersistentBuf, Region, StepGraph, Touch};
pub use buf::{align_up, Buf, Element, ALIGN};
pub use plan::{PlannedBuf, StepPlan};
pub use report::MemoryReport;
pub use size::{ByteSize, SizeParseError};
