//! Connection and server commands: PING HELLO AUTH CLIENT INFO CONFIG
//! COMMAND FLUSHALL SHUTDOWN and the like.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;

use bytes::Bytes;
use scaledkv::log::record::{ENTRY_HEADER_BYTES, EXPIRY_BYTES, FRAME_ALIGN_BYTES};
use scaledkv::{Durability, WriteBatch, MAX_BATCH_BYTES};

use super::args::{eq, int, int32};
use super::{
    err, lookup, only_database_zero, subcommand_arity, unknown_subcommand, CmdError, CmdResult, Command, Ctx, TABLE,
};
use crate::config::Rewritten;
use crate::resp::Protocol;
use crate::server::Shared;

/// What INFO and HELLO report as the Redis version whose behaviour this
/// server follows (clients use it for feature detection).
pub const REDIS_VERSION: &str = "7.0.15";

fn arity_error(name: &str) -> CmdError {
    err(format!("ERR wrong number of arguments for '{name}' command"))
}

pub fn ping(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len() > 2 {
        return Err(arity_error("ping"));
    }
    if ctx.conn.protocol == Protocol::Resp2 && !ctx.conn.subscriptions.is_empty() {
        // In subscribed mode every reply is an array, as messages are.
        ctx.out.array(2);
        ctx.out.bulk(b"pong");
        ctx.out.bulk(args.get(1).map_or(&b""[..], |arg| &arg[..]));
        return Ok(());
    }
    match args.get(1) {
        None => ctx.out.simple("PONG"),
        Some(arg) => ctx.out.bulk(arg),
    }
    Ok(())
}

pub fn echo(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    ctx.out.bulk(&args[1]);
    Ok(())
}

pub fn quit(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    ctx.out.ok();
    ctx.conn.close = true;
    Ok(())
}

/// MONITOR: from now on this client is sent every command the server runs
/// (`crate::monitor`); asked again, it answers nothing, as Redis.
pub fn monitor(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    // Only a transaction's writes keep an overlay here: inside EXEC.
    if ctx.writes.has_overlay() {
        return Err(err("ERR MONITOR isn't allowed for DENY BLOCKING client"));
    }
    if !ctx.conn.info.monitor.swap(true, Ordering::Relaxed) {
        ctx.shared.monitors.add(&ctx.conn.info);
        ctx.out.ok();
    }
    Ok(())
}

pub fn reset(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    ctx.conn.stop_monitoring(ctx.shared);
    let conn = &mut *ctx.conn;
    conn.subscriptions.clear(&ctx.shared.pubsub, &conn.info);
    // Messages published before it are sent before its reply.
    ctx.conn.info.mail.deliver(ctx.out);
    ctx.conn.reset_transaction();
    crate::tracking::reset(ctx.shared, ctx.conn);
    (ctx.conn.reply_off, ctx.conn.reply_skip_next) = (false, false);
    ctx.conn.protocol = Protocol::Resp2;
    ctx.out.protocol = Protocol::Resp2;
    ctx.conn.info.resp.store(2, Ordering::Relaxed);
    *ctx.conn.info.name.lock() = None;
    ctx.conn.authenticated = ctx.shared.users.default_open();
    set_user(ctx.conn, None);
    ctx.out.simple("RESET");
    Ok(())
}

/// Checks a username/password pair against the ACL users for `command`
/// (AUTH or HELLO, as sent); a failure goes into the ACL log.
fn check_password(ctx: &mut Ctx<'_>, command: &[u8], user: &[u8], password: &[u8]) -> CmdResult {
    if !ctx.shared.users.accepts(user, password) {
        ctx.shared.acl_log.auth_failed(command, user, ctx.conn.info.describe());
        return Err(err("WRONGPASS invalid username-password pair or user is disabled."));
    }
    set_user(ctx.conn, (user != b"default").then(|| user.to_vec()));
    ctx.conn.authenticated = true;
    Ok(())
}

/// The connection's user from now on (None: `default`).
fn set_user(conn: &mut crate::conn::ConnState, user: Option<Vec<u8>>) {
    *conn.info.user.lock() = user.clone();
    conn.user = user;
}

pub fn auth(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    match args.len() {
        2 => {
            if ctx.shared.users.default_nopass() {
                return Err(err("ERR AUTH <password> called without any password configured for the default user. \
                                Are you sure your configuration is correct?"));
            }
            check_password(ctx, &args[0], b"default", &args[1])?;
        }
        3 => check_password(ctx, &args[0], &args[1], &args[2])?,
        _ => return Err(CmdError::Syntax),
    }
    ctx.out.ok();
    Ok(())
}

pub fn hello(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut protocol = ctx.conn.protocol;
    if args.len() >= 2 {
        protocol = match super::args::parse_i64(&args[1]) {
            Some(2) => Protocol::Resp2,
            Some(3) => Protocol::Resp3,
            Some(_) => return Err(err("NOPROTO unsupported protocol version")),
            None => return Err(err("ERR Protocol version is not an integer or out of range")),
        };
    }
    let mut name = None;
    let mut i = 2;
    while i < args.len() {
        if eq(&args[i], "auth") && i + 2 < args.len() {
            check_password(ctx, &args[0], &args[i + 1], &args[i + 2])?;
            i += 3;
        } else if eq(&args[i], "setname") && i + 1 < args.len() {
            name = Some(valid_name(&args[i + 1])?);
            i += 2;
        } else {
            return Err(err(format!("ERR Syntax error in HELLO option '{}'", String::from_utf8_lossy(&args[i]))));
        }
    }
    if !ctx.conn.authenticated {
        return Err(err("NOAUTH HELLO must be called with the client already authenticated, otherwise the HELLO \
                        <proto> AUTH <user> <pass> option can be used to authenticate the client and select the \
                        RESP protocol version at the same time"));
    }
    if let Some(name) = name {
        *ctx.conn.info.name.lock() = name;
    }
    ctx.conn.protocol = protocol;
    ctx.out.protocol = protocol;
    let version = if protocol == Protocol::Resp3 { 3 } else { 2 };
    ctx.conn.info.resp.store(version, Ordering::Relaxed);
    let out = &mut *ctx.out;
    out.map(7);
    out.bulk(b"server");
    out.bulk(b"redis");
    out.bulk(b"version");
    out.bulk(REDIS_VERSION.as_bytes());
    out.bulk(b"proto");
    out.int(version as i64);
    out.bulk(b"id");
    out.int(ctx.conn.info.id as i64);
    out.bulk(b"mode");
    out.bulk(b"standalone");
    out.bulk(b"role");
    out.bulk(b"master");
    out.bulk(b"modules");
    out.array(0);
    Ok(())
}

pub fn select(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    only_database_zero(int32(&args[1])? as i64)?;
    ctx.out.ok();
    Ok(())
}

/// SWAPDB: with one database (as Redis with `databases 1`), only 0 with 0,
/// which changes nothing.
pub fn swapdb(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let first = int32(&args[1]).map_err(|_| err("ERR invalid first DB index"))?;
    let second = int32(&args[2]).map_err(|_| err("ERR invalid second DB index"))?;
    only_database_zero(first as i64)?;
    only_database_zero(second as i64)?;
    ctx.out.ok();
    Ok(())
}

/// A client name: no spaces, newlines or other special characters.
fn valid_name(name: &[u8]) -> Result<Option<String>, CmdError> {
    if name.is_empty() {
        return Ok(None);
    }
    if name.iter().any(|&c| !(b'!'..=b'~').contains(&c)) {
        return Err(err("ERR Client names cannot contain spaces, newlines or special characters."));
    }
    Ok(Some(String::from_utf8_lossy(name).into_owned()))
}

pub fn client(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match sub.as_str() {
        "id" if args.len() == 2 => ctx.out.int(ctx.conn.info.id as i64),
        "getname" if args.len() == 2 => match ctx.conn.info.name.lock().clone() {
            Some(name) => ctx.out.bulk(name.as_bytes()),
            None => ctx.out.null(),
        },
        "setname" if args.len() == 3 => {
            *ctx.conn.info.name.lock() = valid_name(&args[2])?;
            ctx.out.ok();
        }
        "info" if args.len() == 2 => {
            let line = ctx.conn.info.describe() + "\n";
            ctx.out.verbatim(&line);
        }
        "list" => {
            let clients: Vec<_> = ctx.shared.clients.lock().values().cloned().collect();
            let mut text = String::new();
            for client in clients {
                text.push_str(&client.describe());
                text.push('\n');
            }
            ctx.out.verbatim(&text);
        }
        // Sent by redis-py and other clients on connect (Redis 7.2).
        "setinfo" if args.len() == 4 => ctx.out.ok(),
        "kill" if args.len() >= 3 => client_kill(ctx, args)?,
        "unblock" if args.len() == 3 || args.len() == 4 => {
            let id = int(&args[2])?;
            let how = match args.get(3) {
                None => crate::conn::UNBLOCK_TIMEOUT,
                Some(how) if eq(how, "timeout") => crate::conn::UNBLOCK_TIMEOUT,
                Some(how) if eq(how, "error") => crate::conn::UNBLOCK_ERROR,
                Some(_) => return Err(err("ERR CLIENT UNBLOCK reason should be TIMEOUT or ERROR")),
            };
            let client = u64::try_from(id).ok().and_then(|id| ctx.shared.clients.lock().get(&id).cloned());
            ctx.out.int(client.is_some_and(|client| client.unblock(how)) as i64);
        }
        "no-evict" if args.len() == 3 => {
            // ScaledKV never evicts clients: on and off are both true.
            if !eq(&args[2], "on") && !eq(&args[2], "off") {
                return Err(CmdError::Syntax);
            }
            ctx.out.ok();
        }
        "getredir" if args.len() == 2 => {
            let redirect = ctx.conn.tracking.as_ref().map_or(-1, |tracking| tracking.redirect as i64);
            ctx.out.int(redirect);
        }
        "trackinginfo" if args.len() == 2 => crate::tracking::info(ctx),
        "caching" if args.len() >= 3 => crate::tracking::caching(ctx, &args[2])?,
        "tracking" if args.len() >= 3 => crate::tracking::command(ctx, args)?,
        // OFF and SKIP answer nothing themselves (`commands::execute`
        // drops the replies they silence).
        "reply" if args.len() == 3 => match () {
            _ if eq(&args[2], "on") => {
                (ctx.conn.reply_off, ctx.conn.reply_skip) = (false, false);
                ctx.out.ok();
            }
            _ if eq(&args[2], "off") => ctx.conn.reply_off = true,
            _ if eq(&args[2], "skip") => ctx.conn.reply_skip_next |= !ctx.conn.reply_off,
            _ => return Err(CmdError::Syntax),
        },
        "pause" if args.len() == 3 || args.len() == 4 => {
            let all = match args.get(3) {
                None => true,
                Some(mode) if eq(mode, "all") => true,
                Some(mode) if eq(mode, "write") => false,
                Some(_) => return Err(err("ERR CLIENT PAUSE mode must be WRITE or ALL")),
            };
            let millis =
                super::args::parse_i64(&args[2]).ok_or_else(|| err("ERR timeout is not an integer or out of range"))?;
            if millis < 0 {
                return Err(err("ERR timeout is negative"));
            }
            ctx.shared.pause.pause(millis as u64, all);
            ctx.out.ok();
        }
        "pause" if args.len() > 4 => return Err(super::subcommand_syntax("CLIENT", &args[1])),
        "unpause" if args.len() == 2 => {
            ctx.shared.pause.unpause();
            ctx.out.ok();
        }
        "help" if args.len() == 2 => ctx.out.help(CLIENT_HELP),
        "id" | "getname" | "setname" | "info" | "setinfo" | "kill" | "unblock" | "no-evict" | "getredir"
        | "trackinginfo" | "caching" | "tracking" | "reply" | "pause" | "unpause" | "help" => {
            return Err(subcommand_arity("client", &sub))
        }
        _ => return Err(unknown_subcommand("client", &args[1])),
    }
    Ok(())
}

