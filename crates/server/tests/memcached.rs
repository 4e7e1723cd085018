//! The memcached protocol (`--memcached-port`): the same byte scripts go
//! to ScaledKV and to a real `memcached` (Debian's 1.6.18, started here on
//! a free loopback port) and the replies must match byte for byte, CAS
//! values aside, for the text commands and the meta commands (but the
//! flags ScaledKV refuses, and `k` with a base64 key, which memcached
//! returns by how the item was stored); libmemcached's `memccapable` conformance suite passes;
//! CAS, expiry, flags, noreply, limits, authentication and the shared
//! keyspace with the Redis protocol behave as a memcached user expects;
//! and acknowledged memcached writes survive SIGKILL. Tests that need
//! `memcached` or `memccapable` skip with a notice when absent; `.ci/run`
//! installs them.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::{encode, read_memcached_until, request, start_with_memcached, MemcachedServer};

/// Each script runs after a `flush_all` on its own connection; its replies
/// are read up to the `MN` of a final `mn` (or to the close after `quit`).
/// Expiry is only ever in the past here, so timing cannot tell the two
/// servers apart.
const SCRIPTS: &[&[u8]] = &[
    // Lines, words, unknown commands.
    b"\r\nget\r\nFOO\r\nGET a\r\nversion\r\nverbosity\r\nverbosity 1\r\nverbosity x\r\nverbosity 1 noreply\r\nverbosity noreply\r\n",
    b"set  a  0  0  1\r\ny\r\nget  a \r\nset a 0 0 01\r\nz\r\nset a 0 0 +1\r\nw\r\nget a\r\nset a 0 +5 1\r\nv\r\nget a\r\n",
    b"set a 0 0 1\nx\r\nget a\n",
    // Storage commands and their refusals.
    b"set a 0 0 1\r\nx\r\nget a b\r\ngets a\r\nset b 7 0 0\r\n\r\nget a b\r\n",
    b"set a 0 0 2\r\nxyz\r\nget a\r\nset a 0 0 1\r\nxy\r\nget a\r\n",
    b"set a x 0 1\r\nx\r\nset a -1 0 1\r\nx\r\nset a 0 0 -1\r\nx\r\nset a 0 0\r\nset a 0 0 1 2 3\r\nx\r\n",
    b"set a 4294967296 0 1\r\nx\r\nget a\r\nset a 18446744073709551616 0 1\r\nx\r\nset a 4294967295 0 1\r\nx\r\nget a\r\n",
    b"set a 0 0 1 noreply\r\nx\r\nget a\r\nset a x 0 1 noreply\r\nx\r\nset a 0 0 1 noreply\r\nxy\r\nget a\r\n",
    b"add a 0 0 1\r\nx\r\nadd a 0 0 1\r\ny\r\nreplace zz 0 0 1\r\nx\r\nreplace a 3 0 1\r\nr\r\nget a\r\n",
    b"append zz 0 0 1\r\nx\r\nprepend zz 0 0 1\r\nx\r\nset a 5 0 1\r\nx\r\nprepend a 9 0 1\r\np\r\nappend a 0 0 2\r\nqq\r\nget a\r\n",
    b"cas zz 0 0 1 1\r\nz\r\nset a 0 0 1\r\nx\r\ncas a 0 0 1 999\r\nz\r\ncas a 0 0 1\r\nz\r\ncas a 0 0 1 x\r\nz\r\ncas a 0 0 1 1 noreply\r\nz\r\nget a\r\n",
    // Keys: the longest, one too long, control bytes.
    b"set kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk 0 0 1\r\nx\r\nget kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkk\r\n",
    b"set kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkx 0 0 1\r\nx\r\ndelete kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkx\r\n",
    b"set k\x01\x7f 0 0 1\r\nx\r\nget k\x01\x7f\r\n",
    // Retrieval of many keys.
    b"set a 0 0 1\r\n1\r\nset c 0 0 1\r\n3\r\nget a b c d e f g h i j k l m n o p q r s t u v w x y z aa bb cc dd a\r\ngets\r\n",
    // delete.
    b"set a 0 0 1\r\nx\r\ndelete a 0\r\ndelete a 1\r\ndelete a noreply\r\ndelete a\r\ndelete\r\ndelete a 0 noreply\r\ndelete a b c d\r\ndelete a noreply noreply\r\n",
    b"set noreply 0 0 1\r\nx\r\ndelete noreply\r\ndelete noreply\r\n",
    // incr and decr.
    b"set n 0 0 3\r\n100\r\ndecr n 95\r\nget n\r\nincr n 18446744073709551615\r\nincr n x\r\nincr n -1\r\nincr\r\nincr nx 1\r\nincr n 1 2\r\nincr n 1 2 3\r\n",
    b"set n 0 0 3\r\n1ab\r\nincr n 1\r\nset e 0 0 0\r\n\r\nincr e 1\r\nset s 0 0 3\r\n 12\r\nincr s 1\r\nset m 0 0 2\r\n-0\r\nincr m 1\r\n",
    // No get of a key before its incr/decr in one script: memcached pads a
    // shorter number in place only while nobody else holds the item, and a
    // pipelined get's reply may still hold it (then memcached stores the
    // number unpadded, depending on where its reads split the script).
    b"set n 7 0 2\r\n99\r\nincr n 1\r\ndecr n 1000\r\nget n\r\n",
    b"set n 7 0 3\r\n0  \r\nset q 0 0 21\r\n123456789012345678901\r\nincr q 1\r\nincr n noreply\r\nincr noreply\r\nincr n 5 noreply\r\nget n\r\n",
    b"set n 0 0 20\r\n18446744073709551615\r\nincr n 2\r\nget n\r\ndecr n 1\r\n",
    // touch, gat and expiry in the past.
    b"set a 0 0 1\r\nx\r\ntouch a 10\r\ntouch zz 10\r\ntouch a\r\ntouch a x\r\ntouch a noreply\r\ntouch a -1\r\nget a\r\n",
    b"set t 0 -1 1\r\nx\r\nget t\r\nadd t 0 0 1\r\ny\r\nget t\r\nset p 0 100000000 1\r\nx\r\nget p\r\nset p3 0 2592001 1\r\nx\r\nget p3\r\n",
    b"set u 0 100 1\r\nx\r\ngat 0 u\r\ngats 10 u zz\r\ngat x u\r\ngat 10\r\ngat\r\ngat -1 u\r\nget u\r\n",
    // flush_all and friends.
    b"set a 0 0 1\r\nx\r\nflush_all\r\nget a\r\nflush_all 0\r\nflush_all x\r\nflush_all noreply\r\nflush_all 0 noreply\r\nflush_all 1 2 3\r\n",
    b"shutdown\r\ncache_memlimit 100\r\ncache_memlimit\r\nstats nosuch\r\nstats reset\r\nstats detail\r\nstats detail on\r\n",
    // Meta commands: mg and its return flags.
    b"ms foo 2\r\nhi\r\nmg foo v\r\nmg foo s v\r\nmg foo v s f t c k\r\nmg foo\r\nmg missing v\r\nmg missing v q\r\nmg foo k O123 q\r\nmg missing k v O9\r\n",
    b"ms foo 2\r\nhi\r\nmg foo Oxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\nmg foo Oxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\r\nmg foo O\r\nmg foo T\r\nmg foo Tx\r\nmg foo u v\r\nmg foo E5 c\r\n",
    b"mg\r\nmg foo zz\r\nmg foo v v\r\nmg kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkx v\r\n",
    b"ms t 1 T-1\r\nx\r\nmg t v\r\nms t 1 T0\r\nx\r\nmg t t\r\nms t 1 T1000\r\nx\r\nmg t t T2000\r\nmg t t\r\n",
    // ms: flags, modes, CAS, refusals before and after the data.
    b"ms foo 2 T100 F5 c\r\nhi\r\nmg foo f t v\r\nms foo S2\r\nhi\r\nms foo\r\nms foo x\r\nhi\r\nms foo -1\r\nms foo 2 F\r\nhi\r\n",
    b"ms a 1 MA\r\nx\r\nms a 1 ME\r\nx\r\nms a 1 ME\r\ny\r\nms a 1 MA\r\nz\r\nms a 1 MP\r\np\r\nms a 1 MR\r\nr\r\nms zz 1 MR\r\nr\r\nms a 1 MX\r\nr\r\nmg a v\r\n",
    b"ms a 1 c\r\nx\r\nms a 1 C987654321986\r\ny\r\nms a 1 q\r\nq\r\nms a 1 C987654321987 q\r\nq\r\nms foo 2 MA q\r\nhi\r\n",
    b"ms foo 2 MS T5\r\nhi\r\nms foo 2 Ms\r\nhi\r\nms foo 2 ma\r\nhi\r\nmg foo v\r\nms foo 2 MS MS\r\nhi\r\nms foo 2 c c\r\nhi\r\nms foo 2 zz\r\nhi\r\n",
    b"ms foo 0\r\n\r\nmg foo v s\r\nms foo 2 F4294967296\r\nhi\r\nms foo 2 F-1\r\nhi\r\nmg foo f\r\nms foo 2 k O1 c s f\r\nhi\r\n",
    b"ms\r\nmd\r\nma\r\nms kkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkkx 1\r\nx\r\n",
    b"mg foo Tx\r\nms foo 2 T-\r\nhi\r\nms foo 2 Cx\r\nhi\r\nmd foo Cx\r\nmd foo Tx\r\nma foo Jx\r\nma foo Nx\r\nma foo Tx\r\nma foo Cx\r\n",
    // md.
    b"md a\r\nmd a\r\nmd a q\r\nms b 1\r\nx\r\nmd b q\r\nmd b C5\r\nmg b\r\nms c 1 c\r\nx\r\nmd c C987654321985\r\nmd c T30\r\nmg c v\r\nmd foo q q\r\nmd foo zz\r\n",
    b"ms foo 2\r\nhi\r\nmg foo v q\r\nmg foo k q O5\r\nmd foo q O7\r\nmd zzz q O8\r\nma zzz q O9\r\nms zzz 1 MR q O10\r\nx\r\n",
    // ma.
    b"ma n\r\nma n N0\r\nma n\r\nma n v\r\nma n D10 v\r\nma n MD D3 v\r\nma n MD D100 v\r\nma n M- v t c\r\nma n q\r\nmg n v\r\n",
    b"ms s 3\r\nabc\r\nma s\r\nma missing q\r\nma n2 N0 J13 v\r\nma n2 Dx\r\nma n2 D-1\r\nma n2 D18446744073709551615 v\r\nma n2 MX\r\nma n2 Mi v\r\n",
    b"ma n N5 T100 t\r\nma n N5 T100 t\r\nma n2 N5 J7 t v\r\nset x 5 0 2\r\nhi\r\nmg x f v\r\nms x 2 MA\r\nyo\r\nget x\r\nma x\r\nset y 0 0 2\r\n10\r\nma y\r\nget y\r\n",
    // Keys in base64 (b): decoded; returned as sent, followed by b.
    b"ms foo 2 b\r\nhi\r\nms Zm9v 2 b\r\nhi\r\nms Zm9v 2 b k\r\nhi\r\nmg !!! b v\r\nmg Zm9v b v k\r\nmd Zm9v b k O2 q\r\nmd Zm9v b k O3 C987654321985 T5\r\nmd Zm9v b k O2 c s f t\r\n",
    // quit ends the connection.
    b"set a 0 0 1\r\nx\r\nget a\r\nquit\r\n",
];

