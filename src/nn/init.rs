//! PyTorch's initialisations, reproduced so that models start where
//! PyTorch's would (in distribution, not bit for bit: the generators differ):
//! the layers' defaults, and the Kaiming schemes torchvision's ResNet and
//! SqueezeNet apply on top.

use crate::rng::SplitMix64;

/// `U(-1/√fan_in, 1/√fan_in)`. This is both PyTorch's default for biases and
/// what its Kaiming-uniform with `a = √5` gives for weights:
/// `gain = √(2 / (1 + a²)) = √(1/3)` and `bound = gain · √(3 / fan_in)`.
pub fn uniform_fan_in(rng: &mut SplitMix64, fan_in: usize, n: usize) -> Vec<f32> {
    let bound = 1.0 / (fan_in as f32).sqrt();
    (0..n).map(|_| (rng.next_f32() * 2.0 - 1.0) * bound).collect()
}

/// `U(-√(6/fan_in), √(6/fan_in))`: `kaiming_uniform_` with its defaults
/// (`a = 0`, so gain √2), as torchvision's SqueezeNet initialises its
/// convolutions.
pub fn kaiming_uniform_fan_in(rng: &mut SplitMix64, fan_in: usize, n: usize) -> Vec<f32> {
    let bound = (6.0 / fan_in as f32).sqrt();
    (0..n).map(|_| (rng.next_f32() * 2.0 - 1.0) * bound).collect()
}

/// `N(0, std²)` by the Box–Muller transform: one pair of uniforms per pair
/// of values.
pub fn normal(rng: &mut SplitMix64, std: f32, n: usize) -> Vec<f32> {
    let mut out = Vec::with_capacity(n + 1);
    while out.len() < n {
        // 1 − u lies in (0, 1], so the logarithm is finite.
        let (u1, u2) = (1.0 - rng.next_f32() as f64, rng.next_f32() as f64);
        let radius = (-2.0 * u1.ln()).sqrt() * std as f64;
        let angle = std::f64::consts::TAU * u2;
        out.push((radius * angle.cos()) as f32);
        out.push((radius * angle.sin()) as f32);
    }
    out.truncate(n);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn mean_var(v: &[f32]) -> (f64, f64) {
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / v.len() as f64;
        let var = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>() / v.len() as f64;
        (mean, var)
    }

    #[test]
    fn normal_values_have_the_asked_spread() {
        let mut rng = SplitMix64::new(3);
        let v = normal(&mut rng, 0.5, 20_001);
        assert_eq!(v.len(), 20_001);
        let (mean, var) = mean_var(&v);
        assert!(mean.abs() < 0.01 && (var - 0.25).abs() < 0.01, "{mean} {var}");
        let beyond = v.iter().filter(|x| x.abs() > 1.0).count() as f64 / v.len() as f64;
        // P(|z| > 2σ) ≈ 4.55%: a normal shape, not a uniform of that variance (0%).
        assert!((beyond - 0.0455).abs() < 0.006, "{beyond}");
    }

    #[test]
    fn kaiming_uniform_spans_its_bound() {
        let mut rng = SplitMix64::new(4);
        let v = kaiming_uniform_fan_in(&mut rng, 6, 10_000);
        assert!(v.iter().all(|x| x.abs() <= 1.0));
        let (_, var) = mean_var(&v);
        // U(-1, 1) has variance 1/3.
        assert!((var - 1.0 / 3.0).abs() < 0.01, "{var}");
    }

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
