//! Stride-1, unpadded convolution as implicit matrix products: the patch
//! matrix is never written (other geometries are `super::im2col`'s). An output row of a filter is `LANES`-pixel vectors ("spans"); for
//! filter weight `(c, i, j)` the span's input pixels are `LANES` consecutive
//! values of input row `oh + i` of channel `c`, starting at column `ow + j`,
//! so every product reads its operands straight from `x`, `y` and `dy`.
//!
//! Each product keeps a register tile of accumulators (`ROWS` filters or
//! channels × up to two spans, or `WG_FILTERS` filters × `WG_TAPS` filter
//! weights of partial dot products) and is compiled for AVX2+FMA when the
//! CPU has it (see `backend::cpu::simd`). Geometries whose output rows are
//! not a multiple of `LANES` wide, or whose kernels are not 5 wide, take
//! slower general paths; `tests` below covers each path.

use crate::backend::cpu::simd::{
    add_to, fma_scalar, fma_vector, hsum, load, load_partial, vectorized, Vectorized, LANES, V8,
};
use crate::backend::ConvDims;
use rayon::prelude::*;

/// Filters of a forward tile, channels of an input-grad tile. With two
/// spans, a tile is 10 vector accumulators (of AVX2's 16 registers).
pub(super) const ROWS: usize = 5;
/// A weight-grad tile: 2 filters × 5 consecutive taps of one kernel row,
/// 10 vectors of partial dot products.
const WG_FILTERS: usize = 2;
const WG_TAPS: usize = 5;
// The weight-grad fast path walks the two filters' rows in step.
const _: () = assert!(WG_FILTERS == 2);
/// Kernel width with a fast path in the forward product.
const TAPS5: usize = 5;
/// Bytes of images a weight-grad pass streams before summing its partial
/// dot products: the pass re-reads them once per tile, from L2.
const WG_CHUNK_BYTES: usize = 256 << 10;

/// `LANES` (or, at the end of a row, fewer) consecutive output pixels of one
/// output row, and where their patches start in an input plane.
#[derive(Clone, Copy)]
struct Span {
    /// Offset in the input plane of the top-left pixel of the first patch.
    x: usize,
    /// Offset of the first pixel in the output plane.
    y: usize,
    /// Pixels, 1..=LANES.
    width: usize,
}

impl Span {
    fn full(&self) -> bool {
        self.width == LANES
    }
}

/// The spans of an output plane, row by row.
fn spans(g: &ConvDims) -> impl Iterator<Item = Span> + '_ {
    (0..g.oh()).flat_map(move |oh| {
        (0..g.ow()).step_by(LANES).map(move |ow| Span {
            x: oh * g.w + ow,
            y: oh * g.ow() + ow,
            width: LANES.min(g.ow() - ow),
        })
    })
}

/// A tile's spans: two full ones, or one of any width.
#[derive(Clone, Copy)]
enum Tile {
    Pair([Span; 2]),
    Single(Span),
}

/// The tiles of an output plane: consecutive full spans two at a time, each
/// other span (a partial one, or a full one left without a partner) alone.
/// (An iterator, not a callback: a closure's body would be compiled outside
/// the vectorized copy of the kernel.)
fn span_tiles(g: &ConvDims) -> impl Iterator<Item = Tile> + '_ {
    let mut spans = spans(g);
    let mut pending: Option<Span> = None;
    std::iter::from_fn(move || loop {
        match (pending.take(), spans.next()) {
            (Some(p), Some(s)) if p.full() && s.full() => return Some(Tile::Pair([p, s])),
            (Some(p), s) => {
                pending = s;
                return Some(Tile::Single(p));
            }
            (None, Some(s)) => pending = Some(s),
            (None, None) => return None,
        }
    })
}

/// Vector `v` of `s`: the first `width` values, zero-padded unless `FULL`.
#[inline(always)]
fn load_span<const FULL: bool>(s: &[f32], width: usize) -> V8 {
    if FULL {
        load(s)
    } else {
        load_partial(s, width)
    }
}

/// `packed[b][k][r] = w[b·ROWS + r][k]`, zero for filters past `F`: the
/// `ROWS` filter weights a forward tile broadcasts per step, side by side.
fn pack_forward_weights(g: &ConvDims, w: &[f32], packed: &mut [f32]) {
    let k = g.k();
    for (b, block) in packed.chunks_exact_mut(k * ROWS).enumerate() {
        for (kk, dst) in block.chunks_exact_mut(ROWS).enumerate() {
            for (r, d) in dst.iter_mut().enumerate() {
                let f = b * ROWS + r;
                *d = if f < g.f { w[f * k + kk] } else { 0.0 };
            }
        }
    }
}

