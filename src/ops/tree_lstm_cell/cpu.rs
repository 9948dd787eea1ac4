//! The CPU's tree_lstm_cell: forward eight units at a time with
//! `backend::cpu::vmath`'s transcendentals, backward a unit at a time;
//! rows split among workers in tasks of at least [`CHUNK`] units.

use crate::backend::cpu::simd::{madd, over_row, vectorized_rows, Lanes, RowUnits, Rows, Vectorized, LANES, V8};
use crate::backend::cpu::vmath::{sigmoid, tanh};
use crate::ops::math::tanh as tanh_scalar;
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

impl Forward<'_> {
    fn width(&self) -> usize {
        match self.children {
            Some(_) => 5 * self.hidden,
            None => 3 * self.hidden,
        }
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
        let hd = self.hidden;
        let pre = |q: usize| l.load(&self.gates[q * hd..]);
        let mut acts = [[0.0; LANES]; 5];
        let mut c = [0.0; LANES];
        let o = match self.children {
            Some((left, right)) => {
                for q in 0..4 {
                    acts[q] = sigmoid::<FMA>(&pre(q));
                }
                acts[4] = tanh::<FMA>(&pre(4));
                let (cl, cr) = (l.load(left), l.load(right));
                let [i, fl, fr, _, u] = &acts;
                for k in 0..LANES {
                    c[k] = madd::<FMA>(fr[k], cr[k], madd::<FMA>(fl[k], cl[k], i[k] * u[k]));
                }
                acts[3]
            }
            None => {
                acts[0] = sigmoid::<FMA>(&pre(0));
                acts[1] = sigmoid::<FMA>(&pre(1));
                acts[2] = tanh::<FMA>(&pre(2));
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
        let gates = if self.children.is_some() { 5 } else { 3 };
        for (q, v) in acts.iter().take(gates).enumerate() {
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
            let tc = tanh_scalar(up.c[at]);
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
