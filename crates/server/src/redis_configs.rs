//! Redis 7.0's configuration parameters, as a real redis-server reports
//! them (`redis_configs.tsv`, written by `scripts/gen-redis-configs.py`):
//! each one's default and the values it takes. CONFIG GET names every one
//! of them, CONFIG SET checks a value with Redis's own errors, and a
//! redis.conf or redis-server's `--name value` options are read as Redis
//! reads them (`crate::redis_conf`).
//!
//! ScaledKV implements some (`commands::server::parameters`: maxmemory,
//! timeout, ...). Of the rest, each is one of two `Role`s:
//! - `Kept`: any valid value is taken and CONFIG GET gives it back. Most
//!   are knobs of Redis's own machinery that ScaledKV does not have (its
//!   encodings' sizes, its AOF's rewrites, active defrag, cluster
//!   settings while it is off): they change nothing a client can see
//!   but the value itself (OBJECT ENCODING keeps to Redis's default
//!   sizes). Some are read where they matter (`hz`, `tcp-keepalive`,
//!   `tcp-backlog`, `shutdown-on-sigterm`, TLS's: see `KEPT`).
//! - `Fixed`: a behaviour ScaledKV does not have (cluster mode, OpenSSL
//!   cipher lists ...): only the value ScaledKV behaves as (Redis's
//!   default) is taken, any other refused saying so.

use std::collections::BTreeMap;
use std::sync::LazyLock;

use parking_lot::Mutex;

const TSV: &str = include_str!("redis_configs.tsv");

#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    Bool,
    Int {
        low: i128,
        high: i128,
    },
    /// A number of bytes with Redis's units (`k`, `kb`, `m`, `mb`, `g`,
    /// `gb`), or, where `percent`, a percentage (`10%`).
    Memory {
        low: i128,
        high: i128,
        percent: bool,
    },
    /// One of `choices`, or where `multi` several, space-separated.
    Enum {
        choices: Vec<String>,
        multi: bool,
    },
    Text,
    /// A syntax of its own (save, bind, client-output-buffer-limit ...).
    Special,
}

#[derive(Debug, Clone)]
pub struct Param {
    pub name: String,
    pub kind: Kind,
    pub default: String,
    /// CONFIG SET refuses it: set in redis.conf or on the command line.
    pub immutable: bool,
    /// Redis's older name for `alias` (slave-priority for replica-priority).
    pub alias: Option<String>,
}

pub static TABLE: LazyLock<Vec<Param>> = LazyLock::new(|| TSV.lines().map(parse_row).collect());

fn parse_row(line: &str) -> Param {
    let cols: Vec<&str> = line.split('\t').collect();
    let (name, kind, default, detail, flags) = (cols[0], cols[1], cols[2], cols[3], cols[4]);
    let flags: Vec<&str> = flags.split(',').filter(|f| !f.is_empty()).collect();
    let range = || {
        let (low, high) = detail.split_once(',').expect("a range");
        (low.parse().expect("a low bound"), high.parse().expect("a high bound"))
    };
    let kind = match kind {
        "bool" => Kind::Bool,
        "int" => {
            let (low, high) = range();
            Kind::Int { low, high }
        }
        "memory" => {
            let (low, high) = range();
            Kind::Memory { low, high, percent: flags.contains(&"percent") }
        }
        "enum" => {
            Kind::Enum { choices: detail.split(',').map(str::to_string).collect(), multi: flags.contains(&"multi") }
        }
        "text" => Kind::Text,
        "special" => Kind::Special,
        other => panic!("redis_configs.tsv: unknown kind {other:?} for {name}"),
    };
    Param {
        name: name.to_string(),
        kind,
        default: default.to_string(),
        immutable: flags.contains(&"immutable"),
        alias: flags.iter().find_map(|f| f.strip_prefix("alias=")).map(str::to_string),
    }
}

pub fn find(name: &str) -> Option<&'static Param> {
    TABLE.iter().find(|param| param.name == name)
}

/// What ScaledKV does with a Redis parameter it does not implement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    Kept,
    Fixed,
}

