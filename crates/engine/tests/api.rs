//! The public API, one behaviour per test, on the default durability.

use std::time::Duration;

use scaledkv::{Db, Durability, Error, Options, WriteBatch, MAX_KEY_BYTES, MAX_VALUE_BYTES};

fn small_segments() -> Options {
    Options { segment_size_bytes: 64 * 1024, ..Options::default() }
}

fn keys_of(iter: scaledkv::Iter<'_>) -> Vec<Vec<u8>> {
    iter.map(|kv| kv.unwrap().0).collect()
}

#[test]
fn put_get_delete_overwrite() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.get(b"missing").unwrap(), None);
    db.put(b"k", b"v1").unwrap();
    db.put(b"k", b"v2").unwrap();
    assert_eq!(db.get(b"k").unwrap().unwrap(), b"v2");
    assert_eq!(&*db.get_pinned(b"k").unwrap().unwrap(), b"v2");
    db.delete(b"k").unwrap();
    assert_eq!(db.get(b"k").unwrap(), None);
    db.delete(b"never-existed").unwrap();
    db.put(b"", b"empty key is a key").unwrap();
    assert_eq!(db.get(b"").unwrap().unwrap(), b"empty key is a key");
}

#[test]
fn prefetch_is_a_hint_that_changes_no_answer() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { point_index: true, ..small_segments() };
    let db = Db::open(dir.path(), options).unwrap();
    let value = |i: u32| vec![i as u8; 900 + i as usize];
    for i in 0..300u32 {
        db.put(format!("k{i}").as_bytes(), &value(i)).unwrap();
    }
    db.delete(b"k7").unwrap();
    db.put_with_ttl(b"short", b"v", Duration::from_millis(1)).unwrap();
    std::thread::sleep(Duration::from_millis(5));
    // Present, deleted, expired, never written, empty and oversized keys.
    let odd_keys = [b"k1".to_vec(), b"k7".to_vec(), b"short".to_vec(), b"none".to_vec(), vec![], vec![b'x'; 70_000]];
    for key in &odd_keys {
        db.prefetch(key);
    }
    db.prefetch_all(odd_keys.iter().map(|key| &key[..]));
    let keys: Vec<String> = (0..300).map(|i| format!("k{i}")).collect();
    db.prefetch_all(keys.iter().map(|key| key.as_bytes()));
    for i in 0..300u32 {
        db.prefetch(format!("k{i}").as_bytes());
        let expected = (i != 7).then(|| value(i));
        assert_eq!(db.get(format!("k{i}").as_bytes()).unwrap(), expected, "k{i}");
    }
    assert_eq!(db.get(b"short").unwrap(), None);
}

#[test]
fn every_write_survives_a_clean_reopen_in_every_mode() {
    for durability in [Durability::Sync, Durability::Buffered, Durability::Pmem] {
        let base = if durability == Durability::Pmem { "/dev/shm" } else { env!("CARGO_TARGET_TMPDIR") };
        let dir = tempfile::tempdir_in(base).unwrap();
        let options = Options { durability, ..small_segments() };
        {
            let db = Db::open(dir.path(), options.clone()).unwrap();
            for i in 0..3000u32 {
                db.put(format!("key{i:05}").as_bytes(), &i.to_le_bytes().repeat(10)).unwrap();
            }
            for i in (0..3000u32).step_by(3) {
                db.delete(format!("key{i:05}").as_bytes()).unwrap();
            }
            assert!(db.stats().segments > 1, "small segments must have rolled");
        }
        let db = Db::open(dir.path(), options).unwrap();
        for i in 0..3000u32 {
            let got = db.get(format!("key{i:05}").as_bytes()).unwrap();
            let want = (i % 3 != 0).then(|| i.to_le_bytes().repeat(10));
            assert_eq!(got, want, "{durability} key {i}");
        }
        assert_eq!(db.stats().keys, 2000);
        assert!(db.recovery_report().checkpoint_keys > 0, "clean close writes a checkpoint");
        assert_eq!(db.recovery_report().replayed_frames, 0, "nothing to replay after a clean close");
    }
}

#[test]
fn persist_waits_for_a_device_only_where_it_calls_fdatasync() {
    for durability in [Durability::Sync, Durability::Buffered, Durability::Pmem] {
        for base in [env!("CARGO_TARGET_TMPDIR"), "/dev/shm"] {
            let dir = tempfile::tempdir_in(base).unwrap();
            let Ok(db) = Db::open(dir.path(), Options { durability, ..Options::default() }) else {
                continue; // pmem on a page-cache file system is refused (tested below)
            };
            let stats = db.stats();
            assert_eq!(db.persist_waits_for_device(), stats.persist_method == "fdatasync", "{durability} in {base}");
            if base == "/dev/shm" || durability == Durability::Buffered {
                assert!(!db.persist_waits_for_device(), "{durability} in {base}");
            }
        }
    }
}

