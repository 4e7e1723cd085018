//! Request parsing: RESP multibulk (`*2\r\n$3\r\nGET\r\n$1\r\nk\r\n`) and
//! inline commands (`GET k\r\n`, as telnet and redis-cli send), with the
//! limits and error texts of Redis 7's `networking.c`.
//!
//! The parser is stateless: it looks at the whole buffered input and either
//! returns one complete command, asks for more bytes, or fails. Payloads
//! are not scanned, only their lengths, so re-parsing a partial request is
//! cheap; arguments are slices of the input (`Bytes`), never copies.

use bytes::{Buf, Bytes, BytesMut};

/// Longest inline command or multibulk header line without a newline.
pub const MAX_INLINE_BYTES: usize = 64 * 1024;
/// Before AUTH, as in Redis: tiny requests only.
const UNAUTHENTICATED_MAX_ARGS: i64 = 10;
const UNAUTHENTICATED_MAX_BULK: i64 = 16 * 1024;

#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// `proto-max-bulk-len`.
    pub max_bulk_bytes: usize,
    /// Arguments per command.
    pub max_args: usize,
    /// Bytes of one request, all arguments together (Redis's
    /// `client-query-buffer-limit`): bounds what one client can make the
    /// server buffer.
    pub max_request_bytes: usize,
    pub authenticated: bool,
}

/// A request the connection cannot continue after; the text is what Redis
/// sends before closing.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("ERR Protocol error: {0}")]
pub struct ProtocolError(pub String);

fn error(text: impl Into<String>) -> ProtocolError {
    ProtocolError(text.into())
}

/// Takes one command off the front of `input`. `Ok(None)`: need more bytes.
/// An empty argument list is returned for requests Redis ignores (blank
/// inline lines, `*0`).
pub fn parse(input: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    if input.is_empty() {
        return Ok(None);
    }
    if input[0] == b'*' {
        parse_multibulk(input, limits)
    } else {
        parse_inline(input)
    }
}

/// The line starting at `at`, without its `\r\n`, and where the next begins.
fn line(input: &[u8], at: usize) -> Option<(&[u8], usize)> {
    let rest = &input[at..];
    let newline = rest.iter().position(|&b| b == b'\r')?;
    if rest.len() < newline + 2 {
        return None;
    }
    Some((&rest[..newline], at + newline + 2))
}

/// Redis's `string2ll` for lengths: an optional minus, digits, nothing else.
fn parse_len(text: &[u8]) -> Option<i64> {
    let (negative, digits) = match text.split_first() {
        Some((b'-', rest)) => (true, rest),
        _ => (false, text),
    };
    if digits.is_empty() || digits.len() > 18 || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let value = digits.iter().fold(0i64, |v, &d| v * 10 + (d - b'0') as i64);
    Some(if negative { -value } else { value })
}

fn parse_multibulk(input: &mut BytesMut, limits: &Limits) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some((header, mut at)) = line(input, 0) else {
        if input.len() > MAX_INLINE_BYTES {
            return Err(error("too big mbulk count string"));
        }
        return Ok(None);
    };
    let count = parse_len(&header[1..]).filter(|&n| n <= i32::MAX as i64);
    let Some(count) = count else { return Err(error("invalid multibulk length")) };
    if count > UNAUTHENTICATED_MAX_ARGS && !limits.authenticated {
        return Err(error("unauthenticated multibulk length"));
    }
    if count <= 0 {
        input.advance(at);
        return Ok(Some(Vec::new()));
    }
    if count as usize > limits.max_args {
        return Err(error("invalid multibulk length"));
    }
    let mut spans = Vec::with_capacity(count as usize);
    let mut total: u64 = 0;
    for _ in 0..count {
        if at >= input.len() {
            return Ok(None);
        }
        if input[at] != b'$' {
            return Err(error(format!("expected '$', got '{}'", input[at] as char)));
        }
        let Some((header, start)) = line(input, at) else {
            if input.len() - at > MAX_INLINE_BYTES {
                return Err(error("too big bulk count string"));
            }
            return Ok(None);
        };
        let len = parse_len(&header[1..]).filter(|&n| n >= 0 && n as u64 <= limits.max_bulk_bytes as u64);
        let Some(len) = len else { return Err(error("invalid bulk length")) };
        if len > UNAUTHENTICATED_MAX_BULK && !limits.authenticated {
            return Err(error("unauthenticated bulk length"));
        }
        total += len as u64 + 16;
        if total > limits.max_request_bytes as u64 {
            return Err(error(format!("request exceeds the query buffer limit of {} bytes", limits.max_request_bytes)));
        }
        let end = start + len as usize;
        if input.len() < end + 2 {
            // Make room for the whole argument at once rather than growing
            // the buffer read by read.
            input.reserve(end + 2 - input.len());
            return Ok(None);
        }
        // Redis does not check the terminator's bytes; neither do we.
        spans.push(start..end);
        at = end + 2;
    }
    let frame = input.split_to(at).freeze();
    Ok(Some(spans.into_iter().map(|span| frame.slice(span)).collect()))
}

