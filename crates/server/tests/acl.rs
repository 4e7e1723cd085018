//! ACL rules against a real redis-server: the same SETUSER rules (commands,
//! categories, subcommands, key patterns with read and write permissions,
//! channels, selectors) give the same users (GETUSER, LIST), the same
//! DRYRUN verdicts, the same errors, and the same refusals of the commands
//! themselves. Redis lists single-command rules and ACL CAT in its command
//! dict's order, which is random per process: those are compared sorted.

mod common;

use std::net::TcpStream;

use common::{encode, request, RedisServer, Server};
use rand::rngs::StdRng;
use rand::seq::SliceRandom;
use rand::{Rng, SeedableRng};

fn send(stream: &mut TcpStream, args: &[&str]) -> String {
    let args: Vec<&[u8]> = args.iter().map(|arg| arg.as_bytes()).collect();
    normalized(&String::from_utf8_lossy(&request(stream, &encode(&args))))
}

fn line(stream: &mut TcpStream, line: &str) -> String {
    let words: Vec<String> = line.split(' ').map(|word| word.replace("\\x20", " ")).collect();
    format!("{line} -> {}", send(stream, &words.iter().map(String::as_str).collect::<Vec<_>>()))
}

/// Runs `session` (given a port) against a real redis-server and
/// against ScaledKV, and compares what each saw, line by line.
fn compare_with_redis(session: impl Fn(u16) -> Vec<String>) {
    let Some(redis) = RedisServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let server = Server::start(&dir.path().join("db"), &[]);
    let (expected, got) = (session(redis.port), session(server.port));
    for (expected, got) in expected.iter().zip(&got) {
        assert_eq!(got, expected);
    }
    assert_eq!(got.len(), expected.len());
}

/// ACL LOG, its ages and client descriptions masked.
fn masked_acl_log(stream: &mut TcpStream) -> String {
    let reply = send(stream, &["ACL", "LOG"]);
    let mut lines: Vec<&str> = reply.split("\r\n").collect();
    for i in 2..lines.len() {
        if lines[i - 2] == "age-seconds" || lines[i - 2] == "client-info" {
            (lines[i - 1], lines[i]) = ("$masked", "masked");
        }
    }
    lines.join("\r\n")
}

/// The reply with each run of single-command rules (`+get -config|set`,
/// in Redis's random dict order) sorted.
fn normalized(reply: &str) -> String {
    let lines = reply.split("\r\n").map(|line| {
        let mut words: Vec<String> = line.split(' ').map(str::to_string).collect();
        let single = |w: &String| (w.starts_with('+') || w.starts_with('-')) && !w.contains('@') && w.len() > 1;
        let mut i = 0;
        while i < words.len() {
            if !single(&words[i]) {
                i += 1;
                continue;
            }
            let start = i;
            while i < words.len() && single(&words[i]) && (i == start || !words[i - 1].ends_with(')')) {
                i += 1;
            }
            let closes = words[i - 1].ends_with(')');
            let run = &mut words[start..i];
            if closes {
                run[run.len() - 1].pop();
            }
            run.sort();
            if closes {
                run[run.len() - 1].push(')');
            }
        }
        words.join(" ")
    });
    lines.collect::<Vec<_>>().join("\r\n")
}

/// Commands whose DRYRUN verdicts tell the rules apart: keys read, written
/// or both, subcommands, first arguments, channels and patterns.
const PROBES: &[&str] = &[
    "get a1",
    "get r1",
    "get w1",
    "set w1 v",
    "set r1 v",
    "set b1 v GET",
    "copy r1 w1",
    "copy w1 r1",
    "mget a1 r2 w3 b4",
    "incr b1",
    "append w1 x",
    "exists r1 w1",
    "config get maxmemory",
    "config set maxmemory 1",
    "client id",
    "client kill id 1",
    "select 0",
    "select 1",
    "publish ch1 m",
    "publish exact m",
    "subscribe ch1 exact other",
    "psubscribe ch*",
    "psubscribe ch1",
    "object encoding a1",
    "eval return 2 a1 w1",
    "evalsha 0000 1 r1",
    "sort r1 BY x STORE w1",
    "bitfield b1 GET u8 0",
    "bitfield b1 SET u8 0 1",
    "xread COUNT 1 STREAMS r1 r2 0 0",
    "zunionstore w1 2 r1 r2",
    "hset a1 f v",
    "lmove r1 w1 LEFT RIGHT",
    "flushall",
    "keys *",
    "acl whoami",
    "acl setuser x",
    "ping",
    "auth pw",
    "memory usage a1",
    "xinfo stream r1",
    "georadius w1 0 0 1 km STORE w2",
    "debug object a1",
    "migrate h 1 '' 0 5 KEYS r1 w1",
];

