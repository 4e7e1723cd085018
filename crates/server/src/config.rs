//! Settings: command-line flags over a TOML file over defaults.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use clap::Parser;
use scaledkv::{Durability, Options, SsdTier};
use serde::Deserialize;

use crate::maxmemory::{parse_bytes, segment_bytes, MemoryLimit};

pub const DEFAULT_PORT: u16 = 6379;
pub const DEFAULT_DIR: &str = "scaledkv-data/server";

#[derive(Parser, Debug, Default)]
#[command(
    name = "scaledkv-server",
    // A later flag wins, as a later line of a redis.conf does
    // (`crate::redis_conf` puts the file's before the command line's).
    args_override_self = true,
    override_usage = "scaledkv-server [/path/to/redis.conf] [OPTIONS] [--<redis-parameter> <value>...]",
    after_help = "As redis-server, a redis.conf may come first (`-` reads it from stdin), and any of Redis's \
                  parameters may follow as `--name value` (`--hz 20`); see the README.",
    version,
    about = "ScaledKV: a Redis- and memcached-protocol server whose every write is durable"
)]
pub struct Cli {
    /// Address to listen on (default 127.0.0.1: loopback only).
    #[arg(long)]
    pub bind: Option<String>,
    /// RESP (Redis protocol) port (default 6379; 0 picks a free port).
    #[arg(long)]
    pub port: Option<u16>,
    /// Data directory (default ./scaledkv-data/server).
    #[arg(long)]
    pub dir: Option<PathBuf>,
    /// pmem | sync | buffered (default sync: a reply to a write means it is on the medium).
    #[arg(long)]
    pub durability: Option<Durability>,
    /// Require AUTH with this password.
    #[arg(long)]
    pub requirepass: Option<String>,
    /// TOML file with any of these settings (flags win).
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Most connected clients (default 10000).
    #[arg(long)]
    pub maxclients: Option<usize>,
    /// Close clients idle this many seconds (default 0: never).
    #[arg(long)]
    pub timeout: Option<u64>,
    /// Largest bulk string a client may send, in bytes (default 16 MiB, the engine's value limit).
    #[arg(long = "proto-max-bulk-len")]
    pub proto_max_bulk_len: Option<usize>,
    /// Serve Prometheus metrics over HTTP on this port (off by default).
    #[arg(long = "metrics-port")]
    pub metrics_port: Option<u16>,
    /// I/O threads, each serving its share of the connections (default:
    /// half the cores, at least one). On 2 cores shared with the load
    /// generator one is faster at pipeline depth 1, two at depth 16.
    #[arg(long)]
    pub threads: Option<usize>,
    /// Let the log grow to this many times the live data before garbage
    /// collection copies anything (default 2; 1 collects at once, copying
    /// more and holding less disk; as Redis's auto-aof-rewrite-percentage).
    #[arg(long = "gc-space-amp")]
    pub gc_space_amp: Option<f64>,
    /// Keyspace notifications to publish, as Redis's setting of this name
    /// (`KEA` for all; default none). CONFIG SET changes it.
    #[arg(long = "notify-keyspace-events")]
    pub notify_keyspace_events: Option<String>,
    /// Output limits, as Redis's setting of this name (default `pubsub
    /// 32mb 8mb 60`: a subscriber past 32 MiB waiting, or past 8 MiB for
    /// 60 s, is closed). CONFIG SET changes it.
    #[arg(long = "client-output-buffer-limit")]
    pub client_output_buffer_limit: Option<String>,
    /// Follow this Redis master from the start ("host port"), as REPLICAOF
    /// does: a full sync, then its writes.
    #[arg(long = "replicaof")]
    pub replicaof: Option<String>,
    /// The password REPLICAOF's link authenticates with.
    #[arg(long = "masterauth")]
    pub masterauth: Option<String>,
    /// Load this Redis RDB file (a dump.rdb) into the empty database as
    /// the server starts; skipped once imported (`crate::rdb_import`).
    #[arg(long = "import-rdb")]
    pub import_rdb: Option<PathBuf>,
    /// Serve the memcached protocols (text and binary) on this port too (off by default;
    /// memcached's is 11211; 0 picks a free one, INFO's memcached_port
    /// tells which).
    #[arg(long = "memcached-port")]
    pub memcached_port: Option<u16>,
    /// Also serve the memcached protocols on a Unix socket at this path,
    /// as memcached's -s (off by default; the TCP port stays as
    /// --memcached-port says).
    #[arg(long = "memcached-unixsocket")]
    pub memcached_unixsocket: Option<String>,
    /// That socket file's mode, in octal as memcached's -a (default 700).
    #[arg(long = "memcached-unixsocketperm")]
    pub memcached_unixsocketperm: Option<String>,
    /// `yes`: the memcached port speaks TLS (memcached's -Z), with the
    /// certificate, key and client authentication of Redis's `tls-*`
    /// settings (default `no`).
    #[arg(long = "memcached-tls")]
    pub memcached_tls: Option<String>,
    /// Largest memcached item, key and value, in bytes (default 1 MiB, as
    /// memcached's -I).
    #[arg(long = "memcached-item-size-max")]
    pub memcached_item_size_max: Option<usize>,
    /// Bound the data (the engine's log: keys, values, headers) to this
    /// many bytes, in Redis's notation (`100mb`, `2gb`; default 0, no
    /// limit). What happens at the limit is `--maxmemory-policy`'s choice.
    /// CONFIG SET changes it.
    #[arg(long)]
    pub maxmemory: Option<String>,
    /// `noeviction` (the default: writes get Redis's OOM error), or an
    /// evicting policy (`allkeys-lru` ...: the server is a cache; see the
    /// README). CONFIG SET changes it.
    #[arg(long = "maxmemory-policy")]
    pub maxmemory_policy: Option<String>,
    /// A second tier for the data, on an SSD (`--dir` then holds the fast
    /// tier: tmpfs or persistent memory): past `--maxmemory`, the oldest
    /// data moves here instead of being evicted. Needs `--maxmemory`.
    #[arg(long = "ssd-dir")]
    pub ssd_dir: Option<PathBuf>,
    /// Bound the SSD tier to this many bytes, in Redis's notation (default
    /// 0, no bound). Past it, an evicting policy evicts the tier's oldest
    /// data and `noeviction` refuses writes.
    #[arg(long = "ssd-size")]
    pub ssd_size: Option<String>,
    /// Milliseconds a Lua script runs before SCRIPT KILL may stop it
    /// (default 5000; Redis's `busy-reply-threshold`, once
    /// `lua-time-limit`). CONFIG SET changes it.
    #[arg(long = "busy-reply-threshold")]
    pub busy_reply_threshold: Option<u64>,
    /// The most memory a thread's Lua state may hold, in Redis's notation
    /// (default 1gb); past it a script fails with "not enough memory".
    /// CONFIG SET changes it.
    #[arg(long = "script-memory-limit")]
    pub script_memory_limit: Option<String>,
    /// SLOWLOG keeps the commands that took at least this many
    /// microseconds (default 10000; negative: none). CONFIG SET changes it.
    #[arg(long = "slowlog-log-slower-than", allow_negative_numbers = true)]
    pub slowlog_log_slower_than: Option<i64>,
    /// The most commands SLOWLOG keeps (default 128). CONFIG SET changes it.
    #[arg(long = "slowlog-max-len")]
    pub slowlog_max_len: Option<usize>,
    /// The latency monitor samples commands that take at least this many
    /// milliseconds (default 0: off). CONFIG SET changes it.
    #[arg(long = "latency-monitor-threshold")]
    pub latency_monitor_threshold: Option<u64>,
    /// Write the listening port here once ready (for scripts and tests).
    #[arg(long = "port-file")]
    pub port_file: Option<PathBuf>,
    /// How much the server logs, by Redis's names: debug, verbose,
    /// notice (default), warning. `RUST_LOG`, where set, wins at start;
    /// CONFIG SET loglevel changes it.
    #[arg(long = "loglevel")]
    pub loglevel: Option<String>,
    /// Log to this file (appended to) instead of stderr, as Redis's
    /// `logfile` ("" is stderr).
    #[arg(long = "logfile")]
    pub logfile: Option<String>,
    /// Write the server's process id here once it runs, and remove it at
    /// shutdown, as Redis's `pidfile`.
    #[arg(long = "pidfile")]
    pub pidfile: Option<String>,
    /// `yes`: detach from the terminal and run in the background, as
    /// Redis's `daemonize` (logs then go to `--logfile`, else nowhere).
    #[arg(long = "daemonize")]
    pub daemonize: Option<String>,
    /// Also serve RESP on a Unix socket at this path, as Redis's
    /// `unixsocket` (with `--port 0`, only there).
    #[arg(long = "unixsocket")]
    pub unixsocket: Option<String>,
    /// The Unix socket file's mode, in octal as Redis's `unixsocketperm`
    /// (`700`; default 0: the umask's).
    #[arg(long = "unixsocketperm")]
    pub unixsocketperm: Option<String>,
    /// Redis's persistence settings, taken where they ask for what
    /// ScaledKV does (`--save ""`; `--appendonly yes --appendfsync always`
    /// in `sync` and `pmem` modes, `no` in `buffered`), so redis-server's
    /// command lines work; any other value stops the server saying why:
    /// `--durability` decides what a write survives.
    #[arg(long = "save")]
    pub save: Option<String>,
    /// Redis's `appendonly`: as `--save`.
    #[arg(long = "appendonly")]
    pub appendonly: Option<String>,
    /// Redis's `appendfsync`: as `--save`.
    #[arg(long = "appendfsync")]
    pub appendfsync: Option<String>,
    /// Redis's `protected-mode` (default `no`, unlike Redis: ScaledKV
    /// binds 127.0.0.1 unless told otherwise): `yes` serves only loopback
    /// clients while the `default` user has no password. CONFIG SET
    /// changes it.
    #[arg(long = "protected-mode")]
    pub protected_mode: Option<String>,
}

