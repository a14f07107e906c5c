//! One external MCP server: a supervisor task that keeps it connected, its lists, and the calls
//! made to it. Opening the transport and the handshake are in `client/connect.rs`, the
//! refreshes list-changed notifications start in `client/refresh.rs`.
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

mod connect;
mod limit;
mod refresh;

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use rmcp::model::{
    CallToolRequestParams, ClientCapabilities, ClientConfig, GetPromptRequestParams, GetPromptResult, Implementation,
    JsonObject, ProgressNotificationParam, Prompt, ProtocolVersion, ReadResourceRequestParams, ReadResourceResult,
    Resource, Tool,
};
use rmcp::service::{MaybeSendFuture, NotificationContext};
use rmcp::{ClientHandler, Peer, RoleClient, ServiceError};
use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use crate::skills::{MAX_SKILLS_PER_SERVER, Skill, is_skill_uri, read_skill};
use picogent_support::retry::reconnect_delay;
use refresh::{Refresh, Refreshes, forward_list_changes};

pub use connect::{ConnectError, expand_env};

use crate::elicit::{Elicitation, InFlight};
use picogent_config::McpServerConfig;
use picogent_tools::ToolContext;

/// The protocol version tried first, and the one fallen back to with servers that predate it.
pub const PREFERRED_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2026_07_28;
pub const FALLBACK_PROTOCOL: ProtocolVersion = ProtocolVersion::V_2025_11_25;

