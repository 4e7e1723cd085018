//! Bitmap commands: strings read and written bit by bit (SETBIT, GETBIT,
//! BITCOUNT, BITPOS, BITOP, BITFIELD), as Redis's bitops.c. Bit 0 is the
//! most significant bit of the first byte.

use bytes::Bytes;

use super::args::{eq, int};
use super::{err, CmdError, CmdResult, Ctx};
use crate::keyspace::MAX_STRING_BYTES;

/// A bit offset: Redis refuses what does not fit in a string of
/// `proto-max-bulk-len` bytes with this one message. BITFIELD's fields
/// (`field_bits`) may also give `#n`: the n-th field of their width.
fn bit_offset(ctx: &Ctx<'_>, arg: &[u8], field_bits: Option<u32>) -> Result<u64, CmdError> {
    let invalid = || err("ERR bit offset is not an integer or out of range");
    let (text, scale) = match (field_bits, arg.strip_prefix(b"#")) {
        (Some(bits), Some(rest)) => (rest, bits as i64),
        _ => (arg, 1),
    };
    let offset = super::args::parse_i64(text).and_then(|n| n.checked_mul(scale)).ok_or_else(invalid)?;
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
    let offset = bit_offset(ctx, &args[2], None)?;
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
    ctx.notify(crate::notify::STRING, "setbit", &args[1]);
    ctx.out.int(old as i64);
    Ok(())
}

pub fn getbit(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let offset = bit_offset(ctx, &args[2], None)?;
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
    ctx.store_result(&args[2], result.is_empty(), crate::notify::STRING, "set", |ctx| match result.is_empty() {
        true => {
            ctx.writes.delete(&args[2]);
            Ok(())
        }
        // A new value: the destination loses any TTL, as with SET.
        false => ctx.writes.put_string(&args[2], &result, None),
    })?;
    ctx.out.int(len as i64);
    Ok(())
}

/// How BITFIELD's SET and INCRBY treat a value that does not fit.
#[derive(Clone, Copy, PartialEq)]
enum Overflow {
    Wrap,
    Sat,
    Fail,
}

#[derive(Clone, Copy, PartialEq)]
enum FieldOp {
    Get,
    Set,
    Incrby,
}

/// One BITFIELD operation: a signed or unsigned field of `bits` bits at
/// bit `offset`, and the SET value or INCRBY increment.
struct Field {
    op: FieldOp,
    signed: bool,
    bits: u32,
    offset: u64,
    value: i64,
    overflow: Overflow,
}

/// `i1`..`i64` or `u1`..`u63`, in lower case only, as Redis.
fn field_type(arg: &[u8]) -> Result<(bool, u32), CmdError> {
    let invalid =
        || err("ERR Invalid bitfield type. Use something like i16 u8. Note that u64 is not supported but i64 is.");
    let signed = match arg.first() {
        Some(b'i') => true,
        Some(b'u') => false,
        _ => return Err(invalid()),
    };
    match super::args::parse_i64(&arg[1..]) {
        Some(bits) if bits >= 1 && bits <= if signed { 64 } else { 63 } => Ok((signed, bits as u32)),
        _ => Err(invalid()),
    }
}

fn get_field(data: &[u8], offset: u64, bits: u32, signed: bool) -> i64 {
    let mut value = 0u64;
    for at in offset..offset + bits as u64 {
        value = value << 1 | bit_at(data, at) as u64;
    }
    if signed && bits < 64 && value >> (bits - 1) & 1 == 1 {
        value |= u64::MAX << bits;
    }
    value as i64
}

fn set_field(data: &mut [u8], offset: u64, bits: u32, value: u64) {
    for i in 0..bits as u64 {
        let at = offset + i;
        let mask = 1u8 << (7 - (at & 7));
        let byte = &mut data[(at >> 3) as usize];
        if value >> (bits as u64 - 1 - i) & 1 == 1 {
            *byte |= mask;
        } else {
            *byte &= !mask;
        }
    }
}

/// Redis's `checkUnsignedBitfieldOverflow`: whether `value + incr` leaves
/// the field's range, and what to store then (wrapped or saturated).
fn unsigned_overflow(value: u64, incr: i64, bits: u32, overflow: Overflow) -> Option<u64> {
    let max = (1u64 << bits) - 1;
    let max_incr = max.wrapping_sub(value) as i64;
    let min_incr = 0u64.wrapping_sub(value) as i64;
    let wrap = || value.wrapping_add(incr as u64) & max;
    if value > max || (incr > 0 && incr > max_incr) {
        Some(if overflow == Overflow::Sat { max } else { wrap() })
    } else if incr < 0 && incr < min_incr {
        Some(if overflow == Overflow::Sat { 0 } else { wrap() })
    } else {
        None
    }
}

