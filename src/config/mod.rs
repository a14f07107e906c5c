//! Configuration: `agent.json` plus `PICOGENT_*` environment overrides, loaded once at start-up
//! and passed down. Secrets are never in the file: the file names the environment variable that
//! holds each one (`tracker.token_env`, `llm.api_key_env`).
//!
//! Every struct refuses unknown fields, so a misspelt key is an error that names it, not a setting
//! silently ignored.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::retry::RetryConfig;

mod overrides;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// The agent's member slug on the tracker; it is who the agent acts as and what `@slug` means.
    pub slug: String,
    /// The agent's display name, used in the system prompt.
    pub name: String,
    /// What the agent is good at, told to the model in the system prompt.
    #[serde(default)]
    pub capabilities: Vec<String>,
    /// Which chat messages start a run.
    #[serde(default)]
    pub chat_listen: ChatListen,
    /// Which task events start a run.
    #[serde(default)]
    pub task_listen: TaskListen,
    /// Other agent members whose messages the agent may answer (all other bots are ignored).
    #[serde(default)]
    pub allowed_bots: Vec<String>,
    pub tracker: TrackerConfig,
    pub llm: LlmConfig,
    #[serde(default)]
    pub limits: Limits,
    #[serde(default)]
    pub state: StateConfig,
    #[serde(default)]
    pub http: HttpConfig,
    /// How `picogent mcp --http` and the runtime's `/mcp` endpoint admit clients.
    #[serde(default)]
    pub mcp: McpConfig,
    /// The folder holding `system.md`, `task_assigned.md` and `message_new.md`; relative paths
    /// are taken from the config file's folder.
    #[serde(default = "default_prompts_dir")]
    pub prompts_dir: PathBuf,
    /// External MCP servers whose tools join the agent's as `mcp__<server>__<tool>`
    /// (docs/mcp-host.md). The key is the server's name.
    #[serde(default)]
    pub mcp_servers: BTreeMap<String, McpServerConfig>,
    /// Which tools may run at all, and whether a human must approve destructive ones.
    #[serde(default)]
    pub permissions: PermissionsConfig,
    /// What the agent takes up when it starts, and after every reconnect.
    #[serde(default)]
    pub startup: StartupConfig,
    /// How long the state database keeps what it no longer needs, and how often it is pruned.
    #[serde(default)]
    pub retention: RetentionConfig,
    /// One active copy per agent identity across machines: the marker `picogent run` keeps in
    /// its member status on the tracker (`runtime::presence`).
    #[serde(default)]
    pub presence: PresenceConfig,
    /// Several `picogent run` of this agent sharing its PostgreSQL state: one holds the event
    /// stream, all run queued runs (`state::lease`, `runtime::replicas`).
    #[serde(default)]
    pub replicas: ReplicasConfig,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ChatListen {
    /// Only messages that mention the agent (or reply to it).
    #[default]
    Mentions,
    /// Every chat message the agent receives.
    All,
    /// Never answer chat.
    None,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TaskListen {
    /// Work every task assigned to the agent.
    #[default]
    Assigned,
    /// Ignore assignments.
    None,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TrackerConfig {
    /// The tracker's base URL, e.g. `http://127.0.0.1:8700`.
    pub url: String,
    /// The path prefix of the REST API and the event stream.
    #[serde(default = "default_api_prefix")]
    pub api_prefix: String,
    /// The environment variable holding the agent's bearer token.
    #[serde(default = "default_token_env")]
    pub token_env: String,
    /// Timeout of one HTTP request, in milliseconds.
    #[serde(default = "default_tracker_timeout_ms")]
    pub timeout_ms: u64,
    #[serde(default)]
    pub retry: RetryConfig,
}

impl TrackerConfig {
    /// `{url}{api_prefix}` without a trailing slash.
    pub fn api_base(&self) -> String {
        format!("{}{}", self.url.trim_end_matches('/'), self.api_prefix.trim_end_matches('/'))
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// An OpenAI-compatible base URL ending in `/v1`.
    pub base_url: String,
    pub model: String,
    /// The environment variable holding the API key; absent for local servers that need none.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Sent only when set: reasoning models refuse it.
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// Which request field carries the output cap: `max_completion_tokens` (OpenAI's current
    /// name, the default) or `max_tokens` (for servers that read only the older name).
    #[serde(default)]
    pub max_tokens_field: MaxTokensField,
    /// The model's context window in tokens: every request (system prompt, tools, the stored
    /// session, the current input) is kept within it.
    #[serde(default = "default_context_tokens")]
    pub context_tokens: u64,
    /// Timeout of one model request, in milliseconds (a streamed one: see `idle_timeout_ms`).
    #[serde(default = "default_llm_timeout_ms")]
    pub timeout_ms: u64,
    /// Read the answer as it is generated (server-sent events), bounded by `idle_timeout_ms`
    /// without a byte instead of one deadline for the whole answer: for slow local models.
    #[serde(default)]
    pub stream: bool,
    /// With `stream`, how long the server may send nothing before the request is given up.
    #[serde(default = "default_idle_timeout_ms")]
    pub idle_timeout_ms: u64,
    /// At most this many requests in flight to the endpoint at once (a local server with one
    /// slot queues the rest and lets them time out); unset: no cap.
    #[serde(default)]
    pub max_concurrent_requests: Option<u32>,
    /// Whether the model may ask for several tool calls in one turn. Sent only when set (some
    /// servers refuse the field); `false` is also enforced by picogent itself, for servers that
    /// ignore it: one call of a turn runs, the others are answered with an error.
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    /// What the model costs, per million tokens; with it, runs show their cost and
    /// `limits.max_cost_per_day` caps the day's spend in money.
    #[serde(default)]
    pub price: Option<Price>,
    #[serde(default)]
    pub retry: RetryConfig,
}

impl LlmConfig {
    /// The API key from the variable `api_key_env` names; `None` when it names none (local
    /// servers). A named variable that is unset or empty is an error saying which.
    pub fn api_key(&self) -> Result<Option<crate::secret::Secret>, crate::secret::SecretError> {
        self.api_key_env.as_deref().map(crate::secret::Secret::from_env).transpose()
    }

    /// `model` at `base_url`, with every other field at its default.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> LlmConfig {
        LlmConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key_env: None,
            temperature: None,
            max_output_tokens: None,
            max_tokens_field: MaxTokensField::default(),
            context_tokens: default_context_tokens(),
            timeout_ms: default_llm_timeout_ms(),
            stream: false,
            idle_timeout_ms: default_idle_timeout_ms(),
            max_concurrent_requests: None,
            parallel_tool_calls: None,
            price: None,
            retry: RetryConfig::default(),
        }
    }
}

/// The request field that carries the output cap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum MaxTokensField {
    #[default]
    MaxCompletionTokens,
    MaxTokens,
}

