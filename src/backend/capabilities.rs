//! What some devices can do and others cannot: record a step as a graph and
//! replay it, count the work queued, tune convolutions, time each op, check
//! the ranges an op declared. Each capability is a method of the runtime
//! that answers on every backend (a typed refusal, `None` or `false` where
//! the device lacks it), so its callers use them without knowing which
//! backend it holds.

use super::cuda::CapturedGraph;
use super::OpTime;
use super::{Backend, BackendError, Runtime};
use std::ops::Range;

impl Runtime {
    /// Starts recording the device's work as a graph instead of running it.
    pub(crate) fn begin_capture(&mut self) -> Result<(), BackendError> {
        match &mut self.backend {
            Backend::Cuda(gpu) => gpu.begin_capture(),
            Backend::Cpu(_) | Backend::Dry(_) => Err(self.needs_cuda("whole-step graphs")),
        }
    }

    /// Ends the recording begun by [`Backend::begin_capture`] and
    /// instantiates the graph.
    pub(crate) fn end_capture(&mut self) -> Result<CapturedGraph, BackendError> {
        match &mut self.backend {
            Backend::Cuda(gpu) => gpu.end_capture(),
            Backend::Cpu(_) | Backend::Dry(_) => Err(self.needs_cuda("whole-step graphs")),
        }
    }

    /// Queues one replay of a captured graph.
    pub(crate) fn replay(&mut self, graph: &CapturedGraph) -> Result<(), BackendError> {
        match &mut self.backend {
            Backend::Cuda(gpu) => gpu.replay(graph),
            Backend::Cpu(_) | Backend::Dry(_) => Err(self.needs_cuda("whole-step graphs")),
        }
    }

    /// Work items queued so far (kernels, library calls, copies, graph
    /// launches) on a device that queues work; `None` on one that runs each
    /// kernel as it is called.
    pub fn ops_queued(&self) -> Option<u64> {
        match &self.backend {
            Backend::Cuda(gpu) => Some(gpu.ops_queued()),
            Backend::Cpu(_) | Backend::Dry(_) => None,
        }
    }

    /// The CUDA calls made so far on the GPU, by kind; `None` off the GPU.
    pub fn cuda_calls(&self) -> Option<super::cuda::CudaCalls> {
        match &self.backend {
            Backend::Cuda(gpu) => Some(gpu.calls()),
            Backend::Cpu(_) | Backend::Dry(_) => None,
        }
    }

    /// Times the convolution algorithms of every shape planned so far in
    /// `free`, arena bytes that hold nothing (before anything is allocated
    /// in them), and chooses the fastest of each pass (GPU only; see
    /// [`super::cuda::CudaBackend::tune_convolutions`]). Plans of steps
    /// must be made again: workspace sizes may have changed. Returns how
    /// many shapes changed an algorithm (none on a device that has nothing
    /// to time).
    pub(crate) fn tune_convolutions(&mut self, free: Range<usize>) -> Result<usize, BackendError> {
        match &mut self.backend {
            Backend::Cuda(gpu) => gpu.tune_convolutions(free.start, free.len()),
            Backend::Cpu(_) | Backend::Dry(_) => Ok(0),
        }
    }

    /// Chooses among the timed algorithms with workspaces of at most
    /// `limit` bytes; the largest chosen.
    pub(crate) fn select_convolutions(&self, limit: usize) -> usize {
        match &self.backend {
            Backend::Cuda(gpu) => gpu.select_convolutions(limit),
            Backend::Cpu(_) | Backend::Dry(_) => 0,
        }
    }

    /// Chooses among the timed algorithms with each pass's workspace at
    /// most `limit(tag)` bytes, `tag` being the number the pass's workspace
    /// carries in a step's plan (see [`crate::memory::StepPlan::tags`]);
    /// the largest chosen.
    pub(crate) fn hold_convolutions(&self, limit: &dyn Fn(u32) -> usize) -> usize {
        match &self.backend {
            Backend::Cuda(gpu) => gpu.hold_convolutions(limit),
            Backend::Cpu(_) | Backend::Dry(_) => 0,
        }
    }

    /// Which of cuDNN's APIs runs each convolution planned so far; none
    /// off the GPU (see [`super::Device::convolution_apis`]).
    pub fn convolution_apis(&self) -> Vec<(super::cuda::ConvDims, super::cuda::ConvApi)> {
        match &self.backend {
            Backend::Cuda(gpu) => gpu.gpu().conv_plans().iter().map(|p| (p.dims, p.api())).collect(),
            Backend::Cpu(_) | Backend::Dry(_) => Vec::new(),
        }
    }

