//! Patch matrices of narrow output rows (ResNet's late layers and every
//! strided one) through a bordered copy of each channel's plane.
//!
//! [`super::im2col`]'s general form works a row of the patch matrix out
//! output row by output row: which columns fall in the padding, a copy
//! call (or a strided gather) for the rest, zeros for the padding. On a
//! 4- to 16-pixel output row that bookkeeping costs more than the row:
//! ResNet-18/8's strided layers spent three times their products' time
//! writing and reading their patch matrices. Here each channel's plane is
//! first copied into the middle of a zeroed buffer with the padding as its
//! border, so that every patch reads inside it; an output row of a tap's
//! row is then `OW` values at a fixed stride `S` from a fixed offset, a
//! loop of constant length that compiles to a few vector moves. (The
//! input gradient of a 3×3 layer at stride 1 skips the bordered copy: it
//! sums each input row in registers, `gather_3x3`.)
//!
//! The values, and for [`col2im`] the order in which each pixel's
//! entries are added, are the general form's: the same bits.

use crate::backend::ConvDims;

/// The largest bordered plane, `(H + 2·pad) · (W + 2·pad)` values: a
/// 32-pixel plane with a padding of 1 (CIFAR's first strided layer). On
/// the stack: a buffer per call, nothing allocated.
const MAX_BORDERED: usize = 34 * 34;

/// Runs `$f::<OW, S>($args)` and gives true for the output row widths and
/// strides this form takes, false for the rest. Stride 1 takes rows up to
/// 8 pixels: a wider row is one copy of the plane per tap in the general
/// form, which the bordered copy only adds to.
macro_rules! row_form {
    ($g:expr, $f:ident($($arg:expr),*)) => {{
        let g: &ConvDims = $g;
        let (hp, wp) = (g.h + 2 * g.padding, g.w + 2 * g.padding);
        match (g.ow(), g.stride) {
            _ if hp * wp > MAX_BORDERED => false,
            (4, 1) => { $f::<4, 1>($($arg),*); true }
            (7, 1) => { $f::<7, 1>($($arg),*); true }
            (8, 1) => { $f::<8, 1>($($arg),*); true }
            (4, 2) => { $f::<4, 2>($($arg),*); true }
            (7, 2) => { $f::<7, 2>($($arg),*); true }
            (8, 2) => { $f::<8, 2>($($arg),*); true }
            (14, 2) => { $f::<14, 2>($($arg),*); true }
            (16, 2) => { $f::<16, 2>($($arg),*); true }
            _ => false,
        }
    }};
}

/// [`super::im2col`] of one image (`col`'s rows `ld` apart) where this
/// form takes the geometry; false, nothing written, where it does not.
pub(super) fn im2col(g: &ConvDims, x: &[f32], col: &mut [f32], ld: usize) -> bool {
    row_form!(g, write_patches(g, x, col, ld))
}

/// [`super::col2im`] of one image where this form takes the geometry
/// (`gx` overwritten); false, nothing written, where it does not.
pub(super) fn col2im(g: &ConvDims, col: &[f32], gx: &mut [f32]) -> bool {
    row_form!(g, add_patches(g, col, gx))
}

fn write_patches<const OW: usize, const S: usize>(g: &ConvDims, x: &[f32], col: &mut [f32], ld: usize) {
    let planes = x.chunks_exact(g.h * g.w).take(g.c).enumerate();
    if g.padding == 0 {
        // Without padding the plane is its own bordered copy.
        for (c, plane) in planes {
            write_taps::<OW, S>(g, plane, g.w, c, col, ld);
        }
        return;
    }
    let mut bordered = [0.0f32; MAX_BORDERED];
    for (c, plane) in planes {
        border(g, plane, &mut bordered);
        write_taps::<OW, S>(g, &bordered, g.w + 2 * g.padding, c, col, ld);
    }
}

/// Writes channel `c`'s tap rows of `col` (rows `ld` apart) from `src`, a
/// plane `wp` wide holding every patch.
fn write_taps<const OW: usize, const S: usize>(
    g: &ConvDims,
    src: &[f32],
    wp: usize,
    c: usize,
    col: &mut [f32],
    ld: usize,
) {
    let (taps, oh) = (g.kh * g.kw, g.oh());
    for tap in 0..taps {
        let (i, j) = (tap / g.kw, tap % g.kw);
        let row = &mut col[(c * taps + tap) * ld..][..oh * OW];
        for (oy, out) in row.chunks_exact_mut(OW).enumerate() {
            let from = strided::<OW, S>(src, (oy * S + i) * wp + j);
            let out = out.first_chunk_mut::<OW>().expect("conv2d: an output row of OW values");
            for ox in 0..OW {
                out[ox] = from[ox * S];
            }
        }
    }
}

