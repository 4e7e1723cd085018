//! ScaledKV and a real `redis-server` in replication, both ways: ScaledKV
//! follows a Redis master (REPLICAOF); Redis and ScaledKV replicas follow
//! a ScaledKV master; Redis loads the RDB file `redis-cli --rdb` gets from
//! ScaledKV (SYNC). Tests that need Redis are skipped, with a notice,
//! where it is not installed (`.ci/run` installs it); the ScaledKV
//! replica's half of the master's test runs regardless. Every check
//! compares the whole keyspace of both servers, key by key. The export's
//! own checks (one moment while clients write, what SYNC refuses) need no
//! peer.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::time::{Duration, Instant};

use common::{RedisServer, Server};
use redis::{Connection, Value};

fn connect(port: u16) -> Connection {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap();
    let con = client.get_connection().unwrap();
    con.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    con
}

fn master() -> Option<(RedisServer, Connection)> {
    // Databases beyond 0 to check that their keys are skipped; no delay
    // before a diskless sync (Redis waits 5 s for more replicas).
    let redis = RedisServer::start_with(&["--databases", "16", "--repl-diskless-sync-delay", "0"])?;
    let con = connect(redis.port);
    Some((redis, con))
}

fn info_field(con: &mut Connection, section: &str, field: &str) -> Option<String> {
    let info: String = redis::cmd("INFO").arg(section).query(con).unwrap();
    info.lines().find_map(|line| line.strip_prefix(&format!("{field}:")).map(str::to_owned))
}

/// Waits until the replica's link is up.
fn wait_link_up(replica: &mut Connection) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while info_field(replica, "replication", "master_link_status").as_deref() != Some("up") {
        let error = info_field(replica, "replication", "master_link_error");
        assert!(Instant::now() < deadline, "the link did not come up: {error:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// WAIT on the master for `replicas`: every write it took is committed
/// on (or, for Redis, applied by) each of them.
fn wait_for(master: &mut Connection, replicas: usize) {
    let acked: i64 = redis::cmd("WAIT").arg(replicas).arg(20_000).query(master).unwrap();
    assert_eq!(acked, replicas as i64, "the replicas did not acknowledge");
}

/// Each key of database 0, what it holds (in a form both servers give
/// alike: collections sorted where their order is not theirs) and its
/// time to live in milliseconds.
fn keyspace(con: &mut Connection) -> BTreeMap<String, (String, i64)> {
    let keys: Vec<Vec<u8>> = redis::cmd("KEYS").arg("*").query(con).unwrap();
    let mut all = BTreeMap::new();
    for key in keys {
        let kind: String = redis::cmd("TYPE").arg(&key).query(con).unwrap();
        let q = |name: &str, args: &[&str], con: &mut Connection| -> Value {
            redis::cmd(name).arg(&key).arg(args).query(con).unwrap()
        };
        let value = match kind.as_str() {
            "string" => format!("{:?}", q("GET", &[], con)),
            "list" => format!("{:?}", q("LRANGE", &["0", "-1"], con)),
            "zset" => format!("{:?}", q("ZRANGE", &["0", "-1", "WITHSCORES"], con)),
            "stream" => format!("{:?} {:?}", q("XRANGE", &["-", "+"], con), stream_groups(con, &key)),
            "set" => {
                let mut members: Vec<Vec<u8>> = redis::cmd("SMEMBERS").arg(&key).query(con).unwrap();
                members.sort();
                format!("{members:?}")
            }
            "hash" => {
                let mut pairs: Vec<(Vec<u8>, Vec<u8>)> = redis::cmd("HGETALL").arg(&key).query(con).unwrap();
                pairs.sort();
                format!("{pairs:?}")
            }
            other => panic!("type {other}"),
        };
        let ttl: i64 = redis::cmd("PTTL").arg(&key).query(con).unwrap();
        all.insert(String::from_utf8_lossy(&key).into_owned(), (format!("{kind} {value}"), ttl));
    }
    all
}

/// A stream's consumer groups as both servers give them alike: each
/// group's XINFO GROUPS fields (name, consumers, pending, last delivered
/// ID, entries read, lag), its consumers' names and pending counts, and
/// its pending entries' IDs, consumers and delivery counts (idle times
/// are the servers' own).
fn stream_groups(con: &mut Connection, key: &[u8]) -> Vec<String> {
    let groups: Vec<Vec<Value>> = redis::cmd("XINFO").arg("GROUPS").arg(key).query(con).unwrap();
    let mut described = Vec::new();
    for group in groups {
        let Value::BulkString(name) = &group[1] else { panic!("a group's name: {group:?}") };
        let consumers: Vec<Vec<Value>> = redis::cmd("XINFO").arg("CONSUMERS").arg(key).arg(name).query(con).unwrap();
        let consumers: Vec<String> = consumers.iter().map(|c| format!("{:?} {:?}", c[1], c[3])).collect();
        let pending: Vec<Vec<Value>> =
            redis::cmd("XPENDING").arg(key).arg(name).arg("-").arg("+").arg(1_000_000).query(con).unwrap();
        let pending: Vec<String> = pending.iter().map(|p| format!("{:?} {:?} {:?}", p[0], p[1], p[3])).collect();
        described.push(format!("{group:?} consumers {consumers:?} pending {pending:?}"));
    }
    described
}

fn assert_same(master: &mut Connection, replica: &mut Connection) {
    let (on_master, on_replica) = (keyspace(master), keyspace(replica));
    assert_eq!(on_master.len(), on_replica.len(), "key counts differ");
    for (key, (value, ttl)) in &on_master {
        let (theirs, their_ttl) = on_replica.get(key).unwrap_or_else(|| panic!("key {key} missing"));
        if value != theirs {
            // Where they part: a big collection's whole value is too long to read.
            let at = value.bytes().zip(theirs.bytes()).take_while(|(a, b)| a == b).count();
            let around =
                |text: &str| text.get(at.saturating_sub(200)..(at + 300).min(text.len())).unwrap_or(text).to_owned();
            panic!("key {key} differs from byte {at}: master …{}… replica …{}…", around(value), around(theirs));
        }
        // Read a moment apart: the same expiry time, within a second.
        let same_ttl = if *ttl < 0 { ttl == their_ttl } else { (ttl - their_ttl).abs() <= 1000 };
        assert!(same_ttl, "key {key}: time to live {ttl} ms on the master, {their_ttl} ms on the replica");
    }
}

/// Waits until every replica has the master's writes, then compares each
/// one's keyspace with the master's.
fn assert_caught_up(master: &mut Connection, replicas: &mut [Connection]) {
    wait_for(master, replicas.len());
    for replica in replicas {
        assert_same(master, replica);
    }
}

/// A ScaledKV replica (in `dir`/replica) and, where Redis is installed, a
/// Redis one, following the master on `port`, their links up; their
/// servers (to keep) and connections.
fn replicas_of(dir: &std::path::Path, port: u16) -> (Server, Option<RedisServer>, Vec<Connection>) {
    let port = port.to_string();
    let scaledkv = Server::start(&dir.join("replica"), &[]);
    let mut replicas = vec![connect(scaledkv.port)];
    assert_eq!(run(&mut replicas[0], &["REPLICAOF", "127.0.0.1", &port]), Value::Okay);
    let redis = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]);
    if let Some(redis) = &redis {
        replicas.push(connect(redis.port));
    }
    for replica in &mut replicas {
        wait_link_up(replica);
    }
    (scaledkv, redis, replicas)
}

fn run(con: &mut Connection, args: &[&str]) -> Value {
    redis::cmd(args[0]).arg(&args[1..]).query(con).unwrap()
}

/// REPLICAOF NO ONE, then a write: refused (READONLY) only for the moment
/// the link takes to end and its position to be forgotten.
fn promote_and_write(con: &mut Connection, args: &[&str]) -> Value {
    assert_eq!(run(con, &["REPLICAOF", "NO", "ONE"]), Value::Okay);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match redis::cmd(args[0]).arg(&args[1..]).query(con) {
            Ok(value) => return value,
            Err(error) if error.code() == Some("READONLY") && Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(1))
            }
            Err(error) => panic!("{args:?} after REPLICAOF NO ONE: {error}"),
        }
    }
}

/// Every type, small and past the one-value limits, with a function
/// library, in database 0 and (to be skipped) in database 3.
fn fill(con: &mut Connection) {
    fill_db0(con);
    for args in [&["SELECT", "3"][..], &["SET", "elsewhere", "not replicated"], &["SELECT", "0"]] {
        run(con, args);
    }
}

fn fill_db0(con: &mut Connection) {
    for args in [
        &["SET", "int", "12345"][..],
        &["SET", "text", "a value that LZF compresses: aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"],
        &["SET", "ttl", "soon", "EX", "1000"],
        &["HSET", "small-hash", "f", "v", "n", "-300"],
        &["RPUSH", "small-list", "a", "1", "-70000", "hello"],
        &["SADD", "intset", "1", "2", "300", "-70000"],
        &["SADD", "small-set", "a", "b"],
        &["ZADD", "small-zset", "1", "a", "2.5", "b", "-inf", "c"],
        &["XADD", "stream", "1-1", "f", "v"],
        &["XADD", "stream", "2-1", "g", "w"],
        &["XGROUP", "CREATE", "stream", "readers", "1-1"],
        &["FUNCTION", "LOAD", "#!lua name=lib\nredis.register_function{function_name='get_it', callback=function(keys) return redis.call('GET', keys[1]) end, flags={'no-writes'}}"],
    ] {
        run(con, args);
    }
    // Collections past Redis's listpack limits (and ScaledKV's one-value
    // limits): a hash table, a quicklist of several nodes, a skiplist.
    let mut hash = redis::cmd("HSET");
    let mut list = redis::cmd("RPUSH");
    let mut set = redis::cmd("SADD");
    let mut zset = redis::cmd("ZADD");
    hash.arg("big-hash");
    list.arg("big-list");
    set.arg("big-set");
    zset.arg("big-zset");
    for i in 0..3000 {
        hash.arg(format!("field-{i}")).arg(format!("value-{i}"));
        list.arg(format!("element-{i}"));
        set.arg(format!("member-{i}"));
        zset.arg(i as f64 / 7.0).arg(format!("member-{i}"));
    }
    for cmd in [hash, list, set, zset] {
        let _: Value = cmd.query(con).unwrap();
    }
}

/// What the master sends after the sync: its effects (absolute expiry
/// times, a script's writes, SPOP's removals), transactions, a database
/// the replica does not have.
fn change(con: &mut Connection, round: usize) {
    change_db0(con, round);
    let r = round.to_string();
    for args in [&["SELECT", "3"][..], &["SET", "elsewhere", &r], &["SELECT", "0"]] {
        run(con, args);
    }
}

fn change_db0(con: &mut Connection, round: usize) {
    let r = round.to_string();
    for args in [
        &["INCR", "int"][..],
        &["APPEND", "text", &r],
        &["HSET", "big-hash", "field-1", &r],
        &["LPUSH", "small-list", &r],
        &["SPOP", "big-set"],
        &["ZINCRBY", "big-zset", "1.5", "member-7"],
        &["XADD", "stream", "*", "round", &r],
        // A consumer group's reads, claims and acknowledgements, which
        // Redis propagates as XCLAIM and XGROUP SETID, ScaledKV as theirs.
        &["XREADGROUP", "GROUP", "readers", "reader", "COUNT", "1", "STREAMS", "stream", ">"],
        &["XAUTOCLAIM", "stream", "readers", "claimer", "0", "0", "COUNT", "1"],
        &["XACK", "stream", "readers", "2-1"],
        &["SET", &format!("new-{r}"), &r, "PX", "500000"],
        &["EXPIRE", "int", "1000"],
        &["PERSIST", "ttl"],
        &["DEL", "small-set"],
        &["SADD", "intset", "5", &r],
        &["RENAME", "intset", &format!("renamed-{r}")],
        &["INCRBYFLOAT", "float", "1.25"],
        &[
            "EVAL",
            "redis.call('SET', KEYS[1], 'by a script'); return redis.call('INCR', KEYS[2])",
            "2",
            "scripted",
            "script-counter",
        ],
    ] {
        run(con, args);
    }
    let _: Value = redis::pipe()
        .atomic()
        .cmd("SET")
        .arg("in-multi")
        .arg(&r)
        .cmd("SADD")
        .arg("multi-set")
        .arg(&r)
        .query(con)
        .unwrap();
}

#[test]
fn follows_a_redis_master_through_full_and_partial_syncs() {
    let Some((redis, mut master)) = master() else { return };
    fill(&mut master);
    let dir = tempfile::tempdir().unwrap();
    let (server, memcached) = common::start_with_memcached(&dir.path().join("replica"), &[]);
    let mut replica = connect(server.port);
    run(&mut replica, &["SET", "stale", "gone after the sync"]);
    let port = redis.port.to_string();
    assert_eq!(run(&mut replica, &["REPLICAOF", "127.0.0.1", &port]), Value::Okay);
    wait_link_up(&mut replica);
    assert_same(&mut master, &mut replica);
    let skipped: u64 =
        info_field(&mut replica, "replication", "master_skipped_other_databases").unwrap().parse().unwrap();
    assert_eq!(skipped, 1, "the key of database 3");
    // The library came with the data set; a read-only function runs.
    let got: String = redis::cmd("FCALL_RO").arg("get_it").arg(1).arg("int").query(&mut replica).unwrap();
    assert_eq!(got, "12345");

    // Other clients may read, not write: commands, scripts, functions.
    let refused = |con: &mut Connection, args: &[&str]| {
        let error = redis::cmd(args[0]).arg(&args[1..]).query::<Value>(con).unwrap_err();
        assert_eq!(error.code(), Some("READONLY"), "{args:?}: {error}");
    };
    refused(&mut replica, &["SET", "k", "v"]);
    refused(&mut replica, &["EVAL", "return redis.call('SET', 'k', 'v')", "0"]);
    refused(&mut replica, &["DEL", "int"]);
    // And on the memcached port, in its own words.
    let mut text = std::net::TcpStream::connect(("127.0.0.1", memcached)).unwrap();
    text.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    std::io::Write::write_all(&mut text, b"set k 0 0 1\r\nv\r\nget int\r\n").unwrap();
    let replies = common::read_memcached_until(&mut text, b"END\r\n").unwrap();
    assert_eq!(replies, b"SERVER_ERROR read only replica\r\nVALUE int 0 5\r\n12345\r\nEND\r\n");

    for round in 0..3 {
        change(&mut master, round);
        wait_for(&mut master, 1);
        assert_same(&mut master, &mut replica);
    }
    let role: Vec<Value> = redis::cmd("ROLE").query(&mut replica).unwrap();
    assert_eq!(role[0], Value::BulkString(b"slave".to_vec()));
    assert_eq!(role[3], Value::BulkString(b"connected".to_vec()));

    // A broken link resumes where it stopped: a partial resync.
    run(&mut master, &["CLIENT", "KILL", "TYPE", "replica"]);
    change(&mut master, 10);
    wait_link_up(&mut replica);
    wait_for(&mut master, 1);
    assert_same(&mut master, &mut replica);
    assert_eq!(info_field(&mut master, "stats", "sync_partial_ok").as_deref(), Some("1"));
    assert_eq!(info_field(&mut replica, "replication", "master_full_syncs").as_deref(), Some("1"));
    // Killed from the replica's side, it resumes the same way.
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut replica).unwrap();
    assert_eq!(clients.matches("flags=M").count(), 1, "{clients}");
    assert_eq!(run(&mut replica, &["CLIENT", "KILL", "TYPE", "master"]), Value::Int(1));
    change(&mut master, 11);
    wait_for(&mut master, 1);
    assert_same(&mut master, &mut replica);
    assert_eq!(info_field(&mut replica, "replication", "master_partial_syncs").as_deref(), Some("2"));

    // A full sync again, from a master that writes its RDB to disk first
    // (a length-prefixed transfer, where the first was diskless).
    run(&mut master, &["CONFIG", "SET", "repl-diskless-sync", "no"]);
    promote_and_write(&mut replica, &["SET", "written-while-a-master", "gone after the sync"]);
    assert_eq!(run(&mut replica, &["REPLICAOF", "127.0.0.1", &port]), Value::Okay);
    wait_link_up(&mut replica);
    change(&mut master, 20);
    wait_for(&mut master, 1);
    assert_same(&mut master, &mut replica);
    assert_eq!(info_field(&mut master, "stats", "sync_full").as_deref(), Some("2"));
    let again = run(&mut replica, &["REPLICAOF", "127.0.0.1", &port]);
    assert_eq!(again, Value::SimpleString("OK Already connected to specified master".into()));

    // Promoted, it takes writes and keeps the data.
    assert_eq!(promote_and_write(&mut replica, &["SET", "k", "v"]), Value::Okay);
    assert_eq!(run(&mut replica, &["GET", "in-multi"]), Value::BulkString(b"20".to_vec()));
    let role: Vec<Value> = redis::cmd("ROLE").query(&mut replica).unwrap();
    assert_eq!(role[0], Value::BulkString(b"master".to_vec()));
}

