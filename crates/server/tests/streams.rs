//! Streams through the server: blocked XREAD and XREADGROUP woken by
//! XADD, IDs from the clock, idle times, big streams paged and trimmed,
//! and producers and consumer groups under SIGKILL (every acknowledged
//! XADD, delivery and XACK survives; the group's books balance). Redis's
//! own replies are compared in `differential.rs`.

mod common;

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::Server;
use rand::{Rng, SeedableRng};
use redis::Value;

fn client(port: u16) -> redis::RedisResult<redis::Connection> {
    let con = redis::Client::open(format!("redis://127.0.0.1:{port}/"))?.get_connection()?;
    con.set_read_timeout(Some(Duration::from_secs(20)))?;
    Ok(con)
}

fn cmd(con: &mut redis::Connection, args: &[&str]) -> Value {
    let mut command = redis::cmd(args[0]);
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command.query(con).unwrap_or_else(|e| panic!("{args:?}: {e}"))
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
        Value::SimpleString(s) => s.clone(),
        Value::Int(n) => n.to_string(),
        other => panic!("not a string: {other:?}"),
    }
}

fn items(value: &Value) -> &[Value] {
    match value {
        Value::Array(items) => items,
        other => panic!("not an array: {other:?}"),
    }
}

fn int(value: &Value) -> i64 {
    match value {
        Value::Int(n) => *n,
        other => text(other).parse().unwrap(),
    }
}

/// A stream ID as (ms, seq), for ordering.
fn id(text: &str) -> (u64, u64) {
    let (ms, seq) = text.split_once('-').expect("ms-seq");
    (ms.parse().unwrap(), seq.parse().unwrap())
}

/// Entries of an XRANGE-shaped reply: (id, fields and values).
fn entries(value: &Value) -> Vec<(String, Vec<String>)> {
    items(value).iter().map(|e| (text(&items(e)[0]), items(&items(e)[1]).iter().map(text).collect())).collect()
}

/// The entries an XREAD or XREADGROUP reply (RESP2) gives for its one stream.
fn read_entries(value: &Value) -> Vec<(String, Vec<String>)> {
    match value {
        Value::Nil => Vec::new(),
        _ => entries(&items(&items(value)[0])[1]),
    }
}

/// A map-shaped reply (XINFO), by field name.
fn fields(value: &Value) -> HashMap<String, Value> {
    items(value).chunks(2).map(|pair| (text(&pair[0]), pair[1].clone())).collect()
}

#[test]
fn xread_block_waits_for_the_next_xadd_and_times_out() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]);
    let mut writer = client(server.port).unwrap();
    cmd(&mut writer, &["XADD", "s", "1-0", "old", "x"]);
    // `$` stands for the last ID when the reader blocked: it gets the
    // entry added after, not the one before, however long it waits.
    let port = server.port;
    let reader = std::thread::spawn(move || {
        let mut con = client(port).unwrap();
        let started = Instant::now();
        let reply = cmd(&mut con, &["XREAD", "BLOCK", "0", "STREAMS", "s", "$"]);
        (read_entries(&reply), started.elapsed())
    });
    std::thread::sleep(Duration::from_millis(300));
    server.wait_for_blocked_clients(1);
    cmd(&mut writer, &["XADD", "other", "1-0", "f", "v"]);
    cmd(&mut writer, &["XADD", "s", "2-0", "new", "y"]);
    let (got, waited) = reader.join().unwrap();
    assert_eq!(got, vec![("2-0".to_string(), vec!["new".to_string(), "y".to_string()])]);
    assert!(waited >= Duration::from_millis(250), "it waited for the XADD: {waited:?}");
    // Several streams: the first to get an entry answers.
    let reader = std::thread::spawn(move || {
        let mut con = client(port).unwrap();
        cmd(&mut con, &["XREAD", "BLOCK", "5000", "STREAMS", "a", "b", "$", "$"])
    });
    server.wait_for_blocked_clients(1);
    cmd(&mut writer, &["XADD", "b", "7-7", "k", "v"]);
    let reply = reader.join().unwrap();
    assert_eq!(text(&items(&items(&reply)[0])[0]), "b");
    assert_eq!(read_entries(&reply)[0].0, "7-7");
    // A timeout is a null reply, after the time asked for.
    let started = Instant::now();
    let reply = cmd(&mut writer, &["XREAD", "BLOCK", "150", "STREAMS", "s", "$"]);
    assert_eq!(reply, Value::Nil);
    assert!(started.elapsed() >= Duration::from_millis(140));
    // Inside a script it never waits.
    let reply =
        cmd(&mut writer, &["EVAL", "return redis.call('xread', 'block', 0, 'streams', KEYS[1], '$')", "1", "s"]);
    assert_eq!(reply, Value::Nil);
}

/// A RESTORE of a stream wakes a reader blocked on its key, as an XADD
/// does (Redis signals the key ready).
#[test]
fn a_restored_stream_wakes_a_blocked_reader() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]);
    let mut writer = client(server.port).unwrap();
    cmd(&mut writer, &["XADD", "source", "1-1", "a", "b"]);
    let payload: Vec<u8> = redis::cmd("DUMP").arg("source").query(&mut writer).unwrap();
    let port = server.port;
    let reader = std::thread::spawn(move || {
        let mut con = client(port).unwrap();
        cmd(&mut con, &["XREAD", "BLOCK", "10000", "STREAMS", "copy", "$"])
    });
    server.wait_for_blocked_clients(1);
    let restored: String = redis::cmd("RESTORE").arg("copy").arg(0).arg(payload).query(&mut writer).unwrap();
    assert_eq!(restored, "OK");
    let reply = reader.join().unwrap();
    assert_eq!(read_entries(&reply), vec![("1-1".to_string(), vec!["a".to_string(), "b".to_string()])]);
}

