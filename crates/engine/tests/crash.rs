//! Crash test: a child process writes batches on several threads and prints
//! an acknowledgement after each one returns; the parent SIGKILLs it at a
//! random moment, reopens, and checks, byte for byte, that each thread's
//! keys are exactly the state after its last acknowledged batch or after
//! the one batch it had in flight (all of that batch or none of it).
//!
//! CI runs `SCALEDKV_CRASH_ITERATIONS` (default 30) iterations rotating
//! through the durability modes and media (tmpfs, where freed segments are
//! recycled, and the disk; the `pmem` database's segment ids cross 2^32,
//! where index pointers' tags wrap); set it to 1000 for the long mode.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use rand::{Rng, SeedableRng};
use scaledkv::{Db, Durability, Options, WriteBatch};

const THREADS: u64 = 3;
const KEYS_PER_THREAD: u64 = 60;
/// Keys a child writes once, in chunks, before the threads start: an index
/// large enough that full checkpoints wait past the interval and deltas
/// are written between them (a kill then reopens through a chain).
const STATIC_KEYS: u32 = 40_000;
const STATIC_CHUNK: u32 = 2_000;
const CHILD_ENV: &str = "SCALEDKV_CRASH_CHILD_DIR";
const MODE_ENV: &str = "SCALEDKV_CRASH_CHILD_MODE";

fn options(durability: Durability) -> Options {
    Options {
        durability,
        // Small segments and frequent checkpoints so kills land in rolls,
        // checkpoints and GC too.
        segment_size_bytes: 256 * 1024,
        checkpoint_interval_bytes: 512 * 1024,
        // Reads after reopen go through the point table while it fills.
        point_index: true,
        // Index updates handed to the merger thread every 32 keys, so kills
        // land while merges race checkpoints, GC and segment recycling.
        deferred_index_updates: 32,
        // The `pmem` database's segment ids start near 2^32, so its writers
        // cross the point where index pointers' segment tags wrap within
        // a few rolls and kills land on both sides of it.
        first_segment_id: if durability == Durability::Pmem { NEAR_WRAP } else { 1 },
        ..Options::default()
    }
}

const NEAR_WRAP: u64 = (1 << 32) - 4;

/// The batch thread `t` writes as its `seq`-th: (key, Some(value) | None).
fn batch_of(t: u64, seq: u64) -> Vec<(Vec<u8>, Option<Vec<u8>>)> {
    let entries = seq % 3 + 1;
    (0..entries)
        .map(|j| {
            let key = format!("t{t}-k{:03}", (seq * 7 + j * 13) % KEYS_PER_THREAD).into_bytes();
            if (seq + j).is_multiple_of(11) {
                (key, None)
            } else {
                let len = 1 + ((seq * 31 + j * 17) % 2500) as usize;
                let stamp = format!("{t}:{seq}:{j}:");
                let value: Vec<u8> = stamp.bytes().cycle().take(len.max(stamp.len())).collect();
                (key, Some(value))
            }
        })
        .collect()
}

/// Thread `t`'s keys after its batches `0..upto`.
fn model(t: u64, upto: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let mut state = BTreeMap::new();
    for seq in 0..upto {
        for (key, value) in batch_of(t, seq) {
            match value {
                Some(value) => state.insert(key, value),
                None => state.remove(&key),
            };
        }
    }
    state
}

/// The child: resumes each thread after its last durable batch and writes
/// until killed. Prints `ack <thread> <seq>` after each batch returns.
#[test]
fn crash_child_writer() {
    let Ok(dir) = std::env::var(CHILD_ENV) else { return };
    let durability: Durability = std::env::var(MODE_ENV).unwrap().parse().unwrap();
    let db = Db::open(&dir, options(durability)).unwrap();
    for chunk in static_chunks(&db)..STATIC_KEYS / STATIC_CHUNK {
        let mut batch = WriteBatch::new();
        for i in chunk * STATIC_CHUNK..(chunk + 1) * STATIC_CHUNK {
            batch.put(&static_key(i), &i.to_le_bytes());
        }
        batch.put(b"static-chunks", &(chunk + 1).to_le_bytes());
        db.write(batch).unwrap();
    }
    let starts: Vec<u64> = (0..THREADS)
        .map(|t| {
            db.get(format!("t{t}-next").as_bytes()).unwrap().map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()))
        })
        .collect();
    println!("ready");
    std::thread::scope(|scope| {
        // Reports segment reuse, so the parent knows kills landed while it ran.
        scope.spawn(|| {
            let mut reported = 0;
            loop {
                let recycled = db.stats().segments_recycled;
                if recycled > reported {
                    println!("recycled {recycled}");
                    reported = recycled;
                }
                std::thread::sleep(Duration::from_millis(10));
            }
        });
        for t in 0..THREADS {
            let (db, start) = (&db, starts[t as usize]);
            scope.spawn(move || {
                for seq in start.. {
                    let mut batch = WriteBatch::new();
                    for (key, value) in batch_of(t, seq) {
                        match value {
                            Some(value) => batch.put(&key, &value),
                            None => batch.delete(&key),
                        }
                    }
                    batch.put(format!("t{t}-next").as_bytes(), &(seq + 1).to_le_bytes());
                    db.write(batch).unwrap();
                    println!("ack {t} {seq}");
                }
            });
        }
    });
}

