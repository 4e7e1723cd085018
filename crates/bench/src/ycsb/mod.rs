//! `scaledkv-bench ycsb`: YCSB's core workloads A–F (its key choosers,
//! operation mixes, record shape and report lines) against the embedded
//! engines or, over the network, a Redis- or memcached-protocol server, so
//! ScaledKV, RocksDB, Redis and memcached run the same workload in one
//! script (`scripts/compare-ycsb.sh`).

pub(crate) mod generators;
mod record;
pub(crate) mod targets;

use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use clap::Parser;
use hdrhistogram::Histogram;
use rand::rngs::SmallRng;
use rand::{Rng, SeedableRng};
use scaledkv::Durability;

use generators::{key_name, InsertCounter, ScrambledZipfian, Zipfian};
use record::{field_name, field_value, Shape};
use targets::{Client, Target};

#[derive(Parser, Debug)]
#[command(name = "scaledkv-bench ycsb", about = "YCSB's core workloads A-F")]
struct Flags {
    /// `scaledkv` (embedded), `rocksdb` (embedded; build with `--features
    /// rocksdb`), `redis://HOST:PORT` or `memcached://HOST:PORT`.
    #[arg(long, default_value = "scaledkv")]
    target: String,
    /// Comma-separated phases, run in order on one data set: `load`
    /// (insert the records), then any of `a`..`f` (YCSB's recommended
    /// order is load,a,b,c,f,d, and e on a fresh load).
    #[arg(long, default_value = "load,a,b,c,f,d,e")]
    workloads: String,
    /// Records loaded (YCSB's `recordcount`); also what a run assumes is
    /// there when it starts without `load`.
    #[arg(long, default_value_t = 100_000)]
    records: u64,
    /// Operations per workload (YCSB's `operationcount`).
    #[arg(long, default_value_t = 100_000)]
    operations: u64,
    /// Client threads, each with its own connection (YCSB's `-threads`).
    #[arg(long, default_value_t = 8)]
    threads: usize,
    #[arg(long, default_value_t = 10)]
    field_count: usize,
    #[arg(long, default_value_t = 100)]
    field_length: usize,
    /// Embedded targets: the database directory (emptied first unless
    /// the phases start without `load`).
    #[arg(long, default_value = "/tmp/scaledkv-ycsb")]
    db: PathBuf,
    /// Embedded targets: `sync` (each write durable before it returns;
    /// RocksDB `sync=1`), `pmem`, or `buffered` (RocksDB's WAL, `sync=0`).
    #[arg(long, default_value = "sync")]
    durability: Durability,
    /// Check every record read against the bytes its key's fields must
    /// hold (YCSB's `dataintegrity`, off by default as there); a wrong
    /// record fails the run. A missing one always does.
    #[arg(long, default_value = "0", value_parser = crate::flag_bool, action = clap::ArgAction::Set)]
    verify: bool,
    #[arg(long, default_value_t = 301)]
    seed: u64,
    /// Progress bar: auto (on a terminal), always, never.
    #[arg(long, default_value = "auto")]
    progress: String,
}

/// One of YCSB's core workloads: the share of each operation and how keys
/// are chosen (workloads/workload{a..f} in YCSB's distribution).
struct Workload {
    name: &'static str,
    read: f64,
    update: f64,
    insert: f64,
    scan: f64,
    read_modify_write: f64,
    latest: bool,
    about: &'static str,
}

const fn workload(name: &'static str, mix: [f64; 5], latest: bool, about: &'static str) -> Workload {
    let [read, update, insert, scan, read_modify_write] = mix;
    Workload { name, read, update, insert, scan, read_modify_write, latest, about }
}

const WORKLOADS: [Workload; 6] = [
    workload("a", [0.5, 0.5, 0.0, 0.0, 0.0], false, "update heavy: 50% read, 50% update, zipfian"),
    workload("b", [0.95, 0.05, 0.0, 0.0, 0.0], false, "read mostly: 95% read, 5% update, zipfian"),
    workload("c", [1.0, 0.0, 0.0, 0.0, 0.0], false, "read only: 100% read, zipfian"),
    workload("d", [0.95, 0.0, 0.05, 0.0, 0.0], true, "read latest: 95% read, 5% insert, latest"),
    workload("e", [0.0, 0.0, 0.05, 0.95, 0.0], false, "short ranges: 95% scan (1-100 records), 5% insert, zipfian"),
    workload("f", [0.5, 0.0, 0.0, 0.0, 0.5], false, "read-modify-write: 50% read, 50% read-modify-write, zipfian"),
];

