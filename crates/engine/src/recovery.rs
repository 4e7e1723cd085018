//! Rebuilds the index at open: checkpoint (if any), then the log tail.
//! The procedure is written out step by step in docs/recovery.md.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::checkpoint::{DeltaEntry, Loaded, MappedDelta};
use crate::error::{Error, Result};
use crate::index::key::padded;
use crate::index::memtable::{Key, Loc, Slot};
use crate::log::reader::{find_group_start, scan, scan_until, ScanEnd};
use crate::log::record::{decode_entry, EntryKind, EntryView, FLAG_RELOCATED};
use crate::log::segment::{id_of, list_segment_files, tag_of, Segment, SegmentId, MAX_ID_SPAN, SEGMENT_HEADER_BYTES};
use crate::options::Options;

/// What recovery found and did; kept by the open database.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// Keys loaded from the index checkpoint (0 without one).
    pub checkpoint_keys: u64,
    pub replayed_frames: u64,
    pub replayed_bytes: u64,
    /// A torn or corrupt tail that was cut off (never acknowledged data, or
    /// a damaged last record indistinguishable from it).
    pub truncated: Option<Truncation>,
    /// The newest segment's file found shorter than its header says (a
    /// copy or a file system that lost its end) and given back its length:
    /// the lost part reads as zeros, the end of the log. Replay then
    /// usually cuts a torn tail there too (`truncated`).
    pub restored: Option<Truncation>,
    /// Corrupt ranges skipped in repair mode.
    pub skipped: Vec<Truncation>,
    /// Segment files removed: never initialised, or wholly after a torn tail.
    pub removed_segments: Vec<PathBuf>,
    pub elapsed: Duration,
}

#[derive(Debug, Clone)]
pub struct Truncation {
    pub path: PathBuf,
    pub offset: u64,
    pub reason: String,
}

/// Where replay starts, from a checkpoint.
pub struct Start {
    pub segment: SegmentId,
    pub offset: usize,
    /// About how many keys the checkpoint holds (it loads concurrently
    /// with the replay): sizes the tail's collapses.
    pub checkpoint_keys_hint: usize,
}

/// The log tail read after the checkpoint, ready to merge with it.
pub struct Replayed {
    segments: Vec<Arc<Segment>>,
    tail: Tail,
    end: usize,
    last_seq: u64,
    /// The checkpoint's replay segment, when it does not exist.
    missing_start: Option<SegmentId>,
    /// Segments wholly after a torn tail: deleted only once the open
    /// succeeds (an open that fails on the checkpoint changes nothing).
    after_tail: Vec<Arc<Segment>>,
    report: RecoveryReport,
    started: Instant,
}

pub struct Recovered {
    pub map: BTreeMap<Key, Slot>,
    pub segments: Vec<Arc<Segment>>,
    /// The newest segment; writing continues in it at `end`.
    pub end: usize,
    pub last_seq: u64,
    /// Heap bytes of the index's keys longer than 16 bytes.
    pub spilled_key_bytes: u64,
    pub report: RecoveryReport,
}

/// Replayed entries, appended in log order as compact records and
/// collapsed to one per key (sort, keep the winner) whenever they outgrow
/// twice the last collapse plus a slack the size of the checkpoint, so
/// memory stays proportional to the index.
///
/// Why not insert into the B-tree as frames are read: with millions of
/// frames after the checkpoint, one random B-tree insert per frame (~2 µs
/// with cache misses) made a reopen after SIGKILL take 6.8 s for 2.67M
/// frames. Records are 48 bytes and carry the key's first 16 bytes, so the
/// sort compares integers and keys up to 16 bytes never need the log again;
/// longer keys are read back from the mapped segment on a prefix tie.
struct Tail {
    records: Vec<TailRecord>,
    collapsed_len: usize,
    slack: usize,
}

#[derive(Clone, Copy)]
struct TailRecord {
    /// The key's first 16 bytes, zero-padded, as a big-endian integer:
    /// ordering by (prefix, length) is byte order for keys up to 16 bytes.
    prefix: u128,
    seq: u64,
    /// Where the entry is (`seg` a segment's tag, as in `Loc`); a deletion
    /// keeps its own location here (for its key and its place in log
    /// order) and `deleted` set.
    seg: u32,
    off: u32,
    len: u32,
    key_len: u16,
    deleted: bool,
    /// A GC copy: it moves the version `seq` of its key, if that version is
    /// still the key's newest, and can never bring a key back (see `fold`).
    relocated: bool,
}

/// The key's first 16 bytes, zero-padded, as a big-endian integer.
fn prefix_of(key: &[u8]) -> u128 {
    (padded(key) as u128) << 64 | padded(key.get(8..).unwrap_or_default()) as u128
}

/// The tag of the first of `segments` (in id order): a tag less it is the
/// id less the first's (ids alive at once span less than 2^32), so tags
/// keep log order across the point where they wrap.
fn tag_base(segments: &[Arc<Segment>]) -> u32 {
    segments.first().map_or(0, |s| tag_of(s.id))
}

