//! Byte layout of log frames and entries (see docs/format.md).
//!
//! A *frame* is one atomic write batch: a 24-byte header followed by its
//! entries. An *entry* is one put or delete with its own CRC, so a point read
//! can verify the value it returns without reading the rest of the frame.
//!
//! Checklist: if you change a layout here, bump `FORMAT_VERSION`, update
//! docs/format.md and the corruption tests.
//!
//! Frame header, little endian:
//! ```text
//! 0  u32 header crc32c over bytes 4..24
//! 4  u16 magic 0x4B53 ("SK")
//! 6  u8  flags (GROUP_START, RELOCATED)
//! 7  u8  format version
//! 8  u32 frame length in bytes, header included (next frame at align8(end))
//! 12 u32 entry count
//! 16 u64 sequence number of the batch
//! ```
//! Entry, little endian:
//! ```text
//! 0  u32 crc32c over bytes 4..end of value
//! 4  u8  kind (1 put, 2 delete)
//! 5  u8  flags (HAS_EXPIRY)
//! 6  u16 key length
//! 8  u32 value length
//! 12 u64 expiry, ms since the Unix epoch (only with HAS_EXPIRY)
//! .. key, then value
//! ```

pub const FORMAT_VERSION: u8 = 1;
pub const FRAME_HEADER_BYTES: usize = 24;
pub const ENTRY_HEADER_BYTES: usize = 12;
pub const EXPIRY_BYTES: usize = 8;
pub const FRAME_MAGIC: u16 = 0x4B53;
/// Frames start on 8-byte boundaries so a scan for the next valid header
/// after a corrupt one only tries one offset in eight.
pub const FRAME_ALIGN_BYTES: usize = 8;

/// First frame written by a group commit. A valid group start after a bad
/// frame proves the bad frame was acknowledged (the next group is only
/// written after the previous one was persisted), so it is corruption, not
/// a torn tail.
pub const FLAG_GROUP_START: u8 = 1;
/// A live entry copied forward by GC; it keeps its original sequence number.
pub const FLAG_RELOCATED: u8 = 2;

const ENTRY_HAS_EXPIRY: u8 = 1;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub enum EntryKind {
    Put = 1,
    Delete = 2,
}

/// Why bytes did not decode as a frame or an entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecodeError {
    /// The header is all zeros: padding or the end of written data.
    Zero,
    /// Fewer bytes than the header or length claims.
    Truncated,
    BadMagic,
    BadVersion(u8),
    BadChecksum,
    BadKind(u8),
    /// Lengths that do not add up (entries do not tile the frame, ...).
    BadLength,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::Zero => f.write_str("zero header"),
            DecodeError::Truncated => f.write_str("truncated record"),
            DecodeError::BadMagic => f.write_str("bad magic"),
            DecodeError::BadVersion(v) => write!(f, "unsupported format version {v}"),
            DecodeError::BadChecksum => f.write_str("checksum mismatch"),
            DecodeError::BadKind(k) => write!(f, "unknown entry kind {k}"),
            DecodeError::BadLength => f.write_str("inconsistent lengths"),
        }
    }
}

pub fn align_up(value: usize, align: usize) -> usize {
    debug_assert!(align.is_power_of_two());
    (value + align - 1) & !(align - 1)
}

