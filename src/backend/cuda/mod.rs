//! The CUDA backend: one `cuMemAlloc` for the whole arena, our NVRTC kernels,
//! cuDNN for convolutions and cuBLAS for matrix products, all on one stream.
//!
//! Layers, as in cudarc: cudarc's `sys`/`result` calls appear only in this
//! folder; [`CudaBackend`]'s methods check every buffer against the arena and
//! against the sizes the call implies before the raw call, so the ops above
//! them are safe code. After any CUDA error the backend refuses all further
//! work ([`CudaError::Poisoned`]): a run never continues on state a failed
//! kernel may have corrupted.
//!
//! Here: the backend, its memory's addresses, kernel launches, copies and
//! fills; the cuBLAS and cuDNN calls in `libraries.rs`; the GPU itself
//! (context, stream, handles, convolution plans) in `gpu.rs`.
//!
//! Without the `cuda` feature only what the ops describe their kernels with
//! is built (sources, arguments, grids, matrix products, convolution
//! passes, errors); everything that calls cudarc is left out, and
//! `absent.rs` stands in for the GPU's types: none can be made, so the
//! code that uses them compiles unchanged and never runs.

#[cfg(not(feature = "cuda"))]
mod absent;
// Counted only by the calls the GPU's code makes.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
mod calls;
mod cudnn;
mod error;
#[cfg(feature = "cuda")]
mod gpu;
#[cfg(feature = "cuda")]
mod graph;
pub(crate) mod kernels;
mod libraries;
#[cfg(feature = "cuda")]
mod memory;
#[cfg(feature = "cuda")]
mod nccl;
mod timing;

#[cfg(not(feature = "cuda"))]
pub use absent::{device_count, open, unique_id, CudaBackend, CudaDevice};
#[cfg(not(feature = "cuda"))]
pub(crate) use absent::{CapturedGraph, Gpu};
#[cfg(feature = "cuda")]
pub(crate) use calls::Call;
pub use calls::CudaCalls;
pub(crate) use cudnn::ConvPass;
#[cfg(feature = "cuda")]
pub(crate) use cudnn::ConvPlan;
pub use cudnn::{ConvApi, ConvDims};
pub use error::CudaError;
#[cfg(feature = "cuda")]
use error::Sentence;
#[cfg(feature = "cuda")]
pub(crate) use gpu::Gpu;
#[cfg(feature = "cuda")]
pub(crate) use graph::CapturedGraph;
pub(crate) use kernels::float_kernel;
pub(crate) use kernels::joined;
pub(crate) use kernels::FloatKernel;
pub use kernels::KernelSource;
pub(crate) use libraries::Gemm;
#[cfg(feature = "cuda")]
pub use nccl::unique_id;
#[cfg(feature = "cuda")]
pub(crate) use nccl::Nccl;

#[cfg(feature = "cuda")]
use super::BackendError;
#[cfg(feature = "cuda")]
use super::OpTime;
use crate::base::{Buf, Element, FloatBuf};
#[cfg(feature = "cuda")]
use cudarc::driver::{result as driver, sys};
#[cfg(feature = "cuda")]
use memory::DeviceMemory;
#[cfg(feature = "cuda")]
use std::ffi::c_void;
#[cfg(feature = "cuda")]
use std::sync::Arc;

/// Bytes of cuBLAS workspace each matrix product gets in the step region.
/// Without one cuBLAS would allocate its own on first use; the small
/// products of our models need little.
pub(crate) const BLAS_WORKSPACE: usize = 256 << 10;

#[cfg(feature = "cuda")]
pub use gpu::device_count;

/// Opens GPU `ordinal` and compiles `kernels` (the ops' sources, see
/// `ops::KERNELS`) for it, or says why it cannot be used.
#[cfg(feature = "cuda")]
pub fn open(ordinal: usize, kernels: &[KernelSource]) -> Result<CudaDevice, CudaError> {
    Ok(CudaDevice {
        gpu: Gpu::open(ordinal, kernels)?,
        nccl: None,
        policy: super::Policy::default(),
    })
}

