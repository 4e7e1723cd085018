//! The scheduling of the engine's background and segment-preparing threads
//! (`Options::background_idle`).
//! A file of its own: it reads every thread of the test process, and other
//! tests' databases would add background threads of their own.

#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use scaledkv::{Db, Options, WriteBatch};

/// (nice, scheduling policy) of every thread of this process named `name`.
fn threads_named(name: &str) -> Vec<(i64, u64)> {
    let mut found = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else { continue };
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else { continue };
        if &stat[open + 1..close] != name {
            continue;
        }
        // Fields from the state on (field 3): nice is field 19, policy 41.
        let fields: Vec<&str> = stat[close + 2..].split(' ').collect();
        found.push((fields[16].parse().unwrap(), fields[38].parse().unwrap()));
    }
    found
}

/// Waits until the one background thread has taken its priority.
fn background_thread_settles_at(expected: (i64, u64)) {
    let start = Instant::now();
    loop {
        let threads = threads_named("scaledkv-bg");
        if threads == [expected] {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "background threads {threads:?}, expected [{expected:?}]");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until some thread named `name` shows these priorities.
fn some_thread_shows(name: &str, expected: (i64, u64)) {
    let start = Instant::now();
    loop {
        let threads = threads_named(name);
        if threads.contains(&expected) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(10), "{name}: {threads:?}, expected {expected:?}");
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Whether a thread may leave `SCHED_IDLE` again (root, or a high enough
/// `RLIMIT_NICE`), as the engine finds out before it lowers its merger.
fn can_leave_sched_idle() -> bool {
    std::thread::spawn(|| {
        let param = libc::sched_param { sched_priority: 0 };
        // SAFETY: changes only how this short-lived thread is scheduled.
        unsafe {
            libc::sched_setscheduler(0, libc::SCHED_IDLE, &param) == 0
                && libc::sched_setscheduler(0, libc::SCHED_OTHER, &param) == 0
        }
    })
    .join()
    .unwrap()
}

#[test]
fn segment_preparation_and_the_merger_run_under_sched_idle_only_when_asked_and_gc_at_nice_5() {
    const SCHED_OTHER: u64 = 0;
    const SCHED_IDLE: u64 = 5;
    for background_idle in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options { background_idle, ..Options::default() }).unwrap();
        // GC and the rest of the background work stay at nice 5 either way.
        background_thread_settles_at((5, SCHED_OTHER));
        // The index merger waits for idle cores (until someone waits for
        // it), where it could leave them again.
        let merger_idle = background_idle && can_leave_sched_idle();
        some_thread_shows("scaledkv-merge", (0, if merger_idle { SCHED_IDLE } else { SCHED_OTHER }));
        // Past a quarter of the 64 MiB segment the next one is prepared
        // (created, then its pages touched: tens of milliseconds).
        let mut batch = WriteBatch::new();
        for i in 0..20u32 {
            batch.put(&i.to_be_bytes(), &vec![i as u8; 1 << 20]);
        }
        db.write(batch).unwrap();
        some_thread_shows("scaledkv-spare", (5, if background_idle { SCHED_IDLE } else { SCHED_OTHER }));
        drop(db);
        assert!(threads_named("scaledkv-bg").is_empty(), "closing joins the threads");
    }
}
