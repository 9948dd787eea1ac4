//! Convolutions through cuDNN: per convolution shape, what runs each of
//! its three passes and the workspace each needs. fp32 convolutions with
//! FMA math are planned on both of cuDNN's APIs, its legacy API's numbered
//! algorithms ([`legacy`]) and its graph API's FMA engines, and each pass
//! runs the one timed faster ([`either`]); bf16 and TF32 ones go through
//! the graph API ([`engines`]) alone, which alone reaches the tensor-core
//! kernels cuDNN has for this GPU (on the H200 its bf16 input gradients ran
//! 6× faster than the legacy algorithms' best, and ResNet-18's TF32 step at
//! batch 512, channels last, 12.5 ms against the legacy API's 18.8 in
//! NCHW). Either way the first choice is cuDNN's
//! heuristic's, within [`WORKSPACE_LIMIT`]; a training run then times the
//! candidates on the device and chooses again (see [`ConvPlan::tune`] and
//! `train::Pipeline::build`). The workspace itself is allocated in the step region
//! by the op, like any temporary.

#[cfg(feature = "cuda")]
mod either;
#[cfg(feature = "cuda")]
mod engines;
#[cfg(feature = "cuda")]
mod legacy;

#[cfg(feature = "cuda")]
use super::CudaError;
pub use crate::backend::ConvDims;
#[cfg(feature = "cuda")]
use crate::base::DType;
#[cfg(feature = "cuda")]
use cudarc::cudnn::result as dnn;
#[cfg(feature = "cuda")]
use cudarc::cudnn::sys;
#[cfg(feature = "cuda")]
use either::EitherConv;
#[cfg(feature = "cuda")]
use engines::GraphConv;
#[cfg(feature = "cuda")]
use legacy::LegacyConv;
#[cfg(feature = "cuda")]
use std::sync::{Mutex, OnceLock};

/// The largest workspace the heuristic's choice may ask for. The tiny
/// convolutions of the MNIST CNN need none; a limit keeps a heuristic's FFT
/// choice from tripling the step region.
#[cfg(feature = "cuda")]
pub const WORKSPACE_LIMIT: usize = 8 << 20;

/// Which of the three passes a workspace is for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConvPass {
    /// The forward convolution.
    Forward,
    /// The gradient of the input.
    InputGrad,
    /// The gradient of the filters.
    WeightGrad,
}

#[cfg(feature = "cuda")]
impl ConvPass {
    pub(crate) const ALL: [ConvPass; 3] = [ConvPass::Forward, ConvPass::InputGrad, ConvPass::WeightGrad];

    /// Its place in [`ConvPass::ALL`] (and in a plan's per-pass limits).
    pub(crate) fn index(self) -> usize {
        self as usize
    }
}

/// One pass to run, by device address: its two inputs `a` and `b`
/// (forward: input, filters; input grad: filters, output grad; weight
/// grad: input, output grad), its workspace, and its output, overwritten
/// or, with `accumulate`, added to.
#[cfg(feature = "cuda")]
#[derive(Debug, Clone, Copy)]
pub(crate) struct PassCall {
    pub(crate) pass: ConvPass,
    pub(crate) a: u64,
    pub(crate) b: u64,
    pub(crate) workspace: u64,
    pub(crate) out: u64,
    pub(crate) accumulate: bool,
}

/// What runs one convolution shape's passes.
#[cfg(feature = "cuda")]
pub struct ConvPlan {
    pub(crate) dims: ConvDims,
    /// Its place among the device's plans, made in order and never
    /// removed: with a pass, what names a workspace in a step's plan (see
    /// [`ConvPlan::workspace_tag`]).
    index: u32,
    /// `(deterministic, tf32)`: see [`ConvPlan::math`].
    math: (bool, bool),
    engine: Engine,
    /// Why the graph API could not take a bf16 or TF32 convolution that
    /// therefore runs on the legacy one.
    refused: Option<String>,
    /// The same convolution over half the batch, made and timed with the
    /// whole where the batch is even and at least [`HALVES_FROM`] (see
    /// [`halves_run`]).
    half: OnceLock<Engine>,
    /// By [`ConvPass::index`]: whether the pass runs as two halves.
    halved: Mutex<[bool; 3]>,
}

