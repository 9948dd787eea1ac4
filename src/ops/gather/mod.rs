//! gather: the step's batch, picked by index from a data set resident in the
//! persistent region. Images are stored as bytes (a quarter of the memory of
//! floats) and normalised while they are gathered; labels widen to `u32`.

mod cpu;
#[cfg(test)]
mod tests;

use crate::autograd::Step;
use crate::backend::Backend;
use crate::memory::Buf;
use crate::tensor::{Labels, Shape, Tensor};
use crate::{Error, Result};

/// `pixel / 255`, then `(value - mean) / std`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Normalize {
    pub mean: f32,
    pub std: f32,
}

/// Images of one shape stored as bytes: `count` of `[channels, rows, cols]`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ByteImages {
    pub pixels: Buf<u8>,
    pub count: usize,
    pub image: Shape,
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
        let x = self.output("input batch", shape, &[])?;
        match self.backend() {
            Backend::Cpu(cpu) => {
                cpu.run(|v, _| cpu::images(v.read(set.pixels)?, set.count, indices, norm, v.write(x.buf())?))?
            }
            Backend::Dry { .. } => {}
        }
        Ok(x)
    }

    /// The labels at `indices`.
    pub fn gather_labels(&mut self, labels: Buf<u8>, indices: &[u32]) -> Result<Labels<'s>> {
        let out = self.alloc::<u32>("label batch", Shape::new(&[indices.len()]))?;
        match self.backend() {
            Backend::Cpu(cpu) => cpu.run(|v, _| cpu::labels(v.read(labels)?, indices, v.write(out)?))?,
            Backend::Dry { .. } => {}
        }
        Ok(self.labels_from(out))
    }
}
