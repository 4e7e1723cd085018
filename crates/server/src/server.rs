//! The shared server state, the listeners and shutdown.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock};
use scaledkv::Db;
use tokio::net::{TcpListener, UnixListener};
use tokio::sync::watch;

use crate::commands::Cursors;
use crate::committer::{self, CommitSignal};
use crate::config::Config;
use crate::conn::{self, ClientInfo};
use crate::io_threads::{IoThreads, Wire};
use crate::keyspace::KeyLocks;
use crate::socket::{Peer, Stream};

#[derive(Default)]
pub struct ServerStats {
    pub commands: AtomicU64,
    pub connections_received: AtomicU64,
    pub rejected_connections: AtomicU64,
    pub keyspace_hits: AtomicU64,
    pub keyspace_misses: AtomicU64,
    pub expired_keys: AtomicU64,
    pub net_input_bytes: AtomicU64,
    pub net_output_bytes: AtomicU64,
    /// Commits that let their locks go before they were durable, because
    /// another command waited (`crate::pending`).
    pub early_lock_releases: AtomicU64,
    /// Commits that wrote new tables ahead of the rest, being past the
    /// engine's batch limit (`commands::write_new_tables_ahead`).
    pub tables_written_ahead: AtomicU64,
    /// Scripts run again holding every key's lock: they touched a key they
    /// did not declare whose lock was taken (`commands::scripting`).
    pub script_reruns: AtomicU64,
}