/// A GPU that has not yet received its arena.
#[cfg(feature = "cuda")]
pub struct CudaDevice {
    gpu: Arc<Gpu>,
    /// Its communicator, when it trains data-parallel with other GPUs.
    nccl: Option<Nccl>,
    /// What runtimes made on it compute by (see `Device::set_policy`).
    pub(crate) policy: super::Policy,
}

#[cfg(feature = "cuda")]
impl CudaDevice {
    pub(crate) fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Joins NCCL communicator `id` as `rank` of `world`; blocks until every
    /// rank has joined. Done before the arena is allocated, since NCCL takes
    /// device memory of its own.
    pub(crate) fn join(&mut self, id: [u8; 128], rank: usize, world: usize) -> Result<(), CudaError> {
        self.nccl = Some(Nccl::connect(&self.gpu, id, rank, world)?);
        Ok(())
    }

    /// Device memory the communicator took, outside the arena.
    pub(crate) fn nccl_bytes(&self) -> Option<usize> {
        self.nccl.as_ref().map(Nccl::bytes)
    }
}

/// A kernel argument: an arena buffer (passed as its device address), a
/// number, or a small by-value array of 32-bit words (a `struct { T x[N];
/// }` parameter), for kernels that take a table (sizes, normalisation).
#[derive(Debug, Clone, Copy)]
// Read only by the GPU backend, which a build without `cuda` has not.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) enum Arg<'a> {
    Buf {
        offset: usize,
        bytes: usize,
    },
    U32(u32),
    F32(f32),
    U64(u64),
    /// No buffer: a null pointer, for optional kernel inputs.
    Null,
    U32s(&'a [u32]),
}

impl<T: Element> From<Buf<T>> for Arg<'_> {
    fn from(b: Buf<T>) -> Self {
        Self::Buf {
            offset: b.offset(),
            bytes: b.bytes(),
        }
    }
}

impl From<FloatBuf> for Arg<'_> {
    fn from(b: FloatBuf) -> Self {
        Self::Buf {
            offset: b.offset(),
            bytes: b.bytes(),
        }
    }
}

/// A launch shape: `blocks` (x, y) blocks of `threads` (x, y) threads.
#[derive(Debug, Clone, Copy)]
// Read only by the GPU backend, which a build without `cuda` has not.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub(crate) struct Grid {
    pub blocks: (u32, u32),
    pub threads: (u32, u32),
}

impl Grid {
    /// One thread per element of `n`, in blocks of 256.
    pub(crate) fn over(n: usize) -> Self {
        Self::blocks(n.div_ceil(256), 256)
    }

    pub(crate) fn blocks(blocks: usize, threads: u32) -> Self {
        Self {
            blocks: (blocks as u32, 1),
            threads: (threads, 1),
        }
    }

    /// One thread per element of a `rows × cols` matrix, in `tile × tile`
    /// blocks (x along columns).
    pub(crate) fn tiles(rows: usize, cols: usize, tile: u32) -> Self {
        let t = tile as usize;
        Self {
            blocks: (cols.div_ceil(t) as u32, rows.div_ceil(t) as u32),
            threads: (tile, tile),
        }
    }
}

#[cfg(feature = "cuda")]
const MAX_ARGS: usize = 16;
/// 8-byte words of argument storage for one launch (tables included).
#[cfg(feature = "cuda")]
const ARG_WORDS: usize = 128;

/// The GPU holding its arena memory.
#[cfg(feature = "cuda")]
pub struct CudaBackend {
    // Drop order: the communicator (which waits for its queued sums), the
    // events and the memory go before the GPU whose context they live in.
    nccl: Option<Nccl>,
    /// Events bracketing each op while a step is being timed.
    timer: timing::OpTimer,
    memory: DeviceMemory,
    gpu: Arc<Gpu>,
    /// The op whose CUDA error stopped this backend, if one did.
    poisoned: Option<&'static str>,
    /// Work items (kernels, library calls, copies, fills) queued so far.
    ops_queued: u64,
    /// Whether the stream is being captured into a graph.
    capturing: bool,
}

