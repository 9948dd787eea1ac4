//! What some devices can do and others cannot: record a step as a graph and
//! replay it, count the work queued, time each op, check the ranges an op
//! declared. Each capability is a method that answers on every backend (a
//! typed refusal, `None` or `false` where the device lacks it), so the arena
//! uses them without knowing which backend it holds.

use super::cuda::{CapturedGraph, OpTime};
use super::{Backend, BackendError};

impl Backend {
    /// Starts recording the device's work as a graph instead of running it.
    pub(crate) fn begin_capture(&mut self) -> Result<(), BackendError> {
        match self {
            Self::Cuda(gpu) => gpu.begin_capture(),
            Self::Cpu(_) | Self::Dry(_) => Err(self.needs_cuda("whole-step graphs")),
        }
    }

    /// Ends the recording begun by [`Backend::begin_capture`] and
    /// instantiates the graph.
    pub(crate) fn end_capture(&mut self) -> Result<CapturedGraph, BackendError> {
        match self {
            Self::Cuda(gpu) => gpu.end_capture(),
            Self::Cpu(_) | Self::Dry(_) => Err(self.needs_cuda("whole-step graphs")),
        }
    }

    /// Queues one replay of a captured graph.
    pub(crate) fn replay(&mut self, graph: &CapturedGraph) -> Result<(), BackendError> {
        match self {
            Self::Cuda(gpu) => gpu.replay(graph),
            Self::Cpu(_) | Self::Dry(_) => Err(self.needs_cuda("whole-step graphs")),
        }
    }

    /// Work items queued so far (kernels, library calls, copies, graph
    /// launches) on a device that queues work; `None` on one that runs each
    /// kernel as it is called.
    pub fn ops_queued(&self) -> Option<u64> {
        match self {
            Self::Cuda(gpu) => Some(gpu.ops_queued()),
            Self::Cpu(_) | Self::Dry(_) => None,
        }
    }

    /// The CUDA calls made so far on the GPU, by kind; `None` off the GPU.
    pub fn cuda_calls(&self) -> Option<super::cuda::CudaCalls> {
        match self {
            Self::Cuda(gpu) => Some(gpu.calls()),
            Self::Cpu(_) | Self::Dry(_) => None,
        }
    }

    /// Times the convolution algorithms on `bytes` free bytes at `offset`
    /// (see [`super::cuda::CudaBackend::tune_convolutions`]); 0 changed on
    /// a device that has nothing to time.
    pub(crate) fn tune_convolutions(&mut self, offset: usize, bytes: usize) -> Result<usize, BackendError> {
        match self {
            Self::Cuda(gpu) => gpu.tune_convolutions(offset, bytes),
            Self::Cpu(_) | Self::Dry(_) => Ok(0),
        }
    }

    /// Chooses among the timed algorithms with workspaces of at most
    /// `limit` bytes; the largest chosen.
    pub(crate) fn select_convolutions(&self, limit: usize) -> usize {
        match self {
            Self::Cuda(gpu) => gpu.select_convolutions(limit),
            Self::Cpu(_) | Self::Dry(_) => 0,
        }
    }

    /// Which of cuDNN's APIs runs each convolution planned so far (see
    /// [`super::Device::convolution_apis`]).
    pub(crate) fn convolution_apis(&self) -> Vec<(super::cuda::ConvDims, super::cuda::ConvApi)> {
        match self {
            Self::Cuda(gpu) => gpu.gpu().conv_plans().iter().map(|p| (p.dims, p.api())).collect(),
            Self::Cpu(_) | Self::Dry(_) => Vec::new(),
        }
    }

    /// Back to the heuristic's convolution algorithms.
    pub(crate) fn untune_convolutions(&self) {
        if let Self::Cuda(gpu) = self {
            gpu.untune_convolutions();
        }
    }

    /// Prepares to time up to `ops` ops of one step; false where the device
    /// cannot time them. Call at start-up: a GPU's events may take memory.
    pub(crate) fn enable_timing(&mut self, ops: usize) -> Result<bool, BackendError> {
        match self {
            Self::Cuda(gpu) => gpu.enable_timing(ops).map(|()| true),
            Self::Cpu(_) | Self::Dry(_) => Ok(false),
        }
    }

    /// Brackets every op queued from now on; false when timing is not
    /// enabled or not possible.
    pub(crate) fn start_timing(&mut self) -> bool {
        match self {
            Self::Cuda(gpu) => gpu.start_timing(),
            Self::Cpu(_) | Self::Dry(_) => false,
        }
    }

    /// Stops bracketing ops; those bracketed keep their times.
    pub(crate) fn pause_timing(&mut self) {
        if let Self::Cuda(gpu) = self {
            gpu.pause_timing();
        }
    }

    /// Waits for the timed ops and appends each one's time to `out`;
    /// returns the time from the first op's start to the last one's end,
    /// `None` where nothing was timed.
    pub(crate) fn finish_timing(&mut self, out: &mut Vec<OpTime>) -> Result<Option<f64>, BackendError> {
        match self {
            Self::Cuda(gpu) => gpu.finish_timing(out),
            Self::Cpu(_) | Self::Dry(_) => Ok(None),
        }
    }

    /// The `(start, end)` byte ranges the next kernels may touch. The CPU
    /// refuses a kernel touching anything else; the other backends cannot
    /// check a kernel's accesses and take the declaration as information.
    pub(crate) fn declare(&mut self, ranges: impl Iterator<Item = (usize, usize)>) {
        if let Self::Cpu(cpu) = self {
            cpu.declare(ranges);
        }
    }

    fn needs_cuda(&self, what: &'static str) -> BackendError {
        BackendError::NeedsCuda { what, on: self.kind() }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::{Device, DeviceKind};

    #[test]
    fn backends_without_a_capability_answer_typed_and_without_flags() {
        let cpu = Backend::new(Device::cpu(1).unwrap(), 4096).unwrap();
        let dry = Backend::dry_like(&Device::cpu(1).unwrap());
        for (mut backend, on) in [(cpu, DeviceKind::Cpu), (dry, DeviceKind::Dry)] {
            let refused = backend.begin_capture().unwrap_err();
            assert!(
                matches!(refused, BackendError::NeedsCuda { what: "whole-step graphs", on: o } if o == on),
                "{refused:?}"
            );
            let text = refused.to_string();
            assert_eq!(
                text,
                format!("whole-step graphs need the CUDA backend (this arena is on the {on} device)")
            );
            assert!(matches!(backend.end_capture(), Err(BackendError::NeedsCuda { .. })));
            assert_eq!(backend.ops_queued(), None);
            assert_eq!(backend.cuda_calls(), None);
            assert!(!backend.enable_timing(8).unwrap());
            assert!(!backend.start_timing());
            backend.pause_timing();
            let mut times = Vec::new();
            assert_eq!(backend.finish_timing(&mut times).unwrap(), None);
            assert!(times.is_empty());
        }
    }
}
