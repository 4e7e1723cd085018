//! REPLICAOF: ScaledKV as a replica of a Redis master.
//!
//! Why: it is the way into ScaledKV from a running Redis without
//! downtime (point ScaledKV at it, let it copy the data set and follow
//! every write, then REPLICAOF NO ONE and move the clients), and a durable
//! copy of a Redis that runs without persistence: the replica acknowledges
//! only offsets it has committed, so the master's WAIT returns once the
//! writes are on the replica's medium.
//!
//! The link runs as a Redis replica's does (`replication.c`): PING, AUTH
//! with `masterauth`, REPLCONF listening-port and capa (eof, psync2), then
//! PSYNC with the replication ID and offset it has (a partial resync after
//! a broken link: +CONTINUE, and the stream goes on) or `? -1`
//! (+FULLRESYNC: the master's RDB follows, length-prefixed or, diskless,
//! between EOF marks). The RDB is read into memory, then loaded: FUNCTION
//! FLUSH and FLUSHALL, each key by RESTORE ... REPLACE ABSTTL (its expiry
//! time and LFU counter), each library by FUNCTION LOAD; other clients'
//! key commands get LOADING meanwhile. Then the master's command stream
//! runs through the path a client's commands take (the master sends
//! effects: relative expiries made absolute, scripts as their writes,
//! expirations as DELs), a run of writes per read, and every second, or
//! when the master asks (REPLCONF GETACK), the replica tells it the offset
//! it has committed. An offset inside a MULTI is not acknowledged until
//! its EXEC commits: a link broken in between resumes before the MULTI.
//!
//! While it follows a master the server refuses other clients' writes
//! with READONLY (Redis's `replica-read-only yes`).
//!
//! The master's replication ID and the offset the data set is at are
//! stored with the writes that reach them (`STATE_KEY`, in the same
//! batch), so a restarted replica resumes with a partial resync where the
//! master's backlog still holds what it missed. The start of a full
//! sync's load deletes it first; so does REPLICAOF NO ONE, by the link's
//! task once the link has ended (writes are refused until then: a
//! position committed after the data set's first write of its own would
//! let a restart resume the master's history over it).
//!
//! A master told REPLICAOF first fixes the offset of its own history its
//! data set is at (`Master::capture`, clients' writes stopped by the
//! write gate), and asks the new master for what follows: the replica
//! promoted from it goes on from there (a partial resync) if it had that
//! much of the stream.
//!
//! ScaledKV as a master is `crate::master`. Not done: databases other
//! than 0 (their keys and commands are skipped, counted in INFO and
//! logged).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::commands::dump::rdb::{Item, RdbFile};
use crate::conn::ConnState;
use crate::resp::{Out, Protocol};
use crate::server::Shared;
use crate::socket::{Peer, Stream};

/// Redis's `repl-timeout`: a link silent this long is broken (the master
/// pings every 10 s).
const TIMEOUT: Duration = Duration::from_secs(60);
/// How long to wait before connecting again after a failure.
const RETRY: Duration = Duration::from_secs(1);
/// How often the replica acknowledges its offset unasked.
const ACK_EVERY: Duration = Duration::from_secs(1);
/// Room for each read from the master: the commands of one read commit
/// together, and on a disk each commit waits for a device flush (catching
/// up on SETs of 1 KiB there: 138k writes/s with 1 MiB, 131k with 64 KiB,
/// medians of 3).
const READ_BYTES: usize = 1 << 20;

/// The master's replication ID and the offset the data set is at, stored
/// with the writes that reach it ("<replid> <offset>", a string value):
/// a restarted replica resumes from there with a partial resync.
const STATE_KEY: &[u8] = b"\xff\xff\x00replication";

#[derive(Clone, Debug, PartialEq)]
pub struct Master {
    pub host: String,
    pub port: u16,
}

/// The replication state: whom to follow, and how the link is doing.
pub struct Replication {
    /// The master, and a generation that every REPLICAOF moves on: the
    /// link of an older generation ends at its next read.
    target: watch::Sender<(Option<Master>, u64)>,
    /// Whether `target` names a master: read by every command (a load,
    /// where the channel's lock would be shared by every I/O thread).
    following: AtomicBool,
    status: Mutex<Status>,
    /// A full sync is loading the master's data set.
    pub loading: AtomicBool,
    /// The database holds `STATE_KEY`.
    stored: AtomicBool,
    /// REPLICAOF NO ONE ended a link: writes are refused until the link's
    /// task, once its last commit is durable, has forgotten the position
    /// (`follow_masters`), so that no position it stored lands after the
    /// data set took a write of its own.
    promoting: AtomicBool,
    /// REPLICAOF turned a master into a replica: its link first fixes the
    /// offset of its own history the data set is at (`Master::capture`),
    /// which a new master that holds that history goes on from.
    demoted: AtomicBool,
    pub masterauth: Mutex<Option<String>>,
    pub masteruser: Mutex<Option<String>>,
    /// Closed while clients' writes may not commit: while this server
    /// follows a master (or a promotion is under way), and from the moment
    /// a failover fixes the offset its data set is at
    /// (`crate::write_gate`).
    pub gate: crate::write_gate::WriteGate,
    /// `replica-priority` (INFO's `slave_priority`): Sentinel promotes
    /// the replica with the lowest, never one with 0.
    pub priority: AtomicU64,
}

