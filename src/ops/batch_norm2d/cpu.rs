//! The CPU kernels. Per-channel statistics run in parallel over groups of
//! channels, each channel summed in f64 in one order (deterministic
//! whatever the threads and the grouping), a group's planes read in memory
//! order; elementwise passes run in parallel over runs of planes.
//!
//! The loops are written for the vectoriser: a mask's kind is decided once
//! per block of a plane, not per value, and each f64 sum keeps [`LANES`]
//! partial sums (element `i` of a plane into partial `i % LANES`, added
//! together at the end), so no loop waits on one chain of f64 additions.
//! Each task runs in the AVX2 copy ([`vectorized`]) where the CPU has it:
//! Rust fuses no multiply and add, so that copy computes the same bits as
//! the baseline one. Its bodies are structs, not closures: a closure's body
//! is compiled outside the AVX2 copy (tried: slower than no copy at all).

use super::BatchNormArgs;
use crate::backend::cpu::simd::{vectorized, Vectorized};
use rayon::prelude::*;

/// Planes per rayon task in elementwise passes: a plane of a late
/// convolution may be a few pixels, too little work for a task of its own.
const PLANES_PER_TASK: usize = 64;

/// Partial sums of an f64 reduction: two AVX2 vectors of f64.
const LANES: usize = 8;

/// Values of a plane whose passed gradient is made at once, on the stack.
const BLOCK: usize = 256;

/// `Σ f(a[i], b[i])` over the slices (of one length) in [`LANES`] partial
/// sums, element `i` into sum `i % LANES`, then those in order. Whole
/// vectors of the slices, not indices, so that no bounds check stands in
/// the way of the vectoriser.
#[inline(always)]
fn lane_sum(a: &[f32], b: &[f32], f: impl Fn(f32, f32) -> f64) -> f64 {
    let mut acc = [0.0f64; LANES];
    let (va, vb) = (a.chunks_exact(LANES), b[..a.len()].chunks_exact(LANES));
    let (ra, rb) = (va.remainder(), vb.remainder());
    for (a, b) in va.zip(vb) {
        for (l, acc) in acc.iter_mut().enumerate() {
            *acc += f(a[l], b[l]);
        }
    }
    for (acc, (&a, &b)) in acc.iter_mut().zip(ra.iter().zip(rb)) {
        *acc += f(a, b);
    }
    acc.iter().sum()
}

/// `1/√(σ² + eps)`, the same f32 arithmetic as the GPU's.
fn inv_std(var: f32, eps: f32) -> f32 {
    1.0 / (var + eps).sqrt()
}

/// What training's statistics pass writes, per channel.
pub(super) struct Stats<'a> {
    pub mean: &'a mut [f32],
    pub invstd: &'a mut [f32],
    pub running_mean: &'a mut [f32],
    pub running_var: &'a mut [f32],
}

/// The batch's mean and inverse standard deviation per channel, two passes
/// (the mean, then the squared deviations from it: no cancellation of
/// large squares), and the running statistics moved towards them.
pub(super) fn batch_stats(c: usize, hw: usize, x: &[f32], args: BatchNormArgs, out: Stats<'_>) {
    let count = x.len() / c;
    let unbiased = count as f32 / (count - 1) as f32;
    let m = args.momentum;
    let group = channel_group(c);
    out.mean
        .par_chunks_mut(group)
        .zip(out.invstd.par_chunks_mut(group))
        .zip(
            out.running_mean
                .par_chunks_mut(group)
                .zip(out.running_var.par_chunks_mut(group)),
        )
        .enumerate()
        .for_each(|(t, ((mean, invstd), (rm, rv)))| {
            let (mu, squares) = vectorized(GroupMoments {
                c,
                hw,
                first: t * group,
                len: mean.len(),
                x,
            });
            for k in 0..mean.len() {
                let var = (squares[k] / count as f64) as f32;
                mean[k] = mu[k] as f32;
                invstd[k] = inv_std(var, args.eps);
                rm[k] = m * mean[k] + (1.0 - m) * rm[k];
                rv[k] = m * (var * unbiased) + (1.0 - m) * rv[k];
            }
        });
}

