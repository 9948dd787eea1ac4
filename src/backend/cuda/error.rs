//! Why the GPU cannot be used, or stopped being usable.

use cudarc::driver::DriverError;

/// Failures of the CUDA backend. Every variant says what to do next.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    #[error("{library} was not found: {hint}")]
    MissingLibrary { library: &'static str, hint: &'static str },
    #[error("no CUDA GPU is usable ({detail}); check `nvidia-smi` and CUDA_VISIBLE_DEVICES")]
    NoDevice { detail: String },
    #[error("CUDA error in {op}: {detail}; the GPU's state is no longer trusted, so the run stops (rerun with BUMPGRAD_CUDA_SYNC=1 to pin the failing op down)")]
    Failed { op: &'static str, detail: String },
    #[error("internal error: the CUDA kernels did not compile: {log}")]
    Compile { log: String },
    #[error("internal error: no CUDA kernel named `{name}` was handed to the device when it was opened")]
    UnknownKernel { name: &'static str },
    #[error("internal error: the CUDA kernel `{name}` is registered twice, by {first} and by {second}")]
    DuplicateKernel {
        name: &'static str,
        first: &'static str,
        second: &'static str,
    },
    #[error(
        "the GPU backend refused {op}: an earlier CUDA error in {first} left its state untrusted; start a new run"
    )]
    Poisoned { op: &'static str, first: &'static str },
}

impl CudaError {
    /// Whether the GPU is absent rather than broken: no driver, no device,
    /// a library missing. Only these let `--device auto` fall back to the
    /// CPU, and only these let a GPU test skip; a kernel that does not
    /// compile or a handle that cannot be made is a defect to report.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Self::MissingLibrary { .. } | Self::NoDevice { .. })
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
        }
    }

    pub(crate) fn failed(op: &'static str, detail: impl Sentence) -> Self {
        Self::Failed {
            op,
            detail: detail.sentence(),
        }
    }

    /// The driver could not open a GPU.
    pub(crate) fn no_device(e: DriverError) -> Self {
        Self::NoDevice { detail: e.sentence() }
    }
}

/// A library's error as people read it: "no CUDA-capable device is detected
/// (CUDA_ERROR_NO_DEVICE)", not cudarc's `Debug` form
/// (`DriverError(CUDA_ERROR_NO_DEVICE, ...)`).
pub(crate) trait Sentence {
    fn sentence(&self) -> String;
}

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

impl Sentence for cudarc::cudnn::result::CudnnError {
    fn sentence(&self) -> String {
        format!("cuDNN returned {:?}", self.0)
    }
}

impl Sentence for cudarc::cublas::result::CublasError {
    fn sentence(&self) -> String {
        format!("cuBLAS returned {:?}", self.0)
    }
}

impl Sentence for &str {
    fn sentence(&self) -> String {
        (*self).to_owned()
    }
}

impl Sentence for String {
    fn sentence(&self) -> String {
        self.clone()
    }
}

#[cfg(test)]
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
