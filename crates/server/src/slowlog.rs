//! SLOWLOG: the commands that took at least `slowlog-log-slower-than`
//! microseconds (10,000 by default; a negative value logs nothing), the
//! newest `slowlog-max-len` (128) of them, kept as Redis keeps them: an
//! id, when it ran, how long it took, its arguments (at most 32, each cut
//! at 128 bytes, passwords redacted), the client's address and name.
//!
//! A command's time runs from the start of its run to its reply being
//! ready. For a write that includes waiting for its keys' locks and, when
//! it commits alone, for its durable commit (Redis has no such wait); a
//! pipelined write's commit is counted in the command that settles the
//! run. A command inside EXEC is timed and logged by itself, EXEC not (as
//! in Redis). A blocked command is timed by the run that serves it, its
//! wait not counted (one that times out is not logged). Times come from the TSC (`quanta`): two reads per
//! command, ~10 ns each, instead of ~25 ns for each `Instant`. The latency
//! monitor (`crate::latency`) takes the same times.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicI64, AtomicU64, AtomicUsize, Ordering};

use bytes::Bytes;
use parking_lot::Mutex;

/// Redis's `SLOWLOG_ENTRY_MAX_ARGC` and `SLOWLOG_ENTRY_MAX_STRING`.
const MAX_ARGS: usize = 32;
const MAX_ARG_BYTES: usize = 128;

/// One logged command.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry {
    pub id: u64,
    /// Unix seconds.
    pub time: u64,
    pub micros: u64,
    pub args: Vec<Bytes>,
    /// `ip:port`.
    pub peer: String,
    pub name: String,
}

pub struct SlowLog {
    clock: quanta::Clock,
    slower_than: AtomicI64,
    max_len: AtomicUsize,
    next_id: AtomicU64,
    /// Newest first.
    entries: Mutex<VecDeque<Entry>>,
}

impl SlowLog {
    pub fn new(slower_than_micros: i64, max_len: usize) -> SlowLog {
        SlowLog {
            clock: quanta::Clock::new(),
            slower_than: AtomicI64::new(slower_than_micros),
            max_len: AtomicUsize::new(max_len),
            next_id: AtomicU64::new(0),
            entries: Mutex::new(VecDeque::new()),
        }
    }

    /// The clock commands are timed with (a raw TSC reading).
    pub fn now(&self) -> u64 {
        self.clock.raw()
    }

    pub fn nanos_since(&self, started: u64) -> u64 {
        self.clock.delta_as_nanos(started, self.clock.raw())
    }

    /// Logs `args`, a command that took `micros` for `peer` (named
    /// `name`), if that is long enough.
    pub fn record(&self, micros: u64, args: &[Bytes], peer: impl FnOnce() -> (String, String)) {
        let threshold = self.slower_than.load(Ordering::Relaxed);
        if threshold < 0 || micros < threshold as u64 || is_exec(args) {
            return;
        }
        let (peer, name) = peer();
        self.push(micros, args, peer, name);
    }

    fn push(&self, micros: u64, args: &[Bytes], peer: String, name: String) {
        let time = scaledkv::now_ms() / 1000;
        let args = logged_args(args);
        let mut entries = self.entries.lock();
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        entries.push_front(Entry { id, time, micros, args, peer, name });
        entries.truncate(self.max_len.load(Ordering::Relaxed));
    }

    /// The newest `count` entries (all of them for `None`), newest first.
    pub fn newest(&self, count: Option<usize>) -> Vec<Entry> {
        let entries = self.entries.lock();
        entries.iter().take(count.unwrap_or(usize::MAX)).cloned().collect()
    }

