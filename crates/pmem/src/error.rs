//! The crate's one error type: regions, pools, the allocator and
//! transactions. Every variant names the file (or `<simulated>`) and the
//! offset or size involved.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {op}: {source}")]
    Io { path: PathBuf, op: &'static str, source: std::io::Error },
    #[error("{path}: durability `pmem` needs a DAX (MAP_SYNC) or tmpfs mount; this file is on a page-cache file system, use `sync`")]
    PmemNeedsDax { path: PathBuf },
    #[error("{path}: range {offset}+{len} is outside the {size}-byte region")]
    OutOfRange { path: PathBuf, offset: usize, len: usize, size: usize },
    #[error("{path}: a region must be at least one byte")]
    Empty { path: PathBuf },
    #[error("{path}: not a ScaledKV pool (no pool magic; was its creation interrupted?)")]
    NotAPool { path: PathBuf },
    #[error("{path}: pool format version {found}; this build reads version {supported}")]
    FormatVersion { path: PathBuf, found: u32, supported: u32 },
    #[error("{path}: pool layout is `{found}`, the program expects `{expected}`")]
    LayoutMismatch { path: PathBuf, expected: String, found: String },
    #[error("{path}: corrupt pool: {detail}")]
    CorruptPool { path: PathBuf, detail: String },
    #[error("{path}: the root object is {stored} bytes, the program's root type is {requested} bytes")]
    RootMismatch { path: PathBuf, stored: u64, requested: u64 },
    #[error("a pool of {requested} bytes is too small: the minimum is {minimum}")]
    PoolTooSmall { requested: u64, minimum: u64 },
    #[error("{path}: out of space: {requested} bytes requested, {free} bytes free (largest free run {largest_free})")]
    OutOfSpace { path: PathBuf, requested: u64, free: u64, largest_free: u64 },
    #[error("alignment {align} is not supported: pool objects are aligned to at most 64 bytes")]
    Alignment { align: usize },
    #[error("{path}: pointer {offset:#x} (+{len} bytes) {reason}")]
    BadPointer { path: PathBuf, offset: u64, len: u64, reason: &'static str },
    #[error("{path}: free of {offset:#x}: not the start of an allocated object")]
    InvalidFree { path: PathBuf, offset: u64 },
    #[error("{path}: transaction too large: its log needs more than {capacity} bytes (raise PoolOptions::log_bytes)")]
    TxLogFull { path: PathBuf, capacity: u64 },
    #[error("{path}: an earlier transaction could not be rolled back ({reason}); reopen the pool to recover")]
    Poisoned { path: PathBuf, reason: String },
}

pub type Result<T> = std::result::Result<T, Error>;
