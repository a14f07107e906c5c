//! A loopback HTTP/1.1 proxy that injects faults between a client and a real server.
//!
//! Each request takes the next [`Fault`] from a programmable queue (an empty queue passes
//! through), and every request is recorded, so a test can count what actually reached the
//! wire. Every answer closes its connection (`Connection: close`), so each request arrives on a
//! connection of its own and a fault never leaks into the next request. Meant to grow into the
//! project's general fault harness: faults are data, the proxy only interprets them.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// What the proxy does with one request.
#[derive(Debug, Clone, PartialEq)]
pub enum Fault {
    /// Forward the request and relay the answer.
    Pass,
    /// Answer this status without forwarding, with a `Retry-After` header when given.
    Answer { status: u16, retry_after: Option<String> },
    /// Close the connection without forwarding or answering.
    DropRequest,
    /// Forward the request (the server acts on it), then close without relaying the answer.
    DropAnswer,
    /// Forward the request, then hold the answer this long before relaying it (past a client's
    /// timeout, the client has given up by then).
    DelayAnswer(Duration),
}

/// One request as the proxy saw it.
#[derive(Debug, Clone, PartialEq)]
pub struct SeenRequest {
    pub method: String,
    /// The path with its query string.
    pub target: String,
    pub idempotency_key: Option<String>,
    pub fault: Fault,
}

#[derive(Default)]
struct Shared {
    faults: Mutex<VecDeque<Fault>>,
    seen: Mutex<Vec<SeenRequest>>,
}

pub struct FaultProxy {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl FaultProxy {
    /// Starts a proxy on a free loopback port in front of `upstream`.
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared::default());
        let stop = CancellationToken::new();
        let (accept_shared, accept_stop) = (shared.clone(), stop.clone());
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    _ = accept_stop.cancelled() => break,
                    accepted = listener.accept() => accepted,
                };
                let Ok((client, _)) = accepted else { continue };
                let (shared, stop) = (accept_shared.clone(), accept_stop.clone());
                tokio::spawn(async move {
                    tokio::select! {
                        _ = stop.cancelled() => {}
                        _ = handle(client, upstream, shared) => {}
                    }
                });
            }
        });
        FaultProxy { addr, shared, stop }
    }

    /// The base URL to give a client instead of the server's.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Queues faults for the next requests, in order.
    pub fn push(&self, faults: impl IntoIterator<Item = Fault>) {
        self.shared.faults.lock().unwrap().extend(faults);
    }

    pub fn seen(&self) -> Vec<SeenRequest> {
        self.shared.seen.lock().unwrap().clone()
    }

    pub fn request_count(&self) -> usize {
        self.shared.seen.lock().unwrap().len()
    }

    /// Forgets the requests seen so far and any queued faults.
    pub fn reset(&self) {
        self.shared.seen.lock().unwrap().clear();
        self.shared.faults.lock().unwrap().clear();
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// A request read off the wire: its head (with `Connection: close` forced) and its body.
struct RawRequest {
    method: String,
    target: String,
    idempotency_key: Option<String>,
    bytes: Vec<u8>,
}

async fn read_request(client: &mut TcpStream) -> Option<RawRequest> {
    let mut buffer = Vec::new();
    let head_end = loop {
        if let Some(index) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            break index + 4;
        }
        let mut chunk = [0u8; 8192];
        let n = client.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    };
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let mut request_line = lines.next()?.split(' ');
    let (method, target) = (request_line.next()?.to_string(), request_line.next()?.to_string());
    let mut content_length = 0usize;
    let mut idempotency_key = None;
    let mut forwarded_head = format!("{method} {target} HTTP/1.1\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        let lower = name.trim().to_ascii_lowercase();
        match lower.as_str() {
            "content-length" => content_length = value.trim().parse().ok()?,
            "idempotency-key" => idempotency_key = Some(value.trim().to_string()),
            "connection" | "keep-alive" => continue,
            _ => {}
        }
        forwarded_head.push_str(line);
        forwarded_head.push_str("\r\n");
    }
    forwarded_head.push_str("connection: close\r\n\r\n");
    let mut body = buffer[head_end..].to_vec();
    while body.len() < content_length {
        let mut chunk = vec![0u8; (content_length - body.len()).min(65536)];
        let n = client.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        body.extend_from_slice(&chunk[..n]);
    }
    let mut bytes = forwarded_head.into_bytes();
    bytes.extend_from_slice(&body);
    Some(RawRequest { method, target, idempotency_key, bytes })
}

/// Sends the request upstream and reads the whole answer (the server closes after it).
async fn forward(upstream: SocketAddr, request: &RawRequest) -> Option<Vec<u8>> {
    let mut server = TcpStream::connect(upstream).await.ok()?;
    server.write_all(&request.bytes).await.ok()?;
    let mut answer = Vec::new();
    server.read_to_end(&mut answer).await.ok()?;
    Some(answer)
}

fn reason(status: u16) -> &'static str {
    match status {
        400 => "Bad Request",
        404 => "Not Found",
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        _ => "Injected",
    }
}

fn made_up_answer(status: u16, retry_after: Option<&str>) -> Vec<u8> {
    let body = format!(r#"{{"error":{{"code":"injected","message":"fault proxy answered {status}"}}}}"#);
    let retry_after = retry_after.map(|value| format!("retry-after: {value}\r\n")).unwrap_or_default();
    format!(
        "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\n{retry_after}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        reason(status),
        body.len()
    )
    .into_bytes()
}

async fn handle(mut client: TcpStream, upstream: SocketAddr, shared: Arc<Shared>) {
    let Some(request) = read_request(&mut client).await else { return };
    let fault = shared.faults.lock().unwrap().pop_front().unwrap_or(Fault::Pass);
    shared.seen.lock().unwrap().push(SeenRequest {
        method: request.method.clone(),
        target: request.target.clone(),
        idempotency_key: request.idempotency_key.clone(),
        fault: fault.clone(),
    });
    match fault {
        Fault::Pass => {
            if let Some(answer) = forward(upstream, &request).await {
                let _ = client.write_all(&answer).await;
            }
        }
        Fault::Answer { status, retry_after } => {
            let _ = client.write_all(&made_up_answer(status, retry_after.as_deref())).await;
        }
        Fault::DropRequest => {}
        Fault::DropAnswer => {
            let _ = forward(upstream, &request).await;
        }
        Fault::DelayAnswer(delay) => {
            if let Some(answer) = forward(upstream, &request).await {
                tokio::time::sleep(delay).await;
                let _ = client.write_all(&answer).await;
            }
        }
    }
    let _ = client.shutdown().await;
}
