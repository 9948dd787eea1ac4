//! concat_channels: parts `[N, Cᵢ, H, W]` of one `N`, `H`, `W` side by side
//! along the channel dimension, `[N, ΣCᵢ, H, W]` (PyTorch's `cat(dim=1)`).
//!
//! The tape's nodes are small and `Copy`, and the number of parts is not
//! bounded, so each part records a node of its own, naming where its
//! channels sit in the output; backward copies each part's slice of `dy`
//! into the part's gradient. One copy kernel per part in each direction.
//!
//! The kernels are NCHW's: a channels-last part ([`Layout::Nhwc`]) is
//! converted to NCHW as its turn comes (a recorded cast, whose backward
//! converts its gradient back), and the output is NCHW.

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{float_kernel, Arg, FloatKernel, Grid, KernelSource};
use crate::memory::DType;
use crate::ops::Step;
use crate::tensor::{Layout, Shape, Tensor, TensorRef};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "concat",
    source: include_str!("kernels.cu"),
    entries: &[
        CONCAT_FORWARD.f32,
        CONCAT_FORWARD.bf16,
        CONCAT_BACKWARD.f32,
        CONCAT_BACKWARD.bf16,
    ],
};
const CONCAT_FORWARD: FloatKernel = float_kernel!("concat_forward");
const CONCAT_BACKWARD: FloatKernel = float_kernel!("concat_backward");

/// Where one part's channels sit in the output: `channels` of them from
/// `first`, in an output of `total` channels and planes of `area` elements.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Slot {
    pub images: usize,
    pub channels: usize,
    pub first: usize,
    pub total: usize,
    pub area: usize,
}

impl Slot {
    fn args(&self) -> [Arg<'static>; 5] {
        [self.images, self.channels, self.first, self.total, self.area].map(|v| Arg::U32(v as u32))
    }

    fn len(&self) -> usize {
        self.images * self.channels * self.area
    }
}

/// One part of a concatenation, for backward.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    part: TensorRef,
    y: TensorRef,
    slot: Slot,
}

impl<'s> Tensor<'s> {
    /// `parts` concatenated along dimension 1 (channels), in order, as NCHW
    /// whatever their layouts.
    pub fn concat_channels(s: &mut Step<'s>, parts: &[Tensor<'s>]) -> Result<Tensor<'s>> {
        let bad = |detail: String| Err(Error::shape("concat_channels", detail));
        let Some(first) = parts.first() else {
            return bad("at least one part, got none".into());
        };
        let lead = first.shape();
        if lead.rank() != 4 {
            return bad(format!("parts [N, C, H, W], got {lead}"));
        }
        let mut total = 0;
        for (i, p) in parts.iter().enumerate() {
            let sh = p.shape();
            if sh.rank() != 4 || sh.dim(0) != lead.dim(0) || sh.dim(2) != lead.dim(2) || sh.dim(3) != lead.dim(3) {
                return bad(format!(
                    "every part [{}, C, {}, {}] like part 0, but part {i} is {sh}",
                    lead.dim(0),
                    lead.dim(2),
                    lead.dim(3)
                ));
            }
            total += sh.dim(1);
        }
        let (n, area) = (lead.dim(0), lead.dim(2) * lead.dim(3));
        let out = Shape::new(&[n, total, lead.dim(2), lead.dim(3)]);
        // The output wants a gradient when any part does: that part stands
        // for them all (no list on the heap in a training step).
        let wants = parts.iter().find(|p| p.requires_grad()).unwrap_or(first);
        // Parts of different types meet in fp32 (PyTorch's promotion), each
        // cast (and a channels-last one converted to NCHW) as its turn
        // comes: no list of cast parts either.
        let dtype = if parts.iter().all(|p| p.dtype() == first.dtype()) {
            first.dtype()
        } else {
            DType::F32
        };
        let y = s.output_as("concat output", out, dtype, Layout::Nchw, &[wants])?;
        let mut at = 0;
        for part in parts {
            // Of the output's type and layout (itself when it is both).
            let part = part.convert(s, dtype, Layout::Nchw)?;
            let slot = Slot {
                images: n,
                channels: part.shape().dim(1),
                first: at,
                total,
                area,
            };
            at += slot.channels;
            if slot.len() > 0 {
                s.launch(
                    &[part.buf().into(), y.buf().into()],
                    |v| {
                        cpu::forward(&slot, v.read(part.buf())?, v.write(y.buf())?);
                        Ok(())
                    },
                    |gpu| {
                        let [a, b, c, d, e] = slot.args();
                        gpu.launch(
                            CONCAT_FORWARD.of(y.dtype()),
                            Grid::over(slot.len()),
                            &[part.buf().into(), y.buf().into(), a, b, c, d, e],
                        )
                    },
                )?;
            }
            if y.requires_grad() && part.requires_grad() {
                s.record(Saved {
                    part: part.inner,
                    y: y.inner,
                    slot,
                });
            }
        }
        Ok(y)
    }
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        let slot = self.slot;
        let gx = s.grad_buffer(&self.part, "concat part grad")?;
        if slot.len() > 0 {
            s.launch(
                &[gy.into(), gx.into()],
                |v| {
                    cpu::backward(&slot, v.read(gy)?, v.write(gx)?);
                    Ok(())
                },
                |gpu| {
                    let [a, b, c, d, e] = slot.args();
                    gpu.launch(
                        CONCAT_BACKWARD.of(gx.dtype()),
                        Grid::over(slot.len()),
                        &[gy.into(), gx.into(), a, b, c, d, e],
                    )
                },
            )?;
        }
        s.accumulate(&self.part, gx)
    }
}
