//! The latency monitor (LATENCY): with `latency-monitor-threshold` set (in
//! milliseconds; 0, the default, is off), every command that takes at
//! least that long is a sample of the event `command`, or `fast-command`
//! for Redis's O(1) commands, timed as SLOWLOG times it. Each event keeps
//! its all-time high and its last 160 samples, one per second (the worst
//! of that second), as Redis keeps them; LATENCY LATEST, HISTORY, RESET,
//! GRAPH (Redis's sparkline) and DOCTOR read them.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};

use parking_lot::Mutex;

/// Redis's `LATENCY_TS_LEN`.
const SAMPLES: usize = 160;

/// One event's samples.
#[derive(Clone)]
pub struct Series {
    /// (unix seconds, milliseconds); time 0: never written.
    samples: [(u64, u64); SAMPLES],
    /// Where the next sample goes.
    next: usize,
    /// The all-time high, milliseconds.
    pub max: u64,
}

impl Series {
    fn new() -> Series {
        Series { samples: [(0, 0); SAMPLES], next: 0, max: 0 }
    }

    /// Adds a sample taken at `now`: the second's worst counts once.
    fn add(&mut self, now: u64, millis: u64) {
        self.max = self.max.max(millis);
        let previous = (self.next + SAMPLES - 1) % SAMPLES;
        if self.samples[previous].0 == now {
            self.samples[previous].1 = self.samples[previous].1.max(millis);
            return;
        }
        self.samples[self.next] = (now, millis);
        self.next = (self.next + 1) % SAMPLES;
    }

    /// The samples, oldest first.
    pub fn history(&self) -> Vec<(u64, u64)> {
        (0..SAMPLES).map(|j| self.samples[(self.next + j) % SAMPLES]).filter(|(time, _)| *time != 0).collect()
    }

    /// The newest sample (time 0 if none).
    pub fn latest(&self) -> (u64, u64) {
        self.samples[(self.next + SAMPLES - 1) % SAMPLES]
    }
}

#[derive(Default)]
pub struct LatencyMonitor {
    threshold_millis: AtomicU64,
    events: Mutex<BTreeMap<&'static str, Series>>,
}

impl LatencyMonitor {
    pub fn new(threshold_millis: u64) -> LatencyMonitor {
        LatencyMonitor { threshold_millis: AtomicU64::new(threshold_millis), ..LatencyMonitor::default() }
    }

    pub fn threshold(&self) -> u64 {
        self.threshold_millis.load(Ordering::Relaxed)
    }

    pub fn set_threshold(&self, millis: u64) {
        self.threshold_millis.store(millis, Ordering::Relaxed);
    }

    pub fn enabled(&self) -> bool {
        self.threshold() > 0
    }

    /// Samples `event` if `millis` reaches the threshold.
    pub fn record(&self, event: &'static str, millis: u64) {
        let threshold = self.threshold();
        if threshold > 0 && millis >= threshold {
            let now = scaledkv::now_ms() / 1000;
            self.events.lock().entry(event).or_insert_with(Series::new).add(now, millis);
        }
    }

