use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;

#[test]
fn add_gradient_matches_finite_differences_for_both_inputs() {
    let shape = Shape::new(&[2, 3, 4, 5]);
    let (a, b) = (values(120, 1, -1.0, 1.0), values(120, 2, -1.0, 1.0));
    check(&[shape, shape], &[a, b], &[0, 1], &|s, x| x[0].add(s, x[1]));
}

#[test]
fn add_of_a_tensor_to_itself_gradient_matches_finite_differences() {
    let shape = Shape::new(&[3, 7]);
    check(&[shape], &[values(21, 3, -1.0, 1.0)], &[0], &|s, x| x[0].add(s, x[0]));
}

#[test]
fn add_adds_elementwise_and_gives_x_plus_x_twice_the_gradient() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let (y, twice, gx) = engine
        .step(|s| {
            let a = s.input("a", Shape::new(&[4]), &[1.0, -2.0, 0.5, 3.0])?;
            let b = s.input("b", Shape::new(&[4]), &[10.0, 20.0, -0.5, 0.25])?;
            let y = a.add(s, b)?;
            let x = s.variable("x", Shape::new(&[4]), &[1.0, 2.0, 3.0, 4.0])?;
            let xx = x.add(s, x)?;
            let gy = s.input("gy", Shape::new(&[4]), &[1.0, -1.0, 0.5, 2.0])?;
            let grads = s.backward_from(xx, gy)?;
            let gx = s.grad(&grads, x).expect("x has a gradient");
            let (mut out, mut twice, mut g) = ([0.0; 4], [0.0; 4], [0.0; 4]);
            s.read(y, &mut out)?;
            s.read(xx, &mut twice)?;
            s.read(gx, &mut g)?;
            Ok((out, twice, g))
        })
        .unwrap();
    assert_eq!(y, [11.0, 18.0, 0.0, 3.25]);
    assert_eq!(twice, [2.0, 4.0, 6.0, 8.0]);
    assert_eq!(gx, [2.0, -2.0, 1.0, 4.0]);
}

#[test]
fn add_refuses_different_shapes() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let err = engine
        .step(|s| {
            let a = s.input("a", Shape::new(&[2, 3]), &[0.0; 6])?;
            let b = s.input("b", Shape::new(&[3, 2]), &[0.0; 6])?;
            a.add(s, b).map(|_| ())
        })
        .unwrap_err();
    assert!(matches!(err, crate::Error::Shape { op: "add", .. }), "{err}");
}

/// Operands in different layouts: the second is converted to the first's,
/// and the sum is in the first's layout.
#[test]
fn add_of_two_layouts_gradient_matches_finite_differences() {
    use crate::tensor::Layout;
    let shape = Shape::new(&[2, 3, 4, 5]);
    let (a, b) = (values(120, 4, -1.0, 1.0), values(120, 5, -1.0, 1.0));
    for (la, lb) in [
        (Layout::Nhwc, Layout::Nchw),
        (Layout::Nchw, Layout::Nhwc),
        (Layout::Nhwc, Layout::Nhwc),
    ] {
        check(&[shape, shape], &[a.clone(), b.clone()], &[0, 1], &move |s, x| {
            let (a, b) = (x[0].to_layout(s, la)?, x[1].to_layout(s, lb)?);
            let y = a.add(s, b)?;
            assert_eq!(y.layout(), la, "the first operand's layout");
            y.to_layout(s, Layout::Nchw)
        });
    }
}
