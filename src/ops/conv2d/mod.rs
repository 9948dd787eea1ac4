//! conv2d: NCHW, any channel counts, any stride, symmetric zero padding,
//! optional bias. Output sizes are PyTorch's: `(H + 2·padding − KH) / stride + 1`
//! (rounded down), so the kernel must fit the padded input.
//!
//! The CPU kernels compute convolution as matrix products over the patch
//! matrix: per image, `y = W · col` with `W` the `[F, C·KH·KW]` filters and
//! `col` the `[C·KH·KW, OH·OW]` patches (zero where a patch reaches into the
//! padding). Backward forms `dW = Σ dy · colᵀ` and `dx = col2im(Wᵀ · dy)`.
//!
//! Stride 1 without padding (the MNIST CNN) keeps its own kernels in `cpu`:
//! they never write the patch matrix but read its entries from the input in
//! place (implicit im2col), and the recorded losses depend on their exact
//! order of float operations. Stride 1 with padding (ResNet's 3×3 pad-1
//! layers), where the output rows are wide enough, goes through `padded`:
//! each worker copies an image into a padded plane, whose patch rows the
//! sgemm reads in place. Every other geometry goes through `im2col`: each
//! worker writes one image's patch matrix into its own step-region scratch
//! and hands it to the sgemm.
//!
//! On a GPU, cuDNN runs all three passes, each with the algorithm and the
//! step-region workspace its plan chose, except the passes of small valid
//! fp32 convolutions (the MNIST CNN's) that run kernels of our own
//! (`direct`: the forwards and weight gradients, and every pass under
//! `--deterministic`); the bias is our own kernel.

mod bordered;
mod cpu;
mod direct;
mod im2col;
mod padded;
#[cfg(test)]
mod tests;

use crate::autograd::Candidate;
use crate::backend::cuda::{float_kernel, joined, Arg, ConvPass, FloatKernel, Grid, KernelSource};
use crate::backend::{BackendError, ConvDims, Sizing};
use crate::memory::{Buf, DType, FloatBuf};
use crate::ops::Step;
use crate::tensor::{Layout, Shape, Tensor, TensorRef};
use crate::{Error, Result};
use direct::Direct;

/// Its CUDA kernels, handed to a GPU when it opens (see [`crate::ops::KERNELS`]).
pub(crate) const KERNELS: KernelSource = KernelSource {
    owner: "conv2d",
    source: include_str!("kernels.cu"),
    entries: &ENTRIES,
};
const ENTRIES: [&str; 4 + direct::ENTRIES.len()] = joined(
    [
        CONV_BIAS_ADD.f32,
        CONV_BIAS_ADD.bf16,
        CONV_BIAS_GRAD.f32,
        CONV_BIAS_GRAD.bf16,
    ],
    direct::ENTRIES,
);
const CONV_BIAS_ADD: FloatKernel = float_kernel!("conv_bias_add");
const CONV_BIAS_GRAD: FloatKernel = float_kernel!("conv_bias_grad");

/// How a convolution steps over its input. The default, stride 1 and no
/// padding, is a "valid" convolution.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Conv2dArgs {
    /// Rows and columns between consecutive patches (both directions).
    pub stride: usize,
    /// Zero rows above and below, zero columns left and right of each image.
    pub padding: usize,
}

impl Default for Conv2dArgs {
    fn default() -> Self {
        Self { stride: 1, padding: 0 }
    }
}