/// Progress notifications kept per server for the run record (the oldest are dropped).
const PROGRESS_KEPT: usize = 256;
const BACKOFF_START: Duration = Duration::from_millis(250);
/// At a stop, how long a call whose server asked the person (and was answered `cancel`) is
/// given to end itself with that answer before it is abandoned.
const STOP_GRACE: Duration = Duration::from_secs(5);
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

    /// `tools/call` with the server's original tool name, for the run of `context`. When the
    /// server asks the person for input ([`crate::elicit`]) the call goes on once they answered:
    /// `timeout_ms` does not count the time it waited for them. On a 2025-11-25 connection the
    /// call first waits for the calls before it to end (one at a time; its run's budgets and a
    /// stop still hold).
    ///
    /// The call is carried out on a task of its own, whose cancellation dropping this future
    /// fires: a run stopped (or cut short by a shutdown) while the server asks the person drops
    /// its calls at once, and the task still ends the call as [`ServerConnection::abandon`] says
    /// (the server told `cancel` at a stop, nothing at a shutdown).
    pub async fn call_tool(
        self: &Arc<Self>,
        tool: &str,
        arguments: JsonObject,
        context: &ToolContext,
    ) -> Result<rmcp::model::CallToolResult, ServerCallError> {
        let link = self.link()?;
        let mut own = context.clone();
        own.cancel = context.cancel.child_token();
        let dropped = own.cancel.clone().drop_guard();
        let (connection, tool) = (Arc::clone(self), tool.to_string());
        let call = tokio::spawn(async move { connection.call_in_turn(&link, &tool, arguments, &own).await });
        let outcome = call.await.unwrap_or_else(|failed| {
            Err(ServerCallError::Failed { server: self.name.clone(), message: format!("the call failed: {failed}") })
        });
        dropped.disarm();
        outcome
    }

    /// The call, once it is its turn on the connection.
    async fn call_in_turn(
        &self,
        link: &Link,
        tool: &str,
        arguments: JsonObject,
        context: &ToolContext,
    ) -> Result<rmcp::model::CallToolResult, ServerCallError> {
        let _turn = match &link.one_at_a_time {
            Some(turn) => Some(tokio::select! {
                permit = turn.acquire() => permit.map_err(|_| ServerCallError::Unavailable {
                    server: self.name.clone(),
                    reason: "its connection ended".to_string(),
                })?,
                _ = context.cancel.cancelled() => return Err(ServerCallError::Cancelled { server: self.name.clone() }),
            }),
            None => None,
        };
        let (call, asked) = self.in_flight.enter(tool, context);
        let outcome = self.call_tool_rounds(link, tool, arguments, context, &asked).await;
        self.in_flight.leave(call);
        outcome
    }

    async fn call_tool_rounds(
        &self,
        link: &Link,
        tool: &str,
        arguments: JsonObject,
        context: &ToolContext,
        asked: &AtomicBool,
    ) -> Result<rmcp::model::CallToolResult, ServerCallError> {
        use rmcp::model::CallToolResponse;
        let failed = |message: String| ServerCallError::Failed { server: self.name.clone(), message };
        // At a shutdown the person's answer never comes: the call ends, and the server is told nothing.
        let interrupted = || ServerCallError::Cancelled { server: self.name.clone() };
        let mut params = CallToolRequestParams::new(tool.to_string()).with_arguments(arguments);
        let (mut rounds, mut url_tries) = (0usize, 0u32);
        loop {
            let limit = self.timeout();
            let deadline = tokio::time::Instant::now() + limit;
            let mut sent = Sent::call(link, params.clone());
            let answer = tokio::select! {
                answer = sent.answer() => answer,
                _ = context.wait_clock.passed(deadline) => {
                    return Err(ServerCallError::TimedOut { server: self.name.clone(), timeout_ms: limit.as_millis() as u64 });
                }
                _ = context.cancel.cancelled() => {
                    return Err(self.abandon(sent, context, asked.load(Ordering::Relaxed)).await);
                }
            };
            match answer {
                Ok(CallToolResponse::Complete(result)) => return Ok(result),
                // 2026-07-28: the result asks for input; the call is made again with the answers.
                Ok(CallToolResponse::InputRequired(input)) => {
                    rounds += 1;
                    if rounds > rmcp::model::DEFAULT_MRTR_MAX_ROUNDS {
                        return Err(failed(format!("it asked for input more than {} times in one call", rounds - 1)));
                    }
                    let mut responses = rmcp::model::InputResponses::new();
                    for (key, request) in input.input_requests.unwrap_or_default() {
                        let rmcp::model::InputRequest::Elicitation(request) = request else {
                            return Err(failed(
                                "it asked for input picogent does not give (sampling or roots)".to_string(),
                            ));
                        };
                        asked.store(true, Ordering::Relaxed);
                        let Some(answer) =
                            self.elicitation.answer(&self.name, tool, &request.params, Some(context)).await
                        else {
                            return Err(interrupted());
                        };
                        responses.insert(key, serde_json::to_value(answer).unwrap_or_default());
                    }
                    params.input_responses = Some(responses);
                    params.request_state = input.request_state;
                }
                Ok(_) => return Err(failed("it answered with a task, which picogent does not follow".to_string())),
                // 2025-11-25: the call needs the person to complete a link first, then again.
                Err(ServiceError::McpError(data)) if data.code.0 == crate::elicit::URL_ELICITATION_REQUIRED => {
                    let retries = self.elicitation.people().map_or(0, |people| people.url_retries);
                    url_tries += 1;
                    if url_tries > retries {
                        return Err(failed(format!(
                            "it still needs a link completed after {retries} tries (elicitation.url_retries): {}",
                            data.message
                        )));
                    }
                    let links: Vec<rmcp::model::ElicitRequestParams> = data
                        .data
                        .as_ref()
                        .and_then(|data| data.get("elicitations"))
                        .and_then(|list| serde_json::from_value(list.clone()).ok())
                        .unwrap_or_default();
                    if links.is_empty() {
                        return Err(failed(format!("it needs a link completed but sent none: {}", data.message)));
                    }
                    for link in &links {
                        let Some(answer) = self.elicitation.answer(&self.name, tool, link, Some(context)).await else {
                            return Err(interrupted());
                        };
                        if answer.action != rmcp::model::ElicitationAction::Accept {
                            return Ok(rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(
                                format!(
                                    "mcp server {} needs a link completed for this call, and it was not ({:?}); \
                                     nothing was done",
                                    self.name, answer.action
                                ),
                            )]));
                        }
                    }
                }
                Err(error) => return Err(self.failed(error, link)),
            }
        }
    }

    /// The run of a call was cancelled while the call was out. A call that asked nobody is
    /// abandoned at once: dropped, and the server is sent `notifications/cancelled`. A call whose
    /// server asked the person: at a stop, it was answered `cancel` and is given a moment to end
    /// itself with that answer (then abandoned); at a shutdown, it is let go unanswered and ends
    /// with the connection, so the server is told nothing (the resumed run calls and asks again).
    async fn abandon(&self, mut sent: Sent, context: &ToolContext, asked: bool) -> ServerCallError {
        let shutdown = context.waits.as_ref().is_some_and(|waits| waits.shutting_down());
        match (asked, shutdown) {
            (true, true) => sent.let_go(),
            (true, false) => {
                let _ = tokio::time::timeout(self.timeout().min(STOP_GRACE), sent.answer()).await;
            }
            (false, _) => {}
        }
        ServerCallError::Cancelled { server: self.name.clone() }
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

    /// What a fresh connection offers: the server's info, then the lists its capabilities
    /// declare (an empty list where one cannot be read).
    async fn first_snapshot(
        &self,
        link: &Link,
        refreshes: &Arc<Refreshes>,
        connection_over: &CancellationToken,
    ) -> ServerSnapshot {
        let info = link.peer.peer_info();
        let mut snapshot = ServerSnapshot {
            has_resources: info.as_ref().is_some_and(|info| info.capabilities.resources.is_some()),
            instructions: info.as_ref().and_then(|info| info.instructions.clone()),
            protocol_version: info.as_ref().map(|info| info.protocol_version.to_string()),
            ..ServerSnapshot::default()
        };
        // From 2026-07-28 a server sends list changes only on a listen stream. It is open before
        // the lists are read, so no change between the two is missed.
        if info.as_ref().is_some_and(|info| !info.protocol_version.has_initialize())
            && let Some(subscription) = self.listen(link).await
        {
            tokio::spawn(forward_list_changes(
                self.name.clone(),
                link.peer.clone(),
                subscription,
                Arc::clone(refreshes),
                self.listen_timeout(),
                connection_over.clone(),
            ));
        }
        let capabilities = info.as_ref().map(|info| info.capabilities.clone()).unwrap_or_default();
        if capabilities.tools.is_some() {
            snapshot.tools = self.list_tools(link).await.unwrap_or_default();
        }
        if capabilities.prompts.is_some() {
            snapshot.prompts = self.list_prompts(link).await.unwrap_or_default();
        }
        if capabilities.resources.is_some() {
            snapshot.resources = self.list_resources(link).await.unwrap_or_default();
            // A reconnect reads them afresh; what was read before only spares the log.
            let previous = self.snapshot().skills;
            snapshot.skills = self.read_skills(link, &snapshot.resources, &previous).await;
        }
        snapshot
    }

    /// Every page of `tools/list`, filtered by the server's allow/deny lists. `None` (and a warning)
    /// when the server fails: the caller keeps what it had.
    async fn list_tools(&self, link: &Link) -> Option<Vec<Tool>> {
        let never = CancellationToken::new();
        match self.request(link, &never, link.peer.list_all_tools()).await {
            Ok(tools) => Some(
                tools
                    .into_iter()
                    .filter(|tool| {
                        picogent_tools::policy::allowed_by(
                            &self.config.tools.allowed,
                            &self.config.tools.disallowed,
                            &tool.name,
                        )
                    })
                    .collect(),
            ),
            Err(error) => {
                tracing::warn!(server = %self.name, %error, "cannot list mcp tools; keeping the previous list");
                None
            }
        }
    }

    async fn list_prompts(&self, link: &Link) -> Option<Vec<Prompt>> {
        let never = CancellationToken::new();
        match self.request(link, &never, link.peer.list_all_prompts()).await {
            Ok(prompts) => Some(prompts),
            Err(error) => {
                tracing::warn!(server = %self.name, %error, "cannot list mcp prompts; keeping the previous list");
                None
            }
        }
    }

    async fn list_resources(&self, link: &Link) -> Option<Vec<Resource>> {
        let never = CancellationToken::new();
        match self.request(link, &never, link.peer.list_all_resources()).await {
            Ok(resources) => Some(resources),
            Err(error) => {
                tracing::warn!(server = %self.name, %error, "cannot list mcp resources; keeping the previous list");
                None
            }
        }
    }
}

