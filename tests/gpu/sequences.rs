//! The sequence ops on the GPU give the CPU's outputs and gradients:
//! embedding (its deterministic backward, repeated tokens included; a
//! token past the table a NaN row, never a read past it), lstm_cell with
//! and without its optional inputs, select and stack in a recurrence, the
//! fused lstm_layer with and without an initial state, and
//! a whole two-layer LSTM language-model step (embedding, `nn::Lstm`,
//! linear, cross-entropy) with every parameter's gradient; and that step
//! from PyTorch's weights against PyTorch's float64 answer
//! (`bench/lstm_step.py`), as the CPU test does; and tree_lstm_cell over
//! leaves and inner nodes; and tree-lstm trained one node at a time and
//! by level as on the CPU.

use super::*;
use bumpgrad::nn::{Embedding, Linear, Lstm, Rnn};

#[path = "../support/lstm_step.rs"]
pub(crate) mod lstm_step;
#[path = "../support/tree_case.rs"]
mod tree_case;
#[path = "../support/tree_step.rs"]
mod tree_step;
use bumpgrad::tasks::TreeBatching;
use bumpgrad::train::{DeviceConfig, Hooks, Reports};

#[test]
fn embedding_matches_the_cpu() {
    same_on_both("embedding", &|s| {
        let table = s.variable("table", Shape::new(&[13, 37]), &values(13 * 37, 81))?;
        // 700 tokens (more than one 256-token tile), rows 0 and 12 often,
        // rows 5 to 9 never.
        let tokens: Vec<u32> = (0..700u32)
            .map(|n| [0, 12, 3, 0, 11, 4, 12, 10][n as usize % 8])
            .collect();
        let tokens = s.labels(&tokens)?;
        let y = table.embedding(s, tokens)?;
        with_grads(s, y, &[("table grad", table)])
    });
}

/// Two runs of the GPU's embedding backward give the same bits.
#[test]
fn embedding_backward_is_deterministic_on_the_gpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let body: &Body = &|s| {
        let table = s.variable("table", Shape::new(&[65, 128]), &values(65 * 128, 82))?;
        let tokens: Vec<u32> = (0..8192u32).map(|n| (n * 7919 % 65) * (n % 3 + 1) % 65).collect();
        let tokens = s.labels(&tokens)?;
        let y = table.embedding(s, tokens)?;
        with_grads(s, y, &[("table grad", table)])
    };
    let Some(first) = gpu("embedding determinism") else {
        return;
    };
    let a = run(first, body);
    let b = run(gpu("embedding determinism").expect("the GPU opened once"), body);
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        let same = x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
        assert!(same, "{name}: two runs differ");
    }
}

