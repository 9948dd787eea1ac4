//! Gradients of a tensor used more than once add up (`Step::accumulate`):
//! the first contribution is kept, later ones are added into it.

use crate::backend::Device;
use crate::memory::Arena;
use crate::nn::{Init, ParamStore};
use crate::ops::gradcheck::{check, values, EPS};
use crate::tensor::Shape;

#[test]
fn a_tensor_used_twice_by_one_op_gets_the_sum_of_both_gradients() {
    // y = x · xᵀ: x is the input and the weight; ∂⟨y, g⟩/∂x = g·x + gᵀ·x.
    let shape = Shape::new(&[4, 5]);
    check(&[shape], &[values(20, 61, -1.0, 1.0)], &[0], &|s, t| {
        t[0].linear(s, t[0], None)
    });
}

#[test]
fn a_tensor_used_in_two_branches_gets_the_sum_of_both_gradients() {
    // y = relu(x) · xᵀ: the weight's gradient reaches x first, the relu's
    // second. Inputs keep more than a finite-difference step off the kink.
    let shape = Shape::new(&[3, 4]);
    let x: Vec<f32> = values(12, 62, -1.0, 1.0)
        .into_iter()
        .map(|v| v + v.signum() * 3.0 * EPS)
        .collect();
    check(&[shape], &[x], &[0], &|s, t| {
        let r = t[0].relu(s)?;
        r.linear(s, t[0], None)
    });
}

#[test]
fn a_parameter_asked_for_twice_gets_the_sum_of_both_uses() {
    // z = (x · Wᵀ) · Wᵀ with both W the same parameter, asked for twice.
    let (xs, ws) = (Shape::new(&[2, 3]), Shape::new(&[3, 3]));
    let x = values(6, 63, -1.0, 1.0);
    let g = values(6, 64, -1.0, 1.0);
    let w0 = values(9, 65, -1.0, 1.0);
    let mut arena = Arena::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
    let (_, w) = ParamStore::build(&mut arena.persistent(), 1, |pb| pb.param("w", ws, Init::Constant(0.0))).unwrap();
    arena.write_persistent(w.buf(), &w0).unwrap();
    // ⟨z, g⟩ at the parameter's current values, and its gradient.
    let run = |arena: &mut Arena, values: &[f32]| {
        arena.write_persistent(w.buf(), values).unwrap();
        arena
            .step(|s| {
                let input = s.input("x", xs, &x)?;
                let first = s.param(&w);
                let y = input.linear(s, first, None)?;
                let second = s.param(&w);
                let z = y.linear(s, second, None)?;
                let upstream = s.input("g", z.shape(), &g)?;
                let grads = s.backward_from(z, upstream)?;
                let (mut zs, mut gw) = (vec![0.0; 6], vec![0.0; 9]);
                s.read(z, &mut zs)?;
                let gw_t = s.param_grad(&grads, &w).expect("a gradient for w");
                s.read(gw_t, &mut gw)?;
                let dot: f64 = zs.iter().zip(&g).map(|(&a, &b)| a as f64 * b as f64).sum();
                Ok((dot, gw))
            })
            .unwrap()
    };
    let (_, analytic) = run(&mut arena, &w0);
    for j in 0..9 {
        let (mut plus, mut minus) = (w0.clone(), w0.clone());
        plus[j] += EPS;
        minus[j] -= EPS;
        let numeric = (run(&mut arena, &plus).0 - run(&mut arena, &minus).0) / (2.0 * EPS as f64);
        let a = analytic[j] as f64;
        assert!(
            (numeric - a).abs() <= 1e-3 + 1e-3 * numeric.abs(),
            "w[{j}]: analytic {a} vs numeric {numeric}"
        );
    }
}
