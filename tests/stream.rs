//! The event stream against a fault injector: a tiny WebSocket server of this test's own on
//! 127.0.0.1:0 that refuses tokens, sends junk and oversized frames, or goes silent — faults the
//! reference board never produces on purpose. The stream against the real board is below.

use std::sync::Arc;
use std::sync::atomic::AtomicU64;
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use picogent::board::{self, BoardHandle, BoardOptions};
use picogent::config::TrackerConfig;
use picogent::retry::RetryConfig;
use picogent::secret::Secret;
use picogent::state::State;
use picogent::tracker::TrackerClient;
use picogent::tracker::model::{ClientFrame, CreateTask, Event, ReceivedEvent};
use picogent::transport::{self, LinkStatus, StartMode, StreamError, StreamItem, StreamOptions, StreamStart};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{mpsc, watch};
use tokio_tungstenite::WebSocketStream;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::handshake::server::{ErrorResponse, Request, Response};
use tokio_tungstenite::tungstenite::http::StatusCode;
use tokio_util::sync::CancellationToken;

/// Generous bound on how long anything may take before a test counts it as hung. Not a
/// performance assertion: nothing here should come near it.
const HANG: Duration = Duration::from_secs(10);

fn client_for(url: &str, token: &str) -> TrackerClient {
    let config = TrackerConfig {
        url: url.to_string(),
        api_prefix: "/api".to_string(),
        token_env: "TEAMBOARD_TOKEN".to_string(),
        timeout_ms: 5_000,
        retry: RetryConfig::default(),
    };
    TrackerClient::new(&config, Secret::new(token)).unwrap()
}

/// Short backoff for every test; a heartbeat long enough that a busy machine never trips it in
/// tests that are not about the heartbeat.
fn fast_options() -> StreamOptions {
    StreamOptions {
        heartbeat_interval: Duration::from_secs(3),
        initial_backoff: Duration::from_millis(20),
        max_backoff: Duration::from_millis(200),
        stable_after: Duration::from_secs(60),
        connect_timeout: Duration::from_secs(5),
        ..StreamOptions::new("TEAMBOARD_TOKEN")
    }
}

/// [`fast_options`] with a short heartbeat, for the tests about dead links.
fn heartbeat_options() -> StreamOptions {
    StreamOptions { heartbeat_interval: Duration::from_millis(300), ..fast_options() }
}

/// One accepted connection of the injector, with the `Authorization` header it came with.
struct Accepted {
    socket: WebSocketStream<TcpStream>,
    authorization: Option<String>,
}

/// The fault injector: accepts WebSocket connections on `/api/ws` and hands each to the test,
/// or refuses every handshake with `refuse_with`.
async fn injector(refuse_with: Option<StatusCode>) -> (String, mpsc::UnboundedReceiver<Accepted>) {
    let (url, receiver, _handshakes) = counting_injector(refuse_with).await;
    (url, receiver)
}

/// [`injector`], also counting the handshakes it has seen.
// The handshake callback's error type is tungstenite's own response; its size is not ours to pick.
#[allow(clippy::result_large_err)]
async fn counting_injector(
    refuse_with: Option<StatusCode>,
) -> (String, mpsc::UnboundedReceiver<Accepted>, Arc<std::sync::atomic::AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (sender, receiver) = mpsc::unbounded_channel();
    let handshakes = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let counter = handshakes.clone();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else { return };
            let sender = sender.clone();
            let counter = counter.clone();
            tokio::spawn(async move {
                let mut authorization = None;
                let callback = |request: &Request, response: Response| -> Result<Response, ErrorResponse> {
                    counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    authorization =
                        request.headers().get("authorization").and_then(|v| v.to_str().ok()).map(str::to_string);
                    match refuse_with {
                        Some(status) => {
                            let mut refusal = ErrorResponse::new(Some("refused".to_string()));
                            *refusal.status_mut() = status;
                            Err(refusal)
                        }
                        None => Ok(response),
                    }
                };
                let accepted = tokio_tungstenite::accept_hdr_async(tcp, callback).await;
                if let Ok(socket) = accepted {
                    let _ = sender.send(Accepted { socket, authorization });
                }
            });
        }
    });
    (url, receiver, handshakes)
}

