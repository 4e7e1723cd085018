//! One client connection: read what the client sent, run every complete
//! command in it (a pipeline), send the replies in one write.

use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use parking_lot::Mutex;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::commands::{self, Command};
use crate::keyspace::Stripe;
use crate::pubsub::{Class, Mailbox, Subscriptions};
use crate::resp::{self, Out, Protocol};
use crate::server::Shared;
use crate::socket::{Peer, Stream};

/// Flush replies early when this much is pending, so a long pipeline of
/// large GETs does not hold everything in memory.
const OUT_FLUSH_BYTES: usize = 256 * 1024;
/// Reads start at this size and double, up to `READ_MAX`, while a read
/// fills all the space it was given: a pipeline of sixteen 1 KiB SETs is
/// 17 KB, and taking it in two reads also meant two group commits and two
/// reply writes (twice Redis's syscalls, which reads what is there).
/// They halve again while reads bring less than an eighth, and an empty
/// buffer over twice the read size is let go, so a client that sent one
/// large pipeline does not keep 256 KiB (as Redis shrinks query buffers).
const READ_CHUNK: usize = 16 * 1024;
const READ_MAX: usize = 256 * 1024;

/// Most GETs parsed ahead and prefetched together (`Db::prefetch_all`): each
/// GET's entry in the log is a cache miss, and asking for a pipeline's
/// entries first overlaps them.
const PREFETCH_RUN: usize = 32;

fn is_get(args: &[Bytes]) -> bool {
    args.len() == 2 && args[0].eq_ignore_ascii_case(b"get")
}

/// What CLIENT LIST and INFO show about a connection.
pub struct ClientInfo {
    pub id: u64,
    pub addr: Peer,
    pub local: Peer,
    pub name: Mutex<Option<String>>,
    pub created: Instant,
    last_active_ms: AtomicU64,
    /// `commands::TABLE` index of the last command (`usize::MAX`: none).
    last_command: AtomicUsize,
    pub resp: AtomicU8,
    /// Waiting in a blocking command (CLIENT LIST's flag `b`).
    pub blocked: AtomicBool,
    /// CLIENT UNBLOCK asked the blocked command to end: `UNBLOCK_TIMEOUT`
    /// or `UNBLOCK_ERROR` (0: not asked).
    pub unblock: AtomicU8,
    /// CLIENT KILL closed this connection.
    pub killed: AtomicBool,
    /// Wakes the connection's task for a kill, an unblock or mail.
    pub wake: tokio::sync::Notify,
    /// Published messages waiting to be sent (`crate::pubsub`).
    pub mail: Mailbox,
    /// In MONITOR (`crate::monitor`; CLIENT LIST's flag `O`): the one
    /// record of it, `ConnState::monitors` reads it.
    pub monitor: AtomicBool,
    /// Commands queued in MULTI, -1 outside one (CLIENT LIST's `multi=`
    /// and flag `x`).
    pub queued: AtomicI64,
    /// Channels, patterns and shard channels subscribed to, for CLIENT
    /// LIST, INFO and CLIENT KILL TYPE pubsub (the connection keeps the
    /// names, `ConnState::subscriptions`).
    subscriptions: [AtomicUsize; 3],
    /// CLIENT TRACKING's settings (None: off), read by other clients'
    /// writes (`crate::tracking`).
    pub tracking: Mutex<Option<crate::tracking::Settings>>,
    /// Invalidations may come for it (it tracks keys, or another client
    /// redirects them to it): its connection delivers mail.
    pub gets_pushes: AtomicBool,
    /// The user it authenticated as, if not `default` (CLIENT LIST,
    /// ACL DELUSER).
    pub user: Mutex<Option<Vec<u8>>>,
    /// The link to the master this server follows (CLIENT LIST's flag
    /// `M`, CLIENT KILL TYPE master).
    pub master: AtomicBool,
    /// A replica's link to this server (`crate::master`; CLIENT LIST's
    /// flag `S`, CLIENT KILL TYPE replica).
    pub replica: AtomicBool,
}

pub const UNBLOCK_TIMEOUT: u8 = 1;
pub const UNBLOCK_ERROR: u8 = 2;

