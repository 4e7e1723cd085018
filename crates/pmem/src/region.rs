//! A persistent region: a file mapped shared into memory, plus the one
//! operation that makes a byte range durable.
//!
//! Media assumptions (what each mode promises is derived from these):
//! - DAX mapping with MAP_SYNC: a store is durable once its cache line is
//!   written back (CLWB/CLFLUSHOPT/CLFLUSH) and fenced; no syscall needed.
//! - tmpfs (/dev/shm): memory-backed, the stand-in for PM on machines
//!   without it. Cache write-back is what real PM would need; the data
//!   survives a process crash, not a reboot.
//! - any other file system: the page cache holds the bytes until fdatasync
//!   returns. In `sync` mode writes go through pwrite (see `PersistPath`)
//!   into preallocated files, zero-filled where the owner asks
//!   (`NewBlocks`), so that each sync is data only.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

use crate::flush::{self, FlushInstruction};
use crate::Durability;

const TMPFS_MAGIC: libc::c_long = 0x0102_1994;
/// Not in every libc version of the crate; values from <linux/mman.h>.
const MAP_SHARED_VALIDATE: libc::c_int = 0x03;
const MAP_SYNC: libc::c_int = 0x80000;

pub use crate::error::{Error, Result};

/// What backs a mapping, decided once at map time.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Medium {
    /// DAX mapping with MAP_SYNC: real persistent memory.
    Dax,
    /// tmpfs: memory, the persistent-memory stand-in.
    Tmpfs,
    /// Any page-cache file system (ext4, xfs, ...).
    PageCache,
}

impl Medium {
    pub fn name(self) -> &'static str {
        match self {
            Medium::Dax => "dax",
            Medium::Tmpfs => "tmpfs",
            Medium::PageCache => "page-cache",
        }
    }
}

/// How `persist` makes a range durable, derived from mode and medium.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PersistPath {
    CacheFlush(FlushInstruction),
    /// Page-cache files: writes go through `pwrite`, persists are
    /// `fdatasync`. Storing through the mapping and calling msync instead
    /// costs a write-protect fault on every page after each sync (the
    /// kernel re-arms dirty tracking): measured on ext4 with
    /// redis-benchmark SET -P 1, msync gave 35k req/s at 23.7 µs of server
    /// CPU per request, pwrite + fdatasync 48k at 19.9 µs. Reads still use
    /// the mapping: the page cache is shared, so they see the bytes at once.
    WriteFdatasync,
    Nothing,
}

/// How the owner changes the file's bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stores {
    /// `Region::write` (pwrite in page-cache `sync` mode): the engine's log.
    Syscall,
    /// Plain stores into the mapping: pools.
    Mapping,
}

/// A file mapped read-write and shared.
///
/// Writers and readers share `&Region`; the region does not arbitrate. The
/// owner (the engine's log writer) guarantees that bytes are only read after
/// they were written and published, and never written while a reader may
/// look at them.
pub struct Region {
    ptr: *mut u8,
    len: usize,
    file: File,
    path: PathBuf,
    medium: Medium,
    persist_path: PersistPath,
    /// Mapped MAP_PRIVATE: `write_back` copies stores to the file.
    private: bool,
}

// SAFETY: the mapping is plain shared memory owned by this value; access
// discipline (write-before-publish) is the owner's contract documented above.
unsafe impl Send for Region {}
// SAFETY: as above.
unsafe impl Sync for Region {}

/// Prefaults a fresh mapping a few MiB at a time. MAP_POPULATE would fault
/// the whole file in one call holding the process's mmap lock; any thread
/// that maps or protects memory meanwhile (the allocator growing an arena)
/// queues for it, and every page fault in the process queues behind that
/// one: a log writer stalled 22-39 ms each time a 64 MiB segment was
/// prepared on tmpfs. `how` maps the pages writable as well
/// (`Populate::Write`, `Populate::Touch`), so the first store to each page
/// takes no write-protect fault; page-cache files are read-populated
/// instead (as MAP_POPULATE does for shared mappings), since writable pages
/// would be written back for nothing (except a little ahead of the stores,
/// `Region::prefault_range`). Covers `[from, to)`, widened to whole pages.
///
/// # Safety
/// `ptr..ptr + to` (rounded up to a page) must be a mapping owned by the
/// caller.
unsafe fn populate_in_steps(ptr: *mut u8, from: usize, to: usize, how: Populate) {
    const STEP_BYTES: usize = 2 << 20;
    let page = page_size();
    let len = to.div_ceil(page) * page;
    let mut at = from / page * page;
    while at < len {
        let step = STEP_BYTES.min(len - at);
        // SAFETY: within the mapping (caller's contract).
        let chunk = unsafe { ptr.add(at) };
        let advice = match how {
            Populate::Read => Some(libc::MADV_POPULATE_READ),
            Populate::Write => Some(libc::MADV_POPULATE_WRITE),
            Populate::Touch => None,
        };
        // SAFETY: advice on our own mapping; it changes no contents.
        if advice.is_none_or(|advice| unsafe { libc::madvise(chunk.cast(), step, advice) } != 0) {
            // `Populate::Touch`, or a kernel before 5.14 that lacks the
            // advice: touch one byte per page.
            for offset in (0..step).step_by(page) {
                // SAFETY: within the mapping; a read changes nothing.
                unsafe { std::ptr::read_volatile(chunk.add(offset)) };
            }
        }
        at += step;
    }
}

