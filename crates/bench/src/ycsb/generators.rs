//! YCSB's key choosers, computed as YCSB 0.17's core computes them
//! (`ZipfianGenerator`, `ScrambledZipfianGenerator`,
//! `SkewedLatestGenerator`, `Utils.fnvhash64`), so a workload here touches
//! keys with the same skew as the Java tool's.

use std::collections::BTreeSet;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;
use rand::Rng;

/// YCSB's `Utils.fnvhash64`: FNV-1 over the 8 little-endian bytes of a
/// number, made non-negative as Java's `Math.abs` does.
pub fn fnvhash64(mut value: u64) -> u64 {
    let mut hash: u64 = 0xCBF2_9CE4_8422_2325;
    for _ in 0..8 {
        hash ^= value & 0xff;
        value >>= 8;
        hash = hash.wrapping_mul(1_099_511_628_211);
    }
    (hash as i64).unsigned_abs()
}

/// The record key YCSB builds for a key number (`orderedinserts=false`,
/// the default: keys hashed, so inserts land all over the key space).
pub fn key_name(keynum: u64) -> String {
    format!("user{}", fnvhash64(keynum))
}

pub const ZIPFIAN_CONSTANT: f64 = 0.99;

fn zeta(from: u64, to: u64, theta: f64, initial: f64) -> f64 {
    (from..to).fold(initial, |sum, i| sum + 1.0 / ((i + 1) as f64).powf(theta))
}

/// Zipfian over `[0, items)`: item 0 the most popular. Grows its zeta
/// incrementally when asked for more items, as YCSB's does.
pub struct Zipfian {
    items: u64,
    theta: f64,
    alpha: f64,
    zeta2: f64,
    zetan: f64,
    eta: f64,
}

impl Zipfian {
    pub fn new(items: u64) -> Zipfian {
        Zipfian::with_zetan(items, zeta(0, items, ZIPFIAN_CONSTANT, 0.0))
    }

    fn with_zetan(items: u64, zetan: f64) -> Zipfian {
        let theta = ZIPFIAN_CONSTANT;
        let zeta2 = zeta(0, 2, theta, 0.0);
        let mut zipf = Zipfian { items, theta, alpha: 1.0 / (1.0 - theta), zeta2, zetan, eta: 0.0 };
        zipf.eta = zipf.eta_for(items);
        zipf
    }

    fn eta_for(&self, items: u64) -> f64 {
        (1.0 - (2.0 / items as f64).powf(1.0 - self.theta)) / (1.0 - self.zeta2 / self.zetan)
    }

    /// The next item among the first `items` (at least 1).
    pub fn next(&mut self, rng: &mut impl Rng, items: u64) -> u64 {
        let items = items.max(1);
        if items > self.items {
            self.zetan = zeta(self.items, items, self.theta, self.zetan);
            self.items = items;
            self.eta = self.eta_for(items);
        }
        let u: f64 = rng.gen();
        let uz = u * self.zetan;
        if uz < 1.0 {
            return 0;
        }
        if uz < 1.0 + 0.5f64.powf(self.theta) {
            return 1.min(items - 1);
        }
        ((items as f64 * (self.eta * u - self.eta + 1.0).powf(self.alpha)) as u64).min(items - 1)
    }
}

/// YCSB's scrambled zipfian: a zipfian over ten billion items, hashed onto
/// `[0, items)`, so the popular keys are spread over the key space.
pub struct ScrambledZipfian {
    zipf: Zipfian,
    items: u64,
}

/// YCSB's precomputed zeta of its ten billion items at 0.99.
const SCRAMBLED_ITEMS: u64 = 10_000_000_000;
const SCRAMBLED_ZETAN: f64 = 26.469_028_201_783_02;

impl ScrambledZipfian {
    pub fn new(items: u64) -> ScrambledZipfian {
        ScrambledZipfian { zipf: Zipfian::with_zetan(SCRAMBLED_ITEMS, SCRAMBLED_ZETAN), items: items.max(1) }
    }

