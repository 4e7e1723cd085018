//! MIGRATE: keys of every type move between ScaledKV servers and Redis
//! both ways with their expiry; the replies are Redis's, byte for byte;
//! the connection to a target is kept, tried again once it went stale,
//! and closed when idle; keys moved away stay gone after a SIGKILL, and
//! the target keeps what it acknowledged. The Redis parts skip with a
//! notice when `redis-server` is not installed (`.ci/run` installs it).

mod common;

use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{encode, free_port, request, RedisServer, Server};

fn send(stream: &mut TcpStream, words: &[&str]) -> String {
    let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
    String::from_utf8_lossy(&request(stream, &encode(&args))).into_owned()
}

fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).expect("connect");
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    stream
}

const KEYS: [&str; 8] = ["s", "h", "bh", "l", "st", "z", "bz", "x"];

/// One key of each type, big hashes and sorted sets included (ScaledKV
/// keeps those as tables of their own), `s` with 10 minutes to live.
fn fill(stream: &mut TcpStream) {
    assert_eq!(send(stream, &["SET", "s", "hello", "PX", "600000"]), "+OK\r\n");
    send(stream, &["HSET", "h", "f1", "a", "f2", "b", "f3", "c"]);
    let fields: Vec<String> = (0..3000).flat_map(|i| [format!("field:{i}"), format!("value:{i}")]).collect();
    let mut hset = vec!["HSET", "bh"];
    hset.extend(fields.iter().map(String::as_str));
    assert_eq!(send(stream, &hset), ":3000\r\n");
    send(stream, &["RPUSH", "l", "a", "b", "c", "a"]);
    send(stream, &["SADD", "st", "x", "y", "z"]);
    send(stream, &["ZADD", "z", "1", "a", "2.5", "b", "-3", "c"]);
    let members: Vec<String> = (0..2000).flat_map(|i| [format!("{}", i as f64 / 4.0), format!("m{i}")]).collect();
    let mut zadd = vec!["ZADD", "bz"];
    zadd.extend(members.iter().map(String::as_str));
    assert_eq!(send(stream, &zadd), ":2000\r\n");
    send(stream, &["XADD", "x", "1-1", "f", "v"]);
    send(stream, &["XADD", "x", "2-1", "g", "w"]);
}

/// What `fill` wrote, as read back: equal on two servers when the keys
/// moved whole.
fn contents(stream: &mut TcpStream) -> Vec<String> {
    let mut seen: Vec<String> = KEYS.iter().map(|key| send(stream, &["TYPE", key])).collect();
    for read in [
        &["GET", "s"][..],
        &["HMGET", "h", "f1", "f2", "f3"],
        &["HLEN", "bh"],
        &["HMGET", "bh", "field:0", "field:1234", "field:2999"],
        &["LRANGE", "l", "0", "-1"],
        &["SORT", "st", "ALPHA"],
        &["ZRANGE", "z", "0", "-1", "WITHSCORES"],
        &["ZCARD", "bz"],
        &["ZRANGE", "bz", "0", "3", "WITHSCORES"],
        &["ZSCORE", "bz", "m1999"],
        &["XRANGE", "x", "-", "+"],
    ] {
        seen.push(send(stream, read));
    }
    seen
}

fn migrate_all(from: &mut TcpStream, port: u16, options: &[&str]) -> String {
    let port = port.to_string();
    let mut words = vec!["MIGRATE", "127.0.0.1", &port, "", "0", "5000"];
    words.extend(options);
    words.push("KEYS");
    words.extend(KEYS);
    send(from, &words)
}

fn ttl_ms(stream: &mut TcpStream, key: &str) -> i64 {
    let reply = send(stream, &["PTTL", key]);
    reply.trim().trim_start_matches(':').parse().unwrap()
}

fn assert_gone(stream: &mut TcpStream) {
    let mut exists = vec!["EXISTS"];
    exists.extend(KEYS);
    assert_eq!(send(stream, &exists), ":0\r\n");
}