pub struct Shared {
    pub db: Db,
    pub config: Config,
    pub locks: KeyLocks,
    pub stats: ServerStats,
    pub clients: Mutex<BTreeMap<u64, Arc<ClientInfo>>>,
    pub next_client_id: AtomicU64,
    /// Open client connections (accepted, not yet closed).
    pub connected: AtomicUsize,
    pub cursors: Mutex<Cursors>,
    pub started: Instant,
    /// This process's random identity (INFO's `run_id`): Sentinel tells a
    /// restart from a pause by it.
    pub run_id: String,
    pub port: AtomicU64,
    /// Redis's `protected-mode` (off unless set): while the `default` user
    /// has no password, only loopback clients are served (`denied`).
    pub protected_mode: AtomicBool,
    /// Settings CONFIG SET may change.
    password: RwLock<Option<String>>,
    maxclients: AtomicUsize,
    timeout_secs: AtomicU64,
    max_bulk_bytes: AtomicUsize,
    /// Unix time of the last completed SAVE/checkpoint.
    pub last_save: AtomicU64,
    /// `true` once shutdown starts: connections finish and close.
    pub shutdown: watch::Sender<bool>,
    /// Set where each group commit waits for the device: writers queue
    /// their writes and this thread's leader commits them
    /// (`committer.rs`).
    pub commit_thread: Option<CommitSignal>,
    /// The index's bytes per key and when they were read, for MEMORY
    /// USAGE: reading them (`Db::stats`) settles the index, too much to do
    /// for every key of `redis-cli --memkeys`.
    pub index_bytes_per_key: Mutex<Option<(Instant, f64)>>,
    /// Entries under `keyspace::RESERVED` (the server's own), which DBSIZE
    /// leaves out: counted at open, kept up to date by the commands that
    /// add or remove them.
    pub reserved_entries: AtomicU64,
    /// The id the next big collection gets (`commands::table`).
    pub next_table_id: AtomicU64,
    /// The rank blocks' fences of big sorted sets, by table id, as
    /// committed (`commands::zsets`): a write finds its member's block
    /// here instead of with an engine iterator (a third of a ZADD's cost).
    pub rank_fences: parking_lot::Mutex<std::collections::HashMap<u64, std::sync::Arc<Vec<Vec<u8>>>>>,
    /// The same tables' blocks summed for readers, and the counts of
    /// writes in flight that keep them honest (`commands::ranks`).
    pub rank_sums: crate::commands::ranks::RankCache,
    /// Big tables' fences for random picks (`commands::picks`).
    pub pick_fences: crate::commands::picks::PickFences,
    /// Writes queued but not yet durable that the next holder of their
    /// keys' locks reads (`crate::pending`).
    pub pending: Arc<crate::pending::Pending>,
    /// Blocked clients in line per key (`crate::waiters`).
    pub waiters: crate::waiters::Waiters,
    /// The TLS contexts: clients' (`tls-port`, `--memcached-tls`) and the
    /// link to a master's (`tls-replication`).
    pub tls: crate::tls::Tls,
    /// Who listens to which channel (`crate::pubsub`).
    pub pubsub: crate::pubsub::PubSub,
    /// Client-side caching: who may have cached which keys.
    pub tracking: crate::tracking::Tracking,
    /// `notify-keyspace-events` (`crate::notify`): 0, none, by default.
    pub notify_flags: std::sync::atomic::AtomicU32,
    /// Clients in MONITOR (`crate::monitor`).
    pub monitors: crate::monitor::Monitors,
    /// The memcached protocol's CAS clock, counters and port.
    pub memcached: crate::memcache::State,
    /// Cached Lua scripts, and what SCRIPT KILL stops (`crate::script`).
    pub scripts: crate::script::Scripts,
    /// The function libraries FCALL calls (`crate::script::functions`).
    pub functions: crate::script::functions::Functions,
    /// The slow commands (`crate::slowlog`).
    pub slowlog: crate::slowlog::SlowLog,
    /// The latency monitor's events (`crate::latency`).
    pub latency: crate::latency::LatencyMonitor,
    /// Failed authentications (`commands::acl`).
    pub acl_log: crate::commands::acl::AclLog,
    /// Users ACL SETUSER made.
    pub users: crate::commands::acl::Users,
    /// The keys with an expiry time, for active expiry.
    pub volatile: crate::expiry::Volatile,
    /// CLIENT PAUSE (`crate::pause`).
    pub pause: crate::pause::Pause,
    /// REPLICAOF's master and the link to it (`crate::replica`).
    pub replication: crate::replica::Replication,
    /// FAILOVER's state (`crate::failover`).
    pub failover: crate::failover::Failover,
    /// A shutdown waiting for the replicas (`crate::shutdown`).
    pub graceful: crate::shutdown::Graceful,
    /// SAVE and BGSAVE's RDB files (`crate::rdb_save`).
    pub saves: crate::rdb_save::Saves,
    /// Redis's parameters ScaledKV does not implement, as CONFIG SET, the
    /// command line or redis.conf left them (`crate::redis_configs`).
    pub redis_params: crate::redis_configs::Store,
    /// Replicas of this server and the stream of writes they follow
    /// (`crate::master`).
    pub master: Arc<crate::master::Master>,
    /// MIGRATE's connections to other servers (`crate::migrate`).
    pub migrate: crate::migrate::Sockets,
    /// INFO's `instantaneous_*` rates (`crate::rates`).
    pub rates: crate::rates::Rates,
}

impl Shared {
    /// The index's bytes per key, read at most once a second.
    pub fn index_bytes_per_key(&self) -> f64 {
        let mut cached = self.index_bytes_per_key.lock();
        match *cached {
            Some((at, bytes)) if at.elapsed() < std::time::Duration::from_secs(1) => bytes,
            _ => {
                let bytes = self.db.stats().index_bytes_per_key;
                *cached = Some((Instant::now(), bytes));
                bytes
            }
        }
    }

    /// The clients' keys: the engine's entries less the server's own.
    pub fn user_keys(&self) -> u64 {
        (self.db.len() as u64).saturating_sub(self.reserved_entries.load(Ordering::Relaxed))
    }

    pub fn password(&self) -> Option<String> {
        self.password.read().clone()
    }

