//! The CPU's tree_lstm_cell: a node at a time, units in order; rows split
//! among workers in tasks of at least [`CHUNK`] units.

use crate::ops::math::tanh;
use crate::ops::CHUNK;
use rayon::prelude::*;

/// `1 / (1 + e^−x)`, as the GPU kernel computes it.
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// Rows per task, for rows of `hidden` units.
fn rows_per_task(hidden: usize) -> usize {
    (CHUNK / hidden.max(1)).max(1)
}

/// The children's cells, row by row: `None` for leaves.
pub(super) type Children<'a> = Option<(&'a [f32], &'a [f32])>;

/// Every node of the batch: `gates` `[B, G]` to their activations in
/// `acts` (same layout), `h` and `c` `[B, H]`. `G` is `5H` with children
/// (i, f_l, f_r, o, u), `3H` without (i, o, u).
pub(super) fn forward(
    hidden: usize,
    gates: &[f32],
    children: Children<'_>,
    acts: &mut [f32],
    h: &mut [f32],
    c: &mut [f32],
) {
    let width = if children.is_some() { 5 * hidden } else { 3 * hidden };
    let per = rows_per_task(hidden);
    acts.par_chunks_mut(per * width)
        .zip(h.par_chunks_mut(per * hidden).zip(c.par_chunks_mut(per * hidden)))
        .enumerate()
        .for_each(|(task, (acts, (h, c)))| {
            let first = task * per;
            for (r, (a, (h, c))) in acts
                .chunks_exact_mut(width)
                .zip(h.chunks_exact_mut(hidden).zip(c.chunks_exact_mut(hidden)))
                .enumerate()
            {
                let b = first + r;
                let pre = &gates[b * width..][..width];
                for j in 0..hidden {
                    let (o, cell) = match children {
                        Some((cl, cr)) => {
                            let [i, fl, fr, o] = [0, 1, 2, 3].map(|q| sigmoid(pre[q * hidden + j]));
                            let u = tanh(pre[4 * hidden + j]);
                            for (q, v) in [i, fl, fr, o, u].into_iter().enumerate() {
                                a[q * hidden + j] = v;
                            }
                            let at = b * hidden + j;
                            (o, i * u + fl * cl[at] + fr * cr[at])
                        }
                        None => {
                            let (i, o) = (sigmoid(pre[j]), sigmoid(pre[hidden + j]));
                            let u = tanh(pre[2 * hidden + j]);
                            for (q, v) in [i, o, u].into_iter().enumerate() {
                                a[q * hidden + j] = v;
                            }
                            (o, i * u)
                        }
                    };
                    c[j] = cell;
                    h[j] = o * tanh(cell);
                }
            }
        });
}

/// What backward reads: the forward's activations and cells, the
/// children's cells (absent for leaves), and the gradients reaching `h`
/// and `c` (absent: zero).
pub(super) struct Upstream<'a> {
    pub acts: &'a [f32],
    pub c: &'a [f32],
    pub children: Children<'a>,
    pub dh: Option<&'a [f32]>,
    pub dc: Option<&'a [f32]>,
}

/// The gradients wanted: the gates' (`[B, G]`) and each child cell's.
pub(super) struct Grads<'a> {
    pub gates: Option<&'a mut [f32]>,
    pub c_left: Option<&'a mut [f32]>,
    pub c_right: Option<&'a mut [f32]>,
}

/// `d(c) = dc + dh·o·(1 − tanh²c)`; the gates' gradients through their
/// activations; each child's cell `d(c)·f` of its forget gate.
pub(super) fn backward(hidden: usize, up: Upstream<'_>, out: Grads<'_>) {
    let inner = up.children.is_some();
    let width = if inner { 5 * hidden } else { 3 * hidden };
    let rows = up.c.len() / hidden.max(1);
    let zero = |g: Option<&[f32]>, at: usize| g.map_or(0.0, |g| g[at]);
    let Grads {
        mut gates,
        mut c_left,
        mut c_right,
    } = out;
    for b in 0..rows {
        let a = &up.acts[b * width..][..width];
        for j in 0..hidden {
            let at = b * hidden + j;
            let tc = tanh(up.c[at]);
            let dh = zero(up.dh, at);
            let (i, o, u) = if inner {
                (a[j], a[3 * hidden + j], a[4 * hidden + j])
            } else {
                (a[j], a[hidden + j], a[2 * hidden + j])
            };
            let dcell = zero(up.dc, at) + dh * o * (1.0 - tc * tc);
            let d_i = dcell * u * i * (1.0 - i);
            let d_o = dh * tc * o * (1.0 - o);
            let d_u = dcell * i * (1.0 - u * u);
            match up.children {
                Some((cl, cr)) => {
                    let (fl, fr) = (a[hidden + j], a[2 * hidden + j]);
                    if let Some(g) = gates.as_deref_mut() {
                        let row = &mut g[b * width..][..width];
                        row[j] = d_i;
                        row[hidden + j] = dcell * cl[at] * fl * (1.0 - fl);
                        row[2 * hidden + j] = dcell * cr[at] * fr * (1.0 - fr);
                        row[3 * hidden + j] = d_o;
                        row[4 * hidden + j] = d_u;
                    }
                    if let Some(g) = c_left.as_deref_mut() {
                        g[at] = dcell * fl;
                    }
                    if let Some(g) = c_right.as_deref_mut() {
                        g[at] = dcell * fr;
                    }
                }
                None => {
                    if let Some(g) = gates.as_deref_mut() {
                        let row = &mut g[b * width..][..width];
                        row[j] = d_i;
                        row[hidden + j] = d_o;
                        row[2 * hidden + j] = d_u;
                    }
                }
            }
        }
    }
}
