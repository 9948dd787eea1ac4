//! Character language models: an embedding of the vocabulary (or, with
//! `embed` 0, none: the first recurrent layer reads each token as a one-hot
//! vector, as Lantern's models did, its `weight_ih_l0` `[G·H, vocab]` as
//! `nn.LSTM(input_size=vocab)`'s), a recurrent core (`nn::Lstm` for `char-lstm`, Lantern's vanilla tanh `nn::Rnn` for
//! `char-rnn`), and a linear layer back to the vocabulary; the loss is the
//! task's. Named as PyTorch's word-language-model example names its parts
//! (`encoder.weight`, `rnn.weight_ih_l0`, …, `decoder.weight`,
//! `decoder.bias`), so a checkpoint loads into the same modules with
//! `strict=True`.
//!
//! Each stream's state at the end of a window is carried to the next (see
//! `tasks::LanguageModel`): per layer `h` (and the LSTM's `c`), `[B, H]`
//! each, in the order layer 0's `h`, layer 0's `c`, layer 1's `h`, …

use crate::memory::Buf;
use crate::nn::{
    Embedding, Input, Linear, Lstm, LstmState, Mode, Model, ModelChoice, ParamBuilder, Reads, Rnn, Sequence, Tokens,
};
use crate::tensor::{Shape, Tensor};
use crate::{Error, Result, Step};

/// The most layers a character model may have: the states of a window
/// are held on the stack, so a step touches no heap.
pub const MAX_LAYERS: usize = 8;

/// The sizes of a character model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CharLmConfig {
    /// Features of a token's embedding; 0: no embedding, the tokens read
    /// as one-hot vectors.
    pub embed: usize,
    /// Units of each recurrent layer.
    pub hidden: usize,
    /// Recurrent layers, stacked.
    pub layers: usize,
}

impl Default for CharLmConfig {
    fn default() -> Self {
        Self {
            embed: 256,
            hidden: 256,
            layers: 2,
        }
    }
}

/// The recurrent core.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Core {
    Lstm(Lstm),
    Rnn(Rnn),
}

/// `char-lstm` and `char-rnn`: embedding → recurrent layers → linear.
#[derive(Debug, Clone, PartialEq, Eq)]
struct CharLm {
    /// `None`: one-hot input.
    encoder: Option<Embedding>,
    core: Core,
    decoder: Linear,
    config: CharLmConfig,
}

/// Embedding → `nn::Lstm` → linear, carrying `h` and `c` between windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CharLstm(CharLm);

/// Embedding → `nn::Rnn` (tanh) → linear, carrying `h` between windows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CharRnn(CharLm);

impl CharLstm {
    /// What `--model` calls it.
    pub const NAME: &'static str = "char-lstm";

    /// The model as a run's choice, at `config`'s sizes.
    pub fn choice(config: CharLmConfig) -> ModelChoice {
        ModelChoice::new::<Self>(Self::NAME, config)
    }
}

impl CharRnn {
    /// What `--model` calls it.
    pub const NAME: &'static str = "char-rnn";

    /// The model as a run's choice, at `config`'s sizes.
    pub fn choice(config: CharLmConfig) -> ModelChoice {
        ModelChoice::new::<Self>(Self::NAME, config)
    }
}

impl CharLm {
    fn new(name: &'static str, config: &CharLmConfig, input: Input, pb: &ParamBuilder<'_>, lstm: bool) -> Result<Self> {
        let CharLmConfig { embed, hidden, layers } = *config;
        if !(1..=MAX_LAYERS).contains(&layers) || hidden == 0 || input.classes == 0 {
            return Err(Error::shape(
                name,
                format!(
                    "1 to {MAX_LAYERS} layers and at least one hidden unit and token, got {layers} layers, embedding {embed}, hidden {hidden} and {} tokens",
                    input.classes
                ),
            ));
        }
        let vocab = input.classes;
        let features = if embed == 0 { vocab } else { embed };
        let encoder = match embed {
            0 => None,
            _ => Some(Embedding::new(&pb.pp("encoder"), vocab, embed)?),
        };
        let rnn = pb.pp("rnn");
        let core = match lstm {
            true => Core::Lstm(Lstm::new(&rnn, features, hidden, layers)?),
            false => Core::Rnn(Rnn::new(&rnn, features, hidden, layers)?),
        };
        Ok(Self {
            encoder,
            core,
            decoder: Linear::new(&pb.pp("decoder"), hidden, vocab)?,
            config: *config,
        })
    }