/// The TOML file: the same names as the flags.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields, rename_all = "kebab-case")]
struct FileConfig {
    bind: Option<String>,
    port: Option<u16>,
    dir: Option<PathBuf>,
    durability: Option<String>,
    requirepass: Option<String>,
    maxclients: Option<usize>,
    timeout: Option<u64>,
    proto_max_bulk_len: Option<usize>,
    metrics_port: Option<u16>,
    max_args: Option<usize>,
    client_query_buffer_limit: Option<usize>,
    threads: Option<usize>,
    point_index: Option<bool>,
    gc_space_amp: Option<f64>,
    notify_keyspace_events: Option<String>,
    client_output_buffer_limit: Option<String>,
    replicaof: Option<String>,
    masterauth: Option<String>,
    import_rdb: Option<PathBuf>,
    memcached_port: Option<u16>,
    memcached_unixsocket: Option<String>,
    memcached_unixsocketperm: Option<String>,
    memcached_tls: Option<String>,
    memcached_item_size_max: Option<usize>,
    maxmemory: Option<String>,
    maxmemory_policy: Option<String>,
    ssd_dir: Option<PathBuf>,
    ssd_size: Option<String>,
    busy_reply_threshold: Option<u64>,
    script_memory_limit: Option<String>,
    slowlog_log_slower_than: Option<i64>,
    slowlog_max_len: Option<usize>,
    latency_monitor_threshold: Option<u64>,
    loglevel: Option<String>,
    logfile: Option<String>,
    pidfile: Option<String>,
    daemonize: Option<String>,
    unixsocket: Option<String>,
    unixsocketperm: Option<String>,
    save: Option<String>,
    appendonly: Option<String>,
    appendfsync: Option<String>,
    protected_mode: Option<String>,
    // File only: settings CONFIG SET changes and CONFIG REWRITE writes,
    // applied at start as CONFIG SET applies them (`Config::settings`).
    masteruser: Option<String>,
    repl_backlog_size: Option<String>,
    tracking_table_max_keys: Option<u64>,
    latency_tracking: Option<String>,
    latency_tracking_info_percentiles: Option<String>,
    acllog_max_len: Option<u64>,
    min_replicas_to_write: Option<u64>,
    min_replicas_max_lag: Option<u64>,
    rdbcompression: Option<String>,
    dbfilename: Option<String>,
    lfu_log_factor: Option<u32>,
    lfu_decay_time: Option<u32>,
    replica_priority: Option<u32>,
    shutdown_timeout: Option<u32>,
    // TLS (`crate::tls`), by Redis's names.
    tls_port: Option<u16>,
    tls_cert_file: Option<String>,
    tls_key_file: Option<String>,
    tls_ca_cert_file: Option<String>,
    tls_ca_cert_dir: Option<String>,
    tls_auth_clients: Option<String>,
    tls_protocols: Option<String>,
    tls_prefer_server_ciphers: Option<String>,
    tls_session_caching: Option<String>,
    tls_session_cache_size: Option<u64>,
    tls_replication: Option<String>,
    tls_client_cert_file: Option<String>,
    tls_client_key_file: Option<String>,
}

