//! dropout: keeps each element with probability `1 - p` and scales kept ones
//! by `1 / (1 - p)`. Whether element `i` is kept is a pure function of
//! `(seed, i)` ([`keep`]), so backward recomputes the mask instead of storing
//! it, and a GPU kernel draws exactly the same mask.
//!
//! The index is the element's place in memory, whatever the tensor's
//! layout: the kernels are elementwise, the output and the gradient are in
//! the input's layout, and a channels-last tensor is masked as its memory
//! runs (a mask other than its NCHW copy's, equally random). A batch's rows
//! are contiguous in either layout, so [`DropoutSeed::shifted`] still
//! splits a batch's draws between data-parallel ranks.

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Grid, KernelSource};
use crate::memory::{Buf, FloatBuf};
use crate::ops::cursor::{step_seed, StepCursor};
use crate::ops::Step;
use crate::tensor::{Tensor, TensorRef};
use crate::{Error, Result};

/// A counter-based draw: mixes the seed and the element index through the
/// SplitMix64 finaliser and keeps the element when the top 24 bits, read as
/// a fraction, are at least `p`.
pub fn keep(seed: u64, index: u64, p: f32) -> bool {
    let mut z = seed ^ index.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^= z >> 31;
    ((z >> 40) as f32) * (1.0 / (1u64 << 24) as f32) >= p
}

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "dropout",
    source: include_str!("kernels.cu"),
    entries: &[DROPOUT_APPLY.f32, DROPOUT_APPLY.bf16],
};
const DROPOUT_APPLY: FloatKernel = float_kernel!("dropout_apply");

/// Where a dropout mask's seed comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DropoutSeed {
    /// This seed, whatever the step.
    Fixed(u64),
    /// A fresh seed each training step, [`step_seed`]`(base, global step)`,
    /// with the step read from the cursor where the kernel runs; element
    /// `i` takes draw `first + i`. A data-parallel rank whose rows start at
    /// row `r` of the global batch passes `r × features`, so the ranks
    /// together drop exactly what one device with the whole batch drops.
    PerStep {
        /// The run's dropout seed.
        base: u64,
        /// Where the global step is read.
        cursor: StepCursor,
        /// The draw element 0 takes.
        first: u32,
    },
}

impl DropoutSeed {
    /// The cursor a kernel reads the seed from (an empty buffer if none).
    pub(crate) fn cursor_buf(&self) -> Buf<u32> {
        match self {
            Self::Fixed(_) => Buf::default(),
            Self::PerStep { cursor, .. } => cursor.buf,
        }
    }

    /// The same draws, starting `draws` further on (for a tensor holding
    /// the later rows of a batch).
    pub fn shifted(self, draws: u32) -> Self {
        match self {
            Self::Fixed(seed) => Self::Fixed(seed),
            Self::PerStep { base, cursor, first } => Self::PerStep {
                base,
                cursor,
                first: first + draws,
            },
        }
    }

    /// The draw of the tensor's first element.
    pub(crate) fn first(&self) -> u32 {
        match self {
            Self::Fixed(_) => 0,
            Self::PerStep { first, .. } => *first,
        }
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    y: TensorRef,
    p: f32,
    seed: DropoutSeed,
}

impl<'s> Tensor<'s> {
    /// Dropout with probability `p` in `[0, 1)` and the mask of `seed`.
    pub fn dropout(self, s: &mut Step<'s>, p: f32, seed: u64) -> Result<Tensor<'s>> {
        self.dropout_seeded(s, p, DropoutSeed::Fixed(seed))
    }

    /// Dropout with probability `p` in `[0, 1)`, its seed from `seed`.
    pub fn dropout_seeded(self, s: &mut Step<'s>, p: f32, seed: DropoutSeed) -> Result<Tensor<'s>> {
        if !(0.0..1.0).contains(&p) {
            return Err(Error::shape("dropout", format!("a probability in [0, 1), got {p}")));
        }
        let y = s.output("dropout output", self.shape(), &[&self])?;
        s.launch(
            &[self.buf().into(), y.buf().into(), seed.cursor_buf().into()],
            |v| {
                let (first, seed) = (seed.first(), cpu_seed(v, seed)?);
                cpu::apply(v.read(self.buf())?, v.write(y.buf())?, p, seed, first);
                Ok(())
            },
            |gpu| cuda_apply(gpu, self.buf(), y.buf(), p, seed),
        )?;
        if y.requires_grad() {
            s.record(Saved {
                x: self.inner,
                y: y.inner,
                p,
                seed,
            });
        }
        Ok(y)
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        if !self.x.requires_grad {
            return Ok(());
        }
        let gx = s.alloc_like("dropout input grad", &self.x)?;
        s.launch(
            &[gy.into(), gx.into(), self.seed.cursor_buf().into()],
            |v| {
                let seed = cpu_seed(v, self.seed)?;
                cpu::apply(v.read(gy)?, v.write(gx)?, self.p, seed, self.seed.first());
                Ok(())
            },
            // The mask is linear in its input: backward is the same map.
            |gpu| cuda_apply(gpu, gy, gx, self.p, self.seed),
        )?;
        s.accumulate(&self.x, gx)
    }
}

/// `out = x / (1 - p)` where kept, else 0, on the GPU: the scale is computed
/// here, as on the CPU, so both backends multiply by the same float.
fn cuda_apply(
    gpu: &mut crate::backend::cuda::CudaBackend,
    x: FloatBuf,
    out: FloatBuf,
    p: f32,
    seed: DropoutSeed,
) -> std::result::Result<(), crate::backend::BackendError> {
    let n = out.len();
    let first = seed.first();
    let (seed, cursor) = match seed {
        DropoutSeed::Fixed(seed) => (seed, Arg::Null),
        DropoutSeed::PerStep { base, cursor, .. } => (base, Arg::from(cursor.buf)),
    };
    gpu.launch(
        DROPOUT_APPLY.of(out.dtype()),
        Grid::over(n),
        &[
            x.into(),
            out.into(),
            Arg::U32(n as u32),
            Arg::F32(p),
            Arg::F32(1.0 / (1.0 - p)),
            Arg::U64(seed),
            cursor,
            Arg::U32(first),
        ],
    )
}

/// The seed a CPU kernel uses: read from the cursor in the arena when it
/// is per step, exactly as the GPU kernel does.
pub(crate) fn cpu_seed(
    v: &mut crate::backend::cpu::Views<'_>,
    seed: DropoutSeed,
) -> std::result::Result<u64, crate::backend::BackendError> {
    Ok(match seed {
        DropoutSeed::Fixed(seed) => seed,
        DropoutSeed::PerStep { base, cursor, .. } => step_seed(base, StepCursor::global_step(v.read(cursor.buf)?)),
    })
}
