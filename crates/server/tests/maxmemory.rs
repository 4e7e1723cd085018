//! `maxmemory` and `maxmemory-policy`: the server as a cache. With an
//! evicting policy the data stays within the limit while clients write
//! several times more, keys read often stay, every key read back holds
//! its own bytes; with `noeviction` writes past the limit get Redis's OOM
//! error and deletes still work; the memcached port shares the limit.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;

use common::Server;
use redis::{Commands, Value};

const MIB: u64 = 1 << 20;

fn client(server: &Server) -> redis::Connection {
    redis::Client::open(server.url()).unwrap().get_connection().unwrap()
}

/// A field of an INFO section.
fn info(con: &mut redis::Connection, section: &str, field: &str) -> String {
    let text: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    let prefix = format!("{field}:");
    text.lines()
        .find_map(|line| line.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("INFO {section} has no {field}: {text}"))
        .to_string()
}

fn number(con: &mut redis::Connection, section: &str, field: &str) -> u64 {
    info(con, section, field).parse().unwrap()
}

/// 1,000 bytes that name `key`.
fn value(key: u64) -> Vec<u8> {
    let mut value = format!("value-of-{key}-").into_bytes();
    value.resize(1000, (key % 251) as u8);
    value
}

/// SETs keys `from..to` in pipelines of 100.
fn fill(con: &mut redis::Connection, from: u64, to: u64) {
    for start in (from..to).step_by(100) {
        let mut pipe = redis::pipe();
        for key in start..(start + 100).min(to) {
            pipe.set(format!("k{key}"), value(key)).ignore();
        }
        pipe.query::<()>(con).unwrap();
    }
}

/// SETs keys from `from` one at a time until one is refused, before
/// `most`; returns how many were written and the refusal.
fn set_until_refused(con: &mut redis::Connection, from: u64, most: u64) -> (u64, redis::RedisError) {
    for key in from..most {
        if let Err(error) = con.set::<_, _, ()>(format!("k{key}"), value(key)) {
            return (key - from, error);
        }
    }
    panic!("never refused");
}

fn tmpfs_dir() -> tempfile::TempDir {
    tempfile::tempdir_in("/dev/shm").unwrap()
}

#[test]
fn an_evicting_policy_keeps_the_data_within_maxmemory_and_what_is_read() {
    let dir = tmpfs_dir();
    let server = Server::start(dir.path(), &["--maxmemory", "32mb", "--maxmemory-policy", "allkeys-lru"]);
    let mut con = client(&server);
    let got: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("maxmemory*").query(&mut con).unwrap();
    let limit = (32 * MIB).to_string();
    // Redis's other three (kept, not used: eviction walks the log).
    let expected = ["maxmemory", &limit, "maxmemory-policy", "allkeys-lru", "maxmemory-clients", "0"];
    let expected = [&expected[..], &["maxmemory-eviction-tenacity", "10", "maxmemory-samples", "5"]].concat();
    assert_eq!(got, expected);
    // 150 MB of 1 KB values, about 5x the limit; keys 0..2000 (2 MB) are
    // read after every 5,000 writes.
    let hot = 0..2000u64;
    let mut most = 0;
    for round in 0..30 {
        fill(&mut con, round * 5000, (round + 1) * 5000);
        let mut pipe = redis::pipe();
        for key in hot.clone() {
            pipe.get(format!("k{key}"));
        }
        let _: Vec<Option<Vec<u8>>> = pipe.query(&mut con).unwrap();
        most = most.max(number(&mut con, "memory", "used_memory_log"));
    }
    let evicted = number(&mut con, "stats", "evicted_keys");
    assert!(evicted > 100_000, "evicted {evicted}");
    // Segments are a 32nd of the limit: at most the one being written
    // and the one being evicted over it.
    assert!(most <= 32 * MIB + 2 * MIB, "the log held {most} bytes");
    let (mut hot_kept, mut kept) = (0, 0);
    for key in 0..150_000u64 {
        let got: Option<Vec<u8>> = con.get(format!("k{key}")).unwrap();
        if let Some(got) = got {
            assert_eq!(got, value(key), "k{key}");
            kept += 1;
            hot_kept += hot.contains(&key) as u64;
        }
    }
    assert!(hot_kept >= 1900, "{hot_kept} of the 2,000 keys read survived ({kept} keys in all)");
    let keys: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(keys, kept);
    // Each evicted key read back was a miss (the hot reads add more).
    assert!(number(&mut con, "stats", "keyspace_misses") >= 150_000 - kept);
}

