//! FUNCTION: Redis 7's function libraries (`crate::script::functions`),
//! loaded, listed, dumped, restored and deleted; FCALL runs their
//! functions (`scripting`).
//!
//! A change is durable before its reply: each library's code is an entry
//! under the server's settings in the engine (FLUSHALL keeps it, as Redis
//! keeps its functions), written while the change holds the libraries'
//! lock, so the engine has the libraries in the order they changed. The
//! server loads them again when it starts (`load_stored`).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;
use scaledkv::{Db, WriteBatch};

use super::args::eq;
use super::dump::{deserialize_functions, serialize_functions};
use super::{err, subcommand, subcommand_syntax, CmdError, CmdResult, Ctx};
use crate::keyspace::Writer;
use crate::script::functions::{Functions, Libraries};
use crate::script::{vm, Scripts};
use crate::server::Shared;

/// Where a library's code is kept: this, then the library's name.
pub const LIBRARY_PREFIX: &[u8] = b"\xff\xff\x00function:";

fn library_key(name: &str) -> Vec<u8> {
    [LIBRARY_PREFIX, name.as_bytes()].concat()
}

/// The libraries stored in `db`, each loaded again (at start).
pub fn load_stored(db: &Db, scripts: &Scripts) -> Result<Libraries, String> {
    let mut libraries = Libraries::default();
    let end = [LIBRARY_PREFIX, b"\xff"].concat();
    for item in db.range::<&[u8], _>(LIBRARY_PREFIX..&end[..]) {
        let (key, code) = item.map_err(|e| e.to_string())?;
        libraries.create(&code, false, &mut |body| register(scripts, body)).map_err(|error| {
            let name = String::from_utf8_lossy(&key[LIBRARY_PREFIX.len()..]);
            format!("the stored function library '{name}' does not load: {error}")
        })?;
    }
    Ok(libraries)
}

/// Runs a library's Lua in this thread's Lua state to learn what it
/// registers.
fn register(scripts: &Scripts, body: &[u8]) -> Result<Vec<crate::script::functions::Function>, String> {
    let generation = scripts.generation.load(Ordering::Relaxed);
    vm::register_library(&scripts.control, generation, body)
}

/// Applies `change` to a copy of the libraries, makes the result durable
/// and then the server's. On an error nothing changes.
fn change<T>(
    shared: &Shared,
    writer: Writer,
    change: impl FnOnce(&mut Libraries) -> Result<T, String>,
) -> Result<T, CmdError> {
    let functions: &Functions = &shared.functions;
    let (lock, old) = functions.begin();
    let mut libraries = (*old).clone();
    let result = change(&mut libraries).map_err(|message| err(format!("ERR {message}")))?;
    let mut batch = WriteBatch::new();
    for library in old.iter() {
        if libraries.get(&library.name).is_none() {
            batch.delete(&library_key(&library.name));
        }
    }
    for library in libraries.iter() {
        if !old.get(&library.name).is_some_and(|before| Arc::ptr_eq(before, library)) {
            batch.put(&library_key(&library.name), &library.code);
        }
    }
    if !batch.is_empty() {
        // Under the lock: the next change's note comes after this one's.
        if shared.master.streaming() {
            let codes: Vec<&[u8]> = libraries.iter().map(|library| &library.code[..]).collect();
            batch.set_note(crate::master::functions_note(&codes));
        }
        let _admitted = shared.replication.gate.admit(writer).map_err(super::CommitError::from)?;
        shared.db.write(batch).map_err(|e| err(super::engine_error_text(&e)))?;
    }
    let delta = libraries.len() as i64 - old.len() as i64;
    if delta >= 0 {
        shared.reserved_entries.fetch_add(delta as u64, Ordering::Relaxed);
    } else {
        shared.reserved_entries.fetch_sub(delta.unsigned_abs(), Ordering::Relaxed);
    }
    functions.install(lock, libraries);
    Ok(result)
}

/// Redis 7.0's FUNCTION subcommands and their arities.
const SUBCOMMANDS: &[(&str, i32)] = &[
    ("delete", 3),
    ("dump", 2),
    ("flush", -2),
    ("help", 2),
    ("kill", 2),
    ("list", -2),
    ("load", -3),
    ("restore", -3),
    ("stats", 2),
];