/// CAS values differ between the servers: replaced by `CAS` in `VALUE`
/// lines and meta replies' `c` flags.
fn normalize(reply: &[u8]) -> Vec<u8> {
    let text = String::from_utf8_lossy(reply);
    let mut out = String::new();
    for line in text.split_inclusive("\r\n") {
        let words: Vec<&str> = line.trim_end_matches("\r\n").split(' ').collect();
        if words.len() == 5 && words[0] == "VALUE" {
            out.push_str(&format!("VALUE {} {} {} CAS\r\n", words[1], words[2], words[3]));
        } else if ["VA", "HD", "EN", "NS", "EX", "NF"].contains(&words[0]) {
            let cas = |w: &&str| w.len() > 1 && w.starts_with('c') && w[1..].bytes().all(|b| b.is_ascii_digit());
            let words: Vec<&str> = words.iter().map(|w| if cas(w) { "cCAS" } else { w }).collect();
            out.push_str(&(words.join(" ") + "\r\n"));
        } else {
            out.push_str(line);
        }
    }
    out.into_bytes()
}

fn run_script(port: u16, script: &[u8]) -> Vec<u8> {
    let mut flush = TcpStream::connect(("127.0.0.1", port)).unwrap();
    flush.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    flush.write_all(b"flush_all\r\n").unwrap();
    read_memcached_until(&mut flush, b"OK\r\n").expect("flushed");
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream.write_all(script).unwrap();
    // After quit nothing may be sent: the server's close would reset the
    // connection with the bytes unread.
    if !script.ends_with(b"quit\r\n") {
        stream.write_all(b"mn\r\n").unwrap();
    }
    let mut reply = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match std::io::Read::read(&mut stream, &mut buf) {
            Ok(0) => break,
            Ok(n) => reply.extend_from_slice(&buf[..n]),
            Err(error) => panic!("reading {:?}: {error}", String::from_utf8_lossy(script)),
        }
        if reply.ends_with(b"MN\r\n") {
            break;
        }
    }
    normalize(&reply)
}

