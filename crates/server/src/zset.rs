//! A Redis sorted set's scores and its encoding as one engine value.
//!
//! Redis orders a sorted set by score, then by member bytes, in every
//! encoding, so ScaledKV lists members exactly as Redis does. A small set
//! is one value in `crate::hash`'s layout with the members in that order
//! and each score as 8 bytes (an f64, little endian); the header's flag
//! says Redis would have made it a skiplist. A big one is a table
//! (`commands::zsets`) whose score index sorts by `score_key`.

use std::cmp::Ordering;

use crate::hash::{self, Corrupt};

/// Redis's defaults for `zset-max-listpack-entries` and `-value`.
pub const LISTPACK_ENTRIES: usize = 128;
pub const LISTPACK_VALUE: usize = 64;

/// Redis's order: by score (where -0 equals 0), then by member bytes.
pub fn order(a: (f64, &[u8]), b: (f64, &[u8])) -> Ordering {
    a.0.partial_cmp(&b.0).unwrap_or(Ordering::Equal).then_with(|| a.1.cmp(b.1))
}

/// Eight bytes that sort as the score does (-0 as 0): the sign bit
/// flipped for a positive score, every bit for a negative one.
pub fn score_key(score: f64) -> [u8; 8] {
    let bits = if score == 0.0 { 0 } else { score.to_bits() };
    let ordered = if bits >> 63 == 1 { !bits } else { bits | 1 << 63 };
    ordered.to_be_bytes()
}

pub fn score_from_key(key: [u8; 8]) -> f64 {
    let ordered = u64::from_be_bytes(key);
    f64::from_bits(if ordered >> 63 == 1 { ordered & !(1 << 63) } else { !ordered })
}

/// A score as Redis 7.0 prints it (`%.17g`; `inf`, `-inf`).
pub fn format_score(score: f64) -> String {
    if score.is_infinite() {
        return if score > 0.0 { "inf".into() } else { "-inf".into() };
    }
    if score == 0.0 {
        return if score.is_sign_negative() { "-0".into() } else { "0".into() };
    }
    // Whole scores (the usual kind) print as integers, with no float
    // formatting: %.17g does so below 10^17.
    if score.fract() == 0.0 && score.abs() < 1e17 {
        return itoa::Buffer::new().format(score as i64).to_string();
    }
    // 17 significant digits, rounded once: the exponent of that rounding
    // decides between the fixed and the exponent form, as %g does.
    let scientific = format!("{score:.16e}");
    let (mantissa, exponent) = scientific.split_once('e').expect("{:e} has an exponent");
    let exponent: i32 = exponent.parse().expect("{:e}'s exponent is a number");
    if !(-4..17).contains(&exponent) {
        let sign = if exponent < 0 { '-' } else { '+' };
        return format!("{}e{sign}{:02}", trim_zeros(mantissa), exponent.abs());
    }
    let (sign, mantissa) = match mantissa.strip_prefix('-') {
        Some(rest) => ("-", rest),
        None => ("", mantissa),
    };
    let digits: String = mantissa.chars().filter(char::is_ascii_digit).collect();
    let fixed = if exponent >= 0 {
        let (whole, fraction) = digits.split_at(exponent as usize + 1);
        format!("{sign}{whole}.{fraction}")
    } else {
        format!("{sign}0.{}{digits}", "0".repeat((-exponent - 1) as usize))
    };
    trim_zeros(&fixed).to_string()
}

fn trim_zeros(number: &str) -> &str {
    if number.contains('.') {
        number.trim_end_matches('0').trim_end_matches('.')
    } else {
        number
    }
}

/// A score argument (ZADD, ZINCRBY, WEIGHTS), read as Redis reads it with
/// `strtod`: no leading space, nothing after the number, no NaN, and no
/// finite number too big or too small for a double.
pub fn parse_score(arg: &[u8]) -> Option<f64> {
    parse_score_text(std::str::from_utf8(arg).ok()?)
}

/// `parse_score` of text already known to be UTF-8.
pub fn parse_score_text(text: &str) -> Option<f64> {
    if text.is_empty() || text.starts_with(|c: char| c.is_ascii_whitespace()) {
        return None;
    }
    let value: f64 = text.parse().ok()?;
    // Looked into only for the rare values they concern: a lower-cased
    // copy of every number cost SORT of 100 numbers 32-42 against 31-35
    // µs of CPU a call (three interleaved pairs, tmpfs).
    let overflow = || !text.bytes().any(|b| b == b'i' || b == b'I');
    let underflow = || {
        let mantissa = text.split(['e', 'E']).next().unwrap_or_default();
        mantissa.bytes().any(|b| (b'1'..=b'9').contains(&b))
    };
    let refused = value.is_nan() || (value.is_infinite() && overflow()) || (value == 0.0 && underflow());
    (!refused).then_some(value)
}

