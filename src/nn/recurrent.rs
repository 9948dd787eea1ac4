//! Recurrent layers as PyTorch's `nn.LSTM` and `nn.RNN(nonlinearity='tanh')`
//! (one direction, `batch_first=False`, no dropout between layers): the
//! same parameters under the same names and shapes, layer `k` declaring
//! `weight_ih_l{k}` `[G·H, I]`, `weight_hh_l{k}` `[G·H, H]`, `bias_ih_l{k}`
//! and `bias_hh_l{k}` `[G·H]` (G = 4 gates i, f, g, o for the LSTM, 1 for
//! the RNN), each `U(−1/√H, 1/√H)` as PyTorch initialises them, so a
//! checkpoint loads into the PyTorch module with `strict=True`.
//!
//! A layer runs over a sequence `[T, B, I]` in two parts: the input's
//! projection for every step in one product (`[T·B, I] · W_ihᵀ + b_ih +
//! b_hh`, the two biases summed once), then the recurrence. The LSTM's is
//! one op over the whole sequence (`lstm_layer`: per step the hidden
//! state's product with `W_hh` and the fused cell; in backward `W_hh`'s
//! gradient is one product over all steps); the RNN's is per step a view
//! of that step's projection (`select`), the product with `W_hh` (absent
//! at a zero initial state), `add` and `tanh`, the steps' hidden states
//! gathered into `[T, B, H]` (`stack`). Either gives `[T, B, H]`, which the
//! next layer takes as its input. Nothing is allocated on the heap: the
//! states go in and out through a slice the caller holds.
//!
//! The first layer may read token ids as one-hot vectors of its input size
//! ([`Sequence::OneHot`], Lantern's character models): its projection is
//! then a gather of `W_ih`'s columns (`onehot_linear`), the parameters
//! those of `nn.LSTM(input_size=vocab)`.

use super::params::{Init, ParamBuilder};
use crate::base::DType;
use crate::tensor::{Labels, Param, Shape, Tensor};
use crate::{Error, Result, Step};

/// One layer's parameters, in PyTorch's order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Weights {
    w_ih: Param,
    w_hh: Param,
    b_ih: Param,
    b_hh: Param,
}

/// The step's view of one layer's parameters.
#[derive(Clone, Copy)]
struct LayerTensors<'s> {
    w_ih: Tensor<'s>,
    w_hh: Tensor<'s>,
    b_ih: Tensor<'s>,
    b_hh: Tensor<'s>,
}

impl Weights {
    /// Declares layer `k`'s four tensors for `gates` gates of `hidden` units
    /// over inputs of `input`.
    fn new(pb: &ParamBuilder<'_>, k: usize, gates: usize, input: usize, hidden: usize) -> Result<Self> {
        let rows = gates * hidden;
        let init = Init::UniformFanIn(hidden);
        Ok(Self {
            w_ih: pb.param(&format!("weight_ih_l{k}"), Shape::new(&[rows, input]), init)?,
            w_hh: pb.param(&format!("weight_hh_l{k}"), Shape::new(&[rows, hidden]), init)?,
            b_ih: pb.param(&format!("bias_ih_l{k}"), Shape::new(&[rows]), init)?,
            b_hh: pb.param(&format!("bias_hh_l{k}"), Shape::new(&[rows]), init)?,
        })
    }

    fn tensors<'s>(&self, s: &mut Step<'s>) -> LayerTensors<'s> {
        LayerTensors {
            w_ih: s.param(&self.w_ih),
            w_hh: s.param(&self.w_hh),
            b_ih: s.param(&self.b_ih),
            b_hh: s.param(&self.b_hh),
        }
    }
}

/// Layers declared for a network of `input` features, `hidden` units and
/// `layers` layers, or why those sizes cannot make one.
fn declare(
    op: &'static str,
    pb: &ParamBuilder<'_>,
    gates: usize,
    (input, hidden, layers): (usize, usize, usize),
) -> Result<Vec<Weights>> {
    if input == 0 || hidden == 0 || layers == 0 {
        return Err(Error::shape(
            op,
            format!("at least one input feature, hidden unit and layer, got {input}, {hidden} and {layers}"),
        ));
    }
    (0..layers)
        .map(|k| Weights::new(pb, k, gates, if k == 0 { input } else { hidden }, hidden))
        .collect()
}

/// What a recurrent network reads: a sequence of feature vectors, or of
/// tokens read as one-hot vectors of the network's input size.
#[derive(Debug, Clone, Copy)]
pub enum Sequence<'s> {
    /// `[T, B, I]`.
    Features(Tensor<'s>),
    /// `T·B` ids, time-major (step `t`'s `B` ids from `t·B`), each below
    /// the input size `I`.
    OneHot {
        /// The ids.
        ids: Labels<'s>,
        /// `T`, so that `B` is the ids over it.
        steps: usize,
    },
}

