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
//!
//! A *delta* (`index-<generation>.delta`) holds the log between two
//! checkpoints' replay positions, collapsed to one record per key as replay
//! folds it (`recovery::collapse_range`), so it costs what was written
//! since, not the whole index:
//! ```text
//! header  [u8; 8] magic "SKVDELTA" | u32 version | u32 reserved | u64 last seq
//! entries u16 key length | key | u32 segment | u32 offset | u32 length | u64 seq | u8 flags
//! trailer u64 entry count | u32 crc32c over every byte before it
//! ```
//! flags: 1 = a GC copy (it only moves the version of its sequence number).
//! A deletion has the tombstone location. The manifest names a full
//! checkpoint and how many deltas follow it (generations base + 1 ...);
//! open folds the deltas and the log after the last one into the full
//! checkpoint in one merge (`recovery::finish`).

use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::index::memtable::{Index, Key, Loc, Slot};
use crate::manifest::Manifest;

const MAGIC: &[u8; 8] = b"SKVCKPT\0";
const DELTA_MAGIC: &[u8; 8] = b"SKVDELTA";
const VERSION: u32 = 1;
const HEADER_BYTES: usize = 24;
const TRAILER_BYTES: usize = 12;
const FLAG_RELOCATED: u8 = 1;

pub fn file_name(generation: u64) -> String {
    format!("index-{generation:08}.ckpt")
}

pub fn delta_file_name(generation: u64) -> String {
    format!("index-{generation:08}.delta")
}

/// The files of a chain: full checkpoint `base`, then its `deltas`
/// (generations base + 1 ...) in order.
pub fn chain_file_names(base: u64, deltas: u32) -> Vec<String> {
    let deltas = (1..=deltas as u64).map(|i| delta_file_name(base + i));
    std::iter::once(file_name(base)).chain(deltas).collect()
}

/// The files of the chain `manifest` names.
pub fn manifest_file_names(manifest: &Manifest) -> Vec<String> {
    chain_file_names(manifest.checkpoint_generation, manifest.delta_count)
}

/// One key's records in a delta, folded: the winning write or deletion,
/// or the newest GC copy (see `recovery::fold`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeltaEntry {
    pub key: Key,
    /// `Loc::TOMBSTONE` for a deletion.
    pub slot: Slot,
    pub relocated: bool,
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
        self.crc = scaledkv_pmem::crc::crc32c_append(self.crc, &self.buf);
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