const CLIENT_HELP: &[&str] = &[
    "CLIENT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CACHING (YES|NO)",
    "    Enable/disable tracking of the keys for next command in OPTIN/OPTOUT modes.",
    "GETREDIR",
    "    Return the client ID we are redirecting to when tracking is enabled.",
    "GETNAME",
    "    Return the name of the current connection.",
    "ID",
    "    Return the ID of the current connection.",
    "INFO",
    "    Return information about the current client connection.",
    "KILL <ip:port>",
    "    Kill connection made from <ip:port>.",
    "KILL <option> <value> [<option> <value> [...]]",
    "    Kill connections. Options are:",
    "    * ADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made from the specified address",
    "    * LADDR (<ip:port>|<unixsocket>:0)",
    "      Kill connections made to specified local address",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Kill connections by type.",
    "    * USER <username>",
    "      Kill connections authenticated by <username>.",
    "    * SKIPME (YES|NO)",
    "      Skip killing current connection (default: yes).",
    "LIST [options ...]",
    "    Return information about client connections. Options:",
    "    * TYPE (NORMAL|MASTER|REPLICA|PUBSUB)",
    "      Return clients of specified type.",
    "UNPAUSE",
    "    Stop the current client pause, resuming traffic.",
    "PAUSE <timeout> [WRITE|ALL]",
    "    Suspend all, or just write, clients for <timeout> milliseconds.",
    "REPLY (ON|OFF|SKIP)",
    "    Control the replies sent to the current connection.",
    "SETNAME <name>",
    "    Assign the name <name> to the current connection.",
    "UNBLOCK <clientid> [TIMEOUT|ERROR]",
    "    Unblock the specified blocked client.",
    "TRACKING (ON|OFF) [REDIRECT <id>] [BCAST] [PREFIX <prefix> [...]]",
    "         [OPTIN] [OPTOUT] [NOLOOP]",
    "    Control server assisted client side caching.",
    "TRACKINGINFO",
    "    Report tracking status for the current connection.",
    "NO-EVICT (ON|OFF)",
    "    Protect current client connection from eviction.",
    "HELP",
    "    Prints this help.",
];

/// CLIENT KILL addr:port (Redis's old form: OK, or an error when no
/// client has that address) or CLIENT KILL with filters ID, ADDR, LADDR,
/// USER, TYPE and SKIPME (the number of clients closed; the caller is
/// spared unless SKIPME no).
fn client_kill(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let clients: Vec<_> = ctx.shared.clients.lock().values().cloned().collect();
    let me = ctx.conn.info.id;
    if args.len() == 3 {
        let addr = String::from_utf8_lossy(&args[2]);
        let target = clients.iter().find(|client| client.addr.to_string() == addr);
        let Some(target) = target else { return Err(err("ERR No such client")) };
        kill(ctx, target);
        ctx.out.ok();
        return Ok(());
    }
    let (mut id, mut addr, mut laddr, mut skip_me) = (None, None, None, true);
    // TYPE: the link to a master is a master client, a replica's link a
    // replica, a subscriber a pub/sub client, any other a normal one.
    let (mut subscriber, mut master, mut replica) = (None, None, None);
    for pair in args[2..].chunks(2) {
        let [filter, value] = pair else { return Err(CmdError::Syntax) };
        let text = String::from_utf8_lossy(value).into_owned();
        match () {
            _ if eq(filter, "id") => {
                let n = int(value).map_err(|_| err("ERR client-id should be greater than 0"))?;
                if n <= 0 {
                    return Err(err("ERR client-id should be greater than 0"));
                }
                id = Some(n as u64);
            }
            _ if eq(filter, "addr") => addr = Some(text),
            _ if eq(filter, "laddr") => laddr = Some(text),
            _ if eq(filter, "skipme") && eq(value, "yes") => skip_me = true,
            _ if eq(filter, "skipme") && eq(value, "no") => skip_me = false,
            _ if eq(filter, "type") && eq(value, "normal") => {
                (subscriber, master, replica) = (Some(false), Some(false), Some(false))
            }
            _ if eq(filter, "type") && eq(value, "pubsub") => subscriber = Some(true),
            _ if eq(filter, "type") && eq(value, "master") => master = Some(true),
            _ if eq(filter, "type") && ["replica", "slave"].iter().any(|t| eq(value, t)) => replica = Some(true),
            _ if eq(filter, "type") => return Err(err(format!("ERR Unknown client type '{text}'"))),
            _ if eq(filter, "user") && text == "default" => {}
            _ if eq(filter, "user") => return Err(err(format!("ERR No such user '{text}'"))),
            _ => return Err(CmdError::Syntax),
        }
    }
    let mut killed = 0;
    for client in clients {
        let chosen = id.is_none_or(|id| client.id == id)
            && addr.as_ref().is_none_or(|a| client.addr.to_string() == *a)
            && laddr.as_ref().is_none_or(|a| client.local.to_string() == *a)
            && subscriber.is_none_or(|subscriber| client.is_subscriber() == subscriber)
            && master.is_none_or(|master| client.master.load(Ordering::Relaxed) == master)
            && replica.is_none_or(|replica| client.replica.load(Ordering::Relaxed) == replica)
            && !(skip_me && client.id == me);
        if chosen {
            kill(ctx, &client);
            killed += 1;
        }
    }
    ctx.out.int(killed);
    Ok(())
}

/// Closes `client`; the caller itself once this reply is sent, as Redis
/// does (a killed connection sends nothing more).
fn kill(ctx: &mut Ctx<'_>, client: &crate::conn::ClientInfo) {
    if client.id == ctx.conn.info.id {
        ctx.conn.close = true;
    } else {
        client.kill();
    }
}

/// MEMORY USAGE key [SAMPLES count] and MEMORY HELP. A key's usage is its
/// entry in the log (header, key, type byte, value, expiry time) plus its
/// share of the index: an estimate, as Redis's is.
pub fn memory(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match sub.as_str() {
        "usage" if args.len() >= 3 => {
            // Redis's default: 5 elements of a collection are sampled, 0
            // means all of them.
            let mut samples = 5usize;
            let mut i = 3;
            while i < args.len() {
                if eq(&args[i], "samples") && i + 1 < args.len() {
                    let n = int(&args[i + 1])?;
                    if n < 0 {
                        return Err(CmdError::Syntax);
                    }
                    samples = if n == 0 { usize::MAX } else { n as usize };
                    i += 2;
                } else {
                    return Err(CmdError::Syntax);
                }
            }
            let Some(value) = ctx.read(&args[2])? else {
                ctx.out.null();
                return Ok(());
            };
            let in_log = |key: usize, value: usize, expiry: bool| {
                let entry = ENTRY_HEADER_BYTES + key + 1 + value + if expiry { EXPIRY_BYTES } else { 0 };
                entry.div_ceil(FRAME_ALIGN_BYTES) * FRAME_ALIGN_BYTES
            };
            let index = ctx.shared.index_bytes_per_key().round() as usize;
            let mut bytes = in_log(args[2].len(), value.data().len(), value.expiry_ms().is_some()) + index;
            if crate::keyspace::is_table(value.tag()) {
                // A table's entries, estimated from the first `samples` of
                // them as Redis estimates a collection from a sample.
                let table = super::table::Table::of(&value)?;
                drop(value);
                let sample = super::table::entries(ctx, &table, None, samples)?;
                if !sample.is_empty() {
                    let prefix = super::table::members_prefix(table.id).len();
                    let sampled: usize =
                        sample.iter().map(|(f, v)| in_log(prefix + f.len(), v.len(), false) + index).sum();
                    bytes += sampled * table.count as usize / sample.len();
                }
            }
            ctx.out.int(bytes as i64);
        }
        "help" if args.len() == 2 => {
            let lines = [
                "MEMORY <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "DOCTOR",
                "    Return memory problems reports.",
                "MALLOC-STATS",
                "    Return internal statistics report from the memory allocator (mimalloc).",
                "PURGE",
                "    Return the allocator's free pages to the system.",
                "STATS",
                "    Return information about the memory usage of the server.",
                "USAGE <key> [SAMPLES <count>]",
                "    Return the bytes the key takes: its entries in the log and their share of the index",
                "    (a big collection's estimated from <count> of its elements, 5 by default, 0 for all).",
                "HELP",
                "    Print this help.",
            ];
            ctx.out.help(&lines);
        }
        "stats" if args.len() == 2 => memory_stats(ctx),
        "doctor" if args.len() == 2 => ctx.out.verbatim(&crate::memory::doctor(ctx.shared)),
        "malloc-stats" if args.len() == 2 => ctx.out.verbatim(&malloc_stats()),
        "purge" if args.len() == 2 => {
            // SAFETY: mi_collect takes no pointers; with force it frees
            // what every thread's heap holds unused.
            unsafe { libmimalloc_sys::mi_collect(true) };
            ctx.out.ok();
        }
        "usage" | "help" | "stats" | "doctor" | "malloc-stats" | "purge" => {
            return Err(subcommand_arity("memory", &sub))
        }
        _ => return Err(unknown_subcommand("memory", &args[1])),
    }
    Ok(())
}