    pub fn next(&mut self, rng: &mut impl Rng) -> u64 {
        fnvhash64(self.zipf.next(rng, SCRAMBLED_ITEMS)) % self.items
    }
}

/// Key numbers handed to inserts, and how far they are acknowledged: a
/// reader picks only among acknowledged keys (YCSB's
/// `AcknowledgedCounterGenerator`), so it never asks for a key whose
/// insert is still on its way. Every operation reads the limit, so it is
/// an atomic; only acknowledgements take the lock.
pub struct InsertCounter {
    next: AtomicU64,
    /// Every key below this one is acknowledged.
    limit: AtomicU64,
    /// Acknowledged above `limit`, waiting for the gap to close.
    ahead: Mutex<BTreeSet<u64>>,
}

impl InsertCounter {
    pub fn new(start: u64) -> InsertCounter {
        InsertCounter { next: AtomicU64::new(start), limit: AtomicU64::new(start), ahead: Mutex::new(BTreeSet::new()) }
    }

    pub fn take(&self) -> u64 {
        self.next.fetch_add(1, Ordering::Relaxed)
    }

    pub fn acknowledge(&self, keynum: u64) {
        let mut ahead = self.ahead.lock();
        ahead.insert(keynum);
        let mut limit = self.limit.load(Ordering::Relaxed);
        while ahead.first() == Some(&limit) {
            ahead.pop_first();
            limit += 1;
        }
        self.limit.store(limit, Ordering::Release);
    }

    /// How many keys (from 0) are acknowledged.
    pub fn acknowledged(&self) -> u64 {
        self.limit.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::rngs::SmallRng;
    use rand::SeedableRng;

    #[test]
    fn fnv_matches_ycsb() {
        // What YCSB 0.17's `site.ycsb.Utils.fnvhash64` returns (its core jar, run under Java 17).
        assert_eq!(fnvhash64(0), 6_284_781_860_667_377_211);
        assert_eq!(key_name(1), "user8517097267634966620");
    }

    #[test]
    fn zipfian_is_skewed_and_in_range() {
        let mut rng = SmallRng::seed_from_u64(7);
        let mut zipf = Zipfian::new(1000);
        let mut counts = vec![0u32; 1000];
        for _ in 0..100_000 {
            counts[zipf.next(&mut rng, 1000) as usize] += 1;
        }
        // With theta 0.99 over 1000 items item 0 draws ~1/zeta(1000) = 13%.
        assert!((11_000..15_000).contains(&counts[0]), "item 0 drawn {} times", counts[0]);
        assert!(counts[0] > counts[1] && counts[1] > counts[10] && counts[10] > counts[500]);
        // Growing the item count keeps the draws in range.
        for _ in 0..10_000 {
            assert!(zipf.next(&mut rng, 1500) < 1500);
        }
    }

    #[test]
    fn scrambled_zipfian_spreads_its_popular_keys() {
        let mut rng = SmallRng::seed_from_u64(9);
        let mut gen = ScrambledZipfian::new(10_000);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..100_000 {
            let k = gen.next(&mut rng);
            assert!(k < 10_000);
            *counts.entry(k).or_insert(0u32) += 1;
        }
        let mut top: Vec<_> = counts.into_iter().collect();
        top.sort_by_key(|&(_, n)| std::cmp::Reverse(n));
        // Skewed (the top key far above the 10 draws a uniform one gets)
        // and not the low key numbers.
        assert!(top[0].1 > 1000, "top key drawn {} times", top[0].1);
        assert!(top[..5].iter().any(|&(k, _)| k > 100));
    }

    #[test]
    fn acknowledgements_close_gaps_in_order() {
        let counter = InsertCounter::new(10);
        let (a, b, c) = (counter.take(), counter.take(), counter.take());
        assert_eq!((a, b, c), (10, 11, 12));
        counter.acknowledge(c);
        counter.acknowledge(b);
        assert_eq!(counter.acknowledged(), 10, "key 10 is not acknowledged yet");
        counter.acknowledge(a);
        assert_eq!(counter.acknowledged(), 13);
    }
}