#[derive(Default)]
struct Status {
    /// ROLE's words: connect, connecting, handshake, sync, connected.
    state: &'static str,
    /// The master's replication ID and the offset committed from it.
    replid: Option<String>,
    offset: i64,
    last_io: Option<Instant>,
    down_since: Option<Instant>,
    last_error: Option<String>,
    full_syncs: u64,
    partial_syncs: u64,
    /// Keys and commands of databases other than 0, skipped.
    skipped: u64,
    /// Commands from the master that failed here.
    failed: u64,
}

impl Default for Replication {
    fn default() -> Self {
        Replication {
            target: watch::Sender::new((None, 0)),
            following: AtomicBool::new(false),
            status: Mutex::new(Status::default()),
            loading: AtomicBool::new(false),
            stored: AtomicBool::new(false),
            promoting: AtomicBool::new(false),
            demoted: AtomicBool::new(false),
            masterauth: Mutex::new(None),
            masteruser: Mutex::new(None),
            gate: Default::default(),
            priority: AtomicU64::new(DEFAULT_PRIORITY),
        }
    }
}

/// Redis's `replica-priority`.
pub const DEFAULT_PRIORITY: u64 = 100;

/// What REPLICAOF host port did.
pub enum Followed {
    Started,
    Already,
}

impl Replication {
    /// Whether this server follows a master.
    pub fn following(&self) -> bool {
        self.following.load(Ordering::Acquire)
    }

    /// Whether other clients' writes are refused: while it follows a
    /// master, and for the moment a promotion takes (`promoting`).
    pub fn read_only(&self) -> bool {
        self.following() || self.promoting.load(Ordering::Acquire)
    }

    pub fn master(&self) -> Option<Master> {
        self.target.borrow().0.clone()
    }

    /// REPLICAOF host port. The replication ID and offset the data set is
    /// at are kept, as Redis keeps them: a master that shares that history
    /// (the old master, or a replica of it promoted) resumes it with a
    /// partial resync, another answers with a full one.
    pub fn follow(&self, master: Master) -> Followed {
        // Held throughout, as by `stop`: the flag and the target agree.
        let mut status = self.status.lock();
        if self.master().as_ref() == Some(&master) {
            return Followed::Already;
        }
        let (replid, offset) = (status.replid.take(), status.offset);
        *status = Status { state: "connect", down_since: Some(Instant::now()), replid, offset, ..Status::default() };
        self.gate.close();
        if !self.read_only() {
            self.demoted.store(true, Ordering::Release);
        }
        self.following.store(true, Ordering::Release);
        self.target.send_modify(|(target, generation)| {
            *target = Some(master);
            *generation += 1;
        });
        Followed::Started
    }

    /// FAILOVER hands over to `master` (its target): the data set is at
    /// `offset` of this server's history `replid` (`Master::capture`,
    /// the write gate closed), which the link asks the target to go on
    /// from as it takes over (`PSYNC ... FAILOVER`).
    pub fn follow_for_failover(&self, master: Master, (replid, offset): (String, u64)) {
        let mut status = self.status.lock();
        *status = Status {
            state: "connect",
            down_since: Some(Instant::now()),
            replid: Some(replid),
            offset: offset as i64,
            ..Status::default()
        };
        self.gate.close();
        self.following.store(true, Ordering::Release);
        self.target.send_modify(|(target, generation)| {
            *target = Some(master);
            *generation += 1;
        });
    }

    /// Whether REPLICAOF NO ONE's promotion is under way (`promoting`).
    pub fn promoting(&self) -> bool {
        self.promoting.load(Ordering::Acquire)
    }

    /// REPLICAOF NO ONE: the link ends, and the data set, which takes
    /// writes of its own from now, no longer follows the master's history:
    /// its stored position goes, at once if there is no link, else by the
    /// link's task once the link has ended (`promoting` until then), which
    /// then starts its own history from that position (`Master::promote`).
    pub fn stop(&self, shared: &Shared) -> scaledkv::Result<()> {
        let mut status = self.status.lock();
        if !self.following() {
            (status.replid, status.offset) = (None, 0);
            drop(status);
            return forget_position(shared);
        }
        self.promoting.store(true, Ordering::Release);
        self.following.store(false, Ordering::Release);
        self.target.send_modify(|(target, generation)| {
            *target = None;
            *generation += 1;
        });
        Ok(())
    }

