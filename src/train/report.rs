//! What a training run tells its caller: per-step progress and per-epoch
//! reports, through an [`Observer`] (the CLI draws bars, tests collect).

use crate::backend::DeviceKind;
use crate::memory::ArenaStats;

/// Facts fixed when the run starts.
#[derive(Debug, Clone, serde::Serialize)]
pub struct RunInfo {
    pub device: DeviceKind,
    /// "cpu (2 threads)", "NVIDIA H200 (sm_90)".
    pub device_name: String,
    pub threads: usize,
    /// Why `--device auto` did not pick the GPU, if it did not.
    pub device_note: Option<String>,
    pub train_examples: usize,
    pub test_examples: usize,
    pub steps_per_epoch: usize,
    /// Whether the arena size was measured (`auto`) or given.
    pub arena_size_measured: bool,
    pub arena: ArenaStats,
}

/// One epoch, as `--json` prints it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct EpochReport {
    pub epoch: usize,
    pub train_loss: f64,
    /// Fraction of the test set classified correctly, in [0, 1].
    pub test_accuracy: f64,
    /// Training time of the epoch, evaluation excluded.
    pub seconds: f64,
    pub eval_seconds: f64,
    pub steps: usize,
    pub arena: ArenaStats,
    /// The process's resident memory after the epoch, where the OS tells it.
    pub resident_bytes: Option<u64>,
    /// On a GPU: free device memory (`cuMemGetInfo`) after the epoch...
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_free_bytes: Option<usize>,
    /// ...and after the run's first training step. Nothing allocates device
    /// memory but the arena, made before it, so the two are equal.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub device_free_bytes_first_step: Option<usize>,
}

/// Receives progress; every method has a do-nothing default.
pub trait Observer {
    fn started(&mut self, _info: &RunInfo) {}
    fn epoch_started(&mut self, _epoch: usize, _steps: usize) {}
    fn step(&mut self, _epoch: usize, _step: usize, _loss: f32) {}
    fn evaluating(&mut self, _epoch: usize) {}
    fn epoch(&mut self, _report: &EpochReport) {}
}

/// An observer that ignores everything.
pub struct Quiet;
impl Observer for Quiet {}

/// The process's resident set size, from `/proc/self/statm` (Linux only).
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}
