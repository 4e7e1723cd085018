//! A master's shutdown waits for its replicas, as Redis 7's does
//! (`shutdown-timeout`): SHUTDOWN (without NOW), SIGTERM or SIGINT on a
//! master whose replicas have not acknowledged the stream's end hold
//! clients' writes (reads go on), ask the replicas to acknowledge, and
//! shut down once every online replica has, or `shutdown-timeout` seconds
//! (10 unless set; 0: no wait) have passed. So a planned restart, or a
//! failover to a replica after it, loses no write the master took, and
//! the restarted master's history (`master::History`) ends where its
//! replicas are: the one promoted meanwhile lets it go on partially.
//! SHUTDOWN's client waits with it, as in Redis: the connection closes
//! with the server, or gets Redis's error when SHUTDOWN ABORT gives the
//! wait up; a second signal, or SHUTDOWN NOW, shuts down at once.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::server::Shared;

/// Redis's `shutdown-timeout`.
pub const DEFAULT_TIMEOUT_SECS: u64 = 10;

pub struct Graceful {
    /// `shutdown-timeout`, in seconds.
    pub timeout_secs: AtomicU64,
    waiting: AtomicBool,
    /// Waits given up so far: a SHUTDOWN that waits with its client
    /// answers an error once this moved.
    aborts: AtomicU64,
    requested: tokio::sync::Notify,
    aborted: tokio::sync::Notify,
}

impl Default for Graceful {
    fn default() -> Self {
        Graceful {
            timeout_secs: AtomicU64::new(DEFAULT_TIMEOUT_SECS),
            waiting: AtomicBool::new(false),
            aborts: AtomicU64::new(0),
            requested: tokio::sync::Notify::new(),
            aborted: tokio::sync::Notify::new(),
        }
    }
}

impl Graceful {
    /// SHUTDOWN (without NOW), SIGTERM, SIGINT: shut down once the
    /// replicas caught up (`supervise`); asked again while it waits, at
    /// once.
    pub fn request(&self, shared: &Shared) {
        if self.waiting() {
            tracing::warn!("asked again: shutting down without waiting for the replicas");
            return shared.request_shutdown();
        }
        self.requested.notify_one();
    }

    /// How many waits were given up (SHUTDOWN ABORT) so far.
    pub fn aborts(&self) -> u64 {
        self.aborts.load(Ordering::Acquire)
    }

    /// Whether a shutdown waits for replicas.
    pub fn waiting(&self) -> bool {
        self.waiting.load(Ordering::Acquire)
    }

    /// SHUTDOWN ABORT: false if no shutdown waits.
    pub fn abort(&self) -> bool {
        if !self.waiting() {
            return false;
        }
        self.aborted.notify_one();
        true
    }
}

/// Runs each requested shutdown's wait, for the server's life.
pub async fn supervise(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        tokio::select! {
            _ = shared.graceful.requested.notified() => after_replicas(&shared).await,
            _ = shutdown.changed() => return,
        }
    }
}

/// Shuts the server down once its replicas have the stream's end (or the
/// timeout passed); at once if it has none behind or follows a master.
async fn after_replicas(shared: &Shared) {
    let graceful = &shared.graceful;
    let timeout = Duration::from_secs(graceful.timeout_secs.load(Ordering::Relaxed));
    if shared.replication.following() || timeout.is_zero() || caught_up(shared) {
        return shared.request_shutdown();
    }
    graceful.waiting.store(true, Ordering::Release);
    tracing::info!(seconds = timeout.as_secs(), "waiting for the replicas to catch up before shutting down");
    shared.pause.hold_writes(true);
    let deadline = Instant::now() + timeout;
    let mut asked = None::<Instant>;
    let aborted = graceful.aborted.notified();
    tokio::pin!(aborted);
    loop {
        if caught_up(shared) {
            tracing::info!("the replicas have every write: shutting down");
            break;
        }
        if Instant::now() >= deadline {
            tracing::warn!("the replicas did not catch up within shutdown-timeout: shutting down");
            break;
        }
        shared.master.ask_for_acks_if_due(&mut asked);
        tokio::select! {
            _ = &mut aborted => {
                tracing::info!("SHUTDOWN ABORT: serving on");
                graceful.waiting.store(false, Ordering::Release);
                graceful.aborts.fetch_add(1, Ordering::AcqRel);
                shared.pause.hold_writes(false);
                return;
            }
            _ = tokio::time::sleep(Duration::from_millis(5)) => {}
        }
    }
    shared.request_shutdown();
}

/// Every online replica acknowledged the stream's end, once it holds
/// every write committed (a drain follows a commit by a millisecond).
fn caught_up(shared: &Shared) -> bool {
    let master = &shared.master;
    if !master.streaming() || master.replicas() == 0 {
        return true;
    }
    let committed = shared.db.snapshot().seq();
    master.offset_covering(committed).is_some() && master.lagging(master.offset()) == 0
}
