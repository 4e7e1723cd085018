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
//! overwrites on busy cores. The index merger runs under `SCHED_IDLE` too,
//! but only until someone waits for it (`IdleUntilNeeded`), and so does
//! the creation of the next segment, until the writer nears the roll
//! (`log::writer::RAISE_SPARE_AT`).
//!
//! Checkpoints are not lowered (they have a thread of their own): with a
//! writer and the index merger on both cores a nice-5 thread got ~11% of
//! a core, and the replay a crash would leave grew without bound.
//!
//! With `background_idle` the index merger and segment preparation are
//! also paced: each naps briefly after every 200 us of work
//! (`pace_this_thread`, `pause_point`), so that nobody waits for it until
//! the scheduler's next tick. GC is not: paced, it fell behind sustained
//! overwrites (writes waited for it 1,285-4,322 times instead of 259-917).
//! Nor are checkpoints: paced, they made GETs right after a burst of SETs
//! slower (p99 3.02 against 2.75 ms, medians of 5 runs).

use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::time::{Duration, Instant};

/// The nice value of background threads.
const BACKGROUND_NICE: i32 = 5;

/// Lowers the calling thread's priority (Linux nice values and scheduling
/// policies are per thread): nice 5, or `SCHED_IDLE` if `idle`
/// (`Options::background_idle`). Best effort: a failure only leaves the
/// thread at normal priority.
pub(crate) fn lower_this_thread(idle: bool) {
    #[cfg(target_os = "linux")]
    {
        // SAFETY: setpriority on our own thread id changes only its
        // scheduling weight.
        let _ = unsafe { libc::setpriority(libc::PRIO_PROCESS, this_thread_id() as libc::id_t, BACKGROUND_NICE) };
        if idle {
            // SCHED_IDLE needs no privilege.
            set_policy(0, libc::SCHED_IDLE);
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = idle;
}

/// A thread that runs under `SCHED_IDLE` (on otherwise idle cores only)
/// until another thread needs its work, then at its normal priority until
/// it has caught up and lowers itself again: the index merger
/// (`Index::run_merger`), and the background thread while it rebuilds
/// the index's tree (`Index::background_step`).
///
/// Why not `SCHED_IDLE` throughout: on busy cores it starves, and a merger
/// starved in the middle of a merge holds the lock a checkpoint needs
/// before GC may free segments (sustained overwrites waited for GC 4,457
/// times instead of 60-330). Why not normal priority throughout: each
/// merge of a full table took a core for milliseconds from the I/O thread
/// or the load generator, which set SET `-P 1`'s p99 (BENCHMARKS.md,
/// twenty-fifth session).
#[derive(Default)]
pub(crate) struct IdleUntilNeeded {
    /// The thread's id while it may be under `SCHED_IDLE`; 0 otherwise.
    tid: AtomicI32,
    raised: AtomicBool,
    /// Held while the policy changes, so that `raised` tells the truth.
    changing: parking_lot::Mutex<()>,
}

impl IdleUntilNeeded {
    /// Called by the thread itself: runs it under `SCHED_IDLE`, if it can
    /// be raised again (that needs root or a high enough `RLIMIT_NICE`;
    /// otherwise the thread keeps its priority). Returns whether it did.
    pub fn enter(&self) -> bool {
        #[cfg(target_os = "linux")]
        if can_leave_idle() {
            // The policy and the recorded id change together, so that a
            // `raise` meanwhile cannot miss a thread already lowered.
            let _changing = self.changing.lock();
            if set_policy(0, libc::SCHED_IDLE) {
                self.tid.store(this_thread_id(), Ordering::Release);
                self.raised.store(false, Ordering::Release);
                return true;
            }
        }
        false
    }

    /// Called by the thread itself when it stops being this kind of thread
    /// (before it ends: its id may be reused): back to its normal priority.
    pub fn leave(&self) {
        let _changing = self.changing.lock();
        #[cfg(target_os = "linux")]
        if self.tid.load(Ordering::Acquire) != 0 && !self.raised.load(Ordering::Acquire) {
            set_policy(0, libc::SCHED_OTHER);
        }
        self.tid.store(0, Ordering::Release);
        self.raised.store(false, Ordering::Release);
    }

    /// Gives the thread its normal priority. Any thread may call it; it
    /// costs an atomic load when the thread is raised already.
    pub fn raise(&self) {
        if self.raised.load(Ordering::Acquire) || self.tid.load(Ordering::Acquire) == 0 {
            return;
        }
        let _changing = self.changing.lock();
        let tid = self.tid.load(Ordering::Acquire);
        #[cfg(target_os = "linux")]
        if tid != 0 && !self.raised.load(Ordering::Acquire) && set_policy(tid, libc::SCHED_OTHER) {
            self.raised.store(true, Ordering::Release);
        }
        #[cfg(not(target_os = "linux"))]
        let _ = tid;
    }

    /// Called by the thread itself once it has caught up.
    pub fn lower(&self) {
        if !self.raised.load(Ordering::Acquire) {
            return;
        }
        let _changing = self.changing.lock();
        #[cfg(target_os = "linux")]
        if self.tid.load(Ordering::Acquire) != 0 && set_policy(0, libc::SCHED_IDLE) {
            self.raised.store(false, Ordering::Release);
        }
    }
}

/// How long a paced background thread works before it naps.
const PACE_BUDGET: Duration = Duration::from_micros(200);

thread_local! {
    /// When this thread last started working, if it is paced.
    static WORKING_SINCE: Cell<Option<Instant>> = const { Cell::new(None) };
}

/// Paces the calling thread: from now on its [`pause_point`]s nap after
/// every `PACE_BUDGET` of work. For the index merger and the
/// segment-preparing threads under `Options::background_idle`.
///
/// Why: the scheduler preempts a thread that uses up its share only at a
/// tick (4 ms here, `HZ=250`), and moves a waiting thread to a core that
/// runs only `SCHED_IDLE` work only when it next balances. Under SET `-P
/// 16` the I/O thread waited 2-10 ms, 20-30 times per million SETs,
/// mostly behind the raised merger while the other core prefaulted a
/// segment under `SCHED_IDLE` (`perf sched timehist`). A nap gives the
/// core to whoever waits, and a core that naps goes idle and pulls a
/// waiting thread over. SET `-P 16` p99 on tmpfs, medians of interleaved
/// runs: 5.3 -> 4.5 ms, same throughput. The price: work a burst leaves
/// behind finishes later, so GETs that follow 1M SETs at once often had
/// a higher p99 (2.2 -> 2.45 ms in one redis-benchmark `-t set,get`; the
/// same after a 3 s pause), and each nap of a thread alone on its core
/// halts that core (BENCHMARKS.md, twenty-sixth session).
pub(crate) fn pace_this_thread() {
    WORKING_SINCE.set(Some(Instant::now()));
}

/// A point between two pieces of background work where a paced thread
/// naps if it has worked for `PACE_BUDGET` since its last nap; on other
/// threads (a writer that helps GC or merges, tests) it does nothing.
pub(crate) fn pause_point() {
    let Some(since) = WORKING_SINCE.get() else { return };
    if since.elapsed() >= PACE_BUDGET {
        // The shortest sleep: the kernel's default timer slack makes it
        // ~50 us, so a paced thread works at least 80% of the time.
        std::thread::sleep(Duration::from_micros(1));
        WORKING_SINCE.set(Some(Instant::now()));
    }
}

/// The calling thread's kernel id (Linux scheduling calls take it).
#[cfg(target_os = "linux")]
pub(crate) fn this_thread_id() -> i32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as i32 }
}

