//! HyperLogLogs: PFADD, PFCOUNT, PFMERGE, in Redis 7.0's own string
//! layout (so GET, DUMP and RESTORE carry them between the two servers) and
//! with its estimator, so counts agree to the unit.
//!
//! A HyperLogLog is a string: the header `HYLL`, an encoding byte (0
//! dense, 1 sparse), three unused bytes, the cached cardinality (8 bytes,
//! little-endian; the top bit of the last set when stale), then 16,384
//! registers of 6 bits. Dense: the registers packed, 12,288 bytes. Sparse:
//! runs (ZERO `00xxxxxx`: 1-64 zero registers; XZERO `01xxxxxx yyyyyyyy`:
//! 1-16,384; VAL `1vvvvvxx`: 1-4 registers of value 1-32), until a value
//! passes 32 or the string 3,000 bytes, when it turns dense for good.

use bytes::Bytes;

use super::{err, CmdError, CmdResult, Ctx};
use crate::notify::STRING;

const P: u32 = 14;
const REGISTERS: usize = 1 << P;
const Q: u32 = 64 - P;
const BITS: usize = 6;
const REGISTER_MAX: u8 = (1 << BITS) - 1;
const HEADER: usize = 16;
const DENSE_BYTES: usize = HEADER + (REGISTERS * BITS).div_ceil(8);
const DENSE: u8 = 0;
const SPARSE: u8 = 1;
const SPARSE_MAX_BYTES: usize = 3000;
const VAL_MAX_VALUE: u8 = 32;
const VAL_MAX_LEN: usize = 4;
const ZERO_MAX_LEN: usize = 64;
const ALPHA_INF: f64 = 0.721_347_520_444_481_7;

fn invalid_object() -> CmdError {
    err("INVALIDOBJ Corrupted HLL object detected")
}

fn not_hll() -> CmdError {
    err("WRONGTYPE Key is not a valid HyperLogLog string value.")
}

/// Redis's MurmurHash64A with its seed for HyperLogLogs.
fn murmur64a(data: &[u8]) -> u64 {
    const M: u64 = 0xc6a4_a793_5bd1_e995;
    const R: u32 = 47;
    let mut h: u64 = 0xadc8_3b19 ^ (data.len() as u64).wrapping_mul(M);
    let mut chunks = data.chunks_exact(8);
    for chunk in &mut chunks {
        let mut k = u64::from_le_bytes(chunk.try_into().expect("8 bytes"));
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h ^= k;
        h = h.wrapping_mul(M);
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        for (i, &byte) in tail.iter().enumerate() {
            h ^= (byte as u64) << (8 * i);
        }
        h = h.wrapping_mul(M);
    }
    h ^= h >> R;
    h = h.wrapping_mul(M);
    h ^= h >> R;
    h
}

/// The register an element falls in and the length of its hash's run of
/// zeros plus one (at most Q + 1).
fn pattern(element: &[u8]) -> (usize, u8) {
    let hash = murmur64a(element);
    let index = (hash & (REGISTERS as u64 - 1)) as usize;
    let rest = (hash >> P) | (1 << Q);
    (index, rest.trailing_zeros() as u8 + 1)
}

fn dense_get(registers: &[u8], index: usize) -> u8 {
    let byte = index * BITS / 8;
    let shift = index * BITS % 8;
    let b0 = registers[byte] as u16;
    let b1 = registers.get(byte + 1).copied().unwrap_or(0) as u16;
    (((b0 >> shift) | (b1 << (8 - shift))) & REGISTER_MAX as u16) as u8
}

fn dense_set(registers: &mut [u8], index: usize, value: u8) {
    let byte = index * BITS / 8;
    let shift = index * BITS % 8;
    let value = value as u16;
    registers[byte] &= !((REGISTER_MAX as u16) << shift) as u8;
    registers[byte] |= (value << shift) as u8;
    if let Some(next) = registers.get_mut(byte + 1) {
        *next &= !((REGISTER_MAX as u16) >> (8 - shift)) as u8;
        *next |= (value >> (8 - shift)) as u8;
    }
}

/// One sparse opcode: how many registers it covers, their value, and its
/// bytes.
fn opcode(bytes: &[u8]) -> Option<(usize, u8, usize)> {
    let first = *bytes.first()?;
    Some(match first & 0xc0 {
        0x00 => ((first & 0x3f) as usize + 1, 0, 1),
        0x40 => (((((first & 0x3f) as usize) << 8) | *bytes.get(1)? as usize) + 1, 0, 2),
        _ => ((first & 0x3) as usize + 1, ((first >> 2) & 0x1f) + 1, 1),
    })
}

