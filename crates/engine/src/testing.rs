//! Helpers for the unit tests.

use std::path::Path;

/// A copy of database directory `dir` as a crash now would leave it (every
/// write durable, no close): its files but the lock.
pub(crate) fn crashed_copy(dir: &Path) -> tempfile::TempDir {
    let crashed = tempfile::tempdir().unwrap();
    for file in std::fs::read_dir(dir).unwrap() {
        let path = file.unwrap().path();
        if path.file_name().unwrap() != "LOCK" {
            std::fs::copy(&path, crashed.path().join(path.file_name().unwrap())).unwrap();
        }
    }
    crashed
}
