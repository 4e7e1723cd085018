//! Commands that create a collection too big for one engine batch (COPY,
//! RESTORE, a STORE of a set, sorted set, list, hash or stream): its fields are written ahead of the key's stub, so
//! the key appears whole or not at all, also when the server is SIGKILLed
//! in between, and what a kill leaves behind is swept. `--maxmemory 64mb`
//! makes the log's segments 2 MiB, so batches past 2 MiB take this path
//! without writing hundreds of megabytes; without it the limit is 32 MiB.
//! `SCALEDKV_SERVER_CRASH_ITERATIONS` (default 5) sets the kills.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::Server;
use rand::Rng;

/// Members of the big set: about 3.6 MB of entries in one batch.
const MEMBERS: usize = 80_000;
/// Members of the big sorted set.
const ZSET_MEMBERS: usize = 40_000;
const SMALL_SEGMENTS: [&str; 2] = ["--maxmemory", "64mb"];

fn connect(server: &Server) -> redis::Connection {
    let con = redis::Client::open(server.url()).unwrap().get_connection().unwrap();
    con.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    con
}

fn query<T: redis::FromRedisValue>(con: &mut redis::Connection, args: &[&[u8]]) -> T {
    let mut command = redis::cmd(std::str::from_utf8(args[0]).unwrap());
    for arg in &args[1..] {
        command.arg(*arg);
    }
    command.query(con).unwrap_or_else(|e| panic!("{:?}: {e}", String::from_utf8_lossy(args[0])))
}

fn fill_set(con: &mut redis::Connection, key: &str) {
    for start in (0..MEMBERS).step_by(10_000) {
        let members: Vec<String> = (start..start + 10_000).map(|i| format!("member-{i:06}")).collect();
        let added: usize = redis::cmd("SADD").arg(key).arg(&members).query(con).unwrap();
        assert_eq!(added, 10_000);
    }
}

/// A key's whole content, as DUMP serializes it (None: no such key).
fn dump(con: &mut redis::Connection, key: &str) -> Option<Vec<u8>> {
    query(con, &[b"DUMP", key.as_bytes()])
}

