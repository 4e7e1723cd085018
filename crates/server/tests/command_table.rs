//! COMMAND against a real `redis-server`: every command ScaledKV has is
//! described as Redis 7 describes it (flags, key range, categories, tips,
//! key specifications, subcommands; its documentation, arguments and
//! all, which redis-cli's hints read), byte for byte in RESP2 and RESP3;
//! COMMAND LIST names Redis's commands and subcommands but those ScaledKV
//! lacks; COMMAND GETKEYS and GETKEYSANDFLAGS find the keys Redis finds,
//! with its errors. Client libraries route by these (go-redis's Ring, the
//! cluster clients). Skips with a notice when `redis-server` is not
//! installed; `.ci/run` installs it.

mod common;

use std::collections::BTreeSet;
use std::net::TcpStream;

use common::{encode, request, RedisServer, Server};

fn ask(port: u16, resp3: bool, words: &[&str]) -> Vec<u8> {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    if resp3 {
        request(&mut stream, b"HELLO 3\r\n");
    }
    let args: Vec<&[u8]> = words.iter().map(|w| w.as_bytes()).collect();
    request(&mut stream, &encode(&args))
}

fn names(port: u16) -> BTreeSet<String> {
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
    redis::cmd("COMMAND").arg("LIST").query(&mut con).unwrap()
}

/// COMMAND INFO of `name` with its subcommands' entries in order: Redis
/// lists them in its dict's order, which changes from run to run.
fn info_in_order(port: u16, name: &str) -> redis::Value {
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
    let mut info: redis::Value = redis::cmd("COMMAND").arg("INFO").arg(name).query(&mut con).unwrap();
    if let redis::Value::Array(entries) = &mut info {
        if let Some(redis::Value::Array(entry)) = entries.first_mut() {
            if let Some(redis::Value::Array(subcommands)) = entry.get_mut(9) {
                subcommands.sort_by_key(|sub| format!("{sub:?}"));
            }
        }
    }
    info
}

/// COMMAND DOCS of `name` (a container) with its subcommands' docs in
/// order (RESP2: flat arrays of keys and values).
fn docs_in_order(port: u16, name: &str) -> redis::Value {
    let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
    let mut docs: redis::Value = redis::cmd("COMMAND").arg("DOCS").arg(name).query(&mut con).unwrap();
    if let redis::Value::Array(reply) = &mut docs {
        if let Some(redis::Value::Array(fields)) = reply.get_mut(1) {
            let at = fields.iter().position(|f| *f == redis::Value::BulkString(b"subcommands".to_vec()));
            if let Some(redis::Value::Array(subs)) = at.and_then(|at| fields.get_mut(at + 1)) {
                let mut pairs: Vec<Vec<redis::Value>> = subs.chunks(2).map(<[_]>::to_vec).collect();
                pairs.sort_by_key(|pair| format!("{:?}", pair[0]));
                *subs = pairs.concat();
            }
        }
    }
    docs
}

#[test]
fn every_command_is_described_as_redis_describes_it() {
    let Some(redis) = RedisServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &[]);
    let (our_names, their_names) = (names(ours.port), names(redis.port));
    let missing: BTreeSet<&String> = their_names.difference(&our_names).collect();
    assert!(missing.is_empty(), "ScaledKV lacks {missing:?}");
    assert!(our_names.is_subset(&their_names), "not Redis's: {:?}", our_names.difference(&their_names));
    assert!(our_names.len() > 300, "commands and subcommands: {}", our_names.len());

    let containers: BTreeSet<&str> = our_names.iter().filter_map(|name| name.split_once('|')).map(|(c, _)| c).collect();
    for name in &our_names {
        if containers.contains(name.as_str()) {
            assert_eq!(info_in_order(ours.port, name), info_in_order(redis.port, name), "COMMAND INFO {name}");
            assert_eq!(docs_in_order(ours.port, name), docs_in_order(redis.port, name), "COMMAND DOCS {name}");
            continue;
        }
        for (what, resp3) in [("INFO", false), ("INFO", true), ("DOCS", false), ("DOCS", true)] {
            let words = ["COMMAND", what, name];
            let (our, their) = (ask(ours.port, resp3, &words), ask(redis.port, resp3, &words));
            let (our, their) = (String::from_utf8_lossy(&our), String::from_utf8_lossy(&their));
            assert_eq!(our, their, "COMMAND {what} {name}, RESP3 {resp3}");
        }
    }
}

