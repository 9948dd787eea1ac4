//! Stride-1 convolutions with padding (ResNet's 3×3 pad-1 layers) as matrix
//! products over a padded copy of each image, whose patch rows the sgemm
//! reads in place ([`Patches`]): no patch matrix is written.
//!
//! Each image is copied into a plane `pad` wider on every side. Output
//! pixel `(oy, ox)` is then computed at `q = oy·Wp + ox` of a grid as wide
//! as the padded plane, and patch row `(c, i, j)` is the padded plane of
//! channel `c` shifted by `i·Wp + j`: one matrix product over the grid,
//! whose `Wp − OW` columns past each output row are computed and dropped.
//! Against the patch matrix this trades writing (and reading back) `C·KH·KW`
//! values per output pixel for copying the image and the output once, and
//! that waste: it pays where output rows are wide against the padding
//! ([`pays`]), not on the 4×4 maps of a ResNet's last stage.
//!
//! - **Forward:** `y = W · patches(x)`, the same chain of multiply-adds per
//!   output as the patch matrix's product, so the same bits.
//! - **Weight gradient:** `dW = Σₙ dyₙ · patches(xₙ)ᵀ`, with `dy` spread onto
//!   the grid, zero in the dropped columns; partial sums per group of images,
//!   added in order, as `super::im2col` does.
//! - **Input gradient:** the forward product of `dy`, padded by
//!   `KH − 1 − pad`, with the filters flipped and their two channel axes
//!   swapped. One chain per input pixel over filters and taps, where the
//!   patch matrix's `col2im` summed each tap's chain in turn: other rounding,
//!   the same sum.

use crate::backend::cpu::sgemm::{gemm_nn_patches, gemm_nt_patches, Patches, MAX_TAPS};
use crate::backend::cuda::ConvPass;
use crate::backend::ConvDims;
use rayon::prelude::*;

/// A padded plane and the output grid over it.
#[derive(Clone, Copy)]
struct Grid {
    /// Zeros on every side.
    pad: usize,
    /// The padded plane's rows and columns.
    hp: usize,
    wp: usize,
    /// Output rows and columns: the grid holds `rows` rows of `wp`, the
    /// last one cut to `cols`.
    rows: usize,
    cols: usize,
}

impl Grid {
    /// Elements of a padded plane.
    fn plane(&self) -> usize {
        self.hp * self.wp
    }

    /// Elements of the output grid: `(rows − 1)·wp + cols`, so that the last
    /// patch row ends at the padded plane's last pixel.
    fn len(&self) -> usize {
        (self.rows - 1) * self.wp + self.cols
    }

    /// The patch rows of `channels` padded planes for a `k×k` kernel.
    fn patches(&self, channels: usize, k: usize) -> Patches {
        Patches {
            channels,
            kh: k,
            kw: k,
            row: self.wp,
            plane: self.plane(),
        }
    }
}

/// The forward pass's (and the weight gradient's) grid: the input padded by
/// the convolution's padding, the output's rows.
fn input_grid(g: &ConvDims) -> Grid {
    Grid {
        pad: g.padding,
        hp: g.h + 2 * g.padding,
        wp: g.w + 2 * g.padding,
        rows: g.oh(),
        cols: g.ow(),
    }
}

/// The input gradient's grid: `dy` padded by `KH − 1 − pad`, the input's rows.
fn grad_grid(g: &ConvDims) -> Grid {
    let pad = g.kh - 1 - g.padding;
    Grid {
        pad,
        hp: g.oh() + 2 * pad,
        wp: g.ow() + 2 * pad,
        rows: g.h,
        cols: g.w,
    }
}

/// Whether `pass` of `g` runs here rather than through the patch matrix:
/// the geometry fits (stride 1, a square kernel of at most [`MAX_TAPS`]
/// taps, padding from 1 to `KH − 1`) and the grid's dropped columns cost
/// less than the patch matrix saves. Measured per pass on ResNet-18/8's
/// shapes at batch 100 on one core (AVX2): the forward and input gradient
/// win on 28-, 14- and 7-pixel rows (the 7-pixel forward −26%, computing
/// 9 columns a row for 7), lose on 4-pixel rows (6 for 4); the weight
/// gradient wins to 14-pixel rows only. A first layer of one channel (9
/// patch rows) is too short a product to gain. The table is in
/// docs/cpu-performance.md ("Patch rows read in place").
pub(super) fn pays(g: &ConvDims, pass: ConvPass) -> bool {
    let fits = g.stride == 1 && g.kh == g.kw && (1..g.kh).contains(&g.padding) && g.kh * g.kw <= MAX_TAPS && !g.nhwc;
    if !fits || g.k() < 32 {
        return false;
    }
    let (grid, wasted_per_10) = match pass {
        ConvPass::Forward => (input_grid(g), 3),
        ConvPass::WeightGrad => (input_grid(g), 2),
        ConvPass::InputGrad => (grad_grid(g), 3),
    };
    10 * grid.wp <= (10 + wasted_per_10) * grid.cols
}

