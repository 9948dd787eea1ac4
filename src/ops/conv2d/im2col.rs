//! Convolutions with a stride or padding (ResNet's 3×3 pad-1 and 1×1
//! layers, stride 1 or 2) as explicit patch matrices and the sgemm.
//!
//! Each worker takes a group of images and owns one `[K, P]` patch matrix
//! (`K = C·KH·KW` filter weights, `P = OH·OW` output pixels) of step-region
//! scratch: it writes an image's patches into it (`im2col`, zeros where a
//! patch covers padding) and multiplies. The input gradient goes the other
//! way: `Wᵀ · dy` into the matrix, then `col2im` adds each entry back onto
//! the input pixel it came from. Writing the matrix costs `K·P` per image
//! against the product's `F·K·P`, so the product dominates, provided the
//! writing is not bookkeeping per output row: narrow output rows (strided
//! layers, small maps) go through a bordered copy of each plane instead
//! (`bordered.rs`). On small maps the weight gradient writes several
//! images' matrices side by side, one product over all their pixels (see
//! `images_side_by_side`).
//!
//! Workers share nothing they write: each has its own matrix, its own
//! images' outputs and, for the weight gradient, its own partial sum; the
//! partials are added in a fixed order, so results do not depend on timing.

use super::bordered;
use crate::backend::cpu::matmul::{matmul, Mat};
use crate::backend::ConvDims;
use rayon::prelude::*;

/// The output columns whose input column `ox·stride + j − pad` lies inside
/// an input row of `len` pixels, for kernel column `j`: `lo..hi` (empty
/// when none does). The same formula gives the output rows for kernel row `i`.
fn inside(g: &ConvDims, j: usize, len: usize, out: usize) -> (usize, usize) {
    let lo = g.padding.saturating_sub(j).div_ceil(g.stride).min(out);
    let hi = (len + g.padding).saturating_sub(j).div_ceil(g.stride).clamp(lo, out);
    (lo, hi)
}

/// `col[c, i, j][oy·OW + ox] = x[c][oy·s + i − pad][ox·s + j − pad]`, zero
/// where that lies in the padding, with `col`'s rows `ld` apart. `x` is one
/// image.
fn im2col(g: &ConvDims, x: &[f32], col: &mut [f32], ld: usize) {
    if !bordered::im2col(g, x, col, ld) {
        im2col_by_rows(g, x, col, ld);
    }
}

/// [`im2col`]'s general form, output row by output row.
fn im2col_by_rows(g: &ConvDims, x: &[f32], col: &mut [f32], ld: usize) {
    let (plane, s) = (g.h * g.w, g.stride);
    for_taps(g, col, ld, |c, (i, j), (rows, cols), row| {
        let x = &x[c * plane..(c + 1) * plane];
        if rows.0 == rows.1 || cols.0 == cols.1 {
            // (With a large padding a kernel tap can miss the input in every patch.)
            row.fill(0.0);
        } else if s == 1 && g.ow() == g.w {
            shifted_plane(g, i, j, rows, cols, x, row);
        } else {
            for (oy, out) in row.chunks_exact_mut(g.ow()).enumerate() {
                if !(rows.0..rows.1).contains(&oy) {
                    out.fill(0.0);
                    continue;
                }
                let src = &x[(oy * s + i - g.padding) * g.w..][..g.w];
                let (before, rest) = out.split_at_mut(cols.0);
                let (within, after) = rest.split_at_mut(cols.1 - cols.0);
                zero(before);
                zero(after);
                // The first input column read, then every `s`-th.
                let first = cols.0 * s + j - g.padding;
                match s {
                    1 => within.copy_from_slice(&src[first..first + within.len()]),
                    2 => every::<2>(&src[first..], within),
                    _ => within
                        .iter_mut()
                        .zip(src[first..].iter().step_by(s))
                        .for_each(|(o, v)| *o = *v),
                }
            }
        }
    });
}

