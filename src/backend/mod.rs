//! Where tensors live and kernels run: the seam between "what" and "where".
//!
//! A [`Runtime`] is made on a [`Device`] and owns the device's one
//! allocation, as large as the arena beside it, through a `Backend`. Ops
//! reach it through one launch helper (`Step::launch`, `ops/launch.rs`)
//! that matches on it once and takes a body per device, so a new backend
//! adds an arm and a body there, and the compiler lists every launch still
//! missing that body. The `Dry` backend has no memory and runs no kernel:
//! shaped like a real device (its threads, its GPU's cuDNN workspace
//! sizes), it is what a step that only plans runs on, measuring the arena
//! a run needs before the real allocation is made.

mod capabilities;
mod conv;
pub mod cpu;
pub mod cuda;
mod mode;
mod op_time;
mod policy;
mod precision;
mod runtime;

pub use conv::ConvDims;
pub(crate) use cuda::CapturedGraph;

use crate::base::{Buf, Element, FloatBuf};
pub use cuda::KernelSource;
pub use mode::Mode;
pub use op_time::OpTime;
pub use policy::Policy;
pub use precision::Precision;
pub use runtime::Runtime;
use std::fmt;
use std::sync::Arc;

/// Failures below the op layer.
#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    /// The host could not give the CPU arena its one allocation.
    #[error("could not allocate the arena's {} of host memory", crate::base::ByteSize(*.bytes))]
    HostAllocation {
        /// The arena's bytes.
        bytes: usize,
    },
    /// The GPU could not give the arena its one allocation.
    #[error(
        "could not allocate the arena's {} on the GPU ({} free)",
        crate::base::ByteSize(*.bytes), crate::base::ByteSize(*.free)
    )]
    DeviceAllocation {
        /// The arena's bytes.
        bytes: usize,
        /// Device memory free when it was asked.
        free: usize,
    },
    /// The CPU's worker pool could not start.
    #[error("could not start {threads} CPU threads: {reason}")]
    ThreadPool {
        /// Workers asked for.
        threads: usize,
        /// What rayon said.
        reason: String,
    },
    /// A kernel's range lies past the arena: an op's bug, caught before the
    /// memory is touched.
    #[error("internal error: a kernel asked for {bytes} bytes at offset {offset}, past the arena's {capacity} bytes")]
    OutOfBounds {
        /// Where the range starts, in bytes from the arena's start.
        offset: usize,
        /// The range's length.
        bytes: usize,
        /// The arena's bytes.
        capacity: usize,
    },
    /// A kernel asked to write a range another of its views holds: two slices
    /// of one call may not overlap.
    #[error("internal error: a kernel asked to write {bytes} bytes at offset {offset} that another view of the same kernel holds")]
    Aliased {
        /// Where the range starts.
        offset: usize,
        /// The range's length.
        bytes: usize,
    },
    /// A kernel read a buffer as another element type than it holds.
    #[error("internal error: a {wanted} kernel was handed a buffer of another type")]
    OtherType {
        /// The type the kernel wanted.
        wanted: &'static str,
    },
    /// A kernel asked for more views than one call is handed (a fixed table, so
    /// a launch allocates nothing).
    #[error("internal error: a kernel asked for more views than the backend hands out at once")]
    TooManyViews,
    /// A broken invariant of the backend, said in words.
    #[error("internal error: {0}")]
    Internal(&'static str),
    /// A CPU kernel touched a range its op did not declare (`Step::launch`'s
    /// list), so the liveness plan could not have known of it.
    #[error("internal error: a kernel touched {bytes} bytes at offset {offset} that its op did not declare")]
    Undeclared {
        /// Where the range starts.
        offset: usize,
        /// The range's length.
        bytes: usize,
    },
    /// Gradients of two lengths were summed.
    #[error("internal error: adding a buffer of {src} elements onto one of {dst}")]
    LengthMismatch {
        /// Elements of the buffer summed into.
        dst: usize,
        /// Elements of the buffer added.
        src: usize,
    },
    /// A copy between the host and the arena with slices of two lengths.
    #[error("internal error: host buffer of {host} elements for a device buffer of {device}")]
    HostLength {
        /// Elements on the host.
        host: usize,
        /// Elements in the arena.
        device: usize,
    },
    /// A label the model has no output for, found by the kernel that reads it:
    /// the data set's, not the program's, fault.
    #[error(
        "label {label} of example {index} is not one of the model's {classes} classes; check the data set's labels"
    )]
    Label {
        /// The example in the batch.
        index: usize,
        /// Its label.
        label: u32,
        /// The model's classes.
        classes: usize,
    },
    /// An example index past the resident data set (a corrupt order).
    #[error("example index {index} is past the data set's {count} examples")]
    Index {
        /// The index.
        index: u32,
        /// Examples resident.
        count: usize,
    },
    /// A token id past the embedding's rows: the vocabulary and the data
    /// disagree.
    #[error("token {token} at position {index} is past the embedding's {vocab} rows; check the vocabulary")]
    Token {
        /// Its position in the batch.
        index: usize,
        /// The token id.
        token: u32,
        /// The embedding's rows.
        vocab: usize,
    },
    /// A data-parallel group could not be joined or used; why, in words.
    #[error("data-parallel training: {0}")]
    Group(String),
    /// A NCCL group asked of the CPU, which sums only between threads of one
    /// process.
    #[error("data-parallel training across processes needs GPUs (NCCL); this device is the CPU")]
    ProcessGroupOnCpu,
    /// A capability only the CUDA backend has (see `capabilities.rs`).
    #[error("{what} need the CUDA backend (this arena is on the {on} device)")]
    NeedsCuda {
        /// The capability, in the plural ("whole-step graphs").
        what: &'static str,
        /// The device the arena is on.
        on: DeviceKind,
    },
    /// The GPU backend's failures.
    #[error(transparent)]
    Cuda(#[from] cuda::CudaError),
}