/// The least batch whose convolutions are also planned over half of it:
/// cuDNN's fastest algorithms for a large batch can need workspaces of
/// several times the activations (ResNet-18's first stage at batch 512,
/// 576 MiB beside 128 MiB tensors), and the workspace of a half batch's is
/// about half. Smaller batches' workspaces are small anyway, and each
/// half is one more plan to make and time.
#[cfg(feature = "cuda")]
pub const HALVES_FROM: usize = 64;

/// Which of cuDNN's APIs runs a convolution.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConvApi {
    /// The graph API's execution plans.
    Graph,
    /// fp32 with FMA math: each pass runs whichever API's candidate timed
    /// faster within its workspace limit (the legacy API's heuristic
    /// choice until timed).
    Either {
        /// How many of the three passes run on the graph API.
        graph_passes: usize,
    },
    /// The legacy API's numbered algorithms: fp32 with FMA math where the
    /// graph API refused it; bf16 and TF32 where the graph API refused the
    /// convolution, with what it said.
    Legacy {
        /// Why the graph API refused a bf16 or TF32 convolution; `None` for
        /// fp32, which the legacy API runs by choice.
        graph_refused: Option<String>,
    },
}

#[cfg(feature = "cuda")]
enum Engine {
    Legacy(LegacyConv),
    Graph(GraphConv),
    Either(EitherConv),
}

#[cfg(feature = "cuda")]
impl Engine {
    /// The engine that runs convolutions of `d`, and why the graph API
    /// refused a bf16 or TF32 one (see [`ConvPlan::new`]).
    fn new(
        handle: sys::cudnnHandle_t,
        d: ConvDims,
        deterministic: bool,
        tf32: bool,
    ) -> Result<(Self, Option<String>), CudaError> {
        Ok(match d.dtype == DType::Bf16 || tf32 {
            true => match GraphConv::new(handle, d, deterministic, tf32) {
                Ok(g) => (Engine::Graph(g), None),
                Err(e) => (
                    Engine::Legacy(LegacyConv::new(handle, d, deterministic, tf32)?),
                    Some(e.to_string()),
                ),
            },
            // FMA math: both APIs, each pass timed on each (see `either`).
            false => {
                let legacy = LegacyConv::new(handle, d, deterministic, tf32)?;
                match GraphConv::new(handle, d, deterministic, tf32) {
                    Ok(g) => (Engine::Either(EitherConv::new(legacy, g)), None),
                    Err(_) => (Engine::Legacy(legacy), None),
                }
            }
        })
    }

    fn workspace_bytes(&self, pass: ConvPass) -> usize {
        match self {
            Engine::Legacy(l) => l.workspace_bytes(pass),
            Engine::Graph(g) => g.workspace_bytes(pass),
            Engine::Either(e) => e.workspace_bytes(pass),
        }
    }

    fn seconds(&self, pass: ConvPass) -> Seconds {
        match self {
            Engine::Legacy(l) => l.seconds(pass),
            Engine::Graph(g) => g.seconds(pass),
            Engine::Either(e) => e.seconds(pass),
        }
    }

    fn untune(&self) {
        match self {
            Engine::Legacy(l) => l.untune(),
            Engine::Graph(g) => g.untune(),
            Engine::Either(e) => e.untune(),
        }
    }

    fn select(&self, limits: [usize; 3]) -> usize {
        match self {
            Engine::Legacy(l) => l.select(limits),
            Engine::Graph(g) => g.select(limits),
            Engine::Either(e) => e.select(limits),
        }
    }

    /// # Safety
    /// As [`ConvPlan::tune`].
    unsafe fn tune(
        &self,
        handle: sys::cudnnHandle_t,
        xwy: [u64; 3],
        workspace: u64,
        workspace_bytes: usize,
    ) -> Result<bool, CudaError> {
        match self {
            Engine::Legacy(l) => l.tune(handle, xwy, workspace, workspace_bytes),
            Engine::Graph(g) => g.tune(handle, xwy, workspace, workspace_bytes),
            Engine::Either(e) => e.tune(handle, xwy, workspace, workspace_bytes),
        }
    }