#[test]
fn batch_is_atomic_and_applies_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let mut batch = WriteBatch::new();
    batch.put(b"a", b"1");
    batch.put(b"a", b"2");
    batch.put(b"b", b"3");
    batch.delete(b"b");
    assert_eq!(batch.len(), 4);
    db.write(batch).unwrap();
    assert_eq!(db.get(b"a").unwrap().unwrap(), b"2");
    assert_eq!(db.get(b"b").unwrap(), None);
    db.write(WriteBatch::new()).unwrap();
}

#[test]
fn limits_are_typed_errors() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), small_segments()).unwrap();
    let big_key = vec![1u8; MAX_KEY_BYTES + 1];
    assert!(matches!(db.put(&big_key, b"v"), Err(Error::KeyTooLarge { .. })));
    let big_value = vec![1u8; MAX_VALUE_BYTES + 1];
    assert!(matches!(db.put(b"k", &big_value), Err(Error::ValueTooLarge { .. })));
    // A value under the value limit but larger than a 64 KiB segment.
    let too_big_for_segment = vec![1u8; 100 * 1024];
    assert!(matches!(db.put(b"k", &too_big_for_segment), Err(Error::BatchTooLarge { .. })));
    db.put(&vec![2u8; MAX_KEY_BYTES], b"max key works").unwrap();
    assert_eq!(db.get(&vec![2u8; MAX_KEY_BYTES]).unwrap().unwrap(), b"max key works");
}

#[test]
fn ranges_forward_reverse_and_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for i in 0..1000u32 {
        db.put(format!("{i:04}").as_bytes(), format!("v{i}").as_bytes()).unwrap();
    }
    db.delete(b"0500").unwrap();
    let all = keys_of(db.iter());
    assert_eq!(all.len(), 999);
    assert!(all.windows(2).all(|w| w[0] < w[1]));
    let slice = keys_of(db.range(b"0498".as_slice()..b"0503".as_slice()));
    assert_eq!(slice, vec![b"0498".to_vec(), b"0499".to_vec(), b"0501".to_vec(), b"0502".to_vec()]);
    let rev = keys_of(db.range_rev(b"0498".as_slice()..=b"0502".as_slice()));
    assert_eq!(rev, vec![b"0502".to_vec(), b"0501".to_vec(), b"0499".to_vec(), b"0498".to_vec()]);
    let all_rev = keys_of(db.range_rev::<&[u8], _>(..));
    assert_eq!(all_rev.len(), 999);
    assert_eq!(all_rev.first().unwrap(), b"0999");
    assert!(keys_of(db.range(b"0600".as_slice()..b"0500".as_slice())).is_empty());
    let (k, v) = db.range(b"0700".as_slice()..).next().unwrap().unwrap();
    assert_eq!((k.as_slice(), v.as_slice()), (b"0700".as_slice(), b"v700".as_slice()));
    // Lent entries are the same entries as the copied ones, both ways.
    for reverse in [false, true] {
        let range = b"0100".as_slice()..b"0900".as_slice();
        let mut lent = Vec::new();
        let mut iter = if reverse { db.range_rev(range.clone()) } else { db.range(range.clone()) };
        while let Some(entry) = iter.next_ref() {
            let (key, value) = entry.unwrap();
            lent.push((key.to_vec(), value.to_vec()));
        }
        let copied: Vec<_> =
            if reverse { db.range_rev(range) } else { db.range(range) }.map(|entry| entry.unwrap()).collect();
        assert_eq!(lent.len(), 799);
        assert_eq!(lent, copied);
    }
}

