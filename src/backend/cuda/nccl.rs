//! NCCL: the all-reduce that sums gradients across the GPUs of a
//! data-parallel run, on a stream of its own so it overlaps the rest of
//! backward.
//!
//! `all_reduce_sum` forks the communication stream off the compute stream
//! (an event recorded on one, waited on by the other), queues the in-place
//! sum there and returns at once; `join` makes the compute stream wait for
//! every sum queued so far. Both are plain stream dependencies, so inside a
//! stream capture they become edges of the step's CUDA graph and the
//! replayed graph keeps the overlap.
//!
//! NCCL allocates its own device buffers when the communicator is made:
//! the one exception to "nothing but the arena allocates", made before the
//! arena's allocation and reported as such (see `Nccl::bytes`).

use super::{CudaError, Gpu};
use cudarc::driver::{result as driver, sys, CudaStream};
use cudarc::nccl::sys as nccl_sys;
use std::ffi::c_void;
use std::sync::Arc;

/// One rank's membership of a NCCL communicator.
pub struct Nccl {
    // Field order is drop order: the communicator goes before the stream
    // it queued work on.
    comm: Comm,
    stream: Arc<CudaStream>,
    fork: sys::CUevent,
    join: sys::CUevent,
    rank: usize,
    world: usize,
    /// Sums queued on the communication stream since the last join.
    pending: bool,
    /// Device memory the communicator took (free before minus after).
    bytes: usize,
}

/// The communicator handle, destroyed once.
struct Comm(nccl_sys::ncclComm_t);

// SAFETY: a communicator is an opaque handle NCCL lets any thread use, one
// call at a time; `Nccl` is only reached through `&mut` of its backend.
unsafe impl Send for Comm {}
// SAFETY: as above; the events are plain handles used only through `&mut`.
unsafe impl Send for Nccl {}

impl Drop for Comm {
    fn drop(&mut self) {
        // SAFETY: made once in `Nccl::connect` and destroyed once here; a
        // destroy waits for the communicator's queued work, an abort (after
        // an error) does not.
        unsafe {
            if nccl_sys::ncclCommDestroy(self.0).result().is_err() {
                let _ = nccl_sys::ncclCommAbort(self.0);
            }
        }
    }
}

impl Drop for Nccl {
    fn drop(&mut self) {
        // SAFETY: both events were created in `Nccl::connect` and are not used
        // after this.
        unsafe {
            let _ = driver::event::destroy(self.fork);
            let _ = driver::event::destroy(self.join);
        }
    }
}

/// A NCCL error as text, with NCCL's own detail when it has one.
fn describe(r: nccl_sys::ncclResult_t) -> String {
    // SAFETY: ncclGetErrorString returns a static C string for any code.
    let text = unsafe { std::ffi::CStr::from_ptr(nccl_sys::ncclGetErrorString(r)) };
    format!("{} ({r:?})", text.to_string_lossy())
}

fn check(op: &'static str, r: nccl_sys::ncclResult_t) -> Result<(), CudaError> {
    match r {
        nccl_sys::ncclResult_t::ncclSuccess => Ok(()),
        other => Err(CudaError::failed(op, describe(other))),
    }
}

/// Whether NCCL can be loaded, or the error saying how to get it.
pub(crate) fn check_library() -> Result<(), CudaError> {
    // SAFETY: only tries to dlopen the library and closes it.
    if unsafe { nccl_sys::is_culib_present() } {
        Ok(())
    } else {
        Err(CudaError::MissingLibrary {
            library: "NCCL (libnccl.so.2)",
            hint: "install NCCL 2.28 or later, or add its folder to LD_LIBRARY_PATH (data-parallel training needs it)",
        })
    }
}

/// A new communicator id, made by rank 0 and sent to the others.
pub fn unique_id() -> Result<[u8; 128], CudaError> {
    check_library()?;
    let mut id = nccl_sys::ncclUniqueId { internal: [0; 128] };
    // SAFETY: `id` is a valid out-pointer for one ncclUniqueId.
    check("ncclGetUniqueId", unsafe { nccl_sys::ncclGetUniqueId(&mut id) })?;
    Ok(id.internal.map(|c| c as u8))
}

