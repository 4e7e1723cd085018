//! Stream commands, with Redis 7.0's replies and errors: XADD XLEN XRANGE
//! XREVRANGE XDEL XTRIM XSETID XREAD (BLOCK) and consumer groups (XGROUP
//! XREADGROUP XACK XPENDING XCLAIM XAUTOCLAIM), XINFO.
//!
//! A stream is a table (`crate::stream` has the layout): an XADD writes
//! its entry and the stub in one batch, a read is an ordered scan of the
//! entries' keys, and a group's pending entries are entries of their own,
//! so acknowledging one costs one delete. Every change to a stream, its
//! groups and its pending entries is in its command's one batch: a crash
//! keeps all of a command or none.
//!
//! Where ScaledKV differs: `~` (approximate) trimming removes whole nodes
//! of 100 entries (Redis's default `stream-node-max-entries`; Redis's own
//! nodes also end at 4 KiB, so with bigger entries Redis keeps fewer
//! than ScaledKV); XINFO's `radix-tree-keys` and `radix-tree-nodes`
//! count those nodes (an estimate of Redis's radix tree).

use std::ops::Bound;

use bytes::Bytes;
use scaledkv::now_ms;

use super::args::{eq, int};
use super::table::{self, member_key};
use super::{err, CmdError, CmdResult, Ctx};
use crate::keyspace::TYPE_STREAM_TABLE;
use crate::resp::{Out, Protocol};
use crate::stream::{
    decode_pairs, encode_pairs, entry_field, group_field, nack_field, parse_add_id, parse_id, Group, Meta, Nack,
    StreamId, GROUP,
};

const INVALID_ID: &str = "ERR Invalid stream ID specified as stream command argument";
const NOTIFY: u32 = crate::notify::STREAM;
/// Redis's default `stream-node-max-entries`: XINFO's node estimate, and
/// (times 100) the default LIMIT of an approximate trim.
const NODE_ENTRIES: u64 = 100;

fn strict_id(arg: &[u8]) -> Result<StreamId, CmdError> {
    parse_id(arg, 0, true).ok_or_else(|| err(INVALID_ID))
}

/// A range bound: `(id` excludes it (Redis's
/// `streamParseIntervalIDOrReply`); `missing` is a bare `ms`'s sequence.
fn interval_id(arg: &[u8], missing: u64) -> Result<(StreamId, bool), CmdError> {
    match arg.strip_prefix(b"(") {
        Some(rest) if !rest.is_empty() => Ok((parse_id(rest, missing, true).ok_or_else(|| err(INVALID_ID))?, true)),
        _ => Ok((parse_id(arg, missing, false).ok_or_else(|| err(INVALID_ID))?, false)),
    }
}

/// A range's inclusive start and end from its arguments.
fn interval(start: &[u8], end: &[u8]) -> Result<(StreamId, StreamId), CmdError> {
    let (mut from, exclusive) = interval_id(start, 0)?;
    if exclusive {
        from = from.next().ok_or_else(|| err("ERR invalid start ID for the interval"))?;
    }
    let (mut to, exclusive) = interval_id(end, u64::MAX)?;
    if exclusive {
        to = to.prev().ok_or_else(|| err("ERR invalid end ID for the interval"))?;
    }
    Ok((from, to))
}

fn nogroup(key: &[u8], group: &[u8]) -> CmdError {
    err(format!(
        "NOGROUP No such key '{}' or consumer group '{}'",
        String::from_utf8_lossy(key),
        String::from_utf8_lossy(group)
    ))
}

/// The stream at a key, as a command reads and changes it.
struct Stream {
    meta: Meta,
    expiry: Option<u64>,
    /// The stub as read: `store` writes nothing while it is unchanged.
    read_as: Option<Meta>,
}

