//! Configuration: `agent.json` plus `PICOGENT_*` environment overrides, loaded once at start-up
//! and passed down. Secrets are never in the file: the file names the environment variable that
//! holds each one (`tracker.token_env`, `llm.api_key_env`).
//!
//! Every struct refuses unknown fields, so a misspelt key is an error that names it, not a setting
//! silently ignored.
//!
//! Here: [`Config`], its loading and [`ConfigError`]. The agent's own section types are in
//! `sections.rs`, the checks of [`Config::validate`] in `check.rs`, the list overrides in
//! `overrides.rs`.
//!
//! Invariants:
//! - no secret is in the file or in a [`Config`]: a section names the environment variable
//!   (`*_env`), and the value is read where it is used, as a `Secret` that never prints;
//! - an unknown key, a bad value or a failed check is a [`ConfigError`] that names the field (or
//!   the `PICOGENT_*` variable it came from) and says what to do, never a default taken silently;
//! - the sections of the crates below are theirs (the model client's `llm`, the state's
//!   `state`, the loop's `limits`, MCP's `mcp` and `mcp_servers`), each with its own checks: this
//!   crate embeds them, calls their checks and checks only how they fit with the rest.
//!
//! Where things are: `lib.rs` (`Config`, its loading, `ConfigError`: a JSON mistake shown on its
//! lines, a mistake an override causes blamed on its variable, an override of `state.url` or
//! `state.path` replacing the file's other); `sections.rs` (the agent's own sections:
//! `http`, `replicas`, …); `check.rs` (`Config::validate`); `overrides.rs` (list overrides).
//! The sections the crates below read are theirs: `TrackerConfig` (tracker), `StateConfig` (state),
//! `PermissionsConfig` and `DelegationConfig` (tools), `LlmConfig` (llm), `Limits` (agent), `McpConfig` and
//! `McpServerConfig` (mcp), the `workspaces` and `schedules` sections.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod check;
use picogent_support::choice;
mod overrides;
mod sections;

pub use overrides::ListOverrideError;
pub use picogent_agent::Limits;
pub use picogent_llm::config::{Api, DEFAULT_MAX_OUTPUT_TOKENS, LlmConfig, MaxTokensField, Price};
pub use picogent_mcp::config::{McpConfig, McpServerConfig, ServerToolsConfig};
pub use picogent_state::StateConfig;
pub use picogent_tools::{DelegationConfig, PermissionMode, PermissionsConfig, RunScope, default_ask_tools};
pub use picogent_tracker::TrackerConfig;
pub use sections::{
    ElicitationConfig, HttpConfig, PRESENCE_HEARTBEAT_MS, PresenceConfig, ReplicasConfig, RetentionConfig,
    StartupConfig, TextDuration, TextDurationError,
};

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
    #[serde(default, deserialize_with = "choice::one_of")]
    pub chat_listen: ChatListen,
    /// Which task events start a run.
    #[serde(default, deserialize_with = "choice::one_of")]
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
    /// How long a question to a person (an MCP elicitation, the model's `ask_person`) waits.
    #[serde(default)]
    pub elicitation: ElicitationConfig,
    /// Whether a task run may break its task into sub-tasks (`plan_subtasks`), and the bounds of
    /// a plan (`picogent_tools::delegation`).
    #[serde(default)]
    pub delegation: DelegationConfig,
    /// One active copy per agent identity across machines: the marker `picogent run` keeps in
    /// its member status on the tracker (`runtime::presence`).
    #[serde(default)]
    pub presence: PresenceConfig,
    /// Several `picogent run` of this agent sharing its PostgreSQL state: one holds the event
    /// stream, all run queued runs (`state::lease`, `runtime::replicas`).
    #[serde(default)]
    pub replicas: ReplicasConfig,
    /// The repositories tasks are worked in, a git workspace per task, and the coding agents
    /// that work there (`picogent_workspace`, docs/coding-agents.md).
    #[serde(default)]
    pub workspaces: picogent_workspace::WorkspacesConfig,
    /// Scheduled jobs by name: a standup digest, stale-task nudges, a prompt run on a cron
    /// pattern in a time zone (`picogent_schedule`, docs/schedules.md).
    #[serde(default)]
    pub schedules: picogent_schedule::SchedulesConfig,
    /// Review handed to another agent: who reviews this agent's pushed branches, for how many
    /// rounds, and where an approved task goes (`picogent_workspace::review`).
    #[serde(default)]
    pub review: picogent_workspace::ReviewConfig,
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

fn default_prompts_dir() -> PathBuf {
    PathBuf::from("prompts")
}

/// Why a configuration could not be loaded. Each says where the mistake is: the file (and, where
/// it can, the field, or the line), or the `PICOGENT_*` variable that overrides the file.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read config file {path}: {source}")]
    Read { path: PathBuf, source: std::io::Error },
    /// The file is not JSON: where, in its own lines.
    #[error("config file {path}: {message} at line {line}, column {column}:\n{excerpt}")]
    Syntax { path: PathBuf, line: usize, column: usize, message: String, excerpt: String },
    #[error("config file {path}: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("config file {path}: field `{field}`: {message}")]
    Field { path: PathBuf, field: String, message: String },
    /// The mistake is in an override, not in the file.
    #[error("environment variable {variable}: field `{field}`: {message}")]
    Override { variable: String, field: String, message: String },
    /// The override of a list field is not a list.
    #[error("environment variable {variable}: field `{field}`: {source}")]
    ListOverride { variable: String, field: String, source: ListOverrideError },
}

