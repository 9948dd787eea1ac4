//! One training step of a small ResNet-18 against PyTorch's answer
//! (`bench/resnet_reference.py` wrote `tests/fixtures/resnet/`): bumpgrad
//! loads PyTorch's initial weights by name, runs a training-mode forward and
//! backward of the mean cross-entropy on PyTorch's batch, and returns the
//! logits, the loss, every parameter's gradient and every buffer after the
//! step, named as the fixture names them. Shared by the CPU test
//! (`tests/pytorch_resnet.rs`) and the GPU test (`tests/gpu/resnet.rs`).

use bumpgrad::models::{Depth, ResNet, ResNetConfig};
use bumpgrad::nn::{Input, Kind, Mode, Model, ParamStore};
use bumpgrad::ops::dropout::DropoutSeed;
use bumpgrad::{Arena, Device, Shape};
use std::collections::BTreeMap;
use std::path::PathBuf;

/// Named tensors: shape and values.
pub type Tensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

pub const WIDTH: f32 = 0.125;
pub const BATCH: [usize; 4] = [6, 3, 16, 16];
pub const CLASSES: usize = 10;

fn fixture_dir() -> PathBuf {
    concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/resnet").into()
}

/// Every tensor of a fixture file (float32, as the script writes them).
pub fn load(name: &str) -> Tensors {
    let path = fixture_dir().join(name);
    let bytes = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let file = safetensors::SafeTensors::deserialize(&bytes).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let mut out = Tensors::new();
    for (name, view) in file.tensors() {
        assert_eq!(view.dtype(), safetensors::Dtype::F32, "{name}: float32 expected");
        let values = view
            .data()
            .chunks_exact(4)
            .map(|b| f32::from_le_bytes([b[0], b[1], b[2], b[3]]))
            .collect();
        out.insert(name.to_string(), (view.shape().to_vec(), values));
    }
    out
}

/// The step on `device`, from the fixture's weights and batch.
pub fn bumpgrad_step(device: Device) -> Tensors {
    let (weights, batch) = (load("weights.safetensors"), load("step.safetensors"));
    let mut arena = Arena::new(device, 256 << 20).expect("arena");
    let cfg = ResNetConfig {
        depth: Depth::R18,
        width_mult: WIDTH,
    };
    let input = Input {
        example: Shape::new(&BATCH[1..]),
        classes: CLASSES,
    };
    let (store, model) =
        ParamStore::build(&mut arena.persistent(), 1, |pb| ResNet::new(&cfg, input, pb)).expect("the model builds");
    let mut entries = Vec::new();
    store.visit(&mut |e, p| entries.push((e.name.clone(), e.shape, e.kind, p)));
    let ours: Vec<&str> = entries.iter().map(|e| e.0.as_str()).collect();
    let theirs: Vec<&str> = weights.keys().map(String::as_str).collect();
    let mut sorted = ours.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, theirs, "the parameter names are PyTorch's state_dict keys");
    for (name, shape, _, p) in &entries {
        let (dims, values) = &weights[name];
        assert_eq!(shape.dims(), dims.as_slice(), "{name}: shape");
        arena.write_persistent(p.buf(), values).expect("weights load");
    }
    let labels: Vec<u32> = batch["labels"].1.iter().map(|&l| l as u32).collect();
    let mut out = arena
        .step(|s| {
            let x = s.input("batch", Shape::new(&BATCH), &batch["input"].1)?;
            let labels = s.labels(&labels)?;
            let mode = Mode::Train {
                dropout: DropoutSeed::Fixed(0),
                first_row: 0,
            };
            let logits = model.forward(s, x, mode)?;
            let loss = logits.cross_entropy(s, labels, Default::default())?;
            let grads = s.backward(loss)?;
            let mut out = Tensors::new();
            for (name, t) in [("logits", logits), ("loss", loss)] {
                let mut host = vec![0.0; t.shape().numel()];
                s.read(t, &mut host)?;
                out.insert(name.into(), (t.shape().dims().to_vec(), host));
            }
            for (name, shape, kind, p) in &entries {
                if *kind == Kind::Param {
                    let g = s
                        .param_grad(&grads, p)
                        .unwrap_or_else(|| panic!("{name} got no gradient"));
                    let mut host = vec![0.0; shape.numel()];
                    s.read(g, &mut host)?;
                    out.insert(format!("grad.{name}"), (shape.dims().to_vec(), host));
                }
            }
            Ok(out)
        })
        .expect("the step runs");
    for (name, shape, kind, p) in &entries {
        if *kind == Kind::Buffer {
            let mut host = vec![0.0; shape.numel()];
            arena.read_persistent(p.buf(), &mut host).expect("buffer reads");
            out.insert(format!("after.{name}"), (shape.dims().to_vec(), host));
        }
    }
    out
}

/// Asserts `ours` holds every tensor of the fixture's step (but the batch)
/// with its shape, each within `1e-4` of the largest magnitude of PyTorch's.
pub fn assert_matches_pytorch(what: &str, ours: &Tensors) {
    let expected = load("step.safetensors");
    let mut compared = 0;
    for (name, (dims, want)) in &expected {
        if name == "input" || name == "labels" {
            continue;
        }
        let (our_dims, got) = ours
            .get(name)
            .unwrap_or_else(|| panic!("{what}: bumpgrad gave no {name}"));
        // PyTorch's loss is a 0-d tensor, ours a one-element one.
        if !(dims.is_empty() && got.len() == 1) {
            assert_eq!(our_dims, dims, "{what}: {name}: shape");
        }
        let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.0, "{what}: {name} is all zeros, which proves nothing");
        for (i, (w, g)) in want.iter().zip(got).enumerate() {
            assert!(
                (w - g).abs() <= 1e-4 * scale,
                "{what}: {name}[{i}]: PyTorch {w}, bumpgrad {g} (scale {scale})"
            );
        }
        compared += 1;
    }
    let grads = expected.keys().filter(|k| k.starts_with("grad.")).count();
    assert!(
        grads > 60,
        "{what}: the fixture has {grads} gradients; a ResNet-18 has 62"
    );
    assert_eq!(compared, expected.len() - 2, "{what}: every tensor compared");
}
