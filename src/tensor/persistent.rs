//! The persistent region's allocator, borrowed between steps: the arena
//! places each buffer, the runtime writes its first values. It lives with
//! the handles it makes rather than in `memory`, which sees no device, so
//! that every layer that fills the persistent region (nn, optim, data,
//! tasks, ops) can name it.

use crate::backend::{Mode, Runtime};
use crate::base::{Buf, Element, Shape};
use crate::memory::{Arena, ArenaError};
use crate::Result;

/// Allocator for the persistent region; borrowed from an engine between
/// steps (`Engine::persistent`).
pub struct Persistent<'a> {
    arena: &'a mut Arena,
    runtime: &'a mut Runtime,
    mode: Mode,
}

impl<'a> Persistent<'a> {
    pub(crate) fn new(arena: &'a mut Arena, runtime: &'a mut Runtime, mode: Mode) -> Self {
        Self { arena, runtime, mode }
    }

    /// Where the next allocation starts, in bytes from the arena's start
    /// (a multiple of 256): for callers that lay out memory with a coarser
    /// alignment of their own.
    pub fn offset(&self) -> usize {
        self.arena.top()
    }

    /// Uninitialised-by-contract space (it holds whatever was there before).
    pub fn alloc<T: Element>(&mut self, what: &'static str, shape: Shape) -> Result<Buf<T>, ArenaError> {
        self.arena.alloc_persistent(what, shape)
    }

    /// Whether allocations here hold values: false on an engine that only
    /// plans, so callers may skip computing what they would upload.
    pub fn holds_values(&self) -> bool {
        self.mode == Mode::Run
    }

    /// Space holding zeros.
    pub fn zeros<T: Element>(&mut self, what: &'static str, shape: Shape) -> Result<Buf<T>> {
        self.filled(what, shape, T::default())
    }

    /// Space holding `value` in every element.
    pub fn filled<T: Element>(&mut self, what: &'static str, shape: Shape, value: T) -> Result<Buf<T>> {
        let buf = self.alloc(what, shape)?;
        self.runtime.backend().fill(buf, value)?;
        Ok(buf)
    }

    /// Space holding a copy of `values`.
    pub fn upload<T: Element>(&mut self, what: &'static str, shape: Shape, values: &[T]) -> Result<Buf<T>> {
        let buf = self.alloc(what, shape)?;
        self.runtime.backend().upload(buf, values)?;
        Ok(buf)
    }
}
