//! One external MCP server: a supervisor task that keeps it connected, its lists, and the calls
//! made to it. Opening the transport and the handshake are in `client/connect.rs`; what picogent
//! offers the server and hears from it in `client/handler.rs`; reading its lists and skills in
//! `client/lists.rs`, and again on the list-changed notifications of `client/refresh.rs`; a tool
//! call, with the person's answers it waits for, in `client/call.rs`.
//!
//! Invariants:
//! - the supervisor owns the connection; callers only borrow its `Peer`, so a server that exits
//!   leaves no half-usable handle: its calls answer "server unavailable" until it is back;
//! - a server that exits or cannot be reached is restarted with exponential backoff, forever, until
//!   the host shuts down — a failure is a warning, never a crash;
//! - list-changed notifications refresh that server's tools, prompts or resources, coalesced per
//!   kind of list so a flood of them costs a few refreshes (`client/refresh.rs`); a failed
//!   refresh keeps the previous list and logs a warning;
//! - its skills (`skill://` resources, [`crate::skills`]) are read with its resources, before
//!   the server is marked ready and again when its resources change, so a skill exists before
//!   anyone calls it; a skill that cannot be read again keeps the version read before;
//! - every request carries the server's `timeout_ms`; a request that runs out (or whose run is
//!   cancelled) is dropped, and rmcp then sends `notifications/cancelled` to the server, except a
//!   call whose server asked the person: at a stop it ends with the answer `cancel`, at a
//!   shutdown it is told nothing (`ServerConnection::abandon`);
//! - a connection that speaks 2025-11-25 runs one tool call at a time, so the one in flight is
//!   the one its `elicitation/create` is for;
//! - no message of the server is kept past its `max_result_bytes` (`client/limit.rs`, and the
//!   HTTP client's limits): a result past it fails its call at once with
//!   [`ServerCallError::ResultTooLarge`], and the connection stays; a message past it that
//!   answers no call that can be told restarts the connection, failing the calls on it at once;
//! - secrets named in `headers` / `env` as `${NAME}` are read from the environment when connecting
//!   and never logged (only header names are); a stdio server inherits only a minimal environment
//!   (PATH, HOME, locale…) plus its `env`, never picogent's own tokens.

mod call;
mod connect;
mod handler;
mod limit;
mod lists;
mod refresh;

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rmcp::model::{
    GetPromptRequestParams, GetPromptResult, JsonObject, Prompt, ProtocolVersion, ReadResourceRequestParams,
    ReadResourceResult, Resource, Tool,
};
use rmcp::{Peer, RoleClient, ServiceError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::skills::Skill;
use handler::Handler;
use picogent_support::retry::reconnect_delay;
use refresh::Refreshes;

pub use connect::{ConnectError, expand_env};

use crate::config::McpServerConfig;
use crate::elicit::{Elicitation, InFlight};

/// The protocol version tried first, and the one fallen back to with servers that predate it.
pub const PREFERRED_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2026_07_28;
pub const FALLBACK_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

const BACKOFF_START: Duration = Duration::from_millis(250);
const BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Why a request to a server did not produce an answer. Each becomes an error result the model
/// reads, so the messages say what happened and what to do.
#[derive(Debug, thiserror::Error)]
pub enum ServerCallError {
    #[error("mcp server {server} is unavailable ({reason}); it is being restarted, try again later")]
    Unavailable { server: String, reason: String },
    #[error("mcp server {server} did not answer within {timeout_ms} ms; the request was cancelled")]
    TimedOut { server: String, timeout_ms: u64 },
    #[error("the call to mcp server {server} was cancelled because the run stopped")]
    Cancelled { server: String },
    #[error("mcp server {server} failed the request: {message}")]
    Failed { server: String, message: String },
    #[error(
        "the result of mcp server {server} is over its limit of {limit} bytes (mcp_servers.{server}.max_result_bytes), \
         so the call was refused without reading the rest: ask for less (a narrower query, fewer items, one page), \
         or raise that setting"
    )]
    ResultTooLarge { server: String, limit: usize },
    #[error(
        "mcp server {server} sent a message over its limit of {limit} bytes (mcp_servers.{server}.max_result_bytes) \
         that answers no call picogent can tell, so its connection is being restarted and this call was ended \
         unanswered: try again in a moment, asking for less"
    )]
    MessageTooLarge { server: String, limit: usize },
    #[error(
        "mcp server {server} ended its answer to this call before it was complete: its response stream broke, \
         or was over the limit of {limit} bytes (mcp_servers.{server}.max_result_bytes); try again, asking for less"
    )]
    AnswerCut { server: String, limit: usize },
}

