use super::PoolGeometry;
use crate::backend::cpu::simd::{vectorized, Vectorized};
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

/// `v` (at window index `at`) takes the lead from `best` if it is larger,
/// or NaN: [`winner`]'s rule, on bit masks rather than a branch per input.
#[inline(always)]
fn challenge(best: &mut f32, won: &mut u32, v: f32, at: u32) {
    let take = 0u32.wrapping_sub(((v > *best) | v.is_nan()) as u32);
    *best = f32::from_bits((v.to_bits() & take) | (best.to_bits() & !take));
    *won = (at & take) | (*won & !take);
}

/// Any window: the winner starts at −∞ with the window's first input, as
/// PyTorch's does, so padding never wins and a window of −∞ names a real
/// input.
pub(super) fn window_forward(g: &PoolGeometry, input: &[f32], y: &mut [f32], winner_of: &mut [u8]) {
    let (plane_in, plane_out) = (g.h * g.w, g.oh * g.ow);
    y.par_chunks_mut(PLANES_PER_TASK * plane_out)
        .zip(winner_of.par_chunks_mut(PLANES_PER_TASK * plane_out))
        .zip(input.par_chunks(PLANES_PER_TASK * plane_in))
        .for_each(|((y, winners), x)| vectorized(WindowPlanes { g, x, y, winners }));
}

/// One task's planes of [`window_forward`], compiled for the CPU's widest
/// vectors. Comparisons and selections only, so either copy gives the
/// same bits.
struct WindowPlanes<'a> {
    g: &'a PoolGeometry,
    x: &'a [f32],
    y: &'a mut [f32],
    winners: &'a mut [u8],
}

impl Vectorized for WindowPlanes<'_> {
    type Output = ();

    #[inline(always)]
    fn run<const FMA: bool>(self) {
        let Self { g, x, y, winners } = self;
        let (plane_in, plane_out) = (g.h * g.w, g.oh * g.ow);
        // The columns whose 3×3 window lies inside the input: there, where
        // the rows do too, outputs go eight or four at a time.
        let (lo, hi) = match (g.k, g.stride) {
            (3, 1 | 2) if g.w + g.pad >= 3 => {
                let hi = ((g.w + g.pad - 3) / g.stride + 1).min(g.ow);
                (g.pad.div_ceil(g.stride).min(hi), hi)
            }
            _ => (0, 0),
        };
        let planes = y.chunks_exact_mut(plane_out).zip(winners.chunks_exact_mut(plane_out));
        for ((y, winners), x) in planes.zip(x.chunks_exact(plane_in)) {
            for r in 0..g.oh {
                let (rows, top) = g.window(r, g.h);
                let (y, winners) = (&mut y[r * g.ow..][..g.ow], &mut winners[r * g.ow..][..g.ow]);
                let inside = if rows.len() == 3 { lo..hi } else { 0..0 };
                for c in (0..inside.start).chain(inside.end..g.ow) {
                    (y[c], winners[c]) = one_window(g, x, (rows.clone(), top), c);
                }
                // The inside windows a vector at a time, the last vector
                // shifted back to end with them (overlapping the one
                // before: those outputs are computed twice, the same).
                let at = |c: usize| rows.start * g.w + c * g.stride - g.pad;
                match (inside.len(), g.stride) {
                    (n, 1) if n >= 8 => vectors::<1, 8>(x, g.w, inside, at, y, winners),
                    (n, 2) if n >= 8 => vectors::<2, 8>(x, g.w, inside, at, y, winners),
                    (n, 1) if n >= 4 => vectors::<1, 4>(x, g.w, inside, at, y, winners),
                    (n, 2) if n >= 4 => vectors::<2, 4>(x, g.w, inside, at, y, winners),
                    _ => {
                        for c in inside {
                            (y[c], winners[c]) = one_window(g, x, (rows.clone(), top), c);
                        }
                    }
                }
            }
        }
    }
}

/// The inside windows `cs` of one output row (at least `L` of them), `L`
/// at a time, the last `L` shifted back to end at `cs.end`; `at(c)` is
/// where window `c` starts in `x`.
#[inline(always)]
fn vectors<const S: usize, const L: usize>(
    x: &[f32],
    w: usize,
    cs: std::ops::Range<usize>,
    at: impl Fn(usize) -> usize,
    y: &mut [f32],
    winners: &mut [u8],
) {
    let mut c = cs.start;
    loop {
        let c0 = c.min(cs.end - L);
        windows::<S, L>(&x[at(c0)..], w, &mut y[c0..c0 + L], &mut winners[c0..c0 + L]);
        c = c0 + L;
        if c >= cs.end {
            break;
        }
    }
}

