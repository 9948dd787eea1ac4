use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;

#[test]
fn reshape_gradient_flows_through_unchanged() {
    let shape = Shape::new(&[2, 3, 2, 2]);
    // Reshape then a relu-free linear map, so the gradient has to find its
    // way back through the alias into the original shape.
    let w = Shape::new(&[4, 12]);
    check(
        &[shape, w],
        &[values(24, 51, -1.0, 1.0), values(48, 52, -1.0, 1.0)],
        &[0, 1],
        &|s, t| {
            let flat = t[0].flatten(s)?;
            assert_eq!(flat.shape(), Shape::new(&[2, 12]));
            flat.linear(s, t[1], None)
        },
    );
}

#[test]
fn reshape_refuses_a_different_element_count() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let err = engine
        .step(|s| {
            let x = s.input("x", Shape::new(&[2, 3]), &[0.0; 6])?;
            x.reshape(s, Shape::new(&[4])).map(|_| ())
        })
        .unwrap_err();
    assert!(err.to_string().contains("reshape"), "{err}");
}