/// The stream at `key`: None if missing, WRONGTYPE for another type.
fn open(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<Stream>, CmdError> {
    match ctx.read(key)? {
        None => Ok(None),
        Some(value) if value.tag() != TYPE_STREAM_TABLE => Err(CmdError::WrongType),
        Some(value) => {
            let meta = Meta::decode(value.data())?;
            Ok(Some(Stream { meta, expiry: value.expiry_ms(), read_as: Some(meta) }))
        }
    }
}

/// A new, empty stream at `key` (its stub is written by `store`).
fn create(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Stream, CmdError> {
    let table = table::fill(ctx, key, TYPE_STREAM_TABLE, std::iter::empty())?;
    Ok(Stream { meta: Meta { table: table.id, ..Meta::default() }, expiry: None, read_as: None })
}

/// One entry read: its ID and its encoded field/value pairs.
type Entry = (StreamId, Vec<u8>);

impl Stream {
    fn store(&self, ctx: &mut Ctx<'_>, key: &[u8]) -> CmdResult {
        if self.read_as != Some(self.meta) {
            ctx.writes.put(key, TYPE_STREAM_TABLE, &self.meta.encode(), self.expiry)?;
        }
        Ok(())
    }

    fn key_of(&self, field: &[u8]) -> Vec<u8> {
        member_key(self.meta.table, field)
    }

    /// Where a scan from `from` starts: no entry sorts before the first
    /// one, and the index would walk over the keys of every entry trimmed
    /// or deleted before it (a capped stream's XADDs slowed down from 16k
    /// to 8k/s as they piled up). None for an empty stream.
    fn start(&self, from: StreamId) -> Option<StreamId> {
        (self.meta.length > 0).then(|| from.max(self.meta.first_id))
    }

    /// Up to `limit` entries with IDs in `from..=to`, from the low end or
    /// (`reverse`) the high one.
    fn entries(
        &self,
        ctx: &mut Ctx<'_>,
        from: StreamId,
        to: StreamId,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<Entry>, CmdError> {
        let Some(from) = self.start(from) else { return Ok(Vec::new()) };
        if from > to || limit == 0 {
            return Ok(Vec::new());
        }
        let (low, high) = (self.key_of(&entry_field(from)), self.key_of(&entry_field(to)));
        let found = ctx.writes.scan_range(ctx.db(), (Bound::Included(&low), Bound::Included(&high)), reverse, limit)?;
        found.into_iter().map(|(key, value)| Ok((StreamId::from_bytes(&key[key.len() - 16..])?, value))).collect()
    }

    fn entry(&self, ctx: &mut Ctx<'_>, id: StreamId) -> Result<Option<Vec<u8>>, CmdError> {
        let key = self.key_of(&entry_field(id));
        Ok(ctx.writes.get_internal(ctx.db(), &key)?.map(|value| value.data().to_vec()))
    }

    fn add_entry(&mut self, ctx: &mut Ctx<'_>, id: StreamId, pairs: &[Bytes]) -> CmdResult {
        let key = self.key_of(&entry_field(id));
        table::check_field(&key)?;
        ctx.writes.put_internal(&key, table::TYPE_FIELD, &encode_pairs(pairs), None)?;
        ctx.writes.note_reserved(1);
        if self.meta.length == 0 {
            self.meta.first_id = id;
        }
        self.meta.length += 1;
        self.meta.last_id = id;
        self.meta.entries_added += 1;
        Ok(())
    }

    fn delete_entry(&mut self, ctx: &mut Ctx<'_>, id: StreamId) {
        ctx.writes.delete(&self.key_of(&entry_field(id)));
        ctx.writes.note_reserved(-1);
        self.meta.length -= 1;
    }

    /// After entries went from the front: the first one left.
    fn refresh_first(&mut self, ctx: &mut Ctx<'_>) -> CmdResult {
        self.meta.first_id = match self.meta.length {
            0 => StreamId::MIN,
            _ => {
                self.entries(ctx, StreamId::MIN, StreamId::MAX, false, 1)?.first().map_or(StreamId::MIN, |(id, _)| *id)
            }
        };
        Ok(())
    }

    fn group(&self, ctx: &mut Ctx<'_>, name: &[u8]) -> Result<Option<Group>, CmdError> {
        let key = self.key_of(&group_field(name));
        match ctx.writes.get_internal(ctx.db(), &key)? {
            Some(value) => Ok(Some(Group::decode(value.data())?)),
            None => Ok(None),
        }
    }

    fn put_group(&mut self, ctx: &mut Ctx<'_>, name: &[u8], group: &Group, new: bool) -> CmdResult {
        let key = self.key_of(&group_field(name));
        table::check_field(&key)?;
        ctx.writes.put_internal(&key, table::TYPE_FIELD, &group.encode(), None)?;
        if new {
            ctx.writes.note_reserved(1);
            self.meta.groups += 1;
        }
        Ok(())
    }

    /// Every group, in name order.
    fn groups(&self, ctx: &mut Ctx<'_>) -> Result<Vec<(Vec<u8>, Group)>, CmdError> {
        let prefix = self.key_of(&[GROUP]);
        let found = ctx.writes.scan_internal(ctx.db(), &prefix, None, usize::MAX)?;
        found.into_iter().map(|(key, value)| Ok((key[prefix.len()..].to_vec(), Group::decode(&value)?))).collect()
    }

    fn nack(&self, ctx: &mut Ctx<'_>, group: &[u8], id: StreamId) -> Result<Option<Nack>, CmdError> {
        let key = self.key_of(&nack_field(group, id));
        match ctx.writes.get_internal(ctx.db(), &key)? {
            Some(value) => Ok(Some(Nack::decode(value.data())?)),
            None => Ok(None),
        }
    }

    fn put_nack(&self, ctx: &mut Ctx<'_>, group: &[u8], id: StreamId, nack: &Nack, new: bool) -> CmdResult {
        let key = self.key_of(&nack_field(group, id));
        table::check_field(&key)?;
        ctx.writes.put_internal(&key, table::TYPE_FIELD, &nack.encode(), None)?;
        if new {
            ctx.writes.note_reserved(1);
        }
        Ok(())
    }

    fn delete_nack(&self, ctx: &mut Ctx<'_>, group: &[u8], id: StreamId) {
        ctx.writes.delete(&self.key_of(&nack_field(group, id)));
        ctx.writes.note_reserved(-1);
    }

    /// Up to `limit` pending entries of `group` with IDs in `from..=to`,
    /// from the low end or (`reverse`) the high one.
    fn nacks(
        &self,
        ctx: &mut Ctx<'_>,
        group: &[u8],
        from: StreamId,
        to: StreamId,
        reverse: bool,
        limit: usize,
    ) -> Result<Vec<(StreamId, Nack)>, CmdError> {
        if from > to || limit == 0 {
            return Ok(Vec::new());
        }
        let (low, high) = (self.key_of(&nack_field(group, from)), self.key_of(&nack_field(group, to)));
        let found = ctx.writes.scan_range(ctx.db(), (Bound::Included(&low), Bound::Included(&high)), reverse, limit)?;
        found
            .into_iter()
            .map(|(key, value)| Ok((StreamId::from_bytes(&key[key.len() - 16..])?, Nack::decode(&value)?)))
            .collect()
    }

    /// Deletes every pending entry of `group` that `keep` refuses, in
    /// batches; how many went.
    fn drop_nacks(&self, ctx: &mut Ctx<'_>, group: &[u8], keep: impl Fn(&Nack) -> bool) -> Result<u64, CmdError> {
        let mut from = StreamId::MIN;
        let mut dropped = 0;
        loop {
            let batch = self.nacks(ctx, group, from, StreamId::MAX, false, 1024)?;
            for (id, nack) in &batch {
                if !keep(nack) {
                    self.delete_nack(ctx, group, *id);
                    dropped += 1;
                }
            }
            match batch.last().map(|(id, _)| id.next()) {
                Some(Some(next)) if batch.len() == 1024 => from = next,
                _ => return Ok(dropped),
            }
        }
    }
}

fn reply_id(out: &mut Out, id: StreamId) {
    // Formatted without the `fmt` machinery: one per entry of every reply.
    let mut text = [0u8; 41];
    let (mut ms, mut seq) = (itoa::Buffer::new(), itoa::Buffer::new());
    let (ms, seq) = (ms.format(id.ms).as_bytes(), seq.format(id.seq).as_bytes());
    text[..ms.len()].copy_from_slice(ms);
    text[ms.len()] = b'-';
    text[ms.len() + 1..ms.len() + 1 + seq.len()].copy_from_slice(seq);
    out.bulk(&text[..ms.len() + 1 + seq.len()]);
}

/// An entry as Redis sends it: its ID and its field/value pairs.
fn reply_entry(out: &mut Out, id: StreamId, data: &[u8]) -> CmdResult {
    let parts = decode_pairs(data)?;
    out.array(2);
    reply_id(out, id);
    out.array(parts.len());
    for part in parts {
        out.bulk(part);
    }
    Ok(())
}

fn reply_entries(out: &mut Out, entries: &[Entry]) -> CmdResult {
    out.array(entries.len());
    for (id, data) in entries {
        reply_entry(out, *id, data)?;
    }
    Ok(())
}

/// XADD's and XTRIM's trimming.
#[derive(Clone, Copy)]
enum Strategy {
    MaxLen(u64),
    MinId(StreamId),
}

/// XADD's and XTRIM's options, as Redis's
/// `streamParseAddOrTrimArgsOrReply` reads them.
struct AddArgs {
    trim: Option<Strategy>,
    approx: bool,
    /// At most this many entries trimmed (0: no limit).
    limit: u64,
    nomkstream: bool,
    /// XADD's ID, and whether its sequence was given (`ms-*`: no).
    id: Option<(StreamId, bool)>,
    /// Where the ID is (XADD).
    next: usize,
}

fn parse_add_args(args: &[Bytes], xadd: bool) -> Result<AddArgs, CmdError> {
    let mut parsed = AddArgs { trim: None, approx: false, limit: 0, nomkstream: false, id: None, next: 2 };
    let mut limit_given = false;
    let mut i = 2;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let option = &args[i];
        if xadd && option.as_ref() == b"*" {
            break;
        } else if (eq(option, "maxlen") || eq(option, "minid")) && more > 0 {
            if parsed.trim.is_some() {
                return Err(err("ERR syntax error, MAXLEN and MINID options at the same time are not compatible"));
            }
            parsed.approx = false;
            if more >= 2 && args[i + 1].as_ref() == b"~" {
                parsed.approx = true;
                i += 1;
            } else if more >= 2 && args[i + 1].as_ref() == b"=" {
                i += 1;
            }
            parsed.trim = Some(if eq(option, "maxlen") {
                let max = int(&args[i + 1])?;
                if max < 0 {
                    return Err(err("ERR The MAXLEN argument must be >= 0."));
                }
                Strategy::MaxLen(max as u64)
            } else {
                Strategy::MinId(strict_id(&args[i + 1])?)
            });
            i += 1;
        } else if eq(option, "limit") && more > 0 {
            let limit = int(&args[i + 1])?;
            if limit < 0 {
                return Err(err("ERR The LIMIT argument must be >= 0."));
            }
            parsed.limit = limit as u64;
            limit_given = true;
            i += 1;
        } else if xadd && eq(option, "nomkstream") {
            parsed.nomkstream = true;
        } else if xadd {
            parsed.id = Some(parse_add_id(option).ok_or_else(|| err(INVALID_ID))?);
            break;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if parsed.limit != 0 && parsed.trim.is_none() {
        return Err(err("ERR syntax error, LIMIT cannot be used without specifying a trimming strategy"));
    }
    if !xadd && parsed.trim.is_none() {
        return Err(err("ERR syntax error, XTRIM must be called with a trimming strategy"));
    }
    if limit_given && !parsed.approx {
        return Err(err("ERR syntax error, LIMIT cannot be used without the special ~ option"));
    }
    if !limit_given {
        parsed.limit = if parsed.approx { NODE_ENTRIES * NODE_ENTRIES } else { 0 };
    }
    parsed.next = i;
    Ok(parsed)
}

/// Trims `stream` from its front as `parsed` asks; how many entries went.
fn trim(ctx: &mut Ctx<'_>, stream: &mut Stream, parsed: &AddArgs) -> Result<u64, CmdError> {
    let (mut left, to) = match parsed.trim {
        None => return Ok(0),
        Some(Strategy::MaxLen(max)) => (stream.meta.length.saturating_sub(max), StreamId::MAX),
        Some(Strategy::MinId(min)) => match min.prev() {
            Some(to) => (u64::MAX, to),
            None => return Ok(0),
        },
    };
    if parsed.limit != 0 {
        left = left.min(parsed.limit);
    }
    // `~` trims whole nodes only, as Redis does (its nodes hold up to 100
    // entries): a capped stream is trimmed once per 100 XADDs, not on
    // each.
    let step = if parsed.approx {
        left -= left % NODE_ENTRIES;
        NODE_ENTRIES
    } else {
        1024
    };
    let mut from = StreamId::MIN;
    let mut trimmed = 0;
    while left > 0 {
        // An iterator, not a walk of the keys: a walk looks at every pending
        // index update of the database (capped XADDs at -P 16: 74-96k/s
        // that way, 138-171k/s this way).
        let batch: Vec<StreamId> =
            stream.entries(ctx, from, to, false, left.min(step) as usize)?.into_iter().map(|(id, _)| id).collect();
        if parsed.approx && (batch.len() as u64) < step {
            break;
        }
        let Some(&last) = batch.last() else { break };
        for id in &batch {
            stream.delete_entry(ctx, *id);
        }
        trimmed += batch.len() as u64;
        left -= batch.len() as u64;
        match last.next() {
            Some(next) => from = next,
            None => break,
        }
    }
    if trimmed > 0 {
        stream.refresh_first(ctx)?;
    }
    Ok(trimmed)
}

pub fn xadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let parsed = parse_add_args(args, true)?;
    let pairs = args.get(parsed.next + 1..).unwrap_or_default();
    if pairs.len() < 2 || pairs.len() % 2 == 1 {
        return Err(err("ERR wrong number of arguments for 'xadd' command"));
    }
    if let Some((id, true)) = parsed.id {
        if id.is_zero() {
            return Err(err("ERR The ID specified in XADD must be greater than 0-0"));
        }
    }
    let key = &args[1];
    ctx.writes.keep_overlay();
    let mut stream = match open(ctx, key)? {
        Some(stream) => stream,
        None if parsed.nomkstream => {
            ctx.out.null();
            return Ok(());
        }
        None => create(ctx, key)?,
    };
    let last = stream.meta.last_id;
    if last == StreamId::MAX {
        return Err(err("ERR The stream has exhausted the last possible ID, unable to add more items"));
    }
    let id = match parsed.id {
        None => {
            let now = now_ms();
            if now > last.ms {
                Some(StreamId::new(now, 0))
            } else {
                last.next()
            }
        }
        Some((id, true)) => Some(id),
        Some((id, false)) if id.ms == last.ms => last.next().filter(|next| next.ms == id.ms),
        Some((id, false)) => Some(id),
    };
    let Some(id) = id.filter(|&id| id > last) else {
        return Err(err("ERR The ID specified in XADD is equal or smaller than the target stream top item"));
    };
    stream.add_entry(ctx, id, pairs)?;
    reply_id(ctx.out, id);
    ctx.notify(NOTIFY, "xadd", key);
    if trim(ctx, &mut stream, &parsed)? > 0 {
        ctx.notify(NOTIFY, "xtrim", key);
    }
    stream.store(ctx, key)?;
    // Clients blocked in XREAD on it look again.
    ctx.writes.note_pushed();
    Ok(())
}

pub fn xtrim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let parsed = parse_add_args(args, false)?;
    ctx.writes.keep_overlay();
    let Some(mut stream) = open(ctx, &args[1])? else {
        ctx.out.int(0);
        return Ok(());
    };
    let trimmed = trim(ctx, &mut stream, &parsed)?;
    if trimmed > 0 {
        ctx.notify(NOTIFY, "xtrim", &args[1]);
        stream.store(ctx, &args[1])?;
    }
    ctx.out.int(trimmed as i64);
    Ok(())
}

pub fn xlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let length = open(ctx, &args[1])?.map_or(0, |stream| stream.meta.length);
    ctx.out.int(length as i64);
    Ok(())
}

pub fn xdel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let Some(mut stream) = open(ctx, &args[1])? else {
        ctx.out.int(0);
        return Ok(());
    };
    // Every ID is checked before any goes: all or nothing.
    let ids = args[2..].iter().map(|arg| strict_id(arg)).collect::<Result<Vec<_>, _>>()?;
    ctx.writes.keep_overlay();
    let mut deleted = 0;
    let mut first = false;
    for id in ids {
        if stream.entry(ctx, id)?.is_none() {
            continue;
        }
        stream.delete_entry(ctx, id);
        first |= id == stream.meta.first_id;
        stream.meta.max_deleted = stream.meta.max_deleted.max(id);
        deleted += 1;
    }
    if deleted > 0 {
        if stream.meta.length == 0 || first {
            stream.refresh_first(ctx)?;
        }
        ctx.notify(NOTIFY, "xdel", &args[1]);
        stream.store(ctx, &args[1])?;
    }
    ctx.out.int(deleted);
    Ok(())
}

