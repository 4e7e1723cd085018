//! Lua scripts through the server: atomic under concurrency (declared
//! keys, and keys a script does not declare), durable and all-or-nothing
//! across SIGKILL, stoppable by SCRIPT KILL with none of their writes
//! applied, sandboxed, inside MULTI/EXEC and WATCH, and no script body or
//! argument crashes the server (a proptest). Redis's own replies are
//! compared in `differential.rs`.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{encode, read_reply, request, try_read_reply, Server};
use proptest::prelude::*;

fn eval(stream: &mut TcpStream, args: &[&str]) -> Vec<u8> {
    let mut words: Vec<&[u8]> = vec![b"EVAL"];
    words.extend(args.iter().map(|a| a.as_bytes()));
    request(stream, &encode(&words))
}

fn command(stream: &mut TcpStream, args: &[&str]) -> Vec<u8> {
    let words: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    request(stream, &encode(&words))
}

fn text(reply: &[u8]) -> String {
    String::from_utf8_lossy(reply).into_owned()
}

/// A read-modify-write no command does alone: the count comes back exact
/// only if no two scripts interleave, whether a script declares its key
/// (its lock is taken before it runs) or names it only in ARGV (its lock
/// is taken when free, or the script runs again holding every lock).
#[test]
fn concurrent_scripts_are_atomic_with_and_without_declared_keys() {
    const THREADS: usize = 6;
    const ROUNDS: usize = 200;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &["--threads", "2"]);
    let declared = "local v = tonumber(redis.call('get', KEYS[1]) or '0'); \
                    redis.call('set', KEYS[1], v + 1); return v + 1";
    let undeclared = "local v = tonumber(redis.call('get', ARGV[1]) or '0'); \
                      redis.call('set', ARGV[1], v + 1); return v + 1";
    // Half the threads send one script at a time, half pipelines of 10
    // (which share one run of writes, and its locks, per pipeline).
    let threads: Vec<_> = (0..THREADS)
        .map(|thread| {
            let mut stream = server.connect();
            std::thread::spawn(move || {
                let pipeline = if thread < THREADS / 2 { 1 } else { 10 };
                for _ in 0..ROUNDS / pipeline {
                    let mut request = Vec::new();
                    for i in 0..pipeline {
                        let words: [&[u8]; 4] = if (thread + i) % 2 == 0 {
                            [b"EVAL", declared.as_bytes(), b"1", b"counter"]
                        } else {
                            [b"EVAL", undeclared.as_bytes(), b"0", b"counter"]
                        };
                        request.extend(encode(&words));
                    }
                    stream.write_all(&request).unwrap();
                    for _ in 0..pipeline {
                        let reply = read_reply(&mut stream);
                        assert!(reply.starts_with(b":"), "{}", text(&reply));
                    }
                }
            })
        })
        .collect();
    for thread in threads {
        thread.join().unwrap();
    }
    let mut stream = server.connect();
    let expected = (THREADS * ROUNDS).to_string();
    assert_eq!(command(&mut stream, &["GET", "counter"]), format!("${}\r\n{expected}\r\n", expected.len()).as_bytes());
    let info = text(&command(&mut stream, &["INFO", "stats"]));
    let reruns = info.lines().find_map(|l| l.strip_prefix("script_reruns_with_every_lock:")).unwrap();
    eprintln!("{} scripts run again holding every lock", reruns.trim());
}

/// What one client saw acknowledged before the server died.
#[derive(Default)]
struct Transfers {
    /// Transfers 0..acked were acknowledged.
    acked: u64,
}

const ACCOUNTS: usize = 8;
const OPENING: i64 = 1000;

/// Moves money between two of the shared accounts and notes the transfer
/// in the client's journal, all in one script: a crash keeps all three
/// writes or none.
const TRANSFER: &str = "
local from = tonumber(redis.call('get', KEYS[1]) or ARGV[3])
local to = tonumber(redis.call('get', KEYS[2]) or ARGV[3])
local amount = tonumber(ARGV[1])
redis.call('set', KEYS[1], from - amount)
redis.call('set', KEYS[2], to + amount)
redis.call('rpush', KEYS[3], ARGV[2])
return from - amount";

