//! `scaledkv-bench cache`: a look-aside cache's workload against a server
//! with a memory limit. Each operation GETs a key chosen by YCSB's
//! scrambled zipfian (or uniformly); a miss SETs the key, as an
//! application fills its cache from the database behind it. It reports
//! the hit ratio (what a cache's eviction is judged by at a given size),
//! throughput and GET latency, after a warm-up that fills the cache, so
//! ScaledKV (`--maxmemory`, `--maxmemory-policy`), memcached (`-m`) and
//! Redis (`maxmemory`) are compared at the same memory
//! (`scripts/compare-cache.sh`).

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use clap::Parser;
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};

use crate::ycsb::generators::{key_name, ScrambledZipfian};
use crate::ycsb::targets::MemcachedClient;

#[derive(Parser, Debug)]
#[command(name = "scaledkv-bench cache", about = "A look-aside cache's hit ratio under a memory limit")]
struct Flags {
    /// `memcached://HOST:PORT` or `redis://HOST:PORT`.
    #[arg(long)]
    target: String,
    /// Distinct keys the workload asks for.
    #[arg(long, default_value_t = 1_000_000)]
    keys: u64,
    #[arg(long, default_value_t = 1000)]
    value_size: usize,
    /// `zipfian` (YCSB's scrambled zipfian, 0.99) or `uniform`.
    #[arg(long, default_value = "zipfian")]
    distribution: String,
    /// Operations before the measured ones, to fill the cache.
    #[arg(long, default_value_t = 1_000_000)]
    warmup: u64,
    /// Measured operations.
    #[arg(long, default_value_t = 1_000_000)]
    operations: u64,
    #[arg(long, default_value_t = 4)]
    threads: usize,
    /// Check every value a GET returns against the bytes its key must
    /// hold; a wrong one fails the run.
    #[arg(long, default_value = "1", value_parser = crate::flag_bool, action = clap::ArgAction::Set)]
    verify: bool,
    #[arg(long, default_value_t = 7)]
    seed: u64,
}

/// One connection, either protocol.
enum Connection {
    Memcached(MemcachedClient),
    Redis(redis::Connection),
}

impl Connection {
    fn open(target: &str) -> Result<Connection, String> {
        if let Some(address) = target.strip_prefix("memcached://") {
            return MemcachedClient::connect(address).map(Connection::Memcached);
        }
        if target.starts_with("redis://") {
            let client = redis::Client::open(target).map_err(|e| e.to_string())?;
            return client.get_connection().map(Connection::Redis).map_err(|e| format!("{target}: {e}"));
        }
        Err(format!("--target {target:?}: expected memcached://HOST:PORT or redis://HOST:PORT"))
    }

    fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, String> {
        match self {
            Connection::Memcached(client) => client.get(key),
            Connection::Redis(con) => redis::cmd("GET").arg(key).query(con).map_err(|e| format!("GET {key}: {e}")),
        }
    }

    fn set(&mut self, key: &str, value: &[u8]) -> Result<(), String> {
        match self {
            Connection::Memcached(client) => client.set(key, value),
            Connection::Redis(con) => {
                redis::cmd("SET").arg(key).arg(value).query(con).map_err(|e| format!("SET {key}: {e}"))
            }
        }
    }
}

/// `len` bytes that name key number `n`: its name, then a pattern of it.
fn value_of(n: u64, len: usize) -> Vec<u8> {
    let mut value = format!("{n}:").into_bytes();
    value.extend((0..len).map(|i| b'a' + ((n as usize + i) % 26) as u8));
    value.truncate(len.max(1));
    value
}

/// What one phase's threads did.
#[derive(Default)]
struct Counts {
    hits: AtomicU64,
    misses: AtomicU64,
    wrong: AtomicU64,
}