impl FileConfig {
    /// The file-only settings it gives, by CONFIG SET's names, as text.
    fn settings(&self) -> Vec<(&'static str, String)> {
        let text = |value: &Option<String>| value.clone();
        let number = |value: Option<u64>| value.map(|n| n.to_string());
        [
            ("masteruser", text(&self.masteruser)),
            ("repl-backlog-size", text(&self.repl_backlog_size)),
            ("tracking-table-max-keys", number(self.tracking_table_max_keys)),
            ("latency-tracking", text(&self.latency_tracking)),
            ("latency-tracking-info-percentiles", text(&self.latency_tracking_info_percentiles)),
            ("acllog-max-len", number(self.acllog_max_len)),
            ("min-replicas-to-write", number(self.min_replicas_to_write)),
            ("min-replicas-max-lag", number(self.min_replicas_max_lag)),
            ("rdbcompression", text(&self.rdbcompression)),
            ("dbfilename", text(&self.dbfilename)),
            ("lfu-log-factor", number(self.lfu_log_factor.map(u64::from))),
            ("lfu-decay-time", number(self.lfu_decay_time.map(u64::from))),
            ("replica-priority", number(self.replica_priority.map(u64::from))),
            ("shutdown-timeout", number(self.shutdown_timeout.map(u64::from))),
            ("tls-port", number(self.tls_port.map(u64::from))),
            ("tls-cert-file", text(&self.tls_cert_file)),
            ("tls-key-file", text(&self.tls_key_file)),
            ("tls-ca-cert-file", text(&self.tls_ca_cert_file)),
            ("tls-ca-cert-dir", text(&self.tls_ca_cert_dir)),
            ("tls-auth-clients", text(&self.tls_auth_clients)),
            ("tls-protocols", text(&self.tls_protocols)),
            ("tls-prefer-server-ciphers", text(&self.tls_prefer_server_ciphers)),
            ("tls-session-caching", text(&self.tls_session_caching)),
            ("tls-session-cache-size", number(self.tls_session_cache_size)),
            ("tls-replication", text(&self.tls_replication)),
            ("tls-client-cert-file", text(&self.tls_client_cert_file)),
            ("tls-client-key-file", text(&self.tls_client_key_file)),
        ]
        .into_iter()
        .filter_map(|(name, value)| Some((name, value?)))
        .collect()
    }
}

