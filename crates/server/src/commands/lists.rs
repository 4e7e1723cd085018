//! List commands, with Redis 7.0's replies and errors. A list of at most
//! 8 KiB is one engine value (its elements in order, in `crate::hash`'s
//! layout with empty values); a longer one a table (`table`) whose
//! elements sit at consecutive positions from the stub's `head`, 32 to an
//! entry (`list_chunks`; tables made before chunks have an entry per
//! position), so a push or a pop at either end, LINDEX and LSET touch one
//! entry, and LRANGE reads its range in order. LREM and LINSERT rewrite
//! the list, O(n) as in Redis. A blocking pop that finds nothing returns `CmdError::Blocked`
//! and its connection waits for a push (`conn::wait_blocked`).

use crate::notify::LIST;
use std::borrow::Cow;
use std::time::Duration;

use bytes::Bytes;

use super::args::{eq, int, mpop_args, timeout};
use super::list_chunks::{ChunkedList, ListOp, CHUNKED};
use super::table::{self, Table};
use super::{err, CmdError, CmdResult, Ctx};
use crate::hash;
use crate::keyspace::{expiry_of, Value, TYPE_LIST, TYPE_LIST_TABLE};

/// The list at `key`: None if missing, WRONGTYPE for another type.
fn read_list(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Value>, CmdError> {
    ctx.read_collection(key, TYPE_LIST, TYPE_LIST_TABLE)
}

/// A table element's key suffix: its position, ordered as a signed number
/// (a chunk's number, in the chunked layout).
pub(super) fn position(at: i64) -> [u8; 8] {
    ((at as u64) ^ (1 << 63)).to_be_bytes()
}

fn element_key(table: &Table, index: usize) -> Vec<u8> {
    table::member_key(table.id, &position(table.head + index as i64))
}

/// A list a command reads or changes, in either encoding (a missing key is
/// an empty one).
enum Open<'v> {
    Value(Vec<Cow<'v, [u8]>>),
    /// A table with an entry per element (made before chunks).
    Table(Table),
    Chunked(ChunkedList<'v>),
}

impl<'v> Open<'v> {
    fn of(value: Option<&'v Value>) -> Result<Open<'v>, CmdError> {
        Ok(match value {
            Some(value) if value.tag() == TYPE_LIST_TABLE => Open::table(Table::of(value)?)?,
            Some(value) => {
                let elements = hash::pairs(value.data()).map(|p| p.map(|(e, _)| Cow::Borrowed(e)));
                Open::Value(elements.collect::<Result<_, _>>()?)
            }
            None => Open::Value(Vec::new()),
        })
    }

    fn table(table: Table) -> Result<Open<'v>, CmdError> {
        Ok(match table.layout {
            0 => Open::Table(table),
            CHUNKED => Open::Chunked(ChunkedList::new(table)),
            _ => return Err(hash::Corrupt.into()),
        })
    }

    /// The list as a reader without locks reads it: a chunked table from
    /// one snapshot (`ChunkedList::pin`), or what the key holds there when
    /// it changed since it was read.
    fn pinned<'a: 'v>(self, ctx: &Ctx<'a>, key: &[u8]) -> Result<Open<'v>, CmdError> {
        let Open::Chunked(mut list) = self else { return Ok(self) };
        if !ctx.writes.reads_engine_only() {
            return Ok(Open::Chunked(list));
        }
        Ok(match list.pin(ctx, key)? {
            None => Open::Chunked(list),
            Some(None) => Open::Value(Vec::new()),
            Some(Some(bytes)) if bytes.first() == Some(&TYPE_LIST_TABLE) => {
                Open::table(Table::decode(bytes[0], &bytes[1..])?)?
            }
            Some(Some(bytes)) if bytes.first() == Some(&TYPE_LIST) => {
                let elements: Vec<Cow<'v, [u8]>> = hash::pairs(&bytes[1..])
                    .map(|p| p.map(|(e, _)| Cow::Owned(e.to_vec())))
                    .collect::<Result<_, _>>()?;
                Open::Value(elements)
            }
            Some(Some(_)) => return Err(CmdError::WrongType),
        })
    }

    fn len(&self) -> usize {
        match self {
            Open::Value(elements) => elements.len(),
            Open::Table(table) => table.count as usize,
            Open::Chunked(list) => list.len(),
        }
    }

    /// `n` elements from `start` (both within the list).
    fn range(&mut self, ctx: &mut Ctx<'_>, start: usize, n: usize) -> Result<Vec<Vec<u8>>, CmdError> {
        Ok(match self {
            Open::Value(elements) => elements[start..start + n].iter().map(|e| e.to_vec()).collect(),
            Open::Chunked(list) => list.range(ctx, start, n)?,
            Open::Table(table) => {
                let prefix = table::members_prefix(table.id);
                let after = (start > 0).then(|| element_key(table, start - 1));
                let found = ctx.writes.scan_internal(ctx.db(), &prefix, after.as_deref(), n)?;
                found.into_iter().map(|(_, element)| element).collect()
            }
        })
    }

    /// The element at `index` (within the list). A table's is a point
    /// read: an iterator per LPOP, RPOP or LINDEX would have the index
    /// merge its pending updates each time.
    fn get(&mut self, ctx: &mut Ctx<'_>, index: usize) -> Result<Vec<u8>, CmdError> {
        match self {
            Open::Value(elements) => Ok(elements[index].to_vec()),
            Open::Chunked(list) => list.get(ctx, index),
            Open::Table(table) => {
                let found = ctx.writes.get_internal(ctx.db(), &element_key(table, index))?;
                Ok(found.ok_or(crate::hash::Corrupt)?.data().to_vec())
            }
        }
    }

    fn push(&mut self, ctx: &mut Ctx<'_>, front: bool, element: &'v [u8]) -> CmdResult {
        ctx.writes.note_pushed();
        match self {
            Open::Value(elements) if front => elements.insert(0, Cow::Borrowed(element)),
            Open::Value(elements) => elements.push(Cow::Borrowed(element)),
            Open::Chunked(list) => list.push(ctx, front, element)?,
            Open::Table(table) => {
                if front {
                    table.head -= 1;
                }
                let at = if front { 0 } else { table.count as usize };
                let key = element_key(table, at);
                table::check_field(&key)?;
                ctx.writes.put_internal(&key, table::TYPE_FIELD, element, None)?;
                table.count += 1;
                ctx.writes.note_reserved(1);
            }
        }
        Ok(())
    }

    fn pop(&mut self, ctx: &mut Ctx<'_>, front: bool) -> Result<Option<Vec<u8>>, CmdError> {
        let len = self.len();
        if len == 0 {
            return Ok(None);
        }
        if let Open::Value(elements) = self {
            return Ok(Some(if front { elements.remove(0) } else { elements.pop().expect("not empty") }.into_owned()));
        }
        if let Open::Chunked(list) = self {
            return list.pop(ctx, front);
        }
        let at = if front { 0 } else { len - 1 };
        let element = self.get(ctx, at)?;
        let Open::Table(table) = self else { unreachable!("a list is a value or a table") };
        ctx.writes.delete(&element_key(table, at));
        ctx.writes.note_reserved(-1);
        table.count -= 1;
        if front {
            table.head += 1;
        }
        Ok(Some(element))
    }

    fn set(&mut self, ctx: &mut Ctx<'_>, index: usize, element: &'v [u8]) -> CmdResult {
        match self {
            Open::Value(elements) => elements[index] = Cow::Borrowed(element),
            Open::Chunked(list) => list.set(ctx, index, element)?,
            Open::Table(table) => {
                let key = element_key(table, index);
                ctx.writes.put_internal(&key, table::TYPE_FIELD, element, None)?;
            }
        }
        Ok(())
    }

    /// Keeps the elements `start..start + n` only.
    fn trim(&mut self, ctx: &mut Ctx<'_>, start: usize, n: usize) -> CmdResult {
        match self {
            Open::Value(elements) => {
                elements.truncate(start + n);
                elements.drain(..start);
            }
            Open::Chunked(list) => list.trim(ctx, start, n)?,
            Open::Table(table) => {
                for index in (0..start).chain(start + n..table.count as usize) {
                    ctx.writes.delete(&element_key(table, index));
                }
                ctx.writes.note_reserved(n as i64 - table.count as i64);
                table.head += start as i64;
                table.count = n as u64;
            }
        }
        Ok(())
    }

    /// Replaces every element with what `op` (LREM's, LINSERT's: O(n), as
    /// in Redis) made of them.
    fn replace(&mut self, ctx: &mut Ctx<'_>, new: Vec<Vec<u8>>, op: impl FnOnce() -> ListOp) -> CmdResult {
        if let Open::Value(elements) = self {
            *elements = new.into_iter().map(Cow::Owned).collect();
            return Ok(());
        }
        if let Open::Chunked(list) = self {
            return list.replace_as(ctx, &new, op);
        }
        self.trim(ctx, 0, 0)?;
        let Open::Table(table) = self else { unreachable!("a list is a value or a table") };
        for element in &new {
            let key = element_key(table, table.count as usize);
            ctx.writes.put_internal(&key, table::TYPE_FIELD, element, None)?;
            table.count += 1;
        }
        ctx.writes.note_reserved(new.len() as i64);
        Ok(())
    }

    /// Writes the list back to `key` with `expiry`: one past 8 KiB becomes
    /// a table; an empty list goes.
    fn store(self, ctx: &mut Ctx<'_>, key: &[u8], expiry: Option<u64>) -> CmdResult {
        match self {
            Open::Table(table) => table::store(ctx, key, &table, expiry),
            Open::Chunked(list) => list.store(ctx, key, expiry),
            Open::Value(elements) if elements.is_empty() => {
                ctx.writes.delete(key);
                Ok(())
            }
            Open::Value(elements) => {
                let mut data = Vec::new();
                hash::encode_into(&mut data, elements.len(), false, elements.iter().map(|e| (&e[..], &b""[..])));
                // Redis 7.0 has no compact list: the size alone decides.
                if table::stays_one_value(true, data.len()) {
                    return ctx.writes.put(key, TYPE_LIST, &data, expiry);
                }
                ChunkedList::create(ctx, key, elements.iter().map(|e| &e[..]), expiry)
            }
        }
    }
}

/// Writes `list` back to `key` after noting keyspace event `event` (and
/// `del` when the list is left empty, which removes the key), in Redis's
/// order.
fn store_noting(ctx: &mut Ctx<'_>, list: Open<'_>, key: &[u8], expiry: Option<u64>, event: &'static str) -> CmdResult {
    let emptied = list.len() == 0;
    ctx.store_noting(LIST, event, key, emptied, |ctx| list.store(ctx, key, expiry))
}

fn pop_event(front: bool) -> &'static str {
    if front {
        "lpop"
    } else {
        "rpop"
    }
}

fn push_event(front: bool) -> &'static str {
    if front {
        "lpush"
    } else {
        "rpush"
    }
}

/// Redis's clamp of a [start, stop] range over `len` elements: the first
/// index and how many, or None for an empty range.
fn clamp(start: i64, stop: i64, len: usize) -> Option<(usize, usize)> {
    let len = len as i64;
    let start = if start < 0 { (len + start).max(0) } else { start };
    let stop = if stop < 0 { len + stop } else { stop };
    if start > stop || start >= len {
        return None;
    }
    let stop = stop.min(len - 1);
    Some((start as usize, (stop - start + 1) as usize))
}

/// An index from the head (negative: from the tail), if within the list.
fn index(arg: i64, len: usize) -> Option<usize> {
    let at = if arg < 0 { len as i64 + arg } else { arg };
    (0..len as i64).contains(&at).then_some(at as usize)
}

fn push(ctx: &mut Ctx<'_>, args: &[Bytes], front: bool, only_existing: bool) -> CmdResult {
    let value = read_list(ctx, &args[1])?;
    if only_existing && value.is_none() {
        ctx.out.int(0);
        return Ok(());
    }
    let mut list = Open::of(value.as_ref())?;
    for element in &args[2..] {
        list.push(ctx, front, element)?;
    }
    let len = list.len();
    store_noting(ctx, list, &args[1], expiry_of(&value), push_event(front))?;
    ctx.out.int(len as i64);
    Ok(())
}

pub fn lpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    push(ctx, args, true, false)
}

