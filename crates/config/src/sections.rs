//! The other sections of `agent.json` (`llm` is in `llm.rs`, `tracker` in the tracker's crate): limits, state, http,
//! presence, replicas, mcp, mcp_servers, permissions, startup and retention, each with its
//! defaults, and [`TextDuration`], a span of time the file writes as text.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct Limits {
    /// Model turns in one run.
    pub max_turns: u32,
    /// Tool calls in one run.
    pub max_tool_calls: u32,
    /// Prompt + completion tokens in one run.
    pub max_tokens_per_run: u64,
    /// Wall-clock time of one run, in milliseconds.
    pub run_timeout_ms: u64,
    /// Prompt + completion tokens across all runs in one UTC day.
    pub max_tokens_per_day: u64,
    /// Replies to bots the agent may post in one thread in an hour: the loop guard (people are
    /// always answered).
    pub max_replies_per_thread_per_hour: u32,
    /// Runs in flight at once.
    pub max_concurrent_runs: u32,
    /// Tool result text sent to the model is cut at this many bytes.
    pub max_tool_result_bytes: usize,
    /// Bytes of artifacts (external tools' large or binary results, saved to disk) one run may
    /// write; past it a result is not saved and the model is told why.
    pub max_artifact_bytes_per_run: u64,
    /// Bytes all artifacts in the artifacts folder may take together; past it, as above.
    pub max_artifact_bytes: u64,
    /// On SIGINT/SIGTERM, how long running runs may take to finish.
    pub shutdown_grace_ms: u64,
    /// The same tool with the same arguments this many times in a row is not run again: the
    /// model is told it repeats itself.
    pub max_identical_calls: u32,
    /// The day's spend in money (needs `llm.price`); past it new runs are refused as past
    /// `max_tokens_per_day`.
    pub max_cost_per_day: Option<f64>,
    /// Whether the answer picogent posts for a run ends with a line of what it spent (turns, tool
    /// calls, tokens, cost).
    pub spend_footer: bool,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_turns: 12,
            max_tool_calls: 40,
            max_tokens_per_run: 60_000,
            run_timeout_ms: 300_000,
            max_tokens_per_day: 2_000_000,
            max_replies_per_thread_per_hour: 6,
            max_concurrent_runs: 4,
            max_tool_result_bytes: 8 * 1024,
            max_artifact_bytes_per_run: 64 * 1024 * 1024,
            max_artifact_bytes: 1024 * 1024 * 1024,
            shutdown_grace_ms: 30_000,
            max_identical_calls: 3,
            max_cost_per_day: None,
            spend_footer: true,
        }
    }
}

/// `mcp_servers.<name>.tools`: which of one external server's tools the host takes, by their
/// original names, before the permission policy sees them under their public names.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ServerToolsConfig {
    /// Original tool names or globs (`*`, `?`) taken; empty means all.
    pub allowed: Vec<String>,
    /// Original tool names or globs never taken; wins over `allowed`.
    pub disallowed: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Where `picogent run` serves `/healthz`, `/readyz`, `/metrics` and the run inspector (`/`).
    pub listen: String,
    /// The environment variable holding the run inspector's token, needed when `listen` is not
    /// a loopback address (a loopback listener needs no login).
    pub ui_token_env: String,
    /// Where the run inspector links a task run: a URL with `{id}` for the task's id. `None`:
    /// the reference board's page, `{tracker.url}/tasks/{id}`.
    pub task_link: Option<String>,
    /// Where it links a chat run: a URL with `{id}` for the thread's first message. `None`: the
    /// reference board's page, `{tracker.url}/messages/{id}`.
    pub message_link: Option<String>,
    /// Host names the run inspector answers to besides `listen`'s address, `localhost` and the
    /// loopback addresses, e.g. `agent.example.com` (any port) or `agent.example.com:8443`. A
    /// request for any other name gets an empty 421 (DNS-rebinding protection).
    pub allowed_hosts: Vec<String>,
    /// How long a client may take to send a request's headers (and a keep-alive connection stay
    /// idle), in milliseconds: a slow client holds a connection no longer.
    pub header_timeout_ms: u64,
    /// Connections open at once on `listen`; past it new clients wait until one closes.
    pub max_connections: usize,
    /// The inspector's live streams open at once; past it a new one gets 503 with
    /// `Retry-After` (the page still works, and tries again later).
    pub max_live_streams: usize,
    /// An inspector session (after the token form) not used this long ends, in milliseconds.
    pub session_idle_ms: u64,
    /// An inspector session this old ends, however used, in milliseconds.
    pub session_lifetime_ms: u64,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: "127.0.0.1:9464".to_string(),
            ui_token_env: "PICOGENT_UI_TOKEN".to_string(),
            task_link: None,
            message_link: None,
            allowed_hosts: Vec::new(),
            header_timeout_ms: picogent_web::DoorLimits::DEFAULT_HEADER_TIMEOUT_MS,
            max_connections: picogent_web::DoorLimits::DEFAULT_MAX_CONNECTIONS,
            max_live_streams: picogent_web::LiveStreams::DEFAULT_MAX,
            session_idle_ms: 8 * 60 * 60 * 1000,
            session_lifetime_ms: 24 * 60 * 60 * 1000,
        }
    }
}

