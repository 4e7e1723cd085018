//! The in-DRAM ordered index: key -> location of the newest entry.
//!
//! A `BTreeMap`, cut into runs of disjoint key ranges (`runs.rs`), behind
//! a reader-writer lock. Writers are the group-commit
//! leader (one writer at a time by construction), which applies a whole
//! group under one write-lock acquisition, so a reader sees every batch all
//! or nothing. Keys of up to 16 bytes are stored inline (no heap allocation).
//!
//! Snapshots: the newest version of a key is its `Slot` in the tree; older
//! versions are kept in a side map only while a registered snapshot can
//! still see them, so without snapshots a key costs one 20-byte slot.
//!
//! Deferred updates: with `Options::deferred_index_updates` > 0 the leader
//! does not descend the B-tree. It records each update in a small hash
//! table (`pending.rs`) that readers look at first; once the table holds
//! that many keys it is frozen and a merger thread moves it into the tree
//! on the other core, a chunk at a time, while the leader fills a new one.
//! Whatever needs the tree exact (a snapshot or iterator, the checkpoint,
//! the key count, GC before it frees a segment) first `settle`s: merges all
//! of it. Snapshots keep older versions in the tree only, so while one is
//! registered the leader applies to the tree directly, as it does with
//! deferral off.
//!
//! Cost per key (64-bit): key 17 B (16 inline + length) + slot 20 B, in
//! B-tree leaves of 11 entries that are 50-100% full, plus internal nodes:
//! about 58 B per key after random inserts (measured by the allocator, 1.26M
//! 16-byte keys; 68 B with a 24-byte key), plus heap bytes for keys longer
//! than 16 B, plus ~28 B with the point table (`points.rs`). Keys merged
//! as runs of their own (appended above the largest key) sit in full
//! leaves: after fillseq of 4M 8-byte keys the engine's whole heap is 39 B
//! per key (73 B when each key was inserted on its own). Once writes pause,
//! the background thread rebuilds the runs inserts left part-full the same
//! way (`compact`): 39 B per key after random inserts too.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::{Condvar, Mutex, RwLock};

use crate::background::IdleUntilNeeded;
use crate::log::segment::SegmentSet;

pub use super::chunk::KeyChunk;
pub use super::key::{Key, KeyRef};
use super::pending::PendingMap;
use super::points::{Lookup, Points};
use super::runs::{Rebuild, Runs, MIN_RUN_KEYS};

/// Pending updates merged per hold of the tree's write lock: readers whose
/// key is not pending wait at most this many B-tree inserts (~0.1 ms).
const MERGE_CHUNK: usize = 256;
/// How many entries ahead a merge asks for the point table's lines.
const POINTS_AHEAD: usize = 8;
/// Most entries a compaction rebuilds per piece, copied under one hold of
/// the tree's read lock and swapped in under one of its write lock.
const COMPACT_PIECE: usize = 16 * 1024;
/// Entries the background thread rebuilds per idle step (every 100 ms):
/// ~10 ms of one core, so 10M keys compact in ~4 s of quiet.
const COMPACT_PER_IDLE_STEP: usize = 256 * 1024;
/// Most writes in a step (100 ms) under which the background thread still
/// rebuilds a piece (~1 ms of one core) of a run grown by new keys: under
/// a steady trickle of writes the index would never be idle, so never
/// rebuilt. Above it, a piece of 16K keys would often change during its
/// rebuild, and new keys undo the work as fast.
const LIGHT_WRITES_PER_STEP: u64 = 2000;
/// The leader merges itself once the active table is this many times the
/// deferral limit (the merger thread fell behind), so it stays small.
const OVERFLOW_FACTOR: usize = 4;

/// Where an entry lives in the value log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Loc {
    pub seg: u32,
    pub off: u32,
    /// Length of the whole entry, header included.
    pub len: u32,
}

impl Loc {
    /// Marks a deletion kept only for snapshots or during replay.
    pub const TOMBSTONE: Loc = Loc { seg: u32::MAX, off: 0, len: 0 };

    pub fn is_tombstone(&self) -> bool {
        self.seg == u32::MAX
    }
}

/// One version of a key: where it is and its sequence number. 20 bytes:
/// the sequence number is split so a slot needs only 4-byte alignment (with
/// a `u64` and a pointer to older versions it was 32, more than half of
/// every B-tree entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slot {
    pub loc: Loc,
    seq_low: u32,
    seq_high: u32,
}

impl Slot {
    pub fn new(loc: Loc, seq: u64) -> Slot {
        Slot { loc, seq_low: seq as u32, seq_high: (seq >> 32) as u32 }
    }

    pub fn seq(&self) -> u64 {
        (self.seq_high as u64) << 32 | self.seq_low as u64
    }
}

/// The index proper: the newest version of every key in key order, and the
/// older versions live snapshots still need (newest first), kept apart so
/// a key without them costs no pointer.
#[derive(Default)]
struct Tree {
    heads: Runs,
    older: BTreeMap<Key, Vec<Slot>>,
    /// The newest location of keys by hash, for lookups without a B-tree
    /// descent (`None`: turned off by `Options::point_index`).
    points: Option<Points>,
}

impl Tree {
    /// Makes `new` the newest version of `key`. The version it replaces
    /// stops counting as live and is kept while a snapshot needs it.
    fn put_head(
        &mut self,
        key: &[u8],
        new: Slot,
        snapshots: Option<&BTreeMap<u64, usize>>,
        segments: &SegmentSet,
        deltas: &mut Deltas,
    ) {
        // One descent: keys of up to 16 bytes are built inline.
        let owned = Key::from_slice(key);
        let heap_bytes = owned.heap_bytes();
        let old = match self.heads.insert(owned, new) {
            Some(old) => {
                deltas.keys += old.loc.is_tombstone() as i64;
                remove_live(segments, old.loc, &mut deltas.dead);
                retain_for_snapshots(&mut self.older, key, old, new.seq(), snapshots, &mut deltas.chained);
                Some(old.loc).filter(|loc| !loc.is_tombstone())
            }
            None => {
                deltas.keys += 1;
                deltas.spilled += heap_bytes as i64;
                None
            }
        };
        if let Some(points) = &mut self.points {
            match old {
                Some(old) => points.replace(key, old, new.loc),
                None => points.insert(key, new.loc),
            }
        }
    }

    /// Deletes `key` as of `seq`; the tombstone head stays only while
    /// older versions do.
    fn delete_head(
        &mut self,
        key: &[u8],
        seq: u64,
        snapshots: Option<&BTreeMap<u64, usize>>,
        segments: &SegmentSet,
        deltas: &mut Deltas,
    ) {
        let Some(head) = self.heads.get_mut(KeyRef::new(key)) else { return };
        let old = std::mem::replace(head, Slot::new(Loc::TOMBSTONE, seq));
        deltas.keys -= !old.loc.is_tombstone() as i64;
        remove_live(segments, old.loc, &mut deltas.dead);
        if let Some(points) = self.points.as_mut().filter(|_| !old.loc.is_tombstone()) {
            points.remove(key, old.loc);
        }
        if !retain_for_snapshots(&mut self.older, key, old, seq, snapshots, &mut deltas.chained) {
            if let Some((key, _)) = self.heads.remove_entry(KeyRef::new(key)) {
                deltas.spilled -= key.heap_bytes() as i64;
            }
        }
    }

    /// Copies the `entries` live at `at_seq` into `out`; returns the last
    /// one examined.
    fn copy_visible<'t>(
        &'t self,
        entries: impl Iterator<Item = (&'t Key, &'t Slot)>,
        at_seq: u64,
        out: &mut KeyChunk,
    ) -> Option<&'t Key> {
        let mut last = None;
        for (key, slot) in entries {
            if let Some(loc) = self.live(key, slot, Some(at_seq)) {
                out.push(key.as_slice(), loc);
            }
            last = Some(key);
        }
        last
    }

    /// Where the version of `key` (whose newest is `head`) a reader at
    /// `at_seq` sees lies, unless that version is a deletion.
    fn live(&self, key: &[u8], head: &Slot, at_seq: Option<u64>) -> Option<Loc> {
        let slot = self.visible(key, head, at_seq)?;
        (!slot.loc.is_tombstone()).then_some(slot.loc)
    }

    /// The version of `key` (whose newest is `head`) a reader at `at_seq`
    /// sees (`None` = newest).
    fn visible(&self, key: &[u8], head: &Slot, at_seq: Option<u64>) -> Option<Slot> {
        match at_seq {
            Some(at) if head.seq() > at => self.older.get(KeyRef::new(key))?.iter().find(|v| v.seq() <= at).copied(),
            _ => Some(*head),
        }
    }
}

/// Adds `loc`'s bytes to its segment's live count.
fn add_live(segments: &SegmentSet, loc: Loc) {
    if !loc.is_tombstone() {
        segments.with(loc.seg, |s| s.live_bytes.fetch_add(loc.len as u64, Ordering::Relaxed));
    }
}