impl Sequence<'_> {
    /// Checked against a network of `input` features and `layers` layers
    /// holding `states` initial states: `(T, B)`.
    fn check(&self, op: &'static str, input: usize, layers: usize, states: usize) -> Result<(usize, usize)> {
        let (steps, batch) = match *self {
            Sequence::Features(x) => {
                let d = x.shape();
                if d.rank() != 3 || d.dim(2) != input || d.dim(0) == 0 {
                    return Err(Error::shape(
                        op,
                        format!("an input [T, B, {input}] of at least one step, got {d}"),
                    ));
                }
                (d.dim(0), d.dim(1))
            }
            Sequence::OneHot { ids, steps } => {
                if steps == 0 || !ids.len().is_multiple_of(steps) {
                    return Err(Error::shape(
                        op,
                        format!(
                            "T·B one-hot ids for T = {steps} steps of at least one, got {} ids",
                            ids.len()
                        ),
                    ));
                }
                (steps, ids.len() / steps)
            }
        };
        if states != layers {
            return Err(Error::shape(
                op,
                format!("one state for each of the {layers} layers, got {states}"),
            ));
        }
        Ok((steps, batch))
    }
}

/// The input's projection for every step, `[T, B, G·H]`, with both biases:
/// one product, or for one-hot ids a gather of `W_ih`'s columns.
fn project<'s>(s: &mut Step<'s>, x: Sequence<'s>, w: &LayerTensors<'s>) -> Result<Tensor<'s>> {
    let rows = w.w_ih.shape().dim(0);
    let bias = w.b_ih.add(s, w.b_hh)?;
    match x {
        Sequence::Features(x) => {
            let d = x.shape();
            let (steps, batch) = (d.dim(0), d.dim(1));
            let flat = x.reshape(s, Shape::new(&[steps * batch, d.dim(2)]))?;
            flat.linear(s, w.w_ih, Some(bias))?
                .reshape(s, Shape::new(&[steps, batch, rows]))
        }
        Sequence::OneHot { ids, steps } => w
            .w_ih
            .onehot_linear(s, ids, bias)?
            .reshape(s, Shape::new(&[steps, ids.len() / steps, rows])),
    }
}

/// An LSTM's state between steps: its hidden state and its cell, `[B, H]`
/// each.
#[derive(Debug, Clone, Copy)]
pub struct LstmState<'s> {
    /// The hidden state.
    pub h: Tensor<'s>,
    /// The cell.
    pub c: Tensor<'s>,
}

/// `nn.LSTM(input, hidden, layers)`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lstm {
    input: usize,
    hidden: usize,
    layers: Vec<Weights>,
}

impl Lstm {
    /// Declares `layers` layers (`weight_ih_l{k}`, `weight_hh_l{k}`,
    /// `bias_ih_l{k}`, `bias_hh_l{k}`; gates i, f, g, o) as PyTorch names
    /// and initialises them; refuses a size of 0.
    pub fn new(pb: &ParamBuilder<'_>, input: usize, hidden: usize, layers: usize) -> Result<Self> {
        Ok(Self {
            input,
            hidden,
            layers: declare("lstm", pb, 4, (input, hidden, layers))?,
        })
    }

    /// Units of each layer: `H`.
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// Every step's top-layer hidden state, `[T, B, H]`, for `x` `[T, B,
    /// I]`. `state` holds one entry per layer: its initial state (`None`:
    /// zeros, as PyTorch's default), replaced by its state after the last
    /// step.
    pub fn forward<'s>(
        &self,
        s: &mut Step<'s>,
        x: Tensor<'s>,
        state: &mut [Option<LstmState<'s>>],
    ) -> Result<Tensor<'s>> {
        self.run(s, Sequence::Features(x), state)
    }

    /// [`Lstm::forward`] of a [`Sequence`]: features, or one-hot ids.
    pub fn run<'s>(
        &self,
        s: &mut Step<'s>,
        x: Sequence<'s>,
        state: &mut [Option<LstmState<'s>>],
    ) -> Result<Tensor<'s>> {
        let (steps, _) = x.check("lstm", self.input, self.layers.len(), state.len())?;
        let mut input = x;
        for (weights, state) in self.layers.iter().zip(state.iter_mut()) {
            let w = weights.tensors(s);
            let proj = project(s, input, &w)?;
            let dtype = proj.dtype();
            let (h0, c0) = match *state {
                // Cells are fp32 at any precision (ops::lstm_layer says why).
                Some(st) => (Some(st.h.cast(s, dtype)?), Some(st.c.cast(s, DType::F32)?)),
                None => (None, None),
            };
            let w_hh = w.w_hh.cast(s, dtype)?;
            let (h, c) = proj.lstm_layer(s, w_hh, h0, c0)?;
            *state = Some(LstmState {
                h: h.select(s, steps - 1)?,
                c: c.select(s, steps - 1)?,
            });
            input = Sequence::Features(h);
        }
        output(input)
    }
}