    /// # Safety
    /// As [`ConvPlan::run`], for this engine's convolution.
    unsafe fn run(&self, handle: sys::cudnnHandle_t, call: PassCall) -> Result<(), CudaError> {
        match self {
            Engine::Legacy(l) => l.run(handle, call),
            Engine::Graph(g) => g.run(handle, call),
            Engine::Either(e) => e.run(handle, call),
        }
    }
}

/// Whether one way of running a pass beats another, each `(workspace
/// bytes, timings)`, under a workspace limit of `limit`: the one that
/// fits, else the faster by the timings (an untimed choice last), else the
/// smaller.
#[cfg(feature = "cuda")]
fn beats(limit: usize, (ws, s): (usize, Seconds), (other_ws, other): (usize, Seconds)) -> bool {
    let rank = |ws: usize, s: Seconds| (ws > limit, s.chosen.unwrap_or(f64::INFINITY), ws);
    rank(ws, s) < rank(other_ws, other)
}

/// Whether a pass runs as two halves of its batch rather than whole, each
/// way `(workspace bytes, timings)` (the halves' seconds for both halves)
/// under a workspace limit of `limit`. Only where the whole batch's choice
/// is held below its fastest: a step whose fastest algorithms fit runs
/// them as it always did. Then as a pass's API is chosen (see [`beats`]).
#[cfg(feature = "cuda")]
fn halves_run(limit: usize, whole: (usize, Seconds), halves: (usize, Seconds)) -> bool {
    let held = match (whole.1.chosen, whole.1.fastest) {
        (Some(chosen), Some(fastest)) => chosen > fastest,
        (None, Some(_)) => true,
        (_, None) => false,
    };
    held && halves.1.fastest.is_some() && beats(limit, halves, whole)
}

#[cfg(feature = "cuda")]
impl ConvPlan {
    /// `deterministic`: only algorithms that sum in a fixed order (no
    /// atomics), so a run is reproducible bit for bit, at a cost in speed.
    /// `tf32`: fp32 data may run TF32 tensor-op kernels (see
    /// [`crate::backend::Precision`]). bf16 data and TF32 math go to the
    /// graph API, and to the legacy one only where it offers no engine.
    pub(crate) fn new(
        handle: sys::cudnnHandle_t,
        index: u32,
        d: ConvDims,
        deterministic: bool,
        tf32: bool,
    ) -> Result<Self, CudaError> {
        let (engine, refused) = Engine::new(handle, d, deterministic, tf32)?;
        Ok(Self {
            dims: d,
            index,
            math: (deterministic, tf32),
            engine,
            refused,
            half: OnceLock::new(),
            halved: Mutex::new([false; 3]),
        })
    }

    /// What its algorithms were chosen under: `(deterministic, tf32)`, as
    /// given to [`ConvPlan::new`] (a plan per shape and these).
    pub(crate) fn math(&self) -> (bool, bool) {
        self.math
    }

    /// Which API runs this convolution.
    pub(crate) fn api(&self) -> ConvApi {
        match &self.engine {
            Engine::Graph(_) => ConvApi::Graph,
            Engine::Either(e) => ConvApi::Either {
                graph_passes: e.graph_passes(),
            },
            Engine::Legacy(_) => ConvApi::Legacy {
                graph_refused: self.refused.clone(),
            },
        }
    }