#[test]
fn collections_past_one_batch_are_copied_restored_and_stored_whole() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut server = Server::start(&path, &SMALL_SEGMENTS);
    let mut con = connect(&server);
    fill_set(&mut con, "src");
    let set = dump(&mut con, "src").unwrap();
    assert_eq!(ahead::<i64>(&mut con, &[b"COPY", b"src", b"copy"]), 1);
    assert_eq!(ahead::<usize>(&mut con, &[b"SUNIONSTORE", b"union", b"src"]), MEMBERS);
    let mut pipe = redis::pipe();
    for i in 1..=40_000 {
        pipe.cmd("XADD").arg("stream").arg(format!("{i}-1")).arg("field").arg(format!("value-{i:06}")).ignore();
    }
    pipe.query::<()>(&mut con).unwrap();
    let stream = dump(&mut con, "stream").unwrap();
    assert_eq!(ahead::<String>(&mut con, &[b"RESTORE", b"restored", b"0", &stream]), "OK");
    // A sorted set, a list and a hash, each past the limit.
    let members: Vec<String> = (0..MEMBERS).map(|i| format!("member-{i:06}")).collect();
    for start in (0..ZSET_MEMBERS).step_by(1000) {
        let mut zadd = redis::cmd("ZADD");
        zadd.arg("zset");
        for (i, member) in members.iter().enumerate().skip(start).take(1000) {
            zadd.arg(i).arg(member);
        }
        let _: usize = zadd.query(&mut con).unwrap();
    }
    // Its blocks, split inside those ZADDs, count its ranks right.
    for rank in [0, 1, 511, 512, 513, 1023, 1024, 20_000, ZSET_MEMBERS - 1] {
        let member = format!("member-{rank:06}");
        assert_eq!(query::<usize>(&mut con, &[b"ZRANK", b"zset", member.as_bytes()]), rank);
        let at = rank.to_string();
        let found: Vec<String> = query(&mut con, &[b"ZRANGE", b"zset", at.as_bytes(), at.as_bytes()]);
        assert_eq!(found, [member]);
    }
    assert_eq!(ahead::<usize>(&mut con, &[b"ZUNIONSTORE", b"zunion", b"1", b"zset"]), ZSET_MEMBERS);
    // Elements of 40 bytes: a list's entries hold 32 elements each.
    let elements: Vec<String> = members.iter().map(|member| format!("{member}-{}", "x".repeat(26))).collect();
    let _: usize = redis::cmd("RPUSH").arg("list").arg(&elements).query(&mut con).unwrap();
    let list = dump(&mut con, "list").unwrap();
    assert_eq!(ahead::<String>(&mut con, &[b"RESTORE", b"list2", b"0", &list]), "OK");
    let mut hset = redis::cmd("HSET");
    hset.arg("hash");
    for member in &members {
        hset.arg(member).arg("value");
    }
    let _: usize = hset.query(&mut con).unwrap();
    assert_eq!(ahead::<i64>(&mut con, &[b"COPY", b"hash", b"hash2"]), 1);
    let (zset, hash) = (dump(&mut con, "zset"), dump(&mut con, "hash"));
    for _ in 0..2 {
        assert_eq!(dump(&mut con, "copy").as_ref(), Some(&set));
        assert_eq!(dump(&mut con, "union").as_ref(), Some(&set));
        assert_eq!(dump(&mut con, "restored").as_ref(), Some(&stream));
        assert_eq!(query::<usize>(&mut con, &[b"XLEN", b"restored"]), 40_000);
        assert_eq!(dump(&mut con, "zunion"), zset);
        assert_eq!(dump(&mut con, "list2").as_ref(), Some(&list));
        assert_eq!(dump(&mut con, "hash2"), hash);
        assert_eq!(query::<usize>(&mut con, &[b"DBSIZE"]), 11);
        // And after a restart.
        drop(con);
        assert!(server.terminate());
        server = Server::start(&path, &SMALL_SEGMENTS);
        con = connect(&server);
    }
}