#[test]
fn blocked_consumers_of_a_group_get_each_entry_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]);
    let mut writer = client(server.port).unwrap();
    cmd(&mut writer, &["XGROUP", "CREATE", "jobs", "workers", "$", "MKSTREAM"]);
    let port = server.port;
    let consumers: Vec<_> = (0..3)
        .map(|i| {
            std::thread::spawn(move || {
                let mut con = client(port).unwrap();
                let name = format!("c{i}");
                let reply = cmd(
                    &mut con,
                    &["XREADGROUP", "GROUP", "workers", &name, "COUNT", "1", "BLOCK", "10000", "STREAMS", "jobs", ">"],
                );
                (name, read_entries(&reply))
            })
        })
        .collect();
    server.wait_for_blocked_clients(3);
    for n in 1..=3 {
        cmd(&mut writer, &["XADD", "jobs", &format!("{n}-0"), "job", &n.to_string()]);
    }
    let mut delivered = BTreeMap::new();
    for consumer in consumers {
        let (name, got) = consumer.join().unwrap();
        assert_eq!(got.len(), 1, "{name} got one job: {got:?}");
        assert!(delivered.insert(got[0].0.clone(), name).is_none(), "a job went to two consumers");
    }
    assert_eq!(delivered.keys().cloned().collect::<Vec<_>>(), ["1-0", "2-0", "3-0"]);
    // Each is pending with the consumer that got it.
    let pending = cmd(&mut writer, &["XPENDING", "jobs", "workers", "-", "+", "10"]);
    for entry in items(&pending) {
        let entry = items(entry);
        assert_eq!(delivered[&text(&entry[0])], text(&entry[1]));
        assert_eq!(int(&entry[3]), 1, "delivered once");
    }
    // Destroying the group ends a consumer's wait with an error.
    let waiting = std::thread::spawn(move || {
        let mut con = client(port).unwrap();
        redis::cmd("XREADGROUP")
            .arg(&["GROUP", "workers", "late", "BLOCK", "0", "STREAMS", "jobs", ">"])
            .query::<Value>(&mut con)
    });
    server.wait_for_blocked_clients(1);
    assert_eq!(cmd(&mut writer, &["XGROUP", "DESTROY", "jobs", "workers"]), Value::Int(1));
    let error = waiting.join().unwrap().expect_err("NOGROUP");
    assert!(error.to_string().contains("NOGROUP"), "{error}");
}

#[test]
fn ids_from_the_clock_grow_and_idle_times_count() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]);
    let mut con = client(server.port).unwrap();
    let now_ms = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis() as u64;
    let mut pipe = redis::pipe();
    for i in 0..1000 {
        pipe.cmd("XADD").arg("s").arg("*").arg("i").arg(i);
    }
    let ids: Vec<String> = pipe.query(&mut con).unwrap();
    let parsed: Vec<(u64, u64)> = ids.iter().map(|i| id(i)).collect();
    assert!(parsed.windows(2).all(|w| w[0] < w[1]), "IDs grow");
    assert!(parsed[0].0 >= now_ms && parsed[999].0 < now_ms + 60_000, "from the clock: {:?}", parsed[0]);
    // An explicit ms with a picked sequence follows the last entry.
    let last = parsed[999];
    let next = text(&cmd(&mut con, &["XADD", "s", &format!("{}-*", last.0), "x", "y"]));
    assert_eq!(id(&next), (last.0, last.1 + 1));
    assert_eq!(cmd(&mut con, &["XLEN", "s"]), Value::Int(1001));

    cmd(&mut con, &["XGROUP", "CREATE", "s", "g", "0"]);
    cmd(&mut con, &["XREADGROUP", "GROUP", "g", "alice", "COUNT", "2", "STREAMS", "s", ">"]);
    std::thread::sleep(Duration::from_millis(120));
    let pending = cmd(&mut con, &["XPENDING", "s", "g", "IDLE", "100", "-", "+", "10"]);
    assert_eq!(items(&pending).len(), 2);
    for entry in items(&pending) {
        assert!(int(&items(entry)[2]) >= 100, "idle since delivery: {entry:?}");
    }
    let consumers = cmd(&mut con, &["XINFO", "CONSUMERS", "s", "g"]);
    let alice = fields(&items(&consumers)[0]);
    assert!(int(&alice["idle"]) >= 100 && int(&alice["pending"]) == 2, "{alice:?}");
    // XCLAIM with IDLE sets the delivery time back; a min-idle above it
    // leaves the entry where it is.
    let first = &ids[0];
    let claimed = cmd(&mut con, &["XCLAIM", "s", "g", "bob", "50", first, "IDLE", "5000", "JUSTID"]);
    assert_eq!(claimed, Value::Array(vec![Value::BulkString(first.clone().into_bytes())]));
    let pending = cmd(&mut con, &["XPENDING", "s", "g", first, first, "1"]);
    let entry = &items(&pending)[0];
    assert_eq!(text(&items(entry)[1]), "bob");
    assert!(int(&items(entry)[2]) >= 5000, "{entry:?}");
    assert_eq!(int(&items(entry)[3]), 1, "JUSTID leaves the count");
    let unclaimed = cmd(&mut con, &["XCLAIM", "s", "g", "carol", "60000", first, "JUSTID"]);
    assert_eq!(unclaimed, Value::Array(vec![]));
    // XAUTOCLAIM takes what has been idle long enough.
    let auto = cmd(&mut con, &["XAUTOCLAIM", "s", "g", "carol", "1000", "0", "JUSTID"]);
    assert_eq!(items(&items(&auto)[1]), &[Value::BulkString(first.clone().into_bytes())]);
}

