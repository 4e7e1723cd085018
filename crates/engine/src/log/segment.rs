//! A value-log segment: one preallocated file, a 256-byte header, then
//! frames. Segment ids are stable for the life of the data, so index
//! pointers `(segment, offset)` never change when a segment moves or ages.
//! Ids are 64-bit; an index pointer keeps an id's low 32 bits, its *tag*
//! (`tag_of`), which names one segment because the segments alive at once
//! span fewer than 2^32 ids (`MAX_ID_SPAN`, checked at every roll).
//!
//! Header, little endian (bytes 0..40, rest of the 256 zero):
//! ```text
//! 0  [u8; 8] magic "SKVLOG\0\0"
//! 8  u32 format version
//! 12 u32 segment id, low 32 bits
//! 16 u64 segment size in bytes
//! 24 u32 segment id, high 32 bits (zero before ids outgrew 32 bits)
//! 28 u32 reserved (zero)
//! 32 u32 crc32c over bytes 0..32
//! ```

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;
use scaledkv_pmem::{Durability, NewBlocks, Region};

use crate::error::{Error, Result};
use crate::log::marks::EntryMarks;
use crate::log::record::FORMAT_VERSION;

pub const SEGMENT_HEADER_BYTES: usize = 256;
const SEGMENT_MAGIC: &[u8; 8] = b"SKVLOG\0\0";

/// A segment's id: they count up from 1 and are never reused.
pub type SegmentId = u64;

pub fn segment_file_name(id: SegmentId) -> String {
    format!("seg-{id:08}.log")
}

/// The last segment id, the last usable one below 2^62: a million
/// segments a second would take 146,000 years to reach it. A file name
/// past it is damage, which `list_segment_files` refuses (ids near
/// `u64::MAX` would overflow).
pub const MAX_SEGMENT_ID: SegmentId = (1 << 62) - 2;

/// How far the newest segment's id may be past the oldest segment still
/// readable (in the table, or kept for a snapshot): tags repeat every
/// 2^32 ids. A cache's log evicts its oldest segments as it writes, so
/// its span stays small however many ids it uses; GC moves forward the
/// live entries of segments half this far behind whatever their live
/// ratio (`gc::FAR_BEHIND_IDS`). Only a log that cannot move them (a
/// snapshot held for 2 billion segments, background work off) reaches
/// it, and then refuses writes (`Error::SegmentIdsExhausted`).
pub const MAX_ID_SPAN: u64 = u32::MAX as u64 - 1;

/// The low 32 bits of `id`: what an index pointer (`Loc::seg`) keeps.
pub fn tag_of(id: SegmentId) -> u32 {
    id as u32
}

/// Whether `id` may name a segment: its tag must be neither 0 nor
/// `u32::MAX` (`Loc::TOMBSTONE`'s and the point table's markers).
pub fn usable_id(id: SegmentId) -> bool {
    !matches!(tag_of(id), 0 | u32::MAX)
}

/// The id after `id` that may name a segment.
pub fn next_id(id: SegmentId) -> SegmentId {
    let mut next = id + 1;
    while !usable_id(next) {
        next += 1;
    }
    next
}

/// The id with tag `tag` among the 2^32 ids up to `newest`, if there is one.
pub fn id_of(tag: u32, newest: SegmentId) -> Option<SegmentId> {
    newest.checked_sub(tag_of(newest).wrapping_sub(tag) as u64)
}

/// Parses `seg-NNNNNNNN.log`.
pub fn parse_segment_file_name(name: &str) -> Option<SegmentId> {
    name.strip_prefix("seg-")?.strip_suffix(".log")?.parse().ok()
}

/// The size a valid segment header declares, if `bytes` start with one.
pub fn declared_size(bytes: &[u8]) -> Option<u64> {
    let header = bytes.get(..40)?;
    let crc_ok = scaledkv_pmem::crc::crc32c(&header[..32]) == u32::from_le_bytes(header[32..36].try_into().ok()?);
    (&header[..8] == SEGMENT_MAGIC && crc_ok).then(|| u64::from_le_bytes(header[16..24].try_into().expect("8 bytes")))
}