/// COPYs of the big set in a loop while the server is SIGKILLed: every
/// acknowledged copy is there whole, the one in flight whole or absent,
/// and once the copies are deleted the server's own entries are back to
/// what the set alone holds (the tables a kill cut off were swept).
#[test]
fn a_copy_cut_off_by_sigkill_is_absent_or_whole_and_swept() {
    let iterations = common::crash_iterations(5);
    let mut rng = common::crash_rng("big table crash test", iterations);
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let path = dir.path().join("db");
    let server = Server::start(&path, &SMALL_SEGMENTS);
    let mut con = connect(&server);
    fill_set(&mut con, "src");
    let set = dump(&mut con, "src").unwrap();
    let own_entries = reserved_entries(&mut con);
    drop((con, server));
    let (mut acked_total, mut cut_off) = (0, 0);
    for life in 0..iterations {
        let mut server =
            Server::start(&path, &SMALL_SEGMENTS.iter().copied().chain(["--durability", "sync"]).collect::<Vec<_>>());
        let (sent, acked) = (mpsc::channel(), mpsc::channel());
        let url = server.url();
        let copier = std::thread::spawn(move || {
            let (sent, acked) = (sent.0, acked.0);
            let Ok(mut con) = redis::Client::open(url).and_then(|c| c.get_connection()) else { return };
            for i in 0..8 {
                let name = format!("copy-{life}-{i}");
                sent.send(name.clone()).unwrap();
                match redis::cmd("COPY").arg("src").arg(&name).query::<i64>(&mut con) {
                    Ok(1) => acked.send(name).unwrap(),
                    Ok(other) => panic!("COPY answered {other}"),
                    Err(_) => return,
                }
            }
        });
        std::thread::sleep(Duration::from_millis(rng.gen_range(50..800)));
        server.kill();
        copier.join().unwrap();
        let (sent, acked): (Vec<String>, Vec<String>) = (sent.1.try_iter().collect(), acked.1.try_iter().collect());
        let server = Server::start(&path, &SMALL_SEGMENTS);
        let mut con = connect(&server);
        for name in &sent {
            match dump(&mut con, name) {
                Some(copy) => assert!(copy == set, "{name} differs from the set"),
                None => {
                    assert!(!acked.contains(name), "{name} was acknowledged and is gone");
                    cut_off += 1;
                }
            }
        }
        acked_total += acked.len();
        for name in &sent {
            let _: i64 = query(&mut con, &[b"DEL", name.as_bytes()]);
        }
        assert_eq!(dump(&mut con, "src").as_ref(), Some(&set));
    }
    eprintln!("big table crash test: {acked_total} acknowledged copies checked, {cut_off} cut off by the kill");
    assert!(acked_total > 0, "no COPY was ever acknowledged");
    // The deleted copies' tables and those a kill cut off go in the
    // background.
    let server = Server::start(&path, &SMALL_SEGMENTS);
    let mut con = connect(&server);
    let deadline = Instant::now() + Duration::from_secs(60);
    while reserved_entries(&mut con) != own_entries {
        assert!(
            Instant::now() < deadline,
            "{} reserved entries left, {own_entries} expected",
            reserved_entries(&mut con)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(query::<usize>(&mut con, &[b"DBSIZE"]), 1);
}

/// INFO persistence's count of the server's own entries (tables' fields
/// and owner records among them).
fn reserved_entries(con: &mut redis::Connection) -> u64 {
    persistence(con, "reserved_entries")
}

fn persistence(con: &mut redis::Connection, field: &str) -> u64 {
    let info: String = query(con, &[b"INFO", b"persistence"]);
    info.lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|n| n.trim().parse().ok())
        .unwrap_or_else(|| panic!("{field} in INFO persistence"))
}

/// Runs `command` and requires it to have written a table ahead.
fn ahead<T: redis::FromRedisValue>(con: &mut redis::Connection, args: &[&[u8]]) -> T {
    let before = persistence(con, "tables_written_ahead");
    let reply = query(con, args);
    assert_eq!(persistence(con, "tables_written_ahead"), before + 1, "{:?}", String::from_utf8_lossy(args[0]));
    reply
}

/// Adds members `member-<i>` with score `i` for `i` in `range` to `key`.
fn fill_zset(con: &mut redis::Connection, key: &str, range: std::ops::Range<usize>) {
    for start in range.clone().step_by(1000) {
        let mut zadd = redis::cmd("ZADD");
        zadd.arg(key);
        for i in start..(start + 1000).min(range.end) {
            zadd.arg(i).arg(format!("member-{i:06}"));
        }
        let _: usize = zadd.query(con).unwrap();
    }
}

/// Checks that `key` holds exactly members `first..end` of `fill_zset`,
/// in order, with their ranks and count agreeing.
fn check_zset(con: &mut redis::Connection, key: &str, first: usize, end: usize) {
    let all: Vec<(String, f64)> = redis::cmd("ZRANGE").arg(key).arg(0).arg(-1).arg("WITHSCORES").query(con).unwrap();
    assert_eq!(all.len(), end - first, "members {first}..{end}");
    for (k, (member, score)) in all.iter().enumerate() {
        assert_eq!((member.as_str(), *score), (format!("member-{:06}", first + k).as_str(), (first + k) as f64));
    }
    assert_eq!(query::<usize>(con, &[b"ZCARD", key.as_bytes()]), end - first);
    assert_eq!(query::<usize>(con, &[b"ZCOUNT", key.as_bytes(), b"-inf", b"+inf"]), end - first);
    for k in [0, 1, 511, 512, 1024, (end - first) / 2, end - first - 1] {
        if k < end - first {
            let member = format!("member-{:06}", first + k);
            assert_eq!(query::<usize>(con, &[b"ZRANK", key.as_bytes(), member.as_bytes()]), k, "{member}");
        }
    }
}

/// Removals from a big sorted set past one batch (ZREMRANGEBYRANK, -SCORE,
/// -LEX and ZPOPMIN with a count) commit in pieces, each with the set's
/// new count; in a pipeline's run such a command runs again alone; in a
/// transaction it stays one batch and gets the engine's error.
#[test]
fn big_sorted_set_removals_go_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &SMALL_SEGMENTS);
    let mut con = connect(&server);
    fill_zset(&mut con, "z", 0..100_000);
    // 50,000 members are about 3.4 MB of batch: past the 2 MiB limit.
    assert_eq!(query::<usize>(&mut con, &[b"ZREMRANGEBYRANK", b"z", b"0", b"49999"]), 50_000);
    check_zset(&mut con, "z", 50_000, 100_000);
    let popped: Vec<(String, f64)> = redis::cmd("ZPOPMIN").arg("z").arg(30_000).query(&mut con).unwrap();
    assert_eq!((popped.len(), popped[0].0.as_str(), popped[29_999].1), (30_000, "member-050000", 79_999.0));
    check_zset(&mut con, "z", 80_000, 100_000);
    // In a pipeline's run: a removal past the batch runs again alone.
    fill_zset(&mut con, "z", 0..80_000);
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg("before").arg("1");
    pipe.cmd("ZREMRANGEBYSCORE").arg("z").arg("-inf").arg("(95000");
    pipe.cmd("GET").arg("before");
    let replies: Vec<redis::Value> = pipe.query(&mut con).unwrap();
    assert_eq!(replies[1..], [redis::Value::Int(95_000), redis::Value::BulkString(b"1".to_vec())]);
    check_zset(&mut con, "z", 95_000, 100_000);
    fill_zset(&mut con, "lex", 0..40_000);
    let removed: usize =
        redis::cmd("ZREMRANGEBYLEX").arg("lex").arg("-").arg("(member-039000").query(&mut con).unwrap();
    assert_eq!(removed, 39_000);
    check_zset(&mut con, "lex", 39_000, 40_000);
    // A transaction's removal is one batch: the engine's error, no change
    // (one that leaves a member: emptying the set deletes its key at once).
    fill_zset(&mut con, "tx", 0..40_000);
    let mut raw = server.connect();
    assert_eq!(common::request(&mut raw, &common::encode(&[b"MULTI"])), b"+OK\r\n");
    let queued = common::request(&mut raw, &common::encode(&[b"ZREMRANGEBYRANK", b"tx", b"0", b"-2"]));
    assert_eq!(queued, b"+QUEUED\r\n");
    let reply = String::from_utf8(common::request(&mut raw, &common::encode(&[b"EXEC"]))).unwrap();
    assert!(reply.contains("exceeds the limit"), "{reply}");
    check_zset(&mut con, "tx", 0, 40_000);
}

