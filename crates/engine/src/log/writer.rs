//! Appends frames to the active segment and persists each group once.
//!
//! Only the group-commit leader touches the writer (it sits behind the
//! commit mutex). Bytes it writes are published to readers only after
//! `finish_group` persisted them and the index was updated.
//!
//! Where a persist writes back cache lines (persistent memory, or `pmem`
//! mode on tmpfs), every group ends on a 256-byte boundary: persistent
//! memory writes back in 256-byte blocks, so groups that share a block would
//! have that block written twice. Padding is left as zeros, which the reader
//! skips (see `log::reader`). Elsewhere padding only costs: on tmpfs in
//! `sync` mode a persist writes nothing, and on a page-cache file
//! fdatasync writes whole 4 KiB pages whatever the padding.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::thread::{JoinHandle, Thread};
use std::time::Duration;

use scaledkv_pmem::{Durability, Medium, NewBlocks};

use crate::background::IdleUntilNeeded;
use crate::error::{Error, Result};
use crate::log::record::{align_up, FrameHeader, FRAME_ALIGN_BYTES, FRAME_HEADER_BYTES};
use crate::log::segment::{Recycler, Segment, SegmentId, SegmentSet, MAX_ID_SPAN, MAX_SEGMENT_ID};
use crate::options::Options;

pub const GROUP_ALIGN_BYTES: usize = 256;

/// How far ahead of the writer a fresh segment is prefaulted where each
/// prefaulted page is dirty (`Region::prefaults_dirty`: a `buffered`
/// page-cache file). A sync (a checkpoint's, the close's) or the kernel's
/// writeback writes at most this many bytes of zeros the writer has not
/// reached yet; a wider window only helps a prefaulter that falls behind.
const DIRTY_AHEAD_BYTES: usize = 8 << 20;

/// The spare segment's thread, started under `SCHED_IDLE` once a quarter
/// of the active segment is written, is raised to normal priority (still
/// paced) once 1/`RAISE_SPARE_AT` is, if it has not sent the segment yet
/// and the segment lives in memory (tmpfs, DAX). Under SET `-P 16` both
/// cores were busy, an idle thread got no time for the 40-60 ms that
/// reserving 64 MiB of fresh tmpfs costs, and the writer waited for it at
/// 9 of 17 rolls, 6-25 ms each (`perf sched`). On a page-cache file
/// system creating a segment is mostly device writes (zeros, a sync), and
/// raised, paced preparation drew disk SET `-P 16` slower in a full run
/// (medians of 3: 344k -> 296k/s): there the thread stays as it was, under
/// `SCHED_IDLE` at nice 5, unpaced and never raised.
const RAISE_SPARE_AT: usize = 2;

/// A page-cache `sync` segment's blocks are written as zeros ahead
/// (`NewBlocks::Written`) when the groups of the segment filled before it
/// averaged fewer bytes than this, and only reserved otherwise (each sync
/// then also records the blocks it wrote as written). Disk, SETs of 1 KiB
/// (`redis-benchmark`, medians of 3 interleaved runs): at `-P 16`
/// (100-500 KiB groups) 153k SET/s with zeros, 206k without (nor the
/// prefault that reads their pages in, `spawn_spare`); at `-P 1` (groups of
/// 8-13 KiB) 35.5k with zeros, 30.0k without. Choosing by this threshold:
/// 167k -> 194k at `-P 16` (p99 13.9 -> 10.3 ms), 34.0k -> 35.8k at `-P 1`.
const ZERO_FILL_BELOW_GROUP_BYTES: u64 = 64 << 10;

pub struct LogWriter {
    dir: PathBuf,
    durability: Durability,
    segment_size_bytes: usize,
    /// `Options::background_idle`, for the threads this writer starts.
    background_idle: bool,
    active: Arc<Segment>,
    /// Next write offset in `active`.
    offset: usize,
    /// Where the current group started in `active`.
    group_start: usize,
    /// Groups persisted into the active segment and their bytes: how the
    /// next segment's blocks are readied (`next_blocks`).
    groups_in_active: u64,
    group_bytes_in_active: u64,
    /// Segments filled earlier in the current group, not yet persisted.
    sealed_in_group: Vec<(Arc<Segment>, usize, usize)>,
    /// When a region write is a system call (`Region::writes_by_syscall`),
    /// the group's frames are gathered here, from `staged_from` in the
    /// active segment, and written once before the persist.
    staged: Vec<u8>,
    staged_from: usize,
    next_id: SegmentId,
    /// The next segment, created (or recycled) off the critical path (see
    /// `prepare_spare_when_due`), sent once it is mapped; its thread then
    /// prefaults it.
    spare: Option<Spare>,
    /// The thread prefaulting the active segment ahead of the writer.
    ahead: Option<Ahead>,
    /// Threads still prefaulting or writing back segments, joined on drop
    /// so that nothing of this writer outlives it.
    helpers: Vec<JoinHandle<()>>,
    recycler: Arc<Recycler>,
    /// Highest sequence number handed out.
    pub last_seq: u64,
    /// Frame bytes appended since open (padding excluded).
    pub appended_bytes: u64,
    /// Entries appended since open: what a replay after a crash would read.
    pub appended_entries: u64,
    /// Rolls since open at which the next segment was not ready, and the
    /// time the writer waited for it.
    pub roll_waits: u64,
    pub roll_wait_micros: u64,
}