fn transfer_client(port: u16, client: usize, life: usize, stop: Arc<AtomicBool>) -> Transfers {
    let mut done = Transfers::default();
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return done };
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut seq = 0u64;
    while !stop.load(Ordering::Relaxed) {
        let from = (seq as usize * 3 + client) % ACCOUNTS;
        let to = (from + 1 + (seq as usize + client) % (ACCOUNTS - 1)) % ACCOUNTS;
        let (from, to) = (format!("account:{from}"), format!("account:{to}"));
        let journal = format!("journal:{client}");
        let id = format!("{life}:{seq}");
        let amount = (1 + seq % 50).to_string();
        let opening = OPENING.to_string();
        let words: Vec<&[u8]> = [
            "EVAL",
            TRANSFER,
            "3",
            from.as_str(),
            to.as_str(),
            journal.as_str(),
            amount.as_str(),
            id.as_str(),
            opening.as_str(),
        ]
        .iter()
        .map(|w| w.as_bytes())
        .collect();
        if stream.write_all(&encode(&words)).is_err() {
            break;
        }
        match try_read_reply(&mut stream) {
            Some(reply) if reply.starts_with(b":") => done.acked = seq + 1,
            _ => break,
        }
        seq += 1;
    }
    done
}

/// SIGKILLed while clients run transfer scripts, restarted: the accounts
/// still sum to what they opened with (no script half applied), and every
/// acknowledged transfer is in its client's journal, in order, with at
/// most the one in flight after it. `SCALEDKV_SCRIPT_CRASH_ITERATIONS`
/// (default 3) sets the number of kills.
#[test]
fn a_scripts_writes_survive_sigkill_together_or_not_at_all() {
    const CLIENTS: usize = 4;
    let iterations: usize =
        std::env::var("SCALEDKV_SCRIPT_CRASH_ITERATIONS").ok().and_then(|v| v.parse().ok()).unwrap_or(3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    // Per client, per life: how many transfers were acknowledged.
    let mut acked: Vec<Vec<u64>> = vec![Vec::new(); CLIENTS];
    for life in 0..iterations {
        let mut server = Server::start(&path, &["--durability", "sync"]);
        let stop = Arc::new(AtomicBool::new(false));
        let clients: Vec<_> = (0..CLIENTS)
            .map(|client| {
                let (port, stop) = (server.port, stop.clone());
                std::thread::spawn(move || transfer_client(port, client, life, stop))
            })
            .collect();
        std::thread::sleep(Duration::from_millis(300 + 150 * life as u64));
        server.kill();
        stop.store(true, Ordering::Relaxed);
        for (client, done) in clients.into_iter().map(|c| c.join().unwrap()).enumerate() {
            acked[client].push(done.acked);
        }
    }
    let server = Server::start(&path, &[]);
    let mut stream = server.connect();
    let mut sum = 0i64;
    for account in 0..ACCOUNTS {
        let reply = command(&mut stream, &["GET", &format!("account:{account}")]);
        sum += text(&reply).lines().nth(1).map_or(OPENING, |v| v.parse().unwrap());
    }
    assert_eq!(sum, OPENING * ACCOUNTS as i64, "a transfer was half applied");
    let mut total = 0;
    for (client, lives) in acked.iter().enumerate() {
        let reply = command(&mut stream, &["LRANGE", &format!("journal:{client}"), "0", "-1"]);
        let journal: Vec<String> = text(&reply).lines().skip(2).step_by(2).map(str::to_string).collect();
        // Each life's acknowledged transfers in order, then at most the
        // one in flight when the server died.
        let mut expected = Vec::new();
        for (life, &count) in lives.iter().enumerate() {
            expected.extend((0..count).map(|seq| format!("{life}:{seq}")));
            let in_flight = format!("{life}:{count}");
            if journal.get(expected.len()) == Some(&in_flight) {
                expected.push(in_flight);
            }
            total += count;
        }
        assert_eq!(journal, expected, "client {client}: journal against acknowledgements {lives:?}");
    }
    eprintln!("script crash test: {total} acknowledged transfer scripts checked after {iterations} kills");
    assert!(total > 0, "no transfer was acknowledged");
}

/// A script that runs past `busy-reply-threshold` is stopped by SCRIPT
/// KILL from another client: its caller gets Redis's error, none of its
/// writes apply (Redis would refuse to kill a script that wrote), and a
/// client waiting for a key it locked goes on. Other clients are served
/// meanwhile (the I/O thread hands its connections over).
#[test]
fn script_kill_stops_a_busy_script_and_applies_none_of_its_writes() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &["--threads", "1", "--busy-reply-threshold", "100"]);
    let mut admin = server.connect();
    assert_eq!(command(&mut admin, &["SCRIPT", "KILL"]), b"-NOTBUSY No scripts in execution right now.\r\n");
    assert_eq!(
        command(&mut admin, &["CONFIG", "GET", "busy-reply-threshold"]),
        b"*2\r\n$20\r\nbusy-reply-threshold\r\n$3\r\n100\r\n"
    );
    assert_eq!(command(&mut admin, &["SET", "other", "v"]), b"+OK\r\n");
    let mut busy = server.connect();
    busy.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let script = "redis.call('set', KEYS[1], 'from the script'); while true do end";
    busy.write_all(&encode(&[b"EVAL", script.as_bytes(), b"1", b"w"])).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    // A writer of the script's key waits for its lock.
    let mut waiter = server.connect();
    waiter.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    waiter.write_all(&encode(&[b"SET", b"w", b"from the waiter"])).unwrap();
    // Others are served while it runs.
    let started = Instant::now();
    assert_eq!(command(&mut admin, &["GET", "other"]), b"$1\r\nv\r\n");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert_eq!(command(&mut admin, &["SCRIPT", "KILL"]), b"+OK\r\n");
    let reply = text(&read_reply(&mut busy));
    assert!(reply.starts_with("-ERR Script killed by user with SCRIPT KILL... script: "), "{reply}");
    assert_eq!(read_reply(&mut waiter), b"+OK\r\n");
    assert_eq!(command(&mut admin, &["GET", "w"]), b"$15\r\nfrom the waiter\r\n");
    assert_eq!(eval(&mut busy, &["return redis.call('get', 'w')", "0"]), b"$15\r\nfrom the waiter\r\n");
    assert_eq!(command(&mut admin, &["SCRIPT", "KILL"]), b"-NOTBUSY No scripts in execution right now.\r\n");
}

