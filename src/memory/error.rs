//! What can go wrong in an arena, said with the sizes that would have
//! worked.

use super::Region;
use crate::base::{ByteSize, Shape};

/// What the arena refuses, with the sizes that would have worked.
#[derive(Debug, thiserror::Error)]
pub enum ArenaError {
    /// The arena cannot hold an allocation. `would_fit` is the capacity that
    /// would have held everything allocated so far plus this request; the
    /// trainer replaces it with the exact size a whole step needs.
    #[error(
        "arena exhausted: {what} {shape} needs {} in the {region} region, but {} of the arena's {} are in use{}; an arena of {} would fit",
        ByteSize(*.requested), ByteSize(*.in_use), ByteSize(*.capacity), largest(live), ByteSize(*.would_fit)
    )]
    Exhausted {
        /// The region asked of.
        region: Region,
        /// What the allocation is for.
        what: &'static str,
        /// Its shape.
        shape: Shape,
        /// Its bytes, aligned.
        requested: usize,
        /// Bytes in use when it was asked.
        in_use: usize,
        /// The arena's bytes.
        capacity: usize,
        /// An arena that would have held it.
        would_fit: usize,
        /// The largest step buffers alive at that point, largest first.
        live: Vec<(&'static str, usize)>,
    },
    /// A planned step does not fit above the persistent region.
    #[error(
        "arena exhausted: a step needs {} above the persistent region's {}, but the arena holds {}{}; an arena of {} would fit",
        ByteSize(*.step_bytes), ByteSize(*.persistent_bytes), ByteSize(*.capacity), largest(live), ByteSize(*.would_fit)
    )]
    StepTooLarge {
        /// The step's planned peak.
        step_bytes: usize,
        /// The persistent region below it.
        persistent_bytes: usize,
        /// The arena's bytes.
        capacity: usize,
        /// An arena that would have held it.
        would_fit: usize,
        /// The largest buffers alive at the step's peak.
        live: Vec<(&'static str, usize)>,
    },
    /// A step graph replayed where its addresses no longer hold.
    #[error("a step graph was replayed on another arena, or after the persistent region grew; capture it again")]
    StaleGraph,
    /// A read or write between steps of bytes the persistent region does
    /// not hold.
    #[error("internal error: a persistent-region access outside the persistent region")]
    OutsidePersistent,
}

fn largest(live: &[(&'static str, usize)]) -> String {
    if live.is_empty() {
        return String::new();
    }
    let list: Vec<String> = live.iter().map(|(w, b)| format!("{w} {}", ByteSize(*b))).collect();
    format!(" (the largest live step buffers: {})", list.join(", "))
}

/// A `--arena-size` value that is at least `bytes`, rounded up to a MiB.
pub fn suggest(bytes: usize) -> String {
    format!("{}MiB", bytes.div_ceil(1 << 20).max(1))
}
