//! The CUDA backend's place in the seam. Until it is built (its own issue),
//! asking for it is a typed error with a hint, never a panic.

/// Why the GPU cannot be used.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CudaError {
    #[error("this build of bumpgrad has no CUDA backend yet; use --device cpu (or auto)")]
    NotBuilt,
}

impl CudaError {
    /// The cause alone, without the hint (for `--device auto`'s one line).
    pub fn reason(&self) -> &'static str {
        match self {
            Self::NotBuilt => "this build of bumpgrad has no CUDA backend yet",
        }
    }
}

/// Why no GPU is usable on this machine with this build.
pub fn unavailable() -> CudaError {
    CudaError::NotBuilt
}
