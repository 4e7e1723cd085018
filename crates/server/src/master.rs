//! ScaledKV as a master: a replica (Redis's REPLICAOF, or ScaledKV's own)
//! gets the data set as an RDB file, then every write after it, and
//! resumes a broken link from the backlog (PSYNC, +CONTINUE).
//!
//! What streams is each changed key's state, not the client's command.
//! Commands note the keys they change (their keyspace events) on their
//! engine batch (`WriteBatch::set_note`), and the engine hands the notes
//! over in commit order with their sequence numbers
//! (`Db::set_commit_observer`). A drain takes a snapshot, takes every note
//! up to its sequence number, and writes each key as the snapshot holds
//! it: SET ... PXAT for a string, RESTORE ... REPLACE ABSTTL for another
//! type, DEL for a key that is gone; a drain of several keys as one
//! MULTI/EXEC. So a replica moves from one moment of the master's data to
//! a later one, never to a mix of two, and what scripts, relative expiry
//! times, random pops and blocking moves come down to needs no rewrite
//! per command (Redis rewrites each into its effects for the same
//! reason); a key written many times between two drains goes once.
//! Expired and evicted keys go as DELs by the same path (their deletes
//! are the engine's own, noted when they are announced).
//!
//! The cost is the other side of that: a write to a big collection (a
//! hash table, a chunked list) sends the collection whole, once per drain
//! while it is being written.
//!
//! A full sync's file and its place in the stream are one moment: the
//! drain up to the file's snapshot runs first, under the lock drains take,
//! and the replica's stream starts where it ended.
//!
//! Streaming starts with the first replica, under every key's lock (so no
//! command that ran before it, unnoted, commits after the file's moment),
//! and stops an hour (`repl-backlog-ttl`) after the last one left, with a
//! new replication ID, as Redis frees its backlog.

use std::collections::BTreeSet;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use parking_lot::{Condvar, Mutex};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::watch;

use crate::conn::{ClientInfo, ConnState};
use crate::keyspace::{KeyLocks, Writes, TYPE_ITEM, TYPE_STRING};
use crate::notify::Event;
use crate::resp::{Out, Protocol};
use crate::server::Shared;

/// Redis's `repl-backlog-size` default.
pub const DEFAULT_BACKLOG_BYTES: usize = 1 << 20;
/// Redis's `repl-backlog-ttl`.
const BACKLOG_TTL: Duration = Duration::from_secs(3600);
/// Redis's `client-output-buffer-limit replica` hard limit: a replica this
/// far behind the stream is disconnected.
const MAX_LAG_BYTES: u64 = 256 << 20;
/// Redis's `repl-ping-replica-period`.
const PING_EVERY: Duration = Duration::from_secs(10);
/// At most one drain per this long: the drains between two of a key's
/// writes are what send it again.
const DRAIN_EVERY: Duration = Duration::from_millis(1);
/// The most a replica's sender copies from the backlog per write.
const SEND_BYTES: usize = 1 << 20;
/// Drains remembered for WAIT: its writes are found among them unless it
/// waited this many drains (several seconds) to start.
const DRAINS_KEPT: usize = 4096;
/// A note's length word for "every key was deleted" (FLUSHALL).
const FLUSHED: u32 = u32::MAX;

/// The master's side of replication.
pub struct Master {
    /// Whether commands note the keys they change (`note_of`).
    streaming: AtomicBool,
    /// The notes the engine handed over, and the keys deleted outside
    /// commands (expiry, eviction), not yet drained.
    changes: Mutex<Changes>,
    changed: Condvar,
    stream: Mutex<Stream>,
    /// Held for a drain, so drains (the drainer's and full syncs') follow
    /// one another.
    draining: Mutex<()>,
    /// `master_repl_offset`, for the replicas' senders.
    end: watch::Sender<u64>,
    /// `repl-backlog-size`.
    pub backlog_bytes: AtomicUsize,
    /// Clients in WAIT, woken by acknowledgements.
    waiting: Mutex<Vec<Arc<ClientInfo>>>,
    drainer: Mutex<Option<std::thread::JoinHandle<()>>>,
    stop: AtomicBool,
    /// INFO stats' `sync_full`, `sync_partial_ok`, `sync_partial_err`.
    pub syncs: [std::sync::atomic::AtomicU64; 3],
}

