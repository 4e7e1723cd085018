//! Hash commands, with Redis 7.0's replies and errors. Each hash is one
//! engine value (`crate::hash`): a write decodes it, changes it and writes
//! it back whole in the command's batch, keeping its expiry time.

use std::borrow::Cow;

use bytes::Bytes;
use rand::Rng;

use super::args::{eq, float, int, parse_i64};
use super::{err, CmdError, CmdResult, Ctx};
use crate::hash::{self, Corrupt, Fields};
use crate::keyspace::{Value, TYPE_HASH};
use crate::resp::reply::format_double;
use crate::resp::Protocol;

impl From<Corrupt> for CmdError {
    fn from(_: Corrupt) -> Self {
        err("ERR corrupt hash value (the stored bytes are not a hash)")
    }
}

/// The hash at `key`: None if missing, WRONGTYPE for another type.
fn read_hash(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Value>, CmdError> {
    match ctx.read(key)? {
        Some(value) if value.tag() != TYPE_HASH => Err(CmdError::WrongType),
        other => Ok(other),
    }
}

/// Writes `fields` back to `key` (deletes the key once the hash is empty,
/// as Redis does), keeping `expiry`.
fn write_hash(ctx: &mut Ctx<'_>, key: &[u8], fields: &Fields<'_>, expiry: Option<u64>) -> CmdResult {
    if fields.is_empty() {
        ctx.writes.delete(key);
        return Ok(());
    }
    let data = fields.encode();
    if data.len() > hash::MAX_HASH_BYTES {
        return Err(err(hash::too_large()));
    }
    ctx.writes.put(key, TYPE_HASH, &data, expiry)
}

fn decode(value: &Option<Value>) -> Result<Fields<'_>, CmdError> {
    Ok(match value {
        Some(value) => Fields::decode(value.data())?,
        None => Fields::default(),
    })
}

/// HSET and HMSET: sets every field/value pair; the number of new fields.
fn set_pairs(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Result<i64, CmdError> {
    if !args.len().is_multiple_of(2) {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
        return Err(err(format!("ERR wrong number of arguments for '{name}' command")));
    }
    let value = read_hash(ctx, &args[1])?;
    let mut fields = decode(&value)?;
    let mut added = 0;
    for pair in args[2..].chunks(2) {
        added += fields.set(&pair[0], Cow::Borrowed(&pair[1])) as i64;
    }
    write_hash(ctx, &args[1], &fields, value.as_ref().and_then(Value::expiry_ms))?;
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
    let mut fields = decode(&value)?;
    if fields.get(&args[2]).is_some() {
        ctx.out.int(0);
        return Ok(());
    }
    fields.set(&args[2], Cow::Borrowed(&args[3]));
    write_hash(ctx, &args[1], &fields, value.as_ref().and_then(Value::expiry_ms))?;
    ctx.out.int(1);
    Ok(())
}

pub fn hget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    match read_hash(ctx, &args[1])? {
        Some(value) => ctx.out.bulk_opt(hash::get(value.data(), &args[2])?),
        None => ctx.out.null(),
    }
    Ok(())
}

pub fn hmget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let value = read_hash(ctx, &args[1])?;
    let fields = decode(&value)?;
    ctx.out.array(args.len() - 2);
    for field in &args[2..] {
        ctx.out.bulk_opt(fields.get(field));
    }
    Ok(())
}

pub fn hdel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let value = read_hash(ctx, &args[1])?;
    let mut fields = decode(&value)?;
    let mut deleted = 0;
    for field in &args[2..] {
        deleted += fields.remove(field) as i64;
    }
    if deleted > 0 {
        write_hash(ctx, &args[1], &fields, value.as_ref().and_then(Value::expiry_ms))?;
    }
    ctx.out.int(deleted);
    Ok(())
}

pub fn hlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let len = match read_hash(ctx, &args[1])? {
        Some(value) => hash::count(value.data())?,
        None => 0,
    };
    ctx.out.int(len as i64);
    Ok(())
}

/// The value of one field, for HSTRLEN and HEXISTS.
fn field_len(ctx: &mut Ctx<'_>, args: &[Bytes]) -> Result<Option<usize>, CmdError> {
    Ok(match read_hash(ctx, &args[1])? {
        Some(value) => hash::get(value.data(), &args[2])?.map(<[u8]>::len),
        None => None,
    })
}

pub fn hstrlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let len = field_len(ctx, args)?.unwrap_or(0);
    ctx.out.int(len as i64);
    Ok(())
}

pub fn hexists(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let found = field_len(ctx, args)?.is_some();
    ctx.out.int(found as i64);
    Ok(())
}

/// HKEYS, HVALS and HGETALL: what of each pair goes into the reply.
#[derive(Clone, Copy, PartialEq)]
enum Part {
    Fields,
    Values,
    Both,
}

