//! One step of a small two-layer LSTM language model against PyTorch's
//! float64 answer (`bench/lstm_step.py` wrote `tests/fixtures/char_lstm/`):
//! bumpgrad loads the fixture's float32 weights by name into
//! `nn::Embedding` → `nn::Lstm` (2 layers) → `nn::Linear`, the network and
//! the names PyTorch's `CharLstm` has, runs the forward over the fixture's
//! tokens (time major, `[T + 1, B]`: inputs rows 0..T, targets rows 1..T+1)
//! from zero states and the backward of the mean cross-entropy over the
//! `T·B` next tokens, and returns the loss, the logits, each layer's last
//! hidden state and cell (`h_n`, `c_n`, `[layers, B, H]`) and every
//! parameter's gradient, named as the fixture names them. Shared by the CPU
//! test (`tests/pytorch_models.rs`) and the GPU test
//! (`tests/gpu/sequences.rs`).

// Each test binary that includes this file uses part of it.
#![allow(dead_code)]

use bumpgrad::autograd::Grads;
use bumpgrad::nn::{Embedding, Linear, Lstm, LstmState, ParamStore};
use bumpgrad::ops::cross_entropy::CrossEntropyArgs;
use bumpgrad::tensor::Param;
use bumpgrad::{Device, Engine, Shape, Step, Tensor};
use std::collections::BTreeMap;

/// Named tensors: shape and values.
pub type Tensors = BTreeMap<String, (Vec<usize>, Vec<f32>)>;

/// `bench/lstm_step.py`'s sizes.
const VOCAB: usize = 11;
const EMBED: usize = 6;
const HIDDEN: usize = 8;
const LAYERS: usize = 2;

/// Each tensor must land within this fraction of its scale (the largest
/// magnitude of PyTorch's float64 answer) of that answer, on either
/// backend. Float32 against float64 over four steps of two layers: every
/// value is a short chain of products, sums of at most 32 terms, sigmoids
/// and tanhs, each adding a few ulps (6e-8 each) of error relative to its
/// operands' scale. Measured on the CPU (the assert prints each tensor's):
/// the logits 5.7e-8, `h_n` and `c_n` 1.5e-7, the gradients 1.9e-7 to
/// 1.1e-6 (the layer-0 biases' worst); 2e-5 leaves eighteen times the worst
/// for the GPU's other summation orders, five times below the 1e-4,
/// while a fault (a gate swapped, a bias left out, a gradient scaled by
/// 1.0001) lands at 1e-4 of scale or more.
pub const TOLERANCE: f32 = 2e-5;