#[test]
fn noeviction_refuses_writes_past_maxmemory_with_redis_error() {
    let dir = tmpfs_dir();
    let server = Server::start(dir.path(), &["--maxmemory", "16mb"]);
    let mut con = client(&server);
    assert_eq!(info(&mut con, "memory", "maxmemory_policy"), "noeviction");
    let library = "#!lua name=m\n\
        redis.register_function('plain', function(keys) return redis.call('set', keys[1], 'v') end)\n\
        redis.register_function{function_name='oom_ok', callback=function(keys) return redis.call('set', keys[1], 'v') end, \
        flags={'allow-oom'}}\n\
        redis.register_function{function_name='reads', callback=function(keys) return redis.call('get', keys[1]) end, \
        flags={'no-writes'}}";
    let loaded: String = redis::cmd("FUNCTION").arg("LOAD").arg(library).query(&mut con).unwrap();
    assert_eq!(loaded, "m");
    let (written, error) = set_until_refused(&mut con, 0, 40_000);
    assert_eq!(error.code(), Some("OOM"), "{error}");
    assert_eq!(error.detail(), Some("command not allowed when used memory > 'maxmemory'."), "{error}");
    assert!(written > 14_000, "refused after {written} writes of 1 KB into 16 MiB");
    // Functions and scripts with a shebang are refused before they run
    // unless they may not write, or carry `allow-oom`, whose writes then
    // go through; a script without a shebang runs (Redis 7's rules).
    let fcall =
        |con: &mut redis::Connection, name: &str| redis::cmd("FCALL").arg(name).arg(1).arg("f").query::<Value>(con);
    let refused = fcall(&mut con, "plain").unwrap_err();
    assert_eq!(refused.code(), Some("OOM"), "{refused}");
    let detail = "allow-oom flag is not set on the script, can not run it when used memory > 'maxmemory'";
    assert_eq!(refused.detail(), Some(detail));
    assert_eq!(fcall(&mut con, "oom_ok").unwrap(), Value::Okay);
    assert_eq!(fcall(&mut con, "reads").unwrap(), Value::BulkString(b"v".to_vec()));
    let shebang = redis::cmd("EVAL").arg("#!lua\nreturn redis.call('set', 'g', 'v')").arg(0).query::<Value>(&mut con);
    assert_eq!(shebang.unwrap_err().detail(), Some(detail));
    assert_eq!(redis::cmd("EVAL").arg("return 1").arg(0).query::<i64>(&mut con).unwrap(), 1);
    let load = redis::cmd("FUNCTION").arg("LOAD").arg("REPLACE").arg(library).query::<Value>(&mut con).unwrap_err();
    assert_eq!(load.code(), Some("OOM"), "{load}");
    // Reads and deletes still work; a transaction with a refused write is
    // discarded, as in Redis.
    let got: Vec<u8> = con.get("k1").unwrap();
    assert_eq!(got, value(1));
    let deleted: u64 = con.del("k1").unwrap();
    assert_eq!(deleted, 1);
    let replies: Value = redis::cmd("MULTI").query(&mut con).unwrap();
    assert_eq!(replies, Value::Okay);
    assert!(redis::cmd("SET").arg("x").arg("y").query::<Value>(&mut con).is_err());
    let exec = redis::cmd("EXEC").query::<Value>(&mut con).unwrap_err();
    assert_eq!(exec.code(), Some("EXECABORT"), "{exec}");
    assert_eq!(number(&mut con, "stats", "evicted_keys"), 0);
    // An evicting policy set at runtime makes room, and writes go on.
    redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("allkeys-random").query::<()>(&mut con).unwrap();
    fill(&mut con, written, written + 5000);
    assert!(number(&mut con, "stats", "evicted_keys") > 0);
    assert!(number(&mut con, "memory", "used_memory_log") <= 18 * MIB);
}

