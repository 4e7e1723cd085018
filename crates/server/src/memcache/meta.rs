//! memcached's meta commands (`mg`, `ms`, `md`, `ma`), with memcached
//! 1.6.18's replies: a status (`VA`, `HD`, `EN`, `NS`, `EX`, `NF`), then
//! the return flags asked for, in the order asked. Flags are one letter,
//! some with a token after it (`T30`, `Oabc`). `q` silences the replies
//! a pipeline need not see (a miss for `mg`, success for the others).
//!
//! Not built (a clear error): stale-while-revalidate (`I` to invalidate,
//! `N`/`R` on `mg` to win a recache) and the access statistics `h` and `l`,
//! which ScaledKV does not keep; `me`.

use base64::Engine as _;
use bytes::{BufMut, Bytes};
use scaledkv::now_ms;

use super::commands::{bump, cas_of, expiry, flags_of, put_delta, put_expiry, put_item, put_joined, read_item, Expiry};
use super::request::{self, MAX_KEY_BYTES};
use crate::commands::{err, CmdError, CmdResult, Ctx};
use crate::notify::{GENERIC, STRING};

const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";
const BAD_TOKEN: &str = "CLIENT_ERROR bad token in command line format";
/// memcached refuses an opaque token of 32 bytes or more.
const MAX_OPAQUE_BYTES: usize = 31;

/// How a command names a bad flag: `mg` and `ms` tell an unknown flag from
/// a repeated one, `md` and `ma` do not.
#[derive(Clone, Copy, PartialEq)]
enum Style {
    Split,
    Joined,
}

/// A meta command's flags, in the order given.
struct Flags<'a> {
    list: Vec<(u8, &'a [u8])>,
    style: Style,
}

impl<'a> Flags<'a> {
    fn parse(words: &'a [Bytes], valid: &[u8], unsupported: &[u8], style: Style) -> Result<Flags<'a>, CmdError> {
        let mut list: Vec<(u8, &[u8])> = Vec::with_capacity(words.len());
        for word in words {
            let (flag, token) = (word[0], &word[1..]);
            let invalid = !valid.contains(&flag);
            let repeated = list.iter().any(|&(seen, _)| seen == flag);
            match style {
                Style::Joined if invalid || repeated => return Err(err("CLIENT_ERROR invalid or duplicate flag")),
                Style::Split if invalid => return Err(err("CLIENT_ERROR invalid flag")),
                Style::Split if repeated => return Err(err("CLIENT_ERROR duplicate flag")),
                _ => {}
            }
            if flag == b'O' && token.len() > MAX_OPAQUE_BYTES {
                return Err(err("CLIENT_ERROR opaque token too long"));
            }
            if unsupported.contains(&flag) {
                return Err(err(format!(
                    "CLIENT_ERROR the meta flag {} is not supported by ScaledKV (see the README)",
                    flag as char
                )));
            }
            list.push((flag, token));
        }
        Ok(Flags { list, style })
    }

    fn has(&self, flag: u8) -> bool {
        self.list.iter().any(|&(f, _)| f == flag)
    }

    fn token(&self, flag: u8) -> Option<&'a [u8]> {
        self.list.iter().find(|&&(f, _)| f == flag).map(|&(_, token)| token)
    }

    /// A numeric token read with `read`; a bad one gets the command's error.
    fn number<T>(&self, flag: u8, read: impl Fn(&[u8]) -> Option<T>) -> Result<Option<T>, CmdError> {
        match self.token(flag) {
            None => Ok(None),
            Some(token) => read(token).map(Some).ok_or_else(|| match self.style {
                Style::Split => err(BAD_TOKEN),
                Style::Joined => err("CLIENT_ERROR invalid or duplicate flag"),
            }),
        }
    }

    /// The key the command names (the parser decoded it from base64 for
    /// `b`) and, for `b`, the key as the client sent it (re-encoded).
    fn key(&self, key: &[u8]) -> Result<(Vec<u8>, Vec<u8>), CmdError> {
        if key.is_empty() || key.len() > MAX_KEY_BYTES {
            return Err(err(BAD_FORMAT));
        }
        let sent = match self.has(b'b') {
            true => base64::engine::general_purpose::STANDARD.encode(key).into_bytes(),
            false => key.to_vec(),
        };
        Ok((key.to_vec(), sent))
    }
}

/// The values return flags report.
#[derive(Default)]
struct Found<'a> {
    /// The key as sent: base64 for `b` (returned as `k<base64> b`).
    sent_key: &'a [u8],
    cas: Option<u64>,
    flags: Option<u32>,
    size: Option<usize>,
    /// Seconds to live, -1 for never.
    ttl: Option<i64>,
}

