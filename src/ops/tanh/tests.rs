use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;

#[test]
fn tanh_gradient_matches_finite_differences() {
    // Over the steep middle and into the flat tails.
    let shape = Shape::new(&[4, 3, 5]);
    check(&[shape], &[values(60, 5, -3.0, 3.0)], &[0], &|s, xs| xs[0].tanh(s));
}

#[test]
fn tanh_after_sigmoid_gets_the_chained_gradient() {
    // An LSTM's cell output is tanh of what its sigmoid gates let through.
    let shape = Shape::new(&[3, 4]);
    check(&[shape], &[values(12, 6, -2.0, 2.0)], &[0], &|s, xs| {
        let gate = xs[0].sigmoid(s)?;
        gate.tanh(s)
    });
}

#[test]
fn tanh_is_odd_and_saturates_at_one() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let out = engine
        .step(|s| {
            let x = s.input("x", Shape::new(&[5]), &[0.0, -50.0, 50.0, 0.5, -0.5])?;
            let y = x.tanh(s)?;
            let mut out = [9.0; 5];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .unwrap();
    assert_eq!(out[..3], [0.0, -1.0, 1.0]);
    // The CPU's rational tanh (`ops::math`) is within 3e-7 of libm's.
    assert!((out[3] - 0.5f32.tanh()).abs() <= 3e-7, "{}", out[3]);
    assert_eq!(out[4], -out[3], "tanh(−x) = −tanh(x)");
}