fn range(ctx: &mut Ctx<'_>, args: &[Bytes], reverse: bool) -> CmdResult {
    let (start, end) = if reverse { (&args[3], &args[2]) } else { (&args[2], &args[3]) };
    let (from, to) = interval(start, end)?;
    let mut count = None;
    let mut i = 4;
    while i < args.len() {
        if eq(&args[i], "count") && i + 1 < args.len() {
            count = Some(int(&args[i + 1])?.max(0) as u64);
            i += 2;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let Some(stream) = open(ctx, &args[1])? else {
        ctx.out.array(0);
        return Ok(());
    };
    // Redis answers COUNT 0 with a null array.
    if count == Some(0) {
        ctx.out.null_array();
        return Ok(());
    }
    let limit = count.map_or(usize::MAX, |n| n.min(usize::MAX as u64) as usize);
    let entries = stream.entries(ctx, from, to, reverse, limit)?;
    reply_entries(ctx.out, &entries)
}

pub fn xrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    range(ctx, args, false)
}

pub fn xrevrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    range(ctx, args, true)
}

pub fn xsetid(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let id = strict_id(&args[2])?;
    let mut entries_added = None;
    let mut max_deleted = StreamId::MIN;
    let mut i = 3;
    while i < args.len() {
        if eq(&args[i], "entriesadded") && i + 1 < args.len() {
            let n = int(&args[i + 1])?;
            if n < 0 {
                return Err(err("ERR entries_added must be positive"));
            }
            entries_added = Some(n as u64);
        } else if eq(&args[i], "maxdeletedid") && i + 1 < args.len() {
            max_deleted = strict_id(&args[i + 1])?;
            if id < max_deleted {
                return Err(err("ERR The ID specified in XSETID is smaller than the provided max_deleted_entry_id"));
            }
        } else {
            return Err(CmdError::Syntax);
        }
        i += 2;
    }
    let Some(mut stream) = open(ctx, &args[1])? else {
        return Err(err("ERR no such key"));
    };
    if stream.meta.length > 0 {
        let top =
            stream.entries(ctx, StreamId::MIN, StreamId::MAX, true, 1)?.first().map_or(StreamId::MIN, |(id, _)| *id);
        if id < top {
            return Err(err("ERR The ID specified in XSETID is smaller than the target stream top item"));
        }
        if entries_added.is_some_and(|n| n < stream.meta.length) {
            return Err(err("ERR The entries_added specified in XSETID is smaller than the target stream length"));
        }
    }
    stream.meta.last_id = id;
    if let Some(n) = entries_added {
        stream.meta.entries_added = n;
    }
    if !max_deleted.is_zero() {
        stream.meta.max_deleted = max_deleted;
    }
    stream.store(ctx, &args[1])?;
    ctx.notify(NOTIFY, "xsetid", &args[1]);
    ctx.out.ok();
    Ok(())
}

