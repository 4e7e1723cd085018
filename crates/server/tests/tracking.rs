//! Client-side caching (CLIENT TRACKING): the same sequences of commands
//! on several connections go to ScaledKV and to a real `redis-server`
//! (Debian's 7.0.15, started on a free loopback port) and every reply and
//! invalidation must match byte for byte; a client that caches what it
//! reads while others write never keeps a value older than a change it was
//! not told of; the tracking table's limit invalidates keys to stay under
//! it. The differential test skips with a notice when `redis-server` is
//! absent; `.ci/run` installs it.

mod common;

use std::collections::HashMap;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{encode, read_reply, request, RedisServer, Server};

fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream
}

fn send(stream: &mut TcpStream, words: &[&str]) -> Vec<u8> {
    let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
    request(stream, &encode(&words))
}

/// Sends a command on a RESP3 connection and logs what comes up to its
/// reply: the pushes before it, then the reply. Each write by another
/// client was answered before this is sent, and both servers queue its
/// invalidations before that answer, so they come before this reply.
fn call(stream: &mut TcpStream, words: &[&str], log: &mut Vec<Vec<u8>>) {
    use std::io::Write;
    let words: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
    stream.write_all(&encode(&words)).unwrap();
    loop {
        let reply = read_reply(stream);
        let push = reply.starts_with(b">");
        log.push(reply);
        if !push {
            return;
        }
    }
}

/// The messages that came for a RESP2 subscriber before the reply to its
/// PING.
fn pending(stream: &mut TcpStream) -> Vec<Vec<u8>> {
    use std::io::Write;
    stream.write_all(&encode(&[b"PING"])).unwrap();
    let mut got = Vec::new();
    loop {
        let reply = read_reply(stream);
        if reply == b"*2\r\n$4\r\npong\r\n$0\r\n\r\n" {
            return got;
        }
        got.push(reply);
    }
}

/// The client ID of a connection.
fn id(stream: &mut TcpStream) -> String {
    let reply = send(stream, &["CLIENT", "ID"]);
    String::from_utf8_lossy(&reply[1..reply.len() - 2]).into_owned()
}