/// How `populate_in_steps` maps pages.
#[derive(Clone, Copy)]
enum Populate {
    Read,
    Write,
    /// A read of one byte per page: on tmpfs each fault maps the up-to-date
    /// pages around it as well (the kernel's fault-around, 64 KiB), and
    /// writable, since tmpfs tracks no dirty pages; the advice takes a
    /// fault per page (`write_zeros_in_memory`).
    Touch,
}

fn page_size() -> usize {
    // SAFETY: sysconf has no preconditions.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if size > 0 {
        size as usize
    } else {
        4096
    }
}

pub(crate) fn io_err<'a>(path: &'a Path, op: &'static str) -> impl FnOnce(std::io::Error) -> Error + 'a {
    move |source| Error::Io { path: path.to_path_buf(), op, source }
}

/// How a new file's blocks are readied for `sync` writes on a page-cache
/// file system (elsewhere both are the same: blocks reserved).
///
/// fallocate reserves blocks as "unwritten" extents: the first write to
/// each block changes extent metadata, so every fdatasync after it also
/// writes the inode (with a journal, commits it). Zeros written once make
/// later fdatasyncs pure data writes, as PostgreSQL does with its WAL
/// files, but cost the file's size in device writes and a copy. Which is
/// cheaper depends on the syncs to come: measured on this repository's
/// disk (ext4, virtio), an fdatasync into reserved blocks took 0.06 ms more
/// at 4 KiB, 0.13 ms at 64 KiB and 0.55 ms at 512 KiB than into written
/// ones, and each byte of zeros costs about what a byte of data does at
/// the device's flush (1.5 ns), so writers whose syncs are a few KiB
/// gain from the zeros and writers whose syncs are hundreds of KiB lose.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NewBlocks {
    /// Reserved, then written as zeros and synced.
    Written,
    /// Reserved only: nothing is written up front.
    Reserved,
}

impl Region {
    /// Creates `path` (which must not exist) with `len_bytes` preallocated and
    /// maps it. `populate` prefaults the pages so the first writes do not
    /// page-fault (worth it when creation is off the critical path).
    pub fn create(path: &Path, len_bytes: usize, durability: Durability, populate: bool) -> Result<Region> {
        let file = create_file(path, len_bytes, durability, NewBlocks::Written, &mut || {})?;
        Self::map(file, path, len_bytes, durability, populate, Stores::Syscall)
    }

    /// As `create` (not prefaulted), calling `pause` between steps of the
    /// work (2 MiB reserved, 1 MiB of zeros written): a thread that naps
    /// there gives its core away at each step instead of holding it for
    /// the whole file (64 MiB of fresh tmpfs: 40-60 ms in one system call).
    pub fn create_with_pauses(
        path: &Path,
        len_bytes: usize,
        durability: Durability,
        blocks: NewBlocks,
        pause: &mut dyn FnMut(),
    ) -> Result<Region> {
        let file = create_file(path, len_bytes, durability, blocks, pause)?;
        Self::map(file, path, len_bytes, durability, false, Stores::Syscall)
    }

    /// As `create`, for owners that store through the mapping and persist
    /// with [`Region::write_back`] + [`Region::fence`] (pools). In `sync`
    /// mode on a page-cache file system the mapping is private: stores land
    /// in private pages and `write_back` copies them to the file with
    /// pwrite. A shared writable mapping would take a write-protect fault
    /// and an ext4 page_mkwrite on the first store to every page after each
    /// sync; measured here, store + fdatasync of one page cost 400-550 µs
    /// that way and 50-76 µs with pwrite.
    pub fn create_for_stores(path: &Path, len_bytes: usize, durability: Durability) -> Result<Region> {
        let file = create_file(path, len_bytes, durability, NewBlocks::Written, &mut || {})?;
        Self::map(file, path, len_bytes, durability, false, Stores::Mapping)
    }

    /// Maps an existing file over its whole length.
    pub fn open(path: &Path, durability: Durability) -> Result<Region> {
        let (file, len) = open_file(path)?;
        Self::map(file, path, len, durability, false, Stores::Syscall)
    }

    /// As `open`, for owners that store through the mapping.
    pub fn open_for_stores(path: &Path, durability: Durability) -> Result<Region> {
        let (file, len) = open_file(path)?;
        Self::map(file, path, len, durability, false, Stores::Mapping)
    }

