//! The CPU kernels. Per-channel statistics run in parallel over channels,
//! each channel summed in f64 in one order (deterministic whatever the
//! threads); elementwise passes run in parallel over runs of planes.

use super::BatchNormArgs;
use rayon::prelude::*;

/// Planes per rayon task in elementwise passes: a plane of a late
/// convolution may be a few pixels, too little work for a task of its own.
const PLANES_PER_TASK: usize = 64;

/// The planes of channel `ch`, one per image, in image order.
fn planes(c: usize, hw: usize, x: &[f32], ch: usize) -> impl Iterator<Item = &[f32]> {
    x.chunks_exact(hw).skip(ch).step_by(c)
}

/// `1/√(σ² + eps)`, the same f32 arithmetic as the GPU's.
fn inv_std(var: f32, eps: f32) -> f32 {
    1.0 / (var + eps).sqrt()
}

/// What training's statistics pass writes, per channel.
pub(super) struct Stats<'a> {
    pub mean: &'a mut [f32],
    pub invstd: &'a mut [f32],
    pub running_mean: &'a mut [f32],
    pub running_var: &'a mut [f32],
}

/// The batch's mean and inverse standard deviation per channel, two passes
/// (the mean, then the squared deviations from it: no cancellation of
/// large squares), and the running statistics moved towards them.
pub(super) fn batch_stats(c: usize, hw: usize, x: &[f32], args: BatchNormArgs, out: Stats<'_>) {
    let count = x.len() / c;
    let unbiased = count as f32 / (count - 1) as f32;
    let m = args.momentum;
    out.mean
        .par_iter_mut()
        .zip(out.invstd.par_iter_mut())
        .zip(out.running_mean.par_iter_mut().zip(out.running_var.par_iter_mut()))
        .enumerate()
        .for_each(|(ch, ((mean, invstd), (rm, rv)))| {
            let sum: f64 = planes(c, hw, x, ch).flatten().map(|&v| v as f64).sum();
            let mu = sum / count as f64;
            let squares: f64 = planes(c, hw, x, ch)
                .flatten()
                .map(|&v| (v as f64 - mu) * (v as f64 - mu))
                .sum();
            let var = (squares / count as f64) as f32;
            *mean = mu as f32;
            *invstd = inv_std(var, args.eps);
            *rm = m * *mean + (1.0 - m) * *rm;
            *rv = m * (var * unbiased) + (1.0 - m) * *rv;
        });
}

/// Evaluation's statistics: the running ones.
pub(super) fn eval_stats(rm: &[f32], rv: &[f32], eps: f32, mean: &mut [f32], invstd: &mut [f32]) {
    mean.copy_from_slice(rm);
    for (i, &v) in invstd.iter_mut().zip(rv) {
        *i = inv_std(v, eps);
    }
}

/// `y = (x − μ)·invstd·w + b`, per channel.
#[allow(clippy::too_many_arguments)]
pub(super) fn normalize(
    c: usize,
    hw: usize,
    x: &[f32],
    mean: &[f32],
    invstd: &[f32],
    weight: &[f32],
    bias: &[f32],
    y: &mut [f32],
) {
    y.par_chunks_mut(PLANES_PER_TASK * hw)
        .zip(x.par_chunks(PLANES_PER_TASK * hw))
        .enumerate()
        .for_each(|(t, (y, x))| {
            for (p, (y, x)) in y.chunks_exact_mut(hw).zip(x.chunks_exact(hw)).enumerate() {
                let ch = (t * PLANES_PER_TASK + p) % c;
                let (mu, is, w, b) = (mean[ch], invstd[ch], weight[ch], bias[ch]);
                for (y, &x) in y.iter_mut().zip(x) {
                    *y = (x - mu) * is * w + b;
                }
            }
        });
}

/// Per channel, `Σ dy·x̂` (the weight's gradient) and `Σ dy` (the bias's).
#[allow(clippy::too_many_arguments)]
pub(super) fn backward_sums(
    c: usize,
    hw: usize,
    x: &[f32],
    gy: &[f32],
    mean: &[f32],
    invstd: &[f32],
    sum_dy_xhat: &mut [f32],
    sum_dy: &mut [f32],
) {
    sum_dy_xhat
        .par_iter_mut()
        .zip(sum_dy.par_iter_mut())
        .enumerate()
        .for_each(|(ch, (dw, db))| {
            let mu = mean[ch] as f64;
            let (mut centred, mut total) = (0.0f64, 0.0f64);
            for (x, gy) in planes(c, hw, x, ch).zip(planes(c, hw, gy, ch)) {
                for (&x, &g) in x.iter().zip(gy) {
                    centred += g as f64 * (x as f64 - mu);
                    total += g as f64;
                }
            }
            // invstd is one factor of every term: applied once, after the sum.
            *dw = (centred * invstd[ch] as f64) as f32;
            *db = total as f32;
        });
}

/// The per-channel values the input gradient reads.
pub(super) struct Channels<'a> {
    pub mean: &'a [f32],
    pub invstd: &'a [f32],
    pub weight: &'a [f32],
    pub sum_dy_xhat: &'a [f32],
    pub sum_dy: &'a [f32],
}

/// `dx = w·invstd·(dy − Σdy/n − x̂·Σdy·x̂/n)` in training (the batch's
/// statistics depend on `x`), `dx = w·invstd·dy` in evaluation.
#[allow(clippy::too_many_arguments)]
pub(super) fn input_grad(c: usize, hw: usize, training: bool, k: Channels<'_>, x: &[f32], gy: &[f32], gx: &mut [f32]) {
    let count = (x.len() / c) as f32;
    gx.par_chunks_mut(PLANES_PER_TASK * hw)
        .zip(
            x.par_chunks(PLANES_PER_TASK * hw)
                .zip(gy.par_chunks(PLANES_PER_TASK * hw)),
        )
        .enumerate()
        .for_each(|(t, (gx, (x, gy)))| {
            for (p, (gx, (x, gy))) in gx
                .chunks_exact_mut(hw)
                .zip(x.chunks_exact(hw).zip(gy.chunks_exact(hw)))
                .enumerate()
            {
                let ch = (t * PLANES_PER_TASK + p) % c;
                let (mu, is) = (k.mean[ch], k.invstd[ch]);
                let scale = k.weight[ch] * is;
                if training {
                    let (mean_dy, mean_dy_xhat) = (k.sum_dy[ch] / count, k.sum_dy_xhat[ch] / count);
                    for (gx, (&x, &g)) in gx.iter_mut().zip(x.iter().zip(gy)) {
                        let xhat = (x - mu) * is;
                        *gx = scale * (g - mean_dy - xhat * mean_dy_xhat);
                    }
                } else {
                    for (gx, &g) in gx.iter_mut().zip(gy) {
                        *gx = scale * g;
                    }
                }
            }
        });
}