/// Removes `loc`'s bytes from its segment's live count and adds it to
/// `dead`, for `mark_dead` once the caller's loop is done: the dead-entry
/// maps are cache misses, which a loop of them overlaps (marking each at
/// once cost 16% of a pass of overwrites, the merger being the busiest
/// thread).
fn remove_live(segments: &SegmentSet, loc: Loc, dead: &mut Vec<Loc>) {
    if !loc.is_tombstone() {
        segments.with(loc.seg, |s| s.live_bytes.fetch_sub(loc.len as u64, Ordering::Relaxed));
        dead.push(loc);
    }
}

/// Records `dead` in their segments' dead-entry maps (see `log::marks`).
fn mark_dead(segments: &SegmentSet, dead: &mut Vec<Loc>) {
    for loc in dead.drain(..) {
        segments.with(loc.seg, |s| segments.mark_dead(s, loc.off));
    }
}

/// Changes to the index's counters made under one lock hold.
#[derive(Default)]
struct Deltas {
    keys: i64,
    spilled: i64,
    chained: i64,
    /// Versions that stopped being live (see `remove_live`).
    dead: Vec<Loc>,
}

/// Updates not yet in the tree (see the module comment).
#[derive(Default)]
struct Pending {
    /// Where the leader records updates.
    active: PendingMap,
    /// A full table the merger is moving into the tree; older than `active`.
    frozen: Option<Arc<PendingMap>>,
    /// A merged table, emptied, to be the next `active`: a fresh one grows
    /// by rehashing into new memory, and the kernel zeroing those pages was
    /// 6% of the writer's time in fillseq.
    spare: Option<PendingMap>,
}

impl Pending {
    /// The newest pending version of `key`.
    fn get(&self, key: &[u8]) -> Option<Slot> {
        self.active.get(key).or_else(|| self.frozen.as_ref()?.get(key))
    }

    fn len(&self) -> usize {
        self.active.len() + self.frozen.as_ref().map_or(0, |f| f.len())
    }

    /// `PendingMap::visit_within` of the frozen table, then the active one
    /// (whose versions are newer).
    fn visit_within<'a>(&'a self, lower: Bound<&[u8]>, upper: Bound<&[u8]>, mut visit: impl FnMut(&'a Key, Slot)) {
        for table in self.frozen.as_deref().into_iter().chain(std::iter::once(&self.active)) {
            table.visit_within(lower, upper, &mut visit);
        }
    }

    /// Hands the active table to the merger, unless it still has one.
    fn freeze(&mut self) {
        if self.frozen.is_none() && !self.active.is_empty() {
            let next = self.spare.take().unwrap_or_default();
            self.frozen = Some(Arc::new(std::mem::replace(&mut self.active, next)));
        }
    }

    /// Frees the spare, and the active table if it is empty: a settled
    /// index (idle, or measured by `stats`) holds no table memory.
    fn release_empty_tables(&mut self) {
        self.spare = None;
        if self.active.is_empty() {
            self.active = PendingMap::default();
        }
    }

    fn memory_bytes(&self) -> u64 {
        self.active.memory_bytes()
            + self.frozen.as_ref().map_or(0, |f| f.memory_bytes())
            + self.spare.as_ref().map_or(0, PendingMap::memory_bytes)
    }
}

#[derive(Default)]
struct MergerState {
    wanted: bool,
    stop: bool,
}

/// One change applied by the group-commit leader.
pub enum Update<'a> {
    Put {
        key: &'a [u8],
        loc: Loc,
        seq: u64,
    },
    Delete {
        key: &'a [u8],
        seq: u64,
    },
    /// GC moved the entry at `from` to `to`; applies only if the key still
    /// points at `from`.
    Relocate {
        key: &'a [u8],
        from: Loc,
        to: Loc,
    },
}

pub struct Index {
    tree: RwLock<Tree>,
    /// Highest sequence number whose batch is fully applied.
    visible_seq: AtomicU64,
    /// Live snapshot sequence numbers with their reference counts.
    snapshots: Mutex<BTreeMap<u64, usize>>,
    snapshot_count: AtomicUsize,
    /// Older versions currently chained for snapshots.
    chained_versions: AtomicU64,
    /// Heads that are not tombstones: the number of keys.
    live_keys: AtomicU64,
    /// Heap bytes of keys longer than the inline 16, kept current so that
    /// `memory_bytes` (INFO, metrics) never walks the tree.
    spilled_key_bytes: AtomicU64,
    /// Updates not yet merged into the tree. Lock order: `merging`, then
    /// `pending`, then `tree`, then `snapshots`.
    pending: RwLock<Pending>,
    /// Keys in `pending`: readers skip its lock when there are none.
    pending_entries: AtomicUsize,
    /// Held while moving pending updates into the tree, so merges run one
    /// at a time and in the order the updates were made.
    merging: Mutex<()>,
    /// Keys the active table holds before it is frozen; 0 = apply every
    /// update to the tree directly.
    defer_limit: usize,
    merger: Mutex<MergerState>,
    merger_signal: Condvar,
    /// The merger's scheduling: on idle cores until someone waits for it.
    merger_priority: IdleUntilNeeded,
    /// The background thread's, while it rebuilds the tree (`compact`).
    compactor_priority: IdleUntilNeeded,
    /// Updates applied since open (a batch counts each of its entries: its
    /// sequence number counts it once, and the server batches pipelines).
    applied_updates: AtomicU64,
    /// `applied_updates` at the background thread's last `background_step`.
    updates_at_last_step: AtomicU64,
}

impl Index {
    /// An index over `map`, which holds no deletions (recovery drops them)
    /// and whose long keys hold `spilled_key_bytes` of heap. `points` (empty)
    /// serves point lookups once `fill_points` has filled it. With
    /// `defer_limit` > 0 updates are deferred (module comment) and someone
    /// must run `run_merger`.
    pub fn new(
        map: BTreeMap<Key, Slot>,
        visible_seq: u64,
        spilled_key_bytes: u64,
        points: Option<Points>,
        defer_limit: usize,
    ) -> Index {
        debug_assert!(map.values().all(|slot| !slot.loc.is_tombstone()));
        debug_assert_eq!(spilled_key_bytes, map.keys().map(Key::heap_bytes).sum::<u64>());
        let live_keys = map.len() as u64;
        Index {
            live_keys: AtomicU64::new(live_keys),
            spilled_key_bytes: AtomicU64::new(spilled_key_bytes),
            tree: RwLock::new(Tree { heads: map.into(), older: BTreeMap::new(), points }),
            visible_seq: AtomicU64::new(visible_seq),
            snapshots: Mutex::new(BTreeMap::new()),
            snapshot_count: AtomicUsize::new(0),
            chained_versions: AtomicU64::new(0),
            pending: RwLock::new(Pending::default()),
            pending_entries: AtomicUsize::new(0),
            merging: Mutex::new(()),
            defer_limit,
            merger: Mutex::new(MergerState::default()),
            merger_signal: Condvar::new(),
            merger_priority: IdleUntilNeeded::default(),
            compactor_priority: IdleUntilNeeded::default(),
            applied_updates: AtomicU64::new(0),
            updates_at_last_step: AtomicU64::new(0),
        }
    }

    pub fn visible_seq(&self) -> u64 {
        self.visible_seq.load(Ordering::Acquire)
    }

    /// Live keys (expired ones included until they are removed). Merges
    /// pending updates first: whether a put adds a key is known only then.
    pub fn len(&self, segments: &SegmentSet) -> usize {
        self.settle_and_release(segments);
        self.live_keys.load(Ordering::Relaxed) as usize
    }

    /// Live keys as of the last merge of pending updates (`len` merges
    /// them first).
    pub fn approximate_len(&self) -> usize {
        self.live_keys.load(Ordering::Relaxed) as usize
    }

    /// The newest pending version of `key`, if it has one.
    fn pending_get(&self, key: &[u8]) -> Option<Slot> {
        if self.pending_entries.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.pending.read().get(key)
    }

    /// `Some(answer)` if a pending update decides what a newest read of
    /// `key` finds. Pending updates are newer than the tree; a snapshot
    /// reader finds none, as registering a snapshot merges them all.
    fn pending_loc(&self, key: &[u8], at_seq: Option<u64>) -> Option<Option<Loc>> {
        let slot = self.pending_get(key).filter(|_| at_seq.is_none())?;
        Some((!slot.loc.is_tombstone()).then_some(slot.loc))
    }

    /// The location of `key` as seen at `at_seq` (`None` = newest). From
    /// the point table, the entry there may hold another key whose hash
    /// shares the tag: the caller checks the key and, if it differs, asks
    /// `get_ordered`.
    pub fn get(&self, key: &[u8], at_seq: Option<u64>) -> Option<Loc> {
        if let Some(loc) = self.pending_loc(key, at_seq) {
            return loc;
        }
        let tree = self.tree.read();
        if let (None, Some(points)) = (at_seq, &tree.points) {
            match points.get(key) {
                Some(Lookup::Absent) => return None,
                Some(Lookup::At(loc)) => return Some(loc),
                Some(Lookup::Ambiguous) | None => {}
            }
        }
        Self::get_in(&tree, key, at_seq)
    }

