//! memcached's binary protocol on the memcached port: the same request
//! scripts go to ScaledKV and to a real `memcached` (Debian's 1.6.18,
//! started here on a free loopback port) and the responses must match byte
//! for byte, CAS values aside (only whether one is set); libmemcached's
//! `memccapable -b` conformance suite passes; CAS, SASL authentication,
//! limits and bad input behave as a memcached user expects; and writes
//! acknowledged over the binary protocol survive SIGKILL. Tests that need
//! `memcached` or `memccapable` skip with a notice when absent; `.ci/run`
//! installs them.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use common::{start_with_memcached, MemcachedServer};

const GET: u8 = 0x00;
const SET: u8 = 0x01;
const ADD: u8 = 0x02;
const REPLACE: u8 = 0x03;
const DELETE: u8 = 0x04;
const INCREMENT: u8 = 0x05;
const DECREMENT: u8 = 0x06;
const QUIT: u8 = 0x07;
const FLUSH: u8 = 0x08;
const GETQ: u8 = 0x09;
const NOOP: u8 = 0x0a;
const VERSION: u8 = 0x0b;
const GETK: u8 = 0x0c;
const GETKQ: u8 = 0x0d;
const APPEND: u8 = 0x0e;
const PREPEND: u8 = 0x0f;
const STAT: u8 = 0x10;
const SETQ: u8 = 0x11;
const ADDQ: u8 = 0x12;
const REPLACEQ: u8 = 0x13;
const DELETEQ: u8 = 0x14;
const INCREMENTQ: u8 = 0x15;
const DECREMENTQ: u8 = 0x16;
const QUITQ: u8 = 0x17;
const FLUSHQ: u8 = 0x18;
const APPENDQ: u8 = 0x19;
const TOUCH: u8 = 0x1c;
const GAT: u8 = 0x1d;
const GATQ: u8 = 0x1e;
const SASL_LIST_MECHS: u8 = 0x20;
const SASL_AUTH: u8 = 0x21;
const GATK: u8 = 0x23;
const GATKQ: u8 = 0x24;

/// A request with CAS `cas` (opaque 0; scripts number them).
fn packet(opcode: u8, extras: &[u8], key: &[u8], value: &[u8], cas: u64) -> Vec<u8> {
    let mut out = vec![0x80, opcode];
    out.extend((key.len() as u16).to_be_bytes());
    out.push(extras.len() as u8);
    out.extend([0, 0, 0]);
    out.extend(((extras.len() + key.len() + value.len()) as u32).to_be_bytes());
    out.extend([0; 4]);
    out.extend(cas.to_be_bytes());
    out.extend(extras);
    out.extend(key);
    out.extend(value);
    out
}

fn req(opcode: u8, extras: &[u8], key: &[u8], value: &[u8]) -> Vec<u8> {
    packet(opcode, extras, key, value, 0)
}

/// A storage request's extras: flags, expiration.
fn store(flags: u32, expiration: u32) -> Vec<u8> {
    [flags.to_be_bytes(), expiration.to_be_bytes()].concat()
}

/// An INCREMENT/DECREMENT's extras: delta, initial value, expiration.
fn delta(delta: u64, initial: u64, expiration: u32) -> Vec<u8> {
    [&delta.to_be_bytes()[..], &initial.to_be_bytes(), &expiration.to_be_bytes()].concat()
}

fn exp(seconds: u32) -> Vec<u8> {
    seconds.to_be_bytes().to_vec()
}

/// One response: its header and body.
#[derive(Debug, PartialEq, Eq)]
struct Response {
    header: [u8; 24],
    body: Vec<u8>,
}

impl Response {
    fn status(&self) -> u16 {
        u16::from_be_bytes([self.header[6], self.header[7]])
    }
    fn cas(&self) -> u64 {
        u64::from_be_bytes(self.header[16..24].try_into().unwrap())
    }
    fn opcode(&self) -> u8 {
        self.header[1]
    }
    fn opaque(&self) -> u32 {
        u32::from_be_bytes(self.header[12..16].try_into().unwrap())
    }
}

