//! DUMP and RESTORE: a value in Redis's serialization (an RDB object, the
//! RDB version and a CRC-64), so that tools that move keys between servers
//! with these two commands work between Redis and ScaledKV.
//!
//! Strings, hashes, sets, lists, sorted sets and streams (`stream.rs`).
//! DUMP writes strings as Redis 7.0 does (integers as such, LZF past 20
//! bytes where it saves 4, unless `rdbcompression` is off); a hash as a
//! plain list of fields and values (RDB_TYPE_HASH, what Redis writes for a
//! big hash), and likewise the plain forms of the other collections (a
//! sorted set as RDB_TYPE_ZSET_2). RESTORE reads every string encoding
//! Redis writes (plain, integer, LZF) and the collections as Redis 3.2
//! to 7.2 write them (plain, ziplist, listpack, intset, quicklists of
//! ziplists and of listpacks).

pub mod export;
mod listpack;
mod lzf;
pub mod rdb;
mod stream;
mod ziplist;

use std::borrow::Cow;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::Bytes;
use scaledkv::now_ms;

use super::args::{eq, int, parse_i64};
use super::table::Table;
use super::{err, CmdError, CmdResult, Ctx};
use crate::hash::Fields;
use crate::keyspace::{
    Value, MAX_STRING_BYTES, TYPE_HASH, TYPE_HASH_TABLE, TYPE_LIST, TYPE_LIST_TABLE, TYPE_SET, TYPE_SET_TABLE,
    TYPE_ZSET, TYPE_ZSET_TABLE,
};

/// RDB object types: RDB_TYPE_STRING, RDB_TYPE_HASH and
/// RDB_TYPE_HASH_LISTPACK; RDB_TYPE_SET and RDB_TYPE_SET_INTSET.
const TYPE_STRING: u8 = 0;
const TYPE_HASH_PAIRS: u8 = 4;
const TYPE_HASH_LISTPACK: u8 = 16;
const TYPE_SET_MEMBERS: u8 = 2;
const TYPE_SET_INTSET: u8 = 11;
/// RDB_TYPE_LIST (what DUMP writes) and RDB_TYPE_LIST_QUICKLIST_2 (what
/// Redis 7 writes: nodes of listpacks, or of one plain element).
const TYPE_LIST_ELEMENTS: u8 = 1;
const TYPE_LIST_QUICKLIST: u8 = 18;
/// What Redis 6 and older write: a list, a sorted set and a hash as one
/// ziplist, a list as a quicklist of ziplists (`ziplist.rs`).
const TYPE_LIST_ZIPLIST: u8 = 10;
const TYPE_ZSET_ZIPLIST: u8 = 12;
const TYPE_HASH_ZIPLIST: u8 = 13;
const TYPE_LIST_QUICKLIST_ZIPLISTS: u8 = 14;
/// RDB_TYPE_SET_LISTPACK: a small set in Redis 7.2 and later.
const TYPE_SET_LISTPACK: u8 = 20;
/// RDB_TYPE_ZSET_2 (binary scores: what DUMP writes, and Redis for a big
/// sorted set), RDB_TYPE_ZSET (scores as text, before Redis 4) and
/// RDB_TYPE_ZSET_LISTPACK (a small one in Redis 7).
const TYPE_ZSET_BINARY: u8 = 5;
const TYPE_ZSET_TEXT: u8 = 3;
const TYPE_ZSET_LISTPACK: u8 = 17;
/// The RDB version DUMP writes: Redis 7.0's, which every Redis since reads.
const RDB_VERSION: u16 = 10;
/// The newest RDB version RESTORE reads: Redis 7.4's. Strings are written
/// alike in 10, 11 and 12.
const NEWEST_RDB_VERSION: u16 = 12;
/// RDB object types Redis has and ScaledKV does not restore: modules' (6,
/// 7), the zipmap of Redis before 2.6 (9), Redis 7.4's hashes with field
/// expiry times (22 to 25).
const OTHER_TYPES: std::ops::RangeInclusive<u8> = 1..=25;

/// Sixteen tables at a time: a byte-at-a-time CRC-64 took 18% of the DUMP
/// of a 15 MB stream.
const CRC64: crc::Crc<u64, crc::Table<16>> = crc::Crc::<u64, crc::Table<16>>::new(&crc::CRC_64_REDIS);

/// The serialized form of a stored value (a table's fields read through
/// `ctx`): its object, the RDB version and a CRC-64.
pub(crate) fn serialize(ctx: &mut Ctx<'_>, key: &[u8], value: &Value) -> Result<Vec<u8>, CmdError> {
    object_of(ctx, key, value).map(with_footer)
}