pub struct Segment {
    pub id: SegmentId,
    pub region: Region,
    /// Whether the file is in the SSD tier (`tier.rs`): a sealed segment
    /// moved there whole, under the same id.
    pub cold: bool,
    /// Bytes of entries the index points at; GC picks by live / written.
    /// Shared with the segment's copy in the SSD tier (`Segment::demoted`),
    /// so an overwrite that finds either copy in the table counts.
    pub live_bytes: Arc<AtomicU64>,
    /// Bytes of frames written so far (the segment's logical end).
    pub written_bytes: AtomicU64,
    /// Entries the index no longer points at (GC skips them); shared as
    /// `live_bytes` is.
    pub dead: Arc<EntryMarks>,
    /// Entries read since they were written: in cache mode, eviction copies
    /// them forward once instead of dropping them (`evict.rs`); shared as
    /// `live_bytes` is.
    pub accessed: Arc<EntryMarks>,
    /// Set when GC has freed the segment: the file is removed once the last
    /// reader or snapshot holding it lets go.
    delete_on_drop: AtomicBool,
}

impl Segment {
    /// Creates empty segment `id`. The file takes its name only once its
    /// header is whole and durable: the header is stored through the
    /// mapping, several instructions that a SIGKILL (or, in `pmem` mode, a
    /// power loss) can split, and a torn header under a segment's name is
    /// corruption that open must refuse. Under a `.tmp` name, which open
    /// deletes, a half-made file is just a file that never existed.
    /// `blocks`: how a page-cache file's blocks are readied for `sync`
    /// writes (`NewBlocks`; the writer chooses by its groups' sizes).
    pub fn create(
        dir: &Path,
        id: SegmentId,
        size_bytes: usize,
        durability: Durability,
        blocks: NewBlocks,
    ) -> Result<Segment> {
        let staging = dir.join(format!("create-{id:08}.tmp"));
        // Not prefaulted: the log writer's threads do it ahead of the writer.
        // Reserved in steps, each a point where a paced thread naps.
        let mut region =
            Region::create_with_pauses(&staging, size_bytes, durability, blocks, &mut crate::background::pause_point)?;
        // SAFETY: the region is new; nobody else can see it yet.
        unsafe { write_header(&region, id)? };
        region.rename(&dir.join(segment_file_name(id)))?;
        sync_name(dir, durability)?;
        Ok(Segment::new(id, region))
    }

    /// Whether a freed segment can become a later one: only where stores
    /// go through the mapping (tmpfs, DAX). There a fresh 64 MiB segment
    /// costs 40-60 ms of page allocation and page-table work on this
    /// machine's VM, and zeroing a mapped one 3-6 ms. A page-cache file
    /// would have to be rewritten and synced whole, as creating one costs.
    /// Never a segment of the SSD tier: the log is written in its own
    /// directory.
    pub fn recyclable(&self) -> bool {
        !self.cold && !self.region.writes_by_syscall()
    }

    /// Turns this freed segment, which nothing else references, into an
    /// empty segment `id`, keeping its file's pages and its mapping.
    ///
    /// Crash safety: the file leaves its old name first, for a `.tmp` name
    /// that open deletes, and takes the new segment's name only once it is
    /// all zeros and has the new header, durably. So a crash leaves either
    /// the freed segment (which no checkpoint references) or nothing, or
    /// the new empty segment, which is what a fresh one looks like.
    pub fn recycle(&mut self, dir: &Path, id: SegmentId, durability: Durability) -> Result<()> {
        debug_assert!(self.recyclable());
        self.region.rename(&dir.join(format!("recycle-{id:08}.tmp")))?;
        // Zeroed in steps, each a point where a paced thread naps.
        // SAFETY: the caller owns the only reference to this segment: no
        // reader can be looking at its bytes.
        let changed_end =
            unsafe { self.region.zero_with_pauses(0, self.region.len(), &mut crate::background::pause_point)? };
        self.region.persist(0, changed_end)?;
        // SAFETY: as above.
        unsafe { write_header(&self.region, id)? };
        self.region.rename(&dir.join(segment_file_name(id)))?;
        sync_name(dir, durability)?;
        self.id = id;
        self.live_bytes = Arc::default();
        self.written_bytes.store(SEGMENT_HEADER_BYTES as u64, Ordering::Relaxed);
        self.dead = Arc::default();
        self.accessed = Arc::default();
        Ok(())
    }