/// A ScaledKV master's replicas (a ScaledKV one, and a Redis one where
/// Redis is installed) sync while a client writes, then follow its
/// changes, resume a broken link from the backlog, and see expirations
/// and FLUSHALL; WAIT counts their acknowledgements.
#[test]
fn replicas_follow_a_scaledkv_master_through_full_and_partial_syncs() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("master"), &[]);
    let mut master = connect(server.port);
    fill_db0(&mut master);
    let no_replicas: i64 = redis::cmd("WAIT").arg(1).arg(0).query(&mut master).unwrap();
    assert_eq!(no_replicas, 0, "answered at once without replicas");
    // A writer goes on while the replicas sync: the file's moment and the
    // stream after it must meet exactly.
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, port) = (stop.clone(), server.port);
        std::thread::spawn(move || {
            let mut con = connect(port);
            let mut i = 0u64;
            while !stop.load(Ordering::Relaxed) {
                let _: Value = redis::pipe()
                    .cmd("SET")
                    .arg(format!("w-{}", i % 500))
                    .arg(i)
                    .cmd("INCR")
                    .arg("counter")
                    .cmd("HSET")
                    .arg("big-hash")
                    .arg(format!("field-{}", i % 4000))
                    .arg(i)
                    .cmd("RPUSH")
                    .arg("big-list")
                    .arg(i)
                    .query(&mut con)
                    .unwrap();
                i += 1;
            }
            i
        })
    };
    let (_scaledkv_replica, _redis_replica, mut replicas) = replicas_of(dir.path(), server.port);
    let count = replicas.len();
    std::thread::sleep(Duration::from_millis(300));
    stop.store(true, Ordering::Relaxed);
    assert!(writer.join().unwrap() > 0);
    assert_caught_up(&mut master, &mut replicas);
    // The read-only function came with the file.
    let got: String = redis::cmd("FCALL_RO").arg("get_it").arg(1).arg("int").query(&mut replicas[0]).unwrap();
    assert_eq!(got, "12345");

    for round in 0..3 {
        change_db0(&mut master, round);
        wait_for(&mut master, count);
        for replica in &mut replicas {
            assert_same(&mut master, replica);
        }
    }
    let role: Vec<Value> = redis::cmd("ROLE").query(&mut master).unwrap();
    assert_eq!(role[0], Value::BulkString(b"master".to_vec()));
    assert!(matches!(&role[2], Value::Array(listed) if listed.len() == count), "{role:?}");
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut master).unwrap();
    assert_eq!(clients.matches("flags=S").count(), count, "{clients}");

    // A broken link resumes where it stopped: a partial resync.
    assert_eq!(run(&mut master, &["CLIENT", "KILL", "TYPE", "replica"]), Value::Int(count as i64));
    change_db0(&mut master, 10);
    for replica in &mut replicas {
        wait_link_up(replica);
    }
    assert_caught_up(&mut master, &mut replicas);
    assert_eq!(info_field(&mut master, "stats", "sync_full"), Some(count.to_string()));
    assert_eq!(info_field(&mut master, "stats", "sync_partial_ok"), Some(count.to_string()));
    assert_eq!(info_field(&mut replicas[0], "replication", "master_partial_syncs").as_deref(), Some("1"));

    // Expired keys go as deletes; FLUSHALL empties the replicas.
    run(&mut master, &["SET", "short-lived", "v", "PX", "50"]);
    run(&mut master, &["HSET", "short-hash", "f", "v"]);
    run(&mut master, &["PEXPIRE", "short-hash", "50"]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while info_field(&mut master, "stats", "expired_keys").unwrap().parse::<u64>().unwrap() < 2 {
        assert!(Instant::now() < deadline, "the keys did not expire");
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_for(&mut master, count);
    for replica in &mut replicas {
        assert_same(&mut master, replica);
        assert_eq!(run(replica, &["EXISTS", "short-lived", "short-hash"]), Value::Int(0));
    }
    run(&mut master, &["FLUSHALL"]);
    run(&mut master, &["SET", "after-the-flush", "1"]);
    wait_for(&mut master, count);
    for replica in &mut replicas {
        assert_same(&mut master, replica);
        assert_eq!(run(replica, &["DBSIZE"]), Value::Int(1));
    }
}

/// Writes to big hashes, sets and sorted sets (tables of one engine
/// entry per field) reach the replicas as their field changes (HSET/HDEL,
/// SADD/SREM, ZADD/ZREM), a big list's as what they did (pushes, pops,
/// LSET, LTRIM), a stream's as its new and deleted entries (XADD, XDEL,
/// XSETID), not the whole collection per drain, whatever
/// moved or replaced the table around them in a transaction, a script or
/// a pipeline; and a change too big for one batch (committed in pieces)
/// is read whole.
#[test]
fn big_collections_reach_replicas_as_their_field_changes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("master"), &[]);
    let mut master = connect(server.port);
    fill_db0(&mut master);
    run(&mut master, &["EXPIRE", "big-hash", "100000"]);
    let mut to_empty = redis::cmd("SADD");
    to_empty.arg("to-empty");
    for i in 0..1000 {
        to_empty.arg(format!("a member of a set that goes empty {i}"));
    }
    let _: Value = to_empty.query(&mut master).unwrap();
    let mut stream = redis::pipe();
    for i in 0..3000 {
        stream.cmd("XADD").arg("big-stream").arg(format!("{}-1", i + 1)).arg("n").arg(i).ignore();
    }
    let _: Value = stream.query(&mut master).unwrap();
    let (_scaledkv_replica, _redis_replica, mut replicas) = replicas_of(dir.path(), server.port);
    let count = replicas.len();
    wait_for(&mut master, count);

    // One field at a time, each in a drain of its own: the stream grows
    // by the fields, not by the hash (~80 KB) each time.
    let offset = |con: &mut Connection| -> u64 {
        info_field(con, "replication", "master_repl_offset").unwrap().parse().unwrap()
    };
    let before = offset(&mut master);
    for i in 0..200 {
        run(&mut master, &["HSET", "big-hash", &format!("field-{}", i * 7), &format!("one at a time {i}")]);
        run(&mut master, &["ZINCRBY", "big-zset", "0.25", &format!("member-{i}")]);
        run(&mut master, &["SADD", "big-set", &format!("new member {i}")]);
        run(&mut master, &["RPUSH", "big-list", &format!("pushed {i}")]);
        run(&mut master, &["LPOP", "big-list"]);
        run(&mut master, &["XADD", "big-stream", "MAXLEN", "3000", "*", "i", &i.to_string()]);
        run(&mut master, &["LINSERT", "big-list", "AFTER", &format!("element-{}", 100 + i), "inserted"]);
        run(&mut master, &["LREM", "big-list", "-1", "inserted"]);
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_for(&mut master, count);
    let grown = offset(&mut master) - before;
    assert!(grown < 450_000, "1,600 element writes grew the stream by {grown} bytes");
    for replica in &mut replicas {
        assert_same(&mut master, replica);
    }

    let big_values: Vec<String> = (0..1500).map(|i| format!("{i:04}{}", "x".repeat(1000))).collect();
    let mut in_pieces = redis::cmd("HSET");
    in_pieces.arg("big-hash");
    for (i, value) in big_values.iter().enumerate() {
        in_pieces.arg(format!("piece-field-{i}")).arg(value);
    }
    for args in [
        &["HDEL", "big-hash", "field-1", "field-2", "no such field"][..],
        &["HINCRBY", "big-hash", "counter", "5"],
        &["HINCRBYFLOAT", "big-hash", "float", "0.1"],
        &["HSETNX", "big-hash", "field-3", "not set"],
        &["SREM", "big-set", "member-1", "member-2"],
        &["SMOVE", "big-set", "renamed-moved-to", "member-3"],
        &["SADD", "other-big-set", "x"],
        &["SMOVE", "big-set", "other-big-set", "member-4"],
        &["SPOP", "big-set", "3"],
        &["ZADD", "big-zset", "inf", "top", "-inf", "bottom", "1e300", "huge", "0.1", "member-5"],
        &["ZREM", "big-zset", "member-6"],
        &["ZPOPMIN", "big-zset", "2"],
        &["PERSIST", "big-hash"],
        &["EXPIRE", "big-set", "200000"],
        &["ZADD", "big-zset", "XX", "GT", "CH", "5", "member-9", "1", "member-10"],
        &["LPOP", "big-list", "3"],
        &["RPOP", "big-list"],
        &["LSET", "big-list", "5", "set in place"],
        &["LSET", "big-list", "-2", "set from the end"],
        &["LTRIM", "big-list", "2", "-3"],
        &["LINSERT", "big-list", "BEFORE", "element-100", "inserted"],
        &["LREM", "big-list", "1", "element-101"],
        &["RPUSH", "small-list-2", "x"],
        &["LMOVE", "big-list", "small-list-2", "LEFT", "RIGHT"],
        &["RPOPLPUSH", "big-list", "big-list"],
        &["BLPOP", "big-list", "0"],
        &["LPUSHX", "big-list", "pushed if there"],
        &["EXPIRE", "big-list", "300000"],
        &["LMPOP", "1", "big-list", "RIGHT", "COUNT", "2"],
        &["XDEL", "big-stream", "5-1", "6-1", "1-1"],
        &["XTRIM", "big-stream", "MINID", "20-1"],
        &["XADD", "big-stream", "NOMKSTREAM", "MAXLEN", "~", "2000", "*", "capped", "1"],
        &["XADD", "big-stream", "99999999999999-5", "explicit", "id"],
        &["XSETID", "big-stream", "99999999999999-9", "ENTRIESADDED", "100000", "MAXDELETEDID", "99999999999999-7"],
        &["EXPIRE", "big-stream", "400000"],
        &["XGROUP", "CREATE", "big-stream", "group", "0"],
        &["XREADGROUP", "GROUP", "group", "alice", "COUNT", "5", "STREAMS", "big-stream", ">"],
        &["XADD", "big-stream", "*", "after", "the group"],
        &["XACK", "big-stream", "group", "25-1"],
    ] {
        run(&mut master, args);
    }
    let _: Value = in_pieces.query(&mut master).unwrap();
    // The table moves away and back, and is replaced, within transactions.
    let _: Value = redis::pipe()
        .atomic()
        .cmd("HSET")
        .arg("big-hash")
        .arg("before-the-move")
        .arg(1)
        .cmd("RENAME")
        .arg("big-hash")
        .arg("moved-hash")
        .cmd("HSET")
        .arg("moved-hash")
        .arg("while-moved")
        .arg(2)
        .cmd("RENAME")
        .arg("moved-hash")
        .arg("big-hash")
        .cmd("HDEL")
        .arg("big-hash")
        .arg("field-5")
        .query(&mut master)
        .unwrap();
    let _: Value = redis::pipe()
        .atomic()
        .cmd("SADD")
        .arg("other-big-set")
        .arg("y")
        .cmd("SADD")
        .arg("big-set")
        .arg("before-the-delete")
        .cmd("DEL")
        .arg("big-set")
        .cmd("SADD")
        .arg("big-set")
        .arg("a new small set")
        .query(&mut master)
        .unwrap();
    let _: Value = redis::pipe()
        .atomic()
        .cmd("RPUSH")
        .arg("big-list")
        .arg("before the move")
        .cmd("RENAME")
        .arg("big-list")
        .arg("moved-list")
        .cmd("LPOP")
        .arg("moved-list")
        .cmd("RENAME")
        .arg("moved-list")
        .arg("big-list")
        .cmd("LSET")
        .arg("big-list")
        .arg(0)
        .arg("after the move")
        .query(&mut master)
        .unwrap();
    // A script, and a pipeline's run of read-modify-writes of one key.
    run(
        &mut master,
        &[
            "EVAL",
            "redis.call('HSET', KEYS[1], 'scripted', 'yes'); return redis.call('HDEL', KEYS[1], 'field-8')",
            "1",
            "big-hash",
        ],
    );
    let mut pipe = redis::pipe();
    for i in 0..16 {
        pipe.cmd("HSET").arg("big-hash").arg(format!("pipelined-{}", i % 5)).arg(i);
        pipe.cmd("HDEL").arg("big-hash").arg(format!("field-{}", 100 + i));
        pipe.cmd("ZINCRBY").arg("big-zset").arg(1).arg("member-20");
        pipe.cmd("RPUSH").arg("big-list").arg(i);
        pipe.cmd("LPOP").arg("big-list");
    }
    let _: Value = pipe.query(&mut master).unwrap();
    // A table emptied goes; members removed one command at a time first.
    let mut remove = redis::cmd("SREM");
    remove.arg("to-empty");
    for i in 0..1000 {
        remove.arg(format!("a member of a set that goes empty {i}"));
    }
    run(&mut master, &["SREM", "to-empty", "a member of a set that goes empty 0"]);
    let _: Value = remove.query(&mut master).unwrap();
    assert_eq!(run(&mut master, &["EXISTS", "to-empty"]), Value::Int(0));
    wait_for(&mut master, count);
    // A stream's counters, which XRANGE does not show.
    let counters = |con: &mut Connection| -> Vec<String> {
        let info: Vec<Value> = redis::cmd("XINFO").arg("STREAM").arg("big-stream").query(con).unwrap();
        ["length", "last-generated-id", "max-deleted-entry-id", "entries-added"]
            .iter()
            .map(|name| {
                let at = info.iter().position(|v| matches!(v, Value::BulkString(b) if b == name.as_bytes())).unwrap();
                format!("{name} {:?}", info[at + 1])
            })
            .collect()
    };
    let on_master = counters(&mut master);
    for replica in &mut replicas {
        assert_same(&mut master, replica);
        assert_eq!(counters(replica), on_master);
    }
}