/// A stored value's RDB object, what an RDB file holds after its key.
fn object_of(ctx: &mut Ctx<'_>, key: &[u8], value: &Value) -> Result<Vec<u8>, CmdError> {
    match value.tag() {
        TYPE_HASH => {
            let pairs: Vec<(&[u8], &[u8])> = crate::hash::pairs(value.data()).collect::<Result<_, _>>()?;
            Ok(hash_object(pairs.into_iter()))
        }
        TYPE_HASH_TABLE => {
            let table = Table::of(value)?;
            let pairs = super::table::entries(ctx, &table, None, usize::MAX)?;
            Ok(hash_object(pairs.iter().map(|(f, v)| (&f[..], &v[..]))))
        }
        TYPE_SET | TYPE_SET_TABLE => Ok(strings_object(TYPE_SET_MEMBERS, &super::sets::members_of(ctx, value)?)),
        TYPE_LIST | TYPE_LIST_TABLE => {
            Ok(strings_object(TYPE_LIST_ELEMENTS, &super::lists::elements_of(ctx, key, value)?))
        }
        TYPE_ZSET | TYPE_ZSET_TABLE => Ok(zset_object(&super::zsets::members_of(ctx, value)?)),
        crate::keyspace::TYPE_STREAM_TABLE => Ok(stream::serialize(&stream::read(ctx, value)?)?),
        _ => Ok(string_object(value.string()?)),
    }
}

/// An object of type `kind` that is a count and as many strings (a set's
/// members, a list's elements).
fn strings_object(kind: u8, strings: &[Vec<u8>]) -> Vec<u8> {
    let mut out = vec![kind];
    write_length(&mut out, strings.len() as u64);
    for string in strings {
        write_string(&mut out, string);
    }
    out
}

/// A sorted set as RDB_TYPE_ZSET_2: its length, then each member and its
/// score (a double, little endian).
fn zset_object(members: &[(Vec<u8>, f64)]) -> Vec<u8> {
    let mut out = vec![TYPE_ZSET_BINARY];
    write_length(&mut out, members.len() as u64);
    for (member, score) in members {
        write_string(&mut out, member);
        out.extend_from_slice(&score.to_le_bytes());
    }
    out
}

/// A hash as RDB_TYPE_HASH: its length, then each field and value.
fn hash_object<'p>(pairs: impl ExactSizeIterator<Item = (&'p [u8], &'p [u8])>) -> Vec<u8> {
    let mut out = vec![TYPE_HASH_PAIRS];
    write_length(&mut out, pairs.len() as u64);
    for (field, value) in pairs {
        for bytes in [field, value] {
            write_string(&mut out, bytes);
        }
    }
    out
}

/// The serialized form of the string `data`.
pub fn serialize_string(data: &[u8]) -> Vec<u8> {
    with_footer(string_object(data))
}

fn string_object(data: &[u8]) -> Vec<u8> {
    let mut out = vec![TYPE_STRING];
    write_string(&mut out, data);
    out
}

/// Whether DUMP compresses strings with LZF (Redis's `rdbcompression`).
static COMPRESSION: AtomicBool = AtomicBool::new(true);

pub fn compression() -> bool {
    COMPRESSION.load(Ordering::Relaxed)
}

pub fn set_compression(on: bool) {
    COMPRESSION.store(on, Ordering::Relaxed);
}

/// A string as Redis's `rdbSaveRawString` writes it: a decimal that fits
/// 32 bits as the integer; past 20 bytes compressed with LZF if that
/// saves at least 4 bytes and compression is on; else its length and
/// bytes.
fn write_string(out: &mut Vec<u8>, data: &[u8]) {
    if data.len() > 20 && compression() {
        if let Some(compressed) = self::lzf::compress(data) {
            out.push(0xC3);
            write_length(out, compressed.len() as u64);
            write_length(out, data.len() as u64);
            out.extend_from_slice(&compressed);
            return;
        }
    }
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
            write_length(out, data.len() as u64);
            out.extend_from_slice(data);
        }
    }
}

/// An object followed by the RDB version and the CRC-64 of both.
fn with_footer(mut out: Vec<u8>) -> Vec<u8> {
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

/// RDB_OPCODE_FUNCTION2 (a library's code, what Redis 7.0 GA writes) and
/// RDB_OPCODE_FUNCTION (7.0's release candidates: name, engine, an
/// optional description and the code after the shebang).
const OPCODE_FUNCTION2: u8 = 245;
const OPCODE_FUNCTION_RC: u8 = 246;

/// FUNCTION DUMP's payload: each library's code (shebang and all), then
/// the RDB version and the CRC-64. Plain strings, as DUMP writes them.
pub fn serialize_functions<'a>(codes: impl Iterator<Item = &'a [u8]>) -> Vec<u8> {
    let mut out = Vec::new();
    for code in codes {
        out.push(OPCODE_FUNCTION2);
        write_length(&mut out, code.len() as u64);
        out.extend_from_slice(code);
    }
    with_footer(out)
}

