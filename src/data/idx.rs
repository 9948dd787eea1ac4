//! IDX reader: turns an IDX file (raw, or gzip-compressed) into host buffers.
//!
//! Only the two shapes MNIST uses are supported: unsigned-byte images with
//! three dimensions (magic `0x00000803`) and unsigned-byte labels with one
//! (magic `0x00000801`). The magic word already encodes element type and
//! dimension count, so checking it checks both.
//!
//! Invariants:
//! - Compression is detected from the gzip magic bytes `1f 8b`, never from
//!   the file name: a raw IDX file always starts `00 00`, so the two cannot
//!   be confused.
//! - A buffer is accepted only if its length is exactly header + the product
//!   of the declared dimensions; short and long buffers are both errors, so
//!   a returned [`Images`] always has `pixels.len() == count * rows * cols`.
//! - Parsing never panics and never allocates from an untrusted header
//!   alone: sizes are checked against the bytes actually present first.

use std::io::Read;
use std::path::Path;

use flate2::read::MultiGzDecoder;

use super::DataError;

/// Magic word of an unsigned-byte, three-dimensional IDX file.
pub const IMAGES_MAGIC: u32 = 0x0000_0803;
/// Magic word of an unsigned-byte, one-dimensional IDX file.
pub const LABELS_MAGIC: u32 = 0x0000_0801;

const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// What errors name as the "path" when the bytes came from no file.
const IN_MEMORY: &str = "<in-memory buffer>";

/// A stack of equally sized images, one byte a pixel value: each image is
/// its channels one after the other (channel-major), each channel row-major.
/// IDX images are greyscale: one channel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Images {
    /// Images in the stack.
    pub count: usize,
    /// Channels per image: 1 (greyscale) or 3 (RGB).
    pub channels: usize,
    /// Rows per image.
    pub rows: usize,
    /// Columns per image.
    pub cols: usize,
    /// `count * channels * rows * cols` bytes, image after image.
    pub pixels: Vec<u8>,
}

impl Images {
    /// Bytes in one image (all its channels).
    pub fn image_len(&self) -> usize {
        self.channels * self.rows * self.cols
    }

    /// The pixels of image `index`, or `None` past the end.
    pub fn image(&self, index: usize) -> Option<&[u8]> {
        // By count, not by slicing alone: with a zero dimension every slice
        // is empty and in range, even past the end (found by fuzzing).
        if index >= self.count {
            return None;
        }
        let len = self.image_len();
        let start = index.checked_mul(len)?;
        self.pixels.get(start..start.checked_add(len)?)
    }
}

/// Reads an IDX image file (gzip or raw).
pub fn read_images(path: &Path) -> Result<Images, DataError> {
    images_from_file(read_file(path)?, path)
}

/// Reads an IDX label file (gzip or raw).
pub fn read_labels(path: &Path) -> Result<Vec<u8>, DataError> {
    labels_from_file(read_file(path)?, path)
}

/// Parses an uncompressed IDX image buffer. Errors name the path as
/// `<in-memory buffer>`.
pub fn parse_images(bytes: &[u8]) -> Result<Images, DataError> {
    parse_images_at(bytes, Path::new(IN_MEMORY))
}

/// Parses an uncompressed IDX label buffer. Errors name the path as
/// `<in-memory buffer>`.
pub fn parse_labels(bytes: &[u8]) -> Result<Vec<u8>, DataError> {
    parse_labels_at(bytes, Path::new(IN_MEMORY))
}

/// Whether `bytes` start with the gzip magic.
pub fn is_gzip(bytes: &[u8]) -> bool {
    bytes.starts_with(&GZIP_MAGIC)
}

/// The file's bytes exactly as stored (still compressed, if it is), which is
/// what checksums are computed over.
pub(crate) fn read_file(path: &Path) -> Result<Vec<u8>, DataError> {
    std::fs::read(path).map_err(|source| {
        if source.kind() == std::io::ErrorKind::NotFound {
            DataError::MissingFile {
                path: path.to_path_buf(),
            }
        } else {
            DataError::Io {
                path: path.to_path_buf(),
                source,
            }
        }
    })
}