/// What consumers do to a stream's groups — reads that deliver, reads of
/// their history, acknowledgements, claims — none of which Redis
/// publishes a keyspace event for, each in a drain of its own, then the
/// group commands: a ScaledKV replica (and a Redis one) ends with every
/// group, consumer and pending entry as the master holds them.
#[test]
fn consumer_group_changes_reach_the_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("master"), &[]);
    let mut master = connect(server.port);
    let mut stream = redis::pipe();
    for i in 0..3000 {
        stream.cmd("XADD").arg("jobs").arg(format!("{}-1", i + 1)).arg("job").arg(i).ignore();
    }
    let _: Value = stream.query(&mut master).unwrap();
    run(&mut master, &["XGROUP", "CREATE", "jobs", "workers", "0"]);
    run(&mut master, &["XGROUP", "CREATE", "jobs", "audit", "0", "ENTRIESREAD", "0"]);
    run(&mut master, &["XREADGROUP", "GROUP", "workers", "alice", "COUNT", "10", "STREAMS", "jobs", ">"]);
    let (_scaledkv_replica, _redis_replica, mut replicas) = replicas_of(dir.path(), server.port);
    let count = replicas.len();
    wait_for(&mut master, count);

    let offset = |con: &mut Connection| -> u64 {
        info_field(con, "replication", "master_repl_offset").unwrap().parse().unwrap()
    };
    let before = offset(&mut master);
    for i in 0..100 {
        let consumer = ["alice", "bob", "carol"][i % 3];
        run(&mut master, &["XREADGROUP", "GROUP", "workers", consumer, "COUNT", "2", "STREAMS", "jobs", ">"]);
        run(&mut master, &["XACK", "jobs", "workers", &format!("{}-1", 2 * i + 1)]);
        run(&mut master, &["XREADGROUP", "GROUP", "audit", "auditor", "NOACK", "COUNT", "1", "STREAMS", "jobs", ">"]);
        std::thread::sleep(Duration::from_millis(1));
    }
    wait_for(&mut master, count);
    // 300 changes to groups, none to entries: each as its own commands
    // (~180 bytes), not the stream (~21 KB) each time.
    let grown = offset(&mut master) - before;
    assert!(grown < 150_000, "300 group changes grew the replication stream by {grown} bytes");
    for replica in &mut replicas {
        assert_same(&mut master, replica);
    }

    for args in [
        &["XREADGROUP", "GROUP", "workers", "bob", "STREAMS", "jobs", "0"][..],
        &["XCLAIM", "jobs", "workers", "dave", "0", "4-1", "6-1", "RETRYCOUNT", "7"],
        &["XCLAIM", "jobs", "workers", "dave", "0", "8-1", "TIME", "1000", "JUSTID"],
        &["XCLAIM", "jobs", "workers", "erin", "0", "2999-1", "FORCE", "LASTID", "250-1"],
        &["XDEL", "jobs", "10-1", "12-1"],
        &["XCLAIM", "jobs", "workers", "dave", "0", "10-1"],
        &["XAUTOCLAIM", "jobs", "workers", "frank", "0", "0", "COUNT", "5"],
        &["XAUTOCLAIM", "jobs", "workers", "frank", "0", "0", "COUNT", "3", "JUSTID"],
        &["XACK", "jobs", "workers", "14-1", "16-1", "999-1"],
        &["XGROUP", "CREATECONSUMER", "jobs", "workers", "idle-one"],
        &["XGROUP", "DELCONSUMER", "jobs", "workers", "carol"],
        &["XGROUP", "SETID", "jobs", "audit", "100-1", "ENTRIESREAD", "100"],
        &["XGROUP", "SETID", "jobs", "workers", "50-1"],
        &["XREADGROUP", "GROUP", "workers", "alice", "COUNT", "3", "STREAMS", "jobs", ">"],
        &["XGROUP", "CREATE", "jobs", "late", "$"],
        &["XREADGROUP", "GROUP", "late", "gina", "STREAMS", "jobs", ">"],
        &["XADD", "jobs", "*", "job", "new"],
        &["XREADGROUP", "GROUP", "late", "gina", "STREAMS", "jobs", ">"],
        &["XGROUP", "DESTROY", "jobs", "audit"],
        &["XTRIM", "jobs", "MINID", "30-1"],
    ] {
        run(&mut master, args);
    }
    // A group destroyed and made again, and a consumer deleted and made
    // again, within transactions.
    let _: Value = redis::pipe()
        .atomic()
        .cmd("XREADGROUP")
        .arg(&["GROUP", "late", "hank", "STREAMS", "jobs", "0"])
        .cmd("XGROUP")
        .arg(&["DESTROY", "jobs", "late"])
        .cmd("XGROUP")
        .arg(&["CREATE", "jobs", "late", "20-1"])
        .cmd("XREADGROUP")
        .arg(&["GROUP", "late", "hank", "COUNT", "4", "STREAMS", "jobs", ">"])
        .query(&mut master)
        .unwrap();
    let _: Value = redis::pipe()
        .atomic()
        .cmd("XGROUP")
        .arg(&["DELCONSUMER", "jobs", "workers", "bob"])
        .cmd("XREADGROUP")
        .arg(&["GROUP", "workers", "bob", "COUNT", "2", "STREAMS", "jobs", ">"])
        .query(&mut master)
        .unwrap();
    run(&mut master, &["EVAL", "return redis.call('XACK', KEYS[1], 'workers', '52-1', '53-1')", "1", "jobs"]);
    assert_caught_up(&mut master, &mut replicas);
}

/// Every write command not driven by the other tests, on small and big
/// values (some of them changing nothing), and memcached's writes: a
/// ScaledKV replica (and a Redis one) ends with every key as the master
/// holds it. The server's debug build also fails a batch that changes a
/// key no event names (what XACK's did), which a replica would miss.
#[test]
fn every_write_command_reaches_the_replicas() {
    use std::io::{Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let (server, memcached) = common::start_with_memcached(&dir.path().join("master"), &[]);
    let mut master = connect(server.port);
    fill_db0(&mut master);
    let (_scaledkv_replica, _redis_replica, mut replicas) = replicas_of(dir.path(), server.port);
    let count = replicas.len();
    wait_for(&mut master, count);
    for args in [
        &["SET", "counter", "10"][..],
        &["DECR", "counter"],
        &["DECRBY", "counter", "3"],
        &["INCRBY", "counter", "100"],
        &["SETEX", "expiring", "1000", "x"],
        &["PSETEX", "expiring-ms", "900000", "y"],
        &["SETNX", "counter", "not set"],
        &["SETNX", "set-if-new", "set"],
        &["MSETNX", "msetnx-a", "1", "msetnx-b", "2"],
        &["MSETNX", "msetnx-a", "3", "msetnx-c", "4"],
        &["GETSET", "counter", "20"],
        &["GETDEL", "set-if-new"],
        &["GETDEL", "no such key"],
        &["GETEX", "msetnx-a", "PX", "800000"],
        &["GETEX", "msetnx-b"],
        &["SETRANGE", "text", "5", "RANGE"],
        &["SETRANGE", "padded", "10", "after zeros"],
        &["SETBIT", "bits", "100", "1"],
        &["BITFIELD", "bits", "SET", "u8", "0", "200", "INCRBY", "i5", "8", "3"],
        &["BITOP", "OR", "bits-or", "bits", "text"],
        &["PEXPIREAT", "counter", "99999999999999"],
        &["EXPIREAT", "msetnx-b", "1"],
        &["UNLINK", "msetnx-c", "no such key"],
        &["RENAMENX", "text", "int"],
        &["RENAMENX", "text", "text-renamed"],
        &["COPY", "big-hash", "big-hash-copy"],
        &["COPY", "small-list", "int", "REPLACE"],
        &["HMSET", "big-hash", "hmset-1", "a", "hmset-2", "b"],
        &["RPUSHX", "big-list", "pushed at the tail"],
        &["RPUSHX", "no such list", "x"],
        &["BRPOP", "big-list", "0"],
        &["BRPOPLPUSH", "big-list", "small-list", "0"],
        &["BLMOVE", "small-list", "big-list", "LEFT", "LEFT", "0"],
        &["BLMPOP", "0", "2", "no such list", "big-list", "LEFT", "COUNT", "3"],
        &["PFADD", "hll", "a", "b", "c"],
        &["PFADD", "hll", "a"],
        // Its cached count is in its bytes, which the replicas compare.
        &["PFCOUNT", "hll"],
        &["PFADD", "hll-2", "d"],
        &["PFCOUNT", "hll", "hll-2"],
        &["PFMERGE", "hll-merged", "hll", "hll-2"],
        &["SINTERSTORE", "inter", "big-set", "small-set"],
        &["SUNIONSTORE", "union", "big-set", "small-set"],
        &["SDIFFSTORE", "big-set-copy", "big-set", "small-set"],
        &["SDIFFSTORE", "union", "no such set"],
        &["ZUNIONSTORE", "zunion", "2", "big-zset", "small-zset", "WEIGHTS", "2", "1"],
        &["ZINTERSTORE", "zinter", "2", "big-zset", "small-zset"],
        &["ZDIFFSTORE", "zdiff", "2", "big-zset", "small-zset"],
        &["ZRANGESTORE", "zrange", "big-zset", "10", "20"],
        &["ZPOPMAX", "big-zset", "2"],
        &["BZPOPMAX", "big-zset", "0"],
        &["BZPOPMIN", "small-zset", "0"],
        &["ZMPOP", "1", "big-zset", "MIN", "COUNT", "2"],
        &["BZMPOP", "0", "1", "big-zset", "MAX"],
        &["ZREMRANGEBYRANK", "big-zset", "0", "4"],
        &["ZREMRANGEBYSCORE", "big-zset", "10", "20"],
        &["ZREMRANGEBYLEX", "small-zset", "-", "+"],
        &["ZREMRANGEBYRANK", "big-zset", "100000", "200000"],
        &["GEOADD", "places", "13.361389", "38.115556", "Palermo", "15.087269", "37.502669", "Catania"],
        &["GEORADIUS", "places", "15", "37", "200", "km", "STORE", "near"],
        &["GEORADIUSBYMEMBER", "places", "Palermo", "300", "km", "STOREDIST", "near-dist"],
        &["GEOSEARCHSTORE", "searched", "places", "FROMMEMBER", "Catania", "BYRADIUS", "500", "km", "ASC"],
        &["SORT", "big-list", "ALPHA", "LIMIT", "0", "50", "STORE", "sorted"],
        &["SORT", "intset", "STORE", "sorted-numbers"],
        // Results that store nothing where nothing was.
        &["SORT", "no such list", "STORE", "sort-empty"],
        &["GEOSEARCHSTORE", "geo-empty", "places", "FROMLONLAT", "0", "0", "BYRADIUS", "1", "km"],
        &["ZRANGESTORE", "zrange-empty", "big-zset", "100000", "200000"],
        &["ZINTERSTORE", "zinter-empty", "2", "no such zset", "big-zset"],
        &["BITOP", "AND", "bitop-empty", "no such key", "no such key either"],
        &["PFMERGE", "hll-from-nothing", "no such hll"],
        &["COPY", "no such key", "copy-of-nothing"],
    ] {
        run(&mut master, args);
    }
    // memcached's writes, as a client of its text protocol sends them.
    let mut stream = std::net::TcpStream::connect(("127.0.0.1", memcached)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    for (line, reply) in [
        ("set mc-a 5 0 3\r\nabc\r\n", "STORED\r\n"),
        ("add mc-a 0 0 1\r\nx\r\n", "NOT_STORED\r\n"),
        ("add mc-b 0 1000 2\r\nbb\r\n", "STORED\r\n"),
        ("replace mc-b 1 0 3\r\nccc\r\n", "STORED\r\n"),
        ("append mc-a 0 0 3\r\ndef\r\n", "STORED\r\n"),
        ("prepend mc-a 0 0 2\r\n>>\r\n", "STORED\r\n"),
        ("set mc-n 0 0 2\r\n41\r\n", "STORED\r\n"),
        ("incr mc-n 1\r\n", "42\r\n"),
        ("decr mc-n 50\r\n", "0\r\n"),
        ("touch mc-b 5000\r\n", "TOUCHED\r\n"),
        ("set mc-gone 0 0 1\r\nz\r\n", "STORED\r\n"),
        ("delete mc-gone\r\n", "DELETED\r\n"),
    ] {
        stream.write_all(line.as_bytes()).unwrap();
        let mut got = vec![0u8; reply.len()];
        stream.read_exact(&mut got).unwrap();
        assert_eq!(String::from_utf8_lossy(&got), reply, "{line:?}");
    }
    assert_caught_up(&mut master, &mut replicas);
}

/// Clients that change the same big collections at once (their commands
/// read each other's queued writes, `crate::pending`) with field writes,
/// moves, replacements, expiry and transactions: a ScaledKV replica (and
/// a Redis one) ends with every key as the master holds it.
#[test]
fn concurrent_changes_to_big_collections_reach_the_replicas_whole() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("master"), &[]);
    let mut master = connect(server.port);
    fill_db0(&mut master);
    let (_scaledkv_replica, _redis_replica, mut replicas) = replicas_of(dir.path(), server.port);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3u64)
        .map(|writer| {
            let (stop, port) = (stop.clone(), server.port);
            std::thread::spawn(move || {
                let mut con = connect(port);
                // A fixed walk per writer (xorshift), so a failure repeats.
                let mut state = 0x9E37_79B9_7F4A_7C15u64 ^ writer;
                let mut next = move |n: u64| {
                    state ^= state << 13;
                    state ^= state >> 7;
                    state ^= state << 17;
                    state % n
                };
                let mut done = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let (field, n) = (format!("field-{}", next(4000)), next(1000).to_string());
                    let member = format!("member-{}", next(3000));
                    let mut pipe = redis::pipe();
                    match next(15) {
                        0 => pipe.cmd("HSET").arg("big-hash").arg(&field).arg(&n).ignore(),
                        1 => pipe.cmd("HDEL").arg("big-hash").arg(&field).ignore(),
                        2 => pipe.cmd("HINCRBY").arg("big-hash").arg(format!("counter-{}", next(50))).arg(3).ignore(),
                        3 => pipe.cmd("SADD").arg("big-set").arg(&member).ignore(),
                        4 => pipe.cmd("SREM").arg("big-set").arg(&member).ignore(),
                        5 => pipe.cmd("ZINCRBY").arg("big-zset").arg(0.5).arg(&member).ignore(),
                        6 => pipe.cmd("ZREM").arg("big-zset").arg(&member).ignore(),
                        7 => pipe.cmd("EXPIRE").arg("big-hash").arg(100_000 + next(1000)).ignore(),
                        8 => pipe.cmd("PERSIST").arg("big-zset").ignore(),
                        9 => pipe
                            .atomic()
                            .cmd("RENAME")
                            .arg("big-set")
                            .arg("set-aside")
                            .ignore()
                            .cmd("SADD")
                            .arg("set-aside")
                            .arg(&member)
                            .ignore()
                            .cmd("RENAME")
                            .arg("set-aside")
                            .arg("big-set")
                            .ignore(),
                        10 => pipe.cmd("SMOVE").arg("big-set").arg("moved-to").arg(&member).ignore(),
                        12 => pipe.cmd("RPUSH").arg("big-list").arg(&n).ignore(),
                        13 => pipe.cmd("LPOP").arg("big-list").arg(1 + next(3)).ignore(),
                        14 => pipe.cmd("LMOVE").arg("big-list").arg("big-list").arg("RIGHT").arg("LEFT").ignore(),
                        _ => pipe
                            .atomic()
                            .cmd("HSET")
                            .arg("big-hash")
                            .arg(&field)
                            .arg(&n)
                            .ignore()
                            .cmd("ZADD")
                            .arg("big-zset")
                            .arg(&n)
                            .arg(&member)
                            .ignore(),
                    };
                    let _: Value = pipe.query(&mut con).unwrap();
                    done += 1;
                }
                done
            })
        })
        .collect();
    std::thread::sleep(Duration::from_secs(2));
    stop.store(true, Ordering::Relaxed);
    for writer in writers {
        assert!(writer.join().unwrap() > 0);
    }
    let early: u64 = info_field(&mut master, "persistence", "early_lock_releases").unwrap().parse().unwrap();
    assert!(early > 0, "no command read another's queued write");
    assert_caught_up(&mut master, &mut replicas);
}

