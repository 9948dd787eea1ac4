//! How a 4-D tensor's elements lie in memory.

/// How a 4-D tensor's elements lie in memory; its shape is `[N, C, H, W]`
/// in both. NCHW is PyTorch's default and an fp32 step's; NHWC (channels
/// last) is a TF32 or mixed-precision step's activations', the layout
/// cuDNN's tensor-core convolutions run fastest on (on NCHW ones they
/// transpose inside, given workspace, or fall back to slow kernels). A tensor of
/// another rank is always `Nchw` (row-major).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Layout {
    /// Channels first, row-major: `[N][C][H][W]`.
    #[default]
    Nchw,
    /// Channels last: `[N][H][W][C]`.
    Nhwc,
}