#[derive(Default)]
struct Changes {
    batches: std::collections::VecDeque<(u64, Vec<u8>)>,
    loose: Vec<Vec<u8>>,
    loose_flush: bool,
}

struct Stream {
    replid: String,
    /// Bytes `start + 1 ..= start + backlog.len()` of the stream.
    backlog: Vec<u8>,
    start: u64,
    replicas: Vec<Arc<Replica>>,
    /// The snapshots recent drains read and where their bytes ended,
    /// oldest first (WAIT's offsets).
    drained: std::collections::VecDeque<(u64, u64)>,
    last_ping: Instant,
    alone_since: Option<Instant>,
    /// WAIT asked for acknowledgements since the last drain.
    getack: bool,
}

impl Stream {
    fn end(&self) -> u64 {
        self.start + self.backlog.len() as u64
    }
}

/// A replica as INFO and ROLE show it.
pub struct Replica {
    client: Arc<ClientInfo>,
    /// The port it announced (REPLCONF listening-port).
    port: u16,
    online: AtomicBool,
    /// The stream's offset it has been sent up to; until its file is
    /// sent, where its stream starts (None before that is known).
    sent: Mutex<Option<u64>>,
    /// The offset it acknowledged, and when.
    acked: AtomicI64,
    acked_at: Mutex<Instant>,
}

impl Default for Master {
    fn default() -> Master {
        Master {
            streaming: AtomicBool::new(false),
            changes: Mutex::new(Changes::default()),
            changed: Condvar::new(),
            stream: Mutex::new(Stream {
                replid: random_hex(),
                backlog: Vec::new(),
                start: 0,
                replicas: Vec::new(),
                drained: std::collections::VecDeque::new(),
                last_ping: Instant::now(),
                alone_since: None,
                getack: false,
            }),
            draining: Mutex::new(()),
            end: watch::Sender::new(0),
            backlog_bytes: AtomicUsize::new(DEFAULT_BACKLOG_BYTES),
            waiting: Mutex::new(Vec::new()),
            drainer: Mutex::new(None),
            stop: AtomicBool::new(false),
            syncs: Default::default(),
        }
    }
}

/// The note of a batch whose commands noted `events`: each key changed
/// (length-prefixed), a flush as `FLUSHED`. None if they name none.
pub fn note_of(events: &[Event]) -> Option<Vec<u8>> {
    let mut note = Vec::new();
    for event in events.iter().filter(|e| e.class != crate::notify::MISS) {
        if event.class == crate::notify::FLUSHED {
            note.extend_from_slice(&FLUSHED.to_le_bytes());
        } else {
            note.extend_from_slice(&(event.key.len() as u32).to_le_bytes());
            note.extend_from_slice(&event.key);
        }
    }
    (!note.is_empty()).then_some(note)
}

/// Adds a note's keys to `keys`; true if it holds a flush.
fn read_note(mut note: &[u8], keys: &mut BTreeSet<Vec<u8>>) -> bool {
    let mut flushed = false;
    while let Some((len, rest)) = note.split_first_chunk::<4>() {
        let len = u32::from_le_bytes(*len);
        if len == FLUSHED {
            flushed = true;
            note = rest;
            continue;
        }
        let Some((key, rest)) = rest.split_at_checked(len as usize) else { break };
        keys.insert(key.to_vec());
        note = rest;
    }
    flushed
}

impl Master {
    /// Whether writes are streamed (some replica connected within the
    /// backlog's time to live): commands then note the keys they change.
    pub fn streaming(&self) -> bool {
        self.streaming.load(Ordering::Relaxed)
    }

    pub fn replid(&self) -> String {
        self.stream.lock().replid.clone()
    }

    /// Keys the server deleted outside commands (`notify::publish`: active
    /// expiry, eviction), already visible.
    pub fn note_loose(&self, events: &[Event]) {
        if !self.streaming() {
            return;
        }
        let mut changes = self.changes.lock();
        for event in events.iter().filter(|e| e.writer == 0) {
            match event.class {
                crate::notify::EXPIRED | crate::notify::EVICTED => changes.loose.push(event.key.clone()),
                crate::notify::FLUSHED => changes.loose_flush = true,
                _ => {}
            }
        }
        self.changed.notify_one();
    }

