//! Consumer groups: XGROUP, XACK, XPENDING, XCLAIM, XAUTOCLAIM (XREADGROUP
//! is in `read.rs`).

use bytes::Bytes;
use scaledkv::now_ms;

use super::read::touch;
use super::{
    create, interval, interval_id, nogroup, open_group, reply_entry, reply_id, strict_id, Entry, Stream, INVALID_ID,
    NOTIFY,
};
use crate::commands::args::{eq, int};
use crate::commands::{err, subcommand_syntax, CmdError, CmdResult, Ctx};
use crate::resp::Out;
use crate::stream::{group_field, parse_id, Group, Nack, StreamId};

/// XACK. Acknowledgements past one piece are committed in pieces, each
/// with the group's record (`Stream::end_group_piece`): a crash leaves
/// some of them made.
pub fn xack(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let pieces = ctx.writes.may_commit_in_pieces();
    let (stream, group) = open_group(ctx, &args[1], &args[2])?;
    let ids = args[3..].iter().map(|arg| strict_id(arg)).collect::<Result<Vec<_>, _>>()?;
    let (Some(mut stream), Some(mut group)) = (stream, group) else {
        ctx.out.int(0);
        return Ok(());
    };
    ctx.writes.keep_overlay();
    let mut acknowledged = 0;
    for id in ids {
        let Some(nack) = stream.nack(ctx, &args[2], id)? else { continue };
        drop_pending(ctx, &stream, &mut group, &args[2], id, &nack);
        acknowledged += 1;
        stream.end_group_piece(ctx, &args[2], &group, pieces)?;
    }
    if acknowledged > 0 {
        stream.put_group(ctx, &args[2], &group, false)?;
        ctx.note_unpublished(&args[1]);
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
    let (stream, group) = open_group(ctx, &args[1], &args[2])?;
    let (Some(stream), Some(group)) = (stream, group) else {
        return Err(nogroup(&args[1], &args[2]));
    };
    if summary {
        ctx.out.array(4);
        ctx.out.int(group.pending() as i64);
        let first = stream.nacks(ctx, &args[2], StreamId::MIN, StreamId::MAX, false, 1)?;
        let last = stream.nacks(ctx, &args[2], StreamId::MIN, StreamId::MAX, true, 1)?;
        match (first.first(), last.first()) {
            (Some((first, _)), Some((last, _))) if group.pending() > 0 => {
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
    if count > 0 {
        stream.visit_nacks(ctx, &args[2], from, to, |_, id, nack| {
            if consumer_name.is_some_and(|name| nack.consumer != name.as_ref()) {
                return Ok(true);
            }
            let idle = now.saturating_sub(nack.delivered_ms);
            if min_idle != 0 && (idle as i64) < min_idle {
                return Ok(true);
            }
            found.push((id, nack, idle));
            count -= 1;
            Ok(count > 0)
        })?;
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
    if !new && nack.consumer != consumer_name {
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
    let (stream, group) = open_group(ctx, &args[1], &args[2])?;
    let (Some(mut stream), Some(mut group)) = (stream, group) else {
        return Err(nogroup(&args[1], &args[2]));
    };
    let min_idle = crate::commands::args::parse_i64(&args[4])
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
            crate::commands::args::parse_i64(arg)
                .ok_or_else(|| err(format!("ERR Invalid {what} option argument for XCLAIM")))
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
    ctx.note_unpublished(&args[1]);
    reply_claimed(ctx.out, &claimed, justid)?;
    Ok(())
}

/// XCLAIM's and XAUTOCLAIM's claimed entries: their IDs (JUSTID) or the
/// entries.
fn reply_claimed(out: &mut Out, claimed: &[Entry], justid: bool) -> CmdResult {
    out.array(claimed.len());
    for (id, data) in claimed {
        if justid {
            reply_id(out, *id);
        } else {
            reply_entry(out, *id, data)?;
        }
    }
    Ok(())
}

/// Forgets pending entry `id` (acknowledged, or its entry gone from the
/// stream).
fn drop_pending(ctx: &mut Ctx<'_>, stream: &Stream, group: &mut Group, group_name: &[u8], id: StreamId, nack: &Nack) {
    stream.delete_nack(ctx, group_name, id);
    if let Some(consumer) = group.find(&nack.consumer) {
        consumer.pending -= 1;
    }
}

pub fn xautoclaim(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let min_idle = crate::commands::args::parse_i64(&args[4])
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
            count = crate::commands::args::parse_i64(&args[i + 1])
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
    let (stream, group) = open_group(ctx, &args[1], &args[2])?;
    let (Some(mut stream), Some(mut group)) = (stream, group) else {
        return Err(nogroup(&args[1], &args[2]));
    };
    ctx.writes.keep_overlay();
    let now = now_ms();
    let mut attempts = count * 10;
    let mut claimed = Vec::new();
    let mut deleted = Vec::new();
    // The pending entry after the last one looked at: the next call's start.
    let mut cursor = StreamId::MIN;
    stream.visit_nacks(ctx, &args[2], from, StreamId::MAX, |ctx, id, nack| {
        if attempts == 0 || count == 0 {
            cursor = id;
            return Ok(false);
        }
        attempts -= 1;
        let Some(data) = stream.entry(ctx, id)? else {
            drop_pending(ctx, &stream, &mut group, &args[2], id, &nack);
            deleted.push(id);
            count -= 1;
            return Ok(true);
        };
        if min_idle > 0 && now.saturating_sub(nack.delivered_ms) < min_idle {
            return Ok(true);
        }
        claim_one(ctx, &stream, &args[1], &mut group, &args[2], &args[3], id, nack, false, now, None, justid)?;
        claimed.push((id, data));
        count -= 1;
        Ok(true)
    })?;
    stream.put_group(ctx, &args[2], &group, false)?;
    ctx.note_unpublished(&args[1]);
    ctx.out.array(3);
    reply_id(ctx.out, cursor);
    reply_claimed(ctx.out, &claimed, justid)?;
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
        _ => return Err(crate::commands::unknown_subcommand("xgroup", &args[1])),
    };
    if !arity_ok {
        return Err(crate::commands::subcommand_arity("xgroup", std::str::from_utf8(&sub).unwrap_or_default()));
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
    let pieces = ctx.writes.may_commit_in_pieces();
    ctx.writes.keep_overlay();
    let (stream, group) = open_group(ctx, key, name)?;
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
            let (Some(mut stream), Some(mut group)) = (stream, group) else {
                ctx.out.int(0);
                return Ok(());
            };
            stream.drop_nacks(ctx, name, &mut group, |_| false, pieces)?;
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
            let pending = group.find(consumer).map(|c| c.pending);
            if pending.is_some_and(|pending| pending > 0) {
                stream.drop_nacks(ctx, name, &mut group, |nack| nack.consumer != consumer, pieces)?;
            }
            let pending = match pending {
                Some(pending) => {
                    group.remove(consumer);
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
