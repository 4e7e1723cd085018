//! Access frequencies for cache mode's LFU eviction (`Options::lfu`).
//!
//! Redis keeps an 8-bit logarithmic counter in every key (`lfu-log-factor`:
//! a hit raises a counter `c` with probability `1 / ((c - 5) * factor + 1)`,
//! so 255 stands for about a million hits at the default 10), starts new
//! keys at 5 (`LFU_INIT_VAL`) so that they are not the first to go, and
//! takes one off every `lfu-decay-time` minutes a key is idle. Eviction
//! samples keys and drops the lowest counter.
//!
//! The log has no per-key object to hold the counter (its entries are
//! immutable and CRC-checked, and an entry's offset changes with every
//! overwrite, GC copy and second chance), so the counters live in a
//! count-min sketch keyed by the key's hash, as TinyLFU's frequency sketch
//! does: four rows of 8-bit cells, a key's counter the least of its four
//! cells (all in one cache line), raised by conservative update (only the
//! cells at that least value). Collisions can only overstate a counter;
//! with rows at least twice as wide as there are keys, a key's four cells
//! are all shared about 2% of the time. 8-16 bytes of DRAM a key (256 KiB at least), only
//! while an LFU policy is on. A key keeps its history when it is overwritten, evicted and
//! written again, as Redis keeps the counter across an overwrite. Reads
//! count (`Db::get`, not snapshot reads, scans or `Db::peek_pinned`);
//! writes only start a new key at 5.
//!
//! Decay is global: every `decay_minutes` every non-zero cell loses one,
//! which is Redis's per-key decay (one per idle period, applied when the
//! key is next touched) applied to every key at once.
//!
//! Eviction (`evict.rs`) goes through the log's oldest segment, not a
//! sample, so "the lowest counter" becomes a threshold: an entry is copied
//! forward if its counter is above it (at it, if read since written, within
//! a bound). The threshold is the counter at or below which a quarter of
//! the cache's keys are, from a sample of the keys of the entries written
//! (new or copied forward: what a pass of the cache holds). Not from the
//! counters of the entries eviction has just seen: the oldest segment may
//! hold nothing but keys copied forward together, all hot, and keeping a
//! share of those dropped the rest at every pass.

use std::cell::Cell;
use std::hash::BuildHasher;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use arc_swap::ArcSwap;
use parking_lot::Mutex;

/// Redis's counter for a new key.
pub const LFU_INIT_VAL: u8 = 5;

/// Eviction lets go of the entries whose counters are among the lowest
/// this share of the cache's (Redis evicts the lowest of its samples).
const EVICT_SHARE: f64 = 0.25;

/// Key hashes sampled from the entries written (new, or copied forward),
/// about this many over one pass of the cache: what the cache holds.
const SAMPLE: usize = 1024;

/// Entries at the threshold and read since written are kept while fewer
/// than this share of the decisions since it was chosen kept theirs.
const TIED_SHARE: f64 = 0.75;

/// Eviction decisions between two choices of the threshold.
const DECISIONS_PER_THRESHOLD: u64 = 128;

/// Rows of the sketch: a key's counter is the least of its four cells.
const ROWS: usize = 4;

/// Cells per row, at least.
const MIN_WIDTH: usize = 1 << 16;

/// Bytes of the block that holds a key's cells, one per row.
const BLOCK: usize = 64;

/// Redis's LFU settings (`lfu-log-factor`, `lfu-decay-time`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Lfu {
    /// How many hits a counter step takes as the counter grows: Redis's
    /// `lfu-log-factor` (default 10).
    pub log_factor: u32,
    /// Minutes after which every counter loses one: Redis's
    /// `lfu-decay-time` (default 1; 0: never).
    pub decay_minutes: u32,
}

impl Default for Lfu {
    fn default() -> Self {
        Lfu { log_factor: 10, decay_minutes: 1 }
    }
}