/// Runs `operations` spread over the threads; returns the counts, GET
/// latencies (µs) and the seconds it took.
fn phase(flags: &Flags, operations: u64, seed: u64) -> Result<(Counts, Histogram<u64>, f64), String> {
    let counts = Counts::default();
    let started = Instant::now();
    let histograms = std::thread::scope(|scope| {
        let workers: Vec<_> = (0..flags.threads)
            .map(|t| {
                let counts = &counts;
                let share =
                    operations / flags.threads as u64 + u64::from((t as u64) < operations % flags.threads as u64);
                scope.spawn(move || -> Result<Histogram<u64>, String> {
                    let mut con = Connection::open(&flags.target)?;
                    let mut rng = SmallRng::seed_from_u64(seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15));
                    let mut zipf = ScrambledZipfian::new(flags.keys);
                    let mut latency = Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
                    for _ in 0..share {
                        let n = match flags.distribution.as_str() {
                            "uniform" => rng.gen_range(0..flags.keys),
                            _ => zipf.next(&mut rng),
                        };
                        let key = key_name(n);
                        let asked = Instant::now();
                        let got = con.get(&key)?;
                        latency.saturating_record(asked.elapsed().as_micros().max(1) as u64);
                        match got {
                            Some(value) => {
                                counts.hits.fetch_add(1, Ordering::Relaxed);
                                if flags.verify && value != value_of(n, flags.value_size) {
                                    counts.wrong.fetch_add(1, Ordering::Relaxed);
                                }
                            }
                            None => {
                                counts.misses.fetch_add(1, Ordering::Relaxed);
                                con.set(&key, &value_of(n, flags.value_size))?;
                            }
                        }
                    }
                    Ok(latency)
                })
            })
            .collect();
        workers.into_iter().map(|w| w.join().expect("a worker panicked")).collect::<Result<Vec<_>, String>>()
    })?;
    let seconds = started.elapsed().as_secs_f64();
    let mut all = Histogram::new_with_bounds(1, 60_000_000, 3).expect("valid bounds");
    for h in histograms {
        all.add(h).expect("same bounds");
    }
    Ok((counts, all, seconds))
}

pub fn main(args: Vec<String>) -> Result<(), String> {
    let flags = Flags::try_parse_from(args).map_err(|e| e.to_string())?;
    if flags.threads == 0 || flags.keys == 0 || flags.value_size == 0 {
        return Err("--threads, --keys and --value-size must be at least 1".into());
    }
    if !["zipfian", "uniform"].contains(&flags.distribution.as_str()) {
        return Err(format!("--distribution {:?}: zipfian or uniform", flags.distribution));
    }
    println!("Cache:      {} ({} threads)", flags.target, flags.threads);
    println!(
        "Keys:       {} of {} bytes ({:.0} MB), {}",
        flags.keys,
        flags.value_size,
        flags.keys as f64 * flags.value_size as f64 / 1e6,
        flags.distribution
    );
    for (name, operations, seed) in [("WARMUP", flags.warmup, flags.seed), ("CACHE", flags.operations, flags.seed + 1)]
    {
        if operations == 0 {
            continue;
        }
        let (counts, latency, seconds) = phase(&flags, operations, seed)?;
        let (hits, misses) = (counts.hits.load(Ordering::Relaxed), counts.misses.load(Ordering::Relaxed));
        let wrong = counts.wrong.load(Ordering::Relaxed);
        println!(
            "[{name}] ops {operations} in {seconds:.2} s: {:.0} ops/sec, hit ratio {:.4} ({hits} hits, {misses} misses), \
             GET p50 {} us, p99 {} us",
            operations as f64 / seconds,
            hits as f64 / (hits + misses).max(1) as f64,
            latency.value_at_quantile(0.5),
            latency.value_at_quantile(0.99),
        );
        if wrong > 0 {
            return Err(format!("{wrong} GETs returned bytes their key does not hold"));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_name_their_key_and_have_the_asked_length() {
        assert_eq!(value_of(12, 10), b"12:mnopqrs");
        assert_eq!(value_of(7, 1000).len(), 1000);
        assert_ne!(value_of(1, 100), value_of(2, 100));
        assert_eq!(value_of(123_456, 3), b"123");
    }
}
