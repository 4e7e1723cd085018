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
use std::sync::atomic::Ordering;
use std::sync::mpsc::{sync_channel, Receiver};
use std::sync::Arc;
use std::thread::JoinHandle;

use scaledkv_pmem::{Durability, Medium};

use crate::error::{Error, Result};
use crate::log::record::{align_up, FrameHeader, FRAME_ALIGN_BYTES, FRAME_HEADER_BYTES};
use crate::log::segment::{Recycler, Segment, SegmentSet};
use crate::options::Options;

pub const GROUP_ALIGN_BYTES: usize = 256;

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
    /// Segments filled earlier in the current group, not yet persisted.
    sealed_in_group: Vec<(Arc<Segment>, usize, usize)>,
    /// When a region write is a system call (`Region::writes_by_syscall`),
    /// the group's frames are gathered here, from `staged_from` in the
    /// active segment, and written once before the persist.
    staged: Vec<u8>,
    staged_from: usize,
    next_id: u32,
    /// The next segment, created (or recycled) off the critical path (see
    /// `prepare_spare_when_due`), sent once it is mapped; its thread then
    /// prefaults it.
    spare: Option<Spare>,
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
}

/// The next segment, sent by the thread that prepares it.
struct Spare {
    segment: Receiver<Result<Arc<Segment>>>,
    thread: JoinHandle<()>,
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
        let next_id = active.id + 1;
        let mut writer = LogWriter {
            dir,
            durability: options.durability,
            segment_size_bytes: options.segment_size_bytes,
            background_idle: options.background_idle,
            active,
            offset,
            group_start: offset,
            sealed_in_group: Vec::new(),
            staged: Vec::new(),
            staged_from: offset,
            next_id,
            spare: None,
            helpers: Vec::new(),
            recycler,
            last_seq,
            appended_bytes: 0,
            appended_entries: 0,
        };
        writer.prepare_spare_when_due();
        writer
    }

    /// Starts preparing the next segment once a quarter of the active one
    /// is written: early enough that it is ready long before the roll
    /// (prefaulting 64 MiB took 40-100 ms under load, filling the other
    /// 48 MiB takes longer), late enough that a fresh database does not
    /// spend its first milliseconds zeroing a segment it may never need
    /// (that competed with the first requests of a short benchmark).
    fn prepare_spare_when_due(&mut self) {
        if self.spare.is_none() && self.offset >= self.active.capacity_bytes() / 4 {
            self.spare = Some(self.spawn_spare());
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
        let idle = self.background_idle;
        let recycled = self.recycler.take();
        let (sender, receiver) = sync_channel(1);
        // Named so that profiles tell its page-fault work from the caller's.
        let thread = std::thread::Builder::new()
            .name("scaledkv-spare".into())
            .spawn(move || {
                crate::background::lower_this_thread(idle);
                let (segment, fresh) = match recycled {
                    Some(mut segment) => (segment.recycle(&dir, id, durability).map(|()| segment), false),
                    None => (Segment::create(&dir, id, size, durability, false), true),
                };
                let segment = segment.map(Arc::new);
                let prefault = segment.as_ref().ok().filter(|_| fresh).cloned();
                // A writer that is gone (the database closed) needs nothing.
                let _ = sender.send(segment);
                if let Some(segment) = prefault {
                    if idle {
                        crate::background::pace_this_thread();
                    }
                    segment.region.prefault_pausing(crate::background::pause_point);
                }
            })
            .expect("spawn the segment-preparing thread");
        Spare { segment: receiver, thread }
    }

    /// Waits until no helper thread of this writer is left to change the
    /// directory's files (a prefault, a writeback whose segment, freed
    /// meanwhile, is removed when the thread lets it go; a recycled spare's
    /// rename): a copy of the directory is then the files a crash would
    /// leave.
    #[cfg(test)]
    pub fn wait_for_helpers(&mut self) {
        for thread in self.helpers.drain(..) {
            let _ = thread.join();
        }
        if let Some(spare) = &self.spare {
            while !spare.thread.is_finished() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
        }
    }

    pub fn persist_waits_for_device(&self) -> bool {
        self.active.region.persist_waits_for_device()
    }

    pub fn active_id(&self) -> u32 {
        self.active.id
    }

    /// (active segment id, next write offset): where the log ends now.
    pub fn position(&self) -> (u32, usize) {
        (self.active.id, self.offset)
    }

    /// Writes one frame (`header` + `body`) and returns (segment id, offset).
    pub fn append(&mut self, header: &FrameHeader, body: &[u8], segments: &SegmentSet) -> Result<(u32, usize)> {
        let frame_len = header.frame_len as usize;
        debug_assert_eq!(frame_len, FRAME_HEADER_BYTES + body.len());
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
            self.staged.extend_from_slice(body);
            // Alignment padding is zeros, as in the file.
            self.staged.resize(next - self.staged_from, 0);
        } else {
            // SAFETY: bytes past `self.offset` are unpublished: no index
            // entry points there until this group is persisted and applied.
            unsafe {
                region.write(at, &header.encode())?;
                region.write(at + FRAME_HEADER_BYTES, body)?;
            }
        }
        self.offset = next;
        self.appended_bytes += frame_len as u64;
        self.appended_entries += header.count as u64;
        self.prepare_spare_when_due();
        Ok((self.active.id, at))
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
        // Not prepared yet only for a frame larger than three quarters of a segment.
        let spare = self.spare.take().unwrap_or_else(|| self.spawn_spare());
        let received = spare.segment.recv();
        self.helpers.retain(|thread| !thread.is_finished());
        self.helpers.push(spare.thread);
        let next = match received {
            Ok(result) => result?,
            Err(_) => return Err(Error::Poisoned("segment preparation thread panicked".into())),
        };
        segments.insert(next.clone());
        let old = std::mem::replace(&mut self.active, next);
        old.written_bytes.store(self.offset as u64, Ordering::Release);
        if self.durability == Durability::Buffered && old.region.medium() == Medium::PageCache {
            self.helpers.extend(start_write_back(old.clone(), self.background_idle));
        }
        self.sealed_in_group.push((old, self.group_start, self.offset));
        self.offset = crate::log::segment::SEGMENT_HEADER_BYTES;
        self.group_start = self.offset;
        self.next_id += 1;
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
        }
        if aligns_groups(&self.active) {
            self.offset = align_up(self.offset, GROUP_ALIGN_BYTES).min(self.active.capacity_bytes());
        }
        self.group_start = self.offset;
        self.active.written_bytes.store(self.offset as u64, Ordering::Release);
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

