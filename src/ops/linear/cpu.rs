use crate::backend::cpu::{matmul, Mat};

/// Products below this many multiply-adds run on one thread: splitting them
/// costs more than it saves.
const PARALLEL_FLOPS: usize = 1 << 22;

fn threads_for(m: usize, n: usize, k: usize) -> usize {
    if m * n * k >= PARALLEL_FLOPS {
        rayon::current_num_threads()
    } else {
        1
    }
}

type Dims = (usize, usize, usize);

pub(super) fn forward((n, inp, out): Dims, x: &[f32], w: &[f32], bias: Option<&[f32]>, y: &mut [f32]) {
    match bias {
        Some(b) => y.chunks_exact_mut(out).for_each(|row| row.copy_from_slice(b)),
        None => y.fill(0.0),
    }
    let t = threads_for(n, out, inp);
    matmul(y, Mat::rows(x, n, inp), Mat::rows(w, out, inp).t(), true, t);
}

pub(super) fn input_grad((n, inp, out): Dims, gy: &[f32], w: &[f32], gx: &mut [f32]) {
    let t = threads_for(n, inp, out);
    matmul(gx, Mat::rows(gy, n, out), Mat::rows(w, out, inp), false, t);
}

pub(super) fn weight_grad((n, inp, out): Dims, gy: &[f32], x: &[f32], gw: &mut [f32]) {
    let t = threads_for(out, inp, n);
    matmul(gw, Mat::rows(gy, n, out).t(), Mat::rows(x, n, inp), false, t);
}

pub(super) fn bias_grad((_, _, out): Dims, gy: &[f32], gb: &mut [f32]) {
    gb.fill(0.0);
    for row in gy.chunks_exact(out) {
        gb.iter_mut().zip(row).for_each(|(b, g)| *b += g);
    }
}
