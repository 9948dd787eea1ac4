//! Whether a step runs or only plans.

/// Whether a step runs its kernels or only plans: said by whoever
/// assembles the step (autograd's engine, made to run or to plan), never
/// guessed from the device under it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Kernels run; persistent buffers hold values.
    Run,
    /// Nothing runs and nothing is stored: allocations are measured and
    /// traced into plans, and what only planning needs (the sources of the
    /// candidates for recomputation) is worked out.
    Plan,
}
