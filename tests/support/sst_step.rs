//! One step of a small sst-lstm on one bucket against PyTorch's float64
//! answer (`bench/sst_step.py`, run on the GPU machine, wrote
//! `tests/fixtures/sst_lstm/`): bumpgrad loads the fixture's float32
//! weights by name, runs one batch of `[T, B]` right-padded ids whose last
//! row is padding (length 0, weighing nothing), and the backward of the
//! mean cross-entropy over the real rows; the loss, the real rows' logits
//! and every gradient must land within 1e-4 of their scale. Shared by the
//! CPU test (`tests/sentences.rs`) and the GPU test
//! (`tests/gpu/sentences.rs`).

// Each test binary that includes this file uses part of it.
#![allow(dead_code)]

// The includer provides `lstm_step` (support/lstm_step.rs) beside this
// module: its fixture loader, one module in a binary that has both.
use super::lstm_step;

use bumpgrad::models::{SstLstm, SstLstmConfig};
use bumpgrad::nn::{Input, Mode, Model, ParamStore, SentenceInput};
use bumpgrad::ops::cross_entropy::CrossEntropyArgs;
use bumpgrad::{Device, Engine, Shape};
pub use lstm_step::Tensors;
use std::path::{Path, PathBuf};

/// Each tensor must land within this fraction of its scale (the largest
/// magnitude of PyTorch's answer): the bound.
pub const TOLERANCE: f32 = 1e-4;

fn dir() -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/sst_lstm")).to_path_buf()
}

/// The step on `device` from the fixture's weights and batch: the loss,
/// the real rows' logits and `grad.<name>` of every parameter; `None`
/// (saying so) while the fixture is absent.
pub fn bumpgrad_step(device: Device) -> Option<Tensors> {
    if !dir().join("step.safetensors").is_file() {
        eprintln!(
            "SKIPPED the sst-lstm fixture step: {} is absent (python3 bench/sst_step.py writes it)",
            dir().display()
        );
        return None;
    }
    let weights = lstm_step::load_file(&dir().join("weights.safetensors"));
    let step = lstm_step::load_file(&dir().join("step.safetensors"));
    let (dims, tokens) = &step["tokens"];
    let (steps, batch) = (dims[0], dims[1]);
    let lengths: Vec<usize> = step["lengths"].1.iter().map(|&n| n as usize).collect();
    let labels: Vec<u32> = step["labels"].1.iter().map(|&l| l as u32).collect();
    let real = lengths.iter().filter(|&&n| n > 0).count();
    let config = SstLstmConfig {
        embed: weights["embedding.weight"].0[1],
        hidden: weights["rnn.weight_hh_l0"].0[1],
        layers: 1,
        fixed_embedding: false,
    };
    let input = Input {
        example: Shape::new(&[weights["embedding.weight"].0[0]]),
        classes: weights["fc.bias"].0[0],
    };
    let mut engine = Engine::new(device, 8 << 20).expect("arena");
    engine.arena_mut().set_poison_step(true);
    let (store, model) =
        ParamStore::build(&mut engine.persistent(), 1, |pb| SstLstm::new(&config, input, pb)).expect("sst-lstm");
    let params = lstm_step::load_weights(&mut engine, &store, &weights);
    // The mean over the real rows: each weighs B / real, the padding row 0.
    let w: Vec<f32> = lengths
        .iter()
        .map(|&n| if n > 0 { batch as f32 / real as f32 } else { 0.0 })
        .collect();
    let w = engine.persistent().upload("weights", Shape::new(&[batch]), &w).unwrap();
    let ids: Vec<u32> = tokens.iter().map(|&t| t as u32).collect();
    let last: Vec<u32> = lengths
        .iter()
        .enumerate()
        .map(|(b, &n)| ((n.max(1) - 1) * batch + b) as u32)
        .collect();
    let ours = engine
        .step(|s| {
            let x = SentenceInput {
                ids: s.labels(&ids)?,
                last: s.labels(&last)?,
                steps,
                batch,
            };
            let y = model.forward_sentences(s, x, Mode::Eval)?;
            let targets = s.labels(&labels)?;
            let args = CrossEntropyArgs {
                weights: Some(w),
                ..CrossEntropyArgs::default()
            };
            let loss = y.cross_entropy(s, targets, args)?;
            let grads = s.backward(loss)?;
            let mut out = Tensors::new();
            out.insert("loss".into(), (vec![1], lstm_step::read(s, loss)?));
            let logits = lstm_step::read(s, y)?;
            let classes = input.classes;
            let rows: Vec<f32> = (0..batch)
                .filter(|&b| lengths[b] > 0)
                .flat_map(|b| logits[b * classes..][..classes].to_vec())
                .collect();
            out.insert("logits".into(), (vec![real, classes], rows));
            lstm_step::insert_grads(s, &grads, &store, &params, &mut out)?;
            Ok(out)
        })
        .expect("the step");
    Some(ours)
}

/// Every tensor of the fixture's answer within [`TOLERANCE`] of its scale
/// in `ours`, each one's error printed.
pub fn assert_matches_pytorch(what: &str, ours: &Tensors) {
    let step = lstm_step::load_file(&dir().join("step.safetensors"));
    let compared = lstm_step::assert_within(what, &step, &["tokens", "lengths", "labels"], ours, TOLERANCE);
    assert_eq!(compared, 2 + 7, "{what}: the loss, the logits and seven gradients");
}
