//! String commands: GET/SET and friends, counters, ranges.

use bytes::Bytes;
use scaledkv::now_ms;

use super::args::{eq, float, int, parse_i64};
use super::{err, CmdError, CmdResult, Ctx};
use crate::keyspace::{check_key, Value, MAX_STRING_BYTES};
use crate::notify::{GENERIC, MISS, STRING};
use crate::resp::reply::format_double;

/// A string value and its expiry time.
pub type OwnedString = (Vec<u8>, Option<u64>);

impl Ctx<'_> {
    pub fn read(&mut self, key: &[u8]) -> Result<Option<Value>, CmdError> {
        let value = self.writes.get(&self.shared.db, key)?;
        self.count_lookup(key, value.is_some());
        Ok(value)
    }

    /// As `read_untouched`, without the `keymiss` notification (OBJECT).
    pub fn read_quietly(&mut self, key: &[u8]) -> Result<Option<Value>, CmdError> {
        let value = self.writes.get_untouched(&self.shared.db, key)?;
        self.count(value.is_some());
        Ok(value)
    }

    /// As `read`, not counted as an access of the key (LFU counters, cache
    /// mode's second chance): Redis's `LOOKUP_NOTOUCH`, for TYPE, EXISTS
    /// and the TTL family.
    pub fn read_untouched(&mut self, key: &[u8]) -> Result<Option<Value>, CmdError> {
        let value = self.writes.get_untouched(&self.shared.db, key)?;
        self.count_lookup(key, value.is_some());
        Ok(value)
    }

    /// Counts a keyspace hit or miss, if this command's reads count; a
    /// miss raises Redis's `keymiss` notification (class `m`) as well.
    pub fn count_lookup(&mut self, key: &[u8], found: bool) {
        if self.count(found) && !found {
            let flags = self.shared.notify_flags.load(std::sync::atomic::Ordering::Relaxed);
            if crate::notify::wanted(flags, MISS) {
                self.writes.note_event(MISS, "keymiss", key, self.conn.info.id);
            }
        }
    }

    /// Counts a hit or a miss; false if this command's reads do not count.
    fn count(&mut self, found: bool) -> bool {
        if self.reads_count {
            let counts = &mut self.conn.counts;
            if found {
                counts.hits += 1;
            } else {
                counts.misses += 1;
            }
        }
        self.reads_count
    }

    /// Reads `key` as a write that changes it looks it up: no keyspace hit
    /// or miss, whatever the command (a destination of `READS_KEYS`).
    pub fn peek(&self, key: &[u8]) -> Result<Option<Value>, CmdError> {
        self.writes.get(&self.shared.db, key)
    }

    /// The collection at `key` kept as one value (`small`) or as a table
    /// (`table`): None if missing, WRONGTYPE for another type.
    pub fn read_collection(&mut self, key: &[u8], small: u8, table: u8) -> Result<Option<Value>, CmdError> {
        match self.read(key)? {
            Some(value) if value.tag() != small && value.tag() != table => Err(CmdError::WrongType),
            Some(value) if value.tag() == table && self.shared.master.streaming() => {
                self.writes.note_table_read(key, &value);
                Ok(Some(value))
            }
            other => Ok(other),
        }
    }

    /// The string at `key` (WRONGTYPE for other types), copied.
    pub fn read_string(&mut self, key: &[u8]) -> Result<Option<OwnedString>, CmdError> {
        match self.read(key)? {
            Some(value) => Ok(Some((value.string()?.to_vec(), value.expiry_ms()))),
            None => Ok(None),
        }
    }
}

pub fn get(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    match ctx.read(&args[1])? {
        Some(value) => ctx.out.bulk(value.string()?),
        None => ctx.out.null(),
    }
    Ok(())
}

/// An expiry option's absolute time in ms, from `EX|PX|EXAT|PXAT n`.
fn expiry_at(unit: &str, arg: &[u8], command: &str) -> Result<u64, CmdError> {
    let n = int(arg)?;
    let invalid = || err(format!("ERR invalid expire time in '{command}' command"));
    if n <= 0 {
        return Err(invalid());
    }
    let ms = match unit {
        "ex" | "exat" => n.checked_mul(1000).ok_or_else(invalid)?,
        _ => n,
    };
    let at = match unit {
        "ex" | "px" => ms.checked_add(now_ms() as i64).ok_or_else(invalid)?,
        _ => ms,
    };
    Ok(at as u64)
}

