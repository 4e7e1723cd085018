//! Feeds arbitrary bytes to the RESP request parser in two chunks: it must
//! take a command, wait for more, or fail with a protocol error, and never
//! panic or loop.
#![no_main]

use bytes::BytesMut;
use libfuzzer_sys::fuzz_target;
use scaledkv_server::resp::{parse, Limits};

fuzz_target!(|data: &[u8]| {
    let Some((&split, data)) = data.split_first() else { return };
    let limits =
        Limits { max_bulk_bytes: 4096, max_args: 64, max_request_bytes: 65536, authenticated: split & 1 == 0 };
    let cut = (split as usize).min(data.len());
    let mut input = BytesMut::new();
    for piece in [&data[..cut], &data[cut..]] {
        input.extend_from_slice(piece);
        loop {
            let before = input.len();
            match parse(&mut input, &limits) {
                Ok(Some(_)) => assert!(input.len() < before),
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
});
