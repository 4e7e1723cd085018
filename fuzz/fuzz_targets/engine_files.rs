//! Damages the files of a small database and opens it: open and every read
//! may fail, but nothing panics, nothing hangs, and whatever a read
//! returns is a value that was written for that key.
//!
//! The input's first byte picks the database (closed cleanly, or copied
//! while open with checkpoint deltas and a tail to replay), whether open
//! repairs, and whether the damaged files get their checksums recomputed
//! (`fix`): without it most damage stops at a checksum, with it the
//! decoders behind each checksum see forged, well-checksummed garbage
//! (then a read may return forged values, so only the no-panic rule
//! holds). The rest is edits: file, kind (overwrite, xor, truncate,
//! append, renumber: the file under another id), offset or id, bytes.
#![no_main]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use scaledkv::{Db, Durability, Options};

mod files;
use files::{fix_checksums, Template};

fn options(repair: bool) -> Options {
    Options {
        durability: Durability::Buffered,
        segment_size_bytes: 64 * 1024,
        background_work: false,
        deferred_index_updates: 0,
        repair,
        ..Options::default()
    }
}

fn templates() -> &'static [Template; 2] {
    static TEMPLATES: OnceLock<[Template; 2]> = OnceLock::new();
    TEMPLATES.get_or_init(|| {
        let templates = [Template::closed(), Template::live()];
        for (name, template) in ["closed", "live"].iter().zip(&templates) {
            let names: Vec<String> = template.files.iter().map(|(n, b)| format!("{n} ({} B)", b.len())).collect();
            eprintln!("engine_files: the {name} database: {}", names.join(", "));
        }
        templates
    })
}

/// `name` with its number (seg-N.log, index-N.ckpt, index-N.delta)
/// replaced by `number`.
fn renumbered(name: &str, number: u64) -> String {
    let digits: Vec<usize> = name.char_indices().filter(|(_, c)| c.is_ascii_digit()).map(|(i, _)| i).collect();
    match (digits.first(), digits.last()) {
        (Some(&first), Some(&last)) => format!("{}{number:08}{}", &name[..first], &name[last + 1..]),
        _ => name.to_string(),
    }
}

/// A directory of its own per process, emptied before each input.
fn scratch() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let base = if Path::new("/dev/shm").is_dir() { PathBuf::from("/dev/shm") } else { std::env::temp_dir() };
        // Those of fuzzers killed mid-input (a crash, an out-of-memory).
        for entry in std::fs::read_dir(&base).into_iter().flatten().flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            let pid = name.strip_prefix("scaledkv-fuzz-files-").and_then(|pid| pid.parse::<u32>().ok());
            if pid.is_some_and(|pid| !Path::new(&format!("/proc/{pid}")).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        base.join(format!("scaledkv-fuzz-files-{}", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut edits)) = data.split_first() else { return };
    let template = &templates()[(mode & 1) as usize];
    let (repair, fix) = (mode & 2 != 0, mode & 4 != 0);
    let mut files: Vec<(String, Vec<u8>)> = template.files.clone();
    while edits.len() >= 7 {
        let (head, rest) = edits.split_at(7);
        let len = (head[6] as usize).min(rest.len());
        let (bytes, rest) = rest.split_at(len);
        edits = rest;
        let (name, file) = &mut files[head[0] as usize % template.files.len()];
        let number = u32::from_le_bytes([head[2], head[3], head[4], head[5]]);
        let at = if file.is_empty() { 0 } else { number as usize % file.len() };
        match head[1] % 5 {
            0 => {
                let end = (at + bytes.len()).min(file.len());
                file[at..end].copy_from_slice(&bytes[..end - at]);
            }
            1 => file[at..].iter_mut().zip(bytes).for_each(|(b, x)| *b ^= x),
            2 => file.truncate(at),
            3 => file.extend_from_slice(bytes),
            // A file under another number (a stray copy, a damaged name),
            // up to 2^37: segment ids past 32 bits, whose tags wrap.
            _ => *name = renumbered(name, (head[1] as u64 >> 3) << 32 | number as u64),
        }
    }
    files.sort_by(|a, b| a.0.cmp(&b.0));
    files.dedup_by(|a, b| a.0 == b.0);
    if fix {
        for (name, bytes) in &mut files {
            fix_checksums(name, bytes);
        }
    }
    let dir = scratch();
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).unwrap();
    for (name, bytes) in &files {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    // To look at an input's files outside the fuzzer.
    if let Some(keep) = std::env::var_os("ENGINE_FILES_KEEP") {
        let keep = Path::new(&keep);
        std::fs::create_dir_all(keep).unwrap();
        for (name, bytes) in &files {
            std::fs::write(keep.join(name), bytes).unwrap();
        }
    }
    if let Ok(db) = Db::open(dir, options(repair)) {
        let check = |key: &[u8], value: &[u8]| {
            if !fix {
                let written = template.written.get(key).is_some_and(|values| values.contains(value));
                assert!(written, "a value never written for key {:?}", String::from_utf8_lossy(key));
            }
        };
        for key in template.written.keys() {
            if let Ok(Some(value)) = db.get(key) {
                check(key, &value);
            }
        }
        for (key, value) in db.iter().take(10_000).flatten() {
            check(&key, &value);
        }
        for (key, value) in db.range_rev::<&[u8], _>(..).take(100).flatten() {
            check(&key, &value);
        }
        let _ = db.stats();
    }
    let _ = std::fs::remove_dir_all(dir);
});