/// The next response, or None once the connection is closed.
fn read_response(stream: &mut TcpStream) -> Option<Response> {
    let mut header = [0u8; 24];
    stream.read_exact(&mut header).ok()?;
    let mut body = vec![0; u32::from_be_bytes(header[8..12].try_into().unwrap()) as usize];
    stream.read_exact(&mut body).ok()?;
    Some(Response { header, body })
}

fn connect(port: u16) -> TcpStream {
    let stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    stream
}

/// Sends `requests` and reads one response each (a quiet request's
/// success has none: so none of them here).
fn call(stream: &mut TcpStream, requests: &[Vec<u8>]) -> Vec<Response> {
    stream.write_all(&requests.concat()).unwrap();
    requests.iter().map(|_| read_response(stream).expect("a response")).collect()
}

const END: u32 = 0xffff_ffff;

/// Runs `script` on a fresh connection after a FLUSH: the requests are
/// numbered (opaque 1, 2 ...), sent at once with a NOOP (opaque `END`)
/// after them, and the responses read up to that NOOP's, or to the close.
/// A CAS is shown only as set (1) or not (0), as each server numbers its
/// own; the close as a response of 24 zero bytes.
fn run_script(port: u16, script: &[Vec<u8>]) -> Vec<Response> {
    let mut stream = connect(port);
    let flushed = call(&mut stream, &[req(FLUSH, b"", b"", b"")]);
    assert_eq!(flushed[0].status(), 0);
    let mut bytes = Vec::new();
    for (n, request) in script.iter().enumerate() {
        let mut request = request.clone();
        if request.len() >= 24 && request[0] == 0x80 {
            request[12..16].copy_from_slice(&(n as u32 + 1).to_be_bytes());
        }
        bytes.extend(request);
    }
    let mut end = req(NOOP, b"", b"", b"");
    end[12..16].copy_from_slice(&END.to_be_bytes());
    bytes.extend(end);
    stream.write_all(&bytes).unwrap();
    let mut responses = Vec::new();
    loop {
        let Some(mut response) = read_response(&mut stream) else {
            responses.push(Response { header: [0; 24], body: Vec::new() });
            return responses;
        };
        if response.cas() != 0 {
            response.header[16..24].copy_from_slice(&1u64.to_be_bytes());
        }
        let last = response.opcode() == NOOP && response.opaque() == END;
        responses.push(response);
        if last {
            return responses;
        }
    }
}