pub fn dbsize(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    let mut keys = ctx.shared.user_keys() as i64;
    // Inside a transaction or a script: with the keys it made or deleted.
    for (key, holds) in ctx.writes.pending_user_keys(std::ops::Bound::Unbounded) {
        let in_engine = ctx.shared.db.get_pinned(&key)?.is_some();
        keys += i64::from(holds.is_some() && !in_engine) - i64::from(holds.is_none() && in_engine);
    }
    ctx.out.int(keys);
    Ok(())
}

pub fn flushall(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    match args.len() {
        1 => {}
        2 if eq(&args[1], "sync") || eq(&args[1], "async") => {}
        _ => return Err(CmdError::Syntax),
    }
    clear_all(ctx.shared, ctx.writes)?;
    ctx.out.ok();
    Ok(())
}

/// Deletes every key into `writes` (FLUSHALL, memcached's flush_all), its
/// caller holding every key's lock: one atomic batch when it fits (the
/// usual case); a huge database is cleared in several batches, each
/// durable before the next. Everything but the server's settings (the
/// format marker, the memcached CAS epoch, the function libraries, which
/// Redis's FLUSHALL keeps too): its other entries go with the keys they
/// belong to.
pub fn clear_all(shared: &Shared, writes: &mut crate::keyspace::Writes) -> Result<(), super::CommitError> {
    let db = &shared.db;
    // What a transaction or a script wrote before the flush is not in the
    // engine yet (it was kept), and what it deleted is gone already.
    let pending = writes.pending_keys();
    writes.note_all_deleted();
    let mut keys: Vec<Vec<u8>> = db.iter().map(|item| item.map(|(k, _)| k)).collect::<Result<_, _>>()?;
    keys.retain(|key| pending.get(key) != Some(&false));
    keys.extend(pending.into_iter().filter_map(|(key, holds)| holds.then_some(key)));
    keys.sort_unstable();
    keys.dedup();
    let keys = keys.into_iter().filter(|key| !key.starts_with(crate::keyspace::SETTINGS));
    // A big flush goes in several batches, unless earlier commands' writes
    // (read back by offset in the batch) must commit with it, atomically.
    let in_pieces = !writes.has_overlay();
    let mut bytes = 0;
    for key in keys {
        bytes += key.len() + 32;
        if in_pieces && bytes > MAX_BATCH_BYTES / 2 {
            let batch = std::mem::replace(&mut writes.batch, WriteBatch::new());
            let _admitted = shared.replication.gate.admit(writes.writer)?;
            db.write(batch)?;
            bytes = key.len() + 32;
        }
        if crate::keyspace::is_reserved(&key) {
            writes.note_reserved(-1);
        }
        writes.delete(&key);
    }
    // Clients that cache keys are told once the flush is durable.
    writes.note_event(crate::notify::FLUSHED, "flush", b"", 0);
    Ok(())
}

pub fn time(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    ctx.out.array(2);
    ctx.out.bulk(now.as_secs().to_string().as_bytes());
    ctx.out.bulk(now.subsec_micros().to_string().as_bytes());
    Ok(())
}

/// ROLE: a replica's master, link state and offset (`crate::replica`); a
/// master with no replicas (ScaledKV serves none), as a Redis master that
/// never had one answers: its offset 0.
pub fn role(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    if let Some((master, state, offset)) = ctx.shared.replication.role() {
        ctx.out.array(5);
        ctx.out.bulk(b"slave");
        ctx.out.bulk(master.host.as_bytes());
        ctx.out.int(master.port as i64);
        ctx.out.bulk(state.as_bytes());
        ctx.out.int(offset.max(0));
        return Ok(());
    }
    let (offset, replicas) = ctx.shared.master.role();
    ctx.out.array(3);
    ctx.out.bulk(b"master");
    ctx.out.int(offset as i64);
    ctx.out.array(replicas.len());
    for (ip, port, acked) in replicas {
        ctx.out.array(3);
        ctx.out.bulk(ip.as_bytes());
        ctx.out.bulk(port.to_string().as_bytes());
        ctx.out.bulk(acked.to_string().as_bytes());
    }
    Ok(())
}

pub fn shutdown(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let graceful = &ctx.shared.graceful;
    if let Some(aborts) = ctx.conn.shutdown_wait {
        // Looking again while it waits (`conn::wait_blocked`).
        if *ctx.shared.shutdown.borrow() {
            ctx.conn.close = true;
            return Ok(());
        }
        if graceful.aborts() == aborts {
            return Err(CmdError::Blocked(None, false));
        }
        ctx.conn.shutdown_wait = None;
        return Err(err("ERR Errors trying to SHUTDOWN. Check logs."));
    }
    for arg in &args[1..] {
        if !["nosave", "save", "now", "force", "abort"].iter().any(|w| eq(arg, w)) {
            return Err(CmdError::Syntax);
        }
        if eq(arg, "abort") {
            if !ctx.shared.graceful.abort() {
                return Err(err("ERR No shutdown in progress."));
            }
            ctx.out.ok();
            return Ok(());
        }
    }
    // SAVE: the RDB file first, as Redis writes it (its save points are
    // never set here, so without SAVE none is written).
    if args[1..].iter().any(|arg| eq(arg, "save")) && !args[1..].iter().any(|arg| eq(arg, "nosave")) {
        if let Err(error) = ctx.shared.saves.now(ctx.shared) {
            tracing::error!(%error, "SHUTDOWN SAVE: the RDB file was not written; not shutting down");
            return Err(err("ERR Errors trying to SHUTDOWN. Check logs."));
        }
    }
    tracing::info!(client = ctx.conn.info.id, "SHUTDOWN requested");
    if args[1..].iter().any(|arg| eq(arg, "now")) {
        ctx.shared.request_shutdown();
        // Redis closes the connection without a reply when it shuts down.
        ctx.conn.close = true;
        return Ok(());
    }
    // Once the replicas caught up (`crate::shutdown`); the client waits
    // for the end, or for an abort's error.
    ctx.conn.shutdown_wait = Some(graceful.aborts());
    graceful.request(ctx.shared);
    Err(CmdError::Blocked(None, false))
}

/// SAVE and BGSAVE: an index checkpoint (every write is already durable;
/// the next start replays nothing), then the data set as an RDB file
/// (`crate::rdb_save`). SAVE writes it before it replies, holding this
/// thread's clients meanwhile, as Redis's SAVE holds all of them.
pub fn save(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if !eq(&args[0], "bgsave") {
        ctx.shared.saves.now(ctx.shared).map_err(|error| err(format!("ERR {error}")))?;
        ctx.out.ok();
        return Ok(());
    }
    let schedule = match args.get(1) {
        None => false,
        Some(word) if args.len() == 2 && eq(word, "schedule") => true,
        Some(_) => return Err(CmdError::Syntax),
    };
    ctx.out.simple(ctx.shared.saves.background(schedule).map_err(err)?);
    Ok(())
}

pub fn lastsave(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    ctx.out.int(ctx.shared.last_save.load(Ordering::Relaxed) as i64);
    Ok(())
}

/// WAIT numreplicas timeout: blocks until that many replicas have
/// acknowledged (committed, for a ScaledKV replica) every write visible
/// when it began, or the timeout (ms, 0: none) ends; answers how many
/// did. Without replicas it answers 0 at once, where Redis would block
/// for the timeout first (forever for 0): every write a client has seen
/// acknowledged is already durable on this server.
pub fn wait(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let wanted = int(&args[1])?;
    let timeout =
        super::args::parse_i64(&args[2]).ok_or_else(|| err("ERR timeout is not an integer or out of range"))?;
    if timeout < 0 {
        return Err(err("ERR timeout is negative"));
    }
    if ctx.shared.replication.following() {
        return Err(err(
            "ERR WAIT cannot be used with replica instances. Please also note that since Redis 4.0 if a replica is \
             configured to be writable (which is not the default) writes to replicas are just local and are not \
             propagated.",
        ));
    }
    let master = &ctx.shared.master;
    if master.replicas() == 0 {
        ctx.conn.wait_for = None;
        ctx.out.int(0);
        return Ok(());
    }
    let starting = ctx.conn.wait_for.is_none();
    let (seq, wanted, deadline) = *ctx.conn.wait_for.get_or_insert_with(|| {
        let deadline =
            (timeout > 0).then(|| std::time::Instant::now() + std::time::Duration::from_millis(timeout as u64));
        (ctx.shared.db.snapshot().seq(), wanted.max(0) as usize, deadline)
    });
    let acked = master.offset_covering(seq).map_or(0, |offset| master.acked(offset));
    if acked >= wanted || deadline.is_some_and(|d| std::time::Instant::now() >= d) || ctx.conn.multi.is_some() {
        ctx.conn.wait_for = None;
        master.stop_waking(ctx.conn.info.id);
        ctx.out.int(acked as i64);
        return Ok(());
    }
    master.wake_on_ack(&ctx.conn.info);
    // Once per WAIT, as Redis: each GETACK moves the stream's end, which
    // a replica promoted before it arrives lacks (a partial resync of
    // the old master needs the very same end).
    if starting {
        master.ask_for_acks();
    }
    Err(super::CmdError::Blocked(None, false))
}