    /// Starts streaming if it is not on: under every key's lock, so every
    /// command that did not note its keys has queued its batch, which the
    /// barrier after it makes visible (before any full sync's snapshot).
    async fn start(self: &Arc<Self>, shared: &Arc<Shared>) -> Result<(), String> {
        if self.streaming() {
            return Ok(());
        }
        let guards = shared.locks.lock(&KeyLocks::all()).await;
        if !self.streaming() {
            let observer = Arc::downgrade(self);
            shared.db.set_commit_observer(Some(Arc::new(move |seq, note: &[u8]| {
                if let Some(master) = observer.upgrade() {
                    master.changes.lock().batches.push_back((seq, note.to_vec()));
                    master.changed.notify_one();
                }
            })));
            self.streaming.store(true, Ordering::Relaxed);
            self.stop.store(false, Ordering::Relaxed);
            let mut drainer = self.drainer.lock();
            if drainer.is_none() {
                let (master, shared) = (self.clone(), shared.clone());
                *drainer = Some(
                    std::thread::Builder::new()
                        .name("scaledkv-replication".into())
                        .spawn(move || master.drain_loop(&shared))
                        .map_err(|error| format!("the replication thread did not start: {error}"))?,
                );
            }
            tracing::info!("streaming writes to replicas");
        }
        drop(guards);
        crate::commands::wait_for_queued(shared).await.map_err(|error| error.to_string())
    }

    /// The drainer thread: a drain whenever something changed (at most
    /// one per `DRAIN_EVERY`), pings every `PING_EVERY` while replicas
    /// are connected; stops streaming once the backlog outlived its time.
    fn drain_loop(&self, shared: &Shared) {
        let mut last = Instant::now();
        loop {
            {
                let mut changes = self.changes.lock();
                if changes.batches.is_empty() && changes.loose.is_empty() && !changes.loose_flush {
                    self.changed.wait_for(&mut changes, Duration::from_millis(100));
                }
            }
            if self.stop.load(Ordering::Relaxed) {
                return;
            }
            if !self.streaming() {
                continue;
            }
            let since = last.elapsed();
            if since < DRAIN_EVERY {
                std::thread::sleep(DRAIN_EVERY - since);
            }
            last = Instant::now();
            let _draining = self.draining.lock();
            let snapshot = shared.db.snapshot();
            self.drain(shared, &snapshot);
            if self.expired() {
                self.streaming.store(false, Ordering::Relaxed);
                shared.db.set_commit_observer(None);
                *self.changes.lock() = Changes::default();
                let mut stream = self.stream.lock();
                stream.replid = random_hex();
                stream.start = stream.end();
                stream.backlog = Vec::new();
                tracing::info!("no replica for an hour: the backlog is freed");
            }
        }
    }

    /// Whether streaming should stop: no replica for `BACKLOG_TTL`.
    fn expired(&self) -> bool {
        let stream = self.stream.lock();
        stream.replicas.is_empty() && stream.alone_since.is_some_and(|since| since.elapsed() >= BACKLOG_TTL)
    }

