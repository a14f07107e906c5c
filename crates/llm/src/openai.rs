//! The OpenAI chat-completions adapter: the only module that imports async-openai types.
//!
//! Requests and answers are async-openai 0.43's types, so the wire shape is the crate's, kept
//! current with OpenAI. The HTTP call itself is made here with reqwest rather than through
//! `async_openai::Client`, because that client drops the response headers of a failed request and
//! the loop must honour `Retry-After`; retrying is `picogent_support::retry::with_retry` (the project's one
//! policy), so async-openai's own retry middleware is not used. Works with any OpenAI-compatible
//! server: OpenAI, OpenRouter, Ollama, vLLM, llama.cpp's server, LM Studio, the offline model.

use std::time::Duration;

use async_openai::types::chat::{
    ChatCompletionMessageToolCall, ChatCompletionMessageToolCalls, ChatCompletionRequestAssistantMessage,
    ChatCompletionRequestAssistantMessageContent, ChatCompletionRequestMessage, ChatCompletionRequestSystemMessage,
    ChatCompletionRequestSystemMessageContent, ChatCompletionRequestToolMessage,
    ChatCompletionRequestToolMessageContent, ChatCompletionRequestUserMessage, ChatCompletionRequestUserMessageContent,
    ChatCompletionTool, ChatCompletionTools, CreateChatCompletionRequest, CreateChatCompletionResponse, FunctionCall,
    FunctionObject,
};
use futures::future::BoxFuture;

#[cfg(test)]
use crate::ModelFailure;
use crate::config::{LlmConfig, MaxTokensField};
use crate::http::Transport;
use crate::{ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Message, ToolCall, ToolSpec, Usage};
use picogent_support::retry::{RetryConfig, with_retry};
use picogent_support::secret::Secret;

/// The output cap when `llm.max_output_tokens` is not set (defined with the setting).
pub use crate::config::DEFAULT_MAX_OUTPUT_TOKENS;

/// A chat model behind an OpenAI-compatible `/v1/chat/completions`.
#[derive(Debug, Clone)]
pub struct OpenAiChat {
    transport: Transport,
    /// `{base_url}/chat/completions` is called.
    base_url: String,
    model: String,
    /// `None` for local servers that need no key.
    api_key: Option<Secret>,
    temperature: Option<f32>,
    /// The configured cap; the loop may ask for less.
    max_output_tokens: Option<u32>,
    max_tokens_field: MaxTokensField,
    parallel_tool_calls: Option<bool>,
    retry: RetryConfig,
}

impl OpenAiChat {
    /// Builds the client from the `llm` block, reading the API key from `api_key_env` if named.
    pub fn from_config(config: &LlmConfig) -> Result<OpenAiChat, LlmError> {
        let api_key = config.api_key().map_err(|e| LlmError::Config { message: e.to_string() })?;
        OpenAiChat::new(config, api_key)
    }

    /// Builds the client with an explicit key (or none), ignoring `api_key_env`.
    pub fn new(config: &LlmConfig, api_key: Option<Secret>) -> Result<OpenAiChat, LlmError> {
        Ok(OpenAiChat {
            transport: Transport::new(config)?,
            base_url: config.base_url.trim_end_matches('/').to_string(),
            model: config.model.clone(),
            api_key,
            temperature: config.temperature,
            max_output_tokens: config.max_output_tokens,
            max_tokens_field: config.max_tokens_field,
            parallel_tool_calls: config.parallel_tool_calls,
            retry: config.retry.clone(),
        })
    }

    /// The configured output cap, which the loop lowers to fit the token budget.
    pub fn max_output_tokens(&self) -> Option<u32> {
        self.max_output_tokens
    }

