use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;

#[test]
fn relu_gradient_matches_finite_differences() {
    let shape = Shape::new(&[4, 3, 5]);
    // Keep every input 0.1 or more away from the kink at 0.
    let x: Vec<f32> = values(60, 1, -1.0, 1.0)
        .into_iter()
        .map(|v| if v.abs() < 0.1 { v.signum() * 0.1 + v } else { v })
        .collect();
    check(&[shape], &[x], &[0], &|s, xs| xs[0].relu(s));
}

#[test]
fn relu_clamps_negatives() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let out = engine
        .step(|s| {
            let x = s.input("x", Shape::new(&[4]), &[-2.0, -0.0, 0.5, 3.0])?;
            let y = x.relu(s)?;
            let mut out = [9.0; 4];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .unwrap();
    assert_eq!(out, [0.0, 0.0, 0.5, 3.0]);
}