#[test]
fn a_token_past_the_table_gives_a_nan_row_on_the_gpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(device) = gpu("embedding past the table") else {
        return;
    };
    let mut engine = Engine::new(device, 1 << 20).expect("arena");
    let out = engine
        .step(|s| {
            let table = s.input("table", Shape::new(&[4, 3]), &values(12, 83))?;
            let tokens = s.labels(&[1, 4, 3])?;
            let y = table.embedding(s, tokens)?;
            let mut out = vec![0.0; 9];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .expect("the GPU cannot report it: the step runs");
    assert!(out[..3].iter().chain(&out[6..]).all(|v| v.is_finite()), "{out:?}");
    assert!(
        out[3..6].iter().all(|v| v.is_nan()),
        "row 1 (token 4 of 4) is NaN: {out:?}"
    );
}

#[test]
fn lstm_cell_matches_the_cpu_with_and_without_its_optional_inputs() {
    for (name, with_h, with_c) in [
        ("lstm_cell", true, true),
        ("lstm_cell first step", false, false),
        ("lstm_cell no hidden summand", false, true),
    ] {
        same_on_both(name, &move |s| {
            let (b, h) = (9, 67);
            let x = s.variable("x", Shape::new(&[b, 4 * h]), &values(b * 4 * h, 84))?;
            let hg = s.variable("hg", Shape::new(&[b, 4 * h]), &values(b * 4 * h, 85))?;
            let cp = s.variable("c_prev", Shape::new(&[b, h]), &values(b * h, 86))?;
            let (hs, cs) = x.lstm_cell(s, with_h.then_some(hg), with_c.then_some(cp))?;
            let ct = cs.tanh(s)?;
            let y = hs.add(s, ct)?;
            let mut inputs = vec![("x grad", x)];
            if with_h {
                inputs.push(("hg grad", hg));
            }
            if with_c {
                inputs.push(("c_prev grad", cp));
            }
            let mut out = with_grads(s, y, &inputs)?;
            out.push(("h", hs));
            out.push(("c", cs));
            Ok(out)
        });
    }
}

#[test]
fn a_recurrence_of_select_linear_lstm_cell_and_stack_matches_the_cpu() {
    same_on_both("lstm recurrence", &|s| {
        let (t_steps, b, h) = (5, 3, 16);
        let proj = s.variable(
            "proj",
            Shape::new(&[t_steps, b, 4 * h]),
            &values(t_steps * b * 4 * h, 87),
        )?;
        let w_hh = s.variable("w_hh", Shape::new(&[4 * h, h]), &values(4 * h * h, 88))?;
        let (mut hs, mut cs): (Option<Tensor<'_>>, Option<Tensor<'_>>) = (None, None);
        let y = Tensor::stack(s, t_steps, |s, t| {
            let from_x = proj.select(s, t)?;
            let from_h = match hs {
                Some(prev) => Some(prev.linear(s, w_hh, None)?),
                None => None,
            };
            let (next_h, next_c) = from_x.lstm_cell(s, from_h, cs)?;
            (hs, cs) = (Some(next_h), Some(next_c));
            Ok(next_h)
        })?;
        with_grads(s, y, &[("proj grad", proj), ("w_hh grad", w_hh)])
    });
}

#[test]
fn the_fused_lstm_layer_matches_the_cpu_with_and_without_an_initial_state() {
    // Sizes off the product kernel's tiles (64 rows, 32 columns, 32 deep),
    // a batch over one row tile among them.
    for (name, with_state, (t_steps, b, h)) in [
        ("lstm_layer", true, (6, 5, 33)),
        ("lstm_layer from zeros", false, (6, 5, 33)),
        ("lstm_layer of 70 rows", true, (3, 70, 40)),
    ] {
        same_on_both(name, &move |s| {
            let proj = s.variable(
                "proj",
                Shape::new(&[t_steps, b, 4 * h]),
                &values(t_steps * b * 4 * h, 89),
            )?;
            let w_hh = s.variable("w_hh", Shape::new(&[4 * h, h]), &values(4 * h * h, 90))?;
            let h0 = s.variable("h0", Shape::new(&[b, h]), &values(b * h, 91))?;
            let c0 = s.variable("c0", Shape::new(&[b, h]), &values(b * h, 92))?;
            let state = |t| with_state.then_some(t);
            let (hs, cs) = proj.lstm_layer(s, w_hh, state(h0), state(c0))?;
            let ct = cs.tanh(s)?;
            let y = hs.add(s, ct)?;
            let mut inputs = vec![("proj grad", proj), ("w_hh grad", w_hh)];
            if with_state {
                inputs.extend([("h0 grad", h0), ("c0 grad", c0)]);
            }
            let mut out = with_grads(s, y, &inputs)?;
            out.push(("h", hs));
            out.push(("c", cs));
            Ok(out)
        });
    }
}

/// One language-model step: embedding 11 × 6, a two-layer LSTM of 8 (or
/// a vanilla RNN), linear to 11, mean cross-entropy over T·B = 4·3 next
/// tokens. Its loss, logits and every parameter's gradient, by name.
fn language_model_step(device: Device, lstm: bool) -> Vec<(&'static str, Vec<f32>)> {
    const NAMES: [&str; 11] = [
        "embed.weight",
        "rnn.weight_ih_l0",
        "rnn.weight_hh_l0",
        "rnn.bias_ih_l0",
        "rnn.bias_hh_l0",
        "rnn.weight_ih_l1",
        "rnn.weight_hh_l1",
        "rnn.bias_ih_l1",
        "rnn.bias_hh_l1",
        "fc.weight",
        "fc.bias",
    ];
    let (steps, batch, vocab) = (4, 3, 11);
    let mut engine = Engine::new(device, 16 << 20).expect("arena");
    engine.arena_mut().set_poison_step(true);
    enum Recurrent {
        Lstm(Lstm),
        Rnn(Rnn),
    }
    let (store, (embed, rnn, fc)) = ParamStore::build(&mut engine.persistent(), 5, |pb| {
        // Declared in the order of NAMES, PyTorch's state_dict order.
        let embed = Embedding::new(&pb.pp("embed"), vocab, 6)?;
        let rnn = match lstm {
            true => Recurrent::Lstm(Lstm::new(&pb.pp("rnn"), 6, 8, 2)?),
            false => Recurrent::Rnn(Rnn::new(&pb.pp("rnn"), 6, 8, 2)?),
        };
        Ok((embed, rnn, Linear::new(&pb.pp("fc"), 8, vocab)?))
    })
    .expect("builds");
    let tokens: Vec<u32> = (0..(steps + 1) * batch).map(|n| (n * 7 % vocab) as u32).collect();
    let params: Vec<_> = store.params().collect();
    engine
        .step(|s| {
            let inputs = s.labels(&tokens[..steps * batch])?;
            let targets = s.labels(&tokens[batch..])?;
            let x = embed.forward(s, inputs)?.reshape(s, Shape::new(&[steps, batch, 6]))?;
            let y = match &rnn {
                Recurrent::Lstm(l) => l.forward(s, x, &mut [None, None])?,
                Recurrent::Rnn(r) => r.forward(s, x, &mut [None, None])?,
            };
            let flat = y.reshape(s, Shape::new(&[steps * batch, 8]))?;
            let logits = fc.forward(s, flat)?;
            let loss = logits.cross_entropy(s, targets, CrossEntropyArgs::default())?;
            let grads = s.backward(loss)?;
            let mut named = vec![("loss", loss), ("logits", logits)];
            for (name, p) in NAMES.iter().zip(&params) {
                assert_eq!(store.name(p), *name);
                named.push((*name, s.param_grad(&grads, p).expect("every parameter gets a gradient")));
            }
            read_all(s, named)
        })
        .expect("the step runs")
}

#[test]
fn a_two_layer_lstm_language_model_step_matches_the_cpu() {
    for (test, lstm) in [("lstm language model", true), ("rnn language model", false)] {
        let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        let Some(gpu) = gpu(test) else { return };
        let on_cpu = language_model_step(Device::cpu(1).expect("cpu"), lstm);
        let on_gpu = language_model_step(gpu, lstm);
        assert_same_names(test, &on_cpu, &on_gpu);
        for ((name, c), (_, g)) in on_cpu.iter().zip(&on_gpu) {
            assert_close(&format!("{test}: {name}"), c, g);
        }
    }
}

/// The two-layer LSTM language model's step from PyTorch's weights on the
/// GPU: loss, logits, `h_n`, `c_n` and every gradient within
/// `lstm_step::TOLERANCE` of PyTorch's float64 answer (as on the CPU,
/// `tests/pytorch_models.rs`), and within 1e-4 of scale of the CPU's.
#[test]
fn a_two_layer_lstm_language_model_step_on_the_gpu_matches_pytorch() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu("lstm language model against pytorch") else {
        return;
    };
    let on_gpu = lstm_step::bumpgrad_step(gpu);
    lstm_step::assert_matches_pytorch("gpu", &on_gpu);
    let on_cpu = lstm_step::bumpgrad_step(Device::cpu(2).expect("cpu"));
    for (name, (_, cpu)) in &on_cpu {
        assert_close(&format!("lstm language model: {name}"), cpu, &on_gpu[name].1);
    }
}

