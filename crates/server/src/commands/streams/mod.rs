//! Stream commands, with Redis 7.0's replies and errors. Here: a
//! stream's parts as a command reads and changes them (`Stream`), XADD
//! XLEN XRANGE XREVRANGE XDEL XTRIM XSETID and COPY; `read.rs` has XREAD
//! and XREADGROUP (BLOCK), `groups.rs` the other consumer-group commands
//! (XGROUP XACK XPENDING XCLAIM XAUTOCLAIM), `info.rs` XINFO.
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

mod groups;
mod info;
mod read;

pub use groups::{xack, xautoclaim, xclaim, xgroup, xpending};
pub use info::xinfo;
pub use read::{may_block, read_keys, xread, xreadgroup};

use std::ops::Bound;

use bytes::Bytes;
use scaledkv::now_ms;

use super::args::{eq, int};
use super::table::{self, member_key};
use super::{err, CmdError, CmdResult, Ctx};
use crate::keyspace::TYPE_STREAM_TABLE;
use crate::resp::Out;
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
            if ctx.shared.master.streaming() {
                ctx.writes.note_table_read(key, &value);
            }
            let meta = Meta::decode(value.data())?;
            Ok(Some(Stream { meta, expiry: value.expiry_ms(), read_as: Some(meta) }))
        }
    }
}