    /// Every event's samples, by name.
    pub fn events(&self) -> BTreeMap<&'static str, Series> {
        self.events.lock().clone()
    }

    pub fn event(&self, name: &[u8]) -> Option<(&'static str, Series)> {
        self.events.lock().iter().find(|(event, _)| event.as_bytes() == name).map(|(e, s)| (*e, s.clone()))
    }

    /// Forgets `names` (every event for none): how many there were.
    pub fn reset(&self, names: &[&[u8]]) -> usize {
        let mut events = self.events.lock();
        if names.is_empty() {
            let count = events.len();
            events.clear();
            return count;
        }
        let before = events.len();
        events.retain(|event, _| !names.contains(&event.as_bytes()));
        before - events.len()
    }

    /// LATENCY DOCTOR's report, as Redis words it for the events ScaledKV
    /// samples (`slowlog_micros`: `slowlog-log-slower-than`, which its
    /// advice on the slow log reads).
    pub fn doctor(&self, now: u64, slowlog_micros: i64) -> String {
        let events = self.events();
        if events.is_empty() && !self.enabled() {
            return "I'm sorry, Dave, I can't do that. Latency monitoring is disabled in this Redis instance. You may \
                    use \"CONFIG SET latency-monitor-threshold <milliseconds>.\" in order to enable it. If we weren't \
                    in a deep space mission I'd suggest to take a look at https://redis.io/topics/latency-monitor.\n"
                .into();
        }
        if events.is_empty() {
            return "Dave, no latency spike was observed during the lifetime of this Redis instance, not in the \
                    slightest bit. I honestly think you ought to sit down calmly, take a stress pill, and think things \
                    over.\n"
                .into();
        }
        let threshold = self.threshold();
        let mut report = String::from(
            "Dave, I have observed latency spikes in this Redis instance. You don't mind talking about it, do you \
             Dave?\n\n",
        );
        let (mut slow_commands, mut scheduler) = (false, false);
        for (number, (event, series)) in events.iter().enumerate() {
            let history = series.history();
            let count = history.len().max(1) as u64;
            let average = history.iter().map(|(_, ms)| ms).sum::<u64>() / count;
            let deviation = history.iter().map(|(_, ms)| ms.abs_diff(average)).sum::<u64>() / count;
            let oldest = history.iter().map(|(time, _)| *time).min().unwrap_or(now);
            let period = now.saturating_sub(oldest).max(1);
            report.push_str(&format!(
                "{}. {event}: {} latency spikes (average {average}ms, mean deviation {deviation}ms, period {:.2} \
                 sec). Worst all time event {}ms.\n",
                number + 1,
                history.len(),
                period as f64 / count as f64,
                series.max
            ));
            slow_commands |= *event == "command";
            scheduler |= *event == "fast-command";
        }
        // Redis's advice for these two events, in its order.
        let mut advice = Vec::new();
        if slow_commands && slowlog_micros < 0 {
            advice.push(format!(
                "- There are latency issues with potentially slow commands you are using. Try to enable the Slow \
                 Log Redis feature using the command 'CONFIG SET slowlog-log-slower-than {}'. If the Slow log is \
                 disabled Redis is not able to log slow commands execution for you.\n",
                threshold * 1000
            ));
        } else if slow_commands && slowlog_micros as u64 / 1000 > threshold {
            advice.push(format!(
                "- Your current Slow Log configuration only logs events that are slower than your configured latency \
                 monitor threshold. Please use 'CONFIG SET slowlog-log-slower-than {}'.\n",
                threshold * 1000
            ));
        }
        if slow_commands {
            advice.push(
                "- Check your Slow Log to understand what are the commands you are running which are too slow to \
                 execute. Please check https://redis.io/commands/slowlog for more information.\n"
                    .into(),
            );
        }
        if scheduler {
            advice.push(
                "- The system is slow to execute Redis code paths not containing system calls. This usually means \
                 the system does not provide Redis CPU time to run for long periods. You should try to:\n  1) Lower \
                 the system load.\n  2) Use a computer / VM just for Redis if you are running other software in the \
                 same system.\n  3) Check if you have a \"noisy neighbour\" problem.\n"
                    .into(),
            );
        }
        if slow_commands {
            advice.push(
                "- Deleting, expiring or evicting (because of maxmemory policy) large objects is a blocking \
                 operation. If you have very large objects that are often deleted, expired, or evicted, try to \
                 fragment those objects into multiple smaller objects.\n"
                    .into(),
            );
        }
        report.push_str("\nI have a few advices for you:\n\n");
        for line in advice {
            report.push_str(&line);
        }
        report
    }
}

