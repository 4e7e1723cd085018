//! The database: open/close, the write path (group commit leader), point
//! reads, snapshots and statistics. Range iteration is in `iter.rs`, GC in
//! `gc.rs`, recovery in `recovery.rs`.

use std::fs::File;
use std::ops::{Bound, Deref, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use parking_lot::{Condvar, Mutex};

use crate::batch::WriteBatch;
use crate::checkpoint;
use crate::commit::{Committer, Request, WriteFuture};
use crate::error::{Error, Result};
use crate::index::memtable::{Index, KeyChunk, Loc, Update};
use crate::index::points::Points;
use crate::index::runs::Rebuild;
use crate::iter::Iter;
use crate::lfu::{Frequencies, Lfu};
use crate::log::record::{
    align_up, decode_entry, EntryHeader, EntryKind, EntryView, FrameHeader, FLAG_GROUP_START, FLAG_RELOCATED,
    FRAME_HEADER_BYTES,
};
use crate::log::segment::{
    segment_file_name, tag_of, Recycler, Segment, SegmentId, SegmentSet, SegmentTable, SEGMENT_HEADER_BYTES,
};
use crate::log::writer::{aligns_groups, LogWriter, GROUP_ALIGN_BYTES};
use crate::manifest::Manifest;
use crate::options::{Durability, Options};
use crate::recovery::{self, RecoveryReport, Start};
use crate::stats::{Counters, Stats};

/// Keys added to the point table per index write-lock hold after open
/// (about 0.3 ms).
const POINT_FILL_CHUNK: usize = 4096;

/// Bytes of an entry `Db::prefetch` asks for.
const PREFETCH_BYTES: usize = 128;

/// A checkpoint rewrites the whole index, so a fixed interval made its cost
/// per write grow with the number of keys: 10M keys of 8/32 B wrote a
/// 300 MB checkpoint every 2M overwrites, twice the log's own bytes, and
/// 100M keys would write 3 GB every 2M. So the next checkpoint also waits
/// for a quarter as many log entries as the last one held keys, and four
/// times its bytes of log: its cost per write stays bounded (at most four
/// times a key's checkpoint bytes, or a quarter of the log's bytes), and
/// replay after a crash stays proportional to loading the checkpoint.
const CHECKPOINT_GROWTH: u64 = 4;

/// Where the index is large enough that a full checkpoint waits past the
/// configured interval, a delta (the log since the last checkpoint,
/// collapsed per key) is written at the interval instead, if it holds fewer
/// entries than a quarter of the full checkpoint's keys, while the chain
/// after the full checkpoint holds fewer than `MAX_DELTAS` of them and
/// their bytes stay under a `1 / DELTA_SHARE` of the full one's: a delta
/// costs what was written since the last checkpoint, not the whole index,
/// and an open loads at most 1.5 times the full checkpoint's bytes.
///
/// A delta reads and sorts every log entry since the last checkpoint,
/// about what a full checkpoint of four times as many keys costs. Written
/// at the interval regardless, deltas made `overwrite` 5% slower (4M x
/// 8/256 B, 3 pairs) and up to 10% (1M x 16/1024 B) for a fifth less
/// checkpoint bytes.
pub(crate) const MAX_DELTAS: u32 = 8;
const DELTA_SHARE: u64 = 2;

/// What the next checkpoint writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CheckpointKind {
    /// The whole index.
    Full,
    /// The log since the last checkpoint, collapsed per key.
    Delta,
}

/// One put or delete, by reference to the caller's bytes.
struct Entry<'a> {
    kind: EntryKind,
    key: &'a [u8],
    value: &'a [u8],
    expiry_ms: Option<u64>,
}

/// Milliseconds since the Unix epoch (the unit of expiry times).
pub fn now_ms() -> u64 {
    SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64)
}

/// An open database. `Send + Sync`: share it between threads with `Arc`.
///
/// ```
/// use scaledkv::{Db, Options};
/// let dir = tempfile::tempdir().unwrap();
/// let db = Db::open(dir.path(), Options::default()).unwrap();
/// db.put(b"hello", b"world").unwrap();
/// assert_eq!(db.get(b"hello").unwrap().as_deref(), Some(&b"world"[..]));
/// db.delete(b"hello").unwrap();
/// assert_eq!(db.get(b"hello").unwrap(), None);
/// ```
/// What `Db::expire_keys` found of a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyExpiry {
    /// Its time had passed: it is gone.
    Dropped,
    /// It expires then (Unix milliseconds).
    At(u64),
    /// It has no expiry time, or there is no such key.
    Never,
    /// Its time had passed, but a newer write of it or a snapshot keeps
    /// the entry for now: look again later.
    Busy,
}

pub struct Db {
    pub(crate) inner: Arc<Inner>,
    background: Option<JoinHandle<()>>,
    /// Writes index checkpoints (`Inner::checkpoint_loop`).
    checkpointer: Option<JoinHandle<()>>,
    /// Merges deferred index updates (`Options::deferred_index_updates`).
    merger: Option<JoinHandle<()>>,
}

pub(crate) struct CheckpointState {
    /// The full checkpoint the chain starts from (0: none), the deltas
    /// after it (generations base + 1 ...) and their bytes.
    base_generation: u64,
    deltas: u32,
    delta_bytes: u64,
    /// Where the newest checkpoint starts replay (`None`: no checkpoint
    /// yet): a delta covers the log from here.
    replay_from: Option<(SegmentId, usize)>,
    /// `LogWriter::appended_bytes` and `appended_entries` when the last
    /// checkpoint started.
    appended_at_last: u64,
    entries_at_last: u64,
    /// The log tail the last open replayed, until a checkpoint covers it:
    /// it counts toward the next checkpoint's bounds, or each crash before
    /// that checkpoint would leave the next open more to replay.
    replayed_bytes: u64,
    replayed_entries: u64,
    /// Keys and file bytes of the last full checkpoint: the next one waits
    /// for a share of them (`CHECKPOINT_GROWTH`).
    last_keys: u64,
    last_bytes: u64,
    /// Segments emptied by GC; their files go once a checkpoint that no
    /// longer references them is durable.
    pub(crate) pending_free: Vec<Arc<Segment>>,
    /// Some of them were emptied while the log was a cache: eviction drops
    /// entries from the index with no record in the log, so a delta
    /// checkpoint (the log since the last one) leaves the full one's
    /// references to them, and only a full checkpoint may free them.
    pub(crate) full_to_free: bool,
}

pub(crate) struct Inner {
    pub(crate) dir: PathBuf,
    pub(crate) options: Options,
    pub(crate) segments: SegmentSet,
    /// Segments freed by GC, reused by the log writer (`Segment::recycle`).
    pub(crate) recycler: Arc<Recycler>,
    pub(crate) index: Index,
    pub(crate) committer: Committer,
    pub(crate) counters: Counters,
    pub(crate) checkpoints: Mutex<CheckpointState>,
    /// The segment GC is collecting; its lock makes one collector at a
    /// time (see `gc.rs`).
    pub(crate) gc: Mutex<Option<crate::gc::Collecting>>,
    /// Set while GC is so far behind that writers help it (see `gc.rs`).
    pub(crate) gc_behind: AtomicBool,
    /// Segments GC found corrupt and no longer tries to collect.
    pub(crate) gc_refused: Mutex<Vec<SegmentId>>,
    /// Cache mode (`evict.rs`): the log's capacity (0: off); set while
    /// the log is over it, so writers evict first; bytes copied by the
    /// evictions in a row that freed little; eviction waits until
    /// `LogWriter::appended_bytes` passes `evict_paused_until`.
    pub(crate) cache_capacity: AtomicU64,
    /// The SSD tier's capacity (`Options::ssd_tier`; 0: none, or no bound).
    pub(crate) ssd_tier_capacity: AtomicU64,
    pub(crate) cache_over: AtomicBool,
    pub(crate) evict_stuck_bytes: AtomicU64,
    pub(crate) evict_paused_until: AtomicU64,
    /// LFU counters (`Options::lfu`; `None`: cache mode evicts by CLOCK),
    /// and whether there are any, which reads and writes look at first.
    pub(crate) lfu: arc_swap::ArcSwapOption<Frequencies>,
    pub(crate) lfu_on: AtomicBool,
    /// Told of each noted batch as it commits (`Db::set_commit_observer`).
    observer: arc_swap::ArcSwapOption<CommitObserver>,
    poisoned: OnceLock<String>,
    report: RecoveryReport,
    shutdown: Mutex<bool>,
    shutdown_signal: Condvar,
    _lock: File,
}

/// A value read without copying: it borrows the log mapping and keeps its
/// segment alive while held.
pub struct PinnedValue {
    segment: Arc<Segment>,
    offset: usize,
    len: usize,
    expiry_ms: Option<u64>,
}

impl PinnedValue {
    /// Expiry time in ms since the Unix epoch, if the key has a TTL.
    pub fn expiry_ms(&self) -> Option<u64> {
        self.expiry_ms
    }
}

impl Deref for PinnedValue {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        &self.segment.region.as_slice()[self.offset..self.offset + self.len]
    }
}

/// A range's bounds as byte slices, as the index takes them.
fn byte_bounds<'a, K: AsRef<[u8]> + 'a, R: RangeBounds<K>>(range: &'a R) -> (Bound<&'a [u8]>, Bound<&'a [u8]>) {
    (range.start_bound().map(K::as_ref), range.end_bound().map(K::as_ref))
}