/// XREAD's and XREADGROUP's options before STREAMS.
struct ReadArgs<'a> {
    /// BLOCK's timeout in ms (0: for ever).
    block: Option<u64>,
    count: usize,
    group: Option<(&'a [u8], &'a [u8])>,
    noack: bool,
    keys: &'a [Bytes],
    ids: &'a [Bytes],
    /// Where the IDs start in the arguments.
    ids_at: usize,
}

fn parse_read_args(args: &[Bytes], xreadgroup: bool) -> Result<ReadArgs<'_>, CmdError> {
    let mut parsed = ReadArgs { block: None, count: 0, group: None, noack: false, keys: &[], ids: &[], ids_at: 0 };
    let mut streams_at = None;
    let mut i = 1;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let option = &args[i];
        if eq(option, "block") && more > 0 {
            i += 1;
            let ms =
                super::args::parse_i64(&args[i]).ok_or_else(|| err("ERR timeout is not an integer or out of range"))?;
            if ms < 0 {
                return Err(err("ERR timeout is negative"));
            }
            if ms > 0 && ms > i64::MAX - now_ms() as i64 {
                return Err(err("ERR timeout is out of range"));
            }
            parsed.block = Some(ms as u64);
        } else if eq(option, "count") && more > 0 {
            i += 1;
            parsed.count = int(&args[i])?.max(0).min(isize::MAX as i64) as usize;
        } else if eq(option, "streams") && more > 0 {
            streams_at = Some(i + 1);
            break;
        } else if eq(option, "group") && more >= 2 {
            if !xreadgroup {
                return Err(err("ERR The GROUP option is only supported by XREADGROUP. You called XREAD instead."));
            }
            parsed.group = Some((&args[i + 1], &args[i + 2]));
            i += 2;
        } else if eq(option, "noack") {
            if !xreadgroup {
                return Err(err("ERR The NOACK option is only supported by XREADGROUP. You called XREAD instead."));
            }
            parsed.noack = true;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    let Some(at) = streams_at else { return Err(CmdError::Syntax) };
    let rest = &args[at..];
    if !rest.len().is_multiple_of(2) {
        // Redis 7.0 says so for XREADGROUP too.
        return Err(err("ERR Unbalanced XREAD list of streams: for each stream key an ID or '$' must be specified."));
    }
    if xreadgroup && parsed.group.is_none() {
        return Err(err("ERR Missing GROUP option for XREADGROUP"));
    }
    parsed.keys = &rest[..rest.len() / 2];
    parsed.ids = &rest[rest.len() / 2..];
    parsed.ids_at = at + rest.len() / 2;
    Ok(parsed)
}

/// The stream keys of an XREAD or XREADGROUP (as `args`, its name first),
/// which it waits on.
pub fn read_keys(args: &[Bytes]) -> &[Bytes] {
    let xreadgroup = args[0].len() == "xreadgroup".len();
    parse_read_args(args, xreadgroup).map_or(&[], |parsed| parsed.keys)
}

/// Whether an XREADGROUP may block (it has a BLOCK option): it then never
/// joins a run of writes.
pub fn may_block(args: &[Bytes]) -> bool {
    parse_read_args(args, true).is_ok_and(|parsed| parsed.block.is_some())
}

/// Entries a read gives (None for an entry a consumer's history names
/// that is gone).
type Delivered = Vec<(StreamId, Option<Vec<u8>>)>;

/// What one stream gives a read: its key and entries.
type Served = (Bytes, Delivered);

fn reply_served(out: &mut Out, served: &[Served]) -> CmdResult {
    match out.protocol {
        Protocol::Resp2 => out.array(served.len()),
        Protocol::Resp3 => out.map(served.len()),
    }
    for (key, entries) in served {
        if out.protocol == Protocol::Resp2 {
            out.array(2);
        }
        out.bulk(key);
        out.array(entries.len());
        for (id, data) in entries {
            match data {
                Some(data) => reply_entry(out, *id, data)?,
                None => {
                    out.array(2);
                    reply_id(out, *id);
                    out.null_array();
                }
            }
        }
    }
    Ok(())
}

/// Nothing to give: a null array, or (with BLOCK) the connection waits
/// and runs the command again, with `$` replaced by the IDs it stood for.
fn nothing_yet(ctx: &mut Ctx<'_>, args: &[Bytes], parsed: &ReadArgs<'_>, resolved: &[StreamId]) -> CmdResult {
    let Some(block) = parsed.block else {
        ctx.out.null_array();
        return Ok(());
    };
    if parsed.group.is_none() {
        let mut again = args.to_vec();
        for (i, id) in resolved.iter().enumerate() {
            again[parsed.ids_at + i] = Bytes::from(id.to_string());
        }
        ctx.conn.block_args = Some(again);
    }
    Err(CmdError::Blocked((block > 0).then(|| std::time::Duration::from_millis(block)), false))
}

pub fn xread(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let parsed = parse_read_args(args, false)?;
    let mut after = Vec::with_capacity(parsed.keys.len());
    let mut streams = Vec::with_capacity(parsed.keys.len());
    for (key, id) in parsed.keys.iter().zip(parsed.ids) {
        let stream = open(ctx, key)?;
        let id = match id.as_ref() {
            b"$" => stream.as_ref().map_or(StreamId::MIN, |s| s.meta.last_id),
            b">" => return Err(err(
                "ERR The > ID can be specified only when calling XREADGROUP using the GROUP <group> <consumer> option.",
            )),
            _ => strict_id(id)?,
        };
        after.push(id);
        streams.push(stream);
    }
    let limit = if parsed.count == 0 { usize::MAX } else { parsed.count };
    let mut served = Vec::new();
    for ((key, stream), &id) in parsed.keys.iter().zip(&streams).zip(&after) {
        let Some(stream) = stream else { continue };
        let Some(from) = id.next() else { continue };
        let entries = stream.entries(ctx, from, StreamId::MAX, false, limit)?;
        if !entries.is_empty() {
            served.push((key.clone(), entries.into_iter().map(|(id, data)| (id, Some(data))).collect()));
        }
    }
    if served.is_empty() {
        return nothing_yet(ctx, args, &parsed, &after);
    }
    reply_served(ctx.out, &served)
}

pub fn xreadgroup(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let parsed = parse_read_args(args, true)?;
    let (group_name, consumer_name) = parsed.group.expect("checked by parse_read_args");
    ctx.writes.keep_overlay();
    let mut targets = Vec::with_capacity(parsed.keys.len());
    for (key, id) in parsed.keys.iter().zip(parsed.ids) {
        let stream = open(ctx, key)?;
        let group = match &stream {
            Some(stream) => stream.group(ctx, group_name)?,
            None => None,
        };
        let (Some(stream), Some(group)) = (stream, group) else {
            return Err(err(format!(
                "NOGROUP No such key '{}' or consumer group '{}' in XREADGROUP with GROUP option",
                String::from_utf8_lossy(key),
                String::from_utf8_lossy(group_name)
            )));
        };
        let id = match id.as_ref() {
            b"$" => return Err(err("ERR The $ ID is meaningless in the context of XREADGROUP: you want to read the history of this consumer by specifying a proper ID, or use the > ID to get new messages. The $ ID would just return an empty result set.")),
            b">" => None,
            _ => Some(strict_id(id)?),
        };
        targets.push((key, stream, group, id));
    }
    let now = now_ms();
    let limit = if parsed.count == 0 { usize::MAX } else { parsed.count };
    let mut served = Vec::new();
    for (key, mut stream, mut group, id) in targets {
        let stream = &mut stream;
        // As in Redis 7.0, a consumer is made (or seen) only by a read
        // that is served: its history always, new entries if there are.
        let entries = match id {
            Some(after) => {
                touch(ctx, &mut group, consumer_name, key, now);
                history(ctx, stream, group_name, consumer_name, after, limit)?
            }
            None => {
                let Some(from) = group.last_id.next() else { continue };
                let entries = stream.entries(ctx, from, StreamId::MAX, false, limit)?;
                if entries.is_empty() {
                    continue;
                }
                touch(ctx, &mut group, consumer_name, key, now);
                deliver(ctx, stream, &mut group, group_name, consumer_name, parsed.noack, entries, now)?
            }
        };
        stream.put_group(ctx, group_name, &group, false)?;
        served.push((key.clone(), entries));
    }
    if served.is_empty() {
        return nothing_yet(ctx, args, &parsed, &[]);
    }
    reply_served(ctx.out, &served)
}

