//! Counters and the statistics snapshot `Db::stats` returns.

use std::sync::atomic::{AtomicU64, Ordering};

#[derive(Debug, Default)]
pub(crate) struct Counters {
    /// Entry bytes (headers, keys, values) of user writes.
    pub user_bytes_written: AtomicU64,
    /// Frame bytes appended to the log, user writes and GC copies.
    pub log_bytes_written: AtomicU64,
    pub gc_bytes_written: AtomicU64,
    pub gc_runs: AtomicU64,
    pub gc_stalled_writes: AtomicU64,
    pub gc_stall_micros: AtomicU64,
    pub segments_freed: AtomicU64,
    pub checkpoints: AtomicU64,
    pub delta_checkpoints: AtomicU64,
    pub checkpoint_bytes_written: AtomicU64,
    /// Groups the committer wrote (each one persist) and the user requests
    /// in them: their ratio is the group commit's batching.
    pub commit_groups: AtomicU64,
    pub committed_requests: AtomicU64,
    /// Cache mode (`evict.rs`): entries evicted and their bytes, entries
    /// copied forward for a second chance, writes that evicted first.
    pub evicted_keys: AtomicU64,
    pub evicted_bytes: AtomicU64,
    pub second_chances: AtomicU64,
    pub evict_stalled_writes: AtomicU64,
    pub evict_stall_micros: AtomicU64,
    /// SSD tier (`tier.rs`): segments moved there and their bytes; reads
    /// served from it.
    pub demoted_segments: AtomicU64,
    pub demoted_bytes: AtomicU64,
    pub ssd_tier_reads: AtomicU64,
    /// The log writer's `roll_waits` and `roll_wait_micros`.
    pub roll_waits: AtomicU64,
    pub roll_wait_micros: AtomicU64,
}

impl Counters {
    pub fn snapshot(&self, mut stats: Stats) -> Stats {
        let user = self.user_bytes_written.load(Ordering::Relaxed);
        let log = self.log_bytes_written.load(Ordering::Relaxed);
        stats.user_bytes_written = user;
        stats.log_bytes_written = log;
        stats.gc_bytes_written = self.gc_bytes_written.load(Ordering::Relaxed);
        stats.gc_runs = self.gc_runs.load(Ordering::Relaxed);
        stats.gc_stalled_writes = self.gc_stalled_writes.load(Ordering::Relaxed);
        stats.gc_stall_micros = self.gc_stall_micros.load(Ordering::Relaxed);
        stats.segments_freed = self.segments_freed.load(Ordering::Relaxed);
        stats.checkpoints = self.checkpoints.load(Ordering::Relaxed);
        stats.delta_checkpoints = self.delta_checkpoints.load(Ordering::Relaxed);
        stats.checkpoint_bytes_written = self.checkpoint_bytes_written.load(Ordering::Relaxed);
        stats.commit_groups = self.commit_groups.load(Ordering::Relaxed);
        stats.committed_requests = self.committed_requests.load(Ordering::Relaxed);
        stats.evicted_keys = self.evicted_keys.load(Ordering::Relaxed);
        stats.evicted_bytes = self.evicted_bytes.load(Ordering::Relaxed);
        stats.second_chances = self.second_chances.load(Ordering::Relaxed);
        stats.evict_stalled_writes = self.evict_stalled_writes.load(Ordering::Relaxed);
        stats.evict_stall_micros = self.evict_stall_micros.load(Ordering::Relaxed);
        stats.demoted_segments = self.demoted_segments.load(Ordering::Relaxed);
        stats.demoted_bytes = self.demoted_bytes.load(Ordering::Relaxed);
        stats.ssd_tier_reads = self.ssd_tier_reads.load(Ordering::Relaxed);
        stats.roll_waits = self.roll_waits.load(Ordering::Relaxed);
        stats.roll_wait_micros = self.roll_wait_micros.load(Ordering::Relaxed);
        let written = log + stats.checkpoint_bytes_written;
        stats.write_amplification = if user == 0 { 0.0 } else { written as f64 / user as f64 };
        stats.space_amplification =
            if stats.live_bytes == 0 { 0.0 } else { stats.log_bytes as f64 / stats.live_bytes as f64 };
        stats
    }
}