#[test]
fn volatile_policies_evict_only_keys_with_an_expiry() {
    let dir = tmpfs_dir();
    let server = Server::start(dir.path(), &["--maxmemory", "16mb", "--maxmemory-policy", "volatile-lru"]);
    let mut con = client(&server);
    // 6 MB without an expiry, then 30 MB with one.
    fill(&mut con, 0, 6000);
    for start in (6000..36_000u64).step_by(100) {
        let mut pipe = redis::pipe();
        for key in start..start + 100 {
            pipe.set_ex(format!("k{key}"), value(key), 3600).ignore();
        }
        pipe.query::<()>(&mut con).unwrap();
    }
    assert!(number(&mut con, "stats", "evicted_keys") > 10_000);
    for key in 0..6000u64 {
        let got: Vec<u8> = con.get(format!("k{key}")).unwrap();
        assert_eq!(got, value(key), "k{key} has no expiry and stays");
    }
    // Keys without an expiry cannot go: past a quarter over, writes fail.
    let (_, error) = set_until_refused(&mut con, 100_000, 140_000);
    assert_eq!(error.code(), Some("OOM"), "{error}");
    let bad = redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("lru").query::<()>(&mut con).unwrap_err();
    assert!(bad.to_string().contains("argument(s) must be one of the following"), "{bad}");
    let small = redis::cmd("CONFIG").arg("SET").arg("maxmemory").arg("1mb").query::<()>(&mut con).unwrap_err();
    assert!(small.to_string().contains("start it with --maxmemory"), "{small}");
}

#[test]
fn the_memcached_port_shares_the_limit_and_reports_evictions() {
    let dir = tmpfs_dir();
    let (server, port) =
        common::start_with_memcached(dir.path(), &["--maxmemory", "16mb", "--maxmemory-policy", "allkeys-lru"]);
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut writer = stream;
    let mut line = String::new();
    let value = vec![b'v'; 1000];
    for key in 0..40_000 {
        let mut request = format!("set m{key} 7 0 {}\r\n", value.len()).into_bytes();
        request.extend_from_slice(&value);
        request.extend_from_slice(b"\r\n");
        writer.write_all(&request).unwrap();
        line.clear();
        reader.read_line(&mut line).unwrap();
        assert_eq!(line, "STORED\r\n", "m{key}");
    }
    let mut stats = std::collections::HashMap::new();
    writer.write_all(b"stats\r\n").unwrap();
    loop {
        line.clear();
        reader.read_line(&mut line).unwrap();
        if line == "END\r\n" {
            break;
        }
        let mut words = line.split_whitespace().skip(1);
        stats.insert(words.next().unwrap().to_string(), words.next().unwrap_or_default().to_string());
    }
    assert_eq!(stats["limit_maxbytes"], (16 * MIB).to_string());
    assert!(stats["evictions"].parse::<u64>().unwrap() > 20_000, "{stats:?}");
    // cache_memlimit (megabytes) is maxmemory.
    writer.write_all(b"cache_memlimit 64\r\n").unwrap();
    line.clear();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "OK\r\n");
    let mut con = client(&server);
    assert_eq!(number(&mut con, "memory", "maxmemory"), 64 * MIB);
}

/// The fast tier on tmpfs, the SSD tier on the repository's disk.
fn ssd_dir() -> tempfile::TempDir {
    tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap()
}

/// Reads keys `0..count` back in pipelines of 1,000: each holds its value.
fn check_all(con: &mut redis::Connection, count: u64) {
    for start in (0..count).step_by(1000) {
        let mut pipe = redis::pipe();
        for key in start..(start + 1000).min(count) {
            pipe.get(format!("k{key}"));
        }
        let got: Vec<Option<Vec<u8>>> = pipe.query(con).unwrap();
        for (key, got) in (start..).zip(got) {
            assert_eq!(got, Some(value(key)), "k{key}");
        }
    }
}

/// With `--ssd-dir`, `maxmemory` bounds the fast tier and the rest moves
/// to the SSD tier: 40 MB into 8 MiB, nothing evicted or refused, every
/// key read back, also after a SIGKILL and a restart.
#[test]
fn an_ssd_tier_holds_what_maxmemory_does_not_and_loses_nothing() {
    let (dir, ssd) = (tmpfs_dir(), ssd_dir());
    let args = ["--maxmemory", "8mb", "--ssd-dir", ssd.path().to_str().unwrap()];
    let mut server = Server::start(dir.path(), &args);
    let mut con = client(&server);
    let mut most = 0;
    for round in 0..8 {
        fill(&mut con, round * 5000, (round + 1) * 5000);
        most = most.max(number(&mut con, "memory", "used_memory_log"));
    }
    assert!(most <= 8 * MIB + 2 * MIB, "the fast tier held {most} bytes");
    assert!(number(&mut con, "memory", "used_ssd_log") > 25 * MIB);
    assert_eq!(info(&mut con, "memory", "ssd_dir"), ssd.path().canonicalize().unwrap().to_str().unwrap());
    assert_eq!(number(&mut con, "stats", "evicted_keys"), 0);
    assert!(number(&mut con, "stats", "ssd_demoted_segments") >= 25);
    check_all(&mut con, 40_000);
    assert!(number(&mut con, "stats", "ssd_reads") > 25_000);
    let keys: u64 = redis::cmd("DBSIZE").query(&mut con).unwrap();
    assert_eq!(keys, 40_000);
    drop(con);
    server.kill();
    let server = Server::start(dir.path(), &args);
    check_all(&mut client(&server), 40_000);
}

