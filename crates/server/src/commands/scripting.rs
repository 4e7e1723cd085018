//! EVAL, EVALSHA, their read-only forms, and SCRIPT (`crate::script` runs
//! the Lua). A script is atomic as in Redis: it holds the locks of its
//! keys while it runs, and its writes are one batch, durable and visible
//! together once it ends, before its reply is sent. A script that touches
//! a key it did not declare takes that key's lock if it is free, or else
//! is run again holding every key's lock (as Redis, which runs one script
//! at a time, allows undeclared keys outside a cluster).

use bytes::{Bytes, BytesMut};
use smallvec::SmallVec;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{args, commit, err, lookup, subcommand_arity, unknown_subcommand};
use super::{CmdError, CmdResult, Command, Ctx, Guard, Run, ALL_KEYS, BLOCKING, TX_CONTROL, WRITE};
use crate::conn::ConnState;
use crate::keyspace::{KeyLocks, Stripe, Writes};
use crate::resp::{Out, Protocol};
use crate::script::functions::Flags;
use crate::script::vm::{self, CallError, Outcome, Program};
use crate::script::Script;
use crate::server::Shared;

/// EVAL, FCALL and their kin (the executor runs them itself: they await
/// locks).
pub fn is_script(command: &Command) -> bool {
    matches!(command.name, "eval" | "evalsha" | "eval_ro" | "evalsha_ro" | "fcall" | "fcall_ro")
}

/// What an invocation runs.
enum Target {
    Script(Arc<Script>),
    /// A library function, by its name as registered.
    Function(String),
}

/// One invocation: the script or function, its keys and arguments.
struct Invocation<'a> {
    target: Target,
    /// The whole command (FUNCTION STATS shows a busy function's).
    command: &'a [Bytes],
    keys: &'a [Bytes],
    argv: &'a [Bytes],
    read_only: bool,
    /// `allow-oom`: its writes are not checked against `maxmemory`.
    allow_oom: bool,
}

fn invocation<'a>(shared: &Shared, command: &Command, args: &'a [Bytes]) -> Result<Invocation<'a>, CmdError> {
    let function = match command.name {
        "fcall" | "fcall_ro" => {
            let libraries = shared.functions.current();
            let (_, function) = libraries.function(&args[1]).ok_or_else(|| err("ERR Function not found"))?;
            Some((function.name.clone(), function.flags))
        }
        _ => None,
    };
    let numkeys = match args::int(&args[2]) {
        Err(_) if function.is_some() => return Err(err("ERR Bad number of keys provided")),
        numkeys => numkeys?,
    };
    if numkeys > (args.len() - 3) as i64 {
        return Err(err("ERR Number of keys can't be greater than number of args"));
    }
    if numkeys < 0 {
        return Err(err("ERR Number of keys can't be negative"));
    }
    let (target, flags) = match function {
        Some((name, flags)) => (Target::Function(name), Some(flags)),
        None if command.name.starts_with("evalsha") => {
            let script =
                shared.scripts.get(&args[1]).ok_or_else(|| err("NOSCRIPT No matching script. Please use EVAL."))?;
            let flags = script.flags;
            (Target::Script(script), flags)
        }
        None => {
            let script = cache(shared, &args[1], false)?;
            let flags = script.flags;
            (Target::Script(script), flags)
        }
    };
    let ro_command = command.name.ends_with("_ro");
    // Redis's `scriptPrepareForRun`, for scripts with flags (a shebang) and
    // functions; a script without is checked command by command.
    if let Some(flags) = flags {
        if !flags.has(Flags::NO_WRITES) && ro_command {
            return Err(err("ERR Can not execute a script with write flag using *_ro command."));
        }
        if !flags.has(Flags::NO_WRITES) && shared.replication.read_only() {
            return Err(err(super::READ_ONLY_ERROR));
        }
        if !flags.has(Flags::NO_WRITES) && !flags.has(Flags::ALLOW_OOM) && shared.config.memory.over_limit(&shared.db) {
            return Err(err(
                "OOM allow-oom flag is not set on the script, can not run it when used memory > 'maxmemory'",
            ));
        }
    }
    let split = 3 + numkeys as usize;
    Ok(Invocation {
        target,
        command: args,
        keys: &args[3..split],
        argv: &args[split..],
        read_only: ro_command || flags.is_some_and(|flags| flags.has(Flags::NO_WRITES)),
        allow_oom: flags.is_some_and(|flags| flags.has(Flags::ALLOW_OOM)),
    })
}