/// Sequential keys arrive in tables of new keys above every key held,
/// which the index keeps as runs of their own (index/runs.rs): reads,
/// scans both ways across the runs' borders, deletions, overwrites and a
/// reopen all see one ordered map.
#[test]
fn sequential_fills_read_as_one_ordered_map() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { deferred_index_updates: 2048, ..Options::default() };
    let key = |i: u32| format!("seq:{i:06}").into_bytes();
    let count = 20_000u32;
    let check = |db: &Db| {
        let want: Vec<Vec<u8>> = (0..count).filter(|i| i % 97 != 5).map(key).collect();
        assert_eq!(keys_of(db.iter()), want);
        let mut rev = keys_of(db.range_rev::<&[u8], _>(..));
        rev.reverse();
        assert_eq!(rev, want);
        // Bounds inside a run and across the borders of the 2048-key tables.
        for (lo, hi) in [(0, 10), (2040, 2060), (4095, 8193), (19_990, count)] {
            let (lo_key, hi_key) = (key(lo), key(hi));
            let inside: Vec<Vec<u8>> = want.iter().filter(|k| **k >= lo_key && **k < hi_key).cloned().collect();
            assert_eq!(keys_of(db.range(lo_key.as_slice()..hi_key.as_slice())), inside);
            let mut back = keys_of(db.range_rev(lo_key.as_slice()..hi_key.as_slice()));
            back.reverse();
            assert_eq!(back, inside);
        }
        for i in (0..count).step_by(7) {
            let expected = (i % 97 != 5).then(|| if i % 10 == 0 { b"new".to_vec() } else { i.to_le_bytes().to_vec() });
            assert_eq!(db.get(&key(i)).unwrap(), expected, "{i}");
        }
        assert_eq!(db.len(), want.len());
    };
    {
        let db = Db::open(dir.path(), options.clone()).unwrap();
        for i in 0..count {
            db.put(&key(i), &i.to_le_bytes()).unwrap();
        }
        for i in (0..count).step_by(10) {
            db.put(&key(i), b"new").unwrap();
        }
        for i in (5..count).step_by(97) {
            db.delete(&key(i)).unwrap();
        }
        check(&db);
    }
    check(&Db::open(dir.path(), options).unwrap());
}

#[test]
fn snapshot_sees_the_past_and_iterators_are_snapshots() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.put(b"a", b"old").unwrap();
    db.put(b"b", b"old").unwrap();
    let snapshot = db.snapshot();
    let mut iter = db.iter();
    db.put(b"a", b"new").unwrap();
    db.delete(b"b").unwrap();
    db.put(b"c", b"new").unwrap();
    assert_eq!(snapshot.get(b"a").unwrap().unwrap(), b"old");
    assert_eq!(snapshot.get(b"b").unwrap().unwrap(), b"old");
    assert_eq!(snapshot.get(b"c").unwrap(), None);
    assert_eq!(keys_of(snapshot.range_rev::<&[u8], _>(..)), vec![b"b".to_vec(), b"a".to_vec()]);
    assert_eq!(iter.next().unwrap().unwrap(), (b"a".to_vec(), b"old".to_vec()));
    assert_eq!(iter.next().unwrap().unwrap(), (b"b".to_vec(), b"old".to_vec()));
    assert!(iter.next().is_none());
    assert_eq!(db.get(b"a").unwrap().unwrap(), b"new");
    assert_eq!(keys_of(db.iter()), vec![b"a".to_vec(), b"c".to_vec()]);
}

