//! Publish/subscribe through a client library and raw sockets: delivery,
//! unsubscribing under a flood of messages, and a subscriber that stops
//! reading. Replies and messages byte for byte against redis-server are
//! in `differential.rs` (`pubsub_matches_redis`).

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{encode, read_reply, request, Server};
use redis::Commands;

fn start() -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &["--threads", "2"]);
    (dir, server)
}

fn numsub(con: &mut redis::Connection, channel: &str) -> i64 {
    let reply: (String, i64) = redis::cmd("PUBSUB").arg("NUMSUB").arg(channel).query(con).unwrap();
    reply.1
}

#[test]
fn messages_reach_subscribers_through_a_client_library() {
    let (_dir, server) = start();
    let client = redis::Client::open(server.url()).unwrap();
    let mut listener = client.get_connection().unwrap();
    let mut publisher = client.get_connection().unwrap();
    let mut pubsub = listener.as_pubsub();
    pubsub.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    pubsub.subscribe("news").unwrap();
    pubsub.psubscribe("n*").unwrap();
    assert_eq!(numsub(&mut publisher, "news"), 1);
    let info: String = redis::cmd("INFO").arg("stats").query(&mut publisher).unwrap();
    for line in ["pubsub_channels:1", "pubsub_patterns:1", "pubsubshard_channels:0"] {
        assert!(info.lines().any(|l| l == line), "{line} in {info}");
    }
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut publisher).unwrap();
    assert!(clients.contains("flags=P db=0 sub=1 psub=1 ssub=0"), "{clients}");
    assert_eq!(publisher.publish::<_, _, i64>("news", "hello").unwrap(), 2, "the channel and the pattern");
    assert_eq!(publisher.publish::<_, _, i64>("nope", vec![0u8, 255]).unwrap(), 1, "the pattern only");
    assert_eq!(publisher.publish::<_, _, i64>("other", "x").unwrap(), 0);
    let mut got = Vec::new();
    for _ in 0..3 {
        let message = pubsub.get_message().unwrap();
        let pattern: Option<String> = message.get_pattern().ok();
        got.push((message.get_channel_name().to_string(), pattern, message.get_payload::<Vec<u8>>().unwrap()));
    }
    got[..2].sort();
    assert_eq!(
        got,
        vec![
            ("news".to_string(), None, b"hello".to_vec()),
            ("news".to_string(), Some("n*".to_string()), b"hello".to_vec()),
            ("nope".to_string(), Some("n*".to_string()), vec![0, 255]),
        ]
    );
    pubsub.unsubscribe("news").unwrap();
    pubsub.punsubscribe("n*").unwrap();
    drop(pubsub);
    assert_eq!(numsub(&mut publisher, "news"), 0);
    assert_eq!(publisher.publish::<_, _, i64>("news", "late").unwrap(), 0);
    // Back out of subscribed mode: ordinary commands run again.
    assert_eq!(listener.get::<_, Option<String>>("k").unwrap(), None);
    // A closed subscriber leaves nothing behind.
    let mut gone = client.get_connection().unwrap();
    let _: () = redis::cmd("SUBSCRIBE").arg("bye").query(&mut gone).unwrap_or(());
    assert_eq!(numsub(&mut publisher, "bye"), 1);
    drop(gone);
    let deadline = Instant::now() + Duration::from_secs(10);
    while numsub(&mut publisher, "bye") != 0 {
        assert!(Instant::now() < deadline, "a closed subscriber is still listed");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Reads replies until one equals `until`; the ones before it.
fn read_until(stream: &mut TcpStream, until: &[u8]) -> Vec<Vec<u8>> {
    let mut before = Vec::new();
    loop {
        let reply = read_reply(stream);
        if reply == until {
            return before;
        }
        before.push(reply);
    }
}

fn message_on(reply: &[u8], channel: &str) -> bool {
    reply.starts_with(format!("*3\r\n$7\r\nmessage\r\n${}\r\n{channel}\r\n", channel.len()).as_bytes())
}

/// While another client publishes to a channel as fast as it can, a
/// subscriber leaves and rejoins it again and again: once the
/// confirmation of its UNSUBSCRIBE is out, no message of that channel may
/// follow. Every other round it stays subscribed to a quiet channel
/// meanwhile; in the others the UNSUBSCRIBE leaves it subscribed to
/// nothing, and it then subscribes to the quiet channel, so that a message
/// left behind would be sent with the next reply either way.
#[test]
fn no_message_follows_the_confirmation_of_an_unsubscribe() {
    let (_dir, server) = start();
    let stop = Arc::new(AtomicBool::new(false));
    let flood = {
        let stop = stop.clone();
        let mut publisher = server.connect();
        std::thread::spawn(move || {
            let batch: Vec<u8> = (0..16).flat_map(|_| encode(&[b"PUBLISH", b"hot", b"payload"])).collect();
            let mut sent = 0u64;
            while !stop.load(Ordering::Relaxed) {
                publisher.write_all(&batch).unwrap();
                for _ in 0..16 {
                    read_reply(&mut publisher);
                }
                sent += 16;
            }
            sent
        })
    };
    let mut listener = server.connect();
    listener.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let confirm = |kind: &str, channel: &str, count: usize| {
        format!("*3\r\n${}\r\n{kind}\r\n${}\r\n{channel}\r\n:{count}\r\n", kind.len(), channel.len()).into_bytes()
    };
    let pong = b"*2\r\n$4\r\npong\r\n$0\r\n\r\n".to_vec();
    let mut received = 0;
    for round in 0..300 {
        let stays = round % 2 == 0;
        if stays {
            request(&mut listener, &encode(&[b"SUBSCRIBE", b"quiet"]));
        }
        let others = stays as usize;
        listener.write_all(&encode(&[b"SUBSCRIBE", b"hot"])).unwrap();
        assert!(read_until(&mut listener, &confirm("subscribe", "hot", others + 1)).is_empty(), "round {round}");
        // Let some messages come before leaving.
        std::thread::sleep(Duration::from_micros(200));
        listener.write_all(&encode(&[b"UNSUBSCRIBE", b"hot"])).unwrap();
        let before = read_until(&mut listener, &confirm("unsubscribe", "hot", others));
        assert!(before.iter().all(|m| message_on(m, "hot")), "round {round}: {before:?}");
        received += before.len();
        if !stays {
            listener.write_all(&encode(&[b"SUBSCRIBE", b"quiet"])).unwrap();
            let after = read_until(&mut listener, &confirm("subscribe", "quiet", 1));
            assert!(after.is_empty(), "round {round}: after leaving `hot`: {:?}", String::from_utf8_lossy(&after[0]));
        }
        listener.write_all(&encode(&[b"PING"])).unwrap();
        let after = read_until(&mut listener, &pong);
        assert!(after.is_empty(), "round {round}: after leaving `hot`: {:?}", String::from_utf8_lossy(&after[0]));
        assert_eq!(request(&mut listener, &encode(&[b"UNSUBSCRIBE", b"quiet"])), confirm("unsubscribe", "quiet", 0));
    }
    stop.store(true, Ordering::Relaxed);
    let sent = flood.join().unwrap();
    assert!(received > 0 && sent > 0, "the flood reached the listener ({received} of {sent})");
}

/// A subscriber that stops reading is closed once more than 32 MiB wait
/// for it (Redis's `client-output-buffer-limit pubsub` hard limit), and
/// the server's memory is let go; a subscriber that reads gets every
/// message meanwhile, and the publisher is never held up.
/// A connection to subscribe with and never read from. Its receive buffer
/// is fixed: autotuning may grow it to tcp_rmem's maximum (32 MiB here),
/// which would hold so much of what is sent that the server's share stays
/// under a limit (it did once, on a busy host).
fn slow_reader(server: &Server) -> TcpStream {
    let slow = server.connect();
    let rcvbuf: libc::c_int = 256 << 10;
    // SAFETY: setsockopt on our own socket with a c_int it reads.
    let set = unsafe {
        libc::setsockopt(
            std::os::fd::AsRawFd::as_raw_fd(&slow),
            libc::SOL_SOCKET,
            libc::SO_RCVBUF,
            (&rcvbuf as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(set, 0, "setsockopt SO_RCVBUF");
    slow
}

#[test]
fn a_subscriber_that_stops_reading_is_closed_at_the_limit() {
    let (_dir, server) = start();
    let mut slow = slow_reader(&server);
    request(&mut slow, &encode(&[b"SUBSCRIBE", b"big"]));
    let mut fast = server.connect();
    fast.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    request(&mut fast, &encode(&[b"SUBSCRIBE", b"big"]));
    let messages = 48;
    let read = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let reader = {
        let read = read.clone();
        std::thread::spawn(move || {
            let mut sizes = Vec::new();
            for _ in 0..messages {
                let message = read_reply(&mut fast);
                sizes.push(message.len());
                read.fetch_add(1, Ordering::Release);
            }
            (sizes, fast)
        })
    };
    let client = redis::Client::open(server.url()).unwrap();
    let mut publisher = client.get_connection().unwrap();
    let payload = vec![b'x'; 1 << 20];
    let mut receivers = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(30);
    for sent in 0..messages {
        // At most 8 MiB ahead of the reading subscriber, which a slower
        // reader than the publisher would otherwise pass the limit too.
        while sent > read.load(Ordering::Acquire) + 8 {
            assert!(
                Instant::now() < deadline,
                "the reading subscriber got {} of {sent} messages",
                read.load(Ordering::Acquire)
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        receivers.push(publisher.publish::<_, _, i64>("big", &payload).unwrap());
    }
    let (sizes, _fast) = reader.join().unwrap();
    assert!(sizes.iter().all(|&size| size > 1 << 20), "the reading subscriber got every message whole");
    assert_eq!(receivers[0], 2);
    // Dropped once past the limit; as in Redis, the close may finish after
    // the PUBLISH that passed it (on a loaded host, after the last one).
    let deadline = Instant::now() + Duration::from_secs(10);
    while numsub(&mut publisher, "big") != 1 {
        assert!(Instant::now() < deadline, "the slow subscriber was never dropped: {receivers:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(publisher.publish::<_, _, i64>("big", "after").unwrap(), 1, "{receivers:?}");
    // The slow client finds its connection closed after what was sent.
    slow.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut sink = Vec::new();
    let _ = slow.read_to_end(&mut sink);
    assert!(sink.len() < 40 << 20, "{} bytes reached the slow client", sink.len());
    let clients: String = redis::cmd("CLIENT").arg("LIST").query(&mut publisher).unwrap();
    assert_eq!(clients.lines().filter(|line| line.contains("flags=P")).count(), 1, "{clients}");
}

/// `client-output-buffer-limit pubsub 0 1mb 1`: a subscriber past the soft
/// limit is kept for its second, then closed by the next message.
#[test]
fn a_subscriber_past_the_soft_limit_is_closed_after_its_seconds() {
    let (_dir, server) = start();
    let mut slow = slow_reader(&server);
    request(&mut slow, &encode(&[b"SUBSCRIBE", b"soft"]));
    let client = redis::Client::open(server.url()).unwrap();
    let mut publisher = client.get_connection().unwrap();
    let mut set = redis::cmd("CONFIG");
    set.arg("SET").arg("client-output-buffer-limit").arg("pubsub 0 1mb 1");
    set.query::<()>(&mut publisher).unwrap();
    let limits: Vec<String> =
        redis::cmd("CONFIG").arg("GET").arg("client-output-buffer-limit").query(&mut publisher).unwrap();
    assert!(limits[1].ends_with("pubsub 0 1048576 1"), "{limits:?}");
    // Normal clients' output has no limit here: another value is refused.
    let mut normal = redis::cmd("CONFIG");
    normal.arg("SET").arg("client-output-buffer-limit").arg("normal 1mb 0 0");
    let refused = normal.query::<()>(&mut publisher).unwrap_err().to_string();
    assert!(refused.contains("only `normal 0 0 0`"), "{refused}");
    // 16 MiB: past what the sockets' buffers hold, past the soft limit.
    let payload = vec![b'x'; 1 << 20];
    let started = Instant::now();
    for _ in 0..16 {
        assert_eq!(publisher.publish::<_, _, i64>("soft", &payload).unwrap(), 1);
    }
    if started.elapsed() < Duration::from_millis(900) {
        assert_eq!(numsub(&mut publisher, "soft"), 1, "past the soft limit for less than its second: kept");
    }
    std::thread::sleep(Duration::from_millis(1500));
    publisher.publish::<_, _, i64>("soft", "later").unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    while numsub(&mut publisher, "soft") != 0 {
        assert!(Instant::now() < deadline, "the subscriber past the soft limit was never dropped");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// `--notify-keyspace-events Ex`: a key removed by active expiry is told on
/// `__keyevent@0__:expired` (within Redis's 10 Hz cycle), and a write of
/// another class is not; with the setting off again, nothing is.
#[test]
fn expired_keys_are_told_when_asked() {
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &["--notify-keyspace-events", "Ex"]);
    let mut admin = server.connect();
    let setting = request(&mut admin, &encode(&[b"CONFIG", b"GET", b"notify-keyspace-events"]));
    assert_eq!(setting, b"*2\r\n$22\r\nnotify-keyspace-events\r\n$2\r\nxE\r\n", "set by the flag");
    let mut listener = server.connect();
    listener.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    request(&mut listener, &encode(&[b"SUBSCRIBE", b"__keyevent@0__:expired", b"__keyevent@0__:set"]));
    read_reply(&mut listener);
    let sent = Instant::now();
    request(&mut admin, &encode(&[b"SET", b"short", b"v", b"PX", b"50"]));
    assert_eq!(read_reply(&mut listener), b"*3\r\n$7\r\nmessage\r\n$22\r\n__keyevent@0__:expired\r\n$5\r\nshort\r\n");
    assert!(sent.elapsed() >= Duration::from_millis(50));
    assert_eq!(request(&mut admin, &encode(&[b"EXISTS", b"short"])), b":0\r\n");
    // Off again: no event for the next expiry.
    assert_eq!(request(&mut admin, &encode(&[b"CONFIG", b"SET", b"notify-keyspace-events", b""])), b"+OK\r\n");
    request(&mut admin, &encode(&[b"SET", b"short", b"v", b"PX", b"10"]));
    std::thread::sleep(Duration::from_millis(400));
    listener.write_all(&encode(&[b"PING"])).unwrap();
    assert_eq!(read_reply(&mut listener), b"*2\r\n$4\r\npong\r\n$0\r\n\r\n", "no event once off");
}

/// Among 100,000 keys, an expiring key is dropped and told about within
/// the 10 Hz cycle, as in Redis (the index of expiring keys finds it: a
/// walk of the key space, 1,000 keys a step, took 10 s to come round);
/// after a restart the keys written before are found again, and INFO
/// counts them.
#[test]
fn expiring_keys_are_dropped_on_time_among_many() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut server = Server::start(&path, &["--notify-keyspace-events", "Ex"]);
    let mut admin = server.connect();
    common::set_keys(&mut admin, 100_000);
    let mut listener = server.connect();
    listener.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    request(&mut listener, &encode(&[b"SUBSCRIBE", b"__keyevent@0__:expired"]));
    let info =
        |admin: &mut TcpStream| String::from_utf8_lossy(&request(admin, &encode(&[b"INFO", b"keyspace"]))).into_owned();
    // Wait for the pass over the keys written before (then `expires` shows).
    let deadline = Instant::now() + Duration::from_secs(30);
    while !info(&mut admin).contains("db0:keys=100000,expires=0,") {
        assert!(Instant::now() < deadline, "{}", info(&mut admin));
        std::thread::sleep(Duration::from_millis(50));
    }
    for round in 0..5 {
        let key = format!("short:{round}");
        let sent = Instant::now();
        request(&mut admin, &encode(&[b"SET", key.as_bytes(), b"v", b"PX", b"200"]));
        let event = read_reply(&mut listener);
        let elapsed = sent.elapsed();
        assert_eq!(
            event,
            format!("*3\r\n$7\r\nmessage\r\n$22\r\n__keyevent@0__:expired\r\n${}\r\n{key}\r\n", key.len()).into_bytes()
        );
        // Expiry times are whole milliseconds (as Redis's): by this finer
        // clock the event may come up to 1 ms before the 200 (199.83 ms
        // once in CI).
        assert!(elapsed >= Duration::from_millis(199) && elapsed < Duration::from_millis(1500), "{elapsed:?}");
    }
    // Two keys expiring in 8 and 60 s: INFO counts them; EXPIRE and
    // PERSIST move them.
    request(&mut admin, &encode(&[b"SET", b"later", b"v", b"EX", b"60"]));
    request(&mut admin, &encode(&[b"SET", b"soon", b"v", b"EX", b"8"]));
    let soon = Instant::now() + Duration::from_secs(8);
    request(&mut admin, &encode(&[b"EXPIRE", b"key:7", b"100"]));
    request(&mut admin, &encode(&[b"PERSIST", b"key:7"]));
    assert!(info(&mut admin).contains("db0:keys=100002,expires=2,avg_ttl="), "{}", info(&mut admin));
    server.kill();
    let server = Server::start(&path, &["--notify-keyspace-events", "Ex"]);
    let mut admin = server.connect();
    let mut listener = server.connect();
    listener.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    request(&mut listener, &encode(&[b"SUBSCRIBE", b"__keyevent@0__:expired"]));
    // Found again after the restart, and dropped on time.
    assert!(Instant::now() < soon, "the restart took too long for this check");
    assert_eq!(read_reply(&mut listener), b"*3\r\n$7\r\nmessage\r\n$22\r\n__keyevent@0__:expired\r\n$4\r\nsoon\r\n");
    let late = Instant::now().saturating_duration_since(soon);
    assert!(late < Duration::from_millis(1500), "{late:?} late");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !info(&mut admin).contains("db0:keys=100001,expires=1,") {
        assert!(Instant::now() < deadline, "{}", info(&mut admin));
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(request(&mut admin, &encode(&[b"FLUSHALL"])), b"+OK\r\n");
    request(&mut admin, &encode(&[b"SET", b"x", b"v"]));
    assert!(info(&mut admin).contains("db0:keys=1,expires=0,"), "{}", info(&mut admin));
}