/// The next segment, sent by the thread that prepares it.
struct Spare {
    segment: Receiver<Result<Arc<Segment>>>,
    thread: JoinHandle<()>,
    /// Tells the thread to stop prefaulting (the segment is full, or the
    /// writer is gone).
    stop: Arc<AtomicBool>,
    /// Under `Options::background_idle` the thread prepares a segment in
    /// memory under `SCHED_IDLE` until the writer needs it soon
    /// (`RAISE_SPARE_AT`).
    priority: Arc<IdleUntilNeeded>,
}

impl Spare {
    /// Stops its thread's prefault (it still sends the segment).
    fn stop(&self) {
        stop_prefaulter(&self.stop, self.thread.thread());
    }
}

/// The prefaulting thread of the active segment, as the writer sees it.
struct Ahead {
    thread: Thread,
    stop: Arc<AtomicBool>,
    /// The offset past which the writer wakes the thread to prefault on.
    wake_at: usize,
    window: usize,
}

impl Ahead {
    /// For `segment`, whose writer stands at `offset`.
    fn new(thread: Thread, stop: Arc<AtomicBool>, segment: &Segment, offset: usize) -> Ahead {
        let window = prefault_window(segment);
        Ahead { thread, stop, wake_at: offset + window / 2, window }
    }

    fn stop(&self) {
        stop_prefaulter(&self.stop, &self.thread);
    }
}

fn stop_prefaulter(stop: &AtomicBool, thread: &Thread) {
    stop.store(true, Ordering::Release);
    thread.unpark();
}

impl LogWriter {
    pub fn new(
        dir: PathBuf,
        options: &Options,
        active: Arc<Segment>,
        offset: usize,
        last_seq: u64,
        recycler: Arc<Recycler>,
    ) -> LogWriter {
        let next_id = crate::log::segment::next_id(active.id);
        let mut writer = LogWriter {
            dir,
            durability: options.durability,
            segment_size_bytes: options.segment_size_bytes,
            background_idle: options.background_idle,
            active,
            offset,
            group_start: offset,
            groups_in_active: 0,
            group_bytes_in_active: 0,
            sealed_in_group: Vec::new(),
            staged: Vec::new(),
            staged_from: offset,
            next_id,
            spare: None,
            ahead: None,
            helpers: Vec::new(),
            recycler,
            last_seq,
            appended_bytes: 0,
            appended_entries: 0,
            roll_waits: 0,
            roll_wait_micros: 0,
        };
        writer.follow_active();
        writer
    }

    /// Prefaults the active segment ahead of the writer on a thread of its
    /// own, as the spare's thread does for each later one: a new database
    /// does not wait at open for its first segment's pages (64 MiB of
    /// fresh tmpfs took 31-180 ms), and a reopened one gets the rest of its
    /// last segment prefaulted too.
    fn follow_active(&mut self) {
        let segment = self.active.clone();
        let stop = Arc::new(AtomicBool::new(false));
        let stop_here = stop.clone();
        let idle = self.background_idle;
        let spawned = std::thread::Builder::new().name("scaledkv-spare".into()).spawn(move || {
            crate::background::lower_this_thread(idle);
            prefault_in_background(&segment, &stop_here, idle);
        });
        match spawned {
            Ok(thread) => {
                self.ahead = Some(Ahead::new(thread.thread().clone(), stop, &self.active, self.offset));
                self.helpers.push(thread);
            }
            Err(error) => tracing::warn!(%error, "cannot spawn the thread prefaulting the active segment"),
        }
    }

    /// Starts preparing the next segment once a quarter of the active one
    /// is written: early enough that it is ready long before the roll
    /// (prefaulting 64 MiB took 40-100 ms under load, filling the other
    /// 48 MiB takes longer), late enough that a fresh database does not
    /// spend its first milliseconds zeroing a segment it may never need
    /// (that competed with the first requests of a short benchmark).
    fn prepare_spare_when_due(&mut self, segments: &SegmentSet) {
        match &self.spare {
            None if self.offset >= self.active.capacity_bytes() / 4 && self.next_id_allowed(segments) => {
                self.spare = Some(self.spawn_spare())
            }
            Some(spare) if self.offset >= self.active.capacity_bytes() / RAISE_SPARE_AT => spare.priority.raise(),
            _ => {}
        }
    }

    /// Prepares the next segment on a thread of its own. A new one is
    /// sent as soon as it is mapped, then prefaulted: a writer that
    /// reaches the end of the active segment first (prefaulting 64 MiB of
    /// fresh tmpfs took 31-180 ms in this VM, and 1 KiB fills write 1 GB/s)
    /// starts writing at once, faulting its own pages on the way, instead
    /// of waiting for the whole segment (190-290 ms of a 0.92 s `fillrandom`
    /// of 1M x 16/1024 B).
    fn spawn_spare(&self) -> Spare {
        let (dir, id, size, durability) = (self.dir.clone(), self.next_id, self.segment_size_bytes, self.durability);
        let blocks = self.next_blocks();
        let idle = self.background_idle;
        let in_memory = self.active.region.medium() != Medium::PageCache;
        let raisable = idle && in_memory;
        // Without `background_idle` a segment in memory is created at
        // normal priority (its prefault still at nice 5): at nice 5 the
        // creation lost the core to the index merger and a durable tmpfs
        // fillrandom (500k x 16/1024 B) waited for it at 3-8 of 8 rolls;
        // with it, and the spare started at the roll (`prepares_at_roll`),
        // at 0-3, and wrote 1.03M -> 1.17M/s (medians of 8 interleaved
        // runs).
        let lowered = !in_memory || idle;
        let recycled = self.recycler.take();
        let (sender, receiver) = sync_channel(1);
        let stop = Arc::new(AtomicBool::new(false));
        let stop_here = stop.clone();
        // Named so that profiles tell its page-fault work from the caller's.
        let priority = Arc::new(IdleUntilNeeded::default());
        let priority_here = priority.clone();
        let thread = std::thread::Builder::new()
            .name("scaledkv-spare".into())
            .spawn(move || {
                if !(raisable && priority_here.enter()) && lowered {
                    crate::background::lower_this_thread(idle);
                }
                if raisable {
                    crate::background::pace_this_thread();
                }
                let (segment, fresh) = match recycled {
                    Some(mut segment) => (segment.recycle(&dir, id, durability).map(|()| segment), false),
                    None => (Segment::create(&dir, id, size, durability, blocks), true),
                };
                // Nothing waits for the prefault: no raise from here on.
                priority_here.leave();
                let segment = segment.map(Arc::new);
                // Prefaulting reserved blocks of a page-cache file reads
                // them in: the kernel zeroes each page (6% of all CPU time
                // under disk SET `-P 16`), which the writer's pwrite then
                // overwrites; its own pwrite of a whole page zeroes nothing.
                let reads_zeros =
                    |segment: &Segment| segment.region.writes_by_syscall() && blocks == NewBlocks::Reserved;
                let prefault = segment.as_ref().ok().filter(|segment| fresh && !reads_zeros(segment)).cloned();
                // A writer that is gone (the database closed) needs nothing.
                let _ = sender.send(segment);
                if let Some(segment) = prefault {
                    crate::background::lower_this_thread(idle);
                    prefault_in_background(&segment, &stop_here, idle);
                }
            })
            .expect("spawn the segment-preparing thread");
        Spare { segment: receiver, thread, stop, priority }
    }

