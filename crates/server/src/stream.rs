//! A Redis stream as the engine holds it: entry IDs and how Redis parses
//! them, the stream's metadata (its stub), and the encodings of its
//! entries, consumer groups and pending entries.
//!
//! A stream is always a table (`commands::table`): the client's key holds
//! the stub (`Meta`), and under the table's id live
//! - `0x00 ms seq` (big-endian, so they sort as IDs do) → an entry's
//!   field/value pairs;
//! - `0x01 group` → a consumer group (`Group`): its last delivered ID,
//!   entries-read counter and consumers;
//! - `0x02 len(group) group ms seq` → a pending entry of that group
//!   (`Nack`): its consumer, delivery time and delivery count.
//!
//! An XADD writes one entry and the stub; reads and ranges are ordered
//! scans of the entries' keys.

use std::fmt;

use crate::hash::Corrupt;

/// A stream entry's ID: milliseconds and a sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Default, Hash)]
pub struct StreamId {
    pub ms: u64,
    pub seq: u64,
}

impl StreamId {
    pub const MIN: StreamId = StreamId { ms: 0, seq: 0 };
    pub const MAX: StreamId = StreamId { ms: u64::MAX, seq: u64::MAX };

    pub fn new(ms: u64, seq: u64) -> StreamId {
        StreamId { ms, seq }
    }

    pub fn is_zero(self) -> bool {
        self == StreamId::MIN
    }

    /// Big-endian, so that byte order is ID order.
    pub fn to_bytes(self) -> [u8; 16] {
        let mut out = [0u8; 16];
        out[..8].copy_from_slice(&self.ms.to_be_bytes());
        out[8..].copy_from_slice(&self.seq.to_be_bytes());
        out
    }

    pub fn from_bytes(bytes: &[u8]) -> Result<StreamId, Corrupt> {
        let ms = bytes.get(..8).ok_or(Corrupt)?.try_into().map_err(|_| Corrupt)?;
        let seq = bytes.get(8..16).ok_or(Corrupt)?.try_into().map_err(|_| Corrupt)?;
        Ok(StreamId { ms: u64::from_be_bytes(ms), seq: u64::from_be_bytes(seq) })
    }

    /// The next ID, None past the last one.
    pub fn next(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (u64::MAX, u64::MAX) => None,
            (ms, u64::MAX) => Some(StreamId { ms: ms + 1, seq: 0 }),
            (ms, seq) => Some(StreamId { ms, seq: seq + 1 }),
        }
    }

    /// The previous ID, None before the first one.
    pub fn prev(self) -> Option<StreamId> {
        match (self.ms, self.seq) {
            (0, 0) => None,
            (ms, 0) => Some(StreamId { ms: ms - 1, seq: u64::MAX }),
            (ms, seq) => Some(StreamId { ms, seq: seq - 1 }),
        }
    }
}

impl fmt::Display for StreamId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.ms, self.seq)
    }
}

/// Redis's `string2ull`: a decimal `long long` that is not negative, else
/// what C's `strtoull` accepts whole (leading spaces, a sign, digits up to
/// 2^64 - 1; a '-' wraps the value around).
pub fn parse_u64(text: &[u8]) -> Option<u64> {
    if let Some(value) = crate::commands::args::parse_i64(text) {
        return u64::try_from(value).ok();
    }
    let start = text.iter().position(|b| !b" \t\n\x0b\x0c\r".contains(b))?;
    let mut rest = &text[start..];
    let negative = match rest.first() {
        Some(b'-') => true,
        Some(b'+') => false,
        _ => {
            return parse_digits(rest);
        }
    };
    rest = &rest[1..];
    let value = parse_digits(rest)?;
    Some(if negative { value.wrapping_neg() } else { value })
}

fn parse_digits(text: &[u8]) -> Option<u64> {
    if text.is_empty() || !text.iter().all(u8::is_ascii_digit) {
        return None;
    }
    text.iter().try_fold(0u64, |n, &d| n.checked_mul(10)?.checked_add(u64::from(d - b'0')))
}

