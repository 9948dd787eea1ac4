use crate::backend::cpu::simd::{hsum, over_row, vectorized, Lanes, RowUnits, Vectorized, LANES, V8};
use crate::backend::cpu::vmath;
use crate::backend::BackendError;
use crate::ops::CHUNK;
use rayon::prelude::*;

/// What every row's arithmetic needs besides its own values.
#[derive(Clone, Copy)]
pub(super) struct Rows {
    /// Classes: the length of a row.
    pub c: usize,
    pub over: usize,
    pub smoothing: f32,
}

impl Rows {
    /// Rows per rayon task: about [`CHUNK`] values, whatever the class count.
    fn per_task(self) -> usize {
        (CHUNK / self.c).max(1)
    }
}

/// Each row's log-sum-exp and loss, then their mean into `loss[0]`.
pub(super) fn forward(
    rows: Rows,
    logits: &[f32],
    labels: &[u32],
    weights: Option<&[f32]>,
    lse: &mut [f32],
    row_loss: &mut [f32],
    loss: &mut [f32],
) -> Result<(), BackendError> {
    let c = rows.c;
    // Before any work, so the error names the first bad label whatever the
    // threads do.
    if let Some((index, &label)) = labels.iter().enumerate().find(|(_, &l)| l as usize >= c) {
        return Err(BackendError::Label {
            index,
            label,
            classes: c,
        });
    }
    let per = rows.per_task();
    logits
        .par_chunks(per * c)
        .zip(labels.par_chunks(per))
        .zip(lse.par_chunks_mut(per).zip(row_loss.par_chunks_mut(per)))
        .for_each(|((x, labels), (lse, row_loss))| {
            vectorized(ForwardTask {
                rows,
                x,
                labels,
                lse,
                row_loss,
            })
        });
    if let Some(weights) = weights {
        row_loss.iter_mut().zip(weights).for_each(|(l, w)| *l *= w);
    }
    // In row order and in f64, whatever the threads: the mean repeats.
    let total: f64 = row_loss.iter().fold(0.0, |t, &l| t + l as f64);
    loss[0] = (total / rows.over as f64) as f32;
    Ok(())
}

/// One task's rows of [`forward`]: the exponentials 8 at a time
/// ([`vmath::exp`], within 2 ulp of the C library's `expf`, which is a call
/// per element and was a tenth of a character LSTM's step).
struct ForwardTask<'a> {
    rows: Rows,
    x: &'a [f32],
    labels: &'a [u32],
    lse: &'a mut [f32],
    row_loss: &'a mut [f32],
}

impl Vectorized for ForwardTask<'_> {
    type Output = ();

    #[inline(always)]
    fn run<const FMA: bool>(self) {
        let c = self.rows.c;
        let rows = self.x.chunks_exact(c).zip(self.labels);
        for ((row, &label), (lse, out)) in rows.zip(self.lse.iter_mut().zip(self.row_loss)) {
            (*lse, *out) = row_forward::<FMA>(self.rows, row, label as usize);
        }
    }
}

/// A row's log-sum-exp and its loss.
#[inline(always)]
fn row_forward<const FMA: bool>(rows: Rows, row: &[f32], label: usize) -> (f32, f32) {
    let lse = if row.len() < LANES {
        short_lse::<FMA>(row)
    } else {
        long_lse::<FMA>(row)
    };
    let nll = -(row[label] - lse);
    if rows.smoothing == 0.0 {
        return (lse, nll);
    }
    let log_probs: f32 = row.iter().map(|v| v - lse).sum();
    let e = rows.smoothing;
    (lse, (1.0 - e) * nll + e * (-log_probs / rows.c as f32))
}

/// The log-sum-exp of a row of at least [`LANES`] values, in whole vectors:
/// a length that is not a multiple of 8 ends with a vector shifted left to
/// end with the row, its lanes that repeat the one before left out of the
/// sum. The loops hold no per-lane test: with the pointwise kernels'
/// partial [`Lanes`] and a mask or select per lane inside them, the
/// forward over 400 × 65 logits took 80 µs rather than 27.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // each lane loop is one vector instruction
fn long_lse<const FMA: bool>(row: &[f32]) -> f32 {
    let len = row.len();
    let tail: &[f32; LANES] = row[len - LANES..].try_into().expect("a whole vector");
    let mut m = *tail;
    for v in row.chunks_exact(LANES) {
        for k in 0..LANES {
            m[k] = if v[k] > m[k] { v[k] } else { m[k] };
        }
    }
    let max = m.into_iter().fold(f32::NEG_INFINITY, f32::max);
    let mut sums = [0.0; LANES];
    for v in row.chunks_exact(LANES) {
        let e = exp_less::<FMA>(v, max);
        for k in 0..LANES {
            sums[k] += e[k];
        }
    }
    let repeats = LANES - len % LANES;
    if repeats < LANES {
        let e = exp_less::<FMA>(tail, max);
        for k in repeats..LANES {
            sums[k] += e[k];
        }
    }
    max + hsum(&sums).ln()
}