/// The scripts both servers run. Expiry is only ever in the past or far
/// ahead, so timing cannot tell the two servers apart. Not here: an
/// unknown opcode with a key or extras, after which memcached skips the
/// body's length again and reads the next request from its middle (ScaledKV
/// skips the body exactly; `unknown_commands_skip_their_body_exactly`).
fn scripts() -> Vec<Vec<Vec<u8>>> {
    let big = vec![b'v'; 1 << 20];
    vec![
        // STAT groups answered without counters; SASL without a password.
        // First, while memcached holds no items: its `stats items` lists
        // items flushed but not yet reclaimed, as its crawler's timing has it.
        vec![
            req(STAT, b"", b"nonsense", b""),
            req(STAT, b"", b"detail on", b""),
            req(STAT, b"", b"detail dump", b""),
            req(STAT, b"", b"detail x", b""),
            req(STAT, b"", b"items", b""),
            req(STAT, b"", b"reset", b""),
            req(SASL_LIST_MECHS, b"", b"", b""),
            req(SASL_AUTH, b"", b"PLAIN", b"\0u\0p"),
        ],
        // Misses, quiet and not, with and without the key.
        vec![
            req(GET, b"", b"a", b""),
            req(GETK, b"", b"a", b""),
            req(GETQ, b"", b"a", b""),
            req(GETKQ, b"", b"a", b""),
        ],
        // Hits of every get, quiet ones answered too.
        vec![
            req(SET, &store(5, 0), b"a", b"hello"),
            req(GET, b"", b"a", b""),
            req(GETK, b"", b"a", b""),
            req(GETQ, b"", b"a", b""),
            req(GETKQ, b"", b"a", b""),
            req(SETQ, &store(0xffff_ffff, 0), b"b", b""),
            req(GETK, b"", b"b", b""),
        ],
        // ADD, REPLACE and their quiet forms.
        vec![
            req(ADD, &store(0, 0), b"a", b"x"),
            req(ADD, &store(0, 0), b"a", b"y"),
            req(ADDQ, &store(0, 0), b"a", b"z"),
            req(ADDQ, &store(0, 0), b"b", b"z"),
            req(REPLACE, &store(0, 0), b"c", b"x"),
            req(REPLACEQ, &store(0, 0), b"c", b"x"),
            req(REPLACE, &store(9, 0), b"a", b"r"),
            req(GET, b"", b"a", b""),
            req(GET, b"", b"b", b""),
        ],
        // A CAS that is not the item's, or for no item, whatever the opcode.
        vec![
            packet(SET, &store(0, 0), b"a", b"x", 12345),
            req(SET, &store(0, 0), b"a", b"x"),
            packet(SET, &store(0, 0), b"a", b"y", 12345),
            packet(ADD, &store(0, 0), b"a", b"y", 1),
            packet(REPLACE, &store(0, 0), b"zz", b"y", 1),
            packet(SETQ, &store(0, 0), b"a", b"y", 3),
            req(GET, b"", b"a", b""),
        ],
        // APPEND, PREPEND.
        vec![
            req(APPEND, b"", b"a", b"x"),
            req(APPENDQ, b"", b"a", b"x"),
            req(SET, &store(3, 0), b"a", b"mid"),
            req(APPEND, b"", b"a", b">>"),
            req(PREPEND, b"", b"a", b"<<"),
            packet(APPEND, b"", b"a", b"x", 5),
            req(GET, b"", b"a", b""),
        ],
        // DELETE.
        vec![
            req(DELETE, b"", b"a", b""),
            req(DELETEQ, b"", b"a", b""),
            req(SET, &store(0, 0), b"a", b"x"),
            packet(DELETE, b"", b"a", b"", 5),
            req(DELETE, b"", b"a", b""),
            req(DELETEQ, b"", b"a", b""),
        ],
        // INCREMENT, DECREMENT: create or not, floors, padding, quiet.
        vec![
            req(INCREMENT, &delta(1, 10, 0xffff_ffff), b"n", b""),
            req(INCREMENT, &delta(1, 10, 0), b"n", b""),
            req(INCREMENT, &delta(5, 10, 0), b"n", b""),
            req(DECREMENT, &delta(100, 0, 0), b"n", b""),
            req(INCREMENTQ, &delta(7, 0, 0), b"n", b""),
            req(GET, b"", b"n", b""),
            req(DECREMENT, &delta(1, 3, 0xffff_ffff), b"m", b""),
            req(DECREMENTQ, &delta(1, 3, 0), b"m", b""),
            req(GET, b"", b"m", b""),
        ],
        vec![
            req(SET, &store(0, 0), b"n", b"18446744073709551615"),
            req(INCREMENT, &delta(2, 0, 0), b"n", b""),
            req(GET, b"", b"n", b""),
            req(SET, &store(0, 0), b"n", b"abc"),
            req(INCREMENT, &delta(1, 0, 0), b"n", b""),
            packet(INCREMENT, &delta(1, 0, 0), b"n", b"", 3),
            req(SET, &store(0, 0), b"n", b"100"),
            req(DECREMENT, &delta(95, 0, 0), b"n", b""),
            req(GET, b"", b"n", b""),
        ],
        // TOUCH and the GATs, hits and misses.
        vec![
            req(TOUCH, &exp(100), b"a", b""),
            req(SET, &store(7, 0), b"a", b"v"),
            req(TOUCH, &exp(100), b"a", b""),
            req(GAT, &exp(100), b"a", b""),
            req(GATK, &exp(100), b"a", b""),
            req(GATQ, &exp(100), b"a", b""),
            req(GATQ, &exp(100), b"b", b""),
            req(GATKQ, &exp(100), b"b", b""),
            req(GAT, &exp(100), b"b", b""),
            req(GATK, &exp(100), b"b", b""),
        ],
        // Expiry in the past (a Unix time in 1970) and far ahead.
        vec![
            req(SET, &store(1, 1000), b"a", b"x"),
            req(GET, b"", b"a", b""),
            req(SET, &store(1, 0xffff_fff0), b"a", b"x"),
            req(GET, b"", b"a", b""),
            req(TOUCH, &exp(1000), b"a", b""),
            req(GET, b"", b"a", b""),
        ],
        // FLUSH now, delayed, quiet.
        vec![
            req(SET, &store(0, 0), b"a", b"x"),
            req(FLUSH, &exp(100), b"", b""),
            req(GET, b"", b"a", b""),
            req(FLUSHQ, b"", b"", b""),
            req(GET, b"", b"a", b""),
        ],
        vec![req(VERSION, b"", b"", b""), req(NOOP, b"", b"", b"")],
        // Unknown opcodes (VERBOSITY is not served by memcached 1.6 either).
        vec![req(0x30, b"", b"", b""), req(0x1b, b"", b"", b""), req(0x45, b"", b"", b"body")],
        // Empty values, the longest key.
        vec![
            req(SET, &store(1, 0), b"a", b""),
            req(GET, b"", b"a", b""),
            req(APPEND, b"", b"a", b""),
            req(SET, &store(0, 0), &[b'k'; 250], b"v"),
            req(GETK, b"", &[b'k'; 250], b""),
        ],
        // Quiet failures are answered.
        vec![
            req(ADDQ, &store(0, 0), b"a", b"x"),
            req(ADDQ, &store(0, 0), b"a", b"x"),
            req(REPLACEQ, &store(0, 0), b"b", b"x"),
            req(APPENDQ, b"", b"b", b"x"),
            packet(SETQ, &store(0, 0), b"a", b"x", 3),
        ],
        // Values at and over the limit: an oversized SET drops the old item.
        vec![
            req(SET, &store(0, 0), b"a", &big),
            req(SET, &store(0, 0), b"a", b"x"),
            req(SET, &store(0, 0), b"a", &big),
            req(GET, b"", b"a", b""),
            req(SETQ, &store(0, 0), b"a", &big),
            req(SET, &store(0, 0), b"b", &big[..1000 * 1024]),
            req(APPEND, b"", b"b", &big[..40 * 1024]),
            req(APPEND, b"", b"b", &big),
        ],
        // What closes the connection: QUIT, QUITQ, bad shapes, a key over
        // 250 bytes, a key longer than the body, a bad magic byte.
        vec![req(SET, &store(0, 0), b"a", b"b"), req(QUIT, b"", b"", b"")],
        vec![req(QUITQ, b"", b"", b"")],
        vec![req(GET, &exp(0), b"a", b"")],
        vec![req(NOOP, b"", b"", b"x")],
        vec![req(SET, b"", b"a", b"x")],
        vec![req(INCREMENT, &exp(1), b"a", b"")],
        vec![req(GET, b"", &[b'k'; 251], b"")],
        vec![{
            let mut bad = req(GET, b"", b"abcde", b"");
            bad[8..12].copy_from_slice(&3u32.to_be_bytes());
            bad
        }],
        vec![[&[0x81u8][..], &[0; 23]].concat()],
        // A binary connection stays binary: text is not a header.
        vec![req(NOOP, b"", b"", b""), b"get a\r\n".to_vec()],
    ]
}