/// Calls `f(c, (i, j), (rows, cols), row)` for every row of the patch
/// matrix `col` (rows `ld` apart, `P` long): channel `c`, kernel tap `(i, j)`, the output rows and
/// columns whose patches read that tap inside the input ([`inside`]),
/// and the row. Those ranges are worked out once per tap, not per row:
/// their divisions cost more than a late layer's short rows.
fn for_taps(g: &ConvDims, col: &mut [f32], ld: usize, mut f: impl FnMut(usize, (usize, usize), Ranges, &mut [f32])) {
    let (p, taps) = (g.p(), g.kh * g.kw);
    for i in 0..g.kh {
        let rows = inside(g, i, g.h, g.oh());
        for j in 0..g.kw {
            let cols = inside(g, j, g.w, g.ow());
            for c in 0..g.c {
                let kk = c * taps + i * g.kw + j;
                f(c, (i, j), (rows, cols), &mut col[kk * ld..][..p]);
            }
        }
    }
}

/// Zeroes `s`: most often a padding's few values at a row's end, written
/// here one by one. `fill` calls `memset` for them, and at a late layer's
/// 4-pixel rows those calls were most of a patch matrix's time.
#[inline(always)]
fn zero(s: &mut [f32]) {
    match s {
        [] => {}
        [a] => *a = 0.0,
        [a, b] => (*a, *b) = (0.0, 0.0),
        [a, b, c] => (*a, *b, *c) = (0.0, 0.0, 0.0),
        _ => s.fill(0.0),
    }
}

/// The output rows and columns a tap reads inside the input, `lo..hi` each.
type Ranges = ((usize, usize), (usize, usize));

/// `out[q] = src[q·S]`: a constant stride over whole chunks, which LLVM
/// vectorises with shuffles, then the last, short one. (`step_by` with a
/// stride known only at run time stays scalar, and so did `chunks`, whose
/// every chunk may be short: a quarter of the patch matrix's own time in
/// ResNet-18's stride-2 layers.)
#[inline(always)]
fn every<const S: usize>(src: &[f32], out: &mut [f32]) {
    let whole = out.len().min(src.len() / S);
    let (body, tail) = out.split_at_mut(whole);
    for (o, v) in body.iter_mut().zip(src.chunks_exact(S)) {
        *o = v[0];
    }
    for (o, v) in tail.iter_mut().zip(src[whole * S..].chunks(S)) {
        *o = v[0];
    }
}

/// [`im2col`]'s row for tap `(i, j)` when output rows are input rows'
/// width at stride 1 (ResNet's 3×3 pad-1 and 1×1 layers): the patches'
/// pixels are the plane shifted by one offset, so the valid rows are one
/// copy, after which the columns a row's shift wrapped into the next row
/// (at most `pad` at each end) are zeroed.
fn shifted_plane(
    g: &ConvDims,
    i: usize,
    j: usize,
    rows: (usize, usize),
    cols: (usize, usize),
    x: &[f32],
    row: &mut [f32],
) {
    let (from, to, shifted) = shifted_span(g, i, j, rows, cols);
    row[from..to].copy_from_slice(&x[shifted..shifted + (to - from)]);
    zero(&mut row[..from]);
    zero(&mut row[to..]);
    zero_wrapped(g.w, rows, cols, row);
}

/// The shifted-plane form's run of a tap's row: output indices
/// `from..to`, from the first valid patch to the last, reading input
/// indices from `shifted` on (`q + i·W + j − pad·(W + 1)`).
fn shifted_span(g: &ConvDims, i: usize, j: usize, rows: (usize, usize), cols: (usize, usize)) -> (usize, usize, usize) {
    let w = g.w;
    let (from, to) = (rows.0 * w + cols.0, (rows.1 - 1) * w + cols.1);
    (from, to, from + i * w + j - g.padding * (w + 1))
}

/// Zeroes the columns of each valid output row (rows `w` wide) that lie
/// outside `cols`: where the shift wrapped into the neighbouring row.
/// A padding of 1 (ResNet's 3×3 layers) wraps one column at one end, a
/// store per row; the general case slices each row's two ends.
fn zero_wrapped(w: usize, rows: (usize, usize), cols: (usize, usize), row: &mut [f32]) {
    let valid = &mut row[rows.0 * w..rows.1 * w];
    match (cols.0, w - cols.1) {
        (0, 0) => {}
        (1, 0) => valid.iter_mut().step_by(w).for_each(|v| *v = 0.0),
        (0, 1) => valid.iter_mut().skip(w - 1).step_by(w).for_each(|v| *v = 0.0),
        _ => {
            for out in valid.chunks_exact_mut(w) {
                zero(&mut out[..cols.0]);
                zero(&mut out[cols.1..]);
            }
        }
    }
}