/// The INFO text for `sections` (empty: the default set).
pub fn info_text(ctx: &Ctx<'_>, sections: &[String]) -> String {
    let shared = ctx.shared;
    let all = sections.iter().any(|s| s == "all" || s == "everything");
    let wanted = |name: &str| {
        all || (sections.is_empty() || sections.iter().any(|s| s == "default")) || sections.iter().any(|s| s == name)
    };
    let stats = shared.db.stats();
    let s = &shared.stats;
    let mut text = String::new();
    let uptime = shared.started.elapsed().as_secs();
    let config = &shared.config;
    if wanted("server") {
        let _ = write!(
            text,
            "# Server\r\nredis_version:{REDIS_VERSION}\r\nscaledkv_version:{}\r\nredis_mode:standalone\r\n\
             os:{} {}\r\narch_bits:64\r\nmultiplexing_api:epoll\r\nprocess_id:{}\r\nrun_id:{}\r\ntcp_port:{}\r\nmemcached_port:{}\r\n\
             uptime_in_seconds:{uptime}\r\nuptime_in_days:{}\r\nexecutable:{}\r\nconfig_file:{}\r\n\r\n",
            env!("CARGO_PKG_VERSION"),
            std::env::consts::OS,
            std::env::consts::ARCH,
            std::process::id(),
            shared.run_id,
            shared.port.load(Ordering::Relaxed),
            shared.memcached.port.load(Ordering::Relaxed),
            uptime / 86400,
            std::env::current_exe().map(|p| p.display().to_string()).unwrap_or_default(),
            config.config_file.as_ref().map(|p| p.display().to_string()).unwrap_or_default(),
        );
    }
    if wanted("clients") {
        let _ = write!(
            text,
            "# Clients\r\nconnected_clients:{}\r\nmaxclients:{}\r\nblocked_clients:{}\r\ntracking_clients:{}\r\n\r\n",
            shared.clients.lock().len(),
            shared.maxclients(),
            shared.waiters.blocked_clients(),
            shared.tracking.clients(),
        );
    }
    if wanted("memory") {
        use crate::memory::human;
        let overhead = crate::memory::Overhead::of(shared, &stats);
        let scripts = shared.scripts.sizes();
        let libraries = shared.functions.current();
        let maxmemory = config.memory.maxmemory();
        let system = crate::memory::total_system_memory();
        let _ = write!(
            text,
            "# Memory\r\nused_memory:{used}\r\nused_memory_human:{}\r\nused_memory_rss:{used}\r\n\
             used_memory_rss_human:{}\r\nused_memory_peak:{peak}\r\nused_memory_peak_human:{}\r\n\
             used_memory_peak_perc:{:.2}%\r\nused_memory_overhead:{}\r\nused_memory_startup:{}\r\n\
             used_memory_dataset:{}\r\nused_memory_dataset_perc:{:.2}%\r\ntotal_system_memory:{system}\r\n\
             total_system_memory_human:{}\r\nused_memory_index:{}\r\nused_memory_index_points:{}\r\n\
             used_memory_index_pending:{}\r\nindex_bytes_per_key:{:.1}\r\nused_memory_lfu:{}\r\nused_memory_log:{}\r\n\
             maxmemory:{maxmemory}\r\nmaxmemory_human:{}\r\nmaxmemory_policy:{}\r\nssd_dir:{}\r\nssd_size:{}\r\n\
             used_ssd_log:{}\r\nmem_fragmentation_ratio:1.00\r\nmem_fragmentation_bytes:0\r\n\
             mem_allocator:mimalloc\r\nnumber_of_cached_scripts:{}\r\nused_memory_scripts:{}\r\n\
             number_of_functions:{}\r\nnumber_of_libraries:{}\r\nused_memory_functions:{}\r\n\r\n",
            human(overhead.used),
            human(overhead.used),
            human(overhead.peak),
            overhead.peak_percentage(),
            overhead.total(),
            overhead.startup,
            overhead.dataset(),
            overhead.dataset_percentage(),
            human(system),
            stats.index_memory_bytes,
            stats.index_point_table_bytes,
            stats.index_pending_bytes,
            stats.index_bytes_per_key,
            stats.lfu_memory_bytes,
            // The log but for its SSD tier: what maxmemory bounds.
            stats.log_bytes - stats.ssd_tier_bytes,
            human(maxmemory),
            config.memory.policy(),
            config.ssd_dir.as_ref().map(|dir| dir.display().to_string()).unwrap_or_default(),
            config.memory.ssd_size().unwrap_or(0),
            stats.ssd_tier_bytes,
            scripts.0,
            scripts.1,
            libraries.function_count(),
            libraries.len(),
            overhead.functions,
            used = overhead.used,
            peak = overhead.peak,
        );
    }
    if wanted("persistence") {
        let durable = config.durability != Durability::Buffered;
        let _ = write!(
            text,
            "# Persistence\r\nloading:{}\r\ndurability:{}\r\naof_enabled:{}\r\n\
             rdb_last_save_time:{}\r\nlog_bytes:{}\r\nlive_bytes:{}\r\ndisk_bytes:{}\r\nsegments:{}\r\n\
             segments_freed:{}\r\nsegments_recycled:{}\r\nlog_roll_waits:{}\r\nlog_roll_wait_micros:{}\r\nwrite_amplification:{:.3}\r\nspace_amplification:{:.3}\r\ngc_runs:{}\r\n\
             gc_stalled_writes:{}\r\ngc_stall_micros:{}\r\ncheckpoints:{}\r\ndelta_checkpoints:{}\r\ncheckpoint_bytes_written:{}\r\n\
             commit_groups:{}\r\ncommitted_writes:{}\r\nearly_lock_releases:{}\r\ntables_written_ahead:{}\r\nreserved_entries:{}\r\n{}\r\n",
            // A replica's full sync loading the master's data set.
            u8::from(shared.replication.loading.load(Ordering::Relaxed)),
            config.durability,
            durable as u8,
            shared.last_save.load(Ordering::Relaxed),
            stats.log_bytes,
            stats.live_bytes,
            stats.disk_bytes,
            stats.segments,
            stats.segments_freed,
            stats.segments_recycled,
            stats.roll_waits,
            stats.roll_wait_micros,
            stats.write_amplification,
            stats.space_amplification,
            stats.gc_runs,
            stats.gc_stalled_writes,
            stats.gc_stall_micros,
            stats.checkpoints,
            stats.delta_checkpoints,
            stats.checkpoint_bytes_written,
            stats.commit_groups,
            stats.committed_requests,
            s.early_lock_releases.load(Ordering::Relaxed),
            s.tables_written_ahead.load(Ordering::Relaxed),
            shared.reserved_entries.load(Ordering::Relaxed),
            shared.saves.info(stats.last_seq),
        );
    }
    if wanted("stats") {
        let (tracking_keys, tracking_items, tracking_prefixes) = shared.tracking.counts();
        let rates = shared.rates.per_second();
        let _ = write!(
            text,
            "# Stats\r\ntotal_connections_received:{}\r\ntotal_commands_processed:{}\r\ninstantaneous_ops_per_sec:{}\r\n\
             total_net_input_bytes:{}\r\ntotal_net_output_bytes:{}\r\ninstantaneous_input_kbps:{:.2}\r\n\
             instantaneous_output_kbps:{:.2}\r\nrejected_connections:{}\r\n\
             expired_keys:{}\r\nevicted_keys:{}\r\nevicted_bytes:{}\r\nevict_second_chances:{}\r\n\
             evict_stalled_writes:{}\r\nssd_demoted_segments:{}\r\nssd_demoted_bytes:{}\r\nssd_reads:{}\r\n\
             keyspace_hits:{}\r\nkeyspace_misses:{}\r\npubsub_channels:{}\r\n\
             pubsub_patterns:{}\r\npubsubshard_channels:{}\r\nmigrate_cached_sockets:{}\r\n\
             tracking_total_keys:{}\r\ntracking_total_items:{}\r\n\
             tracking_total_prefixes:{}\r\ntotal_error_replies:{}\r\nscript_reruns_with_every_lock:{}\r\n\
             sync_full:{}\r\nsync_partial_ok:{}\r\nsync_partial_err:{}\r\n\r\n",
            s.connections_received.load(Ordering::Relaxed),
            s.commands.load(Ordering::Relaxed),
            rates.commands,
            s.net_input_bytes.load(Ordering::Relaxed),
            s.net_output_bytes.load(Ordering::Relaxed),
            rates.input_bytes as f64 / 1024.0,
            rates.output_bytes as f64 / 1024.0,
            s.rejected_connections.load(Ordering::Relaxed),
            s.expired_keys.load(Ordering::Relaxed),
            stats.evicted_keys,
            stats.evicted_bytes,
            stats.second_chances,
            stats.evict_stalled_writes,
            stats.demoted_segments,
            stats.demoted_bytes,
            stats.ssd_tier_reads,
            s.keyspace_hits.load(Ordering::Relaxed),
            s.keyspace_misses.load(Ordering::Relaxed),
            shared.pubsub.count(crate::pubsub::Class::Channel),
            shared.pubsub.count(crate::pubsub::Class::Pattern),
            shared.pubsub.count(crate::pubsub::Class::Shard),
            shared.migrate.len(),
            tracking_keys,
            tracking_items,
            tracking_prefixes,
            crate::commandstats::total_errors(),
            s.script_reruns.load(Ordering::Relaxed),
            shared.master.syncs[0].load(Ordering::Relaxed),
            shared.master.syncs[1].load(Ordering::Relaxed),
            shared.master.syncs[2].load(Ordering::Relaxed),
        );
    }
    if wanted("replication") {
        let phase = shared.failover.phase();
        let info = match shared.replication.following() {
            true => shared.replication.info(&shared.master.info(phase, true)),
            false => format!("role:master\r\n{}", shared.master.info(phase, false)),
        };
        let _ = write!(text, "# Replication\r\n{info}\r\n");
    }
    if wanted("cpu") {
        let (user, system) = cpu_seconds();
        let _ = write!(text, "# CPU\r\nused_cpu_sys:{system:.6}\r\nused_cpu_user:{user:.6}\r\n\r\n");
    }
    // Not among the default sections, as in Redis.
    if all || sections.iter().any(|s| s == "commandstats") {
        text.push_str("# Commandstats\r\n");
        for (index, [calls, micros, rejected, failed]) in crate::commandstats::commands() {
            let Some(command) = super::by_index(index) else { continue };
            let per_call = if calls > 0 { micros as f64 / calls as f64 } else { 0.0 };
            let _ = write!(
                text,
                "cmdstat_{}:calls={calls},usec={micros},usec_per_call={per_call:.2},rejected_calls={rejected},\
                 failed_calls={failed}\r\n",
                command.name
            );
        }
        text.push_str("\r\n");
    }
    if wanted("errorstats") {
        text.push_str("# Errorstats\r\n");
        for (code, count) in crate::commandstats::errors() {
            let _ = write!(text, "errorstat_{code}:count={count}\r\n");
        }
        text.push_str("\r\n");
    }
    if all || sections.iter().any(|s| s == "latencystats") {
        text.push_str("# Latencystats\r\n");
        let percentiles = crate::commandstats::percentiles();
        for (index, counts) in crate::commandstats::commands() {
            let (Some(command), Some(histogram)) = (super::by_index(index), crate::commandstats::histogram(index))
            else {
                continue;
            };
            if counts[0] == 0 {
                continue;
            }
            let at = |p: f64| crate::histogram::percentile(&histogram, p) as f64 / 1000.0;
            let values: Vec<String> = percentiles
                .iter()
                .map(|&p| format!("p{}={:.3}", crate::commandstats::percentile_text(p), at(p)))
                .collect();
            let _ = write!(text, "latency_percentiles_usec_{}:{}\r\n", command.name, values.join(","));
        }
        text.push_str("\r\n");
    }
    if wanted("cluster") {
        text.push_str("# Cluster\r\ncluster_enabled:0\r\n\r\n");
    }
    if wanted("keyspace") {
        text.push_str("# Keyspace\r\n");
        let keys = shared.user_keys();
        if keys > 0 {
            // Until the first pass over the keys ends, the expiring ones
            // are not all known: 0, as before.
            let (expires, avg_ttl) = shared.volatile.summary(scaledkv::now_ms()).unwrap_or((0, 0));
            let _ = write!(text, "db0:keys={keys},expires={expires},avg_ttl={avg_ttl}\r\n");
        }
        text.push_str("\r\n");
    }
    text.truncate(text.trim_end().len());
    text.push_str("\r\n");
    text
}

