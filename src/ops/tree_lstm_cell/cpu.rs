//! The CPU's tree_lstm_cell: forward and backward eight units at a time
//! with `backend::cpu::vmath`'s transcendentals; rows split among workers
//! in tasks of at least [`CHUNK`] units.

use crate::backend::cpu::simd::{
    madd, over_row, split_rows, split_rows_mut, vectorized_rows, Lanes, RowUnits, Rows, Vectorized, LANES, V8,
};
use crate::backend::cpu::vmath::{sigmoid, tanh};
use crate::ops::lstm_cell::cpu::row_of;
use crate::ops::CHUNK;

/// Rows per task, for rows of `hidden` units.
fn rows_per_task(hidden: usize) -> usize {
    (CHUNK / hidden.max(1)).max(1)
}

/// The children's cells, row by row: `None` for leaves.
pub(super) type Children<'a> = Option<(&'a [f32], &'a [f32])>;

/// Every node of the batch: `gates` `[B, G]` to their activations in
/// `acts` (same layout), `h` and `c` `[B, H]`. `G` is `5H` with children
/// (i, f_l, f_r, o, u), `3H` without (i, o, u). Eight units at a time,
/// the transcendentals `backend::cpu::vmath`'s: a level of a tree batch
/// spent a fifth of its time in the C library's `expf`, a call per gate.
pub(super) fn forward(
    hidden: usize,
    gates: &[f32],
    children: Children<'_>,
    acts: &mut [f32],
    h: &mut [f32],
    c: &mut [f32],
) {
    let rows = Forward {
        hidden,
        gates,
        children,
        acts,
        h,
        c,
    };
    vectorized_rows(rows, rows_per_task(hidden));
}

/// Forward's rows: `gates` and `acts` of `G`, the others of `hidden`.
struct Forward<'a> {
    hidden: usize,
    gates: &'a [f32],
    children: Children<'a>,
    acts: &'a mut [f32],
    h: &'a mut [f32],
    c: &'a mut [f32],
}

/// Gates per unit: i, f_l, f_r, o, u with children; i, o, u without.
fn gates(inner: bool) -> usize {
    if inner {
        5
    } else {
        3
    }
}

impl Forward<'_> {
    fn width(&self) -> usize {
        gates(self.children.is_some()) * self.hidden
    }
}

impl Vectorized for Forward<'_> {
    type Output = ();

    #[inline(always)]
    fn run<const FMA: bool>(self) {
        let (hd, width) = (self.hidden, self.width());
        let rows = self.acts.chunks_exact_mut(width).zip(self.h.chunks_exact_mut(hd));
        for (b, ((acts, h), c)) in rows.zip(self.c.chunks_exact_mut(hd)).enumerate() {
            let mut row = ForwardRow {
                hidden: hd,
                gates: &self.gates[b * width..][..width],
                children: self.children.map(|(l, r)| (&l[b * hd..][..hd], &r[b * hd..][..hd])),
                acts,
                h,
                c,
            };
            over_row::<FMA, _>(&mut row, hd);
        }
    }
}

impl Rows for Forward<'_> {
    fn rows(&self) -> usize {
        self.h.len() / self.hidden.max(1)
    }

    fn split(self, at: usize) -> (Self, Self) {
        let (hd, width) = (self.hidden, self.width());
        let (g0, g1) = self.gates.split_at(at * width);
        let (ch0, ch1) = match self.children {
            Some((l, r)) => {
                let ((l0, l1), (r0, r1)) = (l.split_at(at * hd), r.split_at(at * hd));
                (Some((l0, r0)), Some((l1, r1)))
            }
            None => (None, None),
        };
        let (a0, a1) = self.acts.split_at_mut(at * width);
        let (h0, h1) = self.h.split_at_mut(at * hd);
        let (c0, c1) = self.c.split_at_mut(at * hd);
        let half = |gates, children, acts, h, c| Forward {
            hidden: hd,
            gates,
            children,
            acts,
            h,
            c,
        };
        (half(g0, ch0, a0, h0, c0), half(g1, ch1, a1, h1, c1))
    }
}

/// One row of [`Forward`].
struct ForwardRow<'r> {
    hidden: usize,
    gates: &'r [f32],
    children: Option<(&'r [f32], &'r [f32])>,
    acts: &'r mut [f32],
    h: &'r mut [f32],
    c: &'r mut [f32],
}

