//! dense: a linear layer with its epilogue fused, `y = dropout(relu(x · Wᵀ + b))`
//! (relu and dropout each optional), `x` `[N, IN]`, `W` `[OUT, IN]` (PyTorch's
//! layout), `b` `[OUT]`.
//!
//! Same result as `linear` then `relu` then `dropout`, in fewer kernels and
//! buffers: on the GPU one kernel computes the product and its epilogue, and
//! backward is two kernels (input gradient; weight and bias gradients
//! together) that apply the epilogue's masks to the upstream gradient as they
//! load it, so the masked gradient is never stored. Backward needs only the
//! output: a kept element passed the relu exactly where `y > 0`.

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::backend::{BackendError, Sizing};
use crate::memory::{Buf, DType, FloatBuf};
use crate::ops::dropout::{cpu_seed, DropoutSeed};
use crate::ops::Step;
use crate::tensor::{Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "dense",
    source: include_str!("kernels.cu"),
    entries: &[
        DENSE_FORWARD,
        DENSE_INPUT_GRAD,
        DENSE_WEIGHT_GRAD,
        DENSE_WEIGHT_GRAD_SUM,
    ],
};
const DENSE_FORWARD: &str = "dense_forward";
const DENSE_INPUT_GRAD: &str = "dense_input_grad";
const DENSE_WEIGHT_GRAD: &str = "dense_weight_grad";
const DENSE_WEIGHT_GRAD_SUM: &str = "dense_weight_grad_sum";

/// The GPU kernels' tile edge.
const TILE: u32 = 16;

/// The rows a GPU kernel loads between two barriers (`DENSE_SPAN`).
const SPAN: usize = 128;

/// The blocks a weight gradient aims for when it splits the batch: about
/// two for each multiprocessor of an H100 or H200. A constant, not the
/// device's count, so the sums' order (and their bits) is the same on
/// every GPU.
const SPLIT_BLOCKS: usize = 264;

/// How the weight gradient's product over a batch of `n` rows, for `tiles`
/// output tiles, is split: the chunks and each one's rows (a multiple of
/// [`SPAN`]). One chunk (no split) where the tiles alone fill the GPU or
/// the batch is short; each chunk at least two spans deep, so a block's
/// loads are not mostly the partial sums it writes.
fn weight_grad_chunks(n: usize, tiles: usize) -> (usize, usize) {
    let chunks = n.div_ceil(2 * SPAN).min(SPLIT_BLOCKS.div_ceil(tiles)).max(1);
    let rows = n.div_ceil(chunks).next_multiple_of(SPAN);
    (n.div_ceil(rows), rows)
}

/// What follows the product.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Epilogue {
    /// Rectify the product (and its gradient) in the same kernel.
    pub relu: bool,
    /// Probability in `[0, 1)` and where the mask's seed comes from.
    pub dropout: Option<(f32, DropoutSeed)>,
}

impl Epilogue {
    fn active(&self) -> bool {
        self.relu || self.dropout.is_some()
    }

    /// The epilogue as the CPU kernels take it, the per-step seed read from
    /// the cursor in the arena as the GPU kernels read it.
    fn on_cpu(&self, v: &mut crate::backend::cpu::Views<'_>) -> std::result::Result<cpu::Epi, BackendError> {
        Ok(cpu::Epi {
            relu: self.relu,
            dropout: match self.dropout {
                Some((p, seed)) => Some((p, cpu_seed(v, seed)?, seed.first())),
                None => None,
            },
        })
    }

    /// The cursor the kernels read a per-step seed from (empty if none).
    fn cursor_buf(&self) -> Buf<u32> {
        self.dropout.map_or(Buf::default(), |(_, seed)| seed.cursor_buf())
    }

