//! The checks of the model endpoint for `picogent check`: `GET {base_url}/models`, and one small
//! chat request with one tool, sent with the configured parameters, to see whether the model
//! will work before the first task does. `picogent run` asks the same once at start
//! ([`check_model`]) and keeps its [`ModelCheck`].

use std::time::Duration;

use crate::config::LlmConfig;
use picogent_support::secret::Secret;

/// The client of the two quick questions (`/models`, `/props`): at most 10 s each.
fn quick_client(config: &LlmConfig) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder().timeout(Duration::from_millis(config.timeout_ms.min(10_000))).build()
}

/// The request with the key where `llm.api`'s format takes it: `Authorization: Bearer` for
/// OpenAI's, `x-api-key` (and the version) for the Messages API.
fn authorized(config: &LlmConfig, request: reqwest::RequestBuilder, key: Option<&Secret>) -> reqwest::RequestBuilder {
    match (config.api, key) {
        (crate::config::Api::Openai, Some(key)) => request.bearer_auth(key.expose()),
        (crate::config::Api::Openai, None) => request,
        (crate::config::Api::Anthropic, key) => {
            let request = request.header("anthropic-version", crate::anthropic::ANTHROPIC_VERSION);
            match key {
                Some(key) => request.header("x-api-key", key.expose()),
                None => request,
            }
        }
    }
}

/// Why the endpoint's list of models does not show the configured model served. Each message
/// names the endpoint (`base`, `llm.base_url` without a trailing `/`) and the setting to check.
#[derive(Debug, thiserror::Error)]
pub enum ProbeError {
    /// The HTTP client could not be built (its TLS backend failed to start).
    #[error("{0}")]
    Client(#[source] reqwest::Error),
    /// No answer: the server is down, or `llm.base_url` points elsewhere.
    #[error("cannot reach {base}: {source} (is llm.base_url right, and the server up?)")]
    Unreachable { base: String, source: reqwest::Error },
    /// HTTP 401 or 403: the key is missing or wrong.
    #[error("{base} refused the API key (HTTP {status}): check the variable named by llm.api_key_env")]
    KeyRefused { base: String, status: reqwest::StatusCode },
    /// Another status that is not a success.
    #[error("{base}/models answered HTTP {status}")]
    Status { base: String, status: reqwest::StatusCode },
    /// The list of models is over [`crate::MAX_ANSWER_BYTES`]; the rest was not read.
    #[error(
        "{base}/models answered with more than {limit_bytes} bytes, so it was not read: is llm.base_url a model server?"
    )]
    TooLarge { base: String, limit_bytes: usize },
    /// The server lists models, and `llm.model` is not one of them; `listed` holds their ids.
    #[error("{base} does not serve llm.model {model:?}: it lists {}; set llm.model to the one to use", some_of(listed))]
    ModelNotListed { base: String, model: String, listed: Vec<String> },
}

/// The first few ids, quoted, and how many more there are.
fn some_of(ids: &[String]) -> String {
    const SHOWN: usize = 8;
    let more = if ids.len() > SHOWN { format!(" and {} more", ids.len() - SHOWN) } else { String::new() };
    let shown: Vec<String> = ids.iter().take(SHOWN).map(|id| format!("{id:?}")).collect();
    format!("{}{more}", shown.join(", "))
}

