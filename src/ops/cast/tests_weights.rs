//! `Step::convert_weights`: copies made ahead, taken by `convert`.

use crate::memory::DType;
use crate::ops::gradcheck::values;
use crate::tensor::{Layout, Param, Shape};
use crate::Engine;

/// 35 convolution weights of assorted shapes (two launches' worth), a
/// bias between them (not 4-D: left alone), in a CPU engine, made as the
/// parameter store makes them (values and a gradient slot) without
/// reaching up into `nn`.
fn weights() -> (Engine, Vec<Param>) {
    let mut engine = Engine::new(crate::Device::cpu(1).unwrap(), 8 << 20).unwrap();
    let mut p = engine.persistent();
    let mut param = |index: u32, shape: Shape| Param {
        index,
        buf: p
            .upload("weight", shape, &values(shape.numel(), index as u64, -2.0, 2.0))
            .unwrap(),
        grad: p.zeros("weight grad", shape).unwrap(),
        shape,
    };
    let mut params = Vec::new();
    for i in 0..35usize {
        let (co, ci, k) = (1 + i % 5, 1 + (i * 7) % 6, [1, 3, 7][i % 3]);
        params.push(param(i as u32, Shape::new(&[co, ci, k, k])));
        if i == 3 {
            params.push(param(100, Shape::new(&[co])));
        }
    }
    (engine, params)
}

/// Each weight's values as `convert` makes its copy to (`dtype`,
/// `layout`), read back in NCHW order; with `ahead`, after
/// `convert_weights` made them all, each convert asked for twice (the
/// same copy both times, not made again).
fn copies(engine: &mut Engine, params: &[Param], dtype: DType, layout: Layout, ahead: bool) -> Vec<Vec<f32>> {
    engine
        .step(|s| {
            if ahead {
                s.convert_weights(params, dtype, layout)?;
            }
            let mut out = Vec::new();
            for p in params {
                let w = s.param(p);
                let y = w.convert(s, dtype, layout)?;
                assert_eq!(
                    (y.dtype(), y.layout()),
                    (dtype, if p.shape().rank() == 4 { layout } else { Layout::Nchw })
                );
                if ahead && p.shape().rank() == 4 {
                    let again = w.convert(s, dtype, layout)?;
                    assert_eq!(again.buf(), y.buf(), "the copy made ahead, taken again");
                }
                let mut values = vec![0.0; p.shape().numel()];
                s.read(y, &mut values)?;
                out.push(values);
            }
            Ok(out)
        })
        .unwrap()
}

#[test]
fn weights_converted_ahead_are_the_copies_convert_makes() {
    let (mut engine, params) = weights();
    for (dtype, layout) in [
        (DType::Bf16, Layout::Nhwc),
        (DType::F32, Layout::Nhwc),
        (DType::Bf16, Layout::Nchw),
    ] {
        let one_by_one = copies(&mut engine, &params, dtype, layout, false);
        let ahead = copies(&mut engine, &params, dtype, layout, true);
        assert_eq!(ahead, one_by_one, "{dtype:?} {layout:?}");
    }
}

/// A copy made ahead and read by two ops is recorded for backward once:
/// its gradient (both readers') is cast back to the weight's slot once,
/// as a copy `convert` makes at its first use is.
#[test]
fn a_weight_converted_ahead_gets_its_gradient_once() {
    let (mut engine, params) = weights();
    let p = params[1];
    let n = p.shape().numel();
    // A channels-last copy (fp32: the CPU sums no bf16 gradients), the
    // gradient exactly 2 g.
    let g: Vec<f32> = (0..n).map(|i| (i % 7) as f32 - 3.0).collect();
    let mut grad = |ahead: bool| {
        engine
            .step(|s| {
                if ahead {
                    s.convert_weights(&params, DType::F32, Layout::Nhwc)?;
                }
                let w = s.param(&p);
                let a = w.convert(s, DType::F32, Layout::Nhwc)?;
                let b = w.convert(s, DType::F32, Layout::Nhwc)?;
                let a = a.convert(s, DType::F32, Layout::Nchw)?;
                let b = b.convert(s, DType::F32, Layout::Nchw)?;
                let y = a.add(s, b)?;
                let upstream = s.input("upstream", y.shape(), &g)?;
                let grads = s.backward_from(y, upstream)?;
                let gw = s.param_grad(&grads, &p).expect("the weight has a gradient");
                let mut out = vec![0.0; n];
                s.read(gw, &mut out)?;
                Ok(out)
            })
            .unwrap()
    };
    let (ahead, made_at_use) = (grad(true), grad(false));
    let twice: Vec<f32> = g.iter().map(|v| 2.0 * v).collect();
    assert_eq!(ahead, twice);
    assert_eq!(made_at_use, twice);
}

/// With gradients off a parameter asked for twice is two tensors over one
/// buffer: the copy made ahead is still the one both take.
#[test]
fn without_gradients_the_copy_made_ahead_is_found_by_its_memory() {
    let (mut engine, params) = weights();
    let p = params[0];
    engine
        .step(|s| {
            s.set_grad_enabled(false);
            s.convert_weights(&params, DType::Bf16, Layout::Nhwc)?;
            let (w1, w2) = (s.param(&p), s.param(&p));
            let y1 = w1.convert(s, DType::Bf16, Layout::Nhwc)?;
            let y2 = w2.convert(s, DType::Bf16, Layout::Nhwc)?;
            assert_eq!(y1.buf(), y2.buf());
            assert!(!y1.requires_grad());
            Ok(())
        })
        .unwrap();
}
