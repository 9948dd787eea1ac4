use crate::ops::gradcheck::{check, values};
use crate::tensor::{Shape, Tensor};

#[test]
fn concat_gradient_matches_finite_differences_for_every_part() {
    let shapes = [
        Shape::new(&[2, 3, 3, 4]),
        Shape::new(&[2, 1, 3, 4]),
        Shape::new(&[2, 2, 3, 4]),
    ];
    let inputs: Vec<Vec<f32>> = (0..3)
        .map(|i| values(shapes[i].numel(), 10 + i as u64, -1.0, 1.0))
        .collect();
    check(&shapes, &inputs, &[0, 1, 2], &|s, x| Tensor::concat_channels(s, x));
}

#[test]
fn concat_of_a_part_with_itself_gradient_matches_finite_differences() {
    let shape = Shape::new(&[2, 2, 2, 3]);
    check(&[shape], &[values(24, 13, -1.0, 1.0)], &[0], &|s, x| {
        Tensor::concat_channels(s, &[x[0], x[0]])
    });
}

#[test]
fn concat_places_each_part_at_its_channels() {
    let (a, b) = (Shape::new(&[2, 1, 1, 2]), Shape::new(&[2, 2, 1, 2]));
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let y = engine
        .step(|s| {
            let a = s.input("a", a, &[1.0, 2.0, 3.0, 4.0])?;
            let b = s.input("b", b, &[10.0, 11.0, 12.0, 13.0, 14.0, 15.0, 16.0, 17.0])?;
            let y = Tensor::concat_channels(s, &[a, b])?;
            assert_eq!(y.shape(), Shape::new(&[2, 3, 1, 2]));
            let mut out = [0.0; 12];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .unwrap();
    // Image 0: a's channel, then b's two; image 1 likewise.
    assert_eq!(y, [1.0, 2.0, 10.0, 11.0, 12.0, 13.0, 3.0, 4.0, 14.0, 15.0, 16.0, 17.0]);
}

#[test]
fn concat_refuses_no_parts_and_mismatched_parts() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    let none = engine
        .step(|s| Tensor::concat_channels(s, &[]).map(|_| ()))
        .unwrap_err();
    assert!(
        matches!(
            none,
            crate::Error::Shape {
                op: "concat_channels",
                ..
            }
        ),
        "{none}"
    );
    let lead = Shape::new(&[2, 3, 4, 5]);
    for other in [
        Shape::new(&[1, 3, 4, 5]),
        Shape::new(&[2, 3, 5, 5]),
        Shape::new(&[2, 3, 4, 4]),
        Shape::new(&[2, 3, 20]),
    ] {
        let err = engine
            .step(|s| {
                let a = s.input("a", lead, &vec![0.0; lead.numel()])?;
                let b = s.input("b", other, &vec![0.0; other.numel()])?;
                Tensor::concat_channels(s, &[a, b]).map(|_| ())
            })
            .unwrap_err();
        assert!(
            matches!(
                err,
                crate::Error::Shape {
                    op: "concat_channels",
                    ..
                }
            ),
            "{other}: {err}"
        );
    }
}

/// Channels-last parts are converted to NCHW, and the output is NCHW.
#[test]
fn concat_of_channels_last_parts_gradient_matches_finite_differences() {
    use crate::tensor::Layout;
    let shapes = [Shape::new(&[2, 3, 3, 4]), Shape::new(&[2, 2, 3, 4])];
    let inputs: Vec<Vec<f32>> = (0..2)
        .map(|i| values(shapes[i].numel(), 20 + i as u64, -1.0, 1.0))
        .collect();
    check(&shapes, &inputs, &[0, 1], &|s, x| {
        let a = x[0].to_layout(s, Layout::Nhwc)?;
        // An NHWC part, an NCHW one, and the NHWC one again.
        let y = Tensor::concat_channels(s, &[a, x[1], a])?;
        assert_eq!(y.layout(), Layout::Nchw);
        Ok(y)
    });
}
