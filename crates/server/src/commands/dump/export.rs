//! The whole data set as one RDB file, as of one moment: what a Redis
//! master sends `redis-cli --rdb` (`crate::rdb_sync`) and what SAVE and
//! BGSAVE write (`crate::rdb_save`), loadable by Redis 7.0 and later and
//! by ScaledKV's own reader (`rdb.rs`).
//!
//! The moment is an engine snapshot read through `Snapshot::view`: every
//! key's value, a hash's fields and a list's chunks alike, is read as it
//! was when the export began, while clients go on writing. Each key is
//! written as DUMP serializes it (its object, without DUMP's footer), with
//! its expiry time; the function libraries, as of the export's start, go
//! first.

use super::rdb::{OPCODE_AUX, OPCODE_EOF, OPCODE_EXPIRETIME_MS, OPCODE_SELECTDB};
use super::{object_of, write_length, CRC64, OPCODE_FUNCTION2, RDB_VERSION};
use crate::commands::{CmdError, Ctx};
use crate::conn::ConnState;
use crate::keyspace::{Writes, RESERVED};
use crate::resp::{Out, Protocol};
use crate::server::Shared;

/// Keys collected per walk of the index (which holds its lock while it
/// walks), before their values are read.
const KEYS_PER_WALK: usize = 512;

/// What an export wrote.
#[derive(Debug, Default, PartialEq)]
pub struct Exported {
    pub keys: u64,
    pub bytes: u64,
    /// The engine's sequence number the file is the moment of.
    pub seq: u64,
}

/// Writes an RDB file of the data set as of `snapshot` (only the function
/// libraries, as of now, unless `keys`) to `sink`, in pieces of about
/// `piece` bytes. `sink` returns false to stop (the reader left): then
/// `Ok(None)`.
pub fn export(
    shared: &Shared,
    snapshot: &scaledkv::Snapshot<'_>,
    piece: usize,
    keys: bool,
    mut sink: impl FnMut(Vec<u8>) -> bool,
) -> Result<Option<Exported>, CmdError> {
    let mut file =
        Writer { buf: Vec::with_capacity(piece + 4096), digest: CRC64.digest(), exported: Exported::default() };
    file.header();
    file.exported.seq = snapshot.seq();
    let libraries = shared.functions.current();
    let mut conn = ConnState::detached(0, crate::socket::Peer::LOOPBACK, crate::socket::Peer::LOOPBACK);
    conn.authenticated = true;
    let mut out = Out::new(Protocol::Resp2);
    let mut writes = Writes::new(false);
    let mut ctx = Ctx { shared, conn: &mut conn, out: &mut out, writes: &mut writes, reads_count: false };
    let finished = snapshot.view(|| -> Result<bool, CmdError> {
        for library in libraries.iter() {
            file.buf.push(OPCODE_FUNCTION2);
            file.string(&library.code);
        }
        if !keys {
            return Ok(true);
        }
        file.buf.extend_from_slice(&[OPCODE_SELECTDB, 0]);
        let mut after: Option<Vec<u8>> = None;
        loop {
            let keys = keys_after(shared, after.as_deref());
            let Some(last) = keys.last() else { return Ok(true) };
            after = Some(last.clone());
            for key in &keys {
                // Expired since the snapshot: gone for a reader too.
                let Some(value) = ctx.writes.get_untouched(&shared.db, key)? else { continue };
                let object = object_of(&mut ctx, key, &value)?;
                ctx.out.buf.clear();
                file.entry(key, &object, value.expiry_ms());
                if file.buf.len() >= piece && !file.send(&mut sink) {
                    return Ok(false);
                }
            }
        }
    })?;
    if !finished {
        return Ok(None);
    }
    file.buf.push(OPCODE_EOF);
    file.digest.update(&file.buf);
    let crc = std::mem::replace(&mut file.digest, CRC64.digest()).finalize();
    file.buf.extend_from_slice(&crc.to_le_bytes());
    file.exported.bytes += file.buf.len() as u64;
    let buf = std::mem::take(&mut file.buf);
    Ok(sink(buf).then_some(file.exported))
}

/// Up to `KEYS_PER_WALK` clients' keys after `after`, in order.
fn keys_after(shared: &Shared, after: Option<&[u8]>) -> Vec<Vec<u8>> {
    use std::ops::Bound;
    let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
    let mut keys = Vec::with_capacity(KEYS_PER_WALK);
    shared.db.visit_keys::<&[u8], _>((lower, Bound::Excluded(RESERVED)), false, |key| {
        keys.push(key.to_vec());
        keys.len() < KEYS_PER_WALK
    });
    keys
}

struct Writer {
    buf: Vec<u8>,
    /// CRC-64 of what was sent before `buf`.
    digest: crc::Digest<'static, u64, crc::Table<16>>,
    exported: Exported,
}

impl Writer {
    /// The magic and version, and the auxiliary fields Redis writes
    /// (`redis-check-rdb` shows them; loaders skip them).
    fn header(&mut self) {
        self.buf.extend_from_slice(format!("REDIS{RDB_VERSION:04}").as_bytes());
        let ctime = (scaledkv::now_ms() / 1000).to_string();
        let version = concat!("scaledkv-", env!("CARGO_PKG_VERSION"));
        for (name, value) in [("redis-ver", "7.0.15"), ("redis-bits", "64"), ("ctime", &ctime), ("producer", version)] {
            self.buf.push(OPCODE_AUX);
            self.string(name.as_bytes());
            self.string(value.as_bytes());
        }
    }

    /// A plain string (keys and libraries are written uncompressed: a
    /// loader reads them either way).
    fn string(&mut self, bytes: &[u8]) {
        write_length(&mut self.buf, bytes.len() as u64);
        self.buf.extend_from_slice(bytes);
    }

    /// A key and its RDB object: the object's type byte goes before the
    /// key, the rest after.
    fn entry(&mut self, key: &[u8], object: &[u8], expiry_ms: Option<u64>) {
        if let Some(at) = expiry_ms {
            self.buf.push(OPCODE_EXPIRETIME_MS);
            self.buf.extend_from_slice(&at.to_le_bytes());
        }
        self.buf.push(object[0]);
        self.string(key);
        self.buf.extend_from_slice(&object[1..]);
        self.exported.keys += 1;
    }

    /// Hands the bytes so far to `sink`; false if it stopped taking them.
    fn send(&mut self, sink: &mut impl FnMut(Vec<u8>) -> bool) -> bool {
        self.digest.update(&self.buf);
        self.exported.bytes += self.buf.len() as u64;
        let capacity = self.buf.capacity();
        sink(std::mem::replace(&mut self.buf, Vec::with_capacity(capacity)))
    }
}