async fn next_connection(connections: &mut mpsc::UnboundedReceiver<Accepted>) -> Accepted {
    tokio::time::timeout(HANG, connections.recv()).await.expect("no connection in time").expect("injector gone")
}

/// Reads client frames until the `resume`, returning its `after_seq`.
async fn read_resume(socket: &mut WebSocketStream<TcpStream>) -> u64 {
    loop {
        let message = tokio::time::timeout(HANG, socket.next()).await.expect("no resume in time").unwrap().unwrap();
        if let Message::Text(text) = message {
            match serde_json::from_str::<ClientFrame>(text.as_str()).unwrap() {
                ClientFrame::Resume { after_seq } => return after_seq,
                ClientFrame::Ping => {}
            }
        }
    }
}

async fn next_item(items: &mut mpsc::Receiver<StreamItem>) -> StreamItem {
    tokio::time::timeout(HANG, items.recv()).await.expect("no stream item in time").expect("stream ended")
}

/// Skips items until one matches, returning it.
async fn wait_for(items: &mut mpsc::Receiver<StreamItem>, wanted: impl Fn(&StreamItem) -> bool) -> StreamItem {
    loop {
        let item = next_item(items).await;
        if wanted(&item) {
            return item;
        }
    }
}

fn event_frame(id: &str, seq: u64) -> Message {
    let frame = serde_json::json!({
        "id": id, "seq": seq, "event": "message.new", "ts": "2026-11-30T10:00:00Z",
        "data": {"message": {"id": format!("m-{id}"), "author_slug": "alice", "content": "hello", "chat_id": "c1"}}
    });
    Message::text(frame.to_string())
}

fn event_id(item: &StreamItem) -> Option<(String, u64)> {
    match item {
        StreamItem::Event(event) => Some((event.id.clone(), event.seq)),
        StreamItem::Status(_) => None,
    }
}

#[tokio::test]
async fn a_refused_token_ends_the_stream_at_once_with_a_clear_error() {
    for status in [StatusCode::UNAUTHORIZED, StatusCode::FORBIDDEN] {
        let (url, mut connections) = injector(Some(status)).await;
        let client = client_for(&url, "tok-wrong");
        let cancel = CancellationToken::new();
        let (mut items, handle) = transport::spawn(fast_options(), &client, Arc::new(AtomicU64::new(0)), cancel);
        let outcome =
            tokio::time::timeout(HANG, handle).await.expect("a refused token must not retry forever").unwrap();
        let error = outcome.unwrap_err();
        assert!(
            matches!(error, StreamError::Unauthorized { status: code, .. } if code == status.as_u16()),
            "{error:?}"
        );
        let message = error.to_string();
        assert!(message.contains("TEAMBOARD_TOKEN"), "{message}");
        assert!(!message.contains("tok-wrong"), "{message}");
        assert_eq!(items.recv().await, None, "nothing connected, and the channel is closed");
        assert!(connections.try_recv().is_err(), "the handshake was refused, so no connection was accepted");
    }
}

#[tokio::test]
async fn an_unreachable_tracker_is_reported_and_retried_until_cancelled() {
    // A port that was just free and now has no listener: every connect is refused.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    drop(listener);
    let client = client_for(&url, "tok-picogent");
    let cancel = CancellationToken::new();
    let (mut items, handle) = transport::spawn(fast_options(), &client, Arc::new(AtomicU64::new(0)), cancel.clone());
    match next_item(&mut items).await {
        StreamItem::Status(LinkStatus::Disconnected { reason }) => {
            assert!(reason.contains("cannot connect"), "{reason}")
        }
        other => panic!("expected the failed connect to be reported, got {other:?}"),
    }
    assert!(!handle.is_finished(), "a refused connection is retried, not fatal");
    cancel.cancel();
    assert!(tokio::time::timeout(HANG, handle).await.unwrap().unwrap().is_ok());
    assert_eq!(items.recv().await, None);
}

