//! Memory: the arena, its typed handles, and sizes.

mod arena;
mod buf;
mod size;

pub use arena::{suggest, Arena, ArenaError, ArenaStats, Persistent, Region, StepGraph};
pub use buf::{align_up, Buf, Element, ALIGN};
pub use size::{ByteSize, SizeParseError};
