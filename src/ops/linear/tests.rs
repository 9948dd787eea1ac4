use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;

#[test]
fn linear_gradients_match_finite_differences() {
    let (x, w, b) = (Shape::new(&[5, 7]), Shape::new(&[3, 7]), Shape::new(&[3]));
    let inputs = [
        values(35, 21, -1.0, 1.0),
        values(21, 22, -1.0, 1.0),
        values(3, 23, -1.0, 1.0),
    ];
    check(&[x, w, b], &inputs, &[0, 1, 2], &|s, t| {
        t[0].linear(s, t[1], Some(t[2]))
    });
}

#[test]
fn linear_without_bias_is_a_product() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let y = engine
        .step(|s| {
            let x = s.input("x", Shape::new(&[1, 2]), &[1.0, 2.0])?;
            let w = s.input("w", Shape::new(&[3, 2]), &[1.0, 0.0, 0.0, 1.0, 1.0, 1.0])?;
            let y = x.linear(s, w, None)?;
            let mut out = [0.0; 3];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .unwrap();
    assert_eq!(y, [1.0, 2.0, 3.0]);
}
