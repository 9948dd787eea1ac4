use super::CrossEntropyArgs;
use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;
use crate::{Device, Engine, Error};

const LABELS: [u32; 4] = [3, 0, 4, 3];

fn smoothing(label_smoothing: f32) -> CrossEntropyArgs {
    CrossEntropyArgs {
        label_smoothing,
        ..CrossEntropyArgs::default()
    }
}

#[test]
fn the_default_is_no_smoothing() {
    assert_eq!(CrossEntropyArgs::default(), smoothing(0.0));
}

#[test]
fn gradient_matches_finite_differences_without_smoothing() {
    let shape = Shape::new(&[4, 5]);
    check(&[shape], &[values(20, 41, -3.0, 3.0)], &[0], &|s, x| {
        let labels = s.labels(&LABELS)?;
        x[0].cross_entropy(s, labels, CrossEntropyArgs::default())
    });
}

#[test]
fn gradient_matches_finite_differences_with_smoothing() {
    let shape = Shape::new(&[4, 5]);
    check(&[shape], &[values(20, 42, -3.0, 3.0)], &[0], &|s, x| {
        let labels = s.labels(&LABELS)?;
        x[0].cross_entropy(s, labels, smoothing(0.1))
    });
}

#[test]
fn gradient_of_a_share_of_a_larger_mean_matches_finite_differences() {
    let shape = Shape::new(&[4, 5]);
    check(&[shape], &[values(20, 43, -3.0, 3.0)], &[0], &|s, x| {
        let labels = s.labels(&LABELS)?;
        x[0].cross_entropy_over(s, labels, 6, smoothing(0.2))
    });
}

/// `F.cross_entropy(x, labels, label_smoothing=e)` and its gradient with
/// respect to `x` (for an upstream gradient of 1), in f64, written from the
/// definition: `logp = x − log Σ exp x` (shifted by the row's max, without
/// which no float holds `exp(1000)`), the loss the mean over rows of
/// `(1 − e)·(−logp[label]) + e·mean(−logp)`, the gradient
/// `(softmax − (1 − e)·onehot − e/C) / N`.
fn reference(x: &[f32], c: usize, labels: &[u32], e: f64) -> (f64, Vec<f64>) {
    let n = labels.len();
    let mut loss = 0.0;
    let mut grad = Vec::with_capacity(x.len());
    for (row, &label) in x.chunks_exact(c).zip(labels) {
        let max = row.iter().fold(f64::NEG_INFINITY, |m, &v| m.max(v as f64));
        let lse = max + row.iter().map(|&v| (v as f64 - max).exp()).sum::<f64>().ln();
        let logp: Vec<f64> = row.iter().map(|&v| v as f64 - lse).collect();
        let uniform = -logp.iter().sum::<f64>() / c as f64;
        loss += (1.0 - e) * -logp[label as usize] + e * uniform;
        for (k, lp) in logp.iter().enumerate() {
            let target = e / c as f64 + if k == label as usize { 1.0 - e } else { 0.0 };
            grad.push((lp.exp() - target) / n as f64);
        }
    }
    (loss / n as f64, grad)
}

/// The loss and the gradient of the logits `x` `[N, C]`.
fn loss_and_grad(x: &[f32], c: usize, labels: &[u32], args: CrossEntropyArgs) -> (f32, Vec<f32>) {
    let mut engine = Engine::new(Device::cpu(2).unwrap(), 64 << 20).unwrap();
    engine
        .step(|s| {
            let logits = s.variable("x", Shape::new(&[labels.len(), c]), x)?;
            let labels = s.labels(labels)?;
            let loss = logits.cross_entropy(s, labels, args)?;
            let grads = s.backward(loss)?;
            let mut gx = vec![0.0; x.len()];
            let g = s.grad(&grads, logits).expect("a gradient");
            s.read(g, &mut gx)?;
            Ok((s.scalar(loss)?, gx))
        })
        .unwrap()
}