    /// Waits until no helper thread of this writer is left to change the
    /// directory's files (a prefault, a writeback whose segment, freed
    /// meanwhile, is removed when the thread lets it go; a recycled spare's
    /// rename): a copy of the directory is then the files a crash would
    /// leave. Prefaulting stops for good (it changes no byte, but a
    /// prefaulter waiting for the writer to move on would never finish).
    #[cfg(test)]
    pub fn wait_for_helpers(&mut self) {
        if let Some(ahead) = self.ahead.take() {
            ahead.stop();
        }
        for thread in self.helpers.drain(..) {
            let _ = thread.join();
        }
        if let Some(spare) = &self.spare {
            spare.stop();
            while !spare.thread.is_finished() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }

    pub fn persist_waits_for_device(&self) -> bool {
        self.active.region.persist_waits_for_device()
    }

    pub fn active_id(&self) -> SegmentId {
        self.active.id
    }

    /// (active segment id, next write offset): where the log ends now.
    pub fn position(&self) -> (SegmentId, usize) {
        (self.active.id, self.offset)
    }

    /// Whether the next segment may take `next_id`: its tag must not name
    /// a segment a reader can still reach (`MAX_ID_SPAN`).
    fn next_id_allowed(&self, segments: &SegmentSet) -> bool {
        let oldest = segments.oldest_id().unwrap_or(self.active.id).min(self.active.id);
        self.next_id - oldest <= MAX_ID_SPAN && self.next_id <= MAX_SEGMENT_ID
    }

    /// Writes one frame (`header` + `body`) and returns (segment id, offset).
    pub fn append(&mut self, header: &FrameHeader, body: &[u8], segments: &SegmentSet) -> Result<(SegmentId, usize)> {
        self.append_parts(header, &[body], segments)
    }

    /// As `append`, with the frame's body given as consecutive parts.
    pub fn append_parts(
        &mut self,
        header: &FrameHeader,
        body: &[&[u8]],
        segments: &SegmentSet,
    ) -> Result<(SegmentId, usize)> {
        let frame_len = header.frame_len as usize;
        debug_assert_eq!(frame_len, FRAME_HEADER_BYTES + body.iter().map(|part| part.len()).sum::<usize>());
        if self.offset + frame_len > self.active.capacity_bytes() {
            self.roll(segments)?;
        }
        let at = self.offset;
        let next = align_up(at + frame_len, FRAME_ALIGN_BYTES).min(self.active.capacity_bytes());
        let region = &self.active.region;
        if region.writes_by_syscall() {
            if self.staged.is_empty() {
                self.staged_from = at;
            }
            self.staged.extend_from_slice(&header.encode());
            for part in body {
                self.staged.extend_from_slice(part);
            }
            // Alignment padding is zeros, as in the file.
            self.staged.resize(next - self.staged_from, 0);
        } else {
            // SAFETY: bytes past `self.offset` are unpublished: no index
            // entry points there until this group is persisted and applied.
            unsafe {
                region.write(at, &header.encode())?;
                let mut part_at = at + FRAME_HEADER_BYTES;
                for part in body {
                    region.write(part_at, part)?;
                    part_at += part.len();
                }
            }
        }
        self.offset = next;
        self.appended_bytes += frame_len as u64;
        self.appended_entries += header.count as u64;
        self.prepare_spare_when_due(segments);
        Ok((self.active.id, at))
    }

    /// How the next segment's blocks are readied: written as zeros unless
    /// the active segment's groups averaged `ZERO_FILL_BELOW_GROUP_BYTES`
    /// or more (no group yet: written, as before any measurement).
    fn next_blocks(&self) -> NewBlocks {
        let mean = self.group_bytes_in_active.checked_div(self.groups_in_active).unwrap_or(0);
        if mean < ZERO_FILL_BELOW_GROUP_BYTES {
            NewBlocks::Written
        } else {
            NewBlocks::Reserved
        }
    }

    /// Whether the next spare starts right after a roll rather than at a
    /// quarter of the segment (a writer that filled a segment will likely
    /// fill the next).
    ///
    /// In `sync` mode on a page-cache file system a new segment may be 64 MiB
    /// of zeros written and synced (`next_blocks`), at the idle I/O
    /// class of a `SCHED_IDLE` thread: started at a quarter of the segment,
    /// it kept the writer waiting at 5 of 9 rolls of SET `-P 16` on the
    /// disk, 44-59 ms each. In memory without `background_idle` (the
    /// embedded default) a spare started at a quarter, at nice 5, kept a
    /// durable tmpfs fillrandom waiting at 3-8 of 8 rolls (`roll_waits`).
    /// Not in memory under `background_idle` (the server: a spare started
    /// at the roll made SET `-P 16`'s p99 worse, 4.2-4.5 -> 5.2-5.5 ms in
    /// an A/B), nor in `buffered` mode on a disk, where a new segment only
    /// reserves blocks.
    fn prepares_at_roll(&self) -> bool {
        match self.active.region.medium() {
            Medium::PageCache => self.durability == Durability::Sync,
            Medium::Tmpfs | Medium::Dax => !self.background_idle,
        }
    }

    /// Writes the gathered frames of the active segment (one system call).
    fn write_staged(&mut self) -> Result<()> {
        if !self.staged.is_empty() {
            // SAFETY: as in `append`: the staged range is unpublished.
            unsafe { self.active.region.write(self.staged_from, &self.staged)? };
            self.staged.clear();
        }
        Ok(())
    }

    fn roll(&mut self, segments: &SegmentSet) -> Result<()> {
        self.write_staged()?;
        if !self.next_id_allowed(segments) {
            let oldest = segments.oldest_id().unwrap_or(self.active.id);
            return Err(Error::SegmentIdsExhausted { path: self.active.path().to_path_buf(), oldest });
        }
        // Not prepared yet only for a frame larger than three quarters of a segment.
        let spare = self.spare.take().unwrap_or_else(|| self.spawn_spare());
        let received = match spare.segment.try_recv() {
            Ok(segment) => Ok(segment),
            Err(_) => {
                let started = std::time::Instant::now();
                let received = receive_spare(&spare);
                self.roll_waits += 1;
                self.roll_wait_micros += started.elapsed().as_micros() as u64;
                received
            }
        };
        let prefaulter = spare.thread.thread().clone();
        self.helpers.retain(|thread| !thread.is_finished());
        self.helpers.push(spare.thread);
        let next = match received {
            Ok(result) => result?,
            Err(_) => return Err(Error::Poisoned("segment preparation thread panicked".into())),
        };
        // The full segment's prefaulter has nothing left to do: a step
        // after the writeback below would dirty written pages again.
        if let Some(ahead) = self.ahead.take() {
            ahead.stop();
        }
        self.ahead = Some(Ahead::new(prefaulter, spare.stop, &next, crate::log::segment::SEGMENT_HEADER_BYTES));
        segments.insert(next.clone());
        let old = std::mem::replace(&mut self.active, next);
        old.written_bytes.store(self.offset as u64, Ordering::Release);
        if self.durability == Durability::Buffered && old.region.medium() == Medium::PageCache {
            self.helpers.extend(start_write_back(old.clone(), self.background_idle));
        }
        self.sealed_in_group.push((old, self.group_start, self.offset));
        self.offset = crate::log::segment::SEGMENT_HEADER_BYTES;
        self.group_start = self.offset;
        self.next_id = crate::log::segment::next_id(self.next_id);
        if self.prepares_at_roll() && self.next_id_allowed(segments) {
            self.spare = Some(self.spawn_spare());
        }
        (self.groups_in_active, self.group_bytes_in_active) = (0, 0);
        Ok(())
    }

    /// Persists everything appended since the last call (one persist per
    /// touched segment) and starts the next group on a 256-byte boundary.
    pub fn finish_group(&mut self) -> Result<()> {
        self.write_staged()?;
        for (segment, start, end) in self.sealed_in_group.drain(..) {
            segment.region.persist(start, end - start)?;
        }
        if self.offset > self.group_start {
            self.active.region.persist(self.group_start, self.offset - self.group_start)?;
            self.groups_in_active += 1;
            self.group_bytes_in_active += (self.offset - self.group_start) as u64;
        }
        if aligns_groups(&self.active) {
            self.offset = align_up(self.offset, GROUP_ALIGN_BYTES).min(self.active.capacity_bytes());
        }
        self.group_start = self.offset;
        self.active.written_bytes.store(self.offset as u64, Ordering::Release);
        if let Some(ahead) = self.ahead.as_mut().filter(|ahead| self.offset >= ahead.wake_at) {
            ahead.thread.unpark();
            ahead.wake_at = self.offset + ahead.window / 2;
        }
        Ok(())
    }

    /// Makes everything written so far durable, whatever the mode (used by
    /// `Db::flush` and at close in buffered mode).
    pub fn sync_all(&self, segments: &SegmentSet) -> Result<()> {
        for segment in segments.all() {
            segment.region.sync_file()?;
        }
        Ok(())
    }
}

/// Waits for the spare segment, its thread raised meanwhile (it may
/// not have entered `SCHED_IDLE` yet when the writer first raised it).
fn receive_spare(spare: &Spare) -> std::result::Result<Result<Arc<Segment>>, RecvTimeoutError> {
    loop {
        spare.priority.raise();
        match spare.segment.recv_timeout(Duration::from_millis(1)) {
            Err(RecvTimeoutError::Timeout) => continue,
            received => return received,
        }
    }
}

/// How far ahead of the writer `segment` is prefaulted: all of it where
/// prefaulting dirties nothing (tmpfs, DAX, page-cache `sync` mode, which
/// maps pages read-only), else `DIRTY_AHEAD_BYTES`.
fn prefault_window(segment: &Segment) -> usize {
    if segment.region.prefaults_dirty() {
        DIRTY_AHEAD_BYTES
    } else {
        segment.region.len()
    }
}

/// The prefault of a background thread (paced under
/// `Options::background_idle`).
fn prefault_in_background(segment: &Segment, stop: &AtomicBool, idle: bool) {
    if idle {
        crate::background::pace_this_thread();
    }
    prefault_ahead_of_writer(segment, stop, prefault_window(segment));
}

/// Prefaults `segment` up to `window` bytes past what the writer has
/// written, in 2 MiB steps from the front, skipping what the writer has
/// passed (its own stores faulted those pages in, and on a page-cache file
/// written back since, a step would dirty them again), until the segment is
/// prefaulted to its end or `stop` is set; parks while a whole window
/// lies ahead of the writer (the writer wakes it, `finish_group`).
/// Disk fills of 1M x 16/1024 B in `buffered` mode, which read-populated
/// the pages and took a write-protect fault and ext4's `page_mkwrite` per
/// page on the writer's thread: BENCHMARKS.md, forty-eighth session.
fn prefault_ahead_of_writer(segment: &Segment, stop: &AtomicBool, window: usize) {
    const STEP_BYTES: usize = 2 << 20;
    let len = segment.region.len();
    let mut done = 0;
    while done < len && !stop.load(Ordering::Acquire) {
        let writer = segment.written_bytes.load(Ordering::Acquire) as usize;
        let from = done.max(writer);
        let to = writer.saturating_add(window).min(len);
        if from >= to {
            std::thread::park();
            continue;
        }
        let step_end = to.min(from + STEP_BYTES);
        segment.region.prefault_range(from, step_end);
        done = step_end;
        crate::background::pause_point();
    }
}

/// Writes a full segment's pages to the device on a thread of its own,
/// paced and one segment at a time (`Region::write_back_paced`: a fill
/// faster than the device queues these threads behind each other, with
/// their dirty pages, up to the kernel's dirty limits). In `buffered`
/// mode on a disk's file system nothing else writes them back until
/// the kernel's dirty limits (10% of memory here, 2.4 GB): after 4M
/// overwrites of 8/256 B, readers then shared the cores with gigabytes of
/// writeback of mapped pages, each page write-protected in the process's
/// page tables. Disk, `fillrandom` then `overwrite,readrandom,readseq`,
/// ABBA: with writeback started here, readrandom 541-635k -> 1.04-1.06M
/// and readseq 2.1-2.5M -> 4.4-4.7M after 4M x 8/256 B overwrites; with
/// the segment's page-table entries dropped first as well
/// (`Region::write_back_paced`), the writes gained too: 4M x 8/256 B
/// fillrandom 1.09-1.20M -> 1.47-1.64M and overwrite 0.90-1.07M ->
/// 1.45-1.47M, 1M x 16/1024 B fillrandom 370-398k -> 907-915k.
fn start_write_back(segment: Arc<Segment>, idle: bool) -> Option<JoinHandle<()>> {
    let spawned = std::thread::Builder::new().name("scaledkv-writeback".into()).spawn(move || {
        crate::background::lower_this_thread(idle);
        if let Err(error) = segment.region.write_back_paced() {
            tracing::warn!(%error, "writing back a full segment failed");
        }
    });
    spawned.map_err(|error| tracing::warn!(%error, "cannot spawn the writeback thread")).ok()
}

/// Whether groups written to `segment` start on 256-byte boundaries (see
/// the module comment).
pub fn aligns_groups(segment: &Segment) -> bool {
    segment.region.persists_cache_lines()
}

impl Drop for LogWriter {
    fn drop(&mut self) {
        // The spare was never used: remove it so reopen does not see an
        // extra empty segment. A crash leaves it behind, which recovery
        // handles (an empty segment is just empty).
        if let Some(ahead) = self.ahead.take() {
            ahead.stop();
        }
        if let Some(spare) = self.spare.take() {
            spare.stop();
            if let Ok(Ok(segment)) = spare.segment.recv() {
                segment.mark_for_deletion();
            }
            // Its thread holds the segment while it prefaults: joined, the
            // file is gone before a reopen could see it.
            let _ = spare.thread.join();
        }
        for thread in self.helpers.drain(..) {
            let _ = thread.join();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::log::segment::SEGMENT_HEADER_BYTES;
    use crate::testing::value;
    use crate::{Db, Options};

    const MIB: usize = 1 << 20;

    /// The page-cache pages of `segment` in memory, one flag per 4 KiB page.
    fn resident(segment: &Segment) -> Vec<bool> {
        let bytes = segment.region.as_slice();
        let mut flags = vec![0u8; bytes.len().div_ceil(4096)];
        // SAFETY: the region's whole mapping, one flag byte per page.
        let rc = unsafe { libc::mincore(bytes.as_ptr() as *mut libc::c_void, bytes.len(), flags.as_mut_ptr()) };
        assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
        flags.iter().map(|flag| flag & 1 == 1).collect()
    }

    /// Whether each page of `[from, to)` of `segment`'s mapping is mapped
    /// in this process (`/proc/self/pagemap`, bit 63).
    fn mapped(segment: &Segment, from: usize, to: usize) -> Vec<bool> {
        use std::os::unix::fs::FileExt;
        let base = segment.region.as_slice().as_ptr() as usize;
        let pagemap = std::fs::File::open("/proc/self/pagemap").unwrap();
        let mut entries = vec![0u8; (to - from) / 4096 * 8];
        pagemap.read_exact_at(&mut entries, ((base + from) / 4096 * 8) as u64).unwrap();
        entries.chunks(8).map(|entry| u64::from_le_bytes(entry.try_into().unwrap()) >> 63 == 1).collect()
    }

    fn none_in(pages: &[bool], from: usize, to: usize, what: &str) {
        let found: Vec<usize> = (from..to).filter(|page| pages[*page]).collect();
        assert!(found.is_empty(), "{} pages prefaulted {what}, the first {:?}", found.len(), found.first());
    }

    /// Waits until the prefaulter has brought in every page of `[from,
    /// to)` and nothing comes in for a while after.
    fn settle(segment: &Segment, from: usize, to: usize) -> Vec<bool> {
        let deadline = Instant::now() + Duration::from_secs(20);
        while !resident(segment)[from / 4096..to / 4096].iter().all(|page| *page) {
            assert!(Instant::now() < deadline, "pages {from}..{to} never prefaulted");
            std::thread::sleep(Duration::from_millis(2));
        }
        std::thread::sleep(Duration::from_millis(100));
        resident(segment)
    }

    /// On a page-cache file in `buffered` mode every prefaulted page is a
    /// dirty page that a sync writes: the prefaulter keeps within its
    /// window of the writer, skips what the writer has passed and stops
    /// when told.
    #[test]
    fn a_dirtying_prefault_keeps_a_window_ahead_of_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let segment = Segment::create(dir.path(), 1, 32 * MIB, Durability::Buffered, NewBlocks::Written).unwrap();
        if !segment.region.prefaults_dirty() {
            eprintln!("notice: {} is not a page-cache file system; nothing to check", dir.path().display());
            return;
        }
        assert_eq!(prefault_window(&segment), DIRTY_AHEAD_BYTES);
        // Without readahead the pages in memory are the pages prefaulted
        // (readahead adds clean ones, which no sync writes).
        let bytes = segment.region.as_slice();
        // SAFETY: advice on the region's own mapping; it changes no byte.
        assert_eq!(unsafe { libc::madvise(bytes.as_ptr() as *mut libc::c_void, bytes.len(), libc::MADV_RANDOM) }, 0);
        let segment = Arc::new(segment);
        let stop = Arc::new(AtomicBool::new(false));
        let thread = {
            let (segment, stop) = (segment.clone(), stop.clone());
            std::thread::spawn(move || prefault_ahead_of_writer(&segment, &stop, DIRTY_AHEAD_BYTES))
        };
        // The writer stands past the segment's header: the window ends a
        // window past that, within the page after 8 MiB.
        let pages = settle(&segment, 0, DIRTY_AHEAD_BYTES);
        none_in(&pages, (SEGMENT_HEADER_BYTES + DIRTY_AHEAD_BYTES).div_ceil(4096), pages.len(), "past the window");

        // The writer moves to 16 MiB (it wrote nothing here: the pages it
        // passed stay out) and wakes the prefaulter.
        segment.written_bytes.store(16 * MIB as u64, Ordering::Release);
        thread.thread().unpark();
        let pages = settle(&segment, 16 * MIB, 16 * MIB + DIRTY_AHEAD_BYTES);
        none_in(
            &pages,
            (SEGMENT_HEADER_BYTES + DIRTY_AHEAD_BYTES).div_ceil(4096),
            16 * MIB / 4096,
            "behind the writer",
        );
        none_in(&pages, (16 * MIB + DIRTY_AHEAD_BYTES) / 4096, pages.len(), "past the window");

        stop.store(true, Ordering::Release);
        thread.thread().unpark();
        thread.join().unwrap();
    }

    /// A new database's first segment is prefaulted by the writer's
    /// thread, not at open (which window it keeps, the test above shows:
    /// here readahead brings clean pages past it too).
    #[test]
    fn a_new_databases_first_segment_is_prefaulted_ahead_of_the_writer() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options { durability: Durability::Buffered, segment_size_bytes: 32 * MIB, ..Options::default() };
        let db = Db::open(dir.path(), options).unwrap();
        let active = db.inner.committer.with_log(|log| log.active.clone());
        if !active.region.prefaults_dirty() {
            eprintln!("notice: {} is not a page-cache file system; nothing to check", dir.path().display());
            return;
        }
        // Mapped into this process's page table: what a prefault does,
        // and readahead (which filled the page cache already) does not.
        let deadline = Instant::now() + Duration::from_secs(20);
        while !mapped(&active, MIB, DIRTY_AHEAD_BYTES).iter().all(|page| *page) {
            assert!(Instant::now() < deadline, "the first segment was never prefaulted");
            std::thread::sleep(Duration::from_millis(2));
        }
        db.put(b"k", b"v").unwrap();
        assert_eq!(db.get(b"k").unwrap().as_deref(), Some(&b"v"[..]));
    }

