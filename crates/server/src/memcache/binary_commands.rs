//! memcached's binary commands over the shared keyspace, with memcached
//! 1.6.18's responses and statuses. Those that touch keys run through the
//! executor (`commands::run_command`) as the text commands do: the same key
//! locks, runs of pipelined writes in one group commit, responses sent only
//! once durable. NOOP, VERSION, QUIT, STAT and SASL answer at once.
//!
//! A request's CAS, when not 0, makes SET, ADD and REPLACE a compare and
//! swap (as memcached, whatever the opcode), and APPEND, PREPEND, DELETE
//! and INCREMENT/DECREMENT fail with "exists" unless it is the item's.
//! INCREMENT/DECREMENT of a missing key stores the initial value unless
//! the expiration is 0xffffffff. With `requirepass` set, a connection
//! authenticates by SASL PLAIN (any user name, the password); until then
//! every command but the SASL ones and VERSION closes it, as memcached's
//! `-S` does.

use bytes::Bytes;

use super::binary::{self, failure, op, respond, success, Frame, Parser, Status, Tag};
use super::commands::{
    bump, cas_of, check_key, counter, expiry, flags_of, general, joined_fits, put_delta, put_expiry, put_item,
    put_joined, read_item, reset, settings, VERSION,
};
use super::request::Limits;
use super::Io;
use crate::commands::{run_command, CmdResult, Command, Ctx, ALL_KEYS, BLIND, READONLY, WRITE};
use crate::conn::ConnState;
use crate::keyspace::TYPE_STRING;
use crate::notify::{GENERIC, STRING};
use crate::resp::Out;
use crate::server::Shared;
use crate::socket::Stream;

const ONE: (i32, i32, i32) = (1, 1, 1);

/// The commands that touch keys; their arguments are `[name, key, extras,
/// value]` (FLUSH: `[name, extras]`), the request's tag in `Out::binary`.
macro_rules! command {
    ($name:literal, $flags:expr, $keys:expr, $run:path) => {
        Command { name: $name, arity: -1, flags: $flags, keys: $keys, group: "memcached", summary: "", run: $run }
    };
}

static GET: Command = command!("get", READONLY, ONE, get);
// Writes for the new expiry time they set.
static TOUCH: Command = command!("touch", WRITE, ONE, get);
static GAT: Command = command!("gat", WRITE, ONE, get);
static SET: Command = command!("set", WRITE | BLIND, ONE, store);
static ADD: Command = command!("add", WRITE, ONE, store);
static REPLACE: Command = command!("replace", WRITE, ONE, store);
/// SET, ADD or REPLACE with a CAS.
static CAS: Command = command!("cas", WRITE, ONE, store);
static APPEND: Command = command!("append", WRITE, ONE, join);
static PREPEND: Command = command!("prepend", WRITE, ONE, join);
static DELETE: Command = command!("delete", WRITE, ONE, delete);
/// An oversized SET's old item goes, without a response of its own.
static DROP: Command = command!("delete", WRITE, ONE, drop_item);
static INCR: Command = command!("incr", WRITE, ONE, arithmetic);
static DECR: Command = command!("decr", WRITE, ONE, arithmetic);
static FLUSH: Command = command!("flush_all", WRITE | ALL_KEYS, (0, 0, 0), flush);

/// The executor's command for a request that touches keys.
fn command_of(tag: &Tag) -> Option<&'static Command> {
    Some(match tag.command {
        op::GET | op::GETK => &GET,
        op::TOUCH => &TOUCH,
        op::GAT | op::GATK => &GAT,
        op::SET | op::ADD | op::REPLACE if tag.cas != 0 => &CAS,
        op::SET => &SET,
        op::ADD => &ADD,
        op::REPLACE => &REPLACE,
        op::APPEND => &APPEND,
        op::PREPEND => &PREPEND,
        op::DELETE => &DELETE,
        op::INCREMENT => &INCR,
        op::DECREMENT => &DECR,
        op::FLUSH => &FLUSH,
        _ => return None,
    })
}

