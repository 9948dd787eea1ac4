use crate::ops::gradcheck::{check, values};
use crate::ops::maxpool2d::Pool2dArgs;
use crate::tensor::Shape;

const PADDED: Pool2dArgs = Pool2dArgs {
    kernel: 3,
    stride: 2,
    padding: 1,
    ceil_mode: false,
};

fn pooled(shape: Shape, x: &[f32], a: Pool2dArgs) -> (Shape, Vec<f32>) {
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    engine
        .step(|s| {
            let x = s.input("x", shape, x)?;
            let y = x.avg_pool2d(s, a)?;
            let mut out = vec![0.0; y.shape().numel()];
            s.read(y, &mut out)?;
            Ok((y.shape(), out))
        })
        .unwrap()
}

/// PyTorch's definition read directly: the plane padded with zeros, each
/// window summed over its positions inside input + padding and divided by
/// how many those are.
fn reference(x: &[f32], planes: usize, h: usize, w: usize, a: Pool2dArgs, oh: usize, ow: usize) -> Vec<f32> {
    let (k, st, p) = (a.kernel, a.stride, a.padding);
    let (ph, pw) = (h + 2 * p, w + 2 * p);
    let mut y = Vec::new();
    for plane in 0..planes {
        let at = |i: usize, j: usize| {
            let inside = (p..p + h).contains(&i) && (p..p + w).contains(&j);
            if inside {
                x[(plane * h + i - p) * w + j - p] as f64
            } else {
                0.0
            }
        };
        for r in 0..oh {
            for c in 0..ow {
                let (mut sum, mut count) = (0.0, 0);
                for i in (r * st..r * st + k).filter(|&i| i < ph) {
                    for j in (c * st..c * st + k).filter(|&j| j < pw) {
                        sum += at(i, j);
                        count += 1;
                    }
                }
                y.push((sum / count as f64) as f32);
            }
        }
    }
    y
}

#[test]
fn avg_pool_counts_padding_as_pytorch_does() {
    let x: Vec<f32> = (1..=16).map(|v| v as f32).collect();
    let (shape, y) = pooled(Shape::new(&[1, 1, 4, 4]), &x, PADDED);
    assert_eq!(shape, Shape::new(&[1, 1, 2, 2]));
    // torch.nn.AvgPool2d(3, 2, 1)(torch.arange(1., 17.).view(1, 1, 4, 4)).
    assert_eq!(y, [14.0 / 9.0, 30.0 / 9.0, 57.0 / 9.0, 99.0 / 9.0]);
}

#[test]
fn ceil_mode_clips_the_last_divisor_as_pytorch_does() {
    let x: Vec<f32> = (0..25).map(|v| v as f32).collect();
    let ceil = Pool2dArgs {
        ceil_mode: true,
        ..Pool2dArgs::new(2, 2)
    };
    let (shape, y) = pooled(Shape::new(&[1, 1, 5, 5]), &x, ceil);
    assert_eq!(shape, Shape::new(&[1, 1, 3, 3]));
    // The last window of each row and column holds one input, divided by 1.
    assert_eq!(y[8], 24.0);
    assert_eq!(y[2], (4.0 + 9.0) / 2.0);
    let x: Vec<f32> = (0..36).map(|v| v as f32).collect();
    let (shape, y) = pooled(
        Shape::new(&[1, 1, 6, 6]),
        &x,
        Pool2dArgs {
            ceil_mode: true,
            ..PADDED
        },
    );
    assert_eq!(shape, Shape::new(&[1, 1, 4, 4]));
    // Rows 5..8 of the padded plane (input row 5 and one padding row): / 2·2.
    assert_eq!(y[15], 35.0 / 4.0);
}

#[test]
fn avg_pool_matches_a_padded_reference() {
    for (shape, a) in [
        (Shape::new(&[2, 3, 7, 9]), PADDED),
        (
            Shape::new(&[1, 2, 8, 7]),
            Pool2dArgs {
                ceil_mode: true,
                ..Pool2dArgs::new(3, 2)
            },
        ),
        (
            Shape::new(&[2, 2, 6, 5]),
            Pool2dArgs {
                ceil_mode: true,
                ..PADDED
            },
        ),
        (Shape::new(&[1, 3, 6, 6]), Pool2dArgs::new(3, 1)),
        (Shape::new(&[3, 2, 7, 5]), Pool2dArgs::new(2, 2)),
    ] {
        let x = values(shape.numel(), 7, -1.0, 1.0);
        let (out, y) = pooled(shape, &x, a);
        let want = reference(
            &x,
            shape.dim(0) * shape.dim(1),
            shape.dim(2),
            shape.dim(3),
            a,
            out.dim(2),
            out.dim(3),
        );
        for (i, (got, want)) in y.iter().zip(&want).enumerate() {
            assert!((got - want).abs() < 1e-6, "{shape} with {a:?} at {i}: {got} vs {want}");
        }
    }
}

#[test]
fn padded_avg_pool_gradient_matches_finite_differences() {
    let shape = Shape::new(&[2, 2, 7, 6]);
    check(&[shape], &[values(shape.numel(), 8, -1.0, 1.0)], &[0], &|s, x| {
        x[0].avg_pool2d(s, PADDED)
    });
}

#[test]
fn ceil_mode_avg_pool_gradient_matches_finite_differences() {
    let shape = Shape::new(&[1, 3, 6, 5]);
    let ceil = Pool2dArgs {
        ceil_mode: true,
        ..PADDED
    };
    check(&[shape], &[values(shape.numel(), 9, -1.0, 1.0)], &[0], &move |s, x| {
        x[0].avg_pool2d(s, ceil)
    });
}

#[test]
fn two_by_two_avg_pool_gradient_matches_finite_differences() {
    // Odd sizes: the last row and column belong to no window.
    let shape = Shape::new(&[2, 2, 5, 7]);
    check(&[shape], &[values(shape.numel(), 10, -1.0, 1.0)], &[0], &|s, x| {
        x[0].avg_pool2d(s, Pool2dArgs::new(2, 2))
    });
}

#[test]
fn bad_avg_pools_are_typed_errors() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 20).unwrap();
    for (shape, a) in [
        (Shape::new(&[1, 4, 4]), Pool2dArgs::new(2, 2)),
        (Shape::new(&[1, 1, 4, 4]), Pool2dArgs::new(2, 0)),
        (
            Shape::new(&[1, 1, 4, 4]),
            Pool2dArgs {
                padding: 2,
                ..Pool2dArgs::new(3, 1)
            },
        ),
        (Shape::new(&[1, 1, 2, 2]), Pool2dArgs::new(3, 1)),
    ] {
        let err = engine
            .step(|s| {
                let x = s.input("x", shape, &vec![0.0; shape.numel()])?;
                x.avg_pool2d(s, a).map(|_| ())
            })
            .unwrap_err();
        assert!(
            matches!(err, crate::Error::Shape { op: "avg_pool2d", .. }),
            "{shape} {a:?}: {err}"
        );
    }
}

/// A channels-last input is pooled as its NCHW copy, into NCHW.
#[test]
fn channels_last_avg_pool_gradient_matches_finite_differences() {
    use crate::tensor::Layout;
    let shape = Shape::new(&[2, 2, 7, 6]);
    check(&[shape], &[values(shape.numel(), 11, -1.0, 1.0)], &[0], &|s, x| {
        let x = x[0].to_layout(s, Layout::Nhwc)?;
        let y = x.avg_pool2d(s, PADDED)?;
        assert_eq!(y.layout(), Layout::Nchw);
        Ok(y)
    });
}
