//! Pools: a file (or a simulated medium) holding a header, a log, the
//! allocator's metadata and a heap of typed objects reached from one root.
//!
//! Layout (byte by byte in `docs/pmem.md`):
//!
//! ```text
//! 0        header (4 KiB): magic, versions, layout name, geometry, CRC32C
//! log      generation word, then undo entries, or two halves of redo entries
//! table    one u64 per 64 KiB chunk: free, small-object class, run head/continuation
//! bitmaps  512 bytes per chunk: one bit per block of a small-object chunk
//! heap     the chunks; the root object is the first allocation
//! ```
//!
//! Only transactions (`tx.rs`) change the heap's metadata, and every change
//! is logged, so a crash mid-allocation or mid-free is rolled back (or a
//! committed one replayed) on open: nothing leaks, no block is handed out
//! twice.

mod heap;
mod ptr;
mod tx;

use std::path::{Path, PathBuf};

use bytemuck::Pod;

pub use heap::{PoolStats, CHUNK_BYTES};
pub use ptr::PPtr;
pub use tx::Tx;

use crate::error::{Error, Result};
use crate::region::io_err;
use crate::sim::SimMedia;
use crate::{Durability, Region};

const MAGIC: [u8; 8] = *b"SKVPOOL\0";
const FORMAT_VERSION: u32 = 1;
const HEADER_BYTES: u64 = 4096;
const PAGE_BYTES: u64 = 4096;
const LAYOUT_NAME_BYTES: usize = 64;
/// Header bytes covered by the CRC; the CRC itself sits right after.
const HEADER_CRC_AT: usize = 152;
const BITMAP_BYTES_PER_CHUNK: u64 = 512;
const MIN_LOG_BYTES: u64 = 64 << 10;
const MAX_LOG_BYTES: u64 = 64 << 20;
/// The log's first line holds the generation; entries follow.
const LOG_HEADER_BYTES: u64 = 64;

/// What `create` and `open` need to know.
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Names the data structure the pool holds; opening with another name
    /// is an error, as with libpmemobj's layout string.
    pub layout: String,
    pub layout_version: u32,
    /// Size of a new pool file (fixed: a full heap gives `OutOfSpace`).
    pub size_bytes: u64,
    /// Undo-log capacity, the bound on one transaction's logged bytes.
    /// Default: 1/32 of the pool, between 64 KiB and 64 MiB.
    pub log_bytes: Option<u64>,
    pub durability: Durability,
}

impl PoolOptions {
    pub fn new(layout: &str, layout_version: u32) -> PoolOptions {
        PoolOptions {
            layout: layout.to_string(),
            layout_version,
            size_bytes: 8 << 20,
            log_bytes: None,
            durability: Durability::Sync,
        }
    }

    pub fn size_bytes(mut self, size_bytes: u64) -> PoolOptions {
        self.size_bytes = size_bytes;
        self
    }

    pub fn log_bytes(mut self, log_bytes: u64) -> PoolOptions {
        self.log_bytes = Some(log_bytes);
        self
    }

    pub fn durability(mut self, durability: Durability) -> PoolOptions {
        self.durability = durability;
        self
    }

    fn layout_label(&self) -> String {
        format!("{} v{}", self.layout, self.layout_version)
    }
}

/// Where the pool's sections start, all decided at creation.
#[derive(Debug, Clone, Copy)]
struct Geometry {
    pool_bytes: u64,
    log_offset: u64,
    log_bytes: u64,
    table_offset: u64,
    bitmap_offset: u64,
    heap_offset: u64,
    chunk_count: u64,
    root_offset: u64,
    root_bytes: u64,
}

