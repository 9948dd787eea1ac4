//! The order in which an epoch visits the training set, and the small PRNG
//! that drives it (also used by model initialisation).
//!
//! Invariants:
//! - [`shuffle_into`] writes a permutation of `0..order.len()` that is a pure
//!   function of `(seed, epoch, order.len())`: only wrapping integer
//!   arithmetic is involved, so every platform produces the same order.
//! - Nothing here allocates; the caller owns the order buffer and reuses it
//!   every epoch.
//! - Bounded draws are exactly uniform (rejection, not modulo), so the
//!   shuffle is unbiased.

/// SplitMix64 (Steele, Lea & Flood, 2014): a 64-bit counter advanced by the
/// golden-ratio gamma, passed through a bijective mixer. Tiny, fast, and
/// statistically good enough for shuffling and weight init; not for secrets.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl SplitMix64 {
    pub const fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix64(self.state)
    }

    /// Uniform in `[0, 1)`: the top 24 bits, which an f32 mantissa holds
    /// exactly, so every value is equally likely and 1.0 is impossible.
    pub fn next_f32(&mut self) -> f32 {
        const SCALE: f32 = 1.0 / (1u32 << 24) as f32;
        (self.next_u64() >> 40) as f32 * SCALE
    }

    /// Uniform in `[0, bound)`; 0 when `bound` is 0.
    ///
    /// Lemire's multiply-shift with rejection: the high half of
    /// `x * bound` is the draw, and the rare low halves that would bias it
    /// are redrawn.
    pub fn below(&mut self, bound: u64) -> u64 {
        let mut product = u128::from(self.next_u64()) * u128::from(bound);
        if (product as u64) < bound {
            // 2^64 mod bound: how many low halves are over-represented.
            let threshold = bound.wrapping_neg() % bound;
            while (product as u64) < threshold {
                product = u128::from(self.next_u64()) * u128::from(bound);
            }
        }
        (product >> 64) as u64
    }
}

/// The SplitMix64 output function (a variant of MurmurHash3's finalizer).
const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

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

    #[test]
    fn splitmix64_matches_reference_vector() {
        // Output of the reference C implementation for seed 1234567.
        let mut rng = SplitMix64::new(1_234_567);
        let got: Vec<u64> = (0..5).map(|_| rng.next_u64()).collect();
        assert_eq!(
            got,
            [
                6_457_827_717_110_365_317,
                3_203_168_211_198_807_973,
                9_817_491_932_198_370_423,
                4_593_380_528_125_082_431,
                16_408_922_859_458_223_821,
            ]
        );
    }

    #[test]
    fn next_f32_is_in_unit_interval() {
        let mut rng = SplitMix64::new(7);
        let mut sum = 0.0f64;
        for _ in 0..100_000 {
            let x = rng.next_f32();
            assert!((0.0..1.0).contains(&x), "{x}");
            sum += f64::from(x);
        }
        let mean = sum / 100_000.0;
        assert!((mean - 0.5).abs() < 0.01, "mean {mean}");
    }

    #[test]
    fn below_stays_in_range() {
        let mut rng = SplitMix64::new(3);
        assert_eq!(rng.below(0), 0);
        assert_eq!(rng.below(1), 0);
        for bound in [2, 3, 7, 1000, u64::MAX] {
            for _ in 0..1000 {
                assert!(rng.below(bound) < bound);
            }
        }
    }

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
