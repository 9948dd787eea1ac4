use super::AdamwHyper;
use crate::ops::CHUNK;
use rayon::prelude::*;

/// What every element of update `t` at rate `lr` shares: formed in f64 from
/// the f64 hyper-parameters and rounded to f32 once, as PyTorch forms them
/// from Python floats (`1 − β` rounded from f32 hyper-parameters would be
/// off by 1e-5 relative for β₂ = 0.999).
#[derive(Debug, Clone, Copy)]
pub(super) struct Coefficients {
    decay: f32,
    w1: f32,
    beta2: f32,
    w2: f32,
    neg_step: f32,
    bc2_sqrt: f32,
    eps: f32,
}

impl Coefficients {
    pub(super) fn new(lr: f32, t: u64, h: AdamwHyper) -> Self {
        let (lr, t) = (lr as f64, t as f64);
        Self {
            decay: (1.0 - lr * h.weight_decay) as f32,
            w1: (1.0 - h.beta1) as f32,
            beta2: h.beta2 as f32,
            w2: (1.0 - h.beta2) as f32,
            neg_step: -((lr / (1.0 - h.beta1.powf(t))) as f32),
            bc2_sqrt: (1.0 - h.beta2.powf(t)).sqrt() as f32,
            eps: h.eps as f32,
        }
    }
}

/// One update, each element in PyTorch's CPU order: decay, the moments,
/// then `p + (−step·m) / (√v / √bc₂ + ε)`.
pub(super) fn adamw(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], c: Coefficients) {
    if c.w1 < 0.5 {
        run::<true>(p, g, m, v, c)
    } else {
        run::<false>(p, g, m, v, c)
    }
}

/// `SMALL`: the lerp weight `1 − β₁` is below one half, so PyTorch's lerp
/// starts from `m` (`m + w·(g − m)`), otherwise from `g`
/// (`g + (w − 1)·(g − m)`); fused either way, as its vector path is.
fn run<const SMALL: bool>(p: &mut [f32], g: &[f32], m: &mut [f32], v: &mut [f32], c: Coefficients) {
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK))
        .zip(m.par_chunks_mut(CHUNK).zip(v.par_chunks_mut(CHUNK)))
        .for_each(|((p, g), (m, v))| {
            for (((p, &g), m), v) in p.iter_mut().zip(g).zip(m).zip(v) {
                let decayed = *p * c.decay;
                *m = if SMALL {
                    c.w1.mul_add(g - *m, *m)
                } else {
                    (c.w1 - 1.0).mul_add(g - *m, g)
                };
                *v = c.beta2 * *v + c.w2 * g * g;
                let denom = v.sqrt() / c.bc2_sqrt + c.eps;
                *p = decayed + c.neg_step * *m / denom;
            }
        });
}