    /// The kernels' `DenseEpilogue` (flags, p, scale, first, seed) as u32 words, and
    /// the cursor a per-step seed is read from.
    fn gpu(&self) -> ([u32; 6], Arg<'static>) {
        let first = self.dropout.map_or(0, |(_, seed)| seed.first());
        let (flags, p, seed, cursor) = match self.dropout {
            None => (self.relu as u32, 0.0f32, 0u64, Arg::Null),
            Some((p, DropoutSeed::Fixed(seed))) => (self.relu as u32 | 2, p, seed, Arg::Null),
            Some((p, DropoutSeed::PerStep { base, cursor, .. })) => (self.relu as u32 | 2, p, base, cursor.buf.into()),
        };
        let scale = 1.0 / (1.0 - p);
        (
            [
                flags,
                p.to_bits(),
                scale.to_bits(),
                first,
                seed as u32,
                (seed >> 32) as u32,
            ],
            cursor,
        )
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    x: TensorRef,
    w: TensorRef,
    bias: Option<TensorRef>,
    y: TensorRef,
    epilogue: Epilogue,
}

impl<'s> Tensor<'s> {
    /// `epilogue(self · weightᵀ + bias)`, in fp32: its kernels are our own
    /// tiled ones for the MNIST CNN's small layers, with no bf16 path, so a
    /// bf16 input is cast to fp32 first.
    pub fn dense(
        self,
        s: &mut Step<'s>,
        weight: Tensor<'s>,
        bias: Option<Tensor<'s>>,
        epilogue: Epilogue,
    ) -> Result<Tensor<'s>> {
        let x = self.cast(s, DType::F32)?;
        x.dense_f32(s, weight, bias, epilogue)
    }