    /// One attempt, no retrying, in a slot if the endpoint's requests are capped. `body` is the
    /// request as JSON; attempts share its bytes.
    async fn attempt(&self, body: &bytes::Bytes, request: &ChatRequest<'_>) -> Result<ChatResponse, LlmError> {
        let _slot = self.transport.slot().await?;
        let mut post = self.transport.post(&format!("{}/chat/completions", self.base_url), body);
        if let Some(key) = &self.api_key {
            post = post.bearer_auth(key.expose());
        }
        let response = self.transport.send(post, classify_error).await?;
        if self.transport.stream {
            let mut answer = crate::stream::Streamed::default();
            self.transport.events(response, |data| answer.add_event(data)).await?;
            return answer.into_response(request);
        }
        let bytes = self.transport.body(response).await?;
        let answer: CreateChatCompletionResponse = serde_json::from_slice(&bytes)
            .map_err(|e| LlmError::BadResponse { message: format!("invalid json: {e}") })?;
        from_wire_response(answer, request)
    }

    /// The request as async-openai types, without its tool list (see [`OpenAiChat::wire_body`]).
    fn wire_request(&self, request: &ChatRequest) -> CreateChatCompletionRequest {
        // The loop asks for what remains of the token budget, which can be far above what a model
        // accepts (servers refuse a `max_completion_tokens` past the model's limit), so an
        // unconfigured cap defaults to one every current chat model takes.
        let configured = self.max_output_tokens.unwrap_or(DEFAULT_MAX_OUTPUT_TOKENS);
        let max_output_tokens = Some(request.max_output_tokens.map_or(configured, |asked| configured.min(asked)));
        let has_tools = !request.tools.is_empty();
        // Only what is configured is sent: servers refuse fields they do not know (and some
        // refuse `parallel_tool_calls` without tools), reasoning models refuse `temperature`.
        #[allow(deprecated)] // `max_tokens` is deprecated by OpenAI but the only name some servers read
        let (max_completion_tokens, max_tokens) = match self.max_tokens_field {
            MaxTokensField::MaxCompletionTokens => (max_output_tokens, None),
            MaxTokensField::MaxTokens => (None, max_output_tokens),
        };
        #[allow(deprecated)]
        CreateChatCompletionRequest {
            model: self.model.clone(),
            messages: request.messages.iter().map(wire_message).collect(),
            tools: None,
            parallel_tool_calls: self.parallel_tool_calls.filter(|_| has_tools),
            temperature: self.temperature,
            max_completion_tokens,
            max_tokens,
            stream: self.transport.stream.then_some(true),
            stream_options: self.transport.stream.then(|| async_openai::types::chat::ChatCompletionStreamOptions {
                include_usage: Some(true),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    /// The request's JSON body. The tool list is the same on every turn of every run, so each
    /// definition is serialised once per shared schema ([`tool_json`]) and written after the
    /// rest, instead of being copied into async-openai's types and serialised again each turn.
    fn wire_body(&self, request: &ChatRequest) -> Result<Vec<u8>, serde_json::Error> {
        let mut body = serde_json::to_vec(&self.wire_request(request))?;
        if !request.tools.is_empty() && body.last() == Some(&b'}') {
            body.pop();
            body.extend_from_slice(br#","tools":["#);
            for (i, tool) in request.tools.iter().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                body.extend_from_slice(tool_json(tool)?.as_bytes());
            }
            body.extend_from_slice(b"]}");
        }
        Ok(body)
    }
}

/// One tool's definition as async-openai serialises it, kept per definition
/// ([`crate::PerDefinition`]).
fn tool_json(tool: &ToolSpec) -> Result<std::sync::Arc<str>, serde_json::Error> {
    static KNOWN: std::sync::OnceLock<crate::PerDefinition<std::sync::Arc<str>>> = std::sync::OnceLock::new();
    KNOWN.get_or_init(crate::PerDefinition::new).get(&tool.name, &tool.description, &tool.parameters, || {
        serde_json::to_string(&wire_tool(tool)).map(std::sync::Arc::from)
    })
}

impl ChatModel for OpenAiChat {
    fn complete<'a>(&'a self, request: &'a ChatRequest<'a>) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            // Serialised once, before the wait: a run in flight holds these bytes, not the typed
            // request with its own copy of every tool schema (see docs/performance.md, "Memory").
            let body = self
                .wire_body(request)
                .map_err(|e| LlmError::Config { message: format!("cannot serialise the request: {e}") })?;
            let body = bytes::Bytes::from(body);
            // Every 5xx is retried with backoff up to the policy's limit, the same body or not
            // (hosted providers answer a blip with the same words every time); only a 5xx whose
            // text says it is deterministic stops early, classified once in `classify_error`.
            with_retry(&self.retry, || self.attempt(&body, request)).await
        })
    }
}

