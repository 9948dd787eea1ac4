use crate::backend::cpu::{matmul, Mat};
use crate::ops::dropout::keep;

/// `(n, in, out)`.
pub(super) type Dims = (usize, usize, usize);

/// What follows the product: a relu, then dropout with probability `p` and
/// the step's seed (already resolved).
#[derive(Clone, Copy)]
pub(super) struct Epi {
    pub relu: bool,
    pub dropout: Option<(f32, u64)>,
}

pub(super) fn forward((n, inp, out): Dims, x: &[f32], w: &[f32], bias: Option<&[f32]>, e: Epi, y: &mut [f32]) {
    match bias {
        Some(b) => y.chunks_exact_mut(out).for_each(|row| row.copy_from_slice(b)),
        None => y.fill(0.0),
    }
    matmul(y, Mat::rows(x, n, inp), Mat::rows(w, out, inp).t(), true);
    if e.relu {
        y.iter_mut().for_each(|v| *v = v.max(0.0));
    }
    if let Some((p, seed)) = e.dropout {
        let scale = 1.0 / (1.0 - p);
        for (i, v) in y.iter_mut().enumerate() {
            *v = if keep(seed, i as u64, p) { *v * scale } else { 0.0 };
        }
    }
}

/// The upstream gradient through the epilogue, as the GPU kernels apply it
/// while loading: dropped elements get none, kept ones are scaled, and the
/// relu passes it where its output (for a kept element, `y`) was positive.
pub(super) fn masked(gy: &[f32], y: &[f32], e: Epi, g: &mut [f32]) {
    let scale = e.dropout.map_or(1.0, |(p, _)| 1.0 / (1.0 - p));
    for (i, ((g, &gy), &y)) in g.iter_mut().zip(gy).zip(y).enumerate() {
        let kept = e.dropout.is_none_or(|(p, seed)| keep(seed, i as u64, p));
        let passes = !e.relu || y > 0.0;
        *g = if kept && passes { gy * scale } else { 0.0 };
    }
}

pub(super) fn input_grad((n, inp, out): Dims, g: &[f32], w: &[f32], gx: &mut [f32]) {
    matmul(gx, Mat::rows(g, n, out), Mat::rows(w, out, inp), false);
}

pub(super) fn weight_grad((n, inp, out): Dims, g: &[f32], x: &[f32], gw: &mut [f32], gb: Option<&mut [f32]>) {
    matmul(gw, Mat::rows(g, n, out).t(), Mat::rows(x, n, inp), false);
    if let Some(gb) = gb {
        gb.fill(0.0);
        for row in g.chunks_exact(out) {
            gb.iter_mut().zip(row).for_each(|(b, g)| *b += g);
        }
    }
}
