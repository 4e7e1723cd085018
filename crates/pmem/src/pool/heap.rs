//! The allocator: 64 KiB chunks, each free, cut into blocks of one size
//! class (one bit per block in the chunk's bitmap), or part of a run of
//! whole chunks for objects over 16 KiB.
//!
//! Persistent state is the chunk table and the bitmaps; both change only
//! inside a transaction, undo-logged word by word (`Tx::log_range`), so a
//! crash mid-allocation rolls back with the rest of the transaction.
//! Frees are deferred to commit so a block freed in a transaction cannot
//! be handed out again, and overwritten, before that transaction is final.
//!
//! Volatile state (free counts, per-class chunk lists) is rebuilt from the
//! persistent state on open and after a rollback: it is only a cache.
//!
//! Costs: metadata is 8 + 512 bytes per 64 KiB chunk (0.8 %); a block of
//! class `s` wastes at most `s - requested` bytes; a run wastes up to one
//! chunk minus a byte.

use super::{Mem, Pool, Tx, BITMAP_BYTES_PER_CHUNK};
use crate::error::{Error, Result};

pub const CHUNK_BYTES: u64 = 64 << 10;

/// Block sizes of small-object chunks; larger objects take whole chunks.
const CLASSES: [u64; 20] =
    [16, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024, 1536, 2048, 3072, 4096, 6144, 8192, 12288, 16384];
const MAX_ALIGN: usize = 64;

/// Chunk table entries: the kind in the top four bits, a parameter below.
const KIND_SHIFT: u32 = 60;
const KIND_FREE: u64 = 0;
const KIND_SMALL: u64 = 1;
const KIND_RUN: u64 = 2;
const KIND_CONTINUATION: u64 = 3;
const PARAM_MASK: u64 = (1 << KIND_SHIFT) - 1;

fn entry(kind: u64, param: u64) -> u64 {
    kind << KIND_SHIFT | param
}

fn blocks_per_chunk(class: usize) -> u64 {
    CHUNK_BYTES / CLASSES[class]
}

/// The smallest class that holds `size` bytes at `align`, or `None` for a run.
fn class_for(size: u64, align: usize) -> Option<usize> {
    CLASSES.iter().position(|class| *class >= size.max(1) && class % align as u64 == 0)
}

/// Volatile allocator state.
#[derive(Default)]
pub(super) struct Heap {
    /// Free blocks per chunk (small-object chunks only).
    free_blocks: Vec<u32>,
    /// Small-object chunks of each class, and where the last search ended.
    class_chunks: Vec<Vec<u32>>,
    class_cursor: Vec<usize>,
}

impl Heap {
    /// Reads the chunk table and bitmaps, checking every entry, so a damaged
    /// file is an error here rather than a wrong allocation later.
    pub(super) fn rebuild(pool: &Pool) -> Result<Heap> {
        let g = pool.geometry;
        let corrupt = |chunk: u64, detail: String| Error::CorruptPool {
            path: pool.path.clone(),
            detail: format!("chunk {chunk}: {detail}"),
        };
        let mut heap = Heap {
            free_blocks: vec![0; g.chunk_count as usize],
            class_chunks: vec![Vec::new(); CLASSES.len()],
            class_cursor: vec![0; CLASSES.len()],
        };
        let mut chunk = 0;
        while chunk < g.chunk_count {
            let value = table_entry(pool.mem, g.table_offset, chunk);
            let (kind, param) = (value >> KIND_SHIFT, value & PARAM_MASK);
            let bits = bitmap(pool.mem, g.bitmap_offset, chunk);
            match kind {
                KIND_SMALL => {
                    let class = param as usize;
                    if class >= CLASSES.len() {
                        return Err(corrupt(chunk, format!("size class {param} does not exist")));
                    }
                    let capacity = blocks_per_chunk(class);
                    let used: u64 = bits.iter().map(|w| w.count_ones() as u64).sum();
                    if bits_beyond(&bits, capacity) {
                        return Err(corrupt(chunk, "bitmap marks blocks past the chunk's end".into()));
                    }
                    heap.free_blocks[chunk as usize] = (capacity - used) as u32;
                    heap.class_chunks[class].push(chunk as u32);
                    chunk += 1;
                    continue;
                }
                KIND_FREE if value == 0 => {}
                KIND_RUN if param >= 1 && param <= g.chunk_count - chunk => {
                    for next in chunk + 1..chunk + param {
                        if table_entry(pool.mem, g.table_offset, next) != entry(KIND_CONTINUATION, 0) {
                            return Err(corrupt(next, "run of chunks interrupted".into()));
                        }
                    }
                    chunk += param;
                    continue;
                }
                _ => return Err(corrupt(chunk, format!("invalid table entry {value:#x}"))),
            }
            if bits.iter().any(|w| *w != 0) {
                return Err(corrupt(chunk, "free chunk with a non-empty bitmap".into()));
            }
            chunk += 1;
        }
        Ok(heap)
    }
}