/// LATENCY GRAPH: Redis's header and sparkline (4 rows, 80 columns, the
/// `_o#` fill and `|` below it, labels of how long ago each sample was).
pub fn graph(event: &str, series: &Series, now: u64) -> String {
    let history = series.history();
    let low = history.iter().map(|(_, ms)| *ms).min().unwrap_or(0);
    let high = history.iter().map(|(_, ms)| *ms).max().unwrap_or(0);
    let mut out = format!("{event} - high {high} ms, low {low} ms (all time high {} ms)\n", series.max);
    out.push_str(&"-".repeat(COLUMNS));
    out.push('\n');
    let samples: Vec<(f64, String)> =
        history.iter().map(|(time, ms)| (*ms as f64, ago(now.saturating_sub(*time)))).collect();
    for (i, chunk) in samples.chunks(COLUMNS).enumerate() {
        if i > 0 {
            out.push('\n');
        }
        render(&mut out, chunk, low as f64, high as f64);
    }
    out
}

const COLUMNS: usize = 80;
const ROWS: usize = 4;
const FILL: &[u8] = b"_o#";

/// Redis's label for a sample `seconds` old.
fn ago(seconds: u64) -> String {
    match seconds {
        s if s < 60 => format!("{s}s"),
        s if s < 3600 => format!("{}m", s / 60),
        s if s < 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// Redis's `sparklineRenderRange` with its fill: the bars' rows, a blank
/// row, then the labels read downwards.
fn render(out: &mut String, samples: &[(f64, String)], min: f64, max: f64) {
    let steps = (FILL.len() * ROWS) as i64;
    let range = if max - min == 0.0 { 1.0 } else { max - min };
    let labels = samples.iter().any(|(_, label)| !label.is_empty());
    let mut row = 0;
    loop {
        let mut line = vec![b' '; samples.len()];
        let mut more = false;
        for (j, (value, label)) in samples.iter().enumerate() {
            let step = (((value - min) * steps as f64) as i64 as f64 / range) as i64;
            let step = step.clamp(0, steps - 1);
            if row < ROWS {
                more = true;
                let index = step - ((ROWS - row - 1) * FILL.len()) as i64;
                if (0..FILL.len() as i64).contains(&index) {
                    line[j] = FILL[index as usize];
                } else if index >= FILL.len() as i64 {
                    line[j] = b'|';
                }
            } else {
                if labels && row - ROWS < 1 {
                    more = true;
                    break;
                }
                let at = row - ROWS - 1;
                if let Some(&byte) = label.as_bytes().get(at) {
                    more = true;
                    line[j] = byte;
                }
            }
        }
        if !more {
            break;
        }
        row += 1;
        out.push_str(&String::from_utf8_lossy(&line));
        out.push('\n');
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_keeps_its_worst_sample_and_the_ring_its_newest() {
        let mut series = Series::new();
        series.add(100, 5);
        series.add(100, 9);
        series.add(100, 3);
        series.add(101, 4);
        assert_eq!(series.history(), [(100, 9), (101, 4)]);
        assert_eq!((series.latest(), series.max), ((101, 4), 9));
        for t in 0..200 {
            series.add(1000 + t, t);
        }
        assert_eq!(series.history().len(), SAMPLES);
        assert_eq!(series.history()[0], (1040, 40));
    }

    #[test]
    fn the_monitor_samples_past_its_threshold_only() {
        let monitor = LatencyMonitor::new(0);
        monitor.record("command", 500);
        assert!(monitor.events().is_empty(), "off at 0");
        monitor.set_threshold(10);
        monitor.record("command", 9);
        monitor.record("command", 10);
        monitor.record("fast-command", 20);
        assert_eq!(monitor.events().len(), 2);
        assert_eq!(monitor.reset(&[b"command", b"nosuch"]), 1);
        assert_eq!(monitor.reset(&[]), 1);
    }

    #[test]
    fn the_graph_is_redis_sparkline() {
        let mut series = Series::new();
        series.add(95, 10);
        series.add(98, 20);
        series.add(99, 40);
        let text = graph("command", &series, 100);
        let expected = "command - high 40 ms, low 10 ms (all time high 40 ms)\n".to_string()
            + &"-".repeat(80)
            + "\n  #\n  |\n o|\n_||\n   \n521\nsss\n";
        assert_eq!(text, expected);
    }
}
