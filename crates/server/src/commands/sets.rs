//! Set commands, with Redis 7.0's replies and errors. A set is kept as a
//! hash with empty values (`crate::hash`): one engine value while Redis
//! would keep it an intset (at most 512 integers, listed in numeric order,
//! as Redis lists an intset) or while it is at most 8 KiB, else a table
//! with an engine entry per member (`table`), as Redis turns it into a
//! hash table. The value's header remembers when Redis would have, so
//! OBJECT ENCODING answers as Redis does.

use std::borrow::Cow;

use bytes::Bytes;
use rand::Rng;

use super::args::{eq, int, parse_i64};
use super::table::{self, Table};
use super::{err, CmdError, CmdResult, Ctx};
use crate::hash::{self, Fields};
use crate::keyspace::{expiry_of, Value, TYPE_SET, TYPE_SET_TABLE};
use crate::resp::Out;

/// Redis's default `set-max-intset-entries`.
const INTSET_ENTRIES: usize = 512;

/// The set at `key`: None if missing, WRONGTYPE for another type.
fn read_set(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Value>, CmdError> {
    ctx.read_collection(key, TYPE_SET, TYPE_SET_TABLE)
}

/// A set a command reads or changes, in either encoding (a missing key is
/// an empty one).
enum Open<'v> {
    Value(Fields<'v>),
    Table(Table),
}

impl<'v> Open<'v> {
    fn of(value: Option<&'v Value>) -> Result<Open<'v>, CmdError> {
        Ok(match value {
            Some(value) if value.tag() == TYPE_SET_TABLE => Open::Table(Table::of(value)?),
            Some(value) => Open::Value(Fields::decode(value.data())?),
            None => Open::Value(Fields::default()),
        })
    }

    fn len(&self) -> usize {
        match self {
            Open::Value(members) => members.len(),
            Open::Table(table) => table.count as usize,
        }
    }

    fn contains(&self, ctx: &mut Ctx<'_>, member: &[u8]) -> Result<bool, CmdError> {
        Ok(match self {
            Open::Value(members) => members.get(member).is_some(),
            Open::Table(table) => table::get(ctx, table, member)?.is_some(),
        })
    }

    /// Adds `member`; true if it is new.
    fn add(&mut self, ctx: &mut Ctx<'_>, member: &'v [u8]) -> Result<bool, CmdError> {
        match self {
            Open::Value(members) => {
                let new = members.set(member, Cow::Borrowed(b""));
                // Redis's intset holds integers only.
                members.hashtable |= parse_i64(member).is_none() || members.len() > INTSET_ENTRIES;
                Ok(new)
            }
            Open::Table(table) => table::set(ctx, table, member, b""),
        }
    }

    fn remove(&mut self, ctx: &mut Ctx<'_>, member: &[u8]) -> Result<bool, CmdError> {
        match self {
            Open::Value(members) => Ok(members.remove(member)),
            Open::Table(table) => table::remove(ctx, table, member),
        }
    }

    /// Every member: an intset's in numeric order (as Redis lists it),
    /// another value's in insertion order, a table's in byte order.
    fn members(&self, ctx: &mut Ctx<'_>) -> Result<Vec<Vec<u8>>, CmdError> {
        Ok(match self {
            Open::Value(members) => {
                let mut all: Vec<Vec<u8>> = members.iter().map(|(m, _)| m.to_vec()).collect();
                if !members.hashtable {
                    all.sort_by_key(|m| parse_i64(m));
                }
                all
            }
            Open::Table(table) => table::entries(ctx, table, None, usize::MAX)?.into_iter().map(|(m, _)| m).collect(),
        })
    }

    /// Where the command's writes so far are a whole state of the set: a
    /// table's commit as a piece when due (`table::piece_point`).
    fn piece_point(&mut self, ctx: &mut Ctx<'_>, key: &[u8], expiry: Option<u64>, pieces: bool) -> CmdResult {
        match self {
            Open::Table(table) => table::piece_point(ctx, key, table, expiry, pieces),
            Open::Value(_) => Ok(()),
        }
    }

    /// `store` after noting keyspace event `event` (and `del` when the set
    /// is left empty), in Redis's order.
    fn store_noting(self, ctx: &mut Ctx<'_>, key: &[u8], expiry: Option<u64>, event: &'static str) -> CmdResult {
        let emptied = self.len() == 0;
        ctx.store_noting(crate::notify::SET, event, key, emptied, |ctx| self.store(ctx, key, expiry))
    }

    /// Writes the set back to `key` with `expiry`; an empty set goes.
    fn store(self, ctx: &mut Ctx<'_>, key: &[u8], expiry: Option<u64>) -> CmdResult {
        match self {
            Open::Table(table) => table::store(ctx, key, &table, expiry),
            Open::Value(members) if members.is_empty() => {
                ctx.writes.delete(key);
                Ok(())
            }
            Open::Value(members) => {
                let mut pairs: Vec<(&[u8], &[u8])> = members.iter().collect();
                if !members.hashtable {
                    pairs.sort_by_key(|(m, _)| parse_i64(m));
                }
                let mut data = Vec::new();
                hash::encode_into(&mut data, pairs.len(), members.hashtable, pairs.iter().copied());
                if table::stays_one_value(members.hashtable, data.len()) {
                    ctx.writes.put(key, TYPE_SET, &data, expiry)
                } else {
                    table::create(ctx, key, TYPE_SET_TABLE, pairs.into_iter(), expiry)
                }
            }
        }
    }
}

/// A set's encoding as one value, for RESTORE: None for an empty set or a
/// member given twice (Redis refuses both as bad data).
pub fn encode_members<'m>(members: impl Iterator<Item = &'m [u8]>) -> Option<Vec<u8>> {
    let mut fields = Fields::default();
    let mut intset = true;
    for member in members {
        if !fields.set(member, Cow::Borrowed(b"")) {
            return None;
        }
        intset &= parse_i64(member).is_some();
    }
    fields.hashtable |= !intset || fields.len() > INTSET_ENTRIES;
    let mut pairs: Vec<(&[u8], &[u8])> = fields.iter().collect();
    if pairs.is_empty() {
        return None;
    }
    if !fields.hashtable {
        pairs.sort_by_key(|(m, _)| parse_i64(m));
    }
    let mut data = Vec::new();
    hash::encode_into(&mut data, pairs.len(), fields.hashtable, pairs.into_iter());
    Some(data)
}

/// A fresh set at `key` holding `members` (the *STORE commands), or none
/// if there are none.
fn store_new(ctx: &mut Ctx<'_>, key: &[u8], members: &[Vec<u8>]) -> CmdResult {
    let mut set = Open::Value(Fields::default());
    for member in members {
        set.add(ctx, member)?;
    }
    set.store(ctx, key, None)
}

/// Members as a RESP3 set (an array in RESP2), in Redis's intset order when
/// they are few integers.
fn reply_set(out: &mut Out, mut members: Vec<Vec<u8>>) {
    if members.len() <= INTSET_ENTRIES && members.iter().all(|m| parse_i64(m).is_some()) {
        members.sort_by_key(|m| parse_i64(m));
    }
    out.set(members.len());
    for member in &members {
        out.bulk(member);
    }
}

/// SADD. Added to a table, members past one piece are committed in
/// pieces (`table::piece_point`): a crash leaves some of them added.
pub fn sadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let pieces = ctx.writes.may_commit_in_pieces();
    let value = read_set(ctx, &args[1])?;
    let mut set = Open::of(value.as_ref())?;
    if pieces && matches!(set, Open::Table(_)) {
        args[2..].iter().try_for_each(|member| table::check_field_len(member.len()))?;
    }
    let expiry = expiry_of(&value);
    let mut added = 0;
    for member in &args[2..] {
        added += set.add(ctx, member)? as i64;
        set.piece_point(ctx, &args[1], expiry, pieces)?;
    }
    if added > 0 {
        set.store_noting(ctx, &args[1], expiry, "sadd")?;
    }
    ctx.out.int(added);
    Ok(())
}

