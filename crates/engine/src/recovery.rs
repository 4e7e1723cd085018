//! Rebuilds the index at open: checkpoint (if any), then the log tail.
//! The procedure is written out step by step in docs/recovery.md.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Result};
use crate::index::memtable::{Key, Loc, Slot};
use crate::log::reader::{find_group_start, scan, ScanEnd};
use crate::log::record::EntryKind;
use crate::log::segment::{list_segment_files, Segment, SEGMENT_HEADER_BYTES};
use crate::options::Options;

/// What recovery found and did; kept by the open database.
#[derive(Debug, Clone, Default)]
pub struct RecoveryReport {
    /// Keys loaded from the index checkpoint (0 without one).
    pub checkpoint_keys: u64,
    pub replayed_frames: u64,
    pub replayed_bytes: u64,
    /// A torn or corrupt tail that was cut off (never acknowledged data, or
    /// a damaged last record indistinguishable from it).
    pub truncated: Option<Truncation>,
    /// Corrupt ranges skipped in repair mode.
    pub skipped: Vec<Truncation>,
    /// Segment files removed: never initialised, or wholly after a torn tail.
    pub removed_segments: Vec<PathBuf>,
    pub elapsed: Duration,
}

#[derive(Debug, Clone)]
pub struct Truncation {
    pub path: PathBuf,
    pub offset: u64,
    pub reason: String,
}

/// Where replay starts, from a checkpoint.
pub struct Start {
    pub map: BTreeMap<Key, Slot>,
    pub segment: u32,
    pub offset: usize,
    pub last_seq: u64,
}

pub struct Recovered {
    pub map: BTreeMap<Key, Slot>,
    pub segments: Vec<Arc<Segment>>,
    /// The newest segment; writing continues in it at `end`.
    pub end: usize,
    pub last_seq: u64,
    pub report: RecoveryReport,
}

fn replay(map: &mut BTreeMap<Key, Slot>, key: &[u8], loc: Loc, seq: u64) {
    // Newest sequence number wins; on a tie the later copy wins (a GC
    // relocation keeps the sequence number of what it copied).
    match map.get_mut(key) {
        Some(slot) if slot.seq > seq => {}
        Some(slot) => *slot = Slot::new(loc, seq),
        None => {
            map.insert(Key::from_slice(key), Slot::new(loc, seq));
        }
    }
}

fn open_segments(dir: &Path, options: &Options, report: &mut RecoveryReport) -> Result<Vec<Arc<Segment>>> {
    let mut segments = Vec::new();
    let files = list_segment_files(dir)?;
    let last_id = files.last().map(|(id, _)| *id);
    for (id, path) in files {
        if Some(id) == last_id {
            restore_truncated_length(&path, report)?;
        }
        match Segment::open(&path, id, options.durability) {
            Ok(segment) => segments.push(Arc::new(segment)),
            Err(error) => {
                // A crash between creating a segment file and persisting its
                // header leaves zeros: it never held data.
                let head = std::fs::read(&path).map_err(Error::io(&path, "read"))?;
                if head.iter().take(SEGMENT_HEADER_BYTES).all(|b| *b == 0) {
                    std::fs::remove_file(&path).map_err(Error::io(&path, "remove"))?;
                    report.removed_segments.push(path);
                } else {
                    return Err(error);
                }
            }
        }
    }
    Ok(segments)
}

/// The newest segment cut short (a copy or a file system that lost its
/// tail) is a torn tail: give it back its length (the lost part reads as
/// zeros, the end of the log) and report it.
fn restore_truncated_length(path: &Path, report: &mut RecoveryReport) -> Result<()> {
    let bytes_on_disk = std::fs::metadata(path).map_err(Error::io(path, "stat"))?.len();
    let mut header = [0u8; 40];
    let mut file = std::fs::File::open(path).map_err(Error::io(path, "open"))?;
    if std::io::Read::read_exact(&mut file, &mut header).is_err() {
        return Ok(());
    }
    let Some(size) = crate::log::segment::declared_size(&header) else { return Ok(()) };
    if size > bytes_on_disk {
        let file = std::fs::OpenOptions::new().write(true).open(path).map_err(Error::io(path, "open"))?;
        file.set_len(size).map_err(Error::io(path, "set_len"))?;
        file.sync_all().map_err(Error::io(path, "fsync"))?;
        report.truncated = Some(Truncation {
            path: path.to_path_buf(),
            offset: bytes_on_disk,
            reason: format!("file was {bytes_on_disk} bytes, its header says {size}"),
        });
    }
    Ok(())
}

