//! What the server's memory holds, as Redis reports it (INFO memory,
//! MEMORY STATS, MEMORY DOCTOR). ScaledKV's `used_memory` is the process's
//! resident memory: the index, the mapped pages of the log it has touched,
//! the allocator's pages. The peak is sampled every 100 ms (Redis's cron
//! does it every turn) and on every report.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::Duration;

/// Resident memory before the database opened (Redis's
/// `used_memory_startup`: the server without its data).
static STARTUP: OnceLock<u64> = OnceLock::new();
/// The highest resident memory seen.
static PEAK: AtomicU64 = AtomicU64::new(0);

/// Notes the startup size: called before the database opens (later calls
/// keep the first).
pub fn note_startup() {
    STARTUP.get_or_init(resident_bytes);
}

pub fn startup() -> u64 {
    STARTUP.get().copied().unwrap_or(0)
}

/// The resident memory now, counted into the peak.
pub fn used() -> u64 {
    let rss = resident_bytes();
    PEAK.fetch_max(rss, Ordering::Relaxed);
    rss
}

pub fn peak() -> u64 {
    PEAK.load(Ordering::Relaxed)
}

/// How often the peak is sampled between reports (`server::every`).
pub const SAMPLE_EVERY: Duration = Duration::from_millis(100);

pub fn resident_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm.split_whitespace().nth(1).and_then(|p| p.parse().ok()).unwrap_or(0);
    pages * 4096
}

/// The machine's memory (INFO's `total_system_memory`), 0 if unknown.
pub fn total_system_memory() -> u64 {
    let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
    let line = meminfo.lines().find(|line| line.starts_with("MemTotal:"));
    line.and_then(|line| line.split_whitespace().nth(1)?.parse::<u64>().ok()).map_or(0, |kb| kb * 1024)
}

/// Redis's `bytesToHuman`: `123B`, `1.50K`, `2.00M` ...
pub fn human(bytes: u64) -> String {
    const UNITS: [&str; 5] = ["K", "M", "G", "T", "P"];
    if bytes < 1024 {
        return format!("{bytes}B");
    }
    let mut value = bytes as f64 / 1024.0;
    for unit in UNITS {
        if value < 1024.0 || unit == "P" {
            return format!("{value:.2}{unit}");
        }
        value /= 1024.0;
    }
    unreachable!("P ends the loop")
}

/// The parts of MEMORY STATS, computed once for a report.
pub struct Overhead {
    pub used: u64,
    pub peak: u64,
    pub startup: u64,
    /// The index's heap (keys and where their values are).
    pub index: u64,
    pub scripts: u64,
    pub functions: u64,
    pub keys: u64,
}

impl Overhead {
    /// From the engine's `stats` (which merges pending index updates: the
    /// caller's, taken once for its whole report).
    pub fn of(shared: &crate::server::Shared, stats: &scaledkv::Stats) -> Overhead {
        let used = used();
        let functions = shared.functions.current().iter().map(|library| library.code.len() as u64).sum();
        Overhead {
            used,
            peak: peak().max(used),
            startup: startup(),
            // The LFU counters are the index's too: per key, in DRAM.
            index: stats.index_memory_bytes + stats.lfu_memory_bytes,
            scripts: shared.scripts.sizes().1 as u64,
            functions,
            keys: shared.user_keys(),
        }
    }

    /// What is not the data: the server as it started, the index, the
    /// scripts' and functions' code.
    pub fn total(&self) -> u64 {
        self.startup + self.index + self.scripts + self.functions
    }

    /// The rest of the resident memory: the log's pages and the values
    /// being served.
    pub fn dataset(&self) -> u64 {
        self.used.saturating_sub(self.total())
    }

    pub fn dataset_percentage(&self) -> f64 {
        let net = self.used.saturating_sub(self.startup);
        if net == 0 {
            0.0
        } else {
            self.dataset() as f64 * 100.0 / net as f64
        }
    }

    pub fn peak_percentage(&self) -> f64 {
        if self.peak == 0 {
            0.0
        } else {
            self.used as f64 * 100.0 / self.peak as f64
        }
    }

    pub fn bytes_per_key(&self) -> u64 {
        self.used.saturating_sub(self.startup).checked_div(self.keys).unwrap_or(0)
    }
}

/// MEMORY DOCTOR's report: what in this server's memory deserves a look.
pub fn doctor(shared: &crate::server::Shared) -> String {
    let stats = shared.db.stats();
    let overhead = Overhead::of(shared, &stats);
    if overhead.used < 5 << 20 {
        return "This instance is empty or is using very little memory: there is nothing to diagnose yet. Come back \
                once it holds some data."
            .into();
    }
    let mut reports = Vec::new();
    if overhead.peak > overhead.used + overhead.used / 2 {
        reports.push(format!(
            " * Peak memory: at some point the server used {} ({:.0}% of what it uses now, {}). The freed memory \
             may be kept by the allocator for later use.",
            human(overhead.peak),
            overhead.peak as f64 * 100.0 / overhead.used as f64,
            human(overhead.used),
        ));
    }
    if stats.keys > 10_000 && stats.index_bytes_per_key > 150.0 {
        reports.push(format!(
            " * Index: {:.0} bytes per key, above the usual 40-150. The index is rebuilt dense when writes pause; \
             under heavy random inserts it stays looser.",
            stats.index_bytes_per_key
        ));
    }
    if stats.log_bytes > 64 << 20 && stats.space_amplification > 2.5 {
        reports.push(format!(
            " * Log: {} on the medium for {} of live data ({:.1}x). Garbage collection is behind the writes; it \
             catches up when they slow (writes help it past 3x).",
            human(stats.log_bytes),
            human(stats.live_bytes),
            stats.space_amplification
        ));
    }
    let maxmemory = shared.config.memory.maxmemory();
    let in_memory = stats.log_bytes - stats.ssd_tier_bytes;
    if maxmemory > 0 && in_memory > maxmemory / 10 * 9 {
        reports.push(format!(
            " * maxmemory: the log holds {} of the {} allowed; with policy {} writes {}.",
            human(in_memory),
            human(maxmemory),
            shared.config.memory.policy(),
            if shared.config.memory.evicts() { "make room by eviction" } else { "past it are refused" }
        ));
    }
    let (scripts, _) = shared.scripts.sizes();
    if scripts > 1000 {
        reports.push(format!(
            " * Scripts: {scripts} scripts are cached (EVAL of a script that changes its text each time caches \
             every version). SCRIPT FLUSH empties the cache; EVALSHA with parameters avoids it."
        ));
    }
    if reports.is_empty() {
        return "I found no memory issue in this instance. I can only account for what ScaledKV reports: its \
                index, its log and the process's resident memory."
            .into();
    }
    format!(
        "Memory issues were found in this instance:\n\n{}\n\nMEMORY STATS and INFO memory give the numbers.\n",
        reports.join("\n\n")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes_read_as_redis_writes_them() {
        assert_eq!(human(0), "0B");
        assert_eq!(human(1023), "1023B");
        assert_eq!(human(1536), "1.50K");
        assert_eq!(human(3 << 20), "3.00M");
        assert_eq!(human(5 << 30), "5.00G");
    }

    #[test]
    fn the_peak_is_at_least_what_is_used() {
        let now = used();
        assert!(now > 0, "resident memory is read from /proc");
        assert!(peak() >= now);
    }
}
