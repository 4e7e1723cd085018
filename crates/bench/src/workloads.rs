//! The db_bench workloads and db_bench's report format.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

use crate::Flags;
use scaledkv_bench::progress;
use scaledkv_bench::store::Store;

pub const KNOWN: &[&str] = &[
    "fillseq",
    "fillrandom",
    "overwrite",
    "fillbatch",
    "readrandom",
    "readseq",
    "readreverse",
    "seekrandom",
    "deleterandom",
    "readwhilewriting",
    "compact",
    "stats",
];

/// db_bench's key layout: the key number big-endian, padded with '0'.
fn make_key(k: u64, size: usize, out: &mut Vec<u8>) {
    out.clear();
    let bytes = k.to_be_bytes();
    if size >= 8 {
        out.extend_from_slice(&bytes);
        out.resize(size, b'0');
    } else {
        out.extend_from_slice(&bytes[8 - size..]);
    }
}

/// Thread `t`'s stream of random keys in `[0, num)`, seeded per workload
/// (`salt`) so each benchmark draws its own sequence.
struct RandomKeys {
    rng: SmallRng,
    num: u64,
    size: usize,
    key: Vec<u8>,
}

impl RandomKeys {
    fn new(flags: &Flags, salt: u64, t: usize) -> RandomKeys {
        RandomKeys {
            rng: SmallRng::seed_from_u64(flags.seed + salt + t as u64),
            num: flags.num,
            size: flags.key_size,
            key: Vec::with_capacity(flags.key_size),
        }
    }

    fn next(&mut self) -> &[u8] {
        let k = self.rng.gen_range(0..self.num);
        make_key(k, self.size, &mut self.key);
        &self.key
    }
}

/// Values cut from a random buffer at a moving offset, as db_bench does.
struct Values {
    data: Vec<u8>,
    at: usize,
}

impl Values {
    fn new(seed: u64) -> Values {
        let mut data = vec![0u8; 1 << 20];
        SmallRng::seed_from_u64(seed).fill_bytes(&mut data);
        Values { data, at: 0 }
    }

    fn next(&mut self, len: usize) -> &[u8] {
        if self.at + len > self.data.len() {
            self.at = 0;
        }
        self.at += len.max(1);
        &self.data[self.at - len.max(1)..self.at - len.max(1) + len]
    }
}

#[derive(Default)]
struct Tally {
    ops: u64,
    bytes: u64,
    found: u64,
    busy: Duration,
    latency_ns: Option<Histogram<u64>>,
}

impl Tally {
    fn new() -> Tally {
        Tally {
            latency_ns: Some(Histogram::new_with_bounds(1, 3_600_000_000_000, 3).expect("valid bounds")),
            ..Tally::default()
        }
    }

    fn record(&mut self, started: Instant) {
        let ns = started.elapsed().as_nanos() as u64;
        if let Some(h) = &mut self.latency_ns {
            h.saturating_record(ns.max(1));
        }
        self.ops += 1;
    }

    fn merge(&mut self, other: Tally) {
        self.ops += other.ops;
        self.bytes += other.bytes;
        self.found += other.found;
        self.busy += other.busy;
        match (&mut self.latency_ns, other.latency_ns) {
            (Some(mine), Some(theirs)) => mine.add(theirs).expect("same histogram bounds"),
            (None, theirs) => self.latency_ns = theirs,
            _ => {}
        }
    }
}

pub fn print_header(flags: &Flags, store: &dyn Store) {
    println!("Keys:       {} bytes each", flags.key_size);
    println!("Values:     {} bytes each", flags.value_size);
    println!("Entries:    {}", flags.num);
    println!("Threads:    {}", flags.threads);
    println!("{}", store.describe());
    println!("------------------------------------------------");
}

