//! Generic key commands: DEL, EXISTS, TYPE, expiry, RENAME, COPY, KEYS,
//! SCAN.

use std::collections::HashSet;
use std::ops::Bound;

use bytes::Bytes;
use scaledkv::now_ms;

use super::args::{eq, int};
use super::table::Table;
use super::{err, only_database_zero, subcommand_arity, unknown_subcommand, CmdError, CmdResult, Ctx};
use crate::keyspace::{
    glob_match, is_reserved, is_table, type_name, RESERVED, TYPE_HASH, TYPE_HASH_TABLE, TYPE_LIST, TYPE_LIST_TABLE,
    TYPE_STRING, TYPE_ZSET, TYPE_ZSET_TABLE,
};

pub fn del(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut seen = HashSet::new();
    let mut deleted = 0;
    for key in &args[1..] {
        if seen.insert(key) && ctx.read(key)?.is_some() {
            ctx.writes.delete(key);
            ctx.notify(crate::notify::GENERIC, "del", key);
            deleted += 1;
        }
    }
    ctx.out.int(deleted);
    Ok(())
}

pub fn exists(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut count = 0;
    for key in &args[1..] {
        count += ctx.read_untouched(key)?.is_some() as i64;
    }
    ctx.out.int(count);
    Ok(())
}

pub fn type_(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let name = match ctx.read_untouched(&args[1])? {
        Some(value) => type_name(value.tag()),
        None => "none",
    };
    ctx.out.simple(name);
    Ok(())
}

/// EXPIRE and friends: `at_ms` computes the absolute time from the
/// argument; NX XX GT LT as in Redis 7.
fn set_expiry(ctx: &mut Ctx<'_>, args: &[Bytes], command: &str, at_ms: impl Fn(i64) -> Option<i64>) -> CmdResult {
    let n = int(&args[2])?;
    let (mut nx, mut xx, mut gt, mut lt) = (false, false, false, false);
    for option in &args[3..] {
        if eq(option, "nx") {
            nx = true;
        } else if eq(option, "xx") {
            xx = true;
        } else if eq(option, "gt") {
            gt = true;
        } else if eq(option, "lt") {
            lt = true;
        } else {
            return Err(err(format!("ERR Unsupported option {}", String::from_utf8_lossy(option))));
        }
    }
    if nx && (xx || gt || lt) {
        return Err(err("ERR NX and XX, GT or LT options at the same time are not compatible"));
    }
    if gt && lt {
        return Err(err("ERR GT and LT options at the same time are not compatible"));
    }
    let at = at_ms(n).ok_or_else(|| err(format!("ERR invalid expire time in '{command}' command")))?;
    let Some(value) = ctx.read(&args[1])? else {
        ctx.out.int(0);
        return Ok(());
    };
    let current = value.expiry_ms();
    // No TTL counts as an infinite one for GT and LT.
    let allowed = match current {
        None => !xx && !gt,
        Some(current) => !nx && (!gt || at > current as i64) && (!lt || at < current as i64),
    };
    if !allowed {
        ctx.out.int(0);
        return Ok(());
    }
    if at <= now_ms() as i64 {
        ctx.writes.delete(&args[1]);
        ctx.notify(crate::notify::GENERIC, "del", &args[1]);
    } else {
        ctx.writes.put_copy(&args[1], &value, Some(at as u64))?;
        ctx.notify(crate::notify::GENERIC, "expire", &args[1]);
    }
    ctx.out.int(1);
    Ok(())
}

pub fn expire(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    set_expiry(ctx, args, "expire", |s| s.checked_mul(1000)?.checked_add(now_ms() as i64))
}

pub fn pexpire(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    set_expiry(ctx, args, "pexpire", |ms| ms.checked_add(now_ms() as i64))
}

pub fn expireat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    set_expiry(ctx, args, "expireat", |s| s.checked_mul(1000))
}

pub fn pexpireat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    set_expiry(ctx, args, "pexpireat", Some)
}

/// -2: no key; -1: no expiry; else `f(expiry_ms)`.
fn expiry_reply(ctx: &mut Ctx<'_>, key: &[u8], f: impl Fn(u64) -> i64) -> CmdResult {
    let reply = match ctx.read_untouched(key)? {
        None => -2,
        Some(value) => value.expiry_ms().map_or(-1, f),
    };
    ctx.out.int(reply);
    Ok(())
}

