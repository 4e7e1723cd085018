//! Options chosen per database at open time.

use std::path::PathBuf;
use std::sync::Arc;

pub use scaledkv_pmem::Durability;

use crate::error::{Error, Result};
use crate::log::record::FRAME_HEADER_BYTES;
use crate::log::segment::SEGMENT_HEADER_BYTES;

/// Largest key, in bytes. Keys live in DRAM in the index, so they are kept
/// small; the on-disk field is a u16.
pub const MAX_KEY_BYTES: usize = 16 * 1024;
/// Largest value, in bytes.
pub const MAX_VALUE_BYTES: usize = 16 * 1024 * 1024;
/// Largest encoded write batch, in bytes (also bounded by the segment size).
pub const MAX_BATCH_BYTES: usize = 32 * 1024 * 1024;
/// Smallest segment size accepted (tests use small segments to exercise
/// rolling and GC).
pub const MIN_SEGMENT_BYTES: usize = 64 * 1024;
/// Offsets inside a segment are u32.
pub const MAX_SEGMENT_BYTES: usize = u32::MAX as usize;
/// Fewest segments a cache's capacity holds: eviction frees a whole
/// segment at a time, so with fewer each eviction would drop too large a
/// share of the cache.
pub const MIN_CACHE_SEGMENTS: u64 = 8;

/// Refuses a cache capacity (0: off) below `MIN_CACHE_SEGMENTS` segments.
pub(crate) fn check_cache_capacity(capacity: u64, segment_bytes: usize) -> Result<()> {
    let least = MIN_CACHE_SEGMENTS * segment_bytes as u64;
    if capacity != 0 && capacity < least {
        return Err(Error::InvalidOptions(format!(
            "a cache capacity of {capacity} bytes is below {MIN_CACHE_SEGMENTS} segments of {segment_bytes} bytes \
             ({least}); choose a larger capacity or smaller segments"
        )));
    }
    Ok(())
}

/// What eviction does with a live entry of the oldest segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Eviction {
    /// Never evicted: copied forward, as GC copies live entries.
    Keep,
    /// Evicted unless read since it was written; then copied forward once
    /// (second-chance FIFO, an approximation of LRU).
    SecondChance,
    /// Evicted whether read or not (FIFO).
    Evict,
}

/// Decides each entry's `Eviction` from its key, value and expiry time
/// (ms since the Unix epoch). Called by the evicting thread for every live
/// entry of the segment it evicts: keep it short.
#[derive(Clone)]
pub struct EvictionFilter(pub Arc<EvictionFn>);

/// The filter's function: key, value, expiry time.
pub type EvictionFn = dyn Fn(&[u8], &[u8], Option<u64>) -> Eviction + Send + Sync;

impl std::fmt::Debug for EvictionFilter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EvictionFilter(..)")
    }
}

/// Told the keys eviction dropped from the index (cache mode), by the
/// evicting thread once they are gone: a server's keyspace notifications
/// and client-side caching's invalidations. Keep it short.
#[derive(Clone)]
pub struct EvictionListener(pub Arc<dyn Fn(Vec<Vec<u8>>) + Send + Sync>);

impl std::fmt::Debug for EvictionListener {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("EvictionListener(..)")
    }
}

/// A second, larger tier for the log (`tier.rs`): when the log outgrows
/// `Options::cache_capacity_bytes`, its oldest sealed segments move whole
/// to `dir` (an SSD, where the database's own directory is persistent
/// memory or tmpfs) instead of being evicted, and are read from there.
#[derive(Debug, Clone)]
pub struct SsdTier {
    /// The tier's directory; one database's, as the database remembers.
    pub dir: PathBuf,
    /// The most bytes the tier may hold, past which its oldest segments
    /// are evicted as cache mode evicts (entries read there are copied
    /// back to the head of the log); 0: no bound, nothing is evicted.
    pub capacity_bytes: u64,
}

