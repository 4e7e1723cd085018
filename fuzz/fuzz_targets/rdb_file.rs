//! Feeds arbitrary bytes to the RDB file reader REPLICAOF loads a master's
//! data set with, as the body of a version-10 file without a checksum (so
//! that the reader, not the checksum, meets the damage): every item is
//! read or the file refused, never a panic or a loop; every key read
//! gives a RESTORE payload that RESTORE's own reader accepts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use scaledkv_server::commands::dump::deserialize_from_master;
use scaledkv_server::commands::dump::rdb::{Item, RdbFile};

fuzz_target!(|data: &[u8]| {
    let mut file = b"REDIS0010".to_vec();
    file.extend_from_slice(data);
    file.push(0xFF);
    file.extend_from_slice(&[0; 8]);
    let Ok(mut rdb) = RdbFile::open(&file) else { return };
    while let Ok(Some(item)) = rdb.next_item() {
        if let Item::Entry(entry) = item {
            assert!(deserialize_from_master(&entry.payload).is_ok(), "a key read gives a payload RESTORE refuses");
        }
    }
});
