//! The pool image the corruption tests and the `pool_image` fuzz target
//! damage (each includes this file by path), and how they use it.

use scaledkv_pmem::collections::hashmap::MapRoot;
use scaledkv_pmem::collections::PHashMap;
use scaledkv_pmem::sim::SimMedia;
use scaledkv_pmem::{Durability, Error, Pool};

pub const POOL_BYTES: u64 = 400 << 10;

/// A pool image holding a map with some entries and the last
/// transaction's log entries (undo in `pmem` mode, redo in `sync` mode).
fn sample_image(durability: Durability) -> Vec<u8> {
    let options = PHashMap::options(POOL_BYTES, durability);
    let mut map = PHashMap::init(Pool::create_simulated::<MapRoot>(&options).unwrap()).unwrap();
    for i in 0..900u32 {
        map.insert(i * 7, i).unwrap();
    }
    map.remove(14).unwrap();
    map.into_pool().into_simulated().unwrap().bytes().to_vec()
}

/// The sample image for `durability`, made once.
pub fn image(durability: Durability) -> &'static [u8] {
    static IMAGES: std::sync::OnceLock<[Vec<u8>; 2]> = std::sync::OnceLock::new();
    let images = IMAGES.get_or_init(|| [sample_image(Durability::Pmem), sample_image(Durability::Sync)]);
    &images[(durability == Durability::Sync) as usize]
}

/// Opens and uses the image; any outcome but a panic is acceptable.
pub fn exercise(image: &[u8], durability: Durability) -> Result<usize, Error> {
    let options = PHashMap::options(POOL_BYTES, durability);
    let pool = Pool::open_simulated(SimMedia::from_image(image), &options)?;
    let _ = pool.stats();
    let mut map = PHashMap::attach(pool)?;
    let entries = map.entries()?;
    for (key, _) in entries.iter().take(50) {
        map.get(*key)?;
    }
    map.insert(5, 5)?;
    map.remove(7)?;
    Ok(entries.len())
}
