//! The server through a real client (the `redis` crate) and raw sockets:
//! commands, pipelining, RESP3, transactions, AUTH, limits, bad input,
//! shutdown and restart.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{encode, read_reply, request, Server};
use redis::{Commands, Value};

fn start(extra: &[&str]) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), extra);
    (dir, server)
}

fn client(server: &Server) -> redis::Connection {
    redis::Client::open(server.url()).unwrap().get_connection().unwrap()
}

#[test]
fn string_and_key_commands_through_a_client() {
    let (_dir, server) = start(&[]);
    let mut con = client(&server);
    let _: () = con.set("greeting", "hello").unwrap();
    assert_eq!(con.get::<_, String>("greeting").unwrap(), "hello");
    assert_eq!(con.append::<_, _, i64>("greeting", " world").unwrap(), 11);
    assert_eq!(con.getrange::<_, String>("greeting", -5, -1).unwrap(), "world");
    assert_eq!(con.setrange::<_, _, i64>("greeting", 0, "J").unwrap(), 11);
    assert_eq!(con.strlen::<_, i64>("greeting").unwrap(), 11);
    assert_eq!(con.incr::<_, _, i64>("n", 5).unwrap(), 5);
    assert_eq!(con.decr::<_, _, i64>("n", 7).unwrap(), -2);
    let float: f64 = redis::cmd("INCRBYFLOAT").arg("f").arg("10.5").query(&mut con).unwrap();
    assert_eq!(float, 10.5);
    let float: String = redis::cmd("INCRBYFLOAT").arg("f").arg("0.1").query(&mut con).unwrap();
    assert_eq!(float, "10.6");
    let _: () = con.mset(&[("a", "1"), ("b", "2")]).unwrap();
    let values: Vec<Option<String>> = con.mget(&["a", "b", "missing"]).unwrap();
    assert_eq!(values, vec![Some("1".into()), Some("2".into()), None]);
    // More keys than MGET prefetches at once (32), every third missing.
    let keys: Vec<String> = (0..100).map(|i| format!("m{i}")).collect();
    let pairs: Vec<(String, String)> =
        (0..100).filter(|i| i % 3 != 0).map(|i| (format!("m{i}"), format!("v{i}"))).collect();
    let _: () = con.mset(&pairs).unwrap();
    let values: Vec<Option<String>> = con.mget(&keys).unwrap();
    assert_eq!(values, (0..100).map(|i| (i % 3 != 0).then(|| format!("v{i}"))).collect::<Vec<_>>());
    assert_eq!(con.del::<_, i64>(&keys).unwrap(), 66);
    assert_eq!(con.exists::<_, i64>(&["a", "b", "missing", "a"]).unwrap(), 3);
    assert_eq!(con.del::<_, i64>(&["a", "a", "missing"]).unwrap(), 1);
    let error = con.incr::<_, _, i64>("greeting", 1).unwrap_err();
    assert_eq!(error.detail(), Some("value is not an integer or out of range"));
    let _: () = con.set_ex("temp", "x", 100).unwrap();
    let ttl: i64 = con.ttl("temp").unwrap();
    assert!((99..=100).contains(&ttl), "{ttl}");
    assert_eq!(con.persist::<_, i64>("temp").unwrap(), 1);
    assert_eq!(con.ttl::<_, i64>("temp").unwrap(), -1);
    assert_eq!(con.ttl::<_, i64>("missing").unwrap(), -2);
    let _: () = con.rename("temp", "renamed").unwrap();
    assert_eq!(con.get::<_, Option<String>>("temp").unwrap(), None);
    assert_eq!(redis::cmd("TYPE").arg("renamed").query::<String>(&mut con).unwrap(), "string");
    let _: () = con.pset_ex("soon", "x", 30).unwrap();
    std::thread::sleep(Duration::from_millis(60));
    assert_eq!(con.get::<_, Option<String>>("soon").unwrap(), None);
    let mut keys: Vec<String> = con.keys("*e*").unwrap();
    keys.sort();
    assert_eq!(keys, vec!["greeting".to_string(), "renamed".to_string()]);
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut con).unwrap(), 5);
}

/// What the differential tests cannot compare with Redis: the subcommand
/// ScaledKV cannot answer says so, and HELP says what each one means here.
#[test]
fn object_idletime_is_refused_and_help_says_what_is_answered() {
    let (_dir, server) = start(&[]);
    let mut con = client(&server);
    let _: () = con.set("k", "v").unwrap();
    let err = redis::cmd("OBJECT").arg("IDLETIME").arg("k").query::<Value>(&mut con).unwrap_err();
    assert!(err.to_string().contains("not supported by ScaledKV yet"), "{err}");
    let help: Vec<String> = redis::cmd("OBJECT").arg("HELP").query(&mut con).unwrap();
    assert!(help.iter().any(|line| line.contains("no per-key access time")), "{help:?}");
    let encoding: String = redis::cmd("OBJECT").arg("ENCODING").arg("k").query(&mut con).unwrap();
    assert_eq!(encoding, "embstr");
}

/// PFSELFTEST runs Redis's own HyperLogLog self-test to the end (ten
/// million elements) and passes.
#[test]
fn the_hyperloglog_self_test_passes() {
    let (_dir, server) = start(&[]);
    let mut con = client(&server);
    assert_eq!(redis::cmd("PFSELFTEST").query::<String>(&mut con).unwrap(), "OK");
}

/// A negative random-pick count asks for that many picks with repeats;
/// past 2^24 of them it is refused (the reply is built before it is sent:
/// -10^13 froze the server as it filled memory), and the server goes on.
#[test]
fn huge_repeated_random_picks_are_refused() {
    let (_dir, server) = start(&[]);
    let mut con = client(&server);
    let _: () = redis::cmd("SADD").arg("s").arg("a").arg("b").query(&mut con).unwrap();
    let _: () = redis::cmd("HSET").arg("h").arg("f").arg("v").query(&mut con).unwrap();
    let _: () = redis::cmd("ZADD").arg("z").arg(1).arg("m").query(&mut con).unwrap();
    for (command, key) in [("SRANDMEMBER", "s"), ("HRANDFIELD", "h"), ("ZRANDMEMBER", "z")] {
        for count in ["-10000000000000", "-16777217"] {
            let err = redis::cmd(command).arg(key).arg(count).query::<Value>(&mut con).unwrap_err();
            assert!(err.to_string().contains("value is out of range"), "{command} {count}: {err}");
        }
        let picks: Vec<String> = redis::cmd(command).arg(key).arg(-5).query(&mut con).unwrap();
        assert_eq!(picks.len(), 5, "{command}");
    }
    let pong: String = redis::cmd("PING").query(&mut con).unwrap();
    assert_eq!(pong, "PONG");
}

#[test]
fn memory_usage_counts_a_key_its_value_and_its_index_share() {
    let (_dir, server) = start(&[]);
    let mut con = client(&server);
    let usage = |con: &mut redis::Connection, key: &str| -> Option<i64> {
        redis::cmd("MEMORY").arg("USAGE").arg(key).query(con).unwrap()
    };
    assert_eq!(usage(&mut con, "missing"), None);
    let _: () = con.set("small", "x").unwrap();
    let _: () = con.set("large", "x".repeat(10_000)).unwrap();
    let _: () = con.set_ex("expiring", "x", 100).unwrap();
    // One pipeline, so all three see the same index share (read at most
    // once a second).
    let (small, large, expiring): (i64, i64, i64) = redis::pipe()
        .cmd("MEMORY")
        .arg("USAGE")
        .arg("small")
        .cmd("MEMORY")
        .arg("USAGE")
        .arg("large")
        .cmd("MEMORY")
        .arg("USAGE")
        .arg("expiring")
        .query(&mut con)
        .unwrap();
    // Entries (12-byte header, key, type byte, value, 8-byte expiry time)
    // take whole 8-byte steps of the log: 24, 10,024 and 32 bytes.
    assert_eq!(large - small, 10_000);
    assert_eq!(expiring - small, 8);
    assert!(small > 24, "the index's share counts beside the entry's 24 bytes: {small}");
    // MEMORY STATS counts the keys and the index (the resident memory's
    // other shares are the process's own).
    let stats: std::collections::HashMap<String, Value> = redis::cmd("MEMORY").arg("STATS").query(&mut con).unwrap();
    assert_eq!(stats["keys.count"], Value::Int(3));
    // RESP2: the nested map is a flat array of names and values.
    let Value::Array(db) = &stats["db.0"] else { panic!("db.0: {:?}", stats["db.0"]) };
    assert_eq!(db[0], Value::BulkString(b"overhead.hashtable.main".to_vec()));
    assert!(matches!(db[1], Value::Int(bytes) if bytes > 0), "{db:?}");
}

#[test]
fn scan_visits_every_key_once() {
    let (_dir, server) = start(&[]);
    let mut con = client(&server);
    for i in 0..1000 {
        let _: () = con.set(format!("key:{i:04}"), i).unwrap();
    }
    let _: () = con.set("other", 1).unwrap();
    let mut seen: Vec<String> = con.scan_match("key:*").unwrap().collect();
    seen.sort();
    assert_eq!(seen.len(), 1000);
    seen.dedup();
    assert_eq!(seen.len(), 1000);
}

#[test]
fn pipelines_keep_order_and_read_their_own_writes() {
    let (_dir, server) = start(&[]);
    let mut con = client(&server);
    let mut pipe = redis::pipe();
    for i in 0..500 {
        pipe.set(format!("k{i}"), i).ignore();
        pipe.get(format!("k{i}"));
        pipe.incr("counter", 1);
    }
    let replies: Vec<i64> = pipe.query(&mut con).unwrap();
    let expected: Vec<i64> = (0..500).flat_map(|i| [i, i + 1]).collect();
    assert_eq!(replies, expected);
    // Many blind writes in one pipeline (one engine batch per run).
    let mut pipe = redis::pipe();
    for i in 0..2000 {
        pipe.set(format!("blind{i}"), format!("v{i}")).ignore();
    }
    pipe.get("blind1999");
    let (last,): (String,) = pipe.query(&mut con).unwrap();
    assert_eq!(last, "v1999");
    // Large values: the pipeline outgrows every read size (reads double
    // from 16 KiB to 256 KiB while they come back full).
    let value = |i: usize| vec![(i % 251) as u8; 8000 + i];
    let mut pipe = redis::pipe();
    for i in 0..96 {
        pipe.set(format!("big{i}"), value(i)).ignore();
    }
    for i in 0..96 {
        pipe.get(format!("big{i}"));
    }
    let values: Vec<Vec<u8>> = pipe.query(&mut con).unwrap();
    assert_eq!(values.len(), 96);
    for (i, got) in values.iter().enumerate() {
        assert!(*got == value(i), "big{i}: {} bytes", got.len());
    }
    // Small requests afterwards, while the read size shrinks back and the
    // grown buffer is let go.
    for i in 0..12 {
        let _: () = con.set(format!("small{i}"), i).unwrap();
        assert_eq!(con.get::<_, i64>(format!("small{i}")).unwrap(), i);
    }
    assert_eq!(con.get::<_, Vec<u8>>("big95").unwrap(), value(95));
}

#[test]
fn resp3_replies() {
    let (_dir, server) = start(&[]);
    let url = format!("{}?protocol=resp3", server.url());
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    let hello: Value = redis::cmd("HELLO").arg(3).query(&mut con).unwrap();
    let Value::Map(fields) = hello else { panic!("HELLO 3 is a map: {hello:?}") };
    assert!(fields.iter().any(|(k, v)| *k == Value::BulkString(b"proto".to_vec()) && *v == Value::Int(3)));
    assert_eq!(redis::cmd("GET").arg("missing").query::<Value>(&mut con).unwrap(), Value::Nil);
    let float: Value = redis::cmd("INCRBYFLOAT").arg("f").arg("1.5").query(&mut con).unwrap();
    assert_eq!(float, Value::BulkString(b"1.5".to_vec()));
    let config: Value = redis::cmd("CONFIG").arg("GET").arg("appendfsync").query(&mut con).unwrap();
    assert!(matches!(config, Value::Map(_)), "{config:?}");
    // Raw: RESP3 null and map framing.
    let mut stream = server.connect();
    request(&mut stream, &encode(&[b"HELLO", b"3"]));
    assert_eq!(request(&mut stream, &encode(&[b"GET", b"missing"])), b"_\r\n");
    assert_eq!(
        request(&mut stream, &encode(&[b"CONFIG", b"GET", b"appendonly"])),
        b"%1\r\n$10\r\nappendonly\r\n$3\r\nyes\r\n"
    );
}

