//! The crate's small PRNG, shared by everything that draws numbers: model
//! initialisation, the epoch's shuffled order, the dropout seed of a step.
//! It sits at the crate's root, below every layer that uses it, so none of
//! them has to import another's module for it.
//!
//! Only wrapping integer arithmetic is involved, so every platform draws the
//! same numbers from the same seed: recorded losses repeat bit for bit.

/// SplitMix64 (Steele, Lea & Flood, 2014): a 64-bit counter advanced by the
/// golden-ratio gamma, passed through a bijective mixer. Tiny, fast, and
/// statistically good enough for shuffling and weight init; not for secrets.
#[derive(Debug, Clone)]
pub struct SplitMix64 {
    state: u64,
}

pub(crate) const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

impl SplitMix64 {
    /// A generator whose sequence `seed` fixes.
    pub const fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
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
pub(crate) const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
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
}
