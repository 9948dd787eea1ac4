use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;
use crate::Error;

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

#[test]
fn one_unit_matches_the_definition_by_hand() {
    // B 1, H 1: gates (i, f, g, o) pre-activations as two summands.
    let (x, hg, cp) = ([0.5, -1.0, 0.25, 2.0], [0.25, 0.5, -1.25, -0.5], 0.75);
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let (h, c) = engine
        .step(|s| {
            let xs = s.input("x", Shape::new(&[1, 4]), &x)?;
            let hs = s.input("hg", Shape::new(&[1, 4]), &hg)?;
            let cs = s.input("c_prev", Shape::new(&[1, 1]), &[cp])?;
            let (h, c) = xs.lstm_cell(s, Some(hs), Some(cs))?;
            Ok((s.scalar(h)?, s.scalar(c)?))
        })
        .unwrap();
    // i = σ(0.75), f = σ(−0.5), g = tanh(−1), o = σ(1.5).
    let (i, f, g, o) = (sigmoid(0.75), sigmoid(-0.5), (-1.0f64).tanh(), sigmoid(1.5));
    let want_c = f * cp as f64 + i * g;
    let want_h = o * want_c.tanh();
    assert!((c as f64 - want_c).abs() < 1e-6, "c {c} vs {want_c}");
    assert!((h as f64 - want_h).abs() < 1e-6, "h {h} vs {want_h}");
}

#[test]
fn lstm_cell_gradient_matches_finite_differences() {
    // B 2; both outputs used, so both gradients reach every input. H 3
    // takes the CPU kernel's partial vectors only, 11 full ones and a
    // shifted last one, 16 full ones only.
    for h in [3, 11, 16] {
        let (gates, state) = (Shape::new(&[2, 4 * h]), Shape::new(&[2, h]));
        check(
            &[gates, gates, state],
            &[
                values(8 * h, 41, -2.0, 2.0),
                values(8 * h, 42, -1.0, 1.0),
                values(2 * h, 43, -1.5, 1.5),
            ],
            &[0, 1, 2],
            &|s, xs| {
                let (h, c) = xs[0].lstm_cell(s, Some(xs[1]), Some(xs[2]))?;
                let c = c.tanh(s)?;
                h.add(s, c)
            },
        );
    }
}

#[test]
fn only_h_used_and_no_previous_state_still_differentiates() {
    // The first step of a sequence: no hidden summand, no previous cell,
    // and only h read on (a classifier's last step): c's gradient is zero.
    let gates = Shape::new(&[3, 8]);
    check(&[gates], &[values(24, 44, -2.0, 2.0)], &[0], &|s, xs| {
        let (h, _) = xs[0].lstm_cell(s, None, None)?;
        Ok(h)
    });
}

#[test]
fn only_c_used_still_differentiates() {
    let (gates, state) = (Shape::new(&[2, 8]), Shape::new(&[2, 2]));
    check(
        &[gates, state],
        &[values(16, 45, -2.0, 2.0), values(4, 46, -1.0, 1.0)],
        &[0, 1],
        &|s, xs| {
            let (_, c) = xs[0].lstm_cell(s, None, Some(xs[1]))?;
            Ok(c)
        },
    );
}

#[test]
fn gates_not_four_wide_or_a_mismatched_state_are_shape_errors() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    for (gates, state) in [([2usize, 6], [2usize, 1]), ([2, 8], [2, 3]), ([2, 0], [2, 0])] {
        let err = engine
            .step(|s| {
                let g = s.input("g", Shape::new(&gates), &vec![0.0; gates[0] * gates[1]])?;
                let c = s.input("c", Shape::new(&state), &vec![0.0; state[0] * state[1]])?;
                g.lstm_cell(s, None, Some(c)).map(|_| ())
            })
            .unwrap_err();
        assert!(matches!(err, Error::Shape { op: "lstm_cell", .. }), "{gates:?}: {err}");
    }
}
