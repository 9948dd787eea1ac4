//! Why the GPU cannot be used, or stopped being usable.

#[cfg(feature = "cuda")]
use cudarc::driver::DriverError;

/// Failures of the CUDA backend. Every variant says what to do next.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    /// A library the bindings load at run time is not installed.
    #[error("{library} was not found: {hint}")]
    MissingLibrary {
        /// The library ("libcudnn.so.9").
        library: &'static str,
        /// What to install, or where.
        hint: &'static str,
    },
    /// The driver found no GPU to use.
    #[error("no CUDA GPU is usable ({detail}); check `nvidia-smi` and CUDA_VISIBLE_DEVICES")]
    NoDevice {
        /// What the driver said.
        detail: String,
    },
    /// A CUDA call failed; the backend refuses all further work
    /// ([`CudaError::Poisoned`]).
    #[error("CUDA error in {op}: {detail}; the GPU's state is no longer trusted, so the run stops (rerun with BUMPGRAD_CUDA_SYNC=1 to pin the failing op down)")]
    Failed {
        /// What was being done.
        op: &'static str,
        /// What the library said.
        detail: String,
    },
    /// NVRTC refused the kernel sources: a defect of ours, never the GPU's.
    #[error("internal error: the CUDA kernels did not compile: {log}")]
    Compile {
        /// NVRTC's log.
        log: String,
    },
    /// A launch of a kernel no op registered when the device opened.
    #[error("internal error: no CUDA kernel named `{name}` was handed to the device when it was opened")]
    UnknownKernel {
        /// The kernel's entry.
        name: &'static str,
    },
    /// Two owners registered a kernel of one name.
    #[error("internal error: the CUDA kernel `{name}` is registered twice, by {first} and by {second}")]
    DuplicateKernel {
        /// The kernel's entry.
        name: &'static str,
        /// The owner registered first.
        first: &'static str,
        /// The owner registered second.
        second: &'static str,
    },
    /// Work asked of the GPU after an earlier failure left its state untrusted.
    #[error(
        "the GPU backend refused {op}: an earlier CUDA error in {first} left its state untrusted; start a new run"
    )]
    Poisoned {
        /// The work refused.
        op: &'static str,
        /// What failed first.
        first: &'static str,
    },
    /// This build has no GPU backend: it was built without the `cuda`
    /// feature. Counts as an absent GPU.
    #[error("this bumpgrad was built without the `cuda` feature, so it has no GPU backend; rebuild it with default features to train on a GPU")]
    NotBuilt,
}

impl CudaError {
    /// Whether the GPU is absent rather than broken: no driver, no device,
    /// a library missing. Only these let `--device auto` fall back to the
    /// CPU, and only these let a GPU test skip; a kernel that does not
    /// compile or a handle that cannot be made is a defect to report.
    pub fn is_unavailable(&self) -> bool {
        matches!(
            self,
            Self::MissingLibrary { .. } | Self::NoDevice { .. } | Self::NotBuilt
        )
    }

    /// The cause alone, without the hint (for `--device auto`'s one line).
    pub fn reason(&self) -> String {
        match self {
            Self::MissingLibrary { library, .. } => format!("{library} not found"),
            Self::NoDevice { detail } => detail.clone(),
            Self::Failed { op, detail } => format!("{op} failed: {detail}"),
            Self::Compile { .. } => "the CUDA kernels did not compile".into(),
            Self::Poisoned { first, .. } => format!("an earlier CUDA error in {first}"),
            Self::UnknownKernel { name } => format!("no CUDA kernel named `{name}`"),
            Self::DuplicateKernel { name, .. } => format!("the CUDA kernel `{name}` is registered twice"),
            Self::NotBuilt => "built without the `cuda` feature".into(),
        }
    }

    #[cfg(feature = "cuda")]
    pub(crate) fn failed(op: &'static str, detail: impl Sentence) -> Self {
        Self::Failed {
            op,
            detail: detail.sentence(),
        }
    }

    /// The driver could not open a GPU.
    #[cfg(feature = "cuda")]
    pub(crate) fn no_device(e: DriverError) -> Self {
        Self::NoDevice { detail: e.sentence() }
    }
}

/// A library's error as people read it: "no CUDA-capable device is detected
/// (CUDA_ERROR_NO_DEVICE)", not cudarc's `Debug` form
/// (`DriverError(CUDA_ERROR_NO_DEVICE, ...)`).
#[cfg(feature = "cuda")]
pub(crate) trait Sentence {
    fn sentence(&self) -> String;
}

#[cfg(feature = "cuda")]
impl Sentence for DriverError {
    fn sentence(&self) -> String {
        // The variant's name needs no call into the driver; the text does,
        // and cudarc panics on a call into a library it cannot load.
        let name = format!("{:?}", self.0);
        // SAFETY: only tries to dlopen the driver and closes it.
        if !unsafe { cudarc::driver::sys::is_culib_present() } {
            return name;
        }
        match self.error_string() {
            Ok(text) => format!("{} ({name})", text.to_string_lossy()),
            Err(_) => name,
        }
    }
}

#[cfg(feature = "cuda")]
impl Sentence for cudarc::cudnn::result::CudnnError {
    fn sentence(&self) -> String {
        format!("cuDNN returned {:?}", self.0)
    }
}

#[cfg(feature = "cuda")]
impl Sentence for cudarc::cublas::result::CublasError {
    fn sentence(&self) -> String {
        format!("cuBLAS returned {:?}", self.0)
    }
}

#[cfg(feature = "cuda")]
impl Sentence for &str {
    fn sentence(&self) -> String {
        (*self).to_owned()
    }
}

#[cfg(feature = "cuda")]
impl Sentence for String {
    fn sentence(&self) -> String {
        self.clone()
    }
}

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::{CudaError, DriverError};

    #[test]
    fn only_an_absent_gpu_counts_as_unavailable() {
        let absent = [
            CudaError::MissingLibrary {
                library: "cuDNN",
                hint: "install it",
            },
            CudaError::NoDevice { detail: "none".into() },
        ];
        let broken = [
            CudaError::Compile {
                log: "syntax error".into(),
            },
            CudaError::failed("creating the stream", "out of memory"),
            CudaError::Poisoned {
                op: "relu",
                first: "conv2d",
            },
        ];
        assert!(absent.iter().all(CudaError::is_unavailable));
        let no_device = CudaError::no_device(DriverError(cudarc::driver::sys::cudaError_enum::CUDA_ERROR_NO_DEVICE));
        let text = no_device.to_string();
        assert!(
            text.contains("(CUDA_ERROR_NO_DEVICE)") || text.contains("no usable GPU (CUDA_ERROR_NO_DEVICE)"),
            "{text}"
        );
        assert!(!text.contains("DriverError"), "a sentence, not Debug output: {text}");
        assert!(
            !broken.iter().any(CudaError::is_unavailable),
            "a broken GPU must not be skipped"
        );
    }
}
