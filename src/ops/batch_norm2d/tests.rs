use super::{BatchNormArgs, RunningStats};
use crate::memory::Buf;
use crate::ops::gradcheck::{check_on, engine, values};
use crate::tensor::{Param, Shape};
use crate::Engine;
use crate::Error;

/// Running statistics for `c` channels in `arena`'s persistent region,
/// made as the parameter store makes buffers (no gradient slot) without
/// reaching up into `nn`.
pub(super) fn running_stats(engine: &mut Engine, mean: &[f32], var: &[f32]) -> RunningStats {
    let c = mean.len();
    let mut p = engine.persistent();
    let mut buffer = |what, shape: Shape, values: &[f32]| Param {
        index: 0,
        buf: p.upload(what, shape, values).expect("upload"),
        grad: Buf::default(),
        shape,
    };
    RunningStats {
        mean: buffer("running_mean", Shape::new(&[c]), mean),
        var: buffer("running_var", Shape::new(&[c]), var),
        batches: buffer("num_batches_tracked", Shape::new(&[]), &[0.0]),
    }
}

fn read(engine: &mut Engine, p: Param) -> Vec<f32> {
    let mut out = vec![0.0; p.shape().numel()];
    engine.read_persistent(p.buf(), &mut out).expect("read");
    out
}

/// Per-channel `(mean, biased variance)` of `x` `[n, c, hw]`, in f64.
fn moments(x: &[f32], c: usize, hw: usize) -> Vec<(f64, f64)> {
    let n = x.len() / (c * hw);
    let at = |i: usize, ch: usize, k: usize| x[(i * c + ch) * hw + k] as f64;
    (0..c)
        .map(|ch| {
            let all: Vec<f64> = (0..n)
                .flat_map(|i| (0..hw).map(move |k| (i, k)))
                .map(|(i, k)| at(i, ch, k))
                .collect();
            let mean = all.iter().sum::<f64>() / all.len() as f64;
            let var = all.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / all.len() as f64;
            (mean, var)
        })
        .collect()
}

/// `(x − μ)/√(σ² + eps)·w + b`, written out per element.
fn reference(x: &[f32], c: usize, hw: usize, stats: &[(f64, f64)], w: &[f32], b: &[f32], eps: f32) -> Vec<f32> {
    x.iter()
        .enumerate()
        .map(|(i, &v)| {
            let ch = (i / hw) % c;
            let (mean, var) = stats[ch];
            ((v as f64 - mean) / (var + eps as f64).sqrt() * w[ch] as f64 + b[ch] as f64) as f32
        })
        .collect()
}

fn assert_near(what: &str, got: &[f32], want: &[f32], tol: f32) {
    assert_eq!(got.len(), want.len(), "{what}");
    for (i, (g, w)) in got.iter().zip(want).enumerate() {
        assert!((g - w).abs() <= tol * w.abs().max(1.0), "{what}[{i}]: {g} vs {w}");
    }
}

const X: [usize; 4] = [2, 3, 3, 4];

#[test]
fn training_gradients_match_finite_differences() {
    let mut engine = engine();
    let stats = running_stats(&mut engine, &[0.0; 3], &[1.0; 3]);
    let shapes = [Shape::new(&X), Shape::new(&[3]), Shape::new(&[3])];
    let inputs = [
        values(72, 31, -2.0, 2.0),
        values(3, 32, 0.5, 1.5),
        values(3, 33, -0.5, 0.5),
    ];
    check_on(&mut engine, &shapes, &inputs, &[0, 1, 2], &move |s, t| {
        t[0].batch_norm2d(s, t[1], t[2], stats, BatchNormArgs::train())
    });
}

#[test]
fn evaluation_gradients_match_finite_differences() {
    let mut engine = engine();
    let stats = running_stats(&mut engine, &[0.3, -0.2, 0.1], &[0.5, 1.3, 2.0]);
    let shapes = [Shape::new(&X), Shape::new(&[3]), Shape::new(&[3])];
    let inputs = [
        values(72, 34, -2.0, 2.0),
        values(3, 35, 0.5, 1.5),
        values(3, 36, -0.5, 0.5),
    ];
    check_on(&mut engine, &shapes, &inputs, &[0, 1, 2], &move |s, t| {
        t[0].batch_norm2d(s, t[1], t[2], stats, BatchNormArgs::eval())
    });
}