pub fn ttl(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    expiry_reply(ctx, &args[1], |at| ((at.saturating_sub(now_ms()) + 500) / 1000) as i64)
}

pub fn pttl(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    expiry_reply(ctx, &args[1], |at| at.saturating_sub(now_ms()) as i64)
}

pub fn expiretime(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    expiry_reply(ctx, &args[1], |at| (at / 1000) as i64)
}

pub fn pexpiretime(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    expiry_reply(ctx, &args[1], |at| at as i64)
}

pub fn persist(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    match ctx.read(&args[1])? {
        Some(value) if value.expiry_ms().is_some() => {
            ctx.writes.put_copy(&args[1], &value, None)?;
            ctx.notify(crate::notify::GENERIC, "persist", &args[1]);
            ctx.out.int(1);
        }
        _ => ctx.out.int(0),
    }
    Ok(())
}

fn rename_to(ctx: &mut Ctx<'_>, args: &[Bytes], only_if_new: bool) -> CmdResult {
    let Some(value) = ctx.read(&args[1])? else {
        return Err(err("ERR no such key"));
    };
    if only_if_new && ctx.read(&args[2])?.is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    if args[1] != args[2] {
        ctx.writes.note_pushed();
        ctx.writes.delete(&args[1]);
        ctx.writes.put_copy(&args[2], &value, value.expiry_ms())?;
        // The key keeps its LFU counter, as Redis moves its object.
        if let Some(counter) = ctx.shared.db.access_frequency(&args[1]) {
            ctx.shared.db.raise_access_frequency(&args[2], counter);
        }
        if is_table(value.tag()) {
            super::table::moved(ctx.writes, &args[2], &Table::of(&value)?)?;
        }
        ctx.notify(crate::notify::GENERIC, "rename_from", &args[1]);
        ctx.notify(crate::notify::GENERIC, "rename_to", &args[2]);
    }
    if only_if_new {
        ctx.out.int(1);
    } else {
        ctx.out.ok();
    }
    Ok(())
}

pub fn rename(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    rename_to(ctx, args, false)
}

pub fn renamenx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    rename_to(ctx, args, true)
}

