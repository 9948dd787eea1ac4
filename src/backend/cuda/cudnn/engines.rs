//! Convolutions through cuDNN's graph ("backend") API: each pass is an
//! operation graph of one convolution, cuDNN's heuristics rank the engine
//! configurations that can run it, and each usable one is finalized into
//! an execution plan up front. PyTorch takes this road for the same
//! reason: the Hopper tensor-core kernels are engines the legacy API's
//! numbered algorithms do not reach.
//!
//! A pass that adds to its output (`beta = 1`, a gradient's second
//! contribution) is a different graph to cuDNN, so the two backward passes
//! have a graph of each kind.

use super::{int, seconds_of, ConvDims, ConvPass, PassCall, Seconds, WORKSPACE_LIMIT};
use crate::backend::cuda::CudaError;
use crate::base::DType;
use cudarc::cudnn::sys;
use cudarc::driver::{result as driver, sys as cu};
use std::ffi::c_void;
use std::ptr;
use std::sync::Mutex;

use sys::cudnnBackendAttributeName_t as Attr;
use sys::cudnnBackendAttributeType_t as Type;
use sys::cudnnBackendDescriptorType_t as Kind;

/// Execution plans kept per graph, in cuDNN's ranking: enough for the
/// fastest to be among them without finalizing dozens of plans per shape
/// (on the H200, keeping 16, or also admitting engines compiled at run
/// time, left ResNet-18's bf16 step at batch 512 as fast: 6.75 and 6.76 ms
/// against 6.73).
const CANDIDATES: usize = 8;

/// Runs of each candidate timed by [`GraphConv::tune`], after one untimed.
const TIMED_RUNS: u32 = 3;

/// A backend descriptor, destroyed with its owner.
struct Desc(sys::cudnnBackendDescriptor_t);

impl Drop for Desc {
    fn drop(&mut self) {
        // SAFETY: created once by `Desc::new`, destroyed once here.
        let _ = unsafe { sys::cudnnBackendDestroyDescriptor(self.0) };
    }
}

fn failed(what: &'static str) -> impl Fn(sys::cudnnStatus_t) -> CudaError {
    move |status| CudaError::failed(what, format!("{status:?}"))
}

fn check(status: sys::cudnnStatus_t, what: &'static str) -> Result<(), CudaError> {
    match status {
        sys::cudnnStatus_t::CUDNN_STATUS_SUCCESS => Ok(()),
        other => Err(failed(what)(other)),
    }
}

impl Desc {
    fn new(kind: Kind) -> Result<Self, CudaError> {
        let mut d = ptr::null_mut();
        // SAFETY: cuDNN writes one descriptor handle to `d`.
        check(
            unsafe { sys::cudnnBackendCreateDescriptor(kind, &mut d) },
            "cudnnBackendCreateDescriptor",
        )?;
        Ok(Self(d))
    }

    /// Sets `name` to `values`, whose element type must be the one `ty`
    /// names (the callers below pair them as cuDNN documents).
    fn set<T>(&self, name: Attr, ty: Type, values: &[T]) -> Result<&Self, CudaError> {
        // SAFETY: `values` is a live slice of `values.len()` elements of the
        // type `ty` stands for; cuDNN copies them before returning.
        let status = unsafe {
            sys::cudnnBackendSetAttribute(self.0, name, ty, values.len() as i64, values.as_ptr().cast::<c_void>())
        };
        check(status, "cudnnBackendSetAttribute")?;
        Ok(self)
    }

    fn set_i64(&self, name: Attr, values: &[i64]) -> Result<&Self, CudaError> {
        self.set(name, Type::CUDNN_TYPE_INT64, values)
    }

    fn set_desc(&self, name: Attr, values: &[&Desc]) -> Result<&Self, CudaError> {
        let raw: Vec<sys::cudnnBackendDescriptor_t> = values.iter().map(|d| d.0).collect();
        self.set(name, Type::CUDNN_TYPE_BACKEND_DESCRIPTOR, &raw)
    }