    /// `requirepass`, which is also the `default` user's password from
    /// now on.
    pub fn set_password(&self, password: Option<String>) {
        self.users.set_default_password(password.as_deref());
        *self.password.write() = password;
    }

    pub fn maxclients(&self) -> usize {
        self.maxclients.load(Ordering::Relaxed)
    }

    pub fn set_maxclients(&self, n: usize) {
        self.maxclients.store(n, Ordering::Relaxed);
    }

    pub fn idle_timeout(&self) -> Option<Duration> {
        conn::idle(self.timeout_secs.load(Ordering::Relaxed))
    }

    pub fn timeout_secs(&self) -> u64 {
        self.timeout_secs.load(Ordering::Relaxed)
    }

    pub fn set_timeout_secs(&self, secs: u64) {
        self.timeout_secs.store(secs, Ordering::Relaxed);
    }

    pub fn max_bulk_bytes(&self) -> usize {
        self.max_bulk_bytes.load(Ordering::Relaxed)
    }

    pub fn set_max_bulk_bytes(&self, n: usize) {
        self.max_bulk_bytes.store(n, Ordering::Relaxed);
    }

    pub fn request_shutdown(&self) {
        self.shutdown.send_replace(true);
    }
}

/// Opens (and recovers) the database the configuration names.
pub fn open(config: &Config) -> Result<Db, String> {
    let started = Instant::now();
    let db = Db::open(&config.dir, config.engine_options()).map_err(|e| match e {
        scaledkv::Error::Corruption { .. } => format!(
            "cannot open {}: {e}\n`scaledkv repair {}` (the admin tool, crates/cli) skips the damaged records, \
             reporting each, and keeps the rest; `scaledkv check` lists them first",
            config.dir.display(),
            config.dir.display()
        ),
        _ => format!("cannot open {}: {e}", config.dir.display()),
    })?;
    let report = db.recovery_report();
    tracing::info!(
        dir = %config.dir.display(),
        durability = %config.durability,
        keys = db.len(),
        replayed_frames = report.replayed_frames,
        truncated = ?report.truncated,
        restored = ?report.restored,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "database open"
    );
    Ok(db)
}

/// I/O threads (`io_threads.rs`) when `--threads` is not given: half the
/// cores, at least one. Most of a request's server time is the kernel's
/// (socket calls, the network stack's softirq work: 7-8 of 9-11 µs per
/// request at `-P 1` here), and the engine's own threads (commit, GC,
/// checkpoints) need CPU too; an I/O thread per core left none for them.
/// On 2 cores shared with redis-benchmark, one I/O thread against two
/// (tmpfs, 4 interleaved runs, medians): `-P 1` SET 88.1k vs 83.2k/s, GET
/// 90.2k vs 84.8k/s, with 9.7 vs 10.8 µs of server CPU per SET; `-P 16`
/// SET 405k vs 485k/s (Redis 379k), before the merger thread took the
/// B-tree inserts (then 542k, `config.rs`). On the disk the commit thread
/// (`committer.rs`) runs beside the one I/O thread (one worker beside it
/// against two leading their own groups: SET 51.6k vs 48.9k at `-P 1`,
/// 364k vs 319k at `-P 16`).
pub fn default_io_threads() -> usize {
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    (cores / 2).max(1)
}

/// Runs `tick` now and every `period` after, until shutdown: the server's
/// periodic chores, as Redis's cron runs them.
async fn every(shared: Arc<Shared>, period: Duration, tick: impl Fn(&Shared)) {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        tick(&shared);
        tokio::select! {
            _ = tokio::time::sleep(period) => {}
            _ = shutdown.changed() => return,
        }
    }
}