/// A command that commits in pieces, SIGKILLed round by round
/// (`SCALEDKV_SERVER_CRASH_ITERATIONS`, 4 by default): each round starts
/// the server on one data directory and `prepare`s it (given the round);
/// round 0 sends `request`, times it to its `reply` and `finish`es; the
/// others are killed at a random moment within that time, restarted and
/// `check`ed, which says whether the kill landed between pieces.
fn killed_half_way(
    test: &str,
    request: &[u8],
    reply: &[u8],
    prepare: impl Fn(&mut redis::Connection, usize),
    finish: impl Fn(&mut redis::Connection),
    check: impl Fn(&mut redis::Connection) -> bool,
) {
    use std::io::Write;
    let iterations = common::crash_iterations(4);
    let mut rng = common::crash_rng(test, iterations);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut full = Duration::ZERO;
    let mut cut_short = 0;
    for round in 0..=iterations {
        let mut server = Server::start(&path, &SMALL_SEGMENTS);
        let mut con = connect(&server);
        prepare(&mut con, round);
        let mut raw = server.connect();
        raw.write_all(request).unwrap();
        if round == 0 {
            let started = Instant::now();
            assert_eq!(common::read_reply(&mut raw), reply);
            full = started.elapsed();
            finish(&mut con);
            assert!(server.terminate());
            continue;
        }
        std::thread::sleep(full.mul_f64(rng.gen_range(0.0..1.0)));
        server.kill();
        let server = Server::start(&path, &SMALL_SEGMENTS);
        cut_short += usize::from(check(&mut connect(&server)));
    }
    eprintln!("{test}: the command took {full:?}; {cut_short} of {iterations} kills landed between its pieces");
}