/// An ID argument, as Redis's `streamGenericParseIDOrReply` reads it (up
/// to its first NUL byte, at most 127 bytes): `ms-seq`, or `ms` with the
/// sequence `missing`; unless `strict`, `-` and `+` stand for the first
/// and last IDs.
pub fn parse_id(arg: &[u8], missing: u64, strict: bool) -> Option<StreamId> {
    parse_id_or_auto(arg, missing, strict, false).map(|(id, _)| id)
}

/// XADD's ID: also `ms-*` (the sequence to be picked: false).
pub fn parse_add_id(arg: &[u8]) -> Option<(StreamId, bool)> {
    parse_id_or_auto(arg, 0, true, true)
}

fn parse_id_or_auto(arg: &[u8], missing: u64, strict: bool, auto_seq: bool) -> Option<(StreamId, bool)> {
    if arg.len() > 127 {
        return None;
    }
    let text = arg.split(|&b| b == 0).next().unwrap_or_default();
    match text {
        b"-" | b"+" if strict => return None,
        b"-" => return Some((StreamId::MIN, true)),
        b"+" => return Some((StreamId::MAX, true)),
        _ => {}
    }
    let (ms, seq) = match text.iter().position(|&b| b == b'-') {
        Some(dash) => (&text[..dash], Some(&text[dash + 1..])),
        None => (text, None),
    };
    let ms = parse_u64(ms)?;
    match seq {
        Some(b"*") if auto_seq => Some((StreamId::new(ms, 0), false)),
        Some(seq) => Some((StreamId::new(ms, parse_u64(seq)?), true)),
        None => Some((StreamId::new(ms, missing), true)),
    }
}

/// The stub a stream's key holds: its table id and length (the two words
/// every table's stub starts with), then what Redis keeps beside the
/// entries.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Meta {
    pub table: u64,
    pub length: u64,
    pub last_id: StreamId,
    /// The first entry's ID when the stream has one (Redis's
    /// `recorded-first-entry-id`).
    pub first_id: StreamId,
    pub max_deleted: StreamId,
    pub entries_added: u64,
    pub groups: u64,
}

const META_BYTES: usize = 8 * 2 + 16 * 3 + 8 * 2;

impl Meta {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(META_BYTES);
        out.extend_from_slice(&self.table.to_le_bytes());
        out.extend_from_slice(&self.length.to_le_bytes());
        for id in [self.last_id, self.first_id, self.max_deleted] {
            out.extend_from_slice(&id.to_bytes());
        }
        out.extend_from_slice(&self.entries_added.to_le_bytes());
        out.extend_from_slice(&self.groups.to_le_bytes());
        out
    }

    pub fn decode(data: &[u8]) -> Result<Meta, Corrupt> {
        if data.len() != META_BYTES {
            return Err(Corrupt);
        }
        let word = |at: usize| u64::from_le_bytes(data[at..at + 8].try_into().expect("8 bytes"));
        Ok(Meta {
            table: word(0),
            length: word(8),
            last_id: StreamId::from_bytes(&data[16..32])?,
            first_id: StreamId::from_bytes(&data[32..48])?,
            max_deleted: StreamId::from_bytes(&data[48..64])?,
            entries_added: word(64),
            groups: word(72),
        })
    }

    /// Whether an XDEL may have left a gap at or after `from` (Redis's
    /// `streamRangeHasTombstones`, to the end of the stream).
    pub fn has_tombstones_from(&self, from: StreamId) -> bool {
        if self.length == 0 || self.max_deleted.is_zero() || self.first_id > self.max_deleted {
            return false;
        }
        from <= self.max_deleted
    }

    /// How many entries were added up to and including `id`, where that
    /// can be told (Redis's `streamEstimateDistanceFromFirstEverEntry`).
    pub fn entries_up_to(&self, id: StreamId) -> Option<u64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        if self.length == 0 && id <= self.last_id {
            return Some(self.entries_added);
        }
        match id.cmp(&self.last_id) {
            std::cmp::Ordering::Equal => return Some(self.entries_added),
            std::cmp::Ordering::Greater => return None,
            std::cmp::Ordering::Less => {}
        }
        if self.max_deleted.is_zero() || self.max_deleted < self.first_id {
            match id.cmp(&self.first_id) {
                std::cmp::Ordering::Less => return Some(self.entries_added - self.length),
                std::cmp::Ordering::Equal => return Some(self.entries_added - self.length + 1),
                std::cmp::Ordering::Greater => {}
            }
        }
        None
    }

    /// A group's lag: entries added after its last delivered one, where
    /// that can be told (Redis's `streamReplyWithCGLag`; negative when
    /// XGROUP set an entries-read counter past the stream's).
    pub fn lag(&self, group: &Group) -> Option<i64> {
        if self.entries_added == 0 {
            return Some(0);
        }
        let read = match (group.entries_read, self.has_tombstones_from(group.last_id)) {
            (Some(read), false) => read,
            _ => self.entries_up_to(group.last_id)?,
        };
        Some((self.entries_added as i64).wrapping_sub(read as i64))
    }
}

