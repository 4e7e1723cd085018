//! What a YCSB workload drives: the embedded engines, and servers over
//! the Redis or the memcached protocol (ScaledKV's own, Redis, memcached).
//! Each worker thread gets its own `Client` (its own connection), as each
//! YCSB client thread has its own binding instance.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;

use super::record::{decode, encode, merge, Fields};
use crate::store::Store;

pub trait Client: Send {
    fn insert(&mut self, key: &str, fields: &Fields) -> Result<(), String>;
    /// Every field of the record, or `None` if there is none.
    fn read(&mut self, key: &str) -> Result<Option<Fields>, String>;
    /// Replaces some fields of a record.
    fn update(&mut self, key: &str, fields: &Fields) -> Result<(), String>;
    /// Up to `count` records from `start` on, in the target's scan order.
    fn scan(&mut self, start: &str, count: usize) -> Result<Vec<(String, Fields)>, String>;
}

pub trait Target: Sync {
    fn connect(&self) -> Result<Box<dyn Client>, String>;
    fn describe(&self) -> String;
    /// memcached has no ordered scan (YCSB's binding answers NOT_IMPLEMENTED).
    fn scans(&self) -> bool {
        true
    }
    fn report(&self) -> Vec<String> {
        Vec::new()
    }
}

/// Picks the target from `--target`: `scaledkv`, `rocksdb`,
/// `redis://HOST:PORT` or `memcached://HOST:PORT`.
pub fn open(spec: &str, db: &Path, options: scaledkv::Options, fresh: bool) -> Result<Box<dyn Target>, String> {
    if let Some(address) = spec.strip_prefix("redis://") {
        return Ok(Box::new(Resp { address: address.trim_end_matches('/').to_string() }));
    }
    if let Some(address) = spec.strip_prefix("memcached://") {
        return Ok(Box::new(Memcached { address: address.trim_end_matches('/').to_string() }));
    }
    match spec {
        "scaledkv" => Ok(Box::new(Embedded(Arc::new(crate::store::ScaledKv::open(db, options, fresh)?)))),
        #[cfg(feature = "rocksdb")]
        "rocksdb" => {
            let sync = options.durability != scaledkv::Durability::Buffered;
            Ok(Box::new(Embedded(Arc::new(crate::store::rocks::Rocks::open(db, sync, false, 8 << 30, fresh)?))))
        }
        other => Err(format!(
            "unknown --target `{other}`: scaledkv, {}redis://HOST:PORT or memcached://HOST:PORT",
            if cfg!(feature = "rocksdb") { "rocksdb, " } else { "rocksdb (build with --features rocksdb), " }
        )),
    }
}

/// An embedded engine: a record is one value (`record::encode`); an
/// update reads the record, replaces its fields and writes it back, as
/// YCSB's RocksDB binding does.
struct Embedded(Arc<dyn Store>);

impl Target for Embedded {
    fn connect(&self) -> Result<Box<dyn Client>, String> {
        Ok(Box::new(Embedded(self.0.clone())))
    }

    fn describe(&self) -> String {
        self.0.describe()
    }

    fn report(&self) -> Vec<String> {
        self.0.report()
    }
}

impl Client for Embedded {
    fn insert(&mut self, key: &str, fields: &Fields) -> Result<(), String> {
        self.0.put(key.as_bytes(), &encode(fields))
    }

    fn read(&mut self, key: &str) -> Result<Option<Fields>, String> {
        let mut record = None;
        self.0.get_with(key.as_bytes(), &mut |value| record = Some(decode(value)))?;
        record.transpose()
    }

    fn update(&mut self, key: &str, fields: &Fields) -> Result<(), String> {
        let old = self.read(key)?.unwrap_or_default();
        self.insert(key, &merge(old, fields))
    }

    fn scan(&mut self, start: &str, count: usize) -> Result<Vec<(String, Fields)>, String> {
        let mut records = Vec::with_capacity(count);
        self.0.scan_with(start.as_bytes(), count, &mut |key, value| {
            records.push(decode(value).map(|fields| (String::from_utf8_lossy(key).into_owned(), fields)))
        })?;
        records.into_iter().collect()
    }
}

/// The sorted set YCSB's Redis binding keeps every key in, scored by the
/// key's Java `hashCode`, for scans.
const INDEX_KEY: &str = "_indices";

fn java_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(i32::from(c)))
}

/// A Redis-protocol server, with YCSB's Redis binding's data model: a
/// record is a hash (HMSET, HGETALL), and inserts also add the key to
/// the `_indices` sorted set, which scans walk (ZRANGEBYSCORE, then a
/// HGETALL per key).
struct Resp {
    address: String,
}

struct RespClient(redis::Connection);

impl Target for Resp {
    fn connect(&self) -> Result<Box<dyn Client>, String> {
        let client = redis::Client::open(format!("redis://{}/", self.address)).map_err(|e| e.to_string())?;
        let connection = client.get_connection().map_err(|e| format!("{}: {e}", self.address))?;
        Ok(Box::new(RespClient(connection)))
    }

    fn describe(&self) -> String {
        format!("Target:     Redis protocol at {} (a record is a hash; scans walk `{INDEX_KEY}`)", self.address)
    }
}

impl RespClient {
    fn hmset(&mut self, key: &str, fields: &Fields) -> Result<(), String> {
        let mut cmd = redis::cmd("HMSET");
        cmd.arg(key);
        for (name, value) in fields {
            cmd.arg(name).arg(value);
        }
        cmd.query::<()>(&mut self.0).map_err(|e| e.to_string())
    }
}