/// A transaction on a ScaledKV master reaches a Redis replica whole: a
/// reader of the replica never sees one of its keys written and the other
/// not (a drain reads its keys at one snapshot and sends them as one
/// MULTI/EXEC). Values of 100 KB, so that the replica reads a drain in
/// several pieces and runs each command as it completes: without the
/// MULTI, its reader sees the halves.
#[test]
fn a_replica_never_sees_half_a_transaction() {
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("master"), &[]);
    let port = server.port.to_string();
    let Some(redis) = RedisServer::start_with(&["--replicaof", "127.0.0.1", &port]) else { return };
    let mut replica = connect(redis.port);
    wait_link_up(&mut replica);
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let stop = stop.clone();
        let port = server.port;
        std::thread::spawn(move || {
            let mut con = connect(port);
            let mut i = 0u64;
            let padding = "p".repeat(100_000);
            while !stop.load(Ordering::Relaxed) {
                let value = format!("{i}-{padding}");
                let _: Value = redis::pipe()
                    .atomic()
                    .cmd("SET")
                    .arg("a")
                    .arg(&value)
                    .cmd("INCR")
                    .arg("filler")
                    .cmd("SET")
                    .arg("b")
                    .arg(&value)
                    .query(&mut con)
                    .unwrap();
                i += 1;
            }
            i
        })
    };
    let deadline = Instant::now() + Duration::from_secs(2);
    let mut reads = 0;
    while Instant::now() < deadline {
        let (a, b): (Option<Vec<u8>>, Option<Vec<u8>>) =
            redis::cmd("MGET").arg("a").arg("b").query(&mut replica).unwrap();
        assert!(a == b, "half a transaction on the replica");
        reads += 1;
    }
    stop.store(true, Ordering::Relaxed);
    let written = writer.join().unwrap();
    let mut master = connect(server.port);
    wait_for(&mut master, 1);
    assert_same(&mut master, &mut replica);
    assert!(written > 100 && reads > 100, "{written} transactions, {reads} reads");
}

/// WAIT gives up at its timeout with the count of replicas that
/// acknowledged: a stopped replica (SIGSTOP) is not counted until it
/// goes on and catches up.
#[test]
fn wait_counts_only_the_replicas_that_acknowledged_in_time() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("master"), &[]);
    let mut master = connect(server.port);
    let follow = format!("127.0.0.1 {}", server.port);
    let replica_server = Server::start(&dir.path().join("replica"), &["--replicaof", &follow]);
    let mut replica = connect(replica_server.port);
    wait_link_up(&mut replica);
    run(&mut master, &["SET", "before", "1"]);
    wait_for(&mut master, 1);
    let pid = replica_server.pid() as i32;
    // SAFETY: signalling our own child by its PID.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    run(&mut master, &["SET", "while-stopped", "1"]);
    let started = Instant::now();
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(300).query(&mut master).unwrap();
    let waited = started.elapsed();
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    assert_eq!(acked, 0, "a stopped replica acknowledged");
    assert!(waited >= Duration::from_millis(300), "WAIT returned after {waited:?}");
    wait_for(&mut master, 1);
    assert_same(&mut master, &mut replica);
    let info: String = redis::cmd("INFO").arg("replication").query(&mut master).unwrap();
    assert!(info.contains("connected_slaves:1") && info.contains("state=online"), "{info}");
}

/// `min-replicas-to-write`, as Redis's: a master refuses writes (and
/// transactions and scripts that write) with NOREPLICAS while fewer
/// online replicas than it asks acknowledged within
/// `min-replicas-max-lag` seconds; reads go on. A stopped replica stops
/// counting once its lag passes the limit, and counts again when it
/// comes back.
#[test]
fn min_replicas_to_write_refuses_writes_without_enough_good_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("master"), &[]);
    let mut master = connect(server.port);
    let set = |con: &mut Connection| redis::cmd("SET").arg("k").arg("v").query::<()>(con);
    let refused = |con: &mut Connection| set(con).is_err_and(|e| e.to_string().contains("Not enough good replicas"));
    run(&mut master, &["CONFIG", "SET", "min-replicas-to-write", "1", "min-replicas-max-lag", "1"]);
    assert!(refused(&mut master));
    assert_eq!(run(&mut master, &["GET", "k"]), Value::Nil);
    assert_eq!(info_field(&mut master, "replication", "min_slaves_good_slaves").as_deref(), Some("0"));
    let follow = format!("127.0.0.1 {}", server.port);
    let replica_server = Server::start(&dir.path().join("replica"), &["--replicaof", &follow]);
    let mut replica = connect(replica_server.port);
    wait_link_up(&mut replica);
    let until = |con: &mut Connection, want_refused: bool, what: &str| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while refused(con) != want_refused {
            assert!(Instant::now() < deadline, "{what}");
            std::thread::sleep(Duration::from_millis(50));
        }
    };
    until(&mut master, false, "writes stayed refused with a good replica");
    assert_eq!(info_field(&mut master, "replication", "min_slaves_good_slaves").as_deref(), Some("1"));
    let pid = replica_server.pid() as i32;
    // SAFETY: signalling our own child by its PID.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    until(&mut master, true, "a stopped replica still counted");
    let exec: Result<(), _> = redis::pipe().atomic().set("k", "w").query(&mut master);
    assert!(exec.is_err_and(|e| e.to_string().contains("Not enough good replicas")));
    let script = redis::cmd("EVAL").arg("return redis.call('set','k','x')").arg(0).query::<()>(&mut master);
    assert!(script.is_err_and(|e| e.to_string().contains("Not enough good replicas")));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    until(&mut master, false, "the replica back did not count again");
    run(&mut master, &["CONFIG", "SET", "min-replicas-to-write", "0"]);
}

/// A ScaledKV replica of a ScaledKV master SIGKILLed while the master
/// takes writes resumes from the backlog (a partial resync) and catches
/// up; the master SIGKILLed keeps every write it acknowledged, and its
/// replica, pointed at it again, syncs in full to the same data.
#[test]
fn a_scaledkv_master_and_its_replica_come_back_from_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("master"), &[]);
    let mut master = connect(server.port);
    run(&mut master, &["CONFIG", "SET", "repl-backlog-size", "64mb"]);
    let follow = format!("127.0.0.1 {}", server.port);
    let mut replica_server = Server::start(&dir.path().join("replica"), &["--replicaof", &follow]);
    let mut replica = connect(replica_server.port);
    wait_link_up(&mut replica);
    let write = |con: &mut Connection, round: usize, count: usize| {
        for i in 0..count {
            let _: Value = redis::pipe()
                .cmd("SET")
                .arg(format!("key-{round}-{i}"))
                .arg("x".repeat(i % 500))
                .cmd("INCR")
                .arg("counter")
                .cmd("HSET")
                .arg("hash")
                .arg(format!("f{}", i % 50))
                .arg(round)
                .query(con)
                .unwrap();
        }
    };
    for round in 0..common::crash_iterations(3) {
        write(&mut master, round, 300);
        wait_for(&mut master, 1);
        assert_same(&mut master, &mut replica);
        write(&mut master, round + 100, 100);
        replica_server.kill();
        write(&mut master, round + 200, 100);
        replica_server = Server::start(&dir.path().join("replica"), &["--replicaof", &follow]);
        replica = connect(replica_server.port);
        wait_link_up(&mut replica);
        wait_for(&mut master, 1);
        assert_same(&mut master, &mut replica);
        assert_eq!(info_field(&mut master, "stats", "sync_partial_ok"), Some((round + 1).to_string()));
        assert_eq!(info_field(&mut master, "stats", "sync_full").as_deref(), Some("1"));
    }
    // The master goes down mid-stream; what it acknowledged is on its
    // medium, and its replica follows the new history in full.
    write(&mut master, 1000, 200);
    let before = keyspace(&mut master);
    server.kill();
    server = Server::start(&dir.path().join("master"), &[]);
    master = connect(server.port);
    assert_eq!(keyspace(&mut master), before, "every acknowledged write survives the master's SIGKILL");
    let port = server.port.to_string();
    assert_eq!(run(&mut replica, &["REPLICAOF", "127.0.0.1", &port]), Value::Okay);
    wait_link_up(&mut replica);
    write(&mut master, 2000, 50);
    wait_for(&mut master, 1);
    assert_same(&mut master, &mut replica);
    assert_eq!(info_field(&mut master, "stats", "sync_full").as_deref(), Some("1"));
}

/// FUNCTION LOAD, DELETE, FLUSH and RESTORE on a ScaledKV master reach
/// its replicas (a ScaledKV one, a Redis one) after their sync, FLUSHALL
/// keeping the libraries on both sides.
#[test]
fn function_changes_reach_the_replicas() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("master"), &[]);
    let mut master = connect(server.port);
    let (_scaledkv_replica, _redis_replica, mut replicas) = replicas_of(dir.path(), server.port);
    let library = |name: &str, reply: &str| {
        format!("#!lua name={name}\nredis.register_function{{function_name='{name}_f', callback=function() return '{reply}' end, flags={{'no-writes'}}}}")
    };
    // Each library's name and code, in name order.
    let libraries = |con: &mut Connection| -> Vec<(String, String)> {
        let listed: Vec<Vec<Value>> = redis::cmd("FUNCTION").arg("LIST").arg("WITHCODE").query(con).unwrap();
        let text = |value: &Value| match value {
            Value::BulkString(bytes) => String::from_utf8_lossy(bytes).into_owned(),
            other => panic!("{other:?}"),
        };
        let field = |entry: &[Value], name: &str| {
            let at = entry.iter().position(|v| matches!(v, Value::BulkString(b) if b == name.as_bytes())).unwrap();
            text(&entry[at + 1])
        };
        let mut pairs: Vec<(String, String)> =
            listed.iter().map(|entry| (field(entry, "library_name"), field(entry, "library_code"))).collect();
        pairs.sort();
        pairs
    };
    let check = |master: &mut Connection, replicas: &mut [Connection], expected: usize| {
        wait_for(master, replicas.len());
        let on_master = libraries(master);
        assert_eq!(on_master.len(), expected);
        for replica in replicas {
            assert_eq!(libraries(replica), on_master);
        }
    };
    run(&mut master, &["FUNCTION", "LOAD", &library("one", "1")]);
    run(&mut master, &["FUNCTION", "LOAD", &library("two", "2")]);
    check(&mut master, &mut replicas, 2);
    let got: String = redis::cmd("FCALL_RO").arg("two_f").arg(0).query(&mut replicas[0]).unwrap();
    assert_eq!(got, "2");
    // Replaced, then FLUSHALL and a load in one drain.
    run(&mut master, &["FUNCTION", "LOAD", "REPLACE", &library("two", "2b")]);
    run(&mut master, &["SET", "k", "v"]);
    run(&mut master, &["FLUSHALL"]);
    run(&mut master, &["FUNCTION", "LOAD", &library("three", "3")]);
    check(&mut master, &mut replicas, 3);
    let dump: Vec<u8> = redis::cmd("FUNCTION").arg("DUMP").query(&mut master).unwrap();
    run(&mut master, &["FUNCTION", "DELETE", "one"]);
    check(&mut master, &mut replicas, 2);
    run(&mut master, &["FUNCTION", "FLUSH"]);
    check(&mut master, &mut replicas, 0);
    let _: Value = redis::cmd("FUNCTION").arg("RESTORE").arg(&dump).query(&mut master).unwrap();
    check(&mut master, &mut replicas, 3);
    let got: String = redis::cmd("FCALL_RO").arg("two_f").arg(0).query(&mut replicas[0]).unwrap();
    assert_eq!(got, "2b");
}

/// A ScaledKV master stopped cleanly (SHUTDOWN, SIGTERM) keeps its
/// replication history: after its restart, its replicas (a ScaledKV one
/// and a Redis one) resume with a partial resync, writes made before they
/// reconnect and keys that expired while it was down included; after a
/// SIGKILL (no history kept) they sync in full.
#[test]
fn replicas_resume_partially_after_their_master_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let master_dir = dir.path().join("master");
    let mut server = Server::start(&master_dir, &[]);
    let mut master = connect(server.port);
    fill_db0(&mut master);
    let (_scaledkv_replica, _redis_replica, mut replicas) = replicas_of(dir.path(), server.port);
    let count = replicas.len();
    let dbsize = |con: &mut Connection| -> i64 { redis::cmd("DBSIZE").query(con).unwrap() };
    for (round, stop) in ["shutdown", "sigterm", "sigkill"].into_iter().enumerate() {
        change_db0(&mut master, round);
        run(&mut master, &["SET", &format!("gone-while-down-{round}"), "v", "PX", "300"]);
        let replid = info_field(&mut master, "replication", "master_replid").unwrap();
        // The last writes may still be on their way when it stops.
        change_db0(&mut master, round + 100);
        match stop {
            "shutdown" => {
                let _ = redis::cmd("SHUTDOWN").query::<Value>(&mut master);
                assert!(server.wait_exit(), "a clean exit");
            }
            "sigterm" => assert!(server.terminate(), "a clean exit"),
            _ => server.kill(),
        }
        std::thread::sleep(Duration::from_millis(400));
        server = Server::start(&master_dir, &[]);
        master = connect(server.port);
        let kept = info_field(&mut master, "replication", "master_replid").unwrap();
        assert_eq!(kept == replid, stop != "sigkill", "{stop}: replication ID {replid} then {kept}");
        change_db0(&mut master, round + 200);
        let port = server.port.to_string();
        for replica in &mut replicas {
            assert_eq!(run(replica, &["REPLICAOF", "127.0.0.1", &port]), Value::Okay);
        }
        for replica in &mut replicas {
            wait_link_up(replica);
        }
        wait_for(&mut master, count);
        let (full, partial) = if stop == "sigkill" { (count, 0) } else { (0, count) };
        assert_eq!(info_field(&mut master, "stats", "sync_full"), Some(full.to_string()), "{stop}");
        assert_eq!(info_field(&mut master, "stats", "sync_partial_ok"), Some(partial.to_string()), "{stop}");
        for replica in &mut replicas {
            assert_same(&mut master, replica);
            assert_eq!(dbsize(replica), dbsize(&mut master), "{stop}: the key that expired went");
        }
    }
}

