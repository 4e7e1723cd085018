//! The databases `engine_files` damages, and how it recomputes the
//! checksums of damaged files (see docs/format.md).

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::{Duration, Instant};

use scaledkv::log::record::{
    align_up, entry_len, ENTRY_HEADER_BYTES, FRAME_ALIGN_BYTES, FRAME_HEADER_BYTES, FRAME_MAGIC,
};
use scaledkv::log::segment::SEGMENT_HEADER_BYTES;
use scaledkv::{Db, Durability, Options, WriteBatch};
use scaledkv_pmem::crc::crc32c;

/// Every value written for each key.
pub type Written = BTreeMap<Vec<u8>, BTreeSet<Vec<u8>>>;

pub struct Template {
    /// (file name, bytes), sorted by name; no LOCK file.
    pub files: Vec<(String, Vec<u8>)>,
    pub written: Written,
}

fn options(background_work: bool) -> Options {
    Options {
        durability: Durability::Buffered,
        segment_size_bytes: 64 * 1024,
        background_work,
        checkpoint_interval_entries: 100,
        ..Options::default()
    }
}

impl Template {
    /// Closed cleanly: a checkpoint and the log it covers.
    pub fn closed() -> Template {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), options(false)).unwrap();
        let written = fill(&db, 0..4, 200);
        drop(db);
        Template { files: read_files(dir.path()).unwrap(), written }
    }

    /// Copied while open (what a crash leaves): a checkpoint with deltas
    /// written by the background thread, GC copies, and a tail of the log
    /// past the last of them. Its files depend on the background threads'
    /// timing, so the first one built is kept beside the fuzzer's binary
    /// and reused: an input found by one run means the same in the next.
    pub fn live() -> Template {
        let kept = std::env::current_exe().unwrap().with_file_name("engine_files-live-template");
        if let Some(template) = Template::load(&kept) {
            return template;
        }
        let template = Template::build_live();
        template.save(&kept);
        template
    }

    fn save(&self, dir: &Path) {
        let _ = std::fs::remove_dir_all(dir);
        let files = dir.join("files");
        std::fs::create_dir_all(&files).unwrap();
        for (name, bytes) in &self.files {
            std::fs::write(files.join(name), bytes).unwrap();
        }
        let mut written = Vec::new();
        for (key, values) in &self.written {
            for value in values {
                for field in [key, value] {
                    written.extend_from_slice(&(field.len() as u32).to_le_bytes());
                    written.extend_from_slice(field);
                }
            }
        }
        std::fs::write(dir.join("written"), written).unwrap();
    }

    fn load(dir: &Path) -> Option<Template> {
        let files = read_files(&dir.join("files")).filter(|files| !files.is_empty())?;
        let bytes = std::fs::read(dir.join("written")).ok()?;
        let mut fields = Vec::new();
        let mut rest = &bytes[..];
        while rest.len() >= 4 {
            let len = u32::from_le_bytes(rest[..4].try_into().unwrap()) as usize;
            fields.push(rest.get(4..4 + len)?.to_vec());
            rest = &rest[4 + len..];
        }
        let mut written = Written::new();
        for pair in fields.chunks_exact(2) {
            written.entry(pair[0].clone()).or_default().insert(pair[1].clone());
        }
        Some(Template { files, written })
    }

    fn build_live() -> Template {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), options(true)).unwrap();
        let mut written = Written::new();
        let deadline = Instant::now() + Duration::from_secs(10);
        merge(&mut written, fill(&db, 0..3, 200));
        // Steps under a quarter of the keys: deltas, not full checkpoints.
        for step in 3.. {
            merge(&mut written, fill(&db, step..step + 1, 60));
            if step == 6 {
                db.collect_garbage().unwrap();
            }
            std::thread::sleep(Duration::from_millis(30));
            let deltas = std::fs::read_dir(dir.path()).unwrap().flatten().filter(|e| is_delta(&e.file_name())).count();
            if (deltas >= 2 && step >= 8) || step >= 100 || Instant::now() > deadline {
                break;
            }
        }
        db.put(b"tail", b"written after the last checkpoint").unwrap();
        merge(
            &mut written,
            [(b"tail".to_vec(), BTreeSet::from([b"written after the last checkpoint".to_vec()]))].into(),
        );
        // The background threads may change files while they are read:
        // keep the first copy that opens and reads whole, as a crash's would.
        let files = (0..100)
            .find_map(|_| read_files(dir.path()).filter(|files| opens_whole(files)))
            .expect("a consistent copy of the live database");
        drop(db);
        Template { files, written }
    }
}

/// Whether a copy opens and every entry reads.
fn opens_whole(files: &[(String, Vec<u8>)]) -> bool {
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let opened = Db::open(dir.path(), options(false));
    opened.is_ok_and(|db| db.iter().all(|entry| entry.is_ok()))
}