impl HttpConfig {
    /// The listener's limits.
    pub fn doors(&self) -> picogent_web::DoorLimits {
        picogent_web::DoorLimits {
            header_timeout: std::time::Duration::from_millis(self.header_timeout_ms),
            max_connections: self.max_connections,
        }
    }

    /// How long an inspector session lasts, and how many are kept.
    pub fn sessions(&self) -> picogent_web::SessionLimits {
        picogent_web::SessionLimits {
            idle: Some(std::time::Duration::from_millis(self.session_idle_ms)),
            lifetime: Some(std::time::Duration::from_millis(self.session_lifetime_ms)),
            ..picogent_web::SessionLimits::default()
        }
    }

    /// The board's page of the task `id`, for the run inspector.
    pub fn task_link(&self, tracker_url: &str, id: &str) -> String {
        link(self.task_link.as_deref(), tracker_url, "tasks", id)
    }

    /// The board's page of the message `id` (a thread's first message), for the run inspector.
    pub fn message_link(&self, tracker_url: &str, id: &str) -> String {
        link(self.message_link.as_deref(), tracker_url, "messages", id)
    }
}

/// `template` with the id in it, or the reference board's page `{tracker_url}/{path}/{id}`.
fn link(template: Option<&str>, tracker_url: &str, path: &str, id: &str) -> String {
    match template {
        Some(template) => template.replace("{id}", id),
        None => format!("{}/{path}/{id}", tracker_url.trim_end_matches('/')),
    }
}

/// How `picogent run` makes sure it is the one active copy of its agent on the tracker: it keeps
/// a marker with a beat count in its member status, refuses to start while another copy's marker
/// moves, and stops acting when it finds a newer copy's marker there (`runtime::presence`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PresenceConfig {
    /// Check and keep the marker; `false` trusts the operator to run one copy per identity.
    pub check: bool,
    /// How often the marker is read and moved on, in milliseconds. A copy whose marker has not
    /// been confirmed for two beats holds its writes; a copy starting beside a stale marker
    /// watches it for two and a half beats before taking over; a fresh start waits two beats.
    pub heartbeat_ms: u64,
}

impl Default for PresenceConfig {
    fn default() -> Self {
        PresenceConfig { check: true, heartbeat_ms: 10_000 }
    }
}

/// Waiting for a person to give what a run asks for: an MCP server's elicitation
/// (docs/mcp-host.md), or the model's question (`ask_person`). The run is `awaiting_input`
/// meanwhile and holds no slot; `ask` mode's approvals wait `permissions.ask_timeout_ms`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ElicitationConfig {
    /// How long a question waits for its answer, in milliseconds; past it, it is cancelled and
    /// the thread is told so.
    pub timeout_ms: u64,
    /// How many times a call an MCP server answered with a link to complete (URL mode) is tried
    /// again after the person said it is done.
    pub url_retries: u32,
    /// Offer the model `ask_person`, a clarifying question to the person it works for, on task
    /// and chat runs. Off by default: its definition is sent with every turn of every run.
    pub ask_person: bool,
}

impl Default for ElicitationConfig {
    fn default() -> Self {
        ElicitationConfig { timeout_ms: 30 * 60 * 1000, url_retries: 3, ask_person: false }
    }
}