/// A consumer's own pending entries after `after`: delivered once more.
fn history(
    ctx: &mut Ctx<'_>,
    stream: &Stream,
    group_name: &[u8],
    consumer_name: &[u8],
    after: StreamId,
    limit: usize,
) -> Result<Delivered, CmdError> {
    let mut found = Vec::new();
    let Some(mut from) = after.next() else { return Ok(found) };
    let now = now_ms();
    'scan: loop {
        let batch = stream.nacks(ctx, group_name, from, StreamId::MAX, false, 1024)?;
        for (id, mut nack) in batch.iter().cloned() {
            if found.len() >= limit {
                break 'scan;
            }
            if nack.consumer != consumer_name {
                continue;
            }
            let data = stream.entry(ctx, id)?;
            if data.is_some() {
                nack.delivered_ms = now;
                nack.deliveries += 1;
                stream.put_nack(ctx, group_name, id, &nack, false)?;
            }
            found.push((id, data));
        }
        match batch.last().map(|(id, _)| id.next()) {
            Some(Some(next)) if batch.len() == 1024 => from = next,
            _ => break,
        }
    }
    Ok(found)
}

/// Consumer `name` of `group`, made if new, is seen now.
fn touch(ctx: &mut Ctx<'_>, group: &mut Group, name: &[u8], key: &[u8], now: u64) {
    let (consumer, created) = group.consumer(name, now);
    consumer.seen_ms = now;
    if created {
        ctx.notify(NOTIFY, "xgroup-createconsumer", key);
    }
}

/// Entries past the group's last delivered one (`>`), now delivered to
/// the consumer: pending unless `noack`.
#[allow(clippy::too_many_arguments)]
fn deliver(
    ctx: &mut Ctx<'_>,
    stream: &Stream,
    group: &mut Group,
    group_name: &[u8],
    consumer_name: &[u8],
    noack: bool,
    entries: Vec<Entry>,
    now: u64,
) -> Result<Delivered, CmdError> {
    let mut served = Vec::with_capacity(entries.len());
    for (id, data) in entries {
        match (group.entries_read, stream.meta.has_tombstones_from(id)) {
            (Some(read), false) => group.entries_read = Some(read + 1),
            _ if stream.meta.entries_added > 0 => group.entries_read = stream.meta.entries_up_to(id),
            _ => {}
        }
        group.last_id = id;
        if !noack {
            let nack = Nack { delivered_ms: now, deliveries: 1, consumer: consumer_name.to_vec() };
            match stream.nack(ctx, group_name, id)? {
                // Pending already (XGROUP SETID moved the group back): it
                // changes hands.
                Some(old) => {
                    if let Some(previous) = group.find(&old.consumer) {
                        previous.pending -= 1;
                    }
                    stream.put_nack(ctx, group_name, id, &nack, false)?;
                }
                None => {
                    group.pending += 1;
                    stream.put_nack(ctx, group_name, id, &nack, true)?;
                }
            }
            group.consumer(consumer_name, now).0.pending += 1;
        }
        served.push((id, Some(data)));
    }
    Ok(served)
}

pub fn xack(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let stream = open(ctx, &args[1])?;
    let group = match &stream {
        Some(stream) => stream.group(ctx, &args[2])?,
        None => None,
    };
    let ids = args[3..].iter().map(|arg| strict_id(arg)).collect::<Result<Vec<_>, _>>()?;
    let (Some(stream), Some(mut group)) = (stream, group) else {
        ctx.out.int(0);
        return Ok(());
    };
    ctx.writes.keep_overlay();
    let mut acknowledged = 0;
    for id in ids {
        let Some(nack) = stream.nack(ctx, &args[2], id)? else { continue };
        stream.delete_nack(ctx, &args[2], id);
        group.pending -= 1;
        if let Some(consumer) = group.find(&nack.consumer) {
            consumer.pending -= 1;
        }
        acknowledged += 1;
    }
    if acknowledged > 0 {
        let mut stream = stream;
        stream.put_group(ctx, &args[2], &group, false)?;
    }
    ctx.out.int(acknowledged);
    Ok(())
}

pub fn xpending(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let summary = args.len() == 3;
    if !summary && !(6..=9).contains(&args.len()) {
        return Err(CmdError::Syntax);
    }
    let mut min_idle = 0;
    let mut range = (StreamId::MIN, StreamId::MAX, 0usize);
    let mut consumer_name = None;
    if !summary {
        let mut at = 3;
        if eq(&args[3], "idle") {
            min_idle = int(&args[4])?;
            if args.len() < 8 {
                return Err(CmdError::Syntax);
            }
            at += 2;
        }
        let count = int(&args[at + 2])?.max(0);
        let (from, to) = interval(&args[at], &args[at + 1])?;
        range = (from, to, count.min(isize::MAX as i64) as usize);
        consumer_name = args.get(at + 3);
    }
    let stream = open(ctx, &args[1])?;
    let group = match &stream {
        Some(stream) => stream.group(ctx, &args[2])?,
        None => None,
    };
    let (Some(stream), Some(group)) = (stream, group) else {
        return Err(nogroup(&args[1], &args[2]));
    };
    if summary {
        ctx.out.array(4);
        ctx.out.int(group.pending as i64);
        let first = stream.nacks(ctx, &args[2], StreamId::MIN, StreamId::MAX, false, 1)?;
        let last = stream.nacks(ctx, &args[2], StreamId::MIN, StreamId::MAX, true, 1)?;
        match (first.first(), last.first()) {
            (Some((first, _)), Some((last, _))) if group.pending > 0 => {
                reply_id(ctx.out, *first);
                reply_id(ctx.out, *last);
                let with_pending: Vec<_> = group.consumers.iter().filter(|c| c.pending > 0).collect();
                ctx.out.array(with_pending.len());
                for consumer in with_pending {
                    ctx.out.array(2);
                    ctx.out.bulk(&consumer.name);
                    ctx.out.bulk(consumer.pending.to_string().as_bytes());
                }
            }
            _ => {
                ctx.out.null();
                ctx.out.null();
                ctx.out.null_array();
            }
        }
        return Ok(());
    }
    let (from, to, mut count) = range;
    if let Some(name) = consumer_name {
        if !group.consumers.iter().any(|c| c.name == name.as_ref()) {
            ctx.out.array(0);
            return Ok(());
        }
    }
    let now = now_ms();
    let mut found = Vec::new();
    let mut from = from;
    'scan: while count > 0 {
        let batch = stream.nacks(ctx, &args[2], from, to, false, 1024)?;
        for (id, nack) in &batch {
            if count == 0 {
                break 'scan;
            }
            if consumer_name.is_some_and(|name| nack.consumer != name.as_ref()) {
                continue;
            }
            let idle = now.saturating_sub(nack.delivered_ms);
            if min_idle != 0 && (idle as i64) < min_idle {
                continue;
            }
            found.push((*id, nack.clone(), idle));
            count -= 1;
        }
        match batch.last().map(|(id, _)| id.next()) {
            Some(Some(next)) if batch.len() == 1024 => from = next,
            _ => break,
        }
    }
    ctx.out.array(found.len());
    for (id, nack, idle) in found {
        ctx.out.array(4);
        reply_id(ctx.out, id);
        ctx.out.bulk(&nack.consumer);
        ctx.out.int(idle as i64);
        ctx.out.int(nack.deliveries as i64);
    }
    Ok(())
}