/// Redis's knobs for machinery ScaledKV does not have; see the module's
/// comment. Every other parameter ScaledKV does not implement is `Fixed`.
const KEPT: &[&str] = &[
    // Active defragmentation, rehashing and expiry effort, jemalloc,
    // lazy freeing: ScaledKV's log and index have
    // their own background work (GC, the merger, active expiry).
    "activedefrag",
    "active-defrag-cycle-max",
    "active-defrag-cycle-min",
    "active-defrag-ignore-bytes",
    "active-defrag-max-scan-fields",
    "active-defrag-threshold-lower",
    "active-defrag-threshold-upper",
    "activerehashing",
    "active-expire-effort",
    "dynamic-hz",
    "jemalloc-bg-thread",
    "lazyfree-lazy-eviction",
    "lazyfree-lazy-expire",
    "lazyfree-lazy-server-del",
    "lazyfree-lazy-user-del",
    "lazyfree-lazy-user-flush",
    "replica-lazy-flush",
    "io-threads-do-reads",
    "disable-thp",
    // Encodings' sizes: ScaledKV stores collections its own way.
    "hash-max-listpack-entries",
    "hash-max-listpack-value",
    "list-max-listpack-size",
    "list-compress-depth",
    "set-max-intset-entries",
    "zset-max-listpack-entries",
    "zset-max-listpack-value",
    "stream-node-max-bytes",
    "stream-node-max-entries",
    "hll-sparse-max-bytes",
    // The AOF and RDB snapshots' tuning: ScaledKV's log is its
    // persistence, and a BGSAVE's failure stops no write.
    "aof-disable-auto-gc",
    "aof-load-truncated",
    "aof-rewrite-incremental-fsync",
    "aof-timestamp-enabled",
    "aof-use-rdb-preamble",
    "appenddirname",
    "appendfilename",
    "auto-aof-rewrite-min-size",
    "auto-aof-rewrite-percentage",
    "no-appendfsync-on-rewrite",
    "rdb-save-incremental-fsync",
    "rdb-del-sync-files",
    "rdbchecksum",
    "stop-writes-on-bgsave-error",
    // Eviction's sampling: ScaledKV's eviction walks its log.
    "maxmemory-samples",
    "maxmemory-eviction-tenacity",
    // How a full sync travels and how a link is watched.
    "repl-diskless-sync",
    "repl-diskless-sync-delay",
    "repl-diskless-sync-max-replicas",
    "repl-diskless-load",
    "repl-disable-tcp-nodelay",
    "repl-backlog-ttl",
    "repl-ping-replica-period",
    "repl-timeout",
    "replica-ignore-maxmemory",
    "replica-ignore-disk-write-errors",
    "propagation-error-behavior",
    "sanitize-dump-payload",
    // What SIGTERM and SIGINT do: `now` skips the wait for replicas
    // (`crate::server`); ScaledKV's data needs no save at shutdown.
    "shutdown-on-sigterm",
    "shutdown-on-sigint",
    // The active expiry's rate (`crate::expiry`), probes of idle
    // clients' connections (`crate::conn`), the listen queue's length
    // (`crate::server`).
    "hz",
    "tcp-keepalive",
    "tcp-backlog",
    // The process's looks and crash report.
    "always-show-logo",
    "set-proc-title",
    "proc-title-template",
    "crash-log-enabled",
    "crash-memcheck-enabled",
    "ignore-warnings",
    "syslog-ident",
    "syslog-facility",
    "oom-score-adj-values",
    // TLS (`crate::tls`): the port, read at start; whether the link to a
    // master speaks it; the contexts' settings, read at start and whenever
    // CONFIG SET changes one (the client certificate's too, for that link),
    // and the cluster's.
    "tls-port",
    "tls-replication",
    // Cluster settings do nothing while cluster-enabled is no, in Redis
    // too.
    "cluster-allow-pubsubshard-when-down",
    "cluster-allow-reads-when-down",
    "cluster-allow-replica-migration",
    "cluster-announce-bus-port",
    "cluster-announce-hostname",
    "cluster-announce-ip",
    "cluster-announce-port",
    "cluster-announce-tls-port",
    "cluster-config-file",
    "cluster-link-sendbuf-limit",
    "cluster-migration-barrier",
    "cluster-node-timeout",
    "cluster-port",
    "cluster-preferred-endpoint-type",
    "cluster-replica-no-failover",
    "cluster-replica-validity-factor",
    "cluster-require-full-coverage",
    "tls-auth-clients",
    "tls-ca-cert-dir",
    "tls-ca-cert-file",
    "tls-cert-file",
    "tls-client-cert-file",
    "tls-client-key-file",
    "tls-cluster",
    "tls-key-file",
    "tls-prefer-server-ciphers",
    "tls-protocols",
    "tls-session-cache-size",
    "tls-session-cache-timeout",
    "tls-session-caching",
];

