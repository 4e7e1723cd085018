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
//!
//! A finished group wakes exactly its members, each through its request's
//! waker (a blocked writer's is its thread), after the leader has let go
//! of the log, so the next group starts while they wake. Writers queued
//! for the next group sleep on: a leader leads them. Before, a shared
//! condition variable woke every blocked writer after every group, under
//! the log: 16 writers of 1 KiB values on tmpfs went from 223-240k to
//! 369-370k writes/s (`sync`) and 217-219k to 324-338k (`pmem`); on disk
//! groups grew from 7.4 to 12.4 writes and system time halved.
//!
//! Where a persist waits for a device, blocked writers also gather (see
//! `Committer::gather`), a finished leader hands the next group to a
//! blocked writer instead of leading it, and members wait for their group
//! by yielding the CPU rather than sleeping (`Committer::wait_yielding`);
//! elsewhere a writer that finds no queue and a free log leads its own
//! write without queueing.

use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

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
    /// The batch's note (`WriteBatch::set_note`), which the commit
    /// observer takes.
    pub note: Mutex<Option<Vec<u8>>>,
    state: AtomicU8,
    /// Whether a thread blocked in `Committer::commit` waits for it, which
    /// can be woken to lead (see `drain_as`).
    blocking: AtomicBool,
    /// Set by `hand_over`: the writer is to lead the next group.
    handed: AtomicBool,
    failure: OnceLock<String>,
    /// Set by a pending `WriteFuture` or a blocked writer; woken on
    /// completion.
    waker: Mutex<Option<Waker>>,
}

impl Request {
    pub fn new(body: Vec<u8>, count: u32, relocations: Option<Vec<Relocation>>) -> Arc<Request> {
        Request::build(body, count, relocations, None)
    }

    /// A client's batch with its note (`WriteBatch::set_note`).
    pub fn noted(body: Vec<u8>, count: u32, note: Option<Vec<u8>>) -> Arc<Request> {
        Request::build(body, count, None, note)
    }

