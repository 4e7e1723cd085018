//! DUMP and RESTORE: a value in Redis's serialization (an RDB object, the
//! RDB version and a CRC-64), so that tools that move keys between servers
//! with these two commands work between Redis and ScaledKV.
//!
//! Strings only, the one type ScaledKV stores. DUMP writes what Redis 7.0
//! writes for a string but for LZF compression, which it never applies
//! (Redis compresses values over 20 bytes when that saves at least 4): the
//! payload is longer, and Redis and ScaledKV restore it alike. RESTORE
//! reads every string encoding Redis writes (plain, integer, LZF).

use bytes::Bytes;
use scaledkv::now_ms;

use super::args::{eq, int, parse_i64};
use super::{err, CmdError, CmdResult, Ctx};
use crate::keyspace::MAX_STRING_BYTES;

/// RDB_TYPE_STRING.
const TYPE_STRING: u8 = 0;
/// The RDB version DUMP writes: Redis 7.0's, which every Redis since reads.
const RDB_VERSION: u16 = 10;
/// The newest RDB version RESTORE reads: Redis 7.4's. Strings are written
/// alike in 10, 11 and 12.
const NEWEST_RDB_VERSION: u16 = 12;
/// RDB object types Redis has and ScaledKV does not store (lists, sets,
/// sorted sets, hashes, modules, streams and their encodings).
const OTHER_TYPES: std::ops::RangeInclusive<u8> = 1..=21;

const CRC64: crc::Crc<u64> = crc::Crc::<u64>::new(&crc::CRC_64_REDIS);

/// The serialized form of the string `data`.
pub fn serialize(data: &[u8]) -> Vec<u8> {
    let mut out = vec![TYPE_STRING];
    // A decimal that fits 32 bits is written as the integer, as Redis does.
    match parse_i64(data).and_then(|n| i32::try_from(n).ok()) {
        Some(n) if i8::try_from(n).is_ok() => out.extend_from_slice(&[0xC0, n as i8 as u8]),
        Some(n) if i16::try_from(n).is_ok() => {
            out.push(0xC1);
            out.extend_from_slice(&(n as i16).to_le_bytes());
        }
        Some(n) => {
            out.push(0xC2);
            out.extend_from_slice(&n.to_le_bytes());
        }
        None => {
            write_length(&mut out, data.len() as u64);
            out.extend_from_slice(data);
        }
    }
    out.extend_from_slice(&RDB_VERSION.to_le_bytes());
    let crc = CRC64.checksum(&out);
    out.extend_from_slice(&crc.to_le_bytes());
    out
}

fn write_length(out: &mut Vec<u8>, len: u64) {
    if len < 64 {
        out.push(len as u8);
    } else if len < 16384 {
        out.extend_from_slice(&[0x40 | (len >> 8) as u8, len as u8]);
    } else if len <= u32::MAX as u64 {
        out.push(0x80);
        out.extend_from_slice(&(len as u32).to_be_bytes());
    } else {
        out.push(0x81);
        out.extend_from_slice(&len.to_be_bytes());
    }
}

/// Why a payload cannot be restored, in Redis's words where Redis has them.
#[derive(Debug, PartialEq)]
pub enum Refused {
    VersionOrChecksum,
    BadFormat,
    OtherType,
    TooBig,
}