#[cfg(feature = "cuda")]
impl CudaBackend {
    pub(crate) fn new(device: CudaDevice, capacity: usize) -> Result<Self, BackendError> {
        let (gpu, nccl) = (device.gpu, device.nccl);
        gpu.calls.count(Call::Allocation);
        let memory = DeviceMemory::new(&gpu.ctx, gpu.stream.cu_stream(), capacity)?;
        let mut backend = Self {
            nccl,
            memory,
            gpu,
            poisoned: None,
            ops_queued: 0,
            timer: timing::OpTimer::default(),
            capturing: false,
        };
        backend.synchronize("zeroing the arena")?;
        Ok(backend)
    }

    pub(crate) fn gpu(&self) -> &Arc<Gpu> {
        &self.gpu
    }

    /// Refuses work after an earlier failure, and makes the context current.
    fn enter(&mut self, op: &'static str) -> Result<(), BackendError> {
        if let Some(first) = self.poisoned {
            return Err(CudaError::Poisoned { op, first }.into());
        }
        self.gpu.enter().map_err(|e| self.poison(op, e))
    }

    fn poison(&mut self, op: &'static str, e: CudaError) -> BackendError {
        self.poisoned.get_or_insert(op);
        e.into()
    }

    /// Checks a raw call's result; with BUMPGRAD_CUDA_SYNC set, also waits
    /// for the work to finish so an asynchronous error is blamed on `op`.
    fn check<E: Sentence>(&mut self, op: &'static str, r: Result<(), E>) -> Result<(), BackendError> {
        if let Err(e) = r {
            return Err(self.poison(op, CudaError::failed(op, e)));
        }
        if self.gpu.sync_each_op && !self.capturing {
            self.synchronize(op)?;
        }
        Ok(())
    }

    /// Times the algorithms of every convolution planned so far (see
    /// [`ConvPlan::tune`]) on `bytes` bytes of the arena at `offset`, which
    /// hold nothing live (the arena before its first allocation): each
    /// shape's input, filters and output at its start, the rest as
    /// workspace. The bytes used are zeroed again after. Returns how many
    /// shapes changed an algorithm.
    pub(crate) fn tune_convolutions(&mut self, offset: usize, bytes: usize) -> Result<usize, BackendError> {
        const OP: &str = "timing the convolution algorithms";
        self.enter(OP)?;
        let base = self.memory.address(offset, bytes)?;
        let aligned = |floats: usize| (floats * 4).div_ceil(256) * 256;
        let (mut changed, mut touched) = (0, 0);
        for plan in self.gpu.conv_plans() {
            let d = plan.dims;
            let sizes = [aligned(d.input_len()), aligned(d.filter_len()), aligned(d.output_len())];
            let tensors: usize = sizes.iter().sum();
            // Too large to time here: the heuristic's choice stays.
            let Some(workspace) = bytes.checked_sub(tensors) else {
                continue;
            };
            touched = bytes;
            let x = base;
            let w = x + sizes[0] as u64;
            let y = w + sizes[1] as u64;
            let libs = self.gpu.libs.lock().unwrap_or_else(|e| e.into_inner());
            // SAFETY: the three tensors and the workspace are disjoint
            // ranges of `bytes` arena bytes at `offset` (checked by
            // `address` above), which the caller guarantees hold nothing
            // live; the handle is the one every plan was made with, used
            // under its mutex.
            let r = unsafe { plan.tune(libs.cudnn, [x, w, y], y + sizes[2] as u64, workspace) };
            drop(libs);
            changed += usize::from(r.map_err(|e| self.poison(OP, e))?);
        }
        self.gpu.calls.count(Call::Fill);
        // SAFETY: the range was checked above and lies in the arena.
        unsafe { driver::memset_d8_async(base, 0, touched, self.gpu.stream.cu_stream()) }
            .map_err(|e| self.poison(OP, CudaError::failed("cuMemsetD8Async", e)))?;
        self.synchronize(OP)?;
        Ok(changed)
    }