/// Channels `first..first + len`: each one's mean and sum of squared
/// deviations from it, in f64, in the AVX2 copy where the CPU has it, the
/// tensor walked in memory order (as [`GroupSums`]: the same additions in
/// the same order as one channel at a time in the baseline copy).
struct GroupMoments<'a> {
    c: usize,
    hw: usize,
    first: usize,
    len: usize,
    x: &'a [f32],
}

impl Vectorized for GroupMoments<'_> {
    type Output = ([f64; GROUP_MAX], [f64; GROUP_MAX]);
    #[inline(always)]
    fn run<const FMA: bool>(self) -> Self::Output {
        let Self { c, hw, first, len, x } = self;
        let count = x.len() / c;
        let plane = |img: usize, k: usize| {
            let at = (img * c + first + k) * hw;
            &x[at..at + hw]
        };
        let images = count / hw;
        let mut sum = [0.0f64; GROUP_MAX];
        for img in 0..images {
            for (k, sum) in sum.iter_mut().take(len).enumerate() {
                let p = plane(img, k);
                *sum += lane_sum(p, p, |v, _| v as f64);
            }
        }
        let mut mu = [0.0f64; GROUP_MAX];
        for (mu, sum) in mu.iter_mut().zip(&sum).take(len) {
            *mu = sum / count as f64;
        }
        let mut squares = [0.0f64; GROUP_MAX];
        for img in 0..images {
            for (k, (squares, &mu)) in squares.iter_mut().zip(&mu).take(len).enumerate() {
                let p = plane(img, k);
                *squares += lane_sum(p, p, |v, _| (v as f64 - mu) * (v as f64 - mu));
            }
        }
        (mu, squares)
    }
}

/// Evaluation's statistics: the running ones.
pub(super) fn eval_stats(rm: &[f32], rv: &[f32], eps: f32, mean: &mut [f32], invstd: &mut [f32]) {
    mean.copy_from_slice(rm);
    for (i, &v) in invstd.iter_mut().zip(rv) {
        *i = inv_std(v, eps);
    }
}

/// The per-channel values the elementwise passes read.
pub(super) struct Channels<'a> {
    pub mean: &'a [f32],
    pub invstd: &'a [f32],
    pub weight: &'a [f32],
    pub bias: &'a [f32],
}

/// Where backward passes the output's gradient on: everywhere (no relu),
/// where the pre-activation `(x − μ)·invstd·w + b` is above 0 (a relu
/// whose output is not kept), where the output is above 0 (a relu after a
/// residual, its output at hand), or where the pre-activation plus the
/// residual is (the same, its output dropped: `normalize`'s arithmetic, so
/// the same mask bit for bit).
pub(super) enum Mask<'a> {
    All,
    PreActivation {
        weight: &'a [f32],
        bias: &'a [f32],
    },
    Output(&'a [f32]),
    PlusResidual {
        weight: &'a [f32],
        bias: &'a [f32],
        residual: &'a [f32],
    },
}

