//! The server is SIGKILLed while clients write (pipelined SETs, INCRs,
//! MSETs, HSETs, HINCRBYs, ZADDs and GEOADDs, and INCRs and RPUSHes of keys all
//! clients share, whose writers let their locks go before they are
//! durable), then restarted: every acknowledged write must be there byte
//! for byte, and no MSET may be half applied. A client loads function
//! libraries meanwhile (FUNCTION LOAD, one new library and one replaced
//! per round): every acknowledged one must answer FCALL after the restart.
//! In a loop:
//! `SCALEDKV_SERVER_CRASH_ITERATIONS` (default 5) sets the count.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{encode, try_read_reply, Server};
use rand::Rng;

const THREADS: usize = 4;
const PIPELINE: usize = 8;

fn value(iteration: usize, thread: usize, seq: u64) -> Vec<u8> {
    let len = 1 + (seq as usize * 37 + thread * 11) % 700;
    (0..len).map(|i| b'a' + ((i as u64 + seq + iteration as u64) % 26) as u8).collect()
}

/// What one writer saw acknowledged before the server died.
#[derive(Default, Debug)]
struct Acked {
    /// SETs 0..sets were acknowledged.
    sets: u64,
    /// Highest INCR reply received.
    counter: i64,
    /// HSETs of rounds 0..hash_rounds were acknowledged.
    hash_rounds: u64,
    /// Highest HINCRBY reply received.
    hash_counter: i64,
    /// ZADDs of rounds 0..zset_rounds were acknowledged.
    zset_rounds: u64,
    /// GEOADDs of rounds 0..geo_rounds were acknowledged.
    geo_rounds: u64,
    /// Highest reply to an INCR of the key all writers share.
    shared_counter: i64,
    /// (reply, element) of each acknowledged RPUSH to the list all share.
    pushed: Vec<(i64, String)>,
}

/// The member a round adds to its life's sorted set (long enough that a
/// few hundred rounds make it a table).
fn zset_member(seq: u64) -> String {
    format!("member-{seq:0>24}")
}

fn writer(port: u16, iteration: usize, thread: usize, stop: Arc<AtomicBool>) -> Acked {
    let mut acked = Acked::default();
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return acked };
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let mut request = Vec::new();
        for i in 0..PIPELINE as u64 {
            let key = format!("i{iteration}:t{thread}:{}", seq + i);
            request.extend(encode(&[b"SET", key.as_bytes(), &value(iteration, thread, seq + i)]));
        }
        let n = format!("{seq}");
        let (a, b) = (format!("pair:t{thread}:a"), format!("pair:t{thread}:b"));
        request.extend(encode(&[b"MSET", a.as_bytes(), n.as_bytes(), b.as_bytes(), n.as_bytes()]));
        // Read-modify-writes from here on: one run, its locks exclusive.
        let counter = format!("counter:t{thread}");
        request.extend(encode(&[b"INCR", counter.as_bytes()]));
        // One field more per round in this life's hash: each HSET rewrites
        // it while it is a listpack, then writes one entry of its table.
        let hash = format!("h:i{iteration}:t{thread}");
        request.extend(encode(&[b"HSET", hash.as_bytes(), format!("f{seq}").as_bytes(), n.as_bytes()]));
        request.extend(encode(&[b"HINCRBY", format!("hcount:t{thread}").as_bytes(), b"n", b"1"]));
        let zset = format!("z:i{iteration}:t{thread}");
        request.extend(encode(&[b"ZADD", zset.as_bytes(), n.as_bytes(), zset_member(seq).as_bytes()]));
        let (geo, (lon, lat)) = (format!("geo:i{iteration}:t{thread}"), place(seq));
        request.extend(encode(&[
            b"GEOADD",
            geo.as_bytes(),
            lon.as_bytes(),
            lat.as_bytes(),
            place_name(seq).as_bytes(),
        ]));
        request.extend(encode(&[b"INCR", b"shared-counter"]));
        let element = format!("i{iteration}:t{thread}:{seq}");
        request.extend(encode(&[b"RPUSH", b"shared-list", element.as_bytes()]));
        if stream.write_all(&request).is_err() {
            return acked;
        }
        for i in 0..PIPELINE as u64 {
            match try_read_reply(&mut stream) {
                Some(reply) if reply == b"+OK\r\n" => acked.sets = seq + i + 1,
                Some(reply) => panic!("unexpected reply {:?}", String::from_utf8_lossy(&reply)),
                None => return acked,
            }
        }
        if try_read_reply(&mut stream).is_none() {
            return acked;
        }
        match try_read_reply(&mut stream) {
            Some(reply) => {
                acked.counter = integer(&reply);
            }
            None => return acked,
        }
        if try_read_reply(&mut stream).is_none() {
            return acked;
        }
        acked.hash_rounds += 1;
        match try_read_reply(&mut stream) {
            Some(reply) => acked.hash_counter = integer(&reply),
            None => return acked,
        }
        match try_read_reply(&mut stream) {
            Some(reply) if reply == b":1\r\n" => acked.zset_rounds += 1,
            Some(reply) => panic!("unexpected ZADD reply {:?}", String::from_utf8_lossy(&reply)),
            None => return acked,
        }
        match try_read_reply(&mut stream) {
            Some(reply) if reply == b":1\r\n" => acked.geo_rounds += 1,
            Some(reply) => panic!("unexpected GEOADD reply {:?}", String::from_utf8_lossy(&reply)),
            None => return acked,
        }
        match try_read_reply(&mut stream) {
            Some(reply) => acked.shared_counter = integer(&reply),
            None => return acked,
        }
        match try_read_reply(&mut stream) {
            Some(reply) => acked.pushed.push((integer(&reply), element)),
            None => return acked,
        }
        seq += PIPELINE as u64;
    }
    acked
}