/// What the user asked for with `--device`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceRequest {
    /// The GPU when one is usable, else the CPU.
    #[default]
    Auto,
    /// The CPU, even where a GPU is usable.
    Cpu,
    /// The GPU; an error where none is usable.
    Cuda,
}

/// A device ready to receive an arena.
pub enum Device {
    /// The CPU and its worker pool.
    Cpu(cpu::CpuDevice),
    /// A GPU, its kernels compiled.
    Cuda(cuda::CudaDevice),
}

impl Device {
    /// The CPU with `threads` worker threads (0: one per core).
    pub fn cpu(threads: usize) -> Result<Self, BackendError> {
        Ok(Self::Cpu(cpu::CpuDevice::new(threads)?))
    }

    /// Resolves `--device`; a GPU compiles `kernels` (the ops' sources,
    /// `ops::KERNELS`) when it opens, the CPU needs none. Returns the device
    /// and, when `auto` fell back to the CPU, the one line saying why.
    pub fn open(
        request: DeviceRequest,
        threads: usize,
        kernels: &[KernelSource],
    ) -> Result<(Self, Option<String>), BackendError> {
        Self::open_on(request, threads, 0, kernels)
    }

    /// [`Device::open`] with GPU `ordinal` (a data-parallel rank's own GPU).
    pub fn open_on(
        request: DeviceRequest,
        threads: usize,
        ordinal: usize,
        kernels: &[KernelSource],
    ) -> Result<(Self, Option<String>), BackendError> {
        match request {
            DeviceRequest::Cpu => Ok((Self::cpu(threads)?, None)),
            DeviceRequest::Cuda => Ok((Self::Cuda(cuda::open(ordinal, kernels)?), None)),
            DeviceRequest::Auto => match cuda::open(ordinal, kernels) {
                Ok(gpu) => Ok((Self::Cuda(gpu), None)),
                Err(why) if why.is_unavailable() => Ok((
                    Self::cpu(threads)?,
                    Some(format!("no usable GPU ({}); training on the CPU", why.reason())),
                )),
                // A GPU is there but our kernels or its libraries failed on
                // it: falling back would hide a defect behind a slow run.
                Err(broken) => Err(broken.into()),
            },
        }
    }

