use crate::ops::gradcheck::{check, values};
use crate::tensor::Shape;

#[test]
fn global_avg_pool_gradient_matches_finite_differences() {
    let shape = Shape::new(&[2, 3, 3, 5]);
    check(&[shape], &[values(shape.numel(), 4, -1.0, 1.0)], &[0], &|s, x| {
        x[0].global_avg_pool2d(s)
    });
}

#[test]
fn global_avg_pool_is_the_mean_of_each_plane() {
    let shape = Shape::new(&[3, 70, 4, 3]);
    let x = values(shape.numel(), 5, -1.0, 1.0);
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    let y = engine
        .step(|s| {
            let t = s.input("x", shape, &x)?;
            let y = t.global_avg_pool2d(s)?;
            assert_eq!(y.shape(), Shape::new(&[3, 70]));
            let mut out = vec![0.0; 210];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .unwrap();
    for (p, (got, plane)) in y.iter().zip(x.chunks(12)).enumerate() {
        let mean = plane.iter().map(|&v| v as f64).sum::<f64>() / 12.0;
        assert!((*got as f64 - mean).abs() < 1e-6, "plane {p}: {got} vs {mean}");
    }
}

#[test]
fn global_avg_pool_refuses_other_ranks() {
    let mut engine = crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap();
    for shape in [Shape::new(&[2, 3, 4]), Shape::new(&[2, 3, 0, 4])] {
        let err = engine
            .step(|s| {
                let x = s.input("x", shape, &vec![0.0; shape.numel()])?;
                x.global_avg_pool2d(s).map(|_| ())
            })
            .unwrap_err();
        assert!(
            matches!(
                err,
                crate::Error::Shape {
                    op: "global_avg_pool2d",
                    ..
                }
            ),
            "{shape}: {err}"
        );
    }
}

#[test]
fn channels_last_global_avg_pool_gradient_matches_finite_differences() {
    let shape = Shape::new(&[2, 3, 3, 5]);
    check(&[shape], &[values(shape.numel(), 6, -1.0, 1.0)], &[0], &|s, x| {
        let x = x[0].to_layout(s, crate::tensor::Layout::Nhwc)?;
        x.global_avg_pool2d(s)
    });
}

/// A channels-last input pools in place (no NCHW copy) to the NCHW
/// input's bits, into a row-major `[N, C]`; its gradient is channels last
/// and reads back as the NCHW one's.
#[test]
fn channels_last_global_avg_pool_gives_nchws_bits() {
    use crate::tensor::Layout;
    let shape = Shape::new(&[3, 70, 4, 3]);
    let x = values(shape.numel(), 7, -1.0, 1.0);
    let gy = values(210, 8, -1.0, 1.0);
    let mut engine = crate::Engine::new(crate::Device::cpu(2).unwrap(), 1 << 20).unwrap();
    let mut run = |layout: Layout| {
        engine
            .step(|s| {
                let v = s.variable("x", shape, &x)?;
                let t = v.to_layout(s, layout)?;
                let y = t.global_avg_pool2d(s)?;
                assert_eq!((y.shape(), y.layout()), (Shape::new(&[3, 70]), Layout::Nchw));
                let g = s.input("gy", y.shape(), &gy)?;
                let grads = s.backward_from(y, g)?;
                let gt = s.grad(&grads, t).expect("a gradient");
                assert_eq!(gt.layout(), layout);
                let gv = s.grad(&grads, v).expect("a gradient");
                let (mut out, mut gt_host, mut gv_host) = (vec![0.0; 210], vec![0.0; x.len()], vec![0.0; x.len()]);
                s.read(y, &mut out)?;
                s.read(gt, &mut gt_host)?;
                s.read(gv, &mut gv_host)?;
                Ok((out, gt_host, gv_host))
            })
            .unwrap()
    };
    let nchw = run(Layout::Nchw);
    let nhwc = run(Layout::Nhwc);
    assert!(nchw.0 == nhwc.0, "the means differ");
    assert!(nchw.1 == nhwc.1, "the pool's input gradients differ");
    assert!(nchw.2 == nhwc.2, "the variable's gradients differ");
}
