use crate::memory::{bf16, DType};
use crate::tensor::{Layout, Shape};

fn engine() -> crate::Engine {
    crate::Engine::new(crate::Device::cpu(1).unwrap(), 1 << 16).unwrap()
}

/// fp32 to bf16 rounds to nearest even, as the `half` crate (and PyTorch)
/// rounds: ties go to the even mantissa, a NaN stays a NaN, infinities and
/// the largest values carry over; bf16 back to fp32 is exact.
#[test]
fn a_cast_to_bf16_rounds_to_nearest_even_and_back_is_exact() {
    let one_ulp = 2f32.powi(-7);
    let values = [
        1.0,
        1.0 + one_ulp / 2.0,        // a tie: stays at the even 1.0
        1.0 + 1.5 * one_ulp,        // a tie: goes up to the even 1 + 2 ulp
        1.0 + one_ulp / 2.0 + 1e-6, // past the tie: up
        -2.7182817,
        1e-40, // subnormal
        f32::MAX,
        f32::INFINITY,
        f32::NEG_INFINITY,
        f32::NAN,
        -0.0,
        65504.0,
    ];
    let shape = Shape::new(&[values.len()]);
    let out = engine()
        .step(|s| {
            let x = s.input("x", shape, &values)?;
            let y = x.cast(s, DType::Bf16)?;
            assert_eq!(y.dtype(), DType::Bf16);
            let mut out = vec![0.0; values.len()];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .unwrap();
    for (&v, &o) in values.iter().zip(&out) {
        let want = bf16::from_f32(v).to_f32();
        assert!(
            want.to_bits() == o.to_bits() || (want.is_nan() && o.is_nan()),
            "{v:e} cast to bf16 reads {o:e}, not {want:e}"
        );
    }
    assert_eq!(out[1], 1.0, "a tie rounds to the even mantissa");
    assert_eq!(out[2], 1.0 + 2.0 * one_ulp, "a tie rounds to the even mantissa");
    assert_eq!(out[3], 1.0 + one_ulp);
}

/// Backward casts the gradient back: through fp32 → bf16 → fp32 the input's
/// gradient is the upstream one rounded to bf16 (what a mixed-precision
/// weight's gradient goes through), and a cast to the type a tensor has is
/// the tensor itself.
#[test]
fn the_gradient_of_a_cast_is_the_upstream_gradient_cast_back() {
    let shape = Shape::new(&[5]);
    let gy = [0.1f32, -2.7182817, 1.0 + 2f32.powi(-8), 3e-3, 1234.567];
    let (gx, same) = engine()
        .step(|s| {
            let x = s.variable("x", shape, &[1.0, 2.0, 3.0, 4.0, 5.0])?;
            let same = x.cast(s, DType::F32)?;
            let h = x.cast(s, DType::Bf16)?;
            let y = h.cast(s, DType::F32)?;
            let g = s.input("upstream", shape, &gy)?;
            let grads = s.backward_from(y, g)?;
            let gx = s.grad(&grads, x).expect("x has a gradient");
            let mut out = [0.0; 5];
            s.read(gx, &mut out)?;
            Ok((out, same.inner.id == x.inner.id))
        })
        .unwrap();
    assert!(same, "a cast to a tensor's own type makes no new tensor");
    for (g, o) in gy.iter().zip(gx) {
        assert_eq!(o, bf16::from_f32(*g).to_f32(), "upstream {g}");
    }
    assert_ne!(gx[2], gy[2], "the gradient did pass through bf16");
}

/// Channels last lays element (n, c, p) at `(n·HW + p)·C + c`: checked on
/// the raw bytes of a bf16 channels-last copy, and a read gives the values
/// back in NCHW order.
#[test]
fn a_channels_last_copy_lays_channels_innermost() {
    let shape = Shape::new(&[2, 3, 2, 2]);
    let x: Vec<f32> = (0..24).map(|v| v as f32).collect();
    let (raw, read) = engine()
        .step(|s| {
            let t = s.input("x", shape, &x)?;
            let y = t.convert(s, DType::Bf16, Layout::Nhwc)?;
            assert_eq!((y.dtype(), y.layout()), (DType::Bf16, Layout::Nhwc));
            let crate::memory::FloatBuf::Bf16(buf) = y.buf() else {
                unreachable!("a bf16 copy")
            };
            let mut raw = vec![bf16::ZERO; 24];
            s.uses(&[buf.into()]).download(buf, &mut raw)?;
            let mut read = vec![0.0; 24];
            s.read(y, &mut read)?;
            Ok((raw, read))
        })
        .unwrap();
    let (c, hw) = (3, 4);
    for n in 0..2 {
        for ch in 0..c {
            for p in 0..hw {
                assert_eq!(
                    raw[(n * hw + p) * c + ch].to_f32(),
                    x[(n * c + ch) * hw + p],
                    "n {n} c {ch} p {p}"
                );
            }
        }
    }
    assert_eq!(read, x, "a read gives NCHW order whatever the layout");
}

/// A gradient passes back through a layout change to the input's layout,
/// and a reshape of a channels-last tensor reshapes its NCHW values.
#[test]
fn gradients_return_through_a_layout_change_and_a_reshape_sees_nchw_order() {
    let shape = Shape::new(&[2, 3, 1, 2]);
    let x: Vec<f32> = (0..12).map(|v| v as f32 * 0.5).collect();
    let gy: Vec<f32> = (0..12).map(|v| 1.0 + v as f32).collect();
    let (flat, gx) = engine()
        .step(|s| {
            let t = s.variable("x", shape, &x)?;
            let h = t.to_layout(s, Layout::Nhwc)?;
            let y = h.flatten(s)?;
            assert_eq!(y.layout(), Layout::Nchw);
            let g = s.input("upstream", y.shape(), &gy)?;
            let grads = s.backward_from(y, g)?;
            let gx = s.grad(&grads, t).expect("x has a gradient");
            let (mut flat, mut out) = (vec![0.0; 12], vec![0.0; 12]);
            s.read(y, &mut flat)?;
            s.read(gx, &mut out)?;
            Ok((flat, out))
        })
        .unwrap();
    assert_eq!(flat, x, "flatten reads the values in NCHW order");
    assert_eq!(gx, gy, "the gradient is the upstream one, back in NCHW");
}