#[test]
fn migrate_moves_keys_of_every_type_with_their_expiry() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (Server::start(a_dir.path(), &[]), Server::start(b_dir.path(), &[]));
    let (mut a_con, mut b_con) = (a.connect(), b.connect());
    fill(&mut a_con);
    let written = contents(&mut a_con);
    assert_eq!(migrate_all(&mut a_con, b.port, &[]), "+OK\r\n");
    assert_gone(&mut a_con);
    assert_eq!(contents(&mut b_con), written);
    let ttl = ttl_ms(&mut b_con, "s");
    assert!(ttl > 590_000 && ttl <= 600_000, "the expiry moved with the key: {ttl} ms left");
    assert_eq!(ttl_ms(&mut b_con, "h"), -1, "no expiry where there was none");
    // Nothing left to move.
    assert_eq!(migrate_all(&mut a_con, b.port, &[]), "+NOKEY\r\n");

    let Some(redis) = RedisServer::start() else { return };
    let mut redis_con = connect(redis.port);
    // To Redis, keeping the copy here.
    assert_eq!(migrate_all(&mut b_con, redis.port, &["COPY"]), "+OK\r\n");
    assert_eq!(contents(&mut b_con), written);
    assert_eq!(contents(&mut redis_con), written);
    assert!(ttl_ms(&mut redis_con, "s") > 590_000);
    // And from Redis back to the first server, over nothing there.
    fill(&mut a_con);
    send(&mut a_con, &["SET", "s", "other"]);
    let reply = migrate_all(&mut redis_con, a.port, &[]);
    assert_eq!(reply, "-ERR Target instance replied with error: BUSYKEY Target key name already exists.\r\n");
    assert_eq!(migrate_all(&mut redis_con, a.port, &["REPLACE"]), "+OK\r\n");
    assert_gone(&mut redis_con);
    assert_eq!(contents(&mut a_con), written);
    assert!(ttl_ms(&mut a_con, "s") > 590_000);
}