/// A library function that runs past `busy-reply-threshold`: FUNCTION
/// STATS shows it (name, the FCALL, how long), SCRIPT KILL refuses it with
/// Redis's error, FUNCTION KILL stops it with none of its writes applied;
/// and while a script is busy, FUNCTION KILL and STATS refuse it.
#[test]
fn function_kill_stops_a_busy_function_and_script_kill_does_not() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &["--threads", "1", "--busy-reply-threshold", "100"]);
    let mut admin = server.connect();
    let code = "#!lua name=spin\nredis.register_function('spin', function(keys, args) \
                redis.call('set', keys[1], 'from the function'); while true do end end)";
    assert_eq!(command(&mut admin, &["FUNCTION", "LOAD", code]), b"$4\r\nspin\r\n");
    assert_eq!(command(&mut admin, &["FUNCTION", "KILL"]), b"-NOTBUSY No scripts in execution right now.\r\n");
    let memory = text(&command(&mut admin, &["INFO", "memory"]));
    assert!(memory.contains("\r\nnumber_of_functions:1\r\nnumber_of_libraries:1\r\n"), "{memory}");
    let mut busy = server.connect();
    busy.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    busy.write_all(&encode(&[b"FCALL", b"SPIN", b"1", b"w", b"arg"])).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let stats = text(&command(&mut admin, &["FUNCTION", "STATS"]));
    let expected = "*4\r\n$14\r\nrunning_script\r\n*6\r\n$4\r\nname\r\n$4\r\nspin\r\n$7\r\ncommand\r\n*5\r\n\
                    $5\r\nFCALL\r\n$4\r\nSPIN\r\n$1\r\n1\r\n$1\r\nw\r\n$3\r\narg\r\n$11\r\nduration_ms\r\n:";
    assert!(stats.starts_with(expected), "{stats}");
    let millis: u64 = stats[expected.len()..].split("\r\n").next().unwrap().parse().unwrap();
    assert!(millis >= 300, "ran {millis} ms");
    assert!(stats.ends_with(
        "$7\r\nengines\r\n*2\r\n$3\r\nLUA\r\n*4\r\n$15\r\nlibraries_count\r\n:1\r\n$15\r\nfunctions_count\r\n:1\r\n"
    ));
    assert_eq!(
        text(&command(&mut admin, &["SCRIPT", "KILL"])),
        "-BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.\r\n"
    );
    assert_eq!(command(&mut admin, &["FUNCTION", "KILL"]), b"+OK\r\n");
    let reply = text(&read_reply(&mut busy));
    assert_eq!(reply, "-ERR Script killed by user with SCRIPT KILL... script: spin, on @user_function:2.\r\n");
    assert_eq!(command(&mut admin, &["EXISTS", "w"]), b":0\r\n");
    assert!(text(&command(&mut admin, &["FUNCTION", "STATS"])).starts_with("*4\r\n$14\r\nrunning_script\r\n$-1\r\n"));
    // A busy script: FUNCTION KILL and STATS point at SCRIPT KILL.
    busy.write_all(&encode(&[b"EVAL", b"while true do end", b"0"])).unwrap();
    std::thread::sleep(Duration::from_millis(400));
    let refused = "-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n";
    assert_eq!(text(&command(&mut admin, &["FUNCTION", "KILL"])), refused);
    assert_eq!(text(&command(&mut admin, &["FUNCTION", "STATS"])), refused);
    assert_eq!(command(&mut admin, &["SCRIPT", "KILL"]), b"+OK\r\n");
    assert!(text(&read_reply(&mut busy)).starts_with("-ERR Script killed by user with SCRIPT KILL..."));
}

