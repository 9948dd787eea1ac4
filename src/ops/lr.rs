//! Where an optimizer update reads its learning rate and its update count.
//!
//! Both come from device memory, never from the launch: a captured step
//! graph bakes every host value in, so a rate that changes from step to step
//! (a schedule) and Adam's bias corrections, which depend on how many
//! updates came before, must be read where the kernel runs. The step cursor
//! already says which global step this is, so a schedule is simply a table
//! indexed by it.

use crate::memory::{Buf, Touch};
use crate::ops::cursor::StepCursor;
use crate::{Error, Result};

/// The learning rate of global step `g` is `table[min(g, table.len() - 1)]`
/// (a constant rate is a table of one), and the update made in that step
/// is update number `g + 1`. Both are read from `cursor` where the kernel
/// runs, so the update must come before [`crate::Step::finish_step`]
/// advances the cursor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LrAt {
    /// Every step's rate, in the persistent region.
    pub table: Buf<f32>,
    /// Where the global step is read.
    pub cursor: StepCursor,
}

impl LrAt {
    /// The rate of `table` at `cursor`'s step.
    pub fn new(table: Buf<f32>, cursor: StepCursor) -> Self {
        Self { table, cursor }
    }

    /// A table the kernels can index: at least one rate, and a length the
    /// CUDA kernels take as a 32-bit count.
    pub(crate) fn check(&self, op: &'static str) -> Result<()> {
        if self.table.is_empty() || u32::try_from(self.table.len()).is_err() {
            return Err(Error::shape(
                op,
                format!(
                    "a learning-rate table of 1 to {} rates, got {}",
                    u32::MAX,
                    self.table.len()
                ),
            ));
        }
        Ok(())
    }

    /// The two ranges an update reads besides its tensors.
    pub(crate) fn touches(&self) -> [Touch; 2] {
        [self.table.into(), self.cursor.buf.into()]
    }

    /// `(learning rate, update number)` as a CPU kernel reads them from the
    /// table's and the cursor's views.
    pub(crate) fn read(table: &[f32], cursor: &[u32]) -> (f32, u64) {
        let global = StepCursor::global_step(cursor);
        let last = table.len() as u64 - 1;
        (table[global.min(last) as usize], global + 1)
    }
}
