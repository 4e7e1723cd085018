//! Cache mode: a hard capacity for the log, kept by evicting its oldest
//! segment (`Options::cache_capacity_bytes`).
//!
//! Eviction is GC with another choice of segment and another fate for
//! live entries: the collector takes the oldest sealed segment (the log is
//! a FIFO of writes), skips what is dead, drops expired entries, and for
//! each live entry asks the eviction filter: `Keep` entries are copied to
//! the head as GC copies them, `Evict` ones are dropped from the index, and
//! `SecondChance` ones are dropped unless read since they were written
//! (`Segment::accessed`, one bit per entry set by reads), in which case
//! they are copied forward once: their copy starts unread. That is CLOCK
//! over the log (second-chance FIFO, the reinsertion of CacheLib's and
//! S3-FIFO's main queue), which approximates LRU without touching a list
//! on every read.
//!
//! Second chances are bounded: eviction counts the bytes it copied forward
//! in a row out of segments it could barely free (`STUCK_SHARE` of them
//! copied). Past half the capacity, as when everything was read since it
//! was written, read entries are evicted too, as CLOCK's hand evicts once
//! it has gone round. Past the whole capacity, what is left is entries the
//! filter keeps (the server's big collections): eviction then pauses until
//! another capacity's worth has been written, rather than copying the same
//! entries around for ever, and the log outgrows the capacity by what
//! cannot be evicted.
//!
//! With an SSD tier (`tier.rs`), what eviction lets go of the log's own
//! directory moves to the tier with its segment instead of being dropped,
//! and the tier, if bounded, is evicted the same way.
//!
//! Durability: an evicted entry is dropped from the index only, as an
//! expired one is; nothing is written. The segment's file goes once a
//! full checkpoint that no longer references it is durable (`gc.rs`; a
//! delta checkpoint, the log since the last one, would leave the full
//! one's references to the evicted entries), so a crash before that
//! brings evicted entries back: their newest version, never an older one
//! (a GC copy applies only over its own version).
//!
//! When: the background thread evicts once the log holds more than
//! `EVICT_AHEAD` of the capacity, so writers seldom find it full; a writer
//! that does first evicts one piece itself (as writers help GC), so the
//! log stays within about a segment of the capacity (the one being
//! written, while the oldest is evicted piece by piece).

use std::sync::atomic::Ordering;

use crate::db::Inner;
use crate::error::{Error, Result};
use crate::gc::{Goal, Turn};
use crate::index::memtable::{Key, Loc};
use crate::log::record::EntryView;
use crate::log::segment::Segment;
use crate::options::{check_cache_capacity, Eviction};

/// The background thread evicts (or demotes to the SSD tier) while the log
/// holds more than this share of the capacity; writers help only over the
/// whole capacity.
pub const EVICT_AHEAD: f64 = 0.95;
/// A finished eviction that copied forward more than this share of its
/// segment made little room: its copies count toward the run that denies
/// second chances, then pauses eviction (module comment).
const STUCK_SHARE: f64 = 0.875;

impl Inner {
    /// Bytes the log holds but for its SSD tier: what every segment has
    /// written.
    pub(crate) fn log_bytes(&self) -> u64 {
        self.segments.written_bytes(false)
    }

    /// Bytes of the log in its SSD tier.
    pub(crate) fn ssd_tier_bytes(&self) -> u64 {
        self.segments.written_bytes(true)
    }

    /// The SSD tier's capacity (0: none, or no bound).
    pub(crate) fn ssd_tier_capacity(&self) -> u64 {
        self.ssd_tier_capacity.load(Ordering::Relaxed)
    }

    pub(crate) fn set_ssd_tier_capacity(&self, bytes: u64) -> Result<()> {
        if self.options.ssd_tier.is_none() {
            return Err(Error::InvalidOptions("this database has no SSD tier".into()));
        }
        check_cache_capacity(bytes, self.options.segment_size_bytes)?;
        self.ssd_tier_capacity.store(bytes, Ordering::Relaxed);
        self.evict_paused_until.store(0, Ordering::Relaxed);
        self.refresh_cache_over();
        Ok(())
    }

