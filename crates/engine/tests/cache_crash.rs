//! Crash test of cache mode: a child process writes into a cache several
//! times smaller than what it writes, on two threads, reading back some of
//! its keys, and prints an acknowledgement after each write; the parent
//! SIGKILLs it at a random moment, reopens, and checks every key byte for
//! byte. An evicted key may be gone or come back, but a key that is there
//! holds its newest acknowledged version (or the one write in flight),
//! never an older one and never wrong bytes.
//!
//! With an SSD tier (unbounded), the cache's oldest segments move there
//! instead, while the writers go on: nothing may be missing after a crash.
//!
//! CI runs `SCALEDKV_CRASH_ITERATIONS` (default 30, here halved: each
//! iteration rewrites the cache several times) iterations on tmpfs and the
//! disk; set it to 1000 for the long mode.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use scaledkv::{Db, Durability, Eviction, EvictionFilter, Options, SsdTier, WriteBatch};

const THREADS: u64 = 2;
/// Keys per thread, written in turn: 3,000 x ~500 B, about 1.5 MB per
/// thread, so the two threads' keys outgrow the 2 MiB cache; rounds
/// repeat, so versions of each key lie in several segments.
const KEYS: u64 = 3000;
const SEGMENT: usize = 256 * 1024;
const CAPACITY: u64 = 8 * SEGMENT as u64;
const CHILD_ENV: &str = "SCALEDKV_CACHE_CRASH_CHILD_DIR";
const CHILD_TIER_ENV: &str = "SCALEDKV_CACHE_CRASH_CHILD_TIER";

/// The cache's options, with an unbounded SSD tier in `tier` if given.
fn options(tier: Option<&Path>) -> Options {
    // The per-thread counters must survive eviction.
    let filter =
        EvictionFilter(Arc::new(
            |key: &[u8], _: &[u8], _| {
                if key.ends_with(b"-next") {
                    Eviction::Keep
                } else {
                    Eviction::SecondChance
                }
            },
        ));
    Options {
        durability: Durability::Sync,
        segment_size_bytes: SEGMENT,
        checkpoint_interval_bytes: 512 * 1024,
        cache_capacity_bytes: CAPACITY,
        eviction_filter: Some(filter),
        point_index: true,
        deferred_index_updates: 32,
        ssd_tier: tier.map(|dir| SsdTier { dir: dir.to_path_buf(), capacity_bytes: 0 }),
        // With a tier, segment ids start near 2^32: the writers cross the
        // point where index pointers' segment tags wrap while segments
        // move to the tier, on both sides of it.
        first_segment_id: if tier.is_some() { (1 << 32) - 4 } else { 1 },
        ..Options::default()
    }
}

fn key(t: u64, seq: u64) -> Vec<u8> {
    format!("c{t}-{}", seq % KEYS).into_bytes()
}

/// Write `seq` of thread `t`: 400-600 bytes that name both.
fn value(t: u64, seq: u64) -> Vec<u8> {
    let len = 400 + (seq * 7919 % 200) as usize;
    let mut value = Vec::with_capacity(len);
    value.extend_from_slice(&t.to_le_bytes());
    value.extend_from_slice(&seq.to_le_bytes());
    value.extend((16..len).map(|i| (i as u64 ^ seq ^ t) as u8));
    value
}

fn next_of(db: &Db, t: u64) -> u64 {
    db.get(format!("c{t}-next").as_bytes()).unwrap().map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()))
}

#[test]
fn cache_crash_child_writer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let tier = std::env::var(CHILD_TIER_ENV).ok();
    let db = Db::open(&dir, options(tier.as_deref().map(Path::new))).unwrap();
    println!("ready");
    std::thread::scope(|scope| {
        scope.spawn(|| loop {
            let stats = db.stats();
            println!("evicted {}", stats.evicted_keys + stats.demoted_segments);
            std::thread::sleep(Duration::from_millis(20));
        });
        for t in 0..THREADS {
            let db = &db;
            scope.spawn(move || {
                let mut rng = rand::rngs::StdRng::seed_from_u64(t);
                for seq in next_of(db, t).. {
                    let mut batch = WriteBatch::new();
                    batch.put(&key(t, seq), &value(t, seq));
                    batch.put(format!("c{t}-next").as_bytes(), &(seq + 1).to_le_bytes());
                    db.write(batch).unwrap();
                    println!("ack {t} {seq}");
                    // Reads of recent keys give them second chances.
                    let back = rng.gen_range(1..KEYS / 2);
                    db.get(&key(t, seq.saturating_sub(back))).unwrap();
                }
            });
        }
    });
}

