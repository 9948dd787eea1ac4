use super::Normalize;
use crate::backend::BackendError;
use rayon::prelude::*;

pub(super) fn images(
    pixels: &[u8],
    count: usize,
    indices: &[u32],
    norm: Normalize,
    out: &mut [f32],
) -> Result<(), BackendError> {
    if let Some(&index) = indices.iter().find(|&&i| i as usize >= count) {
        return Err(BackendError::Index { index, count });
    }
    let size = pixels.len() / count.max(1);
    let (scale, shift) = norm.scale_shift();
    out.par_chunks_mut(size).zip(indices.par_iter()).for_each(|(dst, &i)| {
        let src = &pixels[i as usize * size..][..size];
        dst.iter_mut()
            .zip(src)
            .for_each(|(d, &p)| *d = p as f32 * scale - shift);
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
