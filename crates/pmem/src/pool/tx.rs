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
//!
//! Redo logging, where stores reach the file only when written back (`sync`
//! mode on a page-cache file system: a private mapping copied out with
//! pwrite, each fence an fdatasync): the file keeps the old bytes until
//! commit, so the old bytes are kept in DRAM for a rollback and nothing is
//! written before commit. Commit writes the *new* bytes of every changed
//! range (logged ones, and fresh objects when they fit) to half
//! `generation % 2` of the log, closed by a commit record whose CRC chains
//! the entries' CRCs, and fences once: that fence is the commit point. The logged ranges are then written back in place without a
//! fence; the next fence (the next commit's) makes them durable, and only
//! the commit after that reuses this half of the log. Open replays the
//! newest committed log whose generation is not below the log's generation
//! word. An unlogged persist (`Pool::persist`) first retires the live log
//! (a fence, then the generation word moves past it), so a replay can never
//! undo a later acknowledged unlogged store. One fence per transaction
//! instead of three: each is a device flush on this path.

use std::collections::BTreeMap;

use bytemuck::Pod;

use super::heap::FreeTarget;
use super::{PPtr, Pool, Recovery, LOG_HEADER_BYTES};
use crate::error::{Error, Result};

const ENTRY_HEADER_BYTES: u64 = 24;
/// Set in an entry's length word: the entry holds new bytes (redo).
const REDO_FLAG: u32 = 1 << 31;
/// The target word of the record that commits a redo log; its 8 data bytes
/// are the chained CRC of the entries before it and their count, with
/// `ALONE_FLAG` set when a fence inside this commit already made the
/// previous transaction's in-place writes durable.
const COMMIT_TARGET: u64 = u64::MAX;
const ALONE_FLAG: u32 = 1 << 31;
const COMMIT_RECORD_BYTES: u64 = ENTRY_HEADER_BYTES + 8;
/// Generations at or past this are damage: one per transaction, a pool
/// would need centuries to get there. Checked where a generation is read,
/// so that moving one past a log's (`+ 1`) cannot overflow (a fuzzed
/// generation word of `u64::MAX` panicked in `bump_generation`).
pub(super) const GENERATION_LIMIT: u64 = 1 << 62;

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
    /// Redo logging (see the module docs): the logged ranges, their old
    /// bytes for a rollback, and the bytes their log entries will take.
    redo: bool,
    redo_ranges: Vec<(u64, u64)>,
    saved: Vec<(u64, Vec<u8>)>,
    redo_bytes: u64,
    /// A redo commit wrote to the file: a failure after this leaves the
    /// outcome to recovery, so the pool is poisoned instead of rolled back.
    commit_started: bool,
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
        let redo = pool.redo_mode();
        Tx {
            redo,
            redo_ranges: Vec::new(),
            saved: Vec::new(),
            redo_bytes: 0,
            commit_started: false,
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
        if self.redo {
            let capacity = redo_capacity(&g);
            if len >= REDO_FLAG as u64 || self.redo_bytes + entry_bytes + COMMIT_RECORD_BYTES > capacity {
                return Err(Error::TxLogFull { path: self.pool.path.clone(), capacity });
            }
            self.redo_bytes += entry_bytes;
            self.saved.push((offset, self.pool.mem.bytes(offset, len).to_vec()));
            self.redo_ranges.push((offset, len));
            self.logged.insert(offset, len);
            return Ok(());
        }
        let log_limit = g.log_offset + g.log_bytes;
        if len >= REDO_FLAG as u64 || self.log_end + entry_bytes > log_limit {
            return Err(Error::TxLogFull { path: self.pool.path.clone(), capacity: g.log_bytes - LOG_HEADER_BYTES });
        }
        let mem = self.pool.mem;
        let at = self.log_end;
        write_entry(mem, at, self.pool.generation, offset, len as u32, mem.bytes(offset, len));
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
        if let (Err(error), true) = (&result, self.commit_started) {
            self.pool.poisoned = Some(format!("a transaction's commit failed: {error}"));
            self.finished = true;
        }
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
        if self.entries.is_empty() && self.dirty.is_empty() && self.redo_ranges.is_empty() {
            return Ok(());
        }
        if self.redo {
            return self.commit_redo();
        }
        for (offset, len) in std::mem::take(&mut self.dirty) {
            self.pool.media.write_back(offset, len)?;
        }
        self.pool.media.fence()?;
        bump_generation(self.pool)
    }

    /// Writes the redo log, fences (the commit point), then writes the
    /// changed ranges in place.
    fn commit_redo(&mut self) -> Result<()> {
        let pool = &mut *self.pool;
        let mem = pool.mem;
        // Fresh objects and unlogged changes ride in the log too when they
        // fit, so the commit takes one fence. A log entry is only ever
        // valid with all of the transaction's bytes: were they written in
        // place beside the log, a crash could keep the whole log but not
        // them, and the replay would publish torn objects. When they do
        // not fit, they go in place first, behind a fence of their own
        // (they are unreachable until the commit).
        let dirty = std::mem::take(&mut self.dirty);
        let dirty_bytes: u64 = dirty.iter().map(|(_, len)| ENTRY_HEADER_BYTES + len.div_ceil(8) * 8).sum();
        let inline = self.redo_bytes + dirty_bytes + COMMIT_RECORD_BYTES <= redo_capacity(&pool.geometry);
        if !inline {
            for &(offset, len) in &dirty {
                pool.media.write_back(offset, len)?;
            }
            pool.media.fence()?;
        }
        let mut ranges = std::mem::take(&mut self.redo_ranges);
        if inline {
            ranges.extend(dirty);
        }
        let generation = pool.generation;
        let start = redo_half_start(&pool.geometry, generation);
        let mut at = start;
        let mut chained = 0u32;
        for &(offset, len) in &ranges {
            let crc = write_entry(mem, at, generation, offset, len as u32 | REDO_FLAG, mem.bytes(offset, len));
            chained = crate::crc::crc32c_append(chained, &crc.to_le_bytes());
            at += ENTRY_HEADER_BYTES + len.div_ceil(8) * 8;
        }
        let mut seal = [0u8; 8];
        seal[..4].copy_from_slice(&chained.to_le_bytes());
        let alone = if inline { 0 } else { ALONE_FLAG };
        seal[4..].copy_from_slice(&(ranges.len() as u32 | alone).to_le_bytes());
        write_entry(mem, at, generation, COMMIT_TARGET, 8 | REDO_FLAG, &seal);
        at += COMMIT_RECORD_BYTES;
        self.commit_started = true;
        pool.media.write_back(start, at - start)?;
        pool.media.fence()?;
        for &(offset, len) in &ranges {
            pool.media.write_back(offset, len)?;
        }
        pool.generation += 1;
        pool.redo_live = true;
        Ok(())
    }

    /// Restores every logged range, newest entry first.
    fn roll_back(&mut self) -> Result<()> {
        if self.redo {
            // Nothing reached the file: restoring the mapping is enough.
            for (offset, old) in self.saved.iter().rev() {
                self.pool.mem.bytes_mut(*offset, old.len() as u64).copy_from_slice(old);
            }
            if self.heap_changed {
                self.pool.heap = super::heap::Heap::rebuild(self.pool)?;
            }
            return Ok(());
        }
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

/// Writes a log entry at `at` and returns its CRC, which covers the first
/// 20 bytes and the data.
fn write_entry(mem: super::Mem, at: u64, generation: u64, target: u64, len_word: u32, data: &[u8]) -> u32 {
    let entry = mem.bytes_mut(at, ENTRY_HEADER_BYTES + data.len() as u64);
    entry[0..8].copy_from_slice(&generation.to_le_bytes());
    entry[8..16].copy_from_slice(&target.to_le_bytes());
    entry[16..20].copy_from_slice(&len_word.to_le_bytes());
    entry[24..].copy_from_slice(data);
    let crc = crate::crc::crc32c_append(crate::crc::crc32c(&entry[0..20]), &entry[24..]);
    entry[20..24].copy_from_slice(&crc.to_le_bytes());
    crc
}

/// Where the redo log of `generation` goes: the two halves of the log
/// after its header alternate.
fn redo_half_start(g: &super::Geometry, generation: u64) -> u64 {
    g.log_offset + LOG_HEADER_BYTES + (generation % 2) * redo_capacity(g)
}

/// Bytes of one half of the log (both halves the same size).
fn redo_capacity(g: &super::Geometry) -> u64 {
    (g.log_bytes - LOG_HEADER_BYTES) / 2 / 8 * 8
}

/// Moves the generation word past a committed redo log whose in-place
/// writes a fence has made durable (`Pool::persist` calls this first, so
/// that no later replay of that log can undo an unlogged store).
pub(super) fn retire_redo_log(pool: &mut Pool) -> Result<()> {
    pool.media.fence()?;
    let at = pool.geometry.log_offset;
    pool.mem.set_u64(at, pool.generation);
    pool.media.write_back(at, 8)?;
    pool.redo_live = false;
    Ok(())
}

/// A committed redo log: its entries as (entry offset, target, len).
struct RedoLog {
    generation: u64,
    entries: Vec<(u64, u64, u64)>,
    /// Its commit made the previous transaction's writes durable.
    alone: bool,
}

/// The committed redo log in half `half`, if it holds one.
fn read_redo_log(pool: &Pool, half: u64) -> Option<RedoLog> {
    let g = pool.geometry;
    let mem = pool.mem;
    let start = redo_half_start(&g, half);
    let limit = start + redo_capacity(&g);
    let mut at = start;
    let mut generation = None;
    let mut chained = 0u32;
    let mut entries = Vec::new();
    while at + ENTRY_HEADER_BYTES <= limit {
        let header = mem.bytes(at, ENTRY_HEADER_BYTES);
        let word = |range: std::ops::Range<usize>| u64::from_le_bytes(header[range].try_into().expect("8 bytes"));
        let entry_generation = word(0..8);
        let target = word(8..16);
        let len_word = u32::from_le_bytes(header[16..20].try_into().expect("4 bytes"));
        let crc = u32::from_le_bytes(header[20..24].try_into().expect("4 bytes"));
        let len = (len_word & !REDO_FLAG) as u64;
        if len_word & REDO_FLAG == 0
            || entry_generation >= GENERATION_LIMIT
            || entry_generation % 2 != half
            || *generation.get_or_insert(entry_generation) != entry_generation
            || at + ENTRY_HEADER_BYTES + len > limit
        {
            return None;
        }
        let data = mem.bytes(at + ENTRY_HEADER_BYTES, len);
        if crate::crc::crc32c_append(crate::crc::crc32c(&header[0..20]), data) != crc {
            return None;
        }
        if target == COMMIT_TARGET {
            let seal: [u8; 8] = data.try_into().ok()?;
            let count = u32::from_le_bytes(seal[4..].try_into().expect("4 bytes"));
            let sealed = seal[..4] == chained.to_le_bytes() && count & !ALONE_FLAG == entries.len() as u32;
            return sealed.then_some(RedoLog { generation: entry_generation, entries, alone: count & ALONE_FLAG != 0 });
        }
        chained = crate::crc::crc32c_append(chained, &crc.to_le_bytes());
        entries.push((at, target, len));
        at += ENTRY_HEADER_BYTES + len.div_ceil(8) * 8;
    }
    None
}

/// Replays the committed redo logs not yet retired, older first; returns
/// how many entries they held (`None`: there are none).
///
/// Both halves can matter: the newest transaction's log may have reached
/// the file before its fence while the previous one's in-place writes,
/// made durable only by that fence, did not. Replaying the older log first
/// is harmless otherwise: every byte the newer one changed is in its log,
/// unless its commit wrote fresh objects in place behind a fence of its
/// own, which also made the older transaction durable (`alone`).
fn replay_redo_logs(pool: &mut Pool) -> Result<Option<usize>> {
    let retired_below = pool.generation;
    let mut logs: Vec<RedoLog> =
        (0..2).filter_map(|half| read_redo_log(pool, half)).filter(|log| log.generation >= retired_below).collect();
    logs.sort_by_key(|log| log.generation);
    let Some(newest) = logs.last() else { return Ok(None) };
    if newest.alone || logs[0].generation + 1 != newest.generation {
        logs.drain(..logs.len() - 1);
    }
    let g = pool.geometry;
    let mem = pool.mem;
    let mut replayed = 0;
    for log in &logs {
        for &(at, target, len) in &log.entries {
            check_target(pool, at, target, len, &g)?;
            mem.bytes_mut(target, len).copy_from_slice(mem.bytes(at + ENTRY_HEADER_BYTES, len));
            pool.media.write_back(target, len)?;
        }
        replayed += log.entries.len();
    }
    pool.media.fence()?;
    pool.generation = logs.last().expect("at least one log").generation;
    bump_generation(pool)?;
    Ok(Some(replayed))
}

/// Log targets are allocator metadata or heap objects, never the header or
/// the log; an entry saying otherwise is damage.
fn check_target(pool: &Pool, at: u64, target: u64, len: u64, g: &super::Geometry) -> Result<()> {
    if target < g.table_offset || target.checked_add(len).is_none_or(|end| end > g.heap_end()) {
        return Err(Error::CorruptPool {
            path: pool.path.clone(),
            detail: format!("log entry at {at:#x} targets {target:#x}+{len}, outside the heap"),
        });
    }
    Ok(())
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

/// Finishes the transaction a crash interrupted, if any: replays a
/// committed redo log not yet retired, else rolls back the undo entries of
/// the current generation whose CRC holds, up to the first that does not.
pub(super) fn recover(pool: &mut Pool) -> Result<Recovery> {
    if let Some(replayed) = replay_redo_logs(pool)? {
        return Ok(Recovery { rolled_back_entries: 0, replayed_entries: replayed });
    }
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
        // A redo entry here is an uncommitted redo log (a committed one was
        // replayed above): nothing of it reached its targets.
        if generation != pool.generation || len as u32 & REDO_FLAG != 0 || at + entry_bytes > limit {
            break;
        }
        let data = mem.bytes(at + ENTRY_HEADER_BYTES, len);
        if crate::crc::crc32c_append(crate::crc::crc32c(&header[0..20]), data) != crc {
            break;
        }
        check_target(pool, at, target, len, &g)?;
        entries.push(at);
        at += entry_bytes;
    }
    for &entry in entries.iter().rev() {
        restore_entry(pool, entry)?;
    }
    pool.media.fence()?;
    bump_generation(pool)?;
    Ok(Recovery { rolled_back_entries: entries.len(), replayed_entries: 0 })
}