#[test]
fn binary_responses_match_memcached() {
    let Some(memcached) = MemcachedServer::start() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_with_memcached(&dir.path().join("db"), &[]);
    for script in scripts() {
        let (expected, got) = (run_script(memcached.port, &script), run_script(port, &script));
        assert_eq!(got, expected, "script {:?}", script.iter().map(|r| r.get(1)).collect::<Vec<_>>());
    }
}

/// libmemcached's conformance suite for memcached servers, binary protocol.
#[test]
fn memccapable_binary_suite_passes() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_with_memcached(&dir.path().join("db"), &[]);
    common::memccapable_passes(port, "-b", 27);
}

/// The CAS a binary response carries is the item's, shared with the text
/// protocol's `gets`: a request with it succeeds once, and not after any
/// change.
#[test]
fn a_binary_cas_succeeds_only_on_an_unchanged_item() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_with_memcached(&dir.path().join("db"), &[]);
    let mut mc = connect(port);
    let set = &call(&mut mc, &[req(SET, &store(3, 0), b"a", b"one")])[0];
    assert_eq!((set.status(), set.opaque()), (0, 0));
    let got = &call(&mut mc, &[req(GET, b"", b"a", b"")])[0];
    assert_eq!((got.cas(), &got.body[..]), (set.cas(), &[0, 0, 0, 3, b'o', b'n', b'e'][..]));
    let swapped = &call(&mut mc, &[packet(SET, &store(4, 0), b"a", b"two", set.cas())])[0];
    assert_eq!(swapped.status(), 0);
    assert_ne!(swapped.cas(), set.cas());
    let stale = &call(&mut mc, &[packet(REPLACE, &store(4, 0), b"a", b"three", set.cas())])[0];
    assert_eq!((stale.status(), &stale.body[..]), (2, &b"Data exists for key."[..]));
    // A text connection sees the same CAS.
    let mut text = connect(port);
    text.write_all(b"gets a\r\n").unwrap();
    let text = common::read_memcached_until(&mut text, b"END\r\n").unwrap();
    assert_eq!(text, format!("VALUE a 4 3 {}\r\ntwo\r\nEND\r\n", swapped.cas()).into_bytes());
    let appended = &call(&mut mc, &[packet(APPEND, b"", b"a", b"!", swapped.cas())])[0];
    assert_eq!(appended.status(), 0);
    let counted = &call(&mut mc, &[packet(INCREMENT, &delta(1, 0, 0), b"a", b"", swapped.cas())])[0];
    assert_eq!(counted.status(), 2, "the append changed the CAS");
    let deleted = &call(&mut mc, &[packet(DELETE, b"", b"a", b"", appended.cas())])[0];
    assert_eq!(deleted.status(), 0);
    let counter = &call(&mut mc, &[req(INCREMENT, &delta(5, 40, 0), b"n", b"")])[0];
    assert_eq!((counter.status(), &counter.body[..]), (0, &40u64.to_be_bytes()[..]));
    let counted = &call(&mut mc, &[packet(INCREMENT, &delta(2, 0, 0), b"n", b"", counter.cas())])[0];
    assert_eq!((counted.status(), &counted.body[..]), (0, &42u64.to_be_bytes()[..]));
}

