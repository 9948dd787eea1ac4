//! Language modelling over a character corpus: each step reads window `k`
//! of the training split's `B` streams (`[T, B]` ids, time-major, the next
//! `[T, B]` ids as targets) at the step cursor, the loss is the mean
//! next-token cross-entropy over its `T·B` tokens, and the metric is the
//! validation split's mean loss per token (perplexity its `exp`), walking
//! its windows in order.
//!
//! What the model carries from one window to the next (an LSTM's `h` and
//! `c` per layer) lives in one persistent buffer of `B ×`
//! [`crate::nn::Model::carried`] floats the task owns and hands the model
//! with each window: read as the window's initial state, written from its
//! last step (no gradient crosses windows: truncated backpropagation
//! through time). It is zeroed at the start of every epoch and of
//! evaluation ([`Task::reset`]), so every window allocates the same
//! sequence: one step plan, one captured graph.
//!
//! Streams are the batch: `--batch B` reads `B` streams at once, and an
//! epoch has as many steps as each stream has windows.

use super::{BuildArgs, Metric, Scores, Task, TaskChoice, TaskConfig};
use crate::data::text::{CharCorpus, Windows};
use crate::data::{DataError, DataSet};
use crate::memory::Buf;
use crate::nn::{Batch, Input, Reads, Tokens};
use crate::ops::cross_entropy::CrossEntropyArgs;
use crate::ops::gather::BatchAt;
use crate::ops::window::TokenWindows;
use crate::tensor::{Labels, Persistent, Shape, Tensor};
use crate::{Engine, Error, Result, Setting, Step};

/// The settings of [`LanguageModel`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LanguageModelConfig {
    /// Tokens each stream reads per step: the window `T`, and how far back
    /// the gradient reaches.
    pub seq_len: usize,
}

impl Default for LanguageModelConfig {
    fn default() -> Self {
        Self { seq_len: 64 }
    }
}

impl TaskConfig for LanguageModelConfig {
    fn validate(&self) -> Result<()> {
        if self.seq_len == 0 {
            return Err(Error::setting(
                Setting::SeqLen,
                "a window of 0 tokens reads nothing",
                Some("64".into()),
            ));
        }
        Ok(())
    }

    fn reads(&self) -> Reads {
        Reads::Tokens
    }

    fn input_of(&self, set: &DataSet) -> Result<Input> {
        Ok(Input {
            example: Shape::new(&[self.seq_len]),
            classes: corpus(set)?.vocab().len(),
        })
    }

    /// Refuses a corpus whose splits do not hold one window of `batch`
    /// streams, with the sizes.
    fn check(&self, set: &DataSet, batch: usize) -> Result<()> {
        let corpus = corpus(set)?;
        corpus.train_windows(batch, self.seq_len).map_err(DataError::from)?;
        corpus.valid_windows(batch, self.seq_len).map_err(DataError::from)?;
        Ok(())
    }

    fn train_len(&self, set: &DataSet, batch: usize) -> Result<usize> {
        let windows = corpus(set)?
            .train_windows(batch, self.seq_len)
            .map_err(DataError::from)?;
        Ok(windows.count() * batch)
    }

    fn draws(&self) -> String {
        "none".into()
    }

    fn build(&self, set: &DataSet, p: &mut Persistent<'_>, args: BuildArgs) -> Result<Box<dyn Task>> {
        let corpus = corpus(set)?;
        let (streams, steps) = (args.batch, self.seq_len);
        let mut upload = |what, windows: Windows<'_>, tokens: &[u32]| -> Result<TokenWindows> {
            Ok(TokenWindows {
                tokens: p.upload(what, Shape::new(&[tokens.len()]), tokens)?,
                streams,
                steps,
                count: windows.count(),
            })
        };
        let train_windows = corpus.train_windows(streams, steps).map_err(DataError::from)?;
        let valid_windows = corpus.valid_windows(streams, steps).map_err(DataError::from)?;
        let train = upload("training tokens", train_windows, corpus.train())?;
        let valid = upload("validation tokens", valid_windows, corpus.valid())?;
        let floats = streams * args.carried;
        let carried = match floats {
            0 => Buf::default(),
            n => p.zeros::<f32>("carried state", Shape::new(&[n]))?,
        };
        Ok(Box::new(LanguageModel {
            train,
            valid,
            vocab: corpus.vocab().len(),
            carried,
            zeros: vec![0.0; floats],
        }))
    }
}