/// What a script cannot do: change what the next script runs with, reach
/// files or the OS, or take the server down by allocating without end.
#[test]
fn scripts_cannot_break_the_sandbox_or_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]);
    let mut stream = server.connect();
    stream.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
    assert_eq!(command(&mut stream, &["CONFIG", "SET", "script-memory-limit", "64mb"]), b"+OK\r\n");
    for (script, error) in [
        ("x = 1", "Attempt to modify a readonly table"),
        ("redis.call = nil", "Attempt to modify a readonly table"),
        ("string.rep = nil", "Attempt to modify a readonly table"),
        ("rawset(_G, 'x', 1)", "Attempt to modify a readonly table"),
        ("rawset(string, 'x', 1)", "Attempt to modify a readonly table"),
        ("setmetatable(_G, {})", "cannot change a protected metatable"),
        ("getmetatable('').__index.rep = nil", "attempt to index a boolean value"),
        ("loadstring('y = 1')()", "Attempt to modify a readonly table"),
        ("return io.open('/etc/passwd')", "nonexistent global variable 'io'"),
        ("return os.execute('true')", "nonexistent global variable 'os'"),
        ("return require('os')", "nonexistent global variable 'require'"),
        ("return string.rep('x', 2^27)", "not enough memory"),
        ("local t = {} while true do t[#t + 1] = string.rep('x', 2^20) .. #t end", "not enough memory"),
    ] {
        let reply = text(&eval(&mut stream, &[script, "0"]));
        assert!(reply.starts_with('-') && reply.contains(error), "{script}: {reply}");
    }
    // Nothing of the above stuck.
    assert_eq!(
        eval(&mut stream, &["return {type(rawget(_G, 'x')), string.rep('ab', 2)}", "0"]),
        b"*2\r\n$3\r\nnil\r\n$4\r\nabab\r\n"
    );
    assert_eq!(command(&mut stream, &["PING"]), b"+PONG\r\n");
}