impl RowUnits for ForwardRow<'_> {
    /// The activations (the first 3 or 5), the cell and `h`.
    type Out = ([V8; 5], V8, V8);

    #[inline(always)]
    #[allow(clippy::needless_range_loop)]
    fn compute<const FMA: bool>(&self, l: Lanes) -> Self::Out {
        // Plain loads, no closure (see backward's row).
        let (hd, gates) = (self.hidden, self.gates);
        let mut acts = [[0.0; LANES]; 5];
        let mut c = [0.0; LANES];
        let o = match self.children {
            Some((left, right)) => {
                for q in 0..4 {
                    acts[q] = sigmoid::<FMA>(&l.load(&gates[q * hd..]));
                }
                acts[4] = tanh::<FMA>(&l.load(&gates[4 * hd..]));
                let (cl, cr) = (l.load(left), l.load(right));
                let [i, fl, fr, _, u] = &acts;
                for k in 0..LANES {
                    c[k] = madd::<FMA>(fr[k], cr[k], madd::<FMA>(fl[k], cl[k], i[k] * u[k]));
                }
                acts[3]
            }
            None => {
                acts[0] = sigmoid::<FMA>(&l.load(gates));
                acts[1] = sigmoid::<FMA>(&l.load(&gates[hd..]));
                acts[2] = tanh::<FMA>(&l.load(&gates[2 * hd..]));
                for k in 0..LANES {
                    c[k] = acts[0][k] * acts[2][k];
                }
                acts[1]
            }
        };
        let mut h = tanh::<FMA>(&c);
        for k in 0..LANES {
            h[k] *= o[k];
        }
        (acts, c, h)
    }

    #[inline(always)]
    fn store(&mut self, l: Lanes, (acts, c, h): &Self::Out) {
        for (q, v) in acts.iter().take(gates(self.children.is_some())).enumerate() {
            l.store(&mut self.acts[q * self.hidden..], v);
        }
        l.store(self.c, c);
        l.store(self.h, h);
    }
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
/// activations; each child's cell `d(c)·f` of its forget gate. Eight units
/// at a time, `tanh` `backend::cpu::vmath`'s (forward's), rows split among
/// workers as forward's.
pub(super) fn backward(hidden: usize, up: Upstream<'_>, out: Grads<'_>) {
    let rows = Backward { hidden, up, out };
    vectorized_rows(rows, rows_per_task(hidden));
}

/// Backward's rows: `acts` and the gates' gradient of `G`, the others of
/// `hidden`.
struct Backward<'a> {
    hidden: usize,
    up: Upstream<'a>,
    out: Grads<'a>,
}

impl Backward<'_> {
    fn width(&self) -> usize {
        gates(self.up.children.is_some()) * self.hidden
    }
}

impl Vectorized for Backward<'_> {
    type Output = ();

    #[inline(always)]
    fn run<const FMA: bool>(self) {
        let (hd, width) = (self.hidden, self.width());
        let up = &self.up;
        let Grads {
            mut gates,
            mut c_left,
            mut c_right,
        } = self.out;
        for b in 0..up.c.len() / hd.max(1) {
            let mut units = BackwardRow {
                hidden: hd,
                acts: &up.acts[b * width..][..width],
                c: row_of(up.c, b, hd),
                children: up.children.map(|(l, r)| (row_of(l, b, hd), row_of(r, b, hd))),
                dh: up.dh.map(|s| row_of(s, b, hd)),
                dc: up.dc.map(|s| row_of(s, b, hd)),
                gates: gates.as_deref_mut().map(|g| &mut g[b * width..][..width]),
                c_left: c_left.as_deref_mut().map(|g| &mut g[b * hd..][..hd]),
                c_right: c_right.as_deref_mut().map(|g| &mut g[b * hd..][..hd]),
            };
            over_row::<FMA, _>(&mut units, hd);
        }
    }
}