#[test]
fn replies_match_memcached() {
    let Some(memcached) = MemcachedServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_with_memcached(&dir.path().join("db"), &[]);
    let mut differences = Vec::new();
    for script in SCRIPTS {
        let (expected, got) = (run_script(memcached.port, script), run_script(port, script));
        if expected != got {
            differences.push(format!(
                "script {:?}\n  memcached: {:?}\n  scaledkv:  {:?}",
                String::from_utf8_lossy(script),
                String::from_utf8_lossy(&expected),
                String::from_utf8_lossy(&got)
            ));
        }
    }
    assert!(differences.is_empty(), "{} scripts differ:\n{}", differences.len(), differences.join("\n"));
}

/// A value over 1 MiB, sent in one piece: both refuse it, skip its bytes
/// and drop the key's old item (a stale value must not outlive a failed set).
#[test]
fn an_oversized_set_is_refused_like_memcached() {
    let Some(memcached) = MemcachedServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_with_memcached(&dir.path().join("db"), &[]);
    let mut script = b"set a 0 0 1\r\nx\r\nset a 0 0 2000000\r\n".to_vec();
    script.extend_from_slice(&vec![b'v'; 2_000_000]);
    script.extend_from_slice(b"\r\nget a\r\nset a 0 0 2000000 noreply\r\n");
    script.extend_from_slice(&vec![b'v'; 2_000_000]);
    script.extend_from_slice(b"\r\nset b 0 0 1048000\r\n");
    script.extend_from_slice(&vec![b'w'; 1_048_000]);
    script.extend_from_slice(b"\r\ndelete b\r\n");
    let expected = run_script(memcached.port, &script);
    assert_eq!(String::from_utf8_lossy(&run_script(port, &script)), String::from_utf8_lossy(&expected));
    assert_eq!(
        &expected[..],
        b"STORED\r\nSERVER_ERROR object too large for cache\r\nEND\r\nSTORED\r\nDELETED\r\nMN\r\n"
    );
}