impl Geometry {
    fn plan(size_bytes: u64, log_bytes: Option<u64>) -> Result<Geometry> {
        let log_bytes = round_up(log_bytes.unwrap_or(size_bytes / 32).clamp(MIN_LOG_BYTES, MAX_LOG_BYTES), PAGE_BYTES);
        let fixed = HEADER_BYTES + log_bytes + 2 * PAGE_BYTES;
        let per_chunk = CHUNK_BYTES + 8 + BITMAP_BYTES_PER_CHUNK;
        let chunk_count = size_bytes.saturating_sub(fixed) / per_chunk;
        if chunk_count < 2 {
            return Err(Error::PoolTooSmall { requested: size_bytes, minimum: fixed + 2 * per_chunk });
        }
        let log_offset = HEADER_BYTES;
        let table_offset = log_offset + log_bytes;
        let bitmap_offset = round_up(table_offset + 8 * chunk_count, PAGE_BYTES);
        let heap_offset = round_up(bitmap_offset + BITMAP_BYTES_PER_CHUNK * chunk_count, PAGE_BYTES);
        let pool_bytes = heap_offset + chunk_count * CHUNK_BYTES;
        debug_assert!(pool_bytes <= size_bytes);
        Ok(Geometry {
            pool_bytes,
            log_offset,
            log_bytes,
            table_offset,
            bitmap_offset,
            heap_offset,
            chunk_count,
            root_offset: 0,
            root_bytes: 0,
        })
    }

    fn heap_end(&self) -> u64 {
        self.heap_offset + self.chunk_count * CHUNK_BYTES
    }

    /// Checks a geometry read from a file against its length, so no later
    /// access can leave the mapping whatever the header says. Every sum is
    /// checked: the fields may be anything a damaged or crafted file holds.
    fn validate(&self, file_bytes: u64) -> std::result::Result<(), String> {
        let end_of = |start: u64, per_chunk: u64| {
            self.chunk_count.checked_mul(per_chunk).and_then(|bytes| start.checked_add(bytes))
        };
        let ordered = self.log_offset == HEADER_BYTES
            && self.log_bytes >= MIN_LOG_BYTES
            && self.log_offset.checked_add(self.log_bytes) == Some(self.table_offset)
            && self.chunk_count >= 2
            && end_of(self.table_offset, 8).is_some_and(|end| self.bitmap_offset >= end)
            && end_of(self.bitmap_offset, BITMAP_BYTES_PER_CHUNK).is_some_and(|end| self.heap_offset >= end)
            && self.heap_offset.is_multiple_of(PAGE_BYTES)
            && end_of(self.heap_offset, CHUNK_BYTES) == Some(self.pool_bytes);
        if !ordered {
            return Err(format!("inconsistent geometry {self:?}"));
        }
        if self.pool_bytes > file_bytes {
            return Err(format!("header says {} bytes, the file has {file_bytes}", self.pool_bytes));
        }
        let root_end = self.root_offset.checked_add(self.root_bytes);
        if self.root_offset < self.heap_offset || root_end.is_none_or(|end| end > self.heap_end()) {
            return Err(format!("root object {:#x}+{} outside the heap", self.root_offset, self.root_bytes));
        }
        Ok(())
    }
}

fn round_up(value: u64, to: u64) -> u64 {
    value.div_ceil(to) * to
}

/// The memory a pool lives in and how its stores are made durable.
enum Media {
    Mapped(Region),
    Sim(SimMedia),
}

impl Media {
    fn write_back(&mut self, offset: u64, len: u64) -> Result<()> {
        match self {
            Media::Mapped(region) => region.write_back(offset as usize, len as usize),
            Media::Sim(sim) => {
                sim.write_back(offset as usize, len as usize);
                Ok(())
            }
        }
    }

    fn fence(&mut self) -> Result<()> {
        match self {
            Media::Mapped(region) => region.fence(),
            Media::Sim(sim) => {
                sim.fence();
                Ok(())
            }
        }
    }
}

/// Raw access to the pool's bytes. Every offset handed in was checked
/// against the geometry by the caller; the asserts are the last line.
#[derive(Clone, Copy)]
struct Mem {
    base: *mut u8,
    len: u64,
}