    /// The goal that keeps a tier within `share` of its capacity, if it is
    /// over: the SSD tier first, as demotions from the log's own directory
    /// (its eviction, where there is an SSD tier) fill it.
    fn eviction_goal(&self, share: f64) -> Option<Goal> {
        let (capacity, tier) = (self.cache_capacity(), self.ssd_tier_capacity());
        let above = |capacity: u64| (capacity as f64 * share) as u64;
        if tier > 0 && self.ssd_tier_bytes() > above(tier) {
            Some(Goal::Evict { cold: true, above: above(tier) })
        } else if capacity > 0 && self.log_bytes() > above(capacity) {
            Some(Goal::Evict { cold: false, above: above(capacity) })
        } else {
            None
        }
    }

    pub(crate) fn cache_capacity(&self) -> u64 {
        self.cache_capacity.load(Ordering::Relaxed)
    }

    pub(crate) fn set_cache_capacity(&self, bytes: u64) -> Result<()> {
        check_cache_capacity(bytes, self.options.segment_size_bytes)?;
        if bytes == 0 && self.options.ssd_tier.is_some() {
            return Err(Error::InvalidOptions("a database with an SSD tier needs a cache capacity".into()));
        }
        self.cache_capacity.store(bytes, Ordering::Relaxed);
        self.evict_paused_until.store(0, Ordering::Relaxed);
        self.refresh_cache_over();
        Ok(())
    }

    /// Notes a read of `key`'s entry at `loc` of `segment`: with LFU
    /// counters, its counter may go up; in cache mode, the entry is marked
    /// read since written (a relaxed load and, the first time, a store):
    /// CLOCK's second chance, LFU's order within a counter step.
    pub(crate) fn note_access(&self, segment: &Segment, loc: Loc, key: &[u8]) {
        if self.lfu_on.load(Ordering::Relaxed) {
            if let Some(lfu) = &*self.lfu.load() {
                lfu.read(key);
            }
        }
        if self.cache_capacity() > 0 {
            segment.accessed.mark(loc.off, segment.capacity_bytes(), None);
            if segment.cold {
                self.counters.ssd_tier_reads.fetch_add(1, Ordering::Relaxed);
            }
        }
    }

    /// Whether eviction copies the live entry `entry` at `loc` of
    /// `segment` forward, to the head of the log; if not, it is dropped
    /// (evicted) or, `demoting`, it moves to the SSD tier with its segment
    /// (and so does an entry the filter keeps: it is not lost there).
    pub(crate) fn copies_forward(&self, segment: &Segment, loc: Loc, entry: &EntryView<'_>, demoting: bool) -> bool {
        let eviction = match &self.options.eviction_filter {
            Some(filter) => (filter.0)(entry.key, entry.value, entry.expiry_ms),
            None => Eviction::SecondChance,
        };
        match eviction {
            Eviction::Keep => !demoting,
            Eviction::Evict => false,
            Eviction::SecondChance => {
                let chance = self.evict_stuck_bytes.load(Ordering::Relaxed) < self.cache_capacity() / 2
                    && match &*self.lfu.load() {
                        Some(lfu) => lfu.keeps(entry.key, segment.accessed.is_marked(loc.off as usize)),
                        None => segment.accessed.is_marked(loc.off as usize),
                    };
                self.counters.second_chances.fetch_add(u64::from(chance), Ordering::Relaxed);
                chance
            }
        }
    }

    /// Drops evicted entries from the index, where it still points at them,
    /// and tells the eviction listener which keys went.
    pub(crate) fn drop_evicted(&self, evicted: &[(Key, Loc)]) {
        let listener = self.options.eviction_listener.as_ref();
        let mut gone = Vec::new();
        self.index.remove_all_if_at(evicted, &self.segments, |key, loc| {
            self.counters.evicted_keys.fetch_add(1, Ordering::Relaxed);
            self.counters.evicted_bytes.fetch_add(loc.len as u64, Ordering::Relaxed);
            if listener.is_some() {
                gone.push(key.to_vec());
            }
        });
        if let Some(listener) = listener.filter(|_| !gone.is_empty()) {
            (listener.0)(gone);
        }
    }