    /// A spare whose thread enters `SCHED_IDLE` and sends `segment` only
    /// once raised (an error if it is not within 5 s).
    fn spare_sent_once_raised(segment: Segment) -> Spare {
        let priority = Arc::new(IdleUntilNeeded::default());
        let (sender, receiver) = sync_channel(1);
        let (entered, entered_here) = sync_channel(1);
        let priority_here = priority.clone();
        let thread = std::thread::spawn(move || {
            priority_here.enter();
            entered.send(()).unwrap();
            let start = Instant::now();
            // SAFETY: reads this thread's policy.
            while unsafe { libc::sched_getscheduler(0) } != libc::SCHED_OTHER {
                if start.elapsed() > Duration::from_secs(5) {
                    let _ = sender.send(Err(Error::Poisoned("the spare's thread was never raised".into())));
                    return;
                }
                std::thread::sleep(Duration::from_millis(1));
            }
            priority_here.leave();
            let _ = sender.send(Ok(Arc::new(segment)));
        });
        entered_here.recv().unwrap();
        Spare { segment: receiver, thread, stop: Arc::new(AtomicBool::new(false)), priority }
    }

    /// Under `background_idle` the spare's thread prepares a segment in
    /// memory under `SCHED_IDLE` until the writer passes half of the active
    /// segment, and a writer that reaches the end first raises it while it
    /// waits.
    #[test]
    fn the_spare_is_raised_once_the_writer_needs_it_soon() {
        if !crate::background::can_leave_idle() {
            eprintln!("notice: threads here cannot leave SCHED_IDLE (not root, low RLIMIT_NICE): nothing to check");
            return;
        }
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let options = Options {
            durability: Durability::Sync,
            segment_size_bytes: 4 * MIB,
            background_idle: true,
            ..Options::default()
        };
        let active = Arc::new(Segment::create(dir.path(), 1, 4 * MIB, Durability::Sync, NewBlocks::Written).unwrap());
        let mut writer =
            LogWriter::new(dir.path().to_path_buf(), &options, active, SEGMENT_HEADER_BYTES, 0, Arc::default());
        assert!(writer.spare.is_none(), "a spare is due only past a quarter of the segment");
        writer.spare = Some(spare_sent_once_raised(
            Segment::create(dir.path(), 2, 4 * MIB, Durability::Sync, NewBlocks::Written).unwrap(),
        ));
        let half = 4 * MIB / RAISE_SPARE_AT;

        writer.offset = half - 4096;
        writer.prepare_spare_when_due(&SegmentSet::default());
        let waited = writer.spare.as_ref().unwrap().segment.recv_timeout(Duration::from_millis(200));
        assert!(matches!(waited, Err(RecvTimeoutError::Timeout)), "sent before the writer needed it");

        writer.offset = half;
        writer.prepare_spare_when_due(&SegmentSet::default());
        let sent = writer.spare.as_ref().unwrap().segment.recv_timeout(Duration::from_secs(10));
        let sent = sent.expect("the spare's thread ended silently");
        assert_eq!(sent.unwrap().id, 2);

        let late =
            spare_sent_once_raised(Segment::create(dir.path(), 3, MIB, Durability::Sync, NewBlocks::Written).unwrap());
        assert_eq!(receive_spare(&late).unwrap().unwrap().id, 3);
    }

