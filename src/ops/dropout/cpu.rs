use super::keep;
use crate::ops::CHUNK;
use rayon::prelude::*;

/// `out[i] = input[i] / (1 - p)` where draw `first + i` keeps it, else 0.
pub(super) fn apply(input: &[f32], out: &mut [f32], p: f32, seed: u64, first: u32) {
    let scale = 1.0 / (1.0 - p);
    out.par_chunks_mut(CHUNK)
        .zip(input.par_chunks(CHUNK))
        .enumerate()
        .for_each(|(chunk, (out, input))| {
            let first = first as u64 + (chunk * CHUNK) as u64;
            for (i, (o, x)) in out.iter_mut().zip(input).enumerate() {
                *o = if keep(seed, first + i as u64, p) {
                    x * scale
                } else {
                    0.0
                };
            }
        });
}
