//! Persistent regions for ScaledKV.
//!
//! A [`Region`] is a file mapped into memory with one operation that makes a
//! byte range durable: cache-line write-back plus fence on persistent memory
//! (or its tmpfs stand-in), `fdatasync` on a page-cache file system.
//! The [`Durability`] mode chosen per database decides which applies.
//!
//! ```
//! use scaledkv_pmem::{Durability, Region};
//! let dir = tempfile::tempdir().unwrap();
//! let region = Region::create(&dir.path().join("r"), 4096, Durability::Sync, false).unwrap();
//! // SAFETY: nothing else reads this fresh region.
//! unsafe { region.write(0, b"durable").unwrap() };
//! region.persist(0, 7).unwrap();
//! assert_eq!(region.read(0, 7).unwrap(), b"durable");
//! ```

pub mod collections;
pub mod crc;
mod error;
pub mod flush;
pub mod pool;
mod region;
pub mod sim;

pub use bytemuck::{self, Pod, Zeroable};
pub use error::{Error, Result};
pub use flush::{detected as detected_flush_instruction, FlushInstruction};
pub use pool::{PPtr, Pool, PoolOptions, PoolStats, Recovery, Tx};
pub use region::{medium_of_dir, sync_dir, Medium, NewBlocks, Region};

/// What "acknowledged" means for a database or pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Durability {
    /// Cache-line write-back + fence on a DAX or tmpfs mapping: survives a
    /// process crash, and power loss on real persistent memory.
    Pmem,
    /// pwrite + fdatasync (cache write-back on DAX): survives a process crash and
    /// power loss on any file system.
    Sync,
    /// Left in the page cache: survives a process crash only.
    Buffered,
}

impl Durability {
    pub fn name(self) -> &'static str {
        match self {
            Durability::Pmem => "pmem",
            Durability::Sync => "sync",
            Durability::Buffered => "buffered",
        }
    }
}

impl std::str::FromStr for Durability {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s {
            "pmem" => Ok(Durability::Pmem),
            "sync" => Ok(Durability::Sync),
            "buffered" => Ok(Durability::Buffered),
            other => Err(format!("unknown durability `{other}`: expected pmem, sync or buffered")),
        }
    }
}

impl std::fmt::Display for Durability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