/// Serves a binary connection until it quits, closes or breaks the
/// protocol, or the server shuts down.
pub(super) async fn serve<'s>(
    shared: &'s Shared,
    stream: &mut Stream,
    conn: &mut ConnState,
    io: &mut Io<'s>,
) -> std::io::Result<()> {
    let mut parser = Parser::default();
    let limits = Limits { max_item_bytes: shared.config.memcached_item_size_max };
    loop {
        while let Some(frame) = parser.parse(&mut io.input, &limits, !conn.authenticated) {
            if conn.info.killed.load(std::sync::atomic::Ordering::Acquire) {
                io.run.commit(shared, &mut io.out).await;
                return Ok(());
            }
            conn.counts.commands += 1;
            let (out, run) = (&mut io.out, &mut io.run);
            match frame {
                Frame::Close => {
                    tracing::debug!(client = conn.info.id, "closing: not a memcached binary request");
                    return io.finish(shared, stream).await;
                }
                Frame::Refused { tag, status, drop, close } => {
                    out.binary = Some(tag);
                    if let Some(key) = drop {
                        let mut args = vec![Bytes::from_static(b"delete"), key];
                        run_command(shared, conn, out, &DROP, &mut args, run).await;
                    }
                    failure(out, status);
                    if close {
                        return io.finish(shared, stream).await;
                    }
                }
                Frame::Request { tag, extras, key, value } => {
                    out.binary = Some(tag);
                    match command_of(&tag) {
                        Some(command) => {
                            let mut args = match command.keys {
                                ONE => vec![Bytes::from_static(command.name.as_bytes()), key, extras, value],
                                _ => vec![Bytes::from_static(command.name.as_bytes()), extras],
                            };
                            run_command(shared, conn, out, command, &mut args, run).await;
                        }
                        None if tag.command == op::QUIT => {
                            success(out, 0, [b"", b"", b""]);
                            return io.finish(shared, stream).await;
                        }
                        None => answer(shared, conn, out, &key, &value),
                    }
                }
            }
            if io.out.broken {
                tracing::warn!(client = conn.info.id, "closing: a run of binary writes failed to commit");
                return io.finish(shared, stream).await;
            }
            io.flush_if_full(shared, stream).await?;
        }
        if !io.settle_and_read(shared, stream, conn).await? {
            return Ok(());
        }
    }
}

/// The commands answered without the keyspace.
fn answer(shared: &Shared, conn: &mut ConnState, out: &mut Out, key: &[u8], value: &[u8]) {
    let tag = out.binary.expect("set by serve");
    match tag.command {
        op::NOOP => success(out, 0, [b"", b"", b""]),
        op::VERSION => success(out, 0, [b"", b"", VERSION.as_bytes()]),
        op::STAT => stat(shared, out, tag, key),
        op::SASL_LIST_MECHS | op::SASL_AUTH | op::SASL_STEP => sasl(shared, conn, out, tag, key, value),
        _ => unreachable!("the parser refuses opcodes it does not know"),
    }
}

/// STAT: one response per counter (its name the key, its value the
/// value), then an empty one. memcached matches the group by its prefix.
fn stat(shared: &Shared, out: &mut Out, tag: Tag, group: &[u8]) {
    let lines = match group {
        b"" => general(shared),
        _ if group.starts_with(b"reset") => {
            reset(&shared.memcached.stats);
            Vec::new()
        }
        _ if group.starts_with(b"settings") => settings(shared),
        _ if group.starts_with(b"detail") => match &group[6..] {
            b" on" | b" off" => Vec::new(),
            _ if group[6..].starts_with(b" dump") => vec![("detailed", "END\r\n".to_string())],
            _ => return failure(out, Status::NotFound),
        },
        b"items" | b"slabs" | b"sizes" | b"conns" | b"extstore" => Vec::new(),
        _ => return failure(out, Status::NotFound),
    };
    for (name, value) in lines {
        binary::put_response(&mut out.buf, tag, Status::Ok, 0, [b"", name.as_bytes(), value.as_bytes()]);
    }
    binary::put_response(&mut out.buf, tag, Status::Ok, 0, [b"", b"", b""]);
}

