//! Redis's listpack (`listpack.c`): total bytes and entry count, then
//! entries each followed by its own length written backwards, then 0xFF.
//! RESTORE reads the listpacks Redis 7 packs small collections and stream
//! nodes in; DUMP writes a stream's nodes as one.

use std::borrow::Cow;

use super::Refused;
use crate::commands::args::parse_i64;

/// A header's entry count of 65535 stands for "count them".
const UNKNOWN_COUNT: u16 = u16::MAX;

/// The entries of a listpack, the integers written out in decimal as
/// Redis replies them.
pub fn entries(listpack: &[u8]) -> Result<Vec<Cow<'_, [u8]>>, Refused> {
    let header = listpack.get(..6).ok_or(Refused::BadFormat)?;
    let total = u32::from_le_bytes(header[..4].try_into().expect("4")) as usize;
    let count = u16::from_le_bytes(header[4..6].try_into().expect("2"));
    if total != listpack.len() || listpack.last() != Some(&0xFF) {
        return Err(Refused::BadFormat);
    }
    let mut entries = Vec::new();
    let mut at = 6;
    let bytes = |from: usize, len: usize| {
        let end = from.checked_add(len).ok_or(Refused::BadFormat)?;
        listpack.get(from..end).ok_or(Refused::BadFormat)
    };
    loop {
        let first = *listpack.get(at).ok_or(Refused::BadFormat)?;
        if first == 0xFF {
            break;
        }
        let signed = |value: u64, bits: u32| ((value << (64 - bits)) as i64) >> (64 - bits);
        let le = |from: usize, len: usize| -> Result<u64, Refused> {
            Ok(bytes(from, len)?.iter().rev().fold(0u64, |acc, &b| acc << 8 | b as u64))
        };
        let (entry, size): (Cow<'_, [u8]>, usize) = match first {
            0x00..=0x7F => (integer(first as i64), 1),
            0x80..=0xBF => {
                let len = (first & 0x3F) as usize;
                (Cow::Borrowed(bytes(at + 1, len)?), 1 + len)
            }
            0xC0..=0xDF => (integer(signed(((first & 0x1F) as u64) << 8 | le(at + 1, 1)?, 13)), 2),
            0xE0..=0xEF => {
                let len = ((first & 0x0F) as usize) << 8 | le(at + 1, 1)? as usize;
                (Cow::Borrowed(bytes(at + 2, len)?), 2 + len)
            }
            0xF0 => {
                let len = le(at + 1, 4)? as usize;
                (Cow::Borrowed(bytes(at + 5, len)?), 5 + len)
            }
            0xF1 => (integer(signed(le(at + 1, 2)?, 16)), 3),
            0xF2 => (integer(signed(le(at + 1, 3)?, 24)), 4),
            0xF3 => (integer(signed(le(at + 1, 4)?, 32)), 5),
            0xF4 => (integer(le(at + 1, 8)? as i64), 9),
            _ => return Err(Refused::BadFormat),
        };
        at = at.checked_add(size + backlen_bytes(size)).ok_or(Refused::BadFormat)?;
        entries.push(entry);
    }
    if at + 1 != listpack.len() || (count != UNKNOWN_COUNT && count as usize != entries.len()) {
        return Err(Refused::BadFormat);
    }
    Ok(entries)
}

fn integer(value: i64) -> Cow<'static, [u8]> {
    Cow::Owned(itoa::Buffer::new().format(value).as_bytes().to_vec())
}

/// How many bytes an entry of `size` bytes stores its length backwards in
/// (7 bits a byte).
fn backlen_bytes(size: usize) -> usize {
    match size {
        0..=127 => 1,
        128..=16_382 => 2,
        16_383..=2_097_150 => 3,
        2_097_151..=268_435_454 => 4,
        _ => 5,
    }
}

/// A listpack being built, written as Redis's `lpAppend` writes it: a
/// string that is an integer in canonical form as that integer, in the
/// fewest bytes.
#[derive(Default)]
pub struct Writer {
    body: Vec<u8>,
    count: usize,
}

impl Writer {
    pub fn push(&mut self, bytes: &[u8]) {
        match parse_i64(bytes) {
            Some(value) => self.push_int(value),
            None => {
                let start = self.body.len();
                let len = bytes.len();
                if len < 64 {
                    self.body.push(0x80 | len as u8);
                } else if len < 4096 {
                    self.body.extend_from_slice(&[0xE0 | (len >> 8) as u8, len as u8]);
                } else {
                    self.body.push(0xF0);
                    self.body.extend_from_slice(&(len as u32).to_le_bytes());
                }
                self.body.extend_from_slice(bytes);
                self.end_entry(start);
            }
        }
    }

    pub fn push_int(&mut self, value: i64) {
        let start = self.body.len();
        let bytes = value.to_le_bytes();
        match value {
            0..=127 => self.body.push(value as u8),
            -4096..=4095 => {
                let bits = value as u64 & 0x1FFF;
                self.body.extend_from_slice(&[0xC0 | (bits >> 8) as u8, bits as u8]);
            }
            -32_768..=32_767 => self.tagged(0xF1, &bytes[..2]),
            -8_388_608..=8_388_607 => self.tagged(0xF2, &bytes[..3]),
            -2_147_483_648..=2_147_483_647 => self.tagged(0xF3, &bytes[..4]),
            _ => self.tagged(0xF4, &bytes),
        }
        self.end_entry(start);
    }

    fn tagged(&mut self, tag: u8, bytes: &[u8]) {
        self.body.push(tag);
        self.body.extend_from_slice(bytes);
    }