/// Keeps the replaced full checkpoint `base` as the spare that the next
/// `write` overwrites. A new file costs fresh pages: on this VM's tmpfs,
/// writing 168 MB into a new file took 70-590 ms, over an existing one
/// 10-40 ms (`dd`, 5 runs each), and a fill of 4M keys writes three or
/// four growing checkpoints. On a disk it saves the block allocation.
/// The spare costs a checkpoint's size on the medium while the database
/// is open; `remove_spare` deletes it on close, and open deletes it as a
/// stale checkpoint after a crash. The `deltas` after it are deleted.
pub fn retire(dir: &Path, base: u64, deltas: u32) {
    let names = chain_file_names(base, deltas);
    let old = dir.join(&names[0]);
    if std::fs::rename(&old, dir.join(SPARE_NAME)).is_err() {
        let _ = std::fs::remove_file(old);
    }
    for delta in &names[1..] {
        let _ = std::fs::remove_file(dir.join(delta));
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
    let name = file_name(generation);
    let tmp = dir.join(format!("{name}.tmp"));
    // Without a spare, or if it cannot be renamed, start a new file.
    let reused = std::fs::rename(dir.join(SPARE_NAME), &tmp).is_ok();
    write_file(dir, &name, MAGIC, last_seq, reused, |out, count| {
        let mut result = Ok(());
        index.for_each_chunked(1024, |key, slot| {
            if result.is_ok() {
                result = put_entry(out, key, *slot, None);
                *count += 1;
            }
        });
        result
    })
}

/// Writes `entries` (in key order) as delta `generation`; returns the
/// number of entries and bytes written.
pub fn write_delta(dir: &Path, generation: u64, entries: &[DeltaEntry], last_seq: u64) -> Result<(u64, u64)> {
    write_file(dir, &delta_file_name(generation), DELTA_MAGIC, last_seq, false, |out, count| {
        for entry in entries {
            put_entry(out, &entry.key, entry.slot, Some(if entry.relocated { FLAG_RELOCATED } else { 0 }))?;
            *count += 1;
        }
        Ok(())
    })
}

/// Appends one entry: key, location, sequence number and, in deltas, flags.
fn put_entry(out: &mut ChunkWriter, key: &[u8], slot: Slot, flags: Option<u8>) -> std::io::Result<()> {
    let mut fixed = [0u8; 21];
    fixed[..4].copy_from_slice(&slot.loc.seg.to_le_bytes());
    fixed[4..8].copy_from_slice(&slot.loc.off.to_le_bytes());
    fixed[8..12].copy_from_slice(&slot.loc.len.to_le_bytes());
    fixed[12..20].copy_from_slice(&slot.seq().to_le_bytes());
    out.buf.extend_from_slice(&(key.len() as u16).to_le_bytes());
    out.buf.extend_from_slice(key);
    match flags {
        Some(flags) => {
            fixed[20] = flags;
            out.put(&fixed)
        }
        None => out.put(&fixed[..20]),
    }
}

/// Writes `dir/name` through `.tmp` (already there if `reused`): header,
/// the entries `body` appends (counting them), trailer; fsyncs it and
/// renames it into place. Returns the entry count and file length.
fn write_file(
    dir: &Path,
    name: &str,
    magic: &[u8; 8],
    last_seq: u64,
    reused: bool,
    body: impl FnOnce(&mut ChunkWriter, &mut u64) -> std::io::Result<()>,
) -> Result<(u64, u64)> {
    let path = dir.join(name);
    let tmp = dir.join(format!("{name}.tmp"));
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(!reused)
        .open(&tmp)
        .map_err(Error::io(&tmp, "create"))?;
    let mut out = ChunkWriter { file, buf: Vec::with_capacity(CHUNK_BYTES + 4096), crc: 0, written_bytes: 0 };
    let mut header = [0u8; HEADER_BYTES];
    header[..8].copy_from_slice(magic);
    header[8..12].copy_from_slice(&VERSION.to_le_bytes());
    header[16..24].copy_from_slice(&last_seq.to_le_bytes());
    let mut count = 0u64;
    out.put(&header)
        .and_then(|()| body(&mut out, &mut count))
        .and_then(|()| out.put(&count.to_le_bytes()))
        .map_err(Error::io(&tmp, "write"))?;
    let (file, len) = out.finish().map_err(Error::io(&tmp, "write"))?;
    // A reused spare may be longer than this checkpoint: cut its tail.
    file.set_len(len).map_err(Error::io(&tmp, "truncate"))?;
    file.sync_all().map_err(Error::io(&tmp, "fsync"))?;
    std::fs::rename(&tmp, &path).map_err(Error::io(&path, "rename"))?;
    Ok((count, len))
}

/// The size of `dir/name` (0 if it cannot be read; `load` reports the
/// error).
fn file_bytes(dir: &Path, name: &str) -> u64 {
    std::fs::metadata(dir.join(name)).map_or(0, |m| m.len())
}

/// About how many entries checkpoint `generation` holds, from its size.
pub fn keys_hint(dir: &Path, generation: u64) -> usize {
    (file_bytes(dir, &file_name(generation)) / 34) as usize
}

/// A loaded checkpoint: the index entries in key order and the sequence
/// number they cover. Recovery merges the replayed log tail into them and
/// builds the B-tree once.
pub struct Loaded {
    pub entries: Vec<(Key, Slot)>,
    /// The chain's deltas, oldest first, still to be merged into
    /// `entries` (`recovery::finish`).
    pub deltas: Vec<MappedDelta>,
    pub last_seq: u64,
}

/// The bytes of the chain `manifest` names (0 for files that cannot be
/// read; `load` reports them): its full checkpoint's, and its deltas'.
pub fn chain_bytes(dir: &Path, manifest: &Manifest) -> (u64, u64) {
    let names = manifest_file_names(manifest);
    (file_bytes(dir, &names[0]), names[1..].iter().map(|name| file_bytes(dir, name)).sum())
}

/// Loads the chain `manifest` names: the full checkpoint and its deltas.
/// Recovery folds the deltas into the full checkpoint in the pass that
/// merges the log tail: applied one by one, each pass a new vector of
/// every entry, three deltas over 10M keys made an open ~0.5 s slower.
pub fn load(dir: &Path, manifest: &Manifest) -> Result<Loaded> {
    let names = manifest_file_names(manifest);
    let base = dir.join(&names[0]);
    let mut loaded = decode(map_file(&base)?.as_deref().unwrap_or_default(), &base)?;
    for name in &names[1..] {
        let path = dir.join(name);
        let bytes = map_file(&path)?;
        loaded.last_seq = loaded.last_seq.max(check_delta(bytes.as_deref().unwrap_or_default(), &path)?);
        loaded.deltas.push(MappedDelta { bytes });
    }
    Ok(loaded)
}

/// A delta checked whole (checksum, version, key order, count) and kept
/// mapped: open reads its entries from the mapping as it merges them
/// (`entries`), so a delta costs no memory of its own (decoded into a
/// vector, three deltas of 2M keys took 290 MB of fresh pages).
pub struct MappedDelta {
    bytes: Option<memmap2::Mmap>,
}

impl MappedDelta {
    /// The entries, in key order.
    pub fn entries(&self) -> DeltaEntries<'_> {
        let bytes = self.bytes.as_deref().unwrap_or_default();
        let end = bytes.len().saturating_sub(TRAILER_BYTES);
        DeltaEntries { bytes, at: HEADER_BYTES, end, remaining: count_hint(bytes, 23) }
    }
}

