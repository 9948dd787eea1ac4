//! Finite-difference gradient checks, shared by every op's tests: the
//! analytic vector–Jacobian product of backward is compared with central
//! differences of `dot(f(x), g)` for a random upstream gradient `g`.

use crate::autograd::Step;
use crate::backend::Device;
use crate::memory::Arena;
use crate::tensor::{Shape, Tensor};
use crate::Result;

/// Deterministic values in `[lo, hi)`, so every test run checks the same points.
pub(crate) fn values(n: usize, seed: u64, lo: f32, hi: f32) -> Vec<f32> {
    let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            lo + (hi - lo) * ((state >> 40) as f32 / (1u64 << 24) as f32)
        })
        .collect()
}

/// Distinct values at least `gap` apart (for max-pool, whose gradient jumps
/// where two inputs tie), in a shuffled order.
pub(crate) fn distinct(n: usize, seed: u64, gap: f32) -> Vec<f32> {
    let keys = values(n, seed, 0.0, 1.0);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| keys[a].total_cmp(&keys[b]));
    let mut out = vec![0.0; n];
    for (rank, &i) in order.iter().enumerate() {
        out[i] = (rank as f32 - n as f32 / 2.0) * gap;
    }
    out
}

pub(crate) type Body = dyn for<'s> Fn(&mut Step<'s>, &[Tensor<'s>]) -> Result<Tensor<'s>>;

fn arena() -> Arena {
    Arena::new(Device::cpu(2).expect("cpu"), 64 << 20).expect("arena")
}

fn forward(arena: &mut Arena, shapes: &[Shape], inputs: &[Vec<f32>], f: &Body) -> Vec<f32> {
    arena
        .step(|s| {
            s.set_grad_enabled(false);
            let xs = shapes
                .iter()
                .zip(inputs)
                .map(|(sh, v)| s.input("x", *sh, v))
                .collect::<Result<Vec<_>>>()?;
            let y = f(s, &xs)?;
            let mut out = vec![0.0; y.shape().numel()];
            s.read(y, &mut out)?;
            Ok(out)
        })
        .expect("forward")
}

fn analytic(arena: &mut Arena, shapes: &[Shape], inputs: &[Vec<f32>], gy: &[f32], f: &Body) -> Vec<Vec<f32>> {
    arena
        .step(|s| {
            let xs = shapes
                .iter()
                .zip(inputs)
                .map(|(sh, v)| s.variable("x", *sh, v))
                .collect::<Result<Vec<_>>>()?;
            let y = f(s, &xs)?;
            let g = s.input("upstream gradient", y.shape(), gy)?;
            let grads = s.backward_from(y, g)?;
            let mut out = Vec::new();
            for x in &xs {
                let mut host = vec![0.0; x.shape().numel()];
                if let Some(gx) = s.grad(&grads, *x) {
                    s.read(gx, &mut host)?;
                }
                out.push(host);
            }
            Ok(out)
        })
        .expect("backward")
}

fn dot(a: &[f32], b: &[f32]) -> f64 {
    a.iter().zip(b).map(|(&x, &y)| x as f64 * y as f64).sum()
}

/// Checks the gradient of `f` with respect to every input listed in
/// `differentiable` (indices into `inputs`), at up to `samples` elements each.
pub(crate) fn check(shapes: &[Shape], inputs: &[Vec<f32>], differentiable: &[usize], f: &Body) {
    const EPS: f32 = 1e-2;
    const SAMPLES: usize = 48;
    let mut arena = arena();
    let y = forward(&mut arena, shapes, inputs, f);
    let gy = values(y.len(), 99, -1.0, 1.0);
    let grads = analytic(&mut arena, shapes, inputs, &gy, f);
    let mut checked = 0;
    for &i in differentiable {
        let n = inputs[i].len();
        let stride = n.div_ceil(SAMPLES).max(1);
        for j in (0..n).step_by(stride) {
            let mut plus = inputs.to_vec();
            plus[i][j] += EPS;
            let mut minus = inputs.to_vec();
            minus[i][j] -= EPS;
            let numeric = (dot(&forward(&mut arena, shapes, &plus, f), &gy)
                - dot(&forward(&mut arena, shapes, &minus, f), &gy))
                / (2.0 * EPS as f64);
            let analytic = grads[i][j] as f64;
            let tolerance = 3e-3 + 1e-2 * numeric.abs().max(analytic.abs());
            assert!(
                (numeric - analytic).abs() <= tolerance,
                "input {i} element {j}: analytic {analytic} vs numeric {numeric}"
            );
            checked += 1;
        }
    }
    assert!(checked > 0, "nothing was checked");
}
