//! SUBSCRIBE, PSUBSCRIBE, SSUBSCRIBE, their UNSUBSCRIBEs, PUBLISH,
//! SPUBLISH and PUBSUB, with Redis 7.0's replies (`crate::pubsub` holds
//! the registry and the mailboxes).

use bytes::Bytes;

use super::{subcommand_arity, unknown_subcommand, CmdResult, Ctx};
use crate::keyspace::Message;
use crate::pubsub::Class;

fn subscribe_to(ctx: &mut Ctx<'_>, args: &[Bytes], class: Class) -> CmdResult {
    for name in &args[1..] {
        ctx.conn.subscriptions.subscribe(&ctx.shared.pubsub, class, name, &ctx.conn.info);
        let count = ctx.conn.subscriptions.count(class);
        confirm(ctx, class.subscribe_kind(), Some(name), count);
    }
    Ok(())
}

/// One (un)subscribe confirmation: the kind, the name (null for an
/// unsubscribe from everything when there was nothing) and the count of
/// subscriptions left.
fn confirm(ctx: &mut Ctx<'_>, kind: &[u8], name: Option<&[u8]>, count: usize) {
    let out = &mut *ctx.out;
    out.push(3);
    out.bulk(kind);
    out.bulk_opt(name);
    out.int(count as i64);
}

fn unsubscribe_from(ctx: &mut Ctx<'_>, args: &[Bytes], class: Class) -> CmdResult {
    let names = (args.len() > 1).then(|| &args[1..]);
    let conn = &mut *ctx.conn;
    let gone = conn.subscriptions.unsubscribe(&ctx.shared.pubsub, class, names, &conn.info);
    // Published before it left: sent before its confirmation (even when
    // nothing is left subscribed, which `ConnState::deliver` would skip).
    conn.info.mail.deliver(ctx.out);
    if gone.is_empty() {
        let count = ctx.conn.subscriptions.count(class);
        confirm(ctx, class.unsubscribe_kind(), None, count);
    }
    // Each confirmation counts what was left after that name, as Redis
    // unsubscribes one name at a time.
    let mut left = ctx.conn.subscriptions.count(class) + gone.iter().filter(|(_, was)| *was).count();
    for (name, was) in gone {
        left -= was as usize;
        confirm(ctx, class.unsubscribe_kind(), Some(&name), left);
    }
    Ok(())
}

pub fn subscribe(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    subscribe_to(ctx, args, Class::Channel)
}

pub fn psubscribe(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    subscribe_to(ctx, args, Class::Pattern)
}

pub fn ssubscribe(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    subscribe_to(ctx, args, Class::Shard)
}

pub fn unsubscribe(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    unsubscribe_from(ctx, args, Class::Channel)
}

pub fn punsubscribe(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    unsubscribe_from(ctx, args, Class::Pattern)
}

pub fn sunsubscribe(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    unsubscribe_from(ctx, args, Class::Shard)
}

pub fn publish(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if ctx.writes.defers_messages() {
        return defer(ctx, args, false);
    }
    let received = ctx.shared.pubsub.publish(&args[1], &args[2], &mut ctx.conn.woken);
    // A RESP3 client listening to its own channel gets the message first.
    ctx.conn.deliver(ctx.out);
    ctx.out.int(received as i64);
    Ok(())
}

/// PUBLISH or SPUBLISH in a transaction or a script: the message goes
/// once its writes commit (`Writes::defer_messages`); the reply counts the
/// clients that listen now.
fn defer(ctx: &mut Ctx<'_>, args: &[Bytes], shard: bool) -> CmdResult {
    let pubsub = &ctx.shared.pubsub;
    let receivers = if shard { pubsub.listeners(Class::Shard, &args[1]) } else { pubsub.receivers(&args[1]) };
    let message = Message { channel: args[1].clone(), payload: args[2].clone(), shard };
    ctx.writes.note_message(message);
    ctx.out.int(receivers as i64);
    Ok(())
}

/// Sends the messages a transaction or a script published, once its
/// writes are visible.
pub fn send_held(shared: &crate::server::Shared, messages: &[Message]) {
    let mut woken = Vec::new();
    for message in messages {
        if message.shard {
            shared.pubsub.publish_shard(&message.channel, &message.payload, &mut woken);
        } else {
            shared.pubsub.publish(&message.channel, &message.payload, &mut woken);
        }
    }
    crate::pubsub::wake(&mut woken);
}