/// SREM, in pieces past one (as SADD).
pub fn srem(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let pieces = ctx.writes.may_commit_in_pieces();
    let value = read_set(ctx, &args[1])?;
    let mut set = Open::of(value.as_ref())?;
    let expiry = expiry_of(&value);
    let mut removed = 0;
    for member in &args[2..] {
        removed += set.remove(ctx, member)? as i64;
        set.piece_point(ctx, &args[1], expiry, pieces)?;
    }
    if removed > 0 {
        set.store_noting(ctx, &args[1], expiry, "srem")?;
    }
    ctx.out.int(removed);
    Ok(())
}

pub fn smembers(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let value = read_set(ctx, &args[1])?;
    let members = Open::of(value.as_ref())?.members(ctx)?;
    reply_set(ctx.out, members);
    Ok(())
}

pub fn sismember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let value = read_set(ctx, &args[1])?;
    let found = Open::of(value.as_ref())?.contains(ctx, &args[2])?;
    ctx.out.int(found as i64);
    Ok(())
}

pub fn smismember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let value = read_set(ctx, &args[1])?;
    let set = Open::of(value.as_ref())?;
    let mut found = Vec::with_capacity(args.len() - 2);
    for member in &args[2..] {
        found.push(set.contains(ctx, member)?);
    }
    ctx.out.array(found.len());
    for found in found {
        ctx.out.int(found as i64);
    }
    Ok(())
}