/// libmemcached's conformance suite for memcached servers, ASCII protocol.
#[test]
fn memccapable_ascii_suite_passes() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_with_memcached(&dir.path().join("db"), &[]);
    common::memccapable_passes(port, "-a", 27);
}

/// Sends `bytes` and reads the replies up to `end`.
fn send(stream: &mut TcpStream, bytes: &[u8], end: &[u8]) -> String {
    stream.write_all(bytes).unwrap();
    String::from_utf8_lossy(&read_memcached_until(stream, end).expect("a reply")).into_owned()
}

fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream
}

/// The CAS in a `gets` reply's VALUE line.
fn cas_of(reply: &str) -> u64 {
    let line = reply.lines().next().unwrap();
    line.split(' ').nth(4).unwrap_or_else(|| panic!("no CAS in {line:?}")).parse().unwrap()
}

#[test]
fn cas_succeeds_only_on_an_unchanged_item_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let (mut server, port) = start_with_memcached(&path, &[]);
    let mut stream = connect(port);
    send(&mut stream, b"set a 3 0 1\r\nx\r\nset b 0 0 1\r\ny\r\n", b"STORED\r\nSTORED\r\n");
    let a = cas_of(&send(&mut stream, b"gets a\r\n", b"END\r\n"));
    let b = cas_of(&send(&mut stream, b"gets b\r\n", b"END\r\n"));
    assert_ne!(a, b, "every write has its own CAS");
    assert_eq!(send(&mut stream, b"touch a 1000\r\n", b"\r\n"), "TOUCHED\r\n");
    assert_eq!(cas_of(&send(&mut stream, b"gets a\r\n", b"END\r\n")), a, "touch keeps the CAS");
    assert_eq!(send(&mut stream, format!("cas a 4 0 2 {a}\r\nx2\r\n").as_bytes(), b"\r\n"), "STORED\r\n");
    assert_eq!(send(&mut stream, format!("cas a 5 0 2 {a}\r\nx3\r\n").as_bytes(), b"\r\n"), "EXISTS\r\n");
    let a2 = cas_of(&send(&mut stream, b"gets a\r\n", b"END\r\n"));
    assert!(a2 > a);
    // Killed and restarted: the CAS values read before still match their
    // items, and a write after the restart gets one no earlier write had.
    server.kill();
    let (_server, port) = start_with_memcached(&path, &[]);
    let mut stream = connect(port);
    let reply = send(&mut stream, b"gets a b\r\n", b"END\r\n");
    assert!(reply.starts_with(&format!("VALUE a 4 2 {a2}\r\nx2\r\nVALUE b 0 1 {b}\r\n")), "{reply}");
    assert_eq!(send(&mut stream, b"set c 0 0 1\r\nz\r\n", b"\r\n"), "STORED\r\n");
    let c = cas_of(&send(&mut stream, b"gets c\r\n", b"END\r\n"));
    assert!(c > a2 && c > b, "{c} after {a2}, {b}");
    assert_eq!(send(&mut stream, format!("cas b 0 0 1 {b}\r\nq\r\n").as_bytes(), b"\r\n"), "STORED\r\n");
    // FLUSHALL keeps the CAS epoch: the next start still counts above it.
    let mut redis = _server.connect();
    assert_eq!(request(&mut redis, &encode(&[b"FLUSHALL"])), b"+OK\r\n");
    assert_eq!(request(&mut redis, &encode(&[b"DBSIZE"])), b":0\r\n");
}

