//! Adagrad, exactly `torch.optim.Adagrad`'s update (dense gradients):
//! `d = g + wd·p`, `sum += d²`, `p −= clr · d / (√sum + eps)` with
//! `clr = lr / (1 + (t − 1)·lr_decay)` and `t` the update's number read from
//! the step cursor on the device.
//!
//! The accumulator is one slab laid out like the parameters, starting at
//! `initial_accumulator_value`, so the update is one flat launch over the
//! slabs ([`crate::ops::adagrad_update`]); a checkpoint keeps it as
//! PyTorch's `state_dict` names it (`sum`), and the update count, as
//! AdamW's, is the step count the checkpoint records.

use crate::autograd::Grads;
use crate::memory::Buf;
use crate::nn::{runs_with_grads, Optimizer, OptimizerChoice, OptimizerConfig, ParamStore};
use crate::ops::adagrad_update::AdagradHyper;
use crate::ops::lr::LrAt;
use crate::tensor::{Persistent, Shape};
use crate::Step;
use crate::{Error, Result, Setting};

/// Adagrad's settings (the rate is the run's); the default is PyTorch's:
/// no rate or weight decay, an accumulator starting at 0, eps 1e-10. Set
/// by name: `AdagradConfig::default().lr_decay(0.01)`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct AdagradConfig {
    /// The rate at update `t` is `lr / (1 + (t − 1)·lr_decay)`.
    pub lr_decay: f64,
    /// L2 penalty added to the gradient (`d = g + wd·p`).
    pub weight_decay: f64,
    /// What the sum of squared gradients starts at.
    pub initial_accumulator_value: f64,
    /// Added to `√sum` so the step stays finite where the sum is 0.
    pub eps: f64,
}

impl Default for AdagradConfig {
    fn default() -> Self {
        let h = AdagradHyper::default();
        Self {
            lr_decay: h.lr_decay,
            weight_decay: h.weight_decay,
            initial_accumulator_value: 0.0,
            eps: h.eps,
        }
    }
}

impl AdagradConfig {
    /// Sets [`lr_decay`](Self::lr_decay).
    pub fn lr_decay(mut self, lr_decay: f64) -> Self {
        self.lr_decay = lr_decay;
        self
    }

    /// Sets [`weight_decay`](Self::weight_decay).
    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        self.weight_decay = weight_decay;
        self
    }

    /// Sets [`initial_accumulator_value`](Self::initial_accumulator_value).
    pub fn initial_accumulator_value(mut self, value: f64) -> Self {
        self.initial_accumulator_value = value;
        self
    }

    /// Sets [`eps`](Self::eps).
    pub fn eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }

    /// These settings as a run's optimizer
    /// ([`crate::train::RunConfig::optimizer`]).
    pub fn choice(self) -> OptimizerChoice {
        OptimizerChoice::new(Adagrad::NAME, self)
    }

    fn hyper(&self) -> AdagradHyper {
        AdagradHyper {
            lr_decay: self.lr_decay,
            weight_decay: self.weight_decay,
            eps: self.eps,
        }
    }
}

/// Adagrad built: its settings, the rate, and the sum of squared gradients, a
/// slab laid out like the parameters.
pub struct Adagrad {
    hyper: AdagradHyper,
    lr: LrAt,
    sum: Buf<f32>,
}

impl Adagrad {
    /// What `--optimizer` calls it.
    pub const NAME: &'static str = "adagrad";
}

impl OptimizerConfig for AdagradConfig {
    fn validate(&self) -> Result<()> {
        let start = self.initial_accumulator_value;
        if !(start.is_finite() && start >= 0.0) {
            return Err(Error::setting(
                Setting::Optimizer,
                format!("Adagrad's initial accumulator value must be 0 or more, got {start}"),
                None,
            ));
        }
        self.hyper()
            .check()
            .map_err(|e| Error::setting(Setting::Optimizer, e.to_string(), None))
    }

    fn build(&self, store: &ParamStore, p: &mut Persistent<'_>, lr: LrAt) -> Result<Box<dyn Optimizer>> {
        self.validate()?;
        // The padding between entries starts there too: its gradient is
        // zero, so it never moves a parameter.
        let slab = Shape::new(&[store.values().len()]);
        let sum = p.filled("adagrad sums", slab, self.initial_accumulator_value as f32)?;
        Ok(Box::new(Adagrad {
            hyper: self.hyper(),
            lr,
            sum,
        }))
    }
}

impl Optimizer for Adagrad {
    fn update<'s>(&self, s: &mut Step<'s>, store: &ParamStore, _grads: &Grads<'s>) -> Result<()> {
        let (values, grads) = (store.values(), store.grads());
        runs_with_grads(s, store, &mut |s, first, last, decays| {
            let span = |slab| store.span(slab, &first, &last);
            let hyper = match decays {
                true => self.hyper,
                false => AdagradHyper {
                    weight_decay: 0.0,
                    ..self.hyper
                },
            };
            s.adagrad_update(span(values)?, span(grads)?, span(self.sum)?, self.lr, hyper)
        })
    }

    fn state(&self) -> Vec<(&'static str, Buf<f32>)> {
        vec![("sum", self.sum)]
    }
}