/// A ScaledKV replica promoted when its master dies (what Sentinel does)
/// goes on from its master's history (PSYNC2): the master's other
/// replicas, a ScaledKV one and, where installed, a Redis one, follow it
/// with a partial resync and get its writes from the first one on, even
/// those made before they came. A replica that had less of the history
/// syncs in full.
#[test]
fn replicas_go_on_partially_from_a_promoted_replica() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("master"), &[]);
    let mut master = connect(server.port);
    fill_db0(&mut master);
    let heir = Server::start(&dir.path().join("heir"), &[]);
    let mut promoted = connect(heir.port);
    assert_eq!(run(&mut promoted, &["REPLICAOF", "127.0.0.1", &server.port.to_string()]), Value::Okay);
    wait_link_up(&mut promoted);
    // Redis's smallest backlog: the heir keeps the last 16 KiB of the
    // master's stream.
    assert_eq!(run(&mut promoted, &["CONFIG", "SET", "repl-backlog-size", "16384"]), Value::Okay);
    let (_scaledkv_replica, _redis_replica, mut replicas) = replicas_of(dir.path(), server.port);
    // Two more replicas, stopped before the last writes: they hold less of
    // the history than the heir; what `slow` lacks is in the heir's copy
    // of the master's stream, what `behind` lacks is not.
    let follow = format!("127.0.0.1 {}", server.port);
    let (behind_dir, slow_dir) = (dir.path().join("behind"), dir.path().join("slow"));
    let mut behind = Server::start(&behind_dir, &["--replicaof", &follow]);
    let mut slow = Server::start(&slow_dir, &["--replicaof", &follow]);
    wait_link_up(&mut connect(behind.port));
    wait_link_up(&mut connect(slow.port));
    wait_for(&mut master, replicas.len() + 3);
    behind.kill();
    run(&mut master, &["SET", "past-the-backlog", &"x".repeat(64 << 10)]);
    wait_for(&mut master, replicas.len() + 2);
    slow.kill();
    change_db0(&mut master, 1);
    wait_for(&mut master, replicas.len() + 1);
    let replid = info_field(&mut master, "replication", "master_replid").unwrap();
    let offset: u64 = info_field(&mut master, "replication", "master_repl_offset").unwrap().parse().unwrap();
    server.kill();

    // Its first write comes before any replica follows it.
    assert_eq!(promote_and_write(&mut promoted, &["SET", "first-of-its-own", "1"]), Value::Okay);
    assert_eq!(info_field(&mut promoted, "replication", "master_replid2"), Some(replid));
    assert_eq!(info_field(&mut promoted, "replication", "second_repl_offset"), Some((offset + 1).to_string()));
    let new_replid = info_field(&mut promoted, "replication", "master_replid").unwrap();
    let port = heir.port.to_string();
    for replica in &mut replicas {
        assert_eq!(run(replica, &["REPLICAOF", "127.0.0.1", &port]), Value::Okay);
    }
    for replica in &mut replicas {
        wait_link_up(replica);
    }
    change_db0(&mut promoted, 2);
    assert_caught_up(&mut promoted, &mut replicas);
    assert_eq!(info_field(&mut promoted, "stats", "sync_partial_ok"), Some(replicas.len().to_string()));
    assert_eq!(info_field(&mut promoted, "stats", "sync_full"), Some("0".into()));
    for replica in &mut replicas {
        assert_eq!(info_field(replica, "replication", "master_replid"), Some(new_replid.clone()));
    }

    // The slow one goes on from the heir's copy of the master's stream;
    // the one behind asks for what it does not hold, and is sent the
    // data set in full.
    let slow = Server::start(&slow_dir, &["--replicaof", &format!("127.0.0.1 {port}")]);
    let mut slow_con = connect(slow.port);
    wait_link_up(&mut slow_con);
    replicas.push(slow_con);
    assert_eq!(info_field(&mut promoted, "stats", "sync_partial_ok"), Some(replicas.len().to_string()));
    let behind = Server::start(&behind_dir, &["--replicaof", &format!("127.0.0.1 {port}")]);
    let mut behind_con = connect(behind.port);
    wait_link_up(&mut behind_con);
    replicas.push(behind_con);
    assert_caught_up(&mut promoted, &mut replicas);
    assert_eq!(info_field(&mut promoted, "stats", "sync_full"), Some("1".into()));
}

/// A write the master's WAIT says the replica has is on the replica's
/// medium: the replica is SIGKILLed right after, restarted, and every
/// such key is there byte for byte.
#[test]
fn writes_the_replica_acknowledged_survive_its_sigkill() {
    let Some((redis, mut master)) = master() else { return };
    let dir = tempfile::tempdir().unwrap();
    let port = redis.port.to_string();
    let mut expected = BTreeMap::new();
    for round in 0..common::crash_iterations(3) {
        let mut server = Server::start(&dir.path().join("replica"), &["--replicaof", &format!("127.0.0.1 {port}")]);
        let mut replica = connect(server.port);
        wait_link_up(&mut replica);
        for i in 0..500 {
            let (key, value) = (format!("key-{round}-{i}"), format!("{round}:{i}:{}", "x".repeat(i % 300)));
            let _: () = redis::cmd("SET").arg(&key).arg(&value).query(&mut master).unwrap();
            expected.insert(key, value);
        }
        wait_for(&mut master, 1);
        // Started as a master each round before, the replica forgot its
        // position: a full sync each round.
        let full = (round + 1).to_string();
        assert_eq!(info_field(&mut master, "stats", "sync_full").as_deref(), Some(full.as_str()));
        server.kill();
        // Restarted without a master: what it has is what it kept.
        let server = Server::start(&dir.path().join("replica"), &[]);
        let mut replica = connect(server.port);
        for (key, value) in &expected {
            let got: Option<String> = redis::cmd("GET").arg(key).query(&mut replica).unwrap();
            assert_eq!(got.as_ref(), Some(value), "round {round}, key {key}");
        }
    }
}

/// A master that wants a password: the link is down with the master's
/// answer in INFO until `masterauth` is set.
#[test]
fn a_master_that_refuses_the_link_is_reported_until_masterauth_is_set() {
    let Some((redis, mut master)) = master() else { return };
    run(&mut master, &["SET", "k", "v"]);
    run(&mut master, &["CONFIG", "SET", "requirepass", "secret"]);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("replica"), &[]);
    let mut replica = connect(server.port);
    run(&mut replica, &["REPLICAOF", "127.0.0.1", &redis.port.to_string()]);
    let deadline = Instant::now() + Duration::from_secs(10);
    let error = loop {
        if let Some(error) = info_field(&mut replica, "replication", "master_link_error") {
            break error;
        }
        assert!(Instant::now() < deadline, "no link error reported");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(error.contains("NOAUTH"), "{error}");
    assert_eq!(info_field(&mut replica, "replication", "master_link_status").as_deref(), Some("down"));
    run(&mut replica, &["CONFIG", "SET", "masterauth", "secret"]);
    wait_link_up(&mut replica);
    let got: String = redis::cmd("GET").arg("k").query(&mut replica).unwrap();
    assert_eq!(got, "v");
}

/// While a full sync loads the master's data set, other clients' reads
/// get LOADING: a client sees the replica's old value, then LOADING, then
/// the master's, never the key missing from a data set loaded in part.
#[test]
fn reads_get_loading_while_a_full_sync_loads() {
    let Some((redis, mut master)) = master() else { return };
    for batch in 0..100 {
        let mut pipe = redis::pipe();
        for i in 0..2000 {
            pipe.cmd("SET").arg(format!("key-{batch}-{i}")).arg(&[b'v'; 100][..]).ignore();
        }
        let _: () = pipe.query(&mut master).unwrap();
    }
    run(&mut master, &["SET", "probe", "new"]);
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("replica"), &[]);
    let mut replica = connect(server.port);
    run(&mut replica, &["SET", "probe", "old"]);
    let reader = {
        let port = server.port;
        std::thread::spawn(move || {
            let mut con = connect(port);
            let mut seen = Vec::new();
            let deadline = Instant::now() + Duration::from_secs(60);
            while Instant::now() < deadline {
                let seen_now = match redis::cmd("GET").arg("probe").query::<Option<String>>(&mut con) {
                    Ok(Some(value)) => value,
                    Ok(None) => "missing".into(),
                    Err(error) => error.code().unwrap_or("other error").to_owned(),
                };
                if seen.last() != Some(&seen_now) {
                    seen.push(seen_now.clone());
                }
                if seen_now == "new" {
                    break;
                }
            }
            seen
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    run(&mut replica, &["REPLICAOF", "127.0.0.1", &redis.port.to_string()]);
    let seen = reader.join().unwrap();
    assert_eq!(seen, ["old", "LOADING", "new"]);
    wait_link_up(&mut replica);
    assert_eq!(redis::cmd("DBSIZE").query::<i64>(&mut replica).unwrap(), 200_001);
    assert_eq!(info_field(&mut replica, "persistence", "loading").as_deref(), Some("0"));
}

/// A replica restarted after a SIGKILL resumes from the position it
/// stored with its writes: a partial resync, and every write applied once
/// (a counter INCRed before, during and after the kill ends equal). Once
/// promoted (REPLICAOF NO ONE) it forgets the position: the next
/// REPLICAOF syncs in full.
#[test]
fn a_restarted_replica_resumes_with_a_partial_resync() {
    let Some((redis, mut master)) = master() else { return };
    let dir = tempfile::tempdir().unwrap();
    let follow = format!("127.0.0.1 {}", redis.port);
    let mut server = Server::start(&dir.path().join("replica"), &["--replicaof", &follow]);
    let mut replica = connect(server.port);
    wait_link_up(&mut replica);
    let incr = |con: &mut Connection, times: usize| {
        for _ in 0..times {
            let _: i64 = redis::cmd("INCR").arg("counter").query(con).unwrap();
        }
    };
    for round in 0..3 {
        for i in 0..200 {
            run(&mut master, &["SET", &format!("key-{round}-{i}"), &i.to_string()]);
        }
        incr(&mut master, 200);
        wait_for(&mut master, 1);
        incr(&mut master, 100);
        server.kill();
        incr(&mut master, 100);
        server = Server::start(&dir.path().join("replica"), &["--replicaof", &follow]);
        replica = connect(server.port);
        wait_link_up(&mut replica);
        wait_for(&mut master, 1);
        assert_same(&mut master, &mut replica);
        let partial = (round + 1).to_string();
        assert_eq!(info_field(&mut master, "stats", "sync_partial_ok").as_deref(), Some(partial.as_str()));
        assert_eq!(info_field(&mut master, "stats", "sync_full").as_deref(), Some("1"));
    }
    promote_and_write(&mut replica, &["SET", "written-while-a-master", "gone after the sync"]);
    run(&mut replica, &["REPLICAOF", "127.0.0.1", &redis.port.to_string()]);
    wait_link_up(&mut replica);
    wait_for(&mut master, 1);
    assert_same(&mut master, &mut replica);
    assert_eq!(info_field(&mut master, "stats", "sync_full").as_deref(), Some("2"));
}

/// Sends `setup` (each command's reply read), then SYNC; returns the RDB
/// file that follows, read up to its end mark, `pace` between reads of
/// 64 KiB (a slow reader holds the export back).
fn sync_file(stream: &mut std::net::TcpStream, setup: &[&[&[u8]]], sync: &[&[u8]], pace: Duration) -> Vec<u8> {
    use std::io::{BufRead, BufReader, Read, Write};
    for command in setup {
        let reply = common::request(stream, &common::encode(command));
        assert_eq!(reply, b"+OK\r\n", "{command:?}");
    }
    stream.write_all(&common::encode(sync)).unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    if sync[0].eq_ignore_ascii_case(b"psync") {
        reader.read_line(&mut line).unwrap();
        assert!(line.starts_with("+FULLRESYNC "), "{line:?}");
        line.clear();
    }
    reader.read_line(&mut line).unwrap();
    let mark = line.strip_prefix("$EOF:").unwrap_or_else(|| panic!("not a diskless transfer: {line:?}")).trim_end();
    assert_eq!(mark.len(), 40);
    let mut file = Vec::new();
    let mut piece = vec![0; 64 << 10];
    while !file.ends_with(mark.as_bytes()) {
        let n = reader.read(&mut piece).unwrap();
        assert!(n > 0, "the connection closed before the end mark");
        file.extend_from_slice(&piece[..n]);
        std::thread::sleep(pace);
    }
    file.truncate(file.len() - 40);
    file
}

/// The strings of a string's or a plain hash's object, as ScaledKV writes
/// them with `rdbcompression no`: lengths of 6 or 14 bits, integers.
fn object_strings(payload: &[u8]) -> Vec<Vec<u8>> {
    fn length(bytes: &mut &[u8]) -> usize {
        let first = bytes[0];
        let (len, used) = match first >> 6 {
            0 => ((first & 0x3f) as usize, 1),
            1 => ((((first & 0x3f) as usize) << 8) | bytes[1] as usize, 2),
            _ if first == 0x80 => (u32::from_be_bytes(bytes[1..5].try_into().unwrap()) as usize, 5),
            _ => panic!("encoding {first:#x}"),
        };
        *bytes = &bytes[used..];
        len
    }
    fn string(bytes: &mut &[u8]) -> Vec<u8> {
        let text = match bytes[0] {
            0xC0 => (bytes[1] as i8).to_string().into_bytes(),
            0xC1 => i16::from_le_bytes([bytes[1], bytes[2]]).to_string().into_bytes(),
            0xC2 => i32::from_le_bytes(bytes[1..5].try_into().unwrap()).to_string().into_bytes(),
            _ => {
                let len = length(bytes);
                let text = bytes[..len].to_vec();
                *bytes = &bytes[len..];
                return text;
            }
        };
        *bytes = &bytes[if bytes[0] == 0xC0 {
            2
        } else if bytes[0] == 0xC1 {
            3
        } else {
            5
        }..];
        text
    }
    let mut bytes = &payload[1..];
    match payload[0] {
        0 => vec![string(&mut bytes)],
        // A list: its elements.
        1 => {
            let elements = length(&mut bytes);
            (0..elements).map(|_| string(&mut bytes)).collect()
        }
        4 => {
            let pairs = length(&mut bytes);
            (0..2 * pairs).map(|_| string(&mut bytes)).collect()
        }
        // A sorted set: each member and its score as text.
        5 => {
            let members = length(&mut bytes);
            let mut strings = Vec::new();
            for _ in 0..members {
                strings.push(string(&mut bytes));
                let score = f64::from_le_bytes(bytes[..8].try_into().unwrap());
                bytes = &bytes[8..];
                strings.push(score.to_string().into_bytes());
            }
            strings
        }
        other => panic!("object type {other}"),
    }
}

#[test]
fn redis_loads_what_redis_cli_rdb_gets_from_scaledkv() {
    if std::process::Command::new("redis-cli").arg("--version").output().is_err() {
        eprintln!("NOTICE: redis-cli not found; skipping the RDB export test (.ci/run installs it)");
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let mut skv = connect(server.port);
    fill_db0(&mut skv);
    let file = dir.path().join("dump.rdb");
    let cli = std::process::Command::new("redis-cli")
        .args(["-p", &server.port.to_string(), "--rdb"])
        .arg(&file)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&cli.stderr);
    assert!(cli.status.success() && said.contains("Transfer finished with success"), "{said}");
    let Some(redis) = RedisServer::start_loading(Some(&file), &["--databases", "1"]) else { return };
    let mut redis = connect(redis.port);
    assert_same(&mut skv, &mut redis);
    assert_eq!(run(&mut redis, &["FCALL", "get_it", "1", "int"]), run(&mut skv, &["FCALL", "get_it", "1", "int"]));
    // The connection closed after the file; the server serves on.
    assert_eq!(run(&mut skv, &["PING"]), Value::SimpleString("PONG".into()));
}

#[test]
fn an_rdb_export_is_one_moment_while_clients_write() {
    const KEYS: usize = 20_000;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let mut con = connect(server.port);
    run(&mut con, &["CONFIG", "SET", "rdbcompression", "no"]);
    let value = |round: usize| format!("r{round:08}-{}", "x".repeat(90));
    for start in (0..KEYS).step_by(1000) {
        let mut mset = redis::cmd("MSET");
        for i in start..start + 1000 {
            mset.arg(format!("a-{i:05}")).arg(value(0)).arg(format!("z-{i:05}")).arg(value(0));
        }
        let _: Value = mset.query(&mut con).unwrap();
    }
    let mut hash = redis::cmd("HSET");
    hash.arg("m-hash");
    for field in 0..3000 {
        hash.arg(format!("f-{field:04}")).arg(value(0));
    }
    let _: Value = hash.query(&mut con).unwrap();
    // A list of chunks and a sorted set of blocks, each many entries.
    let (mut list, mut zset) = (redis::cmd("RPUSH"), redis::cmd("ZADD"));
    list.arg("m-list");
    zset.arg("m-zset");
    for i in 0..3000 {
        list.arg(value(0));
        zset.arg(i).arg(format!("member-{i:04}"));
    }
    let _: Value = list.query(&mut con).unwrap();
    let _: Value = zset.query(&mut con).unwrap();
    // Round r writes a-i and z-i (i = r mod KEYS), the hash's first and
    // last fields, the list's first and last elements and the sorted set's
    // first member's score, in one transaction.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let rounds = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let writer = {
        let (stop, rounds, port) = (stop.clone(), rounds.clone(), server.port);
        std::thread::spawn(move || {
            let mut con = connect(port);
            let mut round = 0;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                round += 1;
                let (i, v) = (round % KEYS, value(round));
                let _: Value = redis::pipe()
                    .atomic()
                    .cmd("MSET")
                    .arg(format!("a-{i:05}"))
                    .arg(&v)
                    .arg(format!("z-{i:05}"))
                    .arg(&v)
                    .cmd("HSET")
                    .arg("m-hash")
                    .arg("f-0000")
                    .arg(&v)
                    .arg("f-2999")
                    .arg(&v)
                    .cmd("LSET")
                    .arg("m-list")
                    .arg(0)
                    .arg(&v)
                    .cmd("LSET")
                    .arg("m-list")
                    .arg(-1)
                    .arg(&v)
                    .cmd("ZADD")
                    .arg("m-zset")
                    .arg(-(round as f64))
                    .arg("member-0000")
                    .query(&mut con)
                    .unwrap();
                rounds.store(round, std::sync::atomic::Ordering::Relaxed);
            }
        })
    };
    while rounds.load(std::sync::atomic::Ordering::Relaxed) < 100 {
        std::thread::sleep(Duration::from_millis(5));
    }
    let mut stream = server.connect();
    let before = rounds.load(std::sync::atomic::Ordering::Relaxed);
    let file = sync_file(&mut stream, &[&[b"REPLCONF", b"rdb-only", b"1"]], &[b"SYNC"], Duration::from_millis(10));
    let after = rounds.load(std::sync::atomic::Ordering::Relaxed);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    writer.join().unwrap();
    let round_of = |v: &[u8]| -> usize { std::str::from_utf8(&v[1..9]).unwrap().parse().unwrap() };
    let mut values = BTreeMap::new();
    let (mut hash_ends, mut list_ends, mut zset_first) = (None, None, None);
    let mut file = scaledkv_server::commands::dump::rdb::RdbFile::open(&file).unwrap();
    while let Some(item) = file.next_item().unwrap() {
        let scaledkv_server::commands::dump::rdb::Item::Entry(entry) = item else { panic!("no libraries here") };
        let strings = object_strings(&entry.payload);
        if entry.key == b"m-hash" {
            let field = |name: &[u8]| round_of(&strings[strings.iter().position(|s| s == name).unwrap() + 1]);
            assert_eq!(strings.len(), 6000);
            hash_ends = Some((field(b"f-0000"), field(b"f-2999")));
        } else if entry.key == b"m-list" {
            assert_eq!(strings.len(), 3000);
            list_ends = Some((round_of(&strings[0]), round_of(&strings[2999])));
        } else if entry.key == b"m-zset" {
            assert_eq!(strings.len(), 6000);
            // Sorted by score: the member the writer moves comes first
            // once it has a round (its score is minus that round).
            let first = strings.chunks(2).find(|pair| pair[0] == b"member-0000").unwrap();
            zset_first = Some(-std::str::from_utf8(&first[1]).unwrap().parse::<f64>().unwrap() as usize);
        } else {
            values.insert(entry.key, round_of(&strings[0]));
        }
    }
    assert_eq!(values.len(), 2 * KEYS);
    // The moment: the newest round the file holds. Every key holds the
    // last round up to it that wrote the key, no later one.
    let moment = *values.values().max().unwrap();
    assert!(moment >= before, "the file is older than the SYNC ({moment} < {before})");
    assert!(after > moment + 10, "too few writes during the export to prove anything: {before}, {moment}, {after}");
    for i in 0..KEYS {
        let expected = (1..=moment).rev().find(|r| r % KEYS == i).unwrap_or(0);
        for side in ["a", "z"] {
            let key = format!("{side}-{i:05}").into_bytes();
            assert_eq!(values[&key], expected, "{}", String::from_utf8_lossy(&key));
        }
    }
    assert_eq!(hash_ends, Some((moment, moment)), "the hash's fields as of the same moment");
    assert_eq!(list_ends, Some((moment, moment)), "the list's elements as of the same moment");
    assert_eq!(zset_first, Some(moment), "the sorted set as of the same moment");
}

