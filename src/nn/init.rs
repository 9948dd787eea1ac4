//! PyTorch's default initialisation, reproduced so that models start where
//! PyTorch's would (in distribution, not bit for bit: the generators differ).

use crate::rng::SplitMix64;

/// `U(-1/√fan_in, 1/√fan_in)`. This is both PyTorch's default for biases and
/// what its Kaiming-uniform with `a = √5` gives for weights:
/// `gain = √(2 / (1 + a²)) = √(1/3)` and `bound = gain · √(3 / fan_in)`.
pub fn uniform_fan_in(rng: &mut SplitMix64, fan_in: usize, n: usize) -> Vec<f32> {
    let bound = 1.0 / (fan_in as f32).sqrt();
    (0..n).map(|_| (rng.next_f32() * 2.0 - 1.0) * bound).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_stay_in_bounds_and_spread() {
        let mut rng = SplitMix64::new(1);
        let v = uniform_fan_in(&mut rng, 25, 10_000);
        assert!(v.iter().all(|x| x.abs() <= 0.2));
        let mean = v.iter().sum::<f32>() / v.len() as f32;
        let var = v.iter().map(|x| (x - mean).powi(2)).sum::<f32>() / v.len() as f32;
        // U(-b, b) has variance b²/3.
        assert!(mean.abs() < 0.01 && (var - 0.04 / 3.0).abs() < 0.001, "{mean} {var}");
    }
}