/// Scripts in transactions: queued by MULTI, run by EXEC with the other
/// commands' writes visible to them; a key a script changes fails the
/// EXEC of a client that WATCHed it.
#[test]
fn scripts_join_transactions_and_trip_watch() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]);
    let mut a = server.connect();
    let mut b = server.connect();
    assert_eq!(command(&mut a, &["MULTI"]), b"+OK\r\n");
    assert_eq!(command(&mut a, &["SET", "k", "41"]), b"+QUEUED\r\n");
    assert_eq!(eval(&mut a, &["return redis.call('incr', KEYS[1])", "1", "k"]), b"+QUEUED\r\n");
    assert_eq!(eval(&mut a, &["return redis.call('incr', 'nonnumeric')", "0"]), b"+QUEUED\r\n");
    let reply = text(&command(&mut a, &["EXEC"]));
    assert!(reply.starts_with("*3\r\n+OK\r\n:42\r\n:1\r\n"), "{reply}");
    assert_eq!(command(&mut a, &["WATCH", "k"]), b"+OK\r\n");
    assert_eq!(eval(&mut b, &["return redis.call('set', KEYS[1], 'changed')", "1", "k"]), b"+OK\r\n");
    assert_eq!(command(&mut a, &["MULTI"]), b"+OK\r\n");
    assert_eq!(command(&mut a, &["SET", "k", "mine"]), b"+QUEUED\r\n");
    assert_eq!(command(&mut a, &["EXEC"]), b"*-1\r\n");
    assert_eq!(command(&mut a, &["GET", "k"]), b"$7\r\nchanged\r\n");
}

/// Script bodies: Lua-ish token soup and raw bytes.
fn script_body() -> impl Strategy<Value = Vec<u8>> {
    let token = prop_oneof![
        Just("return "),
        Just("redis.call("),
        Just("redis.pcall("),
        Just("'set'"),
        Just("'get'"),
        Just("'incr'"),
        Just("'lpush'"),
        Just("'hgetall'"),
        Just("KEYS[1]"),
        Just("ARGV[1]"),
        Just(", "),
        Just(")"),
        Just("{"),
        Just("}"),
        Just("nil"),
        Just("true"),
        Just("1.5"),
        Just("-7"),
        Just("error("),
        Just("cjson.decode("),
        Just("cjson.encode("),
        Just("redis.setresp(3) "),
        Just("local x = "),
        Just("x"),
        Just(" end "),
        Just("while false do "),
        Just("#!lua flags=no-writes\n"),
        Just("{err="),
        Just("{ok="),
        Just("{double="),
        Just("{map="),
    ];
    prop_oneof![
        prop::collection::vec(token, 1..14).prop_map(|tokens| tokens.concat().into_bytes()),
        prop::collection::vec(any::<u8>(), 0..64),
    ]
}

/// No script body, key count or argument gets anything but a well-formed
/// reply, and the server answers PING after each.
#[test]
fn no_script_or_argument_crashes_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]);
    let stream = std::cell::RefCell::new(server.connect());
    let config = proptest::test_runner::Config { cases: 300, failure_persistence: None, ..Default::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let strategy = (
        script_body(),
        prop_oneof![
            Just(b"0".to_vec()),
            Just(b"1".to_vec()),
            Just(b"-1".to_vec()),
            Just(b"9".to_vec()),
            any::<[u8; 2]>().prop_map(|b| b.to_vec())
        ],
        prop::collection::vec(prop::collection::vec(any::<u8>(), 0..8), 0..3),
    );
    runner
        .run(&strategy, |(body, numkeys, rest)| {
            let mut words: Vec<&[u8]> = vec![b"EVAL", &body, &numkeys];
            words.extend(rest.iter().map(Vec::as_slice));
            let mut stream = stream.borrow_mut();
            let reply = request(&mut *stream, &encode(&words));
            prop_assert!(!reply.is_empty());
            prop_assert_eq!(request(&mut *stream, b"PING\r\n"), b"+PONG\r\n".to_vec());
            Ok(())
        })
        .unwrap();
}

/// The text of a RESP2 pub/sub `message` array's payload.
fn payload(message: &[u8]) -> String {
    let text = text(message);
    assert!(text.starts_with("*3\r\n$7\r\nmessage\r\n"), "{text}");
    text.lines().last().unwrap().to_string()
}

