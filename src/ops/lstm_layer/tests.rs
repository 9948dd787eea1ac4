use crate::ops::gradcheck::{assert_near, check, engine, values};
use crate::tensor::{Shape, Tensor};
use crate::{Error, Result, Step};

/// `(T, B, H)` of the tests' layers.
const DIMS: (usize, usize, usize) = (3, 2, 3);

/// Hidden sizes that take each of the CPU kernels' ways along a row, 8
/// units at a time: partial vectors only (3), full vectors and a shifted
/// last one over inputs the backward writes over (11), full only (16).
const EVERY_ROW_PATH: [(usize, usize, usize); 3] = [DIMS, (3, 2, 11), (2, 3, 16)];

fn shapes((t, b, h): (usize, usize, usize)) -> [Shape; 4] {
    let state = Shape::new(&[b, h]);
    [Shape::new(&[t, b, 4 * h]), Shape::new(&[4 * h, h]), state, state]
}

fn inputs((t, b, h): (usize, usize, usize)) -> Vec<Vec<f32>> {
    vec![
        values(t * b * 4 * h, 51, -1.5, 1.5),
        values(4 * h * h, 52, -0.8, 0.8),
        values(b * h, 53, -1.0, 1.0),
        values(b * h, 54, -1.0, 1.0),
    ]
}

/// The same layer a step at a time, from `lstm_cell` and `linear`: the
/// definition the fused op must equal.
fn by_cells<'s>(
    s: &mut Step<'s>,
    proj: Tensor<'s>,
    w_hh: Tensor<'s>,
    h0: Option<Tensor<'s>>,
    c0: Option<Tensor<'s>>,
) -> Result<(Tensor<'s>, Tensor<'s>)> {
    let steps = proj.shape().dim(0);
    let (mut h, mut c) = (h0, c0);
    let mut cells = Vec::new();
    let hs = Tensor::stack(s, steps, |s, t| {
        let from_x = proj.select(s, t)?;
        let from_h = h.map(|h| h.linear(s, w_hh, None)).transpose()?;
        let (next_h, next_c) = from_x.lstm_cell(s, from_h, c)?;
        (h, c) = (Some(next_h), Some(next_c));
        cells.push(next_c);
        Ok(next_h)
    })?;
    let cs = Tensor::stack(s, steps, |_, t| Ok(cells[t]))?;
    Ok((hs, cs))
}

/// `h` and `c` of every step, by the fused op or by cells.
fn run(dims: (usize, usize, usize), fused: bool, with_state: bool) -> (Vec<f32>, Vec<f32>) {
    let [sp, sw, sh, sc] = shapes(dims);
    let v = inputs(dims);
    engine()
        .step(|s| {
            let (p, w) = (s.input("proj", sp, &v[0])?, s.input("w_hh", sw, &v[1])?);
            let h0 = with_state.then(|| s.input("h0", sh, &v[2])).transpose()?;
            let c0 = with_state.then(|| s.input("c0", sc, &v[3])).transpose()?;
            let (h, c) = match fused {
                true => p.lstm_layer(s, w, h0, c0)?,
                false => by_cells(s, p, w, h0, c0)?,
            };
            let (mut hv, mut cv) = (vec![0.0; h.shape().numel()], vec![0.0; c.shape().numel()]);
            s.read(h, &mut hv)?;
            s.read(c, &mut cv)?;
            Ok((hv, cv))
        })
        .unwrap()
}

#[test]
fn the_layer_equals_its_steps_one_cell_at_a_time() {
    for dims in EVERY_ROW_PATH {
        for with_state in [false, true] {
            let (fh, fc) = run(dims, true, with_state);
            let (ch, cc) = run(dims, false, with_state);
            assert_near(&fh, &ch, "hidden states");
            assert_near(&fc, &cc, "cells");
        }
    }
}

#[test]
fn a_forward_no_backward_reads_keeps_one_steps_gates_and_the_same_outputs() {
    // Evaluation: the same h and c, bit for bit, as a forward recording for
    // backward, in a step lower by at least the other steps' gates.
    let dims @ (t, b, h) = (6, 2, 8);
    let [sp, sw, sh, sc] = shapes(dims);
    let v = inputs(dims);
    let forward = |grad: bool| {
        let mut engine = engine();
        let out = engine
            .step(|s| {
                s.set_grad_enabled(grad);
                let (p, w) = (s.variable("proj", sp, &v[0])?, s.variable("w_hh", sw, &v[1])?);
                let (h0, c0) = (s.variable("h0", sh, &v[2])?, s.variable("c0", sc, &v[3])?);
                let (h, c) = p.lstm_layer(s, w, Some(h0), Some(c0))?;
                assert_eq!(h.requires_grad(), grad);
                let (mut hv, mut cv) = (vec![0.0; h.shape().numel()], vec![0.0; c.shape().numel()]);
                s.read(h, &mut hv)?;
                s.read(c, &mut cv)?;
                Ok([hv, cv].concat())
            })
            .unwrap();
        (out, engine.arena().stats().step_high_water_bytes)
    };
    let (recorded, with_gates) = forward(true);
    let (evaluated, with_one) = forward(false);
    let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&evaluated), bits(&recorded));
    let other_steps = (t - 1) * b * 4 * h * std::mem::size_of::<f32>();
    assert!(
        with_one + other_steps <= with_gates,
        "{with_one} bytes without backward, {with_gates} with: not {other_steps} fewer"
    );
}

