//! Damages the image of a persistent-memory pool holding a hash map and
//! opens it on the simulated medium: open, recovery (rolling a
//! transaction's log back or forward) and the map's reads and writes may
//! fail, but never panic, hang or allocate without bound.
//!
//! The input's first byte picks the pool (undo log, as on persistent
//! memory, or redo log, as on a page-cache file) and whether the damaged
//! image gets its header's and log entries' checksums recomputed, so that
//! the checks behind them see forged, well-checksummed garbage. The rest is
//! edits: kind (overwrite, xor), offset, bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use scaledkv_pmem::crc::{crc32c, crc32c_append};
use scaledkv_pmem::Durability;

#[path = "../../crates/pmem/tests/support/sample_pool.rs"]
mod sample_pool;
use sample_pool::{exercise, image};

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().unwrap())
}

/// Recomputes the header's CRC and those of the log entries that can
/// still be walked from the log's start (docs/pmem.md), a redo commit
/// record's chained CRC included.
fn fix_checksums(image: &mut [u8]) {
    let crc = crc32c(&image[..152]);
    image[152..156].copy_from_slice(&crc.to_le_bytes());
    let (log, log_bytes) = (u64_at(image, 88) as usize, u64_at(image, 96) as usize);
    let Some(log_end) = log.checked_add(log_bytes).filter(|&end| end <= image.len()) else { return };
    let (mut at, mut chained) = (log.saturating_add(64), 0u32);
    while at + 24 <= log_end {
        let len = (u32::from_le_bytes(image[at + 16..at + 20].try_into().unwrap()) & 0x7FFF_FFFF) as usize;
        if u64_at(image, at) == 0 || at + 24 + len > log_end {
            return;
        }
        if u64_at(image, at + 8) == u64::MAX && len == 8 {
            image[at + 24..at + 28].copy_from_slice(&chained.to_le_bytes());
        }
        let crc = crc32c_append(crc32c(&image[at..at + 20]), &image[at + 24..at + 24 + len]);
        image[at + 20..at + 24].copy_from_slice(&crc.to_le_bytes());
        chained = crc32c_append(chained, &crc.to_le_bytes());
        at += 24 + ((len + 7) & !7);
    }
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, mut edits)) = data.split_first() else { return };
    let durability = if mode & 1 == 0 { Durability::Pmem } else { Durability::Sync };
    let mut damaged = image(durability).to_vec();
    while edits.len() >= 6 {
        let (head, rest) = edits.split_at(6);
        let len = (head[5] as usize).min(rest.len());
        let (bytes, rest) = rest.split_at(len);
        edits = rest;
        let at = u32::from_le_bytes([head[1], head[2], head[3], head[4]]) as usize % damaged.len();
        let end = (at + bytes.len()).min(damaged.len());
        if head[0] % 2 == 0 {
            damaged[at..end].copy_from_slice(&bytes[..end - at]);
        } else {
            damaged[at..end].iter_mut().zip(bytes).for_each(|(b, x)| *b ^= x);
        }
    }
    if mode & 2 != 0 {
        fix_checksums(&mut damaged);
    }
    let _ = exercise(&damaged, durability);
});