/// COPY source destination [DB destination-db] [REPLACE]: the value and
/// its expiry time; 0 if the source is missing or the destination exists
/// (without REPLACE). Only database 0 exists, as for SELECT.
pub fn copy(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut replace = false;
    let mut i = 3;
    while i < args.len() {
        if eq(&args[i], "replace") {
            replace = true;
            i += 1;
        } else if eq(&args[i], "db") && i + 1 < args.len() {
            only_database_zero(super::args::int32(&args[i + 1])? as i64)?;
            i += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    if args[1] == args[2] {
        return Err(err("ERR source and destination objects are the same"));
    }
    let Some(value) = ctx.read(&args[1])? else {
        ctx.out.int(0);
        return Ok(());
    };
    if !replace && ctx.peek(&args[2])?.is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    ctx.writes.note_pushed();
    ctx.notify(crate::notify::GENERIC, "copy_to", &args[2]);
    if value.tag() == crate::keyspace::TYPE_STREAM_TABLE {
        super::streams::copy(ctx, &args[2], &value)?;
        ctx.out.int(1);
        return Ok(());
    }
    if value.tag() == TYPE_LIST_TABLE {
        // Renumbered from the first position.
        let elements = super::lists::elements_of(ctx, &args[1], &value)?;
        super::lists::store_new(ctx, &args[2], &elements, value.expiry_ms())?;
        ctx.out.int(1);
        return Ok(());
    }
    if is_table(value.tag()) {
        // A table of its own, field by field, as Redis copies a hash.
        let table = Table::of(&value)?;
        let pairs = super::table::entries(ctx, &table, None, usize::MAX)?;
        let mut copy = super::table::fill(ctx, &args[2], table.tag, pairs.iter().map(|(f, v)| (&f[..], &v[..])))?;
        // A sorted set's member count comes along.
        copy.head = table.head;
        super::table::store(ctx, &args[2], &copy, value.expiry_ms())?;
        ctx.out.int(1);
        return Ok(());
    }
    ctx.writes.put_copy(&args[2], &value, value.expiry_ms())?;
    ctx.out.int(1);
    Ok(())
}

pub fn keys(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let pattern = &args[1];
    let all = pattern.as_ref() == b"*";
    let mut matched = Vec::new();
    let mut iter = ctx.db().range::<&[u8], _>(..RESERVED);
    while let Some(item) = iter.next_ref() {
        let (key, _) = item?;
        if all || glob_match(pattern, key) {
            matched.push(key.to_vec());
        }
    }
    drop(iter);
    // Inside a transaction or a script: with what it wrote before.
    let pending = ctx.writes.pending_user_keys(Bound::Unbounded);
    if !pending.is_empty() {
        let mut merged: std::collections::BTreeSet<Vec<u8>> = matched.into_iter().collect();
        for (key, holds) in pending {
            if holds.is_none() {
                merged.remove(&key);
            } else if all || glob_match(pattern, &key) {
                merged.insert(key);
            }
        }
        matched = merged.into_iter().collect();
    }
    ctx.out.array(matched.len());
    for key in &matched {
        ctx.out.bulk(key);
    }
    Ok(())
}

/// A SCAN-family cursor as Redis reads one (`strtoul`): an optional sign
/// (a negative number wraps around), decimal digits, nothing else; an
/// empty argument is 0.
pub fn scan_cursor(arg: &[u8]) -> Result<u64, CmdError> {
    let invalid = || err("ERR invalid cursor");
    let (negative, digits) = match arg.first() {
        Some(b'-') => (true, &arg[1..]),
        Some(b'+') => (false, &arg[1..]),
        _ => (false, arg),
    };
    if digits.is_empty() != arg.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return Err(invalid());
    }
    let mut value: u64 = 0;
    for &digit in digits {
        value = value.checked_mul(10).and_then(|v| v.checked_add((digit - b'0') as u64)).ok_or_else(invalid)?;
    }
    Ok(if negative { value.wrapping_neg() } else { value })
}

/// The options of SCAN (`with_type`), HSCAN and SSCAN.
pub struct ScanOptions<'a> {
    /// COUNT, 10 unless given: how many entries a page examines.
    pub count: usize,
    pub pattern: Option<&'a Bytes>,
    pub type_filter: Option<&'a Bytes>,
}

/// Parses `options` (COUNT n, MATCH pattern, and TYPE t for SCAN) as Redis
/// does: a COUNT below 1, or anything else, is a syntax error.
pub fn scan_options(options: &[Bytes], with_type: bool) -> Result<ScanOptions<'_>, CmdError> {
    let mut parsed = ScanOptions { count: 10, pattern: None, type_filter: None };
    for pair in options.chunks(2) {
        let [option, value] = pair else { return Err(CmdError::Syntax) };
        if eq(option, "count") {
            let n = int(value)?;
            if n < 1 {
                return Err(CmdError::Syntax);
            }
            parsed.count = n.min(1 << 20) as usize;
        } else if eq(option, "match") {
            parsed.pattern = Some(value);
        } else if eq(option, "type") && with_type {
            parsed.type_filter = Some(value);
        } else {
            return Err(CmdError::Syntax);
        }
    }
    Ok(parsed)
}

/// A SCAN-family reply: the next cursor, then `items` (each one bulk
/// string or more).
pub fn scan_reply<'i, I: IntoIterator<Item = &'i [u8]>>(out: &mut crate::resp::Out, next: u64, len: usize, items: I) {
    out.array(2);
    out.bulk(next.to_string().as_bytes());
    out.array(len);
    for item in items {
        out.bulk(item);
    }
}