/// Redis's `checkSignedBitfieldOverflow`, likewise.
fn signed_overflow(value: i64, incr: i64, bits: u32, overflow: Overflow) -> Option<i64> {
    let max = if bits == 64 { i64::MAX } else { (1i64 << (bits - 1)) - 1 };
    let min = -max - 1;
    let max_incr = (max as u64).wrapping_sub(value as u64) as i64;
    let min_incr = min.wrapping_sub(value);
    let wrap = || {
        let sum = (value as u64).wrapping_add(incr as u64);
        if bits == 64 {
            sum as i64
        } else if sum >> (bits - 1) & 1 == 1 {
            (sum | u64::MAX << bits) as i64
        } else {
            (sum & !(u64::MAX << bits)) as i64
        }
    };
    if value > max || (bits != 64 && incr > max_incr) || (value >= 0 && incr > 0 && incr > max_incr) {
        Some(if overflow == Overflow::Sat { max } else { wrap() })
    } else if value < min || (bits != 64 && incr < min_incr) || (value < 0 && incr < 0 && incr < min_incr) {
        Some(if overflow == Overflow::Sat { min } else { wrap() })
    } else {
        None
    }
}

pub fn bitfield(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    bitfield_generic(ctx, args, false)
}

pub fn bitfield_ro(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    bitfield_generic(ctx, args, true)
}

