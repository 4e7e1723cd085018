//! INFO commandstats and errorstats, as Redis 7 keeps them: for each
//! command its calls, their time in microseconds, and the calls refused
//! before they ran (arity, AUTH, OOM ...) or that failed (an error reply),
//! and the histogram of its calls' times that LATENCY HISTOGRAM shows;
//! for each error code (an error reply's first word) how many were sent.
//!
//! Each thread adds to counters of its own, with plain loads and stores
//! (one writer each: no locked instruction, no cache line shared between
//! the I/O threads on the hot path); INFO sums every thread's. A reset
//! while a thread adds may lose to that add. The counts are the
//! process's, as Redis's are the server's.

use std::cell::Cell;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::Mutex;

use crate::histogram;

/// Per command: calls, microseconds, rejected calls, failed calls.
pub const FIELDS: usize = 4;
/// Redis keeps at most this many error codes (`ERRORSTATS_LIMIT`).
const ERROR_CODES_MAX: usize = 128;

struct Counts {
    cells: Box<[AtomicU64]>,
    /// Per command, once it has run here: its times' histogram
    /// (`crate::histogram`).
    histograms: Box<[OnceLock<Box<[AtomicU64]>>]>,
}

/// Every thread's counts (a thread's stay after it ends).
static THREADS: Mutex<Vec<Arc<Counts>>> = Mutex::new(Vec::new());
static ERRORS: Mutex<BTreeMap<String, u64>> = Mutex::new(BTreeMap::new());
/// Every error reply (INFO's `total_error_replies`), past the codes' cap too.
static TOTAL_ERRORS: AtomicU64 = AtomicU64::new(0);
/// Redis's `latency-tracking`: whether commands' times go into their
/// histograms (CONFIG SET latency-tracking no saves that work).
static TRACKING: AtomicBool = AtomicBool::new(true);

pub fn tracking() -> bool {
    TRACKING.load(Ordering::Relaxed)
}

pub fn set_tracking(on: bool) {
    TRACKING.store(on, Ordering::Relaxed);
}

/// Redis's `latency-tracking-info-percentiles`: the percentiles INFO
/// latencystats gives (None: Redis's default, p50, p99, p99.9).
static PERCENTILES: Mutex<Option<Vec<f64>>> = Mutex::new(None);

pub fn percentiles() -> Vec<f64> {
    PERCENTILES.lock().clone().unwrap_or_else(|| vec![50.0, 99.0, 99.9])
}

/// Sets the percentiles from their text (space-separated numbers from 0
/// to 100; none is a choice too), or gives Redis's reason for refusing it.
pub fn set_percentiles(text: &str) -> Result<(), &'static str> {
    let mut chosen = Vec::new();
    for word in text.split_whitespace() {
        let p: f64 = word
            .parse()
            .ok()
            .filter(|p: &f64| p.is_finite())
            .ok_or("Invalid latency-tracking-info-percentiles parameters")?;
        if !(0.0..=100.0).contains(&p) {
            return Err("latency-tracking-info-percentiles parameters should sit between [0.0,100.0]");
        }
        chosen.push(p);
    }
    *PERCENTILES.lock() = Some(chosen);
    Ok(())
}