/// ZREMRANGEBYRANK in pieces SIGKILLed at a random moment leaves a whole
/// sorted set: the members of the highest ranks, its count, ranks and
/// range reads agreeing. Round 0 removes to the end, timed; the others
/// are killed within that time.
#[test]
fn a_big_sorted_set_removal_killed_half_way_leaves_a_whole_set() {
    let remove = common::encode(&[b"ZREMRANGEBYRANK", b"z", b"0", b"-11"]);
    killed_half_way(
        "a_big_sorted_set_removal_killed_half_way_leaves_a_whole_set",
        &remove,
        b":59990\r\n",
        |con, _| fill_zset(con, "z", 0..60_000),
        |_| {},
        |con| {
            let left = query::<usize>(con, &[b"ZCARD", b"z"]);
            assert!((10..=60_000).contains(&left), "{left} members left");
            check_zset(con, "z", 60_000 - left, 60_000);
            // Done again, the removal finishes.
            let rest = query::<usize>(con, &[b"ZREMRANGEBYRANK", b"z", b"0", b"-11"]);
            assert_eq!(rest, left - 10);
            check_zset(con, "z", 59_990, 60_000);
            left > 10 && left < 60_000
        },
    );
}

/// Readers take no locks: while a big removal commits its pieces, the
/// rank of the set's last member a reader gets lies between the counts
/// read just before and just after it (a rank summed from block counts
/// cached before a piece would be too high). Two I/O threads, so that
/// the reader is served while the removal's thread writes its pieces.
#[test]
fn ranks_read_during_a_removal_in_pieces_agree_with_the_counts() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[&SMALL_SEGMENTS[..], &["--threads", "2"]].concat());
    let mut con = connect(&server);
    fill_zset(&mut con, "z", 0..100_000);
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let reader = {
        let (mut con, done) = (connect(&server), done.clone());
        std::thread::spawn(move || {
            let mut reads = 0;
            while !done.load(std::sync::atomic::Ordering::Acquire) {
                let before = query::<usize>(&mut con, &[b"ZCARD", b"z"]);
                let rank = query::<usize>(&mut con, &[b"ZRANK", b"z", b"member-099999"]);
                let after = query::<usize>(&mut con, &[b"ZCARD", b"z"]);
                assert!(after - 1 <= rank && rank < before, "rank {rank} between counts {before} and {after}");
                reads += 1;
            }
            reads
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    for _ in 0..3 {
        assert_eq!(query::<usize>(&mut con, &[b"ZREMRANGEBYRANK", b"z", b"0", b"29999"]), 30_000);
    }
    done.store(true, std::sync::atomic::Ordering::Release);
    let reads = reader.join().unwrap();
    assert!(reads > 0);
    check_zset(&mut con, "z", 90_000, 100_000);
}

/// `member-<i>` for `i` in `range`.
fn members(range: std::ops::Range<usize>) -> Vec<String> {
    range.map(|i| format!("member-{i:06}")).collect()
}

/// `SADD s` of `members(range)`, encoded.
fn sadd_request(range: std::ops::Range<usize>) -> Vec<u8> {
    let members: Vec<String> = members(range);
    let args: Vec<&[u8]> = [&b"SADD"[..], b"s"].into_iter().chain(members.iter().map(String::as_bytes)).collect();
    common::encode(&args)
}

/// Checks that the set at `key` holds exactly `members(range)`, its count
/// agreeing.
fn check_set(con: &mut redis::Connection, key: &str, range: std::ops::Range<usize>) {
    let mut all: Vec<String> = redis::cmd("SMEMBERS").arg(key).query(con).unwrap();
    all.sort();
    assert!(all == members(range.clone()), "{key}: {} members, not {range:?}", all.len());
    assert_eq!(query::<usize>(con, &[b"SCARD", key.as_bytes()]), range.len());
}

/// SADD, SREM and SPOP with a count changing a big set's table past one
/// batch, HSET and HDEL a big hash's, commit in pieces, each with the
/// table's new count; in a pipeline's run such a command runs again
/// alone; in a transaction it stays one batch and gets the engine's error.
#[test]
fn big_set_and_hash_changes_go_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &SMALL_SEGMENTS);
    let mut con = connect(&server);
    fill_set(&mut con, "s");
    let reserved = reserved_entries(&mut con);
    // 100,000 new members, about 4 MB of batch, and the 80,000 it holds.
    let added: usize = redis::cmd("SADD").arg("s").arg(members(0..180_000)).query(&mut con).unwrap();
    assert_eq!(added, 100_000);
    check_set(&mut con, "s", 0..180_000);
    assert_eq!(reserved_entries(&mut con), reserved + 100_000);
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg("before").arg("1");
    pipe.cmd("SREM").arg("s").arg(members(0..120_000)).arg("not-a-member");
    pipe.cmd("GET").arg("before");
    let replies: Vec<redis::Value> = pipe.query(&mut con).unwrap();
    assert_eq!(replies[1..], [redis::Value::Int(120_000), redis::Value::BulkString(b"1".to_vec())]);
    check_set(&mut con, "s", 120_000..180_000);
    let mut popped: Vec<String> = redis::cmd("SPOP").arg("s").arg(50_000).query(&mut con).unwrap();
    let mut left: Vec<String> = redis::cmd("SMEMBERS").arg("s").query(&mut con).unwrap();
    assert_eq!((popped.len(), left.len(), query::<usize>(&mut con, &[b"SCARD", b"s"])), (50_000, 10_000, 10_000));
    popped.append(&mut left);
    popped.sort();
    assert!(popped == members(120_000..180_000), "popped and left are the set, each member once");

    let fields = |range: std::ops::Range<usize>, value: &str| -> Vec<(String, String)> {
        members(range).into_iter().map(|member| (member, value.to_string())).collect()
    };
    let _: usize = redis::cmd("HSET").arg("h").arg(fields(0..40_000, "old")).query(&mut con).unwrap();
    // 80,000 new fields and 40,000 changed ones.
    let added: usize = redis::cmd("HSET").arg("h").arg(fields(0..120_000, "new")).query(&mut con).unwrap();
    assert_eq!(added, 80_000);
    let removed: usize = redis::cmd("HDEL").arg("h").arg(members(10_000..110_000)).query(&mut con).unwrap();
    assert_eq!(removed, 100_000);
    let mut all: Vec<(String, String)> = redis::cmd("HGETALL").arg("h").query(&mut con).unwrap();
    all.sort();
    assert!(all == [fields(0..10_000, "new"), fields(110_000..120_000, "new")].concat(), "{} fields", all.len());
    assert_eq!(query::<usize>(&mut con, &[b"HLEN", b"h"]), 20_000);

    let mut raw = server.connect();
    assert_eq!(common::request(&mut raw, &common::encode(&[b"MULTI"])), b"+OK\r\n");
    assert_eq!(common::request(&mut raw, &sadd_request(200_000..300_000)), b"+QUEUED\r\n");
    let reply = String::from_utf8(common::request(&mut raw, &common::encode(&[b"EXEC"]))).unwrap();
    assert!(reply.contains("exceeds the limit"), "{reply}");
    assert_eq!(query::<usize>(&mut con, &[b"SCARD", b"s"]), 10_000);
}