#[test]
fn items_and_redis_strings_share_one_keyspace() {
    let dir = tempfile::tempdir().unwrap();
    let (server, port) = start_with_memcached(&dir.path().join("db"), &[]);
    let mut mc = connect(port);
    let mut redis = server.connect();
    // Set through memcached, read through Redis: a string; flags and CAS
    // stay through EXPIRE, RENAME and COPY.
    send(&mut mc, b"set item 42 0 5\r\nhello\r\n", b"STORED\r\n");
    let cas = cas_of(&send(&mut mc, b"gets item\r\n", b"END\r\n"));
    assert_eq!(request(&mut redis, &encode(&[b"GET", b"item"])), b"$5\r\nhello\r\n");
    assert_eq!(request(&mut redis, &encode(&[b"TYPE", b"item"])), b"+string\r\n");
    assert_eq!(request(&mut redis, &encode(&[b"STRLEN", b"item"])), b":5\r\n");
    assert_eq!(request(&mut redis, &encode(&[b"EXPIRE", b"item", b"1000"])), b":1\r\n");
    assert_eq!(request(&mut redis, &encode(&[b"RENAME", b"item", b"moved"])), b"+OK\r\n");
    assert_eq!(request(&mut redis, &encode(&[b"COPY", b"moved", b"copied"])), b":1\r\n");
    let reply = send(&mut mc, b"gets moved copied\r\n", b"END\r\n");
    assert_eq!(reply, format!("VALUE moved 42 5 {cas}\r\nhello\r\nVALUE copied 42 5 {cas}\r\nhello\r\nEND\r\n"));
    // A Redis write makes it a plain string: flags 0, a new CAS.
    assert_eq!(request(&mut redis, &encode(&[b"APPEND", b"moved", b"!"])), b":6\r\n");
    let reply = send(&mut mc, b"gets moved\r\n", b"END\r\n");
    assert!(reply.starts_with("VALUE moved 0 6 ") && cas_of(&reply) != cas, "{reply}");
    let derived = cas_of(&reply);
    assert_eq!(send(&mut mc, format!("cas moved 1 0 1 {derived}\r\nz\r\n").as_bytes(), b"\r\n"), "STORED\r\n");
    assert_eq!(request(&mut redis, &encode(&[b"GET", b"moved"])), b"$1\r\nz\r\n");
    // A Redis collection is no item: reads miss it, add finds the key
    // taken, delete removes it, set replaces it.
    assert_eq!(request(&mut redis, &encode(&[b"RPUSH", b"list", b"a"])), b":1\r\n");
    assert_eq!(send(&mut mc, b"get list\r\n", b"END\r\n"), "END\r\n");
    assert_eq!(send(&mut mc, b"add list 0 0 1\r\nx\r\n", b"\r\n"), "NOT_STORED\r\n");
    assert_eq!(send(&mut mc, b"append list 0 0 1\r\nx\r\n", b"\r\n"), "NOT_STORED\r\n");
    assert_eq!(send(&mut mc, b"incr list 1\r\n", b"\r\n"), "NOT_FOUND\r\n");
    assert_eq!(send(&mut mc, b"delete list\r\n", b"\r\n"), "DELETED\r\n");
    assert_eq!(request(&mut redis, &encode(&[b"EXISTS", b"list"])), b":0\r\n");
    // Counters: memcached's incr reads a Redis INCR's number and back.
    assert_eq!(request(&mut redis, &encode(&[b"INCRBY", b"n", b"41"])), b":41\r\n");
    assert_eq!(send(&mut mc, b"incr n 1\r\n", b"\r\n"), "42\r\n");
    assert_eq!(request(&mut redis, &encode(&[b"INCR", b"n"])), b":43\r\n");
    // The memcached client shows in CLIENT LIST with its last command.
    let list = String::from_utf8_lossy(&request(&mut redis, &encode(&[b"CLIENT", b"LIST"]))).into_owned();
    assert!(list.contains("cmd=incr"), "{list}");
    // Keys reserved by the server are no client's.
    assert!(send(&mut mc, b"set \xff\xffx 0 0 1\r\nx\r\n", b"\r\n").starts_with("CLIENT_ERROR"));
}

