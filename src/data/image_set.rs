//! An image-classification data set on the host, whatever file format it
//! came from: both splits, their labels, the classes and the pixel
//! statistics to normalise with.

use super::idx::Images;
use super::DataError;
use std::path::Path;

/// A validated data set in host memory: every image of a split has its
/// label, and every label is below `classes`.
#[derive(Debug, Clone)]
pub struct ImageSet {
    /// What it is, for people ("MNIST").
    pub name: &'static str,
    pub train_images: Images,
    pub train_labels: Vec<u8>,
    pub test_images: Images,
    pub test_labels: Vec<u8>,
    pub classes: usize,
    /// Mean and standard deviation of its pixels scaled to [0, 1].
    pub normalize: (f32, f32),
}

impl ImageSet {
    /// Reads the data set in `dir`, recognising its format by the files
    /// present (today: MNIST's four IDX files).
    pub fn load(dir: &Path) -> Result<Self, DataError> {
        super::mnist::load(dir)
    }

    /// Keeps only the first `n` training images and labels.
    /// `n` must be between 1 and the current training-set size.
    pub fn limit_train(&mut self, n: usize) -> Result<(), DataError> {
        let available = self.train_images.count;
        if n == 0 || n > available {
            return Err(DataError::TrainLimit {
                requested: n,
                available,
            });
        }
        keep_first(&mut self.train_images, &mut self.train_labels, n);
        Ok(())
    }

    /// Keeps only the first `n` test images and labels.
    pub fn limit_test(&mut self, n: usize) -> Result<(), DataError> {
        let available = self.test_images.count;
        if n == 0 || n > available {
            return Err(DataError::TestLimit {
                requested: n,
                available,
            });
        }
        keep_first(&mut self.test_images, &mut self.test_labels, n);
        Ok(())
    }
}

fn keep_first(images: &mut Images, labels: &mut Vec<u8>, n: usize) {
    let image_len = images.image_len();
    images.count = n;
    images.pixels.truncate(n * image_len);
    labels.truncate(n);
}
