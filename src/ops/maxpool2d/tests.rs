use super::Pool2dArgs;
use crate::ops::gradcheck::{check, distinct};
use crate::tensor::Shape;

#[test]
fn max_pool_gradient_matches_finite_differences() {
    // Odd height: the last row is dropped and must get a zero gradient.
    let shape = Shape::new(&[2, 3, 5, 6]);
    check(&[shape], &[distinct(shape.numel(), 11, 0.05)], &[0], &|s, x| {
        x[0].max_pool2d(s, Pool2dArgs::new(2, 2))
    });
}

#[test]
fn max_pool_picks_the_window_maximum() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    #[rustfmt::skip]
    let x = [
        1.0, 2.0,  5.0, -1.0,
        3.0, 0.0,  4.0,  4.5,
    ];
    let y = engine
        .step(|s| {
            let x = s.input("x", Shape::new(&[1, 1, 2, 4]), &x)?;
            let y = x.max_pool2d(s, Pool2dArgs::new(2, 2))?;
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
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 20).unwrap();
    let shape = Shape::new(&[2, 3, 7, 6]);
    let x = distinct(shape.numel(), 17, 0.05);
    let (fused, pair) = engine
        .step(|s| {
            let t = s.input("x", shape, &x)?;
            let (a, b) = (t.max_pool2d_relu(s)?, t.max_pool2d(s, Pool2dArgs::new(2, 2))?.relu(s)?);
            let (mut fa, mut fb) = (vec![0.0; a.shape().numel()], vec![0.0; b.shape().numel()]);
            s.read(a, &mut fa)?;
            s.read(b, &mut fb)?;
            Ok((fa, fb))
        })
        .unwrap();
    assert_eq!(fused, pair);
    assert!(fused.contains(&0.0) && fused.iter().any(|v| *v > 0.0));
}

/// A direct reading of PyTorch's definition: the plane padded with −∞ (and
/// as far past the right edge as a ceil-mode window reaches), each window's
/// first maximum taken in row-major order.
fn reference(x: &[f32], planes: usize, h: usize, w: usize, a: Pool2dArgs, oh: usize, ow: usize) -> Vec<f32> {
    let (k, st, p) = (a.kernel, a.stride, a.padding);
    let (ph, pw) = ((oh - 1) * st + k, (ow - 1) * st + k);
    let mut y = Vec::new();
    for plane in 0..planes {
        let mut padded = vec![f32::NEG_INFINITY; ph.max(h + 2 * p) * pw.max(w + 2 * p)];
        let stride = pw.max(w + 2 * p);
        for i in 0..h {
            for j in 0..w {
                padded[(i + p) * stride + j + p] = x[(plane * h + i) * w + j];
            }
        }
        for r in 0..oh {
            for c in 0..ow {
                let mut best = f32::NEG_INFINITY;
                for i in r * st..r * st + k {
                    for j in c * st..c * st + k {
                        best = best.max(padded[i * stride + j]);
                    }
                }
                y.push(best);
            }
        }
    }
    y
}

fn pooled(shape: Shape, x: &[f32], a: Pool2dArgs) -> (Shape, Vec<f32>) {
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    engine
        .step(|s| {
            let x = s.input("x", shape, x)?;
            let y = x.max_pool2d(s, a)?;
            let mut out = vec![0.0; y.shape().numel()];
            s.read(y, &mut out)?;
            Ok((y.shape(), out))
        })
        .unwrap()
}

const PADDED: Pool2dArgs = Pool2dArgs {
    kernel: 3,
    stride: 2,
    padding: 1,
    ceil_mode: false,
};
const CEIL: Pool2dArgs = Pool2dArgs {
    kernel: 3,
    stride: 2,
    padding: 0,
    ceil_mode: true,
};

#[test]
fn output_sizes_are_pytorchs() {
    let args = |kernel, stride, padding, ceil_mode| Pool2dArgs {
        kernel,
        stride,
        padding,
        ceil_mode,
    };
    // (input, args, output) as torch.nn.MaxPool2d gives them.
    for (h, a, out) in [
        (7, args(3, 2, 1, false), 4),
        (112, args(3, 2, 1, false), 56),
        (8, args(3, 2, 0, false), 3),
        (8, args(3, 2, 0, true), 4),
        // Ceil mode would start a third window in the right padding alone.
        (5, args(2, 2, 1, true), 3),
        (5, args(2, 2, 1, false), 3),
        (6, args(3, 3, 0, true), 2),
        (7, args(2, 2, 0, true), 4),
        (3, args(3, 1, 1, false), 3),
    ] {
        let g = a.geometry("max_pool2d", Shape::new(&[1, 1, h, h + 1])).unwrap();
        assert_eq!(g.oh, out, "{h} with {a:?}");
    }
}

#[test]
fn max_pool_matches_a_padded_reference() {
    for (shape, a) in [
        (Shape::new(&[2, 3, 7, 9]), PADDED),
        (Shape::new(&[1, 2, 8, 7]), CEIL),
        (
            Shape::new(&[2, 2, 5, 5]),
            Pool2dArgs {
                padding: 1,
                ceil_mode: true,
                ..Pool2dArgs::new(2, 2)
            },
        ),
        (Shape::new(&[1, 3, 6, 6]), Pool2dArgs::new(3, 1)),
        (Shape::new(&[2, 1, 9, 8]), Pool2dArgs::new(2, 3)),
        (Shape::new(&[3, 2, 7, 5]), Pool2dArgs::new(2, 2)),
    ] {
        // Negative values: padding taken for 0 instead of −∞ would win.
        let x: Vec<f32> = distinct(shape.numel(), 5, 0.05).iter().map(|v| v - 10.0).collect();
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
        assert_eq!(y, want, "{shape} with {a:?}");
    }
}

