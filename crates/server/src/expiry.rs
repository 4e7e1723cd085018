//! Active expiry. Expired keys are already invisible (the engine checks
//! expiry on every read, which is Redis's lazy expiry); this task drops
//! them when their time comes, as Redis's active expiry cycle does, so
//! that their memory and log space come back and their `expired`
//! notifications (and the invalidations of clients caching them) go out
//! on time.
//!
//! It knows when each key expires from `Volatile`, an index of the keys
//! with an expiry time (Redis's `expires` dict): every committed write
//! notes its keys' expiry there, and a pass over the whole key space at
//! start finds the keys written before. Due keys are dropped every 100 ms.
//! The pass then goes on, slowly, as a safety net for keys written by a
//! path that noted nothing.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use scaledkv::KeyExpiry;

use crate::server::Shared;

/// Keys dropped (or examined by the pass) per step.
const STEP_KEYS: usize = 1000;
/// Pause between steps when few keys were due: a tick of Redis's `hz`
/// (10 a second unless set; Redis keeps it within 1 to 500).
fn pause(shared: &Shared) -> Duration {
    let hz: u64 = shared.redis_params.value("hz").parse().unwrap_or(10);
    Duration::from_millis(1000 / hz.clamp(1, 500))
}
/// Steps between two steps of the pass once it has been over every key.
const SLOW_PASS_EVERY: u32 = 10;

/// A key with an expiry time was seen: from then on writes note the keys
/// they change without one too (to take them out of `Volatile`). For the
/// process (a server is one), so that writes to a server that never saw
/// an expiry note nothing.
static NOTES_REMOVALS: AtomicBool = AtomicBool::new(false);

/// Whether writes note keys they write without an expiry time (or delete).
pub fn notes_removals() -> bool {
    NOTES_REMOVALS.load(Ordering::Relaxed)
}

/// The keys with an expiry time, by time and by key.
#[derive(Default)]
pub struct Volatile {
    /// Commits' changes, in commit order, not yet in `index`: a commit
    /// only moves them here; the expiry task (and INFO) applies them.
    queue: Mutex<Vec<Change>>,
    index: Mutex<Index>,
    /// The pass has been over every key: the index holds every key with
    /// an expiry time (INFO's `expires` counts them).
    complete: AtomicBool,
}

enum Change {
    /// Every key was deleted (FLUSHALL).
    Clear,
    Keys(Changes),
}

/// Keys written and when they now expire (None: no longer), in the order
/// written: one buffer for a commit's keys, not an allocation each. A
/// pointer until the first key (every run and commit carries one, and
/// moves it: a wider struct cost GETs 0.1 µs in copies).
#[derive(Debug, Default)]
pub struct Changes(Option<Box<Buffer>>);

#[derive(Debug, Default)]
struct Buffer {
    keys: Vec<u8>,
    items: Vec<(u32, Option<u64>)>,
}

impl Changes {
    pub fn push(&mut self, key: &[u8], at: Option<u64>) {
        let buffer = self.0.get_or_insert_with(Default::default);
        buffer.keys.extend_from_slice(key);
        buffer.items.push((key.len() as u32, at));
    }

    pub fn clear(&mut self) {
        self.0 = None;
    }

    pub fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|buffer| buffer.items.is_empty())
    }

    /// How many keys are noted.
    pub fn len(&self) -> usize {
        self.0.as_ref().map_or(0, |buffer| buffer.items.len())
    }

    /// Keeps the first `len` keys noted.
    pub fn truncate(&mut self, len: usize) {
        if let Some(buffer) = &mut self.0 {
            let bytes = buffer.items.iter().take(len).map(|&(key_len, _)| key_len as usize).sum();
            buffer.items.truncate(len);
            buffer.keys.truncate(bytes);
        }
    }

    pub fn append(&mut self, other: &mut Changes) {
        let Some(mut theirs) = other.0.take() else { return };
        match &mut self.0 {
            None => self.0 = Some(theirs),
            Some(mine) => {
                mine.keys.append(&mut theirs.keys);
                mine.items.append(&mut theirs.items);
            }
        }
    }

    fn any_expiry(&self) -> bool {
        self.0.as_ref().is_some_and(|buffer| buffer.items.iter().any(|(_, at)| at.is_some()))
    }

    fn iter(&self) -> impl Iterator<Item = (&[u8], Option<u64>)> {
        let (keys, items) = self.0.as_deref().map_or((&[][..], &[][..]), |buffer| (&buffer.keys, &buffer.items));
        let mut at = 0;
        items.iter().map(move |&(len, expiry)| {
            let key = &keys[at..at + len as usize];
            at += len as usize;
            (key, expiry)
        })
    }
}