impl Mask<'_> {
    /// `out[j]`: the gradient `g[j]` of value `at + j` (of channel `ch`,
    /// input `x[j]`) passed on, or 0. One kind of mask per call, so each
    /// arm is a loop LLVM vectorises.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn pass(&self, g: &[f32], x: &[f32], at: usize, ch: usize, mu: f32, is: f32, out: &mut [f32]) {
        let len = out.len();
        let (g, x) = (&g[..len], &x[..len]);
        let keep = |open: bool, g: f32| if open { g } else { 0.0 };
        match self {
            Mask::All => out.copy_from_slice(g),
            Mask::PreActivation { weight, bias } => {
                let (w, b) = (weight[ch], bias[ch]);
                for ((o, &g), &x) in out.iter_mut().zip(g).zip(x) {
                    *o = keep((x - mu) * is * w + b > 0.0, g);
                }
            }
            Mask::Output(y) => {
                for ((o, &g), &y) in out.iter_mut().zip(g).zip(&y[at..at + len]) {
                    *o = keep(y > 0.0, g);
                }
            }
            Mask::PlusResidual { weight, bias, residual } => {
                let (w, b) = (weight[ch], bias[ch]);
                for (((o, &g), &x), &r) in out.iter_mut().zip(g).zip(x).zip(&residual[at..at + len]) {
                    let pre = (x - mu) * is * w + b;
                    *o = keep(pre + r > 0.0, g);
                }
            }
        }
    }

    /// [`Mask::blocks`] over a plane's `g` that `f` may write: `f(from,
    /// passed, g_block)`, `passed` made from the block of `g` before `f`
    /// is handed it.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn blocks_in_place(
        &self,
        g: &mut [f32],
        x: &[f32],
        at: usize,
        ch: usize,
        mu: f32,
        is: f32,
        mut f: impl FnMut(usize, &[f32], &mut [f32]),
    ) {
        in_blocks(g.len(), |from, to, passed| {
            self.pass(&g[from..to], &x[from..to], at + from, ch, mu, is, passed);
            f(from, passed, &mut g[from..to]);
        });
    }

    /// Calls `f(from, passed)` for every block of the plane of `len` values
    /// starting at value `at` of channel `ch`, `passed` the gradient this
    /// mask passes on for values `at + from..`; `g` and `x` are the plane's.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn blocks(&self, g: &[f32], x: &[f32], at: usize, ch: usize, mu: f32, is: f32, mut f: impl FnMut(usize, &[f32])) {
        in_blocks(g.len(), |from, to, passed| {
            self.pass(&g[from..to], &x[from..to], at + from, ch, mu, is, passed);
            f(from, passed);
        });
    }
}

/// Calls `f(from, to, passed)` for each block `from..to` of `len` values,
/// `passed` a block of scratch on the stack, `to - from` long.
#[inline(always)]
fn in_blocks(len: usize, mut f: impl FnMut(usize, usize, &mut [f32])) {
    let mut buf = [0.0f32; BLOCK];
    for from in (0..len).step_by(BLOCK) {
        let to = (from + BLOCK).min(len);
        f(from, to, &mut buf[..to - from]);
    }
}

/// `y = (x − μ)·invstd·w + b`, per channel, plus `residual` when given,
/// through `max(·, 0)` when `relu`: the same arithmetic as the separate
/// ops, in the same order.
#[allow(clippy::too_many_arguments)]
pub(super) fn normalize(
    c: usize,
    hw: usize,
    k: Channels<'_>,
    x: Input<'_>,
    residual: Option<&[f32]>,
    relu: bool,
    y: &mut [f32],
) {
    let span = PLANES_PER_TASK * hw;
    y.par_chunks_mut(span).enumerate().for_each(|(t, y)| {
        let residual = residual.map(|r| &r[t * span..t * span + y.len()]);
        vectorized(NormalizeTask {
            c,
            hw,
            k: &k,
            x,
            residual,
            relu,
            t,
            y,
        })
    });
}

/// [`normalize`]'s planes of task `t` (`y`, and the residual's `residual`),
/// in the AVX2 copy where the CPU has it: no f32 operation fuses there (Rust
/// does not contract `a * b + c`), so the same bits as the baseline copy.
struct NormalizeTask<'a> {
    c: usize,
    hw: usize,
    k: &'a Channels<'a>,
    x: Input<'a>,
    residual: Option<&'a [f32]>,
    relu: bool,
    t: usize,
    y: &'a mut [f32],
}