/// Four leaves, then two inner nodes over them (children gathered by
/// `embedding`, their gates from two `linear`s), the Tree-LSTM's level by
/// level step: outputs and every gradient as on the CPU.
#[test]
fn tree_lstm_cell_matches_the_cpu_for_leaves_and_inner_nodes() {
    same_on_both("tree_lstm_cell", &|s| {
        let (h, e) = (37, 23);
        let x = s.variable("x", Shape::new(&[4, e]), &values(4 * e, 91))?;
        let w = s.variable("w", Shape::new(&[3 * h, e]), &values(3 * h * e, 92))?;
        let ul = s.variable("u_l", Shape::new(&[5 * h, h]), &values(5 * h * h, 93))?;
        let ur = s.variable("u_r", Shape::new(&[5 * h, h]), &values(5 * h * h, 94))?;
        let b = s.variable("b", Shape::new(&[5 * h]), &values(5 * h, 95))?;
        let leaf_gates = x.linear(s, w, None)?;
        let (hl, cl) = leaf_gates.tree_lstm_cell(s, None)?;
        let (left, right) = (s.labels(&[0, 2])?, s.labels(&[1, 3])?);
        let (h_left, h_right) = (hl.embedding(s, left)?, hl.embedding(s, right)?);
        let (c_left, c_right) = (cl.embedding(s, left)?, cl.embedding(s, right)?);
        let from_left = h_left.linear(s, ul, Some(b))?;
        let from_right = h_right.linear(s, ur, None)?;
        let gates = from_left.add(s, from_right)?;
        let (hs, cs) = gates.tree_lstm_cell(s, Some((c_left, c_right)))?;
        let ct = cs.tanh(s)?;
        let y = hs.add(s, ct)?;
        let mut out = with_grads(
            s,
            y,
            &[
                ("x grad", x),
                ("w grad", w),
                ("u_l grad", ul),
                ("u_r grad", ur),
                ("b grad", b),
            ],
        )?;
        out.push(("h", hs));
        out.push(("c", cs));
        out.push(("leaf h", hl));
        Ok(out)
    });
}