/// Checks a reopened cache against the last acknowledged write of each
/// thread (every key there, if nothing `evicts`); returns how many keys it
/// found.
fn check(db: &Db, acked: &[Option<u64>], evicts: bool) -> u64 {
    let mut found = 0;
    for t in 0..THREADS {
        let next = next_of(db, t);
        let last = acked[t as usize];
        // Every acknowledged write counts; the one in flight may too.
        let least = last.map_or(0, |seq| seq + 1);
        assert!(next == least || next == least + 1, "thread {t}: next {next}, last acknowledged {last:?}");
        for slot in 0..KEYS.min(next) {
            let Some(got) = db.get(&key(t, slot)).unwrap() else {
                assert!(evicts, "thread {t} key {slot} is missing, and nothing is evicted");
                continue;
            };
            found += 1;
            // The newest write of this key the reopened counter covers.
            let newest = (next - 1) - ((next - 1 - slot) % KEYS);
            assert_eq!(got, value(t, newest), "thread {t} key {slot}: expected write {newest}");
        }
    }
    found
}

#[test]
fn acknowledged_writes_of_a_cache_survive_sigkill_or_are_evicted_whole() {
    let dirs = [tempfile::tempdir_in("/dev/shm").unwrap(), tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()];
    crash_loop(&[(dirs[0].path(), None), (dirs[1].path(), None)], "cache");
}

/// The fast tier on tmpfs, the SSD tier on the disk.
#[test]
fn acknowledged_writes_survive_sigkill_while_segments_move_to_an_ssd_tier() {
    let (dir, tier) =
        (tempfile::tempdir_in("/dev/shm").unwrap(), tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap());
    crash_loop(&[(dir.path(), Some(tier.path()))], "SSD tier");
    let ids = scaledkv::log::segment::list_segment_files(dir.path()).unwrap();
    assert!(ids.iter().any(|(id, _)| *id > 1 << 32), "the segment ids never passed 2^32: {ids:?}");
}

/// SIGKILLs the child writer in each of `setups` (the database's directory
/// and its SSD tier) in turn, and checks each reopened database.
fn crash_loop(setups: &[(&Path, Option<&Path>)], name: &str) {
    let iterations: u64 =
        std::env::var("SCALEDKV_CRASH_ITERATIONS").ok().and_then(|s| s.parse().ok()).map_or(15, |n: u64| n.div_ceil(2));
    let exe = std::env::current_exe().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(11);
    let (mut total_acks, mut most_evicted, mut found) = (0u64, 0u64, 0u64);
    for iteration in 0..iterations {
        let (dir, tier) = setups[iteration as usize % setups.len()];
        let mut command = Command::new(&exe);
        if let Some(tier) = tier {
            command.env(CHILD_TIER_ENV, tier);
        }
        let mut child = command
            .args(["--exact", "cache_crash_child_writer", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut acked, mut count, mut evicted) = (vec![None; THREADS as usize], 0u64, 0u64);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest's "test cache_crash_child_writer ... " has no
                // newline before the test runs: the first line may end with
                // an ack.
                let mut parts = line.split_whitespace().skip_while(|word| !matches!(*word, "ack" | "evicted"));
                match parts.next() {
                    Some("ack") => {
                        let t: usize = parts.next().unwrap().parse().unwrap();
                        acked[t] = Some(parts.next().unwrap().parse::<u64>().unwrap());
                        count += 1;
                    }
                    Some("evicted") => evicted = parts.next().unwrap().parse().unwrap(),
                    _ => {}
                }
            }
            (acked, count, evicted)
        });
        let kill_after = Duration::from_millis(rng.gen_range(100..600));
        let started = Instant::now();
        while started.elapsed() < kill_after {
            assert!(child.try_wait().unwrap().is_none(), "child writer exited on its own in iteration {iteration}");
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        let (acked, count, evicted) = reader.join().unwrap();
        // Acknowledgements of earlier runs are in the reopened counters.
        let db = Db::open(dir, options(tier)).unwrap();
        let acked: Vec<Option<u64>> =
            acked.iter().enumerate().map(|(t, a)| a.or_else(|| next_of(&db, t as u64).checked_sub(1))).collect();
        found += check(&db, &acked, tier.is_none());
        total_acks += count;
        most_evicted = most_evicted.max(evicted);
    }
    eprintln!(
        "{name} crash test: {iterations} SIGKILLs, {total_acks} acknowledged writes, {found} keys checked, \
         up to {most_evicted} evictions (or segments moved) in one run"
    );
    assert!(total_acks > 0 && found > 0, "the test checked nothing");
    if iterations >= 4 {
        assert!(most_evicted > 0, "no kill landed after evictions");
    }
}