impl Db {
    /// Opens (or creates) the database in directory `path`, recovering
    /// every acknowledged write. See docs/recovery.md for what it checks.
    pub fn open(path: impl AsRef<Path>, options: Options) -> Result<Db> {
        options.validate()?;
        let dir = path.as_ref().to_path_buf();
        if !dir.exists() {
            if !options.create_if_missing {
                return Err(Error::NotFound { path: dir });
            }
            std::fs::create_dir_all(&dir).map_err(Error::io(&dir, "create_dir"))?;
        }
        let lock_path = dir.join("LOCK");
        let lock = File::create(&lock_path).map_err(Error::io(&lock_path, "create"))?;
        if lock.try_lock().is_err() {
            return Err(Error::Locked { path: dir });
        }
        crate::tier::bind(&dir, options.ssd_tier.as_ref())?;
        let manifest = Manifest::load(&dir)?;
        // The checkpoint loads on another core while the log tail replays.
        let (loaded, replayed) = std::thread::scope(|scope| {
            let dir = &dir;
            let loading = manifest.map(|m| scope.spawn(move || checkpoint::load(dir, &m)));
            let start = manifest.map(|m| Start {
                segment: m.replay_segment,
                offset: m.replay_offset as usize,
                checkpoint_keys_hint: checkpoint::keys_hint(dir, m.checkpoint_generation),
            });
            let replayed = recovery::replay(dir, &options, start);
            let loaded = loading.map(|loading| loading.join().expect("the checkpoint loader does not panic"));
            (loaded.transpose(), replayed)
        });
        let recovered = recovery::finish(&dir, loaded?, replayed?)?;
        remove_stale_files(&dir, manifest.as_ref())?;
        let (base_bytes, delta_bytes) = manifest.map_or((0, 0), |m| checkpoint::chain_bytes(&dir, &m));
        let segments = SegmentSet::default();
        let (active, end) = match recovered.segments.last() {
            Some(last) => (last.clone(), recovered.end),
            None => {
                let first = Arc::new(Segment::create(
                    &dir,
                    options.first_segment_id,
                    options.segment_size_bytes,
                    options.durability,
                    scaledkv_pmem::NewBlocks::Written,
                )?);
                (first, SEGMENT_HEADER_BYTES)
            }
        };
        for segment in recovered.segments.iter().chain(std::iter::once(&active)) {
            segments.insert(segment.clone());
        }
        let offset = if aligns_groups(&active) { align_up(end, GROUP_ALIGN_BYTES) } else { end };
        let recycler = Arc::new(Recycler::default());
        let log = LogWriter::new(
            dir.clone(),
            &options,
            active,
            offset.min(options.segment_size_bytes),
            recovered.last_seq,
            recycler.clone(),
        );
        let report = &recovered.report;
        if !report.skipped.is_empty() || report.truncated.is_some() || report.restored.is_some() {
            tracing::warn!(dir = %dir.display(), report = ?recovered.report, "recovery repaired the log");
        }
        let lfu = options.lfu.map(|lfu| Arc::new(Frequencies::new(lfu, recovered.map.len())));
        let inner = Arc::new(Inner {
            index: Index::new(
                recovered.map,
                recovered.last_seq,
                recovered.spilled_key_bytes,
                options.point_index.then(|| Points::new(options.point_tag_bits)),
                if options.background_work { options.deferred_index_updates } else { 0 },
            ),
            segments,
            recycler,
            committer: Committer::new(log, options.gather_groups),
            counters: Counters::default(),
            checkpoints: Mutex::new(CheckpointState {
                base_generation: manifest.map_or(0, |m| m.checkpoint_generation),
                deltas: manifest.map_or(0, |m| m.delta_count),
                delta_bytes,
                replay_from: manifest.map(|m| (m.replay_segment, m.replay_offset as usize)),
                appended_at_last: 0,
                entries_at_last: 0,
                replayed_bytes: recovered.report.replayed_bytes,
                replayed_entries: recovered.report.replayed_frames,
                last_keys: recovered.report.checkpoint_keys,
                last_bytes: base_bytes,
                pending_free: Vec::new(),
                full_to_free: false,
            }),
            gc: Mutex::new(None),
            gc_behind: AtomicBool::new(false),
            gc_refused: Mutex::new(Vec::new()),
            cache_capacity: AtomicU64::new(options.cache_capacity_bytes),
            ssd_tier_capacity: AtomicU64::new(options.ssd_tier.as_ref().map_or(0, |tier| tier.capacity_bytes)),
            cache_over: AtomicBool::new(false),
            evict_stuck_bytes: AtomicU64::new(0),
            evict_paused_until: AtomicU64::new(0),
            lfu_on: AtomicBool::new(lfu.is_some()),
            lfu: arc_swap::ArcSwapOption::new(lfu),
            observer: arc_swap::ArcSwapOption::empty(),
            poisoned: OnceLock::new(),
            report: recovered.report,
            shutdown: Mutex::new(false),
            shutdown_signal: Condvar::new(),
            dir,
            options,
            _lock: lock,
        });
        if !inner.options.background_work {
            while !inner.index.fill_points(usize::MAX) {}
        }
        let background = inner.options.background_work.then(|| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("scaledkv-bg".into())
                .spawn(move || {
                    // Nice 5 even with `background_idle`: GC must keep up
                    // under sustained overwrites on busy cores.
                    crate::background::lower_this_thread(false);
                    inner.background_loop()
                })
                .expect("spawn the background thread")
        });
        // Not lowered: at nice 5 under sustained overwrites (writer and
        // merger on both cores) it got ~11% of a core, went 9 s without a
        // checkpoint and left 28.7M frames (5-6 s) to replay after SIGKILL.
        let checkpointer = inner.options.background_work.then(|| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("scaledkv-ckpt".into())
                .spawn(move || inner.checkpoint_loop())
                .expect("spawn the checkpoint thread")
        });
        // Not at nice 5 like the background thread: writers wait for it
        // once it falls behind. With `background_idle` it runs on idle
        // cores until someone waits for it (`IdleUntilNeeded`).
        let merger = inner.index.defers_updates().then(|| {
            let inner = inner.clone();
            std::thread::Builder::new()
                .name("scaledkv-merge".into())
                .spawn(move || inner.index.run_merger(&inner.segments, inner.options.background_idle))
                .expect("spawn the index merger thread")
        });
        Ok(Db { inner, background, checkpointer, merger })
    }

    pub fn put(&self, key: &[u8], value: &[u8]) -> Result<()> {
        self.write_one(&Entry { kind: EntryKind::Put, key, value, expiry_ms: None })
    }

    /// Puts a key that disappears after `ttl` (rounded to milliseconds).
    pub fn put_with_ttl(&self, key: &[u8], value: &[u8], ttl: Duration) -> Result<()> {
        let expiry_ms = Some(now_ms().saturating_add(ttl.as_millis() as u64));
        self.write_one(&Entry { kind: EntryKind::Put, key, value, expiry_ms })
    }

    pub fn delete(&self, key: &[u8]) -> Result<()> {
        self.write_one(&Entry { kind: EntryKind::Delete, key, value: b"", expiry_ms: None })
    }

    /// A batch of one entry: alone when the log is free, written from the
    /// caller's bytes (`Inner::commit_entry_alone`), else queued as any
    /// batch. Going alone skips the request: its body's allocation and
    /// copy, the `Arc`, the decode for the index. One thread on tmpfs,
    /// interleaved pairs: durable 1 KiB puts 1.19M -> 1.27M/s (6 pairs),
    /// 256-byte puts +17-23%, `buffered` fillseq of 256-byte values
    /// +25-37% (BENCHMARKS.md, fifty-fourth session).
    fn write_one(&self, entry: &Entry<'_>) -> Result<()> {
        if let Some(error) = crate::batch::check_sizes(entry.key.len(), entry.value.len()) {
            return Err(error);
        }
        let entry_len = crate::log::record::entry_len(entry.key.len(), entry.value.len(), entry.expiry_ms.is_some());
        self.check_batch_bytes(entry_len)?;
        self.help_background_work();
        if let Some(result) = self.inner.commit_entry_alone(entry) {
            return result;
        }
        let mut batch = WriteBatch::with_capacity(entry_len);
        match entry.kind {
            EntryKind::Put => batch.put_parts(entry.key, &[entry.value], entry.expiry_ms),
            EntryKind::Delete => batch.delete(entry.key),
        }
        self.inner.commit(Request::new(batch.body, batch.count, None))
    }

    /// Applies `batch` atomically. Returns once it is durable as the
    /// database's `Durability` promises and visible to readers.
    pub fn write(&self, batch: WriteBatch) -> Result<()> {
        match self.request(batch)? {
            Some(request) => self.inner.commit(request),
            None => Ok(()),
        }
    }

    /// Like `write`, for async callers: the batch is queued (and possibly
    /// written, when no group is in flight) before this returns, and the
    /// future completes once it is durable and visible. Nothing blocks
    /// waiting for another writer's group, so many tasks on a few threads
    /// share each persist.
    pub fn write_async(&self, batch: WriteBatch) -> WriteFuture {
        let done = self.enqueue_write(batch);
        self.commit_queued();
        done
    }

    /// Queues `batch` without writing it: the future completes once some
    /// caller of `commit_queued` (or any writer) has made it durable. An
    /// event loop queues the writes of every ready client, then commits
    /// them as one group; the caller must make sure `commit_queued` runs.
    pub fn enqueue_write(&self, batch: WriteBatch) -> WriteFuture {
        match self.request(batch) {
            Ok(Some(request)) => {
                self.inner.committer.enqueue(request.clone());
                WriteFuture { request: Some(request), early: None }
            }
            Ok(None) => WriteFuture { request: None, early: None },
            Err(error) => WriteFuture { request: None, early: Some(error) },
        }
    }

    /// A future that completes once every write queued before it is
    /// durable and visible (or fails as they did): a caller that has read
    /// another's queued writes and writes nothing itself waits on it
    /// before it tells anyone what it read. Run `commit_queued` after it,
    /// as after `enqueue_write`.
    pub fn enqueue_barrier(&self) -> WriteFuture {
        let request = Request::new(Vec::new(), 0, None);
        self.inner.committer.enqueue(request.clone());
        WriteFuture { request: Some(request), early: None }
    }

    /// Whether GC is so far behind that every write first collects a piece
    /// of a segment (tens of milliseconds; see `gc.rs`): an event loop can
    /// move such a write off the thread that serves its other clients.
    pub fn gc_is_behind(&self) -> bool {
        self.inner.gc_behind.load(Ordering::Relaxed)
    }

    /// Whether each group commit waits for a device (fdatasync on a disk's
    /// file system). Then gathering more writers into one group saves a
    /// device flush per writer; on tmpfs, persistent memory or in
    /// `buffered` mode a group costs little more than its bytes, so a
    /// caller need not delay a write to gather others.
    pub fn persist_waits_for_device(&self) -> bool {
        self.inner.with_log(|log| log.persist_waits_for_device())
    }

    /// Writes every queued batch now (one group), unless a group is already
    /// in flight, whose leader then takes them.
    pub fn commit_queued(&self) {
        self.inner.drain();
    }

    /// The largest batch `write` takes (`MAX_BATCH_BYTES`, less for
    /// segments too small to hold that).
    pub fn max_batch_bytes(&self) -> usize {
        self.inner.options.max_batch_bytes()
    }

    fn request(&self, mut batch: WriteBatch) -> Result<Option<Arc<Request>>> {
        if let Some(error) = batch.invalid.take() {
            return Err(error);
        }
        if batch.count == 0 {
            return Ok(None);
        }
        self.check_batch_bytes(batch.body.len())?;
        self.help_background_work();
        Ok(Some(Request::noted(batch.body, batch.count, batch.note)))
    }

    fn check_batch_bytes(&self, bytes: usize) -> Result<()> {
        let max = self.inner.options.max_batch_bytes();
        if bytes > max {
            return Err(Error::BatchTooLarge { bytes, max });
        }
        Ok(())
    }

    /// A step of GC or eviction first, when either has fallen behind.
    fn help_background_work(&self) {
        if self.inner.gc_behind.load(Ordering::Relaxed) {
            self.inner.help_collect_garbage();
        }
        if self.inner.cache_over.load(Ordering::Relaxed) {
            self.inner.help_evict();
        }
    }

    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        if let Some((seq, table)) = self.view() {
            return self.inner.read(key, Some(seq), Some(&table), |_, _, entry| entry.value.to_vec());
        }
        self.inner.read(key, None, None, |_, _, entry| entry.value.to_vec())
    }

    /// The snapshot this thread reads through (`Snapshot::view`), if any.
    fn view(&self) -> Option<(u64, SegmentTable)> {
        if !VIEWING.get() {
            return None;
        }
        VIEW.with_borrow(|view| {
            view.as_ref()
                .filter(|view| Arc::as_ptr(&self.inner) as usize == view.db)
                .map(|view| (view.seq, view.table.clone()))
        })
    }

    /// Starts loading `key`'s newest entry into the CPU caches and returns
    /// at once. A hint only: it reads no value and never fails. For
    /// several keys, `prefetch_all`.
    pub fn prefetch(&self, key: &[u8]) {
        let Some(loc) = self.inner.index.get(key, None) else { return };
        // The first lines only: they hold the miss that costs (and the
        // page walk). Every line of a pipeline's 1 KiB entries at once
        // filled the CPU's line-fill buffers and stalled in the prefetch.
        self.inner.segments.with(loc.seg, |segment| {
            if let Ok(bytes) = segment.region.read(loc.off as usize, (loc.len as usize).min(PREFETCH_BYTES)) {
                crate::iter::prefetch_bytes(bytes);
            }
        });
    }

    /// Starts loading the newest entries of `keys` into the CPU caches: a
    /// caller about to read several keys (a pipeline of GETs) asks for
    /// them all first, so that their cache misses overlap instead of
    /// following each other. First the point table's lines of every key
    /// (with the point index on), then each entry: finding an entry's
    /// location takes the first miss. A hint only, as `prefetch`.
    pub fn prefetch_all<'k, I>(&self, keys: I)
    where
        I: IntoIterator<Item = &'k [u8]>,
        I::IntoIter: Clone,
    {
        let keys = keys.into_iter();
        self.inner.index.prefetch_points(keys.clone());
        keys.for_each(|key| self.prefetch(key));
    }

    /// Like `get`, without copying the value.
    pub fn get_pinned(&self, key: &[u8]) -> Result<Option<PinnedValue>> {
        if let Some((seq, table)) = self.view() {
            return self.inner.read(key, Some(seq), Some(&table), pin);
        }
        self.inner.read(key, None, None, pin)
    }

    /// Like `get_pinned`, but not counted as an access: no second chance
    /// in cache mode, no LFU count (Redis's `LOOKUP_NOTOUCH`, for the
    /// commands that look at a key without using it: TYPE, EXISTS, TTL,
    /// OBJECT).
    pub fn peek_pinned(&self, key: &[u8]) -> Result<Option<PinnedValue>> {
        if let Some((seq, table)) = self.view() {
            return self.inner.read_as(key, Some(seq), Some(&table), false, pin);
        }
        self.inner.read_as(key, None, None, false, pin)
    }

    /// Forward iterator over `range`, as of the moment it is created.
    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter<'_> {
        Iter::new(&self.inner, self.view(), range, false)
    }

    /// Like `range`, in descending key order.
    pub fn range_rev<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter<'_> {
        Iter::new(&self.inner, self.view(), range, true)
    }

    /// How many keys `range` holds now, counted in the index alone: no
    /// value is read, so an entry that expired but is not yet removed
    /// counts. Exact for keys that never expire, and far cheaper than
    /// iterating (an iterator takes a snapshot, which first merges the
    /// pending index updates, and reads every entry from the log).
    pub fn count_keys<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> usize {
        if self.view().is_some() {
            return crate::walk::count(|visit| self.keys_in(range, false, visit));
        }
        let (lower, upper) = byte_bounds(&range);
        self.inner.index.count_newest_in(lower, upper)
    }

    /// The `n`th key (from 0) of `range` now, as `count_keys` counts them.
    pub fn nth_key<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R, n: usize) -> Option<Vec<u8>> {
        self.keys_at_ranks(range, &[n]).pop()
    }

    /// The keys of `range` now at `ranks` (ascending, distinct, from 0),
    /// as `count_keys` counts them, found in one pass: random picks from a
    /// big collection. The keys found stop where the range ends, or at a
    /// rank not above the one before it.
    pub fn keys_at_ranks<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R, ranks: &[usize]) -> Vec<Vec<u8>> {
        if self.view().is_some() {
            return crate::walk::at_ranks(ranks, |visit| self.keys_in(range, false, visit));
        }
        let (lower, upper) = byte_bounds(&range);
        self.inner.index.newest_at_ranks(lower, upper, ranks)
    }

    /// The last key of `range` now, as `count_keys` counts them.
    pub fn last_key<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Option<Vec<u8>> {
        crate::walk::nth(0, |visit| self.keys_in(range, true, visit))
    }

    /// Visits the keys of `range` now, in order (or in reverse), from the
    /// index alone, as `count_keys` counts them, until `visit` returns
    /// false. The index is held for the walk: keep `visit` short.
    pub fn visit_keys<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
        reverse: bool,
        visit: impl FnMut(&[u8]) -> bool,
    ) {
        self.keys_in(range, reverse, visit)
    }

    fn keys_in<K: AsRef<[u8]>, R: RangeBounds<K>>(
        &self,
        range: R,
        reverse: bool,
        mut visit: impl FnMut(&[u8]) -> bool,
    ) {
        let (lower, upper) = byte_bounds(&range);
        let Some((seq, _)) = self.view() else {
            return self.inner.index.newest_keys_in(lower, upper, reverse, visit);
        };
        if !reverse {
            return self.inner.index.visit_at(lower, upper, seq, visit);
        }
        // The index walks a snapshot forward only: a view's reverse walk
        // (rare: the last key of a range) collects the keys first.
        let mut keys = Vec::new();
        self.inner.index.visit_at(lower, upper, seq, |key| {
            keys.push(key.to_vec());
            true
        });
        for key in keys.iter().rev() {
            if !visit(key) {
                break;
            }
        }
    }

    /// Every key, ascending.
    pub fn iter(&self) -> Iter<'_> {
        self.range::<&[u8], _>(..)
    }

    /// A consistent read view: it sees exactly the writes acknowledged
    /// before it was taken (inside `Snapshot::view`, the view's moment).
    pub fn snapshot(&self) -> Snapshot<'_> {
        if let Some((seq, table)) = self.view() {
            self.inner.index.register_snapshot_at(seq);
            return Snapshot { db: self, seq, table };
        }
        let seq = self.inner.index.register_snapshot(&self.inner.segments);
        Snapshot { db: self, seq, table: self.inner.segments.pin() }
    }

    /// Makes every write durable whatever the mode (fsync of the log in
    /// `buffered` mode) and writes an index checkpoint.
    pub fn flush(&self) -> Result<()> {
        self.inner.segments.sync_files()?;
        self.inner.checkpoint()
    }

    /// Runs one garbage-collection pass now (first the segments left far
    /// behind the active one, then those mostly dead); returns segments
    /// freed.
    pub fn collect_garbage(&self) -> Result<u64> {
        let pass = crate::gc::SEGMENTS_PER_PASS;
        let far_behind =
            if self.inner.has_far_behind() { self.inner.collect(crate::gc::Goal::FarBehind, pass)? } else { 0 };
        Ok(far_behind + self.inner.collect_garbage(None, pass)?)
    }

    /// Rebuilds the in-memory index with full B-tree nodes, as the
    /// background thread does on its own once writes pause for ~100 ms.
    /// After random inserts the tree holds about two thirds of the memory
    /// it did (BENCHMARKS.md). Writes may go on meanwhile; a part of the
    /// index one of them changes during its rebuild is left for later, and
    /// the result tells whether every part was rebuilt.
    pub fn compact_index(&self) -> bool {
        let index = &self.inner.index;
        // Each failed round loses one piece to a concurrent write.
        (0..8).any(|_| {
            index.settle(&self.inner.segments);
            index.compact(usize::MAX, Rebuild::AnyChanged)
        })
    }

    pub fn stats(&self) -> Stats {
        self.inner.stats()
    }

    /// Cache mode: changes the log's capacity (0: off, nothing evicted;
    /// see `Options::cache_capacity_bytes`). Lowering it evicts at once.
    pub fn set_cache_capacity(&self, bytes: u64) -> Result<()> {
        self.inner.set_cache_capacity(bytes)?;
        self.inner.evict(1.0, usize::MAX).map(|_| ())
    }

    /// Sets (or with None removes) the function told of every batch that
    /// carries a note (`WriteBatch::set_note`): its sequence number and
    /// note, in commit order, once it is durable and before any reader
    /// can see it, so a snapshot at sequence number `s` (`Snapshot::seq`)
    /// reads every batch the observer was told of up to `s`, and no other.
    /// The note is the observer's (no copy is made while the log is held:
    /// it must be quick, and must not write to the database).
    pub fn set_commit_observer(&self, observer: Option<Observer>) {
        self.inner.observer.store(observer.map(|f| Arc::new(CommitObserver(f))));
    }

    /// Counts accesses with Redis's LFU counters, by which cache mode then
    /// evicts (`Some`), or not (`None`: cache mode evicts by one access
    /// bit); see `Options::lfu`. Turning counters on starts them from
    /// nothing; changing the settings of counters already on keeps them.
    pub fn set_lfu(&self, lfu: Option<Lfu>) {
        match (lfu, &*self.inner.lfu.load()) {
            (Some(settings), Some(counters)) => counters.set_settings(settings),
            (Some(settings), None) => {
                let counters = Frequencies::new(settings, self.inner.index.approximate_len());
                self.inner.lfu.store(Some(Arc::new(counters)));
            }
            (None, _) => self.inner.lfu.store(None),
        }
        self.inner.lfu_on.store(lfu.is_some(), Ordering::Relaxed);
    }

    /// The LFU settings in force (`None`: CLOCK).
    pub fn lfu(&self) -> Option<Lfu> {
        self.inner.lfu.load().as_ref().map(|counters| counters.settings())
    }

    /// `key`'s LFU counter (Redis's `OBJECT FREQ`), whether or not the key
    /// is there; `None` without LFU counters.
    pub fn access_frequency(&self, key: &[u8]) -> Option<u8> {
        self.inner.lfu.load().as_ref().map(|counters| counters.get(key))
    }

    /// Counts an access of `key` by the LFU counters, if they are on: for
    /// a write that does not read its key first, as Redis's writes look
    /// theirs up (reads count themselves). Call it before the write: a key
    /// below the initial counter is left for the write to raise.
    pub fn touch(&self, key: &[u8]) {
        // Every blind SET asks: a relaxed load while the counters are off.
        if self.inner.lfu_on.load(Ordering::Relaxed) {
            if let Some(counters) = &*self.inner.lfu.load() {
                counters.lookup_before_write(key);
            }
        }
    }

    /// Raises `key`'s LFU counter to `counter` if they are on and it is
    /// lower (Redis's RESTORE ... FREQ; a renamed key keeps its counter).
    pub fn raise_access_frequency(&self, key: &[u8], counter: u8) {
        if let Some(counters) = &*self.inner.lfu.load() {
            counters.raise(key, counter);
        }
    }

    /// Bytes the log holds (entries live and dead, headers included) but
    /// for its SSD tier: what the cache capacity bounds. Cheaper than
    /// `stats`, which merges the index's pending updates first.
    pub fn log_bytes(&self) -> u64 {
        self.inner.log_bytes()
    }

    /// Bytes of the log in its SSD tier (`Options::ssd_tier`).
    pub fn ssd_tier_bytes(&self) -> u64 {
        self.inner.ssd_tier_bytes()
    }

    /// Changes the SSD tier's capacity (`SsdTier::capacity_bytes`; 0: no
    /// bound). Lowering it evicts at once; refused without an SSD tier.
    pub fn set_ssd_tier_capacity(&self, bytes: u64) -> Result<()> {
        self.inner.set_ssd_tier_capacity(bytes)?;
        self.inner.evict(1.0, usize::MAX).map(|_| ())
    }

    /// What recovery found when this database was opened.
    pub fn recovery_report(&self) -> &RecoveryReport {
        &self.inner.report
    }

    /// Examines up to `max_keys` keys after `after` (from the start when
    /// `None`) and drops those whose expiry time has passed; returns where
    /// to continue (`None`: the end was reached) and how many it dropped,
    /// each of which it hands to `dropped_key` (for the server's `expired`
    /// notifications). Expired keys are invisible anyway; this frees their index memory
    /// and log space sooner, as Redis's active expiry does. Nothing is
    /// written: an expired entry stays expired after a crash. Keys written
    /// in the last ~100 ms may be deferred index updates, which it skips.
    pub fn purge_expired(
        &self,
        after: Option<&[u8]>,
        max_keys: usize,
        mut dropped_key: impl FnMut(&[u8]),
    ) -> (Option<Vec<u8>>, usize) {
        self.purge_expired_noting(after, max_keys, |key, _| dropped_key(key), |_, _| {})
    }

    /// As `purge_expired`, handing each dropped key its expiry time too,
    /// and each key examined that expires later, with its time, to
    /// `volatile` (a server's index of expiring keys starts from a pass of
    /// this).
    pub fn purge_expired_noting(
        &self,
        after: Option<&[u8]>,
        max_keys: usize,
        mut dropped_key: impl FnMut(&[u8], u64),
        mut volatile: impl FnMut(&[u8], u64),
    ) -> (Option<Vec<u8>>, usize) {
        let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
        let mut found = KeyChunk::default();
        let inner = &self.inner;
        let examined = inner.index.range_chunk(lower, Bound::Unbounded, false, u64::MAX, max_keys, &mut found);
        let now = now_ms();
        let mut dropped = 0;
        for (key, loc) in found.iter() {
            match self.expiry_at(loc) {
                Some(at) if at <= now && inner.index.remove_if_at(key, loc, &inner.segments) => {
                    dropped_key(key, at);
                    dropped += 1;
                }
                Some(at) if at > now => volatile(key, at),
                // No expiry, or expired but kept for now (a newer write).
                _ => {}
            }
        }
        (examined.then(|| found.last_examined().to_vec()), dropped)
    }

    /// The expiry time of the entry at `loc`, if it has one.
    fn expiry_at(&self, loc: Loc) -> Option<u64> {
        let expiry = self.inner.segments.with(loc.seg, |segment| {
            let bytes = segment.region.read(loc.off as usize, loc.len as usize).ok()?;
            decode_entry(bytes, false).ok()?.expiry_ms
        });
        expiry.flatten()
    }

    /// For each of `keys`: drops it if its expiry time has passed (as
    /// `purge_expired` would find it), and tells `seen` what it found:
    /// dropped, an expiry still to come, no expiry (or no key), or busy (an
    /// expired key that a newer write or a snapshot keeps for now).
    pub fn expire_keys<K: AsRef<[u8]>>(&self, keys: &[K], mut seen: impl FnMut(&[u8], KeyExpiry)) {
        let inner = &self.inner;
        let now = now_ms();
        let mut expired: Vec<(&[u8], Loc)> = Vec::new();
        for key in keys.iter().map(AsRef::as_ref) {
            let Some(loc) = inner.index.get(key, None) else {
                seen(key, KeyExpiry::Never);
                continue;
            };
            match self.expiry_at(loc) {
                Some(at) if at <= now => expired.push((key, loc)),
                Some(at) => seen(key, KeyExpiry::At(at)),
                None => seen(key, KeyExpiry::Never),
            }
        }
        let mut removed = std::collections::HashSet::new();
        inner.index.remove_all_if_at(&expired, &inner.segments, |key, _| {
            removed.insert(key.to_vec());
        });
        for (key, _) in expired {
            seen(key, if removed.contains(key) { KeyExpiry::Dropped } else { KeyExpiry::Busy });
        }
    }

    /// Number of keys, without walking the index (deferred index updates
    /// are merged first). An expired key counts until a read,
    /// `purge_expired` or GC drops it (as in Redis's DBSIZE).
    pub fn len(&self) -> usize {
        self.inner.index.len(&self.inner.segments)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn path(&self) -> &Path {
        &self.inner.dir
    }
}