    /// Appends the changes up to `snapshot` to the stream (with
    /// `draining` held); returns the stream's end.
    fn drain(&self, shared: &Shared, snapshot: &scaledkv::Snapshot<'_>) -> u64 {
        let seq = snapshot.seq();
        let mut keys = BTreeSet::new();
        let mut flushed = false;
        {
            // Loose keys were deleted before they were noted, so before
            // the snapshot; batches up to its sequence number are in it.
            let mut changes = self.changes.lock();
            for key in changes.loose.drain(..) {
                keys.insert(key);
            }
            flushed |= std::mem::take(&mut changes.loose_flush);
            while changes.batches.front().is_some_and(|(at, _)| *at <= seq) {
                let (_, note) = changes.batches.pop_front().expect("a front");
                flushed |= read_note(&note, &mut keys);
            }
        }
        let mut commands = Transactions::new(keys.len() + usize::from(flushed));
        if flushed {
            commands.open();
            put_command(&mut commands.out, &[b"FLUSHALL"]);
        }
        if !keys.is_empty() {
            let mut conn = ConnState::detached(0, local(), local());
            conn.authenticated = true;
            let mut out = Out::new(Protocol::Resp2);
            let mut writes = Writes::new(false);
            let mut ctx = crate::commands::Ctx {
                shared,
                conn: &mut conn,
                out: &mut out,
                writes: &mut writes,
                reads_count: false,
            };
            snapshot.view(|| {
                for key in &keys {
                    commands.open();
                    let at = commands.out.len();
                    if let Err(error) = command_of(&mut ctx, key, &mut commands.out) {
                        commands.out.truncate(at);
                        tracing::error!(
                            key = %String::from_utf8_lossy(key),
                            error = %error.text(),
                            "a changed key could not be read for the replicas"
                        );
                    }
                    ctx.out.buf.clear();
                }
            });
        }
        let commands = commands.finish();
        let mut stream = self.stream.lock();
        stream.backlog.extend_from_slice(&commands);
        let now = Instant::now();
        if !stream.replicas.is_empty() && now.duration_since(stream.last_ping) >= PING_EVERY {
            put_command(&mut stream.backlog, &[b"PING"]);
            stream.last_ping = now;
        }
        if std::mem::take(&mut stream.getack) {
            put_command(&mut stream.backlog, &[b"REPLCONF", b"GETACK", b"*"]);
        }
        let end = stream.end();
        if stream.drained.len() >= DRAINS_KEPT {
            stream.drained.pop_front();
        }
        stream.drained.push_back((seq, end));
        self.trim(&mut stream);
        drop(stream);
        self.end.send_if_modified(|at| std::mem::replace(at, end) != end);
        end
    }

    /// Drops what no replica needs beyond the backlog's size; a replica
    /// more than `MAX_LAG_BYTES` behind is disconnected.
    fn trim(&self, stream: &mut Stream) {
        let end = stream.end();
        let mut keep_from = end.saturating_sub(self.backlog_bytes.load(Ordering::Relaxed) as u64);
        for replica in &stream.replicas {
            let Some(sent) = *replica.sent.lock() else { continue };
            if end - sent > MAX_LAG_BYTES {
                if !replica.client.killed.swap(true, Ordering::AcqRel) {
                    tracing::warn!(client = replica.client.id, "a replica fell too far behind; disconnected");
                }
                replica.client.wake.notify_one();
            } else {
                keep_from = keep_from.min(sent);
            }
        }
        let drop = keep_from.saturating_sub(stream.start) as usize;
        // In halves: a copy of what stays now and then, not per drain.
        if drop > 0 && drop >= stream.backlog.len() / 2 {
            stream.backlog.drain(..drop);
            stream.start += drop as u64;
        }
    }

    /// Bytes of the stream after `from`, up to `SEND_BYTES`; None if they
    /// are no longer kept.
    fn read(&self, from: u64) -> Option<Vec<u8>> {
        let stream = self.stream.lock();
        if from < stream.start {
            return None;
        }
        let at = (from - stream.start) as usize;
        let upto = stream.backlog.len().min(at + SEND_BYTES);
        Some(stream.backlog.get(at..upto).unwrap_or_default().to_vec())
    }

    /// The end of the first drain that covers the engine's sequence
    /// number `seq` (WAIT's offset); None until it ran. If it is older
    /// than those remembered, the oldest's end (later, so enough).
    pub fn offset_covering(&self, seq: u64) -> Option<u64> {
        let stream = self.stream.lock();
        stream.drained.iter().find(|(at, _)| *at >= seq).map(|(_, end)| *end)
    }

    /// Has the next drain ask the replicas for acknowledgements (REPLCONF
    /// GETACK), as Redis does for a client in WAIT.
    pub fn ask_for_acks(&self) {
        self.stream.lock().getack = true;
        self.changed.notify_one();
    }

    /// Replicas that acknowledged `offset`.
    pub fn acked(&self, offset: u64) -> usize {
        let stream = self.stream.lock();
        stream.replicas.iter().filter(|r| r.acked.load(Ordering::Acquire) >= offset as i64).count()
    }

    pub fn replicas(&self) -> usize {
        self.stream.lock().replicas.len()
    }

    /// Adds `client` to those woken by acknowledgements (WAIT).
    pub fn wake_on_ack(&self, client: &Arc<ClientInfo>) {
        let mut waiting = self.waiting.lock();
        if !waiting.iter().any(|c| c.id == client.id) {
            waiting.push(client.clone());
        }
    }

