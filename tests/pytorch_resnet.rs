//! bumpgrad's ResNet-18 equals PyTorch's: from the same initial weights, one
//! training step on the same batch gives the same logits, loss, gradients
//! and running statistics (fixture: `bench/resnet_reference.py`).

#[path = "support/resnet_reference.rs"]
mod resnet_reference;

use bumpgrad::Device;

#[test]
fn a_resnet18_step_on_the_cpu_matches_pytorch() {
    let ours = resnet_reference::bumpgrad_step(Device::cpu(2).expect("cpu"));
    resnet_reference::assert_matches_pytorch("cpu", &ours);
}