    /// Asks the CPU for the point table's lines of `keys`, which `get`
    /// reads first: a hint for a caller about to look up all of them.
    pub fn prefetch_points<'k>(&self, keys: impl Iterator<Item = &'k [u8]>) {
        if let Some(points) = &self.tree.read().points {
            keys.for_each(|key| points.prefetch(key));
        }
    }

    /// As `get`, from the B-tree: exact.
    pub fn get_ordered(&self, key: &[u8], at_seq: Option<u64>) -> Option<Loc> {
        if let Some(loc) = self.pending_loc(key, at_seq) {
            return loc;
        }
        Self::get_in(&self.tree.read(), key, at_seq)
    }

    fn get_in(tree: &Tree, key: &[u8], at_seq: Option<u64>) -> Option<Loc> {
        tree.live(key, tree.heads.get(KeyRef::new(key))?, at_seq)
    }

    /// Examines up to `max` keys within `(lower, upper)` from the low end
    /// (or the high end when `reverse`), appends those visible at `at_seq`
    /// to `out`, records the last key examined there, and returns whether
    /// it examined any (false: range exhausted).
    /// Reads the tree alone: exact under a registered snapshot, which
    /// merged every pending update; without one, updates still pending are
    /// missed.
    pub fn range_chunk(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        at_seq: u64,
        max: usize,
        out: &mut KeyChunk,
    ) -> bool {
        let tree = self.tree.read();
        let range = tree.heads.range(lower.map(KeyRef::new), upper.map(KeyRef::new));
        let last = if reverse {
            tree.copy_visible(range.rev().take(max), at_seq, out)
        } else {
            tree.copy_visible(range.take(max), at_seq, out)
        };
        match last {
            Some(key) => {
                out.examined(key.as_slice());
                true
            }
            None => false,
        }
    }

    /// Visits the keys within `(lower, upper)` visible at `at_seq` (not
    /// deleted), in order, until `visit` returns false: `range_chunk`
    /// without copying the keys, holding the tree's read lock for the walk
    /// (keep `visit` short). Exact under a registered snapshot.
    pub fn visit_at(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        at_seq: u64,
        mut visit: impl FnMut(&[u8]) -> bool,
    ) {
        let tree = self.tree.read();
        for (key, slot) in tree.heads.range(lower.map(KeyRef::new), upper.map(KeyRef::new)) {
            if tree.live(key, slot, Some(at_seq)).is_some() && !visit(key.as_slice()) {
                return;
            }
        }
    }

    /// Visits the keys within `(lower, upper)` whose newest version is not
    /// a deletion, in order (or in reverse), from the index alone, until
    /// `visit` returns false. No snapshot, so nothing is merged first: the
    /// pending updates in range are found in place, through each table's
    /// key order (a snapshot's merge of a few thousand of them into a big
    /// tree took milliseconds; a pass over all of them ~0.1 ms), under the
    /// pending table's read lock, which holds the leader's next update back
    /// for the walk.
    pub fn newest_keys_in(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        reverse: bool,
        mut visit: impl FnMut(&[u8]) -> bool,
    ) {
        // An empty or inverted range holds nothing (BTreeMap would panic).
        let empty = match (lower, upper) {
            (Bound::Included(a), Bound::Included(b)) => a > b,
            (Bound::Included(a) | Bound::Excluded(a), Bound::Excluded(b))
            | (Bound::Excluded(a), Bound::Included(b)) => a >= b,
            _ => false,
        };
        if empty {
            return;
        }
        // Lock order: pending, then the tree. A frozen table being merged
        // stays in `pending` until it is all in the tree, and holds the
        // same versions as the tree for what is merged.
        let mut pending = (self.pending_entries.load(Ordering::Acquire) > 0).then(|| self.pending.read());
        let mut newer: BTreeMap<&[u8], bool> = BTreeMap::new();
        if let Some(pending) = &pending {
            pending.visit_within(lower, upper, |key, slot| {
                newer.insert(key.as_slice(), !slot.loc.is_tombstone());
            });
        }
        let tree = self.tree.read();
        if newer.is_empty() {
            // Nothing pending within the range: the walk needs no pending
            // version, and holds the leader back no longer (as in
            // `in_settled_range`).
            drop(newer);
            drop(pending.take());
            newer = BTreeMap::new();
        }
        let range = tree.heads.range(lower.map(KeyRef::new), upper.map(KeyRef::new));
        let mut held: Box<dyn Iterator<Item = (&[u8], bool)>> = {
            let entries = range.map(|(key, slot)| (key.as_slice(), !slot.loc.is_tombstone()));
            if reverse {
                Box::new(entries.rev())
            } else {
                Box::new(entries)
            }
        };
        let mut pending: Box<dyn Iterator<Item = (&[u8], bool)>> = if reverse {
            Box::new(newer.iter().rev().map(|(k, l)| (*k, *l)))
        } else {
            Box::new(newer.iter().map(|(k, l)| (*k, *l)))
        };
        let (mut from_tree, mut from_pending) = (held.next(), pending.next());
        loop {
            // The next key in the walk's order; a pending version wins.
            let take_tree = match (from_tree, from_pending) {
                (None, None) => return,
                (Some(_), None) => true,
                (None, Some(_)) => false,
                (Some((t, _)), Some((p, _))) if t == p => {
                    from_tree = held.next();
                    false
                }
                (Some((t, _)), Some((p, _))) => (t < p) != reverse,
            };
            let (key, live) = if take_tree {
                std::mem::replace(&mut from_tree, held.next()).expect("checked")
            } else {
                std::mem::replace(&mut from_pending, pending.next()).expect("checked")
            };
            if live && !visit(key) {
                return;
            }
        }
    }

    /// How many keys `newest_keys_in` would visit in `(lower, upper)`.
    /// Where no update within the range is pending, a count over the
    /// tree's entries without a visit per key: a ZRANK counts up to a
    /// block of 1,024 members, and the walk was a third of its CPU.
    pub fn count_newest_in(&self, lower: Bound<&[u8]>, upper: Bound<&[u8]>) -> usize {
        self.in_settled_range(lower, upper, |live| live.count())
            .unwrap_or_else(|| crate::walk::count(|visit| self.newest_keys_in(lower, upper, false, visit)))
    }

    /// The keys `newest_keys_in` would visit in `(lower, upper)` at
    /// `ranks` (ascending, distinct, from 0), found in one pass as
    /// `count_newest_in` counts (`Db::keys_at_ranks`).
    pub fn newest_at_ranks(&self, lower: Bound<&[u8]>, upper: Bound<&[u8]>, ranks: &[usize]) -> Vec<Vec<u8>> {
        let settled = |live: &mut dyn Iterator<Item = &[u8]>| {
            crate::walk::at_ranks(ranks, |visit| {
                for key in live {
                    if !visit(key) {
                        break;
                    }
                }
            })
        };
        self.in_settled_range(lower, upper, settled)
            .unwrap_or_else(|| crate::walk::at_ranks(ranks, |visit| self.newest_keys_in(lower, upper, false, visit)))
    }

    /// `f` of the live keys of the tree within `(lower, upper)`, if no
    /// update within the range is pending (then the tree alone has the
    /// newest state there); `None` otherwise.
    fn in_settled_range<T>(
        &self,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
        f: impl FnOnce(&mut dyn Iterator<Item = &[u8]>) -> T,
    ) -> Option<T> {
        let pending = (self.pending_entries.load(Ordering::Acquire) > 0).then(|| self.pending.read());
        let mut pending_within = false;
        if let Some(pending) = &pending {
            pending.visit_within(lower, upper, |_, _| pending_within = true);
        }
        if pending_within {
            return None;
        }
        // Released before the walk, which may be long (a random member of
        // a big set): the leader waits for this lock. Only once the tree's
        // is held: until then no table can freeze, so none with updates
        // within the range can be half merged while the walk reads; after
        // it, the leader's updates within the range are newer than the
        // walk, and no merge moves them into the tree under it.
        let tree = self.tree.read();
        drop(pending);
        let range = tree.heads.range(lower.map(KeyRef::new), upper.map(KeyRef::new));
        let mut live = range.filter(|(_, slot)| !slot.loc.is_tombstone()).map(|(key, _)| key.as_slice());
        let result = f(&mut live);
        Some(result)
    }

    /// Removes `key` if its newest version is still the entry at `at` and no
    /// snapshot needs an older one (GC dropping an expired entry).
    pub fn remove_if_at(&self, key: &[u8], at: Loc, segments: &SegmentSet) -> bool {
        let mut removed = false;
        self.remove_all_if_at(&[(key, at)], segments, |_, _| removed = true);
        removed
    }

    /// `remove_if_at` for each of `entries`, `MERGE_CHUNK` of them per hold
    /// of the tree's write lock (eviction drops thousands per segment);
    /// hands each location it removed to `removed`.
    pub fn remove_all_if_at<K: std::ops::Deref<Target = [u8]>>(
        &self,
        entries: &[(K, Loc)],
        segments: &SegmentSet,
        mut removed: impl FnMut(&[u8], Loc),
    ) {
        if entries.iter().any(|(key, _)| self.pending_get(key).is_some()) {
            // A key just written (lazy expiry, a write racing eviction):
            // rare enough to merge for.
            self.settle(segments);
        }
        for chunk in entries.chunks(MERGE_CHUNK) {
            let mut tree = self.tree.write();
            for (key, at) in chunk.iter().map(|(key, at)| (&**key, *at)) {
                let removable = tree.heads.get(KeyRef::new(key)).is_some_and(|slot| slot.loc == at)
                    && !tree.older.contains_key(KeyRef::new(key));
                if !removable {
                    continue;
                }
                if let Some(points) = &mut tree.points {
                    points.remove(key, at);
                }
                if let Some((key, _)) = tree.heads.remove_entry(KeyRef::new(key)) {
                    self.spilled_key_bytes.fetch_sub(key.heap_bytes(), Ordering::Relaxed);
                }
                self.live_keys.fetch_sub(1, Ordering::Relaxed);
                segments.with(at.seg, |s| {
                    s.live_bytes.fetch_sub(at.len as u64, Ordering::Relaxed);
                    segments.mark_dead(s, at.off);
                });
                removed(key, at);
            }
        }
    }

    /// Registers a snapshot at the current visible sequence number. First
    /// merges every pending update, as older versions are kept in the tree.
    pub fn register_snapshot(&self, segments: &SegmentSet) -> u64 {
        let deferring = self.defers_updates();
        let _merging = deferring.then(|| self.lock_merging());
        let _pending = deferring.then(|| {
            // Most of it without blocking the leader; then what arrived
            // meanwhile, under the lock that keeps the leader out until the
            // snapshot counts (from then on it applies to the tree).
            self.merge_pending(segments);
            let mut pending = self.pending.write();
            if let Some(frozen) = pending.frozen.take() {
                self.merge(&frozen, segments);
            }
            let rest = std::mem::take(&mut pending.active);
            self.merge(&rest, segments);
            self.pending_entries.store(0, Ordering::Release);
            pending.release_empty_tables();
            pending
        });
        // Hold the read lock so no group is half applied while we read the
        // visible sequence number and register it.
        let _tree = self.tree.read();
        let seq = self.visible_seq();
        let mut snapshots = self.snapshots.lock();
        *snapshots.entry(seq).or_insert(0) += 1;
        self.snapshot_count.fetch_add(1, Ordering::AcqRel);
        seq
    }

    /// Registers one more snapshot at `seq`, which a live snapshot holds
    /// already (so the versions it sees are kept, and none is pending).
    pub fn register_snapshot_at(&self, seq: u64) {
        let mut snapshots = self.snapshots.lock();
        let count = snapshots.get_mut(&seq).expect("a live snapshot holds the sequence number");
        *count += 1;
        self.snapshot_count.fetch_add(1, Ordering::AcqRel);
    }

    /// Runs `f` with the number of live snapshots while none can be
    /// registered or released.
    pub fn with_snapshot_count<T>(&self, f: impl FnOnce(usize) -> T) -> T {
        let _snapshots = self.snapshots.lock();
        f(self.snapshot_count.load(Ordering::Acquire))
    }

    /// Releases a snapshot; runs `on_last` (still under the registry lock)
    /// if it was the last one, then drops the versions kept for snapshots.
    pub fn release_snapshot(&self, seq: u64, on_last: impl FnOnce()) {
        let last = {
            let mut snapshots = self.snapshots.lock();
            let Some(count) = snapshots.get_mut(&seq) else { return };
            *count -= 1;
            if *count == 0 {
                snapshots.remove(&seq);
            }
            let last = self.snapshot_count.fetch_sub(1, Ordering::AcqRel) == 1;
            if last {
                on_last();
            }
            last
        };
        if last {
            self.prune_versions();
        }
    }

    /// With no snapshot registered, no reader can see an older version:
    /// drops them all, and the deletion markers kept only for them.
    /// (Taken after the registry lock is released: the lock order is the
    /// tree, then the registry.)
    fn prune_versions(&self) {
        if self.tree.read().older.is_empty() {
            return;
        }
        let mut guard = self.tree.write();
        // Registering a snapshot needs the tree's read lock, so none can
        // appear while this holds the write lock.
        if self.snapshot_count.load(Ordering::Acquire) > 0 {
            return;
        }
        let tree = &mut *guard;
        let (mut dropped, mut spilled) = (0u64, 0u64);
        for (key, versions) in std::mem::take(&mut tree.older) {
            dropped += versions.len() as u64;
            if tree.heads.get(KeyRef::new(&key)).is_some_and(|head| head.loc.is_tombstone()) {
                if let Some((key, _)) = tree.heads.remove_entry(KeyRef::new(&key)) {
                    spilled += key.heap_bytes();
                }
            }
        }
        self.chained_versions.fetch_sub(dropped, Ordering::Relaxed);
        self.spilled_key_bytes.fetch_sub(spilled, Ordering::Relaxed);
    }

    /// Applies one group of updates atomically for readers, then publishes
    /// `new_visible_seq`. Keeps live-byte counts of segments current.
    pub fn apply<'a>(&self, updates: impl Iterator<Item = Update<'a>>, new_visible_seq: u64, segments: &SegmentSet) {
        if self.defer_limit == 0 {
            return self.apply_to_tree(updates, new_visible_seq, segments);
        }
        let mut pending = self.pending.write();
        if self.snapshot_count.load(Ordering::Acquire) > 0 {
            // Registering the snapshot emptied `pending` under this lock.
            debug_assert_eq!(pending.len(), 0);
            return self.apply_to_tree(updates, new_visible_seq, segments);
        }
        let mut dead = Vec::new();
        let mut count = 0;
        for update in updates {
            count += 1;
            let (key, slot) = match update {
                Update::Put { key, loc, seq } => {
                    add_live(segments, loc);
                    (key, Slot::new(loc, seq))
                }
                Update::Delete { key, seq } => (key, Slot::new(Loc::TOMBSTONE, seq)),
                Update::Relocate { key, from, to } => {
                    let current = pending.get(key).or_else(|| self.tree.read().heads.get(KeyRef::new(key)).copied());
                    match current {
                        Some(current) if current.loc == from => {
                            add_live(segments, to);
                            (key, Slot::new(to, current.seq()))
                        }
                        _ => continue,
                    }
                }
            };
            // A version superseded before it reached the tree is dead now;
            // one in the tree or the frozen table, once the merge replaces it.
            if let Some(old) = pending.active.insert(key, slot) {
                remove_live(segments, old.loc, &mut dead);
            }
        }
        mark_dead(segments, &mut dead);
        self.applied_updates.fetch_add(count, Ordering::Relaxed);
        self.pending_entries.store(pending.len(), Ordering::Release);
        debug_assert!(new_visible_seq >= self.visible_seq());
        self.visible_seq.store(new_visible_seq, Ordering::Release);
        let active = pending.active.len();
        if active < self.defer_limit {
            return;
        }
        if pending.frozen.is_none() {
            pending.freeze();
            drop(pending);
            self.wake_merger();
            return;
        }
        // The merger fell behind (it shares the cores with everyone).
        drop(pending);
        self.merger_priority.raise();
        if active >= OVERFLOW_FACTOR * self.defer_limit {
            // Far behind: finish its table here, then hand it this one.
            let _merging = self.lock_merging();
            self.merge_frozen(segments);
            self.pending.write().freeze();
            self.wake_merger();
        }
    }

    fn apply_to_tree<'a>(
        &self,
        updates: impl Iterator<Item = Update<'a>>,
        new_visible_seq: u64,
        segments: &SegmentSet,
    ) {
        let mut guard = self.tree.write();
        let tree = &mut *guard;
        let snapshots_guard = (self.snapshot_count.load(Ordering::Acquire) > 0).then(|| self.snapshots.lock());
        let snapshots = snapshots_guard.as_deref();
        let mut deltas = Deltas::default();
        let mut count = 0;
        for update in updates {
            count += 1;
            match update {
                Update::Put { key, loc, seq } => {
                    add_live(segments, loc);
                    tree.put_head(key, Slot::new(loc, seq), snapshots, segments, &mut deltas);
                }
                Update::Delete { key, seq } => tree.delete_head(key, seq, snapshots, segments, &mut deltas),
                Update::Relocate { key, from, to } => {
                    if let Some(head) = tree.heads.get_mut(KeyRef::new(key)) {
                        if head.loc == from {
                            head.loc = to;
                            remove_live(segments, from, &mut deltas.dead);
                            add_live(segments, to);
                            if let Some(points) = &mut tree.points {
                                points.replace(key, from, to);
                            }
                        }
                    }
                }
            }
        }
        // Published before the tree is let go: a snapshot reads the number
        // under the tree's read lock, and one that read it between the two
        // found heads newer than itself with no older version kept for it
        // (a key missing from its view, or a version in a freed segment).
        debug_assert!(new_visible_seq >= self.visible_seq());
        self.visible_seq.store(new_visible_seq, Ordering::Release);
        drop(guard);
        self.applied_updates.fetch_add(count, Ordering::Relaxed);
        mark_dead(segments, &mut deltas.dead);
        self.add_deltas(&deltas);
    }

    fn add_deltas(&self, deltas: &Deltas) {
        if deltas.keys != 0 {
            self.live_keys.fetch_add(deltas.keys as u64, Ordering::Relaxed);
        }
        if deltas.spilled != 0 {
            self.spilled_key_bytes.fetch_add(deltas.spilled as u64, Ordering::Relaxed);
        }
        if deltas.chained != 0 {
            self.chained_versions.fetch_add(deltas.chained as u64, Ordering::Relaxed);
        }
    }

    /// Moves `map` into the tree a chunk at a time, so that readers wait
    /// for one chunk at most. No snapshot is registered: registering one
    /// needs `merging`, which the caller holds, and nothing is deferred
    /// while one is.
    fn merge(&self, map: &PendingMap, segments: &SegmentSet) {
        let mut deltas = Deltas::default();
        // In key order: consecutive keys share most of their path down the
        // tree, which stays in cache; hash order scattered them. fillrandom
        // 4M x 8/256 B gained 5-38% in each of 7 interleaved pairs.
        let mut sorted: Vec<&(Key, Slot)> = map.sorted();
        // Keys above every key held become a run of their own when there
        // are enough of them. The largest key cannot grow meanwhile: keys
        // reach the tree only by merges, which the caller's `merging`
        // serializes, or while a snapshot is registered, which takes it too.
        let within = match self.tree.read().heads.last_key() {
            Some(last) => sorted.partition_point(|(key, _)| key <= last),
            None => 0,
        };
        let above = if sorted.len() - within >= MIN_RUN_KEYS { sorted.split_off(within) } else { Vec::new() };
        let mut next = 0;
        loop {
            crate::background::pause_point();
            let mut tree = self.tree.write();
            let end = (next + MERGE_CHUNK).min(sorted.len());
            for at in next..end {
                // Each put looks its key's old location up in the point
                // table, a random line (a miss once the table outgrows the
                // cache): asked for ahead, as a read of many keys does.
                // SET -P 16 of 100 B values over 100k keys: a quarter of
                // the merger's time was that probe.
                if let (Some(points), Some((ahead, _))) = (&tree.points, sorted.get(at + POINTS_AHEAD)) {
                    points.prefetch(ahead);
                }
                let (key, slot) = sorted[at];
                if slot.loc.is_tombstone() {
                    tree.delete_head(key, slot.seq(), None, segments, &mut deltas);
                } else {
                    tree.put_head(key, *slot, None, segments, &mut deltas);
                }
            }
            drop(tree);
            mark_dead(segments, &mut deltas.dead);
            next = end;
            if next == sorted.len() {
                break;
            }
        }
        if !above.is_empty() {
            self.append_run(&above, &mut deltas);
        }
        self.add_deltas(&deltas);
    }

    /// Adds `entries`, sorted and above every key held, as a run built
    /// outside the lock (a deletion of a key the tree does not hold has
    /// nothing to delete).
    fn append_run(&self, entries: &[&(Key, Slot)], deltas: &mut Deltas) {
        let run: BTreeMap<Key, Slot> = entries
            .iter()
            .filter(|(_, slot)| !slot.loc.is_tombstone())
            .map(|(key, slot)| (key.clone(), *slot))
            .collect();
        deltas.keys += run.len() as i64;
        deltas.spilled += run.keys().map(Key::heap_bytes).sum::<u64>() as i64;
        let points: Vec<(Key, Loc)> = match self.tree.read().points.is_some() {
            true => run.iter().map(|(key, slot)| (key.clone(), slot.loc)).collect(),
            false => Vec::new(),
        };
        self.tree.write().heads.append_run(run);
        for chunk in points.chunks(MERGE_CHUNK) {
            crate::background::pause_point();
            let mut tree = self.tree.write();
            if let Some(table) = &mut tree.points {
                for (key, loc) in chunk {
                    table.insert(key, *loc);
                }
            }
        }
    }

    /// Merges the frozen table, if any, and lets readers stop looking at
    /// it. The caller holds `merging`.
    fn merge_frozen(&self, segments: &SegmentSet) {
        let Some(frozen) = self.pending.read().frozen.clone() else { return };
        self.merge(&frozen, segments);
        let mut pending = self.pending.write();
        pending.frozen = None;
        self.pending_entries.store(pending.len(), Ordering::Release);
        // Readers look at the frozen table only under the `pending` lock,
        // so the clone above is the last one. It becomes the spare under
        // this lock: a leader waiting with a full table freezes as soon as
        // the lock is free, and without a spare it grew a fresh table by
        // rehashing into new memory (60 of 184 tables in fillseq 4M x
        // 8/256 B). A table that grew past its limit (the merger fell
        // behind) is not kept: tables past L2 cost fillseq and reads
        // (BENCHMARKS.md, eleventh session).
        let unkept = match Arc::try_unwrap(frozen) {
            Ok(mut map) if map.capacity() <= 2 * self.defer_limit => {
                map.clear();
                pending.spare.get_or_insert(map);
                None
            }
            other => Some(other),
        };
        drop(pending);
        drop(unkept);
    }

    /// Merges every pending update: afterwards the tree holds everything
    /// applied before the call.
    pub fn settle(&self, segments: &SegmentSet) {
        if self.pending_entries.load(Ordering::Acquire) > 0 {
            let _merging = self.lock_merging();
            self.merge_pending(segments);
        }
    }

    /// Settles and frees the tables' memory: a settled index (idle, or
    /// measured by `stats`) holds none. Not while writes go on: without its
    /// spare the leader grows each new table by rehashing into fresh
    /// memory, which the kernel zeroes (10% of a fillseq profile, 3% after).
    pub fn settle_and_release(&self, segments: &SegmentSet) {
        self.settle(segments);
        if self.defers_updates() {
            self.pending.write().release_empty_tables();
        }
    }

    /// The background thread's call, every step: once no write was
    /// applied since its last call, settles, releases and rebuilds the
    /// tree dense. The updates left when writes pause need it (the merger
    /// takes only full tables); while writes go on the merger keeps up,
    /// and a merge every step only cost the writers their spare table.
    /// Under light writes it rebuilds one piece of a grown run. With
    /// `idle` (`Options::background_idle`) it rebuilds on idle cores only,
    /// until someone waits for `merging` (`IdleUntilNeeded`).
    pub fn background_step(&self, segments: &SegmentSet, idle: bool) {
        self.prepare_point_growth();
        let applied = self.applied_updates.load(Ordering::Relaxed);
        let writes = applied - self.updates_at_last_step.swap(applied, Ordering::Relaxed);
        let rebuild = match writes {
            0 => {
                self.settle_and_release(segments);
                self.finish_point_growth();
                Some((COMPACT_PER_IDLE_STEP, Rebuild::AnyChanged))
            }
            _ if writes <= LIGHT_WRITES_PER_STEP => Some((COMPACT_PIECE, Rebuild::Grown)),
            _ => None,
        };
        if let Some((budget, which)) = rebuild {
            // Readers right after a burst of writes share the cores with
            // it: GET `-P 16` p99 2.3 ms with it at nice 5, 2.0 ms on idle
            // cores (1.9 without rebuilds; BENCHMARKS.md, twenty-fifth
            // session).
            if idle {
                self.compactor_priority.enter();
            }
            self.compact(budget, which);
            self.compactor_priority.leave();
        }
    }

    /// Builds the point table's next, bigger table without the tree's lock
    /// once the current one nears full (`Points::growth_wanted`).
    fn prepare_point_growth(&self) {
        let Some(capacity) = self.tree.read().points.as_ref().and_then(Points::growth_wanted) else { return };
        let table = Points::prepared_table(capacity);
        let unused = self.tree.write().points.as_mut().map(|points| points.give_spare(table));
        // Dropped here, not under the lock: freeing it may unmap pages.
        drop(unused);
    }

    /// Completes a growth of the point table that inserts left half done,
    /// a few thousand buckets per hold of the tree's write lock.
    fn finish_point_growth(&self) {
        const BUCKETS_PER_HOLD: usize = 4096;
        while let Some(points) = &mut self.tree.write().points {
            if points.finish_growth(BUCKETS_PER_HOLD) {
                break;
            }
        }
    }

    /// Rebuilds the parts of the tree that inserts and removals changed
    /// (those `which` selects), with full leaves, a piece at a time, until
    /// about `budget` entries are rebuilt. Returns whether every part is
    /// rebuilt; `false` also when a piece changed between its copy and its
    /// swap (it is dropped, to be copied again later).
    ///
    /// Why: `std`'s B-tree splits a full leaf in half, so random inserts
    /// leave leaves ~70% full, and the engine's heap held 58 B per 8-byte
    /// key against 39 B for the tree a reopen bulk-builds.
    pub fn compact(&self, budget: usize, which: Rebuild) -> bool {
        let mut rebuilt = 0;
        while rebuilt < budget {
            // Merges would only make the piece stale.
            let _merging = self.lock_merging();
            // Cut the piece off as a run of its own, so that writes to the
            // rest of a long run do not spoil the copy: where, found under
            // the read lock (a walk of the piece's entries); the cut itself
            // under the write lock.
            let Some(point) = self.tree.read().heads.cut_point(COMPACT_PIECE, which) else { return true };
            if !self.tree.write().heads.cut_at(point) {
                return false;
            }
            let Some((place, entries)) = self.tree.read().heads.compaction_piece(COMPACT_PIECE, which) else {
                return true;
            };
            rebuilt += entries.len();
            let map: BTreeMap<Key, Slot> = entries.into_iter().collect();
            let replaced = self.tree.write().heads.replace_piece(place, map);
            // The old nodes are freed here, after the write lock.
            if replaced.is_none() {
                return false;
            }
        }
        false
    }

    /// Merges the frozen table, then what is active now. The caller holds
    /// `merging`.
    fn merge_pending(&self, segments: &SegmentSet) {
        self.merge_frozen(segments);
        // The leader may have frozen the rest meanwhile; `freeze` then
        // leaves what came after it.
        self.pending.write().freeze();
        self.merge_frozen(segments);
    }

    /// Whether updates are deferred: then someone must run `run_merger`.
    pub fn defers_updates(&self) -> bool {
        self.defer_limit > 0
    }

    /// Takes `merging`. If someone holds it (the merger, most often),
    /// first raises the merger and the compacting background thread, which
    /// may be waiting for an idle core in the middle of their work.
    fn lock_merging(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.merging.try_lock().unwrap_or_else(|| {
            self.merger_priority.raise();
            self.compactor_priority.raise();
            self.merging.lock()
        })
    }

    /// The merger thread's loop: merges each table the leader freezes,
    /// until `stop_merger`. With `idle` (`Options::background_idle`) it
    /// runs on idle cores only, until the leader or a thread waiting for
    /// `merging` finds it behind (`IdleUntilNeeded`).
    pub fn run_merger(&self, segments: &SegmentSet, idle: bool) {
        if idle {
            self.merger_priority.enter();
        }
        let mut state = self.merger.lock();
        loop {
            while !state.wanted && !state.stop {
                self.merger_signal.wait(&mut state);
            }
            if state.stop {
                drop(state);
                self.merger_priority.leave();
                return;
            }
            state.wanted = false;
            drop(state);
            if idle {
                // Paced from here: the time it slept is no work.
                crate::background::pace_this_thread();
            }
            {
                let _merging = self.merging.lock();
                self.merge_frozen(segments);
            }
            self.merger_priority.lower();
            state = self.merger.lock();
        }
    }

    pub fn stop_merger(&self) {
        self.merger.lock().stop = true;
        self.merger_signal.notify_all();
    }

    fn wake_merger(&self) {
        self.merger.lock().wanted = true;
        self.merger_signal.notify_one();
    }

    /// Calls `f` for every newest, non-deleted entry in key order (a fuzzy
    /// scan: entries changed during it may be seen before or after the
    /// change). Each chunk is copied out under the read lock and `f` runs
    /// without it: the checkpoint's `f` writes a file, and a group commit
    /// waiting for the write lock behind it stalled every client (1-4 ms
    /// holds, 15-37 ms when the checkpoint thread was preempted meanwhile).
    pub fn for_each_chunked(&self, chunk: usize, mut f: impl FnMut(&[u8], &Slot)) {
        let mut cursor: Option<Key> = None;
        let mut copied: Vec<(Key, Slot)> = Vec::with_capacity(chunk);
        loop {
            {
                let tree = self.tree.read();
                let lower = match &cursor {
                    Some(key) => Bound::Excluded(KeyRef::new(key)),
                    None => Bound::Unbounded,
                };
                copied.extend(tree.heads.range(lower, Bound::Unbounded).take(chunk).map(|(k, s)| (k.clone(), *s)));
            }
            let Some((last, _)) = copied.last() else { return };
            cursor = Some(last.clone());
            for (key, slot) in copied.drain(..) {
                if !slot.loc.is_tombstone() {
                    f(&key, &slot);
                }
            }
        }
    }

    /// Whether `key`'s newest version is still at `loc` (GC liveness test).
    pub fn points_at(&self, key: &[u8], loc: Loc) -> bool {
        if let Some(slot) = self.pending_get(key) {
            return slot.loc == loc;
        }
        let tree = self.tree.read();
        match tree.points.as_ref().and_then(|points| points.contains(key, loc)) {
            Some(contained) => contained,
            None => tree.heads.get(KeyRef::new(key)).is_some_and(|slot| slot.loc == loc),
        }
    }

    /// Adds the next `chunk` keys to the point table under one write-lock
    /// hold; returns whether it is complete (or turned off).
    pub fn fill_points(&self, chunk: usize) -> bool {
        let mut guard = self.tree.write();
        let tree = &mut *guard;
        let Some(points) = &mut tree.points else { return true };
        let heads = &tree.heads;
        points.fill_from(
            heads.len(),
            |after| {
                let lower = after.map_or(Bound::Unbounded, |key| Bound::Excluded(KeyRef::new(key)));
                heads.range(lower, Bound::Unbounded).map(|(key, slot)| (key, slot.loc))
            },
            chunk,
        )
    }

    /// Estimated DRAM bytes held by the index, in all and by part.
    pub fn memory(&self) -> IndexMemory {
        let tree = self.tree.read();
        let spilled = self.spilled_key_bytes.load(Ordering::Relaxed) as usize;
        let entry = std::mem::size_of::<Key>() + std::mem::size_of::<Slot>();
        let nodes = tree.heads.node_bytes(entry);
        let chained = self.chained_versions.load(Ordering::Relaxed) as usize * std::mem::size_of::<Slot>();
        let points = tree.points.as_ref().map_or(0, Points::memory_bytes) as u64;
        drop(tree);
        let pending = self.pending.read().memory_bytes();
        IndexMemory { total: (nodes + spilled + chained) as u64 + points + pending, points, pending }
    }
}

