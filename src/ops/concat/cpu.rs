use super::Slot;
use rayon::prelude::*;

/// An image's channels of the part are one contiguous run in both the part
/// and the output: one copy per image.
pub(super) fn forward(slot: &Slot, part: &[f32], y: &mut [f32]) {
    let run = slot.channels * slot.area;
    y.par_chunks_mut(slot.total * slot.area)
        .zip(part.par_chunks(run))
        .for_each(|(y, part)| y[slot.first * slot.area..][..run].copy_from_slice(part));
}

pub(super) fn backward(slot: &Slot, gy: &[f32], gx: &mut [f32]) {
    let run = slot.channels * slot.area;
    gx.par_chunks_mut(run)
        .zip(gy.par_chunks(slot.total * slot.area))
        .for_each(|(gx, gy)| gx.copy_from_slice(&gy[slot.first * slot.area..][..run]));
}