/// The same MIGRATEs on a Redis source and on a ScaledKV one, each with
/// keys `a` to `e` and a Redis target of its own, get the same replies and
/// leave the same keys on both sides.
#[test]
fn migrate_replies_as_redis_does() {
    let Some(redis_source) = RedisServer::start() else { return };
    let (Some(redis_target), Some(our_target)) = (RedisServer::start_with(&[]), RedisServer::start_with(&[])) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &[]);
    let dead = free_port().to_string();
    let script = [
        "MIGRATE 127.0.0.1 {target} missing 0 1000",
        "MIGRATE 127.0.0.1 {target} a 0 1000 FOO",
        "MIGRATE 127.0.0.1 {target} a 0 1000 KEYS b",
        "MIGRATE 127.0.0.1 {target} a 0 x",
        "MIGRATE 127.0.0.1 {target} a x 1000",
        "MIGRATE 127.0.0.1 {target} a 0 1000 AUTH",
        "MIGRATE 127.0.0.1 {target} a 0 1000 AUTH2 u",
        "MIGRATE 127.0.0.1 {dead} a 0 1000",
        "MIGRATE 127.0.0.1 {target} a 0 0 COPY",
        "MIGRATE 127.0.0.1 {target} a 0 1000 COPY",
        "MIGRATE 127.0.0.1 {target} a 0 1000 COPY REPLACE",
        "MIGRATE 127.0.0.1 {target} a 0 1000",
        "EXISTS a",
        // b goes, a is refused (the target has it): the error, b gone.
        "SET a again",
        "MIGRATE 127.0.0.1 {target} '' 0 1000 KEYS a b missing",
        "EXISTS a b",
        "MIGRATE 127.0.0.1 {target} c 3 1000",
        "EXISTS c",
        "CONFIG SET requirepass-of-target pw",
        "MIGRATE 127.0.0.1 {target} d 0 1000",
        "MIGRATE 127.0.0.1 {target} d 0 1000 AUTH wrong",
        "MIGRATE 127.0.0.1 {target} d 0 1000 AUTH pw",
        "MIGRATE 127.0.0.1 {target} '' 0 1000 AUTH2 default pw KEYS e",
        "EXISTS a b c d e",
    ];
    let run = |source_port: u16, target: &RedisServer| -> (Vec<String>, Vec<String>) {
        let mut source = connect(source_port);
        let mut target_con = connect(target.port);
        for key in ["a", "b", "c", "d", "e"] {
            send(&mut source, &["SET", key, &format!("value of {key}")]);
        }
        let mut replies = Vec::new();
        for template in script {
            let line = template.replace("{target}", &target.port.to_string()).replace("{dead}", &dead);
            let words: Vec<&str> = line.split(' ').map(|w| if w == "''" { "" } else { w }).collect();
            if words.get(..3) == Some(&["CONFIG", "SET", "requirepass-of-target"][..]) {
                send(&mut target_con, &["CONFIG", "SET", "requirepass", words[3]]);
                send(&mut target_con, &["AUTH", words[3]]);
                continue;
            }
            replies.push(format!("{template} -> {}", send(&mut source, &words)));
        }
        let mut on_target = Vec::new();
        for db in ["0", "3"] {
            send(&mut target_con, &["SELECT", db]);
            on_target.push(send(&mut target_con, &["DBSIZE"]));
            on_target.push(send(&mut target_con, &["MGET", "a", "b", "c", "d", "e"]));
        }
        (replies, on_target)
    };
    let (theirs, their_target) = run(redis_source.port, &redis_target);
    let (ours_replies, our_target_keys) = run(ours.port, &our_target);
    for (their, our) in theirs.iter().zip(&ours_replies) {
        assert_eq!(our, their);
    }
    assert_eq!(our_target_keys, their_target);
}

/// Who is connected besides `me`: the other ids of CLIENT LIST.
fn other_clients(me: &mut TcpStream) -> Vec<String> {
    let list = send(me, &["CLIENT", "LIST"]);
    let mine = send(me, &["CLIENT", "ID"]).trim().trim_start_matches(':').to_string();
    let ids = list.split_whitespace().filter_map(|field| field.strip_prefix("id="));
    ids.filter(|id| *id != mine).map(str::to_string).collect()
}

/// INFO's `migrate_cached_sockets`.
fn cached_sockets(con: &mut TcpStream) -> u64 {
    let info = send(con, &["INFO", "stats"]);
    let line = info.lines().find_map(|line| line.strip_prefix("migrate_cached_sockets:"));
    line.expect("INFO stats has migrate_cached_sockets").trim().parse().unwrap()
}

