use crate::ops::math::tanh;
use rayon::prelude::*;

/// `1 / (1 + e^−x)`, as the GPU kernel (and the sigmoid op) computes it.
fn sigmoid(x: f32) -> f32 {
    1.0 / (1.0 + (-x).exp())
}

/// One step for every row of the batch: rows of `4 * hidden` gates, of
/// `hidden` states.
pub(crate) fn forward(
    hidden: usize,
    x: &[f32],
    from_h: Option<&[f32]>,
    c_prev: Option<&[f32]>,
    acts: &mut [f32],
    h: &mut [f32],
    c: &mut [f32],
) {
    let (hd, gates) = (hidden, 4 * hidden);
    acts.par_chunks_mut(gates)
        .zip(h.par_chunks_mut(hd).zip(c.par_chunks_mut(hd)))
        .enumerate()
        .for_each(|(b, (a, (h, c)))| {
            let x = &x[b * gates..][..gates];
            let hg = from_h.map(|g| &g[b * gates..][..gates]);
            let cp = c_prev.map(|p| &p[b * hd..][..hd]);
            for j in 0..hd {
                let pre = |k: usize| x[k * hd + j] + hg.map_or(0.0, |g| g[k * hd + j]);
                let (i, f, g, o) = (sigmoid(pre(0)), sigmoid(pre(1)), tanh(pre(2)), sigmoid(pre(3)));
                let cell = f * cp.map_or(0.0, |p| p[j]) + i * g;
                c[j] = cell;
                h[j] = o * tanh(cell);
                a[j] = i;
                a[hd + j] = f;
                a[2 * hd + j] = g;
                a[3 * hd + j] = o;
            }
        });
}

/// What backward reads: the forward's activations and cell, the previous
/// cell, and the gradients reaching `h` and `c` (absent: zero).
pub(super) struct Upstream<'a> {
    pub acts: &'a [f32],
    pub c: &'a [f32],
    pub c_prev: Option<&'a [f32]>,
    pub dh: Option<&'a [f32]>,
    pub dc: Option<&'a [f32]>,
}

impl Upstream<'_> {
    /// Row `b`'s element `j`: `(i, f, g, o)`, and the gradient reaching
    /// `c` from both outputs, `dc + dh·o·(1 − tanh²c)`; and `dh·tanh c`.
    fn at(&self, hd: usize, b: usize, j: usize) -> ([f32; 4], f32, f32) {
        let a = &self.acts[b * 4 * hd..][..4 * hd];
        let gate = [a[j], a[hd + j], a[2 * hd + j], a[3 * hd + j]];
        let k = b * hd + j;
        let tc = tanh(self.c[k]);
        let dh = self.dh.map_or(0.0, |d| d[k]);
        let dcell = self.dc.map_or(0.0, |d| d[k]) + dh * gate[3] * (1.0 - tc * tc);
        (gate, dcell, dh * tc)
    }
}

/// The gates' gradient into `gates` and `from_h` (the same values, for
/// each summand that wants one) and the previous cell's into `c_prev`,
/// both from one pass over the units (one `tanh` each).
pub(super) fn backward(
    hidden: usize,
    up: Upstream<'_>,
    gates: Option<&mut [f32]>,
    from_h: Option<&mut [f32]>,
    c_prev: Option<&mut [f32]>,
) {
    let hd = hidden;
    let (mut first, second) = match (gates, from_h) {
        (Some(a), b) => (Some(a), b),
        (None, b) => (b, None),
    };
    let row = |b: usize, gates: Option<&mut [f32]>, c_prev: Option<&mut [f32]>| {
        let cp = up.c_prev.map(|p| &p[b * hd..][..hd]);
        let (mut gates, mut c_prev) = (gates, c_prev);
        for j in 0..hd {
            let ([i, f, g, o], dcell, dh_tc) = up.at(hd, b, j);
            if let Some(row) = gates.as_deref_mut() {
                let cp = cp.map_or(0.0, |p| p[j]);
                row[j] = dcell * g * i * (1.0 - i);
                row[hd + j] = dcell * cp * f * (1.0 - f);
                row[2 * hd + j] = dcell * i * (1.0 - g * g);
                row[3 * hd + j] = dh_tc * o * (1.0 - o);
            }
            if let Some(row) = c_prev.as_deref_mut() {
                row[j] = dcell * f;
            }
        }
    };
    match (first.as_deref_mut(), c_prev) {
        (Some(g), Some(p)) => g
            .par_chunks_mut(4 * hd)
            .zip(p.par_chunks_mut(hd))
            .enumerate()
            .for_each(|(b, (g, p))| row(b, Some(g), Some(p))),
        (Some(g), None) => g
            .par_chunks_mut(4 * hd)
            .enumerate()
            .for_each(|(b, g)| row(b, Some(g), None)),
        (None, Some(p)) => p
            .par_chunks_mut(hd)
            .enumerate()
            .for_each(|(b, p)| row(b, None, Some(p))),
        (None, None) => {}
    }
    if let (Some(out), Some(copy)) = (first, second) {
        copy.copy_from_slice(out);
    }
}