/// The geometry of a convolution of `x` by `w` (and `bias`), checked once
/// when the op is recorded, so its kernels may assume it; in `dtype` and
/// `layout`, what the step computes in.
fn geometry(
    x: Shape,
    w: Shape,
    bias: Option<Shape>,
    args: Conv2dArgs,
    (dtype, layout): (DType, Layout),
) -> Result<ConvDims> {
    let bad = |detail: String| Err(Error::shape("conv2d", detail));
    if x.rank() != 4 || w.rank() != 4 {
        return bad(format!("input [N, C, H, W] and weight [F, C, KH, KW], got {x} and {w}"));
    }
    let (n, c, h, wd) = (x.dim(0), x.dim(1), x.dim(2), x.dim(3));
    let (f, wc, kh, kw) = (w.dim(0), w.dim(1), w.dim(2), w.dim(3));
    if c != wc {
        return bad(format!("input has {c} channels but weight {w} expects {wc}"));
    }
    if c == 0 || f == 0 {
        return bad(format!("input {x} and weight {w}: no channels or no filters"));
    }
    let Conv2dArgs { stride, padding: pad } = args;
    if stride == 0 {
        return bad("stride 0: patches must advance by at least 1".into());
    }
    // `None` where the padded size overflows: no real input is that large.
    let padded = |d: usize| pad.checked_mul(2).and_then(|p| p.checked_add(d));
    let fits = |k: usize, d: usize| k > 0 && padded(d).is_some_and(|d| k <= d);
    if !fits(kh, h) || !fits(kw, wd) {
        return bad(format!(
            "kernel {kh}×{kw} does not fit input {h}×{wd} with padding {pad}"
        ));
    }
    if let Some(b) = bias {
        if b != Shape::new(&[f]) {
            return bad(format!("bias {b} for {f} filters"));
        }
    }
    let nhwc = layout == Layout::Nhwc;
    Ok(ConvDims::new([n, c, h, wd], [f, kh, kw], stride, pad, dtype, nhwc))
}

/// What the op asks of a geometry beyond its sizes: its output's shape and
/// layout, and which CPU kernels run it and how they split the batch.
impl ConvDims {
    fn output(&self) -> Shape {
        Shape::new(&[self.n, self.f, self.oh(), self.ow()])
    }

    fn layout(&self) -> Layout {
        if self.nhwc {
            Layout::Nhwc
        } else {
            Layout::Nchw
        }
    }

    /// Stride 1 without padding, and a kernel wider than one pixel: the
    /// geometry of the implicit-im2col kernels, tuned for the few channels
    /// and 5×5 filters of the MNIST CNN. A 1×1 convolution is a plain matrix
    /// product, which the explicit path runs as one: the 1×1 convolutions of
    /// a narrow ResNet-50 (8–256 channels on 16×16 to 2×2 maps) took its
    /// CPU epoch from 12.0 to 3.3 s (500 images, batch 50, 2 threads).
    fn is_valid_unit_stride(&self) -> bool {
        self.stride == 1 && self.padding == 0 && (self.kh, self.kw) != (1, 1)
    }

    /// Images per thread in backward, and so the number of partial sums.
    fn images_per_group(&self, threads: usize) -> usize {
        self.n.div_ceil(threads.max(1)).max(1)
    }
}

#[derive(Clone, Copy, Debug)]
pub(crate) struct Saved {
    g: ConvDims,
    x: TensorRef,
    w: TensorRef,
    bias: Option<TensorRef>,
    y: TensorRef,
}

