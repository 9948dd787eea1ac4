use crate::ops::CHUNK;
use rayon::prelude::*;

/// One update, each element in PyTorch's CPU order: `d = g + wd·p` (fused,
/// as its vector path), `sum + d·d`, then `p + (−clr·d) / (√sum + ε)`.
pub(super) fn adagrad(p: &mut [f32], g: &[f32], sum: &mut [f32], neg_clr: f32, wd: f32, eps: f32) {
    if wd != 0.0 {
        run::<true>(p, g, sum, neg_clr, wd, eps)
    } else {
        run::<false>(p, g, sum, neg_clr, wd, eps)
    }
}

fn run<const DECAY: bool>(p: &mut [f32], g: &[f32], sum: &mut [f32], neg_clr: f32, wd: f32, eps: f32) {
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK).zip(sum.par_chunks_mut(CHUNK)))
        .for_each(|(p, (g, sum))| {
            for ((p, &g), s) in p.iter_mut().zip(g).zip(sum) {
                let d = if DECAY { p.mul_add(wd, g) } else { g };
                *s += d * d;
                let std = s.sqrt() + eps;
                *p += neg_clr * d / std;
            }
        });
}
