//! Cache-line write-back for persistent memory.
//!
//! On a DAX mapping a store is durable once its cache line has left the CPU
//! caches and a store fence has ordered it. The best instruction is chosen
//! once per process from CPUID: CLWB (writes back, keeps the line cached),
//! else CLFLUSHOPT (evicts, weakly ordered), else CLFLUSH (evicts, strongly
//! ordered, slowest). Every path ends with SFENCE.

use std::sync::OnceLock;

/// Bytes per cache line on every x86-64 part we target.
pub const CACHE_LINE_BYTES: usize = 64;

/// The write-back instruction this CPU supports best.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FlushInstruction {
    Clwb,
    Clflushopt,
    Clflush,
    /// The CPU caches are inside the persistence domain (eADR, CXL GPF):
    /// a store is durable once fenced, no write-back needed.
    AutoFlush,
    /// Not x86-64: no user-space flush; callers fall back to msync.
    None,
}

impl FlushInstruction {
    pub fn name(self) -> &'static str {
        match self {
            FlushInstruction::Clwb => "clwb",
            FlushInstruction::Clflushopt => "clflushopt",
            FlushInstruction::Clflush => "clflush",
            FlushInstruction::AutoFlush => "sfence (eADR)",
            FlushInstruction::None => "none",
        }
    }
}

/// The environment variable that declares the caches persistent (eADR),
/// as PMDK's `PMEM_NO_FLUSH=1` does; read each time a region is mapped.
pub const NO_FLUSH_ENV: &str = "SCALEDKV_PMEM_NO_FLUSH";

/// What a new persistent mapping uses: [`FlushInstruction::AutoFlush`]
/// when `SCALEDKV_PMEM_NO_FLUSH=1` or every NVDIMM region the kernel lists
/// reports its persistence domain as `cpu_cache`; else [`detected`].
pub fn for_persistent_mapping() -> FlushInstruction {
    let forced = std::env::var_os(NO_FLUSH_ENV).is_some_and(|v| v == "1");
    if forced || caches_are_persistent() {
        FlushInstruction::AutoFlush
    } else {
        detected()
    }
}

/// `/sys/bus/nd/devices/region*/persistence_domain`, as PMDK's
/// `pmem_has_auto_flush` reads it; false when there are no regions.
fn caches_are_persistent() -> bool {
    static PERSISTENT: OnceLock<bool> = OnceLock::new();
    *PERSISTENT.get_or_init(|| {
        let Ok(entries) = std::fs::read_dir("/sys/bus/nd/devices") else { return false };
        let domains: Vec<String> = entries
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().starts_with("region"))
            .filter_map(|e| std::fs::read_to_string(e.path().join("persistence_domain")).ok())
            .collect();
        !domains.is_empty() && domains.iter().all(|d| d.trim() == "cpu_cache")
    })
}

/// Detects the instruction once (CPUID leaf 7: EBX bit 24 = CLWB,
/// bit 23 = CLFLUSHOPT; leaf 1 EDX bit 19 = CLFLUSH).
pub fn detected() -> FlushInstruction {
    static DETECTED: OnceLock<FlushInstruction> = OnceLock::new();
    *DETECTED.get_or_init(detect)
}

#[cfg(target_arch = "x86_64")]
fn detect() -> FlushInstruction {
    use std::arch::x86_64::{__cpuid, __cpuid_count};
    // CPUID exists on every x86-64 CPU; leaf 7 is only asked for when the
    // max basic leaf (leaf 0 EAX) says it exists.
    let max_leaf = __cpuid(0).eax;
    if max_leaf >= 7 {
        let ebx = __cpuid_count(7, 0).ebx;
        if ebx & (1 << 24) != 0 {
            return FlushInstruction::Clwb;
        }
        if ebx & (1 << 23) != 0 {
            return FlushInstruction::Clflushopt;
        }
    }
    let edx = __cpuid(1).edx;
    if edx & (1 << 19) != 0 {
        FlushInstruction::Clflush
    } else {
        FlushInstruction::None
    }
}

#[cfg(not(target_arch = "x86_64"))]
fn detect() -> FlushInstruction {
    FlushInstruction::None
}

/// Writes back every cache line overlapping `[addr, addr + len)` and fences.
///
/// # Safety
/// The range must be mapped for the whole call.
pub unsafe fn flush_range(instruction: FlushInstruction, addr: *const u8, len: usize) {
    write_back_lines(instruction, addr, len);
    store_fence();
}

/// Orders every earlier write-back before any later store (SFENCE).
pub fn store_fence() {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: SFENCE is baseline SSE and has no operands.
    unsafe {
        std::arch::x86_64::_mm_sfence()
    };
    #[cfg(not(target_arch = "x86_64"))]
    std::sync::atomic::fence(std::sync::atomic::Ordering::SeqCst);
}

