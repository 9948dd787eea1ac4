//! Stochastic gradient descent, exactly `torch.optim.SGD`'s update
//! (dampening 0): `d = g + wd·p; v = μ·v + d; d = nesterov ? d + μ·v : v;
//! p -= lr·d`, with `v` starting at zero (so the first step's `v` is `d`).
//!
//! The momentum buffers are one slab laid out like the parameters, so the
//! update is one flat launch over the slabs ([`crate::ops::sgd_update`]).

use crate::autograd::Grads;
use crate::memory::Buf;
use crate::nn::{runs_with_grads, Optimizer, OptimizerChoice, OptimizerConfig, ParamStore};
use crate::ops::lr::LrAt;
use crate::ops::sgd_update::SgdHyper;
use crate::tensor::Persistent;
use crate::Step;
use crate::{Error, Result, Setting};

/// SGD's settings (the rate is the run's, read from its schedule); the
/// default is PyTorch's: no momentum, no weight decay. Set by name, as
/// `torch.optim.SGD`'s arguments: `SgdConfig::default().momentum(0.9)`.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
#[non_exhaustive]
pub struct SgdConfig {
    /// The velocity's decay `μ`, in [0, 1); 0: plain SGD, no velocity kept.
    pub momentum: f32,
    /// Nesterov's momentum: step along `d + μ·v` rather than `v`.
    pub nesterov: bool,
    /// L2 penalty added to the gradient (`d = g + wd·p`), PyTorch's
    /// `weight_decay`.
    pub weight_decay: f32,
}

impl SgdConfig {
    /// Sets [`momentum`](Self::momentum).
    pub fn momentum(mut self, momentum: f32) -> Self {
        self.momentum = momentum;
        self
    }

    /// Sets [`nesterov`](Self::nesterov).
    pub fn nesterov(mut self, on: bool) -> Self {
        self.nesterov = on;
        self
    }

    /// Sets [`weight_decay`](Self::weight_decay).
    pub fn weight_decay(mut self, weight_decay: f32) -> Self {
        self.weight_decay = weight_decay;
        self
    }

    /// These settings as a run's optimizer
    /// ([`crate::train::RunConfig::optimizer`]).
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

/// SGD built: its settings, the rate, and the velocity, a slab laid out like
/// the parameters.
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
        runs_with_grads(s, store, &mut |s, first, last, decays| {
            let span = |slab| store.span(slab, &first, &last);
            let velocity = self.velocity.map(span).transpose()?;
            let hyper = match decays {
                true => self.hyper,
                false => SgdHyper {
                    weight_decay: 0.0,
                    ..self.hyper
                },
            };
            s.sgd_update(span(values)?, span(grads)?, velocity, self.lr, hyper)
        })
    }

    fn state(&self) -> Vec<(&'static str, Buf<f32>)> {
        self.velocity.map(|v| ("momentum_buffer", v)).into_iter().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Device;
    use crate::nn::Init;
    use crate::ops::cursor::StepCursor;
    use crate::tensor::{Param, Shape};
    use crate::Engine;

    /// Every figure is exact in binary: updates compare bit for bit.
    #[test]
    fn a_parameter_without_a_gradient_keeps_its_values_and_its_momentum() {
        let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
        let mut p = engine.persistent();
        let (store, (used, idle)) = ParamStore::build(&mut p, 1, |pb| {
            Ok((
                pb.param("used", Shape::new(&[1, 2]), Init::Constant(1.0))?,
                pb.param("idle", Shape::new(&[2]), Init::Constant(3.0))?,
            ))
        })
        .unwrap();
        let cursor = StepCursor::new(&mut p).unwrap();
        let table = p.upload("lr", Shape::new(&[1]), &[0.5]).unwrap();
        let config = SgdConfig {
            momentum: 0.5,
            ..SgdConfig::default()
        };
        let sgd = config.build(&store, &mut p, LrAt::new(table, cursor)).unwrap();
        let step = |engine: &mut Engine, w: &Param| {
            engine
                .step(|s| {
                    // ∂(x · wᵀ)/∂w = x = [1, 2].
                    let x = s.input("x", Shape::new(&[1, 2]), &[1.0, 2.0])?;
                    let weight = s.param(w);
                    let y = x.linear(s, weight, None)?;
                    let one = s.input("upstream", y.shape(), &[1.0])?;
                    let grads = s.backward_from(y, one)?;
                    sgd.update(s, &store, &grads)
                })
                .unwrap();
        };
        let read = |engine: &mut Engine, buf: Buf<f32>| {
            let mut out = vec![0.0; buf.len()];
            engine.read_persistent(buf, &mut out).unwrap();
            out
        };
        let velocity = sgd.state()[0].1;
        // What an earlier step that used `idle` would have left in its
        // gradient slot: stale from now on, and never to be applied.
        engine.write_persistent(idle.grad(), &[7.0, 7.0]).unwrap();
        step(&mut engine, &used);
        // v = [1, 2]; p = 1 - 0.5 v.
        assert_eq!(read(&mut engine, used.buf()), [0.5, 0.0]);
        step(&mut engine, &used);
        // v = 0.5 [1, 2] + [1, 2] = [1.5, 3]; p = [0.5, 0] - 0.5 v.
        assert_eq!(read(&mut engine, used.buf()), [-0.25, -1.5]);
        assert_eq!(read(&mut engine, idle.buf()), [3.0, 3.0], "no gradient, no update");
        let slot = store.slot_in(velocity, &idle).unwrap();
        assert_eq!(read(&mut engine, slot), [0.0, 0.0], "and no momentum");
        assert_eq!(sgd.state()[0].0, "momentum_buffer");
    }
}
