//! Scale-out: three ScaledKV servers behind twemproxy (Debian's
//! `nutcracker`), driven through the proxy with a client and with
//! redis-benchmark. Skips with a notice when nutcracker is not installed;
//! `.ci/run` installs it.

mod common;

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{encode, free_port, request, Server};

struct Proxy(std::process::Child);

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Whether nutcracker is installed (a notice when not).
fn have_nutcracker() -> bool {
    let found = Command::new("nutcracker").arg("--version").stderr(Stdio::null()).output().is_ok();
    if !found {
        eprintln!("NOTICE: nutcracker (twemproxy) not found; skipping the scale-out test (.ci/run installs it)");
    }
    found
}

/// Starts nutcracker in `dir` with one pool of `backends` (ports) speaking
/// Redis or memcached, and connects to it.
fn start_proxy(dir: &std::path::Path, backends: &[u16], redis: bool) -> (Proxy, std::net::TcpStream) {
    let port = free_port();
    let config = dir.join("nutcracker.yml");
    let backends: String = backends.iter().map(|port| format!("   - 127.0.0.1:{port}:1\n")).collect();
    std::fs::write(
        &config,
        format!(
            "scaledkv:\n  listen: 127.0.0.1:{port}\n  hash: murmur\n  distribution: ketama\n  redis: {redis}\n  \
             auto_eject_hosts: false\n  servers:\n{backends}"
        ),
    )
    .unwrap();
    let proxy = Proxy(
        Command::new("nutcracker")
            .arg("-c")
            .arg(&config)
            .args(["-s", &free_port().to_string(), "-a", "127.0.0.1", "-o"])
            .arg(dir.join("nutcracker.log"))
            .spawn()
            .expect("start nutcracker"),
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let con = loop {
        match std::net::TcpStream::connect(("127.0.0.1", port)) {
            Ok(stream) => break stream,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(50)),
            Err(error) => panic!("twemproxy did not come up: {error}"),
        }
    };
    con.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    (proxy, con)
}

#[test]
fn three_servers_behind_twemproxy() {
    if !have_nutcracker() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let servers: Vec<Server> = (0..3).map(|i| Server::start(&dir.path().join(format!("db{i}")), &[])).collect();
    // A raw client: the redis crate sends CLIENT SETINFO on connect, which
    // twemproxy does not proxy (it closes the connection).
    let ports: Vec<u16> = servers.iter().map(|s| s.port).collect();
    let (proxy, mut con) = start_proxy(dir.path(), &ports, true);
    let port = con.peer_addr().unwrap().port();
    for i in 0..300 {
        let (key, value) = (format!("key:{i}"), format!("value:{i}"));
        assert_eq!(request(&mut con, &encode(&[b"SET", key.as_bytes(), value.as_bytes()])), b"+OK\r\n");
    }
    for i in 0..300 {
        let (key, value) = (format!("key:{i}"), format!("value:{i}"));
        let expected = format!("${}\r\n{value}\r\n", value.len());
        assert_eq!(request(&mut con, &encode(&[b"GET", key.as_bytes()])), expected.as_bytes());
    }
    assert_eq!(request(&mut con, &encode(&[b"INCRBY", b"counter", b"5"])), b":5\r\n");
    // The proxy spread the keys over all three servers.
    let sizes: Vec<i64> = servers
        .iter()
        .map(|s| {
            let mut direct = redis::Client::open(s.url()).unwrap().get_connection().unwrap();
            redis::cmd("DBSIZE").query(&mut direct).unwrap()
        })
        .collect();
    assert_eq!(sizes.iter().sum::<i64>(), 301, "{sizes:?}");
    assert!(sizes.iter().all(|&n| n > 0), "a server got no keys: {sizes:?}");
    match Command::new("redis-benchmark")
        .args(["-p", &port.to_string(), "-t", "set,get", "-n", "20000", "-r", "10000", "-c", "20", "-P", "8", "-q"])
        .output()
    {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            eprintln!("redis-benchmark through twemproxy:\n{text}");
            assert!(out.status.success() && text.contains("SET") && text.contains("GET"), "{text}");
        }
        Err(_) => eprintln!("NOTICE: redis-benchmark not found; drove the proxy with the client only"),
    }
    drop(proxy);
}

/// The same with the memcached protocol: three servers' memcached ports
/// behind a `redis: false` pool, written and read through the proxy, then
/// driven with memaslap if it is installed.
#[test]
fn three_memcached_ports_behind_twemproxy() {
    use std::io::Write;
    if !have_nutcracker() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let servers: Vec<(Server, u16)> =
        (0..3).map(|i| common::start_with_memcached(&dir.path().join(format!("db{i}")), &[])).collect();
    let ports: Vec<u16> = servers.iter().map(|(_, mc)| *mc).collect();
    let (proxy, mut con) = start_proxy(dir.path(), &ports, false);
    let port = con.peer_addr().unwrap().port();
    for i in 0..300 {
        let value = format!("value:{i}");
        con.write_all(format!("set key:{i} {i} 0 {}\r\n{value}\r\n", value.len()).as_bytes()).unwrap();
        assert_eq!(common::read_memcached_until(&mut con, b"\r\n").unwrap(), b"STORED\r\n");
    }
    for i in 0..300 {
        let value = format!("value:{i}");
        con.write_all(format!("get key:{i}\r\n").as_bytes()).unwrap();
        let expected = format!("VALUE key:{i} {i} {}\r\n{value}\r\nEND\r\n", value.len());
        assert_eq!(common::read_memcached_until(&mut con, b"END\r\n").unwrap(), expected.as_bytes());
    }
    // A multi-get the proxy splits across the servers and merges.
    con.write_all(b"get key:1 key:2 key:3 missing key:299\r\n").unwrap();
    let reply = String::from_utf8(common::read_memcached_until(&mut con, b"END\r\n").unwrap()).unwrap();
    assert_eq!(reply.matches("VALUE ").count(), 4, "{reply}");
    // The proxy spread the keys over all three servers.
    let sizes: Vec<i64> = servers
        .iter()
        .map(|(s, _)| {
            let mut direct = redis::Client::open(s.url()).unwrap().get_connection().unwrap();
            redis::cmd("DBSIZE").query(&mut direct).unwrap()
        })
        .collect();
    assert_eq!(sizes.iter().sum::<i64>(), 300, "{sizes:?}");
    assert!(sizes.iter().all(|&n| n > 0), "a server got no keys: {sizes:?}");
    match Command::new("memcaslap")
        .args(["-s", &format!("127.0.0.1:{port}"), "-T", "1", "-c", "8", "-x", "20000"])
        .output()
    {
        Ok(out) => {
            let text = String::from_utf8_lossy(&out.stdout);
            eprintln!("memaslap through twemproxy:\n{text}");
            assert!(out.status.success() && text.contains("TPS"), "{text}");
            // memaslap reads only keys it wrote: every get finds its item.
            assert!(text.contains("get_misses: 0\n"), "{text}");
        }
        Err(_) => eprintln!("NOTICE: memcaslap not found; drove the proxy with a raw client only"),
    }
    drop(proxy);
}
