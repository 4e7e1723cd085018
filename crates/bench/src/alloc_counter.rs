//! A global allocator wrapper that counts live heap bytes, so the report
//! can state the engine's measured memory, not only its own estimate.
//!
//! It wraps mimalloc, the allocator `scaledkv-server` ships, so the engine
//! is measured as it is deployed: under glibc's malloc a writer thread's
//! arena grows by `mprotect`, which queues behind the spare-segment
//! thread's populate holding the mmap lock (BENCHMARKS.md, tenth session).
//!
//! Each of the first 1024 threads counts into a shard of its own, with a
//! plain load and store. One shared counter (`lock add`) was 6-7% of the
//! writer's samples in a fillseq profile: a locked instruction waits for
//! the store buffer to drain, and the writer's stores into the log miss
//! the cache. RocksDB's C++ allocations are not counted at all, so that
//! cost fell on ScaledKV's side alone.

use mimalloc::MiMalloc;
use std::alloc::{GlobalAlloc, Layout};
use std::cell::Cell;
use std::sync::atomic::{AtomicIsize, AtomicUsize, Ordering};

const SHARDS: usize = 1024;

/// One cache line per shard, so threads do not share lines.
#[repr(align(64))]
struct Shard(AtomicIsize);

static LIVE_BYTES: [Shard; SHARDS] = [const { Shard(AtomicIsize::new(0)) }; SHARDS];
/// Threads past the first 1024 share this one, with atomic adds.
static OVERFLOW: AtomicIsize = AtomicIsize::new(0);
static NEXT_SHARD: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    // Const-initialized without a destructor: usable inside the allocator.
    static MY_SHARD: Cell<usize> = const { Cell::new(usize::MAX) };
}

fn count(delta: isize) {
    let shard = MY_SHARD.with(|mine| {
        if mine.get() == usize::MAX {
            mine.set(NEXT_SHARD.fetch_add(1, Ordering::Relaxed));
        }
        mine.get()
    });
    match LIVE_BYTES.get(shard) {
        // Only this thread writes its shard: no read-modify-write needed.
        Some(Shard(bytes)) => bytes.store(bytes.load(Ordering::Relaxed) + delta, Ordering::Relaxed),
        None => {
            OVERFLOW.fetch_add(delta, Ordering::Relaxed);
        }
    }
}

pub struct Counting;

// SAFETY: delegates every call to mimalloc unchanged; only counts sizes.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let ptr = MiMalloc.alloc(layout);
        if !ptr.is_null() {
            count(layout.size() as isize);
        }
        ptr
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        MiMalloc.dealloc(ptr, layout);
        count(-(layout.size() as isize));
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = MiMalloc.realloc(ptr, layout, new_size);
        if !new.is_null() {
            count(new_size as isize - layout.size() as isize);
        }
        new
    }
}

/// Live heap bytes: the sum of every thread's shard (a block freed by
/// another thread than the one that allocated it moves between shards).
pub fn allocated_bytes() -> usize {
    let shards: isize = LIVE_BYTES.iter().map(|shard| shard.0.load(Ordering::Relaxed)).sum();
    (shards + OVERFLOW.load(Ordering::Relaxed)).max(0) as usize
}