impl Rows for Backward<'_> {
    fn rows(&self) -> usize {
        self.up.c.len() / self.hidden.max(1)
    }

    fn split(self, at: usize) -> (Self, Self) {
        let (hd, width) = (self.hidden, self.width());
        let up = self.up;
        let (a0, a1) = up.acts.split_at(at * width);
        let (c0, c1) = up.c.split_at(at * hd);
        let (ch0, ch1) = match up.children {
            Some((l, r)) => {
                let ((l0, l1), (r0, r1)) = (l.split_at(at * hd), r.split_at(at * hd));
                (Some((l0, r0)), Some((l1, r1)))
            }
            None => (None, None),
        };
        let (h0, h1) = split_rows(up.dh, at, hd);
        let (d0, d1) = split_rows(up.dc, at, hd);
        let (g0, g1) = split_rows_mut(self.out.gates, at, width);
        let (l0, l1) = split_rows_mut(self.out.c_left, at, hd);
        let (r0, r1) = split_rows_mut(self.out.c_right, at, hd);
        let half = |acts, c, children, dh, dc, gates, c_left, c_right| Backward {
            hidden: hd,
            up: Upstream {
                acts,
                c,
                children,
                dh,
                dc,
            },
            out: Grads { gates, c_left, c_right },
        };
        (
            half(a0, c0, ch0, h0, d0, g0, l0, r0),
            half(a1, c1, ch1, h1, d1, g1, l1, r1),
        )
    }
}

/// One row of [`Backward`].
struct BackwardRow<'r> {
    hidden: usize,
    acts: &'r [f32],
    c: &'r [f32],
    children: Option<(&'r [f32], &'r [f32])>,
    dh: Option<&'r [f32]>,
    dc: Option<&'r [f32]>,
    gates: Option<&'r mut [f32]>,
    c_left: Option<&'r mut [f32]>,
    c_right: Option<&'r mut [f32]>,
}

impl RowUnits for BackwardRow<'_> {
    /// The gates' gradients (the first 3 or 5) and each child cell's.
    type Out = ([V8; 5], V8, V8);

    #[inline(always)]
    #[allow(clippy::needless_range_loop)]
    fn compute<const FMA: bool>(&self, l: Lanes) -> Self::Out {
        // Plain loads, no closure: a closure here was left out of line, so
        // outside the AVX2 copy.
        let (hd, acts) = (self.hidden, self.acts);
        let tc = tanh::<FMA>(&l.load(self.c));
        let (dh, dc) = (l.load_or_zero(self.dh), l.load_or_zero(self.dc));
        let inner = self.children.is_some();
        let (o_at, u_at) = if inner { (3 * hd, 4 * hd) } else { (hd, 2 * hd) };
        let (i, o, u) = (l.load(acts), l.load(&acts[o_at..]), l.load(&acts[u_at..]));
        // The lanes' loop holds no branch: choosing the gates' slots inside
        // it, lane by lane, kept LLVM from vectorising it, and the whole
        // row (its `tanh` too) ran a lane at a time.
        let [mut dcell, mut d_i, mut d_o, mut d_u] = [[0.0; LANES]; 4];
        for k in 0..LANES {
            dcell[k] = dc[k] + dh[k] * o[k] * (1.0 - tc[k] * tc[k]);
            d_i[k] = dcell[k] * u[k] * i[k] * (1.0 - i[k]);
            d_o[k] = dh[k] * tc[k] * o[k] * (1.0 - o[k]);
            d_u[k] = dcell[k] * i[k] * (1.0 - u[k] * u[k]);
        }
        let mut d = [[0.0; LANES]; 5];
        if inner {
            (d[0], d[3], d[4]) = (d_i, d_o, d_u);
        } else {
            (d[0], d[1], d[2]) = (d_i, d_o, d_u);
        }
        let (mut d_left, mut d_right) = ([0.0; LANES], [0.0; LANES]);
        if let Some((left, right)) = self.children {
            let (cl, cr) = (l.load(left), l.load(right));
            let (fl, fr) = (l.load(&acts[hd..]), l.load(&acts[2 * hd..]));
            for k in 0..LANES {
                d[1][k] = dcell[k] * cl[k] * fl[k] * (1.0 - fl[k]);
                d[2][k] = dcell[k] * cr[k] * fr[k] * (1.0 - fr[k]);
                d_left[k] = dcell[k] * fl[k];
                d_right[k] = dcell[k] * fr[k];
            }
        }
        (d, d_left, d_right)
    }

    #[inline(always)]
    fn store(&mut self, l: Lanes, (d, d_left, d_right): &Self::Out) {
        let count = gates(self.children.is_some());
        if let Some(g) = self.gates.as_deref_mut() {
            for (q, v) in d.iter().take(count).enumerate() {
                l.store(&mut g[q * self.hidden..], v);
            }
        }
        if let Some(g) = self.c_left.as_deref_mut() {
            l.store(g, d_left);
        }
        if let Some(g) = self.c_right.as_deref_mut() {
            l.store(g, d_right);
        }
    }
}
