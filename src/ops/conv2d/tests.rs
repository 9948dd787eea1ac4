use super::Conv2dArgs;
use crate::backend::ConvDims;
use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;

fn args(stride: usize, padding: usize) -> Conv2dArgs {
    Conv2dArgs { stride, padding }
}

/// Gradient checks of x, w and the bias, and of x and w without a bias, for
/// one geometry.
fn check_geometry(x: Shape, w: Shape, a: Conv2dArgs) {
    let f = w.dim(0);
    let b = Shape::new(&[f]);
    let inputs = [
        values(x.numel(), 1, -1.0, 1.0),
        values(w.numel(), 2, -0.5, 0.5),
        values(f, 3, -0.5, 0.5),
    ];
    check(&[x, w, b], &inputs, &[0, 1, 2], &move |s, t| {
        t[0].conv2d(s, t[1], Some(t[2]), a)
    });
    check(&[x, w], &inputs[..2], &[0, 1], &move |s, t| {
        t[0].conv2d(s, t[1], None, a)
    });
}

#[test]
fn conv2d_gradients_match_finite_differences_with_bias() {
    check_geometry(
        Shape::new(&[3, 2, 6, 5]),
        Shape::new(&[4, 2, 3, 2]),
        Conv2dArgs::default(),
    );
}

#[test]
fn conv2d_gradients_match_finite_differences_without_bias() {
    // The reference model's second layer, shrunk: 5×5 kernels, many channels.
    let (x, w) = (Shape::new(&[2, 3, 7, 7]), Shape::new(&[5, 3, 5, 5]));
    let inputs = [values(x.numel(), 4, -1.0, 1.0), values(w.numel(), 5, -0.2, 0.2)];
    check(&[x, w], &inputs, &[0, 1], &|s, t| {
        t[0].conv2d(s, t[1], None, Conv2dArgs::default())
    });
}

// ResNet's geometries, shrunk, on odd sizes so that a stride leaves the
// last rows and columns unread. Three images on the checks' two threads: one
// thread sums two images' weight gradients, the other one.

#[test]
fn gradients_1x1_stride_1() {
    check_geometry(Shape::new(&[3, 3, 5, 4]), Shape::new(&[4, 3, 1, 1]), args(1, 0));
}

#[test]
fn gradients_1x1_stride_2() {
    check_geometry(Shape::new(&[3, 3, 5, 6]), Shape::new(&[4, 3, 1, 1]), args(2, 0));
}

#[test]
fn gradients_3x3_stride_1_padding_1() {
    check_geometry(Shape::new(&[3, 3, 5, 4]), Shape::new(&[3, 3, 3, 3]), args(1, 1));
}

#[test]
fn gradients_3x3_stride_2_padding_1() {
    check_geometry(Shape::new(&[3, 3, 7, 6]), Shape::new(&[3, 3, 3, 3]), args(2, 1));
}

#[test]
fn gradients_7x7_stride_2_padding_3() {
    check_geometry(Shape::new(&[3, 2, 9, 8]), Shape::new(&[3, 2, 7, 7]), args(2, 3));
}

/// The op, run on the CPU, and the shape and values of its output.
fn run(xs: Shape, ws: Shape, x: &[f32], w: &[f32], bias: Option<&[f32]>, a: Conv2dArgs) -> (Shape, Vec<f32>) {
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 16 << 20).unwrap();
    engine
        .step(|s| {
            let (xt, wt) = (s.input("x", xs, x)?, s.input("w", ws, w)?);
            let b = match bias {
                Some(b) => Some(s.input("b", Shape::new(&[b.len()]), b)?),
                None => None,
            };
            let y = xt.conv2d(s, wt, b, a)?;
            let mut out = vec![0.0; y.shape().numel()];
            s.read(y, &mut out)?;
            Ok((y.shape(), out))
        })
        .unwrap()
}

