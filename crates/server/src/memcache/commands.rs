//! memcached's text commands over the shared keyspace, with memcached
//! 1.6's replies and errors. They run through the Redis commands' executor
//! (`commands::run_command`): the same key locks, runs of pipelined writes
//! in one group commit, and replies sent only once durable.
//!
//! An item is a string: one written here keeps its client flags and a CAS
//! (`keyspace::TYPE_ITEM`); one written through Redis reads with flags 0.
//! A key holding a Redis list, hash, set or sorted set is no item: reads
//! miss it, `add` finds it taken, `set` and `delete` replace or remove it,
//! and the commands that change an item (replace, append, cas, incr,
//! touch ...) find none.

use std::sync::atomic::{AtomicU64, Ordering};

use bytes::{BufMut, Bytes};
use scaledkv::now_ms;

use super::cas;
use super::request::{self, MAX_KEY_BYTES};
use crate::commands::{err, CmdError, CmdResult, Command, Ctx, ALL_KEYS, BLIND, READONLY, WRITE};
use crate::keyspace::{is_reserved, Value, TYPE_STRING};
use crate::notify::{GENERIC, STRING};
use crate::server::Shared;

/// The memcached version whose replies these are.
pub const VERSION: &str = "1.6.18";
const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
const BAD_EXPTIME: &str = "CLIENT_ERROR invalid exptime argument";
/// memcached reads an exptime up to 30 days as relative seconds, above as
/// a Unix time.
const RELATIVE_MAX_SECS: i64 = 60 * 60 * 24 * 30;

/// A multi-get's reply holds at most this many largest items' bytes
/// (256 MiB with memcached's default 1 MiB items).
const MAX_GET_REPLY_ITEMS: usize = 256;

const ONE: (i32, i32, i32) = (1, 1, 1);
const NONE: (i32, i32, i32) = (0, 0, 0);

macro_rules! commands {
    ($($name:literal, $flags:expr, $keys:expr, $run:path, $summary:literal;)*) => {
        pub static TABLE: &[Command] = &[
            $(Command { name: $name, arity: -1, flags: $flags, keys: $keys, group: "memcached", summary: $summary, run: $run },)*
        ];
    };
}

// Word counts are checked by each command, with memcached's answers
// (arity -1 lets every count through to it).
commands! {
    "get", READONLY, NONE, get, "Returns the items of keys.";
    "set", WRITE | BLIND, ONE, set, "Stores an item.";
    "gets", READONLY, NONE, gets, "Returns the items of keys with their CAS values.";
    "add", WRITE, ONE, add, "Stores an item if its key holds none.";
    "replace", WRITE, ONE, replace, "Stores an item if its key holds one.";
    "append", WRITE, ONE, append, "Adds bytes after an item's.";
    "prepend", WRITE, ONE, prepend, "Adds bytes before an item's.";
    "cas", WRITE, ONE, cas_, "Stores an item if it is unchanged since it was read.";
    "delete", WRITE, ONE, delete, "Removes an item.";
    "incr", WRITE, ONE, incr, "Adds to an item's decimal number.";
    "decr", WRITE, ONE, decr, "Subtracts from an item's decimal number, down to zero.";
    "touch", WRITE, ONE, touch, "Sets an item's expiry time.";
    "gat", WRITE, (2, -1, 1), gat, "Returns items after setting their expiry time.";
    "gats", WRITE, (2, -1, 1), gats, "Returns items with their CAS values after setting their expiry time.";
    "flush_all", WRITE | ALL_KEYS, NONE, flush_all, "Removes every key, now or after a delay.";
    "version", 0, NONE, version, "Returns the protocol's version.";
    "verbosity", 0, NONE, verbosity, "Sets the log's verbosity (accepted, ignored).";
    "stats", 0, NONE, stats, "Returns the server's counters.";
    "mn", 0, NONE, mn, "Meta no-op: answers MN.";
    "cache_memlimit", 0, NONE, cache_memlimit, "Sets the memory limit in megabytes (maxmemory).";
    "shutdown", 0, NONE, shutdown, "Refused, as memcached without -A refuses it.";
    // Writes for their `T` (a new expiry), `N` (create) and modes.
    "mg", WRITE, ONE, super::meta::mg, "Meta get: an item's value and metadata, as its flags ask.";
    "ms", WRITE, ONE, super::meta::ms, "Meta set: stores an item, as its flags and mode ask.";
    "md", WRITE, ONE, super::meta::md, "Meta delete: removes an item.";
    "ma", WRITE, ONE, super::meta::ma, "Meta arithmetic: adds to or subtracts from an item's number.";
    "me", 0, NONE, meta_debug, "Meta debug: not supported.";
}

