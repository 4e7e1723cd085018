//! The layout of Redis's per-command latency histograms (HdrHistogram with
//! 2 significant digits, from 1 ns to 1 s): which slot a time counts in,
//! and the two readings Redis makes of them, LATENCY HISTOGRAM's
//! cumulative counts at 1024·2^k ns and INFO latencystats' percentiles.
//! Redis records a command's time as whole microseconds × 1000; so does
//! `record`. Written from HdrHistogram's published layout, with Redis's
//! figures as the tests' expectations.

/// 2 significant digits: 256 slots per doubling, the upper half new.
const SUB_BUCKET_HALF_MAGNITUDE: u32 = 7;
const SUB_BUCKET_HALF: u64 = 1 << SUB_BUCKET_HALF_MAGNITUDE;
const SUB_BUCKET_MASK: u64 = (SUB_BUCKET_HALF << 1) - 1;
/// Redis's `LATENCY_HISTOGRAM_MAX_VALUE`: one second.
const MAX_NANOS: u64 = 1_000_000_000;
/// Doublings up to the largest value.
const BUCKETS: u32 = 23;
/// How many counts a histogram holds.
pub const SLOTS: usize = ((BUCKETS as usize) + 1) << SUB_BUCKET_HALF_MAGNITUDE;

/// The slot of `nanos` (clamped to 1 ns .. 1 s, as Redis clamps).
pub fn slot(nanos: u64) -> usize {
    let value = nanos.clamp(1, MAX_NANOS);
    let bucket = (63 - (value | SUB_BUCKET_MASK).leading_zeros()) - SUB_BUCKET_HALF_MAGNITUDE;
    let sub_bucket = value >> bucket;
    (((bucket as u64 + 1) << SUB_BUCKET_HALF_MAGNITUDE) + sub_bucket - SUB_BUCKET_HALF) as usize
}

/// The highest value a slot holds (what Redis reports for it).
fn highest_in(slot: usize) -> u64 {
    let slot = slot as u64;
    let mut bucket = (slot >> SUB_BUCKET_HALF_MAGNITUDE) as i64 - 1;
    let mut sub_bucket = (slot & (SUB_BUCKET_HALF - 1)) + SUB_BUCKET_HALF;
    if bucket < 0 {
        sub_bucket -= SUB_BUCKET_HALF;
        bucket = 0;
    }
    let lowest = sub_bucket << bucket;
    lowest + (1u64 << bucket) - 1
}

/// What a command's time counts as: whole microseconds, in nanoseconds.
pub fn recorded(nanos: u64) -> u64 {
    nanos / 1000 * 1000
}

/// The value at `percentile` (0–100) of `counts`, as HdrHistogram gives
/// it: the highest value of the slot where the cumulative count reaches
/// that share of the total.
pub fn percentile(counts: &[u64], percentile: f64) -> u64 {
    let total: u64 = counts.iter().sum();
    let wanted = (((percentile / 100.0) * total as f64) + 0.5) as u64;
    let wanted = wanted.max(1);
    let mut seen = 0;
    for (slot, &count) in counts.iter().enumerate() {
        seen += count;
        if seen >= wanted {
            return highest_in(slot);
        }
    }
    0
}

/// LATENCY HISTOGRAM's points: at each level 1024·2^k ns (from 1024 up to
/// the last value counted), the level's highest equivalent value in
/// microseconds and the calls up to it, where that count grew.
pub fn cumulative(counts: &[u64]) -> Vec<(u64, u64)> {
    let last = counts.iter().rposition(|&count| count > 0);
    let Some(last) = last else { return Vec::new() };
    let mut points = Vec::new();
    let (mut level, mut previous, mut sum, mut slot) = (1024u64, 0, 0, 0);
    loop {
        let top = highest_in(self::slot(level));
        while slot < counts.len() && highest_in(slot) <= top {
            sum += counts[slot];
            slot += 1;
        }
        if sum > previous {
            points.push((top / 1000, sum));
        }
        previous = sum;
        if slot > last || level >= MAX_NANOS {
            return points;
        }
        level *= 2;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counts_of(nanos: &[u64]) -> Vec<u64> {
        let mut counts = vec![0; SLOTS];
        for &n in nanos {
            counts[slot(recorded(n))] += 1;
        }
        counts
    }

    #[test]
    fn percentiles_read_as_redis_reads_them() {
        // Redis 7.0.15's latencystats for calls of 5 µs, of 1 and 2 µs,
        // of 16 µs, and of 0 µs (clamped to 1 ns).
        let at = |nanos: &[u64], p| percentile(&counts_of(nanos), p) as f64 / 1000.0;
        assert_eq!(format!("{:.3}", at(&[5_400], 50.0)), "5.023");
        assert_eq!(format!("{:.3}", at(&[1_000, 2_000, 2_999], 50.0)), "2.007");
        assert_eq!(format!("{:.3}", at(&[1_000, 2_000, 2_999], 1.0)), "1.003");
        assert_eq!(format!("{:.3}", at(&[16_000], 99.9)), "16.063");
        assert_eq!(format!("{:.3}", at(&[300], 50.0)), "0.001");
        assert_eq!(format!("{:.3}", at(&[6_000, 9_000, 9_000], 99.0)), "9.023");
        assert_eq!(percentile(&vec![0; SLOTS], 50.0), 0);
    }

    #[test]
    fn the_histogram_is_labelled_and_cumulated_as_redis_does_it() {
        // Redis 7.0.15's LATENCY HISTOGRAM for EVALs of 40 µs to 20 ms.
        let evals = counts_of(&[40_000, 100_000, 200_000, 400_000, 1_000_000, 5_000_000, 20_000_000]);
        assert_eq!(cumulative(&evals), [(66, 1), (132, 2), (264, 3), (528, 4), (1056, 5), (8454, 6), (33816, 7)]);
        // ... and for TIME: mostly 0 µs, a few 1, 2 and 10 µs.
        let time = counts_of(&[0, 0, 0, 1_000, 2_000, 10_000]);
        assert_eq!(cumulative(&time), [(1, 4), (2, 5), (16, 6)]);
        assert!(cumulative(&vec![0; SLOTS]).is_empty());
        assert_eq!(slot(u64::MAX), slot(MAX_NANOS));
        assert!(slot(MAX_NANOS) < SLOTS);
    }
}
