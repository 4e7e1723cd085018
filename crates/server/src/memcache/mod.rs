//! The memcached protocols (memcached 1.6's text and binary commands) on
//! its own port, over the same keyspace, locks and group commit as the
//! Redis protocol: a reply to a write is sent once the write is durable.
//!
//! - `request`: the parser (command lines and data blocks);
//! - `binary`, `binary_commands`: the binary protocol (a connection whose
//!   first byte is 0x80 speaks it, as memcached decides);
//! - `commands`: the commands, their table and `stats`;
//! - `meta`: the meta commands (`mg`, `ms`, `md`, `ma`);
//! - `cas`: CAS values that stay unique across restarts.
//!
//! With `requirepass` set, a text connection authenticates as memcached's
//! ASCII authentication has it: its first command is a `set` whose data is
//! `<user> <password>` (any user name); a binary one by SASL PLAIN.

pub mod binary;
pub mod binary_commands;
pub mod cas;
pub mod commands;
pub mod meta;
pub mod request;

use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;

use crate::conn::ConnState;
use crate::resp::{Out, Protocol};
use crate::server::Shared;
use crate::socket::{Peer, Stream};
use request::{Parser, Request};

/// What the memcached side of the server keeps.
pub struct State {
    /// None while the memcached port is off (no CAS is handed out).
    pub cas: Option<cas::CasClock>,
    pub stats: commands::Stats,
    /// The port it listens on (0: off).
    pub port: AtomicU16,
    /// When a delayed `flush_all` clears every key (Unix ms; 0: none).
    pub flush_at: AtomicU64,
}

impl State {
    pub fn new(cas: Option<cas::CasClock>) -> State {
        State { cas, stats: Default::default(), port: AtomicU16::new(0), flush_at: AtomicU64::new(0) }
    }
}

/// Replies are written once this much is pending, as the RESP side does.
const OUT_FLUSH_BYTES: usize = 256 * 1024;
const READ_CHUNK: usize = 16 * 1024;

/// Serves one memcached connection until it quits, closes or breaks the
/// protocol beyond repair, or the server shuts down.
pub async fn serve(shared: Arc<Shared>, mut stream: Stream, addr: Peer, local: Peer) {
    if let Some(tcp) = stream.tcp() {
        let _ = tcp.set_nodelay(true);
    }
    let id = shared.next_client_id.fetch_add(1, Ordering::Relaxed);
    let mut conn = ConnState::register(&shared, id, addr, local);
    conn.authenticated = open(&shared);
    let stats = &shared.memcached.stats;
    stats.curr_connections.fetch_add(1, Ordering::Relaxed);
    stats.total_connections.fetch_add(1, Ordering::Relaxed);
    if let Err(error) = run(&shared, &mut stream, &mut conn).await {
        tracing::debug!(client = id, %addr, %error, "memcached connection ended");
    }
    stats.curr_connections.fetch_sub(1, Ordering::Relaxed);
    conn.unregister(&shared);
}

/// A connection's input, its replies, and the run of writes they wait for.
pub(super) struct Io<'s> {
    pub input: BytesMut,
    pub out: Out,
    pub run: crate::commands::Run<'s>,
    shutdown: tokio::sync::watch::Receiver<bool>,
}

impl<'s> Io<'s> {
    /// Commits the run, sends the replies that waited for it, and reads
    /// more input: false once the connection is to end (closed, idle too
    /// long, killed, or the server shutting down).
    pub async fn settle_and_read(
        &mut self,
        shared: &'s Shared,
        stream: &mut Stream,
        conn: &mut ConnState,
    ) -> std::io::Result<bool> {
        loop {
            // Replies go out only once the writes they acknowledge are durable.
            self.run.commit(shared, &mut self.out).await;
            conn.counts.flush_into(&shared.stats);
            if conn.info.killed.load(Ordering::Acquire) {
                return Ok(false);
            }
            if !self.out.buf.is_empty() {
                crate::conn::write_out(shared, stream, &mut self.out).await?;
            }
            if self.out.broken {
                return Ok(false);
            }
            if self.input.capacity() - self.input.len() < READ_CHUNK {
                self.input.reserve(READ_CHUNK);
            }
            let n = tokio::select! {
                n = crate::conn::read_within(stream, &mut self.input, shared.idle_timeout()) => n?,
                _ = self.shutdown.changed() => return Ok(false),
                _ = conn.info.wake.notified() => {
                    if conn.info.killed.load(Ordering::Acquire) {
                        return Ok(false);
                    }
                    continue;
                }
            };
            if n == 0 {
                return Ok(false);
            }
            shared.stats.net_input_bytes.fetch_add(n as u64, Ordering::Relaxed);
            conn.info.touch();
            return Ok(true);
        }
    }

    /// Commits the run and sends every reply: before the connection closes.
    pub async fn finish(&mut self, shared: &'s Shared, stream: &mut Stream) -> std::io::Result<()> {
        self.run.commit(shared, &mut self.out).await;
        stream.write_all(&self.out.buf).await
    }

    /// Sends the replies so far once they pile up (the run committed first).
    pub async fn flush_if_full(&mut self, shared: &'s Shared, stream: &mut Stream) -> std::io::Result<()> {
        if self.out.len() >= OUT_FLUSH_BYTES {
            self.run.commit(shared, &mut self.out).await;
            crate::conn::write_out(shared, stream, &mut self.out).await?;
        }
        Ok(())
    }
}