    pub fn len(&self) -> usize {
        self.entries.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    pub fn reset(&self) {
        self.entries.lock().clear();
    }

    pub fn slower_than(&self) -> i64 {
        self.slower_than.load(Ordering::Relaxed)
    }

    pub fn set_slower_than(&self, micros: i64) {
        self.slower_than.store(micros, Ordering::Relaxed);
    }

    pub fn max_len(&self) -> usize {
        self.max_len.load(Ordering::Relaxed)
    }

    pub fn set_max_len(&self, len: usize) {
        self.max_len.store(len, Ordering::Relaxed);
        self.entries.lock().truncate(len);
    }
}

fn is_exec(args: &[Bytes]) -> bool {
    args.first().is_some_and(|name| name.eq_ignore_ascii_case(b"exec"))
}

/// The positions in `args` of credentials, which the slow log and
/// MONITOR show as "(redacted)", as Redis does: AUTH's arguments, HELLO's
/// AUTH pair, CONFIG SET requirepass's value, ACL SETUSER's user and
/// rules, MIGRATE's AUTH password and AUTH2 pair.
pub fn secret_positions(args: &[Bytes]) -> Vec<usize> {
    let word = |i: usize, w: &str| args.get(i).is_some_and(|arg: &Bytes| arg.eq_ignore_ascii_case(w.as_bytes()));
    let mut secret = Vec::new();
    if word(0, "auth") && args.len() <= 3 {
        secret.extend(1..args.len());
    } else if word(0, "hello") {
        if let Some(at) = (2..args.len()).find(|&i| word(i, "auth") && i + 2 < args.len()) {
            secret.extend([at + 1, at + 2]);
        }
    } else if word(0, "acl") && word(1, "setuser") {
        secret.extend(2..args.len());
    } else if word(0, "config") && word(1, "set") {
        secret.extend((2..args.len()).step_by(2).filter(|&i| word(i, "requirepass")).map(|i| i + 1));
    } else if word(0, "migrate") {
        // As MIGRATE reads its options: KEYS ends them.
        let mut i = 6;
        while i < args.len() && !word(i, "keys") {
            let after = if word(i, "auth") {
                1
            } else if word(i, "auth2") {
                2
            } else {
                0
            };
            secret.extend((i + 1..=i + after).filter(|&at| at < args.len()));
            i += 1 + after;
        }
    }
    secret
}

/// What the log keeps of `args`: Redis's cuts, credentials
/// (`secret_positions`) as "(redacted)".
fn logged_args(args: &[Bytes]) -> Vec<Bytes> {
    let mut kept: Vec<Bytes> = args.to_vec();
    for i in secret_positions(args) {
        kept[i] = Bytes::from_static(b"(redacted)");
    }
    let total = kept.len();
    if total > MAX_ARGS {
        kept.truncate(MAX_ARGS - 1);
    }
    for arg in kept.iter_mut() {
        if arg.len() > MAX_ARG_BYTES {
            let mut cut = arg[..MAX_ARG_BYTES].to_vec();
            cut.extend_from_slice(format!("... ({} more bytes)", arg.len() - MAX_ARG_BYTES).as_bytes());
            *arg = Bytes::from(cut);
        }
    }
    if total > MAX_ARGS {
        kept.push(Bytes::from(format!("... ({} more arguments)", total - MAX_ARGS + 1)));
    }
    kept
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(words: &[&str]) -> Vec<Bytes> {
        words.iter().map(|w| Bytes::copy_from_slice(w.as_bytes())).collect()
    }

    #[test]
    fn arguments_are_cut_and_redacted_as_redis_does() {
        assert_eq!(logged_args(&args(&["AUTH", "pw"])), args(&["AUTH", "(redacted)"]));
        assert_eq!(logged_args(&args(&["auth", "user", "pw"])), args(&["auth", "(redacted)", "(redacted)"]));
        assert_eq!(
            logged_args(&args(&["MIGRATE", "h", "1", "", "0", "5", "COPY", "AUTH2", "u", "pw", "KEYS", "auth", "k"])),
            args(&[
                "MIGRATE",
                "h",
                "1",
                "",
                "0",
                "5",
                "COPY",
                "AUTH2",
                "(redacted)",
                "(redacted)",
                "KEYS",
                "auth",
                "k"
            ])
        );
        assert_eq!(
            logged_args(&args(&["migrate", "h", "1", "k", "0", "5", "auth", "pw"])),
            args(&["migrate", "h", "1", "k", "0", "5", "auth", "(redacted)"])
        );
        assert_eq!(logged_args(&args(&["AUTH", "a", "b", "c"])), args(&["AUTH", "a", "b", "c"]), "a syntax error");
        assert_eq!(
            logged_args(&args(&["HELLO", "3", "AUTH", "u", "p", "SETNAME", "n"])),
            args(&["HELLO", "3", "AUTH", "(redacted)", "(redacted)", "SETNAME", "n"])
        );
        assert_eq!(
            logged_args(&args(&["CONFIG", "SET", "maxclients", "5", "requirepass", "secret"])),
            args(&["CONFIG", "SET", "maxclients", "5", "requirepass", "(redacted)"])
        );
        let long = "x".repeat(200);
        let cut = format!("{}... (72 more bytes)", &long[..128]);
        assert_eq!(logged_args(&args(&["SET", "k", &long])), args(&["SET", "k", &cut]));
        let many: Vec<String> = (0..40).map(|i| i.to_string()).collect();
        let logged = logged_args(&args(&many.iter().map(String::as_str).collect::<Vec<_>>()));
        assert_eq!(logged.len(), 32);
        assert_eq!(logged[30], "30");
        assert_eq!(logged[31], "... (9 more arguments)");
    }

    #[test]
    fn the_log_keeps_the_newest_and_skips_exec() {
        let log = SlowLog::new(0, 2);
        for name in ["a", "b", "exec", "c"] {
            log.record(0, &args(&[name]), || ("127.0.0.1:1".into(), "me".into()));
        }
        let newest = log.newest(None);
        assert_eq!(
            newest.iter().map(|e| (e.id, e.args[0].clone())).collect::<Vec<_>>(),
            [(2, "c".into()), (1, "b".into())]
        );
        assert_eq!((newest[0].peer.as_str(), newest[0].name.as_str()), ("127.0.0.1:1", "me"));
        log.set_max_len(1);
        assert_eq!(log.len(), 1);
        log.set_slower_than(-1);
        log.record(5_000_000, &args(&["off"]), || unreachable!("off"));
        log.set_slower_than(1_000_000);
        log.record(999_999, &args(&["fast"]), || unreachable!("not slow enough"));
        log.reset();
        assert!(log.is_empty());
    }
}