    fn halved(&self) -> [bool; 3] {
        *self.halved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many of its passes run as two halves of the batch.
    pub(crate) fn halved_passes(&self) -> usize {
        self.halved().iter().filter(|&&h| h).count()
    }

    /// The half batch's engine, where a pass runs on it.
    fn half_for(&self, pass: ConvPass) -> Option<&Engine> {
        self.half.get().filter(|_| self.halved()[pass.index()])
    }

    /// Workspace bytes the pass needs (either way of writing its output).
    pub(crate) fn workspace_bytes(&self, pass: ConvPass) -> usize {
        match self.half_for(pass) {
            Some(half) => half.workspace_bytes(pass),
            None => self.engine.workspace_bytes(pass),
        }
    }

    /// Seconds the pass's choice takes beyond the fastest timed one for the
    /// whole batch (0 before [`ConvPlan::tune`]): what holding workspaces
    /// below the fastest's costs.
    pub(crate) fn seconds_lost(&self, pass: ConvPass) -> f64 {
        let whole = self.engine.seconds(pass);
        match self.half_for(pass) {
            Some(half) => Seconds {
                chosen: half.seconds(pass).twice().chosen,
                ..whole
            },
            None => whole,
        }
        .lost()
    }

    /// Seconds the pass's choice takes for the whole batch (as two halves
    /// where it runs so), by the device's timings; `None` before
    /// [`ConvPlan::tune`] or where the choice was not timed.
    pub(crate) fn seconds_chosen(&self, pass: ConvPass) -> Option<f64> {
        match self.half_for(pass) {
            Some(half) => half.seconds(pass).twice().chosen,
            None => self.engine.seconds(pass).chosen,
        }
    }

    /// Goes back to cuDNN's heuristic choice (when the timed choices' step
    /// does not fit).
    pub(crate) fn untune(&self) {
        self.engine.untune();
        if let Some(half) = self.half.get() {
            half.untune();
        }
        *self.halved.lock().unwrap_or_else(|e| e.into_inner()) = [false; 3];
    }

    /// Chooses, for each pass, the fastest timed candidate whose workspace
    /// is at most that pass's limit in `limits` (by [`ConvPass::index`]);
    /// where none fits, the one needing the least workspace, the
    /// heuristic's among them. A pass held below its fastest may run as two
    /// halves of the batch instead (see [`halves_run`]). Returns the
    /// largest workspace chosen.
    pub(crate) fn select(&self, limits: [usize; 3]) -> usize {
        let whole_largest = self.engine.select(limits);
        let Some(half) = self.half.get() else {
            return whole_largest;
        };
        half.select(limits);
        let mut halved = [false; 3];
        let mut largest = 0;
        for pass in ConvPass::ALL {
            let i = pass.index();
            let whole = (self.engine.workspace_bytes(pass), self.engine.seconds(pass));
            let halves = (half.workspace_bytes(pass), half.seconds(pass).twice());
            halved[i] = halves_run(limits[i], whole, halves);
            largest = largest.max(match halved[i] {
                true => halves.0,
                false => whole.0,
            });
        }
        *self.halved.lock().unwrap_or_else(|e| e.into_inner()) = halved;
        largest
    }

    /// The number a step's plan knows this pass's workspace by: unique
    /// among the device's plans and passes, so a memory budget can hold
    /// down the workspaces of just the passes that run where the step's
    /// memory peaks (see [`super::CudaBackend::hold_convolutions`]).
    pub(crate) fn workspace_tag(&self, pass: ConvPass) -> u32 {
        self.index * 3 + pass.index() as u32
    }

    /// Times every candidate of each pass on the device with up to
    /// `workspace_bytes` of workspace and selects the fastest of each;
    /// where the batch is even and at least [`HALVES_FROM`], plans the
    /// half batch's convolution and times its candidates too. Returns
    /// whether a choice changed from the heuristic's.
    ///
    /// # Safety
    /// `x`, `w` and `y` must address live device memory of at least the
    /// input, filter and output sizes of `dims`, disjoint, that the device
    /// may overwrite; `workspace` at least `workspace_bytes` bytes, disjoint
    /// from them; `handle` the cuDNN handle this plan was made with.
    pub(crate) unsafe fn tune(
        &self,
        handle: sys::cudnnHandle_t,
        xwy: [u64; 3],
        workspace: u64,
        workspace_bytes: usize,
    ) -> Result<bool, CudaError> {
        let changed = self.engine.tune(handle, xwy, workspace, workspace_bytes)?;
        if let Some(half) = self.half(handle) {
            // The half's tensors are the first halves of the whole's.
            half.tune(handle, xwy, workspace, workspace_bytes)?;
        }
        self.select([usize::MAX; 3]);
        Ok(changed)
    }

    /// The half batch's convolution, planned the first time it is asked
    /// for: `None` where the batch is odd or below [`HALVES_FROM`], or
    /// cuDNN cannot plan it (then the whole batch's runs alone).
    fn half(&self, handle: sys::cudnnHandle_t) -> Option<&Engine> {
        let d = self.dims;
        if d.n < HALVES_FROM || !d.n.is_multiple_of(2) {
            return None;
        }
        if self.half.get().is_none() {
            let (deterministic, tf32) = self.math;
            let half = ConvDims::new(
                [d.n / 2, d.c, d.h, d.w],
                [d.f, d.kh, d.kw],
                d.stride,
                d.padding,
                d.dtype,
                d.nhwc,
            );
            let (engine, _) = Engine::new(handle, half, deterministic, tf32).ok()?;
            let _ = self.half.set(engine);
        }
        self.half.get()
    }

    /// Runs every pass as two halves of the batch from now on, where there
    /// is a half (see [`ConvPlan::half`]), whatever the timings: a check
    /// that the halves compute what the whole does. Returns how many
    /// passes run so.
    pub(crate) fn halve(&self, handle: sys::cudnnHandle_t) -> usize {
        let Some(_) = self.half(handle) else { return 0 };
        *self.halved.lock().unwrap_or_else(|e| e.into_inner()) = [true; 3];
        ConvPass::ALL.len()
    }

    /// Runs one pass (see [`PassCall`]). A pass that runs as two halves runs
    /// the half batch's convolution on each half of the images: the input
    /// and the output (or their gradients) are split at half their
    /// length, images being outermost in both layouts, and the filters'
    /// gradient is the first half's, then the second's added to it.
    ///
    /// # Safety
    /// The pointers must address live device memory of at least the sizes
    /// of `dims` (forward: input, filters → output; input grad: filters,
    /// output grad → input grad; weight grad: input, output grad → filter
    /// grad), `workspace` at least `workspace_bytes(pass)` bytes, and
    /// `handle` must be the cuDNN handle this plan was made with.
    pub(crate) unsafe fn run(&self, handle: sys::cudnnHandle_t, call: PassCall) -> Result<(), CudaError> {
        let Some(half) = self.half_for(call.pass) else {
            return self.engine.run(handle, call);
        };
        let size = self.dims.dtype.size() as u64;
        let x = (self.dims.input_len() / 2) as u64 * size;
        let y = (self.dims.output_len() / 2) as u64 * size;
        let PassCall { a, b, out, .. } = call;
        let second = match call.pass {
            ConvPass::Forward => PassCall {
                a: a + x,
                out: out + y,
                ..call
            },
            ConvPass::InputGrad => PassCall {
                b: b + y,
                out: out + x,
                ..call
            },
            ConvPass::WeightGrad => PassCall {
                a: a + x,
                b: b + y,
                accumulate: true,
                ..call
            },
        };
        // Sound as the caller's contract: each half's tensors lie inside
        // the whole's (the second starts half their length in), and the
        // workspace is at least the half's need, which `workspace_bytes`
        // reports for a halved pass.
        half.run(handle, call)?;
        half.run(handle, second)
    }
}

/// A pass's timings: its chosen candidate's seconds (`None` where that was
/// not timed: the heuristic's, before tuning or where nothing timed fits)
/// and the fastest timed candidate's.
#[cfg(feature = "cuda")]
#[derive(Clone, Copy, Debug, PartialEq)]
pub(super) struct Seconds {
    pub(super) chosen: Option<f64>,
    pub(super) fastest: Option<f64>,
}

#[cfg(feature = "cuda")]
impl Seconds {
    /// Two runs' seconds: a pass run as two halves of its batch, each
    /// timed as the half batch's.
    fn twice(self) -> Seconds {
        Seconds {
            chosen: self.chosen.map(|s| 2.0 * s),
            fastest: self.fastest.map(|s| 2.0 * s),
        }
    }

