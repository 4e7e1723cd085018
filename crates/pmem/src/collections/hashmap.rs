//! A persistent hash map from `u32` to `u32` (the persisted-hashmap
//! experiment's pairs), built on a [`Pool`]: open addressing with linear
//! probing over one table of 16-byte slots reached from the pool's root.
//!
//! Two crash protocols, both on the toolkit:
//! - **insert of a new key** into an empty slot publishes with one write-back
//!   and one fence: the slot's two words are `kv = key << 32 | value` and
//!   `seal = hash(kv) | 1`, and a slot counts only when its seal matches its
//!   kv. Slots are 16-byte aligned, so never split across cache lines; a
//!   crash leaves the old empty slot, the new slot, or a torn one whose seal
//!   does not match (ignored, and reused later through a transaction).
//! - **everything else** (updating a value, removing, growing the table) is
//!   a [`Pool::transaction`], so it is all-or-nothing.
//!
//! [`PHashMap::insert_tx`] does even new-key inserts in a transaction: the
//! classic way, three fences instead of one, measured side by side in the
//! `scaledkv-bench hashmap` experiment.
//!
//! The entry count is not stored (it would need a second persistent word
//! per insert); `open` counts the slots, a pass over the table.

use std::path::Path;

use bytemuck::{Pod, Zeroable};

use crate::error::{Error, Result};
use crate::{Durability, PPtr, Pool, PoolOptions, Tx};

pub const LAYOUT: &str = "scaledkv-hashmap-u32";
pub const LAYOUT_VERSION: u32 = 1;
const INITIAL_CAPACITY: u64 = 1024;
/// Grow when live plus dead slots would pass 3/4 of the table.
const MAX_LOAD_NUMERATOR: u64 = 3;
const MAX_LOAD_DENOMINATOR: u64 = 4;

const SEAL_EMPTY: u64 = 0;
/// A removed entry: probing continues past it.
const SEAL_REMOVED: u64 = 2;

#[derive(Clone, Copy, Pod, Zeroable, Debug, PartialEq, Eq)]
#[repr(C, align(16))]
pub struct Slot {
    kv: u64,
    seal: u64,
}

impl Slot {
    pub fn new(key: u32, value: u32) -> Slot {
        let kv = (key as u64) << 32 | value as u64;
        Slot { kv, seal: seal_of(kv) }
    }

    /// The entry, if the slot holds one whose seal matches.
    pub fn live(&self) -> Option<(u32, u32)> {
        (self.seal == seal_of(self.kv)).then_some(((self.kv >> 32) as u32, self.kv as u32))
    }
}

/// Writes `key -> value` into a plain table (no pool, no persistence) with
/// the map's hashing and probing, returning the slot index it used (None
/// when full). The persisted-hashmap experiment's baselines (mmap + msync,
/// write + fdatasync) use it, so every variant runs the same hash map.
pub fn place(slots: &mut [Slot], key: u32, value: u32) -> Option<usize> {
    let index = match PHashMap::probe(slots, key) {
        Probe::Found(index, _) => index,
        Probe::Absent { dead, empty } => dead.or(empty)?,
    } as usize;
    slots[index] = Slot::new(key, value);
    Some(index)
}

/// A table capacity that holds `entries` under the load limit.
pub fn capacity_for(entries: u64) -> u64 {
    (entries * MAX_LOAD_DENOMINATOR / MAX_LOAD_NUMERATOR + 1).next_power_of_two().max(INITIAL_CAPACITY)
}

/// Odd, so never `SEAL_EMPTY` or `SEAL_REMOVED`.
fn seal_of(kv: u64) -> u64 {
    mix(kv ^ 0x5eed_5eed_5eed_5eed) | 1
}