/// The sketch: `ROWS` rows of `width` one-byte cells, 8 to a word, laid
/// out as 64-byte blocks of four 16-cell rows each.
struct Sketch {
    blocks: Box<[Block]>,
    /// Cells per row, a power of two.
    width: usize,
}

/// One cache line of cells.
#[repr(align(64))]
struct Block([AtomicU64; BLOCK / 8]);

impl Sketch {
    fn new(width: usize) -> Sketch {
        let width = width.next_power_of_two().max(MIN_WIDTH);
        let blocks = (0..ROWS * width / BLOCK).map(|_| Block(std::array::from_fn(|_| AtomicU64::new(0)))).collect();
        Sketch { blocks, width }
    }

    /// The cells of a key's hash: one 64-byte block (one cache line, so a
    /// read costs one miss rather than four, as in Caffeine's sketch)
    /// picked by the hash's high half, and in it one of 16 cells in each
    /// of the block's four 16-byte rows, picked by 4 bits each.
    fn cells(&self, hash: u64) -> [usize; ROWS] {
        let block = ((hash >> 32) as usize & (self.blocks() - 1)) * BLOCK;
        std::array::from_fn(|row| block + row * (BLOCK / ROWS) + (hash >> (4 * row)) as usize % (BLOCK / ROWS))
    }

    fn blocks(&self) -> usize {
        self.blocks.len()
    }

    /// The word that holds cell `at`.
    fn word(&self, at: usize) -> &AtomicU64 {
        &self.blocks[at / BLOCK].0[at % BLOCK / 8]
    }

    fn words(&self) -> impl Iterator<Item = &AtomicU64> {
        self.blocks.iter().flat_map(|block| block.0.iter())
    }

    fn cell(&self, at: usize) -> u8 {
        (self.word(at).load(Ordering::Relaxed) >> (at % 8 * 8)) as u8
    }

    /// Sets cell `at` from `old` to `new` unless another thread changed it
    /// first (then that thread's change stands: counters are estimates).
    fn replace(&self, at: usize, old: u8, new: u8) {
        let shift = at % 8 * 8;
        let _ = self.word(at).fetch_update(Ordering::Relaxed, Ordering::Relaxed, |word| {
            ((word >> shift) as u8 == old).then_some(word & !(0xff << shift) | (new as u64) << shift)
        });
    }

    fn estimate(&self, cells: &[usize; ROWS]) -> u8 {
        cells.iter().map(|&at| self.cell(at)).min().expect("rows")
    }

    /// Raises the cells of `cells` that are below `to` (all of them at
    /// the least value, conservative update) to `to`.
    fn raise(&self, cells: &[usize; ROWS], to: u8) {
        for &at in cells {
            let old = self.cell(at);
            if old < to {
                self.replace(at, old, to);
            }
        }
    }

    /// Takes one off every non-zero cell.
    fn decay(&self) {
        const LOW: u64 = 0x7f7f_7f7f_7f7f_7f7f;
        const HIGH: u64 = 0x8080_8080_8080_8080;
        for word in self.words() {
            let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
                // The high bit of each byte that is not zero, moved down
                // to its low bit: one to subtract from it, with no borrow.
                let nonzero = (((w & LOW) + LOW) | w) & HIGH;
                (nonzero != 0).then_some(w - (nonzero >> 7))
            });
        }
    }

    /// A sketch `width` wide holding this one's counters: a key's block
    /// there is its block here plus a multiple of this one's block count
    /// (and in it, the same cells), so no counter drops.
    fn widened(&self, width: usize) -> Sketch {
        let wider = Sketch::new(width);
        for (at, block) in wider.blocks.iter().enumerate() {
            for (word, old) in block.0.iter().zip(&self.blocks[at % self.blocks.len()].0) {
                word.store(old.load(Ordering::Relaxed), Ordering::Relaxed);
            }
        }
        wider
    }

    fn bytes(&self) -> usize {
        self.blocks.len() * BLOCK
    }
}