#[test]
fn a_snapshot_view_makes_this_threads_reads_of_the_db_a_point_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let other_dir = tempfile::tempdir().unwrap();
    let other = Db::open(other_dir.path(), Options::default()).unwrap();
    for key in [&b"a"[..], b"b", b"d"] {
        db.put(key, b"old").unwrap();
    }
    db.put_with_ttl(b"e", b"old", Duration::from_secs(3600)).unwrap();
    let snapshot = db.snapshot();
    db.put(b"a", b"new").unwrap();
    db.delete(b"b").unwrap();
    db.put(b"c", b"new").unwrap();
    db.put(b"f", b"new").unwrap();
    other.put(b"x", b"other").unwrap();
    let newest = db.snapshot();
    let past = vec![b"a".to_vec(), b"b".to_vec(), b"d".to_vec(), b"e".to_vec()];
    let now = vec![b"a".to_vec(), b"c".to_vec(), b"d".to_vec(), b"e".to_vec(), b"f".to_vec()];
    let keys_visited = |reverse: bool| {
        let mut keys = Vec::new();
        db.visit_keys::<&[u8], _>(.., reverse, |key| {
            keys.push(key.to_vec());
            true
        });
        keys
    };
    snapshot.view(|| {
        assert_eq!(db.get(b"a").unwrap().unwrap(), b"old");
        assert_eq!(&*db.get_pinned(b"b").unwrap().unwrap(), b"old");
        assert!(db.peek_pinned(b"c").unwrap().is_none());
        assert!(db.get_pinned(b"e").unwrap().unwrap().expiry_ms().is_some(), "with its expiry time");
        assert_eq!(keys_of(db.iter()), past);
        assert_eq!(keys_of(db.range_rev::<&[u8], _>(..)), past.iter().rev().cloned().collect::<Vec<_>>());
        assert_eq!(db.range::<&[u8], _>(..).next().unwrap().unwrap().1, b"old");
        assert_eq!(keys_visited(false), past);
        assert_eq!(keys_visited(true), past.iter().rev().cloned().collect::<Vec<_>>());
        assert_eq!(db.count_keys::<&[u8], _>(..), 4);
        assert_eq!(db.nth_key::<&[u8], _>(.., 1).unwrap(), b"b");
        assert_eq!(db.keys_at_ranks::<&[u8], _>(.., &[0, 3]), vec![b"a".to_vec(), b"e".to_vec()]);
        assert_eq!(db.last_key::<&[u8], _>(..b"e".as_slice()).unwrap(), b"d");
        // A snapshot taken inside is one of the view's moment, and
        // outlives nothing it needs when dropped first.
        let inner = db.snapshot();
        assert_eq!(inner.seq(), snapshot.seq());
        assert_eq!(inner.get(b"a").unwrap().unwrap(), b"old");
        drop(inner);
        assert_eq!(db.get(b"b").unwrap().unwrap(), b"old");
        // Another database's reads and another thread's are its own.
        assert_eq!(other.get(b"x").unwrap().unwrap(), b"other");
        std::thread::scope(|scope| {
            scope.spawn(|| assert_eq!(db.get(b"a").unwrap().unwrap(), b"new"));
        });
        // Writes go to the database now; the view still reads the past.
        db.put(b"g", b"new").unwrap();
        assert_eq!(db.get(b"g").unwrap(), None);
        // A nested view of a later snapshot wins inside it.
        newest.view(|| assert_eq!(db.get(b"a").unwrap().unwrap(), b"new"));
        assert_eq!(db.get(b"a").unwrap().unwrap(), b"old");
    });
    drop(newest);
    assert_eq!(db.get(b"a").unwrap().unwrap(), b"new");
    assert_eq!(keys_of(db.iter()), [now, vec![b"g".to_vec()]].concat());
    assert_eq!(db.count_keys::<&[u8], _>(..), 6);
    // A panic inside a view ends it.
    let caught = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| snapshot.view(|| panic!("inside"))));
    assert!(caught.is_err());
    assert_eq!(db.get(b"b").unwrap(), None);
}

#[test]
fn the_commit_observer_hears_each_noted_batch_in_order_before_readers_see_it() {
    use std::sync::{Arc, Mutex};
    let dir = tempfile::tempdir().unwrap();
    let db = Arc::new(Db::open(dir.path(), Options::default()).unwrap());
    type Heard = Vec<(u64, Vec<u8>)>;
    let heard: Arc<Mutex<Heard>> = Arc::default();
    let observer = {
        let (heard, db) = (heard.clone(), Arc::downgrade(&db));
        move |seq: u64, note: Vec<u8>| {
            // Not visible yet: a reader at this moment sees the batch before.
            let db = db.upgrade().unwrap();
            assert!(db.snapshot().seq() < seq, "observed after it became visible");
            heard.lock().unwrap().push((seq, note));
        }
    };
    db.set_commit_observer(Some(Arc::new(observer)));
    db.put(b"plain", b"no note").unwrap();
    let writers: Vec<_> = (0..4u8)
        .map(|t| {
            let db = db.clone();
            std::thread::spawn(move || {
                for i in 0..200u32 {
                    let mut batch = WriteBatch::new();
                    let key = format!("{t}-{i}");
                    batch.put(key.as_bytes(), b"v");
                    batch.set_note(key.into_bytes());
                    db.write(batch).unwrap();
                }
            })
        })
        .collect();
    for writer in writers {
        writer.join().unwrap();
    }
    let mut empty = WriteBatch::new();
    empty.set_note(b"nothing written".to_vec());
    db.write(empty).unwrap();
    db.set_commit_observer(None);
    let mut unheard = WriteBatch::new();
    unheard.put(b"late", b"v");
    unheard.set_note(b"late".to_vec());
    db.write(unheard).unwrap();

    let heard = heard.lock().unwrap();
    assert_eq!(heard.len(), 800, "one per noted batch that wrote something, none once removed");
    assert!(heard.windows(2).all(|w| w[0].0 < w[1].0), "in commit order");
    for (_, key) in heard.iter() {
        assert!(db.get(key).unwrap().is_some(), "the note is its batch's");
    }
    let last = heard.last().unwrap().0;
    assert!(db.snapshot().seq() > last, "the plain put and the late batch came after");
}