impl Mem {
    fn bytes(&self, offset: u64, len: u64) -> &[u8] {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len), "pool access out of bounds");
        // SAFETY: in bounds of the mapping, which outlives every `Mem`
        // (both live in the pool); pool objects are plain bytes.
        unsafe { std::slice::from_raw_parts(self.base.add(offset as usize), len as usize) }
    }

    #[allow(clippy::mut_from_ref)]
    fn bytes_mut(&self, offset: u64, len: u64) -> &mut [u8] {
        assert!(offset.checked_add(len).is_some_and(|end| end <= self.len), "pool access out of bounds");
        // SAFETY: in bounds; callers hold `&mut Pool` (through a transaction
        // or pool method) and drop the slice before handing out other views.
        unsafe { std::slice::from_raw_parts_mut(self.base.add(offset as usize), len as usize) }
    }

    fn u64_at(&self, offset: u64) -> u64 {
        u64::from_le_bytes(self.bytes(offset, 8).try_into().expect("8 bytes"))
    }

    fn set_u64(&self, offset: u64, value: u64) {
        self.bytes_mut(offset, 8).copy_from_slice(&value.to_le_bytes());
    }
}

/// What opening a pool had to repair.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Recovery {
    /// Undo-log entries of an interrupted transaction that were rolled back.
    pub rolled_back_entries: usize,
    /// Redo-log entries of a committed transaction that were written again
    /// (`sync` mode on a page-cache file system; see `docs/pmem.md`).
    pub replayed_entries: usize,
}

/// A persistent pool of typed objects; see the module docs for its layout
/// and `docs/pmem.md` for the protocols.
///
/// ```
/// use scaledkv_pmem::{Durability, Error, PPtr, Pod, Pool, PoolOptions, Zeroable};
///
/// #[derive(Clone, Copy, Pod, Zeroable)]
/// #[repr(C)]
/// struct Root { count: u64, head: PPtr<Node> }
///
/// #[derive(Clone, Copy, Pod, Zeroable)]
/// #[repr(C)]
/// struct Node { value: u64, next: PPtr<Node> }
///
/// let dir = tempfile::tempdir().unwrap();
/// let path = dir.path().join("list.pool");
/// let options = PoolOptions::new("my-list", 1).size_bytes(1 << 20).durability(Durability::Sync);
/// let mut pool = Pool::create::<Root>(&path, &options)?;
/// let root = pool.root::<Root>()?;
/// pool.transaction(|tx| {
///     let head = tx.get(root)?.head;
///     let node = tx.alloc(Node { value: 42, next: head })?; // freed again if the tx rolls back
///     let r = tx.get_mut(root)?; // old bytes logged before the change
///     r.head = node;
///     r.count += 1;
///     Ok::<_, Error>(())
/// })?; // durable here
/// drop(pool);
///
/// let pool = Pool::open(&path, &options)?;
/// let root = *pool.get(pool.root::<Root>()?)?;
/// assert_eq!((root.count, pool.get(root.head)?.value), (1, 42));
/// # Ok::<(), Error>(())
/// ```
///
/// Reads take `&self`; every change goes through [`Pool::transaction`]
/// (or the `unsafe` unlogged path), which takes `&mut self`: one writer at
/// a time, which the borrow checker enforces. Share a pool between threads
/// with a `Mutex` or `RwLock`.
pub struct Pool {
    media: Media,
    mem: Mem,
    geometry: Geometry,
    heap: heap::Heap,
    generation: u64,
    path: PathBuf,
    durability: Durability,
    recovery: Recovery,
    poisoned: Option<String>,
    /// A committed redo log may still be replayed at open (see `tx.rs`).
    redo_live: bool,
}

// SAFETY: the pool owns its mapping (through `media`); `&Pool` only reads
// and every write needs `&mut Pool`, so the usual aliasing rules carry over.
unsafe impl Send for Pool {}
// SAFETY: as above.
unsafe impl Sync for Pool {}