impl Drop for Db {
    fn drop(&mut self) {
        *self.inner.shutdown.lock() = true;
        self.inner.shutdown_signal.notify_all();
        if let Some(background) = self.background.take() {
            let _ = background.join();
        }
        if let Some(checkpointer) = self.checkpointer.take() {
            let _ = checkpointer.join();
        }
        self.inner.index.stop_merger();
        if let Some(merger) = self.merger.take() {
            let _ = merger.join();
        }
        if self.inner.poisoned.get().is_some() {
            return;
        }
        let result = self.inner.segments.sync_files();
        let result = result.and_then(|()| {
            let appended = self.inner.with_log(|log| log.appended_bytes);
            let due = {
                let state = self.inner.checkpoints.lock();
                appended > state.appended_at_last || state.replayed_entries > 0 || !state.pending_free.is_empty()
            };
            if due {
                self.inner.checkpoint()
            } else {
                Ok(())
            }
        });
        if let Err(error) = result {
            tracing::error!(dir = %self.inner.dir.display(), %error, "clean close failed; the next open replays the log");
        }
        checkpoint::remove_spare(&self.inner.dir);
    }
}

/// What `Db::set_commit_observer` takes: called with a batch's sequence
/// number and note.
pub type Observer = Arc<dyn Fn(u64, Vec<u8>) + Send + Sync>;

