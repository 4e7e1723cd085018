//! Bitmap commands: strings read and written bit by bit (SETBIT, GETBIT,
//! BITCOUNT, BITPOS, BITOP), as Redis's bitops.c. Bit 0 is the most
//! significant bit of the first byte.

use bytes::Bytes;

use super::args::{eq, int};
use super::{err, CmdError, CmdResult, Ctx};
use crate::keyspace::MAX_STRING_BYTES;

/// SETBIT/GETBIT's offset: Redis refuses what does not fit in a string of
/// `proto-max-bulk-len` bytes with this one message.
fn bit_offset(ctx: &Ctx<'_>, arg: &[u8]) -> Result<u64, CmdError> {
    let invalid = || err("ERR bit offset is not an integer or out of range");
    let offset = super::args::parse_i64(arg).ok_or_else(invalid)?;
    if offset < 0 || (offset as u64 >> 3) >= ctx.shared.max_bulk_bytes() as u64 {
        return Err(invalid());
    }
    Ok(offset as u64)
}

fn bit_at(data: &[u8], offset: u64) -> u8 {
    let byte = (offset >> 3) as usize;
    data.get(byte).map_or(0, |b| (b >> (7 - (offset & 7))) & 1)
}

pub fn setbit(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let offset = bit_offset(ctx, &args[2])?;
    let on = match super::args::parse_i64(&args[3]) {
        Some(bit @ (0 | 1)) => bit as u8,
        _ => return Err(err("ERR bit is not an integer or out of range")),
    };
    let (mut value, expiry) = ctx.read_string(&args[1])?.unwrap_or_default();
    let byte = (offset >> 3) as usize;
    if byte >= MAX_STRING_BYTES {
        return Err(CmdError::TooBig);
    }
    if value.len() <= byte {
        value.resize(byte + 1, 0);
    }
    let old = bit_at(&value, offset);
    let mask = 1u8 << (7 - (offset & 7));
    value[byte] = if on == 1 { value[byte] | mask } else { value[byte] & !mask };
    // In place, as Redis changes the string: the key keeps its TTL.
    ctx.writes.put_string(&args[1], &value, expiry)?;
    ctx.out.int(old as i64);
    Ok(())
}

pub fn getbit(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let offset = bit_offset(ctx, &args[2])?;
    let bit = match ctx.read(&args[1])? {
        Some(value) => bit_at(value.string()?, offset),
        None => 0,
    };
    ctx.out.int(bit as i64);
    Ok(())
}

/// A `start end [BYTE|BIT]` range over `len` bytes as inclusive bit
/// positions, with Redis's rules for negative and out-of-range indexes;
/// `None` if it is empty. `end` absent: to the end of the string.
fn bit_range(len: usize, start: i64, end: Option<i64>, in_bits: bool) -> Option<(u64, u64)> {
    let total = if in_bits { len as i64 * 8 } else { len as i64 };
    let resolve = |i: i64| if i < 0 { (total + i).max(0) } else { i };
    let start = resolve(start);
    let end = resolve(end.unwrap_or(total - 1)).min(total - 1);
    if start > end {
        return None;
    }
    let (start, end) = (start as u64, end as u64);
    Some(if in_bits { (start, end) } else { (start * 8, end * 8 + 7) })
}

/// `BYTE` or `BIT` (Redis 7's unit argument).
fn unit(arg: &[u8]) -> Result<bool, CmdError> {
    if eq(arg, "bit") {
        Ok(true)
    } else if eq(arg, "byte") {
        Ok(false)
    } else {
        Err(CmdError::Syntax)
    }
}

/// Set bits in the inclusive bit range `[first, last]` of `data`.
fn count_ones(data: &[u8], first: u64, last: u64) -> u64 {
    let (first_byte, last_byte) = ((first >> 3) as usize, (last >> 3) as usize);
    let mut count: u64 = data[first_byte..=last_byte].iter().map(|b| b.count_ones() as u64).sum();
    // Take off the bits of the edge bytes that lie outside the range.
    let head = data[first_byte] & !(0xFFu8 >> (first & 7));
    let tail_mask = if last & 7 == 7 { 0 } else { 0xFFu8 >> ((last & 7) + 1) };
    let tail = data[last_byte] & tail_mask;
    count -= head.count_ones() as u64 + tail.count_ones() as u64;
    count
}

pub fn bitcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    // A missing key counts nothing whatever the other arguments, as Redis.
    let Some(value) = ctx.read(&args[1])? else {
        ctx.out.int(0);
        return Ok(());
    };
    let data = value.string()?;
    let range = match args.len() {
        2 => bit_range(data.len(), 0, None, false),
        4 | 5 => {
            let (start, end) = (int(&args[2])?, int(&args[3])?);
            let in_bits = if args.len() == 5 { unit(&args[4])? } else { false };
            if start < 0 && end < 0 && start > end {
                None
            } else {
                bit_range(data.len(), start, Some(end), in_bits)
            }
        }
        _ => return Err(CmdError::Syntax),
    };
    let count = range.map_or(0, |(first, last)| count_ones(data, first, last));
    ctx.out.int(count as i64);
    Ok(())
}