pub fn function(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = subcommand("function", args, SUBCOMMANDS)?;
    match sub.as_str() {
        "load" => load(ctx, args),
        "delete" => {
            let name = String::from_utf8_lossy(&args[2]).into_owned();
            change(ctx.shared, Writer::of(ctx.conn), |libraries| {
                libraries.unlink(&name).map(drop).ok_or_else(|| "Library not found".into())
            })?;
            ctx.out.ok();
            Ok(())
        }
        "flush" => {
            match args.get(2) {
                _ if args.len() > 3 => return Err(subcommand_syntax("FUNCTION", &args[1])),
                Some(mode) if !eq(mode, "sync") && !eq(mode, "async") => {
                    return Err(err("ERR FUNCTION FLUSH only supports SYNC|ASYNC option"))
                }
                _ => {}
            }
            change(ctx.shared, Writer::of(ctx.conn), |libraries| {
                *libraries = Libraries::default();
                Ok(())
            })?;
            ctx.out.ok();
            Ok(())
        }
        "list" => list(ctx, args),
        "dump" => {
            let libraries = ctx.shared.functions.current();
            ctx.out.bulk(&serialize_functions(libraries.iter().map(|library| &library.code[..])));
            Ok(())
        }
        "restore" => restore(ctx, args),
        "stats" => stats(ctx),
        "kill" => {
            let control = &ctx.shared.scripts.control;
            if control.busy.load(Ordering::Relaxed) == 0 {
                return Err(err("NOTBUSY No scripts in execution right now."));
            }
            if control.busy_functions.lock().is_empty() {
                return Err(err(BUSY_SCRIPT));
            }
            control.function_kill_epoch.fetch_add(1, Ordering::Relaxed);
            ctx.out.ok();
            Ok(())
        }
        _ => {
            ctx.out.help(HELP);
            Ok(())
        }
    }
}

/// A script (not a function) is busy: SCRIPT KILL is what stops it.
const BUSY_SCRIPT: &str = "BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.";

fn refuse_over_maxmemory(shared: &Shared) -> CmdResult {
    if shared.config.memory.over_limit(&shared.db) {
        return Err(err(crate::maxmemory::OOM_ERROR));
    }
    Ok(())
}

/// FUNCTION LOAD [REPLACE] code
fn load(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut replace = false;
    let mut at = 2;
    while at < args.len() - 1 {
        if !eq(&args[at], "replace") {
            return Err(err(format!("ERR Unknown option given: {}", String::from_utf8_lossy(&args[at]))));
        }
        replace = true;
        at += 1;
    }
    if at >= args.len() {
        return Err(err("ERR Function code is missing"));
    }
    refuse_over_maxmemory(ctx.shared)?;
    let scripts = &ctx.shared.scripts;
    let name = change(ctx.shared, Writer::of(ctx.conn), |libraries| {
        libraries.create(&args[at], replace, &mut |body| register(scripts, body))
    })?;
    ctx.out.bulk(name.as_bytes());
    Ok(())
}

/// FUNCTION RESTORE payload [FLUSH|APPEND|REPLACE]
fn restore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len() > 4 {
        return Err(subcommand_syntax("FUNCTION", &args[1]));
    }
    #[derive(PartialEq)]
    enum Policy {
        Flush,
        Append,
        Replace,
    }
    let policy = match args.get(3) {
        None => Policy::Append,
        Some(word) if eq(word, "append") => Policy::Append,
        Some(word) if eq(word, "replace") => Policy::Replace,
        Some(word) if eq(word, "flush") => Policy::Flush,
        Some(_) => return Err(err("ERR Wrong restore policy given, value should be either FLUSH, APPEND or REPLACE.")),
    };
    refuse_over_maxmemory(ctx.shared)?;
    let codes = deserialize_functions(&args[2]).map_err(|message| err(format!("ERR {message}")))?;
    let scripts = &ctx.shared.scripts;
    change(ctx.shared, Writer::of(ctx.conn), |libraries| {
        let mut restored = Libraries::default();
        for code in &codes {
            restored.create(code, false, &mut |body| register(scripts, body))?;
        }
        match policy {
            Policy::Flush => {
                *libraries = restored;
                Ok(())
            }
            _ => libraries.join(restored, policy == Policy::Replace),
        }
    })?;
    ctx.out.ok();
    Ok(())
}