#[test]
fn max_pool_takes_the_first_of_tied_maxima_as_pytorch_does() {
    // Every input equal: the gradient goes to each window's first input.
    let shape = Shape::new(&[1, 1, 4, 4]);
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 20).unwrap();
    let gx = engine
        .step(|s| {
            let x = s.variable("x", shape, &[1.0; 16])?;
            let y = x.max_pool2d(s, PADDED)?;
            let ones = s.input("gy", y.shape(), &vec![1.0; y.shape().numel()])?;
            let grads = s.backward_from(y, ones)?;
            let gx = s.grad(&grads, x).unwrap();
            let mut out = [0.0; 16];
            s.read(gx, &mut out)?;
            Ok(out)
        })
        .unwrap();
    // Windows start at rows/columns −1 and 1: their first real inputs are 0 and 1.
    #[rustfmt::skip]
    let want = [
        1.0, 1.0, 0.0, 0.0,
        1.0, 1.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0,
        0.0, 0.0, 0.0, 0.0,
    ];
    assert_eq!(gx, want);
}

#[test]
fn the_general_kernels_agree_with_the_two_by_two_ones() {
    let shape = Shape::new(&[2, 3, 7, 6]);
    let x = distinct(shape.numel(), 23, 0.05);
    let gy = crate::ops::gradcheck::values(2 * 3 * 3 * 3, 7, -1.0, 1.0);
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    let run = |engine: &mut crate::Engine, general: bool| {
        engine
            .step(|s| {
                let t = s.variable("x", shape, &x)?;
                let y = if general {
                    t.pool_window(s, Pool2dArgs::new(2, 2))?
                } else {
                    t.max_pool2d(s, Pool2dArgs::new(2, 2))?
                };
                let g = s.input("gy", y.shape(), &gy)?;
                let grads = s.backward_from(y, g)?;
                let gx = s.grad(&grads, t).unwrap();
                let (mut a, mut b) = (vec![0.0; gy.len()], vec![0.0; x.len()]);
                s.read(y, &mut a)?;
                s.read(gx, &mut b)?;
                Ok((a, b))
            })
            .unwrap()
    };
    assert_eq!(run(&mut engine, true), run(&mut engine, false));
}

#[test]
fn padded_max_pool_gradient_matches_finite_differences() {
    let shape = Shape::new(&[2, 2, 7, 6]);
    check(&[shape], &[distinct(shape.numel(), 29, 0.05)], &[0], &|s, x| {
        x[0].max_pool2d(s, PADDED)
    });
}

#[test]
fn ceil_mode_max_pool_gradient_matches_finite_differences() {
    // 8 → 4 rows in ceil mode: the last window is clipped to two rows.
    let shape = Shape::new(&[1, 3, 8, 7]);
    check(&[shape], &[distinct(shape.numel(), 31, 0.05)], &[0], &|s, x| {
        x[0].max_pool2d(s, CEIL)
    });
}

#[test]
fn overlapping_max_pool_gradient_matches_finite_differences() {
    // Stride 1: an input can win several windows, and its gradient sums them.
    let shape = Shape::new(&[1, 2, 5, 5]);
    check(&[shape], &[distinct(shape.numel(), 37, 0.05)], &[0], &|s, x| {
        x[0].max_pool2d(s, Pool2dArgs::new(3, 1))
    });
}

#[test]
fn bad_pools_are_typed_errors() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 20).unwrap();
    let args = |kernel, stride, padding| Pool2dArgs {
        kernel,
        stride,
        padding,
        ceil_mode: false,
    };
    for (shape, a) in [
        (Shape::new(&[1, 4, 4]), args(2, 2, 0)),
        (Shape::new(&[1, 1, 4, 4]), args(0, 1, 0)),
        (Shape::new(&[1, 1, 4, 4]), args(2, 0, 0)),
        (Shape::new(&[1, 1, 4, 4]), args(3, 1, 2)),
        (Shape::new(&[1, 1, 4, 2]), args(5, 1, 1)),
        (Shape::new(&[1, 1, 20, 20]), args(16, 1, 0)),
        (Shape::new(&[1, 1, 1, 1]), args(2, 2, 0)),
    ] {
        let err = engine
            .step(|s| {
                let x = s.input("x", shape, &vec![0.0; shape.numel()])?;
                x.max_pool2d(s, a).map(|_| ())
            })
            .unwrap_err();
        assert!(
            matches!(err, crate::Error::Shape { op: "max_pool2d", .. }),
            "{shape} {a:?}: {err}"
        );
    }
}

/// A channels-last input is pooled as its NCHW copy, into NCHW.
#[test]
fn channels_last_max_pools_gradients_match_finite_differences() {
    use crate::tensor::Layout;
    let shape = Shape::new(&[2, 3, 5, 6]);
    let overlapping = Pool2dArgs {
        kernel: 3,
        stride: 2,
        padding: 1,
        ceil_mode: true,
    };
    for (relu, a) in [
        (false, Pool2dArgs::new(2, 2)),
        (true, Pool2dArgs::new(2, 2)),
        (false, overlapping),
    ] {
        check(&[shape], &[distinct(shape.numel(), 41, 0.05)], &[0], &move |s, x| {
            let x = x[0].to_layout(s, Layout::Nhwc)?;
            let y = if relu {
                x.max_pool2d_relu(s)?
            } else {
                x.max_pool2d(s, a)?
            };
            assert_eq!(y.layout(), Layout::Nchw);
            Ok(y)
        });
    }
}