/// XINFO STREAM FULL lists each consumer's own pending entries (at most
/// COUNT of them) with the group's.
#[test]
fn xinfo_full_lists_each_consumers_pending_entries() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]);
    let mut con = client(server.port).unwrap();
    for n in 1..=5 {
        cmd(&mut con, &["XADD", "s", &format!("{n}-0"), "f", "v"]);
    }
    cmd(&mut con, &["XGROUP", "CREATE", "s", "g", "0"]);
    cmd(&mut con, &["XREADGROUP", "GROUP", "g", "alice", "COUNT", "3", "STREAMS", "s", ">"]);
    cmd(&mut con, &["XREADGROUP", "GROUP", "g", "bob", "COUNT", "2", "STREAMS", "s", ">"]);
    cmd(&mut con, &["XGROUP", "CREATECONSUMER", "s", "g", "carol"]);
    let info = fields(&cmd(&mut con, &["XINFO", "STREAM", "s", "FULL", "COUNT", "2"]));
    let group = fields(&items(&info["groups"])[0]);
    assert_eq!(int(&group["pel-count"]), 5);
    let listed: Vec<String> = items(&group["pending"]).iter().map(|p| text(&items(p)[0])).collect();
    assert_eq!(listed, ["1-0", "2-0"], "the group's first COUNT");
    let consumers: Vec<HashMap<String, Value>> = items(&group["consumers"]).iter().map(fields).collect();
    let own = |c: &HashMap<String, Value>| -> Vec<String> {
        items(&c["pending"]).iter().map(|p| text(&items(p)[0])).collect()
    };
    assert_eq!((text(&consumers[0]["name"]), int(&consumers[0]["pel-count"])), ("alice".into(), 3));
    assert_eq!(own(&consumers[0]), ["1-0", "2-0"]);
    assert_eq!(
        (text(&consumers[1]["name"]), own(&consumers[1])),
        ("bob".into(), vec!["4-0".to_string(), "5-0".into()])
    );
    assert_eq!((text(&consumers[2]["name"]), own(&consumers[2]).len()), ("carol".into(), 0));
    // COUNT 0: everything.
    let info = fields(&cmd(&mut con, &["XINFO", "STREAM", "s", "FULL", "COUNT", "0"]));
    let group = fields(&items(&info["groups"])[0]);
    assert_eq!(items(&group["pending"]).len(), 5);
    assert_eq!(own(&items(&group["consumers"]).iter().map(fields).next().unwrap()), ["1-0", "2-0", "3-0"]);
}

#[test]
fn big_streams_page_trim_and_survive_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("db"), &[]);
    let mut con = client(server.port).unwrap();
    const N: usize = 5000;
    let value = |i: usize| format!("{i:0>100}");
    let mut pipe = redis::pipe();
    for i in 1..=N {
        pipe.cmd("XADD").arg("big").arg(format!("{i}-1")).arg("n").arg(value(i)).ignore();
    }
    pipe.query::<()>(&mut con).unwrap();
    cmd(&mut con, &["SET", "plain", "x"]);
    assert_eq!(cmd(&mut con, &["DBSIZE"]), Value::Int(2), "a stream's entries are not keys");
    // Paging forward with an exclusive start sees every entry once, in order.
    let mut seen = Vec::new();
    let mut start = "-".to_string();
    loop {
        let page = entries(&cmd(&mut con, &["XRANGE", "big", &start, "+", "COUNT", "333"]));
        let Some((last, _)) = page.last() else { break };
        start = format!("({last}");
        seen.extend(page);
    }
    assert_eq!(seen.len(), N);
    for (i, (entry_id, fields)) in seen.iter().enumerate() {
        assert_eq!(entry_id, &format!("{}-1", i + 1));
        assert_eq!(fields, &["n".to_string(), value(i + 1)]);
    }
    let tail = entries(&cmd(&mut con, &["XREVRANGE", "big", "+", "-", "COUNT", "3"]));
    assert_eq!(tail.iter().map(|e| e.0.as_str()).collect::<Vec<_>>(), ["5000-1", "4999-1", "4998-1"]);
    assert_eq!(cmd(&mut con, &["XTRIM", "big", "MAXLEN", "1000"]), Value::Int(4000));
    assert_eq!(cmd(&mut con, &["XTRIM", "big", "MINID", "4500"]), Value::Int(499));
    let info = fields(&cmd(&mut con, &["XINFO", "STREAM", "big"]));
    assert_eq!(int(&info["length"]), 501);
    assert_eq!(text(&info["recorded-first-entry-id"]), "4500-1");
    assert_eq!(int(&info["entries-added"]), N as i64);
    // After a clean restart everything reads back.
    assert!(server.terminate());
    let server = Server::start(&dir.path().join("db"), &[]);
    let mut con = client(server.port).unwrap();
    let all = entries(&cmd(&mut con, &["XRANGE", "big", "-", "+"]));
    assert_eq!(all.len(), 501);
    assert_eq!(all[0], ("4500-1".to_string(), vec!["n".to_string(), value(4500)]));
    assert_eq!(cmd(&mut con, &["XLEN", "big"]), Value::Int(501));
    assert_eq!(cmd(&mut con, &["DEL", "big"]), Value::Int(1));
    assert_eq!(cmd(&mut con, &["XLEN", "big"]), Value::Int(0));
    assert_eq!(cmd(&mut con, &["DBSIZE"]), Value::Int(1));
}

/// `--maxmemory 64mb` makes the log's segments 2 MiB, and so one engine
/// batch at most about 2 MiB: a trim of tens of thousands of entries is
/// past it without writing hundreds of megabytes (without it the limit is
/// 32 MiB, some 800,000 entries).
const SMALL_SEGMENTS: [&str; 2] = ["--maxmemory", "64mb"];

/// Adds entries `from..to` to `key`, IDs `i-1`, values `v<i>`.
fn fill_stream(con: &mut redis::Connection, key: &str, from: usize, to: usize) {
    for start in (from..to).step_by(10_000) {
        let mut pipe = redis::pipe();
        for i in start..(start + 10_000).min(to) {
            pipe.cmd("XADD").arg(key).arg(format!("{i}-1")).arg("n").arg(format!("v{i}")).ignore();
        }
        pipe.query::<()>(con).unwrap();
    }
}

