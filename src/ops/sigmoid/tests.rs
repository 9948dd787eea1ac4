use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;

#[test]
fn sigmoid_gradient_matches_finite_differences() {
    // Over the steep middle and into the flat tails.
    let shape = Shape::new(&[4, 3, 5]);
    check(&[shape], &[values(60, 3, -4.0, 4.0)], &[0], &|s, xs| xs[0].sigmoid(s));
}

#[test]
fn sigmoid_of_a_tensor_used_twice_gets_both_gradients() {
    // y = sigmoid(x) + x: the gradient reaching x is the sum of both paths.
    let shape = Shape::new(&[2, 7]);
    check(&[shape], &[values(14, 4, -2.0, 2.0)], &[0], &|s, xs| {
        let y = xs[0].sigmoid(s)?;
        y.add(s, xs[0])
    });
}

#[test]
fn sigmoid_is_one_half_at_zero_and_saturates_without_overflow() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let out = engine
        .step(|s| {
            let x = s.input("x", Shape::new(&[5]), &[0.0, -200.0, 200.0, 2.0, -2.0])?;
            let y = x.sigmoid(s)?;
            let mut out = [9.0; 5];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .unwrap();
    assert_eq!(out[..3], [0.5, 0.0, 1.0]);
    let e2 = 2.0f32.exp();
    assert!((out[3] - e2 / (1.0 + e2)).abs() < 1e-6, "{out:?}");
    assert!(
        (out[3] + out[4] - 1.0).abs() < 1e-6,
        "sigmoid(−x) = 1 − sigmoid(x): {out:?}"
    );
}