    /// A spare whose thread sends `segment` after `delay`.
    fn spare_sent_after(segment: Segment, delay: Duration) -> Spare {
        let (sender, receiver) = sync_channel(1);
        let thread = std::thread::spawn(move || {
            std::thread::sleep(delay);
            let _ = sender.send(Ok(Arc::new(segment)));
        });
        Spare { segment: receiver, thread, stop: Arc::new(AtomicBool::new(false)), priority: Arc::default() }
    }

    /// A roll that finds its next segment ready does not count a wait; one
    /// that has to wait for it counts the wait and its time.
    #[test]
    fn a_roll_counts_the_time_it_waits_for_its_next_segment() {
        let dir = tempfile::tempdir_in("/dev/shm").unwrap();
        let options = Options { durability: Durability::Sync, segment_size_bytes: MIB, ..Options::default() };
        let active = Arc::new(Segment::create(dir.path(), 1, MIB, Durability::Sync, NewBlocks::Written).unwrap());
        let mut writer =
            LogWriter::new(dir.path().to_path_buf(), &options, active, SEGMENT_HEADER_BYTES, 0, Arc::default());
        let ready = spare_sent_after(
            Segment::create(dir.path(), 2, MIB, Durability::Sync, NewBlocks::Written).unwrap(),
            Duration::ZERO,
        );
        while !ready.thread.is_finished() {
            std::thread::sleep(Duration::from_millis(1));
        }
        writer.spare = Some(ready);
        writer.roll(&SegmentSet::default()).unwrap();
        assert_eq!((writer.roll_waits, writer.roll_wait_micros), (0, 0));

        let late = Segment::create(dir.path(), 3, MIB, Durability::Sync, NewBlocks::Written).unwrap();
        writer.spare = Some(spare_sent_after(late, Duration::from_millis(50)));
        writer.roll(&SegmentSet::default()).unwrap();
        assert_eq!(writer.active.id, 3);
        assert_eq!(writer.roll_waits, 1);
        assert!(writer.roll_wait_micros >= 30_000, "waited {} us", writer.roll_wait_micros);
    }