/// Elements of the packed weights of [`forward`].
pub(super) fn forward_packed_len(g: &ConvDims) -> usize {
    g.f.div_ceil(ROWS) * g.k() * ROWS
}

/// `acc[r][v] = Σ_k w[f0 + r][k] · patch_k(span v)` over all filter weights.
#[inline(always)]
fn forward_tile<const FMA: bool, const NV: usize, const FULL: bool>(
    g: &ConvDims,
    x: &[f32],
    packed: &[f32],
    spans: [Span; NV],
    step: usize,
) -> [[V8; NV]; ROWS] {
    let mut acc = [[[0.0; LANES]; NV]; ROWS];
    if FULL && g.kw == TAPS5 {
        // The common 5-wide kernel, with the fewest bounds checks: per input
        // row, one fixed-size window per span and one block of packed
        // weights, read at offsets known to fit them.
        let off: [usize; TAPS5] = std::array::from_fn(|j| (j * step).min(TAPS5 - 1));
        let mut weights = packed.chunks_exact(TAPS5 * ROWS);
        for c in 0..g.c {
            for i in 0..g.kh {
                let row = c * g.h * g.w + i * g.w;
                let a = weights.next().expect("K packed weights");
                let win: [&[f32; LANES - 1 + TAPS5]; NV] =
                    std::array::from_fn(|v| x[row + spans[v].x..].first_chunk().expect("a full window"));
                for (j, &off) in off.iter().enumerate() {
                    let b: [V8; NV] = std::array::from_fn(|v| load(&win[v][off..]));
                    for (acc, &a) in acc.iter_mut().zip(&a[j * ROWS..][..ROWS]) {
                        for (acc, b) in acc.iter_mut().zip(&b) {
                            fma_scalar::<FMA>(acc, a, b);
                        }
                    }
                }
            }
        }
        return acc;
    }
    let mut weights = packed.chunks_exact(ROWS);
    for c in 0..g.c {
        for i in 0..g.kh {
            let row = c * g.h * g.w + i * g.w;
            // The KW shifted vectors of a span all lie in this input row.
            let rows: [&[f32]; NV] = std::array::from_fn(|v| &x[row + spans[v].x..][..g.kw - 1 + spans[v].width]);
            for j in 0..g.kw {
                let a = weights.next().expect("K packed weights");
                let b: [V8; NV] = std::array::from_fn(|v| load_span::<FULL>(&rows[v][j..], spans[v].width));
                for (acc, &a) in acc.iter_mut().zip(a) {
                    for (acc, b) in acc.iter_mut().zip(&b) {
                        fma_scalar::<FMA>(acc, a, b);
                    }
                }
            }
        }
    }
    acc
}

/// One image: `y[f] = Σ_k w[f][k] · patch_k (+ bias[f])`.
struct ForwardImage<'a> {
    g: &'a ConvDims,
    x: &'a [f32],
    packed: &'a [f32],
    bias: Option<&'a [f32]>,
    y: &'a mut [f32],
    /// 1; see [`WeightGradTile::step`].
    step: usize,
}

impl ForwardImage<'_> {
    #[inline(always)]
    fn tile<const FMA: bool, const NV: usize, const FULL: bool>(
        &mut self,
        f0: usize,
        packed: &[f32],
        spans: [Span; NV],
    ) {
        let g = self.g;
        let acc = forward_tile::<FMA, NV, FULL>(g, self.x, packed, spans, self.step);
        for (r, acc) in acc.iter().enumerate().take(g.f - f0) {
            let b = self.bias.map_or(0.0, |b| b[f0 + r]);
            for (s, acc) in spans.iter().zip(acc) {
                let dst = &mut self.y[(f0 + r) * g.p() + s.y..][..s.width];
                for (d, a) in dst.iter_mut().zip(acc) {
                    *d = a + b;
                }
            }
        }
    }
}

impl Vectorized for ForwardImage<'_> {
    type Output = ();
    #[inline(always)]
    fn run<const FMA: bool>(mut self) {
        let g = self.g;
        let packed = self.packed;
        for (b, packed) in packed.chunks_exact(g.k() * ROWS).enumerate() {
            let f0 = b * ROWS;
            for t in span_tiles(g) {
                match t {
                    Tile::Pair(s) => self.tile::<FMA, 2, true>(f0, packed, s),
                    Tile::Single(s) if s.full() => self.tile::<FMA, 1, true>(f0, packed, [s]),
                    Tile::Single(s) => self.tile::<FMA, 1, false>(f0, packed, [s]),
                }
            }
        }
    }
}