const RULES: &[&str] = &[
    "+@all",
    "-@all",
    "allcommands",
    "nocommands",
    "+@read",
    "-@read",
    "+@write",
    "-@write",
    "+@dangerous",
    "-@dangerous",
    "+@admin",
    "-@admin",
    "-@keyspace",
    "+@keyspace",
    "+@string",
    "-@string",
    "-@fast",
    "+@slow",
    "+@hash",
    "+@pubsub",
    "-@pubsub",
    "-@scripting",
    "+@connection",
    "+@sortedset",
    "+@geo",
    "+@stream",
    "+@bitmap",
    "+get",
    "-get",
    "+set",
    "-set",
    "+config",
    "-config",
    "+config|get",
    "-config|set",
    "+client|id",
    "-client",
    "+client",
    "+select|0",
    "+acl|whoami",
    "-acl",
    "+object|encoding",
    "+xinfo|stream",
    "-memory|usage",
    "+memory",
    "+debug|object",
    "-flushall",
    "+migrate",
    "~*",
    "allkeys",
    "resetkeys",
    "~a*",
    "%R~r*",
    "%W~w*",
    "%RW~b*",
    "%R~b*",
    "&*",
    "allchannels",
    "resetchannels",
    "&ch*",
    "&exact",
    "(+get ~r*)",
    "(+@write %W~*)",
    "(-@all +publish &ch1)",
    "clearselectors",
    "+nosuch",
    "+config|get|x",
    "%X~k",
    "reset",
    "on",
    "off",
    "nopass",
];

#[test]
fn random_rules_make_the_users_redis_makes() {
    let seed: u64 = std::env::var("SCALEDKV_ACL_SEED").ok().and_then(|s| s.parse().ok()).unwrap_or(7);
    let rounds: usize = std::env::var("SCALEDKV_ACL_ROUNDS").ok().and_then(|s| s.parse().ok()).unwrap_or(150);
    let session = |port: u16| -> Vec<String> {
        let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
        let mut rng = StdRng::seed_from_u64(seed);
        let mut seen = Vec::new();
        for round in 0..rounds {
            // A few users, changed rule by rule: errors leave them as they were.
            let user = format!("u{}", round % 3);
            let count = rng.gen_range(1..=4);
            let rules: Vec<&str> = (0..count).map(|_| *RULES.choose(&mut rng).unwrap()).collect();
            let mut setuser = vec!["ACL", "SETUSER", &user];
            // Selectors split over arguments, as redis-cli sends them.
            let split: Vec<&str> = rules.iter().flat_map(|rule| rule.split(' ')).collect();
            setuser.extend(&split);
            seen.push(format!("{setuser:?} -> {}", send(&mut stream, &setuser)));
            seen.push(format!("GETUSER {user} -> {}", send(&mut stream, &["ACL", "GETUSER", &user])));
            for probe in PROBES.choose_multiple(&mut rng, 8) {
                let mut dryrun = vec!["ACL", "DRYRUN", &user];
                dryrun.extend(probe.split(' ').map(|w| if w == "''" { "" } else { w }));
                seen.push(format!("{dryrun:?} -> {}", send(&mut stream, &dryrun)));
            }
        }
        seen.push(format!("LIST -> {}", send(&mut stream, &["ACL", "LIST"])));
        seen
    };
    compare_with_redis(session);
}

