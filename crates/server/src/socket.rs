//! A client's connection, over TCP, TLS (`crate::tls`) or a Unix socket
//! (Redis's `unixsocket`), and where it comes from.
//!
//! One enum, not a generic connection type: the code that serves a
//! connection (`conn`, `memcache`, `master`, `rdb_sync`) is written once,
//! and a branch per read or write costs nothing measurable next to the
//! system call behind it.

use std::fmt;
use std::io;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::pin::Pin;
use std::task::{Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpStream, UnixStream};

pub enum Stream {
    Tcp(TcpStream),
    /// Boxed: rustls's state is some kilobytes, the others a descriptor.
    Tls(Box<tokio_rustls::server::TlsStream<TcpStream>>),
    /// This server's link to a master over TLS (`tls-replication`).
    TlsClient(Box<crate::tls::ClientTls>),
    Unix(UnixStream),
}

/// Where a connection comes from or arrives at, as CLIENT LIST's `addr`
/// and `laddr` give it: `ip:port`, or a Unix socket's path and `:0`, as
/// Redis gives them. The path lives as long as the server (one listener).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    Tcp(SocketAddr),
    Unix(&'static str),
}

impl fmt::Display for Peer {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Unix(path) => write!(f, "{path}:0"),
        }
    }
}

impl Peer {
    /// 127.0.0.1:0: the peer of a connection the server runs for itself
    /// (an RDB export's reader, the master link's runner for an import).
    pub const LOOPBACK: Peer = Peer::Tcp(SocketAddr::V4(SocketAddrV4::new(Ipv4Addr::LOCALHOST, 0)));

    /// The host part: an IP address, or the socket's path.
    pub fn host(&self) -> String {
        match self {
            Peer::Tcp(addr) => addr.ip().to_string(),
            Peer::Unix(path) => path.to_string(),
        }
    }

    pub fn is_unix(&self) -> bool {
        matches!(self, Peer::Unix(_))
    }

    /// How MONITOR names the client (`127.0.0.1:5000`, `unix:/path`).
    pub fn monitor_source(self) -> MonitorSource {
        MonitorSource(self)
    }
}

/// A client as MONITOR names it: written only once a monitor listens.
pub struct MonitorSource(Peer);

impl fmt::Display for MonitorSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.0 {
            Peer::Tcp(addr) => write!(f, "{addr}"),
            Peer::Unix(path) => write!(f, "unix:{path}"),
        }
    }
}

impl Stream {
    /// The TCP socket under it, for socket options.
    pub fn tcp(&self) -> Option<&TcpStream> {
        match self {
            Stream::Tcp(stream) => Some(stream),
            Stream::Tls(stream) => Some(stream.get_ref().0),
            Stream::TlsClient(stream) => Some(stream.get_ref().0),
            Stream::Unix(_) => None,
        }
    }

    /// The socket as the standard library's, to move it to another
    /// runtime (`io_threads`): before a TLS handshake, which that runtime
    /// runs.
    pub fn into_std(self) -> io::Result<StdStream> {
        Ok(match self {
            Stream::Tcp(stream) => StdStream::Tcp(stream.into_std()?),
            Stream::Unix(stream) => StdStream::Unix(stream.into_std()?),
            Stream::Tls(_) | Stream::TlsClient(_) => {
                return Err(io::Error::other("a TLS stream stays on the runtime that shook hands"))
            }
        })
    }
}

/// A `Stream` between runtimes.
pub enum StdStream {
    Tcp(std::net::TcpStream),
    Unix(std::os::unix::net::UnixStream),
}

impl StdStream {
    /// Registers the socket with the runtime this runs on.
    pub fn into_tokio(self) -> io::Result<Stream> {
        Ok(match self {
            StdStream::Tcp(stream) => Stream::Tcp(TcpStream::from_std(stream)?),
            StdStream::Unix(stream) => Stream::Unix(UnixStream::from_std(stream)?),
        })
    }
}

impl AsyncRead for Stream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(stream) => Pin::new(stream).poll_read(cx, buf),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
            Stream::TlsClient(stream) => Pin::new(stream.as_mut()).poll_read(cx, buf),
            Stream::Unix(stream) => Pin::new(stream).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Stream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(stream) => Pin::new(stream).poll_write(cx, buf),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
            Stream::TlsClient(stream) => Pin::new(stream.as_mut()).poll_write(cx, buf),
            Stream::Unix(stream) => Pin::new(stream).poll_write(cx, buf),
        }
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Stream::Tcp(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_write_vectored(cx, bufs),
            Stream::TlsClient(stream) => Pin::new(stream.as_mut()).poll_write_vectored(cx, bufs),
            Stream::Unix(stream) => Pin::new(stream).poll_write_vectored(cx, bufs),
        }
    }

    fn is_write_vectored(&self) -> bool {
        true
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(stream) => Pin::new(stream).poll_flush(cx),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
            Stream::TlsClient(stream) => Pin::new(stream.as_mut()).poll_flush(cx),
            Stream::Unix(stream) => Pin::new(stream).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Stream::Tcp(stream) => Pin::new(stream).poll_shutdown(cx),
            Stream::Tls(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
            Stream::TlsClient(stream) => Pin::new(stream.as_mut()).poll_shutdown(cx),
            Stream::Unix(stream) => Pin::new(stream).poll_shutdown(cx),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[test]
    fn peers_read_as_redis_writes_them() {
        let tcp = Peer::Tcp("127.0.0.1:5000".parse().unwrap());
        assert_eq!(
            (tcp.to_string(), tcp.host(), tcp.monitor_source().to_string()),
            ("127.0.0.1:5000".into(), "127.0.0.1".into(), "127.0.0.1:5000".into())
        );
        let unix = Peer::Unix("/tmp/redis.sock");
        assert_eq!(unix.to_string(), "/tmp/redis.sock:0");
        assert_eq!(unix.monitor_source().to_string(), "unix:/tmp/redis.sock");
        assert!(unix.is_unix() && !tcp.is_unix());
    }

    #[tokio::test]
    async fn a_unix_stream_reads_writes_and_sees_a_hang_up() {
        let (server, mut client) = UnixStream::pair().unwrap();
        let mut server = Stream::Unix(server);
        client.write_all(b"PING").await.unwrap();
        let mut read = [0u8; 4];
        server.read_exact(&mut read).await.unwrap();
        assert_eq!(&read, b"PING");
        server.write_all(b"+PONG\r\n").await.unwrap();
        let mut reply = [0u8; 7];
        client.read_exact(&mut reply).await.unwrap();
        assert_eq!(&reply, b"+PONG\r\n");
        drop(client);
        assert_eq!(server.read(&mut read).await.unwrap(), 0, "a hang-up reads as 0 bytes");
    }
}
