//! Lantern's MNIST CNN: conv 1→10 5×5 (no bias) → max-pool 2 → relu →
//! conv 10→20 5×5 (no bias) → max-pool 2 → relu → flatten 320 →
//! linear 320→50 → relu → dropout 0.5 → linear 50→classes. The loss
//! (cross-entropy) is the task's.

use crate::nn::{Init, Input, Mode, Model, ModelChoice, ParamBuilder};
use crate::ops::conv2d::Conv2dArgs;
use crate::ops::dense::Epilogue;
use crate::tensor::{Param, Shape, Tensor};
use crate::Step;
use crate::{Error, Result};

/// Lantern's MNIST CNN: two 5×5 convolutions of 10 and 20 filters (no
/// bias), each max-pooled and rectified, then linear 320→50, relu,
/// dropout, linear 50→classes; its parameters are named `conv1.weight` …
/// `fc2.bias`, as PyTorch's MNIST example names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MnistCnn {
    conv1: Param,
    conv2: Param,
    fc1_weight: Param,
    fc1_bias: Param,
    fc2_weight: Param,
    fc2_bias: Param,
}

/// The network has no settings; the classes come from the data set.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MnistCnnConfig;

impl MnistCnn {
    /// What `--model` calls it.
    pub const NAME: &'static str = "mnist-cnn";
    /// The one example shape it takes: `[channels, rows, cols]`.
    pub const INPUT: Shape = Shape::new(&[1, 28, 28]);
    /// The probability dropout zeroes a hidden feature with.
    pub const DROPOUT: f32 = 0.5;
    /// Features of the hidden layer (fc1's outputs, where dropout applies).
    pub const HIDDEN: usize = 50;

    /// The model as a run's choice.
    pub fn choice() -> ModelChoice {
        ModelChoice::new::<Self>(Self::NAME, MnistCnnConfig)
    }
}

impl Model for MnistCnn {
    type Config = MnistCnnConfig;

    fn new(_: &MnistCnnConfig, input: Input, pb: &ParamBuilder<'_>) -> Result<Self> {
        if input.example != Self::INPUT {
            return Err(Error::Config(format!(
                "{} takes {} images, and the data set's are {}",
                Self::NAME,
                Self::INPUT,
                input.example
            )));
        }
        let (h, classes) = (Self::HIDDEN, input.classes);
        let (conv1, conv2, fc1, fc2) = (pb.pp("conv1"), pb.pp("conv2"), pb.pp("fc1"), pb.pp("fc2"));
        let weight = |pb: &ParamBuilder<'_>, dims: &[usize], fan_in| {
            pb.param("weight", Shape::new(dims), Init::UniformFanIn(fan_in))
        };
        Ok(Self {
            conv1: weight(&conv1, &[10, 1, 5, 5], 25)?,
            conv2: weight(&conv2, &[20, 10, 5, 5], 250)?,
            fc1_weight: weight(&fc1, &[h, 320], 320)?,
            fc1_bias: fc1.param("bias", Shape::new(&[h]), Init::UniformFanIn(320))?,
            fc2_weight: weight(&fc2, &[classes, h], h)?,
            fc2_bias: fc2.param("bias", Shape::new(&[classes]), Init::UniformFanIn(h))?,
        })
    }

    fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, mode: Mode) -> Result<Tensor<'s>> {
        let conv1 = s.param(&self.conv1);
        let conv2 = s.param(&self.conv2);
        let (w1, b1) = (s.param(&self.fc1_weight), s.param(&self.fc1_bias));
        let (w2, b2) = (s.param(&self.fc2_weight), s.param(&self.fc2_bias));
        let h = x.conv2d(s, conv1, None, Conv2dArgs::default())?.max_pool2d_relu(s)?;
        let h = h.conv2d(s, conv2, None, Conv2dArgs::default())?.max_pool2d_relu(s)?;
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
