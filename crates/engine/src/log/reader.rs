//! Walks the frames of a segment, for recovery and GC.
//!
//! Zero bytes where a header should be are padding (the writer aligns each
//! durable group to 256 bytes) unless they sit on a 256-byte boundary, which
//! marks the end of the data written to the segment.

use crate::log::record::{
    align_up, decode_frame, DecodeError, EntryView, FrameHeader, FLAG_GROUP_START, FRAME_ALIGN_BYTES,
    FRAME_HEADER_BYTES,
};
use crate::log::writer::GROUP_ALIGN_BYTES;

/// How a scan stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ScanEnd {
    /// No more data: the next write goes at `end`.
    Clean { end: usize },
    /// A frame at `offset` failed to decode.
    Bad { offset: usize, error: DecodeError },
}

/// Calls `on_entry(frame_offset, header, entry_offset_in_frame, entry)` for
/// every entry of every valid frame from `start`, in log order.
pub fn scan<'a>(
    bytes: &'a [u8],
    start: usize,
    on_entry: impl FnMut(usize, &FrameHeader, usize, EntryView<'a>),
) -> ScanEnd {
    scan_until(bytes, start, usize::MAX, on_entry)
}

/// As `scan`, stopping before the first frame at or after `stop`; then
/// `Clean { end }` is where the next piece starts. `end < stop` means the
/// data ended (GC scans a segment in pieces).
pub fn scan_until<'a>(
    bytes: &'a [u8],
    start: usize,
    stop: usize,
    mut on_entry: impl FnMut(usize, &FrameHeader, usize, EntryView<'a>),
) -> ScanEnd {
    let mut at = start;
    loop {
        if at >= stop {
            return ScanEnd::Clean { end: at };
        }
        if at + FRAME_HEADER_BYTES > bytes.len() {
            return ScanEnd::Clean { end: at.min(bytes.len()) };
        }
        // Padding can be shorter than a header: test only the gap up to the
        // next group boundary, or we would read into the next group's header.
        let boundary = align_up(at, GROUP_ALIGN_BYTES).min(bytes.len());
        let gap = &bytes[at.min(boundary)..boundary.min(at + FRAME_HEADER_BYTES)];
        if !at.is_multiple_of(GROUP_ALIGN_BYTES) && gap.iter().all(|b| *b == 0) {
            at = boundary;
            continue;
        }

        match decode_frame(&bytes[at..], |header, entry_at, entry| on_entry(at, header, entry_at, entry)) {
            Ok(header) => at += header.next_offset(),
            Err(DecodeError::Zero) => return ScanEnd::Clean { end: at },
            Err(error) => return ScanEnd::Bad { offset: at, error },
        }
    }
}

/// The offset of the first fully valid group-start frame after `from`.
/// Finding one proves that everything before it had been persisted.
pub fn find_group_start(bytes: &[u8], from: usize) -> Option<usize> {
    let mut at = align_up(from, FRAME_ALIGN_BYTES);
    while at + FRAME_HEADER_BYTES <= bytes.len() {
        let header_ok = FrameHeader::decode(&bytes[at..]).is_ok_and(|h| h.flags & FLAG_GROUP_START != 0);
        if header_ok && decode_frame(&bytes[at..], |_, _, _| {}).is_ok() {
            return Some(at);
        }
        at += FRAME_ALIGN_BYTES;
    }
    None
}
