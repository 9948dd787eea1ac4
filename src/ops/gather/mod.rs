//! gather: the step's batch, picked by index from a data set resident in the
//! persistent region. Images are stored as bytes (a quarter of the memory of
//! floats) and normalised while they are gathered, each channel with its own
//! statistics; labels widen to `u32`.
//!
//! A training batch may be augmented on the way ([`Augment`]): a random crop
//! of the image padded with `crop` zero pixels on every side, then a
//! horizontal flip with probability 1/2, as torchvision's
//! `RandomCrop(size, padding=crop)` then `RandomHorizontalFlip()` before
//! `ToTensor()`/`Normalize()` (so padding is pixel 0, normalised like any
//! other). Invariants: the choices of image `j` of a step are a pure
//! function of `(step_seed(base, global step), j)` ([`Augment::draw`]), with
//! the step read from the cursor on the device, so a replayed CUDA graph
//! draws fresh choices every step and the CPU draws exactly the GPU's;
//! `j` counts from the start of the step's whole batch, so data-parallel
//! ranks together augment exactly as one device would. Without
//! augmentation the arithmetic is `pixel * scale[c] - shift[c]`, unchanged.

mod cpu;
#[cfg(test)]
mod tests;

use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::backend::BackendError;
use crate::memory::Buf;
use crate::ops::cursor::{step_seed, StepCursor};
use crate::ops::Step;
pub use crate::tensor::ByteImages;
use crate::tensor::{Labels, Shape, Tensor};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "gather",
    source: include_str!("kernels.cu"),
    entries: &[GATHER_IMAGES, GATHER_LABELS, GATHER_BATCH, GATHER_BATCH_QUADS],
};
const GATHER_IMAGES: &str = "gather_images";
const GATHER_LABELS: &str = "gather_labels";
const GATHER_BATCH: &str = "gather_batch";
const GATHER_BATCH_QUADS: &str = "gather_batch_quads";

/// The most channels an image may have: the kernels take one scale and
/// shift per channel by value.
pub const MAX_CHANNELS: usize = 4;

/// `pixel / 255`, then `(value - mean[c]) / std[c]` for a pixel of channel `c`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    mean: [f32; MAX_CHANNELS],
    std: [f32; MAX_CHANNELS],
    /// `None`: the same statistics for every channel.
    channels: Option<usize>,
}

/// The random changes made to each training image as it is gathered:
/// `crop`: pad with this many zero pixels on every side and crop a window
/// of the image's size at a random offset (0: no crop); `flip`: mirror
/// left-right with probability 1/2. Written (and parsed) as `none`,
/// `crop4`, `flip` or `crop4,flip`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Augment {
    /// Zero pixels padded on every side before a random crop of the image's
    /// size; 0: no crop.
    pub crop: usize,
    /// Mirror left-right with probability 1/2.
    pub flip: bool,
}