/// The adjoint of [`im2col`]: `gx` (one image) is overwritten with the sum,
/// over every patch-matrix entry, of that entry at the input pixel it was
/// read from; entries in the padding are dropped. `col` is scratch: the
/// shifted-plane form zeroes its entries in the padding before adding.
fn col2im(g: &ConvDims, col: &mut [f32], gx: &mut [f32]) {
    if !bordered::col2im(g, col, gx) {
        col2im_by_rows(g, col, gx);
    }
}

/// [`col2im`]'s general form, output row by output row.
fn col2im_by_rows(g: &ConvDims, col: &mut [f32], gx: &mut [f32]) {
    let (plane, s) = (g.h * g.w, g.stride);
    gx.fill(0.0);
    for_taps(g, col, g.p(), |c, (i, j), (rows, cols), row| {
        if rows.0 == rows.1 || cols.0 == cols.1 {
            return;
        }
        let gx = &mut gx[c * plane..(c + 1) * plane];
        if s == 1 && g.ow() == g.w {
            zero_wrapped(g.w, rows, cols, row);
            let (from, to, shifted) = shifted_span(g, i, j, rows, cols);
            let dst = &mut gx[shifted..shifted + (to - from)];
            dst.iter_mut().zip(&row[from..to]).for_each(|(d, v)| *d += v);
            return;
        }
        for oy in rows.0..rows.1 {
            let dst = &mut gx[(oy * s + i - g.padding) * g.w..][..g.w];
            let first = cols.0 * s + j - g.padding;
            let within = &row[oy * g.ow() + cols.0..oy * g.ow() + cols.1];
            for (d, v) in dst[first..].iter_mut().step_by(s).zip(within) {
                *d += v;
            }
        }
    });
}

/// A 1×1 convolution at stride 1 without padding: its patch matrix is
/// the image itself, read in place (SqueezeNet's and ResNet-50's).
fn pointwise(g: &ConvDims) -> bool {
    (g.kh, g.kw, g.stride, g.padding) == (1, 1, 1, 0)
}

/// Elements of one patch matrix; one element, never read, where the
/// image is its own (so that every worker still gets a chunk).
fn matrix_len(g: &ConvDims) -> usize {
    if pointwise(g) {
        1
    } else {
        g.k() * g.p()
    }
}

/// Scratch of [`forward`] for `groups` workers: a patch matrix each.
pub(super) fn forward_scratch_len(g: &ConvDims, groups: usize) -> usize {
    groups * matrix_len(g)
}

/// Scratch of [`input_grad`]: a patch matrix each.
pub(super) fn input_grad_scratch_len(g: &ConvDims, groups: usize) -> usize {
    groups * matrix_len(g)
}

/// Scratch of [`weight_grad`]: a partial `[F, K]` sum and a patch matrix
/// each, or the patch matrices and `dy` of the images it puts side by side.
pub(super) fn weight_grad_scratch_len(g: &ConvDims, groups: usize) -> usize {
    let side_by_side = images_side_by_side(g);
    let each = if side_by_side > 1 {
        (g.k() + g.f) * side_by_side * g.p()
    } else {
        matrix_len(g)
    };
    groups * (g.f * g.k() + each)
}

/// Images whose patch matrices the weight gradient puts side by side, for
/// one product over about 256 of their pixels: a 4×4 map's 16 pixels a
/// product are too short a k for the product to run at speed. ResNet-18/8
/// (its 7×7 and 4×4 weight gradients), 3,000 MNIST images, alternated 3
/// times: one image at a time against 64 pixels, 2.857 → 2.836 s an epoch
/// at one thread, 1.638 → 1.549 at two; 64 against 256, 2.951 → 2.926 and
/// 1.539 → 1.486; 1,024 no faster. One image where it is its own matrix.
fn images_side_by_side(g: &ConvDims) -> usize {
    if pointwise(g) {
        1
    } else {
        (256 / g.p().max(1)).clamp(1, g.n.max(1))
    }
}

