//! Point lookups by hash, beside the ordered index.
//!
//! A B-tree descent over a million keys is a chain of cache misses: it was
//! 31% of the server's CPU for GET `-P 16` (1M keys, 1 KiB values). A hash
//! probe is one or two. The table maps a 32-bit tag of each key's hash to
//! the newest location of the key and holds no key bytes (16 bytes a key,
//! about 25 with hashbrown's control byte and load factor): the log entry
//! at that location holds the key, and readers check it there. Tags are
//! not unique: a lookup that finds two candidates for its tag, or whose
//! entry turns out to hold another key, asks the B-tree instead.
//!
//! The table is filled after open a chunk at a time (`Coverage`), so a
//! reopen does not wait for millions of inserts; until a key is covered,
//! lookups for it take the B-tree. It grows the way Redis's dictionaries
//! do, incrementally: a full table becomes the `old` one, a table twice
//! its size takes the inserts, and every insert moves a few of the old
//! buckets over. A hashbrown table rehashes everything at once, under the
//! index's write lock: tens of milliseconds at a million keys, half a
//! second at ten million, for every client.
//!
//! The bigger table is allocated and its pages touched ahead, off the lock
//! (`growth_wanted`, `prepared_table`, `give_spare`): in this VM the first
//! touch of fresh memory costs a host fault per page, and the first inserts
//! into a new 2M-bucket table, each on another page, held the write lock
//! for 28-34 ms zeroing 2 MiB pages (redis-benchmark SET `-P 16`, 1M keys:
//! every client stalled). 100k inserts into a fresh table of 4M entries
//! took 53-55 ms, into a prepared one 3.5-4 ms.

use std::cmp::Ordering;
use std::hash::BuildHasher;

use hashbrown::HashTable;

use super::key::{compare, Key};
use super::memtable::Loc;

#[derive(Clone, Copy)]
struct Point {
    tag: u32,
    loc: Loc,
}

/// A table built by `Points::prepared_table`.
pub struct Prepared(HashTable<Point>);

/// What the table knows about a key.
pub enum Lookup {
    Absent,
    /// The only location with the key's tag: the key's, unless the key is
    /// absent and another key shares the tag.
    At(Loc),
    /// Several keys share the tag.
    Ambiguous,
}

/// Which keys of the ordered index the table mirrors.
enum Coverage {
    All,
    /// Keys up to and including this one (`None`: no key yet).
    UpTo(Option<Key>),
}

/// Old buckets moved to the new table per insert while growing: the new
/// table, twice the old one's capacity, fills no faster than it empties.
const MOVES_PER_INSERT: usize = 8;

/// Smallest capacity whose next table is prepared ahead: below it a new
/// table costs less than a millisecond to touch.
const SPARE_MIN_CAPACITY: usize = 1 << 16;

pub struct Points {
    table: HashTable<Point>,
    /// While growing: the previous table and the next bucket to move.
    old: Option<(HashTable<Point>, usize)>,
    /// An empty table for the next growth, its pages already touched.
    spare: Option<HashTable<Point>>,
    hasher: foldhash::quality::RandomState,
    /// All 32 bits but in tests, which narrow it to force shared tags.
    tag_mask: u32,
    coverage: Coverage,
}