/// One end of a score range (ZRANGEBYSCORE, ZCOUNT ...): `(` makes it
/// exclusive; as Redis, leading space and out-of-range numbers pass.
pub fn parse_bound(arg: &[u8]) -> Option<(f64, bool)> {
    let (exclusive, number) = match arg.first() {
        Some(b'(') => (true, &arg[1..]),
        _ => (false, arg),
    };
    let text = std::str::from_utf8(number).ok()?.trim_start_matches(|c: char| c.is_ascii_whitespace());
    // strtod reads nothing from an empty string, and Redis takes its 0.
    let value: f64 = if text.is_empty() { 0.0 } else { text.parse().ok()? };
    (!value.is_nan()).then_some((value, exclusive))
}

/// One end of a lexicographic range (ZRANGEBYLEX ...).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Lex {
    /// `-`: below every member.
    Min,
    /// `+`: above every member.
    Max,
    Inclusive(Vec<u8>),
    Exclusive(Vec<u8>),
}

impl Lex {
    pub fn parse(arg: &[u8]) -> Option<Lex> {
        match arg.split_first()? {
            (b'-', []) => Some(Lex::Min),
            (b'+', []) => Some(Lex::Max),
            (b'[', rest) => Some(Lex::Inclusive(rest.to_vec())),
            (b'(', rest) => Some(Lex::Exclusive(rest.to_vec())),
            _ => None,
        }
    }

    /// Whether `member` is at or above this lower end.
    pub fn below(&self, member: &[u8]) -> bool {
        match self {
            Lex::Min => true,
            Lex::Max => false,
            Lex::Inclusive(min) => member >= min.as_slice(),
            Lex::Exclusive(min) => member > min.as_slice(),
        }
    }

    /// Whether `member` is at or below this upper end.
    pub fn above(&self, member: &[u8]) -> bool {
        match self {
            Lex::Min => false,
            Lex::Max => true,
            Lex::Inclusive(max) => member <= max.as_slice(),
            Lex::Exclusive(max) => member < max.as_slice(),
        }
    }
}

/// Whether a score range holds nothing by its ends alone (Redis answers
/// it empty without looking).
pub fn empty_range(min: (f64, bool), max: (f64, bool)) -> bool {
    min.0 > max.0 || (min.0 == max.0 && (min.1 || max.1))
}

/// Likewise for a lexicographic range.
pub fn empty_lex(min: &Lex, max: &Lex) -> bool {
    match (min, max) {
        (Lex::Max, _) | (_, Lex::Min) => true,
        (Lex::Min, _) | (_, Lex::Max) => false,
        (Lex::Inclusive(a), Lex::Inclusive(b)) => a > b,
        (Lex::Inclusive(a) | Lex::Exclusive(a), Lex::Inclusive(b) | Lex::Exclusive(b)) => a >= b,
    }
}

/// Members and their scores, borrowed.
pub type Members<'a> = Vec<(&'a [u8], f64)>;

/// The members and scores of a sorted set kept as one value, in order,
/// and whether Redis would keep it as a skiplist.
pub fn decode(data: &[u8]) -> Result<(Members<'_>, bool), Corrupt> {
    let mut entries = Vec::with_capacity(hash::count(data)?.min(data.len()));
    for pair in hash::pairs(data) {
        let (member, score) = pair?;
        let score = f64::from_le_bytes(score.try_into().map_err(|_| Corrupt)?);
        if score.is_nan() {
            return Err(Corrupt);
        }
        if let Some(&(last, last_score)) = entries.last() {
            if order((last_score, last), (score, member)) != Ordering::Less {
                return Err(Corrupt); // out of order, or a member twice
            }
        }
        entries.push((member, score));
    }
    Ok((entries, hash::is_hashtable(data)?))
}