/// Field kinds under a stream's table id.
pub const ENTRY: u8 = 0x00;
pub const GROUP: u8 = 0x01;
pub const NACK: u8 = 0x02;

/// An entry's field within its table: the kind byte, then its ID.
pub fn entry_field(id: StreamId) -> [u8; 17] {
    let mut out = [0u8; 17];
    out[0] = ENTRY;
    out[1..].copy_from_slice(&id.to_bytes());
    out
}

pub fn group_field(name: &[u8]) -> Vec<u8> {
    [&[GROUP][..], name].concat()
}

/// Where the pending entries of group `name` sort, by ID.
pub fn nacks_field(name: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + name.len());
    out.push(NACK);
    out.extend_from_slice(&(name.len() as u32).to_be_bytes());
    out.extend_from_slice(name);
    out
}

pub fn nack_field(name: &[u8], id: StreamId) -> Vec<u8> {
    let mut out = nacks_field(name);
    out.extend_from_slice(&id.to_bytes());
    out
}

/// The group name and entry ID a pending entry's field holds.
pub fn split_nack_field(field: &[u8]) -> Result<(&[u8], StreamId), Corrupt> {
    let (&kind, rest) = field.split_first().ok_or(Corrupt)?;
    let len = rest.get(..4).ok_or(Corrupt)?.try_into().map_err(|_| Corrupt)?;
    let name = rest.get(4..).and_then(|rest| rest.get(..u32::from_be_bytes(len) as usize)).ok_or(Corrupt)?;
    let id = &rest[4 + name.len()..];
    if kind != NACK || id.len() != 16 {
        return Err(Corrupt);
    }
    Ok((name, StreamId::from_bytes(id)?))
}

/// An entry's field/value pairs: their count (u32), then each string as
/// its length (u32) and bytes, all little-endian.
pub fn encode_pairs<T: AsRef<[u8]>>(pairs: &[T]) -> Vec<u8> {
    let size: usize = pairs.iter().map(|p| 4 + p.as_ref().len()).sum();
    let mut out = Vec::with_capacity(4 + size);
    out.extend_from_slice(&((pairs.len() / 2) as u32).to_le_bytes());
    for part in pairs {
        put_string(&mut out, part.as_ref());
    }
    out
}

/// The strings of an entry (fields and values in turn).
pub fn decode_pairs(data: &[u8]) -> Result<Vec<&[u8]>, Corrupt> {
    let mut reader = Reader(data);
    let count = reader.u32()? as usize;
    let mut out = Vec::with_capacity((count * 2).min(data.len() / 4));
    for _ in 0..count * 2 {
        out.push(reader.string()?);
    }
    reader.end()?;
    Ok(out)
}

/// A consumer group: where it has read to, and its consumers in name
/// order (as Redis lists them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Group {
    pub last_id: StreamId,
    /// Entries the group has read, where known (Redis's `entries_read`,
    /// -1 there for unknown).
    pub entries_read: Option<u64>,
    /// Every pending entry is some consumer's: the group's count is theirs
    /// summed (`pending`).
    pub consumers: Vec<Consumer>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Consumer {
    pub name: Vec<u8>,
    /// When it last read or claimed (ms).
    pub seen_ms: u64,
    pub pending: u64,
}