/// FUNCTION LIST [LIBRARYNAME pattern] [WITHCODE]
fn list(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (mut with_code, mut pattern) = (false, None);
    let mut at = 2;
    while at < args.len() {
        let arg = &args[at];
        if !with_code && eq(arg, "withcode") {
            with_code = true;
        } else if pattern.is_none() && eq(arg, "libraryname") {
            if at + 1 >= args.len() {
                return Err(err("ERR library name argument was not given"));
            }
            at += 1;
            pattern = Some(&args[at]);
        } else {
            return Err(err(format!("ERR Unknown argument {}", String::from_utf8_lossy(arg))));
        }
        at += 1;
    }
    let libraries = ctx.shared.functions.current();
    let listed: Vec<_> = libraries
        .iter()
        .filter(|library| pattern.is_none_or(|pattern| crate::keyspace::glob_match(pattern, library.name.as_bytes())))
        .collect();
    let out = &mut *ctx.out;
    out.array(listed.len());
    for library in listed {
        out.map(if with_code { 4 } else { 3 });
        out.bulk(b"library_name");
        out.bulk(library.name.as_bytes());
        out.bulk(b"engine");
        out.bulk(b"LUA");
        out.bulk(b"functions");
        out.array(library.functions.len());
        for function in &library.functions {
            out.map(3);
            out.bulk(b"name");
            out.bulk(function.name.as_bytes());
            out.bulk(b"description");
            match &function.description {
                Some(text) => out.bulk(text),
                None => out.null(),
            }
            out.bulk(b"flags");
            let names: Vec<&str> = function.flags.names().collect();
            out.set(names.len());
            for name in names {
                out.simple(name);
            }
        }
        if with_code {
            out.bulk(b"library_code");
            out.bulk(&library.code);
        }
    }
    Ok(())
}

/// FUNCTION STATS: the busy function, if any, and the libraries' counts.
fn stats(ctx: &mut Ctx<'_>) -> CmdResult {
    let control = &ctx.shared.scripts.control;
    if control.busy_scripts() > 0 {
        return Err(err(BUSY_SCRIPT));
    }
    let running = control.busy_functions.lock().first().cloned();
    let libraries = ctx.shared.functions.current();
    let out = &mut *ctx.out;
    out.map(2);
    out.bulk(b"running_script");
    match running {
        None => out.null(),
        Some(function) => {
            out.map(3);
            out.bulk(b"name");
            out.bulk(function.name.as_bytes());
            out.bulk(b"command");
            out.array(function.command.len());
            for arg in &function.command {
                out.bulk(arg);
            }
            out.bulk(b"duration_ms");
            out.int(function.started.elapsed().as_millis() as i64);
        }
    }
    out.bulk(b"engines");
    out.map(1);
    out.bulk(b"LUA");
    out.map(2);
    out.bulk(b"libraries_count");
    out.int(libraries.len() as i64);
    out.bulk(b"functions_count");
    out.int(libraries.function_count() as i64);
    Ok(())
}

const HELP: &[&str] = &[
    "FUNCTION <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "LOAD [REPLACE] <FUNCTION CODE>",
    "    Create a new library with the given library name and code.",
    "DELETE <LIBRARY NAME>",
    "    Delete the given library.",
    "LIST [LIBRARYNAME PATTERN] [WITHCODE]",
    "    Return general information on all the libraries:",
    "    * Library name",
    "    * The engine used to run the Library",
    "    * Library description",
    "    * Functions list",
    "    * Library code (if WITHCODE is given)",
    "    It also possible to get only function that matches a pattern using LIBRARYNAME argument.",
    "STATS",
    "    Return information about the current function running:",
    "    * Function name",
    "    * Command used to run the function",
    "    * Duration in MS that the function is running",
    "    If no function is running, return nil",
    "    In addition, returns a list of available engines.",
    "KILL",
    "    Kill the current running function.",
    "FLUSH [ASYNC|SYNC]",
    "    Delete all the libraries.",
    "    When called without the optional mode argument, the behavior is determined by the",
    "    lazyfree-lazy-user-flush configuration directive. Valid modes are:",
    "    * ASYNC: Asynchronously flush the libraries.",
    "    * SYNC: Synchronously flush the libraries.",
    "DUMP",
    "    Return a serialized payload representing the current libraries, can be restored using FUNCTION RESTORE \
     command",
    "RESTORE <PAYLOAD> [FLUSH|APPEND|REPLACE]",
    "    Restore the libraries represented by the given payload, it is possible to give a restore policy to",
    "    control how to handle existing libraries (default APPEND):",
    "    * FLUSH: delete all existing libraries.",
    "    * APPEND: appends the restored libraries to the existing libraries. On collision, abort.",
    "    * REPLACE: appends the restored libraries to the existing libraries, On collision, replace the old",
    "      libraries with the new libraries (notice that even on this option there is a chance of failure",
    "      in case of functions name collision with another library).",
    "HELP",
    "    Prints this help.",
];
