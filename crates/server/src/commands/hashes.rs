//! Hash commands, with Redis 7.0's replies and errors. A hash within
//! Redis's listpack limits, or of at most 8 KiB, is one engine value
//! (`crate::hash`): a write decodes it, changes it and writes it back
//! whole. One past both (more than 512 fields, or a field or value over 64
//! bytes, and more than 8 KiB) becomes a table with an engine entry per
//! field (`table`), as Redis turns it into a hash table; it never goes
//! back. Both keep the hash's expiry time.

use std::borrow::Cow;

use bytes::Bytes;
use rand::Rng;

use super::args::{eq, float, int, parse_i64};
use super::table::{self, Table};
use super::{err, CmdError, CmdResult, Ctx};
use crate::hash::{self, Fields};
use crate::keyspace::{expiry_of, Entries, Value, TYPE_HASH, TYPE_HASH_TABLE};
use crate::resp::reply::format_double;
use crate::resp::{Out, Protocol};

/// The hash at `key`: None if missing, WRONGTYPE for another type.
fn read_hash(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Value>, CmdError> {
    ctx.read_collection(key, TYPE_HASH, TYPE_HASH_TABLE)
}

/// (field, value) pairs borrowed from a listpack or read from a table.
type Pairs<'a> = Vec<(Cow<'a, [u8]>, Cow<'a, [u8]>)>;

/// A hash a command reads or changes, in either encoding (a missing key is
/// an empty listpack).
enum Open<'v> {
    Listpack(Fields<'v>),
    Table(Table),
}

impl<'v> Open<'v> {
    fn of(value: &'v Option<Value>) -> Result<Open<'v>, CmdError> {
        Ok(match value {
            Some(value) if value.tag() == TYPE_HASH_TABLE => Open::Table(Table::of(value)?),
            Some(value) => Open::Listpack(Fields::decode(value.data())?),
            None => Open::Listpack(Fields::default()),
        })
    }

    fn get(&self, ctx: &mut Ctx<'_>, field: &[u8]) -> Result<Option<Cow<'_, [u8]>>, CmdError> {
        Ok(match self {
            Open::Listpack(fields) => fields.get(field).map(Cow::Borrowed),
            Open::Table(table) => table::get(ctx, table, field)?.map(Cow::Owned),
        })
    }

    /// Sets `field`; true if it is new.
    fn set(&mut self, ctx: &mut Ctx<'_>, field: &'v [u8], value: Cow<'v, [u8]>) -> Result<bool, CmdError> {
        match self {
            Open::Listpack(fields) => Ok(fields.set(field, value)),
            Open::Table(table) => table::set(ctx, table, field, &value),
        }
    }

    /// Removes `field`; true if it was there.
    fn remove(&mut self, ctx: &mut Ctx<'_>, field: &[u8]) -> Result<bool, CmdError> {
        match self {
            Open::Listpack(fields) => Ok(fields.remove(field)),
            Open::Table(table) => table::remove(ctx, table, field),
        }
    }

    /// Every (field, value) pair: a listpack's in insertion order, a
    /// table's in field order.
    fn pairs(&self, ctx: &mut Ctx<'_>) -> Result<Pairs<'_>, CmdError> {
        Ok(match self {
            Open::Listpack(fields) => fields.iter().map(|(f, v)| (Cow::Borrowed(f), Cow::Borrowed(v))).collect(),
            Open::Table(table) => table::entries(ctx, table, None, usize::MAX)?
                .into_iter()
                .map(|(f, v)| (Cow::Owned(f), Cow::Owned(v)))
                .collect(),
        })
    }

    /// Where the command's writes so far are a whole state of the hash: a
    /// table's commit as a piece when due (`table::piece_point`).
    fn piece_point(&mut self, ctx: &mut Ctx<'_>, key: &[u8], expiry: Option<u64>, pieces: bool) -> CmdResult {
        match self {
            Open::Table(table) => table::piece_point(ctx, key, table, expiry, pieces),
            Open::Listpack(_) => Ok(()),
        }
    }

    fn is_empty(&self) -> bool {
        match self {
            Open::Listpack(fields) => fields.is_empty(),
            Open::Table(table) => table.count == 0,
        }
    }

    /// `store` after noting keyspace event `event` (and `del` when the
    /// hash is left empty), in Redis's order.
    fn store_noting(self, ctx: &mut Ctx<'_>, key: &[u8], expiry: Option<u64>, event: &'static str) -> CmdResult {
        let emptied = self.is_empty();
        ctx.store_noting(crate::notify::HASH, event, key, emptied, |ctx| self.store(ctx, key, expiry))
    }

    /// Writes the hash back to `key` with `expiry`: a listpack past
    /// Redis's limits becomes a table, an empty hash goes.
    fn store(self, ctx: &mut Ctx<'_>, key: &[u8], expiry: Option<u64>) -> CmdResult {
        match self {
            Open::Table(table) => table::store(ctx, key, &table, expiry),
            Open::Listpack(fields) if fields.is_empty() => {
                ctx.writes.delete(key);
                Ok(())
            }
            Open::Listpack(fields) => {
                let data = fields.encode();
                if table::stays_one_value(fields.hashtable, data.len()) {
                    ctx.writes.put(key, TYPE_HASH, &data, expiry)
                } else {
                    table::create(ctx, key, TYPE_HASH_TABLE, fields.iter(), expiry)
                }
            }
        }
    }
}

/// HSET and HMSET: sets every field/value pair; the number of new fields.
/// Set in a table, fields past one piece are committed in pieces
/// (`table::piece_point`): a crash leaves some of them set.
fn set_pairs(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Result<i64, CmdError> {
    if !args.len().is_multiple_of(2) {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
        return Err(err(format!("ERR wrong number of arguments for '{name}' command")));
    }
    let pieces = ctx.writes.may_commit_in_pieces();
    let value = read_hash(ctx, &args[1])?;
    let mut hash = Open::of(&value)?;
    if pieces && matches!(hash, Open::Table(_)) {
        args[2..].chunks(2).try_for_each(|pair| table::check_field_len(pair[0].len()))?;
    }
    let expiry = expiry_of(&value);
    let mut added = 0;
    for pair in args[2..].chunks(2) {
        added += hash.set(ctx, &pair[0], Cow::Borrowed(&pair[1]))? as i64;
        hash.piece_point(ctx, &args[1], expiry, pieces)?;
    }
    hash.store_noting(ctx, &args[1], expiry, "hset")?;
    Ok(added)
}

pub fn hset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let added = set_pairs(ctx, args)?;
    ctx.out.int(added);
    Ok(())
}

pub fn hmset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    set_pairs(ctx, args)?;
    ctx.out.ok();
    Ok(())
}

pub fn hsetnx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let value = read_hash(ctx, &args[1])?;
    let mut hash = Open::of(&value)?;
    if hash.get(ctx, &args[2])?.is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    hash.set(ctx, &args[2], Cow::Borrowed(&args[3]))?;
    hash.store_noting(ctx, &args[1], expiry_of(&value), "hset")?;
    ctx.out.int(1);
    Ok(())
}

/// Hands the field `args[2]` of the hash at `args[1]` to `reply`: read in
/// place from a listpack (nothing decoded), by a point read from a table.
fn with_field(ctx: &mut Ctx<'_>, args: &[Bytes], reply: impl FnOnce(&mut Out, Option<&[u8]>)) -> CmdResult {
    let value = read_hash(ctx, &args[1])?;
    match &value {
        Some(v) if v.tag() == TYPE_HASH => reply(ctx.out, hash::get(v.data(), &args[2])?),
        Some(v) => {
            let found = table::get(ctx, &Table::of(v)?, &args[2])?;
            reply(ctx.out, found.as_deref());
        }
        None => reply(ctx.out, None),
    }
    Ok(())
}

pub fn hget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    with_field(ctx, args, |out, value| out.bulk_opt(value))
}

/// `field` of the hash `value` (SORT's BY and GET patterns).
pub fn field_of(ctx: &mut Ctx<'_>, value: Value, field: &[u8]) -> Result<Option<Vec<u8>>, CmdError> {
    let value = Some(value);
    let hash = Open::of(&value)?;
    Ok(hash.get(ctx, field)?.map(Cow::into_owned))
}

pub fn hmget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let value = read_hash(ctx, &args[1])?;
    let hash = Open::of(&value)?;
    let mut found = Vec::with_capacity(args.len() - 2);
    for field in &args[2..] {
        found.push(hash.get(ctx, field)?.map(Cow::into_owned));
    }
    ctx.out.array(found.len());
    for value in &found {
        ctx.out.bulk_opt(value.as_deref());
    }
    Ok(())
}