impl ServerConnection {
    /// The skills among `resources`, each read (`resources/read`, side by side) and made a
    /// [`Skill`], at most [`MAX_SKILLS_PER_SERVER`]. A skill that cannot be read keeps its version
    /// in `previous`, if there is one; one that is no skill is skipped; each with a warning. What
    /// a skill's frontmatter had cleared is logged once, when a skill is new or changed.
    async fn read_skills(&self, link: &Link, resources: &[Resource], previous: &[Skill]) -> Vec<Skill> {
        let uris: Vec<&str> = resources.iter().map(|r| r.uri.as_str()).filter(|uri| is_skill_uri(uri)).collect();
        if uris.len() > MAX_SKILLS_PER_SERVER {
            tracing::warn!(
                server = %self.name,
                listed = uris.len(),
                kept = MAX_SKILLS_PER_SERVER,
                "mcp server lists more skills than picogent reads; the rest are skipped"
            );
        }
        let never = CancellationToken::new();
        let reads = uris.iter().take(MAX_SKILLS_PER_SERVER).map(|uri| async {
            let read = self.request(link, &never, link.peer.read_resource(ReadResourceRequestParams::new(*uri))).await;
            (*uri, read)
        });
        let mut skills = Vec::new();
        for (uri, read) in futures::future::join_all(reads).await {
            let text = match read {
                Ok(result) => skill_text(result),
                Err(error) => {
                    let kept = previous.iter().find(|skill| skill.uri == uri);
                    tracing::warn!(server = %self.name, uri, %error, kept_previous = kept.is_some(), "cannot read mcp skill");
                    skills.extend(kept.cloned());
                    continue;
                }
            };
            match text.as_deref().map(|text| read_skill(uri, text)) {
                Some(Ok(skill)) => {
                    if !skill.cleared.is_empty() && !previous.contains(&skill) {
                        tracing::info!(
                            server = %self.name,
                            skill = %skill.name,
                            uri,
                            cleared = %skill.cleared.join(", "),
                            "mcp skill: frontmatter fields cleared (a server's skill grants no tools and never starts by itself)"
                        );
                    }
                    skills.push(skill);
                }
                Some(Err(error)) => tracing::warn!(server = %self.name, uri, %error, "mcp skill skipped"),
                None => tracing::warn!(server = %self.name, uri, "mcp skill skipped: the resource has no text"),
            }
        }
        skills
    }
}

