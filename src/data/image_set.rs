//! An image-classification data set on the host, whatever file format it
//! came from: both splits, their labels, the classes and the pixel
//! statistics to normalise with.

use super::idx::Images;
use super::DataError;
use crate::tensor::Shape;
use std::path::{Path, PathBuf};

/// A validated data set in host memory: every image of a split has its
/// label, every label is below `classes`, and there is one class name per
/// class. It owns everything it says about itself, so a set read at run
/// time (an image folder) is no different from a built-in one.
#[derive(Debug, Clone)]
pub struct ImageSet {
    /// What it is, for people ("MNIST", "synthetic CIFAR-10", "image
    /// folder data/pets").
    pub name: String,
    /// Random pixels and labels: its accuracy means nothing.
    pub synthetic: bool,
    /// The training images.
    pub train_images: Images,
    /// Their labels, one per image, each below `classes`.
    pub train_labels: Vec<u8>,
    /// The test (validation) images.
    pub test_images: Images,
    /// Their labels.
    pub test_labels: Vec<u8>,
    /// How many classes the labels name.
    pub classes: usize,
    /// The classes' names in label order: `classes` of them ("0" to "9"
    /// for MNIST; an image folder's subfolder names, sorted).
    pub class_names: Vec<String>,
    /// Mean and standard deviation of its pixels scaled to [0, 1], one
    /// pair per channel.
    pub normalize: Vec<(f32, f32)>,
    /// What reading it found that a person should be told, a line each
    /// (how its validation images were chosen, the statistics computed);
    /// empty for the built-in sets.
    pub notes: Vec<String>,
}

impl ImageSet {
    /// Reads the data set in `dir`, recognising its format by the files
    /// present: CIFAR-10's batch files if any is there, else MNIST's four
    /// IDX files, else an image folder (one subfolder per class). A
    /// directory that does not exist is reported as MNIST's first missing
    /// file, as before CIFAR-10 was known; an empty one as empty; text (a
    /// file, a treebank) is refused as not images.
    pub fn load(dir: &Path) -> Result<Self, DataError> {
        Self::load_with(dir, &ImageOptions::default())
    }

    /// [`ImageSet::load`], an image folder read as `options` say; other
    /// options than the defaults are refused for the other formats.
    pub fn load_with(dir: &Path, options: &ImageOptions) -> Result<Self, DataError> {
        let holds = super::DataKind::of_path(dir);
        if holds != super::DataKind::Images {
            let path = dir.to_path_buf();
            return Err(DataError::NotImages { path, holds });
        }
        if Self::is_folder(dir) {
            return super::folder::load(dir, options);
        }
        let set = if super::cifar::present(dir) {
            super::cifar::load(dir)?
        } else if !dir.is_dir() || super::mnist::present(dir) {
            super::mnist::load(dir)?
        } else if std::fs::read_dir(dir).is_ok_and(|mut entries| entries.next().is_none()) {
            return Err(DataError::EmptyDir { dir: dir.to_path_buf() });
        } else {
            return Err(DataError::UnknownFormat { dir: dir.to_path_buf() });
        };
        refuse_options(set, dir, options)
    }

    /// Whether `dir` is read as an image folder: a directory with
    /// subfolders and neither CIFAR-10's nor MNIST's files.
    pub fn is_folder(dir: &Path) -> bool {
        dir.is_dir() && !super::cifar::present(dir) && !super::mnist::present(dir) && super::folder::present(dir)
    }

    /// The data set `source` names: read from its directory, or made up.
    pub fn open(source: &DataSource) -> Result<Self, DataError> {
        Self::open_with(source, &ImageOptions::default())
    }

    /// [`ImageSet::open`], an image folder read as `options` say.
    pub fn open_with(source: &DataSource, options: &ImageOptions) -> Result<Self, DataError> {
        match source {
            DataSource::Dir(dir) => Self::load_with(dir, options),
            DataSource::Synthetic { train, test } => {
                let set = super::cifar::synthetic(*train, *test, SYNTHETIC_SEED)?;
                refuse_options(set, Path::new(&source.to_string()), options)
            }
        }
    }

    /// One example's shape: `[channels, rows, cols]`.
    pub fn example(&self) -> Shape {
        let i = &self.train_images;
        Shape::new(&[i.channels, i.rows, i.cols])
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

/// `set`, unless `options` ask for what only an image folder does.
fn refuse_options(set: ImageSet, dir: &Path, options: &ImageOptions) -> Result<ImageSet, DataError> {
    let same_channels = options.channels.is_none_or(|c| c == set.train_images.channels);
    if options.size.is_some() || options.val_split.is_some() || !same_channels {
        return Err(DataError::NotAFolder {
            dir: dir.to_path_buf(),
            name: set.name,
        });
    }
    Ok(set)
}

fn keep_first(images: &mut Images, labels: &mut Vec<u8>, n: usize) {
    let image_len = images.image_len();
    images.count = n;
    images.pixels.truncate(n * image_len);
    labels.truncate(n);
}

/// The largest side an image may be resized to.
pub const MAX_SIDE: usize = 8192;

/// How to read a set of images: only an image folder (`folder.rs`) takes
/// other than the defaults, which read the images at their own size, with
/// an image folder's `val/` as the validation set if there is one.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ImageOptions {
    /// Resize every image to this size; `None`: the images' own size, the
    /// same for all.
    pub size: Option<ImageSize>,
    /// Without `val/`: the fraction of each class's images held out for
    /// validation, in (0, 1); `None`: no validation set.
    pub val_split: Option<f64>,
    /// Read the images with this many channels (1 or 3) rather than the
    /// training images' own: what a model trained elsewhere reads.
    #[serde(default)]
    pub channels: Option<usize>,
}

impl ImageOptions {
    /// Whether any option differs from reading the folder as it is.
    pub fn is_default(&self) -> bool {
        *self == Self::default()
    }
}

/// An image's height and width in pixels, written `HxW` (`32x32`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ImageSize {
    /// Height, in pixels.
    pub rows: usize,
    /// Width, in pixels.
    pub cols: usize,
}

