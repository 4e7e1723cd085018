//! CRC-32C (Castagnoli), the checksum of every log entry, frame, header and
//! pool record: the `crc32c` crate's checksum, computed faster for the
//! sizes the log checks.
//!
//! Why by hand: a durable one-thread fill of 1 KiB values spent 8% of its
//! throughput on the entry's checksum (a build that skipped it ran 8-9%
//! faster), and a random read checks one too. The `crc32c` crate runs
//! three streams of 256 bytes at a time only in blocks of 768, then the
//! rest of a 1 KiB entry (272 bytes) one 8-byte word after another, each
//! waiting for the last (the instruction takes 3 cycles and can start one
//! per cycle). Here the three streams split the whole buffer in thirds
//! and are joined once, so all but the last few bytes go three at a time
//! (`cargo bench -p scaledkv-pmem --bench crc`, medians): 1,040 bytes
//! 70 -> 51 ns, 280 bytes 34 -> 20 ns, 40 bytes 11 -> 7 ns, 4 KiB 218 ->
//! 177 ns. The durable one-thread fill of 1 KiB values on tmpfs: 1.23M ->
//! 1.28M writes/s (medians of 6 interleaved pairs); readseq +22%
//! (BENCHMARKS.md, fifty-fourth session).
//!
//! Joining: the checksum is linear in its state, so the state after `A`
//! then `B` is the state after `A` moved past `|B|` zero bytes, XOR the
//! checksum of `B` from a zero state. Moving a state past `n` bytes is a
//! multiplication by `x^(8n)` modulo the polynomial: one carry-less
//! multiplication by a constant `x^(8n-33)`, whose 64-bit product the
//! CRC instruction itself reduces (Intel, "Fast CRC Computation for iSCSI
//! Polynomial Using CRC32 Instruction", 2011). The constants for every
//! stream length come from a table built on first use.

/// The checksum of `data`.
pub fn crc32c(data: &[u8]) -> u32 {
    crc32c_append(0, data)
}

/// The checksum of the bytes whose checksum is `crc` followed by `data`.
pub fn crc32c_append(crc: u32, data: &[u8]) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("sse4.2") && std::arch::is_x86_feature_detected!("pclmulqdq") {
        // SAFETY: both features were just detected.
        return unsafe { three_streams::append(crc, data) };
    }
    crc32c::crc32c_append(crc, data)
}

#[cfg(target_arch = "x86_64")]
mod three_streams {
    use std::arch::x86_64::{_mm_clmulepi64_si128, _mm_crc32_u64, _mm_crc32_u8, _mm_cvtsi128_si64, _mm_cvtsi64_si128};
    use std::sync::OnceLock;

    /// The polynomial, bit-reflected as the instruction uses it.
    const POLY: u32 = 0x82F6_3B78;
    /// The longest stream of one round: longer buffers take several.
    const MAX_STREAM_BYTES: usize = 4096;
    /// Shorter buffers go one word at a time: joining costs two
    /// multiplications, more than three streams save below ~4 words each.
    const MIN_SPLIT_BYTES: usize = 3 * 8 * 4;

    /// `r * x` modulo the polynomial, for a bit-reflected `r`.
    fn times_x(r: u32) -> u32 {
        if r & 1 != 0 {
            (r >> 1) ^ POLY
        } else {
            r >> 1
        }
    }

    /// Entry `i`: the constant that moves a state past a stream of
    /// `8 * (i + 1)` bytes, `x^(64 (i + 1) - 33)`.
    fn constants() -> &'static [u64] {
        static TABLE: OnceLock<Vec<u64>> = OnceLock::new();
        TABLE.get_or_init(|| {
            // x^0, bit-reflected, times x^31.
            let mut k = (0..64 - 33).fold(0x8000_0000u32, |r, _| times_x(r));
            (0..MAX_STREAM_BYTES / 8)
                .map(|_| {
                    let this = k as u64;
                    k = (0..64).fold(k, |r, _| times_x(r));
                    this
                })
                .collect()
        })
    }

    fn word(bytes: &[u8], at: usize) -> u64 {
        u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
    }

    /// `state` moved past the bytes whose constant is `k`.
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    fn shift(state: u64, k: u64) -> u64 {
        let product = _mm_clmulepi64_si128(_mm_cvtsi64_si128(state as i64), _mm_cvtsi64_si128(k as i64), 0x00);
        _mm_crc32_u64(0, _mm_cvtsi128_si64(product) as u64)
    }

    /// # Safety
    /// The CPU must have SSE4.2 and PCLMULQDQ.
    #[target_feature(enable = "sse4.2,pclmulqdq")]
    pub unsafe fn append(crc: u32, mut data: &[u8]) -> u32 {
        let mut state = !crc as u64;
        while data.len() >= MIN_SPLIT_BYTES {
            let stream = (data.len() / 24 * 8).min(MAX_STREAM_BYTES);
            let (a, rest) = data.split_at(stream);
            let (b, rest) = rest.split_at(stream);
            let (c, rest) = rest.split_at(stream);
            let (mut sa, mut sb, mut sc) = (state, 0, 0);
            for at in (0..stream).step_by(8) {
                sa = _mm_crc32_u64(sa, word(a, at));
                sb = _mm_crc32_u64(sb, word(b, at));
                sc = _mm_crc32_u64(sc, word(c, at));
            }
            let k = constants()[stream / 8 - 1];
            state = shift(shift(sa, k) ^ sb, k) ^ sc;
            data = rest;
        }
        let words = data.len() / 8 * 8;
        for at in (0..words).step_by(8) {
            state = _mm_crc32_u64(state, word(data, at));
        }
        let mut state = state as u32;
        for &byte in &data[words..] {
            state = _mm_crc32_u8(state, byte);
        }
        !state
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Every length up to a few streams' worth, at every alignment, from
    /// a zero and from a running checksum, is the `crc32c` crate's.
    #[test]
    fn every_short_length_matches_the_reference() {
        let bytes: Vec<u8> = (0..4000u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        for len in 0..1200 {
            for offset in 0..8 {
                let data = &bytes[offset..offset + len];
                assert_eq!(crc32c(data), crc32c::crc32c(data), "length {len}, offset {offset}");
                assert_eq!(crc32c_append(0xDEAD_BEEF, data), crc32c::crc32c_append(0xDEAD_BEEF, data));
            }
        }
        // The check value of the standard ("123456789").
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
    }

    proptest! {
        /// Long buffers take several rounds; split anywhere, appending
        /// gives the checksum of the whole.
        #[test]
        fn any_buffer_matches_the_reference(data in proptest::collection::vec(any::<u8>(), 0..40_000), split in any::<prop::sample::Index>(), seed in any::<u32>()) {
            prop_assert_eq!(crc32c_append(seed, &data), crc32c::crc32c_append(seed, &data));
            let at = split.index(data.len() + 1);
            prop_assert_eq!(crc32c_append(crc32c(&data[..at]), &data[at..]), crc32c::crc32c(&data));
        }
    }
}