    /// The compute policy runtimes made on this device start with (see
    /// [`Policy`]): fp32 and not deterministic until set.
    pub fn policy(&self) -> Policy {
        match self {
            Self::Cpu(cpu) => cpu.policy,
            Self::Cuda(gpu) => gpu.policy,
        }
    }

    /// Sets the compute policy, or refuses one the device cannot follow
    /// (the CPU computes in fp32 only).
    pub fn set_policy(&mut self, policy: Policy) -> Result<(), BackendError> {
        policy.check(self.kind())?;
        match self {
            Self::Cpu(cpu) => cpu.policy = policy,
            Self::Cuda(gpu) => gpu.policy = policy,
        }
        Ok(())
    }

    /// Sets the policy's precision (see [`Device::set_policy`]).
    pub fn set_precision(&mut self, precision: Precision) -> Result<(), BackendError> {
        self.set_policy(Policy {
            precision,
            ..self.policy()
        })
    }

    /// Sets whether convolutions use deterministic algorithms only (see
    /// [`Policy::deterministic`]); the CPU's kernels always are.
    pub fn set_deterministic(&mut self, on: bool) {
        let policy = Policy {
            deterministic: on,
            ..self.policy()
        };
        match self {
            Self::Cpu(cpu) => cpu.policy = policy,
            Self::Cuda(gpu) => gpu.policy = policy,
        }
    }

    /// Every convolution shape planned on this device so far and which of
    /// cuDNN's APIs runs it; none on the CPU.
    pub fn convolution_apis(&self) -> Vec<(cuda::ConvDims, cuda::ConvApi)> {
        match self {
            Self::Cuda(gpu) => gpu.gpu().conv_plans().iter().map(|p| (p.dims, p.api())).collect(),
            Self::Cpu(_) => Vec::new(),
        }
    }

    fn kind(&self) -> DeviceKind {
        match self {
            Self::Cpu(_) => DeviceKind::Cpu,
            Self::Cuda(_) => DeviceKind::Cuda,
        }
    }

    /// What the device is, for people: "cpu (2 threads)", "NVIDIA H200 (sm_90)".
    pub fn describe(&self) -> String {
        match self {
            Self::Cpu(cpu) => format!("cpu ({} threads)", cpu.threads()),
            Self::Cuda(gpu) => gpu.gpu().describe(),
        }
    }

    /// Worker threads kernels may use; kernels whose allocations depend on
    /// it (per-thread partial sums) ask here, so a dry run of a device sizes
    /// its arena exactly.
    pub fn threads(&self) -> usize {
        match self {
            Self::Cpu(cpu) => cpu.threads(),
            Self::Cuda(_) => 1,
        }
    }

    /// Joins the device to a data-parallel group (before its arena is
    /// made): a GPU joins a NCCL communicator, a CPU an in-process group of
    /// threads (see [`cpu::collective`]).
    pub fn join(&mut self, group: Group) -> Result<(), BackendError> {
        match (self, group) {
            (Self::Cuda(gpu), Group::Nccl { id, rank, world }) => Ok(gpu.join(id, rank, world)?),
            (Self::Cpu(cpu), Group::Local(peer)) => {
                cpu.group = Some(peer);
                Ok(())
            }
            (Self::Cpu(_), Group::Nccl { .. }) => Err(BackendError::ProcessGroupOnCpu),
            (Self::Cuda(_), Group::Local(_)) => Err(BackendError::Group(
                "an in-process group of threads is for the CPU backend only".into(),
            )),
        }
    }

