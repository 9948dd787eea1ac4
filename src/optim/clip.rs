//! Gradient clipping by norm, whatever the optimizer: the update of a
//! clipped optimizer first does what `torch.nn.utils.clip_grad_norm_(params,
//! max_norm)` does to the gradients of every parameter that received one in
//! the step (the 2-norm over all of them, each multiplied in place by
//! `min(1, max_norm / (norm + 1e-6))`), then the optimizer's own update.
//!
//! All of it runs on the device inside the step ([`crate::ops::clip_grad_norm`]):
//! the norm and coefficient stay in the persistent region where the next
//! launch reads them, so a captured step graph clips on every replay and
//! nothing waits for the host. The norms add up there too; the epoch reads
//! their mean back with its other figures ([`Optimizer::clip_figures`]).

use crate::autograd::Grads;
use crate::memory::Buf;
use crate::nn::{runs_with_grads, Optimizer, OptimizerChoice, OptimizerConfig, ParamStore};
use crate::ops::clip_grad_norm::ClipBufs;
use crate::ops::lr::LrAt;
use crate::tensor::Persistent;
use crate::Step;
use crate::{Error, Result, Setting};
use std::fmt;

/// `choice`, its gradients clipped to a 2-norm of `max_norm` before each
/// update.
#[derive(Clone)]
pub struct ClipGradNorm {
    /// The optimizer whose updates are clipped.
    pub inner: OptimizerChoice,
    /// The largest 2-norm of all the gradients together.
    pub max_norm: f32,
}

impl ClipGradNorm {
    /// `inner`, clipped to `max_norm`, under `inner`'s name.
    pub fn around(inner: OptimizerChoice, max_norm: f32) -> OptimizerChoice {
        let name = inner.name();
        OptimizerChoice::new(name, Self { inner, max_norm })
    }
}

/// The optimizer's own settings, then the clip's (a checkpoint's
/// fingerprint holds them: a run resumes only with the same clip).
impl fmt::Debug for ClipGradNorm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} clip_grad_norm {}", self.inner.settings(), self.max_norm)
    }
}

impl OptimizerConfig for ClipGradNorm {
    fn validate(&self) -> Result<()> {
        if !(self.max_norm.is_finite() && self.max_norm > 0.0) {
            return Err(Error::setting(
                Setting::Optimizer,
                format!("the gradients' largest norm must be above 0, got {}", self.max_norm),
                None,
            ));
        }
        self.inner.validate()
    }

    fn build(&self, store: &ParamStore, p: &mut Persistent<'_>, lr: LrAt) -> Result<Box<dyn Optimizer>> {
        self.validate()?;
        let inner = self.inner.build(store, p, lr)?;
        Ok(Box::new(Clipped {
            inner,
            max_norm: self.max_norm,
            bufs: ClipBufs::new(p)?,
        }))
    }
}

struct Clipped {
    inner: Box<dyn Optimizer>,
    max_norm: f32,
    bufs: ClipBufs,
}

impl Optimizer for Clipped {
    fn update<'s>(&self, s: &mut Step<'s>, store: &ParamStore, grads: &Grads<'s>) -> Result<()> {
        let slab = store.grads();
        let mut first = true;
        runs_with_grads(s, store, &mut |s, a, b, _| {
            s.clip_sum_squares(store.span(slab, &a, &b)?, self.bufs, first)?;
            first = false;
            Ok(())
        })?;
        // No gradient at all: nothing to clip (PyTorch's norm is 0).
        if !first {
            s.clip_coefficient(self.bufs, self.max_norm)?;
            runs_with_grads(s, store, &mut |s, a, b, _| {
                s.clip_scale(store.span(slab, &a, &b)?, self.bufs)
            })?;
        }
        self.inner.update(s, store, grads)
    }

    fn state(&self) -> Vec<(&'static str, Buf<f32>)> {
        self.inner.state()
    }

    fn clip_figures(&self) -> Option<Buf<f32>> {
        Some(self.bufs.figures)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Device;
    use crate::nn::Init;
    use crate::ops::cursor::StepCursor;
    use crate::optim::SgdConfig;
    use crate::tensor::{Param, Shape};
    use crate::Engine;

    /// Plain SGD at rate 1 after a clip to norm 1: `p −= c·g` for the
    /// parameters with a gradient (their norm alone sets `c`), nothing for
    /// one without, however large the stale gradient in its slot.
    #[test]
    fn the_update_clips_the_gradients_of_the_parameters_that_have_one() {
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
        let table = p.upload("lr", Shape::new(&[1]), &[1.0]).unwrap();
        let clipped = ClipGradNorm::around(SgdConfig::default().choice(), 1.0);
        let sgd = clipped.build(&store, &mut p, LrAt::new(table, cursor)).unwrap();
        assert!(
            clipped.describe().ends_with("clip_grad_norm 1"),
            "{}",
            clipped.describe()
        );
        engine.write_persistent(idle.grad(), &[70.0, 70.0]).unwrap();
        let step = |engine: &mut Engine, w: &Param, x: [f32; 2]| {
            engine
                .step(|s| {
                    // ∂(x · wᵀ)/∂w = x.
                    let x = s.input("x", Shape::new(&[1, 2]), &x)?;
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
        // g = [3, 4], norm 5: c = 1/(5 + 1e-6), g becomes [0.6, 0.8] (to f32).
        step(&mut engine, &used, [3.0, 4.0]);
        let c = 1.0f32 / (5.0 + 1e-6);
        assert_eq!(read(&mut engine, used.grad()), [3.0 * c, 4.0 * c]);
        assert_eq!(read(&mut engine, used.buf()), [1.0 - 3.0 * c, 1.0 - 4.0 * c]);
        assert_eq!(read(&mut engine, idle.buf()), [3.0, 3.0], "no gradient, no update");
        let figures = sgd.clip_figures().expect("a clip's figures");
        assert_eq!(read(&mut engine, figures), [5.0, c, 5.0, 1.0]);
        // A norm below 1 is left alone.
        let before = read(&mut engine, used.buf());
        step(&mut engine, &used, [0.25, 0.5]);
        assert_eq!(read(&mut engine, used.grad()), [0.25, 0.5]);
        assert_eq!(read(&mut engine, used.buf()), [before[0] - 0.25, before[1] - 0.5]);
    }

    #[test]
    fn a_largest_norm_not_above_zero_is_refused_with_the_optimizers_settings() {
        for bad in [0.0, -1.0, f32::NAN] {
            let err = ClipGradNorm::around(SgdConfig::default().choice(), bad)
                .validate()
                .unwrap_err()
                .to_string();
            assert!(err.contains("the gradients' largest norm must be above 0"), "{err}");
        }
    }
}
