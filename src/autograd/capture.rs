//! A step captured as a CUDA graph and replayed: the device records the
//! step's work (the runtime), the arena binds the graph to where the step's
//! buffers lay (its footprint), so a replay is refused where they no longer
//! hold.

use super::engine::Engine;
use super::{Recorded, Step};
use crate::backend::CapturedGraph;
use crate::memory::StepFootprint;
use crate::Result;

/// One training step's device work captured as a CUDA graph, bound to the
/// arena and the mark it was captured at.
pub struct StepGraph {
    graph: CapturedGraph,
    footprint: StepFootprint,
}

impl StepGraph {
    /// Nodes the graph runs per replay: kernels (cuDNN's and cuBLAS's
    /// included), memsets and copies.
    pub fn nodes(&self) -> usize {
        self.graph.nodes()
    }
}

impl<N: Recorded> Engine<N> {
    /// Records one step's device work as a CUDA graph, without running it:
    /// replay it with [`Engine::replay_step`] (once right away, to perform
    /// this step). `body` runs as a normal step on the host (the tape, the
    /// bump allocations), on the plan of kind `key` if given; it must not
    /// read from the device. During capture the driver refuses any device
    /// allocation, so a graph that captures at all allocates nothing when
    /// replayed either.
    pub fn capture_step(
        &mut self,
        key: Option<u32>,
        body: impl for<'s> FnOnce(&mut Step<'s, N>) -> Result<()>,
    ) -> Result<StepGraph> {
        self.runtime.begin_capture()?;
        let resets = self.arena.stats().resets;
        let ran = match key {
            Some(key) => self.planned_step(key, body),
            None => self.step(body),
        };
        let footprint = self.arena.captured(resets);
        let graph = self.runtime.end_capture();
        ran?;
        Ok(StepGraph {
            graph: graph?,
            footprint,
        })
    }

    /// Queues one replay of a step captured on this engine. Refused if the
    /// persistent region has grown since: the graph's step addresses would
    /// then overlap it.
    pub fn replay_step(&mut self, graph: &StepGraph) -> Result<()> {
        self.arena.check_replay(&graph.footprint)?;
        self.runtime.replay(&graph.graph)?;
        self.arena.replayed(&graph.footprint);
        Ok(())
    }
}