    /// After a roll the next spare starts at once in `sync` mode on a
    /// page-cache file system and in memory without `background_idle`;
    /// otherwise past a quarter of the segment, as the first one does.
    #[test]
    fn after_a_roll_the_next_spare_starts_at_once_where_it_is_due_early() {
        let disk = || tempfile::tempdir().unwrap();
        let tmpfs = || tempfile::tempdir_in("/dev/shm").unwrap();
        for (dir, durability, background_idle, at_once) in [
            (disk(), Durability::Sync, false, true),
            (disk(), Durability::Buffered, false, false),
            (tmpfs(), Durability::Sync, false, true),
            (tmpfs(), Durability::Sync, true, false),
        ] {
            let active = Arc::new(Segment::create(dir.path(), 1, MIB, durability, NewBlocks::Written).unwrap());
            let case = format!("{} {durability:?} background_idle {background_idle}", dir.path().display());
            if active.region.medium() == Medium::Tmpfs && !dir.path().starts_with("/dev/shm") {
                eprintln!("notice: {case}: the temporary directory is on tmpfs; the disk's case is not checked");
                continue;
            }
            let options = Options { durability, segment_size_bytes: MIB, background_idle, ..Options::default() };
            let mut writer =
                LogWriter::new(dir.path().to_path_buf(), &options, active, SEGMENT_HEADER_BYTES, 0, Arc::default());
            writer.offset = MIB / 4;
            writer.prepare_spare_when_due(&SegmentSet::default());
            assert!(writer.spare.is_some(), "{case}: a spare is due past a quarter of the first segment");
            writer.roll(&SegmentSet::default()).unwrap();
            assert_eq!(writer.active.id, 2);
            assert_eq!(writer.spare.is_some(), at_once, "{case}: a spare right after the roll");
        }
    }