pub fn info(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sections: Vec<String> = args[1..].iter().map(|a| String::from_utf8_lossy(a).to_ascii_lowercase()).collect();
    let text = info_text(ctx, &sections);
    ctx.out.verbatim(&text);
    Ok(())
}

/// Resident memory from /proc (the process's real footprint).
/// MEMORY STATS, with Redis's fields in Redis's order: what ScaledKV has
/// no part for (replication, cluster links, the AOF buffer) is 0, and so
/// are client buffers (not counted, as CLIENT LIST's `qbuf` and `omem`)
/// and the allocator's own figures (as Redis reports them without jemalloc).
fn memory_stats(ctx: &mut Ctx<'_>) {
    let overhead = crate::memory::Overhead::of(ctx.shared, &ctx.shared.db.stats());
    let out = &mut *ctx.out;
    let numbers = [
        ("peak.allocated", overhead.peak),
        ("total.allocated", overhead.used),
        ("startup.allocated", overhead.startup),
        ("replication.backlog", 0),
        ("clients.slaves", 0),
        ("clients.normal", 0),
        ("cluster.links", 0),
        ("aof.buffer", 0),
        ("lua.caches", overhead.scripts),
        ("functions.caches", overhead.functions),
    ];
    let has_keys = overhead.keys > 0;
    out.map(27 + has_keys as usize);
    for (name, value) in numbers {
        out.bulk(name.as_bytes());
        out.int(value as i64);
    }
    if has_keys {
        out.bulk(b"db.0");
        out.map(3);
        let tables = [
            ("overhead.hashtable.main", overhead.index),
            ("overhead.hashtable.expires", 0),
            ("overhead.hashtable.slot-to-keys", 0),
        ];
        for (name, value) in tables {
            out.bulk(name.as_bytes());
            out.int(value as i64);
        }
    }
    for (name, value) in [
        ("overhead.total", overhead.total()),
        ("keys.count", overhead.keys),
        ("keys.bytes-per-key", overhead.bytes_per_key()),
        ("dataset.bytes", overhead.dataset()),
    ] {
        out.bulk(name.as_bytes());
        out.int(value as i64);
    }
    out.bulk(b"dataset.percentage");
    out.double(overhead.dataset_percentage());
    out.bulk(b"peak.percentage");
    out.double(overhead.peak_percentage());
    for name in ["allocator.allocated", "allocator.active", "allocator.resident"] {
        out.bulk(name.as_bytes());
        out.int(0);
    }
    for (ratio, bytes) in [
        ("allocator-fragmentation.ratio", "allocator-fragmentation.bytes"),
        ("allocator-rss.ratio", "allocator-rss.bytes"),
        ("rss-overhead.ratio", "rss-overhead.bytes"),
        ("fragmentation", "fragmentation.bytes"),
    ] {
        out.bulk(ratio.as_bytes());
        out.double(1.0);
        out.bulk(bytes.as_bytes());
        out.int(0);
    }
}

/// mimalloc's statistics report, as it prints it.
fn malloc_stats() -> String {
    unsafe extern "C" fn collect(message: *const std::ffi::c_char, text: *mut std::ffi::c_void) {
        // SAFETY: mimalloc passes a NUL-terminated message and the `text`
        // pointer given below, a live &mut String.
        let (message, text) = unsafe { (std::ffi::CStr::from_ptr(message), &mut *(text as *mut String)) };
        text.push_str(&message.to_string_lossy());
    }
    let mut text = String::new();
    // SAFETY: `collect` matches mimalloc's output function and only uses
    // `text` while this call runs.
    unsafe { libmimalloc_sys::mi_stats_print_out(Some(collect), &mut text as *mut String as *mut std::ffi::c_void) };
    text
}

/// User and system CPU seconds of this process.
pub fn cpu_seconds() -> (f64, f64) {
    // SAFETY: getrusage only writes the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(usage.ru_utime), secs(usage.ru_stime))
}

/// CONFIG GET/SET parameters: name, current value. Those ScaledKV
/// implements, then the rest of Redis's (`crate::redis_configs`).
fn parameters(shared: &Shared) -> Vec<(&'static str, String)> {
    let mut params = own_parameters(shared);
    let others: Vec<_> = crate::redis_configs::TABLE
        .iter()
        .filter(|param| !params.iter().any(|(own, _)| *own == param.name))
        .map(|param| (param.name.as_str(), shared.redis_params.get(param)))
        .collect();
    params.extend(others);
    params
}

/// The parameters ScaledKV implements: name, current value.
fn own_parameters(shared: &Shared) -> Vec<(&'static str, String)> {
    let config = &shared.config;
    let dir = std::fs::canonicalize(&config.dir).unwrap_or_else(|_| config.dir.clone());
    let durable = config.durability != Durability::Buffered;
    vec![
        ("bind", config.bind.clone()),
        ("port", shared.port.load(Ordering::Relaxed).to_string()),
        ("dir", dir.display().to_string()),
        ("durability", config.durability.to_string()),
        ("requirepass", shared.password().unwrap_or_default()),
        // The password and user REPLICAOF's link authenticates with.
        ("masterauth", shared.replication.masterauth.lock().clone().unwrap_or_default()),
        ("masteruser", shared.replication.masteruser.lock().clone().unwrap_or_default()),
        ("replica-read-only", "yes".into()),
        ("slave-read-only", "yes".into()),
        ("protected-mode", if shared.protected_mode.load(Ordering::Relaxed) { "yes" } else { "no" }.into()),
        ("replica-priority", shared.replication.priority.load(Ordering::Relaxed).to_string()),
        ("slave-priority", shared.replication.priority.load(Ordering::Relaxed).to_string()),
        ("repl-backlog-size", shared.master.backlog_bytes.load(Ordering::Relaxed).to_string()),
        ("shutdown-timeout", shared.graceful.timeout_secs.load(Ordering::Relaxed).to_string()),
        ("maxclients", shared.maxclients().to_string()),
        ("timeout", shared.timeout_secs().to_string()),
        ("proto-max-bulk-len", shared.max_bulk_bytes().to_string()),
        ("gc-space-amp", config.gc_space_amp.to_string()),
        ("io-threads", config.io_threads().to_string()),
        // What a Redis client asks to learn what a write survives: every
        // write is on the medium before its reply unless `buffered`.
        ("appendonly", if durable { "yes" } else { "no" }.into()),
        ("appendfsync", if durable { "always" } else { "no" }.into()),
        ("save", String::new()),
        ("dbfilename", shared.saves.dbfilename.lock().clone()),
        ("databases", "1".into()),
        ("maxmemory", config.memory.maxmemory().to_string()),
        ("maxmemory-policy", config.memory.policy().into()),
        ("lfu-log-factor", config.memory.lfu_settings().log_factor.to_string()),
        ("lfu-decay-time", config.memory.lfu_settings().decay_minutes.to_string()),
        ("notify-keyspace-events", crate::notify::format(shared.notify_flags.load(Ordering::Relaxed))),
        // How long a script runs before SCRIPT KILL may stop it; Redis's
        // older name for it too.
        ("busy-reply-threshold", shared.scripts.control.busy_millis.load(Ordering::Relaxed).to_string()),
        ("lua-time-limit", shared.scripts.control.busy_millis.load(Ordering::Relaxed).to_string()),
        ("script-memory-limit", shared.scripts.control.memory_limit.load(Ordering::Relaxed).to_string()),
        ("slowlog-log-slower-than", shared.slowlog.slower_than().to_string()),
        ("slowlog-max-len", shared.slowlog.max_len().to_string()),
        ("latency-monitor-threshold", shared.latency.threshold().to_string()),
        ("loglevel", crate::loglevel::current().into()),
        ("logfile", path_text(&config.logfile)),
        ("pidfile", path_text(&config.pidfile)),
        ("daemonize", if config.daemonize { "yes" } else { "no" }.into()),
        ("unixsocket", path_text(&config.unixsocket)),
        ("unixsocketperm", format!("{:o}", config.unixsocketperm)),
        ("latency-tracking", if crate::commandstats::tracking() { "yes" } else { "no" }.into()),
        ("latency-tracking-info-percentiles", {
            let percentiles = crate::commandstats::percentiles();
            percentiles.iter().map(|&p| crate::commandstats::percentile_text(p)).collect::<Vec<_>>().join(" ")
        }),
        ("acllog-max-len", shared.acl_log.max_len().to_string()),
        ("min-replicas-to-write", shared.master.min_replicas_to_write.load(Ordering::Relaxed).to_string()),
        ("min-slaves-to-write", shared.master.min_replicas_to_write.load(Ordering::Relaxed).to_string()),
        ("min-replicas-max-lag", shared.master.min_replicas_max_lag.load(Ordering::Relaxed).to_string()),
        ("min-slaves-max-lag", shared.master.min_replicas_max_lag.load(Ordering::Relaxed).to_string()),
        // DUMP's LZF compression of strings past 20 bytes.
        ("rdbcompression", if super::dump::compression() { "yes" } else { "no" }.into()),
        ("tracking-table-max-keys", shared.tracking.max_keys.load(Ordering::Relaxed).to_string()),
        ("client-output-buffer-limit", output_limits()),
    ]
}

