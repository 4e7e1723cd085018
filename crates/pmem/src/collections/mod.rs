//! Example structures built on the pool: they are both useful and the
//! templates for writing one's own (see `docs/pmem.md`).

pub mod hashmap;
pub mod vec;

pub use hashmap::PHashMap;
pub use vec::PVec;