/// The stream at `key` and its group `name`, where they exist.
fn open_group(ctx: &mut Ctx<'_>, key: &[u8], name: &[u8]) -> Result<(Option<Stream>, Option<Group>), CmdError> {
    let stream = open(ctx, key)?;
    let group = match &stream {
        Some(stream) => stream.group(ctx, name)?,
        None => None,
    };
    Ok((stream, group))
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
        let found = ctx.writes.get_internal(ctx.db(), &key)?;
        if ctx.shared.master.streaming() {
            // Every change to a group reads it first: the first read is
            // what the replicas hold (`master::stream_commands`).
            ctx.writes.note_group_read(self.meta.table, &key, name, found.as_ref().map(|value| value.data()));
        }
        match found {
            Some(value) => Ok(Some(Group::decode(value.data())?)),
            None => Ok(None),
        }
    }

    fn put_group(&mut self, ctx: &mut Ctx<'_>, name: &[u8], group: &Group, new: bool) -> CmdResult {
        self.write_group(ctx, name, group)?;
        if new {
            ctx.writes.note_reserved(1);
            self.meta.groups += 1;
        }
        Ok(())
    }

    /// Writes group `name`'s record (`put_group` also counts a new one
    /// in the stub).
    fn write_group(&self, ctx: &mut Ctx<'_>, name: &[u8], group: &Group) -> CmdResult {
        let key = self.key_of(&group_field(name));
        table::check_field(&key)?;
        ctx.writes.put_internal(&key, table::TYPE_FIELD, &group.encode(), None)?;
        Ok(())
    }

    /// Where a change to group `name` leaves it whole (`group` as changed
    /// so far): commits a piece with the group's record when one is due
    /// (`Writes::piece_due`).
    fn end_group_piece(&self, ctx: &mut Ctx<'_>, name: &[u8], group: &Group, pieces: bool) -> CmdResult {
        if ctx.writes.piece_due(ctx.db(), pieces)? {
            self.write_group(ctx, name, group)?;
            ctx.writes.commit_piece(ctx.shared)?;
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

    /// Calls `visit` with each pending entry of `group` with an ID in
    /// `from..=to`, in ID order, until it returns false; they are read in
    /// batches that grow with how many were visited (`batch_size`).
    fn visit_nacks(
        &self,
        ctx: &mut Ctx<'_>,
        group: &[u8],
        mut from: StreamId,
        to: StreamId,
        mut visit: impl FnMut(&mut Ctx<'_>, StreamId, Nack) -> Result<bool, CmdError>,
    ) -> CmdResult {
        let mut visited = 0;
        loop {
            let size = batch_size(visited) as usize;
            let batch = self.nacks(ctx, group, from, to, false, size)?;
            let (full, last) = (batch.len() == size, batch.last().map(|(id, _)| *id));
            for (id, nack) in batch {
                visited += 1;
                if !visit(ctx, id, nack)? {
                    return Ok(());
                }
            }
            match last.and_then(StreamId::next) {
                Some(next) if full => from = next,
                _ => return Ok(()),
            }
        }
    }

    /// Deletes every pending entry of group `name` (`group`, whose
    /// consumers' counts follow) that `keep` refuses; how many went. With
    /// `pieces` (where `Writes::may_commit_in_pieces`) deletes past a
    /// piece (`Writes::piece_bytes`) are committed as they go, each with the
    /// group's record counting what is still pending, so a group of any
    /// size goes and a crash leaves it as if the entries deleted so far
    /// had been acknowledged. In a pipeline's run it gives up to run again
    /// alone (`CmdError::RunAlone`).
    fn drop_nacks(
        &self,
        ctx: &mut Ctx<'_>,
        name: &[u8],
        group: &mut Group,
        keep: impl Fn(&Nack) -> bool,
        pieces: bool,
    ) -> Result<u64, CmdError> {
        let mut dropped = 0;
        self.visit_nacks(ctx, name, StreamId::MIN, StreamId::MAX, |ctx, id, nack| {
            if !keep(&nack) {
                self.delete_nack(ctx, name, id);
                if let Some(consumer) = group.find(&nack.consumer) {
                    consumer.pending = consumer.pending.saturating_sub(1);
                }
                dropped += 1;
            }
            self.end_group_piece(ctx, name, group, pieces)?;
            Ok(true)
        })?;
        Ok(dropped)
    }
}

/// How many entries the next batch of a long deletion takes, after
/// `done`: it grows with what is done (in whole nodes of 100), because
/// each batch's scan also looks at every write of its command so far; a
/// fixed batch of 1,024 made XTRIM of 800,000 entries take 22 s.
fn batch_size(done: u64) -> u64 {
    done.clamp(1_000, 64_000) / NODE_ENTRIES * NODE_ENTRIES
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
/// With `pieces` (the key, where `Writes::may_commit_in_pieces`) a trim
/// whose deletes outgrow a piece (`Writes::piece_bytes`) commits them as they go,
/// each piece with the stub's new length and first entry, so a trim of any
/// size fits and a crash leaves the stream as a smaller trim would. In a
/// pipeline's run (`Writes::piece_due`) such a trim gives up, to
/// run again alone.
fn trim(ctx: &mut Ctx<'_>, stream: &mut Stream, parsed: &AddArgs, pieces: Option<&[u8]>) -> Result<u64, CmdError> {
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
    if parsed.approx {
        left -= left % NODE_ENTRIES;
    }
    let mut from = StreamId::MIN;
    let mut trimmed = 0;
    // The first entry left, once a batch has seen it.
    let mut first_left = None;
    while left > 0 {
        // An iterator, not a walk of the keys: a walk looks at every pending
        // index update of the database (capped XADDs at -P 16: 74-96k/s
        // that way, 138-171k/s this way). Each iterator first merges the
        // index's pending updates, so one batch also reads the entry after
        // it: the next first entry, with no iterator of its own.
        let want = left.min(batch_size(trimmed)) as usize;
        let found = stream.entries(ctx, from, StreamId::MAX, false, want + 1)?;
        let mut doomed = found.iter().take(want).take_while(|(id, _)| *id <= to).count();
        if parsed.approx {
            doomed -= doomed % NODE_ENTRIES as usize;
        }
        for (at, (id, _)) in found[..doomed].iter().enumerate() {
            stream.delete_entry(ctx, *id);
            let due = ctx.writes.piece_due(ctx.db(), pieces.is_some())?;
            let (true, Some(key), Some((next, _))) = (due, pieces, found.get(at + 1)) else { continue };
            stream.meta.first_id = *next;
            stream.store(ctx, key)?;
            ctx.writes.commit_piece(ctx.shared)?;
            stream.read_as = Some(stream.meta);
        }
        trimmed += doomed as u64;
        left -= doomed as u64;
        first_left = found.get(doomed).map(|(id, _)| *id);
        if doomed == 0 {
            break;
        }
        match first_left {
            Some(next) if doomed == want => from = next,
            _ => break,
        }
    }
    if trimmed > 0 {
        match first_left {
            Some(first) => stream.meta.first_id = first,
            None => stream.refresh_first(ctx)?,
        }
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
    let pieces = ctx.writes.may_commit_in_pieces().then_some(&key[..]);
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
    if trim(ctx, &mut stream, &parsed, pieces)? > 0 {
        ctx.notify(NOTIFY, "xtrim", key);
    }
    stream.store(ctx, key)?;
    // Clients blocked in XREAD on it look again.
    ctx.writes.note_pushed();
    Ok(())
}

pub fn xtrim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let parsed = parse_add_args(args, false)?;
    let pieces = ctx.writes.may_commit_in_pieces().then_some(&args[1][..]);
    ctx.writes.keep_overlay();
    let Some(mut stream) = open(ctx, &args[1])? else {
        ctx.out.int(0);
        return Ok(());
    };
    let trimmed = trim(ctx, &mut stream, &parsed, pieces)?;
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

/// COPY of a stream: its entries, groups and pending entries under a new
/// table, its stub with the new table's id.
pub fn copy(ctx: &mut Ctx<'_>, to: &[u8], value: &crate::keyspace::Value) -> CmdResult {
    let meta = Meta::decode(value.data())?;
    let pairs = table::entries(ctx, &table::Table::of(value)?, None, usize::MAX)?;
    let table = table::fill(ctx, to, TYPE_STREAM_TABLE, pairs.iter().map(|(f, v)| (&f[..], &v[..])))?;
    let copy = Meta { table: table.id, ..meta };
    ctx.writes.put(to, TYPE_STREAM_TABLE, &copy.encode(), value.expiry_ms())
}
