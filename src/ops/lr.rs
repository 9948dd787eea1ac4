//! Where a step's learning rate is read: a table of one rate per global
//! step in the persistent region, indexed by the step cursor, so a captured
//! graph follows a schedule (and a rate changed between steps).

use super::cursor::StepCursor;
use crate::memory::Buf;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LrAt {
    /// One rate per global step; the last holds for every later step.
    pub table: Buf<f32>,
    pub cursor: StepCursor,
}
