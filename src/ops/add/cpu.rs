use crate::ops::CHUNK;
use rayon::prelude::*;

pub(super) fn forward(a: &[f32], b: &[f32], y: &mut [f32]) {
    y.par_chunks_mut(CHUNK)
        .zip(a.par_chunks(CHUNK).zip(b.par_chunks(CHUNK)))
        .for_each(|(y, (a, b))| {
            for ((y, &a), &b) in y.iter_mut().zip(a).zip(b) {
                *y = a + b;
            }
        });
}

pub(super) fn copy(src: &[f32], dst: &mut [f32]) {
    dst.par_chunks_mut(CHUNK)
        .zip(src.par_chunks(CHUNK))
        .for_each(|(d, s)| d.copy_from_slice(s));
}