pub(super) fn forward(g: &ConvDims, x: &[f32], w: &[f32], bias: Option<&[f32]>, packed: &mut [f32], y: &mut [f32]) {
    pack_forward_weights(g, w, packed);
    let packed = &*packed;
    y.par_chunks_mut(g.f * g.p())
        .zip(x.par_chunks(g.c * g.h * g.w))
        .for_each(|(y, x)| {
            vectorized(ForwardImage {
                g,
                x,
                packed,
                bias,
                y,
                step: 1,
            })
        });
}

/// The products of `dy[fs[r]]` with the patch entries of the filter weights
/// `base + tap(t)` (one input row, consecutive columns), over the images of
/// `gy`/`x`, as `LANES` partial sums each. One call is one tile, compiled on
/// its own so that its 10 accumulators stay in registers. `taps` is the
/// number of real taps: where fewer than `WG_TAPS` remain in the kernel row
/// (`CLAMP`), the last one is repeated. `TAIL`: rows end in a partial span.
struct WeightGradTile<'a, const CLAMP: bool, const TAIL: bool> {
    g: &'a ConvDims,
    gy: &'a [f32],
    x: &'a [f32],
    fs: [usize; WG_FILTERS],
    base: usize,
    taps: usize,
    /// Always 1, but not a constant to LLVM: given constant offsets into one
    /// input row it builds the five overlapping shifted vectors from one wide
    /// load and a dozen shuffles instead of loading each (unaligned loads are
    /// cheap).
    step: usize,
}

impl<const CLAMP: bool, const TAIL: bool> WeightGradTile<'_, CLAMP, TAIL> {
    #[inline(always)]
    fn tap(&self, t: usize) -> usize {
        if CLAMP {
            t.min(self.taps - 1) * self.step
        } else {
            t * self.step
        }
    }
}

impl<const CLAMP: bool, const TAIL: bool> Vectorized for WeightGradTile<'_, CLAMP, TAIL> {
    type Output = [[V8; WG_TAPS]; WG_FILTERS];
    #[inline(always)]
    fn run<const FMA: bool>(self) -> Self::Output {
        let g = self.g;
        let mut acc = [[[0.0; LANES]; WG_TAPS]; WG_FILTERS];
        let p = g.p();
        let full = g.ow() - g.ow() % LANES;
        let reach = self.tap(WG_TAPS - 1) + 1;
        for (gy, x) in self.gy.chunks_exact(g.f * p).zip(self.x.chunks_exact(g.c * g.h * g.w)) {
            let gy: [&[f32]; WG_FILTERS] = std::array::from_fn(|r| &gy[self.fs[r] * p..][..p]);
            let x = &x[self.base..];
            if !CLAMP && !TAIL {
                // The common case, with the fewest bounds checks (the loop is
                // bound by them otherwise): the spans tile `dy`'s planes, so
                // one flat loop walks them, and the taps read one fixed-size
                // window of the input row at offsets known to fit it.
                let off: [usize; WG_TAPS] = std::array::from_fn(|t| self.tap(t).min(WG_TAPS - 1));
                let (per_row, mut col, mut xo) = (g.ow() / LANES, 0, 0);
                for (a0, a1) in gy[0].chunks_exact(LANES).zip(gy[1].chunks_exact(LANES)) {
                    let xs: &[f32; LANES - 1 + WG_TAPS] = x[xo..].first_chunk().expect("a full window");
                    let a = [load(a0), load(a1)];
                    let b: [V8; WG_TAPS] = std::array::from_fn(|t| load(&xs[off[t]..]));
                    for (acc, a) in acc.iter_mut().zip(&a) {
                        for (acc, b) in acc.iter_mut().zip(&b) {
                            fma_vector::<FMA>(acc, a, b);
                        }
                    }
                    xo += LANES;
                    col += 1;
                    if col == per_row {
                        col = 0;
                        xo += g.w - g.ow();
                    }
                }
                continue;
            }
            for oh in 0..g.oh() {
                let (gy, x): ([&[f32]; WG_FILTERS], &[f32]) =
                    (std::array::from_fn(|r| &gy[r][oh * g.ow()..]), &x[oh * g.w..]);
                for ow in (0..full).step_by(LANES) {
                    let xs = &x[ow..][..LANES - 1 + reach];
                    let a: [V8; WG_FILTERS] = std::array::from_fn(|r| load(&gy[r][ow..]));
                    let b: [V8; WG_TAPS] = std::array::from_fn(|t| load(&xs[self.tap(t)..]));
                    for (acc, a) in acc.iter_mut().zip(&a) {
                        for (acc, b) in acc.iter_mut().zip(&b) {
                            fma_vector::<FMA>(acc, a, b);
                        }
                    }
                }
                if TAIL {
                    let width = g.ow() - full;
                    let a: [V8; WG_FILTERS] = std::array::from_fn(|r| load_partial(&gy[r][full..], width));
                    let b: [V8; WG_TAPS] = std::array::from_fn(|t| load_partial(&x[full + self.tap(t)..], width));
                    for (acc, a) in acc.iter_mut().zip(&a) {
                        for (acc, b) in acc.iter_mut().zip(&b) {
                            fma_vector::<FMA>(acc, a, b);
                        }
                    }
                }
            }
        }
        acc
    }
}

