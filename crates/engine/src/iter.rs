//! Ordered range iteration, forward or reverse.
//!
//! An iterator is a snapshot: it sees the database as of its creation. It
//! copies keys out of the index a chunk at a time (so writers are never
//! blocked for long) and reads each value from the log as it is yielded.
//! `Iterator::next` hands out owned copies; [`Iter::next_ref`] lends the key
//! and the value in place (in the mapped log), as RocksDB's raw iterator
//! does, which saves two allocations and a copy per entry.

use std::ops::{Bound, RangeBounds};

use crate::db::{pin, value_offset, Inner, PinnedValue};
use crate::error::Result;
use crate::index::memtable::{KeyChunk, Loc};
use crate::log::segment::SegmentTable;

const FIRST_CHUNK: usize = 16;
const MAX_CHUNK: usize = 512;
/// Entries ahead whose log bytes are prefetched while one is decoded: in
/// key order the values are scattered over the log, so each is a cache
/// (and TLB) miss that the prefetch overlaps with the work on earlier ones.
const PREFETCH_AHEAD: usize = 8;
/// Entries ahead whose first line alone is prefetched. Each entry sits on
/// another page, so the prefetch starts a page walk (a TLB miss, and in a
/// VM a two-dimensional one) long before the entry's lines are asked for
/// at `PREFETCH_AHEAD`; one line each leaves the line-fill buffers to the
/// near entries. A fresh chunk has all of its first entries walked at
/// once, which is most of a short scan. Measured after fillrandom +
/// overwrite on tmpfs, 3 interleaved runs: seekrandom(100) 8/256 B
/// 32-40k -> 41-49k, 16/1024 B 22-25k -> 30-32k seeks/s; readseq the
/// same (8/256 B, 5 pairs: 2.8-3.3M vs 2.9-3.5M entries/s).
const FIRST_LINE_AHEAD: usize = 64;
/// Bytes of each prefetched entry, from its start: whole entries up to
/// 4 KiB, as the checksum check reads every byte. 256 (header, key and the
/// value's start) left a 1 KiB value's other lines to miss one by one:
/// 16/1024 B with checksums verified, readseq 1.8-2.0M -> 2.6-2.8M
/// entries/s, seekrandom 21-23k -> 37-41k (tmpfs, ABBA order).
const PREFETCH_BYTES: usize = 4096;

pub struct Iter<'a> {
    inner: &'a Inner,
    seq: u64,
    /// Whether this iterator registered its own snapshot (released on drop).
    owns_snapshot: bool,
    table: SegmentTable,
    lower: Bound<Vec<u8>>,
    upper: Bound<Vec<u8>>,
    reverse: bool,
    chunk: KeyChunk,
    next_in_chunk: usize,
    chunk_size: usize,
    exhausted: bool,
    /// The value `next_ref` lent last.
    current: Lent,
}

/// Where the value `next_ref` lent last lies.
enum Lent {
    Nothing,
    /// In a segment of the pinned table, which keeps it alive.
    Table {
        seg: u32,
        range: std::ops::Range<usize>,
    },
    /// Elsewhere (a segment GC wrote after the table was pinned).
    Pinned(PinnedValue),
}

fn owned(bound: Bound<&impl AsRef<[u8]>>) -> Bound<Vec<u8>> {
    bound.map(|k| k.as_ref().to_vec())
}

fn borrowed(bound: &Bound<Vec<u8>>) -> Bound<&[u8]> {
    bound.as_ref().map(Vec::as_slice)
}

/// Makes `bound` exclude `key` and what lies beyond, reusing its buffer.
fn exclude(bound: &mut Bound<Vec<u8>>, key: &[u8]) {
    match bound {
        Bound::Excluded(held) => {
            held.clear();
            held.extend_from_slice(key);
        }
        _ => *bound = Bound::Excluded(key.to_vec()),
    }
}

impl<'a> Iter<'a> {
    pub(crate) fn new<K: AsRef<[u8]>, R: RangeBounds<K>>(
        inner: &'a Inner,
        snapshot: Option<(u64, SegmentTable)>,
        range: R,
        reverse: bool,
    ) -> Iter<'a> {
        let owns_snapshot = snapshot.is_none();
        let (seq, table) =
            snapshot.unwrap_or_else(|| (inner.index.register_snapshot(&inner.segments), inner.segments.pin()));
        let (lower, upper) = (owned(range.start_bound()), owned(range.end_bound()));
        // An empty or inverted range yields nothing (BTreeMap would panic).
        let empty = match (&lower, &upper) {
            (Bound::Included(a), Bound::Included(b)) => a > b,
            (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
            | (Bound::Excluded(a), Bound::Included(b)) => a >= b,
            _ => false,
        };
        Iter {
            inner,
            seq,
            owns_snapshot,
            table,
            lower,
            upper,
            reverse,
            chunk: KeyChunk::default(),
            next_in_chunk: 0,
            chunk_size: FIRST_CHUNK,
            exhausted: empty,
            current: Lent::Nothing,
        }
    }