pub fn set(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (key, value) = (&args[1], &args[2]);
    let (mut nx, mut xx, mut get, mut keepttl) = (false, false, false, false);
    let mut expiry: Option<u64> = None;
    let mut i = 3;
    while i < args.len() {
        let arg = &args[i];
        let unit = ["ex", "px", "exat", "pxat"].into_iter().find(|u| eq(arg, u));
        if let Some(unit) = unit {
            if expiry.is_some() || keepttl || i + 1 >= args.len() {
                return Err(CmdError::Syntax);
            }
            expiry = Some(expiry_at(unit, &args[i + 1], "set")?);
            i += 2;
            continue;
        }
        if eq(arg, "nx") && !xx {
            nx = true;
        } else if eq(arg, "xx") && !nx {
            xx = true;
        } else if eq(arg, "get") {
            get = true;
        } else if eq(arg, "keepttl") && expiry.is_none() {
            keepttl = true;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    // Only SET ... GET reads the key for Redis's counts (`READS_KEYS`).
    let old = if get {
        ctx.read(key)?
    } else if nx || xx || keepttl {
        ctx.peek(key)?
    } else {
        ctx.shared.db.touch(key);
        None
    };
    if get {
        match &old {
            Some(value) => ctx.out.bulk(value.string()?),
            None => ctx.out.null(),
        }
    }
    let exists = old.is_some();
    if (nx && exists) || (xx && !exists) {
        if !get {
            ctx.out.null();
        }
        return Ok(());
    }
    // EX/PX/EXAT/PXAT given: an `expire` event after the `set`.
    let expires = expiry.is_some();
    if keepttl {
        expiry = old.as_ref().and_then(Value::expiry_ms);
    }
    drop(old);
    ctx.writes.put_string(key, value, expiry)?;
    ctx.notify(STRING, "set", key);
    if expires {
        ctx.notify(GENERIC, "expire", key);
    }
    if !get {
        ctx.out.ok();
    }
    Ok(())
}

pub fn setnx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if ctx.read(&args[1])?.is_some() {
        ctx.out.int(0);
    } else {
        ctx.writes.put_string(&args[1], &args[2], None)?;
        ctx.notify(STRING, "set", &args[1]);
        ctx.out.int(1);
    }
    Ok(())
}

fn set_with_expiry(ctx: &mut Ctx<'_>, args: &[Bytes], unit: &str, command: &str) -> CmdResult {
    let at = expiry_at(unit, &args[2], command)?;
    ctx.shared.db.touch(&args[1]);
    ctx.writes.put_string(&args[1], &args[3], Some(at))?;
    ctx.notify(STRING, "set", &args[1]);
    ctx.notify(GENERIC, "expire", &args[1]);
    ctx.out.ok();
    Ok(())
}

pub fn setex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    set_with_expiry(ctx, args, "ex", "setex")
}

pub fn psetex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    set_with_expiry(ctx, args, "px", "psetex")
}

pub fn getset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let old = ctx.read_string(&args[1])?;
    ctx.out.bulk_opt(old.as_ref().map(|(v, _)| v.as_slice()));
    ctx.writes.put_string(&args[1], &args[2], None)?;
    ctx.notify(STRING, "set", &args[1]);
    Ok(())
}

pub fn getdel(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    match ctx.read_string(&args[1])? {
        Some((value, _)) => {
            ctx.out.bulk(&value);
            ctx.writes.delete(&args[1]);
            ctx.notify(GENERIC, "del", &args[1]);
        }
        None => ctx.out.null(),
    }
    Ok(())
}

