//! An allocation-free single-precision matrix product for the small shapes of
//! our models.
//!
//! The `gemm` crate allocates packing buffers on every call, which breaks the
//! rule that a training step after the first allocates nothing. Our products
//! are small (a conv layer on one image, a linear layer on one batch), so
//! packing buys little anyway: these kernels read the operands in place,
//! keep a register tile of `C` in local arrays and let LLVM vectorise it.
//! (The one exception, `gemm_nt` with a short k, copies a slice of B into a
//! stack buffer; see `nt_packed`.)
//!
//! Two entry points cover every product the ops make:
//! - [`gemm_nn`]: `C (+)= A · B`, A with any strides, B row-major.
//! - [`gemm_nt`]: `C (+)= A · Bᵀ`, A and B row-major (dot products of rows).
//!
//! and each has a form whose B is a convolution's patch matrix read in
//! place from a padded image ([`Patches`]: [`gemm_nn_patches`],
//! [`gemm_nt_patches`]), the same kernels with B's rows found where the
//! kernel's taps put them.
//!
//! Each kernel body is written once, generic over the tile size and over the
//! multiply-add, and instantiated for each instruction set: a portable copy
//! for the baseline target (SSE2 on x86-64) and, on x86, an AVX2+FMA copy
//! and an AVX-512 copy of the nn tiles, the best the CPU has chosen at run
//! time. Packing a panel of Bᵀ (`gemm_nt`) is the one hand-written SIMD:
//! 8×8 transposes in AVX2 registers. Bounds are asserted up front; the
//! loops then use safe indexing whose checks are either removed by LLVM or
//! cheap, well-predicted branches.

/// The multiply-add of a kernel copy: fused where the CPU has an FMA unit,
/// separate elsewhere, because `f32::mul_add` without hardware FMA is a slow
/// call into libm.
trait MulAdd {
    fn mul_add(a: f32, b: f32, c: f32) -> f32;
}

/// `a * b + c` rounded once; a single instruction inside the AVX2+FMA copy.
#[allow(dead_code)] // unused on targets without an FMA copy
struct Fused;

impl MulAdd for Fused {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a.mul_add(b, c)
    }
}

/// `a * b + c` rounded twice; what SSE2 can do in vector registers.
#[allow(dead_code)] // unused on targets whose baseline has FMA
struct Separate;

impl MulAdd for Separate {
    #[inline(always)]
    fn mul_add(a: f32, b: f32, c: f32) -> f32 {
        a * b + c
    }
}

/// The multiply-add of the portable copy: fused only where the compile-time
/// target guarantees hardware FMA (aarch64, or x86 built with `+fma`).
#[cfg(any(target_arch = "aarch64", target_feature = "fma"))]
type PortableMulAdd = Fused;
#[cfg(not(any(target_arch = "aarch64", target_feature = "fma")))]
type PortableMulAdd = Separate;

// --------------------------------------------------------------------------
// Public API
// --------------------------------------------------------------------------

/// `C (+)= A · B`.
///
/// - `C` is row-major `m × n` with row stride `n` (the first `m·n` elements
///   of `c`).
/// - `A` is `m × k`: element `(i, p)` is `a[i·a_rs + p·a_cs]`. Any strides
///   work; `a_rs == 1` (a transposed row-major matrix) and `a_cs == 1`
///   (row-major) are the fast ones.
/// - `B` is `k × n` row-major: element `(p, j)` is `b[p·ldb + j]`, with
///   `ldb >= n` (unless `k <= 1`, when the row stride is never used).
///
/// With `accumulate` the product is added to `C`; otherwise `C` is
/// overwritten (whatever it held, NaN included, is ignored).
///
/// Panics if an operand does not fit its slice: a shape bug in the caller.
#[allow(clippy::too_many_arguments)] // the BLAS shape: dims, then each operand with its strides
pub fn gemm_nn(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    a_rs: usize,
    a_cs: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    accumulate: bool,
) {
    let args = NnArgs {
        m,
        n,
        k,
        a,
        a_rs,
        a_cs,
        b,
        ldb,
        patches: None,
        c,
        accumulate,
    };
    args.check();
    nn_dispatch(args);
}

/// `C (+)= A · Bᵀ`: `C[i][j] = dot(A row i, B row j)`.
///
/// - `C` is row-major `m × n` with row stride `n`.
/// - `A` is `m × k` row-major with row stride `lda >= k`.
/// - `B` is `n × k` row-major with row stride `ldb >= k`.
///
/// With `accumulate` the product is added to `C`; otherwise `C` is
/// overwritten.
///
/// Panics if an operand does not fit its slice: a shape bug in the caller.
#[allow(clippy::too_many_arguments)] // the BLAS shape: dims, then each operand with its strides
pub fn gemm_nt(
    m: usize,
    n: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    ldb: usize,
    c: &mut [f32],
    accumulate: bool,
) {
    let args = NtArgs {
        m,
        n,
        k,
        a,
        lda,
        b,
        ldb,
        patches: None,
        c,
        accumulate,
    };
    args.check();
    nt_dispatch(args);
}

/// The rows of a convolution's patch matrix, read in place from a padded
/// image rather than written out: row `(c, i, j)` (channel, kernel row,
/// kernel column, in that order) starts at `c·plane + i·row + j`, and its
/// entry `q` is the pixel `q` places on. Over an image padded so that every
/// patch lies inside it, with output pixel `q = oy·row + ox`, entry `q` of
/// row `(c, i, j)` is pixel `(oy + i, ox + j)` of channel `c`; the entries
/// at `ox` past the output's width are pixels of the next row, computed
/// and thrown away by the caller.
#[derive(Clone, Copy, Debug)]
pub struct Patches {
    /// Channels of the image.
    pub channels: usize,
    /// Kernel rows.
    pub kh: usize,
    /// Kernel columns.
    pub kw: usize,
    /// Elements between consecutive rows of a plane.
    pub row: usize,
    /// Elements between consecutive channels.
    pub plane: usize,
}

impl Patches {
    /// Rows of the patch matrix: `channels · kh · kw`.
    pub fn rows(&self) -> usize {
        self.channels * self.kh * self.kw
    }

    /// Panics unless `rows` is [`Patches::rows`] and each of them holds
    /// `entries` elements inside `b_len`: rows start in order (a kernel
    /// row fits an image row, the kernel an image plane), so the last row
    /// is the one that reaches furthest.
    fn check(&self, what: &str, rows: usize, entries: usize, b_len: usize) {
        assert_eq!(
            rows,
            self.rows(),
            "{what}: {rows} rows of B but {self:?} has {}",
            self.rows()
        );
        assert!(
            self.kh * self.kw <= MAX_TAPS,
            "{what}: {self:?} has more than {MAX_TAPS} taps"
        );
        assert!(
            self.kw <= self.row && self.kh.saturating_sub(1) * self.row + self.kw <= self.plane,
            "{what}: {self:?} does not fit a kernel in an image plane"
        );
        if rows > 0 && entries > 0 {
            let end = self.start(rows - 1).checked_add(entries);
            assert!(
                end.is_some_and(|end| end <= b_len),
                "{what}: B's patch rows ({self:?}, {entries} entries each) reach past its {b_len} elements"
            );
        }
    }

    /// Where row `r` starts.
    fn start(&self, r: usize) -> usize {
        let taps = self.kh * self.kw;
        let (c, t) = (r / taps, r % taps);
        c * self.plane + t / self.kw * self.row + t % self.kw
    }
}

/// `C (+)= A · B` with B the patch matrix `patches` over `b` (its
/// `patches.rows()` rows, `n` entries each, read in place): the forward
/// convolution without an explicit patch matrix.
///
/// - `C` is row-major `m × n`.
/// - `A` is `m × patches.rows()` row-major with row stride `lda`.
///
/// Each element of C is the same chain of multiply-adds, in the same order,
/// as [`gemm_nn`] over the patch matrix written out, so the bits agree.
///
/// Panics if an operand does not fit its slice: a shape bug in the caller.
#[allow(clippy::too_many_arguments)] // the BLAS shape, B given by its patch rows
pub fn gemm_nn_patches(
    m: usize,
    n: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    patches: Patches,
    c: &mut [f32],
    accumulate: bool,
) {
    let args = NnArgs {
        m,
        n,
        k: patches.rows(),
        a,
        a_rs: lda,
        a_cs: 1,
        b,
        ldb: 0,
        patches: Some(patches),
        c,
        accumulate,
    };
    args.check();
    nn_dispatch(args);
}

/// `C (+)= A · Bᵀ` with B the patch matrix `patches` over `b` (its
/// `patches.rows()` rows of `k` entries, read in place): a convolution's
/// weight gradient without an explicit patch matrix.
///
/// - `C` is row-major `m × patches.rows()`.
/// - `A` is `m × k` row-major with row stride `lda >= k`.
///
/// Panics if an operand does not fit its slice: a shape bug in the caller.
#[allow(clippy::too_many_arguments)] // the BLAS shape, B given by its patch rows
pub fn gemm_nt_patches(
    m: usize,
    k: usize,
    a: &[f32],
    lda: usize,
    b: &[f32],
    patches: Patches,
    c: &mut [f32],
    accumulate: bool,
) {
    let args = NtArgs {
        m,
        n: patches.rows(),
        k,
        a,
        lda,
        b,
        ldb: 0,
        patches: Some(patches),
        c,
        accumulate,
    };
    args.check();
    nt_dispatch(args);
}

