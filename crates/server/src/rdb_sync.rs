//! SYNC for `redis-cli --rdb`: the data set as one RDB file, as of the
//! moment SYNC arrived (`commands::dump::export`), sent the way a Redis
//! master sends a diskless full sync (`$EOF:<mark>`, the file, the mark),
//! then the connection closes. A replica's PSYNC or SYNC (any without
//! `REPLCONF rdb-only 1`, as Redis serves them: `redis-cli --replica`
//! sends a plain SYNC) is served by `crate::master` instead: the file,
//! then the stream of writes.
//!
//! REPLCONF takes what `redis-cli --rdb` and `--functions-rdb` send
//! (`rdb-only`, `rdb-filter-only functions`) and what a replica announces
//! (`listening-port`, `ip-address`, `capa`), as Redis 7.0 does.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use tokio::io::AsyncWriteExt;

use crate::commands::args::{eq, parse_i64};
use crate::commands::dump::export::Exported;
use crate::commands::{err, CmdError, CmdResult, Ctx};
use crate::conn::ClientInfo;
use crate::server::Shared;
use crate::socket::Stream;

/// The export's pieces: large enough that a write to the socket is cheap
/// per byte, small enough that a few in flight cost little memory.
const PIECE_BYTES: usize = 1 << 20;

/// A file to send once the replies before it are out (`conn::serve`).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Transfer {
    /// Asked by PSYNC: the file follows a `+FULLRESYNC` line.
    pub psync: bool,
    /// `rdb-filter-only functions`: the libraries, no keys.
    pub functions_only: bool,
}

/// What REPLCONF set for the connection.
#[derive(Debug, Default, Clone, Copy)]
pub struct Replconf {
    /// Announced a `listening-port`, as a Redis replica does (tools such
    /// as redis-cli do not).
    pub replica: bool,
    pub port: u16,
    pub rdb_only: bool,
    pub functions_only: bool,
}

pub fn replconf(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len().is_multiple_of(2) {
        return Err(err("ERR syntax error"));
    }
    let mut settings = ctx.conn.replconf;
    for pair in args[1..].chunks(2) {
        let (option, value) = (&pair[0], &pair[1]);
        if eq(option, "listening-port") {
            let port = parse_i64(value).ok_or_else(|| err("ERR value is not an integer or out of range"))?;
            settings.replica = true;
            settings.port = u16::try_from(port).unwrap_or(0);
        } else if eq(option, "ip-address") || eq(option, "capa") {
        } else if eq(option, "ack") || eq(option, "fack") || eq(option, "getack") {
            // A replica's acknowledgements are read by its link
            // (`crate::master`); Redis answers none of these.
            return Ok(());
        } else if eq(option, "rdb-only") {
            settings.rdb_only = match parse_i64(value) {
                Some(0) => false,
                Some(1) => true,
                _ => return Err(err("ERR value is out of range, value must between 0 and 1")),
            };
        } else if eq(option, "rdb-filter-only") {
            settings.functions_only = false;
            for filter in String::from_utf8_lossy(value).split_ascii_whitespace() {
                if !filter.eq_ignore_ascii_case("functions") {
                    return Err(err(format!("ERR Unsupported rdb-filter-only option: {filter}")));
                }
                settings.functions_only = true;
            }
        } else {
            return Err(err(format!("ERR Unrecognized REPLCONF option: {}", String::from_utf8_lossy(option))));
        }
    }
    ctx.conn.replconf = settings;
    ctx.out.ok();
    Ok(())
}

/// SYNC or PSYNC after `REPLCONF rdb-only 1` (`redis-cli --rdb`,
/// `--functions-rdb`): the file, then the connection closes. Any other:
/// the connection becomes a replica's link (`crate::master::serve`).
pub fn sync(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let psync = eq(&args[0], "psync");
    let settings = ctx.conn.replconf;
    if ctx.shared.replication.loading.load(Ordering::Acquire) {
        return Err(err("NOMASTERLINK Can't SYNC while not connected with my master"));
    }
    if !settings.rdb_only {
        if ctx.conn.multi.is_some() || ctx.conn.in_script {
            return Err(err("ERR Replica can't interact with the keyspace"));
        }
        let from = match psync {
            true if args.len() >= 3 => {
                let offset = parse_i64(&args[2]).ok_or_else(|| err("ERR value is not an integer or out of range"))?;
                Some((String::from_utf8_lossy(&args[1]).into_owned(), offset))
            }
            true => return Err(err("ERR wrong number of arguments for 'psync' command")),
            false => None,
        };
        if psync && args.len() > 3 && eq(&args[3], "failover") {
            take_over(ctx, &args[1])?;
        }
        if ctx.shared.failover.phase() != crate::failover::Phase::None || ctx.shared.master.frozen() {
            return Err(err("NOMASTERLINK Can't SYNC while failing over"));
        }
        // A replica of this one gets its master's stream (`Master::relay`).
        if ctx.shared.replication.following() && !ctx.shared.replication.link_up() {
            return Err(err("NOMASTERLINK Can't SYNC while not connected with my master"));
        }
        ctx.conn.replica_link = Some(crate::master::Psync { from, port: settings.port });
        return Ok(());
    }
    ctx.conn.transfer = Some(Transfer { psync, functions_only: ctx.conn.replconf.functions_only });
    Ok(())
}

