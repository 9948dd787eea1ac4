//! The image networks beyond the MNIST CNN train through the same session on
//! the CPU: a ResNet-18 and a SqueezeNet narrowed by `width_mult`, on a few
//! hundred (ResNet) or 2,000 (SqueezeNet) real MNIST images, learn (their
//! loss falls by a bound, and test accuracy, evaluated with the running
//! statistics, rises well above chance).

use bumpgrad::models::{Depth, ResNet, SqueezeNet};
use bumpgrad::nn::ModelChoice;
use bumpgrad::optim::{AdamWConfig, SgdConfig};
use bumpgrad::train::{DeviceConfig, EpochReport, Hooks, Reports, TrainConfig};

fn config(model: ModelChoice, lr: f32) -> TrainConfig {
    TrainConfig::builder()
        .epochs(3)
        .batch(50)
        .model(model)
        .lr(lr)
        .optimizer(SgdConfig::default().momentum(0.9).choice())
        .data_dir(concat!(env!("CARGO_MANIFEST_DIR"), "/data/mnist"))
        .train_limit(400)
        .test_limit(200)
        .device_config(DeviceConfig::cpu(2))
        .poison_step(true)
        .build()
}

/// Trains `cfg`, keeping every epoch's report.
fn train(cfg: &TrainConfig) -> bumpgrad::Result<Vec<EpochReport>> {
    let mut reports = Reports::default();
    bumpgrad::train::train(cfg, Hooks::new(&mut reports))?;
    Ok(reports.0)
}

fn losses(reports: &[EpochReport]) -> Vec<f64> {
    reports.iter().map(|r| r.train_loss).collect()
}

#[test]
fn a_narrow_resnet18_learns_on_the_cpu() {
    let reports = train(&config(ResNet::choice(Depth::R18, 0.125), 0.05)).expect("training");
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

/// SqueezeNet (no batch-norm; its classifier starts at std 0.01 behind a
/// ReLU) sits near ln 10 until it finds its way, and SGD on 400 images left
/// it there for three epochs (test accuracy 8-14%, chance): here AdamW on
/// 2,000 images, three epochs (6-13 s on 2 cores shared with other builds).
/// The seed moves how soon it takes off. Over 20 seeds (1-19 and this
/// one, 42: losses 2.30, 2.14, 1.60, accuracy 57%) every run's loss fell
/// every epoch, the third epoch's loss was 0.43-0.84 of the first's, and
/// test accuracy after three epochs was 30-80% (median 57%). The bounds
/// sit below the worst seed, since a change that only reorders float
/// rounding moves a run as a seed does; a run that learns little fails
/// them (the expand 3×3 half of every fire module without a gradient:
/// losses 2.31, 2.29, 2.21, accuracy 16%; no gradient through dropout:
/// 2.30, 2.30, 2.29), where "loss 3 below loss 1" let both pass.
#[test]
fn a_narrow_squeezenet_learns_on_the_cpu() {
    let mut cfg = config(SqueezeNet::choice(0.25), 0.001);
    cfg.run.optimizer = AdamWConfig::default().choice();
    cfg.run.train_limit = Some(2000);
    let reports = train(&cfg).expect("training");
    let l = losses(&reports);
    assert!(l.windows(2).all(|w| w[1] < w[0]), "loss falls every epoch: {l:?}");
    assert!(
        l[2] < 0.9 * l[0],
        "the third epoch's loss is {:.3} of the first's, 0.9 at most: {l:?}",
        l[2] / l[0]
    );
    let accuracy = reports[2].test_accuracy;
    assert!(
        accuracy > 0.2,
        "test accuracy after 3 epochs: {accuracy}, above 0.2 expected (losses {l:?})"
    );
}