impl<'s> Tensor<'s> {
    /// Convolves `self` `[N, C, H, W]` with `weight` `[F, C, KH, KW]` (plus
    /// `bias` `[F]`), stepping and padding as `args` say: `[N, F, OH, OW]`.
    /// In a mixed-precision step all three are cast to bf16 first (a
    /// parameter's copy is made here, once per use), input and weight
    /// channels last, and so is the output.
    pub fn conv2d(
        self,
        s: &mut Step<'s>,
        weight: Tensor<'s>,
        bias: Option<Tensor<'s>>,
        args: Conv2dArgs,
    ) -> Result<Tensor<'s>> {
        let (dtype, layout) = (s.compute_dtype(), s.compute_layout());
        let g = geometry(
            self.shape(),
            weight.shape(),
            bias.map(|b| b.shape()),
            args,
            (dtype, layout),
        )?;
        let x = self.convert(s, dtype, layout)?;
        let weight = weight.convert(s, dtype, layout)?;
        let bias = bias.map(|b| b.cast(s, dtype)).transpose()?;
        x.convolve(s, g, weight, bias)
    }

    fn convolve(
        self,
        s: &mut Step<'s>,
        g: ConvDims,
        weight: Tensor<'s>,
        bias: Option<Tensor<'s>>,
    ) -> Result<Tensor<'s>> {
        let (what, out) = ("conv2d output", g.output());
        let y = match bias {
            Some(b) => s.output_as(what, out, g.dtype, g.layout(), &[&self, &weight, &b])?,
            None => s.output_as(what, out, g.dtype, g.layout(), &[&self, &weight])?,
        };
        forward_into(s, &g, self.buf(), weight.buf(), bias.map(|b| b.buf()), y.buf())?;
        // Counted in every step, so that a candidate's number is its place
        // in forward order whatever is recorded.
        let size = g.dtype.size();
        let (x_bytes, w_bytes, y_bytes) = (
            self.shape().numel() * size,
            weight.shape().numel() * size,
            g.output().numel() * size,
        );
        // Only planning prices candidates: a training step looks up no plan
        // for it.
        let timed_seconds = s.planning().then(|| timed_forward_seconds(s, &g)).flatten();
        let dropped = s.drops_next_candidate(
            &y.inner,
            [Some(&self.inner), None],
            Candidate {
                what: "conv2d output",
                bytes: y_bytes,
                multiply_adds: (g.output().numel() * g.k()) as u64,
                bytes_moved: (x_bytes + w_bytes + y_bytes) as u64,
                timed_seconds,
                reads: Vec::new(),
                remade: 0,
            },
        );
        if y.requires_grad() {
            let saved = Saved {
                g,
                x: self.inner,
                w: weight.inner,
                bias: bias.map(|b| b.inner),
                y: y.inner,
            };
            s.record(saved);
            if dropped {
                s.recomputable(&y.inner, saved);
            }
        }
        Ok(y)
    }
}

/// Seconds `g`'s forward pass takes on the algorithm the GPU runs it with,
/// by the GPU's timings (`None` on the CPU, and before the algorithms are
/// timed): what recomputing its output costs.
fn timed_forward_seconds(s: &mut Step<'_>, g: &ConvDims) -> Option<f64> {
    match s.sizing() {
        Sizing::Cuda(_) if Direct::runs(g, s.policy(), ConvPass::Forward).is_some() => None,
        Sizing::Cuda(gpu) => gpu
            .conv_plan(*g, s.policy())
            .ok()
            .and_then(|plan| plan.seconds_chosen(ConvPass::Forward)),
        _ => None,
    }
}

/// The forward pass of `g` into `y`: what the op runs, and what backward
/// runs again to recompute a dropped output (the same kernels on the same
/// inputs, so the same bits).
fn forward_into(
    s: &mut Step<'_>,
    g: &ConvDims,
    x: FloatBuf,
    w: FloatBuf,
    bias: Option<FloatBuf>,
    y: FloatBuf,
) -> Result<()> {
    let g = *g;
    let (threads, policy) = (s.threads(), s.policy());
    let packed = scratch(s, &g, ConvPass::Forward)?;
    s.launch(
        &[
            x.into(),
            w.into(),
            bias.unwrap_or_default().into(),
            packed.into(),
            y.into(),
        ],
        |v| {
            let b = match bias {
                Some(b) => Some(v.read(b)?),
                None => None,
            };
            let (x, w, scratch, y) = (v.read(x)?, v.read(w)?, v.write(packed)?, v.write(y)?);
            if g.is_valid_unit_stride() {
                cpu::forward(&g, x, w, b, scratch, y);
            } else if padded::pays(&g, ConvPass::Forward) {
                padded::forward(&g, g.images_per_group(threads), x, w, b, scratch, y);
            } else {
                im2col::forward(&g, g.images_per_group(threads), x, w, b, scratch, y);
            }
            Ok(())
        },
        |gpu| {
            match Direct::runs(&g, policy, ConvPass::Forward) {
                Some(d) => d.forward(gpu, x, w, y)?,
                None => gpu.conv(g, policy, ConvPass::Forward, x, w, packed, y, false)?,
            }
            if let Some(b) = bias {
                gpu.launch(
                    CONV_BIAS_ADD.of(g.dtype),
                    Grid::over(g.output().numel()),
                    &[
                        b.into(),
                        y.into(),
                        Arg::U32(g.n as u32),
                        Arg::U32(g.f as u32),
                        Arg::U32(g.p() as u32),
                        Arg::U32(g.nhwc as u32),
                    ],
                )?;
            }
            Ok(())
        },
    )?;
    Ok(())
}