fn zero_run(len: usize, into: &mut Vec<u8>) {
    if len > ZERO_MAX_LEN {
        into.push(0x40 | ((len - 1) >> 8) as u8);
        into.push(((len - 1) & 0xff) as u8);
    } else {
        into.push((len - 1) as u8);
    }
}

fn val_opcode(value: u8, len: usize) -> u8 {
    0x80 | ((value - 1) << 2) | (len - 1) as u8
}

/// Checks a HyperLogLog's header as Redis's `isHLLObjectOrReply` does.
fn check(bytes: &[u8]) -> CmdResult {
    let valid = bytes.len() >= HEADER
        && bytes.starts_with(b"HYLL")
        && bytes[4] <= SPARSE
        && (bytes[4] != DENSE || bytes.len() == DENSE_BYTES);
    if !valid {
        return Err(not_hll());
    }
    Ok(())
}

/// Register `index` of a checked HyperLogLog, read in place.
fn register(bytes: &[u8], index: usize) -> Result<u8, CmdError> {
    if bytes[4] == DENSE {
        return Ok(dense_get(&bytes[HEADER..], index));
    }
    let (mut at, mut first) = (HEADER, 0);
    loop {
        let (span, value, size) = opcode(&bytes[at..]).ok_or_else(invalid_object)?;
        if index < first + span {
            return Ok(value);
        }
        first += span;
        at += size;
    }
}

/// A checked HyperLogLog's cached count, read in place.
fn cached(bytes: &[u8]) -> Option<u64> {
    (bytes[15] & 0x80 == 0).then(|| u64::from_le_bytes(bytes[8..16].try_into().expect("8 bytes")))
}

/// A HyperLogLog string being read or changed.
struct Hll {
    bytes: Vec<u8>,
}

impl Hll {
    /// An empty one, as Redis creates it: sparse, one XZERO, cache 0.
    fn new() -> Hll {
        let mut bytes = b"HYLL".to_vec();
        bytes.extend_from_slice(&[SPARSE, 0, 0, 0]);
        bytes.extend_from_slice(&[0; 8]);
        zero_run(REGISTERS, &mut bytes);
        Hll { bytes }
    }

    /// Checks the header as Redis's `isHLLObjectOrReply` does.
    fn parse(bytes: Vec<u8>) -> Result<Hll, CmdError> {
        check(&bytes)?;
        Ok(Hll { bytes })
    }

    fn encoding(&self) -> u8 {
        self.bytes[4]
    }

    fn invalidate_cache(&mut self) {
        self.bytes[15] |= 0x80;
    }

    fn cache(&mut self, count: u64) {
        self.bytes[8..16].copy_from_slice(&count.to_le_bytes());
    }

    /// Each run of a sparse one: its first register, length and value.
    /// Runs that do not cover the registers exactly are a corrupt value.
    fn sparse_runs(&self, mut visit: impl FnMut(usize, usize, u8)) -> CmdResult {
        let (mut at, mut index) = (HEADER, 0);
        while let Some((len, value, size)) = opcode(&self.bytes[at..]) {
            if index + len > REGISTERS {
                return Err(invalid_object());
            }
            visit(index, len, value);
            index += len;
            at += size;
        }
        if index != REGISTERS {
            return Err(invalid_object());
        }
        Ok(())
    }

    /// Every register's value, into `max` where larger (`hllMerge`).
    fn merge_into(&self, max: &mut [u8; REGISTERS]) -> CmdResult {
        if self.encoding() == DENSE {
            for (index, slot) in max.iter_mut().enumerate() {
                *slot = (*slot).max(dense_get(&self.bytes[HEADER..], index));
            }
            return Ok(());
        }
        self.sparse_runs(|first, len, value| {
            for slot in &mut max[first..first + len] {
                *slot = (*slot).max(value);
            }
        })
    }

    /// The count of registers holding each value (`reghisto`).
    fn histogram(&self) -> Result<[u32; 64], CmdError> {
        let mut histogram = [0u32; 64];
        if self.encoding() == DENSE {
            for index in 0..REGISTERS {
                histogram[dense_get(&self.bytes[HEADER..], index) as usize] += 1;
            }
        } else {
            self.sparse_runs(|_, len, value| histogram[value as usize] += len as u32)?;
        }
        Ok(histogram)
    }