pub fn recover(dir: &Path, options: &Options, start: Option<Start>) -> Result<Recovered> {
    let started = Instant::now();
    let mut report = RecoveryReport::default();
    let mut segments = open_segments(dir, options, &mut report)?;
    let (mut map, start_segment, start_offset, mut last_seq) = match start {
        Some(start) => {
            report.checkpoint_keys = start.map.len() as u64;
            (start.map, start.segment, start.offset, start.last_seq)
        }
        None => (BTreeMap::new(), segments.first().map_or(0, |s| s.id), SEGMENT_HEADER_BYTES, 0),
    };
    let Some(mut i) = segments.iter().position(|s| s.id == start_segment) else {
        if segments.is_empty() && map.is_empty() {
            return Ok(Recovered { map, segments, end: SEGMENT_HEADER_BYTES, last_seq, report });
        }
        return Err(Error::Corruption {
            path: dir.join(crate::log::segment::segment_file_name(start_segment)),
            offset: 0,
            reason: "the checkpoint starts replay in this segment, which is missing".into(),
        });
    };
    // Segments before the checkpoint are not scanned; they were sealed when
    // full, so their capacity is a close upper bound of what they hold.
    for sealed in &segments[..i] {
        sealed.written_bytes.store(sealed.capacity_bytes() as u64, Ordering::Relaxed);
    }
    let mut at = start_offset;
    let mut end = SEGMENT_HEADER_BYTES;
    while i < segments.len() {
        let segment = segments[i].clone();
        let bytes = segment.region.as_slice();
        let outcome = scan(bytes, at, |frame_at, header, entry_at, entry| {
            if entry_at == crate::log::record::FRAME_HEADER_BYTES {
                report.replayed_frames += 1;
                report.replayed_bytes += header.frame_len as u64;
            }
            last_seq = last_seq.max(header.seq);
            let loc = match entry.kind {
                EntryKind::Put => Loc { seg: segment.id, off: (frame_at + entry_at) as u32, len: entry.len as u32 },
                EntryKind::Delete => Loc::TOMBSTONE,
            };
            replay(&mut map, entry.key, loc, header.seq);
        });
        match outcome {
            ScanEnd::Clean { end: clean_end } => {
                segment.written_bytes.store(clean_end as u64, Ordering::Relaxed);
                end = clean_end;
                i += 1;
                at = SEGMENT_HEADER_BYTES;
            }
            ScanEnd::Bad { offset, error } => {
                // A valid group start later on proves this frame had been
                // persisted and acknowledged: corruption, not a torn write.
                let later = find_group_start(bytes, offset + 8).map(|o| (i, o)).or_else(|| {
                    (i + 1..segments.len()).find_map(|j| {
                        find_group_start(segments[j].region.as_slice(), SEGMENT_HEADER_BYTES).map(|o| (j, o))
                    })
                });
                let reason = format!("{error}");
                match later {
                    Some((j, resume)) if options.repair => {
                        report.skipped.push(Truncation {
                            path: segment.path().to_path_buf(),
                            offset: offset as u64,
                            reason: format!("{reason}; skipped to segment {} offset {resume}", segments[j].id),
                        });
                        if j != i {
                            segment.written_bytes.store(offset as u64, Ordering::Relaxed);
                        }
                        i = j;
                        at = resume;
                    }
                    Some((j, resume)) => {
                        return Err(Error::Corruption {
                            path: segment.path().to_path_buf(),
                            offset: offset as u64,
                            reason: format!(
                                "{reason}; acknowledged data follows (segment {} offset {resume}); open with repair to skip it",
                                segments[j].id
                            ),
                        });
                    }
                    None => {
                        report.truncated =
                            Some(Truncation { path: segment.path().to_path_buf(), offset: offset as u64, reason });
                        for later in segments.drain(i + 1..) {
                            report.removed_segments.push(later.path().to_path_buf());
                            later.mark_for_deletion();
                        }
                        segment.written_bytes.store(offset as u64, Ordering::Relaxed);
                        end = offset;
                        break;
                    }
                }
            }
        }
    }
    if let Some(last) = segments.last() {
        // Zero everything after the end so a later write can never be
        // followed by stale frames that would replay on the next open.
        let tail = last.capacity_bytes() - end;
        // SAFETY: nothing reads past the end of the log during recovery.
        unsafe { last.region.zero(end, tail)? };
        last.region.persist(end, tail)?;
    }
    map.retain(|_, slot| !slot.loc.is_tombstone());
    let by_id: BTreeMap<u32, &Arc<Segment>> = segments.iter().map(|s| (s.id, s)).collect();
    for slot in map.values() {
        match by_id.get(&slot.loc.seg) {
            Some(segment) => {
                segment.live_bytes.fetch_add(slot.loc.len as u64, Ordering::Relaxed);
            }
            None => {
                return Err(Error::Corruption {
                    path: dir.join(crate::log::segment::segment_file_name(slot.loc.seg)),
                    offset: slot.loc.off as u64,
                    reason: "the index points into this segment, which is missing".into(),
                })
            }
        }
    }
    report.elapsed = started.elapsed();
    Ok(Recovered { map, segments, end, last_seq, report })
}
