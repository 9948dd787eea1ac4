//! The image networks beyond the MNIST CNN train through the same session on
//! the CPU: a ResNet-18 and a SqueezeNet narrowed by `width_mult`, on a few
//! hundred real MNIST images, learn (their loss falls), and evaluation runs
//! with the running statistics.

use bumpgrad::backend::DeviceRequest;
use bumpgrad::models::{Depth, ResNet, SqueezeNet};
use bumpgrad::nn::ModelChoice;
use bumpgrad::optim::SgdConfig;
use bumpgrad::train::{train, EpochReport, Quiet, TrainConfig};

fn config(model: ModelChoice, lr: f32) -> TrainConfig {
    TrainConfig {
        device: DeviceRequest::Cpu,
        epochs: 3,
        batch: 50,
        threads: 2,
        model,
        lr,
        optimizer: SgdConfig {
            momentum: 0.9,
            ..Default::default()
        }
        .choice(),
        data_dir: concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist").into(),
        train_limit: Some(400),
        test_limit: Some(200),
        poison_step: Some(true),
        ..TrainConfig::default()
    }
}

fn losses(reports: &[EpochReport]) -> Vec<f64> {
    reports.iter().map(|r| r.train_loss).collect()
}

#[test]
fn a_narrow_resnet18_learns_on_the_cpu() {
    let reports = train(&config(ResNet::choice(Depth::R18, 0.125), 0.05), &mut Quiet).expect("training");
    let l = losses(&reports);
    // Chance is ln 10 = 2.30. Batch-norm makes a ResNet learn fast: a run
    // whose loss does not fall by a third over three epochs is broken.
    assert!(l.windows(2).all(|w| w[1] < w[0]), "loss falls every epoch: {l:?}");
    assert!(l[2] < 0.67 * l[0], "{l:?}");
    let accuracy = reports[2].test_accuracy;
    assert!(
        accuracy > 0.3,
        "test accuracy (running statistics) after 3 epochs: {accuracy}"
    );
}

#[test]
fn a_narrow_squeezenet_learns_on_the_cpu() {
    let reports = train(&config(SqueezeNet::choice(0.25), 0.02), &mut Quiet).expect("training");
    let l = losses(&reports);
    assert!(l[2] < l[0], "loss falls: {l:?}");
}