/// The batch a training step reads: `len` examples of an epoch's shuffled
/// `order` (in the persistent region), starting `offset` past the step
/// cursor's step times `stride`. Read on the device, so a replayed step
/// graph gathers the next batch without the host.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchAt {
    /// The epoch's shuffled order of example indices.
    pub order: Buf<u32>,
    /// Where the step is read.
    pub cursor: StepCursor,
    /// Examples per step (the configured batch size).
    pub stride: usize,
    /// Examples in this step (the last step of an epoch may have fewer).
    pub len: usize,
    /// Examples of the step skipped before this batch: a data-parallel
    /// rank's shard starts past the shards of the ranks before it.
    pub offset: usize,
    /// The step's place in its epoch, as the host counts: what a task
    /// whose batches are built on the host (trees) reads instead of the
    /// cursor. Never read by a kernel, so a captured graph does not see it.
    pub step: usize,
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
        norm.check("gather_images", set.image)?;
        let d = set.image.dims();
        let plane = d[1] * d[2];
        let shape = Shape::new(&[indices.len(), d[0], d[1], d[2]]);
        check_indices(indices, set.count)?;
        let x = self.output("input batch", shape, &[])?;
        let on_device = self.device_indices(indices)?;
        self.launch(
            &[set.pixels.into(), x.buf().into(), on_device.unwrap_or_default().into()],
            |v| cpu::images(v.read(set.pixels)?, set.count, indices, plane, norm, v.write(x.buf())?),
            |gpu| {
                let size = set.image.numel();
                gpu.launch(
                    GATHER_IMAGES,
                    Grid::over(indices.len() * size),
                    &[
                        set.pixels.into(),
                        on_device.ok_or(NOT_COPIED)?.into(),
                        x.buf().into(),
                        Arg::U32(indices.len() as u32),
                        Arg::U32(size as u32),
                        Arg::U32(plane as u32),
                        Arg::U32s(&norm.table()),
                    ],
                )
            },
        )?;
        Ok(x)
    }

    /// The labels at `indices`.
    pub fn gather_labels(&mut self, labels: Buf<u8>, indices: &[u32]) -> Result<Labels<'s>> {
        check_indices(indices, labels.len())?;
        let out = self.alloc::<u32>("label batch", Shape::new(&[indices.len()]))?;
        let on_device = self.device_indices(indices)?;
        self.launch(
            &[labels.into(), out.into(), on_device.unwrap_or_default().into()],
            |v| cpu::labels(v.read(labels)?, indices, v.write(out)?),
            |gpu| {
                gpu.launch(
                    GATHER_LABELS,
                    Grid::over(indices.len()),
                    &[
                        labels.into(),
                        on_device.ok_or(NOT_COPIED)?.into(),
                        out.into(),
                        Arg::U32(indices.len() as u32),
                    ],
                )
            },
        )?;
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
        self.gather_batch_augmented(set, labels, at, norm, Augment::NONE, 0)
    }

    /// [`Step::gather_batch`], each image changed as `augment` says with
    /// choices drawn from `step_seed(base, global step)` (the step read from
    /// `at.cursor` where the kernel runs) and the image's place in the
    /// step's whole batch (`at.offset` + its place in this one).
    pub fn gather_batch_augmented(
        &mut self,
        set: &ByteImages,
        labels: Buf<u8>,
        at: BatchAt,
        norm: Normalize,
        augment: Augment,
        base: u64,
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
        norm.check("gather_batch", set.image)?;
        let d = set.image.dims();
        let dims = [d[0], d[1], d[2]];
        if augment.crop > d[1].min(d[2]) {
            return Err(Error::shape(
                "gather_batch",
                format!(
                    "a crop padding of at most the image's side ({}), got {} for images of {}",
                    d[1].min(d[2]),
                    augment.crop,
                    set.image
                ),
            ));
        }
        let x = self.output("input batch", Shape::new(&[at.len, d[0], d[1], d[2]]), &[])?;
        let out = self.alloc::<u32>("label batch", Shape::new(&[at.len]))?;
        let size = set.image.numel();
        self.launch(
            &[
                set.pixels.into(),
                labels.into(),
                at.order.into(),
                at.cursor.buf.into(),
                x.buf().into(),
                out.into(),
            ],
            |v| {
                let cursor = v.read(at.cursor.buf)?;
                let start = cursor[0] as usize * at.stride + at.offset;
                let order = v.read(at.order)?;
                let indices = order.get(start..start + at.len).ok_or(BackendError::Index {
                    index: (start + at.len) as u32,
                    count: order.len(),
                })?;
                if augment.is_none() {
                    cpu::images(
                        v.read(set.pixels)?,
                        set.count,
                        indices,
                        d[1] * d[2],
                        norm,
                        v.write(x.buf())?,
                    )?;
                } else {
                    let seed = step_seed(base, StepCursor::global_step(cursor));
                    let draws = Draws {
                        augment,
                        seed,
                        first: at.offset as u64,
                    };
                    cpu::augmented(
                        v.read(set.pixels)?,
                        set.count,
                        indices,
                        dims,
                        norm,
                        draws,
                        v.write(x.buf())?,
                    )?;
                }
                cpu::labels(v.read(labels)?, indices, v.write(out)?)
            },
            |gpu| {
                let dims = [
                    at.len as u32,
                    size as u32,
                    at.stride as u32,
                    set.count as u32,
                    at.order.len() as u32,
                    at.offset as u32,
                    d[1] as u32,
                    d[2] as u32,
                    augment.crop as u32,
                    u32::from(augment.flip),
                ];
                let args = [
                    set.pixels.into(),
                    labels.into(),
                    at.order.into(),
                    at.cursor.buf.into(),
                    x.buf().into(),
                    out.into(),
                    Arg::U32s(&dims),
                    Arg::U32s(&norm.table()),
                    Arg::U64(base),
                ];
                // Four pixels a thread where no pixel moves and a float4
                // never spans two planes (every plane a multiple of four);
                // it draws nothing, so it takes all but the draws' base.
                if augment.is_none() && (d[1] * d[2]).is_multiple_of(4) {
                    gpu.launch(GATHER_BATCH_QUADS, Grid::over(at.len * size / 4), &args[..8])
                } else {
                    gpu.launch(GATHER_BATCH, Grid::over(at.len * size), &args)
                }
            },
        )?;
        Ok((x, self.labels_from(out)))
    }

    /// The batch's indices where the kernels read them: a GPU gets a copy in
    /// the step region; the CPU reads the host slice and needs none.
    fn device_indices(&mut self, indices: &[u32]) -> Result<Option<Buf<u32>>> {
        if !matches!(self.sizing(), crate::backend::Sizing::Cuda(_)) {
            return Ok(None);
        }
        let buf = self.alloc::<u32>("batch indices", Shape::new(&[indices.len()]))?;
        self.copy_in(buf, indices)?;
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
    /// The same mean and standard deviation for every channel.
    pub fn new(mean: f32, std: f32) -> Self {
        Self {
            mean: [mean; MAX_CHANNELS],
            std: [std; MAX_CHANNELS],
            channels: None,
        }
    }

    /// One `(mean, std)` per channel, 1 to [`MAX_CHANNELS`] of them.
    pub fn per_channel(stats: &[(f32, f32)]) -> Result<Self> {
        if stats.is_empty() || stats.len() > MAX_CHANNELS {
            return Err(Error::shape(
                "normalize",
                format!("1 to {MAX_CHANNELS} channels' statistics, got {}", stats.len()),
            ));
        }
        let mut norm = Self::new(0.0, 1.0);
        for (c, &(mean, std)) in stats.iter().enumerate() {
            norm.mean[c] = mean;
            norm.std[c] = std;
        }
        norm.channels = Some(stats.len());
        Ok(norm)
    }

    /// The channels it has statistics for; `None`: any number, all alike.
    pub fn channels(&self) -> Option<usize> {
        self.channels
    }

    /// `(pixel / 255 - mean) / std` as `pixel * scale - shift`, for channel `c`.
    pub(crate) fn scale_shift(&self, c: usize) -> (f32, f32) {
        let c = c.min(MAX_CHANNELS - 1);
        (1.0 / (255.0 * self.std[c]), self.mean[c] / self.std[c])
    }

    /// Every channel's `(scale, shift)`.
    fn scale_shifts(&self) -> [(f32, f32); MAX_CHANNELS] {
        std::array::from_fn(|c| self.scale_shift(c))
    }

    /// The kernels' `GatherNorm`: the scales, then the shifts, as bits.
    fn table(&self) -> [u32; 2 * MAX_CHANNELS] {
        let pairs = self.scale_shifts();
        std::array::from_fn(|i| match i.checked_sub(MAX_CHANNELS) {
            None => pairs[i].0.to_bits(),
            Some(c) => pairs[c].1.to_bits(),
        })
    }

    /// Images of `image` (`[channels, rows, cols]`) can be normalised with it.
    fn check(&self, op: &'static str, image: Shape) -> Result<()> {
        let channels = image.dims()[0];
        if channels > MAX_CHANNELS || self.channels.is_some_and(|n| n != channels) {
            return Err(Error::shape(
                op,
                format!(
                    "statistics for each of the {channels} channels of images of {image} (at most {MAX_CHANNELS}), got them for {}",
                    self.channels.map_or("every channel".into(), |n| format!("{n}"))
                ),
            ));
        }
        Ok(())
    }
}