impl TailRecord {
    fn key<'a>(&self, segments: &'a [Arc<Segment>]) -> &'a [u8] {
        let base = tag_base(segments);
        let index = segments
            .binary_search_by_key(&self.seg.wrapping_sub(base), |s| tag_of(s.id).wrapping_sub(base))
            .expect("replayed from this segment");
        let bytes = &segments[index].region.as_slice()[self.off as usize..];
        decode_entry(bytes, false).expect("decoded once during replay").key
    }

    fn slot(&self) -> Slot {
        let loc = if self.deleted { Loc::TOMBSTONE } else { Loc { seg: self.seg, off: self.off, len: self.len } };
        Slot::new(loc, self.seq)
    }

    /// Log order: segment ids grow (tags from `base`, see `tag_base`), and
    /// offsets within a segment.
    fn position(&self, base: u32) -> (u32, u32) {
        (self.seg.wrapping_sub(base), self.off)
    }

    /// Byte order of the keys, reading the log only for long keys that
    /// share their first 16 bytes.
    fn cmp_key(&self, other: &TailRecord, segments: &[Arc<Segment>]) -> std::cmp::Ordering {
        self.prefix.cmp(&other.prefix).then_with(|| {
            if self.key_len <= 16 && other.key_len <= 16 {
                self.key_len.cmp(&other.key_len)
            } else {
                self.key(segments).cmp(other.key(segments))
            }
        })
    }

    fn cmp_with(&self, key: &[u8], segments: &[Arc<Segment>]) -> std::cmp::Ordering {
        self.prefix.cmp(&prefix_of(key)).then_with(|| {
            if self.key_len <= 16 && key.len() <= 16 {
                (self.key_len as usize).cmp(&key.len())
            } else {
                self.key(segments).cmp(key)
            }
        })
    }

    /// The record as a delta checkpoint holds it.
    fn to_delta(self, segments: &[Arc<Segment>]) -> DeltaEntry {
        DeltaEntry { key: self.owned_key(segments), slot: self.slot(), relocated: self.relocated }
    }

    fn owned_key(&self, segments: &[Arc<Segment>]) -> Key {
        if self.key_len <= 16 {
            Key::from_slice(&self.prefix.to_be_bytes()[..self.key_len as usize])
        } else {
            Key::from_slice(self.key(segments))
        }
    }
}

/// The newest sequence number wins; on a tie the later copy (a GC
/// relocation keeps the sequence number of what it copied). Callers pass
/// `candidate` later in log order than `kept`.
fn candidate_wins(kept_seq: u64, candidate_seq: u64) -> bool {
    candidate_seq >= kept_seq
}

/// Folds `candidate`, later in log order, into `kept`, the same key's
/// records before it.
///
/// A relocation only moves a version that is still current. GC checks
/// that an entry is live, then commits its copy; a delete can commit in
/// between, and a checkpoint after that delete. Replay then meets the copy
/// with no version of the key before it, and applying it like a write
/// brought the deleted key back. So a relocation applies only over a
/// version of its own sequence number; with none before it in the tail it
/// stays a relocation, for the checkpoint's entry to decide (`merge`).
/// A write is always newer than any version copied before it, so a
/// collapsed key needs one record: the winning write, or the newest copy.
fn fold(kept: &mut TailRecord, candidate: &TailRecord) {
    match folded(kept.seq, kept.deleted, kept.relocated, candidate.seq, candidate.relocated) {
        Folded::Kept => {}
        Folded::Moved => (kept.seg, kept.off, kept.len) = (candidate.seg, candidate.off, candidate.len),
        Folded::Replaced => *kept = *candidate,
    }
}

/// What folding a later record of a key into the kept one does.
enum Folded {
    Kept,
    /// A GC copy moved the kept version: its location changes.
    Moved,
    Replaced,
}

fn folded(kept_seq: u64, kept_deleted: bool, kept_relocated: bool, seq: u64, relocated: bool) -> Folded {
    if relocated && !kept_relocated {
        if copy_moves(kept_seq, kept_deleted, seq) {
            Folded::Moved
        } else {
            Folded::Kept
        }
    } else if candidate_wins(kept_seq, seq) {
        Folded::Replaced
    } else {
        Folded::Kept
    }
}

/// Whether a GC copy of version `copy_seq` moves the version kept: only
/// that same version, never a deletion (see `fold`).
fn copy_moves(kept_seq: u64, kept_deleted: bool, copy_seq: u64) -> bool {
    copy_seq == kept_seq && !kept_deleted
}

impl Tail {
    fn new(checkpoint_len: usize) -> Tail {
        Tail { records: Vec::new(), collapsed_len: 0, slack: checkpoint_len.max(1 << 20) }
    }

    fn push(&mut self, segment_id: SegmentId, entry_off: usize, entry: &EntryView<'_>, seq: u64, relocated: bool) {
        self.records.push(TailRecord {
            prefix: prefix_of(entry.key),
            seq,
            seg: tag_of(segment_id),
            off: entry_off as u32,
            len: entry.len as u32,
            key_len: entry.key.len() as u16,
            deleted: entry.kind == EntryKind::Delete,
            relocated,
        });
    }

    fn wants_collapse(&self) -> bool {
        self.records.len() >= 2 * self.collapsed_len + self.slack
    }

