//! Group commit: many concurrent writers, one persist per group.
//!
//! A writer queues its request, then either becomes the leader (it wins the
//! log mutex) or sleeps. The leader takes every queued request, writes them
//! all, persists once, applies them to the index, and wakes everyone. While
//! it persists, new requests pile up for the next leader, so under load the
//! persist cost is shared by all writers of a group.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};

use parking_lot::{Condvar, Mutex};

use crate::error::{Error, Result};
use crate::log::writer::LogWriter;

const PENDING: u8 = 0;
const DONE: u8 = 1;
const FAILED: u8 = 2;

/// A GC relocation: the entry at this position of the request body keeps
/// its original sequence number and replaces `from` only if still current.
#[derive(Debug, Clone, Copy)]
pub struct Relocation {
    pub seq: u64,
    pub from: crate::index::memtable::Loc,
}

pub struct Request {
    /// Encoded entries (see `log::record`).
    pub body: Vec<u8>,
    pub count: u32,
    /// For GC: one relocation per entry, each written as its own frame.
    pub relocations: Option<Vec<Relocation>>,
    state: AtomicU8,
    failure: OnceLock<String>,
}

impl Request {
    pub fn new(body: Vec<u8>, count: u32, relocations: Option<Vec<Relocation>>) -> Arc<Request> {
        Arc::new(Request { body, count, relocations, state: AtomicU8::new(PENDING), failure: OnceLock::new() })
    }

    fn outcome(&self) -> Option<Result<()>> {
        match self.state.load(Ordering::Acquire) {
            PENDING => None,
            DONE => Some(Ok(())),
            _ => Some(Err(Error::Poisoned(self.failure.get().cloned().unwrap_or_default()))),
        }
    }
}

pub struct Committer {
    queue: Mutex<Vec<Arc<Request>>>,
    wake: Condvar,
    log: Mutex<LogWriter>,
}

impl Committer {
    pub fn new(log: LogWriter) -> Committer {
        Committer { queue: Mutex::new(Vec::new()), wake: Condvar::new(), log: Mutex::new(log) }
    }

    /// Runs `f` with the log writer while no group is in flight.
    pub fn with_log<T>(&self, f: impl FnOnce(&mut LogWriter) -> T) -> T {
        let result = f(&mut self.log.lock());
        // A writer may have queued while we held the log and gone to sleep
        // because it could not lead: wake it.
        self.wake_all();
        result
    }

    fn wake_all(&self) {
        // Notify under the queue lock: a follower checks its state and the
        // log lock while holding it, so none misses this.
        let _queue = self.queue.lock();
        self.wake.notify_all();
    }

    /// Queues `request` and returns once it is durable and visible, or
    /// failed. `lead` does the leader's work for a whole group.
    pub fn commit(
        &self,
        request: Arc<Request>,
        lead: impl FnOnce(&mut LogWriter, &[Arc<Request>]) -> Result<()>,
    ) -> Result<()> {
        let mut queue = self.queue.lock();
        queue.push(request.clone());
        let mut lead = Some(lead);
        loop {
            if let Some(outcome) = request.outcome() {
                return outcome;
            }
            if let Some(mut log) = self.log.try_lock() {
                // A leader that finished just before we got the lock may
                // have taken our request with its group.
                if let Some(outcome) = request.outcome() {
                    return outcome;
                }
                let group = std::mem::take(&mut *queue);
                drop(queue);
                debug_assert!(group.iter().any(|r| Arc::ptr_eq(r, &request)));
                let lead = lead.take().expect("a writer leads at most once: its request is in that group");
                let result = lead(&mut log, &group);
                let message = result.as_ref().err().map(|e| e.to_string());
                for member in &group {
                    match &message {
                        None => member.state.store(DONE, Ordering::Release),
                        Some(message) => {
                            let _ = member.failure.set(message.clone());
                            member.state.store(FAILED, Ordering::Release);
                        }
                    }
                }
                drop(log);
                self.wake_all();
                return result;
            }
            self.wake.wait(&mut queue);
        }
    }
}