/// What an augmented gather draws from: the step's seed, and the place of
/// the batch's first image in the step's whole batch.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Draws {
    pub augment: Augment,
    pub seed: u64,
    pub first: u64,
}

impl Augment {
    /// No augmentation.
    pub const NONE: Self = Self { crop: 0, flip: false };

    /// Changes nothing.
    pub fn is_none(&self) -> bool {
        *self == Self::NONE
    }

    /// Image `image`'s choices for a step of seed `seed`: the crop window's
    /// top-left corner `(dy, dx)` in the padded image (each in
    /// `0..=2 * crop`), and whether it is mirrored. The SplitMix64
    /// finaliser of the seed and the image, as the CUDA kernel computes it.
    pub fn draw(&self, seed: u64, image: u64) -> (usize, usize, bool) {
        let mut z = seed ^ image.wrapping_mul(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        // 32-bit remainders, as the kernel takes them (span < 2^16).
        let span = 2 * self.crop as u32 + 1;
        let dy = (z & 0xffff) as u32 % span;
        let dx = ((z >> 16) & 0xffff) as u32 % span;
        (dy as usize, dx as usize, self.flip && z >> 63 == 1)
    }
}

impl std::fmt::Display for Augment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.crop, self.flip) {
            (0, false) => f.write_str("none"),
            (0, true) => f.write_str("flip"),
            (n, false) => write!(f, "crop{n}"),
            (n, true) => write!(f, "crop{n},flip"),
        }
    }
}

impl std::str::FromStr for Augment {
    type Err = String;

    /// `none`, or a comma-separated list of `crop<N>` (N from 1 to 255)
    /// and `flip`, each at most once.
    fn from_str(text: &str) -> std::result::Result<Self, String> {
        const EXPECTED: &str = "expected none, crop4, flip or crop4,flip";
        if text == "none" {
            return Ok(Self::NONE);
        }
        let mut augment = Self::NONE;
        for part in text.split(',') {
            if part == "flip" && !augment.flip {
                augment.flip = true;
            } else if let Some(n) = part.strip_prefix("crop").filter(|_| augment.crop == 0) {
                augment.crop = match n.parse::<usize>() {
                    Ok(n @ 1..=255) => n,
                    _ => {
                        return Err(format!(
                            "`{part}`: the crop padding must be a whole number from 1 to 255"
                        ))
                    }
                };
            } else {
                return Err(format!("`{text}` is not an augmentation: {EXPECTED}"));
            }
        }
        Ok(augment)
    }
}