/// One step of `args` on fresh `x`, `w`, `b`; the output.
fn forward(
    engine: &mut Engine,
    stats: RunningStats,
    x: &[f32],
    shape: Shape,
    w: &[f32],
    b: &[f32],
    args: BatchNormArgs,
) -> Vec<f32> {
    let c = shape.dim(1);
    engine
        .step(|s| {
            let x = s.input("x", shape, x)?;
            let w = s.input("w", Shape::new(&[c]), w)?;
            let b = s.input("b", Shape::new(&[c]), b)?;
            let y = x.batch_norm2d(s, w, b, stats, args)?;
            let mut out = vec![0.0; shape.numel()];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .expect("step")
}

#[test]
fn training_normalises_with_the_batch_and_updates_the_running_statistics() {
    // A large offset per channel: a one-pass Σx² − (Σx)² variance would
    // lose most of its digits here.
    let (shape, c, hw) = (Shape::new(&[4, 3, 5, 7]), 3, 35);
    let mut engine = engine();
    let (rm0, rv0) = ([0.5f32, -1.0, 2.0], [1.5f32, 0.25, 3.0]);
    let stats = running_stats(&mut engine, &rm0, &rv0);
    let (w, b) = ([1.5, -0.5, 2.0], [0.1, 0.2, -0.3]);
    let args = BatchNormArgs {
        training: true,
        momentum: 0.2,
        eps: 1e-3,
    };
    let (mut rm, mut rv) = (rm0.map(f64::from), rv0.map(f64::from));
    for (step, seed) in [(1, 41), (2, 42)] {
        let x: Vec<f32> = values(shape.numel(), seed, -1.0, 1.0)
            .iter()
            .enumerate()
            .map(|(i, v)| v * (1 + (i / hw) % c) as f32 + 100.0 * ((i / hw) % c) as f32)
            .collect();
        let y = forward(&mut engine, stats, &x, shape, &w, &b, args);
        let batch = moments(&x, c, hw);
        assert_near("output", &y, &reference(&x, c, hw, &batch, &w, &b, args.eps), 1e-4);
        let n = (shape.numel() / c) as f64;
        let m = args.momentum as f64;
        for (ch, &(mean, var)) in batch.iter().enumerate() {
            rm[ch] = m * mean + (1.0 - m) * rm[ch];
            rv[ch] = m * var * n / (n - 1.0) + (1.0 - m) * rv[ch];
        }
        let want = |v: [f64; 3]| v.map(|v| v as f32);
        assert_near(
            &format!("running mean after {step}"),
            &read(&mut engine, stats.mean),
            &want(rm),
            1e-5,
        );
        assert_near(
            &format!("running var after {step}"),
            &read(&mut engine, stats.var),
            &want(rv),
            1e-5,
        );
        assert_eq!(read(&mut engine, stats.batches), [step as f32], "num_batches_tracked");
    }
}

#[test]
fn evaluation_normalises_with_the_running_statistics_and_writes_nothing() {
    let (shape, c, hw) = (Shape::new(&[3, 2, 4, 3]), 2, 12);
    let mut engine = engine();
    let stats = running_stats(&mut engine, &[0.7, -0.4], &[2.5, 0.3]);
    let (w, b) = ([0.8, 1.7], [-0.2, 0.4]);
    let x = values(shape.numel(), 43, -3.0, 3.0);
    let y = forward(&mut engine, stats, &x, shape, &w, &b, BatchNormArgs::eval());
    let running = [(0.7f32 as f64, 2.5f32 as f64), (-0.4f32 as f64, 0.3f32 as f64)];
    assert_near("output", &y, &reference(&x, c, hw, &running, &w, &b, 1e-5), 1e-5);
    assert_eq!(read(&mut engine, stats.mean), [0.7, -0.4]);
    assert_eq!(read(&mut engine, stats.var), [2.5, 0.3]);
    assert_eq!(read(&mut engine, stats.batches), [0.0]);
    // After a training step, evaluation follows the statistics it left.
    forward(&mut engine, stats, &x, shape, &w, &b, BatchNormArgs::train());
    let (rm, rv) = (read(&mut engine, stats.mean), read(&mut engine, stats.var));
    assert_ne!(rm, [0.7, -0.4]);
    let y = forward(&mut engine, stats, &x, shape, &w, &b, BatchNormArgs::eval());
    let running: Vec<(f64, f64)> = rm.iter().zip(&rv).map(|(&m, &v)| (m as f64, v as f64)).collect();
    assert_near(
        "output after training",
        &y,
        &reference(&x, c, hw, &running, &w, &b, 1e-5),
        1e-5,
    );
}

#[test]
fn parameter_gradients_land_in_their_slots_and_a_plain_input_gets_none() {
    // The first layer's shape of use: the input needs no gradient, the
    // weight and bias are parameters (their gradients go to the slab).
    let mut engine = engine();
    let stats = running_stats(&mut engine, &[0.0; 2], &[1.0; 2]);
    let mut p = engine.persistent();
    let mut param = |values: &[f32]| {
        let shape = Shape::new(&[values.len()]);
        Param {
            index: 0,
            buf: p.upload("weight", shape, values).expect("upload"),
            grad: p.zeros("grad", shape).expect("zeros"),
            shape,
        }
    };
    let (w, b) = (param(&[1.5, 0.5]), param(&[0.0, 1.0]));
    let shape = Shape::new(&[2, 2, 3, 3]);
    let x = values(shape.numel(), 44, -1.0, 1.0);
    let gy = values(shape.numel(), 45, -1.0, 1.0);
    engine
        .step(|s| {
            let input = s.input("x", shape, &x)?;
            let (wt, bt) = (s.param(&w), s.param(&b));
            let y = input.batch_norm2d(s, wt, bt, stats, BatchNormArgs::train())?;
            let upstream = s.input("gy", shape, &gy)?;
            let grads = s.backward_from(y, upstream)?;
            assert!(s.grad(&grads, input).is_none(), "the input needs no gradient");
            Ok(())
        })
        .expect("step");
    let (gw, gb) = (read_grad(&mut engine, w), read_grad(&mut engine, b));
    // db = Σ dy per channel; dw = Σ dy·x̂.
    let batch = moments(&x, 2, 9);
    for ch in 0..2 {
        let (mut sum, mut sum_xhat) = (0.0f64, 0.0f64);
        for i in 0..2 {
            for k in 0..9 {
                let at = (i * 2 + ch) * 9 + k;
                let (mean, var) = batch[ch];
                sum += gy[at] as f64;
                sum_xhat += gy[at] as f64 * (x[at] as f64 - mean) / (var + 1e-5).sqrt();
            }
        }
        assert!((gb[ch] as f64 - sum).abs() < 1e-5, "db[{ch}]: {} vs {sum}", gb[ch]);
        assert!(
            (gw[ch] as f64 - sum_xhat).abs() < 1e-4,
            "dw[{ch}]: {} vs {sum_xhat}",
            gw[ch]
        );
    }
}

fn read_grad(engine: &mut Engine, p: Param) -> Vec<f32> {
    let mut out = vec![0.0; p.shape().numel()];
    engine.read_persistent(p.grad(), &mut out).expect("read");
    out
}

/// One call's input shape, weight and bias lengths, statistics and settings.
#[derive(Clone, Copy)]
struct Case {
    x: Shape,
    weight: usize,
    bias: usize,
    stats: RunningStats,
    args: BatchNormArgs,
}

#[test]
fn wrong_shapes_and_settings_are_refused_with_typed_errors() {
    let mut engine = engine();
    let stats = running_stats(&mut engine, &[0.0; 3], &[1.0; 3]);
    let narrow = running_stats(&mut engine, &[0.0; 2], &[1.0; 2]);
    let mut scalar_as_vector = running_stats(&mut engine, &[0.0; 3], &[1.0; 3]);
    scalar_as_vector.batches.shape = Shape::new(&[1]);
    let train = BatchNormArgs::train();
    let usual = Case {
        x: Shape::new(&[2, 3, 2, 2]),
        weight: 3,
        bias: 3,
        stats,
        args: train,
    };
    let cases = [
        (
            "rank 3",
            Case {
                x: Shape::new(&[2, 3, 4]),
                ..usual
            },
            "[N, C, H, W]",
        ),
        ("weight", Case { weight: 2, ..usual }, "weight [3]"),
        ("bias", Case { bias: 4, ..usual }, "bias [3]"),
        ("running mean", Case { stats: narrow, ..usual }, "running mean [3]"),
        (
            "num_batches_tracked",
            Case {
                stats: scalar_as_vector,
                ..usual
            },
            "shape []",
        ),
        (
            "one value",
            Case {
                x: Shape::new(&[1, 3, 1, 1]),
                ..usual
            },
            "more than one value",
        ),
        (
            "eps",
            Case {
                args: BatchNormArgs { eps: 0.0, ..train },
                ..usual
            },
            "eps",
        ),
        (
            "momentum",
            Case {
                args: BatchNormArgs {
                    momentum: f32::NAN,
                    ..train
                },
                ..usual
            },
            "momentum",
        ),
    ];
    for (
        case,
        Case {
            x: shape,
            weight: wc,
            bias: bc,
            stats,
            args,
        },
        says,
    ) in cases
    {
        let err = engine
            .step(|s| {
                let x = s.variable("x", shape, &vec![0.5; shape.numel()])?;
                let w = s.variable("w", Shape::new(&[wc]), &vec![1.0; wc])?;
                let b = s.variable("b", Shape::new(&[bc]), &vec![0.0; bc])?;
                x.batch_norm2d(s, w, b, stats, args).map(drop)
            })
            .expect_err(case);
        assert!(
            matches!(err, Error::Shape { op: "batch_norm2d", .. } | Error::Config(_)),
            "{case}: {err:?}"
        );
        assert!(err.to_string().contains(says), "{case}: {err}");
    }
    // A single value per channel is fine in evaluation.
    let one = Shape::new(&[1, 3, 1, 1]);
    let y = forward(
        &mut engine,
        stats,
        &[1.0, 2.0, 3.0],
        one,
        &[1.0; 3],
        &[0.0; 3],
        BatchNormArgs::eval(),
    );
    assert_near("one value in evaluation", &y, &[1.0, 2.0, 3.0], 1e-4);
}

#[test]
fn fused_relu_gradients_match_finite_differences() {
    for args in [BatchNormArgs::train(), BatchNormArgs::eval()] {
        let mut engine = engine();
        let stats = running_stats(&mut engine, &[0.3, -0.2, 0.1], &[0.5, 1.3, 2.0]);
        let shapes = [Shape::new(&X), Shape::new(&[3]), Shape::new(&[3])];
        let inputs = [
            values(72, 51, -2.0, 2.0),
            values(3, 52, 0.5, 1.5),
            values(3, 53, -0.5, 0.5),
        ];
        check_on(&mut engine, &shapes, &inputs, &[0, 1, 2], &move |s, t| {
            t[0].batch_norm2d_relu(s, t[1], t[2], stats, args)
        });
    }
}

#[test]
fn fused_add_relu_gradients_match_finite_differences() {
    for args in [BatchNormArgs::train(), BatchNormArgs::eval()] {
        let mut engine = engine();
        let stats = running_stats(&mut engine, &[0.3, -0.2, 0.1], &[0.5, 1.3, 2.0]);
        let shapes = [Shape::new(&X), Shape::new(&[3]), Shape::new(&[3]), Shape::new(&X)];
        let inputs = [
            values(72, 54, -2.0, 2.0),
            values(3, 55, 0.5, 1.5),
            values(3, 56, -0.5, 0.5),
            values(72, 57, -1.0, 1.0),
        ];
        check_on(&mut engine, &shapes, &inputs, &[0, 1, 2, 3], &move |s, t| {
            t[0].batch_norm2d_add_relu(s, t[1], t[2], stats, args, t[3])
        });
    }
}

/// Which form of `relu(bn(x) [+ r])` a step computes.
#[derive(Clone, Copy, PartialEq)]
enum Form {
    Separate,
    Fused,
}

/// The output and the gradients of x, w, b and r of `relu(bn(x) + r)`
/// (without `r` when `residual` is false) under upstream gradient `gy`.
fn fused_or_not(form: Form, residual: bool, args: BatchNormArgs) -> Vec<Vec<f32>> {
    let mut engine = engine();
    let stats = running_stats(&mut engine, &[0.3, -0.2, 0.1], &[0.5, 1.3, 2.0]);
    let shape = Shape::new(&[3, 3, 5, 4]);
    let (x, r, gy) = (
        values(shape.numel(), 61, -2.0, 2.0),
        values(shape.numel(), 62, -1.0, 1.0),
        values(shape.numel(), 63, -1.0, 1.0),
    );
    engine
        .step(|s| {
            let xt = s.variable("x", shape, &x)?;
            let w = s.variable("w", Shape::new(&[3]), &[1.5, 0.7, -0.4])?;
            let b = s.variable("b", Shape::new(&[3]), &[0.1, -0.3, 0.2])?;
            let rt = s.variable("r", shape, &r)?;
            let y = match (form, residual) {
                (Form::Separate, false) => xt.batch_norm2d(s, w, b, stats, args)?.relu(s)?,
                (Form::Separate, true) => xt.batch_norm2d(s, w, b, stats, args)?.add(s, rt)?.relu(s)?,
                (Form::Fused, false) => xt.batch_norm2d_relu(s, w, b, stats, args)?,
                (Form::Fused, true) => xt.batch_norm2d_add_relu(s, w, b, stats, args, rt)?,
            };
            let upstream = s.input("gy", shape, &gy)?;
            let grads = s.backward_from(y, upstream)?;
            let mut out = Vec::new();
            for t in [y, xt, w, b, rt] {
                let t = if t.inner.id == y.inner.id {
                    Some(t)
                } else {
                    s.grad(&grads, t)
                };
                let Some(t) = t else { continue };
                let mut v = vec![0.0; t.shape().numel()];
                s.read(t, &mut v)?;
                out.push(v);
            }
            Ok(out)
        })
        .expect("step")
}

#[test]
fn the_fused_forms_give_the_separate_ops_results_bit_for_bit() {
    for args in [BatchNormArgs::train(), BatchNormArgs::eval()] {
        for residual in [false, true] {
            let separate = fused_or_not(Form::Separate, residual, args);
            let fused = fused_or_not(Form::Fused, residual, args);
            assert_eq!(separate.len(), if residual { 5 } else { 4 });
            let bits = |v: &Vec<Vec<f32>>| v.iter().map(|t| t.iter().map(|f| f.to_bits()).collect()).collect();
            let (a, b): (Vec<Vec<u32>>, Vec<Vec<u32>>) = (bits(&separate), bits(&fused));
            assert!(a == b, "training {}, residual {residual}", args.training);
            // Some values are cut by the relu and some pass: the mask is tested.
            assert!(fused[0].contains(&0.0) && fused[0].iter().any(|&v| v > 0.0));
        }
    }
}

#[test]
fn a_residual_of_another_shape_is_refused() {
    let mut engine = engine();
    let stats = running_stats(&mut engine, &[0.0; 3], &[1.0; 3]);
    let err = engine
        .step(|s| {
            let x = s.input("x", Shape::new(&X), &[0.5; 72])?;
            let w = s.input("w", Shape::new(&[3]), &[1.0; 3])?;
            let b = s.input("b", Shape::new(&[3]), &[0.0; 3])?;
            let r = s.input("r", Shape::new(&[2, 3, 4, 3]), &[0.5; 72])?;
            x.batch_norm2d_add_relu(s, w, b, stats, BatchNormArgs::train(), r)
                .map(drop)
        })
        .expect_err("a residual [2, 3, 4, 3] for an input [2, 3, 3, 4]");
    assert!(
        matches!(
            err,
            Error::Shape {
                op: "batch_norm2d_add_relu",
                ..
            }
        ),
        "{err}"
    );
}

/// Backward writes an input's or a residual's gradient over the output's
/// when nothing reads that after, but never over the gradient backward
/// started from: the caller's tensor keeps its values.
#[test]
fn backward_leaves_the_callers_gradient_as_it_was() {
    let mut engine = engine();
    let stats = running_stats(&mut engine, &[0.0; 2], &[1.0; 2]);
    let shape = Shape::new(&[2, 2, 3, 3]);
    let x = values(shape.numel(), 46, -1.0, 1.0);
    let r = values(shape.numel(), 47, -1.0, 1.0);
    let gy = values(shape.numel(), 48, -1.0, 1.0);
    engine
        .step(|s| {
            let input = s.variable("x", shape, &x)?;
            let residual = s.variable("r", shape, &r)?;
            let w = s.variable("w", Shape::new(&[2]), &[1.5, -0.5])?;
            let b = s.variable("b", Shape::new(&[2]), &[0.1, 0.2])?;
            let y = input.batch_norm2d_add_relu(s, w, b, stats, BatchNormArgs::train(), residual)?;
            let upstream = s.input("gy", shape, &gy)?;
            let grads = s.backward_from(y, upstream)?;
            let mut after = vec![0.0; gy.len()];
            s.read(upstream, &mut after)?;
            assert_eq!(after, gy, "the caller's gradient was written over");
            assert!(s.grad(&grads, input).is_some() && s.grad(&grads, residual).is_some());
            Ok(())
        })
        .expect("step");
}

/// Writing a gradient over the output's (when a later op made it, so
/// nothing reads it after) gives the bits computing it apart does (when
/// it is the caller's): both fused forms, the input's and the residual's.
#[test]
fn gradients_written_in_place_are_the_same_bits() {
    let shape = Shape::new(&[2, 2, 3, 3]);
    let x = values(shape.numel(), 50, -1.0, 1.0);
    let r = values(shape.numel(), 51, -1.0, 1.0);
    let gy = values(shape.numel(), 52, -1.0, 1.0);
    // (in place: through an add of zeros, whose backward makes new buffers)
    let grads = |residual: bool, in_place: bool| {
        let mut engine = engine();
        let stats = running_stats(&mut engine, &[0.0; 2], &[1.0; 2]);
        let mut out = (vec![0.0; gy.len()], vec![0.0; gy.len()]);
        engine
            .step(|s| {
                let input = s.variable("x", shape, &x)?;
                let res = s.variable("r", shape, &r)?;
                let w = s.variable("w", Shape::new(&[2]), &[1.5, -0.5])?;
                let b = s.variable("b", Shape::new(&[2]), &[0.1, 0.2])?;
                let args = BatchNormArgs::train();
                let y = match residual {
                    true => input.batch_norm2d_add_relu(s, w, b, stats, args, res)?,
                    false => input.batch_norm2d_relu(s, w, b, stats, args)?,
                };
                let upstream = s.input("gy", shape, &gy)?;
                let grads = match in_place {
                    true => {
                        let zeros = s.input("zeros", shape, &vec![0.0; gy.len()])?;
                        let z = y.add(s, zeros)?;
                        s.backward_from(z, upstream)?
                    }
                    false => s.backward_from(y, upstream)?,
                };
                let gx = s.grad(&grads, input).expect("input grad");
                s.read(gx, &mut out.0)?;
                if residual {
                    let gr = s.grad(&grads, res).expect("residual grad");
                    s.read(gr, &mut out.1)?;
                }
                Ok(())
            })
            .expect("step");
        out
    };
    for residual in [false, true] {
        let (a, b) = (grads(residual, true), grads(residual, false));
        let bits = |v: &[f32]| v.iter().map(|f| f.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&a.0), bits(&b.0), "input grad, residual {residual}");
        assert_eq!(bits(&a.1), bits(&b.1), "residual grad, residual {residual}");
    }
}

/// A parameter used as the residual gets its gradient in its slot even
/// where backward writes the residual's gradient over the output's.
#[test]
fn a_parameter_residual_gets_its_gradient_in_its_slot() {
    let mut engine = engine();
    let stats = running_stats(&mut engine, &[0.0; 2], &[1.0; 2]);
    let shape = Shape::new(&[2, 2, 3, 3]);
    let x = values(shape.numel(), 53, -1.0, 1.0);
    let r = values(shape.numel(), 54, -1.0, 1.0);
    let gy = values(shape.numel(), 55, -1.0, 1.0);
    let mut p = engine.persistent();
    let param = Param {
        index: 0,
        buf: p.upload("residual", shape, &r).expect("upload"),
        grad: p.zeros("residual grad", shape).expect("zeros"),
        shape,
    };
    let mut expected = vec![0.0; gy.len()];
    engine
        .step(|s| {
            let input = s.variable("x", shape, &x)?;
            let res = s.param(&param);
            let w = s.variable("w", Shape::new(&[2]), &[1.5, -0.5])?;
            let b = s.variable("b", Shape::new(&[2]), &[0.1, 0.2])?;
            let y = input.batch_norm2d_add_relu(s, w, b, stats, BatchNormArgs::train(), res)?;
            // The output's gradient made by a later op: backward owns it.
            let zeros = s.input("zeros", shape, &vec![0.0; gy.len()])?;
            let z = y.add(s, zeros)?;
            let upstream = s.input("gy", shape, &gy)?;
            let grads = s.backward_from(z, upstream)?;
            // relu'(y)·gy, read from the step's own view of the gradient.
            let mut yv = vec![0.0; gy.len()];
            s.read(y, &mut yv)?;
            for (e, (&y, &g)) in expected.iter_mut().zip(yv.iter().zip(&gy)) {
                *e = if y > 0.0 { g } else { 0.0 };
            }
            assert!(s.param_grad(&grads, &param).is_some());
            Ok(())
        })
        .expect("step");
    let slot = read_grad(&mut engine, param);
    assert_eq!(slot, expected, "the residual's gradient is in its slot");
}

#[test]
fn channels_last_on_the_cpu_runs_on_nchw_copies_with_the_same_results_and_gradients() {
    use crate::tensor::Layout;
    for args in [BatchNormArgs::train(), BatchNormArgs::eval()] {
        let mut engine = engine();
        let stats = running_stats(&mut engine, &[0.3, -0.2, 0.1], &[0.5, 1.3, 2.0]);
        let shapes = [Shape::new(&X), Shape::new(&[3]), Shape::new(&[3]), Shape::new(&X)];
        let inputs = [
            values(72, 54, -2.0, 2.0),
            values(3, 55, 0.5, 1.5),
            values(3, 56, -0.5, 0.5),
            values(72, 57, -1.0, 1.0),
        ];
        // (The inputs of `fused_add_relu_gradients_match_finite_differences`,
        // no pre-activation within a finite difference of the relu's kink.)
        // The output channels last, read back in NCHW order: the NCHW
        // result's bits (the same arithmetic on the same values).
        let run = |engine: &mut Engine, nhwc: bool| {
            engine
                .step(|s| {
                    let t = shapes
                        .iter()
                        .zip(&inputs)
                        .map(|(sh, v)| s.input("x", *sh, v))
                        .collect::<crate::Result<Vec<_>>>()?;
                    let layout = if nhwc { Layout::Nhwc } else { Layout::Nchw };
                    let x = t[0].to_layout(s, layout)?;
                    let y = x.batch_norm2d_add_relu(s, t[1], t[2], stats, args, t[3])?;
                    assert_eq!(y.layout(), layout, "the output is in the input's layout");
                    let mut out = vec![0.0; y.shape().numel()];
                    s.read(y, &mut out)?;
                    Ok(out)
                })
                .expect("step")
        };
        let (nchw, nhwc) = (run(&mut engine, false), run(&mut engine, true));
        assert_eq!(
            nchw.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            nhwc.iter().map(|v| v.to_bits()).collect::<Vec<_>>(),
            "channels last gives the NCHW bits"
        );
        // Gradients through the copies (input and residual channels last,
        // the residual cast to the input's layout by the op when it is not).
        for residual_nhwc in [true, false] {
            check_on(&mut engine, &shapes, &inputs, &[0, 1, 2, 3], &move |s, t| {
                let x = t[0].to_layout(s, Layout::Nhwc)?;
                let r = match residual_nhwc {
                    true => t[3].to_layout(s, Layout::Nhwc)?,
                    false => t[3],
                };
                let y = x.batch_norm2d_add_relu(s, t[1], t[2], stats, args, r)?;
                y.to_layout(s, Layout::Nchw)
            });
        }
    }
}
