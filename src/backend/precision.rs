//! The arithmetic of a GPU's convolutions and matrix products.
//!
//! `Fp32` (the default) keeps IEEE single precision with fused multiply-adds
//! everywhere, so a GPU run matches the CPU within float rounding. `Tf32`
//! lets cuDNN and cuBLAS run them on the tensor cores with inputs rounded to
//! TF32 (a 10-bit mantissa) and fp32 accumulation, as PyTorch's
//! `allow_tf32` does: faster, about three decimal digits per product. The
//! `Bf16` is mixed precision, as PyTorch's bf16 autocast: convolutions and
//! matrix products take bf16 inputs on the tensor cores and accumulate in
//! fp32, and the activations and their gradients between them are kept in
//! bf16 (half the bytes); batch-norm statistics, the loss and every sum
//! are computed in fp32, and the parameters, their gradients and the
//! optimizer's state stay fp32 (the step casts the weights to bf16 as it
//! uses them). The CPU computes in fp32 only; a device refuses `Tf32` and
//! `Bf16` there rather than ignoring them, so a result never claims a
//! precision it did not use.

use crate::base::{DType, Layout};
use std::fmt;
use std::str::FromStr;

/// See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Precision {
    /// IEEE single precision, FMA math.
    #[default]
    Fp32,
    /// Tensor-core math with TF32 inputs and fp32 accumulation (GPU only).
    Tf32,
    /// Mixed precision: bf16 activations, fp32 master weights (GPU only).
    Bf16,
}

impl Precision {
    /// The type activations are kept in, and convolutions and matrix
    /// products take their inputs in.
    pub fn activations(self) -> DType {
        match self {
            Self::Fp32 | Self::Tf32 => DType::F32,
            Self::Bf16 => DType::Bf16,
        }
    }

    /// The layout convolutions take their 4-D inputs in, and so most of a
    /// step's activations: channels last where the tensor cores run them
    /// (cuDNN's tensor-core kernels read NHWC; given NCHW they transpose
    /// inside or run slower ones: ResNet-18's TF32 step at batch 512 took
    /// 17.7 ms on the H200 in NCHW, 12.5 in NHWC), NCHW under FMA math,
    /// where cuDNN's fp32 algorithms are fastest (35.4 against 53.8 ms).
    pub fn layout(self) -> Layout {
        match self {
            Self::Fp32 => Layout::Nchw,
            Self::Tf32 | Self::Bf16 => Layout::Nhwc,
        }
    }

    /// Every precision, in the order a user is shown them.
    pub const ALL: [Self; 3] = [Self::Fp32, Self::Tf32, Self::Bf16];

    /// The name it is parsed from and printed as: "fp32", "tf32", "bf16".
    pub fn name(self) -> &'static str {
        match self {
            Self::Fp32 => "fp32",
            Self::Tf32 => "tf32",
            Self::Bf16 => "bf16",
        }
    }
}

impl fmt::Display for Precision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Precision {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        Self::ALL
            .into_iter()
            .find(|p| p.name() == text)
            .ok_or_else(|| format!("unknown precision {text:?}; expected fp32, tf32 or bf16"))
    }
}

#[cfg(test)]
mod tests {
    use super::Precision;

    #[test]
    fn each_precision_parses_from_the_name_it_prints() {
        for p in Precision::ALL {
            assert_eq!(p.to_string().parse::<Precision>(), Ok(p));
        }
        assert_eq!(Precision::default(), Precision::Fp32);
        assert_eq!(serde_json::to_string(&Precision::Tf32).unwrap(), "\"tf32\"");
        let err = "TF32".parse::<Precision>().unwrap_err();
        assert!(err.contains("expected fp32, tf32 or bf16"), "{err}");
        assert!("fp16".parse::<Precision>().is_err());
        assert_eq!(Precision::Bf16.activations(), crate::base::DType::Bf16);
        assert_eq!(Precision::Tf32.activations(), crate::base::DType::F32);
    }

    /// Tensor-core precisions run their convolutions channels last; fp32
    /// stays NCHW, where its FMA algorithms are fastest and match the CPU.
    #[test]
    fn tensor_core_precisions_run_channels_last() {
        use crate::base::Layout;
        let layouts = Precision::ALL.map(|p| (p, p.layout()));
        assert_eq!(
            layouts,
            [
                (Precision::Fp32, Layout::Nchw),
                (Precision::Tf32, Layout::Nhwc),
                (Precision::Bf16, Layout::Nhwc)
            ]
        );
    }
}