/// The command named exactly `name` (memcached's names are lower case).
pub fn lookup(name: &[u8]) -> Option<&'static Command> {
    TABLE.iter().find(|command| command.name.as_bytes() == name)
}

/// Counters for `stats`, as memcached names them.
#[derive(Default)]
pub struct Stats {
    pub cmd_get: AtomicU64,
    pub cmd_set: AtomicU64,
    pub cmd_flush: AtomicU64,
    pub cmd_touch: AtomicU64,
    pub get_hits: AtomicU64,
    pub get_misses: AtomicU64,
    pub delete_hits: AtomicU64,
    pub delete_misses: AtomicU64,
    pub incr_hits: AtomicU64,
    pub incr_misses: AtomicU64,
    pub decr_hits: AtomicU64,
    pub decr_misses: AtomicU64,
    pub cas_hits: AtomicU64,
    pub cas_misses: AtomicU64,
    pub cas_badval: AtomicU64,
    pub touch_hits: AtomicU64,
    pub touch_misses: AtomicU64,
    pub auth_cmds: AtomicU64,
    pub auth_errors: AtomicU64,
    pub curr_connections: AtomicU64,
    pub total_connections: AtomicU64,
}

pub(super) fn bump(counter: &AtomicU64) {
    count(counter, 1);
}

/// Adds `n` (nothing for 0: each add is a locked instruction on a line
/// every connection's thread writes).
pub(super) fn count(counter: &AtomicU64, n: u64) {
    if n > 0 {
        counter.fetch_add(n, Ordering::Relaxed);
    }
}

/// An exptime as an expiry: never (0), already past (negative, or a Unix
/// time gone by), or a time in ms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Expiry {
    Never,
    Past,
    At(u64),
}

pub fn expiry(exptime: i64) -> Expiry {
    let now = now_ms();
    match exptime {
        0 => Expiry::Never,
        ..0 => Expiry::Past,
        1..=RELATIVE_MAX_SECS => Expiry::At(now + exptime as u64 * 1000),
        _ if exptime as u64 * 1000 <= now => Expiry::Past,
        _ => Expiry::At(exptime as u64 * 1000),
    }
}

impl Expiry {
    /// A stored expiry time (None: never).
    pub fn from_ms(expiry_ms: Option<u64>) -> Expiry {
        expiry_ms.map_or(Expiry::Never, Expiry::At)
    }

    /// As a stored expiry time (the past, which removes, as never).
    pub fn ms(self) -> Option<u64> {
        match self {
            Expiry::At(at) => Some(at),
            Expiry::Never | Expiry::Past => None,
        }
    }
}

