//! Backward: the weight's and bias's gradients (`Σ dy·x̂`, `Σ dy`, where
//! the relu passed the gradient) and the input's, from the statistics
//! forward kept and the input, read through `Step::saved`.

use super::{cpu, Fused, Saved};
use super::{
    BN_BACKWARD_FINISH, BN_BACKWARD_INPUT, BN_BACKWARD_INPUT_NHWC, BN_BACKWARD_PARTIAL, BN_BACKWARD_PARTIAL_NHWC,
};
use crate::backend::cuda::{Arg, Grid};
use crate::backend::BackendError;
use crate::memory::FloatBuf;
use crate::ops::Step;
use crate::tensor::{Layout, Shape};
use crate::Result;
use cpu::Mask;

/// `bn_masked`'s mask 3: a relu after a residual, from the pre-activation
/// plus the residual rather than from the output.
const MASK_PLUS_RESIDUAL: u32 = 3;

/// What backward reads besides x to know where the relu passed.
enum MaskSource {
    None,
    Output(FloatBuf),
    Residual(FloatBuf),
}

impl Saved {
    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        let g = self.g;
        let channels = Shape::new(&[g.c]);
        // Σ g·x̂ and Σ g (g: dy where the relu passed it) are the weight's and
        // the bias's gradients, and the training dx needs both: they are
        // summed once, into the parameters' gradient buffers when those want
        // them, else into scratch.
        let gw = match self.weight.requires_grad {
            true => s.grad_buffer(&self.weight, "batch-norm weight grad")?,
            false => s.alloc::<f32>("batch-norm Σ dy·x̂", channels)?.into(),
        };
        let gb = match self.bias.requires_grad {
            true => s.grad_buffer(&self.bias, "batch-norm bias grad")?,
            false => s.alloc::<f32>("batch-norm Σ dy", channels)?.into(),
        };
        // The input may have been dropped under a memory budget and be
        // recomputed here.
        let x = s.saved(&self.x)?;
        let (mean, invstd, w, b) = (self.mean, self.invstd, self.weight.buf, self.bias.buf);
        // Only the relu after a residual reads more than x for its mask
        // (the plain relu's comes from x): the output, or, where a budget
        // dropped it and the residual is at hand, the residual, so that a
        // recomputed output need not live on from the next block's
        // backward to this one.
        let mask = match self.fused {
            Fused::AddRelu => match self.residual {
                Some(r) if s.is_dropped(&self.y) && s.at_hand(&r) => MaskSource::Residual(s.saved(&r)?),
                _ => MaskSource::Output(s.saved(&self.y)?),
            },
            Fused::Nothing | Fused::Relu => MaskSource::None,
        };
        let (y, mask_code) = match mask {
            MaskSource::Output(y) => (Some(y), self.fused.mask_code()),
            MaskSource::Residual(r) => (Some(r), MASK_PLUS_RESIDUAL),
            MaskSource::None => (None, self.fused.mask_code()),
        };
        let partial = g.partials(s, "batch-norm run gradient sums")?;
        s.launch(
            &[
                x.into(),
                gy.into(),
                y.unwrap_or_default().into(),
                mean.into(),
                invstd.into(),
                w.into(),
                b.into(),
                partial.unwrap_or_default().into(),
                gw.into(),
                gb.into(),
            ],
            |v| {
                g.cpu_layout()?;
                let mask = self.mask(v.read(w)?, v.read(b)?, mask_code, y.map(|y| v.read(y)).transpose()?);
                cpu::backward_sums(
                    g.c,
                    g.hw,
                    v.read(x)?,
                    v.read(gy)?,
                    v.read(mean)?,
                    v.read(invstd)?,
                    &mask,
                    v.write(gw)?,
                    v.write(gb)?,
                );
                Ok(())
            },
            |gpu| {
                let partial = partial.ok_or(BackendError::Internal(
                    "batch-norm backward on a GPU without its partial sums",
                ))?;
                let dtype = g.dtype_of(&[Some(x), Some(gy), y])?;
                let [n, c, hw] = g.dims();
                let (runs, run_len) = g.runs();
                match g.layout {
                    Layout::Nchw => gpu.launch(
                        BN_BACKWARD_PARTIAL.of(dtype),
                        g.run_grid(),
                        &[
                            x.into(),
                            gy.into(),
                            y.map_or(Arg::Null, Arg::from),
                            mean.into(),
                            invstd.into(),
                            w.into(),
                            b.into(),
                            partial.into(),
                            n,
                            c,
                            hw,
                            Arg::U32(run_len as u32),
                            Arg::U32(mask_code),
                        ],
                    )?,
                    Layout::Nhwc => gpu.launch(
                        BN_BACKWARD_PARTIAL_NHWC.of(dtype),
                        g.run_grid(),
                        &[
                            x.into(),
                            gy.into(),
                            y.map_or(Arg::Null, Arg::from),
                            mean.into(),
                            invstd.into(),
                            w.into(),
                            b.into(),
                            partial.into(),
                            g.rows(),
                            c,
                            Arg::U32(run_len as u32),
                            Arg::U32(mask_code),
                            Arg::U32(g.nhwc_vec() as u32),
                        ],
                    )?,
                }
                gpu.launch(
                    BN_BACKWARD_FINISH,
                    g.finish_grid(),
                    &[
                        partial.into(),
                        invstd.into(),
                        gw.into(),
                        gb.into(),
                        Arg::U32(runs as u32),
                        c,
                    ],
                )?;
                Ok(())
            },
        )?;
        let residual = self.residual.filter(|r| r.requires_grad);
        // Nothing reads the output's gradient after this op (but the one
        // backward started from, the caller's): one of the gradients it
        // makes goes into those bytes instead of new ones, the residual's
        // where there is one (the input's needs the masked values only), so
        // a block's backward holds two such tensors at once, not three.
        // A parameter's gradient goes to its slot of the gradient slab
        // instead (see `Step::grad_buffer`).
        let reuse = s.owns_grad(&self.y);
        let gx = match self.x.requires_grad {
            true if reuse && residual.is_none() && !s.is_param(&self.x) => Some(gy),
            true => Some(s.alloc_like("batch-norm input grad", &self.x)?),
            false => None,
        };
        let gr = match residual {
            Some(r) if reuse && !s.is_param(&r) => Some(gy),
            Some(r) => Some(s.grad_buffer(&r, "batch-norm residual grad")?),
            None => None,
        };
        if reuse && (gx == Some(gy) || gr == Some(gy)) {
            s.release_grad(&self.y);
        }
        if gx.is_some() || gr.is_some() {
            s.launch(
                &[
                    x.into(),
                    gy.into(),
                    y.unwrap_or_default().into(),
                    mean.into(),
                    invstd.into(),
                    w.into(),
                    b.into(),
                    gw.into(),
                    gb.into(),
                    gx.unwrap_or_default().into(),
                    gr.unwrap_or_default().into(),
                ],
                |v| {
                    g.cpu_layout()?;
                    let (wv, bv) = (v.read(w)?, v.read(b)?);
                    let mask = self.mask(wv, bv, mask_code, y.map(|y| v.read(y)).transpose()?);
                    let k = cpu::Channels {
                        mean: v.read(mean)?,
                        invstd: v.read(invstd)?,
                        weight: wv,
                        bias: bv,
                    };
                    let (xv, sums) = (v.read(x)?, (v.read(gw)?, v.read(gb)?));
                    let into = match (gx, gr) {
                        (Some(gx), _) if gx == gy => Some(cpu::InPlace::Input),
                        (gx, Some(gr)) if gr == gy => Some(cpu::InPlace::Residual {
                            gx: gx.map(|gx| v.write(gx)).transpose()?,
                        }),
                        _ => None,
                    };
                    if let Some(into) = into {
                        let t = self.training;
                        cpu::grads_in_place(g.c, g.hw, t, &k, sums, &mask, xv, v.write(gy)?, into);
                        return Ok(());
                    }
                    let gyv = v.read(gy)?;
                    if let Some(gx) = gx {
                        cpu::input_grad(g.c, g.hw, self.training, &k, sums, &mask, xv, gyv, v.write(gx)?);
                    }
                    if let Some(gr) = gr {
                        cpu::passed_grad(g.c, g.hw, &k, &mask, xv, gyv, v.write(gr)?);
                    }
                    Ok(())
                },
                |gpu| {
                    if g.layout == Layout::Nhwc {
                        let dtype = g.dtype_of(&[Some(x), Some(gy), y, gx, gr])?;
                        let [_, c, _] = g.dims();
                        gpu.launch(
                            BN_BACKWARD_INPUT_NHWC.of(dtype),
                            g.nhwc_elementwise_grid(),
                            &[
                                x.into(),
                                gy.into(),
                                y.map_or(Arg::Null, Arg::from),
                                mean.into(),
                                invstd.into(),
                                w.into(),
                                b.into(),
                                gw.into(),
                                gb.into(),
                                gx.map_or(Arg::Null, Arg::from),
                                gr.map_or(Arg::Null, Arg::from),
                                g.rows(),
                                c,
                                Arg::U32(self.training as u32),
                                Arg::U32(mask_code),
                                Arg::U32(g.nhwc_vec() as u32),
                            ],
                        )
                    } else {
                        let dtype = g.dtype_of(&[Some(x), Some(gy), y, gx, gr])?;
                        let [n, c, hw] = g.dims();
                        let vec = g.apply_vec();
                        gpu.launch(
                            BN_BACKWARD_INPUT.of(dtype),
                            Grid::over(g.numel() / vec),
                            &[
                                x.into(),
                                gy.into(),
                                y.map_or(Arg::Null, Arg::from),
                                mean.into(),
                                invstd.into(),
                                w.into(),
                                b.into(),
                                gw.into(),
                                gb.into(),
                                gx.map_or(Arg::Null, Arg::from),
                                gr.map_or(Arg::Null, Arg::from),
                                n,
                                c,
                                hw,
                                Arg::U32(self.training as u32),
                                Arg::U32(mask_code),
                            ],
                        )
                    }
                },
            )?;
        }
        if let Some(gx) = gx {
            s.accumulate(&self.x, gx)?;
        }
        if let (Some(r), Some(gr)) = (residual, gr) {
            s.accumulate(&r, gr)?;
        }
        if self.weight.requires_grad {
            s.accumulate(&self.weight, gw)?;
        }
        if self.bias.requires_grad {
            s.accumulate(&self.bias, gb)?;
        }
        Ok(())
    }

    /// Where the gradient passes, for the CPU kernels.
    /// The CPU's mask for the GPU's `mask_code`, `y` its operand.
    fn mask<'a>(&self, weight: &'a [f32], bias: &'a [f32], mask_code: u32, y: Option<&'a [f32]>) -> Mask<'a> {
        match (self.fused, mask_code, y) {
            (Fused::Relu, _, _) => Mask::PreActivation { weight, bias },
            (Fused::AddRelu, MASK_PLUS_RESIDUAL, Some(residual)) => Mask::PlusResidual { weight, bias, residual },
            (Fused::AddRelu, _, Some(y)) => Mask::Output(y),
            _ => Mask::All,
        }
    }
}