pub fn rpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    push(ctx, args, false, false)
}

pub fn lpushx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    push(ctx, args, true, true)
}

pub fn rpushx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    push(ctx, args, false, true)
}

fn pop(ctx: &mut Ctx<'_>, args: &[Bytes], front: bool) -> CmdResult {
    if args.len() > 3 {
        let name = String::from_utf8_lossy(&args[0]).to_ascii_lowercase();
        return Err(err(format!("ERR wrong number of arguments for '{name}' command")));
    }
    let count = match args.get(2) {
        Some(arg) => {
            let n = int(arg).ok().filter(|&n| n >= 0);
            Some(n.ok_or_else(|| err("ERR value is out of range, must be positive"))? as usize)
        }
        None => None,
    };
    let value = read_list(ctx, &args[1])?;
    if value.is_none() {
        match count {
            Some(_) => ctx.out.null_array(),
            None => ctx.out.null(),
        }
        return Ok(());
    }
    if count == Some(0) {
        ctx.out.array(0);
        return Ok(());
    }
    let mut list = Open::of(value.as_ref())?;
    let mut popped = Vec::new();
    for _ in 0..count.unwrap_or(1) {
        match list.pop(ctx, front)? {
            Some(element) => popped.push(element),
            None => break,
        }
    }
    store_noting(ctx, list, &args[1], expiry_of(&value), pop_event(front))?;
    match count {
        None => ctx.out.bulk(&popped[0]),
        Some(_) => {
            ctx.out.array(popped.len());
            for element in &popped {
                ctx.out.bulk(element);
            }
        }
    }
    Ok(())
}