const SIMULATED: &str = "<simulated>";

/// Where `create` builds the pool at `path` before it takes its name.
fn staging_path(path: &Path) -> PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    path.with_file_name(format!(".{name}.creating"))
}

impl Pool {
    /// Creates a pool file at `path` (which must not exist) with a zeroed
    /// root object of type `R`.
    ///
    /// Atomic: the pool is built under a staging name in the same directory
    /// and takes `path` only once formatted and durable, so a crash leaves
    /// either no pool or a whole one (a crash mid-way used to leave a file
    /// `open` refused as "not a pool"). A staging file left by such a crash
    /// is removed by the next `create`.
    pub fn create<R: Pod>(path: &Path, options: &PoolOptions) -> Result<Pool> {
        Self::create_with::<R>(path, options, |_| Ok(()))
    }

    /// As [`Pool::create`], running `init` on the new pool (a transaction
    /// that fills in the root, say) before it takes its name, so that a
    /// crash before `init` is done leaves no pool rather than one whose
    /// root its layout cannot read.
    pub fn create_with<R: Pod>(
        path: &Path,
        options: &PoolOptions,
        init: impl FnOnce(&mut Pool) -> Result<()>,
    ) -> Result<Pool> {
        let geometry = Geometry::plan(options.size_bytes, options.log_bytes)?;
        if path.exists() {
            return Err(io_err(path, "create")(std::io::ErrorKind::AlreadyExists.into()));
        }
        let staging = staging_path(path);
        let _ = std::fs::remove_file(&staging);
        let created = Region::create_for_stores(&staging, geometry.pool_bytes as usize, options.durability)
            .and_then(|region| Self::format::<R>(Media::Mapped(region), path.to_path_buf(), geometry, options))
            .and_then(|mut pool| {
                init(&mut pool)?;
                if let Media::Mapped(region) = &mut pool.media {
                    region.rename_noreplace(path)?;
                }
                Ok(pool)
            });
        let pool = match created {
            Ok(pool) => pool,
            Err(error) => {
                let _ = std::fs::remove_file(&staging);
                return Err(error);
            }
        };
        if options.durability != Durability::Buffered {
            let dir = match path.parent() {
                Some(dir) if !dir.as_os_str().is_empty() => dir,
                _ => Path::new("."),
            };
            crate::sync_dir(dir).map_err(io_err(dir, "fsync dir"))?;
        }
        Ok(pool)
    }

    /// Opens an existing pool, rolling back a transaction a crash
    /// interrupted (see [`Pool::recovery`]).
    pub fn open(path: &Path, options: &PoolOptions) -> Result<Pool> {
        let region = Region::open_for_stores(path, options.durability)?;
        Self::load(Media::Mapped(region), path.to_path_buf(), options)
    }

    /// Creates a pool on a simulated medium (see [`crate::sim`]).
    pub fn create_simulated<R: Pod>(options: &PoolOptions) -> Result<Pool> {
        let geometry = Geometry::plan(options.size_bytes, options.log_bytes)?;
        let media = Media::Sim(SimMedia::new(geometry.pool_bytes as usize));
        Self::format::<R>(media, PathBuf::from(SIMULATED), geometry, options)
    }

    /// Opens a pool held in a simulated medium, e.g. a crash image.
    pub fn open_simulated(sim: SimMedia, options: &PoolOptions) -> Result<Pool> {
        Self::load(Media::Sim(sim), PathBuf::from(SIMULATED), options)
    }

    /// The simulated medium, to start recording or take crash images.
    pub fn simulated(&mut self) -> Option<&mut SimMedia> {
        match &mut self.media {
            Media::Sim(sim) => Some(sim),
            Media::Mapped(_) => None,
        }
    }

