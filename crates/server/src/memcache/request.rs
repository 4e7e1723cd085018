//! The memcached text protocol's requests: a command line of words split
//! by spaces, ended by `\n` (or `\r\n`), and for a storage command a data
//! block of the announced length followed by `\r\n`. What memcached 1.6
//! refuses at this stage (a malformed storage line, an oversized value, a
//! data block without its `\r\n`) is refused here with its words; the
//! commands' own checks are in `commands.rs`.

use bytes::{Buf, Bytes, BytesMut};

/// memcached's longest key.
pub const MAX_KEY_BYTES: usize = 250;
/// A line this long without its end closes the connection, as in memcached,
/// unless it is a multi-get (which may name many keys)...
const MAX_PLAIN_LINE: usize = 2048;
/// ... up to this many bytes.
pub const MAX_GET_LINE: usize = 1 << 20;

/// What a connection may send.
#[derive(Debug, Clone, Copy)]
pub struct Limits {
    /// The largest item, key and value (memcached's `-I`, 1 MiB by default).
    pub max_item_bytes: usize,
}

/// memcached's per-item overhead counted against `max_item_bytes` (its
/// item header and the data's `\r\n`), so the same values fit.
pub const ITEM_OVERHEAD: usize = 56;

#[derive(Debug, PartialEq, Eq)]
pub enum Request {
    /// A command's words, the name first; a storage command's data block
    /// follows its words.
    Command { args: Vec<Bytes>, noreply: bool },
    /// A storage command whose value is over the limit: its data was
    /// skipped; a `set` also drops the key's item (as memcached does, so a
    /// stale value does not outlive the failed set).
    TooLarge { key: Bytes, drop: bool, noreply: bool },
    /// An error answered in turn (unless the command said `noreply`);
    /// what follows is read as commands.
    Error(&'static str, bool),
}

/// The connection is closed (memcached closes it too, without a word).
#[derive(Debug, PartialEq, Eq)]
pub struct LineTooLong;

const BAD_FORMAT: &str = "CLIENT_ERROR bad command line format";

/// Commands whose last word may be `noreply`.
fn takes_noreply(name: &[u8]) -> bool {
    matches!(
        name,
        b"set"
            | b"add"
            | b"replace"
            | b"append"
            | b"prepend"
            | b"cas"
            | b"delete"
            | b"incr"
            | b"decr"
            | b"touch"
            | b"flush_all"
            | b"verbosity"
    )
}

/// Reads requests from a connection's input, across reads.
#[derive(Default)]
pub struct Parser {
    /// Bytes of a refused value still to skip.
    skip: usize,
}

impl Parser {
    /// The next complete request in `input` (consumed), or None until more
    /// comes.
    pub fn parse(&mut self, input: &mut BytesMut, limits: &Limits) -> Result<Option<Request>, LineTooLong> {
        if self.skip > 0 {
            let n = self.skip.min(input.len());
            input.advance(n);
            self.skip -= n;
            if self.skip > 0 {
                return Ok(None);
            }
        }
        let Some(end) = memchr(b'\n', input) else {
            let start = input.iter().position(|&b| b != b' ').unwrap_or(input.len());
            let get = [&b"get "[..], b"gets ", b"gat ", b"gats "].iter().any(|p| input[start..].starts_with(p));
            if input.len() > MAX_GET_LINE || (input.len() > MAX_PLAIN_LINE && !get) {
                return Err(LineTooLong);
            }
            return Ok(None);
        };
        let line = &input[..end];
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        let words: Vec<(usize, usize)> = words(line);
        let Some(&(at, len)) = words.first() else {
            input.advance(end + 1);
            return Ok(Some(Request::Error("ERROR", false)));
        };
        let name = &line[at..at + len];
        if matches!(name, b"set" | b"add" | b"replace" | b"append" | b"prepend" | b"cas") {
            return Ok(self.storage(input, end, words, limits));
        }
        if name == b"ms" {
            return Ok(self.meta_set(input, end, words, limits));
        }
        let mut noreply = false;
        let mut count = words.len();
        // A lone `noreply` is a key to delete, and the bad argument of
        // the others (which memcached then reads it as, silently).
        let lone_ok = matches!(name, b"verbosity" | b"flush_all");
        if takes_noreply(name) && (count > 2 || (count == 2 && lone_ok)) && word(line, words[count - 1]) == b"noreply" {
            noreply = true;
            count -= 1;
        }
        let meta = matches!(name, b"mg" | b"md" | b"ma");
        let frozen = input.split_to(end + 1).freeze();
        let mut args: Vec<Bytes> = words[..count].iter().map(|&(at, len)| frozen.slice(at..at + len)).collect();
        if meta && args.len() > 1 {
            if let Err(error) = decode_key(&mut args, 2..count) {
                return Ok(Some(error));
            }
        }
        Ok(Some(Request::Command { args, noreply }))
    }

