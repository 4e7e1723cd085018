//! Readers and writers on several threads, with GC and checkpoints running,
//! checked against invariants that every consistent view must satisfy.
//!
//! Writer `w` writes batches {a<w> = n, b<w> = n} for n = 1, 2, ...; so in
//! any snapshot or iterator a<w> == b<w>, and a plain reader never sees a
//! counter go backwards.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use scaledkv::{Db, Durability, Options, WriteBatch};

const WRITERS: u64 = 3;

fn counter(v: Option<Vec<u8>>) -> u64 {
    v.map_or(0, |v| u64::from_le_bytes(v[..8].try_into().unwrap()))
}

#[test]
fn readers_writers_snapshots_iterators_gc_together() {
    // Deferred index updates handed to the merger every two keys, so that
    // merges race everything else; and applied to the B-tree directly.
    for deferred_index_updates in [2, 0] {
        readers_writers_snapshots_iterators_gc(deferred_index_updates);
    }
}

fn readers_writers_snapshots_iterators_gc(deferred_index_updates: usize) {
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let options = Options {
        durability: Durability::Pmem,
        segment_size_bytes: 128 * 1024,
        checkpoint_interval_bytes: 256 * 1024,
        // Point reads race the writers and GC through the hash table too.
        point_index: true,
        deferred_index_updates,
        ..Options::default()
    };
    let db = Db::open(dir.path(), options.clone()).unwrap();
    let stop = AtomicBool::new(false);
    let run_for = Duration::from_millis(1500);
    let mut final_counts = vec![0u64; WRITERS as usize];
    std::thread::scope(|scope| {
        let writers: Vec<_> = (0..WRITERS)
            .map(|w| {
                let (db, stop) = (&db, &stop);
                scope.spawn(move || {
                    let mut n = 0u64;
                    // Values big enough to fill segments and keep GC busy.
                    let filler = vec![w as u8; 300 + 100 * w as usize];
                    while !stop.load(Ordering::Relaxed) {
                        n += 1;
                        let mut value = n.to_le_bytes().to_vec();
                        value.extend_from_slice(&filler);
                        let mut batch = WriteBatch::new();
                        batch.put(format!("a{w}").as_bytes(), &value);
                        batch.put(format!("b{w}").as_bytes(), &value);
                        // Exactly one key under c{w}: moved in each batch.
                        batch.delete(format!("c{w}:{:020}", n - 1).as_bytes());
                        batch.put(format!("c{w}:{n:020}").as_bytes(), b"");
                        db.write(batch).unwrap();
                    }
                    n
                })
            })
            .collect();
        let (db, stop) = (&db, &stop);
        scope.spawn(move || {
            let mut last = vec![0u64; WRITERS as usize];
            while !stop.load(Ordering::Relaxed) {
                for w in 0..WRITERS {
                    let now = counter(db.get(format!("a{w}").as_bytes()).unwrap());
                    assert!(now >= last[w as usize], "counter of writer {w} went back");
                    last[w as usize] = now;
                }
            }
        });
        scope.spawn(move || {
            // Counted from the index with the pending updates read in
            // place: a batch all or nothing, so one key under each c{w}:
            // once the writer has written.
            while !stop.load(Ordering::Relaxed) {
                for w in 0..WRITERS {
                    let started = counter(db.get(format!("a{w}").as_bytes()).unwrap()) > 0;
                    let range = format!("c{w}:").into_bytes()..format!("c{w};").into_bytes();
                    let count = db.count_keys(range.clone());
                    assert!(count == 1 || (count == 0 && !started), "{count} keys under c{w}:");
                    let (first, last) = (db.nth_key(range.clone(), 0), db.last_key(range.clone()));
                    assert!(first.is_some() || !started, "no first key under c{w}:");
                    assert!(last >= first, "last key {last:?} before the first {first:?}");
                }
            }
        });
        scope.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                // What a plain read saw before the snapshot was taken, the
                // snapshot sees too, or something newer: never a key missing.
                let before: Vec<u64> =
                    (0..WRITERS).map(|w| counter(db.get(format!("a{w}").as_bytes()).unwrap())).collect();
                let snapshot = db.snapshot();
                for w in 0..WRITERS {
                    let a = counter(snapshot.get(format!("a{w}").as_bytes()).unwrap());
                    let b = counter(snapshot.get(format!("b{w}").as_bytes()).unwrap());
                    assert_eq!(a, b, "snapshot saw half a batch of writer {w}");
                    assert!(a >= before[w as usize], "snapshot of writer {w} older than a read before it");
                }
            }
        });
        scope.spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let before: Vec<u64> =
                    (0..WRITERS).map(|w| counter(db.get(format!("a{w}").as_bytes()).unwrap())).collect();
                let all: Vec<_> = db.iter().map(|kv| kv.unwrap()).collect();
                let get = |k: &str| counter(all.iter().find(|(key, _)| key == k.as_bytes()).map(|(_, v)| v.clone()));
                for w in 0..WRITERS {
                    let a = get(&format!("a{w}"));
                    assert_eq!(a, get(&format!("b{w}")), "iterator saw half a batch");
                    assert!(a >= before[w as usize], "iterator of writer {w} older than a read before it");
                }
                db.collect_garbage().unwrap();
            }
        });
        let started = Instant::now();
        while started.elapsed() < run_for {
            std::thread::sleep(Duration::from_millis(10));
        }
        stop.store(true, Ordering::Relaxed);
        for (w, writer) in writers.into_iter().enumerate() {
            final_counts[w] = writer.join().unwrap();
        }
    });
    let stats = db.stats();
    assert!(stats.segments_freed + stats.gc_runs > 0 || stats.segments < 4, "GC never ran: {stats:?}");
    drop(db);
    let db = Db::open(dir.path(), options).unwrap();
    for w in 0..WRITERS {
        assert_eq!(counter(db.get(format!("a{w}").as_bytes()).unwrap()), final_counts[w as usize]);
        assert_eq!(counter(db.get(format!("b{w}").as_bytes()).unwrap()), final_counts[w as usize]);
    }
    eprintln!("concurrency: {final_counts:?} batches per writer, {stats:?}");
}