pub fn scard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let value = read_set(ctx, &args[1])?;
    let len = Open::of(value.as_ref())?.len();
    ctx.out.int(len as i64);
    Ok(())
}

/// SPOP key [count]: removes and returns random members (the whole set,
/// in its order, when the count reaches its size).
pub fn spop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let count = match args.len() {
        2 => None,
        3 => {
            let n = int(&args[2]).ok().filter(|&n| n >= 0);
            Some(n.ok_or_else(|| err("ERR value is out of range, must be positive"))? as u64)
        }
        _ => return Err(CmdError::Syntax),
    };
    let pieces = ctx.writes.may_commit_in_pieces();
    let value = read_set(ctx, &args[1])?;
    if count == Some(0) {
        ctx.out.set(0);
        return Ok(());
    }
    let Some(_) = &value else {
        match count {
            None => ctx.out.null(),
            Some(_) => ctx.out.set(0),
        }
        return Ok(());
    };
    let mut set = Open::of(value.as_ref())?;
    let popped = match table_picks(ctx, &set, count.map(|n| n as i64))? {
        // A table's few picks (the command holds the key's lock, so the
        // stub's count is exact).
        Some(picks) => picks,
        None => {
            let mut members = set.members(ctx)?;
            if members.is_empty() {
                // A stored set is never empty; a stub that says otherwise
                // is damage.
                return Err(crate::hash::Corrupt.into());
            }
            let picks: Vec<usize> = match count {
                None => vec![rand::thread_rng().gen_range(0..members.len())],
                Some(n) if n >= members.len() as u64 => (0..members.len()).collect(),
                Some(n) => rand::seq::index::sample(&mut rand::thread_rng(), members.len(), n as usize).into_vec(),
            };
            picks.into_iter().map(|at| std::mem::take(&mut members[at])).collect()
        }
    };
    if matches!(set, Open::Table(_)) && popped.len() == set.len() {
        // All of a table's members: its stub goes, as DEL's does, and the
        // sweep deletes its entries in the background (`table::sweep`).
        set = Open::Value(Fields::default());
    } else {
        let expiry = expiry_of(&value);
        for member in &popped {
            set.remove(ctx, member)?;
            set.piece_point(ctx, &args[1], expiry, pieces)?;
        }
    }
    if !popped.is_empty() {
        set.store_noting(ctx, &args[1], expiry_of(&value), "spop")?;
    }
    match count {
        None => ctx.out.bulk(&popped[0]),
        Some(_) => {
            ctx.out.set(popped.len());
            for member in &popped {
                ctx.out.bulk(member);
            }
        }
    }
    Ok(())
}