/// Eviction's threshold (`Frequencies::keeps`).
struct Threshold {
    decisions: u64,
    /// Entries with a counter above this are kept.
    counter: u8,
    /// Entries kept since the threshold was chosen.
    kept: u64,
}

/// A database's access frequencies (`Inner::lfu`).
pub struct Frequencies {
    sketch: ArcSwap<Sketch>,
    /// `Lfu`'s two settings, read at every hit.
    log_factor: AtomicU32,
    decay_minutes: AtomicU32,
    hasher: foldhash::quality::FixedState,
    /// When the counters last lost one.
    decayed_at: Mutex<Instant>,
    /// `SAMPLE` key hashes (0: none yet), the next slot, and the odds a
    /// written entry's key is sampled (an `f64`'s bits).
    sample: Box<[AtomicU64]>,
    sampled: AtomicUsize,
    sample_odds: AtomicU64,
    threshold: Mutex<Threshold>,
}

thread_local! {
    /// A xorshift state per thread for the counters' coin flips.
    static COIN: Cell<u64> = Cell::new({
        let seed = std::hash::BuildHasher::hash_one(&foldhash::fast::RandomState::default(), std::thread::current().id());
        seed | 1
    });
}

/// A uniform draw in [0, 1).
fn coin() -> f64 {
    COIN.with(|state| {
        let mut x = state.get();
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state.set(x);
        (x >> 11) as f64 / (1u64 << 53) as f64
    })
}

impl Frequencies {
    /// Counters for about `keys` keys (the sketch widens as keys grow:
    /// `tick`).
    pub fn new(settings: Lfu, keys: usize) -> Frequencies {
        Frequencies {
            sketch: ArcSwap::from_pointee(Sketch::new(keys.saturating_mul(2))),
            log_factor: AtomicU32::new(settings.log_factor),
            decay_minutes: AtomicU32::new(settings.decay_minutes),
            hasher: foldhash::quality::FixedState::with_seed(0x5ca1_ed4b),
            decayed_at: Mutex::new(Instant::now()),
            sample: (0..SAMPLE).map(|_| AtomicU64::new(0)).collect(),
            sampled: AtomicUsize::new(0),
            sample_odds: AtomicU64::new(sample_odds(keys).to_bits()),
            threshold: Mutex::new(Threshold { decisions: 0, counter: LFU_INIT_VAL, kept: 0 }),
        }
    }

    pub fn settings(&self) -> Lfu {
        Lfu {
            log_factor: self.log_factor.load(Ordering::Relaxed),
            decay_minutes: self.decay_minutes.load(Ordering::Relaxed),
        }
    }

    pub fn set_settings(&self, settings: Lfu) {
        self.log_factor.store(settings.log_factor, Ordering::Relaxed);
        self.decay_minutes.store(settings.decay_minutes, Ordering::Relaxed);
    }

    /// `key`'s counter, as Redis's `OBJECT FREQ` gives it.
    pub fn get(&self, key: &[u8]) -> u8 {
        let sketch = self.sketch.load();
        sketch.estimate(&sketch.cells(self.hasher.hash_one(key)))
    }

    /// A read of `key`: its counter goes up by Redis's odds.
    pub fn read(&self, key: &[u8]) {
        let sketch = self.sketch.load();
        let cells = sketch.cells(self.hasher.hash_one(key));
        self.count_hit(&sketch, &cells, sketch.estimate(&cells));
    }

    /// The lookup a write of `key` makes that did not read it (Redis
    /// counts it): a hit, but for a key below `LFU_INIT_VAL` (new, or idle
    /// for long), which the write then raises to it anyway: so a blind SET
    /// of a new key makes four compare-and-swaps on the sketch, not eight.
    pub fn lookup_before_write(&self, key: &[u8]) {
        let sketch = self.sketch.load();
        let cells = sketch.cells(self.hasher.hash_one(key));
        match sketch.estimate(&cells) {
            counter if counter < LFU_INIT_VAL => {}
            counter => self.count_hit(&sketch, &cells, counter),
        }
    }