    pub fn open(path: &Path, id: SegmentId, durability: Durability) -> Result<Segment> {
        Self::open_in(path, id, durability, false)
    }

    /// Opens segment `id` at `path`, in the SSD tier if `cold`.
    pub fn open_in(path: &Path, id: SegmentId, durability: Durability, cold: bool) -> Result<Segment> {
        let region = Region::open(path, if cold { cold_durability(durability) } else { durability })?;
        let corrupt =
            |reason: &str| Error::Corruption { path: path.to_path_buf(), offset: 0, reason: reason.to_string() };
        let header = region.read(0, 40).map_err(|_| corrupt("file shorter than the segment header"))?;
        if &header[..8] != SEGMENT_MAGIC {
            return Err(corrupt("not a ScaledKV segment (bad magic)"));
        }
        if scaledkv_pmem::crc::crc32c(&header[..32]) != u32::from_le_bytes(header[32..36].try_into().expect("4 bytes"))
        {
            return Err(corrupt("segment header checksum mismatch"));
        }
        let version = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        if version != FORMAT_VERSION as u32 {
            return Err(Error::UnsupportedVersion {
                path: path.to_path_buf(),
                found: version,
                expected: FORMAT_VERSION as u32,
            });
        }
        let low = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
        let high = u32::from_le_bytes(header[24..28].try_into().expect("4 bytes"));
        let stored_id = (high as u64) << 32 | low as u64;
        if stored_id != id {
            return Err(corrupt(&format!("header names segment {stored_id}, file name says {id}")));
        }
        let size = u64::from_le_bytes(header[16..24].try_into().expect("8 bytes"));
        if size != region.len() as u64 {
            return Err(corrupt(&format!("header says {size} bytes, file has {}", region.len())));
        }
        let mut segment = Segment::new(id, region);
        segment.cold = cold;
        Ok(segment)
    }

    fn new(id: SegmentId, region: Region) -> Segment {
        Segment {
            id,
            region,
            cold: false,
            live_bytes: Arc::default(),
            written_bytes: AtomicU64::new(SEGMENT_HEADER_BYTES as u64),
            dead: Arc::default(),
            accessed: Arc::default(),
            delete_on_drop: AtomicBool::new(false),
        }
    }

    /// This sealed segment's copy in the SSD tier, once its file `path` is
    /// there whole and durable (`tier.rs`): the same id, counters and marks.
    pub fn demoted(&self, path: &Path, durability: Durability) -> Result<Segment> {
        let region = Region::open(path, cold_durability(durability))?;
        Ok(Segment {
            id: self.id,
            region,
            cold: true,
            live_bytes: self.live_bytes.clone(),
            written_bytes: AtomicU64::new(self.written_bytes.load(Ordering::Acquire)),
            dead: self.dead.clone(),
            accessed: self.accessed.clone(),
            delete_on_drop: AtomicBool::new(false),
        })
    }

    pub fn path(&self) -> &Path {
        self.region.path()
    }

    pub fn capacity_bytes(&self) -> usize {
        self.region.len()
    }

    pub fn mark_for_deletion(&self) {
        self.delete_on_drop.store(true, Ordering::Release);
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.delete_on_drop.load(Ordering::Acquire) {
            if let Err(e) = std::fs::remove_file(self.path()) {
                tracing::warn!(path = %self.path().display(), error = %e, "could not remove freed segment");
            }
        }
    }
}

/// How a segment in the SSD tier is mapped: it is only read (sealed), and
/// a page-cache file cannot take `pmem`'s cache-line flushes.
fn cold_durability(durability: Durability) -> Durability {
    match durability {
        Durability::Buffered => Durability::Buffered,
        Durability::Pmem | Durability::Sync => Durability::Sync,
    }
}

