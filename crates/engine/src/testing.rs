//! Helpers for the unit tests.

use std::path::Path;

use crate::Db;

/// A copy of the directory `dir` of `db` as a crash now would leave it
/// (every write durable, no close): its files but the lock, once the log's
/// helper threads are done with them (without `background_work`, nothing
/// else changes them while the caller does not write).
pub(crate) fn crashed_copy(db: &Db, dir: &Path) -> tempfile::TempDir {
    db.inner.committer.with_log(|log| log.wait_for_helpers());
    let crashed = tempfile::tempdir().unwrap();
    for file in std::fs::read_dir(dir).unwrap() {
        let path = file.unwrap().path();
        if path.file_name().unwrap() != "LOCK" {
            std::fs::copy(&path, crashed.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    crashed
}

/// A 1000-byte value that names its key and version.
pub(crate) fn value(key: u32, version: u32) -> Vec<u8> {
    let mut value = vec![(key % 251) as u8; 1000];
    value[..4].copy_from_slice(&key.to_le_bytes());
    value[4..8].copy_from_slice(&version.to_le_bytes());
    value
}

/// Writes `value(key, version)` under `key`.
pub(crate) fn put(db: &Db, key: u32, version: u32) {
    db.put(&key.to_be_bytes(), &value(key, version)).unwrap();
}

/// Writes keys `0..keys` at version 0, reading every 20th key written so
/// far after every 50 writes (cache mode gives them second chances);
/// returns the most `bytes` said meanwhile.
pub(crate) fn write_reading_every_20th(db: &Db, keys: u32, bytes: impl Fn(&Db) -> u64) -> u64 {
    let mut most = 0;
    for key in 0..keys {
        put(db, key, 0);
        if key % 50 == 49 {
            for hot in (0..=key).step_by(20) {
                db.get(&hot.to_be_bytes()).unwrap();
            }
        }
        most = most.max(bytes(db));
    }
    most
}

/// How many of keys `0..keys` written by `write_reading_every_20th` are
/// still there, every 20th and the others, each checked to hold its value.
pub(crate) fn kept_hot_and_cold(db: &Db, keys: u32) -> (u32, u32) {
    let (mut hot, mut cold) = (0, 0);
    for key in 0..keys {
        if let Some(found) = db.get(&key.to_be_bytes()).unwrap() {
            assert_eq!(found, value(key, 0), "key {key}");
            if key % 20 == 0 {
                hot += 1;
            } else {
                cold += 1;
            }
        }
    }
    (hot, cold)
}