    /// Evicts (or demotes) up to `max_segments` oldest segments while a
    /// tier is over `share` of its capacity; returns how many were freed.
    pub(crate) fn evict(&self, share: f64, max_segments: usize) -> Result<u64> {
        // Segments finished but kept are not taken again in this call; a
        // demoted one is taken again once the SSD tier is over, as its own.
        let (mut freed, mut finished, mut kept) = (0, 0, Vec::new());
        while finished < max_segments && !self.eviction_paused() {
            let Some(goal) = self.eviction_goal(share) else { break };
            match self.collector_turn(goal, &kept)? {
                Turn::Idle => break,
                Turn::Piece => {}
                turn @ Turn::Finished { id, freed: was_freed, .. } => {
                    self.note_finished(&turn);
                    freed += u64::from(was_freed);
                    finished += 1;
                    if !was_freed {
                        kept.push(id);
                    }
                }
            }
        }
        self.refresh_cache_over();
        Ok(freed)
    }

    /// The background thread's share: eviction ahead of the writers.
    pub(crate) fn evict_ahead(&self) -> Result<u64> {
        self.evict(EVICT_AHEAD, crate::gc::SEGMENTS_PER_PASS)
    }

    /// Called before each write while the log is over the capacity: one
    /// piece of eviction, or a wait while another collector finishes its
    /// piece.
    pub(crate) fn help_evict(&self) {
        let started = std::time::Instant::now();
        let turn = self.eviction_goal(1.0).map_or(Ok(Turn::Idle), |goal| self.collector_turn(goal, &[]));
        match turn {
            Ok(turn) => self.note_finished(&turn),
            Err(error) => {
                // The background thread reports it too; the write goes on.
                tracing::error!(dir = %self.dir.display(), %error, "eviction on a writer's thread failed");
                self.pause_eviction();
            }
        }
        self.refresh_cache_over();
        self.counters.evict_stalled_writes.fetch_add(1, Ordering::Relaxed);
        self.counters.evict_stall_micros.fetch_add(started.elapsed().as_micros() as u64, Ordering::Relaxed);
    }

    /// Sets `cache_over` while the log (or its SSD tier) holds more than
    /// its capacity and eviction is not paused. Called after eviction, when
    /// the log moves to a new segment, and by the checkpoint thread every
    /// 100 ms.
    pub(crate) fn refresh_cache_over(&self) {
        let over = !self.eviction_paused() && self.eviction_goal(1.0).is_some();
        self.cache_over.store(over, Ordering::Relaxed);
    }

    fn eviction_paused(&self) -> bool {
        self.counters.log_bytes_written.load(Ordering::Relaxed) < self.evict_paused_until.load(Ordering::Relaxed)
    }

    fn pause_eviction(&self) {
        let until = self.counters.log_bytes_written.load(Ordering::Relaxed) + self.cache_capacity();
        self.evict_paused_until.store(until, Ordering::Relaxed);
        self.evict_stuck_bytes.store(0, Ordering::Relaxed);
    }

