//! PyTorch's own SGD, AdamW and Adagrad, and `clip_grad_norm_` before them, step by step (`tests/fixtures/optim/`,
//! written by `bench/optim_fixtures.py`), replayed through the optimizer ops
//! on any arena. Shared by the CPU test (`tests/optimizers.rs`) and the GPU
//! tests (`tests/gpu.rs`): `#[path = "support/optim_fixtures.rs"] mod
//! optim_fixtures;` then `optim_fixtures::check(&mut arena, case)`.
//!
//! The parameters sit in one slab as a parameter store lays them out: each
//! tensor 256-byte aligned, zeros between them; the gradients in a second
//! slab of the same layout, the optimizer state in slabs beside them. Each
//! step's rate comes from a table indexed by the step cursor (a table of one
//! where the rate never changes), and the cursor is moved on between steps
//! as the training loop does. A case with a `clip_norm` clips the gradients
//! first, as `optim::ClipGradNorm` does: the norm over the three tensors
//! (one run each, so the partial sums add across runs), then each scaled.

// Each test binary that includes this file uses part of it.
#![allow(dead_code)]

use bumpgrad::memory::{align_up, Buf};
use bumpgrad::ops::adagrad_update::AdagradHyper;
use bumpgrad::ops::adamw_update::AdamwHyper;
use bumpgrad::ops::clip_grad_norm::ClipBufs;
use bumpgrad::ops::cursor::StepCursor;
use bumpgrad::ops::lr::LrAt;
use bumpgrad::ops::sgd_update::SgdHyper;
use bumpgrad::{Engine, Shape};

/// Every case, by name, its JSON compiled in (so a test binary staged on a
/// machine without the sources still has them).
pub const CASES: &[(&str, &str)] = &[
    ("sgd_plain", include_str!("../fixtures/optim/sgd_plain.json")),
    ("sgd_momentum", include_str!("../fixtures/optim/sgd_momentum.json")),
    (
        "sgd_nesterov_weight_decay",
        include_str!("../fixtures/optim/sgd_nesterov_weight_decay.json"),
    ),
    (
        "sgd_momentum_weight_decay",
        include_str!("../fixtures/optim/sgd_momentum_weight_decay.json"),
    ),
    ("adamw_defaults", include_str!("../fixtures/optim/adamw_defaults.json")),
    ("adamw_betas", include_str!("../fixtures/optim/adamw_betas.json")),
    (
        "adamw_low_beta1",
        include_str!("../fixtures/optim/adamw_low_beta1.json"),
    ),
    (
        "adagrad_tree_lstm",
        include_str!("../fixtures/optim/adagrad_tree_lstm.json"),
    ),
    (
        "adagrad_every_knob",
        include_str!("../fixtures/optim/adagrad_every_knob.json"),
    ),
    (
        "sgd_momentum_clip",
        include_str!("../fixtures/optim/sgd_momentum_clip.json"),
    ),
    ("adagrad_clip", include_str!("../fixtures/optim/adagrad_clip.json")),
    (
        "adamw_clip_none",
        include_str!("../fixtures/optim/adamw_clip_none.json"),
    ),
];

/// Agreement asked of every value: `|ours − torch| ≤ REL · scale`, the
/// scale being the largest magnitude PyTorch's value of that element has
/// had so far (this step's included). Not the value alone, because an
/// update `p − lr·d` that cancels to near zero keeps only the absolute
/// precision of its operands, and later steps carry that absolute error
/// on: PyTorch's vector path fuses `p + (−lr)·d` into one rounding, while
/// our CPU kernel (bit for bit the arithmetic the MNIST CNN's recorded
/// losses were trained with) rounds `lr·d` first; the two differ by a
/// fraction of an ulp of `p`, which is 1e-5 of a result a hundred times
/// smaller than `p`.
pub const REL: f32 = 1e-6;
/// The smallest scale: a zero (the padding, a zero state) is matched exactly.
pub const FLOOR: f32 = f32::MIN_POSITIVE;

#[derive(serde::Deserialize)]
pub struct Case {
    pub optimizer: String,
    pub hyper: Hyper,
    pub lengths: Vec<usize>,
    pub lr: Vec<f32>,
    pub params: Vec<f32>,
    pub steps: Vec<Record>,
}

/// SGD's fields, AdamW's or Adagrad's, as the case's optimizer says, and
/// the clip's largest norm where the case clips.
#[derive(serde::Deserialize)]
pub struct Hyper {
    momentum: Option<f32>,
    nesterov: Option<bool>,
    beta1: Option<f64>,
    beta2: Option<f64>,
    eps: Option<f64>,
    lr_decay: Option<f64>,
    initial_accumulator_value: Option<f64>,
    weight_decay: f64,
    clip_norm: Option<f32>,
}