    fn map(
        file: File,
        path: &Path,
        len: usize,
        durability: Durability,
        populate: bool,
        stores: Stores,
    ) -> Result<Region> {
        let fd = file.as_raw_fd();
        let prot = libc::PROT_READ | libc::PROT_WRITE;
        // Try MAP_SYNC first: it only succeeds on a DAX mount, which is how
        // the kernel tells us the medium is real persistent memory.
        // SAFETY: a fresh mapping of a file we own; failure is checked.
        let dax_ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, MAP_SHARED_VALIDATE | MAP_SYNC, fd, 0) };
        let (ptr, medium) = if dax_ptr != libc::MAP_FAILED {
            (dax_ptr, Medium::Dax)
        } else {
            let medium = if is_tmpfs(&file) { Medium::Tmpfs } else { Medium::PageCache };
            let private = stores == Stores::Mapping && durability == Durability::Sync && medium == Medium::PageCache;
            let sharing = if private { libc::MAP_PRIVATE } else { libc::MAP_SHARED };
            // SAFETY: as above.
            let ptr = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, sharing, fd, 0) };
            if ptr == libc::MAP_FAILED {
                return Err(io_err(path, "mmap")(std::io::Error::last_os_error()));
            }
            (ptr, medium)
        };
        let persist_path = match (durability, medium) {
            (Durability::Buffered, _) => PersistPath::Nothing,
            (Durability::Pmem, Medium::Dax | Medium::Tmpfs) => PersistPath::CacheFlush(flush::for_persistent_mapping()),
            (Durability::Pmem, Medium::PageCache) => {
                // SAFETY: unmapping the mapping made just above.
                unsafe { libc::munmap(ptr, len) };
                return Err(Error::PmemNeedsDax { path: path.to_path_buf() });
            }
            (Durability::Sync, Medium::Dax) => PersistPath::CacheFlush(flush::for_persistent_mapping()),
            // tmpfs has no device behind its pages: a store is already on
            // the "medium", and msync would be a system call that writes
            // nothing back. (It survives a process crash, as everything in
            // tmpfs does, and nothing in tmpfs survives power loss.)
            (Durability::Sync, Medium::Tmpfs) => PersistPath::Nothing,
            (Durability::Sync, Medium::PageCache) => PersistPath::WriteFdatasync,
        };
        if medium == Medium::Tmpfs {
            // On a tmpfs mounted with `huge=advise`, 2 MiB pages only where
            // asked for (`huge=always` and `within_size` give them anyway,
            // the default `never` refuses): a random read in a 4 KiB-paged
            // log is a TLB miss and a page walk before its first line
            // (readrandom of 1 KiB values p50 0.61 -> 0.47 us, readseq
            // 0.30-0.35 -> 0.24-0.28 us per entry). Advice only: the
            // mapping works either way.
            // SAFETY: advice on the mapping made just above.
            unsafe { libc::madvise(ptr, len, libc::MADV_HUGEPAGE) };
        }
        let private = stores == Stores::Mapping && persist_path == PersistPath::WriteFdatasync;
        let region = Region { ptr: ptr.cast(), len, file, path: path.to_path_buf(), medium, persist_path, private };
        if populate {
            region.prefault();
        }
        Ok(region)
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Prefaults the whole mapping (`create` with `populate` does it
    /// first). Owners may use the region meanwhile: stores to pages not
    /// yet prefaulted take their own faults; prefaulting changes no byte.
    pub fn prefault(&self) {
        // SAFETY: `ptr..ptr + len` is this region's own mapping.
        unsafe { populate_in_steps(self.ptr, 0, self.len, self.populate(false)) };
    }

    /// Prefaults `[from, to)` (widened to whole pages), as
    /// [`Region::prefault`] does the whole mapping, but writable
    /// wherever stores go through the mapping: on a `buffered` page-cache
    /// file too, where the first store to each page would otherwise take a
    /// write-protect fault and the file system's `page_mkwrite` on the
    /// storing thread (a quarter of a disk fill's writer, BENCHMARKS.md,
    /// forty-eighth session). Such pages become dirty: see
    /// [`Region::prefaults_dirty`].
    pub fn prefault_range(&self, from: usize, to: usize) {
        let to = to.min(self.len);
        if from >= to {
            return;
        }
        // SAFETY: `ptr..ptr + len` is this region's own mapping, and `to`
        // within it widens to at most its last page.
        unsafe { populate_in_steps(self.ptr, from, to, self.populate(self.prefaults_dirty())) };
    }

    fn populate(&self, dirty_too: bool) -> Populate {
        match self.medium {
            Medium::Tmpfs => Populate::Touch,
            Medium::Dax => Populate::Write,
            Medium::PageCache if dirty_too => Populate::Write,
            Medium::PageCache => Populate::Read,
        }
    }

    /// Whether [`Region::prefault_range`] leaves its pages dirty: on a
    /// `buffered` page-cache file a page mapped writable is a dirty page,
    /// which writeback (the kernel's after 30 s, any fsync) writes to the
    /// device whether or not a store reached it, zeros and all. Owners
    /// prefault such files only a little ahead of their stores.
    pub fn prefaults_dirty(&self) -> bool {
        self.medium == Medium::PageCache && self.persist_path == PersistPath::Nothing
    }

    /// Whether stores through the mapping reach the file only by
    /// [`Region::write_back`] (a private mapping in page-cache `sync` mode).
    pub fn is_private(&self) -> bool {
        self.private
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn medium(&self) -> Medium {
        self.medium
    }

    /// Whether `persist` waits for a device (fdatasync), so that one persist
    /// shared by many writers costs them much less than one each.
    pub fn persist_waits_for_device(&self) -> bool {
        self.persist_path == PersistPath::WriteFdatasync
    }

    /// Whether `persist` writes back cache lines (DAX, or `pmem` mode on
    /// tmpfs): the case where persisting the same 256-byte block twice
    /// costs twice on Optane-class memory.
    pub fn persists_cache_lines(&self) -> bool {
        matches!(self.persist_path, PersistPath::CacheFlush(_))
    }

    /// The instruction or syscall `persist` uses, for reports.
    pub fn persist_method(&self) -> &'static str {
        match self.persist_path {
            PersistPath::CacheFlush(instruction) => instruction.name(),
            PersistPath::WriteFdatasync => "fdatasync",
            PersistPath::Nothing => "none",
        }
    }

    fn check(&self, offset: usize, len: usize) -> Result<()> {
        match offset.checked_add(len) {
            Some(end) if end <= self.len => Ok(()),
            _ => Err(Error::OutOfRange { path: self.path.clone(), offset, len, size: self.len }),
        }
    }

    /// The bytes at `[offset, offset + len)`.
    pub fn read(&self, offset: usize, len: usize) -> Result<&[u8]> {
        self.check(offset, len)?;
        // SAFETY: in bounds (checked); the mapping lives as long as `self`.
        Ok(unsafe { std::slice::from_raw_parts(self.ptr.add(offset), len) })
    }

    /// The whole mapping.
    pub fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is `len` bytes and lives as long as `self`.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Whether `write` is a system call (page-cache `sync` mode) rather than
    /// a copy into the mapping: callers then gather bytes and write once.
    pub fn writes_by_syscall(&self) -> bool {
        self.persist_path == PersistPath::WriteFdatasync
    }

    /// Copies `data` to `offset`. Not durable until `persist` covers it.
    ///
    /// # Safety
    /// No reader may be looking at `[offset, offset + data.len())` during the
    /// call: the owner writes only bytes it has not yet published.
    pub unsafe fn write(&self, offset: usize, data: &[u8]) -> Result<()> {
        self.check(offset, data.len())?;
        if self.persist_path == PersistPath::WriteFdatasync {
            use std::os::unix::fs::FileExt;
            return self.file.write_all_at(data, offset as u64).map_err(io_err(&self.path, "pwrite"));
        }
        // SAFETY (both copies): in bounds; exclusivity of the range is the
        // caller's contract.
        if self.persists_cache_lines() && data.len() >= flush::NONTEMPORAL_MIN_BYTES {
            // Whole lines stored non-temporally go to memory without being
            // read into the cache first; the persist's SFENCE drains them.
            flush::copy_nontemporal(self.ptr.add(offset), data.as_ptr(), data.len());
        } else {
            std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(offset), data.len());
        }
        Ok(())
    }

    /// Fills `[offset, offset + len)` with zeros, skipping pages that are
    /// already zero so repair does not dirty a whole empty file. Returns
    /// the end of the last page it changed (`offset` if none): only
    /// `[offset, end)` needs a persist.
    ///
    /// # Safety
    /// As for `write`.
    pub unsafe fn zero(&self, offset: usize, len: usize) -> Result<usize> {
        self.check(offset, len)?;
        const STEP: usize = 4096;
        let mut at = offset;
        let mut changed_end = offset;
        while at < offset + len {
            let n = STEP.min(offset + len - at);
            let chunk = std::slice::from_raw_parts_mut(self.ptr.add(at), n);
            if chunk.iter().any(|b| *b != 0) {
                chunk.fill(0);
                changed_end = at + n;
            }
            at += n;
        }
        Ok(changed_end)
    }

    /// As `zero`, in 2 MiB steps with `pause` called after each (see
    /// `create_with_pauses`).
    ///
    /// # Safety
    /// As for `write`.
    pub unsafe fn zero_with_pauses(&self, offset: usize, len: usize, pause: &mut dyn FnMut()) -> Result<usize> {
        const STEP_BYTES: usize = 2 << 20;
        let mut changed_end = offset;
        for at in (offset..offset + len).step_by(STEP_BYTES) {
            let step_end = self.zero(at, STEP_BYTES.min(offset + len - at))?;
            if step_end > at {
                changed_end = step_end;
            }
            pause();
        }
        Ok(changed_end)
    }

    /// Makes `[offset, offset + len)` durable as the mode and medium require.
    pub fn persist(&self, offset: usize, len: usize) -> Result<()> {
        self.check(offset, len)?;
        match self.persist_path {
            PersistPath::Nothing => Ok(()),
            PersistPath::CacheFlush(instruction) => {
                // SAFETY: the range is in bounds of a live mapping.
                unsafe { flush::flush_range(instruction, self.ptr.add(offset), len) };
                Ok(())
            }
            // The file is preallocated, so this writes data blocks and
            // flushes the device cache, with no allocation (and with no
            // metadata at all where its blocks were written, `NewBlocks`).
            PersistPath::WriteFdatasync => self.file.sync_data().map_err(io_err(&self.path, "fdatasync")),
        }
    }

    /// The first byte of the mapping, for structures that store into it
    /// directly (the pool). Stores made this way are persisted with
    /// [`Region::write_back`] and [`Region::fence`], never with `persist`,
    /// which in page-cache `sync` mode expects bytes written by `write`.
    pub fn as_mut_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Starts writing back stores made through the mapping in
    /// `[offset, offset + len)`; durable after the next [`Region::fence`].
    /// Cache-line write-back on DAX/tmpfs in `pmem` mode; pwrite from the
    /// private mapping in page-cache `sync` mode (`create_for_stores`);
    /// nothing otherwise.
    pub fn write_back(&self, offset: usize, len: usize) -> Result<()> {
        self.check(offset, len)?;
        match self.persist_path {
            // SAFETY: the range is in bounds of a live mapping.
            PersistPath::CacheFlush(instruction) => unsafe {
                flush::write_back_lines(instruction, self.ptr.add(offset), len)
            },
            PersistPath::WriteFdatasync if self.private => {
                use std::os::unix::fs::FileExt;
                // SAFETY: in bounds; the owner stores into this range only
                // through `&mut` access it does not hold during this call.
                let bytes = unsafe { std::slice::from_raw_parts(self.ptr.add(offset), len) };
                self.file.write_all_at(bytes, offset as u64).map_err(io_err(&self.path, "pwrite"))?;
            }
            PersistPath::WriteFdatasync | PersistPath::Nothing => {}
        }
        Ok(())
    }

    /// Makes every earlier `write_back` durable: SFENCE on DAX/tmpfs in
    /// `pmem` mode; fdatasync of the file in page-cache `sync` mode (it
    /// writes back the mapping's dirty pages too); nothing when buffered.
    pub fn fence(&self) -> Result<()> {
        match self.persist_path {
            PersistPath::CacheFlush(_) => {
                flush::store_fence();
                Ok(())
            }
            PersistPath::WriteFdatasync => self.file.sync_data().map_err(io_err(&self.path, "fdatasync")),
            PersistPath::Nothing => Ok(()),
        }
    }

    /// Writes the file's dirty pages to the device, 256 KiB at a time with
    /// one piece in flight, and one region at a time in this process; returns
    /// once they are written, without flushing the device's cache
    /// (`sync_file_range`). Not durability: it spreads writeback out over
    /// time, on the caller's thread.
    ///
    /// A shared mapping's page-table entries are dropped first
    /// (`MADV_DONTNEED`: the pages stay in the page cache, dirty, and a
    /// later read faults them back in). Otherwise the writeback
    /// write-protects every page in them, one TLB-flush interrupt to the
    /// process's other cores per page: with that, a disk fill of 1M x
    /// 16/1024 B ran at 370-398k writes/s; without, 907-915k.
    ///
    /// In pieces because a whole 64 MiB file handed to the device at once
    /// (as before) filled its queue for ~130 ms, and every file system
    /// operation of the writer's next segment (create, rename: 5-18 ms
    /// each) waited behind it: a `buffered` disk fill of 1M x 16/1024 B then
    /// waited for its next segment at 2-7 rolls (0.1-0.46 s of a 1.2-1.5 s
    /// run). 18 interleaved pairs: 583-925k writes/s (median 790k) ->
    /// 857k-1.09M (median 1.04M); 1 MiB pieces alike, pieces of several
    /// regions in flight at once no better than the start. Reads right
    /// after overwrites, 12 pairs: readrandom -4%, readseq -3% (medians;
    /// two readseq runs -38%, the overwrites' writeback still running).
    pub fn write_back_paced(&self) -> Result<()> {
        if !self.is_private() {
            // SAFETY: the range is this region's own shared file mapping;
            // dropping its entries loses nothing, even under concurrent
            // stores (they land in the page cache's pages either way), and
            // leaves the addresses valid: the next access faults them in.
            if unsafe { libc::madvise(self.ptr.cast(), self.len, libc::MADV_DONTNEED) } != 0 {
                return Err(io_err(&self.path, "madvise(MADV_DONTNEED)")(std::io::Error::last_os_error()));
            }
        }
        static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
        let _turn = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
        const PIECE: usize = 256 << 10;
        let mut at = 0;
        while at < self.len {
            let n = PIECE.min(self.len - at);
            write_back_and_wait(&self.file, at, n).map_err(io_err(&self.path, "sync_file_range"))?;
            at += n;
        }
        Ok(())
    }

    /// fsync of the file (data and metadata), e.g. after repair.
    pub fn sync_file(&self) -> Result<()> {
        self.file.sync_all().map_err(io_err(&self.path, "fsync"))
    }

    /// Renames the file, keeping the mapping and its pages. Not durable
    /// until the directory is synced ([`sync_dir`]).
    pub fn rename(&mut self, to: &Path) -> Result<()> {
        std::fs::rename(&self.path, to).map_err(io_err(&self.path, "rename"))?;
        self.path = to.to_path_buf();
        Ok(())
    }

    /// As `rename`, but fails (`AlreadyExists`) instead of replacing a file
    /// already at `to`. Where the file system lacks `RENAME_NOREPLACE`, a
    /// hard link to `to` (which fails the same way) and an unlink.
    pub fn rename_noreplace(&mut self, to: &Path) -> Result<()> {
        use std::os::unix::ffi::OsStrExt;
        let cstr = |p: &Path| std::ffi::CString::new(p.as_os_str().as_bytes()).ok();
        let (Some(from_c), Some(to_c)) = (cstr(&self.path), cstr(to)) else {
            return Err(io_err(to, "rename")(std::io::ErrorKind::InvalidInput.into()));
        };
        // SAFETY: two NUL-terminated paths that outlive the call.
        let rc = unsafe {
            libc::renameat2(libc::AT_FDCWD, from_c.as_ptr(), libc::AT_FDCWD, to_c.as_ptr(), libc::RENAME_NOREPLACE)
        };
        if rc != 0 {
            let error = std::io::Error::last_os_error();
            if !matches!(error.raw_os_error(), Some(libc::EINVAL) | Some(libc::ENOSYS)) {
                return Err(io_err(to, "rename")(error));
            }
            std::fs::hard_link(&self.path, to).map_err(io_err(to, "link"))?;
            std::fs::remove_file(&self.path).map_err(io_err(&self.path, "unlink"))?;
        }
        self.path = to.to_path_buf();
        Ok(())
    }
}