    /// The chosen candidate's seconds beyond the fastest's; 0 where the
    /// chosen was not timed (the heuristic's, kept where nothing timed
    /// fits).
    pub(super) fn lost(self) -> f64 {
        match (self.chosen, self.fastest) {
            (Some(chosen), Some(fastest)) => (chosen - fastest).max(0.0),
            _ => 0.0,
        }
    }
}

/// [`Seconds`] of `chosen` in a pass's timed list, fastest first.
#[cfg(feature = "cuda")]
pub(super) fn seconds_of<A: PartialEq>(timed: &[(A, usize, f64)], chosen: A) -> Seconds {
    Seconds {
        chosen: timed.iter().find(|t| t.0 == chosen).map(|t| t.2),
        fastest: timed.first().map(|t| t.2),
    }
}

#[cfg(feature = "cuda")]
pub(super) fn dnn_err(op: &'static str) -> impl Fn(dnn::CudnnError) -> CudaError {
    move |e| CudaError::failed(op, e)
}

#[cfg(feature = "cuda")]
pub(super) fn int(v: usize) -> Result<i32, CudaError> {
    i32::try_from(v)
        .map_err(|_| CudaError::failed("describing a convolution", format!("size {v} exceeds cuDNN's range")))
}

#[cfg(all(test, feature = "cuda"))]
mod tests {
    use super::{halves_run, Seconds};