/// `exp(v − max)` of a vector's 8 values. A function, not a closure: a
/// closure does not inherit [`vectorized`]'s target features, and its fused
/// multiply-adds became calls to the C library's `fmaf`.
#[inline(always)]
#[allow(clippy::needless_range_loop)] // each lane loop is one vector instruction
fn exp_less<const FMA: bool>(v: &[f32], max: f32) -> V8 {
    let v: &V8 = v.first_chunk().expect("a whole vector");
    let mut x = [0.0; LANES];
    for k in 0..LANES {
        x[k] = v[k] - max;
    }
    vmath::exp::<FMA>(&x)
}

/// The log-sum-exp of a row shorter than a vector (a few classes).
#[inline(always)]
#[allow(clippy::needless_range_loop)] // each lane loop is one vector instruction
fn short_lse<const FMA: bool>(row: &[f32]) -> f32 {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let mut x = [0.0; LANES];
    for (x, v) in x.iter_mut().zip(row) {
        *x = v - max;
    }
    let e = vmath::exp::<FMA>(&x);
    max + e[..row.len()].iter().sum::<f32>().ln()
}

/// One task's rows of `exp(x − lse) · scale`, 8 at a time.
struct BackwardTask<'a> {
    c: usize,
    scale: f32,
    gx: &'a mut [f32],
    x: &'a [f32],
    lse: &'a [f32],
}

impl Vectorized for BackwardTask<'_> {
    type Output = ();

    #[inline(always)]
    fn run<const FMA: bool>(self) {
        let rows = self.gx.chunks_exact_mut(self.c).zip(self.x.chunks_exact(self.c));
        for ((g, x), &lse) in rows.zip(self.lse) {
            let scale = self.scale;
            over_row::<FMA, _>(&mut SoftmaxRow { g, x, lse, scale }, self.c);
        }
    }
}

/// One row of [`BackwardTask`].
struct SoftmaxRow<'a> {
    g: &'a mut [f32],
    x: &'a [f32],
    lse: f32,
    scale: f32,
}

impl RowUnits for SoftmaxRow<'_> {
    type Out = V8;

    #[inline(always)]
    #[allow(clippy::needless_range_loop)] // each lane loop is one vector instruction
    fn compute<const FMA: bool>(&self, l: Lanes) -> V8 {
        let mut v = l.load(self.x);
        for k in 0..LANES {
            v[k] -= self.lse;
        }
        let mut e = vmath::exp::<FMA>(&v);
        for k in 0..LANES {
            e[k] *= self.scale;
        }
        e
    }

    #[inline(always)]
    fn store(&mut self, l: Lanes, out: &V8) {
        l.store(self.g, out);
    }
}

/// `gx = (softmax(x) − (1 − ε)·onehot(label) − ε/C) · gloss / over`.
pub(super) fn backward(
    rows: Rows,
    logits: &[f32],
    lse: &[f32],
    labels: &[u32],
    weights: Option<&[f32]>,
    gloss: f32,
    gx: &mut [f32],
) {
    let (c, e) = (rows.c, rows.smoothing);
    let scale = gloss / rows.over as f32;
    let uniform = scale * (e / c as f32);
    let hit = if e == 0.0 { scale } else { scale * (1.0 - e) };
    let per = rows.per_task();
    gx.par_chunks_mut(per * c)
        .zip(logits.par_chunks(per * c))
        .zip(lse.par_chunks(per).zip(labels.par_chunks(per)))
        .for_each(|((gx, x), (lse, labels))| {
            vectorized(BackwardTask { c, scale, gx, x, lse });
            for (g, &label) in gx.chunks_exact_mut(c).zip(labels) {
                if e != 0.0 {
                    g.iter_mut().for_each(|g| *g -= uniform);
                }
                g[label as usize] -= hit;
            }
        });
    if let Some(weights) = weights {
        gx.par_chunks_mut(per * c)
            .zip(weights.par_chunks(per))
            .for_each(|(gx, weights)| {
                for (g, &w) in gx.chunks_exact_mut(c).zip(weights) {
                    g.iter_mut().for_each(|g| *g *= w);
                }
            });
    }
}
