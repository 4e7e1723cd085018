//! XINFO: a stream's, its groups' and their consumers' state.

use std::collections::HashMap;

use bytes::Bytes;
use scaledkv::now_ms;

use super::{open, reply_entries, reply_entry, reply_id, Stream, NODE_ENTRIES};
use crate::commands::args::{eq, int};
use crate::commands::subcommand_syntax;
use crate::commands::{err, CmdResult, Ctx};
use crate::resp::Out;
use crate::stream::{Group, Meta, Nack, StreamId};

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
        _ => return Err(crate::commands::unknown_subcommand("xinfo", &args[1])),
    };
    if !arity_ok {
        return Err(crate::commands::subcommand_arity("xinfo", std::str::from_utf8(&sub).unwrap_or_default()));
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
                ctx.out.int(group.pending() as i64);
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
        ctx.out.int(group.pending() as i64);
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
        // Each consumer's first `count` pending entries, from one scan of
        // the group's (they are not kept per consumer).
        let mut by_consumer: HashMap<Vec<u8>, Vec<(StreamId, Nack)>> = HashMap::new();
        if group.pending() > 0 {
            for (id, nack) in stream.nacks(ctx, name, StreamId::MIN, StreamId::MAX, false, usize::MAX)? {
                let own = by_consumer.entry(nack.consumer.clone()).or_default();
                if own.len() < count {
                    own.push((id, nack));
                }
            }
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
            let own = by_consumer.remove(&consumer.name).unwrap_or_default();
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