impl Vectorized for NormalizeTask<'_> {
    type Output = ();
    #[inline(always)]
    fn run<const FMA: bool>(self) {
        let Self {
            c,
            hw,
            k,
            x,
            residual: r,
            relu,
            t,
            y,
        } = self;
        let span = PLANES_PER_TASK * hw;
        for (p, y) in y.chunks_exact_mut(hw).enumerate() {
            let ch = (t * PLANES_PER_TASK + p) % c;
            let (mu, is, w, b) = (k.mean[ch], k.invstd[ch], k.weight[ch], k.bias[ch]);
            match x {
                Input::Of(x) => {
                    let from = t * span + p * hw;
                    for (y, &x) in y.iter_mut().zip(&x[from..from + hw]) {
                        *y = (x - mu) * is * w + b;
                    }
                }
                Input::InPlace => {
                    for y in y.iter_mut() {
                        *y = (*y - mu) * is * w + b;
                    }
                }
            }
            if let Some(r) = r {
                for (y, &r) in y.iter_mut().zip(&r[p * hw..(p + 1) * hw]) {
                    *y += r;
                }
            }
            if relu {
                for y in y.iter_mut() {
                    *y = y.max(0.0);
                }
            }
        }
    }
}

/// What [`normalize`] reads: its own buffer, or the output's, which it
/// writes over (a recomputed input nothing else reads).
#[derive(Clone, Copy)]
pub(super) enum Input<'a> {
    Of(&'a [f32]),
    InPlace,
}

/// Per channel, `Σ g·x̂` (the weight's gradient) and `Σ g` (the bias's),
/// with `g` the output's gradient where `mask` passes it.
#[allow(clippy::too_many_arguments)]
pub(super) fn backward_sums(
    c: usize,
    hw: usize,
    x: &[f32],
    gy: &[f32],
    mean: &[f32],
    invstd: &[f32],
    mask: &Mask<'_>,
    sum_dy_xhat: &mut [f32],
    sum_dy: &mut [f32],
) {
    let group = channel_group(c);
    sum_dy_xhat
        .par_chunks_mut(group)
        .zip(sum_dy.par_chunks_mut(group))
        .enumerate()
        .for_each(|(t, (dw, db))| {
            vectorized(GroupSums {
                c,
                hw,
                first: t * group,
                x,
                gy,
                mean,
                invstd,
                mask,
                dw,
                db,
            })
        });
}

/// Channels one task of a per-channel sum takes ([`GROUP_MAX`] at most):
/// all of them on one thread, else an even share of each thread.
fn channel_group(c: usize) -> usize {
    c.div_ceil(rayon::current_num_threads()).clamp(1, GROUP_MAX)
}

/// The most channels a task of a per-channel sum keeps sums for (on the
/// stack).
const GROUP_MAX: usize = 64;

/// Channels `first..` (as many as `dw` holds): their `Σ g·(x − μ)·invstd`
/// into `dw` and `Σ g` into `db`, summed in f64 in the AVX2 copy where the
/// CPU has it (no f64 operation fuses: the same bits as the baseline copy).
/// The task walks the tensor in memory order, image by image, its channels'
/// planes within each, rather than one channel's planes across the images:
/// the prefetcher sees one stream. Each channel's sum still adds its
/// planes in image order, so the same bits whatever the grouping.
struct GroupSums<'a> {
    c: usize,
    hw: usize,
    first: usize,
    x: &'a [f32],
    gy: &'a [f32],
    mean: &'a [f32],
    invstd: &'a [f32],
    mask: &'a Mask<'a>,
    dw: &'a mut [f32],
    db: &'a mut [f32],
}

impl Vectorized for GroupSums<'_> {
    type Output = ();
    #[inline(always)]
    fn run<const FMA: bool>(self) {
        let Self {
            c,
            hw,
            first,
            x,
            gy,
            mean,
            invstd,
            mask,
            dw,
            db,
        } = self;
        let images = x.len() / (c * hw);
        let (mut centred, mut total) = ([0.0f64; GROUP_MAX], [0.0f64; GROUP_MAX]);
        for img in 0..images {
            for (k, (centred, total)) in centred.iter_mut().zip(&mut total).take(dw.len()).enumerate() {
                let ch = first + k;
                let (mu, is) = (mean[ch], invstd[ch]);
                let mu64 = mu as f64;
                let base = (img * c + ch) * hw;
                let (gy, x) = (&gy[base..base + hw], &x[base..base + hw]);
                mask.blocks(gy, x, base, ch, mu, is, |from, g| {
                    let x = &x[from..from + g.len()];
                    *centred += lane_sum(g, x, |g, x| g as f64 * (x as f64 - mu64));
                    *total += lane_sum(g, g, |g, _| g as f64);
                });
            }
        }
        for (k, (dw, db)) in dw.iter_mut().zip(db.iter_mut()).enumerate() {
            // invstd is one factor of every term: applied once, after the sum.
            *dw = (centred[k] * invstd[first + k] as f64) as f32;
            *db = total[k] as f32;
        }
    }
}