/// A model's price, in any currency, per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_million: f64,
    pub output_per_million: f64,
}

impl Price {
    /// The cost of `prompt` input and `completion` output tokens.
    pub fn cost(&self, prompt: u64, completion: u64) -> f64 {
        (prompt as f64 * self.input_per_million + completion as f64 * self.output_per_million) / 1_000_000.0
    }
}

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
    /// Replies the agent may post in one thread in an hour: the loop guard.
    pub max_replies_per_thread_per_hour: u32,
    /// Runs in flight at once.
    pub max_concurrent_runs: u32,
    /// Tool result text sent to the model is cut at this many bytes.
    pub max_tool_result_bytes: usize,
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

/// Where the agent keeps its state: `state.path` (a SQLite file) or `state.url` (a SQLite path,
/// `sqlite:<path>`, or `postgres://user@host:port/database`); one of the two, not both.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "StateSection", into = "StateSection")]
pub struct StateConfig {
    /// The agent's SQLite database (processed events, sessions, runs, spend) when the state is in
    /// SQLite; `<path>.lock` beside it keeps a second copy off it. Its folder also holds the
    /// artifacts of external tools' results, whichever store holds the state.
    pub path: PathBuf,
    /// The PostgreSQL database holding the state instead, with no password in it (that comes
    /// from `PGPASSWORD` or `~/.pgpass`); its rows are keyed by the agent's slug.
    pub postgres_url: Option<String>,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig { path: PathBuf::from("./picogent.db"), postgres_url: None }
    }
}

