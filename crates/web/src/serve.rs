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
//! - one peer (one IP address; loopback addresses count like any other, each on its own) holds
//!   at most [`DoorLimits::max_connections_per_peer`] of those connections: one more from it is
//!   closed as soon as it is accepted, so a client that opens connections and never finishes
//!   them cannot keep everyone else waiting in that queue. The count is held by the socket too;
//! - HTTP/1.1 only: no browser speaks HTTP/2 without TLS, which picogent does not terminate, and
//!   the version sniffing of an HTTP/1-or-2 server waits for its first bytes without a deadline;
//! - at shutdown the listener stops accepting, every connection finishes the answer it is
//!   sending (live streams end on their own shutdown signal) and then closes.

use std::collections::HashMap;
use std::io;
use std::net::IpAddr;
use std::pin::{Pin, pin};
use std::sync::{Arc, Mutex};
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
    /// The share of [`DoorLimits::max_connections`] one peer may hold: a quarter.
    pub const PEER_SHARE_DIVISOR: usize = 4;

    /// Connections one peer (one IP address) may hold open at once: a quarter of
    /// `max_connections`, at least 1 (128 of the default 512). Far more than a browser opens
    /// (six at a time, and the live streams), and it leaves three quarters to everyone else
    /// while one client floods. Behind a reverse proxy every client is the proxy's address:
    /// raise `max_connections` there, as the proxy's own connection limit allows.
    pub fn max_connections_per_peer(&self) -> usize {
        (self.max_connections / Self::PEER_SHARE_DIVISOR).max(1)
    }
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
    let peers = Arc::new(Peers::new(limits.max_connections_per_peer()));
    // Every connection's task holds a receiver; the sender sees them all dropped at the end.
    let (all_closed, connection_open) = watch::channel(());
    let mut last_full_warning: Option<tokio::time::Instant> = None;
    let mut last_peer_warning: Option<tokio::time::Instant> = None;
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
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(error) => {
                    accept_failed(name, error).await;
                    continue;
                }
            },
            _ = shutdown.cancelled() => break,
        };
        let Some(peer_slot) = peers.enter(peer.ip()) else {
            // Closed at once (the stream and the permit are dropped here): it holds nothing.
            if last_peer_warning.is_none_or(|at| at.elapsed() >= Duration::from_secs(60)) {
                tracing::warn!(
                    listener = name,
                    peer = %peer.ip(),
                    max_connections_per_peer = peers.cap,
                    "one peer holds every connection it may: more from it are closed at once (said at most once a \
                     minute)"
                );
                last_peer_warning = Some(tokio::time::Instant::now());
            }
            continue;
        };
        let io = TokioIo::new(Counted { stream, _peer: peer_slot, _permit: permit });
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

/// The connections open per peer address, for [`DoorLimits::max_connections_per_peer`]. Only
/// peers with a connection open have an entry, so it holds at most `max_connections` of them.
#[derive(Debug)]
struct Peers {
    cap: usize,
    open: Mutex<HashMap<IpAddr, usize>>,
}

impl Peers {
    fn new(cap: usize) -> Peers {
        Peers { cap, open: Mutex::new(HashMap::new()) }
    }

    /// A place for one more connection of `ip`, or `None` when it holds its cap already. An
    /// IPv4 address seen as IPv6 (`::ffff:a.b.c.d`) counts as itself.
    fn enter(self: &Arc<Self>, ip: IpAddr) -> Option<PeerSlot> {
        let ip = ip.to_canonical();
        let mut open = self.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let count = open.entry(ip).or_insert(0);
        if *count >= self.cap {
            return None;
        }
        *count += 1;
        Some(PeerSlot { peers: Arc::clone(self), ip })
    }
}

/// One connection's place among its peer's; given back when dropped.
#[derive(Debug)]
struct PeerSlot {
    peers: Arc<Peers>,
    ip: IpAddr,
}

impl Drop for PeerSlot {
    fn drop(&mut self) {
        let mut open = self.peers.open.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(count) = open.get_mut(&self.ip) {
            *count -= 1;
            if *count == 0 {
                open.remove(&self.ip);
            }
        }
    }
}

/// A socket that holds its place in the listener's count, and in its peer's, for as long as it
/// is open, also after hyper has handed it to a WebSocket.
struct Counted {
    stream: TcpStream,
    /// Before `_permit`, so it is given back first: once the accept loop may take another
    /// connection, this one no longer counts for its peer.
    _peer: PeerSlot,
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

    /// A connection from `from` (a loopback address of its own) to `addr`.
    async fn connect_from(from: std::net::Ipv4Addr, addr: std::net::SocketAddr) -> TcpStream {
        let socket = tokio::net::TcpSocket::new_v4().unwrap();
        socket.bind(std::net::SocketAddr::from((from, 0))).unwrap();
        socket.connect(addr).await.unwrap()
    }

    /// One peer (127.0.0.2) opens twenty connections and never finishes their headers, on a
    /// listener of eight: it keeps its share (two), the rest are closed at once, and another
    /// peer (127.0.0.1) is answered without waiting for the header deadline (30 s).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn one_peer_holding_half_open_connections_cannot_keep_another_waiting() {
        let limits = DoorLimits { header_timeout: Duration::from_secs(30), max_connections: 8 };
        assert_eq!(limits.max_connections_per_peer(), 2);
        let (addr, shutdown, served) = start(limits).await;
        let flooder = std::net::Ipv4Addr::new(127, 0, 0, 2);
        let mut flood = Vec::new();
        for _ in 0..20 {
            let mut stream = connect_from(flooder, addr).await;
            // Half open: the head is never finished (a closed one fails this write: fine).
            let _ = stream.write_all(b"GET / HTTP/1.1\r\nHost: local").await;
            flood.push(stream);
        }
        let answer = tokio::time::timeout(Duration::from_secs(5), get(addr)).await;
        let answer = answer.expect("another peer is answered while one holds half-open connections");
        assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
        // Of the flood, all but its share were closed at once, unanswered.
        let mut closed = 0;
        for stream in &mut flood {
            // Those closed at once are closed by now; the share waits for its deadline.
            if let Ok(seen) = tokio::time::timeout(Duration::from_secs(1), until_closed(stream)).await {
                assert!(seen.is_empty(), "{}", String::from_utf8_lossy(&seen));
                closed += 1;
            }
        }
        assert_eq!(closed, 20 - limits.max_connections_per_peer(), "closed at once: all but the peer's share");
        shutdown.cancel();
        drop(flood);
        served.await.unwrap();
    }

    #[test]
    fn a_peer_is_its_address_whatever_its_form_and_its_places_come_back() {
        let peers = Arc::new(Peers::new(2));
        let v4: IpAddr = "127.0.0.2".parse().unwrap();
        let mapped: IpAddr = "::ffff:127.0.0.2".parse().unwrap();
        let other: IpAddr = "127.0.0.1".parse().unwrap();
        let first = peers.enter(v4).expect("a first place");
        let second = peers.enter(mapped).expect("a second place, the same peer");
        assert!(peers.enter(v4).is_none(), "its share is two");
        assert!(peers.enter(other).is_some(), "another peer has its own share");
        drop(first);
        let third = peers.enter(v4).expect("a place given back is taken again");
        drop((second, third));
        assert!(peers.open.lock().unwrap().is_empty(), "a peer with nothing open has no entry");
        assert_eq!(DoorLimits { max_connections: 3, ..DoorLimits::default() }.max_connections_per_peer(), 1);
        assert_eq!(DoorLimits::default().max_connections_per_peer(), 128);
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
