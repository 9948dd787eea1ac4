use super::SgdHyper;
use crate::ops::CHUNK;
use rayon::prelude::*;

/// One update; `velocity` is there exactly when `h.momentum > 0`. Each case
/// is its own loop, so no element pays for a branch it cannot take.
pub(super) fn sgd(p: &mut [f32], g: &[f32], velocity: Option<&mut [f32]>, lr: f32, h: SgdHyper) {
    let (mu, wd) = (h.momentum, h.weight_decay);
    match (velocity, wd != 0.0, h.nesterov) {
        (None, false, _) => plain::<false>(p, g, lr, wd),
        (None, true, _) => plain::<true>(p, g, lr, wd),
        (Some(v), false, false) => momentum::<false, false>(p, g, v, lr, mu, wd),
        (Some(v), false, true) => momentum::<false, true>(p, g, v, lr, mu, wd),
        (Some(v), true, false) => momentum::<true, false>(p, g, v, lr, mu, wd),
        (Some(v), true, true) => momentum::<true, true>(p, g, v, lr, mu, wd),
    }
}

fn plain<const DECAY: bool>(p: &mut [f32], g: &[f32], lr: f32, wd: f32) {
    p.par_chunks_mut(CHUNK).zip(g.par_chunks(CHUNK)).for_each(|(p, g)| {
        for (p, &g) in p.iter_mut().zip(g) {
            let d = if DECAY { g + wd * *p } else { g };
            *p -= lr * d;
        }
    });
}

fn momentum<const DECAY: bool, const NESTEROV: bool>(
    p: &mut [f32],
    g: &[f32],
    velocity: &mut [f32],
    lr: f32,
    mu: f32,
    wd: f32,
) {
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK).zip(velocity.par_chunks_mut(CHUNK)))
        .for_each(|(p, (g, velocity))| {
            for ((p, &g), v) in p.iter_mut().zip(g).zip(velocity) {
                let d = if DECAY { g + wd * *p } else { g };
                *v = mu * *v + d;
                let d = if NESTEROV { d + mu * *v } else { *v };
                *p -= lr * d;
            }
        });
}
