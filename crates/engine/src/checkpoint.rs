//! Index checkpoints: the index written out sorted, so that open loads it
//! and replays only the log written after it.
//!
//! File `index-<generation>.ckpt`, little endian:
//! ```text
//! header  [u8; 8] magic "SKVCKPT\0" | u32 version | u32 reserved | u64 last seq
//! entries u16 key length | key | u32 segment | u32 offset | u32 length | u64 seq
//! trailer u64 entry count | u32 crc32c over every byte before it
//! ```
//! A checkpoint is *fuzzy*: it is taken while writers run. Replay starts at
//! the log position read before the scan began, and replay's rule (newest
//! sequence number wins) makes the result exact. Cost: 22 B + key per entry
//! on disk; loading 10M keys of 8 bytes reads 300 MB and builds the B-tree
//! in bulk.

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::index::memtable::{Index, Key, Loc, Slot};

const MAGIC: &[u8; 8] = b"SKVCKPT\0";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 24;
const TRAILER_BYTES: usize = 12;

pub fn file_name(generation: u64) -> String {
    format!("index-{generation:08}.ckpt")
}

/// Encodes into a buffer and writes it out (and checksums it) a
/// megabyte at a time: appending an entry is a copy of 42 bytes (8-byte
/// keys), where a CRC call and a `BufWriter` write per entry cost more.
struct ChunkWriter {
    file: std::fs::File,
    buf: Vec<u8>,
    crc: u32,
    written_bytes: u64,
}

const CHUNK_BYTES: usize = 1 << 20;

impl ChunkWriter {
    /// Appends `bytes` (after whatever the caller appended to `buf`).
    fn put(&mut self, bytes: &[u8]) -> std::io::Result<()> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= CHUNK_BYTES {
            self.write_out()?;
        }
        Ok(())
    }

    fn write_out(&mut self) -> std::io::Result<()> {
        self.crc = crc32c::crc32c_append(self.crc, &self.buf);
        self.written_bytes += self.buf.len() as u64;
        self.file.write_all(&self.buf)?;
        self.buf.clear();
        Ok(())
    }

    /// Writes the checksum of everything before it; returns the file and
    /// its length.
    fn finish(mut self) -> std::io::Result<(std::fs::File, u64)> {
        self.write_out()?;
        self.file.write_all(&self.crc.to_le_bytes())?;
        Ok((self.file, self.written_bytes + 4))
    }
}

/// The previous checkpoint, kept once the next one has replaced it so that
/// the one after that is written over its pages (`retire`, `write`).
const SPARE_NAME: &str = "index-spare.ckpt";

/// Keeps the replaced checkpoint `generation` as the spare that the next
/// `write` overwrites. A new file costs fresh pages: on this VM's tmpfs,
/// writing 168 MB into a new file took 70-590 ms, over an existing one
/// 10-40 ms (`dd`, 5 runs each), and a fill of 4M keys writes three or
/// four growing checkpoints. On a disk it saves the block allocation.
/// The spare costs a checkpoint's size on the medium while the database
/// is open; `remove_spare` deletes it on close, and open deletes it as a
/// stale checkpoint after a crash.
pub fn retire(dir: &Path, generation: u64) {
    let old = dir.join(file_name(generation));
    if std::fs::rename(&old, dir.join(SPARE_NAME)).is_err() {
        let _ = std::fs::remove_file(old);
    }
}

/// Deletes the spare (clean close).
pub fn remove_spare(dir: &Path) {
    let _ = std::fs::remove_file(dir.join(SPARE_NAME));
}

/// Writes the index to `dir/index-<generation>.ckpt` (fsynced) and returns
/// the number of entries and bytes written. The file is written as `.tmp` (over the
/// spare's pages if there is one) and renamed into place once durable.
pub fn write(dir: &Path, generation: u64, index: &Index, last_seq: u64) -> Result<(u64, u64)> {
    let path = dir.join(file_name(generation));
    let tmp = dir.join(format!("{}.tmp", file_name(generation)));
    // Without a spare, or if it cannot be renamed, start a new file.
    let reused = std::fs::rename(dir.join(SPARE_NAME), &tmp).is_ok();
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(!reused)
        .open(&tmp)
        .map_err(Error::io(&tmp, "create"))?;
    let mut out = ChunkWriter { file, buf: Vec::with_capacity(CHUNK_BYTES + 4096), crc: 0, written_bytes: 0 };
    let mut header = [0u8; HEADER_BYTES];
    header[..8].copy_from_slice(MAGIC);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[16..24].copy_from_slice(&last_seq.to_le_bytes());
    let mut result = out.put(&header);
    let mut count = 0u64;
    index.for_each_chunked(1024, |key, slot| {
        if result.is_err() {
            return;
        }
        let mut fixed = [0u8; 20];
        fixed[..4].copy_from_slice(&slot.loc.seg.to_le_bytes());
        fixed[4..8].copy_from_slice(&slot.loc.off.to_le_bytes());
        fixed[8..12].copy_from_slice(&slot.loc.len.to_le_bytes());
        fixed[12..].copy_from_slice(&slot.seq().to_le_bytes());
        out.buf.extend_from_slice(&(key.len() as u16).to_le_bytes());
        out.buf.extend_from_slice(key);
        result = out.put(&fixed);
        count += 1;
    });
    result.map_err(Error::io(&tmp, "write"))?;
    out.put(&count.to_le_bytes()).map_err(Error::io(&tmp, "write"))?;
    let (file, len) = out.finish().map_err(Error::io(&tmp, "write"))?;
    // A reused spare may be longer than this checkpoint: cut its tail.
    file.set_len(len).map_err(Error::io(&tmp, "truncate"))?;
    file.sync_all().map_err(Error::io(&tmp, "fsync"))?;
    std::fs::rename(&tmp, &path).map_err(Error::io(&path, "rename"))?;
    Ok((count, len))
}