/// Starts the write-back of every cache line overlapping `[addr, addr + len)`
/// without waiting: durable only after the next [`store_fence`]. Several
/// ranges can share one fence, which is where transactions save time.
///
/// # Safety
/// The range must be mapped for the whole call.
#[cfg(target_arch = "x86_64")]
pub unsafe fn write_back_lines(instruction: FlushInstruction, addr: *const u8, len: usize) {
    use std::arch::asm;
    if len == 0 {
        return;
    }
    let start = addr as usize & !(CACHE_LINE_BYTES - 1);
    let end = addr as usize + len;
    let mut line = start;
    match instruction {
        FlushInstruction::Clwb => {
            while line < end {
                // SAFETY: the caller guarantees the line is mapped; CLWB
                // exists (CPUID said so) and has no other effect.
                asm!("clwb [{0}]", in(reg) line, options(nostack, preserves_flags));
                line += CACHE_LINE_BYTES;
            }
        }
        FlushInstruction::Clflushopt => {
            while line < end {
                // SAFETY: as above, for CLFLUSHOPT.
                asm!("clflushopt [{0}]", in(reg) line, options(nostack, preserves_flags));
                line += CACHE_LINE_BYTES;
            }
        }
        FlushInstruction::AutoFlush => {}
        FlushInstruction::Clflush | FlushInstruction::None => {
            while line < end {
                // SAFETY: as above; CLFLUSH is baseline SSE2.
                std::arch::x86_64::_mm_clflush(line as *const u8);
                line += CACHE_LINE_BYTES;
            }
        }
    }
}

/// # Safety
/// See the x86-64 version; other targets have no user-space write-back.
#[cfg(not(target_arch = "x86_64"))]
pub unsafe fn write_back_lines(_instruction: FlushInstruction, _addr: *const u8, _len: usize) {}

/// Copies of at least this many bytes into persistent memory use
/// non-temporal stores for their whole cache lines. PMDK's `pmem_memcpy`
/// starts at 256 bytes; here, `pmem` fills of 500,000 writes on tmpfs ran
/// 16% slower with 256-byte values that way (5 interleaved pairs) and
/// 5-7% faster with 1 KiB values (4 and 5 pairs).
pub const NONTEMPORAL_MIN_BYTES: usize = 1024;

/// Copies `len` bytes from `src` to `dst`: the cache lines of `dst` it
/// covers whole with non-temporal stores, which write the line to memory
/// without first reading it into the cache, and the partial lines at
/// either end with plain stores. The plain lines still need a write-back
/// ([`write_back_lines`]); all of it is durable after the next
/// [`store_fence`].
///
/// # Safety
/// `src` must be readable and `dst` writable for `len` bytes, and the two
/// ranges must not overlap.
pub unsafe fn copy_nontemporal(dst: *mut u8, src: *const u8, len: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{__m128i, _mm_loadu_si128, _mm_stream_si128};
        let start = dst as usize;
        let first_line = start.next_multiple_of(CACHE_LINE_BYTES);
        let last_line = (start + len) & !(CACHE_LINE_BYTES - 1);
        if first_line < last_line {
            let head = first_line - start;
            std::ptr::copy_nonoverlapping(src, dst, head);
            let mut at = head;
            while start + at < last_line {
                for part in 0..CACHE_LINE_BYTES / 16 {
                    let offset = at + part * 16;
                    // SAFETY: in bounds of both ranges (the caller's
                    // contract); `dst + offset` is 16-byte aligned as it lies
                    // in a whole line; MOVNTDQ and the unaligned load are
                    // baseline SSE2.
                    let value = _mm_loadu_si128(src.add(offset).cast::<__m128i>());
                    _mm_stream_si128(dst.add(offset).cast::<__m128i>(), value);
                }
                at += CACHE_LINE_BYTES;
            }
            std::ptr::copy_nonoverlapping(src.add(at), dst.add(at), len - at);
            return;
        }
    }
    std::ptr::copy_nonoverlapping(src, dst, len);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flush_of_a_heap_buffer_keeps_its_contents() {
        let mut buffer = vec![0u8; 1000];
        for (i, byte) in buffer.iter_mut().enumerate() {
            *byte = i as u8;
        }
        for instruction in [detected(), FlushInstruction::Clflush] {
            // SAFETY: the buffer is alive for the call.
            unsafe { flush_range(instruction, buffer.as_ptr().add(3), 900) };
        }
        assert!(buffer.iter().enumerate().all(|(i, b)| *b == i as u8));
    }

    #[test]
    fn nontemporal_copy_writes_exactly_its_range_at_any_alignment() {
        let source: Vec<u8> = (0..700u32).map(|i| (i * 7 + 1) as u8).collect();
        for dst_offset in 0..CACHE_LINE_BYTES + 1 {
            for len in [0, 1, 15, 63, 64, 65, 127, 128, 255, 256, 257, 511, 600] {
                let mut target = vec![0xAAu8; 800];
                // SAFETY: both ranges are in bounds of their own vectors.
                unsafe { copy_nontemporal(target.as_mut_ptr().add(dst_offset), source.as_ptr().add(3), len) };
                store_fence();
                assert_eq!(&target[dst_offset..dst_offset + len], &source[3..3 + len], "{dst_offset}/{len}");
                assert!(target[..dst_offset].iter().all(|b| *b == 0xAA), "{dst_offset}/{len}: before");
                assert!(target[dst_offset + len..].iter().all(|b| *b == 0xAA), "{dst_offset}/{len}: after");
            }
        }
    }
}