/// Runs `per_thread(thread, ops, tally)` on `threads` threads and merges.
fn on_threads(
    threads: usize,
    total_ops: u64,
    per_thread: impl Fn(usize, u64, &mut Tally) -> Result<(), String> + Sync,
) -> Result<(Tally, Duration), String> {
    let started = Instant::now();
    let results: Vec<Result<Tally, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..threads)
            .map(|t| {
                let per_thread = &per_thread;
                let ops = total_ops / threads as u64 + u64::from((t as u64) < total_ops % threads as u64);
                scope.spawn(move || {
                    let mut tally = Tally::new();
                    let begun = Instant::now();
                    per_thread(t, ops, &mut tally)?;
                    tally.busy = begun.elapsed();
                    Ok(tally)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("worker panicked".into()))).collect()
    });
    let elapsed = started.elapsed();
    let mut total = Tally::default();
    for result in results {
        total.merge(result?);
    }
    Ok((total, elapsed))
}

fn report(name: &str, tally: &Tally, elapsed: Duration, extra: &str) {
    let ops = tally.ops.max(1);
    let micros_per_op = tally.busy.as_secs_f64() * 1e6 / ops as f64;
    let ops_per_sec = tally.ops as f64 / elapsed.as_secs_f64();
    let rate = if tally.bytes > 0 {
        format!(" {:6.1} MB/s", tally.bytes as f64 / 1048576.0 / elapsed.as_secs_f64())
    } else {
        String::new()
    };
    println!("{name:<12} : {micros_per_op:11.3} micros/op {} ops/sec;{rate}{extra}", ops_per_sec as u64);
    if let Some(h) = tally.latency_ns.as_ref().filter(|h| !h.is_empty()) {
        let us = |q: f64| h.value_at_quantile(q) as f64 / 1000.0;
        println!("Percentiles: P50: {:.2} P99: {:.2} P99.9: {:.2} (micros/op)", us(0.5), us(0.99), us(0.999));
    }
}

pub fn run(name: &str, flags: &Flags, store: &Arc<dyn Store>) -> Result<(), String> {
    let num = flags.num;
    let reads = if flags.reads < 0 { num } else { flags.reads as u64 };
    let (ks, vs, threads) = (flags.key_size, flags.value_size, flags.threads.max(1));
    let entry_bytes = (ks + vs) as u64;
    match name {
        "fillseq" | "fillrandom" | "overwrite" => {
            let random = name != "fillseq";
            let bar = progress(&flags.progress, name, num);
            let (tally, elapsed) = on_threads(threads, num, |t, ops, tally| {
                let mut rng = SmallRng::seed_from_u64(flags.seed + t as u64);
                let mut values = Values::new(flags.seed + 1000 + t as u64);
                let mut key = Vec::with_capacity(ks);
                let first = t as u64 * (num / threads as u64);
                for i in 0..ops {
                    let k = if random { rng.gen_range(0..num) } else { first + i };
                    make_key(k, ks, &mut key);
                    let started = Instant::now();
                    store.put(&key, values.next(vs))?;
                    tally.record(started);
                    tally.bytes += entry_bytes;
                    if i % 1024 == 1023 {
                        bar.inc(1024);
                    }
                }
                Ok(())
            })?;
            bar.finish_and_clear();
            report(name, &tally, elapsed, "");
        }
        "fillbatch" => {
            let batch = flags.batch_size.max(1) as u64;
            let (tally, elapsed) = on_threads(threads, num.div_ceil(batch), |t, ops, tally| {
                let mut values = Values::new(flags.seed + 2000 + t as u64);
                let mut entries = Vec::with_capacity(batch as usize);
                for b in 0..ops {
                    entries.clear();
                    for j in 0..batch {
                        let mut key = Vec::with_capacity(ks);
                        make_key((t as u64 * ops + b) * batch + j, ks, &mut key);
                        entries.push((key, values.next(vs).to_vec()));
                    }
                    let started = Instant::now();
                    store.put_batch(&entries)?;
                    tally.record(started);
                    tally.bytes += entry_bytes * batch;
                }
                Ok(())
            })?;
            report(name, &tally, elapsed, &format!(" ({batch} entries per batch)"));
        }
        "readrandom" => {
            let bar = progress(&flags.progress, name, reads);
            let (tally, elapsed) = on_threads(threads, reads, |t, ops, tally| {
                let mut keys = RandomKeys::new(flags, 3000, t);
                for i in 0..ops {
                    let key = keys.next();
                    let started = Instant::now();
                    let found = store.get(key)?;
                    tally.record(started);
                    if let Some(len) = found {
                        tally.found += 1;
                        tally.bytes += (ks + len) as u64;
                    }
                    if i % 1024 == 1023 {
                        bar.inc(1024);
                    }
                }
                Ok(())
            })?;
            bar.finish_and_clear();
            report(name, &tally, elapsed, &format!(" ({} of {} found)", tally.found, tally.ops));
        }
        "readseq" | "readreverse" => {
            let (mut tally, elapsed) = on_threads(threads, threads as u64, |_, _, tally| {
                let (entries, bytes) = store.scan(None, reads as usize, name == "readreverse")?;
                tally.ops += entries as u64;
                tally.bytes += bytes as u64;
                Ok(())
            })?;
            tally.latency_ns = None;
            report(name, &tally, elapsed, "");
        }
        "seekrandom" => {
            let (tally, elapsed) = on_threads(threads, reads, |t, ops, tally| {
                let mut keys = RandomKeys::new(flags, 4000, t);
                for _ in 0..ops {
                    let key = keys.next();
                    let started = Instant::now();
                    let (entries, bytes) = store.scan(Some(key), flags.seek_nexts + 1, false)?;
                    tally.record(started);
                    tally.found += u64::from(entries > 0);
                    tally.bytes += bytes as u64;
                }
                Ok(())
            })?;
            report(name, &tally, elapsed, &format!(" ({} of {} found)", tally.found, tally.ops));
        }
        "deleterandom" => {
            let (tally, elapsed) = on_threads(threads, num, |t, ops, tally| {
                let mut keys = RandomKeys::new(flags, 5000, t);
                for _ in 0..ops {
                    let key = keys.next();
                    let started = Instant::now();
                    store.delete(key)?;
                    tally.record(started);
                }
                Ok(())
            })?;
            report(name, &tally, elapsed, "");
        }
        "readwhilewriting" => readwhilewriting(flags, store, reads)?,
        "compact" => {
            let started = Instant::now();
            store.compact()?;
            let mut tally = Tally::new();
            tally.record(started);
            tally.busy = started.elapsed();
            report(name, &tally, tally.busy, "");
        }
        "stats" => {
            for line in store.report() {
                println!("{line}");
            }
        }
        other => return Err(format!("unknown benchmark `{other}`")),
    }
    Ok(())
}