fn parse_inline(input: &mut BytesMut) -> Result<Option<Vec<Bytes>>, ProtocolError> {
    let Some(newline) = input.iter().position(|&b| b == b'\n') else {
        if input.len() > MAX_INLINE_BYTES {
            return Err(error("too big inline request"));
        }
        return Ok(None);
    };
    let frame = input.split_to(newline + 1);
    let mut text = &frame[..newline];
    if let Some(stripped) = text.strip_suffix(b"\r") {
        text = stripped;
    }
    let args = split_args(text).ok_or_else(|| error("unbalanced quotes in request"))?;
    Ok(Some(args.into_iter().map(Bytes::from).collect()))
}

/// Appends `args` as a RESP multibulk request, as a client sends one
/// (to a master, a MIGRATE target, a replica's stream).
pub fn put_request(out: &mut Vec<u8>, args: &[&[u8]]) {
    out.extend_from_slice(format!("*{}\r\n", args.len()).as_bytes());
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg);
        out.extend_from_slice(b"\r\n");
    }
}

/// Redis's `sdscatrepr` (MONITOR's arguments, CONFIG REWRITE's values):
/// in double quotes, `\\` `\"` `\n` `\r` `\t` `\a` `\b` escaped, other
/// unprintable bytes as `\xHH`; `split_args` reads it back.
pub fn repr(out: &mut Vec<u8>, arg: &[u8]) {
    out.push(b'"');
    for &b in arg {
        match b {
            b'\\' | b'"' => out.extend_from_slice(&[b'\\', b]),
            b'\n' => out.extend_from_slice(b"\\n"),
            b'\r' => out.extend_from_slice(b"\\r"),
            b'\t' => out.extend_from_slice(b"\\t"),
            7 => out.extend_from_slice(b"\\a"),
            8 => out.extend_from_slice(b"\\b"),
            b if b.is_ascii_graphic() || b == b' ' => out.push(b),
            b => out.extend_from_slice(format!("\\x{b:02x}").as_bytes()),
        }
    }
    out.push(b'"');
}

/// Redis's `sdssplitargs`: words separated by spaces; "double quotes" with
/// \n \r \t \b \a \\ \" and \xHH escapes; 'single quotes' with \' only. A
/// closing quote must be followed by a space or the end. `None` when
/// unbalanced.
pub fn split_args(text: &[u8]) -> Option<Vec<Vec<u8>>> {
    let mut args = Vec::new();
    let mut i = 0;
    loop {
        while i < text.len() && text[i].is_ascii_whitespace() {
            i += 1;
        }
        if i == text.len() {
            return Some(args);
        }
        let mut current = Vec::new();
        let (mut in_double, mut in_single) = (false, false);
        loop {
            if in_double {
                let c = *text.get(i)?;
                if c == b'\\' && i + 3 < text.len() && text[i + 1] == b'x' {
                    if let (Some(h), Some(l)) = (hex(text[i + 2]), hex(text[i + 3])) {
                        current.push(h * 16 + l);
                        i += 4;
                        continue;
                    }
                }
                if c == b'\\' && i + 1 < text.len() {
                    current.push(match text[i + 1] {
                        b'n' => b'\n',
                        b'r' => b'\r',
                        b't' => b'\t',
                        b'b' => 8,
                        b'a' => 7,
                        other => other,
                    });
                    i += 2;
                } else if c == b'"' {
                    i = after_closing_quote(text, i)?;
                    break;
                } else {
                    current.push(c);
                    i += 1;
                }
            } else if in_single {
                let c = *text.get(i)?;
                if c == b'\\' && text.get(i + 1) == Some(&b'\'') {
                    current.push(b'\'');
                    i += 2;
                } else if c == b'\'' {
                    i = after_closing_quote(text, i)?;
                    break;
                } else {
                    current.push(c);
                    i += 1;
                }
            } else {
                match text.get(i) {
                    None => break,
                    Some(c) if c.is_ascii_whitespace() => break,
                    Some(b'"') => in_double = true,
                    Some(b'\'') => in_single = true,
                    Some(&c) => current.push(c),
                }
                i += 1;
            }
        }
        args.push(current);
    }
}

/// The index after the closing quote at `at`; `None` when something other
/// than a space or the end follows it.
fn after_closing_quote(text: &[u8], at: usize) -> Option<usize> {
    match text.get(at + 1) {
        Some(next) if !next.is_ascii_whitespace() => None,
        _ => Some(at + 1),
    }
}