/// Checks that `key` holds exactly the entries `first..end` that
/// `fill_stream` added (none if `first == end`), and that its length and
/// first entry agree with them.
fn check_suffix(con: &mut redis::Connection, key: &str, first: usize, end: usize) {
    let all = entries(&cmd(con, &["XRANGE", key, "-", "+"]));
    assert_eq!(all.len(), end - first, "entries from {first} to {end}");
    for (k, (entry_id, fields)) in all.iter().enumerate() {
        let i = first + k;
        assert_eq!(
            (entry_id.as_str(), fields.as_slice()),
            (format!("{i}-1").as_str(), &["n".to_string(), format!("v{i}")][..])
        );
    }
    assert_eq!(int(&cmd(con, &["XLEN", key])), (end - first) as i64);
    if first < end {
        let info = fields(&cmd(con, &["XINFO", "STREAM", key]));
        assert_eq!(text(&info["recorded-first-entry-id"]), format!("{first}-1"));
        assert_eq!(entries(&Value::Array(vec![info["first-entry"].clone()]))[0].0, format!("{first}-1"));
    }
    // No trimmed entry is left to find by its ID either.
    if first > 1 {
        assert_eq!(cmd(con, &["XDEL", key, &format!("{}-1", first - 1)]), Value::Int(0));
    }
}

#[test]
fn a_trim_past_one_batch_goes_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &SMALL_SEGMENTS);
    let mut con = client(server.port).unwrap();
    const N: usize = 120_000;
    fill_stream(&mut con, "big", 1, N + 1);
    // 119,000 deletes are about 5 MB of batch: past the 2 MiB limit.
    assert_eq!(cmd(&mut con, &["XTRIM", "big", "MAXLEN", "1000"]), Value::Int(119_000));
    check_suffix(&mut con, "big", N - 999, N + 1);
    fill_stream(&mut con, "by-id", 1, 70_001);
    assert_eq!(cmd(&mut con, &["XTRIM", "by-id", "MINID", "65000"]), Value::Int(64_999));
    check_suffix(&mut con, "by-id", 65_000, 70_001);
    assert_eq!(cmd(&mut con, &["XTRIM", "by-id", "MAXLEN", "0"]), Value::Int(5001));
    check_suffix(&mut con, "by-id", 70_001, 70_001);
    let info = fields(&cmd(&mut con, &["XINFO", "STREAM", "by-id"]));
    assert_eq!((int(&info["entries-added"]), text(&info["last-generated-id"])), (70_000, "70000-1".to_string()));
    // An XADD whose MAXLEN trims past the batch runs again alone (out of
    // its pipeline's run) and trims in pieces too; the run's other
    // commands keep their order.
    fill_stream(&mut con, "capped", 1, 60_001);
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg("before").arg("1");
    pipe.cmd("XADD").arg("capped").arg("MAXLEN").arg("10").arg("60001-1").arg("n").arg("v60001");
    pipe.cmd("GET").arg("before");
    pipe.cmd("XLEN").arg("capped");
    let replies: Vec<Value> = pipe.query(&mut con).unwrap();
    assert_eq!(replies[1], Value::BulkString(b"60001-1".to_vec()));
    assert_eq!((&replies[2], &replies[3]), (&Value::BulkString(b"1".to_vec()), &Value::Int(10)));
    check_suffix(&mut con, "capped", 59_992, 60_002);
    // A transaction's changes are one batch: past the limit, the engine's
    // error, and nothing changes.
    fill_stream(&mut con, "tx", 1, 60_001);
    let mut raw = server.connect();
    let reply = common::request(&mut raw, &common::encode(&[b"MULTI"]));
    assert_eq!(reply, b"+OK\r\n");
    let reply = common::request(&mut raw, &common::encode(&[b"XTRIM", b"tx", b"MAXLEN", b"0"]));
    assert_eq!(reply, b"+QUEUED\r\n");
    let reply = String::from_utf8(common::request(&mut raw, &common::encode(&[b"EXEC"]))).unwrap();
    assert!(reply.contains("exceeds the limit"), "{reply}");
    check_suffix(&mut con, "tx", 1, 60_001);
}

/// Delivers `reads` x 20,000 entries of `s` to `consumer` of group `g`.
fn deliver(con: &mut redis::Connection, consumer: &str, reads: usize) {
    for _ in 0..reads {
        let got =
            read_entries(&cmd(con, &["XREADGROUP", "GROUP", "g", consumer, "COUNT", "20000", "STREAMS", "s", ">"]));
        assert_eq!(got.len(), 20_000);
    }
}

/// The pending entries of group `g` of `s`: (total, per consumer), from
/// XPENDING's summary, checked against the entries it lists.
fn pending(con: &mut redis::Connection) -> (i64, Vec<(String, i64)>) {
    pending_of(con, "g")
}

fn pending_of(con: &mut redis::Connection, group: &str) -> (i64, Vec<(String, i64)>) {
    let summary = cmd(con, &["XPENDING", "s", group]);
    let total = int(&items(&summary)[0]);
    let consumers: Vec<(String, i64)> = match &items(&summary)[3] {
        Value::Nil => Vec::new(),
        list => items(list).iter().map(|c| (text(&items(c)[0]), int(&items(c)[1]))).collect(),
    };
    let listed = cmd(con, &["XPENDING", "s", group, "-", "+", "1000000"]);
    let mut counted: BTreeMap<String, i64> = BTreeMap::new();
    for entry in items(&listed) {
        *counted.entry(text(&items(entry)[1])).or_default() += 1;
    }
    assert_eq!(items(&listed).len() as i64, total, "XPENDING's count is its entries'");
    assert_eq!(counted.into_iter().collect::<Vec<_>>(), consumers, "each consumer's count is its entries'");
    (total, consumers)
}