/// Images from a file's stored bytes; `path` is only for error messages.
pub(crate) fn images_from_file(stored: Vec<u8>, path: &Path) -> Result<Images, DataError> {
    parse_images_at(&decompress(stored, path)?, path)
}

/// Labels from a file's stored bytes; `path` is only for error messages.
pub(crate) fn labels_from_file(stored: Vec<u8>, path: &Path) -> Result<Vec<u8>, DataError> {
    parse_labels_at(&decompress(stored, path)?, path)
}

fn decompress(stored: Vec<u8>, path: &Path) -> Result<Vec<u8>, DataError> {
    if !is_gzip(&stored) {
        return Ok(stored);
    }
    // Multi-member so that a concatenated gzip (legal, if rare) decodes whole,
    // and so that garbage after the first member is reported, not ignored.
    let mut out = Vec::new();
    MultiGzDecoder::new(stored.as_slice())
        .read_to_end(&mut out)
        .map_err(|source| DataError::Gzip {
            path: path.to_path_buf(),
            source,
        })?;
    Ok(out)
}

fn parse_images_at(bytes: &[u8], path: &Path) -> Result<Images, DataError> {
    let ([count, rows, cols], pixels) = split_idx(bytes, IMAGES_MAGIC, path)?;
    Ok(Images {
        count,
        channels: 1,
        rows,
        cols,
        pixels: pixels.to_vec(),
    })
}

fn parse_labels_at(bytes: &[u8], path: &Path) -> Result<Vec<u8>, DataError> {
    let ([_count], labels) = split_idx(bytes, LABELS_MAGIC, path)?;
    Ok(labels.to_vec())
}

/// Checks magic and total length, and splits an IDX buffer into its `D`
/// dimensions and its payload.
fn split_idx<'a, const D: usize>(
    bytes: &'a [u8],
    magic: u32,
    path: &Path,
) -> Result<([usize; D], &'a [u8]), DataError> {
    let header_len = 4 + 4 * D;
    let found_bytes = bytes.len() as u64;
    // Magic before length: a short file of the wrong kind is better reported
    // as the wrong kind than as short.
    if let Some(found) = be_u32(bytes, 0) {
        if found != magic {
            return Err(DataError::BadMagic {
                path: path.to_path_buf(),
                found,
                expected: magic,
            });
        }
    }
    let Some((header, payload)) = bytes.split_at_checked(header_len) else {
        return Err(DataError::Truncated {
            path: path.to_path_buf(),
            expected_bytes: header_len as u64,
            found_bytes,
        });
    };

    let mut dims = [0usize; D];
    // u128 because three u32 dimensions can overflow u64.
    let mut expected = header_len as u128;
    let mut payload_len = 1u128;
    for (k, dim) in dims.iter_mut().enumerate() {
        let value = be_u32(header, 4 + 4 * k).unwrap_or(0);
        *dim = value as usize;
        payload_len *= u128::from(value);
    }
    expected += payload_len;

    let found = u128::from(found_bytes);
    if found != expected {
        // Saturating: a header claiming more than 2^64 bytes is simply
        // "longer than any file", and the message stays truthful.
        let expected_bytes = u64::try_from(expected).unwrap_or(u64::MAX);
        let path = path.to_path_buf();
        return Err(if found < expected {
            DataError::Truncated {
                path,
                expected_bytes,
                found_bytes,
            }
        } else {
            DataError::TrailingBytes {
                path,
                expected_bytes,
                found_bytes,
            }
        });
    }
    Ok((dims, payload))
}