/// Items written over the binary protocol are strings to Redis, and Redis
/// strings are items with flags 0; a Redis collection is no item.
#[test]
fn binary_items_share_the_keyspace_with_redis() {
    let dir = tempfile::tempdir().unwrap();
    let (server, port) = start_with_memcached(&dir.path().join("db"), &[]);
    let mut mc = connect(port);
    call(&mut mc, &[req(SET, &store(9, 0), b"item", b"from memcached")]);
    let mut redis = server.connect();
    assert_eq!(common::request(&mut redis, &common::encode(&[b"GET", b"item"])), b"$14\r\nfrom memcached\r\n");
    common::request(&mut redis, &common::encode(&[b"SET", b"s", b"from redis"]));
    common::request(&mut redis, &common::encode(&[b"RPUSH", b"list", b"x"]));
    let got =
        call(&mut mc, &[req(GET, b"", b"s", b""), req(GET, b"", b"list", b""), req(ADD, &store(0, 0), b"list", b"x")]);
    assert_eq!((got[0].status(), &got[0].body[..]), (0, &b"\0\0\0\0from redis"[..]));
    assert_eq!(got[1].status(), 1, "a list is no item");
    assert_eq!(got[2].status(), 2, "a list's key is taken");
}

/// With `requirepass`, a binary connection authenticates by SASL PLAIN;
/// before that, anything but SASL and VERSION is refused and closes it.
#[test]
fn with_requirepass_a_binary_connection_authenticates_by_sasl_plain() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_with_memcached(&dir.path().join("db"), &["--requirepass", "sesame"]);
    let mut mc = connect(port);
    let refused = &call(&mut mc, &[req(GET, b"", b"a", b"")])[0];
    assert_eq!((refused.status(), &refused.body[..]), (0x20, &b"Auth failure."[..]));
    assert!(read_response(&mut mc).is_none(), "closed");
    let mut mc = connect(port);
    let got = call(
        &mut mc,
        &[
            req(VERSION, b"", b"", b""),
            req(SASL_LIST_MECHS, b"", b"", b""),
            req(SASL_AUTH, b"", b"PLAIN", b"\0user\0nope"),
            req(SASL_AUTH, b"", b"CRAM-MD5", b"user sesame"),
            req(SASL_AUTH, b"", b"PLAIN", b"\0user\0sesame"),
            req(SET, &store(0, 0), b"a", b"x"),
            req(GET, b"", b"a", b""),
        ],
    );
    let answers: Vec<(u16, &[u8])> = got.iter().map(|r| (r.status(), &r.body[..])).collect();
    assert_eq!(
        answers,
        vec![
            (0, &b"1.6.18"[..]),
            (0, b"PLAIN"),
            (0x20, b"Auth failure."),
            (0x20, b"Auth failure."),
            (0, b"Authenticated"),
            (0, b""),
            (0, b"\0\0\0\0x"),
        ]
    );
}

