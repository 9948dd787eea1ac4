//! Lantern's MNIST CNN: conv 1→10 5×5 (no bias) → max-pool 2 → relu →
//! conv 10→20 5×5 (no bias) → max-pool 2 → relu → flatten 320 →
//! linear 320→50 → relu → dropout 0.5 → linear 50→10. The loss
//! (log-softmax + NLL) is applied by the caller.

use super::init::uniform_fan_in;
use crate::autograd::Step;
use crate::memory::Persistent;
use crate::ops::dense::Epilogue;
use crate::ops::dropout::DropoutSeed;
use crate::rng::SplitMix64;
use crate::tensor::{Param, Shape, Tensor};
use crate::Result;

/// Training draws a dropout mask from `dropout`; evaluation does not drop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// `first_row`: where this batch starts in the step's whole batch (a
    /// data-parallel shard), so its rows draw the masks they would draw on
    /// one device.
    Train {
        dropout: DropoutSeed,
        first_row: usize,
    },
    Eval,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MnistCnn {
    pub conv1: Param,
    pub conv2: Param,
    pub fc1_weight: Param,
    pub fc1_bias: Param,
    pub fc2_weight: Param,
    pub fc2_bias: Param,
}

impl MnistCnn {
    /// One example: `[channels, rows, cols]`.
    pub const INPUT: Shape = Shape::new(&[1, 28, 28]);
    pub const CLASSES: usize = 10;
    pub const DROPOUT: f32 = 0.5;
    /// Features of the hidden layer (fc1's outputs, where dropout applies).
    pub const HIDDEN: usize = 50;

    /// Parameters in the persistent region, initialised from `seed`.
    pub fn init(p: &mut Persistent<'_>, seed: u64) -> Result<Self> {
        let mut rng = SplitMix64::new(seed);
        let mut param = |name, dims: &[usize], fan_in| {
            let shape = Shape::new(dims);
            p.param(name, shape, &uniform_fan_in(&mut rng, fan_in, shape.numel()))
        };
        Ok(Self {
            conv1: param("conv1.weight", &[10, 1, 5, 5], 25)?,
            conv2: param("conv2.weight", &[20, 10, 5, 5], 250)?,
            fc1_weight: param("fc1.weight", &[Self::HIDDEN, 320], 320)?,
            fc1_bias: param("fc1.bias", &[Self::HIDDEN], 320)?,
            fc2_weight: param("fc2.weight", &[Self::CLASSES, Self::HIDDEN], 50)?,
            fc2_bias: param("fc2.bias", &[Self::CLASSES], 50)?,
        })
    }

    /// In the order of a PyTorch `state_dict` of the same model.
    pub fn params(&self) -> [Param; 6] {
        [
            self.conv1,
            self.conv2,
            self.fc1_weight,
            self.fc1_bias,
            self.fc2_weight,
            self.fc2_bias,
        ]
    }

    /// Logits `[N, 10]` for images `[N, 1, 28, 28]`.
    pub fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, mode: Mode) -> Result<Tensor<'s>> {
        let conv1 = s.param(&self.conv1);
        let conv2 = s.param(&self.conv2);
        let (w1, b1) = (s.param(&self.fc1_weight), s.param(&self.fc1_bias));
        let (w2, b2) = (s.param(&self.fc2_weight), s.param(&self.fc2_bias));
        let h = x.conv2d(s, conv1, None)?.max_pool2d_relu(s)?;
        let h = h.conv2d(s, conv2, None)?.max_pool2d_relu(s)?;
        // fc1, its relu and dropout in one op; fc2 plain.
        let fc1 = Epilogue {
            relu: true,
            dropout: match mode {
                Mode::Train { dropout, first_row } => {
                    Some((Self::DROPOUT, dropout.shifted((first_row * Self::HIDDEN) as u32)))
                }
                Mode::Eval => None,
            },
        };
        let h = h.flatten(s)?.dense(s, w1, Some(b1), fc1)?;
        h.dense(s, w2, Some(b2), Epilogue::default())
    }
}