/// Starts the device writes of a full segment's pages on a thread of its
/// own. In `buffered` mode on a disk's file system nothing else does until
/// the kernel's dirty limits (10% of memory here, 2.4 GB): after 4M
/// overwrites of 8/256 B, readers then shared the cores with gigabytes of
/// writeback of mapped pages, each page write-protected in the process's
/// page tables. Disk, `fillrandom` then `overwrite,readrandom,readseq`,
/// ABBA: with writeback started here, readrandom 541-635k -> 1.04-1.06M
/// and readseq 2.1-2.5M -> 4.4-4.7M after 4M x 8/256 B overwrites; with
/// the segment's page-table entries dropped first as well
/// (`Region::start_write_back`), the writes gained too: 4M x 8/256 B
/// fillrandom 1.09-1.20M -> 1.47-1.64M and overwrite 0.90-1.07M ->
/// 1.45-1.47M, 1M x 16/1024 B fillrandom 370-398k -> 907-915k.
fn start_write_back(segment: Arc<Segment>, idle: bool) -> Option<JoinHandle<()>> {
    let spawned = std::thread::Builder::new().name("scaledkv-writeback".into()).spawn(move || {
        crate::background::lower_this_thread(idle);
        if let Err(error) = segment.region.start_write_back() {
            tracing::warn!(%error, "starting writeback of a full segment failed");
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
        if let Some(spare) = self.spare.take() {
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