/// Loads a new library and replaces the shared one per round until the
/// server dies: how many rounds were acknowledged.
fn function_loader(port: u16, iteration: usize, stop: Arc<AtomicBool>) -> u64 {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return 0 };
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut rounds = 0;
    while !stop.load(Ordering::Relaxed) {
        let round = rounds;
        let new = format!("#!lua name=l{iteration}_{round}\nredis.register_function('f{iteration}_{round}', function() return {round} end)");
        let replaced = format!(
            "#!lua name=shared\nredis.register_function('version', function() return {} end)",
            version(iteration, round)
        );
        let mut request = encode(&[b"FUNCTION", b"LOAD", new.as_bytes()]);
        request.extend(encode(&[b"FUNCTION", b"LOAD", b"REPLACE", replaced.as_bytes()]));
        if stream.write_all(&request).is_err() {
            return rounds;
        }
        for expected in [format!("l{iteration}_{round}"), "shared".to_string()] {
            match try_read_reply(&mut stream) {
                Some(reply) if reply == bulk(expected.as_bytes()) => {}
                Some(reply) => panic!("unexpected FUNCTION LOAD reply {:?}", String::from_utf8_lossy(&reply)),
                None => return rounds,
            }
        }
        rounds += 1;
        std::thread::sleep(Duration::from_millis(5));
    }
    rounds
}

/// What the shared library's function returns after `round` of life
/// `iteration`: increasing across lives.
fn version(iteration: usize, round: u64) -> u64 {
    iteration as u64 * 1_000_000 + round
}

/// Every acknowledged library of `loads` (rounds per life) answers, and the
/// shared one is at least the last acknowledged version (one unacknowledged
/// round more may have landed).
fn check_functions(server: &Server, loads: &[u64]) {
    let mut stream = server.connect();
    for (iteration, &rounds) in loads.iter().enumerate() {
        for round in 0..rounds {
            let name = format!("f{iteration}_{round}");
            let reply = common::request(&mut stream, &encode(&[b"FCALL", name.as_bytes(), b"0"]));
            assert_eq!(String::from_utf8_lossy(&reply), format!(":{round}\r\n"), "library of {name} lost");
        }
    }
    let acked = loads.iter().enumerate().rev().find(|(_, &rounds)| rounds > 0);
    if let Some((iteration, &rounds)) = acked {
        let reply = common::request(&mut stream, &encode(&[b"FCALL", b"version", b"0"]));
        let found = integer(&reply) as u64;
        let low = version(iteration, rounds - 1);
        let newer_life = found / 1_000_000 > iteration as u64;
        assert!(found >= low && (found <= low + 1 || newer_life), "shared library at {found}, acknowledged {low}");
    }
}

/// Round `seq`'s point, all over the globe: longitude and latitude text.
fn place(seq: u64) -> (String, String) {
    let lon = (seq % 3600) as f64 / 10.0 - 179.9876;
    let lat = (seq * 7 % 1700) as f64 / 20.0 - 84.9876;
    (format!("{lon:.4}"), format!("{lat:.4}"))
}