/// SASL with the one mechanism a password needs, PLAIN (`authzid \0
/// user \0 password`), checked as `memcache::opens` does. When no
/// authentication is needed (`memcache::open`) the commands are unknown,
/// as to memcached without `-S`.
fn sasl(shared: &Shared, conn: &mut ConnState, out: &mut Out, tag: Tag, mechanism: &[u8], data: &[u8]) {
    if crate::memcache::open(shared) {
        return failure(out, Status::Unknown);
    }
    if tag.command == op::SASL_LIST_MECHS {
        return success(out, 0, [b"", b"", b"PLAIN"]);
    }
    let stats = &shared.memcached.stats;
    bump(&stats.auth_cmds);
    let mut parts = data.splitn(3, |&b| b == 0).skip(1);
    let (user, given) = (parts.next(), parts.next());
    let opens = matches!((user, given), (Some(user), Some(given)) if crate::memcache::opens(shared, user, given));
    if tag.command == op::SASL_AUTH && mechanism == b"PLAIN" && opens {
        conn.authenticated = true;
        return success(out, 0, [b"", b"", b"Authenticated"]);
    }
    bump(&stats.auth_errors);
    failure(out, Status::AuthError);
}

fn tag(ctx: &Ctx<'_>) -> Tag {
    ctx.out.binary.expect("a binary request is running")
}

fn be_u32(bytes: &[u8]) -> u32 {
    u32::from_be_bytes(bytes[..4].try_into().expect("checked by the parser"))
}

fn be_u64(bytes: &[u8]) -> u64 {
    u64::from_be_bytes(bytes[..8].try_into().expect("checked by the parser"))
}

/// GET, GETK, TOUCH, GAT, GATK: the item's flags (extras), its key for the
/// K forms, its value but for TOUCH, its CAS. A hit is answered even when
/// quiet; a miss is "not found" (the K forms: only the key) unless
/// quiet. TOUCH and GAT set the expiry time first.
fn get(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let tag = tag(ctx);
    let key = &args[1];
    let touch = matches!(tag.command, op::TOUCH | op::GAT | op::GATK).then(|| expiry(be_u32(&args[2]) as i64));
    let with_key = matches!(tag.command, op::GETK | op::GATK);
    let item = read_item(ctx, key)?;
    let stats = &ctx.shared.memcached.stats;
    let (calls, hits, misses) = match touch {
        Some(_) => (&stats.cmd_touch, &stats.touch_hits, &stats.touch_misses),
        None => (&stats.cmd_get, &stats.get_hits, &stats.get_misses),
    };
    bump(calls);
    let Some(item) = item else {
        bump(misses);
        match () {
            _ if tag.quiet => {}
            _ if with_key => respond(ctx.out, Status::NotFound, 0, [b"", key, b""]),
            _ => failure(ctx.out, Status::NotFound),
        }
        return Ok(());
    };
    bump(hits);
    if let Some(expiry) = touch {
        put_expiry(ctx, key, &item, expiry)?;
        ctx.notify(GENERIC, "expire", key);
    }
    let flags = flags_of(&item).to_be_bytes();
    let value = if tag.command == op::TOUCH { &[][..] } else { item.data() };
    respond(ctx.out, Status::Ok, cas_of(&item), [&flags, if with_key { key } else { b"" }, value]);
    Ok(())
}

/// SET, ADD, REPLACE (extras: flags, expiration), or any of them with a
/// CAS (the tag's): the new item's CAS. ADD of a key that holds anything
/// is "exists", REPLACE without an item "not found", a CAS "not found"
/// without an item and "exists" for another CAS.
fn store(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let tag = tag(ctx);
    let (key, extras, data) = (&args[1], &args[2], &args[3]);
    check_key(key)?;
    let (flags, exptime) = (be_u32(extras), be_u32(&extras[4..]) as i64);
    let stats = &ctx.shared.memcached.stats;
    bump(&stats.cmd_set);
    let cas = tag.cas != 0;
    if cas || tag.command != op::SET {
        let old = ctx.read(key)?;
        let item = old.as_ref().filter(|value| value.tag() == TYPE_STRING);
        let refusal = match (cas, tag.command, item) {
            (true, _, None) => {
                bump(&stats.cas_misses);
                Some(Status::NotFound)
            }
            (true, _, Some(item)) if cas_of(item) != tag.cas => {
                bump(&stats.cas_badval);
                Some(Status::Exists)
            }
            (true, _, Some(_)) => {
                bump(&stats.cas_hits);
                None
            }
            (false, op::ADD, _) if old.is_some() => Some(Status::Exists),
            (false, op::REPLACE, None) => Some(Status::NotFound),
            _ => None,
        };
        if let Some(status) = refusal {
            failure(ctx.out, status);
            return Ok(());
        }
    }
    let cas = put_item(ctx, key, flags, data, expiry(exptime))?;
    ctx.notify(STRING, "set", key);
    success(ctx.out, cas, [b"", b"", b""]);
    Ok(())
}

