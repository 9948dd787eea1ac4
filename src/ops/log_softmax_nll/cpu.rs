use crate::backend::BackendError;
use crate::tensor::Shape;

pub(super) fn forward(
    x: Shape,
    over: usize,
    logits: &[f32],
    labels: &[u32],
    log_probs: &mut [f32],
    loss: &mut [f32],
) -> Result<(), BackendError> {
    let c = x.dim(1);
    let mut total = 0.0f64;
    for (n, ((row, out), &label)) in logits
        .chunks_exact(c)
        .zip(log_probs.chunks_exact_mut(c))
        .zip(labels)
        .enumerate()
    {
        if label as usize >= c {
            return Err(BackendError::Label {
                index: n,
                label,
                classes: c,
            });
        }
        let max = row.iter().copied().fold(f32::NEG_INFINITY, f32::max);
        let sum: f32 = row.iter().map(|v| (v - max).exp()).sum();
        let lse = max + sum.ln();
        out.iter_mut().zip(row).for_each(|(o, v)| *o = v - lse);
        total -= out[label as usize] as f64;
    }
    loss[0] = (total / over as f64) as f32;
    Ok(())
}

pub(super) fn backward(x: Shape, over: usize, log_probs: &[f32], labels: &[u32], gloss: &[f32], gx: &mut [f32]) {
    let c = x.dim(1);
    let scale = gloss[0] / over as f32;
    for ((g, lp), &label) in gx.chunks_exact_mut(c).zip(log_probs.chunks_exact(c)).zip(labels) {
        g.iter_mut().zip(lp).for_each(|(g, lp)| *g = lp.exp() * scale);
        g[label as usize] -= scale;
    }
}