    /// Counts a finished eviction's copies toward the stuck run, or ends
    /// the run; pauses eviction once the run passes the capacity.
    fn note_finished(&self, turn: &Turn) {
        let Turn::Finished { evicted: true, kept_bytes, .. } = *turn else { return };
        if (kept_bytes as f64) <= self.options.segment_size_bytes as f64 * STUCK_SHARE {
            self.evict_stuck_bytes.store(0, Ordering::Relaxed);
            return;
        }
        let stuck = self.evict_stuck_bytes.fetch_add(kept_bytes, Ordering::Relaxed) + kept_bytes;
        if stuck > self.cache_capacity() {
            tracing::warn!(dir = %self.dir.display(), stuck, "eviction finds nothing it may evict; paused");
            self.pause_eviction();
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use crate::testing::{kept_hot_and_cold, put, value, write_reading_every_20th};
    use crate::{Db, Error, Eviction, EvictionFilter, Options};

    const SEGMENT: usize = 64 * 1024;
    const CAPACITY: u64 = 8 * SEGMENT as u64;

    /// A cache of eight 64 KiB segments without background work: writers
    /// evict when the log is over the capacity.
    fn options(filter: Option<EvictionFilter>) -> Options {
        Options {
            background_work: false,
            segment_size_bytes: SEGMENT,
            cache_capacity_bytes: CAPACITY,
            eviction_filter: filter,
            ..Options::default()
        }
    }

    /// Writes 4,000 keys (about 8x the capacity), reading every 20th key
    /// written so far after every 50 writes: the log stays within about a
    /// segment of the capacity, the keys read survive, most others go, and
    /// every key still there holds its own value.
    #[test]
    fn a_cache_stays_within_its_capacity_and_keeps_what_is_read() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), options(None)).unwrap();
        let most = write_reading_every_20th(&db, 4000, Db::log_bytes);
        let stats = db.stats();
        // Over by the segment being written, and the piece under eviction.
        assert!(most <= CAPACITY + 2 * SEGMENT as u64, "log grew to {most}: {stats:?}");
        assert!(stats.evicted_keys > 3000 && stats.second_chances > 0, "{stats:?}");
        assert!(stats.evict_stalled_writes > 0, "{stats:?}");
        let (hot_kept, cold_kept) = kept_hot_and_cold(&db, 4000);
        // The 200 hot keys (200 KB) fit; the cold keys of the last ~300 KB
        // written are still there.
        assert!(hot_kept >= 190, "hot {hot_kept} of 200, cold {cold_kept} of 3800");
        assert!(cold_kept < 400, "hot {hot_kept} of 200, cold {cold_kept} of 3800");
        assert_eq!(stats.cache_capacity_bytes, CAPACITY);
    }

    /// The listener hears of every key eviction dropped, once, and of no
    /// key that is still there.
    #[test]
    fn the_listener_hears_of_exactly_the_keys_evicted() {
        let dir = tempfile::tempdir().unwrap();
        let heard = Arc::new(parking_lot::Mutex::new(Vec::new()));
        let listener = {
            let heard = heard.clone();
            crate::EvictionListener(Arc::new(move |keys: Vec<Vec<u8>>| heard.lock().extend(keys)))
        };
        let db = Db::open(dir.path(), Options { eviction_listener: Some(listener), ..options(None) }).unwrap();
        write_reading_every_20th(&db, 4000, Db::log_bytes);
        let heard = heard.lock().clone();
        assert_eq!(heard.len() as u64, db.stats().evicted_keys);
        let distinct: std::collections::HashSet<&Vec<u8>> = heard.iter().collect();
        assert_eq!(distinct.len(), heard.len(), "each key once (each was written once)");
        for key in &heard {
            assert_eq!(db.get(key).unwrap(), None);
        }
        assert!(heard.len() > 3000, "{}", heard.len());
    }

    /// `Keep` entries are never evicted, `Evict` ones go even when read.
    #[test]
    fn the_filter_decides_what_may_go() {
        let dir = tempfile::tempdir().unwrap();
        let filter = EvictionFilter(Arc::new(
            |key: &[u8], _: &[u8], _| {
                if key[3].is_multiple_of(4) {
                    Eviction::Keep
                } else {
                    Eviction::Evict
                }
            },
        ));
        let db = Db::open(dir.path(), options(Some(filter))).unwrap();
        for key in 0..3000u32 {
            put(&db, key, 0);
            db.get(&1u32.to_be_bytes()).unwrap();
        }
        for key in (0..3000u32).step_by(4) {
            assert_eq!(db.get(&key.to_be_bytes()).unwrap(), Some(value(key, 0)), "kept key {key}");
        }
        assert_eq!(db.get(&1u32.to_be_bytes()).unwrap(), None, "evicted although read");
        let stats = db.stats();
        assert!(stats.evicted_keys > 1000 && stats.second_chances == 0, "{stats:?}");
    }

    /// With nothing the filter lets go, eviction pauses once it has copied
    /// a capacity's worth in a row, until another capacity's worth is
    /// written, instead of copying the same entries around: the log
    /// outgrows the capacity and copies stay below the writes.
    #[test]
    fn eviction_pauses_when_nothing_may_go() {
        let dir = tempfile::tempdir().unwrap();
        let filter = EvictionFilter(Arc::new(|_: &[u8], _: &[u8], _| Eviction::Keep));
        let db = Db::open(dir.path(), options(Some(filter))).unwrap();
        for key in 0..1500u32 {
            put(&db, key, 0);
        }
        let stats = db.stats();
        assert_eq!(stats.evicted_keys, 0, "{stats:?}");
        assert!(db.log_bytes() > 2 * CAPACITY, "{stats:?}");
        assert!(stats.gc_bytes_written < stats.user_bytes_written, "{stats:?}");
        for key in 0..1500u32 {
            assert_eq!(db.get(&key.to_be_bytes()).unwrap(), Some(value(key, 0)), "key {key}");
        }
    }

    /// A crash after evictions (every write durable, the files as they
    /// are) reopens each key at its newest acknowledged version or without
    /// it: an evicted key may come back, never an older version of it.
    #[test]
    fn a_crash_brings_back_no_older_version() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), options(None)).unwrap();
        let mut newest = vec![0u32; 300];
        for round in 0..12u32 {
            for key in 0..300u32 {
                // Some keys are rewritten every round, the others seldom.
                if key % 3 == 0 || round % 4 == 0 {
                    put(&db, key, round);
                    newest[key as usize] = round;
                }
                db.get(&(key / 2).to_be_bytes()).unwrap();
            }
            if round == 6 {
                db.inner.checkpoint().unwrap();
            }
        }
        assert!(db.stats().evicted_keys > 0, "{:?}", db.stats());
        let crashed = crate::testing::crashed_copy(&db, dir.path());
        drop(db);
        for reopened in [Db::open(crashed.path(), options(None)).unwrap(), Db::open(dir.path(), options(None)).unwrap()]
        {
            let mut present = 0;
            for key in 0..300u32 {
                if let Some(found) = reopened.get(&key.to_be_bytes()).unwrap() {
                    assert_eq!(found, value(key, newest[key as usize]), "key {key}");
                    present += 1;
                }
            }
            assert!(present > 0);
        }
    }

    /// Keys read often before a stream of new keys each read once: LFU
    /// counters keep the former (their counters stay above the stream's,
    /// which fill the sample the threshold comes from), where one access
    /// bit gives them one second chance and lets them go. Every key still
    /// there holds its value; the log stays within about two segments of
    /// the capacity either way.
    #[test]
    fn lfu_keeps_what_was_read_often_through_a_stream_read_once() {
        let hot_kept = |lfu: Option<crate::Lfu>| {
            let dir = tempfile::tempdir().unwrap();
            let db = Db::open(dir.path(), Options { lfu, ..options(None) }).unwrap();
            for key in 0..100u32 {
                put(&db, key, 0);
                // About 5 + sqrt(200 / 5) = 11 (lfu.rs); 20 reads make 6-7,
                // where one read leaves the stream's keys.
                for _ in 0..200 {
                    db.get(&key.to_be_bytes()).unwrap();
                }
            }
            let mut most = 0;
            for key in 100..3100u32 {
                put(&db, key, 0);
                db.get(&key.to_be_bytes()).unwrap();
                most = most.max(db.log_bytes());
            }
            assert!(most <= CAPACITY + 2 * SEGMENT as u64, "log grew to {most}: {:?}", db.stats());
            let mut kept = 0;
            for key in 0..3100u32 {
                if let Some(found) = db.get(&key.to_be_bytes()).unwrap() {
                    assert_eq!(found, value(key, 0), "key {key}");
                    kept += u32::from(key < 100);
                }
            }
            assert!(db.stats().evicted_keys > 2000, "{:?}", db.stats());
            kept
        };
        let lfu = hot_kept(Some(crate::Lfu::default()));
        let clock = hot_kept(None);
        assert!(lfu >= 95, "LFU kept {lfu} of 100");
        assert!(clock <= 10, "CLOCK kept {clock} of 100");
    }

    /// Counters as Redis's `OBJECT FREQ` reads them: 5 for a new key, 6
    /// after its first read; off, on and changed at runtime.
    #[test]
    fn lfu_counters_start_at_five_and_can_be_turned_on_and_off() {
        let dir = tempfile::tempdir().unwrap();
        let db = Db::open(dir.path(), Options { lfu: Some(crate::Lfu::default()), ..options(None) }).unwrap();
        put(&db, 1, 0);
        assert_eq!(db.access_frequency(&1u32.to_be_bytes()), Some(crate::LFU_INIT_VAL));
        db.get(&1u32.to_be_bytes()).unwrap();
        assert_eq!(db.access_frequency(&1u32.to_be_bytes()), Some(crate::LFU_INIT_VAL + 1));
        assert!(db.stats().lfu_memory_bytes > 0);
        db.set_lfu(Some(crate::Lfu { log_factor: 0, decay_minutes: 0 }));
        assert_eq!(db.lfu(), Some(crate::Lfu { log_factor: 0, decay_minutes: 0 }));
        for _ in 0..10 {
            db.get(&1u32.to_be_bytes()).unwrap();
        }
        assert_eq!(db.access_frequency(&1u32.to_be_bytes()), Some(crate::LFU_INIT_VAL + 11), "kept, then every hit");
        db.set_lfu(None);
        assert_eq!((db.lfu(), db.access_frequency(&1u32.to_be_bytes())), (None, None));
        assert_eq!(db.stats().lfu_memory_bytes, 0);
        // Counted outside cache mode too, as Redis counts under an LFU
        // policy without maxmemory.
        let store = tempfile::tempdir().unwrap();
        let db = Db::open(
            store.path(),
            Options { lfu: Some(crate::Lfu::default()), cache_capacity_bytes: 0, ..options(None) },
        )
        .unwrap();
        put(&db, 1, 0);
        db.get(&1u32.to_be_bytes()).unwrap();
        assert_eq!(db.access_frequency(&1u32.to_be_bytes()), Some(crate::LFU_INIT_VAL + 1));
    }

    /// A capacity below eight segments is refused with a clear error; a
    /// lower one set at runtime evicts at once, and 0 turns eviction off.
    #[test]
    fn capacity_is_checked_and_can_change() {
        let dir = tempfile::tempdir().unwrap();
        let small = Options { cache_capacity_bytes: CAPACITY - 1, ..options(None) };
        let error = Db::open(dir.path(), small).err().expect("refused");
        assert!(matches!(&error, Error::InvalidOptions(m) if m.contains("8 segments")), "{error}");
        let db = Db::open(dir.path(), Options { cache_capacity_bytes: 0, ..options(None) }).unwrap();
        for key in 0..1500u32 {
            put(&db, key, 0);
        }
        assert!(db.log_bytes() > 2 * CAPACITY && db.stats().evicted_keys == 0);
        assert!(db.set_cache_capacity(CAPACITY - 1).is_err());
        db.set_cache_capacity(CAPACITY).unwrap();
        assert!(db.log_bytes() <= CAPACITY, "{:?}", db.stats());
        assert!(db.stats().evicted_keys > 500);
        db.set_cache_capacity(0).unwrap();
        let before = db.stats().evicted_keys;
        for key in 1500..3000u32 {
            put(&db, key, 0);
        }
        assert_eq!(db.stats().evicted_keys, before);
    }
}
