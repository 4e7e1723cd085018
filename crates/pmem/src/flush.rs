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
}
