//! Convolutions through cuDNN: per convolution shape, the descriptors, the
//! algorithm of each pass and its workspace size, chosen once (by cuDNN's
//! heuristics, with FMA math so results match the CPU's within float
//! rounding unless TF32 was asked for, and with a workspace the arena can
//! spare). The workspace itself is allocated in the step region by the op,
//! like any temporary.

use super::CudaError;
use cudarc::cudnn::result as dnn;
use cudarc::cudnn::sys;
use std::ffi::c_void;

/// The largest workspace an algorithm may ask for. The tiny convolutions of
/// the MNIST CNN need none; a limit keeps a heuristic's FFT choice from
/// tripling the step region.
pub const WORKSPACE_LIMIT: usize = 8 << 20;

/// A convolution's sizes: input `[n, c, h, w]`, filters `[f, c, kh, kw]`,
/// the same stride and zero padding in both directions. A plan is made per
/// distinct value, so stride and padding are part of the cache key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConvDims {
    pub n: usize,
    pub c: usize,
    pub h: usize,
    pub w: usize,
    pub f: usize,
    pub kh: usize,
    pub kw: usize,
    pub stride: usize,
    pub padding: usize,
}

impl ConvDims {
    pub fn input_len(&self) -> usize {
        self.n * self.c * self.h * self.w
    }
    pub fn filter_len(&self) -> usize {
        self.f * self.c * self.kh * self.kw
    }
    /// Output rows and columns, PyTorch's `(h + 2·padding − kh) / stride + 1`;
    /// zero where the kernel does not fit the padded input (no output
    /// position) or the stride is 0.
    pub fn output_hw(&self) -> (usize, usize) {
        let len = |d: usize, k: usize| match (d + 2 * self.padding).checked_sub(k) {
            Some(room) if self.stride > 0 => room / self.stride + 1,
            _ => 0,
        };
        (len(self.h, self.kh), len(self.w, self.kw))
    }

    pub fn output_len(&self) -> usize {
        let (oh, ow) = self.output_hw();
        self.n * self.f * oh * ow
    }
}

#[cfg(test)]
mod tests {
    use super::ConvDims;

    #[test]
    fn a_kernel_larger_than_its_input_has_no_output() {
        let dims = |kh, kw| ConvDims {
            n: 2,
            c: 1,
            h: 4,
            w: 5,
            f: 3,
            kh,
            kw,
            stride: 1,
            padding: 0,
        };
        assert_eq!(dims(5, 5).output_len(), 0);
        assert_eq!(dims(4, 6).output_len(), 0);
        assert_eq!(dims(9, 3).output_len(), 0);
        assert_eq!(dims(3, 11).output_len(), 0);
        assert_eq!(dims(4, 5).output_len(), 2 * 3);
        assert_eq!(dims(3, 3).output_len(), 2 * 3 * 2 * 3);
    }

    #[test]
    fn output_sizes_follow_pytorch_with_stride_and_padding() {
        let dims = |kh, kw, stride, padding| ConvDims {
            n: 2,
            c: 1,
            h: 7,
            w: 8,
            f: 3,
            kh,
            kw,
            stride,
            padding,
        };
        assert_eq!(dims(3, 3, 1, 1).output_hw(), (7, 8));
        assert_eq!(dims(3, 3, 2, 1).output_hw(), (4, 4));
        assert_eq!(dims(1, 1, 2, 0).output_hw(), (4, 4));
        assert_eq!(dims(7, 7, 2, 3).output_hw(), (4, 4));
        assert_eq!(dims(9, 10, 1, 1).output_hw(), (1, 1));
        assert_eq!(dims(10, 3, 1, 1).output_len(), 0);
        assert_eq!(dims(3, 3, 0, 1).output_len(), 0);
        assert_eq!(dims(3, 3, 2, 1).output_len(), 2 * 3 * 4 * 4);
    }
}

/// Which of the three passes a workspace is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvPass {
    Forward,
    InputGrad,
    WeightGrad,
}

struct TensorDesc(sys::cudnnTensorDescriptor_t);
struct FilterDesc(sys::cudnnFilterDescriptor_t);
struct ConvDesc(sys::cudnnConvolutionDescriptor_t);

impl Drop for TensorDesc {
    fn drop(&mut self) {
        // SAFETY: created once by `ConvPlan::new`, destroyed once here.
        let _ = unsafe { dnn::destroy_tensor_descriptor(self.0) };
    }
}
impl Drop for FilterDesc {
    fn drop(&mut self) {
        // SAFETY: as for TensorDesc.
        let _ = unsafe { dnn::destroy_filter_descriptor(self.0) };
    }
}
impl Drop for ConvDesc {
    fn drop(&mut self) {
        // SAFETY: as for TensorDesc.
        let _ = unsafe { dnn::destroy_convolution_descriptor(self.0) };
    }
}

