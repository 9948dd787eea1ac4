//! AdamW, exactly `torch.optim.AdamW`'s update (not AMSGrad): decoupled
//! weight decay `p *= 1 − lr·wd`, moments `m`, `v` with bias correction,
//! `p −= lr/(1 − β₁ᵗ) · m / (√v/√(1 − β₂ᵗ) + eps)`, with `t` the update's
//! number read from the step cursor on the device.
//!
//! Both moments are slabs laid out like the parameters, so the update is
//! one flat launch over the slabs ([`crate::ops::adamw_update`]).

use crate::autograd::Grads;
use crate::memory::Buf;
use crate::nn::{runs_with_grads, Optimizer, OptimizerChoice, OptimizerConfig, ParamStore};
use crate::ops::adamw_update::AdamwHyper;
use crate::ops::lr::LrAt;
use crate::tensor::Persistent;
use crate::Step;
use crate::{Error, Result, Setting};

/// AdamW's settings (the rate is the run's); the default is PyTorch's:
/// betas (0.9, 0.999), eps 1e-8, weight decay 0.01. Set by name:
/// `AdamWConfig::default().betas(0.9, 0.95)`.
#[derive(Debug, Clone, Copy, PartialEq)]
#[non_exhaustive]
pub struct AdamWConfig {
    /// Decay of the gradient's running mean `m` (PyTorch's `betas[0]`).
    pub beta1: f64,
    /// Decay of the squared gradient's running mean `v` (`betas[1]`).
    pub beta2: f64,
    /// Added to `√v` so the step stays finite where `v` is 0.
    pub eps: f64,
    /// Decoupled weight decay: `p *= 1 − lr·wd` before the step.
    pub weight_decay: f64,
}

impl Default for AdamWConfig {
    fn default() -> Self {
        let h = AdamwHyper::default();
        Self {
            beta1: h.beta1,
            beta2: h.beta2,
            eps: h.eps,
            weight_decay: h.weight_decay,
        }
    }
}

impl AdamWConfig {
    /// Sets [`beta1`](Self::beta1) and [`beta2`](Self::beta2), as PyTorch's
    /// `betas`.
    pub fn betas(mut self, beta1: f64, beta2: f64) -> Self {
        (self.beta1, self.beta2) = (beta1, beta2);
        self
    }

    /// Sets [`eps`](Self::eps).
    pub fn eps(mut self, eps: f64) -> Self {
        self.eps = eps;
        self
    }

    /// Sets [`weight_decay`](Self::weight_decay).
    pub fn weight_decay(mut self, weight_decay: f64) -> Self {
        self.weight_decay = weight_decay;
        self
    }

    /// These settings as a run's optimizer
    /// ([`crate::train::RunConfig::optimizer`]).
    pub fn choice(self) -> OptimizerChoice {
        OptimizerChoice::new(AdamW::NAME, self)
    }

    fn hyper(&self) -> AdamwHyper {
        AdamwHyper {
            beta1: self.beta1,
            beta2: self.beta2,
            eps: self.eps,
            weight_decay: self.weight_decay,
        }
    }
}

/// AdamW built: its settings, the rate, and both moments, slabs laid out like
/// the parameters.
pub struct AdamW {
    hyper: AdamwHyper,
    lr: LrAt,
    exp_avg: Buf<f32>,
    exp_avg_sq: Buf<f32>,
}

impl AdamW {
    /// What `--optimizer` calls it.
    pub const NAME: &'static str = "adamw";
}

impl OptimizerConfig for AdamWConfig {
    fn validate(&self) -> Result<()> {
        self.hyper()
            .check()
            .map_err(|e| Error::setting(Setting::Optimizer, e.to_string(), None))
    }

    fn build(&self, store: &ParamStore, p: &mut Persistent<'_>, lr: LrAt) -> Result<Box<dyn Optimizer>> {
        self.validate()?;
        Ok(Box::new(AdamW {
            hyper: self.hyper(),
            lr,
            exp_avg: store.zeros_like_values(p, "adamw first moments")?,
            exp_avg_sq: store.zeros_like_values(p, "adamw second moments")?,
        }))
    }
}

impl Optimizer for AdamW {
    fn update<'s>(&self, s: &mut Step<'s>, store: &ParamStore, _grads: &Grads<'s>) -> Result<()> {
        let (values, grads) = (store.values(), store.grads());
        runs_with_grads(s, store, &mut |s, first, last, decays| {
            let span = |slab| store.span(slab, &first, &last);
            let hyper = match decays {
                true => self.hyper,
                false => AdamwHyper {
                    weight_decay: 0.0,
                    ..self.hyper
                },
            };
            s.adamw_update(
                span(values)?,
                span(grads)?,
                span(self.exp_avg)?,
                span(self.exp_avg_sq)?,
                self.lr,
                hyper,
            )
        })
    }

    fn state(&self) -> Vec<(&'static str, Buf<f32>)> {
        vec![("exp_avg", self.exp_avg), ("exp_avg_sq", self.exp_avg_sq)]
    }
}