fn place_name(seq: u64) -> String {
    format!("p{seq}")
}

/// GEOPOS's reply for round `seq`'s point: its 52-bit cell's centre, as
/// Redis 7.0 prints it (17 decimals, trailing zeros cut).
fn geopos(seq: u64) -> Vec<u8> {
    let (lon, lat) = place(seq);
    let score = geohash(lon.parse().unwrap(), lat.parse().unwrap());
    let (lon, lat) = cell_centre(score);
    let mut reply = b"*2\r\n".to_vec();
    for x in [lon, lat] {
        let text = format!("{x:.17}");
        reply.extend(bulk(text.trim_end_matches('0').trim_end_matches('.').as_bytes()));
    }
    reply
}

/// The 26 bits of each coordinate, interleaved (latitude's at even
/// places), over Redis's latitude range: written out here rather than
/// borrowed from the server, so that the test checks it.
fn geohash(lon: f64, lat: f64) -> u64 {
    let lat_cell = ((lat + 85.05112878) / (85.05112878 * 2.0) * (1u64 << 26) as f64) as u64;
    let lon_cell = ((lon + 180.0) / 360.0 * (1u64 << 26) as f64) as u64;
    (0..26).fold(0, |bits, i| bits | ((lat_cell >> i) & 1) << (2 * i) | ((lon_cell >> i) & 1) << (2 * i + 1))
}

fn cell_centre(bits: u64) -> (f64, f64) {
    let (lat_cell, lon_cell) = (0..26).fold((0u64, 0u64), |(lat, lon), i| {
        (lat | ((bits >> (2 * i)) & 1) << i, lon | ((bits >> (2 * i + 1)) & 1) << i)
    });
    let cells = (1u64 << 26) as f64;
    let span = |cell: u64, min: f64, max: f64| {
        let (low, high) = (min + (cell as f64 / cells) * (max - min), min + ((cell + 1) as f64 / cells) * (max - min));
        (low + high) / 2.0
    };
    (span(lon_cell, -180.0, 180.0), span(lat_cell, -85.05112878, 85.05112878))
}

fn integer(reply: &[u8]) -> i64 {
    let text = String::from_utf8_lossy(reply);
    text.trim_start_matches(':').trim().parse().unwrap_or_else(|_| panic!("not an integer reply: {text:?}"))
}

fn get(stream: &mut TcpStream, key: &str) -> Vec<u8> {
    common::request(stream, &encode(&[b"GET", key.as_bytes()]))
}

fn bulk(data: &[u8]) -> Vec<u8> {
    let mut out = format!("${}\r\n", data.len()).into_bytes();
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
    out
}

#[test]
fn acknowledged_writes_survive_sigkill() {
    let iterations = common::crash_iterations(5);
    let mut rng = common::crash_rng("server crash test", iterations);
    // The real disk (the temp dir's file system), as a user would run it,
    // where each write waits to share an fdatasync; and tmpfs, where writes
    // commit without gathering.
    for base in [env!("CARGO_TARGET_TMPDIR"), "/dev/shm"] {
        kill_loop(base, iterations, &mut rng);
    }
}

fn kill_loop(base: &str, iterations: usize, rng: &mut impl Rng) {
    let dir = tempfile::tempdir_in(base).unwrap();
    let path = dir.path().join("db");
    let mut history: Vec<Vec<Acked>> = Vec::new();
    let mut loads = Vec::new();
    let (mut total_acked, mut total_hsets) = (0, 0);
    for iteration in 0..iterations {
        let mut server = Server::start(&path, &["--durability", "sync"]);
        // Everything acknowledged in earlier lives is still there.
        let _ = check(&server, &history);
        check_functions(&server, &loads);
        let stop = Arc::new(AtomicBool::new(false));
        let writers: Vec<_> = (0..THREADS)
            .map(|thread| {
                let (port, stop) = (server.port, stop.clone());
                std::thread::spawn(move || writer(port, iteration, thread, stop))
            })
            .collect();
        let loader = {
            let (port, stop) = (server.port, stop.clone());
            std::thread::spawn(move || function_loader(port, iteration, stop))
        };
        std::thread::sleep(Duration::from_millis(rng.gen_range(100..600)));
        server.kill();
        stop.store(true, Ordering::Relaxed);
        let acked: Vec<Acked> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        loads.push(loader.join().unwrap());
        total_acked += acked.iter().map(|a| a.sets).sum::<u64>();
        total_hsets += acked.iter().map(|a| a.hash_rounds).sum::<u64>();
        history.push(acked);
    }
    let server = Server::start(&path, &[]);
    let zadds = check(&server, &history);
    check_functions(&server, &loads);
    let libraries: u64 = loads.iter().sum();
    let tables = history.iter().flatten().filter(|acked| acked.zset_rounds > 250).count();
    let pushes: usize = history.iter().flatten().map(|acked| acked.pushed.len()).sum();
    eprintln!(
        "server crash test in {base}: {total_acked} acknowledged SETs, {total_hsets} HSETs, {zadds} ZADDs \
         ({tables} sorted sets grown into tables), {pushes} RPUSHes to a shared list and {libraries} \
         function libraries checked after {iterations} kills"
    );
    assert!(total_acked > 0, "the writers never got an acknowledgement");
}