/// Whether a server is usable right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerStatus {
    Connecting,
    Ready,
    Down { reason: String },
    Stopped,
}

/// One progress notification, as kept for the run record.
#[derive(Debug, Clone, PartialEq)]
pub struct ProgressRecord {
    pub server: String,
    pub token: String,
    pub progress: f64,
    pub total: Option<f64>,
    pub message: Option<String>,
}

/// What a server offers right now.
#[derive(Debug, Clone, Default)]
pub struct ServerSnapshot {
    /// The server's tools after its own `tools.allowed` / `tools.disallowed`, original names.
    pub tools: Vec<Tool>,
    pub prompts: Vec<Prompt>,
    pub resources: Vec<Resource>,
    /// Its `skill://` resources, read and cleaned, in listing order.
    pub skills: Vec<Skill>,
    /// Whether the server declared the resources capability.
    pub has_resources: bool,
    pub instructions: Option<String>,
    pub protocol_version: Option<String>,
}

/// One connection as its calls use it: the peer, and what the connection's reader tells them.
#[derive(Clone)]
struct Link {
    peer: Peer<RoleClient>,
    overflow: Arc<limit::Overflow>,
    /// On a connection that speaks 2025-11-25, the one turn to call a tool: its
    /// `elicitation/create` names no call, so only one call is in flight at a time and the one
    /// in flight is the one asking. `None` from 2026-07-28 (a question comes with its call).
    one_at_a_time: Option<Arc<tokio::sync::Semaphore>>,
}

struct State {
    link: Option<Link>,
    status: ServerStatus,
    snapshot: ServerSnapshot,
    pid: Option<u32>,
    /// Connections made so far; 2 or more means the server was restarted.
    connections: u32,
}

/// How one connection ended: the server went away (to be restarted), or the host shut down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ConnectionEnd {
    Lost,
    Shutdown,
}

/// A connected (or reconnecting) server. Shared by the host and its supervisor task.
pub struct ServerConnection {
    name: String,
    config: McpServerConfig,
    /// Who answers the server's elicitations (shared by the host's servers).
    elicitation: Arc<Elicitation>,
    /// The calls in flight: a 2025-11-25 elicitation is the one call's.
    in_flight: Arc<InFlight>,
    /// The calls waiting now for their turn on a connection that takes one at a time.
    waiting_turn: picogent_support::gauge::Gauge,
    state: RwLock<State>,
    progress: Arc<Mutex<VecDeque<ProgressRecord>>>,
    /// Bumped whenever anything in `state` changes, so waiters need no polling.
    generation: watch::Sender<u64>,
}

