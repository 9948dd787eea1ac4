//! window: a language model's step input and what it carries between
//! steps.
//!
//! [`Step::gather_window`] reads window `k` of a split of tokens resident
//! in the persistent region, cut into `B` streams read `T` tokens at a time
//! (the layout of `data::text::Windows`: stream `b`'s inputs of window `k`
//! begin at `(b·W + k)·T`, each input's target the token after it), as two
//! `[T, B]` time-major id buffers: `ids[t·B + b]` is stream `b`'s token at
//! step `t`. Which window is read on the device, from the first word of a
//! `u32` buffer: the step cursor's step in the epoch, so a captured graph
//! reads the next window on every replay, or a window index the step
//! uploaded (evaluation, which is not captured). A window past the split is
//! an error on the CPU; a GPU kernel cannot report one, so there every id
//! is `0xffffffff`, the embedding's rows turn NaN and training stops at
//! that step (the gather's convention).
//!
//! [`Step::carried_in`] and [`Tensor::carry_out`] copy a recurrent state
//! between the persistent region and the step: in as an fp32 step tensor
//! that records no gradient (truncated backpropagation through time stops
//! at the window's edge), out from the window's last step. The state is
//! copied in rather than aliased because the step writes the same memory
//! at its end while backward still reads the initial state (the hidden
//! state's product with `W_hh` keeps its input).

#[cfg(test)]
mod tests;

use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::backend::BackendError;
use crate::memory::{Buf, DType, FloatBuf};
use crate::ops::cast::convert;
use crate::ops::Step;
use crate::tensor::{Labels, Layout, Shape, Tensor};
use crate::{Error, Result};

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "window",
    source: include_str!("kernels.cu"),
    entries: &[GATHER_WINDOW],
};
const GATHER_WINDOW: &str = "gather_window";

/// A split of tokens in the persistent region cut into `streams` streams
/// of `count` windows of `steps` tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenWindows {
    /// The split's token ids.
    pub tokens: Buf<u32>,
    /// Streams `B`: the batch.
    pub streams: usize,
    /// Tokens each stream reads a window: `T`.
    pub steps: usize,
    /// Windows per epoch.
    pub count: usize,
}

impl TokenWindows {
    /// Refuses a cut the split does not hold: every window's last target
    /// must be one of its tokens.
    pub fn check(&self) -> Result<()> {
        let needed = self.streams * self.count * self.steps + 1;
        if self.streams == 0 || self.steps == 0 || self.count == 0 || self.tokens.len() < needed {
            return Err(Error::shape(
                "gather_window",
                format!(
                    "{} streams of {} windows of {} tokens (at least 1 each) in a split of at least {needed} tokens, got {}",
                    self.streams,
                    self.count,
                    self.steps,
                    self.tokens.len()
                ),
            ));
        }
        Ok(())
    }
}

impl<'s> Step<'s> {
    /// Window `which[0]` of `split`'s windows as `(inputs, targets)`, each
    /// `[T·B]` ids, time-major.
    pub fn gather_window(&mut self, split: TokenWindows, which: Buf<u32>) -> Result<(Labels<'s>, Labels<'s>)> {
        split.check()?;
        if which.is_empty() {
            return Err(Error::shape(
                "gather_window",
                "a window index, got an empty buffer".into(),
            ));
        }
        let TokenWindows {
            tokens,
            streams,
            steps,
            count,
        } = split;
        let n = streams * steps;
        let inputs = self.alloc::<u32>("window inputs", Shape::new(&[n]))?;
        let targets = self.alloc::<u32>("window targets", Shape::new(&[n]))?;
        self.launch(
            &[tokens.into(), which.into(), inputs.into(), targets.into()],
            |v| {
                let k = v.read(which)?[0] as usize;
                if k >= count {
                    return Err(BackendError::Index { index: k as u32, count });
                }
                let (tokens, inputs, targets) = (v.read(tokens)?, v.write(inputs)?, v.write(targets)?);
                for (i, (x, y)) in inputs.iter_mut().zip(targets.iter_mut()).enumerate() {
                    let (t, b) = (i / streams, i % streams);
                    let at = (b * count + k) * steps + t;
                    (*x, *y) = (tokens[at], tokens[at + 1]);
                }
                Ok(())
            },
            |gpu| {
                gpu.launch(
                    GATHER_WINDOW,
                    Grid::over(n),
                    &[
                        tokens.into(),
                        which.into(),
                        inputs.into(),
                        targets.into(),
                        Arg::U32(steps as u32),
                        Arg::U32(streams as u32),
                        Arg::U32(count as u32),
                    ],
                )
            },
        )?;
        Ok((self.labels_from(inputs), self.labels_from(targets)))
    }

    /// The window index `k` in the step region, for [`Step::gather_window`]
    /// outside a captured step.
    pub fn window_index(&mut self, k: usize) -> Result<Buf<u32>> {
        let buf = self.alloc::<u32>("window index", Shape::new(&[1]))?;
        self.copy_in(buf, &[k as u32])?;
        Ok(buf)
    }

    /// `from` (persistent, fp32) copied into a new step tensor of `shape`
    /// that records no gradient.
    pub fn carried_in(&mut self, from: Buf<f32>, shape: Shape) -> Result<Tensor<'s>> {
        if from.len() != shape.numel() {
            return Err(Error::shape(
                "carried_in",
                format!("{} floats for a state of {shape}, got {}", shape.numel(), from.len()),
            ));
        }
        let y = self.output_as("carried state", shape, DType::F32, Layout::Nchw, &[])?;
        convert(self, shape, (from.into(), Layout::Nchw), (y.buf(), Layout::Nchw))?;
        Ok(y)
    }
}

impl<'s> Tensor<'s> {
    /// Copies `self` (a row-major tensor) into `to` (persistent, fp32),
    /// recording nothing: what a step carries to the next.
    pub fn carry_out(self, s: &mut Step<'s>, to: Buf<f32>) -> Result<()> {
        let shape = self.shape();
        if to.len() != shape.numel() || self.layout() != Layout::Nchw {
            return Err(Error::shape(
                "carry_out",
                format!("room for {shape} in row-major order, got {} floats", to.len()),
            ));
        }
        convert(s, shape, (self.buf(), Layout::Nchw), (FloatBuf::from(to), Layout::Nchw))
    }
}