#[derive(Debug, Clone)]
pub struct Options {
    /// What an acknowledged write survives (see `Durability`).
    pub durability: Durability,
    /// Size of each preallocated value-log segment file.
    pub segment_size_bytes: usize,
    /// Verify each entry's CRC on every read (like RocksDB's
    /// `verify_checksums`, on by default).
    pub verify_checksums: bool,
    pub create_if_missing: bool,
    /// Skip corrupt frames in the middle of the log instead of refusing to
    /// open; what was skipped is in `Db::recovery_report`.
    pub repair: bool,
    /// Log bytes written between index checkpoints; bounds replay at open.
    pub checkpoint_interval_bytes: u64,
    /// Log entries written between index checkpoints. Replay after a crash
    /// costs ~0.5 µs per entry whatever its size, so with small values this
    /// bound, not the byte interval, keeps a reopen after SIGKILL short.
    pub checkpoint_interval_entries: u64,
    /// A sealed segment is collected when live bytes / written bytes fall
    /// below this ratio.
    pub gc_live_ratio: f64,
    /// Background GC runs only while the log holds more than this many
    /// times the live bytes (`Stats::space_amplification`) plus a segment
    /// (the unit GC frees); 1.0 collects every segment below
    /// `gc_live_ratio` once a segment's worth of the log is dead. Waiting costs
    /// space and saves copying: segments are emptier when collected.
    /// `Db::collect_garbage` ignores it.
    pub gc_space_amp: f64,
    /// Run checkpoints and GC on a background thread.
    pub background_work: bool,
    /// Keep a hash table of the newest location of every key beside the
    /// ordered index: point lookups (get, GC's liveness checks) skip the
    /// B-tree descent. Off by default: it costs about 28 more bytes of DRAM
    /// per key and a hash-table update per write. Measured (2M random
    /// puts of 16/100 B, 1.26M keys, tmpfs): random gets 1.5 -> 0.8 µs,
    /// random puts 2.4 -> 3.1 µs, 68 -> 96 B/key. The server turns it on.
    pub point_index: bool,
    /// Index updates recorded in a hash table before a merger thread moves
    /// them into the ordered index (the B-tree) on another core; 0 applies
    /// each update to the B-tree on the writer's thread. Deferring takes
    /// the B-tree descent, a chain of cache misses, off the write path:
    /// measured in BENCHMARKS.md (eleventh session). Needs
    /// `background_work`; snapshots, iterators, `len` and checkpoints merge
    /// whatever is pending first.
    pub deferred_index_updates: usize,
    /// Where each group commit waits for a device (`sync` mode on a disk's
    /// file system), a leader whose last group had several writers waits
    /// briefly (up to half of that group's commit time, at most 1 ms)
    /// for them to queue again, so that one fdatasync covers all of them,
    /// and the writers of a group wait for it by yielding the CPU rather
    /// than sleeping, so they queue again at once. Measured (disk, 16
    /// writer threads, 8/256 B, medians): 51k -> 77k durable writes/s, 7 ->
    /// 13 writes per group, then ~112k with the yielding wait. Off: groups
    /// form as writers happen to arrive, and waiting writers sleep. No
    /// effect on tmpfs, persistent memory or `buffered` mode, where a group
    /// costs little more than its bytes.
    pub gather_groups: bool,
    /// Run the threads that prepare the next segment and start writeback
    /// under `SCHED_IDLE` instead of nice 5: they then get only CPU time
    /// no thread serving requests wants, and a request's thread that
    /// wakes takes the core from them at once (preparing a 64 MiB segment
    /// on tmpfs is tens of milliseconds of zeroing). Off by default: where
    /// the writers keep every core busy (the engine's benchmarks) a writer
    /// then waits for its next segment instead of finding it prepared.
    /// The server turns it on: on 2 cores shared with redis-benchmark,
    /// SET `-P 1` p99 1.29 -> 0.90 ms (BENCHMARKS.md, twenty-fourth
    /// session). The index merger runs under `SCHED_IDLE` too, until a
    /// writer or a checkpoint finds it behind and raises it to its normal
    /// priority (where the process may: root or `RLIMIT_NICE`): SET `-P 1`
    /// p99 1.21 -> 0.70 ms (twenty-fifth session); and so does the
    /// background thread while it rebuilds the index's tree after a burst
    /// of writes. GC and checkpoints keep their priority: under
    /// `SCHED_IDLE` on busy cores, GC and the merger (when nothing raised
    /// it) fell behind sustained overwrites and writes waited for GC 20-50
    /// times as often. The merger and segment preparation also nap briefly
    /// after every 200 us of work, so that a request's thread never waits
    /// a scheduler tick (4 ms) behind them: SET `-P 16` p99 5.3 -> 4.5 ms
    /// (twenty-sixth session).
    pub background_idle: bool,
    /// Cache mode: the most bytes the log may hold (entries: headers, keys,
    /// values), beyond which the oldest segments are evicted (`evict.rs`);
    /// 0, the default, is a store that never evicts. At least
    /// `MIN_CACHE_SEGMENTS` segments. The index's DRAM is not counted
    /// (`Stats::index_memory_bytes`). `Db::set_cache_capacity` changes it.
    pub cache_capacity_bytes: u64,
    /// Which entries eviction may drop, and whether a read since they were
    /// written earns them a second chance; `None`: every entry, with a
    /// second chance.
    pub eviction_filter: Option<EvictionFilter>,
    /// Told which keys eviction dropped (`None`: nobody).
    pub eviction_listener: Option<EvictionListener>,
    /// Cache mode's choice among the entries `Eviction::SecondChance`
    /// lets go: `None`, the default, copies forward those read since they
    /// were written (CLOCK, an approximation of LRU); `Some`, those used
    /// most often, by Redis's LFU counters (`lfu.rs`), which are counted
    /// with or without cache mode (`Db::access_frequency`). Not kept
    /// across a reopen. `Db::set_lfu` changes it.
    pub lfu: Option<crate::Lfu>,
    /// Where the oldest segments go once the log outgrows
    /// `cache_capacity_bytes` (which it then requires): `None`, the
    /// default, evicts them.
    pub ssd_tier: Option<SsdTier>,
    /// Bits of the point table's hash tags: 32. Tests narrow it so that
    /// keys share tags and the fallbacks to the ordered index run.
    #[doc(hidden)]
    pub point_tag_bits: u32,
    /// The id of a new database's first segment: 1. Tests start near 2^32
    /// to write across the point where index pointers' segment tags wrap
    /// (`log::segment::tag_of`), which a real log reaches after 4 billion
    /// segments.
    #[doc(hidden)]
    pub first_segment_id: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            durability: Durability::Sync,
            segment_size_bytes: 64 * 1024 * 1024,
            verify_checksums: true,
            create_if_missing: true,
            repair: false,
            checkpoint_interval_bytes: 256 * 1024 * 1024,
            checkpoint_interval_entries: 2_000_000,
            gc_live_ratio: 0.5,
            gc_space_amp: 2.0,
            background_work: true,
            point_index: false,
            deferred_index_updates: 16 * 1024,
            gather_groups: true,
            background_idle: false,
            cache_capacity_bytes: 0,
            eviction_filter: None,
            eviction_listener: None,
            lfu: None,
            ssd_tier: None,
            point_tag_bits: 32,
            first_segment_id: 1,
        }
    }
}