    /// Whether the link to the master is up (ROLE's `connected`).
    pub fn link_up(&self) -> bool {
        self.status.lock().state == "connected"
    }

    /// The master's replication ID and the offset committed from it.
    pub fn position(&self) -> (Option<String>, i64) {
        let status = self.status.lock();
        (status.replid.clone(), status.offset)
    }

    /// At start: the position a replica stored, which its next link
    /// resumes from.
    pub fn load_position(&self, db: &scaledkv::Db) -> scaledkv::Result<()> {
        let Some(stored) = db.get(STATE_KEY)? else { return Ok(()) };
        self.stored.store(true, Ordering::Relaxed);
        // The value's type byte, then "<replid> <offset>".
        let text = String::from_utf8_lossy(stored.get(1..).unwrap_or_default()).into_owned();
        if let Some((replid, offset)) = text.split_once(' ').and_then(|(r, o)| Some((r, o.parse().ok()?))) {
            let mut status = self.status.lock();
            (status.replid, status.offset) = (Some(replid.to_owned()), offset);
        }
        Ok(())
    }

    fn generation(&self) -> u64 {
        self.target.borrow().1
    }

    fn set_state(&self, state: &'static str) {
        self.status.lock().state = state;
    }

    /// ROLE's reply as a replica: host, port, state, offset.
    pub fn role(&self) -> Option<(Master, &'static str, i64)> {
        let master = self.master()?;
        let status = self.status.lock();
        Some((master, status.state, status.offset))
    }

    /// INFO's replication section, around `stream` (`Master::info`: this
    /// server's replicas and the master's stream it relays).
    pub fn info(&self, stream: &str) -> String {
        use std::fmt::Write;
        let Some(master) = self.master() else {
            return "role:master\r\nconnected_slaves:0\r\n".into();
        };
        let status = self.status.lock();
        let up = status.state == "connected";
        let mut text = format!(
            "role:slave\r\nmaster_host:{}\r\nmaster_port:{}\r\nmaster_link_status:{}\r\n\
             master_last_io_seconds_ago:{}\r\nmaster_sync_in_progress:{}\r\n",
            master.host,
            master.port,
            if up { "up" } else { "down" },
            status.last_io.map_or(-1, |at| at.elapsed().as_secs() as i64),
            u8::from(status.state == "sync"),
        );
        if let Some(since) = status.down_since.filter(|_| !up) {
            let _ = write!(text, "master_link_down_since_seconds:{}\r\n", since.elapsed().as_secs());
        }
        let offset = status.offset.max(0);
        let _ = write!(
            text,
            "slave_read_repl_offset:{offset}\r\nslave_repl_offset:{offset}\r\nslave_priority:{}\r\n\
             slave_read_only:1\r\nreplica_announced:1\r\n{stream}\
             master_full_syncs:{}\r\nmaster_partial_syncs:{}\r\nmaster_skipped_other_databases:{}\r\n\
             master_failed_commands:{}\r\n",
            self.priority.load(Ordering::Relaxed),
            status.full_syncs,
            status.partial_syncs,
            status.skipped,
            status.failed,
        );
        if let Some(error) = status.last_error.as_deref().filter(|_| !up) {
            let _ = write!(text, "master_link_error:{}\r\n", error.replace(['\r', '\n'], " "));
        }
        text
    }
}