// --------------------------------------------------------------------------
// Arguments and their checks
// --------------------------------------------------------------------------

/// `base + (count - 1) · stride + tail`, the length a strided operand needs,
/// or a panic naming the operand if it overflows.
fn needed(what: &str, count: usize, stride: usize, tail: usize) -> usize {
    (count - 1)
        .checked_mul(stride)
        .and_then(|x| x.checked_add(tail))
        .unwrap_or_else(|| panic!("sgemm: {what} extent overflows usize"))
}

/// The arguments of [`gemm_nn`], bundled so that the generic driver and its
/// two compiled copies pass one value around.
struct NnArgs<'a> {
    m: usize,
    n: usize,
    k: usize,
    a: &'a [f32],
    a_rs: usize,
    a_cs: usize,
    b: &'a [f32],
    /// B's row stride; unused where `patches` gives B's rows.
    ldb: usize,
    patches: Option<Patches>,
    c: &'a mut [f32],
    accumulate: bool,
}

impl NnArgs<'_> {
    fn check(&self) {
        let &NnArgs {
            m,
            n,
            k,
            a_rs,
            a_cs,
            ldb,
            ..
        } = self;
        let cells = m
            .checked_mul(n)
            .unwrap_or_else(|| panic!("sgemm_nn: m·n overflows usize"));
        assert!(
            cells <= self.c.len(),
            "sgemm_nn: C is {m}×{n} = {cells} elements but its slice holds {}",
            self.c.len()
        );
        if m > 0 && k > 0 {
            let last = needed("A rows", m, a_rs, 0)
                .checked_add(needed("A columns", k, a_cs, 0))
                .unwrap_or_else(|| panic!("sgemm_nn: A extent overflows usize"));
            assert!(
                last < self.a.len(),
                "sgemm_nn: A ({m}×{k}, strides {a_rs}, {a_cs}) reaches element {last} but its slice holds {}",
                self.a.len()
            );
        }
        if let Some(patches) = self.patches {
            patches.check("sgemm_nn", k, n, self.b.len());
        } else if k > 0 && n > 0 {
            assert!(k == 1 || ldb >= n, "sgemm_nn: B row stride {ldb} < n = {n}");
            let len = needed("B", k, ldb, n);
            assert!(
                len <= self.b.len(),
                "sgemm_nn: B ({k}×{n}, row stride {ldb}) needs {len} elements but its slice holds {}",
                self.b.len()
            );
        }
    }
}

/// The arguments of [`gemm_nt`].
struct NtArgs<'a> {
    m: usize,
    n: usize,
    k: usize,
    a: &'a [f32],
    lda: usize,
    b: &'a [f32],
    /// B's row stride; unused where `patches` gives B's rows.
    ldb: usize,
    patches: Option<Patches>,
    c: &'a mut [f32],
    accumulate: bool,
}

/// Where the rows of B start: every `stride` elements, or at patch rows.
#[derive(Clone, Copy)]
struct BRows {
    stride: usize,
    patches: Option<Patches>,
}

impl BRows {
    #[inline(always)]
    fn start(&self, j: usize) -> usize {
        match self.patches {
            Some(p) => p.start(j),
            None => j * self.stride,
        }
    }
}

impl NtArgs<'_> {
    /// Where B's rows start.
    #[inline(always)]
    fn b_rows(&self) -> BRows {
        BRows {
            stride: self.ldb,
            patches: self.patches,
        }
    }

    fn check(&self) {
        let &NtArgs { m, n, k, lda, ldb, .. } = self;
        let cells = m
            .checked_mul(n)
            .unwrap_or_else(|| panic!("sgemm_nt: m·n overflows usize"));
        assert!(
            cells <= self.c.len(),
            "sgemm_nt: C is {m}×{n} = {cells} elements but its slice holds {}",
            self.c.len()
        );
        if m > 0 && k > 0 {
            assert!(m == 1 || lda >= k, "sgemm_nt: A row stride {lda} < k = {k}");
            let len = needed("A", m, lda, k);
            assert!(
                len <= self.a.len(),
                "sgemm_nt: A ({m}×{k}, row stride {lda}) needs {len} elements but its slice holds {}",
                self.a.len()
            );
        }
        if let Some(patches) = self.patches {
            patches.check("sgemm_nt", n, k, self.b.len());
        } else if n > 0 && k > 0 {
            assert!(n == 1 || ldb >= k, "sgemm_nt: B row stride {ldb} < k = {k}");
            let len = needed("B", n, ldb, k);
            assert!(
                len <= self.b.len(),
                "sgemm_nt: B ({n}×{k}, row stride {ldb}) needs {len} elements but its slice holds {}",
                self.b.len()
            );
        }
    }
}

// --------------------------------------------------------------------------
// The compiled copies and the dispatch between them
// --------------------------------------------------------------------------

