//! Layers: a few parameters declared under PyTorch's names together with the
//! op that uses them, so a model reads like its PyTorch definition
//! (`Conv2d::new(&pb.pp("conv1"), …)` declares `conv1.weight`).
//!
//! Each layer is `Copy` handles into the parameter store; its forward asks
//! the step for the parameters and runs one op.

use super::model::Mode;
use super::params::{Init, ParamBuilder};
use crate::ops::batch_norm2d::{BatchNormArgs, RunningStats};
use crate::ops::conv2d::Conv2dArgs;
use crate::tensor::{Param, Shape, Tensor};
use crate::Result;
use crate::Step;

/// `nn.Conv2d(c_in, c_out, kernel, stride, padding, bias)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2d {
    weight: Param,
    bias: Option<Param>,
    args: Conv2dArgs,
}

/// A convolution's sizes: square kernels, the same stride and padding on
/// both axes, as every network here uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvSpec {
    /// Input channels.
    pub c_in: usize,
    /// Output channels: the filters.
    pub c_out: usize,
    /// The kernel's side.
    pub kernel: usize,
    /// The step between output positions.
    pub stride: usize,
    /// Zeros added on every side.
    pub padding: usize,
}

impl ConvSpec {
    /// A `kernel`×`kernel` convolution keeping the map's size at stride 1
    /// (padding `kernel / 2`).
    pub const fn same(c_in: usize, c_out: usize, kernel: usize, stride: usize) -> Self {
        Self {
            c_in,
            c_out,
            kernel,
            stride,
            padding: kernel / 2,
        }
    }

    /// Inputs each output sums over: PyTorch's `fan_in`.
    pub const fn fan_in(&self) -> usize {
        self.c_in * self.kernel * self.kernel
    }

    /// PyTorch's `fan_out`: what Kaiming's `mode="fan_out"` scales by.
    pub const fn fan_out(&self) -> usize {
        self.c_out * self.kernel * self.kernel
    }
}

impl Conv2d {
    /// Declares `weight` (and `bias` when `bias` gives its initialiser).
    pub fn new(pb: &ParamBuilder<'_>, spec: ConvSpec, weight: Init, bias: Option<Init>) -> Result<Self> {
        let shape = Shape::new(&[spec.c_out, spec.c_in, spec.kernel, spec.kernel]);
        Ok(Self {
            weight: pb.param("weight", shape, weight)?,
            bias: match bias {
                Some(init) => Some(pb.param("bias", Shape::new(&[spec.c_out]), init)?),
                None => None,
            },
            args: Conv2dArgs {
                stride: spec.stride,
                padding: spec.padding,
            },
        })
    }

    /// The convolution of `x`, `[N, c_in, H, W]`, plus the bias if it has one.
    pub fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>) -> Result<Tensor<'s>> {
        let w = s.param(&self.weight);
        let b = self.bias.map(|b| s.param(&b));
        x.conv2d(s, w, b, self.args)
    }
}

/// `nn.BatchNorm2d(channels)`: affine, momentum 0.1, eps 1e-5, running
/// statistics tracked.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchNorm2d {
    weight: Param,
    bias: Param,
    stats: RunningStats,
}

impl BatchNorm2d {
    /// Declares, in PyTorch's `state_dict` order, `weight` (1), `bias` (0),
    /// and the buffers `running_mean` (0), `running_var` (1) and
    /// `num_batches_tracked` (0, a scalar).
    pub fn new(pb: &ParamBuilder<'_>, channels: usize) -> Result<Self> {
        let c = Shape::new(&[channels]);
        Ok(Self {
            weight: pb.param("weight", c, Init::Constant(1.0))?,
            bias: pb.param("bias", c, Init::Constant(0.0))?,
            stats: RunningStats {
                mean: pb.buffer("running_mean", c, Init::Constant(0.0))?,
                var: pb.buffer("running_var", c, Init::Constant(1.0))?,
                batches: pb.buffer("num_batches_tracked", Shape::new(&[]), Init::Constant(0.0))?,
            },
        })
    }

    /// Batch statistics (and running statistics updated) in training, the
    /// running statistics in evaluation.
    pub fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, mode: Mode) -> Result<Tensor<'s>> {
        let (w, b, args) = self.args(s, mode);
        x.batch_norm2d(s, w, b, self.stats, args)
    }

    /// `relu(forward(x))` in one op (whose output backward recomputes).
    pub fn forward_relu<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, mode: Mode) -> Result<Tensor<'s>> {
        let (w, b, args) = self.args(s, mode);
        x.batch_norm2d_relu(s, w, b, self.stats, args)
    }

    /// `relu(forward(x) + residual)` in one op: a residual block's end.
    pub fn forward_add_relu<'s>(
        &self,
        s: &mut Step<'s>,
        x: Tensor<'s>,
        residual: Tensor<'s>,
        mode: Mode,
    ) -> Result<Tensor<'s>> {
        let (w, b, args) = self.args(s, mode);
        x.batch_norm2d_add_relu(s, w, b, self.stats, args, residual)
    }

    fn args<'s>(&self, s: &mut Step<'s>, mode: Mode) -> (Tensor<'s>, Tensor<'s>, BatchNormArgs) {
        let (w, b) = (s.param(&self.weight), s.param(&self.bias));
        let args = match mode {
            Mode::Train { .. } => BatchNormArgs::train(),
            Mode::Eval => BatchNormArgs::eval(),
        };
        (w, b, args)
    }
}

/// `nn.Linear(inputs, outputs)` with PyTorch's default initialisation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Linear {
    weight: Param,
    bias: Param,
}

impl Linear {
    /// Declares `weight` `[outputs, inputs]` and `bias` `[outputs]` on `pb`,
    /// both uniform in ±1/√inputs as PyTorch's `nn.Linear` draws them.
    pub fn new(pb: &ParamBuilder<'_>, inputs: usize, outputs: usize) -> Result<Self> {
        Ok(Self {
            weight: pb.param("weight", Shape::new(&[outputs, inputs]), Init::UniformFanIn(inputs))?,
            bias: pb.param("bias", Shape::new(&[outputs]), Init::UniformFanIn(inputs))?,
        })
    }

    /// `x · weightᵀ + bias`, for `x` of `[N, inputs]`.
    pub fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>) -> Result<Tensor<'s>> {
        let (w, b) = (s.param(&self.weight), s.param(&self.bias));
        x.linear(s, w, Some(b))
    }
}

/// A channel count scaled by a width multiplier, at least 1.
pub fn scaled(channels: usize, width_mult: f32) -> usize {
    ((channels as f32 * width_mult).round() as usize).max(1)
}