/// Makes a segment file's name as durable as the writes it will hold
/// (fdatasync of the file does not cover its directory entry).
pub(crate) fn sync_name(dir: &Path, durability: Durability) -> Result<()> {
    if durability == Durability::Buffered {
        return Ok(());
    }
    scaledkv_pmem::sync_dir(dir).map_err(Error::io(dir, "fsync dir"))
}

/// Writes and persists the header of segment `id` at the start of `region`.
///
/// # Safety
/// Nobody else may be reading `region`.
unsafe fn write_header(region: &Region, id: SegmentId) -> Result<()> {
    let mut header = [0u8; 40];
    header[..8].copy_from_slice(SEGMENT_MAGIC);
    header[8..12].copy_from_slice(&(FORMAT_VERSION as u32).to_le_bytes());
    header[12..16].copy_from_slice(&tag_of(id).to_le_bytes());
    header[16..24].copy_from_slice(&(region.len() as u64).to_le_bytes());
    header[24..28].copy_from_slice(&((id >> 32) as u32).to_le_bytes());
    let crc = scaledkv_pmem::crc::crc32c(&header[..32]);
    header[32..36].copy_from_slice(&crc.to_le_bytes());
    // SAFETY: exclusivity is the caller's contract.
    unsafe { region.write(0, &header)? };
    region.persist(0, header.len())?;
    Ok(())
}

/// Freed segments kept for reuse as later ones (see `Segment::recycle`),
/// at most `RECYCLE_MAX_SEGMENTS`: each holds its file's space until it is
/// reused or the database closes.
#[derive(Default)]
pub struct Recycler {
    bin: parking_lot::Mutex<Vec<Arc<Segment>>>,
    recycled: AtomicU64,
}

/// One GC pass frees up to four segments at once; the log needs one per roll.
pub const RECYCLE_MAX_SEGMENTS: usize = 4;

impl Recycler {
    /// Keeps `segment` for reuse if it can be recycled and there is room;
    /// otherwise its file is deleted once the last reader lets go.
    pub fn keep_or_delete(&self, segment: Arc<Segment>, size_bytes: usize) {
        let mut bin = self.bin.lock();
        if segment.recyclable() && segment.capacity_bytes() == size_bytes && bin.len() < RECYCLE_MAX_SEGMENTS {
            bin.push(segment);
        } else {
            segment.mark_for_deletion();
        }
    }

    /// A kept segment no reader holds any more, now owned by the caller.
    pub fn take(&self) -> Option<Segment> {
        let mut bin = self.bin.lock();
        let at = bin.iter().position(|s| Arc::strong_count(s) == 1)?;
        // Readers reach a freed segment only through clones of an Arc they
        // already hold (pins, snapshots), so a count of one stays one; were
        // it not so, the segment goes back rather than being lost.
        match Arc::try_unwrap(bin.swap_remove(at)) {
            Ok(segment) => {
                self.recycled.fetch_add(1, Ordering::Relaxed);
                Some(segment)
            }
            Err(shared) => {
                bin.push(shared);
                None
            }
        }
    }

    /// Bytes of the files kept for reuse.
    pub fn held_bytes(&self) -> u64 {
        self.bin.lock().iter().map(|s| s.capacity_bytes() as u64).sum()
    }

    /// Segments reused since open.
    pub fn recycled(&self) -> u64 {
        self.recycled.load(Ordering::Relaxed)
    }
}

impl Drop for Recycler {
    fn drop(&mut self) {
        for segment in self.bin.get_mut().drain(..) {
            segment.mark_for_deletion();
        }
    }
}

/// The set of segments readers resolve pointers through. Copy-on-write: a
/// reader loads one immutable table without locking; adding or removing a
/// segment publishes a new table.
pub struct SegmentSet {
    table: ArcSwap<Table>,
    /// Segments GC removed while snapshots were live. A snapshot can hold an
    /// old version in a segment created after it (a GC copy overwritten
    /// later), which its pinned table does not have; reads fall back here.
    retired: parking_lot::Mutex<Vec<Arc<Segment>>>,
    /// Dead-entry maps allocated by the segments in the table (bounded:
    /// see `log::marks`).
    dead_maps: AtomicUsize,
    /// Bytes written into the table's segments in the SSD tier (sealed, so
    /// a sum kept as they come and go), and how many are not in it: the
    /// memory limit reads both per write, and a tier of thousands of
    /// segments is not walked for that.
    cold_bytes: AtomicU64,
    hot_segments: AtomicUsize,
}

