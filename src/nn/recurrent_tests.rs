//! The recurrent layers against PyTorch's definitions: their parameters'
//! names, shapes and initial spread; their forward against the equations
//! of `nn.LSTM` and `nn.RNN` evaluated on the host in f64; every
//! parameter's and the input's gradient against finite differences.

use super::{Embedding, Lstm, LstmState, Rnn, Sequence};
use crate::autograd::Grads;
use crate::nn::{ParamBuilder, ParamStore};
use crate::ops::gradcheck::values;
use crate::tensor::{Param, Shape, Tensor};
use crate::{Device, Engine, Result, Step};

fn engine() -> Engine {
    Engine::new(Device::cpu(2).expect("cpu"), 16 << 20).expect("arena")
}

/// Every declared entry's name and dimensions, in order.
fn names<M>(build: impl Fn(&ParamBuilder<'_>) -> Result<M>) -> Vec<(String, Vec<usize>)> {
    let (store, _) = ParamStore::build(&mut engine().persistent(), 1, build).expect("builds");
    store
        .entries()
        .iter()
        .map(|e| (e.name.clone(), e.shape.dims().to_vec()))
        .collect()
}

#[test]
fn parameters_are_named_and_shaped_as_pytorchs() {
    let lstm = names(|pb| Lstm::new(&pb.pp("rnn"), 5, 3, 2));
    let want = |g: usize| {
        vec![
            ("rnn.weight_ih_l0".to_string(), vec![g * 3, 5]),
            ("rnn.weight_hh_l0".into(), vec![g * 3, 3]),
            ("rnn.bias_ih_l0".into(), vec![g * 3]),
            ("rnn.bias_hh_l0".into(), vec![g * 3]),
            ("rnn.weight_ih_l1".into(), vec![g * 3, 3]),
            ("rnn.weight_hh_l1".into(), vec![g * 3, 3]),
            ("rnn.bias_ih_l1".into(), vec![g * 3]),
            ("rnn.bias_hh_l1".into(), vec![g * 3]),
        ]
    };
    assert_eq!(lstm, want(4));
    assert_eq!(names(|pb| Rnn::new(&pb.pp("rnn"), 5, 3, 2)), want(1));
    assert_eq!(
        names(|pb| Embedding::new(&pb.pp("embed"), 65, 7)),
        vec![("embed.weight".to_string(), vec![65, 7])]
    );
}

#[test]
fn parameters_start_uniform_within_one_over_root_hidden() {
    let mut engine = engine();
    let (store, _) = ParamStore::build(&mut engine.persistent(), 3, |pb| Lstm::new(pb, 6, 16, 1)).expect("builds");
    for p in store.params() {
        let mut v = vec![0.0; p.shape().numel()];
        engine.read_persistent(p.buf(), &mut v).expect("reads");
        assert!(v.iter().all(|x| x.abs() <= 0.25), "{}", store.name(&p));
        let var = v.iter().map(|x| x * x).sum::<f32>() / v.len() as f32;
        // U(−b, b) has variance b²/3: 0.0208 for b = 1/4.
        assert!((var - 0.0625 / 3.0).abs() < 0.006, "{}: {var}", store.name(&p));
    }
}

#[test]
fn sizes_of_zero_and_inputs_of_the_wrong_shape_are_shape_errors() {
    let err = ParamStore::build(&mut engine().persistent(), 1, |pb| Lstm::new(pb, 3, 0, 1)).unwrap_err();
    assert!(err.to_string().contains("hidden unit"), "{err}");
    let mut engine = engine();
    let (_, lstm) = ParamStore::build(&mut engine.persistent(), 1, |pb| Lstm::new(pb, 3, 2, 2)).expect("builds");
    for (dims, layers) in [(&[4usize, 2, 5][..], 2usize), (&[8, 3][..], 2), (&[4, 2, 3][..], 1)] {
        let err = engine
            .step(|s| {
                let x = s.input("x", Shape::new(dims), &vec![0.0; Shape::new(dims).numel()])?;
                let mut state = [None, None];
                lstm.forward(s, x, &mut state[..layers]).map(|_| ())
            })
            .unwrap_err();
        assert!(err.to_string().contains("lstm"), "{dims:?}: {err}");
    }
}

/// A parameter's values on the host, as f64.
fn host(engine: &mut Engine, p: Param) -> Vec<f64> {
    let mut v = vec![0.0f32; p.shape().numel()];
    engine.read_persistent(p.buf(), &mut v).expect("reads");
    v.into_iter().map(f64::from).collect()
}

fn sigmoid(x: f64) -> f64 {
    1.0 / (1.0 + (-x).exp())
}

/// `W·v + b` for `W` `[rows, v.len()]`.
fn affine(w: &[f64], v: &[f64], b: &[f64]) -> Vec<f64> {
    b.iter()
        .enumerate()
        .map(|(r, &b)| b + v.iter().enumerate().map(|(k, &x)| w[r * v.len() + k] * x).sum::<f64>())
        .collect()
}

/// PyTorch's `nn.LSTM` equations for one layer over `xs` (`[T][B][I]`)
/// from `(h, c)`: every step's `h` and the last `(h, c)`.
#[allow(clippy::type_complexity)]
fn lstm_reference(
    w: [&[f64]; 4],
    xs: &[Vec<Vec<f64>>],
    mut h: Vec<Vec<f64>>,
    mut c: Vec<Vec<f64>>,
) -> (Vec<Vec<Vec<f64>>>, Vec<Vec<f64>>, Vec<Vec<f64>>) {
    let [w_ih, w_hh, b_ih, b_hh] = w;
    let hd = b_ih.len() / 4;
    let mut out = Vec::new();
    for x in xs {
        for b in 0..x.len() {
            let gx = affine(w_ih, &x[b], b_ih);
            let gh = affine(w_hh, &h[b], b_hh);
            let gate = |k: usize, j: usize| gx[k * hd + j] + gh[k * hd + j];
            for j in 0..hd {
                let (i, f, g, o) = (
                    sigmoid(gate(0, j)),
                    sigmoid(gate(1, j)),
                    gate(2, j).tanh(),
                    sigmoid(gate(3, j)),
                );
                c[b][j] = f * c[b][j] + i * g;
                h[b][j] = o * c[b][j].tanh();
            }
        }
        out.push(h.clone());
    }
    (out, h, c)
}

fn assert_close(what: &str, got: &[f32], want: &[f64]) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (&g, &w)) in got.iter().zip(want).enumerate() {
        assert!((g as f64 - w).abs() < 2e-6, "{what}[{i}]: {g} vs {w}");
    }
}