#[test]
fn meta_commands_share_cas_with_the_text_commands_and_refuse_what_is_not_built() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_with_memcached(&dir.path().join("db"), &[]);
    let mut mc = connect(port);
    send(&mut mc, b"set a 0 0 1\r\nx\r\n", b"STORED\r\n");
    let cas = cas_of(&send(&mut mc, b"gets a\r\n", b"END\r\n"));
    assert_eq!(send(&mut mc, b"mg a c\r\n", b"\r\n"), format!("HD c{cas}\r\n"));
    let reply = send(&mut mc, format!("ms a 1 C{cas} c\r\ny\r\n").as_bytes(), b"\r\n");
    let new_cas: u64 = reply.trim_end().strip_prefix("HD c").unwrap().parse().unwrap();
    assert!(new_cas > cas, "{reply}");
    assert_eq!(send(&mut mc, format!("cas a 0 0 1 {cas}\r\nz\r\n").as_bytes(), b"\r\n"), "EXISTS\r\n");
    assert_eq!(send(&mut mc, format!("md a C{new_cas}\r\n").as_bytes(), b"\r\n"), "HD\r\n");
    // A binary key through base64 is the same key for every command.
    assert_eq!(send(&mut mc, b"ms AP8= 1 b\r\nv\r\n", b"\r\n"), "HD\r\n");
    assert_eq!(send(&mut mc, b"get \x00\xff\r\n", b"END\r\n"), "VALUE \u{0}\u{fffd} 0 1\r\nv\r\nEND\r\n");
    for (request, flag) in [(&b"mg a h\r\n"[..], 'h'), (b"mg a N30\r\n", 'N'), (b"md a I\r\n", 'I')] {
        let reply = send(&mut mc, request, b"\r\n");
        assert_eq!(
            reply,
            format!("CLIENT_ERROR the meta flag {flag} is not supported by ScaledKV (see the README)\r\n")
        );
    }
    assert!(send(&mut mc, b"me a\r\n", b"\r\n").starts_with("SERVER_ERROR the meta command me is not supported"));
}

#[test]
fn a_delayed_flush_all_clears_everything_when_due() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_with_memcached(&dir.path().join("db"), &[]);
    let mut mc = connect(port);
    send(&mut mc, b"set a 0 0 1\r\nx\r\nflush_all 1\r\n", b"OK\r\n");
    assert!(send(&mut mc, b"get a\r\n", b"END\r\n").starts_with("VALUE a"), "not before its time");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while send(&mut mc, b"get a\r\n", b"END\r\n") != "END\r\n" {
        assert!(std::time::Instant::now() < deadline, "the delayed flush never came");
        std::thread::sleep(Duration::from_millis(50));
    }
    // A later flush_all 0 cancels a pending one.
    send(&mut mc, b"flush_all 1\r\nflush_all 0\r\nset b 0 0 1\r\ny\r\n", b"STORED\r\n");
    std::thread::sleep(Duration::from_millis(1500));
    assert!(send(&mut mc, b"get b\r\n", b"END\r\n").starts_with("VALUE b"));
}

#[test]
fn with_requirepass_a_connection_authenticates_with_a_set() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_with_memcached(&dir.path().join("db"), &["--requirepass", "sesame"]);
    let mut mc = connect(port);
    assert_eq!(send(&mut mc, b"get a\r\n", b"\r\n"), "CLIENT_ERROR unauthenticated\r\n");
    assert_eq!(send(&mut mc, b"set auth 0 0 9\r\nuser nope\r\n", b"\r\n"), "CLIENT_ERROR authentication failure\r\n");
    assert_eq!(send(&mut mc, b"set auth 0 0 11\r\nuser sesame\r\n", b"\r\n"), "STORED\r\n");
    assert_eq!(send(&mut mc, b"set a 0 0 1\r\nx\r\nget a\r\n", b"END\r\n"), "STORED\r\nVALUE a 0 1\r\nx\r\nEND\r\n");
    let stats = send(&mut mc, b"stats\r\n", b"END\r\n");
    assert!(stats.contains("STAT auth_cmds 2\r\n") && stats.contains("STAT auth_errors 1\r\n"), "{stats}");
}

/// The memcached port opens to an ACL user that may run everything, or to
/// another name with the default user's password; a restricted user is
/// refused (memcached's commands cannot be checked one by one).
#[test]
fn acl_users_that_may_run_everything_open_the_memcached_port() {
    let dir = tempfile::tempdir().unwrap();
    let (server, port) = start_with_memcached(&dir.path().join("db"), &["--requirepass", "sesame"]);
    let mut redis = server.connect();
    for command in [
        &["AUTH", "sesame"][..],
        &["ACL", "SETUSER", "admin", "on", ">adminpw", "+@all", "~*", "&*"],
        &["ACL", "SETUSER", "reader", "on", ">readerpw", "+@read", "~*"],
    ] {
        let command: Vec<&[u8]> = command.iter().map(|w| w.as_bytes()).collect();
        assert_eq!(common::request(&mut redis, &common::encode(&command)), b"+OK\r\n");
    }
    let auth = |user_and_password: &str| {
        let mut mc = connect(port);
        let set = format!("set auth 0 0 {}\r\n{user_and_password}\r\n", user_and_password.len());
        send(&mut mc, set.as_bytes(), b"\r\n")
    };
    assert_eq!(auth("admin adminpw"), "STORED\r\n");
    assert_eq!(auth("admin sesame"), "CLIENT_ERROR authentication failure\r\n", "admin's own password");
    assert_eq!(auth("reader readerpw"), "CLIENT_ERROR authentication failure\r\n", "a restricted user");
    assert_eq!(auth("anyone sesame"), "STORED\r\n", "the default user's password");
    // A default user with restrictions (even without a password) does not
    // open the memcached port: a user that may run everything does.
    let command: Vec<&[u8]> =
        ["ACL", "SETUSER", "default", "nopass", "-flushall"].iter().map(|w| w.as_bytes()).collect();
    assert_eq!(common::request(&mut redis, &common::encode(&command)), b"+OK\r\n");
    assert_eq!(send(&mut connect(port), b"get a\r\n", b"\r\n"), "CLIENT_ERROR unauthenticated\r\n");
    assert_eq!(auth("anyone x"), "CLIENT_ERROR authentication failure\r\n");
    assert_eq!(auth("admin adminpw"), "STORED\r\n");
}