/// `--ssd-size` bounds the SSD tier: `noeviction` refuses writes past it
/// with Redis's OOM error; an evicting policy, set at runtime, evicts the
/// tier's oldest keys instead. The memcached port reports the tier as
/// memcached's extstore does.
#[test]
fn ssd_size_bounds_the_tier_by_refusal_or_eviction() {
    let (dir, ssd) = (tmpfs_dir(), ssd_dir());
    let ssd_path = ssd.path().to_str().unwrap();
    let args = ["--maxmemory", "8mb", "--ssd-dir", ssd_path, "--ssd-size", "16mb", "--memcached-port", "0"];
    let server = Server::start(dir.path(), &args);
    let mut con = client(&server);
    let (written, error) = set_until_refused(&mut con, 0, 60_000);
    assert_eq!(error.code(), Some("OOM"), "{error}");
    // 24 MiB of 1 KB values fit both tiers, less what is in flight.
    assert!(written > 20_000, "refused after {written} writes");
    // What the fast tier holds past 95% of maxmemory moves on: once it has,
    // the SSD tier is within a segment (1 MiB here) of its size.
    for _ in 0..50 {
        if number(&mut con, "memory", "used_memory_log") <= 8 * MIB * 95 / 100 {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    let held = number(&mut con, "memory", "used_ssd_log");
    assert!(
        held <= 17 * MIB,
        "the SSD tier held {held} bytes, the fast tier {}",
        number(&mut con, "memory", "used_memory_log")
    );
    redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("allkeys-lru").query::<()>(&mut con).unwrap();
    let mut most = 0;
    for round in 0..6 {
        fill(&mut con, 100_000 + round * 5000, 100_000 + (round + 1) * 5000);
        most = most.max(number(&mut con, "memory", "used_ssd_log"));
    }
    assert!(most <= 16 * MIB + 2 * MIB, "the SSD tier held {most} bytes");
    assert!(number(&mut con, "stats", "evicted_keys") > 10_000);
    for key in 100_000..130_000u64 {
        let got: Option<Vec<u8>> = con.get(format!("k{key}")).unwrap();
        assert!(got.is_none_or(|got| got == value(key)), "k{key}");
    }
    let port = info(&mut con, "server", "memcached_port");
    let mut memcached = TcpStream::connect(("127.0.0.1", port.parse::<u16>().unwrap())).unwrap();
    memcached.write_all(b"stats\r\n").unwrap();
    let mut stats = std::collections::HashMap::new();
    for line in BufReader::new(memcached).lines().map(Result::unwrap) {
        if line == "END" {
            break;
        }
        let mut parts = line.split_whitespace().skip(1);
        stats.insert(parts.next().unwrap().to_string(), parts.next().unwrap().to_string());
    }
    assert_eq!(stats["extstore_limit_maxbytes"], (16 * MIB).to_string());
    assert!(stats["extstore_bytes_used"].parse::<u64>().unwrap() > 8 * MIB, "{stats:?}");
    assert!(stats["extstore_bytes_written"].parse::<u64>().unwrap() > 16 * MIB, "{stats:?}");
}

/// Evicted keys are announced as Redis announces them: an `evicted`
/// keyspace notification each, and an invalidation to a client that
/// cached them (CLIENT TRACKING). A caching client is never left holding
/// a key eviction took.
#[test]
fn evictions_are_announced_and_invalidate_caches() {
    use common::{encode, read_reply, request};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--maxmemory", "16mb", "--maxmemory-policy", "allkeys-lru"]);
    let mut con = client(&server);
    let _: () = redis::cmd("CONFIG").arg("SET").arg("notify-keyspace-events").arg("Ee").query(&mut con).unwrap();
    let mut listener = server.connect();
    request(&mut listener, &encode(&[b"SUBSCRIBE", b"__keyevent@0__:evicted"]));
    let mut cache = server.connect();
    request(&mut cache, &encode(&[b"HELLO", b"3"]));
    assert_eq!(request(&mut cache, &encode(&[b"CLIENT", b"TRACKING", b"ON"])), b"+OK\r\n");
    fill(&mut con, 0, 200);
    // The caching client reads (and so tracks) the first 200 keys.
    let mut invalidated = std::collections::HashSet::new();
    let take = |reply: Vec<u8>, invalidated: &mut std::collections::HashSet<Vec<u8>>| -> Option<Vec<u8>> {
        let Some(keys) = reply.strip_prefix(b">2\r\n$10\r\ninvalidate\r\n") else { return Some(reply) };
        let text = String::from_utf8_lossy(keys).into_owned();
        invalidated.extend(text.split("\r\n").filter(|part| part.starts_with('k')).map(|key| key.as_bytes().to_vec()));
        None
    };
    for key in 0..200 {
        cache.write_all(&encode(&[b"GET", format!("k{key}").as_bytes()])).unwrap();
        while take(read_reply(&mut cache), &mut invalidated).is_none() {}
    }
    // Five times the limit more: the first keys go (a read once earns them
    // one more round).
    fill(&mut con, 200, 80_200);
    cache.write_all(&encode(&[b"PING"])).unwrap();
    while take(read_reply(&mut cache), &mut invalidated) != Some(b"+PONG\r\n".to_vec()) {}
    let evicted = number(&mut con, "stats", "evicted_keys");
    assert!(evicted > 50_000, "{evicted}");
    let mut gone = 0;
    for key in 0..200 {
        let name = format!("k{key}");
        let value: Option<Vec<u8>> = con.get(&name).unwrap();
        if value.is_none() {
            gone += 1;
            assert!(invalidated.contains(name.as_bytes()), "{name} was evicted, and the cache was not told");
        }
    }
    assert!(gone > 100, "only {gone} of the tracked keys were evicted");
    // The listener heard of evictions, each an evicted key.
    listener.set_read_timeout(Some(std::time::Duration::from_secs(5))).unwrap();
    let mut heard = 0;
    while heard < 1000 {
        let message = read_reply(&mut listener);
        let text = String::from_utf8_lossy(&message).into_owned();
        assert!(text.contains("__keyevent@0__:evicted"), "{text}");
        let key = text.rsplit("\r\n").nth(1).unwrap().to_string();
        let value: Option<Vec<u8>> = con.get(&key).unwrap();
        assert_eq!(value, None, "{key} was announced as evicted");
        heard += 1;
    }
}

/// A watched key that eviction takes makes the transaction fail, as in
/// Redis (and one that was not evicted does not).
#[test]
fn an_evicted_watched_key_fails_the_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &["--maxmemory", "16mb", "--maxmemory-policy", "allkeys-lru"]);
    let mut con = client(&server);
    fill(&mut con, 0, 1);
    let mut watcher = client(&server);
    let _: () = redis::cmd("WATCH").arg("k0").query(&mut watcher).unwrap();
    // Five times the limit, k0 never read (a read would earn it a round),
    // and no key written under its lock stripe (whose writes change what
    // WATCH sees anyway).
    let stripe = scaledkv_server::keyspace::KeyLocks::stripe(b"k0");
    let others: Vec<u64> = (1..90_000)
        .filter(|k| scaledkv_server::keyspace::KeyLocks::stripe(format!("k{k}").as_bytes()) != stripe)
        .collect();
    for chunk in others.chunks(100).take(800) {
        let mut pipe = redis::pipe();
        for &key in chunk {
            pipe.set(format!("k{key}"), value(key)).ignore();
        }
        pipe.query::<()>(&mut con).unwrap();
    }
    // The announcement runs on its own task: let it.
    std::thread::sleep(std::time::Duration::from_millis(200));
    assert!(!con.exists::<_, bool>("k0").unwrap(), "k0 was evicted");
    let result: Option<Vec<String>> =
        redis::pipe().atomic().cmd("SET").arg("other").arg("x").query(&mut watcher).unwrap();
    assert_eq!(result, None, "EXEC after k0 was evicted");
    let _: () = redis::cmd("WATCH").arg("other").query(&mut watcher).unwrap();
    let result: Option<Vec<String>> =
        redis::pipe().atomic().cmd("SET").arg("other").arg("y").query(&mut watcher).unwrap();
    assert_eq!(result, Some(vec!["OK".to_string()]));
}

