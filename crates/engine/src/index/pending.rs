//! Index updates the group-commit leader has recorded but the B-tree does
//! not hold yet: the newest pending version of each key, by hash, and in
//! key order for range walks.
//!
//! Why: a B-tree insert into millions of keys is a chain of cache misses
//! (41% of a single writer's time in `fillrandom`), while an insert into a
//! table of a few thousand keys hits the cache. The leader records each
//! update here and a merger thread moves a full table into the tree on the
//! other core (see `memtable.rs`).

use std::hash::BuildHasher;
use std::ops::{Bound, RangeBounds};
use std::sync::Arc;

use hashbrown::HashTable;
use parking_lot::Mutex;

use super::key::Key;
use super::memtable::Slot;

/// New keys a range walk scans one by one before it sorts them into the
/// table's key order: past this, the order is brought up to date first.
/// Grows with the table (4 x its square root), so that filling a table of
/// n keys under walks merges into the order ~sqrt(n) / 2 times (each merge
/// is O(n)) while each walk scans at most ~4 sqrt(n) unsorted keys.
fn unsorted_limit(sorted: usize) -> usize {
    (4 * sorted.isqrt()).max(64)
}

#[derive(Default)]
pub struct PendingMap {
    /// Each key with its newest pending version, in the order the keys
    /// first came: positions never move, so the key order below can
    /// refer to them.
    entries: Vec<(Key, Slot)>,
    /// Positions in `entries`, by the key's hash.
    table: HashTable<u32>,
    hasher: foldhash::fast::RandomState,
    /// Heap bytes of keys longer than the inline 16.
    spilled_key_bytes: u64,
    /// The first positions in key order, as far as range walks and merges
    /// have needed it.
    order: Mutex<Order>,
}

/// Why an order: a range walk used to look at every pending key for the
/// few within its range. Under a trickle of writes the tables hold up to
/// `deferred_index_updates` keys for seconds, and a ZRANK among 1,000
/// members, one walk, ran at 5k/s instead of 48k/s with 13k keys pending
/// (BENCHMARKS.md, forty-sixth session).
#[derive(Default)]
struct Order {
    /// `entries[..sorted.len()]`'s positions, by key.
    sorted: Arc<Vec<u32>>,
}

impl PendingMap {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    fn position(&self, key: &[u8]) -> Option<usize> {
        let entries = &self.entries;
        let found = self.table.find(self.hasher.hash_one(key), |&at| entries[at as usize].0.as_slice() == key);
        found.map(|&at| at as usize)
    }

    /// The pending version of `key` (a tombstone location for a deletion).
    pub fn get(&self, key: &[u8]) -> Option<Slot> {
        self.position(key).map(|at| self.entries[at].1)
    }

    /// Makes `slot` the pending version of `key`; returns the one it replaces.
    pub fn insert(&mut self, key: &[u8], slot: Slot) -> Option<Slot> {
        let hash = self.hasher.hash_one(key);
        let entries = &mut self.entries;
        if let Some(&at) = self.table.find(hash, |&at| entries[at as usize].0.as_slice() == key) {
            return Some(std::mem::replace(&mut entries[at as usize].1, slot));
        }
        let key = Key::from_slice(key);
        self.spilled_key_bytes += key.heap_bytes();
        let at = u32::try_from(entries.len()).expect("a pending table holds fewer than 2^32 keys");
        entries.push((key, slot));
        let (hasher, entries) = (&self.hasher, &self.entries);
        self.table.insert_unique(hash, at, |&at| hasher.hash_one(entries[at as usize].0.as_slice()));
        None
    }

    /// Keys the table holds before it must grow.
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Empties the table, keeping its buckets for the next keys.
    pub fn clear(&mut self) {
        self.entries.clear();
        self.table.clear();
        self.spilled_key_bytes = 0;
        self.order.get_mut().sorted = Arc::default();
    }