/// What an old file with a top-level `tools` section (or a `PICOGENT_TOOLS__*` override) is told:
/// the one tool policy is `permissions`.
const MOVED_TOOLS_SECTION: &str = "the section moved into `permissions`: rename `tools.allowed` to \
     `permissions.allowed_tools` and `tools.disallowed` to `permissions.disallowed_tools`";

/// The environment prefix of overrides: `PICOGENT_TRACKER__URL` sets `tracker.url`.
pub const ENV_PREFIX: &str = "PICOGENT";

/// The `PICOGENT_*` variables that override the file, by name, with their values as given.
type Overrides = BTreeMap<String, String>;

impl Config {
    /// The `review` section with the round limit `delegation.max_review_rounds` sets.
    pub fn review(&self) -> picogent_workspace::ReviewConfig {
        picogent_workspace::ReviewConfig { max_review_rounds: self.delegation.max_review_rounds, ..self.review.clone() }
    }

    /// Loads `path`, then applies `PICOGENT_*` overrides from the process environment.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        Config::load_with_env(path, std::env::vars())
    }

    /// Loads `path` with the overrides taken from `vars` instead of the process environment.
    pub fn load_with_env(path: &Path, vars: impl IntoIterator<Item = (String, String)>) -> Result<Config, ConfigError> {
        let text =
            std::fs::read_to_string(path).map_err(|source| ConfigError::Read { path: path.to_path_buf(), source })?;
        check_syntax(path, &text)?;
        // A variable that holds a secret (say `PICOGENT_MCP_TOKEN`) is not an override, even when
        // its name carries the prefix.
        let secret_vars = secret_env_names(&text);
        let overrides: Overrides = vars
            .into_iter()
            .filter(|(key, _)| key.starts_with(&format!("{ENV_PREFIX}_")) && !secret_vars.contains(key))
            .collect();
        load_text(path, &text, &overrides).map_err(|error| blame(path, &text, &overrides, error))
    }
}

