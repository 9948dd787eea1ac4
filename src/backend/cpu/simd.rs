//! Vector code in safe Rust. A kernel body is written once over 8-lane
//! arrays ([`V8`]) and a multiply-add that fuses or not by a const parameter;
//! [`vectorized`] runs it compiled for AVX2+FMA when the CPU has both (LLVM
//! turns each 8-lane array loop into one ymm instruction), else compiled for
//! the baseline target.

/// Lanes of one vector: a ymm register of `f32`.
pub const LANES: usize = 8;

/// One vector, as kernels hold it.
pub type V8 = [f32; LANES];

/// A kernel body for [`vectorized`].
pub trait Vectorized {
    type Output;
    /// Runs the body; `FMA` says whether [`madd`] may fuse. Implementations
    /// must be `#[inline(always)]`, and so must what they call in their inner
    /// loops, so that the body is compiled inside the AVX2+FMA copy.
    fn run<const FMA: bool>(self) -> Self::Output;
}

/// Whether this CPU has AVX2 and FMA; asked once, then one atomic load
/// (`OnceLock` neither allocates nor locks after the first call). Every
/// AVX2+FMA kernel copy of the CPU backend is chosen by this one answer.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
pub fn has_avx2_fma() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| std::arch::is_x86_feature_detected!("avx2") && std::arch::is_x86_feature_detected!("fma"))
}

/// Runs `kernel` compiled for the best instruction set this CPU has.
#[inline]
pub fn vectorized<K: Vectorized>(kernel: K) -> K::Output {
    #[cfg(target_arch = "x86_64")]
    if has_avx2_fma() {
        // SAFETY: `avx2_fma` requires only that the CPU supports AVX2 and FMA,
        // which the run-time detection above has just confirmed.
        return unsafe { avx2_fma(kernel) };
    }
    kernel.run::<{ cfg!(target_feature = "fma") }>()
}

/// `kernel` compiled with AVX2 and FMA enabled.
///
/// # Safety
/// The CPU must support AVX2 and FMA. (An `unsafe fn` rather than a safe
/// `#[target_feature]` one, which needs Rust 1.86; the crate supports 1.80.)
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn avx2_fma<K: Vectorized>(kernel: K) -> K::Output {
    kernel.run::<true>()
}

/// `a * b + c`: one rounding where `FMA` (one instruction in the AVX2+FMA
/// copy), two otherwise (`mul_add` without hardware FMA is a slow libm call).
#[inline(always)]
pub fn madd<const FMA: bool>(a: f32, b: f32, c: f32) -> f32 {
    if FMA {
        a.mul_add(b, c)
    } else {
        a * b + c
    }
}

/// `acc += a · b` for a scalar `a`, lane by lane.
#[inline(always)]
pub fn fma_scalar<const FMA: bool>(acc: &mut V8, a: f32, b: &V8) {
    for (acc, b) in acc.iter_mut().zip(b) {
        *acc = madd::<FMA>(a, *b, *acc);
    }
}

/// `acc += a · b`, lane by lane.
#[inline(always)]
pub fn fma_vector<const FMA: bool>(acc: &mut V8, a: &V8, b: &V8) {
    for ((acc, a), b) in acc.iter_mut().zip(a).zip(b) {
        *acc = madd::<FMA>(*a, *b, *acc);
    }
}

/// The first [`LANES`] elements of `s`.
#[inline(always)]
pub fn load(s: &[f32]) -> V8 {
    *s.first_chunk::<LANES>().expect("a full vector")
}

/// The first `width` (≤ [`LANES`]) elements of `s`, the other lanes 0.
#[inline(always)]
pub fn load_partial(s: &[f32], width: usize) -> V8 {
    let mut v = [0.0; LANES];
    v[..width].copy_from_slice(&s[..width]);
    v
}

/// `dst[..width] += v[..width]`.
#[inline(always)]
pub fn add_to<const FULL: bool>(dst: &mut [f32], v: &V8, width: usize) {
    if FULL {
        let dst = dst.first_chunk_mut::<LANES>().expect("a full vector");
        for (d, v) in dst.iter_mut().zip(v) {
            *d += v;
        }
    } else {
        for (d, v) in dst[..width].iter_mut().zip(v) {
            *d += v;
        }
    }
}

/// The sum of the lanes, pairwise.
#[inline(always)]
pub fn hsum(v: &V8) -> f32 {
    let q = [v[0] + v[4], v[1] + v[5], v[2] + v[6], v[3] + v[7]];
    (q[0] + q[2]) + (q[1] + q[3])
}
