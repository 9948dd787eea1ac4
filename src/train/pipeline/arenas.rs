//! Where the pipeline's arenas are made: the run's own, once, when its
//! size is known; and the dry ones each candidate step is measured on. No
//! other file of `train` makes an arena, so when the device's runtime is
//! split from the arena it lands here.

use crate::backend::Device;
use crate::memory::Arena;
use crate::Result;

/// The convolution algorithms a dry run plans with: those the device
/// chooses by its heuristic, or those an arena's device timed.
#[derive(Clone, Copy)]
pub(crate) enum Algorithms<'a> {
    Heuristic(&'a Device),
    TimedOn(&'a Arena),
}

impl Algorithms<'_> {
    /// A dry arena planning with these algorithms, of `capacity` bytes
    /// (`None`: unbounded; a timed arena's twin is always unbounded).
    pub(crate) fn dry(&self, capacity: Option<usize>) -> Arena {
        match self {
            Self::Heuristic(device) => Arena::dry(device, capacity),
            Self::TimedOn(arena) => arena.dry_twin(),
        }
    }
}

/// The run's one allocation on `device`.
pub(crate) fn real(device: Device, capacity: usize) -> Result<Arena> {
    #[cfg(test)]
    REAL_ARENAS.with(|n| n.set(n.get() + 1));
    Ok(Arena::new(device, capacity)?)
}

#[cfg(test)]
thread_local! {
    /// The real arenas this thread has made: the tests' way to see that a
    /// refusal comes before any allocation.
    pub(super) static REAL_ARENAS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}
