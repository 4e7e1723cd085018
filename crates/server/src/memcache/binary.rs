//! memcached's binary protocol on the wire: 24-byte request and response
//! headers, the parser that frames requests across reads, and the response
//! writer. memcached 1.6 deprecates the protocol but still serves it on
//! the same port, chosen by a connection's first byte (0x80); clients such
//! as spymemcached's binary factory, pylibmc with `binary=True`, Enyim and
//! libmemcached's `--binary` tools speak it. The commands are in
//! `binary_commands.rs`.
//!
//! A request's header, in network byte order: magic (0x80), opcode, key
//! length (u16), extras length (u8), data type, vbucket (u16), body length
//! (u32: extras, key and value), opaque (u32, echoed), CAS (u64). A
//! response has magic 0x81 and a status where the vbucket was.
//!
//! What memcached 1.6.18 refuses here, it is refused with its status:
//! lengths that do not add up ("Unknown command", then the connection
//! closes), a key over 250 bytes or a command whose extras, key or value
//! do not fit its shape ("Invalid arguments", closing), an unknown opcode
//! ("Unknown command", its body skipped), a value too large for an item
//! ("Too large.", the value skipped; a `set` also drops the old item). A
//! byte other than 0x80 where a header starts closes the connection.
//! Unlike memcached, an unknown command's body is skipped exactly (memcached
//! skips its body length again past the key and extras).

use bytes::{Buf, BufMut, Bytes, BytesMut};

use super::request::{Limits, ITEM_OVERHEAD, MAX_KEY_BYTES};
use crate::resp::Out;

/// A request header's first byte.
pub const REQUEST: u8 = 0x80;
const RESPONSE: u8 = 0x81;
const HEADER: usize = 24;

/// The opcodes memcached 1.6.18 serves; the quiet ones (`...Q`) answer
/// only failures (and a get's hit).
pub mod op {
    pub const GET: u8 = 0x00;
    pub const SET: u8 = 0x01;
    pub const ADD: u8 = 0x02;
    pub const REPLACE: u8 = 0x03;
    pub const DELETE: u8 = 0x04;
    pub const INCREMENT: u8 = 0x05;
    pub const DECREMENT: u8 = 0x06;
    pub const QUIT: u8 = 0x07;
    pub const FLUSH: u8 = 0x08;
    pub const GETQ: u8 = 0x09;
    pub const NOOP: u8 = 0x0a;
    pub const VERSION: u8 = 0x0b;
    pub const GETK: u8 = 0x0c;
    pub const GETKQ: u8 = 0x0d;
    pub const APPEND: u8 = 0x0e;
    pub const PREPEND: u8 = 0x0f;
    pub const STAT: u8 = 0x10;
    pub const SETQ: u8 = 0x11;
    pub const ADDQ: u8 = 0x12;
    pub const REPLACEQ: u8 = 0x13;
    pub const DELETEQ: u8 = 0x14;
    pub const INCREMENTQ: u8 = 0x15;
    pub const DECREMENTQ: u8 = 0x16;
    pub const QUITQ: u8 = 0x17;
    pub const FLUSHQ: u8 = 0x18;
    pub const APPENDQ: u8 = 0x19;
    pub const PREPENDQ: u8 = 0x1a;
    pub const TOUCH: u8 = 0x1c;
    pub const GAT: u8 = 0x1d;
    pub const GATQ: u8 = 0x1e;
    pub const SASL_LIST_MECHS: u8 = 0x20;
    pub const SASL_AUTH: u8 = 0x21;
    pub const SASL_STEP: u8 = 0x22;
    pub const GATK: u8 = 0x23;
    pub const GATKQ: u8 = 0x24;

    /// The command a quiet opcode is the silent form of, and whether it is
    /// quiet.
    pub fn base(opcode: u8) -> (u8, bool) {
        match opcode {
            GETQ => (GET, true),
            GETKQ => (GETK, true),
            SETQ => (SET, true),
            ADDQ => (ADD, true),
            REPLACEQ => (REPLACE, true),
            DELETEQ => (DELETE, true),
            INCREMENTQ => (INCREMENT, true),
            DECREMENTQ => (DECREMENT, true),
            QUITQ => (QUIT, true),
            FLUSHQ => (FLUSH, true),
            APPENDQ => (APPEND, true),
            PREPENDQ => (PREPEND, true),
            GATQ => (GAT, true),
            GATKQ => (GATK, true),
            other => (other, false),
        }
    }
}

