//! Convolutions through cuDNN's legacy API (descriptors and numbered
//! algorithms): the fp32 path. The first choice is cuDNN's heuristic's
//! (with FMA math so results match the CPU's within float rounding unless
//! TF32 was asked for, and a workspace of at most [`WORKSPACE_LIMIT`]); a
//! training run then times every algorithm on the device and chooses again
//! (see [`LegacyConv::tune`] and `train::Pipeline::build`).

use super::{dnn_err, int, seconds_of, ConvDims, ConvPass, PassCall, Seconds, WORKSPACE_LIMIT};
use crate::backend::cuda::CudaError;
use crate::base::DType;
use cudarc::cudnn::result as dnn;
use cudarc::cudnn::sys;
use std::ffi::c_void;
use std::sync::Mutex;

struct TensorDesc(sys::cudnnTensorDescriptor_t);
struct FilterDesc(sys::cudnnFilterDescriptor_t);
struct ConvDesc(sys::cudnnConvolutionDescriptor_t);

impl Drop for TensorDesc {
    fn drop(&mut self) {
        // SAFETY: created once by `LegacyConv::new`, destroyed once here.
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

/// The descriptors and algorithms of one convolution shape, through
/// cuDNN's legacy API: fp32 data.
pub(super) struct LegacyConv {
    x: TensorDesc,
    w: FilterDesc,
    conv: ConvDesc,
    y: TensorDesc,
    deterministic: bool,
    /// Tensor-op algorithms may run: TF32 for fp32 data, as asked; always
    /// for bf16 data, which is what they are for.
    tensor_ops: bool,
    /// cuDNN's heuristic choice, within [`WORKSPACE_LIMIT`]...
    heuristic: Choices,
    /// ...and the one the passes run: the heuristic's until [`LegacyConv::tune`]
    /// times the algorithms on the device.
    chosen: Mutex<Choices>,
    /// The timed algorithms of each pass that may run, fastest first, with
    /// their workspace bytes and seconds.
    timed: Mutex<Option<Timed>>,
}

/// The math an algorithm runs with: the one cuDNN found it with where
/// tensor ops are allowed, else FMA (cuDNN's default math may run TF32 on
/// fp32 data).
fn math_of(found: sys::cudnnMathType_t, tensor_ops: bool) -> sys::cudnnMathType_t {
    match tensor_ops {
        true => found,
        false => sys::cudnnMathType_t::CUDNN_FMA_MATH,
    }
}

/// An algorithm with the math it was found with: cuDNN runs an algorithm's
/// tensor-op kernels only when the convolution descriptor's math type is
/// the one its `Find`/`Get` result reported, so each pass sets it before it
/// runs (as PyTorch does).
type Algo<A> = (A, sys::cudnnMathType_t);

struct Timed {
    fwd: Vec<(Algo<sys::cudnnConvolutionFwdAlgo_t>, usize, f64)>,
    data: Vec<(Algo<sys::cudnnConvolutionBwdDataAlgo_t>, usize, f64)>,
    filter: Vec<(Algo<sys::cudnnConvolutionBwdFilterAlgo_t>, usize, f64)>,
}

/// The algorithm of each pass and the workspace bytes it needs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Choices {
    fwd: (Algo<sys::cudnnConvolutionFwdAlgo_t>, usize),
    data: (Algo<sys::cudnnConvolutionBwdDataAlgo_t>, usize),
    filter: (Algo<sys::cudnnConvolutionBwdFilterAlgo_t>, usize),
}

/// Whether an algorithm cuDNN reports may run: it ran (or may), uses the
/// precision's math, fits `limit` and, when asked, is deterministic.
macro_rules! allowed {
    ($p:expr, $limit:expr, $deterministic:expr, $tensor_ops:expr) => {{
        let p = $p;
        p.status == sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS
            && p.memory <= $limit
            && (!$deterministic || p.determinism == sys::cudnnDeterminism_t::CUDNN_DETERMINISTIC)
            && ($tensor_ops || p.mathType != sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH)
            // Down-converts float data to fp16: below what either precision promises.
            && p.mathType != sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION
    }};
}

/// The allowed algorithms of a pass's `Find…Ex` results (fastest first, as
/// cuDNN returns them), each with the math it runs with, its workspace
/// bytes and seconds.
macro_rules! timed {
    ($found:expr, $limit:expr, $deterministic:expr, $tensor_ops:expr) => {
        $found
            .iter()
            .filter(|p| allowed!(p, $limit, $deterministic, $tensor_ops))
            .map(|p| {
                (
                    (p.algo, math_of(p.mathType, $tensor_ops)),
                    p.memory,
                    f64::from(p.time) / 1e3,
                )
            })
            .collect()
    };
}

// SAFETY: the descriptors are host objects that are never modified after
// `new`; cuDNN reads them from whichever thread holds the handle's mutex.
unsafe impl Send for LegacyConv {}
unsafe impl Sync for LegacyConv {}

/// The first algorithm of cuDNN's ranking that ran, uses FMA math (or,
/// with `tf32`, tensor-op math), fits the workspace limit and, when asked,
/// is deterministic.
macro_rules! choose {
    ($perf:ty, $count:expr, $get:expr, $size:expr, $deterministic:expr, $tensor_ops:expr, $what:literal) => {{
        // Used inside an unsafe block. Zero is a valid bit pattern of each field of the perf
        // structs (every enum has a variant 0, the rest are numbers).
        let mut perf: [$perf; $count] = std::mem::zeroed();
        let mut returned = 0;
        $get($count as i32, &mut returned, perf.as_mut_ptr()).map_err(dnn_err($what))?;
        let offered = &perf[..returned.max(0) as usize];
        // Within the limit if one is; else (a deterministic weight gradient
        // of a large convolution) the one that needs least.
        let ok = offered
            .iter()
            .find(|p| allowed!(p, WORKSPACE_LIMIT, $deterministic, $tensor_ops))
            .or_else(|| {
                offered
                    .iter()
                    .filter(|p| allowed!(p, usize::MAX, $deterministic, $tensor_ops))
                    .min_by_key(|p| p.memory)
            });
        let found = ok.ok_or_else(|| CudaError::failed($what, "cuDNN offers no algorithm for this convolution"))?;
        let algo = found.algo;
        (
            (algo, math_of(found.mathType, $tensor_ops)),
            $size(algo, math_of(found.mathType, $tensor_ops)).map_err(dnn_err($what))?,
        )
    }};
}

impl LegacyConv {
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
        let data = match d.dtype {
            DType::F32 => float,
            DType::Bf16 => sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16,
        };
        let tensor_ops = tf32 || d.dtype == DType::Bf16;
        let format = match d.nhwc {
            true => sys::cudnnTensorFormat_t::CUDNN_TENSOR_NHWC,
            false => sys::cudnnTensorFormat_t::CUDNN_TENSOR_NCHW,
        };
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
            dnn::set_tensor4d_descriptor(x.0, format, data, xs).map_err(dnn_err("cudnnSetTensor4dDescriptor"))?;
            dnn::set_tensor4d_descriptor(y.0, format, data, ys).map_err(dnn_err("cudnnSetTensor4dDescriptor"))?;
            dnn::set_filter4d_descriptor(w.0, data, format, ws).map_err(dnn_err("cudnnSetFilter4dDescriptor"))?;
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
            // As PyTorch sets it: cuDNN's default math allows TF32 on fp32
            // data but keeps bf16 data off the tensor cores, which only
            // tensor-op math opens to it.
            let math = match (d.dtype, tensor_ops) {
                (DType::Bf16, _) => sys::cudnnMathType_t::CUDNN_TENSOR_OP_MATH,
                (DType::F32, true) => sys::cudnnMathType_t::CUDNN_DEFAULT_MATH,
                (DType::F32, false) => sys::cudnnMathType_t::CUDNN_FMA_MATH,
            };
            dnn::set_convolution_math_type(conv.0, math).map_err(dnn_err("cudnnSetConvolutionMathType"))?;
            let fwd = choose!(
                sys::cudnnConvolutionFwdAlgoPerf_t,
                8,
                |n, r, p| dnn::get_convolution_forward_algorithm(handle, x.0, w.0, conv.0, y.0, n, r, p),
                |a, m| dnn::set_convolution_math_type(conv.0, m)
                    .and_then(|()| dnn::get_convolution_forward_workspace_size(handle, x.0, w.0, conv.0, y.0, a)),
                deterministic,
                tensor_ops,
                "choosing the convolution forward algorithm"
            );
            let data = choose!(
                sys::cudnnConvolutionBwdDataAlgoPerf_t,
                6,
                |n, r, p| dnn::get_convolution_backward_data_algorithm(handle, w.0, y.0, conv.0, x.0, n, r, p),
                |a, m| dnn::set_convolution_math_type(conv.0, m)
                    .and_then(|()| dnn::get_convolution_backward_data_workspace_size(handle, w.0, y.0, conv.0, x.0, a)),
                deterministic,
                tensor_ops,
                "choosing the convolution input-gradient algorithm"
            );
            let filter = choose!(
                sys::cudnnConvolutionBwdFilterAlgoPerf_t,
                7,
                |n, r, p| dnn::get_convolution_backward_filter_algorithm(handle, x.0, y.0, conv.0, w.0, n, r, p),
                |a, m| dnn::set_convolution_math_type(conv.0, m).and_then(|()| {
                    dnn::get_convolution_backward_filter_workspace_size(handle, x.0, y.0, conv.0, w.0, a)
                }),
                deterministic,
                tensor_ops,
                "choosing the convolution weight-gradient algorithm"
            );
            let heuristic = Choices { fwd, data, filter };
            Ok(Self {
                x,
                w,
                conv,
                y,
                deterministic,
                tensor_ops,
                heuristic,
                chosen: Mutex::new(heuristic),
                timed: Mutex::new(None),
            })
        }
    }

    /// Workspace bytes the pass's algorithm needs.
    pub fn workspace_bytes(&self, pass: ConvPass) -> usize {
        let c = self.choices();
        match pass {
            ConvPass::Forward => c.fwd.1,
            ConvPass::InputGrad => c.data.1,
            ConvPass::WeightGrad => c.filter.1,
        }
    }

    fn choices(&self) -> Choices {
        *self.chosen.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The pass's timings (none before [`LegacyConv::tune`]).
    pub(super) fn seconds(&self, pass: ConvPass) -> Seconds {
        let c = self.choices();
        let timed = self.timed.lock().unwrap_or_else(|e| e.into_inner());
        let Some(t) = timed.as_ref() else {
            return Seconds {
                chosen: None,
                fastest: None,
            };
        };
        match pass {
            ConvPass::Forward => seconds_of(&t.fwd, c.fwd.0),
            ConvPass::InputGrad => seconds_of(&t.data, c.data.0),
            ConvPass::WeightGrad => seconds_of(&t.filter, c.filter.0),
        }
    }

    /// Goes back to cuDNN's heuristic choice (when the timed choices' step
    /// does not fit).
    pub(crate) fn untune(&self) {
        *self.chosen.lock().unwrap_or_else(|e| e.into_inner()) = self.heuristic;
    }

    /// Chooses, for each pass, the fastest timed algorithm whose workspace
    /// is at most that pass's limit in `limits` (by [`ConvPass::index`]);
    /// where none was timed or none fits, the one needing the least
    /// workspace, the heuristic's among them. Returns the largest
    /// workspace chosen.
    pub(crate) fn select(&self, limits: [usize; 3]) -> usize {
        let timed = self.timed.lock().unwrap_or_else(|e| e.into_inner());
        let Some(t) = timed.as_ref() else { return 0 };
        fn pick<A: Copy>(list: &[(A, usize, f64)], limit: usize, heuristic: (A, usize)) -> (A, usize) {
            let within = list.iter().find(|t| t.1 <= limit);
            // None within: the least workspace there is, so that a lower
            // limit never chooses a larger one.
            let least = || {
                list.iter()
                    .map(|&(algo, ws, _)| (algo, ws))
                    .chain([heuristic])
                    .min_by_key(|c| c.1)
                    .unwrap_or(heuristic)
            };
            within.map_or_else(least, |&(algo, ws, _)| (algo, ws))
        }
        let h = self.heuristic;
        let c = Choices {
            fwd: pick(&t.fwd, limits[ConvPass::Forward.index()], h.fwd),
            data: pick(&t.data, limits[ConvPass::InputGrad.index()], h.data),
            filter: pick(&t.filter, limits[ConvPass::WeightGrad.index()], h.filter),
        };
        *self.chosen.lock().unwrap_or_else(|e| e.into_inner()) = c;
        c.fwd.1.max(c.data.1).max(c.filter.1)
    }

    /// Times every algorithm of each pass on the device (cuDNN's `Find…Ex`,
    /// as PyTorch's `cudnn.benchmark` does) with up to `workspace_bytes` of
    /// workspace, keeps those allowed (see `allowed!`) fastest first, and
    /// selects the fastest of each pass. Returns whether a choice changed
    /// from the heuristic's.
    ///
    /// # Safety
    /// `x`, `w` and `y` must address live device memory of at least the
    /// input, filter and output sizes of `dims`, disjoint, that the device
    /// may overwrite; `workspace` at least `workspace_bytes` bytes, disjoint
    /// from them; `handle` the cuDNN handle this plan was made with.
    pub(crate) unsafe fn tune(
        &self,
        handle: sys::cudnnHandle_t,
        [x, w, y]: [u64; 3],
        workspace: u64,
        workspace_bytes: usize,
    ) -> Result<bool, CudaError> {
        let ws = workspace as *mut c_void;
        let (det, tensor_ops) = (self.deterministic, self.tensor_ops);
        let mut returned = 0;
        // Zero is a valid bit pattern of each field of the perf structs (see
        // `choose!`); cuDNN returns them fastest first.
        let mut fwd: [sys::cudnnConvolutionFwdAlgoPerf_t; 8] = std::mem::zeroed();
        sys::cudnnFindConvolutionForwardAlgorithmEx(
            handle,
            self.x.0,
            x as *const c_void,
            self.w.0,
            w as *const c_void,
            self.conv.0,
            self.y.0,
            y as *mut c_void,
            8,
            &mut returned,
            fwd.as_mut_ptr(),
            ws,
            workspace_bytes,
        )
        .result()
        .map_err(dnn_err("cudnnFindConvolutionForwardAlgorithmEx"))?;
        let fwd = timed!(&fwd[..returned.max(0) as usize], workspace_bytes, det, tensor_ops);
        let mut data: [sys::cudnnConvolutionBwdDataAlgoPerf_t; 8] = std::mem::zeroed();
        sys::cudnnFindConvolutionBackwardDataAlgorithmEx(
            handle,
            self.w.0,
            w as *const c_void,
            self.y.0,
            y as *const c_void,
            self.conv.0,
            self.x.0,
            x as *mut c_void,
            8,
            &mut returned,
            data.as_mut_ptr(),
            ws,
            workspace_bytes,
        )
        .result()
        .map_err(dnn_err("cudnnFindConvolutionBackwardDataAlgorithmEx"))?;
        let data = timed!(&data[..returned.max(0) as usize], workspace_bytes, det, tensor_ops);
        let mut filter: [sys::cudnnConvolutionBwdFilterAlgoPerf_t; 8] = std::mem::zeroed();
        sys::cudnnFindConvolutionBackwardFilterAlgorithmEx(
            handle,
            self.x.0,
            x as *const c_void,
            self.y.0,
            y as *const c_void,
            self.conv.0,
            self.w.0,
            w as *mut c_void,
            8,
            &mut returned,
            filter.as_mut_ptr(),
            ws,
            workspace_bytes,
        )
        .result()
        .map_err(dnn_err("cudnnFindConvolutionBackwardFilterAlgorithmEx"))?;
        let filter = timed!(&filter[..returned.max(0) as usize], workspace_bytes, det, tensor_ops);
        *self.timed.lock().unwrap_or_else(|e| e.into_inner()) = Some(Timed { fwd, data, filter });
        self.select([usize::MAX; 3]);
        Ok(self.choices() != self.heuristic)
    }

    /// Runs one pass (see [`PassCall`]).
    ///
    /// # Safety
    /// As [`super::ConvPlan::run`].
    pub(crate) unsafe fn run(&self, handle: sys::cudnnHandle_t, call: PassCall) -> Result<(), CudaError> {
        let (one, zero) = (1.0f32, 0.0f32);
        let alpha = (&one as *const f32).cast::<c_void>();
        let beta = (if call.accumulate { &one } else { &zero } as *const f32).cast::<c_void>();
        let (a, b) = (call.a as *const c_void, call.b as *const c_void);
        let out = call.out as *mut c_void;
        let ws = call.workspace as *mut c_void;
        let pass = call.pass;
        let c = self.choices();
        let math = match pass {
            ConvPass::Forward => c.fwd.0 .1,
            ConvPass::InputGrad => c.data.0 .1,
            ConvPass::WeightGrad => c.filter.0 .1,
        };
        dnn::set_convolution_math_type(self.conv.0, math).map_err(dnn_err("cudnnSetConvolutionMathType"))?;
        match pass {
            ConvPass::Forward => dnn::convolution_forward(
                handle,
                alpha,
                self.x.0,
                a,
                self.w.0,
                b,
                self.conv.0,
                c.fwd.0 .0,
                ws,
                c.fwd.1,
                beta,
                self.y.0,
                out,
            )
            .map_err(dnn_err("cudnnConvolutionForward")),
            ConvPass::InputGrad => dnn::convolution_backward_data(
                handle,
                alpha,
                self.w.0,
                a,
                self.y.0,
                b,
                self.conv.0,
                c.data.0 .0,
                ws,
                c.data.1,
                beta,
                self.x.0,
                out,
            )
            .map_err(dnn_err("cudnnConvolutionBackwardData")),
            ConvPass::WeightGrad => dnn::convolution_backward_filter(
                handle,
                alpha,
                self.x.0,
                a,
                self.y.0,
                b,
                self.conv.0,
                c.filter.0 .0,
                ws,
                c.filter.1,
                beta,
                self.w.0,
                out,
            )
            .map_err(dnn_err("cudnnConvolutionBackwardFilter")),
        }
    }
}