/// The function `Db::set_commit_observer` set.
struct CommitObserver(Observer);

/// A consistent view of the database at one sequence number.
pub struct Snapshot<'a> {
    db: &'a Db,
    seq: u64,
    table: SegmentTable,
}

impl<'a> Snapshot<'a> {
    pub fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>> {
        self.db.inner.read(key, Some(self.seq), Some(&self.table), |_, _, e| e.value.to_vec())
    }

    pub fn range<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter<'a> {
        Iter::new(&self.db.inner, Some((self.seq, self.table.clone())), range, false)
    }

    pub fn range_rev<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> Iter<'a> {
        Iter::new(&self.db.inner, Some((self.seq, self.table.clone())), range, true)
    }

    /// Visits the keys of `range` in this snapshot, in order, from the
    /// index alone (no value is read, so an entry that expired counts),
    /// until `visit` returns false: counting a range without a log read
    /// per entry. The index is held for the walk: keep `visit` short.
    pub fn visit_keys<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R, visit: impl FnMut(&[u8]) -> bool) {
        let (lower, upper) = byte_bounds(&range);
        self.db.inner.index.visit_at(lower, upper, self.seq, visit);
    }

    /// How many keys `range` holds in this snapshot, as `visit_keys` sees them.
    pub fn count_keys<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R) -> usize {
        crate::walk::count(|visit| self.visit_keys(range, visit))
    }

    /// The `n`th key (from 0) of `range` in this snapshot.
    pub fn nth_key<K: AsRef<[u8]>, R: RangeBounds<K>>(&self, range: R, n: usize) -> Option<Vec<u8>> {
        crate::walk::nth(n, |visit| self.visit_keys(range, visit))
    }

    pub fn seq(&self) -> u64 {
        self.seq
    }

    /// Runs `f` with this thread's reads of the database (`get`,
    /// `get_pinned`, `peek_pinned`, `range`, `range_rev`, `visit_keys`,
    /// `count_keys`, `nth_key`, `keys_at_ranks`, `last_key`, and the
    /// snapshots `snapshot` takes) made as of this snapshot: code written
    /// against `Db` (the server's readers of a hash's fields, a list's
    /// chunks) reads a point in time unchanged, as an RDB export must.
    /// Writes and other threads are not affected. Views nest; the
    /// innermost wins. An iterator made inside must not outlive it.
    pub fn view<R>(&self, f: impl FnOnce() -> R) -> R {
        let view = View { db: Arc::as_ptr(&self.db.inner) as usize, seq: self.seq, table: self.table.clone() };
        let outer = VIEW.with_borrow_mut(|slot| slot.replace(view));
        VIEWING.set(true);
        // Restored however `f` ends, a panic included.
        struct Restore(Option<View>);
        impl Drop for Restore {
            fn drop(&mut self) {
                let outer = self.0.take();
                VIEWING.set(outer.is_some());
                VIEW.with_borrow_mut(|slot| *slot = outer);
            }
        }
        let _restore = Restore(outer);
        f()
    }
}