    /// One record per key, in key order; equal keys are sorted by log
    /// position, so the winner rule sees them oldest first. `parallel`: at
    /// open, on all cores (with millions of frames to replay this sort was
    /// a fifth of the open time); a live database's checkpoint thread
    /// leaves the other cores to the writers.
    fn collapse(&mut self, segments: &[Arc<Segment>], parallel: bool) {
        use rayon::slice::ParallelSliceMut;
        let base = tag_base(segments);
        let order = |a: &TailRecord, b: &TailRecord| {
            a.cmp_key(b, segments).then_with(|| a.position(base).cmp(&b.position(base)))
        };
        if parallel {
            self.records.par_sort_unstable_by(order);
        } else {
            self.records.sort_unstable_by(order);
        }
        self.records.dedup_by(|candidate, kept| {
            let same = candidate.cmp_key(kept, segments).is_eq();
            if same {
                fold(kept, candidate);
            }
            same
        });
        self.collapsed_len = self.records.len();
    }
}

/// A key's record from the log after a checkpoint, as `MergeLater` folds
/// it into the entry before it: a replayed record or a delta's entry.
trait Later {
    /// Its key's order against `key`.
    fn cmp_key(&self, key: &[u8]) -> std::cmp::Ordering;
    fn seq(&self) -> u64;
    fn relocated(&self) -> bool;
    /// Its key and slot (`Loc::TOMBSTONE` for a deletion).
    fn into_entry(self) -> (Key, Slot);
}

/// A replayed record with the segments its key can be read back from.
struct InLog<'a>(TailRecord, &'a [Arc<Segment>]);

impl Later for InLog<'_> {
    fn cmp_key(&self, key: &[u8]) -> std::cmp::Ordering {
        self.0.cmp_with(key, self.1)
    }
    fn seq(&self) -> u64 {
        self.0.seq
    }
    fn relocated(&self) -> bool {
        self.0.relocated
    }
    fn into_entry(self) -> (Key, Slot) {
        (self.0.owned_key(self.1), self.0.slot())
    }
}

impl Later for DeltaEntry {
    fn cmp_key(&self, key: &[u8]) -> std::cmp::Ordering {
        crate::index::key::compare(&self.key, key)
    }
    fn seq(&self) -> u64 {
        self.slot.seq()
    }
    fn relocated(&self) -> bool {
        self.relocated
    }
    fn into_entry(self) -> (Key, Slot) {
        (self.key, self.slot)
    }
}

/// Merges the checkpoint's entries, its deltas (folded per key) and the
/// replayed tail, later ones winning ties, and drops deletions: the final
/// index, in key order, built in one pass.
fn merge<I: Iterator<Item = DeltaEntry>>(
    checkpoint: Vec<(Key, Slot)>,
    deltas: Vec<I>,
    mut tail: Tail,
    segments: &[Arc<Segment>],
) -> Vec<(Key, Slot)> {
    tail.collapse(segments, true);
    let records = std::mem::take(&mut tail.records);
    if deltas.is_empty() && records.is_empty() {
        let mut entries = checkpoint;
        entries.retain(|(_, slot)| !slot.loc.is_tombstone());
        return entries;
    }
    let delta_len: usize = deltas.iter().map(|delta| delta.size_hint().0).sum();
    let mut merged = Vec::with_capacity(checkpoint.len() + delta_len + records.len());
    crate::checkpoint::advise_huge_pages(&mut merged);
    let records = records.into_iter().map(|record| InLog(record, segments));
    if deltas.is_empty() {
        merged.extend(MergeLater::new(checkpoint.into_iter(), records, true));
    } else {
        // Deletions stay until the tail is folded in: a replayed record
        // older than a deletion must not bring the key back.
        let with_delta = MergeLater::new(checkpoint.into_iter(), CombinedDeltas::new(deltas), false);
        merged.extend(MergeLater::new(with_delta, records, true));
    }
    merged
}

/// Applies a delta checkpoint to the entries of the checkpoint before it.
#[cfg(test)]
pub(crate) fn apply_delta(entries: Vec<(Key, Slot)>, delta: Vec<DeltaEntry>) -> Vec<(Key, Slot)> {
    MergeLater::new(entries.into_iter(), delta.into_iter(), true).collect()
}

/// `older` (entries in key order) with `newer` (one record per key, in
/// key order) folded in, in key order; deletions dropped if
/// `drop_deletions`.
struct MergeLater<O: Iterator, N: Iterator> {
    older: std::iter::Peekable<O>,
    newer: std::iter::Peekable<N>,
    drop_deletions: bool,
}

impl<O: Iterator<Item = (Key, Slot)>, R: Later, N: Iterator<Item = R>> MergeLater<O, N> {
    fn new(older: O, newer: N, drop_deletions: bool) -> Self {
        MergeLater { older: older.peekable(), newer: newer.peekable(), drop_deletions }
    }
}

impl<O: Iterator<Item = (Key, Slot)>, R: Later, N: Iterator<Item = R>> Iterator for MergeLater<O, N> {
    type Item = (Key, Slot);

    fn next(&mut self) -> Option<(Key, Slot)> {
        loop {
            let order = match (self.older.peek(), self.newer.peek()) {
                (Some((key, _)), Some(record)) => record.cmp_key(key).reverse(),
                (Some(_), None) => std::cmp::Ordering::Less,
                (None, Some(_)) => std::cmp::Ordering::Greater,
                (None, None) => return None,
            };
            let entry = match order {
                std::cmp::Ordering::Less => self.older.next().expect("peeked"),
                std::cmp::Ordering::Greater => {
                    let record = self.newer.next().expect("peeked");
                    if record.relocated() {
                        continue; // a copy of a version that is gone
                    }
                    record.into_entry()
                }
                std::cmp::Ordering::Equal => {
                    let (key, slot) = self.older.next().expect("peeked");
                    let record = self.newer.next().expect("peeked");
                    // An entry before a checkpoint's position is never a
                    // GC copy of its own.
                    match folded(slot.seq(), slot.loc.is_tombstone(), false, record.seq(), record.relocated()) {
                        Folded::Kept => (key, slot),
                        Folded::Moved | Folded::Replaced => (key, record.into_entry().1),
                    }
                }
            };
            if !(self.drop_deletions && entry.1.loc.is_tombstone()) {
                return Some(entry);
            }
        }
    }
}