/// Copies `planes` (each `rows × cols`) into the middle of `grid`'s padded
/// planes in `out`, leaving the border as it was: a worker zeroes its
/// padded planes once, and every image after the first writes the same
/// middle (zeroing each row's ends was a call to `memset` for one or two
/// values, 6% of a ResNet step).
fn pad_planes(grid: &Grid, rows: usize, cols: usize, planes: &[f32], out: &mut [f32]) {
    let (p, wp) = (grid.pad, grid.wp);
    for (src, dst) in planes.chunks_exact(rows * cols).zip(out.chunks_exact_mut(grid.plane())) {
        for (r, row) in src.chunks_exact(cols).enumerate() {
            dst[(r + p) * wp + p..][..cols].copy_from_slice(row);
        }
    }
}

/// `out` (planes of `grid.rows × grid.cols`) from the grid rows of `from`
/// (planes of `grid.len()`), plus `bias[plane]` where given.
fn unpad_output(grid: &Grid, from: &[f32], bias: Option<&[f32]>, out: &mut [f32]) {
    let (rows, cols) = (grid.rows, grid.cols);
    for (f, (src, dst)) in from
        .chunks_exact(grid.len())
        .zip(out.chunks_exact_mut(rows * cols))
        .enumerate()
    {
        for (r, row) in dst.chunks_exact_mut(cols).enumerate() {
            let src = &src[r * grid.wp..][..cols];
            match bias {
                Some(b) => row.iter_mut().zip(src).for_each(|(o, v)| *o = v + b[f]),
                None => row.copy_from_slice(src),
            }
        }
    }
}

/// `dy`'s planes (each `grid.rows × grid.cols`) spread onto the grid: the
/// weight gradient's A. The columns past each row are left as they were:
/// the worker zeroes them once, as [`pad_planes`] does its border.
fn spread_onto_grid(grid: &Grid, dy: &[f32], out: &mut [f32]) {
    let (cols, wp) = (grid.cols, grid.wp);
    for (src, dst) in dy.chunks_exact(grid.rows * cols).zip(out.chunks_exact_mut(grid.len())) {
        for (r, row) in src.chunks_exact(cols).enumerate() {
            dst[r * wp..][..cols].copy_from_slice(row);
        }
    }
}

/// Scratch of [`forward`] for `groups` workers: a padded image and an
/// output grid each.
pub(super) fn forward_scratch_len(g: &ConvDims, groups: usize) -> usize {
    let grid = input_grid(g);
    groups * (g.c * grid.plane() + g.f * grid.len())
}

/// Scratch of [`weight_grad`]: a partial `[F, K]` sum, a padded image and
/// `dy` on the grid each.
pub(super) fn weight_grad_scratch_len(g: &ConvDims, groups: usize) -> usize {
    let grid = input_grid(g);
    groups * (g.f * g.k() + g.c * grid.plane() + g.f * grid.len())
}

/// Scratch of [`input_grad`]: the flipped filters, then a padded `dy` and an
/// input-gradient grid each.
pub(super) fn input_grad_scratch_len(g: &ConvDims, groups: usize) -> usize {
    let grid = grad_grid(g);
    g.k() * g.f + groups * (g.f * grid.plane() + g.c * grid.len())
}

/// `y = W · patches(x) (+ bias)`, image by image; `per_group` images per worker.
pub(super) fn forward(
    g: &ConvDims,
    per_group: usize,
    x: &[f32],
    w: &[f32],
    bias: Option<&[f32]>,
    scratch: &mut [f32],
    y: &mut [f32],
) {
    let grid = input_grid(g);
    let (image_x, image_y) = (g.c * g.h * g.w, g.f * g.p());
    let each = g.c * grid.plane() + g.f * grid.len();
    // Fewer scratch chunks than groups would leave the last images unconvolved.
    assert!(
        scratch.len() >= forward_scratch_len(g, g.n.div_ceil(per_group)),
        "conv2d: scratch sized for other threads"
    );
    let patches = grid.patches(g.c, g.kh);
    scratch
        .par_chunks_mut(each)
        .zip(
            y.par_chunks_mut(per_group * image_y)
                .zip(x.par_chunks(per_group * image_x)),
        )
        .for_each(|(scratch, (y, x))| {
            let (padded, out) = scratch.split_at_mut(g.c * grid.plane());
            padded.fill(0.0);
            for (y, x) in y.chunks_exact_mut(image_y).zip(x.chunks_exact(image_x)) {
                pad_planes(&grid, g.h, g.w, x, padded);
                gemm_nn_patches(g.f, grid.len(), w, g.k(), padded, patches, out, false);
                unpad_output(&grid, out, bias, y);
            }
        });
}