    fn sizing(&self) -> Sizing {
        match self {
            Self::Cpu(cpu) => Sizing::Cpu { threads: cpu.threads() },
            Self::Cuda(gpu) => Sizing::Cuda(gpu.gpu().clone()),
        }
    }
}

/// A data-parallel group a device joins.
pub enum Group {
    /// A NCCL communicator: its id (made by rank 0), this rank, the ranks.
    Nccl {
        /// NCCL's unique id, made by rank 0 and handed to the others at the
        /// rendezvous.
        id: [u8; 128],
        /// This rank.
        rank: usize,
        /// The ranks in the group.
        world: usize,
    },
    /// Threads of this process, each with a CPU arena (tests of the
    /// data-parallel logic without GPUs).
    Local(cpu::collective::LocalPeer),
}

/// What a step's temporaries must be sized for: the CPU kernels' scratch
/// depends on the worker count, cuDNN's workspaces on the GPU's algorithms.
#[derive(Clone)]
pub(crate) enum Sizing {
    Cpu { threads: usize },
    Cuda(Arc<cuda::Gpu>),
}

/// Which kind of backend an arena is on, for reports and refusals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum DeviceKind {
    /// The CPU backend.
    Cpu,
    /// The CUDA backend.
    Cuda,
    /// A backend that only plans: no memory, no kernels.
    Dry,
}

impl fmt::Display for DeviceKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Cpu => "cpu",
            Self::Cuda => "cuda",
            Self::Dry => "dry",
        })
    }
}

/// The device's worker threads, as a handle the training loop can hold while
/// it borrows the arena.
///
/// Code run through [`Workers::run`] executes on a worker, so each kernel's
/// parallel loop is scheduled on that worker's own queue. Called from outside
/// the pool, every kernel would instead be injected into the pool's shared
/// queue, whose blocks are heap-allocated as it fills: running a whole epoch
/// inside keeps training steps free of heap allocations.
#[derive(Clone)]
pub struct Workers(Option<std::sync::Arc<rayon::ThreadPool>>);

impl Workers {
    /// Runs `body` on one of the workers (at once where there are none, on a
    /// GPU).
    pub fn run<R: Send>(&self, body: impl FnOnce() -> R + Send) -> R {
        match &self.0 {
            Some(pool) => pool.install(body),
            None => body(),
        }
    }
}

/// A device together with its arena memory. Ops' launch helper `match`es on this.
pub(crate) enum Backend {
    Cpu(cpu::CpuBackend),
    Cuda(cuda::CudaBackend),
    /// Counts bytes; has no memory and runs nothing.
    Dry(Sizing),
}

impl Backend {
    pub(crate) fn new(device: Device, capacity: usize) -> Result<Self, BackendError> {
        Ok(match device {
            Device::Cpu(cpu) => Self::Cpu(cpu::CpuBackend::new(cpu, capacity)?),
            Device::Cuda(gpu) => Self::Cuda(cuda::CudaBackend::new(gpu, capacity)?),
        })
    }

    pub(crate) fn dry_like(device: &Device) -> Self {
        Self::Dry(device.sizing())
    }

    pub fn kind(&self) -> DeviceKind {
        match self {
            Self::Cpu(_) => DeviceKind::Cpu,
            Self::Cuda(_) => DeviceKind::Cuda,
            Self::Dry(_) => DeviceKind::Dry,
        }
    }

    pub fn threads(&self) -> usize {
        match self.sizing() {
            Sizing::Cpu { threads } => threads,
            Sizing::Cuda(_) => 1,
        }
    }

    /// A dry backend shaped like this one: it runs nothing and sizes as
    /// this device does.
    pub(crate) fn dry_twin(&self) -> Self {
        Self::Dry(self.sizing())
    }

