//! sigmoid and tanh on the GPU give the CPU's outputs and gradients, in
//! fp32 over their steep middles and flat tails, and in bf16 fp32's
//! rounded (see `bf16.rs`).

use super::bf16::*;
use super::*;

/// `n` values in [-6, 6): into both saturated tails.
fn wide(n: usize, seed: u64) -> Vec<f32> {
    values(n, seed).into_iter().map(|v| 6.0 * v).collect()
}

#[test]
fn sigmoid_matches_the_cpu() {
    for dims in [[3, 5, 7, 9], [1, 1, 1, 3], [4, 33, 65, 1]] {
        same_on_both(&format!("sigmoid {dims:?}"), &move |s| {
            let shape = Shape::new(&dims);
            let x = s.variable("x", shape, &wide(shape.numel(), 71))?;
            let y = x.sigmoid(s)?;
            with_grads(s, y, &[("x grad", x)])
        });
    }
}

#[test]
fn tanh_matches_the_cpu() {
    for dims in [[3, 5, 7, 9], [1, 1, 1, 3], [4, 33, 65, 1]] {
        same_on_both(&format!("tanh {dims:?}"), &move |s| {
            let shape = Shape::new(&dims);
            let x = s.variable("x", shape, &wide(shape.numel(), 72))?;
            let y = x.tanh(s)?;
            with_grads(s, y, &[("x grad", x)])
        });
    }
}

/// An LSTM cell's output, `sigmoid(o) · tanh(c)`'s activations on one
/// input: both ops' gradients meet on it.
#[test]
fn an_lstm_cells_activations_match_the_cpu() {
    same_on_both("sigmoid and tanh of one input", &|s| {
        let shape = Shape::new(&[8, 32]);
        let x = s.variable("x", shape, &wide(shape.numel(), 73))?;
        let gate = x.sigmoid(s)?;
        let cell = x.tanh(s)?;
        let y = gate.add(s, cell)?.tanh(s)?;
        with_grads(s, y, &[("x grad", x)])
    });
}

#[test]
fn sigmoid_in_bf16_is_fp32s_rounded() {
    same_in_bf16("bf16 sigmoid", BF16_TOL, &|s| {
        let (x, h) = input(s, "x", Shape::new(&[3, 5, 7, 9]), 74)?;
        let y = h.sigmoid(s)?;
        with_grads_as(s, y, &[("x grad", x)])
    });
}

#[test]
fn tanh_in_bf16_is_fp32s_rounded() {
    same_in_bf16("bf16 tanh", BF16_TOL, &|s| {
        let (x, h) = input(s, "x", Shape::new(&[3, 5, 7, 9]), 75)?;
        let y = h.tanh(s)?;
        with_grads_as(s, y, &[("x grad", x)])
    });
}