pub fn spublish(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if ctx.writes.defers_messages() {
        return defer(ctx, args, true);
    }
    let received = ctx.shared.pubsub.publish_shard(&args[1], &args[2], &mut ctx.conn.woken);
    ctx.conn.deliver(ctx.out);
    ctx.out.int(received as i64);
    Ok(())
}

/// PUBSUB CHANNELS, NUMSUB, NUMPAT, SHARDCHANNELS, SHARDNUMSUB and HELP.
pub fn pubsub(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let sub = String::from_utf8_lossy(&args[1]).to_ascii_lowercase();
    let pubsub = &ctx.shared.pubsub;
    let out = &mut *ctx.out;
    match sub.as_str() {
        "channels" | "shardchannels" if args.len() <= 3 => {
            let class = if sub == "channels" { Class::Channel } else { Class::Shard };
            let names = pubsub.active(class, args.get(2).map(|p| &p[..]));
            out.array(names.len());
            for name in names {
                out.bulk(&name);
            }
        }
        "channels" | "shardchannels" => return Err(super::subcommand_syntax("PUBSUB", &args[1])),
        "numsub" | "shardnumsub" => {
            let class = if sub == "numsub" { Class::Channel } else { Class::Shard };
            // A flat array in RESP3 too, as Redis 7.0 answers.
            out.array(2 * (args.len() - 2));
            for name in &args[2..] {
                out.bulk(name);
                out.int(pubsub.listeners(class, name) as i64);
            }
        }
        "numpat" if args.len() == 2 => out.int(pubsub.count(Class::Pattern) as i64),
        "help" if args.len() == 2 => out.help(&[
            "PUBSUB <subcommand> [<arg> [value] [opt] ...]. Subcommands are:",
            "CHANNELS [<pattern>]",
            "    Return the currently active channels matching a <pattern> (default: '*').",
            "NUMPAT",
            "    Return number of subscriptions to patterns.",
            "NUMSUB [<channel> ...]",
            "    Return the number of subscribers for the specified channels, excluding",
            "    pattern subscriptions(default: no channels).",
            "SHARDCHANNELS [<pattern>]",
            "    Return the currently active shard level channels matching a <pattern> (default: '*').",
            "SHARDNUMSUB [<shardchannel> ...]",
            "    Return the number of subscribers for the specified shard level channel(s)",
            "HELP",
            "    Prints this help.",
        ]),
        "numpat" | "help" => return Err(subcommand_arity("pubsub", &sub)),
        _ => return Err(unknown_subcommand("pubsub", &args[1])),
    }
    Ok(())
}

/// The commands a RESP2 client may run while subscribed (Redis's
/// subscribed mode: replies and messages share one stream, told apart by
/// their first element).
pub fn allowed_while_subscribed(name: &str) -> bool {
    matches!(
        name,
        "subscribe"
            | "psubscribe"
            | "ssubscribe"
            | "unsubscribe"
            | "punsubscribe"
            | "sunsubscribe"
            | "ping"
            | "quit"
            | "reset"
    )
}

/// Redis's refusal of another command in subscribed mode; a container's
/// subcommand is named as Redis names it (`client|info`).
pub fn not_while_subscribed(name: &str, args: &[Bytes]) -> String {
    let containers = ["client", "config", "memory", "command", "object", "pubsub"];
    let full = match args.get(1) {
        Some(sub) if containers.contains(&name) => {
            format!("{name}|{}", String::from_utf8_lossy(sub).to_ascii_lowercase())
        }
        _ => name.to_string(),
    };
    format!(
        "ERR Can't execute '{full}': only (P|S)SUBSCRIBE / (P|S)UNSUBSCRIBE / PING / QUIT / RESET are allowed in this context"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusals_name_subcommands_as_redis_does() {
        let args = [Bytes::from("CLIENT"), Bytes::from("INFO")];
        assert!(not_while_subscribed("client", &args).starts_with("ERR Can't execute 'client|info':"));
        let args = [Bytes::from("GET"), Bytes::from("k")];
        assert!(not_while_subscribed("get", &args).starts_with("ERR Can't execute 'get':"));
        assert!(allowed_while_subscribed("ping") && !allowed_while_subscribed("get"));
    }
}