/// Moves pending entry `id` to `consumer_name` (made if new) with
/// delivery time `at`; its delivery count is `deliveries` or, unless
/// `justid`, one more.
#[allow(clippy::too_many_arguments)]
fn claim_one(
    ctx: &mut Ctx<'_>,
    stream: &Stream,
    key: &[u8],
    group: &mut Group,
    group_name: &[u8],
    consumer_name: &[u8],
    id: StreamId,
    mut nack: Nack,
    new: bool,
    at: u64,
    deliveries: Option<u64>,
    justid: bool,
) -> CmdResult {
    let now = now_ms();
    touch(ctx, group, consumer_name, key, now);
    if new {
        group.pending += 1;
    } else if nack.consumer != consumer_name {
        if let Some(previous) = group.find(&nack.consumer) {
            previous.pending -= 1;
        }
    }
    if new || nack.consumer != consumer_name {
        group.consumer(consumer_name, now).0.pending += 1;
    }
    nack.consumer = consumer_name.to_vec();
    nack.delivered_ms = at;
    match deliveries {
        Some(n) => nack.deliveries = n,
        None if !justid => nack.deliveries += 1,
        None => {}
    }
    stream.put_nack(ctx, group_name, id, &nack, new)
}

pub fn xclaim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let stream = open(ctx, &args[1])?;
    let group = match &stream {
        Some(stream) => stream.group(ctx, &args[2])?,
        None => None,
    };
    let (Some(mut stream), Some(mut group)) = (stream, group) else {
        return Err(nogroup(&args[1], &args[2]));
    };
    let min_idle = super::args::parse_i64(&args[4])
        .ok_or_else(|| err("ERR Invalid min-idle-time argument for XCLAIM"))?
        .max(0) as u64;
    let mut ids = Vec::new();
    let mut i = 5;
    while let Some(Some(id)) = args.get(i).map(|arg| parse_id(arg, 0, true)) {
        ids.push(id);
        i += 1;
    }
    let now = now_ms();
    let (mut force, mut justid) = (false, false);
    let mut at: Option<i64> = None;
    let mut deliveries = None;
    let mut last_id = StreamId::MIN;
    while i < args.len() {
        let more = args.len() - 1 - i;
        let option = &args[i];
        let number = |arg: &[u8], what: &str| {
            super::args::parse_i64(arg).ok_or_else(|| err(format!("ERR Invalid {what} option argument for XCLAIM")))
        };
        if eq(option, "force") {
            force = true;
        } else if eq(option, "justid") {
            justid = true;
        } else if eq(option, "idle") && more > 0 {
            i += 1;
            at = Some((now as i64).saturating_sub(number(&args[i], "IDLE")?));
        } else if eq(option, "time") && more > 0 {
            i += 1;
            at = Some(number(&args[i], "TIME")?);
        } else if eq(option, "retrycount") && more > 0 {
            i += 1;
            deliveries = Some(number(&args[i], "RETRYCOUNT")?);
        } else if eq(option, "lastid") && more > 0 {
            i += 1;
            last_id = strict_id(&args[i])?;
        } else {
            return Err(err(format!("ERR Unrecognized XCLAIM option '{}'", String::from_utf8_lossy(option))));
        }
        i += 1;
    }
    ctx.writes.keep_overlay();
    group.last_id = group.last_id.max(last_id);
    // A bogus time (the future, before 1970) is now: clients compute it
    // from clocks of their own.
    let at = at.filter(|&t| t >= 0 && t <= now as i64).map_or(now, |t| t as u64);
    let deliveries = deliveries.filter(|&n| n >= 0).map(|n| n as u64);
    let mut claimed = Vec::new();
    for id in ids {
        let nack = stream.nack(ctx, &args[2], id)?;
        let data = stream.entry(ctx, id)?;
        let Some(data) = data else {
            // Gone from the stream: gone from the group too.
            if let Some(nack) = nack {
                drop_pending(ctx, &stream, &mut group, &args[2], id, &nack);
            }
            continue;
        };
        let (nack, new) = match nack {
            Some(nack) => {
                if min_idle > 0 && now.saturating_sub(nack.delivered_ms) < min_idle {
                    continue;
                }
                (nack, false)
            }
            // Made by FORCE: delivered once, as Redis counts a new one.
            None if force => (Nack { delivered_ms: now, deliveries: 1, consumer: Vec::new() }, true),
            None => continue,
        };
        claim_one(ctx, &stream, &args[1], &mut group, &args[2], &args[3], id, nack, new, at, deliveries, justid)?;
        claimed.push((id, data));
    }
    stream.put_group(ctx, &args[2], &group, false)?;
    stream.store(ctx, &args[1])?;
    ctx.out.array(claimed.len());
    for (id, data) in claimed {
        if justid {
            reply_id(ctx.out, id);
        } else {
            reply_entry(ctx.out, id, &data)?;
        }
    }
    Ok(())
}

/// Forgets pending entry `id`, whose entry is gone from the stream.
fn drop_pending(ctx: &mut Ctx<'_>, stream: &Stream, group: &mut Group, group_name: &[u8], id: StreamId, nack: &Nack) {
    stream.delete_nack(ctx, group_name, id);
    group.pending -= 1;
    if let Some(consumer) = group.find(&nack.consumer) {
        consumer.pending -= 1;
    }
}

pub fn xautoclaim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let min_idle = super::args::parse_i64(&args[4])
        .ok_or_else(|| err("ERR Invalid min-idle-time argument for XAUTOCLAIM"))?
        .max(0) as u64;
    let (mut from, exclusive) = interval_id(&args[5], 0)?;
    if exclusive {
        from = from.next().ok_or_else(|| err("ERR invalid start ID for the interval"))?;
    }
    let mut count: u64 = 100;
    let mut justid = false;
    let mut i = 6;
    while i < args.len() {
        let more = args.len() - 1 - i;
        if eq(&args[i], "count") && more > 0 {
            let most = i64::MAX / 16;
            count = super::args::parse_i64(&args[i + 1])
                .filter(|n| (1..=most).contains(n))
                .ok_or_else(|| err("ERR COUNT must be > 0"))? as u64;
            i += 1;
        } else if eq(&args[i], "justid") {
            justid = true;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    let stream = open(ctx, &args[1])?;
    let group = match &stream {
        Some(stream) => stream.group(ctx, &args[2])?,
        None => None,
    };
    let (Some(stream), Some(mut group)) = (stream, group) else {
        return Err(nogroup(&args[1], &args[2]));
    };
    ctx.writes.keep_overlay();
    let now = now_ms();
    let mut attempts = count * 10;
    let mut claimed = Vec::new();
    let mut deleted = Vec::new();
    // The pending entry after the last one looked at: the next call's start.
    let mut cursor = StreamId::MIN;
    'scan: loop {
        let batch = stream.nacks(ctx, &args[2], from, StreamId::MAX, false, 1024)?;
        for (id, nack) in batch.iter().cloned() {
            if attempts == 0 || count == 0 {
                cursor = id;
                break 'scan;
            }
            attempts -= 1;
            let Some(data) = stream.entry(ctx, id)? else {
                drop_pending(ctx, &stream, &mut group, &args[2], id, &nack);
                deleted.push(id);
                count -= 1;
                continue;
            };
            if min_idle > 0 && now.saturating_sub(nack.delivered_ms) < min_idle {
                continue;
            }
            claim_one(ctx, &stream, &args[1], &mut group, &args[2], &args[3], id, nack, false, now, None, justid)?;
            claimed.push((id, data));
            count -= 1;
        }
        match batch.last().map(|(id, _)| id.next()) {
            Some(Some(next)) if batch.len() == 1024 => from = next,
            _ => break,
        }
    }
    let mut stream = stream;
    stream.put_group(ctx, &args[2], &group, false)?;
    ctx.out.array(3);
    reply_id(ctx.out, cursor);
    ctx.out.array(claimed.len());
    for (id, data) in claimed {
        if justid {
            reply_id(ctx.out, id);
        } else {
            reply_entry(ctx.out, id, &data)?;
        }
    }
    ctx.out.array(deleted.len());
    for id in deleted {
        reply_id(ctx.out, id);
    }
    Ok(())
}

