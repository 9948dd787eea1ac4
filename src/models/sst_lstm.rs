//! `sst-lstm`: a sentence classifier, as the Stanford Sentiment Treebank's
//! LSTM baseline: a word embedding (300 features), an `nn::Lstm` (one
//! layer of 150 units), and a linear layer from the hidden state at each
//! sentence's last word to the classes. Named as the PyTorch module of
//! `bench/models.py` names its parts (`embedding.weight`,
//! `rnn.weight_ih_l0`, `rnn.weight_hh_l0`, `rnn.bias_ih_l0`,
//! `rnn.bias_hh_l0`, `fc.weight`, `fc.bias`), so a checkpoint loads there
//! with `strict=True`.
//!
//! A batch is `[T, B]` right-padded ids (`nn::SentenceInput`); the LSTM runs
//! all `T` steps from a zero state, and each sentence's state is read at its
//! own last word, row `(length − 1)·B + b` of the `[T·B, H]` outputs,
//! picked by the embedding op (a row lookup whose backward adds the
//! gradient into the picked rows alone). The padding after a sentence is
//! run but never read, so it changes neither the sentence's logits nor its
//! gradient.

use super::char_lm::MAX_LAYERS;
use crate::nn::{
    Embedding, Input, Linear, Lstm, LstmState, Mode, Model, ModelChoice, ParamBuilder, Reads, SentenceInput,
};
use crate::tensor::{Param, Shape, Tensor};
use crate::{Error, Result, Step};

/// The sizes of `sst-lstm`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SstLstmConfig {
    /// Features of a word's embedding.
    pub embed: usize,
    /// Units of each LSTM layer.
    pub hidden: usize,
    /// LSTM layers, stacked.
    pub layers: usize,
    /// Hold the word embedding fixed (pretrained vectors, not trained).
    pub fixed_embedding: bool,
}

impl Default for SstLstmConfig {
    fn default() -> Self {
        Self {
            embed: 300,
            hidden: 150,
            layers: 1,
            fixed_embedding: false,
        }
    }
}

/// Embedding → LSTM → linear from each sentence's last state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SstLstm {
    embedding: Embedding,
    rnn: Lstm,
    fc: Linear,
    config: SstLstmConfig,
}

impl SstLstm {
    /// What `--model` calls it.
    pub const NAME: &'static str = "sst-lstm";

    /// The model as a run's choice, at `config`'s sizes.
    pub fn choice(config: SstLstmConfig) -> ModelChoice {
        ModelChoice::new::<Self>(Self::NAME, config)
    }
}

impl Model for SstLstm {
    type Config = SstLstmConfig;
    const READS: Reads = Reads::SentenceIds;

    /// `input.example` is `[V]`, the vocabulary; `input.classes` the
    /// classes out.
    fn new(config: &SstLstmConfig, input: Input, pb: &ParamBuilder<'_>) -> Result<Self> {
        let SstLstmConfig {
            embed,
            hidden,
            layers,
            fixed_embedding,
        } = *config;
        let vocab = match input.example.dims() {
            &[vocab] => vocab,
            _ => 0,
        };
        if !(1..=MAX_LAYERS).contains(&layers) || embed == 0 || hidden == 0 || vocab == 0 || input.classes == 0 {
            return Err(Error::shape(
                Self::NAME,
                format!(
                    "1 to {MAX_LAYERS} layers, a vocabulary [V] and at least one embedding feature, hidden unit and class, got {layers} layers, vocabulary {}, embedding {embed}, hidden {hidden} and {} classes",
                    input.example, input.classes
                ),
            ));
        }
        Ok(Self {
            embedding: match fixed_embedding {
                true => Embedding::new(&pb.pp("embedding"), vocab, embed)?.fixed(),
                false => Embedding::new(&pb.pp("embedding"), vocab, embed)?,
            },
            rnn: Lstm::new(&pb.pp("rnn"), embed, hidden, layers)?,
            fc: Linear::new(&pb.pp("fc"), hidden, input.classes)?,
            config: *config,
        })
    }

    fn forward<'s>(&self, _s: &mut Step<'s>, _x: Tensor<'s>, _mode: Mode) -> Result<Tensor<'s>> {
        Err(Error::shape(
            Self::NAME,
            "sentences of token ids; it reads no images".into(),
        ))
    }

    fn word_embedding(&self) -> Option<Param> {
        Some(self.embedding.weight())
    }

    fn forward_sentences<'s>(&self, s: &mut Step<'s>, x: SentenceInput<'s>, _mode: Mode) -> Result<Tensor<'s>> {
        let SstLstmConfig {
            embed, hidden, layers, ..
        } = self.config;
        let (steps, batch) = (x.steps, x.batch);
        if x.ids.len() != steps * batch || x.last.len() != batch || steps == 0 {
            return Err(Error::shape(
                Self::NAME,
                format!(
                    "{} ids ([T, B] = [{steps}, {batch}], T ≥ 1) and {batch} sentence ends, got {} ids and {} ends",
                    steps * batch,
                    x.ids.len(),
                    x.last.len()
                ),
            ));
        }
        let e = self
            .embedding
            .forward(s, x.ids)?
            .reshape(s, Shape::new(&[steps, batch, embed]))?;
        let mut state: [Option<LstmState<'s>>; MAX_LAYERS] = [None; MAX_LAYERS];
        let y = self.rnn.forward(s, e, &mut state[..layers])?;
        let y = y.reshape(s, Shape::new(&[steps * batch, hidden]))?;
        let last = y.embedding(s, x.last)?;
        self.fc.forward(s, last)
    }
}
