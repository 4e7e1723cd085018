//! Redis's ziplist (`ziplist.c`), which Redis 6 and older pack small
//! hashes, lists and sorted sets in (and the nodes of their quicklists):
//! total bytes, the last entry's offset and the entry count, then entries
//! each led by the previous entry's length and its own encoding, then
//! 0xFF. RESTORE and a replica's full sync read it, so that data of a
//! Redis 6 (its RDB files, DUMP payloads) comes over.

use std::borrow::Cow;

use super::Refused;

/// A header's entry count of 65535 stands for "count them".
const UNKNOWN_COUNT: u16 = u16::MAX;
const END: u8 = 0xFF;

/// The entries of a ziplist, the integers written out in decimal as Redis
/// replies them.
pub fn entries(ziplist: &[u8]) -> Result<Vec<Cow<'_, [u8]>>, Refused> {
    let header = ziplist.get(..10).ok_or(Refused::BadFormat)?;
    let total = u32::from_le_bytes(header[..4].try_into().expect("4")) as usize;
    let count = u16::from_le_bytes(header[8..10].try_into().expect("2"));
    if total != ziplist.len() || ziplist.last() != Some(&END) {
        return Err(Refused::BadFormat);
    }
    let bytes = |from: usize, len: usize| {
        let end = from.checked_add(len).ok_or(Refused::BadFormat)?;
        ziplist.get(from..end).ok_or(Refused::BadFormat)
    };
    let le = |from: usize, len: usize| -> Result<u64, Refused> {
        Ok(bytes(from, len)?.iter().rev().fold(0u64, |acc, &b| acc << 8 | b as u64))
    };
    let signed = |value: u64, bits: u32| ((value << (64 - bits)) as i64) >> (64 - bits);
    let mut entries = Vec::new();
    let (mut at, mut previous) = (10, 0);
    loop {
        let start = at;
        let first = *ziplist.get(at).ok_or(Refused::BadFormat)?;
        if first == END {
            break;
        }
        // The previous entry's length: one byte, or 254 and four.
        let prevlen = match first {
            254 => {
                at += 5;
                le(start + 1, 4)? as usize
            }
            len => {
                at += 1;
                len as usize
            }
        };
        if prevlen != previous {
            return Err(Refused::BadFormat);
        }
        let encoding = *ziplist.get(at).ok_or(Refused::BadFormat)?;
        let (entry, size): (Cow<'_, [u8]>, usize) = match encoding >> 6 {
            0 => {
                let len = (encoding & 0x3F) as usize;
                (Cow::Borrowed(bytes(at + 1, len)?), 1 + len)
            }
            1 => {
                let len = ((encoding & 0x3F) as usize) << 8 | *ziplist.get(at + 1).ok_or(Refused::BadFormat)? as usize;
                (Cow::Borrowed(bytes(at + 2, len)?), 2 + len)
            }
            2 if encoding == 0x80 => {
                let len = u32::from_be_bytes(bytes(at + 1, 4)?.try_into().expect("4")) as usize;
                (Cow::Borrowed(bytes(at + 5, len)?), 5 + len)
            }
            2 => return Err(Refused::BadFormat),
            _ => match encoding {
                0xC0 => (integer(signed(le(at + 1, 2)?, 16)), 3),
                0xD0 => (integer(signed(le(at + 1, 4)?, 32)), 5),
                0xE0 => (integer(le(at + 1, 8)? as i64), 9),
                0xF0 => (integer(signed(le(at + 1, 3)?, 24)), 4),
                0xFE => (integer(signed(le(at + 1, 1)?, 8)), 2),
                // An immediate 0 to 12, stored as 1 to 13.
                0xF1..=0xFD => (integer((encoding & 0x0F) as i64 - 1), 1),
                _ => return Err(Refused::BadFormat),
            },
        };
        at = at.checked_add(size).ok_or(Refused::BadFormat)?;
        previous = at - start;
        entries.push(entry);
    }
    let tail = u32::from_le_bytes(header[4..8].try_into().expect("4")) as usize;
    let last = if entries.is_empty() { 10 } else { at - previous };
    if at + 1 != ziplist.len() || tail != last || (count != UNKNOWN_COUNT && count as usize != entries.len()) {
        return Err(Refused::BadFormat);
    }
    Ok(entries)
}