/// `nn.RNN(input, hidden, layers, nonlinearity='tanh')`: Lantern's vanilla
/// RNN, from `linear`, `add` and `tanh`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rnn {
    input: usize,
    hidden: usize,
    layers: Vec<Weights>,
}

impl Rnn {
    /// Declares `layers` tanh layers, named and initialised as PyTorch's;
    /// refuses a size of 0.
    pub fn new(pb: &ParamBuilder<'_>, input: usize, hidden: usize, layers: usize) -> Result<Self> {
        Ok(Self {
            input,
            hidden,
            layers: declare("rnn", pb, 1, (input, hidden, layers))?,
        })
    }

    /// Units of each layer: `H`.
    pub fn hidden(&self) -> usize {
        self.hidden
    }

    /// Every step's top-layer hidden state, `[T, B, H]`, for `x` `[T, B,
    /// I]`; `state` as [`Lstm::forward`]'s, a hidden state `[B, H]` per
    /// layer.
    pub fn forward<'s>(&self, s: &mut Step<'s>, x: Tensor<'s>, state: &mut [Option<Tensor<'s>>]) -> Result<Tensor<'s>> {
        self.run(s, Sequence::Features(x), state)
    }

    /// [`Rnn::forward`] of a [`Sequence`]: features, or one-hot ids.
    pub fn run<'s>(&self, s: &mut Step<'s>, x: Sequence<'s>, state: &mut [Option<Tensor<'s>>]) -> Result<Tensor<'s>> {
        let (steps, _) = x.check("rnn", self.input, self.layers.len(), state.len())?;
        let mut input = x;
        for (weights, state) in self.layers.iter().zip(state.iter_mut()) {
            let w = weights.tensors(s);
            let proj = project(s, input, &w)?;
            let dtype = proj.dtype();
            let mut h = state.map(|h| h.cast(s, dtype)).transpose()?;
            let ys = Tensor::stack(s, steps, |s, t| {
                let from_x = proj.select(s, t)?;
                let pre = match h {
                    Some(h) => {
                        let from_h = h.linear(s, w.w_hh, None)?;
                        from_x.add(s, from_h)?
                    }
                    None => from_x,
                };
                let next = pre.tanh(s)?;
                h = Some(next);
                Ok(next)
            })?;
            *state = h;
            input = Sequence::Features(ys);
        }
        output(input)
    }
}

/// The last layer's output: features, as every layer makes.
fn output(x: Sequence<'_>) -> Result<Tensor<'_>> {
    match x {
        Sequence::Features(y) => Ok(y),
        Sequence::OneHot { .. } => Err(Error::shape("recurrent layers", "at least one layer".into())),
    }
}

/// `nn.Embedding(vocab, dim)`: `weight` `[vocab, dim]`, `N(0, 1)` as
/// PyTorch initialises it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Embedding {
    weight: Param,
    /// Read as a constant: no gradient, never updated.
    fixed: bool,
}

impl Embedding {
    /// Declares `weight` on `pb`.
    pub fn new(pb: &ParamBuilder<'_>, vocab: usize, dim: usize) -> Result<Self> {
        Ok(Self {
            weight: pb.param("weight", Shape::new(&[vocab, dim]), Init::Normal(1.0))?,
            fixed: false,
        })
    }

    /// Declares `weight` on `pb` out of weight decay's reach (Tai et al.
    /// decay every weight of the Tree-LSTM but the word vectors).
    pub fn without_decay(pb: &ParamBuilder<'_>, vocab: usize, dim: usize) -> Result<Self> {
        Ok(Self {
            weight: pb.param_without_decay("weight", Shape::new(&[vocab, dim]), Init::Normal(1.0))?,
            fixed: false,
        })
    }

    /// Row `tokens[n]` of the table as row `n` of `[N, dim]`.
    pub fn forward<'s>(&self, s: &mut Step<'s>, tokens: crate::tensor::Labels<'s>) -> Result<Tensor<'s>> {
        let table = match self.fixed {
            true => s.param_fixed(&self.weight),
            false => s.param(&self.weight),
        };
        table.embedding(s, tokens)
    }

    /// The same table, held fixed: read, never trained (see
    /// [`Step::param_fixed`]).
    pub fn fixed(self) -> Self {
        Self { fixed: true, ..self }
    }

    /// The table, `[vocab, dim]`.
    pub fn weight(&self) -> Param {
        self.weight
    }
}

#[cfg(test)]
#[path = "recurrent_tests.rs"]
pub(crate) mod tests;