/// Asks the endpoint for its models: an error when the list it gives does not hold the
/// configured one (by id, or one of llama.cpp's `aliases`); an empty list passes, since some
/// servers list none. `Ok` says what was found, in a sentence.
pub async fn probe(config: &LlmConfig, api_key: Option<Secret>) -> Result<String, ProbeError> {
    let base = config.base_url.trim_end_matches('/');
    let http = quick_client(config).map_err(ProbeError::Client)?;
    let request = authorized(config, http.get(format!("{base}/models")), api_key.as_ref());
    let response = request
        .send()
        .await
        .map_err(|e| ProbeError::Unreachable { base: base.to_string(), source: e.without_url() })?;
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return Err(ProbeError::KeyRefused { base: base.to_string(), status });
    }
    if !status.is_success() {
        return Err(ProbeError::Status { base: base.to_string(), status });
    }
    let body = match crate::http::read_at_most(response, crate::MAX_ANSWER_BYTES).await {
        Ok((_, false)) => {
            return Err(ProbeError::TooLarge { base: base.to_string(), limit_bytes: crate::MAX_ANSWER_BYTES });
        }
        Ok((body, true)) => serde_json::from_slice(&body).unwrap_or_default(),
        Err(_) => serde_json::Value::Null,
    };
    let models = body["data"].as_array().cloned().unwrap_or_default();
    let names = |model: &serde_json::Value| -> Vec<String> {
        let aliases = model["aliases"].as_array().into_iter().flatten();
        model["id"].as_str().into_iter().chain(aliases.filter_map(|alias| alias.as_str())).map(str::to_string).collect()
    };
    let listed: Vec<String> = models.iter().flat_map(names).collect();
    if listed.is_empty() {
        return Ok(format!("{base} answers (it lists no models, so llm.model {} is not checked)", config.model));
    }
    if listed.contains(&config.model) {
        return Ok(format!("{base} serves {}", config.model));
    }
    Err(ProbeError::ModelNotListed {
        base: base.to_string(),
        model: config.model.clone(),
        listed: models.iter().filter_map(|model| model["id"].as_str()).map(str::to_string).collect(),
    })
}

/// What a llama.cpp-style server says about itself at `GET /props` (next to `/v1`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ServerProps {
    /// `build_info`, e.g. `b11434-…`.
    pub build: Option<String>,
    /// `chat_template_caps.supports_tools`: `false` means the server drops the `tools` it is sent.
    pub supports_tools: Option<bool>,
    /// `default_generation_settings.n_ctx`: the context of one slot, in the model's tokens.
    pub context_tokens: Option<u64>,
    /// `total_slots`: requests the server works on at once; the rest wait in its queue.
    pub slots: Option<u64>,
}

/// Asks the server for `/props` (llama.cpp's server has it; most others do not): `None` when it
/// does not answer with JSON that looks like it.
pub async fn server_props(config: &LlmConfig, api_key: Option<Secret>) -> Option<ServerProps> {
    let base = config.base_url.trim_end_matches('/');
    let root = base.strip_suffix("/v1").unwrap_or(base);
    let http = quick_client(config).ok()?;
    let request = authorized(config, http.get(format!("{root}/props")), api_key.as_ref());
    let response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let (body, true) = crate::http::read_at_most(response, crate::MAX_ANSWER_BYTES).await.ok()? else { return None };
    let body: serde_json::Value = serde_json::from_slice(&body).ok()?;
    let props = ServerProps {
        build: body["build_info"].as_str().map(str::to_string),
        supports_tools: body["chat_template_caps"]["supports_tools"].as_bool(),
        context_tokens: body["default_generation_settings"]["n_ctx"].as_u64(),
        slots: body["total_slots"].as_u64(),
    };
    (props != ServerProps::default()).then_some(props)
}

/// What the tool-call probe found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolProbe {
    /// The model called the offered tool (`false`: it answered in text).
    pub called_tool: bool,
    /// The configured request parameters the server refused (each was left out to try again).
    pub refused_parameters: Vec<String>,
}

/// The one tool of the model check's request: a request offering this tool and no other is the
/// check (the offline model's script mode answers it outside the script).
pub const PROBE_TOOL: &str = "report_status";

/// Sends one small request with one tool, with the parameters `config` sends. A parameter the
/// server refuses is reported and left out for the next try, so every refused one is named.
/// Each request waits `llm.timeout_ms`, as a run's would: a server slow enough to fail the check
/// is one the runs would give up on too, and one the runs wait for passes it.
pub async fn probe_tool_call(config: &LlmConfig, api_key: Option<Secret>) -> Result<ToolProbe, crate::LlmError> {
    use crate::{ChatRequest, LlmError, Message};
    let mut config = LlmConfig {
        retry: picogent_support::retry::RetryConfig { max_attempts: 1, ..config.retry.clone() },
        ..config.clone()
    };
    let tools = [probe_tool()];
    let messages = [
        Message::system("You are a health check. Call the tool you are given."),
        Message::user("Call report_status with status \"ready\"."),
    ];
    let mut refused_parameters = Vec::new();
    // One try per parameter that can be left out, and the last.
    for _ in 0..5 {
        let chat = crate::chat_model(&config, api_key.clone())?;
        let request = ChatRequest { messages: &messages, tools: &tools, max_output_tokens: Some(256) };
        match chat.complete(&request).await {
            Ok(answer) => return Ok(ToolProbe { called_tool: !answer.tool_calls.is_empty(), refused_parameters }),
            Err(LlmError::ParameterRefused { parameter, status, message }) => {
                if !leave_out(&mut config, &parameter) || refused_parameters.contains(&parameter) {
                    return Err(LlmError::ParameterRefused { parameter, status, message });
                }
                refused_parameters.push(parameter);
            }
            Err(error) => return Err(error),
        }
    }
    Ok(ToolProbe { called_tool: false, refused_parameters })
}

