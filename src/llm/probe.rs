//! The checks of the model endpoint for `picogent check`: `GET {base_url}/models`, and one small
//! chat request with one tool, sent with the configured parameters, to see whether the model
//! will work before the first task does.

use std::time::Duration;

use crate::config::LlmConfig;
use crate::secret::Secret;

/// The client of the two quick questions (`/models`, `/props`): at most 10 s each.
fn quick_client(config: &LlmConfig) -> reqwest::Result<reqwest::Client> {
    reqwest::Client::builder().timeout(Duration::from_millis(config.timeout_ms.min(10_000))).build()
}

/// Asks the endpoint for its models: an error when the list it gives does not hold the
/// configured one (by id, or one of llama.cpp's `aliases`); an empty list passes, since some
/// servers list none.
pub async fn probe(config: &LlmConfig, api_key: Option<Secret>) -> Result<String, String> {
    let base = config.base_url.trim_end_matches('/');
    let http = quick_client(config).map_err(|e| e.to_string())?;
    let mut request = http.get(format!("{base}/models"));
    if let Some(key) = &api_key {
        request = request.bearer_auth(key.expose());
    }
    let response = request
        .send()
        .await
        .map_err(|e| format!("cannot reach {base}: {} (is llm.base_url right, and the server up?)", e.without_url()))?;
    let status = response.status();
    if status == reqwest::StatusCode::UNAUTHORIZED || status == reqwest::StatusCode::FORBIDDEN {
        return Err(format!("{base} refused the API key (HTTP {status}): check the variable named by llm.api_key_env"));
    }
    if !status.is_success() {
        return Err(format!("{base}/models answered HTTP {status}"));
    }
    let body: serde_json::Value = response.json().await.unwrap_or_default();
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
    const SHOWN: usize = 8;
    let ids: Vec<&str> = models.iter().filter_map(|model| model["id"].as_str()).collect();
    let more = if ids.len() > SHOWN { format!(" and {} more", ids.len() - SHOWN) } else { String::new() };
    Err(format!(
        "{base} does not serve llm.model {:?}: it lists {}{more}; set llm.model to the one to use",
        config.model,
        ids.iter().take(SHOWN).map(|id| format!("{id:?}")).collect::<Vec<_>>().join(", ")
    ))
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
    let mut request = http.get(format!("{root}/props"));
    if let Some(key) = &api_key {
        request = request.bearer_auth(key.expose());
    }
    let response = request.send().await.ok()?;
    if !response.status().is_success() {
        return None;
    }
    let body: serde_json::Value = response.json().await.ok()?;
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

/// Sends one small request with one tool, with the parameters `config` sends. A parameter the
/// server refuses is reported and left out for the next try, so every refused one is named.
pub async fn probe_tool_call(config: &LlmConfig, api_key: Option<Secret>) -> Result<ToolProbe, super::LlmError> {
    use super::{ChatModel, ChatRequest, LlmError, Message, ToolSpec};
    let mut config = LlmConfig {
        timeout_ms: config.timeout_ms.min(60_000),
        retry: crate::retry::RetryConfig { max_attempts: 1, ..config.retry.clone() },
        ..config.clone()
    };
    let parameters = serde_json::json!({
        "type": "object",
        "properties": {"status": {"type": "string", "description": "the word ready"}},
        "required": ["status"]
    });
    let tools = [ToolSpec {
        name: "report_status".to_string(),
        description: "Report your status.".to_string(),
        parameters: std::sync::Arc::new(parameters.as_object().cloned().unwrap_or_default()),
    }];
    let messages = [
        Message::system("You are a health check. Call the tool you are given."),
        Message::user("Call report_status with status \"ready\"."),
    ];
    let mut refused_parameters = Vec::new();
    // One try per parameter that can be left out, and the last.
    for _ in 0..5 {
        let chat = super::OpenAiChat::new(&config, api_key.clone())?;
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

/// Leaves `parameter` out of the next request; `false` if it cannot be left out.
fn leave_out(config: &mut LlmConfig, parameter: &str) -> bool {
    use crate::config::MaxTokensField;
    match parameter {
        "temperature" if config.temperature.is_some() => config.temperature = None,
        "parallel_tool_calls" if config.parallel_tool_calls.is_some() => config.parallel_tool_calls = None,
        "max_completion_tokens" if config.max_tokens_field == MaxTokensField::MaxCompletionTokens => {
            config.max_tokens_field = MaxTokensField::MaxTokens
        }
        "max_tokens" if config.max_tokens_field == MaxTokensField::MaxTokens => {
            config.max_tokens_field = MaxTokensField::MaxCompletionTokens
        }
        _ => return false,
    }
    true
}