    /// `ms <key> <datalen> <flags>*` (the line's `words`, ending at `end`)
    /// and its data block. As memcached: too
    /// few words or a bad length or key is refused before the data (which
    /// is then read as commands); a bad flag once the data is read.
    fn meta_set(
        &mut self,
        input: &mut BytesMut,
        end: usize,
        words: Vec<(usize, usize)>,
        limits: &Limits,
    ) -> Option<Request> {
        let line = &input[..end];
        let refuse = |input: &mut BytesMut, text| {
            input.advance(end + 1);
            Some(Request::Error(text, false))
        };
        if words.len() < 2 {
            return refuse(input, "ERROR");
        }
        let key = word(line, words[1]);
        let length = words.get(2).and_then(|&w| signed(word(line, w))).filter(|&n| n >= 0);
        let (Some(length), true) = (length, words.len() > 2 && key.len() <= MAX_KEY_BYTES) else {
            return refuse(input, BAD_FORMAT);
        };
        // A plain set (no mode, or mode S) drops the old item, as `set` does.
        let drop = !words[3..].iter().any(|&w| word(line, w).starts_with(b"M") && word(line, w) != b"MS");
        let quiet = words[3..].iter().any(|&w| word(line, w) == b"q");
        let mut args = match self.data_block(input, end, &words, length as usize, limits, drop, quiet) {
            Block::Wait => return None,
            Block::Refused(request) => return Some(request),
            Block::Taken(args) => args,
        };
        let flags = 3..args.len() - 1;
        if let Err(error) = decode_key(&mut args, flags) {
            return Some(error);
        }
        Some(Request::Command { args, noreply: false })
    }

    /// A storage command, its line's `words` ending at `end`: `<name> <key> <flags>
    /// <exptime> <bytes> [<cas>] [noreply]` and the data block. Memcached's
    /// answers: ERROR for a wrong word count, a format error for a bad
    /// number or key, and either leave the data to be read as commands.
    fn storage(
        &mut self,
        input: &mut BytesMut,
        end: usize,
        words: Vec<(usize, usize)>,
        limits: &Limits,
    ) -> Option<Request> {
        let line = &input[..end];
        let cas = word(line, words[0]) == b"cas";
        let wanted = if cas { 6 } else { 5 };
        if words.len() != wanted && words.len() != wanted + 1 {
            input.advance(end + 1);
            return Some(Request::Error("ERROR", false));
        }
        let noreply = words.len() == wanted + 1 && word(line, words[wanted]) == b"noreply";
        let key = word(line, words[1]);
        let numbers_ok = flags(word(line, words[2])).is_some()
            && exptime(word(line, words[3])).is_some()
            && (!cas || unsigned(word(line, words[5])).is_some());
        let length = signed(word(line, words[4])).filter(|&n| n >= 0);
        let (Some(length), true, true) = (length, numbers_ok, key.len() <= MAX_KEY_BYTES) else {
            input.advance(end + 1);
            return Some(Request::Error(BAD_FORMAT, noreply));
        };
        let drop = word(line, words[0]) == b"set";
        match self.data_block(input, end, &words[..wanted], length as usize, limits, drop, noreply) {
            Block::Wait => None,
            Block::Refused(request) => Some(request),
            Block::Taken(args) => Some(Request::Command { args, noreply }),
        }
    }

