//! SORT and SORT_RO, with Redis 7.0's replies and errors: the elements of
//! a list, set or sorted set as numbers or (ALPHA) as strings, by
//! themselves or by other keys (BY `weight_*`, `hash_*->field`), with
//! LIMIT, GET of other keys (`#` for the element), DESC and STORE.
//!
//! The order is Redis's too: equal numbers compare as strings; a sort of
//! the whole range is stable (glibc's qsort is a merge sort) and one cut
//! by LIMIT after BY is Redis's partial quicksort (`crate::pqsort`). One
//! difference: ALPHA compares bytes, as Redis does under the C locale
//! (Redis follows `LC_COLLATE`).

use std::cmp::Ordering;

use bytes::Bytes;

use super::args::{eq, int};
use super::{err, CmdError, CmdResult, Ctx};
use crate::keyspace::{Value, TYPE_HASH, TYPE_HASH_TABLE, TYPE_LIST, TYPE_LIST_TABLE};
use crate::keyspace::{TYPE_SET, TYPE_SET_TABLE, TYPE_ZSET, TYPE_ZSET_TABLE};

pub fn sort(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    sort_command(ctx, args, false)
}

pub fn sort_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    sort_command(ctx, args, true)
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Kind {
    List,
    Set,
    SortedSet,
}

/// An element being sorted, with what it sorts by.
struct Item {
    element: Vec<u8>,
    score: f64,
    /// ALPHA BY's value (None: its key or field is missing).
    by: Option<Vec<u8>>,
}

/// BY and GET read keys the data names, so a user needs to be able to
/// read every key to use them, as in Redis.
fn reads_every_key(ctx: &Ctx<'_>, args: &[Bytes]) -> bool {
    ctx.shared.users.reads_every_key(ctx.conn.user.as_deref(), args)
}

