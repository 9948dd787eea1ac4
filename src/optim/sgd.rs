//! Stochastic gradient descent, PyTorch's update rule:
//! `v = μ·v + g; p -= lr·v` (with `μ = 0`, plainly `p -= lr·g`).
//!
//! The learning rate lives in the persistent region, so kernels read it
//! there: a captured step graph then follows a change made between steps.
//! On a GPU every parameter is updated by one launch (a table of up to
//! eight tensors per launch).

use crate::autograd::{Grads, Step};
use crate::backend::cuda::{Arg, Grid, KernelSource};
use crate::backend::Backend;
use crate::memory::{Arena, ArenaError, Buf, Persistent, Touch};
use crate::ops::CHUNK;
use crate::tensor::{Param, Shape};
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
                SGD_MULTI,
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Device;

    /// A `[values.len(), 1]` parameter and a second, `[2, 1]`, that no step
    /// uses, with an SGD over both.
    fn setup(values: &[f32], lr: f32, momentum: f32) -> (Arena, Param, Param, Sgd) {
        let mut arena = Arena::new(Device::cpu(1).unwrap(), 1 << 16).unwrap();
        let mut p = arena.persistent();
        let w = p.param("w", Shape::new(&[values.len(), 1]), values).unwrap();
        let idle = p.param("idle", Shape::new(&[2, 1]), &[3.0, -3.0]).unwrap();
        let sgd = Sgd::new(&[w, idle], &mut p, lr, momentum).unwrap();
        (arena, w, idle, sgd)
    }

    /// One step whose gradient for `w` is exactly `g`: `y = x · wᵀ` with
    /// `x = [[1]]` makes `∂⟨y, g⟩/∂w = g`. Returns `w` after the update.
    fn step(arena: &mut Arena, sgd: &Sgd, w: &Param, g: &[f32]) -> Vec<f32> {
        arena
            .step(|s| {
                let x = s.input("x", Shape::new(&[1, 1]), &[1.0])?;
                let weight = s.param(w);
                let y = x.linear(s, weight, None)?;
                let upstream = s.input("g", y.shape(), g)?;
                let grads = s.backward_from(y, upstream)?;
                sgd.update(s, &grads)
            })
            .unwrap();
        let mut out = vec![0.0; w.shape().numel()];
        arena.read_param(w, &mut out).unwrap();
        out
    }

    fn velocity(arena: &mut Arena, sgd: &Sgd, w: &Param) -> Vec<f32> {
        let (_, v) = sgd
            .velocities()
            .find(|(p, _)| p.buf() == w.buf())
            .expect("a momentum buffer");
        let mut out = vec![0.0; v.len()];
        arena.read_persistent(v, &mut out).unwrap();
        out
    }

    // Every figure below is exact in binary, so the updates are compared
    // bit for bit with the hand-computed sequence.

    #[test]
    fn plain_sgd_subtracts_lr_times_the_gradient() {
        let (mut arena, w, idle, sgd) = setup(&[1.0, -2.0, 0.5], 0.5, 0.0);
        assert_eq!(sgd.velocities().count(), 0, "no momentum, no buffers");
        // p1 = p0 - 0.5 g1;  p2 = p1 - 0.5 g2.
        assert_eq!(step(&mut arena, &sgd, &w, &[1.0, -1.0, 0.25]), [0.5, -1.5, 0.375]);
        assert_eq!(step(&mut arena, &sgd, &w, &[2.0, 0.0, -0.5]), [-0.5, -1.5, 0.625]);
        let mut untouched = [0.0; 2];
        arena.read_param(&idle, &mut untouched).unwrap();
        assert_eq!(untouched, [3.0, -3.0], "a parameter without a gradient is not updated");
    }

    #[test]
    fn momentum_follows_pytorchs_rule() {
        // v = 0.5 v + g;  p -= 0.5 v.
        let (mut arena, w, idle, sgd) = setup(&[1.0, 4.0], 0.5, 0.5);
        assert_eq!(sgd.velocities().count(), 2, "one buffer per parameter");
        // v1 = g1 = [1, -2];            p1 = [0.5, 5]
        assert_eq!(step(&mut arena, &sgd, &w, &[1.0, -2.0]), [0.5, 5.0]);
        assert_eq!(velocity(&mut arena, &sgd, &w), [1.0, -2.0]);
        // v2 = [0.5, -1] + [1, 1] = [1.5, 0];   p2 = [-0.25, 5]
        assert_eq!(step(&mut arena, &sgd, &w, &[1.0, 1.0]), [-0.25, 5.0]);
        assert_eq!(velocity(&mut arena, &sgd, &w), [1.5, 0.0]);
        // v3 = [0.75, 0] + [0, 0] = [0.75, 0]: momentum moves p with no gradient.
        assert_eq!(step(&mut arena, &sgd, &w, &[0.0, 0.0]), [-0.625, 5.0]);
        assert_eq!(velocity(&mut arena, &sgd, &w), [0.75, 0.0]);
        assert_eq!(velocity(&mut arena, &sgd, &idle), [0.0, 0.0], "unused, never decayed");
    }

    #[test]
    fn set_lr_changes_the_next_update_and_nothing_before_it() {
        let (mut arena, w, _, mut sgd) = setup(&[1.0], 0.5, 0.5);
        assert_eq!(step(&mut arena, &sgd, &w, &[1.0]), [0.5]); // v = 1
        sgd.set_lr(&mut arena, 0.25).unwrap();
        assert_eq!(sgd.lr(), 0.25);
        assert_eq!(
            velocity(&mut arena, &sgd, &w),
            [1.0],
            "set_lr leaves the momentum alone"
        );
        // v = 0.5 + 1 = 1.5;  p = 0.5 - 0.25 · 1.5
        assert_eq!(step(&mut arena, &sgd, &w, &[1.0]), [0.125]);
        let err = sgd.set_lr(&mut arena, 0.0).unwrap_err().to_string();
        assert!(err.contains("learning rate must be positive"), "{err}");
        assert_eq!(sgd.lr(), 0.25, "a refused rate changes nothing");
        assert_eq!(step(&mut arena, &sgd, &w, &[0.0]), [0.125 - 0.25 * 0.75]);
    }
}