fn add_patches<const OW: usize, const S: usize>(g: &ConvDims, col: &[f32], gx: &mut [f32]) {
    if S == 1 && (g.kh, g.kw, g.padding) == (3, 3, 1) {
        return gather_3x3::<OW>(g, col, gx);
    }
    let (h, w, pad) = (g.h, g.w, g.padding);
    let planes = gx.chunks_exact_mut(h * w).take(g.c).enumerate();
    if pad == 0 {
        for (c, plane) in planes {
            plane.fill(0.0);
            add_taps::<OW, S>(g, col, c, plane, w);
        }
        return;
    }
    let (wp, len) = (w + 2 * pad, (h + 2 * pad) * (w + 2 * pad));
    let mut bordered = [0.0f32; MAX_BORDERED];
    for (c, plane) in planes {
        // What falls on the border is the padding's gradient: dropped.
        bordered[..len].fill(0.0);
        add_taps::<OW, S>(g, col, c, &mut bordered, wp);
        for (y, row) in plane.chunks_exact_mut(w).enumerate() {
            row.copy_from_slice(&bordered[(y + pad) * wp + pad..][..w]);
        }
    }
}

/// [`add_patches`] for a 3×3 kernel at stride 1 and padding 1 (ResNet's
/// small maps): each input row's gradient summed in registers from the
/// tap rows that read it, rather than each tap row added onto the plane.
/// Adding tap by tap, each tap's row overlapped the stores of the tap
/// before it, a few rows back: a 4×4 layer's `col2im` ran at about six
/// cycles a 4-value row. A pixel still adds its entries in tap order (the
/// kernel's rows, then its columns) onto a zero, skipping the taps that
/// read it from no patch, as the general form does: the same bits.
fn gather_3x3<const W: usize>(g: &ConvDims, col: &[f32], gx: &mut [f32]) {
    let (h, p) = (g.h, g.p());
    for (c, plane) in gx.chunks_exact_mut(h * W).take(g.c).enumerate() {
        let taps = &col[c * 9 * p..][..9 * p];
        for (y, out) in plane.chunks_exact_mut(W).enumerate() {
            let mut acc = [0.0f32; W];
            for i in 0..3 {
                // Kernel row i reads input row y for output row y + 1 − i.
                let Some(oy) = (y + 1).checked_sub(i).filter(|&oy| oy < h) else {
                    continue;
                };
                for j in 0..3 {
                    let src = taps[(i * 3 + j) * p + oy * W..]
                        .first_chunk::<W>()
                        .expect("conv2d: an output row of W values");
                    // Output column x + 1 − j reads input column x.
                    match j {
                        0 => (0..W - 1).for_each(|x| acc[x] += src[x + 1]),
                        1 => (0..W).for_each(|x| acc[x] += src[x]),
                        _ => (1..W).for_each(|x| acc[x] += src[x - 1]),
                    }
                }
            }
            out.copy_from_slice(&acc);
        }
    }
}

/// Adds channel `c`'s tap rows of `col` onto `dst`, a plane `wp` wide
/// holding every patch, tap by tap in the general form's order.
fn add_taps<const OW: usize, const S: usize>(g: &ConvDims, col: &[f32], c: usize, dst: &mut [f32], wp: usize) {
    let (taps, oh) = (g.kh * g.kw, g.oh());
    for tap in 0..taps {
        let (i, j) = (tap / g.kw, tap % g.kw);
        let row = &col[(c * taps + tap) * g.p()..][..oh * OW];
        for (oy, src) in row.chunks_exact(OW).enumerate() {
            let to = strided_mut::<OW, S>(dst, (oy * S + i) * wp + j);
            let src = src.first_chunk::<OW>().expect("conv2d: an output row of OW values");
            for ox in 0..OW {
                to[ox * S] += src[ox];
            }
        }
    }
}

/// Copies `plane` into the middle of `bordered`, rows `W + 2·pad` apart,
/// leaving its border as it was: zero (the buffer starts zeroed and
/// nothing writes the border).
fn border(g: &ConvDims, plane: &[f32], bordered: &mut [f32]) {
    let (w, pad) = (g.w, g.padding);
    let wp = w + 2 * pad;
    for (y, row) in plane.chunks_exact(w).enumerate() {
        bordered[(y + pad) * wp + pad..][..w].copy_from_slice(row);
    }
}

/// The values an output row reads, `(OW − 1)·S + 1` from `at`: one length
/// check, after which LLVM sees every `ox·S` in bounds.
#[inline(always)]
fn strided<const OW: usize, const S: usize>(src: &[f32], at: usize) -> &[f32] {
    &src[at..][..(OW - 1) * S + 1]
}

/// [`strided`], writable.
#[inline(always)]
fn strided_mut<const OW: usize, const S: usize>(dst: &mut [f32], at: usize) -> &mut [f32] {
    &mut dst[at..][..(OW - 1) * S + 1]
}
