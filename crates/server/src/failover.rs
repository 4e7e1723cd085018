//! FAILOVER: a master hands over to one of its replicas, as Redis 7's
//! does (`replication.c`'s failover states), without losing a write.
//!
//! The master holds clients' writes (as CLIENT PAUSE WRITE, apart from
//! it) and waits for the target (TO host port, or any replica) to
//! acknowledge the end of the stream. Redis, one thread, stops writing
//! there; here a write that passed the hold before it began may still be
//! waiting for its keys' locks, so the master then closes the write gate
//! (such a write gets READONLY), drains what is queued, fixes the offset
//! its data set is at (`Master::capture`) and waits for the target to
//! acknowledge that one. Then it follows the target, asking it to take
//! over with `PSYNC <replid> <offset> FAILOVER`: the target, still its
//! replica with nothing more to apply, promotes itself and answers
//! +CONTINUE, so the old master goes on from the new one's history with a
//! partial resync. The old master's other replicas follow it, getting
//! the new master's stream through it, as with Redis (Sentinel, or
//! REPLICAOF, moves them, partially).
//!
//! TIMEOUT ms bounds the wait: past it the failover is given up, or with
//! FORCE goes ahead without the target's acknowledgement (the target may
//! then lack the last writes, which the old master loses in the full sync
//! that follows, as with Redis). FAILOVER ABORT gives up one that has not
//! finished; so does the target refusing the PSYNC or the link failing
//! before it answers: the server is a master again, its history intact.

use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use crate::server::Shared;

/// How often a failover waiting for its target looks at the offsets.
const LOOK_EVERY: Duration = Duration::from_millis(5);

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Phase {
    #[default]
    None,
    WaitingForSync,
    InProgress,
}

impl Phase {
    /// INFO's `master_failover_state`.
    pub fn name(self) -> &'static str {
        match self {
            Phase::None => "no-failover",
            Phase::WaitingForSync => "waiting-for-sync",
            Phase::InProgress => "failover-in-progress",
        }
    }
}

#[derive(Default)]
struct State {
    phase: Phase,
    target: Option<(String, u16)>,
    end: Option<Instant>,
    force: bool,
    /// The offset the data set was fixed at (the write gate closed, the
    /// stream frozen): undone if the failover is given up.
    fixed: Option<(String, u64)>,
}

#[derive(Default)]
pub struct Failover {
    state: Mutex<State>,
    wake: tokio::sync::Notify,
}

/// What FAILOVER asked for.
pub struct Request {
    pub target: Option<(String, u16)>,
    pub timeout: Option<Duration>,
    pub force: bool,
}

impl Failover {
    pub fn phase(&self) -> Phase {
        self.state.lock().phase
    }

    /// Starts a failover, or says why not (Redis's errors, in its order).
    pub fn request(&self, shared: &Shared, request: Request) -> Result<(), &'static str> {
        let mut state = self.state.lock();
        if state.phase != Phase::None {
            return Err("ERR FAILOVER already in progress.");
        }
        if shared.replication.following() {
            return Err("ERR FAILOVER is not valid when server is a replica.");
        }
        if shared.master.replicas() == 0 {
            return Err("ERR FAILOVER requires connected replicas.");
        }
        if request.force && (request.timeout.is_none() || request.target.is_none()) {
            return Err("ERR FAILOVER with force option requires both a timeout and target HOST and IP.");
        }
        match &request.target {
            Some((host, port)) => match shared.master.replica_ack(host, *port) {
                None => return Err("ERR FAILOVER target HOST and PORT is not a replica."),
                Some((false, _)) => return Err("ERR FAILOVER target replica is not online."),
                Some((true, _)) => tracing::info!(%host, port, "FAILOVER requested"),
            },
            None => tracing::info!("FAILOVER requested to any replica"),
        }
        *state = State {
            phase: Phase::WaitingForSync,
            target: request.target,
            end: request.timeout.map(|timeout| Instant::now() + timeout),
            force: request.force,
            fixed: None,
        };
        shared.pause.hold_writes(true);
        self.wake.notify_one();
        Ok(())
    }

    /// FAILOVER ABORT.
    pub fn abort_by_client(&self, shared: &Shared) -> Result<(), &'static str> {
        if self.phase() == Phase::None {
            return Err("ERR No failover in progress.");
        }
        self.abort(shared, "Failover manually aborted");
        Ok(())
    }

    /// Gives the failover up: the server is a master again, with its
    /// history where it was; held writes go on.
    fn abort(&self, shared: &Shared, reason: &str) {
        let was = std::mem::take(&mut *self.state.lock());
        if was.phase == Phase::None {
            return;
        }
        match &was.target {
            Some((host, port)) => tracing::warn!(%host, port, reason, "FAILOVER aborted"),
            None => tracing::warn!(reason, "FAILOVER to any replica aborted"),
        }
        if was.phase == Phase::InProgress {
            // The link's task makes it a master again, as after REPLICAOF
            // NO ONE: its history goes on (it streams), the stream thaws
            // and the gate opens once the link has ended.
            if let Err(error) = shared.replication.stop(shared) {
                tracing::error!(%error, "the aborted failover could not make the server a master again");
            }
        } else if was.fixed.is_some() {
            shared.master.thaw();
            shared.replication.gate.open();
        }
        shared.pause.hold_writes(false);
    }

    /// Whether this server's link should ask its master to take over
    /// (`PSYNC ... FAILOVER`).
    pub fn in_progress(&self) -> bool {
        self.phase() == Phase::InProgress
    }

    /// The target answered the link's PSYNC: the failover is done
    /// (`accepted`, +CONTINUE or even +FULLRESYNC, as Redis takes) or
    /// given up.
    pub fn answered(&self, shared: &Shared, accepted: bool) {
        if !self.in_progress() {
            return;
        }
        if !accepted {
            return self.abort(shared, "Failover target rejected psync request");
        }
        let done = std::mem::take(&mut *self.state.lock());
        if let Some((host, port)) = &done.target {
            tracing::info!(%host, port, "FAILOVER done: following the new master");
        }
        shared.pause.hold_writes(false);
    }

    /// The link to the target ended before it answered.
    pub fn link_failed(&self, shared: &Shared) {
        if self.in_progress() {
            self.abort(shared, "the link to the failover target failed");
        }
    }
}