fn bitfield_generic(ctx: &mut Ctx<'_>, args: &[Bytes], read_only: bool) -> CmdResult {
    // Every operation is parsed before any runs: an error changes nothing.
    let mut fields = Vec::new();
    let mut overflow = Overflow::Wrap;
    let mut highest_write: Option<u64> = None;
    let mut i = 2;
    while i < args.len() {
        let left = args.len() - i - 1;
        let op = if eq(&args[i], "get") && left >= 2 {
            FieldOp::Get
        } else if eq(&args[i], "set") && left >= 3 {
            FieldOp::Set
        } else if eq(&args[i], "incrby") && left >= 3 {
            FieldOp::Incrby
        } else if eq(&args[i], "overflow") && left >= 1 {
            overflow = [("wrap", Overflow::Wrap), ("sat", Overflow::Sat), ("fail", Overflow::Fail)]
                .into_iter()
                .find(|(name, _)| eq(&args[i + 1], name))
                .map(|(_, kind)| kind)
                .ok_or_else(|| err("ERR Invalid OVERFLOW type specified"))?;
            i += 2;
            continue;
        } else {
            return Err(CmdError::Syntax);
        };
        let (signed, bits) = field_type(&args[i + 1])?;
        let offset = bit_offset(ctx, &args[i + 2], Some(bits))?;
        let mut value = 0;
        if op != FieldOp::Get {
            let last = offset + bits as u64 - 1;
            highest_write = Some(highest_write.map_or(last, |h| h.max(last)));
            value = int(&args[i + 3])?;
        }
        fields.push(Field { op, signed, bits, offset, value, overflow });
        i += if op == FieldOp::Get { 3 } else { 4 };
    }
    let Some(highest_write) = highest_write else {
        // GETs only: a missing key reads as zeros.
        let value = ctx.read(&args[1])?;
        let data = match &value {
            Some(value) => value.string()?,
            None => b"",
        };
        ctx.out.array(fields.len());
        for field in &fields {
            ctx.out.int(get_field(data, field.offset, field.bits, field.signed));
        }
        return Ok(());
    };
    if read_only {
        return Err(err("ERR BITFIELD_RO only supports the GET subcommand"));
    }
    // Made long enough for the farthest write first, as Redis does, even
    // if that write then fails on overflow.
    // A write: its lookup counts no hit or miss (`READS_KEYS`).
    let (mut data, expiry) = match ctx.peek(&args[1])? {
        Some(value) => (value.string()?.to_vec(), value.expiry_ms()),
        None => (Vec::new(), None),
    };
    let needed = (highest_write >> 3) as usize + 1;
    if needed > MAX_STRING_BYTES {
        return Err(CmdError::TooBig);
    }
    let grown = data.len() < needed;
    if grown {
        data.resize(needed, 0);
    }
    ctx.out.array(fields.len());
    // A SET or INCRBY applied (one that failed on overflow is not).
    let mut changed = false;
    for field in &fields {
        let old = get_field(&data, field.offset, field.bits, field.signed);
        let (new, overflowed) = match (field.op, field.signed) {
            (FieldOp::Get, _) => {
                ctx.out.int(old);
                continue;
            }
            (FieldOp::Incrby, true) => match signed_overflow(old, field.value, field.bits, field.overflow) {
                Some(limit) => (limit, true),
                None => (old + field.value, false),
            },
            (FieldOp::Set, true) => match signed_overflow(field.value, 0, field.bits, field.overflow) {
                Some(limit) => (limit, true),
                None => (field.value, false),
            },
            (FieldOp::Incrby, false) => match unsigned_overflow(old as u64, field.value, field.bits, field.overflow) {
                Some(limit) => (limit as i64, true),
                None => ((old as u64).wrapping_add(field.value as u64) as i64, false),
            },
            (FieldOp::Set, false) => match unsigned_overflow(field.value as u64, 0, field.bits, field.overflow) {
                Some(limit) => (limit as i64, true),
                None => (field.value, false),
            },
        };
        if overflowed && field.overflow == Overflow::Fail {
            ctx.out.null();
            continue;
        }
        ctx.out.int(if field.op == FieldOp::Set { old } else { new });
        set_field(&mut data, field.offset, field.bits, new as u64);
        changed = true;
    }
    if changed || grown {
        ctx.writes.put_string(&args[1], &data, expiry)?;
    }
    if changed {
        ctx.notify(crate::notify::STRING, "setbit", &args[1]);
    } else if grown {
        // Every write failed, the string grew: Redis keeps that and tells
        // no one (its replicas neither); ours hear of it.
        ctx.note_unpublished(&args[1]);
    }
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

    /// INCRBY on fields of 1 to 8 bits against arithmetic in i128:
    /// wrapped modulo 2^bits, saturated at the range's ends.
    #[test]
    fn increments_wrap_and_saturate_like_wide_arithmetic() {
        for bits in 1..=8u32 {
            let (lo, hi) = (-(1i128 << (bits - 1)), (1i128 << (bits - 1)) - 1);
            for value in lo..=hi {
                for incr in -300i128..=300 {
                    let sum = value + incr;
                    let fits = (lo..=hi).contains(&sum);
                    let wrapped = (sum - lo).rem_euclid(1 << bits) + lo;
                    let got = |overflow| signed_overflow(value as i64, incr as i64, bits, overflow);
                    assert_eq!(got(Overflow::Wrap), (!fits).then_some(wrapped as i64), "i{bits} {value}+{incr}");
                    assert_eq!(
                        got(Overflow::Sat),
                        (!fits).then_some(sum.clamp(lo, hi) as i64),
                        "i{bits} {value}+{incr}"
                    );
                }
            }
            let max = (1i128 << bits) - 1;
            for value in 0..=max {
                for incr in -300i128..=300 {
                    let sum = value + incr;
                    let fits = (0..=max).contains(&sum);
                    let got = |overflow| unsigned_overflow(value as u64, incr as i64, bits, overflow);
                    let wrapped = sum.rem_euclid(1 << bits) as u64;
                    assert_eq!(got(Overflow::Wrap), (!fits).then_some(wrapped), "u{bits} {value}+{incr}");
                    assert_eq!(
                        got(Overflow::Sat),
                        (!fits).then_some(sum.clamp(0, max) as u64),
                        "u{bits} {value}+{incr}"
                    );
                }
            }
        }
    }

    #[test]
    fn fields_read_back_what_was_written_at_any_offset() {
        let mut data = [0u8; 10];
        for bits in 1..=64u32 {
            for offset in [0u64, 1, 7, 8, 13] {
                let value = 0xA5C3_0F1E_5A3C_F0E1u64 >> (64 - bits);
                set_field(&mut data, offset, bits, value);
                assert_eq!(get_field(&data, offset, bits, false) as u64, value, "u{bits} at {offset}");
                let signed = if bits < 64 && value >> (bits - 1) & 1 == 1 { value | u64::MAX << bits } else { value };
                assert_eq!(get_field(&data, offset, bits, true), signed as i64, "i{bits} at {offset}");
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
