//! The fault harness: a loopback proxy between the agent and the board that injects faults on a
//! seeded random schedule, plus the means to kill and restart the board and the agent.
//!
//! The proxy speaks just enough HTTP/1.1 to tell a REST call from a WebSocket upgrade:
//! - a REST call is answered `500`/`503`/`429` (with `Retry-After`) without reaching the board,
//!   reset before it reaches the board, reset after the board acted on it (the answer is lost, so
//!   only the client's idempotency key keeps a retry from doing the work twice), held past the
//!   client's timeout, or passed through. Every answer closes its connection, so each call
//!   meets a fault of its own. Apart from the random schedule, a test may hold the calls of one
//!   method and path before they reach the board (`hold`), to see the agent midway through a
//!   series of writes, then let them on or drop them (`release`).
//! - a WebSocket upgrade is relayed byte for byte; frames from the board are parsed (server
//!   frames are not masked), and a text frame may be delayed, duplicated, held back and sent
//!   after the next one (reordered), or the whole connection dropped at that frame.
//!
//! Faults are counted by kind, so a test can print what it survived and insist that each kind
//! happened. The schedule is drawn from one seeded generator; which request meets which draw
//! still depends on timing, so a seed reproduces the mix of faults, not the exact interleaving.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use picogent::board::{BoardHandle, BoardOptions, Retention};

/// One kind of injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum FaultKind {
    /// A REST call answered 500 without reaching the board.
    Http500,
    /// A REST call answered 503 without reaching the board.
    Http503,
    /// A REST call answered 429 with `Retry-After`.
    Http429,
    /// A REST call whose answer was held past the client's timeout (the board did act on it).
    Timeout,
    /// A REST call reset before it reached the board.
    ResetBeforeBoard,
    /// A REST call reset after the board acted on it: the answer is lost.
    ResetAfterBoard,
    /// A WebSocket connection dropped.
    WsDrop,
    /// A WebSocket text frame delayed.
    WsDelay,
    /// A WebSocket text frame sent twice.
    WsDuplicate,
    /// A WebSocket text frame sent after the one that followed it.
    WsReorder,
}

/// How often each fault happens, as a probability per REST call or per WebSocket text frame.
#[derive(Debug, Clone)]
pub struct FaultRates {
    pub seed: u64,
    pub http_500: f64,
    pub http_503: f64,
    pub http_429: f64,
    /// The `Retry-After` of injected 429s and 503s, in whole seconds.
    pub retry_after_secs: u64,
    pub timeout: f64,
    /// How long a timed-out answer is held; longer than the client's timeout.
    pub timeout_hold: Duration,
    pub reset_before_board: f64,
    pub reset_after_board: f64,
    pub ws_drop: f64,
    pub ws_delay: f64,
    /// The longest delay given to a delayed frame.
    pub ws_max_delay: Duration,
    pub ws_duplicate: f64,
    pub ws_reorder: f64,
}

impl FaultRates {
    /// No faults at all.
    pub fn none(seed: u64) -> FaultRates {
        FaultRates {
            seed,
            http_500: 0.0,
            http_503: 0.0,
            http_429: 0.0,
            retry_after_secs: 0,
            timeout: 0.0,
            timeout_hold: Duration::from_secs(3),
            reset_before_board: 0.0,
            reset_after_board: 0.0,
            ws_drop: 0.0,
            ws_delay: 0.0,
            ws_max_delay: Duration::from_millis(200),
            ws_duplicate: 0.0,
            ws_reorder: 0.0,
        }
    }
}

/// What the proxy does with one REST call.
enum RestFault {
    Pass,
    Answer { kind: FaultKind, status: u16, retry_after: Option<u64> },
    Hold,
    ResetBefore,
    ResetAfter,
}

/// What the proxy does with one text frame from the board.
enum FrameFault {
    Pass,
    Drop,
    Delay(Duration),
    Duplicate,
    Reorder,
}