/// Replicas of one agent on one PostgreSQL state (`state.url`). Off: one copy per agent, held to
/// that by the agent's lock in the database.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct ReplicasConfig {
    /// Share the agent's work with the other replicas on the same `state.url` and `slug`.
    pub enabled: bool,
    /// How long the event stream's lease lasts, in milliseconds: a replica that holds it renews
    /// it every third of this; when it dies, another takes the stream over within about this
    /// long plus `poll_ms`.
    pub stream_lease_ms: u64,
    /// How long a run's lease lasts, in milliseconds: a run whose replica stopped renewing it for
    /// this long is resumed by another replica.
    pub run_lease_ms: u64,
    /// How often a replica looks for queued runs, inputs for its runs and the stream's lease,
    /// and beats its heartbeat, in milliseconds.
    pub poll_ms: u64,
}

impl Default for ReplicasConfig {
    fn default() -> Self {
        ReplicasConfig { enabled: false, stream_lease_ms: 6_000, run_lease_ms: 15_000, poll_ms: 500 }
    }
}

/// The range `presence.heartbeat_ms` must be in: below it the tracker is asked many times a
/// second; above it a copy taking over waits for hours.
pub const PRESENCE_HEARTBEAT_MS: std::ops::RangeInclusive<u64> = 100..=600_000;

/// Security of the MCP server's HTTP endpoint. Loopback hosts and origins are always allowed; the
/// lists add more. The bearer token itself lives in the environment, never in the file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// The environment variable holding the bearer token MCP clients must send over HTTP.
    pub token_env: String,
    /// Browser origins allowed besides loopback ones, with scheme and port, e.g.
    /// `https://app.example.com:443` (`:*` matches any port). A request with any other `Origin`
    /// header is refused with 403; requests without one (non-browser clients) pass.
    pub allowed_origins: Vec<String>,
    /// `Host` header values allowed besides `localhost`, `127.0.0.1` and `::1`, e.g.
    /// `agent.example.com` or `agent.example.com:8808`. Needed to listen on a non-loopback address.
    pub allowed_hosts: Vec<String>,
    /// Let the MCP `start_run` tool work a task that is not assigned to the agent.
    pub allow_unassigned_runs: bool,
}

impl Default for McpConfig {
    fn default() -> Self {
        McpConfig {
            token_env: "PICOGENT_MCP_TOKEN".to_string(),
            allowed_origins: Vec::new(),
            allowed_hosts: Vec::new(),
            allow_unassigned_runs: false,
        }
    }
}

/// One external MCP server: either a child process spoken to over stdio (`command`) or a
/// Streamable HTTP endpoint (`url`). Secrets are never written here: a header or env value may
/// name an environment variable as `${NAME}`, read when the server is connected.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct McpServerConfig {
    /// The program to start (stdio transport).
    #[serde(default)]
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    /// Extra environment of the child; values may contain `${NAME}`.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// The child's working folder; relative paths are taken from the config file's folder.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The Streamable HTTP endpoint, e.g. `https://example.com/mcp`.
    #[serde(default)]
    pub url: Option<String>,
    /// Extra HTTP headers; values may contain `${NAME}` (e.g. `"Bearer ${GITHUB_TOKEN}"`).
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    /// Whether the server's tool annotations are believed. An untrusted server's tools are never
    /// read-only and always count as destructive.
    #[serde(default)]
    pub trusted: bool,
    /// The server's tools offered, by their original names (globs `*`, `?`).
    #[serde(default)]
    pub tools: ServerToolsConfig,
    /// Timeout of one request to the server, in milliseconds; a call that runs out is cancelled.
    #[serde(default = "default_mcp_timeout_ms")]
    pub timeout_ms: u64,
    /// The largest message the server may send, in bytes as it is sent (JSON): a result past it
    /// fails its call at once, and no more of it is kept than this.
    #[serde(default = "default_mcp_max_result_bytes")]
    pub max_result_bytes: usize,
    /// The protocol version spoken with it: `2026-07-28` (discovery only) or `2025-11-25`
    /// (`initialize` only); unset, discovery first and `initialize` for a server that predates it.
    #[serde(default)]
    pub protocol: Option<String>,
}

/// `startup`: what reconciliation takes up at a start and after every reconnect.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct StartupConfig {
    /// Mentions older than this are history, not requests: reconciliation does not answer them
    /// (`0`: it answers none). Events replayed by a resume are not affected: they were missed,
    /// not old.
    pub answer_mentions_since: TextDuration,
}