    fn finalize(self) -> Result<Self, CudaError> {
        // SAFETY: a live descriptor whose attributes were set above.
        check(unsafe { sys::cudnnBackendFinalize(self.0) }, "cudnnBackendFinalize")?;
        Ok(self)
    }

    /// Up to `N` 32-bit enum values of `name` (numerical or behaviour
    /// notes), as numbers: a value newer than these bindings stays a number.
    fn get_u32s<const N: usize>(&self, name: Attr, ty: Type) -> Result<Vec<u32>, CudaError> {
        let (mut out, mut n) = ([0u32; N], 0i64);
        // SAFETY: room for N 4-byte values, which is what `ty` (an enum
        // attribute) holds per element; cuDNN writes at most N.
        let status = unsafe {
            sys::cudnnBackendGetAttribute(self.0, name, ty, N as i64, &mut n, out.as_mut_ptr().cast::<c_void>())
        };
        check(status, "cudnnBackendGetAttribute")?;
        Ok(out[..(n.max(0) as usize).min(N)].to_vec())
    }
}

/// One pass's graph, what can run it, and which does.
struct PassGraph {
    /// The operation graph and the descriptors it refers to, kept alive
    /// while plans made from it are.
    _graph: Vec<Desc>,
    /// Finalized execution plans, cuDNN's ranking first, with their
    /// workspace bytes.
    plans: Vec<(Desc, usize)>,
    /// The heuristic's choice: the first plan within [`WORKSPACE_LIMIT`],
    /// else the one needing least.
    heuristic: usize,
    /// The plan that runs: the heuristic's until tuned.
    chosen: usize,
    /// The timed plans that ran, fastest first: (plan, workspace, seconds).
    timed: Vec<(usize, usize, f64)>,
}

/// The tensors' unique ids in every graph and variant pack.
const X: i64 = b'x' as i64;
const W: i64 = b'w' as i64;
const Y: i64 = b'y' as i64;

/// Graph index of each pass: forward, input gradient written or added to,
/// weight gradient written or added to.
fn slot(pass: ConvPass, accumulate: bool) -> usize {
    match (pass, accumulate) {
        (ConvPass::Forward, _) => 0,
        (ConvPass::InputGrad, false) => 1,
        (ConvPass::InputGrad, true) => 2,
        (ConvPass::WeightGrad, false) => 3,
        (ConvPass::WeightGrad, true) => 4,
    }
}

const SLOTS: [(ConvPass, bool); 5] = [
    (ConvPass::Forward, false),
    (ConvPass::InputGrad, false),
    (ConvPass::InputGrad, true),
    (ConvPass::WeightGrad, false),
    (ConvPass::WeightGrad, true),
];

/// The execution plans of one convolution shape's passes.
pub(super) struct GraphConv {
    passes: Mutex<Vec<PassGraph>>,
}

// SAFETY: the descriptors are host objects cuDNN does not modify after
// finalizing; they are read under the device's handle mutex (held by every
// caller) and the `passes` mutex.
unsafe impl Send for GraphConv {}
unsafe impl Sync for GraphConv {}

/// A 4-d tensor of logical shape `[a, b, h, w]` (NCHW, or filters KCRS)
/// stored channels last where `nhwc`.
fn tensor(id: i64, dims: [usize; 4], nhwc: bool, data: sys::cudnnDataType_t) -> Result<Desc, CudaError> {
    for v in dims {
        int(v)?;
    }
    let t = Desc::new(Kind::CUDNN_BACKEND_TENSOR_DESCRIPTOR)?;
    t.set(Attr::CUDNN_ATTR_TENSOR_DATA_TYPE, Type::CUDNN_TYPE_DATA_TYPE, &[data])?
        .set_i64(Attr::CUDNN_ATTR_TENSOR_DIMENSIONS, &dims.map(|v| v as i64))?
        .set_i64(Attr::CUDNN_ATTR_TENSOR_STRIDES, &strides(dims, nhwc))?
        .set_i64(Attr::CUDNN_ATTR_TENSOR_UNIQUE_ID, &[id])?
        // Arena buffers are 256-byte aligned; 16 is what the kernels ask.
        .set_i64(Attr::CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, &[16])?;
    t.finalize()
}