/// An unknown opcode's body is skipped, however it is split into key,
/// extras and value, and the next request is answered.
#[test]
fn unknown_commands_skip_their_body_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let (_server, port) = start_with_memcached(&dir.path().join("db"), &[]);
    let mut mc = connect(port);
    let got = call(&mut mc, &[req(0x42, b"ex", b"key", b"value"), req(VERSION, b"", b"", b"")]);
    assert_eq!((got[0].status(), &got[0].body[..]), (0x81, &b"Unknown command"[..]));
    assert_eq!((got[1].status(), &got[1].body[..]), (0, &b"1.6.18"[..]));
}

/// Random requests (real opcodes, lengths that may lie) and a header
/// announcing a 4 GiB body: errors or a closed connection for that client,
/// and the server serves the next.
#[test]
fn bad_binary_input_closes_only_its_connection() {
    use rand::Rng;
    let dir = tempfile::tempdir().unwrap();
    let (server, port) = start_with_memcached(&dir.path().join("db"), &["--memcached-item-size-max", "4096"]);
    let mut rng = rand::thread_rng();
    for _ in 0..200 {
        let mut stream = connect(port);
        let mut bytes = Vec::new();
        for _ in 0..rng.gen_range(1..6) {
            let opcode = rng.gen_range(0u8..0x26);
            let key: Vec<u8> = (0..rng.gen_range(0..12)).map(|_| rng.gen()).collect();
            let extras: Vec<u8> = (0..[0, 4, 8, 20][rng.gen_range(0..4)]).map(|_| rng.gen()).collect();
            let value: Vec<u8> = (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect();
            let mut request = packet(opcode, &extras, &key, &value, rng.gen_range(0..3));
            if rng.gen_bool(0.2) {
                let lie = rng.gen::<u32>() % 200;
                request[8..12].copy_from_slice(&lie.to_be_bytes());
            }
            bytes.extend(request);
        }
        let _ = stream.write_all(&bytes);
    }
    let mut huge = connect(port);
    let mut header = req(SET, &store(0, 0), b"h", b"");
    header[8..12].copy_from_slice(&u32::MAX.to_be_bytes());
    huge.write_all(&header).unwrap();
    let refused = read_response(&mut huge).expect("refused before the body comes");
    assert_eq!((refused.status(), &refused.body[..]), (0x03, &b"Too large."[..]));
    let mut half = connect(port);
    half.write_all(&req(SET, &store(0, 0), b"h", b"only part of it")[..30]).unwrap();
    drop(half);
    let mut mc = connect(port);
    let got = call(&mut mc, &[req(GET, b"", b"h", b""), req(VERSION, b"", b"", b"")]);
    assert_eq!((got[0].status(), &got[1].body[..]), (1, &b"1.6.18"[..]));
    assert_eq!(common::request(&mut server.connect(), &common::encode(&[b"PING"])), b"+PONG\r\n");
}

fn item(iteration: usize, thread: usize, seq: u64) -> (Vec<u8>, u32, Vec<u8>) {
    let len = 1 + (seq as usize * 37 + thread * 11) % 1500;
    let data = (0..len).map(|i| (i as u64 * 7 + seq) as u8).collect();
    (format!("b{iteration}:t{thread}:{seq}").into_bytes(), (seq as u32).wrapping_mul(2654435761), data)
}

/// What one binary writer saw acknowledged before the server died: items
/// 0..sets, and the highest value of the counter all writers share.
#[derive(Default)]
struct Acked {
    sets: u64,
    counter: u64,
}

/// Eight quiet SETs and an INCREMENT of a shared counter per round until
/// the connection dies: its response acknowledges the SETs before it
/// (a quiet request's failure would have been answered first).
fn writer(port: u16, iteration: usize, thread: usize) -> Acked {
    let mut acked = Acked::default();
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return acked };
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let counter = format!("bcounter{iteration}").into_bytes();
    loop {
        let mut batch = Vec::new();
        for seq in acked.sets..acked.sets + 8 {
            let (key, flags, data) = item(iteration, thread, seq);
            batch.extend(req(SETQ, &store(flags, 0), &key, &data));
        }
        batch.extend(req(INCREMENT, &delta(1, 1, 0), &counter, b""));
        if stream.write_all(&batch).is_err() {
            return acked;
        }
        let Some(response) = read_response(&mut stream) else { return acked };
        assert_eq!((response.opcode(), response.status()), (INCREMENT, 0), "{:?}", response.body);
        acked.sets += 8;
        acked.counter = acked.counter.max(u64::from_be_bytes(response.body[..8].try_into().unwrap()));
    }
}

