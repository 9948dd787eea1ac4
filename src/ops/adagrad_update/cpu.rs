use crate::backend::cpu::simd::{vectorized, Vectorized};
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

/// Elements whose gradients are checked for zeros together.
const BLOCK: usize = 64;

fn run<const DECAY: bool>(p: &mut [f32], g: &[f32], sum: &mut [f32], neg_clr: f32, wd: f32, eps: f32) {
    p.par_chunks_mut(CHUNK)
        .zip(g.par_chunks(CHUNK).zip(sum.par_chunks_mut(CHUNK)))
        .for_each(|(p, (g, sum))| {
            vectorized(Chunk::<DECAY> {
                p,
                g,
                sum,
                neg_clr,
                wd,
                eps,
            })
        });
}

/// One chunk of the update, compiled for the CPU's widest vectors: the
/// baseline build's 4 lanes made the square roots and divisions, and the
/// scan for zero blocks, the slowest part of a Tree-LSTM step's update.
/// Every operation is IEEE's single rounding in either copy (the decay's
/// `mul_add` fused in both), so the copies agree bit for bit.
struct Chunk<'a, const DECAY: bool> {
    p: &'a mut [f32],
    g: &'a [f32],
    sum: &'a mut [f32],
    neg_clr: f32,
    wd: f32,
    eps: f32,
}

impl<const DECAY: bool> Vectorized for Chunk<'_, DECAY> {
    type Output = ();

    #[inline(always)]
    fn run<const FMA: bool>(self) -> Self::Output {
        let Self {
            p,
            g,
            sum,
            neg_clr,
            wd,
            eps,
        } = self;
        // Without decay an element whose gradient is +0 is left exactly as
        // it was: `sum + 0` is `sum`, and `p + (−clr·0) / std` is `p` (−0
        // added), as long as `std` is not 0 (ε > 0; with ε = 0 and a zero
        // sum the update is NaN, which skipping would hide). So blocks of
        // such gradients are skipped: the rows of a word embedding that a
        // step's sentences did not read, most of the table at batch 1.
        let skip_zeros = !DECAY && eps > 0.0;
        for (p, (g, sum)) in p.chunks_mut(BLOCK).zip(g.chunks(BLOCK).zip(sum.chunks_mut(BLOCK))) {
            if skip_zeros && g.iter().fold(0, |bits, &x| bits | x.to_bits()) == 0 {
                continue;
            }
            for ((p, &g), s) in p.iter_mut().zip(g).zip(sum) {
                let d = if DECAY { p.mul_add(wd, g) } else { g };
                *s += d * d;
                let std = s.sqrt() + eps;
                *p += neg_clr * d / std;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The update of every element, none skipped, one at a time (this
    /// build's baseline code, whatever vectors the kernel runs on).
    fn dense(p: &mut [f32], g: &[f32], sum: &mut [f32], neg_clr: f32, wd: f32, eps: f32) {
        for ((p, &g), s) in p.iter_mut().zip(g).zip(sum) {
            let d = if wd != 0.0 { p.mul_add(wd, g) } else { g };
            *s += d * d;
            *p += neg_clr * d / (s.sqrt() + eps);
        }
    }

    #[test]
    fn the_vector_update_is_the_scalar_one_bit_for_bit() {
        // Past one parallel chunk, ending in a ragged block; gradients of
        // both signs and none zero, so no block is skipped.
        let n = CHUNK + BLOCK + 13;
        let wave = |i: usize, f: f32| ((i as f32 * f).sin() * 1.7) + if i.is_multiple_of(2) { 0.01 } else { -0.01 };
        let g: Vec<f32> = (0..n).map(|i| wave(i, 0.37)).collect();
        let p0: Vec<f32> = (0..n).map(|i| wave(i, 0.11)).collect();
        let s0: Vec<f32> = (0..n).map(|i| wave(i, 0.05).abs()).collect();
        for wd in [0.0, 1e-4, 0.3] {
            let (mut p, mut s) = (p0.clone(), s0.clone());
            adagrad(&mut p, &g, &mut s, -0.05, wd, 1e-10);
            let (mut want_p, mut want_s) = (p0.clone(), s0.clone());
            dense(&mut want_p, &g, &mut want_s, -0.05, wd, 1e-10);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert!(bits(&p) == bits(&want_p), "parameters, weight decay {wd}");
            assert!(bits(&s) == bits(&want_s), "sums, weight decay {wd}");
        }
    }

    #[test]
    fn skipping_zero_gradients_changes_no_bit() {
        let n = 3 * BLOCK + 17;
        // Block 0 all +0; block 1 +0 but for one value; block 2 holds −0s
        // (not skipped: −0 is not +0's bits); the ragged tail all +0.
        let mut g = vec![0.0f32; n];
        g[BLOCK + 40] = 0.25;
        for v in &mut g[2 * BLOCK..3 * BLOCK] {
            *v = -0.0;
        }
        let p0: Vec<f32> = (0..n)
            .map(|i| if i % 7 == 0 { -0.0 } else { i as f32 * 0.01 - 1.0 })
            .collect();
        let s0: Vec<f32> = (0..n).map(|i| (i % 5) as f32 * 0.1).collect();
        for eps in [1e-10, 0.0] {
            let (mut p, mut s) = (p0.clone(), s0.clone());
            adagrad(&mut p, &g, &mut s, -0.05, 0.0, eps);
            let (mut want_p, mut want_s) = (p0.clone(), s0.clone());
            dense(&mut want_p, &g, &mut want_s, -0.05, 0.0, eps);
            let bits = |v: &[f32]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
            assert_eq!(bits(&p), bits(&want_p), "parameters, eps {eps}");
            assert_eq!(bits(&s), bits(&want_s), "sums, eps {eps}");
            assert_ne!(p[BLOCK + 40], p0[BLOCK + 40], "the one gradient is applied");
        }
        // With ε = 0 a zero sum and a zero gradient make NaN, as PyTorch's
        // update does: not hidden by the skip.
        assert!(p0[0] == 0.0 && s0[0] == 0.0);
        let (mut p, mut s) = (p0.clone(), s0.clone());
        adagrad(&mut p, &g, &mut s, -0.05, 0.0, 0.0);
        assert!(p[0].is_nan());
    }
}
