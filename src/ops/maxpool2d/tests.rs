use crate::ops::gradcheck::{check, distinct};
use crate::tensor::Shape;

#[test]
fn max_pool_gradient_matches_finite_differences() {
    // Odd height: the last row is dropped and must get a zero gradient.
    let shape = Shape::new(&[2, 3, 5, 6]);
    check(&[shape], &[distinct(shape.numel(), 11, 0.05)], &[0], &|s, x| {
        x[0].max_pool2d(s)
    });
}

#[test]
fn max_pool_picks_the_window_maximum() {
    let mut arena = crate::Arena::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    #[rustfmt::skip]
    let x = [
        1.0, 2.0,  5.0, -1.0,
        3.0, 0.0,  4.0,  4.5,
    ];
    let y = arena
        .step(|s| {
            let x = s.input("x", Shape::new(&[1, 1, 2, 4]), &x)?;
            let y = x.max_pool2d(s)?;
            assert_eq!(y.shape(), Shape::new(&[1, 1, 1, 2]));
            let mut out = [0.0; 2];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .unwrap();
    assert_eq!(y, [3.0, 5.0]);
}

#[test]
fn max_pool_relu_gradient_matches_finite_differences() {
    // Values on both sides of 0, so the fused relu both passes and blocks.
    let shape = Shape::new(&[2, 3, 5, 6]);
    check(&[shape], &[distinct(shape.numel(), 13, 0.05)], &[0], &|s, x| {
        x[0].max_pool2d_relu(s)
    });
}

#[test]
fn max_pool_relu_is_relu_of_max_pool() {
    let mut arena = crate::Arena::new(crate::Device::cpu(1).unwrap(), 1 << 20).unwrap();
    let shape = Shape::new(&[2, 3, 7, 6]);
    let x = distinct(shape.numel(), 17, 0.05);
    let (fused, pair) = arena
        .step(|s| {
            let t = s.input("x", shape, &x)?;
            let (a, b) = (t.max_pool2d_relu(s)?, t.max_pool2d(s)?.relu(s)?);
            let (mut fa, mut fb) = (vec![0.0; a.shape().numel()], vec![0.0; b.shape().numel()]);
            s.read(a, &mut fa)?;
            s.read(b, &mut fb)?;
            Ok((fa, fb))
        })
        .unwrap();
    assert_eq!(fused, pair);
    assert!(fused.contains(&0.0) && fused.iter().any(|v| *v > 0.0));
}
