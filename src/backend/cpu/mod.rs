//! The CPU backend: one host allocation and a rayon pool of `--threads`
//! workers. Kernels receive slices from `memory::Views` and stay safe code.

// The product panics on shapes that disagree (a kernel's bug, never the
// user's input), so it stays inside the crate, behind the ops that check.
mod clock;
pub mod collective;
pub(crate) mod matmul;
pub(crate) mod memory;
pub mod sgemm;
pub(crate) mod simd;
pub(crate) mod vmath;

pub(crate) use matmul::{matmul, Mat};
pub(crate) use memory::{CpuMemory, Views};

use super::BackendError;
use crate::base::Buf;
use clock::OpClock;
use collective::LocalPeer;
use std::panic::Location;
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
    /// What runtimes made on it compute by (fp32 only; see `Device::set_policy`).
    pub(crate) policy: super::Policy,
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
            policy: super::Policy::default(),
            group: None,
        })
    }

    pub(crate) fn threads(&self) -> usize {
        self.pool.current_num_threads()
    }
}

/// The CPU device holding its arena memory.
pub(crate) struct CpuBackend {
    memory: CpuMemory,
    pool: Arc<rayon::ThreadPool>,
    /// The `(start, end)` byte ranges the current op declared
    /// ([`crate::Step::uses`]); an op's kernels may touch nothing else, which
    /// keeps the declarations (and the memory plan built from them) honest.
    /// However many an op declares, all are checked: the vector keeps its
    /// capacity, so after the first step declaring allocates nothing.
    declared: Vec<(usize, usize)>,
    /// Whether any op has declared yet (before that, kernels run unchecked).
    checking: bool,
    group: Option<LocalPeer>,
    /// Times ops while a step is profiled (`--profile`).
    clock: OpClock,
}

impl CpuBackend {
    pub(crate) fn new(device: CpuDevice, capacity: usize) -> Result<Self, BackendError> {
        Ok(Self {
            memory: CpuMemory::new(capacity)?,
            pool: device.pool,
            declared: Vec::new(),
            checking: false,
            group: device.group,
            clock: OpClock::default(),
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
        self.declared.clear();
        self.declared.extend(ranges);
        self.checking = true;
    }

    /// Runs one kernel of an op on the pool with views of the arena, which
    /// refuse any range the op did not declare. Everything the kernel
    /// touches is borrowed from `self` for the call alone. While a step is
    /// profiled the call is timed: `name` and `at` say which op it is.
    pub(crate) fn run_op<R: Send>(
        &mut self,
        name: &'static str,
        at: &'static Location<'static>,
        kernel: impl FnOnce(&mut Views<'_>, usize) -> Result<R, BackendError> + Send,
    ) -> Result<R, BackendError> {
        let declared = self.checking.then_some(&self.declared[..]);
        let (pool, memory) = (&self.pool, &mut self.memory);
        self.clock.time(name, at, || install(pool, memory, declared, kernel))
    }

    /// [`CpuBackend::run_op`] for tests, named after the test's line.
    #[cfg(test)]
    #[track_caller]
    pub fn run<R: Send>(
        &mut self,
        kernel: impl FnOnce(&mut Views<'_>, usize) -> Result<R, BackendError> + Send,
    ) -> Result<R, BackendError> {
        self.run_op("test", Location::caller(), kernel)
    }

    /// The clock that times ops (see [`OpClock`]).
    pub(crate) fn clock(&mut self) -> &mut OpClock {
        &mut self.clock
    }

    /// [`CpuBackend::run_op`] for the backend's own copies and fills, which
    /// touch exactly the buffer they are given.
    pub(crate) fn run_unchecked<R: Send>(
        &mut self,
        kernel: impl FnOnce(&mut Views<'_>) -> Result<R, BackendError> + Send,
    ) -> Result<R, BackendError> {
        let memory = &mut self.memory;
        self.pool.install(move || kernel(&mut memory.views(None)))
    }
}

/// Runs `kernel` on `pool` with views of `memory` that refuse anything
/// outside `declared` (when checking), and the pool's worker count.
fn install<R: Send>(
    pool: &rayon::ThreadPool,
    memory: &mut CpuMemory,
    declared: Option<&[(usize, usize)]>,
    kernel: impl FnOnce(&mut Views<'_>, usize) -> Result<R, BackendError> + Send,
) -> Result<R, BackendError> {
    let threads = pool.current_num_threads();
    pool.install(move || kernel(&mut memory.views(declared), threads))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The check holds however many ranges an op declares (it once lapsed
    /// past 16, leaving the memory plan's premise unchecked).
    #[test]
    fn an_undeclared_range_is_refused_past_many_declared_ones() {
        let mut cpu = CpuBackend::new(CpuDevice::new(1).unwrap(), 64 << 10).unwrap();
        let declared: Vec<(usize, usize)> = (0..40).map(|i| (i * 1024, i * 1024 + 256)).collect();
        cpu.declare(declared.iter().copied());
        let last = Buf::<f32>::new(39 * 1024, 64);
        cpu.run(|v, _| v.read(last).map(|_| ()))
            .expect("the 40th declared range is usable");
        let between = Buf::<f32>::new(39 * 1024 + 512, 64);
        assert!(matches!(
            cpu.run(|v, _| v.write(between).map(|_| ())),
            Err(BackendError::Undeclared { offset, .. }) if offset == 39 * 1024 + 512
        ));
    }
}