fn table_entry(mem: Mem, table_offset: u64, chunk: u64) -> u64 {
    mem.u64_at(table_offset + 8 * chunk)
}

fn bitmap(mem: Mem, bitmap_offset: u64, chunk: u64) -> [u64; 64] {
    let bytes = mem.bytes(bitmap_offset + BITMAP_BYTES_PER_CHUNK * chunk, BITMAP_BYTES_PER_CHUNK);
    std::array::from_fn(|i| u64::from_le_bytes(bytes[8 * i..8 * i + 8].try_into().expect("8 bytes")))
}

fn bits_beyond(bits: &[u64; 64], capacity: u64) -> bool {
    (0..64u64).any(|w| {
        let first = w * 64;
        let valid = capacity.saturating_sub(first).min(64);
        let mask = if valid == 64 { 0 } else { !0u64 << valid };
        bits[w as usize] & mask != 0
    })
}

impl Tx<'_> {
    /// Allocates `size` bytes aligned to `align`; the block's contents are
    /// whatever it held before (callers initialise it).
    pub(super) fn heap_alloc(&mut self, size: u64, align: usize) -> Result<u64> {
        if align > MAX_ALIGN {
            return Err(Error::Alignment { align });
        }
        self.heap_changed = true;
        match class_for(size, align) {
            Some(class) => self.alloc_block(class),
            None => {
                let chunks = size.div_ceil(CHUNK_BYTES);
                let first = self.take_chunks(chunks, size)?;
                let g = self.pool.geometry;
                let table_at = g.table_offset + 8 * first;
                self.log_range(table_at, 8 * chunks)?;
                self.fence_log()?;
                self.pool.mem.set_u64(table_at, entry(KIND_RUN, chunks));
                for next in 1..chunks {
                    self.pool.mem.set_u64(table_at + 8 * next, entry(KIND_CONTINUATION, 0));
                }
                Ok(g.heap_offset + first * CHUNK_BYTES)
            }
        }
    }

    fn alloc_block(&mut self, class: usize) -> Result<u64> {
        let chunk = match self.chunk_with_free_block(class) {
            Some(chunk) => chunk,
            None => {
                let chunk = self.take_chunks(1, CLASSES[class])?;
                let at = self.pool.geometry.table_offset + 8 * chunk;
                self.log_range(at, 8)?;
                self.fence_log()?;
                self.pool.mem.set_u64(at, entry(KIND_SMALL, class as u64));
                let heap = &mut self.pool.heap;
                heap.free_blocks[chunk as usize] = blocks_per_chunk(class) as u32;
                heap.class_chunks[class].push(chunk as u32);
                heap.class_cursor[class] = heap.class_chunks[class].len() - 1;
                chunk
            }
        };
        let g = self.pool.geometry;
        let capacity = blocks_per_chunk(class);
        let words_at = g.bitmap_offset + BITMAP_BYTES_PER_CHUNK * chunk;
        for word in 0..capacity.div_ceil(64) {
            let at = words_at + 8 * word;
            let bits = self.pool.mem.u64_at(at);
            let free = (!bits).trailing_zeros() as u64;
            if free == 64 || word * 64 + free >= capacity {
                continue;
            }
            self.log_range(at, 8)?;
            self.fence_log()?;
            self.pool.mem.set_u64(at, bits | 1 << free);
            self.pool.heap.free_blocks[chunk as usize] -= 1;
            return Ok(g.heap_offset + chunk * CHUNK_BYTES + (word * 64 + free) * CLASSES[class]);
        }
        unreachable!("chunk {chunk} counted a free block its bitmap does not have")
    }

    fn chunk_with_free_block(&mut self, class: usize) -> Option<u64> {
        let heap = &mut self.pool.heap;
        let chunks = &heap.class_chunks[class];
        let start = heap.class_cursor[class];
        for i in (start..chunks.len()).chain(0..start.min(chunks.len())) {
            if heap.free_blocks[chunks[i] as usize] > 0 {
                heap.class_cursor[class] = i;
                return Some(chunks[i] as u64);
            }
        }
        None
    }

    /// Finds `count` consecutive chunks that are free or hold only free
    /// blocks, and detaches the latter from their class lists.
    fn take_chunks(&mut self, count: u64, requested: u64) -> Result<u64> {
        let g = self.pool.geometry;
        let available = |pool: &Pool, chunk: u64| {
            let value = table_entry(pool.mem, g.table_offset, chunk);
            match value >> KIND_SHIFT {
                KIND_FREE => true,
                KIND_SMALL => {
                    pool.heap.free_blocks[chunk as usize] as u64 == blocks_per_chunk((value & PARAM_MASK) as usize)
                }
                _ => false,
            }
        };
        let mut run_start = 0;
        let mut run_len = 0;
        let mut chunk = 0;
        while chunk < g.chunk_count {
            if available(self.pool, chunk) {
                if run_len == 0 {
                    run_start = chunk;
                }
                run_len += 1;
                if run_len == count {
                    self.detach_empty_chunks(run_start, count);
                    return Ok(run_start);
                }
                chunk += 1;
            } else {
                run_len = 0;
                let value = table_entry(self.pool.mem, g.table_offset, chunk);
                chunk += if value >> KIND_SHIFT == KIND_RUN { (value & PARAM_MASK).max(1) } else { 1 };
            }
        }
        let stats = stats(self.pool);
        Err(Error::OutOfSpace {
            path: self.pool.path.clone(),
            requested,
            free: stats.free_bytes,
            largest_free: stats.largest_free_bytes,
        })
    }

    fn detach_empty_chunks(&mut self, first: u64, count: u64) {
        let g = self.pool.geometry;
        for chunk in first..first + count {
            let value = table_entry(self.pool.mem, g.table_offset, chunk);
            if value >> KIND_SHIFT == KIND_SMALL {
                let class = (value & PARAM_MASK) as usize;
                let heap = &mut self.pool.heap;
                heap.class_chunks[class].retain(|c| *c as u64 != chunk);
                heap.class_cursor[class] = 0;
                heap.free_blocks[chunk as usize] = 0;
            }
        }
    }

    /// Where the bits (or table entries) that free `offset` live, after
    /// checking that `offset` starts an allocated object.
    pub(super) fn locate_free(&self, offset: u64) -> Result<FreeTarget> {
        let g = self.pool.geometry;
        let invalid = || Error::InvalidFree { path: self.pool.path.clone(), offset };
        if offset < g.heap_offset || offset >= g.heap_end() {
            return Err(invalid());
        }
        let chunk = (offset - g.heap_offset) / CHUNK_BYTES;
        let within = (offset - g.heap_offset) % CHUNK_BYTES;
        let value = table_entry(self.pool.mem, g.table_offset, chunk);
        match value >> KIND_SHIFT {
            KIND_SMALL => {
                let class = (value & PARAM_MASK) as usize;
                let size = CLASSES[class];
                let block = within / size;
                if !within.is_multiple_of(size) || block >= blocks_per_chunk(class) {
                    return Err(invalid());
                }
                let word_at = g.bitmap_offset + BITMAP_BYTES_PER_CHUNK * chunk + 8 * (block / 64);
                let bit = 1u64 << (block % 64);
                if self.pool.mem.u64_at(word_at) & bit == 0 {
                    return Err(invalid());
                }
                Ok(FreeTarget::Block { chunk, word_at, bit })
            }
            KIND_RUN if within == 0 => Ok(FreeTarget::Run { chunk, count: value & PARAM_MASK }),
            _ => Err(invalid()),
        }
    }

    /// Logs the metadata a deferred free will change (before the fence).
    pub(super) fn log_free(&mut self, target: &FreeTarget) -> Result<()> {
        match *target {
            FreeTarget::Block { word_at, .. } => self.log_range(word_at, 8),
            FreeTarget::Run { chunk, count } => self.log_range(self.pool.geometry.table_offset + 8 * chunk, 8 * count),
        }
    }

    /// Applies a logged free.
    pub(super) fn apply_free(&mut self, target: &FreeTarget) {
        match *target {
            FreeTarget::Block { chunk, word_at, bit } => {
                let bits = self.pool.mem.u64_at(word_at);
                self.pool.mem.set_u64(word_at, bits & !bit);
                self.pool.heap.free_blocks[chunk as usize] += 1;
            }
            FreeTarget::Run { chunk, count } => {
                let at = self.pool.geometry.table_offset + 8 * chunk;
                self.pool.mem.bytes_mut(at, 8 * count).fill(0);
            }
        }
    }
}