/// The big-endian u32 at `at`, if the buffer is long enough.
fn be_u32(bytes: &[u8], at: usize) -> Option<u32> {
    let word: [u8; 4] = bytes.get(at..at.checked_add(4)?)?.try_into().ok()?;
    Some(u32::from_be_bytes(word))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::data::testutil::{gzip, idx_images, idx_labels, ramp_pixels, TempDir};

    fn sample_images() -> (Vec<u8>, Vec<u8>) {
        let pixels = ramp_pixels(3, 4, 5);
        (idx_images(3, 4, 5, &pixels), pixels)
    }

    #[test]
    fn parses_images() {
        let (bytes, pixels) = sample_images();
        let images = parse_images(&bytes).unwrap();
        assert_eq!((images.count, images.rows, images.cols), (3, 4, 5));
        assert_eq!(images.pixels, pixels);
        assert_eq!(images.image_len(), 20);
        assert_eq!(images.image(1), Some(&pixels[20..40]));
        assert_eq!(images.image(3), None);
        assert_eq!(images.image(usize::MAX), None);
    }

    #[test]
    fn zero_sized_images_end_at_their_count() {
        // Regression (fuzz/regressions/idx-zero-dimension-*.bin): rows or
        // cols of 0 made `image` return an empty image for any index.
        let images = parse_images(&idx_images(0, 28, 0, &[])).unwrap();
        assert_eq!(images.image(0), None);
        let images = parse_images(&idx_images(3, 0, 28, &[])).unwrap();
        assert_eq!(images.image(2), Some(&[][..]));
        assert_eq!(images.image(3), None);
    }

    #[test]
    fn parses_labels() {
        assert_eq!(parse_labels(&idx_labels(&[7, 0, 9])).unwrap(), vec![7, 0, 9]);
        assert_eq!(parse_labels(&idx_labels(&[])).unwrap(), Vec::<u8>::new());
    }

    #[test]
    fn wrong_magic_is_bad_magic() {
        let labels = idx_labels(&[1, 2]);
        match parse_images(&labels) {
            Err(DataError::BadMagic { found, expected, .. }) => {
                assert_eq!((found, expected), (LABELS_MAGIC, IMAGES_MAGIC))
            }
            other => panic!("expected BadMagic, got {other:?}"),
        }
        let (images, _) = sample_images();
        assert!(matches!(
            parse_labels(&images),
            Err(DataError::BadMagic {
                found: IMAGES_MAGIC,
                expected: LABELS_MAGIC,
                ..
            })
        ));
        // Only four bytes, but wrong ones: reported as the wrong kind.
        assert!(matches!(
            parse_labels(b"PK\x03\x04"),
            Err(DataError::BadMagic { found: 0x504b_0304, .. })
        ));
    }

    #[test]
    fn truncated_header_is_truncated() {
        let (bytes, _) = sample_images();
        for len in [0, 3, 4, 10, 15] {
            match parse_images(&bytes[..len]) {
                Err(DataError::Truncated {
                    expected_bytes,
                    found_bytes,
                    ..
                }) => assert_eq!((expected_bytes, found_bytes), (16, len as u64)),
                other => panic!("len {len}: expected Truncated, got {other:?}"),
            }
        }
        assert!(matches!(
            parse_labels(&idx_labels(&[1])[..7]),
            Err(DataError::Truncated {
                expected_bytes: 8,
                found_bytes: 7,
                ..
            })
        ));
    }

    #[test]
    fn truncated_payload_is_truncated() {
        let (bytes, _) = sample_images();
        let short = &bytes[..bytes.len() - 1];
        assert!(matches!(
            parse_images(short),
            Err(DataError::Truncated {
                expected_bytes: 76,
                found_bytes: 75,
                ..
            })
        ));
        let labels = idx_labels(&[1, 2, 3]);
        assert!(matches!(
            parse_labels(&labels[..9]),
            Err(DataError::Truncated {
                expected_bytes: 11,
                found_bytes: 9,
                ..
            })
        ));
    }

    #[test]
    fn every_prefix_is_rejected_without_panicking() {
        let (bytes, _) = sample_images();
        for len in 0..bytes.len() {
            assert!(
                matches!(parse_images(&bytes[..len]), Err(DataError::Truncated { .. })),
                "prefix of {len} bytes"
            );
        }
    }

    #[test]
    fn trailing_bytes_are_an_error() {
        let (mut bytes, _) = sample_images();
        bytes.push(0);
        assert!(matches!(
            parse_images(&bytes),
            Err(DataError::TrailingBytes {
                expected_bytes: 76,
                found_bytes: 77,
                ..
            })
        ));
        let mut labels = idx_labels(&[4]);
        labels.extend_from_slice(b"junk");
        assert!(matches!(
            parse_labels(&labels),
            Err(DataError::TrailingBytes {
                expected_bytes: 9,
                found_bytes: 13,
                ..
            })
        ));
    }

    #[test]
    fn absurd_header_saturates_instead_of_overflowing() {
        let bytes = idx_images(u32::MAX, u32::MAX, u32::MAX, &[]);
        assert!(matches!(
            parse_images(&bytes),
            Err(DataError::Truncated {
                expected_bytes: u64::MAX,
                found_bytes: 16,
                ..
            })
        ));
    }

    #[test]
    fn raw_and_gzip_files_read_the_same() {
        let dir = TempDir::new("idx-happy");
        let (bytes, _) = sample_images();
        let expected = parse_images(&bytes).unwrap();
        let raw = dir.write("images-raw", &bytes);
        let gz = dir.write("images.gz", &gzip(&bytes));
        assert_eq!(read_images(&raw).unwrap(), expected);
        assert_eq!(read_images(&gz).unwrap(), expected);

        let labels = idx_labels(&[3, 1, 4]);
        let raw = dir.write("labels-raw", &labels);
        let gz = dir.write("labels.gz", &gzip(&labels));
        assert_eq!(read_labels(&raw).unwrap(), vec![3, 1, 4]);
        assert_eq!(read_labels(&gz).unwrap(), vec![3, 1, 4]);
    }

    #[test]
    fn compression_is_detected_by_content_not_name() {
        let dir = TempDir::new("idx-names");
        let labels = idx_labels(&[5, 6]);
        let raw_named_gz = dir.write("labels.gz", &labels);
        let gz_named_raw = dir.write("labels.idx", &gzip(&labels));
        assert_eq!(read_labels(&raw_named_gz).unwrap(), vec![5, 6]);
        assert_eq!(read_labels(&gz_named_raw).unwrap(), vec![5, 6]);
    }

    #[test]
    fn corrupt_gzip_is_gzip_error() {
        let dir = TempDir::new("idx-gzip");
        let (bytes, _) = sample_images();
        let good = gzip(&bytes);

        let truncated = dir.write("truncated.gz", &good[..good.len() / 2]);
        let mut flipped = good.clone();
        let mid = flipped.len() / 2;
        flipped[mid] ^= 0xff;
        let flipped = dir.write("flipped.gz", &flipped);
        let mut trailing = good.clone();
        trailing.extend_from_slice(b"garbage after the stream");
        let trailing = dir.write("trailing.gz", &trailing);

        for path in [truncated, flipped, trailing] {
            match read_images(&path) {
                Err(DataError::Gzip { path: p, .. }) => assert_eq!(p, path),
                other => panic!("{}: expected Gzip, got {other:?}", path.display()),
            }
        }
    }

    #[test]
    fn file_errors_carry_the_path() {
        let dir = TempDir::new("idx-missing");
        let missing = dir.path().join("nope.gz");
        match read_labels(&missing) {
            Err(DataError::MissingFile { path }) => assert_eq!(path, missing),
            other => panic!("expected MissingFile, got {other:?}"),
        }
        // A directory exists but cannot be read as a file: Io, not MissingFile.
        match read_labels(dir.path()) {
            Err(DataError::Io { path, .. }) => assert_eq!(path, dir.path()),
            other => panic!("expected Io, got {other:?}"),
        }
        let bad = dir.write("bad", &idx_labels(&[1])[..6]);
        match read_labels(&bad) {
            Err(DataError::Truncated { path, .. }) => assert_eq!(path, bad),
            other => panic!("expected Truncated, got {other:?}"),
        }
    }
}
