//! The order in which an epoch visits the training set, drawn from the
//! crate's small PRNG ([`SplitMix64`]).
//!
//! Invariants:
//! - [`shuffle_into`] writes a permutation of `0..order.len()` that is a pure
//!   function of `(seed, epoch, order.len())`: only wrapping integer
//!   arithmetic is involved, so every platform produces the same order.
//! - Nothing here allocates; the caller owns the order buffer and reuses it
//!   every epoch.
//! - Bounded draws are exactly uniform (rejection, not modulo), so the
//!   shuffle is unbiased.

use crate::rng::{mix64, SplitMix64, GAMMA};

/// The generator for one epoch. The epoch goes through the mixer before
/// meeting the seed so that nearby `(seed, epoch)` pairs — (1, 0) and (0, 1),
/// say — land on unrelated streams rather than shifted copies of one.
fn epoch_rng(seed: u64, epoch: u64) -> SplitMix64 {
    SplitMix64::new(mix64(seed ^ mix64(epoch.wrapping_add(GAMMA))))
}

/// Fills `order` with the epoch's permutation of `0..order.len()`.
///
/// `order.len()` must not exceed `u32::MAX as usize + 1` (indices are u32 to
/// halve the buffer; the training set is far smaller).
pub fn shuffle_into(order: &mut [u32], seed: u64, epoch: u64) {
    debug_assert!(order.len() as u64 <= u64::from(u32::MAX) + 1);
    for (i, slot) in order.iter_mut().enumerate() {
        *slot = i as u32;
    }
    // Fisher–Yates, from the back: slot i takes a uniform pick of 0..=i.
    let mut rng = epoch_rng(seed, epoch);
    for i in (1..order.len()).rev() {
        let j = rng.below(i as u64 + 1) as usize;
        order.swap(i, j);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn is_permutation(order: &[u32]) -> bool {
        let mut seen = vec![false; order.len()];
        order.iter().all(|&i| {
            let fresh = seen.get(i as usize).is_some_and(|s| !s);
            if fresh {
                seen[i as usize] = true;
            }
            fresh
        })
    }

    #[test]
    fn shuffle_is_a_permutation() {
        for len in [0, 1, 2, 3, 10, 1000, 60_000] {
            let mut order = vec![u32::MAX; len];
            shuffle_into(&mut order, 42, 3);
            assert!(is_permutation(&order), "len {len}");
        }
    }

    #[test]
    fn shuffle_is_deterministic() {
        let mut a = vec![0; 5000];
        let mut b = vec![0; 5000];
        shuffle_into(&mut a, 9, 4);
        // Stale contents must not matter.
        b.iter_mut().for_each(|x| *x = 17);
        shuffle_into(&mut b, 9, 4);
        assert_eq!(a, b);
    }

    #[test]
    fn shuffle_differs_between_epochs_and_seeds() {
        let shuffled = |seed, epoch| {
            let mut order = vec![0; 1000];
            shuffle_into(&mut order, seed, epoch);
            order
        };
        let base = shuffled(1, 0);
        assert_ne!(base, shuffled(1, 1));
        assert_ne!(base, shuffled(2, 0));
        assert_ne!(shuffled(0, 1), base, "(seed, epoch) pairs must not alias");
        let identity: Vec<u32> = (0..1000).collect();
        assert_ne!(base, identity);
    }

    #[test]
    fn shuffle_is_roughly_uniform() {
        // All 24 orders of 4 items, over 24_000 epochs: each should appear
        // about 1000 times; ±250 is > 8 standard deviations.
        let mut counts = [0u32; 24];
        let mut order = [0u32; 4];
        for epoch in 0..24_000 {
            shuffle_into(&mut order, 5, epoch);
            let rank = order.iter().fold(0usize, |acc, &x| acc * 4 + x as usize);
            let index = match rank_to_index(rank) {
                Some(i) => i,
                None => panic!("not a permutation: {order:?}"),
            };
            counts[index] += 1;
        }
        for c in counts {
            assert!((750..1250).contains(&c), "{counts:?}");
        }
    }

    /// Index of a permutation of 0..4 (encoded base 4) among the 24.
    fn rank_to_index(code: usize) -> Option<usize> {
        let mut all = Vec::new();
        for a in 0..4 {
            for b in 0..4 {
                for c in 0..4 {
                    for d in 0..4 {
                        if a != b && a != c && a != d && b != c && b != d && c != d {
                            all.push(((a * 4 + b) * 4 + c) * 4 + d);
                        }
                    }
                }
            }
        }
        all.iter().position(|&p| p == code)
    }
}
