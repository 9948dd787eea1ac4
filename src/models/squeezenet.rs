//! SqueezeNet 1.1 for small images: torchvision's `squeezenet1_1` with the
//! first convolution 3×3, stride 1, padding 1 (instead of stride 2 for
//! 224×224 inputs), so a 32×32 image reaches the last fire module at 4×4.
//! Fire modules squeeze with a 1×1 convolution, expand with 1×1 and 3×3
//! convolutions side by side, and concatenate them along the channels.
//! The classifier is dropout 0.5, a 1×1 convolution to the classes, relu
//! and global average pooling. Names are torchvision's (`features.3.squeeze`,
//! `classifier.1`), as in `bench/models.py`.
//!
//! Initialisation as torchvision: convolutions `kaiming_uniform_`, the final
//! one `normal_(0, 0.01)`, every bias 0.

use crate::nn::{scaled, Conv2d, ConvSpec, Init, Input, Mode, Model, ModelChoice, ParamBuilder};
use crate::ops::maxpool2d::Pool2dArgs;
use crate::tensor::Tensor;
use crate::Step;
use crate::{Error, Result};

/// SqueezeNet's width.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SqueezeNetConfig {
    /// Scales every channel count (at least 1 each).
    pub width_mult: f32,
}

/// A convolution with a zero bias, Kaiming-uniform weights.
fn conv(pb: &ParamBuilder<'_>, spec: ConvSpec) -> Result<Conv2d> {
    Conv2d::new(
        pb,
        spec,
        Init::KaimingUniformFanIn(spec.fan_in()),
        Some(Init::Constant(0.0)),
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Fire {
    squeeze: Conv2d,
    expand1x1: Conv2d,
    expand3x3: Conv2d,
}

impl Fire {
    fn new(pb: &ParamBuilder<'_>, c_in: usize, squeeze: usize, expand: usize) -> Result<Self> {
        Ok(Self {
            squeeze: conv(&pb.pp("squeeze"), ConvSpec::same(c_in, squeeze, 1, 1))?,
            expand1x1: conv(&pb.pp("expand1x1"), ConvSpec::same(squeeze, expand, 1, 1))?,
            expand3x3: conv(&pb.pp("expand3x3"), ConvSpec::same(squeeze, expand, 3, 1))?,
        })
    }

    fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>) -> Result<Tensor<'s>> {
        let squeezed = self.squeeze.forward(s, x)?.relu(s)?;
        let a = self.expand1x1.forward(s, squeezed)?.relu(s)?;
        let b = self.expand3x3.forward(s, squeezed)?.relu(s)?;
        Tensor::concat_channels(s, &[a, b])
    }
}

/// What `features` holds after the stem, in torchvision's numbering: a
/// max-pool (3×3, stride 2, ceil mode) or a fire module.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Feature {
    Pool,
    Fire(Box<Fire>),
}

/// torchvision's SqueezeNet 1.1, with a 3×3 stride-1 first convolution for
/// small images.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SqueezeNet {
    stem: Conv2d,
    features: Vec<Feature>,
    classifier: Conv2d,
}

impl SqueezeNet {
    /// What `--model` calls it.
    pub const NAME: &'static str = "squeezenet";
    /// The probability dropout zeroes a feature with, before the classifier.
    pub const DROPOUT: f32 = 0.5;
    const POOL: Pool2dArgs = Pool2dArgs {
        kernel: 3,
        stride: 2,
        padding: 0,
        ceil_mode: true,
    };

    /// The model as a run's choice, each channel count scaled by `width_mult`.
    pub fn choice(width_mult: f32) -> ModelChoice {
        ModelChoice::new::<Self>(Self::NAME, SqueezeNetConfig { width_mult })
    }
}

impl Model for SqueezeNet {
    type Config = SqueezeNetConfig;

    fn new(cfg: &SqueezeNetConfig, input: Input, pb: &ParamBuilder<'_>) -> Result<Self> {
        if !(cfg.width_mult > 0.0 && cfg.width_mult.is_finite()) {
            return Err(Error::Config(format!(
                "SqueezeNet's width multiplier must be a positive number, got {}",
                cfg.width_mult
            )));
        }
        if input.example.rank() != 3 {
            return Err(Error::Config(format!(
                "SqueezeNet takes images [channels, rows, cols], and the data set's examples are {}",
                input.example
            )));
        }
        let w = |c| scaled(c, cfg.width_mult);
        let features = pb.pp("features");
        let stem = conv(&features.pp(0), ConvSpec::same(input.example.dim(0), w(64), 3, 1))?;
        // torchvision's features 2–12: `None` a pool, else (squeeze, expand).
        const LAYOUT: [Option<(usize, usize)>; 11] = [
            None,
            Some((16, 64)),
            Some((16, 64)),
            None,
            Some((32, 128)),
            Some((32, 128)),
            None,
            Some((48, 192)),
            Some((48, 192)),
            Some((64, 256)),
            Some((64, 256)),
        ];
        let mut c_in = w(64);
        let mut layers = Vec::new();
        for (i, layer) in LAYOUT.iter().enumerate() {
            layers.push(match layer {
                None => Feature::Pool,
                Some((squeeze, expand)) => {
                    let fire = Fire::new(&features.pp(i + 2), c_in, w(*squeeze), w(*expand))?;
                    c_in = 2 * w(*expand);
                    Feature::Fire(Box::new(fire))
                }
            });
        }
        let classifier = Conv2d::new(
            &pb.pp("classifier").pp(1),
            ConvSpec::same(c_in, input.classes, 1, 1),
            Init::Normal(0.01),
            Some(Init::Constant(0.0)),
        )?;
        Ok(Self {
            stem,
            features: layers,
            classifier,
        })
    }

    fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, mode: Mode) -> Result<Tensor<'s>> {
        let mut h = self.stem.forward(s, x)?.relu(s)?;
        for f in &self.features {
            h = match f {
                Feature::Pool => h.max_pool2d(s, Self::POOL)?,
                Feature::Fire(fire) => fire.forward(s, h)?,
            };
        }
        if let Mode::Train { dropout, first_row } = mode {
            // Each row draws as many masks as it has features, so a
            // data-parallel shard starts its draws past the rows before it.
            let per_row = h.shape().numel() / h.shape().dim(0);
            h = h.dropout_seeded(s, Self::DROPOUT, dropout.shifted((first_row * per_row) as u32))?;
        }
        let logits = self.classifier.forward(s, h)?.relu(s)?;
        logits.global_avg_pool2d(s)
    }
}
