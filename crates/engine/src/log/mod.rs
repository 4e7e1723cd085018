//! The value log: record layout, segments, the writer and the reader.
pub mod marks;
pub mod reader;
pub mod record;
pub mod segment;
pub mod writer;