pub fn lpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    pop(ctx, args, true)
}

pub fn rpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    pop(ctx, args, false)
}

pub fn llen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let value = read_list(ctx, &args[1])?;
    let len = Open::of(value.as_ref())?.len();
    ctx.out.int(len as i64);
    Ok(())
}

/// The encoded elements of a list kept as one value (not a table).
fn small_list(value: &Option<Value>) -> Option<&[u8]> {
    value.as_ref().filter(|value| value.tag() != TYPE_LIST_TABLE).map(Value::data)
}

pub fn lrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (start, stop) = (int(&args[2])?, int(&args[3])?);
    let value = read_list(ctx, &args[1])?;
    if let Some(data) = small_list(&value) {
        // Replied as it is scanned: decoding every element first was most
        // of LRANGE's and LINDEX's CPU in a list of 1,000 (LINDEX 0.64x
        // Redis's rate; BENCHMARKS.md, forty-sixth session).
        let Some((first, n)) = clamp(start, stop, hash::count(data)?) else {
            ctx.out.array(0);
            return Ok(());
        };
        ctx.out.array(n);
        for pair in hash::pairs(data).skip(first).take(n) {
            ctx.out.bulk(pair?.0);
        }
        return Ok(());
    }
    let mut list = Open::of(value.as_ref())?.pinned(ctx, &args[1])?;
    let Some((first, n)) = clamp(start, stop, list.len()) else {
        ctx.out.array(0);
        return Ok(());
    };
    if let Open::Chunked(list) = &mut list {
        ctx.out.array(n);
        let out = &mut *ctx.out;
        return list.visit(ctx.writes, &ctx.shared.db, first, n, |element| out.bulk(element));
    }
    if let Open::Table(table) = &list {
        // Replied straight from the engine's entries.
        let prefix = table::members_prefix(table.id);
        let end = crate::keyspace::prefix_end(&prefix).expect("ends below 0xFF");
        let from = element_key(table, first);
        let bounds = (std::ops::Bound::Included(&from[..]), std::ops::Bound::Excluded(&end[..]));
        ctx.out.array(n);
        let out = &mut *ctx.out;
        let seen = ctx.writes.visit_range(&ctx.shared.db, bounds, n, |_, element| {
            out.bulk(element);
            true
        })?;
        if seen != n {
            // A table that holds fewer elements than its stub counts.
            return Err(hash::Corrupt.into());
        }
        return Ok(());
    }
    let elements = list.range(ctx, first, n)?;
    ctx.out.array(elements.len());
    for element in &elements {
        ctx.out.bulk(element);
    }
    Ok(())
}

