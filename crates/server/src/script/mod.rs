//! Lua scripting, as Redis 7's EVAL: the script cache and its limits,
//! shebang flags, and what SCRIPT KILL needs to find a busy script.
//!
//! - `vm`: each thread's sandboxed Lua 5.1 state and one script's run;
//! - `call`: `redis.call` on Lua's C API (arguments out, replies in);
//! - `convert`: a script's result to its reply;
//! - `libs`, `msgpack`: the `cjson`, `bit` and `cmsgpack` libraries Redis
//!   gives scripts.
//!
//! A script's writes go into one batch, as a transaction's do: they become
//! durable and visible together once the script ends (`commands::scripting`
//! holds its keys' locks meanwhile), so a killed script wrote nothing.

pub mod call;
pub mod convert;
pub mod functions;
pub mod libs;
pub mod msgpack;
pub mod vm;

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use sha1::{Digest, Sha1};

/// Scripts cached by EVAL (not SCRIPT LOAD) beyond this many are dropped,
/// least recently used first, as Redis 7.4 does: a client sending scripts
/// with their values inlined would otherwise grow the cache without end.
const EVAL_CACHED_MAX: usize = 500;

/// A cached script.
pub struct Script {
    /// Its SHA1, 40 lower-case hex digits.
    pub sha: String,
    /// What Lua compiles: the body with a shebang line turned into a
    /// comment (line numbers stay those the client sent).
    pub source: Vec<u8>,
    /// The shebang's flags (`#!lua flags=no-writes`); none without a
    /// shebang (Redis's compatibility mode: it may write, checked command
    /// by command).
    pub flags: Option<functions::Flags>,
}

struct Cached {
    script: Arc<Script>,
    /// Cached by SCRIPT LOAD: kept until SCRIPT FLUSH.
    loaded: bool,
    last_used: u64,
}

/// The server's scripts and the state SCRIPT KILL works with.
#[derive(Default)]
pub struct Scripts {
    cache: Mutex<HashMap<String, Cached>>,
    uses: AtomicU64,
    /// Bumped by SCRIPT FLUSH: each thread's Lua state drops what it
    /// compiled before.
    pub generation: AtomicU64,
    pub control: Arc<Control>,
}

/// Shared by the running scripts' hooks and SCRIPT KILL.
pub struct Control {
    /// Scripts that have run longer than `busy_millis`: what SCRIPT KILL
    /// may stop (Redis's only running script is busy once another client
    /// can ask).
    pub busy: AtomicUsize,
    /// Bumped by SCRIPT KILL; a busy script that started under another
    /// value stops.
    pub kill_epoch: AtomicU64,
    /// The busy scripts that are library functions (FUNCTION STATS shows
    /// them; FUNCTION KILL stops them, SCRIPT KILL the others).
    pub busy_functions: Mutex<Vec<BusyFunction>>,
    /// Bumped by FUNCTION KILL, as `kill_epoch` by SCRIPT KILL.
    pub function_kill_epoch: AtomicU64,
    /// `busy-reply-threshold` (Redis's `lua-time-limit`), milliseconds.
    pub busy_millis: AtomicU64,
    /// `script-memory-limit`: what a thread's Lua state may hold; past it
    /// allocations fail and the script ends with "not enough memory".
    /// Redis sets none.
    pub memory_limit: AtomicU64,
}

impl Default for Control {
    fn default() -> Self {
        Control {
            busy: AtomicUsize::new(0),
            kill_epoch: AtomicU64::new(0),
            busy_functions: Mutex::new(Vec::new()),
            function_kill_epoch: AtomicU64::new(0),
            busy_millis: AtomicU64::new(5000),
            memory_limit: AtomicU64::new(1 << 30),
        }
    }
}

/// A library function's run, as FUNCTION STATS shows it once busy.
#[derive(Clone)]
pub struct BusyFunction {
    /// Tells runs apart.
    pub run: u64,
    pub name: String,
    /// The FCALL that called it.
    pub command: Vec<bytes::Bytes>,
    pub started: std::time::Instant,
}

impl Control {
    /// Busy scripts that are not library functions.
    pub fn busy_scripts(&self) -> usize {
        self.busy.load(Ordering::Relaxed).saturating_sub(self.busy_functions.lock().len())
    }
}

impl Scripts {
    /// No scripts yet; scripts run `busy_millis` before SCRIPT KILL may
    /// stop them, in Lua states of at most `memory_limit` bytes.
    pub fn new(busy_millis: u64, memory_limit: u64) -> Scripts {
        let control = Control {
            busy_millis: AtomicU64::new(busy_millis),
            memory_limit: AtomicU64::new(memory_limit),
            ..Control::default()
        };
        Scripts { control: Arc::new(control), ..Scripts::default() }
    }

    /// Caches `body` (EVAL, or SCRIPT LOAD when `load`) and returns it, or
    /// the shebang's error.
    pub fn add(&self, body: &[u8], load: bool) -> Result<Arc<Script>, String> {
        let sha = sha1_hex(body);
        let mut cache = self.cache.lock();
        let used = self.uses.fetch_add(1, Ordering::Relaxed);
        if let Some(cached) = cache.get_mut(&sha) {
            cached.loaded |= load;
            cached.last_used = used;
            return Ok(cached.script.clone());
        }
        let (flags, source) = parse_shebang(body)?;
        let script = Arc::new(Script { sha: sha.clone(), source, flags });
        cache.insert(sha, Cached { script: script.clone(), loaded: load, last_used: used });
        if !load {
            let evaluated = cache.values().filter(|c| !c.loaded).count();
            if evaluated > EVAL_CACHED_MAX {
                let oldest = cache.iter().filter(|(_, c)| !c.loaded).min_by_key(|(_, c)| c.last_used);
                let oldest = oldest.map(|(sha, _)| sha.clone()).expect("more than the limit");
                cache.remove(&oldest);
            }
        }
        Ok(script)
    }