/// `--threads` readers doing random gets while one extra thread overwrites
/// random keys until the readers finish; reports the readers, as db_bench.
fn readwhilewriting(flags: &Flags, store: &Arc<dyn Store>, reads: u64) -> Result<(), String> {
    let (num, ks, vs) = (flags.num, flags.key_size, flags.value_size);
    let stop = AtomicBool::new(false);
    let deadline = (flags.duration > 0).then(|| Instant::now() + Duration::from_secs(flags.duration));
    let mut writes = 0u64;
    let result = std::thread::scope(|scope| {
        let writer = scope.spawn(|| -> Result<u64, String> {
            let mut rng = SmallRng::seed_from_u64(flags.seed + 6000);
            let mut values = Values::new(flags.seed + 7000);
            let mut key = Vec::with_capacity(ks);
            let mut n = 0;
            while !stop.load(Ordering::Relaxed) {
                make_key(rng.gen_range(0..num), ks, &mut key);
                store.put(&key, values.next(vs))?;
                n += 1;
            }
            Ok(n)
        });
        let readers = on_threads(flags.threads.max(1), reads, |t, ops, tally| {
            let mut keys = RandomKeys::new(flags, 8000, t);
            for _ in 0..ops {
                if deadline.is_some_and(|d| Instant::now() > d) {
                    break;
                }
                let key = keys.next();
                let started = Instant::now();
                if let Some(len) = store.get(key)? {
                    tally.found += 1;
                    tally.bytes += (ks + len) as u64;
                }
                tally.record(started);
            }
            Ok(())
        });
        stop.store(true, Ordering::Relaxed);
        writes = writer.join().unwrap_or_else(|_| Err("writer panicked".into()))?;
        readers
    });
    let (tally, elapsed) = result?;
    let extra = format!(" ({} of {} found; {} writes meanwhile)", tally.found, tally.ops, writes);
    report("readwhilewriting", &tally, elapsed, &extra);
    Ok(())
}