/// What freeing one object changes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FreeTarget {
    Block { chunk: u64, word_at: u64, bit: u64 },
    Run { chunk: u64, count: u64 },
}

impl FreeTarget {
    pub(super) fn key(&self) -> (u64, u64) {
        match *self {
            FreeTarget::Block { word_at, bit, .. } => (word_at, bit),
            FreeTarget::Run { chunk, .. } => (chunk, 0),
        }
    }
}

/// Allocator figures.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PoolStats {
    pub heap_bytes: u64,
    /// Bytes in allocated blocks and runs (block sizes, not requested sizes).
    pub allocated_bytes: u64,
    pub allocated_objects: u64,
    pub free_bytes: u64,
    /// The largest object that can still be allocated as a run.
    pub largest_free_bytes: u64,
    /// Free bytes inside small-object chunks that are in use, which only
    /// objects of those chunks' classes can take.
    pub free_in_small_chunks_bytes: u64,
    /// 1 - largest free run / free bytes: 0 when all free space is one run.
    pub fragmentation: f64,
}

pub(super) fn stats(pool: &Pool) -> PoolStats {
    let g = pool.geometry;
    let mut stats = PoolStats { heap_bytes: g.chunk_count * CHUNK_BYTES, ..PoolStats::default() };
    let mut run = 0u64;
    let mut chunk = 0;
    while chunk < g.chunk_count {
        let value = table_entry(pool.mem, g.table_offset, chunk);
        let (kind, param) = (value >> KIND_SHIFT, value & PARAM_MASK);
        let mut span = 1;
        let mut empty = kind == KIND_FREE;
        if kind == KIND_SMALL && (param as usize) < CLASSES.len() {
            let class = param as usize;
            let free = pool.heap.free_blocks.get(chunk as usize).copied().unwrap_or(0) as u64;
            let used = blocks_per_chunk(class) - free;
            empty = used == 0;
            if !empty {
                stats.allocated_bytes += used * CLASSES[class];
                stats.allocated_objects += used;
                stats.free_in_small_chunks_bytes += CHUNK_BYTES - used * CLASSES[class];
            }
        } else if kind == KIND_RUN {
            span = param.max(1);
            stats.allocated_bytes += span * CHUNK_BYTES;
            stats.allocated_objects += 1;
        }
        if empty {
            run += 1;
            stats.largest_free_bytes = stats.largest_free_bytes.max(run * CHUNK_BYTES);
        } else {
            run = 0;
        }
        chunk += span;
    }
    stats.free_bytes = stats.heap_bytes - stats.allocated_bytes;
    if stats.free_bytes > 0 {
        stats.fragmentation = 1.0 - stats.largest_free_bytes as f64 / stats.free_bytes as f64;
    }
    stats
}