    /// A write of `key`: a new key (or one idle for long) starts at
    /// `LFU_INIT_VAL`, as in Redis. A write is not a hit: Redis counts the
    /// lookup a write command makes, and the server's writes read their
    /// key first (which counts), so counting the write too would count
    /// a SET or an INCR twice.
    pub fn write(&self, key: &[u8]) {
        let hash = self.hasher.hash_one(key);
        let sketch = self.sketch.load();
        let cells = sketch.cells(hash);
        if sketch.estimate(&cells) < LFU_INIT_VAL {
            sketch.raise(&cells, LFU_INIT_VAL);
        }
        self.sample_entry(hash);
    }

    /// An entry of `key` copied forward (by eviction or GC): it is in the
    /// cache for another pass.
    pub fn copied(&self, key: &[u8]) {
        self.sample_entry(self.hasher.hash_one(key));
    }

    /// Samples a written entry's key hash, at the odds that keep about
    /// `SAMPLE` of them over one pass of the cache.
    fn sample_entry(&self, hash: u64) {
        if coin() < f64::from_bits(self.sample_odds.load(Ordering::Relaxed)) {
            let at = self.sampled.fetch_add(1, Ordering::Relaxed) % SAMPLE;
            // A hash of 0 reads as an empty slot: one key in 2^64 is not
            // sampled.
            self.sample[at].store(hash, Ordering::Relaxed);
        }
    }

    /// Raises a counter at `counter` by one with Redis's odds
    /// (`LFULogIncr`).
    fn count_hit(&self, sketch: &Sketch, cells: &[usize; ROWS], counter: u8) {
        if counter < u8::MAX {
            let base = counter.saturating_sub(LFU_INIT_VAL) as f64;
            let odds = 1.0 / (base * self.log_factor.load(Ordering::Relaxed) as f64 + 1.0);
            if coin() < odds {
                sketch.raise(cells, counter + 1);
            }
        }
    }

    /// Raises `key`'s counter to `counter` if it is lower (Redis's RESTORE
    /// ... FREQ, and a renamed key, which keeps its counter). Never lower:
    /// a key's cells hold other keys' counts too.
    pub fn raise(&self, key: &[u8], counter: u8) {
        let sketch = self.sketch.load();
        sketch.raise(&sketch.cells(self.hasher.hash_one(key)), counter);
    }

    /// Whether eviction copies forward an entry of `key`: its counter is
    /// above the threshold, the counter at or below which `EVICT_SHARE` of
    /// the sampled keys' counters are (chosen again every
    /// `DECISIONS_PER_THRESHOLD` decisions), and above `LFU_INIT_VAL` (a
    /// key never used since it was written is never kept). At the
    /// threshold, an entry read since it was written (`read_since`) is
    /// kept while fewer than `TIED_SHARE` of the decisions since the
    /// threshold was chosen kept theirs: the counters' low steps are
    /// coarse (one read makes 6, the next takes ~11 more), so recency
    /// orders the keys within a step, but a stream of new keys each read
    /// once is all at the threshold and read since: kept without a bound,
    /// eviction copied everything until it gave up second chances and
    /// dropped the hot keys with the rest (BENCHMARKS.md, fifty-seventh
    /// session).
    pub fn keeps(&self, key: &[u8], read_since: bool) -> bool {
        let counter = self.get(key);
        let mut threshold = self.threshold.lock();
        if threshold.decisions.is_multiple_of(DECISIONS_PER_THRESHOLD) {
            threshold.counter = self.lowest_share().max(LFU_INIT_VAL);
            threshold.kept = 0;
        }
        let window = threshold.decisions % DECISIONS_PER_THRESHOLD;
        threshold.decisions += 1;
        let at = threshold.counter;
        let tied = counter == at && at > LFU_INIT_VAL && read_since;
        let keep = counter > at || (tied && (threshold.kept as f64) < TIED_SHARE * window as f64);
        threshold.kept += u64::from(keep);
        keep
    }