/// The file's text with `overrides` applied, deserialized and checked.
fn load_text(path: &Path, text: &str, overrides: &Overrides) -> Result<Config, ConfigError> {
    let mut values = config::Map::new();
    for (variable, value) in overrides {
        let value = overrides::list_override(variable, value).map_err(|source| ConfigError::ListOverride {
            variable: variable.clone(),
            field: overrides::field_of(variable),
            source,
        })?;
        values.insert(variable.clone(), value);
    }
    // `PICOGENT_PERMISSIONS__ASK_TOOLS='[]'` empties the list: set here, not split from "".
    let empty_lists: Vec<String> =
        values.iter().filter(|(_, value)| value.is_empty()).filter_map(|(key, _)| overrides::list_field(key)).collect();
    values.retain(|key, value| !(value.is_empty() && overrides::list_field(key).is_some()));
    let environment = config::Environment::with_prefix(ENV_PREFIX)
        .prefix_separator("_")
        .separator("__")
        .try_parsing(true)
        .list_separator(",");
    let environment = overrides::LIST_FIELDS
        .iter()
        .fold(environment, |environment, field| environment.with_list_parse_key(field))
        .source(Some(values));
    let invalid = |e: config::ConfigError| ConfigError::Invalid { path: path.to_path_buf(), message: e.to_string() };
    let builder = config::Config::builder()
        .add_source(config::File::from_str(text, config::FileFormat::Json))
        .add_source(environment);
    let builder = empty_lists
        .iter()
        .try_fold(builder, |builder, field| builder.set_override(field, Vec::<String>::new()))
        .map_err(invalid)?;
    // The state is in one place: an override of one of `state.path` and `state.url` (the
    // twelve-factor way to point a deployment at its database) replaces the file's other one.
    let fields: Vec<String> = overrides.keys().map(|variable| overrides::field_of(variable)).collect();
    let builder = match (fields.iter().any(|f| f == "state.url"), fields.iter().any(|f| f == "state.path")) {
        (true, false) => builder.set_override("state.path", None::<String>).map_err(invalid)?,
        (false, true) => builder.set_override("state.url", None::<String>).map_err(invalid)?,
        _ => builder,
    };
    let built = builder.build().map_err(invalid)?;
    if built.get::<config::Value>("tools").is_ok() {
        return Err(ConfigError::Field {
            path: path.to_path_buf(),
            field: "tools".to_string(),
            message: MOVED_TOOLS_SECTION.to_string(),
        });
    }
    if built.get::<config::Value>("review.max_review_rounds").is_ok() {
        return Err(ConfigError::Field {
            path: path.to_path_buf(),
            field: "review.max_review_rounds".to_string(),
            message: "the round limit moved: rename it `delegation.max_review_rounds`".to_string(),
        });
    }
    let mut config: Config = built.try_deserialize().map_err(|e| match locate(&e) {
        (Some(field), message) => ConfigError::Field { path: path.to_path_buf(), field, message },
        (None, message) => ConfigError::Invalid { path: path.to_path_buf(), message },
    })?;
    let base = path.parent().unwrap_or(Path::new("."));
    if config.workspaces.root.is_relative() {
        config.workspaces.root = base.join(&config.workspaces.root);
    }
    if config.prompts_dir.is_relative() {
        config.prompts_dir = base.join(&config.prompts_dir);
    }
    for job in config.schedules.values_mut() {
        if let Some(prompt) = &job.prompt
            && prompt.is_relative()
        {
            job.prompt = Some(base.join(prompt));
        }
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

/// An error of the file with its overrides, told as the mistake of the override that causes it:
/// the one, among those that set the field in error (or a field in it, or the section it is
/// in), without which the file loads or fails otherwise. When none does, the file is at fault.
fn blame(path: &Path, text: &str, overrides: &Overrides, error: ConfigError) -> ConfigError {
    let (field, message) = match &error {
        ConfigError::Override { .. } | ConfigError::ListOverride { .. } => return error,
        ConfigError::Field { field, message, .. } => (Some(field.as_str()), message.clone()),
        ConfigError::Invalid { message, .. } => (None, message.clone()),
        ConfigError::Read { .. } | ConfigError::Syntax { .. } => return error,
    };
    let related = |set: &str| {
        field.is_none_or(|field| {
            set == field || set.starts_with(&format!("{field}.")) || field.starts_with(&format!("{set}."))
        })
    };
    let culprit = overrides.keys().find(|variable| {
        let set = overrides::field_of(variable);
        if !related(&set) {
            return false;
        }
        let mut without = overrides.clone();
        without.remove(*variable);
        match load_text(path, text, &without) {
            Ok(_) => true,
            Err(other) => other.to_string() != error.to_string(),
        }
    });
    match culprit {
        Some(variable) => ConfigError::Override {
            variable: variable.clone(),
            field: field.map_or_else(|| overrides::field_of(variable), str::to_string),
            message,
        },
        None => error,
    }
}

/// Checks that the file is JSON. A mistake is shown with its line and the line before it: a
/// missing comma is only noticed on the line after it.
fn check_syntax(path: &Path, text: &str) -> Result<(), ConfigError> {
    let Err(error) = serde_json::from_str::<serde::de::IgnoredAny>(text) else { return Ok(()) };
    let (line, column) = (error.line(), error.column());
    let full = error.to_string();
    let message = full.strip_suffix(&format!(" at line {line} column {column}")).unwrap_or(&full).to_string();
    let lines: Vec<&str> = text.lines().collect();
    let at = line.saturating_sub(1).min(lines.len().saturating_sub(1));
    let before = lines[..at].iter().rposition(|l| !l.trim().is_empty());
    let width = (at + 1).to_string().len();
    let mut excerpt = String::new();
    if let Some(before) = before {
        excerpt.push_str(&format!("  {:>width$} | {}\n", before + 1, lines[before]));
    }
    let here = lines.get(at).copied().unwrap_or_default();
    excerpt.push_str(&format!("  {:>width$} | {here}\n", at + 1));
    // The caret under the column, keeping the line's own tabs so it lines up.
    let pad: String = here.chars().take(column.saturating_sub(1)).map(|c| if c == '\t' { '\t' } else { ' ' }).collect();
    excerpt.push_str(&format!("  {:>width$} | {pad}^", ""));
    let starts_line = here.chars().take(column.saturating_sub(1)).all(char::is_whitespace);
    if let Some(before) = before.filter(|_| starts_line && message.starts_with("expected `,`")) {
        excerpt.push_str(&format!("\n  is a comma missing at the end of line {}?", before + 1));
    }
    Err(ConfigError::Syntax { path: path.to_path_buf(), line, column, message, excerpt })
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
        named("tracker", "token_env", Some(picogent_tracker::DEFAULT_TOKEN_ENV.to_string())),
        named("llm", "api_key_env", None),
        named("mcp", "token_env", Some(McpConfig::default().token_env)),
        named("http", "ui_token_env", Some(HttpConfig::default().ui_token_env)),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// A `config` deserialization error as the field it is in (where it says) and what was wrong.
fn locate(error: &config::ConfigError) -> (Option<String>, String) {
    match error {
        config::ConfigError::Type { origin: _, unexpected, expected, key } => {
            (key.clone(), format!("expected {expected}, got {unexpected}"))
        }
        config::ConfigError::At { error, origin: _, key } => {
            let (inner, message) = locate(error);
            (key.clone().or(inner), message)
        }
        // serde's words for a list, in the file's terms.
        config::ConfigError::Message(message) => {
            (None, message.replace("expected a sequence", "expected a list (a JSON array)"))
        }
        config::ConfigError::NotFound(key) => (Some(key.clone()), "required but missing".to_string()),
        other => (None, other.to_string()),
    }
}

#[cfg(test)]
mod tests;
