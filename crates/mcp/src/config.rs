//! The MCP sections of `agent.json`, with their defaults and their checks: `mcp` (how the MCP
//! server's HTTP endpoint admits clients) and `mcp_servers` (the external servers the host
//! connects). The config crate embeds them and re-exports them.

use std::collections::BTreeMap;
use std::path::PathBuf;

use picogent_support::setting::{Problem, problem};
use serde::{Deserialize, Serialize};

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

impl McpConfig {
    /// Checks what types alone cannot; the problem names its field.
    pub fn check(&self) -> Result<(), Problem> {
        if self.token_env.trim().is_empty() {
            return problem("mcp.token_env", "expected the name of an environment variable");
        }
        Ok(())
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

fn default_mcp_timeout_ms() -> u64 {
    60_000
}

/// 4 MiB: far more than a model can read, little enough to hold while it is shaped.
pub const DEFAULT_MCP_MAX_RESULT_BYTES: usize = 4 * 1024 * 1024;

fn default_mcp_max_result_bytes() -> usize {
    DEFAULT_MCP_MAX_RESULT_BYTES
}

/// What `mcp_servers.*.max_result_bytes` may be: every message of the server must fit (its tool
/// list too), and the limit is what bounds the memory one message takes.
const MCP_RESULT_BYTES: std::ops::RangeInclusive<usize> = 64 * 1024..=1024 * 1024 * 1024;

/// Checks the `mcp_servers` section, server by server in the order of their names: a sane name,
/// exactly one transport with only its own fields, a URL without a credential, values in range.
/// The problem names its field (`mcp_servers.<name>.url`).
pub fn check_servers(servers: &BTreeMap<String, McpServerConfig>) -> Result<(), Problem> {
    servers.iter().try_for_each(|(name, server)| server.check(name))
}

impl McpServerConfig {
    fn check(&self, name: &str) -> Result<(), Problem> {
        let at = |key: &str| format!("mcp_servers.{name}{key}");
        if !picogent_tracker::model::slug_ok(name) {
            return problem(&at(""), "expected a server name of letters, digits, '-' or '_'");
        }
        match (&self.command, &self.url) {
            (Some(command), None) => {
                if command.trim().is_empty() {
                    return problem(&at(".command"), "expected a program to run");
                }
                if !self.headers.is_empty() {
                    return problem(&at(".headers"), "headers apply to a `url` server only");
                }
            }
            (None, Some(url)) => {
                if let Some(message) = picogent_support::secret::not_an_http_url(url) {
                    return problem(&at(".url"), &message);
                }
                let instead = format!(
                    "send it as a header from an environment variable: \"headers\": {{\"Authorization\": \"Bearer ${{TOKEN}}\"}} in mcp_servers.{name}"
                );
                if let Some(message) = picogent_support::secret::credential_in_setting(url, &instead) {
                    return problem(&at(".url"), &message);
                }
                if !self.args.is_empty() || !self.env.is_empty() || self.cwd.is_some() {
                    return problem(&at(""), "`args`, `env` and `cwd` apply to a `command` server only");
                }
            }
            _ => return problem(&at(""), "expected exactly one of `command` (stdio) or `url` (Streamable HTTP)"),
        }
        if self.timeout_ms == 0 {
            return problem(&at(".timeout_ms"), "expected a number greater than 0");
        }
        if let Some(protocol) = &self.protocol
            && !["2026-07-28", "2025-11-25"].contains(&protocol.as_str())
        {
            return problem(
                &at(".protocol"),
                "expected \"2026-07-28\" or \"2025-11-25\" (or no `protocol`: discovery first, then initialize)",
            );
        }
        if !MCP_RESULT_BYTES.contains(&self.max_result_bytes) {
            return problem(
                &at(".max_result_bytes"),
                "expected a size in bytes from 65536 (64 KiB: the server's lists must fit too) to 1073741824 (1 GiB)",
            );
        }
        Ok(())
    }
}