/// Caches `body` once it compiles (EVAL, or SCRIPT LOAD when `load`).
fn cache(shared: &Shared, body: &[u8], load: bool) -> Result<Arc<Script>, CmdError> {
    let script = shared.scripts.add(body, load).map_err(err)?;
    let generation = shared.scripts.generation.load(Ordering::Relaxed);
    if let Err(message) = vm::compile(&shared.scripts.control, generation, &script) {
        shared.scripts.remove(&script.sha);
        return Err(err(message));
    }
    Ok(script)
}

/// The key locks a running script holds.
enum Held<'a, 's> {
    /// Every key's (EXEC's, or a script run again with all of them).
    All,
    /// Those of a connection's run of writes, which the script joins.
    Run(&'a mut Vec<(Stripe, Guard<'s>)>),
}

impl<'s> Held<'_, 's> {
    /// Takes the lock of every key `command` names that is not held yet,
    /// if it is free: waiting while holding locks could deadlock. A key
    /// the run holds only shared (for blind writes) counts as taken.
    fn cover(&mut self, shared: &'s Shared, command: &Command, args: &[Bytes]) -> Result<(), CallError> {
        let Held::Run(guards) = self else { return Ok(()) };
        // These read keys their table entry cannot name.
        if command.has(ALL_KEYS) || matches!(command.name, "sintercard" | "zintercard") {
            return Err(CallError::NeedsAllKeys);
        }
        let mut needed: SmallVec<[Stripe; 4]> = SmallVec::new();
        command.stripes(args, &mut needed);
        for stripe in needed {
            match guards.iter().find(|(held, _)| *held == stripe) {
                Some((_, Guard::Exclusive(_))) => continue,
                Some((_, Guard::Shared(_))) => return Err(CallError::NeedsAllKeys),
                None => {
                    let guard = shared.locks.try_lock(stripe).ok_or(CallError::NeedsAllKeys)?;
                    guards.push((stripe, Guard::Exclusive(guard)));
                }
            }
        }
        Ok(())
    }
}

/// Commands a script may not run (Redis's `noscript`).
fn allowed_in_scripts(command: &Command) -> bool {
    !(command.has(TX_CONTROL)
        || command.has(BLOCKING)
        || is_script(command)
        || matches!(
            command.name,
            "script"
                | "function"
                | "unwatch"
                | "auth"
                | "hello"
                | "client"
                | "config"
                | "monitor"
                | "subscribe"
                | "psubscribe"
                | "ssubscribe"
                | "unsubscribe"
                | "punsubscribe"
                | "sunsubscribe"
                | "save"
                | "bgsave"
                | "shutdown"
                | "wait"
                | "role"
                | "replicaof"
                | "slaveof"
                | "sync"
                | "psync"
                | "replconf"
                | "failover"
                | "debug"
                | "bgrewriteaof"
        ))
}

