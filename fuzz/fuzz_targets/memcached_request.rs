//! Feeds arbitrary bytes to the memcached request parser in two chunks: it
//! must take a request (consuming input), wait for more, or close the
//! connection, and never panic or loop.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use scaledkv_server::memcache::request::{Limits, Parser};

fuzz_target!(|data: &[u8]| {
    let Some((&split, data)) = data.split_first() else { return };
    let limits = Limits { max_item_bytes: 64 + split as usize * 16 };
    let cut = (split as usize).min(data.len());
    let mut parser = Parser::default();
    let mut input = BytesMut::new();
    for piece in [&data[..cut], &data[cut..]] {
        input.extend_from_slice(piece);
        loop {
            let before = input.len();
            match parser.parse(&mut input, &limits) {
                Ok(Some(_)) => assert!(input.len() < before),
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