/// `PSYNC <replid> <offset> FAILOVER` from the master this server
/// follows, whose replication ID it names: its FAILOVER hands over to
/// this server, which becomes a master (as REPLICAOF NO ONE; the PSYNC
/// is served once the promotion is done, `master::serve`) and answers it
/// from its master's history, which it keeps (`crate::failover`).
fn take_over(ctx: &mut Ctx<'_>, replid: &[u8]) -> Result<(), CmdError> {
    let replication = &ctx.shared.replication;
    let mine = match replication.following() {
        true => replication.position().0,
        false => Some(ctx.shared.master.replid()),
    };
    if mine.as_deref().map(str::as_bytes) != Some(replid) {
        return Err(err("ERR PSYNC FAILOVER replid must match my replid."));
    }
    if replication.following() {
        tracing::info!(client = %ctx.conn.info.addr, "master mode enabled (failover request from the master)");
        replication.stop(ctx.shared).map_err(|error| err(crate::commands::engine_error_text(&error)))?;
    }
    Ok(())
}

/// Sends the file (`Transfer`) to the client of `stream`. Its end is the
/// mark after it: a client that sees the connection close before the
/// mark knows the file is cut short (an engine error, a shutdown).
/// CLIENT KILL of `client` (or a shutdown) ends it where it is.
pub async fn send(
    shared: Arc<Shared>,
    client: &ClientInfo,
    stream: &mut Stream,
    transfer: Transfer,
) -> std::io::Result<()> {
    let mark = random_hex();
    let mut head = String::new();
    if transfer.psync {
        head.push_str(&format!("+FULLRESYNC {} 0\r\n", random_hex()));
    }
    head.push_str(&format!("$EOF:{mark}\r\n"));
    stream.write_all(head.as_bytes()).await?;
    let started = Instant::now();
    let (pieces, arriving) = tokio::sync::mpsc::channel::<Vec<u8>>(2);
    let exporting = shared.clone();
    let job = tokio::task::spawn_blocking(move || {
        let keys = !transfer.functions_only;
        crate::commands::dump::export::export(&exporting, &exporting.db.snapshot(), PIECE_BYTES, keys, |piece| {
            pieces.blocking_send(piece).is_ok()
        })
    });
    if let Some(exported) = forward_file(&shared, client, stream, arriving, job, &mark).await? {
        tracing::info!(
            keys = exported.keys,
            bytes = exported.bytes,
            millis = started.elapsed().as_millis() as u64,
            "sent an RDB file of the data set"
        );
    }
    Ok(())
}

/// Forwards the pieces of an export (`arriving`, from `job`) to `client`,
/// then the end `mark` once the export ended whole. Returns what it
/// exported; None if the file was cut short (the reader left, CLIENT
/// KILL, a shutdown, or an engine error, which is logged).
pub(crate) async fn forward_file(
    shared: &Shared,
    client: &ClientInfo,
    stream: &mut Stream,
    mut arriving: tokio::sync::mpsc::Receiver<Vec<u8>>,
    job: tokio::task::JoinHandle<Result<Option<Exported>, CmdError>>,
    mark: &str,
) -> std::io::Result<Option<Exported>> {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        let piece = tokio::select! {
            piece = arriving.recv() => piece,
            _ = shutdown.changed() => return Ok(None),
            _ = until_killed(client) => return Ok(None),
        };
        let Some(piece) = piece else { break };
        // A client that stopped reading is still ended by a kill.
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
            Ok(Some(exported))
        }
        Ok(Ok(None)) => Ok(None),
        Ok(Err(error)) => {
            tracing::error!(error = %error.text(), "RDB export failed; the file was cut short");
            Ok(None)
        }
        Err(error) => {
            tracing::error!(%error, "RDB export failed; the file was cut short");
            Ok(None)
        }
    }
}

/// Returns once CLIENT KILL (a full output buffer's, a replica's lag)
/// ends `client`.
pub(crate) async fn until_killed(client: &ClientInfo) {
    // A kill stores a wake-up when no one waits: none is missed.
    while !client.killed.load(Ordering::Acquire) {
        client.wake.notified().await;
    }
}

/// A replication ID or an end mark: 40 random hex digits.
pub(crate) fn random_hex() -> String {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    (0..40).map(|_| char::from_digit(rng.gen_range(0..16), 16).expect("a hex digit")).collect()
}
