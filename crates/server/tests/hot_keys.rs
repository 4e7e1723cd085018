//! Many clients write the same few keys at once. A read-modify-write that
//! another client waits for lets its locks go once its writes are queued,
//! and the next one reads them before they are durable (`pending.rs`):
//! every reply must still be what running the commands one at a time
//! gives, a blind SET must hide the older queued writes, WATCH must see
//! them, and after a SIGKILL and a restart everything replied is there.

mod common;

use std::collections::BTreeSet;
use std::net::TcpStream;
use std::time::Duration;

use common::{encode, read_reply, request, Server};

const CLIENTS: usize = 6;
const ROUNDS: usize = 200;

fn integer(reply: &[u8]) -> i64 {
    let text = String::from_utf8_lossy(reply);
    text.trim_start_matches(':').trim().parse().unwrap_or_else(|_| panic!("not an integer reply: {text:?}"))
}

/// A bulk reply's text.
fn text(reply: &[u8]) -> String {
    let text = String::from_utf8_lossy(reply);
    text.lines().nth(1).unwrap_or_else(|| panic!("not a bulk reply: {text:?}")).to_string()
}

/// Runs `commands` in one MULTI/EXEC and checks that every one ran.
fn transaction(stream: &mut TcpStream, commands: &[&[&[u8]]]) {
    let mut bytes = encode(&[b"MULTI"]);
    for command in commands {
        bytes.extend(encode(command));
    }
    bytes.extend(encode(&[b"EXEC"]));
    std::io::Write::write_all(stream, &bytes).unwrap();
    for _ in 0..=commands.len() {
        read_reply(stream);
    }
    let exec = read_reply(stream);
    assert!(exec.starts_with(format!("*{}\r\n", commands.len()).as_bytes()), "{}", String::from_utf8_lossy(&exec));
}

fn member(client: usize, round: usize) -> String {
    format!("member-of-the-hot-sorted-set-{client}-{round:04}")
}

/// What one client was told.
#[derive(Default)]
struct Seen {
    incr: Vec<i64>,
    hincrby: Vec<i64>,
    /// (RPUSH reply, element pushed)
    pushed: Vec<(i64, String)>,
    zincrby: Vec<i64>,
    /// INCR replies of the key a resetter SETs, in order.
    reset_incr: Vec<i64>,
}

fn round_commands(client: usize, round: usize) -> Vec<u8> {
    let element = format!("c{client}:r{round}");
    let score = (round * CLIENTS + client).to_string();
    [
        encode(&[b"INCR", b"hot"]),
        encode(&[b"HINCRBY", b"hothash", b"n", b"1"]),
        encode(&[b"RPUSH", b"hotlist", element.as_bytes()]),
        encode(&[b"ZADD", b"hotz", score.as_bytes(), member(client, round).as_bytes()]),
        encode(&[b"ZINCRBY", b"hotz2", b"1", b"shared"]),
        encode(&[b"INCR", b"reset"]),
    ]
    .concat()
}

/// Sends each round's read-modify-writes, pipelined `depth` rounds at a time.
fn client(port: u16, client: usize, depth: usize) -> Seen {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut seen = Seen::default();
    for first in (0..ROUNDS).step_by(depth) {
        let rounds = first..(first + depth).min(ROUNDS);
        let request: Vec<u8> = rounds.clone().flat_map(|round| round_commands(client, round)).collect();
        std::io::Write::write_all(&mut stream, &request).unwrap();
        for round in rounds {
            seen.incr.push(integer(&read_reply(&mut stream)));
            seen.hincrby.push(integer(&read_reply(&mut stream)));
            seen.pushed.push((integer(&read_reply(&mut stream)), format!("c{client}:r{round}")));
            assert_eq!(read_reply(&mut stream), b":1\r\n", "ZADD of a new member");
            seen.zincrby.push(text(&read_reply(&mut stream)).parse().unwrap());
            seen.reset_incr.push(integer(&read_reply(&mut stream)));
        }
    }
    seen
}