/// One compiled copy of the kernels. The loops over tiles are ordinary
/// code; every nn tile (and every row of nt tiles) is one call into the
/// copy, and each (layout, tile size) is a small function of its own. Small
/// functions matter: inlined all together into one target-feature function,
/// the kernels grew so large that LLVM stopped unrolling them and kept the
/// tiles in memory.
trait Kernels: Copy {
    /// Computes and stores the R×C tile of `gemm_nn` at (i0, j0); see
    /// [`nn_tile`].
    fn nn_tile<const L: u8, const R: usize, const C: usize>(self, t: &mut NnArgs<'_>, i0: usize, j0: usize, cols: Cols);
    /// Rows of C per [`Kernels::nt_rows`] call.
    const NT_MR: usize;
    /// Computes and stores rows `i0..i0 + mr` of `gemm_nt`'s C,
    /// `mr <= NT_MR`; see [`nt_rows`].
    fn nt_rows(self, t: &mut NtArgs<'_>, i0: usize, mr: usize);
    /// [`pack_panel`], as fast as this copy can.
    #[inline(always)]
    fn pack_panel<const NR: usize>(self, panel: &mut [f32], b: &[f32], rows: BRows, cols: (usize, usize), p0: usize) {
        pack_panel::<NR>(panel, b, rows, cols, p0)
    }
}

/// The copy for the compile-time target: SSE2 on x86-64.
#[derive(Clone, Copy)]
struct Portable;

impl Kernels for Portable {
    #[inline(never)]
    fn nn_tile<const L: u8, const R: usize, const C: usize>(
        self,
        t: &mut NnArgs<'_>,
        i0: usize,
        j0: usize,
        cols: Cols,
    ) {
        nn_tile::<PortableMulAdd, L, R, C>(t, i0, j0, cols)
    }
    const NT_MR: usize = SSE_NT_MR;
    #[inline(never)]
    fn nt_rows(self, t: &mut NtArgs<'_>, i0: usize, mr: usize) {
        nt_rows::<PortableMulAdd, SSE_NT_MR, SSE_NT_NR, SSE_NT_W>(t, i0, mr)
    }
}

/// The AVX2+FMA copy. A value of this type is proof that the CPU has both
/// features: the private field means only [`Avx2Fma::detect`] makes one.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[derive(Clone, Copy)]
struct Avx2Fma {
    _detected: (),
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
impl Avx2Fma {
    /// Asks the CPU (once, for the whole backend).
    fn detect() -> Option<Self> {
        super::simd::has_avx2_fma().then_some(Self { _detected: () })
    }
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
impl Kernels for Avx2Fma {
    #[inline(always)]
    fn nn_tile<const L: u8, const R: usize, const C: usize>(
        self,
        t: &mut NnArgs<'_>,
        i0: usize,
        j0: usize,
        cols: Cols,
    ) {
        // SAFETY: `self` exists, so `detect` saw AVX2 and FMA on this CPU.
        unsafe { nn_tile_avx2_fma::<L, R, C>(t, i0, j0, cols) }
    }
    const NT_MR: usize = AVX_NT_MR;
    #[inline(always)]
    fn nt_rows(self, t: &mut NtArgs<'_>, i0: usize, mr: usize) {
        // SAFETY: `self` exists, so `detect` saw AVX2 and FMA on this CPU.
        unsafe { nt_rows_avx2_fma(t, i0, mr) }
    }
    #[inline(always)]
    fn pack_panel<const NR: usize>(self, panel: &mut [f32], b: &[f32], rows: BRows, cols: (usize, usize), p0: usize) {
        if NR.is_multiple_of(8) && cols.1 == NR {
            // SAFETY: `self` exists, so `detect` saw AVX2 and FMA on this CPU.
            unsafe { pack_panel_avx2::<NR>(panel, b, rows, cols.0, p0) }
        } else {
            pack_panel::<NR>(panel, b, rows, cols, p0)
        }
    }
}

/// [`nn_tile`] compiled for AVX2+FMA (`Fused` becomes `vfmadd`).
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[target_feature(enable = "avx2,fma")]
unsafe fn nn_tile_avx2_fma<const L: u8, const R: usize, const C: usize>(
    t: &mut NnArgs<'_>,
    i0: usize,
    j0: usize,
    cols: Cols,
) {
    nn_tile::<Fused, L, R, C>(t, i0, j0, cols)
}

/// [`nt_rows`] compiled for AVX2+FMA.
///
/// # Safety
/// The CPU must support AVX2 and FMA.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[target_feature(enable = "avx2,fma")]
unsafe fn nt_rows_avx2_fma(t: &mut NtArgs<'_>, i0: usize, mr: usize) {
    nt_rows::<Fused, AVX_NT_MR, AVX_NT_NR, AVX_NT_W>(t, i0, mr)
}

/// The AVX-512 copy of the nn tiles: twice the lanes and twice the
/// registers of AVX2, so a tile of `C` can be 8×32 (16 zmm registers) and a
/// step along k does twice the multiply-adds per load. Where the CPU has
/// two 512-bit FMA units (Intel's server cores) that is up to twice AVX2's
/// rate; AMD's Zen 4 splits each into two 256-bit halves, so there it is
/// about AVX2's. Each element of `C` is still one chain of fused
/// multiply-adds along k in order, and a packed panel has AVX2's width and
/// depth, so the results are AVX2's bit for bit;
/// the dot-product tiles (`gemm_nt` unpacked), whose partial sums would
/// change with the lane count, stay AVX2's. A value of this type is proof
/// that the CPU has AVX-512F, AVX2 and FMA.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[derive(Clone, Copy)]
struct Avx512 {
    avx2: Avx2Fma,
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
impl Avx512 {
    /// Asks the CPU (once, for the whole backend).
    fn detect() -> Option<Self> {
        let avx2 = Avx2Fma::detect()?;
        super::simd::has_avx512f().then_some(Self { avx2 })
    }
}

#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
impl Kernels for Avx512 {
    #[inline(always)]
    fn nn_tile<const L: u8, const R: usize, const C: usize>(
        self,
        t: &mut NnArgs<'_>,
        i0: usize,
        j0: usize,
        cols: Cols,
    ) {
        // SAFETY: `self` exists, so `detect` saw AVX-512F, AVX2 and FMA on
        // this CPU.
        unsafe { nn_tile_avx512::<L, R, C>(t, i0, j0, cols) }
    }
    const NT_MR: usize = AVX_NT_MR;
    #[inline(always)]
    fn nt_rows(self, t: &mut NtArgs<'_>, i0: usize, mr: usize) {
        self.avx2.nt_rows(t, i0, mr)
    }
    #[inline(always)]
    fn pack_panel<const NR: usize>(self, panel: &mut [f32], b: &[f32], rows: BRows, cols: (usize, usize), p0: usize) {
        self.avx2.pack_panel::<NR>(panel, b, rows, cols, p0)
    }
}

/// [`nn_tile`] compiled for AVX-512F (and FMA: `Fused` is `vfmadd` on zmm).
///
/// # Safety
/// The CPU must support AVX-512F, AVX2 and FMA.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn nn_tile_avx512<const L: u8, const R: usize, const C: usize>(
    t: &mut NnArgs<'_>,
    i0: usize,
    j0: usize,
    cols: Cols,
) {
    nn_tile::<Fused, L, R, C>(t, i0, j0, cols)
}

/// Tile shapes per copy. AVX2 has 16 ymm registers: a 6×16 tile of `C` is 12
/// of them, leaving two for a row of B and one for a broadcast of A. SSE2
/// has 16 xmm registers of half the width: 4×8 is 8 of them, and 4 rows
/// keep the row-remainder tiles (1..3 rows) few. AVX-512 has 32 zmm
/// registers of twice the width: 8×32 is 16 of them (more rows spilled).
/// `gemm_nt` holds MR×NR partial dot products, each one vector of W lanes:
/// 12 vectors, plus MR + NR loads per step along k. (The portable copy runs
/// its nt tile only for m < 4; see `nt_portable`.)
mod tiles {
    pub const AVX_NN_MR: usize = 6;
    pub const AVX_NN_NR: usize = 16;
    pub const AVX512_NN_MR: usize = 8;
    pub const AVX512_NN_NR: usize = 32;
    pub const AVX512_NN_MR_COLS: usize = 6;
    // A packed panel of 32 columns reads 32 rows of B at once, and at a
    // Tree-LSTM level's few rows the packing is most of the time: 16
    // columns ran 100×750×150 at 98 GFLOP/s against 90 (Zen 4).
    pub const AVX512_NT_PACKED_NR: usize = 16;
    pub const SSE_NN_MR: usize = 4;
    pub const SSE_NN_NR: usize = 8;
    pub const AVX_NT_MR: usize = 4;
    pub const AVX_NT_NR: usize = 3;
    pub const AVX_NT_W: usize = 8;
    pub const SSE_NT_MR: usize = 4;
    pub const SSE_NT_NR: usize = 3;
    pub const SSE_NT_W: usize = 4;

    // `with_rows!` instantiates ragged tiles of 1..=8 rows.
    const _: () = assert!(AVX512_NN_MR <= 8 && AVX_NN_MR <= 8 && SSE_NN_MR <= 8);
}
use tiles::*;

/// The best copy this CPU runs.
fn nn_dispatch(args: NnArgs<'_>) {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    if let Some(isa) = Avx512::detect() {
        return nn_driver::<_, AVX512_NN_MR, AVX512_NN_MR_COLS, AVX512_NN_NR>(isa, args);
    }
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    if let Some(isa) = Avx2Fma::detect() {
        return nn_driver::<_, AVX_NN_MR, AVX_NN_MR, AVX_NN_NR>(isa, args);
    }
    nn_portable(args)
}

fn nt_dispatch(args: NtArgs<'_>) {
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    if let Some(isa) = Avx512::detect() {
        return if avx_nt_packs(&args) {
            nt_packed::<_, AVX512_NN_MR, AVX512_NT_PACKED_NR>(isa, args)
        } else {
            nt_driver(isa, args)
        };
    }
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    if let Some(isa) = Avx2Fma::detect() {
        return if avx_nt_packs(&args) {
            nt_packed::<_, AVX_NN_MR, AVX_NN_NR>(isa, args)
        } else {
            nt_driver(isa, args)
        };
    }
    nt_portable(args)
}

/// Whether the AVX2 copy runs `gemm_nt` through the nn tiles (see
/// [`nt_packed`]) rather than as dot products.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
fn avx_nt_packs(args: &NtArgs<'_>) -> bool {
    // Measured on our shapes (examples/sgemm_bench, Zen 4): packing wins
    // for 100×10×50 (k = 50, m = 100) and 20×250×64, loses for 100×50×320
    // (a ragged last panel of 2 columns in 16), and with the panel copied
    // as 8×8 transposes (`pack_panel_avx2`) wins wherever B is wide and A
    // has 16 rows to reuse the panel: ResNet's weight gradients (16×144×196:
    // 70 → 83 GFLOP/s) and the Tree-LSTM's wide weights, whose dot products
    // re-read every row of B from L2 for each row tile of A (32×750×150:
    // 43 → 95; 100×750×150: 57 → 107). As wide as a Tree-LSTM level's
    // weights it pays from 8 rows (8×750×150: 57 → 63), not for ResNet's
    // first weight gradient's long k (8×72×784: 103 → 53).
    (args.m >= 16 && (args.k <= 64 || args.n >= 128)) || (args.m >= 8 && args.n >= 512)
}

/// The portable copy, whatever the CPU (the tests run it next to the
/// dispatched one).
fn nn_portable(args: NnArgs<'_>) {
    nn_driver::<_, SSE_NN_MR, SSE_NN_MR, SSE_NN_NR>(Portable, args)
}

fn nt_portable(args: NtArgs<'_>) {
    // LLVM vectorises the dot-product tile badly for SSE2 (along the wrong
    // dimension, with shuffles), so the portable copy packs whenever A has
    // enough rows to reuse the packed panel.
    if args.m >= 4 {
        nt_packed::<_, SSE_NN_MR, SSE_NN_NR>(Portable, args)
    } else {
        nt_driver(Portable, args)
    }
}

/// Calls `$body` with the const `$R` equal to the run-time `$r` (1..=8), so
/// that every ragged tile gets a kernel of its exact height.
macro_rules! with_rows {
    ($r:expr, |$R:ident| $body:expr) => {
        match $r {
            1 => {
                const $R: usize = 1;
                $body
            }
            2 => {
                const $R: usize = 2;
                $body
            }
            3 => {
                const $R: usize = 3;
                $body
            }
            4 => {
                const $R: usize = 4;
                $body
            }
            5 => {
                const $R: usize = 5;
                $body
            }
            6 => {
                const $R: usize = 6;
                $body
            }
            7 => {
                const $R: usize = 7;
                $body
            }
            8 => {
                const $R: usize = 8;
                $body
            }
            r => unreachable!("tile height {r} > 8"),
        }
    };
}

// --------------------------------------------------------------------------
// gemm_nn
// --------------------------------------------------------------------------

/// How the kernel reads a column of an A tile.
const A_COLS_CONTIGUOUS: u8 = 0; // a_rs == 1: the R elements of column p are adjacent
const A_ROWS_CONTIGUOUS: u8 = 1; // a_cs == 1: each row is a contiguous run along k
const A_STRIDED: u8 = 2; // anything else: one checked load per element
const A_ROWS_B_PATCHES: u8 = 3; // a_cs == 1, and B's rows are patch rows (`Patches`)

/// The most kernel taps (`kh · kw`) a patch-row B may have: 7×7. The nn
/// tile keeps the taps' offsets in an array of this size (no allocation).
pub const MAX_TAPS: usize = 49;

/// `MR` rows per tile, `MR_COLS` where A's columns are contiguous (a
/// transposed operand): above 6 rows LLVM vectorises such a tile along its
/// rows, a column of A as one vector, and then gathers; AVX-512's 8-row
/// tile ran 40 times slower that way.
fn nn_driver<K: Kernels, const MR: usize, const MR_COLS: usize, const NR: usize>(isa: K, mut args: NnArgs<'_>) {
    let (m, n, k) = (args.m, args.n, args.k);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // An empty sum: the operands may be empty slices, so never index them.
        if !args.accumulate {
            args.c[..m * n].fill(0.0);
        }
        return;
    }
    if args.patches.is_some() {
        assert_eq!(args.a_cs, 1, "sgemm_nn: a patch-row B takes a row-major A");
        nn_columns::<K, A_ROWS_B_PATCHES, MR, NR>(isa, &mut args)
    } else if args.a_rs == 1 {
        nn_columns::<K, A_COLS_CONTIGUOUS, MR_COLS, NR>(isa, &mut args)
    } else if args.a_cs == 1 {
        nn_columns::<K, A_ROWS_CONTIGUOUS, MR, NR>(isa, &mut args)
    } else {
        nn_columns::<K, A_STRIDED, MR, NR>(isa, &mut args)
    }
}

/// Walks C in column strips. Column strips are the outer loop so that the
/// `k × NR` panel of B stays in L1 while every row tile of A passes over it
/// (A is the smaller operand in all our shapes).
///
/// A ragged last strip is shifted left to end at column n, overlapping its
/// neighbour, and stores only its new columns: full-width code everywhere,
/// at the cost of recomputing columns. When at most half a strip is left
/// (an LSTM's 50 or 65 columns: 2 or 1 past the last 16) the tail is a
/// half-width strip, so it recomputes 6 or 7 columns rather than 14 or 15.
/// Only when n < NR are narrower tiles alone (16 columns for a 32-wide copy,
/// else 4, then 1) needed.
fn nn_columns<K: Kernels, const L: u8, const MR: usize, const NR: usize>(isa: K, args: &mut NnArgs<'_>) {
    let n = args.n;
    if n < NR {
        if NR > 16 && n >= 16 {
            nn_strips::<K, L, MR, 16>(isa, args, 0, n);
        } else if n >= 4 {
            nn_strips::<K, L, MR, 4>(isa, args, 0, n);
        } else {
            nn_strips::<K, L, MR, 1>(isa, args, 0, n);
        }
        return;
    }
    let full = n / NR * NR;
    let tail = n - full;
    match (NR, tail) {
        (_, 0) => nn_strips::<K, L, MR, NR>(isa, args, 0, n),
        (32, 1..=16) => {
            nn_strips::<K, L, MR, NR>(isa, args, 0, full);
            nn_strips::<K, L, MR, 16>(isa, args, full, n);
        }
        (16, 1..=8) => {
            nn_strips::<K, L, MR, NR>(isa, args, 0, full);
            nn_strips::<K, L, MR, 8>(isa, args, full, n);
        }
        (8, 1..=4) => {
            nn_strips::<K, L, MR, NR>(isa, args, 0, full);
            nn_strips::<K, L, MR, 4>(isa, args, full, n);
        }
        _ => nn_strips::<K, L, MR, NR>(isa, args, 0, n),
    }
}

/// The strips of columns `from..to` (`to >= C`), each over every row tile.
///
/// Rows go in `⌈m / MR⌉` tiles of near-equal height rather than full tiles
/// and a remainder: an LSTM's 20 rows as 5 + 5 + 5 + 5, not 6 + 6 + 6 + 2,
/// whose last tile holds too few accumulators to hide the multiply-add
/// latency and ran at about half speed.
fn nn_strips<K: Kernels, const L: u8, const MR: usize, const C: usize>(
    isa: K,
    args: &mut NnArgs<'_>,
    from: usize,
    to: usize,
) {
    let m = args.m;
    debug_assert!(to >= C && to <= args.n);
    let tiles = m.div_ceil(MR);
    let (low, high_tiles) = (m / tiles, m % tiles);
    let mut j = from;
    while j < to {
        // Strip j..j + C, shifted left to end by `to`; its first `j - j0`
        // columns belong to the previous strip.
        let j0 = j.min(to - C);
        let cols = Cols { from: j - j0, to: C };
        // `high_tiles` tiles of `low + 1` rows (at most MR), then `low`.
        let mut i0 = 0;
        if high_tiles > 0 {
            with_rows!(low + 1, |R| for _ in 0..high_tiles {
                isa.nn_tile::<L, R, C>(args, i0, j0, cols);
                i0 += R;
            });
        }
        if low > 0 {
            with_rows!(low, |R| while i0 < m {
                isa.nn_tile::<L, R, C>(args, i0, j0, cols);
                i0 += R;
            });
        }
        j += C;
    }
}

// The kernels below index their small arrays with constant-bound `for`
// loops on purpose (hence `needless_range_loop`): with iterator chains
// (`zip`, `array::from_fn`) LLVM often failed to unroll the tile fully, kept
// it in memory and emitted scalar code, three to ten times slower. With
// plain index loops over constant bounds every tile element becomes a
// register, and the loop bodies vectorise (checked with `objdump`).

/// Computes the R×C tile of C at (i0, j0) over all of k and stores its
/// columns `cols` (all of them but in ragged strips). The tile lives in
/// `acc`, R·C/16 zmm, R·C/8 ymm or R·C/4 xmm registers; each step along k
/// loads a row of B (one bounds check), broadcasts R elements of A and does
/// R·C multiply-adds.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn nn_tile<O: MulAdd, const L: u8, const R: usize, const C: usize>(
    args: &mut NnArgs<'_>,
    i0: usize,
    j0: usize,
    cols: Cols,
) {
    let &mut NnArgs {
        n,
        k,
        a,
        a_rs,
        a_cs,
        b,
        ldb,
        accumulate,
        ..
    } = args;
    let mut acc = [[0.0f32; C]; R];
    // Row p of the B panel starts at b[bo] with bo = p·ldb + j0.
    let mut bo = j0;
    match L {
        A_COLS_CONTIGUOUS => {
            // Column p of the A tile is a[ao..ao + R] with ao = i0 + p·a_cs.
            let mut ao = i0;
            for _ in 0..k {
                let av = first::<R>(&a[ao..]);
                rank1::<O, R, C>(&mut acc, |r| av[r], first(&b[bo..]));
                // Wrapping: after the last step the offsets are not used, and
                // with k = 1 the strides are unconstrained.
                ao = ao.wrapping_add(a_cs);
                bo = bo.wrapping_add(ldb);
            }
        }
        A_ROWS_CONTIGUOUS => {
            // Each row sliced to exactly k elements: LLVM then drops the
            // bounds checks of `rows[r][p]` for p < k.
            let mut rows: [&[f32]; R] = [&[]; R];
            for r in 0..R {
                rows[r] = &a[(i0 + r) * a_rs..][..k];
            }
            for p in 0..k {
                rank1::<O, R, C>(&mut acc, |r| rows[r][p], first(&b[bo..]));
                bo = bo.wrapping_add(ldb);
            }
        }
        A_ROWS_B_PATCHES => {
            let mut rows: [&[f32]; R] = [&[]; R];
            for r in 0..R {
                rows[r] = &a[(i0 + r) * a_rs..][..k];
            }
            let Some(pt) = args.patches else {
                unreachable!("B_PATCHES without patches")
            };
            // Per channel, the kernel's taps at fixed offsets from the
            // channel's plane; with A's rows sliced to the channel's taps,
            // LLVM sees every index in bounds (a running index over all of
            // k, checked at each step, ran at half the speed).
            let taps = pt.kh * pt.kw;
            let mut offsets = [0usize; MAX_TAPS];
            for (t, o) in offsets[..taps].iter_mut().enumerate() {
                *o = t / pt.kw * pt.row + t % pt.kw + j0;
            }
            let offsets = &offsets[..taps];
            for ch in 0..pt.channels {
                let mut a_ch: [&[f32]; R] = [&[]; R];
                for r in 0..R {
                    a_ch[r] = &rows[r][ch * taps..][..taps];
                }
                let plane = &b[ch * pt.plane..];
                for t in 0..taps {
                    rank1::<O, R, C>(&mut acc, |r| a_ch[r][t], first(&plane[offsets[t]..]));
                }
            }
        }
        _ => {
            for p in 0..k {
                rank1::<O, R, C>(&mut acc, |r| a[(i0 + r) * a_rs + p * a_cs], first(&b[bo..]));
                bo = bo.wrapping_add(ldb);
            }
        }
    }
    store::<R, C>(&acc, args.c, n, i0, j0, cols, accumulate);
}

/// The first N elements of `s` as an array reference (one length check).
#[inline(always)]
fn first<const N: usize>(s: &[f32]) -> &[f32; N] {
    s.first_chunk::<N>().expect("sgemm: operand shorter than checked")
}

/// `acc += a ⊗ b`: one step along k for the whole register tile, with
/// `a(r)` the A element of row r. Reading A inside the loop (rather than
/// into a local array first) lets LLVM fold each load into its broadcast;
/// with an array it loaded and broadcast separately and ran ~1.6× slower.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn rank1<O: MulAdd, const R: usize, const C: usize>(acc: &mut [[f32; C]; R], a: impl Fn(usize) -> f32, b: &[f32; C]) {
    for r in 0..R {
        let ar = a(r);
        for c in 0..C {
            acc[r][c] = O::mul_add(ar, b[c], acc[r][c]);
        }
    }
}