fn static_key(i: u32) -> Vec<u8> {
    format!("s{i:06}").into_bytes()
}

/// How many chunks of static keys the database holds (each is one batch).
fn static_chunks(db: &Db) -> u32 {
    db.get(b"static-chunks").unwrap().map_or(0, |v| u32::from_le_bytes(v.try_into().unwrap()))
}

fn state_of(db: &Db, t: u64) -> BTreeMap<Vec<u8>, Vec<u8>> {
    let prefix = format!("t{t}-k");
    db.range(prefix.as_bytes()..format!("t{t}-l").as_bytes()).map(|kv| kv.unwrap()).collect()
}

fn check(dir: &Path, durability: Durability, acked: &[Option<u64>], previous: &[u64]) -> Vec<u64> {
    let db = Db::open(dir, options(durability)).expect("reopen after SIGKILL must succeed");
    let chunks = static_chunks(&db);
    let statics: Vec<(Vec<u8>, Vec<u8>)> = db.range(&b"s0"[..]..&b"s:"[..]).map(|kv| kv.unwrap()).collect();
    let expected: Vec<(Vec<u8>, Vec<u8>)> =
        (0..chunks * STATIC_CHUNK).map(|i| (static_key(i), i.to_le_bytes().to_vec())).collect();
    assert!(statics == expected, "static keys: {} chunks, {} keys found ({durability})", chunks, statics.len());
    let mut next = Vec::new();
    for t in 0..THREADS {
        let stored =
            db.get(format!("t{t}-next").as_bytes()).unwrap().map_or(0, |v| u64::from_le_bytes(v.try_into().unwrap()));
        // A thread acknowledged nothing this round: it is where it was.
        let acked_next = acked[t as usize].map_or(previous[t as usize], |s| s + 1);
        // At most the one in-flight batch beyond the last acknowledgement.
        assert!(
            stored == acked_next || stored == acked_next + 1,
            "thread {t}: acknowledged up to batch {acked_next}, database holds {stored} ({durability})"
        );
        assert_eq!(state_of(&db, t), model(t, stored), "thread {t} state after batch {stored} ({durability})");
        next.push(stored);
    }
    next
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let iterations: u64 = std::env::var("SCALEDKV_CRASH_ITERATIONS").ok().and_then(|s| s.parse().ok()).unwrap_or(30);
    let exe = std::env::current_exe().unwrap();
    // (mode, medium): tmpfs is where GC's freed segments are recycled.
    let (disk, tmpfs) = (env!("CARGO_TARGET_TMPDIR"), "/dev/shm");
    let setups =
        [(Durability::Sync, disk), (Durability::Pmem, tmpfs), (Durability::Buffered, disk), (Durability::Sync, tmpfs)];
    let modes: Vec<Durability> = setups.iter().map(|(mode, _)| *mode).collect();
    let mut rng = rand::rngs::StdRng::seed_from_u64(
        std::env::var("SCALEDKV_CRASH_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(7),
    );
    let dirs: Vec<_> = setups.iter().map(|(_, medium)| tempfile::tempdir_in(medium).unwrap()).collect();
    let (mut total_acks, mut total_recycled, mut reopened_deltas) = (0u64, 0u64, 0u64);
    let mut previous = vec![vec![0u64; THREADS as usize]; modes.len()];
    for iteration in 0..iterations {
        let which = iteration as usize % modes.len();
        let (durability, dir) = (modes[which], dirs[which].path());
        let mut child = Command::new(&exe)
            .args(["--exact", "crash_child_writer", "--nocapture", "--test-threads=1"])
            .env(CHILD_ENV, dir)
            .env(MODE_ENV, durability.name())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let kill_after = Duration::from_millis(rng.gen_range(20..400));
        let reader = std::thread::spawn(move || {
            let mut acked = vec![None; THREADS as usize];
            let (mut count, mut recycled) = (0u64, 0u64);
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // libtest's "test crash_child_writer ... " has no newline
                // before the test runs: the first line may end with an ack.
                let mut parts = line.split_whitespace().skip_while(|word| !matches!(*word, "ack" | "recycled"));
                match parts.next() {
                    Some("ack") => {
                        let t: usize = parts.next().unwrap().parse().unwrap();
                        acked[t] = Some(parts.next().unwrap().parse::<u64>().unwrap());
                        count += 1;
                    }
                    Some("recycled") => recycled = parts.next().unwrap().parse().unwrap(),
                    _ => {}
                }
            }
            (acked, count, recycled)
        });
        let started = Instant::now();
        while started.elapsed() < kill_after {
            if child.try_wait().unwrap().is_some() {
                panic!("child writer exited on its own (crash?) in iteration {iteration}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        // SAFETY: signalling our own child by its pid.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        child.wait().unwrap();
        let (acked, count, recycled) = reader.join().unwrap();
        total_acks += count;
        total_recycled += recycled;
        // The MANIFEST's delta count (bytes 28..32, docs/format.md): the
        // chain this reopen goes through.
        let manifest = std::fs::read(dir.join("MANIFEST")).unwrap_or_default();
        reopened_deltas += manifest.get(28..32).is_some_and(|count| count != [0; 4]) as u64;
        previous[which] = check(dir, durability, &acked, &previous[which]);
    }
    eprintln!(
        "crash test: {iterations} SIGKILLs, {total_acks} acknowledged batches checked, \
         {total_recycled} segments recycled while the writers ran, {reopened_deltas} reopens through delta checkpoints"
    );
    assert!(total_acks > 0, "the child never acknowledged a write: the test checked nothing");
    if iterations >= setups.len() as u64 * 2 {
        assert!(total_recycled > 0, "no kill landed while segments were being recycled");
        assert!(reopened_deltas > 0, "no reopen went through a delta checkpoint");
        let pmem = modes.iter().position(|mode| *mode == Durability::Pmem).unwrap();
        let ids = scaledkv::log::segment::list_segment_files(dirs[pmem].path()).unwrap();
        assert!(ids.iter().any(|(id, _)| *id > 1 << 32), "the pmem database's ids never passed 2^32: {ids:?}");
    }
}

const TAIL_CHILD_ENV: &str = "SCALEDKV_TAIL_CHILD_DIR";
const TAIL_WRITES: u32 = 5000;

/// The child of `a_replayed_tail_is_checkpointed_without_new_writes`:
/// writes with no background thread (so no checkpoint), says so, and
/// waits to be killed.
#[test]
fn tail_child_writer() {
    let Ok(dir) = std::env::var(TAIL_CHILD_ENV) else { return };
    let db = Db::open(&dir, Options { background_work: false, ..Options::default() }).unwrap();
    for i in 0..TAIL_WRITES {
        db.put(&i.to_be_bytes(), &i.to_le_bytes()).unwrap();
    }
    println!("written");
    std::thread::sleep(Duration::from_secs(60));
}

/// A tail replayed at open counts toward the next checkpoint's bounds:
/// before, only writes after the open did, so each crash before the next
/// checkpoint left the following open more to replay.
#[test]
fn a_replayed_tail_is_checkpointed_without_new_writes() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "tail_child_writer", "--nocapture", "--test-threads=1"])
        .env(TAIL_CHILD_ENV, dir.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let written = BufReader::new(child.stdout.take().unwrap()).lines().any(|line| line.unwrap().ends_with("written"));
    child.kill().unwrap();
    child.wait().unwrap();
    assert!(written, "the child wrote its keys");
    let options =
        Options { checkpoint_interval_entries: 1000, checkpoint_interval_bytes: u64::MAX, ..Options::default() };
    let db = Db::open(dir.path(), options.clone()).unwrap();
    assert_eq!(db.recovery_report().replayed_frames, TAIL_WRITES as u64);
    let deadline = Instant::now() + Duration::from_secs(20);
    while db.stats().checkpoints == 0 {
        assert!(Instant::now() < deadline, "no checkpoint of a replayed tail of {TAIL_WRITES} entries");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(db);
    let db = Db::open(dir.path(), options).unwrap();
    assert_eq!(db.recovery_report().replayed_frames, 0);
    for i in (0..TAIL_WRITES).step_by(7) {
        assert_eq!(db.get(&i.to_be_bytes()).unwrap().unwrap(), i.to_le_bytes());
    }
}