/// Serves `db` until SIGTERM, SIGINT or SHUTDOWN. On the way out every
/// acknowledged write is already durable; the engine then writes an index
/// checkpoint so the next start is fast.
pub async fn run(config: Config, db: Db) -> Result<(), String> {
    let backlog = listen_backlog(&config)?;
    let unix = match &config.unixsocket {
        Some(path) => Some(listen_unix(path, config.unixsocketperm, backlog, "unixsocket")?),
        None => None,
    };
    let tls_port = tls_port(&config)?;
    let tls = match tls_port {
        0 => None,
        port => Some(
            listen(&config.bind, port, backlog)
                .await
                .map_err(|e| format!("cannot listen for TLS on {}:{port}: {e}", config.bind))?,
        ),
    };
    // As Redis's `port 0` beside a `unixsocket` or a `tls-port`: no plain
    // TCP port (without either, ScaledKV's 0 picks a free port).
    let listener = match (config.port, unix.is_some() || tls.is_some()) {
        (0, true) => None,
        _ => Some(
            listen(&config.bind, config.port, backlog)
                .await
                .map_err(|e| format!("cannot listen on {}:{}: {e}", config.bind, config.port))?,
        ),
    };
    let port = match &listener {
        Some(listener) => listener.local_addr().map_err(|e| e.to_string())?.port(),
        None => 0,
    };
    let (shutdown, _) = watch::channel(false);
    let commit_thread = db.persist_waits_for_device().then(CommitSignal::default);
    // Before the server's own writes move the engine's sequence number.
    let master = config.replicaof.is_none() && config.import_rdb.is_none();
    let history = crate::master::History::take(&config.dir, db.stats().last_seq, master);
    let mut reserved_entries = crate::keyspace::prepare(&db)?;
    // The CAS clock's epoch key exists once the memcached protocol was on.
    let memcached_on = config.memcached_port.is_some() || config.memcached_unixsocket.is_some();
    let cas = match memcached_on {
        true => {
            let (cas, created) = crate::memcache::cas::CasClock::open(&db)
                .map_err(|e| format!("cannot start the memcached CAS clock: {e}"))?;
            reserved_entries += created as u64;
            Some(cas)
        }
        false => None,
    };
    let memcached_unix = match &config.memcached_unixsocket {
        Some(path) => Some(listen_unix(path, config.memcached_unixsocketperm, backlog, "memcached-unixsocket")?),
        None => None,
    };
    let memcached = match config.memcached_port {
        Some(port) => Some(
            listen(&config.bind, port, backlog)
                .await
                .map_err(|e| format!("cannot listen for memcached on {}:{port}: {e}", config.bind))?,
        ),
        None => None,
    };
    if let Some(text) = &config.client_output_buffer_limit {
        crate::pubsub::parse_output_limits(text)?.apply();
    }
    let next_table_id = crate::commands::table::next_id(&db)?;
    let scripts = crate::script::Scripts::new(config.busy_reply_threshold_ms, config.script_memory_limit);
    let libraries = crate::commands::functions::load_stored(&db, &scripts)?;
    let users = crate::commands::acl::load_stored(&db).map_err(|e| format!("cannot load the saved ACL users: {e}"))?;
    let shared = Arc::new(Shared {
        reserved_entries: AtomicU64::new(reserved_entries),
        next_table_id: AtomicU64::new(next_table_id),
        rank_fences: Default::default(),
        rank_sums: Default::default(),
        pick_fences: Default::default(),
        pending: Default::default(),
        waiters: crate::waiters::Waiters::default(),
        tls: Default::default(),
        pubsub: Default::default(),
        tracking: Default::default(),
        notify_flags: std::sync::atomic::AtomicU32::new(config.notify_keyspace_events),
        monitors: Default::default(),
        memcached: crate::memcache::State::new(cas),
        scripts,
        functions: crate::script::functions::Functions::new(libraries),
        slowlog: crate::slowlog::SlowLog::new(config.slowlog_log_slower_than, config.slowlog_max_len),
        latency: crate::latency::LatencyMonitor::new(config.latency_monitor_threshold),
        acl_log: Default::default(),
        users: crate::commands::acl::Users::new(users, config.requirepass.as_deref()),
        volatile: crate::expiry::Volatile::default(),
        pause: Default::default(),
        replication: Default::default(),
        failover: Default::default(),
        graceful: Default::default(),
        saves: Default::default(),
        protected_mode: AtomicBool::new(false),
        redis_params: Default::default(),
        master: Default::default(),
        migrate: Default::default(),
        rates: Default::default(),
        db,
        locks: KeyLocks::default(),
        stats: ServerStats::default(),
        clients: Mutex::new(BTreeMap::new()),
        next_client_id: AtomicU64::new(1),
        connected: AtomicUsize::new(0),
        cursors: Mutex::new(Cursors::default()),
        started: Instant::now(),
        run_id: crate::rdb_sync::random_hex(),
        port: AtomicU64::new(port as u64),
        password: RwLock::new(config.requirepass.clone()),
        maxclients: AtomicUsize::new(config.maxclients),
        timeout_secs: AtomicU64::new(config.timeout_secs),
        max_bulk_bytes: AtomicUsize::new(config.max_bulk_bytes),
        last_save: AtomicU64::new(scaledkv::now_ms() / 1000),
        shutdown,
        commit_thread,
        index_bytes_per_key: Mutex::new(None),
        config,
    });
    if let Some(metrics_port) = shared.config.metrics_port {
        let metrics = TcpListener::bind((shared.config.bind.as_str(), metrics_port))
            .await
            .map_err(|e| format!("cannot listen for metrics on port {metrics_port}: {e}"))?;
        tokio::spawn(crate::metrics::serve(shared.clone(), metrics));
    }
    // Before anything (expiry first) changes a key.
    if let Some(history) = history {
        shared.master.resume(&shared, history)?;
    }
    tokio::spawn(crate::expiry::active_expiry(shared.clone()));
    tokio::spawn(crate::maxmemory::announce_evictions(shared.clone()));
    tokio::spawn(crate::commands::table::sweeper(shared.clone()));
    if let Some(listener) = &memcached {
        let port = listener.local_addr().map_err(|e| e.to_string())?.port();
        shared.memcached.port.store(port, Ordering::Relaxed);
        tracing::info!(bind = %shared.config.bind, port, "memcached protocol ready");
    }
    if let Some((_, path)) = &memcached_unix {
        tracing::info!(path, "memcached protocol ready on a unix socket");
    }
    if memcached_on {
        tokio::spawn(crate::memcache::delayed_flushes(shared.clone()));
    }
    // The peak memory kept current between reports.
    tokio::spawn(every(shared.clone(), crate::memory::SAMPLE_EVERY, |_| {
        crate::memory::used();
    }));
    tokio::spawn(every(shared.clone(), crate::migrate::CLOSE_IDLE_EVERY, |shared| shared.migrate.close_idle()));
    tokio::spawn(every(shared.clone(), crate::rates::PERIOD, crate::rates::sample));
    *shared.replication.masterauth.lock() = shared.config.masterauth.clone();
    for (name, value) in &shared.config.settings {
        crate::commands::config_set_at_start(&shared, name, value.as_bytes())
            .map_err(|e| format!("{name} {value:?} (flag or config file): {}", e.text()))?;
    }
    // The contexts asked for (none without TLS), once all settings are in.
    let serving_tls = tls.is_some() || shared.config.memcached_tls;
    shared.tls.configure(&shared.redis_params, serving_tls).map_err(|e| format!("Failed to configure TLS: {e}"))?;
    shared.replication.load_position(&shared.db).map_err(|e| format!("cannot read the replication position: {e}"))?;
    match shared.config.replicaof.clone() {
        Some(master) => drop(shared.replication.follow(master)),
        // A master from the start takes writes of its own: the stored
        // position would no longer describe the data set.
        None => shared.replication.stop(&shared).map_err(|e| format!("cannot forget the replication position: {e}"))?,
    }
    tokio::spawn(crate::replica::follow_masters(shared.clone()));
    tokio::spawn(crate::failover::supervise(shared.clone()));
    tokio::spawn(crate::shutdown::supervise(shared.clone()));
    shared.saves.saved_seq.store(shared.db.stats().last_seq, Ordering::Relaxed);
    tokio::spawn(crate::rdb_save::background_saves(shared.clone()));
    let unixsocket = unix.as_ref().map_or("", |(_, path)| path);
    tracing::info!(bind = %shared.config.bind, port, tls_port, unixsocket, "ready to accept connections");
    if let Some(path) = &shared.config.port_file {
        std::fs::write(path, port.to_string()).map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    let committer = match shared.commit_thread {
        Some(_) => Some(committer::spawn(shared.clone()).map_err(|e| format!("cannot start the commit thread: {e}"))?),
        None => None,
    };
    // Before the first client is accepted (those that connect meanwhile
    // wait in the listen queue); with the commit thread up, as its
    // commits need it.
    if let Some(path) = shared.config.import_rdb.clone() {
        if shared.config.replicaof.is_some() {
            return Err("--import-rdb and --replicaof: a replica loads its master's data set".into());
        }
        crate::rdb_import::import(&shared, &path).await?;
    }
    let io = IoThreads::start(shared.config.io_threads()).map_err(|e| format!("cannot start the I/O threads: {e}"))?;
    let listeners = Listeners { resp: listener, unix, tls, memcached, memcached_unix };
    accept_until_shutdown(&shared, &listeners, &io).await;
    for (_, path) in [listeners.unix, listeners.memcached_unix].into_iter().flatten() {
        tracing::info!(path, "removing the unix socket file");
        let _ = std::fs::remove_file(path);
    }
    // Let connections finish the command they are running.
    let deadline = Instant::now() + Duration::from_secs(5);
    while shared.connected.load(Ordering::Acquire) > 0 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    io.stop();
    shared.master.shut_down(&shared);
    if let (Some(signal), Some(thread)) = (&shared.commit_thread, committer) {
        committer::stop(signal, thread);
    }
    tracing::info!("shutting down: writing the index checkpoint");
    shared.db.flush().map_err(|e| format!("final flush failed: {e}"))?;
    shared.master.keep_history(&shared.config.dir, shared.db.stats().last_seq);
    tracing::info!("bye");
    Ok(())
}

/// The sockets clients connect to.
struct Listeners {
    /// RESP over TCP: none with a Unix socket and port 0.
    resp: Option<TcpListener>,
    /// RESP over a Unix socket (`unixsocket`), and its path.
    unix: Option<(UnixListener, &'static str)>,
    /// RESP over TLS (`tls-port`; `crate::tls`).
    tls: Option<TcpListener>,
    memcached: Option<TcpListener>,
    /// memcached's protocols on a Unix socket (`--memcached-unixsocket`).
    memcached_unix: Option<(UnixListener, &'static str)>,
}

/// A connection accepted on `listener` (never, without one), with its
/// peer and local addresses.
async fn accept_tcp(listener: &Option<TcpListener>) -> std::io::Result<(Stream, (Peer, Peer))> {
    let Some(listener) = listener else { return std::future::pending().await };
    let (stream, addr) = listener.accept().await?;
    let local = stream.local_addr().unwrap_or(addr);
    Ok((Stream::Tcp(stream), (Peer::Tcp(addr), Peer::Tcp(local))))
}

async fn accept_unix(listener: &Option<(UnixListener, &'static str)>) -> std::io::Result<(Stream, (Peer, Peer))> {
    let Some((listener, path)) = listener else { return std::future::pending().await };
    let (stream, _) = listener.accept().await?;
    Ok((Stream::Unix(stream), (Peer::Unix(path), Peer::Unix(path))))
}

async fn accept_until_shutdown(shared: &Arc<Shared>, listeners: &Listeners, io: &IoThreads) {
    let mut shutdown = shared.shutdown.subscribe();
    let mut terminate = signal(tokio::signal::unix::SignalKind::terminate());
    let mut interrupt = signal(tokio::signal::unix::SignalKind::interrupt());
    let memcached_wire = if shared.config.memcached_tls { Wire::MemcachedTls } else { Wire::Memcached };
    loop {
        let (accepted, wire) = tokio::select! {
            accepted = accept_tcp(&listeners.resp) => (accepted, Wire::Resp),
            accepted = accept_unix(&listeners.unix) => (accepted, Wire::Resp),
            accepted = accept_tcp(&listeners.tls) => (accepted, Wire::RespTls),
            accepted = accept_tcp(&listeners.memcached) => (accepted, memcached_wire),
            accepted = accept_unix(&listeners.memcached_unix) => (accepted, Wire::Memcached),
            // Once the replicas caught up (`crate::shutdown`).
            _ = terminate.recv() => { on_signal(shared, "SIGTERM", "shutdown-on-sigterm"); continue; }
            _ = interrupt.recv() => { on_signal(shared, "SIGINT", "shutdown-on-sigint"); continue; }
            _ = shutdown.changed() => { tracing::info!("SHUTDOWN received"); break; }
        };
        match accepted {
            Ok((stream, peers)) => {
                shared.stats.connections_received.fetch_add(1, Ordering::Relaxed);
                if matches!(wire, Wire::Resp | Wire::RespTls) && denied(shared, peers.0) {
                    shared.stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
                    // Plain text would be garbage inside TLS: closed.
                    if wire == Wire::Resp {
                        tokio::spawn(conn::refuse_protected(stream));
                    }
                    continue;
                }
                // Counted here, not in the task, so a burst of connects
                // cannot overshoot the limit.
                if shared.connected.fetch_add(1, Ordering::AcqRel) >= shared.maxclients() {
                    shared.connected.fetch_sub(1, Ordering::AcqRel);
                    shared.stats.rejected_connections.fetch_add(1, Ordering::Relaxed);
                    tokio::spawn(conn::refuse(stream, wire));
                    continue;
                }
                io.serve(shared.clone(), stream, peers, wire);
            }
            Err(error) => {
                // Out of file descriptors and the like: back off, keep serving.
                tracing::warn!(%error, "accept failed");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
    shared.request_shutdown();
}

/// One of Redis's parameters read before the settings are applied, as
/// the command line or a redis.conf set it (else its default), checked.
fn setting_at_start(config: &Config, name: &str) -> Result<String, String> {
    let param = crate::redis_configs::find(name).expect("one of Redis's parameters");
    let chosen = config.settings.iter().rev().find(|(setting, _)| *setting == name);
    let text = chosen.map_or(param.default.as_str(), |(_, value)| value.as_str());
    param.check(text).map_err(|why| format!("{name} {text:?}: {why}"))
}

/// Redis's `tls-port` (0: none); CONFIG SET cannot move it.
fn tls_port(config: &Config) -> Result<u16, String> {
    Ok(setting_at_start(config, "tls-port")?.parse().expect("a port the table bounds"))
}

/// Redis's `tcp-backlog` (511): the queue of connections the kernel
/// holds until accepted.
fn listen_backlog(config: &Config) -> Result<u32, String> {
    Ok(setting_at_start(config, "tcp-backlog")?.parse().expect("an int the table bounds"))
}

/// A listener on `host`'s first address that takes one, with `backlog`.
async fn listen(host: &str, port: u16, backlog: u32) -> std::io::Result<TcpListener> {
    let mut refused = None;
    for addr in tokio::net::lookup_host((host, port)).await? {
        let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
        // As TcpListener::bind: a restart binds while the last one's
        // connections linger in TIME_WAIT.
        socket.set_reuseaddr(true)?;
        match socket.bind(addr) {
            Ok(()) => return socket.listen(backlog),
            Err(error) => refused = Some(error),
        }
    }
    Err(refused.unwrap_or_else(|| std::io::Error::new(std::io::ErrorKind::NotFound, "the address resolves to nothing")))
}

/// A listener on the Unix socket at `path`, its file's mode `perm` (0:
/// the umask's). A socket file left by a server that stopped without
/// removing it is replaced, as Redis replaces it; one a server still
/// listens on, or a file that is not a socket, stops the start.
fn listen_unix(
    path: &std::path::Path,
    perm: u32,
    backlog: u32,
    setting: &str,
) -> Result<(UnixListener, &'static str), String> {
    use std::os::unix::fs::{FileTypeExt, PermissionsExt};
    let shown = path.display();
    if let Ok(meta) = std::fs::symlink_metadata(path) {
        if !meta.file_type().is_socket() {
            return Err(format!("{setting} {shown}: the file exists and is not a socket"));
        }
        if std::os::unix::net::UnixStream::connect(path).is_ok() {
            return Err(format!("{setting} {shown}: another server listens on it"));
        }
        std::fs::remove_file(path).map_err(|e| format!("{setting} {shown}: cannot remove the old socket: {e}"))?;
    }
    let listener = tokio::net::UnixSocket::new_stream()
        .and_then(|socket| {
            socket.bind(path)?;
            socket.listen(backlog)
        })
        .map_err(|e| format!("cannot listen on the unix socket {shown}: {e}"))?;
    if perm != 0 {
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(perm))
            .map_err(|e| format!("{setting}perm {perm:o} on {shown}: {e}"))?;
    }
    // Once per server: CLIENT LIST shows it for every client of the socket.
    Ok((listener, Box::leak(shown.to_string().into_boxed_str())))
}

/// Protected mode refuses a client: it is on, the `default` user has no
/// password, and the client is not on this host's loopback interface.
fn denied(shared: &Shared, peer: Peer) -> bool {
    // Clients on this host's Unix socket are served, as in Redis.
    let Peer::Tcp(addr) = peer else { return false };
    // The users' lock only while protected mode is on.
    shared.protected_mode.load(Ordering::Relaxed) && keeps_out(true, shared.users.default_nopass(), addr.ip())
}

fn keeps_out(protected: bool, nopass: bool, client: std::net::IpAddr) -> bool {
    protected && nopass && !client.to_canonical().is_loopback()
}

/// SIGTERM or SIGINT: shut down once the replicas caught up
/// (`crate::shutdown`), or at once where Redis's `shutdown-on-sigterm`
/// (`-sigint`) says `now`. ScaledKV's data needs no save at shutdown, so
/// `save` and `nosave` change nothing, nor does `force` (no save to fail).
fn on_signal(shared: &Shared, signal: &str, setting: &str) {
    let choices = shared.redis_params.value(setting);
    tracing::info!(signal, setting = %choices, "shutdown asked for");
    match choices.split_whitespace().any(|choice| choice == "now") {
        true => shared.request_shutdown(),
        false => shared.graceful.request(shared),
    }
}

fn signal(kind: tokio::signal::unix::SignalKind) -> tokio::signal::unix::Signal {
    tokio::signal::unix::signal(kind).expect("install a signal handler")
}

#[cfg(test)]
mod tests {
    use super::keeps_out;

    #[test]
    fn protected_mode_keeps_out_other_hosts_while_the_default_user_has_no_password() {
        let ip = |text: &str| text.parse().unwrap();
        for loopback in ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1"] {
            assert!(!keeps_out(true, true, ip(loopback)), "{loopback}");
        }
        for other in ["10.0.0.5", "192.168.1.2", "::ffff:10.0.0.5", "2001:db8::1"] {
            assert!(keeps_out(true, true, ip(other)), "{other}");
            assert!(!keeps_out(true, false, ip(other)), "{other} with a password");
            assert!(!keeps_out(false, true, ip(other)), "{other} with protected mode off");
        }
    }
}