/// The one tool the checks offer ([`PROBE_TOOL`]).
fn probe_tool() -> crate::ToolSpec {
    let parameters = serde_json::json!({
        "type": "object",
        "properties": {"status": {"type": "string", "description": "the word ready"}},
        "required": ["status"]
    });
    crate::ToolSpec {
        name: PROBE_TOOL.to_string(),
        description: "Report your status.".to_string(),
        parameters: std::sync::Arc::new(parameters.as_object().cloned().unwrap_or_default()),
    }
}

/// What the prompt-cache check found: of the second of two identical requests, how many prompt
/// tokens the server said it read from its cache.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CacheProbe {
    pub prompt_tokens: u64,
    pub cached_tokens: u64,
    /// Written to the cache by the first request (the Messages API says; OpenAI's does not).
    pub written_tokens: u64,
}

impl CacheProbe {
    pub fn active(&self) -> bool {
        self.cached_tokens > 0
    }
}

/// Sends one request twice, with a prefix long enough to be cached (over 1,024 tokens, the
/// least any of the APIs caches) and the check's one tool, so the offline model treats it as a
/// check. The second answer's usage says whether the prefix was read from the cache. Each
/// request waits `llm.timeout_ms`, as for the tool-call probe.
pub async fn probe_cache(config: &LlmConfig, api_key: Option<Secret>) -> Result<CacheProbe, crate::LlmError> {
    use crate::{ChatRequest, Message};
    let config = LlmConfig {
        retry: picogent_support::retry::RetryConfig { max_attempts: 1, ..config.retry.clone() },
        ..config.clone()
    };
    let filler = "This is the prompt cache check: the same long prefix is sent twice, and the second answer \
                  says how much of it the server read from its cache. "
        .repeat(48);
    let messages = [
        Message::system(format!("You are a health check. Call the tool you are given.\n\n{filler}")),
        Message::user("Call report_status with status \"ready\"."),
    ];
    let tools = [probe_tool()];
    let chat = crate::chat_model(&config, api_key)?;
    let request = ChatRequest { messages: &messages, tools: &tools, max_output_tokens: Some(64) };
    let first = chat.complete(&request).await?;
    let second = chat.complete(&request).await?;
    Ok(CacheProbe {
        prompt_tokens: second.usage.prompt_tokens,
        cached_tokens: second.usage.cached_tokens,
        written_tokens: first.usage.cache_write_tokens,
    })
}

/// Leaves `parameter` out of the next request, by the setting that sends it on `llm.api`'s
/// format; `false` if it cannot be left out.
fn leave_out(config: &mut LlmConfig, parameter: &str) -> bool {
    use crate::config::{Api, MaxTokensField};
    match (config.api, parameter) {
        (_, "temperature") if config.temperature.is_some() => config.temperature = None,
        (Api::Openai, "parallel_tool_calls") if config.parallel_tool_calls.is_some() => {
            config.parallel_tool_calls = None
        }
        (Api::Openai, "max_completion_tokens") if config.max_tokens_field == MaxTokensField::MaxCompletionTokens => {
            config.max_tokens_field = MaxTokensField::MaxTokens
        }
        (Api::Openai, "max_tokens") if config.max_tokens_field == MaxTokensField::MaxTokens => {
            config.max_tokens_field = MaxTokensField::MaxCompletionTokens
        }
        // The Messages API sends `tool_choice` only for `parallel_tool_calls: false`
        // (`disable_parallel_tool_use`). Its `max_tokens` is required, whatever
        // `llm.max_tokens_field` says: it cannot be left out, only lowered (`max_output_tokens`).
        (Api::Anthropic, "tool_choice") if config.parallel_tool_calls == Some(false) => {
            config.parallel_tool_calls = None
        }
        _ => return false,
    }
    true
}