/// `dx = w·invstd·(g − Σg/n − x̂·Σg·x̂/n)` in training (the batch's
/// statistics depend on `x`), `dx = w·invstd·g` in evaluation, with `g` the
/// gradient `mask` passes and `sums` = (Σ g·x̂, Σ g).
#[allow(clippy::too_many_arguments)]
pub(super) fn input_grad(
    c: usize,
    hw: usize,
    training: bool,
    k: &Channels<'_>,
    sums: (&[f32], &[f32]),
    mask: &Mask<'_>,
    x: &[f32],
    gy: &[f32],
    gx: &mut [f32],
) {
    let dx = InputGrad::new(c, training, k, sums, x);
    let span = PLANES_PER_TASK * hw;
    gx.par_chunks_mut(span).enumerate().for_each(|(t, gx)| {
        for (p, gx) in gx.chunks_exact_mut(hw).enumerate() {
            let plane = t * PLANES_PER_TASK + p;
            let (ch, at) = (plane % c, plane * hw);
            let d = dx.channel(ch);
            let x = &x[at..at + hw];
            mask.blocks(&gy[at..at + hw], x, at, ch, d.mu, d.is, |from, passed| {
                d.apply(&x[from..], passed, &mut gx[from..from + passed.len()]);
            });
        }
    });
}

/// [`input_grad`]'s arithmetic, per channel.
struct InputGrad<'a> {
    training: bool,
    k: &'a Channels<'a>,
    sums: (&'a [f32], &'a [f32]),
    count: f32,
}

impl<'a> InputGrad<'a> {
    fn new(c: usize, training: bool, k: &'a Channels<'a>, sums: (&'a [f32], &'a [f32]), x: &[f32]) -> Self {
        Self {
            training,
            k,
            sums,
            count: (x.len() / c) as f32,
        }
    }

    /// Channel `ch`'s constants, computed once per plane.
    #[inline(always)]
    fn channel(&self, ch: usize) -> ChannelGrad {
        let (mu, is) = (self.k.mean[ch], self.k.invstd[ch]);
        let (sum_dy_xhat, sum_dy) = self.sums;
        ChannelGrad {
            training: self.training,
            mu,
            is,
            scale: self.k.weight[ch] * is,
            mean_dy: sum_dy[ch] / self.count,
            mean_dy_xhat: sum_dy_xhat[ch] / self.count,
        }
    }
}

struct ChannelGrad {
    training: bool,
    mu: f32,
    is: f32,
    scale: f32,
    mean_dy: f32,
    mean_dy_xhat: f32,
}

impl ChannelGrad {
    /// `out[j]`, the input's gradient at value `x[j]`, `passed[j]` the
    /// gradient the mask passed there.
    #[inline(always)]
    fn apply(&self, x: &[f32], passed: &[f32], out: &mut [f32]) {
        let x = &x[..out.len()];
        if self.training {
            for ((o, &x), &g) in out.iter_mut().zip(x).zip(passed) {
                let xhat = (x - self.mu) * self.is;
                *o = self.scale * (g - self.mean_dy - xhat * self.mean_dy_xhat);
            }
        } else {
            for (o, &g) in out.iter_mut().zip(passed) {
                *o = self.scale * g;
            }
        }
    }
}

/// Which gradient backward writes over the output's gradient `g`, which
/// nothing reads after it: the input's, or the residual's (the gradient the
/// mask passes, as is; the input's, if wanted, then into `gx`).
pub(super) enum InPlace<'a> {
    Input,
    Residual { gx: Option<&'a mut [f32]> },
}