    /// Turns a sparse one dense (`hllSparseToDense`), keeping the header.
    fn make_dense(&mut self) -> Result<(), CmdError> {
        if self.encoding() == DENSE {
            return Ok(());
        }
        let mut dense = vec![0u8; DENSE_BYTES];
        dense[..HEADER].copy_from_slice(&self.bytes[..HEADER]);
        dense[4] = DENSE;
        self.sparse_runs(|first, len, value| {
            if value > 0 {
                for index in first..first + len {
                    dense_set(&mut dense[HEADER..], index, value);
                }
            }
        })?;
        self.bytes = dense;
        Ok(())
    }

    /// Raises register `index` to `count`; whether it changed.
    fn set(&mut self, index: usize, count: u8) -> Result<bool, CmdError> {
        if self.encoding() == DENSE {
            let registers = &mut self.bytes[HEADER..];
            if dense_get(registers, index) >= count {
                return Ok(false);
            }
            dense_set(registers, index, count);
            return Ok(true);
        }
        match self.sparse_set(index, count)? {
            Some(changed) => Ok(changed),
            None => {
                // Too big a value or too long a string for sparse.
                self.make_dense()?;
                dense_set(&mut self.bytes[HEADER..], index, count);
                Ok(true)
            }
        }
    }

    /// `hllSparseSet`: None when the HyperLogLog must turn dense first.
    fn sparse_set(&mut self, index: usize, count: u8) -> Result<Option<bool>, CmdError> {
        if count > VAL_MAX_VALUE {
            return Ok(None);
        }
        // Find the opcode covering `index`, and the one before it.
        let (mut at, mut first, mut prev) = (HEADER, 0usize, None);
        let (span, value, size) = loop {
            let Some((span, value, size)) = opcode(&self.bytes[at..]) else { return Err(invalid_object()) };
            if index < first + span {
                break (span, value, size);
            }
            prev = Some(at);
            at += size;
            first += span;
        };
        let is_val = self.bytes[at] & 0x80 != 0;
        if is_val && value >= count {
            return Ok(Some(false));
        }
        if span == 1 && size == 1 {
            // A VAL or ZERO of one register: becomes our VAL.
            self.bytes[at] = val_opcode(count, 1);
        } else {
            let last = first + span - 1;
            let mut seq = Vec::with_capacity(5);
            if is_val {
                if index != first {
                    seq.push(val_opcode(value, index - first));
                }
                seq.push(val_opcode(count, 1));
                if index != last {
                    seq.push(val_opcode(value, last - index));
                }
            } else {
                if index != first {
                    zero_run(index - first, &mut seq);
                }
                seq.push(val_opcode(count, 1));
                if index != last {
                    zero_run(last - index, &mut seq);
                }
            }
            if seq.len() > size && self.bytes.len() + seq.len() - size > SPARSE_MAX_BYTES {
                return Ok(None);
            }
            self.bytes.splice(at..at + size, seq);
        }
        // Merge adjacent VALs of one value, scanning up to 5 opcodes from
        // the one before, as Redis does (so the bytes match its own).
        let mut p = prev.unwrap_or(HEADER);
        let mut scan = 5;
        while p < self.bytes.len() && scan > 0 {
            scan -= 1;
            let byte = self.bytes[p];
            if byte & 0xc0 == 0x40 {
                p += 2;
                continue;
            }
            if byte & 0xc0 == 0 {
                p += 1;
                continue;
            }
            if let Some(&next) = self.bytes.get(p + 1) {
                if next & 0x80 != 0 {
                    let (v1, v2) = (((byte >> 2) & 0x1f) + 1, ((next >> 2) & 0x1f) + 1);
                    let len = (byte & 0x3) as usize + 1 + (next & 0x3) as usize + 1;
                    if v1 == v2 && len <= VAL_MAX_LEN {
                        self.bytes[p + 1] = val_opcode(v1, len);
                        self.bytes.remove(p);
                        continue;
                    }
                }
            }
            p += 1;
        }
        Ok(Some(true))
    }

    /// Adds `element`; whether a register changed.
    fn add(&mut self, element: &[u8]) -> Result<bool, CmdError> {
        let (index, count) = pattern(element);
        self.set(index, count)
    }

    /// The cardinality estimate (Ertl's improved estimator, as Redis 7).
    fn count(&self) -> Result<u64, CmdError> {
        Ok(estimate(&self.histogram()?))
    }
}

