//! The data set resident in the arena's persistent region: pixels as bytes,
//! labels as bytes, uploaded once, gathered by index every step.

use super::ImageSet;
use super::Images;
use crate::memory::Buf;
use crate::tensor::{ByteImages, Persistent, Shape};
use crate::Result;

/// One split (training or test) in the persistent region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResidentSplit {
    /// The images, one byte a pixel value, gathered and normalised on the
    /// device each step.
    pub images: ByteImages,
    /// One label per image.
    pub labels: Buf<u8>,
}

impl ResidentSplit {
    /// Images in the split.
    pub fn len(&self) -> usize {
        self.images.count
    }

    /// Whether the split holds no image.
    pub fn is_empty(&self) -> bool {
        self.images.count == 0
    }

    fn upload(
        p: &mut Persistent<'_>,
        names: (&'static str, &'static str),
        images: &Images,
        labels: &[u8],
    ) -> Result<Self> {
        let image = Shape::new(&[images.channels, images.rows, images.cols]);
        let pixels = p.upload(
            names.0,
            Shape::new(&[images.count, images.channels, images.rows, images.cols]),
            &images.pixels,
        )?;
        let labels = p.upload(names.1, Shape::new(&[labels.len()]), labels)?;
        Ok(Self {
            images: ByteImages {
                pixels,
                count: images.count,
                image,
            },
            labels,
        })
    }
}

/// A data set in the persistent region.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ResidentSet {
    /// The training split.
    pub train: ResidentSplit,
    /// The test split.
    pub test: ResidentSplit,
    /// How many classes the labels name.
    pub classes: usize,
}

impl ImageSet {
    /// Copies both splits into the persistent region.
    pub fn upload(&self, p: &mut Persistent<'_>) -> Result<ResidentSet> {
        Ok(ResidentSet {
            train: ResidentSplit::upload(
                p,
                ("train images", "train labels"),
                &self.train_images,
                &self.train_labels,
            )?,
            test: ResidentSplit::upload(p, ("test images", "test labels"), &self.test_images, &self.test_labels)?,
            classes: self.classes,
        })
    }
}