fn subscriber(server: &Server, channel: &str) -> TcpStream {
    let mut stream = server.connect();
    let reply = command(&mut stream, &["SUBSCRIBE", channel]);
    assert!(text(&reply).contains("subscribe"), "{}", text(&reply));
    stream
}

/// A script's (and a transaction's) PUBLISH goes out once its writes are
/// visible: a subscriber that reads the key on each message finds at
/// least the value the message names, as with Redis, which runs the
/// whole script before serving the subscriber's read. (Values of 512 KiB
/// make each commit slow enough on the disk for a message sent before it
/// to be caught: without the hold, this failed in 3 of 3 runs.)
#[test]
fn a_subscriber_reads_what_a_script_or_transaction_published_about() {
    const ROUNDS: usize = 60;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &["--threads", "2"]);
    let mut listener = subscriber(&server, "jobs");
    let mut reader = server.connect();
    let mut writer = server.connect();
    let script = "redis.call('set', KEYS[1], ARGV[1]); return redis.call('publish', 'jobs', string.sub(ARGV[1], 1, 8))";
    // Sent all at once: the writer does not wait for its replies.
    let mut request = Vec::new();
    for round in 1..=ROUNDS {
        let mut value = format!("{round:08}").into_bytes();
        value.resize(512 << 10, b'.');
        if round % 2 == 0 {
            request.extend(encode(&[b"EVAL", script.as_bytes(), b"1", b"job", &value]));
        } else {
            request.extend(encode(&[b"MULTI"]));
            request.extend(encode(&[b"SET", b"job", &value]));
            request.extend(encode(&[b"PUBLISH", b"jobs", &value[..8]]));
            request.extend(encode(&[b"EXEC"]));
        }
    }
    let writing = std::thread::spawn(move || {
        writer.write_all(&request).unwrap();
        writer
    });
    for round in 1..=ROUNDS {
        let announced: usize = payload(&read_reply(&mut listener)).parse().unwrap();
        assert_eq!(announced, round, "messages in order");
        let reply = command(&mut reader, &["GETRANGE", "job", "0", "7"]);
        let seen: usize = text(&reply).lines().nth(1).unwrap().parse().unwrap();
        assert!(seen >= announced, "message {announced} arrived before its write (GET saw {seen})");
    }
    drop(writing.join().unwrap());
}

/// A script that touches a key it did not declare while another script
/// holds that key's lock is run again holding every lock: its PUBLISH,
/// held with its writes, goes out once, and a killed script's not at all.
#[test]
fn a_script_run_again_publishes_once_and_a_killed_one_never() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &["--threads", "1", "--busy-reply-threshold", "100"]);
    let mut listener = subscriber(&server, "ch");
    listener.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let mut busy = server.connect();
    busy.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let looping =
        "redis.call('publish', 'ch', 'from the killed script'); redis.call('set', KEYS[1], 'b'); while true do end";
    busy.write_all(&encode(&[b"EVAL", looping.as_bytes(), b"1", b"x"])).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut undeclared = server.connect();
    undeclared.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let script = "redis.call('publish', 'ch', 'once'); redis.call('set', ARGV[1], 'c'); return 1";
    undeclared.write_all(&encode(&[b"EVAL", script.as_bytes(), b"0", b"x"])).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut admin = server.connect();
    assert_eq!(command(&mut admin, &["SCRIPT", "KILL"]), b"+OK\r\n");
    assert!(text(&read_reply(&mut busy)).starts_with("-ERR Script killed"));
    assert_eq!(read_reply(&mut undeclared), b":1\r\n");
    assert_eq!(payload(&read_reply(&mut listener)), "once");
    listener.set_read_timeout(Some(Duration::from_millis(300))).unwrap();
    assert!(try_read_reply(&mut listener).is_none(), "a second message");
    assert_eq!(command(&mut admin, &["GET", "x"]), b"$1\r\nc\r\n");
    let info = text(&command(&mut admin, &["INFO", "stats"]));
    assert!(info.contains("script_reruns_with_every_lock:1\r\n"), "{info}");
}