#[test]
fn partial_permissions_answer_as_redis_does() {
    let session = |port: u16| -> Vec<String> {
        let connect = || TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (mut admin, mut user) = (connect(), connect());
        let mut seen = Vec::new();
        for command in [
            "ACL SETUSER app on >pw +@read +@write -@dangerous -flushall +config|get %R~cfg:* ~app:* &app.*",
            "ACL SETUSER app (+@hash ~h:*)",
            "ACL GETUSER app",
            "ACL SETUSER ro on nopass -@all +get +mget +select|0 %R~*",
            "ACL SETUSER bad +nosuch",
            "ACL SETUSER bad +@nosuch",
            "ACL SETUSER bad ~* ~x",
            "ACL SETUSER bad &* &x",
            "ACL SETUSER bad +config|get|x",
            "ACL SETUSER bad (+get",
            "ACL SETUSER bad %Q~x",
            "ACL GETUSER bad",
            "ACL LIST",
            "ACL CAT nosuch",
            "ACL DRYRUN app config set maxmemory 1",
            "ACL DRYRUN app config nosuch",
            "ACL DRYRUN app config get",
            "ACL DRYRUN app get cfg:1",
            "ACL DRYRUN app set cfg:1 v",
            "ACL DRYRUN app hset h:1 f v",
            "ACL DRYRUN app hset x f v",
            "ACL LOG RESET",
            "SET cfg:1 one",
            "SET app:1 two",
            "SET other three",
        ] {
            seen.push(line(&mut admin, command));
        }
        for command in [
            "AUTH app pw",
            "GET cfg:1",
            "SET cfg:1 x",
            "GET app:1",
            "SET app:1 x",
            "GET other",
            "MGET app:1 other",
            "CONFIG GET maxmemory",
            "CONFIG SET maxmemory 0",
            "FLUSHALL",
            "KEYS *",
            "HSET h:1 f v",
            "HGET h:1 f",
            "HSET app:h f v",
            "PUBLISH app.news m",
            "PUBLISH other m",
            "SUBSCRIBE app.x news",
            "MULTI",
            "GET other",
            "GET app:1",
            "EXEC",
            "EVAL return\\x20redis.call('get','other') 0",
            "EVAL return\\x20redis.call('get','app:1') 0",
            "SORT app:l BY nosort",
            "SORT app:l BY w*",
            "SORT app:l GET #",
            "AUTH ro x",
            "GET other",
            "SELECT 0",
            "SELECT 1",
            "SET other x",
        ] {
            seen.push(line(&mut user, command));
        }
        seen.push(masked_acl_log(&mut admin));
        // The default user's permissions and password.
        for command in [
            "ACL GETUSER default",
            "ACL SETUSER default -flushall -@dangerous +info",
            "FLUSHALL",
            "ACL DRYRUN default flushall",
            "GET other",
            "ACL GETUSER default",
            "ACL SETUSER default +@all >secret",
            "ACL LIST",
        ] {
            seen.push(line(&mut admin, command));
        }
        let mut fresh = connect();
        for command in ["PING", "AUTH nope", "AUTH secret", "PING", "ACL WHOAMI"] {
            seen.push(line(&mut fresh, command));
        }
        for command in ["ACL SETUSER default nopass", "AUTH x", "ACL DELUSER default"] {
            seen.push(line(&mut admin, command));
        }
        // A subscriber whose user loses the channel is closed, as in Redis.
        let mut subscriber = connect();
        seen.push(line(&mut admin, "ACL SETUSER app +subscribe +psubscribe"));
        for command in ["AUTH app pw", "SUBSCRIBE app.news", "PSUBSCRIBE app.*"] {
            seen.push(line(&mut subscriber, command));
        }
        let closed = |stream: &mut TcpStream| {
            std::io::Write::write_all(stream, &encode(&[b"PING"])).is_err() || common::try_read_reply(stream).is_none()
        };
        seen.push(line(&mut admin, "ACL SETUSER app resetchannels &app.news &app.*"));
        seen.push(format!("kept: {}", !closed(&mut subscriber)));
        seen.push(line(&mut admin, "ACL SETUSER app resetchannels &app.news"));
        seen.push(format!("closed: {}", closed(&mut subscriber)));
        // EXEC checks again what its commands may do.
        let mut queued = connect();
        for command in ["AUTH app pw", "MULTI", "GET app:1", "SET app:2 x"] {
            seen.push(line(&mut queued, command));
        }
        seen.push(line(&mut admin, "ACL SETUSER app resetkeys %R~app:*"));
        seen.push(line(&mut queued, "EXEC"));
        // ACL CAT in a sorted order.
        for category in ["read", "dangerous", "connection"] {
            let reply = send(&mut admin, &["ACL", "CAT", category]);
            let mut names: Vec<&str> = reply.split("\r\n").skip(1).filter(|l| !l.starts_with('$')).collect();
            names.sort();
            seen.push(format!("CAT {category} -> {names:?}"));
        }
        seen
    };
    compare_with_redis(session);
}