impl Drop for Region {
    fn drop(&mut self) {
        // SAFETY: we own the mapping and nothing borrows it past `self`.
        unsafe { libc::munmap(self.ptr.cast(), self.len) };
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Region")
            .field("path", &self.path)
            .field("len", &self.len)
            .field("medium", &self.medium)
            .field("persist", &self.persist_method())
            .finish()
    }
}

/// Creates `path` (which must not exist) with `len_bytes` reserved (on
/// tmpfs written as zeros, `write_zeros_in_memory`), zero-filled on other
/// file systems where `blocks` asks for it, and synced unless buffered.
fn create_file(
    path: &Path,
    len_bytes: usize,
    durability: Durability,
    blocks: NewBlocks,
    pause: &mut dyn FnMut(),
) -> Result<File> {
    if len_bytes == 0 {
        return Err(Error::Empty { path: path.to_path_buf() });
    }
    let file = OpenOptions::new().read(true).write(true).create_new(true).open(path).map_err(io_err(path, "create"))?;
    file.set_len(len_bytes as u64).map_err(io_err(path, "set_len"))?;
    let tmpfs = is_tmpfs(&file);
    if tmpfs {
        write_zeros_in_memory(&file, len_bytes, pause).map_err(io_err(path, "zero-fill"))?;
    } else {
        reserve_blocks(&file, path, len_bytes, pause)?;
    }
    if durability == Durability::Sync && blocks == NewBlocks::Written && !tmpfs {
        write_zeros(&file, len_bytes, pause).map_err(io_err(path, "zero-fill"))?;
    }
    if durability != Durability::Buffered {
        file.sync_all().map_err(io_err(path, "fsync"))?;
    }
    Ok(file)
}

