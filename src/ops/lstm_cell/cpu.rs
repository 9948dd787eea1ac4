//! The cell on the CPU, 8 units at a time: the transcendentals are
//! `backend::cpu::vmath`'s, and a batch's rows go to the pool's workers
//! only in groups big enough to pay for the hand-off (a one-thread
//! character LSTM's `20 × 50` batch is one task, run where it is called).
//! The layer (`ops::lstm_layer`) runs its steps through the same unit math.

use crate::backend::cpu::simd::{
    madd, over_row, split_rows, split_rows_mut, vectorized_rows, Lanes, RowUnits, Rows, Vectorized, LANES, V8,
};
use crate::backend::cpu::vmath::{sigmoid, tanh};

/// Units one task takes at least.
const UNITS_PER_TASK: usize = 8192;

/// Rows of `hidden` units one task takes.
pub(crate) fn rows_per_task(hidden: usize) -> usize {
    (UNITS_PER_TASK / hidden.max(1)).max(1)
}

/// Row `b` of `s`, rows of `width`.
pub(crate) fn row_of(s: &[f32], b: usize, width: usize) -> &[f32] {
    &s[b * width..][..width]
}

/// The four gates' vectors of a row of `4 · hidden`, at `l`.
#[inline(always)]
pub(crate) fn load_gates(l: Lanes, row: &[f32], hidden: usize) -> [V8; 4] {
    [
        l.load(row),
        l.load(&row[hidden..]),
        l.load(&row[2 * hidden..]),
        l.load(&row[3 * hidden..]),
    ]
}

/// `v` into the four gates of a row of `4 · hidden`, at `l`.
#[inline(always)]
pub(crate) fn store_gates(l: Lanes, row: &mut [f32], hidden: usize, v: &[V8; 4]) {
    for (q, v) in v.iter().enumerate() {
        l.store(&mut row[q * hidden..], v);
    }
}

// The unit math below is index loops over the lanes with constant bounds:
// each becomes one ymm instruction. (Closures per lane, or
// `array::from_fn`, left LLVM keeping lanes in memory, partly scalar.)

/// Forward for 8 units: the gates' pre-activations `(i, f, g, o)` and the
/// previous cell give the activations, the cell and `h`.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
fn units_forward<const FMA: bool>(pre: &[V8; 4], c_prev: &V8) -> ([V8; 4], V8, V8) {
    let acts = [
        sigmoid::<FMA>(&pre[0]),
        sigmoid::<FMA>(&pre[1]),
        tanh::<FMA>(&pre[2]),
        sigmoid::<FMA>(&pre[3]),
    ];
    let [i, f, g, o] = &acts;
    let mut c = [0.0; LANES];
    for k in 0..LANES {
        c[k] = madd::<FMA>(f[k], c_prev[k], i[k] * g[k]);
    }
    let mut h = tanh::<FMA>(&c);
    for k in 0..LANES {
        h[k] *= o[k];
    }
    (acts, c, h)
}

/// Backward for 8 units: from the activations, the cell, the previous
/// cell, and the gradients reaching `h` and (directly) `c`, the gates'
/// pre-activations' gradient and the previous cell's. The gradient
/// reaching the cell is `dc + dh·o·(1 − tanh²c)`.
#[inline(always)]
#[allow(clippy::needless_range_loop)]
pub(crate) fn units_backward<const FMA: bool>(acts: &[V8; 4], c: &V8, c_prev: &V8, dh: &V8, dc: &V8) -> ([V8; 4], V8) {
    let tc = tanh::<FMA>(c);
    let [i, f, g, o] = acts;
    let mut grads = [[0.0; LANES]; 4];
    let mut d_prev = [0.0; LANES];
    for k in 0..LANES {
        let dcell = dc[k] + dh[k] * o[k] * (1.0 - tc[k] * tc[k]);
        grads[0][k] = dcell * g[k] * i[k] * (1.0 - i[k]);
        grads[1][k] = dcell * c_prev[k] * f[k] * (1.0 - f[k]);
        grads[2][k] = dcell * i[k] * (1.0 - g[k] * g[k]);
        grads[3][k] = dh[k] * tc[k] * o[k] * (1.0 - o[k]);
        d_prev[k] = dcell * f[k];
    }
    (grads, d_prev)
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
    let rows = Forward {
        hidden,
        x,
        from_h,
        c_prev,
        acts,
        h,
        c,
    };
    vectorized_rows(rows, rows_per_task(hidden));
}