/// Follows whichever master REPLICAOF names, for the server's life.
pub async fn follow_masters(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    let mut changes = shared.replication.target.subscribe();
    loop {
        let (master, generation) = changes.borrow_and_update().clone();
        if master.is_none() && shared.replication.promoting.load(Ordering::Acquire) {
            // No link runs: nothing it stored, or set here, comes after
            // this; the data set is where the status says.
            let history = {
                let mut status = shared.replication.status.lock();
                let offset = std::mem::take(&mut status.offset);
                status.replid.take().zip(u64::try_from(offset).ok())
            };
            if let Err(error) = forget_position(&shared) {
                tracing::error!(%error, "cannot forget the replication position; writes stay refused");
            } else {
                if let Some((replid, offset)) = history {
                    if let Err(error) = shared.master.promote(&shared, replid, offset) {
                        tracing::error!(%error, "the promoted replica's history does not go on: its replicas sync in full");
                    }
                }
                shared.replication.promoting.store(false, Ordering::Release);
                shared.master.thaw();
                shared.replication.gate.open();
            }
        }
        if let Some(master) = master {
            if shared.replication.demoted.swap(false, Ordering::AcqRel) {
                if let Some((replid, offset)) = shared.master.capture(&shared, false).await {
                    tracing::info!(%replid, offset, "a replica now: the new master may go on from this offset");
                    let mut status = shared.replication.status.lock();
                    (status.replid, status.offset) = (Some(replid), offset as i64);
                }
            }
            let stops = Stops { generation, changes: changes.clone(), shutdown: shutdown.clone() };
            match link(&shared, &master, stops).await {
                Ended::Stopped => {}
                Ended::Failed(error) => {
                    tracing::warn!(host = %master.host, port = master.port, %error, "replication link down");
                    shared.failover.link_failed(&shared);
                    let mut status = shared.replication.status.lock();
                    status.state = "connect";
                    status.last_error = Some(error);
                    status.down_since.get_or_insert_with(Instant::now);
                }
            }
            if shared.replication.generation() == generation {
                tokio::select! {
                    _ = tokio::time::sleep(RETRY) => {}
                    _ = changes.changed() => {}
                    _ = shutdown.changed() => return,
                }
            }
            continue;
        }
        tokio::select! {
            _ = changes.changed() => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Why a link ended.
pub(crate) enum Ended {
    /// REPLICAOF moved on, or the server shuts down.
    Stopped,
    Failed(String),
}

impl From<std::io::Error> for Ended {
    fn from(error: std::io::Error) -> Self {
        Ended::Failed(error.to_string())
    }
}

pub(crate) type Linked<T> = Result<T, Ended>;

/// What ends a link: another REPLICAOF, or shutdown.
struct Stops {
    generation: u64,
    changes: watch::Receiver<(Option<Master>, u64)>,
    shutdown: watch::Receiver<bool>,
}

impl Stops {
    fn stopped(&self) -> bool {
        self.changes.borrow().1 != self.generation || *self.shutdown.borrow()
    }

    /// Returns once the link should end.
    async fn wait(&mut self) {
        while !self.stopped() {
            tokio::select! {
                _ = self.changes.changed() => {}
                _ = self.shutdown.changed() => {}
            }
        }
    }
}

async fn link(shared: &Shared, master: &Master, mut stops: Stops) -> Ended {
    shared.replication.set_state("connecting");
    let connect = tokio::time::timeout(Duration::from_secs(5), TcpStream::connect((master.host.as_str(), master.port)));
    let stream = tokio::select! {
        connected = connect => match connected {
            Ok(Ok(stream)) => stream,
            Ok(Err(error)) => return Ended::Failed(format!("cannot connect: {error}")),
            Err(_) => return Ended::Failed("cannot connect: timed out".into()),
        },
        // A promotion waits for this task (`promoting`).
        _ = stops.wait() => return Ended::Stopped,
    };
    let _ = stream.set_nodelay(true);
    // Redis's `tls-replication yes`: the link speaks TLS.
    let stream = match shared.tls.connector() {
        None => Stream::Tcp(stream),
        Some(connector) => {
            let shaken = tokio::select! {
                shaken = crate::tls::connect(connector, &master.host, stream) => shaken,
                _ = stops.wait() => return Ended::Stopped,
            };
            match shaken {
                Ok(tls) => Stream::TlsClient(Box::new(tls)),
                Err(error) => return Ended::Failed(format!("TLS handshake with the master failed: {error}")),
            }
        }
    };
    let mut link = Link { shared, stream, input: BytesMut::with_capacity(READ_BYTES), stops };
    match link.run().await {
        Ok(()) => Ended::Stopped,
        Err(ended) => ended,
    }
}

struct Link<'s> {
    shared: &'s Shared,
    stream: Stream,
    input: BytesMut,
    stops: Stops,
}

impl<'s> Link<'s> {
    /// The master's address and this end's, for the link's line in CLIENT
    /// LIST.
    fn peers(&self) -> std::io::Result<(Peer, Peer)> {
        let tcp = self.stream.tcp().expect("a link to a master is TCP underneath");
        Ok((Peer::Tcp(tcp.peer_addr()?), Peer::Tcp(tcp.local_addr()?)))
    }

    async fn run(&mut self) -> Linked<()> {
        let replication = &self.shared.replication;
        replication.set_state("handshake");
        let pong = self.ask(&[b"PING"]).await?;
        // A master with a password answers NOAUTH until AUTH below.
        if pong.starts_with(b"-") && !pong.starts_with(b"-NOAUTH") && !pong.starts_with(b"-NOPERM") {
            return Err(failed("PING", &pong));
        }
        let auth = replication.masterauth.lock().clone();
        if let Some(password) = auth {
            let user = replication.masteruser.lock().clone();
            let mut args: Vec<&[u8]> = vec![b"AUTH"];
            if let Some(user) = &user {
                args.push(user.as_bytes());
            }
            args.push(password.as_bytes());
            let reply = self.ask(&args).await?;
            if reply.starts_with(b"-") {
                return Err(failed("AUTH", &reply));
            }
        }
        let port = self.shared.port.load(Ordering::Relaxed).to_string();
        // Older masters refuse these; Redis's replica goes on regardless.
        self.ask(&[b"REPLCONF", b"listening-port", port.as_bytes()]).await?;
        self.ask(&[b"REPLCONF", b"capa", b"eof", b"capa", b"psync2"]).await?;
        let (replid, offset) = {
            let status = replication.status.lock();
            (status.replid.clone(), status.offset)
        };
        let next = (offset + 1).to_string();
        let mut psync: Vec<&[u8]> = match &replid {
            Some(id) => vec![b"PSYNC", id.as_bytes(), next.as_bytes()],
            None => vec![b"PSYNC", b"?", b"-1"],
        };
        if self.shared.failover.in_progress() {
            // The target promotes itself, then answers (`crate::failover`).
            psync.push(b"FAILOVER");
        }
        let reply = self.ask(&psync).await?;
        let words: Vec<&[u8]> = reply.split(|&b| b == b' ').collect();
        let answered = matches!(words[0], b"+FULLRESYNC" | b"+CONTINUE");
        self.shared.failover.answered(self.shared, answered);
        match words[0] {
            b"+FULLRESYNC" if words.len() == 3 => {
                let id = String::from_utf8_lossy(words[1]).into_owned();
                let offset: i64 = std::str::from_utf8(words[2])
                    .ok()
                    .and_then(|o| o.parse().ok())
                    .ok_or_else(|| failed("PSYNC", &reply))?;
                {
                    // The data set no longer follows the old history, not
                    // even if the load stops half way.
                    let mut status = replication.status.lock();
                    (status.state, status.replid, status.offset) = ("sync", None, 0);
                }
                self.shared.master.followed(self.shared, &id, offset as u64, false);
                let rdb = self.rdb().await?;
                self.load(&rdb, &id, offset).await?;
                let mut status = replication.status.lock();
                status.replid = Some(id);
                status.offset = offset;
                status.full_syncs += 1;
            }
            b"+CONTINUE" => {
                let (replid, offset) = {
                    let mut status = replication.status.lock();
                    if let Some(id) = words.get(1) {
                        status.replid = Some(String::from_utf8_lossy(id).into_owned());
                    }
                    status.partial_syncs += 1;
                    (status.replid.clone().unwrap_or_default(), status.offset)
                };
                self.shared.master.followed(self.shared, &replid, offset as u64, true);
            }
            _ => return Err(failed("PSYNC", &reply)),
        }
        {
            let mut status = replication.status.lock();
            status.state = "connected";
            status.down_since = None;
            status.last_error = None;
        }
        tracing::info!("replication link up: following the master's writes");
        self.ack().await?;
        self.follow().await
    }

    /// Reads more from the master into `input`.
    async fn read_more(&mut self) -> Linked<()> {
        self.input.reserve(READ_BYTES);
        let read = tokio::time::timeout(TIMEOUT, self.stream.read_buf(&mut self.input));
        tokio::select! {
            read = read => match read {
                Err(_) => Err(Ended::Failed(format!("timeout: nothing from the master for {} s", TIMEOUT.as_secs()))),
                Ok(Ok(0)) => Err(Ended::Failed("the master closed the connection".into())),
                Ok(Ok(n)) => {
                    self.shared.stats.net_input_bytes.fetch_add(n as u64, Ordering::Relaxed);
                    self.shared.replication.status.lock().last_io = Some(Instant::now());
                    Ok(())
                }
                Ok(Err(error)) => Err(error.into()),
            },
            _ = self.stops.wait() => Err(Ended::Stopped),
        }
    }

    /// The next line the master sends, without its CR LF.
    async fn line(&mut self) -> Linked<Vec<u8>> {
        loop {
            if let Some(end) = self.input.iter().position(|&b| b == b'\n') {
                let line = self.input.split_to(end + 1);
                let line = line.strip_suffix(b"\n").unwrap_or(&line);
                return Ok(line.strip_suffix(b"\r").unwrap_or(line).to_vec());
            }
            if self.input.len() > 64 * 1024 {
                return Err(Ended::Failed("the master sent a line of more than 64 KiB".into()));
            }
            self.read_more().await?;
        }
    }

    async fn send(&mut self, args: &[&[u8]]) -> Linked<()> {
        let mut request = Vec::new();
        crate::resp::request::put_request(&mut request, args);
        self.stream.write_all(&request).await?;
        Ok(())
    }

    /// Sends a handshake command and returns its reply's line; the empty
    /// lines a master sends to keep the link alive are skipped.
    async fn ask(&mut self, args: &[&[u8]]) -> Linked<Vec<u8>> {
        self.send(args).await?;
        loop {
            let line = self.line().await?;
            if !line.is_empty() {
                return Ok(line);
            }
        }
    }

    /// The master's RDB: `$<length>` and that many bytes, or (diskless)
    /// `$EOF:<mark>`, the file, and the same 40-byte mark.
    async fn rdb(&mut self) -> Linked<Bytes> {
        let header = loop {
            let line = self.line().await?;
            if !line.is_empty() {
                break line;
            }
        };
        if let Some(mark) = header.strip_prefix(b"$EOF:") {
            if mark.len() != 40 {
                return Err(failed("the RDB transfer", &header));
            }
            // The master sends nothing after the mark until the first ACK.
            while !self.input.ends_with(mark) {
                self.read_more().await?;
            }
            let mut rdb = self.input.split();
            rdb.truncate(rdb.len() - mark.len());
            return Ok(rdb.freeze());
        }
        let len: usize = header
            .strip_prefix(b"$")
            .and_then(|len| std::str::from_utf8(len).ok())
            .and_then(|len| len.parse().ok())
            .ok_or_else(|| failed("the RDB transfer", &header))?;
        // Read in place: no copy of the file, nor a buffer grown twice over.
        self.input.reserve(len.saturating_sub(self.input.len()));
        while self.input.len() < len {
            self.read_more().await?;
        }
        Ok(self.input.split_to(len).freeze())
    }

    /// Replaces the data set with the RDB's, which is at `offset` of the
    /// master's history `replid` (stored with its last keys).
    async fn load(&mut self, rdb: &[u8], replid: &str, offset: i64) -> Linked<()> {
        let started = Instant::now();
        let mut file = RdbFile::open(rdb).map_err(|error| Ended::Failed(error.to_string()))?;
        let shared = self.shared;
        shared.replication.loading.store(true, Ordering::Release);
        let _loaded = Loading(&shared.replication.loading);
        // No replica of this one takes a snapshot half way through.
        let _committing = shared.master.committing().await;
        let failed_before = shared.replication.status.lock().failed;
        let (master, local) = self.peers()?;
        let mut runner = Runner::new(shared, master, local);
        // The stored position goes before the old data (FLUSHALL keeps the
        // server's settings): a restart in the middle syncs in full.
        forget_position(shared).map_err(|error| Ended::Failed(format!("cannot forget the old position: {error}")))?;
        runner.run(vec![Bytes::from_static(b"FUNCTION"), Bytes::from_static(b"FLUSH")]).await?;
        runner.run(vec![Bytes::from_static(b"FLUSHALL")]).await?;
        let stops = &self.stops;
        let (keys, skipped) = match restore_all(&mut runner, &mut file, || stops.stopped()).await {
            Err(Ended::Stopped) => {
                runner.commit().await;
                return Err(Ended::Stopped);
            }
            loaded => loaded?,
        };
        let new = !shared.replication.stored.swap(true, Ordering::Relaxed);
        runner.run.put_setting(STATE_KEY, format!("{replid} {offset}").as_bytes(), new);
        let committed = runner.commit().await;
        if !committed || shared.replication.status.lock().failed > failed_before {
            return Err(Ended::Failed("loading the master's data set failed (see the log)".into()));
        }
        shared.replication.status.lock().skipped += skipped;
        if skipped > 0 {
            tracing::warn!(skipped, "the master's RDB holds keys of databases other than 0: not loaded");
        }
        tracing::info!(
            keys,
            bytes = rdb.len(),
            seconds = started.elapsed().as_secs_f64(),
            "loaded the master's data set"
        );
        Ok(())
    }

    async fn ack(&mut self) -> Linked<()> {
        let offset = self.shared.replication.status.lock().offset;
        self.send(&[b"REPLCONF", b"ACK", offset.to_string().as_bytes()]).await
    }

    /// Runs the master's command stream until the link ends.
    async fn follow(&mut self) -> Linked<()> {
        let shared = self.shared;
        let (master, local) = self.peers()?;
        let mut runner = Runner::new(shared, master, local);
        let limits = crate::resp::Limits {
            max_bulk_bytes: usize::MAX,
            max_args: usize::MAX,
            max_request_bytes: usize::MAX,
            authenticated: true,
        };
        let info = runner.conn().info.clone();
        let mut acked = Instant::now();
        // The stream's bytes run but not yet committed, those of them up
        // to the last command outside a MULTI (what a commit makes the
        // offset), and the database its SELECT chose.
        let (mut unacked, mut safe, mut db) = (0i64, 0i64, 0u64);
        // The bytes of those and of what is read but not yet run, as the
        // master sent them: committed, they go on to `Master::relay`.
        let mut raw = self.input.to_vec();
        loop {
            let mut asked = false;
            // Until this read's runs are relayed, replicas of this one
            // take no snapshot (a long run commits in parts as it goes).
            let committing = shared.master.committing().await;
            loop {
                let before = self.input.len();
                let args = match crate::resp::parse(&mut self.input, &limits) {
                    Ok(Some(args)) => args,
                    Ok(None) => break,
                    Err(error) => return Err(Ended::Failed(format!("the master sent a malformed command: {error}"))),
                };
                unacked += (before - self.input.len()) as i64;
                let name = args[0].to_ascii_lowercase();
                match &name[..] {
                    b"replconf" => asked |= args.get(1).is_some_and(|a| a.eq_ignore_ascii_case(b"getack")),
                    b"ping" => {}
                    b"select" => {
                        db = args.get(1).and_then(|n| std::str::from_utf8(n).ok()?.parse().ok()).unwrap_or(u64::MAX)
                    }
                    _ if db != 0 => shared.replication.status.lock().skipped += 1,
                    _ => runner.run(args).await?,
                }
                // Inside a MULTI the commands are only queued.
                if runner.conn().multi.is_none() {
                    safe = unacked;
                }
            }
            if unacked > 0 {
                let (replid, offset) = shared.replication.position();
                if let Some(replid) = replid.filter(|_| runner.run.has_writes() && safe > 0) {
                    // With the writes: a restart resumes right after them.
                    let stored = format!("{replid} {}", offset + safe);
                    let new = !shared.replication.stored.swap(true, Ordering::Relaxed);
                    runner.run.put_setting(STATE_KEY, stored.as_bytes(), new);
                }
                if !runner.commit().await {
                    // Resumed from the offset committed, the master sends
                    // these writes again.
                    return Err(Ended::Failed("committing the master's writes failed (see the log)".into()));
                }
                let offset = {
                    let mut status = shared.replication.status.lock();
                    status.offset += safe;
                    status.offset
                };
                // The committed bytes move on whole; only what follows them
                // (the rest of the read: usually a part of a command) is
                // copied.
                let rest = raw.split_off(safe as usize);
                shared.master.relay(offset as u64, std::mem::replace(&mut raw, rest));
                unacked -= std::mem::take(&mut safe);
            }
            drop(committing);
            if asked || acked.elapsed() >= ACK_EVERY {
                self.ack().await?;
                acked = Instant::now();
            }
            let tick = tokio::time::sleep(ACK_EVERY.saturating_sub(acked.elapsed()));
            let had = self.input.len();
            tokio::select! {
                read = self.read_more() => read?,
                _ = tick => {}
                _ = info.wake.notified() => {}
            }
            raw.extend_from_slice(&self.input[had..]);
            if info.killed.load(Ordering::Acquire) {
                return Err(Ended::Failed("closed by CLIENT KILL".into()));
            }
        }
    }
}

/// Deletes the stored position, durably, if there is one.
fn forget_position(shared: &Shared) -> scaledkv::Result<()> {
    if shared.replication.stored.swap(false, Ordering::Relaxed) {
        shared.db.delete(STATE_KEY)?;
        shared.reserved_entries.fetch_sub(1, Ordering::Relaxed);
    }
    Ok(())
}

/// Runs RESTORE (REPLACE ABSTTL, FREQ where the file has counters) for
/// every key of database 0 in `file` and FUNCTION LOAD REPLACE for every
/// library, through `runner`; returns the keys restored and the keys of
/// other databases skipped. Stops when `stopped` says so (asked every
/// 1,024 keys), uncommitted.
pub(crate) async fn restore_all(
    runner: &mut Runner<'_>,
    file: &mut RdbFile<'_>,
    mut stopped: impl FnMut() -> bool,
) -> Linked<(u64, u64)> {
    let (mut keys, mut skipped) = (0u64, 0u64);
    while let Some(item) = file.next_item().map_err(|error| Ended::Failed(error.to_string()))? {
        match item {
            Item::Entry(entry) if entry.db != 0 => skipped += 1,
            Item::Entry(entry) => {
                let mut args = vec![
                    Bytes::from_static(b"RESTORE"),
                    Bytes::from(entry.key),
                    Bytes::from(entry.expiry_ms.unwrap_or(0).to_string()),
                    Bytes::from(entry.payload),
                    Bytes::from_static(b"REPLACE"),
                    Bytes::from_static(b"ABSTTL"),
                ];
                if let Some(counter) = entry.freq {
                    args.push(Bytes::from_static(b"FREQ"));
                    args.push(Bytes::from(counter.to_string()));
                }
                runner.run(args).await?;
                keys += 1;
            }
            Item::Library(code) => {
                let load = [&b"FUNCTION"[..], b"LOAD", b"REPLACE"].map(Bytes::from_static);
                let mut args = load.to_vec();
                args.push(Bytes::from(code));
                runner.run(args).await?;
            }
        }
        if keys.is_multiple_of(1024) && stopped() {
            return Err(Ended::Stopped);
        }
    }
    Ok((keys, skipped))
}

/// Clears the loading flag however the load ends.
struct Loading<'a>(&'a AtomicBool);

impl Drop for Loading<'_> {
    fn drop(&mut self) {
        self.0.store(false, Ordering::Release);
    }
}