/// Checks every acknowledged write of `history`; returns how many ZADDs.
fn check(server: &Server, history: &[Vec<Acked>]) -> u64 {
    let mut zsets_checked = 0;
    let mut stream = server.connect();
    // Pipelined: hundreds of thousands of keys after a few lives on tmpfs.
    let sets: Vec<(usize, usize, u64)> = history
        .iter()
        .enumerate()
        .flat_map(|(iteration, acked)| {
            acked
                .iter()
                .enumerate()
                .flat_map(move |(thread, acked)| (0..acked.sets).map(move |seq| (iteration, thread, seq)))
        })
        .collect();
    for chunk in sets.chunks(256) {
        let keys: Vec<String> =
            chunk.iter().map(|(iteration, thread, seq)| format!("i{iteration}:t{thread}:{seq}")).collect();
        let request: Vec<u8> = keys.iter().flat_map(|key| encode(&[b"GET", key.as_bytes()])).collect();
        stream.write_all(&request).unwrap();
        for (key, &(iteration, thread, seq)) in keys.iter().zip(chunk) {
            let reply = common::read_reply(&mut stream);
            assert_eq!(reply, bulk(&value(iteration, thread, seq)), "{key} lost or wrong");
        }
    }
    if let Some(last) = history.last() {
        for thread in 0..last.len() {
            // The counters live across lives: at least the highest reply
            // any life got, and at most one unacknowledged INCR more for
            // that life and for each later one (a life killed before its
            // first reply acknowledges nothing but may have applied one).
            let bounds = |reply_of: fn(&Acked) -> i64| {
                let lives = history.iter().map(|life| reply_of(&life[thread]));
                let (at, highest) =
                    lives.enumerate().fold((0, 0), |best, (i, n)| if n > best.1 { (i, n) } else { best });
                (highest, highest + (history.len() - at) as i64)
            };
            let reply = get(&mut stream, &format!("counter:t{thread}"));
            let counter: i64 = String::from_utf8_lossy(&reply).lines().nth(1).map_or(0, |v| v.parse().unwrap());
            let (low, high) = bounds(|acked| acked.counter);
            assert!((low..=high).contains(&counter), "counter {counter} outside {low}..={high}");
            let reply = common::request(&mut stream, &encode(&[b"HGET", format!("hcount:t{thread}").as_bytes(), b"n"]));
            let counter: i64 = String::from_utf8_lossy(&reply).lines().nth(1).map_or(0, |v| v.parse().unwrap());
            let (low, high) = bounds(|acked| acked.hash_counter);
            assert!((low..=high).contains(&counter), "HINCRBY {counter} outside {low}..={high}");
        }
    }
    for (iteration, acked) in history.iter().enumerate() {
        for (thread, acked) in acked.iter().enumerate() {
            let hash = format!("h:i{iteration}:t{thread}");
            if acked.hash_rounds == 0 {
                continue;
            }
            let seqs: Vec<String> = (0..acked.hash_rounds).map(|round| (round * PIPELINE as u64).to_string()).collect();
            let fields: Vec<String> = seqs.iter().map(|seq| format!("f{seq}")).collect();
            let mut hmget: Vec<&[u8]> = vec![b"HMGET", hash.as_bytes()];
            hmget.extend(fields.iter().map(String::as_bytes));
            let mut expected = format!("*{}\r\n", seqs.len()).into_bytes();
            for seq in &seqs {
                expected.extend(bulk(seq.as_bytes()));
            }
            assert_eq!(
                String::from_utf8_lossy(&common::request(&mut stream, &encode(&hmget))),
                String::from_utf8_lossy(&expected),
                "{hash}: an acknowledged HSET lost"
            );
            // Past 512 fields a hash is a table with an entry per field
            // (at 512 acknowledged, the HSET in flight may have made it one).
            let encoding = common::request(&mut stream, &encode(&[b"OBJECT", b"ENCODING", hash.as_bytes()]));
            let table = encoding.ends_with(b"hashtable\r\n");
            assert!(table || encoding.ends_with(b"listpack\r\n"), "{hash}");
            assert!(acked.hash_rounds == 512 || table == (acked.hash_rounds > 512), "{hash}: {acked:?}");
            // Every acknowledged ZADD, in score order (the one in flight
            // may follow them).
            let zset = format!("z:i{iteration}:t{thread}");
            let last = (acked.zset_rounds as i64 - 1).to_string();
            let range = common::request(
                &mut stream,
                &encode(&[b"ZRANGE", zset.as_bytes(), b"0", last.as_bytes(), b"WITHSCORES"]),
            );
            let mut expected = format!("*{}\r\n", acked.zset_rounds * 2).into_bytes();
            for round in 0..acked.zset_rounds {
                let seq = round * PIPELINE as u64;
                expected.extend(bulk(zset_member(seq).as_bytes()));
                expected.extend(bulk(seq.to_string().as_bytes()));
            }
            assert_eq!(
                String::from_utf8_lossy(&range),
                String::from_utf8_lossy(&expected),
                "{zset}: an acknowledged ZADD lost"
            );
            let card = integer(&common::request(&mut stream, &encode(&[b"ZCARD", zset.as_bytes()])));
            assert!(
                card as u64 == acked.zset_rounds || card as u64 == acked.zset_rounds + 1,
                "{zset}: {card} {acked:?}"
            );
            zsets_checked += acked.zset_rounds;
            // Every acknowledged GEOADD's point where it was put.
            let geo = format!("geo:i{iteration}:t{thread}");
            let names: Vec<String> = (0..acked.geo_rounds).map(|round| place_name(round * PIPELINE as u64)).collect();
            let mut command: Vec<&[u8]> = vec![b"GEOPOS", geo.as_bytes()];
            command.extend(names.iter().map(String::as_bytes));
            let mut expected = format!("*{}\r\n", names.len()).into_bytes();
            for round in 0..acked.geo_rounds {
                expected.extend(geopos(round * PIPELINE as u64));
            }
            if acked.geo_rounds > 0 {
                assert_eq!(
                    String::from_utf8_lossy(&common::request(&mut stream, &encode(&command))),
                    String::from_utf8_lossy(&expected),
                    "{geo}: an acknowledged GEOADD lost or moved"
                );
            }
            let card = integer(&common::request(&mut stream, &encode(&[b"ZCARD", geo.as_bytes()])));
            assert!(card as u64 == acked.geo_rounds || card as u64 == acked.geo_rounds + 1, "{geo}: {card} {acked:?}");
        }
    }

    // The shared keys: every acknowledged INCR counted, every acknowledged
    // RPUSH's element where its reply put it (the log keeps writes in the
    // order their locks passed them on, so none before it was lost).
    let all = history.iter().flatten();
    let highest = all.clone().map(|acked| acked.shared_counter).max().unwrap_or(0);
    let reply = get(&mut stream, "shared-counter");
    let counter: i64 = String::from_utf8_lossy(&reply).lines().nth(1).map_or(0, |v| v.parse().unwrap());
    assert!(counter >= highest, "shared counter {counter}, an INCR acknowledged {highest}");
    for (length, element) in all.flat_map(|acked| &acked.pushed) {
        let at = (length - 1).to_string();
        let reply = common::request(&mut stream, &encode(&[b"LINDEX", b"shared-list", at.as_bytes()]));
        assert_eq!(reply, bulk(element.as_bytes()), "shared-list[{at}] lost or moved");
    }
    for thread in 0..THREADS {
        let a = get(&mut stream, &format!("pair:t{thread}:a"));
        let b = get(&mut stream, &format!("pair:t{thread}:b"));
        assert_eq!(a, b, "MSET half applied for thread {thread}");
    }
    zsets_checked
}