async fn run(shared: &Shared, stream: &mut Stream, conn: &mut ConnState) -> std::io::Result<()> {
    let mut out = Out::new(Protocol::Resp2);
    out.memcached = true;
    let mut io = Io {
        input: BytesMut::with_capacity(READ_CHUNK),
        out,
        run: crate::commands::Run::default(),
        shutdown: shared.shutdown.subscribe(),
    };
    // memcached picks a connection's protocol by the first byte it sends.
    if !io.settle_and_read(shared, stream, conn).await? {
        return Ok(());
    }
    match io.input[0] {
        binary::REQUEST => binary_commands::serve(shared, stream, conn, &mut io).await,
        _ => serve_text(shared, stream, conn, &mut io).await,
    }
}

/// The text protocol's requests until the connection ends.
async fn serve_text<'s>(
    shared: &'s Shared,
    stream: &mut Stream,
    conn: &mut ConnState,
    io: &mut Io<'s>,
) -> std::io::Result<()> {
    let mut parser = Parser::default();
    let limits = request::Limits { max_item_bytes: shared.config.memcached_item_size_max };
    loop {
        loop {
            let request = match parser.parse(&mut io.input, &limits) {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(request::LineTooLong) => {
                    io.finish(shared, stream).await?;
                    tracing::info!(client = conn.info.id, addr = %conn.info.addr, "closing: memcached line too long");
                    return Ok(());
                }
            };
            if conn.info.killed.load(Ordering::Acquire) {
                io.run.commit(shared, &mut io.out).await;
                return Ok(());
            }
            conn.counts.commands += 1;
            let (out, run) = (&mut io.out, &mut io.run);
            match request {
                Request::Command { args, .. } if &args[0][..] == b"quit" => {
                    return io.finish(shared, stream).await;
                }
                Request::Command { args, noreply } if !conn.authenticated => {
                    run.commit(shared, out).await;
                    authenticate(shared, conn, out, &args, noreply);
                }
                Request::Command { mut args, noreply } => match commands::lookup(&args[0]) {
                    Some(command) => {
                        out.quiet = noreply;
                        crate::commands::run_command(shared, conn, out, command, &mut args, run).await;
                        out.quiet = false;
                    }
                    None => {
                        run.commit(shared, out).await;
                        out.error("ERROR");
                    }
                },
                Request::TooLarge { key, drop, noreply } => {
                    if drop && conn.authenticated {
                        // The old item goes, quietly; the refusal follows.
                        out.quiet = true;
                        let delete = commands::lookup(b"delete").expect("in the table");
                        let mut args = vec![Bytes::from_static(b"delete"), key];
                        crate::commands::run_command(shared, conn, out, delete, &mut args, run).await;
                    }
                    run.commit(shared, out).await;
                    out.quiet = noreply;
                    out.error("SERVER_ERROR object too large for cache");
                    out.quiet = false;
                }
                Request::Error(text, noreply) => {
                    run.commit(shared, out).await;
                    out.quiet = noreply;
                    out.error(text);
                    out.quiet = false;
                }
            }
            io.flush_if_full(shared, stream).await?;
        }
        if !io.settle_and_read(shared, stream, conn).await? {
            return Ok(());
        }
    }
}

/// memcached's ASCII authentication: a `set` whose data is `<user>
/// <password>`; anything else is refused until then. The user is an ACL
/// user that may run everything (memcached's commands are not Redis's, so
/// they cannot be checked one by one), or any other name with the
/// `default` user's password.
fn authenticate(shared: &Shared, conn: &mut ConnState, out: &mut Out, args: &[Bytes], noreply: bool) {
    let stats = &shared.memcached.stats;
    if &args[0][..] != b"set" {
        out.error("CLIENT_ERROR unauthenticated");
        return;
    }
    stats.auth_cmds.fetch_add(1, Ordering::Relaxed);
    let data = args.last().map_or(&b""[..], |d| &d[..]);
    let mut words = data.splitn(2, |&b| b == b' ');
    let (user, password) = (words.next().unwrap_or_default(), words.next());
    if password.is_some_and(|password| crate::memcache::opens(shared, user, password)) {
        conn.authenticated = true;
        out.quiet = noreply;
        out.memcached_line(b"STORED");
        out.quiet = false;
    } else {
        stats.auth_errors.fetch_add(1, Ordering::Relaxed);
        out.error("CLIENT_ERROR authentication failure");
    }
}

/// Whether memcached connections need no authentication: the `default`
/// user needs no password and may run everything. The memcached protocol
/// has no per-command permissions (its commands are not Redis's), so
/// authentication is its one gate.
pub fn open(shared: &Shared) -> bool {
    shared.users.default_open() && shared.users.default_unrestricted()
}

/// Whether `user` and `password` open the memcached protocol: an ACL user
/// that may run everything, or another name with the `default` user's
/// password.
pub fn opens(shared: &Shared, user: &[u8], password: &[u8]) -> bool {
    let user = if shared.users.get(user).is_some() { user } else { b"default" };
    shared.users.opens_everything(user, password)
}

/// Clears every key when a delayed `flush_all` comes due.
pub async fn delayed_flushes(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(100)) => {}
            _ = shutdown.changed() => return,
        }
        let at = shared.memcached.flush_at.load(Ordering::Relaxed);
        if at == 0 || at > scaledkv::now_ms() {
            continue;
        }
        if shared.memcached.flush_at.compare_exchange(at, 0, Ordering::Relaxed, Ordering::Relaxed).is_ok() {
            if let Err(error) = crate::commands::flush_everything(&shared).await {
                tracing::warn!(%error, "delayed flush_all failed");
            }
        }
    }
}