impl Default for SegmentSet {
    fn default() -> Self {
        SegmentSet {
            table: ArcSwap::from_pointee(Table::default()),
            retired: parking_lot::Mutex::new(Vec::new()),
            dead_maps: AtomicUsize::new(0),
            cold_bytes: AtomicU64::new(0),
            hot_segments: AtomicUsize::new(0),
        }
    }
}

pub type SegmentTable = Arc<Table>;

/// The segments by id. Ids only grow (never reused), and a table indexed
/// from 0 grew with them: a cache evicting 2 MiB segments at 400 MB/s
/// reaches id 720,000 within the hour, and every roll copied the whole
/// table (an `ArcSwap` update) and walked its empty slots. Now the newest
/// segments are slots from `base` (`slots[i]` is segment `base + i`), and
/// segments left far behind them (an SSD tier's oldest, one GC cannot
/// move, one a snapshot keeps) move to `old`, sorted by id and searched:
/// the slots span at most twice the segments they hold, plus `SLACK`.
/// Index pointers name segments by tag (`get`), resolved against the
/// newest id the table has held.
#[derive(Clone, Default)]
pub struct Table {
    base: SegmentId,
    slots: Vec<Option<Arc<Segment>>>,
    /// Segments in `slots`.
    in_slots: usize,
    /// Segments below `base`, in id order.
    old: Vec<Arc<Segment>>,
    /// The largest id inserted: every id the table holds is within
    /// `MAX_ID_SPAN` below it.
    newest: SegmentId,
}

/// Empty slots a table may hold beyond as many as its segments.
const SLACK: usize = 64;

impl Table {
    /// The segment an index pointer's tag (`Loc::seg`) names.
    pub fn get(&self, tag: u32) -> Option<&Arc<Segment>> {
        // The slots span far fewer than 2^32 ids, so within them a tag's
        // distance from the base's tag is its id's (a tag below wraps past
        // every slot): one bounds check, as a lookup by id costs. Past the
        // slots, `get_id` searches the segments left behind.
        match self.slots.get(tag.wrapping_sub(tag_of(self.base)) as usize) {
            Some(slot) => slot.as_ref(),
            None => self.get_id(id_of(tag, self.newest)?),
        }
    }

    /// Segment `id`.
    pub fn get_id(&self, id: SegmentId) -> Option<&Arc<Segment>> {
        // An id below the base wraps past every slot: one bounds check.
        match self.slots.get(id.wrapping_sub(self.base) as usize) {
            Some(slot) => slot.as_ref(),
            None if id < self.base => self.old.binary_search_by_key(&id, |s| s.id).ok().map(|at| &self.old[at]),
            None => None,
        }
    }