    /// Chooses among the timed algorithms again, each workspace at most
    /// `limit` bytes (see [`ConvPlan::select`]); returns the largest chosen.
    pub(crate) fn select_convolutions(&self, limit: usize) -> usize {
        self.hold_convolutions(&|_| limit)
    }

    /// Chooses among the timed algorithms again, each pass's workspace at
    /// most `limit(tag)` bytes, where `tag` is its
    /// [`ConvPlan::workspace_tag`]; returns the largest chosen.
    pub(crate) fn hold_convolutions(&self, limit: &dyn Fn(u32) -> usize) -> usize {
        let plans = self.gpu.conv_plans();
        let each = |p: &ConvPlan| p.select(ConvPass::ALL.map(|pass| limit(p.workspace_tag(pass))));
        plans.iter().map(|p| each(p)).max().unwrap_or(0)
    }

    /// Runs every convolution planned so far as two halves of its batch
    /// where it can (see [`ConvPlan::halve`]); how many passes run so.
    pub(crate) fn halve_convolutions(&self) -> usize {
        let libs = self.gpu.libs.lock().unwrap_or_else(|e| e.into_inner());
        self.gpu.conv_plans().iter().map(|p| p.halve(libs.cudnn)).sum()
    }

    /// Puts every convolution back on cuDNN's heuristic choice.
    pub(crate) fn untune_convolutions(&self) {
        for plan in self.gpu.conv_plans() {
            plan.untune();
        }
    }

    /// Waits for every queued kernel; reports an asynchronous error as `op`'s.
    pub(crate) fn synchronize(&mut self, op: &'static str) -> Result<(), BackendError> {
        self.gpu.calls.count(Call::Synchronize);
        // SAFETY: the stream is alive as long as `gpu`.
        let r = unsafe { driver::stream::synchronize(self.gpu.stream.cu_stream()) };
        r.map_err(|e| self.poison(op, CudaError::failed(op, e)))
    }

    fn address<T: Element>(&self, buf: Buf<T>) -> Result<u64, BackendError> {
        self.memory.address(buf.offset(), buf.bytes())
    }

    fn float_address(&self, buf: FloatBuf) -> Result<u64, BackendError> {
        self.memory.address(buf.offset(), buf.bytes())
    }

    /// Work items queued so far: kernels of ours, library calls, copies
    /// and fills (a library call may run several kernels).
    pub(crate) fn ops_queued(&self) -> u64 {
        self.ops_queued
    }

    /// The CUDA calls made on this GPU so far (see [`CudaCalls`]).
    pub(crate) fn calls(&self) -> CudaCalls {
        self.gpu.calls()
    }

