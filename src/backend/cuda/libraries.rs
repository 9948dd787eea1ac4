//! The calls into the NVIDIA libraries a step makes: matrix products
//! through cuBLAS and convolution passes through cuDNN, each checked
//! against the arena and the sizes it implies before the raw call, with its
//! workspace from the step region.

#[cfg(feature = "cuda")]
use super::cudnn::{ConvDims, ConvPass, PassCall};
#[cfg(feature = "cuda")]
use super::{Call, CudaBackend};
#[cfg(feature = "cuda")]
use crate::backend::{BackendError, Policy};
#[cfg(feature = "cuda")]
use crate::base::DType;
use crate::base::{Buf, FloatBuf};
#[cfg(feature = "cuda")]
use cudarc::cublas::sys as blas_sys;
#[cfg(feature = "cuda")]
use std::ffi::c_void;

/// A column-major `c = op(a) · op(b) + beta · c`, cuBLAS's convention.
#[derive(Debug, Clone, Copy)]
// Read only by the GPU backend, which a build without `cuda` has not.
#[cfg_attr(not(feature = "cuda"), allow(dead_code))]
pub struct Gemm {
    pub(crate) transa: bool,
    pub(crate) transb: bool,
    pub(crate) m: usize,
    pub(crate) n: usize,
    pub(crate) k: usize,
    pub(crate) a: FloatBuf,
    pub(crate) lda: usize,
    pub(crate) b: FloatBuf,
    pub(crate) ldb: usize,
    pub(crate) beta: f32,
    pub(crate) c: FloatBuf,
    pub(crate) ldc: usize,
    pub(crate) workspace: Buf<f32>,
    /// Whether an fp32 product may run TF32 tensor-op math (the step's
    /// policy, [`crate::backend::Policy::tf32`]).
    pub(crate) tf32: bool,
}

/// Elements a column-major `rows × cols` matrix with leading dimension `ld`
/// spans.
#[cfg(feature = "cuda")]
fn span(rows: usize, cols: usize, ld: usize) -> usize {
    if rows == 0 || cols == 0 {
        0
    } else {
        ld * (cols - 1) + rows
    }
}

#[cfg(feature = "cuda")]
impl CudaBackend {
    /// A matrix product through cuBLAS, with its workspace from the arena:
    /// `cublasSgemm` for fp32 matrices, `cublasGemmEx` with fp32
    /// accumulation (on the tensor cores) for bf16 ones.
    pub(crate) fn gemm(&mut self, g: Gemm) -> Result<(), BackendError> {
        let dtype = g.c.dtype();
        let name = match dtype {
            DType::F32 => "cublasSgemm",
            DType::Bf16 => "cublasGemmEx",
        };
        self.enter(name)?;
        if g.a.dtype() != dtype || g.b.dtype() != dtype {
            return Err(BackendError::Internal(
                "a matrix product of matrices of different types",
            ));
        }
        let (a_rows, a_cols) = if g.transa { (g.k, g.m) } else { (g.m, g.k) };
        let (b_rows, b_cols) = if g.transb { (g.n, g.k) } else { (g.k, g.n) };
        let fits = g.a.len() >= span(a_rows, a_cols, g.lda)
            && g.b.len() >= span(b_rows, b_cols, g.ldb)
            && g.c.len() >= span(g.m, g.n, g.ldc)
            && g.lda >= a_rows.max(1)
            && g.ldb >= b_rows.max(1)
            && g.ldc >= g.m.max(1);
        if !fits {
            return Err(BackendError::Internal(
                "a matrix product's buffers do not match its sizes",
            ));
        }
        let (a, b, c, ws) = (
            self.float_address(g.a)?,
            self.float_address(g.b)?,
            self.float_address(g.c)?,
            self.address(g.workspace)?,
        );
        let op = |t| {
            if t {
                blas_sys::cublasOperation_t::CUBLAS_OP_T
            } else {
                blas_sys::cublasOperation_t::CUBLAS_OP_N
            }
        };
        let int = |v: usize| i32::try_from(v).map_err(|_| BackendError::Internal("a matrix is too large for cuBLAS"));
        let (m, n, k, lda, ldb, ldc) = (int(g.m)?, int(g.n)?, int(g.k)?, int(g.lda)?, int(g.ldb)?, int(g.ldc)?);
        let (alpha, beta) = (1.0f32, g.beta);
        self.timer.before(&self.gpu, name, self.capturing);
        // The workspace, then the product.
        self.gpu.calls.count(Call::Cublas);
        self.gpu.calls.count(Call::Cublas);
        let mut libs = self.gpu.libs.lock().unwrap_or_else(|e| e.into_inner());
        if let Err(e) = libs.use_tf32(g.tf32) {
            drop(libs);
            return Err(self.poison(name, e));
        }
        // SAFETY: every matrix lies inside the arena and spans no more than
        // its buffer (checked above), in the type its pointer is passed as
        // (checked above too); the workspace is a live arena buffer of its
        // stated size, 256-byte aligned as cuBLAS requires; alpha and beta
        // are fp32 host values, as both calls' fp32 compute type reads them;
        // the handle is used under its mutex.
        let r = unsafe {
            blas_sys::cublasSetWorkspace_v2(libs.cublas, ws as *mut c_void, g.workspace.bytes())
                .result()
                .and_then(|()| match dtype {
                    DType::F32 => cudarc::cublas::result::sgemm(
                        libs.cublas,
                        op(g.transa),
                        op(g.transb),
                        m,
                        n,
                        k,
                        &alpha,
                        a as *const f32,
                        lda,
                        b as *const f32,
                        ldb,
                        &beta,
                        c as *mut f32,
                        ldc,
                    ),
                    DType::Bf16 => {
                        let bf16 = blas_sys::cudaDataType::CUDA_R_16BF;
                        cudarc::cublas::result::gemm_ex(
                            libs.cublas,
                            op(g.transa),
                            op(g.transb),
                            m,
                            n,
                            k,
                            (&alpha as *const f32).cast(),
                            a as *const c_void,
                            bf16,
                            lda,
                            b as *const c_void,
                            bf16,
                            ldb,
                            (&beta as *const f32).cast(),
                            c as *mut c_void,
                            bf16,
                            ldc,
                            blas_sys::cublasComputeType_t::CUBLAS_COMPUTE_32F,
                            blas_sys::cublasGemmAlgo_t::CUBLAS_GEMM_DEFAULT,
                        )
                    }
                })
        };
        drop(libs);
        self.finish(name, r)
    }