/// HDEL, in pieces past one (as HSET).
pub fn hdel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let pieces = ctx.writes.may_commit_in_pieces();
    let value = read_hash(ctx, &args[1])?;
    let mut hash = Open::of(&value)?;
    let expiry = expiry_of(&value);
    let mut deleted = 0;
    for field in &args[2..] {
        deleted += hash.remove(ctx, field)? as i64;
        hash.piece_point(ctx, &args[1], expiry, pieces)?;
    }
    if deleted > 0 {
        hash.store_noting(ctx, &args[1], expiry, "hdel")?;
    }
    ctx.out.int(deleted);
    Ok(())
}

pub fn hlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let len = match read_hash(ctx, &args[1])? {
        Some(value) if value.tag() == TYPE_HASH => hash::count(value.data())?,
        Some(value) => Table::of(&value)?.count as usize,
        None => 0,
    };
    ctx.out.int(len as i64);
    Ok(())
}

pub fn hstrlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    with_field(ctx, args, |out, value| out.int(value.map_or(0, <[u8]>::len) as i64))
}

pub fn hexists(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    with_field(ctx, args, |out, value| out.int(value.is_some() as i64))
}

/// HKEYS, HVALS and HGETALL: what of each pair goes into the reply.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    Fields,
    Values,
    Both,
}