#[derive(Default)]
struct Index {
    /// Ordered by time, then by a sequence number (comparing integers
    /// only: keys compared with memcmp cost a write 0.7 µs).
    by_time: BTreeMap<(u64, u64), Arc<[u8]>>,
    by_key: HashMap<Arc<[u8]>, (u64, u64), foldhash::fast::RandomState>,
    next: u64,
    /// Sum of the expiry times, for INFO's `avg_ttl`.
    sum: u128,
}

impl Index {
    fn set(&mut self, key: &[u8], at: Option<u64>) {
        match (self.by_key.get_mut(key), at) {
            // Later than noted: left where it is, and moved when that time
            // comes (`KeyExpiry::At`). A key written again and again with a
            // time ahead (a session kept alive, a cache refilled) costs one
            // lookup per write, not a move each time.
            (Some(slot), Some(at)) if at >= slot.0 => return,
            (Some(slot), Some(at)) => {
                let old = std::mem::replace(slot, (at, self.next));
                let key = self.by_time.remove(&old).expect("indexed by time too");
                self.by_time.insert((at, self.next), key);
                self.sum = self.sum - old.0 as u128 + at as u128;
            }
            (Some(_), None) => {
                let old = self.by_key.remove(key).expect("found");
                self.by_time.remove(&old);
                self.sum -= old.0 as u128;
                return;
            }
            (None, Some(at)) => {
                let key: Arc<[u8]> = key.into();
                self.by_time.insert((at, self.next), key.clone());
                self.by_key.insert(key, (at, self.next));
                self.sum += at as u128;
            }
            (None, None) => return,
        }
        self.next += 1;
    }
}

impl Volatile {
    /// `key` expires `at` (None: never), found by the expiry task itself.
    fn set(&self, key: &[u8], at: Option<u64>) {
        if at.is_some() {
            NOTES_REMOVALS.store(true, Ordering::Relaxed);
        }
        self.index.lock().set(key, at);
    }

    /// Queues a commit's changes (applied in order, after forgetting
    /// everything if it deleted every key).
    pub fn apply(&self, cleared: bool, changes: Changes) {
        if !cleared && changes.is_empty() {
            return;
        }
        if !notes_removals() && changes.any_expiry() {
            NOTES_REMOVALS.store(true, Ordering::Relaxed);
        }
        let mut queue = self.queue.lock();
        if cleared {
            queue.push(Change::Clear);
        }
        if !changes.is_empty() {
            queue.push(Change::Keys(changes));
        }
    }

    /// Applies the queued changes; returns the index.
    fn settled(&self) -> parking_lot::MutexGuard<'_, Index> {
        let mut index = self.index.lock();
        let queued = std::mem::take(&mut *self.queue.lock());
        for change in queued {
            match change {
                Change::Clear => *index = Index::default(),
                Change::Keys(changes) => {
                    for (key, at) in changes.iter() {
                        index.set(key, at);
                    }
                }
            }
        }
        index
    }

    /// Takes out up to `max` keys due by `now`.
    fn due(&self, now: u64, max: usize) -> Vec<Arc<[u8]>> {
        let mut index = self.settled();
        let mut due = Vec::new();
        while due.len() < max {
            let Some(entry) = index.by_time.first_entry() else { break };
            if entry.key().0 > now {
                break;
            }
            let ((at, _), key) = entry.remove_entry();
            index.by_key.remove(&key);
            index.sum -= at as u128;
            due.push(key);
        }
        due
    }

    /// INFO keyspace's `expires` and `avg_ttl` (ms): None until the pass
    /// has been over every key.
    pub fn summary(&self, now: u64) -> Option<(usize, u64)> {
        if !self.complete.load(Ordering::Relaxed) {
            return None;
        }
        let index = self.settled();
        let len = index.by_key.len();
        let average = if len == 0 { 0 } else { (index.sum / len as u128) as u64 };
        Some((len, average.saturating_sub(now)))
    }
}

