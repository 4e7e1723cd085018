//! Whole RDB files, as a Redis master sends one to a replica (`crate::replica`):
//! the header, the file's checksum, and the keys, each handed out as a
//! RESTORE payload (its object, the RDB version and a CRC-64) so that it
//! is stored by RESTORE's own code, with its expiry time and LFU counter.
//!
//! Read: RDB versions 1 to 12 (Redis 7.4), the auxiliary fields (skipped),
//! database selection and sizes, expiry times in seconds and in
//! milliseconds, LRU idle times and LFU counters, function libraries, and
//! the objects RESTORE reads (Redis 6's ziplists too). Refused with an
//! error that says what and where: a module's data, objects in encodings
//! RESTORE does not read (Redis 2.4's zipmaps, Redis 7.4's hashes with
//! field expiry times), a bad checksum, anything cut short or malformed.

use super::{stream, value, Reader, Refused, OPCODE_FUNCTION2, OPCODE_FUNCTION_RC, RDB_VERSION};

const OPCODE_SLOT_INFO: u8 = 244;
const OPCODE_MODULE_AUX: u8 = 247;
const OPCODE_IDLE: u8 = 248;
const OPCODE_FREQ: u8 = 249;
pub(super) const OPCODE_AUX: u8 = 250;
const OPCODE_RESIZEDB: u8 = 251;
pub(super) const OPCODE_EXPIRETIME_MS: u8 = 252;
const OPCODE_EXPIRETIME: u8 = 253;
pub(super) const OPCODE_SELECTDB: u8 = 254;
pub(super) const OPCODE_EOF: u8 = 255;

/// One key of the file.
#[derive(Debug, PartialEq)]
pub struct Entry {
    /// The database it belongs to (ScaledKV has only 0).
    pub db: u64,
    pub key: Vec<u8>,
    /// What RESTORE takes from the master's link: the object, the RDB
    /// version, and a CRC-64 of zero, unchecked there
    /// (`deserialize_from_master`): the file's checksum covered it.
    pub payload: Vec<u8>,
    /// Unix time in milliseconds.
    pub expiry_ms: Option<u64>,
    /// The LFU counter, if the master keeps them.
    pub freq: Option<u8>,
}

#[derive(Debug, PartialEq)]
pub enum Item {
    Entry(Entry),
    /// A function library's code (FUNCTION LOAD's argument).
    Library(Vec<u8>),
}

/// Why a file cannot be read, with the byte where the trouble is.
#[derive(Debug, PartialEq, thiserror::Error)]
#[error("RDB file refused at byte {at}: {why}")]
pub struct RdbError {
    pub at: usize,
    pub why: String,
}

pub struct RdbFile<'a> {
    reader: Reader<'a>,
    /// The body's length: the header and checksum are not the reader's.
    len: usize,
    db: u64,
    done: bool,
}

