//! `exp`, `sigmoid` and `tanh` over 8-lane vectors ([`V8`]), for the
//! kernels whose time is their transcendentals (an LSTM cell: three
//! sigmoids and two `tanh` a unit forward, one `tanh` backward). Written
//! without branches or calls so that, inside a [`super::simd::vectorized`]
//! body, each is a few dozen ymm instructions for 8 units; the C library's
//! `expf` is a call per element and the scalar `tanh` (`ops::math`) sums in
//! f64 behind two branches, and between them they were half of a
//! one-thread character LSTM's step.
//!
//! Accuracy, each checked by a sweep in the tests below, with and without
//! fused multiply-adds: `exp` within 2 ulp (Cephes' `expf`: a degree-6
//! polynomial on `[−ln2/2, ln2/2]` scaled by `2ⁿ`), `sigmoid` within
//! 3e-7 absolute, `tanh` within 6e-7 absolute (Eigen's 13/6 rational, as
//! the scalar `tanh` is, summed here in f32).

use super::simd::{madd, LANES, V8};

/// Past these `exp` would leave f32's normal range (`2ⁿ` is built from
/// the exponent bits, so `n` must stay within −126..=127); inputs are
/// clamped to them, so `exp` of a larger input is `exp(88)`, 1.65e38, and
/// of a smaller one `exp(−87)`, 1.6e−38, which a sigmoid or a softmax
/// reads as infinite and zero.
const EXP_HI: f32 = 88.0;
const EXP_LO: f32 = -87.0;

// Each function below is written a stage at a time, every stage an index
// loop over the 8 lanes: LLVM turns each into one ymm instruction. Written
// as one closure per lane around the whole body it
// vectorised some stages 4 wide and left others scalar, through the stack.

/// `eˣ` lane by lane, within 2 ulp on [−87, 88].
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub fn exp<const FMA: bool>(x: &V8) -> V8 {
    // 1.5·2²³: adding it rounds to an integer, left in the low mantissa bits.
    const ROUND: f32 = 12_582_912.0;
    const LN2_HI: f32 = 0.693_359_4;
    const LN2_LO: f32 = -2.121_944_4e-4;
    const P: [f32; 6] = [
        1.987_569_1e-4,
        1.398_199_9e-3,
        8.333_452e-3,
        4.166_579_6e-2,
        1.666_666_5e-1,
        5e-1,
    ];
    let (mut shifted, mut r) = ([0.0; LANES], [0.0; LANES]);
    for k in 0..LANES {
        let x = x[k].clamp(EXP_LO, EXP_HI);
        shifted[k] = madd::<FMA>(x, std::f32::consts::LOG2_E, ROUND);
        let n = shifted[k] - ROUND;
        r[k] = madd::<FMA>(n, -LN2_LO, madd::<FMA>(n, -LN2_HI, x));
    }
    let mut p = [P[0]; LANES];
    for c in &P[1..] {
        for k in 0..LANES {
            p[k] = madd::<FMA>(p[k], r[k], *c);
        }
    }
    let mut out = [0.0; LANES];
    for k in 0..LANES {
        let y = madd::<FMA>(p[k], r[k] * r[k], r[k]) + 1.0;
        // n's bits sit at the bottom of `shifted`'s mantissa, offset by
        // ROUND's; |n| ≤ 127 by the clamp, so 2ⁿ's exponent field is n + 127.
        let n = shifted[k].to_bits().wrapping_sub(ROUND.to_bits()) as i32;
        out[k] = y * f32::from_bits(((n + 127) as u32) << 23);
    }
    out
}

/// `1 / (1 + e^−x)` lane by lane, as the GPU kernels compute it.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub fn sigmoid<const FMA: bool>(x: &V8) -> V8 {
    let mut neg = [0.0; LANES];
    for k in 0..LANES {
        neg[k] = -x[k];
    }
    let mut e = exp::<FMA>(&neg);
    for k in 0..LANES {
        e[k] = 1.0 / (1.0 + e[k]);
    }
    e
}