    pub fn stop_waking(&self, id: u64) {
        self.waiting.lock().retain(|c| c.id != id);
    }

    fn register(&self, replica: Arc<Replica>) {
        let mut stream = self.stream.lock();
        stream.replicas.push(replica);
        stream.alone_since = None;
    }

    fn unregister(&self, id: u64) {
        let mut stream = self.stream.lock();
        stream.replicas.retain(|r| r.client.id != id);
        if stream.replicas.is_empty() {
            stream.alone_since = Some(Instant::now());
        }
    }

    /// ROLE's list: each replica's address, port and acknowledged offset.
    pub fn role(&self) -> (u64, Vec<(String, u16, i64)>) {
        let stream = self.stream.lock();
        let replicas = stream
            .replicas
            .iter()
            .filter(|r| r.online.load(Ordering::Acquire))
            .map(|r| (r.client.addr.ip().to_string(), r.port, r.acked.load(Ordering::Acquire).max(0)))
            .collect();
        (stream.end(), replicas)
    }

    /// INFO replication as a master.
    pub fn info(&self) -> String {
        use std::fmt::Write;
        let stream = self.stream.lock();
        let mut text = format!("role:master\r\nconnected_slaves:{}\r\n", stream.replicas.len());
        for (i, replica) in stream.replicas.iter().enumerate() {
            let state = if replica.online.load(Ordering::Acquire) { "online" } else { "wait_bgsave" };
            let _ = write!(
                text,
                "slave{i}:ip={},port={},state={state},offset={},lag={}\r\n",
                replica.client.addr.ip(),
                replica.port,
                replica.acked.load(Ordering::Acquire).max(0),
                replica.acked_at.lock().elapsed().as_secs(),
            );
        }
        let active = self.streaming();
        let _ = write!(
            text,
            "master_failover_state:no-failover\r\nmaster_replid:{}\r\n\
             master_replid2:0000000000000000000000000000000000000000\r\nmaster_repl_offset:{}\r\n\
             second_repl_offset:-1\r\nrepl_backlog_active:{}\r\nrepl_backlog_size:{}\r\n\
             repl_backlog_first_byte_offset:{}\r\nrepl_backlog_histlen:{}\r\n",
            stream.replid,
            stream.end(),
            u8::from(active),
            self.backlog_bytes.load(Ordering::Relaxed),
            if active { stream.start + 1 } else { 0 },
            stream.backlog.len(),
        );
        text
    }

    /// Stops the drainer (shutdown).
    pub fn shut_down(&self) {
        self.stop.store(true, Ordering::Relaxed);
        self.changed.notify_one();
        if let Some(thread) = self.drainer.lock().take() {
            let _ = thread.join();
        }
    }
}

/// Appends to `command` the command that makes a replica's `key` what it
/// is now (in the current view): DEL, SET ... PXAT, or RESTORE ... REPLACE
/// ABSTTL.
fn command_of(
    ctx: &mut crate::commands::Ctx<'_>,
    key: &[u8],
    command: &mut Vec<u8>,
) -> Result<(), crate::commands::CmdError> {
    let Some(value) = ctx.writes.get_untouched(&ctx.shared.db, key)? else {
        put_command(command, &[b"DEL", key]);
        return Ok(());
    };
    let at = value.expiry_ms();
    match value.tag() {
        TYPE_STRING | TYPE_ITEM => {
            let data = value.string()?;
            match at {
                Some(at) => put_command(command, &[b"SET", key, data, b"PXAT", at.to_string().as_bytes()]),
                None => put_command(command, &[b"SET", key, data]),
            }
        }
        _ => {
            let payload = crate::commands::dump::serialize(ctx, key, &value)?;
            let ttl = at.unwrap_or(0).to_string();
            put_command(command, &[b"RESTORE", key, ttl.as_bytes(), &payload, b"REPLACE", b"ABSTTL"]);
        }
    }
    Ok(())
}

