//! The CUDA calls the backend has made on one GPU, by kind: what a test
//! reads to prove a replayed step is one graph launch and nothing else.
//!
//! Every call a step can reach is counted where it is made, before its
//! result is known: each is one relaxed atomic add on a counter of the
//! GPU's own, nothing a launch would notice. Set-up calls (opening the GPU,
//! planning and timing convolutions, creating events) are not counted; nor
//! are the CUDA calls the libraries make inside one of theirs. Device
//! allocations are: the arena's is the only one a run may make.

use std::sync::atomic::{AtomicU64, Ordering};

/// A kind of call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// `cuLaunchKernel`: one of our kernels.
    Kernel,
    /// `cuGraphLaunch`: a replay of a captured step.
    GraphLaunch,
    /// `cuMemcpyHtoDAsync`, `cuMemcpyDtoHAsync`.
    Copy,
    /// `cuMemsetD8Async`, `cuMemsetD16Async`, `cuMemsetD32Async`.
    Fill,
    /// A convolution pass handed to cuDNN (`cudnnConvolution*`, or on the
    /// graph API `cudnnBackendExecute` with its variant pack).
    Cudnn,
    /// `cublasSetWorkspace_v2`, `cublasSgemm_v2`, `cublasGemmEx`.
    Cublas,
    /// `cuEventRecordWithFlags` around a timed op, `cuEventElapsedTime`.
    Event,
    /// `cuStreamSynchronize`: the host waits for the GPU.
    Synchronize,
    /// `cuCtxGetCurrent` (and `cuCtxSetCurrent` where another context was
    /// current): the check that the GPU's context is the thread's, made
    /// before every other call.
    Context,
    /// `cuStreamBeginCapture`, `cuStreamEndCapture`, `cuGraphGetNodes`,
    /// `cuGraphInstantiate`.
    Capture,
    /// A sum across GPUs: `ncclAllReduce` with the event record and wait
    /// that order it after the compute stream, or the record and wait that
    /// order the compute stream after the sums.
    Nccl,
    /// `cuMemGetInfo`.
    MemoryInfo,
    /// `cuMemAlloc`: the arena's one block.
    Allocation,
}

const KINDS: usize = Call::Allocation as usize + 1;

/// A GPU's counts of calls, one per [`Call`].
#[derive(Debug, Default)]
pub(crate) struct CallCounter([AtomicU64; KINDS]);

impl CallCounter {
    pub fn count(&self, call: Call) {
        self.0[call as usize].fetch_add(1, Ordering::Relaxed);
    }

    pub fn read(&self) -> CudaCalls {
        let n = |call: Call| self.0[call as usize].load(Ordering::Relaxed);
        CudaCalls {
            kernels: n(Call::Kernel),
            graph_launches: n(Call::GraphLaunch),
            copies: n(Call::Copy),
            fills: n(Call::Fill),
            cudnn: n(Call::Cudnn),
            cublas: n(Call::Cublas),
            events: n(Call::Event),
            synchronizations: n(Call::Synchronize),
            context: n(Call::Context),
            capture: n(Call::Capture),
            nccl: n(Call::Nccl),
            memory_info: n(Call::MemoryInfo),
            allocations: n(Call::Allocation),
        }
    }
}

/// The CUDA calls made on a GPU so far, by kind; subtract two readings for
/// the calls in between.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CudaCalls {
    /// Launches of our kernels.
    pub kernels: u64,
    /// Replays of captured steps.
    pub graph_launches: u64,
    /// Copies between the host and the GPU.
    pub copies: u64,
    /// Memsets.
    pub fills: u64,
    /// Convolution passes handed to cuDNN.
    pub cudnn: u64,
    /// cuBLAS calls: matrix products and their workspace.
    pub cublas: u64,
    /// Event records and reads around timed ops.
    pub events: u64,
    /// Waits of the host for the GPU.
    pub synchronizations: u64,
    /// Checks (and switches) of the thread's current context.
    pub context: u64,
    /// Calls that capture and instantiate step graphs.
    pub capture: u64,
    /// Sums across GPUs, with the events that order them.
    pub nccl: u64,
    /// Reads of free and total device memory.
    pub memory_info: u64,
    /// Device allocations: the arena's, and no other.
    pub allocations: u64,
}

impl std::ops::Sub for CudaCalls {
    type Output = Self;

    /// The calls made between reading `rhs` and reading `self`.
    fn sub(self, rhs: Self) -> Self {
        Self {
            kernels: self.kernels - rhs.kernels,
            graph_launches: self.graph_launches - rhs.graph_launches,
            copies: self.copies - rhs.copies,
            fills: self.fills - rhs.fills,
            cudnn: self.cudnn - rhs.cudnn,
            cublas: self.cublas - rhs.cublas,
            events: self.events - rhs.events,
            synchronizations: self.synchronizations - rhs.synchronizations,
            context: self.context - rhs.context,
            capture: self.capture - rhs.capture,
            nccl: self.nccl - rhs.nccl,
            memory_info: self.memory_info - rhs.memory_info,
            allocations: self.allocations - rhs.allocations,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Kind `i` counted `i + 1` times: each lands in its own field, and a
    /// difference of two readings is what was counted between them.
    #[test]
    fn each_call_counts_under_its_own_kind_and_a_difference_is_the_calls_between() {
        use Call::*;
        let all = [
            Kernel,
            GraphLaunch,
            Copy,
            Fill,
            Cudnn,
            Cublas,
            Event,
            Synchronize,
            Context,
            Capture,
            Nccl,
            MemoryInfo,
            Allocation,
        ];
        assert_eq!(all.len(), KINDS);
        let counter = CallCounter::default();
        counter.count(Kernel);
        let before = counter.read();
        for (i, &call) in all.iter().enumerate() {
            for _ in 0..=i {
                counter.count(call);
            }
        }
        let expected = CudaCalls {
            kernels: 1,
            graph_launches: 2,
            copies: 3,
            fills: 4,
            cudnn: 5,
            cublas: 6,
            events: 7,
            synchronizations: 8,
            context: 9,
            capture: 10,
            nccl: 11,
            memory_info: 12,
            allocations: 13,
        };
        assert_eq!(counter.read() - before, expected);
        assert_eq!(counter.read().kernels, 2);
    }
}