/// `dW = Σₙ dyₙ · patches(xₙ)ᵀ`: each worker sums its images into its own
/// partial, then the partials are added in order.
pub(super) fn weight_grad(g: &ConvDims, per_group: usize, gy: &[f32], x: &[f32], scratch: &mut [f32], gw: &mut [f32]) {
    let grid = input_grid(g);
    let k = g.k();
    let (image_x, image_y) = (g.c * g.h * g.w, g.f * g.p());
    let groups = g.n.div_ceil(per_group);
    assert!(
        scratch.len() >= weight_grad_scratch_len(g, groups),
        "conv2d: scratch sized for other threads"
    );
    let (partials, rest) = scratch.split_at_mut(groups * g.f * k);
    let patches = grid.patches(g.c, g.kh);
    partials
        .par_chunks_mut(g.f * k)
        .zip(rest.par_chunks_mut(g.c * grid.plane() + g.f * grid.len()))
        .zip(
            gy.par_chunks(per_group * image_y)
                .zip(x.par_chunks(per_group * image_x)),
        )
        .for_each(|((partial, scratch), (gy, x))| {
            let (padded, spread) = scratch.split_at_mut(g.c * grid.plane());
            padded.fill(0.0);
            spread.fill(0.0);
            for (i, (gy, x)) in gy.chunks_exact(image_y).zip(x.chunks_exact(image_x)).enumerate() {
                pad_planes(&grid, g.h, g.w, x, padded);
                spread_onto_grid(&grid, gy, spread);
                gemm_nt_patches(g.f, grid.len(), spread, grid.len(), padded, patches, partial, i > 0);
            }
        });
    gw.copy_from_slice(&partials[..g.f * k]);
    for partial in partials.chunks_exact(g.f * k).skip(1) {
        gw.iter_mut().zip(partial).for_each(|(a, b)| *a += b);
    }
}

/// `flipped[c][f][i][j] = w[f][c][KH − 1 − i][KW − 1 − j]`: the filters of
/// the input gradient's forward product.
fn flip_filters(g: &ConvDims, w: &[f32], flipped: &mut [f32]) {
    let taps = g.kh * g.kw;
    for (c, row) in flipped.chunks_exact_mut(g.f * taps).enumerate() {
        for (f, dst) in row.chunks_exact_mut(taps).enumerate() {
            let src = &w[(f * g.c + c) * taps..][..taps];
            dst.iter_mut().zip(src.iter().rev()).for_each(|(d, s)| *d = *s);
        }
    }
}

/// `dx = flipped · patches(pad(dy))`, image by image.
pub(super) fn input_grad(g: &ConvDims, per_group: usize, gy: &[f32], w: &[f32], scratch: &mut [f32], gx: &mut [f32]) {
    let grid = grad_grid(g);
    let (image_x, image_y) = (g.c * g.h * g.w, g.f * g.p());
    assert!(
        scratch.len() >= input_grad_scratch_len(g, g.n.div_ceil(per_group)),
        "conv2d: scratch sized for other threads"
    );
    let (flipped, rest) = scratch.split_at_mut(g.k() * g.f);
    flip_filters(g, w, flipped);
    let flipped = &*flipped;
    let patches = grid.patches(g.f, g.kh);
    rest.par_chunks_mut(g.f * grid.plane() + g.c * grid.len())
        .zip(
            gx.par_chunks_mut(per_group * image_x)
                .zip(gy.par_chunks(per_group * image_y)),
        )
        .for_each(|(scratch, (gx, gy))| {
            let (padded, out) = scratch.split_at_mut(g.f * grid.plane());
            padded.fill(0.0);
            for (gx, gy) in gx.chunks_exact_mut(image_x).zip(gy.chunks_exact(image_y)) {
                pad_planes(&grid, g.oh(), g.ow(), gy, padded);
                gemm_nn_patches(g.c, grid.len(), flipped, g.f * g.kh * g.kw, padded, patches, out, false);
                unpad_output(&grid, out, None, gx);
            }
        });
}