/// Reserves the file's blocks so that later writes need no allocation,
/// which also keeps each later fdatasync free of block-allocation
/// metadata.
fn reserve_blocks(file: &File, path: &Path, len_bytes: usize, pause: &mut dyn FnMut()) -> Result<()> {
    const ALLOCATE_STEP_BYTES: usize = 2 << 20;
    let mut at = 0;
    while at < len_bytes {
        let step = ALLOCATE_STEP_BYTES.min(len_bytes - at);
        // SAFETY: plain syscall on an fd we own.
        let rc = unsafe { libc::posix_fallocate(file.as_raw_fd(), at as libc::off_t, step as libc::off_t) };
        if rc == libc::EOPNOTSUPP {
            break;
        }
        if rc != 0 {
            return Err(Error::Io {
                path: path.to_path_buf(),
                op: "fallocate",
                source: std::io::Error::from_raw_os_error(rc),
            });
        }
        at += step;
        pause();
    }
    Ok(())
}

/// Opens an existing, non-empty file read-write; returns it and its length.
fn open_file(path: &Path) -> Result<(File, usize)> {
    let file = OpenOptions::new().read(true).write(true).open(path).map_err(io_err(path, "open"))?;
    let len = file.metadata().map_err(io_err(path, "stat"))?.len() as usize;
    if len == 0 {
        return Err(Error::Empty { path: path.to_path_buf() });
    }
    Ok((file, len))
}

