//! Where an op meets the device: [`Step::launch`] runs one kernel of an op
//! (what it touches, its CPU body, its CUDA body), and [`Step::sizing`]
//! says what the op's scratch is sized for. The match over devices is
//! written here once: the declaration of what a kernel touches (the step's
//! liveness, from which memory plans are made; the CPU refuses a kernel
//! touching anything else) and the planning arm, where a dry step declares
//! and runs nothing.

use super::Step;
use crate::backend::cpu::Views;
use crate::backend::cuda::CudaBackend;
use crate::backend::{Backend, BackendError, Sizing};
use crate::memory::Touch;
use crate::Result;
use std::panic::Location;

impl Step<'_> {
    /// Declares every buffer the kernel reads or writes, then runs it:
    /// `on_cpu` on the CPU's workers with views of the arena (which refuse
    /// anything undeclared), `on_cuda` on the GPU's stream. A step that
    /// only plans runs neither. Both bodies are generic, so each call site
    /// compiles to the match it replaces.
    #[track_caller]
    pub(crate) fn launch(
        &mut self,
        touches: &[Touch],
        on_cpu: impl FnOnce(&mut Views<'_>) -> Result<(), BackendError> + Send,
        on_cuda: impl FnOnce(&mut CudaBackend) -> Result<(), BackendError>,
    ) -> Result<()> {
        match self.uses(touches) {
            Backend::Cpu(cpu) => {
                // `--profile` names a CPU op by its body's path and the line
                // that launched it: the CPU side has no kernel names.
                let name = std::any::type_name_of_val(&on_cpu);
                cpu.run_op(name, Location::caller(), |v, _| on_cpu(v))?
            }
            Backend::Cuda(gpu) => on_cuda(gpu)?,
            Backend::Dry(_) => {}
        }
        Ok(())
    }

    /// What the op's temporaries are sized for on this device (a dry step
    /// answers for the device it is shaped like): the CPU's worker count,
    /// or the GPU, whose convolution plans choose cuDNN's workspaces.
    pub(crate) fn sizing(&mut self) -> Sizing {
        self.backend().sizing()
    }
}
