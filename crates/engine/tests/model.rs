//! Model-based test: random sequences of puts, deletes, batches, reads,
//! ranges, snapshots, GC and reopens, checked against a `BTreeMap`.

use std::collections::BTreeMap;
use std::ops::Bound;

use proptest::prelude::*;
use scaledkv::{Db, Durability, Options, WriteBatch};

type Model = BTreeMap<Vec<u8>, Vec<u8>>;

#[derive(Debug, Clone)]
enum Op {
    Put(u8, Vec<u8>),
    Delete(u8),
    Batch(Vec<(u8, Option<Vec<u8>>)>),
    Get(u8),
    Range(Option<u8>, Option<u8>, bool),
    TakeSnapshot,
    CheckSnapshot,
    Gc,
    Reopen,
}

fn key(k: u8) -> Vec<u8> {
    // Few distinct keys so overwrites and deletes hit; some longer than the
    // 16-byte inline limit of the index.
    if k.is_multiple_of(5) {
        format!("long-key-number-{k:03}-with-padding").into_bytes()
    } else {
        format!("k{k:03}").into_bytes()
    }
}

fn value() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![prop::collection::vec(any::<u8>(), 0..40), prop::collection::vec(any::<u8>(), 2000..6000),]
}

fn op() -> impl Strategy<Value = Op> {
    let k = 0u8..40;
    prop_oneof![
        6 => (k.clone(), value()).prop_map(|(k, v)| Op::Put(k, v)),
        2 => k.clone().prop_map(Op::Delete),
        2 => prop::collection::vec((0u8..40, prop::option::of(value())), 1..6).prop_map(Op::Batch),
        3 => k.clone().prop_map(Op::Get),
        2 => (prop::option::of(0u8..40), prop::option::of(0u8..40), any::<bool>()).prop_map(|(a, b, r)| Op::Range(a, b, r)),
        1 => Just(Op::TakeSnapshot),
        1 => Just(Op::CheckSnapshot),
        1 => Just(Op::Gc),
        1 => Just(Op::Reopen),
    ]
}

fn options(durability: Durability) -> Options {
    Options {
        durability,
        segment_size_bytes: 64 * 1024,
        background_work: false,
        gc_live_ratio: 0.6,
        ..Options::default()
    }
}

fn check_range(db: &Db, model: &Model, lo: Option<u8>, hi: Option<u8>, reverse: bool) {
    let lo = lo.map(key);
    let hi = hi.map(key);
    let bounds = (
        lo.as_deref().map_or(Bound::Unbounded, Bound::Included),
        hi.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
    );
    let valid = match (&lo, &hi) {
        (Some(a), Some(b)) => a < b,
        _ => true,
    };
    let expected: Vec<(Vec<u8>, Vec<u8>)> =
        if valid { model.range::<[u8], _>(bounds).map(|(k, v)| (k.clone(), v.clone())).collect() } else { Vec::new() };
    let expected: Vec<_> = if reverse { expected.into_iter().rev().collect() } else { expected };
    // Counted and indexed from the index alone, as iterated below; first,
    // while updates may still be pending (an iterator merges them all).
    assert_eq!(db.count_keys::<&[u8], _>(bounds), expected.len());
    let forward: Vec<&Vec<u8>> = if reverse {
        expected.iter().rev().map(|(k, _)| k).collect()
    } else {
        expected.iter().map(|(k, _)| k).collect()
    };
    for n in [0, 1, forward.len() / 2, forward.len().saturating_sub(1), forward.len()] {
        assert_eq!(db.nth_key::<&[u8], _>(bounds, n).as_ref(), forward.get(n).copied(), "key {n}");
    }
    assert_eq!(db.last_key::<&[u8], _>(bounds).as_ref(), forward.last().copied());
    let mut walked = Vec::new();
    db.visit_keys::<&[u8], _>(bounds, reverse, |key| {
        walked.push(key.to_vec());
        true
    });
    assert_eq!(walked, expected.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(), "visit_keys");
    let mut ranks = vec![0, forward.len() / 3, forward.len() / 2, forward.len().saturating_sub(1), forward.len()];
    ranks.dedup();
    let want: Vec<Vec<u8>> = ranks.iter().filter_map(|&n| forward.get(n).map(|k| k.to_vec())).collect();
    assert_eq!(db.keys_at_ranks::<&[u8], _>(bounds, &ranks), want, "at ranks {ranks:?}");
    let iter = if reverse { db.range_rev::<&[u8], _>(bounds) } else { db.range::<&[u8], _>(bounds) };
    let got: Vec<_> = iter.map(|kv| kv.unwrap()).collect();
    assert_eq!(got, expected);
    // Told how many to expect, it copies other chunks out of the index.
    let told = 17 + expected.len() / 2;
    let iter = if reverse { db.range_rev::<&[u8], _>(bounds) } else { db.range::<&[u8], _>(bounds) };
    let got: Vec<_> = iter.expect(told).map(|kv| kv.unwrap()).collect();
    assert_eq!(got, expected, "expecting {told}");
}