fn sort_command(ctx: &mut Ctx<'_>, args: &[Bytes], read_only: bool) -> CmdResult {
    let (mut desc, mut alpha, mut dont_sort) = (false, false, false);
    let (mut limit_start, mut limit_count) = (0i64, -1i64);
    let mut store: Option<&Bytes> = None;
    let mut by: Option<&Bytes> = None;
    let mut gets: Vec<&Bytes> = Vec::new();
    let mut at = 2;
    while at < args.len() {
        let left = args.len() - at - 1;
        let arg = &args[at];
        if eq(arg, "asc") {
            desc = false;
        } else if eq(arg, "desc") {
            desc = true;
        } else if eq(arg, "alpha") {
            alpha = true;
        } else if eq(arg, "limit") && left >= 2 {
            limit_start = int(&args[at + 1])?;
            limit_count = int(&args[at + 2])?;
            at += 2;
        } else if !read_only && eq(arg, "store") && left >= 1 {
            store = Some(&args[at + 1]);
            at += 1;
        } else if eq(arg, "by") && left >= 1 {
            // A pattern without `*` names no key: the container's order
            // (and a later pattern with one does not undo that, in Redis).
            by = Some(&args[at + 1]);
            if !args[at + 1].contains(&b'*') {
                dont_sort = true;
            } else if !reads_every_key(ctx, args) {
                return Err(err("ERR BY option of SORT denied due to insufficient ACL permissions."));
            }
            at += 1;
        } else if eq(arg, "get") && left >= 1 {
            if !reads_every_key(ctx, args) {
                return Err(err("ERR GET option of SORT denied due to insufficient ACL permissions."));
            }
            gets.push(&args[at + 1]);
            at += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        at += 1;
    }
    let key = &args[1];
    let value = ctx.read(key)?;
    let kind = match value.as_ref().map(Value::tag) {
        None | Some(TYPE_LIST | TYPE_LIST_TABLE) => Kind::List,
        Some(TYPE_SET | TYPE_SET_TABLE) => Kind::Set,
        Some(TYPE_ZSET | TYPE_ZSET_TABLE) => Kind::SortedSet,
        Some(_) => return Err(CmdError::WrongType),
    };
    // A set's own order is no order: what is stored or given to a script
    // is sorted as strings, so that it is the same everywhere.
    if dont_sort && kind == Kind::Set && (store.is_some() || ctx.conn.in_script) {
        (dont_sort, alpha, by) = (false, true, None);
    }
    let mut elements = match (&value, kind) {
        (None, _) => Vec::new(),
        (Some(value), Kind::List) => super::lists::elements_of(ctx, key, value)?,
        (Some(value), Kind::Set) => super::sets::members_of(ctx, value)?,
        (Some(value), Kind::SortedSet) => {
            super::zsets::members_of(ctx, value)?.into_iter().map(|(member, _)| member).collect()
        }
    };
    let len = elements.len() as i64;
    let mut start = limit_start.clamp(0, len);
    let count = limit_count.clamp(-1, len);
    let mut end = if count < 0 { len - 1 } else { start + count - 1 };
    if start >= len {
        (start, end) = (len - 1, len - 2);
    }
    end = end.min(len - 1);
    let items: Vec<Item> = if dont_sort {
        if kind != Kind::Set {
            // The container's order (from its end with DESC), the range cut.
            if desc {
                elements.reverse();
            }
            let taken = (end - start + 1).max(0) as usize;
            elements = elements.into_iter().skip(start.max(0) as usize).take(taken).collect();
            end -= start;
            start = 0;
        }
        elements.into_iter().map(|element| Item { element, score: 0.0, by: None }).collect()
    } else {
        let mut items = Vec::with_capacity(elements.len());
        let mut unreadable = false;
        for element in elements {
            let mut item = Item { element, score: 0.0, by: None };
            let found = match by {
                Some(pattern) => lookup(ctx, pattern, &item.element)?,
                None => None,
            };
            let sorts_by = match (by, &found) {
                (Some(_), None) => {
                    items.push(item);
                    continue;
                }
                (Some(_), Some(found)) => &found[..],
                (None, _) => &item.element[..],
            };
            if !alpha {
                match score(sorts_by) {
                    Some(score) => item.score = score,
                    None => unreadable = true,
                }
            }
            if alpha && by.is_some() {
                item.by = found;
            }
            items.push(item);
        }
        if unreadable {
            return Err(super::err("ERR One or more scores can't be converted into double"));
        }
        let binary = store.is_some();
        let cmp = |a: &Item, b: &Item| {
            let order = if !alpha {
                match a.score.partial_cmp(&b.score) {
                    Some(Ordering::Equal) | None => a.element.cmp(&b.element),
                    Some(order) => order,
                }
            } else if by.is_some() {
                match (&a.by, &b.by) {
                    (None, None) => Ordering::Equal,
                    (None, Some(_)) => Ordering::Less,
                    (Some(_), None) => Ordering::Greater,
                    (Some(x), Some(y)) => compare_strings(x, y, binary),
                }
            } else {
                compare_strings(&a.element, &b.element, binary)
            };
            if desc {
                order.reverse()
            } else {
                order
            }
        };
        if by.is_some() && (start != 0 || end != len - 1) {
            // Only positions start..=end come out sorted; with an empty
            // range Redis still sorts, which changes nothing it replies.
            if end >= start {
                crate::pqsort::partial_sort(&mut items, cmp, start as usize, end as usize);
            }
        } else {
            items.sort_by(cmp);
        }
        items
    };
    let taken = if end >= start { (end - start + 1) as usize } else { 0 };
    let chosen: Vec<Item> = items.into_iter().skip(start.max(0) as usize).take(taken).collect();
    let outputs = if gets.is_empty() { chosen.len() } else { chosen.len() * gets.len() };
    match store {
        None => {
            ctx.out.array(outputs);
            for item in &chosen {
                if gets.is_empty() {
                    ctx.out.bulk(&item.element);
                }
                for pattern in &gets {
                    let found = lookup(ctx, pattern, &item.element)?;
                    ctx.out.bulk_opt(found.as_deref());
                }
            }
        }
        Some(destination) => {
            let mut list = Vec::with_capacity(outputs);
            for item in chosen {
                if gets.is_empty() {
                    list.push(item.element);
                    continue;
                }
                for pattern in &gets {
                    list.push(lookup(ctx, pattern, &item.element)?.unwrap_or_default());
                }
            }
            ctx.store_result(destination, list.is_empty(), crate::notify::LIST, "sortstore", |ctx| {
                super::lists::store_new(ctx, destination, &list, None)
            })?;
            ctx.out.int(outputs as i64);
        }
    }
    Ok(())
}

/// Two strings in ALPHA's order: bytes up to the first NUL, as `strcoll`
/// compares C strings under the C locale; whole bytes for STORE, as Redis
/// compares them then.
fn compare_strings(a: &[u8], b: &[u8], binary: bool) -> Ordering {
    if binary {
        return a.cmp(b);
    }
    c_string(a).cmp(c_string(b))
}

/// `bytes` up to its first NUL, where C stops reading a string.
fn c_string(bytes: &[u8]) -> &[u8] {
    &bytes[..bytes.iter().position(|&c| c == 0).unwrap_or(bytes.len())]
}

/// What a BY or GET `pattern` names for `element`: `#` the element
/// itself; else the string at the pattern with its first `*` replaced by
/// the element or, with `->field` after the star, that field of the hash
/// there. None where that key, field or type is not there (and for a
/// pattern without `*`). As Redis reads the pattern as a C string, its
/// `*` and `->` count only before a NUL byte.
fn lookup(ctx: &mut Ctx<'_>, pattern: &[u8], element: &[u8]) -> Result<Option<Vec<u8>>, CmdError> {
    if pattern == b"#" {
        return Ok(Some(element.to_vec()));
    }
    let c_string = c_string(pattern);
    let Some(star) = c_string.iter().position(|&c| c == b'*') else { return Ok(None) };
    let arrow = c_string[star + 1..]
        .windows(2)
        .position(|w| w == b"->")
        .map(|at| star + 1 + at)
        .filter(|&at| at + 2 < c_string.len());
    let postfix_end = arrow.unwrap_or(pattern.len());
    let key = [&pattern[..star], element, &pattern[star + 1..postfix_end]].concat();
    let Some(value) = ctx.read(&key)? else { return Ok(None) };
    match arrow {
        Some(at) if matches!(value.tag(), TYPE_HASH | TYPE_HASH_TABLE) => {
            super::hashes::field_of(ctx, value, &pattern[at + 2..])
        }
        Some(_) => Ok(None),
        None => Ok(value.string().ok().map(<[u8]>::to_vec)),
    }
}

/// A number to sort by, read as Redis reads it with `strtod`: white space
/// before it, decimal or hexadecimal, nothing after it (but a NUL byte,
/// where C stops reading), no NaN, nothing out of a double's range. An
/// empty string is 0.
fn score(bytes: &[u8]) -> Option<f64> {
    let bytes = c_string(bytes);
    if bytes.is_empty() {
        return Some(0.0);
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let text = text.trim_start_matches([' ', '\t', '\n', '\x0b', '\x0c', '\r']);
    let (negative, unsigned) = match text.as_bytes().first() {
        Some(b'-') => (true, &text[1..]),
        Some(b'+') => (false, &text[1..]),
        _ => (false, text),
    };
    if let Some(hex) = unsigned.strip_prefix("0x").or_else(|| unsigned.strip_prefix("0X")) {
        let value = hex_float(hex)?;
        return Some(if negative { -value } else { value });
    }
    crate::zset::parse_score_text(text)
}

/// C's hexadecimal floating constant after its `0x`: digits, an optional
/// fraction, an optional binary exponent (`p`).
fn hex_float(text: &str) -> Option<f64> {
    let (digits, exponent) = match text.find(['p', 'P']) {
        Some(at) => (&text[..at], Some(&text[at + 1..])),
        None => (text, None),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let mut mantissa = 0f64;
    for c in whole.chars().chain(fraction.chars()) {
        mantissa = mantissa * 16.0 + c.to_digit(16)? as f64;
    }
    let mut power = -4 * fraction.len() as i64;
    if let Some(exponent) = exponent {
        let digits = exponent.strip_prefix(['+', '-']).unwrap_or(exponent);
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return None;
        }
        power += exponent.parse::<i64>().ok()?.clamp(-100_000, 100_000);
    }
    let value = mantissa * 2f64.powi(power.clamp(-2000, 2000) as i32);
    (value.is_finite() && (value != 0.0 || mantissa == 0.0)).then_some(value)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scores_read_as_strtod_reads_them() {
        assert_eq!(score(b""), Some(0.0));
        assert_eq!(score(b"  12.5"), Some(12.5));
        assert_eq!(score(b"12.5 "), None);
        assert_eq!(score(b"   "), None);
        assert_eq!(score(b"0x1A"), Some(26.0));
        assert_eq!(score(b"-0x1.8p1"), Some(-3.0));
        assert_eq!(score(b"0x"), None);
        assert_eq!(score(b"inf"), Some(f64::INFINITY));
        assert_eq!(score(b"nan"), None);
        assert_eq!(score(b"1e400"), None);
        assert_eq!(score(b"7\0junk"), Some(7.0));
        assert_eq!(score(b"abc"), None);
    }

    #[test]
    fn alpha_compares_c_strings_but_for_store() {
        assert_eq!(compare_strings(b"a\0z", b"a\0b", false), Ordering::Equal);
        assert_eq!(compare_strings(b"a\0z", b"a\0b", true), Ordering::Greater);
        assert_eq!(compare_strings(b"ab", b"b", false), Ordering::Less);
    }
}