/// Runs each requested failover's wait for its target, for the server's
/// life.
pub async fn supervise(shared: Arc<Shared>) {
    let mut shutdown = shared.shutdown.subscribe();
    loop {
        tokio::select! {
            _ = shared.failover.wake.notified() => {}
            _ = shutdown.changed() => return,
        }
        wait_for_sync(&shared).await;
    }
}

/// The waiting-for-sync phase: until the target has acknowledged the
/// offset the data set is fixed at, then the handover (or the timeout).
async fn wait_for_sync(shared: &Arc<Shared>) {
    let failover = &shared.failover;
    let mut asked: Option<Instant> = None;
    loop {
        let (target, timed_out, force, fixed) = {
            let state = failover.state.lock();
            if state.phase != Phase::WaitingForSync {
                return;
            }
            let timed_out = state.end.is_some_and(|end| Instant::now() >= end);
            (state.target.clone(), timed_out, state.force, state.fixed.clone())
        };
        if timed_out && !force {
            return failover.abort(shared, "Replica never caught up before timeout");
        }
        let offset = fixed.as_ref().map_or_else(|| shared.master.offset(), |(_, offset)| *offset);
        let synced = match &target {
            Some((host, port)) => shared
                .master
                .replica_ack(host, *port)
                .filter(|(online, acked)| *online && *acked >= offset as i64)
                .map(|_| (host.clone(), *port)),
            None => shared.master.replica_at(offset),
        };
        if synced.is_some() || timed_out {
            if fixed.is_none() {
                // Writes that passed the hold before it began commit before
                // this or not at all.
                shared.replication.gate.close();
                let Some(position) = shared.master.capture(shared, true).await else {
                    shared.replication.gate.open();
                    return failover.abort(shared, "the replication stream could not be fixed");
                };
                let mut state = failover.state.lock();
                if state.phase != Phase::WaitingForSync {
                    // Aborted meanwhile, before it knew to undo this.
                    drop(state);
                    shared.master.thaw();
                    shared.replication.gate.open();
                    return;
                }
                state.fixed = Some(position);
                if !timed_out {
                    // Now for the target to acknowledge that offset.
                    continue;
                }
            }
            let Some(target) = synced.or(target) else { continue };
            let mut state = failover.state.lock();
            if state.phase != Phase::WaitingForSync {
                return;
            }
            let position = state.fixed.clone().expect("fixed above");
            if timed_out {
                tracing::warn!(host = %target.0, port = target.1, "FAILOVER timeout exceeded, failing over");
            } else {
                tracing::info!(host = %target.0, port = target.1, "failover target is synced, failing over");
            }
            state.phase = Phase::InProgress;
            state.target = Some(target.clone());
            drop(state);
            shared.replication.follow_for_failover(crate::replica::Master { host: target.0, port: target.1 }, position);
            return;
        }
        // Until the offset is fixed (the stream then stands still).
        if fixed.is_none() {
            shared.master.ask_for_acks_if_due(&mut asked);
        }
        tokio::time::sleep(LOOK_EVERY).await;
    }
}