pub fn bitpos(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let bit = int(&args[2])?;
    if bit != 0 && bit != 1 {
        return Err(err("ERR The bit argument must be 1 or 0."));
    }
    let wanted = bit == 1;
    // A missing key is an endless run of zeros.
    let Some(value) = ctx.read(&args[1])? else {
        ctx.out.int(if wanted { -1 } else { 0 });
        return Ok(());
    };
    let data = value.string()?;
    if args.len() > 6 {
        return Err(CmdError::Syntax);
    }
    let start = args.get(3).map(|a| int(a)).transpose()?.unwrap_or(0);
    let in_bits = match args.get(5) {
        Some(arg) => unit(arg)?,
        None => false,
    };
    let end = args.get(4).map(|a| int(a)).transpose()?;
    let Some((first, last)) = bit_range(data.len(), start, end, in_bits) else {
        ctx.out.int(-1);
        return Ok(());
    };
    let found = first_bit(data, first, last, wanted);
    let position = match found {
        Some(at) => at as i64,
        // Looking for a clear bit with no end given: the string is taken
        // as padded with zeros on the right, as Redis does.
        None if !wanted && end.is_none() => last as i64 + 1,
        None => -1,
    };
    ctx.out.int(position);
    Ok(())
}

/// The first position in the inclusive bit range `[first, last]` whose
/// bit is `wanted`, skipping whole bytes that cannot hold it.
fn first_bit(data: &[u8], first: u64, last: u64, wanted: bool) -> Option<u64> {
    let skip = if wanted { 0x00 } else { 0xFF };
    let mut at = first;
    while at <= last {
        if at & 7 == 0 && at + 7 <= last && data[(at >> 3) as usize] == skip {
            at += 8;
            continue;
        }
        if (bit_at(data, at) == 1) == wanted {
            return Some(at);
        }
        at += 1;
    }
    None
}

pub fn bitop(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    #[derive(Clone, Copy, PartialEq)]
    enum Op {
        And,
        Or,
        Xor,
        Not,
    }
    let op = [("and", Op::And), ("or", Op::Or), ("xor", Op::Xor), ("not", Op::Not)]
        .into_iter()
        .find(|(name, _)| eq(&args[1], name))
        .map(|(_, op)| op)
        .ok_or(CmdError::Syntax)?;
    let sources = &args[3..];
    if op == Op::Not && sources.len() != 1 {
        return Err(err("ERR BITOP NOT must be called with a single source key."));
    }
    let mut values = Vec::with_capacity(sources.len());
    for key in sources {
        values.push(ctx.read_string(key)?.map(|(data, _)| data).unwrap_or_default());
    }
    let len = values.iter().map(Vec::len).max().unwrap_or(0);
    if len == 0 {
        ctx.writes.delete(&args[2]);
        ctx.out.int(0);
        return Ok(());
    }
    let byte = |value: &Vec<u8>, i: usize| value.get(i).copied().unwrap_or(0);
    let result: Vec<u8> = (0..len)
        .map(|i| {
            let mut bytes = values.iter().map(|v| byte(v, i));
            let first = bytes.next().unwrap_or(0);
            match op {
                Op::And => bytes.fold(first, |a, b| a & b),
                Op::Or => bytes.fold(first, |a, b| a | b),
                Op::Xor => bytes.fold(first, |a, b| a ^ b),
                Op::Not => !first,
            }
        })
        .collect();
    // A new value: the destination loses any TTL, as with SET.
    ctx.writes.put_string(&args[2], &result, None)?;
    ctx.out.int(len as i64);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_ones_in_bit_ranges_that_cut_bytes() {
        let data = [0b1011_0110u8, 0xFF, 0b0000_0001];
        let naive = |first: u64, last: u64| (first..=last).filter(|&at| bit_at(&data, at) == 1).count() as u64;
        for first in 0..24 {
            for last in first..24 {
                assert_eq!(count_ones(&data, first, last), naive(first, last), "[{first}, {last}]");
            }
        }
    }

    #[test]
    fn finds_the_first_bit_of_either_value_in_any_range() {
        let data = [0x00u8, 0xFF, 0b0010_0000, 0xFF];
        for wanted in [false, true] {
            for first in 0..32 {
                for last in first..32 {
                    let naive = (first..=last).find(|&at| (bit_at(&data, at) == 1) == wanted);
                    assert_eq!(first_bit(&data, first, last, wanted), naive, "{wanted} in [{first}, {last}]");
                }
            }
        }
    }

    #[test]
    fn ranges_resolve_negative_and_outsized_indexes() {
        assert_eq!(bit_range(3, 0, None, false), Some((0, 23)));
        assert_eq!(bit_range(3, -1, None, false), Some((16, 23)));
        assert_eq!(bit_range(3, 1, Some(100), false), Some((8, 23)));
        assert_eq!(bit_range(3, 2, Some(1), false), None);
        assert_eq!(bit_range(3, 5, Some(-3), true), Some((5, 21)));
        assert_eq!(bit_range(3, -100, Some(-50), true), Some((0, 0)));
        assert_eq!(bit_range(0, 0, None, false), None);
    }
}
