//! The GPU's types in a build without the `cuda` feature: the same names
//! and methods, but none can be made. Each holds an [`Infallible`], so every
//! body is `match self.never {}`: the compiler proves the `Device::Cuda`
//! and `Backend::Cuda` arms and the ops' GPU bodies unreachable, and they
//! compile unchanged. Opening a GPU says how to get one ([`CudaError::NotBuilt`]),
//! which `--device auto` takes as an absent GPU and trains on the CPU.

use super::{Arg, ConvApi, ConvDims, ConvPass, CudaCalls, CudaError, Gemm, Grid, KernelSource};
use crate::backend::OpTime;
use crate::backend::{BackendError, Policy};
use crate::base::{Buf, Element, FloatBuf};
use std::convert::Infallible;
use std::sync::Arc;

/// How many GPUs the driver sees: none can be asked, as this build has no
/// GPU backend.
pub fn device_count() -> Result<usize, CudaError> {
    Err(CudaError::NotBuilt)
}

/// Opening a GPU: refused, as this build has no GPU backend.
pub fn open(_ordinal: usize, _kernels: &[KernelSource]) -> Result<CudaDevice, CudaError> {
    Err(CudaError::NotBuilt)
}

/// A NCCL communicator id: refused, as this build has no GPU backend.
pub fn unique_id() -> Result<[u8; 128], CudaError> {
    Err(CudaError::NotBuilt)
}

/// An opened GPU; none can be made in this build.
pub struct Gpu {
    never: Infallible,
}

impl Gpu {
    pub(crate) fn describe(&self) -> String {
        match self.never {}
    }

    pub(crate) fn conv_plans(&self) -> Vec<Arc<ConvPlan>> {
        match self.never {}
    }

    pub(crate) fn conv_plan(&self, _dims: ConvDims, _policy: Policy) -> Result<Arc<ConvPlan>, CudaError> {
        match self.never {}
    }
}

/// A convolution's cuDNN plan; none can be made in this build.
pub struct ConvPlan {
    pub dims: ConvDims,
    never: Infallible,
}

impl ConvPlan {
    pub(crate) fn api(&self) -> ConvApi {
        match self.never {}
    }

    pub(crate) fn halved_passes(&self) -> usize {
        match self.never {}
    }

    pub(crate) fn workspace_bytes(&self, _pass: ConvPass) -> usize {
        match self.never {}
    }

    pub(crate) fn seconds_lost(&self, _pass: ConvPass) -> f64 {
        match self.never {}
    }

    pub(crate) fn seconds_chosen(&self, _pass: ConvPass) -> Option<f64> {
        match self.never {}
    }

    pub(crate) fn workspace_tag(&self, _pass: ConvPass) -> u32 {
        match self.never {}
    }
}

/// A GPU that has not yet received its arena; none can be made in this
/// build.
pub struct CudaDevice {
    pub(crate) policy: Policy,
    never: Infallible,
}

impl CudaDevice {
    pub(crate) fn gpu(&self) -> &Arc<Gpu> {
        match self.never {}
    }

    pub(crate) fn join(&mut self, _id: [u8; 128], _rank: usize, _world: usize) -> Result<(), CudaError> {
        match self.never {}
    }

    pub(crate) fn nccl_bytes(&self) -> Option<usize> {
        match self.never {}
    }
}

/// A captured step; none can be made in this build.
pub struct CapturedGraph {
    never: Infallible,
}

impl CapturedGraph {
    pub(crate) fn nodes(&self) -> usize {
        match self.never {}
    }
}

/// The GPU holding its arena memory; none can be made in this build.
pub struct CudaBackend {
    never: Infallible,
}

impl CudaBackend {
    pub(crate) fn new(device: CudaDevice, _capacity: usize) -> Result<Self, BackendError> {
        match device.never {}
    }

    pub(crate) fn gpu(&self) -> &Arc<Gpu> {
        match self.never {}
    }

    pub(crate) fn tune_convolutions(&mut self, _offset: usize, _bytes: usize) -> Result<usize, BackendError> {
        match self.never {}
    }

    pub(crate) fn select_convolutions(&self, _limit: usize) -> usize {
        match self.never {}
    }

    pub(crate) fn hold_convolutions(&self, _limit: &dyn Fn(u32) -> usize) -> usize {
        match self.never {}
    }