/// One `tools/call` sent on a task of its own, so that it can be let go at a shutdown. Dropped
/// before its answer came, it is abandoned: rmcp then sends the server `notifications/cancelled`.
struct Sent(Option<tokio::task::JoinHandle<Result<rmcp::model::CallToolResponse, ServiceError>>>);

impl Sent {
    fn call(link: &Link, params: CallToolRequestParams) -> Sent {
        let peer = link.peer.clone();
        Sent(Some(tokio::spawn(async move { peer.call_tool_once(params).await })))
    }

    /// The server's answer (once; a call let go never answers).
    async fn answer(&mut self) -> Result<rmcp::model::CallToolResponse, ServiceError> {
        match self.0.as_mut() {
            Some(task) => {
                let answer = task.await;
                self.0 = None;
                answer.unwrap_or_else(|failed| Err(ServiceError::Cancelled { reason: Some(failed.to_string()) }))
            }
            None => std::future::pending().await,
        }
    }

    /// Lets the call go on unheard, until the connection ends.
    fn let_go(&mut self) {
        self.0 = None;
    }
}

impl Drop for Sent {
    fn drop(&mut self) {
        if let Some(task) = &self.0 {
            task.abort();
        }
    }
}

/// The text of a read skill resource: its text contents joined; `None` when it has none.
fn skill_text(result: ReadResourceResult) -> Option<String> {
    let texts: Vec<String> = result
        .contents
        .into_iter()
        .filter_map(|contents| match contents {
            rmcp::model::ResourceContents::TextResourceContents { text, .. } => Some(text),
            _ => None,
        })
        .collect();
    (!texts.is_empty()).then(|| texts.join("\n\n"))
}