impl<'a> RdbFile<'a> {
    /// Checks the header and, for files that carry one, the checksum of
    /// the whole file, before anything is read from it.
    pub fn open(bytes: &'a [u8]) -> Result<RdbFile<'a>, RdbError> {
        let refuse = |at, why: &str| Err(RdbError { at, why: why.into() });
        if bytes.len() < 9 || &bytes[..5] != b"REDIS" {
            return refuse(0, "not an RDB file (no REDIS header)");
        }
        let version: u16 = match std::str::from_utf8(&bytes[5..9]).ok().and_then(|v| v.parse().ok()) {
            Some(version) if (1..=super::NEWEST_RDB_VERSION).contains(&version) => version,
            _ => {
                let shown = String::from_utf8_lossy(&bytes[5..9]);
                return refuse(5, &format!("RDB version {shown} (this server reads 1 to 12)"));
            }
        };
        let mut body = &bytes[9..];
        // Since version 5 a CRC-64 of everything before it follows the
        // EOF opcode; zero when the master has `rdbchecksum no`.
        if version >= 5 {
            if bytes.len() < 9 + 1 + 8 || bytes[bytes.len() - 9] != OPCODE_EOF {
                return refuse(bytes.len(), "cut short (no end of file marker)");
            }
            let (before, crc) = bytes.split_at(bytes.len() - 8);
            let crc = u64::from_le_bytes(crc.try_into().expect("8 bytes"));
            if crc != 0 && super::CRC64.checksum(before) != crc {
                return refuse(bytes.len() - 8, "checksum mismatch");
            }
            body = &bytes[9..bytes.len() - 8];
        }
        Ok(RdbFile { reader: Reader { bytes: body }, len: body.len(), db: 0, done: false })
    }

    /// Where the reader is, in bytes from the file's start.
    fn at(&self) -> usize {
        9 + self.len - self.reader.bytes.len()
    }

    fn refuse<T>(&self, why: impl Into<String>) -> Result<T, RdbError> {
        Err(RdbError { at: self.at(), why: why.into() })
    }

    /// The next key or library; None after the end of file marker.
    pub fn next_item(&mut self) -> Result<Option<Item>, RdbError> {
        let (mut expiry_ms, mut freq) = (None, None);
        while !self.done {
            let at = self.at();
            let bad = |what: &str| RdbError { at, why: format!("bad {what}") };
            let opcode = self.reader.byte().or_else(|_| self.refuse("cut short (no end of file marker)"))?;
            let reader = &mut self.reader;
            match opcode {
                OPCODE_EOF => {
                    if !reader.bytes.is_empty() {
                        return self.refuse("bytes after the end of file marker");
                    }
                    self.done = true;
                }
                OPCODE_AUX => {
                    reader.string().and_then(|_| reader.string()).map_err(|_| bad("auxiliary field"))?;
                }
                OPCODE_SELECTDB => self.db = reader.number().map_err(|_| bad("database number"))?,
                OPCODE_RESIZEDB => {
                    reader.number().and_then(|_| reader.number()).map_err(|_| bad("database sizes"))?;
                }
                OPCODE_SLOT_INFO => {
                    (0..3).try_for_each(|_| reader.number().map(drop)).map_err(|_| bad("slot information"))?;
                }
                OPCODE_EXPIRETIME_MS => {
                    let ms = reader.take(8).map_err(|_| bad("expiry time"))?;
                    expiry_ms = Some(u64::from_le_bytes(ms.try_into().expect("8")));
                }
                OPCODE_EXPIRETIME => {
                    let secs = reader.take(4).map_err(|_| bad("expiry time"))?;
                    expiry_ms = Some(u32::from_le_bytes(secs.try_into().expect("4")) as u64 * 1000);
                }
                OPCODE_FREQ => freq = Some(reader.byte().map_err(|_| bad("LFU counter"))?),
                // An LRU idle time: ScaledKV keeps no access times.
                OPCODE_IDLE => drop(reader.number().map_err(|_| bad("idle time"))?),
                OPCODE_FUNCTION2 => {
                    return Ok(Some(Item::Library(reader.string().map_err(|_| bad("function library"))?)));
                }
                OPCODE_FUNCTION_RC => return self.refuse("a function library of Redis 7.0's release candidates"),
                OPCODE_MODULE_AUX => return self.refuse("a module's data (modules are not supported)"),
                kind => return self.entry(kind, expiry_ms, freq).map(|entry| Some(Item::Entry(entry))),
            }
        }
        Ok(None)
    }

    fn entry(&mut self, kind: u8, expiry_ms: Option<u64>, freq: Option<u8>) -> Result<Entry, RdbError> {
        let key = self.reader.string().or_else(|_| self.refuse("bad key"))?;
        let before = self.reader.bytes;
        let read = match kind {
            stream::TYPE_LISTPACKS | stream::TYPE_LISTPACKS_2 | stream::TYPE_LISTPACKS_3 => {
                stream::deserialize(kind, &mut self.reader).map(drop)
            }
            _ => value(kind, &mut self.reader).map(drop),
        };
        if let Err(refused) = read {
            let name = String::from_utf8_lossy(&key[..key.len().min(64)]).into_owned();
            let why = match refused {
                Refused::OtherType => format!("key '{name}': a value of RDB type {kind} (a module's, a zipmap of Redis 2.4, or a hash with field expiry times of Redis 7.4: not read by ScaledKV)"),
                Refused::TooBig => format!("key '{name}': a value past the largest this server stores"),
                _ => format!("key '{name}': a malformed value of RDB type {kind}"),
            };
            return self.refuse(why);
        }
        let object_len = before.len() - self.reader.bytes.len();
        let mut payload = Vec::with_capacity(1 + object_len + 10);
        payload.push(kind);
        payload.extend_from_slice(&before[..object_len]);
        payload.extend_from_slice(&RDB_VERSION.to_le_bytes());
        payload.extend_from_slice(&[0; 8]);
        Ok(Entry { db: self.db, key, payload, expiry_ms, freq })
    }
}

#[cfg(test)]
mod tests {
    use super::super::{deserialize_from_master as deserialize, write_length, write_string, Object, CRC64};
    use super::*;