#[test]
fn a_two_layer_lstm_matches_pytorchs_equations() {
    let (steps, batch, input, hidden) = (4, 2, 3, 5);
    let mut engine = engine();
    let (store, lstm) =
        ParamStore::build(&mut engine.persistent(), 7, |pb| Lstm::new(pb, input, hidden, 2)).expect("builds");
    let p: Vec<Vec<f64>> = store.params().map(|p| host(&mut engine, p)).collect();
    let x = values(steps * batch * input, 51, -1.0, 1.0);
    // Layer 0 starts from a given state, layer 1 from zeros.
    let (h0, c0) = (
        values(batch * hidden, 52, -0.5, 0.5),
        values(batch * hidden, 53, -0.5, 0.5),
    );
    let (out, finals) = engine
        .step(|s| {
            let xs = s.input("x", Shape::new(&[steps, batch, input]), &x)?;
            let state0 = LstmState {
                h: s.input("h0", Shape::new(&[batch, hidden]), &h0)?,
                c: s.input("c0", Shape::new(&[batch, hidden]), &c0)?,
            };
            let mut state = [Some(state0), None];
            let y = lstm.forward(s, xs, &mut state)?;
            let mut out = vec![0.0; y.shape().numel()];
            s.read(y, &mut out)?;
            let mut finals = Vec::new();
            for st in state.into_iter().flatten() {
                for t in [st.h, st.c] {
                    let mut v = vec![0.0; batch * hidden];
                    s.read(t, &mut v)?;
                    finals.push(v);
                }
            }
            Ok((out, finals))
        })
        .expect("runs");
    let rows =
        |v: &[f32], n: usize| -> Vec<Vec<f64>> { v.chunks(n).map(|r| r.iter().map(|&x| x as f64).collect()).collect() };
    let xs: Vec<Vec<Vec<f64>>> = x.chunks(batch * input).map(|step| rows(step, input)).collect();
    let weights = |k: usize| [&p[4 * k][..], &p[4 * k + 1][..], &p[4 * k + 2][..], &p[4 * k + 3][..]];
    let (y0, h_0, c_0) = lstm_reference(weights(0), &xs, rows(&h0, hidden), rows(&c0, hidden));
    let zeros = vec![vec![0.0; hidden]; batch];
    let (y1, h_1, c_1) = lstm_reference(weights(1), &y0, zeros.clone(), zeros);
    let flat = |v: &[Vec<f64>]| v.concat();
    assert_close("output", &out, &y1.iter().map(|s| flat(s)).collect::<Vec<_>>().concat());
    assert_close("layer 0 h", &finals[0], &flat(&h_0));
    assert_close("layer 0 c", &finals[1], &flat(&c_0));
    assert_close("layer 1 h", &finals[2], &flat(&h_1));
    assert_close("layer 1 c", &finals[3], &flat(&c_1));
}