#[tokio::test]
async fn an_https_tracker_gets_a_tls_handshake() {
    // The injector speaks plain WebSocket, so a TLS client hello fails there — which proves the
    // stream tried TLS for wss:// instead of refusing it as unsupported.
    let (url, _connections) = injector(None).await;
    let client = client_for(&url.replace("http://", "https://"), "tok-picogent");
    assert!(client.ws_url().starts_with("wss://"));
    let cancel = CancellationToken::new();
    let (mut items, handle) = transport::spawn(fast_options(), &client, Arc::new(AtomicU64::new(0)), cancel.clone());
    match next_item(&mut items).await {
        StreamItem::Status(LinkStatus::Disconnected { reason }) => {
            assert!(!reason.contains("not compiled"), "{reason}");
            assert!(reason.contains("TLS") || reason.contains("tls"), "{reason}");
        }
        other => panic!("expected the TLS handshake with a plain server to fail, got {other:?}"),
    }
    cancel.cancel();
    assert!(tokio::time::timeout(HANG, handle).await.unwrap().unwrap().is_ok());
}

#[tokio::test]
async fn a_tracker_answering_503_is_retried_with_one_report_for_the_outage() {
    let (url, _connections, handshakes) = counting_injector(Some(StatusCode::SERVICE_UNAVAILABLE)).await;
    let client = client_for(&url, "tok-picogent");
    let cancel = CancellationToken::new();
    let (mut items, handle) = transport::spawn(fast_options(), &client, Arc::new(AtomicU64::new(0)), cancel.clone());
    match next_item(&mut items).await {
        StreamItem::Status(LinkStatus::Disconnected { reason }) => assert!(reason.contains("503"), "{reason}"),
        other => panic!("expected the refused handshake to be reported, got {other:?}"),
    }
    // Poll (with a deadline) until the stream has tried several more times.
    let deadline = tokio::time::Instant::now() + HANG;
    while handshakes.load(std::sync::atomic::Ordering::SeqCst) < 4 {
        assert!(tokio::time::Instant::now() < deadline, "the stream stopped retrying");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    cancel.cancel();
    assert!(tokio::time::timeout(HANG, handle).await.unwrap().unwrap().is_ok());
    assert_eq!(items.recv().await, None, "one report for the whole outage, not one per attempt");
}

#[tokio::test]
async fn junk_is_skipped_and_an_oversized_frame_recycles_the_connection() {
    let (url, mut connections) = injector(None).await;
    let client = client_for(&url, "tok-picogent");
    let resume_point = Arc::new(AtomicU64::new(41));
    let (mut items, handle) = transport::spawn(fast_options(), &client, resume_point.clone(), CancellationToken::new());

    let mut first = next_connection(&mut connections).await;
    assert_eq!(first.authorization.as_deref(), Some("Bearer tok-picogent"));
    assert_eq!(read_resume(&mut first.socket).await, 41);
    assert_eq!(next_item(&mut items).await, StreamItem::Status(LinkStatus::Connected));
    for junk in [
        Message::text("this is not json"),
        Message::text(r#"{"id": "x", "seq": 1, "event": "task.exploded", "data": {}}"#),
        Message::text(r#"{"type": "mystery"}"#),
        Message::binary(vec![0u8, 159, 146, 150]),
        event_frame("e42", 42),
        Message::text(r#"{"type": "resumed", "last_seq": 42}"#),
        Message::text("x".repeat(2 * 1024 * 1024)),
    ] {
        first.socket.send(junk).await.unwrap();
    }
    let delivered = next_item(&mut items).await;
    assert_eq!(event_id(&delivered), Some(("e42".to_string(), 42)), "junk before it was skipped: {delivered:?}");
    assert!(
        matches!(&delivered, StreamItem::Event(ReceivedEvent { event: Event::MessageNew(data), .. }) if data.message.content == "hello")
    );
    // The stream began where the consumer's counter stood.
    let began = LinkStatus::Began { mode: StartMode::Resume, from_seq: 41, skipped: 0 };
    assert_eq!(next_item(&mut items).await, StreamItem::Status(began));
    assert_eq!(next_item(&mut items).await, StreamItem::Status(LinkStatus::CaughtUp { last_seq: 42 }));
    match next_item(&mut items).await {
        StreamItem::Status(LinkStatus::Disconnected { reason }) => assert!(reason.contains("limit"), "{reason}"),
        other => panic!("expected the oversized frame to recycle the link, got {other:?}"),
    }

    resume_point.store(42, std::sync::atomic::Ordering::SeqCst);
    let mut second = next_connection(&mut connections).await;
    assert_eq!(read_resume(&mut second.socket).await, 42, "the reconnect resumes from the current position");
    assert_eq!(next_item(&mut items).await, StreamItem::Status(LinkStatus::Connected));
    second.socket.send(event_frame("e43", 43)).await.unwrap();
    assert_eq!(event_id(&next_item(&mut items).await), Some(("e43".to_string(), 43)));
    assert!(!handle.is_finished());
}

#[tokio::test]
async fn a_silent_server_is_taken_for_dead_and_replaced() {
    let (url, mut connections) = injector(None).await;
    let client = client_for(&url, "tok-picogent");
    let options = heartbeat_options();
    // The clock starts before the stream exists, so it cannot start after the link went quiet.
    let started = tokio::time::Instant::now();
    let (mut items, _handle) =
        transport::spawn(options.clone(), &client, Arc::new(AtomicU64::new(0)), CancellationToken::new());

    // The first server reads the resume, then holds the socket open and never says a word.
    let mut silent = next_connection(&mut connections).await;
    read_resume(&mut silent.socket).await;
    assert_eq!(next_item(&mut items).await, StreamItem::Status(LinkStatus::Connected));
    match next_item(&mut items).await {
        StreamItem::Status(LinkStatus::Disconnected { reason }) => assert!(reason.contains("dead"), "{reason}"),
        other => panic!("expected the silent link to be declared dead, got {other:?}"),
    }
    // Declared dead no sooner than two heartbeats of silence.
    assert!(started.elapsed() >= options.heartbeat_interval * 2);

    // The replacement answers every ping: it stays up across many heartbeats.
    let mut lively = next_connection(&mut connections).await;
    read_resume(&mut lively.socket).await;
    lively.socket.send(Message::text(r#"{"type": "resumed", "last_seq": 0}"#)).await.unwrap();
    assert_eq!(next_item(&mut items).await, StreamItem::Status(LinkStatus::Connected));
    let began = LinkStatus::Began { mode: StartMode::Resume, from_seq: 0, skipped: 0 };
    assert_eq!(next_item(&mut items).await, StreamItem::Status(began));
    assert_eq!(next_item(&mut items).await, StreamItem::Status(LinkStatus::CaughtUp { last_seq: 0 }));
    let mut pongs = 0;
    while pongs < 8 {
        let message = tokio::time::timeout(HANG, lively.socket.next()).await.unwrap().unwrap().unwrap();
        if let Message::Text(text) = message
            && serde_json::from_str::<ClientFrame>(text.as_str()).unwrap() == ClientFrame::Ping
        {
            lively.socket.send(Message::text(r#"{"type": "pong"}"#)).await.unwrap();
            pongs += 1;
        }
    }
    assert!(items.try_recv().is_err(), "a link answering its heartbeats is not recycled");
    drop(silent);
}

#[tokio::test]
async fn a_closed_connection_reconnects_and_resumes_from_the_state_database() {
    let dir = tempfile::tempdir().unwrap();
    let state = State::open(&dir.path().join("state.db")).await.unwrap();
    let (url, mut connections) = injector(None).await;
    let client = client_for(&url, "tok-picogent");
    let cancel = CancellationToken::new();
    // From seq 0: a fresh state file would otherwise begin at the head and pass no past event on.
    let options = StreamOptions { start: StreamStart::FromStart, ..fast_options() };
    let (mut items, handle) = transport::spawn(options, &client, state.clone(), cancel.clone());

    let mut first = next_connection(&mut connections).await;
    assert_eq!(read_resume(&mut first.socket).await, 0);
    first.socket.send(event_frame("e1", 1)).await.unwrap();
    first.socket.send(event_frame("e2", 2)).await.unwrap();
    for expected in ["e1", "e2"] {
        let item = wait_for(&mut items, |item| event_id(item).is_some()).await;
        let (id, seq) = event_id(&item).unwrap();
        assert_eq!(id, expected);
        assert!(state.record_event(&id, seq, "message.new").await.unwrap());
    }
    first.socket.close(None).await.unwrap();
    drop(first);

    let mut second = next_connection(&mut connections).await;
    assert_eq!(read_resume(&mut second.socket).await, 2, "resume after the last seq recorded in the state");

    cancel.cancel();
    let outcome = tokio::time::timeout(HANG, handle).await.expect("cancel ends the stream").unwrap();
    assert!(outcome.is_ok());
    // The stream said goodbye: the server sees a close (or the end of the socket).
    loop {
        match tokio::time::timeout(HANG, second.socket.next()).await.unwrap() {
            None | Some(Err(_)) | Some(Ok(Message::Close(_))) => break,
            Some(Ok(_)) => {}
        }
    }
}

// ---- against the reference board ----

/// What a [`Relay`] does with the connections through it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RelayMode {
    /// Bytes flow both ways.
    Forward,
    /// Connections stay open but nothing flows: a link gone dead without a close.
    Stall,
    /// Every connection is cut and new ones are closed at once: the tracker is unreachable.
    Down,
}

/// A loopback TCP relay in front of the board that the test can stall, cut, or point at a
/// restarted board (which then need not get its old port back).
struct Relay {
    addr: std::net::SocketAddr,
    mode: watch::Sender<RelayMode>,
    target: Arc<std::sync::Mutex<std::net::SocketAddr>>,
}

impl Relay {
    async fn start(target: std::net::SocketAddr) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (mode, _) = watch::channel(RelayMode::Forward);
        let modes = mode.clone();
        let target = Arc::new(std::sync::Mutex::new(target));
        let targets = target.clone();
        tokio::spawn(async move {
            loop {
                let Ok((inbound, _)) = listener.accept().await else { return };
                if *modes.borrow() == RelayMode::Down {
                    drop(inbound);
                    continue;
                }
                let target = *targets.lock().unwrap();
                let Ok(outbound) = TcpStream::connect(target).await else { continue };
                let (inbound_read, inbound_write) = inbound.into_split();
                let (outbound_read, outbound_write) = outbound.into_split();
                tokio::spawn(pump(inbound_read, outbound_write, modes.subscribe()));
                tokio::spawn(pump(outbound_read, inbound_write, modes.subscribe()));
            }
        });
        Relay { addr, mode, target }
    }

    /// New connections go to `target` from now on.
    fn retarget(&self, target: std::net::SocketAddr) {
        *self.target.lock().unwrap() = target;
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    fn set(&self, mode: RelayMode) {
        self.mode.send_replace(mode);
    }
}

/// Copies bytes one way, holding them while the relay stalls and ending when it goes down.
async fn pump(
    mut from: tokio::net::tcp::OwnedReadHalf,
    mut to: tokio::net::tcp::OwnedWriteHalf,
    mut mode: watch::Receiver<RelayMode>,
) {
    let mut buffer = vec![0u8; 64 * 1024];
    loop {
        let read = tokio::select! {
            read = from.read(&mut buffer) => read,
            changed = mode.wait_for(|mode| *mode == RelayMode::Down) => {
                let _ = changed;
                return;
            }
        };
        let Ok(n) = read else { return };
        if n == 0 {
            let _ = to.shutdown().await;
            return;
        }
        match mode.wait_for(|mode| *mode != RelayMode::Stall).await {
            Ok(mode) if *mode == RelayMode::Forward => {}
            _ => return,
        }
        if to.write_all(&buffer[..n]).await.is_err() {
            return;
        }
    }
}

fn seed_path() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/board-seed.json")
}

async fn start_board(db: &std::path::Path, listen: std::net::SocketAddr) -> BoardHandle {
    board::start(BoardOptions::new(listen, db, Some(seed_path()))).await.unwrap()
}

/// Alice creates a task and assigns it to picogent; returns the task key.
async fn assign_new_task(alice: &TrackerClient, title: &str) -> String {
    let create = CreateTask {
        project_slug: "team".to_string(),
        title: title.to_string(),
        description: None,
        task_type: None,
        priority: None,
        status: None,
        assignee_slug: None,
        labels: None,
    };
    let task = alice.create_task(&create, None).await.unwrap();
    alice.assign_task(&task.key, "picogent", None).await.unwrap();
    task.key
}

/// The key of the task in a `task.assigned` item.
fn assigned_key(item: &StreamItem) -> Option<String> {
    match item {
        StreamItem::Event(ReceivedEvent { event: Event::TaskAssigned(data), .. }) => Some(data.task.key.clone()),
        _ => None,
    }
}

#[tokio::test]
async fn the_board_delivers_task_assigned_over_the_stream() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(&dir.path().join("board.db"), "127.0.0.1:0".parse().unwrap()).await;
    let agent = client_for(&board.url(), "tok-picogent");
    let alice = client_for(&board.url(), "tok-alice");
    let cancel = CancellationToken::new();
    let (mut items, handle) = transport::spawn(fast_options(), &agent, Arc::new(AtomicU64::new(0)), cancel.clone());
    assert_eq!(next_item(&mut items).await, StreamItem::Status(LinkStatus::Connected));
    let began = LinkStatus::Began { mode: StartMode::Resume, from_seq: 0, skipped: 0 };
    assert_eq!(next_item(&mut items).await, StreamItem::Status(began));
    assert_eq!(next_item(&mut items).await, StreamItem::Status(LinkStatus::CaughtUp { last_seq: 0 }));

    let key = assign_new_task(&alice, "Write the release notes").await;
    let item = wait_for(&mut items, |item| matches!(item, StreamItem::Event(_))).await;
    match item {
        StreamItem::Event(ReceivedEvent { name, seq, event: Event::TaskAssigned(data), .. }) => {
            assert_eq!(name, "task.assigned");
            assert_eq!(seq, 1);
            assert_eq!(data.task.key, key);
            assert_eq!(data.task.assignee_slug.as_deref(), Some("picogent"));
            assert_eq!(data.assigned_by, "alice");
        }
        other => panic!("expected task.assigned, got {other:?}"),
    }
    cancel.cancel();
    assert!(tokio::time::timeout(HANG, handle).await.unwrap().unwrap().is_ok());
    board.shutdown().await.unwrap();
}

#[tokio::test]
async fn the_board_refuses_a_bad_token_and_the_stream_stops() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(&dir.path().join("board.db"), "127.0.0.1:0".parse().unwrap()).await;
    let agent = client_for(&board.url(), "tok-not-a-member");
    let (mut items, handle) =
        transport::spawn(fast_options(), &agent, Arc::new(AtomicU64::new(0)), CancellationToken::new());
    let outcome = tokio::time::timeout(HANG, handle).await.expect("a refused token must not retry forever").unwrap();
    let error = outcome.unwrap_err();
    assert!(matches!(error, StreamError::Unauthorized { status: 401, .. }), "{error:?}");
    assert!(error.to_string().contains("the tracker refused the token in TEAMBOARD_TOKEN"), "{error}");
    assert_eq!(items.recv().await, None);
    board.shutdown().await.unwrap();
}

#[tokio::test]
async fn after_a_board_restart_resume_delivers_exactly_the_missed_events_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let board_db = dir.path().join("board.db");
    let board = start_board(&board_db, "127.0.0.1:0".parse().unwrap()).await;
    let relay = Relay::start(board.addr()).await;
    let state = State::open(&dir.path().join("agent.db")).await.unwrap();
    let agent = client_for(&relay.url(), "tok-picogent");
    let (mut items, _handle) = transport::spawn(fast_options(), &agent, state.clone(), CancellationToken::new());
    let mut seen_ids = std::collections::HashSet::new();
    // A fresh state file begins at the head: what is logged before the stream caught up is the
    // past (reconciliation's to judge), so the test assigns only after.
    wait_for(&mut items, |item| matches!(item, StreamItem::Status(LinkStatus::CaughtUp { .. }))).await;

    // Two events while connected, processed (recorded) by this test acting as the router.
    let alice = client_for(&board.url(), "tok-alice");
    let mut before = Vec::new();
    for title in ["one", "two"] {
        let key = assign_new_task(&alice, title).await;
        let item = wait_for(&mut items, |item| matches!(item, StreamItem::Event(_))).await;
        assert_eq!(assigned_key(&item), Some(key.clone()));
        let (id, seq) = event_id(&item).unwrap();
        assert!(seen_ids.insert(id.clone()));
        assert!(state.record_event(&id, seq, "task.assigned").await.unwrap());
        before.push(key);
    }

    // The tracker goes away and comes back on the same database (on a new port: the relay hides
    // it, and the old port may be taken by then); meanwhile, with the relay still down, three
    // more tasks are assigned.
    relay.set(RelayMode::Down);
    board.shutdown().await.unwrap();
    match wait_for(&mut items, |item| matches!(item, StreamItem::Status(LinkStatus::Disconnected { .. }))).await {
        StreamItem::Status(LinkStatus::Disconnected { reason }) => assert!(!reason.is_empty()),
        other => unreachable!("{other:?}"),
    }
    let board = start_board(&board_db, "127.0.0.1:0".parse().unwrap()).await;
    relay.retarget(board.addr());
    let alice = client_for(&board.url(), "tok-alice");
    let mut missed = Vec::new();
    for title in ["three", "four", "five"] {
        missed.push(assign_new_task(&alice, title).await);
    }
    relay.set(RelayMode::Forward);

    // Everything up to the caught-up marker is the replay: exactly the missed events, in order.
    let mut replayed = Vec::new();
    let last_seq = loop {
        match next_item(&mut items).await {
            StreamItem::Status(LinkStatus::CaughtUp { last_seq }) => break last_seq,
            StreamItem::Status(LinkStatus::Connected | LinkStatus::Disconnected { .. } | LinkStatus::Began { .. }) => {}
            StreamItem::Status(gap @ LinkStatus::GapAccepted { .. }) => panic!("nothing was missing: {gap:?}"),
            item @ StreamItem::Event(_) => {
                let (id, seq) = event_id(&item).unwrap();
                assert!(seen_ids.insert(id.clone()), "event {id} (seq {seq}) delivered twice");
                assert!(state.record_event(&id, seq, "task.assigned").await.unwrap());
                replayed.push((seq, assigned_key(&item).unwrap()));
            }
        }
    };
    let keys: Vec<String> = replayed.iter().map(|(_, key)| key.clone()).collect();
    assert_eq!(keys, missed);
    let seqs: Vec<u64> = replayed.iter().map(|(seq, _)| *seq).collect();
    assert_eq!(seqs, vec![3, 4, 5]);
    assert_eq!(last_seq, 5);
    assert_eq!(state.last_seq().await.unwrap(), 5);

    // Live events follow the replay with no gap.
    let key = assign_new_task(&alice, "six").await;
    let item = wait_for(&mut items, |item| matches!(item, StreamItem::Event(_))).await;
    assert_eq!(assigned_key(&item), Some(key));
    assert_eq!(event_id(&item).unwrap().1, 6);
    board.shutdown().await.unwrap();
}

#[tokio::test]
async fn a_stalled_link_to_the_board_is_detected_and_the_stream_catches_up() {
    let dir = tempfile::tempdir().unwrap();
    let board = start_board(&dir.path().join("board.db"), "127.0.0.1:0".parse().unwrap()).await;
    let relay = Relay::start(board.addr()).await;
    let state = State::open(&dir.path().join("agent.db")).await.unwrap();
    let agent = client_for(&relay.url(), "tok-picogent");
    let alice = client_for(&board.url(), "tok-alice");
    let options = heartbeat_options();
    let (mut items, _handle) = transport::spawn(options.clone(), &agent, state.clone(), CancellationToken::new());
    assert_eq!(next_item(&mut items).await, StreamItem::Status(LinkStatus::Connected));
    // A fresh state file: the stream begins at the board's head (an empty log here).
    let began = LinkStatus::Began { mode: StartMode::Head, from_seq: 0, skipped: 0 };
    assert_eq!(next_item(&mut items).await, StreamItem::Status(began));
    assert_eq!(next_item(&mut items).await, StreamItem::Status(LinkStatus::CaughtUp { last_seq: 0 }));

    // The link stalls without closing; an event is logged meanwhile and cannot get through.
    relay.set(RelayMode::Stall);
    let key = assign_new_task(&alice, "during the stall").await;
    match next_item(&mut items).await {
        StreamItem::Status(LinkStatus::Disconnected { reason }) => assert!(reason.contains("dead"), "{reason}"),
        other => panic!("expected the stalled link to be declared dead, got {other:?}"),
    }

    // The link heals; the stream reconnects on its own and the resume brings the event.
    relay.set(RelayMode::Forward);
    let item = wait_for(&mut items, |item| matches!(item, StreamItem::Event(_))).await;
    assert_eq!(assigned_key(&item), Some(key));
    board.shutdown().await.unwrap();
}

/// The tracker's log lost an event (pruned, say): the stream asks for it again a few times, then
/// goes on without it, says so once, and passes on what follows — it does not reconnect forever.
#[tokio::test]
async fn an_event_missing_from_the_log_is_gone_on_without_after_a_few_tries() {
    let dir = tempfile::tempdir().unwrap();
    let board_db = dir.path().join("board.db");
    let board = start_board(&board_db, "127.0.0.1:0".parse().unwrap()).await;
    let alice = client_for(&board.url(), "tok-alice");
    let mut keys = Vec::new();
    for title in ["one", "two", "three"] {
        keys.push(assign_new_task(&alice, title).await);
    }
    let pool = sqlx::sqlite::SqlitePool::connect(&format!("sqlite://{}", board_db.display())).await.unwrap();
    let removed = sqlx::query("DELETE FROM events WHERE member_slug = 'picogent' AND seq = 2")
        .execute(&pool)
        .await
        .unwrap()
        .rows_affected();
    assert_eq!(removed, 1);
    pool.close().await;

    let state = State::open(&dir.path().join("agent.db")).await.unwrap();
    let agent = client_for(&board.url(), "tok-picogent");
    // The whole log, as `--from-start` reads it: a fresh state file would begin at the head.
    let options = StreamOptions { start: StreamStart::FromStart, ..fast_options() };
    let (mut items, _handle) = transport::spawn(options, &agent, state.clone(), CancellationToken::new());
    let (mut gaps, mut disconnects, mut events) = (Vec::new(), 0, Vec::new());
    while events.len() < 2 {
        match next_item(&mut items).await {
            StreamItem::Status(LinkStatus::GapAccepted { from, to }) => gaps.push((from, to)),
            StreamItem::Status(LinkStatus::Disconnected { reason }) => {
                assert!(reason.contains("went missing"), "{reason}");
                disconnects += 1;
            }
            StreamItem::Status(_) => {}
            item @ StreamItem::Event(_) => {
                let (id, seq) = event_id(&item).unwrap();
                // As the router does: a seq seen again after a reconnect is a repeat.
                if state.record_event(&id, seq, "task.assigned").await.unwrap() {
                    events.push((seq, assigned_key(&item).unwrap()));
                }
            }
        }
    }
    assert_eq!(events, vec![(1, keys[0].clone()), (3, keys[2].clone())]);
    assert_eq!(gaps, vec![(2, 2)], "said once");
    assert_eq!(disconnects, transport::MAX_GAP_TRIES as usize, "asked again, then went on");
    assert_eq!(state.last_seq().await.unwrap(), 3);
    board.shutdown().await.unwrap();
}