    /// Every key and its version, in key order.
    pub fn sorted(&self) -> Vec<&(Key, Slot)> {
        let sorted = self.sorted_up_to(|_| 0);
        sorted.iter().map(|&at| &self.entries[at as usize]).collect()
    }

    /// Calls `visit` with each key within `(lower, upper)` and its version,
    /// in no particular order. Keys come in key order but those that
    /// arrived since the order was last brought up to date (a few hundred).
    pub fn visit_within<'a>(&'a self, lower: Bound<&[u8]>, upper: Bound<&[u8]>, mut visit: impl FnMut(&'a Key, Slot)) {
        let bounds = (lower, upper);
        let sorted = self.sorted_up_to(unsorted_limit);
        let key_of = |at: &u32| self.entries[*at as usize].0.as_slice();
        let first = match lower {
            Bound::Included(low) => sorted.partition_point(|at| key_of(at) < low),
            Bound::Excluded(low) => sorted.partition_point(|at| key_of(at) <= low),
            Bound::Unbounded => 0,
        };
        for &at in &sorted[first..] {
            let (key, slot) = &self.entries[at as usize];
            if !RangeBounds::<[u8]>::contains(&bounds, key.as_slice()) {
                break;
            }
            visit(key, *slot);
        }
        for (key, slot) in &self.entries[sorted.len()..] {
            if RangeBounds::<[u8]>::contains(&bounds, key.as_slice()) {
                visit(key, *slot);
            }
        }
    }

    /// The key order of the first positions, brought up to date when more
    /// than `unsorted(sorted so far)` keys came since: the new ones are
    /// sorted and merged in. An insert takes `&mut self`, so none runs
    /// meanwhile: two callers that both bring it up to date make the same
    /// order.
    fn sorted_up_to(&self, unsorted: impl Fn(usize) -> usize) -> Arc<Vec<u32>> {
        let mut order = self.order.lock();
        if self.entries.len() - order.sorted.len() <= unsorted(order.sorted.len()) {
            return order.sorted.clone();
        }
        let key_of = |at: &u32| &self.entries[*at as usize].0;
        let mut new: Vec<u32> = (order.sorted.len() as u32..self.entries.len() as u32).collect();
        new.sort_unstable_by(|a, b| key_of(a).cmp(key_of(b)));
        let old = &order.sorted;
        let mut merged = Vec::with_capacity(self.entries.len());
        let (mut i, mut j) = (0, 0);
        while i < old.len() && j < new.len() {
            // Keys are unique within a table: never equal.
            if key_of(&old[i]) < key_of(&new[j]) {
                merged.push(old[i]);
                i += 1;
            } else {
                merged.push(new[j]);
                j += 1;
            }
        }
        merged.extend_from_slice(&old[i..]);
        merged.extend_from_slice(&new[j..]);
        order.sorted = Arc::new(merged);
        order.sorted.clone()
    }