/// Every tensor of a fixture file (float32, as the script writes them).
pub fn load(name: &str) -> Tensors {
    load_file(&std::path::Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/char_lstm")).join(name))
}

/// Every tensor of a fixture file at `path` (float32).
pub fn load_file(path: &std::path::Path) -> Tensors {
    let bytes = std::fs::read(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
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

/// The step on `device`, from the fixture's weights and tokens.
pub fn bumpgrad_step(device: Device) -> Tensors {
    let (weights, fixture) = (load("weights.safetensors"), load("step.safetensors"));
    let (dims, tokens) = &fixture["tokens"];
    let (steps, batch) = (dims[0] - 1, dims[1]);
    let tokens: Vec<u32> = tokens
        .iter()
        .map(|&t| {
            assert!(t >= 0.0 && t < VOCAB as f32 && t.fract() == 0.0, "token {t}");
            t as u32
        })
        .collect();
    let mut engine = Engine::new(device, 16 << 20).expect("arena");
    engine.arena_mut().set_poison_step(true);
    let (store, (embed, rnn, fc)) = ParamStore::build(&mut engine.persistent(), 1, |pb| {
        Ok((
            Embedding::new(&pb.pp("embed"), VOCAB, EMBED)?,
            Lstm::new(&pb.pp("rnn"), EMBED, HIDDEN, LAYERS)?,
            Linear::new(&pb.pp("fc"), HIDDEN, VOCAB)?,
        ))
    })
    .expect("the network builds");
    let params = load_weights(&mut engine, &store, &weights);
    engine
        .step(|s| {
            let inputs = s.labels(&tokens[..steps * batch])?;
            let targets = s.labels(&tokens[batch..])?;
            let x = embed
                .forward(s, inputs)?
                .reshape(s, Shape::new(&[steps, batch, EMBED]))?;
            let mut state: [Option<LstmState<'_>>; LAYERS] = [None; LAYERS];
            let y = rnn.forward(s, x, &mut state)?;
            let flat = y.reshape(s, Shape::new(&[steps * batch, HIDDEN]))?;
            let logits = fc.forward(s, flat)?;
            let loss = logits.cross_entropy(s, targets, CrossEntropyArgs::default())?;
            let grads = s.backward(loss)?;
            let mut out = Tensors::new();
            out.insert("loss".into(), (vec![1], read(s, loss)?));
            out.insert("logits".into(), (logits.shape().dims().to_vec(), read(s, logits)?));
            let (mut h_n, mut c_n) = (Vec::new(), Vec::new());
            for layer in state {
                let layer = layer.expect("each layer's state after the last step");
                h_n.extend(read(s, layer.h)?);
                c_n.extend(read(s, layer.c)?);
            }
            out.insert("h_n".into(), (vec![LAYERS, batch, HIDDEN], h_n));
            out.insert("c_n".into(), (vec![LAYERS, batch, HIDDEN], c_n));
            insert_grads(s, &grads, &store, &params, &mut out)?;
            Ok(out)
        })
        .expect("the step runs")
}

/// `t`'s values on the host.
pub fn read<'s>(s: &mut Step<'s>, t: Tensor<'s>) -> bumpgrad::Result<Vec<f32>> {
    let mut host = vec![0.0; t.shape().numel()];
    s.read(t, &mut host)?;
    Ok(host)
}

/// Writes the fixture's `weights` into `store`'s parameters, whose names
/// must be exactly PyTorch's `state_dict` keys and whose shapes theirs;
/// returns the parameters.
pub fn load_weights(engine: &mut Engine, store: &ParamStore, weights: &Tensors) -> Vec<Param> {
    let params: Vec<Param> = store.params().collect();
    let mut ours: Vec<&str> = params.iter().map(|p| store.name(p)).collect();
    ours.sort_unstable();
    let theirs: Vec<&str> = weights.keys().map(String::as_str).collect();
    assert_eq!(ours, theirs, "the parameter names are PyTorch's state_dict keys");
    for p in &params {
        let (dims, values) = &weights[store.name(p)];
        assert_eq!(p.shape().dims(), dims.as_slice(), "{}: shape", store.name(p));
        engine.write_persistent(p.buf(), values).expect("weights load");
    }
    params
}

/// `grad.<name>` of each of `params` into `out`; a parameter without a
/// gradient fails the test.
pub fn insert_grads<'s>(
    s: &mut Step<'s>,
    grads: &Grads<'s>,
    store: &ParamStore,
    params: &[Param],
    out: &mut Tensors,
) -> bumpgrad::Result<()> {
    for p in params {
        let g = s
            .param_grad(grads, p)
            .unwrap_or_else(|| panic!("{} got no gradient", store.name(p)));
        out.insert(
            format!("grad.{}", store.name(p)),
            (p.shape().dims().to_vec(), read(s, g)?),
        );
    }
    Ok(())
}

/// Asserts `ours` holds every tensor of the fixture's step but its tokens,
/// in its shape, every value finite, each within [`TOLERANCE`] of its scale
/// of PyTorch's float64 answer; prints each tensor's error.
pub fn assert_matches_pytorch(what: &str, ours: &Tensors) {
    let compared = assert_within(what, &load("step.safetensors"), &["tokens"], ours, TOLERANCE);
    // loss, logits, h_n, c_n and the 11 parameters' gradients.
    assert_eq!(compared, 4 + 11, "{what}: every tensor compared");
    assert_eq!(ours.len(), compared, "{what}: bumpgrad gave tensors the fixture lacks");
}

/// Asserts `ours` holds every tensor of `expected` but the step's
/// `inputs`, in its shape, every value finite, each within `tolerance` of
/// its scale (its largest magnitude) of `expected`; prints each tensor's
/// error. Returns how many tensors were compared. Every fixture step
/// against PyTorch (this file's, `sst_step.rs`'s, `tree_step.rs`'s) ends
/// here.
pub fn assert_within(what: &str, expected: &Tensors, inputs: &[&str], ours: &Tensors, tolerance: f32) -> usize {
    // A NaN compares neither greater nor smaller: checked first, it cannot
    // slip through a comparison below.
    for (source, tensors) in [("the fixture", expected), ("bumpgrad", ours)] {
        for (name, (_, values)) in tensors {
            if let Some(i) = values.iter().position(|v| !v.is_finite()) {
                panic!("{what}: {source}'s {name}[{i}] is {}", values[i]);
            }
        }
    }
    let mut wrong = Vec::new();
    let mut compared = 0;
    for (name, (dims, want)) in expected.iter().filter(|(n, _)| !inputs.contains(&n.as_str())) {
        let (our_dims, got) = ours
            .get(name)
            .unwrap_or_else(|| panic!("{what}: bumpgrad gave no {name}"));
        assert_eq!(our_dims, dims, "{what}: {name}: shape");
        let scale = want.iter().fold(0.0f32, |m, v| m.max(v.abs()));
        assert!(scale > 0.0, "{what}: {name} is all zeros, which proves nothing");
        let (i, error) = want
            .iter()
            .zip(got)
            .map(|(w, g)| (w - g).abs())
            .enumerate()
            .max_by(|a, b| a.1.total_cmp(&b.1))
            .expect("a tensor holds values");
        println!(
            "{what}: {name:<24} off by {:.1e} of its scale {scale:.3e}",
            error / scale
        );
        if error > tolerance * scale {
            wrong.push(format!(
                "{name}[{i}]: PyTorch {}, bumpgrad {} (off by {:.1e} of scale {scale})",
                want[i],
                got[i],
                error / scale
            ));
        }
        compared += 1;
    }
    assert!(
        wrong.is_empty(),
        "{what}: {} of {compared} tensors differ from PyTorch's float64 answer by more than {tolerance} of their scale:\n{}",
        wrong.len(),
        wrong.join("\n")
    );
    compared
}