/// A response's status, as memcached's `protocol_binary.h` numbers them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Status {
    Ok = 0x00,
    NotFound = 0x01,
    Exists = 0x02,
    TooLarge = 0x03,
    Invalid = 0x04,
    NotStored = 0x05,
    BadDelta = 0x06,
    AuthError = 0x20,
    Unknown = 0x81,
    NoMemory = 0x82,
    Internal = 0x84,
}

impl Status {
    /// The body memcached sends with an error of this status.
    pub fn text(self) -> &'static str {
        match self {
            Status::Ok => "",
            Status::NotFound => "Not found",
            Status::Exists => "Data exists for key.",
            Status::TooLarge => "Too large.",
            Status::Invalid => "Invalid arguments",
            Status::NotStored => "Not stored.",
            Status::BadDelta => "Non-numeric server-side value for incr or decr",
            Status::AuthError => "Auth failure.",
            Status::Unknown => "Unknown command",
            Status::NoMemory => "Out of memory",
            Status::Internal => "Internal error",
        }
    }
}

/// What a response echoes of its request, and how the command is to run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Tag {
    /// The opcode as sent (a quiet one answers as itself).
    pub opcode: u8,
    /// The command it is (`op::base`).
    pub command: u8,
    /// Only failures are answered (and a get's hit).
    pub quiet: bool,
    /// Echoed unchanged.
    pub opaque: u32,
    /// The request's CAS (0: none).
    pub cas: u64,
}

/// One framed request.
#[derive(Debug, PartialEq, Eq)]
pub enum Frame {
    /// A request to run: its extras, key and value (the body past them).
    Request { tag: Tag, extras: Bytes, key: Bytes, value: Bytes },
    /// Refused with `status`, the rest of its body skipped; `drop`: the
    /// key whose item goes too (an oversized `set`); `close`: the
    /// connection closes once the answer is sent.
    Refused { tag: Tag, status: Status, drop: Option<Bytes>, close: bool },
    /// Not a request header: the connection closes without a word.
    Close,
}

/// Whether a command's extras, key and body lengths fit it, as memcached's
/// dispatch checks them; None for an opcode it does not serve.
fn shape_ok(command: u8, extras: usize, key: usize, body: usize) -> Option<bool> {
    let empty = extras == 0 && key == 0 && body == 0;
    Some(match command {
        op::VERSION | op::NOOP | op::QUIT | op::SASL_LIST_MECHS => empty,
        op::FLUSH => key == 0 && body == extras && (extras == 0 || extras == 4),
        op::SET | op::ADD | op::REPLACE => extras == 8 && key != 0 && body >= key + 8,
        op::GET | op::GETK | op::DELETE => extras == 0 && key > 0 && body == key,
        op::INCREMENT | op::DECREMENT => extras == 20 && key > 0 && body == key + extras,
        op::APPEND | op::PREPEND => extras == 0 && key > 0,
        // memcached reads what follows these as the next request; here a
        // body past the key is refused instead.
        op::STAT => extras == 0 && body == key,
        op::TOUCH | op::GAT | op::GATK => extras == 4 && key != 0 && body == key + extras,
        op::SASL_AUTH | op::SASL_STEP => extras == 0 && key != 0,
        _ => return None,
    })
}

/// Whether the command carries a value after its key.
fn has_value(command: u8) -> bool {
    matches!(command, op::SET | op::ADD | op::REPLACE | op::APPEND | op::PREPEND | op::SASL_AUTH | op::SASL_STEP)
}

/// Reads requests from a connection's input, across reads.
#[derive(Default)]
pub struct Parser {
    /// Bytes of a refused body still to skip.
    skip: usize,
}