pub fn getex(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut change: Option<Option<u64>> = None;
    let mut i = 2;
    while i < args.len() {
        let unit = ["ex", "px", "exat", "pxat"].into_iter().find(|u| eq(&args[i], u));
        if let (Some(unit), None, true) = (unit, change, i + 1 < args.len()) {
            change = Some(Some(expiry_at(unit, &args[i + 1], "getex")?));
            i += 2;
        } else if eq(&args[i], "persist") && change.is_none() {
            change = Some(None);
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
    }
    let Some((value, expiry)) = ctx.read_string(&args[1])? else {
        ctx.out.null();
        return Ok(());
    };
    ctx.out.bulk(&value);
    match change {
        Some(Some(at)) if at <= now_ms() => {
            ctx.writes.delete(&args[1]);
            ctx.notify(GENERIC, "del", &args[1]);
        }
        Some(new) if new != expiry => {
            ctx.writes.put_string(&args[1], &value, new)?;
            ctx.notify(GENERIC, if new.is_some() { "expire" } else { "persist" }, &args[1]);
        }
        _ => {}
    }
    Ok(())
}

/// Keys of an MGET prefetched together.
const MGET_PREFETCH: usize = 32;

pub fn mget(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    ctx.out.array(args.len() - 1);
    for keys in args[1..].chunks(MGET_PREFETCH) {
        // Ask for the keys' entries first, so that their cache misses
        // overlap.
        ctx.shared.db.prefetch_all(keys.iter().map(|key| &key[..]));
        for key in keys {
            match ctx.read(key)? {
                // MGET answers nil for keys of other types.
                Some(value) if value.tag() == crate::keyspace::TYPE_STRING => ctx.out.bulk(value.data()),
                _ => ctx.out.null(),
            }
        }
    }
    Ok(())
}

pub fn mset(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len().is_multiple_of(2) {
        return Err(err("ERR wrong number of arguments for 'mset' command"));
    }
    // Check every pair first: a failure must leave nothing in the batch.
    for pair in args[1..].chunks(2) {
        check_key(&pair[0])?;
        if pair[1].len() > MAX_STRING_BYTES {
            return Err(CmdError::TooBig);
        }
    }
    let superseded = superseded_pairs(&args[1..]);
    for (pair, superseded) in args[1..].chunks(2).zip(superseded) {
        ctx.shared.db.touch(&pair[0]);
        // A later pair for the same key wins: only its entry is written.
        if !superseded {
            ctx.writes.put_string(&pair[0], &pair[1], None)?;
        }
        ctx.notify(STRING, "set", &pair[0]);
    }
    ctx.out.ok();
    Ok(())
}

/// For each key-value pair of `pairs`, whether a later pair names the same
/// key (redis-benchmark's MSET names one key ten times).
fn superseded_pairs(pairs: &[Bytes]) -> Vec<bool> {
    let keys: Vec<&Bytes> = pairs.iter().step_by(2).collect();
    if keys.len() <= 32 {
        return keys.iter().enumerate().map(|(i, key)| keys[i + 1..].contains(key)).collect();
    }
    let mut seen = std::collections::HashSet::with_capacity(keys.len());
    let mut superseded: Vec<bool> = keys.iter().rev().map(|key| !seen.insert(*key)).collect();
    superseded.reverse();
    superseded
}

pub fn msetnx(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len().is_multiple_of(2) {
        return Err(err("ERR wrong number of arguments for 'msetnx' command"));
    }
    for pair in args[1..].chunks(2) {
        if ctx.read(&pair[0])?.is_some() {
            ctx.out.int(0);
            return Ok(());
        }
    }
    for pair in args[1..].chunks(2) {
        ctx.writes.put_string(&pair[0], &pair[1], None)?;
        ctx.notify(STRING, "set", &pair[0]);
    }
    ctx.out.int(1);
    Ok(())
}

pub fn append(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (mut value, expiry) = ctx.read_string(&args[1])?.unwrap_or_default();
    if value.len() + args[2].len() > MAX_STRING_BYTES {
        return Err(CmdError::TooBig);
    }
    value.extend_from_slice(&args[2]);
    ctx.writes.put_string(&args[1], &value, expiry)?;
    ctx.notify(STRING, "append", &args[1]);
    ctx.out.int(value.len() as i64);
    Ok(())
}

pub fn strlen(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let len = match ctx.read(&args[1])? {
        Some(value) => value.string()?.len(),
        None => 0,
    };
    ctx.out.int(len as i64);
    Ok(())
}

fn add(ctx: &mut Ctx<'_>, key: &[u8], delta: i64) -> CmdResult {
    let (value, expiry) = ctx.read_string(key)?.unwrap_or_else(|| (b"0".to_vec(), None));
    let current = parse_i64(&value).ok_or(CmdError::NotInteger)?;
    let new = current.checked_add(delta).ok_or_else(|| err("ERR increment or decrement would overflow"))?;
    ctx.writes.put_string(key, itoa::Buffer::new().format(new).as_bytes(), expiry)?;
    ctx.notify(STRING, "incrby", key);
    ctx.out.int(new);
    Ok(())
}

pub fn incr(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    add(ctx, &args[1], 1)
}

pub fn decr(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    add(ctx, &args[1], -1)
}

pub fn incrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let delta = int(&args[2])?;
    add(ctx, &args[1], delta)
}