    /// What temporaries are sized for on this backend (a dry one answers
    /// for the device it is shaped like).
    pub fn sizing(&self) -> Sizing {
        match self {
            Self::Cpu(cpu) => Sizing::Cpu { threads: cpu.threads() },
            Self::Cuda(gpu) => Sizing::Cuda(gpu.gpu().clone()),
            Self::Dry(sizing) => sizing.clone(),
        }
    }

    pub(crate) fn workers(&self) -> Workers {
        match self {
            Self::Cpu(cpu) => Workers(Some(cpu.pool().clone())),
            Self::Cuda(_) | Self::Dry(_) => Workers(None),
        }
    }

    /// Total and free device memory (`cuMemGetInfo`) on a GPU; `None`
    /// elsewhere.
    pub fn device_memory(&mut self) -> Result<Option<(usize, usize)>, BackendError> {
        match self {
            Self::Cuda(gpu) => gpu.memory_info().map(Some),
            Self::Cpu(_) | Self::Dry(_) => Ok(None),
        }
    }

    /// Copies host data into the arena.
    pub(crate) fn upload<T: Element>(&mut self, dst: Buf<T>, src: &[T]) -> Result<(), BackendError> {
        if src.len() != dst.len() {
            return Err(BackendError::HostLength {
                host: src.len(),
                device: dst.len(),
            });
        }
        match self {
            Self::Cpu(cpu) => cpu.run_unchecked(|v| {
                v.write(dst)?.copy_from_slice(src);
                Ok(())
            }),
            Self::Cuda(gpu) => gpu.upload(dst, src),
            Self::Dry(_) => Ok(()),
        }
    }

    /// Copies arena data to the host. A dry backend writes zeros.
    pub(crate) fn download<T: Element>(&mut self, src: Buf<T>, dst: &mut [T]) -> Result<(), BackendError> {
        if src.len() != dst.len() {
            return Err(BackendError::HostLength {
                host: dst.len(),
                device: src.len(),
            });
        }
        match self {
            Self::Cpu(cpu) => cpu.run_unchecked(|v| {
                dst.copy_from_slice(v.read(src)?);
                Ok(())
            }),
            Self::Cuda(gpu) => gpu.download(src, dst),
            Self::Dry(_) => {
                dst.fill(T::default());
                Ok(())
            }
        }
    }

    /// Sets every element of `dst` to `value`.
    pub(crate) fn fill<T: Element>(&mut self, dst: Buf<T>, value: T) -> Result<(), BackendError> {
        match self {
            Self::Cpu(cpu) => cpu.run_unchecked(|v| {
                v.write(dst)?.fill(value);
                Ok(())
            }),
            Self::Cuda(gpu) => gpu.fill(dst, value),
            Self::Dry(_) => Ok(()),
        }
    }

    /// This device's rank and the number of devices it trains with.
    pub fn world(&self) -> (usize, usize) {
        match self {
            Self::Cpu(cpu) => cpu.world(),
            Self::Cuda(gpu) => gpu.world(),
            Self::Dry(_) => (0, 1),
        }
    }

    /// Sums `buf` elementwise over the group's ranks, in place. On a GPU the
    /// sum runs beside later work until [`Backend::join_collectives`].
    pub(crate) fn all_reduce_sum(&mut self, buf: Buf<f32>) -> Result<(), BackendError> {
        match self {
            Self::Cpu(cpu) => cpu.all_reduce_sum(buf),
            Self::Cuda(gpu) => gpu.all_reduce_sum(buf),
            Self::Dry(_) => Ok(()),
        }
    }

    /// Orders every sum queued so far before the work queued next.
    pub(crate) fn join_collectives(&mut self) -> Result<(), BackendError> {
        match self {
            Self::Cuda(gpu) => gpu.join_collectives(),
            Self::Cpu(_) | Self::Dry(_) => Ok(()),
        }
    }