/// A drain's commands as transactions (MULTI ... EXEC) of up to
/// `TRANSACTION_BYTES` each, written in place; a drain of one command
/// goes as itself. A ScaledKV replica commits a transaction as one engine
/// batch, which has a limit (and a big one would hold its other clients
/// up meanwhile).
struct Transactions {
    out: Vec<u8>,
    /// Whether the commands go in transactions (more than one).
    wrapped: bool,
    /// Where the open transaction's commands start (None: none is open).
    opened: Option<usize>,
}

/// The most commands of a drain go in one transaction.
const TRANSACTION_BYTES: usize = 1 << 20;

impl Transactions {
    fn new(commands: usize) -> Transactions {
        Transactions { out: Vec::new(), wrapped: commands > 1, opened: None }
    }

    /// Called before each command: opens a transaction, or closes a full
    /// one and opens the next.
    fn open(&mut self) {
        if !self.wrapped {
            return;
        }
        if self.opened.is_some_and(|at| self.out.len() - at >= TRANSACTION_BYTES) {
            put_command(&mut self.out, &[b"EXEC"]);
            self.opened = None;
        }
        if self.opened.is_none() {
            put_command(&mut self.out, &[b"MULTI"]);
            self.opened = Some(self.out.len());
        }
    }

    fn finish(mut self) -> Vec<u8> {
        if self.opened.is_some() {
            put_command(&mut self.out, &[b"EXEC"]);
        }
        self.out
    }
}

fn put_command(buf: &mut Vec<u8>, args: &[&[u8]]) {
    buf.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        buf.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        buf.extend_from_slice(arg);
        buf.extend_from_slice(b"\r\n");
    }
}

fn local() -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], 0))
}

fn random_hex() -> String {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..40).map(|_| char::from_digit(rng.gen_range(0..16), 16).expect("a hex digit")).collect()
}

/// What PSYNC (or SYNC) from a replica asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct Psync {
    /// The replication ID and the offset it wants next; None for SYNC.
    pub from: Option<(String, i64)>,
    pub port: u16,
}

/// Serves a replica on its connection until it ends: the file (or the
/// backlog from where it stopped), then the stream, reading its
/// acknowledgements meanwhile.
pub async fn serve(
    shared: Arc<Shared>,
    client: &Arc<ClientInfo>,
    stream: &mut TcpStream,
    psync: Psync,
) -> std::io::Result<()> {
    let master = shared.master.clone();
    if let Err(error) = master.start(&shared).await {
        let line = format!("-ERR streaming to replicas failed: {error}\r\n");
        return stream.write_all(line.as_bytes()).await;
    }
    let replica = Arc::new(Replica {
        client: client.clone(),
        port: psync.port,
        online: AtomicBool::new(false),
        sent: Mutex::new(None),
        acked: AtomicI64::new(-1),
        acked_at: Mutex::new(Instant::now()),
    });
    client.replica.store(true, Ordering::Relaxed);
    master.register(replica.clone());
    let served = serve_registered(&shared, &replica, stream, psync).await;
    master.unregister(client.id);
    tracing::info!(client = client.id, addr = %client.addr, "replica disconnected");
    served
}

async fn serve_registered(
    shared: &Arc<Shared>,
    replica: &Arc<Replica>,
    stream: &mut TcpStream,
    psync: Psync,
) -> std::io::Result<()> {
    let master = &shared.master;
    let resumed = psync.from.as_ref().and_then(|(replid, next)| {
        let kept = master.stream.lock();
        let from = u64::try_from(*next).ok()?.checked_sub(1)?;
        (*replid == kept.replid && from >= kept.start && from <= kept.end()).then_some(from)
    });
    let counted = match (resumed, &psync.from) {
        (Some(_), _) => 1,
        // Redis counts a PSYNC it could not serve from the backlog twice.
        (None, Some((replid, _))) if replid != "?" => 2,
        _ => 0,
    };
    master.syncs[counted].fetch_add(1, Ordering::Relaxed);
    if counted == 2 {
        master.syncs[0].fetch_add(1, Ordering::Relaxed);
    }
    let full = resumed.is_none();
    let from = match resumed {
        Some(from) => {
            *replica.sent.lock() = Some(from);
            let line = format!("+CONTINUE {}\r\n", master.replid());
            stream.write_all(line.as_bytes()).await?;
            tracing::info!(client = replica.client.id, from, "replica resumed (partial resync)");
            from
        }
        None => match full_sync(shared, replica, stream, psync.from.is_some()).await? {
            Some(from) => from,
            None => return Ok(()),
        },
    };
    follow(shared, replica, stream, from, full).await
}