#[test]
fn versions_kept_for_a_snapshot_go_when_it_is_released() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for i in 0..1000u32 {
        db.put(&i.to_be_bytes(), b"first").unwrap();
    }
    // Measured with the tree rebuilt dense each time: the background
    // thread may rebuild it at any moment.
    let index_bytes = || {
        db.compact_index();
        db.stats().index_memory_bytes
    };
    let before = index_bytes();
    let snapshot = db.snapshot();
    for i in 0..1000u32 {
        if i % 2 == 0 {
            db.put(&i.to_be_bytes(), b"second").unwrap();
        } else {
            db.delete(&i.to_be_bytes()).unwrap();
        }
    }
    assert_eq!(snapshot.get(&1u32.to_be_bytes()).unwrap().unwrap(), b"first");
    let held = index_bytes();
    assert!(held > before, "{held} vs {before}: old versions are kept for the snapshot");
    drop(snapshot);
    let after = index_bytes();
    assert!(after < before, "{after} vs {before}: 500 keys fewer, no old versions, no deletion markers");
    assert_eq!(db.stats().keys, 500);
    assert_eq!(db.get(&2u32.to_be_bytes()).unwrap().unwrap(), b"second");
    assert_eq!(db.get(&1u32.to_be_bytes()).unwrap(), None);
}

#[test]
fn ttl_hides_expired_keys_everywhere() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    db.put_with_ttl(b"short", b"v", Duration::from_millis(50)).unwrap();
    db.put_with_ttl(b"long", b"v", Duration::from_secs(3600)).unwrap();
    let pinned = db.get_pinned(b"long").unwrap().unwrap();
    assert!(pinned.expiry_ms().unwrap() > scaledkv::now_ms());
    assert!(db.get(b"short").unwrap().is_some());
    std::thread::sleep(Duration::from_millis(80));
    assert_eq!(db.get(b"short").unwrap(), None);
    assert_eq!(keys_of(db.iter()), vec![b"long".to_vec()]);
    db.put(b"short", b"no ttl now").unwrap();
    assert_eq!(db.get(b"short").unwrap().unwrap(), b"no ttl now");
}

#[test]
fn second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let _db = Db::open(dir.path(), Options::default()).unwrap();
    assert!(matches!(Db::open(dir.path(), Options::default()), Err(Error::Locked { .. })));
}

#[test]
fn pmem_mode_on_a_page_cache_file_system_is_a_clear_error() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let err = Db::open(dir.path(), Options::default().durability(Durability::Pmem)).err().unwrap();
    assert!(err.to_string().contains("pmem"), "{err}");
}

#[test]
fn gc_bounds_space_under_overwrites_and_keeps_data() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { background_work: false, ..small_segments() };
    let value = vec![7u8; 1000];
    {
        let db = Db::open(dir.path(), options.clone()).unwrap();
        for round in 0..20u32 {
            for key in 0..100u32 {
                let mut v = value.clone();
                v[..4].copy_from_slice(&round.to_le_bytes());
                db.put(&key.to_le_bytes(), &v).unwrap();
            }
        }
        let before = db.stats();
        assert!(before.space_amplification > 5.0, "{before:?}");
        while db.collect_garbage().unwrap() > 0 {}
        db.flush().unwrap();
        let after = db.stats();
        assert!(after.space_amplification <= 2.0, "{after:?}");
        assert!(after.segments < before.segments);
        assert!(after.segments_freed > 0, "{after:?}");
        for key in 0..100u32 {
            assert_eq!(&db.get(&key.to_le_bytes()).unwrap().unwrap()[..4], &19u32.to_le_bytes());
        }
    }
    let db = Db::open(dir.path(), options).unwrap();
    for key in 0..100u32 {
        assert_eq!(&db.get(&key.to_le_bytes()).unwrap().unwrap()[..4], &19u32.to_le_bytes());
    }
    assert_eq!(db.stats().keys, 100);
}

/// Segment files in `dir`: (`seg-*.log`, `recycle-*.tmp`).
fn segment_files(dir: &std::path::Path) -> (usize, usize) {
    let names: Vec<String> =
        std::fs::read_dir(dir).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    let segments = names.iter().filter(|n| n.starts_with("seg-") && n.ends_with(".log")).count();
    let recycling = names.iter().filter(|n| n.starts_with("recycle-")).count();
    (segments, recycling)
}

