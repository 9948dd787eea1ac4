//! The compute policy: how a step computes, as one plain value. A device
//! carries it from when it is set to the run's arithmetic, its runtime
//! from then on, and each step a copy of it, made when the step is
//! assembled; ops read the step's, and the backend's calls that depend on
//! it (a convolution's algorithms, a matrix product's math) are handed it.

use super::{BackendError, DeviceKind};
use crate::base::{DType, Layout};

use super::Precision;

/// See the module documentation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Policy {
    /// The arithmetic of convolutions and matrix products (see
    /// [`Precision`]).
    pub precision: Precision,
    /// Convolutions use deterministic algorithms only, so a run repeats bit
    /// for bit. cuDNN's fastest weight- and input-gradient algorithms sum
    /// with atomics, so two runs of one seed differ in the last bits, and
    /// now and then that flips a max-pool choice and the runs part (seen on
    /// the H200: 1e-3 apart in loss after one epoch). Deterministic, it cost
    /// 1.3× (batch 100) to 2.5× (batch 1000) in step time on the MNIST CNN
    /// through cuDNN; its small convolutions now run bumpgrad's own kernels
    /// there (ops/conv2d/direct.rs), about 1.2× the default's time at both
    /// batches (bench/results/staged-loads-2026-12-06-h100.txt).
    /// The CPU's kernels always are.
    pub deterministic: bool,
}

impl Policy {
    /// The type activations are kept in, and convolutions and matrix
    /// products take their inputs in.
    pub fn activations(self) -> DType {
        self.precision.activations()
    }

    /// The layout convolutions take their 4-D inputs in: channels last
    /// under TF32 and bf16, NCHW under fp32 (see [`Precision::layout`]).
    pub fn layout(self) -> Layout {
        self.precision.layout()
    }

    /// Whether fp32 convolutions and matrix products may run TF32
    /// tensor-op math.
    pub fn tf32(self) -> bool {
        self.precision == Precision::Tf32
    }

    /// Refuses a policy the device cannot follow: the CPU computes in fp32
    /// only, so `Tf32` and `Bf16` are refused there rather than ignored (a
    /// result never claims a precision it did not use).
    pub(crate) fn check(self, on: DeviceKind) -> Result<(), BackendError> {
        let what = match (on, self.precision) {
            (DeviceKind::Cpu, Precision::Tf32) => "TF32 convolutions and matrix products",
            (DeviceKind::Cpu, Precision::Bf16) => "bf16 mixed-precision kernels",
            _ => return Ok(()),
        };
        Err(BackendError::NeedsCuda { what, on })
    }
}
