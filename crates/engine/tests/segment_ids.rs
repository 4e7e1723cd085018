//! A log whose segment ids outgrow 32 bits. Index pointers keep an id's
//! low 32 bits (its tag, `log::segment::tag_of`); these tests start a
//! database at `first_segment_id` 2^32 - 4 so that the writer crosses the
//! point where tags wrap within a few segments, as a real log does after
//! 4 billion of them.

use std::collections::BTreeMap;
use std::path::Path;

use scaledkv::log::segment::{list_segment_files, tag_of};
use scaledkv::{Db, Durability, Options};

const NEAR_WRAP: u64 = (1 << 32) - 4;

fn options() -> Options {
    Options {
        durability: Durability::Sync,
        segment_size_bytes: 64 * 1024,
        gc_live_ratio: 0.6,
        checkpoint_interval_bytes: 256 * 1024,
        first_segment_id: NEAR_WRAP,
        ..Options::default()
    }
}

fn value(key: u32, round: u32) -> Vec<u8> {
    let mut value = format!("{key}-{round}-").into_bytes();
    value.resize(700 + (key as usize * 37) % 500, round as u8);
    value
}

/// Every key of `model` and nothing else, by point reads and in order.
fn assert_matches(db: &Db, model: &BTreeMap<Vec<u8>, Vec<u8>>) {
    for (key, value) in model {
        assert_eq!(db.get(key).unwrap().as_ref(), Some(value), "key {}", String::from_utf8_lossy(key));
    }
    let all: Vec<(Vec<u8>, Vec<u8>)> = db.iter().map(|kv| kv.unwrap()).collect();
    assert_eq!(all, model.iter().map(|(k, v)| (k.clone(), v.clone())).collect::<Vec<_>>());
}

/// A copy of an open database's files: what a crash would leave.
fn copy_while_open(dir: &Path) -> tempfile::TempDir {
    let copy = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "LOCK" && path.is_file() {
            std::fs::copy(&path, copy.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    copy
}

fn ids(dir: &Path) -> Vec<u64> {
    list_segment_files(dir).unwrap().into_iter().map(|(id, _)| id).collect()
}

/// One round of writes: every key put or (one in seven) deleted.
fn write_round(db: &Db, model: &mut BTreeMap<Vec<u8>, Vec<u8>>, round: u32) {
    for key in 0..300u32 {
        let name = format!("key-{key:04}").into_bytes();
        if (key + round).is_multiple_of(7) {
            db.delete(&name).unwrap();
            model.remove(&name);
        } else {
            db.put(&name, &value(key, round)).unwrap();
            model.insert(name, value(key, round));
        }
    }
    db.collect_garbage().unwrap();
}

/// Overwrites and deletions across the wrap, with GC freeing segments on
/// both sides of it, a snapshot taken before it and read after, checkpoints
/// (full and delta) naming segments past 2^32, and reopens after a clean
/// close and from a copy of the files taken while open (as a crash leaves
/// them).
#[test]
fn writes_across_the_tag_wrap_survive_gc_checkpoints_and_reopens() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let mut model = BTreeMap::new();
    let mut db = Db::open(dir.path(), options()).unwrap();
    for key in 0..60u32 {
        let name = format!("key-{key:04}").into_bytes();
        db.put(&name, &value(key, 99)).unwrap();
        model.insert(name, value(key, 99));
    }
    let before_wrap = model.clone();
    let snapshot = db.snapshot();
    for round in 0..3 {
        write_round(&db, &mut model, round);
    }
    assert!(ids(dir.path()).iter().any(|&id| id > 1 << 32), "past the wrap: {:?}", ids(dir.path()));
    let seen: BTreeMap<Vec<u8>, Vec<u8>> = snapshot.range::<&[u8], _>(..).map(|kv| kv.unwrap()).collect();
    assert_eq!(seen, before_wrap);
    drop(snapshot);
    for round in 3..12 {
        write_round(&db, &mut model, round);
        if round % 4 == 3 {
            drop(db);
            db = Db::open(dir.path(), options()).unwrap();
            assert_matches(&db, &model);
        }
    }
    let held = ids(dir.path());
    assert!(held.iter().all(|&id| id > 1 << 32), "GC freed the segments before the wrap: {held:?}");
    assert!(held.iter().any(|&id| tag_of(id) < 50), "the ids crossed the wrap: {held:?}");
    assert_matches(&db, &model);

    // Everything acknowledged is in what a crash leaves.
    let copy = copy_while_open(dir.path());
    drop(db);
    let reopened = Db::open(copy.path(), options()).unwrap();
    assert_matches(&reopened, &model);
    drop(reopened);
    let db = Db::open(dir.path(), options()).unwrap();
    assert_matches(&db, &model);
}

/// Recovery without a checkpoint replays the whole log across the wrap:
/// its records sort by log position (a GC copy after its original, as
/// tags from the oldest segment's order them) and long keys that share
/// their first 16 bytes are read back from segments found by tag.
#[test]
fn a_log_replayed_across_the_tag_wrap_keeps_log_order() {
    let no_checkpoints =
        Options { checkpoint_interval_bytes: u64::MAX, checkpoint_interval_entries: u64::MAX, ..options() };
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = Db::open(dir.path(), no_checkpoints.clone()).unwrap();
    let mut model = BTreeMap::new();
    for round in 0..4u32 {
        for key in 0..150u32 {
            let name = format!("a-shared-sixteen-byte-prefix-{key:04}").into_bytes();
            if key % 3 == round % 3 {
                continue;
            }
            db.put(&name, &value(key, round)).unwrap();
            model.insert(name, value(key, round));
        }
        db.collect_garbage().unwrap();
    }
    assert!(ids(dir.path()).iter().any(|&id| id > 1 << 32), "past the wrap: {:?}", ids(dir.path()));
    let copy = copy_while_open(dir.path());
    drop(db);
    let reopened = Db::open(copy.path(), no_checkpoints).unwrap();
    assert!(reopened.recovery_report().checkpoint_keys == 0, "replayed without a checkpoint");
    assert_matches(&reopened, &model);
}