/// Appends the return flags asked for (of `wanted`), in the order asked.
/// With `b`, the key is returned in base64 and followed by `b`. (memcached
/// 1.6.18 decides that by how the item was stored, not by the request.)
fn return_flags(line: &mut Vec<u8>, flags: &Flags<'_>, wanted: &[u8], found: &Found<'_>) {
    let mut numbers = itoa::Buffer::new();
    for &(flag, token) in &flags.list {
        if !wanted.contains(&flag) {
            continue;
        }
        let value: Option<&[u8]> = match flag {
            b'c' => found.cas.map(|v| numbers.format(v).as_bytes()),
            b'f' => found.flags.map(|v| numbers.format(v).as_bytes()),
            b's' => found.size.map(|v| numbers.format(v).as_bytes()),
            b't' => found.ttl.map(|v| numbers.format(v).as_bytes()),
            b'O' => Some(token),
            b'k' => Some(found.sent_key),
            _ => None,
        };
        if let Some(value) = value {
            line.push(b' ');
            line.push(flag);
            line.extend_from_slice(value);
            if flag == b'k' && flags.has(b'b') {
                line.extend_from_slice(b" b");
            }
        }
    }
}

fn reply(ctx: &mut Ctx<'_>, line: &[u8]) {
    ctx.out.buf.put_slice(line);
    ctx.out.buf.put_slice(b"\r\n");
}

/// Seconds an item has left, as memcached reports them (-1: no expiry).
fn ttl_of(expiry_ms: Option<u64>) -> i64 {
    match expiry_ms {
        None => -1,
        Some(at) => at.saturating_sub(now_ms()).div_ceil(1000) as i64,
    }
}

/// `mg <key> <flags>*`: `VA <size> <flags>` and the value with `v`, else
/// `HD <flags>`; `EN` on a miss (silenced by `q`).
pub fn mg(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let Some(word) = args.get(1) else { return Err(err("ERROR")) };
    let flags = Flags::parse(&args[2..], b"bcfhklOqstuvTNR", b"hlNR", Style::Split)?;
    let (key, sent) = flags.key(word)?;
    let touch = flags.number(b'T', request::exptime)?.map(expiry);
    let stats = &ctx.shared.memcached.stats;
    let Some(item) = read_item(ctx, &key)? else {
        bump(&stats.get_misses);
        if !flags.has(b'q') {
            let mut line = b"EN".to_vec();
            return_flags(&mut line, &flags, b"kO", &Found { sent_key: &sent, ..Found::default() });
            reply(ctx, &line);
        }
        return Ok(());
    };
    bump(&stats.get_hits);
    // `t` reports the time to live before this command's `T`, as memcached.
    let expires = item.expiry_ms();
    if let Some(touch) = touch {
        put_expiry(ctx, &key, &item, touch)?;
        ctx.notify(GENERIC, "expire", &key);
    }
    let found = Found {
        sent_key: &sent,
        cas: flags.has(b'c').then(|| cas_of(&item)),
        flags: Some(flags_of(&item)),
        size: Some(item.data().len()),
        ttl: Some(ttl_of(expires)),
    };
    let mut line = if flags.has(b'v') { format!("VA {}", item.data().len()).into_bytes() } else { b"HD".to_vec() };
    return_flags(&mut line, &flags, b"cfkOst", &found);
    reply(ctx, &line);
    if flags.has(b'v') {
        let data = item.data();
        ctx.out.buf.reserve(data.len() + 2);
        ctx.out.buf.put_slice(data);
        ctx.out.buf.put_slice(b"\r\n");
    }
    Ok(())
}

/// `ms <key> <datalen> <flags>*` and the data block (its line checked by
/// the parser): `HD`, or `NS` (not stored), `EX` (CAS differs), `NF`.
pub fn ms(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (word, data) = (&args[1], args.last().expect("a data block"));
    let flags = Flags::parse(&args[3..args.len() - 1], b"bcCfFIkOqstTMN", b"IN", Style::Split)?;
    let (key, sent) = flags.key(word)?;
    let mode = flags.token(b'M').unwrap_or(b"S");
    if !matches!(mode, b"S" | b"E" | b"A" | b"P" | b"R") {
        return Err(err("CLIENT_ERROR invalid mode for ms M token"));
    }
    let client_flags = match flags.token(b'F') {
        Some(token) => request::flags(token).ok_or_else(|| err(BAD_FORMAT))?,
        None => 0,
    };
    let ttl = flags.number(b'T', request::exptime)?.unwrap_or(0);
    let compare = flags.number(b'C', request::unsigned)?;
    bump(&ctx.shared.memcached.stats.cmd_set);
    let old = ctx.read(&key)?;
    let item = old.as_ref().filter(|value| value.tag() == crate::keyspace::TYPE_STRING);
    let status: Option<&[u8]> = match (compare, item) {
        (Some(_), None) => Some(b"NF"),
        (Some(cas), Some(item)) if cas_of(item) != cas => Some(b"EX"),
        _ => match (mode, item) {
            (b"E", _) if old.is_some() => Some(b"NS"),
            (b"A" | b"P" | b"R", None) => Some(b"NS"),
            _ => None,
        },
    };
    let mut found = Found { sent_key: &sent, ..Found::default() };
    if let Some(status) = status {
        let mut line = status.to_vec();
        return_flags(&mut line, &flags, b"kO", &found);
        reply(ctx, &line);
        return Ok(());
    }
    let joining = item.is_some() && matches!(mode, b"A" | b"P");
    match old {
        Some(item) if joining => found.cas = Some(put_joined(ctx, &key, item, data, mode == b"A")?),
        _ => {
            drop(old);
            found.cas = Some(put_item(ctx, &key, client_flags, data, expiry(ttl))?);
            ctx.notify(STRING, "set", &key);
        }
    }
    if !flags.has(b'q') {
        let mut line = b"HD".to_vec();
        return_flags(&mut line, &flags, b"kOc", &found);
        reply(ctx, &line);
    }
    Ok(())
}

