//! The typed REST client of the tracker. This is the only module that knows REST paths; its
//! event stream (the WebSocket, the tracker's other wire format) is [`stream`].
//!
//! Invariants:
//! - every request goes through [`TrackerClient::send`], which applies the one retry policy;
//! - every POST carries an `Idempotency-Key` made once per logical call (or given by the caller)
//!   and reused across that call's retries, so a retried write happens once;
//! - the token is held as a [`Secret`] and never appears in logs, errors or `Debug` output;
//! - a client with a [`WriteGate`] (the running agent's) sends no write the gate does not admit,
//!   and keeps the gate's presence marker in the member status (see [`presence`]).
//!
//! Where things are: `lib.rs` (`TrackerClient`: every REST path, and `send`); `model.rs` (the wire
//! shapes the board shares: `TaskOut`, `MessageOut`, `EventEnvelope`, `Event`, `ReceivedEvent`, the
//! request bodies); `stream/` (the WebSocket: connect, heartbeat, reconnect with backoff, `resume`;
//! each frame parsed once, `parse_frame` in `frame.rs`; a seq gap asked for again, then gone on
//! without after `MAX_GAP_TRIES`; where it begins, `StreamStart` in `start.rs`); `session.rs`
//! (`SessionKey`: a task, a chat thread, a prompt); `presence.rs` (the marker in the member status:
//! `Marker`, `parse_status`, `compose`, and `WriteGate`); `markers.rs` (the one stripping of
//! marker-shaped text); `config.rs` (the `tracker` section, `TrackerConfig`); `tree.rs` (a task tree as labels:
//! `parent:KEY`, `blocked_by:KEY`); `error.rs`. The
//! contract is `docs/tracker-api.md`.

pub mod config;
pub mod error;
pub mod markers;
pub mod model;
pub mod presence;
pub mod session;
pub mod stream;
pub mod tree;

use std::time::Duration;

use reqwest::{Method, StatusCode, header};
use serde::Serialize;
use serde::de::DeserializeOwned;

pub use config::{DEFAULT_TOKEN_ENV, TrackerConfig};
pub use error::TrackerError;
use model::*;

use picogent_support::retry::{RetryConfig, parse_retry_after, with_retry};
use picogent_support::secret::Secret;
pub use presence::WriteGate;

/// Idle connections to the tracker kept for reuse.
const IDLE_CONNECTIONS: usize = 16;

/// One member's connection to the tracker. Cheap to clone; clones share the connection pool.
#[derive(Clone)]
pub struct TrackerClient {
    http: reqwest::Client,
    /// `{url}{api_prefix}`, parsed once: a request's URL is a copy with its path set, which
    /// parses only the path (the host's IDNA processing was a tenth of an MCP `get_task`'s
    /// instructions).
    api_url: reqwest::Url,
    token: Secret,
    retry: RetryConfig,
    /// The running agent's writes pass it, so a copy that another copy took over from writes
    /// nothing; `None` for everyone else (the command line, `picogent mcp`, people in the demo).
    gate: Option<std::sync::Arc<WriteGate>>,
}

impl std::fmt::Debug for TrackerClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackerClient").field("api_base", &self.api_base()).field("token", &self.token).finish()
    }
}