/// The entries of a checked delta. Decoding cannot fail on checked bytes;
/// were the file to change under the mapping, the iteration ends early
/// rather than panic.
pub struct DeltaEntries<'a> {
    bytes: &'a [u8],
    at: usize,
    end: usize,
    /// Entries not yet returned, from the trailer (for `size_hint`).
    remaining: usize,
}

impl Iterator for DeltaEntries<'_> {
    type Item = DeltaEntry;

    fn next(&mut self) -> Option<DeltaEntry> {
        let (key, slot, flags, len) = parse_entry(self.bytes.get(self.at..self.end)?, 1)?;
        self.at += len;
        self.remaining = self.remaining.saturating_sub(1);
        Some(DeltaEntry { key: Key::from_slice(key), slot, relocated: flags & FLAG_RELOCATED != 0 })
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, None)
    }
}

/// Maps `path` (`None` if it is too short to hold a header and trailer:
/// decoding the empty slice reports it).
fn map_file(path: &Path) -> Result<Option<memmap2::Mmap>> {
    let file = std::fs::File::open(path).map_err(Error::io(path, "open"))?;
    // Mapped rather than read: no copy and no buffer the size of the file
    // (190 MB for 6.3M keys), which cost a tenth of the open time.
    // SAFETY: checkpoint files are immutable once renamed into place, and
    // the database directory is locked, so nothing changes the file while
    // it is mapped; a damaged file gives wrong bytes, which decode checks.
    let len = file.metadata().map_err(Error::io(path, "stat"))?.len();
    if len < (HEADER_BYTES + TRAILER_BYTES) as u64 {
        return Ok(None);
    }
    unsafe { memmap2::Mmap::map(&file) }.map(Some).map_err(Error::io(path, "mmap"))
}

/// Asks for transparent huge pages under `entries`' spare capacity: the
/// vector is hundreds of MB, written once in order, and faulting it in 4 KiB
/// at a time was a large part of the open time. Only advice: nothing
/// changes if the kernel declines.
pub(crate) fn advise_huge_pages<T>(entries: &mut Vec<T>) {
    advise_huge_pages_in(entries.spare_capacity_mut());
}

/// Asks for transparent huge pages under the whole 2 MiB pages inside
/// `memory`. Only advice: nothing changes if the kernel declines.
pub(crate) fn advise_huge_pages_in<T>(memory: &mut [T]) {
    #[cfg(target_os = "linux")]
    {
        const HUGE: usize = 2 << 20;
        let start = memory.as_mut_ptr() as usize;
        let end = start + std::mem::size_of_val(memory);
        let aligned = start.next_multiple_of(HUGE);
        if end > aligned + HUGE {
            let len = (end - aligned) / HUGE * HUGE;
            // SAFETY: the range lies inside memory the caller owns;
            // MADV_HUGEPAGE neither reads nor changes it.
            unsafe { libc::madvise(aligned as *mut libc::c_void, len, libc::MADV_HUGEPAGE) };
        }
    }
}