pub fn decrby(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let delta = int(&args[2])?;
    let delta = delta.checked_neg().ok_or_else(|| err("ERR decrement would overflow"))?;
    add(ctx, &args[1], delta)
}

pub fn incrbyfloat(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let delta = float(&args[2])?;
    let (value, expiry) = ctx.read_string(&args[1])?.unwrap_or_else(|| (b"0".to_vec(), None));
    let current = float(&value)?;
    let new = current + delta;
    if !new.is_finite() {
        return Err(err("ERR increment would produce NaN or Infinity"));
    }
    let text = format_double(new);
    ctx.writes.put_string(&args[1], text.as_bytes(), expiry)?;
    ctx.notify(STRING, "incrbyfloat", &args[1]);
    ctx.out.bulk(text.as_bytes());
    Ok(())
}

pub fn getrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (start, end) = (int(&args[2])?, int(&args[3])?);
    let value = ctx.read(&args[1])?;
    let data = match &value {
        Some(value) => value.string()?,
        None => b"",
    };
    let len = data.len() as i64;
    if len == 0 || (start < 0 && end < 0 && start > end) {
        ctx.out.bulk(b"");
        return Ok(());
    }
    let clamp = |i: i64| if i < 0 { (len + i).max(0) } else { i };
    let (start, end) = (clamp(start), clamp(end).min(len - 1));
    if start > end || start >= len {
        ctx.out.bulk(b"");
    } else {
        ctx.out.bulk(&data[start as usize..=end as usize]);
    }
    Ok(())
}

pub fn setrange(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let offset = int(&args[2])?;
    if offset < 0 {
        return Err(err("ERR offset is out of range"));
    }
    let patch = &args[3];
    let existing = ctx.read_string(&args[1])?;
    let Some((mut value, expiry)) = existing else {
        if patch.is_empty() {
            ctx.out.int(0);
            return Ok(());
        }
        if offset as u64 + patch.len() as u64 > MAX_STRING_BYTES as u64 {
            return Err(CmdError::TooBig);
        }
        let mut value = vec![0u8; offset as usize];
        value.extend_from_slice(patch);
        ctx.writes.put_string(&args[1], &value, None)?;
        ctx.notify(STRING, "setrange", &args[1]);
        ctx.out.int(value.len() as i64);
        return Ok(());
    };
    if patch.is_empty() {
        ctx.out.int(value.len() as i64);
        return Ok(());
    }
    let end = offset as u64 + patch.len() as u64;
    if end > MAX_STRING_BYTES as u64 {
        return Err(CmdError::TooBig);
    }
    let end = end as usize;
    if value.len() < end {
        value.resize(end, 0);
    }
    value[offset as usize..end].copy_from_slice(patch);
    ctx.writes.put_string(&args[1], &value, expiry)?;
    ctx.notify(STRING, "setrange", &args[1]);
    ctx.out.int(value.len() as i64);
    Ok(())
}