/// Blocking pops: a client waiting in BLPOP gets what another pushes
/// (at once, not at its timeout), BLMOVE moves as it wakes, a timeout
/// answers a null array, a client that hangs up while it waits takes
/// nothing, and replies pipelined before a blocking pop come first.
#[test]
fn blocking_pops_wait_for_a_push() {
    use std::time::Instant;
    let (_dir, server) = start(&["--threads", "2"]);
    let mut pusher = server.connect();
    // Woken by a push from another connection.
    let mut waiter = server.connect();
    waiter.write_all(&[encode(&[b"SET", b"k", b"v"]), encode(&[b"BLPOP", b"queue", b"other", b"5"])].concat()).unwrap();
    assert_eq!(read_reply(&mut waiter), b"+OK\r\n", "the reply before the blocking pop comes first");
    std::thread::sleep(Duration::from_millis(200));
    let pushed = Instant::now();
    assert_eq!(request(&mut pusher, &encode(&[b"RPUSH", b"queue", b"job1", b"job2"])), b":2\r\n");
    assert_eq!(read_reply(&mut waiter), b"*2\r\n$5\r\nqueue\r\n$4\r\njob1\r\n");
    assert!(pushed.elapsed() < Duration::from_secs(1), "woken by the push: {:?}", pushed.elapsed());
    assert_eq!(request(&mut pusher, &encode(&[b"LRANGE", b"queue", b"0", b"-1"])), b"*1\r\n$4\r\njob2\r\n");
    // BLMOVE waits on an empty source, then moves.
    waiter.write_all(&encode(&[b"BLMOVE", b"src", b"dst", b"LEFT", b"RIGHT", b"0"])).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(request(&mut pusher, &encode(&[b"LPUSH", b"src", b"x"])), b":1\r\n");
    assert_eq!(read_reply(&mut waiter), b"$1\r\nx\r\n");
    assert_eq!(request(&mut pusher, &encode(&[b"LRANGE", b"dst", b"0", b"-1"])), b"*1\r\n$1\r\nx\r\n");
    // BLMPOP wakes alike, with every element it may take.
    waiter.write_all(&encode(&[b"BLMPOP", b"5", b"2", b"none", b"mq", b"LEFT", b"COUNT", b"3"])).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(request(&mut pusher, &encode(&[b"RPUSH", b"mq", b"a", b"b"])), b":2\r\n");
    assert_eq!(read_reply(&mut waiter), b"*2\r\n$2\r\nmq\r\n*2\r\n$1\r\na\r\n$1\r\nb\r\n");
    // A timeout.
    let asked = Instant::now();
    assert_eq!(request(&mut waiter, &encode(&[b"BRPOP", b"none", b"0.3"])), b"*-1\r\n");
    assert!(asked.elapsed() >= Duration::from_millis(300), "{:?}", asked.elapsed());
    // A client that hangs up while it waits takes nothing.
    let mut gone = server.connect();
    gone.write_all(&encode(&[b"BLPOP", b"later", b"0"])).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    drop(gone);
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(request(&mut pusher, &encode(&[b"RPUSH", b"later", b"kept"])), b":1\r\n");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(request(&mut pusher, &encode(&[b"LLEN", b"later"])), b":1\r\n");
    // Also one that sent more commands before it hung up; and what a
    // waiting client sends runs once its wait ends, in order.
    let mut gone = server.connect();
    gone.write_all(&[encode(&[b"BLPOP", b"later2", b"0"]), encode(&[b"PING"])].concat()).unwrap();
    server.wait_for_blocked_clients(1);
    drop(gone);
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(request(&mut pusher, &encode(&[b"RPUSH", b"later2", b"kept"])), b":1\r\n");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(request(&mut pusher, &encode(&[b"LLEN", b"later2"])), b":1\r\n");
    waiter.write_all(&[encode(&[b"BLPOP", b"later3", b"0"]), encode(&[b"ECHO", b"after"])].concat()).unwrap();
    server.wait_for_blocked_clients(1);
    assert_eq!(request(&mut pusher, &encode(&[b"RPUSH", b"later3", b"x"])), b":1\r\n");
    assert_eq!(read_reply(&mut waiter), b"*2\r\n$6\r\nlater3\r\n$1\r\nx\r\n");
    assert_eq!(read_reply(&mut waiter), b"$5\r\nafter\r\n");
}

/// Sets through the `redis` crate's typed API, in RESP2 and RESP3 (where
/// SMEMBERS is a set), and across a restart.
#[test]
fn sets_through_a_client_library() {
    use std::collections::HashSet;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut server = Server::start(&path, &[]);
    for protocol in ["", "?protocol=resp3"] {
        let url = format!("{}{protocol}", server.url());
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let key = format!("tags{protocol}");
        let added: i64 = con.sadd(&key, &["rust", "db", "kv", "db"]).unwrap();
        assert_eq!(added, 3);
        let members: HashSet<String> = con.smembers(&key).unwrap();
        assert_eq!(members, HashSet::from(["rust".into(), "db".into(), "kv".into()]));
        assert!(con.sismember::<_, _, bool>(&key, "kv").unwrap());
        let _: i64 = con.sadd("other", &["kv", "redis"]).unwrap();
        let both: HashSet<String> = con.sinter(&[&key, "other"]).unwrap();
        assert_eq!(both, HashSet::from(["kv".into()]));
        let removed: i64 = con.srem(&key, "db").unwrap();
        assert_eq!(removed, 1);
    }
    assert!(server.terminate());
    let server = Server::start(&path, &[]);
    let mut con = client(&server);
    let members: HashSet<String> = con.smembers("tags").unwrap();
    assert_eq!(members, HashSet::from(["rust".into(), "kv".into()]));
}

/// Hashes through the `redis` crate's typed API, as an application uses
/// them, in RESP2 and RESP3 (where HGETALL is a map), and across a
/// restart.
#[test]
fn hashes_through_a_client_library() {
    use std::collections::HashMap;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut server = Server::start(&path, &[]);
    for protocol in ["", "?protocol=resp3"] {
        let url = format!("{}{protocol}", server.url());
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let key = format!("user{protocol}");
        let _: () = con.hset_multiple(&key, &[("name", "Ada"), ("visits", "1")]).unwrap();
        let visits: i64 = con.hincr(&key, "visits", 41).unwrap();
        assert_eq!(visits, 42);
        let all: HashMap<String, String> = con.hgetall(&key).unwrap();
        assert_eq!(all, HashMap::from([("name".into(), "Ada".into()), ("visits".into(), "42".into())]));
        let (name, missing): (String, Option<String>) =
            redis::pipe().hget(&key, "name").hget(&key, "x").query(&mut con).unwrap();
        assert_eq!((name.as_str(), missing), ("Ada", None));
        let deleted: i64 = con.hdel(&key, &["name", "x"]).unwrap();
        assert_eq!(deleted, 1);
    }
    assert!(server.terminate());
    let server = Server::start(&path, &[]);
    let mut con = client(&server);
    let all: HashMap<String, String> = con.hgetall("user").unwrap();
    assert_eq!(all, HashMap::from([("visits".into(), "42".into())]));
}

/// The server's own entries (a big hash's fields, its owner record, the
/// format marker), from INFO.
fn reserved_entries(stream: &mut std::net::TcpStream) -> u64 {
    let info = request(stream, &encode(&[b"INFO", b"persistence"]));
    let info = String::from_utf8_lossy(&info);
    let line = info.lines().find_map(|l| l.strip_prefix("reserved_entries:")).expect("reserved_entries in INFO");
    line.trim().parse().unwrap()
}

/// Bytes the log holds (INFO persistence's `log_bytes`).
fn log_bytes(stream: &mut std::net::TcpStream) -> u64 {
    let info = request(stream, &encode(&[b"INFO", b"persistence"]));
    let info = String::from_utf8_lossy(&info);
    let line = info.lines().find_map(|l| l.strip_prefix("log_bytes:")).expect("log_bytes in INFO");
    line.trim().parse().unwrap()
}

/// A pipeline that rewrites one key again and again (SETRANGE of an 8 KiB
/// string, as PFADD rewrites a HyperLogLog) is one run and one atomic
/// batch: only the key's last value goes to the log, not fifty.
#[test]
fn a_run_that_rewrites_one_key_logs_only_its_last_value() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]);
    let mut stream = server.connect();
    let value = vec![b'a'; 8 << 10];
    assert_eq!(request(&mut stream, &encode(&[b"SET", b"k", &value])), b"+OK\r\n");
    let before = log_bytes(&mut stream);
    let mut pipeline = Vec::new();
    for i in 0..50 {
        pipeline.extend(encode(&[b"SETRANGE", b"k", (i * 100).to_string().as_bytes(), b"x"]));
    }
    std::io::Write::write_all(&mut stream, &pipeline).unwrap();
    for _ in 0..50 {
        assert_eq!(read_reply(&mut stream), b":8192\r\n");
    }
    let grew = log_bytes(&mut stream) - before;
    assert!(grew < 64 << 10, "the log grew {grew} bytes for one key's final 8 KiB");
    let stored = request(&mut stream, &encode(&[b"GET", b"k"]));
    assert_eq!(stored.iter().filter(|&&b| b == b'x').count(), 50);
}

/// Waits until the sweep brings the server's own entries down to `want`.
fn swept_to(stream: &mut std::net::TcpStream, want: u64) {
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while reserved_entries(stream) != want {
        assert!(std::time::Instant::now() < deadline, "not swept: {} entries, want {want}", reserved_entries(stream));
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A hash past Redis's listpack limits becomes a table with an entry per
/// field: DBSIZE and SCAN count only its key, RENAME and COPY keep it
/// whole, and once its key goes (DEL, an overwrite, expiry) the sweep
/// deletes its fields; what is left survives a restart.
#[test]
fn big_hashes_live_in_tables_swept_once_their_key_goes() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut server = Server::start(&path, &[]);
    let mut stream = server.connect();
    // The format marker only.
    assert_eq!(reserved_entries(&mut stream), 1);
    let big = vec![b'x'; 600 << 10];
    assert_eq!(request(&mut stream, &encode(&[b"HSET", b"h", b"small", b"v"])), b":1\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"OBJECT", b"ENCODING", b"h"])), b"$8\r\nlistpack\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"HSET", b"h", b"a", &big, b"b", &big])), b":2\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"OBJECT", b"ENCODING", b"h"])), b"$9\r\nhashtable\r\n");
    // Three fields and the owner record.
    assert_eq!(reserved_entries(&mut stream), 5);
    assert_eq!(request(&mut stream, &encode(&[b"HLEN", b"h"])), b":3\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"HSTRLEN", b"h", b"b"])), b":614400\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"DBSIZE"])), b":1\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"SCAN", b"0"])), b"*2\r\n$1\r\n0\r\n*1\r\n$1\r\nh\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"KEYS", b"*"])), b"*1\r\n$1\r\nh\r\n");
    // Reserved keys are nobody's to write or read.
    let refused = request(&mut stream, &encode(&[b"SET", b"\xff\xffx", b"v"]));
    assert!(refused.starts_with(b"-ERR keys starting with the bytes 0xFF 0xFF are reserved"), "{refused:?}");
    assert_eq!(request(&mut stream, &encode(&[b"GET", b"\xff\xff\x00format"])), b"$-1\r\n");
    // RENAME moves the stub and the owner record: the sweep keeps it.
    assert_eq!(request(&mut stream, &encode(&[b"RENAME", b"h", b"h2"])), b"+OK\r\n");
    // COPY makes a table of its own.
    assert_eq!(request(&mut stream, &encode(&[b"COPY", b"h2", b"h3"])), b":1\r\n");
    assert_eq!(reserved_entries(&mut stream), 9);
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(reserved_entries(&mut stream), 9);
    assert_eq!(request(&mut stream, &encode(&[b"HGET", b"h2", b"small"])), b"$1\r\nv\r\n");
    // DEL leaves h2's fields to the sweep; h3 keeps its own.
    assert_eq!(request(&mut stream, &encode(&[b"DEL", b"h2"])), b":1\r\n");
    swept_to(&mut stream, 5);
    assert_eq!(request(&mut stream, &encode(&[b"HSTRLEN", b"h3", b"a"])), b":614400\r\n");
    // An overwrite by SET, and expiry, leave theirs too.
    assert_eq!(request(&mut stream, &encode(&[b"COPY", b"h3", b"h4"])), b":1\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"SET", b"h3", b"now a string"])), b"+OK\r\n");
    swept_to(&mut stream, 5);
    assert_eq!(request(&mut stream, &encode(&[b"COPY", b"h4", b"h5"])), b":1\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"PEXPIRE", b"h5", b"100"])), b":1\r\n");
    swept_to(&mut stream, 5);
    // HDEL of every field removes the key and the table at once.
    assert_eq!(request(&mut stream, &encode(&[b"COPY", b"h4", b"h6"])), b":1\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"HDEL", b"h6", b"a", b"b", b"small"])), b":3\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"EXISTS", b"h6"])), b":0\r\n");
    assert_eq!(reserved_entries(&mut stream), 5);
    assert_eq!(request(&mut stream, &encode(&[b"DBSIZE"])), b":2\r\n");
    // A big set is a table too, swept alike once its key goes.
    let mut sadd: Vec<Vec<u8>> = vec![b"SADD".to_vec(), b"set".to_vec()];
    sadd.extend((0..400).map(|i| format!("member-{i:0>30}").into_bytes()));
    let refs: Vec<&[u8]> = sadd.iter().map(Vec::as_slice).collect();
    assert_eq!(request(&mut stream, &encode(&refs)), b":400\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"OBJECT", b"ENCODING", b"set"])), b"$9\r\nhashtable\r\n");
    assert_eq!(reserved_entries(&mut stream), 5 + 401);
    // MEMORY USAGE counts a table's entries (from a sample, or all).
    let usage = |stream: &mut std::net::TcpStream, extra: &[&[u8]]| -> i64 {
        let mut command: Vec<&[u8]> = vec![b"MEMORY", b"USAGE", b"set"];
        command.extend_from_slice(extra);
        let reply = request(stream, &encode(&command));
        String::from_utf8_lossy(&reply[1..]).trim().parse().unwrap()
    };
    // 400 entries of at least a 12-byte header, an 11-byte prefix and
    // 37 bytes of member.
    let (sampled, exact) = (usage(&mut stream, &[]), usage(&mut stream, &[b"SAMPLES", b"0"]));
    assert!(exact >= 400 * 60 && sampled >= 400 * 60, "{sampled} {exact}");
    assert!((sampled - exact).abs() * 10 < exact, "a sample of alike members estimates within 10%: {sampled} {exact}");
    assert_eq!(request(&mut stream, &encode(&[b"RENAME", b"set", b"set2"])), b"+OK\r\n");
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(request(&mut stream, &encode(&[b"SCARD", b"set2"])), b":400\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"UNLINK", b"set2"])), b":1\r\n");
    swept_to(&mut stream, 5);
    assert!(server.terminate());
    let server = Server::start(&path, &[]);
    let mut stream = server.connect();
    assert_eq!(reserved_entries(&mut stream), 5);
    assert_eq!(request(&mut stream, &encode(&[b"DBSIZE"])), b":2\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"HSTRLEN", b"h4", b"b"])), b":614400\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"HSET", b"h4", b"c", b"new"])), b":1\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"HLEN", b"h4"])), b":4\r\n");
}

/// A database written before keys starting with 0xFF 0xFF were reserved
/// and holding one is refused at start, naming the key, not misread.
#[test]
fn a_database_holding_a_reserved_key_is_refused_at_start() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    {
        let db = scaledkv::Db::open(&path, scaledkv::Options::default()).unwrap();
        db.put(b"\xff\xffold", b"\x00v").unwrap();
    }
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_scaledkv-server"))
        .args(["--port", "0", "--dir"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("0xFF 0xFF") && stderr.contains("old"), "{stderr}");
}

