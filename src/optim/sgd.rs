//! Stochastic gradient descent, PyTorch's update rule:
//! `v = μ·v + g; p -= lr·v` (with `μ = 0`, plainly `p -= lr·g`).

use crate::autograd::{Grads, Step};
use crate::backend::cuda::{Arg, Grid, Kernel};
use crate::backend::Backend;
use crate::memory::{Buf, Persistent};
use crate::ops::CHUNK;
use crate::tensor::Param;
use crate::{Error, Result};
use rayon::prelude::*;

pub(crate) const CUDA_SOURCE: &str = include_str!("sgd.cu");

pub struct Sgd {
    lr: f32,
    momentum: f32,
    /// Per parameter: its velocity, when momentum is on.
    velocity: Vec<(Param, Option<Buf<f32>>)>,
}

impl Sgd {
    /// `lr` must be positive and finite, `momentum` in `[0, 1)`.
    pub fn new(params: &[Param], p: &mut Persistent<'_>, lr: f32, momentum: f32) -> Result<Self> {
        if !(lr.is_finite() && lr > 0.0) {
            return Err(Error::Config(format!("learning rate must be positive, got {lr}")));
        }
        if !(0.0..1.0).contains(&momentum) {
            return Err(Error::Config(format!("momentum must be in [0, 1), got {momentum}")));
        }
        let velocity = params
            .iter()
            .map(|param| {
                let v = if momentum > 0.0 {
                    Some(p.zeros::<f32>("sgd momentum", param.shape())?)
                } else {
                    None
                };
                Ok((*param, v))
            })
            .collect::<Result<_>>()?;
        Ok(Self { lr, momentum, velocity })
    }

    pub fn lr(&self) -> f32 {
        self.lr
    }

    /// Updates every parameter that received a gradient in this step.
    pub fn update<'s>(&self, s: &mut Step<'s>, grads: &Grads<'s>) -> Result<()> {
        for (param, velocity) in &self.velocity {
            let Some(g) = s.param_grad(grads, param) else { continue };
            let (lr, mu) = (self.lr, self.momentum);
            match s.backend() {
                Backend::Cpu(cpu) => cpu.run(|v, _| {
                    let (p, g) = (v.write(param.buf())?, v.read(g)?);
                    match velocity {
                        Some(vel) => {
                            let vel = v.write(*vel)?;
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
                    let n = param.buf().len();
                    match velocity {
                        Some(vel) => gpu.launch(
                            Kernel::SgdMomentum,
                            Grid::over(n),
                            &[
                                param.buf().into(),
                                g.into(),
                                (*vel).into(),
                                Arg::U32(n as u32),
                                Arg::F32(lr),
                                Arg::F32(mu),
                            ],
                        )?,
                        None => gpu.launch(
                            Kernel::SgdUpdate,
                            Grid::over(n),
                            &[param.buf().into(), g.into(), Arg::U32(n as u32), Arg::F32(lr)],
                        )?,
                    }
                }
                Backend::Dry(_) => {}
            }
        }
        Ok(())
    }
}
