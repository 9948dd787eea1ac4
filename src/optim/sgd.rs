//! Stochastic gradient descent, exactly `torch.optim.SGD`'s update
//! (dampening 0): `d = g + wd·p; v = μ·v + d; d = nesterov ? d + μ·v : v;
//! p -= lr·d`, with `v` starting at zero (so the first step's `v` is `d`).
//!
//! The momentum buffers are one slab laid out like the parameters, so the
//! update is one flat launch over the slabs ([`crate::ops::sgd_update`]).

use crate::autograd::{Grads, Step};
use crate::memory::{Buf, Persistent};
use crate::nn::{runs_with_grads, Optimizer, OptimizerChoice, OptimizerConfig, ParamStore};
use crate::ops::lr::LrAt;
use crate::ops::sgd_update::SgdHyper;
use crate::{Error, Result, Setting};

/// SGD's settings (the rate is the run's, read from its schedule).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SgdConfig {
    pub momentum: f32,
    pub nesterov: bool,
    pub weight_decay: f32,
}

impl SgdConfig {
    pub fn choice(self) -> OptimizerChoice {
        OptimizerChoice::new(Sgd::NAME, self)
    }

    fn hyper(&self) -> SgdHyper {
        SgdHyper {
            momentum: self.momentum,
            nesterov: self.nesterov,
            weight_decay: self.weight_decay,
        }
    }
}

pub struct Sgd {
    hyper: SgdHyper,
    lr: LrAt,
    /// One momentum buffer per parameter, in one slab; `None` without momentum.
    velocity: Option<Buf<f32>>,
}

impl Sgd {
    /// What `--optimizer` calls it.
    pub const NAME: &'static str = "sgd";
}

impl OptimizerConfig for SgdConfig {
    fn validate(&self) -> Result<()> {
        if !(0.0..1.0).contains(&self.momentum) {
            return Err(Error::setting(
                Setting::Optimizer,
                format!("SGD's momentum must be in [0, 1), got {}", self.momentum),
                None,
            ));
        }
        self.hyper()
            .check()
            .map_err(|e| Error::setting(Setting::Optimizer, e.to_string(), None))
    }

    fn build(&self, store: &ParamStore, p: &mut Persistent<'_>, lr: LrAt) -> Result<Box<dyn Optimizer>> {
        self.validate()?;
        let velocity = match self.momentum > 0.0 {
            true => Some(store.zeros_like_values(p, "sgd momentum")?),
            false => None,
        };
        Ok(Box::new(Sgd {
            hyper: self.hyper(),
            lr,
            velocity,
        }))
    }
}

impl Optimizer for Sgd {
    fn update<'s>(&self, s: &mut Step<'s>, store: &ParamStore, _grads: &Grads<'s>) -> Result<()> {
        let (values, grads) = (store.values(), store.grads());
        runs_with_grads(s, store, &mut |s, first, last| {
            let span = |slab| {
                store
                    .span(slab, &first, &last)
                    .ok_or_else(|| Error::Config("internal error: a parameter run outside its slab".into()))
            };
            let velocity = self.velocity.map(span).transpose()?;
            s.sgd_update(span(values)?, span(grads)?, velocity, self.lr, self.hyper)
        })
    }

    fn state(&self) -> Vec<(&'static str, Buf<f32>)> {
        self.velocity.map(|v| ("momentum_buffer", v)).into_iter().collect()
    }
}
