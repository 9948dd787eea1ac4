use super::divisor;
use crate::ops::maxpool2d::PoolGeometry;
use rayon::prelude::*;

pub(super) fn forward(g: &PoolGeometry, input: &[f32], y: &mut [f32]) {
    let (plane_in, plane_out) = (g.h * g.w, g.oh * g.ow);
    y.par_chunks_mut(plane_out)
        .zip(input.par_chunks(plane_in))
        .for_each(|(y, x)| {
            for r in 0..g.oh {
                let (rows, _) = g.window(r, g.h);
                for c in 0..g.ow {
                    let (cols, _) = g.window(c, g.w);
                    let mut sum = 0.0f32;
                    for i in rows.clone() {
                        for j in cols.clone() {
                            sum += x[i * g.w + j];
                        }
                    }
                    y[r * g.ow + c] = sum / (divisor(g, r, g.h) * divisor(g, c, g.w)) as f32;
                }
            }
        });
}

/// Every input gathers from the outputs whose window covers it, in output
/// order (as the CUDA kernel does), so no two writers meet.
pub(super) fn backward(g: &PoolGeometry, gy: &[f32], gx: &mut [f32]) {
    let (plane_in, plane_out) = (g.h * g.w, g.oh * g.ow);
    gx.par_chunks_mut(plane_in)
        .zip(gy.par_chunks(plane_out))
        .for_each(|(gx, gy)| {
            for i in 0..g.h {
                let rows = g.covering(i, g.oh);
                for j in 0..g.w {
                    let mut sum = 0.0f32;
                    for r in rows.clone() {
                        for c in g.covering(j, g.ow) {
                            sum += gy[r * g.ow + c] / (divisor(g, r, g.h) * divisor(g, c, g.w)) as f32;
                        }
                    }
                    gx[i * g.w + j] = sum;
                }
            }
        });
}
