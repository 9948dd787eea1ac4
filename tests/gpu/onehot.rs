//! onehot_linear on the GPU gives the CPU's output and gradients (more
//! tokens than one 256-token tile, columns named often and never), its
//! weight gradient the same bits run after run, and a two-layer LSTM
//! reading one-hot ids (`--embed 0`) the CPU's output and every parameter's
//! gradient.

use super::*;
use bumpgrad::nn::{Lstm, ParamStore, Sequence};

#[test]
fn onehot_linear_matches_the_cpu() {
    same_on_both("onehot_linear", &|s| {
        let w = s.variable("w", Shape::new(&[37, 13]), &values(37 * 13, 91))?;
        let b = s.variable("b", Shape::new(&[37]), &values(37, 92))?;
        let tokens: Vec<u32> = (0..700u32)
            .map(|n| [0, 12, 3, 0, 11, 4, 12, 10][n as usize % 8])
            .collect();
        let tokens = s.labels(&tokens)?;
        let y = w.onehot_linear(s, tokens, b)?;
        with_grads(s, y, &[("weight grad", w), ("bias grad", b)])
    });
}

#[test]
fn onehot_linear_backward_is_deterministic_on_the_gpu() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let body: &Body = &|s| {
        let w = s.variable("w", Shape::new(&[200, 65]), &values(200 * 65, 93))?;
        let b = s.variable("b", Shape::new(&[200]), &values(200, 94))?;
        let tokens: Vec<u32> = (0..4096u32).map(|n| (n * 7919 % 65) * (n % 3 + 1) % 65).collect();
        let tokens = s.labels(&tokens)?;
        let y = w.onehot_linear(s, tokens, b)?;
        with_grads(s, y, &[("weight grad", w), ("bias grad", b)])
    };
    let Some(first) = gpu("onehot_linear determinism") else {
        return;
    };
    let a = run(first, body);
    let b = run(gpu("onehot_linear determinism").expect("the GPU opened once"), body);
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        let same = x.iter().zip(y).all(|(p, q)| p.to_bits() == q.to_bits());
        assert!(same, "{name}: two runs differ");
    }
}

/// A two-layer LSTM of 8 reading T·B = 6·4 one-hot ids of 11: its output
/// and every parameter's gradient.
fn one_hot_lstm(device: Device) -> Vec<(&'static str, Vec<f32>)> {
    const NAMES: [&str; 8] = [
        "weight_ih_l0",
        "weight_hh_l0",
        "bias_ih_l0",
        "bias_hh_l0",
        "weight_ih_l1",
        "weight_hh_l1",
        "bias_ih_l1",
        "bias_hh_l1",
    ];
    let (steps, batch, vocab) = (6, 4, 11);
    let mut engine = Engine::new(device, 16 << 20).expect("arena");
    engine.arena_mut().set_poison_step(true);
    let (store, lstm) =
        ParamStore::build(&mut engine.persistent(), 6, |pb| Lstm::new(pb, vocab, 8, 2)).expect("builds");
    let tokens: Vec<u32> = (0..steps * batch).map(|n| (n * 5 % vocab) as u32).collect();
    let params: Vec<_> = store.params().collect();
    engine
        .step(|s| {
            let ids = s.labels(&tokens)?;
            let y = lstm.run(s, Sequence::OneHot { ids, steps }, &mut [None, None])?;
            let gy = s.input("upstream grad", y.shape(), &values(y.shape().numel(), 95))?;
            let grads = s.backward_from(y, gy)?;
            let mut named = vec![("output", y)];
            for (name, p) in NAMES.iter().zip(&params) {
                named.push((*name, s.param_grad(&grads, p).expect("every parameter gets a gradient")));
            }
            read_all(s, named)
        })
        .expect("the step runs")
}

#[test]
fn an_lstm_reading_one_hot_ids_matches_the_cpu() {
    let test = "one-hot lstm";
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let Some(gpu) = gpu(test) else { return };
    let on_cpu = one_hot_lstm(Device::cpu(1).expect("cpu"));
    let on_gpu = one_hot_lstm(gpu);
    assert_same_names(test, &on_cpu, &on_gpu);
    for ((name, c), (_, g)) in on_cpu.iter().zip(&on_gpu) {
        assert_close(&format!("{test}: {name}"), c, g);
    }
}
