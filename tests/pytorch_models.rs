//! bumpgrad's ResNet-18, ResNet-50 and SqueezeNet equal PyTorch's: from the
//! same initial weights, one step on the same batch gives the same logits,
//! loss, gradients and running statistics (fixtures:
//! `bench/pytorch_steps.py`); and so does a two-layer LSTM language model
//! (`bench/lstm_step.py`): loss, logits, last states and gradients.

#[path = "support/lstm_step.rs"]
mod lstm_step;
#[path = "support/pytorch_step.rs"]
mod pytorch_step;

use bumpgrad::Device;
use pytorch_step::Fixture;

fn matches_pytorch_on_the_cpu(net: Fixture) {
    let ours = pytorch_step::bumpgrad_step(Device::cpu(2).expect("cpu"), net);
    pytorch_step::assert_matches_pytorch("cpu", net, &ours);
}

#[test]
fn a_resnet18_step_on_the_cpu_matches_pytorch() {
    matches_pytorch_on_the_cpu(Fixture::ResNet18);
}

#[test]
fn a_resnet50_step_on_the_cpu_matches_pytorch() {
    matches_pytorch_on_the_cpu(Fixture::ResNet50);
}

#[test]
fn a_squeezenet_step_on_the_cpu_matches_pytorch() {
    matches_pytorch_on_the_cpu(Fixture::SqueezeNet);
}

#[test]
fn a_two_layer_lstm_language_model_step_on_the_cpu_matches_pytorch() {
    let ours = lstm_step::bumpgrad_step(Device::cpu(2).expect("cpu"));
    lstm_step::assert_matches_pytorch("cpu", &ours);
}