#[derive(Debug, Clone)]
pub struct Config {
    pub bind: String,
    pub port: u16,
    pub dir: PathBuf,
    pub durability: Durability,
    pub requirepass: Option<String>,
    pub maxclients: usize,
    pub timeout_secs: u64,
    pub max_bulk_bytes: usize,
    pub max_args: usize,
    /// Bytes of one request (all its arguments).
    pub max_request_bytes: usize,
    pub metrics_port: Option<u16>,
    pub port_file: Option<PathBuf>,
    pub config_file: Option<PathBuf>,
    /// `config_file` is a redis.conf (`crate::redis_conf`), not TOML.
    pub redis_conf: bool,
    /// I/O threads; `None`: `server::default_io_threads`.
    pub threads: Option<usize>,
    /// The engine's hash table for point lookups (`Options::point_index`):
    /// GET without a B-tree descent, for about 28 more bytes per key.
    pub point_index: bool,
    /// `Options::gc_space_amp`: the log's size over the live bytes above
    /// which background GC copies live entries forward.
    pub gc_space_amp: f64,
    /// `notify-keyspace-events` at start (`crate::notify` flags).
    pub notify_keyspace_events: u32,
    /// Checked when read; applied as the server starts.
    pub client_output_buffer_limit: Option<String>,
    /// The master to follow from the start (`crate::replica`).
    pub replicaof: Option<crate::replica::Master>,
    pub masterauth: Option<String>,
    /// An RDB file to load into the empty database at start.
    pub import_rdb: Option<PathBuf>,
    /// The memcached protocol's port (None: off; `crate::memcache`).
    pub memcached_port: Option<u16>,
    /// Its Unix socket (None: none) and that file's mode, as memcached's
    /// -s and -a.
    pub memcached_unixsocket: Option<PathBuf>,
    pub memcached_unixsocketperm: u32,
    /// The memcached port speaks TLS (`crate::tls`'s context).
    pub memcached_tls: bool,
    /// The largest memcached item (key, value and memcached's per-item
    /// overhead, `memcache::request::ITEM_OVERHEAD`).
    pub memcached_item_size_max: usize,
    /// `maxmemory` and `maxmemory-policy`, as CONFIG SET leaves them; the
    /// engine's eviction filter reads the policy (`crate::maxmemory`).
    pub memory: Arc<MemoryLimit>,
    /// The SSD tier's directory (`--ssd-dir`); its size is in `memory`.
    pub ssd_dir: Option<PathBuf>,
    /// Lua scripts: `busy-reply-threshold` (ms) and `script-memory-limit`
    /// (bytes) at start (`crate::script::Control`).
    pub busy_reply_threshold_ms: u64,
    pub script_memory_limit: u64,
    /// SLOWLOG's `slowlog-log-slower-than` (µs) and `slowlog-max-len` at
    /// start (`crate::slowlog`).
    pub slowlog_log_slower_than: i64,
    pub slowlog_max_len: usize,
    /// The latency monitor's `latency-monitor-threshold` (ms) at start.
    pub latency_monitor_threshold: u64,
    /// Redis's `loglevel` at start (`crate::loglevel`).
    pub loglevel: &'static str,
    /// Redis's `logfile` (None: stderr), `pidfile` and `daemonize`
    /// (`crate::process`).
    pub logfile: Option<PathBuf>,
    pub pidfile: Option<PathBuf>,
    pub daemonize: bool,
    /// Redis's `unixsocket` (None: none) and `unixsocketperm` (0: the
    /// umask's mode).
    pub unixsocket: Option<PathBuf>,
    pub unixsocketperm: u32,
    /// Settings by CONFIG SET's names that the server applies as it
    /// starts, through CONFIG SET's own checks: the config file's that
    /// have no flag, Redis's that ScaledKV fixes (`save`, `appendonly`,
    /// `appendfsync`) and `protected-mode` from flag or file, and Redis's
    /// others from a redis.conf or `--name value` (`crate::redis_conf`).
    pub settings: Vec<(&'static str, String)>,
}

/// Redis's pid file for a daemon that names none.
pub const DEFAULT_PIDFILE: &str = "/var/run/redis.pid";

/// memcached's default largest item (`-I 1m`).
pub const DEFAULT_MEMCACHED_ITEM_SIZE_MAX: usize = 1 << 20;

impl Default for Config {
    fn default() -> Self {
        Config {
            bind: "127.0.0.1".into(),
            port: DEFAULT_PORT,
            dir: PathBuf::from(DEFAULT_DIR),
            durability: Durability::Sync,
            requirepass: None,
            maxclients: 10_000,
            timeout_secs: 0,
            max_bulk_bytes: crate::keyspace::MAX_STRING_BYTES,
            max_args: 1024 * 1024,
            // Twice the engine's largest batch: an MSET that large fails in
            // the engine with a clear error; anything bigger is refused here.
            max_request_bytes: 2 * scaledkv::MAX_BATCH_BYTES,
            metrics_port: None,
            port_file: None,
            config_file: None,
            redis_conf: false,
            threads: None,
            point_index: true,
            gc_space_amp: Options::default().gc_space_amp,
            notify_keyspace_events: 0,
            client_output_buffer_limit: None,
            replicaof: None,
            masterauth: None,
            import_rdb: None,
            memcached_port: None,
            memcached_unixsocket: None,
            memcached_unixsocketperm: 0o700,
            memcached_tls: false,
            memcached_item_size_max: DEFAULT_MEMCACHED_ITEM_SIZE_MAX,
            memory: Arc::default(),
            ssd_dir: None,
            busy_reply_threshold_ms: 5000,
            script_memory_limit: 1 << 30,
            slowlog_log_slower_than: 10_000,
            slowlog_max_len: 128,
            latency_monitor_threshold: 0,
            loglevel: crate::loglevel::DEFAULT,
            logfile: None,
            pidfile: None,
            daemonize: false,
            unixsocket: None,
            unixsocketperm: 0,
            settings: Vec::new(),
        }
    }
}

impl Config {
    pub fn from_cli(cli: Cli) -> Result<Config, String> {
        let file = match &cli.config {
            Some(path) => load_file(path)?,
            None => FileConfig::default(),
        };
        let loglevel = match cli.loglevel.as_ref().or(file.loglevel.as_ref()) {
            None => crate::loglevel::DEFAULT,
            Some(text) => crate::loglevel::parse(text)
                .ok_or_else(|| format!("loglevel {text:?}: must be one of {}", crate::loglevel::LEVELS.join(", ")))?,
        };
        let mut settings = file.settings();
        // Checked at start as CONFIG SET checks them.
        for (name, flag, in_file) in [
            ("save", &cli.save, &file.save),
            ("appendonly", &cli.appendonly, &file.appendonly),
            ("appendfsync", &cli.appendfsync, &file.appendfsync),
            ("protected-mode", &cli.protected_mode, &file.protected_mode),
        ] {
            if let Some(value) = flag.as_ref().or(in_file.as_ref()) {
                settings.push((name, value.clone()));
            }
        }
        let defaults = Config::default();
        let durability = match (cli.durability, file.durability) {
            (Some(d), _) => d,
            (None, Some(text)) => text.parse().map_err(|e| format!("durability in the config file: {e}"))?,
            (None, None) => defaults.durability,
        };
        let events = cli.notify_keyspace_events.or(file.notify_keyspace_events).unwrap_or_default();
        let notify_keyspace_events = crate::notify::parse(events.as_bytes()).ok_or_else(|| {
            format!("notify-keyspace-events {events:?}: a character names no class (use Ag$lshzxeKEtmdn)")
        })?;
        let client_output_buffer_limit = cli.client_output_buffer_limit.or(file.client_output_buffer_limit);
        if let Some(text) = &client_output_buffer_limit {
            crate::pubsub::parse_output_limits(text)
                .map_err(|e| format!("client-output-buffer-limit {text:?}: {e}"))?;
        }
        let replicaof = match cli.replicaof.or(file.replicaof) {
            Some(text) => Some(parse_master(&text).ok_or_else(|| format!("replicaof {text:?}: not \"host port\""))?),
            None => None,
        };
        let maxmemory = match cli.maxmemory.or(file.maxmemory) {
            Some(text) => parse_bytes(&text).ok_or_else(|| format!("maxmemory {text:?}: not a size like 100mb"))?,
            None => 0,
        };
        let policy = cli.maxmemory_policy.or(file.maxmemory_policy).unwrap_or_else(|| "noeviction".into());
        let ssd_dir = cli.ssd_dir.or(file.ssd_dir);
        let ssd_size = match cli.ssd_size.or(file.ssd_size) {
            Some(text) => parse_bytes(&text).ok_or_else(|| format!("ssd-size {text:?}: not a size like 10gb"))?,
            None => 0,
        };
        if ssd_dir.is_some() && maxmemory == 0 {
            return Err("ssd-dir: the SSD tier takes the data beyond maxmemory; set maxmemory too".into());
        }
        if ssd_dir.is_none() && ssd_size > 0 {
            return Err("ssd-size: no ssd-dir to bound".into());
        }
        let script_memory_limit = match cli.script_memory_limit.or(file.script_memory_limit) {
            Some(text) => {
                parse_bytes(&text).ok_or_else(|| format!("script-memory-limit {text:?}: not a size like 256mb"))?
            }
            None => defaults.script_memory_limit,
        };
        let daemonize = yes_or_no("daemonize", cli.daemonize.or(file.daemonize))?;
        // "" is unset, as in Redis.
        let path = |path: Option<String>| path.filter(|path| !path.is_empty()).map(PathBuf::from);
        let unixsocketperm = mode("unixsocketperm", cli.unixsocketperm.or(file.unixsocketperm), 0)?;
        let memcached_unixsocketperm = mode(
            "memcached-unixsocketperm",
            cli.memcached_unixsocketperm.or(file.memcached_unixsocketperm),
            defaults.memcached_unixsocketperm,
        )?;
        let memcached_tls = yes_or_no("memcached-tls", cli.memcached_tls.or(file.memcached_tls))?;
        if memcached_tls && cli.memcached_port.or(file.memcached_port).is_none() {
            return Err("memcached-tls: no memcached-port to speak TLS on".into());
        }
        let config = Config {
            memcached_tls,
            unixsocket: path(cli.unixsocket.or(file.unixsocket)),
            unixsocketperm,
            memcached_unixsocket: path(cli.memcached_unixsocket.or(file.memcached_unixsocket)),
            memcached_unixsocketperm,
            logfile: path(cli.logfile.or(file.logfile)),
            // A daemon writes one even when none is named, as Redis's.
            pidfile: path(cli.pidfile.or(file.pidfile)).or_else(|| daemonize.then(|| PathBuf::from(DEFAULT_PIDFILE))),
            daemonize,
            busy_reply_threshold_ms: cli
                .busy_reply_threshold
                .or(file.busy_reply_threshold)
                .unwrap_or(defaults.busy_reply_threshold_ms),
            script_memory_limit,
            slowlog_log_slower_than: cli
                .slowlog_log_slower_than
                .or(file.slowlog_log_slower_than)
                .unwrap_or(defaults.slowlog_log_slower_than),
            slowlog_max_len: cli.slowlog_max_len.or(file.slowlog_max_len).unwrap_or(defaults.slowlog_max_len),
            latency_monitor_threshold: cli
                .latency_monitor_threshold
                .or(file.latency_monitor_threshold)
                .unwrap_or(defaults.latency_monitor_threshold),
            loglevel,
            memory: Arc::new(MemoryLimit::new(maxmemory, &policy, ssd_dir.is_some().then_some(ssd_size))?),
            ssd_dir,
            bind: cli.bind.or(file.bind).unwrap_or(defaults.bind),
            port: cli.port.or(file.port).unwrap_or(defaults.port),
            dir: cli.dir.or(file.dir).unwrap_or(defaults.dir),
            durability,
            requirepass: cli.requirepass.or(file.requirepass).filter(|p| !p.is_empty()),
            maxclients: cli.maxclients.or(file.maxclients).unwrap_or(defaults.maxclients),
            timeout_secs: cli.timeout.or(file.timeout).unwrap_or(defaults.timeout_secs),
            max_bulk_bytes: cli.proto_max_bulk_len.or(file.proto_max_bulk_len).unwrap_or(defaults.max_bulk_bytes),
            max_args: file.max_args.unwrap_or(defaults.max_args),
            max_request_bytes: file.client_query_buffer_limit.unwrap_or(defaults.max_request_bytes),
            metrics_port: cli.metrics_port.or(file.metrics_port),
            port_file: cli.port_file,
            // Absolute, as INFO shows it and CONFIG REWRITE writes it.
            config_file: cli.config.map(|path| std::fs::canonicalize(&path).unwrap_or(path)),
            redis_conf: false,
            settings,
            threads: cli.threads.or(file.threads).filter(|&n| n > 0),
            point_index: file.point_index.unwrap_or(defaults.point_index),
            gc_space_amp: cli.gc_space_amp.or(file.gc_space_amp).unwrap_or(defaults.gc_space_amp),
            notify_keyspace_events,
            client_output_buffer_limit,
            replicaof,
            masterauth: cli.masterauth.or(file.masterauth),
            import_rdb: cli.import_rdb.or(file.import_rdb),
            memcached_port: cli.memcached_port.or(file.memcached_port),
            memcached_item_size_max: cli
                .memcached_item_size_max
                .or(file.memcached_item_size_max)
                .unwrap_or(defaults.memcached_item_size_max),
        };
        // Of the settings passed to the engine gc-space-amp can be out of
        // range, and maxmemory and ssd-size too small (checked whatever the
        // policy, which CONFIG SET may change).
        let mut options = config.engine_options();
        if let Some(tier) = &mut options.ssd_tier {
            tier.capacity_bytes = config.memory.ssd_size().unwrap_or(0);
        }
        options.validate().map_err(|e| format!("gc-space-amp, maxmemory or ssd-size: {e}"))?;
        if config.max_bulk_bytes > crate::keyspace::MAX_STRING_BYTES {
            return Err(format!(
                "proto-max-bulk-len {} is above the engine's value limit of {} bytes",
                config.max_bulk_bytes,
                crate::keyspace::MAX_STRING_BYTES
            ));
        }
        // The value and its flags and CAS must fit the engine's value.
        let item_max = crate::keyspace::MAX_STRING_BYTES - crate::keyspace::ITEM_META_BYTES;
        if !(1024..=item_max).contains(&config.memcached_item_size_max) {
            return Err(format!(
                "memcached-item-size-max {} is outside 1024..={item_max} bytes (the engine's value limit)",
                config.memcached_item_size_max
            ));
        }
        Ok(config)
    }

