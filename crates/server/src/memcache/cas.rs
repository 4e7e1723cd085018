//! CAS values for memcached items. Each write through the memcached
//! protocol stores a new one with the item (`keyspace::TYPE_ITEM`), so a
//! `cas` succeeds only if nothing wrote the item since the client's
//! `gets`, across restarts too: a CAS is an epoch (high 24 bits) and a
//! count within it (low 40 bits), and each start takes a new epoch,
//! written durably under a reserved key before any CAS of it is handed
//! out. A start therefore never hands out a CAS an item of an earlier one
//! may still hold.
//!
//! A string written through Redis has no stored CAS: its CAS is a hash of
//! its bytes with the top bit set (stored ones never have it), so `cas`
//! on it succeeds while its bytes are those the client read.

use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use scaledkv::Db;

/// Where the last epoch handed out is kept (kept by FLUSHALL, as the
/// format marker is).
pub const EPOCH_KEY: &[u8] = b"\xff\xff\x00memcached-cas-epoch";
const COUNT_BITS: u32 = 40;
const DERIVED: u64 = 1 << 63;

pub struct CasClock {
    next: AtomicU64,
    /// The highest epoch written under `EPOCH_KEY`.
    durable_epoch: AtomicU64,
    persist: Mutex<()>,
}

impl CasClock {
    /// Takes the next epoch (written before this returns); whether the
    /// key was new (one more of the server's own entries).
    pub fn open(db: &Db) -> scaledkv::Result<(CasClock, bool)> {
        let stored = db.get(EPOCH_KEY)?;
        let last = stored.as_deref().and_then(|b| b.try_into().ok()).map_or(0, u64::from_le_bytes);
        let epoch = last + 1;
        db.put(EPOCH_KEY, &epoch.to_le_bytes())?;
        let clock = CasClock {
            // Count 0 is skipped: CAS 0 means "none" to memcached clients.
            next: AtomicU64::new((epoch << COUNT_BITS) | 1),
            durable_epoch: AtomicU64::new(epoch),
            persist: Mutex::new(()),
        };
        Ok((clock, stored.is_none()))
    }

    /// A CAS no item holds or held.
    pub fn next(&self, db: &Db) -> scaledkv::Result<u64> {
        let cas = self.next.fetch_add(1, Ordering::Relaxed);
        let epoch = cas >> COUNT_BITS;
        if epoch > self.durable_epoch.load(Ordering::Acquire) {
            // 2^40 writes since the epoch began: the next one is written
            // first (once, whoever gets here first).
            let _guard = self.persist.lock();
            if epoch > self.durable_epoch.load(Ordering::Acquire) {
                db.put(EPOCH_KEY, &epoch.to_le_bytes())?;
                self.durable_epoch.store(epoch, Ordering::Release);
            }
        }
        Ok(cas)
    }
}

/// The CAS of a string written through Redis: its bytes' hash.
pub fn derived(data: &[u8]) -> u64 {
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    data.hash(&mut hasher);
    hasher.finish() | DERIVED
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_start_hands_out_cas_values_above_every_earlier_one() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), scaledkv::Options::default()).unwrap();
        let (first, created) = CasClock::open(&db).unwrap();
        assert!(created);
        let a = first.next(&db).unwrap();
        let b = first.next(&db).unwrap();
        assert!(b > a && a > 0 && a & DERIVED == 0);
        let (second, created) = CasClock::open(&db).unwrap();
        assert!(!created);
        assert!(second.next(&db).unwrap() > b + (1 << 39), "a new epoch");
    }

    #[test]
    fn an_exhausted_epoch_is_written_before_its_successor_is_used() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), scaledkv::Options::default()).unwrap();
        let (clock, _) = CasClock::open(&db).unwrap();
        clock.next.store((2 << COUNT_BITS) - 1, Ordering::Relaxed);
        clock.next(&db).unwrap();
        let cas = clock.next(&db).unwrap();
        assert_eq!(cas >> COUNT_BITS, 2);
        assert_eq!(db.get(EPOCH_KEY).unwrap().unwrap(), 2u64.to_le_bytes());
        let (reopened, _) = CasClock::open(&db).unwrap();
        assert!(reopened.next(&db).unwrap() > cas);
    }

    #[test]
    fn derived_values_never_collide_with_stored_ones() {
        assert_ne!(derived(b"a"), derived(b"b"));
        assert_eq!(derived(b"a"), derived(b"a"));
        assert!(derived(b"") & DERIVED != 0);
    }
}