impl ClientInfo {
    /// `ip:port` and the name CLIENT SETNAME gave (SLOWLOG's entries).
    pub fn peer_and_name(&self) -> (String, String) {
        (self.addr.to_string(), self.name.lock().clone().unwrap_or_default())
    }

    pub fn new(id: u64, addr: Peer, local: Peer) -> ClientInfo {
        ClientInfo {
            id,
            addr,
            local,
            name: Mutex::new(None),
            created: Instant::now(),
            last_active_ms: AtomicU64::new(0),
            last_command: AtomicUsize::new(usize::MAX),
            resp: AtomicU8::new(2),
            blocked: AtomicBool::new(false),
            unblock: AtomicU8::new(0),
            killed: AtomicBool::new(false),
            wake: tokio::sync::Notify::new(),
            mail: Mailbox::default(),
            monitor: AtomicBool::new(false),
            queued: AtomicI64::new(-1),
            subscriptions: Default::default(),
            tracking: Mutex::new(None),
            gets_pushes: AtomicBool::new(false),
            user: Mutex::new(None),
            master: AtomicBool::new(false),
            replica: AtomicBool::new(false),
        }
    }

    pub fn count_subscriptions(&self, class: Class, count: usize) {
        self.subscriptions[class as usize].store(count, Ordering::Relaxed);
    }

    /// Subscribed to anything: Redis's pub/sub client type (flag `P`).
    pub fn is_subscriber(&self) -> bool {
        self.subscriptions.iter().any(|count| count.load(Ordering::Relaxed) > 0)
    }

    /// Closes the connection (CLIENT KILL): at once if it waits, else once
    /// its current command is done.
    pub fn kill(&self) {
        self.killed.store(true, Ordering::Release);
        self.wake.notify_one();
    }

    /// Ends the blocking command the client waits in with `how`
    /// (CLIENT UNBLOCK); false if it waits in none.
    pub fn unblock(&self, how: u8) -> bool {
        if !self.blocked.load(Ordering::Acquire) {
            return false;
        }
        self.unblock.store(how, Ordering::Release);
        self.wake.notify_one();
        true
    }

    pub fn last_command(&self, command: &'static Command) {
        self.last_command.store(commands::index_of(command), Ordering::Relaxed);
    }

    pub fn touch(&self) {
        self.last_active_ms.store(self.created.elapsed().as_millis() as u64, Ordering::Relaxed);
    }

    /// One line of CLIENT LIST, with Redis's field names.
    pub fn describe(&self) -> String {
        let age = self.created.elapsed();
        let idle = age.as_millis() as u64 - self.last_active_ms.load(Ordering::Relaxed).min(age.as_millis() as u64);
        // In Redis's order: S (replica), O (monitor), M (master), P
        // (pub/sub), x (in MULTI), b (blocked); N for none.
        let mut flags = String::new();
        if self.replica.load(Ordering::Relaxed) {
            flags.push('S');
        }
        if self.monitor.load(Ordering::Relaxed) {
            flags.push('O');
        }
        if self.master.load(Ordering::Relaxed) {
            flags.push('M');
        }
        if self.is_subscriber() {
            flags.push('P');
        }
        let queued = self.queued.load(Ordering::Relaxed);
        if queued >= 0 {
            flags.push('x');
        }
        if self.blocked.load(Ordering::Relaxed) {
            flags.push('b');
        }
        let redirect = match &*self.tracking.lock() {
            Some(tracking) => {
                flags.push('t');
                if tracking.broken_redirect {
                    flags.push('R');
                }
                if tracking.bcast {
                    flags.push('B');
                }
                tracking.redirect as i64
            }
            None => -1,
        };
        if self.addr.is_unix() {
            flags.push('U');
        }
        if flags.is_empty() {
            flags.push('N');
        }
        let [sub, psub, ssub] = [Class::Channel, Class::Pattern, Class::Shard]
            .map(|class| self.subscriptions[class as usize].load(Ordering::Relaxed));
        format!(
            "id={} addr={} laddr={} fd=-1 name={} age={} idle={} flags={flags} db=0 sub={sub} psub={psub} ssub={ssub} multi={queued} qbuf=0 \
             qbuf-free=0 argv-mem=0 multi-mem=0 rbs=0 rbp=0 obl=0 oll=0 omem=0 tot-mem=0 events=r cmd={} \
             user={} redir={redirect} resp={}",
            self.id,
            self.addr,
            self.local,
            self.name.lock().as_deref().unwrap_or(""),
            age.as_secs(),
            idle / 1000,
            commands::by_index(self.last_command.load(Ordering::Relaxed)).map_or("NULL", |c| c.name),
            self.user.lock().as_deref().map_or("default".into(), String::from_utf8_lossy),
            self.resp.load(Ordering::Relaxed),
        )
    }
}

