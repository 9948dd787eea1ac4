//! The pools, add and concat on the GPU give the CPU's outputs and
//! gradients: every window shape the CPU tests check (padded, ceil mode,
//! overlapping, 2×2, odd sizes).

use super::*;

pub(crate) const fn args(kernel: usize, stride: usize, padding: usize, ceil_mode: bool) -> Pool2dArgs {
    Pool2dArgs {
        kernel,
        stride,
        padding,
        ceil_mode,
    }
}

/// The windows every pool is compared on, with an input shape for each.
const WINDOWS: [(&str, [usize; 4], Pool2dArgs); 5] = [
    ("3×3 s2 p1", [2, 3, 9, 7], args(3, 2, 1, false)),
    ("3×3 s2 ceil", [2, 3, 8, 7], args(3, 2, 0, true)),
    ("3×3 s2 p1 ceil", [2, 2, 6, 5], args(3, 2, 1, true)),
    ("3×3 s1", [1, 4, 6, 6], args(3, 1, 0, false)),
    ("2×2 s2 odd", [3, 2, 7, 5], args(2, 2, 0, false)),
];

#[test]
fn max_pool_with_any_window_matches_the_cpu() {
    for (name, dims, a) in WINDOWS {
        same_on_both(&format!("max_pool2d {name}"), &move |s| {
            let shape = Shape::new(&dims);
            let x = s.variable("x", shape, &values(shape.numel(), 21))?;
            let y = x.max_pool2d(s, a)?;
            with_grads(s, y, &[("x grad", x)])
        });
    }
}

#[test]
fn avg_pool_matches_the_cpu() {
    for (name, dims, a) in WINDOWS {
        same_on_both(&format!("avg_pool2d {name}"), &move |s| {
            let shape = Shape::new(&dims);
            let x = s.variable("x", shape, &values(shape.numel(), 22))?;
            let y = x.avg_pool2d(s, a)?;
            with_grads(s, y, &[("x grad", x)])
        });
    }
}

#[test]
fn global_avg_pool_matches_the_cpu() {
    same_on_both("global_avg_pool2d", &|s| {
        let shape = Shape::new(&[5, 67, 4, 3]);
        let x = s.variable("x", shape, &values(shape.numel(), 23))?;
        let y = x.global_avg_pool2d(s)?;
        with_grads(s, y, &[("x grad", x)])
    });
}

#[test]
fn add_matches_the_cpu() {
    same_on_both("add", &|s| {
        let shape = Shape::new(&[3, 5, 7, 9]);
        let a = s.variable("a", shape, &values(shape.numel(), 24))?;
        let b = s.variable("b", shape, &values(shape.numel(), 25))?;
        let y = a.add(s, b)?;
        with_grads(s, y, &[("a grad", a), ("b grad", b)])
    });
    same_on_both("add to itself", &|s| {
        let x = s.variable("x", Shape::new(&[4, 33]), &values(132, 26))?;
        let y = x.add(s, x)?;
        with_grads(s, y, &[("x grad", x)])
    });
}

#[test]
fn concat_matches_the_cpu() {
    same_on_both("concat_channels", &|s| {
        let a = s.variable("a", Shape::new(&[3, 2, 5, 7]), &values(210, 27))?;
        let b = s.variable("b", Shape::new(&[3, 5, 5, 7]), &values(525, 28))?;
        let c = s.variable("c", Shape::new(&[3, 1, 5, 7]), &values(105, 29))?;
        // `a` twice: its gradient is the sum of both slices.
        let y = Tensor::concat_channels(s, &[a, b, c, a])?;
        with_grads(s, y, &[("a grad", a), ("b grad", b), ("c grad", c)])
    });
}