    /// The server's configuration from its command line as redis-server
    /// takes it (`crate::redis_conf`): a redis.conf first, Redis's
    /// parameters as `--name value`, and ScaledKV's flags. Clap's own
    /// answers (`--help`, `--version`, a malformed flag) exit here, as
    /// clap does.
    pub fn from_args(args: Vec<std::ffi::OsString>) -> Result<Config, String> {
        use clap::CommandFactory;
        let mut flags: Vec<String> =
            Cli::command().get_arguments().filter_map(|arg| arg.get_long()).map(str::to_string).collect();
        flags.extend(["help", "version"].map(String::from));
        let line = crate::redis_conf::command_line(args, &flags)?;
        let cli = Cli::try_parse_from(&line.args).unwrap_or_else(|e| {
            // The flag clap names may be a line of the file.
            if let Some(file) = &line.file {
                eprintln!("scaledkv-server: with the directives of {} as flags:", file.display());
            }
            e.exit()
        });
        if line.file.is_some() && cli.config.is_some() {
            return Err("give a redis.conf or a TOML file (--config), not both".into());
        }
        let mut config = Config::from_cli(cli)?;
        if let Some(path) = line.file {
            config.config_file = Some(std::fs::canonicalize(&path).unwrap_or(path));
            config.redis_conf = true;
        }
        config.settings.extend(line.settings);
        Ok(config)
    }

    /// The I/O threads the server runs (`--threads`, else
    /// `server::default_io_threads`).
    pub fn io_threads(&self) -> usize {
        self.threads.unwrap_or_else(crate::server::default_io_threads)
    }

    /// What the engine is opened with.
    pub fn engine_options(&self) -> Options {
        let defaults = Options::default();
        Options {
            segment_size_bytes: segment_bytes(self.memory.maxmemory(), defaults.segment_size_bytes),
            cache_capacity_bytes: self.memory.cache_capacity(),
            eviction_filter: Some(self.memory.filter()),
            eviction_listener: Some(self.memory.listener()),
            lfu: self.memory.lfu(),
            ssd_tier: self.ssd_dir.clone().map(|dir| SsdTier { dir, capacity_bytes: self.memory.ssd_tier_capacity() }),
            durability: self.durability,
            point_index: self.point_index,
            gc_space_amp: self.gc_space_amp,
            // Index updates go to the engine's merger thread (its default),
            // on the core the I/O threads leave free (`default_io_threads`):
            // one I/O thread with the merger against one applying to the
            // B-tree itself (tmpfs, 4 interleaved runs, medians): SET
            // `-P 16` 417k -> 542k/s and 2.66 -> 2.18 µs of server CPU per
            // SET, `-P 1` 82k -> 84k/s (BENCHMARKS.md, twenty-third
            // session). With two workers and no free core it had cost
            // `-P 1` 6-8% (eleventh session).
            // Segment preparation and writeback on time no request wants:
            // SET `-P 1` p99 lower, `-P 16` no slower (tmpfs, interleaved
            // runs; BENCHMARKS.md, twenty-fourth session).
            background_idle: true,
            ..defaults
        }
    }
}

/// How a setting is written in the config file.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Integer,
    Text,
}

