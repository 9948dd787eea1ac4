//! ResNet-18 and ResNet-50 for small images (CIFAR-10's 32×32, MNIST's
//! 28×28): torchvision's layout with the CIFAR stem, a 3×3 convolution of
//! stride 1 and no max-pool. Stages of BasicBlocks [2, 2, 2, 2] (ResNet-18)
//! or Bottlenecks [3, 4, 6, 3] (ResNet-50) at 64/128/256/512 planes, the
//! first block of stages 2–4 halving the map with stride 2 (in the 3×3
//! convolution, as torchvision's v1.5 does), a 1×1 convolution +
//! batch-norm shortcut wherever the shape changes, global average pooling
//! and a linear classifier. Parameter names and shapes are torchvision's
//! (`layer2.0.downsample.0.weight`), so checkpoints load into the PyTorch
//! definition in `bench/models.py` with `strict=True`.
//!
//! Initialisation as torchvision: convolutions `kaiming_normal_(fan_out,
//! relu)`, batch-norm weight 1 and bias 0, the classifier PyTorch's default.

use crate::nn::{scaled, BatchNorm2d, Conv2d, ConvSpec, Init, Input, Linear, Mode, Model, ModelChoice, ParamBuilder};
use crate::tensor::Tensor;
use crate::Step;
use crate::{Error, Result};

/// Which ResNet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Depth {
    /// BasicBlocks [2, 2, 2, 2], 11 M parameters at full width.
    R18,
    /// Bottlenecks [3, 4, 6, 3], 23.5 M parameters at full width.
    R50,
}

/// A ResNet's depth and width.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ResNetConfig {
    /// ResNet-18 or ResNet-50.
    pub depth: Depth,
    /// Scales every channel count (at least 1 each): 0.125 gives a ResNet
    /// small enough to train in tests on a CPU.
    pub width_mult: f32,
}

/// A convolution without bias followed by its batch-norm, as every
/// convolution of a ResNet is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct ConvBn {
    conv: Conv2d,
    bn: BatchNorm2d,
}

impl ConvBn {
    /// `conv` and `bn` under their own names (`conv1`, `bn1`).
    fn new(conv: &ParamBuilder<'_>, bn: &ParamBuilder<'_>, spec: ConvSpec) -> Result<Self> {
        Ok(Self {
            conv: Conv2d::new(conv, spec, Init::KaimingNormalFanOut(spec.fan_out()), None)?,
            bn: BatchNorm2d::new(bn, spec.c_out)?,
        })
    }

    fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, mode: Mode) -> Result<Tensor<'s>> {
        let y = self.conv.forward(s, x)?;
        self.bn.forward(s, y, mode)
    }

    /// `relu(bn(conv(x)))`, the batch norm and relu fused.
    fn forward_relu<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, mode: Mode) -> Result<Tensor<'s>> {
        let y = self.conv.forward(s, x)?;
        self.bn.forward_relu(s, y, mode)
    }
}

/// One residual block: its convolutions in order (the last one's output
/// meets the shortcut before the final relu) and the projection shortcut,
/// if any.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Block {
    convs: Vec<ConvBn>,
    downsample: Option<ConvBn>,
}

impl Block {
    /// BasicBlock: 3×3 (stride) → 3×3; expansion 1.
    fn basic(pb: &ParamBuilder<'_>, c_in: usize, planes: usize, stride: usize) -> Result<Self> {
        let convs = vec![
            ConvBn::new(&pb.pp("conv1"), &pb.pp("bn1"), ConvSpec::same(c_in, planes, 3, stride))?,
            ConvBn::new(&pb.pp("conv2"), &pb.pp("bn2"), ConvSpec::same(planes, planes, 3, 1))?,
        ];
        Self::with_shortcut(pb, convs, c_in, planes, stride)
    }

    /// Bottleneck: 1×1 → 3×3 (stride) → 1×1 to 4 × planes.
    fn bottleneck(pb: &ParamBuilder<'_>, c_in: usize, planes: usize, stride: usize) -> Result<Self> {
        let out = planes * 4;
        let convs = vec![
            ConvBn::new(&pb.pp("conv1"), &pb.pp("bn1"), ConvSpec::same(c_in, planes, 1, 1))?,
            ConvBn::new(
                &pb.pp("conv2"),
                &pb.pp("bn2"),
                ConvSpec::same(planes, planes, 3, stride),
            )?,
            ConvBn::new(&pb.pp("conv3"), &pb.pp("bn3"), ConvSpec::same(planes, out, 1, 1))?,
        ];
        Self::with_shortcut(pb, convs, c_in, out, stride)
    }