/// The `state` section as agent.json spells it.
#[derive(Debug, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct StateSection {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    path: Option<PathBuf>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    url: Option<String>,
}

impl TryFrom<StateSection> for StateConfig {
    type Error = String;

    fn try_from(section: StateSection) -> Result<StateConfig, String> {
        let url = match (section.path, section.url) {
            (Some(_), Some(_)) => {
                return Err("`state.path` and `state.url` are both set: keep one (`state.path` for a SQLite \
                     file, `state.url` for a SQLite path or a postgres:// URL)"
                    .to_string());
            }
            (Some(path), None) => return Ok(StateConfig { path, ..StateConfig::default() }),
            (None, None) => return Ok(StateConfig::default()),
            (None, Some(url)) => url,
        };
        if url.starts_with("postgres://") || url.starts_with("postgresql://") {
            crate::state::check_postgres_url(&url).map_err(|message| format!("`state.url` {message}"))?;
            return Ok(StateConfig { postgres_url: Some(url), ..StateConfig::default() });
        }
        let path = match url.strip_prefix("sqlite://").or_else(|| url.strip_prefix("sqlite:")) {
            Some(path) => path,
            None if url.contains("://") => {
                let scheme = url.split("://").next().unwrap_or_default();
                return Err(format!(
                    "`state.url`: a {scheme}:// database is not one picogent keeps its state in; expected a SQLite \
                     file path, sqlite:<path>, or postgres://user@host:port/database"
                ));
            }
            None => &url,
        };
        if path.is_empty() || path.starts_with(":memory:") {
            return Err("`state.url`: expected the path of a SQLite file after `sqlite:` (an in-memory database \
                 would forget everything at exit)"
                .to_string());
        }
        Ok(StateConfig { path: PathBuf::from(path), ..StateConfig::default() })
    }
}