#[cfg(test)]
mod tests {
    //! Every pass against direct loops over the definition (on planes whose
    //! rows are wider and narrower than a vector, kernels odd and even,
    //! padding from 1 to `KH − 1`, groups of unequal image counts), the
    //! forward pass against the patch matrix's bit for bit, and which of
    //! ResNet-18/8's layers run here.
    use super::*;
    use crate::ops::gradcheck::assert_near as close;

    fn values(n: usize, seed: u64) -> Vec<f32> {
        crate::ops::gradcheck::values(n, seed, -0.5, 0.5)
    }

    fn dims(n: usize, c: usize, (h, w): (usize, usize), f: usize, k: usize, pad: usize) -> ConvDims {
        ConvDims::new([n, c, h, w], [f, k, k], 1, pad, crate::memory::DType::F32, false)
    }

    #[test]
    fn passes_match_direct_loops() {
        // (n, c, (h, w), f, k, pad)
        let cases = [
            (3, 4, (9, 11), 5, 3, 1),
            (2, 3, (28, 28), 8, 3, 1),
            (3, 5, (7, 6), 3, 3, 2),
            (2, 2, (12, 17), 4, 5, 2),
            (2, 3, (6, 9), 2, 5, 1),
            (3, 2, (5, 5), 3, 2, 1),
            (1, 7, (4, 4), 9, 3, 1),
        ];
        for (n, c, (h, w), f, k, pad) in cases {
            let g = dims(n, c, (h, w), f, k, pad);
            let (oh, ow) = g.output_hw();
            let (kk_all, p) = (g.k(), g.p());
            let x = values(n * c * h * w, 1);
            let wt = values(f * kk_all, 2);
            let bias = values(f, 3);
            let gy = values(n * f * p, 4);
            let image = c * h * w;
            let per_group = n.div_ceil(2);
            let groups = n.div_ceil(per_group);
            let case = format!("{n}×{c}×{h}×{w}, {f} filters {k}×{k}, pad {pad}");

            let mut scratch = vec![f32::NAN; forward_scratch_len(&g, groups)];
            let mut y = vec![f32::NAN; n * f * p];
            forward(&g, per_group, &x, &wt, Some(&bias), &mut scratch, &mut y);
            let want = super::super::tests::direct_loops(&g, &x, &wt, &bias, &gy);
            close(&y, &want.y, &format!("y, {case}"));
            assert_eq!((oh, ow), (h + 2 * pad + 1 - k, w + 2 * pad + 1 - k));

            // The patch matrix's forward pass: the same chains, the same bits.
            let mut cols = vec![f32::NAN; super::super::im2col::forward_scratch_len(&g, groups)];
            let mut y_im2col = vec![f32::NAN; n * f * p];
            super::super::im2col::forward(&g, per_group, &x, &wt, Some(&bias), &mut cols, &mut y_im2col);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(
                bits(&y),
                bits(&y_im2col),
                "forward bits against the patch matrix, {case}"
            );

            let mut scratch = vec![f32::NAN; weight_grad_scratch_len(&g, groups)];
            let mut gw = vec![f32::NAN; f * kk_all];
            weight_grad(&g, per_group, &gy, &x, &mut scratch, &mut gw);
            close(&gw, &want.gw, &format!("dW, {case}"));

            let mut scratch = vec![f32::NAN; input_grad_scratch_len(&g, groups)];
            let mut gx = vec![f32::NAN; n * image];
            input_grad(&g, per_group, &gy, &wt, &mut scratch, &mut gx);
            close(&gx, &want.gx, &format!("dx, {case}"));
        }
    }

    #[test]
    fn resnet_18_layers_that_pay() {
        let layer = |c: usize, hw: usize| dims(100, c, (hw, hw), c, 3, 1);
        let passes =
            |g: &ConvDims| [ConvPass::Forward, ConvPass::WeightGrad, ConvPass::InputGrad].map(|pass| pays(g, pass));
        assert_eq!(passes(&layer(8, 28)), [true; 3]);
        assert_eq!(passes(&layer(16, 14)), [true; 3]);
        assert_eq!(passes(&layer(32, 7)), [true, false, true]);
        assert_eq!(passes(&layer(64, 4)), [false; 3]);
        // The first layer (one channel), a stride, no padding: not here.
        assert_eq!(passes(&dims(100, 1, (28, 28), 8, 3, 1)), [false; 3]);
        let strided = ConvDims::new([100, 8, 28, 28], [16, 3, 3], 2, 1, crate::memory::DType::F32, false);
        assert_eq!(passes(&strided), [false; 3]);
        assert_eq!(passes(&dims(100, 8, (28, 28), 8, 3, 0)), [false; 3]);
    }
}
