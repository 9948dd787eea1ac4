//! A test body in which one tensor is used twice, so backward adds a second
//! gradient into the first (`Step::accumulate`; on a GPU the add-assign
//! kernel): `y = x · xᵀ`, x being both the input and the weight of one
//! linear op. Shared by the CPU test (`tests/accumulate.rs`) and usable by
//! the GPU tests' CPU-against-GPU comparison:
//! `#[path = "support/used_twice.rs"] mod used_twice;` then
//! `same_on_both("used twice", &used_twice::body)`.

use bumpgrad::{Error, Result, Shape, Step, Tensor};

pub const ROWS: usize = 4;
pub const COLS: usize = 3;

/// x, `[ROWS, COLS]`, row-major: no two rows alike, no zero.
pub fn x_values() -> Vec<f32> {
    (0..ROWS * COLS).map(|i| ((i * 7 % 11) as f32 - 4.5) / 4.0).collect()
}

/// The upstream gradient of y, `[ROWS, ROWS]`: not symmetric, so the two
/// contributions `g · x` and `gᵀ · x` differ.
pub fn upstream() -> Vec<f32> {
    (0..ROWS * ROWS).map(|i| ((i * 5 % 13) as f32 - 6.0) / 8.0).collect()
}

/// One step: y and the gradient of `⟨y, upstream⟩` with respect to x.
pub fn body<'s>(s: &mut Step<'s>) -> Result<Vec<(&'static str, Tensor<'s>)>> {
    let x = s.variable("x", Shape::new(&[ROWS, COLS]), &x_values())?;
    let y = x.linear(s, x, None)?;
    let g = s.input("upstream grad", y.shape(), &upstream())?;
    let grads = s.backward_from(y, g)?;
    let gx = s.grad(&grads, x).ok_or(Error::NoGradient)?;
    Ok(vec![("output", y), ("x grad", gx)])
}