    fn build(body: Vec<u8>, count: u32, relocations: Option<Vec<Relocation>>, note: Option<Vec<u8>>) -> Arc<Request> {
        Arc::new(Request {
            body,
            count,
            relocations,
            note: Mutex::new(note),
            state: AtomicU8::new(PENDING),
            blocking: AtomicBool::new(false),
            handed: AtomicBool::new(false),
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
    log: Mutex<LogWriter>,
    /// Whether a leader waits for the last group's writers (`gather`).
    gathers: bool,
    /// Requests in the last group.
    last_group: AtomicUsize,
    /// How long leading the last group took, in nanoseconds.
    last_lead_ns: AtomicU64,
}

/// The longest a leader waits for writers to queue (`gather`).
const MAX_GATHER: Duration = Duration::from_millis(1);

/// How long a blocked writer that finds the log held, and nobody queued,
/// spins for it before it queues and sleeps (`wait_for_free_log`). A
/// lead of one write on tmpfs takes about a microsecond; 5 µs gave up
/// too often (16 threads, 1 KiB values: 738-766k writes/s against
/// 780-868k with 20).
const SPIN_FOR_LOG: Duration = Duration::from_micros(20);

/// Wakes a blocked writer's thread.
struct ThreadWaker(std::thread::Thread);

impl Wake for ThreadWaker {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }
}

thread_local! {
    static THREAD_WAKER: Waker = Waker::from(Arc::new(ThreadWaker(std::thread::current())));
}

impl Committer {
    /// `gathers`: see `Options::gather_groups`; it applies only where a
    /// persist waits for a device.
    pub fn new(log: LogWriter, gathers: bool) -> Committer {
        Committer {
            gathers: gathers && log.persist_waits_for_device(),
            queue: Mutex::new(Vec::new()),
            log: Mutex::new(log),
            last_group: AtomicUsize::new(0),
            last_lead_ns: AtomicU64::new(0),
        }
    }

    /// Called by a leader holding the log where groups are gathered (a
    /// blocked writer, `gathers`): if the last group had several
    /// writers, waits until three quarters as many more have queued (they
    /// were just woken and are likely to write again; the last leader
    /// handed this group over, so it can queue too), for at most half of
    /// the last group's commit time. Without the wait, writers split into
    /// two cohorts that take turns, each group holding half of them: one
    /// fdatasync per group then covers twice the writers (PostgreSQL's
    /// `commit_delay`, sized by measurement instead of by hand). Not the
    /// whole cohort: its last writers are woken last and on a small
    /// machine wait for a core, so waiting for all of them ran out the
    /// clock in over half the groups (16 threads on the disk).
    fn gather(&self) {
        let previous = self.last_group.load(Ordering::Relaxed);
        if previous < 2 {
            return;
        }
        let target = (previous * 3).div_ceil(4) + self.queue.lock().len();
        let wait = Duration::from_nanos(self.last_lead_ns.load(Ordering::Relaxed) / 2).min(MAX_GATHER);
        let deadline = Instant::now() + wait;
        // Yielding, not spinning: on a small machine the writers being
        // waited for need this core to queue.
        while self.queue.lock().len() < target && Instant::now() < deadline {
            std::thread::yield_now();
        }
    }

    /// Runs `f` with the log writer while no group is in flight. The caller
    /// must `drain` afterwards: writers may have queued meanwhile, and
    /// blocked ones sleep until a leader completes them.
    pub fn with_log<T>(&self, f: impl FnOnce(&mut LogWriter) -> T) -> T {
        f(&mut self.log.lock())
    }

    pub fn enqueue(&self, request: Arc<Request>) {
        self.queue.lock().push(request);
    }

    /// Leads groups while requests are queued and the log is free.
    pub fn drain(&self, lead: Lead<'_>) {
        self.drain_as(lead, None);
    }

    /// As `drain`; `blocked`: the request of a writer blocked in `commit`,
    /// the case `gather` waits for. Async callers (the server's commit
    /// thread) are not gathered for: measured with redis-benchmark on the
    /// disk, waiting there gained nothing and spent CPU yielding.
    fn drain_as(&self, lead: Lead<'_>, blocked: Option<&Request>) {
        let gathering = blocked.is_some() && self.gathers;
        loop {
            // A hand-over is answered by trying to lead: whoever holds the
            // log instead looks at the queue once it lets go.
            if let Some(request) = blocked {
                request.handed.store(false, Ordering::Relaxed);
            }
            let Some(mut log) = self.log.try_lock() else {
                // The holder drains when it lets go.
                return;
            };
            if gathering {
                self.gather();
            }
            let group = std::mem::take(&mut *self.queue.lock());
            let failure = if group.is_empty() { None } else { self.lead(lead, &mut log, &group) };
            // The group is durable and visible: the next one may start
            // while this thread wakes its members.
            drop(log);
            // Where groups are gathered, hand the next group to a writer
            // that waits for it, so this thread returns to its caller and
            // can queue its next write in time for that group. Before the
            // members are woken, so the next leader gathers meanwhile.
            let handed_over = gathering && self.hand_over();
            for member in &group {
                member.complete(failure.as_ref());
            }
            if handed_over || self.queue.lock().is_empty() {
                return;
            }
        }
    }

    /// Wakes the first queued writer to lead, if it is a blocked one (an
    /// async request has no thread that could lead). Returns whether it did.
    fn hand_over(&self) -> bool {
        let waker = {
            let queue = self.queue.lock();
            let first = queue.first().filter(|r| r.blocking.load(Ordering::Relaxed));
            first.and_then(|r| {
                r.handed.store(true, Ordering::Release);
                r.waker.lock().clone()
            })
        };
        waker.map(Waker::wake).is_some()
    }

    /// Leads `group`; returns its failure, if any. Keeps what `gather`
    /// needs to know.
    fn lead(&self, lead: Lead<'_>, log: &mut LogWriter, group: &[Arc<Request>]) -> Option<String> {
        let started = self.gathers.then(Instant::now);
        let failure = lead(log, group).err().map(|e| e.to_string());
        if let Some(started) = started {
            self.last_group.store(group.len(), Ordering::Relaxed);
            self.last_lead_ns.store(started.elapsed().as_nanos() as u64, Ordering::Relaxed);
        }
        failure
    }

    /// Queues `request` and returns once it is durable and visible, or failed.
    pub fn commit(&self, request: Arc<Request>, lead: Lead<'_>) -> Result<()> {
        if let Some(result) = self.commit_alone(|log| lead(log, std::slice::from_ref(&request)), lead) {
            return result;
        }
        *request.waker.lock() = Some(THREAD_WAKER.with(Waker::clone));
        request.blocking.store(true, Ordering::Relaxed);
        self.enqueue(request.clone());
        loop {
            self.drain_as(lead, Some(&request));
            if let Some(outcome) = request.outcome() {
                return outcome;
            }
            // Still pending: in a group in flight, or queued behind one whose
            // leader leads it next (the log is held: sleep until completed;
            // an unpark that came first makes `park` return at once), or
            // queued after the last drain looked (the log is free: drain).
            if self.log.is_locked() && !self.wait_yielding(&request) {
                std::thread::park();
            }
            // Done: return rather than lead others' writes (the log's
            // holder looks at the queue when it lets go).
            if let Some(outcome) = request.outcome() {
                return outcome;
            }
        }
    }

    /// Leads a write alone, without queueing, where that is how a blocked
    /// writer commits: `alone` writes, persists and publishes with the
    /// log, then `lead` leads whatever queued meanwhile, as after any
    /// group. None where the writer must queue a request instead: the log
    /// stayed busy, or groups are gathered (a device's persist dwarfs
    /// what going alone saves: the queue's and the waker's locks, the
    /// self-wake, and for `Db::put` the request itself).
    pub fn commit_alone(&self, alone: impl FnOnce(&mut LogWriter) -> Result<()>, lead: Lead<'_>) -> Option<Result<()>> {
        if self.gathers {
            return None;
        }
        let mut log = self.wait_for_free_log(SPIN_FOR_LOG)?;
        let result = alone(&mut log);
        drop(log);
        if !self.queue.lock().is_empty() {
            self.drain(lead);
        }
        Some(result)
    }

    /// The log, if it is free with nobody queued, or comes free within
    /// `spin` while nobody queues. More writer threads than cores (16
    /// on 2) used to find the log held by the other core's writer, queue
    /// and sleep, to be woken by it a microsecond later: groups of one
    /// write still, and a futex wake-up and two context switches per
    /// write (55,763 switches for 500,000 writes; 2,017 spinning). Durable
    /// 1 KiB writes on tmpfs, 16 threads, 3 interleaved pairs: `sync`
    /// 657-740k -> 768-865k writes/s, `pmem` 550-570k -> 645-651k,
    /// `buffered` 706-798k -> 799-870k. Waiting for the group in flight
    /// by spinning instead of sleeping did no better (780-797k).
    fn wait_for_free_log(&self, spin: Duration) -> Option<parking_lot::MutexGuard<'_, LogWriter>> {
        let mut deadline = None;
        loop {
            if !self.queue.lock().is_empty() {
                return None;
            }
            if let Some(log) = self.log.try_lock() {
                return Some(log);
            }
            let deadline = *deadline.get_or_insert_with(|| Instant::now() + spin);
            for _ in 0..32 {
                std::hint::spin_loop();
            }
            if Instant::now() >= deadline {
                return None;
            }
        }
    }

    /// Where groups are gathered: waits for `request` to complete, or to
    /// be handed the next group, by yielding the CPU instead of sleeping,
    /// for at most twice the last group's commit time; returns whether
    /// either happened. A sleeping member was woken by a futex call from
    /// the leader, one member after another, and rejoined late for the
    /// next group; one that yields sees its completion at once and queues
    /// its next write while the next leader gathers. Disk, 8/256 B,
    /// interleaved pairs: 4 threads 21-23k -> 29-30k writes/s, 16 threads
    /// 68-89k -> 112-114k, 64 threads 61-125k -> 194-221k. It waits for
    /// the hand-over, not for a free log: a writer that took the log
    /// before the hand-over led without gathering (two threads: groups of
    /// one). The CPU it spends is what a device-bound writer leaves idle.
    fn wait_yielding(&self, request: &Request) -> bool {
        // With two writers, one wake-up per group cost less than yielding:
        // 10-11k -> 9-10k writes/s.
        if !self.gathers || self.last_group.load(Ordering::Relaxed) < 3 {
            return false;
        }
        let wait = Duration::from_nanos(2 * self.last_lead_ns.load(Ordering::Relaxed)).min(2 * MAX_GATHER);
        let deadline = Instant::now() + wait;
        loop {
            if request.state.load(Ordering::Acquire) != PENDING || request.handed.load(Ordering::Acquire) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::yield_now();
        }
    }
}

/// Completes when a request submitted with `Db::write_async` is durable and
/// visible.
pub struct WriteFuture {
    pub(crate) request: Option<Arc<Request>>,
    pub(crate) early: Option<Error>,
}

impl WriteFuture {
    /// Whether the batch was refused before it was queued (a limit): the
    /// future then completes at once with the reason.
    pub fn is_refused(&self) -> bool {
        self.early.is_some()
    }
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

#[cfg(test)]
mod tests {
    use std::sync::Barrier;

