//! The models and optimizers `--model` and `--optimizer` choose from: the
//! one place that names them. Adding a model or an optimizer to the
//! command is one line here.

use bumpgrad::models::MnistCnn;
use bumpgrad::nn::{ModelChoice, OptimizerChoice};
use bumpgrad::optim::SgdConfig;

/// A model's name as `--model` takes it, and how to make its choice.
type Named = (&'static str, fn() -> ModelChoice);

/// Every model; the first is the default.
pub const MODELS: &[Named] = &[(MnistCnn::NAME, MnistCnn::choice)];

/// The optimizers `--optimizer` takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum OptimizerArg {
    /// Stochastic gradient descent (torch.optim.SGD): --momentum, --nesterov, --weight-decay.
    Sgd,
}

/// The optimizer's settings, as the flags give them.
pub struct OptimizerFlags {
    pub momentum: f32,
    pub nesterov: bool,
    pub weight_decay: f32,
}

pub fn optimizer(arg: OptimizerArg, f: &OptimizerFlags) -> OptimizerChoice {
    match arg {
        OptimizerArg::Sgd => SgdConfig {
            momentum: f.momentum,
            nesterov: f.nesterov,
            weight_decay: f.weight_decay,
        }
        .choice(),
    }
}

/// The model `name` names, or the list of names.
pub fn model(name: &str) -> Result<ModelChoice, String> {
    MODELS
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, make)| make())
        .ok_or_else(|| {
            let names: Vec<&str> = MODELS.iter().map(|(n, _)| *n).collect();
            format!(
                "unknown model {name:?}; the models are {} (see `bumpgrad models`)",
                names.join(", ")
            )
        })
}
