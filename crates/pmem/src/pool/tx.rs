//! Transactions with undo logging.
//!
//! Before a range is first changed, its old bytes go to the undo log as an
//! entry, written back and fenced; only then may the range change. Commit
//! writes back every changed range, fences, and then bumps the log's
//! generation word (one 8-byte store, written back and fenced): entries of
//! an older generation are dead. Open rolls back the entries of the current
//! generation, newest first, and bumps it. So a crash anywhere leaves either
//! the old state (generation not bumped: roll back) or the new one.
//!
//! Entry format: `generation u64 | target u64 | len u32 | crc32c u32 |
//! old bytes, padded to 8`. The CRC covers the first 20 bytes and the data:
//! a torn entry fails it, and since the target is changed only after its
//! entry was fenced, a torn entry's target was never touched.
//!
//! Fences per transaction: one per batch of new entries (entries added with
//! [`Tx::add`] share the next fence) plus two at commit.

use std::collections::BTreeMap;

use bytemuck::Pod;

use super::heap::FreeTarget;
use super::{PPtr, Pool, Recovery, LOG_HEADER_BYTES};
use crate::error::{Error, Result};

const ENTRY_HEADER_BYTES: u64 = 24;

/// A transaction on a [`Pool`], handed to the body of [`Pool::transaction`].
pub struct Tx<'p> {
    pub(super) pool: &'p mut Pool,
    /// Absolute offset where the next entry goes, and the entries written.
    log_end: u64,
    entries: Vec<u64>,
    /// Ranges already logged (start -> end), and objects allocated in this
    /// transaction, which need no logging: a rollback frees them.
    logged: RangeSet,
    fresh: RangeSet,
    /// Ranges to write back at commit.
    dirty: Vec<(u64, u64)>,
    frees: Vec<FreeTarget>,
    unfenced: bool,
    pub(super) heap_changed: bool,
    finished: bool,
}

/// Non-overlapping-enough set of byte ranges: `contains` may say no for a
/// range covered by two neighbours, which only costs a redundant entry.
#[derive(Default)]
struct RangeSet(BTreeMap<u64, u64>);

impl RangeSet {
    fn contains(&self, start: u64, len: u64) -> bool {
        self.0.range(..=start).next_back().is_some_and(|(_, end)| *end >= start + len)
    }

    fn insert(&mut self, start: u64, len: u64) {
        let end = self.0.entry(start).or_insert(start + len);
        *end = (*end).max(start + len);
    }
}

