//! MULTI/EXEC/DISCARD/WATCH/UNWATCH. A transaction's writes are one engine
//! batch: they become durable and visible together, after every queued
//! command has run against the keys it locked.

use bytes::Bytes;

use super::{engine_error_text, err, CmdResult, Ctx, ALL_KEYS};
use crate::conn::ConnState;
use crate::keyspace::{KeyLocks, Writes};
use crate::resp::Out;
use crate::server::Shared;

pub fn multi(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    if ctx.conn.multi.is_some() {
        return Err(err("ERR MULTI calls can not be nested"));
    }
    ctx.conn.multi = Some(Vec::new());
    ctx.conn.info.queued.store(0, std::sync::atomic::Ordering::Relaxed);
    ctx.conn.multi_failed = false;
    ctx.out.ok();
    Ok(())
}

pub fn discard(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    if ctx.conn.multi.is_none() {
        return Err(err("ERR DISCARD without MULTI"));
    }
    ctx.conn.reset_transaction();
    ctx.out.ok();
    Ok(())
}

pub fn watch(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if ctx.conn.multi.is_some() {
        // An error that, as in Redis, does not abort the transaction.
        return Err(err("ERR WATCH inside MULTI is not allowed"));
    }
    for key in &args[1..] {
        let stripe = KeyLocks::stripe(key);
        let version = ctx.shared.locks.version(stripe);
        if !ctx.conn.watched.iter().any(|(s, _)| *s == stripe) {
            ctx.conn.watched.push((stripe, version));
        }
    }
    // A published write (`crate::pending`) changed the versions just read,
    // but reads without locks (a GET between WATCH and MULTI) see it only
    // once it is durable: the reply waits for that, or the client could
    // read the value it replaced and EXEC would not know. Versions first:
    // a write published after this look changes them again.
    if !ctx.shared.pending.is_empty() {
        ctx.writes.note_read_pending();
    }
    ctx.out.ok();
    Ok(())
}

pub fn unwatch(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    ctx.conn.watched.clear();
    ctx.out.ok();
    Ok(())
}

/// EXEC is dispatched here by the executor (it needs to await); the table
/// entry exists for arity checks and COMMAND.
pub fn exec_placeholder(_ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    unreachable!("the executor runs EXEC itself")
}

pub async fn exec(shared: &Shared, conn: &mut ConnState, out: &mut Out) {
    let Some(queued) = conn.multi.take() else {
        out.error("ERR EXEC without MULTI");
        return;
    };
    let failed = conn.multi_failed;
    let watched = std::mem::take(&mut conn.watched);
    conn.reset_transaction();
    if failed {
        out.error("EXECABORT Transaction discarded because of previous errors.");
        return;
    }
    conn.info.last_command(super::lookup(b"exec").expect("in the table"));
    let mut stripes: Vec<_> = watched.iter().map(|(s, _)| *s).collect();
    for (command, args) in &queued {
        // A script may touch keys it does not name.
        if command.has(ALL_KEYS) || super::scripting::is_script(command) {
            stripes = KeyLocks::all();
            break;
        }
        command.stripes(args, &mut stripes);
    }
    stripes.sort_unstable();
    stripes.dedup();
    let guards = shared.locks.lock(&stripes).await;
    if watched.iter().any(|&(stripe, version)| shared.locks.version(stripe) != version) {
        out.null_array();
        return;
    }
    if queued.iter().any(|(command, _)| command.has(ALL_KEYS)) {
        if let Err(error) = super::settle_published(shared).await {
            out.error(&engine_error_text(&error));
            return;
        }
    }
    let mark = out.len();
    out.array(queued.len());
    let mut writes = Writes::new(true).by(crate::keyspace::Writer::of(conn));
    writes.see_pending(&shared.pending);
    writes.defer_messages();
    for (command, args) in &queued {
        conn.counts.commands += 1;
        crate::monitor::feed(shared, conn, command, args);
        // Permissions may have changed since it was queued, as Redis checks.
        if let Some(denied) = super::refused_by_acl(shared, conn, command, args, "multi") {
            out.error(&denied.changed_in_multi());
            continue;
        }
        let before = out.len();
        let started = shared.slowlog.now();
        let errors = crate::commandstats::errors_sent();
        if conn.tracking.is_some() {
            crate::tracking::remember_reads(shared, conn, command, args);
        }
        let result = command.call(shared, conn, out, &mut writes, args);
        let failed = matches!(&result, Err(error) if !matches!(error, super::CmdError::Blocked(..)));
        super::command_ran(shared, started, command, args, failed, || conn.info.peer_and_name());
        match result {
            Ok(()) => {}
            // Inside MULTI a blocking pop that finds nothing answers at
            // once, as in Redis.
            Err(super::CmdError::Blocked(_, bulk)) => {
                out.truncate(before);
                if bulk {
                    out.null();
                } else {
                    out.null_array();
                }
            }
            Err(error) => {
                out.truncate(before);
                out.error(&error.text());
            }
        }
        // Its error replies are its own, not EXEC's.
        crate::commandstats::nested(crate::commandstats::errors_sent() - errors);
    }
    if let Err(error) = super::commit(shared, writes.take_batch(), &stripes, true, guards).await {
        out.truncate(mark);
        out.error(&error.text_for(out));
    }
}