#[test]
fn consumer_groups_past_one_batch_go_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &SMALL_SEGMENTS);
    let mut con = client(server.port).unwrap();
    fill_stream(&mut con, "s", 1, 120_001);
    assert_eq!(cmd(&mut con, &["XGROUP", "CREATE", "s", "g", "0"]), Value::Okay);
    deliver(&mut con, "c1", 3);
    deliver(&mut con, "c2", 3);
    let both = vec![("c1".to_string(), 60_000), ("c2".to_string(), 60_000)];
    assert_eq!(pending(&mut con), (120_000, both));
    // 60,000 deletes of pending entries are about 2.7 MB: past the batch.
    assert_eq!(cmd(&mut con, &["XGROUP", "DELCONSUMER", "s", "g", "c1"]), Value::Int(60_000));
    assert_eq!(pending(&mut con), (60_000, vec![("c2".to_string(), 60_000)]));
    assert_eq!(cmd(&mut con, &["XACK", "s", "g", "1-1", "60001-1"]), Value::Int(1));
    // The other 59,999 acknowledged at once, in a pipeline's run.
    let ids: Vec<String> = (1..=120_000).map(|ms| format!("{ms}-1")).collect();
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg("before").arg("1").cmd("XACK").arg("s").arg("g").arg(&ids).cmd("GET").arg("before");
    let replies: Vec<Value> = pipe.query(&mut con).unwrap();
    assert_eq!(replies[1..], [Value::Int(59_999), Value::BulkString(b"1".to_vec())]);
    assert_eq!(pending(&mut con), (0, Vec::new()));
    // Reads without COUNT: all 120,000 entries delivered (about 8 MB of
    // pending entries), then all of them again from the history.
    assert_eq!(cmd(&mut con, &["XGROUP", "CREATE", "s", "h", "0"]), Value::Okay);
    let all = read_entries(&cmd(&mut con, &["XREADGROUP", "GROUP", "h", "c4", "STREAMS", "s", ">"]));
    assert_eq!((all.len(), all[0].0.as_str(), all[119_999].0.as_str()), (120_000, "1-1", "120000-1"));
    assert_eq!(pending_of(&mut con, "h"), (120_000, vec![("c4".to_string(), 120_000)]));
    let again = read_entries(&cmd(&mut con, &["XREADGROUP", "GROUP", "h", "c4", "STREAMS", "s", "0"]));
    assert_eq!(again, all);
    let listed = cmd(&mut con, &["XPENDING", "s", "h", "-", "+", "3"]);
    assert_eq!(items(&listed).iter().map(|e| int(&items(e)[3])).collect::<Vec<_>>(), [2, 2, 2], "delivered twice");
    let info = fields(&items(&cmd(&mut con, &["XINFO", "GROUPS", "s"]))[1]);
    assert_eq!((text(&info["last-delivered-id"]), int(&info["entries-read"])), ("120000-1".to_string(), 120_000));
    assert_eq!(cmd(&mut con, &["XGROUP", "DESTROY", "s", "g"]), Value::Int(1));
    let info = fields(&cmd(&mut con, &["XINFO", "STREAM", "s"]));
    assert_eq!(int(&info["groups"]), 1);
    // A group made again under the name finds nothing left pending.
    assert_eq!(cmd(&mut con, &["XGROUP", "CREATE", "s", "g", "$"]), Value::Okay);
    assert_eq!(pending(&mut con), (0, Vec::new()));
    assert_eq!(int(&cmd(&mut con, &["XLEN", "s"])), 120_000);
}

/// A group's pending entries written or deleted in pieces, killed
/// half-way, keep the group's books balanced: each consumer's count is
/// its pending entries'. Odd rounds kill an XGROUP DESTROY (as if the
/// entries deleted so far had been acknowledged), even ones an XREADGROUP
/// without COUNT of all 100,000 entries (as if a read with a smaller
/// COUNT had been served: the group's last entry and entries read are
/// those of its pending entries). Round 0 runs both, timed (the read to
/// its reply's first byte); the others are SIGKILLed at a random moment
/// within that time.
#[test]
fn group_changes_in_pieces_killed_half_way_keep_the_books() {
    use std::io::{Read, Write};
    let iterations = common::crash_iterations(4);
    let mut rng = common::crash_rng("group_changes_in_pieces_killed_half_way_keep_the_books", iterations);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let (mut read_all, mut destroy) = (Duration::ZERO, Duration::ZERO);
    let mut cut_short = 0;
    for round in 0..=iterations {
        let mut server = Server::start(&path, &SMALL_SEGMENTS);
        let mut con = client(server.port).unwrap();
        if round == 0 {
            fill_stream(&mut con, "s", 1, 100_001);
        }
        assert_eq!(cmd(&mut con, &["XGROUP", "CREATE", "s", "g", "0"]), Value::Okay);
        let mut raw = server.connect();
        let reads = round == 0 || round % 2 == 0;
        if reads {
            raw.write_all(&common::encode(&[b"XREADGROUP", b"GROUP", b"g", b"c0", b"STREAMS", b"s", b">"])).unwrap();
        }
        if round == 0 {
            // Its pieces are written before the reply's first byte.
            let started = Instant::now();
            let mut first = [0u8];
            raw.read_exact(&mut first).unwrap();
            read_all = started.elapsed();
            assert_eq!(&first, b"*");
            raw = server.connect();
        } else if !reads {
            deliver(&mut con, "c1", 3);
            deliver(&mut con, "c2", 2);
        }
        if round == 0 || !reads {
            raw.write_all(&common::encode(&[b"XGROUP", b"DESTROY", b"s", b"g"])).unwrap();
        }
        if round == 0 {
            let started = Instant::now();
            assert_eq!(common::read_reply(&mut raw), b":1\r\n");
            destroy = started.elapsed();
            assert!(server.terminate());
            continue;
        }
        std::thread::sleep(if reads { read_all } else { destroy }.mul_f64(rng.gen_range(0.0..1.0)));
        server.kill();
        let server = Server::start(&path, &SMALL_SEGMENTS);
        let mut con = client(server.port).unwrap();
        if int(&fields(&cmd(&mut con, &["XINFO", "STREAM", "s"]))["groups"]) == 1 {
            let (left, _) = pending(&mut con);
            cut_short += usize::from(left > 0 && left < 100_000);
            if reads {
                let info = fields(&items(&cmd(&mut con, &["XINFO", "GROUPS", "s"]))[0]);
                // Nothing read yet: a group made at 0 knows no count (nil).
                let (last, read) = match left {
                    0 => ("0-0".to_string(), Value::Nil),
                    _ => (format!("{left}-1"), Value::Int(left)),
                };
                assert_eq!((text(&info["last-delivered-id"]), info["entries-read"].clone()), (last, read));
            }
            assert_eq!(cmd(&mut con, &["XGROUP", "DESTROY", "s", "g"]), Value::Int(1));
        }
        assert_eq!(int(&cmd(&mut con, &["XLEN", "s"])), 100_000);
    }
    eprintln!(
        "reading all took {read_all:?}, a destroy {destroy:?}; {cut_short} of {iterations} kills landed between pieces"
    );
}