struct Shared {
    upstream: SocketAddr,
    rates: FaultRates,
    rng: Mutex<StdRng>,
    enabled: AtomicBool,
    counts: Mutex<BTreeMap<FaultKind, u64>>,
    rest_calls: Mutex<u64>,
    frames: Mutex<u64>,
    /// REST calls held before they reach the board ([`FaultHarness::hold`]), and how many were.
    hold: Mutex<Option<HoldRule>>,
    held: AtomicUsize,
    /// `None` while calls are held; then what becomes of them.
    release: watch::Sender<Option<Release>>,
}

/// Which REST calls are held: `method path` (the path without its query), after the first
/// `pass` of them.
struct HoldRule {
    method: String,
    path: String,
    pass: usize,
    matched: usize,
}

/// What becomes of the calls held when the holding ends ([`FaultHarness::release`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Release {
    /// They go on to the board, which acts on them; their answers go back to whoever is still
    /// there to read them.
    Forward,
    /// They never reach the board: their connections are reset.
    Drop,
}

impl Shared {
    fn count(&self, kind: FaultKind) {
        *self.counts.lock().unwrap().entry(kind).or_default() += 1;
    }

    /// Draws `true` with probability `rate` while faults are on.
    fn draw(&self, rng: &mut StdRng, rate: f64) -> bool {
        rate > 0.0 && rng.random_bool(rate.min(1.0))
    }

    fn rest_fault(&self) -> RestFault {
        *self.rest_calls.lock().unwrap() += 1;
        if !self.enabled.load(Ordering::SeqCst) {
            return RestFault::Pass;
        }
        let rates = &self.rates;
        let mut rng = self.rng.lock().unwrap();
        let retry_after = Some(rates.retry_after_secs);
        let fault = if self.draw(&mut rng, rates.http_500) {
            RestFault::Answer { kind: FaultKind::Http500, status: 500, retry_after: None }
        } else if self.draw(&mut rng, rates.http_503) {
            RestFault::Answer { kind: FaultKind::Http503, status: 503, retry_after }
        } else if self.draw(&mut rng, rates.http_429) {
            RestFault::Answer { kind: FaultKind::Http429, status: 429, retry_after }
        } else if self.draw(&mut rng, rates.timeout) {
            RestFault::Hold
        } else if self.draw(&mut rng, rates.reset_before_board) {
            RestFault::ResetBefore
        } else if self.draw(&mut rng, rates.reset_after_board) {
            RestFault::ResetAfter
        } else {
            RestFault::Pass
        };
        drop(rng);
        match &fault {
            RestFault::Pass => {}
            RestFault::Answer { kind, .. } => self.count(*kind),
            RestFault::Hold => self.count(FaultKind::Timeout),
            RestFault::ResetBefore => self.count(FaultKind::ResetBeforeBoard),
            RestFault::ResetAfter => self.count(FaultKind::ResetAfterBoard),
        }
        fault
    }

    /// Holds a call matching the hold rule until the holding ends, and says what becomes of it;
    /// `None` for a call not held.
    async fn held(&self, request_line: &str) -> Option<Release> {
        let mut parts = request_line.split(' ');
        let (method, target) = (parts.next()?, parts.next()?);
        let path = target.split('?').next().unwrap_or(target);
        let hold = {
            let mut rule = self.hold.lock().unwrap();
            match rule.as_mut() {
                Some(rule) if rule.method == method && rule.path == path => {
                    rule.matched += 1;
                    rule.matched > rule.pass
                }
                _ => false,
            }
        };
        if !hold {
            return None;
        }
        let mut release = self.release.subscribe();
        self.held.fetch_add(1, Ordering::SeqCst);
        loop {
            if let Some(release) = *release.borrow_and_update() {
                return Some(release);
            }
            if release.changed().await.is_err() {
                return Some(Release::Drop);
            }
        }
    }