pub async fn active_expiry(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    // Keys that expired before this start were told about then (dropping
    // them is not written down, so they are found again): dropped quietly,
    // as Redis skips expired keys loading its RDB file.
    let started = scaledkv::now_ms();
    let mut cursor: Option<Vec<u8>> = None;
    let mut steps = 0u32;
    loop {
        // A client's key dropped here is Redis's `expired` event (its
        // collections' entries under reserved keys are not keys to them).
        let mut expired = Vec::new();
        let notify = crate::notify::wanted(shared.notify_flags.load(Ordering::Relaxed), crate::notify::EXPIRED)
            || shared.tracking.active()
            || shared.master.streaming()
            || shared.replication.following();
        let mut dropped_key = |key: &[u8]| {
            if notify && !crate::keyspace::is_reserved(key) {
                expired.push(crate::notify::Event {
                    class: crate::notify::EXPIRED,
                    name: "expired",
                    key: key.to_vec(),
                    writer: 0,
                });
            }
        };
        let now = scaledkv::now_ms();
        let pause = pause(&shared);
        let due = shared.volatile.due(now, STEP_KEYS);
        let mut dropped = 0;
        shared.db.expire_keys(&due, |key, found| match found {
            KeyExpiry::Dropped => {
                dropped_key(key);
                dropped += 1;
            }
            // Written again with a later time meanwhile (noted already),
            // or by a path that noted nothing.
            KeyExpiry::At(at) => shared.volatile.set(key, Some(at)),
            KeyExpiry::Busy => shared.volatile.set(key, Some(now + pause.as_millis() as u64)),
            KeyExpiry::Never => {}
        });
        let complete = shared.volatile.complete.load(Ordering::Relaxed);
        steps = steps.wrapping_add(1);
        // A restarted master's replicas (`master::History`) have the keys
        // that expired while it was down: they are told, no one else.
        let mut quietly = Vec::new();
        if !complete || steps.is_multiple_of(SLOW_PASS_EVERY) {
            let streaming = shared.master.streaming();
            let mut dropped_then = |key: &[u8], at: u64| {
                if at >= started {
                    dropped_key(key);
                } else if streaming && !crate::keyspace::is_reserved(key) {
                    quietly.push(crate::notify::Event {
                        class: crate::notify::EXPIRED,
                        name: "expired",
                        key: key.to_vec(),
                        writer: 0,
                    });
                }
            };
            let (next, purged) =
                shared.db.purge_expired_noting(cursor.as_deref(), STEP_KEYS, &mut dropped_then, |key, at| {
                    if !crate::keyspace::is_reserved(key) {
                        shared.volatile.set(key, Some(at));
                    }
                });
            dropped += purged;
            if next.is_none() {
                shared.volatile.complete.store(true, Ordering::Relaxed);
            }
            cursor = next;
        }
        crate::notify::publish(&shared, &expired);
        shared.master.note_loose(&quietly, shared.replication.following());
        if dropped > 0 {
            shared.stats.expired_keys.fetch_add(dropped as u64, Ordering::Relaxed);
        }
        // Like Redis: keep going while a step was full (or more than a
        // quarter of the pass's step had expired), otherwise rest. The
        // first pass goes on at once: until it ends, the keys written
        // before the start may expire unseen.
        if due.len() == STEP_KEYS || dropped * 4 > STEP_KEYS || !complete {
            tokio::task::yield_now().await;
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(pause) => {}
            _ = shutdown.changed() => return,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn changes(list: &[(&[u8], Option<u64>)]) -> Changes {
        let mut changes = Changes::default();
        for (key, at) in list {
            changes.push(key, *at);
        }
        changes
    }

    #[test]
    fn keys_come_due_in_time_order_and_a_rewrite_moves_them() {
        let volatile = Volatile::default();
        volatile.apply(false, changes(&[(b"a", Some(30)), (b"b", Some(10)), (b"c", Some(20))]));
        assert!(notes_removals());
        volatile.apply(false, changes(&[(b"c", Some(5)), (b"b", None), (b"a", Some(90))]));
        assert_eq!(volatile.summary(0), None, "unknown until the pass ends");
        volatile.complete.store(true, Ordering::Relaxed);
        // a's later time is not noted: a comes due at 30, and moves then.
        assert_eq!(volatile.summary(0), Some((2, 17)));
        let due: Vec<Vec<u8>> = volatile.due(10, 10).iter().map(|k| k.to_vec()).collect();
        assert_eq!(due, [b"c".to_vec()], "moved earlier");
        volatile.set(b"c", Some(50));
        let due: Vec<Vec<u8>> = volatile.due(40, 10).iter().map(|k| k.to_vec()).collect();
        assert_eq!(due, [b"a".to_vec()]);
        assert_eq!(volatile.due(40, 10).len(), 0);
        volatile.apply(true, changes(&[(b"d", Some(5))]));
        let due: Vec<Vec<u8>> = volatile.due(100, 10).iter().map(|k| k.to_vec()).collect();
        assert_eq!(due, [b"d".to_vec()], "c forgotten by the flush");
    }
}