#[test]
fn config_get_reports_the_gc_space_budget_and_set_refuses_it() {
    let (_dir, server) = start(&["--gc-space-amp", "1.5"]);
    let mut stream = server.connect();
    assert_eq!(
        request(&mut stream, &encode(&[b"CONFIG", b"GET", b"gc-space-amp"])),
        b"*2\r\n$12\r\ngc-space-amp\r\n$3\r\n1.5\r\n"
    );
    assert_eq!(
        request(&mut stream, &encode(&[b"CONFIG", b"SET", b"gc-space-amp", b"3"])),
        b"-ERR CONFIG SET failed (possibly related to argument 'gc-space-amp') - can't set immutable config\r\n"
    );
}

/// INFO's `instantaneous_*` rates rise while commands come in and fall
/// back to zero once they stop, as Redis's.
#[test]
fn instantaneous_rates_follow_the_load() {
    let (_dir, server) = start(&[]);
    let mut info_con = server.connect();
    let mut rates = || {
        let info = String::from_utf8(request(&mut info_con, &encode(&[b"INFO", b"stats"]))).unwrap();
        let field = |name: &str| -> f64 {
            let line = info.lines().find_map(|line| line.strip_prefix(name)).unwrap_or_else(|| panic!("{name}"));
            line.trim().parse().unwrap()
        };
        [field("instantaneous_ops_per_sec:"), field("instantaneous_input_kbps:"), field("instantaneous_output_kbps:")]
    };
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load = {
        let (stop, mut stream) = (stop.clone(), server.connect());
        std::thread::spawn(move || {
            let batch = encode(&[b"SET", b"k", b"v"]).repeat(100);
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                stream.write_all(&batch).unwrap();
                let mut replies = 0;
                let mut buf = [0u8; 4096];
                while replies < 500 {
                    replies += stream.read(&mut buf).unwrap();
                }
            }
        })
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while rates().contains(&0.0) {
        assert!(std::time::Instant::now() < deadline, "no rate rose under load: {:?}", rates());
        std::thread::sleep(Duration::from_millis(100));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    load.join().unwrap();
    // INFO's own requests keep the input and output rates just above zero.
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while rates()[0] > 20.0 {
        assert!(std::time::Instant::now() < deadline, "the rate stayed up once idle: {:?}", rates());
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// `--loglevel` and CONFIG SET loglevel choose what the server logs, by
/// Redis's names: at `warning` the start's and SHUTDOWN's notices are not
/// written, at `notice` they are.
#[test]
fn the_log_level_is_chosen_by_flag_and_by_config_set() {
    // What the server wrote to stderr, started with `flags`, once `then`
    // has run on a connection and SHUTDOWN has stopped it.
    let run = |flags: &[&str], then: &dyn Fn(&mut TcpStream)| -> String {
        let dir = tempfile::tempdir().unwrap();
        let port_file = dir.path().join("port");
        let child = std::process::Command::new(env!("CARGO_BIN_EXE_scaledkv-server"))
            .args(["--port", "0", "--dir"])
            .arg(dir.path().join("db"))
            .arg("--port-file")
            .arg(&port_file)
            .args(flags)
            .env_remove("RUST_LOG")
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        let port: u16 = loop {
            if let Some(port) = std::fs::read_to_string(&port_file).ok().and_then(|p| p.trim().parse().ok()) {
                break port;
            }
            assert!(std::time::Instant::now() < deadline, "the server did not start");
            std::thread::sleep(Duration::from_millis(10));
        };
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        then(&mut stream);
        stream.write_all(&encode(&[b"SHUTDOWN"])).unwrap();
        let output = child.wait_with_output().unwrap();
        String::from_utf8_lossy(&output.stderr).into_owned()
    };
    let quiet_then_loud = run(&["--loglevel", "WARNING"], &|stream| {
        let level = request(stream, &encode(&[b"CONFIG", b"GET", b"loglevel"]));
        assert_eq!(level, b"*2\r\n$8\r\nloglevel\r\n$7\r\nwarning\r\n");
        assert_eq!(request(stream, &encode(&[b"CONFIG", b"SET", b"loglevel", b"notice"])), b"+OK\r\n");
    });
    assert!(!quiet_then_loud.contains("ready to accept connections"), "{quiet_then_loud}");
    assert!(quiet_then_loud.contains("SHUTDOWN requested"), "{quiet_then_loud}");
    let loud_then_quiet = run(&[], &|stream| {
        assert_eq!(request(stream, &encode(&[b"CONFIG", b"SET", b"loglevel", b"warning"])), b"+OK\r\n");
    });
    assert!(loud_then_quiet.contains("ready to accept connections"), "{loud_then_quiet}");
    assert!(!loud_then_quiet.contains("SHUTDOWN requested"), "{loud_then_quiet}");
}

/// Every parameter CONFIG GET gives takes its own value back through
/// CONFIG SET (or is immutable): what an all-or-none CONFIG SET relies on
/// to put back the ones it set before a refused value.
#[test]
fn every_parameter_takes_back_the_value_config_get_gives() {
    let (_dir, server) = start(&["--maxmemory", "64mb", "--requirepass", "pw"]);
    let mut con =
        redis::Client::open(format!("redis://:pw@127.0.0.1:{}/", server.port)).unwrap().get_connection().unwrap();
    let all: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("*").query(&mut con).unwrap();
    assert!(all.len() > 60, "{all:?}");
    for pair in all.chunks(2) {
        let result = redis::cmd("CONFIG").arg("SET").arg(&pair[0]).arg(&pair[1]).query::<()>(&mut con);
        if let Err(error) = result {
            assert!(error.to_string().contains("can't set immutable config"), "{} {:?}: {error}", pair[0], pair[1]);
        }
    }
    let again: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("*").query(&mut con).unwrap();
    assert_eq!(again, all);
}

/// What a write survives is fixed at start: CONFIG SET of save,
/// appendonly and appendfsync takes what ScaledKV already does (scripts
/// send `save ""`, `appendonly yes`) and refuses anything else, saying why,
/// with Redis's errors for values Redis refuses too; so do the flags of
/// these names at start.
#[test]
fn config_set_of_persistence_accepts_what_is_already_true() {
    for (durability, appendonly, appendfsync) in [("sync", "yes", "always"), ("buffered", "no", "no")] {
        let (_dir, server) = start(&["--durability", durability]);
        let mut stream = server.connect();
        let mut set = |name: &str, value: &str| {
            let reply = request(&mut stream, &encode(&[b"CONFIG", b"SET", name.as_bytes(), value.as_bytes()]));
            String::from_utf8(reply).unwrap()
        };
        for (name, value) in [("save", ""), ("save", "  "), ("appendonly", appendonly), ("appendfsync", appendfsync)] {
            assert_eq!(set(name, value), "+OK\r\n", "{durability}: {name} {value:?}");
        }
        assert_eq!(set("APPENDFSYNC", &appendfsync.to_uppercase()), "+OK\r\n");
        let other = if appendonly == "yes" { "no" } else { "yes" };
        assert_eq!(
            set("appendonly", other),
            format!(
                "-ERR CONFIG SET failed (possibly related to argument 'appendonly') - appendonly is {appendonly} \
                 while the server runs: --durability {durability} chose it when it started\r\n"
            )
        );
        assert!(set("appendfsync", "everysec").contains("appendfsync is"), "{durability}");
        assert!(set("save", "900 1").contains("ScaledKV takes no snapshots"), "{durability}");
        assert!(set("replica-read-only", "no").contains("always read-only"), "{durability}");
        // Redis's own errors first.
        for (name, value, error) in [
            ("save", "900", "Invalid save parameters"),
            ("save", "0 1", "Invalid save parameters"),
            ("save", "60 x", "Invalid save parameters"),
            ("appendonly", "maybe", "argument must be 'yes' or 'no'"),
            ("appendfsync", "sometimes", "argument(s) must be one of the following: everysec, always, no"),
        ] {
            let reply = set(name, value);
            assert_eq!(
                reply,
                format!("-ERR CONFIG SET failed (possibly related to argument '{name}') - {error}\r\n"),
                "{name} {value:?}"
            );
        }
        assert_eq!(request(&mut stream, &encode(&[b"CONFIG", b"GET", b"save"])), b"*2\r\n$4\r\nsave\r\n$0\r\n\r\n");
    }
    // redis-server's own flags at start: what is true is taken, the rest
    // stops the server saying why.
    let (_dir, server) =
        start(&["--save", "", "--appendonly", "yes", "--appendfsync", "always", "--protected-mode", "no"]);
    let mut stream = server.connect();
    assert_eq!(request(&mut stream, &encode(&[b"PING"])), b"+PONG\r\n");
    let dir = tempfile::tempdir().unwrap();
    let refused = std::process::Command::new(env!("CARGO_BIN_EXE_scaledkv-server"))
        .args(["--port", "0", "--save", "", "--appendonly", "no", "--dir"])
        .arg(dir.path())
        .output()
        .unwrap();
    assert!(!refused.status.success());
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(stderr.contains("appendonly is yes while the server runs: --durability sync"), "{stderr}");
}

/// Protected mode, as Redis's: on, it still serves loopback clients (a
/// client from another host, with no password set, gets Redis's DENIED:
/// `server::tests`); CONFIG SET turns it on and off.
#[test]
fn protected_mode_serves_loopback_clients_and_is_set_by_config_set() {
    let (_dir, server) = start(&["--protected-mode", "yes"]);
    let mut con = client(&server);
    let mode: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("protected-mode").query(&mut con).unwrap();
    assert_eq!(mode, ["protected-mode", "yes"]);
    assert_eq!(redis::cmd("PING").query::<String>(&mut client(&server)).unwrap(), "PONG");
    let _: () = redis::cmd("CONFIG").arg("SET").arg("protected-mode").arg("no").query(&mut con).unwrap();
    let mode: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("protected-mode").query(&mut con).unwrap();
    assert_eq!(mode, ["protected-mode", "no"]);
    let error = redis::cmd("CONFIG").arg("SET").arg("protected-mode").arg("maybe").query::<()>(&mut con).unwrap_err();
    assert!(error.to_string().contains("argument must be 'yes' or 'no'"), "{error}");
}

/// CONFIG REWRITE writes what CONFIG SET and REPLICAOF changed into the
/// config file the server started with, and the next start takes it up;
/// without a config file it is Redis's error.
#[test]
fn config_rewrite_keeps_what_config_set_changed_across_a_restart() {
    let (_dir, server) = start(&[]);
    let mut con = client(&server);
    let error = redis::cmd("CONFIG").arg("REWRITE").query::<()>(&mut con).unwrap_err();
    assert!(error.to_string().contains("The server is running without a config file"), "{error}");
    drop((con, server));

    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("scaledkv.toml");
    std::fs::write(&file, "# kept as written\nslowlog-max-len = 64 # a note\n").unwrap();
    let config = file.to_str().unwrap();
    let changed = [
        ("maxclients", "77"),
        ("timeout", "30"),
        ("proto-max-bulk-len", "1000000"),
        ("notify-keyspace-events", "xK"),
        ("client-output-buffer-limit", "normal 0 0 0 slave 1000 500 5 pubsub 2000 1000 10"),
        ("maxmemory-policy", "allkeys-lru"),
        ("busy-reply-threshold", "900"),
        ("script-memory-limit", "100000000"),
        ("slowlog-log-slower-than", "-1"),
        ("slowlog-max-len", "16"),
        ("latency-monitor-threshold", "5"),
        ("masterauth", "secret"),
        ("masteruser", "bob"),
        ("repl-backlog-size", "2000000"),
        ("tracking-table-max-keys", "500"),
        ("latency-tracking", "no"),
        ("rdbcompression", "no"),
        ("dbfilename", "other.rdb"),
        ("lfu-log-factor", "7"),
        ("lfu-decay-time", "3"),
        ("replica-priority", "0"),
        ("shutdown-timeout", "3"),
        ("acllog-max-len", "5"),
        ("min-replicas-to-write", "0"),
        ("min-replicas-max-lag", "30"),
        ("latency-tracking-info-percentiles", "90 99.99"),
    ];
    let get = |con: &mut redis::Connection, name: &str| -> String {
        let pair: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(name).query(con).unwrap();
        pair[1].clone()
    };
    let mut server = Server::start(&dir.path().join("data"), &["--config", config]);
    let mut con = client(&server);
    for (name, value) in changed {
        let _: () = redis::cmd("CONFIG").arg("SET").arg(name).arg(value).query(&mut con).unwrap();
    }
    // A master that does not answer: the setting is what is kept.
    let _: () = redis::cmd("REPLICAOF").arg("127.0.0.1").arg("1").query(&mut con).unwrap();
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut con).unwrap();
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(text.starts_with("# kept as written\nslowlog-max-len = 16 # a note\n"), "{text}");
    assert!(text.contains("replicaof = \"127.0.0.1 1\"\n"), "{text}");
    assert!(!text.contains("rdbcompression = \"yes\"") && !text.contains("maxmemory ="), "{text}");
    drop(con);
    assert!(server.terminate());

    let server = Server::start(&dir.path().join("data"), &["--config", config]);
    let mut con = client(&server);
    for (name, value) in changed {
        assert_eq!(get(&mut con, name), value, "{name} after the restart");
    }
    let role: Vec<redis::Value> = redis::cmd("ROLE").query(&mut con).unwrap();
    assert_eq!(
        role[..3],
        [Value::BulkString(b"slave".to_vec()), Value::BulkString(b"127.0.0.1".to_vec()), Value::Int(1)]
    );
    // REPLICAOF NO ONE takes the line out again.
    let _: () = redis::cmd("REPLICAOF").arg("NO").arg("ONE").query(&mut con).unwrap();
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut con).unwrap();
    assert!(!std::fs::read_to_string(&file).unwrap().contains("replicaof"));
}

/// `acllog-max-len` bounds ACL LOG, `latency-tracking-info-percentiles`
/// chooses INFO latencystats' percentiles, as in Redis.
#[test]
fn acl_log_length_and_latency_percentiles_are_settings() {
    let (_dir, server) = start(&[]);
    let mut con = client(&server);
    let _: () = redis::cmd("CONFIG").arg("SET").arg("acllog-max-len").arg("2").query(&mut con).unwrap();
    for user in ["a", "b", "c"] {
        assert!(redis::cmd("AUTH").arg(user).arg("wrong").query::<()>(&mut con).is_err());
    }
    let log: Vec<redis::Value> = redis::cmd("ACL").arg("LOG").query(&mut con).unwrap();
    assert_eq!(log.len(), 2);
    let _: () = redis::cmd("SET").arg("k").arg("v").query(&mut con).unwrap();
    let _: () = redis::cmd("CONFIG")
        .arg("SET")
        .arg("latency-tracking-info-percentiles")
        .arg("90 99.99")
        .query(&mut con)
        .unwrap();
    let info: String = redis::cmd("INFO").arg("latencystats").query(&mut con).unwrap();
    let line = info.lines().find(|line| line.starts_with("latency_percentiles_usec_set:")).unwrap();
    let labels: Vec<&str> = line.split(':').nth(1).unwrap().split(',').map(|p| p.split('=').next().unwrap()).collect();
    assert_eq!(labels, ["p90", "p99.99"], "{line}");
}

/// A redis.conf given first, as redis-server takes one, and Redis's
/// parameters as `--name value`: ScaledKV's settings from it, Redis's
/// others kept with their checks; CONFIG REWRITE rewrites it in Redis's
/// format, and what it wrote is read back alike after a restart (and by
/// a real redis-server, where installed).
#[test]
fn a_redis_conf_configures_the_server_and_config_rewrite_keeps_it() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("redis.conf");
    let text = "# from a Redis deployment\nbind 127.0.0.1 -::1\nprotected-mode no\nmaxclients 77\n\
                timeout 30\nsave \"\"\nappendonly yes\nhz 20\nhash-max-ziplist-entries 64\n\
                maxmemory-policy allkeys-lru\nnotify-keyspace-events \"\"\ndatabases 1\n\
                client-output-buffer-limit normal 0 0 0\nclient-output-buffer-limit pubsub 1mb 512kb 9\n";
    std::fs::write(&conf, text).unwrap();
    let data = dir.path().join("data");
    let get = |con: &mut redis::Connection, name: &str| -> String {
        let pair: Vec<String> = redis::cmd("CONFIG").arg("GET").arg(name).query(con).unwrap();
        pair[1].clone()
    };
    let mut server = Server::start_with_redis_conf(&conf, &data, &["--maxclients", "88", "--activerehashing", "no"]);
    let mut con = client(&server);
    // The command line wins over the file, as in Redis (and CONFIG
    // REWRITE writes it into the file).
    assert_eq!(get(&mut con, "maxclients"), "88");
    assert_eq!(get(&mut con, "timeout"), "30");
    assert_eq!(get(&mut con, "hz"), "20");
    assert_eq!(get(&mut con, "hash-max-listpack-entries"), "64");
    assert_eq!(get(&mut con, "activerehashing"), "no");
    assert_eq!(get(&mut con, "maxmemory-policy"), "allkeys-lru");
    assert_eq!(
        get(&mut con, "client-output-buffer-limit"),
        "normal 0 0 0 slave 268435456 67108864 60 pubsub 1048576 524288 9"
    );
    let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
    assert!(info.contains(&format!("config_file:{}", std::fs::canonicalize(&conf).unwrap().display())), "{info}");
    for (name, value) in [("hz", "50"), ("timeout", "5"), ("lazyfree-lazy-user-del", "yes"), ("requirepass", "a b\"c")]
    {
        let _: () = redis::cmd("CONFIG").arg("SET").arg(name).arg(value).query(&mut con).unwrap();
    }
    let _: () = redis::cmd("AUTH").arg("a b\"c").query(&mut con).unwrap();
    let _: () = redis::cmd("CONFIG").arg("REWRITE").query(&mut con).unwrap();
    let written = std::fs::read_to_string(&conf).unwrap();
    assert!(written.starts_with("# from a Redis deployment\nbind 127.0.0.1 -::1\n"), "{written}");
    assert!(written.contains("\ntimeout 5\n") && written.contains("\nhz 50\n"), "{written}");
    assert!(written.contains("# Generated by CONFIG REWRITE\n"), "{written}");
    assert!(
        written.contains("\nlazyfree-lazy-user-del yes\n") && written.contains("\nrequirepass \"a b\\\"c\"\n"),
        "{written}"
    );
    drop(con);
    assert!(server.terminate());
    let server = Server::start_with_redis_conf(&conf, &data, &[]);
    let mut con = redis::Client::open(format!("redis://:a%20b%22c@127.0.0.1:{}/", server.port))
        .unwrap()
        .get_connection()
        .unwrap();
    for (name, value) in [
        ("hz", "50"),
        ("timeout", "5"),
        ("lazyfree-lazy-user-del", "yes"),
        ("maxclients", "88"),
        ("activerehashing", "no"),
    ] {
        assert_eq!(get(&mut con, name), value, "{name} after the restart");
    }
    drop((con, server));
    // Redis reads the file ScaledKV wrote (`--port 0`: it then exits,
    // listening nowhere).
    match std::process::Command::new("redis-server").arg(&conf).args(["--port", "0", "--dir"]).arg(dir.path()).output()
    {
        Ok(output) => {
            let said = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
            assert!(
                !said.contains("FATAL CONFIG FILE ERROR") && said.contains("Configuration loaded"),
                "{written}\n{said}"
            );
        }
        Err(_) => eprintln!("NOTICE: redis-server not found; not reading the rewritten redis.conf with it"),
    }
}