impl<'p> Tx<'p> {
    pub(super) fn begin(pool: &'p mut Pool) -> Tx<'p> {
        let log_end = pool.geometry.log_offset + LOG_HEADER_BYTES;
        Tx {
            pool,
            log_end,
            entries: Vec::new(),
            logged: RangeSet::default(),
            fresh: RangeSet::default(),
            dirty: Vec::new(),
            frees: Vec::new(),
            unfenced: false,
            heap_changed: false,
            finished: false,
        }
    }

    /// Saves the old bytes of `[offset, offset + len)` unless already saved
    /// or allocated in this transaction. Not yet fenced: see `fence_log`.
    pub(super) fn log_range(&mut self, offset: u64, len: u64) -> Result<()> {
        // Allocated in this transaction: already in `dirty` whole.
        if self.fresh.contains(offset, len) {
            return Ok(());
        }
        if self.logged.contains(offset, len) {
            return Ok(());
        }
        let g = self.pool.geometry;
        let entry_bytes = ENTRY_HEADER_BYTES + len.div_ceil(8) * 8;
        let log_limit = g.log_offset + g.log_bytes;
        if len > u32::MAX as u64 || self.log_end + entry_bytes > log_limit {
            return Err(Error::TxLogFull { path: self.pool.path.clone(), capacity: g.log_bytes - LOG_HEADER_BYTES });
        }
        let mem = self.pool.mem;
        let at = self.log_end;
        let entry = mem.bytes_mut(at, ENTRY_HEADER_BYTES + len);
        entry[0..8].copy_from_slice(&self.pool.generation.to_le_bytes());
        entry[8..16].copy_from_slice(&offset.to_le_bytes());
        entry[16..20].copy_from_slice(&(len as u32).to_le_bytes());
        entry[24..].copy_from_slice(mem.bytes(offset, len));
        let crc = crc32c::crc32c_append(crc32c::crc32c(&entry[0..20]), &entry[24..]);
        entry[20..24].copy_from_slice(&crc.to_le_bytes());
        self.pool.media.write_back(at, ENTRY_HEADER_BYTES + len)?;
        self.unfenced = true;
        self.entries.push(at);
        self.log_end += entry_bytes;
        self.logged.insert(offset, len);
        self.dirty.push((offset, len));
        Ok(())
    }

    /// Makes the entries written so far durable, so their targets may change.
    pub(super) fn fence_log(&mut self) -> Result<()> {
        if self.unfenced {
            self.pool.media.fence()?;
            self.unfenced = false;
        }
        Ok(())
    }

    /// The pool, for reads and its path.
    pub fn pool(&self) -> &Pool {
        self.pool
    }

    /// Reads an object (sees this transaction's changes).
    pub fn get<T: Pod>(&self, pointer: PPtr<T>) -> Result<&T> {
        self.pool.get(pointer)
    }

    pub fn get_slice<T: Pod>(&self, pointer: PPtr<T>, count: u64) -> Result<&[T]> {
        self.pool.get_slice(pointer, count)
    }

    /// Logs an object without fencing yet: call it for every object a step
    /// will change, then `get_mut` them, and all share one fence.
    pub fn add<T: Pod>(&mut self, pointer: PPtr<T>) -> Result<()> {
        self.add_slice(pointer, 1)
    }

    pub fn add_slice<T: Pod>(&mut self, pointer: PPtr<T>, count: u64) -> Result<()> {
        self.pool.check(pointer, count)?;
        self.log_range(pointer.offset(), std::mem::size_of::<T>() as u64 * count)
    }

    /// A mutable view of an object, its old bytes logged first.
    pub fn get_mut<T: Pod>(&mut self, pointer: PPtr<T>) -> Result<&mut T> {
        Ok(&mut self.get_slice_mut(pointer, 1)?[0])
    }

    /// A mutable view of `count` objects, logged as one range.
    pub fn get_slice_mut<T: Pod>(&mut self, pointer: PPtr<T>, count: u64) -> Result<&mut [T]> {
        self.add_slice(pointer, count)?;
        self.fence_log()?;
        let len = std::mem::size_of::<T>() as u64 * count;
        Ok(bytemuck::cast_slice_mut(self.pool.mem.bytes_mut(pointer.offset(), len)))
    }

    /// Overwrites an object.
    pub fn set<T: Pod>(&mut self, pointer: PPtr<T>, value: T) -> Result<()> {
        *self.get_mut(pointer)? = value;
        Ok(())
    }

    /// A mutable view without logging.
    ///
    /// # Safety
    /// Crash consistency, not memory safety: the caller guarantees that
    /// until this transaction commits, nothing reachable from the root
    /// depends on these bytes (so a rollback may leave them torn), or that
    /// the range was logged (with `add`) earlier in this transaction.
    pub unsafe fn get_mut_unlogged<T: Pod>(&mut self, pointer: PPtr<T>) -> Result<&mut T> {
        self.pool.check(pointer, 1)?;
        let len = std::mem::size_of::<T>() as u64;
        self.dirty.push((pointer.offset(), len));
        Ok(bytemuck::from_bytes_mut(self.pool.mem.bytes_mut(pointer.offset(), len)))
    }

    /// Allocates an object holding `value`. Rolled back (freed) with the
    /// transaction.
    pub fn alloc<T: Pod>(&mut self, value: T) -> Result<PPtr<T>> {
        let pointer = self.alloc_uninit::<T>(1)?;
        let len = std::mem::size_of::<T>() as u64;
        self.pool.mem.bytes_mut(pointer.offset(), len).copy_from_slice(bytemuck::bytes_of(&value));
        Ok(pointer)
    }

    pub fn alloc_zeroed<T: Pod>(&mut self) -> Result<PPtr<T>> {
        self.alloc(T::zeroed())
    }

    /// Allocates `count` zeroed `T`s; index them with [`PPtr::at`].
    pub fn alloc_slice_zeroed<T: Pod>(&mut self, count: u64) -> Result<PPtr<T>> {
        let pointer = self.alloc_uninit::<T>(count)?;
        let len = std::mem::size_of::<T>() as u64 * count;
        self.pool.mem.bytes_mut(pointer.offset(), len).fill(0);
        Ok(pointer)
    }

    fn alloc_uninit<T: Pod>(&mut self, count: u64) -> Result<PPtr<T>> {
        let len = (std::mem::size_of::<T>() as u64).saturating_mul(count);
        let offset = self.heap_alloc(len, std::mem::align_of::<T>())?;
        self.fresh.insert(offset, len);
        self.dirty.push((offset, len));
        Ok(PPtr::from_offset(offset))
    }

    /// Frees an object when the transaction commits (not before, so the
    /// block cannot be reused, and overwritten, by a transaction that may
    /// still roll back). Freeing what is not an allocated object's start,
    /// or freeing twice, is an error.
    pub fn free<T>(&mut self, pointer: PPtr<T>) -> Result<()> {
        let target = self.locate_free(pointer.offset())?;
        if self.frees.iter().any(|t| t.key() == target.key()) {
            return Err(Error::InvalidFree { path: self.pool.path.clone(), offset: pointer.offset() });
        }
        self.frees.push(target);
        Ok(())
    }

    pub(super) fn commit(mut self) -> Result<()> {
        let result = self.commit_inner();
        self.finished = result.is_ok();
        result
    }

    fn commit_inner(&mut self) -> Result<()> {
        if !self.frees.is_empty() {
            self.heap_changed = true;
            let frees = std::mem::take(&mut self.frees);
            for target in &frees {
                self.log_free(target)?;
            }
            self.fence_log()?;
            for target in &frees {
                self.apply_free(target);
            }
        }
        if self.entries.is_empty() && self.dirty.is_empty() {
            return Ok(());
        }
        for (offset, len) in std::mem::take(&mut self.dirty) {
            self.pool.media.write_back(offset, len)?;
        }
        self.pool.media.fence()?;
        bump_generation(self.pool)
    }

    /// Restores every logged range, newest entry first.
    fn roll_back(&mut self) -> Result<()> {
        for &at in self.entries.iter().rev() {
            restore_entry(self.pool, at)?;
        }
        self.pool.media.fence()?;
        bump_generation(self.pool)?;
        if self.heap_changed {
            self.pool.heap = super::heap::Heap::rebuild(self.pool)?;
        }
        Ok(())
    }
}

impl Drop for Tx<'_> {
    /// An unfinished transaction (error, panic, failed commit) rolls back.
    fn drop(&mut self) {
        if !self.finished {
            if let Err(error) = self.roll_back() {
                self.pool.poisoned = Some(error.to_string());
            }
        }
    }
}