/// Forward's rows: `x`, `from_h` and `acts` rows of `4 · hidden`, the
/// others of `hidden`.
struct Forward<'a> {
    hidden: usize,
    x: &'a [f32],
    from_h: Option<&'a [f32]>,
    c_prev: Option<&'a [f32]>,
    acts: &'a mut [f32],
    h: &'a mut [f32],
    c: &'a mut [f32],
}

impl Vectorized for Forward<'_> {
    type Output = ();

    #[inline(always)]
    fn run<const FMA: bool>(self) {
        let (hd, gates) = (self.hidden, 4 * self.hidden);
        let rows = self.acts.chunks_exact_mut(gates).zip(self.h.chunks_exact_mut(hd));
        for (b, ((acts, h), c)) in rows.zip(self.c.chunks_exact_mut(hd)).enumerate() {
            let mut row = ForwardRow {
                hidden: hd,
                x: row_of(self.x, b, gates),
                from_h: self.from_h.map(|g| row_of(g, b, gates)),
                c_prev: self.c_prev.map(|p| row_of(p, b, hd)),
                acts,
                h,
                c,
            };
            over_row::<FMA, _>(&mut row, hd);
        }
    }
}

/// One row of [`Forward`].
struct ForwardRow<'r> {
    hidden: usize,
    x: &'r [f32],
    from_h: Option<&'r [f32]>,
    c_prev: Option<&'r [f32]>,
    acts: &'r mut [f32],
    h: &'r mut [f32],
    c: &'r mut [f32],
}

impl RowUnits for ForwardRow<'_> {
    type Out = ([V8; 4], V8, V8);

    #[inline(always)]
    #[allow(clippy::needless_range_loop)]
    fn compute<const FMA: bool>(&self, l: Lanes) -> Self::Out {
        let hd = self.hidden;
        let mut pre = load_gates(l, self.x, hd);
        if let Some(hg) = self.from_h {
            let from_h = load_gates(l, hg, hd);
            for (p, v) in pre.iter_mut().zip(&from_h) {
                for k in 0..LANES {
                    p[k] += v[k];
                }
            }
        }
        units_forward::<FMA>(&pre, &l.load_or_zero(self.c_prev))
    }

    #[inline(always)]
    fn store(&mut self, l: Lanes, (acts, c, h): &Self::Out) {
        store_gates(l, self.acts, self.hidden, acts);
        l.store(self.c, c);
        l.store(self.h, h);
    }
}

impl Rows for Forward<'_> {
    fn rows(&self) -> usize {
        self.h.len() / self.hidden
    }

    fn split(self, at: usize) -> (Self, Self) {
        let (hd, gates) = (self.hidden, 4 * self.hidden);
        let (x0, x1) = self.x.split_at(at * gates);
        let (g0, g1) = split_rows(self.from_h, at, gates);
        let (p0, p1) = split_rows(self.c_prev, at, hd);
        let (a0, a1) = self.acts.split_at_mut(at * gates);
        let (h0, h1) = self.h.split_at_mut(at * hd);
        let (c0, c1) = self.c.split_at_mut(at * hd);
        let half = |x, from_h, c_prev, acts, h, c| Forward {
            hidden: hd,
            x,
            from_h,
            c_prev,
            acts,
            h,
            c,
        };
        (half(x0, g0, p0, a0, h0, c0), half(x1, g1, p1, a1, h1, c1))
    }
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
    let (mut first, second) = match (gates, from_h) {
        (Some(a), b) => (Some(a), b),
        (None, b) => (b, None),
    };
    let rows = Backward {
        hidden,
        up,
        gates: first.as_deref_mut(),
        c_prev,
    };
    vectorized_rows(rows, rows_per_task(hidden));
    if let (Some(out), Some(copy)) = (first, second) {
        copy.copy_from_slice(out);
    }
}

