//! The newest version of every key, in key order: a B-tree cut into runs
//! of disjoint key ranges.
//!
//! Why runs: the merger moves each pending table into the tree in key
//! order, and where the keys are new and larger than every key held
//! (fillseq, time-ordered or counter keys) `std`'s B-tree still descends
//! for each one, scanning every node on the right edge linearly: 60-70
//! key comparisons per insert, a quarter of fillseq's CPU (4M x 8/256 B).
//! Such a batch becomes a run of its own instead, bulk-built in one pass
//! with full leaves. A lookup finds its run by binary search over the
//! runs' first keys, then descends a smaller tree.
//!
//! Random inserts leave a run's leaves ~70% full (`std` splits a full
//! leaf in half). A compaction rebuilds such runs with full leaves, a piece
//! of at most a given number of entries at a time, each piece a run of its
//! own (`cut_piece`, `compaction_piece`, `replace_piece`). A piece is cut
//! off as a run first and each run counts its own changes, so that only a
//! change to the piece's keys spoils its rebuild: under a steady trickle of
//! writes a count over the whole tree, or over a run that holds every key,
//! changed during most rebuilds (BENCHMARKS.md, eighteenth session).
//!
//! Run `i` holds the keys in `[lower(i), lower(i + 1))`; the first run
//! also holds every key below `lower(1)`. Every run but a lone one is
//! non-empty.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::ops::Bound;

use super::key::{Key, KeyRef};
use super::memtable::Slot;

/// Fewest keys that start a run: bounds the number of runs by the keys
/// held / 1024, so that finding a run stays a short binary search.
pub const MIN_RUN_KEYS: usize = 1024;

/// Rebuilding a run of `n` entries under writes is worth it once it grew
/// by `n / GROWN_SHARE` keys since it was built: each insert into a full
/// leaf splits it, ~10 free slots, so ~3% new keys leave ~30% slack.
/// Growth, not changes: under churn (as many keys removed as inserted: a
/// cache evicting) the slack a rebuild removes comes back as fast, and
/// rebuilding a piece of 16K entries every 100 ms took 9% of the server's
/// CPU at 12k SETs/s into a 64 MB cache (BENCHMARKS.md, thirty-fifth
/// session).
const GROWN_SHARE: usize = 32;
/// Free entry slots a split leaves (a leaf holds 11 entries).
const SLACK_PER_SPLIT: usize = 10;

struct Run {
    /// The run's smallest possible key (unused for the first run).
    lower: Key,
    map: BTreeMap<Key, Slot>,
    /// Keys inserted or removed since the run was bulk-built (with full
    /// leaves); 0 means dense.
    reshaped: usize,
    /// Keys inserted less keys removed since then: under churn it wanders
    /// about 0 (a count kept at least 0 would drift up).
    grown: isize,
    /// Counts the calls that may have changed an entry of this run.
    changes: u64,
}

impl Run {
    fn built(lower: Key, map: BTreeMap<Key, Slot>) -> Run {
        Run { lower, map, reshaped: 0, grown: 0, changes: 0 }
    }

    fn is_dense(&self) -> bool {
        self.reshaped == 0
    }
}

pub struct Runs {
    runs: Vec<Run>,
    /// Counts the changes to which runs there are and where they start:
    /// with each run's `changes`, a compaction replaces the entries it
    /// copied only if none changed between.
    layout: u64,
}

/// Which changed runs a compaction rebuilds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rebuild {
    /// Every run a key was inserted into or removed from.
    AnyChanged,
    /// Runs that grew by enough keys to be worth rebuilding (`GROWN_SHARE`).
    Grown,
}

/// Where `Runs::cut_piece` would cut a run, found without changing it.
pub struct CutPoint {
    layout: u64,
    run: usize,
    /// The first key of the part cut off (`None`: the run is small enough).
    at: Option<Key>,
}