/// The entry at the start of `bytes` (with `flag_bytes` = 1, a delta's):
/// its key, slot, flags and length; `None` if it runs past the end.
fn parse_entry(bytes: &[u8], flag_bytes: usize) -> Option<(&[u8], Slot, u8, usize)> {
    let key_len = u16::from_le_bytes([*bytes.first()?, *bytes.get(1)?]) as usize;
    let len = 2 + key_len + 20 + flag_bytes;
    let entry = bytes.get(..len)?;
    let (key, fixed) = entry[2..].split_at(key_len);
    let u32_at = |i: usize| u32::from_le_bytes(fixed[i..i + 4].try_into().expect("4 bytes"));
    let loc = Loc { seg: u32_at(0), off: u32_at(4), len: u32_at(8) };
    let seq = u64::from_le_bytes(fixed[12..20].try_into().expect("8 bytes"));
    let flags = fixed.get(20).copied().unwrap_or(0);
    Some((key, Slot::new(loc, seq), flags, len))
}

/// Checks `bytes` as a file of `magic` (length, magic, checksum, version)
/// and walks its entries: `on_entry(key, slot, flags)` for each (`flags`
/// only with `flag_bytes` = 1). Returns the header's last sequence number.
fn decode_entries<'a>(
    bytes: &'a [u8],
    path: &Path,
    magic: &[u8; 8],
    flag_bytes: usize,
    mut on_entry: impl FnMut(&'a [u8], Slot, u8),
) -> Result<u64> {
    let corrupt = |offset: usize, reason: &str| Error::Corruption {
        path: PathBuf::from(path),
        offset: offset as u64,
        reason: format!("checkpoint: {reason}"),
    };
    if bytes.len() < HEADER_BYTES + TRAILER_BYTES || &bytes[..8] != magic {
        return Err(corrupt(0, "not a checkpoint file (short or bad magic)"));
    }
    let body_end = bytes.len() - 4;
    let stored_crc = u32::from_le_bytes(bytes[body_end..].try_into().expect("4 bytes"));
    if scaledkv_pmem::crc::crc32c(&bytes[..body_end]) != stored_crc {
        return Err(corrupt(body_end, "checksum mismatch"));
    }
    let version = u32::from_le_bytes(bytes[8..12].try_into().expect("4 bytes"));
    if version != VERSION {
        return Err(Error::UnsupportedVersion { path: path.to_path_buf(), found: version, expected: VERSION });
    }
    let last_seq = u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes"));
    let count_at = bytes.len() - TRAILER_BYTES;
    let count = u64::from_le_bytes(bytes[count_at..count_at + 8].try_into().expect("8 bytes"));
    let mut at = HEADER_BYTES;
    let mut seen = 0u64;
    let mut previous: Option<&[u8]> = None;
    while at < count_at {
        let Some((key, slot, flags, len)) = parse_entry(&bytes[at..count_at], flag_bytes) else {
            return Err(corrupt(at, "entry runs past the end"));
        };
        if previous.is_some_and(|prev| crate::index::key::compare(prev, key).is_ge()) {
            return Err(corrupt(at, "keys out of order"));
        }
        if flags & !FLAG_RELOCATED != 0 {
            return Err(corrupt(at, "unknown entry flags"));
        }
        on_entry(key, slot, flags);
        previous = Some(key);
        seen += 1;
        at += len;
    }
    if seen != count {
        return Err(corrupt(count_at, "entry count mismatch"));
    }
    Ok(last_seq)
}

/// The trailer's entry count, bounded by what `bytes` can hold at
/// `min_entry_bytes` each (the trailer is checked once the entries are).
fn count_hint(bytes: &[u8], min_entry_bytes: usize) -> usize {
    let Some(count_at) = bytes.len().checked_sub(TRAILER_BYTES).filter(|&at| at >= HEADER_BYTES) else { return 0 };
    let count = u64::from_le_bytes(bytes[count_at..count_at + 8].try_into().expect("8 bytes"));
    (count as usize).min((count_at - HEADER_BYTES) / min_entry_bytes)
}

fn decode(bytes: &[u8], path: &Path) -> Result<Loaded> {
    let mut entries: Vec<(Key, Slot)> = Vec::with_capacity(count_hint(bytes, 22));
    advise_huge_pages(&mut entries);
    let last_seq = decode_entries(bytes, path, MAGIC, 0, |key, slot, _| entries.push((Key::from_slice(key), slot)))?;
    Ok(Loaded { entries, deltas: Vec::new(), last_seq })
}