/// SETs the reset key to ever higher bases, each followed by an INCR in
/// the same pipeline: the INCR must count from that base or later.
fn resetter(port: u16) -> usize {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    for step in 1..=60i64 {
        let base = (step * 1_000_000).to_string();
        let request = [encode(&[b"SET", b"reset", base.as_bytes()]), encode(&[b"INCR", b"reset"])].concat();
        std::io::Write::write_all(&mut stream, &request).unwrap();
        assert_eq!(read_reply(&mut stream), b"+OK\r\n");
        let after = integer(&read_reply(&mut stream));
        assert!(after > step * 1_000_000 && after < (step + 1) * 1_000_000, "INCR after SET {base}: {after}");
        std::thread::sleep(Duration::from_millis(2));
    }
    60
}

/// Increments `watched` with WATCH, GET, MULTI, SET, EXEC until `times`
/// transactions went through; returns how many were refused.
fn optimist(port: u16, times: usize) -> usize {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let (mut done, mut refused) = (0, 0);
    while done < times {
        assert_eq!(request(&mut stream, &encode(&[b"WATCH", b"watched"])), b"+OK\r\n");
        let reply = request(&mut stream, &encode(&[b"GET", b"watched"]));
        let value: i64 = if reply == b"$-1\r\n" { 0 } else { text(&reply).parse().unwrap() };
        let next = (value + 1).to_string();
        let transaction =
            [encode(&[b"MULTI"]), encode(&[b"SET", b"watched", next.as_bytes()]), encode(&[b"EXEC"])].concat();
        std::io::Write::write_all(&mut stream, &transaction).unwrap();
        assert_eq!(read_reply(&mut stream), b"+OK\r\n");
        assert_eq!(read_reply(&mut stream), b"+QUEUED\r\n");
        match read_reply(&mut stream).as_slice() {
            b"*-1\r\n" => refused += 1,
            b"*1\r\n+OK\r\n" => done += 1,
            other => panic!("EXEC: {:?}", String::from_utf8_lossy(other)),
        }
    }
    refused
}

/// Increments `watched` with plain INCRs (transactions in between).
fn incrementer(port: u16, times: usize) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    for _ in 0..times {
        integer(&request(&mut stream, &encode(&[b"INCR", b"watched"])));
    }
}

