//! Forward's kernels: the statistics a batch norm normalises with (the
//! batch's, moving the running ones, in training; the running ones in
//! evaluation) and the pass that normalises, adds the residual and applies
//! the relu, which recomputation runs again.

use super::geometry::Geometry;
use super::{cpu, BatchNormArgs, Fused, RunningStats, Saved};
use super::{BN_APPLY, BN_APPLY_NHWC, BN_EVAL_STATS, BN_STATS_FINISH, BN_STATS_PARTIAL, BN_STATS_PARTIAL_NHWC};
use crate::backend::cuda::{Arg, Grid};
use crate::backend::BackendError;
use crate::memory::{Buf, FloatBuf};
use crate::ops::Step;
use crate::tensor::Layout;
use crate::Result;

/// Training's statistics: the batch's mean and inverse std, and the
/// running statistics moved towards them.
pub(super) fn batch_stats(
    s: &mut Step<'_>,
    g: &Geometry,
    x: FloatBuf,
    stats: RunningStats,
    args: BatchNormArgs,
    mean: Buf<f32>,
    invstd: Buf<f32>,
) -> Result<()> {
    let (rm, rv, batches) = (stats.mean.buf(), stats.var.buf(), stats.batches.buf());
    let partial = g.partials(s, "batch-norm run statistics")?;
    s.launch(
        &[
            x.into(),
            partial.unwrap_or_default().into(),
            mean.into(),
            invstd.into(),
            rm.into(),
            rv.into(),
            batches.into(),
        ],
        |v| {
            g.cpu_layout()?;
            cpu::batch_stats(
                g.c,
                g.hw,
                v.read(x)?,
                args,
                cpu::Stats {
                    mean: v.write(mean)?,
                    invstd: v.write(invstd)?,
                    running_mean: v.write(rm)?,
                    running_var: v.write(rv)?,
                },
            );
            v.write(batches)?[0] += 1.0;
            Ok(())
        },
        |gpu| {
            let partial = partial.ok_or(BackendError::Internal(
                "batch-norm statistics on a GPU without their partial sums",
            ))?;
            let [n, c, hw] = g.dims();
            let (runs, run_len) = g.runs();
            let dtype = g.dtype_of(&[Some(x)])?;
            match g.layout {
                Layout::Nchw => gpu.launch(
                    BN_STATS_PARTIAL.of(dtype),
                    g.run_grid(),
                    &[x.into(), partial.into(), n, c, hw, Arg::U32(run_len as u32)],
                )?,
                Layout::Nhwc => gpu.launch(
                    BN_STATS_PARTIAL_NHWC.of(dtype),
                    g.run_grid(),
                    &[
                        x.into(),
                        partial.into(),
                        g.rows(),
                        c,
                        Arg::U32(run_len as u32),
                        Arg::U32(g.nhwc_vec() as u32),
                    ],
                )?,
            }
            gpu.launch(
                BN_STATS_FINISH,
                g.finish_grid(),
                &[
                    partial.into(),
                    mean.into(),
                    invstd.into(),
                    rm.into(),
                    rv.into(),
                    batches.into(),
                    n,
                    hw,
                    Arg::U32(runs as u32),
                    Arg::U32(run_len as u32),
                    Arg::F32(args.momentum),
                    Arg::F32(args.eps),
                    c,
                ],
            )?;
            Ok(())
        },
    )?;
    Ok(())
}

/// Evaluation's statistics: the running ones.
pub(super) fn eval_stats(
    s: &mut Step<'_>,
    g: &Geometry,
    stats: RunningStats,
    args: BatchNormArgs,
    mean: Buf<f32>,
    invstd: Buf<f32>,
) -> Result<()> {
    let (rm, rv) = (stats.mean.buf(), stats.var.buf());
    s.launch(
        &[rm.into(), rv.into(), mean.into(), invstd.into()],
        |v| {
            cpu::eval_stats(v.read(rm)?, v.read(rv)?, args.eps, v.write(mean)?, v.write(invstd)?);
            Ok(())
        },
        |gpu| {
            gpu.launch(
                BN_EVAL_STATS,
                Grid::over(g.c),
                &[
                    rm.into(),
                    rv.into(),
                    mean.into(),
                    invstd.into(),
                    Arg::U32(g.c as u32),
                    Arg::F32(args.eps),
                ],
            )
        },
    )?;
    Ok(())
}

impl Saved {
    /// Writes the forward's output into `y`: normalised, plus the residual,
    /// through the relu, as `fused` says. Recomputation calls it again with
    /// the same inputs, so it gives the same bits, `y` being `x` or not
    /// (each value is read before it is written, by the same thread).
    pub(super) fn apply(&self, s: &mut Step<'_>, x: FloatBuf, r: Option<FloatBuf>, y: FloatBuf) -> Result<()> {
        let g = self.g;
        let (w, b) = (self.weight.buf, self.bias.buf);
        let relu = self.fused != Fused::Nothing;
        s.launch(
            &[
                x.into(),
                self.mean.into(),
                self.invstd.into(),
                w.into(),
                b.into(),
                r.unwrap_or_default().into(),
                y.into(),
            ],
            |v| {
                g.cpu_layout()?;
                let residual = match r {
                    Some(r) => Some(v.read(r)?),
                    None => None,
                };
                cpu::normalize(
                    g.c,
                    g.hw,
                    cpu::Channels {
                        mean: v.read(self.mean)?,
                        invstd: v.read(self.invstd)?,
                        weight: v.read(w)?,
                        bias: v.read(b)?,
                    },
                    match x == y {
                        true => cpu::Input::InPlace,
                        false => cpu::Input::Of(v.read(x)?),
                    },
                    residual,
                    relu,
                    v.write(y)?,
                );
                Ok(())
            },
            |gpu| {
                if g.layout == Layout::Nhwc {
                    let dtype = g.dtype_of(&[Some(x), r, Some(y)])?;
                    let [_, c, _] = g.dims();
                    gpu.launch(
                        BN_APPLY_NHWC.of(dtype),
                        g.nhwc_elementwise_grid(),
                        &[
                            x.into(),
                            self.mean.into(),
                            self.invstd.into(),
                            w.into(),
                            b.into(),
                            r.map_or(Arg::Null, Arg::from),
                            y.into(),
                            g.rows(),
                            c,
                            Arg::U32(relu as u32),
                            Arg::U32(g.nhwc_vec() as u32),
                        ],
                    )
                } else {
                    let dtype = g.dtype_of(&[Some(x), r, Some(y)])?;
                    let [n, c, hw] = g.dims();
                    let vec = g.apply_vec();
                    gpu.launch(
                        BN_APPLY.of(dtype),
                        Grid::over(g.numel() / vec),
                        &[
                            x.into(),
                            self.mean.into(),
                            self.invstd.into(),
                            w.into(),
                            b.into(),
                            r.map_or(Arg::Null, Arg::from),
                            y.into(),
                            n,
                            c,
                            hw,
                            Arg::U32(relu as u32),
                            Arg::U32(vec as u32),
                        ],
                    )
                }
            },
        )?;
        Ok(())
    }
}