const MAX_SCAN: usize = 100;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Op {
    Insert,
    Read,
    Update,
    Scan,
    ReadModifyWrite,
}

const OPS: [Op; 5] = [Op::Insert, Op::Read, Op::Update, Op::Scan, Op::ReadModifyWrite];

impl Op {
    fn label(self) -> &'static str {
        match self {
            Op::Insert => "INSERT",
            Op::Read => "READ",
            Op::Update => "UPDATE",
            Op::Scan => "SCAN",
            Op::ReadModifyWrite => "READ-MODIFY-WRITE",
        }
    }
}

/// Per operation: latencies in µs, and YCSB's return codes.
struct Tally {
    /// Operations of the workload (a read-modify-write's read and update
    /// are recorded under READ and UPDATE too, but count once here).
    ops: u64,
    latency_us: Vec<Histogram<u64>>,
    ok: [u64; 5],
    /// A read that found no record, or one with wrong bytes.
    unexpected: [u64; 5],
}

impl Tally {
    fn new() -> Tally {
        let histogram = || Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("valid bounds");
        Tally { ops: 0, latency_us: OPS.iter().map(|_| histogram()).collect(), ok: [0; 5], unexpected: [0; 5] }
    }

    fn record(&mut self, op: Op, started: Instant, intact: bool) {
        let i = op as usize;
        self.latency_us[i].saturating_record((started.elapsed().as_micros() as u64).max(1));
        if intact {
            self.ok[i] += 1;
        } else {
            self.unexpected[i] += 1;
        }
    }

    fn merge(&mut self, other: Tally) {
        self.ops += other.ops;
        for (mine, theirs) in self.latency_us.iter_mut().zip(other.latency_us) {
            mine.add(theirs).expect("same bounds");
        }
        for i in 0..OPS.len() {
            self.ok[i] += other.ok[i];
            self.unexpected[i] += other.unexpected[i];
        }
    }
}

/// What one phase did, for callers that check it (scaledkv-server's tests).
#[derive(Debug)]
pub struct Phase {
    pub name: String,
    pub operations: u64,
    pub throughput: f64,
}

/// Runs `scaledkv-bench ycsb` with these arguments (the first is the
/// command's name) and returns each phase that ran.
pub fn main(args: Vec<String>) -> Result<Vec<Phase>, String> {
    let flags = Flags::parse_from(args);
    let phases: Vec<&str> = flags.workloads.split(',').filter(|s| !s.is_empty()).collect();
    for phase in &phases {
        if *phase != "load" && !WORKLOADS.iter().any(|w| w.name == *phase) {
            return Err(format!("unknown workload `{phase}`: load, a, b, c, d, e or f"));
        }
    }
    if flags.threads == 0 || flags.records == 0 || flags.field_count == 0 {
        return Err("--threads, --records and --field-count must be at least 1".into());
    }
    let shape = Shape { fields: flags.field_count, field_length: flags.field_length };
    let options = scaledkv::Options { durability: flags.durability, ..scaledkv::Options::default() };
    let fresh = phases.first() == Some(&"load");
    let target = targets::open(&flags.target, &flags.db, options, fresh)?;
    println!("YCSB workloads: {}", phases.join(","));
    println!("Records:    {} x {} fields of {} bytes", flags.records, shape.fields, shape.field_length);
    println!("Operations: {} per workload, {} threads", flags.operations, flags.threads);
    println!("{}", target.describe());
    // Transactions insert after the loaded records (YCSB's `insertstart`).
    let inserts = InsertCounter::new(flags.records);
    let mut failures = 0;
    let mut done = Vec::new();
    for phase in phases {
        let (tally, seconds) = if phase == "load" {
            load(&flags, target.as_ref(), shape)?
        } else {
            let workload = WORKLOADS.iter().find(|w| w.name == phase).expect("checked above");
            if workload.scan > 0.0 && !target.scans() {
                println!("# workload {phase}: skipped, the target has no ordered scan");
                continue;
            }
            run(&flags, target.as_ref(), shape, &inserts, workload)?
        };
        failures += tally.unexpected.iter().sum::<u64>();
        done.push(Phase { name: phase.to_string(), operations: tally.ops, throughput: tally.ops as f64 / seconds });
    }
    for line in target.report() {
        println!("{line}");
    }
    if failures > 0 {
        return Err(format!("{failures} operations found a record missing or with wrong bytes"));
    }
    Ok(done)
}