/// One step: its gradients, and everything after the update.
#[derive(serde::Deserialize)]
pub struct Record {
    pub grad: Vec<f32>,
    pub param: Vec<f32>,
    pub momentum_buffer: Option<Vec<f32>>,
    pub exp_avg: Option<Vec<f32>>,
    pub exp_avg_sq: Option<Vec<f32>>,
    pub sum: Option<Vec<f32>>,
    pub step: Option<u64>,
    /// The norm `clip_grad_norm_` returned, and the gradients it left.
    pub grad_norm: Option<f32>,
    pub clipped_grad: Option<Vec<f32>>,
}

pub fn case(name: &str) -> Case {
    let (_, text) = CASES
        .iter()
        .find(|(n, _)| *n == name)
        .unwrap_or_else(|| panic!("no fixture {name}"));
    serde_json::from_str(text).unwrap_or_else(|e| panic!("{name}: {e}"))
}

enum Update {
    Sgd(SgdHyper),
    Adamw(AdamwHyper),
    Adagrad(AdagradHyper),
}

impl Case {
    fn update(&self) -> Update {
        let h = &self.hyper;
        match self.optimizer.as_str() {
            "sgd" => Update::Sgd(SgdHyper {
                momentum: h.momentum.expect("sgd momentum"),
                nesterov: h.nesterov.expect("sgd nesterov"),
                weight_decay: h.weight_decay as f32,
            }),
            "adamw" => Update::Adamw(AdamwHyper {
                beta1: h.beta1.expect("adamw beta1"),
                beta2: h.beta2.expect("adamw beta2"),
                eps: h.eps.expect("adamw eps"),
                weight_decay: h.weight_decay,
            }),
            "adagrad" => Update::Adagrad(AdagradHyper {
                lr_decay: h.lr_decay.expect("adagrad lr_decay"),
                weight_decay: h.weight_decay,
                eps: h.eps.expect("adagrad eps"),
            }),
            other => panic!("unknown optimizer {other}"),
        }
    }
}

/// Where each tensor starts in a slab, in elements, and the slab's length:
/// every entry on a 256-byte boundary.
pub fn layout(lengths: &[usize]) -> (Vec<usize>, usize) {
    let mut starts = Vec::new();
    let mut end = 0;
    for &n in lengths {
        starts.push(end);
        end += align_up(n * 4) / 4;
    }
    (starts, end)
}

/// The tensors `flat` holds one after another, placed in a slab.
fn to_slab(lengths: &[usize], flat: &[f32]) -> Vec<f32> {
    let (starts, total) = layout(lengths);
    let mut slab = vec![0.0; total];
    let mut at = 0;
    for (&n, &s) in lengths.iter().zip(&starts) {
        slab[s..s + n].copy_from_slice(&flat[at..at + n]);
        at += n;
    }
    slab
}

/// Asserts a slab holds `expected` (the tensors one after another) to
/// [`REL`] of the larger of `expected` and `peak` (the largest magnitudes
/// PyTorch's values had before), and zeros in its padding; then raises
/// `peak` to this step's magnitudes.
fn assert_slab(what: &str, lengths: &[usize], slab: &[f32], expected: &[f32], peak: &mut [f32]) {
    assert_slab_padded(what, lengths, slab, expected, peak, 0.0)
}

/// [`assert_slab`], with `pad` in the padding (Adagrad's sum starts there).
fn assert_slab_padded(what: &str, lengths: &[usize], slab: &[f32], expected: &[f32], peak: &mut [f32], pad: f32) {
    let (starts, total) = layout(lengths);
    assert_eq!(slab.len(), total);
    let n: usize = lengths.iter().sum();
    assert_eq!((expected.len(), peak.len()), (n, n), "{what}: the fixture's lengths");
    let mut at = 0;
    let mut padding = 0;
    for (k, (&n, &s)) in lengths.iter().zip(&starts).enumerate() {
        for i in 0..n {
            let (ours, torch) = (slab[s + i], expected[at + i]);
            let peak = &mut peak[at + i];
            *peak = peak.max(torch.abs());
            let scale = peak.max(FLOOR);
            assert!(
                (ours - torch).abs() <= REL * scale,
                "{what}: tensor {k}[{i}]: ours {ours:e}, PyTorch's {torch:e} (off by {:.2e} of its scale {scale:e})",
                (ours - torch).abs() / scale
            );
        }
        let end = starts.get(k + 1).copied().unwrap_or(total);
        for (i, &padded) in slab.iter().enumerate().take(end).skip(s + n) {
            assert_eq!(padded, pad, "{what}: padding at slab element {i} after tensor {k}");
            padding += 1;
        }
        at += n;
    }
    assert!(padding > 0, "{what}: a layout without padding tests none");
}

fn read(engine: &mut Engine, buf: Buf<f32>) -> Vec<f32> {
    let mut out = vec![0.0; buf.len()];
    engine.read_persistent(buf, &mut out).expect("read back");
    out
}