fn list(ctx: &mut Ctx<'_>, key: &[u8], part: Part) -> CmdResult {
    let value = read_hash(ctx, key)?;
    let hash = Open::of(&value)?;
    let pairs = hash.pairs(ctx)?;
    match part {
        Part::Both => ctx.out.map(pairs.len()),
        _ => ctx.out.array(pairs.len()),
    }
    for (field, value) in &pairs {
        if part != Part::Values {
            ctx.out.bulk(field);
        }
        if part != Part::Fields {
            ctx.out.bulk(value);
        }
    }
    Ok(())
}

pub fn hkeys(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    list(ctx, &args[1], Part::Fields)
}

pub fn hvals(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    list(ctx, &args[1], Part::Values)
}

pub fn hgetall(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    list(ctx, &args[1], Part::Both)
}

pub fn hincrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let delta = int(&args[3])?;
    let value = read_hash(ctx, &args[1])?;
    let mut hash = Open::of(&value)?;
    let current = match hash.get(ctx, &args[2])? {
        Some(text) => parse_i64(&text).ok_or_else(|| err("ERR hash value is not an integer"))?,
        None => 0,
    };
    let new = current.checked_add(delta).ok_or_else(|| err("ERR increment or decrement would overflow"))?;
    let text = itoa::Buffer::new().format(new).as_bytes().to_vec();
    hash.set(ctx, &args[2], Cow::Owned(text))?;
    hash.store_noting(ctx, &args[1], expiry_of(&value), "hincrby")?;
    ctx.out.int(new);
    Ok(())
}

pub fn hincrbyfloat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let delta = float(&args[3])?;
    if delta.is_infinite() {
        return Err(err("ERR value is NaN or Infinity"));
    }
    let value = read_hash(ctx, &args[1])?;
    let mut hash = Open::of(&value)?;
    let current = match hash.get(ctx, &args[2])? {
        Some(text) => float(&text).map_err(|_| err("ERR hash value is not a float"))?,
        None => 0.0,
    };
    let new = current + delta;
    if !new.is_finite() {
        return Err(err("ERR increment would produce NaN or Infinity"));
    }
    let text = format_double(new);
    hash.set(ctx, &args[2], Cow::Owned(text.clone().into_bytes()))?;
    hash.store_noting(ctx, &args[1], expiry_of(&value), "hincrbyfloat")?;
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

/// A table's fields picked at random, with their values when asked for
/// (`picks::random_fields`); None where the pick must list the hash instead:
/// not a table, too many picks, or a reader without locks whose table
/// changed meanwhile.
fn table_picks(
    ctx: &mut Ctx<'_>,
    hash: &Open<'_>,
    count: Option<i64>,
    with_values: bool,
) -> Result<Option<Pairs<'static>>, CmdError> {
    let Open::Table(table) = hash else { return Ok(None) };
    let Some(fields) = super::picks::random_fields(ctx, table, b"", table.count, count)? else { return Ok(None) };
    let mut picks = Vec::with_capacity(fields.len());
    for field in fields {
        let value = match with_values {
            true => match table::get(ctx, table, &field)? {
                Some(value) => value,
                None => return Ok(None),
            },
            false => Vec::new(),
        };
        picks.push((Cow::Owned(field), Cow::Owned(value)));
    }
    Ok(Some(picks))
}

