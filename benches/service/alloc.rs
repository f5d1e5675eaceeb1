//! The process's allocations, counted for the whole client: a global
//! allocator that counts every allocation of every thread (the client's
//! engine thread, the tokio workers, the caller threads) and the bytes live
//! on the heap. The bench's own threads that allocate while the clock runs
//! (the sampler on the main thread) mark themselves [`ignored`]: their
//! allocations are not counted, their bytes are.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;
use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

/// [`System`], counting.
pub(crate) struct Counting;

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static LIVE: AtomicI64 = AtomicI64::new(0);

thread_local! {
    static IGNORED: Cell<bool> = const { Cell::new(false) };
}

fn count(grow: i64) {
    // `try_with`: the slot may be gone while a thread is torn down.
    if !IGNORED.try_with(Cell::get).unwrap_or(false) {
        ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    }
    LIVE.fetch_add(grow, Ordering::Relaxed);
}

fn size(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

// SAFETY: every method forwards to `System` with the caller's arguments
// unchanged; counting touches only atomics and a `const`-initialised
// thread-local cell (no destructor, no lazy initialisation), and never
// allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is; the caller upholds `alloc`'s contract.
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            count(size(layout.size()));
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: forwarded as is; the caller upholds `alloc_zeroed`'s contract.
        let p = unsafe { System.alloc_zeroed(layout) };
        if !p.is_null() {
            count(size(layout.size()));
        }
        p
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: forwarded as is; `ptr` came from `System` through this
        // allocator, and the caller upholds `realloc`'s contract.
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            count(size(new_size) - size(layout.size()));
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: forwarded as is; `ptr` came from `System` with `layout`.
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(size(layout.size()), Ordering::Relaxed);
    }
}

/// Allocations so far, every thread but the ignored ones.
pub(crate) fn allocations() -> u64 {
    ALLOCATIONS.load(Ordering::Relaxed)
}

/// Bytes live on the heap now, every thread.
pub(crate) fn heap() -> u64 {
    u64::try_from(LIVE.load(Ordering::Relaxed)).unwrap_or(0)
}

/// From now on this thread's allocations are not counted.
pub(crate) fn ignored() {
    IGNORED.with(|i| i.set(true));
}

/// The resident set of this process, in bytes (`/proc/self/statm`).
pub(crate) fn rss() -> u64 {
    let pages = std::fs::read_to_string("/proc/self/statm")
        .ok()
        .and_then(|s| s.split_whitespace().nth(1)?.parse::<u64>().ok())
        .unwrap_or(0);
    // SAFETY: sysconf takes one integer argument and returns a long.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * u64::try_from(page).unwrap_or(4096)
}
