//! bumpgrad's ResNet-18 and ResNet-50 equal PyTorch's: from the same initial
//! weights, one training step on the same batch gives the same logits, loss,
//! gradients and running statistics (fixtures: `bench/resnet_reference.py`).

#[path = "support/resnet_reference.rs"]
mod resnet_reference;

use bumpgrad::Device;
use resnet_reference::Depth;

#[test]
fn a_resnet18_step_on_the_cpu_matches_pytorch() {
    let ours = resnet_reference::bumpgrad_step(Device::cpu(2).expect("cpu"), Depth::R18);
    resnet_reference::assert_matches_pytorch("cpu", Depth::R18, &ours);
}

#[test]
fn a_resnet50_step_on_the_cpu_matches_pytorch() {
    let ours = resnet_reference::bumpgrad_step(Device::cpu(2).expect("cpu"), Depth::R50);
    resnet_reference::assert_matches_pytorch("cpu", Depth::R50, &ours);
}