#[test]
fn a_two_layer_rnn_matches_pytorchs_equations() {
    let (steps, batch, input, hidden) = (3, 2, 4, 3);
    let mut engine = engine();
    let (store, rnn) =
        ParamStore::build(&mut engine.persistent(), 8, |pb| Rnn::new(pb, input, hidden, 2)).expect("builds");
    let p: Vec<Vec<f64>> = store.params().map(|p| host(&mut engine, p)).collect();
    let x = values(steps * batch * input, 54, -1.0, 1.0);
    let h1 = values(batch * hidden, 55, -0.5, 0.5);
    let out = engine
        .step(|s| {
            let xs = s.input("x", Shape::new(&[steps, batch, input]), &x)?;
            let mut state = [None, Some(s.input("h1", Shape::new(&[batch, hidden]), &h1)?)];
            let y = rnn.forward(s, xs, &mut state)?;
            let mut out = vec![0.0; y.shape().numel()];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .expect("runs");
    // h' = tanh(W_ih x + b_ih + W_hh h + b_hh), layer by layer.
    let mut layer_in: Vec<Vec<f64>> = x.chunks(input).map(|r| r.iter().map(|&v| v as f64).collect()).collect();
    for (k, start) in [
        (0, vec![0.0; batch * hidden]),
        (1, h1.iter().map(|&v| v as f64).collect()),
    ] {
        let mut h: Vec<Vec<f64>> = start.chunks(hidden).map(<[f64]>::to_vec).collect();
        let mut outs = Vec::new();
        for (n, x) in layer_in.iter().enumerate() {
            let b = n % batch;
            let gx = affine(&p[4 * k], x, &p[4 * k + 2]);
            let gh = affine(&p[4 * k + 1], &h[b], &p[4 * k + 3]);
            h[b] = gx.iter().zip(&gh).map(|(a, b)| (a + b).tanh()).collect();
            outs.push(h[b].clone());
        }
        layer_in = outs;
    }
    assert_close("output", &out, &layer_in.concat());
}

/// Every parameter's gradient in `grads`, read to the host in order.
pub(crate) fn param_grads<'s>(s: &mut Step<'s>, grads: &Grads<'s>, params: &[Param]) -> Result<Vec<Vec<f32>>> {
    params
        .iter()
        .map(|p| {
            let g = s.param_grad(grads, p).expect("every parameter gets a gradient");
            let mut v = vec![0.0; p.shape().numel()];
            s.read(g, &mut v)?;
            Ok(v)
        })
        .collect()
}

/// `sum(f(x) · gy)`'s gradient with respect to every parameter of `store`
/// and to `x`, analytic against central differences.
pub(crate) fn check_every_gradient(
    engine: &mut Engine,
    store: &ParamStore,
    x_shape: Shape,
    f: &dyn for<'s> Fn(&mut Step<'s>, Tensor<'s>) -> Result<Tensor<'s>>,
) {
    const EPS: f32 = 1e-2;
    let x = values(x_shape.numel(), 61, -1.0, 1.0);
    let params: Vec<Param> = store.params().collect();
    let forward = |engine: &mut Engine, x: &[f32]| -> f64 {
        engine
            .step(|s| {
                s.set_grad_enabled(false);
                let xs = s.input("x", x_shape, x)?;
                let y = f(s, xs)?;
                let mut out = vec![0.0; y.shape().numel()];
                s.read(y, &mut out)?;
                let gy = values(out.len(), 62, -1.0, 1.0);
                Ok(out.iter().zip(&gy).map(|(&a, &b)| a as f64 * b as f64).sum())
            })
            .expect("forward")
    };
    let (gx, gp) = engine
        .step(|s| {
            let xs = s.variable("x", x_shape, &x)?;
            let y = f(s, xs)?;
            let gy = s.input("gy", y.shape(), &values(y.shape().numel(), 62, -1.0, 1.0))?;
            let grads = s.backward_from(y, gy)?;
            let mut gx = vec![0.0; x.len()];
            let g = s.grad(&grads, xs).expect("input grad");
            s.read(g, &mut gx)?;
            let mut gp = Vec::new();
            for p in &params {
                let g = s.param_grad(&grads, p).expect("every parameter gets a gradient");
                let mut v = vec![0.0; p.shape().numel()];
                s.read(g, &mut v)?;
                gp.push(v);
            }
            Ok((gx, gp))
        })
        .expect("backward");
    let near = |what: String, analytic: f32, numeric: f64| {
        let tol = 3e-3 + 1e-2 * numeric.abs().max(analytic.abs() as f64);
        assert!(
            (analytic as f64 - numeric).abs() <= tol,
            "{what}: analytic {analytic} vs numeric {numeric}"
        );
    };
    for j in 0..x.len() {
        let (mut plus, mut minus) = (x.clone(), x.clone());
        plus[j] += EPS;
        minus[j] -= EPS;
        let numeric = (forward(engine, &plus) - forward(engine, &minus)) / (2.0 * EPS as f64);
        near(format!("x[{j}]"), gx[j], numeric);
    }
    for (p, g) in params.iter().zip(&gp) {
        // The optimizer reads a parameter's gradient from its slot, not
        // from backward's table: both must hold it (a weight used only
        // through a view once left its slot stale, and trained wrong).
        let mut slot = vec![0.0f32; p.shape().numel()];
        engine.read_persistent(p.grad(), &mut slot).expect("reads the slot");
        let same = slot.iter().zip(g).all(|(a, b)| a.to_bits() == b.to_bits());
        assert!(
            same,
            "parameter {}: its slot does not hold backward's gradient",
            p.index
        );
        let mut v = vec![0.0f32; p.shape().numel()];
        engine.read_persistent(p.buf(), &mut v).expect("reads");
        for j in 0..v.len() {
            let mut moved = v.clone();
            moved[j] = v[j] + EPS;
            engine.write_persistent(p.buf(), &moved).expect("writes");
            let up = forward(engine, &x);
            moved[j] = v[j] - EPS;
            engine.write_persistent(p.buf(), &moved).expect("writes");
            let down = forward(engine, &x);
            engine.write_persistent(p.buf(), &v).expect("writes");
            near(
                format!("{}[{j}]", store.name(p)),
                g[j],
                (up - down) / (2.0 * EPS as f64),
            );
        }
        assert!(
            g.iter().any(|v| v.abs() > 0.03),
            "{}: too small to check",
            store.name(p)
        );
    }
}

#[test]
fn a_two_layer_lstms_gradients_match_finite_differences() {
    let mut engine = engine();
    let (store, lstm) = ParamStore::build(&mut engine.persistent(), 9, |pb| Lstm::new(pb, 3, 2, 2)).expect("builds");
    check_every_gradient(&mut engine, &store, Shape::new(&[4, 2, 3]), &|s, x| {
        let mut state = [None, None];
        let y = lstm.forward(s, x, &mut state)?;
        // The last cell too, as a next window's carried state would use it
        // (added to every step's output).
        let c = state[1].expect("final state").c;
        let c_every_step = Tensor::stack(s, 4, |_, _| Ok(c))?;
        y.add(s, c_every_step)
    });
}

#[test]
fn a_two_layer_rnns_gradients_match_finite_differences() {
    let mut engine = engine();
    let (store, rnn) = ParamStore::build(&mut engine.persistent(), 10, |pb| Rnn::new(pb, 3, 4, 2)).expect("builds");
    check_every_gradient(&mut engine, &store, Shape::new(&[3, 2, 3]), &|s, x| {
        let mut state = [None, None];
        rnn.forward(s, x, &mut state)
    });
}

/// The output and every parameter's gradient of `run` on one-hot ids
/// (`Sequence::OneHot`, a gather of `W_ih`'s columns) and on the one-hot
/// matrix itself (`Sequence::Features`, a product), `sum(y · gy)`'s.
fn one_hot_both_ways(
    engine: &mut Engine,
    store: &ParamStore,
    (steps, batch, vocab): (usize, usize, usize),
    run: &dyn for<'s> Fn(&mut Step<'s>, Sequence<'s>) -> Result<Tensor<'s>>,
) -> [Vec<Vec<f32>>; 2] {
    let ids: Vec<u32> = (0..steps * batch)
        .map(|i| (i * 3 + i / 4) as u32 % vocab as u32)
        .collect();
    let mut onehot = vec![0.0f32; ids.len() * vocab];
    for (n, &t) in ids.iter().enumerate() {
        onehot[n * vocab + t as usize] = 1.0;
    }
    let params: Vec<Param> = store.params().collect();
    [true, false].map(|gather| {
        engine
            .step(|s| {
                let x = match gather {
                    true => Sequence::OneHot {
                        ids: s.labels(&ids)?,
                        steps,
                    },
                    false => Sequence::Features(s.input("onehot", Shape::new(&[steps, batch, vocab]), &onehot)?),
                };
                let y = run(s, x)?;
                let gy = s.input("gy", y.shape(), &values(y.shape().numel(), 63, -1.0, 1.0))?;
                let grads = s.backward_from(y, gy)?;
                let mut out = vec![vec![0.0; y.shape().numel()]];
                s.read(y, &mut out[0])?;
                out.extend(param_grads(s, &grads, &params)?);
                Ok(out)
            })
            .expect("a step")
    })
}

fn assert_same(what: &str, [gathered, multiplied]: [Vec<Vec<f32>>; 2]) {
    for (k, (a, b)) in gathered.iter().zip(&multiplied).enumerate() {
        let worst = a.iter().zip(b).map(|(x, y)| (x - y).abs()).fold(0.0, f32::max);
        assert!(
            worst <= 1e-5,
            "{what}: tensor {k} (0: output, then the parameters) off by {worst}"
        );
        assert!(a.iter().any(|v| v.abs() > 1e-3), "{what}: tensor {k} is all but zero");
    }
}

#[test]
fn an_lstm_reading_one_hot_ids_is_the_lstm_of_the_one_hot_matrix() {
    let mut engine = engine();
    let (store, lstm) = ParamStore::build(&mut engine.persistent(), 11, |pb| Lstm::new(pb, 7, 3, 2)).expect("builds");
    let both = one_hot_both_ways(&mut engine, &store, (4, 3, 7), &|s, x| {
        let mut state = [None, None];
        lstm.run(s, x, &mut state)
    });
    assert_same("lstm", both);
}

#[test]
fn an_rnn_reading_one_hot_ids_is_the_rnn_of_the_one_hot_matrix() {
    let mut engine = engine();
    let (store, rnn) = ParamStore::build(&mut engine.persistent(), 12, |pb| Rnn::new(pb, 7, 4, 1)).expect("builds");
    let both = one_hot_both_ways(&mut engine, &store, (5, 2, 7), &|s, x| {
        let mut state = [None];
        rnn.run(s, x, &mut state)
    });
    assert_same("rnn", both);
}

#[test]
fn one_hot_ids_not_a_whole_number_of_steps_are_a_shape_error() {
    let mut engine = engine();
    let (_, lstm) = ParamStore::build(&mut engine.persistent(), 1, |pb| Lstm::new(pb, 5, 2, 1)).expect("builds");
    for (n, steps) in [(7usize, 2usize), (4, 0)] {
        let err = engine
            .step(|s| {
                let ids = s.labels(&vec![1; n])?;
                lstm.run(s, Sequence::OneHot { ids, steps }, &mut [None]).map(|_| ())
            })
            .unwrap_err();
        assert!(err.to_string().contains("one-hot ids"), "{n} ids, {steps} steps: {err}");
    }
}