/// A failed answer's body as servers send it: OpenAI's `{"error": {"message", "type", "code",
/// "param"}}`, where llama.cpp sends a numeric `code` and others a bare string or HTML.
struct ErrorBody {
    code: String,
    kind: String,
    param: Option<String>,
    message: String,
}

impl ErrorBody {
    fn parse(body: &[u8]) -> ErrorBody {
        let value: serde_json::Value = serde_json::from_slice(body).unwrap_or_default();
        let error = value.get("error").unwrap_or(&value);
        let text = |key: &str| match error.get(key) {
            Some(serde_json::Value::String(text)) => Some(text.clone()),
            Some(serde_json::Value::Number(number)) => Some(number.to_string()),
            _ => None,
        };
        let message = match (text("message"), error.as_str()) {
            (Some(message), _) => message,
            (None, Some(message)) => message.to_string(),
            (None, None) => String::from_utf8_lossy(&body[..body.len().min(500)]).trim().to_string(),
        };
        ErrorBody {
            code: text("code").unwrap_or_default(),
            kind: text("type").unwrap_or_default(),
            param: text("param").filter(|param| !param.is_empty()),
            message,
        }
    }
}

/// The request fields picogent may send, as a 400 about one of them names it.
const REQUEST_FIELDS: [&str; 7] =
    ["parallel_tool_calls", "max_completion_tokens", "max_tokens", "temperature", "tool_choice", "stream", "tools"];

/// A server error whose text says that trying again cannot help. llama.cpp answers with a 500
/// (`server_error`) what is the request's fault: a conversation it cannot parse or format, a
/// request too large for its context, tools without `--jinja`. Sending the same request again
/// gets the same answer, so these stop the retrying at once; every other 5xx is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum DeterministicServerError {
    /// The server cannot parse or format the conversation it was sent (its messages, its tools,
    /// a tool call's arguments).
    Conversation,
    /// The request does not fit the server's context (or its batch).
    ContextSize,
    /// The server was started without what tool calls need.
    ToolsUnsupported,
}

/// llama.cpp's texts for [`DeterministicServerError`], lowercase, as its server and its chat
/// code (`common/chat.cpp`, `tools/server/`) word them. The one place a 5xx's text decides
/// anything: the issue that asked for it allows string matching here and only here.
const DETERMINISTIC_SERVER_ERRORS: [(&str, DeterministicServerError); 10] = [
    ("failed to parse tool call arguments as json", DeterministicServerError::Conversation),
    ("failed to parse messages", DeterministicServerError::Conversation),
    ("failed to parse tools", DeterministicServerError::Conversation),
    ("this custom template is not supported", DeterministicServerError::Conversation),
    ("[json.exception.", DeterministicServerError::Conversation),
    ("exceeds the available context size", DeterministicServerError::ContextSize),
    ("larger than the max context size", DeterministicServerError::ContextSize),
    ("context shift is disabled", DeterministicServerError::ContextSize),
    ("is too large to process", DeterministicServerError::ContextSize),
    ("param requires --jinja", DeterministicServerError::ToolsUnsupported),
];

impl DeterministicServerError {
    /// Which deterministic error `lower` (a 5xx's message, lowercased) is, if any.
    fn of(lower: &str) -> Option<DeterministicServerError> {
        DETERMINISTIC_SERVER_ERRORS.iter().find(|(text, _)| lower.contains(text)).map(|(_, kind)| *kind)
    }
}