/// A path setting as CONFIG GET gives it ("" when unset).
fn path_text(path: &Option<std::path::PathBuf>) -> String {
    path.as_ref().map(|path| path.display().to_string()).unwrap_or_default()
}

/// `client-output-buffer-limit` as Redis gives it: each class's hard and
/// soft limits in bytes and the soft limit's seconds.
fn output_limits() -> String {
    format_output_limits(crate::pubsub::REPLICA_LIMIT.get(), crate::pubsub::PUBSUB_LIMIT.get())
}

fn format_output_limits(replica: (usize, usize, u64), pubsub: (usize, usize, u64)) -> String {
    let class = |name: &str, (hard, soft, secs): (usize, usize, u64)| format!("{name} {hard} {soft} {secs}");
    [class("normal", (0, 0, 0)), class("slave", replica), class("pubsub", pubsub)].join(" ")
}

/// What CONFIG REWRITE writes: every setting the config file holds that
/// CONFIG SET or REPLICAOF changes while the server runs, with its value
/// now (CONFIG GET's text) and its default.
fn rewritten(shared: &Shared) -> Vec<Rewritten> {
    use crate::config::Kind::{Integer, Text};
    let now = own_parameters(shared);
    let defaults = crate::config::Config::default();
    let lfu = scaledkv::Lfu::default();
    let default_limits = format_output_limits(crate::pubsub::REPLICA_DEFAULT, crate::pubsub::PUBSUB_DEFAULT);
    let replicaof = shared.replication.master().map(|master| format!("{} {}", master.host, master.port));
    // Empty is unset.
    let unset = |text: String| Some(text).filter(|text| !text.is_empty());
    let mut settings = vec![Rewritten { key: "replicaof", kind: Text, now: replicaof, default: None }];
    for (key, kind, default) in [
        // Empty is unset for these three.
        ("requirepass", Text, String::new()),
        ("masterauth", Text, String::new()),
        ("masteruser", Text, String::new()),
        ("maxclients", Integer, defaults.maxclients.to_string()),
        ("timeout", Integer, defaults.timeout_secs.to_string()),
        ("proto-max-bulk-len", Integer, defaults.max_bulk_bytes.to_string()),
        ("notify-keyspace-events", Text, String::new()),
        ("client-output-buffer-limit", Text, default_limits),
        ("maxmemory", Text, "0".into()),
        ("maxmemory-policy", Text, "noeviction".into()),
        ("busy-reply-threshold", Integer, defaults.busy_reply_threshold_ms.to_string()),
        ("script-memory-limit", Text, defaults.script_memory_limit.to_string()),
        ("slowlog-log-slower-than", Integer, defaults.slowlog_log_slower_than.to_string()),
        ("slowlog-max-len", Integer, defaults.slowlog_max_len.to_string()),
        ("latency-monitor-threshold", Integer, defaults.latency_monitor_threshold.to_string()),
        ("loglevel", Text, crate::loglevel::DEFAULT.into()),
        ("repl-backlog-size", Text, crate::master::DEFAULT_BACKLOG_BYTES.to_string()),
        ("tracking-table-max-keys", Integer, crate::tracking::DEFAULT_MAX_KEYS.to_string()),
        ("latency-tracking", Text, "yes".into()),
        ("latency-tracking-info-percentiles", Text, "50 99 99.9".into()),
        ("acllog-max-len", Integer, crate::commands::acl::LOG_MAX.to_string()),
        ("min-replicas-to-write", Integer, "0".into()),
        ("min-replicas-max-lag", Integer, "10".into()),
        ("rdbcompression", Text, "yes".into()),
        ("dbfilename", Text, crate::rdb_save::DEFAULT_DBFILENAME.into()),
        ("lfu-log-factor", Integer, lfu.log_factor.to_string()),
        ("lfu-decay-time", Integer, lfu.decay_minutes.to_string()),
        ("replica-priority", Integer, crate::replica::DEFAULT_PRIORITY.to_string()),
        ("shutdown-timeout", Integer, crate::shutdown::DEFAULT_TIMEOUT_SECS.to_string()),
    ] {
        let value = now.iter().find(|(name, _)| *name == key).map(|(_, value)| value.clone());
        let value = value.unwrap_or_else(|| panic!("`{key}` is not a CONFIG GET parameter"));
        settings.push(Rewritten { key, kind, now: unset(value), default: unset(default) });
    }
    // TLS's, by Redis's names (`crate::tls`), which the TOML file takes too.
    for key in std::iter::once("tls-port").chain(crate::tls::CONTEXT_SETTINGS) {
        let param = crate::redis_configs::find(key).expect("one of Redis's parameters");
        let kind = if matches!(param.kind, crate::redis_configs::Kind::Int { .. }) { Integer } else { Text };
        let (now, default) = (unset(shared.redis_params.get(param)), unset(param.default.clone()));
        settings.push(Rewritten { key, kind, now, default });
    }
    settings
}

/// What CONFIG REWRITE writes to a redis.conf: `rewritten`'s settings,
/// then every one of Redis's parameters ScaledKV keeps without
/// implementing (`crate::redis_configs`; a TOML file has no place for them).
fn rewritten_redis_conf(shared: &Shared) -> Vec<Rewritten> {
    let mut settings = rewritten(shared);
    let own = own_parameters(shared);
    for param in crate::redis_configs::TABLE.iter() {
        let written = settings.iter().any(|setting| setting.key == param.name);
        if param.alias.is_none() && !param.immutable && !written && !own.iter().any(|(name, _)| *name == param.name) {
            let (now, default) = (Some(shared.redis_params.get(param)), Some(param.default.clone()));
            settings.push(Rewritten { key: param.name.as_str(), kind: crate::config::Kind::Text, now, default });
        }
    }
    settings
}

pub fn config(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match sub.as_str() {
        "get" if args.len() >= 3 => {
            let params = parameters(ctx.shared);
            let matched: Vec<_> = params
                .iter()
                .filter(|(name, _)| {
                    args[2..].iter().any(|p| crate::keyspace::glob_match(&p.to_ascii_lowercase(), name.as_bytes()))
                })
                .collect();
            ctx.out.map(matched.len());
            for (name, value) in matched {
                ctx.out.bulk(name.as_bytes());
                ctx.out.bulk(value.as_bytes());
            }
        }
        "set" if args.len() >= 4 && args.len().is_multiple_of(2) => {
            let pairs: Vec<(String, &Bytes)> = args[2..]
                .chunks(2)
                .map(|pair| (String::from_utf8_lossy(&pair[0]).to_ascii_lowercase(), &pair[1]))
                .collect();
            config_set_all(ctx.shared, &pairs)?;
            ctx.out.ok();
        }
        "help" if args.len() == 2 => ctx.out.help(&[
            "CONFIG <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "GET <pattern>",
            "    Return parameters matching the glob-like <pattern> and their values.",
            "SET <directive> <value>",
            "    Set the configuration <directive> to <value>.",
            "RESETSTAT",
            "    Reset statistics reported by the INFO command.",
            "REWRITE",
            "    Rewrite the configuration file.",
            "HELP",
            "    Prints this help.",
        ]),
        "resetstat" if args.len() == 2 => {
            let s = &ctx.shared.stats;
            for counter in [&s.commands, &s.keyspace_hits, &s.keyspace_misses, &s.expired_keys] {
                counter.store(0, Ordering::Relaxed);
            }
            crate::commandstats::reset();
            ctx.out.ok();
        }
        "rewrite" if args.len() == 2 => {
            let Some(path) = &ctx.shared.config.config_file else {
                return Err(err("ERR The server is running without a config file"));
            };
            let written = match ctx.shared.config.redis_conf {
                true => crate::redis_conf::rewrite(path, &rewritten_redis_conf(ctx.shared)),
                false => crate::config::rewrite(path, &rewritten(ctx.shared)),
            };
            written.map_err(|e| err(format!("ERR Rewriting config file: {e}")))?;
            tracing::info!(path = %path.display(), "CONFIG REWRITE executed with success");
            ctx.out.ok();
        }
        "get" | "set" | "resetstat" | "rewrite" | "help" => return Err(subcommand_arity("config", &sub)),
        _ => return Err(unknown_subcommand("config", &args[1])),
    }
    Ok(())
}

/// CONFIG SET of several parameters, all or none as in Redis 7: an
/// unknown name or one given twice (its other name is another parameter
/// to Redis) sets nothing, and a value refused puts back those set
/// before it.
fn config_set_all(shared: &Shared, pairs: &[(String, &Bytes)]) -> CmdResult {
    let before = parameters(shared);
    for (at, (name, _)) in pairs.iter().enumerate() {
        if !before.iter().any(|(known, _)| known == name) {
            return Err(err(format!("ERR Unknown option or number of arguments for CONFIG SET - '{name}'")));
        }
        if pairs[..at].iter().any(|(earlier, _)| earlier == name) {
            return Err(err(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - duplicate parameter"
            )));
        }
    }
    for (at, (name, value)) in pairs.iter().enumerate() {
        if let Err(refused) = config_set(shared, name, value) {
            for (name, _) in &pairs[..at] {
                let old = before.iter().find(|(known, _)| known == name).map(|(_, old)| old.as_bytes());
                // What CONFIG GET gives, CONFIG SET takes (a protocol test
                // sets every parameter to its own value).
                if let Err(e) = config_set(shared, name, old.unwrap_or_default()) {
                    tracing::error!(name, error = e.text(), "CONFIG SET could not put a parameter back");
                }
            }
            return Err(refused);
        }
    }
    Ok(())
}