/// Runs the scenarios on the server at `port`: every reply and every
/// pending invalidation, in order (client IDs left out).
fn scenarios(port: u16) -> Vec<Vec<u8>> {
    let mut seen = Vec::new();
    let (mut a, mut b, mut r) = (connect(port), connect(port), connect(port));
    send(&mut b, &["FLUSHALL"]);
    send(&mut a, &["HELLO", "3"]);
    let rid = id(&mut r);
    seen.push(send(&mut r, &["SUBSCRIBE", "__redis__:invalidate"]));

    // The default mode: keys read are invalidated once, by any writer.
    call(&mut a, &["CLIENT", "TRACKING", "ON"], &mut seen);
    call(&mut a, &["GET", "k"], &mut seen);
    call(&mut a, &["MGET", "k", "k2"], &mut seen);
    seen.push(send(&mut b, &["SET", "k", "v"]));
    call(&mut a, &["PING"], &mut seen);
    seen.push(send(&mut b, &["SET", "k", "v2"]));
    seen.push(send(&mut b, &["MSET", "k2", "x", "k3", "y"]));
    call(&mut a, &["PING"], &mut seen);
    call(&mut a, &["GET", "k"], &mut seen);
    call(&mut a, &["SET", "k", "own write"], &mut seen);
    call(&mut a, &["PING"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKINGINFO"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "ON", "NOLOOP"], &mut seen);
    call(&mut a, &["GET", "k"], &mut seen);
    call(&mut a, &["SET", "k", "unheard"], &mut seen);
    call(&mut a, &["PING"], &mut seen);
    // Transactions, hashes, renames, deletions.
    call(&mut a, &["CLIENT", "TRACKING", "ON"], &mut seen);
    for command in [&["MULTI"][..], &["GET", "m"], &["HGET", "h", "f"], &["EXEC"]] {
        call(&mut a, command, &mut seen);
    }
    seen.push(send(&mut b, &["SET", "m", "x"]));
    seen.push(send(&mut b, &["HSET", "h", "f", "v"]));
    call(&mut a, &["GET", "r1"], &mut seen);
    call(&mut a, &["GET", "r2"], &mut seen);
    seen.push(send(&mut b, &["RENAME", "m", "r1"]));
    seen.push(send(&mut b, &["RENAME", "r1", "r2"]));
    call(&mut a, &["GET", "h"], &mut seen);
    seen.push(send(&mut b, &["DEL", "h"]));
    call(&mut a, &["PING"], &mut seen);
    // Expiry: a tracked key is invalidated when it expires.
    call(&mut a, &["GET", "e"], &mut seen);
    seen.push(send(&mut b, &["SET", "e", "1", "PX", "100"]));
    call(&mut a, &["GET", "e"], &mut seen);
    std::thread::sleep(Duration::from_millis(1500));
    call(&mut a, &["PING"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "OFF"], &mut seen);
    seen.push(send(&mut b, &["SET", "k", "after off"]));
    call(&mut a, &["PING"], &mut seen);

    // BCAST: every key under the prefixes, one message per prefix.
    call(&mut a, &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "user:", "PREFIX", "obj:"], &mut seen);
    seen.push(send(&mut b, &["MSET", "user:1", "a", "other", "b", "obj:9", "c", "user:0", "d"]));
    call(&mut a, &["PING"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKINGINFO"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "us"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "new:"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKINGINFO"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "ON"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "OFF"], &mut seen);
    // BCAST without a prefix is the empty prefix: it overlaps any other.
    call(&mut a, &["CLIENT", "TRACKING", "ON", "BCAST"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKINGINFO"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "OFF"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "a"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "ON", "BCAST"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKINGINFO"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "ON", "BCAST", "PREFIX", "b", "PREFIX", "b"], &mut seen);
    seen.push(send(&mut b, &["SET", "abc", "1"]));
    call(&mut a, &["PING"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "OFF"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "ON", "BCAST", "NOLOOP"], &mut seen);
    call(&mut a, &["MSET", "n1", "1", "n2", "2"], &mut seen);
    seen.push(send(&mut b, &["SET", "n3", "3"]));
    call(&mut a, &["PING"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "OFF"], &mut seen);

    // OPTIN and OPTOUT with CLIENT CACHING.
    call(&mut a, &["CLIENT", "TRACKING", "ON", "OPTIN"], &mut seen);
    call(&mut a, &["GET", "x1"], &mut seen);
    call(&mut a, &["CLIENT", "CACHING", "YES"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKINGINFO"], &mut seen);
    call(&mut a, &["GET", "x2"], &mut seen);
    call(&mut a, &["GET", "x3"], &mut seen);
    seen.push(send(&mut b, &["MSET", "x1", "1", "x2", "2", "x3", "3"]));
    call(&mut a, &["PING"], &mut seen);
    call(&mut a, &["CLIENT", "CACHING", "NO"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "ON", "OPTOUT"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "OFF"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "ON", "OPTOUT"], &mut seen);
    call(&mut a, &["CLIENT", "CACHING", "NO"], &mut seen);
    call(&mut a, &["GET", "o1"], &mut seen);
    call(&mut a, &["GET", "o2"], &mut seen);
    seen.push(send(&mut b, &["MSET", "o1", "1", "o2", "2"]));
    call(&mut a, &["PING"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "OFF"], &mut seen);

    // REDIRECT to a RESP2 subscriber; a flush is a null.
    call(&mut a, &["CLIENT", "TRACKING", "ON", "REDIRECT", &rid], &mut seen);
    call(&mut a, &["GET", "rk"], &mut seen);
    seen.push(send(&mut b, &["SET", "rk", "1"]));
    seen.extend(pending(&mut r));
    seen.push(send(&mut b, &["FLUSHALL"]));
    seen.extend(pending(&mut r));
    call(&mut a, &["PING"], &mut seen);
    let redirect = send(&mut a, &["CLIENT", "GETREDIR"]);
    assert_eq!(redirect, format!(":{rid}\r\n").into_bytes());
    call(&mut a, &["CLIENT", "TRACKING", "OFF"], &mut seen);
    call(&mut a, &["CLIENT", "GETREDIR"], &mut seen);

    // Refusals.
    for options in [
        &["REDIRECT", "999999999"][..],
        &["REDIRECT", "x"],
        &["PREFIX", "x"],
        &["OPTIN", "OPTOUT"],
        &["BCAST", "OPTIN"],
        &["BCAST", "PREFIX", "ab", "PREFIX", "a"],
        &["FOO"],
        &["PREFIX"],
    ] {
        let command: Vec<&str> = ["CLIENT", "TRACKING", "ON"].iter().chain(options).copied().collect();
        call(&mut a, &command, &mut seen);
    }
    // A key miss (`keymiss` notified, class `m`) changes nothing: no
    // invalidation for a client that read the missing key.
    call(&mut a, &["CLIENT", "TRACKING", "ON"], &mut seen);
    seen.push(send(&mut b, &["CONFIG", "SET", "notify-keyspace-events", "KEAm"]));
    call(&mut a, &["GET", "missed"], &mut seen);
    seen.push(send(&mut b, &["GET", "missed"]));
    call(&mut a, &["PING"], &mut seen);
    seen.push(send(&mut b, &["SET", "missed", "now"]));
    call(&mut a, &["PING"], &mut seen);
    seen.push(send(&mut b, &["CONFIG", "SET", "notify-keyspace-events", ""]));
    call(&mut a, &["CLIENT", "TRACKING", "OFF"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "MAYBE"], &mut seen);
    call(&mut a, &["CLIENT", "CACHING", "YES"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKING", "ON"], &mut seen);
    call(&mut a, &["CLIENT", "CACHING", "MAYBE"], &mut seen);
    call(&mut a, &["CLIENT", "CACHING", "YES"], &mut seen);
    call(&mut a, &["RESET"], &mut seen);
    call(&mut a, &["CLIENT", "TRACKINGINFO"], &mut seen);
    seen
}

#[test]
fn tracking_answers_as_redis_does() {
    let Some(redis) = RedisServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let (expected, got) = (scenarios(redis.port), scenarios(server.port));
    if std::env::var("TRACKING_DUMP").is_ok() {
        for (n, reply) in expected.iter().enumerate() {
            eprintln!("R {n} {:?}", String::from_utf8_lossy(reply));
        }
        for (n, reply) in got.iter().enumerate() {
            eprintln!("S {n} {:?}", String::from_utf8_lossy(reply));
        }
    }
    for (n, (expected, got)) in expected.iter().zip(&got).enumerate() {
        assert_eq!(
            String::from_utf8_lossy(got),
            String::from_utf8_lossy(expected),
            "reply {n} (of {}; the ones before matched)",
            expected.len()
        );
    }
    assert_eq!(got.len(), expected.len());
}

/// A RESP3 reader of one connection that keeps a cache of what it read:
/// replies are handed back, invalidations applied as they come.
struct CachingClient {
    stream: TcpStream,
    cache: HashMap<Vec<u8>, Vec<u8>>,
    invalidations: usize,
}

impl CachingClient {
    fn new(port: u16, max_keys: Option<&str>) -> CachingClient {
        let mut stream = connect(port);
        send(&mut stream, &["HELLO", "3"]);
        if let Some(max) = max_keys {
            send(&mut stream, &["CONFIG", "SET", "tracking-table-max-keys", max]);
        }
        assert_eq!(send(&mut stream, &["CLIENT", "TRACKING", "ON"]), b"+OK\r\n");
        CachingClient { stream, cache: HashMap::new(), invalidations: 0 }
    }

    /// Sends a command and returns its reply, applying the pushes before it.
    fn call(&mut self, words: &[&[u8]]) -> Vec<u8> {
        use std::io::Write;
        self.stream.write_all(&encode(words)).unwrap();
        loop {
            let reply = read_reply(&mut self.stream);
            let Some(keys) = reply.strip_prefix(b">2\r\n$10\r\ninvalidate\r\n") else { return reply };
            self.invalidations += 1;
            // `*N` and N bulks, or a null (everything).
            if keys.starts_with(b"_") {
                self.cache.clear();
                continue;
            }
            let mut parts = keys.split(|&b| b == b'\n').skip(1);
            while let (Some(_length), Some(key)) = (parts.next(), parts.next()) {
                if let Some(key) = key.strip_suffix(b"\r") {
                    self.cache.remove(key);
                }
            }
        }
    }

    /// A read through the cache.
    fn get(&mut self, key: &[u8]) -> Vec<u8> {
        if let Some(value) = self.cache.get(key) {
            return value.clone();
        }
        let value = self.call(&[b"GET", key]);
        self.cache.insert(key.to_vec(), value.clone());
        value
    }
}

/// Two writers overwrite 40 keys with ever larger values while a client
/// reads them through its cache: once the writers stop and the client has
/// taken its pending invalidations, every cached value is the server's.
#[test]
fn a_caching_client_never_keeps_a_stale_value() {
    use rand::Rng;
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let port = server.port;
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let mut stream = connect(port);
                let mut rng = rand::thread_rng();
                let mut n = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    let key = format!("key{}", rng.gen_range(0..40));
                    let value = format!("{w}:{n}");
                    if n.is_multiple_of(7) {
                        send(&mut stream, &["DEL", &key]);
                    } else {
                        send(&mut stream, &["SET", &key, &value]);
                    }
                    n += 1;
                }
                n
            })
        })
        .collect();
    let mut client = CachingClient::new(port, None);
    let mut rng = rand::thread_rng();
    let mut reads = 0usize;
    let deadline = std::time::Instant::now() + Duration::from_secs(3);
    while std::time::Instant::now() < deadline {
        let key = format!("key{}", rng.gen_range(0..40));
        client.get(key.as_bytes());
        reads += 1;
        if reads.is_multiple_of(20) {
            // Takes the invalidations that came meanwhile, as a client
            // library does on its next round trip.
            client.call(&[b"PING"]);
        }
    }
    stop.store(true, Ordering::Relaxed);
    let writes: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
    client.call(&[b"PING"]);
    let mut check = connect(port);
    send(&mut check, &["HELLO", "3"]);
    for (key, cached) in &client.cache {
        let now = request(&mut check, &encode(&[b"GET", key]));
        assert_eq!(String::from_utf8_lossy(cached), String::from_utf8_lossy(&now), "{}", String::from_utf8_lossy(key));
    }
    assert!(client.invalidations > 100, "{} invalidations for {writes} writes and {reads} reads", client.invalidations);
    assert!(reads > client.cache.len(), "the cache served reads");
}

