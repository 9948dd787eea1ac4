//! What an optimizer is to the engine: state in the persistent region laid
//! out like the parameter slab, an update queued inside the step (so a
//! captured graph replays it), its state named for checkpoints.

use super::params::ParamStore;
use crate::autograd::Grads;
use crate::memory::Buf;
use crate::ops::lr::LrAt;
use crate::tensor::Persistent;
use crate::Result;
use crate::Step;
use std::fmt;
use std::sync::Arc;

/// An optimizer built for one [`ParamStore`].
pub trait Optimizer: Send + Sync {
    /// Updates every parameter that received a gradient in this step, as
    /// one flat launch over the slabs where all did (or one per run of
    /// consecutive parameters that did, as PyTorch skips a parameter whose
    /// gradient is `None`). The rate is read where `LrAt` says, on the device.
    fn update<'s>(&self, s: &mut Step<'s>, store: &ParamStore, grads: &Grads<'s>) -> Result<()>;

    /// The state slabs, each laid out like the parameter slab, with the
    /// name PyTorch's optimizer `state_dict` gives that state per parameter
    /// (`momentum_buffer`, `exp_avg`, `exp_avg_sq`).
    fn state(&self) -> Vec<(&'static str, Buf<f32>)>;

    /// Where a gradient clip keeps its figures, if the update clips:
    /// `[norm, coefficient]` of the last step, then the sum of the norms
    /// and the steps since both were last set to zero (`optim::clip`).
    fn clip_figures(&self) -> Option<Buf<f32>> {
        None
    }
}

/// An optimizer's settings, before it is built.
pub trait OptimizerConfig: fmt::Debug + Clone + Send + Sync + 'static {
    /// Allocates the state in `p` and returns the optimizer.
    fn build(&self, store: &ParamStore, p: &mut Persistent<'_>, lr: LrAt) -> Result<Box<dyn Optimizer>>;

    /// Refuses settings that cannot train, saying which and why.
    fn validate(&self) -> Result<()> {
        Ok(())
    }
}

type Build = dyn Fn(&ParamStore, &mut Persistent<'_>, LrAt) -> Result<Box<dyn Optimizer>> + Send + Sync;

/// An optimizer picked by name with its settings, not yet built.
#[derive(Clone)]
pub struct OptimizerChoice {
    name: &'static str,
    settings: String,
    validate: Arc<dyn Fn() -> Result<()> + Send + Sync>,
    build: Arc<Build>,
}

impl OptimizerChoice {
    /// Optimizer `C` under `name` (as `--optimizer` spells it) with `config`.
    pub fn new<C: OptimizerConfig>(name: &'static str, config: C) -> Self {
        let settings = format!("{config:?}");
        let check = config.clone();
        Self {
            name,
            settings,
            validate: Arc::new(move || check.validate()),
            build: Arc::new(move |store, p, lr| config.build(store, p, lr)),
        }
    }

    /// As `--optimizer` spells it.
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// Every setting, as the settings' `Debug` writes them.
    pub fn settings(&self) -> &str {
        &self.settings
    }

    /// The name and every setting, as a checkpoint's fingerprint records them.
    pub fn describe(&self) -> String {
        format!("{} {}", self.name, self.settings)
    }

    /// Refuses settings that cannot train (see [`OptimizerConfig::validate`]).
    pub fn validate(&self) -> Result<()> {
        (self.validate)()
    }

    /// Builds the optimizer over `store`'s parameters, its state in the
    /// persistent region (see [`OptimizerConfig::build`]).
    pub fn build(&self, store: &ParamStore, p: &mut Persistent<'_>, lr: LrAt) -> Result<Box<dyn Optimizer>> {
        (self.build)(store, p, lr)
    }
}

impl fmt::Debug for OptimizerChoice {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.describe())
    }
}

impl serde::Serialize for OptimizerChoice {
    fn serialize<S: serde::Serializer>(&self, s: S) -> std::result::Result<S::Ok, S::Error> {
        s.serialize_str(&self.describe())
    }
}

/// Runs of consecutive parameters (in store order) that received a
/// gradient in this step, as `(first, last)` entry handles; calls `f` on
/// each. Where every parameter did, that is one run over the whole slab.
pub fn runs_with_grads<'s>(
    s: &mut Step<'s>,
    store: &ParamStore,
    f: &mut dyn FnMut(&mut Step<'s>, crate::tensor::Param, crate::tensor::Param, bool) -> Result<()>,
) -> Result<()> {
    let mut run: Option<(crate::tensor::Param, crate::tensor::Param, bool)> = None;
    for param in store.params() {
        let decays = store.decays(&param);
        if s.has_param_grad(&param) {
            run = Some(match run {
                Some((first, _, d)) if d == decays => (first, param, d),
                Some((first, last, d)) => {
                    // Weight decay changes here: a run of its own.
                    f(s, first, last, d)?;
                    (param, param, decays)
                }
                None => (param, param, decays),
            });
        } else if let Some((first, last, d)) = run.take() {
            f(s, first, last, d)?;
        }
    }
    if let Some((first, last, d)) = run {
        f(s, first, last, d)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Device;
    use crate::nn::Init;
    use crate::tensor::{Param, Shape};
    use crate::Engine;

    /// Three `[2, 2]` parameters; a step that uses those `used` names,
    /// chained as `x · w₁ᵀ · w₂ᵀ …`, and returns the runs with gradients (by
    /// index).
    fn runs(used: &[usize]) -> Vec<(usize, usize)> {
        let mut engine = Engine::new(Device::cpu(1).unwrap(), 1 << 20).unwrap();
        let (store, params) = ParamStore::build(&mut engine.persistent(), 1, |pb| {
            (0..3)
                .map(|i| pb.pp(i).param("weight", Shape::new(&[2, 2]), Init::Constant(1.0)))
                .collect::<Result<Vec<Param>>>()
        })
        .unwrap();
        engine
            .step(|s| {
                let mut h = s.variable("x", Shape::new(&[1, 2]), &[1.0, 2.0])?;
                for &i in used {
                    let w = s.param(&params[i]);
                    h = h.linear(s, w, None)?;
                }
                let one = s.input("upstream", h.shape(), &[1.0, 1.0])?;
                s.backward_from(h, one)?;
                let mut found = Vec::new();
                let index = |p: Param| params.iter().position(|q| *q == p).unwrap();
                runs_with_grads(s, &store, &mut |_, first, last, _| {
                    found.push((index(first), index(last)));
                    Ok(())
                })?;
                Ok(found)
            })
            .unwrap()
    }

    #[test]
    fn parameters_with_gradients_are_updated_in_runs_and_the_rest_skipped() {
        assert_eq!(runs(&[0, 1, 2]), [(0, 2)], "all: one flat update");
        assert_eq!(runs(&[0, 2]), [(0, 0), (2, 2)]);
        assert_eq!(runs(&[1, 2]), [(1, 2)]);
        assert_eq!(runs(&[]), []);
    }
}