    /// The counter below which `EVICT_SHARE` of the sampled keys' are
    /// (`LFU_INIT_VAL` before any sample).
    fn lowest_share(&self) -> u8 {
        let sketch = self.sketch.load();
        let mut counters: Vec<u8> = self
            .sample
            .iter()
            .map(|hash| hash.load(Ordering::Relaxed))
            .filter(|&hash| hash != 0)
            .map(|hash| sketch.estimate(&sketch.cells(hash)))
            .collect();
        if counters.is_empty() {
            return LFU_INIT_VAL;
        }
        let at = (counters.len() as f64 * EVICT_SHARE) as usize;
        *counters.select_nth_unstable(at).1
    }

    /// Takes one off every counter if `decay_minutes` passed since the
    /// last time, and widens the sketch if `keys` outgrew it. The
    /// background thread calls it every 100 ms.
    pub fn tick(&self, keys: usize) {
        let minutes = self.decay_minutes.load(Ordering::Relaxed);
        let mut decayed_at = self.decayed_at.lock();
        if minutes > 0 && decayed_at.elapsed() >= Duration::from_secs(60 * minutes as u64) {
            *decayed_at = Instant::now();
            self.decay();
        }
        drop(decayed_at);
        self.sample_odds.store(sample_odds(keys).to_bits(), Ordering::Relaxed);
        let sketch = self.sketch.load();
        if keys > sketch.width {
            let wider = sketch.widened(keys * 2);
            self.sketch.store(std::sync::Arc::new(wider));
        }
    }

    /// Takes one off every counter now.
    pub fn decay(&self) {
        self.sketch.load().decay();
    }

    /// The sketch's DRAM.
    pub fn bytes(&self) -> usize {
        self.sketch.load().bytes()
    }
}

