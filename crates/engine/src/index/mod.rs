//! The index: key -> newest entry location.
pub mod memtable;
