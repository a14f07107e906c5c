//! Helpers shared by the integration tests: a seeded reference board on a temporary database,
//! clients acting as its members, and a WebSocket reader with deadlines.
// Each test binary uses a different part of this module; a test binary exports nothing, so
// `pub` here is for the test files, not an API (`unreachable_pub` is for the crates').
#![allow(dead_code, unreachable_pub)]

pub mod fault_harness;
pub mod fault_proxy;
pub mod work_check;

use std::path::{Path, PathBuf};
use std::time::Duration;

use futures::{SinkExt, StreamExt};
use picogent::board::{self, BoardHandle, BoardOptions, Seed};
use picogent::config::TrackerConfig;
use picogent::retry::RetryConfig;
use picogent::secret::Secret;
use picogent::tracker::TrackerClient;
use picogent::tracker::model::EventEnvelope;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;

/// How long a test waits for something that should happen promptly before failing.
pub const PATIENCE: Duration = Duration::from_secs(10);

pub fn seed_path() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fixtures/board-seed.json")
}

/// A retry policy that retries fast and predictably.
pub fn fast_retry(max_attempts: u32) -> RetryConfig {
    RetryConfig { max_attempts, initial_delay_ms: 5, max_delay_ms: 20, max_elapsed_ms: 2_000, jitter: false }
}

/// A client of `url` (the tracker's base URL, without `/api`).
pub fn client_at(url: &str, token: &str, timeout_ms: u64, retry: RetryConfig) -> TrackerClient {
    let config = TrackerConfig {
        url: url.to_string(),
        api_prefix: "/api".to_string(),
        token_env: "PICOGENT_TEST_TOKEN_UNUSED".to_string(),
        timeout_ms,
        retry,
    };
    TrackerClient::new(&config, Secret::new(token)).unwrap()
}

/// The reference board, seeded from the fixture, on a database in a temporary directory.
pub struct TestBoard {
    pub handle: BoardHandle,
    pub seed: Seed,
    pub db: PathBuf,
    dir: tempfile::TempDir,
}

impl TestBoard {
    pub async fn start() -> TestBoard {
        TestBoard::start_with_retention(board::Retention::default()).await
    }

    /// A board that prunes its event log and idempotency keys as `retention` says.
    pub async fn start_with_retention(retention: board::Retention) -> TestBoard {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("board.db");
        let options = BoardOptions { retention, ..BoardOptions::loopback(&db, Some(seed_path())) };
        let handle = board::start(options).await.unwrap();
        TestBoard { handle, seed: Seed::load(&seed_path()).unwrap(), db, dir }
    }

    /// Stops the board and starts a new one on the same database file (and a new port).
    pub async fn restart(self) -> TestBoard {
        let TestBoard { handle, seed, db, dir } = self;
        handle.shutdown().await.unwrap();
        let handle = board::start(BoardOptions::loopback(&db, Some(seed_path()))).await.unwrap();
        TestBoard { handle, seed, db, dir }
    }

    pub fn url(&self) -> String {
        self.handle.url()
    }

    pub fn token(&self, member: &str) -> &str {
        self.seed.token_of(member).unwrap_or_else(|| panic!("no member {member} in the seed"))
    }

    /// A client acting as `member`, retrying fast.
    pub fn client(&self, member: &str) -> TrackerClient {
        client_at(&self.url(), self.token(member), 5_000, fast_retry(3))
    }

    pub fn ws_url(&self) -> String {
        format!("ws://{}/api/ws", self.handle.addr())
    }
}

type Socket = tokio_tungstenite::WebSocketStream<tokio_tungstenite::MaybeTlsStream<tokio::net::TcpStream>>;

/// One member's event stream.
pub struct EventStream {
    pub socket: Socket,
}

impl EventStream {
    /// Connects with the token in the `Authorization` header.
    pub async fn connect(board: &TestBoard, member: &str) -> EventStream {
        let mut request = board.ws_url().into_client_request().unwrap();
        let bearer = format!("Bearer {}", board.token(member));
        request.headers_mut().insert("authorization", bearer.parse().unwrap());
        let (socket, _) = tokio_tungstenite::connect_async(request).await.unwrap();
        EventStream { socket }
    }

    /// Connects with the token in `?token=`.
    pub async fn connect_with_query_token(board: &TestBoard, member: &str) -> EventStream {
        let url = format!("{}?token={}", board.ws_url(), board.token(member));
        let (socket, _) = tokio_tungstenite::connect_async(url).await.unwrap();
        EventStream { socket }
    }

    pub async fn send_json(&mut self, value: serde_json::Value) {
        self.socket.send(Message::Text(value.to_string().into())).await.unwrap();
    }

    /// The next text frame as JSON; fails the test if none comes within [`PATIENCE`].
    pub async fn next_json(&mut self) -> serde_json::Value {
        loop {
            let frame = tokio::time::timeout(PATIENCE, self.socket.next())
                .await
                .expect("no frame within the deadline")
                .expect("the event stream ended")
                .expect("the event stream failed");
            match frame {
                Message::Text(text) => return serde_json::from_str(text.as_str()).unwrap(),
                Message::Ping(_) | Message::Pong(_) => continue,
                other => panic!("unexpected frame {other:?}"),
            }
        }
    }

    pub async fn next_event(&mut self) -> EventEnvelope {
        let value = self.next_json().await;
        serde_json::from_value(value.clone()).unwrap_or_else(|e| panic!("not an event: {value} ({e})"))
    }

    /// Sends `resume` and collects the replayed events up to `resumed`; returns them and `last_seq`.
    pub async fn resume(&mut self, after_seq: u64) -> (Vec<EventEnvelope>, u64) {
        self.send_json(serde_json::json!({"type": "resume", "after_seq": after_seq})).await;
        let mut events = Vec::new();
        loop {
            let value = self.next_json().await;
            if value["type"] == "resumed" {
                return (events, value["last_seq"].as_u64().unwrap());
            }
            events.push(serde_json::from_value(value).unwrap());
        }
    }

    /// Waits for the server to end the connection (a close frame, an error or the end).
    pub async fn expect_closed(&mut self) {
        loop {
            let frame = tokio::time::timeout(PATIENCE, self.socket.next()).await.expect("the connection stayed open");
            match frame {
                None | Some(Err(_)) | Some(Ok(Message::Close(_))) => return,
                Some(Ok(Message::Ping(_) | Message::Pong(_))) => continue,
                Some(Ok(other)) => panic!("expected the connection to close, got {other:?}"),
            }
        }
    }

    pub async fn close(mut self) {
        let _ = self.socket.close(None).await;
    }
}

/// Every event logged for `member` so far, read through a `resume` from 0.
pub async fn all_events(board: &TestBoard, member: &str) -> Vec<EventEnvelope> {
    let mut stream = EventStream::connect(board, member).await;
    let (events, _) = stream.resume(0).await;
    stream.close().await;
    events
}