    /// The data block of `length` bytes after a storage line (its `words`,
    /// the key second) that ends at `end`: too large for an item (skipped,
    /// and refused; `drop`: the old item goes too), not all here yet, not
    /// ended by `\r\n` (refused), or taken: the words, then the data.
    #[allow(clippy::too_many_arguments)]
    fn data_block(
        &mut self,
        input: &mut BytesMut,
        end: usize,
        words: &[(usize, usize)],
        length: usize,
        limits: &Limits,
        drop: bool,
        noreply: bool,
    ) -> Block {
        let (key_at, key_len) = words[1];
        if length + key_len + ITEM_OVERHEAD > limits.max_item_bytes {
            let key = Bytes::copy_from_slice(&input[key_at..key_at + key_len]);
            input.advance(end + 1);
            self.skip = length + 2;
            let n = self.skip.min(input.len());
            input.advance(n);
            self.skip -= n;
            return Block::Refused(Request::TooLarge { key, drop, noreply });
        }
        let block_end = end + 1 + length;
        if input.len() < block_end + 2 {
            // Room for the rest, so it arrives in as few reads as it can.
            input.reserve(block_end + 2 - input.len());
            return Block::Wait;
        }
        if &input[block_end..block_end + 2] != b"\r\n" {
            input.advance(block_end + 2);
            return Block::Refused(Request::Error("CLIENT_ERROR bad data chunk", noreply));
        }
        let frozen = input.split_to(block_end + 2).freeze();
        let mut args: Vec<Bytes> = words.iter().map(|&(at, len)| frozen.slice(at..at + len)).collect();
        args.push(frozen.slice(end + 1..block_end));
        Block::Taken(args)
    }
}

/// What became of a storage command's data block (`Parser::data_block`).
enum Block {
    Wait,
    Refused(Request),
    Taken(Vec<Bytes>),
}

/// A meta command with the flag `b` names its key in base64: decoded here,
/// so the key's lock is the key's own.
fn decode_key(args: &mut [Bytes], flags: std::ops::Range<usize>) -> Result<(), Request> {
    use base64::Engine as _;
    if !args[flags].iter().any(|flag| flag.first() == Some(&b'b')) {
        return Ok(());
    }
    match base64::engine::general_purpose::STANDARD.decode(&args[1]) {
        Ok(key) => {
            args[1] = Bytes::from(key);
            Ok(())
        }
        Err(_) => Err(Request::Error("CLIENT_ERROR error decoding key", false)),
    }
}

fn memchr(byte: u8, haystack: &[u8]) -> Option<usize> {
    haystack.iter().position(|&b| b == byte)
}

/// Each word's start and length: memcached splits on spaces only.
fn words(line: &[u8]) -> Vec<(usize, usize)> {
    let mut words = Vec::new();
    let mut start = None;
    for (i, &b) in line.iter().enumerate() {
        match (b == b' ', start) {
            (true, Some(s)) => {
                words.push((s, i - s));
                start = None;
            }
            (false, None) => start = Some(i),
            _ => {}
        }
    }
    if let Some(s) = start {
        words.push((s, line.len() - s));
    }
    words
}

fn word(line: &[u8], (at, len): (usize, usize)) -> &[u8] {
    &line[at..at + len]
}

/// Decimal digits after an optional sign, as `strtoull` reads a whole
/// word: the magnitude and whether it was negative.
fn digits(text: &[u8]) -> Option<(u64, bool)> {
    let (negative, digits) = match text.first()? {
        b'-' => (true, &text[1..]),
        b'+' => (false, &text[1..]),
        _ => (false, text),
    };
    if digits.is_empty() || !digits.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut value: u64 = 0;
    for &d in digits {
        value = value.checked_mul(10)?.checked_add((d - b'0') as u64)?;
    }
    Some((value, negative))
}

/// memcached's `safe_strtoull`: an unsigned 64-bit number (a minus sign
/// only on zero).
pub fn unsigned(text: &[u8]) -> Option<u64> {
    match digits(text)? {
        (0, _) => Some(0),
        (_, true) => None,
        (value, false) => Some(value),
    }
}

/// memcached's `safe_strtol` for a 32-bit field (exptime, length).
pub fn signed(text: &[u8]) -> Option<i64> {
    let (value, negative) = digits(text)?;
    let value = if negative { -(i64::try_from(value).ok()?) } else { i64::try_from(value).ok()? };
    (i32::MIN as i64..=i32::MAX as i64).contains(&value).then_some(value)
}

/// Client flags: memcached 1.6 reads an unsigned long and keeps its low
/// 32 bits.
pub fn flags(text: &[u8]) -> Option<u32> {
    unsigned(text).map(|value| value as u32)
}

/// An expiry time in seconds: relative up to 30 days, a Unix time above.
pub fn exptime(text: &[u8]) -> Option<i64> {
    signed(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_item_bytes: 1 << 20 };

    fn parse_all(bytes: &[u8]) -> (Vec<Request>, BytesMut) {
        let mut input = BytesMut::from(bytes);
        let mut parser = Parser::default();
        let mut requests = Vec::new();
        while let Some(request) = parser.parse(&mut input, &LIMITS).unwrap() {
            requests.push(request);
        }
        (requests, input)
    }

    fn command(words: &[&[u8]], noreply: bool) -> Request {
        Request::Command { args: words.iter().map(|w| Bytes::copy_from_slice(w)).collect(), noreply }
    }

    #[test]
    fn lines_split_on_spaces_and_end_with_either_newline() {
        let (requests, rest) = parse_all(b"get  a b \r\ndelete a noreply\ndelete noreply\nincr\r\n\r\nversion");
        assert_eq!(
            requests,
            vec![
                command(&[b"get", b"a", b"b"], false),
                command(&[b"delete", b"a"], true),
                command(&[b"delete", b"noreply"], false),
                command(&[b"incr"], false),
                Request::Error("ERROR", false),
            ]
        );
        assert_eq!(&rest[..], b"version", "an unfinished line waits");
    }

    #[test]
    fn a_storage_command_takes_its_data_block_whole() {
        let (requests, rest) = parse_all(b"set k 5 0 3 noreply\r\na\r\n\r\ncas k 0 0 1 77\r\nx");
        assert_eq!(requests, vec![command(&[b"set", b"k", b"5", b"0", b"3", b"a\r\n"], true)]);
        assert_eq!(&rest[..], b"cas k 0 0 1 77\r\nx", "waits for the block's end");
        let (requests, _) = parse_all(b"cas k 0 0 1 77\r\nx\r\n");
        assert_eq!(requests, vec![command(&[b"cas", b"k", b"0", b"0", b"1", b"77", b"x"], false)]);
    }

    #[test]
    fn malformed_storage_lines_leave_the_data_to_be_read_as_commands() {
        let (requests, _) = parse_all(b"set k x 0 1\r\nv\r\nset k 0 0\r\nset k 0 0 -1\r\nset k 0 0 1\r\nxy\r\n");
        assert_eq!(
            requests,
            vec![
                Request::Error(BAD_FORMAT, false),
                command(&[b"v"], false),
                Request::Error("ERROR", false),
                Request::Error(BAD_FORMAT, false),
                // "xy\r" is the block, without its "\r\n": the "\n" left is an empty line.
                Request::Error("CLIENT_ERROR bad data chunk", false),
                Request::Error("ERROR", false),
            ]
        );
        let long_key = [b"set ".to_vec(), vec![b'k'; 251], b" 0 0 1\r\n".to_vec()].concat();
        assert_eq!(parse_all(&long_key).0, vec![Request::Error(BAD_FORMAT, false)]);
    }

    #[test]
    fn a_meta_set_takes_its_data_and_keys_in_base64_are_decoded() {
        let (requests, _) =
            parse_all(b"ms k 2 T5 F3\r\nhi\r\nms Zm9v 1 b\r\nx\r\nmg Zm9v b v\r\nmg !! b\r\nms k\r\nms k x\r\n");
        assert_eq!(
            requests,
            vec![
                command(&[b"ms", b"k", b"2", b"T5", b"F3", b"hi"], false),
                command(&[b"ms", b"foo", b"1", b"b", b"x"], false),
                command(&[b"mg", b"foo", b"b", b"v"], false),
                Request::Error("CLIENT_ERROR error decoding key", false),
                Request::Error(BAD_FORMAT, false),
                Request::Error(BAD_FORMAT, false),
            ]
        );
    }

    #[test]
    fn an_oversized_value_is_skipped_across_reads() {
        let mut parser = Parser::default();
        let limits = Limits { max_item_bytes: 100 };
        let mut input = BytesMut::from(&b"set big 0 0 200\r\n"[..]);
        input.extend_from_slice(&[b'a'; 50]);
        assert_eq!(
            parser.parse(&mut input, &limits).unwrap(),
            Some(Request::TooLarge { key: Bytes::from_static(b"big"), drop: true, noreply: false })
        );
        assert!(input.is_empty());
        input.extend_from_slice(&[b'a'; 150]);
        input.extend_from_slice(b"\r\nget big\r\n");
        assert_eq!(parser.parse(&mut input, &limits).unwrap(), Some(command(&[b"get", b"big"], false)));
    }

    #[test]
    fn a_long_line_closes_the_connection_unless_it_is_a_get() {
        let mut parser = Parser::default();
        let mut input = BytesMut::from(&vec![b'x'; 2049][..]);
        assert_eq!(parser.parse(&mut input, &LIMITS), Err(LineTooLong));
        let mut input = BytesMut::from(&[b"get ".to_vec(), vec![b'k'; 5000]].concat()[..]);
        assert_eq!(parser.parse(&mut input, &LIMITS), Ok(None));
        input.extend_from_slice(&vec![b'k'; MAX_GET_LINE]);
        assert_eq!(parser.parse(&mut input, &LIMITS), Err(LineTooLong));
    }

    #[test]
    fn numbers_read_as_memcached_reads_them() {
        assert_eq!(unsigned(b"+5"), Some(5));
        assert_eq!(unsigned(b"-0"), Some(0));
        assert_eq!(unsigned(b"-1"), None);
        assert_eq!(unsigned(b"18446744073709551615"), Some(u64::MAX));
        assert_eq!(unsigned(b"18446744073709551616"), None);
        assert_eq!(unsigned(b"1x"), None);
        assert_eq!(flags(b"4294967296"), Some(0));
        assert_eq!(signed(b"-1"), Some(-1));
        assert_eq!(signed(b"2147483648"), None);
        assert_eq!(signed(b""), None);
    }

    proptest::proptest! {
        /// Any bytes, in any pieces: a request, an error or a wait, never a
        /// panic, and every request's words and data come from the input.
        #[test]
        fn arbitrary_input_never_panics(chunks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64), 0..8)) {
            let mut parser = Parser::default();
            let mut input = BytesMut::new();
            for chunk in chunks {
                input.extend_from_slice(&chunk);
                loop {
                    match parser.parse(&mut input, &Limits { max_item_bytes: 64 }) {
                        Ok(Some(Request::Command { args, .. })) => proptest::prop_assert!(!args.is_empty()),
                        Ok(Some(_)) => {}
                        Ok(None) | Err(LineTooLong) => break,
                    }
                }
            }
        }

        /// A storage command split anywhere parses as it does whole.
        #[test]
        fn a_request_split_anywhere_parses_the_same(data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40), cut in 0usize..80) {
            let mut bytes = format!("set key 7 0 {}\r\n", data.len()).into_bytes();
            bytes.extend_from_slice(&data);
            bytes.extend_from_slice(b"\r\n");
            let cut = cut.min(bytes.len());
            let mut parser = Parser::default();
            let mut input = BytesMut::from(&bytes[..cut]);
            let first = parser.parse(&mut input, &LIMITS).unwrap();
            input.extend_from_slice(&bytes[cut..]);
            let request = match first {
                Some(request) => request,
                None => parser.parse(&mut input, &LIMITS).unwrap().expect("complete"),
            };
            let expected = command(&[b"set", b"key", b"7", b"0", data.len().to_string().as_bytes(), &data], false);
            proptest::prop_assert_eq!(request, expected);
        }
    }
}