    fn frame_fault(&self) -> FrameFault {
        *self.frames.lock().unwrap() += 1;
        if !self.enabled.load(Ordering::SeqCst) {
            return FrameFault::Pass;
        }
        let rates = &self.rates;
        let mut rng = self.rng.lock().unwrap();
        let fault = if self.draw(&mut rng, rates.ws_drop) {
            FrameFault::Drop
        } else if self.draw(&mut rng, rates.ws_delay) {
            let most = rates.ws_max_delay.as_millis().max(1) as u64;
            FrameFault::Delay(Duration::from_millis(rng.random_range(1..=most)))
        } else if self.draw(&mut rng, rates.ws_duplicate) {
            FrameFault::Duplicate
        } else if self.draw(&mut rng, rates.ws_reorder) {
            FrameFault::Reorder
        } else {
            FrameFault::Pass
        };
        drop(rng);
        match &fault {
            FrameFault::Pass => {}
            FrameFault::Drop => self.count(FaultKind::WsDrop),
            FrameFault::Delay(_) => self.count(FaultKind::WsDelay),
            FrameFault::Duplicate => self.count(FaultKind::WsDuplicate),
            FrameFault::Reorder => self.count(FaultKind::WsReorder),
        }
        fault
    }
}

/// The proxy. Dropping it stops it (open connections included).
pub struct FaultHarness {
    addr: SocketAddr,
    shared: Arc<Shared>,
    stop: CancellationToken,
}

impl FaultHarness {
    /// Starts a proxy on a free loopback port in front of `upstream`, with faults on.
    pub async fn start(upstream: SocketAddr, rates: FaultRates) -> FaultHarness {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let shared = Arc::new(Shared {
            upstream,
            rng: Mutex::new(StdRng::seed_from_u64(rates.seed)),
            rates,
            enabled: AtomicBool::new(true),
            counts: Mutex::new(BTreeMap::new()),
            rest_calls: Mutex::new(0),
            frames: Mutex::new(0),
            hold: Mutex::new(None),
            held: AtomicUsize::new(0),
            release: watch::channel(None).0,
        });
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
                        _ = handle(client, shared) => {}
                    }
                });
            }
        });
        FaultHarness { addr, shared, stop }
    }

    /// The base URL to give the agent instead of the board's.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Turns fault injection on or off (connections keep flowing either way).
    pub fn set_enabled(&self, enabled: bool) {
        self.shared.enabled.store(enabled, Ordering::SeqCst);
    }

    /// Injected faults by kind.
    pub fn counts(&self) -> BTreeMap<FaultKind, u64> {
        self.shared.counts.lock().unwrap().clone()
    }

    pub fn count(&self, kind: FaultKind) -> u64 {
        self.counts().get(&kind).copied().unwrap_or(0)
    }

    /// REST calls and WebSocket text frames seen so far.
    pub fn traffic(&self) -> (u64, u64) {
        (*self.shared.rest_calls.lock().unwrap(), *self.shared.frames.lock().unwrap())
    }

    /// Holds the REST calls `method path` (the path without its query) before they reach the
    /// board, every one after the first `pass` of them, until [`FaultHarness::release`]: a test
    /// sees the agent midway through a series of writes and can kill it there.
    pub fn hold(&self, method: &str, path: &str, pass: usize) {
        let rule = HoldRule { method: method.to_string(), path: path.to_string(), pass, matched: 0 };
        self.shared.release.send_replace(None);
        *self.shared.hold.lock().unwrap() = Some(rule);
    }

    /// How many calls have been held so far.
    pub fn held(&self) -> usize {
        self.shared.held.load(Ordering::SeqCst)
    }

    /// Ends the holding: the calls held go on to the board or are dropped, as `release` says, and
    /// later calls pass.
    pub fn release(&self, release: Release) {
        *self.shared.hold.lock().unwrap() = None;
        self.shared.release.send_replace(Some(release));
    }
}

