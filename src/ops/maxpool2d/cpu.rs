use crate::tensor::Shape;
use rayon::prelude::*;

/// Input offsets of the four candidates, in the order their index is stored.
fn window(w: usize) -> [usize; 4] {
    [0, 1, w, w + 1]
}

pub(super) fn forward(x: Shape, input: &[f32], y: &mut [f32], winner: &mut [u8]) {
    let (h, w) = (x.dim(2), x.dim(3));
    let (oh, ow) = (h / 2, w / 2);
    let offsets = window(w);
    y.par_chunks_mut(oh * ow)
        .zip(winner.par_chunks_mut(oh * ow))
        .zip(input.par_chunks(h * w))
        .for_each(|((y, winner), plane)| {
            for r in 0..oh {
                for c in 0..ow {
                    let base = 2 * r * w + 2 * c;
                    let (mut best, mut arg) = (plane[base], 0u8);
                    for (k, off) in offsets.iter().enumerate().skip(1) {
                        let v = plane[base + off];
                        // `>` keeps the first maximum, as PyTorch does; NaN wins so it propagates.
                        if v > best || v.is_nan() {
                            best = v;
                            arg = k as u8;
                        }
                    }
                    y[r * ow + c] = best;
                    winner[r * ow + c] = arg;
                }
            }
        });
}

pub(super) fn backward(x: Shape, gy: &[f32], winner: &[u8], gx: &mut [f32]) {
    let (h, w) = (x.dim(2), x.dim(3));
    let (oh, ow) = (h / 2, w / 2);
    let offsets = window(w);
    gx.par_chunks_mut(h * w)
        .zip(gy.par_chunks(oh * ow).zip(winner.par_chunks(oh * ow)))
        .for_each(|(plane, (gy, winner))| {
            plane.fill(0.0);
            for r in 0..oh {
                for c in 0..ow {
                    let i = r * ow + c;
                    plane[2 * r * w + 2 * c + offsets[winner[i] as usize & 3]] = gy[i];
                }
            }
        });
}
