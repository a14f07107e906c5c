//! The one accept loop of every listener picogent serves people and programs on — the agent's
//! `http.listen` (the inspector, `/healthz`, `/readyz`, `/metrics`, `/mcp`), the reference
//! board, and `picogent mcp --http` — with limits an attacker on the network cannot talk past.
//!
//! Invariants:
//! - a client has [`DoorLimits::header_timeout`] to send each request's headers, from the moment
//!   the connection is open or the last answer was sent; past it the connection is closed
//!   (hyper's `header_read_timeout`, which also ends a keep-alive connection left idle that
//!   long). A slow client that never finishes its headers holds a connection that long at most;
//! - at most [`DoorLimits::max_connections`] connections are open at once. The count is held by
//!   the socket itself ([`Counted`]), so a connection upgraded to a WebSocket counts until the
//!   socket closes. Past the cap the listener stops accepting: new clients wait in the
//!   operating system's queue until a connection closes, instead of being refused, and a
//!   warning says so (at most once a minute);
//! - HTTP/1.1 only: no browser speaks HTTP/2 without TLS, which picogent does not terminate, and
//!   the version sniffing of an HTTP/1-or-2 server waits for its first bytes without a deadline;
//! - at shutdown the listener stops accepting, every connection finishes the answer it is
//!   sending (live streams end on their own shutdown signal) and then closes.

use std::io;
use std::pin::{Pin, pin};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tokio_util::sync::CancellationToken;

/// The limits of one listener.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DoorLimits {
    /// How long a client may take to send a request's headers (and how long a keep-alive
    /// connection may stay idle).
    pub header_timeout: Duration,
    /// Connections open at once; past it, new ones wait to be accepted.
    pub max_connections: usize,
}

impl DoorLimits {
    /// `http.header_timeout_ms`'s default, and the board's.
    pub const DEFAULT_HEADER_TIMEOUT_MS: u64 = 10_000;
    /// `http.max_connections`'s default, and the board's.
    pub const DEFAULT_MAX_CONNECTIONS: usize = 512;
}

impl Default for DoorLimits {
    fn default() -> Self {
        DoorLimits {
            header_timeout: Duration::from_millis(Self::DEFAULT_HEADER_TIMEOUT_MS),
            max_connections: Self::DEFAULT_MAX_CONNECTIONS,
        }
    }
}