#[test]
fn migrate_keeps_its_connection_tries_a_stale_one_again_and_closes_it_when_idle() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let a = Server::start(a_dir.path(), &[]);
    let mut b = Server::start(b_dir.path(), &[]);
    let mut a_con = a.connect();
    let target = b.port.to_string();
    for i in 0..4 {
        send(&mut a_con, &["SET", &format!("k{i}"), "v"]);
    }
    let migrate = |con: &mut TcpStream, key: &str| send(con, &["MIGRATE", "127.0.0.1", &target, key, "0", "2000"]);
    assert_eq!(migrate(&mut a_con, "k0"), "+OK\r\n");
    let mut b_con = b.connect();
    let first = other_clients(&mut b_con);
    assert_eq!(first.len(), 1, "one connection from the source: {first:?}");
    assert_eq!(migrate(&mut a_con, "k1"), "+OK\r\n");
    assert_eq!(other_clients(&mut b_con), first, "the same connection again");
    assert_eq!(cached_sockets(&mut a_con), 1);

    // The target restarts: the kept connection is dead, and a new one
    // takes the keys.
    let port = b.port;
    b.kill();
    b = Server::start_at(b_dir.path(), port, &[]);
    assert_eq!(migrate(&mut a_con, "k2"), "+OK\r\n");
    let mut b_con = b.connect();
    assert_eq!(send(&mut b_con, &["MGET", "k0", "k1", "k2"]), "*3\r\n$1\r\nv\r\n$1\r\nv\r\n$1\r\nv\r\n");
    assert_eq!(other_clients(&mut b_con).len(), 1);

    // Unused for 10 s, it is closed.
    let deadline = Instant::now() + Duration::from_secs(20);
    while !other_clients(&mut b_con).is_empty() {
        assert!(Instant::now() < deadline, "MIGRATE's connection still open after 20 s idle");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(cached_sockets(&mut a_con), 0);
    // A port where no Redis server answers (this one answers as a web
    // server would): an error, the key kept; Redis would take the line
    // for success and delete it.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let web_port = listener.local_addr().unwrap().port().to_string();
    std::thread::spawn(move || {
        for stream in listener.incoming().take(2) {
            let mut stream = stream.unwrap();
            let mut request = [0u8; 4096];
            let _ = std::io::Read::read(&mut stream, &mut request);
            let _ = std::io::Write::write_all(&mut stream, b"HTTP/1.1 400 Bad Request\r\n\r\n");
        }
    });
    let reply = send(&mut a_con, &["MIGRATE", "127.0.0.1", &web_port, "k3", "0", "2000"]);
    assert_eq!(reply, "-IOERR error or timeout reading to target instance\r\n");
    assert_eq!(send(&mut a_con, &["EXISTS", "k3"]), ":1\r\n");
    // A target that is gone: Redis's error, the key kept.
    b.kill();
    assert_eq!(migrate(&mut a_con, "k3"), "-IOERR error or timeout writing to target instance\r\n");
    assert_eq!(send(&mut a_con, &["EXISTS", "k3"]), ":1\r\n");
}

/// Keys MIGRATE reported moved are gone from the source after a SIGKILL,
/// and every one of them is on the target after its own SIGKILL, byte for
/// byte.
#[test]
fn keys_migrated_stay_moved_across_a_crash_of_either_side() {
    let (a_dir, b_dir) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let mut a = Server::start(a_dir.path(), &["--durability", "sync"]);
    let mut b = Server::start(b_dir.path(), &["--durability", "sync"]);
    let mut a_con = a.connect();
    let value = |i: usize| format!("{i}:{}", "x".repeat(i % 700));
    for i in 0..500 {
        send(&mut a_con, &["SET", &format!("key:{i}"), &value(i)]);
    }
    let target = b.port.to_string();
    let mut moved = Vec::new();
    for batch in (0..400).step_by(50) {
        let keys: Vec<String> = (batch..batch + 50).map(|i| format!("key:{i}")).collect();
        let mut words = vec!["MIGRATE", "127.0.0.1", &target, "", "0", "5000", "KEYS"];
        words.extend(keys.iter().map(String::as_str));
        assert_eq!(send(&mut a_con, &words), "+OK\r\n");
        moved.extend(batch..batch + 50);
    }
    a.kill();
    b.kill();
    let (a, b) = (Server::start_at(a_dir.path(), 0, &[]), Server::start_at(b_dir.path(), 0, &[]));
    let (mut a_con, mut b_con) = (a.connect(), b.connect());
    for i in 0..500 {
        let key = format!("key:{i}");
        let expected = format!("${}\r\n{}\r\n", value(i).len(), value(i));
        let (here, there) = (send(&mut a_con, &["GET", &key]), send(&mut b_con, &["GET", &key]));
        if moved.contains(&i) {
            assert_eq!((here.as_str(), there), ("$-1\r\n", expected), "{key}");
        } else {
            assert_eq!((here, there.as_str()), (expected, "$-1\r\n"), "{key}");
        }
    }
}
