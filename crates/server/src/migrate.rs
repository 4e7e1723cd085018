//! MIGRATE's side of the wire: the RESTOREs that move keys to another
//! server (Redis or ScaledKV), over a connection kept per target for the
//! next MIGRATE.
//!
//! As Redis does: blocking I/O bounded by the command's timeout per
//! operation (the connect, each write, each reply); one connection per
//! `host:port`, closed after 10 s unused, at most 64 (a random one goes to
//! make room); SELECT only when the connection's database is not known to
//! be the one asked for; one more try on a new connection when sending
//! fails other than by a timeout (a cached connection the target closed
//! meanwhile). Unlike Redis, which stops serving everyone meanwhile, the
//! I/O thread running it hands its other clients to another worker
//! (`commands::blocking`).

use std::collections::HashMap;
use std::io::{BufRead, BufReader, ErrorKind, Read, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::resp::request::put_request;

const IDLE_CLOSE: Duration = Duration::from_secs(10);
pub const CLOSE_IDLE_EVERY: Duration = Duration::from_secs(1);
const MAX_CACHED: usize = 64;
/// Replies here are one status or error line; a longer one is cut.
const MAX_REPLY_BYTES: u64 = 4096;

/// The cached connections, by `host:port`.
#[derive(Default)]
pub struct Sockets {
    cached: Mutex<HashMap<String, Link>>,
}

struct Link {
    reader: BufReader<TcpStream>,
    /// The database the last successful MIGRATE selected on it.
    db: Option<i64>,
    used: Instant,
}

impl Sockets {
    /// Closes the connections unused for 10 s (called every
    /// `CLOSE_IDLE_EVERY`, as Redis's cron does).
    pub fn close_idle(&self) {
        self.cached.lock().retain(|_, link| link.used.elapsed() < IDLE_CLOSE);
    }

    pub fn len(&self) -> usize {
        self.cached.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A connection taken out while in use, so that two MIGRATEs to one
    /// target never share it.
    fn take(&self, name: &str) -> Option<Link> {
        self.cached.lock().remove(name)
    }

    fn keep(&self, name: String, mut link: Link) {
        link.used = Instant::now();
        let mut cached = self.cached.lock();
        if cached.len() >= MAX_CACHED && !cached.contains_key(&name) {
            // Any one: the map's order is as good as Redis's random pick.
            if let Some(victim) = cached.keys().next().cloned() {
                cached.remove(&victim);
            }
        }
        cached.insert(name, link);
    }
}

/// Where the keys go and how.
pub struct Target<'a> {
    pub host: &'a str,
    pub port: u16,
    pub db: i64,
    /// Per operation; Redis's default when the client gives 0 or less is
    /// 1000 ms (the caller's to apply).
    pub timeout: Duration,
    /// AUTH's password, with AUTH2's user name.
    pub auth: Option<(Option<&'a [u8]>, &'a [u8])>,
    pub replace: bool,
}

/// A key to move: its name, the milliseconds it has left to live (0:
/// none) and its DUMP payload.
pub struct Moving<'a> {
    pub key: &'a [u8],
    pub ttl_ms: u64,
    pub payload: Vec<u8>,
}

/// Why an exchange stopped before every key had its reply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Failure {
    Connect,
    Write,
    Read,
}

impl Failure {
    /// Redis's texts, word for word.
    pub fn text(self) -> &'static str {
        match self {
            Failure::Connect => "IOERR error or timeout connecting to the client",
            Failure::Write => "IOERR error or timeout writing to target instance",
            Failure::Read => "IOERR error or timeout reading to target instance",
        }
    }
}

/// What the target answered.
#[derive(Debug, Default)]
pub struct Exchange {
    /// One per key, in order, as far as replies came: moved, or the
    /// target's error line (without its `-`). A failed AUTH or SELECT is
    /// every key's error: none of them moved.
    pub replies: Vec<Result<(), String>>,
    /// Why replies stopped short, if they did.
    pub failure: Option<Failure>,
}

/// Sends one RESTORE per key to `target` and reads the replies.
pub fn exchange(sockets: &Sockets, target: &Target<'_>, keys: &[Moving<'_>]) -> Exchange {
    let name = format!("{}:{}", target.host, target.port);
    let mut may_retry = true;
    loop {
        let mut link = match sockets.take(&name) {
            Some(link) => link,
            None => match connect(target) {
                Ok(link) => link,
                // Redis connects without blocking and waits until the
                // socket is writable, as a refused one soon is: its
                // failure shows when it writes.
                Err(error) if error.kind() == ErrorKind::ConnectionRefused && may_retry => {
                    may_retry = false;
                    continue;
                }
                Err(error) if error.kind() == ErrorKind::ConnectionRefused => {
                    return Exchange { replies: Vec::new(), failure: Some(Failure::Write) }
                }
                Err(_) => return Exchange { replies: Vec::new(), failure: Some(Failure::Connect) },
            },
        };
        let select = link.db != Some(target.db);
        match talk(&mut link, target, keys, select) {
            Ok(replies) => {
                let all_moved = replies.iter().all(Result::is_ok);
                // After an error the target's database is not known.
                link.db = all_moved.then_some(target.db);
                sockets.keep(name, link);
                return Exchange { replies, failure: None };
            }
            Err(Stopped { failure, replies, may_retry: retry }) => {
                // The connection is dropped, closed.
                if may_retry && retry {
                    may_retry = false;
                    continue;
                }
                return Exchange { replies, failure: Some(failure) };
            }
        }
    }
}