const XGROUP_HELP: &[&str] = &[
    "XGROUP <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CREATE <key> <groupname> <id|$> [option]",
    "    Create a new consumer group. Options are:",
    "    * MKSTREAM",
    "      Create the empty stream if it does not exist.",
    "    * ENTRIESREAD entries_read",
    "      Set the group's entries_read counter (internal use).",
    "CREATECONSUMER <key> <groupname> <consumer>",
    "    Create a new consumer in the specified group.",
    "DELCONSUMER <key> <groupname> <consumer>",
    "    Remove the specified consumer.",
    "DESTROY <key> <groupname>",
    "    Remove the specified group.",
    "SETID <key> <groupname> <id|$> [ENTRIESREAD entries_read]",
    "    Set the current group ID and entries_read counter.",
    "HELP",
    "    Prints this help.",
];

fn subcommand_syntax(container: &str, sub: &[u8]) -> CmdError {
    let sub: String = String::from_utf8_lossy(sub).chars().take(128).collect();
    err(format!("ERR unknown subcommand or wrong number of arguments for '{sub}'. Try {container} HELP."))
}

/// ENTRIESREAD's value: a count, or -1 for unknown.
fn entries_read_arg(arg: &[u8]) -> Result<Option<u64>, CmdError> {
    let n = int(arg)?;
    if n < -1 {
        return Err(err("ERR value for ENTRIESREAD must be positive or -1"));
    }
    Ok(u64::try_from(n).ok())
}

pub fn xgroup(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = args[1].to_ascii_lowercase();
    let arity_ok = match sub.as_slice() {
        b"create" | b"setid" => args.len() >= 5,
        b"destroy" => args.len() == 4,
        b"createconsumer" | b"delconsumer" => args.len() == 5,
        b"help" => args.len() == 2,
        _ => return Err(super::unknown_subcommand("xgroup", &args[1])),
    };
    if !arity_ok {
        return Err(super::subcommand_arity("xgroup", std::str::from_utf8(&sub).unwrap_or_default()));
    }
    if sub == b"help" {
        ctx.out.help(XGROUP_HELP);
        return Ok(());
    }
    let (key, name) = (&args[2], &args[3]);
    let mut mkstream = false;
    let mut entries_read = None;
    if sub == b"create" {
        let mut i = 5;
        while i < args.len() {
            if eq(&args[i], "mkstream") {
                mkstream = true;
                i += 1;
            } else if eq(&args[i], "entriesread") && i + 1 < args.len() {
                entries_read = entries_read_arg(&args[i + 1])?;
                i += 2;
            } else {
                return Err(subcommand_syntax("XGROUP", &args[1]));
            }
        }
    }
    ctx.writes.keep_overlay();
    let stream = open(ctx, key)?;
    let group = match &stream {
        Some(stream) => stream.group(ctx, name)?,
        None => None,
    };
    if stream.is_none() && !mkstream {
        return Err(err("ERR The XGROUP subcommand requires the key to exist. Note that for CREATE you may want to use the MKSTREAM option to create an empty stream automatically."));
    }
    if group.is_none() && matches!(sub.as_slice(), b"setid" | b"createconsumer" | b"delconsumer") {
        return Err(err(format!(
            "NOGROUP No such consumer group '{}' for key name '{}'",
            String::from_utf8_lossy(name),
            String::from_utf8_lossy(key)
        )));
    }
    match sub.as_slice() {
        b"create" if args.len() <= 8 => {
            let id = match args[4].as_ref() {
                b"$" => stream.as_ref().map_or(StreamId::MIN, |s| s.meta.last_id),
                other => strict_id(other)?,
            };
            let mut stream = match stream {
                Some(stream) => stream,
                None => create(ctx, key)?,
            };
            if group.is_some() {
                return Err(err("BUSYGROUP Consumer Group name already exists"));
            }
            let group = Group { last_id: id, entries_read, ..Group::default() };
            stream.put_group(ctx, name, &group, true)?;
            stream.store(ctx, key)?;
            ctx.notify(NOTIFY, "xgroup-create", key);
            ctx.out.ok();
        }
        b"setid" if args.len() == 5 || args.len() == 7 => {
            let mut stream = stream.expect("checked above");
            let mut group = group.expect("checked above");
            let id = match args[4].as_ref() {
                b"$" => stream.meta.last_id,
                other => parse_id(other, 0, false).ok_or_else(|| err(INVALID_ID))?,
            };
            if args.len() == 7 {
                if !eq(&args[5], "entriesread") {
                    return Err(subcommand_syntax("XGROUP", &args[1]));
                }
                entries_read = entries_read_arg(&args[6])?;
            }
            group.last_id = id;
            group.entries_read = entries_read;
            stream.put_group(ctx, name, &group, false)?;
            ctx.notify(NOTIFY, "xgroup-setid", key);
            ctx.out.ok();
        }
        b"destroy" => {
            let (Some(mut stream), Some(_)) = (stream, group) else {
                ctx.out.int(0);
                return Ok(());
            };
            stream.drop_nacks(ctx, name, |_| false)?;
            ctx.writes.delete(&stream.key_of(&group_field(name)));
            ctx.writes.note_reserved(-1);
            stream.meta.groups -= 1;
            stream.store(ctx, key)?;
            ctx.notify(NOTIFY, "xgroup-destroy", key);
            // Consumers blocked on it get their error.
            ctx.writes.note_pushed();
            ctx.out.int(1);
        }
        b"createconsumer" => {
            let mut stream = stream.expect("checked above");
            let mut group = group.expect("checked above");
            let (_, created) = group.consumer(&args[4], now_ms());
            if created {
                stream.put_group(ctx, name, &group, false)?;
                ctx.notify(NOTIFY, "xgroup-createconsumer", key);
            }
            ctx.out.int(created as i64);
        }
        b"delconsumer" => {
            let mut stream = stream.expect("checked above");
            let mut group = group.expect("checked above");
            let consumer = args[4].as_ref();
            let pending = match group.remove(consumer) {
                Some(pending) => {
                    if pending > 0 {
                        stream.drop_nacks(ctx, name, |nack| nack.consumer != consumer)?;
                        group.pending -= pending;
                    }
                    stream.put_group(ctx, name, &group, false)?;
                    ctx.notify(NOTIFY, "xgroup-delconsumer", key);
                    pending
                }
                None => 0,
            };
            ctx.out.int(pending as i64);
        }
        _ => return Err(subcommand_syntax("XGROUP", &args[1])),
    }
    Ok(())
}

const XINFO_HELP: &[&str] = &[
    "XINFO <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
    "CONSUMERS <key> <groupname>",
    "    Show consumers of <groupname>.",
    "GROUPS <key>",
    "    Show the stream consumer groups.",
    "STREAM <key> [FULL [COUNT <count>]",
    "    Show information about the stream.",
    "HELP",
    "    Prints this help.",
];