fn sigma(mut x: f64) -> f64 {
    if x == 1.0 {
        return f64::INFINITY;
    }
    let (mut y, mut z) = (1.0, x);
    loop {
        x *= x;
        let previous = z;
        z += x * y;
        y += y;
        if previous == z {
            return z;
        }
    }
}

fn tau(mut x: f64) -> f64 {
    if x == 0.0 || x == 1.0 {
        return 0.0;
    }
    let (mut y, mut z) = (1.0, 1.0 - x);
    loop {
        x = x.sqrt();
        let previous = z;
        y *= 0.5;
        z -= (1.0 - x).powi(2) * y;
        if previous == z {
            return z / 3.0;
        }
    }
}

fn estimate(histogram: &[u32; 64]) -> u64 {
    let m = REGISTERS as f64;
    let mut z = m * tau((m - histogram[Q as usize + 1] as f64) / m);
    for j in (1..=Q as usize).rev() {
        z += histogram[j] as f64;
        z *= 0.5;
    }
    z += m * sigma(histogram[0] as f64 / m);
    (ALPHA_INF * m * m / z).round() as u64
}

/// The HyperLogLog at `key` (None if missing), with its expiry.
fn read(ctx: &mut Ctx<'_>, key: &[u8]) -> Result<Option<(Hll, Option<u64>)>, CmdError> {
    match ctx.read_string(key)? {
        Some((bytes, expiry)) => Ok(Some((Hll::parse(bytes)?, expiry))),
        None => Ok(None),
    }
}

pub fn pfadd(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let key = &args[1];
    let (mut hll, expiry, mut updated) = match ctx.read(key)? {
        Some(value) => {
            let bytes = value.string()?;
            check(bytes)?;
            // Most adds to a well-filled HyperLogLog change no register:
            // those are answered from the value in place, with no copy of
            // its 12 KiB and nothing written.
            let mut changes = false;
            for element in &args[2..] {
                let (index, count) = pattern(element);
                if register(bytes, index)? < count {
                    changes = true;
                    break;
                }
            }
            if !changes {
                ctx.out.int(0);
                return Ok(());
            }
            (Hll { bytes: bytes.to_vec() }, value.expiry_ms(), false)
        }
        None => (Hll::new(), None, true),
    };
    for element in &args[2..] {
        updated |= hll.add(element)?;
    }
    if updated {
        hll.invalidate_cache();
        ctx.writes.put_string(key, &hll.bytes, expiry)?;
        ctx.notify(STRING, "pfadd", key);
    }
    ctx.out.int(updated as i64);
    Ok(())
}

pub fn pfcount(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    if args.len() > 2 {
        let mut max = Box::new([0u8; REGISTERS]);
        for key in &args[1..] {
            if let Some((hll, _)) = read(ctx, key)? {
                hll.merge_into(&mut max)?;
            }
        }
        let mut histogram = [0u32; 64];
        for &value in max.iter() {
            histogram[value as usize] += 1;
        }
        ctx.out.int(estimate(&histogram) as i64);
        return Ok(());
    }
    let Some(value) = ctx.read(&args[1])? else {
        ctx.out.int(0);
        return Ok(());
    };
    let bytes = value.string()?;
    check(bytes)?;
    let count = match cached(bytes) {
        Some(count) => count,
        None => {
            // The count is cached in the value, as Redis does: a write.
            let mut hll = Hll { bytes: bytes.to_vec() };
            let expiry = value.expiry_ms();
            drop(value);
            let count = hll.count()?;
            hll.cache(count);
            ctx.writes.put_string(&args[1], &hll.bytes, expiry)?;
            // No event, as in Redis, which sends its replicas the PFCOUNT.
            ctx.note_unpublished(&args[1]);
            count
        }
    };
    ctx.out.int(count as i64);
    Ok(())
}

pub fn pfmerge(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let mut max = Box::new([0u8; REGISTERS]);
    let mut dense = false;
    // The destination is the first source too: read once.
    let mut destination = None;
    for (at, key) in args[1..].iter().enumerate() {
        if let Some((hll, expiry)) = read(ctx, key)? {
            dense |= hll.encoding() == DENSE;
            hll.merge_into(&mut max)?;
            if at == 0 {
                destination = Some((hll, expiry));
            }
        }
    }
    let (mut target, expiry) = destination.unwrap_or_else(|| (Hll::new(), None));
    if dense {
        target.make_dense()?;
    }
    for (index, &value) in max.iter().enumerate() {
        if value > 0 {
            target.set(index, value)?;
        }
    }
    target.invalidate_cache();
    ctx.writes.put_string(&args[1], &target.bytes, expiry)?;
    ctx.notify(STRING, "pfadd", &args[1]);
    ctx.out.ok();
    Ok(())
}

