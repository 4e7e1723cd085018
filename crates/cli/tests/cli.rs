//! The `scaledkv` admin tool on real data directories: a damaged record in
//! the middle of the log makes `check` fail naming it and `repair` skip it
//! with a report, after which every other key reads back byte for byte and
//! `check` passes; a damaged entry under the index checkpoint is found by
//! `check` (its key named) and its key deleted by `repair`; `dump` and
//! `stats` print what is there; a directory in use is refused.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use scaledkv::{Db, Durability, Options};

#[path = "../../engine/tests/support/framed.rs"]
mod framed;
use framed::{key, value};

const KEYS: u32 = 20;

fn options() -> Options {
    Options { durability: Durability::Sync, segment_size_bytes: 256 * 1024, ..Options::default() }
}

/// Opens `dir`, which the test closed a moment ago: another test's child
/// process may still hold a copy of its lock's descriptor between its
/// fork and its exec (a few microseconds), so `Locked` is tried again.
fn reopen(dir: &Path) -> Db {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    loop {
        match Db::open(dir, options()) {
            Err(scaledkv::Error::Locked { .. }) if std::time::Instant::now() < deadline => {
                std::thread::sleep(std::time::Duration::from_millis(5))
            }
            opened => return opened.unwrap(),
        }
    }
}

/// The database the tests damage (`framed::build`).
fn build(replay: bool) -> (tempfile::TempDir, PathBuf, Vec<(usize, usize)>) {
    framed::build(options(), KEYS, replay)
}

/// Flips a byte in the middle of frame `n`.
fn damage(segment: &Path, frames: &[(usize, usize)], n: usize) {
    let mut bytes = std::fs::read(segment).unwrap();
    let (start, end) = frames[n];
    bytes[(start + end) / 2] ^= 0x5a;
    std::fs::write(segment, bytes).unwrap();
}

fn scaledkv(args: &[&str], dir: &Path) -> Output {
    Command::new(env!("CARGO_BIN_EXE_scaledkv")).args(args).arg(dir).output().unwrap()
}

fn text(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr)
}

/// Every key but `except` holds its value exactly.
fn assert_all_but(dir: &Path, except: u32) {
    let db = reopen(dir);
    for i in 0..KEYS {
        let want = (i != except).then(|| value(i));
        assert_eq!(db.get(&key(i)).unwrap(), want, "key {i}");
    }
}

#[test]
fn a_damaged_record_in_the_log_is_refused_then_skipped_by_repair() {
    let (dir, segment, frames) = build(true);
    damage(&segment, &frames, 7);
    let checked = scaledkv(&["check"], dir.path());
    assert!(!checked.status.success());
    let said = text(&checked);
    assert!(said.contains("seg-00000001.log") && said.contains("scaledkv repair"), "{said}");

    let repaired = scaledkv(&["repair"], dir.path());
    let said = text(&repaired);
    assert!(repaired.status.success(), "{said}");
    assert!(said.contains("skipped damaged records: ") && said.contains("seg-00000001.log at offset"), "{said}");
    assert!(said.contains("1 damaged ranges skipped"), "{said}");
    let checked = scaledkv(&["check"], dir.path());
    assert!(checked.status.success(), "{}", text(&checked));
    assert!(text(&checked).contains(&format!("read {} entries", KEYS - 1)), "{}", text(&checked));
    assert_all_but(dir.path(), 7);
}

#[test]
fn a_damaged_entry_under_the_checkpoint_is_found_and_its_key_deleted() {
    let (dir, segment, frames) = build(false);
    damage(&segment, &frames, 12);
    let checked = scaledkv(&["check"], dir.path());
    let said = text(&checked);
    assert!(!checked.status.success(), "{said}");
    assert!(
        said.contains("damaged entry of key \"key-012\"") && said.contains("1 damaged entries (19 good)"),
        "{said}"
    );

    let repaired = scaledkv(&["repair"], dir.path());
    let said = text(&repaired);
    assert!(repaired.status.success(), "{said}");
    assert!(said.contains("deleting key \"key-012\"") && said.contains("1 keys deleted, 19 entries kept"), "{said}");
    assert!(scaledkv(&["check"], dir.path()).status.success());
    assert_all_but(dir.path(), 12);
}

#[test]
fn dump_and_stats_print_what_is_there() {
    let (dir, _, _) = build(false);
    {
        let db = reopen(dir.path());
        db.put(b"\xff\xff\x00own", b"server's").unwrap();
        db.put(b"odd \"key\"\n", b"\x00\x01").unwrap();
    }
    let dumped = scaledkv(&["dump", "--prefix", "key-01", "--limit", "3"], dir.path());
    assert!(dumped.status.success(), "{}", text(&dumped));
    let expected: String =
        (10..13).map(|i| format!("\"key-{i:03}\" \"{}\"\n", String::from_utf8(value(i)).unwrap())).collect();
    assert_eq!(String::from_utf8_lossy(&dumped.stdout), expected);
    let everything = String::from_utf8_lossy(&scaledkv(&["dump"], dir.path()).stdout).into_owned();
    assert_eq!(everything.lines().count(), KEYS as usize + 1, "the server's own entry left out");
    assert!(everything.ends_with("\"odd \\\"key\\\"\\n\" \"\\x00\\x01\"\n"), "{everything}");
    let all = String::from_utf8_lossy(&scaledkv(&["dump", "--all"], dir.path()).stdout).into_owned();
    assert!(all.contains("\"\\xff\\xff\\x00own\" \"server's\""), "{all}");

    let stats = text(&scaledkv(&["stats"], dir.path()));
    assert!(stats.contains("keys (engine entries): 22\n"), "{stats}");
    assert!(stats.contains("user keys (without the server's own entries): 21\n"), "{stats}");
}

#[test]
fn a_directory_in_use_or_missing_is_refused() {
    let (dir, _, _) = build(false);
    let db = reopen(dir.path());
    let refused = scaledkv(&["check"], dir.path());
    assert!(!refused.status.success());
    assert!(text(&refused).contains("in use by another process (stop the server first)"), "{}", text(&refused));
    drop(db);
    let missing = scaledkv(&["stats"], &dir.path().join("nothing"));
    assert!(!missing.status.success());
    assert!(text(&missing).contains("no database here"), "{}", text(&missing));
}