/// Blocks the current thread on `future` (a minimal executor: the waker
/// unparks the thread).
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: std::sync::Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::sync::Arc::new(Unpark(std::thread::current())).into();
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(output) = future.as_mut().poll(&mut cx) {
            return output;
        }
        std::thread::park();
    }
}

/// Async writers hold many writes in flight at once, mixed with blocking
/// writers and a flush; every future completes, and once one has, its
/// write is visible and survives reopening.
#[test]
fn async_writes_complete_and_are_durable() {
    const THREADS: u64 = 3;
    const IN_FLIGHT: u64 = 64;
    const ROUNDS: u64 = 20;
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let options = Options { durability: Durability::Sync, segment_size_bytes: 256 * 1024, ..Options::default() };
    let db = Db::open(dir.path(), options.clone()).unwrap();
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let db = &db;
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    let futures: Vec<_> = (0..IN_FLIGHT)
                        .map(|i| {
                            let mut batch = WriteBatch::new();
                            let key = format!("t{t}-{round:03}-{i:03}");
                            batch.put(key.as_bytes(), key.as_bytes());
                            (key, db.write_async(batch))
                        })
                        .collect();
                    for (key, future) in futures {
                        block_on(future).unwrap();
                        assert_eq!(db.get(key.as_bytes()).unwrap().as_deref(), Some(key.as_bytes()));
                    }
                }
            });
        }
        scope.spawn(|| {
            for i in 0..500u32 {
                db.put(format!("sync-{i:04}").as_bytes(), &i.to_le_bytes()).unwrap();
                if i % 100 == 0 {
                    db.flush().unwrap();
                }
            }
        });
    });
    let too_big = vec![0u8; scaledkv::MAX_KEY_BYTES + 1];
    let mut batch = WriteBatch::new();
    batch.put(&too_big, b"v");
    assert!(matches!(block_on(db.write_async(batch)), Err(scaledkv::Error::KeyTooLarge { .. })));
    drop(db);
    let db = Db::open(dir.path(), options).unwrap();
    assert_eq!(db.iter().count() as u64, THREADS * ROUNDS * IN_FLIGHT + 500);
}