fn integer(value: i64) -> Cow<'static, [u8]> {
    Cow::Owned(itoa::Buffer::new().format(value).as_bytes().to_vec())
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A ziplist of the given encoded entries (encoding and data each),
    /// with its header and the lengths that link them.
    pub fn ziplist(entries: &[&[u8]]) -> Vec<u8> {
        let mut body = Vec::new();
        let (mut previous, mut tail) = (0usize, 10usize);
        for entry in entries {
            tail = 10 + body.len();
            let start = body.len();
            if previous < 254 {
                body.push(previous as u8);
            } else {
                body.push(254);
                body.extend_from_slice(&(previous as u32).to_le_bytes());
            }
            body.extend_from_slice(entry);
            previous = body.len() - start;
        }
        let mut out = Vec::new();
        out.extend_from_slice(&((10 + body.len() + 1) as u32).to_le_bytes());
        out.extend_from_slice(&(tail as u32).to_le_bytes());
        out.extend_from_slice(&(entries.len() as u16).to_le_bytes());
        out.extend_from_slice(&body);
        out.push(END);
        out
    }

    #[test]
    fn reads_every_encoding() {
        let long = vec![b'x'; 300];
        let mut long_entry = vec![0x40 | (300 >> 8) as u8, 300u16 as u8];
        long_entry.extend_from_slice(&long);
        let huge = vec![b'y'; 20_000];
        let mut huge_entry = vec![0x80];
        huge_entry.extend_from_slice(&(20_000u32).to_be_bytes());
        huge_entry.extend_from_slice(&huge);
        let list = ziplist(&[
            b"\x05hello",
            &long_entry,
            &huge_entry,
            b"\xc0\x2c\x01",                         // int16 300
            b"\xd0\x90\xee\xfe\xff",                 // int32 -70000
            b"\xe0\x00\x00\x00\x00\x01\x00\x00\x00", // int64 2^32
            b"\xf0\xff\xff\x7f",                     // 24 bits 8388607
            b"\xfe\x80",                             // int8 -128
            b"\xf1",                                 // immediate 0
            b"\xfd",                                 // immediate 12
        ]);
        let got: Vec<Vec<u8>> = entries(&list).unwrap().into_iter().map(Cow::into_owned).collect();
        let want: Vec<Vec<u8>> = vec![
            b"hello".to_vec(),
            long,
            huge,
            b"300".to_vec(),
            b"-70000".to_vec(),
            b"4294967296".to_vec(),
            b"8388607".to_vec(),
            b"-128".to_vec(),
            b"0".to_vec(),
            b"12".to_vec(),
        ];
        assert_eq!(got, want);
        assert!(entries(&ziplist(&[])).unwrap().is_empty());
    }

    #[test]
    fn damaged_ziplists_are_refused() {
        let good = ziplist(&[b"\x01a", b"\xc0\x2c\x01", b"\x05hello"]);
        assert_eq!(entries(&good).unwrap().len(), 3);
        for cut in 0..good.len() {
            assert!(entries(&good[..cut]).is_err(), "cut at {cut}");
        }
        // The entries' contents ("a", the integer's two bytes, "hello"): a
        // changed byte there is another value, not damage.
        let contents = [12, 15, 16, 19, 20, 21, 22, 23];
        for at in (0..good.len()).filter(|at| !contents.contains(at)) {
            let mut bad = good.clone();
            bad[at] ^= 0x04;
            assert!(entries(&bad).is_err(), "byte {at}");
        }
    }
}
