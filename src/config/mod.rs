//! Configuration: `agent.json` plus `PICOGENT_*` environment overrides, loaded once at start-up
//! and passed down. Secrets are never in the file: the file names the environment variable that
//! holds each one (`tracker.token_env`, `llm.api_key_env`).
//!
//! Every struct refuses unknown fields, so a misspelt key is an error that names it, not a setting
//! silently ignored.
//!
//! Here: [`Config`], its loading and [`ConfigError`]. The section types are in `sections.rs` and
//! `llm.rs`, the checks of [`Config::validate`] in `check.rs`, the list overrides in `overrides.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

mod check;
mod llm;
mod overrides;
mod sections;

pub(crate) use check::slug_ok;
pub use llm::{LlmConfig, MaxTokensField, Price};
use sections::default_token_env;
pub use sections::{
    HttpConfig, Limits, McpConfig, McpServerConfig, PRESENCE_HEARTBEAT_MS, PermissionMode, PermissionsConfig,
    PresenceConfig, ReplicasConfig, RetentionConfig, RunScope, ServerToolsConfig, StartupConfig, StateConfig,
    TextDuration, TrackerConfig, default_ask_tools,
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

fn default_prompts_dir() -> PathBuf {
    PathBuf::from("prompts")
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