/// The deltas of a chain (oldest first, each in key order) folded into one
/// record per key, in key order, lazily: merged into the full checkpoint in
/// the same pass as the log tail, without a vector of their own.
struct CombinedDeltas<I: Iterator> {
    deltas: Vec<std::iter::Peekable<I>>,
}

impl<I: Iterator<Item = DeltaEntry>> CombinedDeltas<I> {
    fn new(deltas: impl IntoIterator<Item = I>) -> Self {
        CombinedDeltas { deltas: deltas.into_iter().map(Iterator::peekable).collect() }
    }
}

impl<I: Iterator<Item = DeltaEntry>> Iterator for CombinedDeltas<I> {
    type Item = DeltaEntry;

    fn next(&mut self) -> Option<DeltaEntry> {
        // A chain holds at most a few deltas: a scan of their heads.
        let mut smallest: Option<&Key> = None;
        for delta in &mut self.deltas {
            if let Some(head) = delta.peek() {
                if smallest.is_none_or(|key| crate::index::key::compare(&head.key, key).is_lt()) {
                    smallest = Some(&head.key);
                }
            }
        }
        let key = smallest?.clone();
        let mut kept: Option<DeltaEntry> = None;
        for delta in &mut self.deltas {
            let Some(later) = delta.next_if(|head| head.key == key) else { continue };
            kept = Some(match kept {
                None => later,
                Some(mut kept) => {
                    let kept_deleted = kept.slot.loc.is_tombstone();
                    match folded(kept.slot.seq(), kept_deleted, kept.relocated, later.slot.seq(), later.relocated) {
                        Folded::Kept => {}
                        Folded::Moved => kept.slot = Slot::new(later.slot.loc, kept.slot.seq()),
                        Folded::Replaced => kept = later,
                    }
                    kept
                }
            });
        }
        kept
    }
}

/// The log from `from` to `to` (segment id, offset) of a live database,
/// collapsed to one record per key as replay folds it: a delta
/// checkpoint's entries. `segments` (in id order) must hold every segment
/// in between; those before `to`'s are whole (sealed), and every frame
/// before `to` is complete. A frame that fails to decode is an error.
pub(crate) fn collapse_range(
    segments: &[Arc<Segment>],
    from: (SegmentId, usize),
    to: (SegmentId, usize),
) -> Result<Vec<DeltaEntry>> {
    let mut tail = Tail::new(0);
    for id in from.0..=to.0 {
        let Ok(index) = segments.binary_search_by_key(&id, |s| s.id) else {
            return Err(Error::Corruption {
                path: crate::log::segment::segment_file_name(id).into(),
                offset: 0,
                reason: "a segment between two checkpoints is missing".into(),
            });
        };
        let segment = &segments[index];
        let start = if id == from.0 { from.1 } else { SEGMENT_HEADER_BYTES };
        let stop = if id == to.0 { to.1 } else { usize::MAX };
        let outcome = scan_until(segment.region.as_slice(), start, stop, |frame_at, header, entry_at, entry| {
            tail.push(segment.id, frame_at + entry_at, &entry, header.seq, header.flags & FLAG_RELOCATED != 0);
        });
        if let ScanEnd::Bad { offset, error } = outcome {
            return Err(Error::Corruption {
                path: segment.path().to_path_buf(),
                offset: offset as u64,
                reason: format!("{error} (while writing a delta checkpoint)"),
            });
        }
        if tail.wants_collapse() {
            tail.collapse(segments, false);
        }
    }
    tail.collapse(segments, false);
    Ok(tail.records.into_iter().map(|record| record.to_delta(segments)).collect())
}