/// ZADD past one batch commits in pieces too: into a sorted set it makes
/// a table of half-way (the first piece holds the new table whole), into
/// a table, and in a pipeline's run (again alone); ZREM likewise.
#[test]
fn big_sorted_set_additions_go_in_pieces() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &SMALL_SEGMENTS);
    let mut con = connect(&server);
    let zadd = |range: std::ops::Range<usize>| {
        let mut zadd = redis::cmd("ZADD");
        zadd.arg("z");
        for i in range {
            zadd.arg(i).arg(format!("member-{i:06}"));
        }
        zadd
    };
    // 40,000 members, about 5.8 MB of batch.
    assert_eq!(zadd(0..40_000).query::<usize>(&mut con).unwrap(), 40_000);
    check_zset(&mut con, "z", 0, 40_000);
    let mut pipe = redis::pipe();
    pipe.cmd("SET").arg("before").arg("1");
    pipe.add_command(zadd(20_000..80_000));
    pipe.cmd("GET").arg("before");
    let replies: Vec<redis::Value> = pipe.query(&mut con).unwrap();
    assert_eq!(replies[1..], [redis::Value::Int(40_000), redis::Value::BulkString(b"1".to_vec())]);
    check_zset(&mut con, "z", 0, 80_000);
    let removed: usize = redis::cmd("ZREM").arg("z").arg(members(0..50_000)).query(&mut con).unwrap();
    assert_eq!(removed, 50_000);
    check_zset(&mut con, "z", 50_000, 80_000);
}