#[test]
fn sync_serves_tools() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let mut con = connect(server.port);
    fill_db0(&mut con);
    let error = |con: &mut Connection, args: &[&str]| -> String {
        let error = redis::cmd(args[0]).arg(&args[1..]).query::<Value>(con).unwrap_err();
        error.to_string()
    };
    assert!(error(&mut con, &["REPLCONF", "rdb-only", "2"]).contains("value must between 0 and 1"));
    assert!(error(&mut con, &["REPLCONF", "bogus", "1"]).contains("Unrecognized REPLCONF option: bogus"));
    assert!(error(&mut con, &["REPLCONF", "rdb-filter-only", "keys"]).contains("Unsupported rdb-filter-only option"));
    assert!(error(&mut con, &["REPLCONF", "capa"]).contains("syntax error"));
    // ACK and GETACK get no reply, as from Redis to a client that is no
    // replica: the next reply is PING's.
    let mut raw = server.connect();
    let acked = [common::encode(&[b"REPLCONF", b"ACK", b"0"]), common::encode(&[b"PING"])].concat();
    assert_eq!(common::request(&mut raw, &acked), b"+PONG\r\n");
    run(&mut con, &["MULTI"]);
    assert!(error(&mut con, &["SYNC"]).contains("not allowed inside a transaction"));
    run(&mut con, &["DISCARD"]);
    // redis-cli --functions-rdb: the libraries alone, after PSYNC too.
    let mut stream = server.connect();
    let setup: [&[&[u8]]; 2] = [&[b"REPLCONF", b"rdb-only", b"1"], &[b"REPLCONF", b"rdb-filter-only", b"functions"]];
    let file = sync_file(&mut stream, &setup, &[b"PSYNC", b"?", b"-1"], Duration::ZERO);
    let mut file = scaledkv_server::commands::dump::rdb::RdbFile::open(&file).unwrap();
    let mut items = Vec::new();
    while let Some(item) = file.next_item().unwrap() {
        items.push(item);
    }
    assert!(
        matches!(&items[..], [scaledkv_server::commands::dump::rdb::Item::Library(code)] if code.starts_with(b"#!lua name=lib")),
        "{items:?}"
    );
    // A plain SYNC (redis-cli before 7.0's --rdb, and `redis-cli
    // --replica` today): every key, then, once it acknowledged, the writes.
    let mut stream = server.connect();
    let setup: [&[&[u8]]; 1] = [&[b"REPLCONF", b"capa", b"eof"]];
    let file = sync_file(&mut stream, &setup, &[b"SYNC"], Duration::ZERO);
    let mut file = scaledkv_server::commands::dump::rdb::RdbFile::open(&file).unwrap();
    let mut keys = 0;
    while let Some(item) = file.next_item().unwrap() {
        keys += matches!(item, scaledkv_server::commands::dump::rdb::Item::Entry(_)) as usize;
    }
    assert_eq!(keys, keyspace(&mut con).len());
    std::io::Write::write_all(&mut stream, &common::encode(&[b"REPLCONF", b"ACK", b"0"])).unwrap();
    run(&mut con, &["SET", "after-the-file", "streamed"]);
    let mut streamed = Vec::new();
    let mut piece = [0u8; 4096];
    while !streamed.windows(8).any(|w| w == b"streamed") {
        let n = std::io::Read::read(&mut stream, &mut piece).unwrap();
        assert!(n > 0, "the stream ended: {:?}", String::from_utf8_lossy(&streamed));
        streamed.extend_from_slice(&piece[..n]);
    }
    let set = b"*3\r\n$3\r\nSET\r\n$14\r\nafter-the-file\r\n$8\r\nstreamed\r\n";
    assert!(streamed.windows(set.len()).any(|w| w == set), "{:?}", String::from_utf8_lossy(&streamed));
}

#[test]
fn save_bgsave_and_shutdown_save_write_a_dump_rdb_that_redis_loads() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data");
    let mut server = Server::start(&data, &[]);
    let mut con = connect(server.port);
    fill_db0(&mut con);
    let persistence = |con: &mut Connection, field: &str| info_field(con, "persistence", field).unwrap();
    let lastsave_before: i64 = redis::cmd("LASTSAVE").query(&mut con).unwrap();
    // BGSAVE: started at once, written in the background.
    assert_eq!(run(&mut con, &["BGSAVE"]), Value::SimpleString("Background saving started".into()));
    let deadline = Instant::now() + Duration::from_secs(30);
    while persistence(&mut con, "rdb_bgsave_in_progress") != "0" {
        assert!(Instant::now() < deadline, "BGSAVE did not end");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(persistence(&mut con, "rdb_last_bgsave_status"), "ok");
    assert_eq!(persistence(&mut con, "rdb_saves"), "1");
    let lastsave: i64 = redis::cmd("LASTSAVE").query(&mut con).unwrap();
    assert!(lastsave >= lastsave_before);
    let dump = data.join("dump.rdb");
    let bgsaved = std::fs::read(&dump).unwrap();
    // SAVE under another name, after a change: the file has it.
    let bad = redis::cmd("CONFIG").arg(&["SET", "dbfilename", "../elsewhere.rdb"][..]).query::<Value>(&mut con);
    assert!(bad.unwrap_err().to_string().contains("dbfilename can't be a path, just a filename"));
    run(&mut con, &["CONFIG", "SET", "dbfilename", "other.rdb"]);
    let named: Vec<String> = redis::cmd("CONFIG").arg(&["GET", "dbfilename"][..]).query(&mut con).unwrap();
    assert_eq!(named, ["dbfilename", "other.rdb"]);
    run(&mut con, &["SET", "after-bgsave", "yes"]);
    let changes = |con: &mut Connection| persistence(con, "rdb_changes_since_last_save").parse::<u64>().unwrap();
    assert!(changes(&mut con) >= 1);
    assert_eq!(run(&mut con, &["SAVE"]), Value::Okay);
    assert_eq!(changes(&mut con), 0, "every write is in the file");
    let saved = std::fs::read(data.join("other.rdb")).unwrap();
    assert_eq!(persistence(&mut con, "rdb_saves"), "2");
    // No temporary file is left beside them.
    let left: Vec<_> = std::fs::read_dir(&data).unwrap().filter_map(|e| e.ok()).map(|e| e.file_name()).collect();
    assert!(!left.iter().any(|name| name.to_string_lossy().ends_with(".rdb.tmp")), "{left:?}");
    // SHUTDOWN SAVE writes it again before the server stops.
    run(&mut con, &["CONFIG", "SET", "dbfilename", "dump.rdb"]);
    run(&mut con, &["SET", "before-shutdown", "yes"]);
    let keys = keyspace(&mut con);
    let _ = redis::cmd("SHUTDOWN").arg("SAVE").query::<Value>(&mut con);
    assert!(server.wait_exit(), "SHUTDOWN SAVE exits cleanly");
    let at_shutdown = std::fs::read(&dump).unwrap();
    assert!(at_shutdown.len() > bgsaved.len() && saved.len() > bgsaved.len());
    // Redis loads each file: the last holds every key, with the same values.
    let Some(redis) = RedisServer::start_loading(Some(&dump), &["--databases", "1"]) else { return };
    let mut redis = connect(redis.port);
    let loaded = keyspace(&mut redis);
    assert_eq!(loaded.keys().collect::<Vec<_>>(), keys.keys().collect::<Vec<_>>());
    for (key, (value, ttl)) in &keys {
        let (theirs, their_ttl) = &loaded[key];
        if value != theirs {
            // Where they part: a big collection's whole value is too long to read.
            let at = value.bytes().zip(theirs.bytes()).take_while(|(a, b)| a == b).count();
            let around =
                |text: &str| text.get(at.saturating_sub(200)..(at + 300).min(text.len())).unwrap_or(text).to_owned();
            panic!("key {key} differs from byte {at}: master …{}… replica …{}…", around(value), around(theirs));
        }
        assert!((*ttl < 0 && ttl == their_ttl) || (ttl - their_ttl).abs() <= 2000, "key {key}");
    }
    let Some(earlier) = RedisServer::start_loading(Some(&data.join("other.rdb")), &["--databases", "1"]) else {
        return;
    };
    let mut earlier = connect(earlier.port);
    assert_eq!(run(&mut earlier, &["GET", "after-bgsave"]), Value::BulkString(b"yes".to_vec()));
    assert_eq!(run(&mut earlier, &["EXISTS", "before-shutdown"]), Value::Int(0));
}

