use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;

#[test]
fn conv2d_gradients_match_finite_differences_with_bias() {
    let (x, w, b) = (Shape::new(&[3, 2, 6, 5]), Shape::new(&[4, 2, 3, 2]), Shape::new(&[4]));
    let inputs = [
        values(x.numel(), 1, -1.0, 1.0),
        values(w.numel(), 2, -0.5, 0.5),
        values(4, 3, -0.5, 0.5),
    ];
    check(&[x, w, b], &inputs, &[0, 1, 2], &|s, t| {
        t[0].conv2d(s, t[1], Some(t[2]))
    });
}

#[test]
fn conv2d_gradients_match_finite_differences_without_bias() {
    // The reference model's second layer, shrunk: 5×5 kernels, many channels.
    let (x, w) = (Shape::new(&[2, 3, 7, 7]), Shape::new(&[5, 3, 5, 5]));
    let inputs = [values(x.numel(), 4, -1.0, 1.0), values(w.numel(), 5, -0.2, 0.2)];
    check(&[x, w], &inputs, &[0, 1], &|s, t| t[0].conv2d(s, t[1], None));
}

#[test]
fn conv2d_matches_a_direct_convolution() {
    let (xs, ws) = (Shape::new(&[2, 2, 5, 4]), Shape::new(&[3, 2, 2, 3]));
    let (x, w) = (values(xs.numel(), 7, -1.0, 1.0), values(ws.numel(), 8, -1.0, 1.0));
    let mut arena = crate::Arena::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    let y = arena
        .step(|s| {
            let (xt, wt) = (s.input("x", xs, &x)?, s.input("w", ws, &w)?);
            let y = xt.conv2d(s, wt, None)?;
            assert_eq!(y.shape(), Shape::new(&[2, 3, 4, 2]));
            let mut out = vec![0.0; y.shape().numel()];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .unwrap();
    for n in 0..2 {
        for f in 0..3 {
            for oh in 0..4 {
                for ow in 0..2 {
                    let mut want = 0.0;
                    for c in 0..2 {
                        for i in 0..2 {
                            for j in 0..3 {
                                want += x[((n * 2 + c) * 5 + oh + i) * 4 + ow + j] * w[((f * 2 + c) * 2 + i) * 3 + j];
                            }
                        }
                    }
                    let got = y[((n * 3 + f) * 4 + oh) * 2 + ow];
                    assert!((got - want).abs() < 1e-5, "{got} vs {want}");
                }
            }
        }
    }
}

#[test]
fn conv2d_rejects_mismatched_channels() {
    let mut arena = crate::Arena::new(crate::Device::cpu(1).unwrap(), 1 << 20).unwrap();
    let err = arena
        .step(|s| {
            let x = s.input("x", Shape::new(&[1, 2, 5, 5]), &[0.0; 50])?;
            let w = s.input("w", Shape::new(&[1, 3, 3, 3]), &[0.0; 27])?;
            x.conv2d(s, w, None).map(|_| ())
        })
        .unwrap_err();
    assert!(err.to_string().contains("2 channels"), "{err}");
}