/// The definition, in direct loops: `y[n][f][oy][ox] = b[f] + Σ w[f][c][i][j] ·
/// x[n][c][oy·s + i − p][ox·s + j − p]`, terms in the padding left out.
fn direct(xs: Shape, ws: Shape, x: &[f32], w: &[f32], bias: Option<&[f32]>, a: Conv2dArgs) -> (Shape, Vec<f32>) {
    let (n, c, h, wd) = (xs.dim(0), xs.dim(1), xs.dim(2), xs.dim(3));
    let (f, kh, kw) = (ws.dim(0), ws.dim(2), ws.dim(3));
    let (s, p) = (a.stride, a.padding);
    let (oh, ow) = ((h + 2 * p - kh) / s + 1, (wd + 2 * p - kw) / s + 1);
    let mut y = Vec::new();
    for nn in 0..n {
        for ff in 0..f {
            for oy in 0..oh {
                for ox in 0..ow {
                    let mut sum = bias.map_or(0.0, |b| b[ff]);
                    for cc in 0..c {
                        for i in 0..kh {
                            for j in 0..kw {
                                let (yy, xx) = ((oy * s + i) as isize - p as isize, (ox * s + j) as isize - p as isize);
                                if yy < 0 || xx < 0 || yy >= h as isize || xx >= wd as isize {
                                    continue;
                                }
                                let (yy, xx) = (yy as usize, xx as usize);
                                sum += x[((nn * c + cc) * h + yy) * wd + xx] * w[((ff * c + cc) * kh + i) * kw + j];
                            }
                        }
                    }
                    y.push(sum);
                }
            }
        }
    }
    (Shape::new(&[n, f, oh, ow]), y)
}

#[test]
fn conv2d_matches_a_direct_convolution() {
    // Odd sizes; widths past one 8-lane vector so the fast path's full spans run too.
    let cases = [
        ([2, 2, 5, 4], [3, 2, 2, 3], args(1, 0)),
        ([2, 3, 9, 19], [4, 3, 5, 5], args(1, 0)),
        ([2, 3, 9, 11], [4, 3, 3, 3], args(1, 1)),
        ([2, 3, 9, 11], [4, 3, 3, 3], args(2, 1)),
        ([3, 5, 7, 9], [6, 5, 1, 1], args(2, 0)),
        ([1, 2, 13, 11], [3, 2, 7, 7], args(2, 3)),
        ([2, 2, 7, 5], [3, 2, 3, 2], args(3, 2)),
        ([1, 3, 17, 17], [2, 3, 3, 3], args(1, 1)),
    ];
    for (seed, (xs, ws, a)) in (10..).zip(cases) {
        let (xs, ws) = (Shape::new(&xs), Shape::new(&ws));
        let x = values(xs.numel(), seed, -1.0, 1.0);
        let w = values(ws.numel(), seed + 100, -1.0, 1.0);
        let b = values(ws.dim(0), seed + 200, -1.0, 1.0);
        for bias in [None, Some(&b[..])] {
            let (got_shape, got) = run(xs, ws, &x, &w, bias, a);
            let (want_shape, want) = direct(xs, ws, &x, &w, bias, a);
            assert_eq!(got_shape, want_shape, "{xs} * {ws} with {a:?}");
            for (i, (g, w)) in got.iter().zip(&want).enumerate() {
                assert!(
                    (g - w).abs() < 1e-5,
                    "{xs} * {ws} with {a:?}, bias {}: y[{i}] {g} vs {w}",
                    bias.is_some()
                );
            }
        }
    }
}

