//! Group commit: many concurrent writers, one persist per group.
//!
//! A writer queues its request, then tries to lead: whoever wins the log
//! mutex takes every queued request, writes them all, persists once,
//! applies them to the index and completes them. While it persists, new
//! requests pile up for the next group, so under load the persist cost is
//! shared by all writers of a group.
//!
//! Writers either block (`Db::write`) or hold a future (`Db::write_async`),
//! and a future has no thread that could come back to lead. So the rule
//! that keeps nobody stranded is: every writer tries to lead after
//! queueing, and whoever releases the log looks at the queue again and
//! leads once more if it is not empty.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Waker};

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
    /// Set by a pending `WriteFuture`; woken on completion.
    waker: Mutex<Option<Waker>>,
}

impl Request {
    pub fn new(body: Vec<u8>, count: u32, relocations: Option<Vec<Relocation>>) -> Arc<Request> {
        Arc::new(Request {
            body,
            count,
            relocations,
            state: AtomicU8::new(PENDING),
            failure: OnceLock::new(),
            waker: Mutex::new(None),
        })
    }

    fn outcome(&self) -> Option<Result<()>> {
        match self.state.load(Ordering::Acquire) {
            PENDING => None,
            DONE => Some(Ok(())),
            _ => Some(Err(Error::Poisoned(self.failure.get().cloned().unwrap_or_default()))),
        }
    }

    fn complete(&self, failure: Option<&String>) {
        match failure {
            None => self.state.store(DONE, Ordering::Release),
            Some(message) => {
                let _ = self.failure.set(message.clone());
                self.state.store(FAILED, Ordering::Release);
            }
        }
        if let Some(waker) = self.waker.lock().take() {
            waker.wake();
        }
    }
}

/// The leader's work for one group: write, persist, publish.
pub type Lead<'a> = &'a dyn Fn(&mut LogWriter, &[Arc<Request>]) -> Result<()>;

pub struct Committer {
    queue: Mutex<Vec<Arc<Request>>>,
    wake: Condvar,
    log: Mutex<LogWriter>,
}

impl Committer {
    pub fn new(log: LogWriter) -> Committer {
        Committer { queue: Mutex::new(Vec::new()), wake: Condvar::new(), log: Mutex::new(log) }
    }

    /// Runs `f` with the log writer while no group is in flight. The caller
    /// must `drain` afterwards: writers may have queued meanwhile.
    pub fn with_log<T>(&self, f: impl FnOnce(&mut LogWriter) -> T) -> T {
        let result = f(&mut self.log.lock());
        self.wake_all();
        result
    }

    fn wake_all(&self) {
        // Notify under the queue lock: a blocked writer checks its state and
        // the log lock while holding it, so none misses this.
        let _queue = self.queue.lock();
        self.wake.notify_all();
    }

    pub fn enqueue(&self, request: Arc<Request>) {
        self.queue.lock().push(request);
    }

    /// Leads groups while requests are queued and the log is free.
    pub fn drain(&self, lead: Lead<'_>) {
        loop {
            let Some(mut log) = self.log.try_lock() else {
                // The holder drains when it lets go.
                return;
            };
            let group = std::mem::take(&mut *self.queue.lock());
            if !group.is_empty() {
                let result = lead(&mut log, &group);
                let failure = result.err().map(|e| e.to_string());
                for member in &group {
                    member.complete(failure.as_ref());
                }
            }
            drop(log);
            // Wake blocked writers and look for newcomers under one lock.
            let queue = self.queue.lock();
            self.wake.notify_all();
            if queue.is_empty() {
                return;
            }
        }
    }

    /// Queues `request` and returns once it is durable and visible, or failed.
    pub fn commit(&self, request: Arc<Request>, lead: Lead<'_>) -> Result<()> {
        self.enqueue(request.clone());
        loop {
            self.drain(lead);
            let mut queue = self.queue.lock();
            if let Some(outcome) = request.outcome() {
                return outcome;
            }
            // Still pending: in a group in flight (the log is held) or queued
            // after the last drain looked (the log is free: drain again).
            if self.log.is_locked() {
                self.wake.wait(&mut queue);
            }
        }
    }
}

/// Completes when a request submitted with `Db::write_async` is durable and
/// visible.
pub struct WriteFuture {
    pub(crate) request: Option<Arc<Request>>,
    pub(crate) early: Option<Error>,
}

impl Future for WriteFuture {
    type Output = Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Result<()>> {
        if let Some(error) = self.early.take() {
            return Poll::Ready(Err(error));
        }
        let Some(request) = &self.request else { return Poll::Ready(Ok(())) };
        if let Some(outcome) = request.outcome() {
            return Poll::Ready(outcome);
        }
        *request.waker.lock() = Some(cx.waker().clone());
        // `complete` stores the state before it takes the waker.
        match request.outcome() {
            Some(outcome) => Poll::Ready(outcome),
            None => Poll::Pending,
        }
    }
}