fn assert_matches_reference(x: &[f32], c: usize, labels: &[u32], e: f32) {
    let (loss, gx) = loss_and_grad(x, c, labels, smoothing(e));
    let (want, want_grad) = reference(x, c, labels, e as f64);
    assert!(
        (loss as f64 - want).abs() <= 1e-5 * want.abs().max(1.0),
        "C = {c}, smoothing {e}: loss {loss} vs {want}"
    );
    // The gradient is of order 1/N: held to that scale, not to its smallest
    // entries (exp of a logit 2000 below the row's max is 0 in f32). Near
    // ±1000, `x − lse` in f32 is off by up to 6e-5 (half an ulp of 1000,
    // twice), which the exponential makes a relative error of that size.
    let scale = 1.0 / labels.len() as f64;
    for (i, (&g, &w)) in gx.iter().zip(&want_grad).enumerate() {
        assert!(
            (g as f64 - w).abs() <= 1e-4 * scale,
            "C = {c}, smoothing {e}: gradient [{i}] {g} vs {w}"
        );
    }
}

#[test]
fn loss_and_gradient_match_the_definition_for_ten_classes() {
    let labels: Vec<u32> = (0..9).map(|i| (i * 7 % 10) as u32).collect();
    let x = values(90, 5, -4.0, 4.0);
    for e in [0.0, 0.1] {
        assert_matches_reference(&x, 10, &labels, e);
    }
}

/// The CPU kernel takes a row in vectors of 8: shorter rows in one partial
/// vector, others in whole ones with the last shifted to end with the row
/// (its repeated lanes left out of the sum). Every kind of length, with the
/// row's largest value in the first, a middle and the last place.
#[test]
fn loss_and_gradient_match_the_definition_for_every_kind_of_row_length() {
    for c in [1, 2, 5, 7, 8, 9, 15, 16, 17, 65] {
        let n = 6;
        let labels: Vec<u32> = (0..n).map(|i| (i * 5 % c) as u32).collect();
        let mut x = values(n * c, c as u64, -3.0, 3.0);
        for (row, at) in [(0, 0), (1, c / 2), (2, c - 1)] {
            x[row * c + at] = 9.0;
        }
        for e in [0.0, 0.1] {
            assert_matches_reference(&x, c, &labels, e);
        }
    }
}

#[test]
fn loss_and_gradient_match_the_definition_for_a_thousand_classes_and_large_logits() {
    // Spread over ±1000: exp of any of them overflows unless shifted; enough
    // rows that the CPU splits them between tasks.
    let (n, c) = (40, 1000);
    let labels: Vec<u32> = (0..n).map(|i| (i * 389 % c) as u32).collect();
    let mut x = values(n * c, 6, -1000.0, 1000.0);
    // Rows where the label is the winner by far, and where it is near the
    // top, not only where its probability underflows to 0.
    x[3 * c + labels[3] as usize] = 1500.0;
    x[5 * c + labels[5] as usize] = 999.5;
    for e in [0.0, 0.1] {
        assert_matches_reference(&x, c, &labels, e);
    }
}

#[test]
fn loss_matches_the_definition_at_extreme_logits() {
    let logits = [1000.0, 0.0, -1000.0, 0.5, 0.5, 0.5];
    let labels = [0, 2];
    // Row 1: log-softmax is [0, −1000, −2000], so the NLL is 0 and the mean
    // of −logp is 1000; row 2: every −logp is ln 3.
    let ln3 = 3f32.ln();
    for (e, want) in [
        (0.0, ln3 / 2.0),
        (0.1, (0.1 * 1000.0 + ln3) / 2.0),
        (1.0, (1000.0 + ln3) / 2.0),
    ] {
        let (loss, gx) = loss_and_grad(&logits, 3, &labels, smoothing(e));
        assert!((loss - want).abs() <= 1e-5 * want, "smoothing {e}: {loss} vs {want}");
        assert!(gx.iter().all(|g| g.is_finite()), "smoothing {e}: {gx:?}");
    }
}

#[test]
fn a_share_of_a_larger_mean_is_the_sum_over_that_many() {
    let x = values(12, 8, -2.0, 2.0);
    let labels = [1, 2, 0];
    let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let loss = |engine: &mut Engine, over| {
        engine
            .step(|s| {
                let logits = s.input("x", Shape::new(&[3, 4]), &x)?;
                let labels = s.labels(&labels)?;
                let loss = logits.cross_entropy_over(s, labels, over, smoothing(0.1))?;
                s.scalar(loss)
            })
            .unwrap()
    };
    let (whole, share) = (loss(&mut engine, 3), loss(&mut engine, 12));
    assert!((share * 4.0 - whole).abs() <= 1e-6 * whole, "{share} × 4 vs {whole}");
}