/// `--daemonize yes` (or the redis.conf line) detaches the server: the
/// command returns at once with success, the server's id is in the pid
/// file while it runs, its log in the log file; SHUTDOWN removes the pid
/// file.
#[test]
fn a_daemonized_server_writes_its_pid_file_and_log_file() {
    struct Kill(Option<i32>);
    impl Drop for Kill {
        fn drop(&mut self) {
            if let Some(pid) = self.0 {
                // SAFETY: a signal to the daemon this test started.
                unsafe { libc::kill(pid, libc::SIGKILL) };
            }
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let (pid_path, log_path, port_path) =
        (dir.path().join("server.pid"), dir.path().join("server.log"), dir.path().join("port"));
    let conf = dir.path().join("redis.conf");
    std::fs::write(&conf, format!("daemonize yes\npidfile {}\n", pid_path.display())).unwrap();
    let status = std::process::Command::new(env!("CARGO_BIN_EXE_scaledkv-server"))
        .arg(&conf)
        .args(["--port", "0", "--logfile"])
        .arg(&log_path)
        .arg("--port-file")
        .arg(&port_path)
        .arg("--dir")
        .arg(dir.path().join("data"))
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let port: u16 = loop {
        if let Some(port) = std::fs::read_to_string(&port_path).ok().and_then(|p| p.trim().parse().ok()) {
            break port;
        }
        assert!(std::time::Instant::now() < deadline, "the daemon did not start");
        std::thread::sleep(Duration::from_millis(10));
    };
    let pid: i32 = std::fs::read_to_string(&pid_path).unwrap().trim().parse().unwrap();
    let mut daemon = Kill(Some(pid));
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
    let info: String = redis::cmd("INFO").arg("server").query(&mut con).unwrap();
    assert!(info.contains(&format!("process_id:{pid}\r\n")), "{info}");
    let settings: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("daemonize").query(&mut con).unwrap();
    assert_eq!(settings, ["daemonize", "yes"]);
    let _ = redis::cmd("SHUTDOWN").query::<()>(&mut con);
    while pid_path.exists() {
        assert!(std::time::Instant::now() < deadline, "the pid file stayed");
        std::thread::sleep(Duration::from_millis(10));
    }
    // SAFETY: signal 0 only asks whether the process exists.
    while unsafe { libc::kill(pid, 0) } == 0 {
        assert!(std::time::Instant::now() < deadline, "the daemon did not exit");
        std::thread::sleep(Duration::from_millis(10));
    }
    daemon.0 = None;
    let log = std::fs::read_to_string(&log_path).unwrap();
    assert!(log.contains("ready to accept connections") && !log.contains("\x1b["), "{log}");
}

/// Redis's `tcp-backlog` is the listen queue's length (`ss` shows it as
/// the listener's Send-Q), and CONFIG GET gives it.
#[test]
fn tcp_backlog_sets_the_listen_queue() {
    let (_dir, server) = start(&["--tcp-backlog", "7"]);
    let mut con = client(&server);
    let backlog: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("tcp-backlog").query(&mut con).unwrap();
    assert_eq!(backlog, ["tcp-backlog", "7"]);
    match std::process::Command::new("ss").args(["-ltnH", &format!("sport = :{}", server.port)]).output() {
        Ok(output) => {
            let text = String::from_utf8_lossy(&output.stdout).into_owned();
            let send_q = text.split_whitespace().nth(2);
            assert_eq!(send_q, Some("7"), "{text}");
        }
        Err(_) => eprintln!("NOTICE: ss not found; the listen queue's length is not read back"),
    }
}

/// What a redis.conf asks that ScaledKV does not do stops the start,
/// naming the line and why.
#[test]
fn a_redis_conf_asking_for_what_scaledkv_lacks_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let conf = dir.path().join("redis.conf");
    for (text, expected) in [
        ("port 0\ndatabases 16\n", "ScaledKV has one database"),
        ("port 0\nreplica-announce-port 7000\n", "replica-announce-port: it stays 0"),
        ("port 0\nhz x\n", "argument couldn't be parsed into an integer"),
        ("port 0\nnosuch 1\n", "line 2: 'nosuch 1': Bad directive or wrong number of arguments"),
        ("port 0\nappendonly no\n", "appendonly is yes while the server runs"),
    ] {
        std::fs::write(&conf, text).unwrap();
        let output = std::process::Command::new(env!("CARGO_BIN_EXE_scaledkv-server"))
            .arg(&conf)
            .arg("--dir")
            .arg(dir.path().join("data"))
            .output()
            .unwrap();
        assert!(!output.status.success(), "{text:?}");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(expected), "{text:?}: {stderr}");
    }
}

/// Redis's `unixsocket`: RESP on a Unix socket beside TCP, or alone with
/// port 0; clients listed as Redis lists them; the file's mode from
/// `unixsocketperm`; removed at shutdown, a stale one replaced at start,
/// one a server still listens on refused.
#[test]
fn a_unix_socket_serves_clients_beside_tcp_or_alone() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::net::UnixStream;
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("db");
    let path = dir.path().join("scaledkv.sock");
    let shown = path.to_str().unwrap();
    let connect = || {
        let stream = UnixStream::connect(&path).expect("the socket takes clients");
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream
    };
    let ask = |stream: &mut UnixStream, args: &[&[u8]]| String::from_utf8(request(stream, &encode(args))).unwrap();
    let port = common::free_port();
    let mut server = Server::start_at(&data, port, &["--unixsocket", shown, "--unixsocketperm", "700"]);
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o700);
    let mut unix = connect();
    assert_eq!(ask(&mut unix, &[b"SET", b"k", b"over the socket"]), "+OK\r\n");
    let mut tcp = server.connect();
    assert_eq!(request(&mut tcp, &encode(&[b"GET", b"k"])), b"$15\r\nover the socket\r\n");
    let info = ask(&mut unix, &[b"CLIENT", b"INFO"]);
    assert!(info.contains(&format!(" addr={shown}:0 laddr={shown}:0 ")), "{info}");
    assert!(info.contains(" flags=U "), "{info}");
    let info = String::from_utf8(request(&mut tcp, &encode(&[b"CLIENT", b"INFO"]))).unwrap();
    assert!(info.contains(" flags=N "), "a TCP client: {info}");
    let got = ask(&mut unix, &[b"CONFIG", b"GET", b"unixsocket*"]);
    let expected =
        format!("*4\r\n$10\r\nunixsocket\r\n${}\r\n{shown}\r\n$14\r\nunixsocketperm\r\n$3\r\n700\r\n", shown.len());
    assert_eq!(got, expected);
    assert_eq!(
        ask(&mut unix, &[b"CONFIG", b"SET", b"unixsocketperm", b"777"]),
        "-ERR CONFIG SET failed (possibly related to argument 'unixsocketperm') - can't set immutable config\r\n"
    );
    // Through a client library's unix:// address.
    let mut con = redis::Client::open(format!("unix://{shown}")).unwrap().get_connection().unwrap();
    let value: String = con.get("k").unwrap();
    assert_eq!(value, "over the socket");
    drop((unix, tcp, con));
    // A second server on a socket that is in use does not start.
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_scaledkv-server"))
        .args(["--port", "0", "--unixsocket", shown, "--dir"])
        .arg(dir.path().join("other"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("another server listens on it"));
    assert!(server.terminate());
    assert!(!path.exists(), "removed at shutdown");
    // Port 0 beside a socket: the socket alone, as Redis's `port 0`. A
    // socket file a killed server left is replaced.
    let mut server = Server::start(&data, &["--unixsocket", shown]);
    server.kill();
    assert!(path.exists(), "a killed server leaves its socket file");
    let server = Server::start(&data, &["--unixsocket", shown]);
    assert_eq!(server.port, 0, "no TCP port");
    let mut unix = connect();
    assert_eq!(ask(&mut unix, &[b"GET", b"k"]), "$15\r\nover the socket\r\n", "kept across restarts");
    assert!(ask(&mut unix, &[b"INFO", b"server"]).contains("\r\ntcp_port:0\r\n"));
    // A file that is not a socket is left alone.
    drop((unix, server));
    std::fs::remove_file(&path).unwrap();
    std::fs::write(&path, "not a socket").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_scaledkv-server"))
        .args(["--port", "0", "--unixsocket", shown, "--dir"])
        .arg(&data)
        .output()
        .unwrap();
    assert!(!output.status.success());
    assert!(String::from_utf8_lossy(&output.stderr).contains("is not a socket"));
    assert_eq!(std::fs::read_to_string(&path).unwrap(), "not a socket");
}

/// A setting in the config file that CONFIG SET would refuse stops the
/// start with CONFIG SET's reason.
#[test]
fn a_bad_setting_in_the_config_file_stops_the_start() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("scaledkv.toml");
    std::fs::write(&file, "dbfilename = \"a/b.rdb\"\n").unwrap();
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_scaledkv-server"))
        .args(["--port", "0", "--config", file.to_str().unwrap(), "--dir"])
        .arg(dir.path().join("data"))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("dbfilename") && stderr.contains("can't be a path"), "{stderr}");
}