/// SCAN walks the ordered key space. The cursor is a number (clients parse
/// it as one); the server maps it to the last key returned. Cursors are
/// kept for the most recent `MAX_CURSORS` scans.
pub fn scan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let cursor = scan_cursor(&args[1])?;
    let ScanOptions { count, pattern, type_filter } = scan_options(&args[2..], true)?;
    let start = if cursor == 0 {
        Vec::new()
    } else {
        match ctx.shared.cursors.lock().get(cursor) {
            Some(key) => key,
            None => return Err(err("ERR invalid cursor")),
        }
    };
    let mut keys = Vec::new();
    let mut last: Option<Vec<u8>> = None;
    let mut examined = 0;
    let lower = if cursor == 0 { Bound::Unbounded } else { Bound::Excluded(start.as_slice()) };
    // Inside a transaction or a script, what it wrote before is merged in
    // key order: its puts between the engine's keys, its deletes skipped.
    let pending = ctx.writes.pending_user_keys(lower);
    let mut pending = pending.into_iter().peekable();
    let mut iter = ctx.db().range::<&[u8], _>((lower, Bound::Excluded(RESERVED)));
    let mut engine = iter.next_ref().transpose()?;
    while examined < count {
        let (key, kind): (&[u8], Option<u8>) = match (&engine, pending.peek()) {
            (None, None) => break,
            (Some((key, value)), Some((next, _))) if *key < next.as_slice() => {
                (key, Some(value.first().copied().unwrap_or(TYPE_STRING)))
            }
            (Some((key, value)), None) => (key, Some(value.first().copied().unwrap_or(TYPE_STRING))),
            (_, Some((next, kind))) => (next.as_slice(), *kind),
        };
        let key = key.to_vec();
        if pending.peek().is_some_and(|(next, _)| *next == key) {
            pending.next();
        }
        if engine.as_ref().is_some_and(|(found, _)| *found == key.as_slice()) {
            engine = iter.next_ref().transpose()?;
        }
        let Some(kind) = kind else { continue };
        examined += 1;
        let type_ok = type_filter.as_ref().is_none_or(|t| eq(t, type_name(kind)));
        if type_ok && pattern.as_ref().is_none_or(|p| glob_match(p, &key)) {
            keys.push(key.clone());
        }
        last = Some(key);
    }
    drop(iter);
    let next = match last {
        Some(key) if examined >= count => ctx.shared.cursors.lock().insert(key),
        _ => 0,
    };
    scan_reply(ctx.out, next, keys.len(), keys.iter().map(Vec::as_slice));
    Ok(())
}

/// Picks a key near a random point of the key space (keys after large gaps
/// are likelier; Redis's choice is uniform over its hash table instead).
pub fn randomkey(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let _ = args;
    let probe: [u8; 8] = rand_bytes();
    let after = if is_reserved(&probe) { None } else { first_key_from(ctx, &probe)? };
    let found = match after {
        Some(key) => Some(key),
        None => first_key_from(ctx, b"")?,
    };
    match found {
        Some(key) => ctx.out.bulk(&key),
        None => ctx.out.null(),
    }
    Ok(())
}

/// The first client key at or after `from`: the engine's, or inside a
/// transaction or a script, with what it wrote before merged in.
fn first_key_from(ctx: &Ctx<'_>, from: &[u8]) -> Result<Option<Vec<u8>>, CmdError> {
    let pending = ctx.writes.pending_user_keys(Bound::Included(from));
    let mut engine = None;
    let mut iter = ctx.db().range::<&[u8], _>(from..RESERVED);
    while let Some(item) = iter.next_ref() {
        let (key, _) = item?;
        if !matches!(pending.get(key), Some(None)) {
            engine = Some(key.to_vec());
            break;
        }
    }
    let put = pending.into_iter().find(|(_, kind)| kind.is_some()).map(|(key, _)| key);
    Ok(match (engine, put) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    })
}

fn rand_bytes() -> [u8; 8] {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u64(now_ms());
    hasher.finish().to_le_bytes()
}

/// SCAN cursors: number → the last key returned.
#[derive(Default)]
pub struct Cursors {
    next: u64,
    keys: std::collections::VecDeque<(u64, Vec<u8>)>,
}

const MAX_CURSORS: usize = 4096;

impl Cursors {
    pub fn insert(&mut self, key: Vec<u8>) -> u64 {
        self.next += 1;
        if self.keys.len() == MAX_CURSORS {
            self.keys.pop_front();
        }
        self.keys.push_back((self.next, key));
        self.next
    }

    pub fn get(&self, cursor: u64) -> Option<Vec<u8>> {
        // Cursors are handed out in order, so a binary search finds one.
        let at = self.keys.binary_search_by_key(&cursor, |(c, _)| *c).ok()?;
        Some(self.keys[at].1.clone())
    }
}