fn u16_at(bytes: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([bytes[at], bytes[at + 1]])
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// Bytes an entry takes in the log.
pub fn entry_len(key_len: usize, value_len: usize, has_expiry: bool) -> usize {
    ENTRY_HEADER_BYTES + if has_expiry { EXPIRY_BYTES } else { 0 } + key_len + value_len
}

/// Appends one entry, CRC included, to `out`. Lengths must already be
/// validated against the limits (they fit their fields).
pub fn encode_entry(out: &mut Vec<u8>, kind: EntryKind, key: &[u8], value: &[u8], expiry_ms: Option<u64>) {
    encode_entry_parts(out, kind, key, &[value], expiry_ms);
}

/// Like `encode_entry`, with the value given as consecutive parts (so a
/// caller can prefix a value without copying it first).
pub fn encode_entry_parts(out: &mut Vec<u8>, kind: EntryKind, key: &[u8], parts: &[&[u8]], expiry_ms: Option<u64>) {
    let header = EntryHeader::new(kind, key, parts, expiry_ms);
    out.reserve(header.entry_len);
    out.extend_from_slice(header.as_bytes());
    out.extend_from_slice(key);
    for part in parts {
        out.extend_from_slice(part);
    }
}

/// An entry's header, CRC included, for a key and value held elsewhere:
/// the entry is this header, then the key, then the value's parts.
pub struct EntryHeader {
    bytes: [u8; ENTRY_HEADER_BYTES + EXPIRY_BYTES],
    len: usize,
    /// Bytes of the whole entry.
    pub entry_len: usize,
}

impl EntryHeader {
    /// Lengths must already be validated against the limits (they fit
    /// their fields).
    pub fn new(kind: EntryKind, key: &[u8], parts: &[&[u8]], expiry_ms: Option<u64>) -> EntryHeader {
        let value_len: usize = parts.iter().map(|p| p.len()).sum();
        assert!(key.len() <= u16::MAX as usize && value_len <= u32::MAX as usize);
        let mut bytes = [0u8; ENTRY_HEADER_BYTES + EXPIRY_BYTES];
        bytes[4] = kind as u8;
        bytes[5] = if expiry_ms.is_some() { ENTRY_HAS_EXPIRY } else { 0 };
        bytes[6..8].copy_from_slice(&(key.len() as u16).to_le_bytes());
        bytes[8..12].copy_from_slice(&(value_len as u32).to_le_bytes());
        let mut len = ENTRY_HEADER_BYTES;
        if let Some(expiry) = expiry_ms {
            bytes[12..20].copy_from_slice(&expiry.to_le_bytes());
            len += EXPIRY_BYTES;
        }
        let mut crc = scaledkv_pmem::crc::crc32c_append(scaledkv_pmem::crc::crc32c(&bytes[4..len]), key);
        for part in parts {
            crc = scaledkv_pmem::crc::crc32c_append(crc, part);
        }
        bytes[..4].copy_from_slice(&crc.to_le_bytes());
        EntryHeader { bytes, len, entry_len: len + key.len() + value_len }
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// A decoded entry borrowing the log bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryView<'a> {
    pub kind: EntryKind,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub expiry_ms: Option<u64>,
    /// Total bytes of the entry, header included.
    pub len: usize,
}

/// Decodes the entry at the start of `bytes`; `verify` checks the CRC.
pub fn decode_entry(bytes: &[u8], verify: bool) -> Result<EntryView<'_>, DecodeError> {
    if bytes.len() < ENTRY_HEADER_BYTES {
        return Err(DecodeError::Truncated);
    }
    let kind = match bytes[4] {
        1 => EntryKind::Put,
        2 => EntryKind::Delete,
        0 if bytes[..ENTRY_HEADER_BYTES].iter().all(|b| *b == 0) => return Err(DecodeError::Zero),
        other => return Err(DecodeError::BadKind(other)),
    };
    let flags = bytes[5];
    let key_len = u16_at(bytes, 6) as usize;
    let value_len = u32_at(bytes, 8) as usize;
    let has_expiry = flags & ENTRY_HAS_EXPIRY != 0;
    let len = entry_len(key_len, value_len, has_expiry);
    if bytes.len() < len {
        return Err(DecodeError::Truncated);
    }
    if verify && scaledkv_pmem::crc::crc32c(&bytes[4..len]) != u32_at(bytes, 0) {
        return Err(DecodeError::BadChecksum);
    }
    let (expiry_ms, key_start) = if has_expiry {
        (Some(u64_at(bytes, ENTRY_HEADER_BYTES)), ENTRY_HEADER_BYTES + EXPIRY_BYTES)
    } else {
        (None, ENTRY_HEADER_BYTES)
    };
    let value_start = key_start + key_len;
    Ok(EntryView { kind, key: &bytes[key_start..value_start], value: &bytes[value_start..len], expiry_ms, len })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    pub flags: u8,
    pub frame_len: u32,
    pub count: u32,
    pub seq: u64,
}

impl FrameHeader {
    pub fn encode(&self) -> [u8; FRAME_HEADER_BYTES] {
        let mut out = [0u8; FRAME_HEADER_BYTES];
        out[4..6].copy_from_slice(&FRAME_MAGIC.to_le_bytes());
        out[6] = self.flags;
        out[7] = FORMAT_VERSION;
        out[8..12].copy_from_slice(&self.frame_len.to_le_bytes());
        out[12..16].copy_from_slice(&self.count.to_le_bytes());
        out[16..24].copy_from_slice(&self.seq.to_le_bytes());
        let crc = scaledkv_pmem::crc::crc32c(&out[4..]);
        out[..4].copy_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<FrameHeader, DecodeError> {
        if bytes.len() < FRAME_HEADER_BYTES {
            return Err(DecodeError::Truncated);
        }
        let header = &bytes[..FRAME_HEADER_BYTES];
        if header.iter().all(|b| *b == 0) {
            return Err(DecodeError::Zero);
        }
        if u16_at(header, 4) != FRAME_MAGIC {
            return Err(DecodeError::BadMagic);
        }
        if scaledkv_pmem::crc::crc32c(&header[4..]) != u32_at(header, 0) {
            return Err(DecodeError::BadChecksum);
        }
        if header[7] != FORMAT_VERSION {
            return Err(DecodeError::BadVersion(header[7]));
        }
        let frame = FrameHeader {
            flags: header[6],
            frame_len: u32_at(header, 8),
            count: u32_at(header, 12),
            seq: u64_at(header, 16),
        };
        if (frame.frame_len as usize) < FRAME_HEADER_BYTES {
            return Err(DecodeError::BadLength);
        }
        Ok(frame)
    }

    /// Offset of the next frame relative to this one's start.
    pub fn next_offset(&self) -> usize {
        align_up(self.frame_len as usize, FRAME_ALIGN_BYTES)
    }
}

/// Decodes and fully verifies the frame at the start of `bytes`: header
/// CRC, every entry CRC, and that the entries tile the frame exactly.
/// Calls `on_entry(header, offset_in_frame, entry)` for each entry once all
/// of them verified, so a torn frame applies nothing.
pub fn decode_frame<'a>(
    bytes: &'a [u8],
    mut on_entry: impl FnMut(&FrameHeader, usize, EntryView<'a>),
) -> Result<FrameHeader, DecodeError> {
    let header = FrameHeader::decode(bytes)?;
    let frame_len = header.frame_len as usize;
    if bytes.len() < frame_len {
        return Err(DecodeError::Truncated);
    }
    let frame = &bytes[..frame_len];
    let mut at = FRAME_HEADER_BYTES;
    for _ in 0..header.count {
        let entry = decode_entry(&frame[at..], true).map_err(|e| match e {
            DecodeError::Zero => DecodeError::Truncated,
            other => other,
        })?;
        at += entry.len;
    }
    if at != frame_len {
        return Err(DecodeError::BadLength);
    }
    let mut at = FRAME_HEADER_BYTES;
    for _ in 0..header.count {
        let entry = decode_entry(&frame[at..], false)?;
        on_entry(&header, at, entry);
        at += entry.len;
    }
    Ok(header)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An entry written from its parts (`Db::put` alone: header, key,
    /// value straight into the log) is byte for byte the entry a batch
    /// encodes, and decodes with its checksum.
    #[test]
    fn an_entry_from_parts_is_the_batch_entry() {
        let value: Vec<u8> = (0..1024u32).map(|i| i as u8).collect();
        type Case<'a> = (EntryKind, &'a [u8], &'a [u8], Option<u64>);
        let cases: [Case<'_>; 4] = [
            (EntryKind::Put, b"key:0001", &value, None),
            (EntryKind::Put, b"k", b"", Some(1_700_000_000_000)),
            (EntryKind::Delete, b"gone", b"", None),
            (EntryKind::Put, &[7u8; 300], &value[..77], Some(5)),
        ];
        for (kind, key, value, expiry) in cases {
            let mut batch = Vec::new();
            encode_entry(&mut batch, kind, key, value, expiry);
            let header = EntryHeader::new(kind, key, &[value], expiry);
            let parts = [header.as_bytes(), key, value].concat();
            assert_eq!(parts, batch);
            assert_eq!(header.entry_len, batch.len());
            let decoded = decode_entry(&parts, true).unwrap();
            assert_eq!((decoded.kind, decoded.key, decoded.value, decoded.expiry_ms), (kind, key, value, expiry));
        }
    }

    fn sample_frame() -> Vec<u8> {
        let mut body = Vec::new();
        encode_entry(&mut body, EntryKind::Put, b"alpha", b"one", None);
        encode_entry(&mut body, EntryKind::Delete, b"beta", b"", None);
        encode_entry(&mut body, EntryKind::Put, b"gamma", &[9u8; 100], Some(1_700_000_000_000));
        let header = FrameHeader {
            flags: FLAG_GROUP_START,
            frame_len: (FRAME_HEADER_BYTES + body.len()) as u32,
            count: 3,
            seq: 42,
        };
        let mut frame = header.encode().to_vec();
        frame.extend_from_slice(&body);
        frame
    }

    #[test]
    fn frame_roundtrip() {
        let frame = sample_frame();
        let mut seen = Vec::new();
        let header =
            decode_frame(&frame, |_, _, e| seen.push((e.kind, e.key.to_vec(), e.value.to_vec(), e.expiry_ms))).unwrap();
        assert_eq!(header.seq, 42);
        assert_eq!(header.flags, FLAG_GROUP_START);
        assert_eq!(seen.len(), 3);
        assert_eq!(seen[0], (EntryKind::Put, b"alpha".to_vec(), b"one".to_vec(), None));
        assert_eq!(seen[1].0, EntryKind::Delete);
        assert_eq!(seen[2].3, Some(1_700_000_000_000));
        assert_eq!(seen[2].2, vec![9u8; 100]);
    }

    #[test]
    fn every_single_bit_flip_is_detected() {
        let frame = sample_frame();
        for bit in 0..frame.len() * 8 {
            let mut bad = frame.clone();
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(decode_frame(&bad, |_, _, _| {}).is_err(), "flip of bit {bit} went unnoticed");
        }
    }

    #[test]
    fn every_truncation_is_detected() {
        let frame = sample_frame();
        for len in 0..frame.len() {
            assert!(decode_frame(&frame[..len], |_, _, _| {}).is_err(), "truncation to {len} went unnoticed");
        }
    }

    #[test]
    fn zero_bytes_decode_as_zero() {
        assert_eq!(FrameHeader::decode(&[0u8; 64]), Err(DecodeError::Zero));
    }
}
