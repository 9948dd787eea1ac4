//! The CPU backend: one host allocation and a rayon pool of `--threads`
//! workers. Kernels receive slices from [`memory::Views`] and stay safe code.

pub mod matmul;
pub mod memory;
pub mod sgemm;
pub mod simd;

pub use matmul::{matmul, Mat};
pub use memory::{CpuMemory, Views};

use super::BackendError;
use std::sync::Arc;

/// Stack every worker touches once when it starts.
const WORKER_STACK_TOUCHED: usize = 256 << 10;

/// Faults in the top of a worker's stack up front. Which worker steals which
/// kernel, and how deep its nested joins go, varies from step to step; left
/// alone, a worker's stack would grow by a page whenever it first went a
/// little deeper, and the process's memory would creep for no reason anyone
/// could see. Touched once, it stays flat.
fn touch_stack() {
    let mut page = [0u8; WORKER_STACK_TOUCHED];
    std::hint::black_box(&mut page);
}

/// A CPU that has not yet received its arena.
pub struct CpuDevice {
    pool: Arc<rayon::ThreadPool>,
}

impl CpuDevice {
    /// `threads == 0` means one worker per core.
    pub fn new(threads: usize) -> Result<Self, BackendError> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .thread_name(|i| format!("bumpgrad-cpu-{i}"))
            .start_handler(|_| touch_stack())
            .build()
            .map_err(|e| BackendError::ThreadPool {
                threads,
                reason: e.to_string(),
            })?;
        Ok(Self { pool: Arc::new(pool) })
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }
}

/// The CPU device holding its arena memory.
pub struct CpuBackend {
    memory: CpuMemory,
    pool: Arc<rayon::ThreadPool>,
}

impl CpuBackend {
    pub(crate) fn new(device: CpuDevice, capacity: usize) -> Result<Self, BackendError> {
        Ok(Self {
            memory: CpuMemory::new(capacity)?,
            pool: device.pool,
        })
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    pub(crate) fn pool(&self) -> &Arc<rayon::ThreadPool> {
        &self.pool
    }

    /// Runs one kernel on the pool with views of the arena. Everything the
    /// kernel touches is borrowed from `self` for the call alone.
    pub fn run<R: Send>(
        &mut self,
        kernel: impl FnOnce(&mut Views<'_>, usize) -> Result<R, BackendError> + Send,
    ) -> Result<R, BackendError> {
        let threads = self.pool.current_num_threads();
        let memory = &mut self.memory;
        self.pool.install(move || kernel(&mut memory.views(), threads))
    }
}
