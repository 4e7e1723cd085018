//! Starts `scaledkv-server` (and, for differential tests, `redis-server`) as
//! child processes on free loopback ports, and stops them by PID.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Server {
    child: Option<Child>,
    pub port: u16,
    pub dir: PathBuf,
}

impl Server {
    /// Starts the server on `dir` with a free port and waits until it listens.
    pub fn start(dir: &Path, extra: &[&str]) -> Server {
        Self::start_at(dir, 0, extra)
    }

    /// As `start`, on `port` (0: a free one): a server restarted where
    /// others know it to be.
    pub fn start_at(dir: &Path, port: u16, extra: &[&str]) -> Server {
        Self::launch(None, dir, port, extra)
    }

    /// As `start`, reading the redis.conf `conf` first, as redis-server
    /// takes one.
    pub fn start_with_redis_conf(conf: &Path, dir: &Path, extra: &[&str]) -> Server {
        Self::launch(Some(conf), dir, 0, extra)
    }

    fn launch(conf: Option<&Path>, dir: &Path, port: u16, extra: &[&str]) -> Server {
        let port_file = dir.with_extension("port");
        let _ = std::fs::remove_file(&port_file);
        let child = Command::new(env!("CARGO_BIN_EXE_scaledkv-server"))
            .args(conf)
            .arg("--dir")
            .arg(dir)
            .args(["--port", &port.to_string(), "--port-file"])
            .arg(&port_file)
            .args(extra)
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .spawn()
            .expect("start scaledkv-server");
        let deadline = Instant::now() + Duration::from_secs(30);
        let port = loop {
            if let Some(port) = std::fs::read_to_string(&port_file).ok().and_then(|p| p.trim().parse().ok()) {
                // It lies beside `dir`, outside the test's temporary
                // directory: left there, one file per start piled up
                // (in /dev/shm too).
                let _ = std::fs::remove_file(&port_file);
                break port;
            }
            assert!(Instant::now() < deadline, "scaledkv-server did not start");
            std::thread::sleep(Duration::from_millis(10));
        };
        Server { child: Some(child), port, dir: dir.to_path_buf() }
    }

    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    pub fn connect(&self) -> TcpStream {
        let stream = TcpStream::connect(("127.0.0.1", self.port)).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream
    }

