//! A log whose segment ids outgrow 32 bits. Index pointers keep an id's
//! low 32 bits (its tag, `log::segment::tag_of`); these tests start a
//! database at `first_segment_id` 2^32 - 4 so that the writer crosses the
//! point where tags wrap within a few segments, as a real log does after
//! 4 billion of them.

use std::collections::BTreeMap;
use std::path::Path;

use scaledkv::log::segment::{list_segment_files, segment_file_name, tag_of, MAX_ID_SPAN};
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

/// Gives `path`, a copy of a segment, the header of an empty segment `id`.
fn make_empty_segment(path: &Path, id: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[256..].fill(0);
    bytes[12..16].copy_from_slice(&(id as u32).to_le_bytes());
    bytes[24..28].copy_from_slice(&((id >> 32) as u32).to_le_bytes());
    let crc = scaledkv_pmem::crc::crc32c(&bytes[..32]);
    bytes[32..36].copy_from_slice(&crc.to_le_bytes());
    std::fs::write(path, bytes).unwrap();
}

/// A segment whose data never changes is moved forward once it is half
/// the tags' span behind the active segment, whatever its live ratio, so
/// the log never reaches the span (a database whose oldest data stayed
/// live refused writes after 4 billion segments); a segment as live but
/// not that far behind stays where it is.
#[test]
fn a_segment_far_behind_is_moved_forward_whatever_its_live_ratio() {
    let options = Options { first_segment_id: 1, background_work: false, ..options() };
    let base = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let db = Db::open(base.path(), options.clone()).unwrap();
    let mut model = BTreeMap::new();
    for key in 0..40u32 {
        let name = format!("key-{key:04}").into_bytes();
        db.put(&name, &value(key, 1)).unwrap();
        model.insert(name, value(key, 1));
    }
    drop(db);
    for (far, moved) in [(MAX_ID_SPAN / 2, false), (MAX_ID_SPAN / 2 + 2, true)] {
        // An empty active segment `far` ids on, as the log would have after
        // that many rolls whose segments GC freed.
        let dir = copy_while_open(base.path());
        let first = dir.path().join("seg-00000001.log");
        let active = dir.path().join(segment_file_name(far));
        std::fs::copy(&first, &active).unwrap();
        make_empty_segment(&active, far);
        let db = Db::open(dir.path(), options.clone()).unwrap();
        assert_matches(&db, &model);
        db.collect_garbage().unwrap();
        assert_matches(&db, &model);
        drop(db);
        assert_eq!(!first.exists(), moved, "segment 1 moved with the active segment {far}: {:?}", ids(dir.path()));
        if moved {
            assert_eq!(ids(dir.path()), [far]);
            let db = Db::open(dir.path(), options.clone()).unwrap();
            assert_matches(&db, &model);
        }
    }
}
