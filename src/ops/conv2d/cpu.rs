use super::Geometry;
use crate::backend::cpu::{matmul, Mat};
use rayon::prelude::*;

/// Copies the patches of one image into `col` `[K, P]`: row `(c, i, j)` holds
/// input pixel `(c, oh + i, ow + j)` for every output pixel `(oh, ow)`.
fn im2col(g: &Geometry, x: &[f32], col: &mut [f32]) {
    let mut rows = col.chunks_exact_mut(g.p());
    for c in 0..g.c {
        let plane = &x[c * g.h * g.w..][..g.h * g.w];
        for i in 0..g.kh {
            for j in 0..g.kw {
                let row = rows.next().expect("K rows");
                for oh in 0..g.oh {
                    row[oh * g.ow..][..g.ow].copy_from_slice(&plane[(oh + i) * g.w + j..][..g.ow]);
                }
            }
        }
    }
}

/// Adds the patch gradients `dcol` `[K, P]` of one image back into `dx`.
fn col2im(g: &Geometry, dcol: &[f32], dx: &mut [f32]) {
    dx.fill(0.0);
    let mut rows = dcol.chunks_exact(g.p());
    for c in 0..g.c {
        let plane = &mut dx[c * g.h * g.w..][..g.h * g.w];
        for i in 0..g.kh {
            for j in 0..g.kw {
                let row = rows.next().expect("K rows");
                for oh in 0..g.oh {
                    let dst = &mut plane[(oh + i) * g.w + j..][..g.ow];
                    for (d, s) in dst.iter_mut().zip(&row[oh * g.ow..][..g.ow]) {
                        *d += s;
                    }
                }
            }
        }
    }
}

pub(super) fn forward(g: &Geometry, x: &[f32], w: &[f32], bias: Option<&[f32]>, col: &mut [f32], y: &mut [f32]) {
    let (k, p) = (g.k(), g.p());
    col.par_chunks_mut(k * p)
        .zip(y.par_chunks_mut(g.f * p))
        .zip(x.par_chunks(g.c * g.h * g.w))
        .for_each(|((col, y), x)| {
            im2col(g, x, col);
            matmul(y, Mat::rows(w, g.f, k), Mat::rows(col, k, p), false, 1);
            if let Some(bias) = bias {
                for (row, b) in y.chunks_exact_mut(p).zip(bias) {
                    row.iter_mut().for_each(|v| *v += b);
                }
            }
        });
}

/// `dW = Σₙ dyₙ · colₙᵀ`: each group of images sums into its own partial,
/// then the partials are added, so threads never share an accumulator.
pub(super) fn weight_grad(
    g: &Geometry,
    per_group: usize,
    gy: &[f32],
    col: &[f32],
    partials: &mut [f32],
    gw: &mut [f32],
) {
    let (k, p) = (g.k(), g.p());
    partials
        .par_chunks_mut(g.f * k)
        .zip(
            gy.par_chunks(per_group * g.f * p)
                .zip(col.par_chunks(per_group * k * p)),
        )
        .for_each(|(partial, (gy, col))| {
            for (n, (gy, col)) in gy.chunks_exact(g.f * p).zip(col.chunks_exact(k * p)).enumerate() {
                matmul(partial, Mat::rows(gy, g.f, p), Mat::rows(col, k, p).t(), n > 0, 1);
            }
        });
    gw.copy_from_slice(&partials[..g.f * k]);
    for partial in partials.chunks_exact(g.f * k).skip(1) {
        gw.iter_mut().zip(partial).for_each(|(a, b)| *a += b);
    }
}

pub(super) fn bias_grad(g: &Geometry, gy: &[f32], gb: &mut [f32]) {
    let p = g.p();
    gb.fill(0.0);
    for image in gy.chunks_exact(g.f * p) {
        for (b, row) in gb.iter_mut().zip(image.chunks_exact(p)) {
            *b += row.iter().sum::<f32>();
        }
    }
}

/// `dx = col2im(Wᵀ · dy)`, image by image, each group with its own scratch.
pub(super) fn input_grad(g: &Geometry, per_group: usize, gy: &[f32], w: &[f32], scratch: &mut [f32], gx: &mut [f32]) {
    let (k, p) = (g.k(), g.p());
    let image = g.c * g.h * g.w;
    scratch
        .par_chunks_mut(k * p)
        .zip(
            gy.par_chunks(per_group * g.f * p)
                .zip(gx.par_chunks_mut(per_group * image)),
        )
        .for_each(|(dcol, (gy, gx))| {
            for (gy, gx) in gy.chunks_exact(g.f * p).zip(gx.chunks_exact_mut(image)) {
                matmul(dcol, Mat::rows(w, g.f, k).t(), Mat::rows(gy, g.f, p), false, 1);
                col2im(g, dcol, gx);
            }
        });
}
