//! A global allocator that counts allocations (and reallocations) and
//! forwards every call to the system allocator. Included by the tests and the
//! example that prove code paths allocate nothing:
//! `#[path = "…/support/counting_alloc.rs"] mod counting_alloc;`.
//!
//! Two counts: the whole process's, for code that runs on worker threads
//! (the CPU's steps), and the calling thread's, for code that runs on it
//! alone while other tests of the same binary run beside it (a replayed GPU
//! step). Only Rust's heap is seen: a C library's own `malloc` (the CUDA
//! driver's) is not.

// Each includer reads the count it needs.
#![allow(dead_code)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicUsize, Ordering};

struct Counting;

static ALLOCATIONS: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const-initialised and without a destructor: reading it allocates
    // nothing and registers nothing, so the allocator may use it.
    static THREAD_ALLOCATIONS: Cell<usize> = const { Cell::new(0) };
}

fn counted() {
    ALLOCATIONS.fetch_add(1, Ordering::SeqCst);
    let _ = THREAD_ALLOCATIONS.try_with(|n| n.set(n.get() + 1));
}

// SAFETY: forwards every call to the system allocator unchanged; only counts.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        counted();
        // SAFETY: same contract as our caller's.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: `ptr` came from `System.alloc` with this layout.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        counted();
        // SAFETY: same contract as our caller's.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// Allocations and reallocations made so far by the whole process.
pub fn allocations() -> usize {
    ALLOCATIONS.load(Ordering::SeqCst)
}

/// Allocations and reallocations made so far by the calling thread.
pub fn thread_allocations() -> usize {
    THREAD_ALLOCATIONS.with(Cell::get)
}