/// The element strides of a logical `[a, b, h, w]` tensor: the graph API
/// always names dimensions in NCHW (filters KCRS) order and says the layout
/// by the strides alone.
fn strides(dims: [usize; 4], nhwc: bool) -> [i64; 4] {
    let [_, b, h, w] = dims.map(|v| v as i64);
    match nhwc {
        true => [h * w * b, 1, w * b, b],
        false => [b * h * w, h * w, w, 1],
    }
}

/// Whether an engine may run: fp32 sums (no reduced-precision reduction,
/// no down-converted inputs), deterministic when asked, tensor-core math
/// only where `tensor_cores` (for fp32 data that is TF32, which rounds
/// products to about three decimal digits: PyTorch filters the same note
/// when TF32 is off), and no run-time compilation (which would compile
/// kernels at start-up for seconds).
fn usable(cfg: &Desc, deterministic: bool, tensor_cores: bool) -> Result<bool, CudaError> {
    let engine = Desc::new(Kind::CUDNN_BACKEND_ENGINE_DESCRIPTOR)?;
    let mut n = 0i64;
    let mut raw = engine.0;
    // SAFETY: room for one descriptor handle, which cuDNN fills in (the
    // engine descriptor created above receives the configuration's engine).
    let status = unsafe {
        sys::cudnnBackendGetAttribute(
            cfg.0,
            Attr::CUDNN_ATTR_ENGINECFG_ENGINE,
            Type::CUDNN_TYPE_BACKEND_DESCRIPTOR,
            1,
            &mut n,
            (&mut raw as *mut sys::cudnnBackendDescriptor_t).cast::<c_void>(),
        )
    };
    check(status, "cudnnBackendGetAttribute")?;
    let numerical = engine.get_u32s::<16>(Attr::CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, Type::CUDNN_TYPE_NUMERICAL_NOTE)?;
    let behavior = engine.get_u32s::<16>(Attr::CUDNN_ATTR_ENGINE_BEHAVIOR_NOTE, Type::CUDNN_TYPE_BEHAVIOR_NOTE)?;
    use sys::cudnnBackendBehaviorNote_t as B;
    use sys::cudnnBackendNumericalNote_t as N;
    let has = |notes: &[u32], note: u32| notes.contains(&note);
    let refused = has(&numerical, N::CUDNN_NUMERICAL_NOTE_DOWN_CONVERT_INPUTS as u32)
        || has(&numerical, N::CUDNN_NUMERICAL_NOTE_REDUCED_PRECISION_REDUCTION as u32)
        || (deterministic && has(&numerical, N::CUDNN_NUMERICAL_NOTE_NONDETERMINISTIC as u32))
        || (!tensor_cores && has(&numerical, N::CUDNN_NUMERICAL_NOTE_TENSOR_CORE as u32))
        || has(&behavior, B::CUDNN_BEHAVIOR_NOTE_RUNTIME_COMPILATION as u32);
    Ok(!refused)
}