impl Param {
    /// The parameter whose value this one is (itself, or the newer name).
    pub fn canonical(&'static self) -> &'static Param {
        self.alias.as_deref().and_then(find).unwrap_or(self)
    }

    pub fn role(&'static self) -> Role {
        match KEPT.contains(&self.canonical().name.as_str()) {
            true => Role::Kept,
            false => Role::Fixed,
        }
    }

    /// `text` as CONFIG GET would give it back, or Redis's reason for
    /// refusing it (what follows "CONFIG SET failed (...) - ").
    pub fn check(&self, text: &str) -> Result<String, String> {
        match &self.kind {
            Kind::Bool => match text.to_ascii_lowercase().as_str() {
                value @ ("yes" | "no") => Ok(value.to_string()),
                _ => Err("argument must be 'yes' or 'no'".into()),
            },
            Kind::Int { low, high } => {
                let n = parse_ll(text).ok_or("argument couldn't be parsed into an integer")?;
                in_range(n, *low, *high)?;
                Ok(n.to_string())
            }
            Kind::Memory { low, high, percent } => {
                if *percent && text.len() > 1 && text.ends_with('%') {
                    return match parse_ll(&text[..text.len() - 1]) {
                        Some(n) if n >= 0 => Ok(format!("{n}%")),
                        _ => Err("argument must be a memory or percent value".into()),
                    };
                }
                let n = crate::maxmemory::parse_bytes(text).ok_or(match percent {
                    true => "argument must be a memory or percent value",
                    false => "argument must be a memory value",
                })?;
                in_range(i128::from(n), *low, *high)?;
                Ok(n.to_string())
            }
            Kind::Enum { choices, multi } => {
                let words: Vec<String> = text.split_whitespace().map(str::to_ascii_lowercase).collect();
                let known = |word: &String| choices.iter().any(|choice| choice == word);
                if words.is_empty() || (!multi && words.len() > 1) || !words.iter().all(known) {
                    return Err(format!("argument(s) must be one of the following: {}", choices.join(", ")));
                }
                Ok(words.join(" "))
            }
            Kind::Text | Kind::Special => Ok(text.to_string()),
        }
    }
}

fn in_range(n: i128, low: i128, high: i128) -> Result<(), String> {
    match (low..=high).contains(&n) {
        true => Ok(()),
        false => Err(format!("argument must be between {low} and {high} inclusive")),
    }
}

/// Redis's `string2ll`: an optional minus, then digits with no leading
/// zero (but "0" itself), fitting 64 bits.
fn parse_ll(text: &str) -> Option<i128> {
    let digits = text.strip_prefix('-').unwrap_or(text);
    let plain = !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit());
    let canonical = digits == "0" && digits.len() == text.len() || !digits.starts_with('0');
    let n: i128 = text.parse().ok().filter(|_| plain && canonical)?;
    i64::try_from(n).ok().map(i128::from)
}

/// The values of the Redis parameters ScaledKV does not implement, by
/// canonical name: Redis's defaults, as redis.conf, the command line or
/// CONFIG SET left them.
#[derive(Default)]
pub struct Store {
    values: Mutex<BTreeMap<&'static str, String>>,
}

impl Store {
    pub fn get(&self, param: &'static Param) -> String {
        let param = param.canonical();
        self.values.lock().get(param.name.as_str()).cloned().unwrap_or_else(|| param.default.clone())
    }

    /// The value of Redis's parameter `name` (one of the table's).
    pub fn value(&self, name: &str) -> String {
        self.get(find(name).unwrap_or_else(|| panic!("{name} is not one of Redis's parameters")))
    }

    /// Sets `param` to `text` if its role takes it, or says why not (the
    /// reason as Redis's errors word it: after "CONFIG SET failed (...) -
    /// ").
    pub fn set(&self, param: &'static Param, text: &str) -> Result<(), String> {
        let value = param.check(text)?;
        let canonical = param.canonical();
        if canonical.role() == Role::Fixed && value != self.get(canonical) {
            return Err(fixed_reason(canonical));
        }
        self.values.lock().insert(canonical.name.as_str(), value);
        Ok(())
    }
}