/// [`input_grad`] and [`passed_grad`] with one result written over `g`,
/// the output's gradient: the same arithmetic, value by value, so the same
/// bits (the mask passes a value it passed before unchanged).
#[allow(clippy::too_many_arguments)]
pub(super) fn grads_in_place(
    c: usize,
    hw: usize,
    training: bool,
    k: &Channels<'_>,
    sums: (&[f32], &[f32]),
    mask: &Mask<'_>,
    x: &[f32],
    g: &mut [f32],
    into: InPlace<'_>,
) {
    let dx = InputGrad::new(c, training, k, sums, x);
    let span = PLANES_PER_TASK * hw;
    let plane_by_plane = |g: &mut [f32], gx: Option<&mut [f32]>, t: usize, input: bool| {
        vectorized(GradTask {
            c,
            hw,
            dx: &dx,
            mask,
            x,
            g,
            gx,
            t,
            input,
        })
    };
    match into {
        InPlace::Input => g
            .par_chunks_mut(span)
            .enumerate()
            .for_each(|(t, g)| plane_by_plane(g, None, t, true)),
        InPlace::Residual { gx: None } => g
            .par_chunks_mut(span)
            .enumerate()
            .for_each(|(t, g)| plane_by_plane(g, None, t, false)),
        InPlace::Residual { gx: Some(gx) } => g
            .par_chunks_mut(span)
            .zip(gx.par_chunks_mut(span))
            .enumerate()
            .for_each(|(t, (g, gx))| plane_by_plane(g, Some(gx), t, false)),
    }
}

/// [`grads_in_place`]'s planes of task `t`, in the AVX2 copy where the CPU
/// has it (the same bits as the baseline copy, as [`NormalizeTask`]).
struct GradTask<'a> {
    c: usize,
    hw: usize,
    dx: &'a InputGrad<'a>,
    mask: &'a Mask<'a>,
    x: &'a [f32],
    g: &'a mut [f32],
    gx: Option<&'a mut [f32]>,
    t: usize,
    /// The input's gradient over `g` (else the passed gradient).
    input: bool,
}

impl Vectorized for GradTask<'_> {
    type Output = ();
    #[inline(always)]
    fn run<const FMA: bool>(self) {
        let Self {
            c,
            hw,
            dx,
            mask,
            x,
            g,
            mut gx,
            t,
            input,
        } = self;
        for (p, g) in g.chunks_exact_mut(hw).enumerate() {
            let plane = t * PLANES_PER_TASK + p;
            let (ch, at) = (plane % c, plane * hw);
            let d = dx.channel(ch);
            let x = &x[at..at + hw];
            let mut gx = gx.as_deref_mut().map(|gx| &mut gx[p * hw..(p + 1) * hw]);
            mask.blocks_in_place(g, x, at, ch, d.mu, d.is, |from, passed, g| {
                if let Some(gx) = gx.as_deref_mut() {
                    d.apply(&x[from..], passed, &mut gx[from..from + passed.len()]);
                }
                if input {
                    d.apply(&x[from..], passed, g);
                } else {
                    g.copy_from_slice(passed);
                }
            });
        }
    }
}

/// The gradient `mask` passes on, as is: the residual's gradient.
pub(super) fn passed_grad(
    c: usize,
    hw: usize,
    k: &Channels<'_>,
    mask: &Mask<'_>,
    x: &[f32],
    gy: &[f32],
    gr: &mut [f32],
) {
    let span = PLANES_PER_TASK * hw;
    gr.par_chunks_mut(span).enumerate().for_each(|(t, gr)| {
        for (p, gr) in gr.chunks_exact_mut(hw).enumerate() {
            let plane = t * PLANES_PER_TASK + p;
            let (ch, at) = (plane % c, plane * hw);
            let (x, gy) = (&x[at..at + hw], &gy[at..at + hw]);
            mask.pass(gy, x, at, ch, k.mean[ch], k.invstd[ch], gr);
        }
    });
}