#[test]
fn output_sizes_are_pytorchs() {
    let cases = [
        ([1, 1, 32, 32], [1, 1, 3, 3], args(1, 1), [1, 1, 32, 32]),
        ([1, 1, 32, 32], [1, 1, 3, 3], args(2, 1), [1, 1, 16, 16]),
        ([1, 1, 7, 7], [1, 1, 3, 3], args(2, 1), [1, 1, 4, 4]),
        ([1, 1, 7, 7], [1, 1, 1, 1], args(2, 0), [1, 1, 4, 4]),
        ([1, 1, 224, 224], [1, 1, 7, 7], args(2, 3), [1, 1, 112, 112]),
        ([1, 1, 2, 2], [1, 1, 3, 3], args(5, 1), [1, 1, 1, 1]),
    ];
    for (xs, ws, a, want) in cases {
        let (xs, ws) = (Shape::new(&xs), Shape::new(&ws));
        let (shape, _) = run(xs, ws, &vec![0.5; xs.numel()], &vec![0.5; ws.numel()], None, a);
        assert_eq!(shape, Shape::new(&want), "{xs} * {ws} with {a:?}");
    }
}

/// The error message of a convolution that must be refused.
fn refused(xs: &[usize], ws: &[usize], bias: Option<usize>, a: Conv2dArgs) -> String {
    let (xs, ws) = (Shape::new(xs), Shape::new(ws));
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 20).unwrap();
    let err = engine
        .step(|s| {
            let x = s.input("x", xs, &vec![0.0; xs.numel()])?;
            let w = s.input("w", ws, &vec![0.0; ws.numel()])?;
            let b = match bias {
                Some(len) => Some(s.input("b", Shape::new(&[len]), &vec![0.0; len])?),
                None => None,
            };
            x.conv2d(s, w, b, a).map(|_| ())
        })
        .unwrap_err();
    assert!(matches!(err, crate::Error::Shape { .. }), "not a shape error: {err}");
    err.to_string()
}

#[test]
fn conv2d_rejects_mismatched_channels() {
    let err = refused(&[1, 2, 5, 5], &[1, 3, 3, 3], None, Conv2dArgs::default());
    assert!(err.contains("2 channels"), "{err}");
}

#[test]
fn conv2d_rejects_stride_zero() {
    let err = refused(&[1, 2, 5, 5], &[1, 2, 3, 3], None, args(0, 1));
    assert!(err.contains("stride 0"), "{err}");
}

#[test]
fn conv2d_rejects_a_kernel_larger_than_the_padded_input() {
    // 3 + 2·1 = 5 rows fit a 5-row kernel; 4 + 2·0 columns do not fit 5.
    refused(&[1, 1, 3, 4], &[1, 1, 5, 5], None, args(1, 0));
    let err = refused(&[1, 1, 3, 4], &[1, 1, 6, 5], None, args(1, 1));
    assert!(err.contains("does not fit input 3×4 with padding 1"), "{err}");
    let err = refused(&[1, 1, 3, 3], &[1, 1, 0, 3], None, args(1, 1));
    assert!(err.contains("does not fit"), "{err}");
    let err = refused(&[1, 1, 3, 3], &[1, 1, 3, 3], None, args(1, usize::MAX));
    assert!(err.contains("does not fit"), "{err}");
}

#[test]
fn conv2d_rejects_a_bias_of_the_wrong_length() {
    let err = refused(&[1, 2, 5, 5], &[3, 2, 3, 3], Some(2), args(2, 1));
    assert!(err.contains("bias [2] for 3 filters"), "{err}");
}

#[test]
fn conv2d_rejects_zero_channels_or_filters() {
    let err = refused(&[1, 0, 5, 5], &[3, 0, 3, 3], None, args(1, 1));
    assert!(err.contains("no channels or no filters"), "{err}");
    let err = refused(&[1, 2, 5, 5], &[0, 2, 3, 3], Some(0), args(2, 1));
    assert!(err.contains("no channels or no filters"), "{err}");
}

#[test]
fn conv2d_rejects_inputs_of_the_wrong_rank() {
    let err = refused(&[2, 5, 5], &[3, 2, 3, 3], None, args(1, 1));
    assert!(err.contains("[N, C, H, W]"), "{err}");
}

