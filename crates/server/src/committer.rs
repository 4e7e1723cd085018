//! The commit thread, for data whose every group commit waits for the
//! device (`sync` on a disk's file system, where a group costs one
//! fdatasync of 0.1-0.4 ms here).
//!
//! Without it, the worker that led a group blocked in fdatasync and served
//! no connection meanwhile, and the woken members it had queued on itself
//! waited for its next group too: groups of ~15 SETs from 50 clients at
//! `-P 1`. With it, workers only queue writes and never block; this thread
//! leads one group after another, and each group takes every write that
//! arrived during the previous fdatasync.
//!
//! Where a persist costs little more than its bytes (tmpfs, persistent
//! memory, `buffered`), the writer leads its own group: handing it to a
//! thread would cost a wake-up per group and save nothing.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::{JoinHandle, Thread};
use std::time::{Duration, Instant};

use scaledkv::Db;

use crate::server::Shared;

/// How writers and the commit thread signal each other. Writers bump
/// `submitted` after queueing and wake the thread only if it is asleep, so
/// under load (the thread always leading) queueing costs no system call.
#[derive(Default)]
pub struct CommitSignal {
    submitted: AtomicU64,
    sleeping: AtomicBool,
    stop: AtomicBool,
    thread: OnceLock<Thread>,
}

impl CommitSignal {
    /// Tells the thread that a write was queued (`Db::enqueue_write`).
    /// Once the thread has stopped (shutdown), commits it here instead.
    pub fn queued(&self, db: &Db) {
        self.submitted.fetch_add(1, Ordering::SeqCst);
        // The plain load first: while the thread leads (the busy case) no
        // second locked instruction per write.
        if self.sleeping.load(Ordering::SeqCst) && self.sleeping.swap(false, Ordering::SeqCst) {
            self.unpark();
        }
        // The thread checks `stop` after `submitted`: if it saw no stop, it
        // also saw this write's count and commits it.
        if self.stop.load(Ordering::SeqCst) {
            db.commit_queued();
        }
    }

    fn unpark(&self) {
        if let Some(thread) = self.thread.get() {
            thread.unpark();
        }
    }
}

/// Starts the commit thread for `shared.commit_thread`. Stop it with
/// [`stop`] once no connection can queue writes any more.
pub fn spawn(shared: Arc<Shared>) -> std::io::Result<JoinHandle<()>> {
    std::thread::Builder::new().name("scaledkv-commit".into()).spawn(move || {
        let signal = shared.commit_thread.as_ref().expect("spawned only with a commit signal");
        let _ = signal.thread.set(std::thread::current());
        loop {
            let seen = signal.submitted.load(Ordering::SeqCst);
            shared.db.commit_queued();
            if wait_yielding(&signal.submitted, seen) {
                continue;
            }
            // Announce the sleep before the last look: a writer that queues
            // after the look sees `sleeping` and wakes us; one that queued
            // before it changed `submitted`. (A wake-up that comes first
            // makes `park` return at once.)
            signal.sleeping.store(true, Ordering::SeqCst);
            if signal.submitted.load(Ordering::SeqCst) != seen {
                signal.sleeping.store(false, Ordering::SeqCst);
                continue;
            }
            if signal.stop.load(Ordering::SeqCst) {
                return;
            }
            std::thread::park();
            signal.sleeping.store(false, Ordering::SeqCst);
        }
    })
}

/// How long the thread waits for the next write by yielding the CPU
/// before it parks.
///
/// A parked thread woken by the next writer waited ~100 µs on average to
/// run again (`perf sched`, disk, SET `-P 1`: both cores busy with the I/O
/// thread and redis-benchmark), and it parked after a third of its groups.
/// Yielding keeps it runnable without taking a core anyone else wants.
/// Disk, 4 interleaved runs of 200k SETs, medians: `-P 1` 47.6k -> 54.3k/s
/// with 100 µs (14.2 against 15.9 µs of server CPU per SET), 50.2k with
/// 200 µs; `-P 16` 371k -> 389k/s (3 runs).
const YIELD_WAIT: Duration = Duration::from_micros(100);

/// Yields until `submitted` moves past `seen` (true) or `YIELD_WAIT` ends.
fn wait_yielding(submitted: &AtomicU64, seen: u64) -> bool {
    let until = Instant::now() + YIELD_WAIT;
    loop {
        if submitted.load(Ordering::SeqCst) != seen {
            return true;
        }
        if Instant::now() >= until {
            return false;
        }
        std::thread::yield_now();
    }
}

/// Stops the thread after it has committed everything queued.
pub fn stop(signal: &CommitSignal, thread: JoinHandle<()>) {
    signal.stop.store(true, Ordering::SeqCst);
    signal.unpark();
    if thread.join().is_err() {
        tracing::error!("the commit thread panicked");
    }
}