/// HRANDFIELD key [count [WITHVALUES]]: Redis 7.0's cases. A positive
/// count gives distinct fields (the whole hash, in its order, when the
/// count reaches its size; else a sample kept in that order, as Redis
/// samples a listpack), a negative one allows repeats. A table's picks
/// are found in the index (`table_picks`, `picks::random_fields`) up to
/// half its size (its size with repeats); more read it whole.
pub fn hrandfield(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len() == 2 {
        let value = read_hash(ctx, &args[1])?;
        if value.is_none() {
            ctx.out.null();
            return Ok(());
        }
        let hash = Open::of(&value)?;
        if let Some(picks) = table_picks(ctx, &hash, None, false)? {
            ctx.out.bulk(&picks[0].0);
            return Ok(());
        }
        let pairs = hash.pairs(ctx)?;
        let pick = rand::thread_rng().gen_range(0..pairs.len().max(1));
        match pairs.get(pick) {
            Some((field, _)) => ctx.out.bulk(field),
            None => ctx.out.null(),
        }
        return Ok(());
    }
    let count = super::args::random_count(&args[2])?;
    let with_values = match args.len() {
        3 => false,
        4 if eq(&args[3], "withvalues") => true,
        _ => return Err(CmdError::Syntax),
    };
    if with_values && !(-i64::MAX / 2..=i64::MAX / 2).contains(&count) {
        return Err(err("ERR value is out of range"));
    }
    let value = read_hash(ctx, &args[1])?;
    let hash = Open::of(&value)?;
    let (pairs, picks) = match table_picks(ctx, &hash, Some(count), with_values)? {
        Some(pairs) => {
            let all = (0..pairs.len()).collect();
            (pairs, all)
        }
        None => {
            let pairs = if count == 0 { Vec::new() } else { hash.pairs(ctx)? };
            let picks = super::random_picks(pairs.len(), count);
            (pairs, picks)
        }
    };
    let nested = with_values && ctx.out.protocol == Protocol::Resp3;
    ctx.out.array(if with_values && !nested { picks.len() * 2 } else { picks.len() });
    for at in picks {
        let (field, value) = &pairs[at];
        if nested {
            ctx.out.array(2);
        }
        ctx.out.bulk(field);
        if with_values {
            ctx.out.bulk(value);
        }
    }
    Ok(())
}

/// HSCAN key cursor [MATCH pattern] [COUNT count]. A listpack comes whole
/// in one reply with cursor 0, as Redis answers for one; a table in pages
/// of COUNT fields (default 10) in field order, the cursor standing for
/// the last field returned (`keys::Cursors`, as SCAN's).
pub fn hscan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let cursor = super::keys::scan_cursor(&args[2])?;
    // Redis looks the key up before it reads the options.
    let value = read_hash(ctx, &args[1])?;
    if value.is_none() {
        super::keys::scan_reply(ctx.out, 0, 0, []);
        return Ok(());
    }
    let options = super::keys::scan_options(&args[3..], false)?;
    let (next, pairs): (u64, Entries) = match Open::of(&value)? {
        Open::Listpack(fields) => (0, fields.iter().map(|(f, v)| (f.to_vec(), v.to_vec())).collect()),
        Open::Table(table) => table::page(ctx, &table, b"", cursor, options.count)?,
    };
    let matched: Vec<&(Vec<u8>, Vec<u8>)> = pairs
        .iter()
        .filter(|(field, _)| options.pattern.is_none_or(|p| crate::keyspace::glob_match(p, field)))
        .collect();
    let items = matched.iter().flat_map(|(field, value)| [&field[..], &value[..]]);
    super::keys::scan_reply(ctx.out, next, matched.len() * 2, items);
    Ok(())
}

/// What OBJECT ENCODING answers for a hash: `hashtable` once it has
/// passed Redis's listpack limits (Redis never turns it back), else
/// `listpack`.
pub fn encoding(value: &Value) -> Result<&'static str, CmdError> {
    let table = value.tag() == TYPE_HASH_TABLE || hash::is_hashtable(value.data())?;
    Ok(if table { "hashtable" } else { "listpack" })
}