/// MOVE: with one database (as Redis with `databases 1`) there is nowhere
/// to move a key; Redis's errors, which it checks before the key.
pub fn move_(_ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let index = super::args::int32(&args[2])?;
    only_database_zero(index as i64)?;
    Err(err("ERR source and destination objects are the same"))
}

/// OBJECT: ScaledKV keeps every string as its bytes in the log, so it has
/// no encodings or shared objects of its own; ENCODING and REFCOUNT answer
/// what Redis answers for a string SET to the same bytes (or loaded from
/// its disk), which is what clients that branch on them expect. FREQ is
/// the engine's LFU counter under an `-lfu` policy (`scaledkv::Lfu`), and
/// Redis's error under another; IDLETIME needs per-key access times,
/// which are not kept. None of them counts as an access of the key.
pub fn object(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    match (sub.as_str(), args.len()) {
        ("help", 2) => {
            let lines = [
                "OBJECT <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
                "ENCODING <key>",
                "    Return the kind of internal representation Redis would use for the value",
                "    associated with a <key> (ScaledKV stores every value as its bytes).",
                "FREQ <key>",
                "    Return the access frequency index of the <key>. The returned integer is",
                "    proportional to the logarithm of the recent access frequency of the key.",
                "IDLETIME <key>",
                "    Not supported by ScaledKV: it keeps no per-key access time.",
                "REFCOUNT <key>",
                "    Return the number of references Redis would keep to the value.",
                "HELP",
                "    Print this help.",
            ];
            ctx.out.help(&lines);
        }
        ("encoding" | "refcount" | "idletime" | "freq", 3) => {
            // Counted, but no `keymiss`: Redis looks it up with LOOKUP_NONOTIFY.
            let Some(value) = ctx.read_quietly(&args[2])? else {
                ctx.out.null();
                return Ok(());
            };
            if sub == "freq" {
                let lfu = ctx.shared.config.memory.lfu().and(ctx.shared.db.access_frequency(&args[2]));
                ctx.out.int(lfu.ok_or_else(no_lfu)?.into());
                return Ok(());
            }
            if value.tag() != TYPE_STRING {
                match sub.as_str() {
                    "encoding" if value.tag() == TYPE_HASH || value.tag() == TYPE_HASH_TABLE => {
                        ctx.out.bulk(super::hashes::encoding(&value)?.as_bytes())
                    }
                    // Redis 7.0 keeps every list as a quicklist.
                    "encoding" if value.tag() == TYPE_LIST || value.tag() == TYPE_LIST_TABLE => {
                        ctx.out.bulk(b"quicklist")
                    }
                    "encoding" if value.tag() == TYPE_ZSET || value.tag() == TYPE_ZSET_TABLE => {
                        ctx.out.bulk(super::zsets::encoding(&value)?.as_bytes())
                    }
                    "encoding" if value.tag() == crate::keyspace::TYPE_STREAM_TABLE => ctx.out.bulk(b"stream"),
                    "encoding" => ctx.out.bulk(super::sets::encoding(&value)?.as_bytes()),
                    "refcount" => ctx.out.int(1),
                    _ => return Err(no_idletime()),
                }
                return Ok(());
            }
            let data = value.string()?;
            // Redis stores a decimal that fits a long as an integer, and
            // shares the ones below 10,000 among all keys.
            let integer = super::args::parse_i64(data);
            match sub.as_str() {
                "encoding" => ctx.out.bulk(match integer {
                    Some(_) => b"int",
                    None if data.len() <= 44 => b"embstr",
                    None => b"raw",
                }),
                "refcount" => {
                    ctx.out.int(if integer.is_some_and(|n| (0..10_000).contains(&n)) { 2147483647 } else { 1 })
                }
                _ => return Err(no_idletime()),
            }
        }
        ("help" | "encoding" | "refcount" | "idletime" | "freq", _) => return Err(subcommand_arity("object", &sub)),
        _ => return Err(unknown_subcommand("object", &args[1])),
    }
    Ok(())
}

fn no_lfu() -> CmdError {
    err("ERR An LFU maxmemory policy is not selected, access frequency not tracked. Please note that when switching between policies at runtime LRU and LFU data will take some time to adjust.")
}

fn no_idletime() -> CmdError {
    err("ERR OBJECT IDLETIME is not supported by ScaledKV yet (no per-key access times)")
}
