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
            for (((row, &label), lse), out) in x.chunks_exact(c).zip(labels).zip(lse).zip(row_loss) {
                (*lse, *out) = row_forward(rows, row, label as usize);
            }
        });
    if let Some(weights) = weights {
        row_loss.iter_mut().zip(weights).for_each(|(l, w)| *l *= w);
    }
    // In row order and in f64, whatever the threads: the mean repeats.
    let total: f64 = row_loss.iter().fold(0.0, |t, &l| t + l as f64);
    loss[0] = (total / rows.over as f64) as f32;
    Ok(())
}

/// A row's log-sum-exp and its loss.
fn row_forward(rows: Rows, row: &[f32], label: usize) -> (f32, f32) {
    let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
    let sum: f32 = row.iter().map(|v| (v - max).exp()).sum();
    let lse = max + sum.ln();
    let nll = -(row[label] - lse);
    if rows.smoothing == 0.0 {
        return (lse, nll);
    }
    let log_probs: f32 = row.iter().map(|v| v - lse).sum();
    let e = rows.smoothing;
    (lse, (1.0 - e) * nll + e * (-log_probs / rows.c as f32))
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
            for (((g, x), &lse), &label) in gx.chunks_exact_mut(c).zip(x.chunks_exact(c)).zip(lse).zip(labels) {
                g.iter_mut().zip(x).for_each(|(g, v)| *g = (v - lse).exp() * scale);
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