/// Sets `name` to `value`, with Redis's checks and errors: CONFIG SET,
/// and the config file's settings that have no flag as the server starts.
pub fn config_set(shared: &Shared, name: &str, value: &[u8]) -> CmdResult {
    let text = String::from_utf8_lossy(value).to_string();
    let not_integer = || {
        err(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - argument couldn't be parsed into an integer"))
    };
    let number = || -> Result<u64, CmdError> { text.parse::<u64>().map_err(|_| not_integer()) };
    // Redis's range error for a signed setting below `low`.
    let signed = |low: i64| -> Result<i64, CmdError> {
        let n = text.parse::<i64>().map_err(|_| not_integer())?;
        if n < low {
            return Err(err(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - argument must be between {low} and \
                 9223372036854775807 inclusive"
            )));
        }
        Ok(n)
    };
    // Redis's int configs: 0 to INT_MAX.
    let int_config = || -> Result<u32, CmdError> {
        let n = text.parse::<i64>().map_err(|_| not_integer())?;
        u32::try_from(n).ok().filter(|&n| n <= i32::MAX as u32).ok_or_else(|| {
            err(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - argument must be between 0 and \
                 2147483647 inclusive"
            ))
        })
    };
    let yes_or_no = || match text.to_ascii_lowercase().as_str() {
        "yes" => Ok(true),
        "no" => Ok(false),
        _ => Err(err(format!(
            "ERR CONFIG SET failed (possibly related to argument '{name}') - argument must be 'yes' or 'no'"
        ))),
    };
    match name {
        "requirepass" => shared.set_password(Some(text.clone()).filter(|p| !p.is_empty())),
        "masterauth" => *shared.replication.masterauth.lock() = Some(text.clone()).filter(|p| !p.is_empty()),
        "masteruser" => *shared.replication.masteruser.lock() = Some(text.clone()).filter(|p| !p.is_empty()),
        "maxclients" => shared.set_maxclients(number()? as usize),
        "timeout" => shared.set_timeout_secs(number()?),
        "slowlog-log-slower-than" => shared.slowlog.set_slower_than(signed(-1)?),
        "slowlog-max-len" => shared.slowlog.set_max_len(signed(0)? as usize),
        "latency-monitor-threshold" => shared.latency.set_threshold(signed(0)? as u64),
        "tracking-table-max-keys" => shared.tracking.max_keys.store(signed(0)? as usize, Ordering::Relaxed),
        "latency-tracking" => crate::commandstats::set_tracking(yes_or_no()?),
        "latency-tracking-info-percentiles" => crate::commandstats::set_percentiles(&text)
            .map_err(|why| err(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}")))?,
        "acllog-max-len" => shared.acl_log.set_max_len(signed(0)? as usize),
        "min-replicas-to-write" | "min-slaves-to-write" => {
            shared.master.min_replicas_to_write.store(u64::from(int_config()?), Ordering::Relaxed)
        }
        "min-replicas-max-lag" | "min-slaves-max-lag" => {
            shared.master.min_replicas_max_lag.store(u64::from(int_config()?), Ordering::Relaxed)
        }
        "loglevel" => crate::loglevel::set(crate::loglevel::parse(&text).ok_or_else(|| {
            err(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - argument(s) must be one of the \
                 following: {}",
                crate::loglevel::LEVELS.join(", ")
            ))
        })?),
        "rdbcompression" => super::dump::set_compression(yes_or_no()?),
        "dbfilename" => {
            if !crate::rdb_save::valid_name(&text) {
                return Err(err(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - dbfilename can't be a path, just a filename"
                )));
            }
            *shared.saves.dbfilename.lock() = text.to_string();
        }
        "busy-reply-threshold" | "lua-time-limit" => {
            shared.scripts.control.busy_millis.store(number()?, Ordering::Relaxed)
        }
        "script-memory-limit" => {
            let bytes = crate::maxmemory::parse_bytes(&text).ok_or_else(|| {
                err(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - argument must be a memory value"
                ))
            })?;
            shared.scripts.control.memory_limit.store(bytes, Ordering::Relaxed)
        }
        "client-output-buffer-limit" => crate::pubsub::parse_output_limits(&text)
            .map_err(|reason| err(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {reason}")))?
            .apply(),
        "notify-keyspace-events" => {
            let flags = crate::notify::parse(value).ok_or_else(|| {
                err(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - Invalid event class character. \
                     Use 'Ag$lshzxeKEtmdn'."
                ))
            })?;
            shared.notify_flags.store(flags, Ordering::Relaxed);
        }
        "proto-max-bulk-len" => {
            let n = number()? as usize;
            if n > crate::keyspace::MAX_STRING_BYTES {
                return Err(err(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - argument must be at most {}",
                    crate::keyspace::MAX_STRING_BYTES
                )));
            }
            shared.set_max_bulk_bytes(n)
        }
        "repl-backlog-size" => {
            let bytes = crate::maxmemory::parse_bytes(&text).filter(|&b| b >= 1).ok_or_else(|| {
                err(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - argument must be a memory value"
                ))
            })?;
            // Redis's minimum.
            shared.master.backlog_bytes.store((bytes as usize).max(16 << 10), Ordering::Relaxed);
        }
        "maxmemory" => {
            let bytes = crate::maxmemory::parse_bytes(&text).ok_or_else(|| {
                err(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - argument must be a memory value"
                ))
            })?;
            let memory = &shared.config.memory;
            memory.set(&shared.db, bytes, memory.policy()).map_err(|reason| {
                err(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - {reason} (the segment size is \
                     fixed when the server starts: start it with --maxmemory for a smaller limit)"
                ))
            })?;
        }
        "replica-priority" | "slave-priority" => {
            shared.replication.priority.store(u64::from(int_config()?), Ordering::Relaxed)
        }
        "shutdown-timeout" => shared.graceful.timeout_secs.store(u64::from(int_config()?), Ordering::Relaxed),
        "lfu-log-factor" | "lfu-decay-time" => {
            let n = int_config()?;
            let memory = &shared.config.memory;
            let mut settings = memory.lfu_settings();
            match name {
                "lfu-log-factor" => settings.log_factor = n,
                _ => settings.decay_minutes = n,
            }
            memory.set_lfu_settings(&shared.db, settings);
        }
        "maxmemory-policy" => {
            let memory = &shared.config.memory;
            memory.set(&shared.db, memory.maxmemory(), &text).map_err(|_| {
                err(format!(
                    "ERR CONFIG SET failed (possibly related to argument '{name}') - argument(s) must be one of the \
                     following: volatile-lru, volatile-lfu, volatile-random, volatile-ttl, allkeys-lru, allkeys-lfu, \
                     allkeys-random, noeviction"
                ))
            })?;
        }
        "protected-mode" => shared.protected_mode.store(yes_or_no()?, Ordering::Relaxed),
        // Redis settings whose value ScaledKV fixes (what a write survives,
        // read-only replicas): one asking for what ScaledKV already does
        // is taken (scripts set `save ""` or `appendonly yes`), any other
        // refused, saying why.
        "save" | "appendonly" | "appendfsync" | "replica-read-only" | "slave-read-only" => {
            let failed =
                |why: &str| err(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"));
            let asked = match name {
                "save" if !valid_save_points(&text) => return Err(failed("Invalid save parameters")),
                "save" => text.split_whitespace().collect::<Vec<_>>().join(" "),
                "appendfsync" => match text.to_ascii_lowercase().as_str() {
                    lower @ ("always" | "everysec" | "no") => lower.to_string(),
                    _ => return Err(failed("argument(s) must be one of the following: everysec, always, no")),
                },
                _ => if yes_or_no()? { "yes" } else { "no" }.to_string(),
            };
            let now = own_parameters(shared).into_iter().find(|(key, _)| *key == name).map(|(_, value)| value);
            if now.as_deref() != Some(asked.as_str()) {
                return Err(failed(&match name {
                    "save" => "ScaledKV takes no snapshots: every write is in its log, so save stays \"\"".to_string(),
                    "replica-read-only" | "slave-read-only" => "ScaledKV's replicas are always read-only".to_string(),
                    _ => format!(
                        "{name} is {} while the server runs: --durability {} chose it when it started",
                        now.unwrap_or_default(),
                        shared.config.durability
                    ),
                }));
            }
        }
        "databases" | "bind" | "port" | "dir" | "durability" | "gc-space-amp" | "io-threads" | "logfile"
        | "pidfile" | "daemonize" | "unixsocket" | "unixsocketperm" => {
            return Err(err(format!(
                "ERR CONFIG SET failed (possibly related to argument '{name}') - can't set immutable config"
            )))
        }
        _ => {
            let Some(param) = crate::redis_configs::find(name) else {
                return Err(err(format!("ERR Unknown option or number of arguments for CONFIG SET - '{name}'")));
            };
            let failed =
                |why: &str| err(format!("ERR CONFIG SET failed (possibly related to argument '{name}') - {why}"));
            if param.immutable {
                return Err(failed("can't set immutable config"));
            }
            let canonical = param.canonical();
            if canonical.name == "tls-port" {
                let asked = param.check(&text).map_err(|why| failed(&why))?;
                if asked != shared.redis_params.get(canonical) {
                    return Err(failed("ScaledKV listens on its tls-port from the start: restart it to move the port"));
                }
                return Ok(());
            }
            let old = shared.redis_params.get(canonical);
            shared.redis_params.set(param, &text).map_err(|why| failed(&why))?;
            // A certificate renewed, clients' authentication changed, the
            // link to a master to speak TLS: new clients and links get the
            // new contexts (none where nothing asks for one), or nothing
            // changes.
            if crate::tls::CONTEXT_SETTINGS.contains(&canonical.name.as_str()) {
                let serving = shared.tls.acceptor().is_some();
                if let Err(why) = shared.tls.configure(&shared.redis_params, serving) {
                    shared.redis_params.set(canonical, &old).expect("the value it had");
                    tracing::warn!(setting = name, %why, "TLS configuration not changed");
                    return Err(failed(&format!("Unable to update TLS configuration: {why}")));
                }
            }
        }
    }
    Ok(())
}

