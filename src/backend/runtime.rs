//! The runtime: what belongs to the device once its arena memory exists —
//! the kernels and the stream (CUDA) or the worker threads (CPU), the
//! memory itself, collectives, convolution plans and their tuning, op
//! timing (`capabilities.rs`). The arena beside it keeps only offsets and
//! figures; autograd's engine pairs the two and runs steps on them.

use super::{Backend, BackendError, Device, DeviceKind, Policy, Workers};

/// One device with its arena's memory (see the module documentation).
pub struct Runtime {
    pub(super) backend: Backend,
    /// How steps on it compute, from the device's at first; each step is
    /// handed a copy when it is assembled.
    policy: Policy,
}

impl Runtime {
    /// Makes the device's one allocation, `capacity` bytes (the arena's
    /// capacity: a multiple of its alignment).
    pub fn new(device: Device, capacity: usize) -> Result<Self, BackendError> {
        let policy = device.policy();
        Ok(Self {
            backend: Backend::new(device, capacity)?,
            policy,
        })
    }

    /// A runtime that has no memory and runs no kernel, shaped like
    /// `device` (its threads, its GPU's cuDNN workspace sizes): what a step
    /// that only plans runs on.
    pub fn planning(device: &Device) -> Self {
        Self {
            backend: Backend::dry_like(device),
            policy: device.policy(),
        }
    }

    /// A planning runtime shaped like this one: it sizes as this device
    /// does, with this device's convolution choices.
    pub(crate) fn planning_twin(&self) -> Self {
        Self {
            backend: self.backend.dry_twin(),
            policy: self.policy,
        }
    }

    /// How steps on this runtime compute (see [`Policy`]).
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// Changes how the steps from now on compute, or refuses a policy the
    /// device cannot follow (TF32 or bf16 on the CPU). Convolution plans are
    /// kept per policy, so a later step under another policy plans its
    /// own.
    pub fn set_policy(&mut self, policy: Policy) -> Result<(), BackendError> {
        let kind = match self.backend.sizing() {
            super::Sizing::Cpu { .. } => DeviceKind::Cpu,
            super::Sizing::Cuda(_) => DeviceKind::Cuda,
        };
        policy.check(kind)?;
        self.policy = policy;
        Ok(())
    }

    /// Which kind of backend it runs on.
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
    pub(crate) fn device_memory(&mut self) -> Result<Option<(usize, usize)>, BackendError> {
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