#[test]
fn conv2d_one_by_one_on_tiny_maps_with_many_channels_matches_finite_differences() {
    // A bottleneck's 1×1 convolutions at the last stage of a narrow ResNet-50.
    let (x, w) = (Shape::new(&[3, 24, 2, 2]), Shape::new(&[8, 24, 1, 1]));
    let inputs = [values(x.numel(), 31, -1.0, 1.0), values(w.numel(), 32, -0.5, 0.5)];
    check(&[x, w], &inputs, &[0, 1], &|s, t| {
        t[0].conv2d(s, t[1], None, super::Conv2dArgs::default())
    });
}

#[test]
fn a_recomputation_that_needs_its_own_output_is_an_error_not_a_recursion() {
    use super::{geometry, Conv2dArgs, Saved};
    let err = crate::ops::gradcheck::engine()
        .step(|s| {
            let x = s.variable("x", Shape::new(&[1, 1, 4, 4]), &[0.5; 16])?;
            let w = s.variable("w", Shape::new(&[1, 1, 3, 3]), &[0.1; 9])?;
            let g = geometry(
                x.shape(),
                w.shape(),
                None,
                Conv2dArgs::default(),
                (crate::memory::DType::F32, crate::tensor::Layout::Nchw),
            )?;
            // A recipe for x that reads x: what a wrongly registered one does.
            let wrong = Saved {
                g,
                x: x.inner,
                w: w.inner,
                bias: None,
                y: x.inner,
            };
            s.recomputable(&x.inner, wrong);
            s.saved(&x.inner).map(drop)
        })
        .expect_err("a recipe that reads what it makes");
    assert!(
        err.to_string().contains("a recomputation that needs its own output"),
        "{err}"
    );
}

/// A convolution's three passes by direct loops over the definition, for
/// the CPU kernels' tests to compare against: `y` (with `bias`), `dW` and
/// `dx` for `dy`, any stride and padding.
pub(super) struct DirectLoops {
    pub y: Vec<f32>,
    pub gw: Vec<f32>,
    pub gx: Vec<f32>,
}

pub(super) fn direct_loops(g: &ConvDims, x: &[f32], w: &[f32], bias: &[f32], gy: &[f32]) -> DirectLoops {
    let (n, h, wd, f) = (g.n, g.h, g.w, g.f);
    let (k, p, ow, image) = (g.k(), g.p(), g.output_hw().1, g.c * g.h * g.w);
    // The input pixel under output pixel `o` for filter weight `kk` (channel,
    // kernel row, kernel column), if not padding.
    let at = |o: usize, kk: usize| {
        let (cc, i, j) = (kk / (g.kh * g.kw), kk / g.kw % g.kh, kk % g.kw);
        let yy = (o / ow * g.stride + i).checked_sub(g.padding)?;
        let xx = (o % ow * g.stride + j).checked_sub(g.padding)?;
        (yy < h && xx < wd).then_some((cc * h + yy) * wd + xx)
    };
    let mut out = DirectLoops {
        y: vec![0.0; n * f * p],
        gw: vec![0.0; f * k],
        gx: vec![0.0; n * image],
    };
    for (i, y) in out.y.iter_mut().enumerate() {
        let (nn, ff, o) = (i / (f * p), i / p % f, i % p);
        *y = bias[ff];
        for kk in 0..k {
            if let Some(xi) = at(o, kk) {
                *y += w[ff * k + kk] * x[nn * image + xi];
            }
        }
    }
    for nn in 0..n {
        for ff in 0..f {
            for o in 0..p {
                let dy = gy[(nn * f + ff) * p + o];
                for kk in 0..k {
                    if let Some(xi) = at(o, kk) {
                        out.gw[ff * k + kk] += dy * x[nn * image + xi];
                        out.gx[nn * image + xi] += w[ff * k + kk] * dy;
                    }
                }
            }
        }
    }
    out
}
