//! An image folder: a person's own images, one subfolder per class.
//!
//! ```text
//! DIR/cats/1.png  DIR/cats/2.jpg  DIR/dogs/a.png ...    training images
//! DIR/val/cats/9.png ...                                 validation (optional)
//! ```
//!
//! The classes are the subfolders' names, sorted (byte order), label 0
//! first; `val` is not a class. Images are PNG or JPEG (recognised by their
//! bytes, whatever their extension says; files with other extensions are
//! skipped and counted), decoded with the `image` crate.
//!
//! Invariants of the [`ImageSet`] [`load`] returns:
//! - every image has the same `channels × rows × cols`: 1 channel if every
//!   training image is greyscale, else 3 (RGB; alpha is dropped); the rows
//!   and columns are [`ImageOptions::size`], or else the images' own size,
//!   which must then be the same for all (a different one is an error
//!   naming two files);
//! - at least 2 classes, each with at least one training image; labels are
//!   the class indices;
//! - the validation split is `val/` if present, else a fraction of each
//!   class's images held out by a fixed seed (the same images every run,
//!   whatever the training seed, so that evaluating a checkpoint later sees
//!   the validation images its run saw), else empty (no validation set);
//! - `normalize` is the training images' per-channel mean and standard
//!   deviation, of pixels scaled to [0, 1], after resizing;
//! - nothing panics: an unreadable or corrupt file is a [`DataError`]
//!   naming it.

use std::path::{Path, PathBuf};

use rayon::prelude::*;

use super::idx::Images;
use super::{DataError, ImageOptions, ImageSet};

/// The name of the folder of validation images, beside the classes.
pub const VAL_DIR: &str = "val";
/// Labels are bytes.
pub const MAX_CLASSES: usize = 256;
/// The seed of the validation split: fixed, so a split repeats.
const SPLIT_SEED: u64 = 0x5EED_F01D_E250_0001;
/// A channel whose pixels all have one value has no spread to divide by:
/// it is only centred (its standard deviation is taken as 1).
const FLAT_STD: f64 = 1e-6;

/// Whether `dir` looks like an image folder: a directory with a subfolder
/// (MNIST and CIFAR-10 are recognised first, by their files).
pub fn present(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.path().is_dir() && !hidden(&e.file_name().to_string_lossy()))
    })
}

/// One image file and its class.
#[derive(Debug, Clone)]
struct Item {
    path: PathBuf,
    label: u8,
}

/// What a header says of an image.
#[derive(Debug, Clone, Copy)]
struct Header {
    rows: usize,
    cols: usize,
    grey: bool,
}

