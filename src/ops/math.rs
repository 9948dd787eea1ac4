//! The CPU kernels' `tanh`: a rational function rather than the C
//! library's `tanhf`, which goes through `expm1f` and was 50% of a
//! character LSTM's step on one thread (Lantern's configuration: two `tanh`
//! a unit in forward, one in backward). The rational is a dozen
//! multiply-adds and a division, inlined into the kernels' loops.
//!
//! It is Eigen's `ptanh_float` (a 13/6 minimax rational in `x`, ±1 past
//! ±7.905, within an ulp of `tanh` there): at most 3e-7 from the exact
//! `tanh` anywhere (the unit test sweeps it), against the GPU's `tanhf`'s
//! 2 ulp. Both devices' results stay within the tolerances the
//! GPU-against-CPU tests hold them to.

/// Below this `tanh(x)` rounds to `x` in f32 (the cubic term is under half
/// an ulp), and the rational would lose that last bit.
const LINEAR: f32 = 0.0004;
/// Past this the rational stops at 0.9999999, one ulp below 1, and `tanh`
/// is within that ulp of 1 (it rounds to 1 from 9.01 on): ±1 here.
const CLAMP: f32 = 7.905_311;

/// `tanh(x)` within 3e-7. The polynomials are summed in f64: in f32
/// without fused multiply-adds (this build targets CPUs that may lack
/// them, and a called `fmaf` is slower than `tanhf`) they lose another
/// 2e-7; f64's multiplies and adds cost a scalar loop the same.
#[inline]
pub(crate) fn tanh(x: f32) -> f32 {
    const A: [f64; 7] = [
        4.893_524_558_917_86e-3,
        6.372_619_288_754_36e-4,
        1.485_722_357_179_79e-5,
        5.122_297_090_371_14e-8,
        -8.604_671_522_137_35e-11,
        2.000_187_904_824_77e-13,
        -2.760_768_477_423_55e-16,
    ];
    const B: [f64; 4] = [
        4.893_525_185_543_85e-3,
        2.268_434_632_439e-3,
        1.185_347_056_866_54e-4,
        1.198_258_394_667_02e-6,
    ];
    if x.abs() < LINEAR {
        return x;
    }
    if x.abs() >= CLAMP {
        return 1.0f32.copysign(x);
    }
    let x = x as f64;
    let x2 = x * x;
    let mut p = A[6];
    for a in A[..6].iter().rev() {
        p = p * x2 + a;
    }
    let mut q = B[3];
    for b in B[..3].iter().rev() {
        q = q * x2 + b;
    }
    (x * p / q) as f32
}

#[cfg(test)]
mod tests {
    /// Every 1e-5 from −12 to 12, and finely near 0, against f64's `tanh`.
    #[test]
    fn tanh_is_within_three_tenths_of_a_millionth_everywhere() {
        let near_zero = (-2000..=2000).map(|i| i as f32 * 1e-6);
        let wide = (-1_200_000..=1_200_000).map(|i| i as f32 * 1e-5);
        let mut worst = (0.0f64, 0.0f32);
        for x in near_zero.chain(wide).chain([f32::MIN_POSITIVE, -0.0, 1e30, -1e30]) {
            let err = (super::tanh(x) as f64 - (x as f64).tanh()).abs();
            if err > worst.0 {
                worst = (err, x);
            }
        }
        assert!(worst.0 <= 3e-7, "tanh({}) is {} off", worst.1, worst.0);
    }

    #[test]
    fn tanh_is_odd_and_exact_at_its_ends() {
        for x in [1e-3f32, 0.3, 1.0, 2.5, 7.0] {
            assert_eq!(super::tanh(-x), -super::tanh(x), "{x}");
        }
        assert_eq!(super::tanh(0.0), 0.0);
        assert_eq!(super::tanh(100.0), 1.0);
        assert_eq!(super::tanh(-100.0), -1.0);
        assert!(super::tanh(f32::NAN).is_nan());
    }
}
