use super::{Draws, Normalize};
use crate::backend::BackendError;
use rayon::prelude::*;

/// Images of `plane` pixels a channel, normalised channel by channel.
pub(super) fn images(
    pixels: &[u8],
    count: usize,
    indices: &[u32],
    plane: usize,
    norm: Normalize,
    out: &mut [f32],
) -> Result<(), BackendError> {
    if let Some(&index) = indices.iter().find(|&&i| i as usize >= count) {
        return Err(BackendError::Index { index, count });
    }
    // `max(1)`: an image of no pixels gathers nothing, and chunks of 0 panic.
    let size = (pixels.len() / count.max(1)).max(1);
    let table = norm.scale_shifts();
    out.par_chunks_mut(size).zip(indices.par_iter()).for_each(|(dst, &i)| {
        let src = &pixels[i as usize * size..][..size];
        let channels = dst.chunks_mut(plane.max(1)).zip(src.chunks(plane.max(1)));
        for ((dst, src), &(scale, shift)) in channels.zip(table.iter().chain(std::iter::repeat(&table[3]))) {
            dst.iter_mut()
                .zip(src)
                .for_each(|(d, &p)| *d = p as f32 * scale - shift);
        }
    });
    Ok(())
}

/// [`images`] of `[channels, rows, cols]`, each padded with `crop` zero
/// pixels, cropped at its drawn offset and perhaps mirrored, then
/// normalised: output pixel `(y, x)` is padded pixel `(y + dy, x' + dx)`,
/// `x'` being `cols - 1 - x` when mirrored, else `x`.
pub(super) fn augmented(
    pixels: &[u8],
    count: usize,
    indices: &[u32],
    [channels, rows, cols]: [usize; 3],
    norm: Normalize,
    draws: Draws,
    out: &mut [f32],
) -> Result<(), BackendError> {
    if let Some(&index) = indices.iter().find(|&&i| i as usize >= count) {
        return Err(BackendError::Index { index, count });
    }
    let plane = rows * cols;
    let size = (channels * plane).max(1);
    let table = norm.scale_shifts();
    let crop = draws.augment.crop;
    out.par_chunks_mut(size)
        .zip(indices.par_iter())
        .enumerate()
        .for_each(|(j, (dst, &i))| {
            let src = &pixels[i as usize * size..][..size];
            let (dy, dx, flip) = draws.augment.draw(draws.seed, draws.first + j as u64);
            for (c, &(scale, shift)) in table.iter().enumerate().take(channels) {
                for y in 0..rows {
                    for x in 0..cols {
                        let (py, px) = (y + dy, if flip { cols - 1 - x } else { x } + dx);
                        let inside = (crop..crop + rows).contains(&py) && (crop..crop + cols).contains(&px);
                        let p = if inside {
                            src[c * plane + (py - crop) * cols + px - crop]
                        } else {
                            0
                        };
                        dst[c * plane + y * cols + x] = p as f32 * scale - shift;
                    }
                }
            }
        });
    Ok(())
}

pub(super) fn labels(labels: &[u8], indices: &[u32], out: &mut [u32]) -> Result<(), BackendError> {
    for (o, &i) in out.iter_mut().zip(indices) {
        *o = *labels.get(i as usize).ok_or(BackendError::Index {
            index: i,
            count: labels.len(),
        })? as u32;
    }
    Ok(())
}
