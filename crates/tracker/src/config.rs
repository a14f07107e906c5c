//! The `tracker` section of `agent.json`: where the tracker is and how to reach it. The tracker
//! client owns it; the configuration embeds it.

use serde::{Deserialize, Serialize};

use picogent_support::retry::RetryConfig;

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

/// The environment variable of the agent's bearer token when `tracker.token_env` is not given.
pub const DEFAULT_TOKEN_ENV: &str = "TEAMBOARD_TOKEN";

fn default_api_prefix() -> String {
    "/api".to_string()
}
fn default_token_env() -> String {
    DEFAULT_TOKEN_ENV.to_string()
}
fn default_tracker_timeout_ms() -> u64 {
    10_000
}
