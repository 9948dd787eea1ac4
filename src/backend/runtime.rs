//! The runtime: what belongs to the device once its arena memory exists —
//! the kernels and the stream (CUDA) or the worker threads (CPU), the
//! memory itself, collectives, convolution plans and their tuning, op
//! timing (`capabilities.rs`). The arena beside it keeps only offsets and
//! figures; autograd's engine pairs the two and runs steps on them.

use super::{Backend, BackendError, Device, DeviceKind, Workers};

/// One device with its arena's memory (see the module documentation).
pub struct Runtime {
    pub(super) backend: Backend,
}

impl Runtime {
    /// Makes the device's one allocation, `capacity` bytes (the arena's
    /// capacity: a multiple of its alignment).
    pub fn new(device: Device, capacity: usize) -> Result<Self, BackendError> {
        Ok(Self {
            backend: Backend::new(device, capacity)?,
        })
    }

    /// A runtime that has no memory and runs no kernel, shaped like
    /// `device` (its threads, its GPU's cuDNN workspace sizes): what a step
    /// that only plans runs on.
    pub fn planning(device: &Device) -> Self {
        Self {
            backend: Backend::dry_like(device),
        }
    }

    /// A planning runtime shaped like this one: it sizes as this device
    /// does, with this device's convolution choices.
    pub fn planning_twin(&self) -> Self {
        Self {
            backend: self.backend.dry_twin(),
        }
    }

    pub fn kind(&self) -> DeviceKind {
        self.backend.kind()
    }

    /// Worker threads kernels may use (sizes per-thread scratch).
    pub fn threads(&self) -> usize {
        self.backend.threads()
    }

    /// The device's workers; run a training loop through them (see [`Workers`]).
    pub fn workers(&self) -> Workers {
        self.backend.workers()
    }

    /// This device's rank in its data-parallel group, and the group's size
    /// (`(0, 1)` alone).
    pub fn world(&self) -> (usize, usize) {
        self.backend.world()
    }

    /// `(total, free)` device memory on a GPU; `None` on the CPU. Waits for
    /// queued work first.
    pub fn device_memory(&mut self) -> Result<Option<(usize, usize)>, BackendError> {
        self.backend.device_memory()
    }

    /// Free device memory as the driver reports it, on a GPU; `None` on the
    /// CPU. Waits for queued work first.
    pub fn device_free_bytes(&mut self) -> Result<Option<usize>, BackendError> {
        Ok(self.device_memory()?.map(|(_, free)| free))
    }

    /// The device ops' launch helper matches on (`ops/launch.rs`), and the
    /// step's and the persistent region's reads and writes go through.
    pub(crate) fn backend(&mut self) -> &mut Backend {
        &mut self.backend
    }
}