    use super::*;
    use crate::{Db, Durability, Options};

    fn open() -> (tempfile::TempDir, Db) {
        let dir = tempfile::tempdir().unwrap();
        let options = Options { durability: Durability::Buffered, ..Options::default() };
        let db = Db::open(dir.path(), options).unwrap();
        (dir, db)
    }

    #[test]
    fn a_free_log_is_taken_at_once_unless_someone_queued() {
        let (_dir, db) = open();
        let committer = &db.inner.committer;
        assert!(committer.wait_for_free_log(Duration::ZERO).is_some());
        committer.enqueue(Request::new(Vec::new(), 0, None));
        assert!(committer.wait_for_free_log(Duration::from_secs(5)).is_none(), "a queued writer goes first");
        committer.drain(&|_, _| Ok(()));
        assert!(committer.wait_for_free_log(Duration::ZERO).is_some());
    }

    #[test]
    fn a_writer_spins_for_a_held_log_only_so_long() {
        let (_dir, db) = open();
        let committer = &db.inner.committer;
        let (held, waited) = (Barrier::new(2), Barrier::new(2));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                committer.with_log(|_| {
                    held.wait();
                    waited.wait();
                })
            });
            held.wait();
            let started = Instant::now();
            assert!(committer.wait_for_free_log(Duration::from_millis(20)).is_none());
            assert!(started.elapsed() >= Duration::from_millis(20));
            waited.wait();
        });
    }

    #[test]
    fn a_log_let_go_while_a_writer_spins_is_its() {
        let (_dir, db) = open();
        let committer = &db.inner.committer;
        let held = Barrier::new(2);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                committer.with_log(|_| {
                    held.wait();
                    std::thread::sleep(Duration::from_millis(5));
                })
            });
            held.wait();
            assert!(committer.wait_for_free_log(Duration::from_secs(60)).is_some());
        });
    }
}