pub fn lindex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let at = int(&args[2])?;
    let value = read_list(ctx, &args[1])?;
    if let Some(data) = small_list(&value) {
        match index(at, hash::count(data)?) {
            Some(at) => {
                let (element, _) = hash::pairs(data).nth(at).ok_or(hash::Corrupt)??;
                ctx.out.bulk(element);
            }
            None => ctx.out.null(),
        }
        return Ok(());
    }
    let mut list = Open::of(value.as_ref())?.pinned(ctx, &args[1])?;
    match index(at, list.len()) {
        Some(at) => {
            let element = list.get(ctx, at)?;
            ctx.out.bulk(&element);
        }
        None => ctx.out.null(),
    }
    Ok(())
}

pub fn lset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let at = int(&args[2])?;
    let value = read_list(ctx, &args[1])?;
    if value.is_none() {
        return Err(err("ERR no such key"));
    }
    let mut list = Open::of(value.as_ref())?;
    let at = index(at, list.len()).ok_or_else(|| err("ERR index out of range"))?;
    list.set(ctx, at, &args[3])?;
    store_noting(ctx, list, &args[1], expiry_of(&value), "lset")?;
    ctx.out.ok();
    Ok(())
}

pub fn ltrim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (start, stop) = (int(&args[2])?, int(&args[3])?);
    let value = read_list(ctx, &args[1])?;
    if value.is_some() {
        let mut list = Open::of(value.as_ref())?;
        let (first, n) = clamp(start, stop, list.len()).unwrap_or((0, 0));
        if (first, n) != (0, list.len()) {
            list.trim(ctx, first, n)?;
            store_noting(ctx, list, &args[1], expiry_of(&value), "ltrim")?;
        } else {
            // Redis tells of a trim that kept everything too.
            ctx.notify(LIST, "ltrim", &args[1]);
        }
    }
    ctx.out.ok();
    Ok(())
}