fn hex(c: u8) -> Option<u8> {
    (c as char).to_digit(16).map(|d| d as u8)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits =
        Limits { max_bulk_bytes: 1 << 20, max_args: 1 << 20, max_request_bytes: 1 << 30, authenticated: true };

    fn parse_all(bytes: &[u8]) -> Result<Vec<Vec<Vec<u8>>>, ProtocolError> {
        let mut input = BytesMut::from(bytes);
        let mut out = Vec::new();
        while let Some(args) = parse(&mut input, &LIMITS)? {
            out.push(args.iter().map(|a| a.to_vec()).collect());
        }
        Ok(out)
    }

    #[test]
    fn multibulk_and_inline() {
        let parsed = parse_all(b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\nSET a \"b c\\x41\" 'd\\'e'\r\nPING\n").unwrap();
        assert_eq!(parsed[0], vec![b"GET".to_vec(), b"k".to_vec()]);
        assert_eq!(parsed[1], vec![b"SET".to_vec(), b"a".to_vec(), b"b cA".to_vec(), b"d'e".to_vec()]);
        assert_eq!(parsed[2], vec![b"PING".to_vec()]);
    }

    #[test]
    fn every_split_point_waits_for_more() {
        let request = b"*3\r\n$3\r\nSET\r\n$3\r\nkey\r\n$5\r\nvalue\r\n";
        for cut in 0..request.len() {
            let mut input = BytesMut::from(&request[..cut]);
            assert_eq!(parse(&mut input, &LIMITS).unwrap(), None, "cut at {cut}");
            input.extend_from_slice(&request[cut..]);
            assert_eq!(parse(&mut input, &LIMITS).unwrap().unwrap().len(), 3);
            assert!(input.is_empty());
        }
    }

    #[test]
    fn redis_error_texts() {
        let cases: [(&[u8], &str); 6] = [
            (b"*x\r\n", "invalid multibulk length"),
            (b"*1\r\n+GET\r\n", "expected '$', got '+'"),
            (b"*1\r\n$-5\r\n", "invalid bulk length"),
            (b"*1\r\n$99999999\r\n", "invalid bulk length"),
            (b"GET \"a\r\n", "unbalanced quotes in request"),
            (b"GET 'a'b\r\n", "unbalanced quotes in request"),
        ];
        for (input, text) in cases {
            assert_eq!(parse_all(input).unwrap_err().0, text, "{:?}", String::from_utf8_lossy(input));
        }
        let small = Limits { max_request_bytes: 100, ..LIMITS };
        let mut input = BytesMut::from(&b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$90\r\n"[..]);
        assert_eq!(parse(&mut input, &small).unwrap_err().0, "request exceeds the query buffer limit of 100 bytes");
        let unauthenticated = Limits { authenticated: false, ..LIMITS };
        let mut input = BytesMut::from(&b"*11\r\n"[..]);
        assert_eq!(parse(&mut input, &unauthenticated).unwrap_err().0, "unauthenticated multibulk length");
        let mut input = BytesMut::from(vec![b'x'; MAX_INLINE_BYTES + 1].as_slice());
        assert_eq!(parse(&mut input, &LIMITS).unwrap_err().0, "too big inline request");
    }

    fn encode(args: &[Vec<u8>]) -> Vec<u8> {
        let mut out = Vec::new();
        put_request(&mut out, &args.iter().map(Vec::as_slice).collect::<Vec<_>>());
        out
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(2000))]

        /// Any bytes, fed in any chunks: never a panic, never a loop; each
        /// call either takes a command, waits, or fails.
        #[test]
        fn garbage_never_panics(
            bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300),
            chunk in 1usize..64,
            authenticated in proptest::prelude::any::<bool>(),
        ) {
            let limits = Limits { max_bulk_bytes: 100, max_args: 16, max_request_bytes: 1000, authenticated };
            let mut input = BytesMut::new();
            for piece in bytes.chunks(chunk) {
                input.extend_from_slice(piece);
                loop {
                    let before = input.len();
                    match parse(&mut input, &limits) {
                        Ok(Some(args)) => {
                            proptest::prop_assert!(input.len() < before, "a command consumes input");
                            proptest::prop_assert!(args.len() <= 16 && args.iter().all(|a| a.len() <= MAX_INLINE_BYTES));
                        }
                        Ok(None) => break,
                        Err(_) => return Ok(()),
                    }
                }
            }
        }

        /// Valid requests split anywhere parse to exactly what was sent.
        #[test]
        fn split_requests_parse_exactly(
            commands in proptest::collection::vec(
                proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), 1..6), 1..5),
            cuts in proptest::collection::vec(0usize..400, 0..6),
        ) {
            let wire: Vec<u8> = commands.iter().flat_map(|c| encode(c)).collect();
            let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (wire.len() + 1)).collect();
            cuts.push(wire.len());
            cuts.sort();
            let (mut input, mut parsed, mut at) = (BytesMut::new(), Vec::new(), 0);
            for cut in cuts {
                input.extend_from_slice(&wire[at..cut]);
                at = cut;
                while let Some(args) = parse(&mut input, &LIMITS).unwrap() {
                    parsed.push(args.iter().map(|a| a.to_vec()).collect::<Vec<_>>());
                }
            }
            proptest::prop_assert_eq!(parsed, commands);
            proptest::prop_assert!(input.is_empty());
        }
    }

    #[test]
    fn empty_requests_are_skipped() {
        assert_eq!(parse_all(b"\r\n*0\r\n  \n").unwrap(), vec![Vec::<Vec<u8>>::new(); 3]);
    }
}