    fn refill(&mut self) {
        self.chunk.clear();
        self.next_in_chunk = 0;
        let examined = self.inner.index.range_chunk(
            borrowed(&self.lower),
            borrowed(&self.upper),
            self.reverse,
            self.seq,
            self.chunk_size,
            &mut self.chunk,
        );
        self.chunk_size = (self.chunk_size * 2).min(MAX_CHUNK);
        if !examined {
            self.exhausted = true;
        } else if self.reverse {
            exclude(&mut self.upper, self.chunk.last_examined());
        } else {
            exclude(&mut self.lower, self.chunk.last_examined());
        }
    }

    /// Tells the iterator that about `entries` will be read: it copies that
    /// many keys out of the index at once (up to its largest chunk) instead
    /// of starting small and doubling, one index descent for a short scan
    /// of known length (LRANGE, ZRANGE) rather than several.
    pub fn expect(mut self, entries: usize) -> Self {
        self.chunk_size = entries.clamp(FIRST_CHUNK, MAX_CHUNK);
        self
    }
}

impl Iter<'_> {
    /// The next entry, lent rather than copied: the key and value stay
    /// valid until the next call. Values are read in place from the log.
    ///
    /// ```
    /// # let dir = tempfile::tempdir().unwrap();
    /// # let db = scaledkv::Db::open(dir.path(), scaledkv::Options::default()).unwrap();
    /// db.put(b"a", b"1").unwrap();
    /// db.put(b"b", b"22").unwrap();
    /// let mut iter = db.iter();
    /// let mut bytes = 0;
    /// while let Some(entry) = iter.next_ref() {
    ///     let (key, value) = entry.unwrap();
    ///     bytes += key.len() + value.len();
    /// }
    /// assert_eq!(bytes, 5);
    /// ```
    pub fn next_ref(&mut self) -> Option<Result<(&[u8], &[u8])>> {
        self.current = Lent::Nothing;
        loop {
            if let Some(loc) = self.chunk.loc(self.next_in_chunk) {
                let key = self.chunk.key(self.next_in_chunk);
                self.next_in_chunk += 1;
                if let Some(ahead) = self.chunk.loc(self.next_in_chunk + PREFETCH_AHEAD - 1) {
                    prefetch(&self.table, ahead, PREFETCH_BYTES);
                }
                if let Some(far) = self.chunk.loc(self.next_in_chunk + FIRST_LINE_AHEAD - 1) {
                    prefetch(&self.table, far, 1);
                }
                // Most entries lie in a segment the pinned table holds: lend
                // from it, with no reference count to take per entry.
                if let Some(segment) = self.table.get(loc.seg) {
                    match self.inner.decode_at(segment, loc, key, true) {
                        Ok(Some(entry)) => {
                            let start = value_offset(loc, &entry);
                            self.current = Lent::Table { seg: loc.seg, range: start..start + entry.value.len() };
                            break;
                        }
                        Ok(None) => continue,
                        Err(error) => return Some(Err(error)),
                    }
                }
                let value = match self.inner.read_at(key, loc, None, true, &pin) {
                    Some(value) => value,
                    // GC moved the entry since the chunk was read: look again.
                    None => self.inner.read(key, Some(self.seq), Some(&self.table), pin),
                };
                match value {
                    Ok(Some(value)) => {
                        self.current = Lent::Pinned(value);
                        break;
                    }
                    Ok(None) => continue,
                    Err(error) => return Some(Err(error)),
                }
            }
            if self.exhausted {
                return None;
            }
            self.refill();
            // The nearest first: the next call reads the first entry.
            for loc in self.chunk.locs(0).take(PREFETCH_AHEAD - 1) {
                prefetch(&self.table, loc, PREFETCH_BYTES);
            }
            for loc in self.chunk.locs(PREFETCH_AHEAD - 1).take(FIRST_LINE_AHEAD - PREFETCH_AHEAD) {
                prefetch(&self.table, loc, 1);
            }
        }
        Some(Ok(self.current().expect("an entry was just lent")))
    }

    /// The key of the entry `next_ref` read last, whether it lent the
    /// entry or returned an error for it (a corrupt entry's key, which the
    /// error does not name; None before the first).
    pub fn last_key(&self) -> Option<&[u8]> {
        (self.next_in_chunk > 0).then(|| self.chunk.key(self.next_in_chunk - 1))
    }

    /// The entry `next_ref` lent last, again (None before the first):
    /// lets a caller that looked at the key in a loop take the value after
    /// it.
    pub fn current(&self) -> Option<(&[u8], &[u8])> {
        let value = match &self.current {
            Lent::Table { seg, range } => {
                let segment = self.table.get(*seg).expect("a lent entry's segment is pinned");
                &segment.region.as_slice()[range.clone()]
            }
            Lent::Pinned(value) => &value[..],
            Lent::Nothing => return None,
        };
        Some((self.chunk.key(self.next_in_chunk - 1), value))
    }
}

