use super::PoolGeometry;
use crate::tensor::Shape;
use rayon::prelude::*;

/// Planes per rayon task: a 100-image batch of 10 or 20 channels splits into
/// a few dozen tasks, enough for two cores, few enough that scheduling is noise.
const PLANES_PER_TASK: usize = 32;

/// The winner of one 2×2 window `[a, b; c, d]` and its index (0..4, row-major).
/// `>` keeps the first maximum, as PyTorch does; a NaN wins (the last one
/// among `b, c, d`, or `a` when it alone is NaN) so that it propagates.
#[inline(always)]
fn winner(a: f32, b: f32, c: f32, d: f32) -> (f32, u8) {
    // Selects on bit masks rather than branches: which input wins is data,
    // and a mispredicted branch per window costs more than the window.
    let (mut best, mut arg) = (a.to_bits(), 0u32);
    for (v, k) in [(b, 1u32), (c, 2), (d, 3)] {
        let take = 0u32.wrapping_sub(((v > f32::from_bits(best)) | v.is_nan()) as u32);
        best = (v.to_bits() & take) | (best & !take);
        arg = (k & take) | (arg & !take);
    }
    (f32::from_bits(best), arg as u8)
}

pub(super) fn forward(x: Shape, input: &[f32], y: &mut [f32], winner_of: &mut [u8]) {
    let (h, w) = (x.dim(2), x.dim(3));
    let (oh, ow) = (h / 2, w / 2);
    y.par_chunks_mut(PLANES_PER_TASK * oh * ow)
        .zip(winner_of.par_chunks_mut(PLANES_PER_TASK * oh * ow))
        .zip(input.par_chunks(PLANES_PER_TASK * h * w))
        .for_each(|((y, winners), planes)| {
            for ((y, winners), plane) in y
                .chunks_exact_mut(oh * ow)
                .zip(winners.chunks_exact_mut(oh * ow))
                .zip(planes.chunks_exact(h * w))
            {
                // Two input rows per output row; an odd last row is dropped.
                for ((y, winners), rows) in y
                    .chunks_exact_mut(ow)
                    .zip(winners.chunks_exact_mut(ow))
                    .zip(plane.chunks_exact(2 * w))
                {
                    let (top, bottom) = rows.split_at(w);
                    for (((y, arg), t), b) in y
                        .iter_mut()
                        .zip(winners.iter_mut())
                        .zip(top.chunks_exact(2))
                        .zip(bottom.chunks_exact(2))
                    {
                        (*y, *arg) = winner(t[0], t[1], b[0], b[1]);
                    }
                }
            }
        });
}

/// With `relu_of`, the pool's output went through a relu (fused): a
/// gradient passes only where that output is positive.
pub(super) fn backward(x: Shape, gy: &[f32], relu_of: Option<&[f32]>, winners: &[u8], gx: &mut [f32]) {
    let (h, w) = (x.dim(2), x.dim(3));
    let (oh, ow) = (h / 2, w / 2);
    let task = PLANES_PER_TASK * oh * ow;
    gx.par_chunks_mut(PLANES_PER_TASK * h * w)
        .zip(gy.par_chunks(task).zip(winners.par_chunks(task)))
        .enumerate()
        .for_each(|(t, (planes, (gy, winners)))| {
            let ys = relu_of.map(|y| &y[t * task..][..gy.len()]);
            for (p, (plane, (gy, winners))) in planes
                .chunks_exact_mut(h * w)
                .zip(gy.chunks_exact(oh * ow).zip(winners.chunks_exact(oh * ow)))
                .enumerate()
            {
                let ys = ys.map(|y| &y[p * oh * ow..][..oh * ow]);
                // Every input of a window is written: the winner gets the
                // gradient, the others 0; a dropped last row or column gets 0.
                let (windows, rest) = plane.split_at_mut(2 * oh * w);
                rest.fill(0.0);
                for (r, (rows, (gy, winners))) in windows
                    .chunks_exact_mut(2 * w)
                    .zip(gy.chunks_exact(ow).zip(winners.chunks_exact(ow)))
                    .enumerate()
                {
                    let yrow = ys.map(|y| &y[r * ow..][..ow]);
                    let (top, bottom) = rows.split_at_mut(w);
                    if w % 2 == 1 {
                        top[w - 1] = 0.0;
                        bottom[w - 1] = 0.0;
                    }
                    for (c, (((t, b), &g), &arg)) in top
                        .chunks_exact_mut(2)
                        .zip(bottom.chunks_exact_mut(2))
                        .zip(gy)
                        .zip(winners)
                        .enumerate()
                    {
                        let g = match yrow {
                            Some(y) if y[c] <= 0.0 => 0.0,
                            _ => g,
                        };
                        let pick = |k: u8| if arg == k { g } else { 0.0 };
                        t[0] = pick(0);
                        t[1] = pick(1);
                        b[0] = pick(2);
                        b[1] = pick(3);
                    }
                }
            }
        });
}
/// Any window: the winner starts at −∞ with the window's first input, as
/// PyTorch's does, so padding never wins and a window of −∞ names a real input.
pub(super) fn window_forward(g: &PoolGeometry, input: &[f32], y: &mut [f32], winner_of: &mut [u8]) {
    let (plane_in, plane_out) = (g.h * g.w, g.oh * g.ow);
    y.par_chunks_mut(plane_out)
        .zip(winner_of.par_chunks_mut(plane_out))
        .zip(input.par_chunks(plane_in))
        .for_each(|((y, winners), x)| {
            for r in 0..g.oh {
                let (rows, top) = g.window(r, g.h);
                for c in 0..g.ow {
                    let (cols, left) = g.window(c, g.w);
                    let at =
                        |i: usize, j: usize| ((i as isize - top) as usize * g.k + (j as isize - left) as usize) as u8;
                    let (mut best, mut arg) = (f32::NEG_INFINITY, at(rows.start, cols.start));
                    for i in rows.clone() {
                        for j in cols.clone() {
                            let v = x[i * g.w + j];
                            if v > best || v.is_nan() {
                                (best, arg) = (v, at(i, j));
                            }
                        }
                    }
                    y[r * g.ow + c] = best;
                    winners[r * g.ow + c] = arg;
                }
            }
        });
}

