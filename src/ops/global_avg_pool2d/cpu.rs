use rayon::prelude::*;

/// Planes per rayon task: the last stage of a CIFAR ResNet has 512 planes of
/// 4×4 per image, so a task of one plane would be all scheduling.
const PLANES_PER_TASK: usize = 64;

pub(super) fn forward(area: usize, x: &[f32], y: &mut [f32]) {
    y.par_chunks_mut(PLANES_PER_TASK)
        .zip(x.par_chunks(PLANES_PER_TASK * area))
        .for_each(|(y, x)| {
            for (y, plane) in y.iter_mut().zip(x.chunks_exact(area)) {
                // A sequential sum, as the CUDA kernel's, so both agree.
                let mut sum = 0.0f32;
                for &v in plane {
                    sum += v;
                }
                *y = sum / area as f32;
            }
        });
}

pub(super) fn backward(area: usize, gy: &[f32], gx: &mut [f32]) {
    gx.par_chunks_mut(PLANES_PER_TASK * area)
        .zip(gy.par_chunks(PLANES_PER_TASK))
        .for_each(|(gx, gy)| {
            for (plane, &g) in gx.chunks_exact_mut(area).zip(gy) {
                plane.fill(g / area as f32);
            }
        });
}

/// [`forward`] of a channels-last input: each image's pixels in order, each
/// channel's sum taking its values in the same order as [`forward`]'s, so
/// both layouts give the same bits.
pub(super) fn forward_nhwc(channels: usize, area: usize, x: &[f32], y: &mut [f32]) {
    if channels == 0 {
        return;
    }
    y.par_chunks_mut(channels)
        .zip(x.par_chunks(channels * area))
        .for_each(|(y, x)| {
            y.fill(0.0);
            for pixel in x.chunks_exact(channels) {
                for (sum, &v) in y.iter_mut().zip(pixel) {
                    *sum += v;
                }
            }
            for sum in y {
                *sum /= area as f32;
            }
        });
}

/// [`backward`] into a channels-last gradient.
pub(super) fn backward_nhwc(channels: usize, area: usize, gy: &[f32], gx: &mut [f32]) {
    if channels == 0 {
        return;
    }
    gx.par_chunks_mut(channels * area)
        .zip(gy.par_chunks(channels))
        .for_each(|(gx, gy)| {
            for pixel in gx.chunks_exact_mut(channels) {
                for (g, &v) in pixel.iter_mut().zip(gy) {
                    *g = v / area as f32;
                }
            }
        });
}
