use crate::backend::cpu::simd::{vectorized, Vectorized};
use crate::backend::cpu::{matmul, Mat};

pub(crate) type Dims = (usize, usize, usize);

pub(crate) fn forward((n, inp, out): Dims, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    // Without a bias the product overwrites `y`: no pass to zero it first.
    if let Some(b) = bias {
        y.chunks_exact_mut(out).for_each(|row| row.copy_from_slice(b));
    }
    matmul(y, Mat::rows(x, n, inp), Mat::rows(w, out, inp).t(), bias.is_some());
}

pub(crate) fn input_grad((n, inp, out): Dims, gy: &[f32], w: &[f32], gx: &mut [f32]) {
    matmul(gx, Mat::rows(gy, n, out), Mat::rows(w, out, inp), false);
}

/// `gw (+)= gyᵀ · x`: added to what `gw` holds with `add`.
pub(crate) fn weight_grad((n, inp, out): Dims, gy: &[f32], x: &[f32], gw: &mut [f32], add: bool) {
    matmul(gw, Mat::rows(gy, n, out).t(), Mat::rows(x, n, inp), add);
}

/// `gb = Σ` of `gy`'s rows, in row order.
pub(crate) fn bias_grad((_, _, out): Dims, gy: &[f32], gb: &mut [f32]) {
    vectorized(RowSum { out, gy, gb });
}

/// [`bias_grad`]'s sum, compiled for the CPU's widest vectors (the
/// baseline's are 4 lanes); additions only, so the same bits either way.
struct RowSum<'a> {
    out: usize,
    gy: &'a [f32],
    gb: &'a mut [f32],
}

impl Vectorized for RowSum<'_> {
    type Output = ();

    #[inline(always)]
    fn run<const FMA: bool>(self) -> Self::Output {
        self.gb.fill(0.0);
        for row in self.gy.chunks_exact(self.out) {
            self.gb.iter_mut().zip(row).for_each(|(b, g)| *b += g);
        }
    }
}