impl Saved {
    /// The tensors [`Saved::recompute`] reads through [`Step::saved`].
    pub(crate) fn reads(&self) -> [Option<u32>; 2] {
        [Some(self.x.id), None]
    }

    /// The output again, in backward, into a new step buffer (its input
    /// itself read through [`Step::saved`]: it may be recomputed too).
    pub(crate) fn recompute(self, s: &mut Step<'_>) -> Result<FloatBuf> {
        let x = s.saved(&self.x)?;
        let y = s.alloc_like("conv2d output, recomputed", &self.y)?;
        forward_into(s, &self.g, x, self.w.buf, self.bias.map(|b| b.buf), y)?;
        Ok(y)
    }

    pub(crate) fn backward(self, s: &mut Step<'_>) -> Result<()> {
        let Some(gy) = s.grad_of(&self.y) else { return Ok(()) };
        let (g, policy) = (self.g, s.policy());
        if self.w.requires_grad {
            let threads = s.threads();
            // The input may be recomputed here rather than kept (a fused
            // batch-norm relu's output).
            let x = s.saved(&self.x)?;
            let partials = scratch(s, &g, ConvPass::WeightGrad)?;
            let gw = s.grad_buffer(&self.w, "conv2d weight grad")?;
            s.launch(
                &[gy.into(), x.into(), partials.into(), gw.into()],
                |v| {
                    let per_group = g.images_per_group(threads);
                    let (gy, x, scratch, gw) = (v.read(gy)?, v.read(x)?, v.write(partials)?, v.write(gw)?);
                    if g.is_valid_unit_stride() {
                        cpu::weight_grad(&g, per_group, gy, x, scratch, gw);
                    } else if padded::pays(&g, ConvPass::WeightGrad) {
                        padded::weight_grad(&g, per_group, gy, x, scratch, gw);
                    } else {
                        im2col::weight_grad(&g, per_group, gy, x, scratch, gw);
                    }
                    Ok(())
                },
                |gpu| match Direct::runs(&g, policy, ConvPass::WeightGrad) {
                    Some(d) => d.weight_grad(gpu, x, gy, partials.into(), gw),
                    None => gpu.conv(g, policy, ConvPass::WeightGrad, x, gy, partials, gw, false),
                },
            )?;
            s.accumulate(&self.w, gw)?;
        }
        if let Some(b) = self.bias.filter(|b| b.requires_grad) {
            let gb = s.grad_buffer(&b, "conv2d bias grad")?;
            s.launch(
                &[gy.into(), gb.into()],
                |v| {
                    cpu::bias_grad(&g, v.read(gy)?, v.write(gb)?);
                    Ok(())
                },
                |gpu| {
                    gpu.launch(
                        CONV_BIAS_GRAD.of(g.dtype),
                        Grid::blocks(g.f, 256),
                        &[
                            gy.into(),
                            gb.into(),
                            Arg::U32(g.n as u32),
                            Arg::U32(g.f as u32),
                            Arg::U32(g.p() as u32),
                            Arg::U32(g.nhwc as u32),
                        ],
                    )
                },
            )?;
            s.accumulate(&b, gb)?;
        }
        if self.x.requires_grad {
            let threads = s.threads();
            // On a GPU a second contribution to the input's gradient is
            // added by cuDNN itself (beta = 1) into the first.
            let into = s.grad_of(&self.x).filter(|_| matches!(s.sizing(), Sizing::Cuda(_)));
            let packed = scratch(s, &g, ConvPass::InputGrad)?;
            let gx = match into {
                Some(existing) => existing,
                None => s.alloc_like("conv2d input grad", &self.x)?,
            };
            s.launch(
                &[gy.into(), self.w.buf.into(), packed.into(), gx.into()],
                |v| {
                    let (gy, w, scratch, gx) = (v.read(gy)?, v.read(self.w.buf)?, v.write(packed)?, v.write(gx)?);
                    if g.is_valid_unit_stride() {
                        cpu::input_grad(&g, gy, w, scratch, gx);
                    } else if padded::pays(&g, ConvPass::InputGrad) {
                        padded::input_grad(&g, g.images_per_group(threads), gy, w, scratch, gx);
                    } else {
                        im2col::input_grad(&g, g.images_per_group(threads), gy, w, scratch, gx);
                    }
                    Ok(())
                },
                |gpu| match Direct::runs(&g, policy, ConvPass::InputGrad) {
                    Some(d) => d.input_grad(gpu, gy, self.w.buf, gx, into.is_some()),
                    None => gpu.conv(
                        g,
                        policy,
                        ConvPass::InputGrad,
                        self.w.buf,
                        gy,
                        packed,
                        gx,
                        into.is_some(),
                    ),
                },
            )?;
            if into.is_none() {
                s.accumulate(&self.x, gx)?;
            }
        }
        Ok(())
    }
}