/// The size of checkpoint `generation` (0 if it cannot be read; `load`
/// reports the error).
pub fn file_bytes(dir: &Path, generation: u64) -> u64 {
    std::fs::metadata(dir.join(file_name(generation))).map_or(0, |m| m.len())
}

/// About how many entries checkpoint `generation` holds, from its size.
pub fn keys_hint(dir: &Path, generation: u64) -> usize {
    (file_bytes(dir, generation) / 34) as usize
}

/// A loaded checkpoint: the index entries in key order and the sequence
/// number they cover. Recovery merges the replayed log tail into them and
/// builds the B-tree once.
pub struct Loaded {
    pub entries: Vec<(Key, Slot)>,
    pub last_seq: u64,
}

pub fn load(dir: &Path, generation: u64) -> Result<Loaded> {
    let path = dir.join(file_name(generation));
    let file = std::fs::File::open(&path).map_err(Error::io(&path, "open"))?;
    // Mapped rather than read: no copy and no buffer the size of the file
    // (190 MB for 6.3M keys), which cost a tenth of the open time.
    // SAFETY: checkpoint files are immutable once renamed into place, and
    // the database directory is locked, so nothing changes the file while
    // it is mapped; a damaged file gives wrong bytes, which decode checks.
    let len = file.metadata().map_err(Error::io(&path, "stat"))?.len();
    if len < (HEADER_BYTES + TRAILER_BYTES) as u64 {
        return decode(&[], &path); // too short to map usefully: decode reports it
    }
    let bytes = unsafe { memmap2::Mmap::map(&file) }.map_err(Error::io(&path, "mmap"))?;
    decode(&bytes, &path)
}

/// Asks for transparent huge pages under `entries`' spare capacity: the
/// vector is hundreds of MB, written once in order, and faulting it in 4 KiB
/// at a time was a large part of the open time. Only advice: nothing
/// changes if the kernel declines.
pub(crate) fn advise_huge_pages<T>(entries: &mut Vec<T>) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let spare = entries.spare_capacity_mut();
        let start = spare.as_mut_ptr() as usize;
        let end = start + std::mem::size_of_val(spare);
        let aligned = start.next_multiple_of(HUGE);
        if end > aligned + HUGE {
            let len = (end - aligned) / HUGE * HUGE;
            // SAFETY: the range lies inside memory this vector owns and has
            // not initialised; MADV_HUGEPAGE neither reads nor changes it.
            unsafe { libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
        }
    }
}

fn decode(bytes: &[u8], path: &Path) -> Result<Loaded> {
    let corrupt = |offset: usize, reason: &str| Error::Corruption {
        path: PathBuf::from(path),
        offset: offset as u64,
        reason: format!("checkpoint: {reason}"),
    };
    if bytes.len() < HEADER_BYTES + TRAILER_BYTES || &bytes[..8] != MAGIC {
        return Err(corrupt(0, "not a checkpoint file (short or bad magic)"));
    }
    let body_end = bytes.len() - 4;
    let stored_crc = u32::from_le_bytes(bytes[body_end..].try_into().expect("4 bytes"));
    if crc32c::crc32c(&bytes[..body_end]) != stored_crc {
        return Err(corrupt(body_end, "checksum mismatch"));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(Error::UnsupportedVersion { path: path.to_path_buf(), found: version, expected: VERSION });
    }
    let last_seq = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let count_at = bytes.len() - TRAILER_BYTES;
    let count = u64::from_le_bytes(bytes[count_at..count_at + 8].try_into().expect("8 bytes"));
    let mut entries: Vec<(Key, Slot)> = Vec::with_capacity(count.min(1 << 28) as usize);
    advise_huge_pages(&mut entries);
    let mut at = HEADER_BYTES;
    while at < count_at {
        let key_len = u16::from_le_bytes([bytes[at], bytes.get(at + 1).copied().unwrap_or(0)]) as usize;
        let fixed = 2 + key_len + 20;
        if at + fixed > count_at {
            return Err(corrupt(at, "entry runs past the end"));
        }
        let key = &bytes[at + 2..at + 2 + key_len];
        let rest = &bytes[at + 2 + key_len..at + fixed];
        let u32_at = |i: usize| u32::from_le_bytes(rest[i..i + 4].try_into().expect("4 bytes"));
        let loc = Loc { seg: u32_at(0), off: u32_at(4), len: u32_at(8) };
        let seq = u64::from_le_bytes(rest[12..20].try_into().expect("8 bytes"));
        if entries.last().is_some_and(|(prev, _)| crate::index::key::compare(prev, key).is_ge()) {
            return Err(corrupt(at, "keys out of order"));
        }
        entries.push((Key::from_slice(key), Slot::new(loc, seq)));
        at += fixed;
    }
    if entries.len() as u64 != count {
        return Err(corrupt(count_at, "entry count mismatch"));
    }
    Ok(Loaded { entries, last_seq })
}