fn run(ops: Vec<Op>, durability: Durability) {
    run_with(ops, options(durability));
}

fn run_with(ops: Vec<Op>, options: Options) {
    let durability = options.durability;
    let base = if durability == Durability::Pmem { "/dev/shm" } else { env!("CARGO_TARGET_TMPDIR") };
    let dir = tempfile::tempdir_in(base).unwrap();
    let mut db = Some(Db::open(dir.path(), options.clone()).unwrap());
    let mut model = Model::new();
    // Snapshots borrow the Db, so the test keeps the model's copy and
    // checks a fresh snapshot against it only while the db is unchanged
    // across the snapshot's life (taken and checked between reopens).
    let mut snapshot_model: Option<Model> = None;
    let mut snapshot_seq_model: Vec<(Vec<u8>, Vec<u8>)> = Vec::new();
    for op in ops {
        let handle = db.as_ref().unwrap();
        match op {
            Op::Put(k, v) => {
                handle.put(&key(k), &v).unwrap();
                model.insert(key(k), v);
            }
            Op::Delete(k) => {
                handle.delete(&key(k)).unwrap();
                model.remove(&key(k));
            }
            Op::Batch(entries) => {
                let mut batch = WriteBatch::new();
                for (k, v) in &entries {
                    match v {
                        Some(v) => batch.put(&key(*k), v),
                        None => batch.delete(&key(*k)),
                    }
                }
                handle.write(batch).unwrap();
                for (k, v) in entries {
                    match v {
                        Some(v) => model.insert(key(k), v),
                        None => model.remove(&key(k)),
                    };
                }
            }
            Op::Get(k) => assert_eq!(handle.get(&key(k)).unwrap(), model.get(&key(k)).cloned()),
            Op::Range(lo, hi, reverse) => check_range(handle, &model, lo, hi, reverse),
            Op::TakeSnapshot => {
                snapshot_model = Some(model.clone());
                snapshot_seq_model = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            }
            Op::CheckSnapshot => {
                // A snapshot taken now must equal the model now, and keep
                // doing so while writes continue underneath it.
                let snapshot = handle.snapshot();
                let before: Vec<_> = snapshot.range::<&[u8], _>(..).map(|kv| kv.unwrap()).collect();
                let now: Vec<_> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
                assert_eq!(before, now);
                handle.put(&key(0), b"written after the snapshot").unwrap();
                handle.delete(&key(1)).unwrap();
                handle.collect_garbage().unwrap();
                let after: Vec<_> = snapshot.range::<&[u8], _>(..).map(|kv| kv.unwrap()).collect();
                assert_eq!(after, now);
                // Its keys from the index alone: the same, and a walk that
                // stops where told.
                let mut keys = Vec::new();
                snapshot.visit_keys::<&[u8], _>(.., |key| {
                    keys.push(key.to_vec());
                    true
                });
                assert_eq!(keys, now.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>());
                let mut first = Vec::new();
                snapshot.visit_keys(key(1).as_slice().., |key| {
                    first.push(key.to_vec());
                    first.len() < 2
                });
                assert_eq!(
                    first,
                    now.iter().map(|(k, _)| k.clone()).filter(|k| *k >= key(1)).take(2).collect::<Vec<_>>()
                );
                // An inverted range holds nothing (and does not panic).
                snapshot.visit_keys(key(2).as_slice()..key(1).as_slice(), |_| panic!("a key in an inverted range"));
                assert_eq!(snapshot.get(&key(1)).unwrap(), model.get(&key(1)).cloned());
                // The newest state, counted while the snapshot keeps the
                // deleted key's older version (a deletion marker heads it).
                let mut newest = model.clone();
                newest.insert(key(0), b"written after the snapshot".to_vec());
                newest.remove(&key(1));
                assert_eq!(handle.count_keys::<&[u8], _>(..), newest.len());
                assert_eq!(handle.count_keys(key(1).as_slice()..=key(1).as_slice()), 0);
                drop(snapshot);
                model = newest;
                let _ = (&snapshot_model, &snapshot_seq_model);
            }
            Op::Gc => {
                handle.collect_garbage().unwrap();
            }
            Op::Reopen => {
                drop(db.take());
                db = Some(Db::open(dir.path(), options.clone()).unwrap());
            }
        }
    }
    let db = db.unwrap();
    check_range(&db, &model, None, None, false);
    assert_eq!(db.stats().keys, model.len() as u64);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn sync_mode_matches_the_model(ops in prop::collection::vec(op(), 1..200)) {
        run(ops, Durability::Sync);
    }

    #[test]
    fn buffered_mode_matches_the_model(ops in prop::collection::vec(op(), 1..200)) {
        run(ops, Durability::Buffered);
    }

    #[test]
    fn pmem_mode_on_tmpfs_matches_the_model(ops in prop::collection::vec(op(), 1..200)) {
        run(ops, Durability::Pmem);
    }

    /// Four hash tags for 40 keys: point lookups mostly find several
    /// candidates or another key's entry, and must fall back correctly.
    #[test]
    fn shared_point_tags_match_the_model(ops in prop::collection::vec(op(), 1..200)) {
        run_with(ops, Options { point_index: true, point_tag_bits: 2, ..options(Durability::Sync) });
    }

    /// Index updates deferred and merged by the merger thread every three
    /// keys, while the background thread checkpoints and collects.
    #[test]
    fn deferred_index_updates_match_the_model(ops in prop::collection::vec(op(), 1..200)) {
        run_with(ops, Options { background_work: true, deferred_index_updates: 3, ..options(Durability::Sync) });
    }

    /// Tables that never fill with these 40 keys: walks find most
    /// versions pending, in the active table's key order and its tail.
    #[test]
    fn updates_deferred_past_the_key_count_match_the_model(ops in prop::collection::vec(op(), 1..200)) {
        run_with(ops, Options { background_work: true, deferred_index_updates: 1000, ..options(Durability::Sync) });
    }

    #[test]
    fn deferred_updates_with_shared_point_tags_match_the_model(ops in prop::collection::vec(op(), 1..200)) {
        let deferred = Options { background_work: true, deferred_index_updates: 3, ..options(Durability::Pmem) };
        run_with(ops, Options { point_index: true, point_tag_bits: 2, ..deferred });
    }

    #[test]
    fn with_the_point_index_matches_the_model(ops in prop::collection::vec(op(), 1..200)) {
        run_with(ops, Options { point_index: true, ..options(Durability::Pmem) });
    }

    /// A log whose segment ids cross 2^32, where the index pointers' 32-bit
    /// segment tags wrap (ids 2^32 - 4, - 3, - 2, then 2^32 + 1, tag 1):
    /// GC, checkpoints, snapshots and reopens across it.
    #[test]
    fn segment_ids_across_2_pow_32_match_the_model(ops in prop::collection::vec(op(), 1..200)) {
        run_with(ops, Options { first_segment_id: (1 << 32) - 4, ..options(Durability::Sync) });
    }

    /// The same with the point table (tags kept in its slots), deferred
    /// index updates and background work.
    #[test]
    fn segment_ids_across_2_pow_32_with_the_point_index_match_the_model(
        ops in prop::collection::vec(op(), 1..200),
    ) {
        let deferred = Options { background_work: true, deferred_index_updates: 3, ..options(Durability::Pmem) };
        run_with(ops, Options { point_index: true, first_segment_id: (1 << 32) - 4, ..deferred });
    }
}