fn load(flags: &Flags, target: &dyn Target, shape: Shape) -> Result<(Tally, f64), String> {
    println!("# load: insert {} records", flags.records);
    let bar = crate::progress(&flags.progress, "load", flags.records);
    let next = AtomicU64::new(0);
    let (tally, seconds) = on_threads(flags, target, |_, client, tally| loop {
        let keynum = next.fetch_add(1, Ordering::Relaxed);
        if keynum >= flags.records {
            return Ok(());
        }
        let key = key_name(keynum);
        let started = Instant::now();
        client.insert(&key, &shape.record(&key))?;
        tally.record(Op::Insert, started, true);
        tally.ops += 1;
        bar.inc(1);
    })?;
    bar.finish_and_clear();
    report("load", &tally, seconds);
    Ok((tally, seconds))
}

/// Chooses the key of a read, update, scan or read-modify-write, among
/// acknowledged records only.
enum Chooser {
    Zipfian(ScrambledZipfian),
    /// Skewed towards the latest insert (YCSB's `SkewedLatestGenerator`).
    Latest(Zipfian),
}

impl Chooser {
    fn next(&mut self, rng: &mut SmallRng, inserts: &InsertCounter) -> u64 {
        let acknowledged = inserts.acknowledged().max(1);
        match self {
            // YCSB draws again when a key is not inserted yet.
            Chooser::Zipfian(zipf) => loop {
                let keynum = zipf.next(rng);
                if keynum < acknowledged {
                    return keynum;
                }
            },
            Chooser::Latest(zipf) => acknowledged - 1 - zipf.next(rng, acknowledged),
        }
    }
}

fn run(
    flags: &Flags,
    target: &dyn Target,
    shape: Shape,
    inserts: &InsertCounter,
    workload: &Workload,
) -> Result<(Tally, f64), String> {
    println!("# workload {}: {}", workload.name, workload.about);
    let bar = crate::progress(&flags.progress, workload.name, flags.operations);
    // YCSB sizes its key space for the inserts to come (`expectednewkeys`).
    let expected_keys = flags.records + (flags.operations as f64 * workload.insert * 2.0) as u64;
    let salt = u64::from(workload.name.as_bytes()[0]) << 16;
    let (tally, seconds) = on_threads(flags, target, |t, client, tally| {
        let mut rng = SmallRng::seed_from_u64(flags.seed ^ salt ^ t as u64);
        let mut chooser = if workload.latest {
            Chooser::Latest(Zipfian::new(inserts.acknowledged().max(1)))
        } else {
            Chooser::Zipfian(ScrambledZipfian::new(expected_keys))
        };
        let ops =
            flags.operations / flags.threads as u64 + u64::from((t as u64) < flags.operations % flags.threads as u64);
        for _ in 0..ops {
            let dice: f64 = rng.gen();
            let op = pick(workload, dice);
            let started = Instant::now();
            let intact = match op {
                Op::Insert => {
                    let keynum = inserts.take();
                    let key = key_name(keynum);
                    client.insert(&key, &shape.record(&key))?;
                    inserts.acknowledge(keynum);
                    true
                }
                Op::Read => {
                    let key = key_name(chooser.next(&mut rng, inserts));
                    read(client, &key, shape, flags.verify)?
                }
                Op::Update => {
                    let key = key_name(chooser.next(&mut rng, inserts));
                    client.update(&key, &one_field(&key, shape, &mut rng))?;
                    true
                }
                Op::Scan => {
                    let key = key_name(chooser.next(&mut rng, inserts));
                    let records = client.scan(&key, rng.gen_range(1..=MAX_SCAN))?;
                    !flags.verify || records.iter().all(|(key, fields)| shape.is_intact(key, fields))
                }
                Op::ReadModifyWrite => {
                    let key = key_name(chooser.next(&mut rng, inserts));
                    let read_started = Instant::now();
                    let intact = read(client, &key, shape, flags.verify)?;
                    tally.record(Op::Read, read_started, intact);
                    let update_started = Instant::now();
                    client.update(&key, &one_field(&key, shape, &mut rng))?;
                    tally.record(Op::Update, update_started, true);
                    intact
                }
            };
            tally.record(op, started, intact);
            tally.ops += 1;
            bar.inc(1);
        }
        Ok(())
    })?;
    bar.finish_and_clear();
    report(workload.name, &tally, seconds);
    Ok((tally, seconds))
}

