//! The layer on a GPU. Its step's recurrent product, `[B, H] · [H, 4H]`
//! forward and `[B, 4H] · [4H, H]` back, is too small to fill an H200
//! through cuBLAS (26 µs for 134 MFLOP at B 64, H 512: a handful of tiles,
//! each walking all of K), and it is most of the layer's time. So it is
//! our own kernel, split along K into enough blocks to fill the GPU
//! (`Product`), each writing its partial sums in fp32; the step's
//! pointwise kernel adds the parts up where it reads the product, so the
//! split costs no extra pass and the sum's order is fixed (deterministic).
//! `W_hh`'s gradient, one large product over every step, stays cuBLAS's.

use crate::backend::cuda::{float_kernel, Arg, CudaBackend, FloatKernel, Gemm, Grid};
use crate::backend::BackendError;
use crate::memory::{bf16, Buf, FloatBuf};

const PRODUCT: FloatKernel = float_kernel!("lstm_layer_product");
const STEP_FORWARD: FloatKernel = float_kernel!("lstm_layer_step_forward");
const STEP_BACKWARD: FloatKernel = float_kernel!("lstm_layer_step_backward");
const SUM_PARTS: FloatKernel = float_kernel!("lstm_layer_sum_parts");

/// Every entry of the layer's kernel source.
pub(super) const ENTRIES: [&str; 8] = [
    PRODUCT.f32,
    PRODUCT.bf16,
    STEP_FORWARD.f32,
    STEP_FORWARD.bf16,
    STEP_BACKWARD.f32,
    STEP_BACKWARD.bf16,
    SUM_PARTS.f32,
    SUM_PARTS.bf16,
];

/// The product kernel's tile: rows, columns and depth of K per pass
/// (`REC_BM`, `REC_BN`, `REC_BK` in kernels.cu), in blocks of 256 threads.
const TILE_ROWS: usize = 64;
const TILE_COLS: usize = 32;
const TILE_DEPTH: usize = 32;
/// Blocks a product aims for: two for each of an H200's 132 SMs.
const BLOCKS: usize = 264;

/// `P[z] = A · B` over part `z` of K: `A` `[rows, k]` row-major, `B(k, n)`
/// at `k·sbk + n·sbn`, `P` `[parts, rows, cols]` fp32.
pub(super) struct Product {
    pub a: FloatBuf,
    pub b: FloatBuf,
    pub out: Buf<f32>,
    pub rows: usize,
    pub cols: usize,
    pub k: usize,
    pub sbk: usize,
    pub sbn: usize,
}

impl Product {
    /// Parts K is split into: enough blocks to fill the GPU, each part at
    /// least one tile deep.
    pub(super) fn parts(rows: usize, cols: usize, k: usize) -> usize {
        let tiles = cols.div_ceil(TILE_COLS) * rows.div_ceil(TILE_ROWS);
        (BLOCKS / tiles.max(1)).clamp(1, k.div_ceil(TILE_DEPTH).max(1))
    }

    fn launch(&self, gpu: &mut CudaBackend) -> Result<(), BackendError> {
        let parts = Self::parts(self.rows, self.cols, self.k);
        // Each part a whole number of tiles deep.
        let chunk = self.k.div_ceil(parts).div_ceil(TILE_DEPTH) * TILE_DEPTH;
        let row_tiles = self.rows.div_ceil(TILE_ROWS);
        let grid = Grid {
            blocks: (self.cols.div_ceil(TILE_COLS) as u32, (row_tiles * parts) as u32),
            threads: (256, 1),
        };
        let u = |v: usize| Arg::U32(v as u32);
        gpu.launch(
            PRODUCT.of(self.a.dtype()),
            grid,
            &[
                self.a.into(),
                self.b.into(),
                self.out.into(),
                u(self.rows),
                u(self.cols),
                u(self.k),
                u(self.sbk),
                u(self.sbn),
                u(chunk),
                u(row_tiles),
            ],
        )
    }
}