    /// The segments held, oldest first.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &Arc<Segment>> {
        self.old.iter().chain(self.slots.iter().flatten())
    }

    /// The largest id the table has held.
    pub fn newest(&self) -> SegmentId {
        self.newest
    }

    fn insert(&mut self, segment: Arc<Segment>) -> Option<Arc<Segment>> {
        let id = segment.id;
        self.newest = self.newest.max(id);
        if self.slots.is_empty() && self.old.last().is_none_or(|last| last.id < id) {
            self.base = id;
        }
        if id < self.base {
            return match self.old.binary_search_by_key(&id, |s| s.id) {
                Ok(at) => Some(std::mem::replace(&mut self.old[at], segment)),
                Err(at) => {
                    self.old.insert(at, segment);
                    None
                }
            };
        }
        let mut at = (id - self.base) as usize;
        if at >= self.slots.len() && at >= 2 * (self.in_slots + 1) + SLACK {
            // Far past the slots: every segment in them falls behind.
            self.old.extend(std::mem::take(&mut self.slots).into_iter().flatten());
            (self.in_slots, self.base, at) = (0, id, 0);
        }
        if self.slots.len() <= at {
            self.slots.resize(at + 1, None);
        }
        let replaced = self.slots[at].replace(segment);
        if replaced.is_none() {
            self.in_slots += 1;
        }
        self.keep_dense();
        replaced
    }

    fn remove(&mut self, id: SegmentId) -> Option<Arc<Segment>> {
        if id < self.base {
            let at = self.old.binary_search_by_key(&id, |s| s.id).ok()?;
            return Some(self.old.remove(at));
        }
        let removed = self.slots.get_mut((id - self.base) as usize)?.take();
        if removed.is_some() {
            self.in_slots -= 1;
        }
        self.keep_dense();
        while self.slots.last().is_some_and(Option::is_none) {
            self.slots.pop();
        }
        removed
    }

    /// Drops the empty slots at the front, and moves the oldest segments
    /// to `old` while the slots hold more than twice their segments.
    fn keep_dense(&mut self) {
        loop {
            let empty = self.slots.iter().take_while(|slot| slot.is_none()).count();
            self.slots.drain(..empty);
            self.base += empty as u64;
            if self.slots.len() <= 2 * self.in_slots + SLACK {
                break;
            }
            let oldest = self.slots[0].take().expect("the first slot holds a segment");
            self.in_slots -= 1;
            self.old.push(oldest);
        }
        if self.slots.is_empty() {
            self.base = self.old.last().map_or(0, |last| last.id + 1);
        }
    }

    /// Slots held, empty ones between segments included.
    #[cfg(test)]
    fn span(&self) -> usize {
        self.slots.len()
    }
}

impl SegmentSet {
    /// Runs `f` on the segment an index pointer's tag names, without
    /// cloning its Arc (the hot read path).
    pub fn with<T>(&self, tag: u32, f: impl FnOnce(&Arc<Segment>) -> T) -> Option<T> {
        self.table.load().get(tag).map(f)
    }

    /// Runs `f` on segment `id`.
    pub fn with_id<T>(&self, id: SegmentId, f: impl FnOnce(&Arc<Segment>) -> T) -> Option<T> {
        self.table.load().get_id(id).map(f)
    }

    /// The largest id the table has held (the active segment's).
    pub fn newest_id(&self) -> SegmentId {
        self.table.load().newest()
    }

    /// The id an index pointer's tag names (the segment may be gone).
    pub fn id_of(&self, tag: u32) -> Option<SegmentId> {
        id_of(tag, self.table.load().newest())
    }

    /// The oldest segment a reader can still reach (in the table, or kept
    /// for a snapshot): no segment may be `MAX_ID_SPAN` past it.
    pub fn oldest_id(&self) -> Option<SegmentId> {
        let in_table = self.table.load().iter().next().map(|s| s.id);
        let retired = self.retired.lock().iter().map(|s| s.id).min();
        in_table.into_iter().chain(retired).min()
    }

    /// The current table, kept alive by the caller (snapshots pin it).
    pub fn pin(&self) -> SegmentTable {
        self.table.load_full()
    }

    /// Adds `segment`, or puts it in place of the one with its id (a
    /// demotion to the SSD tier), which it returns.
    pub fn insert(&self, segment: Arc<Segment>) -> Option<Arc<Segment>> {
        let mut replaced = None;
        self.table.rcu(|table| {
            let mut next = (**table).clone();
            replaced = next.insert(segment.clone());
            next
        });
        self.count(&segment, true);
        if let Some(replaced) = &replaced {
            self.count(replaced, false);
        }
        replaced
    }

    /// Keeps `cold_bytes` and `hot_segments` as `segment` joins or leaves.
    fn count(&self, segment: &Segment, joins: bool) {
        if segment.cold {
            let bytes = segment.written_bytes.load(Ordering::Relaxed);
            if joins {
                self.cold_bytes.fetch_add(bytes, Ordering::Relaxed);
            } else {
                self.cold_bytes.fetch_sub(bytes, Ordering::Relaxed);
            }
        } else if joins {
            self.hot_segments.fetch_add(1, Ordering::Relaxed);
        } else {
            self.hot_segments.fetch_sub(1, Ordering::Relaxed);
        }
    }