pub fn lrem(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let count = int(&args[2])?;
    let value = read_list(ctx, &args[1])?;
    let mut list = Open::of(value.as_ref())?;
    let mut elements = list.range(ctx, 0, list.len())?;
    let limit = if count == 0 { usize::MAX } else { count.unsigned_abs() as usize };
    let mut removed = 0;
    let mut keep = |element: &Vec<u8>| {
        let drop = removed < limit && element[..] == args[3][..];
        removed += drop as usize;
        !drop
    };
    if count < 0 {
        elements.reverse();
        elements.retain(&mut keep);
        elements.reverse();
    } else {
        elements.retain(&mut keep);
    }
    if removed > 0 {
        list.replace(ctx, elements, || ListOp::Remove { count, element: args[3].to_vec() })?;
        store_noting(ctx, list, &args[1], expiry_of(&value), "lrem")?;
    }
    ctx.out.int(removed as i64);
    Ok(())
}

pub fn linsert(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let after = match () {
        _ if eq(&args[2], "after") => true,
        _ if eq(&args[2], "before") => false,
        _ => return Err(CmdError::Syntax),
    };
    let value = read_list(ctx, &args[1])?;
    if value.is_none() {
        ctx.out.int(0);
        return Ok(());
    }
    let mut list = Open::of(value.as_ref())?;
    let mut elements = list.range(ctx, 0, list.len())?;
    let Some(at) = elements.iter().position(|e| e[..] == args[3][..]) else {
        ctx.out.int(-1);
        return Ok(());
    };
    elements.insert(at + after as usize, args[4].to_vec());
    let len = elements.len();
    list.replace(ctx, elements, || ListOp::Insert { after, pivot: args[3].to_vec(), element: args[4].to_vec() })?;
    store_noting(ctx, list, &args[1], expiry_of(&value), "linsert")?;
    ctx.out.int(len as i64);
    Ok(())
}