impl From<StateConfig> for StateSection {
    fn from(config: StateConfig) -> StateSection {
        match config.postgres_url {
            Some(url) => StateSection { path: None, url: Some(url) },
            None => StateSection { path: Some(config.path), url: None },
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Where `picogent run` serves `/healthz`, `/readyz`, `/metrics` and the run inspector (`/`).
    pub listen: String,
    /// The environment variable holding the run inspector's token, needed when `listen` is not
    /// a loopback address (a loopback listener needs no login).
    pub ui_token_env: String,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig { listen: "127.0.0.1:9464".to_string(), ui_token_env: "PICOGENT_UI_TOKEN".to_string() }
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
}

/// The permission policy over every tool, the tracker's included (`tools::policy`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct PermissionsConfig {
    /// Public tool names or globs (`*`, `?`) that may run; empty means all.
    pub allowed_tools: Vec<String>,
    /// Public tool names or globs that never run; wins over `allowed_tools`.
    pub disallowed_tools: Vec<String>,
    pub mode: PermissionMode,
    /// In `ask` mode, how long to wait for a human's yes or no before the call is denied.
    pub ask_timeout_ms: u64,
    /// In `ask` mode, public tool names or globs whose consequential calls need a human's yes, in
    /// addition to every tool annotated as destructive. A tracker tool judges which of its calls
    /// are consequential (`update_task` to `done`, `assign_task` to someone else); a listed tool
    /// that cannot tell (an external one) always asks. Empty: the annotations alone decide.
    pub ask_tools: Vec<String>,
}

impl Default for PermissionsConfig {
    fn default() -> Self {
        PermissionsConfig {
            allowed_tools: Vec::new(),
            disallowed_tools: Vec::new(),
            mode: PermissionMode::Auto,
            ask_timeout_ms: 300_000,
            ask_tools: default_ask_tools(),
        }
    }
}

/// The tracker tools that reassign, reject or close a task, or rewrite what it asks for. None of
/// the 23 deletes anything; `take_task` cannot take a task from someone else (the tracker refuses).
pub fn default_ask_tools() -> Vec<String> {
    ["update_task", "assign_task", "reject_task"].map(str::to_string).to_vec()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionMode {
    /// Every allowed tool runs.
    #[default]
    Auto,
    /// Only read-only tools run.
    ReadOnly,
    /// A destructive tool, or a consequential call of a tool in `ask_tools`, runs only after a
    /// human member answers `yes` in the conversation.
    Ask,
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

impl TextDuration {
    const EXPECTED: &str = "a span of time like 90s, 15m, 2h or 1d, or 0 for none";

    /// Reads `15m`, `90s`, `2h`, `1d`, `0`, or a bare number of seconds.
    pub fn parse(text: &str) -> Result<TextDuration, String> {
        let text = text.trim();
        let split = text.find(|c: char| !c.is_ascii_digit()).unwrap_or(text.len());
        let (number, unit) = text.split_at(split);
        let seconds_per_unit = match unit.trim() {
            "" | "s" => 1,
            "m" => 60,
            "h" => 3_600,
            "d" => 86_400,
            _ => return Err(format!("{text:?} is not {}", Self::EXPECTED)),
        };
        let number: u64 = number.parse().map_err(|_| format!("{text:?} is not {}", Self::EXPECTED))?;
        number
            .checked_mul(seconds_per_unit)
            .map(|seconds| TextDuration(std::time::Duration::from_secs(seconds)))
            .ok_or_else(|| format!("{text:?} is too long a span of time"))
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
fn default_prompts_dir() -> PathBuf {
    PathBuf::from("prompts")
}
fn default_api_prefix() -> String {
    "/api".to_string()
}
fn default_token_env() -> String {
    "TEAMBOARD_TOKEN".to_string()
}
fn default_tracker_timeout_ms() -> u64 {
    10_000
}
fn default_llm_timeout_ms() -> u64 {
    120_000
}
fn default_idle_timeout_ms() -> u64 {
    30_000
}
/// Large enough for the prompt, the tools and a long session on current models; local servers
/// with a smaller window set it.
fn default_context_tokens() -> u64 {
    32_768
}

/// Why a configuration could not be loaded. Each says which file and, where it can, which field.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    #[error("config file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("config file {path}: field `{field}`: {message}")]
    Field { path: PathBuf, field: String, message: String },
}

/// What an old file with a top-level `tools` section (or a `PICOGENT_TOOLS__*` override) is told:
/// the one tool policy is `permissions`.
const MOVED_TOOLS_SECTION: &str = "the section moved into `permissions`: rename `tools.allowed` to \
     `permissions.allowed_tools` and `tools.disallowed` to `permissions.disallowed_tools`";

/// The environment prefix of overrides: `PICOGENT_TRACKER__URL` sets `tracker.url`.
pub const ENV_PREFIX: &str = "PICOGENT";

impl Config {
    /// Loads `path`, then applies `PICOGENT_*` overrides from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with_env(path, std::env::vars())
    }

    /// Loads `path` with the overrides taken from `vars` instead of the process environment.
    pub fn load_with_env(path: &Path, vars: impl IntoIterator<Item = (String, String)>) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        // A variable that holds a secret (say `PICOGENT_MCP_TOKEN`) is not an override, even when
        // its name carries the prefix.
        let secret_vars = secret_env_names(&text);
        let mut overrides: config::Map<String, String> = vars
            .into_iter()
            .filter(|(key, _)| key.starts_with(&format!("{ENV_PREFIX}_")) && !secret_vars.contains(key))
            .map(|(key, value)| {
                let value = overrides::list_override(&key, &value).map_err(|message| ConfigError::Field {
                    path: path.to_path_buf(),
                    field: key.clone(),
                    message,
                })?;
                Ok((key, value))
            })
            .collect::<Result<_, ConfigError>>()?;
        // `PICOGENT_PERMISSIONS__ASK_TOOLS='[]'` empties the list: set here, not split from "".
        let empty_lists: Vec<String> = overrides
            .iter()
            .filter(|(_, value)| value.is_empty())
            .filter_map(|(key, _)| overrides::list_field(key))
            .collect();
        overrides.retain(|key, value| !(value.is_empty() && overrides::list_field(key).is_some()));
        let environment = config::Environment::with_prefix(ENV_PREFIX)
            .prefix_separator("_")
            .separator("__")
            .try_parsing(true)
            .list_separator(",");
        let environment = overrides::LIST_FIELDS
            .iter()
            .fold(environment, |environment, field| environment.with_list_parse_key(field))
            .source(Some(overrides));
        let invalid =
            |e: config::ConfigError| ConfigError::Invalid { path: path.to_path_buf(), message: e.to_string() };
        let builder = config::Config::builder()
            .add_source(config::File::from_str(&text, config::FileFormat::Json))
            .add_source(environment);
        let builder = empty_lists
            .iter()
            .try_fold(builder, |builder, field| builder.set_override(field, Vec::<String>::new()))
            .map_err(invalid)?;
        let built = builder.build().map_err(invalid)?;
        if built.get::<config::Value>("tools").is_ok() {
            return Err(ConfigError::Field {
                path: path.to_path_buf(),
                field: "tools".to_string(),
                message: MOVED_TOOLS_SECTION.to_string(),
            });
        }
        let mut config: Config = built
            .try_deserialize()
            .map_err(|e| ConfigError::Invalid { path: path.to_path_buf(), message: describe(&e) })?;
        let base = path.parent().unwrap_or(Path::new("."));
        if config.prompts_dir.is_relative() {
            config.prompts_dir = base.join(&config.prompts_dir);
        }
        for server in config.mcp_servers.values_mut() {
            if let Some(cwd) = &server.cwd
                && cwd.is_relative()
            {
                server.cwd = Some(base.join(cwd));
            }
        }
        config.validate(path)?;
        Ok(config)
    }

    /// Checks what types alone cannot: values in range, URLs that parse, names that are sane.
    pub fn validate(&self, path: &Path) -> Result<(), ConfigError> {
        self.check_identity()
            .and_then(|()| self.check_llm())
            .and_then(|()| self.check_numbers())
            .and_then(|()| self.check_mcp_servers())
            .and_then(|()| self.check_permissions())
            .and_then(|()| self.check_retention())
            .and_then(|()| self.check_presence())
            .and_then(|()| self.check_replicas())
            .map_err(|(field, message)| ConfigError::Field { path: path.to_path_buf(), field, message })
    }

    fn check_identity(&self) -> Result<(), Problem> {
        if !slug_ok(&self.slug) {
            return problem("slug", "expected a member slug: letters, digits, '-' or '_'");
        }
        if self.name.trim().is_empty() {
            return problem("name", "expected a non-empty display name");
        }
        for (name, url) in [("tracker.url", &self.tracker.url), ("llm.base_url", &self.llm.base_url)] {
            check_url(name, url)?;
        }
        if !self.tracker.api_prefix.is_empty() && !self.tracker.api_prefix.starts_with('/') {
            return problem("tracker.api_prefix", "expected a path starting with '/', or empty");
        }
        for (name, variable) in [
            ("tracker.token_env", &self.tracker.token_env),
            ("mcp.token_env", &self.mcp.token_env),
            ("http.ui_token_env", &self.http.ui_token_env),
        ] {
            if variable.trim().is_empty() {
                return problem(name, "expected the name of an environment variable");
            }
        }
        if self.http.listen.parse::<std::net::SocketAddr>().is_err() {
            return problem("http.listen", "expected an address like 127.0.0.1:9464");
        }
        Ok(())
    }

    fn check_llm(&self) -> Result<(), Problem> {
        if self.llm.model.trim().is_empty() {
            return problem("llm.model", "expected a model name");
        }
        if let Some(t) = self.llm.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return problem("llm.temperature", "expected a number from 0 to 2");
        }
        if self.llm.context_tokens < 1_024 {
            return problem("llm.context_tokens", "expected the model's context window, at least 1024 tokens");
        }
        if let Some(price) = self.llm.price
            && [price.input_per_million, price.output_per_million].iter().any(|p| p.is_nan() || *p < 0.0)
        {
            return problem("llm.price", "expected prices of 0 or more per million tokens");
        }
        if let Some(cost) = self.limits.max_cost_per_day {
            if cost.is_nan() || cost <= 0.0 {
                return problem("limits.max_cost_per_day", "expected an amount greater than 0");
            }
            if self.llm.price.is_none() {
                return problem("limits.max_cost_per_day", "needs llm.price to count the cost");
            }
        }
        Ok(())
    }

    fn check_numbers(&self) -> Result<(), Problem> {
        let positive = [
            ("tracker.timeout_ms", self.tracker.timeout_ms),
            ("llm.timeout_ms", self.llm.timeout_ms),
            ("llm.idle_timeout_ms", self.llm.idle_timeout_ms),
            ("llm.max_concurrent_requests", self.llm.max_concurrent_requests.map_or(1, u64::from)),
            ("limits.max_turns", self.limits.max_turns as u64),
            ("limits.max_tool_calls", self.limits.max_tool_calls as u64),
            ("limits.max_tokens_per_run", self.limits.max_tokens_per_run),
            ("limits.run_timeout_ms", self.limits.run_timeout_ms),
            ("limits.max_tokens_per_day", self.limits.max_tokens_per_day),
            ("limits.max_concurrent_runs", self.limits.max_concurrent_runs as u64),
            ("limits.max_tool_result_bytes", self.limits.max_tool_result_bytes as u64),
            ("limits.max_identical_calls", self.limits.max_identical_calls as u64),
            ("tracker.retry.max_attempts", self.tracker.retry.max_attempts as u64),
            ("llm.retry.max_attempts", self.llm.retry.max_attempts as u64),
            ("permissions.ask_timeout_ms", self.permissions.ask_timeout_ms),
        ];
        match positive.iter().find(|(_, value)| *value == 0) {
            Some((name, _)) => problem(name, "expected a number greater than 0"),
            None => Ok(()),
        }
    }

    fn check_mcp_servers(&self) -> Result<(), Problem> {
        for (name, server) in &self.mcp_servers {
            let at = |key: &str| format!("mcp_servers.{name}{key}");
            if !slug_ok(name) {
                return problem(&at(""), "expected a server name of letters, digits, '-' or '_'");
            }
            match (&server.command, &server.url) {
                (Some(command), None) => {
                    if command.trim().is_empty() {
                        return problem(&at(".command"), "expected a program to run");
                    }
                    if !server.headers.is_empty() {
                        return problem(&at(".headers"), "headers apply to a `url` server only");
                    }
                }
                (None, Some(url)) => {
                    check_url(&at(".url"), url)?;
                    if !server.args.is_empty() || !server.env.is_empty() || server.cwd.is_some() {
                        return problem(&at(""), "`args`, `env` and `cwd` apply to a `command` server only");
                    }
                }
                _ => return problem(&at(""), "expected exactly one of `command` (stdio) or `url` (Streamable HTTP)"),
            }
            if server.timeout_ms == 0 {
                return problem(&at(".timeout_ms"), "expected a number greater than 0");
            }
        }
        Ok(())
    }

    fn check_permissions(&self) -> Result<(), Problem> {
        for (name, patterns) in [
            ("permissions.allowed_tools", &self.permissions.allowed_tools),
            ("permissions.disallowed_tools", &self.permissions.disallowed_tools),
            ("permissions.ask_tools", &self.permissions.ask_tools),
        ] {
            for pattern in patterns {
                crate::tools::policy::check_pattern(pattern).map_err(|message| (name.to_string(), message))?;
            }
        }
        Ok(())
    }
}

impl Config {
    fn check_retention(&self) -> Result<(), Problem> {
        let retention = &self.retention;
        for (name, value) in [
            ("retention.events_ms", retention.events_ms),
            ("retention.claims_ms", retention.claims_ms),
            ("retention.runs_ms", retention.runs_ms),
            ("retention.sessions_ms", retention.sessions_ms),
            ("retention.interval_ms", retention.interval_ms),
        ] {
            if value == 0 {
                return problem(name, "expected a duration in milliseconds greater than 0 (7 days is 604800000)");
            }
        }
        // A claim is what stops a message found again from being answered twice; if it went
        // before the processed event, a late duplicate of that event would find neither.
        if retention.claims_ms < retention.events_ms {
            return problem(
                "retention.claims_ms",
                "expected at least retention.events_ms: claims must outlive the processed events they back up",
            );
        }
        Ok(())
    }