fn is_delta(name: &std::ffi::OsStr) -> bool {
    name.to_string_lossy().ends_with(".delta")
}

fn merge(into: &mut Written, from: Written) {
    for (key, values) in from {
        into.entry(key).or_default().extend(values);
    }
}

/// Rounds of `puts` puts (values of 16-250 bytes) over 800 keys,
/// overwrites, deletions, a TTL and an atomic batch: 200 puts are about
/// 30 KiB, so 64 KiB segments fill and roll.
fn fill(db: &Db, rounds: std::ops::Range<u32>, puts: u32) -> Written {
    let mut written = Written::new();
    let mut put = |key: Vec<u8>, value: Vec<u8>| {
        written.entry(key).or_default().insert(value);
    };
    for round in rounds {
        for i in 0..puts {
            let key = format!("key-{:04}", (i * 7 + round * 13) % 800).into_bytes();
            let value = format!("{round}-{i}-").bytes().cycle().take(16 + (i as usize * 37) % 234).collect::<Vec<u8>>();
            if i % 50 == 7 {
                db.put_with_ttl(&key, &value, Duration::from_secs(3600)).unwrap();
            } else {
                db.put(&key, &value).unwrap();
            }
            put(key, value);
            if i % 9 == 0 {
                db.delete(format!("key-{:04}", (i * 11) % 800).as_bytes()).unwrap();
            }
        }
        let mut batch = WriteBatch::new();
        for j in 0..5u32 {
            let key = format!("batch-{round}-{j}").into_bytes();
            let value = vec![b'a' + j as u8; 100 + j as usize];
            batch.put(&key, &value);
            put(key, value);
        }
        batch.delete(b"key-0003");
        db.write(batch).unwrap();
    }
    written
}

/// The files of `dir`, or None if one went away while they were read.
fn read_files(dir: &Path) -> Option<Vec<(String, Vec<u8>)>> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).ok()?.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        if name != "LOCK" {
            files.push((name, std::fs::read(entry.path()).ok()?));
        }
    }
    files.sort();
    Some(files)
}

/// Recomputes the checksums a damaged file carries, by its name: the
/// MANIFEST's, a checkpoint's or delta's trailer, a segment's header and
/// every frame header and entry that can still be found in it.
pub fn fix_checksums(name: &str, bytes: &mut [u8]) {
    if name == "MANIFEST" {
        if bytes.len() >= 40 {
            let crc = crc32c(&bytes[..36]);
            bytes[36..40].copy_from_slice(&crc.to_le_bytes());
        }
    } else if name.ends_with(".ckpt") || name.ends_with(".delta") {
        if bytes.len() >= 4 {
            let end = bytes.len() - 4;
            let crc = crc32c(&bytes[..end]);
            bytes[end..].copy_from_slice(&crc.to_le_bytes());
        }
    } else if name.ends_with(".log") {
        fix_segment(bytes);
    }
}

fn u32_at(bytes: &[u8], at: usize) -> usize {
    u32::from_le_bytes(bytes[at..at + 4].try_into().unwrap()) as usize
}

fn fix_segment(bytes: &mut [u8]) {
    if bytes.len() < 36 {
        return;
    }
    let crc = crc32c(&bytes[..32]);
    bytes[32..36].copy_from_slice(&crc.to_le_bytes());
    let mut at = SEGMENT_HEADER_BYTES;
    while at + FRAME_HEADER_BYTES <= bytes.len() {
        if bytes[at + 4..at + 6] != FRAME_MAGIC.to_le_bytes() {
            at += FRAME_ALIGN_BYTES;
            continue;
        }
        let crc = crc32c(&bytes[at + 4..at + FRAME_HEADER_BYTES]);
        bytes[at..at + 4].copy_from_slice(&crc.to_le_bytes());
        let frame_len = u32_at(bytes, at + 8);
        let count = u32_at(bytes, at + 12);
        let frame_end = at.saturating_add(frame_len).min(bytes.len());
        let mut entry = at + FRAME_HEADER_BYTES;
        for _ in 0..count {
            if entry + ENTRY_HEADER_BYTES > frame_end {
                break;
            }
            let key_len = u16::from_le_bytes([bytes[entry + 6], bytes[entry + 7]]) as usize;
            let value_len = u32_at(bytes, entry + 8);
            let len = entry_len(key_len, value_len, bytes[entry + 5] & 1 != 0);
            if entry + len > frame_end {
                break;
            }
            let crc = crc32c(&bytes[entry + 4..entry + len]);
            bytes[entry..entry + 4].copy_from_slice(&crc.to_le_bytes());
            entry += len;
        }
        at += if frame_len >= FRAME_HEADER_BYTES { align_up(frame_len, FRAME_ALIGN_BYTES) } else { FRAME_ALIGN_BYTES };
    }
}