fn list(ctx: &mut Ctx<'_>, key: &[u8], part: Part) -> CmdResult {
    let Some(value) = read_hash(ctx, key)? else {
        match part {
            Part::Both => ctx.out.map(0),
            _ => ctx.out.array(0),
        }
        return Ok(());
    };
    let data = value.data();
    // Check the whole value before the reply starts.
    let len = hash::count(data)?;
    if hash::pairs(data).any(|pair| pair.is_err()) {
        return Err(Corrupt.into());
    }
    match part {
        Part::Both => ctx.out.map(len),
        _ => ctx.out.array(len),
    }
    for (field, value) in hash::pairs(data).flatten() {
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
    let mut fields = decode(&value)?;
    let current = match fields.get(&args[2]) {
        Some(text) => parse_i64(text).ok_or_else(|| err("ERR hash value is not an integer"))?,
        None => 0,
    };
    let new = current.checked_add(delta).ok_or_else(|| err("ERR increment or decrement would overflow"))?;
    let text = itoa::Buffer::new().format(new).as_bytes().to_vec();
    fields.set(&args[2], Cow::Owned(text));
    write_hash(ctx, &args[1], &fields, value.as_ref().and_then(Value::expiry_ms))?;
    ctx.out.int(new);
    Ok(())
}

pub fn hincrbyfloat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let delta = float(&args[3])?;
    if delta.is_infinite() {
        return Err(err("ERR value is NaN or Infinity"));
    }
    let value = read_hash(ctx, &args[1])?;
    let mut fields = decode(&value)?;
    let current = match fields.get(&args[2]) {
        Some(text) => float(text).map_err(|_| err("ERR hash value is not a float"))?,
        None => 0.0,
    };
    let new = current + delta;
    if !new.is_finite() {
        return Err(err("ERR increment would produce NaN or Infinity"));
    }
    let text = format_double(new);
    fields.set(&args[2], Cow::Owned(text.clone().into_bytes()));
    write_hash(ctx, &args[1], &fields, value.as_ref().and_then(Value::expiry_ms))?;
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

/// HRANDFIELD key [count [WITHVALUES]]: Redis 7.0's cases. A positive
/// count gives distinct fields (the whole hash, in order, when the count
/// reaches its size; else a sample kept in the hash's order, as Redis
/// samples a listpack), a negative one allows repeats.
pub fn hrandfield(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len() == 2 {
        let Some(value) = read_hash(ctx, &args[1])? else {
            ctx.out.null();
            return Ok(());
        };
        let fields = Fields::decode(value.data())?;
        let pick = rand::thread_rng().gen_range(0..fields.len());
        let (field, _) = fields.iter().nth(pick).expect("a stored hash is never empty");
        ctx.out.bulk(field);
        return Ok(());
    }
    let count = int(&args[2])?;
    if count == i64::MIN {
        return Err(err(format!("ERR value is out of range, value must between {} and {}", -i64::MAX, i64::MAX)));
    }
    let with_values = match args.len() {
        3 => false,
        4 if eq(&args[3], "withvalues") => true,
        _ => return Err(CmdError::Syntax),
    };
    if with_values && !(-i64::MAX / 2..=i64::MAX / 2).contains(&count) {
        return Err(err("ERR value is out of range"));
    }
    let Some(value) = read_hash(ctx, &args[1])? else {
        ctx.out.array(0);
        return Ok(());
    };
    let fields = Fields::decode(value.data())?;
    let pairs: Vec<(&[u8], &[u8])> = fields.iter().collect();
    let size = pairs.len();
    let picks: Vec<usize> = if count < 0 {
        let mut rng = rand::thread_rng();
        (0..count.unsigned_abs()).map(|_| rng.gen_range(0..size)).collect()
    } else if count as u64 >= size as u64 {
        (0..size).collect()
    } else {
        let mut picks = rand::seq::index::sample(&mut rand::thread_rng(), size, count as usize).into_vec();
        picks.sort_unstable();
        picks
    };
    let nested = with_values && ctx.out.protocol == Protocol::Resp3;
    ctx.out.array(if with_values && !nested { picks.len() * 2 } else { picks.len() });
    for at in picks {
        let (field, value) = pairs[at];
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

/// HSCAN key cursor [MATCH pattern] [COUNT count]: the whole hash in one
/// reply with cursor 0, as Redis answers for a hash kept as a listpack
/// (COUNT is a hint that SCAN may exceed).
pub fn hscan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    super::keys::scan_cursor(&args[2])?;
    // Redis looks the key up before it reads the options.
    let Some(value) = read_hash(ctx, &args[1])? else {
        ctx.out.array(2);
        ctx.out.bulk(b"0");
        ctx.out.array(0);
        return Ok(());
    };
    let mut pattern: Option<&Bytes> = None;
    let mut i = 3;
    while i < args.len() {
        if i + 1 >= args.len() {
            return Err(CmdError::Syntax);
        }
        if eq(&args[i], "count") {
            if int(&args[i + 1])? < 1 {
                return Err(CmdError::Syntax);
            }
        } else if eq(&args[i], "match") {
            pattern = Some(&args[i + 1]);
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    let fields = Fields::decode(value.data())?;
    let matched: Vec<(&[u8], &[u8])> =
        fields.iter().filter(|(field, _)| pattern.is_none_or(|p| crate::keyspace::glob_match(p, field))).collect();
    ctx.out.array(2);
    ctx.out.bulk(b"0");
    ctx.out.array(matched.len() * 2);
    for (field, value) in matched {
        ctx.out.bulk(field);
        ctx.out.bulk(value);
    }
    Ok(())
}

/// What OBJECT ENCODING answers for a hash: Redis keeps one of up to 512
/// fields, none longer than 64 bytes, as a listpack (its defaults for
/// `hash-max-listpack-entries` and `-value`), a bigger one as a hash table.
pub fn encoding(data: &[u8]) -> Result<&'static str, CmdError> {
    let mut small = hash::count(data)? <= 512;
    for pair in hash::pairs(data) {
        let (field, value) = pair?;
        small &= field.len() <= 64 && value.len() <= 64;
    }
    Ok(if small { "listpack" } else { "hashtable" })
}