/// The Tree-LSTM step from PyTorch's weights against its float64 answer
/// (`bench/tree_step.py`), both ways of running the trees, as on the CPU.
#[test]
fn a_tree_lstm_step_on_the_gpu_matches_pytorch_both_ways() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    for (levels, what) in [(false, "gpu, post-order"), (true, "gpu, by level")] {
        let Some(device) = gpu("tree-lstm fixture step") else {
            return;
        };
        let Some(ours) = tree_step::bumpgrad_step(device, levels) else {
            return;
        };
        tree_step::assert_matches_pytorch(what, &ours);
    }
}

/// tree-lstm trained through the session on the GPU and on the CPU, the
/// same trees in the same order, one node at a time and by level: the
/// same losses and accuracies (to float rounding), and the GPU run's one
/// device allocation, the arena.
#[test]
fn tree_lstm_training_on_the_gpu_matches_the_cpu_both_ways() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(_) = gpu("tree-lstm training") else {
        return;
    };
    let data = tree_case::phrase_treebank("gpu");
    for (batch, batching) in [(1, TreeBatching::PostOrder), (8, TreeBatching::Levels)] {
        let run = |device| {
            let cfg = tree_case::config(&data, batch, batching, 2, device);
            let mut reports = Reports::default();
            bumpgrad::train::train(&cfg, Hooks::new(&mut reports)).expect("training");
            reports.0
        };
        let (cpu, gpu) = (run(DeviceConfig::cpu(2)), run(DeviceConfig::cuda()));
        for (c, g) in cpu.iter().zip(&gpu) {
            let apart = (c.train_loss - g.train_loss).abs() / c.train_loss;
            assert!(
                apart < 1e-3,
                "{batching:?} epoch {}: loss {} on the CPU, {} on the GPU",
                c.epoch,
                c.train_loss,
                g.train_loss
            );
            // 60 development trees: a prediction a rounding flips moves
            // the root accuracy by 1/60.
            assert!(
                (c.test_accuracy - g.test_accuracy).abs() <= 1.0 / 60.0 + 1e-9,
                "{batching:?}: {} against {}",
                c.test_accuracy,
                g.test_accuracy
            );
            assert_eq!(
                g.device_allocations,
                Some(1),
                "{batching:?}: the arena is the one allocation"
            );
        }
    }
}
