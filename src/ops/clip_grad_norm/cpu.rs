use super::{piece, PIECES};
use crate::ops::CHUNK;
use rayon::prelude::*;

/// Each piece's squares summed in f64, in order, into its partial sum.
pub(super) fn sum_squares(g: &[f32], partials: &mut [f32], first: bool) {
    partials.par_iter_mut().enumerate().for_each(|(k, partial)| {
        let sum: f64 = g[piece(g.len(), k)].iter().map(|&x| x as f64 * x as f64).sum();
        *partial = if first {
            sum as f32
        } else {
            (*partial as f64 + sum) as f32
        };
    });
}

/// `[norm, coefficient, Σ norms + norm, steps + 1]`.
pub(super) fn coefficient(partials: &[f32], figures: &mut [f32], max_norm: f32) {
    debug_assert_eq!(partials.len(), PIECES);
    let total: f64 = partials.iter().map(|&p| p as f64).sum();
    let norm = total.sqrt() as f32;
    let c = (1.0 / (norm + 1e-6f32)) * max_norm;
    // Not `min`: a NaN coefficient stays NaN, as PyTorch's clamp keeps it.
    let c = if c > 1.0 { 1.0 } else { c };
    figures[0] = norm;
    figures[1] = c;
    figures[2] += norm;
    figures[3] += 1.0;
}

pub(super) fn scale(g: &mut [f32], c: f32) {
    if c == 1.0 {
        return;
    }
    g.par_chunks_mut(CHUNK).for_each(|g| g.iter_mut().for_each(|x| *x *= c));
}