/// Sends the file of one moment and returns where the replica's stream
/// starts (None if the transfer was cut short).
async fn full_sync(
    shared: &Arc<Shared>,
    replica: &Arc<Replica>,
    stream: &mut TcpStream,
    psync: bool,
) -> std::io::Result<Option<u64>> {
    let (pieces, mut arriving) = tokio::sync::mpsc::channel::<Vec<u8>>(2);
    let (start, started) = tokio::sync::oneshot::channel::<u64>();
    let exporting = shared.clone();
    let registered = replica.clone();
    let job = tokio::task::spawn_blocking(move || {
        let master = &exporting.master;
        let draining = master.draining.lock();
        let snapshot = exporting.db.snapshot();
        let from = master.drain(&exporting, &snapshot);
        *registered.sent.lock() = Some(from);
        drop(draining);
        let _ = start.send(from);
        crate::commands::dump::export::export(&exporting, &snapshot, 1 << 20, true, |piece| {
            pieces.blocking_send(piece).is_ok()
        })
    });
    let Ok(from) = started.await else {
        return Err(std::io::Error::other("the full sync's drain failed"));
    };
    let mark = random_hex();
    let mut head = String::new();
    if psync {
        head.push_str(&format!("+FULLRESYNC {} {from}\r\n", shared.master.replid()));
    }
    head.push_str(&format!("$EOF:{mark}\r\n"));
    stream.write_all(head.as_bytes()).await?;
    let client = &replica.client;
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        let piece = tokio::select! {
            piece = arriving.recv() => piece,
            _ = shutdown.changed() => return Ok(None),
            _ = until_killed(client) => return Ok(None),
        };
        let Some(piece) = piece else { break };
        tokio::select! {
            written = stream.write_all(&piece) => written?,
            _ = shutdown.changed() => return Ok(None),
            _ = until_killed(client) => return Ok(None),
        }
        shared.stats.net_output_bytes.fetch_add(piece.len() as u64, Ordering::Relaxed);
    }
    match job.await {
        Ok(Ok(Some(exported))) => {
            stream.write_all(mark.as_bytes()).await?;
            tracing::info!(
                client = client.id,
                keys = exported.keys,
                bytes = exported.bytes,
                from,
                "sent a replica the data set (full sync)"
            );
            Ok(Some(from))
        }
        Ok(Ok(None)) => Ok(None),
        Ok(Err(error)) => {
            tracing::error!(error = %error.text(), "full sync failed; the file was cut short");
            Ok(None)
        }
        Err(error) => {
            tracing::error!(%error, "full sync failed; the file was cut short");
            Ok(None)
        }
    }
}

/// Streams from `from` and reads the replica's acknowledgements. After
/// a full sync, only once the replica acknowledged (it has loaded the
/// file), as Redis does: a diskless file ends at its mark, which a
/// replica finds at the end of what it read, so nothing may follow the
/// mark before the replica has read it.
async fn follow(
    shared: &Shared,
    replica: &Replica,
    stream: &mut TcpStream,
    mut from: u64,
    after_file: bool,
) -> std::io::Result<()> {
    let master = &shared.master;
    let mut ends = master.end.subscribe();
    let mut shutdown = shared.shutdown.subscribe();
    let (mut reader, mut writer) = stream.split();
    let mut input = BytesMut::with_capacity(4096);
    let client = &replica.client;
    while after_file && replica.acked.load(Ordering::Acquire) < 0 {
        tokio::select! {
            read = reader.read_buf(&mut input) => {
                if read? == 0 {
                    return Ok(());
                }
                acknowledgements(master, replica, &mut input);
            }
            _ = shutdown.changed() => return Ok(()),
            _ = until_killed(client) => return Ok(()),
        }
    }
    replica.online.store(true, Ordering::Release);
    loop {
        let Some(bytes) = master.read(from) else {
            tracing::warn!(client = client.id, "a replica's place in the stream is no longer kept; disconnected");
            return Ok(());
        };
        if !bytes.is_empty() {
            tokio::select! {
                written = writer.write_all(&bytes) => written?,
                _ = shutdown.changed() => return Ok(()),
                _ = until_killed(client) => return Ok(()),
            }
            from += bytes.len() as u64;
            *replica.sent.lock() = Some(from);
            shared.stats.net_output_bytes.fetch_add(bytes.len() as u64, Ordering::Relaxed);
            continue;
        }
        ends.borrow_and_update();
        if master.read(from).is_some_and(|more| !more.is_empty()) {
            continue;
        }
        tokio::select! {
            _ = ends.changed() => {}
            read = reader.read_buf(&mut input) => {
                if read? == 0 {
                    return Ok(());
                }
                acknowledgements(master, replica, &mut input);
            }
            _ = shutdown.changed() => return Ok(()),
            _ = until_killed(client) => return Ok(()),
        }
    }
}

