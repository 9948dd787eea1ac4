//! Where a step's GPU time goes: CUDA events recorded just before and just
//! after each op of one step, so the sum of the ops' times (the floor a
//! perfect launcher would reach) can be set against the step's wall time.
//!
//! Recorded while a step is captured, the events become nodes of the graph:
//! every replay records them again, with no host work between the ops, so
//! the times read after a replay are the GPU's alone.
//!
//! The events are created when timing is switched on, which the trainer does
//! at start-up: an event may take device memory of its own, and nothing may
//! take device memory once training runs.

#[cfg(feature = "cuda")]
use super::{Call, CudaError, Gpu};
#[cfg(feature = "cuda")]
use crate::backend::OpTime;
#[cfg(feature = "cuda")]
use cudarc::driver::{result as driver, sys};

/// Event pairs around each op while a step is timed. Idle (and free) unless
/// [`OpTimer::arm`] was called.
#[derive(Default)]
#[cfg(feature = "cuda")]
pub(crate) struct OpTimer {
    events: Vec<(sys::CUevent, sys::CUevent)>,
    ops: Vec<&'static str>,
    /// Bracketing ops right now.
    recording: bool,
    /// An op's start was recorded and its end is due.
    open: bool,
    /// That op is being captured.
    capturing: bool,
}

// SAFETY: events are plain handles owned by this timer alone and used only
// through `&mut` access to the backend that holds it.
#[cfg(feature = "cuda")]
unsafe impl Send for OpTimer {}

#[cfg(feature = "cuda")]
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

    /// `capturing`: the stream is being captured into a graph.
    pub fn before(&mut self, gpu: &Gpu, op: &'static str, capturing: bool) {
        if !self.recording || self.ops.len() >= self.events.len() {
            return;
        }
        let (start, _) = self.events[self.ops.len()];
        self.open = record(start, gpu, capturing).is_ok();
        self.capturing = capturing;
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
        let _ = record(end, gpu, self.capturing);
    }

    /// Stops bracketing ops; the ops bracketed so far keep their events.
    pub fn pause(&mut self) {
        self.recording = false;
    }

    /// Stops timing and returns each op's time; the stream must have been
    /// synchronised since the last op.
    pub fn collect(&mut self, gpu: &Gpu, out: &mut Vec<OpTime>) -> Result<(), CudaError> {
        self.recording = false;
        out.clear();
        for (i, &op) in self.ops.iter().enumerate() {
            let (start, end) = self.events[i];
            gpu.calls.count(Call::Event);
            // SAFETY: both events were recorded on our stream, which the
            // caller synchronised, so both have completed.
            let ms = unsafe { driver::event::elapsed(start, end) }
                .map_err(|e| CudaError::failed("cuEventElapsedTime", e))?;
            out.push(OpTime {
                op,
                at: None,
                seconds: ms as f64 / 1e3,
            });
        }
        Ok(())
    }

    /// GPU time from the first op's start to the last op's end.
    pub fn span(&self, gpu: &Gpu) -> Result<Option<f64>, CudaError> {
        let (Some(&(first, _)), Some(&(_, last))) =
            (self.events.first(), self.events.get(self.ops.len().wrapping_sub(1)))
        else {
            return Ok(None);
        };
        gpu.calls.count(Call::Event);
        // SAFETY: as in `collect`.
        let ms =
            unsafe { driver::event::elapsed(first, last) }.map_err(|e| CudaError::failed("cuEventElapsedTime", e))?;
        Ok(Some(ms as f64 / 1e3))
    }
}

/// Records `event` on the GPU's stream. While the stream is captured, as an
/// "external" record: it then becomes a node of the graph (a plain record
/// would only mark a dependency) and every replay records it again.
#[cfg(feature = "cuda")]
fn record(event: sys::CUevent, gpu: &Gpu, capturing: bool) -> Result<(), sys::CUresult> {
    let flags = if capturing {
        sys::CUevent_record_flags::CU_EVENT_RECORD_EXTERNAL
    } else {
        sys::CUevent_record_flags::CU_EVENT_RECORD_DEFAULT
    } as u32;
    gpu.calls.count(Call::Event);
    // SAFETY: the event was created by `OpTimer::create` and is alive; the
    // stream belongs to `gpu`. A failed record only loses one op's timing.
    match unsafe { sys::cuEventRecordWithFlags(event, gpu.stream.cu_stream(), flags) } {
        sys::CUresult::CUDA_SUCCESS => Ok(()),
        e => Err(e),
    }
}

#[cfg(feature = "cuda")]
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