    /// States per layer: `h` and `c`, or `h`.
    fn states(&self) -> usize {
        match self.core {
            Core::Lstm(_) => 2,
            Core::Rnn(_) => 1,
        }
    }

    fn carried(&self) -> usize {
        self.config.layers * self.states() * self.config.hidden
    }

    fn forward<'s>(&self, s: &mut Step<'s>, x: Tokens<'s>) -> Result<Tensor<'s>> {
        let CharLmConfig { embed, hidden, layers } = self.config;
        let (steps, streams) = (x.steps, x.streams);
        let carried = (!x.carried.is_empty()).then_some(x.carried);
        if x.ids.len() != steps * streams || carried.is_some_and(|c| c.len() != streams * self.carried()) {
            return Err(Error::shape(
                "char model",
                format!(
                    "{} ids ([T, B] = [{steps}, {streams}]) and a carried state of {} floats, got {} ids and {}",
                    steps * streams,
                    streams * self.carried(),
                    x.ids.len(),
                    x.carried.len()
                ),
            ));
        }
        let state_shape = Shape::new(&[streams, hidden]);
        // Piece `i` of the carried state: [B, H] floats from i·B·H.
        let piece =
            |i: usize| -> Option<Buf<f32>> { carried.and_then(|c| c.slice(i * streams * hidden, streams * hidden)) };
        let e = match &self.encoder {
            Some(encoder) => Sequence::Features(
                encoder
                    .forward(s, x.ids)?
                    .reshape(s, Shape::new(&[steps, streams, embed]))?,
            ),
            None => Sequence::OneHot { ids: x.ids, steps },
        };
        let y = match &self.core {
            Core::Lstm(lstm) => {
                let mut state: [Option<LstmState<'s>>; MAX_LAYERS] = [None; MAX_LAYERS];
                for (l, st) in state.iter_mut().enumerate().take(layers) {
                    if let (Some(h), Some(c)) = (piece(2 * l), piece(2 * l + 1)) {
                        let (h, c) = (s.carried_in(h, state_shape)?, s.carried_in(c, state_shape)?);
                        *st = Some(LstmState { h, c });
                    }
                }
                let y = lstm.run(s, e, &mut state[..layers])?;
                for (l, st) in state.iter().enumerate().take(layers) {
                    if let (Some(st), Some(h), Some(c)) = (st, piece(2 * l), piece(2 * l + 1)) {
                        st.h.carry_out(s, h)?;
                        st.c.carry_out(s, c)?;
                    }
                }
                y
            }
            Core::Rnn(rnn) => {
                let mut state: [Option<Tensor<'s>>; MAX_LAYERS] = [None; MAX_LAYERS];
                for (l, st) in state.iter_mut().enumerate().take(layers) {
                    if let Some(h) = piece(l) {
                        *st = Some(s.carried_in(h, state_shape)?);
                    }
                }
                let y = rnn.run(s, e, &mut state[..layers])?;
                for (l, st) in state.iter().enumerate().take(layers) {
                    if let (Some(st), Some(h)) = (st, piece(l)) {
                        st.carry_out(s, h)?;
                    }
                }
                y
            }
        };
        let y = y.reshape(s, Shape::new(&[steps * streams, hidden]))?;
        self.decoder.forward(s, y)
    }
}

/// Refuses images: a character model reads token ids.
fn no_images<'s>(name: &'static str) -> Result<Tensor<'s>> {
    Err(Error::shape(name, "token ids; it reads no images".into()))
}

/// The two character models differ only in their recurrent layer.
macro_rules! char_model {
    ($model:ident, lstm: $lstm:expr) => {
        impl Model for $model {
            type Config = CharLmConfig;
            const READS: Reads = Reads::Tokens;

            fn new(config: &CharLmConfig, input: Input, pb: &ParamBuilder<'_>) -> Result<Self> {
                Ok(Self(CharLm::new(Self::NAME, config, input, pb, $lstm)?))
            }

            fn forward<'s>(&self, _s: &mut Step<'s>, _x: Tensor<'s>, _mode: Mode) -> Result<Tensor<'s>> {
                no_images(Self::NAME)
            }

            fn forward_tokens<'s>(&self, s: &mut Step<'s>, x: Tokens<'s>, _mode: Mode) -> Result<Tensor<'s>> {
                self.0.forward(s, x)
            }

            fn carried(&self) -> usize {
                self.0.carried()
            }
        }
    };
}

char_model!(CharLstm, lstm: true);
char_model!(CharRnn, lstm: false);