/// Checks a delta's bytes whole; returns its last sequence number.
fn check_delta(bytes: &[u8], path: &Path) -> Result<u64> {
    decode_entries(bytes, path, DELTA_MAGIC, 1, |_, _, _| {})
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::BTreeMap;

    fn slot(off: u32, seq: u64) -> Slot {
        Slot::new(Loc { seg: 1, off, len: 10 }, seq)
    }

    /// A full checkpoint of keys "a" and "c" and one delta that deletes
    /// "a", adds "b" and holds a GC copy of a version of "c" that is gone.
    fn chain(dir: &Path) -> Manifest {
        let map: BTreeMap<Key, Slot> =
            [(Key::from_slice(b"a"), slot(256, 1)), (Key::from_slice(b"c"), slot(512, 2))].into_iter().collect();
        write(dir, 1, &Index::new(map, 2, 0, None, 0), 2).unwrap();
        let delta = [
            DeltaEntry { key: Key::from_slice(b"a"), slot: Slot::new(Loc::TOMBSTONE, 3), relocated: false },
            DeltaEntry { key: Key::from_slice(b"b"), slot: slot(1024, 4), relocated: false },
            DeltaEntry { key: Key::from_slice(b"c"), slot: slot(2048, 1), relocated: true },
        ];
        assert_eq!(write_delta(dir, 2, &delta, 4).unwrap().0, 3);
        Manifest { checkpoint_generation: 1, delta_count: 1, replay_segment: 1, replay_offset: 4096 }
    }

    #[test]
    fn a_chain_loads_with_its_delta_to_apply() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = chain(dir.path());
        let loaded = load(dir.path(), &manifest).unwrap();
        assert_eq!(loaded.last_seq, 4);
        assert_eq!((loaded.entries.len(), loaded.deltas.len(), loaded.deltas[0].entries().count()), (2, 1, 3));
        let entries = crate::recovery::apply_delta(loaded.entries, loaded.deltas[0].entries().collect());
        let keys: Vec<(&[u8], u32)> = entries.iter().map(|(k, s)| (&k[..], s.loc.off)).collect();
        assert_eq!(keys, [(&b"b"[..], 1024), (&b"c"[..], 512)]);
        assert_eq!(manifest_file_names(&manifest), ["index-00000001.ckpt", "index-00000002.delta"]);
    }

    #[test]
    fn a_damaged_truncated_or_missing_delta_is_an_error_naming_it() {
        let dir = tempfile::tempdir().unwrap();
        let manifest = chain(dir.path());
        let path = dir.path().join(delta_file_name(2));
        let good = std::fs::read(&path).unwrap();
        let damages: [fn(&mut Vec<u8>); 5] = [
            |b| b[0] ^= 1,
            |b| b[HEADER_BYTES + 3] ^= 0x10,
            |b| b.truncate(b.len() - 5),
            |b| b.truncate(10),
            |b| {
                let last = b.len() - 1;
                b[last] ^= 0x80
            },
        ];
        for (n, damage) in damages.iter().enumerate() {
            let mut bytes = good.clone();
            damage(&mut bytes);
            std::fs::write(&path, &bytes).unwrap();
            match load(dir.path(), &manifest) {
                Err(Error::Corruption { path: named, .. }) => assert_eq!(named, path, "damage {n}"),
                other => panic!("damage {n}: {:?}", other.map(|l| l.entries.len())),
            }
        }
        std::fs::remove_file(&path).unwrap();
        assert!(matches!(load(dir.path(), &manifest), Err(Error::Io { path: named, .. }) if named == path));
    }

    proptest::proptest! {
        /// Any bytes after a valid header decode to an error or to entries,
        /// never a panic.
        #[test]
        fn garbage_deltas_never_panic(body in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let mut bytes = DELTA_MAGIC.to_vec();
            bytes.extend_from_slice(&VERSION.to_le_bytes());
            bytes.extend_from_slice(&[0; 12]);
            bytes.extend_from_slice(&body);
            let crc = scaledkv_pmem::crc::crc32c(&bytes);
            bytes.extend_from_slice(&crc.to_le_bytes());
            if check_delta(&bytes, Path::new("d")).is_ok() {
                // What was checked iterates to exactly its entries.
                let end = bytes.len() - TRAILER_BYTES;
                let mapped = DeltaEntries { bytes: &bytes, at: HEADER_BYTES, end, remaining: 0 };
                let count = u64::from_le_bytes(bytes[end..end + 8].try_into().unwrap());
                proptest::prop_assert_eq!(mapped.count() as u64, count);
            }
        }
    }
}