    /// Where prefaulting dirties nothing, the whole segment is prefaulted
    /// at once, from the writer's place on.
    #[test]
    fn a_clean_prefault_takes_the_whole_segment() {
        let dir = tempfile::tempdir().unwrap();
        let segment = Segment::create(dir.path(), 1, 4 * MIB, Durability::Sync, NewBlocks::Written).unwrap();
        assert!(!segment.region.prefaults_dirty());
        assert_eq!(prefault_window(&segment), 4 * MIB);
        segment.written_bytes.store(MIB as u64, Ordering::Release);
        prefault_ahead_of_writer(&segment, &AtomicBool::new(false), prefault_window(&segment));
        let pages = resident(&segment);
        assert!(pages[MIB / 4096..].iter().all(|page| *page));
    }

    /// On a page-cache file in `sync` mode the next segment's blocks are
    /// written as zeros after small groups and only reserved after large
    /// ones; each segment is judged by its own groups.
    #[test]
    fn the_next_segments_blocks_follow_the_sizes_of_the_groups() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options { durability: Durability::Sync, segment_size_bytes: MIB, ..Options::default() };
        let active = Arc::new(Segment::create(dir.path(), 1, MIB, Durability::Sync, NewBlocks::Written).unwrap());
        let mut writer =
            LogWriter::new(dir.path().to_path_buf(), &options, active, SEGMENT_HEADER_BYTES, 0, Arc::default());
        let segments = SegmentSet::default();
        let body = vec![7u8; 1000];
        let header = FrameHeader { flags: 0, frame_len: (FRAME_HEADER_BYTES + body.len()) as u32, count: 1, seq: 1 };
        let group = |writer: &mut LogWriter, frames: usize| {
            for _ in 0..frames {
                writer.append(&header, &body, &segments).unwrap();
            }
            writer.finish_group().unwrap();
        };
        assert_eq!(writer.next_blocks(), NewBlocks::Written, "nothing measured yet");
        for _ in 0..4 {
            group(&mut writer, 4);
        }
        assert_eq!(writer.next_blocks(), NewBlocks::Written, "groups of 4 KiB");
        for _ in 0..8 {
            group(&mut writer, 100);
        }
        assert_eq!(writer.position().0, 1);
        assert_eq!(writer.next_blocks(), NewBlocks::Reserved, "groups averaging 68 KiB");
        while writer.position().0 == 1 {
            group(&mut writer, 4);
        }
        assert_eq!(writer.next_blocks(), NewBlocks::Written, "the new segment's first group is small");
        for _ in 0..2 {
            group(&mut writer, 100);
        }
        assert_eq!(writer.next_blocks(), NewBlocks::Reserved, "the small groups before the roll do not count");
    }

