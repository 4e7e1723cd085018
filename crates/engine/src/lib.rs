//! ScaledKV: a durable, log-structured, ordered key-value engine.
//!
//! Values live in an append-only value log of preallocated segments; an
//! ordered index in DRAM maps each key to its newest entry. Writers are
//! grouped so one persist (cache-line write-back on persistent memory,
//! fdatasync elsewhere) covers many of them; a write is acknowledged only once
//! durable and only then becomes visible. See docs/format.md and
//! docs/recovery.md.
//!
//! ```
//! use scaledkv::{Db, Durability, Options};
//! let dir = tempfile::tempdir().unwrap();
//! let db = Db::open(dir.path(), Options::default().durability(Durability::Sync)).unwrap();
//! db.put(b"b", b"2").unwrap();
//! db.put(b"a", b"1").unwrap();
//! let keys: Vec<Vec<u8>> = db.iter().map(|kv| kv.unwrap().0).collect();
//! assert_eq!(keys, vec![b"a".to_vec(), b"b".to_vec()]);
//! ```

mod background;
mod batch;
mod checkpoint;
mod commit;
mod db;
mod error;
mod evict;
mod gc;
mod index;
mod iter;
mod lfu;
pub mod log;
mod manifest;
mod options;
mod recovery;
mod stats;
#[cfg(test)]
mod testing;
mod tier;
pub mod walk;

pub use batch::{BatchEntry, SavePoint, WriteBatch};
pub use commit::WriteFuture;
pub use db::{now_ms, Db, KeyExpiry, Observer, PinnedValue, Snapshot};
pub use error::{Error, Result};
pub use evict::EVICT_AHEAD;
pub use iter::Iter;
pub use lfu::{Lfu, LFU_INIT_VAL};
pub use options::{
    Durability, Eviction, EvictionFilter, EvictionListener, Options, SsdTier, MAX_BATCH_BYTES, MAX_KEY_BYTES,
    MAX_VALUE_BYTES, MIN_CACHE_SEGMENTS,
};
pub use recovery::{RecoveryReport, Truncation};
pub use stats::Stats;
