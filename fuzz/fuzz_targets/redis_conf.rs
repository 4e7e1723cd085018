//! Feeds arbitrary text to the redis.conf reader (lines split with
//! quotes and escapes, directives turned into flags and settings): it
//! must read it or refuse it with a reason, and never panic.
#![no_main]

use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let flags: Vec<String> = ["port", "bind", "dir", "save", "client-output-buffer-limit", "threads", "replicaof"]
        .map(String::from)
        .to_vec();
    let _ = scaledkv_server::redis_conf::read_text_without_includes(&text, &flags);
});