    /// Launches the kernel registered as `op` when the device was
    /// opened (an unregistered name is [`CudaError::UnknownKernel`]).
    pub(crate) fn launch(&mut self, op: &'static str, grid: Grid, args: &[Arg<'_>]) -> Result<(), BackendError> {
        self.enter(op)?;
        let f = self.gpu.kernels.function(op)?;
        if args.len() > MAX_ARGS {
            return Err(BackendError::TooManyViews);
        }
        if grid.blocks.0 == 0 || grid.blocks.1 == 0 {
            return Ok(());
        }
        // Each argument's value, in the bytes (and 8-byte alignment) the
        // kernel's parameter has; cuLaunchKernel copies from `storage`
        // through `params`. Fixed-size: a launch touches no heap.
        let mut storage = [0u64; ARG_WORDS];
        let mut starts = [0usize; MAX_ARGS];
        let mut used = 0;
        for (start, arg) in starts.iter_mut().zip(args) {
            *start = used;
            let mut put = |word: u64| -> Result<(), BackendError> {
                let slot = storage.get_mut(used).ok_or(BackendError::Internal(
                    "a kernel's arguments exceed the launch's storage",
                ))?;
                *slot = word;
                used += 1;
                Ok(())
            };
            match *arg {
                Arg::Buf { offset, bytes } => put(self.memory.address(offset, bytes)?)?,
                Arg::U32(v) => put(u64::from_ne_bytes(widen(v.to_ne_bytes())))?,
                Arg::F32(v) => put(u64::from_ne_bytes(widen(v.to_ne_bytes())))?,
                Arg::U64(v) => put(v)?,
                Arg::Null => put(0)?,
                Arg::U32s(values) => {
                    for pair in values.chunks(2) {
                        let lo = pair[0].to_ne_bytes();
                        let hi = pair.get(1).copied().unwrap_or(0).to_ne_bytes();
                        let mut word = [0u8; 8];
                        word[..4].copy_from_slice(&lo);
                        word[4..].copy_from_slice(&hi);
                        put(u64::from_ne_bytes(word))?;
                    }
                }
            }
        }
        let mut params = [std::ptr::null_mut::<c_void>(); MAX_ARGS];
        for (param, &start) in params.iter_mut().zip(&starts).take(args.len()) {
            *param = storage[start..].as_mut_ptr().cast();
        }
        self.timer.before(&self.gpu, op, self.capturing);
        self.gpu.calls.count(Call::Kernel);
        // SAFETY: `f` is a loaded kernel of ours; `params` holds one pointer
        // per parameter, in order, to a value of the parameter's size and
        // layout (the ops pass arguments in the order and types of the `.cu`
        // signature; a table is a struct of N addresses or N u32s).
        // Every buffer address lies inside the arena (checked by `address`),
        // and our kernels index each buffer only below the element counts the
        // op passes with it, which come from the same shapes as the buffers.
        let r = unsafe {
            if self.gpu.dependent_launches {
                launch_dependent(f, grid, self.gpu.stream.cu_stream(), &mut params[..args.len()])
            } else {
                driver::launch_kernel(
                    f,
                    (grid.blocks.0, grid.blocks.1, 1),
                    (grid.threads.0, grid.threads.1, 1),
                    0,
                    self.gpu.stream.cu_stream(),
                    &mut params[..args.len()],
                )
            }
        };
        self.finish(op, r)
    }

    /// After an op was queued: count it, close its timing bracket, check it.
    fn finish<E: Sentence>(&mut self, op: &'static str, r: Result<(), E>) -> Result<(), BackendError> {
        self.ops_queued += 1;
        self.timer.after(&self.gpu);
        self.check(op, r)
    }

    /// Copies host data into the arena.
    pub(crate) fn upload<T: Element>(&mut self, dst: Buf<T>, src: &[T]) -> Result<(), BackendError> {
        self.enter("copy to the GPU")?;
        let ptr = self.address(dst)?;
        // SAFETY: `dst` lies in the arena and holds `src.len()` elements (the
        // caller checked the lengths). The source is pageable host memory,
        // which the driver stages before returning, so `src` may be reused
        // as soon as this returns.
        self.timer.before(&self.gpu, "copy to the GPU", self.capturing);
        self.gpu.calls.count(Call::Copy);
        let r = unsafe { driver::memcpy_htod_async(ptr, src, self.gpu.stream.cu_stream()) };
        self.finish("copy to the GPU", r)
    }

    /// Copies arena data to the host, waiting for it.
    pub(crate) fn download<T: Element>(&mut self, src: Buf<T>, dst: &mut [T]) -> Result<(), BackendError> {
        self.enter("copy from the GPU")?;
        if self.capturing {
            return Err(BackendError::Internal(
                "a captured step cannot read from the GPU: it only queues work; read after replaying it",
            ));
        }
        let ptr = self.address(src)?;
        self.gpu.calls.count(Call::Copy);
        // SAFETY: `src` lies in the arena and holds `dst.len()` elements; we
        // wait for the copy before `dst` is released to the caller.
        let r = unsafe { driver::memcpy_dtoh_async(dst, ptr, self.gpu.stream.cu_stream()) };
        self.check("copy from the GPU", r)?;
        self.synchronize("copy from the GPU")
    }

    /// Sets every element of `dst` to `value`.
    pub(crate) fn fill<T: Element>(&mut self, dst: Buf<T>, value: T) -> Result<(), BackendError> {
        self.enter("fill")?;
        let ptr = self.address(dst)?;
        let stream = self.gpu.stream.cu_stream();
        self.timer.before(&self.gpu, "fill", self.capturing);
        self.gpu.calls.count(Call::Fill);
        // SAFETY: the range is `dst`, inside the arena; a 4-byte element is
        // written as its 32-bit pattern, a 2-byte one (bf16) as its 16-bit
        // pattern, a byte as itself.
        let r = unsafe {
            match T::SIZE {
                4 => sys::cuMemsetD32Async(ptr, value.bit_pattern(), dst.len(), stream).result(),
                2 => sys::cuMemsetD16Async(ptr, value.bit_pattern() as u16, dst.len(), stream).result(),
                _ => sys::cuMemsetD8Async(ptr, value.bit_pattern() as u8, dst.bytes(), stream).result(),
            }
        };
        self.finish("fill", r)
    }

    /// `dst += src`, for buffers of one length ([`super::Backend::add_assign`]
    /// checks it).
    pub(crate) fn add_assign(&mut self, dst: FloatBuf, src: FloatBuf) -> Result<(), BackendError> {
        let n = dst.len();
        self.launch(
            kernels::ADD_ASSIGN.of(dst.dtype()),
            Grid::over(n),
            &[dst.into(), src.into(), Arg::U32(n as u32)],
        )
    }

    /// This GPU's rank and the number of GPUs it trains with.
    pub(crate) fn world(&self) -> (usize, usize) {
        self.nccl.as_ref().map_or((0, 1), |n| (n.rank(), n.world()))
    }

    /// Sums `buf` across the ranks in place, on the communication stream,
    /// after everything queued so far; later kernels that read it must come
    /// after [`CudaBackend::join_collectives`]. Alone, nothing to do.
    pub(crate) fn all_reduce_sum(&mut self, buf: Buf<f32>) -> Result<(), BackendError> {
        if self.nccl.is_none() {
            return Ok(());
        }
        self.enter("ncclAllReduce")?;
        let ptr = self.address(buf)?;
        let compute = self.gpu.stream.cu_stream();
        self.gpu.calls.count(Call::Nccl);
        let r = match self.nccl.as_mut() {
            // SAFETY: `buf` lies in the arena (checked by `address`), which
            // outlives the communicator; the ops that write it were queued
            // before this on `compute`, and those that read it wait for
            // `join_collectives`.
            Some(nccl) => unsafe { nccl.all_reduce_sum(compute, ptr, buf.len()) },
            None => Ok(()),
        };
        self.ops_queued += 1;
        match r {
            Ok(()) => self.check::<&str>("ncclAllReduce", Ok(())),
            Err(e) => Err(self.poison("ncclAllReduce", e)),
        }
    }

    /// Makes the compute stream wait for every sum queued so far.
    pub(crate) fn join_collectives(&mut self) -> Result<(), BackendError> {
        let compute = self.gpu.stream.cu_stream();
        let r = match self.nccl.as_mut() {
            Some(nccl) => {
                self.gpu.calls.count(Call::Nccl);
                nccl.join(compute)
            }
            None => return Ok(()),
        };
        r.map_err(|e| self.poison("joining the NCCL stream", e))
    }

    /// Creates the events that time up to `ops` ops of a step. Call at
    /// start-up: events may take device memory.
    pub(crate) fn enable_timing(&mut self, ops: usize) -> Result<(), BackendError> {
        self.enter("cuEventCreate")?;
        let gpu = self.gpu.clone();
        self.timer
            .create(&gpu, ops)
            .map_err(|e| self.poison("cuEventCreate", e))
    }

    /// Brackets every op with events until [`CudaBackend::finish_timing`];
    /// false when timing was not enabled.
    pub(crate) fn start_timing(&mut self) -> bool {
        self.timer.start()
    }

    /// Stops bracketing ops (those bracketed keep their events: in a
    /// captured graph, each replay records them again).
    pub(crate) fn pause_timing(&mut self) {
        self.timer.pause();
    }

    /// Waits for the timed ops and returns how long each took, and the GPU
    /// time from the first op's start to the last one's end.
    pub(crate) fn finish_timing(&mut self, out: &mut Vec<OpTime>) -> Result<Option<f64>, BackendError> {
        self.synchronize("timing a step")?;
        self.timer
            .collect(&self.gpu, out)
            .map_err(|e| self.poison("timing a step", e))?;
        self.timer.span(&self.gpu).map_err(|e| self.poison("timing a step", e))
    }

    /// Total and free device memory, as `cuMemGetInfo` reports them.
    pub(crate) fn memory_info(&mut self) -> Result<(usize, usize), BackendError> {
        self.enter("cuMemGetInfo")?;
        self.synchronize("cuMemGetInfo")?;
        self.gpu.calls.count(Call::MemoryInfo);
        match self.gpu.memory_info() {
            Ok((free, total)) => Ok((total, free)),
            Err(e) => Err(self.poison("cuMemGetInfo", e)),
        }
    }
}