    /// Writes the length of the entry that starts at `start` backwards:
    /// the highest 7 bits first, the high bit set on every byte after it.
    fn end_entry(&mut self, start: usize) {
        let size = self.body.len() - start;
        let bytes = backlen_bytes(size);
        for i in (0..bytes).rev() {
            let part = (size >> (7 * i)) as u8 & 0x7F;
            self.body.push(if i + 1 < bytes { part | 0x80 } else { part });
        }
        self.count += 1;
    }

    /// The bytes of the entries pushed so far.
    pub fn body_len(&self) -> usize {
        self.body.len()
    }

    /// Adds the entries of `other` after these.
    pub fn append(&mut self, other: Writer) {
        self.body.extend_from_slice(&other.body);
        self.count += other.count;
    }

    /// The bytes the listpack would take if finished now.
    pub fn bytes(&self) -> usize {
        6 + self.body.len() + 1
    }

    pub fn finish(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(self.bytes());
        out.extend_from_slice(&(self.bytes() as u32).to_le_bytes());
        out.extend_from_slice(&(self.count.min(UNKNOWN_COUNT as usize) as u16).to_le_bytes());
        out.extend_from_slice(&self.body);
        out.push(0xFF);
        out
    }
}

#[cfg(test)]
mod tests {
    use proptest::strategy::Strategy;

    use super::*;

    #[test]
    fn reads_entries_of_every_encoding() {
        let mut listpack = vec![0; 6];
        let mut entry = |encoded: &[u8]| {
            listpack.extend_from_slice(encoded);
            let len = encoded.len();
            // The length backwards: 7 bits a byte, the highest first, the
            // high bit set on all bytes after it.
            let mut back = Vec::new();
            let mut rest = len;
            loop {
                back.push((rest & 0x7F) as u8);
                rest >>= 7;
                if rest == 0 {
                    break;
                }
            }
            for (i, byte) in back.iter().enumerate().rev() {
                listpack.push(if i + 1 < back.len() { byte | 0x80 } else { *byte });
            }
        };
        let long = vec![b'y'; 300];
        let longer = vec![b'z'; 5000];
        entry(b"\x85hello");
        entry(&[0x7F]);
        entry(&[0xE1, 0x2C].iter().chain(&long).copied().collect::<Vec<_>>());
        entry(&[0xDF, 0xFF]);
        entry(&[0xF0, 0x88, 0x13, 0, 0].iter().chain(&longer).copied().collect::<Vec<_>>());
        entry(&[0xF1, 0x00, 0x80]);
        entry(&[0xF3, 0xFF, 0xFF, 0xFF, 0x7F]);
        entry(&[0xF4, 0, 0, 0, 0, 0, 0, 0, 0x80]);
        listpack.push(0xFF);
        let total = listpack.len() as u32;
        listpack[..4].copy_from_slice(&total.to_le_bytes());
        listpack[4..6].copy_from_slice(&8u16.to_le_bytes());
        let read = entries(&listpack).unwrap();
        let expected: Vec<&[u8]> =
            vec![b"hello", b"127", &long, b"-1", &longer, b"-32768", b"2147483647", b"-9223372036854775808"];
        assert_eq!(read.iter().map(|e| &e[..]).collect::<Vec<_>>(), expected);
        // "Count them" is accepted; a wrong count or a missing end is not.
        listpack[4..6].copy_from_slice(&u16::MAX.to_le_bytes());
        assert!(entries(&listpack).is_ok());
        listpack[4..6].copy_from_slice(&7u16.to_le_bytes());
        assert_eq!(entries(&listpack), Err(Refused::BadFormat));
        listpack[4..6].copy_from_slice(&8u16.to_le_bytes());
        let last = listpack.len() - 1;
        listpack[last] = 0;
        assert_eq!(entries(&listpack), Err(Refused::BadFormat));
    }

    #[test]
    fn writes_what_redis_writes() {
        // Redis 7.0.15's stream node for XADD s 1-1 a 1 b hello: the
        // master entry (count 1, none deleted, 2 fields, a, b, 0), then
        // the entry (same fields, ID deltas 0 0, the values, its 5 parts).
        let mut writer = Writer::default();
        for int in [1, 0, 2] {
            writer.push_int(int);
        }
        for part in [&b"a"[..], b"b", b"0", b"2", b"0", b"0", b"1", b"hello", b"5"] {
            writer.push(part);
        }
        let bytes = writer.bytes();
        let listpack = writer.finish();
        assert_eq!(listpack.len(), bytes);
        assert_eq!(
            listpack,
            b"\x26\x00\x00\x00\x0c\x00\x01\x01\x00\x01\x02\x01\x81a\x02\x81b\x02\x00\x01\x02\x01\x00\x01\x00\x01\x01\x01\x85hello\x06\x05\x01\xff"
        );
    }

    proptest::proptest! {
        /// What the writer writes reads back as what was pushed, integers
        /// in decimal; strings of every length class and integers of
        /// every width.
        #[test]
        fn written_entries_read_back(
            parts in proptest::collection::vec(
                proptest::prop_oneof![
                    proptest::collection::vec(proptest::num::u8::ANY, 0..70),
                    (0usize..3).prop_map(|i| vec![b'q'; [100, 5000, 20_000][i]]),
                    proptest::num::i64::ANY.prop_map(|n| n.to_string().into_bytes()),
                    (-70_000i64..70_000).prop_map(|n| n.to_string().into_bytes()),
                ],
                0..40,
            ),
        ) {
            let mut writer = Writer::default();
            for part in &parts {
                writer.push(part);
            }
            let listpack = writer.finish();
            let read = entries(&listpack).unwrap();
            proptest::prop_assert_eq!(read.iter().map(|e| e.to_vec()).collect::<Vec<_>>(), parts);
        }
    }
}