/// A trim in pieces killed half-way leaves the stream as a smaller trim
/// would have: its entries a whole suffix of what was added, its length
/// and first entry agreeing with them. The first round trims to the end,
/// timed; the others are SIGKILLed at a random moment within that time.
#[test]
fn a_trim_in_pieces_killed_half_way_leaves_a_whole_stream() {
    use std::io::Write;
    let iterations = common::crash_iterations(4);
    let mut rng = common::crash_rng("a_trim_in_pieces_killed_half_way_leaves_a_whole_stream", iterations);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    const N: usize = 100_000;
    // The stream holds the entries first..end.
    let (mut first, mut end) = (1, 1);
    let mut full_trim = Duration::ZERO;
    let mut cut_short = 0;
    let flags = SMALL_SEGMENTS;
    for round in 0..=iterations {
        let mut server = Server::start(&path, &flags);
        let mut con = client(server.port).unwrap();
        check_suffix(&mut con, "s", first, end);
        fill_stream(&mut con, "s", end, end + N);
        end += N;
        let mut raw = server.connect();
        raw.write_all(&common::encode(&[b"XTRIM", b"s", b"MAXLEN", b"10"])).unwrap();
        if round == 0 {
            let started = Instant::now();
            let reply = common::read_reply(&mut raw);
            full_trim = started.elapsed();
            assert_eq!(reply, format!(":{}\r\n", end - 10 - first).into_bytes());
            first = end - 10;
            assert!(server.terminate());
            continue;
        }
        std::thread::sleep(full_trim.mul_f64(rng.gen_range(0.0..1.0)));
        server.kill();
        let server = Server::start(&path, &flags);
        let mut con = client(server.port).unwrap();
        let left = int(&cmd(&mut con, &["XLEN", "s"])) as usize;
        assert!((10..=end - first).contains(&left), "{left} entries left of {}", end - first);
        cut_short += usize::from(left > 10 && left < end - first);
        first = end - left;
        check_suffix(&mut con, "s", first, end);
        // The trim done again finishes the job (and keeps the log small).
        assert_eq!(int(&cmd(&mut con, &["XTRIM", "s", "MAXLEN", "10"])) as usize, left - 10);
        first = end - 10;
    }
    eprintln!("a full trim took {full_trim:?}; {cut_short} of {iterations} kills landed between its pieces");
}

/// What producers and consumers were told before the server died.
#[derive(Default)]
struct Books {
    /// Acknowledged XADDs: ID → (producer, sequence).
    added: BTreeMap<(u64, u64), (usize, u64)>,
    /// Entries an XREADGROUP reply delivered.
    delivered: BTreeSet<(u64, u64)>,
    /// Entries an XACK reply acknowledged.
    acked: BTreeSet<(u64, u64)>,
    /// Entries of an XACK sent but not answered (it may have landed).
    maybe_acked: BTreeSet<(u64, u64)>,
}

fn payload(producer: usize, seq: u64) -> String {
    let len = 1 + (seq as usize * 31 + producer * 7) % 300;
    (0..len).map(|i| (b'a' + ((i as u64 + seq) % 26) as u8) as char).collect()
}

fn produce(port: u16, producer: usize, next_seq: u64, stop: Arc<AtomicBool>) -> Vec<((u64, u64), u64)> {
    let mut acked = Vec::new();
    let Ok(mut con) = client(port) else { return acked };
    let mut seq = next_seq;
    while !stop.load(Ordering::Relaxed) {
        let mut pipe = redis::pipe();
        for s in seq..seq + 4 {
            pipe.cmd("XADD")
                .arg("events")
                .arg("*")
                .arg("p")
                .arg(producer)
                .arg("seq")
                .arg(s)
                .arg("data")
                .arg(payload(producer, s));
        }
        let Ok(ids) = pipe.query::<Vec<String>>(&mut con) else { return acked };
        for (i, entry_id) in ids.iter().enumerate() {
            acked.push((id(entry_id), seq + i as u64));
        }
        seq += 4;
    }
    acked
}

/// Appends to `capped`, trimmed by `MAXLEN ~ 200` (whole nodes of 100)
/// and now and then by an exact XTRIM to 150; returns the acknowledged
/// sequence numbers.
fn produce_capped(port: u16, next_seq: u64, stop: Arc<AtomicBool>) -> Vec<u64> {
    let mut acked = Vec::new();
    let Ok(mut con) = client(port) else { return acked };
    let mut seq = next_seq;
    while !stop.load(Ordering::Relaxed) {
        let mut pipe = redis::pipe();
        for s in seq..seq + 8 {
            pipe.cmd("XADD").arg(&["capped", "MAXLEN", "~", "200", "*", "seq"]).arg(s).arg("data").arg(payload(9, s));
        }
        if seq.is_multiple_of(400) {
            pipe.cmd("XTRIM").arg(&["capped", "MAXLEN", "150"]).ignore();
        }
        if pipe.query::<Vec<String>>(&mut con).is_err() {
            return acked;
        }
        acked.extend(seq..seq + 8);
        seq += 8;
    }
    acked
}