/// Where the entries of a compaction piece came from.
pub struct PiecePlace {
    layout: u64,
    /// The sum of the covered runs' `changes` (each only grows).
    changes: u64,
    first_run: usize,
    /// Runs the piece holds, from `first_run`.
    runs: usize,
}

impl Default for Runs {
    fn default() -> Runs {
        Runs::from(BTreeMap::new())
    }
}

/// A tree that was bulk-built (recovery builds one from the checkpoint).
impl From<BTreeMap<Key, Slot>> for Runs {
    fn from(map: BTreeMap<Key, Slot>) -> Runs {
        Runs { runs: vec![Run::built(Key::default(), map)], layout: 0 }
    }
}

impl Runs {
    /// The run that holds `key` or would.
    fn run_of(&self, key: &KeyRef) -> usize {
        self.runs[1..].partition_point(|run| <Key as Borrow<KeyRef>>::borrow(&run.lower) <= key)
    }

    pub fn len(&self) -> usize {
        self.runs.iter().map(|run| run.map.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.runs.iter().all(|run| run.map.is_empty())
    }

    #[cfg(test)]
    pub fn run_count(&self) -> usize {
        self.runs.len()
    }

    pub fn get(&self, key: &KeyRef) -> Option<&Slot> {
        self.runs[self.run_of(key)].map.get(key)
    }

    pub fn get_mut(&mut self, key: &KeyRef) -> Option<&mut Slot> {
        let index = self.run_of(key);
        let run = &mut self.runs[index];
        run.changes += 1;
        run.map.get_mut(key)
    }

    /// Sets `key`'s slot; returns the one it replaced (the key held then
    /// stays, `key` is dropped).
    pub fn insert(&mut self, key: Key, slot: Slot) -> Option<Slot> {
        let index = self.run_of(key.borrow());
        let run = &mut self.runs[index];
        run.changes += 1;
        let old = run.map.insert(key, slot);
        run.reshaped += old.is_none() as usize;
        run.grown += old.is_none() as isize;
        old
    }

    /// Estimated heap bytes of the trees' nodes for entries of
    /// `entry_bytes`. Measured with the bench's counting allocator: a
    /// bulk-built tree holds 1.06-1.07 times its entries' bytes (the
    /// engine's whole heap after fillseq of 4M 8-byte keys, 39 B per
    /// 37-byte entry), one grown by inserts 1.54-1.57 times (67.7 B for a 44-byte
    /// entry, 58.1 B for a 37-byte one, 1.26M random keys). Between the
    /// two, each key inserted or removed since the build counts for the
    /// slots a leaf split frees.
    pub fn node_bytes(&self, entry_bytes: usize) -> usize {
        let hundredth_slots: usize = self
            .runs
            .iter()
            .map(|run| {
                let len = run.map.len();
                len * 107 + (run.reshaped * SLACK_PER_SPLIT * 100).min(len * 43)
            })
            .sum();
        hundredth_slots * entry_bytes / 100
    }

    pub fn remove_entry(&mut self, key: &KeyRef) -> Option<(Key, Slot)> {
        let index = self.run_of(key);
        let run = &mut self.runs[index];
        run.changes += 1;
        let removed = run.map.remove_entry(key);
        run.reshaped += removed.is_some() as usize;
        run.grown -= removed.is_some() as isize;
        if run.map.is_empty() && self.runs.len() > 1 {
            // Its range joins the run before it (or, for the first, the
            // next run takes everything below its own lower bound).
            self.runs.remove(index);
            self.layout += 1;
        }
        removed
    }

    /// The largest key held.
    pub fn last_key(&self) -> Option<&Key> {
        self.runs.iter().rev().find_map(|run| run.map.last_key_value()).map(|(key, _)| key)
    }

    /// Adds `map`, whose every key is larger than `last_key()`, as a run
    /// of its own. Build it from sorted entries (`BTreeMap::from_iter`
    /// bulk-builds those in one pass, with full leaves).
    pub fn append_run(&mut self, map: BTreeMap<Key, Slot>) {
        let Some((first, _)) = map.first_key_value() else { return };
        debug_assert!(self.last_key().is_none_or(|last| last < first));
        self.layout += 1;
        if self.is_empty() {
            self.runs = vec![Run::built(Key::default(), map)];
        } else {
            self.runs.push(Run::built(first.clone(), map));
        }
    }

    /// The first run `which` selects.
    fn selected(&self, which: Rebuild) -> Option<usize> {
        self.runs.iter().position(|run| {
            !run.is_dense()
                && !run.map.is_empty()
                && (which == Rebuild::AnyChanged || run.grown * GROWN_SHARE as isize >= run.map.len() as isize)
        })
    }

    /// Cuts the first `max` entries of the first run `which` selects off
    /// as a run of their own, if it holds more, so that a piece copied
    /// from them (`compaction_piece`) is spoiled only by changes to those
    /// keys, not by writes anywhere in a run that may hold every key.
    /// Returns whether a run is selected. (The index cuts in two steps
    /// under two locks: `cut_point`, `cut_at`.)
    #[cfg(test)]
    pub fn cut_piece(&mut self, max: usize, which: Rebuild) -> bool {
        match self.cut_point(max, which) {
            None => false,
            Some(point) => {
                self.cut_at(point);
                true
            }
        }
    }

    /// Where `cut_piece` would cut (`None`: no run is selected). Walks
    /// `max` entries, only where it cuts: the index does it under its read
    /// lock, so that readers need not wait for the walk (16K entries, a
    /// fraction of a millisecond; 16 of them per background step right
    /// after a burst of writes set GET `-P 16`'s p99).
    pub fn cut_point(&self, max: usize, which: Rebuild) -> Option<CutPoint> {
        let index = self.selected(which)?;
        let (map, max) = (&self.runs[index].map, max.max(1));
        let at = map.keys().nth(max).cloned();
        Some(CutPoint { layout: self.layout, run: index, at })
    }

    /// Cuts where `cut_point` found, unless the runs were rearranged since
    /// (then nothing changes, and a later call finds a new point). Entries
    /// put or removed since do not matter: cutting anywhere in a run keeps
    /// the runs disjoint, so long as both parts hold a key.
    pub fn cut_at(&mut self, point: CutPoint) -> bool {
        let Some(rest_lower) = point.at else { return true };
        if point.layout != self.layout {
            return false;
        }
        let run = &mut self.runs[point.run];
        let at: &KeyRef = rest_lower.borrow();
        let first_below = run.map.first_key_value().is_some_and(|(first, _)| Borrow::<KeyRef>::borrow(first) < at);
        let last_from = run.map.last_key_value().is_some_and(|(last, _)| Borrow::<KeyRef>::borrow(last) >= at);
        if !(first_below && last_from) {
            return false;
        }
        let len = run.map.len();
        let rest = run.map.split_off::<KeyRef>(at);
        // Each part takes its share of the keys that reshaped the run, at
        // least one: both stay selected.
        let rest_reshaped = (run.reshaped * rest.len() / len).max(1);
        run.reshaped = run.reshaped.saturating_sub(rest_reshaped).max(1);
        let rest_grown = run.grown * rest.len() as isize / len as isize;
        run.grown -= rest_grown;
        let rest = Run { lower: rest_lower, map: rest, reshaped: rest_reshaped, grown: rest_grown, changes: 0 };
        self.runs.insert(point.run + 1, rest);
        self.layout += 1;
        true
    }

    /// A copy of the entries to rebuild next with full leaves: the first
    /// run `which` selects (`cut_piece` cuts it to `max` entries), and the
    /// whole runs after it that fit in `max` as well (so runs emptied by
    /// deletions join up). `None` when no run is selected.
    pub fn compaction_piece(&self, max: usize, which: Rebuild) -> Option<(PiecePlace, Vec<(Key, Slot)>)> {
        let first_run = self.selected(which)?;
        let mut entries: Vec<(Key, Slot)> = Vec::new();
        let mut changes = 0;
        let mut runs = 0;
        for run in &self.runs[first_run..] {
            if runs > 0 && entries.len() + run.map.len() > max {
                break;
            }
            entries.extend(run.map.iter().map(|(key, slot)| (key.clone(), *slot)));
            changes += run.changes;
            runs += 1;
        }
        Some((PiecePlace { layout: self.layout, changes, first_run, runs }, entries))
    }

    /// Puts `map`, bulk-built from the entries of a `compaction_piece`, in
    /// their place as one dense run. Returns the trees it replaced, for the
    /// caller to drop outside its lock, or `None` (and changes nothing) if
    /// an entry may have changed since the copy.
    pub fn replace_piece(&mut self, place: PiecePlace, map: BTreeMap<Key, Slot>) -> Option<Vec<BTreeMap<Key, Slot>>> {
        let covered = place.first_run..place.first_run + place.runs;
        if place.layout != self.layout
            || self.runs[covered.clone()].iter().map(|run| run.changes).sum::<u64>() != place.changes
        {
            return None;
        }
        let built = Run::built(self.runs[place.first_run].lower.clone(), map);
        self.layout += 1;
        Some(self.runs.splice(covered, [built]).map(|run| run.map).collect())
    }

    /// Entries within `(lower, upper)` in key order (reversible). The
    /// bounds apply to the first and last run only, the runs between are
    /// whole. The iterator keeps no bound (a `BTreeMap` range does not):
    /// copying them cost two heap allocations per call for keys over 16
    /// bytes, at every chunk of a scan.
    pub fn range<'a>(
        &'a self,
        lower: Bound<&KeyRef>,
        upper: Bound<&KeyRef>,
    ) -> impl DoubleEndedIterator<Item = (&'a Key, &'a Slot)> + 'a {
        // Where `BTreeMap::range` would panic: an empty range instead.
        let inverted = match (lower, upper) {
            (Bound::Included(a), Bound::Included(b)) => a > b,
            (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => a >= b,
            _ => false,
        };
        let first = match lower {
            Bound::Included(key) | Bound::Excluded(key) => self.run_of(key),
            Bound::Unbounded => 0,
        };
        let last = match upper {
            Bound::Included(key) | Bound::Excluded(key) => self.run_of(key),
            Bound::Unbounded => self.runs.len() - 1,
        };
        let none: &[Run] = &[];
        let (head, middle, tail) = if inverted {
            (None, none, None)
        } else if first == last {
            (Some(self.runs[first].map.range::<KeyRef, _>((lower, upper))), none, None)
        } else {
            (
                Some(self.runs[first].map.range::<KeyRef, _>((lower, Bound::Unbounded))),
                &self.runs[first + 1..last],
                Some(self.runs[last].map.range::<KeyRef, _>((Bound::Unbounded, upper))),
            )
        };
        let middle = middle.iter().flat_map(|run| run.map.iter());
        head.into_iter().flatten().chain(middle).chain(tail.into_iter().flatten())
    }

