//! Corrupt and truncated files: bit flips in every frame, torn tails and
//! truncation at every frame boundary, damaged manifest and checkpoint,
//! and random garbage. The rule checked everywhere: a clear error or a
//! reported repair, never wrong data, never a panic.

use std::path::{Path, PathBuf};

use proptest::prelude::*;
use scaledkv::log::reader::{scan_until, ScanEnd};
use scaledkv::{Db, Durability, Error, Options};

#[path = "support/framed.rs"]
mod framed;
use framed::{key, value};

const FRAMES: u32 = 20;

fn options() -> Options {
    Options {
        durability: Durability::Sync,
        background_work: false,
        segment_size_bytes: 256 * 1024,
        ..Options::default()
    }
}

/// The database the tests damage (`framed::build`).
fn build(replay_only: bool) -> (tempfile::TempDir, PathBuf, Vec<(usize, usize)>) {
    framed::build(options(), FRAMES, replay_only)
}

fn copy_dir(from: &Path) -> tempfile::TempDir {
    let to = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.file_name().unwrap() != "LOCK" {
            std::fs::copy(&path, to.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    to
}

fn edit(path: &Path, f: impl FnOnce(&mut Vec<u8>)) {
    let mut bytes = std::fs::read(path).unwrap();
    f(&mut bytes);
    std::fs::write(path, bytes).unwrap();
}

/// Writes `field` at `at` in a segment's header and recomputes the
/// header's checksum: damage that a checksum does not catch.
fn forge_header(segment: &mut [u8], at: usize, field: &[u8]) {
    segment[at..at + field.len()].copy_from_slice(field);
    let crc = scaledkv_pmem::crc::crc32c(&segment[..32]);
    segment[32..36].copy_from_slice(&crc.to_le_bytes());
}

/// Keys `0..n` hold their values exactly, the rest are absent.
fn assert_exactly_first(db: &Db, n: u32, except: Option<u32>) {
    for i in 0..FRAMES {
        let want = (i < n && Some(i) != except).then(|| value(i));
        assert_eq!(db.get(&key(i)).unwrap(), want, "key {i}");
    }
}

#[test]
fn a_bit_flip_in_any_frame_is_an_error_naming_the_file_and_offset_or_a_reported_tail() {
    let (base, _, frames) = build(true);
    for (i, &(frame_at, frame_end)) in frames.iter().enumerate() {
        // Header, entry header, key and the last value byte.
        for at in [frame_at + 1, frame_at + 9, frame_at + 20, frame_at + 24 + 5, frame_at + 24 + 14, frame_end - 1] {
            if at >= frame_end {
                continue;
            }
            let copy = copy_dir(base.path());
            let segment = copy.path().join("seg-00000001.log");
            edit(&segment, |b| b[at] ^= 0x10);
            let last = i == frames.len() - 1;
            match Db::open(copy.path(), options()) {
                Ok(db) if last => {
                    let truncated = db.recovery_report().truncated.clone().expect("a damaged tail is reported");
                    assert_eq!(truncated.offset, frame_at as u64);
                    assert_exactly_first(&db, i as u32, None);
                }
                Ok(_) => panic!("flip at {at} in frame {i} (of {}) went unnoticed", frames.len()),
                Err(Error::Corruption { path, offset, .. }) => {
                    assert!(!last, "the last frame is a tail, not mid-log corruption");
                    assert_eq!(path, segment);
                    assert_eq!(offset, frame_at as u64);
                    let repaired = Db::open(copy.path(), Options { repair: true, ..options() }).unwrap();
                    assert_eq!(repaired.recovery_report().skipped.len(), 1);
                    assert_exactly_first(&repaired, FRAMES, Some(i as u32));
                }
                Err(other) => panic!("unexpected error {other}"),
            }
        }
    }
}

#[test]
fn a_torn_tail_at_every_boundary_and_inside_every_frame_keeps_everything_before_it() {
    let (base, _, frames) = build(true);
    for (i, &(frame_at, _)) in frames.iter().enumerate() {
        for (cut, torn) in [(frame_at, false), (frame_at + 30, true)] {
            let copy = copy_dir(base.path());
            let segment = copy.path().join("seg-00000001.log");
            edit(&segment, |b| b[cut..].fill(0));
            let db = Db::open(copy.path(), options()).unwrap();
            assert_exactly_first(&db, i as u32, None);
            assert_eq!(db.recovery_report().truncated.is_some(), torn, "cut at {cut}");
            // The repaired log takes new writes and keeps them.
            db.put(b"after", b"repair").unwrap();
            drop(db);
            let db = Db::open(copy.path(), options()).unwrap();
            assert_eq!(db.get(b"after").unwrap().unwrap(), b"repair");
            assert_exactly_first(&db, i as u32, None);
        }
    }
}

#[test]
fn a_segment_file_cut_short_at_every_boundary_is_a_reported_tail() {
    let (base, _, frames) = build(true);
    for (i, &(frame_at, _)) in frames.iter().enumerate() {
        let copy = copy_dir(base.path());
        let segment = copy.path().join("seg-00000001.log");
        edit(&segment, |b| b.truncate(frame_at + 3));
        let db = Db::open(copy.path(), options()).unwrap();
        assert!(db.recovery_report().truncated.is_some());
        assert_exactly_first(&db, i as u32, None);
    }
}

/// A checkpointed database whose key 3 has a flipped bit in its value,
/// opened; and the damaged segment's path.
fn open_with_a_damaged_value() -> (tempfile::TempDir, PathBuf, Db) {
    let (base, _, frames) = build(false);
    let copy = copy_dir(base.path());
    let segment = copy.path().join("seg-00000001.log");
    edit(&segment, |b| b[frames[3].0 + 24 + 12 + 7 + 2] ^= 1);
    let db = Db::open(copy.path(), options()).unwrap();
    (copy, segment, db)
}

#[test]
fn with_a_checkpoint_a_damaged_value_is_a_read_error_not_wrong_data() {
    let (_copy, _, db) = open_with_a_damaged_value();
    assert!(matches!(db.get(&key(3)), Err(Error::Corruption { .. })));
    assert_eq!(db.get(&key(4)).unwrap().unwrap(), value(4));
    assert!(db.iter().any(|kv| kv.is_err()), "the iterator reports the damaged entry");
}

/// GC that meets a damaged frame reports it once, naming the file, and
/// then leaves that segment alone: writes that help GC would otherwise
/// rescan it every time.
#[test]
fn gc_reports_a_damaged_segment_once_and_then_leaves_it() {
    let (_copy, segment, db) = open_with_a_damaged_value();
    // Write 3,000 keys twice, sealing a few segments: segment 1 (which the
    // log went on filling after the reopen) is then all garbage, the
    // damaged entry included.
    for i in (0..3000).chain(0..3000) {
        db.put(&key(i), &value(i + 1)).unwrap();
    }
    match db.collect_garbage() {
        Err(Error::Corruption { path, .. }) => assert_eq!(path, segment),
        other => panic!("expected the damaged segment to be reported, got {other:?}"),
    }
    assert!(db.collect_garbage().is_ok(), "GC tried the damaged segment again");
    for i in 0..3000 {
        assert_eq!(db.get(&key(i)).unwrap().unwrap(), value(i + 1));
    }
}

#[test]
fn damaged_manifest_or_checkpoint_is_a_clear_error() {
    let (base, _, _) = build(false);
    let checkpoint = std::fs::read_dir(base.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .find(|n| n.starts_with("index-"))
        .unwrap();
    for (file, damage) in [
        ("MANIFEST", 0usize),
        ("MANIFEST", 20),
        (checkpoint.as_str(), 3),
        (checkpoint.as_str(), 40),
        (checkpoint.as_str(), usize::MAX),
    ] {
        let copy = copy_dir(base.path());
        edit(&copy.path().join(file), |b| {
            if damage == usize::MAX {
                b.truncate(b.len() / 2);
            } else {
                b[damage] ^= 0x40;
            }
        });
        match Db::open(copy.path(), options()) {
            Err(Error::Corruption { path, .. }) => assert!(path.ends_with(file), "{}", path.display()),
            Err(other) => panic!("{file}: unexpected error {other}"),
            Ok(_) => panic!("{file}: damage at {damage} went unnoticed"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    /// Random garbage anywhere: open may fail, reads may fail, but whatever
    /// is returned as data is exactly what was written.
    #[test]
    fn random_garbage_never_yields_wrong_data(
        with_checkpoint in any::<bool>(),
        damage in prop::collection::vec((0usize..3, any::<usize>(), any::<u8>()), 1..8),
    ) {
        let (base, _, _) = build(!with_checkpoint);
        let copy = copy_dir(base.path());
        let mut files: Vec<PathBuf> =
            std::fs::read_dir(copy.path()).unwrap().map(|e| e.unwrap().path()).collect();
        files.sort();
        for (which, at, byte) in damage {
            let path = &files[which % files.len()];
            edit(path, |b| {
                if !b.is_empty() {
                    let n = b.len();
                    // Most damage lands where the data is.
                    b[at % n.min(8192)] = byte;
                }
            });
        }
        if let Ok(db) = Db::open(copy.path(), options()) {
            for i in 0..FRAMES {
                if let Ok(Some(got)) = db.get(&key(i)) {
                    prop_assert_eq!(got, value(i));
                }
            }
            for (k, v) in db.iter().flatten() {
                let i: u32 = std::str::from_utf8(&k[4..]).unwrap().parse().unwrap();
                prop_assert_eq!(v, value(i));
            }
        }
    }
}

/// GC scans a segment in pieces: whatever the piece size, the pieces
/// together visit exactly the frames of one whole scan, in order.
#[test]
fn a_scan_in_pieces_visits_every_frame_once() {
    let (_dir, segment, frames) = build(false);
    let bytes = std::fs::read(segment).unwrap();
    for piece in [1, 8, 100, 256, 1000, 4096, bytes.len()] {
        let (mut seen, mut at) = (Vec::new(), 256);
        loop {
            let stop = at + piece;
            // One entry per frame in this log.
            let end = match scan_until(&bytes, at, stop, |frame_at, header, _, _| {
                seen.push((frame_at, frame_at + header.frame_len as usize));
            }) {
                ScanEnd::Clean { end } => end,
                bad => panic!("{bad:?}"),
            };
            at = end;
            if end < stop {
                break;
            }
        }
        assert_eq!(seen, frames, "pieces of {piece} bytes");
    }
}

/// A segment is made under `create-N.tmp` and renamed only once its header
/// is whole, so a crash mid-header leaves a `.tmp` file with a torn header
/// (here: magic without its checksum). Open deletes it and the next
/// segment is created afresh.
#[test]
fn a_half_made_segment_under_its_tmp_name_is_deleted_at_open() {
    let dir = tempfile::tempdir().unwrap();
    {
        let db = Db::open(dir.path(), options()).unwrap();
        for i in 0..FRAMES {
            db.put(&key(i), &value(i)).unwrap();
        }
    }
    let torn = dir.path().join("create-00000099.tmp");
    let mut contents = vec![0u8; 64 * 1024];
    contents[..8].copy_from_slice(b"SKVLOG\0\0");
    std::fs::write(&torn, &contents).unwrap();
    let db = Db::open(dir.path(), options()).unwrap();
    assert!(!torn.exists(), "open left the half-made segment behind");
    for i in 0..FRAMES {
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i)));
    }
    // Enough to roll over two 256 KiB segments: new ones take their names.
    for i in FRAMES..3000 {
        db.put(&key(i), &value(i)).unwrap();
    }
    drop(db);
    let names: Vec<String> =
        std::fs::read_dir(dir.path()).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    assert!(names.iter().filter(|n| n.starts_with("seg-")).count() >= 3, "{names:?}");
    assert!(!names.iter().any(|n| n.ends_with(".tmp")), "{names:?}");
    let db = Db::open(dir.path(), options()).unwrap();
    for i in 0..3000 {
        assert_eq!(db.get(&key(i)).unwrap(), Some(value(i)));
    }
}

/// A crash between creating the next segment's file and persisting its
/// header leaves a file of zeros (or an empty one): it never held data, so
/// open removes it and reports it. One with data but a bad header is an
/// error that names the file.
#[test]
fn a_segment_file_without_its_header_is_removed_and_reported() {
    for contents in [vec![], vec![0u8; 64 * 1024]] {
        let dir = tempfile::tempdir().unwrap();
        {
            let db = Db::open(dir.path(), options()).unwrap();
            for i in 0..FRAMES {
                db.put(&key(i), &value(i)).unwrap();
            }
        }
        let unfinished = dir.path().join("seg-00000099.log");
        std::fs::write(&unfinished, &contents).unwrap();
        let db = Db::open(dir.path(), options()).unwrap();
        assert_eq!(db.recovery_report().removed_segments, vec![unfinished.clone()]);
        assert!(!unfinished.exists());
        for i in 0..FRAMES {
            assert_eq!(db.get(&key(i)).unwrap(), Some(value(i)), "{} bytes left behind", contents.len());
        }
    }
    let dir = tempfile::tempdir().unwrap();
    drop(Db::open(dir.path(), options()).unwrap());
    let garbage = dir.path().join("seg-00000099.log");
    std::fs::write(&garbage, vec![0x5Au8; 64 * 1024]).unwrap();
    match Db::open(dir.path(), options()) {
        Err(Error::Corruption { path, .. }) => assert_eq!(path, garbage),
        Err(other) => panic!("expected a corruption error naming the file, got {other}"),
        Ok(_) => panic!("a segment of garbage was accepted"),
    }
}

/// The newest segment cut short gets back the size its header declares,
/// but a header (checksum recomputed) that declares more than any segment
/// of the database was created with is an error naming the file, which
/// keeps its length: a forged 7.6 GB made open extend a 64 KiB file and
/// read every page (libFuzzer, `engine_files`).
#[test]
fn a_cut_short_segment_gets_back_only_a_size_it_can_have() {
    let (base, _, frames) = build(true);
    let declared = options().segment_size_bytes as u64;
    let (last_at, _) = frames[frames.len() - 1];
    let copy = copy_dir(base.path());
    let segment = copy.path().join("seg-00000001.log");
    edit(&segment, |b| b.truncate(last_at));
    let db = Db::open(copy.path(), options()).unwrap();
    assert_exactly_first(&db, FRAMES - 1, None);
    let restored = db.recovery_report().restored.as_ref().expect("the restored length is reported");
    assert_eq!((restored.path.as_path(), restored.offset), (segment.as_path(), last_at as u64));
    drop(db);
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), declared);
    // Cut inside the last frame: both reported, the length given back and
    // the torn frame cut (the second replaced the first before each had a
    // field of its own).
    let copy = copy_dir(base.path());
    let segment = copy.path().join("seg-00000001.log");
    edit(&segment, |b| b.truncate(last_at + 40));
    let db = Db::open(copy.path(), options()).unwrap();
    assert_exactly_first(&db, FRAMES - 1, None);
    let report = db.recovery_report();
    assert_eq!(report.restored.as_ref().map(|r| r.offset), Some(last_at as u64 + 40));
    assert_eq!(report.truncated.as_ref().map(|t| t.offset), Some(last_at as u64));
    drop(db);
    assert_eq!(std::fs::metadata(&segment).unwrap().len(), declared);

    for size in [declared + 4096, 7_600_000_000] {
        let copy = copy_dir(base.path());
        let segment = copy.path().join("seg-00000001.log");
        edit(&segment, |b| {
            b.truncate(last_at);
            forge_header(b, 16, &size.to_le_bytes());
        });
        match Db::open(copy.path(), options()) {
            Err(Error::Corruption { path, reason, .. }) => {
                assert_eq!(path, segment);
                assert!(reason.contains(&size.to_string()), "{reason}");
            }
            Err(other) => panic!("expected a corruption error naming the segment, got {other}"),
            Ok(_) => panic!("a segment declaring {size} bytes was given them"),
        }
        assert_eq!(std::fs::metadata(&segment).unwrap().len(), last_at as u64, "the file keeps its length");
    }
}

/// Opens `dir` (the first database's keys, a forged active segment),
/// writes until the log refuses a write with an error that says
/// `refusal_says`, and checks that a reopen finds every acknowledged one.
fn assert_fills_then_refuses(dir: &Path, refusal_says: &str) {
    let db = Db::open(dir, options()).unwrap();
    assert_exactly_first(&db, FRAMES, None);
    let mut acknowledged = 0u32;
    let refusal = loop {
        let key = format!("more-{acknowledged}");
        match db.put(key.as_bytes(), &[7u8; 1000]) {
            Ok(()) => acknowledged += 1,
            Err(error) => break error,
        }
        assert!(acknowledged < 10_000, "a 256 KiB segment took 10 MB");
    };
    // The writer's error reaches its caller inside the poisoning it causes.
    assert!(refusal.to_string().contains(refusal_says), "{refusal}");
    assert!(acknowledged > 100, "only {acknowledged} writes before the refusal");
    drop(db);
    let db = Db::open(dir, options()).unwrap();
    assert_exactly_first(&db, FRAMES, None);
    for i in 0..acknowledged {
        assert_eq!(db.get(format!("more-{i}").as_bytes()).unwrap(), Some(vec![7u8; 1000]), "write {i}");
    }
}

/// Opening `dir` fails with a corruption error naming `path`; its reason.
fn corruption_naming(dir: &Path, path: &Path) -> String {
    match Db::open(dir, options()) {
        Err(Error::Corruption { path: named, reason, .. }) if named == path => reason,
        Err(other) => panic!("expected a corruption error naming {}, got {other}", path.display()),
        Ok(_) => panic!("{} was accepted", path.display()),
    }
}

/// Gives segment file `path` the header of segment `id` (64 bits: low half
/// at 12, high half at 24).
fn forge_segment_id(path: &Path, id: u64) {
    edit(path, |b| {
        forge_header(b, 12, &(id as u32).to_le_bytes());
        forge_header(b, 24, &((id >> 32) as u32).to_le_bytes());
    });
}

/// Segment ids end at `MAX_SEGMENT_ID` (2^62): a log whose active segment
/// has the last id takes writes until it is full, then refuses the next
/// with a clear error instead of counting past it; everything acknowledged
/// stays, across a reopen. A file named with an id past the last is an
/// error naming it.
#[test]
fn the_last_segment_id_fills_and_then_refuses_writes() {
    use scaledkv::log::segment::{segment_file_name, MAX_SEGMENT_ID};
    let (base, _, _) = build(true);
    let dir = copy_dir(base.path());
    let last = dir.path().join(segment_file_name(MAX_SEGMENT_ID));
    std::fs::rename(dir.path().join("seg-00000001.log"), &last).unwrap();
    forge_segment_id(&last, MAX_SEGMENT_ID);
    assert_fills_then_refuses(dir.path(), "the log has no segment id left to roll to");

    let stray = dir.path().join(segment_file_name(MAX_SEGMENT_ID + 1));
    std::fs::copy(&last, &stray).unwrap();
    corruption_naming(dir.path(), &stray);
}

/// Index pointers keep a segment id's low 32 bits, so the segments a
/// reader can reach must span fewer than 2^32 ids: a log whose oldest
/// segment (never freed) is 2^32 - 3 ids behind its active one fills it
/// and then refuses to roll to an id whose tag would name the oldest, with
/// a clear error; everything acknowledged stays. Files further apart than
/// that are an error at open.
#[test]
fn a_log_spanning_2_pow_32_ids_refuses_to_roll() {
    use scaledkv::log::segment::segment_file_name;
    let (base, _, _) = build(true);
    let dir = copy_dir(base.path());
    // Its tag is u32::MAX - 1; the next usable id, 2^32 + 1, has tag 1.
    let newest = (1u64 << 32) - 2;
    let copy = dir.path().join(segment_file_name(newest));
    std::fs::copy(dir.path().join("seg-00000001.log"), &copy).unwrap();
    forge_segment_id(&copy, newest);
    assert_fills_then_refuses(dir.path(), "2^32 ids past its oldest readable segment, 1,");

    let beyond = dir.path().join(segment_file_name((1 << 32) + 1));
    std::fs::copy(&copy, &beyond).unwrap();
    forge_segment_id(&beyond, (1 << 32) + 1);
    let reason = corruption_naming(dir.path(), &beyond);
    assert!(reason.contains("ids past segment 1"), "{reason}");
}

/// A copy of a segment under an id far past the others (a stray file, a
/// damaged name) opens as one more segment: recovery and the segment
/// table look it up by search instead of sizing a table by the ids
/// between (4 billion slots: an allocation failure before).
#[test]
fn a_segment_far_past_the_others_is_one_more_segment() {
    use scaledkv::log::segment::segment_file_name;
    let (base, _, _) = build(true);
    let dir = copy_dir(base.path());
    let far = 4_000_000_000u64;
    let copy = dir.path().join(segment_file_name(far));
    std::fs::copy(dir.path().join("seg-00000001.log"), &copy).unwrap();
    forge_segment_id(&copy, far);
    for round in 0..2 {
        let db = Db::open(dir.path(), options()).unwrap();
        assert_exactly_first(&db, FRAMES, None);
        for i in 0..300u32 {
            db.put(format!("after-{round}-{i}").as_bytes(), &[round as u8; 900]).unwrap();
        }
        assert!(db.stats().segments >= 3, "the writer rolled past the far segment");
    }
    let db = Db::open(dir.path(), options()).unwrap();
    for round in 0..2u8 {
        for i in 0..300u32 {
            assert_eq!(db.get(format!("after-{round}-{i}").as_bytes()).unwrap(), Some(vec![round; 900]));
        }
    }
}