/// Why a `Fixed` parameter keeps its value.
fn fixed_reason(param: &Param) -> String {
    let name = param.name.as_str();
    let why = match name {
        "cluster-enabled" => "ScaledKV has no cluster mode (twemproxy shards it: see the README)",
        "tls-ciphers" | "tls-ciphersuites" => {
            "ScaledKV's TLS (rustls) offers its own suites and reads no OpenSSL cipher lists"
        }
        "tls-dh-params-file" => "ScaledKV's TLS (rustls) has no DHE key exchange",
        "tls-key-file-pass" | "tls-client-key-file-pass" => "ScaledKV reads only unencrypted PEM keys",
        "maxmemory-clients" => "ScaledKV does not evict clients",
        "supervised" => "ScaledKV does not talk to upstart or systemd (run it as a simple service)",
        "syslog-enabled" => "ScaledKV logs to stderr or its logfile",
        "aclfile" => "ScaledKV keeps ACL users in its data directory (ACL SAVE)",
        "enable-debug-command" | "enable-module-command" | "enable-protected-configs" => {
            "ScaledKV has no DEBUG command, no modules, and protects no configs"
        }
        _ => "",
    };
    let value = match param.default.as_str() {
        "" => "\"\"".to_string(),
        default => default.to_string(),
    };
    match why {
        "" => format!("ScaledKV does not implement {name}: it stays {value}"),
        why => format!("{why}: {name} stays {value}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_names_every_parameter_of_redis_7_0_with_a_role() {
        assert_eq!(TABLE.len(), 192);
        for name in KEPT {
            let param = find(name).unwrap_or_else(|| panic!("{name} is not one of Redis's parameters"));
            assert!(param.alias.is_none(), "{name}: KEPT names the newer name");
        }
        assert_eq!(find("slave-lazy-flush").unwrap().canonical().name, "replica-lazy-flush");
        assert_eq!(find("slave-lazy-flush").unwrap().role(), Role::Kept);
        assert_eq!(find("slave-serve-stale-data").unwrap().role(), Role::Fixed);
    }

    #[test]
    fn values_are_checked_and_written_as_redis_does() {
        let hz = find("hz").unwrap();
        assert_eq!(hz.check("100"), Ok("100".into()));
        for bad in ["+1", "01", "-0", "1.5", "", " 1", "99999999999999999999"] {
            assert_eq!(hz.check(bad), Err("argument couldn't be parsed into an integer".into()), "{bad:?}");
        }
        assert_eq!(hz.check("-1"), Err("argument must be between 0 and 2147483647 inclusive".into()));
        let bytes = find("hash-max-listpack-value").unwrap();
        assert_eq!(bytes.check("1kb"), Ok("1024".into()));
        assert_eq!(bytes.check("1K"), Ok("1000".into()));
        assert_eq!(bytes.check("2GB"), Ok("2147483648".into()));
        assert_eq!(bytes.check("-1"), Err("argument must be a memory value".into()));
        assert_eq!(bytes.check("1tb"), Err("argument must be a memory value".into()));
        let limit = find("client-query-buffer-limit").unwrap();
        assert_eq!(limit.check("1"), Err("argument must be between 1048576 and 9223372036854775807 inclusive".into()));
        let clients = find("maxmemory-clients").unwrap();
        assert_eq!(clients.check("10%"), Ok("10%".into()));
        assert_eq!(clients.check("x%"), Err("argument must be a memory or percent value".into()));
        let flag = find("activedefrag").unwrap();
        assert_eq!(flag.check("YES"), Ok("yes".into()));
        assert_eq!(flag.check("1"), Err("argument must be 'yes' or 'no'".into()));
        let load = find("repl-diskless-load").unwrap();
        assert_eq!(load.check("SwapDB"), Ok("swapdb".into()));
        assert_eq!(
            load.check("swapdb disabled"),
            Err("argument(s) must be one of the following: disabled, on-empty-db, swapdb".into())
        );
        assert_eq!(find("shutdown-on-sigterm").unwrap().check("nosave now"), Ok("nosave now".into()));
    }

    #[test]
    fn kept_parameters_take_any_valid_value_and_fixed_ones_only_their_own() {
        let store = Store::default();
        let hz = find("hz").unwrap();
        assert_eq!(store.get(hz), "10");
        store.set(hz, "50").unwrap();
        assert_eq!(store.get(hz), "50");
        let older = find("hash-max-ziplist-entries").unwrap();
        store.set(older, "7").unwrap();
        assert_eq!(store.get(find("hash-max-listpack-entries").unwrap()), "7");
        let fixed = find("replica-announce-port").unwrap();
        store.set(fixed, "0").unwrap();
        let refused = store.set(fixed, "1").unwrap_err();
        assert!(refused.contains("replica-announce-port: it stays 0"), "{refused}");
        assert_eq!(store.get(fixed), "0");
        assert_eq!(store.set(fixed, "x").unwrap_err(), "argument couldn't be parsed into an integer");
    }
}