/// The engine configurations cuDNN's heuristic `mode` ranks for `graph`.
fn ranked(graph: &Desc, mode: sys::cudnnBackendHeurMode_t) -> Result<Vec<Desc>, CudaError> {
    let heur = Desc::new(Kind::CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR)?;
    heur.set_desc(Attr::CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH, &[graph])?
        .set(Attr::CUDNN_ATTR_ENGINEHEUR_MODE, Type::CUDNN_TYPE_HEUR_MODE, &[mode])?;
    let heur = heur.finalize()?;
    let mut count = 0i64;
    // SAFETY: a count-only query (no elements requested, none written).
    let status = unsafe {
        sys::cudnnBackendGetAttribute(
            heur.0,
            Attr::CUDNN_ATTR_ENGINEHEUR_RESULTS,
            Type::CUDNN_TYPE_BACKEND_DESCRIPTOR,
            0,
            &mut count,
            ptr::null_mut(),
        )
    };
    check(status, "cudnnBackendGetAttribute")?;
    let cfgs = (0..count.max(0))
        .map(|_| Desc::new(Kind::CUDNN_BACKEND_ENGINECFG_DESCRIPTOR))
        .collect::<Result<Vec<_>, _>>()?;
    let mut raw: Vec<_> = cfgs.iter().map(|d| d.0).collect();
    let mut returned = 0i64;
    // SAFETY: `raw` holds `count` engine-configuration descriptors created
    // above, which cuDNN fills in.
    let status = unsafe {
        sys::cudnnBackendGetAttribute(
            heur.0,
            Attr::CUDNN_ATTR_ENGINEHEUR_RESULTS,
            Type::CUDNN_TYPE_BACKEND_DESCRIPTOR,
            count,
            &mut returned,
            raw.as_mut_ptr().cast::<c_void>(),
        )
    };
    check(status, "cudnnBackendGetAttribute")?;
    let mut cfgs = cfgs;
    cfgs.truncate(returned.clamp(0, count) as usize);
    Ok(cfgs)
}

impl PassGraph {
    fn new(
        handle: sys::cudnnHandle_t,
        d: &ConvDims,
        (pass, accumulate): (ConvPass, bool),
        deterministic: bool,
        tf32: bool,
    ) -> Result<Self, CudaError> {
        let (data, tensor_cores) = match d.dtype {
            DType::F32 => (sys::cudnnDataType_t::CUDNN_DATA_FLOAT, tf32),
            DType::Bf16 => (sys::cudnnDataType_t::CUDNN_DATA_BFLOAT16, true),
        };
        let (oh, ow) = d.output_hw();
        let x = tensor(X, [d.n, d.c, d.h, d.w], d.nhwc, data)?;
        let w = tensor(W, [d.f, d.c, d.kh, d.kw], d.nhwc, data)?;
        let y = tensor(Y, [d.n, d.f, oh, ow], d.nhwc, data)?;
        let (pad, stride) = (i64::from(int(d.padding)?), i64::from(int(d.stride)?));
        let conv = Desc::new(Kind::CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR)?;
        conv.set(
            Attr::CUDNN_ATTR_CONVOLUTION_COMP_TYPE,
            Type::CUDNN_TYPE_DATA_TYPE,
            &[sys::cudnnDataType_t::CUDNN_DATA_FLOAT],
        )?
        .set(
            Attr::CUDNN_ATTR_CONVOLUTION_CONV_MODE,
            Type::CUDNN_TYPE_CONVOLUTION_MODE,
            &[sys::cudnnConvolutionMode_t::CUDNN_CROSS_CORRELATION],
        )?
        .set_i64(Attr::CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, &[2])?
        .set_i64(Attr::CUDNN_ATTR_CONVOLUTION_DILATIONS, &[1, 1])?
        .set_i64(Attr::CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, &[stride, stride])?
        .set_i64(Attr::CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, &[pad, pad])?
        .set_i64(Attr::CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, &[pad, pad])?;
        let conv = conv.finalize()?;
        let (alpha, beta) = (1.0f32, if accumulate { 1.0f32 } else { 0.0 });
        use Attr::*;
        // Each pass names its tensors: (kind, [(attribute, tensor)], conv, alpha, beta).
        let (kind, ts, c, a, b) = match pass {
            ConvPass::Forward => (
                Kind::CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR,
                [
                    (CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, &x),
                    (CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, &w),
                    (CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, &y),
                ],
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC,
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA,
                CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA,
            ),
            ConvPass::InputGrad => (
                Kind::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR,
                [
                    (CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, &x),
                    (CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, &w),
                    (CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, &y),
                ],
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA,
            ),
            ConvPass::WeightGrad => (
                Kind::CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR,
                [
                    (CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, &x),
                    (CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, &w),
                    (CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, &y),
                ],
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA,
                CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA,
            ),
        };
        let op = Desc::new(kind)?;
        for (attr, t) in ts {
            op.set_desc(attr, &[t])?;
        }
        op.set_desc(c, &[&conv])?
            .set(a, Type::CUDNN_TYPE_FLOAT, &[alpha])?
            .set(b, Type::CUDNN_TYPE_FLOAT, &[beta])?;
        let op = op.finalize()?;
        let graph = Desc::new(Kind::CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR)?;
        graph.set_desc(CUDNN_ATTR_OPERATIONGRAPH_OPS, &[&op])?.set(
            CUDNN_ATTR_OPERATIONGRAPH_HANDLE,
            Type::CUDNN_TYPE_HANDLE,
            &[handle],
        )?;
        let graph = graph.finalize()?;

        // cuDNN's ranking, then its fallback list: the first that finalize
        // for this device and pass the numerical notes become candidates.
        let mut plans = Vec::new();
        for mode in [
            sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_A,
            sys::cudnnBackendHeurMode_t::CUDNN_HEUR_MODE_FALLBACK,
        ] {
            let Ok(cfgs) = ranked(&graph, mode) else { continue };
            for cfg in cfgs {
                if plans.len() >= CANDIDATES {
                    break;
                }
                if !usable(&cfg, deterministic, tensor_cores).unwrap_or(false) {
                    continue;
                }
                let Ok(plan) = Desc::new(Kind::CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR) else {
                    continue;
                };
                let made = plan
                    .set(CUDNN_ATTR_EXECUTION_PLAN_HANDLE, Type::CUDNN_TYPE_HANDLE, &[handle])
                    .and_then(|p| p.set_desc(CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG, &[&cfg]))
                    .is_ok();
                // An engine that does not support this shape fails to finalize.
                let Some(plan) = made.then(|| plan.finalize().ok()).flatten() else {
                    continue;
                };
                let mut ws = 0i64;
                let mut n = 0i64;
                // SAFETY: one 8-byte integer, as the attribute holds.
                let status = unsafe {
                    sys::cudnnBackendGetAttribute(
                        plan.0,
                        CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                        Type::CUDNN_TYPE_INT64,
                        1,
                        &mut n,
                        (&mut ws as *mut i64).cast::<c_void>(),
                    )
                };
                if check(status, "cudnnBackendGetAttribute").is_ok() {
                    plans.push((plan, ws.max(0) as usize));
                }
            }
            if plans.len() >= CANDIDATES {
                break;
            }
        }
        let heuristic = plans
            .iter()
            .position(|p| p.1 <= WORKSPACE_LIMIT)
            .or_else(|| (0..plans.len()).min_by_key(|&i| plans[i].1))
            .ok_or_else(|| CudaError::failed("planning a convolution", "cuDNN's graph API has no engine for it"))?;
        Ok(Self {
            _graph: vec![graph, op, conv, x, w, y],
            plans,
            heuristic,
            chosen: heuristic,
            timed: Vec::new(),
        })
    }

