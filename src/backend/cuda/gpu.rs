//! One GPU opened for training: its context, the stream every kernel runs
//! on, the cuDNN and cuBLAS handles, the compiled kernels, and the cuDNN
//! plans of the convolutions seen so far (one per shape and policy: the
//! policy is the step's, handed in, never a setting of the GPU's).
//!
//! Everything here is made before the arena's one allocation (library
//! handles may take device memory of their own when they are created, which
//! is why they come first) and is shared, through an `Arc`, with the dry
//! arena that measures a run: cuDNN's workspace sizes are the device's
//! answer, so the measurement asks the device.

use super::calls::{Call, CallCounter, CudaCalls};
use super::cudnn::{ConvDims, ConvPlan};
use super::kernels::{KernelSource, Kernels};
use super::CudaError;
use crate::backend::Policy;
use cudarc::cublas::sys as blas_sys;
use cudarc::cudnn::sys as dnn_sys;
use cudarc::driver::{result as driver, CudaContext, CudaStream};
use std::sync::{Arc, Mutex};

/// The library handles. cuDNN and cuBLAS handles must not be used by two
/// threads at once, so they sit behind a mutex.
pub(crate) struct Libs {
    pub cudnn: dnn_sys::cudnnHandle_t,
    pub cublas: blas_sys::cublasHandle_t,
    /// Whether the cuBLAS handle's math mode allows TF32 tensor ops (it
    /// starts with the default math): a product under another policy sets
    /// it first (see [`Libs::use_tf32`]).
    tf32: bool,
}

// SAFETY: the handles are plain pointers to library state that may move
// between threads; the mutex around `Libs` keeps two threads from using them
// at once, which is the libraries' only requirement.
unsafe impl Send for Libs {}

/// An opened GPU. See the module documentation.
pub struct Gpu {
    // Field order is drop order: plans and kernels go before the handles,
    // the handles before the stream and the context they live in.
    plans: Mutex<Vec<Arc<ConvPlan>>>,
    pub(crate) kernels: Kernels,
    pub(crate) libs: Mutex<Libs>,
    pub(crate) stream: Arc<CudaStream>,
    pub(crate) ctx: Arc<CudaContext>,
    name: String,
    capability: (i32, i32),
    /// Synchronise after every op (BUMPGRAD_CUDA_SYNC=1), so that an error
    /// raised asynchronously is reported with the op that caused it.
    pub(crate) sync_each_op: bool,
    /// Launch our kernels as programmatic dependents of the launch before
    /// them (sm_90 and later, unless BUMPGRAD_DEPENDENT_LAUNCHES=0): see
    /// `PDL_WAIT` in common.cu.
    pub(crate) dependent_launches: bool,
    /// The CUDA calls made on this GPU by the backends that hold it.
    pub(crate) calls: CallCounter,
}

/// Names each CUDA library we load, for the error when it is missing.
fn require(present: bool, library: &'static str, hint: &'static str) -> Result<(), CudaError> {
    if present {
        Ok(())
    } else {
        Err(CudaError::MissingLibrary { library, hint })
    }
}

/// Checks that every library loads before any is called: cudarc panics when
/// asked to call into a library it cannot find.
fn check_libraries() -> Result<(), CudaError> {
    // SAFETY: each check only tries to dlopen the library and closes it.
    unsafe {
        require(
            cudarc::driver::sys::is_culib_present(),
            "the CUDA driver (libcuda.so)",
            "install the NVIDIA driver",
        )?;
        require(
            cudarc::nvrtc::sys::is_culib_present(),
            "NVRTC (libnvrtc.so)",
            "install the CUDA toolkit's NVRTC (13.x) or add its folder to LD_LIBRARY_PATH",
        )?;
        require(
            cudarc::cublas::sys::is_culib_present(),
            "cuBLAS (libcublas.so)",
            "install cuBLAS 13 or add its folder to LD_LIBRARY_PATH",
        )?;
        require(
            cudarc::cudnn::sys::is_culib_present(),
            "cuDNN (libcudnn.so.9)",
            "install cuDNN 9 or add its folder to LD_LIBRARY_PATH",
        )?;
    }
    Ok(())
}