/// LMOVE and RPOPLPUSH (and their blocking forms, which `block` with a
/// timeout when the source is empty): pops from one end of `source`,
/// pushes to one end of `destination` (the same list rotates).
fn lmove_between(
    ctx: &mut Ctx<'_>,
    args: &[Bytes],
    from_front: bool,
    to_front: bool,
    block: Option<Option<Duration>>,
) -> CmdResult {
    let source = read_list(ctx, &args[1])?;
    // A blocking move waits its turn behind clients blocked before it.
    if source.is_none() || (block.is_some() && !ctx.may_take(&args[1])) {
        if let Some(timeout) = block {
            return Err(CmdError::Blocked(timeout, true));
        }
        ctx.out.null();
        return Ok(());
    }
    let destination = read_list(ctx, &args[2])?;
    // Declared first, dropped last: the list may borrow it, and a list
    // holds a snapshot, whose drop must not outlive what it borrows.
    #[allow(clippy::needless_late_init)]
    let element: Vec<u8>;
    let mut from = Open::of(source.as_ref())?;
    // A stored list is never empty; a stub that says otherwise is damage.
    element = from.pop(ctx, from_front)?.ok_or(crate::hash::Corrupt)?;
    // Redis tells of the push, then the pop, then the source's removal.
    ctx.notify(LIST, push_event(to_front), &args[2]);
    if args[1] == args[2] {
        from.push(ctx, to_front, &element)?;
        store_noting(ctx, from, &args[1], expiry_of(&source), pop_event(from_front))?;
    } else {
        store_noting(ctx, from, &args[1], expiry_of(&source), pop_event(from_front))?;
        let mut to = Open::of(destination.as_ref())?;
        to.push(ctx, to_front, &element)?;
        to.store(ctx, &args[2], expiry_of(&destination))?;
    }
    ctx.out.bulk(&element);
    Ok(())
}

pub fn rpoplpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    lmove_between(ctx, args, false, true, None)
}

/// LEFT or RIGHT: whether the front.
fn side(arg: &[u8]) -> Result<bool, CmdError> {
    match () {
        _ if eq(arg, "left") => Ok(true),
        _ if eq(arg, "right") => Ok(false),
        _ => Err(CmdError::Syntax),
    }
}

pub fn lmove(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (from_front, to_front) = (side(&args[3])?, side(&args[4])?);
    lmove_between(ctx, args, from_front, to_front, None)
}

/// BLPOP and BRPOP: the first non-empty list among the keys gives its
/// element, as [key, element].
fn blocking_pop(ctx: &mut Ctx<'_>, args: &[Bytes], front: bool) -> CmdResult {
    let timeout = timeout(&args[args.len() - 1])?;
    for key in &args[1..args.len() - 1] {
        let value = read_list(ctx, key)?;
        if value.is_none() || !ctx.may_take(key) {
            continue;
        }
        let mut list = Open::of(value.as_ref())?;
        let element = list.pop(ctx, front)?.ok_or(crate::hash::Corrupt)?;
        store_noting(ctx, list, key, expiry_of(&value), pop_event(front))?;
        ctx.out.array(2);
        ctx.out.bulk(key);
        ctx.out.bulk(&element);
        return Ok(());
    }
    Err(CmdError::Blocked(timeout, false))
}

pub fn blpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    blocking_pop(ctx, args, true)
}

pub fn brpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    blocking_pop(ctx, args, false)
}

pub fn brpoplpush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let timeout = timeout(&args[3])?;
    lmove_between(ctx, args, false, true, Some(timeout))
}

pub fn blmove(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (from_front, to_front) = (side(&args[3])?, side(&args[4])?);
    let timeout = timeout(&args[5])?;
    lmove_between(ctx, args, from_front, to_front, Some(timeout))
}