/// `tanh(x)` lane by lane: the scalar [`crate::ops::math::tanh`]'s
/// rational, summed in f32.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub fn tanh<const FMA: bool>(x: &V8) -> V8 {
    // Below this tanh(x) rounds to x; past CLAMP it is within an ulp of ±1.
    const LINEAR: f32 = 0.0004;
    const CLAMP: f32 = 7.905_311;
    const A: [f32; 7] = [
        -2.760_768_5e-16,
        2.000_188e-13,
        -8.604_672e-11,
        5.122_297e-8,
        1.485_722_4e-5,
        6.372_619_3e-4,
        4.893_524_6e-3,
    ];
    const B: [f32; 4] = [1.198_258_4e-6, 1.185_347e-4, 2.268_434_6e-3, 4.893_525e-3];
    let (mut c, mut x2) = ([0.0; LANES], [0.0; LANES]);
    for k in 0..LANES {
        c[k] = x[k].clamp(-CLAMP, CLAMP);
        x2[k] = c[k] * c[k];
    }
    let (mut p, mut q) = ([A[0]; LANES], [B[0]; LANES]);
    for a in &A[1..] {
        for k in 0..LANES {
            p[k] = madd::<FMA>(p[k], x2[k], *a);
        }
    }
    for b in &B[1..] {
        for k in 0..LANES {
            q[k] = madd::<FMA>(q[k], x2[k], *b);
        }
    }
    let mut out = [0.0; LANES];
    for k in 0..LANES {
        out[k] = c[k] * p[k] / q[k];
    }
    // The near-zero lanes chosen by a bit mask (one blend), not by `if`:
    // LLVM sank the division into the `if`'s branch, a branch per lane, and
    // the whole function ran lane by lane (the LSTM cell's forward over
    // [20, 4·50] took 8.1 µs; 4.0 with the mask).
    for k in 0..LANES {
        let mask = ((x[k].abs() < LINEAR) as u32).wrapping_neg();
        out[k] = f32::from_bits((x[k].to_bits() & mask) | (out[k].to_bits() & !mask));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::cpu::simd::{vectorized, Vectorized};

    /// The largest error of `f` against `exact` over `xs`, both ways of
    /// multiply-adding: `(error, at)`, absolute or in ulp.
    struct Sweep<'a> {
        xs: &'a [f32],
        f: fn(&V8, bool) -> V8,
        exact: fn(f64) -> f64,
        ulps: bool,
    }

    impl Sweep<'_> {
        fn worst(&self, fma: bool) -> (f64, f32) {
            let mut worst = (0.0f64, 0.0f32);
            for chunk in self.xs.chunks(LANES) {
                let mut v = [0.0; LANES];
                v[..chunk.len()].copy_from_slice(chunk);
                let got = (self.f)(&v, fma);
                for (&x, &y) in chunk.iter().zip(&got) {
                    let want = (self.exact)(x as f64);
                    let err = if self.ulps {
                        let ulp = (want as f32).abs().max(f32::MIN_POSITIVE) * f32::EPSILON;
                        (y as f64 - want).abs() / ulp as f64
                    } else {
                        (y as f64 - want).abs()
                    };
                    if err > worst.0 || err.is_nan() {
                        worst = (err, x);
                    }
                }
            }
            worst
        }
    }

    fn wide(from: f32, to: f32, step: f32) -> Vec<f32> {
        let n = ((to - from) / step) as usize;
        (0..=n).map(|i| from + i as f32 * step).collect()
    }

    fn both(sweep: &Sweep<'_>, bound: f64, what: &str) {
        for fma in [false, true] {
            let (err, at) = sweep.worst(fma);
            assert!(err <= bound, "{what} (fma {fma}) at {at}: {err} off, allowed {bound}");
        }
    }

    #[test]
    fn exp_is_within_two_ulp_over_its_range() {
        let xs = wide(-87.0, 88.0, 1.7e-3);
        let f: fn(&V8, bool) -> V8 = |v, fma| if fma { exp::<true>(v) } else { exp::<false>(v) };
        both(
            &Sweep {
                xs: &xs,
                f,
                exact: f64::exp,
                ulps: true,
            },
            2.0,
            "exp",
        );
    }

    #[test]
    fn exp_clamps_rather_than_overflowing() {
        let v = [1e4, -1e4, 89.0, -100.0, f32::MAX, f32::MIN, 0.0, 1.0];
        let got = exp::<false>(&v);
        assert!(got.iter().all(|y| y.is_finite() && *y >= 0.0), "{got:?}");
        assert_eq!(got[6], 1.0);
        assert!((got[7] - std::f32::consts::E).abs() <= f32::EPSILON * 3.0);
    }

    #[test]
    fn sigmoid_is_within_three_tenths_of_a_millionth() {
        let xs = wide(-120.0, 120.0, 1.3e-3);
        let f: fn(&V8, bool) -> V8 = |v, fma| if fma { sigmoid::<true>(v) } else { sigmoid::<false>(v) };
        let exact: fn(f64) -> f64 = |x| 1.0 / (1.0 + (-x).exp());
        both(
            &Sweep {
                xs: &xs,
                f,
                exact,
                ulps: false,
            },
            3e-7,
            "sigmoid",
        );
    }

    #[test]
    fn tanh_is_within_six_tenths_of_a_millionth_and_exact_near_zero() {
        let mut xs = wide(-12.0, 12.0, 1e-4);
        xs.extend((-2000..=2000).map(|i| i as f32 * 1e-6));
        xs.extend([f32::MIN_POSITIVE, -0.0, 1e30, -1e30]);
        let f: fn(&V8, bool) -> V8 = |v, fma| if fma { tanh::<true>(v) } else { tanh::<false>(v) };
        both(
            &Sweep {
                xs: &xs,
                f,
                exact: f64::tanh,
                ulps: false,
            },
            6e-7,
            "tanh",
        );
        let small = [1e-5f32, -3e-4, 0.0, -0.0, 1e-30, 2e-4, -1e-7, 3.9e-4];
        assert_eq!(tanh::<true>(&small), small, "tanh(x) is x where it rounds to x");
    }

    /// The vectorised copy computes what the portable one does (the sweeps
    /// above call the functions outside any `#[target_feature]` body).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn the_avx2_copy_agrees_with_the_portable_one() {
        struct Run<'a>(&'a [f32]);
        impl Vectorized for Run<'_> {
            type Output = Vec<f32>;
            #[inline(always)]
            fn run<const FMA: bool>(self) -> Vec<f32> {
                let mut out = Vec::new();
                for c in self.0.chunks_exact(LANES) {
                    let v: V8 = c.try_into().expect("a full vector");
                    out.extend(exp::<FMA>(&v));
                    out.extend(sigmoid::<FMA>(&v));
                    out.extend(tanh::<FMA>(&v));
                }
                out
            }
        }
        let xs = wide(-20.0, 20.0, 0.01);
        let xs = &xs[..xs.len() / LANES * LANES];
        let fast = vectorized(Run(xs));
        let fma = crate::backend::cpu::simd::has_avx2_fma();
        let portable = if fma {
            Run(xs).run::<true>()
        } else {
            Run(xs).run::<false>()
        };
        assert_eq!(fast, portable);
    }
}