/// Per-connection protocol state.
pub struct ConnState {
    pub info: Arc<ClientInfo>,
    pub authenticated: bool,
    pub protocol: Protocol,
    /// Queued commands while in MULTI.
    pub multi: Option<Vec<(&'static Command, Vec<bytes::Bytes>)>>,
    /// A command failed to queue: EXEC must abort.
    pub multi_failed: bool,
    /// WATCHed key stripes and their versions when watched.
    pub watched: Vec<(Stripe, u64)>,
    /// Close after sending the pending replies (QUIT).
    pub close: bool,
    /// A blocking command (BLPOP ...) that found nothing, and how long it
    /// may wait (None: for ever): `wait_blocked` runs it again.
    pub blocked: Option<(Vec<bytes::Bytes>, Option<std::time::Duration>)>,
    /// What a blocking command asks to be run again as, when not as it
    /// was sent (XREAD's `$` replaced by the IDs it stood for).
    pub block_args: Option<Vec<bytes::Bytes>>,
    /// Set while a script's command runs (SORT of a set by nothing sorts
    /// it there, as in Redis).
    pub in_script: bool,
    /// The command just run was refused before it ran (INFO
    /// commandstats' `rejected_calls`; SLOWLOG leaves it out).
    pub refused: bool,
    /// This client's place in the lines of the keys it is blocked on
    /// (`crate::waiters`), while it waits.
    pub ticket: Option<u64>,
    /// The channels, patterns and shard channels it listens to.
    pub subscriptions: Subscriptions,
    /// Subscribers this client published to, woken once its pipeline is
    /// done or before it waits (`pubsub::wake`).
    pub woken: Vec<Arc<ClientInfo>>,
    /// Counted here and added to the shared statistics once per reply
    /// flush: shared counters bumped per command by every worker would
    /// bounce their cache line between cores.
    pub counts: LocalCounts,
    /// CLIENT TRACKING's settings (a copy of `ClientInfo::tracking`'s,
    /// read without its lock by every command).
    pub tracking: Option<crate::tracking::Settings>,
    /// CLIENT CACHING YES|NO was given for the next command.
    pub caching: bool,
    /// The user authenticated as, if not `default` (whose permissions are
    /// checked before each command).
    pub user: Option<Vec<u8>>,
    /// CLIENT REPLY OFF: no replies until CLIENT REPLY ON.
    pub reply_off: bool,
    /// CLIENT REPLY SKIP: the command running gets no reply ...
    pub reply_skip: bool,
    /// ... set from this before each command read.
    pub reply_skip_next: bool,
    /// The link to the master this server replicates (`crate::replica`):
    /// its writes pass where other clients' get READONLY or LOADING.
    pub master_link: bool,
    /// What REPLCONF set (`crate::rdb_sync`).
    pub replconf: crate::rdb_sync::Replconf,
    /// SYNC asked for an RDB file: sent once the replies before it are
    /// out, then the connection closes.
    pub transfer: Option<crate::rdb_sync::Transfer>,
    /// PSYNC from a replica: once the replies before it are out, the
    /// connection is its link (`crate::master::serve`).
    pub replica_link: Option<crate::master::Psync>,
    /// WAIT in progress: the engine's sequence number its writes reach,
    /// the replicas it waits for, and until when.
    pub wait_for: Option<(u64, usize, Option<std::time::Instant>)>,
    /// SHUTDOWN waiting for the replicas: how many waits had been aborted
    /// when it began (`crate::shutdown::Graceful::aborts`).
    pub shutdown_wait: Option<u64>,
}

#[derive(Default)]
pub struct LocalCounts {
    pub commands: u64,
    pub hits: u64,
    pub misses: u64,
}

impl LocalCounts {
    pub fn flush_into(&mut self, stats: &crate::server::ServerStats) {
        for (local, shared) in [
            (&mut self.commands, &stats.commands),
            (&mut self.hits, &stats.keyspace_hits),
            (&mut self.misses, &stats.keyspace_misses),
        ] {
            if *local > 0 {
                shared.fetch_add(std::mem::take(local), Ordering::Relaxed);
            }
        }
    }
}

impl ConnState {
    pub fn flag_transaction_error(&mut self) {
        if self.multi.is_some() {
            self.multi_failed = true;
        }
    }