/// The item at `key`: a string's value (a Redis collection is none).
pub(super) fn read_item(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Value>, CmdError> {
    Ok(ctx.read(key)?.filter(|value| value.tag() == TYPE_STRING))
}

/// An item's client flags (0 for a string written through Redis).
pub(super) fn flags_of(value: &Value) -> u32 {
    value.item_meta().map_or(0, |(flags, _)| flags)
}

/// An item's CAS: stored, or for a string written through Redis a hash of
/// its bytes (so only worked out when asked for).
pub(super) fn cas_of(value: &Value) -> u64 {
    value.item_meta().map_or_else(|| cas::derived(value.data()), |(_, cas)| cas)
}

pub(super) fn check_key(key: &[u8]) -> CmdResult {
    if key.len() > MAX_KEY_BYTES {
        return Err(err(BAD_FORMAT));
    }
    if is_reserved(key) {
        return Err(err("CLIENT_ERROR keys starting with the bytes 0xFF 0xFF are reserved by ScaledKV"));
    }
    Ok(())
}

/// Stores `data` as the item at `key` with a new CAS, which it returns (an
/// expiry in the past removes it, as memcached's item would be gone at
/// once: CAS 0).
pub(super) fn put_item(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    flags: u32,
    data: &[u8],
    expiry: Expiry,
) -> Result<u64, CmdError> {
    if expiry == Expiry::Past {
        ctx.writes.delete(key);
        return Ok(0);
    }
    let clock = ctx.shared.memcached.cas.as_ref().ok_or_else(|| err("SERVER_ERROR the memcached protocol is off"))?;
    let cas = clock.next(&ctx.shared.db)?;
    ctx.writes.put_item(key, (flags, cas), data, expiry.ms())?;
    Ok(cas)
}

/// Keeps the item at `key` with a new expiry time (flags and CAS as they
/// are, as memcached's touch leaves them).
pub(super) fn put_expiry(ctx: &mut Ctx<'_>, key: &[u8], value: &Value, expiry: Expiry) -> CmdResult {
    if expiry == Expiry::Past {
        ctx.writes.delete(key);
        return Ok(());
    }
    ctx.writes.put_copy(key, value, expiry.ms())
}

/// Appends (or prepends) `data` to `item`, which keeps its flags and
/// expiry; the new CAS. An item grown past the limit is memcached's
/// out-of-memory error.
pub(super) fn put_joined(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    item: Value,
    data: &[u8],
    append: bool,
) -> Result<u64, CmdError> {
    if !joined_fits(ctx, key, &item, data) {
        return Err(err("SERVER_ERROR out of memory storing object"));
    }
    let joined = match append {
        true => [item.data(), data].concat(),
        false => [data, item.data()].concat(),
    };
    let (flags, expiry) = (flags_of(&item), Expiry::from_ms(item.expiry_ms()));
    drop(item);
    let cas = put_item(ctx, key, flags, &joined, expiry)?;
    ctx.notify(STRING, "append", key);
    Ok(cas)
}

/// Whether `item` with `data` added still fits an item.
pub(super) fn joined_fits(ctx: &Ctx<'_>, key: &[u8], item: &Value, data: &[u8]) -> bool {
    item.data().len() + data.len() + key.len() + request::ITEM_OVERHEAD <= ctx.shared.config.memcached_item_size_max
}

/// Adds `delta` to `item`'s decimal number (`up`, wrapping at 2^64) or
/// subtracts it (down to 0), keeping its flags, and its expiry unless
/// `expiry` gives one: the new number and CAS. As memcached, a result
/// shorter than the old bytes is padded with spaces to their length.
pub(super) fn put_delta(
    ctx: &mut Ctx<'_>,
    key: &[u8],
    item: Value,
    up: bool,
    delta: u64,
    expiry: Option<Expiry>,
) -> Result<(u64, u64), CmdError> {
    let current =
        counter(item.data()).ok_or_else(|| err("CLIENT_ERROR cannot increment or decrement non-numeric value"))?;
    let next = if up { current.wrapping_add(delta) } else { current.saturating_sub(delta) };
    let mut text = itoa::Buffer::new().format(next).as_bytes().to_vec();
    if text.len() < item.data().len() {
        text.resize(item.data().len(), b' ');
    }
    let flags = flags_of(&item);
    let expiry = expiry.unwrap_or(Expiry::from_ms(item.expiry_ms()));
    drop(item);
    let cas = put_item(ctx, key, flags, &text, expiry)?;
    ctx.notify(STRING, if up { "incrby" } else { "decrby" }, key);
    Ok((next, cas))
}

/// The number of words the client sent (`noreply` included).
fn words(ctx: &Ctx<'_>, args: &[Bytes]) -> usize {
    args.len() + ctx.out.quiet as usize
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Store {
    Set,
    Add,
    Replace,
    Append,
    Prepend,
    Cas,
}

fn set(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    store(ctx, args, Store::Set)
}
fn add(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    store(ctx, args, Store::Add)
}
fn replace(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    store(ctx, args, Store::Replace)
}
fn append(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    store(ctx, args, Store::Append)
}
fn prepend(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    store(ctx, args, Store::Prepend)
}
fn cas_(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    store(ctx, args, Store::Cas)
}

/// A storage command: `[name, key, flags, exptime, bytes, (cas,) data]`,
/// its line checked by the parser.
fn store(ctx: &mut Ctx<'_>, args: &[Bytes], how: Store) -> CmdResult {
    let (key, data) = (&args[1], args.last().expect("a data block"));
    check_key(key)?;
    let flags = request::flags(&args[2]).ok_or_else(|| err(BAD_FORMAT))?;
    let exptime = request::exptime(&args[3]).ok_or_else(|| err(BAD_FORMAT))?;
    let stats = &ctx.shared.memcached.stats;
    bump(&stats.cmd_set);
    if how == Store::Set {
        put_item(ctx, key, flags, data, expiry(exptime))?;
        ctx.notify(STRING, "set", key);
        ctx.out.memcached_line(b"STORED");
        return Ok(());
    }
    let old = ctx.read(key)?;
    let item = old.as_ref().filter(|value| value.tag() == TYPE_STRING);
    let refusal: Option<&[u8]> = match (how, item) {
        (Store::Add, _) if old.is_some() => Some(b"NOT_STORED"),
        (Store::Replace | Store::Append | Store::Prepend, None) => Some(b"NOT_STORED"),
        (Store::Cas, None) => {
            bump(&stats.cas_misses);
            Some(b"NOT_FOUND")
        }
        (Store::Cas, Some(item)) => {
            let given = request::unsigned(&args[5]).ok_or_else(|| err(BAD_FORMAT))?;
            if cas_of(item) == given {
                bump(&stats.cas_hits);
                None
            } else {
                bump(&stats.cas_badval);
                Some(b"EXISTS")
            }
        }
        _ => None,
    };
    if let Some(refusal) = refusal {
        ctx.out.memcached_line(refusal);
        return Ok(());
    }
    let joining = item.is_some() && matches!(how, Store::Append | Store::Prepend);
    match old {
        Some(item) if joining => {
            put_joined(ctx, key, item, data, how == Store::Append)?;
        }
        _ => {
            drop(old);
            put_item(ctx, key, flags, data, expiry(exptime))?;
            ctx.notify(STRING, "set", key);
        }
    }
    ctx.out.memcached_line(b"STORED");
    Ok(())
}

fn get(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    retrieve(ctx, &args[1..], false, None)
}

fn gets(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    retrieve(ctx, &args[1..], true, None)
}

fn gat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    get_and_touch(ctx, args, false)
}

fn gats(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    get_and_touch(ctx, args, true)
}

fn get_and_touch(ctx: &mut Ctx<'_>, args: &[Bytes], with_cas: bool) -> CmdResult {
    let exptime = args.get(1).ok_or_else(|| err("ERROR"))?;
    let exptime = request::exptime(exptime).ok_or_else(|| err(BAD_EXPTIME))?;
    retrieve(ctx, &args[2..], with_cas, Some(expiry(exptime)))
}

/// `VALUE <key> <flags> <bytes> [<cas>]` and the data for each key that
/// holds an item, then `END`; with `touch`, each found item's expiry is set.
fn retrieve(ctx: &mut Ctx<'_>, keys: &[Bytes], with_cas: bool, touch: Option<Expiry>) -> CmdResult {
    if keys.is_empty() && touch.is_none() {
        return Err(err("ERROR"));
    }
    if keys.iter().any(|key| key.len() > MAX_KEY_BYTES) {
        return Err(err(BAD_FORMAT));
    }
    let stats = &ctx.shared.memcached.stats;
    let (mut hits, mut misses) = (0, 0);
    // A multi-get's reply is built whole before it is sent: bounded, or a
    // line naming one big item thousands of times would take the memory.
    let start = ctx.out.buf.len();
    let max_reply = ctx.shared.config.memcached_item_size_max.saturating_mul(MAX_GET_REPLY_ITEMS);
    for key in keys {
        let Some(item) = read_item(ctx, key)? else {
            misses += 1;
            continue;
        };
        if ctx.out.buf.len() - start + item.data().len() > max_reply {
            ctx.out.buf.truncate(start);
            return Err(err("SERVER_ERROR out of memory writing get response"));
        }
        hits += 1;
        let data = item.data();
        let mut numbers = itoa::Buffer::new();
        let out = &mut ctx.out.buf;
        out.reserve(key.len() + data.len() + 64);
        out.put_slice(b"VALUE ");
        out.put_slice(key);
        out.put_u8(b' ');
        out.put_slice(numbers.format(flags_of(&item)).as_bytes());
        out.put_u8(b' ');
        out.put_slice(numbers.format(data.len()).as_bytes());
        if with_cas {
            out.put_u8(b' ');
            out.put_slice(numbers.format(cas_of(&item)).as_bytes());
        }
        out.put_slice(b"\r\n");
        out.put_slice(data);
        out.put_slice(b"\r\n");
        if let Some(expiry) = touch {
            put_expiry(ctx, key, &item, expiry)?;
            ctx.notify(GENERIC, "expire", key);
        }
    }
    ctx.out.buf.put_slice(b"END\r\n");
    let keys = keys.len() as u64;
    count(&stats.cmd_get, keys);
    count(&stats.get_hits, hits);
    count(&stats.get_misses, misses);
    if touch.is_some() {
        count(&stats.cmd_touch, keys);
        count(&stats.touch_hits, hits);
        count(&stats.touch_misses, misses);
    }
    Ok(())
}

/// `delete <key> [0] [noreply]` (a 0 is what old clients sent as a hold time).
fn delete(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let words = words(ctx, args);
    if !(2..=4).contains(&words) {
        return Err(err("ERROR"));
    }
    let valid = args.len() == 2 || (args.len() == 3 && &args[2][..] == b"0");
    if !valid {
        return Err(err("CLIENT_ERROR bad command line format.  Usage: delete <key> [noreply]"));
    }
    let key = &args[1];
    if key.len() > MAX_KEY_BYTES {
        return Err(err(BAD_FORMAT));
    }
    let stats = &ctx.shared.memcached.stats;
    if ctx.read(key)?.is_some() {
        bump(&stats.delete_hits);
        ctx.writes.delete(key);
        ctx.notify(GENERIC, "del", key);
        ctx.out.memcached_line(b"DELETED");
    } else {
        bump(&stats.delete_misses);
        ctx.out.memcached_line(b"NOT_FOUND");
    }
    Ok(())
}

fn incr(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    arithmetic(ctx, args, true)
}

fn decr(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    arithmetic(ctx, args, false)
}

/// `incr|decr <key> <delta> [noreply]`: the item's decimal number plus
/// `delta` (wrapping at 2^64), or minus it (down to 0). As memcached, a
/// result shorter than the old bytes is padded with spaces to their length.
fn arithmetic(ctx: &mut Ctx<'_>, args: &[Bytes], up: bool) -> CmdResult {
    if !(3..=4).contains(&words(ctx, args)) {
        return Err(err("ERROR"));
    }
    let key = &args[1];
    if key.len() > MAX_KEY_BYTES {
        return Err(err(BAD_FORMAT));
    }
    // Missing when the delta's place held `noreply` (memcached reads the
    // word as the delta and fails, silently).
    let delta = args.get(2).and_then(|delta| request::unsigned(delta));
    let delta = delta.ok_or_else(|| err("CLIENT_ERROR invalid numeric delta argument"))?;
    let stats = &ctx.shared.memcached.stats;
    let (hits, misses) =
        if up { (&stats.incr_hits, &stats.incr_misses) } else { (&stats.decr_hits, &stats.decr_misses) };
    let Some(item) = read_item(ctx, key)? else {
        bump(misses);
        ctx.out.memcached_line(b"NOT_FOUND");
        return Ok(());
    };
    bump(hits);
    let (next, _) = put_delta(ctx, key, item, up, delta, None)?;
    ctx.out.memcached_line(itoa::Buffer::new().format(next).as_bytes());
    Ok(())
}

/// An item's bytes as memcached's `safe_strtoull` reads them: leading
/// white space, a number, then white space or the end.
pub(super) fn counter(data: &[u8]) -> Option<u64> {
    let space = |b: &u8| matches!(b, b' ' | b'\t' | b'\n' | b'\x0b' | b'\x0c' | b'\r');
    let start = data.iter().position(|b| !space(b))?;
    let rest = &data[start..];
    let end = rest.iter().position(space).unwrap_or(rest.len());
    request::unsigned(&rest[..end])
}

/// `touch <key> <exptime> [noreply]`.
fn touch(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if !(3..=4).contains(&words(ctx, args)) {
        return Err(err("ERROR"));
    }
    let key = &args[1];
    if key.len() > MAX_KEY_BYTES {
        return Err(err(BAD_FORMAT));
    }
    let exptime = args.get(2).and_then(|exptime| request::exptime(exptime)).ok_or_else(|| err(BAD_EXPTIME))?;
    let stats = &ctx.shared.memcached.stats;
    bump(&stats.cmd_touch);
    match read_item(ctx, key)? {
        Some(item) => {
            bump(&stats.touch_hits);
            put_expiry(ctx, key, &item, expiry(exptime))?;
            ctx.notify(GENERIC, "expire", key);
            ctx.out.memcached_line(b"TOUCHED");
        }
        None => {
            bump(&stats.touch_misses);
            ctx.out.memcached_line(b"NOT_FOUND");
        }
    }
    Ok(())
}

/// `flush_all [delay] [noreply]`: every key goes, now or once `delay`
/// seconds have passed (a later flush_all replaces a pending one).
fn flush_all(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if words(ctx, args) > 3 {
        return Err(err("ERROR"));
    }
    let delay = match args.get(1) {
        Some(delay) => request::exptime(delay).ok_or_else(|| err(BAD_EXPTIME))?,
        None => 0,
    };
    flush(ctx, delay)?;
    ctx.out.memcached_line(b"OK");
    Ok(())
}

/// Removes every key now, or once `delay` seconds have passed (an exptime:
/// a Unix time past 30 days).
pub(super) fn flush(ctx: &mut Ctx<'_>, delay: i64) -> CmdResult {
    let state = &ctx.shared.memcached;
    bump(&state.stats.cmd_flush);
    match expiry(delay) {
        Expiry::At(at) => state.flush_at.store(at, Ordering::Relaxed),
        _ => {
            state.flush_at.store(0, Ordering::Relaxed);
            crate::commands::clear_all(ctx.shared, ctx.writes)?;
        }
    }
    Ok(())
}

fn version(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    ctx.out.memcached_line(format!("VERSION {VERSION}").as_bytes());
    Ok(())
}

fn verbosity(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if !(2..=3).contains(&words(ctx, args)) {
        return Err(err("ERROR"));
    }
    let level = args.get(1).and_then(|level| request::unsigned(level));
    level.filter(|&n| n <= u32::MAX as u64).ok_or_else(|| err(BAD_FORMAT))?;
    ctx.out.memcached_line(b"OK");
    Ok(())
}

fn mn(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    ctx.out.memcached_line(b"MN");
    Ok(())
}

/// `cache_memlimit MB`: sets `maxmemory` (in megabytes, as memcached's
/// `-m`), keeping `maxmemory-policy`: with `noeviction` writes over the
/// limit fail, as under memcached's `-M`.
fn cache_memlimit(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let [_, limit] = args else { return Err(err("ERROR")) };
    let megabytes = request::unsigned(limit).ok_or_else(|| err("ERROR"))?;
    let memory = &ctx.shared.config.memory;
    let bytes = megabytes.saturating_mul(1 << 20);
    memory.set(&ctx.shared.db, bytes, memory.policy()).map_err(|reason| err(format!("SERVER_ERROR {reason}")))?;
    ctx.out.memcached_line(b"OK");
    Ok(())
}

fn shutdown(_ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    Err(err("ERROR: shutdown not enabled"))
}

fn meta_debug(_ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    Err(err("SERVER_ERROR the meta command me is not supported by ScaledKV (see the README)"))
}

/// `stats`, `stats settings`, `stats reset`; the slab and item views are
/// empty (there are no slabs).
fn stats(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let lines = match args.get(1).map(|a| &a[..]) {
        None => general(ctx.shared),
        Some(b"settings") => settings(ctx.shared),
        Some(b"reset") => {
            reset(&ctx.shared.memcached.stats);
            ctx.out.memcached_line(b"RESET");
            return Ok(());
        }
        Some(b"items" | b"slabs" | b"sizes" | b"conns" | b"extstore") => Vec::new(),
        Some(b"detail") => match args.get(2).map(|a| &a[..]) {
            Some(b"on" | b"off") => {
                ctx.out.memcached_line(b"OK");
                return Ok(());
            }
            Some(b"dump") => Vec::new(),
            _ => return Err(err("CLIENT_ERROR usage: stats detail on|off|dump")),
        },
        Some(_) => return Err(err("ERROR")),
    };
    for (name, value) in lines {
        ctx.out.memcached_line(format!("STAT {name} {value}").as_bytes());
    }
    ctx.out.memcached_line(b"END");
    Ok(())
}

/// `stats reset`: the counters a client may reset.
pub(super) fn reset(stats: &Stats) {
    for counter in [
        &stats.cmd_get,
        &stats.cmd_set,
        &stats.cmd_flush,
        &stats.cmd_touch,
        &stats.get_hits,
        &stats.get_misses,
        &stats.delete_hits,
        &stats.delete_misses,
        &stats.incr_hits,
        &stats.incr_misses,
        &stats.decr_hits,
        &stats.decr_misses,
        &stats.cas_hits,
        &stats.cas_misses,
        &stats.cas_badval,
        &stats.touch_hits,
        &stats.touch_misses,
        &stats.total_connections,
    ] {
        counter.store(0, Ordering::Relaxed);
    }
}

/// `stats`: the server's counters, as memcached names them.
pub(super) fn general(shared: &Shared) -> Vec<(&'static str, String)> {
    let stats = &shared.memcached.stats;
    let n = |counter: &AtomicU64| counter.load(Ordering::Relaxed).to_string();
    let (user, system) = crate::commands::cpu_seconds();
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default().as_secs();
    let db = shared.db.stats();
    let mut pairs = vec![
        ("pid", std::process::id().to_string()),
        ("uptime", shared.started.elapsed().as_secs().to_string()),
        ("time", now.to_string()),
        ("version", VERSION.to_string()),
        ("scaledkv_version", env!("CARGO_PKG_VERSION").to_string()),
        ("durability", shared.config.durability.to_string()),
        ("pointer_size", "64".into()),
        ("rusage_user", format!("{user:.6}")),
        ("rusage_system", format!("{system:.6}")),
        ("max_connections", shared.maxclients().to_string()),
        ("curr_connections", n(&stats.curr_connections)),
        ("total_connections", n(&stats.total_connections)),
        ("rejected_connections", n(&shared.stats.rejected_connections)),
        ("cmd_get", n(&stats.cmd_get)),
        ("cmd_set", n(&stats.cmd_set)),
        ("cmd_flush", n(&stats.cmd_flush)),
        ("cmd_touch", n(&stats.cmd_touch)),
        ("get_hits", n(&stats.get_hits)),
        ("get_misses", n(&stats.get_misses)),
        ("delete_misses", n(&stats.delete_misses)),
        ("delete_hits", n(&stats.delete_hits)),
        ("incr_misses", n(&stats.incr_misses)),
        ("incr_hits", n(&stats.incr_hits)),
        ("decr_misses", n(&stats.decr_misses)),
        ("decr_hits", n(&stats.decr_hits)),
        ("cas_misses", n(&stats.cas_misses)),
        ("cas_hits", n(&stats.cas_hits)),
        ("cas_badval", n(&stats.cas_badval)),
        ("touch_hits", n(&stats.touch_hits)),
        ("touch_misses", n(&stats.touch_misses)),
        ("auth_cmds", n(&stats.auth_cmds)),
        ("auth_errors", n(&stats.auth_errors)),
        ("bytes_read", n(&shared.stats.net_input_bytes)),
        ("bytes_written", n(&shared.stats.net_output_bytes)),
        // `maxmemory` (0: none), shared with the Redis port.
        ("limit_maxbytes", shared.config.memory.maxmemory().to_string()),
        ("threads", shared.config.io_threads().to_string()),
        ("bytes", db.live_bytes.to_string()),
        ("curr_items", shared.user_keys().to_string()),
        ("evictions", db.evicted_keys.to_string()),
    ];
    // memcached prints these with extstore, its SSD tier.
    if let Some(size) = shared.config.memory.ssd_size() {
        pairs.extend([
            ("get_extstore", db.ssd_tier_reads.to_string()),
            ("extstore_bytes_written", db.demoted_bytes.to_string()),
            ("extstore_bytes_used", db.ssd_tier_bytes.to_string()),
            ("extstore_limit_maxbytes", size.to_string()),
        ]);
    }
    pairs
}

/// `stats settings`.
pub(super) fn settings(shared: &Shared) -> Vec<(&'static str, String)> {
    let config = &shared.config;
    let mut settings = vec![
        ("maxbytes", shared.config.memory.maxmemory().to_string()),
        ("maxconns", shared.maxclients().to_string()),
        ("tcpport", shared.memcached.port.load(Ordering::Relaxed).to_string()),
        ("udpport", "0".into()),
        ("domain_socket", config.memcached_unixsocket.as_ref().map_or("NULL".into(), |p| p.display().to_string())),
        ("umask", format!("{:o}", config.memcached_unixsocketperm)),
        ("ssl_enabled", if config.memcached_tls { "yes" } else { "no" }.into()),
        ("inter", config.bind.clone()),
        ("evictions", if shared.config.memory.cache_capacity() > 0 { "on" } else { "off" }.into()),
        ("cas_enabled", "yes".into()),
        ("num_threads", config.io_threads().to_string()),
        ("binding_protocol", "auto-negotiate".into()),
        // A password is asked for by SASL PLAIN on binary connections.
        ("auth_enabled_sasl", if crate::memcache::open(shared) { "no" } else { "yes" }.into()),
        ("auth_enabled_ascii", if crate::memcache::open(shared) { "no" } else { "yes" }.into()),
        ("item_size_max", config.memcached_item_size_max.to_string()),
        ("idle_timeout", shared.timeout_secs().to_string()),
    ];
    if config.memcached_tls {
        // From Redis's settings, which make the context (`crate::tls`).
        let param = |name: &str| match shared.redis_params.value(name) {
            value if value.is_empty() => "NULL".to_string(),
            value => value,
        };
        let verify = match shared.redis_params.value("tls-auth-clients").as_str() {
            "no" => "0",
            "optional" => "1",
            _ => "2",
        };
        settings.extend([
            ("ssl_chain_cert", param("tls-cert-file")),
            ("ssl_key", param("tls-key-file")),
            ("ssl_verify_mode", verify.into()),
            ("ssl_ca_cert", param("tls-ca-cert-file")),
        ]);
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exptimes_are_relative_up_to_thirty_days_then_unix_times() {
        assert_eq!(expiry(0), Expiry::Never);
        assert_eq!(expiry(-1), Expiry::Past);
        let Expiry::At(at) = expiry(RELATIVE_MAX_SECS) else { panic!("relative") };
        assert!(at.abs_diff(now_ms() + RELATIVE_MAX_SECS as u64 * 1000) < 5_000);
        assert_eq!(expiry(RELATIVE_MAX_SECS + 1), Expiry::Past, "a Unix time in 1970");
        assert_eq!(expiry(4_000_000_000), Expiry::At(4_000_000_000_000));
    }

    #[test]
    fn counters_read_as_memcached_reads_them() {
        assert_eq!(counter(b"12"), Some(12));
        assert_eq!(counter(b" 12"), Some(12));
        assert_eq!(counter(b"5  "), Some(5));
        assert_eq!(counter(b"1 2"), Some(1));
        assert_eq!(counter(b"-0"), Some(0));
        assert_eq!(counter(b""), None);
        assert_eq!(counter(b"1ab"), None);
        assert_eq!(counter(b"123456789012345678901"), None);
    }

    #[test]
    fn every_command_is_found_by_its_exact_name() {
        for command in TABLE {
            assert!(std::ptr::eq(lookup(command.name.as_bytes()).unwrap(), command));
        }
        assert!(lookup(b"GET").is_none(), "memcached's names are case-sensitive");
    }
}
