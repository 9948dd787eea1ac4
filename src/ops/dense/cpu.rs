//! dense on the CPU: linear's kernels, then the epilogue.

use crate::ops::dropout::keep;
use crate::ops::linear::cpu as linear;

pub(super) use linear::{input_grad, Dims};

/// What follows the product: a relu, then dropout with probability `p` and
/// the step's seed (already resolved) and the draw of the first element.
#[derive(Clone, Copy)]
pub(super) struct Epi {
    pub relu: bool,
    pub dropout: Option<(f32, u64, u32)>,
}

pub(super) fn forward(dims: Dims, x: &[f32], w: &[f32], bias: Option<&[f32]>, e: Epi, y: &mut [f32]) {
    linear::forward(dims, x, w, bias, y);
    if e.relu {
        y.iter_mut().for_each(|v| *v = v.max(0.0));
    }
    if let Some((p, seed, first)) = e.dropout {
        let scale = 1.0 / (1.0 - p);
        for (i, v) in y.iter_mut().enumerate() {
            *v = if keep(seed, first as u64 + i as u64, p) {
                *v * scale
            } else {
                0.0
            };
        }
    }
}

/// The upstream gradient through the epilogue, as the GPU kernels apply it
/// while loading: dropped elements get none, kept ones are scaled, and the
/// relu passes it where its output (for a kept element, `y`) was positive.
pub(super) fn masked(gy: &[f32], y: &[f32], e: Epi, g: &mut [f32]) {
    let scale = e.dropout.map_or(1.0, |(p, _, _)| 1.0 / (1.0 - p));
    for (i, ((g, &gy), &y)) in g.iter_mut().zip(gy).zip(y).enumerate() {
        let kept = e
            .dropout
            .is_none_or(|(p, seed, first)| keep(seed, first as u64 + i as u64, p));
        let passes = !e.relu || y > 0.0;
        *g = if kept && passes { gy * scale } else { 0.0 };
    }
}

pub(super) fn weight_grad(dims: Dims, g: &[f32], x: &[f32], gw: &mut [f32], gb: Option<&mut [f32]>) {
    linear::weight_grad(dims, g, x, gw, false);
    if let Some(gb) = gb {
        linear::bias_grad(dims, g, gb);
    }
}
