//! `maxmemory` and `maxmemory-policy`: the server as a cache.
//!
//! ScaledKV's data lives in the engine's log (on tmpfs, persistent memory
//! or a disk), so `maxmemory` bounds the log: the entries' keys, values
//! and headers, live or dead (`Db::log_bytes`). The index's DRAM comes on
//! top (INFO's `used_memory_index`, 60-150 bytes per key, the point table's
//! share in `used_memory_index_points`).
//!
//! Policies: `noeviction` (Redis's default) refuses writes that may grow
//! the data with Redis's OOM error once the log is over the limit. Every
//! other policy turns on the engine's cache mode (`scaledkv::evict`):
//! when the log outgrows the limit, the oldest segment is evicted, entries
//! read since they were written copied forward once (second-chance FIFO).
//! So `allkeys-lru`, `volatile-lru` and `volatile-ttl` approximate Redis's
//! sampled choices by age and one access bit; the `-lfu` policies turn on
//! the engine's LFU counters (`scaledkv::Lfu`: Redis's, with
//! `lfu-log-factor` and `lfu-decay-time`), which then pick what is copied
//! forward, and which OBJECT FREQ reads; `allkeys-random`/`volatile-random`
//! evict by age alone; the `volatile-` policies evict only keys with an
//! expiry time. Big
//! collections (stored as one entry per member, `commands::table`) and the
//! server's own entries are never evicted: they are copied forward, and
//! if they fill the limit, writes get the OOM error once the log is a
//! quarter over it. Evicted keys raise Redis's `evicted` keyspace
//! notification (class `e`) and invalidate clients' caches
//! (`crate::tracking`), once the engine has dropped them
//! (`announce_evictions`); they do not fail a WATCH.
//!
//! With an SSD tier (`--ssd-dir`, `scaledkv::tier`), `maxmemory` bounds
//! the fast tier (`--dir`) whatever the policy: past it the oldest data
//! moves to the SSD tier (entries read since written stay). `--ssd-size`
//! bounds the SSD tier (0: no bound): past it an evicting policy evicts
//! the tier's oldest data (entries read there go back to the fast tier),
//! and `noeviction` refuses writes.

use std::sync::atomic::{AtomicU32, AtomicU64, AtomicU8, Ordering};
use std::sync::Arc;

use scaledkv::{Eviction, EvictionFilter, EvictionListener, Lfu};

use crate::keyspace::{is_reserved, is_table};

/// Redis's `maxmemory-policy` names, in `Policy`'s order.
const POLICIES: [&str; 8] = [
    "noeviction",
    "allkeys-lru",
    "allkeys-lfu",
    "allkeys-random",
    "volatile-lru",
    "volatile-lfu",
    "volatile-random",
    "volatile-ttl",
];

/// The settings CONFIG SET changes, shared with the engine's eviction
/// filter.
#[derive(Debug)]
pub struct MemoryLimit {
    /// Bytes (0: no limit).
    maxmemory: AtomicU64,
    /// An index into `POLICIES`.
    policy: AtomicU8,
    /// With an SSD tier, its size (0: no bound).
    ssd_size: Option<u64>,
    /// Redis's `lfu-log-factor` and `lfu-decay-time`, for the engine's
    /// LFU counters (`scaledkv::Lfu`) under an `-lfu` policy.
    lfu_log_factor: AtomicU32,
    lfu_decay_time: AtomicU32,
    /// Keys the engine evicted and the server has not announced yet.
    evicted: parking_lot::Mutex<EvictedKeys>,
    /// Wakes `announce_evictions`.
    evictions: tokio::sync::Notify,
}

#[derive(Debug, Default)]
struct EvictedKeys {
    keys: Vec<Vec<u8>>,
    /// More than `MAX_UNANNOUNCED` waited: caches are told everything went.
    overflowed: bool,
}

/// Evicted keys waiting to be announced, at most (a flood past it is
/// announced as a flush to caching clients, its notifications dropped).
const MAX_UNANNOUNCED: usize = 1 << 20;

/// Redis's error for a write refused over the limit.
pub const OOM_ERROR: &str = "OOM command not allowed when used memory > 'maxmemory'.";

impl Default for MemoryLimit {
    fn default() -> Self {
        let lfu = Lfu::default();
        MemoryLimit {
            maxmemory: AtomicU64::new(0),
            policy: AtomicU8::new(0),
            ssd_size: None,
            lfu_log_factor: AtomicU32::new(lfu.log_factor),
            lfu_decay_time: AtomicU32::new(lfu.decay_minutes),
            evicted: Default::default(),
            evictions: Default::default(),
        }
    }
}

