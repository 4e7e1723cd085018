//! Point lookups by hash, beside the ordered index.
//!
//! A B-tree descent over a million keys is a chain of cache misses: it was
//! 31% of the server's CPU for GET `-P 16` (1M keys, 1 KiB values). A hash
//! probe here is one cache line (`Table`). The table maps a 32-bit tag of
//! each key's hash to the newest location of the key and holds no key
//! bytes (a 16-byte slot a key, 21-43 bytes with the load factor): the log entry
//! at that location holds the key, and readers check it there. Tags are
//! not unique: a lookup that finds two candidates for its tag, or whose
//! entry turns out to hold another key, asks the B-tree instead.
//!
//! The table is filled after open a chunk at a time (`Coverage`), so a
//! reopen does not wait for millions of inserts; until a key is covered,
//! lookups for it take the B-tree. It grows the way Redis's dictionaries
//! do, incrementally: a full table becomes the `old` one, a table twice
//! its size takes the inserts, and every insert moves a few of the old
//! slots over. Rehashing everything at once, as hashbrown (this table's
//! first form) does, holds the index's write lock for tens of
//! milliseconds at a million keys, half a second at ten million, for
//! every client.
//!
//! The bigger table is allocated and its pages touched ahead, off the lock
//! (`growth_wanted`, `prepared_table`, `give_spare`): in this VM the first
//! touch of fresh memory costs a host fault per page, and the first inserts
//! into a new 2M-slot table, each on another page, held the write lock
//! for 28-34 ms zeroing 2 MiB pages (redis-benchmark SET `-P 16`, 1M keys:
//! every client stalled). 100k inserts into a fresh table of 4M entries
//! took 53-55 ms, into a prepared one 3.5-4 ms.

use std::cmp::Ordering;
use std::hash::BuildHasher;

use bytemuck::Zeroable;

use super::key::{compare, Key};
use super::memtable::Loc;

/// One slot: a key's tag and the newest location of its entry. All zero
/// is an empty slot, so a zeroed allocation is an empty table (a point's
/// `len` is never 0: it counts the entry's header).
#[derive(Clone, Copy, Zeroable, PartialEq, Eq)]
#[repr(C)]
struct Point {
    tag: u32,
    seg: u32,
    off: u32,
    len: u32,
}

/// `seg` of a point removed from a table that a growth is emptying: not
/// an empty slot, so probes for other tags go on past it.
const GONE: u32 = u32::MAX;

impl Point {
    const EMPTY: Point = Point { tag: 0, seg: 0, off: 0, len: 0 };

    fn new(tag: u32, loc: Loc) -> Point {
        debug_assert!(loc.len > 0 && !loc.is_tombstone(), "not an entry: {loc:?}");
        Point { tag, seg: loc.seg, off: loc.off, len: loc.len }
    }

    fn loc(&self) -> Loc {
        Loc { seg: self.seg, off: self.off, len: self.len }
    }

    fn is_empty(&self) -> bool {
        self.len == 0 && self.seg != GONE
    }

    /// Whether the slot holds a point (not empty, not `GONE`).
    fn is_point(&self) -> bool {
        self.len != 0
    }

    fn holds(&self, tag: u32) -> bool {
        self.tag == tag && self.is_point()
    }

    fn is(&self, tag: u32, loc: Loc) -> bool {
        self.holds(tag) && self.loc() == loc
    }
}

const SLOTS_PER_LINE: usize = 4;

/// Four slots on one cache line: a probe that starts at a line's first
/// slots reads that line alone.
#[derive(Clone, Copy, Zeroable)]
#[repr(C, align(64))]
struct Line([Point; SLOTS_PER_LINE]);

/// Open addressing with linear probing over 16-byte slots, at most three
/// quarters full. A lookup reads the line of the tag's home slot and, as
/// often as a run crosses a line, the next one: one cache miss where
/// hashbrown's separate control bytes and buckets took two (`perf
/// annotate` of readrandom: the two loads shared 97% of the probe's
/// samples). Removals shift the points after them back (no tombstones);
/// only a table being emptied by a growth marks removed points `GONE`.
struct Table {
    lines: Box<[Line]>,
    /// Points held, `GONE` ones not counted.
    len: usize,
    /// 64 - log2(slots): a tag's home slot is the top bits of `spread`.
    shift: u32,
}

/// Slots of the smallest table.
const MIN_SLOTS: usize = 16;

