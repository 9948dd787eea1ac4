//! fp32 convolutions with FMA math through whichever of cuDNN's two APIs
//! runs each pass faster. Neither wins everywhere on the H200: the legacy
//! API's algorithms ran ResNet-18's step at batch 512 in 35.3 ms and the
//! graph API's FMA engines in 49.0, but ResNet-50's at batch 128 in 43.8
//! against 41.8; and with the step's workspaces held down by a memory
//! budget (ResNet-18 at half its step) the graph API's 62.5 ms beat the
//! legacy API's 77.5. So both are planned, both are timed, and each pass
//! runs the faster candidate that fits its workspace limit. Until timed,
//! the legacy API's heuristic choice runs, as it did before. Tensor-core
//! math (TF32, bf16) does not need this: timed both ways, all 33 of
//! ResNet-18's passes at batch 512 ran faster on the graph API, so those
//! run it alone.

use super::engines::GraphConv;
use super::legacy::LegacyConv;
use super::{ConvPass, PassCall, Seconds};
use crate::backend::cuda::CudaError;
use cudarc::cudnn::sys;
use std::sync::Mutex;

/// Whether the graph API's choice for a pass beats the legacy API's, each
/// `(workspace bytes, timings)`, under a workspace limit of `limit` (see
/// [`super::beats`]). Where the legacy API timed nothing (before tuning)
/// it keeps the pass.
fn graph_runs(limit: usize, legacy: (usize, Seconds), graph: (usize, Seconds)) -> bool {
    legacy.1.fastest.is_some() && super::beats(limit, graph, legacy)
}

/// Both APIs' plans of one fp32 convolution shape, and which runs each
/// pass.
pub(super) struct EitherConv {
    legacy: LegacyConv,
    graph: GraphConv,
    /// By [`ConvPass::index`]: whether the graph API runs the pass.
    on_graph: Mutex<[bool; 3]>,
}

impl EitherConv {
    pub(super) fn new(legacy: LegacyConv, graph: GraphConv) -> Self {
        Self {
            legacy,
            graph,
            on_graph: Mutex::new([false; 3]),
        }
    }

    fn on_graph(&self) -> [bool; 3] {
        *self.on_graph.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many passes run on the graph API.
    pub(super) fn graph_passes(&self) -> usize {
        self.on_graph().iter().filter(|&&g| g).count()
    }

    pub(super) fn workspace_bytes(&self, pass: ConvPass) -> usize {
        match self.on_graph()[pass.index()] {
            true => self.graph.workspace_bytes(pass),
            false => self.legacy.workspace_bytes(pass),
        }
    }

    /// The chosen candidate's seconds, and the fastest either API timed.
    pub(super) fn seconds(&self, pass: ConvPass) -> Seconds {
        let (legacy, graph) = (self.legacy.seconds(pass), self.graph.seconds(pass));
        Seconds {
            chosen: match self.on_graph()[pass.index()] {
                true => graph.chosen,
                false => legacy.chosen,
            },
            fastest: [legacy.fastest, graph.fastest].into_iter().flatten().reduce(f64::min),
        }
    }

    pub(super) fn untune(&self) {
        self.legacy.untune();
        self.graph.untune();
        *self.on_graph.lock().unwrap_or_else(|e| e.into_inner()) = [false; 3];
    }

    /// Each API chooses its fastest candidate within the pass's limit; the
    /// pass runs the one that fits (where one API's does and the other's
    /// does not), else the faster by the timings, else the smaller. A pass
    /// the legacy API has no timings for stays on it.
    pub(super) fn select(&self, limits: [usize; 3]) -> usize {
        self.legacy.select(limits);
        self.graph.select(limits);
        let mut on = [false; 3];
        let mut largest = 0;
        for pass in ConvPass::ALL {
            let i = pass.index();
            let legacy = (self.legacy.workspace_bytes(pass), self.legacy.seconds(pass));
            let graph = (self.graph.workspace_bytes(pass), self.graph.seconds(pass));
            on[i] = graph_runs(limits[i], legacy, graph);
            largest = largest.max(if on[i] { graph.0 } else { legacy.0 });
        }
        *self.on_graph.lock().unwrap_or_else(|e| e.into_inner()) = on;
        largest
    }

    /// # Safety
    /// As [`super::ConvPlan::tune`].
    pub(super) unsafe fn tune(
        &self,
        handle: sys::cudnnHandle_t,
        xwy: [u64; 3],
        workspace: u64,
        workspace_bytes: usize,
    ) -> Result<bool, CudaError> {
        let changed = self.legacy.tune(handle, xwy, workspace, workspace_bytes)?;
        self.graph.tune(handle, xwy, workspace, workspace_bytes)?;
        self.select([usize::MAX; 3]);
        Ok(changed || self.graph_passes() > 0)
    }

    /// # Safety
    /// As [`super::ConvPlan::run`].
    pub(super) unsafe fn run(&self, handle: sys::cudnnHandle_t, call: PassCall) -> Result<(), CudaError> {
        match self.on_graph()[call.pass.index()] {
            true => self.graph.run(handle, call),
            false => self.legacy.run(handle, call),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::timed;
    use super::{graph_runs, Seconds};

    #[test]
    fn a_pass_runs_the_faster_api_within_its_limit() {
        const MIB: usize = 1 << 20;
        // Both fit: the faster.
        assert!(graph_runs(
            64 * MIB,
            (8 * MIB, timed(2e-3, 1e-3)),
            (16 * MIB, timed(1.5e-3, 1.5e-3))
        ));
        assert!(!graph_runs(
            64 * MIB,
            (8 * MIB, timed(1e-3, 1e-3)),
            (0, timed(1.5e-3, 1.5e-3))
        ));
        // Only one fits: that one, however slow.
        assert!(graph_runs(
            4 * MIB,
            (8 * MIB, timed(1e-3, 1e-3)),
            (0, timed(9e-3, 1e-3))
        ));
        assert!(!graph_runs(
            4 * MIB,
            (0, timed(9e-3, 1e-3)),
            (8 * MIB, timed(1e-3, 1e-3))
        ));
        // Neither fits (each kept its least workspace): the faster.
        assert!(graph_runs(
            0,
            (8 * MIB, timed(2e-3, 1e-3)),
            (4 * MIB, timed(1e-3, 1e-3))
        ));
        // An untimed choice (the heuristic's, where nothing timed fits)
        // loses to a timed one that fits, and ties go to the smaller.
        let untimed = Seconds {
            chosen: None,
            fastest: Some(1e-3),
        };
        assert!(graph_runs(4 * MIB, (0, untimed), (0, timed(5e-3, 1e-3))));
        assert!(graph_runs(0, (8 * MIB, untimed), (4 * MIB, untimed)));
        assert!(!graph_runs(0, (4 * MIB, untimed), (4 * MIB, untimed)));
        // Before tuning the legacy API's heuristic choice runs.
        let none = Seconds {
            chosen: None,
            fastest: None,
        };
        assert!(!graph_runs(usize::MAX, (8 * MIB, none), (0, timed(1e-6, 1e-6))));
    }
}