/// PFDEBUG GETREG|DECODE|ENCODING|TODENSE key, as Redis 7.0 answers it:
/// GETREG and TODENSE turn a sparse one dense for good, as Redis does.
pub fn pfdebug(ctx: &mut Ctx<'_>, args: &[Bytes]) -> CmdResult {
    let (sub, key) = (String::from_utf8_lossy(&args[1]), &args[2]);
    let Some((mut hll, expiry)) = read(ctx, key)? else {
        return Err(err("ERR The specified key does not exist"));
    };
    let densify = |ctx: &mut Ctx<'_>, hll: &mut Hll| -> Result<bool, CmdError> {
        if hll.encoding() == DENSE {
            return Ok(false);
        }
        hll.make_dense()?;
        ctx.writes.put_string(key, &hll.bytes, expiry)?;
        // No keyspace event, as in Redis; the replicas get the new value.
        ctx.note_unpublished(key);
        Ok(true)
    };
    match sub.to_ascii_lowercase().as_str() {
        "getreg" => {
            densify(ctx, &mut hll)?;
            ctx.out.array(REGISTERS);
            for index in 0..REGISTERS {
                ctx.out.int(dense_get(&hll.bytes[HEADER..], index) as i64);
            }
        }
        "decode" => {
            if hll.encoding() != SPARSE {
                return Err(err("ERR HLL encoding is not sparse"));
            }
            ctx.out.bulk(decode(&hll.bytes[HEADER..]).as_bytes());
        }
        "encoding" => ctx.out.simple(if hll.encoding() == DENSE { "dense" } else { "sparse" }),
        "todense" => {
            let converted = densify(ctx, &mut hll)?;
            ctx.out.int(converted as i64);
        }
        _ => return Err(err(format!("ERR Unknown PFDEBUG subcommand '{sub}'"))),
    }
    Ok(())
}

/// Sparse opcodes as PFDEBUG DECODE spells them: `z:len` (ZERO), `Z:len`
/// (XZERO), `v:value,len` (VAL). A cut XZERO reads a zero second byte, as
/// Redis's reads the string's terminating NUL.
fn decode(opcodes: &[u8]) -> String {
    let mut padded = opcodes.to_vec();
    padded.push(0);
    let (mut at, mut words) = (0, Vec::new());
    while at < opcodes.len() {
        let (len, value, size) = opcode(&padded[at..]).expect("a byte at least");
        words.push(match padded[at] & 0xc0 {
            0x00 => format!("z:{len}"),
            0x40 => format!("Z:{len}"),
            _ => format!("v:{value},{len}"),
        });
        at += size;
    }
    words.join(" ")
}

/// PFSELFTEST: Redis's own self-test of the register packing and of the
/// estimator's error up to ten million elements, sparse and dense side
/// by side. It takes a second or so; other clients are served meanwhile.
pub fn pfselftest(ctx: &mut Ctx<'_>, _args: &[Bytes]) -> CmdResult {
    super::blocking(|| self_test(1000, 10_000_000)).map_err(|failure| err(format!("ERR TESTFAILED {failure}")))?;
    ctx.out.ok();
    Ok(())
}