/// Replays `case` on `arena` and compares every step's parameters and
/// optimizer state with PyTorch's; panics, naming the step and the value,
/// on the first that differs by more than [`REL`].
pub fn check(engine: &mut Engine, name: &str, case: &Case) {
    let lengths = &case.lengths;
    let (_, total) = layout(lengths);
    let update = case.update();
    let constant = case.lr.iter().all(|&r| r == case.lr[0]);
    // A rate that never changes is a table of one.
    let rates = if constant { &case.lr[..1] } else { &case.lr[..] };
    let slab = Shape::new(&[total]);
    let mut p = engine.persistent();
    let params = p
        .upload("params", slab, &to_slab(lengths, &case.params))
        .expect("params");
    let grads = p.zeros::<f32>("grads", slab).expect("grads");
    // Adagrad's sum starts at its initial value (the padding too, as
    // `optim::Adagrad` fills it); every other state at zero.
    let start = case.hyper.initial_accumulator_value.unwrap_or(0.0) as f32;
    let state = [
        p.filled::<f32>("state 0", slab, start).expect("state"),
        p.zeros::<f32>("state 1", slab).expect("state"),
    ];
    let clip = ClipBufs::new(&mut p).expect("clip figures");
    let (starts, _) = layout(lengths);
    let runs: Vec<Buf<f32>> = starts
        .iter()
        .zip(lengths)
        .map(|(&s, &n)| grads.slice(s, n).expect("a run"))
        .collect();
    let table = p.upload("lr", Shape::new(&[rates.len()]), rates).expect("lr");
    let cursor = StepCursor::new(&mut p).expect("cursor");
    let lr = LrAt::new(table, cursor);
    // The largest magnitude of each value so far: parameters, then state.
    let mut peaks = [
        case.params.iter().map(|v| v.abs()).collect::<Vec<_>>(),
        vec![0.0; case.params.len()],
        vec![0.0; case.params.len()],
    ];
    let mut grad_peak = vec![0.0; case.params.len()];
    for (k, record) in case.steps.iter().enumerate() {
        let what = |s: &str| format!("{name}, step {}: {s}", k + 1);
        cursor.set(engine, k as u32, k as u64).expect("cursor");
        engine
            .write_persistent(grads, &to_slab(lengths, &record.grad))
            .expect("grads");
        engine
            .step(|s| {
                if let Some(max_norm) = case.hyper.clip_norm {
                    for (k, run) in runs.iter().enumerate() {
                        s.clip_sum_squares(*run, clip, k == 0)?;
                    }
                    s.clip_coefficient(clip, max_norm)?;
                    for run in &runs {
                        s.clip_scale(*run, clip)?;
                    }
                }
                match &update {
                    Update::Sgd(h) => {
                        let velocity = (h.momentum > 0.0).then_some(state[0]);
                        s.sgd_update(params, grads, velocity, lr, *h)
                    }
                    Update::Adamw(h) => s.adamw_update(params, grads, state[0], state[1], lr, *h),
                    Update::Adagrad(h) => s.adagrad_update(params, grads, state[0], lr, *h),
                }
            })
            .unwrap_or_else(|e| panic!("{}", what(&e.to_string())));
        match case.hyper.clip_norm {
            Some(_) => {
                let norm = read(engine, clip.figures)[0];
                let torch = record.grad_norm.expect("a clipped case's grad_norm");
                assert!(
                    (norm - torch).abs() <= REL * torch,
                    "{}: ours {norm:e}, PyTorch's {torch:e}",
                    what("grad_norm")
                );
                let clipped = record.clipped_grad.as_ref().expect("clipped_grad");
                grad_peak.iter_mut().for_each(|p| *p = 0.0);
                assert_slab(
                    &what("clipped_grad"),
                    lengths,
                    &read(engine, grads),
                    clipped,
                    &mut grad_peak,
                );
            }
            None => assert!(record.grad_norm.is_none() && record.clipped_grad.is_none()),
        }
        let [p_peak, s0_peak, s1_peak] = &mut peaks;
        assert_slab(&what("param"), lengths, &read(engine, params), &record.param, p_peak);
        match &update {
            Update::Sgd(h) if h.momentum > 0.0 => {
                let expected = record.momentum_buffer.as_ref().expect("a momentum buffer");
                assert_slab(
                    &what("momentum_buffer"),
                    lengths,
                    &read(engine, state[0]),
                    expected,
                    s0_peak,
                );
            }
            Update::Sgd(_) => assert!(record.momentum_buffer.is_none()),
            Update::Adamw(_) => {
                // PyTorch's update count is the cursor's global step + 1.
                assert_eq!(record.step, Some(k as u64 + 1), "{}", what("step"));
                let (m, v) = (record.exp_avg.as_ref(), record.exp_avg_sq.as_ref());
                assert_slab(
                    &what("exp_avg"),
                    lengths,
                    &read(engine, state[0]),
                    m.expect("exp_avg"),
                    s0_peak,
                );
                let v_now = read(engine, state[1]);
                assert_slab(&what("exp_avg_sq"), lengths, &v_now, v.expect("exp_avg_sq"), s1_peak);
            }
            Update::Adagrad(_) => {
                assert_eq!(record.step, Some(k as u64 + 1), "{}", what("step"));
                let sum = record.sum.as_ref().expect("sum");
                assert_slab_padded(&what("sum"), lengths, &read(engine, state[0]), sum, s0_peak, start);
            }
        }
    }
}