#[test]
fn freed_segments_are_recycled_on_tmpfs() {
    // Each key's value has its own fill byte and its round in front, so a
    // stale byte of a segment's earlier life would show in a read.
    let value = |round: u32, key: u32| {
        let mut v = vec![(key % 251) as u8; 1000];
        v[..4].copy_from_slice(&round.to_le_bytes());
        v
    };
    for durability in [Durability::Sync, Durability::Pmem, Durability::Buffered] {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let options = Options { durability, background_work: false, ..small_segments() };
        let segments_at_close = {
            let db = Db::open(dir.path(), options.clone()).unwrap();
            for round in 0..30u32 {
                for key in 0..100u32 {
                    db.put(&key.to_le_bytes(), &value(round, key)).unwrap();
                }
                if round % 5 == 4 {
                    while db.collect_garbage().unwrap() > 0 {}
                    // The checkpoint frees what GC emptied: into the recycler.
                    db.flush().unwrap();
                }
            }
            let stats = db.stats();
            assert!(stats.segments_recycled > 0, "{durability}: {stats:?}");
            assert!(stats.segments_freed >= stats.segments_recycled, "{durability}: {stats:?}");
            for key in 0..100u32 {
                assert_eq!(db.get(&key.to_le_bytes()).unwrap().unwrap(), value(29, key), "{durability} key {key}");
            }
            assert_eq!(segment_files(dir.path()).1, 0, "{durability}: a recycle file was left behind");
            stats.segments as usize
        };
        // Close deleted the segments kept for reuse (and the unused spare).
        assert_eq!(segment_files(dir.path()), (segments_at_close, 0), "{durability}");
        let db = Db::open(dir.path(), options).unwrap();
        for key in 0..100u32 {
            assert_eq!(db.get(&key.to_le_bytes()).unwrap().unwrap(), value(29, key), "{durability} key {key}");
        }
        assert_eq!(db.stats().keys, 100);
    }
}

#[test]
fn background_checkpoints_bound_replay_by_entry_count() {
    let dir = tempfile::tempdir().unwrap();
    // Small entries in one large segment: neither the byte interval nor
    // GC (which checkpoints to free segments) would trigger one.
    let options =
        Options { checkpoint_interval_entries: 1000, checkpoint_interval_bytes: u64::MAX, ..Options::default() };
    let db = Db::open(dir.path(), options).unwrap();
    for i in 0..5000u32 {
        db.put(&i.to_be_bytes(), b"v").unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while db.stats().checkpoints == 0 {
        assert!(std::time::Instant::now() < deadline, "no checkpoint after 5000 entries with an interval of 1000");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn checkpoints_written_over_a_longer_or_shorter_spare_load_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let spare = dir.path().join("index-spare.ckpt");
    let checkpoint_bytes = |dir: &std::path::Path| -> u64 {
        let names: Vec<_> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("index-0") && n.ends_with(".ckpt"))
            .collect();
        assert_eq!(names.len(), 1, "one current checkpoint: {names:?}");
        std::fs::metadata(dir.join(&names[0])).unwrap().len()
    };
    let options = Options { background_work: false, ..Options::default() };
    // Flushes (which checkpoint) and returns the checkpoint's length.
    let flush = |db: &Db| {
        let before = db.stats().checkpoint_bytes_written;
        db.flush().unwrap();
        db.stats().checkpoint_bytes_written - before
    };
    {
        let db = Db::open(dir.path(), options.clone()).unwrap();
        let mut written = 0;
        for round in 0..3u32 {
            for i in round * 2000..(round + 1) * 2000 {
                db.put(&i.to_be_bytes(), &i.to_le_bytes()).unwrap();
            }
            written = flush(&db);
        }
        // The third checkpoint (6,000 keys) was written over the first
        // (2,000); the second is now the spare.
        assert!(spare.exists());
        assert_eq!(checkpoint_bytes(dir.path()), written);
        let spare_bytes = std::fs::metadata(&spare).unwrap().len();
        for i in 0..5000u32 {
            db.delete(&i.to_be_bytes()).unwrap();
        }
        let written = flush(&db);
        // 1,000 keys written over the 4,000-key spare: its tail is cut.
        assert!(written < spare_bytes);
        assert_eq!(checkpoint_bytes(dir.path()), written);
    }
    assert!(!spare.exists(), "close deletes the spare");
    let db = Db::open(dir.path(), options).unwrap();
    let report = db.recovery_report();
    assert_eq!((report.checkpoint_keys, report.replayed_frames), (1000, 0), "{report:?}");
    for i in 0..6000u32 {
        let expected = (i >= 5000).then(|| i.to_le_bytes().to_vec());
        assert_eq!(db.get(&i.to_be_bytes()).unwrap(), expected, "key {i}");
    }
}

#[test]
fn snapshot_survives_gc_of_the_segments_it_reads() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options { background_work: false, ..small_segments() }).unwrap();
    for key in 0..50u32 {
        db.put(&key.to_le_bytes(), &[1u8; 1000]).unwrap();
    }
    let snapshot = db.snapshot();
    for _ in 0..5 {
        for key in 0..50u32 {
            db.put(&key.to_le_bytes(), &[2u8; 1000]).unwrap();
        }
    }
    while db.collect_garbage().unwrap() > 0 {}
    db.flush().unwrap();
    for key in 0..50u32 {
        assert_eq!(snapshot.get(&key.to_le_bytes()).unwrap().unwrap(), vec![1u8; 1000]);
        assert_eq!(db.get(&key.to_le_bytes()).unwrap().unwrap(), vec![2u8; 1000]);
    }
    assert_eq!(snapshot.range::<&[u8], _>(..).count(), 50);
}