/// APPEND, PREPEND: "not stored" without an item or when the result would
/// not fit one, "exists" for a CAS other than the item's.
fn join(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let tag = tag(ctx);
    let append = tag.command == op::APPEND;
    let (key, data) = (&args[1], &args[3]);
    check_key(key)?;
    bump(&ctx.shared.memcached.stats.cmd_set);
    let status = match read_item(ctx, key)? {
        None => Status::NotStored,
        Some(item) if tag.cas != 0 && cas_of(&item) != tag.cas => Status::Exists,
        Some(item) if !joined_fits(ctx, key, &item, data) => Status::NotStored,
        Some(item) => {
            let cas = put_joined(ctx, key, item, data, append)?;
            success(ctx.out, cas, [b"", b"", b""]);
            return Ok(());
        }
    };
    failure(ctx.out, status);
    Ok(())
}

/// DELETE: "not found" for a key that holds nothing, "exists" for a CAS
/// other than the item's.
fn delete(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let tag = tag(ctx);
    let key = &args[1];
    let stats = &ctx.shared.memcached.stats;
    let status = match ctx.read(key)? {
        None => {
            bump(&stats.delete_misses);
            Status::NotFound
        }
        Some(old) if tag.cas != 0 && (old.tag() != TYPE_STRING || cas_of(&old) != tag.cas) => Status::Exists,
        Some(_) => {
            bump(&stats.delete_hits);
            ctx.writes.delete(key);
            ctx.notify(GENERIC, "del", key);
            success(ctx.out, 0, [b"", b"", b""]);
            return Ok(());
        }
    };
    failure(ctx.out, status);
    Ok(())
}

fn drop_item(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if ctx.read(&args[1])?.is_some() {
        ctx.writes.delete(&args[1]);
        ctx.notify(GENERIC, "del", &args[1]);
    }
    Ok(())
}

/// INCREMENT, DECREMENT (extras: delta, initial value, expiration): the
/// new number (8 bytes) and CAS. A missing item is created with the
/// initial value unless the expiration is 0xffffffff ("not found").
fn arithmetic(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let tag = tag(ctx);
    let (key, extras) = (&args[1], &args[2]);
    check_key(key)?;
    let (delta, initial, expiration) = (be_u64(extras), be_u64(&extras[8..]), be_u32(&extras[16..]));
    let up = tag.command == op::INCREMENT;
    let stats = &ctx.shared.memcached.stats;
    let (hits, misses) =
        if up { (&stats.incr_hits, &stats.incr_misses) } else { (&stats.decr_hits, &stats.decr_misses) };
    let old = ctx.read(key)?;
    let taken = old.is_some();
    let Some(item) = old.filter(|value| value.tag() == TYPE_STRING) else {
        let status = match () {
            _ if expiration == u32::MAX => {
                bump(misses);
                Status::NotFound
            }
            // A Redis collection holds the key: memcached's add of the
            // initial value would find it taken.
            _ if taken => Status::NotStored,
            _ => {
                let text = itoa::Buffer::new().format(initial).as_bytes().to_vec();
                let cas = put_item(ctx, key, 0, &text, expiry(expiration as i64))?;
                ctx.notify(STRING, "set", key);
                success(ctx.out, cas, [b"", b"", &initial.to_be_bytes()]);
                return Ok(());
            }
        };
        failure(ctx.out, status);
        return Ok(());
    };
    // memcached's order: an empty item, then the CAS, then the number.
    let status = match () {
        _ if item.data().is_empty() => Some(Status::BadDelta),
        _ if tag.cas != 0 && cas_of(&item) != tag.cas => Some(Status::Exists),
        _ if counter(item.data()).is_none() => Some(Status::BadDelta),
        _ => None,
    };
    if let Some(status) = status {
        failure(ctx.out, status);
        return Ok(());
    }
    bump(hits);
    let (next, cas) = put_delta(ctx, key, item, up, delta, None)?;
    success(ctx.out, cas, [b"", b"", &next.to_be_bytes()]);
    Ok(())
}

/// FLUSH (extras: an optional delay, an exptime).
fn flush(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let delay = if args[1].len() == 4 { be_u32(&args[1]) as i64 } else { 0 };
    super::commands::flush(ctx, delay)?;
    success(ctx.out, 0, [b"", b"", b""]);
    Ok(())
}