/// What the model probe found, as `picogent run` keeps it: logged once at start, shown in
/// `/readyz` (`model`), and quoted by the notice of a task run that did nothing.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct ModelCheck {
    pub verdict: Verdict,
    /// What was found, in a sentence; a URL in it carries no user info.
    pub detail: String,
    /// What to do about it, naming the setting; `None` when the model works.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

/// The probe's verdict on the model endpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// The probe is still waiting for its answer.
    Probing,
    /// The model called the offered tool, with every configured parameter taken.
    CallsTools,
    /// The model answered in text instead of calling the tool, or the server said it cannot
    /// take tools: it cannot work tasks.
    NoToolCalls,
    /// No connection to `llm.base_url`.
    Unreachable,
    /// The server answered with an error (a refused key or parameter, an unknown model, a
    /// timeout, a server error).
    Failed,
}

impl Verdict {
    /// The word shown for it, as in `/readyz`.
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Probing => "probing",
            Verdict::CallsTools => "calls_tools",
            Verdict::NoToolCalls => "no_tool_calls",
            Verdict::Unreachable => "unreachable",
            Verdict::Failed => "failed",
        }
    }
}

impl ModelCheck {
    /// The check while its request is out.
    pub fn probing(config: &LlmConfig) -> ModelCheck {
        ModelCheck {
            verdict: Verdict::Probing,
            detail: format!("asking {} for one tool call", display_url(&config.base_url)),
            fix: None,
        }
    }

    /// Whether the probe found the model and its server ready to work tasks.
    pub fn works(&self) -> bool {
        self.verdict == Verdict::CallsTools
    }
}

/// The tool-call probe of `picogent check`, judged: does the model at `llm.base_url` call tools
/// with the configured parameters? When it answers in text, the server's `/props` (llama.cpp)
/// says whether its chat template drops tools, so the fix names the right cause.
pub async fn check_model(config: &LlmConfig, api_key: Option<Secret>) -> ModelCheck {
    let url = display_url(&config.base_url);
    let model = &config.model;
    let failed = |verdict, detail: String, fix: &str| ModelCheck { verdict, detail, fix: Some(fix.to_string()) };
    match probe_tool_call(config, api_key.clone()).await {
        Ok(probe) if probe.called_tool && probe.refused_parameters.is_empty() => ModelCheck {
            verdict: Verdict::CallsTools,
            detail: format!("{model} at {url} called the offered tool"),
            fix: None,
        },
        Ok(probe) if !probe.refused_parameters.is_empty() => {
            let named: Vec<String> = probe.refused_parameters.iter().map(|p| format!("`{p}`")).collect();
            failed(
                Verdict::Failed,
                format!("{url} refused the request parameter(s) {} that picogent sends", named.join(", ")),
                "change the setting that sends it in the llm section of agent.json (see docs/llm.md), or run \
                 `picogent check`",
            )
        }
        Ok(_) => {
            let drops_tools = server_props(config, api_key).await.and_then(|props| props.supports_tools);
            let fix = match drops_tools {
                Some(false) => {
                    "the server's chat template drops the tools it is sent: start llama-server with --jinja and a \
                     tool-capable --chat-template-file (see docs/llm.md)"
                }
                _ => "set llm.model to a model with tool calling (an instruction-tuned model; see docs/llm.md)",
            };
            failed(
                Verdict::NoToolCalls,
                format!("{model} at {url} answered a request for one tool call in text: it cannot work tasks"),
                fix,
            )
        }
        Err(error) => {
            let message = without_user_info(&error.to_string(), &config.base_url);
            match error {
                crate::LlmError::Connection { .. } => failed(
                    Verdict::Unreachable,
                    format!("cannot reach the model server at {url}: {message}"),
                    "start the model server, or set llm.base_url to where it listens",
                ),
                crate::LlmError::Timeout { .. } => failed(
                    Verdict::Failed,
                    format!("{url} did not answer one small request in time: {message}"),
                    "check that the server is not overloaded, or raise llm.timeout_ms",
                ),
                crate::LlmError::Unauthorized { .. } => failed(
                    Verdict::Failed,
                    format!("{url} refused the API key: {message}"),
                    "put the right key in the environment variable named by llm.api_key_env",
                ),
                crate::LlmError::ModelNotFound { .. } => failed(
                    Verdict::Failed,
                    format!("{url} does not serve the model {model}: {message}"),
                    "set llm.model to a model the server lists at GET /models",
                ),
                crate::LlmError::ToolsUnsupported { .. } => failed(
                    Verdict::NoToolCalls,
                    format!("{model} at {url} does not take tools: {message}"),
                    "set llm.model to a model with tool calling (on llama-server: --jinja and a tool-capable chat \
                     template, see docs/llm.md)",
                ),
                _ => failed(
                    Verdict::Failed,
                    format!("{url} failed one small request with one tool: {message}"),
                    "check the llm section of agent.json; `picogent check` tests each part",
                ),
            }
        }
    }
}