    fn dense_f32(
        self,
        s: &mut Step<'s>,
        weight: Tensor<'s>,
        bias: Option<Tensor<'s>>,
        epilogue: Epilogue,
    ) -> Result<Tensor<'s>> {
        let (n, inp, out) = crate::ops::linear::dims("dense", self.shape(), weight.shape(), bias.map(|b| b.shape()))?;
        if let Some((p, _)) = epilogue.dropout {
            if !(0.0..1.0).contains(&p) {
                return Err(Error::shape(
                    "dense",
                    format!("a dropout probability in [0, 1), got {p}"),
                ));
            }
        }
        let y = match bias {
            Some(b) => s.output("dense output", Shape::new(&[n, out]), &[&self, &weight, &b])?,
            None => s.output("dense output", Shape::new(&[n, out]), &[&self, &weight])?,
        };
        s.launch(
            &[
                self.buf().into(),
                weight.buf().into(),
                bias.map_or(FloatBuf::default(), |b| b.buf()).into(),
                y.buf().into(),
                epilogue.cursor_buf().into(),
            ],
            |v| {
                let e = epilogue.on_cpu(v)?;
                let b = match bias {
                    Some(b) => Some(v.read(b.buf())?),
                    None => None,
                };
                cpu::forward(
                    (n, inp, out),
                    v.read(self.buf())?,
                    v.read(weight.buf())?,
                    b,
                    e,
                    v.write(y.buf())?,
                );
                Ok(())
            },
            |gpu| {
                let (e, cursor) = epilogue.gpu();
                gpu.launch(
                    DENSE_FORWARD,
                    Grid::tiles(n, out, TILE),
                    &[
                        self.buf().into(),
                        weight.buf().into(),
                        bias.map_or(Arg::Null, |b| b.buf().into()),
                        y.buf().into(),
                        Arg::U32(n as u32),
                        Arg::U32(inp as u32),
                        Arg::U32(out as u32),
                        Arg::U32s(&e),
                        cursor,
                    ],
                )
            },
        )?;
        if y.requires_grad() {
            s.record(Saved {
                x: self.inner,
                w: weight.inner,
                bias: bias.map(|b| b.inner),
                y: y.inner,
                epilogue,
            });
        }
        Ok(y)
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        let dims = (self.x.shape.dim(0), self.x.shape.dim(1), self.w.shape.dim(0));
        let (n, inp, out) = dims;
        let epi = self.epilogue;
        // The CPU masks the gradient into a buffer first; the GPU kernels
        // mask it as they load it.
        let masked = match s.sizing() {
            Sizing::Cpu { .. } if epi.active() => Some(s.alloc_like("dense masked grad", &self.y)?),
            _ => None,
        };
        s.launch(
            &[
                gy.into(),
                self.y.buf.into(),
                masked.unwrap_or_default().into(),
                epi.cursor_buf().into(),
            ],
            |v| {
                let Some(g) = masked else { return Ok(()) };
                let e = epi.on_cpu(v)?;
                cpu::masked(v.read(gy)?, v.read(self.y.buf)?, e, v.write(g)?);
                Ok(())
            },
            |_| Ok(()),
        )?;
        let g = masked.unwrap_or(gy);
        let (e, cursor) = epi.gpu();
        if self.x.requires_grad {
            let gx = s.alloc_like("dense input grad", &self.x)?;
            s.launch(
                &[
                    gy.into(),
                    g.into(),
                    self.y.buf.into(),
                    self.w.buf.into(),
                    gx.into(),
                    epi.cursor_buf().into(),
                ],
                |v| {
                    cpu::input_grad(dims, v.read(g)?, v.read(self.w.buf)?, v.write(gx)?);
                    Ok(())
                },
                |gpu| {
                    gpu.launch(
                        DENSE_INPUT_GRAD,
                        Grid::tiles(n, inp, TILE),
                        &[
                            gy.into(),
                            self.y.buf.into(),
                            self.w.buf.into(),
                            gx.into(),
                            Arg::U32(n as u32),
                            Arg::U32(inp as u32),
                            Arg::U32(out as u32),
                            Arg::U32s(&e),
                            cursor,
                        ],
                    )
                },
            )?;
            s.accumulate(&self.x, gx)?;
        }
        let bias = self.bias.filter(|b| b.requires_grad);
        if self.w.requires_grad || bias.is_some() {
            let gw = s.grad_buffer(&self.w, "dense weight grad")?;
            let gb = match bias {
                Some(b) => Some(s.grad_buffer(&b, "dense bias grad")?),
                None => None,
            };
            let cols = if gb.is_some() { inp + 1 } else { inp };
            let (chunks, rows) = weight_grad_chunks(n, out.div_ceil(TILE as usize) * cols.div_ceil(TILE as usize));
            let part = match s.sizing() {
                Sizing::Cuda(_) if chunks > 1 => {
                    Some(s.alloc::<f32>("dense weight-grad partial sums", Shape::new(&[chunks * out * cols]))?)
                }
                _ => None,
            };
            s.launch(
                &[
                    gy.into(),
                    g.into(),
                    self.y.buf.into(),
                    self.x.buf.into(),
                    gw.into(),
                    gb.unwrap_or_default().into(),
                    part.unwrap_or_default().into(),
                    epi.cursor_buf().into(),
                ],
                |v| {
                    let gb = match gb {
                        Some(gb) => Some(v.write(gb)?),
                        None => None,
                    };
                    cpu::weight_grad(dims, v.read(g)?, v.read(self.x.buf)?, v.write(gw)?, gb);
                    Ok(())
                },
                |gpu| {
                    let mut grid = Grid::tiles(out, cols, TILE);
                    grid.blocks.1 *= chunks as u32;
                    gpu.launch(
                        DENSE_WEIGHT_GRAD,
                        grid,
                        &[
                            gy.into(),
                            self.y.buf.into(),
                            self.x.buf.into(),
                            gw.into(),
                            gb.map_or(Arg::Null, Arg::from),
                            part.map_or(Arg::Null, Arg::from),
                            Arg::U32(n as u32),
                            Arg::U32(inp as u32),
                            Arg::U32(out as u32),
                            Arg::U32(rows as u32),
                            Arg::U32s(&e),
                            cursor,
                        ],
                    )?;
                    let Some(part) = part else { return Ok(()) };
                    gpu.launch(
                        DENSE_WEIGHT_GRAD_SUM,
                        Grid::over(out * cols),
                        &[
                            part.into(),
                            gw.into(),
                            gb.map_or(Arg::Null, Arg::from),
                            Arg::U32(inp as u32),
                            Arg::U32(out as u32),
                            Arg::U32(chunks as u32),
                        ],
                    )
                },
            )?;
            if self.w.requires_grad {
                s.accumulate(&self.w, gw)?;
            }
            if let (Some(b), Some(gb)) = (bias, gb) {
                s.accumulate(&b, gb)?;
            }
        }
        Ok(())
    }
}
