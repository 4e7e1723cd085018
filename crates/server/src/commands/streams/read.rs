//! XREAD and XREADGROUP: their options, what a read serves, and the wait
//! of one with BLOCK (`CmdError::Blocked`, run again when an XADD wakes
//! it).

use bytes::Bytes;
use scaledkv::now_ms;

use super::{open, open_group, reply_entry, reply_id, strict_id, Entry, Stream, NOTIFY};
use crate::commands::args::{eq, int};
use crate::commands::{err, CmdError, CmdResult, Ctx};
use crate::resp::{Out, Protocol};
use crate::stream::{Group, Nack, StreamId};

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
            let ms = crate::commands::args::parse_i64(&args[i])
                .ok_or_else(|| err("ERR timeout is not an integer or out of range"))?;
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

/// An XREAD's or XREADGROUP's options (as `args`, its name first).
fn read_args(args: &[Bytes]) -> Result<ReadArgs<'_>, CmdError> {
    parse_read_args(args, args[0].eq_ignore_ascii_case(b"xreadgroup"))
}

/// The stream keys of an XREAD or XREADGROUP, which it waits on.
pub fn read_keys(args: &[Bytes]) -> &[Bytes] {
    read_args(args).map_or(&[], |parsed| parsed.keys)
}

/// Whether an XREAD or XREADGROUP may block (it has a BLOCK option).
pub fn may_block(args: &[Bytes]) -> bool {
    read_args(args).is_ok_and(|parsed| parsed.block.is_some())
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
        // Redis looks each key up again to serve it: a second hit or miss.
        ctx.count_lookup(key, stream.is_some());
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
    let pieces = ctx.writes.may_commit_in_pieces();
    ctx.writes.keep_overlay();
    let mut targets = Vec::with_capacity(parsed.keys.len());
    for (key, id) in parsed.keys.iter().zip(parsed.ids) {
        let (stream, group) = open_group(ctx, key, group_name)?;
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
        // Looked up again to serve it, as in XREAD.
        ctx.count_lookup(key, true);
        let stream = &mut stream;
        // As in Redis 7.0, a consumer is made (or seen) only by a read
        // that is served: its history always, new entries if there are.
        let entries = match id {
            Some(after) => {
                touch(ctx, &mut group, consumer_name, key, now);
                history(ctx, stream, group_name, consumer_name, after, limit, pieces)?
            }
            None => {
                let Some(from) = group.last_id.next() else { continue };
                let entries = stream.entries(ctx, from, StreamId::MAX, false, limit)?;
                if entries.is_empty() {
                    continue;
                }
                touch(ctx, &mut group, consumer_name, key, now);
                let to = Delivery { group_name, consumer_name, noack: parsed.noack, now, pieces };
                deliver(ctx, stream, &mut group, &to, entries)?
            }
        };
        stream.put_group(ctx, group_name, &group, false)?;
        ctx.note_unpublished(key);
        served.push((key.clone(), entries));
    }
    if served.is_empty() {
        return nothing_yet(ctx, args, &parsed, &[]);
    }
    reply_served(ctx.out, &served)
}

/// A consumer's own pending entries after `after`: delivered once more.
/// With `pieces` (where `Writes::may_commit_in_pieces`) their updates
/// past a piece (`Writes::piece_bytes`) are committed as they go; in a
/// pipeline's run the read gives up there to run again alone.
fn history(
    ctx: &mut Ctx<'_>,
    stream: &Stream,
    group_name: &[u8],
    consumer_name: &[u8],
    after: StreamId,
    limit: usize,
    pieces: bool,
) -> Result<Delivered, CmdError> {
    let mut found = Vec::new();
    let Some(from) = after.next() else { return Ok(found) };
    let now = now_ms();
    stream.visit_nacks(ctx, group_name, from, StreamId::MAX, |ctx, id, mut nack| {
        if nack.consumer != consumer_name {
            return Ok(true);
        }
        let data = stream.entry(ctx, id)?;
        if data.is_some() {
            nack.delivered_ms = now;
            nack.deliveries += 1;
            stream.put_nack(ctx, group_name, id, &nack, false)?;
            if ctx.writes.piece_due(ctx.db(), pieces)? {
                ctx.writes.commit_piece(ctx.shared)?;
            }
        }
        found.push((id, data));
        Ok(found.len() < limit)
    })?;
    Ok(found)
}

/// Consumer `name` of `group`, made if new, is seen now.
pub(super) fn touch(ctx: &mut Ctx<'_>, group: &mut Group, name: &[u8], key: &[u8], now: u64) {
    let (consumer, created) = group.consumer(name, now);
    consumer.seen_ms = now;
    if created {
        ctx.notify(NOTIFY, "xgroup-createconsumer", key);
    }
}

/// To whom and how `deliver` delivers.
struct Delivery<'a> {
    group_name: &'a [u8],
    consumer_name: &'a [u8],
    /// Delivered without becoming pending.
    noack: bool,
    now: u64,
    /// Whether `Writes::may_commit_in_pieces`.
    pieces: bool,
}

/// Entries past the group's last delivered one (`>`), now delivered to
/// the consumer: pending unless `noack`. With `pieces`, pending entries
/// past a piece (`Writes::piece_bytes`) are committed as they go, each with
/// the group's record (its last entry, each consumer's count), so a
/// delivery of any size fits and a crash leaves the group as if a read
/// with a smaller COUNT had been served (and its reply lost). In a
/// pipeline's run the read gives up there to run again alone.
fn deliver(
    ctx: &mut Ctx<'_>,
    stream: &Stream,
    group: &mut Group,
    to: &Delivery<'_>,
    entries: Vec<Entry>,
) -> Result<Delivered, CmdError> {
    let Delivery { group_name, consumer_name, noack, now, pieces } = *to;
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
                    stream.put_nack(ctx, group_name, id, &nack, true)?;
                }
            }
            group.consumer(consumer_name, now).0.pending += 1;
            stream.end_group_piece(ctx, group_name, group, pieces)?;
        }
        served.push((id, Some(data)));
    }
    Ok(served)
}