/// Reads the image folder `dir` as `options` say.
pub fn load(dir: &Path, options: &ImageOptions) -> Result<ImageSet, DataError> {
    if let Some(f) = options.val_split.filter(|f| !(*f > 0.0 && *f < 1.0)) {
        return Err(DataError::ValSplit { given: f });
    }
    if let Some(c) = options.channels.filter(|c| *c != 1 && *c != 3) {
        return Err(DataError::FolderChannels { channels: c });
    }
    let mut skipped = Skipped::default();
    let classes = class_folders(dir)?;
    if classes.len() < 2 {
        let found = classes.into_iter().map(|(name, _)| name).collect();
        return Err(DataError::FewClasses {
            dir: dir.to_path_buf(),
            found,
        });
    }
    if classes.len() > MAX_CLASSES {
        return Err(DataError::TooManyClasses {
            dir: dir.to_path_buf(),
            found: classes.len(),
        });
    }
    let names: Vec<String> = classes.iter().map(|(name, _)| name.clone()).collect();
    let mut per_class = Vec::with_capacity(classes.len());
    for (_, path) in &classes {
        let files = image_files(path, &mut skipped)?;
        if files.is_empty() {
            return Err(DataError::EmptyClass { path: path.clone() });
        }
        per_class.push(files);
    }
    let val_dir = dir.join(VAL_DIR);
    let (train, val, how) = if val_dir.is_dir() {
        if options.val_split.is_some() {
            return Err(DataError::ValTwice { dir: val_dir });
        }
        let val = val_items(&val_dir, &names, &mut skipped)?;
        let how = format!("validation: the {} images of {}", val.len(), val_dir.display());
        (items(per_class), val, how)
    } else if let Some(fraction) = options.val_split {
        let total: usize = per_class.iter().map(Vec::len).sum();
        let (train, val) = split(per_class, fraction);
        if val.is_empty() {
            return Err(DataError::SplitTooSmall { fraction, total });
        }
        let how = format!(
            "validation: {} of the {total} images ({:.0}% of each class, held out by a fixed seed: the same every run)",
            val.len(),
            100.0 * fraction
        );
        (train, val, how)
    } else {
        let how = format!(
            "no validation set: {} has no {VAL_DIR}/ folder and no split of the training images was asked for, so no accuracy is measured",
            dir.display()
        );
        (items(per_class), Vec::new(), how)
    };

    let all: Vec<&Item> = train.iter().chain(&val).collect();
    let headers: Vec<Header> = all
        .par_iter()
        .map(|item| header(&item.path))
        .collect::<Result<_, _>>()?;
    let (rows, cols, resized) = match options.size {
        Some(size) => (size.rows, size.cols, true),
        None => {
            let first = headers[0];
            let differs = all
                .iter()
                .zip(&headers)
                .find(|(_, h)| (h.rows, h.cols) != (first.rows, first.cols));
            if let Some((other, h)) = differs {
                return Err(DataError::MixedSizes {
                    first: all[0].path.clone(),
                    first_size: (first.rows, first.cols),
                    other: other.path.clone(),
                    other_size: (h.rows, h.cols),
                });
            }
            (first.rows, first.cols, false)
        }
    };
    let channels = options
        .channels
        .unwrap_or(if headers[..train.len()].iter().all(|h| h.grey) {
            1
        } else {
            3
        });
    let train_images = decode_all(&train, channels, rows, cols)?;
    let test_images = decode_all(&val, channels, rows, cols)?;
    let normalize = statistics(&train_images);

    let mut notes = vec![
        format!("{} classes, from the folder names: {}", names.len(), list(&names)),
        format!(
            "images: {}, {rows}×{cols} pixels{}",
            if channels == 1 {
                "greyscale (1 channel)"
            } else {
                "RGB (3 channels)"
            },
            if resized { " (each resized to it)" } else { "" }
        ),
        how,
        format!(
            "normalised per channel by the training images' mean {} and standard deviation {}",
            join(normalize.iter().map(|p| p.0)),
            join(normalize.iter().map(|p| p.1))
        ),
    ];
    if let Some(note) = skipped.note() {
        notes.push(note);
    }
    Ok(ImageSet {
        name: format!("image folder {}", dir.display()),
        synthetic: false,
        train_labels: train.iter().map(|item| item.label).collect(),
        train_images,
        test_labels: val.iter().map(|item| item.label).collect(),
        test_images,
        classes: names.len(),
        class_names: names,
        normalize,
        notes,
    })
}

/// One image file read as a model of `channels × rows × cols` reads it:
/// decoded, converted to greyscale or RGB, resized, channels first.
pub fn read_image(path: &Path, channels: usize, rows: usize, cols: usize) -> Result<Vec<u8>, DataError> {
    if channels != 1 && channels != 3 {
        return Err(DataError::FolderChannels { channels });
    }
    decode(path, channels, rows, cols)
}

/// Whether `path` names a file an image folder reads: `.png`, `.jpg` or
/// `.jpeg`, in any case.
pub fn is_image_file(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| ["png", "jpg", "jpeg"].iter().any(|x| e.eq_ignore_ascii_case(x)))
}

fn hidden(name: &str) -> bool {
    name.starts_with('.')
}

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> DataError + '_ {
    move |source| DataError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn bad_image(path: &Path) -> impl FnOnce(image::ImageError) -> DataError + '_ {
    move |e| DataError::BadImage {
        path: path.to_path_buf(),
        why: e.to_string(),
    }
}