impl MemoryLimit {
    /// `ssd_size`: with an SSD tier, its size (0: no bound).
    pub fn new(maxmemory: u64, policy: &str, ssd_size: Option<u64>) -> Result<MemoryLimit, String> {
        let limit = MemoryLimit { ssd_size, ..MemoryLimit::default() };
        limit.set_policy(policy)?;
        limit.maxmemory.store(maxmemory, Ordering::Relaxed);
        Ok(limit)
    }

    pub fn maxmemory(&self) -> u64 {
        self.maxmemory.load(Ordering::Relaxed)
    }

    pub fn policy(&self) -> &'static str {
        POLICIES[self.policy.load(Ordering::Relaxed) as usize]
    }

    pub fn evicts(&self) -> bool {
        self.policy.load(Ordering::Relaxed) != 0
    }

    pub fn set_policy(&self, name: &str) -> Result<(), String> {
        let index = POLICIES
            .iter()
            .position(|p| p.eq_ignore_ascii_case(name))
            .ok_or_else(|| format!("maxmemory-policy {name:?} is none of {}", POLICIES.join(", ")))?;
        self.policy.store(index as u8, Ordering::Relaxed);
        Ok(())
    }

    /// The engine's LFU counters for the policy: on under an `-lfu`
    /// policy, with `lfu-log-factor` and `lfu-decay-time`.
    pub fn lfu(&self) -> Option<Lfu> {
        self.policy().ends_with("-lfu").then(|| self.lfu_settings())
    }

    /// `lfu-log-factor` and `lfu-decay-time`, whatever the policy.
    pub fn lfu_settings(&self) -> Lfu {
        Lfu {
            log_factor: self.lfu_log_factor.load(Ordering::Relaxed),
            decay_minutes: self.lfu_decay_time.load(Ordering::Relaxed),
        }
    }

    /// CONFIG SET `lfu-log-factor` or `lfu-decay-time`: applied to the
    /// engine's counters at once if they are on.
    pub fn set_lfu_settings(&self, db: &scaledkv::Db, settings: Lfu) {
        self.lfu_log_factor.store(settings.log_factor, Ordering::Relaxed);
        self.lfu_decay_time.store(settings.decay_minutes, Ordering::Relaxed);
        db.set_lfu(self.lfu());
    }

    /// The SSD tier's size, if there is one (0: no bound).
    pub fn ssd_size(&self) -> Option<u64> {
        self.ssd_size
    }

    /// The engine's cache capacity for these settings: the limit when a
    /// policy evicts or there is an SSD tier to move data to, else 0 (the
    /// server refuses writes instead).
    pub fn cache_capacity(&self) -> u64 {
        if self.evicts() || self.ssd_size.is_some() {
            self.maxmemory()
        } else {
            0
        }
    }

    /// The engine's SSD tier capacity: its size when a policy evicts, else
    /// 0 (unbounded: the server refuses writes instead).
    pub fn ssd_tier_capacity(&self) -> u64 {
        if self.evicts() {
            self.ssd_size.unwrap_or(0)
        } else {
            0
        }
    }

    /// Applies `maxmemory` and `policy` to the engine (`db`), or refuses
    /// them with the engine's reason, changing nothing.
    pub fn set(&self, db: &scaledkv::Db, maxmemory: u64, policy: &str) -> Result<(), String> {
        let was = (self.maxmemory(), self.policy());
        self.set_policy(policy)?;
        self.maxmemory.store(maxmemory, Ordering::Relaxed);
        let applied = db.set_cache_capacity(self.cache_capacity()).and_then(|()| match self.ssd_size {
            Some(_) => db.set_ssd_tier_capacity(self.ssd_tier_capacity()),
            None => Ok(()),
        });
        if let Err(error) = applied {
            self.set_policy(was.1).expect("a known policy");
            self.maxmemory.store(was.0, Ordering::Relaxed);
            // Back to what was, which the engine took before.
            let _ = db.set_cache_capacity(self.cache_capacity());
            if self.ssd_size.is_some() {
                let _ = db.set_ssd_tier_capacity(self.ssd_tier_capacity());
            }
            return Err(error.to_string());
        }
        // Counters start from nothing when an LFU policy is chosen, as
        // Redis's "LRU and LFU data will take some time to adjust".
        db.set_lfu(self.lfu());
        Ok(())
    }

    /// Whether write `command` is refused now: it may add data (Redis's
    /// `denyoom`), and the log is over the limit without eviction, or a
    /// quarter over it with (what eviction may not drop fills it, or it
    /// cannot keep up). With an SSD tier, the fast tier is always kept by
    /// moving data (refused only a quarter over); without eviction, writes
    /// are refused once the two tiers hold the SSD tier's size plus the
    /// share of `maxmemory` the engine keeps in the fast tier
    /// (`scaledkv::EVICT_AHEAD`): what the fast tier holds past that share
    /// is on its way to the SSD tier, which so stays within a segment of
    /// its size.
    pub fn refuses(&self, command: &str, db: &scaledkv::Db) -> bool {
        denies_oom(command) && self.over_limit(db)
    }

    /// Whether writes that may add data are refused now (`refuses`).
    pub fn over_limit(&self, db: &scaledkv::Db) -> bool {
        let limit = self.maxmemory();
        if limit == 0 {
            return false;
        }
        // Summed over the fast tier's segments: read once per command.
        let log = db.log_bytes();
        let quarter_over = |limit: u64| limit + limit / 4;
        match self.ssd_size {
            None if self.evicts() => log > quarter_over(limit),
            None => log > limit,
            Some(_) if log > quarter_over(limit) => true,
            Some(0) => false,
            Some(ssd) if self.evicts() => db.ssd_tier_bytes() > quarter_over(ssd),
            Some(ssd) => {
                let demoting = log.saturating_sub((limit as f64 * scaledkv::EVICT_AHEAD) as u64);
                db.ssd_tier_bytes() + demoting > ssd
            }
        }
    }

    /// The engine's eviction listener: queues the keys for
    /// `announce_evictions`.
    pub fn listener(self: &Arc<Self>) -> EvictionListener {
        let limit = self.clone();
        EvictionListener(Arc::new(move |keys: Vec<Vec<u8>>| {
            let mut evicted = limit.evicted.lock();
            if evicted.keys.len() + keys.len() > MAX_UNANNOUNCED {
                evicted.keys.clear();
                evicted.overflowed = true;
            } else {
                evicted.keys.extend(keys.into_iter().filter(|key| !is_reserved(key)));
            }
            drop(evicted);
            limit.evictions.notify_one();
        }))
    }

    /// The engine's eviction filter: reads the policy at each call, so
    /// CONFIG SET takes effect at once.
    pub fn filter(self: &Arc<Self>) -> EvictionFilter {
        let limit = self.clone();
        EvictionFilter(Arc::new(move |key, value, expiry| {
            let tag = value.first().copied().unwrap_or_default();
            if is_reserved(key) || is_table(tag) {
                return Eviction::Keep;
            }
            let policy = limit.policy();
            if policy.starts_with("volatile-") && expiry.is_none() {
                Eviction::Keep
            } else if policy.ends_with("-random") {
                Eviction::Evict
            } else {
                Eviction::SecondChance
            }
        }))
    }
}