    /// A version-10 file of `body` (opcodes and entries), with its EOF and
    /// checksum.
    fn file(body: &[u8]) -> Vec<u8> {
        let mut bytes = b"REDIS0010".to_vec();
        bytes.extend_from_slice(body);
        bytes.push(OPCODE_EOF);
        let crc = CRC64.checksum(&bytes);
        bytes.extend_from_slice(&crc.to_le_bytes());
        bytes
    }

    fn string_entry(out: &mut Vec<u8>, key: &[u8], value: &[u8]) {
        out.push(0);
        write_string(out, key);
        write_string(out, value);
    }

    fn items(bytes: &[u8]) -> Result<Vec<Item>, RdbError> {
        let mut file = RdbFile::open(bytes)?;
        let mut items = Vec::new();
        while let Some(item) = file.next_item()? {
            items.push(item);
        }
        Ok(items)
    }

    fn sample() -> Vec<u8> {
        let mut body = Vec::new();
        body.push(OPCODE_AUX);
        write_string(&mut body, b"redis-ver");
        write_string(&mut body, b"7.0.15");
        body.push(OPCODE_SELECTDB);
        write_length(&mut body, 0);
        body.push(OPCODE_RESIZEDB);
        write_length(&mut body, 2);
        write_length(&mut body, 1);
        string_entry(&mut body, b"plain", b"hello");
        body.push(OPCODE_EXPIRETIME_MS);
        body.extend_from_slice(&1_900_000_000_000u64.to_le_bytes());
        body.push(OPCODE_FREQ);
        body.push(42);
        string_entry(&mut body, b"counter", b"12345");
        body.push(OPCODE_FUNCTION2);
        write_string(&mut body, b"#!lua name=lib\nredis.register_function('f', function() return 1 end)");
        body.push(OPCODE_SELECTDB);
        write_length(&mut body, 3);
        body.push(OPCODE_EXPIRETIME);
        body.extend_from_slice(&1_900_000_000u32.to_le_bytes());
        string_entry(&mut body, b"elsewhere", b"x");
        file(&body)
    }

    #[test]
    fn reads_keys_expiry_times_counters_libraries_and_databases() {
        let items = items(&sample()).unwrap();
        assert_eq!(items.len(), 4, "{items:?}");
        let Item::Entry(plain) = &items[0] else { panic!("{items:?}") };
        assert_eq!((plain.db, &plain.key[..], plain.expiry_ms, plain.freq), (0, &b"plain"[..], None, None));
        let Ok(Object::Value(_, data)) = deserialize(&plain.payload) else { panic!("{plain:?}") };
        assert_eq!(data, b"hello");
        let Item::Entry(counter) = &items[1] else { panic!("{items:?}") };
        assert_eq!((counter.expiry_ms, counter.freq), (Some(1_900_000_000_000), Some(42)));
        let Ok(Object::Value(_, data)) = deserialize(&counter.payload) else { panic!("{counter:?}") };
        assert_eq!(data, b"12345");
        assert!(matches!(&items[2], Item::Library(code) if code.starts_with(b"#!lua name=lib")));
        let Item::Entry(elsewhere) = &items[3] else { panic!("{items:?}") };
        assert_eq!((elsewhere.db, elsewhere.expiry_ms), (3, Some(1_900_000_000_000)));
    }