    /// Runs plan `i`.
    ///
    /// # Safety
    /// As [`GraphConv::run`], with `workspace` at least plan `i`'s bytes.
    unsafe fn execute(
        &self,
        handle: sys::cudnnHandle_t,
        i: usize,
        [x, w, y]: [u64; 3],
        workspace: u64,
    ) -> Result<(), CudaError> {
        let pack = Desc::new(Kind::CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR)?;
        let pointers = [x, w, y].map(|p| p as *mut c_void);
        pack.set(
            Attr::CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
            Type::CUDNN_TYPE_VOID_PTR,
            &pointers,
        )?
        .set_i64(Attr::CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, &[X, W, Y])?
        .set(
            Attr::CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
            Type::CUDNN_TYPE_VOID_PTR,
            &[workspace as *mut c_void],
        )?;
        let pack = pack.finalize()?;
        check(
            sys::cudnnBackendExecute(handle, self.plans[i].0 .0, pack.0),
            "cudnnBackendExecute",
        )
    }

    /// Times every plan whose workspace fits `workspace_bytes` (one
    /// untimed run, then [`TIMED_RUNS`]) and keeps those that ran, fastest
    /// first.
    ///
    /// # Safety
    /// As [`GraphConv::tune`].
    unsafe fn tune(
        &mut self,
        handle: sys::cudnnHandle_t,
        xwy: [u64; 3],
        workspace: u64,
        workspace_bytes: usize,
        stream: cu::CUstream,
        events: (cu::CUevent, cu::CUevent),
    ) -> Result<(), CudaError> {
        let mut timed = Vec::new();
        for i in 0..self.plans.len() {
            let ws = self.plans[i].1;
            if ws > workspace_bytes || self.execute(handle, i, xwy, workspace).is_err() {
                continue;
            }
            driver::event::record(events.0, stream).map_err(|e| CudaError::failed("cuEventRecord", e))?;
            let mut ran = true;
            for _ in 0..TIMED_RUNS {
                ran &= self.execute(handle, i, xwy, workspace).is_ok();
            }
            driver::event::record(events.1, stream).map_err(|e| CudaError::failed("cuEventRecord", e))?;
            driver::event::synchronize(events.1).map_err(|e| CudaError::failed("cuEventSynchronize", e))?;
            let ms =
                driver::event::elapsed(events.0, events.1).map_err(|e| CudaError::failed("cuEventElapsedTime", e))?;
            if ran {
                timed.push((i, ws, f64::from(ms) / 1e3 / f64::from(TIMED_RUNS)));
            }
        }
        timed.sort_by(|a, b| a.2.total_cmp(&b.2));
        self.timed = timed;
        Ok(())
    }