#[test]
fn stats_report_sizes_and_amplification() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    for i in 0..1000u32 {
        db.put(&i.to_be_bytes(), &[0u8; 100]).unwrap();
    }
    // With deferred index updates (on by default), the overwrites below
    // reach the B-tree, and retire the versions they replace, once merged:
    // `stats` merges them before it counts.
    assert_eq!(db.len(), 1000);
    for i in 0..1000u32 {
        db.put(&i.to_be_bytes(), &[1u8; 100]).unwrap();
    }
    let stats = db.stats();
    assert_eq!(stats.keys, 1000);
    assert_eq!(stats.live_bytes, 1000 * (12 + 4 + 100));
    assert!(stats.write_amplification >= 1.0 && stats.write_amplification < 1.5, "{stats:?}");
    // 39.6 B once the background thread rebuilt the tree dense, ~56 before.
    assert!(stats.index_bytes_per_key > 35.0 && stats.index_bytes_per_key < 120.0, "{stats:?}");
    assert_eq!(stats.durability, "sync");
}

#[test]
fn stats_count_commit_groups_and_the_writes_they_share() {
    let dir = tempfile::tempdir().unwrap();
    let db = std::sync::Arc::new(Db::open(dir.path(), Options::default()).unwrap());
    for i in 0..100u32 {
        db.put(&i.to_be_bytes(), b"v").unwrap();
    }
    let mut batch = WriteBatch::new();
    batch.put(b"a", b"1");
    batch.put(b"b", b"2");
    db.write(batch).unwrap();
    let stats = db.stats();
    // One writer: every request is a group of its own; a batch is one.
    assert_eq!((stats.commit_groups, stats.committed_requests), (101, 101), "{stats:?}");
    // Where each group waits for a device, concurrent writers share them.
    if db.persist_waits_for_device() {
        let writers: Vec<_> = (0..8u32)
            .map(|t| {
                let db = db.clone();
                std::thread::spawn(move || {
                    for i in 0..200u32 {
                        db.put(&(t << 16 | i).to_be_bytes(), b"w").unwrap();
                    }
                })
            })
            .collect();
        for writer in writers {
            writer.join().unwrap();
        }
        let after = db.stats();
        let (groups, requests) = (after.commit_groups - 101, after.committed_requests - 101);
        assert_eq!(requests, 1600);
        assert!(groups < requests, "1600 concurrent writes took {groups} groups: no group commit");
    }
}

#[test]
fn purge_expired_drops_only_expired_keys_and_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let mut batch = WriteBatch::new();
    for i in 0..100u32 {
        let key = format!("k{i:03}");
        if i % 2 == 0 {
            batch.put_with_expiry(key.as_bytes(), b"v", scaledkv::now_ms() - 1);
        } else {
            batch.put(key.as_bytes(), b"v");
        }
    }
    db.write(batch).unwrap();
    assert_eq!(db.len(), 100);
    let (mut cursor, mut dropped) = (None, 0);
    let mut rounds = 0;
    loop {
        let (next, n) = db.purge_expired(cursor.as_deref(), 7, |_| {});
        dropped += n;
        rounds += 1;
        match next {
            Some(key) => cursor = Some(key),
            None => break,
        }
    }
    assert_eq!((dropped, db.len()), (50, 50));
    assert!(rounds >= 100 / 7);
    assert_eq!(db.iter().count(), 50);
    drop(db);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.iter().count(), 50);
}

