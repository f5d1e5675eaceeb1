//! A counting global allocator, for the tests and benchmarks that prove
//! "no allocation": it forwards to [`System`] and counts, per thread, the
//! `alloc`, `alloc_zeroed` and `realloc` calls and the bytes they ask for.
//! Counters are per thread, so threads measuring at once (test harness
//! threads, fake servers, proxies) never pollute each other's counts.
//!
//! A binary installs it with
//! `#[global_allocator] static GLOBAL: CountingAlloc = CountingAlloc;`.
use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::hint::black_box;

/// [`System`], counting per thread.
pub struct CountingAlloc;

thread_local! {
    static ALLOCATIONS: Cell<u64> = const { Cell::new(0) };
    /// Bytes asked for (the new size, for a `realloc`).
    static BYTES: Cell<u64> = const { Cell::new(0) };
}

fn count(size: usize) {
    // `try_with`: the slots may be gone while a thread is torn down.
    let _ = ALLOCATIONS.try_with(|c| c.set(c.get() + 1));
    let _ = BYTES.try_with(|c| c.set(c.get() + size as u64));
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; counting touches only `const`-initialised thread-local cells
// (no destructor, no lazy initialisation) and never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded as is; the caller upholds `alloc`'s contract.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: forwarded as is; the caller upholds `alloc_zeroed`'s contract.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        // SAFETY: forwarded as is; `ptr` came from `System` through this
        // allocator, and the caller upholds `realloc`'s contract.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is; `ptr` came from `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }
}

/// This thread's allocations and requested bytes so far.
pub fn allocations() -> (u64, u64) {
    (ALLOCATIONS.with(Cell::get), BYTES.with(Cell::get))
}

/// `f`'s result, and the allocations and bytes it made on this thread.
///
/// # Panics
///
/// If [`CountingAlloc`] is not the global allocator: every count would be
/// zero, and a "nothing allocated" test would pass without measuring.
pub fn counted<T>(f: impl FnOnce() -> T) -> (T, u64, u64) {
    let probe = allocations();
    drop(black_box(Box::new(0u64)));
    assert!(
        allocations().0 > probe.0,
        "CountingAlloc is not the global allocator of this binary"
    );
    let before = allocations();
    let result = f();
    let after = allocations();
    (result, after.0 - before.0, after.1 - before.1)
}
