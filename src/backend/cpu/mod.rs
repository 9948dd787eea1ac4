//! The CPU backend: one host allocation and a rayon pool of `--threads`
//! workers. Kernels receive slices from [`memory::Views`] and stay safe code.

pub mod matmul;
pub mod memory;
pub mod sgemm;
pub mod simd;

pub use matmul::{matmul, Mat};
pub use memory::{CpuMemory, Views};

use super::BackendError;
use crate::distributed::local::LocalPeer;
use crate::memory::Buf;
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

/// The size of a page of host memory as the system reports it: 4 KiB on
/// most x86-64 Linux, 16 or 64 KiB on some ARM systems, so never assumed.
#[cfg(unix)]
pub fn page_size() -> Option<usize> {
    // SAFETY: sysconf reads a configuration value; it takes no pointer and
    // has no precondition.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(size).ok().filter(|&s| s > 0)
}

/// A CPU that has not yet received its arena.
pub struct CpuDevice {
    pool: Arc<rayon::ThreadPool>,
    /// The in-process group it trains with, if any.
    pub(crate) group: Option<LocalPeer>,
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
        Ok(Self {
            pool: Arc::new(pool),
            group: None,
        })
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }
}

/// The CPU device holding its arena memory.
pub struct CpuBackend {
    memory: CpuMemory,
    pool: Arc<rayon::ThreadPool>,
    /// The byte ranges the current op declared ([`crate::Step::uses`]); an
    /// op's kernels may touch nothing else, which keeps the declarations
    /// (and the memory plan built from them) honest.
    declared: Declared,
    group: Option<LocalPeer>,
}

/// Up to [`MAX_DECLARED`] `(start, end)` ranges; `None` before any op
/// declared (then kernels are not checked).
pub(crate) type Declared = Option<([(usize, usize); MAX_DECLARED], usize)>;

pub(crate) const MAX_DECLARED: usize = 16;

impl CpuBackend {
    pub(crate) fn new(device: CpuDevice, capacity: usize) -> Result<Self, BackendError> {
        Ok(Self {
            memory: CpuMemory::new(capacity)?,
            pool: device.pool,
            declared: None,
            group: device.group,
        })
    }

    /// This thread's rank and the group's size.
    pub fn world(&self) -> (usize, usize) {
        self.group.as_ref().map_or((0, 1), |g| (g.rank(), g.world()))
    }

    /// Sums `buf` over the group, in place (nothing to do alone).
    pub(crate) fn all_reduce_sum(&mut self, buf: Buf<f32>) -> Result<(), BackendError> {
        let Some(group) = &self.group else { return Ok(()) };
        let mut views = self.memory.views(None);
        group.all_reduce_sum(views.write(buf)?)
    }

    pub fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }

    pub(crate) fn pool(&self) -> &Arc<rayon::ThreadPool> {
        &self.pool
    }

    /// The ranges the next kernels may touch.
    pub(crate) fn declare(&mut self, ranges: impl Iterator<Item = (usize, usize)>) {
        let mut list = [(0, 0); MAX_DECLARED];
        let mut n = 0;
        for r in ranges {
            if n == MAX_DECLARED {
                // More than a table holds: stop checking rather than refuse.
                self.declared = None;
                return;
            }
            list[n] = r;
            n += 1;
        }
        self.declared = Some((list, n));
    }

    /// Runs one kernel of an op on the pool with views of the arena, which
    /// refuse any range the op did not declare. Everything the kernel
    /// touches is borrowed from `self` for the call alone.
    pub fn run<R: Send>(
        &mut self,
        kernel: impl FnOnce(&mut Views<'_>, usize) -> Result<R, BackendError> + Send,
    ) -> Result<R, BackendError> {
        let threads = self.pool.current_num_threads();
        let (memory, declared) = (&mut self.memory, self.declared);
        self.pool.install(move || kernel(&mut memory.views(declared), threads))
    }

    /// [`CpuBackend::run`] for the backend's own copies and fills, which
    /// touch exactly the buffer they are given.
    pub(crate) fn run_unchecked<R: Send>(
        &mut self,
        kernel: impl FnOnce(&mut Views<'_>) -> Result<R, BackendError> + Send,
    ) -> Result<R, BackendError> {
        let memory = &mut self.memory;
        self.pool.install(move || kernel(&mut memory.views(None)))
    }
}