/// Sets the scheduling policy of thread `tid` (0: the calling thread).
#[cfg(target_os = "linux")]
fn set_policy(tid: i32, policy: libc::c_int) -> bool {
    let param = libc::sched_param { sched_priority: 0 };
    // SAFETY: changes only how the thread is scheduled.
    unsafe { libc::sched_setscheduler(tid, policy, &param) == 0 }
}

/// Whether a thread of this process may leave `SCHED_IDLE` again, found
/// out once on a thread of its own.
#[cfg(target_os = "linux")]
pub(crate) fn can_leave_idle() -> bool {
    static CAN: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *CAN.get_or_init(|| {
        std::thread::Builder::new()
            .name("scaledkv-probe".into())
            .spawn(|| set_policy(0, libc::SCHED_IDLE) && set_policy(0, libc::SCHED_OTHER))
            .ok()
            .and_then(|probe| probe.join().ok())
            .unwrap_or(false)
    })
}

#[cfg(all(test, target_os = "linux"))]
pub(crate) mod tests {
    use std::sync::mpsc::channel;
    use std::sync::Arc;

    use super::*;

    /// Waits (up to 5 s) until thread `tid` runs under `policy`.
    pub(crate) fn policy_becomes(tid: i32, policy: libc::c_int) {
        let start = Instant::now();
        // SAFETY: reads a thread's policy.
        while unsafe { libc::sched_getscheduler(tid) } != policy {
            assert!(start.elapsed() < Duration::from_secs(5), "thread {tid} never took policy {policy}");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// What a thread under `SCHED_IDLE` should run under once `enter`ed:
    /// it is lowered only if it can be raised again.
    pub(crate) fn entered_policy() -> libc::c_int {
        if can_leave_idle() {
            libc::SCHED_IDLE
        } else {
            eprintln!("notice: threads here cannot leave SCHED_IDLE (not root, low RLIMIT_NICE): none enters it");
            libc::SCHED_OTHER
        }
    }

    /// The calling thread's voluntary context switches so far.
    fn voluntary_switches() -> u64 {
        let status = std::fs::read_to_string("/proc/thread-self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("voluntary_ctxt_switches:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn a_paced_thread_naps_at_pause_points_and_others_do_not() {
        // Busy for 20 ms of its own CPU time (not wall time: on a loaded
        // machine a thread preempted for most of 20 ms napped only 11
        // times), passing pause points all along: a paced thread naps every
        // 200 us (about 80 times), each nap a voluntary switch; an unpaced
        // one never gives the core away.
        let cpu_time = || {
            let mut now = libc::timespec { tv_sec: 0, tv_nsec: 0 };
            // SAFETY: writes the calling thread's CPU clock into `now`.
            assert_eq!(unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) }, 0);
            Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
        };
        let naps = move |paced: bool| {
            std::thread::spawn(move || {
                if paced {
                    pace_this_thread();
                }
                let before = voluntary_switches();
                let start = cpu_time();
                while cpu_time() - start < Duration::from_millis(20) {
                    pause_point();
                }
                voluntary_switches() - before
            })
            .join()
            .unwrap()
        };
        let unpaced = naps(false);
        let paced = naps(true);
        assert!(paced >= 20, "a paced thread napped {paced} times in 20 ms");
        assert!(unpaced <= 2, "an unpaced thread gave its core away {unpaced} times");
    }

    #[test]
    fn an_idle_thread_is_raised_by_others_and_lowers_itself() {
        let priority = Arc::new(IdleUntilNeeded::default());
        let (to_thread, commands) = channel::<()>();
        let (to_test, replies) = channel::<i32>();
        let thread = {
            let priority = priority.clone();
            std::thread::spawn(move || {
                priority.enter();
                to_test.send(this_thread_id()).unwrap();
                commands.recv().unwrap();
                priority.lower();
                to_test.send(0).unwrap();
                commands.recv().unwrap();
                priority.leave();
                to_test.send(0).unwrap();
                commands.recv().unwrap();
            })
        };
        let tid = replies.recv().unwrap();
        let idle = entered_policy();
        policy_becomes(tid, idle);
        priority.raise();
        priority.raise();
        policy_becomes(tid, libc::SCHED_OTHER);
        to_thread.send(()).unwrap();
        replies.recv().unwrap();
        policy_becomes(tid, idle);
        to_thread.send(()).unwrap();
        replies.recv().unwrap();
        // Leaving puts it back at its normal priority.
        policy_becomes(tid, libc::SCHED_OTHER);
        to_thread.send(()).unwrap();
        thread.join().unwrap();
        // Its id may belong to another thread now: raising touches nothing.
        assert_eq!(priority.tid.load(Ordering::Acquire), 0);
        priority.raise();
        assert!(!priority.raised.load(Ordering::Acquire));
    }
}