/// scaledkv-server started on `dir` with `args`, expected to exit at once
/// with an error: what it printed.
fn refused_start(dir: &std::path::Path, args: &[&str]) -> String {
    let output = std::process::Command::new(env!("CARGO_BIN_EXE_scaledkv-server"))
        .arg("--dir")
        .arg(dir)
        .args(["--port", "0"])
        .args(args)
        .env("RUST_LOG", "warn")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(!output.status.success(), "it started");
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[test]
fn import_rdb_loads_a_redis_dump_once_into_an_empty_database() {
    let Some((_redis, mut master)) = master() else { return };
    fill(&mut master);
    let redis_port = master_port(&mut master);
    let rdb = |name: &str, dir: &std::path::Path| {
        let mut stream = std::net::TcpStream::connect(("127.0.0.1", redis_port)).unwrap();
        let setup: [&[&[u8]]; 2] = [&[b"REPLCONF", b"capa", b"eof"], &[b"REPLCONF", b"rdb-only", b"1"]];
        let path = dir.join(name);
        std::fs::write(&path, sync_file(&mut stream, &setup, &[b"SYNC"], Duration::ZERO)).unwrap();
        path
    };
    let dir = tempfile::tempdir().unwrap();
    let first = rdb("first.rdb", dir.path());
    let data = dir.path().join("data");
    let first_arg = first.to_str().unwrap();
    let mut server = Server::start(&data, &["--import-rdb", first_arg]);
    let mut skv = connect(server.port);
    assert_same(&mut master, &mut skv);
    assert_eq!(run(&mut skv, &["DBSIZE"]), run(&mut master, &["DBSIZE"]), "the import's marker is no key");
    assert_eq!(run(&mut skv, &["FCALL", "get_it", "1", "int"]), run(&mut master, &["FCALL", "get_it", "1", "int"]));
    // A restart with the flag still set: not loaded again over the
    // writes made since.
    run(&mut skv, &["SET", "int", "999"]);
    assert!(server.terminate());
    let server = Server::start(&data, &["--import-rdb", first_arg]);
    let mut skv = connect(server.port);
    assert_eq!(run(&mut skv, &["GET", "int"]), Value::BulkString(b"999".to_vec()));
    drop(server);
    // Another file meets a database that is not empty: refused, named.
    run(&mut master, &["SET", "another", "file"]);
    let second = rdb("second.rdb", dir.path());
    let said = refused_start(&data, &["--import-rdb", second.to_str().unwrap()]);
    assert!(said.contains("an import loads into an empty one only"), "{said}");
    // A damaged file: refused with where, before anything is loaded.
    let mut bytes = std::fs::read(&second).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x40;
    std::fs::write(&second, &bytes).unwrap();
    let fresh = dir.path().join("fresh");
    let said = refused_start(&fresh, &["--import-rdb", second.to_str().unwrap()]);
    assert!(said.contains("RDB file refused at byte"), "{said}");
    let server = Server::start(&fresh, &[]);
    assert_eq!(run(&mut connect(server.port), &["DBSIZE"]), Value::Int(0));
}

fn master_port(con: &mut Connection) -> u16 {
    info_field(con, "server", "tcp_port").unwrap().parse().unwrap()
}

#[test]
fn client_kill_ends_a_transfer_the_reader_stalled() {
    use std::io::{BufRead, BufReader, Read, Write};
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("data"), &[]);
    let mut con = connect(server.port);
    run(&mut con, &["CONFIG", "SET", "rdbcompression", "no"]);
    // 40 MB: far more than the loopback socket's buffers hold.
    for start in (0..40_000).step_by(1000) {
        let mut mset = redis::cmd("MSET");
        for i in start..start + 1000 {
            mset.arg(format!("key-{i:05}")).arg(vec![b'v'; 1000]);
        }
        let _: Value = mset.query(&mut con).unwrap();
    }
    let mut stream = server.connect();
    let setup = [common::encode(&[b"REPLCONF", b"rdb-only", b"1"]), common::encode(&[b"SYNC"])].concat();
    stream.write_all(&setup).unwrap();
    let mut reader = BufReader::new(stream);
    let mut line = String::new();
    reader.read_line(&mut line).unwrap();
    assert_eq!(line, "+OK\r\n");
    line.clear();
    reader.read_line(&mut line).unwrap();
    let mark = line.strip_prefix("$EOF:").unwrap().trim_end().to_owned();
    // The reader stalls; the server's writes fill the buffers and wait.
    std::thread::sleep(Duration::from_millis(500));
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
    let syncing = clients.lines().find(|l| l.contains("cmd=sync")).expect("the transfer's client is listed");
    let id = syncing.split(' ').find_map(|f| f.strip_prefix("id=")).unwrap();
    assert_eq!(run(&mut con, &["CLIENT", "KILL", "ID", id]), Value::Int(1));
    // Gone while its reader still stalls: the kill ends a write that waits.
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut con).unwrap();
        if !clients.contains(&format!("id={id} ")) {
            break;
        }
        assert!(Instant::now() < deadline, "the killed transfer's client is still listed");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut rest = Vec::new();
    reader.get_mut().set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    reader.read_to_end(&mut rest).unwrap();
    assert!(rest.len() < 40_000_000, "the file was cut short: {} bytes", rest.len());
    assert!(!rest.ends_with(mark.as_bytes()), "without its end mark");
    assert_eq!(run(&mut con, &["DBSIZE"]), Value::Int(40_000));
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until `replica` has processed all of the stream `master` sent
/// (Redis's `wait_for_ofs_sync`): a replica promoted earlier lacks the
/// last bytes (a GETACK), and its old master would sync in full.
fn wait_for_offsets(master: &mut Connection, replica: &mut Connection) {
    let offset = |con: &mut Connection| info_field(con, "replication", "master_repl_offset").unwrap();
    wait_until("the replica has the master's whole stream", || offset(master) == offset(replica));
}

fn failover_state(con: &mut Connection) -> String {
    info_field(con, "replication", "master_failover_state").unwrap()
}

/// Clients write (recording each acknowledged key) while FAILOVER hands
/// a ScaledKV master over to one of its ScaledKV replicas; a write
/// waiting for its key's lock behind a script when the failover fixes the
/// offset is refused (READONLY), not committed behind the new master's
/// back. Every acknowledged write is on the new master and on the old,
/// which follows it from its own offset (a partial resync); the other
/// replica, which follows the old master meanwhile (its stream is now
/// the new master's, relayed), goes on partially too when REPLICAOF moves
/// it, after the new master took writes.
#[test]
fn failover_hands_over_to_a_replica_without_losing_a_write() {
    let dir = tempfile::tempdir().unwrap();
    // Two I/O threads: the script below blocks the one its connection is
    // on (as it would Redis's one thread), not the other.
    let old_server = Server::start(&dir.path().join("master"), &["--threads", "2"]);
    let mut old = connect(old_server.port);
    fill_db0(&mut old);
    let follow = format!("127.0.0.1 {}", old_server.port);
    let heir_server = Server::start(&dir.path().join("heir"), &["--replicaof", &follow]);
    let other_server = Server::start(&dir.path().join("other"), &["--replicaof", &follow]);
    let (mut heir, mut other) = (connect(heir_server.port), connect(other_server.port));
    wait_link_up(&mut heir);
    wait_link_up(&mut other);
    assert_eq!(failover_state(&mut old), "no-failover");

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let writers: Vec<_> = (0..3)
        .map(|w| {
            let (stop, port) = (stop.clone(), old_server.port);
            std::thread::spawn(move || {
                let mut con = connect(port);
                let mut acked = Vec::new();
                for i in 0.. {
                    let key = format!("w{w}-{i}");
                    match redis::cmd("SET").arg(&key).arg(i).query::<Value>(&mut con) {
                        Ok(_) => acked.push(key),
                        // Writes go on until the server is a replica.
                        Err(error) if error.code() == Some("READONLY") => break,
                        Err(error) => panic!("{key}: {error}"),
                    }
                    if stop.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                }
                acked
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(200));
    // A script holds `held` for three seconds; a SET of it sent meanwhile
    // waits for the lock, past the failover's hold on writes.
    let script = "local t = redis.call('TIME'); local stop_at = t[1] * 1000000 + t[2] + 3000000; \
                  repeat t = redis.call('TIME') until t[1] * 1000000 + t[2] >= stop_at; return 1";
    let mut connections: Vec<std::net::TcpStream> = (0..8).map(|_| old_server.connect()).collect();
    let mut scripted = connections.remove(0);
    scripted.write_all(&common::encode(&[b"EVAL", script.as_bytes(), b"1", b"held"])).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    // Connections the other I/O thread serves answer at once.
    let mut free: Vec<std::net::TcpStream> = connections
        .into_iter()
        .filter_map(|mut con| {
            con.set_read_timeout(Some(Duration::from_millis(150))).unwrap();
            con.write_all(&common::encode(&[b"PING"])).unwrap();
            common::try_read_reply(&mut con).map(|_| con)
        })
        .collect();
    assert!(free.len() >= 2, "the script blocked {} of 7 connections", 7 - free.len());
    let (mut straggler, mut admin) = (free.pop().unwrap(), free.pop().unwrap());
    straggler.write_all(&common::encode(&[b"SET", b"held", b"straggler"])).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let port = heir_server.port.to_string();
    admin.set_read_timeout(None).unwrap();
    let failover = common::encode(&[b"FAILOVER", b"TO", b"127.0.0.1", port.as_bytes()]);
    assert_eq!(common::request(&mut admin, &failover), b"+OK\r\n");
    wait_until("the failover ends", || failover_state(&mut old) == "no-failover");
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let acked: Vec<String> = writers.into_iter().flat_map(|w| w.join().unwrap()).collect();
    assert!(acked.len() > 100, "only {} writes before the failover", acked.len());
    straggler.set_read_timeout(None).unwrap();
    let refused = String::from_utf8(common::read_reply(&mut straggler)).unwrap();
    assert!(refused.starts_with("-READONLY"), "a write that waited past the fixed offset: {refused}");
    scripted.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    assert_eq!(common::read_reply(&mut scripted), b":1\r\n");

    assert_eq!(info_field(&mut old, "replication", "role").as_deref(), Some("slave"));
    assert_eq!(info_field(&mut heir, "replication", "role").as_deref(), Some("master"));
    wait_link_up(&mut old);
    assert_eq!(info_field(&mut heir, "stats", "sync_partial_ok").as_deref(), Some("1"), "the old master resumed");
    assert_eq!(info_field(&mut heir, "stats", "sync_full").as_deref(), Some("0"));
    let held: Option<String> = redis::cmd("GET").arg("held").query(&mut heir).unwrap();
    assert_eq!(held, None, "the refused write is nowhere");
    for key in &acked {
        let value: Option<String> = redis::cmd("GET").arg(key).query(&mut heir).unwrap();
        assert!(value.is_some(), "{key} was acknowledged and is not on the new master");
    }
    change_db0(&mut heir, 1);
    wait_link_up(&mut other);
    assert_eq!(run(&mut other, &["REPLICAOF", "127.0.0.1", &port]), Value::Okay);
    // Its link may still read "up" from before REPLICAOF moved it: the
    // heir's counts tell when it synced.
    wait_until("the other replica syncs with the heir", || {
        let mut synced = |field| info_field(&mut heir, "stats", field).and_then(|n| n.parse::<u64>().ok()).unwrap_or(0);
        synced("sync_partial_ok") + synced("sync_full") >= 2
    });
    wait_link_up(&mut other);
    assert_eq!(info_field(&mut heir, "stats", "sync_partial_ok").as_deref(), Some("2"), "the other replica went on");
    assert_eq!(info_field(&mut heir, "stats", "sync_full").as_deref(), Some("0"));
    let mut replicas = [old, other];
    assert_caught_up(&mut heir, &mut replicas);
}

/// A replica of a replica, ScaledKV's and Redis's, gets the master's own
/// stream through it (the middle one relays it, as a Redis replica
/// proxies it): the same replication ID and offsets, so either goes on
/// partially when moved to the master itself; the middle one promoted
/// keeps them (they go on from it), and WAIT on a replica is refused as
/// in Redis.
#[test]
fn replicas_of_a_replica_get_the_masters_stream() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("master"), &[]);
    let mut master = connect(server.port);
    fill_db0(&mut master);
    let middle_server =
        Server::start(&dir.path().join("middle"), &["--replicaof", &format!("127.0.0.1 {}", server.port)]);
    let mut middle = connect(middle_server.port);
    wait_link_up(&mut middle);
    let (_scaledkv, _redis, mut leaves) = replicas_of(dir.path(), middle_server.port);
    change_db0(&mut master, 1);
    wait_for(&mut master, 1);
    let replid = info_field(&mut master, "replication", "master_replid");
    let offset = info_field(&mut master, "replication", "master_repl_offset");
    for leaf in &mut leaves {
        wait_until("a leaf has the master's stream", || {
            info_field(leaf, "replication", "master_repl_offset") == offset
        });
        assert_eq!(info_field(leaf, "replication", "master_replid"), replid);
        assert_same(&mut master, leaf);
    }
    // INFO on the middle one shows its replicas and the stream it relays.
    assert_eq!(info_field(&mut middle, "replication", "role").as_deref(), Some("slave"));
    assert_eq!(info_field(&mut middle, "replication", "connected_slaves"), Some(leaves.len().to_string()));
    assert_eq!(info_field(&mut middle, "replication", "master_replid"), replid);
    assert_eq!(info_field(&mut middle, "replication", "master_repl_offset"), offset);
    assert_eq!(info_field(&mut middle, "replication", "repl_backlog_active").as_deref(), Some("1"));
    let error = redis::cmd("WAIT").arg(1).arg(0).query::<Value>(&mut middle).unwrap_err();
    assert!(error.to_string().contains("WAIT cannot be used with replica instances"), "{error}");

    // A leaf's full sync while the middle one applies a stream of INCRs:
    // its snapshot and the offset it goes on from are one moment (an
    // INCR applied twice, or missed, would show).
    let writer = {
        let port = server.port;
        std::thread::spawn(move || {
            let mut con = connect(port);
            for i in 0..3000 {
                let _: Value = redis::cmd("INCR").arg(format!("counter-{}", i % 7)).query(&mut con).unwrap();
            }
        })
    };
    let late_server =
        Server::start(&dir.path().join("late"), &["--replicaof", &format!("127.0.0.1 {}", middle_server.port)]);
    let mut late = connect(late_server.port);
    wait_link_up(&mut late);
    writer.join().unwrap();
    wait_for(&mut master, 1);
    let offset = info_field(&mut master, "replication", "master_repl_offset");
    wait_until("the late leaf has the master's stream", || {
        info_field(&mut late, "replication", "master_repl_offset") == offset
    });
    assert_same(&mut master, &mut late);

    // Moved to the master: partial.
    let partial_before: u64 = info_field(&mut master, "stats", "sync_partial_ok").unwrap().parse().unwrap();
    let master_port = server.port.to_string();
    for leaf in &mut leaves {
        assert_eq!(run(leaf, &["REPLICAOF", "127.0.0.1", &master_port]), Value::Okay);
        wait_link_up(leaf);
    }
    let partial: u64 = info_field(&mut master, "stats", "sync_partial_ok").unwrap().parse().unwrap();
    assert_eq!(partial, partial_before + leaves.len() as u64);
    change_db0(&mut master, 2);
    let mut all: Vec<Connection> = leaves.into_iter().chain([middle]).collect();
    assert_caught_up(&mut master, &mut all);

    // Back under the middle one, which is then promoted: they go on.
    let middle_port = middle_server.port.to_string();
    let (middle, leaves) = all.split_last_mut().unwrap();
    let full_before = info_field(middle, "stats", "sync_full");
    for leaf in leaves.iter_mut() {
        assert_eq!(run(leaf, &["REPLICAOF", "127.0.0.1", &middle_port]), Value::Okay);
        wait_link_up(leaf);
    }
    assert_eq!(promote_and_write(middle, &["SET", "middle-now-master", "1"]), Value::Okay);
    for leaf in leaves.iter_mut() {
        wait_link_up(leaf);
    }
    assert_caught_up(middle, leaves);
    assert_eq!(info_field(middle, "stats", "sync_full"), full_before, "the leaves went on partially");
}

/// FAILOVER between ScaledKV and Redis, both ways: a Redis replica takes
/// over from a ScaledKV master, which goes on from its offset (partial);
/// then the Redis master hands back to ScaledKV, which takes over as a
/// Redis replica does (`PSYNC ... FAILOVER`), and Redis goes on from it.
#[test]
fn failover_between_scaledkv_and_redis_both_ways() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("scaledkv"), &[]);
    let mut scaledkv = connect(server.port);
    fill_db0(&mut scaledkv);
    let follow = server.port.to_string();
    let Some(redis) =
        RedisServer::start_with(&["--replicaof", "127.0.0.1", &follow, "--repl-diskless-sync-delay", "0"])
    else {
        return;
    };
    let mut redis_con = connect(redis.port);
    wait_link_up(&mut redis_con);
    change_db0(&mut scaledkv, 1);
    let port = redis.port.to_string();
    assert_eq!(run(&mut scaledkv, &["FAILOVER", "TO", "127.0.0.1", &port]), Value::Okay);
    wait_until("ScaledKV hands over", || failover_state(&mut scaledkv) == "no-failover");
    assert_eq!(info_field(&mut redis_con, "replication", "role").as_deref(), Some("master"));
    wait_link_up(&mut scaledkv);
    assert_eq!(info_field(&mut redis_con, "stats", "sync_partial_ok").as_deref(), Some("1"));
    change_db0(&mut redis_con, 2);
    assert_caught_up(&mut redis_con, std::slice::from_mut(&mut scaledkv));

    let port = server.port.to_string();
    assert_eq!(run(&mut redis_con, &["FAILOVER", "TO", "127.0.0.1", &port]), Value::Okay);
    wait_until("Redis hands back", || failover_state(&mut redis_con) == "no-failover");
    assert_eq!(info_field(&mut scaledkv, "replication", "role").as_deref(), Some("master"));
    wait_link_up(&mut redis_con);
    // Its own history (it streamed to Redis before) had no replica left:
    // it takes up the one it followed, as its second (PSYNC2).
    assert_eq!(info_field(&mut scaledkv, "stats", "sync_partial_ok").as_deref(), Some("1"));
    assert_eq!(info_field(&mut scaledkv, "stats", "sync_full").as_deref(), Some("1"), "only Redis's first sync");
    change_db0(&mut scaledkv, 3);
    assert_caught_up(&mut scaledkv, std::slice::from_mut(&mut redis_con));
}