/// A table's members picked at random (`picks::random_fields`); None for
/// a set kept as one value or a pick that must list the set.
fn table_picks(ctx: &mut Ctx<'_>, set: &Open<'_>, count: Option<i64>) -> Result<Option<Vec<Vec<u8>>>, CmdError> {
    let Open::Table(table) = set else { return Ok(None) };
    super::picks::random_fields(ctx, table, b"", table.count, count)
}

/// SRANDMEMBER key [count]: as HRANDFIELD, distinct members for a positive
/// count (the whole set, in its order, when it reaches the set's size),
/// repeats allowed for a negative one.
pub fn srandmember(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let count = match args.len() {
        2 => None,
        3 => Some(super::args::random_count(&args[2])?),
        _ => return Err(CmdError::Syntax),
    };
    let value = read_set(ctx, &args[1])?;
    let set = Open::of(value.as_ref())?;
    if let Some(members) = table_picks(ctx, &set, count)? {
        match count {
            None => ctx.out.bulk(&members[0]),
            Some(_) => {
                ctx.out.array(members.len());
                members.iter().for_each(|member| ctx.out.bulk(member));
            }
        }
        return Ok(());
    }
    let members = if count != Some(0) { set.members(ctx)? } else { Vec::new() };
    let Some(count) = count else {
        match members.get(rand::thread_rng().gen_range(0..members.len().max(1))) {
            Some(member) => ctx.out.bulk(member),
            None => ctx.out.null(),
        }
        return Ok(());
    };
    let picks = super::random_picks(members.len(), count);
    ctx.out.array(picks.len());
    for at in picks {
        ctx.out.bulk(&members[at]);
    }
    Ok(())
}

/// The members of every set named (missing keys are empty sets), or
/// WRONGTYPE if any key holds another type.
fn all_members(ctx: &mut Ctx<'_>, keys: &[Bytes]) -> Result<Vec<Vec<Vec<u8>>>, CmdError> {
    let mut values = Vec::with_capacity(keys.len());
    for key in keys {
        values.push(read_set(ctx, key)?);
    }
    let mut sets = Vec::with_capacity(keys.len());
    for value in &values {
        sets.push(Open::of(value.as_ref())?.members(ctx)?);
    }
    Ok(sets)
}

#[derive(Clone, Copy)]
enum Op {
    Inter,
    Union,
    Diff,
}

fn combine(sets: Vec<Vec<Vec<u8>>>, op: Op) -> Vec<Vec<u8>> {
    use std::collections::HashSet;
    let mut sets = sets.into_iter();
    let Some(first) = sets.next() else { return Vec::new() };
    match op {
        Op::Union => {
            let mut seen: HashSet<Vec<u8>> = first.iter().cloned().collect();
            let mut out = first;
            for set in sets {
                for member in set {
                    if seen.insert(member.clone()) {
                        out.push(member);
                    }
                }
            }
            out
        }
        Op::Inter | Op::Diff => {
            let others: Vec<HashSet<Vec<u8>>> = sets.map(|s| s.into_iter().collect()).collect();
            first
                .into_iter()
                .filter(|m| match op {
                    Op::Inter => others.iter().all(|s| s.contains(m)),
                    _ => !others.iter().any(|s| s.contains(m)),
                })
                .collect()
        }
    }
}

fn set_op(ctx: &mut Ctx<'_>, keys: &[Bytes], op: Op) -> CmdResult {
    let sets = all_members(ctx, keys)?;
    reply_set(ctx.out, combine(sets, op));
    Ok(())
}

fn set_op_store(ctx: &mut Ctx<'_>, args: &[Bytes], op: Op, event: &'static str) -> CmdResult {
    let sets = all_members(ctx, &args[2..])?;
    let result = combine(sets, op);
    ctx.store_result(&args[1], result.is_empty(), crate::notify::SET, event, |ctx| store_new(ctx, &args[1], &result))?;
    ctx.out.int(result.len() as i64);
    Ok(())
}

pub fn sinter(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    set_op(ctx, &args[1..], Op::Inter)
}

pub fn sunion(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    set_op(ctx, &args[1..], Op::Union)
}

pub fn sdiff(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    set_op(ctx, &args[1..], Op::Diff)
}