fn hot_keys_on(base: &str, threads: &str) {
    let dir = tempfile::tempdir_in(base).unwrap();
    let path = dir.path().join("db");
    let mut server = Server::start(&path, &["--durability", "sync", "--threads", threads]);
    let port = server.port;
    let (seen, refused) = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..CLIENTS).map(|c| scope.spawn(move || client(port, c, [1, 4, 16][c % 3]))).collect();
        let resetter = scope.spawn(move || resetter(port));
        let optimists: Vec<_> = (0..2).map(|_| scope.spawn(move || optimist(port, 40))).collect();
        let incrementers: Vec<_> = (0..2).map(|_| scope.spawn(move || incrementer(port, 100))).collect();
        let seen: Vec<Seen> = clients.into_iter().map(|c| c.join().unwrap()).collect();
        resetter.join().unwrap();
        let refused: usize = optimists.into_iter().map(|o| o.join().unwrap()).sum();
        incrementers.into_iter().for_each(|i| i.join().unwrap());
        (seen, refused)
    });
    let total = (CLIENTS * ROUNDS) as i64;
    // Each read-modify-write saw every one before it and none after.
    let expected: BTreeSet<i64> = (1..=total).collect();
    for (name, replies) in [
        ("INCR", seen.iter().flat_map(|s| s.incr.clone()).collect::<Vec<_>>()),
        ("HINCRBY", seen.iter().flat_map(|s| s.hincrby.clone()).collect()),
        ("RPUSH", seen.iter().flat_map(|s| s.pushed.iter().map(|(n, _)| *n)).collect()),
        ("ZINCRBY", seen.iter().flat_map(|s| s.zincrby.clone()).collect()),
    ] {
        assert_eq!(replies.len() as i64, total, "{name}");
        let distinct: BTreeSet<i64> = replies.into_iter().collect();
        let missing: Vec<i64> = expected.difference(&distinct).take(10).copied().collect();
        assert!(
            missing.is_empty(),
            "{name}: {} replies repeated, none of {missing:?} ...",
            expected.len() - distinct.len()
        );
    }
    // A client's INCRs of the reset key only grow: none read a value older
    // than a SET before it.
    for s in &seen {
        assert!(s.reset_incr.windows(2).all(|w| w[0] < w[1]), "reset INCRs went back: {:?}", s.reset_incr);
    }
    let check = |server: &Server| {
        let mut stream = server.connect();
        assert_eq!(text(&request(&mut stream, &encode(&[b"GET", b"hot"]))), total.to_string());
        assert_eq!(text(&request(&mut stream, &encode(&[b"HGET", b"hothash", b"n"]))), total.to_string());
        assert_eq!(integer(&request(&mut stream, &encode(&[b"LLEN", b"hotlist"]))), total);
        // Each element where its RPUSH's reply put it.
        for (length, element) in seen.iter().flat_map(|s| &s.pushed) {
            let at = (length - 1).to_string();
            let reply = request(&mut stream, &encode(&[b"LINDEX", b"hotlist", at.as_bytes()]));
            assert_eq!(text(&reply), *element, "LINDEX hotlist {at}");
        }
        // Scores are 0..total: each member's rank is its score.
        assert_eq!(integer(&request(&mut stream, &encode(&[b"ZCARD", b"hotz"]))), total);
        for client in 0..CLIENTS {
            for round in 0..ROUNDS {
                let rank = request(&mut stream, &encode(&[b"ZRANK", b"hotz", member(client, round).as_bytes()]));
                assert_eq!(integer(&rank), (round * CLIENTS + client) as i64, "ZRANK of {}", member(client, round));
            }
        }
        let encoding = request(&mut stream, &encode(&[b"OBJECT", b"ENCODING", b"hotz"]));
        assert!(encoding.ends_with(b"skiplist\r\n"), "hotz is a table");
        assert_eq!(text(&request(&mut stream, &encode(&[b"ZSCORE", b"hotz2", b"shared"]))), total.to_string());
        assert_eq!(text(&request(&mut stream, &encode(&[b"GET", b"watched"]))), (2 * 40 + 2 * 100).to_string());
    };
    check(&server);
    let info =
        String::from_utf8_lossy(&request(&mut server.connect(), &encode(&[b"INFO", b"persistence"]))).to_string();
    let early: u64 = info
        .lines()
        .find_map(|line| line.strip_prefix("early_lock_releases:"))
        .and_then(|n| n.trim().parse().ok())
        .expect("INFO persistence has early_lock_releases");
    assert!(early > 0, "no write let its locks go early: the test tests nothing new");
    // Everything replied is durable: after SIGKILL and a restart, the same.
    server.kill();
    let server = Server::start(&path, &[]);
    check(&server);
    eprintln!(
        "hot keys in {base}: {total} rounds of six read-modify-writes, {early} commits released their locks \
         early, {refused} transactions refused by WATCH"
    );
}

/// Pipelines of blind writes that repeat a key (redis-benchmark's SET):
/// a run sends only the last of each repeat to the log, and every read,
/// before and after a SIGKILL and a restart, finds the last value written.
#[test]
fn pipelined_sets_of_one_key_keep_the_last() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut server = Server::start(&path, &["--durability", "sync"]);
    let mut stream = server.connect();
    let keys = ["a", "a", "b", "a", "a", "c", "c", "a"];
    let mut last = std::collections::BTreeMap::new();
    for round in 0..50 {
        let mut pipeline = Vec::new();
        for (i, key) in keys.iter().enumerate() {
            let value = format!("{round}-{i}");
            pipeline.extend(match i % 3 {
                0 => encode(&[b"SET", key.as_bytes(), value.as_bytes()]),
                1 => encode(&[b"MSET", key.as_bytes(), value.as_bytes()]),
                _ => encode(&[b"SETEX", key.as_bytes(), b"1000", value.as_bytes()]),
            });
            last.insert(*key, value);
        }
        std::io::Write::write_all(&mut stream, &pipeline).unwrap();
        for _ in &keys {
            assert_eq!(read_reply(&mut stream), b"+OK\r\n");
        }
    }
    let check = |server: &Server| {
        let mut stream = server.connect();
        for (key, value) in &last {
            assert_eq!(text(&request(&mut stream, &encode(&[b"GET", key.as_bytes()]))), *value, "GET {key}");
        }
    };
    check(&server);
    server.kill();
    let server = Server::start(&path, &[]);
    check(&server);
}