    #[cfg(test)]
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = (&Key, &Slot)> {
        self.runs.iter().flat_map(|run| run.map.iter())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::memtable::Loc;
    use proptest::prelude::*;

    fn slot(n: u32) -> Slot {
        Slot::new(Loc { seg: 1, off: n, len: 1 }, n as u64)
    }

    fn bound(kind: u8, key: &[u8]) -> Bound<&KeyRef> {
        match kind % 3 {
            0 => Bound::Included(KeyRef::new(key)),
            1 => Bound::Excluded(KeyRef::new(key)),
            _ => Bound::Unbounded,
        }
    }

    #[derive(Debug, Clone)]
    enum Op {
        Put(u16),
        Remove(u16),
        /// Appends this many keys above the largest, spaced this far apart.
        Append(u8, u8),
        Range(u8, u16, u8, u16, bool),
        /// Compacts in pieces of at most this many entries. Between one
        /// piece's copy and its replacement come: (kind % 3) 0 nothing,
        /// 1 the removal of the piece's first key, 2 a put of this key.
        Compact(u8, u8, u16),
        /// Finds where to cut a piece of at most this many entries, then
        /// (kind % 5) 0 nothing, 1 removes the key cut at, 2 puts this
        /// key, 3 removes every key of the run from the cut on, 4 every
        /// key of the run (the runs after it move), then cuts.
        Cut(u8, u8, u16),
    }

    /// Rebuilds every changed run in pieces of `max` entries.
    fn compact(runs: &mut Runs, max: usize) {
        while runs.cut_piece(max, Rebuild::AnyChanged) {
            let (place, entries) = runs.compaction_piece(max, Rebuild::AnyChanged).unwrap();
            assert!(runs.replace_piece(place, entries.into_iter().collect()).is_some());
        }
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<u16>().prop_map(Op::Put),
            3 => any::<u16>().prop_map(Op::Remove),
            2 => (1u8..40, 1u8..4).prop_map(|(n, gap)| Op::Append(n, gap)),
            2 => (any::<u8>(), any::<u16>(), any::<u8>(), any::<u16>(), any::<bool>())
                .prop_map(|(a, x, b, y, rev)| Op::Range(a, x, b, y, rev)),
            1 => (1u8..20, any::<u8>(), any::<u16>()).prop_map(|(max, kind, k)| Op::Compact(max, kind, k)),
            1 => (1u8..20, any::<u8>(), any::<u16>()).prop_map(|(max, kind, k)| Op::Cut(max, kind, k)),
        ]
    }

