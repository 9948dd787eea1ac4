//! Where the pipeline's engines are made: the run's own, once, when its
//! arena's size is known (the device's one allocation, by its runtime); and
//! the planning ones each candidate step is measured on. No other file of
//! `train` makes an engine.

use crate::backend::Device;
use crate::Engine;
use crate::Result;

/// The convolution algorithms a dry run plans with: those the device
/// chooses by its heuristic, or those an engine's runtime timed.
#[derive(Clone, Copy)]
pub(crate) enum Algorithms<'a> {
    Heuristic(&'a Device),
    TimedOn(&'a Engine),
}

impl Algorithms<'_> {
    /// An engine planning with these algorithms, in an arena of `capacity`
    /// bytes (`None`: unbounded; a timed engine's twin is always unbounded).
    pub(crate) fn dry(&self, capacity: Option<usize>) -> Engine {
        match self {
            Self::Heuristic(device) => Engine::planning(device, capacity),
            Self::TimedOn(engine) => engine.planning_twin(),
        }
    }
}

/// The run's one allocation on `device`.
pub(crate) fn real(device: Device, capacity: usize) -> Result<Engine> {
    #[cfg(test)]
    REAL_ARENAS.with(|n| n.set(n.get() + 1));
    Engine::new(device, capacity)
}

#[cfg(test)]
thread_local! {
    /// The real arenas this thread has made: the tests' way to see that a
    /// refusal comes before any allocation.
    pub(super) static REAL_ARENAS: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}
