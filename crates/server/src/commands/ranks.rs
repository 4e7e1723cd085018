//! The block counts of big sorted sets, summed once for readers.
//!
//! A rank in a big sorted set (`zsets.rs`) is the counts of the blocks
//! before the member's plus its place in its own block. Summing the counts
//! read every block entry before it from the engine (~100 of them in a
//! set of 100,000), so ZREVRANK ran at 0.27x Redis's rate. Readers now
//! keep each table's fences and running sums here and read only the
//! member's own block.
//!
//! A reader may use or fill an entry only while no write to the table is
//! in flight, checked before and after it reads (as a seqlock does):
//! writers count themselves in before they queue their batch and out once
//! it is visible (or failed). Entries are tagged with the count of
//! finished writes they saw, so any write since makes them stale. A reader
//! that finds a write in flight reads from one engine snapshot instead:
//! reading the counts and the block's entries at two moments gave ranks
//! off by one under concurrent writes. Commands that hold locks
//! (writers, transactions) see a stable table and never come here.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;

/// Tables share these counter pairs by id; a write to one makes the
/// others sharing its slot recompute too, which is only slower.
const SLOTS: usize = 256;
/// Tables whose sums are kept at most (ids of deleted ones linger).
const TABLES_MOST: usize = 4096;

/// A table's blocks in order: each one's fence and the members before
/// it, and the member count.
pub struct BlockSums {
    tag: u64,
    pub fences: Vec<Vec<u8>>,
    pub before: Vec<u64>,
    pub total: u64,
}

pub struct RankCache {
    started: Box<[AtomicU64]>,
    finished: Box<[AtomicU64]>,
    sums: Mutex<HashMap<u64, Arc<BlockSums>>>,
}

impl Default for RankCache {
    fn default() -> Self {
        RankCache {
            started: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            finished: (0..SLOTS).map(|_| AtomicU64::new(0)).collect(),
            sums: Mutex::default(),
        }
    }
}

/// Counts a batch's writes to tables out again when dropped: once the
/// batch is visible, failed, or given up.
pub struct Writing<'a> {
    cache: &'a RankCache,
    ids: Vec<u64>,
}

impl Drop for Writing<'_> {
    fn drop(&mut self) {
        for &id in &self.ids {
            self.cache.finished[slot(id)].fetch_add(1, Ordering::SeqCst);
        }
    }
}

fn slot(id: u64) -> usize {
    id as usize % SLOTS
}

impl RankCache {
    /// Called before a batch that writes to the tables `ids` is queued.
    pub fn writing(&self, ids: Vec<u64>) -> Writing<'_> {
        for &id in &ids {
            self.started[slot(id)].fetch_add(1, Ordering::SeqCst);
        }
        Writing { cache: self, ids }
    }

    /// The count of finished writes of table `id`'s slot if none is in
    /// flight. Finished is read first: it never passes started, so equal
    /// readings mean both held that value when started was read.
    pub fn quiet(&self, id: u64) -> Option<u64> {
        let finished = self.finished[slot(id)].load(Ordering::SeqCst);
        (self.started[slot(id)].load(Ordering::SeqCst) == finished).then_some(finished)
    }

    /// The count of finished writes of table `id`'s slot, in flight or not.
    pub fn finished(&self, id: u64) -> u64 {
        self.finished[slot(id)].load(Ordering::SeqCst)
    }

    /// Table `id`'s sums if they were taken at `tag` (from `quiet`).
    pub fn get(&self, id: u64, tag: u64) -> Option<Arc<BlockSums>> {
        self.sums.lock().get(&id).filter(|sums| sums.tag == tag).cloned()
    }

    /// Keeps sums read while `quiet` gave `tag`; the caller checks `quiet`
    /// again after it used them. None if the blocks are not a table's (the
    /// first fence is the empty one).
    pub fn put(&self, id: u64, tag: u64, fences: Vec<Vec<u8>>, counts: &[u64]) -> Option<Arc<BlockSums>> {
        let sums = Arc::new(BlockSums::new(tag, fences, counts)?);
        let mut map = self.sums.lock();
        if map.len() >= TABLES_MOST {
            map.clear();
        }
        map.insert(id, sums.clone());
        Some(sums)
    }
}

impl BlockSums {
    pub fn new(tag: u64, fences: Vec<Vec<u8>>, counts: &[u64]) -> Option<BlockSums> {
        if fences.first().is_none_or(|first| !first.is_empty()) || fences.len() != counts.len() {
            return None;
        }
        let mut total = 0u64;
        let before = counts
            .iter()
            .map(|&count| {
                let at = total;
                total += count;
                at
            })
            .collect();
        Some(BlockSums { tag, fences, before, total })
    }

    /// The block holding `place`: its index.
    pub fn block_of(&self, place: &[u8]) -> usize {
        self.fences.partition_point(|fence| fence.as_slice() <= place).max(1) - 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sums_are_stale_once_a_write_starts_or_finishes() {
        let cache = RankCache::default();
        let tag = cache.quiet(7).unwrap();
        let sums = cache.put(7, tag, vec![vec![], b"m".to_vec(), b"t".to_vec()], &[3, 5, 2]).unwrap();
        assert_eq!((sums.before.as_slice(), sums.total), (&[0, 3, 8][..], 10));
        assert!(cache.put(7, tag, vec![b"m".to_vec()], &[3]).is_none(), "no first block");
        assert_eq!((sums.block_of(b"a"), sums.block_of(b"m"), sums.block_of(b"s"), sums.block_of(b"z")), (0, 1, 1, 2));
        assert!(cache.get(7, tag).is_some());
        let writing = cache.writing(vec![7]);
        assert_eq!(cache.quiet(7), None);
        // Another table's slot is quiet.
        assert_eq!(cache.quiet(8), Some(0));
        drop(writing);
        let now = cache.quiet(7).unwrap();
        assert_ne!(now, tag);
        assert!(cache.get(7, now).is_none());
    }
}