impl ServerConnection {
    /// Starts the supervisor of one server. It connects at once and keeps reconnecting until
    /// `shutdown` is cancelled.
    pub fn start(
        name: String,
        config: McpServerConfig,
        elicitation: Arc<Elicitation>,
        shutdown: CancellationToken,
    ) -> Arc<ServerConnection> {
        let connection = Arc::new(ServerConnection {
            name,
            config,
            elicitation,
            in_flight: Arc::default(),
            waiting_turn: Default::default(),
            state: RwLock::new(State {
                link: None,
                status: ServerStatus::Connecting,
                snapshot: ServerSnapshot::default(),
                pid: None,
                connections: 0,
            }),
            progress: Arc::new(Mutex::new(VecDeque::new())),
            generation: watch::channel(0).0,
        });
        tokio::spawn(Arc::clone(&connection).supervise(shutdown));
        connection
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn config(&self) -> &McpServerConfig {
        &self.config
    }

    pub fn status(&self) -> ServerStatus {
        self.read().status.clone()
    }

    pub fn snapshot(&self) -> ServerSnapshot {
        self.read().snapshot.clone()
    }

    /// The child's process id (stdio servers), for operators and tests.
    pub fn pid(&self) -> Option<u32> {
        self.read().pid
    }

    /// How many times the server has been connected (1 = never restarted).
    pub fn connections(&self) -> u32 {
        self.read().connections
    }

    /// How many tool calls wait now for the call in flight to end, on a connection that speaks
    /// 2025-11-25 (one call at a time); always 0 on one that speaks 2026-07-28.
    pub fn calls_waiting(&self) -> usize {
        self.waiting_turn.get()
    }

    pub fn progress(&self) -> Vec<ProgressRecord> {
        self.progress.lock().map(|kept| kept.iter().cloned().collect()).unwrap_or_default()
    }

    /// A receiver that changes whenever the server's status or lists change.
    pub fn subscribe(&self) -> watch::Receiver<u64> {
        self.generation.subscribe()
    }

    /// Waits until the server is no longer `Connecting` (ready or down), or `limit` passes.
    pub async fn wait_settled(&self, limit: Duration) {
        let mut changes = self.subscribe();
        let _ = tokio::time::timeout(limit, async {
            while self.status() == ServerStatus::Connecting {
                if changes.changed().await.is_err() {
                    return;
                }
            }
        })
        .await;
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        // A poisoned lock only means a panic elsewhere mid-update; the data is still usable.
        self.state.read().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn update(&self, change: impl FnOnce(&mut State)) {
        {
            let mut state = self.state.write().unwrap_or_else(|poisoned| poisoned.into_inner());
            change(&mut state);
        }
        self.generation.send_modify(|generation| *generation += 1);
    }

    fn link(&self) -> Result<Link, ServerCallError> {
        let state = self.read();
        match (&state.link, &state.status) {
            (Some(link), ServerStatus::Ready) => Ok(link.clone()),
            (_, status) => Err(ServerCallError::Unavailable {
                server: self.name.clone(),
                reason: match status {
                    ServerStatus::Down { reason } => reason.clone(),
                    ServerStatus::Stopped => "the host is shutting down".to_string(),
                    _ => "still connecting".to_string(),
                },
            }),
        }
    }

    /// Whether `link` is still the server's connection (it may have been restarted since).
    fn is_connected_with(&self, link: &Link) -> bool {
        self.read().link.as_ref().is_some_and(|current| Arc::ptr_eq(&current.overflow, &link.overflow))
    }

    fn timeout(&self) -> Duration {
        Duration::from_millis(self.config.timeout_ms)
    }

    /// Runs one request with the server's timeout, giving up when `cancel` fires. Dropping the
    /// request future makes rmcp send `notifications/cancelled` for it.
    async fn request<T>(
        &self,
        link: &Link,
        cancel: &CancellationToken,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, ServerCallError> {
        self.request_within(self.timeout(), link, cancel, request).await
    }

    async fn request_within<T>(
        &self,
        limit: Duration,
        link: &Link,
        cancel: &CancellationToken,
        request: impl Future<Output = Result<T, ServiceError>>,
    ) -> Result<T, ServerCallError> {
        tokio::select! {
            outcome = tokio::time::timeout(limit, request) => match outcome {
                Ok(Ok(value)) => Ok(value),
                Ok(Err(error)) => Err(self.failed(error, link)),
                Err(_) => Err(ServerCallError::TimedOut { server: self.name.clone(), timeout_ms: limit.as_millis() as u64 }),
            },
            _ = cancel.cancelled() => Err(ServerCallError::Cancelled { server: self.name.clone() }),
        }
    }

    /// What a failed request tells the model, the limits' cases first.
    fn failed(&self, error: ServiceError, link: &Link) -> ServerCallError {
        let server = self.name.clone();
        let limit = self.config.max_result_bytes;
        match error {
            ServiceError::McpError(data) if limit::is_too_large(&data) => {
                ServerCallError::ResultTooLarge { server, limit }
            }
            ServiceError::TransportSend(sent) if body_too_large(&sent) => {
                ServerCallError::ResultTooLarge { server, limit }
            }
            ServiceError::TransportClosed if link.overflow.cut_connection() => {
                ServerCallError::MessageTooLarge { server, limit }
            }
            // The HTTP client ends a call this way when its response stream broke or its event was
            // over the limit (rmcp does not say which); the connection itself is still there.
            ServiceError::TransportClosed if self.config.url.is_some() && self.is_connected_with(link) => {
                ServerCallError::AnswerCut { server, limit }
            }
            ServiceError::TransportClosed | ServiceError::TransportSend(_) => {
                ServerCallError::Unavailable { server: self.name.clone(), reason: error.to_string() }
            }
            ServiceError::McpError(data) => {
                ServerCallError::Failed { server: self.name.clone(), message: data.message.to_string() }
            }
            other => ServerCallError::Failed { server: self.name.clone(), message: other.to_string() },
        }
    }

    /// `prompts/get`.
    pub async fn get_prompt(
        &self,
        prompt: &str,
        arguments: JsonObject,
        cancel: &CancellationToken,
    ) -> Result<GetPromptResult, ServerCallError> {
        let link = self.link()?;
        let params = GetPromptRequestParams::new(prompt).with_arguments(arguments);
        let peer = link.peer.clone();
        self.request(&link, cancel, async move {
            match peer.get_prompt_once(params).await? {
                rmcp::model::GetPromptResponse::Complete(result) => Ok(result),
                _ => Err(ServiceError::UnexpectedResponse),
            }
        })
        .await
    }

    /// `resources/read`.
    pub async fn read_resource(
        &self,
        uri: &str,
        cancel: &CancellationToken,
    ) -> Result<ReadResourceResult, ServerCallError> {
        let link = self.link()?;
        self.request(&link, cancel, link.peer.read_resource(ReadResourceRequestParams::new(uri))).await
    }

    /// Keeps the server connected until `shutdown`: connect, serve the connection until it ends,
    /// wait out the backoff, and again.
    async fn supervise(self: Arc<Self>, shutdown: CancellationToken) {
        let mut failures = 0u32;
        loop {
            self.update(|state| state.status = ServerStatus::Connecting);
            let refreshes = Arc::new(Refreshes::default());
            let handler = Handler {
                server: self.name.clone(),
                refreshes: Arc::clone(&refreshes),
                progress: Arc::clone(&self.progress),
                elicitation: Arc::clone(&self.elicitation),
                in_flight: Arc::clone(&self.in_flight),
            };
            let connected = tokio::select! {
                connected = self.connect(handler) => connected,
                _ = shutdown.cancelled() => break,
            };
            let failed = match connected {
                Ok(connected) => {
                    failures = 0;
                    let ended = self.serve_connection(connected, &refreshes, &shutdown).await;
                    if ended == ConnectionEnd::Shutdown {
                        return;
                    }
                    None
                }
                Err(error) => Some(error),
            };
            let delay = reconnect_delay(failures, BACKOFF_START, BACKOFF_MAX, &mut rand::rng());
            if let Some(error) = failed {
                let retry_in_ms = delay.as_millis() as u64;
                tracing::warn!(server = %self.name, %error, retry_in_ms, "cannot connect mcp server");
                self.update(|state| state.status = ServerStatus::Down { reason: error.to_string() });
            }
            tokio::select! {
                _ = tokio::time::sleep(delay) => {}
                _ = shutdown.cancelled() => break,
            }
            failures = failures.saturating_add(1);
        }
        self.update(|state| {
            state.link = None;
            state.status = ServerStatus::Stopped;
        });
    }

    /// Reads what a fresh connection offers, marks the server ready, and refreshes its lists on
    /// list-changed notifications (`refreshes`) until the connection ends (the server is then
    /// down) or `shutdown` fires (it is then stopped).
    async fn serve_connection(
        &self,
        connect::Connected { running, pid, overflow }: connect::Connected,
        refreshes: &Arc<Refreshes>,
        shutdown: &CancellationToken,
    ) -> ConnectionEnd {
        let speaks_2025 = running.peer().peer_info().is_some_and(|info| info.protocol_version.has_initialize());
        let one_at_a_time = speaks_2025.then(|| Arc::new(tokio::sync::Semaphore::new(1)));
        let link = Link { peer: running.peer().clone(), overflow, one_at_a_time };
        // Ends the connection's own tasks (its list-change stream) however this returns.
        let connection_over = CancellationToken::new();
        let _over = connection_over.clone().drop_guard();
        let snapshot = self.first_snapshot(&link, refreshes, &connection_over).await;
        tracing::info!(
            server = %self.name,
            protocol = snapshot.protocol_version.as_deref().unwrap_or("?"),
            tools = snapshot.tools.len(),
            prompts = snapshot.prompts.len(),
            resources = snapshot.resources.len(),
            skills = snapshot.skills.len(),
            "mcp server connected"
        );
        self.update(|state| {
            state.link = Some(link.clone());
            state.status = ServerStatus::Ready;
            state.snapshot = snapshot;
            state.pid = pid;
            state.connections += 1;
        });
        let stop = running.cancellation_token();
        let mut finished = Box::pin(running.waiting());
        let reason = tokio::select! {
            quit = &mut finished => format!("connection ended ({quit:?})"),
            never = self.keep_fresh(&link, refreshes) => match never {},
            _ = shutdown.cancelled() => {
                stop.cancel();
                let _ = finished.await;
                self.update(|state| { state.link = None; state.status = ServerStatus::Stopped; });
                return ConnectionEnd::Shutdown;
            }
        };
        tracing::warn!(server = %self.name, %reason, "mcp server went away; restarting it");
        self.update(|state| {
            state.link = None;
            state.pid = None;
            state.status = ServerStatus::Down { reason: "the server exited".to_string() };
        });
        ConnectionEnd::Lost
    }
}

/// Whether a failed send is the HTTP client refusing a response body over the limit.
fn body_too_large(sent: &rmcp::transport::DynamicTransportError) -> bool {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    matches!(
        sent.error.downcast_ref::<StreamableHttpError<reqwest::Error>>(),
        Some(StreamableHttpError::ResponseBodyTooLarge { .. })
    )
}