    pub fn remove(&self, id: SegmentId) -> Option<Arc<Segment>> {
        let mut removed = None;
        self.table.rcu(|table| {
            let mut next = (**table).clone();
            removed = next.remove(id);
            next
        });
        if let Some(segment) = &removed {
            if segment.dead.allocated() {
                self.dead_maps.fetch_sub(1, Ordering::Relaxed);
            }
            self.count(segment, false);
        }
        removed
    }

    /// Records that the index no longer points at the entry at `offset`
    /// of `segment`, a segment of this set.
    pub fn mark_dead(&self, segment: &Segment, offset: u32) {
        segment.dead.mark(offset, segment.capacity_bytes(), Some(&self.dead_maps));
    }

    /// Marks every entry of `segment`, a sealed segment of this set, dead
    /// but those at `live`; see `EntryMarks::mark_all_but`. Not once GC has
    /// removed it: its map would count toward `MAX_MAPS` for good.
    pub fn mark_dead_all_but(&self, segment: &Segment, live: &[u32]) -> bool {
        self.with_id(segment.id, |_| ()).is_some()
            && segment.dead.mark_all_but(live, segment.capacity_bytes(), &self.dead_maps)
    }

    pub fn retire(&self, segment: Arc<Segment>) {
        self.retired.lock().push(segment);
    }

    /// The segment kept for snapshots that an index pointer's tag names.
    pub fn find_retired(&self, tag: u32) -> Option<Arc<Segment>> {
        // Retired segments are older than the table's newest, and within
        // `MAX_ID_SPAN` of it as every reachable segment is.
        let id = id_of(tag, self.table.load().newest())?;
        self.retired.lock().iter().find(|s| s.id == id).cloned()
    }

    /// Called when the last snapshot is released.
    pub fn clear_retired(&self) {
        self.retired.lock().clear();
    }

    /// Bytes written into the segments of one tier (the SSD tier's if
    /// `cold`), without cloning the table (eviction and the server's memory
    /// limit read it per write).
    pub fn written_bytes(&self, cold: bool) -> u64 {
        if cold {
            return self.cold_bytes.load(Ordering::Relaxed);
        }
        // The fast tier's are the newest, but for any the collector could
        // not move (damaged, or kept for a snapshot): walk from the newest
        // until all are counted.
        let mut left = self.hot_segments.load(Ordering::Relaxed);
        let table = self.table.load();
        let mut bytes = 0;
        for segment in table.iter().rev() {
            if left == 0 {
                break;
            }
            if !segment.cold {
                bytes += segment.written_bytes.load(Ordering::Relaxed);
                left -= 1;
            }
        }
        bytes
    }

    pub fn all(&self) -> Vec<Arc<Segment>> {
        self.table.load().iter().cloned().collect()
    }

    /// Makes everything written to the segments so far durable, whatever
    /// the mode (`Db::flush`, checkpoints and close in `buffered` mode).
    /// It needs no lock of the log: bytes written before the call are in
    /// the files it syncs, and what the writer adds meanwhile may go too.
    pub fn sync_files(&self) -> Result<()> {
        for segment in self.all() {
            segment.region.sync_file()?;
        }
        Ok(())
    }
}