    fn with_shortcut(
        pb: &ParamBuilder<'_>,
        convs: Vec<ConvBn>,
        c_in: usize,
        c_out: usize,
        stride: usize,
    ) -> Result<Self> {
        let downsample = if stride != 1 || c_in != c_out {
            let d = pb.pp("downsample");
            let spec = ConvSpec::same(c_in, c_out, 1, stride);
            Some(ConvBn::new(&d.pp(0), &d.pp(1), spec)?)
        } else {
            None
        };
        Ok(Self { convs, downsample })
    }

    fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, mode: Mode) -> Result<Tensor<'s>> {
        let (last, inner) = self.convs.split_last().expect("a block has convolutions");
        let mut h = x;
        for c in inner {
            h = c.forward_relu(s, h, mode)?;
        }
        // torchvision's order: the last convolution, then the shortcut,
        // then batch norm, add and relu as one op.
        let h = last.conv.forward(s, h)?;
        let shortcut = match &self.downsample {
            Some(d) => d.forward(s, x, mode)?,
            None => x,
        };
        last.bn.forward_add_relu(s, h, shortcut, mode)
    }
}

/// torchvision's ResNet-18 or -50 with the CIFAR stem (see [`crate::models`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResNet {
    stem: ConvBn,
    blocks: Vec<Block>,
    fc: Linear,
}

impl ResNet {
    /// What `--model` calls ResNet-18.
    pub const NAME_18: &'static str = "resnet18";
    /// What `--model` calls ResNet-50.
    pub const NAME_50: &'static str = "resnet50";

    /// The model as a run's choice, at `depth`, each channel count scaled by
    /// `width_mult`.
    pub fn choice(depth: Depth, width_mult: f32) -> ModelChoice {
        let name = match depth {
            Depth::R18 => Self::NAME_18,
            Depth::R50 => Self::NAME_50,
        };
        ModelChoice::new::<Self>(name, ResNetConfig { depth, width_mult })
    }
}

impl Model for ResNet {
    type Config = ResNetConfig;

    fn new(cfg: &ResNetConfig, input: Input, pb: &ParamBuilder<'_>) -> Result<Self> {
        if !(cfg.width_mult > 0.0 && cfg.width_mult.is_finite()) {
            return Err(Error::Config(format!(
                "a ResNet's width multiplier must be a positive number, got {}",
                cfg.width_mult
            )));
        }
        if input.example.rank() != 3 {
            return Err(Error::Config(format!(
                "a ResNet takes images [channels, rows, cols], and the data set's examples are {}",
                input.example
            )));
        }
        let w = |c| scaled(c, cfg.width_mult);
        let stem = ConvBn::new(
            &pb.pp("conv1"),
            &pb.pp("bn1"),
            ConvSpec::same(input.example.dim(0), w(64), 3, 1),
        )?;
        let (per_stage, expansion): ([usize; 4], usize) = match cfg.depth {
            Depth::R18 => ([2, 2, 2, 2], 1),
            Depth::R50 => ([3, 4, 6, 3], 4),
        };
        let mut blocks = Vec::new();
        let mut c_in = w(64);
        for (stage, &count) in per_stage.iter().enumerate() {
            let layer = pb.pp(format!("layer{}", stage + 1));
            let planes = w(64 << stage);
            for i in 0..count {
                let stride = if stage > 0 && i == 0 { 2 } else { 1 };
                let block = match cfg.depth {
                    Depth::R18 => Block::basic(&layer.pp(i), c_in, planes, stride)?,
                    Depth::R50 => Block::bottleneck(&layer.pp(i), c_in, planes, stride)?,
                };
                blocks.push(block);
                c_in = planes * expansion;
            }
        }
        let fc = Linear::new(&pb.pp("fc"), c_in, input.classes)?;
        Ok(Self { stem, blocks, fc })
    }

    fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, mode: Mode) -> Result<Tensor<'s>> {
        let mut h = self.stem.forward_relu(s, x, mode)?;
        for block in &self.blocks {
            h = block.forward(s, h, mode)?;
        }
        let pooled = h.global_avg_pool2d(s)?;
        self.fc.forward(s, pooled)
    }
}