    /// DRAM held: the entries, the buckets (a position and a control byte
    /// each), the key order and long keys.
    pub fn memory_bytes(&self) -> u64 {
        let entries = self.entries.capacity() * std::mem::size_of::<(Key, Slot)>();
        let buckets = self.table.capacity() * (std::mem::size_of::<u32>() + 1);
        let order = self.order.lock().sorted.capacity() * std::mem::size_of::<u32>();
        (entries + buckets + order) as u64 + self.spilled_key_bytes
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::index::memtable::Loc;

    #[test]
    fn insert_replaces_and_reports_the_previous_version() {
        let mut map = PendingMap::default();
        let slot = |n: u32| Slot::new(Loc { seg: 1, off: n, len: 1 }, n as u64);
        let long = [9u8; 40];
        assert_eq!(map.insert(b"a", slot(1)), None);
        assert_eq!(map.insert(&long, slot(2)), None);
        assert_eq!(map.insert(b"a", slot(3)), Some(slot(1)));
        assert_eq!((map.get(b"a"), map.get(&long), map.get(b"b")), (Some(slot(3)), Some(slot(2)), None));
        assert_eq!(map.len(), 2);
        assert!(map.memory_bytes() >= 40 + 2 * std::mem::size_of::<(Key, Slot)>() as u64);
        // Cleared for reuse: no keys, no long-key bytes, the buckets kept.
        let buckets = map.memory_bytes() - 40;
        let keys: Vec<Vec<u8>> = map.sorted().iter().map(|(k, _)| k.as_slice().to_vec()).collect();
        assert_eq!(keys, vec![long.to_vec(), b"a".to_vec()]);
        map.clear();
        assert_eq!((map.len(), map.get(b"a"), map.get(&long)), (0, None, None));
        assert_eq!(map.memory_bytes(), buckets);
        assert_eq!(map.insert(b"a", slot(4)), None);
        assert_eq!(map.get(b"a"), Some(slot(4)));
    }

    /// A range walk finds exactly the keys within its bounds, whatever
    /// share of them came after the key order was last brought up to date
    /// (the limit starts at 64), with their newest versions; so does the
    /// merger's full order, and both after the table is cleared for reuse.
    #[test]
    fn walks_and_the_merge_order_match_a_sorted_model() {
        use proptest::prelude::*;
        use std::collections::BTreeMap;
        #[derive(Debug, Clone)]
        enum Step {
            Insert(Vec<u8>, u32),
            Walk(Bound<Vec<u8>>, Bound<Vec<u8>>),
            Merge,
            Clear,
        }
        let key = || prop::collection::vec(0u8..4, 0..20);
        let bound =
            || prop_oneof![Just(Bound::Unbounded), key().prop_map(Bound::Included), key().prop_map(Bound::Excluded)];
        let step = prop_oneof![
            20 => (key(), any::<u32>()).prop_map(|(k, v)| Step::Insert(k, v)),
            4 => (bound(), bound()).prop_map(|(a, b)| Step::Walk(a, b)),
            1 => Just(Step::Merge),
            1 => Just(Step::Clear),
        ];
        let slot = |v: u32| Slot::new(Loc { seg: v, off: 0, len: 1 }, v as u64);
        proptest!(ProptestConfig::with_cases(64), |(steps in prop::collection::vec(step, 1..600))| {
            let (mut map, mut model) = (PendingMap::default(), BTreeMap::<Vec<u8>, u32>::new());
            for step in steps {
                match step {
                    Step::Insert(key, v) => {
                        prop_assert_eq!(map.insert(&key, slot(v)), model.insert(key, v).map(slot));
                    }
                    Step::Walk(lower, upper) => {
                        let (lower, upper) = (lower.as_ref().map(Vec::as_slice), upper.as_ref().map(Vec::as_slice));
                        let mut found = BTreeMap::new();
                        map.visit_within(lower, upper, |key, slot| {
                            assert!(found.insert(key.as_slice().to_vec(), slot).is_none(), "a key visited twice");
                        });
                        let inverted = match (lower, upper) {
                            (Bound::Included(a), Bound::Included(b)) => a > b,
                            (Bound::Included(a) | Bound::Excluded(a), Bound::Included(b) | Bound::Excluded(b)) => a >= b,
                            _ => false,
                        };
                        let want: BTreeMap<Vec<u8>, Slot> = if inverted {
                            BTreeMap::new()
                        } else {
                            model.range::<[u8], _>((lower, upper)).map(|(k, &v)| (k.clone(), slot(v))).collect()
                        };
                        prop_assert_eq!(found, want);
                    }
                    Step::Merge => {
                        let sorted: Vec<(Vec<u8>, Slot)> =
                            map.sorted().iter().map(|(k, s)| (k.as_slice().to_vec(), *s)).collect();
                        let want: Vec<(Vec<u8>, Slot)> = model.iter().map(|(k, &v)| (k.clone(), slot(v))).collect();
                        prop_assert_eq!(sorted, want);
                    }
                    Step::Clear => {
                        map.clear();
                        model.clear();
                    }
                }
                prop_assert_eq!(map.len(), model.len());
            }
        });
    }
}