/// A snapshot a thread reads through (`Snapshot::view`).
struct View {
    /// The engine's `Inner`, by address: a view of one database leaves
    /// another one's reads alone.
    db: usize,
    seq: u64,
    table: SegmentTable,
}

thread_local! {
    static VIEW: std::cell::RefCell<Option<View>> = const { std::cell::RefCell::new(None) };
    /// Whether `VIEW` holds one: the only check a read makes when not.
    static VIEWING: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

impl Drop for Snapshot<'_> {
    fn drop(&mut self) {
        self.db.inner.release_snapshot(self.seq);
    }
}

pub(crate) fn pin(segment: &Arc<Segment>, loc: Loc, entry: &EntryView<'_>) -> PinnedValue {
    PinnedValue {
        segment: segment.clone(),
        offset: value_offset(loc, entry),
        len: entry.value.len(),
        expiry_ms: entry.expiry_ms,
    }
}

/// Where in its segment the value of the entry at `loc` starts.
pub(crate) fn value_offset(loc: Loc, entry: &EntryView<'_>) -> usize {
    loc.off as usize + entry.len - entry.value.len()
}

/// Deletes temporary files and checkpoints the manifest no longer names.
fn remove_stale_files(dir: &Path, manifest: Option<&Manifest>) -> Result<()> {
    let current = manifest.map(checkpoint::manifest_file_names).unwrap_or_default();
    for entry in std::fs::read_dir(dir).map_err(Error::io(dir, "read_dir"))? {
        let entry = entry.map_err(Error::io(dir, "read_dir"))?;
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        let stale_checkpoint = name.starts_with("index-") && !current.iter().any(|c| c == name);
        if name.ends_with(".tmp") || stale_checkpoint {
            std::fs::remove_file(entry.path()).map_err(Error::io(entry.path(), "remove"))?;
        }
    }
    Ok(())
}

impl Inner {
    pub(crate) fn commit(&self, request: Arc<Request>) -> Result<()> {
        self.committer.commit(request, &|log, group| self.lead(log, group))
    }

    fn drain(&self) {
        self.committer.drain(&|log, group| self.lead(log, group));
    }

    /// Runs `f` with the log writer, then leads whatever queued meanwhile.
    pub(crate) fn with_log<T>(&self, f: impl FnOnce(&mut LogWriter) -> T) -> T {
        let result = self.committer.with_log(f);
        self.drain();
        result
    }

    fn lead(&self, log: &mut LogWriter, group: &[Arc<Request>]) -> Result<()> {
        self.unless_poisoned(|| self.write_group(log, group))
    }

    /// Runs a leader's `write` unless an earlier one failed, and poisons
    /// the database if this one fails: after a failed write the log's
    /// state is unknown.
    fn unless_poisoned(&self, write: impl FnOnce() -> Result<()>) -> Result<()> {
        if let Some(reason) = self.poisoned.get() {
            return Err(Error::Poisoned(reason.clone()));
        }
        let result = write();
        if let Err(error) = &result {
            let _ = self.poisoned.set(error.to_string());
        }
        result
    }

    /// The leader's work: append every request, persist once, then publish
    /// to the index. Readers never see a write before it is durable.
    fn write_group(&self, log: &mut LogWriter, group: &[Arc<Request>]) -> Result<()> {
        let first_segment = log.active_id();
        let mut placed: Vec<(SegmentId, usize)> = Vec::with_capacity(group.len());
        let mut seq = log.last_seq;
        let mut flags = FLAG_GROUP_START;
        let mut user_bytes = 0u64;
        for request in group {
            match &request.relocations {
                // A barrier (`Db::barrier`) has nothing to write.
                None if request.count == 0 => continue,
                None => {
                    seq += 1;
                    let frame_len = (FRAME_HEADER_BYTES + request.body.len()) as u32;
                    let header = FrameHeader { flags, frame_len, count: request.count, seq };
                    placed.push(log.append(&header, &request.body, &self.segments)?);
                    user_bytes += request.body.len() as u64;
                }
                Some(relocations) => {
                    let mut at = 0;
                    for relocation in relocations {
                        let entry = decode_entry(&request.body[at..], false).expect("GC encodes valid entries");
                        let frame_len = (FRAME_HEADER_BYTES + entry.len) as u32;
                        let header =
                            FrameHeader { flags: flags | FLAG_RELOCATED, frame_len, count: 1, seq: relocation.seq };
                        placed.push(log.append(&header, &request.body[at..at + entry.len], &self.segments)?);
                        at += entry.len;
                        flags = 0;
                    }
                    self.counters.gc_bytes_written.fetch_add(request.body.len() as u64, Ordering::Relaxed);
                }
            }
            flags = 0;
        }
        log.finish_group()?;
        log.last_seq = seq;
        let user_requests = group.iter().filter(|r| r.relocations.is_none() && r.count > 0).count() as u64;
        self.count_group(log, user_bytes, user_requests);

        let mut updates = Vec::with_capacity(group.len());
        let mut placed = placed.into_iter();
        let mut frame_seq = seq - user_requests;
        for request in group {
            let mut at = 0;
            match &request.relocations {
                None if request.count == 0 => {}
                None => {
                    frame_seq += 1;
                    let (seg, frame_at) = placed.next().expect("one placement per frame");
                    for _ in 0..request.count {
                        let entry = decode_entry(&request.body[at..], false).expect("batches encode valid entries");
                        let off = (frame_at + FRAME_HEADER_BYTES + at) as u32;
                        updates.push(match entry.kind {
                            EntryKind::Put => Update::Put {
                                key: entry.key,
                                loc: Loc { seg: tag_of(seg), off, len: entry.len as u32 },
                                seq: frame_seq,
                            },
                            EntryKind::Delete => Update::Delete { key: entry.key, seq: frame_seq },
                        });
                        at += entry.len;
                    }
                }
                Some(relocations) => {
                    for relocation in relocations {
                        let (seg, frame_at) = placed.next().expect("one placement per frame");
                        let entry = decode_entry(&request.body[at..], false).expect("GC encodes valid entries");
                        let to = Loc {
                            seg: tag_of(seg),
                            off: (frame_at + FRAME_HEADER_BYTES) as u32,
                            len: entry.len as u32,
                        };
                        updates.push(Update::Relocate { key: entry.key, from: relocation.from, to });
                        at += entry.len;
                    }
                }
            }
        }
        self.observe(group, seq - user_requests);
        self.publish(log, updates.into_iter(), seq, first_segment);
        Ok(())
    }