    /// `dst += src`, elementwise: how gradients of a tensor used twice meet.
    /// Buffers of different lengths are an error, on every backend: adding
    /// the shorter prefix would hide a shape bug behind a plausible result.
    pub(crate) fn add_assign(&mut self, dst: FloatBuf, src: FloatBuf) -> Result<(), BackendError> {
        if dst.len() != src.len() {
            return Err(BackendError::LengthMismatch {
                dst: dst.len(),
                src: src.len(),
            });
        }
        if dst.dtype() != src.dtype() {
            return Err(BackendError::Internal(
                "adding a gradient of one type onto one of another",
            ));
        }
        match self {
            Self::Cpu(cpu) => cpu.run_unchecked(|v| {
                let (d, s) = (v.write::<f32>(dst)?, v.read::<f32>(src)?);
                d.iter_mut().zip(s).for_each(|(d, s)| *d += s);
                Ok(())
            }),
            Self::Cuda(gpu) => gpu.add_assign(dst, src),
            Self::Dry(_) => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adding_buffers_of_different_lengths_is_an_error_not_a_prefix() {
        let mut cpu = Backend::new(Device::cpu(1).unwrap(), 4096).unwrap();
        let (dst, src) = (Buf::<f32>::new(0, 8), Buf::<f32>::new(256, 4));
        cpu.upload(dst, &[1.0; 8]).unwrap();
        cpu.upload(src, &[2.0; 4]).unwrap();
        assert!(matches!(
            cpu.add_assign(dst.into(), src.into()),
            Err(BackendError::LengthMismatch { dst: 8, src: 4 })
        ));
        let mut after = [0.0; 8];
        cpu.download(dst, &mut after).unwrap();
        assert_eq!(after, [1.0; 8], "nothing was added");
        let same = Buf::<f32>::new(512, 8);
        cpu.upload(same, &[0.5; 8]).unwrap();
        cpu.add_assign(dst.into(), same.into()).unwrap();
        cpu.download(dst, &mut after).unwrap();
        assert_eq!(after, [1.5; 8]);
        let mut dry = Backend::dry_like(&Device::cpu(1).unwrap());
        assert!(
            dry.add_assign(dst.into(), src.into()).is_err(),
            "the dry run refuses it too"
        );
        let other = FloatBuf::Bf16(Buf::new(768, 8));
        assert!(
            matches!(cpu.add_assign(dst.into(), other), Err(BackendError::Internal(_))),
            "a bf16 gradient is not added onto an fp32 one as if it were fp32"
        );
    }

    /// A CPU asked for TF32 or bf16 says it cannot, rather than computing
    /// in fp32 under a precision it does not have.
    #[test]
    fn the_cpu_refuses_tf32_and_bf16_and_takes_fp32() {
        let mut cpu = Device::cpu(1).unwrap();
        cpu.set_precision(Precision::Fp32)
            .expect("fp32 is the CPU's arithmetic");
        for p in [Precision::Tf32, Precision::Bf16] {
            let err = cpu.set_precision(p).unwrap_err();
            assert!(
                matches!(
                    err,
                    BackendError::NeedsCuda {
                        on: DeviceKind::Cpu,
                        ..
                    }
                ),
                "{err:?}"
            );
            assert!(err.to_string().contains("need the CUDA backend"), "{err}");
        }
        let err = cpu.set_precision(Precision::Bf16).unwrap_err().to_string();
        assert!(err.contains("bf16 mixed-precision kernels need"), "{err}");
        let mut runtime = Runtime::planning(&cpu);
        assert_eq!(runtime.policy().activations(), crate::base::DType::F32);
        // A runtime made on the CPU refuses them too, planning or not.
        let bf16 = Policy {
            precision: Precision::Bf16,
            deterministic: false,
        };
        assert!(matches!(runtime.set_policy(bf16), Err(BackendError::NeedsCuda { .. })));
        let mut running = Runtime::new(cpu, 4096).unwrap();
        assert!(matches!(running.set_policy(bf16), Err(BackendError::NeedsCuda { .. })));
        assert_eq!(running.policy(), Policy::default(), "left as it was");
    }
}
