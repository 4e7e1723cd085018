//! The engine's one error type. Every variant names what failed and where.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{path}: {op}: {source}")]
    Io { path: PathBuf, op: &'static str, source: std::io::Error },
    #[error(transparent)]
    Region(#[from] scaledkv_pmem::Error),
    #[error("{path}: corrupt data at offset {offset}: {reason}")]
    Corruption { path: PathBuf, offset: u64, reason: String },
    #[error("{path}: format version {found} is not supported (this build reads version {expected})")]
    UnsupportedVersion { path: PathBuf, found: u32, expected: u32 },
    #[error("key of {len} bytes exceeds the limit of {max} bytes")]
    KeyTooLarge { len: usize, max: usize },
    #[error("value of {len} bytes exceeds the limit of {max} bytes")]
    ValueTooLarge { len: usize, max: usize },
    #[error("write batch of {bytes} bytes exceeds the limit of {max} bytes")]
    BatchTooLarge { bytes: usize, max: usize },
    #[error("{path}: database is in use by another process")]
    Locked { path: PathBuf },
    #[error("{path}: no database here and create_if_missing is off")]
    NotFound { path: PathBuf },
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    #[error("a previous write failed ({0}); the database refuses writes until it is reopened")]
    Poisoned(String),
    #[error(
        "{path}: the log has no segment id left to roll to (the next would be 2^32 ids past its oldest readable \
         segment, {oldest}, or past 2^62); copy the data into a new database to write more"
    )]
    SegmentIdsExhausted { path: PathBuf, oldest: u64 },
}

pub type Result<T> = std::result::Result<T, Error>;

impl Error {
    pub(crate) fn io(path: impl Into<PathBuf>, op: &'static str) -> impl FnOnce(std::io::Error) -> Error {
        let path = path.into();
        move |source| Error::Io { path, op, source }
    }
}