/// LPOS key element [RANK rank] [COUNT count] [MAXLEN len]: the indexes
/// of matches, from the head (or the tail for a negative rank), skipping
/// the first |rank| - 1, comparing at most MAXLEN elements (0: all).
pub fn lpos(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (mut rank, mut count, mut maxlen) = (1i64, None::<u64>, 0u64);
    let non_negative =
        |arg: &[u8], text: &str| int(arg).ok().filter(|&n| n >= 0).map(|n| n as u64).ok_or_else(|| err(text));
    for pair in args[3..].chunks(2) {
        let [option, value] = pair else { return Err(CmdError::Syntax) };
        if eq(option, "rank") {
            rank = int(value)?;
            if rank == 0 {
                return Err(err("ERR RANK can't be zero: use 1 to start from the first match, 2 from the second ... or use negative to start from the end of the list"));
            }
        } else if eq(option, "count") {
            count = Some(non_negative(value, "ERR COUNT can't be negative")?);
        } else if eq(option, "maxlen") {
            maxlen = non_negative(value, "ERR MAXLEN can't be negative")?;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let value = read_list(ctx, &args[1])?;
    let mut list = Open::of(value.as_ref())?.pinned(ctx, &args[1])?;
    let elements = list.range(ctx, 0, list.len())?;
    let len = elements.len();
    let order: Box<dyn Iterator<Item = usize>> = if rank > 0 { Box::new(0..len) } else { Box::new((0..len).rev()) };
    let limit = if maxlen == 0 { len } else { maxlen.min(len as u64) as usize };
    let want = match count {
        Some(0) => usize::MAX,
        Some(n) => n as usize,
        None => 1,
    };
    // Redis negates the rank in a C long: the lowest one stays negative and
    // then counts as -1.
    let mut skip = if rank == i64::MIN { 0 } else { rank.unsigned_abs() - 1 };
    let mut found = Vec::new();
    for at in order.take(limit) {
        if elements[at][..] != args[2][..] {
            continue;
        }
        if skip > 0 {
            skip -= 1;
            continue;
        }
        found.push(at as i64);
        if found.len() >= want {
            break;
        }
    }
    match count {
        Some(_) => {
            ctx.out.array(found.len());
            for at in found {
                ctx.out.int(at);
            }
        }
        None => match found.first() {
            Some(&at) => ctx.out.int(at),
            None => ctx.out.null(),
        },
    }
    Ok(())
}

/// LMPOP numkeys key [key ...] LEFT|RIGHT [COUNT count]: pops up to
/// `count` elements from the first non-empty list, as [key, [elements]].
pub fn lmpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    mpop(ctx, &args[1..], None)
}

/// BLMPOP timeout numkeys key [key ...] LEFT|RIGHT [COUNT count].
pub fn blmpop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let timeout = timeout(&args[1])?;
    mpop(ctx, &args[2..], Some(timeout))
}

/// LMPOP's work from its numkeys on (`args[0]`); with `block`, nothing to
/// pop blocks instead of answering a null array.
fn mpop(ctx: &mut Ctx<'_>, args: &[Bytes], block: Option<Option<Duration>>) -> CmdResult {
    let (keys, front, count) = mpop_args(args, ["left", "right"])?;
    for key in keys {
        let value = read_list(ctx, key)?;
        if value.is_none() || (block.is_some() && !ctx.may_take(key)) {
            continue;
        }
        let mut list = Open::of(value.as_ref())?;
        let mut popped = Vec::new();
        while popped.len() < count {
            match list.pop(ctx, front)? {
                Some(element) => popped.push(element),
                None => break,
            }
        }
        store_noting(ctx, list, key, expiry_of(&value), pop_event(front))?;
        ctx.out.array(2);
        ctx.out.bulk(key);
        ctx.out.array(popped.len());
        for element in &popped {
            ctx.out.bulk(element);
        }
        return Ok(());
    }
    if let Some(timeout) = block {
        return Err(CmdError::Blocked(timeout, false));
    }
    ctx.out.null_array();
    Ok(())
}

/// Every element of the list `value`, read at `key` (DUMP, COPY).
pub fn elements_of(ctx: &mut Ctx<'_>, key: &[u8], value: &Value) -> Result<Vec<Vec<u8>>, CmdError> {
    let mut list = Open::of(Some(value))?.pinned(ctx, key)?;
    list.range(ctx, 0, list.len())
}

/// A new list at `key` holding `elements` (COPY, RESTORE).
pub fn store_new(ctx: &mut Ctx<'_>, key: &[u8], elements: &[Vec<u8>], expiry: Option<u64>) -> CmdResult {
    Open::Value(elements.iter().map(|e| Cow::Borrowed(&e[..])).collect()).store(ctx, key, expiry)
}