    fn check_presence(&self) -> Result<(), Problem> {
        if !PRESENCE_HEARTBEAT_MS.contains(&self.presence.heartbeat_ms) {
            return problem(
                "presence.heartbeat_ms",
                &format!(
                    "expected milliseconds between presence heartbeats, from {} to {}",
                    PRESENCE_HEARTBEAT_MS.start(),
                    PRESENCE_HEARTBEAT_MS.end()
                ),
            );
        }
        Ok(())
    }
}

impl Config {
    fn check_replicas(&self) -> Result<(), Problem> {
        let replicas = &self.replicas;
        if !replicas.enabled {
            return Ok(());
        }
        if self.state.postgres_url.is_none() {
            return problem(
                "replicas.enabled",
                "replicas share their state in PostgreSQL: set state.url to a postgres:// URL (a SQLite file is one \
                 process's), or set replicas.enabled to false",
            );
        }
        if !(100..=60_000).contains(&replicas.poll_ms) {
            return problem("replicas.poll_ms", "expected milliseconds from 100 to 60000");
        }
        if !(1_000..=300_000).contains(&replicas.stream_lease_ms) || replicas.stream_lease_ms < 3 * replicas.poll_ms {
            return problem(
                "replicas.stream_lease_ms",
                "expected milliseconds from 1000 to 300000, and at least three times replicas.poll_ms",
            );
        }
        if !(1_000..=3_600_000).contains(&replicas.run_lease_ms) || replicas.run_lease_ms < 3 * replicas.poll_ms {
            return problem(
                "replicas.run_lease_ms",
                "expected milliseconds from 1000 to 3600000, and at least three times replicas.poll_ms",
            );
        }
        Ok(())
    }
}

/// A field that is wrong, and what it should be.
type Problem = (String, String);

fn problem(field: &str, message: &str) -> Result<(), Problem> {
    Err((field.to_string(), message.to_string()))
}

/// A member slug: letters, digits, '-' or '_' (also what `picogent state migrate --agent` takes).
pub(crate) fn slug_ok(text: &str) -> bool {
    !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
}

fn check_url(field: &str, url: &str) -> Result<(), Problem> {
    if !(url.starts_with("http://") || url.starts_with("https://")) || url.len() < 8 {
        return problem(field, &format!("expected an http:// or https:// URL, got {url:?}"));
    }
    Ok(())
}

/// The environment variables the file names as holding secrets (`tracker.token_env`,
/// `llm.api_key_env`, `mcp.token_env`, `http.ui_token_env`, with their defaults), read leniently: a malformed file is
/// reported by the real parse.
fn secret_env_names(text: &str) -> Vec<String> {
    let file: serde_json::Value = serde_json::from_str(text).unwrap_or_default();
    let named = |section: &str, field: &str, default: Option<String>| {
        file.get(section).and_then(|s| s.get(field)).and_then(|v| v.as_str()).map(str::to_string).or(default)
    };
    [
        named("tracker", "token_env", Some(default_token_env())),
        named("llm", "api_key_env", None),
        named("mcp", "token_env", Some(McpConfig::default().token_env)),
        named("http", "ui_token_env", Some(HttpConfig::default().ui_token_env)),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// Rewrites a `config` deserialization error into "field `x`: what was wrong" where it can.
fn describe(error: &config::ConfigError) -> String {
    match error {
        config::ConfigError::Type { origin: _, unexpected, expected, key } => match key {
            Some(key) => format!("field `{key}`: expected {expected}, got {unexpected}"),
            None => format!("expected {expected}, got {unexpected}"),
        },
        config::ConfigError::At { error, origin: _, key } => match key {
            Some(key) => format!("field `{key}`: {}", describe(error)),
            None => describe(error),
        },
        // serde's words for a list, in the file's terms.
        config::ConfigError::Message(message) => {
            message.replace("expected a sequence", "expected a list (a JSON array)")
        }
        config::ConfigError::NotFound(key) => format!("field `{key}` is required but missing"),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests;
