//! A small database with one log frame per key, closed cleanly: what the
//! engine's corruption tests and the admin tool's tests damage (each
//! includes this file by path).

use std::path::PathBuf;

use scaledkv::log::reader::scan;
use scaledkv::{Db, Options};

pub fn key(i: u32) -> Vec<u8> {
    format!("key-{i:03}").into_bytes()
}

pub fn value(i: u32) -> Vec<u8> {
    format!("value-{i}-").bytes().cycle().take(50 + (i as usize * 37) % 300).collect()
}

/// A database of `keys` keys opened with `options`, one frame each; with
/// `replay_only` its manifest and checkpoint are removed, so open replays
/// (and checks) the whole log. The frames' byte ranges in the first
/// segment.
pub fn build(options: Options, keys: u32, replay_only: bool) -> (tempfile::TempDir, PathBuf, Vec<(usize, usize)>) {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    {
        let db = Db::open(dir.path(), options).unwrap();
        for i in 0..keys {
            db.put(&key(i), &value(i)).unwrap();
        }
    }
    if replay_only {
        for entry in std::fs::read_dir(dir.path()).unwrap() {
            let path = entry.unwrap().path();
            let name = path.file_name().unwrap().to_str().unwrap().to_string();
            if name == "MANIFEST" || name.starts_with("index-") {
                std::fs::remove_file(path).unwrap();
            }
        }
    }
    let segment = dir.path().join("seg-00000001.log");
    let bytes = std::fs::read(&segment).unwrap();
    let mut frames = Vec::new();
    scan(&bytes, 256, |at, header, _, _| frames.push((at, at + header.frame_len as usize)));
    assert_eq!(frames.len(), keys as usize);
    (dir, segment, frames)
}
