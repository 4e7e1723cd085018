//! MANIFEST: the one small file that says which index checkpoint is current
//! and where log replay starts. Replaced atomically (write temp, fsync,
//! rename, fsync dir), so a crash leaves either the old or the new one.
//!
//! Layout, little endian, 40 bytes:
//! ```text
//! 0  [u8; 8] magic "SKVMANI\0"
//! 8  u32 format version
//! 12 u32 replay start: segment id, low 32 bits
//! 16 u64 checkpoint generation (file index-<gen>.ckpt)
//! 24 u32 replay start: offset in that segment
//! 28 u32 delta checkpoints after it (index-<gen + 1>.delta ...; version 2)
//! 32 u32 replay start: segment id, high 32 bits (version 3; zero before)
//! 36 u32 crc32c over bytes 0..36
//! ```
//! Versions 1 (no deltas) and 2 are still read. Version 2 is written, so
//! a binary that knows nothing of deltas refuses the database instead of
//! opening it without them; version 3 once segment ids outgrow 32 bits,
//! so a binary that knows nothing of those refuses it too.

use std::path::Path;

use crate::error::{Error, Result};

const MAGIC: &[u8; 8] = b"SKVMANI\0";
const VERSION: u32 = 3;
const LEN: usize = 40;
pub const FILE_NAME: &str = "MANIFEST";
/// Checkpoint generations at or past this are damage: one per checkpoint,
/// a database would need centuries to get there. Keeps `generation + n`
/// (the chain's file names, the next checkpoint) from overflowing.
pub const GENERATION_LIMIT: u64 = 1 << 62;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Manifest {
    pub checkpoint_generation: u64,
    pub replay_segment: crate::log::segment::SegmentId,
    pub replay_offset: u32,
    pub delta_count: u32,
}

impl Manifest {
    pub fn encode(&self) -> [u8; LEN] {
        let mut out = [0u8; LEN];
        out[..8].copy_from_slice(MAGIC);
        let version = if self.replay_segment >> 32 == 0 { 2 } else { VERSION };
        out[8..12].copy_from_slice(&version.to_le_bytes());
        out[12..16].copy_from_slice(&(self.replay_segment as u32).to_le_bytes());
        out[16..24].copy_from_slice(&self.checkpoint_generation.to_le_bytes());
        out[24..28].copy_from_slice(&self.replay_offset.to_le_bytes());
        out[28..32].copy_from_slice(&self.delta_count.to_le_bytes());
        out[32..36].copy_from_slice(&((self.replay_segment >> 32) as u32).to_le_bytes());
        let crc = scaledkv_pmem::crc::crc32c(&out[..36]);
        out[36..40].copy_from_slice(&crc.to_le_bytes());
        out
    }

    pub fn decode(bytes: &[u8], path: &Path) -> Result<Manifest> {
        let corrupt = |reason: &str| Error::Corruption { path: path.to_path_buf(), offset: 0, reason: reason.into() };
        if bytes.len() != LEN {
            return Err(corrupt(&format!("manifest is {} bytes, expected {LEN}", bytes.len())));
        }
        if &bytes[..8] != MAGIC {
            return Err(corrupt("bad manifest magic"));
        }
        let u32_at = |at: usize| u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"));
        if scaledkv_pmem::crc::crc32c(&bytes[..36]) != u32_at(36) {
            return Err(corrupt("manifest checksum mismatch"));
        }
        if !(1..=VERSION).contains(&u32_at(8)) {
            return Err(Error::UnsupportedVersion { path: path.to_path_buf(), found: u32_at(8), expected: VERSION });
        }
        // Bytes 32..36 were reserved before version 3.
        let high = if u32_at(8) >= 3 { u32_at(32) as u64 } else { 0 };
        let manifest = Manifest {
            replay_segment: high << 32 | u32_at(12) as u64,
            checkpoint_generation: u64::from_le_bytes(bytes[16..24].try_into().expect("8 bytes")),
            replay_offset: u32_at(24),
            delta_count: if u32_at(8) == 1 { 0 } else { u32_at(28) },
        };
        // Checksummed, yet not trusted to size anything: a forged manifest
        // naming 4 billion deltas made open allocate 22 GB for their names
        // (libFuzzer, `engine_files`).
        if manifest.checkpoint_generation >= GENERATION_LIMIT {
            return Err(corrupt(&format!(
                "checkpoint generation {} is past {GENERATION_LIMIT}",
                manifest.checkpoint_generation
            )));
        }
        if manifest.replay_segment > crate::log::segment::MAX_SEGMENT_ID {
            return Err(corrupt(&format!("replay segment {} is past the last segment id", manifest.replay_segment)));
        }
        if manifest.delta_count > crate::db::MAX_DELTAS {
            let max = crate::db::MAX_DELTAS;
            return Err(corrupt(&format!(
                "manifest names {} delta checkpoints, at most {max} are written",
                manifest.delta_count
            )));
        }
        Ok(manifest)
    }