/// The libraries' codes a FUNCTION DUMP payload holds, or Redis's error.
pub fn deserialize_functions(payload: &[u8]) -> Result<Vec<Vec<u8>>, &'static str> {
    let body = verified(payload).map_err(|_| "DUMP payload version or checksum are wrong")?;
    let mut reader = Reader { bytes: body };
    let mut codes = Vec::new();
    while !reader.bytes.is_empty() {
        match reader.byte().map_err(|_| "can not read data type")? {
            OPCODE_FUNCTION2 => codes.push(reader.string().map_err(|_| "Failed loading library payload")?),
            OPCODE_FUNCTION_RC => {
                let name = reader.string().map_err(|_| "Failed loading library name")?;
                let engine = reader.string().map_err(|_| "Failed loading engine name")?;
                let described = reader.length().map_err(|_| "Failed loading library description indicator")?;
                if !matches!(described, Length::Plain(0)) {
                    reader.string().map_err(|_| "Failed loading library description")?;
                }
                let blob = reader.string().map_err(|_| "Failed loading library blob")?;
                let mut code = [b"#!", &engine[..], b" name=", &name[..], b"\n"].concat();
                code.extend_from_slice(&blob);
                codes.push(code);
            }
            _ => return Err("given type is not a function"),
        }
    }
    Ok(codes)
}

/// The object of a payload whose version ScaledKV reads and whose CRC-64
/// is right (what precedes the version).
fn verified(payload: &[u8]) -> Result<&[u8], Refused> {
    verified_as(payload, true)
}

/// The object of a payload whose version ScaledKV reads; its CRC-64 is
/// checked if `check`.
fn verified_as(payload: &[u8], check: bool) -> Result<&[u8], Refused> {
    if payload.len() < 10 {
        return Err(Refused::VersionOrChecksum);
    }
    let (body, footer) = payload.split_at(payload.len() - 8);
    let version = u16::from_le_bytes([body[body.len() - 2], body[body.len() - 1]]);
    let crc = u64::from_le_bytes(footer.try_into().expect("8 bytes"));
    if version > NEWEST_RDB_VERSION || check && CRC64.checksum(body) != crc {
        return Err(Refused::VersionOrChecksum);
    }
    Ok(&body[..body.len() - 2])
}

/// Why a payload cannot be restored, in Redis's words where Redis has them.
#[derive(Debug, PartialEq)]
pub enum Refused {
    VersionOrChecksum,
    BadFormat,
    OtherType,
    TooBig,
}

/// What a payload holds.
#[derive(Debug)]
pub enum Object {
    /// A value's keyspace type and encoded data.
    Value(u8, Vec<u8>),
    /// A stream: many entries of a table.
    Stream(stream::StreamObject),
}

pub fn deserialize(payload: &[u8]) -> Result<Object, Refused> {
    deserialize_as(payload, true)
}

/// A payload from the master this server replicates, whose CRC-64 is not
/// checked: its RDB file's was (`rdb.rs` writes none into the payloads it
/// makes of the file's keys, saving two passes over every value), and a
/// RESTORE the master propagates was checked there.
pub fn deserialize_from_master(payload: &[u8]) -> Result<Object, Refused> {
    deserialize_as(payload, false)
}

fn deserialize_as(payload: &[u8], check: bool) -> Result<Object, Refused> {
    let mut object = Reader { bytes: verified_as(payload, check)? };
    match object.byte()? {
        kind @ (stream::TYPE_LISTPACKS | stream::TYPE_LISTPACKS_2 | stream::TYPE_LISTPACKS_3) => {
            Ok(Object::Stream(stream::deserialize(kind, &mut object)?))
        }
        kind => value(kind, &mut object).map(|(tag, data)| Object::Value(tag, data)),
    }
}