/// The descriptors and algorithms of one convolution shape.
pub struct ConvPlan {
    pub dims: ConvDims,
    x: TensorDesc,
    w: FilterDesc,
    conv: ConvDesc,
    y: TensorDesc,
    fwd: (sys::cudnnConvolutionFwdAlgo_t, usize),
    data: (sys::cudnnConvolutionBwdDataAlgo_t, usize),
    filter: (sys::cudnnConvolutionBwdFilterAlgo_t, usize),
}

// SAFETY: the descriptors are host objects that are never modified after
// `new`; cuDNN reads them from whichever thread holds the handle's mutex.
unsafe impl Send for ConvPlan {}
unsafe impl Sync for ConvPlan {}

fn dnn_err(op: &'static str) -> impl Fn(dnn::CudnnError) -> CudaError {
    move |e| CudaError::failed(op, e)
}

fn int(v: usize) -> Result<i32, CudaError> {
    i32::try_from(v)
        .map_err(|_| CudaError::failed("describing a convolution", format!("size {v} exceeds cuDNN's range")))
}

/// The first algorithm of cuDNN's ranking that ran, uses FMA math (or,
/// with `tf32`, tensor-op math), fits the workspace limit and, when asked,
/// is deterministic.
macro_rules! choose {
    ($perf:ty, $count:expr, $get:expr, $size:expr, $deterministic:expr, $tf32:expr, $what:literal) => {{
        // Used inside an unsafe block. Zero is a valid bit pattern of each field of the perf
        // structs (every enum has a variant 0, the rest are numbers).
        let mut perf: [$perf; $count] = std::mem::zeroed();
        let mut returned = 0;
        $get($count as i32, &mut returned, perf.as_mut_ptr()).map_err(dnn_err($what))?;
        let ok = perf[..returned.max(0) as usize].iter().find(|p| {
            p.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS
                && p.memory <= WORKSPACE_LIMIT
                && (!$deterministic || p.determinism == sys::cudnnDeterminism_t::CUDNN_DETERMINISTIC)
                && ($tf32 || p.mathType != sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH)
                // Down-converts float data to fp16: below what either precision promises.
                && p.mathType != sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
        });
        let algo = ok
            .ok_or_else(|| CudaError::failed($what, "cuDNN offers no algorithm within the workspace limit"))?
            .algo;
        (algo, $size(algo).map_err(dnn_err($what))?)
    }};
}

