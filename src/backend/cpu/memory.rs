//! The CPU arena's one allocation, and the only place that turns arena
//! offsets into Rust slices.
//!
//! Invariant: a [`Views`] hands out each byte range at most once mutably and
//! never mutably while it is also shared. It checks every request against the
//! ranges it already handed out, so kernels above it are safe code.

use crate::backend::BackendError;
use crate::base::{Buf, Element, Typed, ALIGN};
use std::alloc::Layout;
use std::ptr::NonNull;

/// One zeroed, 256-byte-aligned block of host memory.
pub struct CpuMemory {
    base: NonNull<u8>,
    layout: Layout,
}

// SAFETY: CpuMemory owns its block exclusively (like a Box<[u8]>); access to
// its contents goes through `&mut self` (views), so moving it or sharing
// `&CpuMemory` across threads cannot race.
unsafe impl Send for CpuMemory {}
unsafe impl Sync for CpuMemory {}

impl CpuMemory {
    /// Allocates `bytes` (at least one alignment unit), zeroed so that every
    /// element read before it is written is a valid 0 rather than garbage.
    pub fn new(bytes: usize) -> Result<Self, BackendError> {
        let size = bytes.max(ALIGN);
        let layout = Layout::from_size_align(size, ALIGN).map_err(|_| BackendError::HostAllocation { bytes })?;
        // SAFETY: `layout` has a non-zero size (at least ALIGN).
        let raw = unsafe { std::alloc::alloc_zeroed(layout) };
        let base = NonNull::new(raw).ok_or(BackendError::HostAllocation { bytes })?;
        Ok(Self { base, layout })
    }

    pub fn capacity(&self) -> usize {
        self.layout.size()
    }

    /// Starts handing out views; at most one `Views` exists at a time because
    /// it borrows the memory mutably.
    /// With `declared`, every view must lie inside one of those ranges.
    pub(crate) fn views<'m>(&'m mut self, declared: Option<&'m [(usize, usize)]>) -> Views<'m> {
        Views {
            memory: self,
            taken: [(0, 0, false); MAX_VIEWS],
            count: 0,
            declared,
        }
    }
}

impl Drop for CpuMemory {
    fn drop(&mut self) {
        // SAFETY: `base` came from `alloc_zeroed(self.layout)` and is freed once.
        unsafe { std::alloc::dealloc(self.base.as_ptr(), self.layout) }
    }
}

const MAX_VIEWS: usize = 12;

/// Hands out slices of a [`CpuMemory`] for one kernel call, refusing any
/// request that would alias a mutable slice. Fixed capacity: no heap.
pub struct Views<'m> {
    memory: &'m mut CpuMemory,
    /// (start, end, mutable) of each range handed out.
    taken: [(usize, usize, bool); MAX_VIEWS],
    count: usize,
    /// When set, every view must lie inside one of these ranges.
    declared: Option<&'m [(usize, usize)]>,
}

impl<'m> Views<'m> {
    fn claim<T: Element>(&mut self, buf: Buf<T>, mutable: bool) -> Result<NonNull<T>, BackendError> {
        let range = buf.byte_range();
        if range.end > self.memory.capacity() || !buf.offset().is_multiple_of(std::mem::align_of::<T>()) {
            return Err(BackendError::OutOfBounds {
                offset: buf.offset(),
                bytes: buf.bytes(),
                capacity: self.memory.capacity(),
            });
        }
        if self.count == MAX_VIEWS {
            return Err(BackendError::TooManyViews);
        }
        if let Some(list) = self.declared {
            if !list.iter().any(|&(s, e)| s <= range.start && range.end <= e) {
                return Err(BackendError::Undeclared {
                    offset: buf.offset(),
                    bytes: buf.bytes(),
                });
            }
        }
        let overlaps =
            |&(start, end, m): &(usize, usize, bool)| (mutable || m) && start < range.end && range.start < end;
        if self.taken[..self.count].iter().any(overlaps) {
            return Err(BackendError::Aliased {
                offset: buf.offset(),
                bytes: buf.bytes(),
            });
        }
        self.taken[self.count] = (range.start, range.end, mutable);
        self.count += 1;
        // SAFETY: offset is inside the block (checked above).
        let ptr = unsafe { self.memory.base.as_ptr().add(buf.offset()) };
        Ok(NonNull::new(ptr.cast::<T>()).expect("offset into a non-null block is non-null"))
    }

    /// A shared view of `buf`.
    pub fn read<T: Element>(&mut self, buf: impl Typed<T>) -> Result<&'m [T], BackendError> {
        let buf = buf.typed().ok_or(BackendError::OtherType { wanted: T::NAME })?;
        let ptr = self.claim(buf, false)?;
        // SAFETY: the range is in bounds and aligned for T (checked in claim),
        // the memory is initialised (zeroed at allocation, and every bit
        // pattern is a valid T: Element), and claim refused any overlapping
        // mutable view while `'m` keeps the memory borrowed.
        Ok(unsafe { std::slice::from_raw_parts(ptr.as_ptr(), buf.len()) })
    }

    /// An exclusive view of `buf`.
    pub fn write<T: Element>(&mut self, buf: impl Typed<T>) -> Result<&'m mut [T], BackendError> {
        let buf = buf.typed().ok_or(BackendError::OtherType { wanted: T::NAME })?;
        let ptr = self.claim(buf, true)?;
        // SAFETY: as in `read`, and claim refused any overlapping view at all,
        // so this slice is the only way to reach these bytes for `'m`.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr.as_ptr(), buf.len()) })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_is_aligned_and_zeroed() {
        let mut m = CpuMemory::new(4096).unwrap();
        assert_eq!(m.base.as_ptr() as usize % ALIGN, 0);
        let mut v = m.views(None);
        assert!(v.read(Buf::<f32>::new(0, 1024)).unwrap().iter().all(|&x| x == 0.0));
    }

    #[test]
    fn views_refuse_aliasing_and_out_of_bounds() {
        let mut m = CpuMemory::new(4096).unwrap();
        let mut v = m.views(None);
        let a = Buf::<f32>::new(0, 64);
        let b = Buf::<f32>::new(256, 64);
        v.read(a).unwrap();
        v.read(a).unwrap(); // two shared views of one range are fine
        assert!(matches!(v.write(a), Err(BackendError::Aliased { .. })));
        v.write(b).unwrap();
        assert!(matches!(v.read(b), Err(BackendError::Aliased { .. })));
        assert!(matches!(
            v.read(Buf::<f32>::new(4000, 64)),
            Err(BackendError::OutOfBounds { .. })
        ));
    }
}