fn error_of(shape: &[usize], labels: &[u32], over: Option<usize>, e: f32) -> Error {
    let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let n: usize = shape.iter().product();
    engine
        .step(|s| {
            let x = s.input("x", Shape::new(shape), &vec![0.0; n])?;
            let labels = s.labels(labels)?;
            let over = over.unwrap_or(labels.len());
            x.cross_entropy_over(s, labels, over, smoothing(e)).map(|_| ())
        })
        .unwrap_err()
}

#[test]
fn a_label_out_of_range_is_an_error_not_a_panic() {
    let err = error_of(&[2, 3], &[0, 3], None, 0.0);
    assert!(err.to_string().contains("label 3 of example 1"), "{err}");
    let err = error_of(&[1, 3], &[7], None, 0.1);
    assert!(err.to_string().contains("label 7"), "{err}");
}

#[test]
fn bad_shapes_and_settings_are_errors() {
    let shape = |err: Error, needle: &str| {
        assert!(
            matches!(&err, Error::Shape { op: "cross_entropy", detail } if detail.contains(needle)),
            "{err}"
        );
    };
    shape(error_of(&[6], &[0; 6], None, 0.0), "logits [N, C]");
    shape(error_of(&[2, 3], &[0; 3], None, 0.0), "3 labels");
    shape(error_of(&[2, 0], &[0; 2], None, 0.0), "C ≥ 1");
    shape(error_of(&[2, 3], &[0; 2], Some(1), 0.0), "at least the batch's 2");
    for e in [-0.1, 1.5, f32::NAN] {
        shape(error_of(&[2, 3], &[0; 2], None, e), "label smoothing in [0, 1]");
    }
}

/// Weights `[0.5, 2, 0, 1.5]` over the four rows, in persistent memory.
fn weighted(engine: &mut Engine) -> CrossEntropyArgs {
    let w = engine
        .persistent()
        .upload("row weights", Shape::new(&[4]), &[0.5f32, 2.0, 0.0, 1.5])
        .unwrap();
    CrossEntropyArgs {
        weights: Some(w),
        ..smoothing(0.1)
    }
}

#[test]
fn gradient_with_row_weights_matches_finite_differences() {
    let mut engine = crate::ops::gradcheck::engine();
    let args = weighted(&mut engine);
    let shape = Shape::new(&[4, 5]);
    crate::ops::gradcheck::check_on(
        &mut engine,
        &[shape],
        &[values(20, 44, -3.0, 3.0)],
        &[0],
        &move |s, x| {
            let labels = s.labels(&LABELS)?;
            x[0].cross_entropy(s, labels, args)
        },
    );
}

#[test]
fn row_weights_scale_each_rows_loss_and_gradient() {
    let x = values(20, 45, -3.0, 3.0);
    let mut engine = Engine::new(Device::cpu(2).unwrap(), 64 << 20).unwrap();
    let args = weighted(&mut engine);
    let (loss, grad) = engine
        .step(|s| {
            let logits = s.variable("x", Shape::new(&[4, 5]), &x)?;
            let labels = s.labels(&LABELS)?;
            let loss = logits.cross_entropy(s, labels, args)?;
            let grads = s.backward(loss)?;
            let mut gx = vec![0.0; 20];
            let g = s.grad(&grads, logits).expect("a gradient");
            s.read(g, &mut gx)?;
            Ok((s.scalar(loss)?, gx))
        })
        .unwrap();
    let weights = [0.5, 2.0, 0.0, 1.5];
    let mut want = 0.0;
    for (r, w) in weights.iter().enumerate() {
        // Row r alone is a mean over one row: its loss and gradient, times
        // its weight over the batch's four rows.
        let (l, g) = reference(&x[r * 5..][..5], 5, &LABELS[r..r + 1], 0.1);
        want += w * l / 4.0;
        for (k, g) in g.iter().enumerate() {
            let ours = grad[r * 5 + k] as f64;
            assert!(
                (ours - w * g / 4.0).abs() < 1e-6,
                "row {r} class {k}: {ours} against {}",
                w * g / 4.0
            );
        }
    }
    assert!((loss as f64 - want).abs() < 1e-6, "{loss} against {want}");
    let err = engine
        .step(|s| {
            let logits = s.variable("x", Shape::new(&[2, 5]), &x[..10])?;
            let labels = s.labels(&LABELS[..2])?;
            logits.cross_entropy(s, labels, args).map(drop)
        })
        .unwrap_err();
    assert!(
        matches!(err, Error::Shape { .. }) && err.to_string().contains("2 rows, got 4"),
        "{err}"
    );
}
