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

/// Whether this CPU has AVX-512F (asked once).
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
pub fn has_avx512f() -> bool {
    static HAS: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *HAS.get_or_init(|| std::arch::is_x86_feature_detected!("avx512f"))
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
/// `#[target_feature]` one, which needs Rust 1.86: written when the crate
/// supported 1.80.)
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

/// A [`Vectorized`] body over rows that can be cut in two between rows,
/// for [`vectorized_rows`].
pub trait Rows: Vectorized<Output = ()> + Send + Sized {
    /// The rows it covers.
    fn rows(&self) -> usize;
    /// The first `at` rows and the rest.
    fn split(self, at: usize) -> (Self, Self);
}

/// Runs `kernel` over its rows, halved among the pool's workers down to
/// tasks of at most `per_task` rows: no allocation, and a batch that one
/// task holds runs where it is called, without a hand-off.
pub fn vectorized_rows<K: Rows>(kernel: K, per_task: usize) {
    let rows = kernel.rows();
    if rows <= per_task.max(1) {
        return vectorized(kernel);
    }
    let (a, b) = kernel.split(rows / 2);
    rayon::join(|| vectorized_rows(a, per_task), || vectorized_rows(b, per_task));
}

/// Rows `..at` and `at..` of `s`, rows of `width`; `None` stays `None`.
pub fn split_rows(s: Option<&[f32]>, at: usize, width: usize) -> (Option<&[f32]>, Option<&[f32]>) {
    match s {
        Some(s) => {
            let (a, b) = s.split_at(at * width);
            (Some(a), Some(b))
        }
        None => (None, None),
    }
}

/// [`split_rows`] for a slice written to.
pub fn split_rows_mut(s: Option<&mut [f32]>, at: usize, width: usize) -> (Option<&mut [f32]>, Option<&mut [f32]>) {
    match s {
        Some(s) => {
            let (a, b) = s.split_at_mut(at * width);
            (Some(a), Some(b))
        }
        None => (None, None),
    }
}

/// A pointwise kernel's work on one row, a vector of elements at a time,
/// for [`over_row`]: `compute` reads, `store` writes.
pub trait RowUnits {
    /// What one vector of elements computes.
    type Out;
    /// The elements at `l`, from the row's inputs.
    fn compute<const FMA: bool>(&self, l: Lanes) -> Self::Out;
    /// `out` into the row's outputs at `l`.
    fn store(&mut self, l: Lanes, out: &Self::Out);
}

/// Runs `row` over its `len` elements in full vectors. A row whose length
/// is not a multiple of [`LANES`] ends with a full vector shifted left to
/// end at `len`, overlapping the one before it: computed first, from inputs
/// no store has touched yet (a kernel may write over what it reads), and
/// stored last, with the same values the overlapped elements got. A partial
/// vector, assembled element by element, cost a store-forwarding stall per
/// load. Rows shorter than a vector take partial ones.
#[inline(always)]
pub fn over_row<const FMA: bool, R: RowUnits>(row: &mut R, len: usize) {
    if len < LANES {
        for l in Lanes::of(len) {
            let out = row.compute::<FMA>(l);
            row.store(l, &out);
        }
        return;
    }
    let full = len - len % LANES;
    let tail = (full < len).then_some(Lanes {
        j0: len - LANES,
        width: LANES,
    });
    let early = tail.map(|l| row.compute::<FMA>(l));
    for j0 in (0..full).step_by(LANES) {
        let l = Lanes { j0, width: LANES };
        let out = row.compute::<FMA>(l);
        row.store(l, &out);
    }
    if let (Some(l), Some(out)) = (tail, early) {
        row.store(l, &out);
    }
}

/// Up to [`LANES`] consecutive elements of a row, `j0..j0 + width`: what a
/// pointwise kernel over rows of any length steps through.
#[derive(Clone, Copy, Debug)]
pub struct Lanes {
    j0: usize,
    width: usize,
}

impl Lanes {
    /// A row of `len` elements, a vector at a time (the last partial).
    pub fn of(len: usize) -> impl Iterator<Item = Lanes> {
        (0..len).step_by(LANES).map(move |j0| Lanes {
            j0,
            width: (len - j0).min(LANES),
        })
    }

    /// These elements of `row` (the lanes past a partial vector's 0).
    #[inline(always)]
    pub fn load(self, row: &[f32]) -> V8 {
        if self.width == LANES {
            load(&row[self.j0..])
        } else {
            // Element by element under a test: a copy of a run-time length
            // (`load_partial`'s) becomes a call to `memcpy`, one per gate
            // per row of a hidden size that is not a multiple of 8.
            let part = &row[self.j0..][..self.width];
            let mut v = [0.0; LANES];
            for (k, v) in v.iter_mut().enumerate() {
                if k < part.len() {
                    *v = part[k];
                }
            }
            v
        }
    }

    /// [`Lanes::load`], or zeros where the row is absent.
    #[inline(always)]
    pub fn load_or_zero(self, row: Option<&[f32]>) -> V8 {
        match row {
            Some(r) => self.load(r),
            None => [0.0; LANES],
        }
    }

    /// `v`'s lanes into these elements of `row`.
    #[inline(always)]
    pub fn store(self, row: &mut [f32], v: &V8) {
        if self.width == LANES {
            *row[self.j0..].first_chunk_mut::<LANES>().expect("a full vector") = *v;
        } else {
            let part = &mut row[self.j0..][..self.width];
            for (k, v) in v.iter().enumerate() {
                if k < part.len() {
                    part[k] = *v;
                }
            }
        }
    }
}
