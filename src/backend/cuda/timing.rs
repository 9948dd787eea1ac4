//! Where a step's GPU time goes: CUDA events recorded just before and just
//! after each op of one step, so the sum of the ops' times (the floor a
//! perfect launcher would reach) can be set against the step's wall time.
//!
//! The events are created when timing is switched on, which the trainer does
//! at start-up: an event may take device memory of its own, and nothing may
//! take device memory once training runs.

use super::{CudaError, Gpu};
use cudarc::driver::{result as driver, sys};

/// How long one op of a timed step took on the GPU.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OpTime {
    pub op: &'static str,
    pub seconds: f64,
}

/// Event pairs around each op while a step is timed. Idle (and free) unless
/// [`OpTimer::arm`] was called.
#[derive(Default)]
pub(crate) struct OpTimer {
    events: Vec<(sys::CUevent, sys::CUevent)>,
    ops: Vec<&'static str>,
    /// Bracketing ops right now.
    recording: bool,
    /// An op's start was recorded and its end is due.
    open: bool,
}

// SAFETY: events are plain handles owned by this timer alone and used only
// through `&mut` access to the backend that holds it.
unsafe impl Send for OpTimer {}

impl OpTimer {
    /// Creates `capacity` event pairs (at start-up).
    pub fn create(&mut self, gpu: &Gpu, capacity: usize) -> Result<(), CudaError> {
        gpu.enter()?;
        let flags = sys::CUevent_flags::CU_EVENT_DEFAULT;
        while self.events.len() < capacity {
            let a = driver::event::create(flags).map_err(|e| CudaError::failed("cuEventCreate", e))?;
            let b = driver::event::create(flags).map_err(|e| CudaError::failed("cuEventCreate", e))?;
            self.events.push((a, b));
        }
        self.ops.reserve(capacity);
        Ok(())
    }

    /// Starts bracketing every op until [`OpTimer::collect`].
    pub fn start(&mut self) -> bool {
        if self.events.is_empty() {
            return false;
        }
        self.ops.clear();
        self.recording = true;
        true
    }

    pub fn before(&mut self, gpu: &Gpu, op: &'static str) {
        if !self.recording || self.ops.len() >= self.events.len() {
            return;
        }
        let (start, _) = self.events[self.ops.len()];
        // SAFETY: the event was created by `create` and is alive; the stream
        // belongs to `gpu`. A failed record only loses this op's timing.
        self.open = unsafe { driver::event::record(start, gpu.stream.cu_stream()) }.is_ok();
        if self.open {
            self.ops.push(op);
        }
    }

    pub fn after(&mut self, gpu: &Gpu) {
        if !self.open {
            return;
        }
        self.open = false;
        let (_, end) = self.events[self.ops.len() - 1];
        // SAFETY: as in `before`.
        let _ = unsafe { driver::event::record(end, gpu.stream.cu_stream()) };
    }

    /// Stops timing and returns each op's time; the stream must have been
    /// synchronised since the last op.
    pub fn collect(&mut self, out: &mut Vec<OpTime>) -> Result<(), CudaError> {
        self.recording = false;
        out.clear();
        for (i, &op) in self.ops.iter().enumerate() {
            let (start, end) = self.events[i];
            // SAFETY: both events were recorded on our stream, which the
            // caller synchronised, so both have completed.
            let ms = unsafe { driver::event::elapsed(start, end) }
                .map_err(|e| CudaError::failed("cuEventElapsedTime", e))?;
            out.push(OpTime {
                op,
                seconds: ms as f64 / 1e3,
            });
        }
        Ok(())
    }
}

impl Drop for OpTimer {
    fn drop(&mut self) {
        for &(a, b) in &self.events {
            // SAFETY: each event was created once by `create` and is destroyed
            // once here.
            unsafe {
                let _ = driver::event::destroy(a);
                let _ = driver::event::destroy(b);
            }
        }
    }
}