/// The value of `entries` (in order).
pub fn encode<'m>(entries: impl ExactSizeIterator<Item = (&'m [u8], f64)>, skiplist: bool) -> Vec<u8> {
    let entries: Vec<(&[u8], [u8; 8])> = entries.map(|(m, s)| (m, s.to_le_bytes())).collect();
    let mut out = Vec::new();
    hash::encode_into(&mut out, entries.len(), skiplist, entries.iter().map(|(m, s)| (*m, &s[..])));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn scores_print_as_redis_prints_them() {
        let cases = [
            (1.1, "1.1000000000000001"),
            (2.0, "2"),
            (0.5, "0.5"),
            (1e20, "1e+20"),
            (3.5e-7, "3.4999999999999998e-07"),
            (1e16, "10000000000000000"),
            (1e17, "1e+17"),
            (0.0001, "0.0001"),
            (0.00001, "1.0000000000000001e-05"),
            (-2.5, "-2.5"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (-0.0, "-0"),
            (123456789.125, "123456789.125"),
            (-0.00012345, "-0.00012344999999999999"),
            (99999999999999999.0, "1e+17"),
            (-12345678901234567.0, "-12345678901234568"),
            (f64::MAX, "1.7976931348623157e+308"),
            (5e-324, "4.9406564584124654e-324"),
        ];
        for (score, text) in cases {
            assert_eq!(format_score(score), text, "{score:e}");
        }
    }

    #[test]
    fn score_arguments_are_read_as_redis_reads_them() {
        for (text, score) in
            [("1", 1.0), ("-1.5", -1.5), ("+5", 5.0), ("inf", f64::INFINITY), ("-inf", f64::NEG_INFINITY)]
        {
            assert_eq!(parse_score(text.as_bytes()), Some(score), "{text}");
        }
        for text in ["", " 1", "1 ", "nan", "abc", "1e400", "1e-400", "1e", "--1"] {
            assert_eq!(parse_score(text.as_bytes()), None, "{text}");
        }
        assert_eq!(parse_bound(b"( 1"), Some((1.0, true)));
        assert_eq!(parse_bound(b"("), Some((0.0, true)));
        assert_eq!(parse_bound(b"1e400"), Some((f64::INFINITY, false)));
        assert_eq!(parse_bound(b"(1.1x"), None);
        assert_eq!(parse_bound(b"nan"), None);
        assert_eq!(Lex::parse(b"-"), Some(Lex::Min));
        assert_eq!(Lex::parse(b"[a"), Some(Lex::Inclusive(b"a".to_vec())));
        assert_eq!(Lex::parse(b"+a"), None);
        assert_eq!(Lex::parse(b"a"), None);
        assert_eq!(Lex::parse(b""), None);
    }

    proptest! {
        #[test]
        fn score_keys_sort_as_scores(a in any::<f64>(), b in any::<f64>()) {
            prop_assume!(!a.is_nan() && !b.is_nan());
            let expected = a.partial_cmp(&b).unwrap();
            prop_assert_eq!(score_key(a).cmp(&score_key(b)), expected);
            prop_assert_eq!(score_from_key(score_key(a)), if a == 0.0 { 0.0 } else { a });
        }

        /// libc's own `%.17g`, which Redis 7.0 prints with, is the oracle.
        #[test]
        fn scores_print_as_libc_prints_them(score in any::<f64>(), whole in -1_000_000i64..1_000_000) {
            for score in [score, whole as f64, whole as f64 / 8.0] {
                prop_assume!(!score.is_nan());
                let mut buf = [0u8; 64];
                // SAFETY: the buffer is 64 bytes and %.17g of a double takes at most 25.
                let len = unsafe {
                    libc::snprintf(buf.as_mut_ptr().cast(), buf.len(), c"%.17g".as_ptr(), score)
                };
                prop_assert_eq!(format_score(score), std::str::from_utf8(&buf[..len as usize]).unwrap());
            }
        }

        #[test]
        fn printed_scores_read_back(score in any::<f64>()) {
            prop_assume!(!score.is_nan());
            let text = format_score(score);
            prop_assert_eq!(text.parse::<f64>().unwrap(), score);
        }

        #[test]
        fn values_decode_to_what_was_encoded(mut entries in proptest::collection::btree_map(
            proptest::collection::vec(any::<u8>(), 0..8), -1e3f64..1e3, 0..20), skiplist in any::<bool>()) {
            let mut sorted: Vec<(&[u8], f64)> = entries.iter_mut().map(|(m, s)| (m.as_slice(), *s)).collect();
            sorted.sort_by(|a, b| order((a.1, a.0), (b.1, b.0)));
            let data = encode(sorted.iter().copied(), skiplist);
            prop_assert_eq!(decode(&data).unwrap(), (sorted, skiplist));
        }

        #[test]
        fn damaged_values_are_refused_or_read_in_order(data in proptest::collection::vec(any::<u8>(), 0..64)) {
            if let Ok((entries, _)) = decode(&data) {
                for pair in entries.windows(2) {
                    prop_assert_eq!(order((pair[0].1, pair[0].0), (pair[1].1, pair[1].0)), Ordering::Less);
                }
            }
        }
    }
}