/// `L` neighbouring 3×3 windows inside the plane, at stride `S`, the first
/// starting at `x[0]` (rows `w` apart): each lane runs [`challenge`]'s
/// rule over its window in [`one_window`]'s order, so the same winner.
#[inline(always)]
fn windows<const S: usize, const L: usize>(x: &[f32], w: usize, y: &mut [f32], won: &mut [u8]) {
    let mut best = [f32::NEG_INFINITY; L];
    // An inside window's first input is its index 0.
    let mut arg = [0u32; L];
    for di in 0..3 {
        let row = &x[di * w..][..S * (L - 1) + 3];
        for dj in 0..3 {
            let at = (di * 3 + dj) as u32;
            for l in 0..L {
                challenge(&mut best[l], &mut arg[l], row[S * l + dj], at);
            }
        }
    }
    y.copy_from_slice(&best);
    for (w, a) in won.iter_mut().zip(arg) {
        *w = a as u8;
    }
}

/// Output `c` of the row whose window's rows are `rows` (the unclipped
/// window starting at row `top`), and its winner.
#[inline(always)]
fn one_window(g: &PoolGeometry, x: &[f32], (rows, top): (std::ops::Range<usize>, isize), c: usize) -> (f32, u8) {
    let (cols, left) = g.window(c, g.w);
    // Where input (i, j) sits in the unclipped k × k window.
    let at = |i: usize, j: usize| ((i as isize - top) * g.k as isize + j as isize - left) as u32;
    let (mut best, mut won) = (f32::NEG_INFINITY, at(rows.start, cols.start));
    if rows.len() == 3 && cols.len() == 3 && g.k == 3 {
        // A whole 3×3 window: fixed loops, unrolled.
        for di in 0..3 {
            let row = &x[(rows.start + di) * g.w + cols.start..][..3];
            for (dj, &v) in row.iter().enumerate() {
                challenge(&mut best, &mut won, v, (di * 3 + dj) as u32);
            }
        }
    } else {
        for i in rows {
            let row = &x[i * g.w..][cols.clone()];
            for (j, &v) in cols.clone().zip(row) {
                challenge(&mut best, &mut won, v, at(i, j));
            }
        }
    }
    (best, won as u8)
}