    /// Hands the notes of `group` (persisted, not yet visible; its first
    /// client batch is `after + 1`) to the commit observer, in order.
    fn observe(&self, group: &[Arc<Request>], after: u64) {
        let observer = self.observer.load();
        let Some(observer) = observer.as_deref() else { return };
        let mut seq = after;
        for request in group.iter().filter(|r| r.relocations.is_none() && r.count > 0) {
            seq += 1;
            if let Some(note) = request.note.lock().take() {
                (observer.0)(seq, note);
            }
        }
    }

    /// Applies a persisted group's `updates` to the index, making them
    /// visible, and looks at the cache's size again if the group rolled
    /// to a new segment (`first_segment` was the active one before it).
    fn publish<'a>(
        &self,
        log: &LogWriter,
        updates: impl Iterator<Item = Update<'a>>,
        seq: u64,
        first_segment: SegmentId,
    ) {
        match self.lfu_on.load(Ordering::Relaxed).then(|| self.lfu.load_full()).flatten() {
            None => self.index.apply(updates, seq, &self.segments),
            Some(lfu) => {
                let counted = updates.inspect(|update| match update {
                    Update::Put { key, .. } => lfu.write(key),
                    Update::Relocate { key, .. } => lfu.copied(key),
                    Update::Delete { .. } => {}
                });
                self.index.apply(counted, seq, &self.segments)
            }
        }
        if log.active_id() != first_segment && self.cache_capacity() > 0 {
            self.refresh_cache_over();
        }
    }

    /// The counters of a group just persisted.
    fn count_group(&self, log: &LogWriter, user_bytes: u64, user_requests: u64) {
        self.counters.user_bytes_written.fetch_add(user_bytes, Ordering::Relaxed);
        self.counters.commit_groups.fetch_add(1, Ordering::Relaxed);
        self.counters.committed_requests.fetch_add(user_requests, Ordering::Relaxed);
        self.counters.log_bytes_written.store(log.appended_bytes, Ordering::Relaxed);
        self.counters.roll_waits.store(log.roll_waits, Ordering::Relaxed);
        self.counters.roll_wait_micros.store(log.roll_wait_micros, Ordering::Relaxed);
    }

    /// Commits one put or delete alone if the log is free, straight from
    /// the caller's key and value (`Committer::commit_alone`); None where
    /// it must queue as a request.
    fn commit_entry_alone(&self, entry: &Entry<'_>) -> Option<Result<()>> {
        self.committer.commit_alone(|log| self.unless_poisoned(|| self.write_entry(log, entry)), &|log, group| {
            self.lead(log, group)
        })
    }

    /// `write_group` for a group of one entry given by parts: the same
    /// frame, persist and index update, without the request's body.
    fn write_entry(&self, log: &mut LogWriter, entry: &Entry<'_>) -> Result<()> {
        let first_segment = log.active_id();
        let value = [entry.value];
        let header = EntryHeader::new(entry.kind, entry.key, &value, entry.expiry_ms);
        let seq = log.last_seq + 1;
        let frame_len = (FRAME_HEADER_BYTES + header.entry_len) as u32;
        let frame = FrameHeader { flags: FLAG_GROUP_START, frame_len, count: 1, seq };
        let (seg, frame_at) = log.append_parts(&frame, &[header.as_bytes(), entry.key, entry.value], &self.segments)?;
        log.finish_group()?;
        log.last_seq = seq;
        self.count_group(log, header.entry_len as u64, 1);
        let update = match entry.kind {
            EntryKind::Put => {
                let loc =
                    Loc { seg: tag_of(seg), off: (frame_at + FRAME_HEADER_BYTES) as u32, len: header.entry_len as u32 };
                Update::Put { key: entry.key, loc, seq }
            }
            EntryKind::Delete => Update::Delete { key: entry.key, seq },
        };
        self.publish(log, std::iter::once(update), seq, first_segment);
        Ok(())
    }

    pub(crate) fn release_snapshot(&self, seq: u64) {
        self.index.release_snapshot(seq, || self.segments.clear_retired());
    }

    /// Finds `key` as of `at_seq` and hands its live entry to `f`. Retries
    /// when GC freed the segment between the index lookup and the read.
    /// A newest read counts as an access (cache mode's second chance, LFU
    /// counters).
    pub(crate) fn read<T>(
        &self,
        key: &[u8],
        at_seq: Option<u64>,
        pinned: Option<&SegmentTable>,
        f: impl Fn(&Arc<Segment>, Loc, &EntryView<'_>) -> T,
    ) -> Result<Option<T>> {
        self.read_as(key, at_seq, pinned, at_seq.is_none(), f)
    }

    /// `read`, counted as an access if `touch`.
    pub(crate) fn read_as<T>(
        &self,
        key: &[u8],
        at_seq: Option<u64>,
        pinned: Option<&SegmentTable>,
        touch: bool,
        f: impl Fn(&Arc<Segment>, Loc, &EntryView<'_>) -> T,
    ) -> Result<Option<T>> {
        let Some(mut loc) = self.index.get(key, at_seq) else {
            return Ok(None);
        };
        // A read of a live entry, with its segment at hand.
        let f = |segment: &Arc<Segment>, loc: Loc, entry: &EntryView<'_>| {
            if touch {
                self.note_access(segment, loc, key);
            }
            f(segment, loc, entry)
        };
        // Snapshot reads come from the B-tree; newest reads may come from
        // the point table, whose location can hold another key that shares
        // the hash tag: then the B-tree decides.
        let mut exact = at_seq.is_some();
        for _ in 0..8 {
            if let Some(result) = self.read_at(key, loc, pinned, false, &f) {
                if result.is_err() && !exact {
                    exact = true;
                    match self.index.get_ordered(key, at_seq) {
                        None => return Ok(None),
                        Some(ordered) if ordered != loc => {
                            loc = ordered;
                            continue;
                        }
                        Some(_) => return result,
                    }
                }
                match result {
                    // Expired: drop it now (Redis's lazy expiry), so the key
                    // count and memory follow what readers see.
                    Ok(None) if at_seq.is_none() => _ = self.index.remove_if_at(key, loc, &self.segments),
                    _ => {}
                }
                return result;
            }
            match self.index.get(key, at_seq) {
                Some(now) => loc = now,
                None => return Ok(None),
            }
        }
        let path =
            self.segments.id_of(loc.seg).map_or_else(|| self.dir.clone(), |id| self.dir.join(segment_file_name(id)));
        Err(Error::Corruption {
            path,
            offset: loc.off as u64,
            reason: "the index points into a segment that no longer exists".into(),
        })
    }

    /// Reads the entry at `loc`; `None` if its segment is gone.
    /// `prefetched`: the caller already asked for the entry's cache lines
    /// (an iterator does, entries ahead).
    pub(crate) fn read_at<T>(
        &self,
        key: &[u8],
        loc: Loc,
        pinned: Option<&SegmentTable>,
        prefetched: bool,
        f: &impl Fn(&Arc<Segment>, Loc, &EntryView<'_>) -> T,
    ) -> Option<Result<Option<T>>> {
        let decode = |segment: &Arc<Segment>| -> Result<Option<T>> {
            let entry = self.decode_at(segment, loc, key, prefetched)?;
            Ok(entry.map(|entry| f(segment, loc, &entry)))
        };
        // A pinned table (snapshots, iterators) is a plain table: looking
        // there first saves an atomic load per entry. Segment ids are never
        // reused, so a pinned segment holds the same bytes as the live one.
        pinned
            .and_then(|table| table.get(loc.seg).map(decode))
            .or_else(|| self.segments.with(loc.seg, decode))
            .or_else(|| self.segments.find_retired(loc.seg).map(|segment| decode(&segment)))
    }

    /// Decodes and checks the entry at `loc`; `None` if it has expired.
    pub(crate) fn decode_at<'s>(
        &self,
        segment: &'s Segment,
        loc: Loc,
        key: &[u8],
        prefetched: bool,
    ) -> Result<Option<EntryView<'s>>> {
        let corrupt =
            |reason: String| Error::Corruption { path: segment.path().to_path_buf(), offset: loc.off as u64, reason };
        let bytes = segment.region.read(loc.off as usize, loc.len as usize).map_err(|e| corrupt(e.to_string()))?;
        if self.options.verify_checksums && !prefetched {
            // The checksum reads the entry line by line: asking for every
            // line first overlaps their misses. readrandom 1M x 8/1024 B,
            // tmpfs, 4 pairs: p50 0.93-0.97 -> 0.78-0.84 us; 8/256 B even.
            crate::iter::prefetch_bytes(bytes);
        }
        let entry = decode_entry(bytes, self.options.verify_checksums).map_err(|e| corrupt(e.to_string()))?;
        if entry.key != key || entry.len != loc.len as usize || entry.kind != EntryKind::Put {
            return Err(corrupt("the entry does not match its index record".into()));
        }
        if entry.expiry_ms.is_some_and(|expiry| expiry <= now_ms()) {
            return Ok(None);
        }
        Ok(Some(entry))
    }

    /// Writes a full index checkpoint and makes the manifest point at it;
    /// then frees the segments GC emptied before the checkpoint began.
    pub(crate) fn checkpoint(&self) -> Result<()> {
        self.checkpoint_as(CheckpointKind::Full)
    }

    /// Writes a checkpoint of `kind` (a delta only after a full one; one
    /// that fails falls back to a full checkpoint) and makes the manifest
    /// point at it; then frees the segments GC emptied before it began.
    pub(crate) fn checkpoint_as(&self, kind: CheckpointKind) -> Result<()> {
        let mut state = self.checkpoints.lock();
        // Taken before the position is read, so that the GC copies out of
        // every segment freed here lie before it: a delta reads them from
        // the log, a full checkpoint from the index.
        let freed = std::mem::take(&mut state.pending_free);
        // Under the log lock every group before this position is applied,
        // so the scan below sees at least everything before it.
        let (segment, offset, appended, entries, last_seq) = self.with_log(|log| {
            let (segment, offset) = log.position();
            (segment, offset, log.appended_bytes, log.appended_entries, log.last_seq)
        });
        if self.options.durability == Durability::Buffered {
            // Not under the log's lock: on a disk, syncing the active
            // segment's dirty pages held every writer for its duration.
            if let Err(error) = self.segments.sync_files() {
                state.pending_free = freed;
                return Err(error);
            }
        }
        let generation = state.base_generation + state.deltas as u64 + 1;
        let delta_from = state.replay_from.filter(|_| kind == CheckpointKind::Delta);
        let delta =
            delta_from.and_then(|from| match self.write_delta(generation, from, (segment, offset), &freed, last_seq) {
                Ok(written) => Some(written),
                Err(error) => {
                    tracing::warn!(dir = %self.dir.display(), %error, "delta checkpoint failed; writing a full one");
                    None
                }
            });
        let written = match delta {
            Some(written) => Ok((written, (state.base_generation, state.deltas + 1))),
            None => {
                // Applied may still mean pending: the scan reads the tree.
                self.index.settle(&self.segments);
                checkpoint::write(&self.dir, generation, &self.index, last_seq)
                    .map(|written| (written, (generation, 0)))
            }
        };
        let written = written.and_then(|(written, (base, deltas))| {
            let manifest = Manifest {
                checkpoint_generation: base,
                replay_segment: segment,
                replay_offset: offset as u32,
                delta_count: deltas,
            };
            manifest.store(&self.dir).map(|()| (written, deltas))
        });
        let ((keys, bytes), deltas) = match written {
            Ok(written) => written,
            Err(error) => {
                state.pending_free = freed;
                return Err(error);
            }
        };
        self.counters.checkpoint_bytes_written.fetch_add(bytes, Ordering::Relaxed);
        if deltas > 0 {
            state.deltas = deltas;
            state.delta_bytes += bytes;
            self.counters.delta_checkpoints.fetch_add(1, Ordering::Relaxed);
        } else {
            if state.base_generation > 0 {
                checkpoint::retire(&self.dir, state.base_generation, state.deltas);
            }
            (state.last_keys, state.last_bytes) = (keys, bytes);
            (state.base_generation, state.deltas, state.delta_bytes) = (generation, 0, 0);
        }
        state.replay_from = Some((segment, offset));
        state.appended_at_last = appended;
        state.entries_at_last = entries;
        state.replayed_bytes = 0;
        state.replayed_entries = 0;
        if deltas > 0 && state.full_to_free {
            // Kept for a full checkpoint (`full_to_free`).
            state.pending_free.extend(freed);
            self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
            return Ok(());
        }
        state.full_to_free = false;
        for segment in freed {
            self.recycler.keep_or_delete(segment, self.options.segment_size_bytes);
            self.counters.segments_freed.fetch_add(1, Ordering::Relaxed);
        }
        self.counters.checkpoints.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }

    /// Writes delta `generation`: the log from `from` to `to`, read from
    /// the segments in the set and those GC just `freed`.
    fn write_delta(
        &self,
        generation: u64,
        from: (SegmentId, usize),
        to: (SegmentId, usize),
        freed: &[Arc<Segment>],
        last_seq: u64,
    ) -> Result<(u64, u64)> {
        let mut segments: Vec<Arc<Segment>> = self.segments.all();
        segments.extend(freed.iter().cloned());
        segments.retain(|s| (from.0..=to.0).contains(&s.id));
        segments.sort_by_key(|s| s.id);
        let entries = recovery::collapse_range(&segments, from, to)?;
        checkpoint::write_delta(&self.dir, generation, &entries, last_seq)
    }

    fn background_loop(&self) {
        // Small chunks: each holds the index write lock, and this thread
        // runs at a lower priority than the writers waiting for it.
        while !self.index.fill_points(POINT_FILL_CHUNK) && !*self.shutdown.lock() {}
        self.map_dead_entries();
        self.every_step_until_shutdown(|| {
            if let Err(error) = self.background_step() {
                tracing::error!(dir = %self.dir.display(), %error, "background GC failed");
            }
        });
    }

    /// Runs `step` every 100 ms until the database closes.
    fn every_step_until_shutdown(&self, mut step: impl FnMut()) {
        let mut shutdown = self.shutdown.lock();
        while !*shutdown {
            self.shutdown_signal.wait_for(&mut shutdown, Duration::from_millis(100));
            if *shutdown {
                break;
            }
            drop(shutdown);
            step();
            shutdown = self.shutdown.lock();
        }
    }

    fn background_step(&self) -> Result<()> {
        if self.poisoned.get().is_some() {
            return Ok(());
        }
        // Active expiry and GC look at the tree; GC settles for itself.
        self.index.background_step(&self.segments, self.options.background_idle);
        // Keep collecting while passes come back full, so GC keeps up with
        // sustained overwrites, but stop promptly on close. The segments it
        // empties are freed by the checkpoint thread's next checkpoint.
        let (budget, pass) = (Some(self.options.gc_space_amp), crate::gc::SEGMENTS_PER_PASS);
        while self.has_far_behind()
            && self.collect(crate::gc::Goal::FarBehind, pass)? == pass as u64
            && !*self.shutdown.lock()
        {}
        while self.collect_garbage(budget, pass)? == pass as u64 && !*self.shutdown.lock() {}
        while self.evict_ahead()? == pass as u64 && !*self.shutdown.lock() {}
        Ok(())
    }

    /// The checkpoint thread: every 100 ms, a checkpoint if the log since
    /// the last one outgrew its bounds (which bound the replay after a
    /// crash) or GC's emptied segments wait for one to be freed.
    fn checkpoint_loop(&self) {
        self.every_step_until_shutdown(|| {
            if self.poisoned.get().is_some() {
                return;
            }
            self.refresh_gc_behind();
            self.refresh_cache_over();
            if let Some(lfu) = &*self.lfu.load() {
                lfu.tick(self.index.approximate_len());
            }
            if let Some(kind) = self.checkpoint_due(4) {
                if let Err(error) = self.checkpoint_as(kind) {
                    tracing::error!(dir = %self.dir.display(), %error, "background checkpoint failed");
                }
            }
        });
    }

    /// Which checkpoint is due, if any: a full one once the log written
    /// since the last checkpoint outgrows the bounds that grow with the
    /// index, or `pending_segments` emptied segments wait for one to free
    /// them; before that, a delta at the configured interval (or for the
    /// emptied segments) while it holds fewer entries than a quarter of the
    /// index's keys and the chain has room (`MAX_DELTAS`, `DELTA_SHARE`).
    pub(crate) fn checkpoint_due(&self, pending_segments: usize) -> Option<CheckpointKind> {
        let (bytes, entries) = self.with_log(|log| (log.appended_bytes, log.appended_entries));
        let state = self.checkpoints.lock();
        let since_bytes = bytes - state.appended_at_last + state.replayed_bytes;
        let since_entries = entries - state.entries_at_last + state.replayed_entries;
        let freeing = state.pending_free.len() >= pending_segments;
        let interval = since_bytes >= self.options.checkpoint_interval_bytes
            || since_entries >= self.options.checkpoint_interval_entries;
        let room = state.replay_from.is_some()
            && state.deltas < MAX_DELTAS
            && state.delta_bytes * DELTA_SHARE < state.last_bytes;
        let max_bytes = self.options.checkpoint_interval_bytes.max(state.last_bytes * CHECKPOINT_GROWTH);
        let max_entries = self.options.checkpoint_interval_entries.max(state.last_keys / CHECKPOINT_GROWTH);
        let full = since_bytes >= max_bytes || since_entries >= max_entries;
        let cheaper = since_entries < state.last_keys / CHECKPOINT_GROWTH;
        if room && cheaper && !full && (interval || (freeing && !state.full_to_free)) {
            Some(CheckpointKind::Delta)
        } else if full || freeing {
            Some(CheckpointKind::Full)
        } else {
            None
        }
    }

    fn stats(&self) -> Stats {
        // First: merging deferred index updates settles the key count and
        // the live bytes of the versions they replace.
        let keys = self.index.len(&self.segments) as u64;
        let segments = self.segments.all();
        let live_bytes: u64 = segments.iter().map(|s| s.live_bytes.load(Ordering::Relaxed)).sum();
        let log_bytes: u64 = segments.iter().map(|s| s.written_bytes.load(Ordering::Relaxed)).sum();
        let disk_bytes = segments.iter().map(|s| s.capacity_bytes() as u64).sum::<u64>() + self.recycler.held_bytes();
        let index = self.index.memory();
        let index_memory_bytes = index.total;
        // The newest segment: the log's own directory, not the SSD tier.
        let medium = segments.last().map_or("unknown", |s| s.region.medium().name());
        let persist = segments.last().map_or("unknown", |s| s.region.persist_method());
        self.counters.snapshot(Stats {
            cache_capacity_bytes: self.cache_capacity(),
            ssd_tier_bytes: segments.iter().filter(|s| s.cold).map(|s| s.written_bytes.load(Ordering::Relaxed)).sum(),
            ssd_tier_capacity_bytes: self.ssd_tier_capacity(),
            lfu_memory_bytes: self.lfu.load().as_ref().map_or(0, |counters| counters.bytes() as u64),
            keys,
            live_bytes,
            log_bytes,
            disk_bytes,
            segments: segments.len() as u64,
            index_memory_bytes,
            index_point_table_bytes: index.points,
            index_pending_bytes: index.pending,
            index_bytes_per_key: if keys == 0 { 0.0 } else { index_memory_bytes as f64 / keys as f64 },
            last_seq: self.index.visible_seq(),
            durability: self.options.durability.name(),
            medium,
            persist_method: persist,
            segments_recycled: self.recycler.recycled(),
            gc_map_bytes: segments.iter().map(|s| s.dead.memory_bytes() as u64).sum(),
            ..Stats::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{CheckpointKind, MAX_DELTAS};
    use crate::{Db, Options};

    /// Deltas come at the configured interval while the chain has room;
    /// then the next full checkpoint waits for a quarter as many entries as
    /// the last one held keys, however small the configured interval.
    #[test]
    fn deltas_come_at_the_interval_and_full_checkpoints_wait_longer_as_the_index_grows() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options {
            background_work: false,
            checkpoint_interval_entries: 100,
            checkpoint_interval_bytes: u64::MAX,
            ..Options::default()
        };
        let db = Db::open(dir.path(), options).unwrap();
        for i in 0..4000u32 {
            db.put(&i.to_be_bytes(), b"v").unwrap();
        }
        assert_eq!(db.inner.checkpoint_due(usize::MAX), Some(CheckpointKind::Full), "no full checkpoint yet");
        db.inner.checkpoint().unwrap();
        let stats = db.stats();
        let file = dir.path().join(crate::checkpoint::file_name(1));
        assert_eq!(stats.checkpoint_bytes_written, std::fs::metadata(file).unwrap().len(), "{stats:?}");
        let written = stats.log_bytes_written + stats.checkpoint_bytes_written;
        let expected = written as f64 / stats.user_bytes_written as f64;
        assert!((stats.write_amplification - expected).abs() < 1e-9, "checkpoints count as written: {stats:?}");

        let put = |n: u32| {
            for i in 0..n {
                db.put(&(i * 7 % 4000).to_be_bytes(), b"w").unwrap();
            }
        };
        put(99);
        assert_eq!(db.inner.checkpoint_due(usize::MAX), None);
        put(1);
        for delta in 1..=MAX_DELTAS {
            assert_eq!(db.inner.checkpoint_due(usize::MAX), Some(CheckpointKind::Delta), "delta {delta}");
            db.inner.checkpoint_as(CheckpointKind::Delta).unwrap();
            assert_eq!(db.stats().delta_checkpoints, delta as u64);
            let delta_file = dir.path().join(crate::checkpoint::delta_file_name(1 + delta as u64));
            assert!(delta_file.exists(), "{}", delta_file.display());
            put(100);
        }
        // The chain is full: the next checkpoint is a full one, due 1000
        // entries (a quarter of 4000 keys) after the last checkpoint.
        assert_eq!(db.inner.checkpoint_due(usize::MAX), None);
        put(899);
        assert_eq!(db.inner.checkpoint_due(usize::MAX), None, "due after 999 entries, a quarter of 4000 keys is 1000");
        put(1);
        assert_eq!(db.inner.checkpoint_due(usize::MAX), Some(CheckpointKind::Full));
        db.inner.checkpoint_as(CheckpointKind::Full).unwrap();
        let names: Vec<String> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("index-0"))
            .collect();
        assert_eq!(names, [crate::checkpoint::file_name(2 + MAX_DELTAS as u64)], "the old chain is gone");
    }

    /// What a crash would leave: the directory's files as they are now.
    /// The thread preparing the next segment may rename its file between
    /// the listing and the copy (seen under CPU load): then copy again.
    fn copy_dir(from: &std::path::Path) -> tempfile::TempDir {
        'again: loop {
            let to = tempfile::tempdir().unwrap();
            for entry in std::fs::read_dir(from).unwrap() {
                let path = entry.unwrap().path();
                if path.file_name().unwrap() == "LOCK" {
                    continue;
                }
                match std::fs::copy(&path, to.path().join(path.file_name().unwrap())) {
                    Ok(_) => {}
                    Err(error) if error.kind() == std::io::ErrorKind::NotFound => continue 'again,
                    Err(error) => panic!("copying {}: {error}", path.display()),
                }
            }
            return to;
        }
    }

    /// A cache's evicted segments are freed by full checkpoints only: a
    /// delta leaves the full checkpoint's references to evicted entries,
    /// and reopening after it (from a copy of the files, as a crash leaves
    /// them) found the index pointing into a missing segment.
    #[test]
    fn a_delta_checkpoint_frees_no_evicted_segment() {
        let dir = tempfile::tempdir().unwrap();
        let segment = 128 * 1024;
        let options = Options {
            background_work: false,
            segment_size_bytes: segment,
            cache_capacity_bytes: crate::options::MIN_CACHE_SEGMENTS * segment as u64,
            ..Options::default()
        };
        let db = Db::open(dir.path(), options.clone()).unwrap();
        let value = |i: u32| format!("{i}-{}", "v".repeat(500)).into_bytes();
        for i in 0..200 {
            db.put(format!("old{i:04}").as_bytes(), &value(i)).unwrap();
        }
        db.inner.checkpoint().unwrap();
        // New keys until the oldest segments, the first keys', are evicted.
        for i in 0..4000 {
            db.put(format!("new{i:04}").as_bytes(), &value(i)).unwrap();
        }
        db.set_cache_capacity(options.cache_capacity_bytes).unwrap();
        assert!(db.stats().segments_freed == 0 && db.get(b"old0000").unwrap().is_none(), "evicted, not freed");
        db.inner.checkpoint_as(CheckpointKind::Delta).unwrap();
        assert_eq!(db.stats().segments_freed, 0, "a delta frees no evicted segment");
        let reopened = Db::open(copy_dir(dir.path()).path(), options.clone()).unwrap();
        for i in 0..200 {
            let found = reopened.get(format!("old{i:04}").as_bytes()).unwrap();
            assert!(found.is_none_or(|v| v[..] == value(i)[..]), "old{i:04}");
        }
        drop(reopened);
        db.inner.checkpoint().unwrap();
        assert!(db.stats().segments_freed > 0, "a full checkpoint frees them");
        let reopened = Db::open(copy_dir(dir.path()).path(), options).unwrap();
        assert_eq!(reopened.get(b"new3999").unwrap().as_deref(), Some(&value(3999)[..]));
    }

    /// A chain of deltas, with GC freeing segments between them, deletes,
    /// overwrites and long keys that share their first 16 bytes, reopens
    /// (from a copy of the files, as a crash leaves them) to exactly the
    /// acknowledged writes.
    #[test]
    fn a_chain_of_deltas_reopens_to_exactly_the_writes() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options { background_work: false, segment_size_bytes: 128 * 1024, ..Options::default() };
        let db = Db::open(dir.path(), options.clone()).unwrap();
        let key = |i: u32| match i % 3 {
            0 => format!("a-key-longer-than-16-bytes-{i:06}").into_bytes(),
            _ => format!("k{i:05}").into_bytes(),
        };
        let value = |i: u32, round: u32| format!("{i}-{round}-{}", "x".repeat(100)).into_bytes();
        let mut model = std::collections::BTreeMap::new();
        for i in 0..2000 {
            db.put(&key(i), &value(i, 0)).unwrap();
            model.insert(key(i), value(i, 0));
        }
        db.inner.checkpoint().unwrap();
        for round in 1..=6u32 {
            for i in (round..2000).step_by(3) {
                db.put(&key(i), &value(i, round)).unwrap();
                model.insert(key(i), value(i, round));
            }
            for i in (round * 7..2000 + round * 10).step_by(50) {
                db.delete(&key(i)).unwrap();
                model.remove(&key(i));
            }
            for i in 2000 + round * 10..2000 + round * 10 + 10 {
                db.put(&key(i), &value(i, round)).unwrap();
                model.insert(key(i), value(i, round));
            }
            db.collect_garbage().unwrap();
            db.inner.checkpoint_as(CheckpointKind::Delta).unwrap();
            // Written after the delta: the copy replays them from the log.
            db.put(&key(1), &value(1, 100 + round)).unwrap();
            model.insert(key(1), value(1, 100 + round));
            assert_eq!(db.stats().delta_checkpoints, round as u64);
            let copy = copy_dir(dir.path());
            let manifest = crate::manifest::Manifest::load(copy.path()).unwrap().unwrap();
            assert_eq!(manifest.delta_count, round);
            let reopened = Db::open(copy.path(), options.clone()).unwrap();
            let contents: Vec<(Vec<u8>, Vec<u8>)> = reopened.range::<&[u8], _>(..).map(|kv| kv.unwrap()).collect();
            let expected: Vec<(Vec<u8>, Vec<u8>)> = model.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            assert!(contents == expected, "round {round}: {} entries, expected {}", contents.len(), expected.len());
        }
        assert!(db.stats().segments_freed > 0, "GC freed segments between deltas: {:?}", db.stats());
    }
}
