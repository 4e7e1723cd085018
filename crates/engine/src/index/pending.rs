//! Index updates the group-commit leader has recorded but the B-tree does
//! not hold yet: the newest pending version of each key, by hash.
//!
//! Why: a B-tree insert into millions of keys is a chain of cache misses
//! (41% of a single writer's time in `fillrandom`), while an insert into a
//! table of a few thousand keys hits the cache. The leader records each
//! update here and a merger thread moves a full table into the tree on the
//! other core (see `memtable.rs`).

use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::key::Key;
use super::memtable::Slot;

#[derive(Default)]
pub struct PendingMap {
    table: HashTable<(Key, Slot)>,
    hasher: foldhash::fast::RandomState,
    /// Heap bytes of keys longer than the inline 16.
    spilled_key_bytes: u64,
}

impl PendingMap {
    pub fn len(&self) -> usize {
        self.table.len()
    }

    pub fn is_empty(&self) -> bool {
        self.table.is_empty()
    }

    /// The pending version of `key` (a tombstone location for a deletion).
    pub fn get(&self, key: &[u8]) -> Option<Slot> {
        self.table.find(self.hasher.hash_one(key), |(k, _)| k.as_slice() == key).map(|(_, slot)| *slot)
    }

    /// Makes `slot` the pending version of `key`; returns the one it replaces.
    pub fn insert(&mut self, key: &[u8], slot: Slot) -> Option<Slot> {
        let hash = self.hasher.hash_one(key);
        if let Some((_, pending)) = self.table.find_mut(hash, |(k, _)| k.as_slice() == key) {
            return Some(std::mem::replace(pending, slot));
        }
        let key = Key::from_slice(key);
        self.spilled_key_bytes += key.heap_bytes();
        let hasher = &self.hasher;
        self.table.insert_unique(hash, (key, slot), |(k, _)| hasher.hash_one(k.as_slice()));
        None
    }

    /// Keys the table holds before it must grow.
    pub fn capacity(&self) -> usize {
        self.table.capacity()
    }

    /// Empties the table, keeping its buckets for the next keys.
    pub fn clear(&mut self) {
        self.table.clear();
        self.spilled_key_bytes = 0;
    }

    pub fn iter(&self) -> impl Iterator<Item = &(Key, Slot)> {
        self.table.iter()
    }

    /// DRAM held: the buckets (one control byte each) and long keys.
    pub fn memory_bytes(&self) -> u64 {
        (self.table.capacity() * (std::mem::size_of::<(Key, Slot)>() + 1)) as u64 + self.spilled_key_bytes
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
        let mut keys: Vec<Vec<u8>> = map.iter().map(|(k, _)| k.as_slice().to_vec()).collect();
        keys.sort();
        assert_eq!(keys, vec![long.to_vec(), b"a".to_vec()]);
        // Cleared for reuse: no keys, no long-key bytes, the buckets kept.
        let buckets = map.memory_bytes() - 40;
        map.clear();
        assert_eq!((map.len(), map.get(b"a"), map.get(&long)), (0, None, None));
        assert_eq!(map.memory_bytes(), buckets);
        assert_eq!(map.insert(b"a", slot(4)), None);
        assert_eq!(map.get(b"a"), Some(slot(4)));
    }
}
