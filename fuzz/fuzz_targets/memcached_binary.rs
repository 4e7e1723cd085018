//! Feeds arbitrary bytes to the memcached binary protocol's parser in two
//! chunks, locked (before SASL) or not: it must frame a request (consuming
//! input), wait for more, or close the connection, and never panic or loop.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use scaledkv_server::memcache::binary::{Frame, Parser};
use scaledkv_server::memcache::request::Limits;

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
            match parser.parse(&mut input, &limits, split % 2 == 1) {
                None => break,
                Some(Frame::Close | Frame::Refused { close: true, .. }) => return,
                Some(_) => assert!(input.len() < before),
            }
        }
    }
});