#[test]
fn transactions_are_atomic_and_watch_aborts_on_change() {
    // Three I/O threads: the watching client and the writer are served by
    // different ones (a new connection goes to the least loaded thread).
    let (_dir, server) = start(&["--threads", "3"]);
    let mut con = client(&server);
    let mut other = client(&server);
    let threads: Vec<String> = redis::cmd("CONFIG").arg("GET").arg("io-threads").query(&mut con).unwrap();
    assert_eq!(threads, ["io-threads", "3"]);
    let error = redis::cmd("CONFIG").arg("SET").arg("io-threads").arg("4").query::<()>(&mut con).unwrap_err();
    assert!(error.to_string().contains("can't set immutable config"), "{error}");
    let (a, b): (i64, i64) = redis::pipe().atomic().incr("x", 1).incr("x", 10).query(&mut con).unwrap();
    assert_eq!((a, b), (1, 11));
    let _: () = redis::cmd("WATCH").arg("x").query(&mut con).unwrap();
    let _: () = other.set("x", 100).unwrap();
    let result: Option<(i64,)> = redis::pipe().atomic().incr("x", 1).query(&mut con).unwrap();
    assert_eq!(result, None, "EXEC must abort after a watched key changed");
    assert_eq!(con.get::<_, i64>("x").unwrap(), 100);
    // Errors while queueing abort the whole transaction.
    let mut stream = server.connect();
    assert_eq!(request(&mut stream, b"MULTI\r\n"), b"+OK\r\n");
    assert_eq!(request(&mut stream, b"SET y 1\r\n"), b"+QUEUED\r\n");
    assert_eq!(request(&mut stream, b"NOSUCHCOMMAND\r\n").first(), Some(&b'-'));
    assert_eq!(request(&mut stream, b"EXEC\r\n"), b"-EXECABORT Transaction discarded because of previous errors.\r\n");
    assert_eq!(con.get::<_, Option<i64>>("y").unwrap(), None);
}