impl Nccl {
    /// Joins communicator `id` as `rank` of `world` on `gpu`. Blocks until
    /// every rank has joined.
    pub(crate) fn connect(gpu: &Gpu, id: [u8; 128], rank: usize, world: usize) -> Result<Self, CudaError> {
        check_library()?;
        gpu.enter()?;
        let failed = |op| move |e: driver::DriverError| CudaError::failed(op, e);
        let (free_before, _) = gpu.memory_info()?;
        let stream = gpu.ctx.new_stream().map_err(failed("creating the NCCL stream"))?;
        let flags = sys::CUevent_flags::CU_EVENT_DISABLE_TIMING;
        let fork = driver::event::create(flags).map_err(failed("cuEventCreate"))?;
        let join = driver::event::create(flags).map_err(failed("cuEventCreate"))?;
        let id = nccl_sys::ncclUniqueId {
            internal: id.map(|b| b as std::ffi::c_char),
        };
        let (nranks, me) = (world as i32, rank as i32);
        let mut comm = std::ptr::null_mut();
        // SAFETY: `comm` is a valid out-pointer; the context of `gpu` is
        // current on this thread, so the communicator is made on that GPU.
        let r = unsafe { nccl_sys::ncclCommInitRank(&mut comm, nranks, id, me) };
        if let Err(e) = check("ncclCommInitRank", r) {
            // SAFETY: created above, never used.
            unsafe {
                let _ = driver::event::destroy(fork);
                let _ = driver::event::destroy(join);
            }
            return Err(e);
        }
        let (free_after, _) = gpu.memory_info()?;
        Ok(Self {
            comm: Comm(comm),
            stream,
            fork,
            join,
            rank,
            world,
            pending: false,
            bytes: free_before.saturating_sub(free_after),
        })
    }

    pub(crate) fn rank(&self) -> usize {
        self.rank
    }

    pub(crate) fn world(&self) -> usize {
        self.world
    }

    /// Device memory NCCL took for the communicator (outside the arena).
    pub(crate) fn bytes(&self) -> usize {
        self.bytes
    }

    /// Queues `ptr[..len] = Σ over ranks` after everything queued so far
    /// on `compute`.
    ///
    /// # Safety
    /// `ptr` must address `len` f32 of device memory that stays allocated
    /// until the sum has run, and that nothing else writes until [`Nccl::join`].
    pub(crate) unsafe fn all_reduce_sum(
        &mut self,
        compute: sys::CUstream,
        ptr: u64,
        len: usize,
    ) -> Result<(), CudaError> {
        let failed = |op| move |e: driver::DriverError| CudaError::failed(op, e);
        let comm_stream = self.stream.cu_stream();
        driver::event::record(self.fork, compute).map_err(failed("cuEventRecord"))?;
        driver::stream::wait_event(comm_stream, self.fork, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
            .map_err(failed("cuStreamWaitEvent"))?;
        self.pending = true;
        let buf = ptr as *mut c_void;
        check(
            "ncclAllReduce",
            nccl_sys::ncclAllReduce(
                buf,
                buf,
                len,
                nccl_sys::ncclDataType_t::ncclFloat32,
                nccl_sys::ncclRedOp_t::ncclSum,
                self.comm.0,
                comm_stream as nccl_sys::cudaStream_t,
            ),
        )
    }

    /// Makes `compute` wait for every sum queued so far.
    pub(crate) fn join(&mut self, compute: sys::CUstream) -> Result<(), CudaError> {
        if !self.pending {
            return Ok(());
        }
        let failed = |op| move |e: driver::DriverError| CudaError::failed(op, e);
        // SAFETY: both streams and the event are alive while `self` is.
        unsafe {
            driver::event::record(self.join, self.stream.cu_stream()).map_err(failed("cuEventRecord"))?;
            driver::stream::wait_event(compute, self.join, sys::CUevent_wait_flags::CU_EVENT_WAIT_DEFAULT)
                .map_err(failed("cuStreamWaitEvent"))?;
        }
        self.pending = false;
        Ok(())
    }
}