/// One layer's sizes and the buffers both passes read.
#[derive(Clone, Copy)]
pub(super) struct Layer {
    pub steps: usize,
    pub batch: usize,
    pub hidden: usize,
    pub w_hh: FloatBuf,
    pub h: FloatBuf,
    pub c: FloatBuf,
    /// `[slots, B, 4H]`: every step's for backward, else one all share.
    pub acts: FloatBuf,
}

/// Backward's running gradients: `h`'s as fp32 parts, `c`'s, and where
/// `h0`'s goes.
pub(super) struct Carry {
    pub h: Buf<f32>,
    pub parts: usize,
    pub c: FloatBuf,
    pub h0_grad: Option<FloatBuf>,
}

/// `len` elements of `buf` from `first`: one step's slot of a buffer the op
/// sized for every step.
fn part(buf: FloatBuf, first: usize, len: usize) -> Result<FloatBuf, BackendError> {
    buf.slice(first, len)
        .ok_or(BackendError::Internal("an lstm_layer step past the end of its buffer"))
}

impl Layer {
    fn state(&self) -> usize {
        self.batch * self.hidden
    }

    /// Step `t`'s slot of a `[T, B, H]` buffer (`None`: before step 0,
    /// where `initial` stands).
    fn at(&self, buf: FloatBuf, t: Option<usize>, initial: Option<FloatBuf>) -> Result<Option<FloatBuf>, BackendError> {
        match t {
            Some(t) => part(buf, t * self.state(), self.state()).map(Some),
            None => Ok(initial),
        }
    }

    /// Step `t`'s gate activations: slot `t % slots` of `acts`.
    fn acts_at(&self, t: usize) -> Result<FloatBuf, BackendError> {
        let gates = 4 * self.state();
        let slots = (self.acts.len() / gates).max(1);
        part(self.acts, (t % slots) * gates, gates)
    }

    pub(super) fn forward(
        &self,
        gpu: &mut CudaBackend,
        proj: FloatBuf,
        h0: Option<FloatBuf>,
        c0: Option<FloatBuf>,
        from_h: Buf<f32>,
        parts: usize,
    ) -> Result<(), BackendError> {
        let (state, gates) = (self.state(), 4 * self.state());
        for t in 0..self.steps {
            let h_prev = self.at(self.h, t.checked_sub(1), h0)?;
            let c_prev = self.at(self.c, t.checked_sub(1), c0)?;
            if let Some(h_prev) = h_prev {
                // B(k, n) = W_hh[n, k]: W_hhᵀ.
                let product = Product {
                    a: h_prev,
                    b: self.w_hh,
                    out: from_h,
                    rows: self.batch,
                    cols: 4 * self.hidden,
                    k: self.hidden,
                    sbk: 1,
                    sbn: self.hidden,
                };
                product.launch(gpu)?;
            }
            gpu.launch(
                STEP_FORWARD.of(proj.dtype()),
                Grid::over(state),
                &[
                    part(proj, t * gates, gates)?.into(),
                    h_prev.map_or(Arg::Null, |_| from_h.into()),
                    Arg::U32(if h_prev.is_some() { parts as u32 } else { 0 }),
                    c_prev.map_or(Arg::Null, Arg::from),
                    self.acts_at(t)?.into(),
                    part(self.h, t * state, state)?.into(),
                    part(self.c, t * state, state)?.into(),
                    Arg::U32(self.batch as u32),
                    Arg::U32(self.hidden as u32),
                ],
            )?;
        }
        Ok(())
    }

