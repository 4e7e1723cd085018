//! Damaged pool files: flipped bits and truncation anywhere give a clear
//! error or a pool that still answers without panicking; never a crash.
//! The header and log are checksummed and the allocator metadata is
//! validated on open; user objects are not checksummed (see docs/pmem.md),
//! but every pointer read from them is bounds-checked.

use proptest::prelude::*;
use scaledkv_pmem::collections::PHashMap;
use scaledkv_pmem::{Durability, Error};

#[path = "support/sample_pool.rs"]
mod sample_pool;
use sample_pool::{exercise, image, POOL_BYTES};

#[test]
fn the_intact_image_opens() {
    for durability in [Durability::Pmem, Durability::Sync] {
        assert_eq!(exercise(image(durability), durability).unwrap(), 899);
    }
}

#[test]
fn flipped_bits_in_the_header_are_reported() {
    // Magic, versions, layout name, geometry and the CRC itself.
    for bit in (0..156 * 8).step_by(3) {
        let durability = if bit % 2 == 0 { Durability::Pmem } else { Durability::Sync };
        let mut damaged = image(durability).to_vec();
        damaged[bit / 8] ^= 1 << (bit % 8);
        let error = exercise(&damaged, durability).expect_err("a flipped header bit must not go unnoticed");
        assert!(
            matches!(error, Error::NotAPool { .. } | Error::CorruptPool { .. }),
            "bit {bit}: unexpected error {error}"
        );
    }
}

#[test]
fn truncated_pool_files_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("map.pool");
    drop(PHashMap::create(&path, POOL_BYTES, Durability::Buffered).unwrap());
    let full = std::fs::read(&path).unwrap();
    for len in [1usize, 8, 100, 4096, 70_000, full.len() / 2, full.len() - 1] {
        std::fs::write(&path, &full[..len]).unwrap();
        let error = PHashMap::open(&path, Durability::Buffered).err().expect("a truncated pool must not open");
        assert!(error.to_string().contains("map.pool"), "the error names the file: {error}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn random_damage_never_panics(
        flips in prop::collection::vec((0usize..POOL_BYTES as usize * 8, any::<bool>()), 1..40),
        redo in any::<bool>(),
    ) {
        let durability = if redo { Durability::Sync } else { Durability::Pmem };
        let mut damaged = image(durability).to_vec();
        for (bit, in_metadata) in flips {
            // Half the flips land in the first 200 KiB (header, log, table,
            // bitmaps and the start of the heap), where damage matters most.
            let bit = if in_metadata { bit % (200 << 13) } else { bit % (damaged.len() * 8) };
            damaged[bit / 8] ^= 1 << (bit % 8);
        }
        let _ = exercise(&damaged, durability);
    }
}

/// The generation word is one unchecksummed store: a damaged one far past
/// any count of transactions is reported, not advanced past `u64::MAX`
/// (libFuzzer's `pool_image` found the overflow).
#[test]
fn a_damaged_generation_word_is_reported() {
    for durability in [Durability::Pmem, Durability::Sync] {
        for generation in [u64::MAX, 1 << 62] {
            let mut damaged = image(durability).to_vec();
            let log_offset = u64::from_le_bytes(damaged[88..96].try_into().unwrap()) as usize;
            damaged[log_offset..log_offset + 8].copy_from_slice(&generation.to_le_bytes());
            let error = exercise(&damaged, durability).expect_err("a damaged generation must not open");
            assert!(matches!(error, Error::CorruptPool { .. }), "{durability:?} {generation:#x}: {error}");
        }
        // The largest sane generation still opens (its log is dead).
        let mut aged = image(durability).to_vec();
        let log_offset = u64::from_le_bytes(aged[88..96].try_into().unwrap()) as usize;
        aged[log_offset..log_offset + 8].copy_from_slice(&((1u64 << 62) - 2).to_le_bytes());
        assert_eq!(exercise(&aged, durability).unwrap(), 899, "{durability:?}");
    }
}