/// One group of images: `partial[f][k] = Σₙ Σ_p dy[n][f][p] · patch_k(p)`.
fn weight_grad_group(g: &ConvDims, gy: &[f32], x: &[f32], out: &mut [f32]) {
    let (k, taps) = (g.k(), g.kh * g.kw);
    let (image_x, image_y) = (g.c * g.h * g.w, g.f * g.p());
    let images = (WG_CHUNK_BYTES / (4 * (image_x + image_y))).max(1);
    out.fill(0.0);
    for (gy, x) in gy.chunks(images * image_y).zip(x.chunks(images * image_x)) {
        for f0 in (0..g.f).step_by(WG_FILTERS) {
            // Tiles past the last filter or tap repeat it; their sums are dropped.
            let fs = std::array::from_fn(|r| (f0 + r).min(g.f - 1));
            for c in 0..g.c {
                for i in 0..g.kh {
                    for j0 in (0..g.kw).step_by(WG_TAPS) {
                        let base = c * g.h * g.w + i * g.w + j0;
                        let taps_here = g.kw - j0;
                        let acc = match (taps_here < WG_TAPS, !g.ow().is_multiple_of(LANES)) {
                            (false, false) => vectorized(WeightGradTile::<false, false> {
                                g,
                                gy,
                                x,
                                fs,
                                base,
                                taps: taps_here,
                                step: 1,
                            }),
                            (false, true) => vectorized(WeightGradTile::<false, true> {
                                g,
                                gy,
                                x,
                                fs,
                                base,
                                taps: taps_here,
                                step: 1,
                            }),
                            (true, false) => vectorized(WeightGradTile::<true, false> {
                                g,
                                gy,
                                x,
                                fs,
                                base,
                                taps: taps_here,
                                step: 1,
                            }),
                            (true, true) => vectorized(WeightGradTile::<true, true> {
                                g,
                                gy,
                                x,
                                fs,
                                base,
                                taps: taps_here,
                                step: 1,
                            }),
                        };
                        for (r, acc) in acc.iter().enumerate().take(g.f - f0) {
                            let row = (f0 + r) * k + c * taps + i * g.kw + j0;
                            for (o, acc) in out[row..][..WG_TAPS.min(g.kw - j0)].iter_mut().zip(acc) {
                                *o += hsum(acc);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// `dW = Σₙ dyₙ · patchesₙᵀ`: each group of images sums into its own
/// partial, then the partials are added, so threads never share an
/// accumulator.
pub(super) fn weight_grad(g: &ConvDims, per_group: usize, gy: &[f32], x: &[f32], partials: &mut [f32], gw: &mut [f32]) {
    let k = g.k();
    partials
        .par_chunks_mut(g.f * k)
        .zip(
            gy.par_chunks(per_group * g.f * g.p())
                .zip(x.par_chunks(per_group * g.c * g.h * g.w)),
        )
        .for_each(|(partial, (gy, x))| weight_grad_group(g, gy, x, partial));
    gw.copy_from_slice(&partials[..g.f * k]);
    for partial in partials.chunks_exact(g.f * k).skip(1) {
        gw.iter_mut().zip(partial).for_each(|(a, b)| *a += b);
    }
}

pub(super) fn bias_grad(g: &ConvDims, gy: &[f32], gb: &mut [f32]) {
    let p = g.p();
    gb.fill(0.0);
    for image in gy.chunks_exact(g.f * p) {
        for (b, plane) in gb.iter_mut().zip(image.chunks_exact(p)) {
            *b += plane_sum(plane);
        }
    }
}

/// `Σ plane` in [`LANES`] partial sums (element `i` into partial
/// `i % LANES`), added pairwise at the end: a fixed order, so the same bits
/// every run and at any thread count. One chain of additions (`sum()`)
/// cannot be vectorised, and was a twentieth of a SqueezeNet step.
fn plane_sum(plane: &[f32]) -> f32 {
    let mut acc = [0.0f32; LANES];
    let whole = plane.chunks_exact(LANES);
    let tail = whole.remainder();
    for v in whole {
        for (a, x) in acc.iter_mut().zip(v) {
            *a += x;
        }
    }
    for (a, x) in acc.iter_mut().zip(tail) {
        *a += x;
    }
    hsum(&acc)
}

/// `packed[ij][cb][f][r] = w[f][cb·ROWS + r][ij]` (`ij` a kernel position),
/// zero for channels past `C`: the `ROWS` channels an input-grad tile
/// broadcasts per filter, side by side.
fn pack_input_grad_weights(g: &ConvDims, w: &[f32], packed: &mut [f32]) {
    let (k, taps, blocks) = (g.k(), g.kh * g.kw, g.c.div_ceil(ROWS));
    for (t, block) in packed.chunks_exact_mut(g.f * ROWS).enumerate() {
        let (ij, cb) = (t / blocks, t % blocks);
        for (f, dst) in block.chunks_exact_mut(ROWS).enumerate() {
            for (r, d) in dst.iter_mut().enumerate() {
                let c = cb * ROWS + r;
                *d = if c < g.c { w[f * k + c * taps + ij] } else { 0.0 };
            }
        }
    }
}

/// Elements of the packed weights of [`input_grad`].
pub(super) fn input_grad_packed_len(g: &ConvDims) -> usize {
    g.kh * g.kw * g.c.div_ceil(ROWS) * g.f * ROWS
}

/// One image: for every kernel position `(i, j)` and channel `c`,
/// `dx[c][oh + i][ow + j] += Σ_f w[f][c][i][j] · dy[f][oh][ow]`.
struct InputGradImage<'a> {
    g: &'a ConvDims,
    gy: &'a [f32],
    packed: &'a [f32],
    gx: &'a mut [f32],
}

impl InputGradImage<'_> {
    #[inline(always)]
    fn tile<const FMA: bool, const NV: usize, const FULL: bool>(
        &mut self,
        (i, j, c0): (usize, usize, usize),
        packed: &[f32],
        spans: [Span; NV],
    ) {
        let g = self.g;
        let mut acc = [[[0.0; LANES]; NV]; ROWS];
        for (gy, a) in self.gy.chunks_exact(g.p()).zip(packed.chunks_exact(ROWS)) {
            let b: [V8; NV] = std::array::from_fn(|v| load_span::<FULL>(&gy[spans[v].y..], spans[v].width));
            for (acc, &a) in acc.iter_mut().zip(a) {
                for (acc, b) in acc.iter_mut().zip(&b) {
                    fma_scalar::<FMA>(acc, a, b);
                }
            }
        }
        let plane = g.h * g.w;
        for (r, acc) in acc.iter().enumerate().take(g.c - c0) {
            for (s, acc) in spans.iter().zip(acc) {
                add_to::<FULL>(&mut self.gx[(c0 + r) * plane + s.x + i * g.w + j..], acc, s.width);
            }
        }
    }
}

impl Vectorized for InputGradImage<'_> {
    type Output = ();
    #[inline(always)]
    fn run<const FMA: bool>(mut self) {
        let g = self.g;
        self.gx.fill(0.0);
        let blocks = g.c.div_ceil(ROWS);
        let packed = self.packed;
        for (t, packed) in packed.chunks_exact(g.f * ROWS).enumerate() {
            let (ij, cb) = (t / blocks, t % blocks);
            let at = (ij / g.kw, ij % g.kw, cb * ROWS);
            for t in span_tiles(g) {
                match t {
                    Tile::Pair(s) => self.tile::<FMA, 2, true>(at, packed, s),
                    Tile::Single(s) if s.full() => self.tile::<FMA, 1, true>(at, packed, [s]),
                    Tile::Single(s) => self.tile::<FMA, 1, false>(at, packed, [s]),
                }
            }
        }
    }
}

/// `dx = col2im(Wᵀ · dy)` without the patch matrix, image by image.
pub(super) fn input_grad(g: &ConvDims, gy: &[f32], w: &[f32], packed: &mut [f32], gx: &mut [f32]) {
    pack_input_grad_weights(g, w, packed);
    let packed = &*packed;
    gx.par_chunks_mut(g.c * g.h * g.w)
        .zip(gy.par_chunks(g.f * g.p()))
        .for_each(|(gx, gy)| vectorized(InputGradImage { g, gy, packed, gx }));
}

#[cfg(test)]
mod tests {
    //! The op's gradient checks use small planes, whose output rows are all
    //! shorter than a vector; these compare every kernel path (full spans in
    //! pairs and alone, partial spans, 5-wide and other kernels, ragged tiles)
    //! with direct loops.
    use super::*;
    use crate::ops::gradcheck::assert_near as close;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        crate::ops::gradcheck::values(n, seed, -0.5, 0.5)
    }

    #[test]
    fn kernels_match_direct_loops() {
        // (n, c, h, w, f, kh, kw): conv2 and conv1 of the MNIST model, an odd
        // span count, partial spans, kernels narrower and wider than 5.
        let cases = [
            (3, 10, 12, 12, 20, 5, 5),
            (2, 1, 28, 28, 10, 5, 5),
            (2, 3, 12, 20, 7, 5, 5),
            (3, 2, 9, 21, 6, 3, 4),
            (2, 4, 10, 30, 3, 2, 7),
        ];
        for (n, c, h, w, f, kh, kw) in cases {
            let (oh, ow) = (h - kh + 1, w - kw + 1);
            let g = ConvDims::new([n, c, h, w], [f, kh, kw], 1, 0, crate::memory::DType::F32, false);
            assert_eq!(g.output_hw(), (oh, ow));
            let (k, p) = (g.k(), g.p());
            let x = values(n * c * h * w, 1);
            let wt = values(f * k, 2);
            let bias = values(f, 3);
            let gy = values(n * f * p, 4);
            let at = |n: usize, c: usize, y: usize, xx: usize| x[((n * g.c + c) * h + y) * w + xx];

            let mut packed = vec![0.0; forward_packed_len(&g)];
            let mut y = vec![0.0; n * f * p];
            forward(&g, &x, &wt, Some(&bias), &mut packed, &mut y);
            let mut want = vec![0.0; n * f * p];
            for (i, want) in want.iter_mut().enumerate() {
                let (nn, ff, o) = (i / (f * p), i / p % f, i % p);
                let (oy, ox) = (o / ow, o % ow);
                *want = bias[ff];
                for kk in 0..k {
                    let (cc, ij) = (kk / (kh * kw), kk % (kh * kw));
                    *want += wt[ff * k + kk] * at(nn, cc, oy + ij / kw, ox + ij % kw);
                }
            }
            close(&y, &want, "y");

            let per_group = n.div_ceil(2);
            let mut partials = vec![0.0; n.div_ceil(per_group) * f * k];
            let mut gw = vec![0.0; f * k];
            weight_grad(&g, per_group, &gy, &x, &mut partials, &mut gw);
            let mut want = vec![0.0; f * k];
            for (i, want) in want.iter_mut().enumerate() {
                let (ff, kk) = (i / k, i % k);
                let (cc, ij) = (kk / (kh * kw), kk % (kh * kw));
                for nn in 0..n {
                    for o in 0..p {
                        *want += gy[(nn * f + ff) * p + o] * at(nn, cc, o / ow + ij / kw, o % ow + ij % kw);
                    }
                }
            }
            close(&gw, &want, "dW");

            let mut packed = vec![0.0; input_grad_packed_len(&g)];
            let mut gx = vec![f32::NAN; n * c * h * w];
            input_grad(&g, &gy, &wt, &mut packed, &mut gx);
            let mut want = vec![0.0; n * c * h * w];
            for nn in 0..n {
                for ff in 0..f {
                    for o in 0..p {
                        for kk in 0..k {
                            let (cc, ij) = (kk / (kh * kw), kk % (kh * kw));
                            let (yy, xx) = (o / ow + ij / kw, o % ow + ij % kw);
                            want[((nn * c + cc) * h + yy) * w + xx] += wt[ff * k + kk] * gy[(nn * f + ff) * p + o];
                        }
                    }
                }
            }
            close(&gx, &want, "dx");
        }
    }
}
