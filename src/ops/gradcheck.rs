//! Finite-difference gradient checks, shared by every op's tests: the
//! analytic vector–Jacobian product of backward is compared with central
//! differences of `dot(f(x), g)` for a random upstream gradient `g`, at
//! every element of every differentiable input (the tensors are small, and
//! a sample with a stride skips whole columns: the right-hand element of a
//! max-pool window, all but one column of a weight).

use crate::backend::Device;
use crate::ops::Step;
use crate::tensor::{Shape, Tensor};
use crate::Engine;
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

/// The step of the central differences: an input moves by `±EPS`, so a
/// kink (relu at 0) or a tie (max-pool) closer than that to an input makes
/// the numeric gradient a mix of two slopes; inputs must keep clear of both.
pub(crate) const EPS: f32 = 1e-2;

/// Distinct values at least `gap` apart (for max-pool, whose gradient jumps
/// where two inputs tie), in a shuffled order, on both sides of 0 and half a
/// gap clear of it (a relu's kink), for any `n`.
pub(crate) fn distinct(n: usize, seed: u64, gap: f32) -> Vec<f32> {
    let keys = values(n, seed, 0.0, 1.0);
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| keys[a].total_cmp(&keys[b]));
    let mut out = vec![0.0; n];
    for (rank, &i) in order.iter().enumerate() {
        out[i] = (rank as f32 - (n / 2) as f32 + 0.5) * gap;
    }
    out
}

/// Asserts `got` equals `want` within 1e-4 relative (plus 1e-4 absolute):
/// kernels against the direct loops of their definition.
pub(crate) fn assert_near(got: &[f32], want: &[f32], what: &str) {
    assert_eq!(got.len(), want.len());
    for (i, (a, b)) in got.iter().zip(want).enumerate() {
        assert!((a - b).abs() <= 1e-4 * (1.0 + b.abs()), "{what}[{i}]: {a} vs {b}");
    }
}

pub(crate) type Body = dyn for<'s> Fn(&mut Step<'s>, &[Tensor<'s>]) -> Result<Tensor<'s>>;

/// The arena every check runs on: two CPU threads, so the kernels split work.
pub(crate) fn engine() -> Engine {
    Engine::new(Device::cpu(2).expect("cpu"), 64 << 20).expect("arena")
}

fn forward(engine: &mut Engine, shapes: &[Shape], inputs: &[Vec<f32>], f: &Body) -> Vec<f32> {
    engine
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

fn analytic(
    engine: &mut Engine,
    shapes: &[Shape],
    inputs: &[Vec<f32>],
    differentiable: &[usize],
    gy: &[f32],
    f: &Body,
) -> Vec<Vec<f32>> {
    engine
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
            for (i, x) in xs.iter().enumerate() {
                // A missing gradient is a failure, never zeros: zeros would
                // pass wherever the true gradient is small.
                let mut host = vec![0.0; x.shape().numel()];
                if differentiable.contains(&i) {
                    let gx = s.grad(&grads, *x);
                    let gx = gx.unwrap_or_else(|| panic!("backward gave input {i} no gradient"));
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

/// Checks the gradient of `f` with respect to every element of every input
/// listed in `differentiable` (indices into `inputs`).
pub(crate) fn check(shapes: &[Shape], inputs: &[Vec<f32>], differentiable: &[usize], f: &Body) {
    check_on(&mut engine(), shapes, inputs, differentiable, f)
}

/// [`check`] on `arena`, for an op that also reads (or writes) persistent
/// memory `f` captures, such as a batch norm's running statistics.
pub(crate) fn check_on(engine: &mut Engine, shapes: &[Shape], inputs: &[Vec<f32>], differentiable: &[usize], f: &Body) {
    const ABSOLUTE: f64 = 3e-3;
    let y = forward(engine, shapes, inputs, f);
    let gy = values(y.len(), 99, -1.0, 1.0);
    let grads = analytic(engine, shapes, inputs, differentiable, &gy, f);
    for &i in differentiable {
        let mut largest: f64 = 0.0;
        for j in 0..inputs[i].len() {
            let mut plus = inputs.to_vec();
            plus[i][j] += EPS;
            let mut minus = inputs.to_vec();
            minus[i][j] -= EPS;
            let numeric = (dot(&forward(engine, shapes, &plus, f), &gy)
                - dot(&forward(engine, shapes, &minus, f), &gy))
                / (2.0 * EPS as f64);
            let analytic = grads[i][j] as f64;
            let tolerance = ABSOLUTE + 1e-2 * numeric.abs().max(analytic.abs());
            assert!(
                (numeric - analytic).abs() <= tolerance,
                "input {i} element {j}: analytic {analytic} vs numeric {numeric}"
            );
            largest = largest.max(numeric.abs());
        }
        // Gradients all within the absolute tolerance of 0 could not tell a
        // right backward from one that wrote nothing.
        assert!(
            largest > 10.0 * ABSOLUTE,
            "input {i}: the largest gradient is {largest}, too small to check"
        );
    }
}

#[test]
fn distinct_values_are_a_gap_apart_and_clear_of_zero() {
    for n in [1, 2, 7, 180, 181] {
        let mut v = distinct(n, 3, 0.05);
        v.sort_by(f32::total_cmp);
        assert!(v.iter().all(|x| x.abs() >= 0.025 - 1e-6), "n = {n}: {v:?}");
        assert!(v.windows(2).all(|w| w[1] - w[0] >= 0.05 - 1e-6), "n = {n}");
        if n > 1 {
            assert!(v[0] < 0.0 && v[n - 1] > 0.0, "n = {n}: both sides of 0");
        }
    }
}