    /// One pass of a convolution through cuDNN, on its plan under `policy`
    /// (see [`ConvPass`] for which buffers are which): `out` is
    /// overwritten, or with `accumulate` added to (a gradient's second
    /// contribution, without a pass of its own).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn conv(
        &mut self,
        dims: ConvDims,
        policy: Policy,
        pass: ConvPass,
        a: FloatBuf,
        b: FloatBuf,
        workspace: Buf<f32>,
        out: FloatBuf,
        accumulate: bool,
    ) -> Result<(), BackendError> {
        self.enter("cuDNN convolution")?;
        let plan = self
            .gpu
            .conv_plan(dims, policy)
            .map_err(|e| self.poison("cuDNN convolution", e))?;
        let (x, w, y) = (dims.input_len(), dims.filter_len(), dims.output_len());
        let (need_a, need_b, need_out) = match pass {
            ConvPass::Forward => (x, w, y),
            ConvPass::InputGrad => (w, y, x),
            ConvPass::WeightGrad => (x, y, w),
        };
        if [a, b, out].iter().any(|t| t.dtype() != dims.dtype) {
            return Err(BackendError::Internal("a convolution's buffers are not of its type"));
        }
        if a.len() != need_a
            || b.len() != need_b
            || out.len() != need_out
            || workspace.bytes() < plan.workspace_bytes(pass)
        {
            return Err(BackendError::Internal("a convolution's buffers do not match its sizes"));
        }
        let (pa, pb, pw, po) = (
            self.float_address(a)?,
            self.float_address(b)?,
            self.address(workspace)?,
            self.float_address(out)?,
        );
        let op = match pass {
            ConvPass::Forward => "cudnnConvolutionForward",
            ConvPass::InputGrad => "cudnnConvolutionBackwardData",
            ConvPass::WeightGrad => "cudnnConvolutionBackwardFilter",
        };
        self.timer.before(&self.gpu, op, self.capturing);
        self.gpu.calls.count(Call::Cudnn);
        let libs = self.gpu.libs.lock().unwrap_or_else(|e| e.into_inner());
        // SAFETY: the buffers lie in the arena and have exactly the sizes
        // the plan's descriptors describe (checked above), the workspace is
        // as large as the plan's algorithm needs, and the handle is the one
        // the plan was made with, used under its mutex.
        let call = PassCall {
            pass,
            a: pa,
            b: pb,
            workspace: pw,
            out: po,
            accumulate,
        };
        let r = unsafe { plan.run(libs.cudnn, call) };
        drop(libs);
        match r {
            Ok(()) => self.finish::<&str>(op, Ok(())),
            Err(e) => Err(self.poison(op, e)),
        }
    }
}
