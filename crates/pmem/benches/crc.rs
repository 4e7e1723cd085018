//! CRC-32C by `scaledkv_pmem::crc` against the `crc32c` crate it replaced,
//! at the sizes the log checks (a small entry, a 256-byte value's entry,
//! a 1 KiB value's entry, a page): `cargo bench -p scaledkv-pmem --bench crc`.

use divan::{black_box, Bencher};

const SIZES: &[usize] = &[40, 280, 1040, 4096];

fn bytes(len: usize) -> Vec<u8> {
    (0..len as u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect()
}

#[divan::bench(args = SIZES)]
fn three_streams(bencher: Bencher, len: usize) {
    let data = bytes(len);
    bencher.counter(divan::counter::BytesCount::new(len)).bench(|| scaledkv_pmem::crc::crc32c(black_box(&data)));
}

#[divan::bench(args = SIZES)]
fn crc32c_crate(bencher: Bencher, len: usize) {
    let data = bytes(len);
    bencher.counter(divan::counter::BytesCount::new(len)).bench(|| crc32c::crc32c(black_box(&data)));
}

fn main() {
    // Builds the table of constants before the first sample: divan sizes
    // its samples by the first run's time.
    black_box(scaledkv_pmem::crc::crc32c(&bytes(4096)));
    divan::main();
}
