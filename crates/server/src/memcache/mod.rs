//! The memcached text protocol (memcached 1.6's commands and replies) on
//! its own port, over the same keyspace, locks and group commit as the
//! Redis protocol: a reply to a write is sent once the write is durable.
//!
//! - `request`: the parser (command lines and data blocks);
//! - `commands`: the commands, their table and `stats`;
//! - `meta`: the meta commands (`mg`, `ms`, `md`, `ma`);
//! - `cas`: CAS values that stay unique across restarts.
//!
//! With `requirepass` set, a connection authenticates as memcached's
//! ASCII authentication has it: its first command is a `set` whose data is
//! `<user> <password>` (any user name).

pub mod cas;
pub mod commands;
pub mod meta;
pub mod request;

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU16, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::conn::ConnState;
use crate::resp::{Out, Protocol};
use crate::server::Shared;
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
pub async fn serve(shared: Arc<Shared>, mut stream: TcpStream, addr: SocketAddr) {
    let _ = stream.set_nodelay(true);
    let local = stream.local_addr().unwrap_or(addr);
    let id = shared.next_client_id.fetch_add(1, Ordering::Relaxed);
    let mut conn = ConnState::register(&shared, id, addr, local);
    let stats = &shared.memcached.stats;
    stats.curr_connections.fetch_add(1, Ordering::Relaxed);
    stats.total_connections.fetch_add(1, Ordering::Relaxed);
    if let Err(error) = run(&shared, &mut stream, &mut conn).await {
        tracing::debug!(client = id, %addr, %error, "memcached connection ended");
    }
    stats.curr_connections.fetch_sub(1, Ordering::Relaxed);
    conn.unregister(&shared);
}

async fn run(shared: &Shared, stream: &mut TcpStream, conn: &mut ConnState) -> std::io::Result<()> {
    let mut input = BytesMut::with_capacity(READ_CHUNK);
    let mut out = Out::new(Protocol::Resp2);
    out.memcached = true;
    let mut parser = Parser::default();
    let mut run = crate::commands::Run::default();
    let mut shutdown = shared.shutdown.subscribe();
    let limits = request::Limits { max_item_bytes: shared.config.memcached_item_size_max };
    loop {
        loop {
            let request = match parser.parse(&mut input, &limits) {
                Ok(Some(request)) => request,
                Ok(None) => break,
                Err(request::LineTooLong) => {
                    run.commit(shared, &mut out).await;
                    stream.write_all(&out.buf).await?;
                    tracing::info!(client = conn.info.id, addr = %conn.info.addr, "closing: memcached line too long");
                    return Ok(());
                }
            };
            if conn.info.killed.load(Ordering::Acquire) {
                run.commit(shared, &mut out).await;
                return Ok(());
            }
            conn.counts.commands += 1;
            match request {
                Request::Command { args, .. } if &args[0][..] == b"quit" => {
                    run.commit(shared, &mut out).await;
                    stream.write_all(&out.buf).await?;
                    return Ok(());
                }
                Request::Command { args, noreply } if !conn.authenticated => {
                    run.commit(shared, &mut out).await;
                    authenticate(shared, conn, &mut out, &args, noreply);
                }
                Request::Command { mut args, noreply } => match commands::lookup(&args[0]) {
                    Some(command) => {
                        out.quiet = noreply;
                        crate::commands::run_command(shared, conn, &mut out, command, &mut args, &mut run).await;
                        out.quiet = false;
                    }
                    None => {
                        run.commit(shared, &mut out).await;
                        out.error("ERROR");
                    }
                },
                Request::TooLarge { key, drop, noreply } => {
                    if drop && conn.authenticated {
                        // The old item goes, quietly; the refusal follows.
                        out.quiet = true;
                        let delete = commands::lookup(b"delete").expect("in the table");
                        let mut args = vec![Bytes::from_static(b"delete"), key];
                        crate::commands::run_command(shared, conn, &mut out, delete, &mut args, &mut run).await;
                    }
                    run.commit(shared, &mut out).await;
                    out.quiet = noreply;
                    out.error("SERVER_ERROR object too large for cache");
                    out.quiet = false;
                }
                Request::Error(text, noreply) => {
                    run.commit(shared, &mut out).await;
                    out.quiet = noreply;
                    out.error(text);
                    out.quiet = false;
                }
            }
            if out.len() >= OUT_FLUSH_BYTES {
                run.commit(shared, &mut out).await;
                crate::conn::write_out(shared, stream, &mut out).await?;
            }
        }
        // Replies go out only once the writes they acknowledge are durable.
        run.commit(shared, &mut out).await;
        conn.counts.flush_into(&shared.stats);
        if conn.info.killed.load(Ordering::Acquire) {
            return Ok(());
        }
        if !out.buf.is_empty() {
            crate::conn::write_out(shared, stream, &mut out).await?;
        }
        if input.capacity() - input.len() < READ_CHUNK {
            input.reserve(READ_CHUNK);
        }
        let n = tokio::select! {
            n = crate::conn::read_within(stream, &mut input, shared.idle_timeout()) => n?,
            _ = shutdown.changed() => return Ok(()),
            _ = conn.info.wake.notified() => {
                if conn.info.killed.load(Ordering::Acquire) {
                    return Ok(());
                }
                continue;
            }
        };
        if n == 0 {
            return Ok(());
        }
        shared.stats.net_input_bytes.fetch_add(n as u64, Ordering::Relaxed);
        conn.info.touch();
    }
}

/// memcached's ASCII authentication: a `set` whose data is `<user>
/// <password>`; anything else is refused until then.
fn authenticate(shared: &Shared, conn: &mut ConnState, out: &mut Out, args: &[Bytes], noreply: bool) {
    let stats = &shared.memcached.stats;
    if &args[0][..] != b"set" {
        out.error("CLIENT_ERROR unauthenticated");
        return;
    }
    stats.auth_cmds.fetch_add(1, Ordering::Relaxed);
    let data = args.last().map_or(&b""[..], |d| &d[..]);
    let password = data.splitn(2, |&b| b == b' ').nth(1);
    let expected = shared.password();
    if password.is_some() && password == expected.as_deref().map(str::as_bytes) {
        conn.authenticated = true;
        out.quiet = noreply;
        out.memcached_line(b"STORED");
        out.quiet = false;
    } else {
        stats.auth_errors.fetch_add(1, Ordering::Relaxed);
        out.error("CLIENT_ERROR authentication failure");
    }
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