/// As `config_set`, for a setting of the command line or a config file
/// as the server starts: Redis's parameters CONFIG SET may not change
/// (`tcp-backlog`, `unixsocket` ...) are set here too.
pub fn config_set_at_start(shared: &Shared, name: &str, value: &[u8]) -> CmdResult {
    if name == "databases" {
        return match value {
            b"1" => Ok(()),
            _ => Err(err("ERR ScaledKV has one database (SELECT 0): databases stays 1")),
        };
    }
    let own = own_parameters(shared).iter().any(|(own, _)| *own == name);
    // tls-port too: CONFIG SET may not move it, the start sets it; and the
    // TLS contexts' settings, which the start builds once all are read.
    let set_directly = |param: &crate::redis_configs::Param| {
        param.name == "tls-port" || crate::tls::CONTEXT_SETTINGS.contains(&param.name.as_str())
    };
    match crate::redis_configs::find(name).filter(|param| (param.immutable || set_directly(param.canonical())) && !own)
    {
        Some(param) => {
            let text = String::from_utf8_lossy(value);
            shared.redis_params.set(param, &text).map_err(|why| err(format!("ERR {why}")))
        }
        None => config_set(shared, name, value),
    }
}

/// Redis's `save` syntax: empty, or pairs of seconds (at least 1) and
/// changes.
fn valid_save_points(text: &str) -> bool {
    let words: Vec<&str> = text.split_whitespace().collect();
    let least = |at: usize| if at.is_multiple_of(2) { 1 } else { 0 };
    words.len().is_multiple_of(2)
        && words.iter().enumerate().all(|(at, word)| word.parse::<i64>().is_ok_and(|n| n >= least(at)))
}

fn flag_names(command: &Command) -> Vec<&'static str> {
    const NAMES: [(u32, &str); 6] = [
        (super::WRITE, "write"),
        (super::READONLY, "readonly"),
        (super::ADMIN, "admin"),
        (super::FAST, "fast"),
        (super::NO_AUTH, "no_auth"),
        (super::NO_MULTI, "no_multi"),
    ];
    NAMES.iter().filter(|(flag, _)| command.has(*flag)).map(|(_, name)| *name).collect()
}

/// COMMAND INFO's entry for `command`: Redis 7.0's own (flags, key range,
/// tips, key specifications, subcommands) from its command table; a
/// command Redis does not have, from ScaledKV's table.
fn command_info(ctx: &mut Ctx<'_>, command: &Command) {
    let table = &super::redis_commands::TABLE;
    if let Some(id) = table.id(command.name) {
        table.write_info(id, ctx.out);
        return;
    }
    let out = &mut *ctx.out;
    out.array(10);
    out.bulk(command.name.as_bytes());
    out.int(command.arity as i64);
    let flags = flag_names(command);
    out.set(flags.len());
    for flag in flags {
        out.simple(flag);
    }
    out.int(command.keys.0 as i64);
    out.int(command.keys.1 as i64);
    out.int(command.keys.2 as i64);
    out.set(0);
    out.set(0);
    out.set(0);
    out.set(0);
}

/// COMMAND LIST's names: every command and, as Redis lists them, its
/// subcommands (`config|get`), those FILTERBY keeps (`ACLCAT category`,
/// `PATTERN glob` on the full name; no command is a module's).
fn command_list(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let table = &super::redis_commands::TABLE;
    let keep: Box<dyn Fn(&str) -> bool> = match args.len() {
        2 => Box::new(|_| true),
        5 if eq(&args[2], "filterby") && eq(&args[3], "module") => Box::new(|_| false),
        5 if eq(&args[2], "filterby") && eq(&args[3], "aclcat") => {
            let bit = std::str::from_utf8(&args[4]).ok().and_then(super::redis_commands::category).unwrap_or(0);
            Box::new(move |name| table.id(name).is_some_and(|id| table.specs[id].categories & bit != 0))
        }
        5 if eq(&args[2], "filterby") && eq(&args[3], "pattern") => {
            let pattern = args[4].clone();
            Box::new(move |name| crate::keyspace::glob_match(&pattern, name.as_bytes()))
        }
        _ => return Err(CmdError::Syntax),
    };
    let mut names = Vec::new();
    for command in TABLE {
        names.push(command.name.to_string());
        if let Some(id) = table.id(command.name) {
            names.extend(table.specs[id].subcommands.clone().map(|sub| table.specs[sub].fullname.clone()));
        }
    }
    names.retain(|name| keep(name));
    ctx.out.array(names.len());
    for name in names {
        ctx.out.bulk(name.as_bytes());
    }
    Ok(())
}

/// COMMAND GETKEYS and GETKEYSANDFLAGS: the key arguments of the command
/// `args` name, found as Redis finds them (its key specifications, or its
/// own finders for SET, BITFIELD, SORT and MIGRATE), with Redis's errors.
fn command_getkeys(ctx: &mut Ctx<'_>, args: &[Bytes], with_flags: bool) -> CmdResult {
    let table = &super::redis_commands::TABLE;
    let called = &args[2..];
    let id = table.resolve(called).filter(|_| lookup(&called[0]).is_some());
    let Some(id) = id else { return Err(err("ERR Invalid command specified")) };
    if !table.has_keys(id) {
        return Err(err("ERR The command has no key arguments"));
    }
    let arity = table.specs[id].arity;
    if (arity > 0 && arity as usize != called.len()) || (called.len() as i64) < -(arity as i64) {
        return Err(err("ERR Invalid number of arguments specified for command"));
    }
    let keys = table.keys_and_flags(id, called);
    if keys.is_empty() && !table.specs[id].flags.iter().any(|flag| flag == "no_mandatory_keys") {
        return Err(err("ERR Invalid arguments specified for command"));
    }
    ctx.out.array(keys.len());
    for (at, flags) in keys {
        if with_flags {
            ctx.out.array(2);
        }
        ctx.out.bulk(&called[at]);
        if with_flags {
            ctx.out.set(flags.len());
            for flag in flags {
                ctx.out.simple(flag);
            }
        }
    }
    Ok(())
}

/// What a COMMAND INFO or DOCS argument names: one of ScaledKV's
/// commands, or a subcommand of one (`config|get`) by its id in Redis's
/// table.
enum Named {
    Command(&'static Command),
    Sub(usize),
}

fn named(name: &[u8]) -> Option<Named> {
    if let Some(command) = lookup(name) {
        return Some(Named::Command(command));
    }
    let fullname = std::str::from_utf8(name).ok()?.to_ascii_lowercase();
    lookup(fullname.split_once('|')?.0.as_bytes())?;
    super::redis_commands::TABLE.id(&fullname).map(Named::Sub)
}

pub fn command(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len() == 1 {
        return command(ctx, &[args[0].clone(), Bytes::from_static(b"info")]);
    }
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match sub.as_str() {
        "count" if args.len() == 2 => ctx.out.int(TABLE.len() as i64),
        "help" if args.len() == 2 => ctx.out.help(&[
            "COMMAND <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "(no subcommand)",
            "    Return details about all Redis commands.",
            "COUNT",
            "    Return the total number of commands in this Redis server.",
            "LIST",
            "    Return a list of all commands in this Redis server.",
            "INFO [<command-name> ...]",
            "    Return details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "DOCS [<command-name> ...]",
            "    Return documentation details about multiple Redis commands.",
            "    If no command names are given, documentation details for all",
            "    commands are returned.",
            "GETKEYS <full-command>",
            "    Return the keys from a full Redis command.",
            "GETKEYSANDFLAGS <full-command>",
            "    Return the keys and the access flags from a full Redis command.",
            "HELP",
            "    Prints this help.",
        ]),
        "list" => command_list(ctx, args)?,
        "getkeys" | "getkeysandflags" if args.len() >= 4 => command_getkeys(ctx, args, sub == "getkeysandflags")?,
        "getkeys" | "getkeysandflags" => return Err(arity_error(&format!("command|{sub}"))),
        "info" if args.len() == 2 => {
            ctx.out.array(TABLE.len());
            for command in TABLE {
                command_info(ctx, command);
            }
        }
        "info" => {
            let table = &super::redis_commands::TABLE;
            ctx.out.array(args.len() - 2);
            for name in &args[2..] {
                match named(name) {
                    Some(Named::Command(command)) => command_info(ctx, command),
                    Some(Named::Sub(id)) => table.write_info(id, ctx.out),
                    None => ctx.out.null(),
                }
            }
        }
        "docs" => {
            let commands: Vec<Named> = if args.len() == 2 {
                TABLE.iter().map(Named::Command).collect()
            } else {
                args[2..].iter().filter_map(|name| named(name)).collect()
            };
            ctx.out.map(commands.len());
            for command in commands {
                let fullname = match &command {
                    Named::Command(command) => command.name,
                    Named::Sub(id) => &super::redis_commands::TABLE.specs[*id].fullname,
                };
                ctx.out.bulk(fullname.as_bytes());
                match (super::redis_docs::of(fullname), command) {
                    (Some(docs), _) => super::redis_docs::write(docs, ctx.out),
                    // One Redis does not have: what ScaledKV's table says.
                    (None, Named::Command(command)) => {
                        ctx.out.map(2);
                        ctx.out.bulk(b"summary");
                        ctx.out.bulk(command.summary.as_bytes());
                        ctx.out.bulk(b"group");
                        ctx.out.bulk(command.group.as_bytes());
                    }
                    (None, Named::Sub(_)) => ctx.out.map(0),
                }
            }
        }
        "count" | "help" => return Err(arity_error(&format!("command|{sub}"))),
        _ => {
            return Err(err(format!(
                "ERR unknown subcommand '{}'. Try COMMAND HELP.",
                String::from_utf8_lossy(&args[1]).chars().take(128).collect::<String>()
            )))
        }
    }
    Ok(())
}