/// `base_url` as it may be shown: without user info, query or fragment
/// ([`picogent_support::secret::shown_url`]).
pub fn display_url(base_url: &str) -> String {
    match reqwest::Url::parse(base_url) {
        Ok(_) => picogent_support::secret::shown_url(base_url).trim_end_matches('/').to_string(),
        Err(_) => "llm.base_url (not a URL)".to_string(),
    }
}

/// `text` with the user info of `base_url` (`name:password@`) taken out wherever the URL was
/// quoted in it.
fn without_user_info(text: &str, base_url: &str) -> String {
    let Ok(url) = reqwest::Url::parse(base_url) else { return text.to_string() };
    let user_info = match (url.username(), url.password()) {
        ("", None) => return text.to_string(),
        (name, Some(password)) => format!("{name}:{password}@"),
        (name, None) => format!("{name}@"),
    };
    text.replace(&user_info, "")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_refused_parameter_is_left_out_by_the_setting_that_sends_it_on_its_api() {
        use crate::config::{Api, MaxTokensField};
        let openai = LlmConfig {
            parallel_tool_calls: Some(false),
            max_tokens_field: MaxTokensField::MaxTokens,
            temperature: Some(0.2),
            ..LlmConfig::new("http://127.0.0.1:9/v1", "m")
        };
        let mut config = openai.clone();
        assert!(leave_out(&mut config, "parallel_tool_calls") && config.parallel_tool_calls.is_none());
        assert!(leave_out(&mut config, "max_tokens") && config.max_tokens_field == MaxTokensField::MaxCompletionTokens);
        assert!(leave_out(&mut config, "temperature") && config.temperature.is_none());
        assert!(!leave_out(&mut config, "tool_choice"), "picogent sends no tool_choice on chat completions");

        let anthropic = LlmConfig { api: Api::Anthropic, ..openai };
        let mut config = anthropic.clone();
        // `max_tokens` is required on the Messages API; `max_tokens_field` does not reach it.
        assert!(!leave_out(&mut config, "max_tokens"));
        assert_eq!(config, anthropic, "nothing changed for a parameter that cannot be left out");
        // `tool_choice` carries `parallel_tool_calls: false` there.
        assert!(leave_out(&mut config, "tool_choice") && config.parallel_tool_calls.is_none());
        assert!(!leave_out(&mut config, "tool_choice"), "once it is unset, nothing sends it");
        assert!(leave_out(&mut config, "temperature") && config.temperature.is_none());
    }

    #[test]
    fn a_shown_url_carries_no_user_info() {
        let url = "http://someone:s3cret@127.0.0.1:8080/v1/?key=k#x";
        assert_eq!(display_url(url), "http://127.0.0.1:8080/v1");
        let text = without_user_info("error sending request for url (http://someone:s3cret@127.0.0.1:8080/v1/)", url);
        assert!(!text.contains("s3cret") && !text.contains("someone"), "{text}");
        assert_eq!(display_url("not a url"), "llm.base_url (not a URL)");
    }
}
