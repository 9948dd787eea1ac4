use crate::backend::BackendError;
use crate::ops::{math, CHUNK};
use rayon::prelude::*;

pub(super) fn forward(x: &[f32], y: &mut [f32]) -> Result<(), BackendError> {
    y.par_chunks_mut(CHUNK).zip(x.par_chunks(CHUNK)).for_each(|(y, x)| {
        y.iter_mut().zip(x).for_each(|(y, &x)| *y = math::tanh(x));
    });
    Ok(())
}

pub(super) fn backward(y: &[f32], gy: &[f32], gx: &mut [f32]) -> Result<(), BackendError> {
    gx.par_chunks_mut(CHUNK)
        .zip(y.par_chunks(CHUNK).zip(gy.par_chunks(CHUNK)))
        .for_each(|(gx, (y, gy))| {
            for ((gx, &y), &gy) in gx.iter_mut().zip(y).zip(gy) {
                *gx = gy * (1.0 - y * y);
            }
        });
    Ok(())
}