    #[test]
    fn damaged_files_are_refused_with_where_never_misread() {
        let good = sample();
        assert!(items(&good).is_ok());
        for cut in 0..good.len() {
            assert!(items(&good[..cut]).is_err(), "cut at {cut}");
        }
        for at in 0..good.len() {
            let mut bad = good.clone();
            bad[at] ^= 0x10;
            assert!(items(&bad).is_err(), "byte {at}");
        }
        let error = items(b"REDIS0099xxxxxxxxxxxx").unwrap_err();
        assert_eq!(error.why, "RDB version 0099 (this server reads 1 to 12)");
        assert_eq!(items(b"RDB").unwrap_err().why, "not an RDB file (no REDIS header)");
    }

    #[test]
    fn a_file_without_a_checksum_is_read_and_modules_are_refused() {
        let mut body = b"REDIS0010".to_vec();
        string_entry(&mut body, b"k", b"v");
        body.push(OPCODE_EOF);
        body.extend_from_slice(&[0; 8]);
        assert_eq!(items(&body).unwrap().len(), 1);
        let mut module = Vec::new();
        module.push(OPCODE_MODULE_AUX);
        write_length(&mut module, 1);
        assert!(items(&file(&module)).unwrap_err().why.contains("module"));
        // A module's value: refused, naming the key; a malformed ziplist.
        let mut module = vec![7];
        write_string(&mut module, b"m");
        let error = items(&file(&module)).unwrap_err();
        assert!(error.why.starts_with("key 'm': a value of RDB type 7 (a module's"), "{error}");
        let mut old = vec![13];
        write_string(&mut old, b"h");
        write_string(&mut old, b"zl");
        let error = items(&file(&old)).unwrap_err();
        assert_eq!(error.why, "key 'h': a malformed value of RDB type 13");
    }

    /// Files redis-server 7.0.15 wrote (`redis-cli --rdb`), kept as the
    /// fuzz target's seeds without their header and trailer: every key and
    /// library is read, and its payload is one RESTORE reads.
    #[test]
    fn reads_the_files_redis_writes() {
        let seeds = [
            (&include_bytes!("../../../../../fuzz/seeds/rdb_file/strings")[..], 3, 0),
            (include_bytes!("../../../../../fuzz/seeds/rdb_file/small"), 5, 0),
            (include_bytes!("../../../../../fuzz/seeds/rdb_file/big"), 4, 0),
            (include_bytes!("../../../../../fuzz/seeds/rdb_file/stream"), 1, 1),
            (include_bytes!("../../../../../fuzz/seeds/rdb_file/db"), 2, 1),
        ];
        for (body, keys, libraries) in seeds {
            let mut file = b"REDIS0010".to_vec();
            file.extend_from_slice(body);
            file.push(OPCODE_EOF);
            file.extend_from_slice(&[0; 8]);
            let items = items(&file).unwrap();
            let entries: Vec<&Entry> =
                items.iter().filter_map(|item| if let Item::Entry(e) = item { Some(e) } else { None }).collect();
            assert_eq!((entries.len(), items.len() - entries.len()), (keys, libraries), "{items:?}");
            for entry in entries {
                assert!(deserialize(&entry.payload).is_ok(), "{entry:?}");
            }
        }
    }

    proptest::proptest! {
        /// Any file under a valid checksum is read or refused, never a
        /// panic: the sample's start, then random bytes.
        #[test]
        fn any_file_is_read_or_refused(
            cut in 9usize..60,
            tail in proptest::collection::vec(proptest::num::u8::ANY, 0..64),
        ) {
            let sample = sample();
            let mut body = sample[9..cut.min(sample.len() - 9)].to_vec();
            body.extend_from_slice(&tail);
            let _ = items(&file(&body));
        }
    }
}
