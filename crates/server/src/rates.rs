//! INFO's `instantaneous_*` rates, kept as Redis keeps them: every 100 ms
//! a sample of how fast a counter grew, per second; the rate is the mean
//! of the last 16 samples (so 1.6 s after a change it shows in full).

use std::time::{Duration, Instant};

use parking_lot::Mutex;

const SAMPLES: usize = 16;
pub const PERIOD: Duration = Duration::from_millis(100);

/// The counters sampled: commands processed, bytes in, bytes out.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Counters {
    pub commands: u64,
    pub input_bytes: u64,
    pub output_bytes: u64,
}

impl Counters {
    fn each(self) -> [u64; 3] {
        [self.commands, self.input_bytes, self.output_bytes]
    }
}

#[derive(Default)]
pub struct Rates {
    samples: Mutex<Samples>,
}

#[derive(Default)]
struct Samples {
    last: Option<(Instant, Counters)>,
    per_second: [[u64; SAMPLES]; 3],
    next: usize,
}

impl Rates {
    /// Takes a sample of `counters` as they are at `at`.
    pub fn sample(&self, at: Instant, counters: Counters) {
        let mut samples = self.samples.lock();
        if let Some((then, before)) = samples.last {
            let millis = at.duration_since(then).as_millis() as u64;
            if millis == 0 {
                return;
            }
            let next = samples.next;
            for (series, (now, was)) in
                samples.per_second.iter_mut().zip(counters.each().into_iter().zip(before.each()))
            {
                series[next] = now.saturating_sub(was) * 1000 / millis;
            }
            samples.next = (next + 1) % SAMPLES;
        }
        samples.last = Some((at, counters));
    }

    /// Each counter's rate per second: the mean of the samples (integer
    /// division, as Redis's).
    pub fn per_second(&self) -> Counters {
        let samples = self.samples.lock();
        let mean = |series: &[u64; SAMPLES]| series.iter().sum::<u64>() / SAMPLES as u64;
        Counters {
            commands: mean(&samples.per_second[0]),
            input_bytes: mean(&samples.per_second[1]),
            output_bytes: mean(&samples.per_second[2]),
        }
    }
}

/// Samples the server's counters (every `PERIOD`, `server::every`).
pub fn sample(shared: &crate::server::Shared) {
    use std::sync::atomic::Ordering::Relaxed;
    let stats = &shared.stats;
    let counters = Counters {
        commands: stats.commands.load(Relaxed),
        input_bytes: stats.net_input_bytes.load(Relaxed),
        output_bytes: stats.net_output_bytes.load(Relaxed),
    };
    shared.rates.sample(Instant::now(), counters);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_steady_rate_shows_in_full_once_the_samples_hold_it() {
        let rates = Rates::default();
        let start = Instant::now();
        let at = |step: u64| start + PERIOD * step as u32;
        let counters = |step: u64| Counters { commands: 500 * step, input_bytes: 10_240 * step, output_bytes: 0 };
        rates.sample(at(0), counters(0));
        rates.sample(at(1), counters(1));
        // One sample of 16 so far: a sixteenth of the rate.
        assert_eq!(rates.per_second().commands, 5000 / 16);
        for step in 2..=16 {
            rates.sample(at(step), counters(step));
        }
        assert_eq!(rates.per_second(), Counters { commands: 5000, input_bytes: 102_400, output_bytes: 0 });
        // Idle again: the rate falls back to zero as the samples turn over.
        for step in 17..=32 {
            rates.sample(at(step), counters(16));
        }
        assert_eq!(rates.per_second(), Counters::default());
    }
}
