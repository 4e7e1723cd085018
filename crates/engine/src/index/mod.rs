//! The index: key -> newest entry location.
pub mod chunk;
pub mod key;
pub mod memtable;
pub mod pending;
pub mod points;
pub mod runs;