/// FAILOVER's errors and its timeout, ABORT and FORCE, with a target that
/// cannot answer (SIGSTOP): writes are held while it waits (reads go
/// on), and go on on the same master once it gives up.
#[test]
fn failover_waits_for_its_target_and_gives_up_as_told() {
    let dir = tempfile::tempdir().unwrap();
    let master_server = Server::start(&dir.path().join("master"), &[]);
    let mut master = connect(master_server.port);
    let error = |con: &mut Connection, args: &[&str]| {
        redis::cmd(args[0]).arg(&args[1..]).query::<Value>(con).unwrap_err().to_string()
    };
    assert!(error(&mut master, &["FAILOVER"]).contains("FAILOVER requires connected replicas."));
    assert!(error(&mut master, &["FAILOVER", "ABORT"]).contains("No failover in progress."));
    let follow = format!("127.0.0.1 {}", master_server.port);
    let target_server = Server::start(&dir.path().join("target"), &["--replicaof", &follow]);
    let mut target = connect(target_server.port);
    wait_link_up(&mut target);
    let port = target_server.port.to_string();
    for (args, expected) in [
        (&["FAILOVER", "FORCE", "TIMEOUT", "100"][..], "requires both a timeout and target HOST and IP."),
        (&["FAILOVER", "TO", "127.0.0.1", &port, "FORCE"], "requires both a timeout and target HOST and IP."),
        (&["FAILOVER", "TO", "127.0.0.1", "1"], "FAILOVER target HOST and PORT is not a replica."),
        (&["FAILOVER", "TO", "127.0.0.1", "port"], "value is not an integer"),
        (&["FAILOVER", "TIMEOUT", "0"], "FAILOVER timeout must be greater than 0"),
    ] {
        assert!(error(&mut master, args).contains(expected), "{args:?}: {}", error(&mut master, args));
    }
    assert!(error(&mut target, &["FAILOVER"]).contains("FAILOVER is not valid when server is a replica."));
    let pid = target_server.pid() as i32;
    let held_set = |port: u16, key: &'static str| {
        std::thread::spawn(move || {
            let started = Instant::now();
            let reply = redis::cmd("SET").arg(key).arg("1").query::<Value>(&mut connect(port));
            (reply, started.elapsed())
        })
    };

    // The timeout: given up, the held write goes on here.
    // SAFETY: signalling our own child by its PID.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    run(&mut master, &["SET", "unacknowledged", "1"]);
    assert_eq!(run(&mut master, &["FAILOVER", "TO", "127.0.0.1", &port, "TIMEOUT", "500"]), Value::Okay);
    assert_eq!(failover_state(&mut master), "waiting-for-sync");
    assert!(error(&mut master, &["FAILOVER"]).contains("FAILOVER already in progress."));
    assert!(error(&mut master, &["REPLICAOF", "NO", "ONE"]).contains("REPLICAOF not allowed while failing over."));
    let held = held_set(master_server.port, "during-timeout");
    assert_eq!(run(&mut master, &["GET", "unacknowledged"]), Value::BulkString(b"1".to_vec()), "reads go on");
    wait_until("the failover times out", || failover_state(&mut master) == "no-failover");
    let (reply, waited) = held.join().unwrap();
    assert_eq!(reply.unwrap(), Value::Okay);
    assert!(waited >= Duration::from_millis(200), "the write was not held: {waited:?}");
    assert_eq!(info_field(&mut master, "replication", "role").as_deref(), Some("master"));

    // ABORT.
    assert_eq!(run(&mut master, &["FAILOVER", "TO", "127.0.0.1", &port, "TIMEOUT", "60000"]), Value::Okay);
    let held = held_set(master_server.port, "during-abort");
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(run(&mut master, &["FAILOVER", "ABORT"]), Value::Okay);
    assert_eq!(failover_state(&mut master), "no-failover");
    assert_eq!(held.join().unwrap().0.unwrap(), Value::Okay);

    // FORCE: past the timeout it hands over without the acknowledgement;
    // the target answers once it runs again.
    assert_eq!(run(&mut master, &["FAILOVER", "TO", "127.0.0.1", &port, "TIMEOUT", "100", "FORCE"]), Value::Okay);
    wait_until("the forced failover starts", || failover_state(&mut master) == "failover-in-progress");
    assert_eq!(info_field(&mut master, "replication", "role").as_deref(), Some("slave"));
    // SAFETY: as above.
    unsafe { libc::kill(pid, libc::SIGCONT) };
    wait_until("the forced failover ends", || failover_state(&mut master) == "no-failover");
    assert_eq!(info_field(&mut target, "replication", "role").as_deref(), Some("master"));
    wait_link_up(&mut master);
    run(&mut target, &["SET", "after", "1"]);
    // (Whether the target applied the writes it had not acknowledged
    // before it took over is a race FORCE accepts; they agree either way.)
    assert_caught_up(&mut target, std::slice::from_mut(&mut master));
}

/// A master told REPLICAOF of the replica that was promoted from it goes
/// on from its own offset (a partial resync) when the promoted replica
/// holds its history up to there, ScaledKV's or Redis's; one that took a
/// write of its own after the promotion syncs in full, and its write is
/// gone (the new master never had it).
#[test]
fn a_demoted_master_goes_on_from_its_promoted_replica() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("master"), &[]);
    let mut master = connect(server.port);
    fill_db0(&mut master);
    let follow = format!("127.0.0.1 {}", server.port);
    let heir_server = Server::start(&dir.path().join("heir"), &["--replicaof", &follow]);
    let redis = RedisServer::start_with(&["--replicaof", "127.0.0.1", &server.port.to_string()]);
    let mut heirs = vec![(heir_server.port, connect(heir_server.port))];
    if let Some(redis) = &redis {
        heirs.push((redis.port, connect(redis.port)));
    }
    let replicas = heirs.len();
    let master_port = server.port.to_string();
    for round in 0..replicas {
        change_db0(&mut master, round);
        for (_, heir) in &mut heirs {
            wait_link_up(heir);
        }
        wait_for(&mut master, replicas);
        let (port, heir) = &mut heirs[round];
        wait_for_offsets(&mut master, heir);
        let partial_before: u64 = info_field(heir, "stats", "sync_partial_ok").unwrap().parse().unwrap();
        assert_eq!(promote_and_write(heir, &["SET", "heir-write", &round.to_string()]), Value::Okay);
        assert_eq!(run(&mut master, &["REPLICAOF", "127.0.0.1", &port.to_string()]), Value::Okay);
        wait_link_up(&mut master);
        let partial: u64 = info_field(heir, "stats", "sync_partial_ok").unwrap().parse().unwrap();
        assert_eq!(partial, partial_before + 1, "round {round}: the old master did not go on partially");
        assert_caught_up(heir, std::slice::from_mut(&mut master));
        // Back as they were for the next round.
        assert_eq!(promote_and_write(&mut master, &["SET", "master-again", &round.to_string()]), Value::Okay);
        assert_eq!(run(heir, &["REPLICAOF", "127.0.0.1", &master_port]), Value::Okay);
    }

    // A write of its own after the promotion: a full sync.
    for (_, heir) in &mut heirs {
        wait_link_up(heir);
    }
    wait_for(&mut master, replicas);
    let (port, heir) = &mut heirs[0];
    assert_eq!(promote_and_write(heir, &["SET", "heir-only", "1"]), Value::Okay);
    run(&mut master, &["SET", "lost", "1"]);
    let full_before: u64 = info_field(heir, "stats", "sync_full").unwrap().parse().unwrap();
    assert_eq!(run(&mut master, &["REPLICAOF", "127.0.0.1", &port.to_string()]), Value::Okay);
    wait_link_up(&mut master);
    assert_eq!(info_field(heir, "stats", "sync_full").unwrap().parse::<u64>().unwrap(), full_before + 1);
    assert_caught_up(heir, std::slice::from_mut(&mut master));
    assert_eq!(run(&mut master, &["EXISTS", "lost"]), Value::Int(0));
}

/// A master's SIGTERM or SHUTDOWN waits for its replicas, as Redis 7's
/// (`shutdown-timeout`): writes are held (reads go on) until every replica
/// acknowledged the stream's end; SHUTDOWN ABORT gives the wait up; the
/// timeout ends it. Shut down that way, the restarted master's history
/// ends where its replica is: told REPLICAOF of that replica, promoted
/// meanwhile, it goes on partially.
#[test]
fn a_master_shuts_down_once_its_replicas_caught_up() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("master"), &[]);
    let mut master = connect(server.port);
    fill_db0(&mut master);
    let heir_server = Server::start(&dir.path().join("heir"), &["--replicaof", &format!("127.0.0.1 {}", server.port)]);
    let mut heir = connect(heir_server.port);
    wait_link_up(&mut heir);
    wait_for(&mut master, 1);
    let pid = heir_server.pid() as i32;
    // SAFETY: signalling our own children by their PIDs.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    run(&mut master, &["SET", "before-shutdown", "1"]);
    unsafe { libc::kill(server.pid() as i32, libc::SIGTERM) };
    std::thread::sleep(Duration::from_millis(300));
    let held = {
        let port = server.port;
        std::thread::spawn(move || redis::cmd("SET").arg("held").arg("1").query::<Value>(&mut connect(port)))
    };
    assert_eq!(run(&mut master, &["GET", "before-shutdown"]), Value::BulkString(b"1".to_vec()), "reads go on");
    assert_eq!(run(&mut master, &["SHUTDOWN", "ABORT"]), Value::Okay);
    assert_eq!(held.join().unwrap().unwrap(), Value::Okay, "the held write goes on after ABORT");
    assert!(redis::cmd("SHUTDOWN").arg("ABORT").query::<Value>(&mut master).is_err(), "nothing to abort");
    // SHUTDOWN's client waits with it, and gets Redis's error on ABORT.
    let port = server.port;
    let waiting = std::thread::spawn(move || redis::cmd("SHUTDOWN").query::<Value>(&mut connect(port)));
    std::thread::sleep(Duration::from_millis(300));
    assert!(!waiting.is_finished(), "SHUTDOWN answered before the wait ended");
    assert_eq!(run(&mut master, &["SHUTDOWN", "ABORT"]), Value::Okay);
    let aborted = waiting.join().unwrap().unwrap_err();
    assert!(aborted.to_string().contains("Errors trying to SHUTDOWN. Check logs."), "{aborted}");

    // The timeout ends the wait; SHUTDOWN's connection closes with the
    // server, unanswered.
    assert_eq!(run(&mut master, &["CONFIG", "SET", "shutdown-timeout", "1"]), Value::Okay);
    let started = Instant::now();
    let waiting = std::thread::spawn(move || redis::cmd("SHUTDOWN").query::<Value>(&mut connect(port)));
    assert!(server.wait_exit(), "the master did not shut down");
    assert!(started.elapsed() >= Duration::from_millis(900), "it did not wait: {:?}", started.elapsed());
    let closed = waiting.join().unwrap().unwrap_err();
    assert!(closed.is_io_error() || closed.is_connection_dropped(), "SHUTDOWN answered: {closed}");
    unsafe { libc::kill(pid, libc::SIGCONT) };

    // Caught up: it shuts down once the replica has everything.
    let mut server = Server::start_at(&dir.path().join("master"), server.port, &[]);
    let mut master = connect(server.port);
    wait_link_up(&mut heir);
    change_db0(&mut master, 1);
    assert!(server.terminate(), "the master did not shut down");
    assert_eq!(promote_and_write(&mut heir, &["SET", "heir-write", "1"]), Value::Okay);
    let server = Server::start_at(&dir.path().join("master"), server.port, &[]);
    let mut master = connect(server.port);
    let partial_before: u64 = info_field(&mut heir, "stats", "sync_partial_ok").unwrap().parse().unwrap();
    assert_eq!(run(&mut master, &["REPLICAOF", "127.0.0.1", &heir_server.port.to_string()]), Value::Okay);
    wait_link_up(&mut master);
    let partial: u64 = info_field(&mut heir, "stats", "sync_partial_ok").unwrap().parse().unwrap();
    assert_eq!(partial, partial_before + 1, "the restarted master did not go on partially");
    assert_caught_up(&mut heir, std::slice::from_mut(&mut master));
    assert_eq!(run(&mut master, &["EXISTS", "held", "before-shutdown"]), Value::Int(2));
}

/// A ScaledKV replica expires keys itself while it follows; a Redis
/// replica keeps an expired key (hidden, counted by DBSIZE) until its
/// master's DEL. Once the master is gone and the ScaledKV replica is
/// promoted, the Redis sibling that goes on from it partially gets the DEL
/// from it: the key does not stay in its keyspace for good.
#[test]
fn a_promoted_replica_sends_the_deletions_of_keys_it_expired_while_following() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = Server::start(&dir.path().join("master"), &[]);
    let mut master = connect(server.port);
    let (heir_server, redis, mut replicas) = replicas_of(dir.path(), server.port);
    let Some(_redis) = redis else { return };
    let written = Instant::now();
    run(&mut master, &["SET", "kept", "1"]);
    run(&mut master, &["SET", "short-lived", "1", "PX", "2000"]);
    // Written again on the heir once it expired there: a value for the
    // sibling, not a deletion.
    run(&mut master, &["SET", "long-lived", "1", "PX", "2000"]);
    wait_for(&mut master, 2);
    for replica in &mut replicas {
        wait_for_offsets(&mut master, replica);
    }
    // The master stops before its expiry can send a DEL.
    let pid = server.pid() as i32;
    // SAFETY: signalling our own child by its PID.
    unsafe { libc::kill(pid, libc::SIGSTOP) };
    assert!(written.elapsed() < Duration::from_millis(1500), "too slow to stop the master in time");
    let (heir, sibling) = replicas.split_at_mut(1);
    let (heir, sibling) = (&mut heir[0], &mut sibling[0]);
    wait_until("the heir expired both keys itself", || run(heir, &["DBSIZE"]) == Value::Int(1));
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(run(sibling, &["DBSIZE"]), Value::Int(3), "a Redis replica keeps expired keys");
    assert_eq!(promote_and_write(heir, &["SET", "long-lived", "2"]), Value::Okay);
    assert_eq!(run(sibling, &["REPLICAOF", "127.0.0.1", &heir_server.port.to_string()]), Value::Okay);
    wait_link_up(sibling);
    wait_until("the sibling dropped the expired key", || run(sibling, &["DBSIZE"]) == Value::Int(2));
    assert_eq!(run(sibling, &["GET", "long-lived"]), Value::BulkString(b"2".to_vec()));
    assert_eq!(info_field(heir, "stats", "sync_partial_ok"), Some("1".into()), "the sibling went on partially");
    unsafe { libc::kill(pid, libc::SIGCONT) };
    server.kill();
}