fn open_segments(dir: &Path, options: &Options, report: &mut RecoveryReport) -> Result<Vec<Arc<Segment>>> {
    let mut segments = Vec::new();
    let mut files: BTreeMap<SegmentId, (PathBuf, bool)> =
        list_segment_files(dir)?.into_iter().map(|(id, path)| (id, (path, false))).collect();
    let last_id = files.last_key_value().map(|(id, _)| *id);
    if let Some(tier) = &options.ssd_tier {
        for (id, path) in list_segment_files(&tier.dir)? {
            // Demoted, and the original not yet removed (`tier.rs`): the
            // copy was whole and durable before it took its name.
            if let Some((original, false)) = files.insert(id, (path, true)) {
                std::fs::remove_file(&original).map_err(Error::io(&original, "remove"))?;
                report.removed_segments.push(original);
            }
        }
    }
    // Index pointers name segments by their ids' low 32 bits: two files
    // 2^32 ids apart would be one segment to them. The writer never lets
    // the ids get that far apart (`MAX_ID_SPAN`): damage, or files mixed
    // from two databases.
    if let (Some((&oldest, _)), Some((&newest, (path, _)))) = (files.first_key_value(), files.last_key_value()) {
        if newest - oldest > MAX_ID_SPAN {
            return Err(Error::Corruption {
                path: path.clone(),
                offset: 0,
                reason: format!("segment {newest} is more than {MAX_ID_SPAN} ids past segment {oldest}"),
            });
        }
    }
    for (id, (path, cold)) in files {
        if Some(id) == last_id && !cold {
            // The largest size it can have been created with: the configured
            // one, or that of a segment before it (opened by now, in id
            // order; the option changed).
            let sizes = segments.iter().map(|segment: &Arc<Segment>| segment.capacity_bytes() as u64);
            let largest = sizes.fold(options.segment_size_bytes as u64, u64::max);
            restore_truncated_length(&path, largest, report)?;
        }
        match Segment::open_in(&path, id, options.durability, cold) {
            Ok(segment) => segments.push(Arc::new(segment)),
            Err(error) => {
                // Before segments were created under a `.tmp` name, a crash
                // between creating the file and persisting its header left
                // zeros under the segment's name: it never held data.
                let file = std::fs::File::open(&path).map_err(Error::io(&path, "open"))?;
                let mut head = Vec::with_capacity(SEGMENT_HEADER_BYTES);
                file.take(SEGMENT_HEADER_BYTES as u64).read_to_end(&mut head).map_err(Error::io(&path, "read"))?;
                if head.iter().all(|b| *b == 0) {
                    std::fs::remove_file(&path).map_err(Error::io(&path, "remove"))?;
                    report.removed_segments.push(path);
                } else {
                    return Err(error);
                }
            }
        }
    }
    Ok(segments)
}

/// The newest segment cut short (a copy or a file system that lost its
/// tail) is a torn tail: give it back its length (the lost part reads as
/// zeros, the end of the log) and report it. Not past `largest`, the
/// largest size it can have been created with: a damaged header whose
/// checksum still held (libFuzzer forged one, the `engine_files` target)
/// claimed 7.6 GB for a 64 KiB file, and open extended it and read every
/// page. The segment then fails to open with an error naming both sizes.
fn restore_truncated_length(path: &Path, largest: u64, report: &mut RecoveryReport) -> Result<()> {
    let bytes_on_disk = std::fs::metadata(path).map_err(Error::io(path, "stat"))?.len();
    let mut header = [0u8; 40];
    let mut file = std::fs::File::open(path).map_err(Error::io(path, "open"))?;
    if std::io::Read::read_exact(&mut file, &mut header).is_err() {
        return Ok(());
    }
    let Some(size) = crate::log::segment::declared_size(&header) else { return Ok(()) };
    if size > bytes_on_disk && size <= largest {
        let file = std::fs::OpenOptions::new().write(true).open(path).map_err(Error::io(path, "open"))?;
        file.set_len(size).map_err(Error::io(path, "set_len"))?;
        file.sync_all().map_err(Error::io(path, "fsync"))?;
        report.restored = Some(Truncation {
            path: path.to_path_buf(),
            offset: bytes_on_disk,
            reason: format!("file was {bytes_on_disk} bytes, its header says {size}"),
        });
    }
    Ok(())
}

/// Reads the log from `start` (the whole log without a checkpoint): the
/// first half of recovery, which needs nothing from the checkpoint, so the
/// checkpoint loads on another core meanwhile.
pub fn replay(dir: &Path, options: &Options, start: Option<Start>) -> Result<Replayed> {
    let started = Instant::now();
    let mut report = RecoveryReport::default();
    let mut segments = open_segments(dir, options, &mut report)?;
    let (start_segment, start_offset, keys_hint) = match start {
        Some(start) => (start.segment, start.offset, start.checkpoint_keys_hint),
        None => (segments.first().map_or(0, |s| s.id), SEGMENT_HEADER_BYTES, 0),
    };
    let mut tail = Tail::new(keys_hint);
    let mut last_seq = 0;
    let Some(mut i) = segments.iter().position(|s| s.id == start_segment) else {
        let end = SEGMENT_HEADER_BYTES;
        let missing_start = Some(start_segment);
        return Ok(Replayed { segments, tail, end, last_seq, missing_start, after_tail: Vec::new(), report, started });
    };
    // Segments before the checkpoint are not scanned; they were sealed when
    // full, so their capacity is a close upper bound of what they hold.
    for sealed in &segments[..i] {
        sealed.written_bytes.store(sealed.capacity_bytes() as u64, Ordering::Relaxed);
    }
    let mut at = start_offset;
    let mut end = SEGMENT_HEADER_BYTES;
    let mut after_tail = Vec::new();
    while i < segments.len() {
        let segment = segments[i].clone();
        let bytes = segment.region.as_slice();
        let outcome = scan(bytes, at, |frame_at, header, entry_at, entry| {
            if entry_at == crate::log::record::FRAME_HEADER_BYTES {
                report.replayed_frames += 1;
                report.replayed_bytes += header.frame_len as u64;
            }
            last_seq = last_seq.max(header.seq);
            tail.push(segment.id, frame_at + entry_at, &entry, header.seq, header.flags & FLAG_RELOCATED != 0);
        });
        if tail.wants_collapse() {
            tail.collapse(&segments, true);
        }
        match outcome {
            ScanEnd::Clean { end: clean_end } => {
                segment.written_bytes.store(clean_end as u64, Ordering::Relaxed);
                end = clean_end;
                i += 1;
                at = SEGMENT_HEADER_BYTES;
            }
            ScanEnd::Bad { offset, error } => {
                // A valid group start later on proves this frame had been
                // persisted and acknowledged: corruption, not a torn write.
                let later = find_group_start(bytes, offset + 8).map(|o| (i, o)).or_else(|| {
                    (i + 1..segments.len()).find_map(|j| {
                        find_group_start(segments[j].region.as_slice(), SEGMENT_HEADER_BYTES).map(|o| (j, o))
                    })
                });
                let reason = format!("{error}");
                match later {
                    Some((j, resume)) if options.repair => {
                        report.skipped.push(Truncation {
                            path: segment.path().to_path_buf(),
                            offset: offset as u64,
                            reason: format!("{reason}; skipped to segment {} offset {resume}", segments[j].id),
                        });
                        if j != i {
                            segment.written_bytes.store(offset as u64, Ordering::Relaxed);
                        }
                        i = j;
                        at = resume;
                    }
                    Some((j, resume)) => {
                        return Err(Error::Corruption {
                            path: segment.path().to_path_buf(),
                            offset: offset as u64,
                            reason: format!(
                                "{reason}; acknowledged data follows (segment {} offset {resume}); open with repair to skip it",
                                segments[j].id
                            ),
                        });
                    }
                    None => {
                        report.truncated =
                            Some(Truncation { path: segment.path().to_path_buf(), offset: offset as u64, reason });
                        for later in segments.drain(i + 1..) {
                            report.removed_segments.push(later.path().to_path_buf());
                            after_tail.push(later);
                        }
                        segment.written_bytes.store(offset as u64, Ordering::Relaxed);
                        end = offset;
                        break;
                    }
                }
            }
        }
    }
    Ok(Replayed { segments, tail, end, last_seq, missing_start: None, after_tail, report, started })
}