impl Default for StartupConfig {
    fn default() -> Self {
        StartupConfig { answer_mentions_since: TextDuration(std::time::Duration::from_secs(15 * 60)) }
    }
}

/// A span of time written as text with a unit (`90s`, `15m`, `2h`, `1d`) or as a number of
/// seconds; `0` is none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TextDuration(pub std::time::Duration);

/// Why a text is not a [`TextDuration`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TextDurationError {
    /// Not a number with one of the units.
    #[error("{text:?} is not {}", TextDuration::EXPECTED)]
    NotDuration { text: String },
    /// A span of time too long to count in seconds.
    #[error("{text:?} is too long a span of time")]
    TooLong { text: String },
}

impl TextDuration {
    const EXPECTED: &str = "a span of time like 90s, 15m, 2h or 1d, or 0 for none";

    /// Reads `15m`, `90s`, `2h`, `1d`, `0`, or a bare number of seconds.
    pub fn parse(text: &str) -> Result<TextDuration, TextDurationError> {
        let text = text.trim();
        let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let seconds_per_unit = match unit.trim() {
            "" | "s" => 1,
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            _ => return Err(TextDurationError::NotDuration { text: text.to_string() }),
        };
        let number: u64 = number.parse().map_err(|_| TextDurationError::NotDuration { text: text.to_string() })?;
        number
            .checked_mul(seconds_per_unit)
            .map(|seconds| TextDuration(std::time::Duration::from_secs(seconds)))
            .ok_or_else(|| TextDurationError::TooLong { text: text.to_string() })
    }
}

impl std::fmt::Display for TextDuration {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let seconds = self.0.as_secs();
        match seconds {
            0 => f.write_str("0"),
            s if s % 86_400 == 0 => write!(f, "{}d", s / 86_400),
            s if s % 3_600 == 0 => write!(f, "{}h", s / 3_600),
            s if s % 60 == 0 => write!(f, "{}m", s / 60),
            s => write!(f, "{s}s"),
        }
    }
}

/// How long the agent's state keeps rows it only needs for a while (`state::retention`), in
/// milliseconds like every other duration in the file. The defaults keep months of running to a
/// small file; tests set seconds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct RetentionConfig {
    /// Processed event ids (the duplicate filter of the event stream). The resume point is never
    /// pruned.
    pub events_ms: u64,
    /// Once-only claims (messages taken in, notices posted); at least `events_ms`. A message's
    /// claim also stays until reconciliation can no longer find that message.
    pub claims_ms: u64,
    /// Finished runs, counted from their end; running runs and the newest run of each session are
    /// kept (the latter without its transcript).
    pub runs_ms: u64,
    /// Conversations not touched for this long; the next message in that thread starts fresh.
    pub sessions_ms: u64,
    /// How often pruning runs; the first time is a minute after start (or `interval_ms`, if
    /// shorter).
    pub interval_ms: u64,
}

impl Default for RetentionConfig {
    fn default() -> Self {
        const DAY_MS: u64 = 24 * 60 * 60 * 1000;
        RetentionConfig {
            events_ms: 7 * DAY_MS,
            claims_ms: 30 * DAY_MS,
            runs_ms: 90 * DAY_MS,
            sessions_ms: 30 * DAY_MS,
            interval_ms: 60 * 60 * 1000,
        }
    }
}

impl Serialize for TextDuration {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for TextDuration {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<TextDuration, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = TextDuration;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(TextDuration::EXPECTED)
            }
            fn visit_u64<E: serde::de::Error>(self, seconds: u64) -> Result<TextDuration, E> {
                Ok(TextDuration(std::time::Duration::from_secs(seconds)))
            }
            fn visit_i64<E: serde::de::Error>(self, seconds: i64) -> Result<TextDuration, E> {
                u64::try_from(seconds)
                    .map(|seconds| TextDuration(std::time::Duration::from_secs(seconds)))
                    .map_err(|_| E::custom(format!("{seconds} is not {}", TextDuration::EXPECTED)))
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<TextDuration, E> {
                TextDuration::parse(text).map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

fn default_mcp_timeout_ms() -> u64 {
    60_000
}
/// 4 MiB: far more than a model can read, little enough to hold while it is shaped.
pub const DEFAULT_MCP_MAX_RESULT_BYTES: usize = 4 * 1024 * 1024;
fn default_mcp_max_result_bytes() -> usize {
    DEFAULT_MCP_MAX_RESULT_BYTES
}