    /// Waits until INFO counts `want` blocked clients: a test that pushes
    /// to or unblocks a waiting client must know it waits, not guess by
    /// sleeping (the CI's load outlasts any guess).
    pub fn wait_for_blocked_clients(&self, want: usize) {
        let mut stream = self.connect();
        let line = format!("blocked_clients:{want}\r\n");
        for _ in 0..2000 {
            let info = request(&mut stream, &encode(&[b"INFO", b"clients"]));
            if String::from_utf8_lossy(&info).contains(&line) {
                return;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
        panic!("never saw {line:?}");
    }

    pub fn pid(&self) -> u32 {
        self.child.as_ref().expect("running").id()
    }

    /// SIGKILL: no chance to flush or checkpoint.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM, then waits for a clean exit; returns whether it exited 0.
    pub fn terminate(&mut self) -> bool {
        let Some(mut child) = self.child.take() else { return false };
        // SAFETY: signalling our own child by its PID.
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Some(status) = child.try_wait().unwrap() {
                return status.success();
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                return false;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for the process to exit by itself (after SHUTDOWN).
    pub fn wait_exit(&mut self) -> bool {
        let Some(mut child) = self.child.take() else { return false };
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline {
            if let Some(status) = child.try_wait().unwrap() {
                return status.success();
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        let _ = child.kill();
        let _ = child.wait();
        false
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A real `redis-server` for differential tests, if installed.
pub struct RedisServer {
    child: Child,
    pub port: u16,
    _dir: tempfile::TempDir,
}

impl RedisServer {
    /// `None` (with a visible notice) when `redis-server` is not installed.
    pub fn start() -> Option<RedisServer> {
        Self::start_with(&["--databases", "1"])
    }

    /// As `start`, with more of redis-server's flags.
    pub fn start_with(extra: &[&str]) -> Option<RedisServer> {
        Self::start_loading(None, extra)
    }

    /// As `start_with`, loading the RDB file `rdb` as it starts.
    pub fn start_loading(rdb: Option<&Path>, extra: &[&str]) -> Option<RedisServer> {
        if Command::new("redis-server").arg("--version").output().is_err() {
            eprintln!("NOTICE: redis-server not found; skipping the differential test (.ci/run installs it)");
            return None;
        }
        // A free port can be taken between our probe and redis binding it: retry.
        for _ in 0..5 {
            let dir = tempfile::tempdir().unwrap();
            if let Some(rdb) = rdb {
                std::fs::copy(rdb, dir.path().join("dump.rdb")).unwrap();
            }
            let port = free_port();
            let child = Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .args(extra)
                .arg("--dir")
                .arg(dir.path())
                .stdout(Stdio::null())
                .stderr(Stdio::null())
                .spawn()
                .expect("start redis-server");
            let mut redis = RedisServer { child, port, _dir: dir };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && redis.child.try_wait().unwrap().is_none() {
                if redis.answers() {
                    return Some(redis);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("redis-server is installed but did not start");
    }

    /// Whether the server on `port` is up and is our child: another test's
    /// server may have taken the port between the probe and our bind (ours
    /// then exits), and a connection may close while a server starts.
    fn answers(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        let own_pid = format!("process_id:{}\r\n", self.child.id());
        stream.write_all(b"INFO server\r\n").is_ok()
            && try_read_reply(&mut stream).is_some_and(|info| String::from_utf8_lossy(&info).contains(&own_pid))
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// How many SIGKILL rounds a crash test runs: `SCALEDKV_SERVER_CRASH_ITERATIONS`,
/// or `default` (the long mode sets it higher).
pub fn crash_iterations(default: usize) -> usize {
    std::env::var("SCALEDKV_SERVER_CRASH_ITERATIONS").ok().and_then(|n| n.parse().ok()).unwrap_or(default)
}

/// The random source of a crash test's kill times: seeded by
/// `SCALEDKV_CRASH_SEED` or at random, the seed printed with `test`'s name
/// and `iterations` so a failing run can be repeated.
pub fn crash_rng(test: &str, iterations: usize) -> rand::rngs::StdRng {
    use rand::SeedableRng;
    let seed = std::env::var("SCALEDKV_CRASH_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or_else(rand::random);
    eprintln!("{test}: {iterations} iterations, SCALEDKV_CRASH_SEED={seed}");
    rand::rngs::StdRng::seed_from_u64(seed)
}

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

/// Encodes a command as a RESP multibulk request.
pub fn encode(args: &[&[u8]]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
    out
}

/// Sends raw bytes and reads one complete reply (over TCP or a Unix
/// socket).
pub fn request<S: Read + Write>(stream: &mut S, bytes: &[u8]) -> Vec<u8> {
    stream.write_all(bytes).unwrap();
    read_reply(stream)
}

/// SETs `key:0` .. `key:{count - 1}` to `v`, a thousand to a pipeline.
pub fn set_keys(stream: &mut TcpStream, count: usize) {
    for chunk in (0..count).step_by(1000) {
        let mut pipeline = Vec::new();
        let keys = chunk..(chunk + 1000).min(count);
        for key in keys.clone() {
            pipeline.extend(encode(&[b"SET", format!("key:{key}").as_bytes(), b"v"]));
        }
        stream.write_all(&pipeline).unwrap();
        for _ in keys {
            read_reply(stream);
        }
    }
}

/// Reads exactly one RESP2/RESP3 reply (nested aggregates included).
pub fn read_reply<S: Read>(stream: &mut S) -> Vec<u8> {
    try_read_reply(stream).expect("connection closed mid-reply")
}

/// Like `read_reply`; `None` when the connection ends first.
pub fn try_read_reply<S: Read>(stream: &mut S) -> Option<Vec<u8>> {
    let mut reply = Vec::new();
    read_value(stream, &mut reply)?;
    Some(reply)
}

fn read_line<S: Read>(stream: &mut S, out: &mut Vec<u8>) -> Option<Vec<u8>> {
    let start = out.len();
    let mut byte = [0u8; 1];
    loop {
        if stream.read(&mut byte).unwrap_or(0) == 0 {
            return None;
        }
        out.push(byte[0]);
        if out.ends_with(b"\r\n") {
            return Some(out[start..out.len() - 2].to_vec());
        }
    }
}

fn read_value<S: Read>(stream: &mut S, out: &mut Vec<u8>) -> Option<()> {
    let line = read_line(stream, out)?;
    let (kind, rest) = (line[0], std::str::from_utf8(&line[1..]).unwrap().to_string());
    match kind {
        b'$' | b'=' | b'!' => {
            let len: i64 = rest.parse().unwrap();
            if len >= 0 {
                let mut body = vec![0u8; len as usize + 2];
                stream.read_exact(&mut body).ok()?;
                out.extend_from_slice(&body);
            }
        }
        b'*' | b'~' | b'>' => {
            let n: i64 = rest.parse().unwrap();
            for _ in 0..n.max(0) {
                read_value(stream, out)?;
            }
        }
        b'%' => {
            let n: i64 = rest.parse().unwrap();
            for _ in 0..n * 2 {
                read_value(stream, out)?;
            }
        }
        _ => {}
    }
    Some(())
}

/// Starts ScaledKV with the memcached protocol on a free port too: the
/// server and that port (INFO's `memcached_port`).
pub fn start_with_memcached(dir: &Path, extra: &[&str]) -> (Server, u16) {
    let args: Vec<&str> = ["--memcached-port", "0"].iter().chain(extra).copied().collect();
    let server = Server::start(dir, &args);
    let password = extra.iter().position(|&a| a == "--requirepass").map(|at| extra[at + 1]);
    let port = memcached_port(&server, password);
    (server, port)
}

/// The memcached port a running server reports in INFO.
pub fn memcached_port(server: &Server, password: Option<&str>) -> u16 {
    let mut stream = server.connect();
    if let Some(password) = password {
        assert_eq!(request(&mut stream, &encode(&[b"AUTH", password.as_bytes()])), b"+OK\r\n");
    }
    let info = request(&mut stream, &encode(&[b"INFO", b"server"]));
    let info = String::from_utf8_lossy(&info).into_owned();
    info.lines()
        .find_map(|line| line.strip_prefix("memcached_port:"))
        .and_then(|port| port.trim().parse().ok())
        .filter(|&port| port != 0)
        .expect("INFO names the memcached port")
}

/// Runs libmemcached's `memccapable` conformance suite (`-a`: ASCII, `-b`:
/// binary) against the memcached port: its output, after checking that
/// every test passed and at least `tests` ran. None (with a visible
/// notice) when `memccapable` is not installed.
pub fn memccapable_passes(port: u16, protocol: &str, tests: usize) -> Option<String> {
    if Command::new("memccapable").arg("-h").output().is_err() {
        eprintln!("NOTICE: memccapable (libmemcached-tools) not found; skipping (.ci/run installs it)");
        return None;
    }
    let output = Command::new("memccapable")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), protocol, "-t", "10"])
        .output()
        .expect("run memccapable");
    let text = String::from_utf8_lossy(&output.stdout).into_owned() + &String::from_utf8_lossy(&output.stderr);
    assert!(text.contains("All tests passed") && output.status.success(), "{text}");
    assert!(text.matches("[pass]").count() >= tests, "{text}");
    Some(text)
}

/// A real `memcached` for differential tests, if installed.
pub struct MemcachedServer {
    child: Child,
    pub port: u16,
}

impl MemcachedServer {
    /// `None` (with a visible notice) when `memcached` is not installed.
    pub fn start() -> Option<MemcachedServer> {
        if Command::new("memcached").arg("--version").output().is_err() {
            eprintln!("NOTICE: memcached not found; skipping the memcached differential test (.ci/run installs it)");
            return None;
        }
        for _ in 0..5 {
            let port = free_port();
            let mut command = Command::new("memcached");
            command.args(["-l", "127.0.0.1", "-p", &port.to_string(), "-U", "0"]);
            // memcached refuses to run as root without a user to run as.
            // SAFETY: geteuid has no preconditions.
            if unsafe { libc::geteuid() } == 0 {
                command.args(["-u", "root"]);
            }
            let child = command.stdout(Stdio::null()).stderr(Stdio::null()).spawn().expect("start memcached");
            let mut memcached = MemcachedServer { child, port };
            let deadline = Instant::now() + Duration::from_secs(10);
            while Instant::now() < deadline && memcached.child.try_wait().unwrap().is_none() {
                if memcached.answers() {
                    return Some(memcached);
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        panic!("memcached is installed but did not start");
    }

    /// Whether our child (its pid in `stats`) listens on the port.
    fn answers(&self) -> bool {
        let Ok(mut stream) = TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
        let own_pid = format!("STAT pid {}\r\n", self.child.id());
        stream.write_all(b"stats\r\n").is_ok()
            && read_memcached_until(&mut stream, b"END\r\n")
                .is_some_and(|stats| String::from_utf8_lossy(&stats).contains(&own_pid))
    }
}

impl Drop for MemcachedServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Reads memcached replies until they end with `end` (None if the
/// connection closes first).
pub fn read_memcached_until<S: Read>(stream: &mut S, end: &[u8]) -> Option<Vec<u8>> {
    let mut out = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    while !out.ends_with(end) {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return None,
            Ok(n) => out.extend_from_slice(&buf[..n]),
        }
    }
    Some(out)
}

/// Sends `cases` commands (proptest) named from `names`, with up to 11
/// arguments from `words` and raw bytes, to `server` on one connection:
/// each must get a reply, and PING must answer after it.
pub fn any_arguments_get_a_reply<W>(server: &Server, names: Vec<&'static str>, words: Vec<W>, cases: u32)
where
    W: AsRef<[u8]> + Clone + std::fmt::Debug + 'static,
{
    use proptest::prelude::*;
    let stream = std::cell::RefCell::new(server.connect());
    let config = proptest::test_runner::Config { cases, failure_persistence: None, ..Default::default() };
    let mut runner = proptest::test_runner::TestRunner::new(config);
    let word = prop_oneof![
        prop::sample::select(words).prop_map(|w| w.as_ref().to_vec()),
        prop::collection::vec(any::<u8>(), 0..6),
    ];
    let strategy = (prop::sample::select(names), prop::collection::vec(word, 0..12));
    runner
        .run(&strategy, |(name, words)| {
            let mut args: Vec<&[u8]> = vec![name.as_bytes()];
            args.extend(words.iter().map(Vec::as_slice));
            let mut stream = stream.borrow_mut();
            let reply = request(&mut *stream, &encode(&args));
            prop_assert!(!reply.is_empty());
            prop_assert_eq!(request(&mut *stream, b"PING\r\n"), b"+PONG\r\n".to_vec());
            Ok(())
        })
        .unwrap();
}