/// Serves `router` on `listener` within `limits` until `shutdown`, then waits for the open
/// connections to finish (see the module's invariants). `name` says which listener in the log.
pub async fn serve(
    listener: TcpListener,
    router: axum::Router,
    limits: DoorLimits,
    shutdown: CancellationToken,
    name: &'static str,
) {
    let open = Arc::new(Semaphore::new(limits.max_connections.max(1)));
    // Every connection's task holds a receiver; the sender sees them all dropped at the end.
    let (all_closed, connection_open) = watch::channel(());
    let mut last_full_warning: Option<tokio::time::Instant> = None;
    loop {
        if open.available_permits() == 0 && last_full_warning.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
            tracing::warn!(
                listener = name,
                max_connections = limits.max_connections,
                "every connection the listener allows is open: new clients wait until one closes (said at most once \
                 a minute)"
            );
            last_full_warning = Some(tokio::time::Instant::now());
        }
        let permit = tokio::select! {
            permit = open.clone().acquire_owned() => match permit {
                Ok(permit) => permit,
                Err(_) => break, // never closed
            },
            _ = shutdown.cancelled() => break,
        };
        let stream = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok((stream, _)) => stream,
                Err(error) => {
                    accept_failed(name, error).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let io = TokioIo::new(Counted { stream, _permit: permit });
        let service = TowerToHyperService::new(router.clone());
        let (shutdown, connection_open) = (shutdown.clone(), connection_open.clone());
        tokio::spawn(async move {
            let mut builder = hyper::server::conn::http1::Builder::new();
            builder.timer(TokioTimer::new()).header_read_timeout(limits.header_timeout);
            let mut connection = pin!(builder.serve_connection(io, service).with_upgrades());
            let served = tokio::select! {
                served = connection.as_mut() => served,
                _ = shutdown.cancelled() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(error) = served {
                // A client that went away or took too long with its headers: its own business.
                tracing::debug!(listener = name, %error, "connection ended with an error");
            }
            drop(connection_open);
        });
    }
    drop(listener);
    drop(connection_open);
    all_closed.closed().await;
}

/// An accept that failed: a connection that was reset before it was accepted is nothing; running
/// out of file descriptors or memory is waited out for a second, as hyper's and axum's loops do.
async fn accept_failed(name: &'static str, error: io::Error) {
    use io::ErrorKind::{ConnectionAborted, ConnectionRefused, ConnectionReset};
    if matches!(error.kind(), ConnectionAborted | ConnectionRefused | ConnectionReset) {
        return;
    }
    tracing::error!(listener = name, %error, "cannot accept a connection; trying again in a second");
    tokio::time::sleep(Duration::from_secs(1)).await;
}

/// A socket that holds its place in the listener's count for as long as it is open, also after
/// hyper has handed it to a WebSocket.
struct Counted {
    stream: TcpStream,
    _permit: OwnedSemaphorePermit,
}

impl AsyncRead for Counted {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Counted {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    async fn start(limits: DoorLimits) -> (std::net::SocketAddr, CancellationToken, tokio::task::JoinHandle<()>) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let router = axum::Router::new().route("/", axum::routing::get(|| async { "ok" }));
        let shutdown = CancellationToken::new();
        let served = tokio::spawn(serve(listener, router, limits, shutdown.clone(), "test"));
        (addr, shutdown, served)
    }

    async fn get(addr: std::net::SocketAddr) -> String {
        let mut stream = TcpStream::connect(addr).await.unwrap();
        stream.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.unwrap();
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await.unwrap();
        answer
    }

    /// Reads until the server closes the connection; what it sent before (nothing, or a 408).
    async fn until_closed(stream: &mut TcpStream) -> Vec<u8> {
        let mut seen = Vec::new();
        let mut buf = [0u8; 512];
        loop {
            match stream.read(&mut buf).await {
                Ok(0) | Err(_) => return seen,
                Ok(n) => seen.extend_from_slice(&buf[..n]),
            }
        }
    }

    #[tokio::test]
    async fn a_client_that_never_finishes_its_headers_is_dropped_and_others_are_served() {
        let limits = DoorLimits { header_timeout: Duration::from_millis(200), max_connections: 16 };
        let (addr, shutdown, served) = start(limits).await;
        let mut slow = TcpStream::connect(addr).await.unwrap();
        slow.write_all(b"GET / HTTP/1.1\r\nHost: local").await.unwrap();
        assert!(get(addr).await.starts_with("HTTP/1.1 200"), "served while a slow client waits");
        let seen = until_closed(&mut slow).await;
        assert!(!String::from_utf8_lossy(&seen).contains("200"), "the slow client got no answer");
        shutdown.cancel();
        served.await.unwrap();
    }

    #[tokio::test]
    async fn past_the_cap_a_client_waits_until_a_connection_closes() {
        let limits = DoorLimits { header_timeout: Duration::from_secs(30), max_connections: 1 };
        let (addr, shutdown, served) = start(limits).await;
        let mut holder = TcpStream::connect(addr).await.unwrap();
        // The holder's connection is accepted (it takes the one place) once it is answered.
        holder.write_all(b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n").await.unwrap();
        let mut buf = [0u8; 256];
        let n = holder.read(&mut buf).await.unwrap();
        assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
        // A second client is connected by the system but not served while the holder stays.
        let waiting = tokio::spawn(get(addr));
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished());
        drop(holder);
        assert!(waiting.await.unwrap().starts_with("HTTP/1.1 200"), "served once the place is free");
        shutdown.cancel();
        served.await.unwrap();
    }
}