impl Parser {
    /// The next complete request in `input` (consumed), or None until more
    /// comes. While `locked` (a password is set and the connection has not
    /// authenticated), all but the SASL commands and VERSION are refused.
    pub fn parse(&mut self, input: &mut BytesMut, limits: &Limits, locked: bool) -> Option<Frame> {
        if self.skip > 0 {
            let n = self.skip.min(input.len());
            input.advance(n);
            self.skip -= n;
            if self.skip > 0 {
                return None;
            }
        }
        if input.len() < HEADER {
            return None;
        }
        if input[0] != REQUEST {
            return Some(Frame::Close);
        }
        let key_len = u16::from_be_bytes([input[2], input[3]]) as usize;
        let extras_len = input[4] as usize;
        let body = u32::from_be_bytes([input[8], input[9], input[10], input[11]]) as usize;
        let head = HEADER + extras_len + key_len;
        if input.len() < head {
            input.reserve(head - input.len());
            return None;
        }
        let opcode = input[1];
        let (command, quiet) = op::base(opcode);
        let opaque = u32::from_be_bytes([input[12], input[13], input[14], input[15]]);
        let cas = u64::from_be_bytes(input[16..24].try_into().expect("8 bytes"));
        let tag = Tag { opcode, command, quiet, opaque, cas };
        let refuse = |status, close| Some(Frame::Refused { tag, status, drop: None, close });
        if key_len + extras_len > body {
            return refuse(Status::Unknown, true);
        }
        let open = matches!(command, op::SASL_LIST_MECHS | op::SASL_AUTH | op::SASL_STEP | op::VERSION);
        if locked && !open {
            return refuse(Status::AuthError, true);
        }
        if key_len > MAX_KEY_BYTES {
            return refuse(Status::Invalid, true);
        }
        let value_len = body - key_len - extras_len;
        match shape_ok(command, extras_len, key_len, body) {
            None => {
                self.skip_body(input, head, value_len);
                return refuse(Status::Unknown, false);
            }
            Some(false) => return refuse(Status::Invalid, true),
            Some(true) => {}
        }
        if has_value(command) && value_len + key_len + ITEM_OVERHEAD > limits.max_item_bytes {
            let at = HEADER + extras_len;
            let drop = (command == op::SET).then(|| Bytes::copy_from_slice(&input[at..at + key_len]));
            self.skip_body(input, head, value_len);
            return Some(Frame::Refused { tag, status: Status::TooLarge, drop, close: false });
        }
        let end = HEADER + body;
        if input.len() < end {
            // Room for the rest, so it arrives in as few reads as it can.
            input.reserve(end - input.len());
            return None;
        }
        let frame = input.split_to(end).freeze();
        let key_at = HEADER + extras_len;
        Some(Frame::Request {
            tag,
            extras: frame.slice(HEADER..key_at),
            key: frame.slice(key_at..key_at + key_len),
            value: frame.slice(key_at + key_len..),
        })
    }

    /// Consumes a request's header, extras and key, and skips its
    /// remaining `rest` bytes as they come.
    fn skip_body(&mut self, input: &mut BytesMut, head: usize, rest: usize) {
        input.advance(head);
        let n = rest.min(input.len());
        input.advance(n);
        self.skip = rest - n;
    }
}

/// Appends a response to the request `tag`.
pub fn put_response(buf: &mut BytesMut, tag: Tag, status: Status, cas: u64, parts: [&[u8]; 3]) {
    let [extras, key, value] = parts;
    let body = extras.len() + key.len() + value.len();
    buf.reserve(HEADER + body);
    buf.put_u8(RESPONSE);
    buf.put_u8(tag.opcode);
    buf.put_u16(key.len() as u16);
    buf.put_u8(extras.len() as u8);
    buf.put_u8(0);
    buf.put_u16(status as u16);
    buf.put_u32(body as u32);
    buf.put_u32(tag.opaque);
    buf.put_u64(cas);
    buf.put_slice(extras);
    buf.put_slice(key);
    buf.put_slice(value);
}

/// An error response with memcached's text for `status`.
pub fn put_error(buf: &mut BytesMut, tag: Tag, status: Status) {
    put_response(buf, tag, status, 0, [b"", b"", status.text().as_bytes()]);
}

/// The response to the running command (`Out::binary`).
pub fn respond(out: &mut Out, status: Status, cas: u64, parts: [&[u8]; 3]) {
    let tag = out.binary.expect("a binary request is running");
    put_response(&mut out.buf, tag, status, cas, parts);
}

/// A success: sent unless the command is quiet.
pub fn success(out: &mut Out, cas: u64, parts: [&[u8]; 3]) {
    if !out.binary.expect("a binary request is running").quiet {
        respond(out, Status::Ok, cas, parts);
    }
}

/// A failure: sent even for a quiet command.
pub fn failure(out: &mut Out, status: Status) {
    let tag = out.binary.expect("a binary request is running");
    put_error(&mut out.buf, tag, status);
}

/// A command's error text (`CmdError`, the executor's refusals) as a
/// response: out of memory as memcached's, a client's mistake as invalid
/// arguments, anything else (the engine's failures) as an internal error;
/// the text is the body.
pub fn put_error_text(buf: &mut BytesMut, tag: Tag, text: &str) {
    if text.starts_with("SERVER_ERROR out of memory") {
        return put_error(buf, tag, Status::NoMemory);
    }
    let (status, text) = match text.strip_prefix("CLIENT_ERROR ") {
        Some(rest) => (Status::Invalid, rest),
        None => (Status::Internal, text.strip_prefix("SERVER_ERROR ").unwrap_or(text)),
    };
    put_response(buf, tag, status, 0, [b"", b"", text.as_bytes()]);
}