/// How many GPUs the driver sees (after CUDA_VISIBLE_DEVICES), without
/// opening any: a launcher counts before it starts a process per GPU.
pub fn device_count() -> Result<usize, CudaError> {
    // SAFETY: only tries to dlopen the driver and closes it.
    require(
        unsafe { cudarc::driver::sys::is_culib_present() },
        "the CUDA driver (libcuda.so)",
        "install the NVIDIA driver",
    )?;
    let count = driver::init()
        .and_then(|()| driver::device::get_count())
        .map_err(CudaError::no_device)?;
    Ok(count.max(0) as usize)
}

impl Gpu {
    /// Opens GPU `ordinal`: checks the libraries, creates the context, the
    /// stream and the library handles, and compiles the backend's kernels
    /// and `kernels` for its architecture.
    pub(crate) fn open(ordinal: usize, kernels: &[KernelSource]) -> Result<Arc<Self>, CudaError> {
        check_libraries()?;
        let count = driver::init()
            .and_then(|()| driver::device::get_count())
            .map_err(CudaError::no_device)?;
        if count < 1 {
            return Err(CudaError::NoDevice {
                detail: "the driver sees no GPU".into(),
            });
        }
        if ordinal >= count as usize {
            return Err(CudaError::NoDevice {
                detail: format!("GPU {ordinal} was asked for, but the driver sees {count}"),
            });
        }
        let ctx = CudaContext::new(ordinal).map_err(CudaError::no_device)?;
        // SAFETY: we never use cudarc's owning slices, whose cross-stream
        // ordering these events exist for; all our work is on one stream.
        unsafe { ctx.disable_event_tracking() };
        let failed = |op| move |e: driver::DriverError| CudaError::failed(op, e);
        let stream = ctx.new_stream().map_err(failed("creating the stream"))?;
        let name = ctx.name().map_err(failed("reading the GPU's name"))?;
        let capability = ctx
            .compute_capability()
            .map_err(failed("reading the compute capability"))?;
        let libs = Libs::new(&stream)?;
        let kernels = Kernels::compile(capability, kernels)?;
        Ok(Arc::new(Self {
            plans: Mutex::new(Vec::new()),
            kernels,
            libs: Mutex::new(libs),
            stream,
            ctx,
            name,
            capability,
            sync_each_op: std::env::var_os("BUMPGRAD_CUDA_SYNC").is_some_and(|v| v != "0"),
            dependent_launches: capability.0 >= 9
                && std::env::var_os("BUMPGRAD_DEPENDENT_LAUNCHES").is_none_or(|v| v != "0"),
            calls: CallCounter::default(),
        }))
    }

    /// The CUDA calls made on this GPU so far (see [`CudaCalls`]).
    pub(crate) fn calls(&self) -> CudaCalls {
        self.calls.read()
    }

    /// "NVIDIA H200 (sm_90)".
    pub(crate) fn describe(&self) -> String {
        format!("{} (sm_{}{})", self.name, self.capability.0, self.capability.1)
    }

    /// Makes this GPU's context current on the calling thread.
    pub(crate) fn enter(&self) -> Result<(), CudaError> {
        self.calls.count(Call::Context);
        self.ctx
            .bind_to_thread()
            .map_err(|e| CudaError::failed("binding the CUDA context", e))
    }

    /// Free and total device memory, as `cuMemGetInfo` reports them.
    pub(crate) fn memory_info(&self) -> Result<(usize, usize), CudaError> {
        self.enter()?;
        driver::mem_get_info().map_err(|e| CudaError::failed("cuMemGetInfo", e))
    }