impl ConvPlan {
    /// `deterministic`: only algorithms that sum in a fixed order (no
    /// atomics), so a run is reproducible bit for bit, at a cost in speed.
    /// `tf32`: cuDNN's default math, which for float data may run TF32
    /// tensor-op kernels (see [`crate::backend::Precision`]).
    pub(crate) fn new(
        handle: sys::cudnnHandle_t,
        d: ConvDims,
        deterministic: bool,
        tf32: bool,
    ) -> Result<Self, CudaError> {
        let float = sys::cudnnDataType_t::CUDNN_DATA_FLOAT;
        let nchw = sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW;
        let (oh, ow) = d.output_hw();
        if oh == 0 || ow == 0 {
            return Err(CudaError::failed(
                "describing a convolution",
                format!("{d:?} has no output position"),
            ));
        }
        let x = TensorDesc(dnn::create_tensor_descriptor().map_err(dnn_err("cudnnCreateTensorDescriptor"))?);
        let y = TensorDesc(dnn::create_tensor_descriptor().map_err(dnn_err("cudnnCreateTensorDescriptor"))?);
        let w = FilterDesc(dnn::create_filter_descriptor().map_err(dnn_err("cudnnCreateFilterDescriptor"))?);
        let conv = ConvDesc(dnn::create_convolution_descriptor().map_err(dnn_err("cudnnCreateConvolutionDescriptor"))?);
        let (xs, ys, ws) = (
            [int(d.n)?, int(d.c)?, int(d.h)?, int(d.w)?],
            [int(d.n)?, int(d.f)?, int(oh)?, int(ow)?],
            [int(d.f)?, int(d.c)?, int(d.kh)?, int(d.kw)?],
        );
        let (pad, stride) = (int(d.padding)?, int(d.stride)?);
        // SAFETY: every descriptor was created above and is alive; `handle`
        // is the device's cuDNN handle, held under its mutex by the caller.
        unsafe {
            dnn::set_tensor4d_descriptor(x.0, nchw, float, xs).map_err(dnn_err("cudnnSetTensor4dDescriptor"))?;
            dnn::set_tensor4d_descriptor(y.0, nchw, float, ys).map_err(dnn_err("cudnnSetTensor4dDescriptor"))?;
            dnn::set_filter4d_descriptor(w.0, float, nchw, ws).map_err(dnn_err("cudnnSetFilter4dDescriptor"))?;
            dnn::set_convolution2d_descriptor(
                conv.0,
                pad,
                pad,
                stride,
                stride,
                1,
                1,
                sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION,
                float,
            )
            .map_err(dnn_err("cudnnSetConvolution2dDescriptor"))?;
            let math = if tf32 {
                sys::cudnnMathType_t::CUDNN_DEFAULT_MATH
            } else {
                sys::cudnnMathType_t::CUDNN_FMA_MATH
            };
            dnn::set_convolution_math_type(conv.0, math).map_err(dnn_err("cudnnSetConvolutionMathType"))?;
            let fwd = choose!(
                sys::cudnnConvolutionFwdAlgoPerf_t,
                8,
                |n, r, p| dnn::get_convolution_forward_algorithm(handle, x.0, w.0, conv.0, y.0, n, r, p),
                |a| dnn::get_convolution_forward_workspace_size(handle, x.0, w.0, conv.0, y.0, a),
                deterministic,
                tf32,
                "choosing the convolution forward algorithm"
            );
            let data = choose!(
                sys::cudnnConvolutionBwdDataAlgoPerf_t,
                6,
                |n, r, p| dnn::get_convolution_backward_data_algorithm(handle, w.0, y.0, conv.0, x.0, n, r, p),
                |a| dnn::get_convolution_backward_data_workspace_size(handle, w.0, y.0, conv.0, x.0, a),
                deterministic,
                tf32,
                "choosing the convolution input-gradient algorithm"
            );
            let filter = choose!(
                sys::cudnnConvolutionBwdFilterAlgoPerf_t,
                7,
                |n, r, p| dnn::get_convolution_backward_filter_algorithm(handle, x.0, y.0, conv.0, w.0, n, r, p),
                |a| dnn::get_convolution_backward_filter_workspace_size(handle, x.0, y.0, conv.0, w.0, a),
                deterministic,
                tf32,
                "choosing the convolution weight-gradient algorithm"
            );
            Ok(Self {
                dims: d,
                x,
                w,
                conv,
                y,
                fwd,
                data,
                filter,
            })
        }
    }

    /// Workspace bytes the pass's algorithm needs.
    pub fn workspace_bytes(&self, pass: ConvPass) -> usize {
        match pass {
            ConvPass::Forward => self.fwd.1,
            ConvPass::InputGrad => self.data.1,
            ConvPass::WeightGrad => self.filter.1,
        }
    }

    /// Runs one pass: `a` and `b` are its two inputs, `out` is overwritten.
    ///
    /// # Safety
    /// The pointers must address live device memory of at least the sizes
    /// of `dims` (forward: input, filters → output; input grad: filters,
    /// output grad → input grad; weight grad: input, output grad → filter
    /// grad), `workspace` at least `workspace_bytes(pass)` bytes, and
    /// `handle` must be the cuDNN handle this plan was made with.
    pub(crate) unsafe fn run(
        &self,
        handle: sys::cudnnHandle_t,
        pass: ConvPass,
        a: u64,
        b: u64,
        workspace: u64,
        out: u64,
    ) -> Result<(), CudaError> {
        let (one, zero) = (1.0f32, 0.0f32);
        let alpha = (&one as *const f32).cast::<c_void>();
        let beta = (&zero as *const f32).cast::<c_void>();
        let ptr = |p: u64| p as *const c_void;
        let out = out as *mut c_void;
        let ws = workspace as *mut c_void;
        match pass {
            ConvPass::Forward => dnn::convolution_forward(
                handle,
                alpha,
                self.x.0,
                ptr(a),
                self.w.0,
                ptr(b),
                self.conv.0,
                self.fwd.0,
                ws,
                self.fwd.1,
                beta,
                self.y.0,
                out,
            )
            .map_err(dnn_err("cudnnConvolutionForward")),
            ConvPass::InputGrad => dnn::convolution_backward_data(
                handle,
                alpha,
                self.w.0,
                ptr(a),
                self.y.0,
                ptr(b),
                self.conv.0,
                self.data.0,
                ws,
                self.data.1,
                beta,
                self.x.0,
                out,
            )
            .map_err(dnn_err("cudnnConvolutionBackwardData")),
            ConvPass::WeightGrad => dnn::convolution_backward_filter(
                handle,
                alpha,
                self.x.0,
                ptr(a),
                self.y.0,
                ptr(b),
                self.conv.0,
                self.filter.0,
                ws,
                self.filter.1,
                beta,
                self.w.0,
                out,
            )
            .map_err(dnn_err("cudnnConvolutionBackwardFilter")),
        }
    }
}