/// `pfselftestCommand`'s two tests: `rounds` of random values in every
/// register, then elements added up to `cardinality`.
fn self_test(rounds: usize, cardinality: u64) -> Result<(), String> {
    use rand::Rng;
    let mut rng = rand::thread_rng();
    // 1: every register keeps its value and leaves its neighbours alone.
    let mut registers = vec![0u8; DENSE_BYTES - HEADER];
    let mut expected = [0u8; REGISTERS];
    for _ in 0..rounds {
        for (index, slot) in expected.iter_mut().enumerate() {
            *slot = rng.gen::<u8>() & REGISTER_MAX;
            dense_set(&mut registers, index, *slot);
        }
        for (index, &value) in expected.iter().enumerate() {
            let found = dense_get(&registers, index);
            if found != value {
                return Err(format!("Register {index} should be {value} but is {found}"));
            }
        }
    }
    // 2: the estimate stays within six standard errors, and the sparse
    // and dense encodings agree while the sparse one lasts.
    let mut dense = Hll::new();
    dense.make_dense().map_err(|_| "dense/sparse disagree")?;
    let mut sparse = Hll::new();
    let relative_error = 1.04 / (REGISTERS as f64).sqrt();
    let seed: u64 = rng.gen();
    let mut checkpoint = 1u64;
    for j in 1..=cardinality {
        let element = (j ^ seed).to_ne_bytes();
        let failed = |_| "dense/sparse disagree".to_string();
        dense.add(&element).map_err(failed)?;
        sparse.add(&element).map_err(failed)?;
        if j != checkpoint {
            continue;
        }
        if j < SPARSE_MAX_BYTES as u64 / 2 && sparse.encoding() != SPARSE {
            return Err("sparse encoding not used".into());
        }
        let count = dense.count().map_err(failed)?;
        if count != sparse.count().map_err(failed)? {
            return Err("dense/sparse disagree".into());
        }
        // At 10 a collision makes a bigger error likely now and then.
        let max_error = if j == 10 { 1 } else { (relative_error * 6.0 * checkpoint as f64).ceil() as u64 };
        let error = checkpoint.abs_diff(count);
        if error > max_error {
            return Err(format!("Too big error. card:{checkpoint} abserr:{error}"));
        }
        checkpoint *= 10;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn elements_land_where_redis_puts_them() {
        // Redis 7.0.15's `PFADD x hello` then `GET x`: XZERO 9216, VAL 1,
        // XZERO 7167; and for the empty element XZERO 5938, VAL 2.
        assert_eq!(pattern(b"hello"), (9216, 1));
        assert_eq!(pattern(b""), (5938, 2));
        let mut hll = Hll::new();
        hll.add(b"hello").unwrap();
        assert_eq!(&hll.bytes[HEADER..], b"c\xff\x80[\xfe");
    }

    #[test]
    fn an_empty_hll_is_one_xzero_and_counts_zero() {
        let hll = Hll::new();
        assert_eq!(hll.bytes.len(), HEADER + 2);
        assert_eq!(&hll.bytes[HEADER..], &[0x7f, 0xff]);
        assert_eq!(hll.count().unwrap(), 0);
    }

    #[test]
    fn sparse_and_dense_agree_and_estimates_are_close() {
        let mut sparse = Hll::new();
        for i in 0..20_000u32 {
            sparse.add(format!("element:{i}").as_bytes()).unwrap();
        }
        assert_eq!(sparse.encoding(), DENSE, "20,000 elements pass the sparse limit");
        let count = sparse.count().unwrap() as f64;
        assert!((count - 20_000.0).abs() / 20_000.0 < 0.02, "{count}");
        let mut small = Hll::new();
        for i in 0..100u32 {
            small.add(format!("e{i}").as_bytes()).unwrap();
        }
        assert_eq!(small.encoding(), SPARSE);
        let mut dense = Hll { bytes: small.bytes.clone() };
        dense.make_dense().unwrap();
        assert_eq!(small.histogram().unwrap(), dense.histogram().unwrap());
        assert_eq!(small.count().unwrap(), dense.count().unwrap());
        assert!((small.count().unwrap() as i64 - 100).abs() <= 2);
    }

    #[test]
    fn damaged_sparse_data_is_an_error_not_a_panic() {
        let mut hll = Hll::new();
        hll.bytes.truncate(HEADER + 1);
        assert!(hll.count().is_err());
        assert!(hll.add(b"x").is_err());
        assert!(Hll::parse(b"HYLL\x00".to_vec()).is_err());
        assert!(Hll::parse(b"nothll-at-all-long-enough".to_vec()).is_err());
    }

    #[test]
    fn the_self_test_passes_on_a_smaller_scale() {
        assert_eq!(self_test(5, 200_000), Ok(()));
    }

    #[test]
    fn decode_spells_opcodes_as_redis_does() {
        let mut hll = Hll::new();
        hll.add(b"hello").unwrap();
        assert_eq!(decode(&hll.bytes[HEADER..]), "Z:9216 v:1,1 Z:7167");
        assert_eq!(decode(&[0x05, 0x8d]), "z:6 v:4,2");
        // A cut XZERO: Redis reads the NUL after the string's end.
        assert_eq!(decode(&[0x7f]), "Z:16129");
    }
}
