//! One bit per entry of a segment, for two uses: which entries the index
//! no longer points at, so that GC skips them without an index lookup
//! each (`Segment::dead`), and, in cache mode, which entries were read
//! since they were written, so that eviction gives them a second chance
//! (`Segment::accessed`, see `evict.rs`).
//!
//! Why the dead marks: GC's liveness check is an index lookup per entry (a B-tree
//! descent, ~0.5 µs with 10M keys), and the segments it collects are
//! mostly dead: a 64 MiB segment of 8/32 B entries holds ~1.6M of them.
//!
//! One bit per 8 bytes of segment (an entry is longer than 8 bytes, so no
//! two entries start in the same 8 bytes): 1/64 of the segment's size, 1
//! MiB for 64 MiB, allocated on the first mark. A set dead bit is
//! certain (nothing points into a sealed segment anew); a clear one means
//! "ask the index", which is also what a segment without a map (over
//! `MAX_MAPS`) gets. A reopened database's maps are rebuilt from the index
//! by the background thread (`Inner::map_dead_entries`).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::OnceLock;

/// Dead-entry maps kept at once per database: 64 MiB of DRAM with 64 MiB
/// segments, covering 4 GiB of log. Beyond, GC asks the index for every
/// entry. Access marks have no such budget: a cache's capacity bounds them.
pub const MAX_MAPS: usize = 64;

#[derive(Default)]
pub struct EntryMarks {
    bits: OnceLock<Box<[AtomicU64]>>,
}

impl EntryMarks {
    /// Marks the entry at `offset`, allocating the map unless `maps` (the
    /// database's count of allocated dead-entry maps) is at `MAX_MAPS`;
    /// `None`: no budget.
    pub fn mark(&self, offset: u32, segment_bytes: usize, maps: Option<&AtomicUsize>) {
        let Some(bits) = self.bits_or_allocate(segment_bytes, maps) else { return };
        let slot = offset as usize / 8;
        if let Some(word) = bits.get(slot / 64) {
            // Not a locked fetch_or (measured: 16% of a pass of overwrites
            // of 10M keys, the merger being the busiest thread). Two marks
            // racing on one word may lose one, which only costs a lookup.
            let bit = 1 << (slot % 64);
            let old = word.load(Ordering::Relaxed);
            if old & bit == 0 {
                word.store(old | bit, Ordering::Relaxed);
            }
        }
    }

    /// Marks every entry dead but those at `live` (offsets), allocating the
    /// map as `mark` does; returns whether the segment has a map. For a
    /// sealed segment whose live entries, as the index saw them, are all in
    /// `live`: nothing points into it anew. Merged into marks made
    /// meanwhile, as the first overwrite after a reopen allocates the map.
    pub fn mark_all_but(&self, live: &[u32], segment_bytes: usize, maps: &AtomicUsize) -> bool {
        let Some(bits) = self.bits_or_allocate(segment_bytes, Some(maps)) else { return false };
        let mut dead = vec![u64::MAX; bits.len()];
        for offset in live {
            let slot = *offset as usize / 8;
            if let Some(word) = dead.get_mut(slot / 64) {
                *word &= !(1 << (slot % 64));
            }
        }
        for (word, dead) in bits.iter().zip(dead) {
            word.fetch_or(dead, Ordering::Relaxed);
        }
        true
    }

    /// The map's words, allocated (zeroed) unless `maps` (the database's
    /// count of allocated dead-entry maps) is at `MAX_MAPS`; `None` over
    /// the budget.
    fn bits_or_allocate(&self, segment_bytes: usize, maps: Option<&AtomicUsize>) -> Option<&[AtomicU64]> {
        match self.bits.get() {
            Some(bits) => Some(bits),
            None if maps.is_none_or(|maps| maps.load(Ordering::Relaxed) < MAX_MAPS) => {
                Some(self.bits.get_or_init(|| {
                    if let Some(maps) = maps {
                        maps.fetch_add(1, Ordering::Relaxed);
                    }
                    let words = (segment_bytes / 8).div_ceil(64);
                    std::iter::repeat_with(|| AtomicU64::new(0)).take(words).collect()
                }))
            }
            None => None,
        }
    }

    /// Whether the entry at `offset` is marked.
    pub fn is_marked(&self, offset: usize) -> bool {
        let slot = offset / 8;
        self.bits
            .get()
            .and_then(|bits| bits.get(slot / 64))
            .is_some_and(|word| word.load(Ordering::Relaxed) & (1 << (slot % 64)) != 0)
    }

    /// Whether a map is allocated (a dead-entry map counts toward `MAX_MAPS`).
    pub fn allocated(&self) -> bool {
        self.bits.get().is_some()
    }

    /// Bytes of DRAM the map holds.
    pub fn memory_bytes(&self) -> usize {
        self.bits.get().map_or(0, |bits| bits.len() * 8)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marks_are_per_entry_and_bounded_by_the_map_count() {
        let maps = AtomicUsize::new(0);
        let map = EntryMarks::default();
        assert!(!map.is_marked(256));
        map.mark(256, 64 * 1024, Some(&maps));
        map.mark(64 * 1024 - 16, 64 * 1024, Some(&maps));
        assert!(map.is_marked(256) && map.is_marked(64 * 1024 - 16));
        assert!(!map.is_marked(264) && !map.is_marked(248));
        assert_eq!(maps.load(Ordering::Relaxed), 1);
        assert_eq!(map.memory_bytes(), 64 * 1024 / 64);

        // Rebuilt after a reopen, over a mark made meanwhile.
        let rebuilt = EntryMarks::default();
        rebuilt.mark(512, 64 * 1024, Some(&maps));
        assert!(rebuilt.mark_all_but(&[256, 512, 4096], 64 * 1024, &maps));
        assert!(!rebuilt.is_marked(256) && !rebuilt.is_marked(4096));
        assert!(rebuilt.is_marked(512) && rebuilt.is_marked(264) && rebuilt.is_marked(64 * 1024 - 8));
        assert_eq!(maps.load(Ordering::Relaxed), 2, "one map per segment");

        let full = AtomicUsize::new(MAX_MAPS);
        let unmapped = EntryMarks::default();
        unmapped.mark(256, 64 * 1024, Some(&full));
        assert!(!unmapped.allocated() && !unmapped.is_marked(256), "over the budget, GC asks the index");
        unmapped.mark(256, 64 * 1024, None);
        assert!(unmapped.is_marked(256), "access marks have no budget");
    }
}