/// Image `x`'s patch matrix: written into `col`, or `x` itself where
/// the convolution is [`pointwise`].
fn patch_matrix<'a>(g: &ConvDims, x: &'a [f32], col: &'a mut [f32]) -> &'a [f32] {
    if pointwise(g) {
        x
    } else {
        im2col(g, x, col, g.p());
        col
    }
}

/// `y = W · col (+ bias)`, image by image; `per_group` images per worker.
pub(super) fn forward(
    g: &ConvDims,
    per_group: usize,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    cols: &mut [f32],
    y: &mut [f32],
) {
    let (k, p) = (g.k(), g.p());
    let (image_x, image_y) = (g.c * g.h * g.w, g.f * p);
    // Fewer matrices than groups would leave the last images unconvolved.
    assert!(
        cols.len() >= forward_scratch_len(g, g.n.div_ceil(per_group)),
        "conv2d: scratch sized for other threads"
    );
    cols.par_chunks_mut(matrix_len(g))
        .zip(
            y.par_chunks_mut(per_group * image_y)
                .zip(x.par_chunks(per_group * image_x)),
        )
        .for_each(|(col, (y, x))| {
            for (y, x) in y.chunks_exact_mut(image_y).zip(x.chunks_exact(image_x)) {
                let patches = patch_matrix(g, x, col);
                matmul(y, Mat::rows(w, g.f, k), Mat::rows(patches, k, p), false);
                if let Some(bias) = bias {
                    for (row, b) in y.chunks_exact_mut(p).zip(bias) {
                        row.iter_mut().for_each(|v| *v += b);
                    }
                }
            }
        });
}

/// `dW = Σₙ dyₙ · colₙᵀ`: each worker sums its images into its own partial,
/// then the partials are added in order.
pub(super) fn weight_grad(g: &ConvDims, per_group: usize, gy: &[f32], x: &[f32], scratch: &mut [f32], gw: &mut [f32]) {
    let (k, p) = (g.k(), g.p());
    let (image_x, image_y) = (g.c * g.h * g.w, g.f * p);
    // Fewer matrices than groups would leave the last images out.
    let groups = g.n.div_ceil(per_group);
    assert!(
        scratch.len() >= weight_grad_scratch_len(g, groups),
        "conv2d: scratch sized for other threads"
    );
    let (partials, cols) = scratch.split_at_mut(groups * g.f * k);
    let side_by_side = images_side_by_side(g);
    let each = (weight_grad_scratch_len(g, 1) - g.f * k).max(1);
    partials
        .par_chunks_mut(g.f * k)
        .zip(cols.par_chunks_mut(each))
        .zip(
            gy.par_chunks(per_group * image_y)
                .zip(x.par_chunks(per_group * image_x)),
        )
        .for_each(|((partial, col), (gy, x))| {
            if side_by_side == 1 {
                for (i, (gy, x)) in gy.chunks_exact(image_y).zip(x.chunks_exact(image_x)).enumerate() {
                    let patches = patch_matrix(g, x, col);
                    matmul(partial, Mat::rows(gy, g.f, p), Mat::rows(patches, k, p).t(), i > 0);
                }
                return;
            }
            // Up to `side_by_side` images at a time: their patch matrices
            // side by side in `col` and their `dy` side by side in `dys`,
            // one product over all their pixels.
            let (col, dys) = col.split_at_mut(k * side_by_side * p);
            for (i, (gy, x)) in gy
                .chunks(side_by_side * image_y)
                .zip(x.chunks(side_by_side * image_x))
                .enumerate()
            {
                let width = gy.len() / image_y * p;
                for (b, (gy, x)) in gy.chunks_exact(image_y).zip(x.chunks_exact(image_x)).enumerate() {
                    im2col(g, x, &mut col[b * p..], width);
                    for (src, dst) in gy.chunks_exact(p).zip(dys.chunks_mut(width)) {
                        dst[b * p..][..p].copy_from_slice(src);
                    }
                }
                let dy = Mat::rows(&dys[..g.f * width], g.f, width);
                matmul(partial, dy, Mat::rows(&col[..k * width], k, width).t(), i > 0);
            }
        });
    gw.copy_from_slice(&partials[..g.f * k]);
    for partial in partials.chunks_exact(g.f * k).skip(1) {
        gw.iter_mut().zip(partial).for_each(|(a, b)| *a += b);
    }
}