pub fn sinterstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    set_op_store(ctx, args, Op::Inter, "sinterstore")
}

pub fn sunionstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    set_op_store(ctx, args, Op::Union, "sunionstore")
}

pub fn sdiffstore(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    set_op_store(ctx, args, Op::Diff, "sdiffstore")
}

/// SINTERCARD numkeys key [key ...] [LIMIT limit].
pub fn sintercard(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    // Redis answers a number that does not parse with the range's text.
    let numkeys = int(&args[1]).ok().filter(|&n| n > 0).ok_or_else(|| err("ERR numkeys should be greater than 0"))?;
    if numkeys as u64 > (args.len() - 2) as u64 {
        return Err(err("ERR Number of keys can't be greater than number of args"));
    }
    let keys = &args[2..2 + numkeys as usize];
    let mut limit = 0u64;
    let mut i = 2 + numkeys as usize;
    while i < args.len() {
        if eq(&args[i], "limit") && i + 1 < args.len() {
            let n = int(&args[i + 1]).ok().filter(|&n| n >= 0).ok_or_else(|| err("ERR LIMIT can't be negative"))?;
            limit = n as u64;
            i += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let sets = all_members(ctx, keys)?;
    let mut count = combine(sets, Op::Inter).len() as u64;
    if limit > 0 {
        count = count.min(limit);
    }
    ctx.out.int(count as i64);
    Ok(())
}

/// SMOVE source destination member.
pub fn smove(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    // A missing source answers 0 before the destination's type is checked.
    if ctx.read(&args[1])?.is_none() {
        ctx.out.int(0);
        return Ok(());
    }
    let source = read_set(ctx, &args[1])?;
    let destination = read_set(ctx, &args[2])?;
    let mut from = Open::of(source.as_ref())?;
    if !from.contains(ctx, &args[3])? {
        ctx.out.int(0);
        return Ok(());
    }
    if args[1] != args[2] {
        let mut to = Open::of(destination.as_ref())?;
        from.remove(ctx, &args[3])?;
        from.store_noting(ctx, &args[1], expiry_of(&source), "srem")?;
        if to.add(ctx, &args[3])? {
            to.store_noting(ctx, &args[2], expiry_of(&destination), "sadd")?;
        }
    }
    ctx.out.int(1);
    Ok(())
}

/// SSCAN key cursor [MATCH pattern] [COUNT count]: a set kept as one value
/// comes whole with cursor 0, a table in pages of COUNT (as HSCAN).
pub fn sscan(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let cursor = super::keys::scan_cursor(&args[2])?;
    let value = read_set(ctx, &args[1])?;
    if value.is_none() {
        super::keys::scan_reply(ctx.out, 0, 0, []);
        return Ok(());
    }
    let options = super::keys::scan_options(&args[3..], false)?;
    let (next, members): (u64, Vec<Vec<u8>>) = match Open::of(value.as_ref())? {
        Open::Table(table) => {
            let (next, page) = table::page(ctx, &table, b"", cursor, options.count)?;
            (next, page.into_iter().map(|(m, _)| m).collect())
        }
        set => (0, set.members(ctx)?),
    };
    let matched: Vec<&[u8]> = members
        .iter()
        .map(Vec::as_slice)
        .filter(|m| options.pattern.is_none_or(|p| crate::keyspace::glob_match(p, m)))
        .collect();
    super::keys::scan_reply(ctx.out, next, matched.len(), matched.iter().copied());
    Ok(())
}

/// Every member of the set `value` (DUMP).
pub fn members_of(ctx: &mut Ctx<'_>, value: &Value) -> Result<Vec<Vec<u8>>, CmdError> {
    Open::of(Some(value))?.members(ctx)
}

/// What OBJECT ENCODING answers for a set: `hashtable` once Redis would
/// have made it one, else `intset`.
pub fn encoding(value: &Value) -> Result<&'static str, CmdError> {
    let table = value.tag() == TYPE_SET_TABLE || hash::is_hashtable(value.data())?;
    Ok(if table { "hashtable" } else { "intset" })
}