    /// How many convolution passes run as two halves of their batch, held
    /// below their fastest workspace; none off the GPU.
    pub(crate) fn halved_convolution_passes(&self) -> usize {
        match &self.backend {
            Backend::Cuda(gpu) => gpu.gpu().conv_plans().iter().map(|p| p.halved_passes()).sum(),
            Backend::Cpu(_) | Backend::Dry(_) => 0,
        }
    }

    /// Runs every convolution planned so far whose batch is even and at
    /// least 64 images as two halves of its batch from
    /// now on, whatever the timings (a memory budget chooses halves only
    /// for a pass it holds below its fastest workspace): for checking that
    /// the halves compute what the whole batch does. Returns how many
    /// passes run so; none off the GPU.
    #[doc(hidden)]
    pub fn halve_convolutions(&self) -> usize {
        match &self.backend {
            Backend::Cuda(gpu) => gpu.halve_convolutions(),
            Backend::Cpu(_) | Backend::Dry(_) => 0,
        }
    }

    /// Back to the heuristic's convolution algorithms: undoes
    /// [`Runtime::tune_convolutions`].
    pub(crate) fn untune_convolutions(&self) {
        if let Backend::Cuda(gpu) = &self.backend {
            gpu.untune_convolutions();
        }
    }

    /// Prepares to time up to `ops` ops of one step; false where the device
    /// cannot time them (a dry run). Call at start-up: a GPU's events may
    /// take device memory.
    pub(crate) fn enable_op_timing(&mut self, ops: usize) -> Result<bool, BackendError> {
        match &mut self.backend {
            Backend::Cuda(gpu) => gpu.enable_timing(ops).map(|()| true),
            Backend::Cpu(cpu) => {
                cpu.clock().enable(ops);
                Ok(true)
            }
            Backend::Dry(_) => Ok(false),
        }
    }

    /// Times every op from now (a GPU brackets each with events, the CPU
    /// reads its clock around each), until [`Runtime::pause_op_timing`];
    /// false when timing is not enabled or not possible. Ops queued while a
    /// step is captured keep their events in the graph.
    pub(crate) fn start_op_timing(&mut self) -> bool {
        match &mut self.backend {
            Backend::Cuda(gpu) => gpu.start_timing(),
            Backend::Cpu(cpu) => cpu.clock().start(),
            Backend::Dry(_) => false,
        }
    }

    /// Stops timing ops; those timed keep their times.
    pub(crate) fn pause_op_timing(&mut self) {
        match &mut self.backend {
            Backend::Cuda(gpu) => gpu.pause_timing(),
            Backend::Cpu(cpu) => cpu.clock().pause(),
            Backend::Dry(_) => {}
        }
    }

    /// Waits for the device and reads the timed ops' latest times into
    /// `times`, and returns the device's time from the first op's start to
    /// the last one's end; `None` where nothing was timed.
    pub(crate) fn read_op_times(&mut self, times: &mut Vec<OpTime>) -> Result<Option<f64>, BackendError> {
        times.clear();
        match &mut self.backend {
            Backend::Cuda(gpu) => gpu.finish_timing(times),
            Backend::Cpu(cpu) => Ok(cpu.clock().finish(times)),
            Backend::Dry(_) => Ok(None),
        }
    }

    /// The `(start, end)` byte ranges the next kernels may touch. The CPU
    /// refuses a kernel touching anything else; the other backends cannot
    /// check a kernel's accesses and take the declaration as information.
    pub(crate) fn declare(&mut self, ranges: impl Iterator<Item = (usize, usize)>) {
        if let Backend::Cpu(cpu) = &mut self.backend {
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
        let cpu = Runtime::new(Device::cpu(1).unwrap(), 4096).unwrap();
        let dry = Runtime::planning(&Device::cpu(1).unwrap());
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
            // The CPU times ops on its clock; a dry run has nothing to time.
            assert_eq!(backend.enable_op_timing(8).unwrap(), on == DeviceKind::Cpu);
            assert_eq!(backend.start_op_timing(), on == DeviceKind::Cpu);
            backend.pause_op_timing();
            let mut times = Vec::new();
            assert_eq!(backend.read_op_times(&mut times).unwrap(), None, "no op ran");
            assert!(times.is_empty());
            assert_eq!(backend.tune_convolutions(0..4096).unwrap(), 0);
            assert_eq!(backend.select_convolutions(usize::MAX), 0);
            assert!(backend.convolution_apis().is_empty());
        }
    }
}