/// Users with every or no permission: the same sessions on two
/// connections, the second authenticating as them, answer as Redis does: SETUSER's rules and errors, GETUSER, LIST,
/// USERS, DRYRUN, AUTH and HELLO as a user, NOPERM for commands, keys and
/// channels (inside MULTI too), ACL LOG's entries (but ages and client
/// descriptions), DELUSER closing the user's connections, RESET.
#[test]
fn acl_users_answer_as_redis_does() {
    let session = |port: u16| -> Vec<String> {
        let connect = || TcpStream::connect(("127.0.0.1", port)).unwrap();
        let (mut admin, mut user) = (connect(), connect());
        let mut seen = Vec::new();
        fn log(seen: &mut Vec<String>, stream: &mut TcpStream, command: &str) {
            seen.push(line(stream, command));
        }
        for line in [
            "ACL SETUSER alice on >pw +@all ~* &*",
            "ACL GETUSER alice",
            "ACL SETUSER bob",
            "ACL GETUSER bob",
            "ACL SETUSER carol on nopass allcommands allkeys allchannels",
            "ACL SETUSER carol foo",
            "ACL SETUSER carol ON skip-sanitize-payload",
            "ACL GETUSER carol",
            "ACL SETUSER dave on #abc",
            "ACL SETUSER dave on #aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa >x <x <y",
            "ACL GETUSER dave",
            "ACL SETUSER dave !aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
            "ACL SETUSER dave reset",
            "ACL LIST",
            "ACL USERS",
            "ACL DRYRUN bob get k",
            "ACL DRYRUN alice get k",
            "ACL SETUSER bob on >b +@all",
            "ACL DRYRUN bob get k",
            "ACL DRYRUN bob ping",
            "ACL DRYRUN bob publish ch m",
            "ACL LOG RESET",
        ] {
            log(&mut seen, &mut admin, line);
        }
        for line in [
            "AUTH bob wrong",
            "AUTH bob b",
            "ACL WHOAMI",
            "PING",
            "GET k",
            "PUBLISH ch m",
            "SUBSCRIBE ch",
            "MULTI",
            "GET k",
            "EXEC",
            // A script runs with its caller's permissions.
            "EVAL return\\x20redis.call('get','k') 0",
            "EVAL return\\x20redis.call('publish','ch','m') 0",
            "EVAL return\\x20redis.call('ping') 0",
        ] {
            log(&mut seen, &mut user, line);
        }
        log(&mut seen, &mut admin, "ACL SETUSER bob -@all");
        for line in ["PING", "AUTH carol anything", "ACL WHOAMI", "SET k v", "GET k"] {
            log(&mut seen, &mut user, line);
        }
        let hello = request(&mut user, &encode(&[b"HELLO", b"2", b"AUTH", b"alice", b"pw"]));
        assert!(hello.starts_with(b"*14\r\n"), "{}", String::from_utf8_lossy(&hello));
        for line in ["ACL WHOAMI", "RESET", "ACL WHOAMI", "AUTH bob b", "GET x"] {
            log(&mut seen, &mut user, line);
        }
        seen.push(masked_acl_log(&mut admin));
        log(&mut seen, &mut admin, "ACL DELUSER bob nobody");
        let closed = std::io::Write::write_all(&mut user, &encode(&[b"PING"])).is_err()
            || common::try_read_reply(&mut user).is_none();
        seen.push(format!("bob's connection closed: {closed}"));
        log(&mut seen, &mut admin, "ACL USERS");
        seen
    };
    compare_with_redis(session);
}