fn consume(port: u16, consumer: usize, stop: Arc<AtomicBool>) -> Books {
    let mut books = Books::default();
    let Ok(mut con) = client(port) else { return books };
    let name = format!("c{consumer}");
    let mut batches = 0u64;
    while !stop.load(Ordering::Relaxed) {
        // One consumer waits in BLOCK, the other polls.
        let block = if consumer == 0 { "20" } else { "0" };
        let mut read = redis::cmd("XREADGROUP");
        read.arg(&["GROUP", "g", &name, "COUNT", "7"]);
        if consumer == 0 {
            read.arg("BLOCK").arg(block);
        }
        read.arg(&["STREAMS", "events", ">"]);
        let Ok(reply) = read.query::<Value>(&mut con) else { return books };
        let got = read_entries(&reply);
        if got.is_empty() {
            std::thread::sleep(Duration::from_millis(1));
            continue;
        }
        let ids: Vec<(u64, u64)> = got.iter().map(|(i, _)| id(i)).collect();
        books.delivered.extend(&ids);
        // Every other batch is acknowledged; the rest stays pending.
        batches += 1;
        if batches.is_multiple_of(2) {
            continue;
        }
        let mut ack = redis::cmd("XACK");
        ack.arg("events").arg("g");
        for (ms, seq) in &ids {
            ack.arg(format!("{ms}-{seq}"));
        }
        books.maybe_acked.extend(&ids);
        let Ok(n) = ack.query::<i64>(&mut con) else { return books };
        assert_eq!(n, ids.len() as i64, "each delivered entry acknowledged once");
        for entry in &ids {
            books.maybe_acked.remove(entry);
            books.acked.insert(*entry);
        }
    }
    books
}