impl Table {
    /// An empty table of `slots` slots (rounded up to a power of two);
    /// the allocation is zeroed by the system, its pages not yet touched.
    fn with_slots(slots: usize) -> Table {
        let slots = slots.next_power_of_two().max(MIN_SLOTS);
        let mut lines: Box<[Line]> = bytemuck::allocation::zeroed_slice_box(slots / SLOTS_PER_LINE);
        crate::checkpoint::advise_huge_pages_in(&mut lines);
        Table { lines, len: 0, shift: 64 - slots.trailing_zeros() }
    }

    /// The smallest table that holds `points`.
    fn with_capacity(points: usize) -> Table {
        Table::with_slots(points.div_ceil(3) * 4)
    }

    fn slots(&self) -> usize {
        self.lines.len() * SLOTS_PER_LINE
    }

    fn capacity(&self) -> usize {
        self.slots() / 4 * 3
    }

    fn slot(&self, i: usize) -> &Point {
        &self.lines[i / SLOTS_PER_LINE].0[i % SLOTS_PER_LINE]
    }

    fn slot_mut(&mut self, i: usize) -> &mut Point {
        &mut self.lines[i / SLOTS_PER_LINE].0[i % SLOTS_PER_LINE]
    }

    fn home(&self, tag: u32) -> usize {
        (spread(tag) >> self.shift) as usize
    }

    /// The slots from `tag`'s home up to the first empty one, but those
    /// below `moved` (copied out by a growth, no longer read; 0 for the
    /// current table): those where a point with `tag` can be.
    fn probe(&self, tag: u32, moved: usize) -> impl Iterator<Item = usize> + '_ {
        let mask = self.slots() - 1;
        let home = self.home(tag);
        (0..self.slots())
            .map(move |k| (home + k) & mask)
            .take_while(|&i| !self.slot(i).is_empty())
            .filter(move |&i| i >= moved)
    }

    /// The slot of the point (`tag`, `loc`) at or above `moved`.
    fn find(&self, tag: u32, loc: Loc, moved: usize) -> Option<usize> {
        self.probe(tag, moved).find(|&i| self.slot(i).is(tag, loc))
    }

    /// Puts `point` in the first empty slot from its home. The caller
    /// keeps the table below its capacity, so there is one.
    fn insert(&mut self, point: Point) {
        let mask = self.slots() - 1;
        let mut i = self.home(point.tag);
        while !self.slot(i).is_empty() {
            i = (i + 1) & mask;
        }
        *self.slot_mut(i) = point;
        self.len += 1;
    }

    /// Empties slot `hole` and moves back each later point of its run that
    /// may sit there (the hole lies between its home and it), so that no
    /// probe meets an empty slot before the point it looks for.
    fn remove_at(&mut self, mut hole: usize) {
        let mask = self.slots() - 1;
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let point = *self.slot(i);
            if point.is_empty() {
                break;
            }
            let from_home = i.wrapping_sub(self.home(point.tag)) & mask;
            if from_home >= (i.wrapping_sub(hole) & mask) {
                *self.slot_mut(hole) = point;
                hole = i;
            }
        }
        *self.slot_mut(hole) = Point::EMPTY;
        self.len -= 1;
    }

    /// Asks the CPU for the line of `tag`'s home slot.
    fn prefetch(&self, tag: u32) {
        crate::iter::prefetch_line(&self.lines[self.home(tag) / SLOTS_PER_LINE]);
    }

    fn memory_bytes(&self) -> usize {
        std::mem::size_of_val(&*self.lines)
    }
}

/// A table built by `Points::prepared_table`.
pub struct Prepared(Table);

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

/// Old slots moved to the new table per insert while growing: the new
/// table, twice the old one's size, fills no faster than it empties.
const MOVES_PER_INSERT: usize = 8;

/// Smallest capacity whose next table is prepared ahead: below it a new
/// table costs less than a millisecond to touch.
const SPARE_MIN_CAPACITY: usize = 1 << 16;

pub struct Points {
    table: Table,
    /// While growing: the previous table and the next slot to move. Its
    /// slots below that one were copied to `table` and are not looked at.
    old: Option<(Table, usize)>,
    /// An empty table for the next growth, its pages already touched.
    spare: Option<Table>,
    hasher: foldhash::quality::RandomState,
    /// All 32 bits but in tests, which narrow it to force shared tags.
    tag_mask: u32,
    coverage: Coverage,
}

/// Mixes a tag into the 64 bits whose top ones pick its home slot;
/// derived from the stored tag alone so the table can grow without the
/// keys.
fn spread(tag: u32) -> u64 {
    (tag as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)
}