/// A pass's scratch in the step region, sized for the device: the CPU
/// kernels' packed filters, per-thread partial sums or per-thread patch
/// matrices, or cuDNN's workspace for the algorithm its plan chose.
fn scratch(s: &mut Step<'_>, g: &ConvDims, pass: ConvPass) -> Result<Buf<f32>> {
    let direct = Direct::runs(g, s.policy(), pass);
    let (what, len) = match s.sizing() {
        Sizing::Cpu { threads } if padded::pays(g, pass) => {
            let groups = g.n.div_ceil(g.images_per_group(threads));
            match pass {
                ConvPass::Forward => ("conv2d padded images", padded::forward_scratch_len(g, groups)),
                ConvPass::InputGrad => (
                    "conv2d flipped filters and padded grads",
                    padded::input_grad_scratch_len(g, groups),
                ),
                ConvPass::WeightGrad => (
                    "conv2d weight-grad partial sums and padded images",
                    padded::weight_grad_scratch_len(g, groups),
                ),
            }
        }
        Sizing::Cpu { threads } if !g.is_valid_unit_stride() => {
            let groups = g.n.div_ceil(g.images_per_group(threads));
            match pass {
                ConvPass::Forward => ("conv2d patch matrices", im2col::forward_scratch_len(g, groups)),
                ConvPass::InputGrad => ("conv2d patch-matrix grads", im2col::input_grad_scratch_len(g, groups)),
                ConvPass::WeightGrad => (
                    "conv2d weight-grad partial sums and patch matrices",
                    im2col::weight_grad_scratch_len(g, groups),
                ),
            }
        }
        Sizing::Cpu { threads } => match pass {
            ConvPass::Forward => ("conv2d packed filters", cpu::forward_packed_len(g)),
            ConvPass::InputGrad => ("conv2d packed filters (input grad)", cpu::input_grad_packed_len(g)),
            ConvPass::WeightGrad => (
                "conv2d weight-grad partial sums",
                g.n.div_ceil(g.images_per_group(threads)) * g.f * g.k(),
            ),
        },
        Sizing::Cuda(_) if direct.is_some() => match (pass, direct) {
            (ConvPass::WeightGrad, Some(d)) => ("conv2d weight-grad partial sums", d.weight_grad_scratch_len()),
            _ => ("conv2d direct kernels' scratch (none)", 0),
        },
        Sizing::Cuda(gpu) => {
            let plan = gpu.conv_plan(*g, s.policy()).map_err(BackendError::from)?;
            s.note_slower(|| plan.seconds_lost(pass));
            let len = plan.workspace_bytes(pass).div_ceil(4);
            let workspace = s.alloc::<f32>("cuDNN workspace", Shape::new(&[len]))?;
            // A memory budget holds down the workspaces where the step
            // peaks and no others: the plan must say whose this is.
            s.tag_last(plan.workspace_tag(pass));
            return Ok(workspace);
        }
    };
    s.alloc::<f32>(what, Shape::new(&[len]))
}