fn bump_generation(pool: &mut Pool) -> Result<()> {
    pool.generation += 1;
    let at = pool.geometry.log_offset;
    pool.mem.set_u64(at, pool.generation);
    pool.media.write_back(at, 8)?;
    pool.media.fence()
}

fn restore_entry(pool: &mut Pool, at: u64) -> Result<()> {
    let mem = pool.mem;
    let target = mem.u64_at(at + 8);
    let len = u32::from_le_bytes(mem.bytes(at + 16, 4).try_into().expect("4 bytes")) as u64;
    mem.bytes_mut(target, len).copy_from_slice(mem.bytes(at + ENTRY_HEADER_BYTES, len));
    pool.media.write_back(target, len)
}

/// Rolls back the transaction a crash interrupted, if any: the entries of
/// the current generation whose CRC holds, up to the first that does not.
pub(super) fn recover(pool: &mut Pool) -> Result<Recovery> {
    let g = pool.geometry;
    let mem = pool.mem;
    let mut at = g.log_offset + LOG_HEADER_BYTES;
    let limit = g.log_offset + g.log_bytes;
    let mut entries = Vec::new();
    while at + ENTRY_HEADER_BYTES <= limit {
        let header = mem.bytes(at, ENTRY_HEADER_BYTES);
        let generation = u64::from_le_bytes(header[0..8].try_into().expect("8 bytes"));
        let target = u64::from_le_bytes(header[8..16].try_into().expect("8 bytes"));
        let len = u32::from_le_bytes(header[16..20].try_into().expect("4 bytes")) as u64;
        let crc = u32::from_le_bytes(header[20..24].try_into().expect("4 bytes"));
        let entry_bytes = ENTRY_HEADER_BYTES + len.div_ceil(8) * 8;
        if generation != pool.generation || at + entry_bytes > limit {
            break;
        }
        let data = mem.bytes(at + ENTRY_HEADER_BYTES, len);
        if crc32c::crc32c_append(crc32c::crc32c(&header[0..20]), data) != crc {
            break;
        }
        // Undo targets are allocator metadata or heap objects, never the
        // header or the log; an entry saying otherwise is damage.
        if target < g.table_offset || target.checked_add(len).is_none_or(|end| end > g.heap_end()) {
            return Err(Error::CorruptPool {
                path: pool.path.clone(),
                detail: format!("undo entry at {at:#x} targets {target:#x}+{len}, outside the heap"),
            });
        }
        entries.push(at);
        at += entry_bytes;
    }
    for &entry in entries.iter().rev() {
        restore_entry(pool, entry)?;
    }
    pool.media.fence()?;
    bump_generation(pool)?;
    Ok(Recovery { rolled_back_entries: entries.len() })
}
