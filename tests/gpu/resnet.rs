//! A whole ResNet-18 training step on the GPU: PyTorch's logits, loss,
//! gradients and updated running statistics (the fixture of
//! `bench/resnet_reference.py`), and the CPU's, within 1e-4 of scale.

use super::*;

#[path = "../support/resnet_reference.rs"]
mod resnet_reference;

#[test]
fn a_resnet18_step_on_the_gpu_matches_pytorch_and_the_cpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu("resnet18_step") else { return };
    let on_gpu = resnet_reference::bumpgrad_step(gpu);
    resnet_reference::assert_matches_pytorch("gpu", &on_gpu);
    let on_cpu = resnet_reference::bumpgrad_step(Device::cpu(2).expect("cpu"));
    let names = |t: &resnet_reference::Tensors| t.keys().cloned().collect::<Vec<_>>();
    assert_eq!(
        names(&on_cpu),
        names(&on_gpu),
        "the backends returned different tensors"
    );
    for (name, (_, c)) in &on_cpu {
        assert_close(&format!("resnet18 step: {name}"), c, &on_gpu[name].1);
    }
}