/// Past `tracking-table-max-keys`, keys are invalidated (any) until the
/// table is back under it; INFO counts what is tracked.
#[test]
fn the_tracking_table_stays_within_its_limit() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(dir.path(), &[]);
    let mut client = CachingClient::new(server.port, Some("10"));
    for n in 0..25 {
        client.get(format!("key{n}").as_bytes());
    }
    client.call(&[b"PING"]);
    assert_eq!(client.invalidations, 15, "one per key over the limit");
    assert_eq!(client.cache.len(), 10);
    let info = String::from_utf8_lossy(&client.call(&[b"INFO", b"stats"])).into_owned();
    assert!(info.contains("tracking_total_keys:10\r\n") && info.contains("tracking_total_items:10\r\n"), "{info}");
    let clients = String::from_utf8_lossy(&client.call(&[b"INFO", b"clients"])).into_owned();
    assert!(clients.contains("tracking_clients:1\r\n"), "{clients}");
    let list = String::from_utf8_lossy(&client.call(&[b"CLIENT", b"LIST"])).into_owned();
    assert!(list.contains("flags=t ") && list.contains("redir=0 "), "{list}");
}

/// A cached key that expires is invalidated within the expiry cycle, among
/// many keys that do not (the index of expiring keys finds it; a walk of
/// the key space came round to it only every few seconds).
#[test]
fn a_cached_key_is_invalidated_when_it_expires() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]);
    let mut writer = connect(server.port);
    common::set_keys(&mut writer, 100_000);
    let mut cache = connect(server.port);
    assert!(send(&mut cache, &["HELLO", "3"]).starts_with(b"%"));
    assert_eq!(send(&mut cache, &["CLIENT", "TRACKING", "ON"]), b"+OK\r\n");
    for round in 0..3 {
        let key = format!("session:{round}");
        assert_eq!(send(&mut writer, &["SET", &key, "v", "PX", "300"]), b"+OK\r\n");
        assert_eq!(send(&mut cache, &["GET", &key]), b"$1\r\nv\r\n");
        let sent = std::time::Instant::now();
        let push = read_reply(&mut cache);
        let elapsed = sent.elapsed();
        let expected = format!(">2\r\n$10\r\ninvalidate\r\n*1\r\n${}\r\n{key}\r\n", key.len());
        assert_eq!(String::from_utf8_lossy(&push), expected);
        assert!(elapsed < Duration::from_millis(1500), "{elapsed:?}");
    }
}