/// Lists segment files in `dir` as (id, path), sorted by id.
pub fn list_segment_files(dir: &Path) -> Result<Vec<(SegmentId, PathBuf)>> {
    let mut found = Vec::new();
    let entries =
        std::fs::read_dir(dir).map_err(|source| Error::Io { path: dir.to_path_buf(), op: "read_dir", source })?;
    for entry in entries {
        let entry = entry.map_err(|source| Error::Io { path: dir.to_path_buf(), op: "read_dir", source })?;
        if let Some(id) = entry.file_name().to_str().and_then(parse_segment_file_name) {
            if !(1..=MAX_SEGMENT_ID).contains(&id) || !usable_id(id) {
                let reason = format!("segment id {id} is outside 1..={MAX_SEGMENT_ID} or has a reserved tag");
                return Err(Error::Corruption { path: entry.path(), offset: 0, reason });
            }
            found.push((id, entry.path()));
        }
    }
    found.sort_by_key(|(id, _)| *id);
    Ok(found)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use proptest::prelude::*;
    use scaledkv_pmem::{Durability, NewBlocks};

    use super::*;

    /// 45 segments made once (the table looks only at their ids): a run of
    /// 30 neighbours from 1 with two more within the slots' reach (100,
    /// 120), so that removals leave slots to move behind; short runs near
    /// 5,000, across 2^32 (where tags wrap: 2^32 + 1 has segment 1's) and
    /// at `MAX_SEGMENT_ID`, far past them.
    fn segments() -> &'static [Arc<Segment>] {
        static SEGMENTS: std::sync::OnceLock<(tempfile::TempDir, Vec<Arc<Segment>>)> = std::sync::OnceLock::new();
        &SEGMENTS
            .get_or_init(|| {
                let dir = tempfile::tempdir().unwrap();
                let wrap = (1u64 << 32) - 3..=(1 << 32) + 3;
                let ids = (1..=30)
                    .chain([100, 120])
                    .chain(5_000..5_004)
                    .chain(wrap.filter(|&id| usable_id(id)))
                    .chain(MAX_SEGMENT_ID - 3..=MAX_SEGMENT_ID);
                let made = ids
                    .map(|id| {
                        Arc::new(
                            Segment::create(dir.path(), id, 64 * 1024, Durability::Buffered, NewBlocks::Reserved)
                                .unwrap(),
                        )
                    })
                    .collect();
                (dir, made)
            })
            .1
    }

    /// A run of segments freed but for its first: that one moves behind
    /// the slots, which then start at the newest segments.
    #[test]
    fn a_segment_left_behind_moves_out_of_the_slots() {
        let mut table = Table::default();
        for segment in &segments()[..32] {
            table.insert(segment.clone());
        }
        assert_eq!((table.span(), table.in_slots), (120, 32));
        for id in 2..=30 {
            table.remove(id);
        }
        assert_eq!((table.span(), table.in_slots, table.old.len()), (21, 2, 1));
        assert_eq!(table.iter().map(|s| s.id).collect::<Vec<_>>(), [1, 100, 120]);
        assert!([1, 100, 120].iter().all(|&id| table.get(tag_of(id)).is_some_and(|s| s.id == id)));
    }

    proptest! {
        /// Against a set of ids, spread from 1 to past 4 billion: every
        /// lookup, by id and, while the ids held since the newest span
        /// less than 2^32, by tag; the order, and slots that never span
        /// more than twice the segments in them plus `SLACK` (before, the
        /// table grew from id 0 with every id ever used).
        #[test]
        fn the_table_holds_what_a_model_holds_and_spans_only_them(
            ops in prop::collection::vec((any::<bool>(), 0usize..45), 1..300),
        ) {
            let mut table = Table::default();
            let mut model = BTreeSet::new();
            let mut newest = 0;
            for (insert, pick) in ops {
                let segment = &segments()[pick];
                if insert {
                    newest = newest.max(segment.id);
                    let replaced = table.insert(segment.clone());
                    prop_assert_eq!(replaced.is_some(), !model.insert(segment.id));
                } else {
                    prop_assert_eq!(table.remove(segment.id).map(|s| s.id), model.take(&segment.id));
                }
                for probe in segments().iter().map(|s| s.id).chain([0, 2, 1_000_000, u32::MAX as u64]) {
                    prop_assert_eq!(table.get_id(probe).map(|s| s.id), model.contains(&probe).then_some(probe));
                }
                prop_assert_eq!(table.newest(), newest);
                if model.first().is_some_and(|&oldest| newest - oldest <= MAX_ID_SPAN) {
                    for &id in &model {
                        prop_assert_eq!(table.get(tag_of(id)).map(|s| s.id), Some(id));
                    }
                }
                prop_assert_eq!(table.iter().map(|s| s.id).collect::<Vec<_>>(), model.iter().copied().collect::<Vec<_>>());
                prop_assert!(table.span() <= 2 * table.in_slots + SLACK, "{} slots for {}", table.span(), table.in_slots);
            }
        }
    }
}
