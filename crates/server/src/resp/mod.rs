//! The Redis wire protocol: request parsing and reply encoding.

pub mod reply;
pub mod request;

pub use reply::{Out, Protocol};
pub use request::{parse, Limits, ProtocolError};