    /// A `sync` database on a page-cache file system written in large
    /// groups, so that its later segments' blocks are only reserved: every
    /// write reads back, also after reopening.
    #[test]
    fn sync_writes_in_large_groups_read_back_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options { durability: Durability::Sync, segment_size_bytes: MIB, ..Options::default() };
        const KEYS: u32 = 5_000;
        {
            let db = Db::open(dir.path(), options.clone()).unwrap();
            for batch in (0..KEYS).collect::<Vec<_>>().chunks(100) {
                let mut writes = crate::WriteBatch::new();
                for key in batch {
                    writes.put(&key.to_be_bytes(), &value(*key, 1));
                }
                db.write(writes).unwrap();
            }
            assert!(db.stats().segments >= 4, "{:?}", db.stats());
            for key in (0..KEYS).step_by(97) {
                assert_eq!(db.get(&key.to_be_bytes()).unwrap().unwrap(), value(key, 1));
            }
        }
        let db = Db::open(dir.path(), options).unwrap();
        for key in 0..KEYS {
            assert_eq!(db.get(&key.to_be_bytes()).unwrap().as_deref(), Some(&value(key, 1)[..]), "key {key}");
        }
    }

    /// A `buffered` database on a page-cache file system whose segments
    /// are wider than the prefault window: writes across several segments
    /// read back, close (stopping every prefaulter) and reopen whole.
    #[test]
    fn buffered_writes_across_windowed_segments_read_back_after_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let options = Options { durability: Durability::Buffered, segment_size_bytes: 16 * MIB, ..Options::default() };
        const KEYS: u32 = 50_000;
        {
            let db = Db::open(dir.path(), options.clone()).unwrap();
            for key in 0..KEYS {
                db.put(&key.to_be_bytes(), &value(key, 1)).unwrap();
            }
            assert!(db.stats().segments >= 3, "{:?}", db.stats());
            for key in (0..KEYS).step_by(997) {
                assert_eq!(db.get(&key.to_be_bytes()).unwrap().unwrap(), value(key, 1));
            }
        }
        let db = Db::open(dir.path(), options).unwrap();
        for key in 0..KEYS {
            assert_eq!(db.get(&key.to_be_bytes()).unwrap().as_deref(), Some(&value(key, 1)[..]), "key {key}");
        }
    }
}