#[test]
fn expire_keys_drops_the_expired_and_tells_when_the_others_expire() {
    let dir = tempfile::tempdir().unwrap();
    let db = Db::open(dir.path(), Options::default()).unwrap();
    let later = scaledkv::now_ms() + 60_000;
    let mut batch = WriteBatch::new();
    batch.put_with_expiry(b"later", b"v", later);
    batch.put_with_expiry(b"past", b"v", scaledkv::now_ms() - 1);
    batch.put(b"never", b"v");
    db.write(batch).unwrap();
    let mut seen = Vec::new();
    db.expire_keys(&["later", "past", "never", "missing"], |key, found| {
        seen.push((String::from_utf8_lossy(key).into_owned(), found))
    });
    seen.sort_by(|a, b| a.0.cmp(&b.0));
    use scaledkv::KeyExpiry::*;
    let expected = [("later", At(later)), ("missing", Never), ("never", Never), ("past", Dropped)];
    assert_eq!(seen, expected.map(|(key, found)| (key.to_string(), found)));
    assert_eq!(db.len(), 2, "past is gone");
    drop(db);
    let db = Db::open(dir.path(), Options::default()).unwrap();
    assert_eq!(db.iter().count(), 2);
}

#[test]
fn compacting_the_index_keeps_every_entry_while_writes_go_on() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options { durability: Durability::Buffered, ..Options::default() };
    let db = Db::open(dir.path(), options).unwrap();
    let key = |i: u64| (i.wrapping_mul(0x9E37_79B9_7F4A_7C15) % 200_000).to_be_bytes();
    for i in 0..60_000u64 {
        db.put(&key(i), &i.to_le_bytes()).unwrap();
    }
    let snapshot = db.snapshot();
    let seen: Vec<(Vec<u8>, Vec<u8>)> = snapshot.range::<&[u8], _>(..).map(|kv| kv.unwrap()).collect();
    // Overwrites, new keys and deletions race the rebuilds (and make
    // some of their pieces stale); the model is a BTreeMap.
    let mut model: std::collections::BTreeMap<Vec<u8>, Vec<u8>> = seen.iter().cloned().collect();
    std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut writes = Vec::new();
            for i in 60_000..90_000u64 {
                if i % 5 == 0 {
                    db.delete(&key(i / 2)).unwrap();
                    writes.push((key(i / 2).to_vec(), None));
                } else {
                    db.put(&key(i), &i.to_le_bytes()).unwrap();
                    writes.push((key(i).to_vec(), Some(i.to_le_bytes().to_vec())));
                }
            }
            writes
        });
        while !writer.is_finished() {
            db.compact_index();
        }
        for (k, v) in writer.join().unwrap() {
            match v {
                Some(v) => model.insert(k, v),
                None => model.remove(&k),
            };
        }
    });
    let after_snapshot: Vec<(Vec<u8>, Vec<u8>)> = snapshot.range::<&[u8], _>(..).map(|kv| kv.unwrap()).collect();
    assert_eq!(after_snapshot, seen, "a snapshot reads what it saw before the rebuilds");
    drop(snapshot);
    assert!(db.compact_index(), "nothing races the last rebuild");
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.iter().map(|kv| kv.unwrap()).collect();
    assert!(all.iter().map(|(k, v)| (k, v)).eq(model.iter()));
    for (k, v) in model.iter().step_by(13) {
        assert_eq!(db.get(k).unwrap().as_ref(), Some(v));
    }
    assert_eq!(db.len(), model.len());
    // `stats` counts a rebuilt run at 1.07 times its 37-byte entries, one
    // grown by inserts at 1.5 times; after `compact_index` every run is
    // rebuilt, whatever the background thread did before.
    let per_key = db.stats().index_bytes_per_key;
    assert!(per_key < 45.0, "{per_key} B per key");
}

/// `stats` breaks the index's memory down: the point table (16-byte slots
/// at most three quarters full) is part of the total, and absent without
/// `point_index`; nothing waits for the merger without background work.
#[test]
fn index_memory_is_broken_down_by_part() {
    for point_index in [true, false] {
        let dir = tempfile::tempdir().unwrap();
        let options = Options { point_index, background_work: false, ..small_segments() };
        let db = Db::open(dir.path(), options).unwrap();
        for i in 0..1000u32 {
            db.put(&i.to_be_bytes(), b"value").unwrap();
        }
        let stats = db.stats();
        if point_index {
            assert!(stats.index_point_table_bytes >= 1000 * 16 * 4 / 3, "{stats:?}");
            assert!(stats.index_point_table_bytes < stats.index_memory_bytes - 1000 * 30, "{stats:?}");
        } else {
            assert_eq!(stats.index_point_table_bytes, 0, "{stats:?}");
        }
        assert_eq!(stats.index_pending_bytes, 0, "{stats:?}");
    }
}