impl Points {
    /// An empty table that covers no key yet (see `fill_from`), with tags
    /// of `tag_bits` bits (32 but in tests).
    pub fn new(tag_bits: u32) -> Points {
        Points {
            table: Table::with_slots(MIN_SLOTS),
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

    /// The points with `tag`: in the current table, then in the part of
    /// the old one not moved yet.
    fn with_tag(&self, tag: u32) -> impl Iterator<Item = &Point> {
        let current = self.table.probe(tag, 0).map(|i| self.table.slot(i));
        let old = self.old.iter().flat_map(move |(old, next)| old.probe(tag, *next).map(move |i| old.slot(i)));
        current.chain(old).filter(move |point| point.holds(tag))
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

    /// Asks the CPU for the cache lines where `get(key)` will look first,
    /// so that a caller about to look up several keys overlaps their
    /// misses. A hint: it changes nothing.
    pub fn prefetch(&self, key: &[u8]) {
        if self.covers(key) {
            let tag = self.tag(key);
            self.table.prefetch(tag);
            if let Some((old, _)) = &self.old {
                old.prefetch(tag);
            }
        }
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
        let mut found = self.with_tag(tag);
        match (found.next(), found.next()) {
            (None, _) => Lookup::Absent,
            (Some(point), None) => Lookup::At(point.loc()),
            _ => Lookup::Ambiguous,
        }
    }

    /// Whether some key with `tag` is at `loc`. Exact: only one key's
    /// entry can be at a location.
    fn contains_tag(&self, tag: u32, loc: Loc) -> bool {
        self.with_tag(tag).any(|point| point.loc() == loc)
    }

    fn insert_tag(&mut self, tag: u32, loc: Loc) {
        if self.old.is_none() && self.table.len >= self.table.capacity() {
            let wanted = self.next_capacity();
            let spare = self.spare.take().filter(|spare| spare.capacity() >= wanted);
            let bigger = spare.unwrap_or_else(|| Table::with_capacity(wanted));
            self.old = Some((std::mem::replace(&mut self.table, bigger), 0));
        }
        self.table.insert(Point::new(tag, loc));
        self.move_old_slots(MOVES_PER_INSERT);
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
        let due = self.old.is_none() && capacity >= SPARE_MIN_CAPACITY && self.table.len >= capacity / 4 * 3;
        (due && !ready).then(|| self.next_capacity())
    }

    /// An empty table of `capacity` whose memory is touched, to be built
    /// without the index's lock and handed over with `give_spare`.
    pub fn prepared_table(capacity: usize) -> Prepared {
        let mut table = Table::with_capacity(capacity);
        let lines_per_page = 4096 / std::mem::size_of::<Line>();
        for line in table.lines.iter_mut().step_by(lines_per_page) {
            // SAFETY: a valid, aligned, exclusive reference. The store is
            // volatile because the memory is known to be zero: a plain
            // store of zero could be dropped, and the page left untouched.
            unsafe { std::ptr::write_volatile(line, Line::zeroed()) };
        }
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

    /// Moves up to `slots` more slots of the old table, if growing;
    /// returns whether the growth is complete. Inserts move a few slots
    /// each, so without inserts a table stays half grown: every lookup
    /// probes both tables, and the old one's memory stays allocated.
    pub fn finish_growth(&mut self, slots: usize) -> bool {
        self.move_old_slots(slots);
        self.old.is_none()
    }

    /// Copies up to `slots` slots of the old table to the current one.
    /// The copies stay behind, unread (lookups skip the old table's slots
    /// below `next`): emptying them would cut the runs of later points.
    fn move_old_slots(&mut self, slots: usize) {
        let Some((old, next)) = &mut self.old else { return };
        let end = (*next + slots).min(old.slots());
        for i in *next..end {
            let point = *old.slot(i);
            if point.is_point() {
                self.table.insert(point);
            }
        }
        *next = end;
        if end == old.slots() {
            self.old = None;
        }
    }

    /// The key with `tag` whose newest entry was at `from` is now at `to`.
    fn replace_tag(&mut self, tag: u32, from: Loc, to: Loc) {
        let point = Point::new(tag, to);
        if let Some(i) = self.table.find(tag, from, 0) {
            *self.table.slot_mut(i) = point;
        } else if let Some((old, i)) = self.find_in_old(tag, from) {
            *old.slot_mut(i) = point;
        } else {
            debug_assert!(false, "no point at {from:?}");
            self.insert_tag(tag, to);
        }
    }

    fn remove_tag(&mut self, tag: u32, loc: Loc) {
        if let Some(i) = self.table.find(tag, loc, 0) {
            self.table.remove_at(i);
        } else if let Some((old, i)) = self.find_in_old(tag, loc) {
            *old.slot_mut(i) = Point { seg: GONE, ..Point::EMPTY };
            old.len -= 1;
        }
    }

    /// The old table and the slot there of the point (`tag`, `loc`), if
    /// growing and it was not moved yet.
    fn find_in_old(&mut self, tag: u32, loc: Loc) -> Option<(&mut Table, usize)> {
        let (old, next) = self.old.as_mut()?;
        let i = old.find(tag, loc, *next)?;
        Some((old, i))
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
        if last.is_none() && self.old.is_none() && self.table.capacity() < total_keys {
            // One allocation for the keys there are, not a doubling chain;
            // the table covers no key yet, so it holds none.
            self.table = Table::with_capacity(total_keys);
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
        let old = self.old.as_ref().map(|(old, _)| old);
        [Some(&self.table), old, self.spare.as_ref()].into_iter().flatten().map(Table::memory_bytes).sum()
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
            if let Some((_, next)) = &points.old {
                moved_while_growing |= *next > 0;
                // The new table never has to grow before the old is empty.
                assert!(points.table.len < points.table.capacity());
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
            assert!(points.table.len < capacity / 4 * 3, "wanted once three quarters full");
            points.insert_tag(tag(inserted), loc(inserted));
            inserted += 1;
        }
        let wanted = points.growth_wanted().unwrap();
        assert_eq!(wanted, capacity * 2);
        // A table too small for the next growth is handed back.
        assert!(points.give_spare(Points::prepared_table(capacity)).is_some());
        let prepared = Points::prepared_table(wanted);
        let prepared_slots = prepared.0.slots();
        assert!(prepared.0.len == 0 && prepared.0.capacity() >= wanted);
        assert!(points.give_spare(prepared).is_none());
        assert!(points.growth_wanted().is_none(), "a spare is ready");
        while points.old.is_none() {
            points.insert_tag(tag(inserted), loc(inserted));
            inserted += 1;
        }
        assert_eq!(points.table.slots(), prepared_slots);
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

    /// Random inserts, moves and removals of points with few distinct
    /// tags (long runs, many shared tags, removals inside runs and across
    /// the table's end, growths under way) against a model.
    #[test]
    fn probes_find_what_a_model_holds_through_removals_and_growths() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut points = Points::new(32);
        let mut model: Vec<(u32, Loc)> = Vec::new();
        let mut next_off = 0;
        let check = |points: &Points, model: &[(u32, Loc)], tag: u32| {
            let held: Vec<Loc> = model.iter().filter(|(t, _)| *t == tag).map(|(_, l)| *l).collect();
            match (points.get_tag(tag), held.as_slice()) {
                (Lookup::Absent, []) | (Lookup::Ambiguous, [_, _, ..]) => {}
                (Lookup::At(found), [only]) => assert_eq!(found, *only),
                _ => panic!("tag {tag}: the model holds {held:?}"),
            }
            assert!(held.iter().all(|loc| points.contains_tag(tag, *loc)));
        };
        for step in 0..60_000 {
            let tag = rng.gen_range(0..3_000u32).wrapping_mul(0x0100_0193);
            next_off += 1;
            let op = rng.gen_range(0..10);
            let held = model.iter().position(|(t, _)| *t == tag);
            match (op, held) {
                (0..=5, _) | (_, None) => {
                    points.insert_tag(tag, loc(next_off));
                    model.push((tag, loc(next_off)));
                }
                (6 | 7, Some(i)) => {
                    points.replace_tag(tag, model[i].1, loc(next_off));
                    model[i].1 = loc(next_off);
                }
                (_, Some(i)) => {
                    points.remove_tag(tag, model.swap_remove(i).1);
                }
            }
            check(&points, &model, tag);
            if step % 1_000 == 0 {
                points.finish_growth(rng.gen_range(0..64));
            }
        }
        for tag in (0..3_000u32).map(|t| t.wrapping_mul(0x0100_0193)) {
            check(&points, &model, tag);
        }
        assert_eq!(
            points.table.len
                + points
                    .old
                    .as_ref()
                    .map_or(0, |(old, next)| { (*next..old.slots()).filter(|&i| old.slot(i).is_point()).count() }),
            model.len()
        );
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