/// The corpus of `set`, or why a language model cannot train on it.
fn corpus(set: &DataSet) -> Result<&CharCorpus> {
    set.corpus().ok_or_else(|| {
        Error::setting(
            Setting::Data,
            format!(
                "a language model trains on a text corpus, and the data is {}",
                set.kind().describe()
            ),
            None,
        )
    })
}

/// Language modelling over a corpus resident in the persistent region.
pub struct LanguageModel {
    train: TokenWindows,
    valid: TokenWindows,
    vocab: usize,
    /// What the model carries between windows, for every stream.
    carried: Buf<f32>,
    /// As many zeros, written into `carried` to reset it.
    zeros: Vec<f32>,
}

impl LanguageModel {
    /// The task as a run's settings carry it.
    pub fn choice(config: LanguageModelConfig) -> TaskChoice {
        TaskChoice::new("language model", config)
    }

    fn tokens<'s>(&self, ids: Labels<'s>) -> Tokens<'s> {
        Tokens {
            ids,
            steps: self.train.steps,
            streams: self.train.streams,
            carried: self.carried,
        }
    }
}

impl Task for LanguageModel {
    fn input(&self) -> Input {
        Input {
            example: Shape::new(&[self.train.steps]),
            classes: self.vocab,
        }
    }

    /// An example is one stream's window: the loop's order and batches
    /// count `B` of them a step.
    fn train_len(&self) -> usize {
        self.train.count * self.train.streams
    }

    fn test_len(&self) -> usize {
        self.valid.count * self.valid.streams
    }

    /// Window `k` for the cursor's step `k` of the epoch (the epoch's
    /// shuffled order is not read: windows go in order, or no state would
    /// carry).
    fn train_batch<'s>(&self, s: &mut Step<'s>, at: BatchAt, _length: usize) -> Result<(Batch<'s>, Labels<'s>)> {
        if at.len != self.train.streams || at.offset != 0 {
            return Err(Error::shape(
                "language model",
                format!(
                    "a step of all {} streams, got {} from {}",
                    self.train.streams, at.len, at.offset
                ),
            ));
        }
        let (ids, targets) = s.gather_window(self.train, at.cursor.buf)?;
        Ok((self.tokens(ids).into(), targets))
    }

    /// The validation window whose streams are `indices` (`B` of them from
    /// `k·B`: window `k`).
    fn test_batch<'s>(&self, s: &mut Step<'s>, indices: &[u32]) -> Result<(Batch<'s>, Option<Labels<'s>>)> {
        let streams = self.valid.streams;
        let first = indices.first().map_or(0, |&i| i as usize);
        if indices.len() != streams || !first.is_multiple_of(streams) {
            return Err(Error::shape(
                "language model",
                format!(
                    "a test batch of the {streams} streams of one window, got {} from {first}",
                    indices.len()
                ),
            ));
        }
        let which = s.window_index(first / streams)?;
        let (ids, targets) = s.gather_window(self.valid, which)?;
        Ok((self.tokens(ids).into(), Some(targets)))
    }

    /// The window's mean loss per token, computed where the logits are.
    fn test_readback<'s>(
        &self,
        s: &mut Step<'s>,
        output: Tensor<'s>,
        targets: Option<Labels<'s>>,
    ) -> Result<Tensor<'s>> {
        let targets = targets.ok_or_else(|| Error::shape("language model", "a test batch's targets".into()))?;
        let tokens = targets.len();
        output.cross_entropy_over(s, targets, tokens, CrossEntropyArgs::default())
    }

    /// `over` streams' windows of `T` tokens each.
    fn loss<'s>(&self, s: &mut Step<'s>, output: Tensor<'s>, targets: Labels<'s>, over: usize) -> Result<Tensor<'s>> {
        output.cross_entropy_over(s, targets, over * self.train.steps, CrossEntropyArgs::default())
    }

    fn readback_len(&self, _examples: usize) -> usize {
        1
    }

    fn score(&self, outputs: &[f32], _first: usize) -> Scores {
        [outputs.first().map_or(f64::NAN, |&l| l as f64), 0.0, 0.0]
    }

    /// Every window has `T·B` tokens, so the mean of the windows' means is
    /// the mean per token.
    fn metric(&self, sums: Scores, examples: usize) -> Metric {
        let windows = examples / self.valid.streams.max(1);
        Metric::TokenLoss(sums[0] / windows.max(1) as f64)
    }

    fn reset(&self, engine: &mut Engine) -> Result<()> {
        if self.carried.is_empty() {
            return Ok(());
        }
        engine.write_persistent(self.carried, &self.zeros)
    }
}