/// Announces the keys eviction dropped, as they go: Redis's `evicted`
/// keyspace notification and client-side caching's invalidations.
pub async fn announce_evictions(shared: Arc<crate::server::Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    let memory = &shared.config.memory;
    loop {
        tokio::select! {
            _ = memory.evictions.notified() => {}
            _ = shutdown.changed() => return,
        }
        let EvictedKeys { keys, overflowed } = std::mem::take(&mut *memory.evicted.lock());
        // An evicted key is a changed one to WATCH, as in Redis (EXEC after
        // the announcement fails; one that locked its keys before it runs).
        for key in &keys {
            shared.locks.bump(crate::keyspace::KeyLocks::stripe(key));
        }
        if overflowed {
            for stripe in crate::keyspace::KeyLocks::all() {
                shared.locks.bump(stripe);
            }
        }
        let mut events: Vec<crate::notify::Event> = keys
            .into_iter()
            .map(|key| crate::notify::Event { class: crate::notify::EVICTED, name: "evicted", key, writer: 0 })
            .collect();
        if overflowed {
            shared.master.lost_track();
            tracing::warn!(
                max = MAX_UNANNOUNCED,
                "evicted keys piled up unannounced; caching clients are told to drop everything"
            );
            events.push(crate::notify::Event {
                class: crate::notify::FLUSHED,
                name: "flush",
                key: Vec::new(),
                writer: 0,
            });
        }
        crate::notify::publish(&shared, &events);
    }
}

/// The segment size for a log bounded to `maxmemory` bytes: a 32nd of it,
/// 1 to 64 MiB, so eviction drops a small share of the cache at a time.
/// (A value or batch must fit one segment: in cache mode that bounds the
/// largest value too.)
pub fn segment_bytes(maxmemory: u64, default: usize) -> usize {
    if maxmemory == 0 {
        return default;
    }
    let step = 64 * 1024;
    ((maxmemory / 32) as usize).clamp(1 << 20, default) / step * step
}