/// SADD of 120,000 new members into a big set, SIGKILLed at a random
/// moment, leaves a whole set: the members it held, some of the new ones,
/// and a count that agrees. Round 0 adds them all, timed; the others are
/// killed within that time.
#[test]
fn a_big_set_addition_killed_half_way_leaves_a_whole_set() {
    let srem_added = |con: &mut redis::Connection| -> usize {
        redis::cmd("SREM").arg("s").arg(members(80_000..200_000)).query(con).unwrap()
    };
    killed_half_way(
        "a_big_set_addition_killed_half_way_leaves_a_whole_set",
        &sadd_request(80_000..200_000),
        b":120000\r\n",
        |con, round| {
            if round == 0 {
                fill_set(con, "s");
            }
        },
        |con| assert_eq!(srem_added(con), 120_000),
        |con| {
            let mut all: Vec<String> = redis::cmd("SMEMBERS").arg("s").query(con).unwrap();
            all.sort();
            let card = query::<usize>(con, &[b"SCARD", b"s"]);
            assert_eq!(card, all.len(), "the count agrees with the members");
            assert!(all[..80_000] == members(0..80_000), "the members it held");
            assert!(all.len() <= 200_000 && all[80_000..].iter().all(|m| m.as_str() >= "member-080000"));
            // Removed again, the set is as it was.
            assert_eq!(srem_added(con), card - 80_000);
            check_set(con, "s", 0..80_000);
            card > 80_000 && card < 200_000
        },
    );
}

/// A command that empties a big collection (ZPOPMIN or SPOP with a count
/// past its size, ZREMRANGEBYSCORE over all of it) deletes its key in one
/// write, as DEL does, and the sweep deletes its entries in the
/// background: in a transaction too, where removals one by one would
/// outgrow the batch.
#[test]
fn emptying_a_big_collection_deletes_its_key_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &SMALL_SEGMENTS);
    let mut con = connect(&server);
    let reserved = reserved_entries(&mut con);
    fill_zset(&mut con, "z", 0..40_000);
    fill_zset(&mut con, "z2", 0..40_000);
    fill_set(&mut con, "s");
    let (popped, removed, spopped): (Vec<(String, f64)>, usize, Vec<String>) = redis::pipe()
        .atomic()
        .cmd("ZPOPMIN")
        .arg("z")
        .arg(50_000)
        .cmd("ZREMRANGEBYSCORE")
        .arg("z2")
        .arg("-inf")
        .arg("+inf")
        .cmd("SPOP")
        .arg("s")
        .arg(100_000)
        .query(&mut con)
        .unwrap();
    assert_eq!((popped.len(), popped[0].0.as_str(), popped[39_999].1), (40_000, "member-000000", 39_999.0));
    assert_eq!(removed, 40_000);
    let mut spopped = spopped;
    spopped.sort();
    assert!(spopped == members(0..MEMBERS), "{} members popped", spopped.len());
    assert_eq!(query::<usize>(&mut con, &[b"EXISTS", b"z", b"z2", b"s"]), 0);
    let swept = Instant::now();
    while reserved_entries(&mut con) != reserved {
        assert!(swept.elapsed() < Duration::from_secs(30), "{} entries left", reserved_entries(&mut con) - reserved);
        std::thread::sleep(Duration::from_millis(50));
    }
}
