//! LZF compression that writes what liblzf (Redis's) writes, byte for
//! byte, so that DUMP payloads are Redis's own. Written here because the
//! `lzf` crate's compressor zeroes a table of 65,536 eight-byte slots on
//! every call: 512 KiB of memset for each string past 20 bytes, half the
//! CPU of an RDB export of 1 KiB values (BENCHMARKS.md, fifty-ninth
//! session). Here the table lives on with its thread and is never
//! cleared: each call stamps its slots with positions above a base that
//! grows from call to call, so a slot below the base is empty. The `lzf`
//! crate still decompresses, and its compressor is the oracle of the tests.

use std::cell::RefCell;

/// liblzf's table of 2^16 slots (HLOG 16), its longest back reference
/// (offsets up to 8 KiB), match and literal run.
const SLOTS: usize = 1 << 16;
const MAX_OFFSET: usize = 1 << 13;
const MAX_MATCH: usize = (1 << 8) + (1 << 3);
const MAX_LITERALS: usize = 1 << 5;

struct Table {
    /// Position + 1 + the base of the call that wrote it.
    slots: Box<[u32]>,
    /// The next call's base.
    base: u32,
}

thread_local! {
    static TABLE: RefCell<Table> = RefCell::new(Table { slots: vec![0; SLOTS].into_boxed_slice(), base: 0 });
}

impl Table {
    /// A base for a call over `len` bytes, above every stamp before it.
    fn begin(&mut self, len: usize) -> u32 {
        if self.base as u64 + len as u64 + 2 >= u32::MAX as u64 {
            self.slots.fill(0);
            self.base = 0;
        }
        let base = self.base;
        self.base += len as u32 + 1;
        base
    }

    /// The position `slot` held in this call (0 when none: liblzf never
    /// refers back to position 0 either), and `at` in its place.
    fn swap(&mut self, slot: usize, base: u32, at: usize) -> usize {
        let held = std::mem::replace(&mut self.slots[slot], base + at as u32 + 1);
        if held > base {
            (held - base - 1) as usize
        } else {
            0
        }
    }
}

/// liblzf's hash of the (up to) four bytes in `h`.
fn slot(h: u32) -> usize {
    ((h >> 8).wrapping_sub(h.wrapping_mul(5)) as usize) & (SLOTS - 1)
}

/// `data` compressed, if that saves at least 4 bytes (what Redis asks of
/// a string it writes compressed); else None.
pub fn compress(data: &[u8]) -> Option<Vec<u8>> {
    let len = data.len();
    if len < 8 {
        return None;
    }
    let limit = len - 4;
    TABLE.with_borrow_mut(|table| {
        let base = table.begin(len);
        let mut out = Vec::with_capacity(limit + 1);
        let mut literals_from = 0;
        let mut at = 0;
        let mut h = (data[0] as u32) << 8 | data[1] as u32;
        while at < len - 2 {
            h = (h << 8) | data[at + 2] as u32;
            let from = table.swap(slot(h), base, at);
            let offset = at.wrapping_sub(from).wrapping_sub(1);
            if offset < MAX_OFFSET && at + 4 < len && from > 0 && data[from..from + 3] == data[at..at + 3] {
                let longest = (len - at - 2).min(MAX_MATCH);
                let mut matched = 3;
                while matched < longest && data[from + matched] == data[at + matched] {
                    matched += 1;
                }
                push_literals(&mut out, &data[literals_from..at]);
                // The length is written less 2 (a match is 3 bytes or more).
                let (short, high) = (matched - 2, (offset >> 8) as u8);
                if short < 7 {
                    out.push(high + ((short as u8) << 5));
                } else {
                    out.extend_from_slice(&[high + (7 << 5), (short - 7) as u8]);
                }
                out.push(offset as u8);
                if out.len() > limit {
                    return None;
                }
                // The match's last two positions go into the table, as
                // liblzf puts them.
                let next = at + matched - 2;
                h = (data[next] as u32) << 8 | data[next + 1] as u32;
                for p in next..next + 2 {
                    h = (h << 8) | data[p + 2] as u32;
                    table.swap(slot(h), base, p);
                }
                at += matched;
                literals_from = at;
            } else {
                at += 1;
            }
        }
        push_literals(&mut out, &data[literals_from..]);
        (out.len() <= limit).then_some(out)
    })
}

/// Literal runs of up to 32 bytes, each after its length less one.
fn push_literals(out: &mut Vec<u8>, literals: &[u8]) {
    for run in literals.chunks(MAX_LITERALS) {
        out.push(run.len() as u8 - 1);
        out.extend_from_slice(run);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the `lzf` crate (liblzf's algorithm, a fresh table) writes,
    /// under Redis's rule (at least 4 bytes saved).
    fn oracle(data: &[u8]) -> Option<Vec<u8>> {
        ::lzf::compress(data).ok().filter(|out| out.len() + 4 <= data.len())
    }

    fn check(data: &[u8]) {
        let ours = compress(data);
        assert_eq!(ours, oracle(data), "{} bytes", data.len());
        if let Some(out) = ours {
            assert_eq!(::lzf::decompress(&out, data.len()).unwrap(), data);
        }
    }

    #[test]
    fn writes_what_liblzf_writes() {
        check(&[b'x'; 30]);
        check(&b"abc".repeat(10));
        check(&b"Lorem ipsum dolor sit amet, consetetur sadipscing elitr, sed diam nonumy eirmod ".repeat(9));
        // Runs of exactly 32 literals before a match; the longest match.
        let mut edge: Vec<u8> = (0..32u8).map(|b| b.wrapping_mul(97)).collect();
        edge.extend_from_slice(&[7; 600]);
        check(&edge);
        // Matches that reach back to position 0 (liblzf skips them).
        check(&b"abcdabcdabcd".repeat(3));
        // Incompressible, and past the 8 KiB window.
        let noise: Vec<u8> = (0..20_000u32).map(|i| (i.wrapping_mul(2654435761) >> 13) as u8).collect();
        check(&noise);
        let far = [&b"0123456789abcdefghij"[..], &noise[..9000], b"0123456789abcdefghij"].concat();
        check(&far);
    }

    #[test]
    fn a_call_after_many_others_sees_none_of_their_positions() {
        // Stale slots from earlier calls would let a match refer back
        // past this input's start; the oracle's table is fresh each time.
        for round in 0..2000u32 {
            let data: Vec<u8> = (0..64u32).map(|i| ((i * 7 + round) % 11) as u8 + b'a').collect();
            check(&data);
        }
        // Near the stamps' end, the table is cleared and all goes on.
        TABLE.with_borrow_mut(|table| table.base = u32::MAX - 100);
        check(&b"abc".repeat(100));
        check(&b"xyz".repeat(100));
    }

    proptest! {
        #[test]
        fn any_input_compresses_as_liblzf_does(
            data in proptest::collection::vec(prop_oneof![Just(b'a'), Just(b'b'), any::<u8>()], 0..3000),
            repeat in 1usize..4,
        ) {
            check(&data.repeat(repeat));
        }
    }
}
