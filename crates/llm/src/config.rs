//! The `llm` section of `agent.json`, owned by the model client: the model's endpoint, the request fields it takes, the
//! bounds of one request, and its price.

use serde::{Deserialize, Serialize};

use picogent_support::retry::RetryConfig;

/// The cap of one answer when `llm.max_output_tokens` is not set. Long enough for a summary, a
/// plan or a tool call with a page of text in it; short enough that a model that runs on (a base
/// model repeating its prompt, a loop of the same sentence) is cut off in a minute or so on a
/// local server, not after many. Within a small window (`llm.context_tokens: 4096`) the loop asks
/// for what the window leaves, and keeps a quarter of it for the answer when it trims a session.
pub const DEFAULT_MAX_OUTPUT_TOKENS: u32 = 2048;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LlmConfig {
    /// The wire format: `openai` (chat completions, the default) or `anthropic` (the Messages
    /// API, with prompt caching).
    #[serde(default, deserialize_with = "picogent_support::choice::one_of")]
    pub api: Api,
    /// The API's base URL ending in `/v1` (`{base_url}/chat/completions` or `{base_url}/messages`
    /// is called).
    pub base_url: String,
    pub model: String,
    /// The environment variable holding the API key; absent for local servers that need none.
    #[serde(default)]
    pub api_key_env: Option<String>,
    /// Sent only when set: reasoning models refuse it.
    #[serde(default)]
    pub temperature: Option<f32>,
    /// The cap of one answer, in tokens; `None`: [`DEFAULT_MAX_OUTPUT_TOKENS`]. The loop asks
    /// for less when the run's token budget or the context window leaves less.
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    /// Which request field carries the output cap: `max_completion_tokens` (OpenAI's current
    /// name, the default) or `max_tokens` (for servers that read only the older name).
    #[serde(default, deserialize_with = "picogent_support::choice::one_of")]
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
    /// With `api: "anthropic"`, mark the stable prefix (tools, system prompt) and the
    /// conversation's last block for the server's prompt cache (`cache_control`). OpenAI-compatible
    /// servers cache a long prefix by themselves; picogent keeps it byte-identical either way.
    #[serde(default = "default_true")]
    pub prompt_cache: bool,
    #[serde(default)]
    pub retry: RetryConfig,
}

/// The wire format of the model's endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Api {
    /// `POST {base_url}/chat/completions`: OpenAI and every server compatible with it.
    #[default]
    Openai,
    /// `POST {base_url}/messages`: Anthropic's Messages API (and servers that speak it).
    Anthropic,
}

impl Api {
    pub fn as_str(self) -> &'static str {
        match self {
            Api::Openai => "openai",
            Api::Anthropic => "anthropic",
        }
    }
}

fn default_true() -> bool {
    true
}

impl LlmConfig {
    /// The API key from the variable `api_key_env` names; `None` when it names none (local
    /// servers). A named variable that is unset or empty is an error saying which.
    pub fn api_key(&self) -> Result<Option<picogent_support::secret::Secret>, picogent_support::secret::SecretError> {
        self.api_key_env.as_deref().map(picogent_support::secret::Secret::from_env).transpose()
    }

    /// `model` at `base_url`, with every other field at its default.
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> LlmConfig {
        LlmConfig {
            api: Api::default(),
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
            prompt_cache: true,
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
///
/// Input read from the server's prompt cache and input written to it have their own rates (a
/// tenth of the input price and a quarter more, on Anthropic's list; half or a tenth on
/// OpenAI's). Unset, they cost what other input costs: a spend figure is never below the bill.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Price {
    pub input_per_million: f64,
    pub output_per_million: f64,
    /// Input tokens read from the prompt cache; unset: `input_per_million`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_read_per_million: Option<f64>,
    /// Input tokens written to the prompt cache; unset: `input_per_million`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cache_write_per_million: Option<f64>,
}

impl Price {
    /// Input and output rates only; cached input priced as other input.
    pub fn new(input_per_million: f64, output_per_million: f64) -> Price {
        Price { input_per_million, output_per_million, cache_read_per_million: None, cache_write_per_million: None }
    }

    /// The cost of `usage`: its uncached input, its cache reads and writes and its output, each
    /// at its rate.
    pub fn cost(&self, usage: &crate::Usage) -> f64 {
        let cached = usage.cached_tokens.min(usage.prompt_tokens);
        let written = usage.cache_write_tokens.min(usage.prompt_tokens - cached);
        let uncached = usage.prompt_tokens - cached - written;
        (uncached as f64 * self.input_per_million
            + cached as f64 * self.cache_read_per_million.unwrap_or(self.input_per_million)
            + written as f64 * self.cache_write_per_million.unwrap_or(self.input_per_million)
            + usage.completion_tokens as f64 * self.output_per_million)
            / 1_000_000.0
    }

    /// The dearest rate of a token, input or output: what a token left in a money budget is
    /// counted at.
    pub fn dearest_per_million(&self) -> f64 {
        [
            self.input_per_million,
            self.output_per_million,
            self.cache_write_per_million.unwrap_or(self.input_per_million),
        ]
        .into_iter()
        .fold(0.0, f64::max)
    }
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