#[test]
fn lstm_layer_gradient_matches_finite_differences() {
    // Both outputs read at every step, so every path of backward is taken:
    // the gradient each step's h and c receive from outside and from the
    // next step, the initial state's, and W_hh's over steps 1.. and step 0.
    for dims in EVERY_ROW_PATH {
        check(&shapes(dims), &inputs(dims), &[0, 1, 2, 3], &|s, xs| {
            let (h, c) = xs[0].lstm_layer(s, xs[1], Some(xs[2]), Some(xs[3]))?;
            let c = c.tanh(s)?;
            h.add(s, c)
        });
    }
}

#[test]
fn from_zeros_and_read_only_at_the_last_step_still_differentiates() {
    // A classifier's use: no initial state, only the last h read on.
    let [sp, sw, ..] = shapes(DIMS);
    let v = inputs(DIMS);
    check(&[sp, sw], &v[..2], &[0, 1], &|s, xs| {
        let (h, _) = xs[0].lstm_layer(s, xs[1], None, None)?;
        h.select(s, DIMS.0 - 1)
    });
}

#[test]
fn one_step_from_zeros_gives_the_recurrent_weight_a_zero_gradient() {
    // W_hh had no effect: its gradient must be zeros, written, not whatever
    // the step region held (a longer layer's step runs first to fill it).
    let mut engine = engine();
    let gradient_of_w = |engine: &mut crate::Engine, dims| {
        let [sp, sw, ..] = shapes(dims);
        let v = inputs(dims);
        engine
            .step(|s| {
                let (p, w) = (s.variable("proj", sp, &v[0])?, s.variable("w_hh", sw, &v[1])?);
                let (h, c) = p.lstm_layer(s, w, None, None)?;
                let y = h.add(s, c)?;
                let g = s.input("upstream", y.shape(), &values(y.shape().numel(), 7, 0.5, 1.5))?;
                let grads = s.backward_from(y, g)?;
                let gw = s.grad(&grads, w).expect("W_hh has a gradient");
                let mut out = vec![0.0; sw.numel()];
                s.read(gw, &mut out)?;
                Ok(out)
            })
            .unwrap()
    };
    let longer = gradient_of_w(&mut engine, (3, 2, 2));
    assert!(longer.iter().any(|&g| g.abs() > 1e-3), "{longer:?}");
    assert_eq!(gradient_of_w(&mut engine, (1, 2, 2)), vec![0.0; 16]);
    // And the rest of it still differentiates.
    let dims = (1, 2, 2);
    let [sp, sw, ..] = shapes(dims);
    check(&[sp, sw], &inputs(dims)[..2], &[0], &|s, xs| {
        let (h, c) = xs[0].lstm_layer(s, xs[1], None, None)?;
        h.add(s, c)
    });
}

#[test]
fn mismatched_shapes_are_shape_errors() {
    let mut engine = engine();
    let cases: [(&[usize], &[usize], &[usize]); 4] = [
        (&[2, 2, 6], &[6, 1], &[2, 1]), // gates not 4 wide
        (&[2, 2, 8], &[8, 3], &[2, 2]), // W_hh of the wrong hidden size
        (&[2, 2, 8], &[8, 2], &[3, 2]), // an initial state of another batch
        (&[0, 2, 8], &[8, 2], &[2, 2]), // no steps
    ];
    for (proj, w, state) in cases {
        let err = engine
            .step(|s| {
                let zeros = |d: &[usize]| vec![0.0; d.iter().product()];
                let p = s.input("p", Shape::new(proj), &zeros(proj))?;
                let w = s.input("w", Shape::new(w), &zeros(w))?;
                let h0 = s.input("h0", Shape::new(state), &zeros(state))?;
                p.lstm_layer(s, w, Some(h0), None).map(|_| ())
            })
            .unwrap_err();
        assert!(matches!(err, Error::Shape { op: "lstm_layer", .. }), "{proj:?}: {err}");
    }
}