/// `allkeys-lfu`: keys read 100 times each survive a stream of five times
/// the limit in new keys each read once (CLOCK's one access bit gives them
/// one second chance: at most 10% survive in the engine's test of this
/// shape); OBJECT FREQ reads the counters and `redis-cli --hotkeys` finds
/// the hot keys with them; back to an LRU policy, OBJECT FREQ gives
/// Redis's error.
#[test]
fn allkeys_lfu_keeps_what_is_read_often_and_answers_object_freq() {
    let dir = tmpfs_dir();
    let server = Server::start(dir.path(), &["--maxmemory", "16mb", "--maxmemory-policy", "allkeys-lfu"]);
    let mut con = client(&server);
    let hot = 0..1000u64;
    fill(&mut con, hot.start, hot.end);
    for _ in 0..100 {
        let mut pipe = redis::pipe();
        for key in hot.clone() {
            pipe.get(format!("k{key}")).ignore();
        }
        pipe.query::<()>(&mut con).unwrap();
    }
    let freq = |con: &mut redis::Connection, key: u64| -> i64 {
        redis::cmd("OBJECT").arg("FREQ").arg(format!("k{key}")).query(con).unwrap()
    };
    // From 5, each step up is a coin of odds 1 in (counter - 5) * 10 + 1:
    // about 9 after 100 reads; 7 or less in 1.6% of runs (simulated; a
    // clean clone drew 7), 6 or less in 0.009%.
    let hot_freq = freq(&mut con, 7);
    assert!((7..=14).contains(&hot_freq), "100 reads at lfu-log-factor 10: {hot_freq}");
    let stream = 1000..81_000u64;
    for start in stream.clone().step_by(100) {
        let mut pipe = redis::pipe();
        for key in start..start + 100 {
            pipe.set(format!("k{key}"), value(key)).ignore().get(format!("k{key}")).ignore();
        }
        pipe.query::<()>(&mut con).unwrap();
    }
    assert!(number(&mut con, "stats", "evicted_keys") > 60_000);
    let mut hot_kept = 0;
    for key in 0..stream.end {
        let got: Option<Vec<u8>> = con.get(format!("k{key}")).unwrap();
        if let Some(got) = got {
            assert_eq!(got, value(key), "k{key}");
            hot_kept += hot.contains(&key) as u64;
        }
    }
    // All 1,000 in 5 runs; a threshold drawn from what eviction had just
    // seen (the oldest segment: hot keys copied forward together) kept 447.
    assert!(hot_kept >= 950, "{hot_kept} of the 1,000 keys read 100 times survived");
    assert!(freq(&mut con, 80_999) >= 6, "read once, then once more above");
    if std::process::Command::new("redis-cli").arg("--version").output().is_ok() {
        let out = std::process::Command::new("redis-cli")
            .args(["-p", &server.port.to_string(), "--hotkeys"])
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        // Its summary: the 16 keys with the highest counters, hot ones
        // but for a key whose four cells all collided with hot keys'.
        let found: Vec<u64> = text
            .lines()
            .filter_map(|line| line.split("keyname: \"k").nth(1)?.trim_end_matches('"').parse().ok())
            .collect();
        assert!(out.status.success() && found.len() == 16, "{text}");
        assert!(found.iter().filter(|key| hot.contains(key)).count() >= 14, "{found:?}\n{text}");
    } else {
        eprintln!("NOTICE: redis-cli not found; skipping its --hotkeys check (.ci/run installs it)");
    }
    // About 16,000 keys in the cache: the sketch's least size, four rows
    // of 64k one-byte cells.
    assert_eq!(number(&mut con, "memory", "used_memory_lfu"), 4 << 16);
    let _: () = redis::cmd("CONFIG").arg("SET").arg("maxmemory-policy").arg("allkeys-lru").query(&mut con).unwrap();
    assert_eq!(number(&mut con, "memory", "used_memory_lfu"), 0);
    let error = redis::cmd("OBJECT").arg("FREQ").arg("k7").query::<i64>(&mut con).unwrap_err();
    assert!(error.to_string().contains("An LFU maxmemory policy is not selected"), "{error}");
}