/// SIGKILL while binary clients write, restart, check every acknowledged
/// item byte for byte (flags too) and the counter: in a loop
/// (`SCALEDKV_SERVER_CRASH_ITERATIONS`, default 3 here).
#[test]
fn acknowledged_binary_writes_survive_sigkill() {
    use rand::Rng;
    let iterations = common::crash_iterations(3);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("db");
    let mut rng = rand::thread_rng();
    for iteration in 0..iterations {
        let (mut server, port) = start_with_memcached(&path, &[]);
        let writers: Vec<_> =
            (0..3).map(|thread| std::thread::spawn(move || writer(port, iteration, thread))).collect();
        std::thread::sleep(Duration::from_millis(rng.gen_range(100..600)));
        server.kill();
        let acked: Vec<Acked> = writers.into_iter().map(|w| w.join().unwrap()).collect();
        let (_server, port) = start_with_memcached(&path, &[]);
        let mut mc = connect(port);
        for (thread, acked) in acked.iter().enumerate() {
            for seq in 0..acked.sets {
                let (key, flags, data) = item(iteration, thread, seq);
                let got = &call(&mut mc, &[req(GET, b"", &key, b"")])[0];
                let expected = [&flags.to_be_bytes()[..], &data].concat();
                assert_eq!((got.status(), &got.body), (0, &expected), "iteration {iteration}: {key:?} lost");
            }
        }
        let highest = acked.iter().map(|a| a.counter).max().unwrap_or(0);
        let counter = &call(&mut mc, &[req(GET, b"", format!("bcounter{iteration}").as_bytes(), b"")])[0];
        let value: u64 = String::from_utf8_lossy(&counter.body[4..]).trim().parse().unwrap_or(0);
        assert!(value >= highest, "iteration {iteration}: counter {value} below an acknowledged {highest}");
        assert!(acked.iter().map(|a| a.sets).sum::<u64>() > 0, "iteration {iteration}: nothing was written");
    }
}
