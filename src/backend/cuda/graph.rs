//! Whole-step CUDA graphs: one training step's work recorded from the
//! stream once, then replayed with a single launch.
//!
//! Sound replay rests on the arena: a step allocates the same sequence at
//! the same offsets every time, so the addresses baked into the graph are
//! the addresses the next step would use. The arena (which owns the graph's
//! validity check) refuses a replay after its mark moved.

use super::{Call, CudaBackend, CudaError, Gpu};
use crate::backend::BackendError;
use cudarc::driver::{result as driver, sys};
use std::sync::Arc;

/// A captured, instantiated graph and how many nodes (kernels, copies,
/// memsets) it runs.
pub struct CapturedGraph {
    graph: sys::CUgraph,
    exec: sys::CUgraphExec,
    nodes: usize,
    gpu: Arc<Gpu>,
}

// SAFETY: graph handles are not internally synchronised; a CapturedGraph is
// only used through `&` by a backend that holds `&mut self`, never from two
// threads at once, and moving the handles between threads is allowed.
unsafe impl Send for CapturedGraph {}

impl CapturedGraph {
    pub(crate) fn nodes(&self) -> usize {
        self.nodes
    }
}

impl Drop for CapturedGraph {
    fn drop(&mut self) {
        let _ = self.gpu.enter();
        // SAFETY: created once by `end_capture`, destroyed once here; no
        // launch of it can be pending because the owner synchronises
        // before dropping its arena (and a replay only queues on the stream
        // whose later work the driver orders after it).
        unsafe {
            let _ = driver::graph::exec_destroy(self.exec);
            let _ = driver::graph::destroy(self.graph);
        }
    }
}

impl CudaBackend {
    /// Starts recording the stream instead of running it. Thread-local
    /// mode: the driver refuses an allocation (or any other call unsafe
    /// during capture) from this thread, which would be our mistake; other
    /// threads are left alone, as they must be when several ranks of a
    /// data-parallel run share a process or NCCL's own threads work.
    pub(crate) fn begin_capture(&mut self) -> Result<(), BackendError> {
        self.enter("cuStreamBeginCapture")?;
        self.gpu.calls.count(Call::Capture);
        // SAFETY: the stream is ours and not being captured (`capturing`).
        let r = unsafe {
            driver::stream::begin_capture(
                self.gpu.stream.cu_stream(),
                sys::CUstreamCaptureMode::CU_STREAM_CAPTURE_MODE_THREAD_LOCAL,
            )
        };
        self.check("cuStreamBeginCapture", r)?;
        self.capturing = true;
        Ok(())
    }

    /// Ends the recording and instantiates the graph. Called also when the
    /// captured step failed, so that the stream leaves capture mode.
    pub(crate) fn end_capture(&mut self) -> Result<CapturedGraph, BackendError> {
        self.capturing = false;
        let stream = self.gpu.stream.cu_stream();
        self.gpu.calls.count(Call::Capture);
        // SAFETY: the stream was put in capture mode by `begin_capture`.
        let graph = unsafe { driver::stream::end_capture(stream) }
            .map_err(|e| self.poison("cuStreamEndCapture", CudaError::failed("cuStreamEndCapture", e)))?;
        if graph.is_null() {
            return Err(self.poison(
                "cuStreamEndCapture",
                CudaError::failed("cuStreamEndCapture", "the capture was invalidated"),
            ));
        }
        let mut nodes = 0usize;
        // Counting the nodes, then instantiating.
        self.gpu.calls.count(Call::Capture);
        self.gpu.calls.count(Call::Capture);
        // SAFETY: `graph` is the graph just captured; a null node array asks
        // only for the count.
        let counted = unsafe { sys::cuGraphGetNodes(graph, std::ptr::null_mut(), &mut nodes) }.result();
        // SAFETY: as above; the graph is instantiated once.
        let exec =
            counted.and_then(|()| unsafe { driver::graph::instantiate(graph, sys::CUgraphInstantiate_flags(0)) });
        match exec {
            Ok(exec) => Ok(CapturedGraph {
                graph,
                exec,
                nodes,
                gpu: self.gpu.clone(),
            }),
            Err(e) => {
                // SAFETY: the graph was created above and is not used again.
                let _ = unsafe { driver::graph::destroy(graph) };
                Err(self.poison("cuGraphInstantiate", CudaError::failed("cuGraphInstantiate", e)))
            }
        }
    }

    /// Queues one replay of `graph`.
    pub(crate) fn replay(&mut self, graph: &CapturedGraph) -> Result<(), BackendError> {
        self.enter("cuGraphLaunch")?;
        if !Arc::ptr_eq(&graph.gpu, &self.gpu) {
            return Err(BackendError::Internal(
                "a graph was replayed on another GPU than it was captured on",
            ));
        }
        // SAFETY: the exec is alive (owned by `graph`) and belongs to this
        // GPU's context; the arena checked that the memory it addresses is
        // laid out as when it was captured.
        self.gpu.calls.count(Call::GraphLaunch);
        let r = unsafe { driver::graph::launch(graph.exec, self.gpu.stream.cu_stream()) };
        self.ops_queued += 1;
        self.check("cuGraphLaunch", r)
    }
}
