//! ScaledKV under Redis Sentinel: three sentinels (Debian's `redis-server
//! --sentinel`) watch a ScaledKV master and two ScaledKV replicas, each
//! started from a config file, one with `replica-priority 0`. The master
//! is SIGKILLed while a client writes; the sentinels promote the other
//! replica, point the one with priority 0 at it, and
//! when the old master comes back, make it a replica of the new one. Every
//! write the replicas acknowledged (WAIT) before the kill is on the new
//! master, no key holds anything but what was written to it, and the
//! servers' config files (CONFIG REWRITE, which the sentinels send with
//! each REPLICAOF) name the new topology. Skipped, with a notice, where
//! redis-server is not installed (`.ci/run` installs it).

mod common;

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{free_port, Server};
use redis::sentinel::SentinelServerType;
use redis::{Commands, Connection};

const MASTER_NAME: &str = "scaledkv";

/// A `redis-server --sentinel`, stopped by its PID when dropped.
struct Sentinel {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Sentinel {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Sentinel {
    /// None (with a notice) where redis-server is not installed.
    fn start(dir: &Path, index: usize, master_port: u16) -> Option<Sentinel> {
        if Command::new("redis-server").arg("--version").output().is_err() {
            eprintln!("NOTICE: redis-server not found; skipping the Sentinel test (.ci/run installs it)");
            return None;
        }
        let port = free_port();
        // Sentinel rewrites its own file as it learns the topology.
        let conf = dir.join(format!("sentinel-{index}.conf"));
        let log = dir.join(format!("sentinel-{index}.log"));
        std::fs::write(
            &conf,
            format!(
                "port {port}\nbind 127.0.0.1\ndaemonize no\nlogfile {}\n\
                 sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2\n\
                 sentinel down-after-milliseconds {MASTER_NAME} 1000\n\
                 sentinel failover-timeout {MASTER_NAME} 10000\n\
                 sentinel parallel-syncs {MASTER_NAME} 1\n",
                log.display()
            ),
        )
        .unwrap();
        let child = Command::new("redis-server")
            .arg(&conf)
            .arg("--sentinel")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start redis-server --sentinel");
        let sentinel = Sentinel { child, port, log };
        wait_until("the sentinel to answer", &[&sentinel], || try_connect(port).is_some());
        Some(sentinel)
    }

    /// SENTINEL MASTER's fields.
    fn master(&self) -> HashMap<String, String> {
        let Some(mut con) = try_connect(self.port) else { return HashMap::new() };
        let fields: Vec<String> =
            redis::cmd("SENTINEL").arg("MASTER").arg(MASTER_NAME).query(&mut con).unwrap_or_default();
        fields.chunks(2).map(|pair| (pair[0].clone(), pair[1].clone())).collect()
    }

