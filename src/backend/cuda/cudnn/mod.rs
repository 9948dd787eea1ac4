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
}

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
        let tensor_cores = d.dtype == DType::Bf16 || tf32;
        let (engine, refused) = match tensor_cores {
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
        };
        Ok(Self {
            dims: d,
            index,
            math: (deterministic, tf32),
            engine,
            refused,
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

    /// Workspace bytes the pass needs (either way of writing its output).
    pub(crate) fn workspace_bytes(&self, pass: ConvPass) -> usize {
        match &self.engine {
            Engine::Legacy(l) => l.workspace_bytes(pass),
            Engine::Graph(g) => g.workspace_bytes(pass),
            Engine::Either(e) => e.workspace_bytes(pass),
        }
    }

    /// Seconds the pass's choice takes beyond the fastest timed one (0
    /// before [`ConvPlan::tune`]): what holding workspaces below the
    /// fastest's costs.
    pub(crate) fn seconds_lost(&self, pass: ConvPass) -> f64 {
        match &self.engine {
            Engine::Legacy(l) => l.seconds_lost(pass),
            Engine::Graph(g) => g.seconds_lost(pass),
            Engine::Either(e) => e.seconds_lost(pass),
        }
    }

    /// Goes back to cuDNN's heuristic choice (when the timed choices' step
    /// does not fit).
    pub(crate) fn untune(&self) {
        match &self.engine {
            Engine::Legacy(l) => l.untune(),
            Engine::Graph(g) => g.untune(),
            Engine::Either(e) => e.untune(),
        }
    }

    /// Chooses, for each pass, the fastest timed candidate whose workspace
    /// is at most that pass's limit in `limits` (by [`ConvPass::index`]);
    /// where none fits, the one needing the least workspace, the
    /// heuristic's among them. Returns the largest workspace chosen.
    pub(crate) fn select(&self, limits: [usize; 3]) -> usize {
        match &self.engine {
            Engine::Legacy(l) => l.select(limits),
            Engine::Graph(g) => g.select(limits),
            Engine::Either(e) => e.select(limits),
        }
    }

    /// The number a step's plan knows this pass's workspace by: unique
    /// among the device's plans and passes, so a memory budget can hold
    /// down the workspaces of just the passes that run where the step's
    /// memory peaks (see [`super::CudaBackend::hold_convolutions`]).
    pub(crate) fn workspace_tag(&self, pass: ConvPass) -> u32 {
        self.index * 3 + pass.index() as u32
    }

    /// Times every candidate of each pass on the device with up to
    /// `workspace_bytes` of workspace and selects the fastest of each.
    /// Returns whether a choice changed from the heuristic's.
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
        match &self.engine {
            Engine::Legacy(l) => l.tune(handle, xwy, workspace, workspace_bytes),
            Engine::Graph(g) => g.tune(handle, xwy, workspace, workspace_bytes),
            Engine::Either(e) => e.tune(handle, xwy, workspace, workspace_bytes),
        }
    }

    /// Runs one pass: `a` and `b` are its two inputs; `out` is overwritten,
    /// or with `accumulate` added to.
    ///
    /// # Safety
    /// The pointers must address live device memory of at least the sizes
    /// of `dims` (forward: input, filters → output; input grad: filters,
    /// output grad → input grad; weight grad: input, output grad → filter
    /// grad), `workspace` at least `workspace_bytes(pass)` bytes, and
    /// `handle` must be the cuDNN handle this plan was made with.
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn run(
        &self,
        handle: sys::cudnnHandle_t,
        pass: ConvPass,
        a: u64,
        b: u64,
        workspace: u64,
        out: u64,
        accumulate: bool,
    ) -> Result<(), CudaError> {
        match &self.engine {
            Engine::Legacy(l) => l.run(handle, pass, a, b, workspace, out, accumulate),
            Engine::Graph(g) => g.run(handle, pass, a, b, workspace, out, accumulate),
            Engine::Either(e) => e.run(handle, pass, a, b, workspace, out, accumulate),
        }
    }
}

/// Seconds the algorithm `chosen` of a pass takes beyond the fastest of
/// `timed` (that pass's timed list, fastest first); 0 where `chosen` was
/// not timed (the heuristic's, kept where nothing timed fits).
#[cfg(feature = "cuda")]
pub(super) fn seconds_lost<A: PartialEq>(timed: &[(A, usize, f64)], chosen: A) -> f64 {
    let fastest = timed.first().map_or(0.0, |t| t.2);
    timed
        .iter()
        .find(|t| t.0 == chosen)
        .map_or(0.0, |t| (t.2 - fastest).max(0.0))
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
    #[test]
    fn an_algorithm_loses_its_time_beyond_the_fastest_timed() {
        // Fastest first, as cuDNN returns them: (algorithm, workspace, seconds).
        let timed = [(7, 4096, 1.0e-3), (2, 512, 2.5e-3), (5, 0, 4.0e-3)];
        assert_eq!(super::seconds_lost(&timed, 7), 0.0);
        assert!((super::seconds_lost(&timed, 2) - 1.5e-3).abs() < 1e-12);
        assert!((super::seconds_lost(&timed, 5) - 3.0e-3).abs() < 1e-12);
        // The heuristic's choice, kept where nothing timed fits: unknown.
        assert_eq!(super::seconds_lost(&timed, 9), 0.0);
        assert_eq!(super::seconds_lost::<i32>(&[], 9), 0.0);
    }
}
