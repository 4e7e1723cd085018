//! A Prometheus text-format endpoint (`GET /metrics`) on its own port.

use std::fmt::Write as _;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::server::Shared;

pub async fn serve(shared: Arc<Shared>, listener: TcpListener) {
    loop {
        let Ok((mut stream, _)) = listener.accept().await else { continue };
        let shared = shared.clone();
        tokio::spawn(async move {
            let mut request = vec![0u8; 4096];
            let n = match tokio::time::timeout(std::time::Duration::from_secs(5), stream.read(&mut request)).await {
                Ok(Ok(n)) => n,
                _ => return,
            };
            let head = String::from_utf8_lossy(&request[..n]);
            let response = if head.starts_with("GET /metrics") || head.starts_with("GET / ") {
                let body = render(&shared);
                format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\n\
                     Connection: close\r\n\r\n{body}",
                    body.len()
                )
            } else {
                "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n".to_string()
            };
            let _ = stream.write_all(response.as_bytes()).await;
        });
    }
}

/// The metrics, one `# TYPE` line and one sample each.
pub fn render(shared: &Shared) -> String {
    let stats = shared.db.stats();
    let s = &shared.stats;
    let counters: [(&str, &str, u64); 9] = [
        ("commands_processed_total", "Commands run", s.commands.load(Ordering::Relaxed)),
        ("connections_received_total", "Connections accepted", s.connections_received.load(Ordering::Relaxed)),
        (
            "rejected_connections_total",
            "Connections refused (maxclients)",
            s.rejected_connections.load(Ordering::Relaxed),
        ),
        ("keyspace_hits_total", "Key lookups that found a key", s.keyspace_hits.load(Ordering::Relaxed)),
        ("keyspace_misses_total", "Key lookups that found nothing", s.keyspace_misses.load(Ordering::Relaxed)),
        ("errors_total", "Commands answered with an error", crate::commandstats::total_errors()),
        ("expired_keys_total", "Keys dropped by active expiry", s.expired_keys.load(Ordering::Relaxed)),
        ("log_bytes_written_total", "Bytes appended to the value log", stats.log_bytes_written),
        (
            "early_lock_releases_total",
            "Writes whose key locks went before they were durable, for a waiting command",
            s.early_lock_releases.load(Ordering::Relaxed),
        ),
    ];
    let channels = |class| shared.pubsub.count(class) as f64;
    let gauges: [(&str, &str, f64); 10] = [
        ("connected_clients", "Open client connections", shared.clients.lock().len() as f64),
        ("pubsub_channels", "Channels with a subscriber", channels(crate::pubsub::Class::Channel)),
        ("pubsub_patterns", "Patterns with a subscriber", channels(crate::pubsub::Class::Pattern)),
        ("pubsub_shard_channels", "Shard channels with a subscriber", channels(crate::pubsub::Class::Shard)),
        ("keys", "Keys in the database", shared.user_keys() as f64),
        ("live_bytes", "Bytes of live log entries", stats.live_bytes as f64),
        ("disk_bytes", "Bytes of segment files", stats.disk_bytes as f64),
        ("index_memory_bytes", "Estimated DRAM held by the index", stats.index_memory_bytes as f64),
        ("write_amplification", "Log and checkpoint bytes per user byte since start", stats.write_amplification),
        ("uptime_seconds", "Seconds since start", shared.started.elapsed().as_secs_f64()),
    ];
    let mut out = String::new();
    for (name, help, value) in counters {
        let _ = writeln!(out, "# HELP scaledkv_{name} {help}\n# TYPE scaledkv_{name} counter\nscaledkv_{name} {value}");
    }
    for (name, help, value) in gauges {
        let _ = writeln!(out, "# HELP scaledkv_{name} {help}\n# TYPE scaledkv_{name} gauge\nscaledkv_{name} {value}");
    }
    out
}