impl std::str::FromStr for ImageSize {
    type Err = DataError;

    fn from_str(text: &str) -> Result<Self, DataError> {
        let bad = |why: &str| DataError::BadImageSize {
            given: text.to_string(),
            why: why.to_string(),
        };
        let (rows, cols) = text
            .split_once(['x', 'X'])
            .ok_or_else(|| bad("expected HEIGHTxWIDTH in pixels, such as 32x32"))?;
        let side = |s: &str| match s.trim().parse::<usize>() {
            Ok(n) if (1..=MAX_SIDE).contains(&n) => Ok(n),
            _ => Err(bad(&format!(
                "the height and the width must be whole numbers from 1 to {MAX_SIDE}, such as 32x32"
            ))),
        };
        Ok(Self {
            rows: side(rows)?,
            cols: side(cols)?,
        })
    }
}

impl std::fmt::Display for ImageSize {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}x{}", self.rows, self.cols)
    }
}

/// The seed of every synthetic set: runs with different training seeds
/// still time the same data.
const SYNTHETIC_SEED: u64 = 0x5EED_C1FA_0010;

/// Where a data set comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DataSource {
    /// A directory of MNIST or CIFAR-10 files.
    Dir(PathBuf),
    /// Random CIFAR-10-shaped images: `train` training and `test` test
    /// images (see [`super::cifar::synthetic`]).
    Synthetic {
        /// Training images.
        train: usize,
        /// Test images.
        test: usize,
    },
}

impl DataSource {
    const SYNTHETIC: &'static str = "synthetic:";
    const CIFAR10: &'static str = "cifar10";

    /// `synthetic:cifar10` (50,000 training and 10,000 test images),
    /// `synthetic:cifar10:N` (N training, N/5 but at least 1 test images),
    /// or else a directory.
    pub fn parse(text: &str) -> Result<Self, DataError> {
        let Some(rest) = text.strip_prefix(Self::SYNTHETIC) else {
            return Ok(Self::Dir(PathBuf::from(text)));
        };
        let bad = |why: &str| DataError::BadSource {
            given: text.to_string(),
            why: why.to_string(),
        };
        let (kind, count) = match rest.split_once(':') {
            Some((kind, count)) => (kind, Some(count)),
            None => (rest, None),
        };
        if kind != Self::CIFAR10 {
            return Err(bad("the synthetic data sets are: cifar10"));
        }
        let train = match count {
            None => 50_000,
            Some(n) => match n.parse::<usize>() {
                Ok(n) if n > 0 => n,
                _ => {
                    return Err(bad(
                        "the image count after `cifar10:` must be a whole number of at least 1",
                    ))
                }
            },
        };
        Ok(Self::Synthetic {
            train,
            test: (train / 5).max(1),
        })
    }

    /// [`DataSource::parse`] of a path's text (a path that is not UTF-8 is
    /// a directory).
    pub fn of_path(path: &Path) -> Result<Self, DataError> {
        match path.to_str() {
            Some(text) => Self::parse(text),
            None => Ok(Self::Dir(path.to_path_buf())),
        }
    }
}

impl std::fmt::Display for DataSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Dir(dir) => write!(f, "{}", dir.display()),
            Self::Synthetic { train, .. } => write!(f, "{}{}:{train}", Self::SYNTHETIC, Self::CIFAR10),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sources_parse() {
        assert_eq!(
            DataSource::parse("data/mnist").unwrap(),
            DataSource::Dir("data/mnist".into())
        );
        assert_eq!(
            DataSource::parse("synthetic:cifar10").unwrap(),
            DataSource::Synthetic {
                train: 50_000,
                test: 10_000
            }
        );
        assert_eq!(
            DataSource::parse("synthetic:cifar10:100").unwrap(),
            DataSource::Synthetic { train: 100, test: 20 }
        );
        assert_eq!(
            DataSource::parse("synthetic:cifar10:3").unwrap(),
            DataSource::Synthetic { train: 3, test: 1 }
        );
        for bad in [
            "synthetic:cifar10:0",
            "synthetic:cifar10:x",
            "synthetic:mnist",
            "synthetic:",
        ] {
            let err = DataSource::parse(bad).unwrap_err();
            assert!(matches!(err, DataError::BadSource { .. }), "{bad}: {err:?}");
            assert!(err.to_string().contains(bad), "{err}");
        }
        let round = DataSource::parse("synthetic:cifar10:100").unwrap();
        assert_eq!(DataSource::parse(&round.to_string()).unwrap(), round);
    }

    #[test]
    fn a_synthetic_source_opens() {
        let set = ImageSet::open(&DataSource::parse("synthetic:cifar10:10").unwrap()).unwrap();
        assert_eq!((set.train_images.count, set.test_images.count), (10, 2));
        assert_eq!(set.name, "synthetic CIFAR-10");
    }
}
