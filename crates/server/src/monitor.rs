//! MONITOR: every command the server runs, as a line to each monitoring
//! client, in Redis's format (`+<unix time> [0 <addr>] "NAME" "arg" ...`),
//! delivered through the clients' pub/sub mailboxes. Without a monitor a
//! command pays one atomic load.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::RwLock;

use crate::commands::Command;
use crate::conn::{ClientInfo, ConnState};
use crate::server::Shared;

#[derive(Default)]
pub struct Monitors {
    clients: RwLock<Vec<Arc<ClientInfo>>>,
    count: AtomicUsize,
}

impl Monitors {
    pub fn add(&self, client: &Arc<ClientInfo>) {
        let mut clients = self.clients.write();
        clients.push(client.clone());
        self.count.store(clients.len(), Ordering::Release);
    }

    pub fn remove(&self, client: u64) {
        let mut clients = self.clients.write();
        clients.retain(|c| c.id != client);
        self.count.store(clients.len(), Ordering::Release);
    }
}

/// Tells the monitors that `conn` ran `args` (not ADMIN commands, as
/// Redis does not show them; AUTH's and HELLO's credentials redacted).
pub fn feed(shared: &Shared, conn: &mut ConnState, command: &Command, args: &[Bytes]) {
    feed_from(shared, conn, &conn.info.addr.monitor_source(), command, args);
}

/// A command a script runs, shown as Redis shows it (`[0 lua]`).
pub fn feed_script_command(shared: &Shared, conn: &mut ConnState, command: &Command, args: &[Bytes]) {
    feed_from(shared, conn, &"lua", command, args);
}

fn feed_from(shared: &Shared, conn: &mut ConnState, source: &dyn std::fmt::Display, command: &Command, args: &[Bytes]) {
    if shared.monitors.count.load(Ordering::Acquire) == 0 || command.has(crate::commands::ADMIN) {
        return;
    }
    let line = Bytes::from(line(source, args, std::time::SystemTime::now()));
    for client in shared.monitors.clients.read().iter() {
        crate::pubsub::post_line(client, line.clone(), &mut conn.woken);
    }
}

fn line(source: &dyn std::fmt::Display, args: &[Bytes], at: std::time::SystemTime) -> Vec<u8> {
    let since = at.duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    let mut line = format!("+{}.{:06} [0 {source}]", since.as_secs(), since.subsec_micros()).into_bytes();
    let secret = crate::slowlog::secret_positions(args);
    for (i, arg) in args.iter().enumerate() {
        line.push(b' ');
        crate::resp::request::repr(&mut line, if secret.contains(&i) { b"(redacted)" } else { arg });
    }
    line.extend_from_slice(b"\r\n");
    line
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_written_as_redis_writes_them() {
        let at = std::time::UNIX_EPOCH + std::time::Duration::from_micros(1_795_720_963_045_499);
        let addr: std::net::SocketAddr = "127.0.0.1:42684".parse().unwrap();
        let args = |words: &[&[u8]]| words.iter().map(|w| Bytes::copy_from_slice(w)).collect::<Vec<_>>();
        let text = |line: Vec<u8>| String::from_utf8(line).unwrap();
        assert_eq!(
            text(line(&addr, &args(&[b"SET", b"a b", b"x\"y\n\x01\\\t"]), at)),
            "+1795720963.045499 [0 127.0.0.1:42684] \"SET\" \"a b\" \"x\\\"y\\n\\x01\\\\\\t\"\r\n"
        );
        assert_eq!(
            text(line(&addr, &args(&[b"AUTH", b"user", b"secret"]), at)),
            "+1795720963.045499 [0 127.0.0.1:42684] \"AUTH\" \"(redacted)\" \"(redacted)\"\r\n"
        );
        assert_eq!(
            text(line(&addr, &args(&[b"HELLO", b"3", b"AUTH", b"u", b"p", b"SETNAME", b"n"]), at)),
            "+1795720963.045499 [0 127.0.0.1:42684] \"HELLO\" \"3\" \"AUTH\" \"(redacted)\" \"(redacted)\" \"SETNAME\" \"n\"\r\n"
        );
    }
}