/// Producers XADD to one stream and consumers of a group read and
/// acknowledge while the server is SIGKILLed, in a loop
/// (`SCALEDKV_STREAM_CRASH_ITERATIONS`, default 3). After each restart:
/// every acknowledged XADD is there byte for byte, in its producer's
/// order; every acknowledged delivery is pending or was acknowledged;
/// every acknowledged XACK stays acknowledged; the group's counts agree
/// with its pending entries.
#[test]
fn producers_and_consumer_groups_survive_sigkill() {
    let iterations: usize =
        std::env::var("SCALEDKV_STREAM_CRASH_ITERATIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(3);
    let dir = tempfile::tempdir().unwrap();
    let mut rng = rand::rngs::StdRng::seed_from_u64(0x5EED);
    let mut books = Books::default();
    let mut next_seq = [0u64; 2];
    let (mut capped_acked, mut capped_next) = (Vec::new(), 0u64);
    for life in 0..iterations {
        let mut server = Server::start(&dir.path().join("db"), &[]);
        let mut con = client(server.port).unwrap();
        if life == 0 {
            cmd(&mut con, &["XGROUP", "CREATE", "events", "g", "$", "MKSTREAM"]);
        }
        check(&mut con, &books);
        check_capped(&mut con, &capped_acked);
        let stop = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..2)
            .map(|p| {
                let (port, stop, seq) = (server.port, stop.clone(), next_seq[p]);
                std::thread::spawn(move || produce(port, p, seq, stop))
            })
            .collect();
        let capped = {
            let (port, stop) = (server.port, stop.clone());
            std::thread::spawn(move || produce_capped(port, capped_next, stop))
        };
        let consumers: Vec<_> = (0..2)
            .map(|c| {
                let (port, stop) = (server.port, stop.clone());
                std::thread::spawn(move || consume(port, c, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(rng.gen_range(150..500)));
        server.kill();
        stop.store(true, Ordering::Relaxed);
        for (p, producer) in producers.into_iter().enumerate() {
            let acked = producer.join().unwrap();
            // A life's unanswered XADDs may have landed: the next life
            // goes on from past them, so no sequence is added twice.
            next_seq[p] = acked.last().map_or(next_seq[p], |(_, seq)| seq + 1) + 4;
            for (entry_id, seq) in acked {
                books.added.insert(entry_id, (p, seq));
            }
        }
        let acked = capped.join().unwrap();
        capped_next = acked.last().map_or(capped_next, |seq| seq + 1) + 8;
        capped_acked.extend(acked);
        for consumer in consumers {
            let got = consumer.join().unwrap();
            books.delivered.extend(got.delivered);
            books.acked.extend(&got.acked);
            books.maybe_acked.extend(got.maybe_acked);
        }
        assert!(!books.added.is_empty(), "life {life} added something");
    }
    let server = Server::start(&dir.path().join("db"), &[]);
    let mut con = client(server.port).unwrap();
    check(&mut con, &books);
    check_capped(&mut con, &capped_acked);
    assert!(!books.acked.is_empty() && books.delivered.len() > books.acked.len(), "both kinds were seen");
}

fn check(con: &mut redis::Connection, books: &Books) {
    let all = entries(&cmd(con, &["XRANGE", "events", "-", "+"]));
    assert_eq!(cmd(con, &["XLEN", "events"]), Value::Int(all.len() as i64));
    let found: BTreeMap<(u64, u64), Vec<String>> = all.iter().map(|(i, f)| (id(i), f.clone())).collect();
    assert_eq!(found.len(), all.len(), "no ID twice");
    let mut last_seq: HashMap<String, u64> = HashMap::new();
    for (entry_id, fields) in &found {
        let (p, seq) = (fields[1].clone(), fields[3].parse::<u64>().unwrap());
        assert_eq!(fields[5], payload(p.parse().unwrap(), seq), "entry {entry_id:?} byte for byte");
        if let Some(&before) = last_seq.get(&p) {
            assert!(seq > before, "producer {p}'s entries in the order it added them");
        }
        last_seq.insert(p, seq);
    }
    for (entry_id, (p, seq)) in &books.added {
        let fields = found.get(entry_id).unwrap_or_else(|| panic!("acknowledged XADD {entry_id:?} lost"));
        assert_eq!((fields[1].as_str(), fields[3].as_str()), (p.to_string().as_str(), seq.to_string().as_str()));
    }
    let pending: BTreeMap<(u64, u64), String> = items(&cmd(con, &["XPENDING", "events", "g", "-", "+", "1000000"]))
        .iter()
        .map(|e| (id(&text(&items(e)[0])), text(&items(e)[1])))
        .collect();
    for entry in &books.delivered {
        let acked = books.acked.contains(entry) || books.maybe_acked.contains(entry);
        assert!(pending.contains_key(entry) || acked, "delivered {entry:?} neither pending nor acknowledged");
        assert!(found.contains_key(entry), "a delivered entry is in the stream");
    }
    for entry in &books.acked {
        assert!(!pending.contains_key(entry), "acknowledged {entry:?} pending again");
    }
    let summary = cmd(con, &["XPENDING", "events", "g"]);
    assert_eq!(int(&items(&summary)[0]), pending.len() as i64, "the group's count");
    let mut by_consumer: BTreeMap<String, i64> = BTreeMap::new();
    for consumer in pending.values() {
        *by_consumer.entry(consumer.clone()).or_default() += 1;
    }
    let counted: BTreeMap<String, i64> = match &items(&summary)[3] {
        Value::Nil => BTreeMap::new(),
        list => items(list).iter().map(|c| (text(&items(c)[0]), int(&items(c)[1]))).collect(),
    };
    assert_eq!(counted, by_consumer, "each consumer's count");
    let group = fields(&items(&cmd(con, &["XINFO", "GROUPS", "events"]))[0]);
    let last_delivered = id(&text(&group["last-delivered-id"]));
    assert!(books.delivered.iter().all(|entry| *entry <= last_delivered), "last-delivered-id covers every delivery");
}

/// No stream command with arguments drawn from its own vocabulary (and
/// raw bytes) gets anything but a reply, and the server answers PING
/// after each. (BLOCK is left out: a valid one would wait.)
#[test]
fn no_stream_command_crashes_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]);
    let names = vec![
        "XADD",
        "XLEN",
        "XRANGE",
        "XREVRANGE",
        "XDEL",
        "XTRIM",
        "XSETID",
        "XREAD",
        "XREADGROUP",
        "XACK",
        "XPENDING",
        "XCLAIM",
        "XAUTOCLAIM",
        "XGROUP",
        "XINFO",
    ];
    let words = vec![
        "s",
        "t",
        "g",
        "c",
        "*",
        "$",
        ">",
        "-",
        "+",
        "0",
        "1",
        "1-1",
        "2-*",
        "(1",
        "(",
        "-1",
        "MAXLEN",
        "~",
        "=",
        "MINID",
        "LIMIT",
        "NOMKSTREAM",
        "COUNT",
        "STREAMS",
        "GROUP",
        "NOACK",
        "JUSTID",
        "FORCE",
        "IDLE",
        "TIME",
        "RETRYCOUNT",
        "LASTID",
        "MKSTREAM",
        "ENTRIESREAD",
        "ENTRIESADDED",
        "MAXDELETEDID",
        "CREATE",
        "SETID",
        "DESTROY",
        "CREATECONSUMER",
        "DELCONSUMER",
        "HELP",
        "STREAM",
        "GROUPS",
        "CONSUMERS",
        "FULL",
        "18446744073709551615-18446744073709551615",
        "18446744073709551615-*",
        "9223372036854775808",
    ];
    common::any_arguments_get_a_reply(&server, names, words, 500);
}

/// A trimmed stream after a crash: its length, first entry and last
/// entry agree with its entries; they are a run of the producer's newest
/// (trims take the oldest, whole); the newest acknowledged XADD and every
/// acknowledged one within the last 140 are there byte for byte.
fn check_capped(con: &mut redis::Connection, acked: &[u64]) {
    let all = entries(&cmd(con, &["XRANGE", "capped", "-", "+"]));
    assert_eq!(cmd(con, &["XLEN", "capped"]), Value::Int(all.len() as i64));
    let Some(newest) = acked.last() else { return };
    let seqs: Vec<u64> = all.iter().map(|(_, f)| f[1].parse().unwrap()).collect();
    for (entry, seq) in all.iter().zip(&seqs) {
        assert_eq!(entry.1[3], payload(9, *seq), "capped entry {} byte for byte", entry.0);
    }
    assert!(seqs.windows(2).all(|w| w[0] < w[1]), "in the order added");
    let info = fields(&cmd(con, &["XINFO", "STREAM", "capped"]));
    assert_eq!(text(&info["recorded-first-entry-id"]), all[0].0, "the first entry recorded");
    assert_eq!(text(&items(&info["first-entry"])[0]), all[0].0);
    assert_eq!(text(&items(&info["last-entry"])[0]), all[all.len() - 1].0);
    let top = *seqs.last().unwrap();
    assert!(top >= *newest, "the newest acknowledged XADD {newest} is there (top {top})");
    let present: BTreeSet<u64> = seqs.iter().copied().collect();
    for seq in acked.iter().filter(|&&s| s + 140 > top) {
        assert!(present.contains(seq), "acknowledged capped XADD {seq} lost (top {top})");
    }
    assert!(all.len() >= acked.len().min(140), "a trim keeps at least 150 entries: {}", all.len());
}
