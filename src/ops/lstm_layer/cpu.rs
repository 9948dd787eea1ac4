use crate::backend::cpu::{matmul, Mat};
use crate::ops::lstm_cell::cpu as cell;
use rayon::prelude::*;

/// What the forward reads.
pub(super) struct Forward<'a> {
    pub proj: &'a [f32],
    pub w_hh: &'a [f32],
    pub h0: Option<&'a [f32]>,
    pub c0: Option<&'a [f32]>,
}

/// Every step: `from_h = h_{t−1}·W_hhᵀ`, then the cell. `from_h` is one
/// step's scratch, `[B, 4H]`; `acts` holds `[slots, B, 4H]`, step `t`'s
/// in slot `t % slots` (every step's for backward, else one).
pub(super) fn forward(
    hidden: usize,
    io: Forward<'_>,
    acts: &mut [f32],
    from_h: &mut [f32],
    h: &mut [f32],
    c: &mut [f32],
) {
    let gates = from_h.len();
    let (state, batch) = (gates / 4, gates / (4 * hidden));
    let w = Mat::rows(io.w_hh, 4 * hidden, hidden).t();
    let slots = acts.len() / gates;
    for t in 0..io.proj.len() / gates {
        let (done_h, rest_h) = h.split_at_mut(t * state);
        let (done_c, rest_c) = c.split_at_mut(t * state);
        let h_prev = if t == 0 {
            io.h0
        } else {
            Some(&done_h[(t - 1) * state..])
        };
        let c_prev = if t == 0 {
            io.c0
        } else {
            Some(&done_c[(t - 1) * state..])
        };
        if let Some(h_prev) = h_prev {
            matmul(from_h, Mat::rows(&h_prev[..state], batch, hidden), w, false);
        }
        cell::forward(
            hidden,
            &io.proj[t * gates..][..gates],
            h_prev.map(|_| &*from_h),
            c_prev.map(|c| &c[..state]),
            &mut acts[(t % slots) * gates..][..gates],
            &mut rest_h[..state],
            &mut rest_c[..state],
        );
    }
}

/// What backward reads: the forward's states and weight, the initial
/// state, and the gradients reaching the outputs (absent: zero).
pub(super) struct Backward<'a> {
    pub h: &'a [f32],
    pub c: &'a [f32],
    pub w_hh: &'a [f32],
    pub h0: Option<&'a [f32]>,
    pub c0: Option<&'a [f32]>,
    pub dh: Option<&'a [f32]>,
    pub dc: Option<&'a [f32]>,
}

/// Every step from the last: the gates' gradient into `dgates`, over the
/// forward's activations, which it holds on the way in; the
/// gradient reaching the previous `h` (into `carry_h`) and `c` (`carry_c`),
/// which after step 0 are `h0`'s and `c0`'s; then `W_hh`'s, if wanted.
pub(super) fn backward(
    hidden: usize,
    io: Backward<'_>,
    dgates: &mut [f32],
    carry_h: &mut [f32],
    carry_c: &mut [f32],
    gw: Option<&mut [f32]>,
) {
    let state = carry_h.len();
    let (gates, batch) = (4 * state, state / hidden);
    let steps = io.h.len() / state;
    let w = Mat::rows(io.w_hh, 4 * hidden, hidden);
    fn at(b: Option<&[f32]>, t: usize, state: usize) -> Option<&[f32]> {
        b.map(|b| &b[t * state..][..state])
    }
    for t in (0..steps).rev() {
        let c_prev = if t == 0 { io.c0 } else { at(Some(io.c), t - 1, state) };
        let last = t + 1 == steps;
        let up = Pointwise {
            hidden,
            c: &io.c[t * state..][..state],
            c_prev,
            dh: at(io.dh, t, state),
            dc: at(io.dc, t, state),
            carried: !last,
        };
        let dg = &mut dgates[t * gates..][..gates];
        up.backward(carry_h, carry_c, dg);
        if t > 0 || io.h0.is_some() {
            matmul(carry_h, Mat::rows(dg, batch, 4 * hidden), w, false);
        }
    }
    let Some(gw) = gw else { return };
    gw.fill(0.0);
    if steps > 1 {
        let rows = (steps - 1) * batch;
        let dg = Mat::rows(&dgates[gates..], rows, 4 * hidden).t();
        matmul(gw, dg, Mat::rows(&io.h[..rows * hidden], rows, hidden), true);
    }
    if let Some(h0) = io.h0 {
        let dg = Mat::rows(&dgates[..gates], batch, 4 * hidden).t();
        matmul(gw, dg, Mat::rows(h0, batch, hidden), true);
    }
}

/// One step of backward's pointwise part.
struct Pointwise<'a> {
    hidden: usize,
    c: &'a [f32],
    c_prev: Option<&'a [f32]>,
    dh: Option<&'a [f32]>,
    dc: Option<&'a [f32]>,
    /// Whether `carry_h` and `carry_c` hold what the next step sent back
    /// (else they are zero: the last step).
    carried: bool,
}

impl Pointwise<'_> {
    /// `dgates` holds the step's activations on the way in, each row's
    /// four read before they are overwritten by their gradients.
    fn backward(&self, carry_h: &[f32], carry_c: &mut [f32], dgates: &mut [f32]) {
        let hd = self.hidden;
        dgates
            .par_chunks_mut(4 * hd)
            .zip(carry_c.par_chunks_mut(hd))
            .enumerate()
            .for_each(|(b, (row, cc))| {
                for j in 0..hd {
                    let k = b * hd + j;
                    let (i, f, g, o) = (row[j], row[hd + j], row[2 * hd + j], row[3 * hd + j]);
                    let tc = crate::ops::math::tanh(self.c[k]);
                    let carried = |v: f32| if self.carried { v } else { 0.0 };
                    let dh = self.dh.map_or(0.0, |d| d[k]) + carried(carry_h[k]);
                    let dcell = self.dc.map_or(0.0, |d| d[k]) + carried(cc[j]) + dh * o * (1.0 - tc * tc);
                    let cp = self.c_prev.map_or(0.0, |p| p[k]);
                    row[j] = dcell * g * i * (1.0 - i);
                    row[hd + j] = dcell * cp * f * (1.0 - f);
                    row[2 * hd + j] = dcell * i * (1.0 - g * g);
                    row[3 * hd + j] = dh * tc * o * (1.0 - o);
                    cc[j] = dcell * f;
                }
            });
    }
}