fn is_tmpfs(file: &File) -> bool {
    // SAFETY: statfs writes into the zeroed struct we pass.
    let mut stat: libc::statfs = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::fstatfs(file.as_raw_fd(), &mut stat) };
    rc == 0 && stat.f_type as libc::c_long == TMPFS_MAGIC
}

/// The medium a directory lives on, for reports and for choosing defaults.
pub fn medium_of_dir(dir: &Path) -> std::io::Result<Medium> {
    let file = File::open(dir)?;
    Ok(if is_tmpfs(&file) { Medium::Tmpfs } else { Medium::PageCache })
}

/// fsync of a directory, so that a create, rename or unlink in it is durable.
pub fn sync_dir(dir: &Path) -> std::io::Result<()> {
    File::open(dir)?.sync_all()
}

/// Gives a tmpfs file its `len` bytes of pages by writing zeros, where
/// other file systems reserve blocks (`reserve_blocks`): a page written is
/// "up to date", so a fault on it maps its neighbours too
/// (`Populate::Touch`), while a page fallocated is only cleared and mapped
/// by its own fault. 64 MiB here: fallocate 18-20 ms + MADV_POPULATE_WRITE
/// 21-23 ms (16,384 faults) against these writes 28-29 ms + touches 5 ms
/// (1,025 faults), so a durable one-thread fill, whose writer shares the
/// two cores with the next segment's preparation, gained 5.5% (1.12M ->
/// 1.18M writes/s, medians of 13 interleaved pairs; BENCHMARKS.md,
/// fifty-fourth session). Out of space is this write's error, as it
/// would be fallocate's.
fn write_zeros_in_memory(file: &File, len: usize, pause: &mut dyn FnMut()) -> std::io::Result<()> {
    write_zeros_by(file, len, 64 << 10, |at, n| {
        if (at + n) % (2 << 20) == 0 {
            pause();
        }
    })
}

/// Writes `len` zeros a chunk at a time, each written back before the
/// next: a 64 MiB file written whole and then synced kept the device busy
/// for 130 ms here, and every group commit's fdatasync queued behind it
/// (95 ms p99 for durable SETs). A group's flush waits for the one chunk
/// in flight, so chunks of 128 KiB rather than 1 MiB (about 2 ms of this
/// disk's time): a one-thread durable fill (16/1024 B, 50,000 writes, its
/// next segment zero-filled meanwhile) 8.2-9.5k -> 8.9-10.8k writes/s (+9-19%
/// in 6 interleaved pairs), durable SETs on the disk +3-12% at `-P 1`,
/// +3-6% at `-P 16`; a new database's open takes ~20 ms longer.
fn write_zeros(file: &File, len: usize, pause: &mut dyn FnMut()) -> std::io::Result<()> {
    write_zeros_by(file, len, 128 << 10, |at, n| {
        // Only pacing: the caller's fsync is what makes the zeros durable,
        // so a file system without sync_file_range just loses the pacing.
        let _ = write_back_and_wait(file, at, n);
        pause();
    })
}

/// Writes `len` zeros `chunk` bytes at a time, calling `after(at, n)`
/// once each chunk `[at, at + n)` is written.
fn write_zeros_by(file: &File, len: usize, chunk: usize, mut after: impl FnMut(usize, usize)) -> std::io::Result<()> {
    use std::os::unix::fs::FileExt;
    let zeros = vec![0u8; chunk];
    let mut at = 0;
    while at < len {
        let n = chunk.min(len - at);
        file.write_all_at(&zeros[..n], at as u64)?;
        after(at, n);
        at += n;
    }
    Ok(())
}

