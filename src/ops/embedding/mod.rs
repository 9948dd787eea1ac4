//! embedding: rows of a table `[V, E]` picked by token, `[N, E]` for `N`
//! tokens (PyTorch's `F.embedding(tokens, weight)`), the tokens `u32`s in
//! the step region (a batch a kernel gathered, or uploaded labels).
//!
//! A token past the table is an error on the CPU ([`BackendError::Token`],
//! before anything is written). A GPU kernel cannot report one without the
//! host waiting on it, so there the row is NaN (never a read past the
//! table), the loss turns NaN and training stops at that step: the
//! convention of the batch gather. The data layer refuses such tokens
//! before anything runs; this is the guard behind it.
//!
//! Backward is deterministic on both devices: the table's gradient element
//! `(v, e)` is the sum of `dy[n, e]` over the tokens `n` equal to `v`, added
//! in the order of `n`, by one GPU thread per element of the table walking
//! the tokens (read through shared memory, 256 at a time). No float atomics,
//! whose order would vary between runs, and no sort, which would need
//! several kernels: the walk costs `V·E·N` compares, some 68 million for a
//! character model (V 65, E 128, 8,192 tokens) and 6 billion for a word
//! model (V 16k, E 300, 1,250 tokens). A small table is too few threads for
//! that (the character model's took 545 µs on an H200), so its walk is split
//! along the tokens into parts of 256, each part's sums kept in fp32 and the
//! parts added in their order: still the same bits every run. The CPU adds
//! in the order of `n`; the GPU's sums differ from it only by that
//! grouping. Rows no token names get zeros.
//!
//! [`BackendError::Token`]: crate::backend::BackendError::Token

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Grid, KernelSource};
use crate::backend::Sizing;
use crate::memory::Buf;
use crate::ops::Step;
use crate::tensor::{Labels, Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "embedding",
    source: include_str!("kernels.cu"),
    entries: &[
        EMBEDDING_FORWARD.f32,
        EMBEDDING_FORWARD.bf16,
        EMBEDDING_BACKWARD.f32,
        EMBEDDING_BACKWARD.bf16,
        BACKWARD_PARTS.f32,
        BACKWARD_PARTS.bf16,
        SUM_PARTS.f32,
        SUM_PARTS.bf16,
    ],
};
const EMBEDDING_FORWARD: FloatKernel = float_kernel!("embedding_forward");
const EMBEDDING_BACKWARD: FloatKernel = float_kernel!("embedding_backward");
const BACKWARD_PARTS: FloatKernel = float_kernel!("embedding_backward_parts");
const SUM_PARTS: FloatKernel = float_kernel!("embedding_sum_parts");

/// A table of at most this many elements has its backward walk split along
/// the tokens, a part per [`TOKENS_PER_PART`]: fewer threads than that
/// leave an H200 idle while each walks every token.
const SMALL_TABLE: usize = 1 << 16;
const TOKENS_PER_PART: usize = 256;
/// The most parts: their fp32 sums are scratch of the step.
const MOST_PARTS: usize = 64;

/// How many parts the GPU's backward walk over `n` tokens is split into.
fn parts(vocab: usize, dim: usize, n: usize) -> usize {
    match vocab * dim <= SMALL_TABLE {
        true => n.div_ceil(TOKENS_PER_PART).clamp(1, MOST_PARTS),
        false => 1,
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    table: TensorRef,
    tokens: Buf<u32>,
    y: TensorRef,
}

impl<'s> Tensor<'s> {
    /// Row `tokens[n]` of `self` (a table `[V, E]`) as row `n` of the
    /// output `[N, E]`, in the table's type.
    pub fn embedding(self, s: &mut Step<'s>, tokens: Labels<'s>) -> Result<Tensor<'s>> {
        let table = self.shape();
        if table.rank() != 2 {
            return Err(Error::shape("embedding", format!("a table [V, E], got {table}")));
        }
        let (vocab, dim, n) = (table.dim(0), table.dim(1), tokens.len());
        let y = s.output("embedding output", Shape::new(&[n, dim]), &[&self])?;
        let (x, out, tokens) = (self.buf(), y.buf(), tokens.buf);
        if n > 0 && dim > 0 {
            s.launch(
                &[x.into(), tokens.into(), out.into()],
                |v| cpu::forward(v.read(x)?, v.read(tokens)?, dim, v.write(out)?),
                |gpu| {
                    gpu.launch(
                        EMBEDDING_FORWARD.of(out.dtype()),
                        Grid::over(n * dim),
                        &[
                            x.into(),
                            tokens.into(),
                            out.into(),
                            Arg::U32(n as u32),
                            Arg::U32(vocab as u32),
                            Arg::U32(dim as u32),
                        ],
                    )
                },
            )?;
        }
        if y.requires_grad() {
            s.record(Saved {
                table: self.inner,
                tokens,
                y: y.inner,
            });
        }
        Ok(y)
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        if !self.table.requires_grad {
            return Ok(());
        }
        let (vocab, dim) = (self.table.shape.dim(0), self.table.shape.dim(1));
        let n = self.tokens.len();
        let tokens = self.tokens;
        if vocab * dim == 0 {
            return Ok(());
        }
        // On the CPU a table read again in this step (a Tree-LSTM's state
        // tables, gathered twice a level) adds this read's rows into the
        // gradient it already has, in place: no table of zeros, no second
        // pass adding it. On the GPU the gradient is written whole, zeros
        // included, its tokens split over `split` parts.
        let ((gt, add), split) = match s.sizing() {
            Sizing::Cpu { .. } => (s.grad_into(&self.table, "embedding table grad")?, 1),
            Sizing::Cuda(_) => (
                (s.grad_buffer(&self.table, "embedding table grad")?, false),
                parts(vocab, dim, n),
            ),
        };
        let scratch = match split {
            1 => None,
            p => Some(s.alloc::<f32>("embedding grad parts", Shape::new(&[p, vocab, dim]))?),
        };
        let u = |v: usize| Arg::U32(v as u32);
        s.launch(
            &[tokens.into(), gy.into(), gt.into(), scratch.unwrap_or_default().into()],
            |v| cpu::backward(v.read(tokens)?, v.read(gy)?, dim, v.write(gt)?, add),
            |gpu| match scratch {
                None => gpu.launch(
                    EMBEDDING_BACKWARD.of(gt.dtype()),
                    Grid::over(vocab * dim),
                    &[tokens.into(), gy.into(), gt.into(), u(n), u(vocab), u(dim)],
                ),
                Some(scratch) => {
                    let chunk = n.div_ceil(split);
                    let walk = Grid {
                        blocks: ((vocab * dim).div_ceil(256) as u32, split as u32),
                        threads: (256, 1),
                    };
                    gpu.launch(
                        BACKWARD_PARTS.of(gy.dtype()),
                        walk,
                        &[
                            tokens.into(),
                            gy.into(),
                            scratch.into(),
                            u(n),
                            u(vocab),
                            u(dim),
                            u(chunk),
                        ],
                    )?;
                    gpu.launch(
                        SUM_PARTS.of(gt.dtype()),
                        Grid::over(vocab * dim),
                        &[scratch.into(), u(split), gt.into(), u(vocab * dim)],
                    )
                }
            },
        )?;
        if add {
            return Ok(());
        }
        s.accumulate(&self.table, gt)
    }
}