/// A percentile as Redis writes it (`%f` without its trailing zeros):
/// 50, 99.9.
pub fn percentile_text(p: f64) -> String {
    let text = format!("{p:.6}");
    text.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A thread's own counts.
struct Local {
    counts: Arc<Counts>,
    /// Error replies this thread has sent: a command failed if it grew.
    errors_sent: Cell<u64>,
    /// Those of them that commands inside EXEC sent: counted as theirs,
    /// not EXEC's.
    nested: Cell<u64>,
}

thread_local! {
    static LOCAL: Local = {
        let commands = crate::commands::command_count();
        let cells = (0..commands * FIELDS).map(|_| AtomicU64::new(0)).collect();
        let histograms = (0..commands).map(|_| OnceLock::new()).collect();
        let counts = Arc::new(Counts { cells, histograms });
        THREADS.lock().push(counts.clone());
        Local { counts, errors_sent: Cell::new(0), nested: Cell::new(0) }
    };
}

/// Adds `n` to a counter only this thread writes.
fn bump(cell: &AtomicU64, n: u64) {
    cell.store(cell.load(Ordering::Relaxed) + n, Ordering::Relaxed);
}

/// The command at `index` (`commands::index_of`) ran for `nanos`;
/// `failed` if it replied with an error.
pub fn ran(index: usize, nanos: u64, failed: bool) {
    LOCAL.with(|local| {
        let Some(cells) = local.counts.cells.get(index * FIELDS..(index + 1) * FIELDS) else { return };
        bump(&cells[0], 1);
        bump(&cells[1], nanos / 1000);
        if failed {
            bump(&cells[3], 1);
        }
        if tracking() {
            let histogram = local.counts.histograms[index]
                .get_or_init(|| (0..histogram::SLOTS).map(|_| AtomicU64::new(0)).collect());
            bump(&histogram[histogram::slot(histogram::recorded(nanos))], 1);
        }
    });
}

/// The times' histogram of the command at `index` summed over the
/// threads (`crate::histogram`'s slots), if it ever ran.
pub fn histogram(index: usize) -> Option<Vec<u64>> {
    let threads = THREADS.lock();
    let mut sums: Option<Vec<u64>> = None;
    for counts in threads.iter() {
        let Some(histogram) = counts.histograms.get(index).and_then(OnceLock::get) else { continue };
        let sums = sums.get_or_insert_with(|| vec![0; histogram::SLOTS]);
        for (sum, count) in sums.iter_mut().zip(histogram.iter()) {
            *sum += count.load(Ordering::Relaxed);
        }
    }
    sums
}

/// The command at `index` was refused before it ran.
pub fn rejected(index: usize) {
    LOCAL.with(|local| {
        if let Some(cell) = local.counts.cells.get(index * FIELDS + 2) {
            bump(cell, 1);
        }
    });
}

/// An error reply `text` was sent (`resp::Out::error`).
pub fn error_sent(text: &str) {
    LOCAL.with(|local| local.errors_sent.set(local.errors_sent.get() + 1));
    TOTAL_ERRORS.fetch_add(1, Ordering::Relaxed);
    let code = text.split(' ').next().unwrap_or_default();
    let mut errors = ERRORS.lock();
    if let Some(count) = errors.get_mut(code) {
        *count += 1;
    } else if errors.len() < ERROR_CODES_MAX {
        errors.insert(code.to_string(), 1);
    }
}

/// This thread's error replies so far, but for those `nested` set aside.
pub fn errors_sent() -> u64 {
    LOCAL.with(|local| local.errors_sent.get() - local.nested.get())
}

/// Sets aside `n` error replies that a command inside another (EXEC's)
/// sent, so they do not count as the outer command failing.
pub fn nested(n: u64) {
    LOCAL.with(|local| local.nested.set(local.nested.get() + n));
}

/// Every command's (calls, microseconds, rejected, failed) summed over the
/// threads, by command index; commands never called are left out.
pub fn commands() -> Vec<(usize, [u64; FIELDS])> {
    let threads = THREADS.lock();
    let mut sums = vec![[0u64; FIELDS]; crate::commands::command_count()];
    for counts in threads.iter() {
        for (i, cell) in counts.cells.iter().enumerate() {
            sums[i / FIELDS][i % FIELDS] += cell.load(Ordering::Relaxed);
        }
    }
    sums.into_iter().enumerate().filter(|(_, s)| s[0] + s[2] > 0).collect()
}

/// Error replies sent since the start or CONFIG RESETSTAT.
pub fn total_errors() -> u64 {
    TOTAL_ERRORS.load(Ordering::Relaxed)
}

/// Error replies by code.
pub fn errors() -> Vec<(String, u64)> {
    ERRORS.lock().iter().map(|(code, n)| (code.clone(), *n)).collect()
}

/// CONFIG RESETSTAT.
pub fn reset() {
    for counts in THREADS.lock().iter() {
        let histograms = counts.histograms.iter().filter_map(OnceLock::get);
        for cell in counts.cells.iter().chain(histograms.flat_map(|h| h.iter())) {
            cell.store(0, Ordering::Relaxed);
        }
    }
    ERRORS.lock().clear();
    TOTAL_ERRORS.store(0, Ordering::Relaxed);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_are_summed_over_threads_and_errors_kept_by_code() {
        let get = crate::commands::index_of(crate::commands::lookup(b"get").unwrap());
        let before = commands().into_iter().find(|(i, _)| *i == get).map_or([0; FIELDS], |(_, c)| c);
        ran(get, 10_000, false);
        std::thread::spawn(move || {
            ran(get, 5_000, true);
            rejected(get);
        })
        .join()
        .unwrap();
        let after = commands().into_iter().find(|(i, _)| *i == get).unwrap().1;
        assert_eq!(
            [after[0] - before[0], after[1] - before[1], after[2] - before[2], after[3] - before[3]],
            [2, 15, 1, 1]
        );
        let sent = errors_sent();
        error_sent("WRONGTYPE Operation against a key");
        assert_eq!(errors_sent(), sent + 1);
        assert!(errors().iter().any(|(code, n)| code == "WRONGTYPE" && *n >= 1));
    }
}