impl Group {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(48 + self.consumers.iter().map(|c| 20 + c.name.len()).sum::<usize>());
        out.extend_from_slice(&self.last_id.to_bytes());
        out.extend_from_slice(&self.entries_read.map_or(-1, |n| n as i64).to_le_bytes());
        out.extend_from_slice(&(self.consumers.len() as u32).to_le_bytes());
        for consumer in &self.consumers {
            put_string(&mut out, &consumer.name);
            out.extend_from_slice(&consumer.seen_ms.to_le_bytes());
            out.extend_from_slice(&consumer.pending.to_le_bytes());
        }
        out
    }

    pub fn decode(data: &[u8]) -> Result<Group, Corrupt> {
        let mut reader = Reader(data);
        let last_id = StreamId::from_bytes(reader.take(16)?)?;
        let read = reader.u64()? as i64;
        let count = reader.u32()? as usize;
        let mut consumers = Vec::with_capacity(count.min(data.len() / 20));
        for _ in 0..count {
            let name = reader.string()?.to_vec();
            consumers.push(Consumer { name, seen_ms: reader.u64()?, pending: reader.u64()? });
        }
        reader.end()?;
        let entries_read = u64::try_from(read).ok();
        Ok(Group { last_id, entries_read, consumers })
    }

    /// The group's pending entries.
    pub fn pending(&self) -> u64 {
        self.consumers.iter().map(|c| c.pending).sum()
    }

    /// The consumer named `name`, made (seen now) if new; true if new.
    pub fn consumer(&mut self, name: &[u8], now_ms: u64) -> (&mut Consumer, bool) {
        match self.consumers.binary_search_by(|c| c.name.as_slice().cmp(name)) {
            Ok(at) => (&mut self.consumers[at], false),
            Err(at) => {
                self.consumers.insert(at, Consumer { name: name.to_vec(), seen_ms: now_ms, pending: 0 });
                (&mut self.consumers[at], true)
            }
        }
    }

    pub fn find(&mut self, name: &[u8]) -> Option<&mut Consumer> {
        let at = self.consumers.binary_search_by(|c| c.name.as_slice().cmp(name)).ok()?;
        Some(&mut self.consumers[at])
    }

    /// Removes consumer `name`; its pending count if it was there.
    pub fn remove(&mut self, name: &[u8]) -> Option<u64> {
        let at = self.consumers.binary_search_by(|c| c.name.as_slice().cmp(name)).ok()?;
        Some(self.consumers.remove(at).pending)
    }
}

/// A pending entry: delivered to `consumer` and not acknowledged yet.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Nack {
    pub delivered_ms: u64,
    pub deliveries: u64,
    pub consumer: Vec<u8>,
}

impl Nack {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(16 + self.consumer.len());
        out.extend_from_slice(&self.delivered_ms.to_le_bytes());
        out.extend_from_slice(&self.deliveries.to_le_bytes());
        out.extend_from_slice(&self.consumer);
        out
    }

    pub fn decode(data: &[u8]) -> Result<Nack, Corrupt> {
        let mut reader = Reader(data);
        let delivered_ms = reader.u64()?;
        let deliveries = reader.u64()?;
        Ok(Nack { delivered_ms, deliveries, consumer: reader.0.to_vec() })
    }
}

fn put_string(out: &mut Vec<u8>, bytes: &[u8]) {
    out.extend_from_slice(&(bytes.len() as u32).to_le_bytes());
    out.extend_from_slice(bytes);
}

struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Corrupt> {
        if self.0.len() < n {
            return Err(Corrupt);
        }
        let (head, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(head)
    }

    fn u32(&mut self) -> Result<u32, Corrupt> {
        Ok(u32::from_le_bytes(self.take(4)?.try_into().map_err(|_| Corrupt)?))
    }

    fn u64(&mut self) -> Result<u64, Corrupt> {
        Ok(u64::from_le_bytes(self.take(8)?.try_into().map_err(|_| Corrupt)?))
    }

    fn string(&mut self) -> Result<&'a [u8], Corrupt> {
        let len = self.u32()? as usize;
        self.take(len)
    }

    fn end(&self) -> Result<(), Corrupt> {
        if self.0.is_empty() {
            Ok(())
        } else {
            Err(Corrupt)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn ids_parse_as_redis_reads_them() {
        let strict = |s: &str| parse_id(s.as_bytes(), 0, true);
        let range = |s: &str| parse_id(s.as_bytes(), u64::MAX, false);
        assert_eq!(strict("5-3"), Some(StreamId::new(5, 3)));
        assert_eq!(strict("5"), Some(StreamId::new(5, 0)));
        assert_eq!(range("5"), Some(StreamId::new(5, u64::MAX)));
        assert_eq!(range("-"), Some(StreamId::MIN));
        assert_eq!(range("+"), Some(StreamId::MAX));
        assert_eq!(strict("-"), None);
        assert_eq!(strict("+"), None);
        assert_eq!(strict("-5"), None, "an empty ms part");
        assert_eq!(strict("5--3"), None, "a negative sequence");
        assert_eq!(strict("5-3-1"), None);
        assert_eq!(strict("18446744073709551615-18446744073709551615"), Some(StreamId::MAX));
        assert_eq!(strict("18446744073709551616"), None, "past 64 bits");
        assert_eq!(strict("+7"), Some(StreamId::new(7, 0)), "strtoull takes a sign");
        assert_eq!(strict(" 7"), Some(StreamId::new(7, 0)), "and leading spaces");
        assert_eq!(strict("007-01"), Some(StreamId::new(7, 1)));
        assert_eq!(strict(""), None);
        assert_eq!(strict("a"), None);
        assert_eq!(strict("5-*"), None, "only XADD picks a sequence");
        assert_eq!(parse_add_id(b"5-*"), Some((StreamId::new(5, 0), false)));
        assert_eq!(parse_add_id(b"5-2"), Some((StreamId::new(5, 2), true)));
        assert_eq!(parse_id(&[b'x'; 128], 0, true), None);
        assert_eq!(parse_id(b"5\x00junk", 0, true), Some(StreamId::new(5, 0)), "C stops at NUL");
    }

    #[test]
    fn ids_step_over_their_parts() {
        assert_eq!(StreamId::new(1, u64::MAX).next(), Some(StreamId::new(2, 0)));
        assert_eq!(StreamId::MAX.next(), None);
        assert_eq!(StreamId::new(2, 0).prev(), Some(StreamId::new(1, u64::MAX)));
        assert_eq!(StreamId::MIN.prev(), None);
        assert_eq!(StreamId::new(3, 4).to_string(), "3-4");
    }

    proptest! {
        #[test]
        fn id_bytes_sort_as_ids(a in any::<(u64, u64)>(), b in any::<(u64, u64)>()) {
            let (a, b) = (StreamId::new(a.0, a.1), StreamId::new(b.0, b.1));
            prop_assert_eq!(a.to_bytes().cmp(&b.to_bytes()), a.cmp(&b));
            prop_assert_eq!(StreamId::from_bytes(&a.to_bytes()), Ok(a));
        }

        #[test]
        fn records_round_trip(
            pairs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..20), 0..8),
            names in proptest::collection::btree_set(proptest::collection::vec(any::<u8>(), 0..12), 0..5),
            words in any::<(u64, u64, u64, u64)>(),
        ) {
            let pairs: Vec<Vec<u8>> = pairs.chunks_exact(2).flatten().cloned().collect();
            let encoded = encode_pairs(&pairs);
            let decoded = decode_pairs(&encoded).unwrap();
            prop_assert_eq!(decoded.iter().map(|s| s.to_vec()).collect::<Vec<_>>(), pairs);
            let group = Group {
                last_id: StreamId::new(words.0, words.1),
                entries_read: (words.2 % 3 != 0).then_some(words.2 >> 1),
                consumers: names.iter().map(|n| Consumer { name: n.clone(), seen_ms: words.0, pending: words.1 }).collect(),
            };
            prop_assert_eq!(Group::decode(&group.encode()), Ok(group));
            for name in &names {
                let id = StreamId::new(words.2, words.3);
                let field = nack_field(name, id);
                prop_assert_eq!(split_nack_field(&field), Ok((&name[..], id)));
            }
            let meta = Meta { table: words.0, length: words.1, last_id: StreamId::new(words.2, words.3), entries_added: words.3, ..Meta::default() };
            prop_assert_eq!(Meta::decode(&meta.encode()), Ok(meta));
        }

        #[test]
        fn damaged_records_are_errors_not_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64)) {
            let _ = decode_pairs(&bytes);
            let _ = Group::decode(&bytes);
            let _ = Nack::decode(&bytes);
            let _ = Meta::decode(&bytes);
            let _ = split_nack_field(&bytes);
        }
    }
}