    /// The master's port as this sentinel gives it to clients.
    fn master_port(&self) -> Option<u16> {
        let mut con = try_connect(self.port)?;
        let addr: Option<(String, String)> =
            redis::cmd("SENTINEL").arg("GET-MASTER-ADDR-BY-NAME").arg(MASTER_NAME).query(&mut con).ok()?;
        addr?.1.parse().ok()
    }
}

fn try_connect(port: u16) -> Option<Connection> {
    let client = redis::Client::open(format!("redis://127.0.0.1:{port}/")).ok()?;
    let con = client.get_connection_with_timeout(Duration::from_secs(2)).ok()?;
    con.set_read_timeout(Some(Duration::from_secs(20))).ok()?;
    Some(con)
}

fn connect(port: u16) -> Connection {
    try_connect(port).unwrap_or_else(|| panic!("cannot connect to 127.0.0.1:{port}"))
}

/// Waits up to 60 s for `done`, failing with the sentinels' logs.
fn wait_until(what: &str, sentinels: &[&Sentinel], mut done: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        if started.elapsed() > Duration::from_secs(60) {
            let logs: Vec<String> =
                sentinels.iter().map(|s| std::fs::read_to_string(&s.log).unwrap_or_default()).collect();
            panic!("timed out waiting for {what}; the sentinels' logs:\n{}", logs.join("\n---\n"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    started.elapsed()
}

fn info_field(port: u16, field: &str) -> Option<String> {
    let mut con = try_connect(port)?;
    let info: String = redis::cmd("INFO").arg("replication").query(&mut con).ok()?;
    info.lines().find_map(|line| line.strip_prefix(&format!("{field}:")).map(str::to_owned))
}

/// Whether the server on `port` follows the one on `master` with its link up.
fn follows(port: u16, master: u16) -> bool {
    info_field(port, "master_port").as_deref() == Some(&master.to_string())
        && info_field(port, "master_link_status").as_deref() == Some("up")
}

fn value_of(i: usize) -> String {
    format!("value-{i}-{}", "v".repeat(100))
}

/// Every string key and its value.
fn keyspace(port: u16) -> BTreeMap<String, String> {
    let mut con = connect(port);
    let keys: Vec<String> = redis::cmd("KEYS").arg("*").query(&mut con).unwrap();
    keys.into_iter()
        .map(|key| {
            let value: String = redis::cmd("GET").arg(&key).query(&mut con).unwrap();
            (key, value)
        })
        .collect()
}

/// A config file for a server, following `master` if given, with
/// `more` settings.
fn server_config(dir: &Path, name: &str, master: Option<u16>, more: &str) -> PathBuf {
    let path = dir.join(format!("{name}.toml"));
    let replicaof = master.map(|port| format!("replicaof = \"127.0.0.1 {port}\"\n")).unwrap_or_default();
    std::fs::write(&path, format!("# {name}, as the test wrote it\n{more}{replicaof}")).unwrap();
    path
}

fn start_server(dir: &Path, name: &str, port: u16, config: &Path) -> Server {
    Server::start_at(&dir.join(name), port, &["--config", config.to_str().unwrap()])
}

#[test]
fn sentinels_fail_over_to_a_replica_with_every_acknowledged_write() {
    let dir = tempfile::tempdir().unwrap();
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let names = ["a", "b", "c"];
    // The last one is never to be promoted (Sentinel reads its priority
    // from INFO): the failover goes to the other.
    let configs: Vec<PathBuf> = (0..3)
        .map(|i| {
            let more = if i == 2 { "replica-priority = 0\n" } else { "" };
            server_config(dir.path(), names[i], (i > 0).then_some(ports[0]), more)
        })
        .collect();
    let mut servers: Vec<Option<Server>> =
        (0..3).map(|i| Some(start_server(dir.path(), names[i], ports[i], &configs[i]))).collect();
    for &port in &ports[1..] {
        wait_until("the replicas' links", &[], || follows(port, ports[0]));
    }
    let Some(first) = Sentinel::start(dir.path(), 0, ports[0]) else { return };
    let sentinels: Vec<Sentinel> =
        std::iter::once(first).chain((1..3).map(|i| Sentinel::start(dir.path(), i, ports[0]).unwrap())).collect();
    let all: Vec<&Sentinel> = sentinels.iter().collect();
    wait_until("the sentinels to find the replicas and each other", &all, || {
        sentinels.iter().all(|s| {
            let master = s.master();
            master.get("num-slaves").map(String::as_str) == Some("2")
                && master.get("num-other-sentinels").map(String::as_str) == Some("2")
        })
    });
    // run_id: what Sentinel tells a restart from a pause by.
    let run_id = |port: u16| {
        let info: String = redis::cmd("INFO").arg("server").query(&mut connect(port)).unwrap();
        info.lines().find_map(|line| line.strip_prefix("run_id:").map(str::to_owned)).unwrap()
    };
    let old_run_id = run_id(ports[0]);
    // A client that asks the sentinels for the master (the redis crate's
    // Sentinel client, as redis-py's and Jedis's).
    let sentinel_urls: Vec<String> = sentinels.iter().map(|s| format!("redis://127.0.0.1:{}/", s.port)).collect();
    let mut via_sentinels =
        redis::sentinel::SentinelClient::build(sentinel_urls, MASTER_NAME.into(), None, SentinelServerType::Master)
            .unwrap();
    let _: () = via_sentinels.get_connection().unwrap().set("via-sentinels", "before").unwrap();
    assert_eq!(connect(ports[0]).get::<_, String>("via-sentinels").unwrap(), "before");
    assert!(old_run_id.len() == 40 && old_run_id.bytes().all(|b| b.is_ascii_hexdigit()), "{old_run_id}");

    // Writes, each batch acknowledged by both replicas (WAIT 2), then
    // writes nobody waits for while the master is killed.
    let mut master = connect(ports[0]);
    let acknowledged = 3_000;
    for batch in (0..acknowledged).step_by(500) {
        let mut pipe = redis::pipe();
        for i in batch..batch + 500 {
            pipe.set(format!("k{i}"), value_of(i)).ignore();
        }
        let _: () = pipe.query(&mut master).unwrap();
        let acked: i64 = redis::cmd("WAIT").arg(2).arg(10_000).query(&mut master).unwrap();
        assert_eq!(acked, 2, "the replicas did not acknowledge");
    }
    let stop = Arc::new(AtomicBool::new(false));
    let written = Arc::new(AtomicUsize::new(acknowledged));
    let writer = {
        let (stop, written) = (stop.clone(), written.clone());
        std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let i = written.load(Ordering::Relaxed);
                if master.set::<_, _, ()>(format!("k{i}"), value_of(i)).is_err() {
                    break;
                }
                written.store(i + 1, Ordering::Relaxed);
            }
        })
    };
    std::thread::sleep(Duration::from_millis(200));
    let killed = Instant::now();
    servers[0].take().unwrap().kill();
    stop.store(true, Ordering::Relaxed);
    writer.join().unwrap();
    let tried = written.load(Ordering::Relaxed) + 1;

    // The sentinels agree on a replica, and it takes writes.
    let mut new_master = 0;
    wait_until("a new master", &all, || {
        let Some(port) = sentinels[0].master_port().filter(|&p| p != ports[0]) else { return false };
        new_master = ports.iter().position(|&p| p == port).unwrap();
        let mut con = connect(port);
        redis::cmd("SET").arg("after").arg("failover").query::<()>(&mut con).is_ok()
    });
    let failover = killed.elapsed();
    assert_eq!(new_master, 1, "the replica with priority 0 was promoted");
    let other = 3 - new_master;
    eprintln!("failover: {:.2} s from the SIGKILL to a write on the new master", failover.as_secs_f64());
    for sentinel in &sentinels[1..] {
        wait_until("every sentinel to name the new master", &all, || sentinel.master_port() == Some(ports[new_master]));
    }

    // The client finds the new master the same way, retrying while the
    // sentinels settle (it takes no master flagged down), as clients do.
    wait_until("the Sentinel client to write to the new master", &all, || {
        let written = via_sentinels.get_connection().and_then(|mut con| con.set::<_, _, ()>("via-sentinels", "after"));
        written.is_ok()
    });
    assert_eq!(connect(ports[new_master]).get::<_, String>("via-sentinels").unwrap(), "after");

    // Every acknowledged write is there; nothing holds a wrong value.
    let data = keyspace(ports[new_master]);
    for i in 0..acknowledged {
        assert_eq!(data.get(&format!("k{i}")), Some(&value_of(i)), "k{i}, acknowledged, after the failover");
    }
    for (key, value) in &data {
        match key.strip_prefix('k').map(|i| i.parse::<usize>().unwrap()) {
            Some(i) => assert!(i < tried && *value == value_of(i), "{key} holds {value}"),
            None => assert!(
                [("after", "failover"), ("via-sentinels", "after")].contains(&(key.as_str(), value.as_str())),
                "{key} holds {value}"
            ),
        }
    }

    // The other replica follows the new master and holds what it holds.
    wait_until("the other replica to follow the new master", &all, || follows(ports[other], ports[new_master]));
    let acked: i64 = redis::cmd("WAIT").arg(1).arg(10_000).query(&mut connect(ports[new_master])).unwrap();
    assert_eq!(acked, 1);
    assert_eq!(keyspace(ports[other]), keyspace(ports[new_master]));
    // Their config files say so (the sentinels' CONFIG REWRITE).
    let config = |i: usize| std::fs::read_to_string(&configs[i]).unwrap();
    assert!(!config(new_master).contains("replicaof"), "{}", config(new_master));
    assert!(config(other).contains(&format!("replicaof = \"127.0.0.1 {}\"", ports[new_master])), "{}", config(other));

    // The old master comes back as it was (a master of its own data) and
    // the sentinels make it a replica of the new one.
    let mut con = connect(ports[new_master]);
    let _: () = redis::cmd("SET").arg("while-down").arg("yes").query(&mut con).unwrap();
    servers[0] = Some(start_server(dir.path(), names[0], ports[0], &configs[0]));
    assert_ne!(run_id(ports[0]), old_run_id, "a restart has a new run_id");
    wait_until("the old master to follow the new one", &all, || follows(ports[0], ports[new_master]));
    let acked: i64 = redis::cmd("WAIT").arg(2).arg(10_000).query(&mut con).unwrap();
    assert_eq!(acked, 2);
    let data = keyspace(ports[new_master]);
    assert_eq!(data.get("while-down").map(String::as_str), Some("yes"));
    assert_eq!(keyspace(ports[0]), data, "the old master's data after it rejoined");
    assert!(config(0).contains(&format!("replicaof = \"127.0.0.1 {}\"", ports[new_master])), "{}", config(0));
    assert!(config(0).starts_with("# a, as the test wrote it\n"), "{}", config(0));
}