/// The subfolders of `dir` (not `val/`, not hidden ones), sorted by name.
fn class_folders(dir: &Path) -> Result<Vec<(String, PathBuf)>, DataError> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let entry = entry.map_err(io(dir))?;
        let name = entry.file_name().to_string_lossy().into_owned();
        let path = entry.path();
        if path.is_dir() && name != VAL_DIR && !hidden(&name) {
            found.push((name, path));
        }
    }
    found.sort();
    Ok(found)
}

/// Files skipped because they are not PNG or JPEG.
#[derive(Default)]
struct Skipped {
    count: usize,
    first: Option<PathBuf>,
}

impl Skipped {
    fn add(&mut self, path: PathBuf) {
        self.count += 1;
        self.first.get_or_insert(path);
    }

    fn note(&self) -> Option<String> {
        let first = self.first.as_ref()?;
        Some(format!(
            "skipped {} files that are not .png, .jpg or .jpeg (the first: {})",
            self.count,
            first.display()
        ))
    }
}

/// The image files of a class folder, sorted by name; anything else is
/// skipped.
fn image_files(dir: &Path, skipped: &mut Skipped) -> Result<Vec<PathBuf>, DataError> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).map_err(io(dir))? {
        let path = entry.map_err(io(dir))?.path();
        let name = path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default();
        if hidden(&name) {
            continue;
        }
        if path.is_file() && is_image_file(&path) {
            files.push(path);
        } else {
            skipped.add(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Every class's files as labelled items, class after class.
fn items(per_class: Vec<Vec<PathBuf>>) -> Vec<Item> {
    let mut out = Vec::new();
    for (label, files) in per_class.into_iter().enumerate() {
        // At most MAX_CLASSES classes: every label is a byte.
        out.extend(files.into_iter().map(|path| Item {
            path,
            label: label as u8,
        }));
    }
    out
}

/// The images of `val/`, whose subfolders must be training classes.
fn val_items(val_dir: &Path, names: &[String], skipped: &mut Skipped) -> Result<Vec<Item>, DataError> {
    let mut out = Vec::new();
    for (name, path) in class_folders(val_dir)? {
        let Some(label) = names.iter().position(|n| *n == name) else {
            return Err(DataError::ValUnknownClass {
                path,
                classes: names.to_vec(),
            });
        };
        let files = image_files(&path, skipped)?;
        out.extend(files.into_iter().map(|path| Item {
            path,
            label: label as u8,
        }));
    }
    if out.is_empty() {
        return Err(DataError::ValEmpty {
            dir: val_dir.to_path_buf(),
        });
    }
    Ok(out)
}

/// Each class's files split into training and validation items: a
/// `fraction` of them (rounded, at most all but one) drawn by the fixed
/// split seed, the rest kept in name order.
fn split(per_class: Vec<Vec<PathBuf>>, fraction: f64) -> (Vec<Item>, Vec<Item>) {
    let mut rng = crate::rng::SplitMix64::new(SPLIT_SEED);
    let (mut train, mut val) = (Vec::new(), Vec::new());
    for (label, files) in per_class.into_iter().enumerate() {
        let n = files.len();
        let held = ((n as f64 * fraction).round() as usize).min(n - 1);
        // Fisher–Yates over the indices; the first `held` are validation.
        let mut order: Vec<usize> = (0..n).collect();
        for i in (1..n).rev() {
            let j = rng.below(i as u64 + 1) as usize;
            order.swap(i, j);
        }
        let mut is_val = vec![false; n];
        for &i in &order[..held] {
            is_val[i] = true;
        }
        for (path, v) in files.into_iter().zip(is_val) {
            let item = Item {
                path,
                label: label as u8,
            };
            if v {
                val.push(item);
            } else {
                train.push(item);
            }
        }
    }
    (train, val)
}

/// The size and colour of the image at `path`, from its header.
fn header(path: &Path) -> Result<Header, DataError> {
    use image::ImageDecoder;
    let reader = image::ImageReader::open(path)
        .map_err(io(path))?
        .with_guessed_format()
        .map_err(io(path))?;
    let decoder = reader.into_decoder().map_err(bad_image(path))?;
    let (width, height) = decoder.dimensions();
    let grey = matches!(
        decoder.color_type(),
        image::ColorType::L8 | image::ColorType::La8 | image::ColorType::L16 | image::ColorType::La16
    );
    Ok(Header {
        rows: height as usize,
        cols: width as usize,
        grey,
    })
}

/// The image at `path` as `channels × rows × cols` bytes, channels first.
fn decode(path: &Path, channels: usize, rows: usize, cols: usize) -> Result<Vec<u8>, DataError> {
    let image = image::ImageReader::open(path)
        .map_err(io(path))?
        .with_guessed_format()
        .map_err(io(path))?
        .decode()
        .map_err(bad_image(path))?;
    let (w, h) = (cols as u32, rows as u32);
    let resize = |img: image::DynamicImage| match img.width() == w && img.height() == h {
        true => img,
        false => img.resize_exact(w, h, image::imageops::FilterType::Triangle),
    };
    let plane = rows * cols;
    let mut out = vec![0; channels * plane];
    if channels == 1 {
        out.copy_from_slice(resize(image::DynamicImage::ImageLuma8(image.to_luma8())).as_bytes());
    } else {
        let rgb = resize(image::DynamicImage::ImageRgb8(image.to_rgb8()));
        for (i, pixel) in rgb.as_bytes().chunks_exact(3).enumerate() {
            for (c, &v) in pixel.iter().enumerate() {
                out[c * plane + i] = v;
            }
        }
    }
    Ok(out)
}

/// Every item's image, decoded in parallel, in the items' order.
fn decode_all(items: &[Item], channels: usize, rows: usize, cols: usize) -> Result<Images, DataError> {
    let decoded: Vec<Vec<u8>> = items
        .par_iter()
        .map(|item| decode(&item.path, channels, rows, cols))
        .collect::<Result<_, _>>()?;
    Ok(Images {
        count: items.len(),
        channels,
        rows,
        cols,
        pixels: decoded.concat(),
    })
}

/// Each channel's mean and (population) standard deviation over every
/// pixel of `images`, scaled to [0, 1].
fn statistics(images: &Images) -> Vec<(f32, f32)> {
    let plane = images.rows * images.cols;
    let n = (images.count * plane) as f64;
    (0..images.channels)
        .map(|c| {
            let (mut sum, mut squares) = (0u64, 0u64);
            for image in images.pixels.chunks_exact(images.image_len()) {
                for &v in &image[c * plane..(c + 1) * plane] {
                    sum += u64::from(v);
                    squares += u64::from(v) * u64::from(v);
                }
            }
            let mean = sum as f64 / n / 255.0;
            let var = (squares as f64 / n / (255.0 * 255.0) - mean * mean).max(0.0);
            let std = var.sqrt();
            (mean as f32, if std < FLAT_STD { 1.0 } else { std as f32 })
        })
        .collect()
}

/// Up to ten names, then how many more.
fn list(names: &[String]) -> String {
    let shown = names.iter().take(10).cloned().collect::<Vec<_>>().join(", ");
    match names.len() {
        0..=10 => shown,
        n => format!("{shown} and {} more", n - 10),
    }
}

fn join(values: impl Iterator<Item = f32>) -> String {
    values.map(|v| format!("{v:.4}")).collect::<Vec<_>>().join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::testutil::TempDir;
    use crate::data::ImageSize;

    /// Writes a greyscale PNG of `rows`×`cols` pixels at `dir/rel`.
    fn grey(dir: &TempDir, rel: &str, rows: u32, cols: u32, pixels: &[u8]) -> PathBuf {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        image::GrayImage::from_raw(cols, rows, pixels.to_vec())
            .unwrap()
            .save(&path)
            .unwrap();
        path
    }

    /// Writes an RGB PNG (or JPEG, by the extension) at `dir/rel`.
    fn rgb(dir: &TempDir, rel: &str, rows: u32, cols: u32, pixels: &[u8]) -> PathBuf {
        let path = dir.path().join(rel);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        image::RgbImage::from_raw(cols, rows, pixels.to_vec())
            .unwrap()
            .save(&path)
            .unwrap();
        path
    }

    fn read(dir: &TempDir, options: ImageOptions) -> Result<ImageSet, DataError> {
        ImageSet::load_with(dir.path(), &options)
    }

    #[test]
    fn a_tiny_folder_reads_with_statistics_computed_by_hand() {
        let dir = TempDir::new("folder-tiny");
        grey(&dir, "b/1.png", 2, 2, &[51, 51, 102, 102]);
        grey(&dir, "a/1.png", 2, 2, &[0, 255, 0, 255]);
        std::fs::write(dir.path().join("a/notes.txt"), b"not an image").unwrap();
        let set = ImageSet::load(dir.path()).unwrap();
        assert_eq!(set.class_names, ["a", "b"], "sorted folder names");
        assert_eq!((set.classes, set.train_labels.clone()), (2, vec![0, 1]));
        let i = &set.train_images;
        assert_eq!((i.count, i.channels, i.rows, i.cols), (2, 1, 2, 2));
        assert_eq!(i.pixels, [0, 255, 0, 255, 51, 51, 102, 102]);
        assert_eq!(set.test_images.count, 0, "no val/ and no split: no validation set");
        // Scaled: 0 1 0 1 .2 .2 .4 .4 — mean .4; mean of squares 2.4/8 = .3;
        // variance .3 − .16 = .14.
        let (mean, std) = set.normalize[0];
        assert_eq!(set.normalize.len(), 1);
        assert!((mean - 0.4).abs() < 1e-6, "{mean}");
        assert!((std - 0.14f32.sqrt()).abs() < 1e-6, "{std}");
        let notes = set.notes.join("\n");
        assert!(notes.contains("no validation set"), "{notes}");
        assert!(
            notes.contains("mean 0.4000") && notes.contains("deviation 0.3742"),
            "{notes}"
        );
        assert!(
            notes.contains("skipped 1 files") && notes.contains("notes.txt"),
            "{notes}"
        );
    }

    #[test]
    fn one_colour_image_makes_every_image_rgb_channels_first() {
        let dir = TempDir::new("folder-rgb");
        rgb(&dir, "colour/1.png", 1, 2, &[10, 20, 30, 40, 50, 60]);
        grey(&dir, "grey/1.png", 1, 2, &[7, 9]);
        let set = ImageSet::load(dir.path()).unwrap();
        let i = &set.train_images;
        assert_eq!((i.channels, i.rows, i.cols), (3, 1, 2));
        // Channel-major: all red, all green, all blue; grey repeated.
        assert_eq!(i.pixels, [10, 40, 20, 50, 30, 60, 7, 9, 7, 9, 7, 9]);
        let means: Vec<f32> = set.normalize.iter().map(|p| p.0).collect();
        for (c, want) in [(10.0 + 40.0 + 7.0 + 9.0), (20.0 + 50.0 + 16.0), (30.0 + 60.0 + 16.0)]
            .into_iter()
            .enumerate()
        {
            assert!((means[c] - want / 4.0 / 255.0).abs() < 1e-6, "channel {c}: {means:?}");
        }
    }

    #[test]
    fn jpeg_images_are_read_too() {
        let dir = TempDir::new("folder-jpeg");
        rgb(&dir, "a/1.jpg", 8, 8, &[200; 8 * 8 * 3]);
        rgb(&dir, "b/1.jpeg", 8, 8, &[20; 8 * 8 * 3]);
        let set = ImageSet::load(dir.path()).unwrap();
        assert_eq!((set.train_images.count, set.train_images.channels), (2, 3));
        let first = set.train_images.image(0).unwrap();
        assert!(first.iter().all(|&v| v.abs_diff(200) <= 3), "lossy, but close");
    }

    #[test]
    fn sizes_must_agree_unless_a_size_is_given() {
        let dir = TempDir::new("folder-sizes");
        grey(&dir, "a/1.png", 4, 4, &[100; 16]);
        let odd = grey(&dir, "b/1.png", 6, 3, &[100; 18]);
        let err = read(&dir, ImageOptions::default()).unwrap_err();
        let text = err.to_string();
        assert!(matches!(err, DataError::MixedSizes { .. }), "{err:?}");
        assert!(
            text.contains("a/1.png is 4×4") && text.contains(&format!("{} is 6×3", odd.display())),
            "{text}"
        );
        let size = Some("5x7".parse().unwrap());
        let set = read(
            &dir,
            ImageOptions {
                size,
                ..Default::default()
            },
        )
        .unwrap();
        let i = &set.train_images;
        assert_eq!((i.count, i.rows, i.cols, i.pixels.len()), (2, 5, 7, 70));
        assert!(
            i.pixels.iter().all(|&v| v == 100),
            "a flat image stays flat when resized"
        );
        assert_eq!(set.normalize, [(100.0 / 255.0, 1.0)], "a flat channel is only centred");
    }

    #[test]
    fn a_split_is_stratified_and_repeats() {
        let dir = TempDir::new("folder-split");
        for i in 0..10 {
            grey(&dir, &format!("a/{i}.png"), 1, 1, &[i]);
        }
        for i in 0..6 {
            grey(&dir, &format!("b/{i}.png"), 1, 1, &[100 + i]);
        }
        let options = ImageOptions {
            val_split: Some(0.5),
            ..Default::default()
        };
        let set = read(&dir, options).unwrap();
        let count = |labels: &[u8], l: u8| labels.iter().filter(|&&x| x == l).count();
        assert_eq!((count(&set.train_labels, 0), count(&set.train_labels, 1)), (5, 3));
        assert_eq!((count(&set.test_labels, 0), count(&set.test_labels, 1)), (5, 3));
        let again = read(&dir, options).unwrap();
        assert_eq!(
            set.test_images.pixels, again.test_images.pixels,
            "the same split every time"
        );
        let mut all: Vec<u8> = set
            .train_images
            .pixels
            .iter()
            .chain(&set.test_images.pixels)
            .copied()
            .collect();
        all.sort();
        assert_eq!(all, (0..10).chain(100..106).collect::<Vec<u8>>(), "every image once");
        assert!(
            set.notes.iter().any(|n| n.contains("8 of the 16 images")),
            "{:?}",
            set.notes
        );
        // Statistics of the training images only.
        let mean = set.train_images.pixels.iter().map(|&v| v as f64).sum::<f64>() / 8.0 / 255.0;
        assert!((set.normalize[0].0 as f64 - mean).abs() < 1e-6);
    }

    #[test]
    fn val_holds_the_validation_images() {
        let dir = TempDir::new("folder-val");
        grey(&dir, "a/1.png", 1, 1, &[1]);
        grey(&dir, "b/1.png", 1, 1, &[2]);
        grey(&dir, "val/b/1.png", 1, 1, &[3]);
        let set = ImageSet::load(dir.path()).unwrap();
        assert_eq!(set.class_names, ["a", "b"], "val is not a class");
        assert_eq!(
            (set.test_labels.clone(), set.test_images.pixels.clone()),
            (vec![1], vec![3])
        );
        let twice = ImageOptions {
            val_split: Some(0.2),
            ..Default::default()
        };
        assert!(matches!(read(&dir, twice), Err(DataError::ValTwice { .. })));
        grey(&dir, "val/c/1.png", 1, 1, &[4]);
        let err = ImageSet::load(dir.path()).unwrap_err();
        assert!(matches!(err, DataError::ValUnknownClass { .. }), "{err:?}");
        assert!(
            err.to_string().contains("val/c is not a training class (a, b)"),
            "{err}"
        );
    }

    #[test]
    fn bad_folders_are_refused_with_what_to_do() {
        let dir = TempDir::new("folder-bad");
        let err = ImageSet::load(dir.path()).unwrap_err();
        assert!(matches!(err, DataError::EmptyDir { .. }), "{err:?}");
        assert!(
            err.to_string()
                .contains("one subfolder of PNG or JPEG images per class"),
            "{err}"
        );
        grey(&dir, "only/1.png", 1, 1, &[1]);
        let err = ImageSet::load(dir.path()).unwrap_err();
        assert!(err.to_string().contains("holds 1 class folder (only)"), "{err}");
        std::fs::create_dir_all(dir.path().join("empty")).unwrap();
        let err = ImageSet::load(dir.path()).unwrap_err();
        assert!(
            matches!(&err, DataError::EmptyClass { path } if path.ends_with("empty")),
            "{err:?}"
        );
        let corrupt = dir.path().join("empty/broken.png");
        std::fs::write(&corrupt, b"\x89PNG\r\n\x1a\nnot really").unwrap();
        let err = ImageSet::load(dir.path()).unwrap_err();
        assert!(
            matches!(&err, DataError::BadImage { path, .. } if *path == corrupt),
            "{err:?}"
        );
        // A valid header over a cut body: found when decoding.
        let png = std::fs::read(dir.path().join("only/1.png")).unwrap();
        std::fs::write(&corrupt, &png[..png.len() - 20]).unwrap();
        let err = ImageSet::load(dir.path()).unwrap_err();
        assert!(
            matches!(&err, DataError::BadImage { path, .. } if *path == corrupt),
            "{err:?}"
        );
        std::fs::write(&corrupt, &png).unwrap();
        for f in [0.0, 1.0, -0.5, 1.5, f64::NAN] {
            let options = ImageOptions {
                val_split: Some(f),
                ..Default::default()
            };
            assert!(matches!(read(&dir, options), Err(DataError::ValSplit { .. })), "{f}");
        }
        let one_each = ImageOptions {
            val_split: Some(0.1),
            ..Default::default()
        };
        assert!(matches!(
            read(&dir, one_each),
            Err(DataError::SplitTooSmall { total: 2, .. })
        ));
    }

    #[test]
    fn image_sizes_parse() {
        assert_eq!("32x48".parse::<ImageSize>().unwrap(), ImageSize { rows: 32, cols: 48 });
        assert_eq!("7X7".parse::<ImageSize>().unwrap().to_string(), "7x7");
        for bad in ["32", "x", "0x5", "5x0", "ax5", "-1x5", "9000x9000", ""] {
            let err = bad.parse::<ImageSize>().unwrap_err();
            assert!(matches!(err, DataError::BadImageSize { .. }), "{bad}");
            assert!(err.to_string().contains("32x32"), "{err}");
        }
    }

    #[test]
    fn one_image_is_read_as_a_model_reads() {
        let dir = TempDir::new("folder-one");
        let path = rgb(&dir, "x.png", 2, 2, &[255, 0, 0, 255, 0, 0, 255, 0, 0, 255, 0, 0]);
        assert_eq!(read_image(&path, 3, 1, 1).unwrap(), [255, 0, 0]);
        let grey = read_image(&path, 1, 2, 2).unwrap();
        assert_eq!(grey.len(), 4);
        assert!(grey.iter().all(|&v| v == grey[0] && v > 0 && v < 255), "{grey:?}");
        assert!(matches!(
            read_image(&path, 2, 1, 1),
            Err(DataError::FolderChannels { channels: 2 })
        ));
        let missing = dir.path().join("missing.png");
        assert!(matches!(read_image(&missing, 3, 1, 1), Err(DataError::Io { .. })));
    }
}