    /// The fastest timed plan within `limit` bytes of workspace; where
    /// none is, the one needing the least workspace, the heuristic's among
    /// them (so that a lower limit never chooses a larger one).
    fn select(&mut self, limit: usize) -> usize {
        let least = || {
            self.timed
                .iter()
                .map(|t| t.0)
                .chain([self.heuristic])
                .min_by_key(|&i| self.plans[i].1)
                .unwrap_or(self.heuristic)
        };
        self.chosen = self.timed.iter().find(|t| t.1 <= limit).map_or_else(least, |t| t.0);
        self.plans[self.chosen].1
    }
}

impl GraphConv {
    /// `tf32`: fp32 data may run TF32 tensor-core engines (bf16 data
    /// always runs tensor cores).
    pub(super) fn new(
        handle: sys::cudnnHandle_t,
        d: ConvDims,
        deterministic: bool,
        tf32: bool,
    ) -> Result<Self, CudaError> {
        let (oh, ow) = d.output_hw();
        if oh == 0 || ow == 0 {
            return Err(CudaError::failed(
                "describing a convolution",
                format!("{d:?} has no output position"),
            ));
        }
        let passes = SLOTS
            .iter()
            .map(|&s| PassGraph::new(handle, &d, s, deterministic, tf32))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self {
            passes: Mutex::new(passes),
        })
    }

    fn passes(&self) -> std::sync::MutexGuard<'_, Vec<PassGraph>> {
        self.passes.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Workspace bytes the pass's plan needs, whether it writes or adds to
    /// its output.
    pub(super) fn workspace_bytes(&self, pass: ConvPass) -> usize {
        let p = self.passes();
        let ws = |acc| {
            let g = &p[slot(pass, acc)];
            g.plans[g.chosen].1
        };
        match pass {
            ConvPass::Forward => ws(false),
            _ => ws(false).max(ws(true)),
        }
    }

    /// The pass's timings, by its written graph: the written pass runs at
    /// every convolution, the added one only where a gradient joins
    /// another, so the written one stands for both.
    pub(super) fn seconds(&self, pass: ConvPass) -> Seconds {
        let p = self.passes();
        let g = &p[slot(pass, false)];
        seconds_of(&g.timed, g.chosen)
    }

    pub(super) fn untune(&self) {
        for g in self.passes().iter_mut() {
            g.chosen = g.heuristic;
        }
    }

    /// Each pass's fastest timed plan within its limit in `limits` (by
    /// [`ConvPass::index`]); the largest workspace chosen.
    pub(super) fn select(&self, limits: [usize; 3]) -> usize {
        let mut passes = self.passes();
        passes
            .iter_mut()
            .zip(SLOTS)
            .map(|(g, (pass, _))| g.select(limits[pass.index()]))
            .max()
            .unwrap_or(0)
    }

    /// # Safety
    /// As [`super::ConvPlan::tune`].
    pub(super) unsafe fn tune(
        &self,
        handle: sys::cudnnHandle_t,
        [x, w, y]: [u64; 3],
        workspace: u64,
        workspace_bytes: usize,
    ) -> Result<bool, CudaError> {
        let mut stream: sys::cudaStream_t = ptr::null_mut();
        check(sys::cudnnGetStream(handle, &mut stream), "cudnnGetStream")?;
        let stream = stream.cast::<cu::CUstream_st>();
        let flags = cu::CUevent_flags::CU_EVENT_DEFAULT;
        let start = driver::event::create(flags).map_err(|e| CudaError::failed("cuEventCreate", e))?;
        let end = match driver::event::create(flags) {
            Ok(e) => e,
            Err(e) => {
                let _ = driver::event::destroy(start);
                return Err(CudaError::failed("cuEventCreate", e));
            }
        };
        let mut passes = self.passes();
        let mut r = Ok(());
        for g in passes.iter_mut() {
            r = g.tune(handle, [x, w, y], workspace, workspace_bytes, stream, (start, end));
            if r.is_err() {
                break;
            }
        }
        let _ = driver::event::destroy(start);
        let _ = driver::event::destroy(end);
        r?;
        let changed = passes.iter_mut().fold(false, |changed, g| {
            let before = g.chosen;
            g.select(usize::MAX);
            changed | (g.chosen != before)
        });
        Ok(changed)
    }

    /// # Safety
    /// As [`super::ConvPlan::run`].
    pub(super) unsafe fn run(&self, handle: sys::cudnnHandle_t, call: PassCall) -> Result<(), CudaError> {
        // The variant pack names tensors, not argument positions.
        let xwy = match call.pass {
            ConvPass::Forward => [call.a, call.b, call.out],
            ConvPass::InputGrad => [call.out, call.a, call.b],
            ConvPass::WeightGrad => [call.a, call.out, call.b],
        };
        let p = self.passes();
        let g = &p[slot(call.pass, call.accumulate)];
        g.execute(handle, g.chosen, xwy, call.workspace)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every element's offset by the strides is where the layout stores
    /// it: NHWC (filters KRSC) with the channel fastest, NCHW row by row.
    #[test]
    fn strides_address_each_element_where_its_layout_stores_it() {
        let [n, c, h, w] = [2usize, 3, 4, 5];
        for nhwc in [true, false] {
            let st = strides([n, c, h, w], nhwc);
            let mut seen = vec![false; n * c * h * w];
            for (i, j, y, x) in (0..n)
                .flat_map(|i| (0..c).flat_map(move |j| (0..h).flat_map(move |y| (0..w).map(move |x| (i, j, y, x)))))
            {
                let at = [i, j, y, x].iter().zip(st).map(|(&v, s)| v as i64 * s).sum::<i64>() as usize;
                let stored = match nhwc {
                    true => ((i * h + y) * w + x) * c + j,
                    false => ((i * c + j) * h + y) * w + x,
                };
                assert_eq!(at, stored, "nhwc {nhwc}: element {:?}", (i, j, y, x));
                seen[at] = true;
            }
            assert!(seen.iter().all(|&s| s), "nhwc {nhwc}: every offset used once");
        }
    }

    /// Each pass and way of writing has a graph of its own, and the table
    /// of graphs lists each once, at its slot.
    #[test]
    fn every_pass_and_way_of_writing_has_its_own_graph() {
        for (i, &(pass, accumulate)) in SLOTS.iter().enumerate() {
            assert_eq!(slot(pass, accumulate), i, "{pass:?} accumulate {accumulate}");
        }
        assert_ne!(slot(ConvPass::InputGrad, false), slot(ConvPass::InputGrad, true));
        assert_ne!(slot(ConvPass::WeightGrad, false), slot(ConvPass::WeightGrad, true));
    }
}