impl Iterator for Iter<'_> {
    type Item = Result<(Vec<u8>, Vec<u8>)>;

    fn next(&mut self) -> Option<Self::Item> {
        Some(self.next_ref()?.map(|(key, value)| (key.to_vec(), value.to_vec())))
    }
}

impl Drop for Iter<'_> {
    fn drop(&mut self) {
        if self.owns_snapshot {
            self.inner.release_snapshot(self.seq);
        }
    }
}

/// Asks the CPU to start loading the first `max_bytes` of the entry at
/// `loc` into its caches. A hint only: a segment missing from the pinned
/// table is simply not prefetched.
fn prefetch(table: &SegmentTable, loc: Loc, max_bytes: usize) {
    let Some(segment) = table.get(loc.seg) else { return };
    let Ok(bytes) = segment.region.read(loc.off as usize, (loc.len as usize).min(max_bytes)) else { return };
    prefetch_bytes(bytes);
}

/// Asks the CPU to start loading every cache line of `bytes`.
pub(crate) fn prefetch_bytes(bytes: &[u8]) {
    for line in bytes.chunks(64) {
        prefetch_address(line.as_ptr());
    }
}

/// Asks the CPU to start loading the cache line where `value` begins.
pub(crate) fn prefetch_line<T>(value: &T) {
    prefetch_address((value as *const T).cast());
}

fn prefetch_address(address: *const u8) {
    // SAFETY: PREFETCHT0 is baseline SSE, never faults, and only hints the
    // cache; the address is that of a live reference anyway.
    #[cfg(target_arch = "x86_64")]
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(address.cast())
    };
    #[cfg(not(target_arch = "x86_64"))]
    let _ = address;
}

#[cfg(test)]
mod tests {
    use crate::{Db, Options};

    /// `current` gives the entry lent last again, and nothing once the
    /// range is done, across chunks and past an expired entry.
    #[test]
    fn current_is_the_entry_lent_last() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options::default()).unwrap();
        for key in 0..100u32 {
            let value = key.to_le_bytes();
            if key == 50 {
                let mut batch = crate::WriteBatch::new();
                batch.put_with_expiry(&key.to_be_bytes(), &value, 1);
                db.write(batch).unwrap();
            } else {
                db.put(&key.to_be_bytes(), &value).unwrap();
            }
        }
        let mut iter = db.iter();
        assert!(iter.current().is_none());
        let mut seen = 0;
        while let Some(entry) = iter.next_ref() {
            let (key, value) = entry.unwrap();
            let (key, value) = (key.to_vec(), value.to_vec());
            assert_eq!(iter.current(), Some((&key[..], &value[..])));
            assert_ne!(key, 50u32.to_be_bytes(), "expired");
            seen += 1;
        }
        assert_eq!(seen, 99);
        assert!(iter.current().is_none());
    }

    /// An iterator lends values from the segments it pinned, and from the
    /// segments GC writes after that (where later chunks' entries moved).
    #[test]
    fn a_scan_reads_entries_gc_moved_after_it_began() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options { background_work: false, segment_size_bytes: 64 * 1024, ..Options::default() };
        let db = Db::open(dir.path(), options).unwrap();
        let value = |key: u32, round: u8| vec![round ^ key as u8; 1000];
        for key in 0..200u32 {
            db.put(&key.to_be_bytes(), &value(key, 0)).unwrap();
        }
        // Even keys rewritten: the first segments are half dead, so GC
        // moves the odd keys' entries into segments written after now.
        for key in (0..200u32).step_by(2) {
            db.put(&key.to_be_bytes(), &value(key, 1)).unwrap();
        }
        let mut iter = db.iter();
        let (first, _) = iter.next_ref().unwrap().unwrap();
        assert_eq!(first, 0u32.to_be_bytes());
        let copied_before = db.stats().gc_bytes_written;
        while db.collect_garbage().unwrap() > 0 {}
        assert!(db.stats().gc_bytes_written > copied_before, "{:?}", db.stats());
        let mut seen = 1;
        while let Some(entry) = iter.next_ref() {
            let (key, got) = entry.unwrap();
            let key = u32::from_be_bytes(key.try_into().unwrap());
            assert_eq!(key, seen);
            assert_eq!(got, value(key, (key % 2 == 0) as u8), "key {key}");
            seen += 1;
        }
        assert_eq!(seen, 200);
    }
}