    proptest! {
        /// Every operation agrees with one `BTreeMap`, however the keys
        /// are cut into runs.
        #[test]
        fn runs_behave_as_one_map(ops in proptest::collection::vec(op(), 1..120)) {
            let mut runs = Runs::default();
            let mut model: BTreeMap<Vec<u8>, Slot> = BTreeMap::new();
            let key = |n: u32| n.to_be_bytes().to_vec();
            for (step, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Put(k) => {
                        let k = key(k as u32 * 4);
                        let old = runs.insert(Key::from_slice(&k), slot(step as u32));
                        prop_assert_eq!(old, model.insert(k, slot(step as u32)));
                    }
                    Op::Remove(k) => {
                        let k = key(k as u32 * 4);
                        let removed = runs.remove_entry(KeyRef::new(&k)).map(|(k, s)| (k.as_slice().to_vec(), s));
                        prop_assert_eq!(removed, model.remove_entry(&k));
                    }
                    Op::Append(n, gap) => {
                        let start = runs.last_key().map_or(0, |k| u32::from_be_bytes(k.as_slice().try_into().unwrap()) + 1);
                        let batch: Vec<(Vec<u8>, Slot)> =
                            (0..n as u32).map(|i| (key(start + i * gap as u32), slot(step as u32))).collect();
                        runs.append_run(batch.iter().map(|(k, s)| (Key::from_slice(k), *s)).collect());
                        model.extend(batch);
                    }
                    Op::Range(a, x, b, y, rev) => {
                        let (x, y) = (key(x as u32 * 2), key(y as u32 * 2));
                        let (lo, hi) = (bound(a, &x), bound(b, &y));
                        let valid = match (lo, hi) {
                            (Bound::Included(l), Bound::Included(h)) => l <= h,
                            (Bound::Included(l) | Bound::Excluded(l), Bound::Included(h) | Bound::Excluded(h)) => l < h,
                            _ => true,
                        };
                        let got: Vec<Vec<u8>> = if rev {
                            runs.range(lo, hi).rev().map(|(k, _)| k.as_slice().to_vec()).collect()
                        } else {
                            runs.range(lo, hi).map(|(k, _)| k.as_slice().to_vec()).collect()
                        };
                        let want: Vec<Vec<u8>> = if !valid {
                            Vec::new()
                        } else {
                            let bytes = |b: Bound<&KeyRef>| match b {
                                Bound::Included(k) => Bound::Included(k.as_bytes().to_vec()),
                                Bound::Excluded(k) => Bound::Excluded(k.as_bytes().to_vec()),
                                Bound::Unbounded => Bound::Unbounded,
                            };
                            let range = model.range((bytes(lo), bytes(hi))).map(|(k, _)| k.clone());
                            if rev { range.rev().collect() } else { range.collect() }
                        };
                        prop_assert_eq!(got, want);
                    }
                    Op::Compact(max, kind, k) => {
                        runs.cut_piece(max as usize, Rebuild::AnyChanged);
                        if let Some((place, entries)) = runs.compaction_piece(max as usize, Rebuild::AnyChanged) {
                            match kind % 3 {
                                0 => {}
                                1 => {
                                    let (key, _) = entries[0].clone();
                                    runs.remove_entry(KeyRef::new(key.as_slice()));
                                    model.remove(key.as_slice());
                                }
                                _ => {
                                    let k = key(k as u32 * 4);
                                    runs.insert(Key::from_slice(&k), slot(step as u32));
                                    model.insert(k, slot(step as u32));
                                }
                            }
                            // A piece replaced over a change to its runs
                            // would lose that change: the model tells.
                            let replaced = runs.replace_piece(place, entries.into_iter().collect());
                            prop_assert!(replaced.is_none() || kind % 3 != 1);
                        }
                        compact(&mut runs, max as usize);
                        prop_assert!(runs.runs.iter().all(|run| run.is_dense() || run.map.is_empty()));
                        prop_assert!(runs.compaction_piece(max as usize, Rebuild::AnyChanged).is_none());
                    }
                    Op::Cut(max, kind, k) => {
                        let Some(point) = runs.cut_point(max as usize, Rebuild::AnyChanged) else { continue };
                        let run_keys = |from: Option<&Key>| -> Vec<Vec<u8>> {
                            let map = &runs.runs[point.run].map;
                            map.keys().filter(|key| from.is_none_or(|at| *key >= at)).map(|key| key.as_slice().to_vec()).collect()
                        };
                        let gone: Vec<Vec<u8>> = match (kind % 5, &point.at) {
                            (1, Some(at)) => vec![at.as_slice().to_vec()],
                            (3, Some(at)) => run_keys(Some(at)),
                            (4, _) => run_keys(None),
                            _ => Vec::new(),
                        };
                        for key in &gone {
                            runs.remove_entry(KeyRef::new(key));
                            model.remove(key);
                        }
                        if kind % 5 == 2 {
                            let k = key(k as u32 * 4);
                            runs.insert(Key::from_slice(&k), slot(step as u32));
                            model.insert(k, slot(step as u32));
                        }
                        let count = runs.runs.len();
                        let cut = runs.cut_at(point);
                        prop_assert!(runs.runs.len() == count || (cut && runs.runs.len() == count + 1));
                    }
                }
                prop_assert_eq!(runs.len(), model.len());
                prop_assert_eq!(runs.is_empty(), model.is_empty());
                prop_assert!(runs.runs.iter().skip(1).all(|run| !run.map.is_empty()) || runs.runs.len() == 1);
                let all: Vec<(Vec<u8>, Slot)> = runs.iter().map(|(k, s)| (k.as_slice().to_vec(), *s)).collect();
                prop_assert_eq!(all, model.iter().map(|(k, s)| (k.clone(), *s)).collect::<Vec<_>>());
                for k in (0..40u32).map(|i| key(i * 37)) {
                    prop_assert_eq!(runs.get(KeyRef::new(&k)), model.get(&k));
                }
            }
        }
    }

    #[test]
    fn an_appended_batch_is_a_run_of_its_own() {
        let mut runs = Runs::default();
        let key = |n: u32| Key::from_slice(&n.to_be_bytes());
        runs.append_run((0..10).map(|n| (key(n), slot(n))).collect());
        assert_eq!(runs.run_count(), 1, "an empty map takes the batch as its first run");
        runs.append_run((10..20).map(|n| (key(n), slot(n))).collect());
        assert_eq!((runs.run_count(), runs.len()), (2, 20));
        assert_eq!(runs.get(KeyRef::new(&15u32.to_be_bytes())), Some(&slot(15)));
        // A key between the runs' ranges goes to the run below it.
        for n in 10..20u32 {
            runs.remove_entry(KeyRef::new(&n.to_be_bytes()));
        }
        assert_eq!(runs.run_count(), 1, "an emptied run is dropped");
        assert_eq!(runs.last_key(), Some(&key(9)));
    }

    #[test]
    fn compaction_rebuilds_changed_runs_in_pieces_and_joins_small_ones() {
        let key = |n: u32| Key::from_slice(&n.to_be_bytes());
        let mut runs = Runs::default();
        // Every other key, then the ones between: a tree grown by inserts.
        for n in (0..1000).step_by(2).chain((1..1000).step_by(2)) {
            runs.insert(key(n), slot(n));
        }
        runs.append_run((1000..1010).map(|n| (key(n), slot(n))).collect());
        runs.append_run((1010..1020).map(|n| (key(n), slot(n))).collect());
        let grown = runs.node_bytes(100);
        compact(&mut runs, 300);
        // 1000 keys in pieces of 300, then the last 100 with the two small
        // appended runs: the last piece holds whole runs only.
        assert_eq!(runs.run_count(), 4);
        assert_eq!(runs.len(), 1020);
        assert!(runs.node_bytes(100) < grown);
        assert!(runs.iter().map(|(k, _)| k.clone()).eq((0..1020).map(key)));
        for n in 0..1020u32 {
            assert_eq!(runs.get(KeyRef::new(&n.to_be_bytes())), Some(&slot(n)));
        }
        // A dense run is left alone; a change makes its run a piece again.
        assert!(runs.compaction_piece(300, Rebuild::AnyChanged).is_none());
        runs.remove_entry(KeyRef::new(&500u32.to_be_bytes()));
        let (_, entries) = runs.compaction_piece(300, Rebuild::AnyChanged).unwrap();
        assert_eq!(entries.len(), 299);
    }

    #[test]
    fn a_piece_is_spoiled_only_by_changes_to_its_own_keys() {
        let key = |n: u32| Key::from_slice(&n.to_be_bytes());
        let mut runs = Runs::default();
        for n in (0..1000).rev() {
            runs.insert(key(n * 2), slot(n));
        }
        runs.append_run((2000..2100).map(|n| (key(n), slot(n))).collect());
        // The first 300 keys are cut off: writes to the rest of their run
        // and to the other run leave the piece to go in.
        assert!(runs.cut_piece(300, Rebuild::AnyChanged));
        let (place, entries) = runs.compaction_piece(300, Rebuild::AnyChanged).unwrap();
        assert_eq!(entries.len(), 300);
        assert!(runs.insert(key(1001), slot(1)).is_none());
        runs.insert(key(2050), slot(1));
        *runs.get_mut(KeyRef::new(&2060u32.to_be_bytes())).unwrap() = slot(2);
        assert!(runs.replace_piece(place, entries.into_iter().collect()).is_some());
        // A new key, a changed slot or a removal within it: it does not.
        for change in 0..3 {
            assert!(runs.cut_piece(300, Rebuild::AnyChanged));
            let (place, entries) = runs.compaction_piece(300, Rebuild::AnyChanged).unwrap();
            let (first, _) = entries[0].clone();
            let next = u32::from_be_bytes(first.as_slice().try_into().unwrap()) + 1;
            match change {
                0 => assert!(runs.insert(key(next), slot(3)).is_none()),
                1 => *runs.get_mut(KeyRef::new(first.as_slice())).unwrap() = slot(4),
                _ => assert!(runs.remove_entry(KeyRef::new(first.as_slice())).is_some()),
            }
            assert!(runs.replace_piece(place, entries.into_iter().collect()).is_none(), "change {change}");
        }
        // Runs added, cut or dropped: neither.
        let (place, entries) = runs.compaction_piece(300, Rebuild::AnyChanged).unwrap();
        runs.append_run((3000..3010).map(|n| (key(n), slot(n))).collect());
        assert!(runs.replace_piece(place, entries.into_iter().collect()).is_none());
        compact(&mut runs, 300);
        // Batches of 100 and 10; two keys added, one removed.
        assert_eq!(runs.len(), 1000 + 100 + 10 + 1);
        assert!(runs.compaction_piece(1, Rebuild::AnyChanged).is_none());
        assert!(runs.iter().map(|(k, _)| k).is_sorted());
    }

    #[test]
    fn only_runs_grown_by_enough_new_keys_are_worth_rebuilding_under_writes() {
        let key = |n: u32| Key::from_slice(&n.to_be_bytes());
        let mut runs = Runs::from((0..1000).map(|n| (key(n * 2), slot(n))).collect::<BTreeMap<_, _>>());
        runs.insert(key(1), slot(1));
        runs.insert(key(2), slot(2));
        assert!(runs.compaction_piece(2000, Rebuild::Grown).is_none(), "one new key in 1001");
        assert!(runs.compaction_piece(2000, Rebuild::AnyChanged).is_some());
        for n in 0..40 {
            runs.insert(key(n * 2 + 3), slot(n));
        }
        let (_, entries) = runs.compaction_piece(2000, Rebuild::Grown).unwrap();
        assert_eq!(entries.len(), 1041);
    }

    /// Churn (a key removed for each one inserted, as a cache evicts)
    /// changes a run without growing it: only an idle rebuild takes it.
    #[test]
    fn churn_is_no_growth() {
        let key = |n: u32| Key::from_slice(&n.to_be_bytes());
        let mut runs = Runs::from((0..1000).map(|n| (key(n * 2), slot(n))).collect::<BTreeMap<_, _>>());
        for n in 0..100 {
            runs.insert(key(n * 2 + 1), slot(n));
            runs.remove_entry(key(n * 2).borrow());
        }
        assert!(runs.compaction_piece(2000, Rebuild::Grown).is_none(), "1000 keys, as built");
        assert!(runs.compaction_piece(2000, Rebuild::AnyChanged).is_some());
        for n in 100..140 {
            runs.insert(key(n * 2 + 1), slot(n));
        }
        assert!(runs.compaction_piece(2000, Rebuild::Grown).is_some(), "grown by 40");
    }

    #[test]
    fn bulk_built_runs_are_estimated_dense_until_changed() {
        let key = |n: u32| Key::from_slice(&n.to_be_bytes());
        let mut runs = Runs::from((0..100).map(|n| (key(n), slot(n))).collect::<BTreeMap<_, _>>());
        runs.append_run((100..200).map(|n| (key(n), slot(n))).collect());
        assert_eq!(runs.node_bytes(100), 200 * 107);
        // Removing an absent key changes no node.
        runs.remove_entry(KeyRef::new(&1000u32.to_be_bytes()));
        assert_eq!(runs.node_bytes(100), 200 * 107);
        runs.insert(key(100), slot(1));
        assert_eq!(runs.node_bytes(100), 200 * 107, "replacing a slot changes no node");
        runs.insert(key(500), slot(500));
        assert_eq!(runs.node_bytes(100), 100 * 107 + 101 * 107 + 1000, "a new key: the slots of one split");
        runs.remove_entry(KeyRef::new(&50u32.to_be_bytes()));
        assert_eq!(runs.node_bytes(100), 99 * 107 + 1000 + 101 * 107 + 1000);
        for n in 1000..1100 {
            runs.insert(key(n), slot(n));
        }
        assert_eq!(runs.node_bytes(100), 99 * 107 + 1000 + 201 * 150, "at most as grown as random inserts leave it");
    }
}