    /// Every step from the last: the gates' gradient into `dgates` (which may
    /// be the activations: each thread reads its four before writing), the
    /// running gradients of `h` and `c` in `carry`, `h0`'s summed at the end.
    pub(super) fn backward(
        &self,
        gpu: &mut CudaBackend,
        (h0, c0): (Option<FloatBuf>, Option<FloatBuf>),
        (dh, dc): (Option<FloatBuf>, Option<FloatBuf>),
        dgates: FloatBuf,
        carry: Carry,
    ) -> Result<(), BackendError> {
        let (state, gates) = (self.state(), 4 * self.state());
        let dtype = dgates.dtype();
        for t in (0..self.steps).rev() {
            let c_prev = self.at(self.c, t.checked_sub(1), c0)?;
            let carried = t + 1 < self.steps;
            let dg = part(dgates, t * gates, gates)?;
            let slot = |b: Option<FloatBuf>| b.map(|b| part(b, t * state, state)).transpose();
            gpu.launch(
                STEP_BACKWARD.of(dtype),
                Grid::over(state),
                &[
                    part(self.acts, t * gates, gates)?.into(),
                    part(self.c, t * state, state)?.into(),
                    c_prev.map_or(Arg::Null, Arg::from),
                    slot(dh)?.map_or(Arg::Null, Arg::from),
                    slot(dc)?.map_or(Arg::Null, Arg::from),
                    if carried { carry.h.into() } else { Arg::Null },
                    Arg::U32(if carried { carry.parts as u32 } else { 0 }),
                    if carried { carry.c.into() } else { Arg::Null },
                    carry.c.into(),
                    dg.into(),
                    Arg::U32(self.batch as u32),
                    Arg::U32(self.hidden as u32),
                ],
            )?;
            if t > 0 || carry.h0_grad.is_some() {
                // B(k, n) = W_hh[k, n]: the gradient reaching h_{t−1}.
                let product = Product {
                    a: dg,
                    b: self.w_hh,
                    out: carry.h,
                    rows: self.batch,
                    cols: self.hidden,
                    k: 4 * self.hidden,
                    sbk: self.hidden,
                    sbn: 1,
                };
                product.launch(gpu)?;
            }
        }
        if let Some(g) = carry.h0_grad.filter(|_| h0.is_some()) {
            gpu.launch(
                SUM_PARTS.of(g.dtype()),
                Grid::over(state),
                &[
                    carry.h.into(),
                    Arg::U32(carry.parts as u32),
                    g.into(),
                    Arg::U32(state as u32),
                ],
            )?;
        }
        Ok(())
    }

    /// `W_hh`'s gradient: `d(gates)[1..]ᵀ · h[..T−1]` in one product, plus
    /// `d(gates)[0]ᵀ · h0`; zeros after one step from a zero state.
    pub(super) fn weight_grad(
        &self,
        gpu: &mut CudaBackend,
        h0: Option<FloatBuf>,
        dgates: FloatBuf,
        gw: FloatBuf,
        workspace: Buf<f32>,
        tf32: bool,
    ) -> Result<(), BackendError> {
        let (hidden, gates) = (self.hidden, 4 * self.state());
        // Column-major: gWᵀ (H × 4H) = h_prevᵀ (H × rows) · d(gates) (rows × 4H).
        let product = |h_prev, dg, rows, beta| Gemm {
            transa: false,
            transb: true,
            m: hidden,
            n: 4 * hidden,
            k: rows,
            a: h_prev,
            lda: hidden,
            b: dg,
            ldb: 4 * hidden,
            beta,
            c: gw,
            ldc: hidden,
            workspace,
            tf32,
        };
        let mut beta = 0.0;
        if self.steps > 1 {
            let rows = (self.steps - 1) * self.batch;
            let (h_prev, dg) = (
                part(self.h, 0, rows * hidden)?,
                part(dgates, gates, (self.steps - 1) * gates)?,
            );
            gpu.gemm(product(h_prev, dg, rows, beta))?;
            beta = 1.0;
        }
        match h0 {
            Some(h0) => gpu.gemm(product(h0, part(dgates, 0, gates)?, self.batch, beta)),
            // One step from a zero state: W_hh had no effect.
            None if beta == 0.0 => match gw {
                FloatBuf::F32(b) => gpu.fill(b, 0.0),
                FloatBuf::Bf16(b) => gpu.fill(b, bf16::ZERO),
            },
            None => Ok(()),
        }
    }
}