/// Percent-encodes one path segment (ids, keys and slugs are plain, but input from a model is not).
fn segment(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for byte in value.bytes() {
        if byte.is_ascii_alphanumeric() || matches!(byte, b'-' | b'_' | b'.' | b'~') {
            out.push(byte as char);
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

impl TrackerClient {
    pub fn new(config: &TrackerConfig, token: Secret) -> Result<TrackerClient, TrackerError> {
        let http = reqwest::Client::builder()
            .timeout(Duration::from_millis(config.timeout_ms))
            .connect_timeout(Duration::from_millis(config.timeout_ms.min(5_000)))
            // Many runs at once open many connections; past a few, an idle one only holds
            // buffers (each of 200 runs in flight left ~2 behind: +10 MB; docs/performance.md).
            .pool_max_idle_per_host(IDLE_CONNECTIONS)
            .build()
            .map_err(|e| TrackerError::Transport { message: e.to_string(), timed_out: false })?;
        let api_url =
            reqwest::Url::parse(&config.api_base()).ok().filter(|url| !url.cannot_be_a_base()).ok_or_else(|| {
                TrackerError::Transport {
                    message: "tracker.url is not an http(s) URL: set it to the board's address, as http://host:port"
                        .to_string(),
                    timed_out: false,
                }
            })?;
        Ok(TrackerClient { http, api_url, token, retry: config.retry.clone(), gate: None })
    }

    /// The same connection with every write passing `gate` first (`runtime::presence`).
    pub fn with_gate(&self, gate: std::sync::Arc<WriteGate>) -> TrackerClient {
        TrackerClient { gate: Some(gate), ..self.clone() }
    }

    /// How many writes of this client its [`WriteGate`] holds now (0 without a gate).
    pub fn writes_held(&self) -> usize {
        self.gate.as_ref().map_or(0, |gate| gate.held())
    }

    /// `{api_base}{path}` as a URL; `path` starts with `/` and has its segments encoded.
    fn url(&self, path: &str) -> reqwest::Url {
        let mut url = self.api_url.clone();
        url.set_path(&format!("{}{path}", self.api_url.path().trim_end_matches('/')));
        url
    }

    /// `{url}{api_prefix}`, without a trailing slash.
    pub fn api_base(&self) -> &str {
        self.api_url.as_str().trim_end_matches('/')
    }

    pub fn token(&self) -> &Secret {
        &self.token
    }

    /// The event stream's URL (`ws://` or `wss://`), without the token. (Any user info in
    /// `tracker.url` stays in it, for the connection: logs show [`picogent_support::secret::shown_url`] of it.)
    pub fn ws_url(&self) -> String {
        let api_base = self.api_base();
        let base = if let Some(rest) = api_base.strip_prefix("https://") {
            format!("wss://{rest}")
        } else if let Some(rest) = api_base.strip_prefix("http://") {
            format!("ws://{rest}")
        } else {
            api_base.to_string()
        };
        format!("{base}/ws")
    }

    // ---- projects ----

    pub async fn list_projects(&self) -> Result<Vec<ProjectOut>, TrackerError> {
        self.get("/projects", &()).await
    }

    pub async fn get_project(&self, slug: &str) -> Result<ProjectOut, TrackerError> {
        self.get(&format!("/projects/{}", segment(slug)), &()).await
    }

    // ---- tasks ----

    pub async fn list_tasks(&self, query: &TaskQuery) -> Result<TaskPage, TrackerError> {
        self.get("/tasks", query).await
    }

    pub async fn get_task(&self, task: &str) -> Result<TaskOut, TrackerError> {
        self.get(&format!("/tasks/{}", segment(task)), &()).await
    }

    pub async fn create_task(&self, body: &CreateTask, key: Option<&str>) -> Result<TaskOut, TrackerError> {
        self.post("/tasks", body, key).await
    }

    pub async fn update_task(&self, task: &str, body: &UpdateTask) -> Result<TaskOut, TrackerError> {
        self.send(Method::PATCH, &format!("/tasks/{}", segment(task)), &(), Some(body), None).await
    }

    pub async fn take_task(&self, task: &str, agent_slug: &str, key: Option<&str>) -> Result<TaskOut, TrackerError> {
        let body = TakeTask { agent_slug: agent_slug.to_string() };
        self.post(&format!("/tasks/{}/take", segment(task)), &body, key).await
    }

    pub async fn reject_task(&self, task: &str, reason: &str, key: Option<&str>) -> Result<RejectOut, TrackerError> {
        let body = RejectTask { reason: reason.to_string() };
        self.post(&format!("/tasks/{}/reject", segment(task)), &body, key).await
    }

    pub async fn assign_task(
        &self,
        task: &str,
        assignee_slug: &str,
        key: Option<&str>,
    ) -> Result<TaskOut, TrackerError> {
        let body = AssignTask { assignee_slug: assignee_slug.to_string() };
        self.post(&format!("/tasks/{}/assign", segment(task)), &body, key).await
    }

    pub async fn watch_task(&self, task: &str, agent_slug: &str, key: Option<&str>) -> Result<WatchOut, TrackerError> {
        let body = WatchTask { agent_slug: agent_slug.to_string() };
        self.post(&format!("/tasks/{}/watch", segment(task)), &body, key).await
    }

    // ---- steps ----

    pub async fn list_steps(&self, task: &str) -> Result<Vec<StepOut>, TrackerError> {
        self.get(&format!("/tasks/{}/steps", segment(task)), &()).await
    }

    pub async fn add_step(&self, task: &str, title: &str, key: Option<&str>) -> Result<StepOut, TrackerError> {
        let body = AddStep { title: title.to_string() };
        self.post(&format!("/tasks/{}/steps", segment(task)), &body, key).await
    }

    pub async fn update_step(&self, task: &str, step_id: &str, body: &UpdateStep) -> Result<StepOut, TrackerError> {
        let path = format!("/tasks/{}/steps/{}", segment(task), segment(step_id));
        self.send(Method::PATCH, &path, &(), Some(body), None).await
    }

    pub async fn complete_step(&self, task: &str, step_id: &str, key: Option<&str>) -> Result<StepOut, TrackerError> {
        let path = format!("/tasks/{}/steps/{}/complete", segment(task), segment(step_id));
        self.post(&path, &serde_json::json!({}), key).await
    }

    // ---- messages ----

    /// Posts a message; fence markers are taken out of its content ([`markers`]).
    pub async fn send_message(&self, body: &SendMessage, key: Option<&str>) -> Result<MessageOut, TrackerError> {
        match markers::without_markers(&body.content) {
            std::borrow::Cow::Borrowed(_) => self.post("/messages", body, key).await,
            std::borrow::Cow::Owned(content) => {
                self.post("/messages", &SendMessage { content, ..body.clone() }, key).await
            }
        }
    }

    pub async fn list_messages(&self, query: &MessageQuery) -> Result<Vec<MessageOut>, TrackerError> {
        self.get("/messages", query).await
    }

    pub async fn get_message(&self, id: &str) -> Result<MessageOut, TrackerError> {
        self.get(&format!("/messages/{}", segment(id)), &()).await
    }

    pub async fn reply_message(
        &self,
        parent_id: &str,
        body: &ReplyMessage,
        key: Option<&str>,
    ) -> Result<MessageOut, TrackerError> {
        let path = format!("/messages/{}/replies", segment(parent_id));
        match markers::without_markers(&body.content) {
            std::borrow::Cow::Borrowed(_) => self.post(&path, body, key).await,
            std::borrow::Cow::Owned(content) => self.post(&path, &ReplyMessage { content, ..body.clone() }, key).await,
        }
    }

    // ---- members ----

    pub async fn list_members(&self) -> Result<Vec<MemberOut>, TrackerError> {
        self.get("/members", &()).await
    }

    /// `me` names the caller.
    pub async fn get_member(&self, slug: &str) -> Result<MemberOut, TrackerError> {
        self.get(&format!("/members/{}", segment(slug)), &()).await
    }

    /// Sets the caller's status to `status` with anything shaped like a presence marker taken
    /// out; through a gated client, the presence heartbeat writes it, with this copy's marker.
    pub async fn update_my_status(&self, status: &str) -> Result<StatusOut, TrackerError> {
        let text = presence::strip_markers(status);
        match &self.gate {
            Some(gate) => gate.change_status(text).await,
            None => self.write_my_status_before(&text, None).await,
        }
    }

    /// Sets the caller's status exactly as given, markers and all, and sends no attempt after
    /// `not_after`: the presence heartbeat's own write, through an ungated client.
    pub async fn write_my_status_before(
        &self,
        status: &str,
        not_after: Option<tokio::time::Instant>,
    ) -> Result<StatusOut, TrackerError> {
        let body = UpdateStatus { status: status.to_string() };
        self.send_before(Method::PATCH, "/members/me", &(), Some(&body), None, not_after).await
    }

    // ---- files ----

    pub async fn upload_file(
        &self,
        message_id: &str,
        body: &UploadFile,
        key: Option<&str>,
    ) -> Result<AttachmentOut, TrackerError> {
        self.post(&format!("/messages/{}/attachments", segment(message_id)), body, key).await
    }

    pub async fn list_files(&self, query: &FileQuery) -> Result<Vec<AttachmentOut>, TrackerError> {
        self.get("/attachments", query).await
    }

    pub async fn download_file(&self, id: &str) -> Result<FileContent, TrackerError> {
        self.get(&format!("/attachments/{}", segment(id)), &()).await
    }

    // ---- the one place requests are made ----

    async fn get<Q: Serialize + ?Sized, T: DeserializeOwned>(&self, path: &str, query: &Q) -> Result<T, TrackerError> {
        self.send::<Q, (), T>(Method::GET, path, query, None, None).await
    }

    /// A POST with an idempotency key: the caller's, or one made now for this logical call.
    async fn post<B: Serialize + ?Sized, T: DeserializeOwned>(
        &self,
        path: &str,
        body: &B,
        key: Option<&str>,
    ) -> Result<T, TrackerError> {
        let key = key.map(str::to_string).unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
        self.send(Method::POST, path, &(), Some(body), Some(&key)).await
    }

    async fn send<Q, B, T>(
        &self,
        method: Method,
        path: &str,
        query: &Q,
        body: Option<&B>,
        idempotency_key: Option<&str>,
    ) -> Result<T, TrackerError>
    where
        Q: Serialize + ?Sized,
        B: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        self.send_before(method, path, query, body, idempotency_key, None).await
    }

    /// [`send`](Self::send), with no attempt started after `not_after`.
    async fn send_before<Q, B, T>(
        &self,
        method: Method,
        path: &str,
        query: &Q,
        body: Option<&B>,
        idempotency_key: Option<&str>,
        not_after: Option<tokio::time::Instant>,
    ) -> Result<T, TrackerError>
    where
        Q: Serialize + ?Sized,
        B: Serialize + ?Sized,
        T: DeserializeOwned,
    {
        let url = self.url(path);
        let body_bytes = match body {
            Some(body) => Some(serde_json::to_vec(body).map_err(|e| TrackerError::Decode { message: e.to_string() })?),
            None => None,
        };
        // Reads need no lease: only what others can see must wait for one.
        let gate = if method == Method::GET { None } else { self.gate.as_deref() };
        with_retry(&self.retry, || {
            let mut request = self.http.request(method.clone(), url.clone()).bearer_auth(self.token.expose()).query(query);
            if let Some(bytes) = &body_bytes {
                request = request.header(header::CONTENT_TYPE, "application/json").body(bytes.clone());
            }
            if let Some(key) = idempotency_key {
                request = request.header("Idempotency-Key", key);
            }
            let method = method.clone();
            async move {
                if let Some(gate) = gate {
                    gate.admit().await?;
                }
                if not_after.is_some_and(|limit| tokio::time::Instant::now() >= limit) {
                    return Err(TrackerError::Transport {
                        message: "not sent: too late for what it was based on".to_string(),
                        timed_out: false,
                    });
                }
                let started = std::time::Instant::now();
                let result = execute::<T>(request).await;
                tracing::debug!(%method, path, elapsed_ms = started.elapsed().as_millis() as u64, ok = result.is_ok(), "tracker request");
                result
            }
        })
        .await
    }
}

async fn execute<T: DeserializeOwned>(request: reqwest::RequestBuilder) -> Result<T, TrackerError> {
    let response = request.send().await.map_err(transport_error)?;
    let status = response.status();
    let retry_after =
        response.headers().get(header::RETRY_AFTER).and_then(|v| v.to_str().ok()).and_then(parse_retry_after);
    let bytes = response.bytes().await.map_err(transport_error)?;
    if status.is_success() {
        return serde_json::from_slice(&bytes).map_err(|e| TrackerError::Decode {
            message: format!("{e} in {}", String::from_utf8_lossy(&bytes[..bytes.len().min(200)])),
        });
    }
    Err(error_from_answer(status, retry_after, &bytes))
}

fn transport_error(error: reqwest::Error) -> TrackerError {
    // What could not be reached is named by its origin alone (`http://host:port`): no user info
    // a URL might carry, no path or query. Errors are shown to people and models.
    let timed_out = error.is_timeout();
    let to = error.url().map(|url| format!(" to {}", url.origin().ascii_serialization())).unwrap_or_default();
    let cause = root_cause(&error).map(|cause| format!(" ({cause})")).unwrap_or_default();
    let message = format!("{}{to}{cause}", error.without_url());
    TrackerError::Transport { message: if timed_out { format!("timed out: {message}") } else { message }, timed_out }
}

/// The innermost cause of `error`, which says what happened ("Connection refused"), where the
/// outer ones say only that a request failed.
fn root_cause(error: &dyn std::error::Error) -> Option<String> {
    let mut cause = error.source()?;
    while let Some(next) = cause.source() {
        cause = next;
    }
    Some(cause.to_string())
}

/// Maps an error answer to the enum; the contract's error body supplies the message and field.
fn error_from_answer(status: StatusCode, retry_after: Option<Duration>, body: &[u8]) -> TrackerError {
    let parsed: Option<ErrorBody> = serde_json::from_slice(body).ok();
    let message = parsed
        .as_ref()
        .map(|b| b.error.message.clone())
        .unwrap_or_else(|| String::from_utf8_lossy(&body[..body.len().min(200)]).trim().to_string());
    let message = if message.is_empty() { status.canonical_reason().unwrap_or("error").to_string() } else { message };
    match status.as_u16() {
        401 => TrackerError::Unauthorized { message },
        403 => TrackerError::Forbidden { message },
        404 => TrackerError::NotFound { message },
        409 => TrackerError::Conflict { message },
        400 | 413 | 422 => {
            let field =
                parsed.as_ref().and_then(|b| b.error.details.get("field")).and_then(|f| f.as_str()).map(str::to_string);
            TrackerError::Invalid { field, message }
        }
        429 => TrackerError::RateLimited { retry_after, message },
        status @ 500..=599 => TrackerError::Server { status, retry_after, message },
        status => TrackerError::Server { status, retry_after: None, message },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn maps_error_answers() {
        let body = br#"{"error":{"code":"invalid","message":"title is too long","details":{"field":"title"}}}"#;
        assert_eq!(
            error_from_answer(StatusCode::UNPROCESSABLE_ENTITY, None, body),
            TrackerError::Invalid { field: Some("title".into()), message: "title is too long".into() }
        );
        assert!(matches!(error_from_answer(StatusCode::NOT_FOUND, None, b"nope"), TrackerError::NotFound { .. }));
        let limited = error_from_answer(StatusCode::TOO_MANY_REQUESTS, Some(Duration::from_secs(1)), b"");
        assert_eq!(
            limited,
            TrackerError::RateLimited {
                retry_after: Some(Duration::from_secs(1)),
                message: "Too Many Requests".into()
            }
        );
    }

    #[test]
    fn request_urls_are_the_base_and_the_path_parsed_together() {
        for (url, prefix) in [("http://127.0.0.1:8700", "/api"), ("http://h:1/", ""), ("https://x.example/p/", "/api/")]
        {
            let config = TrackerConfig {
                url: url.into(),
                api_prefix: prefix.into(),
                token_env: "X".into(),
                timeout_ms: 100,
                retry: RetryConfig::default(),
            };
            let client = TrackerClient::new(&config, Secret::new("t")).unwrap();
            for path in ["/tasks", &format!("/tasks/{}", segment("TE 1/../x?y#z%")), "/projects/team/members"] {
                let expected = reqwest::Url::parse(&format!("{}{path}", client.api_base())).unwrap();
                assert_eq!(client.url(path), expected, "{url} {prefix} {path}");
            }
        }
    }

    #[test]
    fn debug_hides_the_token() {
        let config = TrackerConfig {
            url: "http://127.0.0.1:1".into(),
            api_prefix: "/api".into(),
            token_env: "X".into(),
            timeout_ms: 100,
            retry: RetryConfig::default(),
        };
        let client = TrackerClient::new(&config, Secret::new("tok-secret-123")).unwrap();
        let shown = format!("{client:?}");
        assert!(!shown.contains("tok-secret-123"), "{shown}");
        assert_eq!(client.ws_url(), "ws://127.0.0.1:1/api/ws");
    }

    #[test]
    fn segments_are_encoded() {
        assert_eq!(segment("TE-15"), "TE-15");
        assert_eq!(segment("../x y"), "..%2Fx%20y");
    }
}
