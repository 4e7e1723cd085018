//! Reply encoding for RESP2 and RESP3. Replies are appended to the
//! connection's output buffer and sent when the pipeline has been read.

use bytes::{BufMut, BytesMut};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Protocol {
    Resp2,
    Resp3,
}

pub struct Out {
    pub buf: BytesMut,
    pub protocol: Protocol,
    /// A memcached connection's replies (`crate::memcache`): errors are
    /// its own lines ("CLIENT_ERROR ..."), not RESP's.
    pub memcached: bool,
    /// A memcached command sent with `noreply`: nothing of its reply is
    /// sent (`memcached_line`, `error`).
    pub quiet: bool,
    /// The memcached binary request running: errors are its responses.
    pub binary: Option<crate::memcache::binary::Tag>,
    /// A run of a binary connection's writes failed to commit: the
    /// connection closes (its responses hold no place for the run's).
    pub broken: bool,
}

impl Out {
    pub fn new(protocol: Protocol) -> Out {
        Out::with_buf(BytesMut::with_capacity(16 * 1024), protocol)
    }

    /// Replies appended to `buf`.
    pub fn with_buf(buf: BytesMut, protocol: Protocol) -> Out {
        Out { buf, protocol, memcached: false, quiet: false, binary: None, broken: false }
    }

    /// A memcached reply line ("STORED"), unless the command asked for none.
    pub fn memcached_line(&mut self, text: &[u8]) {
        if !self.quiet {
            self.buf.reserve(text.len() + 2);
            self.buf.put_slice(text);
            self.buf.put_slice(b"\r\n");
        }
    }

    fn line(&mut self, prefix: u8, text: &[u8]) {
        self.buf.reserve(text.len() + 3);
        self.buf.put_u8(prefix);
        self.buf.put_slice(text);
        self.buf.put_slice(b"\r\n");
    }

    pub fn simple(&mut self, text: &str) {
        self.line(b'+', text.as_bytes());
    }

    /// An array of simple strings, as Redis answers HELP subcommands.
    pub fn help(&mut self, lines: &[&str]) {
        self.array(lines.len());
        for line in lines {
            self.simple(line);
        }
    }

    pub fn ok(&mut self) {
        self.buf.put_slice(b"+OK\r\n");
    }

    /// `text` is the whole message, code included ("ERR syntax error").
    pub fn error(&mut self, text: &str) {
        if !self.memcached {
            crate::commandstats::error_sent(text);
        }
        // A newline would end the reply early: Redis replaces them too.
        let clean: String = text.chars().map(|c| if c == '\r' || c == '\n' { ' ' } else { c }).collect();
        if let Some(tag) = self.binary {
            crate::memcache::binary::put_error_text(&mut self.buf, tag, text);
            return;
        }
        if self.memcached {
            // memcached's `noreply` silences errors too, but for the
            // ERROR of a command line it could not take apart.
            if self.quiet && text != "ERROR" {
                return;
            }
            self.buf.put_slice(clean.as_bytes());
            self.buf.put_slice(b"\r\n");
            return;
        }
        self.line(b'-', clean.as_bytes());
    }

    /// The replies of a run of `commands` writes that failed to commit,
    /// where they were: each an error, but on a binary memcached
    /// connection, which closes instead.
    pub fn failed_run(&mut self, commands: usize, text: &str) {
        if self.binary.is_some() {
            self.broken = true;
            return;
        }
        for _ in 0..commands {
            self.error(text);
        }
    }

    pub fn int(&mut self, value: i64) {
        self.number_line(b':', value);
    }

    fn number_line(&mut self, prefix: u8, value: i64) {
        self.line(prefix, itoa::Buffer::new().format(value).as_bytes());
    }

    pub fn bulk(&mut self, data: &[u8]) {
        let mut digits = itoa::Buffer::new();
        let length = digits.format(data.len()).as_bytes();
        let total = 1 + length.len() + 2 + data.len() + 2;
        // One reservation and one length update for the five pieces:
        // `put_slice` checks capacity and moves the length for each, which
        // was a third of LRANGE's CPU once its elements came in chunks.
        self.buf.reserve(total);
        let start = self.buf.len();
        // SAFETY: `reserve` made room for `total` bytes past the length; the
        // copies below write exactly those bytes, from slices that cannot
        // overlap the buffer's spare capacity, before `set_len` covers them.
        unsafe {
            let to = self.buf.as_mut_ptr().add(start);
            *to = b'$';
            std::ptr::copy_nonoverlapping(length.as_ptr(), to.add(1), length.len());
            let at = 1 + length.len();
            to.add(at).cast::<[u8; 2]>().write_unaligned(*b"\r\n");
            std::ptr::copy_nonoverlapping(data.as_ptr(), to.add(at + 2), data.len());
            to.add(total - 2).cast::<[u8; 2]>().write_unaligned(*b"\r\n");
            self.buf.set_len(start + total);
        }
    }