/// The odds that sample about `SAMPLE` of the entries of a cache of
/// `keys` keys in one pass.
fn sample_odds(keys: usize) -> f64 {
    (SAMPLE as f64 / keys.max(1) as f64).min(1.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_new_key_starts_at_five_and_its_first_read_makes_six() {
        let frequencies = Frequencies::new(Lfu::default(), 100);
        assert_eq!(frequencies.get(b"k"), 0);
        frequencies.write(b"k");
        assert_eq!(frequencies.get(b"k"), LFU_INIT_VAL);
        frequencies.read(b"k");
        assert_eq!(frequencies.get(b"k"), LFU_INIT_VAL + 1, "the odds are 1 at the initial value");
        assert_eq!(frequencies.get(b"other"), 0);
    }

    /// Counters grow logarithmically, at Redis's odds: after `n` hits with
    /// factor 10, a counter of about 5 + sqrt(n / 5), since reaching `c`
    /// takes sum over k < c - 5 of (10k + 1) hits.
    #[test]
    fn counters_grow_by_the_log_factor() {
        let frequencies = Frequencies::new(Lfu::default(), 100);
        frequencies.write(b"hot");
        for _ in 0..20_000 {
            frequencies.read(b"hot");
        }
        let counter = frequencies.get(b"hot");
        // Expected 5 + ~64 (20,000 = 5c'^2 - 4c' for c' = c - 5), give or
        // take 4.6 (the sum of the steps' geometric variances): 4 sigmas.
        assert!((50..=87).contains(&counter), "{counter}");
        let flat = Frequencies::new(Lfu { log_factor: 0, decay_minutes: 1 }, 100);
        for _ in 0..300 {
            flat.read(b"k");
        }
        assert_eq!(flat.get(b"k"), u8::MAX, "factor 0: every hit counts, up to 255");
    }

    #[test]
    fn decay_takes_one_off_every_counter_but_zero() {
        let frequencies = Frequencies::new(Lfu::default(), 100);
        let keys: Vec<[u8; 4]> = (0..1000u32).map(|k| k.to_be_bytes()).collect();
        for (i, key) in keys.iter().enumerate() {
            let sketch = frequencies.sketch.load();
            sketch.raise(&sketch.cells(frequencies.hasher.hash_one(key)), (i % 256) as u8);
        }
        let before: Vec<u8> = keys.iter().map(|k| frequencies.get(k)).collect();
        frequencies.decay();
        for (key, was) in keys.iter().zip(before) {
            assert_eq!(frequencies.get(key), was.saturating_sub(1));
        }
    }

    /// Widening keeps every counter (never lower; here exact, with few
    /// keys) and makes room: 100,000 keys at distinct counters read back
    /// with few overstated.
    #[test]
    fn widening_keeps_the_counters() {
        let frequencies = Frequencies::new(Lfu::default(), 10);
        let keys: Vec<[u8; 4]> = (0..100_000u32).map(|k| k.to_be_bytes()).collect();
        let want = |i: usize| (i % 200) as u8 + 1;
        for (i, key) in keys.iter().take(1000).enumerate() {
            let sketch = frequencies.sketch.load();
            sketch.raise(&sketch.cells(frequencies.hasher.hash_one(key)), want(i));
        }
        frequencies.tick(keys.len());
        assert!(frequencies.bytes() >= ROWS * 200_000, "{}", frequencies.bytes());
        for (i, key) in keys.iter().take(1000).enumerate() {
            assert!(frequencies.get(key) >= want(i), "key {i}");
        }
        for (i, key) in keys.iter().enumerate().skip(1000) {
            let sketch = frequencies.sketch.load();
            sketch.raise(&sketch.cells(frequencies.hasher.hash_one(key)), want(i));
        }
        let overstated = keys.iter().enumerate().filter(|(i, key)| frequencies.get(*key) != want(*i)).count();
        assert!(overstated < keys.len() / 20, "{overstated} of {} overstated", keys.len());
    }

    /// Eviction keeps what is above the threshold, the counter at or below
    /// which a quarter of the sampled keys' are, and what is at it and was
    /// read since written within a bound; never a key not used since it
    /// was written.
    #[test]
    fn the_threshold_is_the_lowest_quarter_of_the_cache() {
        let frequencies = Frequencies::new(Lfu::default(), 10_000);
        let keys: Vec<[u8; 4]> = (0..10_000u32).map(|k| k.to_be_bytes()).collect();
        frequencies.raise(&keys[0], LFU_INIT_VAL + 1);
        assert!(frequencies.keeps(&keys[0], false), "before any sample, every key used is kept");
        for (i, key) in keys.iter().enumerate() {
            frequencies.write(key);
            frequencies.raise(key, LFU_INIT_VAL + 1 + (i % 10) as u8);
        }
        // Past the next choice of the threshold.
        for _ in 0..DECISIONS_PER_THRESHOLD {
            frequencies.keeps(&keys[1], false);
        }
        // Counters 6..=15 evenly: 6 and 7 are a fifth, 8 makes it 30%. A
        // few keys read higher: their cells all hold other keys' too.
        let kept = |step: usize, read_since: bool| {
            keys.iter().skip(step).step_by(10).filter(|k| frequencies.keeps(*k, read_since)).count()
        };
        let low = [kept(0, true), kept(1, true), kept(2, false)];
        assert!(low.iter().all(|&kept| kept <= 10), "counters 6, 7 and 8: {low:?} of 1000 kept");
        assert_eq!((kept(3, false), kept(9, false)), (1000, 1000), "counters 9 and 15");
        // At the threshold, read since written: up to three quarters of the
        // decisions of each window of 128 keep.
        let tied = kept(2, true);
        assert!((700..=760).contains(&tied), "{tied}");
        // Never used since written: never kept.
        let cold = Frequencies::new(Lfu::default(), 100);
        cold.write(b"k");
        assert!(!(0..1000).any(|_| cold.keeps(b"k", true)));
    }
}