/// The string a payload holds.
pub fn deserialize(payload: &[u8]) -> Result<Vec<u8>, Refused> {
    if payload.len() < 10 {
        return Err(Refused::VersionOrChecksum);
    }
    let (body, footer) = payload.split_at(payload.len() - 8);
    let version = u16::from_le_bytes([body[body.len() - 2], body[body.len() - 1]]);
    let crc = u64::from_le_bytes(footer.try_into().expect("8 bytes"));
    if version > NEWEST_RDB_VERSION || CRC64.checksum(body) != crc {
        return Err(Refused::VersionOrChecksum);
    }
    let mut object = Reader { bytes: &body[..body.len() - 2] };
    match object.byte()? {
        TYPE_STRING => object.string(),
        kind if OTHER_TYPES.contains(&kind) => Err(Refused::OtherType),
        _ => Err(Refused::BadFormat),
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
}

/// A length, or one of the special encodings of a string.
enum Length {
    Plain(u64),
    Encoded(u8),
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], Refused> {
        if n > self.bytes.len() {
            return Err(Refused::BadFormat);
        }
        let (taken, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(taken)
    }

    fn byte(&mut self) -> Result<u8, Refused> {
        Ok(self.take(1)?[0])
    }

    fn length(&mut self) -> Result<Length, Refused> {
        let first = self.byte()?;
        Ok(match first >> 6 {
            0 => Length::Plain((first & 0x3F) as u64),
            1 => Length::Plain(((first & 0x3F) as u64) << 8 | self.byte()? as u64),
            3 => Length::Encoded(first & 0x3F),
            _ if first == 0x80 => Length::Plain(u32::from_be_bytes(self.take(4)?.try_into().expect("4")) as u64),
            _ if first == 0x81 => Length::Plain(u64::from_be_bytes(self.take(8)?.try_into().expect("8"))),
            _ => return Err(Refused::BadFormat),
        })
    }

    fn plain_length(&mut self) -> Result<usize, Refused> {
        match self.length()? {
            Length::Plain(len) if len <= MAX_STRING_BYTES as u64 => Ok(len as usize),
            Length::Plain(_) => Err(Refused::TooBig),
            Length::Encoded(_) => Err(Refused::BadFormat),
        }
    }

    fn string(&mut self) -> Result<Vec<u8>, Refused> {
        let integer = match self.length()? {
            Length::Plain(len) if len > MAX_STRING_BYTES as u64 => return Err(Refused::TooBig),
            Length::Plain(len) => return Ok(self.take(len as usize)?.to_vec()),
            Length::Encoded(0) => self.byte()? as i8 as i64,
            Length::Encoded(1) => i16::from_le_bytes(self.take(2)?.try_into().expect("2")) as i64,
            Length::Encoded(2) => i32::from_le_bytes(self.take(4)?.try_into().expect("4")) as i64,
            Length::Encoded(3) => {
                let compressed = self.plain_length()?;
                let len = self.plain_length()?;
                return lzf_decompress(self.take(compressed)?, len);
            }
            Length::Encoded(_) => return Err(Refused::BadFormat),
        };
        Ok(itoa::Buffer::new().format(integer).as_bytes().to_vec())
    }
}

/// LZF (liblzf's format, which Redis compresses with): literal runs and
/// back references; the output must come to exactly `len` bytes.
fn lzf_decompress(input: &[u8], len: usize) -> Result<Vec<u8>, Refused> {
    let mut out = Vec::with_capacity(len);
    let mut at = 0;
    while at < input.len() {
        let control = input[at] as usize;
        at += 1;
        if control < 32 {
            let run = input.get(at..at + control + 1).ok_or(Refused::BadFormat)?;
            if out.len() + run.len() > len {
                return Err(Refused::BadFormat);
            }
            out.extend_from_slice(run);
            at += control + 1;
            continue;
        }
        let mut copy = control >> 5;
        if copy == 7 {
            copy += *input.get(at).ok_or(Refused::BadFormat)? as usize;
            at += 1;
        }
        let low = *input.get(at).ok_or(Refused::BadFormat)? as usize;
        at += 1;
        let distance = ((control & 0x1F) << 8) + low + 1;
        if distance > out.len() || out.len() + copy + 2 > len {
            return Err(Refused::BadFormat);
        }
        // Byte by byte: a reference may overlap what it produces.
        let from = out.len() - distance;
        for i in 0..copy + 2 {
            let byte = out[from + i];
            out.push(byte);
        }
    }
    if out.len() != len {
        return Err(Refused::BadFormat);
    }
    Ok(out)
}

pub fn dump(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    match ctx.read(&args[1])? {
        Some(value) => ctx.out.bulk(&serialize(value.string()?)),
        None => ctx.out.null(),
    }
    Ok(())
}

pub fn restore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (mut replace, mut absolute, mut idle, mut freq) = (false, false, false, false);
    let mut i = 4;
    while i < args.len() {
        let more = i + 1 < args.len();
        if eq(&args[i], "replace") {
            replace = true;
        } else if eq(&args[i], "absttl") {
            absolute = true;
        } else if eq(&args[i], "idletime") && more && !freq {
            // Accepted and dropped: ScaledKV keeps no access times.
            if int(&args[i + 1])? < 0 {
                return Err(err("ERR Invalid IDLETIME value, must be >= 0"));
            }
            idle = true;
            i += 1;
        } else if eq(&args[i], "freq") && more && !idle {
            if !(0..=255).contains(&int(&args[i + 1])?) {
                return Err(err("ERR Invalid FREQ value, must be >= 0 and <= 255"));
            }
            freq = true;
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    let key = &args[1];
    if !replace && ctx.read(key)?.is_some() {
        return Err(err("BUSYKEY Target key name already exists."));
    }
    let ttl = int(&args[2])?;
    if ttl < 0 {
        return Err(err("ERR Invalid TTL value, must be >= 0"));
    }
    let data = deserialize(&args[3]).map_err(|refused| match refused {
        Refused::VersionOrChecksum => err("ERR DUMP payload version or checksum are wrong"),
        Refused::BadFormat => err("ERR Bad data format"),
        Refused::OtherType => err("ERR RESTORE of a value other than a string is not supported by ScaledKV yet"),
        Refused::TooBig => CmdError::TooBig,
    })?;
    let expiry = match ttl {
        0 => None,
        ttl if absolute => Some(ttl as u64),
        ttl => Some(now_ms().saturating_add(ttl as u64)),
    };
    if expiry.is_some_and(|at| at <= now_ms()) {
        // Already expired: nothing is created, and REPLACE still removes.
        if replace {
            ctx.writes.delete(key);
        }
    } else {
        ctx.writes.put_string(key, &data, expiry)?;
    }
    ctx.out.ok();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strings_survive_a_round_trip_in_every_encoding() {
        let long = vec![b'x'; 20_000];
        for data in
            [&b""[..], b"0", b"-128", b"127", b"128", b"-32769", b"2147483647", b"2147483648", b"007", b"hello", &long]
        {
            assert_eq!(deserialize(&serialize(data)).as_deref(), Ok(data), "{:?}", String::from_utf8_lossy(data));
        }
        // Redis 7.0.15's DUMP of "hello" and of "123" (redis-cli, hex).
        assert_eq!(hex(&serialize(b"hello")), "000568656c6c6f0a006372df766534200a");
        assert_eq!(hex(&serialize(b"123")), "00c07b0a0048e253e1007a67b9");
    }

    #[test]
    fn other_types_are_told_apart_from_damage() {
        let framed = |object: &[u8]| {
            let mut payload = object.to_vec();
            payload.extend_from_slice(&RDB_VERSION.to_le_bytes());
            let crc = CRC64.checksum(&payload);
            payload.extend_from_slice(&crc.to_le_bytes());
            payload
        };
        // A list of one element "a" (RDB_TYPE_LIST), and an unknown type.
        assert_eq!(deserialize(&framed(b"\x01\x01\x01a")), Err(Refused::OtherType));
        assert_eq!(deserialize(&framed(b"\x63\x01a")), Err(Refused::BadFormat));
        // A plain length past the largest value is refused before reading.
        assert_eq!(deserialize(&framed(b"\x00\x81\x00\x00\x00\x01\x00\x00\x00\x00")), Err(Refused::TooBig));
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    fn unhex(text: &str) -> Vec<u8> {
        (0..text.len()).step_by(2).map(|i| u8::from_str_radix(&text[i..i + 2], 16).unwrap()).collect()
    }

    #[test]
    fn reads_what_redis_compressed_with_lzf() {
        // Redis 7.0.15's DUMP of 30 x's and of "abc" ten times.
        let xs = unhex("00c3091e017878e011000178780a00f0673fdf2001eb95");
        assert_eq!(deserialize(&xs), Ok(vec![b'x'; 30]));
        let abc = unhex("00c30b1e0361626361e00f020162630a008874be6d67e59d2a");
        assert_eq!(deserialize(&abc), Ok(b"abc".repeat(10)));
    }

    #[test]
    fn damaged_payloads_are_refused_never_misread() {
        let good = serialize(b"a value of some length");
        for cut in 0..good.len() {
            assert!(deserialize(&good[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.clone();
                bad[at] ^= 1 << bit;
                assert!(deserialize(&bad).is_err(), "bit {bit} of byte {at}");
            }
        }
    }

    proptest::proptest! {
        /// Any object under a valid footer (so that the checksum lets it
        /// through to the parser) is read or refused, never a panic; and
        /// what is read as a string re-serializes to a payload that reads
        /// back the same.
        #[test]
        fn any_object_is_read_or_refused(
            // Most cases start as a string, plain or LZF, to reach deep.
            prefix in proptest::sample::select(vec![vec![], vec![0u8], vec![0, 0xC3], vec![0, 0xC3, 0x05, 0x20]]),
            object in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        ) {
            let mut payload = prefix;
            payload.extend_from_slice(&object);
            payload.extend_from_slice(&RDB_VERSION.to_le_bytes());
            let crc = CRC64.checksum(&payload);
            payload.extend_from_slice(&crc.to_le_bytes());
            if let Ok(data) = deserialize(&payload) {
                proptest::prop_assert_eq!(deserialize(&serialize(&data)), Ok(data));
            }
        }
    }

    #[test]
    fn lzf_back_references_may_overlap_their_output() {
        // "abc" as a literal run, then a reference 3 back copying 9 bytes.
        let compressed = [2, b'a', b'b', b'c', 7 << 5, 0, 2];
        assert_eq!(lzf_decompress(&compressed, 12), Ok(b"abcabcabcabc".to_vec()));
        assert_eq!(lzf_decompress(&compressed, 11), Err(Refused::BadFormat));
        assert_eq!(lzf_decompress(&[1 << 5, 9], 3), Err(Refused::BadFormat));
    }
}
