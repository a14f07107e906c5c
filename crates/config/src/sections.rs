//! The agent's own sections of `agent.json`, the ones no crate below reads whole: http,
//! presence, elicitation, replicas, startup and retention, each with its defaults, and
//! [`TextDuration`], a span of time the file writes as text. The sections of the crates below are
//! theirs (`limits`: agent; `mcp`, `mcp_servers`: mcp; `llm`, `tracker`, `state`, …).

use serde::{Deserialize, Serialize};

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

    /// The board's page of the task `id`, for the run inspector and the standup's links.
    pub fn task_link(&self, tracker_url: &str, id: &str) -> String {
        self.task_pages(tracker_url).replace("{id}", id)
    }

    /// The board's page of the message `id` (a thread's first message), for the run inspector.
    pub fn message_link(&self, tracker_url: &str, id: &str) -> String {
        self.message_pages(tracker_url).replace("{id}", id)
    }

    /// Where the board shows a task: `task_link`, or the reference board's page
    /// `{tracker_url}/tasks/{id}`, with `{id}` where the task's id goes.
    pub fn task_pages(&self, tracker_url: &str) -> String {
        pages(self.task_link.as_deref(), tracker_url, "tasks")
    }

    /// Where the board shows a thread, as [`HttpConfig::task_pages`]: `message_link`, or
    /// `{tracker_url}/messages/{id}`.
    pub fn message_pages(&self, tracker_url: &str) -> String {
        pages(self.message_link.as_deref(), tracker_url, "messages")
    }
}

/// `template`, or the reference board's pages `{tracker_url}/{path}/{id}`.
fn pages(template: Option<&str>, tracker_url: &str, path: &str) -> String {
    match template {
        Some(template) => template.to_string(),
        None => format!("{}/{path}/{{id}}", tracker_url.trim_end_matches('/')),
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