/// Writes `[at, at + len)` of `file` to the device and waits for it
/// (`sync_file_range`), without flushing the device's cache: the piece
/// then no longer sits in the device's queue ahead of anyone's flush.
fn write_back_and_wait(file: &File, at: usize, len: usize) -> std::io::Result<()> {
    let flags = libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE | libc::SYNC_FILE_RANGE_WAIT_AFTER;
    // SAFETY: a plain system call on an open file descriptor.
    let rc = unsafe { libc::sync_file_range(file.as_raw_fd(), at as libc::off64_t, len as libc::off64_t, flags) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file created in steps is reserved whole (so that stores into
    /// its mapping never meet a full file system), with a pause per step.
    #[test]
    fn a_file_created_in_steps_is_reserved_whole() {
        use std::os::unix::fs::MetadataExt;
        for (dir, durability) in [
            (tempfile::tempdir().unwrap(), Durability::Sync),
            (tempfile::tempdir().unwrap(), Durability::Buffered),
            (tempfile::tempdir_in("/dev/shm").unwrap(), Durability::Sync),
        ] {
            for blocks in [NewBlocks::Written, NewBlocks::Reserved] {
                let path = dir.path().join(format!("{blocks:?}"));
                let mut pauses = 0;
                let region =
                    Region::create_with_pauses(&path, 8 << 20, durability, blocks, &mut || pauses += 1).unwrap();
                let case = format!("{durability:?}, {blocks:?} in {}", dir.path().display());
                assert!(pauses >= 4, "{case}: {pauses} pauses");
                let reserved = std::fs::metadata(&path).unwrap().blocks() * 512;
                assert!(reserved >= 8 << 20, "{case}: {reserved} bytes reserved");
                assert!(region.as_slice().iter().all(|byte| *byte == 0));
                // Zeros are written only for `sync` on a page-cache file.
                let zeros_written = durability == Durability::Sync && blocks == NewBlocks::Written;
                match unwritten_extents(&path) {
                    Some(unwritten) => assert_eq!(unwritten, !zeros_written, "{case}"),
                    None => eprintln!("NOTICE: no FIEMAP in {}: extent kinds not checked", dir.path().display()),
                }
            }
        }
    }

    /// Whether any extent of `path` is reserved but unwritten (FIEMAP); None
    /// where the file system does not say (tmpfs).
    fn unwritten_extents(path: &Path) -> Option<bool> {
        const FS_IOC_FIEMAP: libc::c_ulong = 0xC020_660B;
        const FIEMAP_FLAG_SYNC: u32 = 1;
        const FIEMAP_EXTENT_UNWRITTEN: u32 = 0x800;
        const EXTENTS: usize = 64;
        #[repr(C)]
        struct Fiemap {
            start: u64,
            length: u64,
            flags: u32,
            mapped_extents: u32,
            extent_count: u32,
            reserved: u32,
            extents: [Extent; EXTENTS],
        }
        #[repr(C)]
        #[derive(Clone, Copy)]
        struct Extent {
            logical: u64,
            physical: u64,
            length: u64,
            reserved64: [u64; 2],
            flags: u32,
            reserved: [u32; 3],
        }
        let file = File::open(path).unwrap();
        // SAFETY: plain data, valid when zeroed.
        let mut map: Fiemap = unsafe { std::mem::zeroed() };
        (map.length, map.flags, map.extent_count) = (u64::MAX, FIEMAP_FLAG_SYNC, EXTENTS as u32);
        // SAFETY: FS_IOC_FIEMAP fills at most `extent_count` extents of the struct we own.
        let rc = unsafe { libc::ioctl(file.as_raw_fd(), FS_IOC_FIEMAP, &mut map) };
        (rc == 0 && map.mapped_extents > 0)
            .then(|| map.extents[..map.mapped_extents as usize].iter().any(|e| e.flags & FIEMAP_EXTENT_UNWRITTEN != 0))
    }

    #[test]
    fn write_persist_reopen_roundtrip_in_every_mode() {
        let dir = tempfile::tempdir().unwrap();
        for (i, mode) in [Durability::Sync, Durability::Buffered].into_iter().enumerate() {
            let path = dir.path().join(format!("r{i}"));
            let region = Region::create(&path, 8192, mode, i == 0).unwrap();
            unsafe { region.write(4000, b"hello persistent world").unwrap() };
            region.persist(4000, 22).unwrap();
            drop(region);
            let region = Region::open(&path, mode).unwrap();
            assert_eq!(region.read(4000, 22).unwrap(), b"hello persistent world");
            assert_eq!(region.len(), 8192);
        }
    }

    #[test]
    fn pmem_mode_works_on_tmpfs_and_is_refused_on_page_cache() {
        let shm = Path::new("/dev/shm");
        if medium_of_dir(shm).ok() == Some(Medium::Tmpfs) {
            let dir = tempfile::tempdir_in(shm).unwrap();
            let region = Region::create(&dir.path().join("r"), 4096, Durability::Pmem, false).unwrap();
            assert_eq!(region.medium(), Medium::Tmpfs);
            unsafe { region.write(0, &[7u8; 300]).unwrap() };
            region.persist(0, 300).unwrap();
            assert_eq!(region.read(0, 300).unwrap(), &[7u8; 300][..]);
        } else {
            eprintln!("notice: /dev/shm is not tmpfs here; skipping the tmpfs half of this test");
        }
        let dir = tempfile::tempdir_in(env!("CARGO_MANIFEST_DIR")).unwrap();
        if medium_of_dir(dir.path()).unwrap() == Medium::PageCache {
            let err = Region::create(&dir.path().join("r"), 4096, Durability::Pmem, false).unwrap_err();
            assert!(matches!(err, Error::PmemNeedsDax { .. }), "{err}");
        }
    }

    #[test]
    fn written_back_bytes_stay_readable_and_reopenable() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("r");
        let region = Region::create(&path, 1 << 20, Durability::Buffered, false).unwrap();
        unsafe { region.write(4096, &[5u8; 65536]).unwrap() };
        region.write_back_paced().unwrap();
        assert!(region.read(4096, 65536).unwrap().iter().all(|b| *b == 5));
        unsafe { region.write(4096, b"after").unwrap() };
        region.sync_file().unwrap();
        drop(region);
        let region = Region::open(&path, Durability::Buffered).unwrap();
        assert_eq!(region.read(4096, 6).unwrap(), b"after\x05");
    }

    /// A region in use while another thread prefaults it: the writes
    /// made before, during and after are all kept, on tmpfs and on a
    /// page-cache file system.
    #[test]
    fn prefaulting_a_region_in_use_changes_no_byte() {
        for base in [std::path::PathBuf::from("/dev/shm"), std::env::temp_dir()] {
            let dir = tempfile::tempdir_in(&base).unwrap();
            let path = dir.path().join("r");
            let region = Region::create(&path, 8 << 20, Durability::Buffered, false).unwrap();
            unsafe { region.write(0, &[1u8; 4096]).unwrap() };
            std::thread::scope(|scope| {
                scope.spawn(|| region.prefault());
                // Writable where stores go through the mapping (the
                // buffered page-cache file's pages become dirty).
                scope.spawn(|| region.prefault_range(4 << 20, 8 << 20));
                for page in 1..2048 {
                    unsafe { region.write(page * 4096, &[page as u8; 64]).unwrap() };
                }
            });
            region.prefault();
            region.prefault_range(0, 8 << 20);
            assert!(region.read(0, 4096).unwrap().iter().all(|b| *b == 1));
            for page in 1..2048 {
                let bytes = region.read(page * 4096, 128).unwrap();
                assert!(bytes[..64].iter().all(|b| *b == page as u8), "{base:?} page {page}");
                assert!(bytes[64..].iter().all(|b| *b == 0), "{base:?} page {page}");
            }
        }
    }

    /// Faults taken by this thread so far.
    fn faults_of_this_thread() -> i64 {
        // SAFETY: getrusage writes into the zeroed struct we pass.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        assert_eq!(unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) }, 0);
        usage.ru_minflt + usage.ru_majflt
    }

    /// Where stores go through the mapping of a file in memory (tmpfs, in
    /// every mode), a prefaulted page takes no fault at its first store:
    /// the prefault maps it writable, whichever way it populates.
    #[test]
    fn stores_into_a_prefaulted_region_in_memory_take_no_fault() {
        let shm = Path::new("/dev/shm");
        if medium_of_dir(shm).ok() != Some(Medium::Tmpfs) {
            eprintln!("NOTICE: /dev/shm is not a tmpfs here: first-store faults not checked");
            return;
        }
        for durability in [Durability::Buffered, Durability::Sync, Durability::Pmem] {
            let dir = tempfile::tempdir_in(shm).unwrap();
            let region = Region::create(&dir.path().join("r"), 8 << 20, durability, false).unwrap();
            region.prefault_range(0, 4 << 20);
            region.prefault();
            let before = faults_of_this_thread();
            for page in 0..2048 {
                unsafe { region.write(page * 4096, &[7u8; 8]).unwrap() };
            }
            let faults = faults_of_this_thread() - before;
            assert_eq!(faults, 0, "{durability:?}: first stores to 2048 prefaulted pages took {faults} faults");
            assert!((0..2048).all(|page| region.read(page * 4096, 8).unwrap() == [7u8; 8]));
        }
    }

    /// Only a `buffered` page-cache file's prefault leaves dirty pages
    /// behind (which writeback would write, zeros and all).
    #[test]
    fn only_a_buffered_page_cache_file_prefaults_dirty() {
        let dir = tempfile::tempdir().unwrap();
        if medium_of_dir(dir.path()).unwrap() == Medium::PageCache {
            let buffered = Region::create(&dir.path().join("b"), 8192, Durability::Buffered, false).unwrap();
            assert!(buffered.prefaults_dirty());
            let sync = Region::create(&dir.path().join("s"), 8192, Durability::Sync, false).unwrap();
            assert!(!sync.prefaults_dirty());
            let pool = Region::create_for_stores(&dir.path().join("p"), 8192, Durability::Sync).unwrap();
            assert!(!pool.prefaults_dirty());
        }
        let shm = Path::new("/dev/shm");
        if medium_of_dir(shm).ok() == Some(Medium::Tmpfs) {
            let dir = tempfile::tempdir_in(shm).unwrap();
            let region = Region::create(&dir.path().join("r"), 8192, Durability::Buffered, false).unwrap();
            assert!(!region.prefaults_dirty());
        }
    }

    #[test]
    fn out_of_range_access_is_an_error_not_a_crash() {
        let dir = tempfile::tempdir().unwrap();
        let region = Region::create(&dir.path().join("r"), 100, Durability::Buffered, false).unwrap();
        assert!(matches!(region.read(90, 11), Err(Error::OutOfRange { .. })));
        assert!(matches!(unsafe { region.write(usize::MAX, b"x") }, Err(Error::OutOfRange { .. })));
        assert!(matches!(region.persist(0, 101), Err(Error::OutOfRange { .. })));
    }
}