/// Whether a failed send is the HTTP client refusing a response body over the limit.
fn body_too_large(sent: &rmcp::transport::DynamicTransportError) -> bool {
    use rmcp::transport::streamable_http_client::StreamableHttpError;
    matches!(
        sent.error.downcast_ref::<StreamableHttpError<reqwest::Error>>(),
        Some(StreamableHttpError::ResponseBodyTooLarge { .. })
    )
}

/// The client side of one connection: it hears the server's notifications.
#[derive(Clone)]
struct Handler {
    server: String,
    refreshes: Arc<Refreshes>,
    progress: Arc<Mutex<VecDeque<ProgressRecord>>>,
    elicitation: Arc<Elicitation>,
    in_flight: Arc<InFlight>,
}

impl ClientHandler for Handler {
    fn get_info(&self) -> ClientConfig {
        // Elicitation is offered everywhere: where nobody can be asked it is cancelled at once.
        let mut capabilities = ClientCapabilities::default();
        capabilities.elicitation = Some(
            rmcp::model::ElicitationCapability::new()
                .with_form(rmcp::model::FormElicitationCapability::default())
                .with_url(rmcp::model::UrlElicitationCapability::new()),
        );
        let mut info = ClientConfig::new(capabilities, Implementation::new("picogent", env!("CARGO_PKG_VERSION")));
        // Used by the `initialize` handshake; discovery names its own preferred versions.
        info.protocol_version = FALLBACK_PROTOCOL;
        info
    }

    /// A 2025-11-25 `elicitation/create`: asked for the one call in flight on this connection.
    /// At a shutdown it is left unanswered until the connection ends.
    async fn create_elicitation(
        &self,
        request: rmcp::model::ElicitRequestParams,
        context: rmcp::service::RequestContext<RoleClient>,
    ) -> Result<rmcp::model::ElicitResult, rmcp::ErrorData> {
        let call = self.in_flight.only();
        if call.is_none() {
            tracing::warn!(server = %self.server, "cancelled an elicitation: no single call of this server is in flight to tell who asked");
        }
        if let Some(call) = &call {
            call.asked.store(true, Ordering::Relaxed);
        }
        let (tool, asker) = match &call {
            Some(call) => (call.tool.as_str(), Some(&call.context)),
            None => ("?", None),
        };
        match self.elicitation.answer(&self.server, tool, &request, asker).await {
            Some(answer) => Ok(answer),
            None => {
                context.ct.cancelled().await;
                Err(rmcp::ErrorData::internal_error("the client shut down before the user answered", None))
            }
        }
    }

    fn on_tool_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.refreshes.mark(&self.server, Refresh::Tools);
        std::future::ready(())
    }

    fn on_prompt_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.refreshes.mark(&self.server, Refresh::Prompts);
        std::future::ready(())
    }

    fn on_resource_list_changed(
        &self,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        self.refreshes.mark(&self.server, Refresh::Resources);
        std::future::ready(())
    }

    fn on_progress(
        &self,
        params: ProgressNotificationParam,
        _context: NotificationContext<RoleClient>,
    ) -> impl Future<Output = ()> + MaybeSendFuture + '_ {
        let record = ProgressRecord {
            server: self.server.clone(),
            token: format!("{:?}", params.progress_token),
            progress: params.progress,
            total: params.total,
            message: params.message.clone(),
        };
        tracing::info!(server = %record.server, token = %record.token, progress = record.progress, total = ?record.total, message = ?record.message, "mcp progress");
        if let Ok(mut kept) = self.progress.lock() {
            if kept.len() == PROGRESS_KEPT {
                kept.pop_front();
            }
            kept.push_back(record);
        }
        std::future::ready(())
    }
}