/// Each output's gradient added onto the input that won its window, the
/// outputs in order: an input that won several windows sums their
/// gradients in the order the CUDA kernel's gather does (rows, then
/// columns), from 0, so the same bits. Scattering from the outputs takes
/// no division; gathering into each input had to work out the windows
/// covering it.
pub(super) fn window_backward(g: &PoolGeometry, gy: &[f32], winners: &[u8], gx: &mut [f32]) {
    let (plane_in, plane_out) = (g.h * g.w, g.oh * g.ow);
    // A winner's row and column in its window, looked up rather than
    // divided out per output.
    let mut offsets = [(0usize, 0usize); 256];
    for (arg, o) in offsets.iter_mut().enumerate().take(g.k * g.k) {
        *o = (arg / g.k, arg % g.k);
    }
    // Where output (r, c)'s window starts, possibly in the padding.
    let start = |o: usize| (o * g.stride) as isize - g.pad as isize;
    gx.par_chunks_mut(PLANES_PER_TASK * plane_in)
        .zip(
            gy.par_chunks(PLANES_PER_TASK * plane_out)
                .zip(winners.par_chunks(PLANES_PER_TASK * plane_out)),
        )
        .for_each(|(gx, (gy, winners))| {
            gx.fill(0.0);
            let planes = gy.chunks_exact(plane_out).zip(winners.chunks_exact(plane_out));
            for (gx, (gy, winners)) in gx.chunks_exact_mut(plane_in).zip(planes) {
                for r in 0..g.oh {
                    let outputs = gy[r * g.ow..][..g.ow].iter().zip(&winners[r * g.ow..][..g.ow]);
                    for (c, (&g_out, &arg)) in outputs.enumerate() {
                        let (di, dj) = offsets[arg as usize];
                        let (i, j) = ((start(r) + di as isize) as usize, (start(c) + dj as isize) as usize);
                        gx[i * g.w + j] += g_out;
                    }
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

    /// The window kernels' definitions, one input at a time: each output
    /// scans its window in row-major order from −∞ (the first input named
    /// when nothing beats it); each input sums, from 0, the gradients of
    /// the outputs it won, rows then columns (the CUDA kernel's order).
    fn window_direct(g: &PoolGeometry, x: &[f32], gy: &[f32]) -> (Vec<f32>, Vec<u8>, Vec<f32>) {
        let (plane_in, plane_out) = (g.h * g.w, g.oh * g.ow);
        let (mut y, mut arg) = (vec![0.0; g.planes * plane_out], vec![0; g.planes * plane_out]);
        for p in 0..g.planes {
            for r in 0..g.oh {
                for c in 0..g.ow {
                    let (rows, top) = g.window(r, g.h);
                    let (cols, left) = g.window(c, g.w);
                    let at = |i: usize, j: usize| ((i as isize - top) * g.k as isize + j as isize - left) as u8;
                    let (mut best, mut won) = (f32::NEG_INFINITY, at(rows.start, cols.start));
                    for i in rows.clone() {
                        for j in cols.clone() {
                            let v = x[p * plane_in + i * g.w + j];
                            if v > best || v.is_nan() {
                                (best, won) = (v, at(i, j));
                            }
                        }
                    }
                    (y[p * plane_out + r * g.ow + c], arg[p * plane_out + r * g.ow + c]) = (best, won);
                }
            }
        }
        let mut gx = vec![0.0; g.planes * plane_in];
        for p in 0..g.planes {
            for i in 0..g.h {
                for j in 0..g.w {
                    let mut sum = 0.0f32;
                    for r in g.covering(i, g.oh) {
                        for c in g.covering(j, g.ow) {
                            let (top, left) = (g.window(r, g.h).1, g.window(c, g.w).1);
                            let here = ((i as isize - top) * g.k as isize + j as isize - left) as u8;
                            if arg[p * plane_out + r * g.ow + c] == here {
                                sum += gy[p * plane_out + r * g.ow + c];
                            }
                        }
                    }
                    gx[p * plane_in + i * g.w + j] = sum;
                }
            }
        }
        (y, arg, gx)
    }

    #[test]
    fn window_kernels_match_their_definition_bit_for_bit() {
        use crate::ops::maxpool2d::Pool2dArgs;
        let pool = |kernel, stride, padding, ceil_mode| Pool2dArgs {
            kernel,
            stride,
            padding,
            ceil_mode,
        };
        // SqueezeNet's 3×3/2 in ceil mode (13, 6 and 3 inside windows a row:
        // vectors of 8 and 4, the last shifted back, and none), ResNet's
        // padded 3×3/2, overlapping stride-1 windows (an input's gradient
        // sums several), a 2×2 window.
        let cases = [
            (pool(3, 2, 0, true), 35, 28, 28),
            (pool(3, 2, 0, true), 16, 14, 14),
            (pool(3, 2, 0, true), 40, 7, 7),
            (pool(3, 1, 1, false), 3, 6, 8),
            (pool(3, 2, 1, false), 9, 21, 30),
            (pool(3, 1, 1, false), 6, 11, 19),
            (pool(2, 1, 0, true), 5, 9, 8),
            (pool(3, 3, 1, true), 4, 10, 17),
        ];
        for (args, planes, h, w) in cases {
            let g = args
                .geometry("test", Shape::new(&[1, planes, h, w]))
                .expect("a pool that fits");
            let n = planes * h * w;
            // Four values in a scrambled order, so that ties are common in
            // every direction; some NaNs and −∞.
            let x: Vec<f32> = (0..n)
                .map(|i| match (i * 104_729) % 97 {
                    0 => f32::NAN,
                    1 => f32::NEG_INFINITY,
                    _ => ((i as u64 * 2_654_435_761) >> 13) as f32 % 4.0 - 2.0,
                })
                .collect();
            let gy: Vec<f32> = (0..g.planes * g.oh * g.ow)
                .map(|i| (i % 17) as f32 * 0.37 - 2.9)
                .collect();
            let (mut y, mut arg) = (vec![0.0; gy.len()], vec![u8::MAX; gy.len()]);
            window_forward(&g, &x, &mut y, &mut arg);
            let mut gx = vec![f32::NAN; n];
            window_backward(&g, &gy, &arg, &mut gx);
            let (want_y, want_arg, want_gx) = window_direct(&g, &x, &gy);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(bits(&y) == bits(&want_y), "{args:?} {h}×{w}: outputs");
            assert!(arg == want_arg, "{args:?} {h}×{w}: winners");
            assert!(bits(&gx) == bits(&want_gx), "{args:?} {h}×{w}: input gradients");
        }
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