/// Every input gathers the gradients of the outputs it won, in output order
/// (as the CUDA kernel does), so no two writers meet.
pub(super) fn window_backward(g: &PoolGeometry, gy: &[f32], winners: &[u8], gx: &mut [f32]) {
    let (plane_in, plane_out) = (g.h * g.w, g.oh * g.ow);
    gx.par_chunks_mut(plane_in)
        .zip(gy.par_chunks(plane_out).zip(winners.par_chunks(plane_out)))
        .for_each(|(gx, (gy, winners))| {
            for i in 0..g.h {
                let rows = g.covering(i, g.oh);
                for j in 0..g.w {
                    let mut sum = 0.0f32;
                    for r in rows.clone() {
                        let dr = i + g.pad - r * g.stride;
                        for c in g.covering(j, g.ow) {
                            let dc = j + g.pad - c * g.stride;
                            if winners[r * g.ow + c] as usize == dr * g.k + dc {
                                sum += gy[r * g.ow + c];
                            }
                        }
                    }
                    gx[i * g.w + j] = sum;
                }
            }
        });
}

#[cfg(test)]
mod tests {
    //! The op's tests use small planes; these cover MNIST-sized planes, odd
    //! sizes, ties and NaN against a direct scan.
    use super::*;

    fn direct(h: usize, w: usize, planes: usize, x: &[f32]) -> (Vec<f32>, Vec<u8>) {
        let (oh, ow) = (h / 2, w / 2);
        let (mut y, mut arg) = (vec![0.0; planes * oh * ow], vec![0; planes * oh * ow]);
        for p in 0..planes {
            for r in 0..oh {
                for c in 0..ow {
                    let at = |k: usize| x[p * h * w + (2 * r + k / 2) * w + 2 * c + k % 2];
                    let (mut best, mut win) = (at(0), 0);
                    for k in 1..4 {
                        if at(k) > best || at(k).is_nan() {
                            (best, win) = (at(k), k as u8);
                        }
                    }
                    y[(p * oh + r) * ow + c] = best;
                    arg[(p * oh + r) * ow + c] = win;
                }
            }
        }
        (y, arg)
    }

    #[test]
    fn forward_and_backward_match_a_direct_scan() {
        for (planes, h, w) in [(40, 24, 24), (70, 8, 8), (3, 7, 22), (5, 10, 9), (2, 5, 5)] {
            let n = planes * h * w;
            // Few distinct values, so that ties are common; some NaNs.
            let x: Vec<f32> = (0..n)
                .map(|i| {
                    let v = ((i * 7919) % 13) as f32 - 6.0;
                    if (i * 104_729) % 97 == 0 {
                        f32::NAN
                    } else {
                        v
                    }
                })
                .collect();
            let shape = Shape::new(&[1, planes, h, w]);
            let (oh, ow) = (h / 2, w / 2);
            let (mut y, mut arg) = (vec![0.0; planes * oh * ow], vec![9; planes * oh * ow]);
            forward(shape, &x, &mut y, &mut arg);
            let (want_y, want_arg) = direct(h, w, planes, &x);
            assert_eq!(arg, want_arg, "{h}×{w}");
            for (a, b) in y.iter().zip(&want_y) {
                assert!(a == b || (a.is_nan() && b.is_nan()), "{h}×{w}: {a} vs {b}");
            }

            let gy: Vec<f32> = (0..y.len()).map(|i| i as f32 + 1.0).collect();
            let mut gx = vec![f32::NAN; n];
            backward(shape, &gy, None, &arg, &mut gx);
            let mut want = vec![0.0; n];
            for p in 0..planes {
                for r in 0..oh {
                    for c in 0..ow {
                        let o = (p * oh + r) * ow + c;
                        let k = arg[o] as usize;
                        want[p * h * w + (2 * r + k / 2) * w + 2 * c + k % 2] = gy[o];
                    }
                }
            }
            assert_eq!(gx, want, "{h}×{w}");
        }
    }
}