/// A setting CONFIG REWRITE writes: its key in the file, and its value
/// now and its default as CONFIG GET gives them (None: unset).
#[derive(Debug)]
pub struct Rewritten {
    pub key: &'static str,
    pub kind: Kind,
    pub now: Option<String>,
    pub default: Option<String>,
}

/// CONFIG REWRITE, as Redis rewrites its redis.conf: each setting whose
/// value now differs from its default, or that the file already names,
/// is written with its value now (one now unset leaves the file); every
/// other line, comments and all, stays as it was. The new file replaces
/// the old whole (written beside it, synced, renamed over it, the
/// directory synced): a crash leaves one or the other. A file removed
/// since the start is written anew.
pub fn rewrite(path: &Path, settings: &[Rewritten]) -> std::io::Result<()> {
    use std::io::{Error, ErrorKind};
    let text = match std::fs::read_to_string(path) {
        Err(e) if e.kind() == ErrorKind::NotFound => String::new(),
        read => read?,
    };
    let mut doc: toml_edit::DocumentMut = text.parse().map_err(|e| Error::new(ErrorKind::InvalidData, e))?;
    for setting in settings {
        let Some(now) = &setting.now else {
            doc.remove(setting.key);
            continue;
        };
        if setting.default.as_ref() == Some(now) && !doc.contains_key(setting.key) {
            continue;
        }
        let mut value = match setting.kind {
            Kind::Integer => toml_edit::Value::from(now.parse::<i64>().map_err(|e| {
                Error::new(ErrorKind::InvalidData, format!("{} {now:?} is not an integer: {e}", setting.key))
            })?),
            Kind::Text => toml_edit::Value::from(now.as_str()),
        };
        // A comment after the old value stays after the new one.
        if let Some(old) = doc.get(setting.key).and_then(toml_edit::Item::as_value) {
            *value.decor_mut() = old.decor().clone();
        }
        let new = !doc.contains_key(setting.key);
        doc[setting.key] = toml_edit::Item::Value(value);
        // Appended after the file's last lines, comments too, as Redis
        // appends (toml_edit keeps comments after the last key apart).
        let trailing = doc.trailing().as_str().unwrap_or_default();
        if new && !trailing.is_empty() {
            let trailing = trailing.to_owned();
            doc.set_trailing("");
            if let Some(mut key) = doc.key_mut(setting.key) {
                key.leaf_decor_mut().set_prefix(trailing);
            }
        }
    }
    let text = doc.to_string();
    // Read back as the server's start reads it: a file it could not
    // start from is not written.
    toml::from_str::<FileConfig>(&text).map_err(|e| Error::new(ErrorKind::InvalidData, e.to_string()))?;
    replace_file(path, &text)
}

/// Replaces the file at `path` with `text` whole: written beside it,
/// synced, renamed over it, the directory synced.
pub fn replace_file(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    let mut temp = path.as_os_str().to_owned();
    temp.push(".rewrite");
    let temp = PathBuf::from(temp);
    let mut file = std::fs::File::create(&temp)?;
    file.write_all(text.as_bytes())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temp, path)?;
    let dir = path.parent().filter(|dir| !dir.as_os_str().is_empty()).unwrap_or(Path::new("."));
    std::fs::File::open(dir)?.sync_all()
}

fn load_file(path: &Path) -> Result<FileConfig, String> {
    let text = std::fs::read_to_string(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    toml::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))
}

/// The setting `name`'s `yes` or `no` (None: no).
fn yes_or_no(name: &str, text: Option<String>) -> Result<bool, String> {
    match text.map(|text| text.to_ascii_lowercase()).as_deref() {
        None | Some("no") => Ok(false),
        Some("yes") => Ok(true),
        Some(other) => Err(format!("{name} {other:?}: must be yes or no")),
    }
}

/// The setting `name`'s file mode, in octal as Redis's `unixsocketperm`
/// and memcached's -a read it (0 to 777; None: `default`).
fn mode(name: &str, text: Option<String>, default: u32) -> Result<u32, String> {
    let Some(text) = text else { return Ok(default) };
    let mode = u32::from_str_radix(&text, 8).ok().filter(|&mode| mode <= 0o777);
    mode.ok_or_else(|| format!("{name} {text:?}: not a mode in octal up to 777"))
}

