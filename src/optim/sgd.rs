//! Stochastic gradient descent, PyTorch's update rule:
//! `v = μ·v + g; p -= lr·v` (with `μ = 0`, plainly `p -= lr·g`).
//!
//! The learning rate lives in the persistent region, so kernels read it
//! there: a captured step graph then follows a change made between steps.
//! On a GPU every parameter is updated by one launch (a table of up to
//! eight tensors per launch).

use crate::autograd::{Grads, Step};
use crate::backend::cuda::{Arg, Grid, Kernel};
use crate::backend::Backend;
use crate::memory::{Arena, ArenaError, Buf, Persistent, Touch};
use crate::ops::CHUNK;
use crate::tensor::{Param, Shape};
use crate::{Error, Result};
use rayon::prelude::*;

pub(crate) const CUDA_SOURCE: &str = include_str!("sgd.cu");

/// Tensors per GPU launch: the kernel's table size.
const TABLE: usize = 8;

pub struct Sgd {
    lr: f32,
    /// The learning rate where kernels read it.
    lr_buf: Buf<f32>,
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
        let lr_buf = p.upload("sgd learning rate", Shape::new(&[1]), &[lr])?;
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
        Ok(Self {
            lr,
            lr_buf,
            momentum,
            velocity,
        })
    }

    pub fn lr(&self) -> f32 {
        self.lr
    }

    /// Changes the learning rate for the following steps (captured ones too).
    pub fn set_lr(&mut self, arena: &mut Arena, lr: f32) -> Result<()> {
        if !(lr.is_finite() && lr > 0.0) {
            return Err(Error::Config(format!("learning rate must be positive, got {lr}")));
        }
        arena.write_persistent(self.lr_buf, &[lr])?;
        self.lr = lr;
        Ok(())
    }

    /// The momentum buffers, by parameter (for checkpoints).
    pub fn velocities(&self) -> impl Iterator<Item = (Param, Buf<f32>)> + '_ {
        self.velocity.iter().filter_map(|(p, v)| v.map(|v| (*p, v)))
    }

    /// Updates every parameter that received a gradient in this step.
    pub fn update<'s>(&self, s: &mut Step<'s>, grads: &Grads<'s>) -> Result<()> {
        let mu = self.momentum;
        let mut table = Table::default();
        for (param, velocity) in &self.velocity {
            let Some(g) = s.param_grad(grads, param).map(|g| g.buf()) else {
                continue;
            };
            match s.uses(&[
                param.buf().into(),
                g.into(),
                self.lr_buf.into(),
                velocity.unwrap_or_default().into(),
            ]) {
                Backend::Cpu(cpu) => cpu.run(|v, _| {
                    let lr = v.read(self.lr_buf)?[0];
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
                Backend::Cuda(_) => {
                    table.push(param.buf(), g, velocity.unwrap_or(param.buf()));
                    if table.count == TABLE {
                        table.launch(s, self.lr_buf, mu)?;
                    }
                }
                Backend::Dry(_) => {}
            }
        }
        if table.count > 0 {
            table.launch(s, self.lr_buf, mu)?;
        }
        Ok(())
    }
}

/// Up to [`TABLE`] (parameter, gradient, velocity) triples for one launch.
#[derive(Default)]
struct Table {
    params: [Buf<f32>; TABLE],
    grads: [Buf<f32>; TABLE],
    velocity: [Buf<f32>; TABLE],
    /// Prefix sums of the tensors' lengths.
    start: [u32; TABLE + 2],
    count: usize,
}

impl Table {
    fn push(&mut self, param: Buf<f32>, grad: Buf<f32>, velocity: Buf<f32>) {
        let k = self.count;
        self.params[k] = param;
        self.grads[k] = grad;
        self.velocity[k] = velocity;
        self.start[k + 1] = self.start[k] + param.len() as u32;
        self.count += 1;
    }

    fn launch(&mut self, s: &mut Step<'_>, lr: Buf<f32>, mu: f32) -> Result<(), ArenaError> {
        let total = self.start[self.count] as usize;
        let mut touches = [Touch::from(lr); 3 * TABLE + 1];
        let tensors = self.params.iter().chain(&self.grads).chain(&self.velocity);
        for (t, b) in touches.iter_mut().zip(tensors) {
            *t = (*b).into();
        }
        if let Backend::Cuda(gpu) = s.uses(&touches) {
            gpu.launch(
                Kernel::SgdMulti,
                Grid::over(total),
                &[
                    Arg::Addresses(&self.params),
                    Arg::Addresses(&self.grads),
                    Arg::Addresses(&self.velocity),
                    Arg::U32s(&self.start),
                    Arg::U32(self.count as u32),
                    lr.into(),
                    Arg::F32(mu),
                ],
            )?;
        }
        *self = Self::default();
        Ok(())
    }
}
