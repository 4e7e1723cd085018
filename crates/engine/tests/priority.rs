//! The scheduling of the engine's background thread (`Options::background_idle`).
//! A file of its own: it reads every thread of the test process, and other
//! tests' databases would add background threads of their own.

#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use scaledkv::{Db, Options};

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

#[test]
fn background_threads_run_at_nice_5_or_under_sched_idle() {
    const SCHED_OTHER: u64 = 0;
    const SCHED_IDLE: u64 = 5;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options { background_idle: true, ..Options::default() }).unwrap();
    db.put(b"k", b"v").unwrap();
    background_thread_settles_at((5, SCHED_IDLE));
    drop(db);
    assert!(threads_named("scaledkv-bg").is_empty(), "closing joins the thread");
    let db = Db::open(dir.path(), Options::default()).unwrap();
    background_thread_settles_at((5, SCHED_OTHER));
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}