impl Client for RespClient {
    fn insert(&mut self, key: &str, fields: &Fields) -> Result<(), String> {
        self.hmset(key, fields)?;
        redis::cmd("ZADD")
            .arg(INDEX_KEY)
            .arg(java_hash(key))
            .arg(key)
            .query::<()>(&mut self.0)
            .map_err(|e| e.to_string())
    }

    fn read(&mut self, key: &str) -> Result<Option<Fields>, String> {
        let flat: Vec<Vec<u8>> = redis::cmd("HGETALL").arg(key).query(&mut self.0).map_err(|e| e.to_string())?;
        if flat.is_empty() {
            return Ok(None);
        }
        let mut pairs = flat.into_iter();
        let mut fields = Vec::new();
        while let (Some(name), Some(value)) = (pairs.next(), pairs.next()) {
            fields.push((name, value));
        }
        Ok(Some(fields))
    }

    fn update(&mut self, key: &str, fields: &Fields) -> Result<(), String> {
        self.hmset(key, fields)
    }

    fn scan(&mut self, start: &str, count: usize) -> Result<Vec<(String, Fields)>, String> {
        let keys: Vec<String> = redis::cmd("ZRANGEBYSCORE")
            .arg(INDEX_KEY)
            .arg(java_hash(start))
            .arg("+inf")
            .arg("LIMIT")
            .arg(0)
            .arg(count)
            .query(&mut self.0)
            .map_err(|e| e.to_string())?;
        let mut out = Vec::with_capacity(keys.len());
        for key in keys {
            let fields = self.read(&key)?.unwrap_or_default();
            out.push((key, fields));
        }
        Ok(out)
    }
}

/// A memcached-protocol server (memcached, or ScaledKV's memcached port):
/// a record is one item (`record::encode`); an update reads the item,
/// replaces its fields and sets it again.
struct Memcached {
    address: String,
}

/// A memcached text-protocol connection (also `cache.rs`'s).
pub(crate) struct MemcachedClient {
    reader: BufReader<TcpStream>,
    writer: BufWriter<TcpStream>,
    line: String,
}

impl Target for Memcached {
    fn connect(&self) -> Result<Box<dyn Client>, String> {
        Ok(Box::new(MemcachedClient::connect(&self.address)?))
    }

    fn describe(&self) -> String {
        format!("Target:     memcached protocol at {} (a record is one item; no scans)", self.address)
    }

    fn scans(&self) -> bool {
        false
    }
}

impl MemcachedClient {
    pub(crate) fn connect(address: &str) -> Result<MemcachedClient, String> {
        let stream = TcpStream::connect(address).map_err(|e| format!("{address}: {e}"))?;
        stream.set_nodelay(true).map_err(|e| e.to_string())?;
        let reader = BufReader::new(stream.try_clone().map_err(|e| e.to_string())?);
        Ok(MemcachedClient { reader, writer: BufWriter::new(stream), line: String::new() })
    }

    /// `set` with flags 0 and no expiry.
    pub(crate) fn set(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        let sent = write!(self.writer, "set {key} 0 0 {}\r\n", value.len())
            .and_then(|_| self.writer.write_all(value))
            .and_then(|_| self.writer.write_all(b"\r\n"))
            .and_then(|_| self.writer.flush());
        sent.map_err(|e| e.to_string())?;
        match self.reply_line()? {
            "STORED" => Ok(()),
            other => Err(format!("set {key}: {other}")),
        }
    }

    /// `get` of one key: its value, or `None` on a miss.
    pub(crate) fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, String> {
        write!(self.writer, "get {key}\r\n").and_then(|_| self.writer.flush()).map_err(|e| e.to_string())?;
        let header = self.reply_line()?;
        if header == "END" {
            return Ok(None);
        }
        let length: usize = header
            .strip_prefix("VALUE ")
            .and_then(|rest| rest.rsplit(' ').next())
            .and_then(|n| n.parse().ok())
            .ok_or_else(|| format!("get {key}: {header}"))?;
        let mut value = vec![0; length + 2];
        self.reader.read_exact(&mut value).map_err(|e| e.to_string())?;
        value.truncate(length);
        match self.reply_line()? {
            "END" => Ok(Some(value)),
            other => Err(format!("get {key}: expected END, got {other}")),
        }
    }

    fn reply_line(&mut self) -> Result<&str, String> {
        self.line.clear();
        match self.reader.read_line(&mut self.line) {
            Ok(0) => Err("memcached closed the connection".into()),
            Ok(_) => Ok(self.line.trim_end()),
            Err(e) => Err(e.to_string()),
        }
    }
}

impl Client for MemcachedClient {
    fn insert(&mut self, key: &str, fields: &Fields) -> Result<(), String> {
        self.set(key, &encode(fields))
    }

    fn read(&mut self, key: &str) -> Result<Option<Fields>, String> {
        self.get(key)?.map(|value| decode(&value)).transpose()
    }

    fn update(&mut self, key: &str, fields: &Fields) -> Result<(), String> {
        let old = self.read(key)?.unwrap_or_default();
        self.insert(key, &merge(old, fields))
    }

    fn scan(&mut self, _start: &str, _count: usize) -> Result<Vec<(String, Fields)>, String> {
        Err("memcached has no ordered scan".into())
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn java_hash_code() {
        // Java's "user123".hashCode() and "".hashCode().
        assert_eq!(super::java_hash("user123"), -147_178_873);
        assert_eq!(super::java_hash(""), 0);
    }
}
