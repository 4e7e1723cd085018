//! CLIENT PAUSE: every client's commands (ALL), or those that may write
//! (WRITE: writes, scripts, PUBLISH, an EXEC of writes), wait until the
//! pause ends or CLIENT UNPAUSE, as in Redis; a second pause keeps the
//! later end and the stronger mode. FAILOVER, and a shutdown waiting for
//! replicas, hold writes the same way until they end, apart from CLIENT
//! PAUSE (which neither ends nor shortens them), as Redis's pause
//! purposes do. Not paused: nothing is checked but two atomic loads per
//! command.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

pub struct Pause {
    /// 0: none; else the end, in milliseconds since `base`, shifted left
    /// once, with the low bit set for ALL.
    state: AtomicU64,
    base: Instant,
    /// FAILOVER and a shutdown waiting for replicas hold writes: how
    /// many hold them.
    held: AtomicU64,
    /// Wakes the held commands on CLIENT UNPAUSE (and a hold's end).
    pub unpaused: tokio::sync::Notify,
}

/// How often a command held by a failover or a shutdown looks again
/// (besides being woken at its end).
const HELD_LOOK: Duration = Duration::from_millis(100);

impl Default for Pause {
    fn default() -> Self {
        Pause {
            state: AtomicU64::new(0),
            base: Instant::now(),
            held: AtomicU64::new(0),
            unpaused: tokio::sync::Notify::new(),
        }
    }
}

impl Pause {
    /// Pauses for `millis` (all commands, or only those that may write).
    pub fn pause(&self, millis: u64, all: bool) {
        let now = self.base.elapsed().as_millis() as u64;
        let end = now + millis + 1;
        let _ = self.state.fetch_update(Ordering::AcqRel, Ordering::Acquire, |state| {
            // A pause that has ended is forgotten, not merged.
            let (old_end, old_all) = (state >> 1, state & 1 == 1);
            let (end, all) = if state == 0 || old_end <= now { (end, all) } else { (end.max(old_end), all || old_all) };
            Some((end << 1) | all as u64)
        });
    }

    /// Whether a pause was set (it may have ended): the only check a
    /// command makes when none was.
    pub fn set(&self) -> bool {
        self.state.load(Ordering::Relaxed) != 0 || self.held.load(Ordering::Relaxed) != 0
    }

    /// FAILOVER, or a shutdown waiting for replicas, holds writes
    /// (`true`) until it lets them go (`false`, once per hold).
    pub fn hold_writes(&self, held: bool) {
        if held {
            self.held.fetch_add(1, Ordering::AcqRel);
        } else if self.held.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.unpaused.notify_waiters();
        }
    }

    pub fn unpause(&self) {
        self.state.store(0, Ordering::Release);
        self.unpaused.notify_waiters();
    }

    /// How long a command must wait (one that may write when `writes`),
    /// if a pause holds it.
    pub fn wait(&self, writes: bool) -> Option<Duration> {
        if writes && self.held.load(Ordering::Acquire) != 0 {
            return Some(HELD_LOOK);
        }
        let state = self.state.load(Ordering::Acquire);
        if state == 0 || (state & 1 == 0 && !writes) {
            return None;
        }
        let now = self.base.elapsed().as_millis() as u64;
        let end = state >> 1;
        if end <= now {
            // Over: later commands take the fast path again.
            let _ = self.state.compare_exchange(state, 0, Ordering::AcqRel, Ordering::Relaxed);
            return None;
        }
        Some(Duration::from_millis(end - now))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pauses_hold_writes_or_everything_until_they_end() {
        let pause = Pause::default();
        assert!(pause.wait(true).is_none());
        pause.pause(10_000, false);
        assert!(pause.wait(false).is_none(), "WRITE lets reads through");
        assert!(pause.wait(true).unwrap() > Duration::from_secs(9));
        pause.pause(1, true);
        assert!(pause.wait(false).unwrap() > Duration::from_secs(9), "the later end and the stronger mode");
        pause.unpause();
        assert!(pause.wait(true).is_none());
        pause.pause(0, true);
        std::thread::sleep(Duration::from_millis(5));
        assert!(pause.wait(true).is_none(), "over");
        assert!(!pause.set(), "and forgotten");
        pause.pause(10_000, false);
        assert!(pause.wait(false).is_none(), "an ended ALL pause does not make a new WRITE pause ALL");
        pause.unpause();
        pause.hold_writes(true);
        assert!(pause.set());
        assert!(pause.wait(true).is_some() && pause.wait(false).is_none());
        pause.unpause();
        assert!(pause.wait(true).is_some(), "CLIENT UNPAUSE does not end a failover's hold");
        pause.hold_writes(false);
        assert!(pause.wait(true).is_none());
    }
}