/// On the disk one I/O thread's writers wait for the commit thread's
/// flush; on tmpfs a writer commits before it yields, so only writers on
/// other I/O threads find its locks taken.
#[test]
fn many_clients_read_modify_write_the_same_keys() {
    hot_keys_on(env!("CARGO_TARGET_TMPDIR"), "1");
    hot_keys_on("/dev/shm", "3");
}

/// Readers ask a big sorted set for ranks while writers move members
/// below and above an anchor in transactions (ZREM one, ZADD another on
/// the same side): every answer must be the one constant rank, so no
/// reader mixes block counts from before and after a write (readers keep
/// summed counts across commands, `ranks.rs`). Mutation-checked.
#[test]
fn ranks_stay_exact_while_a_sorted_set_changes() {
    const SIDE: usize = 3000;
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let server = Server::start(&dir.path().join("db"), &["--durability", "sync", "--threads", "3"]);
    let port = server.port;
    let mut stream = server.connect();
    let mut fill = Vec::new();
    for i in 0..SIDE {
        let (low, high) = ((i * 100).to_string(), (2_000_000 + i * 100).to_string());
        fill.extend(encode(&[b"ZADD", b"ranked", low.as_bytes(), format!("low:{i}").as_bytes()]));
        fill.extend(encode(&[b"ZADD", b"ranked", high.as_bytes(), format!("high:{i}").as_bytes()]));
    }
    fill.extend(encode(&[b"ZADD", b"ranked", b"1000000", b"anchor"]));
    std::io::Write::write_all(&mut stream, &fill).unwrap();
    for _ in 0..2 * SIDE + 1 {
        read_reply(&mut stream);
    }
    let expected = SIDE.to_string();
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (moves, reads) = std::thread::scope(|scope| {
        let writers: Vec<_> = (0..2)
            .map(|writer| {
                let stop = &stop;
                scope.spawn(move || {
                    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
                    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    // Each writer moves its own half of each side's members.
                    let mut next = [0usize; 2];
                    let mut moves = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) && moves < 3000 {
                        let side = moves % 2;
                        let name = if side == 0 { "low" } else { "high" };
                        let old = if next[side] == 0 {
                            format!("{name}:{}", writer + 2 * (moves / 2 % (SIDE / 2)))
                        } else {
                            format!("{name}:w{writer}:{}", next[side] - 1)
                        };
                        let new = format!("{name}:w{writer}:{}", next[side]);
                        next[side] += 1;
                        let score = (moves * 7919 % 999_000 + side * 2_000_000).to_string();
                        transaction(
                            &mut stream,
                            &[
                                &[b"ZREM", b"ranked", old.as_bytes()],
                                &[b"ZADD", b"ranked", score.as_bytes(), new.as_bytes()],
                            ],
                        );
                        moves += 1;
                    }
                    moves
                })
            })
            .collect();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (stop, expected) = (&stop, &expected);
                scope.spawn(move || {
                    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
                    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    let mut reads = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let rank = integer(&request(&mut stream, &encode(&[b"ZRANK", b"ranked", b"anchor"])));
                        let back = integer(&request(&mut stream, &encode(&[b"ZREVRANK", b"ranked", b"anchor"])));
                        let at = request(
                            &mut stream,
                            &encode(&[b"ZRANGE", b"ranked", expected.as_bytes(), expected.as_bytes()]),
                        );
                        assert_eq!((rank, back), (SIDE as i64, SIDE as i64), "after {reads} reads");
                        assert_eq!(at, b"*1\r\n$6\r\nanchor\r\n", "after {reads} reads");
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        let moves: usize = writers.into_iter().map(|w| w.join().unwrap()).sum();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let reads: usize = readers.into_iter().map(|r| r.join().unwrap()).sum();
        (moves, reads)
    });
    assert_eq!(integer(&request(&mut stream, &encode(&[b"ZCARD", b"ranked"]))), (2 * SIDE + 1) as i64);
    eprintln!("ranks: {moves} moves, {reads} rounds of reads, all exact");
    assert!(reads > 0);
}

/// Readers of a big list hold no lock: while transactions push one number
/// at the head and pop one at the tail, every LRANGE must show one moment
/// of the list (consecutive numbers, newest first, as many as ever), and
/// every LINDEX an element of such a moment: no mix of two moments, no
/// error for an element popped between two reads. Some elements are long
/// enough for an entry of their own.
#[test]
fn list_readers_see_one_moment_while_the_list_changes() {
    const LEN: usize = 700;
    let element = |n: usize| {
        let pad = if n.is_multiple_of(5) { 90 } else { 6 };
        format!("{n:0>pad$}")
    };
    let number = |bytes: &[u8]| String::from_utf8_lossy(bytes).trim_start_matches('0').parse::<usize>().unwrap_or(0);
    let dir = tempfile::tempdir_in("/dev/shm").unwrap();
    let server = Server::start(&dir.path().join("db"), &["--durability", "sync", "--threads", "3"]);
    let port = server.port;
    let mut stream = server.connect();
    let mut fill = Vec::new();
    for n in 1..=LEN {
        fill.extend(encode(&[b"LPUSH", b"window", element(n).as_bytes()]));
    }
    std::io::Write::write_all(&mut stream, &fill).unwrap();
    for _ in 0..LEN {
        read_reply(&mut stream);
    }
    let stop = std::sync::atomic::AtomicBool::new(false);
    let (moves, reads) = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
            stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let mut next = LEN + 1;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) && next < LEN + 4000 {
                transaction(&mut stream, &[&[b"LPUSH", b"window", element(next).as_bytes()], &[b"RPOP", b"window"]]);
                next += 1;
            }
            next - LEN - 1
        });
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let stop = &stop;
                scope.spawn(move || {
                    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
                    stream.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
                    let mut reads = 0;
                    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                        let all = request(&mut stream, &encode(&[b"LRANGE", b"window", b"0", b"-1"]));
                        let listed = String::from_utf8_lossy(&all);
                        let lines: Vec<&str> = listed.split("\r\n").collect();
                        let start = &listed[..listed.len().min(200)];
                        assert_eq!(lines[0], format!("*{LEN}"), "after {reads} reads: {start}");
                        let numbers: Vec<usize> =
                            lines[1..].iter().skip(1).step_by(2).map(|e| number(e.as_bytes())).collect();
                        let newest = numbers[0];
                        let expected: Vec<usize> = (newest + 1 - LEN..=newest).rev().collect();
                        assert_eq!(numbers, expected, "after {reads} reads");
                        let at = request(&mut stream, &encode(&[b"LINDEX", b"window", b"350"]));
                        assert!(at.starts_with(b"$"), "LINDEX: {}", String::from_utf8_lossy(&at));
                        let middle = number(text(&at).as_bytes());
                        assert!(middle > newest.saturating_sub(LEN), "LINDEX 350 gave {middle}, older than {newest}");
                        reads += 1;
                    }
                    reads
                })
            })
            .collect();
        let moves = writer.join().unwrap();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let reads: usize = readers.into_iter().map(|r| r.join().unwrap()).sum();
        (moves, reads)
    });
    assert!(moves > 100 && reads > 20, "{moves} moves, {reads} reads");
}