/// Takes the replica's REPLCONF ACKs out of `input`.
fn acknowledgements(master: &Master, replica: &Replica, input: &mut BytesMut) {
    let limits =
        crate::resp::Limits { max_bulk_bytes: 1 << 10, max_args: 16, max_request_bytes: 1 << 12, authenticated: true };
    let mut acked = false;
    loop {
        let args = match crate::resp::parse(input, &limits) {
            Ok(Some(args)) => args,
            Ok(None) => break,
            // Nothing a replica sends: dropped, as the rest of this read.
            Err(_) => {
                input.clear();
                break;
            }
        };
        let ack = args.len() >= 3 && args[0].eq_ignore_ascii_case(b"replconf") && args[1].eq_ignore_ascii_case(b"ack");
        if let Some(offset) = ack.then(|| std::str::from_utf8(&args[2]).ok()?.parse::<i64>().ok()).flatten() {
            replica.acked.fetch_max(offset, Ordering::AcqRel);
            *replica.acked_at.lock() = Instant::now();
            acked = true;
        }
    }
    if acked {
        for client in master.waiting.lock().iter() {
            client.wake.notify_one();
        }
    }
}

/// Returns once CLIENT KILL (or the replica's lag) ends `client`.
async fn until_killed(client: &ClientInfo) {
    while !client.killed.load(Ordering::Acquire) {
        client.wake.notified().await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_carry_each_changed_key_and_flushes() {
        let event = |class, key: &[u8]| Event { class, name: "x", key: key.to_vec(), writer: 1 };
        let events = [
            event(crate::notify::STRING, b"a"),
            event(crate::notify::MISS, b"read only"),
            event(crate::notify::FLUSHED, b""),
            event(crate::notify::HASH, b""),
            event(crate::notify::GENERIC, b"b\r\n"),
        ];
        let note = note_of(&events).unwrap();
        let mut keys = BTreeSet::new();
        assert!(read_note(&note, &mut keys));
        assert_eq!(keys.into_iter().collect::<Vec<_>>(), [b"".to_vec(), b"a".to_vec(), b"b\r\n".to_vec()]);
        assert_eq!(note_of(&[event(crate::notify::MISS, b"k")]), None);
        let mut keys = BTreeSet::new();
        assert!(read_note(&note[..note.len() - 2], &mut keys));
        assert_eq!(keys.len(), 2, "a cut note reads what is whole");
    }

    #[test]
    fn a_drain_goes_in_transactions_of_bounded_size() {
        let add = |commands: &mut Transactions, n: usize| {
            commands.open();
            put_command(&mut commands.out, &[b"SET", b"k", &vec![b'v'; n]]);
        };
        let mut one = Transactions::new(1);
        add(&mut one, 10);
        let alone = one.finish();
        assert!(alone.starts_with(b"*3\r\n$3\r\nSET"), "a command alone needs no MULTI");
        let mut many = Transactions::new(6);
        for _ in 0..5 {
            add(&mut many, TRANSACTION_BYTES / 3);
        }
        add(&mut many, 2 * TRANSACTION_BYTES);
        let text = many.finish();
        let count = |word: &[u8]| text.windows(word.len()).filter(|w| w == &word).count();
        // Three commands fill the first (it closes once past the size),
        // then two and the big one.
        assert_eq!((count(b"MULTI"), count(b"EXEC")), (2, 2));
        assert!(text.ends_with(b"\r\n*1\r\n$4\r\nEXEC\r\n"));
    }
}