/// A barrier completes only once every write queued before it is visible
/// (and durable): threads queue writes without leading, then a barrier,
/// and check their writes when it completes. Barriers write nothing: the
/// log's sequence numbers and contents after reopening are the writes'.
#[test]
fn a_barrier_completes_after_every_write_queued_before_it() {
    const THREADS: u64 = 3;
    const ROUNDS: u64 = 1000;
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let options = Options { durability: Durability::Sync, segment_size_bytes: 256 * 1024, ..Options::default() };
    let db = Db::open(dir.path(), options.clone()).unwrap();
    // Alone in its group: nothing written, nothing to wait for.
    let barrier = db.enqueue_barrier();
    db.commit_queued();
    block_on(barrier).unwrap();
    let groups_before = db.stats().commit_groups;
    std::thread::scope(|scope| {
        for t in 0..THREADS {
            let db = &db;
            scope.spawn(move || {
                for round in 0..ROUNDS {
                    let keys: Vec<String> = (0..4).map(|i| format!("t{t}-{round:03}-{i}")).collect();
                    let futures: Vec<_> = keys
                        .iter()
                        .map(|key| {
                            let mut batch = WriteBatch::new();
                            batch.put(key.as_bytes(), key.as_bytes());
                            db.enqueue_write(batch)
                        })
                        .collect();
                    let barrier = db.enqueue_barrier();
                    // Led here or by another thread's call.
                    db.commit_queued();
                    block_on(barrier).unwrap();
                    for key in &keys {
                        assert_eq!(db.get(key.as_bytes()).unwrap().as_deref(), Some(key.as_bytes()), "{key}");
                    }
                    for future in futures {
                        block_on(future).unwrap();
                    }
                }
            });
        }
    });
    assert!(db.stats().commit_groups > groups_before);
    drop(db);
    let db = Db::open(dir.path(), options).unwrap();
    assert_eq!(db.iter().count() as u64, THREADS * ROUNDS * 4);
}

/// On a disk's file system, where leaders gather groups and hand the next
/// group to a blocked writer, many blocking writers and async writers all
/// complete, and every write is there after reopening.
#[test]
fn blocking_and_async_writers_on_a_disk_all_complete() {
    const WRITERS: u64 = 8;
    const PUTS: u64 = 60;
    const ASYNC_ROUNDS: u64 = 5;
    const IN_FLIGHT: u64 = 16;
    // Under the target directory: the disk the repository lives on.
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let options = Options { durability: Durability::Sync, segment_size_bytes: 256 * 1024, ..Options::default() };
    let db = Db::open(dir.path(), options.clone()).unwrap();
    std::thread::scope(|scope| {
        for w in 0..WRITERS {
            let db = &db;
            scope.spawn(move || {
                for i in 0..PUTS {
                    let key = format!("w{w}-{i:03}");
                    db.put(key.as_bytes(), key.as_bytes()).unwrap();
                }
            });
        }
        scope.spawn(|| {
            for round in 0..ASYNC_ROUNDS {
                let futures: Vec<_> = (0..IN_FLIGHT)
                    .map(|i| {
                        let mut batch = WriteBatch::new();
                        batch.put(format!("a-{round}-{i:02}").as_bytes(), b"async");
                        db.write_async(batch)
                    })
                    .collect();
                for future in futures {
                    block_on(future).unwrap();
                }
            }
        });
    });
    let stats = db.stats();
    eprintln!("disk writers: {} requests in {} groups", stats.committed_requests, stats.commit_groups);
    assert_eq!(stats.committed_requests, WRITERS * PUTS + ASYNC_ROUNDS * IN_FLIGHT);
    drop(db);
    let db = Db::open(dir.path(), options).unwrap();
    for w in 0..WRITERS {
        for i in 0..PUTS {
            let key = format!("w{w}-{i:03}");
            assert_eq!(db.get(key.as_bytes()).unwrap().as_deref(), Some(key.as_bytes()));
        }
    }
    assert_eq!(db.iter().count() as u64, WRITERS * PUTS + ASYNC_ROUNDS * IN_FLIGHT);
}