/// Maps a failed HTTP answer to the error the caller acts on. The context-length check reads the
/// error `code` and `type` first and the message only as a fallback, because servers other than
/// OpenAI (llama.cpp, vLLM, Ollama) often send no code, only a sentence about the context.
pub(crate) fn classify_error(status: u16, retry_after: Option<Duration>, body: &[u8]) -> LlmError {
    let ErrorBody { code, kind, param, message } = ErrorBody::parse(body);
    let lower = message.to_lowercase();
    match status {
        // Out of credit is a 429 too, but waiting does not help.
        429 if code == "insufficient_quota" => LlmError::Rejected { status, message },
        429 => LlmError::RateLimited { retry_after, message },
        500..=599 => match DeterministicServerError::of(&lower) {
            Some(DeterministicServerError::Conversation) => LlmError::Unprocessable { status, message },
            Some(DeterministicServerError::ContextSize) => LlmError::ContextLength { message },
            Some(DeterministicServerError::ToolsUnsupported) => LlmError::ToolsUnsupported { message },
            None => LlmError::Server { status, retry_after, message },
        },
        // A server-side request timeout: as transient as a 5xx.
        408 => LlmError::Server { status, retry_after, message },
        400 | 413
            if code == "context_length_exceeded"
                || kind == "exceed_context_size_error"
                || mentions_context_length(&lower) =>
        {
            LlmError::ContextLength { message }
        }
        401 | 403 => LlmError::Unauthorized { status, message },
        404 => LlmError::ModelNotFound { message },
        400 | 422 if mentions_tools_unsupported(&lower) => LlmError::ToolsUnsupported { message },
        400 | 422 => {
            match param.or_else(|| REQUEST_FIELDS.iter().find(|f| lower.contains(*f)).map(|f| f.to_string())) {
                Some(parameter) => LlmError::ParameterRefused { status, parameter, message },
                None => LlmError::Rejected { status, message },
            }
        }
        _ => LlmError::Rejected { status, message },
    }
}

fn mentions_context_length(lower: &str) -> bool {
    ["context length", "context_length", "context window", "context size", "maximum context", "too many tokens"]
        .iter()
        .any(|needle| lower.contains(needle))
}

fn mentions_tools_unsupported(lower: &str) -> bool {
    ["does not support tools", "tools are not supported", "tool use is not supported", "does not support tool"]
        .iter()
        .any(|needle| lower.contains(needle))
}

fn wire_message(message: &Message) -> ChatCompletionRequestMessage {
    match message {
        Message::System { content } => ChatCompletionRequestMessage::System(ChatCompletionRequestSystemMessage {
            content: ChatCompletionRequestSystemMessageContent::Text(content.clone()),
            name: None,
        }),
        Message::User { content } => ChatCompletionRequestMessage::User(ChatCompletionRequestUserMessage {
            content: ChatCompletionRequestUserMessageContent::Text(content.clone()),
            name: None,
        }),
        Message::Assistant { content, tool_calls, refusal } => {
            let calls: Vec<ChatCompletionMessageToolCalls> = tool_calls
                .iter()
                .map(|call| {
                    ChatCompletionMessageToolCalls::Function(ChatCompletionMessageToolCall {
                        id: call.id.clone(),
                        function: FunctionCall { name: call.name.clone(), arguments: call.arguments.clone() },
                    })
                })
                .collect();
            #[allow(deprecated)] // `function_call` is deprecated but still a field to fill
            ChatCompletionRequestMessage::Assistant(ChatCompletionRequestAssistantMessage {
                content: content.clone().map(ChatCompletionRequestAssistantMessageContent::Text),
                refusal: refusal.clone(),
                tool_calls: (!calls.is_empty()).then_some(calls),
                ..Default::default()
            })
        }
        Message::Tool { tool_call_id, content, .. } => {
            ChatCompletionRequestMessage::Tool(ChatCompletionRequestToolMessage {
                content: ChatCompletionRequestToolMessageContent::Text(content.clone()),
                tool_call_id: tool_call_id.clone(),
            })
        }
    }
}

fn wire_tool(tool: &ToolSpec) -> ChatCompletionTools {
    ChatCompletionTools::Function(ChatCompletionTool {
        function: FunctionObject {
            name: tool.name.clone(),
            description: Some(tool.description.clone()),
            parameters: Some(serde_json::Value::Object((*tool.parameters).clone())),
            strict: None,
        },
    })
}

