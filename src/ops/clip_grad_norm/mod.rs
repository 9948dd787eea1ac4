//! clip_grad_norm: `torch.nn.utils.clip_grad_norm_` (the 2-norm) over the
//! gradients of a step, in three launches that never wait for the host, so
//! a captured step graph clips on every replay:
//!
//! 1. [`Step::clip_sum_squares`], once per run of gradients: the squares of
//!    each of [`PIECES`] equal pieces of the run summed in f64 into that
//!    piece's partial sum (the first run overwrites, the others add);
//! 2. [`Step::clip_coefficient`]: `norm = √Σ partials`, then PyTorch's
//!    coefficient `min(1, max_norm · 1/(norm + 1e-6))`, in f32 as PyTorch
//!    forms it from its f32 norm (its `max_norm / t` is `t.reciprocal() *
//!    max_norm`; a NaN norm gives a NaN coefficient, as its clamp does);
//! 3. [`Step::clip_scale`], once per run: `g *= coefficient` in place, as
//!    PyTorch's `g.mul_`, so any update that follows reads clipped
//!    gradients. A coefficient of exactly 1 (no clipping) writes nothing.
//!
//! Both backends cut a run into the same pieces and sum each in f64 and the
//! partial sums in f64 (in another order on each), so their norms agree to
//! the last bit but in rare ties; the sums are deterministic on both.

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::memory::Buf;
use crate::ops::sgd_update::flat_grid;
use crate::ops::Step;
use crate::tensor::{Persistent, Shape};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "clip_grad_norm",
    source: include_str!("kernels.cu"),
    entries: &[SUM_SQUARES, COEFFICIENT, SCALE],
};
const SUM_SQUARES: &str = "clip_sum_squares";
const COEFFICIENT: &str = "clip_coefficient";
const SCALE: &str = "clip_scale";

/// The pieces a run of gradients is summed in: one GPU block each (enough
/// blocks to fill a GPU), the same pieces on the CPU. The kernels assume it.
pub const PIECES: usize = 1024;

/// Where the clip keeps its figures between its launches and between steps,
/// in the persistent region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClipBufs {
    /// One partial sum of squares per piece, over the step's runs so far.
    pub partials: Buf<f32>,
    /// `[norm, coefficient]` of the last step, then the sum of the norms
    /// and the number of steps since they were last set to zero.
    pub figures: Buf<f32>,
}

impl ClipBufs {
    /// Places in the persistent region: `figures` holding zeros.
    pub fn new(p: &mut Persistent<'_>) -> Result<Self> {
        Ok(Self {
            partials: p.zeros("clip partial sums", Shape::new(&[PIECES]))?,
            figures: p.zeros("clip figures", Shape::new(&[4]))?,
        })
    }

    fn check(&self, op: &'static str) -> Result<()> {
        if self.partials.len() != PIECES || self.figures.len() != 4 {
            return Err(Error::shape(
                op,
                format!(
                    "{PIECES} partial sums and 4 figures, got {} and {}",
                    self.partials.len(),
                    self.figures.len()
                ),
            ));
        }
        Ok(())
    }
}

/// Piece `k` of `n` elements, as both backends cut them.
pub(crate) fn piece(n: usize, k: usize) -> std::ops::Range<usize> {
    let at = |k: usize| (n as u128 * k as u128 / PIECES as u128) as usize;
    at(k)..at(k + 1)
}

impl Step<'_> {
    /// Adds the squares of `grad`'s pieces into `bufs.partials`; `first`
    /// (the step's first run) overwrites them instead.
    pub fn clip_sum_squares(&mut self, grad: Buf<f32>, bufs: ClipBufs, first: bool) -> Result<()> {
        bufs.check("clip_sum_squares")?;
        self.launch(
            &[grad.into(), bufs.partials.into()],
            |v| {
                let (g, partials) = (v.read(grad)?, v.write(bufs.partials)?);
                cpu::sum_squares(g, partials, first);
                Ok(())
            },
            |gpu| {
                gpu.launch(
                    SUM_SQUARES,
                    Grid::blocks(PIECES, 256),
                    &[
                        grad.into(),
                        Arg::U64(grad.len() as u64),
                        bufs.partials.into(),
                        Arg::U32(first as u32),
                    ],
                )
            },
        )
    }

    /// The norm of the partial sums and the coefficient that clips it to
    /// `max_norm`, into `bufs.figures` (the norm also added to their sum,
    /// the step to their count).
    pub fn clip_coefficient(&mut self, bufs: ClipBufs, max_norm: f32) -> Result<()> {
        bufs.check("clip_coefficient")?;
        if !(max_norm.is_finite() && max_norm > 0.0) {
            return Err(Error::Config(format!(
                "clip_coefficient: the largest norm must be above 0, got {max_norm}"
            )));
        }
        self.launch(
            &[bufs.partials.into(), bufs.figures.into()],
            |v| {
                let (partials, figures) = (v.read(bufs.partials)?, v.write(bufs.figures)?);
                cpu::coefficient(partials, figures, max_norm);
                Ok(())
            },
            |gpu| {
                gpu.launch(
                    COEFFICIENT,
                    Grid::blocks(1, 256),
                    &[bufs.partials.into(), bufs.figures.into(), Arg::F32(max_norm)],
                )
            },
        )
    }

    /// `grad *= ` the coefficient in `bufs.figures`.
    pub fn clip_scale(&mut self, grad: Buf<f32>, bufs: ClipBufs) -> Result<()> {
        bufs.check("clip_scale")?;
        self.launch(
            &[grad.into(), bufs.figures.into()],
            |v| {
                let coefficient = v.read(bufs.figures)?[1];
                cpu::scale(v.write(grad)?, coefficient);
                Ok(())
            },
            |gpu| {
                gpu.launch(
                    SCALE,
                    flat_grid(grad.len()),
                    &[grad.into(), Arg::U64(grad.len() as u64), bufs.figures.into()],
                )
            },
        )
    }
}