    fn attach(media: Media, path: PathBuf, geometry: Geometry, durability: Durability) -> Pool {
        let mut media = media;
        if let Media::Sim(sim) = &mut media {
            // `sync` is what a page-cache file system gives; `pmem`, DAX.
            sim.set_page_cache(durability == Durability::Sync);
        }
        // Both media keep their bytes at a fixed address (a mapping, a boxed
        // slice), so the pointer stays valid after `media` moves into the pool.
        let (base, len) = match &mut media {
            Media::Mapped(region) => (region.as_mut_ptr(), region.len() as u64),
            Media::Sim(sim) => (sim.as_mut_ptr(), sim.len() as u64),
        };
        Pool {
            media,
            mem: Mem { base, len },
            geometry,
            heap: heap::Heap::default(),
            generation: 1,
            path,
            durability,
            recovery: Recovery::default(),
            poisoned: None,
            redo_live: false,
        }
    }

    /// Whether stores reach the file only when written back (a private
    /// mapping copied out with pwrite, or the simulator's page-cache
    /// model): transactions then use redo logging, one fence each.
    fn redo_mode(&self) -> bool {
        match &self.media {
            Media::Mapped(region) => region.is_private(),
            Media::Sim(sim) => sim.is_page_cache(),
        }
    }

    fn format<R: Pod>(media: Media, path: PathBuf, geometry: Geometry, options: &PoolOptions) -> Result<Pool> {
        if options.layout.len() >= LAYOUT_NAME_BYTES {
            return Err(Error::LayoutMismatch {
                path,
                expected: format!("a layout name under {LAYOUT_NAME_BYTES} bytes"),
                found: options.layout.clone(),
            });
        }
        let mut pool = Self::attach(media, path, geometry, options.durability);
        pool.mem.set_u64(geometry.log_offset, pool.generation);
        pool.heap = heap::Heap::rebuild(&pool)?;
        let root: PPtr<R> = pool.transaction(|tx| tx.alloc_zeroed::<R>())?;
        pool.geometry.root_offset = root.offset();
        pool.geometry.root_bytes = std::mem::size_of::<R>() as u64;
        pool.write_header(options);
        // The file starts zeroed and the root's transaction made its own
        // changes (log generation, chunk table, bitmap, root) durable, so
        // only the header is left. The magic goes last: a file without it
        // is refused as "not a pool" (`create` also publishes the file
        // under its name only after this).
        pool.media.write_back(0, HEADER_BYTES)?;
        pool.media.write_back(geometry.log_offset, 8)?;
        pool.media.fence()?;
        pool.mem.bytes_mut(0, 8).copy_from_slice(&MAGIC);
        pool.media.write_back(0, 8)?;
        pool.media.fence()?;
        Ok(pool)
    }

    fn write_header(&mut self, options: &PoolOptions) {
        let g = self.geometry;
        let header = self.mem.bytes_mut(0, HEADER_BYTES);
        header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
        header[12..16].copy_from_slice(&options.layout_version.to_le_bytes());
        header[16..16 + LAYOUT_NAME_BYTES].fill(0);
        header[16..16 + options.layout.len()].copy_from_slice(options.layout.as_bytes());
        let fields = [
            g.pool_bytes,
            g.log_offset,
            g.log_bytes,
            g.table_offset,
            g.bitmap_offset,
            g.heap_offset,
            g.chunk_count,
            g.root_offset,
            g.root_bytes,
        ];
        for (i, value) in fields.iter().enumerate() {
            let at = 80 + 8 * i;
            header[at..at + 8].copy_from_slice(&value.to_le_bytes());
        }
        let mut crc_input = header[..HEADER_CRC_AT].to_vec();
        crc_input[..8].copy_from_slice(&MAGIC);
        let crc = crate::crc::crc32c(&crc_input);
        header[HEADER_CRC_AT..HEADER_CRC_AT + 4].copy_from_slice(&crc.to_le_bytes());
    }