/// Backward's rows: `acts` and `gates` of `4 · hidden`, the others of
/// `hidden`.
struct Backward<'a> {
    hidden: usize,
    up: Upstream<'a>,
    gates: Option<&'a mut [f32]>,
    c_prev: Option<&'a mut [f32]>,
}

impl Vectorized for Backward<'_> {
    type Output = ();

    #[inline(always)]
    fn run<const FMA: bool>(self) {
        let (hd, width) = (self.hidden, 4 * self.hidden);
        let up = &self.up;
        let (mut gates, mut c_prev) = (self.gates, self.c_prev);
        for b in 0..up.c.len() / hd {
            let row = |s| row_of(s, b, hd);
            let mut units = BackwardRow {
                hidden: hd,
                acts: row_of(up.acts, b, width),
                c: row(up.c),
                c_prev: up.c_prev.map(row),
                dh: up.dh.map(row),
                dc: up.dc.map(row),
                gates: gates.as_deref_mut().map(|g| &mut g[b * width..][..width]),
                d_prev: c_prev.as_deref_mut().map(|p| &mut p[b * hd..][..hd]),
            };
            over_row::<FMA, _>(&mut units, hd);
        }
    }
}

/// One row of [`Backward`].
struct BackwardRow<'r> {
    hidden: usize,
    acts: &'r [f32],
    c: &'r [f32],
    c_prev: Option<&'r [f32]>,
    dh: Option<&'r [f32]>,
    dc: Option<&'r [f32]>,
    gates: Option<&'r mut [f32]>,
    d_prev: Option<&'r mut [f32]>,
}

impl RowUnits for BackwardRow<'_> {
    type Out = ([V8; 4], V8);

    #[inline(always)]
    fn compute<const FMA: bool>(&self, l: Lanes) -> Self::Out {
        units_backward::<FMA>(
            &load_gates(l, self.acts, self.hidden),
            &l.load(self.c),
            &l.load_or_zero(self.c_prev),
            &l.load_or_zero(self.dh),
            &l.load_or_zero(self.dc),
        )
    }

    #[inline(always)]
    fn store(&mut self, l: Lanes, (d, d_prev): &Self::Out) {
        if let Some(g) = self.gates.as_deref_mut() {
            store_gates(l, g, self.hidden, d);
        }
        if let Some(p) = self.d_prev.as_deref_mut() {
            l.store(p, d_prev);
        }
    }
}

impl Rows for Backward<'_> {
    fn rows(&self) -> usize {
        self.up.c.len() / self.hidden
    }

    fn split(self, at: usize) -> (Self, Self) {
        let (hd, width) = (self.hidden, 4 * self.hidden);
        let up = self.up;
        let (a0, a1) = up.acts.split_at(at * width);
        let (c0, c1) = up.c.split_at(at * hd);
        let (p0, p1) = split_rows(up.c_prev, at, hd);
        let (h0, h1) = split_rows(up.dh, at, hd);
        let (d0, d1) = split_rows(up.dc, at, hd);
        let (g0, g1) = split_rows_mut(self.gates, at, width);
        let (q0, q1) = split_rows_mut(self.c_prev, at, hd);
        let half = |acts, c, c_prev, dh, dc, gates, prev| Backward {
            hidden: hd,
            up: Upstream {
                acts,
                c,
                c_prev,
                dh,
                dc,
            },
            gates,
            c_prev: prev,
        };
        (half(a0, c0, p0, h0, d0, g0, q0), half(a1, c1, p1, h1, d1, g1, q1))
    }
}
