//! The write gate: clients' writes stop at one moment of the data set.
//!
//! Why: a master that becomes a replica (REPLICAOF, FAILOVER) tells its
//! new master the offset of its own history its data set is at, and takes
//! the new master's stream from there (a partial resync, PSYNC2). A
//! client's write that passed the read-only check before the switch and
//! then waited for its keys' locks (behind a script, a transaction, a
//! FLUSHALL) would commit after that moment: a change no offset names,
//! which the new master never has. The gate refuses it where every write
//! path queues its batch for the log, and what a command does before
//! that (its reply, its events, its messages) goes with the batch.
//!
//! A commit checks the gate under a shared lock held until its batch has
//! its place in the log; closing takes the lock exclusively, so once
//! `close` returns every client batch let through is queued, and a
//! barrier after it finds them all.

use std::sync::atomic::{AtomicBool, Ordering};

use parking_lot::{RwLock, RwLockReadGuard};

/// Who commits a batch.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Writer {
    /// A client's command: refused while the gate is closed.
    #[default]
    Client,
    /// The master's stream on a replica's link (and `--import-rdb`).
    Master,
    /// The server's own upkeep (sweeping deleted tables' fields), which
    /// changes nothing a client can see.
    Server,
}

impl Writer {
    /// The writer of a connection's commands.
    pub fn of(conn: &crate::conn::ConnState) -> Writer {
        if conn.master_link {
            Writer::Master
        } else {
            Writer::Client
        }
    }
}

/// A client's batch met a closed gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Closed;

#[derive(Default)]
pub struct WriteGate {
    lock: RwLock<()>,
    closed: AtomicBool,
}

impl WriteGate {
    /// Lets `writer`'s batch through, or refuses it: queue the batch
    /// before dropping what this returns.
    pub fn admit(&self, writer: Writer) -> Result<Option<RwLockReadGuard<'_, ()>>, Closed> {
        if writer != Writer::Client {
            return Ok(None);
        }
        let guard = self.lock.read();
        if self.closed.load(Ordering::Acquire) {
            return Err(Closed);
        }
        Ok(Some(guard))
    }

    /// Refuses clients' batches from now: every one let through before
    /// has been queued when this returns.
    pub fn close(&self) {
        let _exclusive = self.lock.write();
        self.closed.store(true, Ordering::Release);
    }

    pub fn open(&self) {
        self.closed.store(false, Ordering::Release);
    }

    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_closed_gate_refuses_clients_only_and_close_waits_for_admitted_batches() {
        let gate = std::sync::Arc::new(WriteGate::default());
        let admitted = gate.admit(Writer::Client).expect("open").expect("a client holds the lock");
        let closing = {
            let gate = gate.clone();
            std::thread::spawn(move || {
                gate.close();
                std::time::Instant::now()
            })
        };
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!gate.is_closed(), "closing waits for the batch let through");
        let queued_at = std::time::Instant::now();
        drop(admitted);
        assert!(closing.join().expect("closed") >= queued_at);
        assert_eq!(gate.admit(Writer::Client).err(), Some(Closed));
        assert!(gate.admit(Writer::Master).expect("the master's stream goes on").is_none());
        assert!(gate.admit(Writer::Server).is_ok());
        gate.open();
        assert!(gate.admit(Writer::Client).is_ok());
    }
}