/// Runs the script of `invocation` with its writes in `writes` (each
/// command behind a save point of them, or in a branch for one that
/// deletes every key: a failed one leaves nothing) and writes its reply
/// to `out`.
fn run_script<'s>(
    shared: &'s Shared,
    conn: &mut ConnState,
    out: &mut Out,
    writes: &mut Writes,
    invocation: &Invocation<'_>,
    held: &mut Held<'_, 's>,
) -> Outcome {
    let mut call = |args: Vec<Bytes>, resp3: bool, buf: &mut BytesMut| -> Result<(), CallError> {
        let Some(command) = lookup(&args[0]) else {
            return Err(CallError::Error("ERR Unknown Redis command called from script".into()));
        };
        if !command.arity_ok(args.len()) {
            return Err(CallError::Error("ERR Wrong number of args calling Redis command from script".into()));
        }
        if !allowed_in_scripts(command) {
            return Err(CallError::Error("ERR This Redis command is not allowed from script".into()));
        }
        // A script runs with its caller's permissions.
        if let Some(denied) = super::refused_by_acl(shared, conn, command, &args, "lua") {
            return Err(CallError::Error(denied.script_error().into()));
        }
        if command.has(WRITE) {
            if invocation.read_only {
                return Err(CallError::Error("ERR Write commands are not allowed from read-only scripts.".into()));
            }
            if shared.replication.read_only() && !conn.master_link {
                return Err(CallError::Error(super::READ_ONLY_ERROR.into()));
            }
            if !conn.master_link && shared.master.refuses_writes(shared.replication.following()) {
                return Err(CallError::Error(super::NO_REPLICAS_ERROR.into()));
            }
            if !invocation.allow_oom && shared.config.memory.refuses(command.name, &shared.db) {
                return Err(CallError::Error(crate::maxmemory::OOM_ERROR.into()));
            }
        }
        held.cover(shared, command, &args)?;
        conn.counts.commands += 1;
        crate::monitor::feed_script_command(shared, conn, command, &args);
        let protocol = if resp3 { Protocol::Resp3 } else { Protocol::Resp2 };
        let mut reply = Out::with_buf(std::mem::take(buf), protocol);
        // A save point costs no copy (`Writes::savepoint`); FLUSHALL's
        // cleared expiry notes are not kept for one to restore.
        let mut branch = command.has(ALL_KEYS).then(|| writes.branch());
        let point = branch.is_none().then(|| writes.savepoint());
        let target = match &mut branch {
            Some(branch) => branch,
            None => &mut *writes,
        };
        conn.in_script = true;
        if conn.tracking.is_some() {
            // The keys it reads (Redis remembers the script's declared keys).
            crate::tracking::remember_reads(shared, conn, command, &args);
        }
        let started = shared.slowlog.now();
        let result = command.call(shared, conn, &mut reply, target, &args);
        conn.in_script = false;
        // Counted and logged as Redis does a script's commands: its Lua
        // client has no address.
        let failed = matches!(&result, Err(error) if !matches!(error, CmdError::Blocked(..)));
        super::command_ran(shared, started, command, &args, failed, || ("?:0".into(), String::new()));
        *buf = reply.buf;
        match (branch, point) {
            (Some(branch), _) if result.is_ok() => writes.merge(branch),
            (Some(branch), _) => writes.abandon(branch),
            (None, Some(point)) if result.is_ok() => writes.release(point),
            (None, Some(point)) => writes.rollback(point),
            (None, None) => unreachable!("a branch or a save point"),
        }
        match result {
            Ok(()) => Ok(()),
            // A script never waits: XREAD BLOCK that finds nothing
            // answers as if it timed out, as in Redis.
            Err(CmdError::Blocked(..)) => {
                let mut reply = Out::with_buf(std::mem::take(buf), protocol);
                reply.null_array();
                *buf = reply.buf;
                Ok(())
            }
            Err(error) => Err(CallError::Error(error.text())),
        }
    };
    let generation = shared.scripts.generation.load(Ordering::Relaxed);
    let control = &shared.scripts.control;
    let program = match &invocation.target {
        Target::Script(script) => Program::Script(script),
        Target::Function(name) => Program::Function { functions: &shared.functions, name, command: invocation.command },
    };
    vm::run(control, generation, &program, invocation.keys, invocation.argv, &mut call, out)
}

/// EVAL and its kin outside a transaction. A script joins the
/// connection's run of writes, as a read-modify-write command does: it
/// takes its declared keys' locks for the run, its writes go into the
/// run's batch (one commit for a pipeline of scripts), and its reply waits
/// with the run's until that batch is durable.
pub async fn eval<'s>(
    shared: &'s Shared,
    conn: &mut ConnState,
    out: &mut Out,
    command: &'static Command,
    args: &[Bytes],
    run: &mut Run<'s>,
) {
    let invocation = match invocation(shared, command, args) {
        Ok(invocation) => invocation,
        Err(error) => {
            // Settled first, as for a failed write: a failed commit
            // rewrites every reply of the run.
            run.commit(shared, out).await;
            out.error(&error.text());
            return;
        }
    };
    let mut stripes: SmallVec<[Stripe; 4]> = invocation.keys.iter().map(|key| KeyLocks::stripe(key)).collect();
    stripes.sort_unstable();
    stripes.dedup();
    if run.commands > 0 && !run.writes.has_overlay() {
        // Blind writes kept no overlay for the script to read.
        run.commit(shared, out).await;
    }
    run.lock(shared, out, &stripes, true).await;
    if run.commands == 0 {
        run.mark = out.len();
    }
    let before = out.len();
    run.writes.keep_overlay();
    run.writes.see_pending(&shared.pending);
    let mut writes = run.writes.branch();
    writes.defer_messages();
    let mut held = Held::Run(&mut run.guards);
    match run_script(shared, conn, out, &mut writes, &invocation, &mut held) {
        Outcome::Replied => {
            run.writes.merge(writes);
            run.commands += 1;
        }
        // Its writes go with it: nothing of a killed script is applied.
        Outcome::Killed => {
            run.writes.abandon(writes);
            run.commands += 1;
        }
        Outcome::NeedsAllKeys => {
            // Nothing it did is visible (its PUBLISHes wait for its
            // writes): settle the run, then run it again holding every lock.
            run.writes.abandon(writes);
            out.truncate(before);
            run.commit(shared, out).await;
            eval_holding_every_lock(shared, conn, out, &invocation).await;
            return;
        }
    }
    if run.commands >= super::RUN_MAX_COMMANDS || run.writes.batch.size_bytes() >= super::RUN_MAX_BYTES {
        run.commit(shared, out).await;
    }
}

