//! The scheduling of the engine's background and merger threads
//! (`Options::background_idle`).
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

/// Waits until the threads named `name` have taken these priorities.
fn threads_settle_at(name: &str, expected: &[(i64, u64)]) {
    let start = Instant::now();
    loop {
        let threads = threads_named(name);
        if threads == expected {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(5), "{name}: {threads:?}, expected {expected:?}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn background_threads_run_at_nice_5_or_under_sched_idle_and_mergers_split() {
    const SCHED_OTHER: u64 = 0;
    const SCHED_IDLE: u64 = 5;
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options { background_idle: true, ..Options::default() }).unwrap();
    db.put(b"k", b"v").unwrap();
    threads_settle_at("scaledkv-bg", &[(5, SCHED_IDLE)]);
    // Deferred index updates (the default): an early merger on idle time,
    // a late one at normal priority.
    threads_settle_at("scaledkv-merge", &[(5, SCHED_IDLE)]);
    threads_settle_at("scaledkv-late", &[(0, SCHED_OTHER)]);
    drop(db);
    assert!(threads_named("scaledkv-bg").is_empty(), "closing joins the threads");
    assert!(threads_named("scaledkv-late").is_empty(), "closing joins the threads");
    let db = Db::open(dir.path(), Options::default()).unwrap();
    threads_settle_at("scaledkv-bg", &[(5, SCHED_OTHER)]);
    threads_settle_at("scaledkv-merge", &[(0, SCHED_OTHER)]);
    threads_settle_at("scaledkv-late", &[]);
    assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
}