/// Parses Redis's memory notation as its `memtoull` does: digits, then
/// nothing, `b`, `k` (1000), `kb` (1024), `m`, `mb`, `g` or `gb`, in any
/// case; no digits at all are 0, as `strtoull` makes them.
pub fn parse_bytes(text: &str) -> Option<u64> {
    let lower = text.to_ascii_lowercase();
    let digits = lower.find(|c: char| !c.is_ascii_digit()).unwrap_or(lower.len());
    let (number, unit) = lower.split_at(digits);
    let scale: u64 = match unit {
        "" | "b" => 1,
        "k" => 1000,
        "kb" => 1024,
        "m" => 1000 * 1000,
        "mb" => 1024 * 1024,
        "g" => 1000 * 1000 * 1000,
        "gb" => 1024 * 1024 * 1024,
        _ => return None,
    };
    let n: u64 = if number.is_empty() { 0 } else { number.parse().ok()? };
    n.checked_mul(scale)
}

/// Redis 7's commands flagged `denyoom` (those that may add data) among
/// ScaledKV's writes, and memcached's storage commands.
fn denies_oom(command: &str) -> bool {
    matches!(
        command,
        "set" | "setnx" | "setex" | "psetex" | "getset" | "mset" | "msetnx" | "append" | "incr" | "decr"
            | "incrby" | "decrby" | "incrbyfloat" | "setrange" | "setbit" | "bitop" | "bitfield"
            | "hset" | "hsetnx" | "hmset" | "hincrby" | "hincrbyfloat" | "lpush" | "rpush" | "lpushx"
            | "rpushx" | "lset" | "linsert" | "rpoplpush" | "lmove" | "brpoplpush" | "blmove" | "sadd"
            | "sinterstore" | "sunionstore" | "sdiffstore" | "zadd" | "zincrby" | "zrangestore"
            | "zunionstore" | "zinterstore" | "zdiffstore" | "pfadd" | "pfmerge" | "pfdebug" | "copy" | "restore" | "restore-asking"
            | "geoadd" | "georadius" | "georadiusbymember" | "geosearchstore" | "xadd" | "sort"
            // memcached's
            | "add" | "replace" | "prepend" | "cas" | "ms"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_notation_reads_as_redis_reads_it() {
        let cases =
            [("100", 100), ("1k", 1000), ("1KB", 1024), ("3mb", 3 << 20), ("2g", 2_000_000_000), ("1gb", 1 << 30)];
        for (text, bytes) in cases {
            assert_eq!(parse_bytes(text), Some(bytes), "{text}");
        }
        // No digits are 0 to Redis too (CONFIG SET maxmemory "" or "mb").
        assert_eq!((parse_bytes(""), parse_bytes("mb")), (Some(0), Some(0)));
        for bad in [" 1mb", "1tb", "-1", "1.5mb", "99999999999999999999gb"] {
            assert_eq!(parse_bytes(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn segments_are_a_32nd_of_the_limit_within_1_to_64_mib() {
        assert_eq!(segment_bytes(0, 64 << 20), 64 << 20);
        assert_eq!(segment_bytes(10 << 20, 64 << 20), 1 << 20);
        assert_eq!(segment_bytes(100 << 20, 64 << 20), (100 << 20) / 32 / 65536 * 65536);
        assert_eq!(segment_bytes(100 << 30, 64 << 20), 64 << 20);
    }

    #[test]
    fn the_filter_follows_the_policy() {
        let limit = Arc::new(MemoryLimit::new(0, "allkeys-lru", None).unwrap());
        let filter = limit.filter();
        let decide = |key: &[u8], value: &[u8], expiry| (filter.0)(key, value, expiry);
        let string = [crate::keyspace::TYPE_STRING, b'v'];
        assert_eq!(decide(b"k", &string, None), Eviction::SecondChance);
        assert_eq!(decide(b"\xff\xffmember", &string, None), Eviction::Keep, "the server's own");
        assert_eq!(decide(b"big", &[crate::keyspace::TYPE_ZSET_TABLE], None), Eviction::Keep, "a big collection");
        limit.set_policy("ALLKEYS-RANDOM").unwrap();
        assert_eq!(decide(b"k", &string, None), Eviction::Evict);
        limit.set_policy("volatile-lru").unwrap();
        assert_eq!(decide(b"k", &string, None), Eviction::Keep);
        assert_eq!(decide(b"k", &string, Some(5)), Eviction::SecondChance);
        assert!(limit.set_policy("lru").is_err());
        assert_eq!(limit.policy(), "volatile-lru");
    }
}