/// A multi-get whose reply would pass 256 largest items (one big item
/// named again and again) is refused with memcached's out-of-memory error
/// instead of being built, and the connection goes on.
#[test]
fn a_multi_get_reply_is_bounded() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_with_memcached(&dir.path().join("db"), &["--memcached-item-size-max", "4096"]);
    let mut mc = connect(port);
    let value = vec![b'v'; 4000];
    let mut set = b"set big 0 0 4000\r\n".to_vec();
    set.extend_from_slice(&value);
    set.extend_from_slice(b"\r\n");
    assert_eq!(send(&mut mc, &set, b"\r\n"), "STORED\r\n");
    let many = format!("get {}\r\n", vec!["big"; 300].join(" "));
    assert_eq!(send(&mut mc, many.as_bytes(), b"\r\n"), "SERVER_ERROR out of memory writing get response\r\n");
    let fewer = format!("get {}\r\n", vec!["big"; 200].join(" "));
    assert_eq!(send(&mut mc, fewer.as_bytes(), b"END\r\n").matches("VALUE big").count(), 200);
}

/// memcached's `-s`: the protocols on a Unix socket, its file's mode as
/// `-a` says (700 by default), named by `stats settings`; one keyspace
/// with the Redis port.
#[test]
fn the_memcached_protocols_on_a_unix_socket() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("memcached.sock");
    let server = common::Server::start(&dir.path().join("db"), &["--memcached-unixsocket", path.to_str().unwrap()]);
    assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o700);
    let mut unix = std::os::unix::net::UnixStream::connect(&path).unwrap();
    unix.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    unix.write_all(b"set k 0 0 2\r\nhi\r\nget k\r\n").unwrap();
    assert_eq!(read_memcached_until(&mut unix, b"END\r\n").unwrap(), b"STORED\r\nVALUE k 0 2\r\nhi\r\nEND\r\n");
    unix.write_all(b"stats settings\r\n").unwrap();
    let settings = String::from_utf8(read_memcached_until(&mut unix, b"END\r\n").unwrap()).unwrap();
    assert!(settings.contains(&format!("STAT domain_socket {}\r\n", path.display())), "{settings}");
    assert!(settings.contains("STAT umask 700\r\n"), "{settings}");
    let mut redis = server.connect();
    assert_eq!(request(&mut redis, &encode(&[b"GET", b"k"])), b"$2\r\nhi\r\n");
    drop((unix, server));
}

/// Garbage, long lines and a client that hangs up mid-value: errors or a
/// closed connection for that client, and the server serves the next.
#[test]
fn bad_input_closes_only_its_connection() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_with_memcached(&dir.path().join("db"), &[]);
    let mut rng = rand::thread_rng();
    for round in 0..200 {
        let mut stream = connect(port);
        let mut bytes: Vec<u8> =
            (0..rand::Rng::gen_range(&mut rng, 1..400)).map(|_| rand::Rng::gen(&mut rng)).collect();
        if round % 2 == 0 {
            // Words of real commands in random order reach deeper.
            let words = [
                "set", "get", "cas", "incr", "delete", "touch", "gat", "noreply", "0", "1", "-1", "k", "\r\n", "mg",
                "ms", "md", "ma", "b", "v", "q", "T5", "N1", "MA", "D3", "C1", "O1", "Zm9v", "==",
            ];
            bytes = (0..40)
                .map(|_| words[rand::Rng::gen_range(&mut rng, 0..words.len())])
                .collect::<Vec<_>>()
                .join(" ")
                .into_bytes();
        }
        let _ = stream.write_all(&bytes);
    }
    let mut long = connect(port);
    let _ = long.write_all(&vec![b'x'; 4096]);
    assert!(read_memcached_until(&mut long, b"\r\n").is_none(), "a 4 KiB line without its end closes the connection");
    let mut half = connect(port);
    half.write_all(b"set h 0 0 100\r\nonly part").unwrap();
    drop(half);
    let mut stream = connect(port);
    assert_eq!(send(&mut stream, b"get h\r\nversion\r\n", b"\r\nVERSION 1.6.18\r\n"), "END\r\nVERSION 1.6.18\r\n");
}

