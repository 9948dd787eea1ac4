//! Why the GPU cannot be used, or stopped being usable.

/// Failures of the CUDA backend. Every variant says what to do next.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    #[error("{library} was not found: {hint}")]
    MissingLibrary { library: &'static str, hint: &'static str },
    #[error("no CUDA GPU is usable ({detail}); check `nvidia-smi` and CUDA_VISIBLE_DEVICES, or pass --device cpu")]
    NoDevice { detail: String },
    #[error("CUDA error in {op}: {detail}; the GPU's state is no longer trusted, so the run stops (rerun with BUMPGRAD_CUDA_SYNC=1 to pin the failing op down)")]
    Failed { op: &'static str, detail: String },
    #[error("internal error: the CUDA kernels did not compile: {log}")]
    Compile { log: String },
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
        }
    }

    pub(crate) fn failed(op: &'static str, detail: impl std::fmt::Display) -> Self {
        Self::Failed {
            op,
            detail: detail.to_string(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::CudaError;

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
        assert!(
            !broken.iter().any(CudaError::is_unavailable),
            "a broken GPU must not be skipped"
        );
    }
}
