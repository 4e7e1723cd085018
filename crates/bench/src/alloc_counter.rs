//! A global allocator wrapper that counts live heap bytes, so the report
//! can state the engine's measured memory, not only its own estimate.
//!
//! It wraps mimalloc, the allocator `scaledkv-server` ships, so the engine
//! is measured as it is deployed: under glibc's malloc a writer thread's
//! arena grows by `mprotect`, which queues behind the spare-segment
//! thread's populate holding the mmap lock (BENCHMARKS.md, tenth session).

use mimalloc::MiMalloc;
use std::alloc::{GlobalAlloc, Layout};
use std::sync::atomic::{AtomicUsize, Ordering};

static LIVE_BYTES: AtomicUsize = AtomicUsize::new(0);

pub struct Counting;

// SAFETY: delegates every call to mimalloc unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = MiMalloc.alloc(layout);
        if !ptr.is_null() {
            LIVE_BYTES.fetch_add(layout.size(), Ordering::Relaxed);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        MiMalloc.dealloc(ptr, layout);
        LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = MiMalloc.realloc(ptr, layout, new_size);
        if !new.is_null() {
            LIVE_BYTES.fetch_sub(layout.size(), Ordering::Relaxed);
            LIVE_BYTES.fetch_add(new_size, Ordering::Relaxed);
        }
        new
    }
}

pub fn allocated_bytes() -> usize {
    LIVE_BYTES.load(Ordering::Relaxed)
}