    pub(crate) fn untune_convolutions(&self) {
        match self.never {}
    }

    pub(crate) fn halve_convolutions(&self) -> usize {
        match self.never {}
    }

    pub(crate) fn ops_queued(&self) -> u64 {
        match self.never {}
    }

    pub(crate) fn calls(&self) -> CudaCalls {
        match self.never {}
    }

    pub(crate) fn launch(&mut self, _op: &'static str, _grid: Grid, _args: &[Arg<'_>]) -> Result<(), BackendError> {
        match self.never {}
    }

    pub(crate) fn upload<T: Element>(&mut self, _dst: Buf<T>, _src: &[T]) -> Result<(), BackendError> {
        match self.never {}
    }

    pub(crate) fn download<T: Element>(&mut self, _src: Buf<T>, _dst: &mut [T]) -> Result<(), BackendError> {
        match self.never {}
    }

    pub(crate) fn fill<T: Element>(&mut self, _dst: Buf<T>, _value: T) -> Result<(), BackendError> {
        match self.never {}
    }

    pub(crate) fn add_assign(&mut self, _dst: FloatBuf, _src: FloatBuf) -> Result<(), BackendError> {
        match self.never {}
    }

    pub(crate) fn world(&self) -> (usize, usize) {
        match self.never {}
    }

    pub(crate) fn all_reduce_sum(&mut self, _buf: Buf<f32>) -> Result<(), BackendError> {
        match self.never {}
    }

    pub(crate) fn join_collectives(&mut self) -> Result<(), BackendError> {
        match self.never {}
    }

    pub(crate) fn enable_timing(&mut self, _ops: usize) -> Result<(), BackendError> {
        match self.never {}
    }

    pub(crate) fn start_timing(&mut self) -> bool {
        match self.never {}
    }

    pub(crate) fn pause_timing(&mut self) {
        match self.never {}
    }

    pub(crate) fn finish_timing(&mut self, _out: &mut Vec<OpTime>) -> Result<Option<f64>, BackendError> {
        match self.never {}
    }

    pub(crate) fn memory_info(&mut self) -> Result<(usize, usize), BackendError> {
        match self.never {}
    }

    pub(crate) fn begin_capture(&mut self) -> Result<(), BackendError> {
        match self.never {}
    }

    pub(crate) fn end_capture(&mut self) -> Result<CapturedGraph, BackendError> {
        match self.never {}
    }

    pub(crate) fn replay(&mut self, _graph: &CapturedGraph) -> Result<(), BackendError> {
        match self.never {}
    }

    pub(crate) fn gemm(&mut self, _g: Gemm) -> Result<(), BackendError> {
        match self.never {}
    }

    #[allow(clippy::too_many_arguments)]
    pub(crate) fn conv(
        &mut self,
        _dims: ConvDims,
        _policy: Policy,
        _pass: ConvPass,
        _a: FloatBuf,
        _b: FloatBuf,
        _workspace: Buf<f32>,
        _out: FloatBuf,
        _accumulate: bool,
    ) -> Result<(), BackendError> {
        match self.never {}
    }
}

#[cfg(test)]
mod tests {
    use crate::backend::{Device, DeviceRequest};

    /// Without the `cuda` feature, asking for the GPU says why there is
    /// none and how to get one; `auto` trains on the CPU and says why.
    #[test]
    fn a_build_without_cuda_refuses_the_gpu_and_says_how_to_get_it() {
        let built_without = "built without the `cuda` feature";
        let Err(err) = Device::open(DeviceRequest::Cuda, 1, &[]) else {
            panic!("a GPU opened in a build without the `cuda` feature");
        };
        let text = err.to_string();
        assert!(text.contains(built_without), "{text}");
        assert!(text.contains("rebuild it with default features"), "{text}");
        let (device, why) = Device::open(DeviceRequest::Auto, 1, &[]).expect("the CPU");
        assert!(matches!(device, Device::Cpu(_)));
        let why = why.expect("auto says why it took the CPU");
        assert!(why.contains(built_without), "{why}");
        for refusal in [super::device_count().map(drop), super::unique_id().map(drop)] {
            assert!(matches!(refusal, Err(super::CudaError::NotBuilt)), "{refusal:?}");
        }
    }
}