/// The keyspace type and encoded data of an object of type `kind`.
fn value(kind: u8, object: &mut Reader<'_>) -> Result<(u8, Vec<u8>), Refused> {
    match kind {
        TYPE_STRING => Ok((crate::keyspace::TYPE_STRING, object.string()?)),
        TYPE_HASH_PAIRS => {
            let count = object.plain_length()?;
            // Each pair takes at least two bytes: no allocation past that.
            let mut strings = Vec::with_capacity(count.min(object.bytes.len() / 2) * 2);
            for _ in 0..count.checked_mul(2).ok_or(Refused::BadFormat)? {
                strings.push(object.string()?);
            }
            Ok((TYPE_HASH, hash_of(strings.iter().map(Vec::as_slice))?))
        }
        TYPE_LIST_ELEMENTS => {
            let count = object.plain_length()?;
            let mut elements = Vec::with_capacity(count.min(object.bytes.len()));
            for _ in 0..count {
                elements.push(object.string()?);
            }
            list_of(elements)
        }
        TYPE_LIST_QUICKLIST => {
            let nodes = object.plain_length()?;
            let mut elements = Vec::new();
            for _ in 0..nodes {
                let container = object.plain_length()?;
                let node = object.string()?;
                match container {
                    // QUICKLIST_NODE_CONTAINER_PLAIN: one element.
                    1 => elements.push(node),
                    2 => elements.extend(listpack::entries(&node)?.into_iter().map(Cow::into_owned)),
                    _ => return Err(Refused::BadFormat),
                }
            }
            list_of(elements)
        }
        TYPE_SET_MEMBERS => {
            let count = object.plain_length()?;
            let mut members = Vec::with_capacity(count.min(object.bytes.len()));
            for _ in 0..count {
                members.push(object.string()?);
            }
            let data = super::sets::encode_members(members.iter().map(Vec::as_slice)).ok_or(Refused::BadFormat)?;
            Ok((TYPE_SET, data))
        }
        TYPE_SET_INTSET => {
            let intset = object.string()?;
            let members = intset_members(&intset)?;
            let data = super::sets::encode_members(members.iter().map(Vec::as_slice)).ok_or(Refused::BadFormat)?;
            Ok((TYPE_SET, data))
        }
        TYPE_HASH_LISTPACK => {
            let listpack = object.string()?;
            Ok((TYPE_HASH, hash_of(listpack::entries(&listpack)?.iter().map(|entry| &entry[..]))?))
        }
        TYPE_HASH_ZIPLIST => {
            let packed = object.string()?;
            Ok((TYPE_HASH, hash_of(ziplist::entries(&packed)?.iter().map(|entry| &entry[..]))?))
        }
        TYPE_LIST_ZIPLIST => {
            let packed = object.string()?;
            list_of(ziplist::entries(&packed)?.into_iter().map(Cow::into_owned).collect())
        }
        TYPE_LIST_QUICKLIST_ZIPLISTS => {
            let nodes = object.plain_length()?;
            let mut elements = Vec::new();
            for _ in 0..nodes {
                let node = object.string()?;
                elements.extend(ziplist::entries(&node)?.into_iter().map(Cow::into_owned));
            }
            list_of(elements)
        }
        TYPE_SET_LISTPACK => {
            let listpack = object.string()?;
            let members = listpack::entries(&listpack)?;
            let data = super::sets::encode_members(members.iter().map(|m| &m[..])).ok_or(Refused::BadFormat)?;
            Ok((TYPE_SET, data))
        }
        kind @ (TYPE_ZSET_BINARY | TYPE_ZSET_TEXT) => {
            let count = object.plain_length()?;
            // Each member takes at least two bytes: no allocation past that.
            let mut members = Vec::with_capacity(count.min(object.bytes.len() / 2));
            for _ in 0..count {
                let member = object.string()?;
                let score = match kind {
                    TYPE_ZSET_BINARY => f64::from_le_bytes(object.take(8)?.try_into().expect("8")),
                    _ => object.text_score()?,
                };
                members.push((member, score));
            }
            Ok((TYPE_ZSET, super::zsets::encode_members(&members).ok_or(Refused::BadFormat)?))
        }
        kind @ (TYPE_ZSET_LISTPACK | TYPE_ZSET_ZIPLIST) => {
            let packed = object.string()?;
            let entries = match kind {
                TYPE_ZSET_LISTPACK => listpack::entries(&packed)?,
                _ => ziplist::entries(&packed)?,
            };
            if !entries.len().is_multiple_of(2) {
                return Err(Refused::BadFormat);
            }
            let members = entries
                .chunks(2)
                .map(|pair| Ok((pair[0].to_vec(), text_score(&pair[1])?)))
                .collect::<Result<Vec<_>, Refused>>()?;
            Ok((TYPE_ZSET, super::zsets::encode_members(&members).ok_or(Refused::BadFormat)?))
        }
        kind if OTHER_TYPES.contains(&kind) => Err(Refused::OtherType),
        _ => Err(Refused::BadFormat),
    }
}

/// A score written as text (a listpack's, RDB_TYPE_ZSET's).
fn text_score(text: &[u8]) -> Result<f64, Refused> {
    let score: f64 = std::str::from_utf8(text).ok().and_then(|t| t.parse().ok()).ok_or(Refused::BadFormat)?;
    if score.is_nan() {
        return Err(Refused::BadFormat);
    }
    Ok(score)
}

/// A list's encoding as one value; RESTORE makes a table of a long one.
/// Redis refuses an empty list as bad data.
fn list_of(elements: Vec<Vec<u8>>) -> Result<(u8, Vec<u8>), Refused> {
    if elements.is_empty() {
        return Err(Refused::BadFormat);
    }
    let mut data = Vec::new();
    crate::hash::encode_into(&mut data, elements.len(), false, elements.iter().map(|e| (&e[..], &b""[..])));
    Ok((TYPE_LIST, data))
}

/// A hash's encoding from its fields and values in turn. Redis refuses an
/// empty hash and a field given twice as bad data; so does this.
fn hash_of<'a>(strings: impl Iterator<Item = &'a [u8]>) -> Result<Vec<u8>, Refused> {
    let strings: Vec<&[u8]> = strings.collect();
    if strings.is_empty() || !strings.len().is_multiple_of(2) {
        return Err(Refused::BadFormat);
    }
    let mut fields = Fields::default();
    for pair in strings.chunks(2) {
        if !fields.set(pair[0], Cow::Borrowed(pair[1])) {
            return Err(Refused::BadFormat);
        }
    }
    // RESTORE makes a table of it if it passes the listpack limits.
    Ok(fields.encode())
}