/// A point-in-time view of the database's size and work.
#[derive(Debug, Clone, Default)]
pub struct Stats {
    /// Live keys in the index.
    pub keys: u64,
    /// Bytes of log entries the index points at.
    pub live_bytes: u64,
    /// Bytes written into the segments that exist now.
    pub log_bytes: u64,
    /// Bytes allocated on the medium for segment files.
    pub disk_bytes: u64,
    pub segments: u64,
    /// Estimated DRAM held by the index (see `index::memtable` for the model).
    pub index_memory_bytes: u64,
    /// Of `index_memory_bytes`: the point table (`Options::point_index`),
    /// and the updates waiting for the merger thread; the rest is the
    /// B-tree.
    pub index_point_table_bytes: u64,
    pub index_pending_bytes: u64,
    pub index_bytes_per_key: f64,
    /// DRAM held by GC's maps of dead entries (`log::marks`: at most 1/64
    /// of the log, and 64 maps).
    pub gc_map_bytes: u64,
    /// Since open: entry bytes written by users.
    pub user_bytes_written: u64,
    /// Since open: frame bytes appended to the log (users + GC).
    pub log_bytes_written: u64,
    /// Since open: bytes GC copied forward.
    pub gc_bytes_written: u64,
    /// (log_bytes_written + checkpoint_bytes_written) / user_bytes_written:
    /// every byte the engine wrote per byte users wrote, as RocksDB counts
    /// its flushes and compactions.
    pub write_amplification: f64,
    /// log_bytes / live_bytes: how much the log holds per live byte.
    pub space_amplification: f64,
    /// Since open: segments GC emptied and freed.
    pub gc_runs: u64,
    /// Since open: writes that first collected a piece of a segment, or waited for
    /// the collector, because GC was far behind (see `gc.rs`), and the
    /// time they spent so: what RocksDB reports as write stalls.
    pub gc_stalled_writes: u64,
    pub gc_stall_micros: u64,
    pub segments_freed: u64,
    /// Since open: times the log reached the end of a segment before the
    /// next one was prepared, and the time writes waited for it then (a
    /// new segment is prepared in the background while the active one
    /// fills; waits mean that work did not get the CPU or the device in
    /// time).
    pub roll_waits: u64,
    pub roll_wait_micros: u64,
    /// Since open: freed segments reused as new ones instead of creating
    /// files (tmpfs and DAX only).
    pub segments_recycled: u64,
    pub checkpoints: u64,
    /// Since open: how many of those checkpoints were deltas (the log since
    /// the previous checkpoint, collapsed per key).
    pub delta_checkpoints: u64,
    /// Since open: bytes of index checkpoints written.
    pub checkpoint_bytes_written: u64,
    /// Since open: write groups (one persist each) and the user write
    /// requests (puts, deletes, batches) they held.
    pub commit_groups: u64,
    pub committed_requests: u64,
    pub last_seq: u64,
    /// Cache mode: the log's capacity (0: off, nothing is evicted).
    pub cache_capacity_bytes: u64,
    /// Since open: entries evicted to keep the log within the capacity,
    /// their bytes, and read entries copied forward instead (`evict.rs`).
    pub evicted_keys: u64,
    pub evicted_bytes: u64,
    pub second_chances: u64,
    /// Since open: writes that first evicted a piece of a segment, or
    /// waited for another collector, because the log was over the
    /// capacity; and the time they spent so.
    pub evict_stalled_writes: u64,
    pub evict_stall_micros: u64,
    /// SSD tier (`Options::ssd_tier`): bytes of the log there (counted in
    /// `log_bytes` too) and its capacity (0: no bound).
    pub ssd_tier_bytes: u64,
    pub ssd_tier_capacity_bytes: u64,
    /// Cache mode's LFU counters' DRAM (`Options::lfu`; 0 without them).
    pub lfu_memory_bytes: u64,
    /// Since open: sealed segments moved to the SSD tier and their bytes;
    /// reads served from it (newest reads: gets, not scans).
    pub demoted_segments: u64,
    pub demoted_bytes: u64,
    pub ssd_tier_reads: u64,
    pub durability: &'static str,
    /// tmpfs, dax or page-cache.
    pub medium: &'static str,
    /// clwb, clflushopt, clflush, fdatasync or none.
    pub persist_method: &'static str,
}