/// LCS: the longest common subsequence of two strings, by Redis's dynamic
/// programming table and its walk back through it (which decides the
/// subsequence and the match ranges reported when several are longest).
pub fn lcs(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut strings = [Vec::new(), Vec::new()];
    let mut wrong_type = false;
    for (string, key) in strings.iter_mut().zip(&args[1..3]) {
        match ctx.read(key)? {
            Some(value) if value.tag() == crate::keyspace::TYPE_STRING => *string = value.data().to_vec(),
            Some(_) => wrong_type = true,
            None => {}
        }
    }
    if wrong_type {
        return Err(err("ERR The specified keys must contain string values"));
    }
    let (mut get_len, mut get_idx, mut with_match_len, mut min_match_len) = (false, false, false, 0u64);
    let mut i = 3;
    while i < args.len() {
        let more = i + 1 < args.len();
        if eq(&args[i], "idx") {
            get_idx = true;
        } else if eq(&args[i], "len") {
            get_len = true;
        } else if eq(&args[i], "withmatchlen") {
            with_match_len = true;
        } else if eq(&args[i], "minmatchlen") && more {
            min_match_len = int(&args[i + 1])?.max(0) as u64;
            i += 1;
        } else {
            return Err(CmdError::Syntax);
        }
        i += 1;
    }
    if get_idx && get_len {
        return Err(err("ERR If you want both the length and indexes, please just use IDX."));
    }
    let [a, b] = &strings;
    let (alen, blen) = (a.len(), b.len());
    // The table is transient memory a client controls: bounded as Redis
    // bounds it.
    let cells = (alen as u64 + 1) * (blen as u64 + 1);
    if cells * 4 > ctx.shared.max_bulk_bytes() as u64 {
        return Err(err("ERR Insufficient memory, transient memory for LCS exceeds proto-max-bulk-len"));
    }
    // table[i * (blen + 1) + j]: the LCS length of a[..i] and b[..j].
    let width = blen + 1;
    let mut table = vec![0u32; cells as usize];
    for i in 1..=alen {
        for j in 1..=blen {
            table[i * width + j] = if a[i - 1] == b[j - 1] {
                table[(i - 1) * width + j - 1] + 1
            } else {
                table[(i - 1) * width + j].max(table[i * width + j - 1])
            };
        }
    }
    let total = table[alen * width + blen] as usize;
    if get_len {
        ctx.out.int(total as i64);
        return Ok(());
    }
    // Walk back from the end, collecting the subsequence and the ranges
    // of consecutive matches (a range closes on a mismatch or at the
    // start of either string).
    let mut result = vec![0u8; total];
    let mut matches: Vec<([usize; 2], [usize; 2])> = Vec::new();
    let mut range: Option<([usize; 2], [usize; 2])> = None;
    let (mut i, mut j, mut left) = (alen, blen, total);
    while i > 0 && j > 0 {
        let mut emit = false;
        if a[i - 1] == b[j - 1] {
            result[left - 1] = a[i - 1];
            match &mut range {
                None => range = Some(([i - 1, i - 1], [j - 1, j - 1])),
                Some((ra, rb)) if ra[0] == i && rb[0] == j => {
                    ra[0] -= 1;
                    rb[0] -= 1;
                }
                Some(_) => emit = true,
            }
            if range.is_some_and(|(ra, rb)| ra[0] == 0 || rb[0] == 0) {
                emit = true;
            }
            left -= 1;
            i -= 1;
            j -= 1;
        } else {
            if table[(i - 1) * width + j] > table[i * width + j - 1] {
                i -= 1;
            } else {
                j -= 1;
            }
            emit = range.is_some();
        }
        if emit {
            if let Some((ra, rb)) = range.take() {
                if (ra[1] - ra[0] + 1) as u64 >= min_match_len {
                    matches.push((ra, rb));
                }
            }
        }
    }
    if !get_idx {
        ctx.out.bulk(&result);
        return Ok(());
    }
    ctx.out.map(2);
    ctx.out.bulk(b"matches");
    ctx.out.array(matches.len());
    for (ra, rb) in &matches {
        ctx.out.array(2 + with_match_len as usize);
        for r in [ra, rb] {
            ctx.out.array(2);
            ctx.out.int(r[0] as i64);
            ctx.out.int(r[1] as i64);
        }
        if with_match_len {
            ctx.out.int((ra[1] - ra[0] + 1) as i64);
        }
    }
    ctx.out.bulk(b"len");
    ctx.out.int(total as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    #[test]
    fn a_pair_is_superseded_by_a_later_one_for_its_key() {
        let pairs = |keys: &[&str]| -> Vec<Bytes> {
            keys.iter().flat_map(|key| [Bytes::from(key.to_string()), Bytes::from_static(b"v")]).collect()
        };
        let few = super::superseded_pairs(&pairs(&["a", "b", "a", "c", "a"]));
        assert_eq!(few, [true, false, true, false, false]);
        // Past 32 keys by a set, with the same answer.
        let names: Vec<String> = (0..40).map(|i| format!("k{}", i % 30)).collect();
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let many = super::superseded_pairs(&pairs(&names));
        let expected: Vec<bool> = (0..40).map(|i| i < 10).collect();
        assert_eq!(many, expected);
    }
}