async fn eval_holding_every_lock(shared: &Shared, conn: &mut ConnState, out: &mut Out, invocation: &Invocation<'_>) {
    shared.stats.script_reruns.fetch_add(1, Ordering::Relaxed);
    let stripes = KeyLocks::all();
    let guards = shared.locks.lock(&stripes).await;
    let mark = out.len();
    let mut writes = Writes::new(true).by(crate::keyspace::Writer::of(conn));
    writes.see_pending(&shared.pending);
    writes.defer_messages();
    if run_script(shared, conn, out, &mut writes, invocation, &mut Held::All) == Outcome::Replied {
        if let Err(error) = commit(shared, writes.take_batch(), &stripes, true, guards).await {
            out.truncate(mark);
            out.error(&error.text_for(out));
        }
    }
}

/// EVAL and its kin inside EXEC, which holds every key's lock for them.
pub fn eval_in_transaction(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let command = lookup(&args[0]).expect("dispatched by its name");
    let invocation = invocation(ctx.shared, command, args)?;
    let mut writes = ctx.writes.branch();
    match run_script(ctx.shared, ctx.conn, ctx.out, &mut writes, &invocation, &mut Held::All) {
        Outcome::Killed => ctx.writes.abandon(writes),
        _ => ctx.writes.merge(writes),
    }
    Ok(())
}

pub fn script(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let scripts = &ctx.shared.scripts;
    match (sub.as_str(), args.len()) {
        ("load", 3) => {
            let script = cache(ctx.shared, &args[2], true)?;
            ctx.out.bulk(script.sha.as_bytes());
        }
        ("exists", n) if n >= 3 => {
            ctx.out.array(n - 2);
            for sha in &args[2..] {
                ctx.out.int(scripts.contains(sha) as i64);
            }
        }
        ("flush", 2 | 3) => {
            if let Some(mode) = args.get(2) {
                if !args::eq(mode, "sync") && !args::eq(mode, "async") {
                    return Err(err("ERR SCRIPT FLUSH only support SYNC|ASYNC option"));
                }
            }
            scripts.flush();
            ctx.out.ok();
        }
        ("kill", 2) => {
            if scripts.control.busy.load(Ordering::Relaxed) == 0 {
                return Err(err("NOTBUSY No scripts in execution right now."));
            }
            if scripts.control.busy_scripts() == 0 {
                return Err(err(
                    "BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.",
                ));
            }
            scripts.control.kill_epoch.fetch_add(1, Ordering::Relaxed);
            ctx.out.ok();
        }
        ("debug", 3) => return Err(err("ERR SCRIPT DEBUG is not supported by ScaledKV")),
        ("help", 2) => ctx.out.help(&[
            "SCRIPT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "EXISTS <sha1> [<sha1> ...]",
            "    Return information about the existence of the scripts in the script cache.",
            "FLUSH [ASYNC|SYNC]",
            "    Flush the Lua scripts cache.",
            "KILL",
            "    Kill the currently executing Lua script (its writes are never applied).",
            "LOAD <script>",
            "    Load a script into the scripts cache without executing it.",
            "HELP",
            "    Prints this help.",
        ]),
        ("load" | "exists" | "flush" | "kill" | "debug" | "help", _) => return Err(subcommand_arity("script", &sub)),
        _ => return Err(unknown_subcommand("script", &args[1])),
    }
    Ok(())
}
