//! gather: the step's batch, picked by index from a data set resident in the
//! persistent region. Images are stored as bytes (a quarter of the memory of
//! floats) and normalised while they are gathered; labels widen to `u32`.

mod cpu;
#[cfg(test)]
mod tests;

use crate::autograd::Step;
use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::backend::{Backend, BackendError};
use crate::memory::Buf;
use crate::ops::cursor::StepCursor;
pub use crate::tensor::ByteImages;
use crate::tensor::{Labels, Shape, Tensor};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "gather",
    source: include_str!("kernels.cu"),
    entries: &[GATHER_IMAGES, GATHER_LABELS, GATHER_BATCH],
};
const GATHER_IMAGES: &str = "gather_images";
const GATHER_LABELS: &str = "gather_labels";
const GATHER_BATCH: &str = "gather_batch";

/// `pixel / 255`, then `(value - mean) / std`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    pub mean: f32,
    pub std: f32,
}

/// The batch a training step reads: `len` examples of an epoch's shuffled
/// `order` (in the persistent region), starting `offset` past the step
/// cursor's step times `stride`. Read on the device, so a replayed step
/// graph gathers the next batch without the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchAt {
    pub order: Buf<u32>,
    pub cursor: StepCursor,
    /// Examples per step (the configured batch size).
    pub stride: usize,
    /// Examples in this step (the last step of an epoch may have fewer).
    pub len: usize,
    /// Examples of the step skipped before this batch: a data-parallel
    /// rank's shard starts past the shards of the ranks before it.
    pub offset: usize,
}