    /// Reads `dir/MANIFEST`; `None` if the database never checkpointed.
    pub fn load(dir: &Path) -> Result<Option<Manifest>> {
        let path = dir.join(FILE_NAME);
        match std::fs::read(&path) {
            Ok(bytes) => Manifest::decode(&bytes, &path).map(Some),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(Error::Io { path, op: "read", source: e }),
        }
    }

    pub fn store(&self, dir: &Path) -> Result<()> {
        write_atomically(dir, FILE_NAME, &self.encode())
    }
}

/// Writes `dir/name` so that a crash leaves the old or the new contents.
pub fn write_atomically(dir: &Path, name: &str, bytes: &[u8]) -> Result<()> {
    use std::io::Write;
    let tmp = dir.join(format!("{name}.tmp"));
    let path = dir.join(name);
    let mut file = std::fs::File::create(&tmp).map_err(Error::io(&tmp, "create"))?;
    file.write_all(bytes).map_err(Error::io(&tmp, "write"))?;
    file.sync_all().map_err(Error::io(&tmp, "fsync"))?;
    std::fs::rename(&tmp, &path).map_err(Error::io(&path, "rename"))?;
    scaledkv_pmem::sync_dir(dir).map_err(Error::io(dir, "fsync dir"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_version_1_manifest_names_no_deltas() {
        let mut bytes =
            Manifest { checkpoint_generation: 7, replay_segment: 3, replay_offset: 4096, delta_count: 0 }.encode();
        bytes[8..12].copy_from_slice(&1u32.to_le_bytes());
        bytes[28] = 5; // not a field in version 1
        let crc = scaledkv_pmem::crc::crc32c(&bytes[..36]);
        bytes[36..40].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Manifest::decode(&bytes, Path::new("M")).unwrap().delta_count, 0);
    }

    /// A replay segment past 32 bits is written as version 3 (an older
    /// binary refuses it); a version 2 manifest's bytes 32..36 are not
    /// part of its segment id.
    #[test]
    fn a_segment_id_past_32_bits_takes_version_3() {
        let far =
            Manifest { checkpoint_generation: 7, replay_segment: (5 << 32) | 3, replay_offset: 64, delta_count: 1 };
        let bytes = far.encode();
        assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 3);
        assert_eq!(Manifest::decode(&bytes, Path::new("M")).unwrap(), far);
        let near = Manifest { replay_segment: 3, ..far };
        let mut bytes = near.encode();
        assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 2);
        bytes[32] = 5; // reserved in version 2
        let crc = scaledkv_pmem::crc::crc32c(&bytes[..36]);
        bytes[36..40].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(Manifest::decode(&bytes, Path::new("M")).unwrap(), near);
    }

    /// Well-checksummed manifests whose fields no engine writes.
    #[test]
    fn impossible_fields_are_corruption() {
        let bad = [
            Manifest { checkpoint_generation: 7, replay_segment: 3, replay_offset: 0, delta_count: u32::MAX },
            Manifest { checkpoint_generation: 7, replay_segment: 3, replay_offset: 0, delta_count: 9 },
            Manifest { checkpoint_generation: u64::MAX, replay_segment: 3, replay_offset: 0, delta_count: 1 },
            Manifest { checkpoint_generation: GENERATION_LIMIT, replay_segment: 3, replay_offset: 0, delta_count: 0 },
            Manifest { checkpoint_generation: 7, replay_segment: u64::MAX, replay_offset: 0, delta_count: 0 },
        ];
        for manifest in bad {
            let error = Manifest::decode(&manifest.encode(), Path::new("M")).unwrap_err();
            assert!(matches!(error, Error::Corruption { .. }), "{manifest:?}: {error}");
        }
        let most = Manifest {
            checkpoint_generation: GENERATION_LIMIT - 1,
            replay_segment: 3,
            replay_offset: 0,
            delta_count: 8,
        };
        assert_eq!(Manifest::decode(&most.encode(), Path::new("M")).unwrap(), most);
    }

    #[test]
    fn roundtrip_and_every_bit_flip_is_detected() {
        let manifest = Manifest { checkpoint_generation: 7, replay_segment: 3, replay_offset: 4096, delta_count: 2 };
        let bytes = manifest.encode();
        assert_eq!(Manifest::decode(&bytes, Path::new("M")).unwrap(), manifest);
        for bit in 0..LEN * 8 {
            let mut bad = bytes;
            bad[bit / 8] ^= 1 << (bit % 8);
            assert!(Manifest::decode(&bad, Path::new("M")).is_err(), "bit {bit}");
        }
    }
}