/// Merges the checkpoint (if any) with the replayed tail and builds the index.
pub fn finish(dir: &Path, checkpoint: Option<Loaded>, replayed: Replayed) -> Result<Recovered> {
    let Replayed { segments, tail, end, mut last_seq, missing_start, after_tail, mut report, started } = replayed;
    let (checkpoint, deltas) = checkpoint.map_or_else(Default::default, |loaded| {
        last_seq = last_seq.max(loaded.last_seq);
        (loaded.entries, loaded.deltas)
    });
    report.checkpoint_keys = checkpoint.len() as u64;
    if let Some(start_segment) = missing_start {
        if !(segments.is_empty() && checkpoint.is_empty()) {
            return Err(Error::Corruption {
                path: dir.join(crate::log::segment::segment_file_name(start_segment)),
                offset: 0,
                reason: "the checkpoint starts replay in this segment, which is missing".into(),
            });
        }
    }
    for segment in after_tail {
        segment.mark_for_deletion();
    }
    if let Some(last) = segments.last() {
        // Zero everything after the end so a later write can never be
        // followed by stale frames that would replay on the next open.
        let tail = last.capacity_bytes() - end;
        // SAFETY: nothing reads past the end of the log during recovery.
        unsafe { last.region.zero(end, tail)? };
        last.region.persist(end, tail)?;
    }
    let entries = merge(checkpoint, deltas.iter().map(MappedDelta::entries).collect(), tail, &segments);
    // Live bytes per segment. Each entry finds its segment's place in
    // `segments` (in id order) through a table indexed by id where the ids
    // are dense, the common case: one lookup per entry. Where they are
    // spread (a stray or damaged file name: a table of 4 billion slots)
    // a binary search instead.
    let first_id = segments.first().map_or(0, |s| s.id);
    let span = segments.last().map_or(0, |s| (s.id - first_id) as usize + 1);
    let by_id: Option<Vec<Option<usize>>> = (span <= 2 * segments.len() + 64).then(|| {
        let mut table = vec![None; span];
        for (at, segment) in segments.iter().enumerate() {
            table[(segment.id - first_id) as usize] = Some(at);
        }
        table
    });
    let newest = segments.last().map_or(0, |s| s.id);
    let position = |tag: u32| {
        let id = id_of(tag, newest)?;
        match &by_id {
            Some(table) => *table.get(id.checked_sub(first_id)? as usize)?,
            None => segments.binary_search_by_key(&id, |s| s.id).ok(),
        }
    };
    let mut live_bytes = vec![0u64; segments.len()];
    let mut spilled_key_bytes = 0;
    for (key, slot) in &entries {
        spilled_key_bytes += key.heap_bytes();
        let Some(at) = position(slot.loc.seg) else {
            let id = id_of(slot.loc.seg, newest).unwrap_or(slot.loc.seg as u64);
            return Err(Error::Corruption {
                path: dir.join(crate::log::segment::segment_file_name(id)),
                offset: slot.loc.off as u64,
                reason: "the index points into this segment, which is missing".into(),
            });
        };
        live_bytes[at] += slot.loc.len as u64;
    }
    for (segment, bytes) in segments.iter().zip(live_bytes) {
        segment.live_bytes.fetch_add(bytes, Ordering::Relaxed);
    }
    // Sorted and unique: the B-tree is built in bulk, in linear time.
    let map: BTreeMap<Key, Slot> = entries.into_iter().collect();
    report.elapsed = started.elapsed();
    Ok(Recovered { map, segments, end, last_seq, spilled_key_bytes, report })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(key: &str, n: u32, seq: u64) -> (Key, Slot) {
        (Key::from_slice(key.as_bytes()), Slot::new(Loc { seg: 1, off: n, len: 10 }, seq))
    }

    fn summary(entries: &[(Key, Slot)]) -> Vec<(String, u32)> {
        entries.iter().map(|(k, s)| (String::from_utf8(k.to_vec()).unwrap(), s.loc.off)).collect()
    }

    /// A record as replay would push it (short keys need no segment).
    fn record(key: &str, off: u32, seq: u64, deleted: bool) -> TailRecord {
        TailRecord {
            prefix: prefix_of(key.as_bytes()),
            seq,
            seg: 2,
            off,
            len: 10,
            key_len: key.len() as u16,
            deleted,
            relocated: false,
        }
    }

    /// A GC copy of version `seq` of `key`, as replay would push it.
    fn copy(key: &str, off: u32, seq: u64) -> TailRecord {
        TailRecord { relocated: true, ..record(key, off, seq, false) }
    }

    fn no_deltas() -> Vec<std::vec::IntoIter<DeltaEntry>> {
        Vec::new()
    }

    /// The delta checkpoint of `records` (short keys need no segment).
    fn delta_of(records: &[TailRecord]) -> Vec<DeltaEntry> {
        let mut tail = Tail::new(0);
        tail.records.extend_from_slice(records);
        tail.collapse(&[], false);
        tail.records.into_iter().map(|r| r.to_delta(&[])).collect()
    }

    #[test]
    fn a_copy_moves_only_the_version_it_copied_and_never_brings_a_key_back() {
        // "b" is still at version 5 in the checkpoint, "c" at a newer one;
        // "a" was deleted before the checkpoint but checked live by GC first.
        let checkpoint = vec![entry("b", 2, 5), entry("c", 3, 9)];
        let mut tail = Tail::new(0);
        tail.records.extend([
            copy("a", 10, 1),
            copy("b", 20, 5),
            copy("c", 30, 5),
            record("d", 40, 12, false),
            copy("e", 50, 3), // copied twice, deleted before the checkpoint
        ]);
        tail.collapse(&[], false);
        tail.records.extend([
            copy("d", 41, 12), // moves the write before it in the tail
            copy("e", 51, 3),
            record("f", 60, 13, false),
            copy("f", 61, 11), // an older version's copy: loses
        ]);
        let merged = merge(checkpoint, no_deltas(), tail, &[]);
        let expected = [("b", 20), ("c", 3), ("d", 41), ("f", 60)];
        assert_eq!(summary(&merged), expected.map(|(k, n)| (k.to_string(), n)));
    }

    #[test]
    fn replayed_entries_merge_newest_wins_ties_go_to_the_later_copy_and_deletions_drop() {
        let checkpoint = vec![entry("a", 1, 5), entry("b", 2, 5), entry("c", 3, 9), entry("d", 4, 5)];
        let mut tail = Tail::new(0);
        tail.records.extend([
            record("b", 20, 7, false), // newer than the checkpoint
            record("c", 30, 8, false), // older than the checkpoint: loses
            record("e", 40, 10, false),
        ]);
        tail.collapse(&[], false); // a collapse in the middle of replay changes nothing
        tail.records.extend([
            record("e", 41, 10, false), // GC relocation: same seq, later copy wins
            record("d", 50, 11, true),
            record("f", 60, 12, false),
            record("f", 61, 13, true),
            record("f", 62, 14, false),
            record("ab", 70, 15, false), // shares a prefix with "a": ordered after it
            record("", 80, 16, false),
        ]);
        let merged = merge(checkpoint, no_deltas(), tail, &[]);
        let expected = [("", 80), ("a", 1), ("ab", 70), ("b", 20), ("c", 3), ("e", 41), ("f", 62)];
        assert_eq!(summary(&merged), expected.map(|(k, n)| (k.to_string(), n)));
        assert!(merged.iter().all(|(_, slot)| !slot.loc.is_tombstone()));
    }

    #[test]
    fn without_a_tail_checkpoint_deletions_are_dropped() {
        let mut deleted = entry("b", 0, 6);
        deleted.1 = Slot::new(Loc::TOMBSTONE, 6);
        let merged = merge(vec![entry("a", 1, 5), deleted], no_deltas(), Tail::new(0), &[]);
        assert_eq!(summary(&merged), vec![("a".to_string(), 1)]);
    }

    proptest::proptest! {
        /// The merge against a map that applies the tail record by
        /// record in log order.
        #[test]
        fn merge_matches_applying_the_tail_in_order(
            checkpoint in proptest::collection::btree_map("[a-d]{0,3}", (0u64..20, proptest::bool::weighted(0.1)), 0..30),
            tail in proptest::collection::vec(("[a-d]{0,3}", 0u64..20, proptest::bool::weighted(0.3)), 0..40),
        ) {
            let mut model: BTreeMap<String, (u32, u64, bool)> = BTreeMap::new();
            let mut entries = Vec::new();
            for (n, (key, (seq, deleted))) in checkpoint.iter().enumerate() {
                let (_, mut slot) = entry(key, n as u32, *seq);
                if *deleted {
                    slot = Slot::new(Loc::TOMBSTONE, *seq);
                }
                entries.push((Key::from_slice(key.as_bytes()), slot));
                model.insert(key.clone(), (n as u32, *seq, *deleted));
            }
            let mut replayed = Tail::new(0);
            for (n, (key, seq, deleted)) in tail.iter().enumerate() {
                let off = 1000 + n as u32;
                replayed.records.push(record(key, off, *seq, *deleted));
                if model.get(key).is_none_or(|(_, kept, _)| candidate_wins(*kept, *seq)) {
                    model.insert(key.clone(), (off, *seq, *deleted));
                }
            }
            let merged = merge(entries, no_deltas(), replayed, &[]);
            let expected: Vec<(String, u32)> =
                model.into_iter().filter(|(_, (_, _, deleted))| !deleted).map(|(k, (off, _, _))| (k, off)).collect();
            proptest::prop_assert_eq!(summary(&merged), expected);
        }
    }

    /// One step of a history: a write, a delete, or a GC copy of the
    /// version that was current `lag` steps earlier (when GC looked).
    #[derive(Debug, Clone)]
    enum Step {
        Put(&'static str),
        Delete(&'static str),
        Copy(&'static str, usize),
    }

    fn step() -> impl proptest::strategy::Strategy<Value = Step> {
        use proptest::prelude::*;
        let key = proptest::sample::select(vec!["a", "b", "c"]);
        prop_oneof![
            key.clone().prop_map(Step::Put),
            key.clone().prop_map(Step::Delete),
            (key, 0usize..4).prop_map(|(k, lag)| Step::Copy(k, lag)),
        ]
    }

    /// Each key's version (sequence number, offset) after every step.
    type State = BTreeMap<&'static str, (u64, u32)>;

    proptest::proptest! {
        /// Histories the engine can write: sequence numbers rise with log
        /// position, a copy is of a version GC found current a few steps
        /// before and moves it only if it still is. A fuzzy checkpoint cut
        /// at step `cut` sees each key as of some step after the cut; the
        /// merge with the tail from the cut must give the final state.
        #[test]
        fn merge_of_a_fuzzy_checkpoint_and_its_tail_gives_the_final_state(
            steps in proptest::collection::vec(step(), 0..40),
            cut in 0usize..40,
            seen in proptest::collection::vec(0usize..40, 3),
            collapse_midway in proptest::bool::ANY,
            delta_cuts in proptest::collection::vec(0usize..40, 0..4),
            combine in proptest::bool::ANY,
        ) {
            let mut states: Vec<State> = vec![State::new()];
            let mut records = Vec::new();
            for (n, step) in steps.iter().enumerate() {
                let (off, seq) = (1000 + n as u32, n as u64 + 1);
                let mut state = states[n].clone();
                match *step {
                    Step::Put(key) => {
                        state.insert(key, (seq, off));
                        records.push(record(key, off, seq, false));
                    }
                    Step::Delete(key) => {
                        state.remove(key);
                        records.push(record(key, off, seq, true));
                    }
                    Step::Copy(key, lag) => {
                        if let Some(&(version, _)) = states[n.saturating_sub(lag)].get(key) {
                            if state.get(key).is_some_and(|&(current, _)| current == version) {
                                state.insert(key, (version, off));
                            }
                            records.push(copy(key, off, version));
                        }
                    }
                }
                states.push(state);
            }
            let cut = cut.min(steps.len());
            let mut checkpoint = Vec::new();
            for (key, seen) in ["a", "b", "c"].into_iter().zip(&seen) {
                let at = cut + seen % (steps.len() - cut + 1);
                if let Some(&(seq, off)) = states[at].get(key) {
                    checkpoint.push(entry(key, off, seq));
                }
            }
            let mut tail_from = records.iter().position(|r| r.off >= 1000 + cut as u32).unwrap_or(records.len());
            // Delta checkpoints: the log from the checkpoint up to later
            // cuts, each collapsed on its own and applied in order.
            // Applied one after the other, or folded with the tail in one
            // merge (as open does).
            let mut delta_cuts = delta_cuts;
            delta_cuts.sort_unstable();
            let mut combined = Vec::new();
            for delta_cut in delta_cuts {
                let to = records.iter().position(|r| r.off >= 1000 + delta_cut as u32).unwrap_or(records.len());
                if to >= tail_from {
                    let delta = delta_of(&records[tail_from..to]);
                    if combine {
                        combined.push(delta);
                    } else {
                        checkpoint = apply_delta(checkpoint, delta);
                    }
                    tail_from = to;
                }
            }

            let mut tail = Tail::new(0);
            let (before, after) = records[tail_from..].split_at((records.len() - tail_from) / 2);
            tail.records.extend_from_slice(before);
            if collapse_midway {
                tail.collapse(&[], false);
            }
            tail.records.extend_from_slice(after);
            let merged = merge(checkpoint, combined.into_iter().map(Vec::into_iter).collect(), tail, &[]);
            let expected: Vec<(String, u32)> =
                states.last().unwrap().iter().map(|(k, (_, off))| (k.to_string(), *off)).collect();
            proptest::prop_assert_eq!(summary(&merged), expected);
        }
    }

    #[test]
    fn prefixes_order_like_bytes() {
        let keys: [&[u8]; 6] = [b"", b"\0", b"a", b"a\0", b"ab", b"b"];
        for pair in keys.windows(2) {
            let (a, b) = (prefix_of(pair[0]), prefix_of(pair[1]));
            assert!(a < b || (a == b && pair[0].len() < pair[1].len()), "{pair:?}");
        }
    }
}