/// The index's estimated DRAM (`Index::memory`): in all, the B-tree (its
/// nodes, keys too long to store inline, versions kept for snapshots) and
/// the parts below; the point table (`points.rs`, with the old or spare
/// table of a growth), and the updates waiting for the merger
/// (`pending.rs`).
pub struct IndexMemory {
    pub total: u64,
    pub points: u64,
    pub pending: u64,
}

/// Replaces `key`'s older versions by those still needed after `old` was
/// just superseded by a version at `new_seq`: a version stays only while
/// some snapshot falls in `[its seq, next newer kept seq)`. Returns whether
/// any older version is kept.
fn retain_for_snapshots(
    older: &mut BTreeMap<Key, Vec<Slot>>,
    key: &[u8],
    old: Slot,
    new_seq: u64,
    snapshots: Option<&BTreeMap<u64, usize>>,
    chained_delta: &mut i64,
) -> bool {
    let previous = if older.is_empty() { None } else { older.remove(KeyRef::new(key)) };
    *chained_delta -= previous.as_ref().map_or(0, Vec::len) as i64;
    let Some(snapshots) = snapshots else { return false };
    let needed = |from: u64, to: u64| snapshots.range(from..to).next().is_some();
    let mut kept = Vec::new();
    let mut newer_seq = new_seq;
    for version in std::iter::once(old).chain(previous.into_iter().flatten()) {
        if needed(version.seq(), newer_seq) {
            newer_seq = version.seq();
            kept.push(version);
        }
    }
    *chained_delta += kept.len() as i64;
    if kept.is_empty() {
        return false;
    }
    older.insert(Key::from_slice(key), kept);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(n: u32) -> Loc {
        Loc { seg: 0, off: n, len: 1 }
    }

    #[test]
    fn snapshot_keeps_the_version_it_saw_and_only_that() {
        let segments = SegmentSet::default();
        let index = Index::new(BTreeMap::new(), 0, 0, Some(Points::new(32)), 0);
        assert!(index.fill_points(1));
        index.apply([Update::Put { key: b"k", loc: loc(1), seq: 1 }].into_iter(), 1, &segments);
        let s1 = index.register_snapshot(&segments);
        index.apply([Update::Put { key: b"k", loc: loc(2), seq: 2 }].into_iter(), 2, &segments);
        index.apply([Update::Put { key: b"k", loc: loc(3), seq: 3 }].into_iter(), 3, &segments);
        assert_eq!(index.get(b"k", Some(s1)), Some(loc(1)));
        assert_eq!(index.get(b"k", None), Some(loc(3)));
        // Version 2 was never visible to a snapshot, so it is not retained.
        assert_eq!(index.chained_versions.load(Ordering::Relaxed), 1);
        index.apply([Update::Delete { key: b"k", seq: 4 }].into_iter(), 4, &segments);
        assert_eq!(index.get(b"k", None), None);
        assert_eq!(index.get(b"k", Some(s1)), Some(loc(1)));
        index.release_snapshot(s1, || {});
        // The last snapshot gone, the kept version and the deletion go too.
        assert_eq!(index.chained_versions.load(Ordering::Relaxed), 0);
        assert!(index.tree.read().heads.is_empty() && index.tree.read().older.is_empty());
        index.apply([Update::Put { key: b"k", loc: loc(5), seq: 5 }].into_iter(), 5, &segments);
        assert_eq!(index.get(b"k", None), Some(loc(5)));
        assert_eq!(index.chained_versions.load(Ordering::Relaxed), 0);
    }

    /// A snapshot registered while a group is being applied sees the key
    /// as of its own sequence number: the version before the group, never
    /// none. (A snapshot that read the visible sequence number after the
    /// group's heads were in the tree but before the number was published
    /// found a head newer than itself and no older version kept for it.)
    #[test]
    fn a_snapshot_taken_during_an_apply_sees_the_version_before_it() {
        for defer_limit in [0, 2] {
            let segments = SegmentSet::default();
            let index = Index::new(BTreeMap::new(), 0, 0, None, defer_limit);
            index.apply([Update::Put { key: b"k", loc: loc(1), seq: 1 }].into_iter(), 1, &segments);
            let stop = std::sync::atomic::AtomicBool::new(false);
            std::thread::scope(|scope| {
                scope.spawn(|| {
                    // The race is a few instructions wide; before the fix
                    // this caught it in 6 of 6 release and 2 of 3 debug runs.
                    let until = std::time::Instant::now() + std::time::Duration::from_millis(300);
                    let mut seq = 1;
                    while std::time::Instant::now() < until {
                        for _ in 0..1000 {
                            seq += 1;
                            let put = Update::Put { key: b"k", loc: loc(seq), seq: seq as u64 };
                            index.apply([put].into_iter(), seq as u64, &segments);
                        }
                    }
                    stop.store(true, Ordering::Relaxed);
                });
                while !stop.load(Ordering::Relaxed) {
                    let seq = index.register_snapshot(&segments);
                    let seen = index.get(b"k", Some(seq));
                    index.release_snapshot(seq, || {});
                    assert!(seen.is_some_and(|at| at.off as u64 <= seq), "snapshot at {seq} saw {seen:?}");
                }
            });
        }
    }

    #[test]
    fn long_keys_are_counted_in_memory_without_a_walk() {
        let segments = SegmentSet::default();
        let index = Index::new(BTreeMap::new(), 0, 0, Some(Points::new(32)), 0);
        assert!(index.fill_points(1));
        let long = [7u8; 40];
        index.apply([Update::Put { key: &long, loc: loc(1), seq: 1 }].into_iter(), 1, &segments);
        index.apply([Update::Put { key: &long, loc: loc(2), seq: 2 }].into_iter(), 2, &segments);
        index.apply([Update::Put { key: b"short", loc: loc(3), seq: 3 }].into_iter(), 3, &segments);
        assert_eq!(index.spilled_key_bytes.load(Ordering::Relaxed), 40);
        index.apply([Update::Delete { key: &long, seq: 4 }].into_iter(), 4, &segments);
        assert_eq!(index.spilled_key_bytes.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn relocation_applies_only_if_the_key_did_not_move() {
        let segments = SegmentSet::default();
        let index = Index::new(BTreeMap::new(), 0, 0, Some(Points::new(32)), 0);
        assert!(index.fill_points(1));
        index.apply([Update::Put { key: b"k", loc: loc(1), seq: 1 }].into_iter(), 1, &segments);
        index.apply([Update::Relocate { key: b"k", from: loc(9), to: loc(7) }].into_iter(), 1, &segments);
        assert_eq!(index.get(b"k", None), Some(loc(1)));
        index.apply([Update::Relocate { key: b"k", from: loc(1), to: loc(7) }].into_iter(), 1, &segments);
        assert_eq!(index.get(b"k", None), Some(loc(7)));
    }

    /// The point table agrees with the B-tree while it is being filled,
    /// under puts, deletes and relocations on both sides of its coverage,
    /// with full tags and with tags so narrow that most keys share one.
    #[test]
    fn point_table_agrees_with_the_tree_while_filling() {
        for (tag_bits, defer_limit) in [(32, 0), (2, 0), (32, 5), (2, 5)] {
            let segments = SegmentSet::default();
            let initial: BTreeMap<Key, Slot> =
                (0u32..300).map(|i| (Key::from_slice(format!("key{i:05}").as_bytes()), Slot::new(loc(i), 1))).collect();
            let index = Index::new(initial, 1, 0, Some(Points::new(tag_bits)), defer_limit);
            let mut state = 12345u64;
            let mut next = |n: u64| {
                state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                (state >> 33) % n
            };
            let mut filled = false;
            for round in 0u32..400 {
                let key = format!("key{:05}", next(400));
                let seq = 2 + round as u64;
                let at = loc(1000 + round);
                let update = match next(3) {
                    0 => Update::Put { key: key.as_bytes(), loc: at, seq },
                    1 => Update::Delete { key: key.as_bytes(), seq },
                    _ => match index.get_ordered(key.as_bytes(), None) {
                        Some(from) => Update::Relocate { key: key.as_bytes(), from, to: at },
                        None => Update::Put { key: key.as_bytes(), loc: at, seq },
                    },
                };
                index.apply([update].into_iter(), seq, &segments);
                if round % 20 == 0 && !filled {
                    filled = index.fill_points(16);
                }
                for i in 0..400 {
                    let key = format!("key{i:05}");
                    let (hashed, exact) = (index.get(key.as_bytes(), None), index.get_ordered(key.as_bytes(), None));
                    match exact {
                        Some(_) => assert_eq!(hashed, exact, "{key}, {tag_bits} tag bits"),
                        // An absent key may share a tag with a present one,
                        // whose location readers then find holds another key.
                        None => assert!(hashed.is_none() || tag_bits < 32, "{key}"),
                    }
                    assert_eq!(exact.is_some_and(|l| index.points_at(key.as_bytes(), l)), exact.is_some());
                }
            }
            assert!(filled, "20 fills of 16 cover 300 keys");
        }
    }

    /// A merger idling in the middle of a merge is raised by whoever waits
    /// for `merging`, and by a leader that fills a table while the frozen
    /// one is still unmerged.
    #[cfg(target_os = "linux")]
    #[test]
    fn an_idle_merger_is_raised_when_someone_waits_for_it() {
        use crate::background::tests::{entered_policy, policy_becomes};
        let segments = SegmentSet::default();
        let index = Index::new(BTreeMap::new(), 0, 0, None, 3);
        let idle = entered_policy();
        let (to_merger, commands) = std::sync::mpsc::channel::<()>();
        let (to_test, replies) = std::sync::mpsc::channel::<i32>();
        let index = &index;
        std::thread::scope(|scope| {
            // Stands in for `run_merger`: enters, then holds `merging`
            // from one message to the next, and lowers itself after.
            scope.spawn(move || {
                index.merger_priority.enter();
                to_test.send(crate::background::this_thread_id()).unwrap();
                while commands.recv().is_ok() {
                    let merging = index.merging.lock();
                    to_test.send(0).unwrap();
                    commands.recv().unwrap();
                    drop(merging);
                    index.merger_priority.lower();
                    to_test.send(0).unwrap();
                }
                index.merger_priority.leave();
            });
            let tid = replies.recv().unwrap();
            policy_becomes(tid, idle);

            to_merger.send(()).unwrap();
            replies.recv().unwrap();
            let waiter = scope.spawn(|| drop(index.lock_merging()));
            policy_becomes(tid, libc::SCHED_OTHER);
            to_merger.send(()).unwrap();
            replies.recv().unwrap();
            waiter.join().unwrap();
            policy_becomes(tid, idle);

            // The first full table is frozen; the next one finds it unmerged.
            for seq in 1..=5u32 {
                let key = seq.to_be_bytes();
                index.apply(
                    [Update::Put { key: &key, loc: loc(seq), seq: seq as u64 }].into_iter(),
                    seq as u64,
                    &segments,
                );
                // SAFETY: reads a thread's policy.
                assert_eq!(unsafe { libc::sched_getscheduler(tid) }, idle, "after {seq} puts");
            }
            index.apply([Update::Put { key: b"6", loc: loc(6), seq: 6 }].into_iter(), 6, &segments);
            policy_becomes(tid, libc::SCHED_OTHER);
            drop(to_merger);
        });
    }

    /// Deferred updates (no merger thread: the leader's overflow merge and
    /// `settle` do the merging) read like a model at every step, and the
    /// tree holds exactly the model once settled; a snapshot merges
    /// everything and sees what it should while writes go to the tree.
    #[test]
    fn deferred_updates_match_a_model_before_and_after_merging() {
        let segments = SegmentSet::default();
        let index = Index::new(BTreeMap::new(), 0, 0, Some(Points::new(32)), 3);
        assert!(index.fill_points(1));
        let mut model: BTreeMap<Vec<u8>, (Loc, u64)> = BTreeMap::new();
        let mut state = 99u64;
        let mut next = |n: u64| {
            state = state.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (state >> 33) % n
        };
        let mut seq = 0;
        type Seen = BTreeMap<Vec<u8>, (Loc, u64)>;
        let mut snapshot: Option<(u64, Seen)> = None;
        for round in 0u32..2000 {
            let key = format!("k{:02}", next(40)).into_bytes();
            seq += 1;
            let at = loc(1000 + round);
            let update = match (next(4), model.get(&key)) {
                (0, _) => {
                    model.remove(&key);
                    Update::Delete { key: &key, seq }
                }
                (1, Some(&(from, old_seq))) => {
                    model.insert(key.clone(), (at, old_seq));
                    // A relocated entry is the same version: a snapshot
                    // that sees it finds it at its new place.
                    if let Some(version) = snapshot.as_mut().and_then(|(_, seen)| seen.get_mut(&key)) {
                        if version.0 == from {
                            version.0 = at;
                        }
                    }
                    Update::Relocate { key: &key, from, to: at }
                }
                // A relocation of a version that is no longer the newest.
                (1, None) => Update::Relocate { key: &key, from: loc(1), to: at },
                _ => {
                    model.insert(key.clone(), (at, seq));
                    Update::Put { key: &key, loc: at, seq }
                }
            };
            index.apply([update].into_iter(), seq, &segments);
            let probe = format!("k{:02}", next(40)).into_bytes();
            let expected = model.get(&probe).map(|&(l, _)| l);
            assert_eq!(index.get(&probe, None), expected, "round {round}");
            assert_eq!(index.get_ordered(&probe, None), expected, "round {round}");
            assert_eq!(expected.is_some_and(|l| index.points_at(&probe, l)), expected.is_some());
            // Without a merger the leader merges a frozen table once the active
            // one reaches the overflow size, then freezes that one.
            assert!(index.pending_entries.load(Ordering::Relaxed) <= 2 * OVERFLOW_FACTOR * 3);
            match round % 500 {
                100 => {
                    snapshot = Some((index.register_snapshot(&segments), model.clone()));
                    assert_eq!(index.pending_entries.load(Ordering::Relaxed), 0);
                }
                300 => {
                    let (at_seq, seen) = snapshot.take().unwrap();
                    for k in 0..40 {
                        let key = format!("k{k:02}").into_bytes();
                        assert_eq!(index.get(&key, Some(at_seq)), seen.get(&key).map(|&(l, _)| l), "{k}");
                    }
                    index.release_snapshot(at_seq, || {});
                }
                499 => {
                    assert_eq!(index.len(&segments), model.len());
                    let tree = index.tree.read();
                    let heads: Vec<(Vec<u8>, Loc, u64)> =
                        tree.heads.iter().map(|(k, s)| (k.as_slice().to_vec(), s.loc, s.seq())).collect();
                    let want: Vec<(Vec<u8>, Loc, u64)> = model.iter().map(|(k, &(l, s))| (k.clone(), l, s)).collect();
                    assert_eq!(heads, want);
                }
                _ => {}
            }
        }
    }

    /// Sequential keys: each table of new keys above the tree becomes a
    /// run of its own; with overwrites, deletions (of held keys and of
    /// keys still pending) and the point table the index still reads
    /// like a model, and the tree holds it exactly once settled.
    #[test]
    fn tables_of_new_keys_above_the_tree_become_runs() {
        let segments = SegmentSet::default();
        let index = Index::new(BTreeMap::new(), 0, 0, Some(Points::new(32)), 2 * MIN_RUN_KEYS);
        assert!(index.fill_points(1));
        let mut model: BTreeMap<Vec<u8>, Loc> = BTreeMap::new();
        let key = |n: u32| format!("key:{n:08}").into_bytes();
        let mut seq = 0u64;
        for n in 0..12 * MIN_RUN_KEYS as u32 {
            let mut updates = vec![(key(n), Some(loc(n)))];
            match n % 10 {
                // Deleted while still pending: a tombstone above the tree.
                3 => updates.push((key(n), None)),
                // An overwrite and a deletion of keys a merge may hold.
                7 => updates.extend([(key(n / 2), Some(loc(n + 1))), (key(n / 3), None)]),
                _ => {}
            }
            for (k, l) in updates {
                seq += 1;
                let update = match l {
                    Some(l) => Update::Put { key: &k, loc: l, seq },
                    None => Update::Delete { key: &k, seq },
                };
                index.apply([update].into_iter(), seq, &segments);
                match l {
                    Some(l) => model.insert(k, l),
                    None => model.remove(&k),
                };
            }
            if index.pending.read().frozen.is_some() {
                index.merge_frozen(&segments);
            }
            let probe = key(n.wrapping_mul(7919) % (n + 1));
            assert_eq!(index.get(&probe, None), model.get(&probe).copied(), "{n}");
            assert_eq!(index.get_ordered(&probe, None), model.get(&probe).copied(), "{n}");
        }
        index.settle(&segments);
        let tree = index.tree.read();
        assert!(tree.heads.run_count() >= 4, "{} runs", tree.heads.run_count());
        let heads: Vec<(Vec<u8>, Loc)> = tree.heads.iter().map(|(k, s)| (k.as_slice().to_vec(), s.loc)).collect();
        assert_eq!(heads, model.iter().map(|(k, &l)| (k.clone(), l)).collect::<Vec<_>>());
        drop(tree);
        assert_eq!(index.len(&segments), model.len());
        for (k, &l) in &model {
            assert!(index.points_at(k, l));
        }
    }

    #[test]
    fn background_settles_only_once_writes_pause_and_merges_keep_a_spare() {
        let segments = SegmentSet::default();
        let index = Index::new(BTreeMap::new(), 0, 0, None, 4);
        let put = |n: u32| {
            let key = format!("k{n:03}").into_bytes();
            index.apply(
                [Update::Put { key: &key, loc: loc(n), seq: n as u64 + 1 }].into_iter(),
                n as u64 + 1,
                &segments,
            );
        };
        for n in 0..6 {
            put(n);
        }
        // The fourth put froze a table; merging it leaves it as the spare.
        assert!(index.pending.read().frozen.is_some());
        index.merge_frozen(&segments);
        assert!(index.pending.read().spare.is_some());
        assert_eq!(index.pending_entries.load(Ordering::Relaxed), 2);
        // Writes since the last check: nothing merged, the spare kept.
        index.background_step(&segments, false);
        assert_eq!(index.pending_entries.load(Ordering::Relaxed), 2);
        assert!(index.pending.read().spare.is_some());
        // No write since: all merged, the tables' memory freed.
        index.background_step(&segments, false);
        assert_eq!(index.pending_entries.load(Ordering::Relaxed), 0);
        assert!(index.pending.read().spare.is_none());
        assert_eq!(index.tree.read().heads.len(), 6);
        assert!(
            index.tree.read().heads.compaction_piece(1, Rebuild::AnyChanged).is_none(),
            "an idle index is rebuilt dense"
        );
        put(6);
        index.settle(&segments);
        assert_eq!((index.pending_entries.load(Ordering::Relaxed), index.len(&segments)), (0, 7));
        assert!(index.tree.read().heads.compaction_piece(1, Rebuild::AnyChanged).is_some());
    }

    #[test]
    fn light_writes_do_not_keep_a_grown_tree_from_being_rebuilt() {
        let segments = SegmentSet::default();
        let index = Index::new(BTreeMap::new(), 0, 0, None, 0);
        let mut seq = 0u64;
        let mut put = |n: u64| {
            seq += 1;
            let key = n.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_be_bytes();
            index.apply([Update::Put { key: &key, loc: loc(n as u32), seq }].into_iter(), seq, &segments);
        };
        let keys = 3 * COMPACT_PIECE as u64;
        for n in 0..keys {
            put(n);
        }
        let grown = index.memory().total;
        index.background_step(&segments, false);
        assert!(index.tree.read().heads.compaction_piece(1, Rebuild::Grown).is_some());
        // A few new keys between steps: one piece rebuilt per step, never idle.
        for step in 0..4 {
            for n in 0..10 {
                put(keys + step * 10 + n);
            }
            index.background_step(&segments, false);
        }
        assert!(index.tree.read().heads.compaction_piece(1, Rebuild::Grown).is_none());
        let rebuilt = index.memory().total;
        assert!(rebuilt * 10 < grown * 8, "{rebuilt} bytes after the rebuild, {grown} before");
        // Heavy writes (more than a light step's worth): left alone.
        for n in 0..LIGHT_WRITES_PER_STEP + 1 {
            put(keys + 100 + n);
        }
        index.background_step(&segments, false);
        assert!(index.tree.read().heads.compaction_piece(1, Rebuild::Grown).is_some());
        index.compact(usize::MAX, Rebuild::Grown);
        // As heavy in a few batches (the server's pipelines): each entry counts.
        let keys: Vec<[u8; 8]> = (0..LIGHT_WRITES_PER_STEP + 1).map(|n| ((n + 1) << 40).to_be_bytes()).collect();
        for (batch, keys) in keys.chunks(keys.len() / 2 + 1).enumerate() {
            let seq = (1 << 40) + batch as u64;
            let updates = keys.iter().enumerate().map(|(i, key)| Update::Put { key, loc: loc(i as u32), seq });
            index.apply(updates, seq, &segments);
        }
        let before = index.memory().total;
        index.background_step(&segments, false);
        assert_eq!(index.memory().total, before, "nothing rebuilt");
    }
}