    fn load(media: Media, path: PathBuf, options: &PoolOptions) -> Result<Pool> {
        let corrupt = |path: &Path, detail: String| Error::CorruptPool { path: path.to_path_buf(), detail };
        let mut pool = Self::attach(media, path, ZERO_GEOMETRY, options.durability);
        if pool.mem.len < HEADER_BYTES || pool.mem.bytes(0, 8) != MAGIC {
            return Err(Error::NotAPool { path: pool.path });
        }
        let header = pool.mem.bytes(0, HEADER_BYTES);
        let stored_crc = u32::from_le_bytes(header[HEADER_CRC_AT..HEADER_CRC_AT + 4].try_into().expect("4 bytes"));
        if crate::crc::crc32c(&header[..HEADER_CRC_AT]) != stored_crc {
            return Err(corrupt(&pool.path, "header checksum mismatch".into()));
        }
        let format = u32::from_le_bytes(header[8..12].try_into().expect("4 bytes"));
        if format != FORMAT_VERSION {
            return Err(Error::FormatVersion { path: pool.path, found: format, supported: FORMAT_VERSION });
        }
        let layout_version = u32::from_le_bytes(header[12..16].try_into().expect("4 bytes"));
        let name = &header[16..16 + LAYOUT_NAME_BYTES];
        let name = String::from_utf8_lossy(&name[..name.iter().position(|b| *b == 0).unwrap_or(name.len())]);
        if name != options.layout || layout_version != options.layout_version {
            return Err(Error::LayoutMismatch {
                path: pool.path.clone(),
                expected: options.layout_label(),
                found: format!("{name} v{layout_version}"),
            });
        }
        let field = |i: usize| u64::from_le_bytes(header[80 + 8 * i..88 + 8 * i].try_into().expect("8 bytes"));
        pool.geometry = Geometry {
            pool_bytes: field(0),
            log_offset: field(1),
            log_bytes: field(2),
            table_offset: field(3),
            bitmap_offset: field(4),
            heap_offset: field(5),
            chunk_count: field(6),
            root_offset: field(7),
            root_bytes: field(8),
        };
        pool.geometry.validate(pool.mem.len).map_err(|detail| corrupt(&pool.path, detail))?;
        pool.generation = pool.mem.u64_at(pool.geometry.log_offset);
        if pool.generation >= tx::GENERATION_LIMIT {
            let detail = format!("log generation {:#x} is past {:#x}", pool.generation, tx::GENERATION_LIMIT);
            return Err(corrupt(&pool.path, detail));
        }
        pool.recovery = tx::recover(&mut pool)?;
        pool.heap = heap::Heap::rebuild(&pool)?;
        Ok(pool)
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn durability(&self) -> Durability {
        self.durability
    }

    /// What `open` repaired.
    pub fn recovery(&self) -> Recovery {
        self.recovery
    }

    /// The root object, checked against the size of `R`.
    pub fn root<R: Pod>(&self) -> Result<PPtr<R>> {
        let requested = std::mem::size_of::<R>() as u64;
        if requested != self.geometry.root_bytes {
            return Err(Error::RootMismatch { path: self.path.clone(), stored: self.geometry.root_bytes, requested });
        }
        Ok(PPtr::from_offset(self.geometry.root_offset))
    }

    /// Checks that `count` `T`s at `pointer` lie inside the heap, aligned.
    fn check<T>(&self, pointer: PPtr<T>, count: u64) -> Result<()> {
        let offset = pointer.offset();
        let len = (std::mem::size_of::<T>() as u64).saturating_mul(count);
        let reason = if pointer.is_null() {
            "is null"
        } else if offset < self.geometry.heap_offset
            || offset.checked_add(len).is_none_or(|end| end > self.geometry.heap_end())
        {
            "is outside the heap"
        } else if !offset.is_multiple_of(std::mem::align_of::<T>() as u64) {
            "is misaligned for its type"
        } else {
            return Ok(());
        };
        Err(Error::BadPointer { path: self.path.clone(), offset, len, reason })
    }

    /// The object `pointer` points at.
    pub fn get<T: Pod>(&self, pointer: PPtr<T>) -> Result<&T> {
        self.check(pointer, 1)?;
        Ok(bytemuck::from_bytes(self.mem.bytes(pointer.offset(), std::mem::size_of::<T>() as u64)))
    }

    /// `count` consecutive objects starting at `pointer`.
    pub fn get_slice<T: Pod>(&self, pointer: PPtr<T>, count: u64) -> Result<&[T]> {
        self.check(pointer, count)?;
        let len = std::mem::size_of::<T>() as u64 * count;
        Ok(bytemuck::cast_slice(self.mem.bytes(pointer.offset(), len)))
    }

    /// Runs `body` as one transaction: every change it makes through the
    /// [`Tx`] commits atomically when it returns `Ok`, and is rolled back
    /// when it returns `Err`, panics, or the process dies before commit.
    pub fn transaction<R, E: From<Error>>(
        &mut self,
        body: impl FnOnce(&mut Tx<'_>) -> std::result::Result<R, E>,
    ) -> std::result::Result<R, E> {
        if let Some(reason) = &self.poisoned {
            return Err(Error::Poisoned { path: self.path.clone(), reason: reason.clone() }.into());
        }
        let mut tx = Tx::begin(self);
        match body(&mut tx) {
            Ok(value) => {
                tx.commit()?;
                Ok(value)
            }
            Err(error) => {
                drop(tx); // rolls back
                Err(error)
            }
        }
    }

    /// A mutable view of an object without undo logging, for structures
    /// with their own crash protocol (publish-by-one-atomic-store, as the
    /// example hash map's insert does). Persist it with [`Pool::persist`].
    ///
    /// # Safety
    /// Not memory safety but crash consistency, which the type system cannot
    /// see: the caller guarantees that a crash at any moment between this
    /// call and the persist leaves bytes its recovery accepts (a torn 8-byte
    /// aligned store cannot happen; anything wider can).
    pub unsafe fn get_mut_unlogged<T: Pod>(&mut self, pointer: PPtr<T>) -> Result<&mut T> {
        self.check(pointer, 1)?;
        Ok(bytemuck::from_bytes_mut(self.mem.bytes_mut(pointer.offset(), std::mem::size_of::<T>() as u64)))
    }

    /// Makes the object at `pointer` durable (write-back and fence).
    pub fn persist<T: Pod>(&mut self, pointer: PPtr<T>) -> Result<()> {
        self.persist_slice(pointer, 1)
    }

    /// Makes `count` objects from `pointer` durable with one fence.
    pub fn persist_slice<T: Pod>(&mut self, pointer: PPtr<T>, count: u64) -> Result<()> {
        self.check(pointer, count)?;
        if self.redo_live {
            tx::retire_redo_log(self)?;
        }
        self.media.write_back(pointer.offset(), std::mem::size_of::<T>() as u64 * count)?;
        self.media.fence()
    }

    /// Allocator figures, computed by a walk over the chunk table.
    pub fn stats(&self) -> PoolStats {
        heap::stats(self)
    }

    /// Consumes the pool, returning its simulated medium (for crash images).
    pub fn into_simulated(self) -> Option<SimMedia> {
        match self.media {
            Media::Sim(sim) => Some(sim),
            Media::Mapped(_) => None,
        }
    }
}

/// A placeholder until the header is read; never used for access.
const ZERO_GEOMETRY: Geometry = Geometry {
    pool_bytes: 0,
    log_offset: 0,
    log_bytes: 0,
    table_offset: 0,
    bitmap_offset: 0,
    heap_offset: 0,
    chunk_count: 0,
    root_offset: 0,
    root_bytes: 0,
};

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("path", &self.path)
            .field("durability", &self.durability)
            .field("geometry", &self.geometry)
            .finish()
    }
}
