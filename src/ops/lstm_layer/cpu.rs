use crate::backend::cpu::simd::{over_row, split_rows, vectorized_rows, Lanes, RowUnits, Rows, Vectorized, LANES, V8};
use crate::backend::cpu::{matmul, Mat};
use crate::ops::lstm_cell::cpu as cell;

/// What the forward reads.
pub(super) struct Forward<'a> {
    pub proj: &'a [f32],
    pub w_hh: &'a [f32],
    /// Room for `W_hhᵀ`, `[H, 4H]`: absent, every step's product reads
    /// `W_hh` transposed in place.
    pub w_t: Option<&'a mut [f32]>,
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
    let gates4 = 4 * hidden;
    let w = match io.w_t {
        Some(w_t) => {
            for (j, row) in w_t.chunks_exact_mut(gates4).enumerate() {
                for (r, v) in row.iter_mut().enumerate() {
                    *v = io.w_hh[r * hidden + j];
                }
            }
            Mat::rows(w_t, hidden, gates4)
        }
        None => Mat::rows(io.w_hh, gates4, hidden).t(),
    };
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
        let rows = PointwiseRows {
            up: Pointwise { ..*self },
            carry_h,
            carry_c,
            dgates,
        };
        vectorized_rows(rows, cell::rows_per_task(self.hidden));
    }
}

/// [`Pointwise::backward`]'s rows: `dgates` of `4 · hidden`, the others of
/// `hidden`.
struct PointwiseRows<'a> {
    up: Pointwise<'a>,
    carry_h: &'a [f32],
    carry_c: &'a mut [f32],
    dgates: &'a mut [f32],
}

impl Vectorized for PointwiseRows<'_> {
    type Output = ();

    #[inline(always)]
    fn run<const FMA: bool>(self) {
        let up = &self.up;
        let (hd, width) = (up.hidden, 4 * up.hidden);
        let row = |s, b| cell::row_of(s, b, hd);
        let rows = self
            .dgates
            .chunks_exact_mut(width)
            .zip(self.carry_c.chunks_exact_mut(hd));
        for (b, (dgates, carry_c)) in rows.enumerate() {
            let mut units = PointwiseRow {
                hidden: hd,
                c: row(up.c, b),
                c_prev: up.c_prev.map(|p| row(p, b)),
                dh: up.dh.map(|d| row(d, b)),
                dc: up.dc.map(|d| row(d, b)),
                carry_h: up.carried.then(|| row(self.carry_h, b)),
                carry_c,
                dgates,
                carried: up.carried,
            };
            over_row::<FMA, _>(&mut units, hd);
        }
    }
}

/// One row of [`PointwiseRows`]: `dgates` and `carry_c` are read, then
/// written over.
struct PointwiseRow<'r> {
    hidden: usize,
    c: &'r [f32],
    c_prev: Option<&'r [f32]>,
    dh: Option<&'r [f32]>,
    dc: Option<&'r [f32]>,
    carry_h: Option<&'r [f32]>,
    carry_c: &'r mut [f32],
    dgates: &'r mut [f32],
    carried: bool,
}

impl RowUnits for PointwiseRow<'_> {
    type Out = ([V8; 4], V8);

    #[inline(always)]
    #[allow(clippy::needless_range_loop)]
    fn compute<const FMA: bool>(&self, l: Lanes) -> Self::Out {
        let acts = cell::load_gates(l, self.dgates, self.hidden);
        let (mut dh, mut dc) = (l.load_or_zero(self.dh), l.load_or_zero(self.dc));
        if self.carried {
            let (from_h, from_c) = (l.load_or_zero(self.carry_h), l.load(self.carry_c));
            for k in 0..LANES {
                dh[k] += from_h[k];
                dc[k] += from_c[k];
            }
        }
        cell::units_backward::<FMA>(&acts, &l.load(self.c), &l.load_or_zero(self.c_prev), &dh, &dc)
    }

    #[inline(always)]
    fn store(&mut self, l: Lanes, (d, d_prev): &Self::Out) {
        cell::store_gates(l, self.dgates, self.hidden, d);
        l.store(self.carry_c, d_prev);
    }
}

impl Rows for PointwiseRows<'_> {
    fn rows(&self) -> usize {
        self.up.c.len() / self.up.hidden
    }

    fn split(self, at: usize) -> (Self, Self) {
        let up = self.up;
        let (hd, width) = (up.hidden, 4 * up.hidden);
        let (c0, c1) = up.c.split_at(at * hd);
        let (p0, p1) = split_rows(up.c_prev, at, hd);
        let (h0, h1) = split_rows(up.dh, at, hd);
        let (d0, d1) = split_rows(up.dc, at, hd);
        let (ch0, ch1) = self.carry_h.split_at(at * hd);
        let (cc0, cc1) = self.carry_c.split_at_mut(at * hd);
        let (g0, g1) = self.dgates.split_at_mut(at * width);
        let half = |c, c_prev, dh, dc, carry_h, carry_c, dgates| PointwiseRows {
            up: Pointwise {
                hidden: hd,
                c,
                c_prev,
                dh,
                dc,
                carried: up.carried,
            },
            carry_h,
            carry_c,
            dgates,
        };
        (half(c0, p0, h0, d0, ch0, cc0, g0), half(c1, p1, h1, d1, ch1, cc1, g1))
    }
}
