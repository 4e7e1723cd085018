//! Threads that do the engine's own work (GC, preparing the next segment)
//! run at a lower scheduling priority than the threads that serve requests.
//!
//! Why: on a small machine the prefault of a 64 MiB segment takes a core
//! for tens of milliseconds, and every request queued behind it shows up
//! in the tail latency. Nice 5 gives such a thread about a third of a busy
//! core's share against a normal thread, so it still finishes in time (a
//! segment is prepared well before the active one fills), and it runs at
//! full speed whenever a core is idle.
//!
//! `Options::background_idle` (the server's choice) runs segment
//! preparation and writeback under `SCHED_IDLE` instead: a thread serving
//! a request that wakes takes the core from them at once, where at nice 5
//! it could wait for the rest of their time slice (3-4 ms delays of the
//! I/O thread and redis-benchmark in `perf sched latency` under SET `-P
//! 1`). GC stays at nice 5: under `SCHED_IDLE` it fell behind sustained
//! overwrites on busy cores.
//!
//! Checkpoints are not lowered (they have a thread of their own): with a
//! writer and the index merger on both cores a nice-5 thread got ~11% of
//! a core, and the replay a crash would leave grew without bound.

/// The nice value of background threads.
const BACKGROUND_NICE: i32 = 5;

/// Lowers the calling thread's priority (Linux nice values and scheduling
/// policies are per thread): nice 5, or `SCHED_IDLE` if `idle`
/// (`Options::background_idle`). Best effort: a failure only leaves the
/// thread at normal priority.
pub(crate) fn lower_this_thread(idle: bool) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: gettid has no preconditions; setpriority on our own thread
        // id changes only its scheduling weight.
        let tid = unsafe { libc::syscall(libc::SYS_gettid) } as libc::id_t;
        let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, tid, BACKGROUND_NICE) };
        if idle {
            let param = libc::sched_param { sched_priority: 0 };
            // SAFETY: pid 0 is the calling thread; SCHED_IDLE needs no
            // privilege and changes only how it is scheduled.
            let _ = unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) };
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = idle;
}