/// hashbrown picks the bucket from the low bits of this and the control
/// byte from the top 7; derived from the stored tag alone so the table can
/// grow without the keys.
fn spread(tag: u32) -> u64 {
    (tag as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Points {
    /// An empty table that covers no key yet (see `fill_from`), with tags
    /// of `tag_bits` bits (32 but in tests).
    pub fn new(tag_bits: u32) -> Points {
        Points {
            table: HashTable::new(),
            old: None,
            spare: None,
            hasher: Default::default(),
            tag_mask: u32::MAX >> (32 - tag_bits.clamp(1, 32)),
            coverage: Coverage::UpTo(None),
        }
    }

    fn tag(&self, key: &[u8]) -> u32 {
        self.hasher.hash_one(key) as u32 & self.tag_mask
    }

    /// Whether `key`'s newest location is kept here.
    fn covers(&self, key: &[u8]) -> bool {
        match &self.coverage {
            Coverage::All => true,
            Coverage::UpTo(None) => false,
            Coverage::UpTo(Some(last)) => compare(key, last) != Ordering::Greater,
        }
    }

    /// The tables a point can be in: the current one, and the old one
    /// while growing.
    fn tables(&self) -> impl Iterator<Item = &HashTable<Point>> {
        std::iter::once(&self.table).chain(self.old.as_ref().map(|(old, _)| old))
    }

    // The key-level operations below answer `None` for a key the table does
    // not cover yet (ask the B-tree) and ignore changes to one: `fill_from`
    // reads its newest location from the B-tree when it gets there.

    /// What the table knows about `key`.
    pub fn get(&self, key: &[u8]) -> Option<Lookup> {
        self.covers(key).then(|| self.get_tag(self.tag(key)))
    }

    /// Whether `key`'s newest entry is at `loc`.
    pub fn contains(&self, key: &[u8], loc: Loc) -> Option<bool> {
        self.covers(key).then(|| self.contains_tag(self.tag(key), loc))
    }

    pub fn insert(&mut self, key: &[u8], loc: Loc) {
        if self.covers(key) {
            self.insert_tag(self.tag(key), loc);
        }
    }

    pub fn replace(&mut self, key: &[u8], from: Loc, to: Loc) {
        if self.covers(key) {
            self.replace_tag(self.tag(key), from, to);
        }
    }

    pub fn remove(&mut self, key: &[u8], loc: Loc) {
        if self.covers(key) {
            self.remove_tag(self.tag(key), loc);
        }
    }

    fn get_tag(&self, tag: u32) -> Lookup {
        let mut found = self.tables().flat_map(|t| t.iter_hash(spread(tag))).filter(|p| p.tag == tag);
        match (found.next(), found.next()) {
            (None, _) => Lookup::Absent,
            (Some(point), None) => Lookup::At(point.loc),
            _ => Lookup::Ambiguous,
        }
    }

    /// Whether some key with `tag` is at `loc`. Exact: only one key's
    /// entry can be at a location.
    fn contains_tag(&self, tag: u32, loc: Loc) -> bool {
        self.tables().any(|t| t.find(spread(tag), |p| p.tag == tag && p.loc == loc).is_some())
    }

    fn insert_tag(&mut self, tag: u32, loc: Loc) {
        if self.old.is_none() && self.table.len() == self.table.capacity() {
            let wanted = self.next_capacity();
            let spare = self.spare.take().filter(|spare| spare.capacity() >= wanted);
            let bigger = spare.unwrap_or_else(|| HashTable::with_capacity(wanted));
            self.old = Some((std::mem::replace(&mut self.table, bigger), 0));
        }
        self.table.insert_unique(spread(tag), Point { tag, loc }, |p| spread(p.tag));
        self.move_old_buckets(MOVES_PER_INSERT);
    }

    fn next_capacity(&self) -> usize {
        (self.table.capacity() * 2).max(64)
    }

    /// The capacity of a table to prepare for the next growth, once the
    /// current table is three quarters full and no spare is ready: time
    /// for `prepared_table` (a quarter of the table's inserts) without
    /// holding a spare for long.
    pub fn growth_wanted(&self) -> Option<usize> {
        let capacity = self.table.capacity();
        let ready = self.spare.as_ref().is_some_and(|spare| spare.capacity() >= self.next_capacity());
        let due = self.old.is_none() && capacity >= SPARE_MIN_CAPACITY && self.table.len() >= capacity / 4 * 3;
        (due && !ready).then(|| self.next_capacity())
    }

    /// An empty table of `capacity` whose memory is touched, to be built
    /// without the index's lock and handed over with `give_spare`.
    pub fn prepared_table(capacity: usize) -> Prepared {
        let mut table = HashTable::with_capacity(capacity);
        // Allocation writes the control bytes; the buckets are touched by
        // one insert per page. hashbrown starts probing at bucket `hash &
        // mask` and keeps bucket i's value i + 1 places before the control
        // bytes, so these hashes land one page apart. (Were that to change,
        // the pages would only be touched later, under the lock.)
        let per_page = (4096 / std::mem::size_of::<Point>()).max(1);
        let point = Point { tag: 0, loc: Loc { seg: 0, off: 0, len: 0 } };
        for bucket in (0..table.num_buckets()).step_by(per_page) {
            table.insert_unique(bucket as u64, point, |p| spread(p.tag));
        }
        table.clear();
        Prepared(table)
    }

    /// Keeps `table` for the next growth if it is big enough and none is
    /// under way; otherwise hands it back, for the caller to drop once it
    /// no longer holds the index's lock.
    pub fn give_spare(&mut self, table: Prepared) -> Option<Prepared> {
        if self.old.is_none() && table.0.capacity() >= self.next_capacity() {
            self.spare.replace(table.0).map(Prepared)
        } else {
            Some(table)
        }
    }

    /// Moves up to `buckets` more buckets of the old table, if growing;
    /// returns whether the growth is complete. Inserts move a few buckets
    /// each, so without inserts a table stays half grown: every lookup
    /// probes both tables, and the old one's memory stays allocated.
    pub fn finish_growth(&mut self, buckets: usize) -> bool {
        self.move_old_buckets(buckets);
        self.old.is_none()
    }

    /// Moves up to `buckets` buckets of the old table to the current one.
    fn move_old_buckets(&mut self, buckets: usize) {
        let Some((old, next)) = &mut self.old else { return };
        let end = (*next + buckets).min(old.num_buckets());
        for index in *next..end {
            if let Ok(entry) = old.get_bucket_entry(index) {
                let (point, _) = entry.remove();
                self.table.insert_unique(spread(point.tag), point, |p| spread(p.tag));
            }
        }
        *next = end;
        if end == old.num_buckets() {
            self.old = None;
        }
    }

    fn find_mut(&mut self, tag: u32, loc: Loc) -> Option<&mut Point> {
        let eq = |p: &Point| p.tag == tag && p.loc == loc;
        match self.table.find_mut(spread(tag), eq) {
            Some(point) => Some(point),
            None => self.old.as_mut()?.0.find_mut(spread(tag), eq),
        }
    }

    /// The key with `tag` whose newest entry was at `from` is now at `to`.
    fn replace_tag(&mut self, tag: u32, from: Loc, to: Loc) {
        match self.find_mut(tag, from) {
            Some(point) => point.loc = to,
            None => {
                debug_assert!(false, "no point at {from:?}");
                self.insert_tag(tag, to);
            }
        }
    }

    fn remove_tag(&mut self, tag: u32, loc: Loc) {
        let eq = |p: &Point| p.tag == tag && p.loc == loc;
        if let Ok(entry) = self.table.find_entry(spread(tag), eq) {
            entry.remove();
        } else if let Some((old, _)) = &mut self.old {
            if let Ok(entry) = old.find_entry(spread(tag), eq) {
                entry.remove();
            }
        }
    }

    /// Adds the next `max` entries of `heads` (newest locations in key
    /// order) past the covered ones; returns whether every key is covered.
    pub fn fill_from<'a, I: Iterator<Item = (&'a Key, Loc)>>(
        &mut self,
        total_keys: usize,
        heads: impl FnOnce(Option<&Key>) -> I,
        max: usize,
    ) -> bool {
        let last = match &self.coverage {
            Coverage::All => return true,
            Coverage::UpTo(last) => last.as_ref(),
        };
        if last.is_none() && self.old.is_none() {
            // One allocation for the keys there are, not a doubling chain.
            self.table.reserve(total_keys, |p| spread(p.tag));
        }
        let mut added = 0;
        let mut newest = None;
        for (key, loc) in heads(last).take(max) {
            if !loc.is_tombstone() {
                self.insert_tag(self.tag(key), loc);
            }
            newest = Some(key);
            added += 1;
        }
        self.coverage = match newest {
            _ if added < max => Coverage::All,
            Some(key) => Coverage::UpTo(Some(key.clone())),
            None => Coverage::All,
        };
        matches!(self.coverage, Coverage::All)
    }

    pub fn memory_bytes(&self) -> usize {
        self.tables().chain(&self.spare).map(HashTable::allocation_size).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn loc(off: u32) -> Loc {
        Loc { seg: 1, off, len: 10 }
    }

    #[test]
    fn shared_tags_are_ambiguous_and_exact_locations_are_found() {
        let mut points = Points::new(32);
        points.insert_tag(7, loc(1));
        assert!(matches!(points.get_tag(7), Lookup::At(l) if l == loc(1)));
        assert!(matches!(points.get_tag(8), Lookup::Absent));
        points.insert_tag(7, loc(2));
        assert!(matches!(points.get_tag(7), Lookup::Ambiguous));
        assert!(points.contains_tag(7, loc(2)) && points.contains_tag(7, loc(1)) && !points.contains_tag(7, loc(3)));
        points.replace_tag(7, loc(2), loc(3));
        assert!(points.contains_tag(7, loc(3)) && !points.contains_tag(7, loc(2)));
        points.remove_tag(7, loc(1));
        assert!(matches!(points.get_tag(7), Lookup::At(l) if l == loc(3)));
    }

    #[test]
    fn growth_moves_points_a_few_at_a_time_and_loses_none() {
        let mut points = Points::new(32);
        let mut moved_while_growing = false;
        for i in 0..20_000u32 {
            points.insert_tag(i.wrapping_mul(2_654_435_761), loc(i));
            if let Some((old, _)) = &points.old {
                moved_while_growing |= old.len() < old.capacity();
                // The new table never has to grow before the old is empty.
                assert!(points.table.len() < points.table.capacity());
            }
            if i % 7 == 0 {
                // Updates and removals find points in either table.
                let tag = (i / 2).wrapping_mul(2_654_435_761);
                points.replace_tag(tag, loc(i / 2), loc(i / 2 + 1_000_000));
                points.remove_tag(tag, loc(i / 2 + 1_000_000));
                points.insert_tag(tag, loc(i / 2));
            }
        }
        assert!(moved_while_growing);
        for i in 0..20_000u32 {
            assert!(matches!(points.get_tag(i.wrapping_mul(2_654_435_761)), Lookup::At(l) if l == loc(i)), "{i}");
        }
    }

    #[test]
    fn a_growth_takes_the_table_prepared_ahead_and_loses_no_point() {
        let mut points = Points::new(32);
        let tag = |i: u32| i.wrapping_mul(2_654_435_761);
        let mut inserted = 0u32;
        // Grow to a table big enough to be prepared ahead.
        while points.table.capacity() < SPARE_MIN_CAPACITY || points.old.is_some() {
            points.insert_tag(tag(inserted), loc(inserted));
            inserted += 1;
        }
        let capacity = points.table.capacity();
        while points.growth_wanted().is_none() {
            assert!(points.table.len() < capacity / 4 * 3, "wanted once three quarters full");
            points.insert_tag(tag(inserted), loc(inserted));
            inserted += 1;
        }
        let wanted = points.growth_wanted().unwrap();
        assert_eq!(wanted, capacity * 2);
        // A table too small for the next growth is handed back.
        assert!(points.give_spare(Points::prepared_table(capacity)).is_some());
        let prepared = Points::prepared_table(wanted);
        let prepared_buckets = prepared.0.num_buckets();
        assert!(prepared.0.is_empty() && prepared.0.capacity() >= wanted);
        assert!(points.give_spare(prepared).is_none());
        assert!(points.growth_wanted().is_none(), "a spare is ready");
        while points.old.is_none() {
            points.insert_tag(tag(inserted), loc(inserted));
            inserted += 1;
        }
        assert_eq!(points.table.num_buckets(), prepared_buckets);
        assert!(points.spare.is_none(), "the growth took the spare");
        for i in 0..inserted {
            assert!(matches!(points.get_tag(tag(i)), Lookup::At(l) if l == loc(i)), "{i}");
        }
    }

    #[test]
    fn a_growth_left_half_done_is_finished_without_inserts() {
        let mut points = Points::new(32);
        let mut inserted = 0u32;
        while points.old.is_none() || inserted < 1000 {
            points.insert_tag(inserted.wrapping_mul(2_654_435_761), loc(inserted));
            inserted += 1;
        }
        let grown_to = points.table.capacity();
        let steps = (0..1000).position(|_| points.finish_growth(100));
        assert!(steps.is_some_and(|steps| steps > 0), "finished in {steps:?} steps");
        assert_eq!(points.table.capacity(), grown_to);
        for i in 0..inserted {
            assert!(matches!(points.get_tag(i.wrapping_mul(2_654_435_761)), Lookup::At(l) if l == loc(i)), "{i}");
        }
    }

    #[test]
    fn coverage_grows_chunk_by_chunk() {
        let keys: Vec<Key> = (0u32..10).map(|i| Key::from_slice(&i.to_be_bytes())).collect();
        let mut points = Points::new(32);
        let heads = |from: Option<&Key>| -> Box<dyn Iterator<Item = (&Key, Loc)>> {
            let start = from.map_or(0, |k| keys.iter().position(|x| x == k).unwrap() + 1);
            Box::new(keys[start..].iter().zip(start as u32..).map(|(k, i)| (k, loc(i))))
        };
        assert!(!points.covers(&keys[0]));
        assert!(!points.fill_from(keys.len(), heads, 4));
        assert!(points.covers(&keys[3]) && !points.covers(&keys[4]));
        assert!(!points.fill_from(keys.len(), heads, 4));
        assert!(points.fill_from(keys.len(), heads, 4));
        assert!(points.covers(&keys[9]) && points.covers(b"\xff\xff\xff\xff\xff"));
        for (i, key) in keys.iter().enumerate() {
            assert!(matches!(points.get_tag(points.tag(key)), Lookup::At(l) if l == loc(i as u32)));
        }
    }
}