/// `dx = col2im(Wᵀ · dy)`, image by image.
pub(super) fn input_grad(g: &ConvDims, per_group: usize, gy: &[f32], w: &[f32], cols: &mut [f32], gx: &mut [f32]) {
    let (k, p) = (g.k(), g.p());
    let (image_x, image_y) = (g.c * g.h * g.w, g.f * p);
    // Fewer matrices than groups would leave the last images unconvolved.
    assert!(
        cols.len() >= input_grad_scratch_len(g, g.n.div_ceil(per_group)),
        "conv2d: scratch sized for other threads"
    );
    cols.par_chunks_mut(matrix_len(g))
        .zip(
            gx.par_chunks_mut(per_group * image_x)
                .zip(gy.par_chunks(per_group * image_y)),
        )
        .for_each(|(col, (gx, gy))| {
            for (gx, gy) in gx.chunks_exact_mut(image_x).zip(gy.chunks_exact(image_y)) {
                if pointwise(g) {
                    matmul(gx, Mat::rows(w, g.f, k).t(), Mat::rows(gy, g.f, p), false);
                } else {
                    matmul(col, Mat::rows(w, g.f, k).t(), Mat::rows(gy, g.f, p), false);
                    col2im(g, col, gx);
                }
            }
        });
}

#[cfg(test)]
mod tests {
    //! Every kernel against direct loops over the definition, on geometries
    //! where patches overhang the padding on each side, strides leave input
    //! columns unread, and groups hold unequal image counts.
    use super::*;
    use crate::ops::gradcheck::assert_near as close;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        crate::ops::gradcheck::values(n, seed, -0.5, 0.5)
    }

    #[test]
    fn kernels_match_direct_loops() {
        // (n, c, h, w, f, kh, kw, stride, pad)
        let cases = [
            (3, 3, 9, 11, 4, 3, 3, 1, 1),
            (3, 3, 9, 11, 4, 3, 3, 2, 1),
            (2, 4, 8, 8, 5, 1, 1, 2, 0),
            (2, 2, 7, 6, 3, 1, 1, 1, 1),
            (2, 2, 11, 13, 3, 7, 7, 2, 3),
            (3, 2, 5, 6, 2, 2, 3, 3, 2),
            (1, 2, 4, 4, 9, 3, 3, 2, 0),
            // Stride 1, output rows as wide as the input's: the shifted-plane
            // form, with one and two columns wrapped at each end.
            (2, 3, 6, 7, 4, 1, 1, 1, 0),
            (2, 2, 7, 9, 3, 5, 5, 1, 2),
            // Narrow output rows: the bordered copies (`bordered.rs`), at
            // stride 1 and 2, with and without padding, planes not square.
            (3, 3, 4, 4, 5, 3, 3, 1, 1),
            (2, 2, 5, 7, 3, 3, 3, 1, 1),
            (2, 3, 8, 8, 4, 3, 3, 2, 1),
            (2, 2, 14, 14, 3, 1, 1, 2, 0),
            (2, 2, 6, 27, 3, 3, 3, 2, 1),
            // Padding wider than the kernel: some patches are all zeros.
            (2, 1, 1, 2, 2, 1, 1, 4, 5),
        ];
        for (n, c, h, w, f, kh, kw, stride, pad) in cases {
            let (oh, ow) = ((h + 2 * pad - kh) / stride + 1, (w + 2 * pad - kw) / stride + 1);
            let g = ConvDims::new([n, c, h, w], [f, kh, kw], stride, pad, crate::memory::DType::F32, false);
            assert_eq!(g.output_hw(), (oh, ow));
            let (k, p) = (g.k(), g.p());
            let x = values(n * c * h * w, 1);
            let wt = values(f * k, 2);
            let bias = values(f, 3);
            let gy = values(n * f * p, 4);
            let image = c * h * w;
            let per_group = n.div_ceil(2);
            let groups = n.div_ceil(per_group);

            let mut scratch = vec![f32::NAN; forward_scratch_len(&g, groups)];
            let mut y = vec![f32::NAN; n * f * p];
            forward(&g, per_group, &x, &wt, Some(&bias), &mut scratch, &mut y);
            let want = super::super::tests::direct_loops(&g, &x, &wt, &bias, &gy);
            close(&y, &want.y, "y");

            let mut scratch = vec![f32::NAN; weight_grad_scratch_len(&g, groups)];
            let mut gw = vec![f32::NAN; f * k];
            weight_grad(&g, per_group, &gy, &x, &mut scratch, &mut gw);
            close(&gw, &want.gw, "dW");

            let mut scratch = vec![f32::NAN; input_grad_scratch_len(&g, groups)];
            let mut gx = vec![f32::NAN; n * image];
            input_grad(&g, per_group, &gy, &wt, &mut scratch, &mut gx);
            close(&gx, &want.gx, "dx");
        }
    }

    #[test]
    fn bordered_forms_are_the_general_forms_bit_for_bit() {
        // (c, h, w, kh, kw, stride, pad): every output row width and stride
        // the bordered form takes, odd and even planes, with and without
        // padding, a 2×3 kernel, and the largest bordered plane.
        let taken = [
            (3, 4, 4, 3, 3, 1, 1),
            (2, 5, 7, 3, 3, 1, 1),
            (2, 8, 8, 3, 3, 1, 1),
            (3, 7, 7, 3, 3, 2, 1),
            (2, 14, 14, 1, 1, 2, 0),
            (2, 13, 13, 3, 3, 2, 1),
            (2, 15, 16, 2, 3, 2, 1),
            (2, 28, 28, 3, 3, 2, 1),
            (2, 32, 32, 3, 3, 2, 1),
        ];
        for (c, h, w, kh, kw, stride, pad) in taken {
            let g = ConvDims::new([1, c, h, w], [2, kh, kw], stride, pad, crate::memory::DType::F32, false);
            let (k, p) = (g.k(), g.p());
            let ld = p + 3;
            let x = values(c * h * w, 5);
            let (mut general, mut bordered) = (vec![f32::NAN; k * ld], vec![f32::NAN; k * ld]);
            im2col_by_rows(&g, &x, &mut general, ld);
            assert!(super::bordered::im2col(&g, &x, &mut bordered, ld), "{g:?} not taken");
            for r in 0..k {
                let (a, b) = (&general[r * ld..][..p], &bordered[r * ld..][..p]);
                assert!(
                    a.iter().zip(b).all(|(a, b)| a.to_bits() == b.to_bits()),
                    "{g:?}: patch row {r} differs"
                );
            }
            let col = values(k * p, 6);
            let (mut general, mut bordered) = (vec![f32::NAN; c * h * w], vec![f32::NAN; c * h * w]);
            col2im_by_rows(&g, &mut col.clone(), &mut general);
            assert!(super::bordered::col2im(&g, &col, &mut bordered), "{g:?} not taken");
            let differ = general
                .iter()
                .zip(&bordered)
                .filter(|(a, b)| a.to_bits() != b.to_bits())
                .count();
            assert_eq!(differ, 0, "{g:?}: {differ} input gradients differ");
        }
        // Output rows of other widths, and wider planes, stay with the
        // general form.
        for (c, h, w, kh, kw, stride, pad) in [(2, 9, 11, 3, 3, 2, 1), (2, 28, 28, 3, 3, 1, 1), (1, 40, 32, 3, 3, 2, 1)]
        {
            let g = ConvDims::new([1, c, h, w], [2, kh, kw], stride, pad, crate::memory::DType::F32, false);
            let mut col = vec![0.0; g.k() * g.p()];
            assert!(
                !super::bordered::im2col(&g, &values(c * h * w, 5), &mut col, g.p()),
                "{g:?} taken"
            );
        }
    }
}