    /// In MONITOR: every command run is sent to it (`crate::monitor`).
    pub fn monitors(&self) -> bool {
        self.info.monitor.load(Ordering::Relaxed)
    }

    /// Whether messages may come for this client: it subscribed to
    /// something, is in MONITOR, or gets client-side caching's
    /// invalidations.
    pub fn listens(&self) -> bool {
        !self.subscriptions.is_empty() || self.monitors() || self.info.gets_pushes.load(Ordering::Relaxed)
    }

    /// Appends the messages published to this client since its last
    /// reply (a subscriber's or a monitor's); whether there were any.
    pub fn deliver(&self, out: &mut Out) -> bool {
        self.listens() && self.info.mail.deliver(out)
    }

    /// Leaves MONITOR (RESET, or the connection closed).
    pub fn stop_monitoring(&self, shared: &Shared) {
        if self.info.monitor.swap(false, Ordering::Relaxed) {
            shared.monitors.remove(self.info.id);
        }
    }

    pub fn reset_transaction(&mut self) {
        self.multi = None;
        self.info.queued.store(-1, Ordering::Relaxed);
        self.multi_failed = false;
        self.watched.clear();
    }
}

pub async fn serve(shared: Arc<Shared>, mut stream: Stream, addr: Peer, local: Peer) {
    if let Some(tcp) = stream.tcp() {
        let _ = tcp.set_nodelay(true);
        if let Ok(secs) = shared.redis_params.value("tcp-keepalive").parse() {
            keep_alive(tcp, secs);
        }
    }
    let id = shared.next_client_id.fetch_add(1, Ordering::Relaxed);
    let mut conn = ConnState::register(&shared, id, addr, local);
    let mut ended = run(&shared, &mut stream, &mut conn).await;
    if let (Ok(()), Some(transfer)) = (&ended, conn.transfer.take()) {
        ended = crate::rdb_sync::send(shared.clone(), &conn.info, &mut stream, transfer).await;
    }
    if let (Ok(()), Some(psync)) = (&ended, conn.replica_link.take()) {
        ended = crate::master::serve(shared.clone(), &conn.info, &mut stream, psync).await;
    }
    if let Err(error) = ended {
        tracing::debug!(client = id, %addr, %error, "connection ended");
    }
    conn.unregister(&shared);
}

impl ConnState {
    /// A new connection's state, listed in CLIENT LIST.
    pub fn register(shared: &Shared, id: u64, addr: Peer, local: Peer) -> ConnState {
        let state = ConnState::detached(id, addr, local);
        shared.clients.lock().insert(id, state.info.clone());
        ConnState { authenticated: shared.users.default_open(), ..state }
    }

    /// A state no connection has and CLIENT LIST does not show (the one
    /// an RDB export reads through); not authenticated.
    pub fn detached(id: u64, addr: Peer, local: Peer) -> ConnState {
        ConnState {
            info: Arc::new(ClientInfo::new(id, addr, local)),
            authenticated: false,
            protocol: Protocol::Resp2,
            multi: None,
            multi_failed: false,
            watched: Vec::new(),
            close: false,
            blocked: None,
            block_args: None,
            in_script: false,
            refused: false,
            ticket: None,
            subscriptions: Subscriptions::default(),
            woken: Vec::new(),
            counts: LocalCounts::default(),
            tracking: None,
            caching: false,
            user: None,
            reply_off: false,
            reply_skip: false,
            reply_skip_next: false,
            master_link: false,
            replconf: Default::default(),
            transfer: None,
            replica_link: None,
            wait_for: None,
            shutdown_wait: None,
        }
    }