/// The columns `from..to` of a tile that are stored: `0..C` for a full tile.
#[derive(Clone, Copy)]
struct Cols {
    from: usize,
    to: usize,
}

/// Writes (or adds) columns `cols` of the tile to C at (i0, j0).
#[inline(always)]
#[allow(clippy::needless_range_loop)]
#[allow(clippy::too_many_arguments)] // all small scalars of one call site
fn store<const R: usize, const C: usize>(
    acc: &[[f32; C]; R],
    c: &mut [f32],
    ldc: usize,
    i0: usize,
    j0: usize,
    cols: Cols,
    accumulate: bool,
) {
    for r in 0..R {
        if cols.from == 0 && cols.to == C {
            // The common full-width case: whole-vector loads and stores.
            let dst = first_mut::<C>(&mut c[(i0 + r) * ldc + j0..]);
            for j in 0..C {
                dst[j] = if accumulate { dst[j] + acc[r][j] } else { acc[r][j] };
            }
        } else {
            // A ragged tile. It works on a copy of the row: a run-time
            // offset into `acc` itself (`&acc[r][from..]`) would make LLVM
            // keep the whole tile in memory, storing it on every step of the
            // k loop.
            let row = acc[r];
            let dst = &mut c[(i0 + r) * ldc + j0..][cols.from..cols.to];
            let row = &row[cols.from..cols.to];
            if accumulate {
                dst.iter_mut().zip(row).for_each(|(d, s)| *d += s);
            } else {
                dst.copy_from_slice(row);
            }
        }
    }
}