/// `md <key> <flags>*`: `HD` (silenced by `q`), `NF`, `EX`.
pub fn md(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let Some(word) = args.get(1) else { return Err(err("ERROR")) };
    // `c`, `f`, `s` and `t` are accepted and ignored, as memcached does.
    let flags = Flags::parse(&args[2..], b"bcCfIkOqstT", b"I", Style::Joined)?;
    let (key, sent) = flags.key(word)?;
    let compare = flags.number(b'C', request::unsigned)?;
    flags.number(b'T', request::exptime)?;
    let found = Found { sent_key: &sent, ..Found::default() };
    let stats = &ctx.shared.memcached.stats;
    let old = ctx.read(&key)?;
    let status: &[u8] = match (&old, compare) {
        (None, _) => b"NF",
        (Some(value), Some(cas)) if value.tag() != crate::keyspace::TYPE_STRING || cas_of(value) != cas => b"EX",
        _ => b"HD",
    };
    if status == b"HD" {
        bump(&stats.delete_hits);
        ctx.writes.delete(&key);
        ctx.notify(GENERIC, "del", &key);
    } else if status == b"NF" {
        bump(&stats.delete_misses);
    }
    if status != b"HD" || !flags.has(b'q') {
        let mut line = status.to_vec();
        return_flags(&mut line, &flags, b"kO", &found);
        reply(ctx, &line);
    }
    Ok(())
}

/// `ma <key> <flags>*`: adds `D` (default 1) to the item's number, or
/// subtracts it with `MD`; `N<ttl>` creates a missing item with `J`
/// (default 0). `HD`, or `VA` and the number with `v`; `NF`, `EX`.
pub fn ma(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let Some(word) = args.get(1) else { return Err(err("ERROR")) };
    let flags = Flags::parse(&args[2..], b"bCNJDTMqOtcvk", b"", Style::Joined)?;
    let (key, sent) = flags.key(word)?;
    let up = match flags.token(b'M').unwrap_or(b"I") {
        b"I" | b"+" => true,
        b"D" | b"-" => false,
        _ => return Err(err("CLIENT_ERROR invalid mode for ma M token")),
    };
    let compare = flags.number(b'C', request::unsigned)?;
    let create = flags.number(b'N', request::exptime)?;
    let initial = flags.number(b'J', request::unsigned)?.unwrap_or(0);
    let delta = flags.number(b'D', request::unsigned)?.unwrap_or(1);
    let touch = flags.number(b'T', request::exptime)?.map(expiry);
    let stats = &ctx.shared.memcached.stats;
    let (hits, misses) =
        if up { (&stats.incr_hits, &stats.incr_misses) } else { (&stats.decr_hits, &stats.decr_misses) };
    let mut found = Found { sent_key: &sent, ..Found::default() };
    let item = read_item(ctx, &key)?;
    let status: Option<&[u8]> = match (&item, compare) {
        (None, _) if create.is_none() => Some(b"NF"),
        (Some(item), Some(cas)) if cas_of(item) != cas => Some(b"EX"),
        _ => None,
    };
    if let Some(status) = status {
        if status == b"NF" {
            bump(misses);
        }
        let mut line = status.to_vec();
        return_flags(&mut line, &flags, b"kO", &found);
        reply(ctx, &line);
        return Ok(());
    }
    let (number, expires) = match item {
        None => {
            // Created with the initial value, as memcached's autovivify,
            // to live for `T` if given, else for `N`.
            let expires = touch.unwrap_or(expiry(create.unwrap_or(0)));
            found.cas = Some(put_item(ctx, &key, 0, initial.to_string().as_bytes(), expires)?);
            ctx.notify(STRING, "set", &key);
            (initial, expires.ms())
        }
        Some(item) => {
            bump(hits);
            let expires = touch.map_or(item.expiry_ms(), Expiry::ms);
            let (next, cas) = put_delta(ctx, &key, item, up, delta, touch)?;
            found.cas = Some(cas);
            (next, expires)
        }
    };
    found.ttl = Some(ttl_of(expires));
    if flags.has(b'v') {
        let text = number.to_string();
        let mut line = format!("VA {}", text.len()).into_bytes();
        return_flags(&mut line, &flags, b"kOct", &found);
        reply(ctx, &line);
        reply(ctx, text.as_bytes());
    } else if !flags.has(b'q') {
        let mut line = b"HD".to_vec();
        return_flags(&mut line, &flags, b"kOct", &found);
        reply(ctx, &line);
    }
    Ok(())
}