struct Stopped {
    failure: Failure,
    replies: Vec<Result<(), String>>,
    /// Before any key's reply and not by a timeout: a new connection may
    /// do (a cached one the target closed fails so, at the first reply);
    /// once a RESTORE's reply came, a retry would send it twice.
    may_retry: bool,
}

fn connect(target: &Target<'_>) -> std::io::Result<Link> {
    let mut last = std::io::Error::new(ErrorKind::NotFound, "no address");
    for address in (target.host, target.port).to_socket_addrs()? {
        match TcpStream::connect_timeout(&address, target.timeout) {
            Ok(stream) => {
                stream.set_nodelay(true)?;
                return Ok(Link { reader: BufReader::new(stream), db: None, used: Instant::now() });
            }
            Err(error) => last = error,
        }
    }
    Err(last)
}

/// AUTH, SELECT where asked, the RESTOREs, then their replies.
fn talk(
    link: &mut Link,
    target: &Target<'_>,
    keys: &[Moving<'_>],
    select: bool,
) -> Result<Vec<Result<(), String>>, Stopped> {
    let stopped = |failure, replies: Vec<_>, error: std::io::Error| Stopped {
        failure,
        may_retry: replies.is_empty() && !matches!(error.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut),
        replies,
    };
    let stream = link.reader.get_mut();
    let timeouts = stream.set_write_timeout(Some(target.timeout)).and(stream.set_read_timeout(Some(target.timeout)));
    timeouts.map_err(|e| stopped(Failure::Write, Vec::new(), e))?;
    let request = request(target, keys, select);
    stream.write_all(&request).map_err(|e| stopped(Failure::Write, Vec::new(), e))?;
    let mut read = || read_reply(&mut link.reader);
    // Redis reads all three before it looks at any.
    let auth = match target.auth {
        Some(_) => Some(read().map_err(|e| stopped(Failure::Read, Vec::new(), e))?),
        None => None,
    };
    let selected = if select { Some(read().map_err(|e| stopped(Failure::Read, Vec::new(), e))?) } else { None };
    let refused = [auth, selected].into_iter().flatten().find_map(Result::err);
    let mut replies = Vec::with_capacity(keys.len());
    for _ in keys {
        match read() {
            Ok(reply) => replies.push(match &refused {
                Some(error) => Err(error.clone()),
                None => reply,
            }),
            Err(e) => return Err(stopped(Failure::Read, replies, e)),
        }
    }
    Ok(replies)
}

/// The commands, in RESP, as one buffer.
fn request(target: &Target<'_>, keys: &[Moving<'_>], select: bool) -> Vec<u8> {
    let mut out = Vec::with_capacity(keys.iter().map(|k| k.key.len() + k.payload.len() + 64).sum());
    match target.auth {
        Some((Some(user), password)) => put_request(&mut out, &[b"AUTH", user, password]),
        Some((None, password)) => put_request(&mut out, &[b"AUTH", password]),
        None => {}
    }
    if select {
        put_request(&mut out, &[b"SELECT", target.db.to_string().as_bytes()]);
    }
    for moving in keys {
        let ttl = moving.ttl_ms.to_string();
        let mut words: Vec<&[u8]> = vec![b"RESTORE", moving.key, ttl.as_bytes(), &moving.payload];
        if target.replace {
            words.push(b"REPLACE");
        }
        put_request(&mut out, &words);
    }
    out
}

/// One reply line: Ok for a status (`+OK`), the text of an error. The end
/// of the stream, or anything else, is an I/O error: Redis takes any line
/// but an error for success, so a port that is not a Redis server's
/// (memcached's `ERROR`, a web server's) would have the keys deleted here.
fn read_reply(reader: &mut BufReader<TcpStream>) -> std::io::Result<Result<(), String>> {
    let mut line = Vec::new();
    reader.by_ref().take(MAX_REPLY_BYTES).read_until(b'\n', &mut line)?;
    if !line.ends_with(b"\n") {
        return Err(std::io::Error::new(ErrorKind::UnexpectedEof, "the target closed the connection"));
    }
    let line = line.strip_suffix(b"\r\n").or_else(|| line.strip_suffix(b"\n")).unwrap_or(&line);
    match line.first() {
        Some(b'+') => Ok(Ok(())),
        Some(b'-') => Ok(Err(String::from_utf8_lossy(&line[1..]).into_owned())),
        _ => Err(std::io::Error::new(ErrorKind::InvalidData, "not a Redis server's reply")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_auth_select_then_one_restore_per_key() {
        let target = Target {
            host: "127.0.0.1",
            port: 1,
            db: 3,
            timeout: Duration::from_secs(1),
            auth: Some((Some(b"u"), b"pw")),
            replace: true,
        };
        let keys = [Moving { key: b"k", ttl_ms: 1500, payload: b"\x00\x01v".to_vec() }];
        let sent = request(&target, &keys, true);
        let expected = b"*3\r\n$4\r\nAUTH\r\n$1\r\nu\r\n$2\r\npw\r\n*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n\
            *5\r\n$7\r\nRESTORE\r\n$1\r\nk\r\n$4\r\n1500\r\n$3\r\n\x00\x01v\r\n$7\r\nREPLACE\r\n";
        assert_eq!(sent, expected.to_vec());
        let plain = Target { auth: None, replace: false, ..target };
        assert_eq!(
            request(&plain, &keys, false),
            b"*4\r\n$7\r\nRESTORE\r\n$1\r\nk\r\n$4\r\n1500\r\n$3\r\n\x00\x01v\r\n"
        );
    }
}