/// The first N elements of `s` as a mutable array reference.
#[inline(always)]
fn first_mut<const N: usize>(s: &mut [f32]) -> &mut [f32; N] {
    s.first_chunk_mut::<N>().expect("sgemm: C shorter than checked")
}

// --------------------------------------------------------------------------
// gemm_nt
// --------------------------------------------------------------------------

/// `gemm_nt` as dot products: C in row tiles of `NT_MR` rows, each one
/// [`Kernels::nt_rows`] call that walks the row's column tiles (so those
/// rows of A stay in L1 while the rows of B stream past).
fn nt_driver<K: Kernels>(isa: K, mut args: NtArgs<'_>) {
    let (m, n, k) = (args.m, args.n, args.k);
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        // An empty sum: the operands may be empty slices, so never index them.
        if !args.accumulate {
            args.c[..m * n].fill(0.0);
        }
        return;
    }
    for i0 in (0..m).step_by(K::NT_MR) {
        isa.nt_rows(&mut args, i0, K::NT_MR.min(m - i0));
    }
}

/// Stack space for a packed panel of Bᵀ in [`nt_packed`]: 16 KiB. Each
/// panel's sum is added to C apart, so its depth (`PANEL / NR` steps of k)
/// is part of the result's rounding: the AVX-512 copy packs AVX2's 16
/// columns, and so keeps AVX2's bits.
const PANEL: usize = 4096;

/// `gemm_nt` through the `gemm_nn` tiles: Bᵀ is copied, NR columns (rows of
/// B) and up to `PANEL / NR` steps of k at a time, into a row-major panel on
/// the stack, and every row tile of A then runs over that panel as in
/// `gemm_nn` with a row-major A. The copy costs one move per element of B;
/// in exchange there is no reduction per dot product, which pays when k is
/// short and A has many rows to reuse the panel.
fn nt_packed<K: Kernels, const MR: usize, const NR: usize>(isa: K, args: NtArgs<'_>) {
    let b_rows = args.b_rows();
    let NtArgs {
        m,
        n,
        k,
        a,
        lda,
        b,
        c,
        accumulate,
        ..
    } = args;
    if m == 0 || n == 0 {
        return;
    }
    if k == 0 {
        if !accumulate {
            c[..m * n].fill(0.0);
        }
        return;
    }
    let kc_max = PANEL / NR;
    // Columns of a ragged panel past n keep stale values from the previous
    // panel (or these zeros): they only feed tile columns that are never
    // stored.
    let mut panel = [0.0f32; PANEL];
    for j0 in (0..n).step_by(NR) {
        let nb = NR.min(n - j0);
        for p0 in (0..k).step_by(kc_max) {
            let kc = kc_max.min(k - p0);
            isa.pack_panel::<NR>(&mut panel[..kc * NR], b, b_rows, (j0, nb), p0);
            // C shifted to column j0, B the panel: the nn tiles see an
            // ordinary product with a row-major A.
            let mut view = NnArgs {
                m,
                n,
                k: kc,
                a: &a[p0..],
                a_rs: lda,
                a_cs: 1,
                b: &panel[..kc * NR],
                ldb: NR,
                patches: None,
                c: &mut c[j0..],
                accumulate: accumulate || p0 > 0,
            };
            let cols = Cols { from: 0, to: nb };
            let mut i0 = 0;
            while i0 + MR <= m {
                isa.nn_tile::<A_ROWS_CONTIGUOUS, MR, NR>(&mut view, i0, 0, cols);
                i0 += MR;
            }
            if i0 < m {
                with_rows!(m - i0, |R| isa
                    .nn_tile::<A_ROWS_CONTIGUOUS, R, NR>(&mut view, i0, 0, cols));
            }
        }
    }
}

/// Copies columns `p0..p0 + kc` of B's rows `j0..j0 + nb` (`nb <= NR`)
/// into `panel` (`kc × NR`, row-major): `panel[p·NR + jj] = B[j0 + jj][p0 + p]`.
/// Step by step along k, so the panel is written in order and each row of
/// B read as a stream; columns `nb..NR` are left as they were.
#[inline(always)]
fn pack_panel<const NR: usize>(panel: &mut [f32], b: &[f32], b_rows: BRows, (j0, nb): (usize, usize), p0: usize) {
    let kc = panel.len() / NR;
    let mut rows: [&[f32]; NR] = [&[]; NR];
    for (jj, row) in rows.iter_mut().enumerate().take(nb) {
        *row = &b[b_rows.start(j0 + jj) + p0..][..kc];
    }
    if nb == NR {
        for (p, dst) in panel.chunks_exact_mut(NR).enumerate() {
            let dst = first_mut::<NR>(dst);
            for jj in 0..NR {
                dst[jj] = rows[jj][p];
            }
        }
    } else {
        for (p, dst) in panel.chunks_exact_mut(NR).enumerate() {
            for (d, row) in dst.iter_mut().zip(&rows[..nb]) {
                *d = row[p];
            }
        }
    }
}

/// [`pack_panel`] for a full panel of a multiple of 8 columns: blocks of
/// 8 rows of B by 8 steps of k, each loaded as eight vectors and transposed
/// in registers. The copy one element at a time was a seventh of a
/// Tree-LSTM level's time on the CPU: its levels have few rows, so each
/// packed panel of the wide weights serves few tiles.
///
/// # Safety
/// The CPU must support AVX2.
#[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
#[target_feature(enable = "avx2,fma")]
unsafe fn pack_panel_avx2<const NR: usize>(panel: &mut [f32], b: &[f32], b_rows: BRows, j0: usize, p0: usize) {
    #[cfg(target_arch = "x86")]
    use std::arch::x86::*;
    #[cfg(target_arch = "x86_64")]
    use std::arch::x86_64::*;
    let kc = panel.len() / NR;
    let whole = kc - kc % 8;
    for g in (0..NR).step_by(8) {
        // Rows sliced to exactly kc elements once: every load below is
        // inside its row.
        let mut rows: [&[f32]; 8] = [&[]; 8];
        for (r, row) in rows.iter_mut().enumerate() {
            *row = &b[b_rows.start(j0 + g + r) + p0..][..kc];
        }
        for p in (0..whole).step_by(8) {
            // SAFETY: p + 8 <= whole <= kc, the length of every row.
            let [r0, r1, r2, r3, r4, r5, r6, r7] = rows.map(|row| unsafe { _mm256_loadu_ps(row[p..p + 8].as_ptr()) });
            // Pairs of rows interleaved, then pairs of pairs, then halves:
            // vector q holds column q of the block.
            let (t0, t1) = (_mm256_unpacklo_ps(r0, r1), _mm256_unpackhi_ps(r0, r1));
            let (t2, t3) = (_mm256_unpacklo_ps(r2, r3), _mm256_unpackhi_ps(r2, r3));
            let (t4, t5) = (_mm256_unpacklo_ps(r4, r5), _mm256_unpackhi_ps(r4, r5));
            let (t6, t7) = (_mm256_unpacklo_ps(r6, r7), _mm256_unpackhi_ps(r6, r7));
            let (u0, u1) = (_mm256_shuffle_ps::<0x44>(t0, t2), _mm256_shuffle_ps::<0xee>(t0, t2));
            let (u2, u3) = (_mm256_shuffle_ps::<0x44>(t1, t3), _mm256_shuffle_ps::<0xee>(t1, t3));
            let (u4, u5) = (_mm256_shuffle_ps::<0x44>(t4, t6), _mm256_shuffle_ps::<0xee>(t4, t6));
            let (u6, u7) = (_mm256_shuffle_ps::<0x44>(t5, t7), _mm256_shuffle_ps::<0xee>(t5, t7));
            let columns = [
                _mm256_permute2f128_ps::<0x20>(u0, u4),
                _mm256_permute2f128_ps::<0x20>(u1, u5),
                _mm256_permute2f128_ps::<0x20>(u2, u6),
                _mm256_permute2f128_ps::<0x20>(u3, u7),
                _mm256_permute2f128_ps::<0x31>(u0, u4),
                _mm256_permute2f128_ps::<0x31>(u1, u5),
                _mm256_permute2f128_ps::<0x31>(u2, u6),
                _mm256_permute2f128_ps::<0x31>(u3, u7),
            ];
            for (q, column) in columns.into_iter().enumerate() {
                let dst = &mut panel[(p + q) * NR + g..][..8];
                // SAFETY: `dst` holds the 8 elements stored.
                unsafe { _mm256_storeu_ps(dst.as_mut_ptr(), column) };
            }
        }
        for p in whole..kc {
            for (r, row) in rows.iter().enumerate() {
                panel[p * NR + g + r] = row[p];
            }
        }
    }
}