    /// Every convolution shape planned so far, under every policy.
    pub(crate) fn conv_plans(&self) -> Vec<Arc<ConvPlan>> {
        self.plans.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The cuDNN plan of a convolution under `policy`, made the first time
    /// it is asked for: descriptors, algorithms and workspace sizes are
    /// chosen once. Its algorithms depend on the policy (deterministic
    /// ones only; TF32 tensor ops or not), so each policy has its own.
    pub(crate) fn conv_plan(&self, dims: ConvDims, policy: Policy) -> Result<Arc<ConvPlan>, CudaError> {
        let (deterministic, tf32) = (policy.deterministic, policy.tf32());
        let mut plans = self.plans.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(plan) = plans
            .iter()
            .find(|p| p.dims == dims && p.math() == (deterministic, tf32))
        {
            return Ok(plan.clone());
        }
        self.enter()?;
        let libs = self.libs.lock().unwrap_or_else(|e| e.into_inner());
        let index = u32::try_from(plans.len())
            .map_err(|_| CudaError::failed("planning a convolution", "more than 2^32 shapes"))?;
        let plan = Arc::new(ConvPlan::new(libs.cudnn, index, dims, deterministic, tf32)?);
        plans.push(plan.clone());
        Ok(plan)
    }
}

impl Libs {
    fn new(stream: &CudaStream) -> Result<Self, CudaError> {
        let cudnn = cudarc::cudnn::result::create_handle().map_err(|e| CudaError::failed("cudnnCreate", e))?;
        let cublas = match cudarc::cublas::result::create_handle() {
            Ok(h) => h,
            Err(e) => {
                // SAFETY: created just above and not used since.
                let _ = unsafe { cudarc::cudnn::result::destroy_handle(cudnn) };
                return Err(CudaError::failed("cublasCreate", e));
            }
        };
        let libs = Self {
            cudnn,
            cublas,
            tf32: false,
        };
        // SAFETY: both handles were created above; the stream outlives them
        // (Gpu drops the handles first).
        unsafe {
            cudarc::cudnn::result::set_stream(cudnn, stream.cu_stream() as dnn_sys::cudaStream_t)
                .map_err(|e| CudaError::failed("cudnnSetStream", e))?;
            cudarc::cublas::result::set_stream(cublas, stream.cu_stream() as blas_sys::cudaStream_t)
                .map_err(|e| CudaError::failed("cublasSetStream", e))?;
        }
        Ok(libs)
    }
}

impl Libs {
    /// Sets the cuBLAS handle's math mode for a product under a policy
    /// that does (`true`) or does not allow TF32 tensor ops, if it is not
    /// so already. `Fp32` holds products to FMA math, which matches the CPU
    /// within float rounding. A bf16 product runs on the tensor cores
    /// whatever the mode, with fp32 accumulation.
    pub(crate) fn use_tf32(&mut self, tf32: bool) -> Result<(), CudaError> {
        if self.tf32 == tf32 {
            return Ok(());
        }
        let mode = if tf32 {
            blas_sys::cublasMath_t::CUBLAS_TF32_TENSOR_OP_MATH
        } else {
            blas_sys::cublasMath_t::CUBLAS_DEFAULT_MATH
        };
        // SAFETY: the handle was created in `Libs::new` and lives as long as
        // `self`; the caller holds the mutex around `self`. The mode is host
        // state of the handle, read by the products queued after it.
        unsafe { blas_sys::cublasSetMathMode(self.cublas, mode) }
            .result()
            .map_err(|e| CudaError::failed("cublasSetMathMode", e))?;
        self.tf32 = tf32;
        Ok(())
    }
}

impl Drop for Libs {
    fn drop(&mut self) {
        // SAFETY: each handle was created once in `Libs::new` and is destroyed
        // once here; nothing can use it afterwards.
        unsafe {
            let _ = cudarc::cudnn::result::destroy_handle(self.cudnn);
            let _ = cudarc::cublas::result::destroy_handle(self.cublas);
        }
    }
}

impl Drop for Gpu {
    fn drop(&mut self) {
        // The handles and the module are torn down in the context.
        let _ = self.enter();
    }
}