#[test]
fn concurrent_increments_are_not_lost() {
    // The six clients spread over three I/O threads.
    let (_dir, server) = start(&["--threads", "3"]);
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let mut con = client(&server);
            std::thread::spawn(move || {
                for _ in 0..300 {
                    let _: i64 = con.incr("shared", 1).unwrap();
                    let _: () = con.append("log", "x").unwrap();
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let mut con = client(&server);
    assert_eq!(con.get::<_, i64>("shared").unwrap(), 1800);
    assert_eq!(con.strlen::<_, i64>("log").unwrap(), 1800);
}

/// Read-modify-writes in pipelines join one run and commit once: each
/// reads the run's earlier writes (its own counter counts 1, 2, 3 ... in
/// one pipeline), and across six clients on three I/O threads no update
/// is lost, with blind writes, reads and errors between them.
#[test]
fn pipelined_read_modify_writes_are_not_lost() {
    let (_dir, server) = start(&["--threads", "3"]);
    const ROUNDS: usize = 200;
    let threads: Vec<_> = (0..6)
        .map(|client| {
            let mut stream = server.connect();
            std::thread::spawn(move || {
                let own = format!("own:{client}");
                let mut count = 0;
                for round in 0..ROUNDS {
                    let mut pipeline = Vec::new();
                    let mut expected: Vec<Vec<u8>> = Vec::new();
                    for i in 0..4 {
                        count += 1;
                        pipeline.extend(encode(&[b"INCR", own.as_bytes()]));
                        expected.push(format!(":{count}\r\n").into_bytes());
                        pipeline.extend(encode(&[b"INCR", b"shared"]));
                        expected.push(Vec::new());
                        pipeline.extend(encode(&[b"HINCRBY", b"h", b"shared", b"2"]));
                        expected.push(Vec::new());
                        pipeline.extend(encode(&[b"APPEND", b"log", b"x"]));
                        expected.push(Vec::new());
                        // A blind write, an error and a read between them.
                        let key = format!("blind:{client}:{i}");
                        pipeline.extend(encode(&[b"SET", key.as_bytes(), round.to_string().as_bytes()]));
                        expected.push(b"+OK\r\n".to_vec());
                        if i == 3 {
                            pipeline.extend(encode(&[b"HINCRBY", key.as_bytes(), b"f", b"1"]));
                            expected.push(
                                b"-WRONGTYPE Operation against a key holding the wrong kind of value\r\n".to_vec(),
                            );
                        }
                        if i == 1 {
                            pipeline.extend(encode(&[b"GET", own.as_bytes()]));
                            expected.push(format!("${}\r\n{count}\r\n", count.to_string().len()).into_bytes());
                        }
                    }
                    stream.write_all(&pipeline).unwrap();
                    for want in expected {
                        let reply = read_reply(&mut stream);
                        if !want.is_empty() {
                            assert_eq!(String::from_utf8_lossy(&reply), String::from_utf8_lossy(&want));
                        } else {
                            assert_eq!(reply[0], b':', "{}", String::from_utf8_lossy(&reply));
                        }
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let mut con = client(&server);
    let total = (6 * ROUNDS * 4) as i64;
    assert_eq!(con.get::<_, i64>("shared").unwrap(), total);
    assert_eq!(con.hget::<_, _, i64>("h", "shared").unwrap(), 2 * total);
    assert_eq!(con.strlen::<_, i64>("log").unwrap(), total);
    for client in 0..6 {
        assert_eq!(con.get::<_, i64>(format!("own:{client}")).unwrap(), (ROUNDS * 4) as i64);
    }
}

#[test]
fn auth_gates_every_command_but_auth_hello_quit() {
    let (_dir, server) = start(&["--requirepass", "s3cret"]);
    let mut stream = server.connect();
    assert_eq!(request(&mut stream, b"GET a\r\n"), b"-NOAUTH Authentication required.\r\n");
    assert_eq!(
        request(&mut stream, b"AUTH wrong\r\n"),
        b"-WRONGPASS invalid username-password pair or user is disabled.\r\n"
    );
    // Before AUTH only tiny requests are accepted, as in Redis.
    let mut big = server.connect();
    assert_eq!(request(&mut big, b"*20\r\n"), b"-ERR Protocol error: unauthenticated multibulk length\r\n");
    assert_eq!(request(&mut stream, b"AUTH s3cret\r\n"), b"+OK\r\n");
    assert_eq!(request(&mut stream, b"SET a 1\r\n"), b"+OK\r\n");
    let url = format!("redis://:s3cret@127.0.0.1:{}/", server.port);
    let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
    assert_eq!(con.get::<_, i64>("a").unwrap(), 1);
}

#[test]
fn runs_of_gets_read_ahead_keep_order_auth_and_errors() {
    // GETs are parsed ahead and prefetched in runs of up to 32 that any
    // other command ends: one write holding every case.
    let (_dir, server) = start(&["--requirepass", "s3cret", "--proto-max-bulk-len", "1000"]);
    let mut stream = server.connect();
    let mut pipeline = b"GET a\r\nGET a\r\nAUTH s3cret\r\nGET a\r\nSET a 1\r\nGET a\r\n".to_vec();
    for _ in 0..40 {
        pipeline.extend_from_slice(b"GET a\r\nget b\r\n");
    }
    pipeline.extend_from_slice(b"GET\r\nGET a b\r\nCONFIG SET proto-max-bulk-len 2000\r\nGET a\r\n");
    pipeline.extend_from_slice(&encode(&[b"GET", &[b'k'; 1500]]));
    pipeline.extend_from_slice(b"GET a\r\n*abc\r\nGET a\r\n");
    stream.write_all(&pipeline).unwrap();
    let noauth = b"-NOAUTH Authentication required.\r\n".to_vec();
    let mut expected: Vec<Vec<u8>> = vec![noauth.clone(), noauth, b"+OK\r\n".to_vec(), b"$-1\r\n".to_vec()];
    expected.extend([b"+OK\r\n".to_vec(), b"$1\r\n1\r\n".to_vec()]);
    for _ in 0..40 {
        expected.extend([b"$1\r\n1\r\n".to_vec(), b"$-1\r\n".to_vec()]);
    }
    expected.push(b"-ERR wrong number of arguments for 'get' command\r\n".to_vec());
    expected.push(b"-ERR wrong number of arguments for 'get' command\r\n".to_vec());
    // The new limit applies to the request after CONFIG SET.
    expected.extend([b"+OK\r\n".to_vec(), b"$1\r\n1\r\n".to_vec(), b"$-1\r\n".to_vec()]);
    expected.push(b"$1\r\n1\r\n".to_vec());
    expected.push(b"-ERR Protocol error: invalid multibulk length\r\n".to_vec());
    for (i, want) in expected.iter().enumerate() {
        assert_eq!(read_reply(&mut stream), *want, "reply {i}");
    }
    let mut rest = Vec::new();
    assert_eq!(stream.read_to_end(&mut rest).unwrap(), 0, "closed after the protocol error");
}

#[test]
fn inline_commands_split_requests_and_garbage() {
    let (_dir, server) = start(&["--proto-max-bulk-len", "1000"]);
    let mut stream = server.connect();
    stream.write_all(b"SET k \"two words\"\r\nGET k\r\n").unwrap();
    assert_eq!(read_reply(&mut stream), b"+OK\r\n");
    assert_eq!(read_reply(&mut stream), b"$9\r\ntwo words\r\n");
    // A request trickling in one byte at a time.
    for byte in encode(&[b"SET", b"slow", b"value"]) {
        stream.write_all(&[byte]).unwrap();
        std::thread::sleep(Duration::from_micros(200));
    }
    assert_eq!(read_reply(&mut stream), b"+OK\r\n");
    // Over the bulk limit: an error, then the connection is closed.
    let mut limited = server.connect();
    assert_eq!(
        request(&mut limited, b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$1001\r\n"),
        b"-ERR Protocol error: invalid bulk length\r\n"
    );
    let mut rest = Vec::new();
    assert_eq!(limited.read_to_end(&mut rest).unwrap(), 0);
    // Garbage: error and close, and other clients do not notice.
    let mut garbage = server.connect();
    assert_eq!(request(&mut garbage, b"*abc\r\n"), b"-ERR Protocol error: invalid multibulk length\r\n");
    let mut random = server.connect();
    let noise: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
    let _ = random.write_all(&noise);
    assert_eq!(request(&mut stream, b"GET k\r\n"), b"$9\r\ntwo words\r\n");
    // A command not built yet: a clear error.
    assert_eq!(request(&mut stream, b"FCALL f 0\r\n").first(), Some(&b'-'));
}

#[test]
fn sigterm_is_a_clean_shutdown_and_data_survives_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut server = Server::start(&path, &["--threads", "2"]);
    let mut con = client(&server);
    // Left open on the other I/O thread: shutdown closes it.
    let mut idle = client(&server);
    let _: () = redis::cmd("PING").query(&mut idle).unwrap();
    for i in 0..200 {
        let _: () = con.set(format!("k{i}"), format!("v{i}")).unwrap();
    }
    let _: () = con.set_ex("ttl", "x", 1000).unwrap();
    drop(con);
    assert!(server.terminate(), "exit status 0 after SIGTERM");
    assert!(redis::cmd("PING").query::<String>(&mut idle).is_err(), "the idle connection is closed");
    let server = Server::start(&path, &[]);
    let mut con = client(&server);
    assert_eq!(con.get::<_, String>("k199").unwrap(), "v199");
    assert!(con.ttl::<_, i64>("ttl").unwrap() > 990);
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut con).unwrap(), 201);
    // SHUTDOWN from a client stops it too.
    let mut stream = server.connect();
    stream.write_all(b"SHUTDOWN\r\n").unwrap();
    let mut rest = Vec::new();
    let _ = stream.read_to_end(&mut rest);
    let mut server = server;
    assert!(server.wait_exit());
}

#[test]
fn limits_timeouts_metrics_and_active_expiry() {
    let dir = tempfile::tempdir().unwrap();
    let metrics_port = common::free_port();
    let server = Server::start(
        &dir.path().join("db"),
        &["--maxclients", "3", "--timeout", "1", "--metrics-port", &metrics_port.to_string()],
    );
    let mut first = server.connect();
    let mut con = client(&server);
    // One pipeline: `first` must not idle past the 1 s timeout before its
    // PING (300 round trips took that long on a loaded machine).
    let mut pipe = redis::pipe();
    for i in 0..300 {
        pipe.pset_ex(format!("gone{i}"), "x", 20).ignore();
    }
    pipe.set("stays", "x").ignore();
    let _: () = pipe.query(&mut con).unwrap();
    assert_eq!(request(&mut first, b"PING\r\n"), b"+PONG\r\n");
    // A subscriber: exempt from the idle timeout, as in Redis.
    let mut third = server.connect();
    request(&mut third, &encode(&[b"SUBSCRIBE", b"news"]));
    let mut fourth = server.connect();
    let mut refused = Vec::new();
    let _ = fourth.read_to_end(&mut refused);
    assert_eq!(refused, b"-ERR max number of clients reached\r\n");
    // Active expiry drops expired keys nobody reads.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut con).unwrap(), 1);
    // `first` has been idle for over a second: closed.
    std::thread::sleep(Duration::from_millis(1500));
    let mut rest = Vec::new();
    assert_eq!(first.read_to_end(&mut rest).unwrap_or(0), 0);
    assert_eq!(request(&mut third, b"PING\r\n"), b"*2\r\n$4\r\npong\r\n$0\r\n\r\n", "an idle subscriber stays");
    let mut http = std::net::TcpStream::connect(("127.0.0.1", metrics_port)).unwrap();
    http.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    let mut body = String::new();
    http.read_to_string(&mut body).unwrap();
    assert!(body.starts_with("HTTP/1.1 200 OK"), "{body}");
    assert!(body.contains("\nscaledkv_expired_keys_total 300\n"), "{body}");
    assert!(body.contains("\nscaledkv_pubsub_channels 1\n"), "{body}");
}

/// With `--gc-space-amp 1`, overwriting one key with large values soon
/// puts the log far over its budget, and then each write first collects a
/// piece of GC, on a thread the runtime's only worker is handed off from:
/// replies, values and other connections stay right.
#[test]
fn writes_that_first_collect_garbage_keep_working() {
    let (_dir, server) = start(&["--gc-space-amp", "1", "--durability", "buffered", "--threads", "1"]);
    let mut con = client(&server);
    let stalled = |con: &mut redis::Connection| -> u64 {
        let info: String = redis::cmd("INFO").arg("persistence").query(con).unwrap();
        let line = info.lines().find_map(|l| l.strip_prefix("gc_stalled_writes:")).unwrap();
        line.trim().parse().unwrap()
    };
    let mut value = vec![b'x'; 60_000];
    let mut round = 0u32;
    // Up to ~1 GB of overwrites; the first stalls come after ~130 MB.
    while round < 16_000 && (!round.is_multiple_of(500) || stalled(&mut con) == 0) {
        round += 1;
        value[..4].copy_from_slice(&round.to_le_bytes());
        let _: () = con.set("k", &value).unwrap();
    }
    assert!(stalled(&mut con) > 0, "no write waited for GC in {round} overwrites");
    // Segments rolled meanwhile: INFO counts the rolls that waited for
    // their next segment, and the time they waited.
    let info: String = redis::cmd("INFO").arg("persistence").query(&mut con).unwrap();
    let field = |name: &str| -> u64 {
        let line = info.lines().find_map(|l| l.strip_prefix(name)).unwrap_or_else(|| panic!("{name} in INFO"));
        line.trim().parse().unwrap()
    };
    let (waits, micros) = (field("log_roll_waits:"), field("log_roll_wait_micros:"));
    assert!(waits > 0 || micros == 0, "{waits} waits, {micros} us");
    let mut other = client(&server);
    assert_eq!(other.get::<_, Vec<u8>>("k").unwrap(), value);
    let _: () = con.set("k2", "after").unwrap();
    assert_eq!(other.get::<_, String>("k2").unwrap(), "after");
}

/// Sorted sets through the `redis` crate's typed API (a leaderboard), in
/// RESP2 and RESP3 (where WITHSCORES gives pairs and scores are doubles),
/// a big one as a table (two entries per member) swept once its key goes,
/// and both across a restart.
#[test]
fn sorted_sets_through_a_client_library() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut server = Server::start(&path, &[]);
    for protocol in ["", "?protocol=resp3"] {
        let url = format!("{}{protocol}", server.url());
        let mut con = redis::Client::open(url).unwrap().get_connection().unwrap();
        let key = format!("board{protocol}");
        let added: i64 = con.zadd_multiple(&key, &[(10.5, "ann"), (7.0, "bob"), (12.0, "cy")]).unwrap();
        assert_eq!(added, 3);
        let top: Vec<(String, f64)> = con.zrevrange_withscores(&key, 0, 1).unwrap();
        assert_eq!(top, vec![("cy".to_string(), 12.0), ("ann".to_string(), 10.5)]);
        let bob: f64 = con.zincr(&key, "bob", 6.5).unwrap();
        assert_eq!(bob, 13.5);
        let rank: Option<i64> = con.zrevrank(&key, "bob").unwrap();
        assert_eq!(rank, Some(0));
        let between: Vec<String> = con.zrangebyscore(&key, 10, 13).unwrap();
        assert_eq!(between, vec!["ann".to_string(), "cy".to_string()]);
        let score: Option<f64> = con.zscore(&key, "nobody").unwrap();
        assert_eq!(score, None);
    }
    let mut stream = server.connect();
    assert_eq!(reserved_entries(&mut stream), 1);
    let mut zadd: Vec<Vec<u8>> = vec![b"ZADD".to_vec(), b"big".to_vec()];
    for i in 0..400 {
        zadd.push(format!("{}", i % 37).into_bytes());
        zadd.push(format!("member-{i:0>30}").into_bytes());
    }
    let refs: Vec<&[u8]> = zadd.iter().map(Vec::as_slice).collect();
    assert_eq!(request(&mut stream, &encode(&refs)), b":400\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"OBJECT", b"ENCODING", b"big"])), b"$8\r\nskiplist\r\n");
    // A member entry and a score entry per member, one block (of at most
    // 512 when made), and the owner record.
    assert_eq!(reserved_entries(&mut stream), 1 + 800 + 1 + 1);
    assert_eq!(request(&mut stream, &encode(&[b"ZCARD", b"big"])), b":400\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"COPY", b"big", b"gone"])), b":1\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"DEL", b"gone"])), b":1\r\n");
    swept_to(&mut stream, 803);
    assert_eq!(request(&mut stream, &encode(&[b"DBSIZE"])), b":3\r\n");
    assert!(server.terminate());
    let server = Server::start(&path, &[]);
    let mut con = client(&server);
    let top: Vec<String> = con.zrevrange("board", 0, -1).unwrap();
    assert_eq!(top, vec!["bob", "cy", "ann"]);
    let lowest: Vec<(String, f64)> = con.zrange_withscores("big", 0, 1).unwrap();
    assert_eq!(lowest, vec![(format!("member-{:0>30}", 0), 0.0), (format!("member-{:0>30}", 37), 0.0)]);
    let card: i64 = con.zcard("big").unwrap();
    assert_eq!(card, 400);
}

/// BZPOPMIN waits for a ZADD from another client, and wakes at once.
#[test]
fn blocking_sorted_set_pops_wait_for_an_add() {
    use std::time::Instant;
    let (_dir, server) = start(&["--threads", "2"]);
    let mut adder = server.connect();
    let mut waiter = server.connect();
    waiter.write_all(&encode(&[b"BZPOPMIN", b"none", b"jobs", b"5"])).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let added = Instant::now();
    assert_eq!(request(&mut adder, &encode(&[b"ZADD", b"jobs", b"2", b"later", b"1", b"first"])), b":2\r\n");
    assert_eq!(read_reply(&mut waiter), b"*3\r\n$4\r\njobs\r\n$5\r\nfirst\r\n$1\r\n1\r\n");
    assert!(added.elapsed() < Duration::from_secs(1), "woken by the add: {:?}", added.elapsed());
    waiter.write_all(&encode(&[b"BZMPOP", b"5", b"1", b"jobs2", b"MAX", b"COUNT", b"2"])).unwrap();
    std::thread::sleep(Duration::from_millis(150));
    assert_eq!(request(&mut adder, &encode(&[b"ZINCRBY", b"jobs2", b"3", b"x"])), b"$1\r\n3\r\n");
    assert_eq!(read_reply(&mut waiter), b"*2\r\n$5\r\njobs2\r\n*1\r\n*2\r\n$1\r\nx\r\n$1\r\n3\r\n");
    assert_eq!(request(&mut adder, &encode(&[b"ZRANGE", b"jobs", b"0", b"-1"])), b"*1\r\n$5\r\nlater\r\n");
}

/// A list table written before chunks (an entry per element, a stub of
/// three words) keeps working: it reads, grows, shrinks and is rewritten
/// as the same commands on a list made now, whose table is in chunks.
#[test]
fn list_tables_of_the_layout_before_chunks_still_work() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let elements: Vec<String> = (0..400).map(|i| format!("element-{i:04}-{}", "x".repeat(i % 30))).collect();
    {
        // The server's own layout, written with the engine alone: the
        // format marker, the stub, the owner record, an entry per element
        // at positions from -100 (a list pushed at its head too).
        let db = scaledkv::Db::open(&path, scaledkv::Options::default()).unwrap();
        db.put(b"\xff\xff\x00format", b"1").unwrap();
        let (id, head) = (7u64, -100i64);
        let stub =
            [&[0x81u8][..], &id.to_le_bytes(), &(elements.len() as u64).to_le_bytes(), &head.to_le_bytes()].concat();
        db.put(b"old", &stub).unwrap();
        db.put(&[&b"\xff\xff\x02"[..], &id.to_be_bytes()].concat(), b"\x01old").unwrap();
        for (i, element) in elements.iter().enumerate() {
            let position = ((head + i as i64) as u64 ^ (1 << 63)).to_be_bytes();
            let key = [&b"\xff\xff\x01"[..], &id.to_be_bytes(), &position].concat();
            db.put(&key, &[&[0x01u8][..], element.as_bytes()].concat()).unwrap();
        }
    }
    let server = Server::start(&path, &[]);
    let mut stream = server.connect();
    let mut fill = vec![&b"RPUSH"[..], b"new"];
    fill.extend(elements.iter().map(|e| e.as_bytes()));
    assert_eq!(request(&mut stream, &encode(&fill)), b":400\r\n");
    let script: &[&[&[u8]]] = &[
        &[b"LLEN"],
        &[b"LRANGE", b"0", b"-1"],
        &[b"LRANGE", b"-50", b"-45"],
        &[b"LINDEX", b"123"],
        &[b"LPUSH", b"front", b"front2"],
        &[b"RPUSH", b"back"],
        &[b"LSET", b"200", b"changed"],
        &[b"LPOP", b"3"],
        &[b"RPOP"],
        &[b"LPOS", b"changed"],
        &[b"LINSERT", b"BEFORE", b"changed", b"inserted"],
        &[b"LREM", b"0", b"front"],
        &[b"LTRIM", b"5", b"-5"],
        &[b"LRANGE", b"0", b"-1"],
        &[b"OBJECT", b"ENCODING"],
    ];
    for command in script {
        let reply = |key: &[u8], stream: &mut TcpStream| {
            let mut words = vec![command[0], key];
            words.extend_from_slice(&command[1..]);
            if command[0] == b"OBJECT" {
                words = vec![command[0], command[1], key];
            }
            request(stream, &encode(&words))
        };
        let (old, new) = (reply(b"old", &mut stream), reply(b"new", &mut stream));
        assert_eq!(
            String::from_utf8_lossy(&old),
            String::from_utf8_lossy(&new),
            "{}",
            String::from_utf8_lossy(command[0])
        );
    }
    // DBSIZE counts the two lists only, whatever their tables hold.
    assert_eq!(request(&mut stream, &encode(&[b"DBSIZE"])), b":2\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"DEL", b"old", b"new"])), b":2\r\n");
    assert_eq!(request(&mut stream, &encode(&[b"DBSIZE"])), b":0\r\n");
}

/// CLIENT KILL closes other connections (by ID, by ADDR, by the old
/// address form; SKIPME spares the caller unless told no) and CLIENT
/// UNBLOCK ends a blocking pop with a timeout's null or an error; CLIENT
/// LIST flags a blocked client `b`.
#[test]
fn client_kill_and_unblock() {
    let (_dir, server) = start(&[]);
    let mut admin = server.connect();
    let id_of = |stream: &mut TcpStream| {
        String::from_utf8(request(stream, &encode(&[b"CLIENT", b"ID"]))).unwrap()[1..].trim().to_string()
    };
    let closed = |stream: &mut TcpStream| {
        stream.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut byte = [0u8; 1];
        match stream.read(&mut byte) {
            Ok(n) => n == 0,
            Err(e) => !matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut),
        }
    };
    // By ID.
    let mut victim = server.connect();
    let id = id_of(&mut victim);
    assert_eq!(request(&mut admin, &encode(&[b"CLIENT", b"KILL", b"ID", id.as_bytes()])), b":1\r\n");
    assert!(closed(&mut victim), "killed by id");
    // By ADDR, and by the old form (which answers OK).
    let mut victim = server.connect();
    assert_eq!(request(&mut victim, &encode(&[b"PING"])), b"+PONG\r\n", "registered");
    let addr = victim.local_addr().unwrap().to_string();
    assert_eq!(request(&mut admin, &encode(&[b"CLIENT", b"KILL", b"ADDR", addr.as_bytes()])), b":1\r\n");
    assert!(closed(&mut victim), "killed by addr");
    let mut victim = server.connect();
    assert_eq!(request(&mut victim, &encode(&[b"PING"])), b"+PONG\r\n", "registered");
    let addr = victim.local_addr().unwrap().to_string();
    assert_eq!(request(&mut admin, &encode(&[b"CLIENT", b"KILL", addr.as_bytes()])), b"+OK\r\n");
    assert!(closed(&mut victim), "killed by the old form");
    // A client blocked in BLPOP is killed at once, and takes nothing.
    let mut victim = server.connect();
    let id = id_of(&mut victim);
    victim.write_all(&encode(&[b"BLPOP", b"never", b"0"])).unwrap();
    server.wait_for_blocked_clients(1);
    let listed = String::from_utf8(request(&mut admin, &encode(&[b"CLIENT", b"LIST"]))).unwrap();
    let line = listed.lines().find(|l| l.contains(&format!("id={id} "))).expect("listed");
    assert!(line.contains("flags=b"), "{line}");
    assert_eq!(request(&mut admin, &encode(&[b"CLIENT", b"KILL", b"ID", id.as_bytes()])), b":1\r\n");
    assert!(closed(&mut victim), "a blocked client killed");
    // UNBLOCK: a timeout's null array, or an error; 0 for one not blocked.
    let mut waiter = server.connect();
    let id = id_of(&mut waiter);
    assert_eq!(request(&mut admin, &encode(&[b"CLIENT", b"UNBLOCK", id.as_bytes()])), b":0\r\n");
    waiter.write_all(&encode(&[b"BRPOP", b"never", b"0"])).unwrap();
    server.wait_for_blocked_clients(1);
    assert_eq!(request(&mut admin, &encode(&[b"CLIENT", b"UNBLOCK", id.as_bytes()])), b":1\r\n");
    assert_eq!(read_reply(&mut waiter), b"*-1\r\n");
    waiter.write_all(&encode(&[b"BZPOPMIN", b"never", b"0"])).unwrap();
    server.wait_for_blocked_clients(1);
    assert_eq!(request(&mut admin, &encode(&[b"CLIENT", b"UNBLOCK", id.as_bytes(), b"ERROR"])), b":1\r\n");
    assert_eq!(read_reply(&mut waiter), b"-UNBLOCKED client unblocked via CLIENT UNBLOCK\r\n");
    assert_eq!(request(&mut waiter, &encode(&[b"PING"])), b"+PONG\r\n", "still connected");
    // SKIPME: the caller is spared unless told no.
    let me = id_of(&mut admin);
    assert_eq!(request(&mut admin, &encode(&[b"CLIENT", b"KILL", b"ID", me.as_bytes()])), b":0\r\n");
    assert_eq!(request(&mut admin, &encode(&[b"CLIENT", b"KILL", b"ID", me.as_bytes(), b"SKIPME", b"no"])), b":1\r\n");
    assert!(closed(&mut admin), "killed itself");
}

/// A push wakes the first client blocked on its key at once, and that
/// client's leaving wakes the next, not the 100 ms poll every blocked
/// client also runs: the median of ten rounds (two clients on one key, one
/// push of two elements, while 50 others wait on other keys) is far below
/// it.
#[test]
fn a_push_wakes_the_blocked_clients_at_once() {
    use std::time::Instant;
    let (_dir, server) = start(&[]);
    let mut pusher = server.connect();
    let idle: Vec<TcpStream> = (0..50)
        .map(|i| {
            let mut stream = server.connect();
            stream.write_all(&encode(&[b"BLPOP", format!("idle:{i}").as_bytes(), b"0"])).unwrap();
            stream
        })
        .collect();
    let mut waits = Vec::new();
    for _ in 0..10 {
        let mut waiters: Vec<TcpStream> = (0..2).map(|_| server.connect()).collect();
        // The first waiter must be blocked before the second asks, or the
        // order the push serves them in is the scheduler's, not theirs.
        for (k, waiter) in waiters.iter_mut().enumerate() {
            waiter.write_all(&encode(&[b"BLPOP", b"q", b"5"])).unwrap();
            server.wait_for_blocked_clients(idle.len() + k + 1);
        }
        let pushed = Instant::now();
        assert_eq!(request(&mut pusher, &encode(&[b"RPUSH", b"q", b"x", b"y"])), b":2\r\n");
        assert_eq!(read_reply(&mut waiters[0]), b"*2\r\n$1\r\nq\r\n$1\r\nx\r\n");
        assert_eq!(read_reply(&mut waiters[1]), b"*2\r\n$1\r\nq\r\n$1\r\ny\r\n");
        waits.push(pushed.elapsed());
    }
    waits.sort();
    assert!(waits[5] < Duration::from_millis(25), "median {:?} of {waits:?}", waits[5]);
    drop(idle);
}

/// A list or sorted set that arrives at a waited key by RENAME, COPY,
/// RESTORE or a sorted-set STORE wakes the client blocked on it at once,
/// as a push does, not at the 100 ms poll: the median of five rounds per
/// command is below it.
#[test]
fn a_list_or_sorted_set_moved_into_a_waited_key_wakes_it_at_once() {
    use std::time::Instant;
    let (_dir, server) = start(&[]);
    let mut admin = server.connect();
    // (the blocking command, the setup, the command that fills the key, the waiter's reply)
    type Case<'a> = (&'a [&'a [u8]], &'a [&'a [&'a [u8]]], &'a [&'a [u8]], &'a [u8]);
    let list = b"*2\r\n$1\r\nq\r\n$1\r\nx\r\n".as_slice();
    let zset = b"*3\r\n$1\r\nz\r\n$1\r\nm\r\n$1\r\n1\r\n".as_slice();
    let cases: [Case; 6] = [
        (&[b"BLPOP", b"q", b"5"], &[&[b"RPUSH", b"src", b"x"]], &[b"RENAME", b"src", b"q"], list),
        (&[b"BLPOP", b"q", b"5"], &[&[b"RPUSH", b"src", b"x"]], &[b"COPY", b"src", b"q"], list),
        (&[b"BLPOP", b"q", b"5"], &[&[b"RPUSH", b"src", b"x"]], &[b"RESTORE", b"q", b"0", b"DUMPED"], list),
        (&[b"BZPOPMIN", b"z", b"5"], &[&[b"ZADD", b"zs", b"1", b"m"]], &[b"ZUNIONSTORE", b"z", b"1", b"zs"], zset),
        (
            &[b"BZPOPMIN", b"z", b"5"],
            &[&[b"ZADD", b"zs", b"1", b"m"]],
            &[b"ZRANGESTORE", b"z", b"zs", b"0", b"-1"],
            zset,
        ),
        (&[b"BZPOPMIN", b"z", b"5"], &[&[b"ZADD", b"zs", b"1", b"m"]], &[b"RENAME", b"zs", b"z"], zset),
    ];
    for (wait, setup, fill, expected) in cases {
        let mut waits = Vec::new();
        for _ in 0..5 {
            request(&mut admin, b"FLUSHALL\r\n");
            for command in setup {
                request(&mut admin, &encode(command));
            }
            let dumped = bulk_of(&request(&mut admin, &encode(&[b"DUMP", b"src"])));
            let fill: Vec<&[u8]> = fill.iter().map(|arg| if *arg == b"DUMPED" { &dumped[..] } else { *arg }).collect();
            let mut waiter = server.connect();
            waiter.write_all(&encode(wait)).unwrap();
            std::thread::sleep(Duration::from_millis(20));
            let filled = Instant::now();
            let reply = request(&mut admin, &encode(&fill));
            assert!(reply == b"+OK\r\n" || reply == b":1\r\n", "{:?}: {reply:?}", String::from_utf8_lossy(fill[0]));
            assert_eq!(read_reply(&mut waiter), expected, "{}", String::from_utf8_lossy(fill[0]));
            waits.push(filled.elapsed());
        }
        waits.sort();
        // The poll looks 100 ms after the waiter joined its line, at least
        // 80 ms after the fill; a wake-up takes ~2 ms here, up to 40 ms
        // when the other tests of this file load both cores.
        assert!(
            waits[2] < Duration::from_millis(70),
            "{}: median {:?} of {waits:?}",
            String::from_utf8_lossy(fill[0]),
            waits[2]
        );
    }
}

/// The bytes of a bulk string reply (empty for a null one).
fn bulk_of(reply: &[u8]) -> Vec<u8> {
    let header = reply.iter().position(|&b| b == b'\n').expect("a header line") + 1;
    match reply[1..header - 2].iter().map(|&d| d as char).collect::<String>().parse::<i64>() {
        Ok(len) if len >= 0 => reply[header..header + len as usize].to_vec(),
        _ => Vec::new(),
    }
}

/// CLIENT LIST shows what a client is in, as Redis does: `x` and the
/// count of queued commands in MULTI (`multi=-1` outside), `O` for a
/// monitor.
#[test]
fn client_list_shows_a_transaction_and_a_monitor() {
    let (_dir, server) = start(&[]);
    let mut admin = server.connect();
    let line_of = |admin: &mut TcpStream, id: &str| {
        let listed = String::from_utf8(request(admin, &encode(&[b"CLIENT", b"LIST"]))).unwrap();
        listed.lines().find(|l| l.contains(&format!("id={id} "))).expect("listed").to_string()
    };
    let mut client = server.connect();
    let id = String::from_utf8(request(&mut client, &encode(&[b"CLIENT", b"ID"]))).unwrap()[1..].trim().to_string();
    assert!(line_of(&mut admin, &id).contains("flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 "));
    request(&mut client, &encode(&[b"MULTI"]));
    request(&mut client, &encode(&[b"SET", b"k", b"v"]));
    request(&mut client, &encode(&[b"GET", b"k"]));
    assert!(line_of(&mut admin, &id).contains("flags=x db=0 sub=0 psub=0 ssub=0 multi=2 "));
    request(&mut client, &encode(&[b"EXEC"]));
    assert!(line_of(&mut admin, &id).contains("flags=N db=0 sub=0 psub=0 ssub=0 multi=-1 "));
    request(&mut client, &encode(&[b"MULTI"]));
    request(&mut client, &encode(&[b"DISCARD"]));
    assert!(line_of(&mut admin, &id).contains("multi=-1 "));
    assert_eq!(request(&mut client, &encode(&[b"MONITOR"])), b"+OK\r\n");
    assert!(line_of(&mut admin, &id).contains("flags=O "));
}

/// GEO and SORT commands with arguments from their own vocabulary and raw
/// bytes, over an index, a list, a set and a sorted set (some grown into
/// tables): every one gets a reply, and the server answers PING after it.
#[test]
fn geo_and_sort_commands_with_any_arguments_get_a_reply() {
    let (_dir, server) = start(&[]);
    let mut setup = server.connect();
    let mut fill: Vec<Vec<u8>> = vec![b"GEOADD".to_vec(), b"g".to_vec()];
    for i in 0..700 {
        let (lon, lat) = (format!("{}", (i % 37) as f64 * 0.7 - 12.0), format!("{}", (i % 23) as f64 * 0.9 + 30.0));
        fill.extend([lon.into_bytes(), lat.into_bytes(), format!("place-{i}").into_bytes()]);
    }
    let refs: Vec<&[u8]> = fill.iter().map(Vec::as_slice).collect();
    assert_eq!(request(&mut setup, &encode(&refs)), b":700\r\n");
    for command in [
        &["RPUSH", "l", "3", "1", "x", "2.5", "10"][..],
        &["SADD", "s", "b", "a", "c"],
        &["ZADD", "z", "1", "x", "2", "y"],
        &["MSET", "w_1", "5", "w_3", "-1"],
        &["HSET", "h_1", "f", "9"],
    ] {
        let args: Vec<&[u8]> = command.iter().map(|w| w.as_bytes()).collect();
        assert_ne!(request(&mut setup, &encode(&args)).first(), Some(&b'-'), "{command:?}");
    }
    let names = vec![
        "GEOADD",
        "GEOPOS",
        "GEOHASH",
        "GEODIST",
        "GEORADIUS",
        "GEORADIUS_RO",
        "GEORADIUSBYMEMBER",
        "GEORADIUSBYMEMBER_RO",
        "GEOSEARCH",
        "GEOSEARCHSTORE",
        "SORT",
        "SORT_RO",
    ];
    let words = vec![
        "g",
        "l",
        "s",
        "z",
        "d",
        "place-3",
        "place-699",
        "0",
        "1",
        "-1",
        "13.36",
        "38.1",
        "180",
        "-85.06",
        "200",
        "1e400",
        "nan",
        "inf",
        "-inf",
        "m",
        "km",
        "ft",
        "mi",
        "NX",
        "XX",
        "CH",
        "WITHDIST",
        "WITHHASH",
        "WITHCOORD",
        "COUNT",
        "ANY",
        "ASC",
        "DESC",
        "STORE",
        "STOREDIST",
        "FROMMEMBER",
        "FROMLONLAT",
        "BYRADIUS",
        "BYBOX",
        "BY",
        "GET",
        "#",
        "w_*",
        "h_*->f",
        "*",
        "->",
        "nosort",
        "LIMIT",
        "ALPHA",
        "9223372036854775807",
        "-9223372036854775808",
    ];
    common::any_arguments_get_a_reply(&server, names, words, 600);
}

/// FUNCTION, FCALL and FCALL_RO with arguments from their vocabulary
/// (library code that loads, fails to compile, fails to register, spins
/// past the load timeout; a DUMP payload) and raw bytes: every one gets a
/// reply, and the server answers PING after it.
#[test]
fn function_commands_with_any_arguments_get_a_reply() {
    let (_dir, server) = start(&[]);
    let mut setup = server.connect();
    let good = "#!lua name=lib\nredis.register_function('f', function(keys, args) return redis.call('incr', keys[1]) end)\n\
                redis.register_function{function_name='g', callback=function(keys, args) return args end, flags={'no-writes'}}";
    assert_eq!(request(&mut setup, &encode(&[b"FUNCTION", b"LOAD", good.as_bytes()])), b"$3\r\nlib\r\n");
    let dump = request(&mut setup, &encode(&[b"FUNCTION", b"DUMP"]));
    let start = dump.iter().position(|&b| b == b'\n').unwrap() + 1;
    // The vocabulary is `'static`; one payload for the whole test.
    let payload: &'static [u8] = Box::leak(dump[start..dump.len() - 2].to_vec().into_boxed_slice());
    let names = vec!["FUNCTION", "FCALL", "FCALL_RO"];
    let mut words: Vec<&'static [u8]> = [
        "LOAD",
        "REPLACE",
        "DELETE",
        "FLUSH",
        "ASYNC",
        "LIST",
        "LIBRARYNAME",
        "WITHCODE",
        "DUMP",
        "RESTORE",
        "APPEND",
        "STATS",
        "KILL",
        "HELP",
        good,
        "#!lua name=other\nredis.register_function('h', function() return 1 end)",
        "#!lua name=bad\nlocal = 1",
        "#!lua name=bad\nredis.register_function{function_name='x'}",
        "#!lua name=slow\nwhile true do end",
        "#!lua",
        "lib",
        "other",
        "f",
        "g",
        "h",
        "k",
        "0",
        "1",
        "2",
        "-1",
        "*",
    ]
    .map(str::as_bytes)
    .to_vec();
    words.push(payload);
    common::any_arguments_get_a_reply(&server, names, words, 300);
}

/// At the default threshold (10 ms) SLOWLOG keeps a slow command (a
/// script that spins 50 ms), with how long it took, and none of the fast
/// ones around it; above the threshold set by the flag it keeps nothing.
#[test]
fn slowlog_keeps_the_slow_commands() {
    let (_dir, server) = start(&[]);
    let mut client = server.connect();
    let spin = "local start = redis.call('TIME'); local now = start \
                repeat now = redis.call('TIME') until (now[1] - start[1]) * 1000000 + now[2] - start[2] >= 50000 \
                return 1";
    for i in 0..200 {
        assert_eq!(request(&mut client, &encode(&[b"SET", b"k", i.to_string().as_bytes()])), b"+OK\r\n");
    }
    assert_eq!(request(&mut client, &encode(&[b"EVAL", spin.as_bytes(), b"0"])), b":1\r\n");
    assert_eq!(request(&mut client, &encode(&[b"GET", b"k"])), b"$3\r\n199\r\n");
    assert_eq!(request(&mut client, &encode(&[b"SLOWLOG", b"LEN"])), b":1\r\n");
    let entry = String::from_utf8(request(&mut client, &encode(&[b"SLOWLOG", b"GET"]))).unwrap();
    let lines: Vec<&str> = entry.split("\r\n").collect();
    assert_eq!(lines[..3], ["*1", "*6", ":0"], "{entry}");
    let micros: u64 = lines[4].trim_start_matches(':').parse().unwrap();
    assert!((50_000..5_000_000).contains(&micros), "{entry}");
    assert_eq!(lines[5..8], ["*3", "$4", "EVAL"], "{entry}");

    let (_dir, server) = start(&["--slowlog-log-slower-than", "1000000"]);
    let mut client = server.connect();
    assert_eq!(request(&mut client, &encode(&[b"EVAL", spin.as_bytes(), b"0"])), b":1\r\n");
    assert_eq!(request(&mut client, &encode(&[b"SLOWLOG", b"LEN"])), b":0\r\n");
}

/// The latency monitor: off by default (LATENCY DOCTOR says so in Redis's
/// words); with `latency-monitor-threshold` set, a 50 ms script is a
/// `command` spike in LATEST, HISTORY, GRAPH and DOCTOR, a fast command is
/// not, and RESET forgets it. (The replies' shapes and the errors are
/// compared with Redis's in `differential.rs`.)
#[test]
fn the_latency_monitor_samples_slow_commands() {
    let (_dir, server) = start(&[]);
    let mut client = server.connect();
    let text = |client: &mut std::net::TcpStream, words: &[&str]| {
        let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        String::from_utf8(request(client, &encode(&words))).unwrap()
    };
    assert!(text(&mut client, &["LATENCY", "DOCTOR"]).contains("Latency monitoring is disabled"));
    let spin = "local start = redis.call('TIME'); local now = start \
                repeat now = redis.call('TIME') until (now[1] - start[1]) * 1000000 + now[2] - start[2] >= 50000 \
                return 1";
    assert_eq!(text(&mut client, &["EVAL", spin, "0"]), ":1\r\n");
    assert_eq!(text(&mut client, &["LATENCY", "LATEST"]), "*0\r\n", "off: nothing sampled");
    assert_eq!(text(&mut client, &["CONFIG", "SET", "latency-monitor-threshold", "20"]), "+OK\r\n");
    assert_eq!(text(&mut client, &["EVAL", spin, "0"]), ":1\r\n");
    assert_eq!(text(&mut client, &["GET", "k"]), "$-1\r\n");
    let latest = text(&mut client, &["LATENCY", "LATEST"]);
    let lines: Vec<&str> = latest.split("\r\n").collect();
    assert_eq!(lines[..4], ["*1", "*4", "$7", "command"], "{latest}");
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_secs() as i64;
    let number = |line: &str| line.trim_start_matches(':').parse::<i64>().unwrap();
    assert!((number(lines[4]) - now).abs() <= 5, "{latest}");
    let (millis, max) = (number(lines[5]), number(lines[6]));
    assert!((50..5000).contains(&millis) && max == millis, "{latest}");
    let history = text(&mut client, &["LATENCY", "HISTORY", "command"]);
    assert!(history.starts_with("*1\r\n*2\r\n:") && history.ends_with(&format!(":{millis}\r\n")), "{history}");
    let graph = text(&mut client, &["LATENCY", "GRAPH", "command"]);
    let header =
        format!("command - high {millis} ms, low {millis} ms (all time high {millis} ms)\n{}\n", "-".repeat(80));
    assert!(graph.contains(&header), "{graph}");
    let doctor = text(&mut client, &["LATENCY", "DOCTOR"]);
    assert!(doctor.contains("1. command: 1 latency spikes"), "{doctor}");
    assert!(doctor.contains("- Check your Slow Log"), "{doctor}");
    assert_eq!(text(&mut client, &["LATENCY", "RESET"]), ":1\r\n");
    assert_eq!(text(&mut client, &["LATENCY", "LATEST"]), "*0\r\n");
    // LATENCY HISTOGRAM: every call of a command counted up to Redis's
    // bucket labels; the 50 ms scripts in the one up to 67.6 ms.
    for _ in 0..99 {
        text(&mut client, &["GET", "k"]);
    }
    let histogram = text(&mut client, &["LATENCY", "HISTOGRAM", "get", "eval", "nosuch"]);
    let lines: Vec<&str> = histogram.split("\r\n").collect();
    assert_eq!(lines[0], "*4", "two commands: {histogram}");
    let labels = ["1", "2", "4", "8", "16", "33", "66", "132", "264", "528", "1056", "2113", "4226", "8454", "16909"];
    for name in ["get", "eval"] {
        let at = lines.iter().position(|line| *line == name).unwrap_or_else(|| panic!("{histogram}"));
        let calls = if name == "get" { ":100" } else { ":2" };
        assert_eq!(lines[at + 1..at + 5], ["*4", "$5", "calls", calls], "{histogram}");
        assert_eq!(lines[at + 5..at + 7], ["$14", "histogram_usec"], "{histogram}");
        let points: usize = lines[at + 7].trim_start_matches('*').parse().unwrap();
        let pairs: Vec<(&str, &str)> =
            (0..points / 2).map(|i| (lines[at + 8 + 2 * i], lines[at + 9 + 2 * i])).collect();
        assert!(pairs.iter().all(|(label, _)| label.starts_with(':')), "{histogram}");
        assert!(pairs
            .iter()
            .all(|(label, _)| labels.contains(&&label[1..]) || label[1..].parse::<u64>().unwrap() > 16909));
        assert_eq!(pairs.last().unwrap().1, calls, "cumulative: {histogram}");
        if name == "eval" {
            assert_eq!(pairs, [(":67633", ":2")], "{histogram}");
        }
    }
    // INFO latencystats reads the same histograms: percentiles in Redis's
    // format, in order, the scripts' at 50 ms or more.
    let info = text(&mut client, &["INFO", "latencystats"]);
    let percentiles = |name: &str| -> Vec<f64> {
        let prefix = format!("latency_percentiles_usec_{name}:");
        let line = info.lines().find(|line| line.starts_with(&prefix)).unwrap_or_else(|| panic!("{info}"));
        line[prefix.len()..].split(',').map(|part| part.split('=').nth(1).unwrap().parse().unwrap()).collect()
    };
    let get = percentiles("get");
    assert!(get.len() == 3 && get[0] <= get[1] && get[1] <= get[2] && get[2] < 50_000.0, "{info}");
    assert!(percentiles("eval").iter().all(|&micros| micros >= 50_000.0), "{info}");
    assert!(info.contains("\r\n# Latencystats\r\n"), "{info}");
}

/// CLIENT PAUSE, as Redis: WRITE holds writes (not reads) until it ends,
/// ALL holds everything, an ended pause is not merged into the next, and
/// CLIENT UNPAUSE from another client lets a held write go at once.
#[test]
fn client_pause_holds_writes_or_everything() {
    let (_dir, server) = start(&[]);
    let (mut admin, mut client) = (server.connect(), server.connect());
    let timed = |stream: &mut std::net::TcpStream, words: &[&[u8]]| {
        let started = std::time::Instant::now();
        let reply = request(stream, &encode(words));
        (reply, started.elapsed())
    };
    assert_eq!(request(&mut admin, &encode(&[b"CLIENT", b"PAUSE", b"300", b"WRITE"])), b"+OK\r\n");
    let (reply, read) = timed(&mut client, &[b"GET", b"k"]);
    assert_eq!((reply, read < Duration::from_millis(200)), (b"$-1\r\n".to_vec(), true), "{read:?}");
    let (reply, write) = timed(&mut client, &[b"SET", b"k", b"v"]);
    assert_eq!((reply, write >= Duration::from_millis(250)), (b"+OK\r\n".to_vec(), true), "{write:?}");
    assert_eq!(request(&mut admin, &encode(&[b"CLIENT", b"PAUSE", b"200", b"ALL"])), b"+OK\r\n");
    let (reply, ping) = timed(&mut client, &[b"PING"]);
    assert_eq!((reply, ping >= Duration::from_millis(150)), (b"+PONG\r\n".to_vec(), true), "{ping:?}");
    assert_eq!(request(&mut admin, &encode(&[b"CLIENT", b"PAUSE", b"20000", b"WRITE"])), b"+OK\r\n");
    client.write_all(&encode(&[b"SET", b"k", b"w"])).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    let (reply, unpause) = timed(&mut admin, &[b"CLIENT", b"UNPAUSE"]);
    assert_eq!((reply, unpause < Duration::from_secs(2)), (b"+OK\r\n".to_vec(), true), "{unpause:?}");
    assert_eq!(read_reply(&mut client), b"+OK\r\n");
    assert_eq!(request(&mut client, &encode(&[b"GET", b"k"])), b"$1\r\nw\r\n");
}

/// CLIENT TRACKING / CACHING and ACL's user commands with arguments from
/// their vocabulary (and AUTH, GET, SET between them, so users and
/// tracking are used): every one gets a reply, and the server answers PING
/// after it. (REPLY, KILL and MULTI are left out: they silence, close or
/// queue on the connection the check reads from.)
#[test]
fn tracking_and_acl_commands_with_any_arguments_get_a_reply() {
    let (_dir, server) = start(&[]);
    let names = vec!["CLIENT", "ACL", "AUTH", "GET", "SET", "EVAL"];
    let words: Vec<&'static [u8]> = [
        "TRACKING",
        "ON",
        "OFF",
        "BCAST",
        "PREFIX",
        "REDIRECT",
        "OPTIN",
        "OPTOUT",
        "NOLOOP",
        "CACHING",
        "YES",
        "NO",
        "TRACKINGINFO",
        "GETREDIR",
        "SETUSER",
        "GETUSER",
        "DELUSER",
        "DRYRUN",
        "LIST",
        "USERS",
        "WHOAMI",
        "LOG",
        "RESET",
        "default",
        "u",
        "v",
        "on",
        "off",
        "nopass",
        "resetpass",
        ">pw",
        "<pw",
        "#abc",
        "!abc",
        "~*",
        "&*",
        "+@all",
        "-@all",
        "allkeys",
        "resetkeys",
        "allchannels",
        "resetchannels",
        "+get",
        "~a:*",
        "reset",
        "pw",
        "k",
        "a:1",
        "",
        "0",
        "1",
        "-1",
        "18446744073709551615",
        "return redis.call('get', 'k')",
    ]
    .iter()
    .map(|word| word.as_bytes())
    .collect();
    common::any_arguments_get_a_reply(&server, names, words, 400);
}