/// The members of an intset (Redis's `intset.c`: the integers' width in
/// bytes, their count, then the integers, little endian), in decimal.
fn intset_members(intset: &[u8]) -> Result<Vec<Vec<u8>>, Refused> {
    let header = intset.get(..8).ok_or(Refused::BadFormat)?;
    let width = u32::from_le_bytes(header[..4].try_into().expect("4")) as usize;
    let count = u32::from_le_bytes(header[4..].try_into().expect("4")) as usize;
    if ![2, 4, 8].contains(&width) || intset.len() != 8 + width * count {
        return Err(Refused::BadFormat);
    }
    Ok(intset[8..]
        .chunks(width)
        .map(|bytes| {
            let value = match width {
                2 => i16::from_le_bytes(bytes.try_into().expect("2")) as i64,
                4 => i32::from_le_bytes(bytes.try_into().expect("4")) as i64,
                _ => i64::from_le_bytes(bytes.try_into().expect("8")),
            };
            itoa::Buffer::new().format(value).as_bytes().to_vec()
        })
        .collect())
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

    /// A length read as a number (an ID's part, a counter).
    fn number(&mut self) -> Result<u64, Refused> {
        match self.length()? {
            Length::Plain(n) => Ok(n),
            Length::Encoded(_) => Err(Refused::BadFormat),
        }
    }

    /// A length that counts bytes or elements: at most a value's size.
    fn plain_length(&mut self) -> Result<usize, Refused> {
        let len = self.number()?;
        if len > MAX_STRING_BYTES as u64 {
            return Err(Refused::TooBig);
        }
        Ok(len as usize)
    }

    /// RDB_TYPE_ZSET's score: a length byte and that much text, or 253,
    /// 254, 255 for NaN, inf and -inf.
    fn text_score(&mut self) -> Result<f64, Refused> {
        match self.byte()? {
            254 => Ok(f64::INFINITY),
            255 => Ok(f64::NEG_INFINITY),
            253 => Err(Refused::BadFormat),
            len => text_score(self.take(len as usize)?),
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
        Some(value) => {
            let payload = serialize(ctx, &args[1], &value)?;
            ctx.out.bulk(&payload);
        }
        None => ctx.out.null(),
    }
    Ok(())
}

pub fn restore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (mut replace, mut absolute, mut idle, mut freq) = (false, false, false, None);
    let mut i = 4;
    while i < args.len() {
        let more = i + 1 < args.len();
        if eq(&args[i], "replace") {
            replace = true;
        } else if eq(&args[i], "absttl") {
            absolute = true;
        } else if eq(&args[i], "idletime") && more && freq.is_none() {
            // Accepted and dropped: ScaledKV keeps no access times.
            if int(&args[i + 1])? < 0 {
                return Err(err("ERR Invalid IDLETIME value, must be >= 0"));
            }
            idle = true;
            i += 1;
        } else if eq(&args[i], "freq") && more && !idle {
            // The LFU counter, under an `-lfu` policy (else dropped).
            let counter =
                u8::try_from(int(&args[i + 1])?).map_err(|_| err("ERR Invalid FREQ value, must be >= 0 and <= 255"))?;
            freq = Some(counter);
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
    let read = if ctx.conn.master_link { deserialize_from_master } else { deserialize };
    let object = read(&args[3]).map_err(|refused| match refused {
        Refused::VersionOrChecksum => err("ERR DUMP payload version or checksum are wrong"),
        Refused::BadFormat => err("ERR Bad data format"),
        Refused::OtherType => {
            err("ERR RESTORE of this type (a module's, or an encoding from before Redis 7) is not supported by ScaledKV yet")
        }
        Refused::TooBig => CmdError::TooBig,
    })?;
    let expiry = match ttl {
        0 => None,
        ttl if absolute => Some(ttl as u64),
        ttl => Some(now_ms().saturating_add(ttl as u64)),
    };
    if expiry.is_some_and(|at| at <= now_ms()) {
        // Already expired: nothing is created, and REPLACE still removes
        // (telling of it as Redis does).
        if replace && ctx.peek(key)?.is_some() {
            ctx.writes.delete(key);
            ctx.notify(crate::notify::GENERIC, "del", key);
        }
    } else {
        ctx.writes.note_pushed();
        store(ctx, key, object, expiry)?;
        if let Some(counter) = freq {
            ctx.shared.db.raise_access_frequency(key, counter);
        }
        ctx.notify(crate::notify::GENERIC, "restore", key);
    }
    ctx.out.ok();
    Ok(())
}

/// Stores a restored value; a stream, and a big hash or set, as a table.
fn store(ctx: &mut Ctx<'_>, key: &[u8], object: Object, expiry: Option<u64>) -> CmdResult {
    let (tag, data) = match object {
        Object::Stream(stream) => return stream::store(ctx, key, stream, expiry),
        Object::Value(tag, data) => (tag, data),
    };
    let data = &data[..];
    let table = match tag {
        TYPE_HASH => TYPE_HASH_TABLE,
        TYPE_SET => TYPE_SET_TABLE,
        TYPE_LIST => {
            let elements: Vec<Vec<u8>> =
                crate::hash::pairs(data).map(|p| p.map(|(e, _)| e.to_vec())).collect::<Result<_, _>>()?;
            return super::lists::store_new(ctx, key, &elements, expiry);
        }
        TYPE_ZSET => {
            let (members, _) = crate::zset::decode(data)?;
            let members: Vec<(Vec<u8>, f64)> = members.into_iter().map(|(m, s)| (m.to_vec(), s)).collect();
            return super::zsets::store_members(ctx, key, &members, expiry);
        }
        _ => return ctx.writes.put(key, tag, data, expiry),
    };
    if super::table::stays_one_value(crate::hash::is_hashtable(data)?, data.len()) {
        return ctx.writes.put(key, tag, data, expiry);
    }
    let pairs: Vec<(&[u8], &[u8])> = crate::hash::pairs(data).collect::<Result<_, _>>()?;
    // A table the key held (REPLACE) is left to the sweep.
    super::table::create(ctx, key, table, pairs.into_iter(), expiry)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn function_payloads_round_trip_and_read_the_release_candidates_format() {
        let codes: Vec<&[u8]> = vec![b"#!lua name=a\nreturn 1", &[b'x'; 300]];
        assert_eq!(deserialize_functions(&serialize_functions(codes.iter().copied())).unwrap(), codes);
        // Name, engine, a description, the code after the shebang.
        let old = with_footer(b"\xf6\x01a\x03LUA\x01\x04desc\x08return 1".to_vec());
        assert_eq!(deserialize_functions(&old).unwrap(), [b"#!LUA name=a\nreturn 1".to_vec()]);
        assert_eq!(deserialize_functions(&with_footer(b"\x00\x01a".to_vec())), Err("given type is not a function"));
        assert_eq!(deserialize_functions(&with_footer(b"\xf5\x05ab".to_vec())), Err("Failed loading library payload"));
        assert_eq!(deserialize_functions(b"short"), Err("DUMP payload version or checksum are wrong"));
    }

    #[test]
    fn strings_survive_a_round_trip_in_every_encoding() {
        let long = vec![b'x'; 20_000];
        for data in
            [&b""[..], b"0", b"-128", b"127", b"128", b"-32769", b"2147483647", b"2147483648", b"007", b"hello", &long]
        {
            assert_eq!(value_of(&serialize_string(data)), Ok(string(data)), "{:?}", String::from_utf8_lossy(data));
        }
        // Redis 7.0.15's DUMP of "hello" and of "123" (redis-cli, hex).
        assert_eq!(hex(&serialize_string(b"hello")), "000568656c6c6f0a006372df766534200a");
        assert_eq!(hex(&serialize_string(b"123")), "00c07b0a0048e253e1007a67b9");
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
        // A module's value (RDB_TYPE_MODULE_2), and an unknown type.
        assert_eq!(value_of(&framed(b"\x07\x00")), Err(Refused::OtherType));
        assert_eq!(value_of(&framed(b"\x63\x01a")), Err(Refused::BadFormat));
        // A plain length past the largest value is refused before reading.
        assert_eq!(value_of(&framed(b"\x00\x81\x00\x00\x00\x01\x00\x00\x00\x00")), Err(Refused::TooBig));
    }

    /// The value a payload holds; a stream is refused as another type.
    fn value_of(payload: &[u8]) -> Result<(u8, Vec<u8>), Refused> {
        match deserialize(payload)? {
            Object::Value(tag, data) => Ok((tag, data)),
            Object::Stream(_) => Err(Refused::OtherType),
        }
    }

    fn string(data: &[u8]) -> (u8, Vec<u8>) {
        (crate::keyspace::TYPE_STRING, data.to_vec())
    }

    fn hash(pairs: &[(&[u8], &[u8])]) -> (u8, Vec<u8>) {
        let mut data = Vec::new();
        crate::hash::encode_into(&mut data, pairs.len(), false, pairs.iter().copied());
        (TYPE_HASH, data)
    }

    #[test]
    fn reads_the_listpack_redis_dumps_a_small_hash_as() {
        // Redis 7.0.15: HSET h a 1 b hello c -300 d 100000, DUMP h (the
        // listpack holds a 7-bit, a 13-bit and a 24-bit integer).
        let payload = b"\x10$$\x00\x00\x00\x08\x00\x81a\x02\x01\x01\x81b\x02\x85hello\x06\x81c\x02\xde\xd4\x02\x81d\x02\xf2\xa0\x86\x01\x04\xff\n\x00h`\x1fV]J\xd5&";
        let expected = hash(&[(b"a", b"1"), (b"b", b"hello"), (b"c", b"-300"), (b"d", b"100000")]);
        assert_eq!(value_of(payload), Ok(expected));
        damaged_copies_are_refused(payload);
    }

    fn set(members: &[&[u8]]) -> (u8, Vec<u8>) {
        (TYPE_SET, super::super::sets::encode_members(members.iter().copied()).unwrap())
    }

    #[test]
    fn reads_the_sets_redis_dumps() {
        // Redis 7.0.15: SADD s 1 2 300 -70000 (an intset of 4-byte
        // integers, in order), SADD t a b (a hash table), DUMP each.
        let intset = b"\x0b\x18\x04\x00\x00\x00\x04\x00\x00\x00\x90\xee\xfe\xff\x01\x00\x00\x00\x02\x00\x00\x00,\x01\x00\x00\n\x00\x04\xe8\x9c\x07l\xd6X\xd5";
        assert_eq!(value_of(intset), Ok(set(&[b"-70000", b"1", b"2", b"300"])));
        damaged_copies_are_refused(intset);
        let members = b"\x02\x02\x01a\x01b\n\x00\xfed!%\xeb\x03=\r";
        assert_eq!(value_of(members), Ok(set(&[b"a", b"b"])));
        damaged_copies_are_refused(members);
        // A member twice, or none, is bad data, as Redis has it.
        assert_eq!(value_of(&with_footer(b"\x02\x02\x01a\x01a".to_vec())), Err(Refused::BadFormat));
        assert_eq!(value_of(&with_footer(b"\x02\x00".to_vec())), Err(Refused::BadFormat));
        // An intset whose length does not match its count.
        let mut short = b"\x0b\x0c\x02\x00\x00\x00\x03\x00\x00\x00\x01\x00\x02\x00".to_vec();
        assert_eq!(value_of(&with_footer(short.clone())), Err(Refused::BadFormat));
        short[6] = 2;
        assert_eq!(value_of(&with_footer(short)), Ok(set(&[b"1", b"2"])));
    }

    #[test]
    fn reads_the_quicklist_redis_dumps_a_list_as() {
        // Redis 7.0.15: RPUSH l a 1 -300 hello, DUMP l (one packed node).
        let payload = b"\x12\x01\x02\x16\x16\x00\x00\x00\x04\x00\x81a\x02\x01\x01\xde\xd4\x02\x85hello\x06\xff\n\x00F\x8a\xdd\xe3d\xcc@\xe7";
        let mut expected = Vec::new();
        let elements: [&[u8]; 4] = [b"a", b"1", b"-300", b"hello"];
        crate::hash::encode_into(&mut expected, 4, false, elements.iter().map(|e| (*e, &b""[..])));
        assert_eq!(value_of(payload), Ok((TYPE_LIST, expected.clone())));
        damaged_copies_are_refused(payload);
        // A plain node (one element) and a packed one; a bad container.
        let mut nodes = vec![TYPE_LIST_QUICKLIST, 2, 1];
        write_length(&mut nodes, 1);
        nodes.push(b'a');
        nodes.push(2);
        let listpack = &payload[4..4 + 0x16];
        write_length(&mut nodes, listpack.len() as u64);
        nodes.extend_from_slice(listpack);
        let (tag, data) = value_of(&with_footer(nodes.clone())).unwrap();
        assert_eq!((tag, crate::hash::count(&data)), (TYPE_LIST, Ok(5)));
        nodes[2] = 3;
        assert_eq!(value_of(&with_footer(nodes)), Err(Refused::BadFormat));
        // What DUMP writes (RDB_TYPE_LIST) reads back; an empty list is bad data.
        assert_eq!(
            value_of(&with_footer(strings_object(TYPE_LIST_ELEMENTS, &[b"x".to_vec()]))).map(|(t, _)| t),
            Ok(TYPE_LIST)
        );
        assert_eq!(value_of(&with_footer(strings_object(TYPE_LIST_ELEMENTS, &[]))), Err(Refused::BadFormat));
    }

    /// What Redis 6 writes (ziplists, quicklists of them) and Redis 7.2
    /// (a set as a listpack) reads as the same values.
    #[test]
    fn reads_the_ziplists_of_redis_6_and_the_set_listpacks_of_redis_7_2() {
        let packed = |kind: u8, packed: &[u8]| {
            let mut object = vec![kind];
            write_length(&mut object, packed.len() as u64);
            object.extend_from_slice(packed);
            with_footer(object)
        };
        let zl = super::ziplist::tests::ziplist;
        let hash_zl = zl(&[b"\x01a", b"\xf2", b"\x01b", b"\x05hello"]);
        assert_eq!(value_of(&packed(TYPE_HASH_ZIPLIST, &hash_zl)), Ok(hash(&[(b"a", b"1"), (b"b", b"hello")])));
        damaged_copies_are_refused(&packed(TYPE_HASH_ZIPLIST, &hash_zl));
        let list_zl = zl(&[b"\x01a", b"\xc0\x2c\x01"]);
        let mut list = Vec::new();
        let elements: [&[u8]; 2] = [b"a", b"300"];
        crate::hash::encode_into(&mut list, 2, false, elements.iter().map(|e| (*e, &b""[..])));
        assert_eq!(value_of(&packed(TYPE_LIST_ZIPLIST, &list_zl)), Ok((TYPE_LIST, list)));
        // A quicklist of two ziplist nodes.
        let mut nodes = vec![TYPE_LIST_QUICKLIST_ZIPLISTS, 2];
        for node in [zl(&[b"\x01a"]), zl(&[b"\x01b", b"\x01c"])] {
            write_length(&mut nodes, node.len() as u64);
            nodes.extend_from_slice(&node);
        }
        let (tag, data) = value_of(&with_footer(nodes)).unwrap();
        assert_eq!((tag, crate::hash::count(&data)), (TYPE_LIST, Ok(3)));
        let zset_zl = zl(&[b"\x01a", b"\xf2", b"\x01b", b"\x032.5"]);
        let (tag, data) = value_of(&packed(TYPE_ZSET_ZIPLIST, &zset_zl)).unwrap();
        let expected = super::super::zsets::encode_members(&[(b"a".to_vec(), 1.0), (b"b".to_vec(), 2.5)]).unwrap();
        assert_eq!((tag, data), (TYPE_ZSET, expected));
        // A listpack of "a" and 7 (a 7-bit integer), as Redis 7.2 writes SADD s a 7.
        let set_lp = b"\x0c\x00\x00\x00\x02\x00\x81a\x02\x07\x01\xff";
        assert_eq!(value_of(&packed(TYPE_SET_LISTPACK, set_lp)), Ok(set(&[b"a", b"7"])));
        // A zipmap (Redis before 2.6) is another type, not damage.
        assert_eq!(value_of(&packed(9, b"\x00\xff")), Err(Refused::OtherType));
    }

    #[test]
    fn hashes_that_redis_refuses_are_refused() {
        let framed = |pairs: &[&[u8]], count: u8| {
            let mut object = vec![TYPE_HASH_PAIRS, count];
            for bytes in pairs {
                write_length(&mut object, bytes.len() as u64);
                object.extend_from_slice(bytes);
            }
            with_footer(object)
        };
        assert_eq!(value_of(&framed(&[], 0)), Err(Refused::BadFormat));
        assert_eq!(value_of(&framed(&[b"f", b"1", b"f", b"2"], 2)), Err(Refused::BadFormat));
        assert_eq!(value_of(&framed(&[b"f", b"1", b"g", b"2"], 2)), Ok(hash(&[(b"f", b"1"), (b"g", b"2")])));
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
        assert_eq!(value_of(&xs), Ok(string(&[b'x'; 30])));
        let abc = unhex("00c30b1e0361626361e00f020162630a008874be6d67e59d2a");
        assert_eq!(value_of(&abc), Ok(string(&b"abc".repeat(10))));
        // And writes them as Redis does (compression is on by default).
        assert_eq!(serialize_string(&[b'x'; 30]), xs);
        // Nothing past 20 bytes that LZF cannot shrink by 4 is compressed.
        let noise: Vec<u8> = (0..=255u8).map(|b| b.wrapping_mul(167)).collect();
        let plain = serialize_string(&noise);
        assert_eq!(&plain[..4], [TYPE_STRING, 0x41, 0x00, 0]);
        let payload = with_footer(hash_object([(&b"field"[..], &b"abc".repeat(10)[..])].into_iter()));
        assert_eq!(value_of(&payload), Ok(hash(&[(b"field", &b"abc".repeat(10))])));
        assert!(payload.windows(2).any(|w| w == [0xC3, 0x0B]), "compressed");
    }

    #[test]
    fn damaged_payloads_are_refused_never_misread() {
        let pairs: [&[u8]; 4] = [b"field", b"a value of some length", b"n", b"12"];
        let mut hash = vec![TYPE_HASH_PAIRS, 2];
        for bytes in pairs {
            write_length(&mut hash, bytes.len() as u64);
            hash.extend_from_slice(bytes);
        }
        for good in [serialize_string(b"a value of some length"), with_footer(hash)] {
            damaged_copies_are_refused(&good);
        }
    }

    fn damaged_copies_are_refused(good: &[u8]) {
        assert!(deserialize(good).is_ok());
        for cut in 0..good.len() {
            assert!(deserialize(&good[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..good.len() {
            for bit in 0..8 {
                let mut bad = good.to_vec();
                bad[at] ^= 1 << bit;
                assert!(deserialize(&bad).is_err(), "bit {bit} of byte {at}");
            }
        }
    }

    proptest::proptest! {
        /// Any object under a valid footer (so that the checksum lets it
        /// through to the parser) is read or refused, never a panic; and
        /// what is read as a string re-serializes to a payload that reads
        /// back the same. Strings, hashes and listpacks to start from, and
        /// FUNCTION RESTORE's libraries (both formats).
        #[test]
        fn any_object_is_read_or_refused(
            // Most cases start as a string, plain or LZF, to reach deep.
            prefix in proptest::sample::select(vec![
                vec![], vec![0u8], vec![0, 0xC3], vec![0, 0xC3, 0x05, 0x20], vec![4, 1], vec![16], vec![16, 0x20],
                vec![2, 2], vec![11, 0x10], vec![1, 2], vec![18, 1, 2, 0x20], vec![0xF5], vec![0xF6, 1, b'a'],
            ]),
            object in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        ) {
            let mut payload = prefix;
            payload.extend_from_slice(&object);
            payload.extend_from_slice(&RDB_VERSION.to_le_bytes());
            let crc = CRC64.checksum(&payload);
            payload.extend_from_slice(&crc.to_le_bytes());
            if let Ok((crate::keyspace::TYPE_STRING, data)) = value_of(&payload) {
                proptest::prop_assert_eq!(value_of(&serialize_string(&data)), Ok(string(&data)));
            }
            if let Ok(codes) = deserialize_functions(&payload) {
                let again = serialize_functions(codes.iter().map(Vec::as_slice));
                proptest::prop_assert_eq!(deserialize_functions(&again), Ok(codes));
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
