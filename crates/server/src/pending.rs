//! Writes queued in the engine but not yet durable, which the next holder
//! of their keys' locks reads: early lock release.
//!
//! Why: a write command holds its keys' locks from its first read until
//! its batch is durable, so that the next read-modify-write of those keys
//! reads what it wrote. On a disk that made every client of a hot key wait
//! for the one before it to flush: 50 clients' INCRs of one key ran at
//! 6.0k/s, one fdatasync each, against 68.5k/s for Redis `appendfsync
//! always`. Now a writer whose key another client is waiting for puts its
//! writes here once they are queued and lets its locks go; the next
//! holder reads them here, queues its own writes behind them, and both
//! share a flush. Each reply still waits for its own writes to be durable,
//! and the log makes that imply the earlier ones are: groups are written
//! in queue order, and a failed group fails every later one (the engine
//! refuses writes once one failed). A command that read from here and
//! wrote nothing waits for `Db::enqueue_barrier` before it replies.
//!
//! Only lock holders read here (`Writes::see_pending`). Commands that take
//! no lock (GET, ZRANGE ...) read the engine alone, so no reader ever sees
//! a write that a crash could take away.
//!
//! The map must never hold an entry older than the engine's: every commit
//! either publishes its writes (replacing older entries) or, where it held
//! its locks until durable, forgets its keys' entries before it lets the
//! locks go (`commands::commit`); FLUSHALL waits for every published write
//! and clears the map. An entry whose writer is done goes with its
//! `Ticket`; one that a later writer replaced stays until that writer's
//! ticket goes.

use std::collections::BTreeMap;
use std::ops::Bound;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};

use parking_lot::Mutex;
use scaledkv::WriteBatch;

/// A published write: the value with its type byte and its expiry time,
/// or None for a delete.
pub type PendingValue = Option<(Vec<u8>, Option<u64>)>;

#[derive(Default)]
pub struct Pending {
    map: Mutex<BTreeMap<Vec<u8>, (u64, PendingValue)>>,
    /// Entries in `map`, read without its lock: most commits find none.
    len: AtomicUsize,
    tickets: AtomicU64,
}

/// A batch's writes copied before it is queued (it moves into the engine),
/// published once the engine took it.
pub struct Staged(Vec<(Vec<u8>, PendingValue)>);

/// Takes a published batch's entries out of the map when dropped, where
/// no later writer replaced them: once the batch is durable and visible
/// (or failed), or if the task waiting for it goes away.
pub struct Ticket<'a> {
    pending: &'a Pending,
    id: u64,
    keys: Vec<Vec<u8>>,
}

impl Pending {
    pub fn is_empty(&self) -> bool {
        self.len.load(Ordering::Acquire) == 0
    }

    pub fn stage(batch: &WriteBatch) -> Staged {
        Staged(
            batch
                .entries()
                .map(|(key, value)| (key.to_vec(), value.map(|(bytes, expiry)| (bytes.to_vec(), expiry))))
                .collect(),
        )
    }

    /// Publishes `staged` (a batch the engine has queued) over any older
    /// entries of its keys.
    pub fn publish(&self, staged: Staged) -> Ticket<'_> {
        let id = self.tickets.fetch_add(1, Ordering::Relaxed) + 1;
        let mut keys = Vec::with_capacity(staged.0.len());
        let mut map = self.map.lock();
        for (key, value) in staged.0 {
            keys.push(key.clone());
            map.insert(key, (id, value));
        }
        self.len.store(map.len(), Ordering::Release);
        Ticket { pending: self, id, keys }
    }

    /// The keys of `batch` that have published entries (usually none): a
    /// batch held to the end forgets them once it is visible. Only holders
    /// of a key's lock publish it, so none can join while the caller holds
    /// them.
    pub fn published_of(&self, batch: &WriteBatch) -> Vec<Vec<u8>> {
        let map = self.map.lock();
        batch.entries().filter(|(key, _)| map.contains_key(*key)).map(|(key, _)| key.to_vec()).collect()
    }

    /// Drops the entries of `keys`, whatever published them: the caller's
    /// own writes of those keys are durable and visible, and newer.
    pub fn forget<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) {
        let mut map = self.map.lock();
        for key in keys {
            map.remove(key);
        }
        self.len.store(map.len(), Ordering::Release);
    }

    /// Drops every entry: the caller waited until all published writes
    /// were durable and visible, and holds every key's lock.
    pub fn clear(&self) {
        let mut map = self.map.lock();
        map.clear();
        self.len.store(0, Ordering::Release);
    }

    /// The newest published write of `key`, if any.
    pub fn get(&self, key: &[u8]) -> Option<PendingValue> {
        self.map.lock().get(key).map(|(_, value)| value.clone())
    }

    /// The newest published writes of the keys within `bounds`, in order.
    pub fn within(&self, bounds: (Bound<&[u8]>, Bound<&[u8]>)) -> Vec<(Vec<u8>, PendingValue)> {
        self.map.lock().range::<[u8], _>(bounds).map(|(key, (_, value))| (key.clone(), value.clone())).collect()
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut map = self.pending.map.lock();
        for key in &self.keys {
            if map.get(key).is_some_and(|(id, _)| *id == self.id) {
                map.remove(key);
            }
        }
        self.pending.len.store(map.len(), Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(entries: &[(&str, Option<&str>)]) -> WriteBatch {
        let mut batch = WriteBatch::new();
        for (key, value) in entries {
            match value {
                Some(value) => batch.put(key.as_bytes(), value.as_bytes()),
                None => batch.delete(key.as_bytes()),
            }
        }
        batch
    }

    fn value(text: &str) -> Option<PendingValue> {
        Some(Some((text.as_bytes().to_vec(), None)))
    }

    #[test]
    fn newest_publisher_wins_and_each_ticket_takes_only_its_own() {
        let pending = Pending::default();
        assert!(pending.is_empty());
        let first = pending.publish(Pending::stage(&batch(&[("a", Some("1")), ("b", Some("1")), ("c", None)])));
        let second = pending.publish(Pending::stage(&batch(&[("b", Some("2")), ("d", Some("2"))])));
        assert_eq!(pending.get(b"a"), value("1"));
        assert_eq!(pending.get(b"b"), value("2"));
        assert_eq!(pending.get(b"c"), Some(None));
        assert_eq!(pending.get(b"e"), None);
        let within = pending.within((Bound::Included(&b"b"[..]), Bound::Excluded(&b"d"[..])));
        assert_eq!(within, [(b"b".to_vec(), Some((b"2".to_vec(), None))), (b"c".to_vec(), None)]);
        assert_eq!(pending.published_of(&batch(&[("b", None), ("x", Some("1")), ("c", Some("1"))])), [b"b", b"c"]);
        drop(first);
        // `b` is the second's: it stays with it.
        assert_eq!((pending.get(b"a"), pending.get(b"b"), pending.get(b"c")), (None, value("2"), None));
        pending.forget([&b"d"[..]]);
        assert_eq!(pending.get(b"d"), None);
        assert!(!pending.is_empty());
        drop(second);
        assert!(pending.is_empty());
        let third = pending.publish(Pending::stage(&batch(&[("x", Some("3"))])));
        pending.clear();
        assert!(pending.is_empty());
        drop(third);
        assert!(pending.is_empty());
    }
}
