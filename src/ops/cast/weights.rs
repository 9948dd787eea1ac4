//! A step's convolution weights in the step's compute type and layout, all
//! converted in one launch before forward.
//!
//! A mixed-precision or channels-last step reads each convolution's weight
//! through a copy (bf16, channels last), which `convert` would make where
//! the convolution runs: a small launch per weight, 20 of a ResNet-18
//! step's (53 of a ResNet-50's), each a few microseconds of a bf16 step of
//! 2.6 ms at batch 128. Made here, they take one launch per
//! [`SEGMENTS`] weights. Each copy then waits on the tape until `convert`
//! is asked for it (`Step::take_prepared`): its first use records the cast
//! for backward there, so a weight's gradient is cast back where and when
//! it was before. The copies hold the values `convert` makes, so the step
//! computes the same bits.

use super::{convert, copy_name, mode};
use crate::backend::cuda::{Arg, Grid};
use crate::backend::{BackendError, Sizing};
use crate::memory::{DType, FloatBuf, Touch};
use crate::ops::Step;
use crate::tensor::{Layout, Param, TensorRef};
use crate::Result;

/// The kernels, by destination type (fp32, bf16).
pub(super) const CONVERT_WEIGHTS: [&str; 2] = ["convert_weights_f32", "convert_weights_bf16"];
/// Weights one launch converts: kernels.cu's `WEIGHT_SEGMENTS`.
const SEGMENTS: usize = 32;
/// Words of a weight in the launch's table: `SEGMENT_WORDS`.
const WORDS: usize = 7;
/// Values a block converts: `WEIGHT_RUN`.
const RUN: usize = 2048;

impl<'s> Step<'s> {
    /// Converts the 4-D tensors among `weights` (a model's convolution
    /// weights, fp32 NCHW as parameters are) to `dtype` in `layout`, in
    /// one launch per 32, ahead of the convolutions that read them: a
    /// convolution's `convert` of its weight then takes the copy made
    /// here rather than launching its own, with the same values and the
    /// same gradient. Nothing to do for fp32 NCHW; a weight no op reads
    /// costs its copy's bytes.
    pub fn convert_weights(&mut self, weights: &[Param], dtype: DType, layout: Layout) -> Result<()> {
        if dtype == DType::F32 && layout == Layout::Nchw {
            return Ok(());
        }
        for group in weights.chunks(SEGMENTS) {
            let mut pairs = [None; SEGMENTS];
            let mut n = 0;
            for w in group.iter().filter(|w| w.shape().rank() == 4) {
                let x = self.param(w);
                let what = copy_name((x.dtype(), x.layout()), (dtype, layout));
                let y = self.output_as(what, w.shape(), dtype, layout, &[&x])?;
                self.prepare(&x.inner, &y.inner);
                pairs[n] = Some((x.inner, y.inner));
                n += 1;
            }
            convert_all(self, &pairs[..n], layout)?;
        }
        Ok(())
    }
}

/// Each pair's source (fp32 NCHW) into its copy: one launch on a GPU (and
/// in a step planned for one); one each on the CPU, whose views of a
/// kernel's buffers are few and whose launches cost nothing to speak of.
fn convert_all(s: &mut Step<'_>, pairs: &[Option<(TensorRef, TensorRef)>], layout: Layout) -> Result<()> {
    if pairs.is_empty() {
        return Ok(());
    }
    if let Sizing::Cpu { .. } = s.sizing() {
        for (x, y) in pairs.iter().flatten() {
            convert(s, x.shape, (x.buf, x.layout), (y.buf, y.layout))?;
        }
        return Ok(());
    }
    let mut touches = [Touch { offset: 0, bytes: 0 }; 2 * SEGMENTS];
    for (k, (x, y)) in pairs.iter().flatten().enumerate() {
        touches[2 * k] = x.buf.into();
        touches[2 * k + 1] = y.buf.into();
    }
    s.launch(
        &touches[..2 * pairs.len()],
        |_| Err(BackendError::Internal("the CPU converts weights one by one")),
        |gpu| {
            let internal = BackendError::Internal;
            let word = |v: usize| u32::try_from(v).map_err(|_| internal("weights too large to convert in one launch"));
            // The kernel reads every source from the lowest one's address
            // and writes every copy from the lowest copy's: the two spans
            // are passed as buffers (each inside the arena, as `address`
            // checks), the offsets in the table.
            let span = |bufs: &mut dyn Iterator<Item = FloatBuf>| {
                let (mut lo, mut hi) = (usize::MAX, 0);
                for b in bufs {
                    lo = lo.min(b.offset());
                    hi = hi.max(b.offset() + b.bytes());
                }
                (lo, hi - lo)
            };
            let src = span(&mut pairs.iter().flatten().map(|(x, _)| x.buf));
            let dst = span(&mut pairs.iter().flatten().map(|(_, y)| y.buf));
            let mut table = [0u32; WORDS * SEGMENTS];
            let mut end = 0usize;
            // Every copy of one call is of the step's compute type.
            let dtype = pairs
                .iter()
                .flatten()
                .map(|(_, y)| y.buf.dtype())
                .next()
                .unwrap_or(DType::F32);
            for (k, (x, y)) in pairs.iter().flatten().enumerate() {
                // Buffers start on 256-byte boundaries: whole values apart.
                let from = ((x.buf.offset() - src.0) / x.buf.dtype().size()) as u64;
                let to = ((y.buf.offset() - dst.0) / dtype.size()) as u64;
                end += x.shape.numel();
                let (c, hw) = (x.shape.dim(1), x.shape.dim(2) * x.shape.dim(3));
                table[WORDS * k..WORDS * (k + 1)].copy_from_slice(&[
                    from as u32,
                    (from >> 32) as u32,
                    to as u32,
                    (to >> 32) as u32,
                    word(c)?,
                    word(hw)?,
                    word(end)?,
                ]);
            }
            let entry = match dtype {
                DType::F32 => CONVERT_WEIGHTS[0],
                DType::Bf16 => CONVERT_WEIGHTS[1],
            };
            gpu.launch(
                entry,
                Grid::blocks(end.div_ceil(RUN), 256),
                &[
                    Arg::Buf {
                        offset: src.0,
                        bytes: src.1,
                    },
                    Arg::Buf {
                        offset: dst.0,
                        bytes: dst.1,
                    },
                    Arg::U32s(&table),
                    Arg::U32(pairs.len() as u32),
                    Arg::U32(mode(Layout::Nchw, layout)),
                ],
            )
        },
    )?;
    Ok(())
}
