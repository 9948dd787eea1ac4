//! Stochastic gradient descent, exactly `torch.optim.SGD`'s update
//! (dampening 0): `d = g + wd·p; v = μ·v + d; d = nesterov ? d + μ·v : v;
//! p -= lr·d`, with `v` starting at zero (so the first step's `v` is `d`).
//!
//! The momentum buffers are one slab laid out like the parameters, so the
//! update is one flat launch over the slabs.

use crate::autograd::{Grads, Step};
use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::backend::Backend;
use crate::memory::{Buf, Persistent};
use crate::nn::{runs_with_grads, Optimizer, OptimizerChoice, OptimizerConfig, ParamStore};
use crate::ops::lr::LrAt;
use crate::ops::CHUNK;
use crate::{Error, Result};
use rayon::prelude::*;

/// Its CUDA kernel, handed to a GPU when it opens: `ops::KERNELS` lists it
/// until SGD's update becomes an op of its own.
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "sgd",
    source: include_str!("sgd.cu"),
    entries: &[SGD_MULTI],
};
const SGD_MULTI: &str = "sgd_multi";

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
}

pub struct Sgd {
    config: SgdConfig,
    lr: LrAt,
    /// One momentum buffer per parameter, in one slab; `None` without momentum.
    velocity: Option<Buf<f32>>,
}

impl Sgd {
    pub const NAME: &'static str = "sgd";
}

impl OptimizerConfig for SgdConfig {
    fn validate(&self) -> Result<()> {
        if !(0.0..1.0).contains(&self.momentum) {
            return Err(Error::Config(format!(
                "momentum must be in [0, 1), got {}",
                self.momentum
            )));
        }
        if self.nesterov && self.momentum == 0.0 {
            return Err(Error::Config("Nesterov momentum needs a momentum above 0".into()));
        }
        if !(self.weight_decay.is_finite() && self.weight_decay >= 0.0) {
            return Err(Error::Config(format!(
                "weight decay must be 0 or more, got {}",
                self.weight_decay
            )));
        }
        Ok(())
    }

    fn build(&self, store: &ParamStore, p: &mut Persistent<'_>, lr: LrAt) -> Result<Box<dyn Optimizer>> {
        self.validate()?;
        let velocity = match self.momentum > 0.0 {
            true => Some(store.zeros_like_values(p, "sgd momentum")?),
            false => None,
        };
        Ok(Box::new(Sgd {
            config: *self,
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
            let p = span(values)?;
            let g = span(grads)?;
            let v = self.velocity.map(span).transpose()?;
            self.apply(s, p, g, v)
        })
    }

    fn state(&self) -> Vec<(&'static str, Buf<f32>)> {
        self.velocity.map(|v| ("momentum_buffer", v)).into_iter().collect()
    }
}

impl Sgd {
    fn apply(&self, s: &mut Step<'_>, param: Buf<f32>, g: Buf<f32>, velocity: Option<Buf<f32>>) -> Result<()> {
        let mu = self.config.momentum;
        let lr_buf = self.lr.table;
        match s.uses(&[
            param.into(),
            g.into(),
            lr_buf.into(),
            velocity.unwrap_or_default().into(),
        ]) {
            Backend::Cpu(cpu) => cpu.run(|v, _| {
                let lr = v.read(lr_buf)?[0];
                let (p, g) = (v.write(param)?, v.read(g)?);
                match velocity {
                    Some(vel) => {
                        let vel = v.write(vel)?;
                        p.par_chunks_mut(CHUNK)
                            .zip(g.par_chunks(CHUNK).zip(vel.par_chunks_mut(CHUNK)))
                            .for_each(|(p, (g, vel))| {
                                for ((p, g), vel) in p.iter_mut().zip(g).zip(vel) {
                                    *vel = mu * *vel + g;
                                    *p -= lr * *vel;
                                }
                            });
                    }
                    None => p
                        .par_chunks_mut(CHUNK)
                        .zip(g.par_chunks(CHUNK))
                        .for_each(|(p, g)| p.iter_mut().zip(g).for_each(|(p, g)| *p -= lr * g)),
                }
                Ok(())
            })?,
            Backend::Cuda(gpu) => {
                let mut params = [Buf::default(); 8];
                let mut grads = [Buf::default(); 8];
                let mut vel = [Buf::default(); 8];
                let mut start = [0u32; 10];
                params[0] = param;
                grads[0] = g;
                vel[0] = velocity.unwrap_or(param);
                start[1] = param.len() as u32;
                gpu.launch(
                    SGD_MULTI,
                    Grid::over(param.len()),
                    &[
                        Arg::Addresses(&params),
                        Arg::Addresses(&grads),
                        Arg::Addresses(&vel),
                        Arg::U32s(&start),
                        Arg::U32(1),
                        lr_buf.into(),
                        Arg::F32(mu),
                    ],
                )?
            }
            Backend::Dry(_) => {}
        }
        Ok(())
    }
}