impl<'s> Step<'s> {
    /// The images at `indices`, normalised, as `[B, channels, rows, cols]`.
    pub fn gather_images(&mut self, set: &ByteImages, indices: &[u32], norm: Normalize) -> Result<Tensor<'s>> {
        if set.image.rank() != 3 || set.pixels.len() != set.count * set.image.numel() {
            return Err(Error::shape(
                "gather_images",
                format!("{} bytes for {} images of {}", set.pixels.len(), set.count, set.image),
            ));
        }
        let d = set.image.dims();
        let shape = Shape::new(&[indices.len(), d[0], d[1], d[2]]);
        check_indices(indices, set.count)?;
        let x = self.output("input batch", shape, &[])?;
        let on_device = self.device_indices(indices)?;
        match self.uses(&[set.pixels.into(), x.buf().into(), on_device.unwrap_or_default().into()]) {
            Backend::Cpu(cpu) => {
                cpu.run(|v, _| cpu::images(v.read(set.pixels)?, set.count, indices, norm, v.write(x.buf())?))?
            }
            Backend::Cuda(gpu) => {
                let size = set.image.numel();
                let (scale, shift) = norm.scale_shift();
                gpu.launch(
                    GATHER_IMAGES,
                    Grid::over(indices.len() * size),
                    &[
                        set.pixels.into(),
                        on_device.ok_or(NOT_COPIED)?.into(),
                        x.buf().into(),
                        Arg::U32(indices.len() as u32),
                        Arg::U32(size as u32),
                        Arg::F32(scale),
                        Arg::F32(shift),
                    ],
                )?
            }
            Backend::Dry(_) => {}
        }
        Ok(x)
    }

    /// The labels at `indices`.
    pub fn gather_labels(&mut self, labels: Buf<u8>, indices: &[u32]) -> Result<Labels<'s>> {
        check_indices(indices, labels.len())?;
        let out = self.alloc::<u32>("label batch", Shape::new(&[indices.len()]))?;
        let on_device = self.device_indices(indices)?;
        match self.uses(&[labels.into(), out.into(), on_device.unwrap_or_default().into()]) {
            Backend::Cpu(cpu) => cpu.run(|v, _| cpu::labels(v.read(labels)?, indices, v.write(out)?))?,
            Backend::Cuda(gpu) => gpu.launch(
                GATHER_LABELS,
                Grid::over(indices.len()),
                &[
                    labels.into(),
                    on_device.ok_or(NOT_COPIED)?.into(),
                    out.into(),
                    Arg::U32(indices.len() as u32),
                ],
            )?,
            Backend::Dry(_) => {}
        }
        Ok(self.labels_from(out))
    }

    /// The images and labels of the batch `at` points to, in one kernel.
    pub fn gather_batch(
        &mut self,
        set: &ByteImages,
        labels: Buf<u8>,
        at: BatchAt,
        norm: Normalize,
    ) -> Result<(Tensor<'s>, Labels<'s>)> {
        if set.image.rank() != 3 || set.pixels.len() != set.count * set.image.numel() || labels.len() != set.count {
            return Err(Error::shape(
                "gather_batch",
                format!(
                    "{} bytes and {} labels for {} images of {}",
                    set.pixels.len(),
                    labels.len(),
                    set.count,
                    set.image
                ),
            ));
        }
        if at.len == 0 || at.offset + at.len > at.stride {
            return Err(Error::shape(
                "gather_batch",
                format!(
                    "1 to {} examples per step, got {} starting at {}",
                    at.stride, at.len, at.offset
                ),
            ));
        }
        let d = set.image.dims();
        let x = self.output("input batch", Shape::new(&[at.len, d[0], d[1], d[2]]), &[])?;
        let out = self.alloc::<u32>("label batch", Shape::new(&[at.len]))?;
        let size = set.image.numel();
        match self.uses(&[
            set.pixels.into(),
            labels.into(),
            at.order.into(),
            at.cursor.buf.into(),
            x.buf().into(),
            out.into(),
        ]) {
            Backend::Cpu(cpu) => cpu.run(|v, _| {
                let cursor = v.read(at.cursor.buf)?;
                let start = cursor[0] as usize * at.stride + at.offset;
                let order = v.read(at.order)?;
                let indices = order.get(start..start + at.len).ok_or(BackendError::Index {
                    index: (start + at.len) as u32,
                    count: order.len(),
                })?;
                cpu::images(v.read(set.pixels)?, set.count, indices, norm, v.write(x.buf())?)?;
                cpu::labels(v.read(labels)?, indices, v.write(out)?)
            })?,
            Backend::Cuda(gpu) => {
                let (scale, shift) = norm.scale_shift();
                let dims = [
                    at.len as u32,
                    size as u32,
                    at.stride as u32,
                    set.count as u32,
                    at.order.len() as u32,
                    at.offset as u32,
                ];
                gpu.launch(
                    GATHER_BATCH,
                    Grid::over(at.len * size),
                    &[
                        set.pixels.into(),
                        labels.into(),
                        at.order.into(),
                        at.cursor.buf.into(),
                        x.buf().into(),
                        out.into(),
                        Arg::U32s(&dims),
                        Arg::F32(scale),
                        Arg::F32(shift),
                    ],
                )?
            }
            Backend::Dry(_) => {}
        }
        Ok((x, self.labels_from(out)))
    }

    /// The batch's indices where the kernels read them: a GPU gets a copy in
    /// the step region; the CPU reads the host slice and needs none.
    fn device_indices(&mut self, indices: &[u32]) -> Result<Option<Buf<u32>>> {
        if !matches!(self.backend().sizing(), crate::backend::Sizing::Cuda(_)) {
            return Ok(None);
        }
        let buf = self.alloc::<u32>("batch indices", Shape::new(&[indices.len()]))?;
        self.uses(&[buf.into()]).upload(buf, indices)?;
        Ok(Some(buf))
    }
}

const NOT_COPIED: BackendError = BackendError::Internal("the batch's indices were not copied to the GPU");

/// Every index must name an example: a GPU kernel could not report one
/// that does not, so all backends check on the host first.
fn check_indices(indices: &[u32], count: usize) -> Result<()> {
    match indices.iter().find(|&&i| i as usize >= count) {
        Some(&index) => Err(BackendError::Index { index, count }.into()),
        None => Ok(()),
    }
}

impl Normalize {
    /// `(pixel / 255 - mean) / std` as `pixel * scale - shift`.
    pub(crate) fn scale_shift(&self) -> (f32, f32) {
        (1.0 / (255.0 * self.std), self.mean / self.std)
    }
}