    pub fn bulk_opt(&mut self, data: Option<&[u8]>) {
        match data {
            Some(data) => self.bulk(data),
            None => self.null(),
        }
    }

    /// A missing value: `$-1` in RESP2, `_` in RESP3.
    pub fn null(&mut self) {
        match self.protocol {
            Protocol::Resp2 => self.buf.put_slice(b"$-1\r\n"),
            Protocol::Resp3 => self.buf.put_slice(b"_\r\n"),
        }
    }

    /// A missing array (an aborted EXEC): `*-1` in RESP2, `_` in RESP3.
    pub fn null_array(&mut self) {
        match self.protocol {
            Protocol::Resp2 => self.buf.put_slice(b"*-1\r\n"),
            Protocol::Resp3 => self.buf.put_slice(b"_\r\n"),
        }
    }

    pub fn array(&mut self, len: usize) {
        self.number_line(b'*', len as i64);
    }

    /// Out-of-band data (published messages, subscribe confirmations): a
    /// push (`>`) in RESP3, an array in RESP2.
    pub fn push(&mut self, len: usize) {
        match self.protocol {
            Protocol::Resp2 => self.array(len),
            Protocol::Resp3 => self.number_line(b'>', len as i64),
        }
    }

    /// A map of `len` pairs: `%` in RESP3, a flat array in RESP2.
    pub fn map(&mut self, len: usize) {
        match self.protocol {
            Protocol::Resp2 => self.array(len * 2),
            Protocol::Resp3 => self.number_line(b'%', len as i64),
        }
    }

    /// A set: `~` in RESP3, an array in RESP2.
    pub fn set(&mut self, len: usize) {
        match self.protocol {
            Protocol::Resp2 => self.array(len),
            Protocol::Resp3 => self.number_line(b'~', len as i64),
        }
    }

    /// A verbatim string (`=`) in RESP3, bulk in RESP2: INFO and CLIENT
    /// INFO/LIST reply this way in Redis 7.
    pub fn verbatim(&mut self, text: &str) {
        match self.protocol {
            Protocol::Resp2 => self.bulk(text.as_bytes()),
            Protocol::Resp3 => {
                self.buf.put_u8(b'=');
                self.buf.put_slice(itoa::Buffer::new().format(text.len() + 4).as_bytes());
                self.buf.put_slice(b"\r\ntxt:");
                self.buf.put_slice(text.as_bytes());
                self.buf.put_slice(b"\r\n");
            }
        }
    }

    /// A double as Redis 7.0 replies one (`%.17g`): `,` in RESP3, a bulk
    /// string in RESP2.
    pub fn double(&mut self, value: f64) {
        self.double_text(&crate::zset::format_score(value));
    }

    /// A double already in the text Redis gives it (GEO's coordinates):
    /// `,` in RESP3, a bulk string in RESP2.
    pub fn double_text(&mut self, text: &str) {
        match self.protocol {
            Protocol::Resp2 => self.bulk(text.as_bytes()),
            Protocol::Resp3 => self.line(b',', text.as_bytes()),
        }
    }

    /// A boolean: `#t`/`#f` in RESP3, `:1`/`:0` in RESP2.
    pub fn boolean(&mut self, value: bool) {
        match self.protocol {
            Protocol::Resp2 => self.int(value as i64),
            Protocol::Resp3 => self.buf.put_slice(if value { b"#t\r\n" } else { b"#f\r\n" }),
        }
    }

    /// A big number's digits: `(` in RESP3, a bulk string in RESP2.
    pub fn big_number(&mut self, digits: &str) {
        match self.protocol {
            Protocol::Resp2 => self.bulk(digits.as_bytes()),
            Protocol::Resp3 => self.line(b'(', digits.as_bytes()),
        }
    }

    pub fn len(&self) -> usize {
        self.buf.len()
    }

    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// Drops everything written after `mark` (a reply that must not be sent
    /// because its write failed).
    pub fn truncate(&mut self, mark: usize) {
        self.buf.truncate(mark);
    }
}

/// Shortest text that reads back as `value`, without exponent, as Redis
/// prints INCRBYFLOAT results.
pub fn format_double(value: f64) -> String {
    if value.is_infinite() {
        return if value > 0.0 { "inf".into() } else { "-inf".into() };
    }
    let text = format!("{value}");
    if text == "-0" {
        "0".into()
    } else {
        text
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Bulk strings of every length up to past the buffer's first
    /// capacity, each after the others, are what RESP says.
    #[test]
    fn bulk_strings_are_encoded_whole() {
        let mut out = Out::new(Protocol::Resp2);
        let mut expected = Vec::new();
        for len in (0..300).chain([16 * 1024 - 3, 16 * 1024, 70_000]) {
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            out.bulk(&data);
            expected.extend_from_slice(format!("${len}\r\n").as_bytes());
            expected.extend_from_slice(&data);
            expected.extend_from_slice(b"\r\n");
        }
        assert_eq!(&out.buf[..], &expected[..]);
    }
}
