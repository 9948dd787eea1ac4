//! The arena's one device allocation, and the only place that turns arena
//! offsets into device addresses.

use super::CudaError;
use crate::backend::BackendError;
use cudarc::driver::{result as driver, sys, CudaContext};
use std::sync::Arc;

/// One block of device memory from `cuMemAlloc`, which aligns to at least
/// 256 bytes: the arena's offsets keep that alignment for every buffer.
pub(crate) struct DeviceMemory {
    base: sys::CUdeviceptr,
    capacity: usize,
    ctx: Arc<CudaContext>,
}

impl DeviceMemory {
    /// The one call to `cuMemAlloc` of a run. The block is zeroed, so that a
    /// kernel reading before anything was written sees 0, as on the CPU.
    pub fn new(ctx: &Arc<CudaContext>, stream: sys::CUstream, bytes: usize) -> Result<Self, BackendError> {
        let bytes = bytes.max(crate::base::ALIGN);
        ctx.bind_to_thread()
            .map_err(|e| CudaError::failed("binding the CUDA context", e))?;
        // SAFETY: a plain allocation; the pointer is owned by the value
        // returned and freed once, on drop.
        let base = unsafe { driver::malloc_sync(bytes) }.map_err(|e| match e.0 {
            sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => BackendError::DeviceAllocation {
                bytes,
                free: driver::mem_get_info().map(|(free, _)| free).unwrap_or(0),
            },
            _ => CudaError::failed("cuMemAlloc (the arena)", e).into(),
        })?;
        let memory = Self {
            base,
            capacity: bytes,
            ctx: ctx.clone(),
        };
        // SAFETY: the range is the allocation just made.
        unsafe { driver::memset_d8_async(base, 0, bytes, stream) }
            .map_err(|e| CudaError::failed("zeroing the arena", e))?;
        Ok(memory)
    }

    /// The device address of `bytes` bytes at `offset`, checked to lie inside
    /// the allocation.
    pub fn address(&self, offset: usize, bytes: usize) -> Result<u64, BackendError> {
        match offset.checked_add(bytes) {
            Some(end) if end <= self.capacity => Ok(self.base + offset as u64),
            _ => Err(BackendError::OutOfBounds {
                offset,
                bytes,
                capacity: self.capacity,
            }),
        }
    }
}

impl Drop for DeviceMemory {
    fn drop(&mut self) {
        // SAFETY: `base` came from `malloc_sync` and is freed once; the
        // backend synchronises its stream before dropping, so no kernel is
        // still using it.
        let _ = self.ctx.bind_to_thread();
        let _ = unsafe { driver::free_sync(self.base) };
    }
}
