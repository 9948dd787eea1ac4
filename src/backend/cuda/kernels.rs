//! Our own CUDA kernels: their sources live beside their ops
//! (`src/ops/<op>/kernels.cu`); here they are compiled once, with NVRTC, for
//! the GPU's architecture, when the device is opened, and looked up by name.

use super::CudaError;
use cudarc::driver::{result as driver, sys};
use std::ffi::CString;

macro_rules! kernels {
    ($($variant:ident => $name:literal),* $(,)?) => {
        /// Every kernel of ours, by the name it has in its `.cu` file.
        #[derive(Debug, Clone, Copy, PartialEq, Eq)]
        pub enum Kernel {
            $($variant),*
        }

        impl Kernel {
            const ALL: &'static [Kernel] = &[$(Kernel::$variant),*];

            pub fn name(self) -> &'static str {
                match self {
                    $(Kernel::$variant => $name),*
                }
            }
        }
    };
}

kernels! {
    AddAssign => "add_assign",
    GatherImages => "gather_images",
    GatherLabels => "gather_labels",
    ReluForward => "relu_forward",
    ReluBackward => "relu_backward",
    MaxPoolForward => "maxpool_forward",
    MaxPoolBackward => "maxpool_backward",
    Dropout => "dropout_apply",
    NllForward => "nll_forward",
    NllBackward => "nll_backward",
    BiasRows => "bias_rows",
    BiasRowsGrad => "bias_rows_grad",
    ConvBiasAdd => "conv_bias_add",
    ConvBiasGrad => "conv_bias_grad",
    FinishStep => "finish_step",
    GatherBatch => "gather_batch",
    MaxPoolReluForward => "maxpool_relu_forward",
    SgdMulti => "sgd_multi",
    DenseForward => "dense_forward",
    DenseInputGrad => "dense_input_grad",
    DenseWeightGrad => "dense_weight_grad",
    SgdUpdate => "sgd_update",
    AdamwUpdate => "adamw_update",
}

/// The sources, in one translation unit: each op's file, then the backend's.
fn source() -> String {
    [
        include_str!("common.cu"),
        crate::ops::cursor::CUDA_SOURCE,
        crate::ops::gather::CUDA_SOURCE,
        crate::ops::relu::CUDA_SOURCE,
        crate::ops::maxpool2d::CUDA_SOURCE,
        crate::ops::dropout::CUDA_SOURCE,
        crate::ops::log_softmax_nll::CUDA_SOURCE,
        crate::ops::linear::CUDA_SOURCE,
        crate::ops::conv2d::CUDA_SOURCE,
        crate::ops::dense::CUDA_SOURCE,
        crate::ops::sgd_update::CUDA_SOURCE,
        crate::ops::adamw_update::CUDA_SOURCE,
        crate::optim::sgd::CUDA_SOURCE,
    ]
    .join("\n")
}

/// The loaded module and a function handle per [`Kernel`].
pub(crate) struct Kernels {
    module: sys::CUmodule,
    functions: Vec<sys::CUfunction>,
}

// SAFETY: a loaded module and its function handles are immutable and may be
// used to launch from any thread; the module is unloaded once, on drop.
unsafe impl Send for Kernels {}
unsafe impl Sync for Kernels {}

impl Kernels {
    /// Compiles every kernel for compute capability `major.minor` and loads
    /// them into the current context.
    pub fn compile((major, minor): (i32, i32)) -> Result<Self, CudaError> {
        let options = cudarc::nvrtc::CompileOptions {
            options: vec![format!("--gpu-architecture=compute_{major}{minor}")],
            name: Some("bumpgrad.cu".into()),
            ..Default::default()
        };
        let ptx = cudarc::nvrtc::compile_ptx_with_opts(source(), options).map_err(|e| CudaError::Compile {
            log: match e {
                cudarc::nvrtc::CompileError::CompileError { log, .. } => log.to_string_lossy().into_owned(),
                other => format!("{other:?}"),
            },
        })?;
        let text = CString::new(ptx.to_src()).map_err(|_| CudaError::Compile {
            log: "NVRTC returned PTX with a NUL byte".into(),
        })?;
        // SAFETY: `text` is a NUL-terminated PTX image that lives through the
        // call; the driver copies what it needs.
        let module = unsafe { driver::module::load_data(text.as_ptr().cast()) }
            .map_err(|e| CudaError::failed("loading the compiled kernels", e))?;
        let mut kernels = Self {
            module,
            functions: Vec::with_capacity(Kernel::ALL.len()),
        };
        for kernel in Kernel::ALL {
            let name = CString::new(kernel.name()).expect("kernel names have no NUL");
            // SAFETY: the module was loaded above and is still loaded.
            let f = unsafe { driver::module::get_function(kernels.module, name) }
                .map_err(|e| CudaError::failed(kernel.name(), e))?;
            kernels.functions.push(f);
        }
        Ok(kernels)
    }

    pub fn function(&self, kernel: Kernel) -> sys::CUfunction {
        self.functions[kernel as usize]
    }
}

impl Drop for Kernels {
    fn drop(&mut self) {
        // SAFETY: loaded once in `compile`, unloaded once here; the function
        // handles go with it and are never used again.
        let _ = unsafe { driver::module::unload(self.module) };
    }
}