/// Rows `i0..i0 + mr` of C as dot products, tile by tile along the row: A's
/// rows are sliced once here, B's for every tile.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn nt_rows<O: MulAdd, const R: usize, const C: usize, const W: usize>(args: &mut NtArgs<'_>, i0: usize, mr: usize) {
    debug_assert!((1..=R).contains(&mr));
    let (n, k, lda) = (args.n, args.k, args.lda);
    // A ragged row tile repeats its last row; see `nt_tile`. Rows sliced to
    // exactly k elements: the checks in the k loop are then implied by its
    // condition, and LLVM removes most of them.
    let mut a_rows: [&[f32]; R] = [&[]; R];
    for r in 0..R {
        a_rows[r] = &args.a[(i0 + r.min(mr - 1)) * lda..][..k];
    }
    for j0 in (0..n).step_by(C) {
        nt_tile::<O, R, C, W>(args, &a_rows, i0, j0, mr, C.min(n - j0));
    }
}

/// The dot products of A rows `i0..i0 + mr` (given as `a_rows`) with B rows
/// `j0..j0 + nr`, computed as a full R×C tile. Each dot product keeps W
/// partial sums (one vector register), so a step along k is R + C vector
/// loads and R·C independent vector multiply-adds; the partial sums are
/// reduced once at the end, then the k % W leftover elements are added one
/// by one.
///
/// A ragged tile (mr < R or nr < C) repeats its last row or column and
/// stores only the real ones. Computing the whole tile costs little, and it
/// is the only shape that matters: LLVM vectorises the 4×3 tile with
/// 8-lane sums well, but most smaller shapes along the wrong dimension, with
/// shuffles and spills, which made them slower than the full tile.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn nt_tile<O: MulAdd, const R: usize, const C: usize, const W: usize>(
    args: &mut NtArgs<'_>,
    a_rows: &[&[f32]; R],
    i0: usize,
    j0: usize,
    mr: usize,
    nr: usize,
) {
    debug_assert!((1..=R).contains(&mr) && (1..=C).contains(&nr));
    let starts = args.b_rows();
    let &mut NtArgs {
        n, k, b, accumulate, ..
    } = args;
    let mut b_rows: [&[f32]; C] = [&[]; C];
    for c in 0..C {
        b_rows[c] = &b[starts.start(j0 + c.min(nr - 1))..][..k];
    }
    let mut acc = [[[0.0f32; W]; C]; R];
    let body = k - k % W;
    let mut p = 0;
    while p + W <= body {
        // Load first, one check per row, then pure arithmetic: interleaving
        // checks with the multiply-adds kept LLVM from vectorising them.
        let mut av = [[0.0f32; W]; R];
        for r in 0..R {
            av[r] = *first::<W>(&a_rows[r][p..]);
        }
        let mut bv = [[0.0f32; W]; C];
        for c in 0..C {
            bv[c] = *first::<W>(&b_rows[c][p..]);
        }
        for r in 0..R {
            for c in 0..C {
                for w in 0..W {
                    acc[r][c][w] = O::mul_add(av[r][w], bv[c][w], acc[r][c][w]);
                }
            }
        }
        p += W;
    }
    let mut sums = [[0.0f32; C]; R];
    for r in 0..R {
        for c in 0..C {
            sums[r][c] = hsum(acc[r][c]);
        }
    }
    for q in body..k {
        for r in 0..R {
            for c in 0..C {
                sums[r][c] = O::mul_add(a_rows[r][q], b_rows[c][q], sums[r][c]);
            }
        }
    }
    let out = &mut *args.c;
    if mr == R && nr == C {
        // Full tile: straight-line code, one bounds check per row.
        for r in 0..R {
            let dst = first_mut::<C>(&mut out[(i0 + r) * n + j0..]);
            for c in 0..C {
                dst[c] = if accumulate { dst[c] + sums[r][c] } else { sums[r][c] };
            }
        }
    } else {
        for r in 0..mr {
            let dst = &mut out[(i0 + r) * n + j0..][..nr];
            for c in 0..C {
                if c < nr {
                    dst[c] = if accumulate { dst[c] + sums[r][c] } else { sums[r][c] };
                }
            }
        }
    }
}