#[cfg(test)]
mod tests {
    use super::*;

    const LIMITS: Limits = Limits { max_item_bytes: 1 << 20 };

    /// A request's bytes.
    pub fn request(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], opaque: u32, cas: u64) -> Vec<u8> {
        let mut out = vec![REQUEST, opcode];
        out.extend((key.len() as u16).to_be_bytes());
        out.push(extras.len() as u8);
        out.extend([0, 0, 0]);
        out.extend(((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
        out.extend(opaque.to_be_bytes());
        out.extend(cas.to_be_bytes());
        out.extend(extras);
        out.extend(key);
        out.extend(value);
        out
    }

    fn parse_all(bytes: &[u8], limits: &Limits) -> Vec<Frame> {
        let mut parser = Parser::default();
        let mut input = BytesMut::from(bytes);
        let mut frames = Vec::new();
        // Up to the end of the input or a frame that closes the connection.
        while let Some(frame) = parser.parse(&mut input, limits, false) {
            let closes = matches!(frame, Frame::Close | Frame::Refused { close: true, .. });
            frames.push(frame);
            if closes {
                break;
            }
        }
        frames
    }

    #[test]
    fn requests_are_framed_across_reads() {
        let bytes = [
            request(op::SETQ, &[0, 0, 0, 7, 0, 0, 0, 0], b"key", b"value", 9, 5),
            request(op::NOOP, b"", b"", b"", 1, 0),
        ]
        .concat();
        let mut parser = Parser::default();
        let mut input = BytesMut::new();
        let mut frames = Vec::new();
        for &byte in &bytes {
            input.put_u8(byte);
            frames.extend(parser.parse(&mut input, &LIMITS, false));
        }
        assert_eq!(frames.len(), 2);
        let Frame::Request { tag, extras, key, value } = &frames[0] else { panic!("{:?}", frames[0]) };
        assert_eq!((tag.command, tag.quiet, tag.opaque, tag.cas), (op::SET, true, 9, 5));
        assert_eq!((&extras[..], &key[..], &value[..]), (&[0, 0, 0, 7, 0, 0, 0, 0][..], &b"key"[..], &b"value"[..]));
        assert!(matches!(&frames[1], Frame::Request { tag, .. } if tag.command == op::NOOP));
        assert!(input.is_empty());
    }

    #[test]
    fn malformed_requests_get_memcacheds_statuses() {
        let refused = |bytes: Vec<u8>| match &parse_all(&bytes, &LIMITS)[..] {
            [Frame::Refused { status, close, .. }, ..] => (*status, *close),
            other => panic!("{other:?}"),
        };
        // A get with extras, a set without them, a noop with a body.
        assert_eq!(refused(request(op::GET, &[0; 4], b"k", b"", 0, 0)), (Status::Invalid, true));
        assert_eq!(refused(request(op::SET, b"", b"k", b"v", 0, 0)), (Status::Invalid, true));
        assert_eq!(refused(request(op::NOOP, b"", b"", b"x", 0, 0)), (Status::Invalid, true));
        assert_eq!(refused(request(op::GET, b"", &[b'k'; 251], b"", 0, 0)), (Status::Invalid, true));
        // A key longer than the body.
        let mut bad = request(op::GET, b"", b"key", b"", 0, 0);
        bad[11] = 1;
        assert_eq!(refused(bad), (Status::Unknown, true));
        // An unknown opcode's body is skipped; the next request is read.
        let bytes = [request(0x42, b"ex", b"key", b"value", 0, 0), request(op::NOOP, b"", b"", b"", 0, 0)].concat();
        let frames = parse_all(&bytes, &LIMITS);
        assert!(matches!(frames[0], Frame::Refused { status: Status::Unknown, close: false, .. }));
        assert!(matches!(&frames[1], Frame::Request { tag, .. } if tag.command == op::NOOP));
        assert_eq!(parse_all(b"get k\r\n________________________", &LIMITS), vec![Frame::Close]);
    }

    #[test]
    fn an_oversized_value_is_skipped_and_a_set_drops_the_old_item() {
        let limits = Limits { max_item_bytes: 100 };
        let big = vec![b'v'; 100];
        let bytes = [
            request(op::SET, &[0; 8], b"key", &big, 0, 0),
            request(op::APPEND, b"", b"key", &big, 0, 0),
            request(op::GET, b"", b"key", b"", 0, 0),
        ]
        .concat();
        let frames = parse_all(&bytes, &limits);
        assert!(
            matches!(&frames[0], Frame::Refused { status: Status::TooLarge, drop: Some(key), .. } if &key[..] == b"key")
        );
        assert!(matches!(&frames[1], Frame::Refused { status: Status::TooLarge, drop: None, .. }));
        assert!(matches!(&frames[2], Frame::Request { tag, .. } if tag.command == op::GET));
    }

    #[test]
    fn a_locked_connection_may_only_authenticate() {
        let mut parser = Parser::default();
        let mut input = BytesMut::from(&request(op::GET, b"", b"k", b"", 0, 0)[..]);
        assert!(matches!(
            parser.parse(&mut input, &LIMITS, true),
            Some(Frame::Refused { status: Status::AuthError, close: true, .. })
        ));
        let mut input = BytesMut::from(&request(op::SASL_AUTH, b"", b"PLAIN", b"\0u\0p", 0, 0)[..]);
        assert!(matches!(parser.parse(&mut input, &LIMITS, true), Some(Frame::Request { .. })));
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(500))]

        /// Any bytes, in any chunks: a frame, a wait, or a close; input is
        /// consumed by every request, and nothing panics.
        #[test]
        fn arbitrary_input_never_panics(
            chunks in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..80), 0..8),
            locked in proptest::prelude::any::<bool>(),
        ) {
            let limits = Limits { max_item_bytes: 200 };
            let mut parser = Parser::default();
            let mut input = BytesMut::new();
            'chunks: for chunk in chunks {
                input.extend_from_slice(&chunk);
                loop {
                    let before = input.len();
                    match parser.parse(&mut input, &limits, locked) {
                        None => break,
                        Some(Frame::Close | Frame::Refused { close: true, .. }) => break 'chunks,
                        Some(_) => proptest::prop_assert!(input.len() < before),
                    }
                }
            }
        }

        /// Requests of random shapes split at any byte frame as they do whole.
        #[test]
        fn requests_split_anywhere_frame_the_same(
            opcodes in proptest::collection::vec(0u8..0x26, 1..4),
            key in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..8),
            extras_len in proptest::sample::select(vec![0usize, 4, 8, 20]),
            value in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..40),
            cut in 0usize..400,
        ) {
            let limits = Limits { max_item_bytes: 100 };
            let extras = vec![7u8; extras_len];
            let bytes: Vec<u8> =
                opcodes.iter().flat_map(|&opcode| request(opcode, &extras, &key, &value, 3, 0)).collect();
            let whole = parse_all(&bytes, &limits);
            let cut = cut.min(bytes.len());
            let mut parser = Parser::default();
            let mut input = BytesMut::new();
            let mut split = Vec::new();
            'pieces: for piece in [&bytes[..cut], &bytes[cut..]] {
                input.extend_from_slice(piece);
                while let Some(frame) = parser.parse(&mut input, &limits, false) {
                    let closes = matches!(frame, Frame::Close | Frame::Refused { close: true, .. });
                    split.push(frame);
                    if closes {
                        break 'pieces;
                    }
                }
            }
            proptest::prop_assert_eq!(split, whole);
        }
    }

    #[test]
    fn responses_echo_the_opcode_and_opaque() {
        let mut buf = BytesMut::new();
        let tag = Tag { opcode: op::GETQ, command: op::GET, quiet: true, opaque: 0xdead_beef, cas: 0 };
        put_response(&mut buf, tag, Status::Ok, 7, [&[0, 0, 0, 1], b"", b"hi"]);
        assert_eq!(&buf[..2], &[RESPONSE, op::GETQ]);
        assert_eq!(&buf[4..8], &[4, 0, 0, 0], "extras, data type, status");
        assert_eq!(&buf[8..12], &6u32.to_be_bytes());
        assert_eq!(&buf[12..16], &0xdead_beefu32.to_be_bytes());
        assert_eq!(&buf[16..24], &7u64.to_be_bytes());
        assert_eq!(&buf[24..], &[0, 0, 0, 1, b'h', b'i']);
        buf.clear();
        put_error_text(&mut buf, tag, "SERVER_ERROR out of memory storing object");
        assert_eq!(&buf[6..8], &(Status::NoMemory as u16).to_be_bytes());
        assert_eq!(&buf[24..], b"Out of memory");
    }
}