/// `cuLaunchKernel` with the programmatic-serialization attribute: the
/// driver may start `f` once the previous kernel's blocks have exited,
/// before that kernel completes (every kernel of ours first waits for it:
/// `PDL_WAIT`, common.cu).
///
/// # Safety
/// As `driver::launch_kernel`: `f` a loaded kernel whose parameters
/// `params` points to, in order, and whose first statement is `PDL_WAIT()`.
#[cfg(feature = "cuda")]
unsafe fn launch_dependent(
    f: cudarc::driver::sys::CUfunction,
    grid: Grid,
    stream: cudarc::driver::sys::CUstream,
    params: &mut [*mut c_void],
) -> Result<(), driver::DriverError> {
    use cudarc::driver::sys;
    // SAFETY: a zeroed union is a valid value; its int member is then set.
    let mut value: sys::CUlaunchAttributeValue = unsafe { std::mem::zeroed() };
    value.programmaticStreamSerializationAllowed = 1;
    let mut attr = sys::CUlaunchAttribute {
        id: sys::CUlaunchAttributeID::CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION,
        pad: [0; 4],
        value,
    };
    let config = sys::CUlaunchConfig {
        gridDimX: grid.blocks.0,
        gridDimY: grid.blocks.1,
        gridDimZ: 1,
        blockDimX: grid.threads.0,
        blockDimY: grid.threads.1,
        blockDimZ: 1,
        sharedMemBytes: 0,
        hStream: stream,
        attrs: &mut attr,
        numAttrs: 1,
    };
    // SAFETY: `config` and `attr` outlive the call, which copies them; the
    // caller vouches for `f` and `params` as for `cuLaunchKernel`.
    unsafe { sys::cuLaunchKernelEx(&config, f, params.as_mut_ptr(), std::ptr::null_mut()) }.result()
}

/// Four bytes in the low half of an 8-byte slot (as the kernel reads them).
#[cfg(feature = "cuda")]
fn widen(b: [u8; 4]) -> [u8; 8] {
    [b[0], b[1], b[2], b[3], 0, 0, 0, 0]
}

#[cfg(feature = "cuda")]
impl Drop for CudaBackend {
    fn drop(&mut self) {
        // No kernel may still be using the memory when it is freed.
        if self.poisoned.is_none() {
            let _ = self.synchronize("releasing the arena");
        }
    }
}