    /// The script whose SHA1 is `sha` (in any case), if cached.
    pub fn get(&self, sha: &[u8]) -> Option<Arc<Script>> {
        if sha.len() != 40 {
            return None;
        }
        let sha = std::str::from_utf8(sha).ok()?.to_ascii_lowercase();
        let mut cache = self.cache.lock();
        let cached = cache.get_mut(&sha)?;
        cached.last_used = self.uses.fetch_add(1, Ordering::Relaxed);
        Some(cached.script.clone())
    }

    /// Forgets a script that does not compile (Redis never caches one).
    pub fn remove(&self, sha: &str) {
        self.cache.lock().remove(sha);
    }

    pub fn contains(&self, sha: &[u8]) -> bool {
        let sha = String::from_utf8_lossy(sha).to_ascii_lowercase();
        self.cache.lock().contains_key(&sha)
    }

    pub fn flush(&self) {
        self.cache.lock().clear();
        self.generation.fetch_add(1, Ordering::Relaxed);
    }

    /// Scripts cached and their bodies' bytes (INFO memory).
    pub fn sizes(&self) -> (usize, usize) {
        let cache = self.cache.lock();
        (cache.len(), cache.values().map(|c| c.script.source.len()).sum())
    }
}

pub fn sha1_hex(data: &[u8]) -> String {
    hex(&Sha1::digest(data))
}

/// `bytes` as lower-case hex digits.
pub fn hex(bytes: &[u8]) -> String {
    use std::fmt::Write;
    let mut text = String::with_capacity(bytes.len() * 2);
    for byte in bytes {
        let _ = write!(text, "{byte:02x}");
    }
    text
}

/// Redis 7's shebang (`#!lua flags=no-writes,allow-oom`): its flags
/// (none without one), and the source Lua compiles. Flags ScaledKV
/// accepts but need not act on: `allow-stale`, `no-cluster`,
/// `allow-cross-slot-keys` (one node, no replicas).
fn parse_shebang(body: &[u8]) -> Result<(Option<functions::Flags>, Vec<u8>), String> {
    let Some(rest) = body.strip_prefix(b"#!") else {
        return Ok((None, body.to_vec()));
    };
    let line_end = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
    let line = String::from_utf8_lossy(&rest[..line_end]);
    let mut words = line.split(' ').filter(|w| !w.is_empty());
    if words.next() != Some("lua") {
        let shown = String::from_utf8_lossy(&body[..line_end + 2]);
        return Err(format!("ERR Unexpected engine in script shebang: {shown}"));
    }
    let mut flags = functions::Flags::default();
    for word in words {
        let Some(names) = word.strip_prefix("flags=") else {
            return Err(format!("ERR Unknown lua shebang option: {word}"));
        };
        for name in names.split(',').filter(|f| !f.is_empty()) {
            let flag = functions::Flags::named(name);
            flags.insert(flag.ok_or_else(|| format!("ERR Unexpected flag in script shebang: {name}"))?);
        }
    }
    let mut source = b"--".to_vec();
    source.extend_from_slice(body);
    Ok((Some(flags), source))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha1_matches_redis() {
        assert_eq!(sha1_hex(b""), "da39a3ee5e6b4b0d3255bfef95601890afd80709");
        assert_eq!(sha1_hex(b"return 1"), "e0e1f9fabfc9d4800c877a703b823ac0578ff8db");
    }

    #[test]
    fn shebangs_are_parsed_as_redis_does() {
        assert_eq!(parse_shebang(b"return 1").unwrap(), (None, b"return 1".to_vec()));
        let (flags, source) = parse_shebang(b"#!lua flags=no-writes,allow-oom\nreturn 1").unwrap();
        assert_eq!(flags.unwrap().names().collect::<Vec<_>>(), ["no-writes", "allow-oom"]);
        assert_eq!(parse_shebang(b"#!lua\nreturn 1").unwrap().0, Some(functions::Flags::default()));
        assert_eq!(source, b"--#!lua flags=no-writes,allow-oom\nreturn 1");
        assert_eq!(parse_shebang(b"#!lua flags=bogus\n").unwrap_err(), "ERR Unexpected flag in script shebang: bogus");
        assert_eq!(parse_shebang(b"#!lua name=x\n").unwrap_err(), "ERR Unknown lua shebang option: name=x");
        assert_eq!(
            parse_shebang(b"#!notlua\nreturn 1").unwrap_err(),
            "ERR Unexpected engine in script shebang: #!notlua"
        );
    }

    #[test]
    fn evaluated_scripts_are_bounded_and_loaded_ones_kept() {
        let scripts = Scripts::default();
        let loaded = scripts.add(b"return 'loaded'", true).unwrap();
        let first = scripts.add(b"return 0", false).unwrap();
        for n in 1..=EVAL_CACHED_MAX {
            scripts.add(format!("return {n}").as_bytes(), false).unwrap();
        }
        assert!(scripts.get(loaded.sha.as_bytes()).is_some());
        assert!(scripts.get(first.sha.as_bytes()).is_none(), "the least recently used went");
        assert_eq!(scripts.sizes().0, EVAL_CACHED_MAX + 1);
        assert!(scripts.get(loaded.sha.to_uppercase().as_bytes()).is_some());
        scripts.flush();
        assert_eq!(scripts.sizes().0, 0);
    }
}