impl Drop for FaultHarness {
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

/// Reads up to the end of the request head; returns the bytes read (head and any body bytes
/// that came with it) and where the head ends.
async fn read_head(stream: &mut TcpStream) -> Option<(Vec<u8>, usize)> {
    let mut buffer = Vec::new();
    loop {
        if let Some(index) = buffer.windows(4).position(|w| w == b"\r\n\r\n") {
            return Some((buffer, index + 4));
        }
        if buffer.len() > 64 * 1024 {
            return None;
        }
        let mut chunk = [0u8; 8192];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        buffer.extend_from_slice(&chunk[..n]);
    }
}

async fn handle(mut client: TcpStream, shared: Arc<Shared>) {
    let Some((buffer, head_end)) = read_head(&mut client).await else { return };
    let head = String::from_utf8_lossy(&buffer[..head_end]).to_ascii_lowercase();
    if head.contains("\r\nupgrade: websocket") {
        relay_websocket(client, buffer, shared).await;
    } else {
        relay_rest(client, buffer, head_end, shared).await;
    }
}

/// A TCP reset rather than an orderly close: the peer sees "connection reset".
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn relay_rest(mut client: TcpStream, buffer: Vec<u8>, head_end: usize, shared: Arc<Shared>) {
    let head = String::from_utf8_lossy(&buffer[..head_end]).into_owned();
    let mut lines = head.split("\r\n");
    let Some(request_line) = lines.next() else { return };
    let mut content_length = 0usize;
    let mut forwarded = format!("{request_line}\r\n");
    for line in lines.filter(|l| !l.is_empty()) {
        let Some((name, value)) = line.split_once(':') else { return };
        match name.trim().to_ascii_lowercase().as_str() {
            "content-length" => content_length = value.trim().parse().unwrap_or(0),
            "connection" | "keep-alive" => continue,
            _ => {}
        }
        forwarded.push_str(line);
        forwarded.push_str("\r\n");
    }
    forwarded.push_str("connection: close\r\n\r\n");
    let mut body = buffer[head_end..].to_vec();
    while body.len() < content_length {
        let mut chunk = vec![0u8; (content_length - body.len()).min(65536)];
        match client.read(&mut chunk).await {
            Ok(0) | Err(_) => return,
            Ok(n) => body.extend_from_slice(&chunk[..n]),
        }
    }
    let mut request = forwarded.into_bytes();
    request.extend_from_slice(&body);

    if let Some(release) = shared.held(request_line).await {
        match release {
            // The board acts on it; whoever sent it may be gone by now.
            Release::Forward => {
                if let Some(answer) = forward(shared.upstream, &request).await {
                    let _ = client.write_all(&answer).await;
                }
                let _ = client.shutdown().await;
            }
            Release::Drop => reset(client),
        }
        return;
    }
    match shared.rest_fault() {
        RestFault::Pass => {
            if let Some(answer) = forward(shared.upstream, &request).await {
                let _ = client.write_all(&answer).await;
            }
        }
        RestFault::Answer { status, retry_after, .. } => {
            let _ = client.write_all(&made_up_answer(status, retry_after)).await;
        }
        RestFault::Hold => {
            if let Some(answer) = forward(shared.upstream, &request).await {
                tokio::time::sleep(shared.rates.timeout_hold).await;
                let _ = client.write_all(&answer).await;
            }
        }
        RestFault::ResetBefore => return reset(client),
        RestFault::ResetAfter => {
            let _ = forward(shared.upstream, &request).await;
            return reset(client);
        }
    }
    let _ = client.shutdown().await;
}

/// Sends the request upstream and reads the whole answer (the board closes after it). An
/// unreachable board (it is restarting) is a reset, as a real proxy in front of it would give.
async fn forward(upstream: SocketAddr, request: &[u8]) -> Option<Vec<u8>> {
    let mut server = TcpStream::connect(upstream).await.ok()?;
    server.write_all(request).await.ok()?;
    let mut answer = Vec::new();
    server.read_to_end(&mut answer).await.ok()?;
    Some(answer)
}

fn made_up_answer(status: u16, retry_after: Option<u64>) -> Vec<u8> {
    let reason = match status {
        429 => "Too Many Requests",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Injected",
    };
    let body = format!(r#"{{"error":{{"code":"injected","message":"fault harness answered {status}"}}}}"#);
    let retry_after = retry_after.map(|value| format!("retry-after: {value}\r\n")).unwrap_or_default();
    format!(
        "HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n{retry_after}content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// Relays a WebSocket: the handshake and everything from the client verbatim; the board's
/// frames one by one, with faults.
async fn relay_websocket(mut client: TcpStream, handshake: Vec<u8>, shared: Arc<Shared>) {
    let Ok(mut server) = TcpStream::connect(shared.upstream).await else { return reset(client) };
    if server.write_all(&handshake).await.is_err() {
        return reset(client);
    }
    // The board's handshake answer, relayed as is (a 401 ends the connection after it).
    let Some((answer, _)) = read_head(&mut server).await else { return reset(client) };
    if client.write_all(&answer).await.is_err() {
        return;
    }
    if !answer.starts_with(b"HTTP/1.1 101") {
        let mut rest = Vec::new();
        let _ = server.read_to_end(&mut rest).await;
        let _ = client.write_all(&rest).await;
        return;
    }
    let (mut client_read, mut client_write) = client.into_split();
    let (mut server_read, mut server_write) = server.into_split();
    let upstream = async {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    };
    let downstream = async {
        // Bytes of the board's answer already read past the handshake.
        let mut pending: Vec<u8> = Vec::new();
        let mut held: Option<Vec<u8>> = None;
        loop {
            let frame = match held {
                // A held frame goes out after the next one, or on its own when the board is
                // quiet for a moment, so a reorder never turns into a loss.
                Some(_) => {
                    match tokio::time::timeout(Duration::from_millis(300), read_frame(&mut server_read, &mut pending))
                        .await
                    {
                        Ok(frame) => frame,
                        Err(_) => {
                            let earlier = held.take().unwrap_or_default();
                            if client_write.write_all(&earlier).await.is_err() {
                                return;
                            }
                            continue;
                        }
                    }
                }
                None => read_frame(&mut server_read, &mut pending).await,
            };
            let Some(frame) = frame else { return };
            let is_text = frame.first().is_some_and(|byte| byte & 0x8f == 0x81);
            let fault = if is_text { shared.frame_fault() } else { FrameFault::Pass };
            let mut out = Vec::new();
            match fault {
                FrameFault::Pass => out.extend_from_slice(&frame),
                FrameFault::Drop => return,
                FrameFault::Delay(delay) => {
                    tokio::time::sleep(delay).await;
                    out.extend_from_slice(&frame);
                }
                FrameFault::Duplicate => {
                    out.extend_from_slice(&frame);
                    out.extend_from_slice(&frame);
                }
                FrameFault::Reorder if held.is_none() => {
                    held = Some(frame);
                    continue;
                }
                FrameFault::Reorder => out.extend_from_slice(&frame),
            }
            if let Some(earlier) = held.take() {
                out.extend_from_slice(&earlier);
            }
            if client_write.write_all(&out).await.is_err() {
                return;
            }
        }
    };
    // Either direction ending ends both: the connection is gone.
    tokio::select! {
        _ = upstream => {}
        _ = downstream => {}
    }
}

/// Reads one whole WebSocket frame (header and payload) from the board.
async fn read_frame(stream: &mut tokio::net::tcp::OwnedReadHalf, pending: &mut Vec<u8>) -> Option<Vec<u8>> {
    loop {
        if let Some(length) = frame_length(pending)
            && pending.len() >= length
        {
            let rest = pending.split_off(length);
            return Some(std::mem::replace(pending, rest));
        }
        let mut chunk = [0u8; 16384];
        let n = stream.read(&mut chunk).await.ok()?;
        if n == 0 {
            return None;
        }
        pending.extend_from_slice(&chunk[..n]);
    }
}

/// The total length of the frame at the start of `bytes`, once its header is complete.
fn frame_length(bytes: &[u8]) -> Option<usize> {
    if bytes.len() < 2 {
        return None;
    }
    let masked = bytes[1] & 0x80 != 0;
    let (header, payload) = match bytes[1] & 0x7f {
        126 => (4, u16::from_be_bytes(bytes.get(2..4)?.try_into().ok()?) as usize),
        127 => (10, u64::from_be_bytes(bytes.get(2..10)?.try_into().ok()?) as usize),
        short => (2, short as usize),
    };
    Some(header + if masked { 4 } else { 0 } + payload)
}

/// The reference board in this process, restartable on the same port and database.
pub struct RestartableBoard {
    pub addr: SocketAddr,
    pub db: PathBuf,
    seed: PathBuf,
    retention: Retention,
    handle: Option<BoardHandle>,
    pub restarts: u32,
}

impl RestartableBoard {
    pub async fn start(db: &Path, seed: &Path) -> RestartableBoard {
        RestartableBoard::start_with_retention(db, seed, Retention::default()).await
    }

    /// A board that prunes its event log as `retention` says, before and after restarts.
    pub async fn start_with_retention(db: &Path, seed: &Path, retention: Retention) -> RestartableBoard {
        let options =
            BoardOptions { retention, ..BoardOptions::new("127.0.0.1:0".parse().unwrap(), db, Some(seed.into())) };
        let handle = picogent::board::start(options).await.unwrap();
        RestartableBoard {
            addr: handle.addr(),
            db: db.into(),
            seed: seed.into(),
            retention,
            handle: Some(handle),
            restarts: 0,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Stops the board (every connection drops) and starts it again on the same port and
    /// database after `down_for`.
    pub async fn restart(&mut self, down_for: Duration) {
        if let Some(handle) = self.handle.take() {
            handle.shutdown().await.unwrap();
        }
        tokio::time::sleep(down_for).await;
        // The port was just released; binding it again can race the kernel for a moment.
        let mut attempts = 0;
        let handle = loop {
            let options = BoardOptions {
                retention: self.retention,
                ..BoardOptions::new(self.addr, self.db.clone(), Some(self.seed.clone()))
            };
            match picogent::board::start(options).await {
                Ok(handle) => break handle,
                Err(error) if attempts < 50 => {
                    attempts += 1;
                    tracing::debug!(%error, "board restart: port not free yet");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                Err(error) => panic!("the board did not come back on {}: {error:#}", self.addr),
            }
        };
        self.handle = Some(handle);
        self.restarts += 1;
    }

    pub async fn shutdown(mut self) {
        if let Some(handle) = self.handle.take() {
            handle.shutdown().await.unwrap();
        }
    }
}

/// `picogent run --config PATH` as a child process, killable with SIGKILL and restartable.
pub struct AgentProcess {
    config: PathBuf,
    token: String,
    log: PathBuf,
    child: Option<Child>,
    pub restarts: u32,
}

impl AgentProcess {
    /// Starts the agent; its stderr (at `RUST_LOG=warn`) is appended to `log`.
    pub fn start(config: &Path, token: &str, log: &Path) -> AgentProcess {
        let mut agent =
            AgentProcess { config: config.into(), token: token.into(), log: log.into(), child: None, restarts: 0 };
        agent.spawn();
        agent
    }

    fn spawn(&mut self) {
        let log = std::fs::OpenOptions::new().create(true).append(true).open(&self.log).unwrap();
        let child = Command::new(env!("CARGO_BIN_EXE_picogent"))
            .args(["run", "--config"])
            .arg(&self.config)
            .env("TEAMBOARD_TOKEN", &self.token)
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .unwrap();
        self.child = Some(child);
    }

    /// SIGKILL, no grace: whatever the agent was doing is cut off mid-way.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
        self.restarts += 1;
    }

    /// SIGTERM, waits for the graceful exit, and starts it again (a rolling restart's step);
    /// returns how the old process exited.
    pub fn relaunch(&mut self) -> Option<std::process::ExitStatus> {
        let exit = self.terminate();
        self.spawn();
        self.restarts += 1;
        exit
    }

    /// The process id of the running agent.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// SIGTERM, then waits for the exit; returns how it exited.
    pub fn terminate(&mut self) -> Option<std::process::ExitStatus> {
        let mut child = self.child.take()?;
        let sent = Command::new("kill").args(["-TERM", &child.id().to_string()]).status();
        if !sent.is_ok_and(|status| status.success()) {
            let _ = child.kill();
        }
        child.wait().ok()
    }

    pub fn is_running(&mut self) -> bool {
        self.child.as_mut().is_some_and(|child| child.try_wait().ok().flatten().is_none())
    }
}

impl Drop for AgentProcess {
    fn drop(&mut self) {
        self.kill();
    }
}

/// An agent config as JSON for an agent `slug` against `tracker_url` and the model at
/// `model_url`, with fast retries; `extra` is merged on top (objects merge, other values replace).
pub fn agent_config_json(
    dir: &Path,
    tracker_url: &str,
    model_url: &str,
    slug: &str,
    extra: serde_json::Value,
) -> serde_json::Value {
    let mut config = serde_json::json!({
        "slug": slug,
        "name": slug,
        "tracker": {"url": tracker_url, "timeout_ms": 5000,
                    "retry": {"max_attempts": 6, "initial_delay_ms": 20, "max_delay_ms": 200, "max_elapsed_ms": 5000, "jitter": true}},
        "llm": {"base_url": model_url, "model": "offline-planner", "timeout_ms": 20000,
                "retry": {"max_attempts": 3, "initial_delay_ms": 20, "max_delay_ms": 200, "max_elapsed_ms": 5000, "jitter": false}},
        "state": {"path": dir.join(format!("{slug}.db"))},
        "http": {"listen": "127.0.0.1:0"},
        "prompts_dir": Path::new(env!("CARGO_MANIFEST_DIR")).join("prompts"),
        // A short beat: a fresh start waits two of them for another copy of the agent.
        "presence": {"heartbeat_ms": 250},
    });
    merge_json(&mut config, extra);
    config
}

pub fn merge_json(target: &mut serde_json::Value, extra: serde_json::Value) {
    match (target, extra) {
        (serde_json::Value::Object(target), serde_json::Value::Object(extra)) => {
            for (key, value) in extra {
                merge_json(target.entry(key).or_insert(serde_json::Value::Null), value);
            }
        }
        (target, extra) => *target = extra,
    }
}

/// The bearer token of the in-process agent's `/mcp` endpoint.
pub const AGENT_MCP_TOKEN: &str = "agent-mcp-secret-51c2";

/// The agent in this process, its token `tok-<slug>`, `/mcp` behind [`AGENT_MCP_TOKEN`], with a
/// short heartbeat.
pub async fn start_agent_in_process(config: serde_json::Value) -> picogent::runtime::AgentHandle {
    let config: picogent::config::Config = serde_json::from_value(config).unwrap();
    let token = format!("tok-{}", config.slug);
    let stream = picogent::transport::StreamOptions {
        heartbeat_interval: Duration::from_millis(300),
        initial_backoff: Duration::from_millis(50),
        max_backoff: Duration::from_millis(300),
        ..picogent::transport::StreamOptions::new("TEAMBOARD_TOKEN")
    };
    picogent::runtime::start(picogent::runtime::AgentOptions {
        config,
        tracker_token: picogent::secret::Secret::new(token),
        llm_api_key: None,
        mcp_token: Some(picogent::secret::Secret::new(AGENT_MCP_TOKEN)),
        ui_token: None,
        stream: Some(stream),
        serve_http: true,
        clock: None,
    })
    .await
    .unwrap()
}

/// Polls `check` until it returns `Some`, failing with `what` after `timeout`.
pub async fn eventually<T, F, Fut>(timeout: Duration, what: &str, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        if let Some(value) = check().await {
            return value;
        }
        assert!(std::time::Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