    /// The connection ended: what it counted, subscribed to and was
    /// listed as goes.
    pub fn unregister(mut self, shared: &Shared) {
        self.counts.flush_into(&shared.stats);
        crate::pubsub::wake(&mut self.woken);
        self.subscriptions.clear(&shared.pubsub, &self.info);
        self.stop_monitoring(shared);
        shared.tracking.disable(&self.info);
        shared.master.stop_waking(self.info.id);
        shared.clients.lock().remove(&self.info.id);
        shared.connected.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A blocking command found nothing: sends the replies before it, joins
/// the lines of its keys (`crate::waiters`), then runs it again whenever
/// it is woken (a push to a key whose line it leads, the client before it
/// leaving, CLIENT UNBLOCK or KILL) and at least every 100 ms, until it
/// takes an element or its timeout passes (a null array). A client that
/// hangs up while it waits takes nothing: false, and the connection ends.
async fn wait_blocked<'s>(
    shared: &'s Shared,
    stream: &mut Stream,
    input: &mut BytesMut,
    conn: &mut ConnState,
    out: &mut Out,
    run: &mut commands::Run<'s>,
) -> std::io::Result<bool> {
    let Some((args, timeout)) = conn.blocked.take() else { return Ok(true) };
    let deadline = timeout.map(|t| tokio::time::Instant::now() + t);
    crate::pubsub::wake(&mut conn.woken);
    run.commit(shared, out).await;
    write_out(shared, stream, out).await?;
    let line = InLine::join(shared, &args);
    conn.ticket = Some(line.ticket);
    // Cleared before the flag goes up, not after it comes down: an
    // UNBLOCK that saw the flag just before would otherwise leave its
    // request for the next blocking command.
    conn.info.unblock.store(0, Ordering::Release);
    conn.info.blocked.store(true, Ordering::Release);
    let waited = wait_in_line(shared, stream, input, conn, out, run, &line, deadline).await;
    conn.info.blocked.store(false, Ordering::Release);
    // A WAIT ended otherwise than by its own answer (CLIENT UNBLOCK, a
    // kill) leaves its target behind: the next WAIT takes its own.
    conn.wait_for = None;
    conn.shutdown_wait = None;
    shared.master.stop_waking(conn.info.id);
    // Shown to monitors once it ends, as Redis shows a blocking command.
    if let (Ok(true), Some(command)) = (&waited, commands::lookup(&args[0])) {
        crate::monitor::feed(shared, conn, command, &args);
    }
    conn.ticket = None;
    drop(line);
    waited
}

/// A blocked client's place in the lines of its keys: leaving them, it
/// wakes the next in each line it led.
struct InLine<'s, 'a> {
    shared: &'s Shared,
    /// The blocking command, run again on each wake-up.
    args: &'a [Bytes],
    keys: Vec<&'a [u8]>,
    ticket: u64,
    /// Woken by a push to one of the keys while first in its line.
    waker: Arc<tokio::sync::Notify>,
}

impl<'s, 'a> InLine<'s, 'a> {
    fn join(shared: &'s Shared, args: &'a [Bytes]) -> InLine<'s, 'a> {
        let keys = crate::waiters::source_keys(args);
        let (ticket, waker) = shared.waiters.join(&keys);
        InLine { shared, args, keys, ticket, waker }
    }
}

impl Drop for InLine<'_, '_> {
    fn drop(&mut self) {
        self.shared.waiters.leave(self.ticket, &self.keys);
    }
}

#[allow(clippy::too_many_arguments)]
async fn wait_in_line<'s>(
    shared: &'s Shared,
    stream: &mut Stream,
    input: &mut BytesMut,
    conn: &mut ConnState,
    out: &mut Out,
    run: &mut commands::Run<'s>,
    line: &InLine<'_, '_>,
    deadline: Option<tokio::time::Instant>,
) -> std::io::Result<bool> {
    let mut shutdown = shared.shutdown.subscribe();
    // What the client sends while it waits is read into `input`, to run
    // once it stops waiting, as Redis queues it: a read of nothing is its
    // hanging up, seen even after more commands (a TLS client's
    // close_notify comes before the end of its stream). Past a full read
    // buffer's worth, reading stops until the wait ends.
    let mut reading = true;
    loop {
        // Listening before looking again: a push that commits after the
        // look wakes this wait.
        let pushed = line.waker.notified();
        tokio::pin!(pushed);
        pushed.as_mut().enable();
        // Looking again is not another command.
        conn.counts.commands -= 1;
        commands::execute(shared, conn, out, line.args.to_vec(), run).await;
        if conn.blocked.take().is_none() {
            return Ok(true);
        }
        let now = tokio::time::Instant::now();
        match conn.info.unblock.load(Ordering::Acquire) {
            _ if conn.info.killed.load(Ordering::Acquire) => return Ok(false),
            UNBLOCK_ERROR => {
                out.error("UNBLOCKED client unblocked via CLIENT UNBLOCK");
                return Ok(true);
            }
            UNBLOCK_TIMEOUT => {
                out.null_array();
                return Ok(true);
            }
            _ => {}
        }
        if deadline.is_some_and(|d| now >= d) {
            out.null_array();
            return Ok(true);
        }
        let wake = deadline.map_or(now + POLL_BLOCKED, |d| d.min(now + POLL_BLOCKED));
        tokio::select! {
            _ = &mut pushed => {}
            _ = conn.info.wake.notified() => {}
            _ = tokio::time::sleep_until(wake) => {}
            _ = shutdown.changed() => return Ok(false),
            // Cancel-safe: a read that did not complete took nothing.
            read = stream.read_buf(input), if reading => match read {
                Ok(0) | Err(_) => return Ok(false),
                Ok(n) => {
                    shared.stats.net_input_bytes.fetch_add(n as u64, Ordering::Relaxed);
                    reading = input.len() < READ_MAX;
                }
            },
        }
        // A RESP3 subscriber gets its messages while it waits, as in Redis.
        if conn.deliver(out) && !write_to_subscriber(shared, stream, conn, out).await? {
            return Ok(false);
        }
    }
}

/// How often a blocked client looks again without a push (a safety net:
/// pushes wake it).
const POLL_BLOCKED: std::time::Duration = std::time::Duration::from_millis(100);

async fn run(shared: &Shared, stream: &mut Stream, conn: &mut ConnState) -> std::io::Result<()> {
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut out = Out::new(Protocol::Resp2);
    let mut shutdown = shared.shutdown.subscribe();
    let mut run = commands::Run::default();
    let mut read_size = READ_CHUNK;
    let mut requests: Vec<Vec<Bytes>> = Vec::new();
    loop {
        loop {
            let limits = resp::Limits {
                max_bulk_bytes: shared.max_bulk_bytes(),
                max_args: shared.config.max_args,
                max_request_bytes: shared.config.max_request_bytes,
                authenticated: conn.authenticated,
            };
            // A run of GETs is parsed ahead and prefetched; any other
            // command ends the run, so that what it changes (AUTH, the
            // limits CONFIG SET sets) applies to the requests after it.
            let mut parsed = Ok(());
            while requests.len() < PREFETCH_RUN {
                match resp::parse(&mut input, &limits) {
                    Ok(Some(args)) => {
                        let get = is_get(&args);
                        requests.push(args);
                        if !get {
                            break;
                        }
                    }
                    Ok(None) => break,
                    Err(error) => {
                        parsed = Err(error);
                        break;
                    }
                }
            }
            if requests.len() > 1 && conn.authenticated && conn.multi.is_none() {
                shared.db.prefetch_all(requests.iter().filter(|args| is_get(args)).map(|args| &args[1][..]));
            }
            let done = requests.is_empty();
            for args in requests.drain(..) {
                // Killed (CLIENT KILL, a mailbox past its limit): nothing
                // more runs or is sent, as Redis closes the client at once;
                // what ran is applied, as it would be there.
                if conn.info.killed.load(Ordering::Acquire) {
                    run.commit(shared, &mut out).await;
                    return Ok(());
                }
                out.protocol = conn.protocol;
                // CLIENT REPLY SKIP silences the command after it.
                conn.reply_skip = std::mem::take(&mut conn.reply_skip_next);
                commands::execute(shared, conn, &mut out, args, &mut run).await;
                if conn.blocked.is_some() && !wait_blocked(shared, stream, &mut input, conn, &mut out, &mut run).await?
                {
                    return Ok(());
                }
                if conn.close || conn.transfer.is_some() || conn.replica_link.is_some() || *shutdown.borrow() {
                    run.commit(shared, &mut out).await;
                    stream.write_all(&out.buf).await?;
                    return Ok(());
                }
                if out.len() >= OUT_FLUSH_BYTES {
                    crate::pubsub::wake(&mut conn.woken);
                    run.commit(shared, &mut out).await;
                    write_out(shared, stream, &mut out).await?;
                }
            }
            if let Err(error) = parsed {
                run.commit(shared, &mut out).await;
                out.error(&error.to_string());
                stream.write_all(&out.buf).await?;
                tracing::info!(client = conn.info.id, addr = %conn.info.addr, %error, "closing: protocol error");
                return Ok(());
            }
            if done {
                break;
            }
        }
        crate::pubsub::wake(&mut conn.woken);
        // Replies go out only once the writes they acknowledge are durable.
        run.commit(shared, &mut out).await;
        conn.counts.flush_into(&shared.stats);
        conn.deliver(&mut out);
        if conn.info.killed.load(Ordering::Acquire) {
            return Ok(());
        }
        if !out.buf.is_empty() {
            if !conn.listens() {
                write_out(shared, stream, &mut out).await?;
                // Mail handed over as the client left its subscriptions.
                conn.info.mail.written(0);
            } else if !write_to_subscriber(shared, stream, conn, &mut out).await? {
                return Ok(());
            }
        }
        if input.is_empty() && input.capacity() > 2 * read_size {
            input = BytesMut::with_capacity(read_size);
        } else if input.capacity() - input.len() < read_size {
            input.reserve(read_size);
        }
        let spare = input.capacity() - input.len();
        // Subscribers and monitors wait for messages, not commands:
        // Redis's `timeout` spares them.
        let idle = if conn.listens() { None } else { shared.idle_timeout() };
        let n = tokio::select! {
            n = read_within(stream, &mut input, idle) => n?,
            _ = shutdown.changed() => return Ok(()),
            // A kill, mail, or a late unblock that found nothing to end.
            _ = conn.info.wake.notified() => {
                if conn.info.killed.load(Ordering::Acquire) {
                    return Ok(());
                }
                if conn.info.mail.has_mail() {
                    // Publishers ready on this thread post before the mail
                    // goes out, so one write carries more of it, as Redis
                    // writes a subscriber's messages once per turn of its
                    // event loop.
                    tokio::task::yield_now().await;
                }
                continue;
            }
        };
        if n == 0 {
            return Ok(());
        }
        if n == spare {
            read_size = (read_size * 2).min(READ_MAX);
        } else if n < read_size / 8 {
            read_size = (read_size / 2).max(READ_CHUNK);
        }
        shared.stats.net_input_bytes.fetch_add(n as u64, Ordering::Relaxed);
        conn.info.touch();
    }
}

/// Reads what the client sent into `input`: an error once `idle` passes
/// without a byte (the `timeout` setting).
pub async fn read_within(stream: &mut Stream, input: &mut BytesMut, idle: Option<Duration>) -> std::io::Result<usize> {
    match idle {
        Some(limit) => tokio::time::timeout(limit, stream.read_buf(input))
            .await
            .unwrap_or_else(|_| Err(std::io::Error::new(std::io::ErrorKind::TimedOut, "idle timeout"))),
        None => stream.read_buf(input).await,
    }
}

/// Sends the replies in `out` and empties it.
pub async fn write_out(shared: &Shared, stream: &mut Stream, out: &mut Out) -> std::io::Result<()> {
    shared.stats.net_output_bytes.fetch_add(out.buf.len() as u64, Ordering::Relaxed);
    stream.write_all(&out.buf).await?;
    out.buf.clear();
    Ok(())
}

/// `write_out` for a subscriber, which may stop reading while messages
/// pile up: the write gives way when the client is closed (its mailbox
/// passed the limit, or CLIENT KILL), where waiting for a socket that is
/// never read would keep the connection for ever. Mail that came during
/// the write is sent after it: its wake-up was taken here, and no other
/// comes while the mailbox holds it. False if closed.
async fn write_to_subscriber(
    shared: &Shared,
    stream: &mut Stream,
    conn: &ConnState,
    out: &mut Out,
) -> std::io::Result<bool> {
    let info = &conn.info;
    loop {
        let mut written = 0;
        while written < out.buf.len() {
            tokio::select! {
                // Cancel-safe: a write that did not complete wrote nothing.
                n = stream.write(&out.buf[written..]) => match n? {
                    0 => return Err(std::io::ErrorKind::WriteZero.into()),
                    n => {
                        written += n;
                        info.mail.written(out.buf.len() - written);
                    }
                },
                _ = info.wake.notified() => {
                    if info.killed.load(Ordering::Acquire) {
                        return Ok(false);
                    }
                }
            }
        }
        shared.stats.net_output_bytes.fetch_add(out.buf.len() as u64, Ordering::Relaxed);
        out.buf.clear();
        if !conn.deliver(out) {
            return Ok(true);
        }
    }
}

/// Refuses a connection over `maxclients` with Redis's message (memcached's
/// on its port).
pub async fn refuse(mut stream: Stream, wire: crate::io_threads::Wire) {
    let message: &[u8] = match wire {
        crate::io_threads::Wire::Resp => b"-ERR max number of clients reached\r\n",
        // Before a handshake nothing can be said: closed, as Redis does.
        crate::io_threads::Wire::RespTls | crate::io_threads::Wire::MemcachedTls => return,
        crate::io_threads::Wire::Memcached => b"ERROR Too many open connections\r\n",
    };
    let _ = stream.write_all(message).await;
}

/// Redis 7.0's refusal of a client protected mode keeps out.
pub async fn refuse_protected(mut stream: Stream) {
    const DENIED: &str = "-DENIED Redis is running in protected mode because protected mode is enabled and no \
        password is set for the default user. In this mode connections are only accepted from the loopback \
        interface. If you want to connect from external computers to Redis you may adopt one of the following \
        solutions: 1) Just disable protected mode sending the command 'CONFIG SET protected-mode no' from the \
        loopback interface by connecting to Redis from the same host the server is running, however MAKE SURE \
        Redis is not publicly accessible from internet if you do so. Use CONFIG REWRITE to make this change \
        permanent. 2) Alternatively you can just disable the protected mode by editing the Redis configuration \
        file, and setting the protected mode option to 'no', and then restarting the server. 3) If you started \
        the server manually just for testing, restart it with the '--protected-mode no' option. 4) Setup a an \
        authentication password for the default user. NOTE: You only need to do one of the above things in \
        order for the server to start accepting connections from the outside.\r\n";
    let _ = stream.write_all(DENIED.as_bytes()).await;
}

pub fn idle(limit_secs: u64) -> Option<Duration> {
    (limit_secs > 0).then(|| Duration::from_secs(limit_secs))
}

/// TCP keepalive probes after `secs` idle seconds, as Redis's
/// `tcp-keepalive` (0: none): then every third of that, and the peer is
/// given up after three unanswered, as Redis's `anetKeepAlive`.
fn keep_alive(stream: &TcpStream, secs: i32) {
    use std::os::fd::AsRawFd;
    if secs <= 0 {
        return;
    }
    let fd = stream.as_raw_fd();
    let set = |level: i32, option: i32, value: i32| {
        // SAFETY: `fd` is this open socket's; the option's value is an
        // int that outlives the call.
        let done = unsafe {
            libc::setsockopt(fd, level, option, (&value as *const i32).cast(), std::mem::size_of::<i32>() as u32)
        };
        if done != 0 {
            tracing::debug!(option, error = %std::io::Error::last_os_error(), "keepalive option not set");
        }
    };
    set(libc::SOL_SOCKET, libc::SO_KEEPALIVE, 1);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPIDLE, secs);
    set(libc::IPPROTO_TCP, libc::TCP_KEEPINTVL, (secs / 3).max(1));
    set(libc::IPPROTO_TCP, libc::TCP_KEEPCNT, 3);
}