/// `replicaof`'s "host port".
fn parse_master(text: &str) -> Option<crate::replica::Master> {
    let mut words = text.split_whitespace();
    let (host, port) = (words.next()?, words.next()?.parse().ok()?);
    words.next().is_none().then(|| crate::replica::Master { host: host.into(), port })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_octal_and_switches_yes_or_no() {
        assert_eq!(mode("m", Some("770".into()), 0), Ok(0o770));
        assert_eq!(mode("m", None, 0o700), Ok(0o700));
        for bad in ["8", "1000", "x", ""] {
            assert!(mode("m", Some(bad.into()), 0).unwrap_err().contains("not a mode"), "{bad:?}");
        }
        assert_eq!(yes_or_no("s", Some("YES".into())), Ok(true));
        assert_eq!(yes_or_no("s", None), Ok(false));
        assert!(yes_or_no("s", Some("1".into())).unwrap_err().contains("must be yes or no"));
    }

    #[test]
    fn a_daemon_without_a_pidfile_gets_redis_default_one() {
        let daemon = |pidfile: Option<&str>| {
            let cli = Cli { daemonize: Some("yes".into()), pidfile: pidfile.map(String::from), ..Cli::default() };
            Config::from_cli(cli).unwrap().pidfile
        };
        assert_eq!(daemon(None), Some(PathBuf::from("/var/run/redis.pid")));
        assert_eq!(daemon(Some("/tmp/x.pid")), Some(PathBuf::from("/tmp/x.pid")));
        assert_eq!(Config::from_cli(Cli::default()).unwrap().pidfile, None, "not a daemon: none");
    }

    #[test]
    fn replicaof_is_a_host_and_a_port() {
        let master = parse_master(" 10.0.0.1  6380 ").unwrap();
        assert_eq!((master.host.as_str(), master.port), ("10.0.0.1", 6380));
        for bad in ["", "host", "host port", "host 70000", "host 1 2"] {
            assert!(parse_master(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn flags_override_the_file_which_overrides_defaults() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scaledkv.toml");
        std::fs::write(&path, "port = 7000\ndurability = \"buffered\"\nrequirepass = \"pw\"\n").unwrap();
        let cli = Cli { config: Some(path.clone()), port: Some(7001), ..Cli::default() };
        let config = Config::from_cli(cli).unwrap();
        assert_eq!((config.port, config.durability), (7001, Durability::Buffered));
        assert_eq!(config.requirepass.as_deref(), Some("pw"));
        assert_eq!(config.bind, "127.0.0.1");
        std::fs::write(&path, "prot = 1\n").unwrap();
        let error = Config::from_cli(Cli { config: Some(path), ..Cli::default() }).unwrap_err();
        assert!(error.contains("unknown field"), "{error}");
    }

    fn setting(key: &'static str, kind: Kind, now: Option<&str>, default: Option<&str>) -> Rewritten {
        Rewritten { key, kind, now: now.map(str::to_owned), default: default.map(str::to_owned) }
    }

    #[test]
    fn rewrite_changes_what_differs_and_keeps_the_rest_of_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scaledkv.toml");
        let original = "# the cache\nport = 7000 # ours\nmaxclients = 10000\nreplicaof = \"10.0.0.1 6379\"\n";
        std::fs::write(&path, original).unwrap();
        let settings = [
            // Named in the file: written though it is the default.
            setting("maxclients", Kind::Integer, Some("10000"), Some("10000")),
            // Changed: added.
            setting("timeout", Kind::Integer, Some("30"), Some("0")),
            setting("maxmemory-policy", Kind::Text, Some("allkeys-lru"), Some("noeviction")),
            // At its default and not in the file: left out.
            setting("slowlog-max-len", Kind::Integer, Some("128"), Some("128")),
            // Unset now (REPLICAOF NO ONE): removed.
            setting("replicaof", Kind::Text, None, None),
        ];
        rewrite(&path, &settings).unwrap();
        let text = std::fs::read_to_string(&path).unwrap();
        assert_eq!(
            text,
            "# the cache\nport = 7000 # ours\nmaxclients = 10000\ntimeout = 30\nmaxmemory-policy = \"allkeys-lru\"\n"
        );
        let config = Config::from_cli(Cli { config: Some(path.clone()), ..Cli::default() }).unwrap();
        assert_eq!((config.port, config.timeout_secs, config.memory.policy()), (7000, 30, "allkeys-lru"));
        assert!(config.replicaof.is_none());
        // A value the start would refuse leaves the file as it was.
        let bad = [setting("timeout", Kind::Integer, Some("soon"), Some("0"))];
        assert!(rewrite(&path, &bad).is_err());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), text);
        // A file whose last lines are comments: new settings go after them.
        std::fs::write(&path, "port = 7000\n# the end\n").unwrap();
        rewrite(&path, &settings[1..2]).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "port = 7000\n# the end\ntimeout = 30\n");
        // Removed since the start: written anew.
        std::fs::remove_file(&path).unwrap();
        rewrite(&path, &settings).unwrap();
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "timeout = 30\nmaxmemory-policy = \"allkeys-lru\"\n");
    }

    #[test]
    fn settings_without_a_flag_come_from_the_file_by_config_set_names() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scaledkv.toml");
        std::fs::write(&path, "lfu-log-factor = 7\ndbfilename = \"x.rdb\"\nrepl-backlog-size = \"4mb\"\n").unwrap();
        let config = Config::from_cli(Cli { config: Some(path), ..Cli::default() }).unwrap();
        let expected = [("repl-backlog-size", "4mb"), ("dbfilename", "x.rdb"), ("lfu-log-factor", "7")]
            .map(|(n, v)| (n, v.into()));
        assert_eq!(config.settings, expected);
    }

    #[test]
    fn the_log_level_is_one_of_redis_names() {
        let level = |text: &str| Config::from_cli(Cli { loglevel: Some(text.into()), ..Cli::default() });
        assert_eq!(level("Verbose").unwrap().loglevel, "verbose");
        assert_eq!(Config::from_cli(Cli::default()).unwrap().loglevel, "notice");
        let error = level("loud").unwrap_err();
        assert!(error.contains("debug, verbose, notice, warning"), "{error}");
    }

    #[test]
    fn redis_persistence_settings_come_from_the_flag_or_the_file_to_be_checked_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scaledkv.toml");
        std::fs::write(&path, "save = \"\"\nappendonly = \"no\"\n").unwrap();
        let cli = Cli { config: Some(path), appendonly: Some("yes".into()), ..Cli::default() };
        let expected = [("save", ""), ("appendonly", "yes")].map(|(n, v)| (n, v.into()));
        assert_eq!(Config::from_cli(cli).unwrap().settings, expected);
    }

    #[test]
    fn slowlog_and_latency_settings_come_from_the_file_or_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scaledkv.toml");
        std::fs::write(&path, "slowlog-log-slower-than = -1\nslowlog-max-len = 16\nlatency-monitor-threshold = 5\n")
            .unwrap();
        let from_file = Config::from_cli(Cli { config: Some(path.clone()), ..Cli::default() }).unwrap();
        assert_eq!((from_file.slowlog_log_slower_than, from_file.slowlog_max_len), (-1, 16));
        assert_eq!(from_file.latency_monitor_threshold, 5);
        let cli = Cli { config: Some(path), slowlog_log_slower_than: Some(500), ..Cli::default() };
        assert_eq!(Config::from_cli(cli).unwrap().slowlog_log_slower_than, 500);
        let defaults = Config::from_cli(Cli::default()).unwrap();
        assert_eq!((defaults.slowlog_log_slower_than, defaults.slowlog_max_len), (10_000, 128));
        assert_eq!(defaults.latency_monitor_threshold, 0);
    }

    #[test]
    fn script_limits_come_from_the_file_or_the_flag() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scaledkv.toml");
        std::fs::write(&path, "busy-reply-threshold = 250\nscript-memory-limit = \"64mb\"\n").unwrap();
        let from_file = Config::from_cli(Cli { config: Some(path.clone()), ..Cli::default() }).unwrap();
        assert_eq!((from_file.busy_reply_threshold_ms, from_file.script_memory_limit), (250, 64 << 20));
        let cli = Cli { config: Some(path), busy_reply_threshold: Some(9), ..Cli::default() };
        assert_eq!(Config::from_cli(cli).unwrap().busy_reply_threshold_ms, 9);
        let defaults = Config::from_cli(Cli::default()).unwrap();
        assert_eq!((defaults.busy_reply_threshold_ms, defaults.script_memory_limit), (5000, 1 << 30));
        let cli = Cli { script_memory_limit: Some("lots".into()), ..Cli::default() };
        assert!(Config::from_cli(cli).unwrap_err().contains("script-memory-limit"));
    }

    #[test]
    fn gc_space_amp_comes_from_the_file_or_the_flag_and_is_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scaledkv.toml");
        std::fs::write(&path, "gc-space-amp = 1.5\n").unwrap();
        let from_file = Config::from_cli(Cli { config: Some(path.clone()), ..Cli::default() }).unwrap();
        assert_eq!(from_file.gc_space_amp, 1.5);
        let cli = Cli { config: Some(path), gc_space_amp: Some(3.0), ..Cli::default() };
        assert_eq!(Config::from_cli(cli).unwrap().gc_space_amp, 3.0);
        assert_eq!(Config::from_cli(Cli::default()).unwrap().gc_space_amp, 2.0);
        for bad in [0.5, f64::NAN, f64::INFINITY] {
            let error = Config::from_cli(Cli { gc_space_amp: Some(bad), ..Cli::default() }).unwrap_err();
            assert!(error.contains("gc-space-amp"), "{error}");
        }
    }

    #[test]
    fn output_limits_come_from_the_file_or_the_flag_and_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scaledkv.toml");
        std::fs::write(&path, "client-output-buffer-limit = \"pubsub 1mb 512kb 5\"\n").unwrap();
        let from_file = Config::from_cli(Cli { config: Some(path.clone()), ..Cli::default() }).unwrap();
        assert_eq!(from_file.client_output_buffer_limit.as_deref(), Some("pubsub 1mb 512kb 5"));
        let cli = Cli { config: Some(path), client_output_buffer_limit: Some("pubsub 0 0 0".into()), ..Cli::default() };
        assert_eq!(Config::from_cli(cli).unwrap().client_output_buffer_limit.as_deref(), Some("pubsub 0 0 0"));
        for bad in ["pubsub 1mb", "master 1 2 3", "pubsub 1mb 1mb -1", "normal 1mb 0 0"] {
            let cli = Cli { client_output_buffer_limit: Some(bad.into()), ..Cli::default() };
            let error = Config::from_cli(cli).unwrap_err();
            assert!(error.contains("client-output-buffer-limit"), "{bad}: {error}");
        }
    }

    #[test]
    fn keyspace_notifications_come_from_the_file_or_the_flag_and_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scaledkv.toml");
        std::fs::write(&path, "notify-keyspace-events = \"Egx\"\n").unwrap();
        let from_file = Config::from_cli(Cli { config: Some(path.clone()), ..Cli::default() }).unwrap();
        assert_eq!(crate::notify::format(from_file.notify_keyspace_events), "gxE");
        let cli = Cli { config: Some(path), notify_keyspace_events: Some("KEA".into()), ..Cli::default() };
        assert_eq!(crate::notify::format(Config::from_cli(cli).unwrap().notify_keyspace_events), "AKE");
        assert_eq!(Config::from_cli(Cli::default()).unwrap().notify_keyspace_events, 0);
        let cli = Cli { notify_keyspace_events: Some("KQ".into()), ..Cli::default() };
        assert!(Config::from_cli(cli).unwrap_err().contains("notify-keyspace-events"));
    }

    #[test]
    fn maxmemory_comes_from_the_file_or_the_flags_and_sizes_the_segments() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scaledkv.toml");
        std::fs::write(&path, "maxmemory = \"64mb\"\nmaxmemory-policy = \"allkeys-lru\"\n").unwrap();
        let config = Config::from_cli(Cli { config: Some(path.clone()), ..Cli::default() }).unwrap();
        assert_eq!((config.memory.maxmemory(), config.memory.policy()), (64 << 20, "allkeys-lru"));
        let options = config.engine_options();
        assert_eq!((options.segment_size_bytes, options.cache_capacity_bytes), (2 << 20, 64 << 20));
        // noeviction: a limit the server checks, no eviction in the engine.
        let cli = Cli { config: Some(path), maxmemory_policy: Some("noeviction".into()), ..Cli::default() };
        assert_eq!(Config::from_cli(cli).unwrap().engine_options().cache_capacity_bytes, 0);
        let defaults = Config::from_cli(Cli::default()).unwrap();
        assert_eq!((defaults.memory.maxmemory(), defaults.memory.policy()), (0, "noeviction"));
        assert_eq!(defaults.engine_options().segment_size_bytes, Options::default().segment_size_bytes);
        for (size, policy, wrong) in [
            ("lots", "allkeys-lru", "maxmemory"),
            ("1gb", "lru", "maxmemory-policy"),
            ("4mb", "allkeys-lru", "8 segments"),
        ] {
            let cli = Cli { maxmemory: Some(size.into()), maxmemory_policy: Some(policy.into()), ..Cli::default() };
            let error = Config::from_cli(cli).unwrap_err();
            assert!(error.contains(wrong), "{size} {policy}: {error}");
        }
    }

    #[test]
    fn an_ssd_tier_needs_maxmemory_and_takes_its_size_by_policy() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("scaledkv.toml");
        std::fs::write(&path, "maxmemory = \"64mb\"\nssd-dir = \"/mnt/ssd\"\nssd-size = \"1gb\"\n").unwrap();
        let config = Config::from_cli(Cli { config: Some(path.clone()), ..Cli::default() }).unwrap();
        // noeviction: the fast tier moves data, the SSD tier is the server's
        // to refuse writes past; an evicting policy bounds it in the engine.
        let options = config.engine_options();
        let tier = options.ssd_tier.expect("a tier");
        assert_eq!(
            (tier.dir.to_str(), tier.capacity_bytes, options.cache_capacity_bytes),
            (Some("/mnt/ssd"), 0, 64 << 20)
        );
        let cli = Cli { config: Some(path), maxmemory_policy: Some("allkeys-lru".into()), ..Cli::default() };
        assert_eq!(Config::from_cli(cli).unwrap().engine_options().ssd_tier.unwrap().capacity_bytes, 1 << 30);
        for (cli, wrong) in [
            (Cli { ssd_dir: Some("/mnt/ssd".into()), ..Cli::default() }, "set maxmemory too"),
            (Cli { ssd_size: Some("1gb".into()), maxmemory: Some("64mb".into()), ..Cli::default() }, "no ssd-dir"),
            (
                Cli {
                    ssd_dir: Some("/s".into()),
                    ssd_size: Some("1".into()),
                    maxmemory: Some("64mb".into()),
                    ..Cli::default()
                },
                "8 segments",
            ),
        ] {
            let error = Config::from_cli(cli).unwrap_err();
            assert!(error.contains(wrong), "{error}");
        }
    }
}