impl Options {
    pub fn durability(mut self, durability: Durability) -> Self {
        self.durability = durability;
        self
    }

    pub fn segment_size_bytes(mut self, bytes: usize) -> Self {
        self.segment_size_bytes = bytes;
        self
    }

    /// Checks the options as `Db::open` does, so a caller can report a bad
    /// setting before it opens anything.
    pub fn validate(&self) -> Result<()> {
        if !(MIN_SEGMENT_BYTES..=MAX_SEGMENT_BYTES).contains(&self.segment_size_bytes) {
            return Err(Error::InvalidOptions(format!(
                "segment_size_bytes {} is outside {MIN_SEGMENT_BYTES}..={MAX_SEGMENT_BYTES}",
                self.segment_size_bytes
            )));
        }
        if !(0.0..1.0).contains(&self.gc_live_ratio) {
            return Err(Error::InvalidOptions(format!("gc_live_ratio {} is outside 0..1", self.gc_live_ratio)));
        }
        if !(self.gc_space_amp >= 1.0 && self.gc_space_amp.is_finite()) {
            return Err(Error::InvalidOptions(format!("gc_space_amp {} is not a number >= 1", self.gc_space_amp)));
        }
        let first = self.first_segment_id;
        if !(1..=crate::log::segment::MAX_SEGMENT_ID).contains(&first) || !crate::log::segment::usable_id(first) {
            return Err(Error::InvalidOptions(format!("first_segment_id {first} cannot name a segment")));
        }
        check_cache_capacity(self.cache_capacity_bytes, self.segment_size_bytes)?;
        if let Some(tier) = &self.ssd_tier {
            if self.cache_capacity_bytes == 0 {
                return Err(Error::InvalidOptions(
                    "an SSD tier takes the segments the log holds beyond cache_capacity_bytes: set it too".into(),
                ));
            }
            check_cache_capacity(tier.capacity_bytes, self.segment_size_bytes)?;
        }
        Ok(())
    }

    /// The largest frame that fits a segment, and so the batch limit.
    pub(crate) fn max_batch_bytes(&self) -> usize {
        MAX_BATCH_BYTES.min(self.segment_size_bytes - SEGMENT_HEADER_BYTES - FRAME_HEADER_BYTES)
    }
}
