//! A loopback TCP proxy that can be cut: every byte is relayed both ways until [`CutProxy::cut`]
//! closes every connection and refuses new ones, as a network cut or a restart of the server
//! behind it would look to the client; [`CutProxy::restore`] lets connections through again.
//! Speaks no protocol, so it stands between picogent and PostgreSQL.
#![allow(unreachable_pub)] // `pub` is for the tests that include it, not an API

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

#[derive(Default)]
struct Shared {
    cut: AtomicBool,
    connections: Mutex<Vec<CancellationToken>>,
}

pub struct CutProxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl CutProxy {
    /// Starts a proxy on a free loopback port in front of `upstream`.
    pub async fn start(upstream: SocketAddr) -> CutProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let stop = CancellationToken::new();
        let (accepting, until) = (shared.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let (client, _) = tokio::select! {
                    _ = until.cancelled() => return,
                    accepted = listener.accept() => match accepted { Ok(accepted) => accepted, Err(_) => continue },
                };
                if accepting.cut.load(Ordering::SeqCst) {
                    drop(client);
                    continue;
                }
                let closed = until.child_token();
                accepting.connections.lock().unwrap().push(closed.clone());
                tokio::spawn(relay(client, upstream, closed));
            }
        });
        CutProxy { addr, shared, stop }
    }

    /// Closes every connection and refuses new ones until [`restore`](Self::restore).
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        for connection in self.shared.connections.lock().unwrap().drain(..) {
            connection.cancel();
        }
    }

    pub fn restore(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for CutProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

async fn relay(mut client: TcpStream, upstream: SocketAddr, closed: CancellationToken) {
    let Ok(mut server) = TcpStream::connect(upstream).await else { return };
    tokio::select! {
        _ = closed.cancelled() => {}
        _ = tokio::io::copy_bidirectional(&mut client, &mut server) => {}
    }
}