/// What one memcached writer saw acknowledged before the server died.
#[derive(Default)]
struct Acked {
    /// Items 0..sets were STORED.
    sets: u64,
    /// The highest reply to an incr of the counter all writers share.
    counter: u64,
}

fn item(iteration: usize, thread: usize, seq: u64) -> (String, u32, Vec<u8>) {
    let len = 1 + (seq as usize * 31 + thread * 7) % 900;
    let data = (0..len).map(|i| b'a' + ((i as u64 + seq) % 26) as u8).collect();
    (format!("m{iteration}:t{thread}:{seq}"), (seq as u32).wrapping_mul(2654435761), data)
}

/// Pipelines of eight sets and an incr of a shared counter until the
/// connection dies; what was acknowledged.
fn mc_writer(port: u16, iteration: usize, thread: usize) -> Acked {
    let mut acked = Acked::default();
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return acked };
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    loop {
        let mut batch = Vec::new();
        for seq in acked.sets..acked.sets + 8 {
            let (key, flags, data) = item(iteration, thread, seq);
            batch.extend_from_slice(format!("set {key} {flags} 0 {}\r\n", data.len()).as_bytes());
            batch.extend_from_slice(&data);
            batch.extend_from_slice(b"\r\n");
        }
        batch.extend_from_slice(format!("incr counter{iteration} 1\r\n").as_bytes());
        if stream.write_all(&batch).is_err() {
            return acked;
        }
        let Some(reply) = read_memcached_until(&mut stream, b"\r\n") else { return acked };
        // Replies come in order: count the STOREDs, then the counter.
        let mut lines = String::from_utf8_lossy(&reply).into_owned();
        while lines.matches("\r\n").count() < 9 {
            match read_memcached_until(&mut stream, b"\r\n") {
                Some(more) => lines.push_str(&String::from_utf8_lossy(&more)),
                None => {
                    acked.sets += lines.matches("STORED\r\n").count() as u64;
                    return acked;
                }
            }
        }
        let lines: Vec<&str> = lines.split("\r\n").collect();
        assert!(lines[..8].iter().all(|l| *l == "STORED"), "{lines:?}");
        acked.sets += 8;
        if let Ok(n) = lines[8].parse::<u64>() {
            acked.counter = acked.counter.max(n);
        }
    }
}

/// SIGKILL while memcached clients write, restart, check: in a loop
/// (`SCALEDKV_SERVER_CRASH_ITERATIONS`, default 3 here).
#[test]
fn acknowledged_memcached_writes_survive_sigkill() {
    use rand::Rng;
    let iterations = common::crash_iterations(3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut rng = rand::thread_rng();
    for iteration in 0..iterations {
        let (mut server, port) = start_with_memcached(&path, &[]);
        connect(port).write_all(format!("set counter{iteration} 0 0 1\r\n0\r\n").as_bytes()).unwrap();
        std::thread::sleep(Duration::from_millis(50));
        let writers: Vec<_> =
            (0..3).map(|thread| std::thread::spawn(move || mc_writer(port, iteration, thread))).collect();
        std::thread::sleep(Duration::from_millis(rng.gen_range(100..600)));
        server.kill();
        let acked: Vec<Acked> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        let (_server, port) = start_with_memcached(&path, &[]);
        let mut stream = connect(port);
        for (thread, acked) in acked.iter().enumerate() {
            for seq in 0..acked.sets {
                let (key, flags, data) = item(iteration, thread, seq);
                let reply = send(&mut stream, format!("get {key}\r\n").as_bytes(), b"END\r\n");
                let mut expected = format!("VALUE {key} {flags} {}\r\n", data.len()).into_bytes();
                expected.extend_from_slice(&data);
                expected.extend_from_slice(b"\r\nEND\r\n");
                assert_eq!(reply.as_bytes(), &expected[..], "iteration {iteration}: acknowledged {key} lost");
            }
        }
        let highest = acked.iter().map(|a| a.counter).max().unwrap_or(0);
        let reply = send(&mut stream, format!("get counter{iteration}\r\n").as_bytes(), b"END\r\n");
        let counter: u64 = reply.lines().nth(1).unwrap_or("0").trim().parse().unwrap();
        assert!(counter >= highest, "iteration {iteration}: counter {counter} below an acknowledged {highest}");
        assert!(acked.iter().map(|a| a.sets).sum::<u64>() > 0, "iteration {iteration}: nothing was written");
    }
}