fn pick(workload: &Workload, dice: f64) -> Op {
    let shares = [
        (Op::Read, workload.read),
        (Op::Update, workload.update),
        (Op::Insert, workload.insert),
        (Op::Scan, workload.scan),
        (Op::ReadModifyWrite, workload.read_modify_write),
    ];
    let mut below = 0.0;
    for (op, share) in shares {
        below += share;
        if dice < below {
            return op;
        }
    }
    shares.iter().rev().find(|(_, share)| *share > 0.0).expect("a workload has an operation").0
}

/// Reads every field of `key`'s record; false if it is missing or (when
/// verifying) holds other bytes than its key's.
fn read(client: &mut dyn Client, key: &str, shape: Shape, verify: bool) -> Result<bool, String> {
    Ok(match client.read(key)? {
        Some(fields) => !verify || shape.is_intact(key, &fields),
        None => false,
    })
}

/// An update of one field (YCSB's `writeallfields=false`), chosen uniformly.
fn one_field(key: &str, shape: Shape, rng: &mut SmallRng) -> record::Fields {
    let i = rng.gen_range(0..shape.fields);
    vec![(field_name(i), field_value(key, i, shape.field_length))]
}

/// Runs `per_thread(thread, client, tally)` on `--threads` threads, each
/// with its own client; the merged tally and the wall time in seconds.
fn on_threads(
    flags: &Flags,
    target: &dyn Target,
    per_thread: impl Fn(usize, &mut dyn Client, &mut Tally) -> Result<(), String> + Sync,
) -> Result<(Tally, f64), String> {
    let clients = (0..flags.threads).map(|_| target.connect()).collect::<Result<Vec<_>, _>>()?;
    let started = Instant::now();
    let results: Vec<Result<Tally, String>> = std::thread::scope(|scope| {
        let handles: Vec<_> = clients
            .into_iter()
            .enumerate()
            .map(|(t, mut client)| {
                let per_thread = &per_thread;
                scope.spawn(move || {
                    let mut tally = Tally::new();
                    per_thread(t, client.as_mut(), &mut tally)?;
                    Ok(tally)
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap_or_else(|_| Err("worker panicked".into()))).collect()
    });
    let seconds = started.elapsed().as_secs_f64();
    let mut total = Tally::new();
    for result in results {
        total.merge(result?);
    }
    Ok((total, seconds))
}

/// YCSB's report lines, then one summary line to compare targets by.
fn report(name: &str, tally: &Tally, seconds: f64) {
    let throughput = tally.ops as f64 / seconds;
    println!("[OVERALL], RunTime(ms), {:.0}", seconds * 1e3);
    println!("[OVERALL], Throughput(ops/sec), {throughput:.1}");
    let mut summary = format!("ycsb-{name:<7}: {:>10.0} ops/sec;", throughput);
    for op in OPS {
        let h = &tally.latency_us[op as usize];
        if h.is_empty() {
            continue;
        }
        let label = op.label();
        println!("[{label}], Operations, {}", h.len());
        println!("[{label}], AverageLatency(us), {:.1}", h.mean());
        println!("[{label}], MinLatency(us), {}", h.min());
        println!("[{label}], MaxLatency(us), {}", h.max());
        println!("[{label}], 95thPercentileLatency(us), {}", h.value_at_quantile(0.95));
        println!("[{label}], 99thPercentileLatency(us), {}", h.value_at_quantile(0.99));
        println!("[{label}], Return=OK, {}", tally.ok[op as usize]);
        if tally.unexpected[op as usize] > 0 {
            println!("[{label}], Return=UNEXPECTED_STATE, {}", tally.unexpected[op as usize]);
        }
        summary += &format!(" {label} p50 {} p99 {} us;", h.value_at_quantile(0.5), h.value_at_quantile(0.99));
    }
    println!("{summary}");
}
