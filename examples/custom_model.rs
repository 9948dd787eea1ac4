//! A network defined outside the crate, through the public API only, and
//! trained for one epoch on the MNIST shipped in the repository:
//!
//! ```sh
//! cargo run --release --example custom_model -- [--train-limit N] [--device auto|cpu|cuda]
//! ```
//!
//! A two-layer perceptron: flatten → linear 784→128 → relu → linear 128→classes.
//! Its parameters are declared on a `ParamBuilder` under the prefixes
//! `hidden` and `out`, so they get the names a PyTorch module with two
//! `nn.Linear` members of those names gives them (`hidden.weight`, …), and
//! its checkpoints load there with `strict=True`. It exits with an error
//! if the network did not learn (test accuracy below 50%).

use bumpgrad::backend::DeviceRequest;
use bumpgrad::nn::{Init, Input, Mode, Model, ModelChoice, ParamBuilder};
use bumpgrad::optim::SgdConfig;
use bumpgrad::train::{train, EpochReport, Hooks, Observer, TrainConfig};
use bumpgrad::{Param, Shape, Step, Tensor};

/// The network's settings.
#[derive(Debug, Clone)]
struct MlpConfig {
    hidden: usize,
}

struct Mlp {
    hidden: (Param, Param),
    out: (Param, Param),
}

/// A linear layer's weight and bias, initialised as PyTorch's `nn.Linear`.
fn linear(pb: &ParamBuilder<'_>, inputs: usize, outputs: usize) -> bumpgrad::Result<(Param, Param)> {
    let init = Init::UniformFanIn(inputs);
    Ok((
        pb.param("weight", Shape::new(&[outputs, inputs]), init)?,
        pb.param("bias", Shape::new(&[outputs]), init)?,
    ))
}

impl Model for Mlp {
    type Config = MlpConfig;

    fn new(config: &MlpConfig, input: Input, pb: &ParamBuilder<'_>) -> bumpgrad::Result<Self> {
        let pixels = input.example.numel();
        Ok(Self {
            hidden: linear(&pb.pp("hidden"), pixels, config.hidden)?,
            out: linear(&pb.pp("out"), config.hidden, input.classes)?,
        })
    }

    fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, _mode: Mode) -> bumpgrad::Result<Tensor<'s>> {
        let (w1, b1) = (s.param(&self.hidden.0), s.param(&self.hidden.1));
        let (w2, b2) = (s.param(&self.out.0), s.param(&self.out.1));
        let h = x.flatten(s)?.linear(s, w1, Some(b1))?.relu(s)?;
        h.linear(s, w2, Some(b2))
    }
}

/// Prints each epoch's report and keeps the last test accuracy.
#[derive(Default)]
struct Print {
    accuracy: Option<f64>,
}

impl Observer for Print {
    fn epoch(&mut self, r: &EpochReport) {
        println!(
            "epoch {}: train loss {:.4}, test accuracy {:.2}%, {:.2} s",
            r.epoch,
            r.train_loss,
            100.0 * r.test_accuracy,
            r.seconds
        );
        self.accuracy = Some(r.test_accuracy);
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut cfg = TrainConfig::builder()
        .model(ModelChoice::new::<Mlp>("mlp", MlpConfig { hidden: 128 }))
        .optimizer(SgdConfig::default().momentum(0.9).choice())
        .lr(0.01)
        .epochs(1)
        .data_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist"))
        .build();
    let mut args = std::env::args().skip(1);
    while let Some(flag) = args.next() {
        let value = args.next().ok_or(format!("{flag} needs a value"))?;
        match flag.as_str() {
            "--train-limit" => cfg.run.train_limit = Some(value.parse()?),
            "--device" => {
                cfg.device.request = match value.as_str() {
                    "auto" => DeviceRequest::Auto,
                    "cpu" => DeviceRequest::Cpu,
                    "cuda" => DeviceRequest::Cuda,
                    other => return Err(format!("--device {other}: expected auto, cpu or cuda").into()),
                }
            }
            other => return Err(format!("unknown flag {other}; try --train-limit N or --device cpu").into()),
        }
    }
    let mut print = Print::default();
    train(&cfg, Hooks::new(&mut print))?;
    let accuracy = print.accuracy.ok_or("no epoch ran")?;
    // A perceptron that learned anything beats chance (10%) by far.
    if accuracy < 0.5 {
        return Err(format!(
            "test accuracy {:.1}% after an epoch: it did not learn",
            100.0 * accuracy
        )
        .into());
    }
    Ok(())
}