#[test]
fn command_getkeys_finds_the_keys_redis_finds() {
    let Some(redis) = RedisServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &[]);
    let cases = [
        "GETKEYS get k",
        "GETKEYS set a b",
        "GETKEYSANDFLAGS set a b",
        "GETKEYSANDFLAGS set a b GET",
        "GETKEYS mset a 1 b 2",
        "GETKEYSANDFLAGS copy a b",
        "GETKEYS zunionstore d 2 a b WEIGHTS 1 2",
        "GETKEYSANDFLAGS zunionstore d 2 a b",
        "GETKEYS zunionstore d 5 a",
        "GETKEYS eval s 2 a b c",
        "GETKEYS eval s 0",
        "GETKEYSANDFLAGS sort l BY w* GET # STORE d",
        "GETKEYSANDFLAGS sort_ro l",
        "GETKEYSANDFLAGS migrate h 1 '' 0 5 KEYS a b",
        "GETKEYSANDFLAGS migrate h 1 k 0 5",
        "GETKEYS xread COUNT 2 STREAMS a b 0 0",
        "GETKEYSANDFLAGS xreadgroup GROUP g c STREAMS a >",
        "GETKEYSANDFLAGS lmove a b LEFT RIGHT",
        "GETKEYSANDFLAGS bitfield k GET u8 0",
        "GETKEYSANDFLAGS bitfield k INCRBY u8 0 1",
        "GETKEYS object encoding k",
        "GETKEYS georadius g 0 0 1 km STORE d",
        // Redis's errors.
        "GETKEYS",
        "GETKEYS get",
        "GETKEYS ping x",
        "GETKEYS nosuch a",
        "GETKEYS get a b",
        "GETKEYS config get x",
        "LIST FILTERBY module x",
        "LIST FILTERBY foo x",
        "LIST FILTERBY aclcat nosuch",
        "LIST FILTERBY",
        "INFO nosuch get",
        "INFO CONFIG|GET",
        "DOCS nosuch get config|set",
        "HELP",
        "HELP x",
    ];
    for case in cases {
        let mut words = vec!["COMMAND"];
        words.extend(case.split(' ').map(|w| if w == "''" { "" } else { w }));
        for resp3 in [false, true] {
            let (our, their) = (ask(ours.port, resp3, &words), ask(redis.port, resp3, &words));
            assert_eq!(String::from_utf8_lossy(&our), String::from_utf8_lossy(&their), "COMMAND {case}, RESP3 {resp3}");
        }
    }
    // Filters, in Redis's dict order there: compared as sets.
    for filter in [["aclcat", "stream"], ["pattern", "x*"], ["pattern", "config|*"]] {
        let list = |port: u16| -> BTreeSet<String> {
            let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
            redis::cmd("COMMAND").arg("LIST").arg("FILTERBY").arg(&filter[..]).query(&mut con).unwrap()
        };
        let (our, their) = (list(ours.port), list(redis.port));
        assert!(!our.is_empty() && our == their, "COMMAND LIST FILTERBY {filter:?}: {our:?} against {their:?}");
    }
}

#[test]
fn modules_are_listed_as_none_and_not_loaded() {
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &[]);
    assert_eq!(ask(ours.port, false, &["MODULE", "LIST"]), b"*0\r\n");
    let refused = b"-ERR ScaledKV does not load Redis modules\r\n";
    assert_eq!(ask(ours.port, false, &["MODULE", "LOAD", "/usr/lib/redis/modules/x.so"]), refused);
    assert_eq!(ask(ours.port, false, &["MODULE", "LOADEX", "/x.so", "ARGS", "a"]), refused);
    assert_eq!(ask(ours.port, true, &["LOLWUT"]), b"=22\r\ntxt:Redis ver. 7.0.15\n\r\n");
}

#[test]
fn restore_asking_restores_as_restore_does_outside_a_cluster() {
    let Some(redis) = RedisServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let ours = Server::start(dir.path(), &[]);
    let mut seen = Vec::new();
    for port in [ours.port, redis.port] {
        let mut con = redis::Client::open(format!("redis://127.0.0.1:{port}/")).unwrap().get_connection().unwrap();
        let _: () = redis::cmd("RPUSH").arg("l").arg(&["a", "b", "c"]).query(&mut con).unwrap();
        let payload: Vec<u8> = redis::cmd("DUMP").arg("l").query(&mut con).unwrap();
        let mut replies = Vec::new();
        for args in [&["m", "0"][..], &["m", "0"], &["m", "0", "REPLACE"], &["n", "x"]] {
            let reply =
                redis::cmd("RESTORE-ASKING").arg(args[0]).arg(args[1]).arg(&payload).arg(&args[2..]).query(&mut con);
            replies.push(format!("{:?}", reply.map(|v: redis::Value| v).map_err(|e| e.to_string())));
        }
        let copy: Vec<String> = redis::cmd("LRANGE").arg("m").arg(0).arg(-1).query(&mut con).unwrap();
        seen.push((replies, copy));
    }
    assert_eq!(seen[0], seen[1]);
    assert_eq!(seen[0].1, ["a", "b", "c"]);
}