    const MIB: usize = 1 << 20;

    /// A pass's timings where its choice and the fastest were both timed.
    pub(super) fn timed(chosen: f64, fastest: f64) -> Seconds {
        Seconds {
            chosen: Some(chosen),
            fastest: Some(fastest),
        }
    }

    #[test]
    fn a_pass_runs_as_two_halves_only_where_held_and_then_where_that_is_faster() {
        // The whole batch on its fastest (4 ms in 576 MiB): never halves,
        // even faster ones.
        assert!(!halves_run(
            usize::MAX,
            (576 * MIB, timed(4e-3, 4e-3)),
            (288 * MIB, timed(3e-3, 3e-3))
        ));
        // Held to 400 MiB the whole batch takes 7 ms; two halves within it 4.2.
        assert!(halves_run(
            400 * MIB,
            (100 * MIB, timed(7e-3, 4e-3)),
            (288 * MIB, timed(4.2e-3, 4.2e-3))
        ));
        // Not where the halves are slower, or do not fit where the whole does.
        assert!(!halves_run(
            400 * MIB,
            (100 * MIB, timed(7e-3, 4e-3)),
            (288 * MIB, timed(8e-3, 4.2e-3))
        ));
        assert!(!halves_run(
            200 * MIB,
            (100 * MIB, timed(7e-3, 4e-3)),
            (288 * MIB, timed(4.2e-3, 4.2e-3))
        ));
        // The whole batch's heuristic choice, kept where nothing timed fits:
        // halves that fit are taken.
        let untimed = Seconds {
            chosen: None,
            fastest: Some(4e-3),
        };
        assert!(halves_run(
            64 * MIB,
            (128 * MIB, untimed),
            (32 * MIB, timed(9e-3, 4.2e-3))
        ));
        // Nothing timed (no tuning, or deterministic algorithms): whole.
        let none = Seconds {
            chosen: None,
            fastest: None,
        };
        assert!(!halves_run(0, (128 * MIB, none), (0, timed(1e-6, 1e-6))));
        assert!(!halves_run(0, (128 * MIB, untimed), (0, none)));
    }
    #[test]
    fn an_algorithm_loses_its_time_beyond_the_fastest_timed() {
        // Fastest first, as cuDNN returns them: (algorithm, workspace, seconds).
        let timed = [(7, 4096, 1.0e-3), (2, 512, 2.5e-3), (5, 0, 4.0e-3)];
        let lost = |chosen| super::seconds_of(&timed, chosen).lost();
        assert_eq!(lost(7), 0.0);
        assert!((lost(2) - 1.5e-3).abs() < 1e-12);
        assert!((lost(5) - 3.0e-3).abs() < 1e-12);
        // The heuristic's choice, kept where nothing timed fits: unknown.
        assert_eq!(lost(9), 0.0);
        assert_eq!(super::seconds_of::<i32>(&[], 9).lost(), 0.0);
    }
}