pub fn xinfo(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = args[1].to_ascii_lowercase();
    let arity_ok = match sub.as_slice() {
        b"consumers" => args.len() == 4,
        b"groups" => args.len() == 3,
        b"stream" => args.len() >= 3,
        b"help" => args.len() == 2,
        _ => return Err(super::unknown_subcommand("xinfo", &args[1])),
    };
    if !arity_ok {
        return Err(super::subcommand_arity("xinfo", std::str::from_utf8(&sub).unwrap_or_default()));
    }
    if sub == b"help" {
        ctx.out.help(XINFO_HELP);
        return Ok(());
    }
    let Some(stream) = open(ctx, &args[2])? else {
        return Err(err("ERR no such key"));
    };
    match sub.as_slice() {
        b"consumers" => {
            let Some(group) = stream.group(ctx, &args[3])? else {
                return Err(err(format!(
                    "NOGROUP No such consumer group '{}' for key name '{}'",
                    String::from_utf8_lossy(&args[3]),
                    String::from_utf8_lossy(&args[2])
                )));
            };
            let now = now_ms();
            ctx.out.array(group.consumers.len());
            for consumer in &group.consumers {
                ctx.out.map(3);
                ctx.out.bulk(b"name");
                ctx.out.bulk(&consumer.name);
                ctx.out.bulk(b"pending");
                ctx.out.int(consumer.pending as i64);
                ctx.out.bulk(b"idle");
                ctx.out.int(now.saturating_sub(consumer.seen_ms) as i64);
            }
        }
        b"groups" => {
            let groups = stream.groups(ctx)?;
            ctx.out.array(groups.len());
            for (name, group) in &groups {
                ctx.out.map(6);
                ctx.out.bulk(b"name");
                ctx.out.bulk(name);
                ctx.out.bulk(b"consumers");
                ctx.out.int(group.consumers.len() as i64);
                ctx.out.bulk(b"pending");
                ctx.out.int(group.pending as i64);
                ctx.out.bulk(b"last-delivered-id");
                reply_id(ctx.out, group.last_id);
                reply_counters(ctx.out, &stream.meta, group);
            }
        }
        _ => stream_info(ctx, &stream, args)?,
    }
    Ok(())
}

/// A group's `entries-read` and `lag`, null where unknown.
fn reply_counters(out: &mut Out, meta: &Meta, group: &Group) {
    out.bulk(b"entries-read");
    match group.entries_read {
        Some(read) => out.int(read as i64),
        None => out.null(),
    }
    out.bulk(b"lag");
    match meta.lag(group) {
        Some(lag) => out.int(lag),
        None => out.null(),
    }
}

/// XINFO STREAM key [FULL [COUNT n]].
fn stream_info(ctx: &mut Ctx<'_>, stream: &Stream, args: &[Bytes]) -> CmdResult {
    let syntax = || subcommand_syntax("XINFO", &args[1]);
    let mut count = 10usize;
    let full = match &args[3..] {
        [] => false,
        [full] if eq(full, "full") => true,
        [full, word, n] if eq(full, "full") && eq(word, "count") => {
            let n = int(n)?;
            count = if n <= 0 { usize::MAX } else { n.min(isize::MAX as i64) as usize };
            true
        }
        _ => return Err(syntax()),
    };
    let meta = stream.meta;
    ctx.out.map(if full { 9 } else { 10 });
    ctx.out.bulk(b"length");
    ctx.out.int(meta.length as i64);
    // Redis's radix tree of listpacks: estimated at one node per 100
    // entries.
    let nodes = meta.length.div_ceil(NODE_ENTRIES);
    ctx.out.bulk(b"radix-tree-keys");
    ctx.out.int(nodes as i64);
    ctx.out.bulk(b"radix-tree-nodes");
    ctx.out.int(nodes as i64 + 1);
    ctx.out.bulk(b"last-generated-id");
    reply_id(ctx.out, meta.last_id);
    ctx.out.bulk(b"max-deleted-entry-id");
    reply_id(ctx.out, meta.max_deleted);
    ctx.out.bulk(b"entries-added");
    ctx.out.int(meta.entries_added as i64);
    ctx.out.bulk(b"recorded-first-entry-id");
    reply_id(ctx.out, meta.first_id);
    if !full {
        ctx.out.bulk(b"groups");
        ctx.out.int(meta.groups as i64);
        for (name, reverse) in [(&b"first-entry"[..], false), (b"last-entry", true)] {
            ctx.out.bulk(name);
            match stream.entries(ctx, StreamId::MIN, StreamId::MAX, reverse, 1)?.pop() {
                Some((id, data)) => reply_entry(ctx.out, id, &data)?,
                None => ctx.out.null(),
            }
        }
        return Ok(());
    }
    ctx.out.bulk(b"entries");
    let entries = stream.entries(ctx, StreamId::MIN, StreamId::MAX, false, count)?;
    reply_entries(ctx.out, &entries)?;
    ctx.out.bulk(b"groups");
    let groups = stream.groups(ctx)?;
    ctx.out.array(groups.len());
    for (name, group) in &groups {
        ctx.out.map(7);
        ctx.out.bulk(b"name");
        ctx.out.bulk(name);
        ctx.out.bulk(b"last-delivered-id");
        reply_id(ctx.out, group.last_id);
        reply_counters(ctx.out, &meta, group);
        ctx.out.bulk(b"pel-count");
        ctx.out.int(group.pending as i64);
        let pending = stream.nacks(ctx, name, StreamId::MIN, StreamId::MAX, false, count)?;
        ctx.out.bulk(b"pending");
        ctx.out.array(pending.len());
        for (id, nack) in &pending {
            ctx.out.array(4);
            reply_id(ctx.out, *id);
            ctx.out.bulk(&nack.consumer);
            ctx.out.int(nack.delivered_ms as i64);
            ctx.out.int(nack.deliveries as i64);
        }
        ctx.out.bulk(b"consumers");
        ctx.out.array(group.consumers.len());
        for consumer in &group.consumers {
            ctx.out.map(4);
            ctx.out.bulk(b"name");
            ctx.out.bulk(&consumer.name);
            ctx.out.bulk(b"seen-time");
            ctx.out.int(consumer.seen_ms as i64);
            ctx.out.bulk(b"pel-count");
            ctx.out.int(consumer.pending as i64);
            let own: Vec<_> = if consumer.pending == 0 {
                Vec::new()
            } else {
                let all = stream.nacks(ctx, name, StreamId::MIN, StreamId::MAX, false, usize::MAX)?;
                all.into_iter().filter(|(_, nack)| nack.consumer == consumer.name).take(count).collect()
            };
            ctx.out.bulk(b"pending");
            ctx.out.array(own.len());
            for (id, nack) in &own {
                ctx.out.array(3);
                reply_id(ctx.out, *id);
                ctx.out.int(nack.delivered_ms as i64);
                ctx.out.int(nack.deliveries as i64);
            }
        }
    }
    Ok(())
}

/// COPY of a stream: its entries, groups and pending entries under a new
/// table, its stub with the new table's id.
pub fn copy(ctx: &mut Ctx<'_>, to: &[u8], value: &crate::keyspace::Value) -> CmdResult {
    let meta = Meta::decode(value.data())?;
    let prefix = table::members_prefix(meta.table);
    let fields = ctx.writes.scan_internal(ctx.db(), &prefix, None, usize::MAX)?;
    let pairs: Vec<(Vec<u8>, Vec<u8>)> =
        fields.into_iter().map(|(key, value)| (key[prefix.len()..].to_vec(), value)).collect();
    let table = table::fill(ctx, to, TYPE_STREAM_TABLE, pairs.iter().map(|(f, v)| (&f[..], &v[..])))?;
    let copy = Meta { table: table.id, ..meta };
    ctx.writes.put(to, TYPE_STREAM_TABLE, &copy.encode(), value.expiry_ms())
}