/// ACL SAVE keeps the users durably in the data directory (where Redis
/// writes its ACL file): they come back after a SIGKILL and restart, users
/// made after the save do not, and ACL LOAD returns to the saved ones,
/// closing the connections of the users it had. DBSIZE leaves them out.
#[test]
fn acl_save_keeps_users_across_restarts() {
    use common::Server;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut server = Server::start(&path, &[]);
    let mut admin = server.connect();
    let send = |stream: &mut std::net::TcpStream, words: &[&str]| -> String {
        let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
        String::from_utf8_lossy(&request(stream, &encode(&words))).into_owned()
    };
    assert_eq!(send(&mut admin, &["ACL", "SETUSER", "alice", "on", ">pw", "+@all", "~*", "&*"]), "+OK\r\n");
    assert_eq!(
        send(&mut admin, &["ACL", "SETUSER", "bob", "on", "nopass", "-@all", "skip-sanitize-payload"]),
        "+OK\r\n"
    );
    assert_eq!(send(&mut admin, &["ACL", "SAVE"]), "+OK\r\n");
    let saved = send(&mut admin, &["ACL", "LIST"]);
    assert_eq!(send(&mut admin, &["ACL", "SETUSER", "carol", "on", "nopass", "+@all"]), "+OK\r\n");
    assert_eq!(send(&mut admin, &["DBSIZE"]), ":0\r\n");
    // ACL LOAD: back to the saved users; alice's connection is closed.
    let mut alice = server.connect();
    assert_eq!(send(&mut alice, &["AUTH", "alice", "pw"]), "+OK\r\n");
    assert_eq!(send(&mut admin, &["ACL", "LOAD"]), "+OK\r\n");
    assert_eq!(send(&mut admin, &["ACL", "LIST"]), saved);
    std::io::Write::write_all(&mut alice, &encode(&[b"PING"])).ok();
    assert!(common::try_read_reply(&mut alice).is_none(), "closed by ACL LOAD");
    assert_eq!(send(&mut admin, &["ACL", "SETUSER", "carol", "on", "nopass", "+@all"]), "+OK\r\n");
    server.kill();
    let mut server = Server::start(&path, &[]);
    let mut admin = server.connect();
    assert_eq!(send(&mut admin, &["ACL", "LIST"]), saved, "the saved users, not carol");
    assert!(saved.contains("user bob on nopass skip-sanitize-payload resetchannels -@all"), "{saved}");
    let mut alice = server.connect();
    assert_eq!(send(&mut alice, &["AUTH", "alice", "pw"]), "+OK\r\n");
    assert_eq!(send(&mut alice, &["ACL", "WHOAMI"]), "$5\r\nalice\r\n");
    assert_eq!(send(&mut admin, &["DBSIZE"]), ":0\r\n");
    assert_eq!(send(&mut admin, &["FLUSHALL"]), "+OK\r\n");
    assert_eq!(send(&mut admin, &["ACL", "LOAD"]), "+OK\r\n");
    assert_eq!(send(&mut admin, &["ACL", "LIST"]), saved, "FLUSHALL keeps them, as functions");
    // The default user's rules are saved too; `requirepass`, when given at
    // start, is its password.
    let rules = ["ACL", "SETUSER", "default", "-flushall", "resetkeys", "~app:*"];
    assert_eq!(send(&mut admin, &rules), "+OK\r\n");
    assert_eq!(send(&mut admin, &["ACL", "SAVE"]), "+OK\r\n");
    server.kill();
    let server = Server::start(&path, &["--requirepass", "pw2"]);
    let mut admin = server.connect();
    assert!(send(&mut admin, &["GET", "app:1"]).starts_with("-NOAUTH"));
    assert_eq!(send(&mut admin, &["AUTH", "pw2"]), "+OK\r\n");
    assert_eq!(send(&mut admin, &["GET", "app:1"]), "$-1\r\n");
    assert!(send(&mut admin, &["GET", "other"]).starts_with("-NOPERM"));
    assert!(send(&mut admin, &["FLUSHALL"]).starts_with("-NOPERM"));
    let list = send(&mut admin, &["ACL", "LIST"]);
    assert!(list.contains(&format!("user default on #{} ~app:* &* +@all -flushall", sha256("pw2"))), "{list}");
}

fn sha256(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}