fn failed(what: &str, reply: &[u8]) -> Ended {
    Ended::Failed(format!("{what}: the master answered {}", String::from_utf8_lossy(reply)))
}

/// Runs commands as the master's link: a client of its own (listed in
/// CLIENT LIST), whose writes join runs as a pipelining client's do and
/// whose replies are only looked at for errors.
pub(crate) struct Runner<'s> {
    shared: &'s Shared,
    /// Taken when dropped, to unregister it.
    conn: Option<ConnState>,
    out: Out,
    pub(crate) run: crate::commands::Run<'s>,
    /// Errors logged in this link's life (the first few).
    logged: u32,
    /// Commands and commits that failed.
    pub(crate) failures: u64,
    /// Its failures count in INFO replication (a link's, not an import's).
    counted: bool,
}

impl<'s> Runner<'s> {
    pub(crate) fn new(shared: &'s Shared, master: Peer, local: Peer) -> Runner<'s> {
        let id = shared.next_client_id.fetch_add(1, Ordering::Relaxed);
        // Unregistering counts it out.
        shared.connected.fetch_add(1, Ordering::AcqRel);
        let mut conn = ConnState::register(shared, id, master, local);
        conn.authenticated = true;
        conn.master_link = true;
        conn.info.master.store(true, Ordering::Relaxed);
        Runner {
            shared,
            conn: Some(conn),
            out: Out::new(Protocol::Resp2),
            run: crate::commands::Run::for_master(),
            logged: 0,
            failures: 0,
            counted: true,
        }
    }

    /// A runner for `--import-rdb` (`crate::rdb_import`): listed as the
    /// master's link while it runs, its failures not counted as the link's.
    pub(crate) fn for_import(shared: &'s Shared) -> Runner<'s> {
        let mut runner = Runner::new(shared, Peer::LOOPBACK, Peer::LOOPBACK);
        runner.counted = false;
        runner
    }

    pub(crate) async fn run(&mut self, args: Vec<Bytes>) -> Linked<()> {
        let mark = self.out.len();
        let shown = args.first().map(|name| String::from_utf8_lossy(name).into_owned());
        let conn = self.conn.as_mut().expect("registered until dropped");
        crate::commands::execute(self.shared, conn, &mut self.out, args, &mut self.run).await;
        if self.out.buf.get(mark) == Some(&b'-') {
            let error = String::from_utf8_lossy(&self.out.buf[mark + 1..]).lines().next().unwrap_or("").to_owned();
            self.failed(shown.as_deref().unwrap_or(""), &error);
        }
        if self.out.len() > 1 << 20 {
            self.commit().await;
        }
        Ok(())
    }

    fn failed(&mut self, command: &str, error: &str) {
        self.failures += 1;
        if self.counted {
            self.shared.replication.status.lock().failed += 1;
        }
        if self.logged < 10 {
            self.logged += 1;
            tracing::warn!(command, error, "a command from the master failed here");
        }
    }

    /// Commits the run; a failed commit is logged and counted (and false
    /// returned).
    pub(crate) async fn commit(&mut self) -> bool {
        let committed = self.run.commit(self.shared, &mut self.out).await;
        if !committed {
            let error = String::from_utf8_lossy(self.out.buf.get(1..).unwrap_or_default());
            let error = error.lines().next().unwrap_or("").to_owned();
            self.failed("a run of writes", &error);
        }
        self.out.buf.clear();
        committed
    }

    fn conn(&mut self) -> &mut ConnState {
        self.conn.as_mut().expect("registered until dropped")
    }
}

impl Drop for Runner<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            conn.unregister(self.shared);
        }
    }
}