/// Sums W lanes by halving (lane i plus lane i + W/2): log2(W) vector adds
/// and shuffles instead of W dependent scalar adds.
#[inline(always)]
fn hsum<const W: usize>(mut v: [f32; W]) -> f32 {
    let mut w = W;
    while w > 1 {
        let half = w / 2;
        for i in 0..half {
            v[i] += v[i + half];
        }
        if w % 2 == 1 {
            v[0] += v[w - 1];
        }
        w = half;
    }
    v[0]
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every way a product can be computed, each forced regardless of the
    /// dispatch policy: the portable copy, the AVX2+FMA copy when this CPU
    /// has it, and for `gemm_nt` both strategies of each (dot-product tiles
    /// and the packed panel through the nn tiles).
    #[derive(Clone, Copy, Debug)]
    enum Path {
        Portable,
        PortablePacked,
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        Avx2Fma,
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        Avx2FmaPacked,
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        Avx512,
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        Avx512Packed,
        /// What `gemm_nn` / `gemm_nt` pick on this CPU.
        Dispatched,
    }

    fn isas() -> Vec<Path> {
        let mut paths = vec![Path::Portable, Path::PortablePacked, Path::Dispatched];
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if Avx2Fma::detect().is_some() {
            paths.extend([Path::Avx2Fma, Path::Avx2FmaPacked]);
        } else {
            eprintln!("no AVX2+FMA on this CPU: only the portable copy is tested");
        }
        #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
        if Avx512::detect().is_some() {
            paths.extend([Path::Avx512, Path::Avx512Packed]);
        } else {
            eprintln!("no AVX-512F on this CPU: its copy is not tested");
        }
        paths
    }

    fn nn_on(path: Path, args: NnArgs<'_>) {
        args.check();
        match path {
            Path::Portable | Path::PortablePacked => nn_portable(args),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Path::Avx2Fma | Path::Avx2FmaPacked => {
                nn_driver::<_, AVX_NN_MR, AVX_NN_MR, AVX_NN_NR>(Avx2Fma::detect().expect("AVX2+FMA"), args)
            }
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Path::Avx512 | Path::Avx512Packed => {
                nn_driver::<_, AVX512_NN_MR, AVX512_NN_MR_COLS, AVX512_NN_NR>(Avx512::detect().expect("AVX-512F"), args)
            }
            Path::Dispatched => nn_dispatch(args),
        }
    }

    fn nt_on(path: Path, args: NtArgs<'_>) {
        args.check();
        match path {
            Path::Portable => nt_driver(Portable, args),
            Path::PortablePacked => nt_packed::<_, SSE_NN_MR, SSE_NN_NR>(Portable, args),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Path::Avx2Fma => nt_driver(Avx2Fma::detect().expect("AVX2+FMA"), args),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Path::Avx2FmaPacked => nt_packed::<_, AVX_NN_MR, AVX_NN_NR>(Avx2Fma::detect().expect("AVX2+FMA"), args),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Path::Avx512 => nt_driver(Avx512::detect().expect("AVX-512F"), args),
            #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
            Path::Avx512Packed => {
                nt_packed::<_, AVX512_NN_MR, AVX512_NT_PACKED_NR>(Avx512::detect().expect("AVX-512F"), args)
            }
            Path::Dispatched => nt_dispatch(args),
        }
    }

    /// A small deterministic generator (xorshift), values in [-1, 1).
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
        fn value(&mut self) -> f32 {
            (self.next() >> 40) as f32 / (1u64 << 23) as f32 - 1.0
        }
        fn fill(&mut self, len: usize) -> Vec<f32> {
            (0..len).map(|_| self.value()).collect()
        }
    }

    /// Checks `got` against `c0 (+) Σ a·b` accumulated in f64. The error of
    /// an f32 dot product scales with Σ|a·b|, not with its (possibly
    /// cancelling) result, so the relative tolerance is taken against that.
    fn check(
        label: &str,
        got: &[f32],
        c0: &[f32],
        accumulate: bool,
        (m, n, k): (usize, usize, usize),
        a_at: impl Fn(usize, usize) -> f32,
        b_at: impl Fn(usize, usize) -> f32,
    ) {
        for i in 0..m {
            for j in 0..n {
                let (mut sum, mut mag) = (0.0f64, 0.0f64);
                for p in 0..k {
                    let t = a_at(i, p) as f64 * b_at(p, j) as f64;
                    sum += t;
                    mag += t.abs();
                }
                if accumulate {
                    sum += c0[i * n + j] as f64;
                    mag += (c0[i * n + j] as f64).abs();
                }
                let g = got[i * n + j] as f64;
                assert!(
                    (g - sum).abs() <= 1e-4 * mag + 1e-30,
                    "{label}: C[{i}][{j}] = {g}, want {sum} (Σ|terms| {mag})"
                );
            }
        }
        // Nothing past the m·n cells is touched.
        assert!(got[m * n..]
            .iter()
            .zip(&c0[m * n..])
            .all(|(x, y)| x.to_bits() == y.to_bits()));
    }

    /// The A layouts `gemm_nn` must handle: (a_rs, a_cs, slice length).
    fn a_layouts(m: usize, k: usize, rng: &mut Rng) -> Vec<(usize, usize, usize)> {
        let pad = rng.below(5);
        vec![
            (k + pad, 1, (m - 1) * (k + pad) + k),                   // row-major, lda >= k
            (1, m + pad, (k - 1) * (m + pad) + m),                   // transposed (column-major)
            (2 * k + 1, 2, (m - 1) * (2 * k + 1) + 2 * (k - 1) + 1), // general strides
            (1, 0, m), // every column the same (broadcast); overlapping reads are fine
        ]
    }

    fn run_nn(isa: Path, (m, n, k): (usize, usize, usize), rng: &mut Rng) {
        for (a_rs, a_cs, a_len) in a_layouts(m, k, rng) {
            let a_extra = rng.below(3);
            let a = rng.fill(a_len + a_extra);
            let ldb = n + [0, 0, 1, 7][rng.below(4)];
            let b = rng.fill((k - 1) * ldb + n);
            for accumulate in [false, true] {
                let extra = rng.below(3);
                let mut c0 = rng.fill(m * n + extra);
                if !accumulate {
                    // Overwriting must ignore what was there, NaN included.
                    c0[..m * n].iter_mut().step_by(3).for_each(|x| *x = f32::NAN);
                }
                let mut c = c0.clone();
                nn_on(
                    isa,
                    NnArgs {
                        m,
                        n,
                        k,
                        a: &a,
                        a_rs,
                        a_cs,
                        b: &b,
                        ldb,
                        patches: None,
                        c: &mut c,
                        accumulate,
                    },
                );
                check(
                    &format!("nn {isa:?} m={m} n={n} k={k} a=({a_rs},{a_cs}) ldb={ldb} acc={accumulate}"),
                    &c,
                    &c0,
                    accumulate,
                    (m, n, k),
                    |i, p| a[i * a_rs + p * a_cs],
                    |p, j| b[p * ldb + j],
                );
            }
        }
    }

    fn run_nt(isa: Path, (m, n, k): (usize, usize, usize), rng: &mut Rng) {
        let lda = k + [0, 0, 1, 5][rng.below(4)];
        let ldb = k + [0, 0, 3, 8][rng.below(4)];
        let a = rng.fill((m - 1) * lda + k);
        let b_extra = rng.below(3);
        let b = rng.fill((n - 1) * ldb + k + b_extra);
        for accumulate in [false, true] {
            let extra = rng.below(3);
            let mut c0 = rng.fill(m * n + extra);
            if !accumulate {
                c0[..m * n].iter_mut().step_by(2).for_each(|x| *x = f32::NAN);
            }
            let mut c = c0.clone();
            nt_on(
                isa,
                NtArgs {
                    m,
                    n,
                    k,
                    a: &a,
                    lda,
                    b: &b,
                    ldb,
                    patches: None,
                    c: &mut c,
                    accumulate,
                },
            );
            check(
                &format!("nt {isa:?} m={m} n={n} k={k} lda={lda} ldb={ldb} acc={accumulate}"),
                &c,
                &c0,
                accumulate,
                (m, n, k),
                |i, p| a[i * lda + p],
                |p, j| b[j * ldb + p],
            );
        }
    }

    /// Random shapes in 1..=37 (every ragged edge of both tile shapes, and k
    /// both shorter and longer than a vector), plus every edge size paired
    /// with the others small.
    fn small_shapes(rng: &mut Rng) -> Vec<(usize, usize, usize)> {
        let mut shapes: Vec<_> = (0..250)
            .map(|_| (1 + rng.below(37), 1 + rng.below(37), 1 + rng.below(37)))
            .collect();
        for x in 1..=37 {
            shapes.extend([(x, 5, 3), (3, x, 5), (5, 3, x), (x, x, x)]);
        }
        shapes
    }

    /// The products our models make (see the module docs of the ops).
    const NN_SHAPES: [(usize, usize, usize); 8] = [
        (10, 576, 25),
        (20, 200, 50),
        (20, 50, 200),
        (400, 65, 50),
        (20, 64, 250),
        (250, 64, 20),
        (100, 320, 50),
        (50, 320, 100),
    ];
    /// With the Tree-LSTM's forward products: k = 300 spans two packed
    /// panels of 256.
    const NT_SHAPES: [(usize, usize, usize); 6] = [
        (10, 25, 576),
        (20, 250, 64),
        (100, 50, 320),
        (100, 10, 50),
        (40, 750, 150),
        (60, 450, 300),
    ];

    /// The AVX-512 copy gives AVX2's bits: every product of every layout,
    /// ragged and model shapes, with k past one packed panel (rounded once
    /// per panel). Runs where the CPU has AVX-512F, and says so where not.
    #[test]
    #[cfg(any(target_arch = "x86", target_arch = "x86_64"))]
    fn avx512_products_are_avx2_products_bit_for_bit() {
        if Avx512::detect().is_none() {
            eprintln!("no AVX-512F on this CPU: its bits are not compared with AVX2's");
            return;
        }
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let mut shapes = small_shapes(&mut rng);
        shapes.extend(NN_SHAPES.iter().chain(&NT_SHAPES));
        shapes.extend([(16, 750, 150), (9, 300, 600), (33, 47, 520), (100, 150, 750)]);
        for (m, n, k) in shapes {
            for (a_rs, a_cs, a_len) in a_layouts(m, k, &mut rng) {
                let a = rng.fill(a_len);
                let b = rng.fill(k * n);
                let c0 = rng.fill(m * n);
                let run = |path: Path, accumulate: bool| {
                    let mut c = c0.clone();
                    let (b, ldb) = (&b[..], n);
                    nn_on(
                        path,
                        NnArgs {
                            m,
                            n,
                            k,
                            a: &a,
                            a_rs,
                            a_cs,
                            b,
                            ldb,
                            patches: None,
                            c: &mut c,
                            accumulate,
                        },
                    );
                    c
                };
                for accumulate in [false, true] {
                    let (x, y) = (run(Path::Avx2Fma, accumulate), run(Path::Avx512, accumulate));
                    let same = x.iter().zip(&y).all(|(x, y)| x.to_bits() == y.to_bits());
                    assert!(
                        same,
                        "nn m={m} n={n} k={k} a=({a_rs},{a_cs}) acc={accumulate}: AVX-512 differs from AVX2"
                    );
                }
            }
            // gemm_nt, packed: A m×k and B n×k row-major.
            let (a, b, c0) = (rng.fill(m * k), rng.fill(n * k), rng.fill(m * n));
            let run = |path: Path| {
                let mut c = c0.clone();
                nt_on(
                    path,
                    NtArgs {
                        m,
                        n,
                        k,
                        a: &a,
                        lda: k,
                        b: &b,
                        ldb: k,
                        patches: None,
                        c: &mut c,
                        accumulate: true,
                    },
                );
                c
            };
            let (x, y) = (run(Path::Avx2FmaPacked), run(Path::Avx512Packed));
            let same = x.iter().zip(&y).all(|(x, y)| x.to_bits() == y.to_bits());
            assert!(same, "nt packed m={m} n={n} k={k}: AVX-512 differs from AVX2");
        }
    }

    #[test]
    fn nn_matches_naive_on_small_ragged_shapes() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        for isa in isas() {
            for shape in small_shapes(&mut rng) {
                run_nn(isa, shape, &mut rng);
            }
        }
    }

    #[test]
    fn nn_matches_naive_on_model_shapes() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for isa in isas() {
            for shape in NN_SHAPES {
                run_nn(isa, shape, &mut rng);
            }
        }
    }

    #[test]
    fn nt_matches_naive_on_small_ragged_shapes() {
        let mut rng = Rng(0xd1b5_4a32_d192_ed03);
        for isa in isas() {
            for shape in small_shapes(&mut rng) {
                run_nt(isa, shape, &mut rng);
            }
        }
    }

    #[test]
    fn nt_matches_naive_on_model_shapes() {
        let mut rng = Rng(0x8cb9_2ba7_2f3d_8dd7);
        for isa in isas() {
            for shape in NT_SHAPES {
                run_nt(isa, shape, &mut rng);
            }
        }
    }

    /// The exact call patterns of the ops, through the public (dispatched)
    /// functions: conv input grad reads Wᵀ with a_rs = 1, a_cs = 250; the
    /// linear weight grad reads dyᵀ with a_rs = 1, a_cs = 50.
    #[test]
    fn public_functions_match_naive_on_transposed_operands() {
        let mut rng = Rng(0x1234_5678_9abc_def1);
        let w = rng.fill(20 * 250);
        let gy = rng.fill(20 * 64);
        let mut dcol = vec![0.0; 250 * 64];
        gemm_nn(250, 64, 20, &w, 1, 250, &gy, 64, &mut dcol, false);
        check(
            "conv dcol",
            &dcol,
            &dcol.clone(),
            false,
            (250, 64, 20),
            |i, p| w[p * 250 + i],
            |p, j| gy[p * 64 + j],
        );

        let dy = rng.fill(100 * 50);
        let x = rng.fill(100 * 320);
        let mut gw = vec![0.0; 50 * 320];
        gemm_nn(50, 320, 100, &dy, 1, 50, &x, 320, &mut gw, false);
        check(
            "linear dW",
            &gw,
            &gw.clone(),
            false,
            (50, 320, 100),
            |i, p| dy[p * 50 + i],
            |p, j| x[p * 320 + j],
        );

        let c0 = rng.fill(100 * 50);
        let mut y = c0.clone();
        let wl = rng.fill(50 * 320);
        gemm_nt(100, 50, 320, &x, 320, &wl, 320, &mut y, true);
        check(
            "linear y",
            &y,
            &c0,
            true,
            (100, 50, 320),
            |i, p| x[i * 320 + p],
            |p, j| wl[j * 320 + p],
        );
    }

    #[test]
    fn empty_dimensions() {
        for isa in isas() {
            // k = 0: C is zeroed, or left alone when accumulating.
            let mut c = vec![f32::NAN; 6];
            nn_on(
                isa,
                NnArgs {
                    m: 2,
                    n: 3,
                    k: 0,
                    a: &[],
                    a_rs: 0,
                    a_cs: 0,
                    b: &[],
                    ldb: 3,
                    patches: None,
                    c: &mut c,
                    accumulate: false,
                },
            );
            assert_eq!(c, [0.0; 6]);
            let mut c = vec![1.5; 6];
            nt_on(
                isa,
                NtArgs {
                    m: 3,
                    n: 2,
                    k: 0,
                    a: &[],
                    lda: 0,
                    b: &[],
                    ldb: 0,
                    patches: None,
                    c: &mut c,
                    accumulate: true,
                },
            );
            assert_eq!(c, [1.5; 6]);
        }
        // m = 0 or n = 0: nothing to do, nothing touched.
        let mut c: [f32; 0] = [];
        gemm_nn(0, 4, 2, &[], 2, 1, &[0.0; 8], 4, &mut c, false);
        gemm_nt(3, 0, 2, &[0.0; 6], 2, &[], 2, &mut c, true);
    }

    /// With k = 1 the row stride of B is never used, so `ldb < n` is
    /// allowed: a transposed column vector has row stride 1.
    #[test]
    fn outer_product_with_unit_row_stride() {
        let (x, y) = ([1.0, 2.0, 3.0], [4.0, 5.0]);
        let mut c = [0.0; 6];
        gemm_nn(3, 2, 1, &x, 1, 1, &y, 1, &mut c, false);
        assert_eq!(c, [4.0, 5.0, 8.0, 10.0, 12.0, 15.0]);
        // Any stride along a length-1 dimension is fine, even one whose
        // next step would overflow.
        for isa in isas() {
            let mut c = [0.0; 6];
            let args = NnArgs {
                m: 3,
                n: 2,
                k: 1,
                a: &x,
                a_rs: 1,
                a_cs: usize::MAX,
                b: &y,
                ldb: usize::MAX,
                patches: None,
                c: &mut c,
                accumulate: false,
            };
            nn_on(isa, args);
            assert_eq!(c, [4.0, 5.0, 8.0, 10.0, 12.0, 15.0], "{isa:?}");
        }
    }

    #[test]
    #[should_panic(expected = "sgemm_nn: A")]
    fn nn_rejects_short_a() {
        gemm_nn(2, 2, 3, &[0.0; 5], 3, 1, &[0.0; 6], 2, &mut [0.0; 4], false);
    }

    #[test]
    #[should_panic(expected = "sgemm_nn: B")]
    fn nn_rejects_short_b() {
        gemm_nn(2, 2, 3, &[0.0; 6], 3, 1, &[0.0; 5], 2, &mut [0.0; 4], false);
    }

    #[test]
    #[should_panic(expected = "sgemm_nt: C")]
    fn nt_rejects_short_c() {
        gemm_nt(2, 2, 3, &[0.0; 6], 3, &[0.0; 6], 3, &mut [0.0; 3], false);
    }

    #[test]
    #[should_panic(expected = "sgemm_nt: B row stride")]
    fn nt_rejects_overlapping_rows() {
        gemm_nt(2, 2, 3, &[0.0; 6], 3, &[0.0; 6], 2, &mut [0.0; 4], false);
    }

    /// Patch rows read in place give the bits of the same product over the
    /// patch matrix written out, on every path: each element is the same
    /// chain over the same values; only where B's rows start differs.
    #[test]
    fn patch_rows_are_the_written_patch_matrix_bit_for_bit() {
        let mut rng = Rng(0x5851_f42d_4c95_7f2d);
        let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        // (m, channels, kernel, padded rows, padded columns, output rows, output columns)
        let shapes = [
            (8, 8, 3, 30, 30, 28, 28),
            (16, 3, 3, 16, 16, 14, 14),
            (5, 4, 3, 9, 9, 7, 7),
            (9, 2, 5, 12, 17, 8, 13),
            (3, 1, 2, 6, 6, 5, 5),
            (20, 7, 3, 6, 6, 4, 4),
        ];
        for isa in isas() {
            for (m, channels, k, hp, wp, oh, ow) in shapes {
                let patches = Patches {
                    channels,
                    kh: k,
                    kw: k,
                    row: wp,
                    plane: hp * wp,
                };
                let (rows, n) = (patches.rows(), (oh - 1) * wp + ow);
                let image = rng.fill(channels * hp * wp);
                let written: Vec<f32> = (0..rows)
                    .flat_map(|r| image[patches.start(r)..][..n].to_vec())
                    .collect();
                let what = format!("{isa:?} m={m} {patches:?} n={n}");
                for accumulate in [false, true] {
                    let a = rng.fill(m * rows);
                    let start = rng.fill(m * n);
                    let (mut read, mut want) = (start.clone(), start);
                    for (b, ldb, patches, c) in [(&image, 0, Some(patches), &mut read), (&written, n, None, &mut want)]
                    {
                        let args = NnArgs {
                            m,
                            n,
                            k: rows,
                            a: &a,
                            a_rs: rows,
                            a_cs: 1,
                            b,
                            ldb,
                            patches,
                            c,
                            accumulate,
                        };
                        nn_on(isa, args);
                    }
                    assert_eq!(bits(&read), bits(&want), "nn {what} acc={accumulate}");

                    let a = rng.fill(m * n);
                    let start = rng.fill(m * rows);
                    let (mut read, mut want) = (start.clone(), start);
                    for (b, ldb, patches, c) in [(&image, 0, Some(patches), &mut read), (&written, n, None, &mut want)]
                    {
                        let args = NtArgs {
                            m,
                            n: rows,
                            k: n,
                            a: &a,
                            lda: n,
                            b,
                            ldb,
                            patches,
                            c,
                            accumulate,
                        };
                        nt_on(isa, args);
                    }
                    assert_eq!(bits(&read), bits(&want), "nt {what} acc={accumulate}");
                }
            }
        }
    }

    #[test]
    #[should_panic(expected = "reach past")]
    fn patch_rows_past_the_image_are_rejected() {
        let patches = Patches {
            channels: 2,
            kh: 3,
            kw: 3,
            row: 6,
            plane: 36,
        };
        // Two 6×6 planes hold a 4×4 output's patch rows of 22 entries; 23 reach past.
        gemm_nn_patches(1, 22, &[0.0; 18], 18, &[0.0; 72], patches, &mut [0.0; 22], false);
        gemm_nn_patches(1, 23, &[0.0; 18], 18, &[0.0; 72], patches, &mut [0.0; 23], false);
    }
}
