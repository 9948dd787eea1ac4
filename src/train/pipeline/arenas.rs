//! Where the pipeline's arenas are made: the run's own, once, when its
//! size is known; and the dry ones each candidate step is measured on. No
//! other file of `train` makes an arena, so when the device's runtime is
//! split from the arena it lands here.

use crate::backend::Device;
use crate::Engine;
use crate::Result;

/// The convolution algorithms a dry run plans with: those the device
/// chooses by its heuristic, or those an arena's device timed.
#[derive(Clone, Copy)]
pub(crate) enum Algorithms<'a> {
    Heuristic(&'a Device),
    TimedOn(&'a Engine),
}

impl Algorithms<'_> {
    /// A dry arena planning with these algorithms, of `capacity` bytes
    /// (`None`: unbounded; a timed arena's twin is always unbounded).
    pub(crate) fn dry(&self, capacity: Option<usize>) -> Engine {
        match self {
            Self::Heuristic(device) => Engine::planning(device, capacity),
            Self::TimedOn(engine) => engine.planning_twin(),
        }
    }
}

/// The run's one allocation on `device`.
pub(crate) fn real(device: Device, capacity: usize) -> Result<Engine> {
    Ok(Engine::new(device, capacity)?)
}