/// SplitMix64's finaliser: cheap, and every input bit moves every output bit.
fn mix(mut x: u64) -> u64 {
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The pool's root: where the table is and how big.
#[derive(Clone, Copy, Pod, Zeroable, Debug)]
#[repr(C)]
pub struct MapRoot {
    table: PPtr<Slot>,
    capacity: u64,
}

/// The map and the pool it lives in.
pub struct PHashMap {
    pool: Pool,
    root: PPtr<MapRoot>,
    table: PPtr<Slot>,
    capacity: u64,
    /// Volatile counts, rebuilt by `open`: live entries, and slots that are
    /// neither empty nor live (removed or torn), which lengthen probes.
    len: u64,
    dead: u64,
}

/// Where a probe for a key ended.
enum Probe {
    Found(u64, u32),
    /// Not present: the first reusable dead slot on the way, if any, and
    /// the empty slot that ended the probe.
    Absent {
        dead: Option<u64>,
        empty: Option<u64>,
    },
}

impl PHashMap {
    pub fn options(size_bytes: u64, durability: Durability) -> PoolOptions {
        PoolOptions::new(LAYOUT, LAYOUT_VERSION).size_bytes(size_bytes).durability(durability)
    }

    /// Creates a pool file holding an empty map. Atomic: the file takes
    /// `path` only with the map in it (a SIGKILL between the pool's
    /// creation and the map's used to leave a pool `open` refused).
    pub fn create(path: &Path, size_bytes: u64, durability: Durability) -> Result<PHashMap> {
        let options = Self::options(size_bytes, durability);
        Self::attach(Pool::create_with::<MapRoot>(path, &options, |pool| Self::make_table(pool, INITIAL_CAPACITY))?)
    }

    pub fn open(path: &Path, durability: Durability) -> Result<PHashMap> {
        Self::attach(Pool::open(path, &Self::options(0, durability))?)
    }

    /// Makes an empty map in a freshly created pool whose root is a `MapRoot`.
    pub fn init(pool: Pool) -> Result<PHashMap> {
        Self::init_with_capacity(pool, INITIAL_CAPACITY)
    }

    /// As `init`, with room for `capacity_for(n)` entries before it grows.
    pub fn init_with_capacity(mut pool: Pool, capacity: u64) -> Result<PHashMap> {
        Self::make_table(&mut pool, capacity)?;
        Self::attach(pool)
    }

    /// Allocates an empty table of `capacity` (rounded up) slots and points
    /// the root at it, in one transaction.
    fn make_table(pool: &mut Pool, capacity: u64) -> Result<()> {
        let capacity = capacity.max(INITIAL_CAPACITY).next_power_of_two();
        let root = pool.root::<MapRoot>()?;
        pool.transaction(|tx| {
            let table = tx.alloc_slice_zeroed::<Slot>(capacity)?;
            tx.set(root, MapRoot { table, capacity })
        })
    }

    /// Opens the map in `pool`, counting its entries.
    pub fn attach(pool: Pool) -> Result<PHashMap> {
        let root = pool.root::<MapRoot>()?;
        let MapRoot { table, capacity } = *pool.get(root)?;
        if !capacity.is_power_of_two() {
            return Err(Error::CorruptPool {
                path: pool.path().to_path_buf(),
                detail: format!("hash map capacity {capacity} is not a power of two"),
            });
        }
        let slots = pool.get_slice(table, capacity)?;
        let (mut len, mut dead) = (0u64, 0u64);
        for slot in slots {
            match slot.live() {
                Some(_) => len += 1,
                None if slot.seal != SEAL_EMPTY => dead += 1,
                None => {}
            }
        }
        if len + dead >= capacity {
            return Err(Error::CorruptPool {
                path: pool.path().to_path_buf(),
                detail: format!("hash table of {capacity} slots has no empty slot"),
            });
        }
        Ok(PHashMap { pool, root, table, capacity, len, dead })
    }

    pub fn len(&self) -> u64 {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn capacity(&self) -> u64 {
        self.capacity
    }

    pub fn pool(&self) -> &Pool {
        &self.pool
    }

    /// The pool, e.g. to keep other objects beside the map. Changes made
    /// through it must leave the map's table and root alone.
    pub fn pool_mut(&mut self) -> &mut Pool {
        &mut self.pool
    }

    pub fn into_pool(self) -> Pool {
        self.pool
    }

    fn slots(&self) -> Result<&[Slot]> {
        self.pool.get_slice(self.table, self.capacity)
    }

    fn probe(slots: &[Slot], key: u32) -> Probe {
        let mask = slots.len() as u64 - 1;
        let mut index = mix(key as u64) & mask;
        let mut dead = None;
        // Bounded: the load limit keeps empty slots, but a damaged file may not.
        for _ in 0..slots.len() {
            let slot = &slots[index as usize];
            match slot.live() {
                Some((k, v)) if k == key => return Probe::Found(index, v),
                Some(_) => {}
                None if slot.seal == SEAL_EMPTY => return Probe::Absent { dead, empty: Some(index) },
                None => {
                    dead.get_or_insert(index);
                }
            }
            index = (index + 1) & mask;
        }
        Probe::Absent { dead, empty: None }
    }

    pub fn get(&self, key: u32) -> Result<Option<u32>> {
        Ok(match Self::probe(self.slots()?, key) {
            Probe::Found(_, value) => Some(value),
            Probe::Absent { .. } => None,
        })
    }

    /// Inserts or updates; durable when it returns. Returns the old value.
    pub fn insert(&mut self, key: u32, value: u32) -> Result<Option<u32>> {
        self.insert_with(key, value, Publish::AtomicSlot)
    }

    /// As `insert`, with every change in a transaction.
    pub fn insert_tx(&mut self, key: u32, value: u32) -> Result<Option<u32>> {
        self.insert_with(key, value, Publish::Transaction)
    }

    /// Inserts without making anything durable, for bulk loads that call
    /// [`PHashMap::persist_all`] once at the end. A crash before that may
    /// lose any of these inserts (torn slots are ignored, never misread);
    /// table growth is still a transaction.
    pub fn insert_unpersisted(&mut self, key: u32, value: u32) -> Result<Option<u32>> {
        self.insert_with(key, value, Publish::Later)
    }

    /// Makes the whole table durable (one write-back pass, one fence).
    pub fn persist_all(&mut self) -> Result<()> {
        self.pool.persist_slice(self.table, self.capacity)
    }

    fn insert_with(&mut self, key: u32, value: u32, publish: Publish) -> Result<Option<u32>> {
        if (self.len + self.dead + 1) * MAX_LOAD_DENOMINATOR > self.capacity * MAX_LOAD_NUMERATOR {
            self.grow()?;
        }
        let slot = Slot::new(key, value);
        match Self::probe(self.slots()?, key) {
            Probe::Found(index, old) => {
                self.pool.transaction(|tx| tx.set(self.table.at(index), slot))?;
                Ok(Some(old))
            }
            Probe::Absent { dead: Some(index), .. } => {
                self.pool.transaction(|tx| tx.set(self.table.at(index), slot))?;
                self.len += 1;
                self.dead -= 1;
                Ok(None)
            }
            Probe::Absent { dead: None, empty: None } => Err(Error::CorruptPool {
                path: self.pool.path().to_path_buf(),
                detail: "hash table has no free slot".into(),
            }),
            Probe::Absent { dead: None, empty: Some(empty) } => {
                let pointer = self.table.at(empty);
                match publish {
                    Publish::Transaction => self.pool.transaction(|tx| tx.set(pointer, slot))?,
                    Publish::AtomicSlot | Publish::Later => {
                        // SAFETY (crash consistency): the slot is empty, and a
                        // torn write of it fails the seal check (module docs).
                        unsafe { *self.pool.get_mut_unlogged(pointer)? = slot };
                        if publish == Publish::AtomicSlot {
                            self.pool.persist(pointer)?;
                        }
                    }
                }
                self.len += 1;
                Ok(None)
            }
        }
    }

    /// Removes `key`, durably. Returns its value.
    pub fn remove(&mut self, key: u32) -> Result<Option<u32>> {
        match Self::probe(self.slots()?, key) {
            Probe::Found(index, value) => {
                let removed = Slot { kv: 0, seal: SEAL_REMOVED };
                self.pool.transaction(|tx| tx.set(self.table.at(index), removed))?;
                self.len -= 1;
                self.dead += 1;
                Ok(Some(value))
            }
            Probe::Absent { .. } => Ok(None),
        }
    }

    /// Rehashes into a table twice as big (or as big, when removals are
    /// most of the load), in one transaction: the new table is fresh memory
    /// and needs no logging; the root and the old table's free are logged.
    fn grow(&mut self) -> Result<()> {
        let capacity = if self.len * 2 > self.capacity / 2 { self.capacity * 2 } else { self.capacity };
        let (old_table, old_capacity, root) = (self.table, self.capacity, self.root);
        let table = self.pool.transaction(|tx: &mut Tx<'_>| {
            let table = tx.alloc_slice_zeroed::<Slot>(capacity)?;
            let live: Vec<Slot> =
                tx.get_slice(old_table, old_capacity)?.iter().filter(|s| s.live().is_some()).copied().collect();
            // Allocated in this transaction: no logging, written back at commit.
            let slots = tx.get_slice_mut(table, capacity)?;
            let mask = capacity - 1;
            for slot in live {
                let mut index = mix(slot.kv >> 32) & mask;
                while slots[index as usize].seal != SEAL_EMPTY {
                    index = (index + 1) & mask;
                }
                slots[index as usize] = slot;
            }
            tx.set(root, MapRoot { table, capacity })?;
            tx.free(old_table)?;
            Ok::<_, Error>(table)
        })?;
        self.table = table;
        self.capacity = capacity;
        self.dead = 0;
        Ok(())
    }

    /// Every live entry, in table order.
    pub fn entries(&self) -> Result<Vec<(u32, u32)>> {
        Ok(self.slots()?.iter().filter_map(Slot::live).collect())
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Publish {
    AtomicSlot,
    Transaction,
    Later,
}