fn from_wire_response(
    response: CreateChatCompletionResponse,
    request: &ChatRequest<'_>,
) -> Result<ChatResponse, LlmError> {
    let Some(choice) = response.choices.into_iter().next() else {
        return Err(LlmError::BadResponse { message: "the answer has no choices".to_string() });
    };
    let message = choice.message;
    let tool_calls: Vec<ToolCall> = message
        .tool_calls
        .unwrap_or_default()
        .into_iter()
        .map(|call| match call {
            ChatCompletionMessageToolCalls::Function(call) => {
                ToolCall { id: call.id, name: call.function.name, arguments: call.function.arguments }
            }
            // Custom (free-form) tools are never offered; an answer with one is passed on so the
            // loop reports an unknown tool to the model.
            ChatCompletionMessageToolCalls::Custom(call) => {
                ToolCall { id: call.id, name: call.custom_tool.name, arguments: call.custom_tool.input }
            }
        })
        .collect();
    use async_openai::types::chat::FinishReason as Wire;
    let finish_reason = match choice.finish_reason {
        Some(Wire::Stop) => FinishReason::Stop,
        Some(Wire::ToolCalls | Wire::FunctionCall) => FinishReason::ToolCalls,
        Some(Wire::Length) => FinishReason::Length,
        Some(Wire::ContentFilter) => FinishReason::ContentFilter,
        None => FinishReason::Other,
    };
    let usage = match response.usage {
        Some(usage) => Usage {
            prompt_tokens: u64::from(usage.prompt_tokens),
            completion_tokens: u64::from(usage.completion_tokens),
            // OpenAI caches a long prefix by itself and says how much it read.
            cached_tokens: usage
                .prompt_tokens_details
                .and_then(|details| details.cached_tokens)
                .map_or(0, u64::from)
                .min(u64::from(usage.prompt_tokens)),
            cache_write_tokens: 0,
            estimated: false,
        },
        None => crate::estimated_usage(request, message.content.as_deref(), message.refusal.as_deref(), &tool_calls),
    };
    let content = message.content.map(|text| crate::strip_reasoning(&text));
    Ok(ChatResponse { content, tool_calls, refusal: message.refusal, finish_reason, usage })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classifies_context_length_by_code_or_message() {
        let body = br#"{"error": {"message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded"}}"#;
        assert!(matches!(classify_error(400, None, body), LlmError::ContextLength { .. }));
        let body = br#"{"error": {"message": "the request exceeds the available context length"}}"#;
        assert!(matches!(classify_error(400, None, body), LlmError::ContextLength { .. }));
        let body = br#"{"error": {"message": "bad field"}}"#;
        assert!(matches!(classify_error(400, None, body), LlmError::Rejected { status: 400, .. }));
    }

    fn config(max_output_tokens: Option<u32>) -> LlmConfig {
        LlmConfig {
            max_output_tokens,
            timeout_ms: 1_000,
            parallel_tool_calls: Some(false),
            ..LlmConfig::new("http://127.0.0.1:1/v1/", "m")
        }
    }

    #[test]
    fn the_wire_request_caps_output_and_keeps_order() {
        let chat = OpenAiChat::new(&config(Some(500)), None).unwrap();
        let tool = ToolSpec { name: "get_task".into(), description: "d".into(), parameters: Default::default() };
        let messages = vec![
            Message::system("s"),
            Message::user("u"),
            Message::Assistant {
                content: None,
                tool_calls: vec![ToolCall { id: "c".into(), name: "get_task".into(), arguments: "{}".into() }],
                refusal: None,
            },
            Message::Tool { tool_call_id: "c".into(), name: "get_task".into(), content: "r".into(), is_error: false },
        ];
        let tools = vec![tool];
        let request = ChatRequest { messages: &messages, tools: &tools, max_output_tokens: Some(200) };
        let wire: serde_json::Value = serde_json::from_slice(&chat.wire_body(&request).unwrap()).unwrap();
        assert_eq!(wire["max_completion_tokens"], 200);
        assert_eq!(wire["parallel_tool_calls"], false);
        let roles: Vec<&str> =
            wire["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["system", "user", "assistant", "tool"]);
        assert_eq!(wire["messages"][2]["tool_calls"][0]["function"]["name"], "get_task");
        assert_eq!(wire["tools"][0]["function"]["name"], "get_task");
        // The body is the request async-openai would send with the tools in its own types.
        let mut typed = chat.wire_request(&request);
        typed.tools = Some(tools.iter().map(wire_tool).collect());
        assert_eq!(wire, serde_json::to_value(&typed).unwrap());
        // A second request reuses the kept definitions, and a changed one is not mistaken for them.
        assert_eq!(serde_json::from_slice::<serde_json::Value>(&chat.wire_body(&request).unwrap()).unwrap(), wire);
        let renamed = vec![ToolSpec { name: "get_step".into(), ..tools[0].clone() }];
        let other = ChatRequest { tools: &renamed, ..request };
        let other: serde_json::Value = serde_json::from_slice(&chat.wire_body(&other).unwrap()).unwrap();
        assert_eq!(other["tools"][0]["function"]["name"], "get_step");

        let without_tools = ChatRequest { tools: &[], max_output_tokens: Some(900), ..request };
        let wire: serde_json::Value = serde_json::from_slice(&chat.wire_body(&without_tools).unwrap()).unwrap();
        assert_eq!(wire["max_completion_tokens"], 500, "the configured cap wins when lower");
        assert!(wire.get("parallel_tool_calls").is_none() && wire.get("tools").is_none());

        let unconfigured = OpenAiChat::new(&config(None), None).unwrap();
        let wire = serde_json::to_value(unconfigured.wire_request(&without_tools)).unwrap();
        assert_eq!(wire["max_completion_tokens"], 900);
        let huge = ChatRequest { max_output_tokens: Some(60_000), ..without_tools };
        let wire = serde_json::to_value(unconfigured.wire_request(&huge)).unwrap();
        assert_eq!(wire["max_completion_tokens"], DEFAULT_MAX_OUTPUT_TOKENS);
    }

    #[test]
    fn sends_only_what_is_configured() {
        let tool = ToolSpec { name: "get_task".into(), description: "d".into(), parameters: Default::default() };
        let messages = vec![Message::user("u")];
        let tools = vec![tool];
        let request = ChatRequest { messages: &messages, tools: &tools, max_output_tokens: Some(200) };
        let mut unset = config(None);
        unset.parallel_tool_calls = None;
        let wire: serde_json::Value =
            serde_json::from_slice(&OpenAiChat::new(&unset, None).unwrap().wire_body(&request).unwrap()).unwrap();
        assert!(wire.get("parallel_tool_calls").is_none() && wire.get("temperature").is_none(), "{wire}");
        assert_eq!(wire["max_completion_tokens"], 200);
        assert!(wire.get("max_tokens").is_none());
        let mut old_name = config(None);
        old_name.max_tokens_field = MaxTokensField::MaxTokens;
        old_name.temperature = Some(0.5);
        let wire: serde_json::Value =
            serde_json::from_slice(&OpenAiChat::new(&old_name, None).unwrap().wire_body(&request).unwrap()).unwrap();
        assert_eq!(wire["max_tokens"], 200);
        assert!(wire.get("max_completion_tokens").is_none());
        assert_eq!(wire["temperature"], 0.5);
    }

    #[test]
    fn classifies_what_the_user_must_fix() {
        let cases: [(u16, &[u8], ModelFailure); 9] = [
            (401, br#"{"error": {"message": "Incorrect API key provided"}}"#, ModelFailure::Unauthorized),
            (403, b"forbidden", ModelFailure::Unauthorized),
            (404, br#"{"error": {"message": "The model `gpt-9` does not exist"}}"#, ModelFailure::ModelNotFound),
            (
                400,
                br#"{"error": {"message": "Unsupported value: 'temperature' does not support 0.2", "param": "temperature"}}"#,
                ModelFailure::ParameterRefused { parameter: "temperature".into() },
            ),
            (
                400,
                br#"{"detail": "unknown field parallel_tool_calls"}"#,
                ModelFailure::ParameterRefused { parameter: "parallel_tool_calls".into() },
            ),
            (
                400,
                br#"{"error": {"message": "registry.ollama.ai/library/gemma:2b does not support tools"}}"#,
                ModelFailure::ToolsUnsupported,
            ),
            (
                400,
                br#"{"error":{"code":400,"message":"request (2115 tokens) exceeds the available context size (2048 tokens), try increasing it","type":"exceed_context_size_error"}}"#,
                ModelFailure::ContextLength,
            ),
            (400, br#"{"error": {"message": "bad request"}}"#, ModelFailure::Rejected),
            (502, b"<html>bad gateway</html>", ModelFailure::ServerError),
        ];
        for (status, body, expected) in cases {
            let error = classify_error(status, None, body);
            assert_eq!(error.kind(), expected, "{status} {}", String::from_utf8_lossy(body));
        }
        let error = classify_error(400, None, br#"{"error":{"code":400,"message":"the context size","type":"x"}}"#);
        assert!(error.to_string().contains("context size"), "{error}");
    }

    /// llama.cpp's deterministic 500s stop at once, each as what the person must fix; every other
    /// 5xx is retried, however often it comes back with the same body.
    #[test]
    fn only_a_5xx_whose_text_says_it_is_deterministic_stops_the_retrying() {
        use picogent_support::retry::{RetryDecision, Retryable};
        let llama =
            |message: &str| format!(r#"{{"error":{{"code":500,"message":"{message}","type":"server_error"}}}}"#);
        let stops = [
            (
                llama(
                    "Failed to parse tool call arguments as JSON: [json.exception.parse_error.101] parse error at line 1, \
                     column 17: syntax error while parsing object - unexpected end of input; expected '}'",
                ),
                ModelFailure::Rejected,
            ),
            (llama("Failed to parse messages: Missing 'role' in message"), ModelFailure::Rejected),
            (llama("this custom template is not supported, try using --jinja"), ModelFailure::Rejected),
            (llama("context shift is disabled"), ModelFailure::ContextLength),
            (
                llama(
                    "input (5000 tokens) is too large to process. increase the physical batch size (current batch size: 2048)",
                ),
                ModelFailure::ContextLength,
            ),
            (llama("tools param requires --jinja flag"), ModelFailure::ToolsUnsupported),
        ];
        for (body, expected) in stops {
            let error = classify_error(500, None, body.as_bytes());
            assert_eq!(error.retry_decision(), RetryDecision::Stop, "{body}");
            assert_eq!(error.kind(), expected, "{body}");
        }
        let retried: [(u16, &[u8]); 4] = [
            (500, br#"{"error":{"message":"The server had an error while processing your request. Sorry about that!","type":"server_error"}}"#),
            (500, br#"{"error":{"code":500,"message":"The model produced output that does not match the expected peg-native format","type":"server_error"}}"#),
            (502, b"<html>502 Bad Gateway</html>"),
            (503, br#"{"error":{"code":503,"message":"Loading model","type":"unavailable_error"}}"#),
        ];
        for (status, body) in retried {
            let error = classify_error(status, None, body);
            assert_eq!(error.retry_decision(), RetryDecision::Retry, "{status} {}", String::from_utf8_lossy(body));
            assert_eq!(error.kind(), ModelFailure::ServerError);
        }
    }

    #[test]
    fn classifies_rate_limits_and_server_errors_with_retry_after() {
        let wait = Some(Duration::from_secs(1));
        assert!(matches!(classify_error(429, wait, b"slow down"), LlmError::RateLimited { retry_after: Some(_), .. }));
        assert!(matches!(classify_error(503, None, b"<html>"), LlmError::Server { status: 503, .. }));
        let quota = br#"{"error": {"message": "no credit", "code": "insufficient_quota"}}"#;
        assert!(matches!(classify_error(429, wait, quota), LlmError::Rejected { status: 429, .. }));
    }
}
