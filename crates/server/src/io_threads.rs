//! The I/O threads: each runs a runtime of its own and serves the
//! connections handed to it for their whole life, as memcached's worker
//! threads and Redis's one event loop do.
//!
//! One work-stealing runtime for all connections moved ready connections
//! between its workers: a worker that found work woke its parked sibling
//! (a futex wake and an inter-processor interrupt, dear in a VM), and both
//! then competed with the load generator for 2 cores. With a runtime per
//! thread no connection changes thread: 4 interleaved runs on tmpfs, SET
//! `-P 16` 475k -> 487k/s, `-P 1` 77k -> 83k/s with less server CPU per
//! request (BENCHMARKS.md, twenty-third session).
//!
//! Each runtime is tokio's multi-thread one with a single worker, not the
//! current-thread one (which measured the same): `block_in_place` needs it
//! to move a thread's other connections elsewhere while a write collects a
//! piece of GC (`commands::commit`).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::runtime::Runtime;

use crate::conn;
use crate::server::Shared;
use crate::socket::{Peer, Stream};

struct IoThread {
    /// Taken when the thread stops (`Drop`).
    runtime: Option<Runtime>,
    /// Connections this thread serves now: a new one goes to the least
    /// loaded thread.
    connections: Arc<AtomicUsize>,
}

impl Drop for IoThread {
    /// Stops the thread without waiting for it: dropping a runtime waits
    /// for its tasks, which panics inside another runtime (`server::run`
    /// and a half-built `IoThreads::start` both are).
    fn drop(&mut self) {
        if let Some(runtime) = self.runtime.take() {
            runtime.shutdown_background();
        }
    }
}

pub struct IoThreads {
    threads: Vec<IoThread>,
}

/// Which protocol a listener speaks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Wire {
    Resp,
    /// RESP after a TLS handshake, which the I/O thread runs.
    RespTls,
    Memcached,
    /// memcached's protocols after a TLS handshake (`--memcached-tls`).
    MemcachedTls,
}

impl IoThreads {
    /// Starts `count` threads (at least one).
    pub fn start(count: usize) -> std::io::Result<IoThreads> {
        let threads = (0..count.max(1))
            .map(|i| {
                let runtime = tokio::runtime::Builder::new_multi_thread()
                    .worker_threads(1)
                    .thread_name(format!("scaledkv-io-{i}"))
                    .enable_all()
                    .build()?;
                Ok(IoThread { runtime: Some(runtime), connections: Arc::default() })
            })
            .collect::<std::io::Result<_>>()?;
        Ok(IoThreads { threads })
    }

    /// Hands `stream` (accepted on another runtime) to the least loaded
    /// thread, which serves it until it closes.
    pub fn serve(&self, shared: Arc<Shared>, stream: Stream, (addr, local): (Peer, Peer), wire: Wire) {
        let thread = self.threads.iter().min_by_key(|t| t.connections.load(Ordering::Relaxed)).expect("one thread");
        // The socket leaves the accepting runtime's poller here and joins
        // the chosen thread's in `from_std`, on that thread.
        let stream = match stream.into_std() {
            Ok(stream) => stream,
            Err(error) => {
                tracing::warn!(%error, %addr, "cannot hand the connection to an I/O thread");
                shared.connected.fetch_sub(1, Ordering::AcqRel);
                return;
            }
        };
        let connections = thread.connections.clone();
        connections.fetch_add(1, Ordering::Relaxed);
        let runtime = thread.runtime.as_ref().expect("running until dropped");
        runtime.spawn(async move {
            let stream = match stream.into_tokio() {
                Ok(stream) if matches!(wire, Wire::RespTls | Wire::MemcachedTls) => {
                    shake_hands(&shared, stream, addr).await
                }
                Ok(stream) => Some(stream),
                Err(error) => {
                    tracing::warn!(%error, %addr, "cannot register the connection");
                    None
                }
            };
            match (stream, wire) {
                (Some(stream), Wire::Resp | Wire::RespTls) => conn::serve(shared, stream, addr, local).await,
                (Some(stream), Wire::Memcached | Wire::MemcachedTls) => {
                    crate::memcache::serve(shared, stream, addr, local).await
                }
                // Counted in when accepted, never served.
                (None, _) => drop(shared.connected.fetch_sub(1, Ordering::AcqRel)),
            }
            connections.fetch_sub(1, Ordering::Relaxed);
        });
    }

    /// Stops every thread; connections still open are dropped. Called once
    /// they had their chance to finish (`server::run`).
    pub fn stop(self) {
        drop(self);
    }
}

/// A TLS client's handshake with the context serving now; None (the
/// connection closes) when it fails.
async fn shake_hands(shared: &Shared, stream: Stream, addr: Peer) -> Option<Stream> {
    let (Stream::Tcp(tcp), Some(acceptor)) = (stream, shared.tls.acceptor()) else { return None };
    match crate::tls::handshake(acceptor, tcp).await {
        Ok(tls) => Some(Stream::Tls(Box::new(tls))),
        Err(error) => {
            tracing::debug!(%addr, %error, "TLS handshake failed");
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn threads_stop_inside_another_runtime_without_panicking() {
        IoThreads::start(2).unwrap().stop();
        // Dropped without `stop` (an early return) as well.
        let threads = IoThreads::start(0).unwrap();
        assert_eq!(threads.threads.len(), 1, "at least one thread");
        drop(threads);
    }
}
