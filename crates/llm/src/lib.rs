//! The project's own chat types: messages, tool calls, a model's answer and its errors.
//!
//! Only [`openai`] knows the OpenAI wire format (and imports async-openai), and only
//! [`anthropic`] the Messages API's; everything else — the agent loop, the runtime, the stored
//! sessions — speaks these types, and [`chat_model`] picks the client `llm.api` names. They are serializable
//! because a conversation is persisted and resumed.
//!
//! Invariants:
//! - the API key is a `Secret`: it goes into the request's `Authorization` (or `x-api-key`)
//!   header and nowhere else, never into an error, a log line or a stored conversation;
//! - whatever a server answers (an error status, a cut-off stream, a body that is not the format)
//!   is an [`LlmError`] that says what happened, never a panic; a tool call's arguments stay the
//!   model's text, for the loop to check and, when they are not JSON, to refuse;
//! - one rule estimates a prompt's tokens ([`estimate_prompt_tokens`], o200k), for the budgets
//!   and the offline model alike.
//!
//! Where things are: `lib.rs` (the chat types, `LlmError` and its retry decision, `chat_model`,
//! `count_text_tokens`, `tool_tokens`, `count_tools_json_tokens`); `openai.rs` (the only importer
//! of async-openai; `classify_error`, with llama.cpp's deterministic 5xx texts in one table,
//! `DETERMINISTIC_SERVER_ERRORS`); `anthropic.rs` (the Messages API's wire types, the
//! `cache_control` breakpoints: last tool, system, last block; its errors mapped to `LlmError`;
//! a streamed answer put together in `anthropic/stream.rs`);
//! `http.rs` (what both formats share: timeouts, the slot cap, `Retry-After`, server-sent events);
//! `stream.rs`; `tokens.rs` (o200k from one compact table, the one token counter); `probe.rs` (the
//! start-up tool-call probe); `config.rs` (the `llm` section, `LlmConfig`,
//! `DEFAULT_MAX_OUTPUT_TOKENS`).

pub mod anthropic;
pub mod config;
mod http;
pub mod openai;
pub mod probe;
mod stream;
mod tokens;

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use picogent_support::retry::{RetryDecision, Retryable};

pub use http::MAX_ANSWER_BYTES;
pub use openai::OpenAiChat;

/// One message of a conversation, in the order the model sees them.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum Message {
    System {
        content: String,
    },
    User {
        content: String,
    },
    Assistant {
        /// The text of the turn; `None` when the turn only calls tools.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        content: Option<String>,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// Set when the model declined to answer.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        refusal: Option<String>,
    },
    Tool {
        /// The [`ToolCall::id`] this answers.
        tool_call_id: String,
        /// The tool's name, kept for the record (the wire format does not carry it).
        name: String,
        /// What the model reads; error results start with [`TOOL_ERROR_PREFIX`].
        content: String,
        is_error: bool,
    },
}

/// Error results sent to the model start with this, so a model (or the offline planner) can tell
/// a failure from a result without a wire field for it.
pub const TOOL_ERROR_PREFIX: &str = "error: ";

impl Message {
    pub fn system(content: impl Into<String>) -> Message {
        Message::System { content: content.into() }
    }

    pub fn user(content: impl Into<String>) -> Message {
        Message::User { content: content.into() }
    }

    /// The text of the message as the model reads it (tool calls not included).
    pub fn text(&self) -> &str {
        match self {
            Message::System { content } | Message::User { content } | Message::Tool { content, .. } => content,
            Message::Assistant { content, refusal, .. } => {
                content.as_deref().or(refusal.as_deref()).unwrap_or_default()
            }
        }
    }
}

/// A tool call the model asked for. `arguments` is the raw JSON text as the model wrote it: it is
/// parsed once, at dispatch, so a malformed one becomes an error result the model can read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    pub id: String,
    pub name: String,
    pub arguments: String,
}

/// A tool as offered to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolSpec {
    pub name: String,
    pub description: String,
    /// JSON Schema of the arguments object, shared with the tool source's definition (a run
    /// offers its tools without copying their schemas).
    pub parameters: std::sync::Arc<serde_json::Map<String, serde_json::Value>>,
}

/// One request to the model. Messages and tools are sent in exactly this order, so the prefix
/// (system prompt, tool list) stays byte-identical across the turns of a run.
/// Borrows the run's conversation and tool list, so a turn copies neither.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ChatRequest<'a> {
    pub messages: &'a [Message],
    pub tools: &'a [ToolSpec],
    /// At most this many completion tokens (the loop sets it from the remaining budget).
    pub max_output_tokens: Option<u32>,
}

/// Why the model stopped writing.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Stop,
    ToolCalls,
    /// The completion hit `max_output_tokens`.
    Length,
    ContentFilter,
    Other,
}

/// Tokens spent on one request.
///
/// `prompt_tokens` is every input token, whether read from the server's prompt cache or not (as
/// OpenAI counts; the Messages API's `input_tokens` leaves the cached ones out, and
/// [`anthropic`] adds them back). `cached_tokens` and `cache_write_tokens` are the parts of it
/// that were read from the cache and written to it, priced apart ([`config::Price`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
    /// Of `prompt_tokens`, read from the prompt cache.
    #[serde(default)]
    pub cached_tokens: u64,
    /// Of `prompt_tokens`, written to the prompt cache (the Messages API's
    /// `cache_creation_input_tokens`; OpenAI-compatible servers report none).
    #[serde(default)]
    pub cache_write_tokens: u64,
    /// True when the server sent no `usage` and the counts are ours (tiktoken o200k).
    pub estimated: bool,
}

/// The model's answer to one request.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatResponse {
    pub content: Option<String>,
    pub tool_calls: Vec<ToolCall>,
    pub refusal: Option<String>,
    pub finish_reason: FinishReason,
    pub usage: Usage,
}

/// Why a model request failed, shaped by what the caller does next: retry (rate limits, server
/// errors, timeouts, dropped connections), shrink the conversation (context length), or give up.
#[derive(Debug, thiserror::Error)]
pub enum LlmError {
    #[error("the model server is rate limiting (429): {message}")]
    RateLimited { retry_after: Option<Duration>, message: String },
    #[error("the model server failed ({status}): {message}")]
    Server { status: u16, retry_after: Option<Duration>, message: String },
    #[error("the model request timed out after {timeout_ms} ms")]
    Timeout { timeout_ms: u64 },
    #[error("the connection to the model server failed: {message}")]
    Connection { message: String },
    #[error("the model's answer could not be read: {message}")]
    BadResponse { message: String },
    #[error("the conversation is longer than the model's context window: {message}")]
    ContextLength { message: String },
    #[error("the model server refused the API key ({status}): {message}")]
    Unauthorized { status: u16, message: String },
    #[error("the model server does not know the model (404): {message}")]
    ModelNotFound { message: String },
    #[error("the model server refused the parameter `{parameter}` ({status}): {message}")]
    ParameterRefused { status: u16, parameter: String, message: String },
    #[error("the model does not support tool calls: {message}")]
    ToolsUnsupported { message: String },
    #[error("the model server refused the request ({status}): {message}")]
    Rejected { status: u16, message: String },
    /// A server error whose text says trying again cannot help (llama.cpp cannot parse the
    /// conversation it was sent); never retried.
    #[error("the model server cannot process this request ({status}): {message}")]
    Unprocessable { status: u16, message: String },
    #[error("the model client is misconfigured: {message}")]
    Config { message: String },
    /// The answer was over [`MAX_ANSWER_BYTES`], whole or streamed in all, and was refused
    /// without reading the rest. Not retried: the same request is likely to bring the same.
    #[error(
        "the model server's answer is over picogent's limit of {limit_bytes} bytes, so it was refused without \
         reading the rest: a model's answer is far smaller, check the server at llm.base_url"
    )]
    AnswerTooLarge { limit_bytes: usize },
}

impl LlmError {
    /// What kind of failure this is, for the run record and the notice people read.
    pub fn kind(&self) -> ModelFailure {
        match self {
            LlmError::RateLimited { .. } => ModelFailure::RateLimited,
            LlmError::Server { .. } | LlmError::BadResponse { .. } | LlmError::AnswerTooLarge { .. } => {
                ModelFailure::ServerError
            }
            LlmError::Timeout { .. } => ModelFailure::Timeout,
            LlmError::Connection { .. } => ModelFailure::Unreachable,
            LlmError::ContextLength { .. } => ModelFailure::ContextLength,
            LlmError::Unauthorized { .. } => ModelFailure::Unauthorized,
            LlmError::ModelNotFound { .. } => ModelFailure::ModelNotFound,
            LlmError::ParameterRefused { parameter, .. } => {
                ModelFailure::ParameterRefused { parameter: parameter.clone() }
            }
            LlmError::ToolsUnsupported { .. } => ModelFailure::ToolsUnsupported,
            LlmError::Rejected { .. } | LlmError::Unprocessable { .. } | LlmError::Config { .. } => {
                ModelFailure::Rejected
            }
        }
    }
}

/// Why the model service failed a run, in the terms of what a person can do about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum ModelFailure {
    /// No connection to `llm.base_url`.
    Unreachable,
    Timeout,
    /// 401 or 403: the key in `llm.api_key_env` was refused.
    Unauthorized,
    /// 404: the server does not serve `llm.model`.
    ModelNotFound,
    /// A 400 naming a request parameter.
    ParameterRefused {
        parameter: String,
    },
    ToolsUnsupported,
    ContextLength,
    RateLimited,
    ServerError,
    /// Another refusal (4xx).
    Rejected,
}

impl Retryable for LlmError {
    fn retry_decision(&self) -> RetryDecision {
        match self {
            LlmError::RateLimited { retry_after: Some(wait), .. }
            | LlmError::Server { retry_after: Some(wait), .. } => RetryDecision::RetryAfter(*wait),
            LlmError::RateLimited { .. }
            | LlmError::Server { .. }
            | LlmError::Timeout { .. }
            | LlmError::Connection { .. }
            | LlmError::BadResponse { .. } => RetryDecision::Retry,
            LlmError::ContextLength { .. }
            | LlmError::Unauthorized { .. }
            | LlmError::ModelNotFound { .. }
            | LlmError::ParameterRefused { .. }
            | LlmError::ToolsUnsupported { .. }
            | LlmError::Rejected { .. }
            | LlmError::Unprocessable { .. }
            | LlmError::Config { .. }
            | LlmError::AnswerTooLarge { .. } => RetryDecision::Stop,
        }
    }
}

/// A chat model, whatever its wire format ([`OpenAiChat`], [`anthropic::AnthropicChat`]); the
/// trait keeps the agent loop independent of it.
pub trait ChatModel: Send + Sync {
    /// Sends one request, retrying transient failures with the project's retry policy.
    fn complete<'a>(&'a self, request: &'a ChatRequest<'a>) -> BoxFuture<'a, Result<ChatResponse, LlmError>>;
}

/// The client `llm.api` names, with `api_key` (or none, for a local server).
pub fn chat_model(
    config: &config::LlmConfig,
    api_key: Option<picogent_support::secret::Secret>,
) -> Result<Arc<dyn ChatModel>, LlmError> {
    Ok(match config.api {
        config::Api::Openai => Arc::new(OpenAiChat::new(config, api_key)?),
        config::Api::Anthropic => Arc::new(anthropic::AnthropicChat::new(config, api_key)?),
    })
}

/// The answer without the model's reasoning: `<think>…</think>` blocks (and a block cut off by
/// the output cap, open to the end) are removed. Reasoning is neither posted to the board nor fed
/// back as the assistant's text; servers that send it apart (`reasoning_content`) are not read.
pub fn strip_reasoning(text: &str) -> String {
    const OPEN: &str = "<think>";
    const CLOSE: &str = "</think>";
    let mut kept = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(start) = rest.find(OPEN) {
        kept.push_str(&rest[..start]);
        match rest[start..].find(CLOSE) {
            Some(end) => rest = &rest[start + end + CLOSE.len()..],
            None => {
                rest = "";
                break;
            }
        }
    }
    kept.push_str(rest);
    // A server that puts the opening tag in the template leaves only the closing one.
    let kept = match kept.find(CLOSE) {
        Some(end) => kept[end + CLOSE.len()..].to_string(),
        None => kept,
    };
    kept.trim().to_string()
}

/// The tokens of an answer whose server sent no `usage`, counted here the way the offline model
/// counts them (o200k).
pub(crate) fn estimated_usage(
    request: &ChatRequest<'_>,
    content: Option<&str>,
    refusal: Option<&str>,
    tool_calls: &[ToolCall],
) -> Usage {
    let text: u64 = content.iter().chain(refusal.iter()).map(|t| count_text_tokens(t)).sum();
    let calls: u64 =
        tool_calls.iter().map(|call| count_text_tokens(&call.name) + count_text_tokens(&call.arguments)).sum();
    Usage {
        prompt_tokens: estimate_prompt_tokens(request.messages, request.tools),
        completion_tokens: text + calls,
        estimated: true,
        ..Usage::default()
    }
}

/// Tokens of `text` in the o200k encoding.
///
/// Long texts that come back again and again (the system prompt, tool descriptions and schemas,
/// sent on every turn of every run) are counted once: their counts are kept in a small memo.
pub fn count_text_tokens(text: &str) -> u64 {
    if text.len() < MEMO_MIN_BYTES {
        return count_uncached(text);
    }
    if let Some(count) = memo().lock().ok().and_then(|memo| memo.get(text).copied()) {
        return count;
    }
    let count = count_uncached(text);
    remember(text.to_string(), count);
    count
}

fn remember(text: String, count: u64) {
    if let Ok(mut memo) = memo().lock() {
        if memo.len() >= MEMO_ENTRIES {
            // Crude but bounded: the texts worth keeping come back on the next turn anyway.
            memo.clear();
        }
        memo.insert(text, count);
    }
}

fn count_uncached(text: &str) -> u64 {
    tokens::count(text)
}

/// Texts shorter than this are counted every time: counting them costs about as much as a lookup.
const MEMO_MIN_BYTES: usize = 256;
/// At most this many texts are remembered (a few hundred KiB at worst): enough for every tool
/// definition and the system prompts in use.
const MEMO_ENTRIES: usize = 256;

fn memo() -> &'static std::sync::Mutex<std::collections::HashMap<String, u64>> {
    static MEMO: std::sync::OnceLock<std::sync::Mutex<std::collections::HashMap<String, u64>>> =
        std::sync::OnceLock::new();
    MEMO.get_or_init(Default::default)
}

/// Overhead per message (role and separators), as OpenAI documents for its chat format.
const TOKENS_PER_MESSAGE: u64 = 4;
/// Every reply is primed with a few tokens.
const TOKENS_PER_REQUEST: u64 = 3;

/// The prompt tokens a request will cost, counted with o200k the way OpenAI documents it. The
/// offline model counts with the same rule (from its own parse of the wire), so its `usage`
/// agrees with this estimate; real servers differ a little.
pub fn estimate_prompt_tokens(messages: &[Message], tools: &[ToolSpec]) -> u64 {
    let messages: u64 = messages.iter().map(message_tokens).sum();
    estimate_tools_tokens(tools) + messages + TOKENS_PER_REQUEST
}

/// What one message adds to a prompt.
pub fn message_tokens(message: &Message) -> u64 {
    let calls: u64 = match message {
        Message::Assistant { tool_calls, .. } => {
            tool_calls.iter().map(|call| count_text_tokens(&call.name) + count_text_tokens(&call.arguments)).sum()
        }
        _ => 0,
    };
    TOKENS_PER_MESSAGE + count_text_tokens(message.text()) + calls
}

/// What a tool list adds to a prompt.
pub fn estimate_tools_tokens(tools: &[ToolSpec]) -> u64 {
    tools.iter().map(|tool| estimate_tool_tokens(&tool.name, &tool.description, &tool.parameters)).sum()
}

/// The prompt tokens of a run's requests, kept up to date as the conversation grows: each message
/// is counted once when it is added (the conversation only grows, except when old tool results
/// are dropped, after which [`PromptCounter::reset`] recounts).
#[derive(Debug)]
pub struct PromptCounter {
    tools: u64,
    counted: Vec<u64>,
}

impl PromptCounter {
    /// `tools`: what the offered tool list adds ([`estimate_tools_tokens`] or [`tool_tokens`]).
    pub fn new(tools: u64) -> PromptCounter {
        PromptCounter { tools, counted: Vec::new() }
    }

    /// The same figure as [`estimate_prompt_tokens`] for `messages` and the tools given to `new`.
    pub fn estimate(&mut self, messages: &[Message]) -> u64 {
        if self.counted.len() > messages.len() {
            self.counted.clear();
        }
        let from = self.counted.len();
        self.counted.extend(messages[from..].iter().map(message_tokens));
        self.tools + self.counted.iter().sum::<u64>() + TOKENS_PER_REQUEST
    }

    /// Forgets the counts: messages already counted were changed in place.
    pub fn reset(&mut self) {
        self.counted.clear();
    }
}

/// Something worked out from one tool definition and kept for it: a tool source hands out the
/// same definition (the same shared schema) run after run, so a run costs no work on its tool
/// list. Bounded by [`MEMO_ENTRIES`].
pub(crate) struct PerDefinition<T> {
    /// By the schema's address; the entry holds the schema, so the address cannot be reused by
    /// another while it is kept, and the name and description are compared too.
    entries: std::sync::Mutex<std::collections::HashMap<usize, Kept<T>>>,
}

/// A kept value with the definition it was worked out from: schema, name, description.
type Kept<T> = (Arc<serde_json::Map<String, serde_json::Value>>, String, String, T);

impl<T: Clone> PerDefinition<T> {
    pub(crate) fn new() -> PerDefinition<T> {
        PerDefinition { entries: std::sync::Mutex::new(std::collections::HashMap::new()) }
    }

    /// The kept value for the definition, or `make()`'s, then kept.
    pub(crate) fn get<E>(
        &self,
        name: &str,
        description: &str,
        schema: &Arc<serde_json::Map<String, serde_json::Value>>,
        make: impl FnOnce() -> Result<T, E>,
    ) -> Result<T, E> {
        let key = Arc::as_ptr(schema) as usize;
        if let Ok(entries) = self.entries.lock()
            && let Some((_, known_name, known_description, value)) = entries.get(&key)
            && known_name == name
            && known_description == description
        {
            return Ok(value.clone());
        }
        let value = make()?;
        if let Ok(mut entries) = self.entries.lock() {
            if entries.len() >= MEMO_ENTRIES {
                entries.clear();
            }
            entries.insert(key, (schema.clone(), name.to_string(), description.to_string(), value.clone()));
        }
        Ok(value)
    }
}

/// What one tool definition adds to a prompt, the same figure as `estimate_tool_tokens`, kept
/// per definition ([`PerDefinition`]).
pub fn tool_tokens(tool: &ToolSpec) -> u64 {
    static COUNTS: std::sync::OnceLock<PerDefinition<u64>> = std::sync::OnceLock::new();
    let description = &tool.description;
    let Ok(count) = COUNTS.get_or_init(PerDefinition::new).get(&tool.name, description, &tool.parameters, || {
        Ok::<_, std::convert::Infallible>(estimate_tool_tokens(&tool.name, description, &tool.parameters))
    });
    count
}

/// The tokens one offered tool costs in the prompt. Tool definitions are the same on every turn
/// of every run, so their counts come from the memo.
fn estimate_tool_tokens(name: &str, description: &str, parameters: &serde_json::Map<String, serde_json::Value>) -> u64 {
    let parameters = serde_json::to_string(parameters).unwrap_or_default();
    let key = format!("{name}\u{0}{description}\u{0}{parameters}");
    if let Some(count) = memo().lock().ok().and_then(|memo| memo.get(&key).copied()) {
        return count;
    }
    let count = count_uncached(name) + count_uncached(description) + count_uncached(&parameters);
    remember(key, count);
    count
}

/// The definitions as an OpenAI chat-completions `tools` array:
/// `[{"type":"function","function":{"name","description","parameters"}}]`.
fn openai_tools_json(tools: &[ToolSpec]) -> serde_json::Value {
    serde_json::Value::Array(
        tools
            .iter()
            .map(|tool| {
                serde_json::json!({
                    "type": "function",
                    "function": {
                        "name": tool.name,
                        "description": tool.description,
                        "parameters": serde_json::Value::Object(tool.parameters.as_ref().clone()),
                    }
                })
            })
            .collect(),
    )
}

/// Tokens of the definitions as a model receives them: the compact `openai_tools_json` text,
/// the figure `picogent tools list --tokens` shows. A little above the sum of [`tool_tokens`],
/// which leaves out the JSON around each name, description and schema.
pub fn count_tools_json_tokens(tools: &[ToolSpec]) -> u64 {
    count_text_tokens(&openai_tools_json(tools).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_as_json() {
        let messages = vec![
            Message::system("be brief"),
            Message::user("Task: TE-1"),
            Message::Assistant {
                content: None,
                tool_calls: vec![ToolCall { id: "c1".into(), name: "get_task".into(), arguments: "{}".into() }],
                refusal: None,
            },
            Message::Tool { tool_call_id: "c1".into(), name: "get_task".into(), content: "{}".into(), is_error: false },
        ];
        let text = serde_json::to_string(&messages).unwrap();
        let back: Vec<Message> = serde_json::from_str(&text).unwrap();
        assert_eq!(back, messages);
    }

    #[test]
    fn counts_tokens() {
        assert!(count_text_tokens("hello world") >= 2);
        assert_eq!(count_text_tokens(""), 0);
    }

    #[test]
    fn estimate_grows_with_content() {
        let short = estimate_prompt_tokens(&[Message::user("hi")], &[]);
        let long = estimate_prompt_tokens(&[Message::user("hi there, how are you doing today?")], &[]);
        assert!(long > short);
        assert_eq!(short, TOKENS_PER_MESSAGE + count_text_tokens("hi") + TOKENS_PER_REQUEST);
    }

    #[test]
    fn the_memo_and_the_running_count_agree_with_a_fresh_count() {
        let long = "word ".repeat(200);
        assert_eq!(count_text_tokens(&long), count_uncached(&long));
        assert_eq!(count_text_tokens(&long), count_uncached(&long), "second, from the memo");
        let tools = vec![ToolSpec {
            name: "get_task".into(),
            description: "Reads a task. ".repeat(30),
            parameters: std::sync::Arc::new(
                serde_json::json!({"type": "object", "properties": {"task_id": {"type": "string"}}})
                    .as_object()
                    .unwrap()
                    .clone(),
            ),
        }];
        let mut messages = vec![Message::system(long.clone()), Message::user("Task: TE-1")];
        let mut counter = PromptCounter::new(estimate_tools_tokens(&tools));
        let definition = tools[0].clone();
        assert_eq!(tool_tokens(&definition), estimate_tools_tokens(&tools));
        assert_eq!(tool_tokens(&definition), estimate_tools_tokens(&tools), "second, from the memo");
        assert_eq!(counter.estimate(&messages), estimate_prompt_tokens(&messages, &tools));
        let tool = &tools[0];
        let fresh = count_uncached(&tool.name)
            + count_uncached(&tool.description)
            + count_uncached(&serde_json::to_string(&*tool.parameters).unwrap());
        assert_eq!(estimate_tool_tokens(&tool.name, &tool.description, &tool.parameters), fresh);
        messages.push(Message::Assistant {
            content: None,
            tool_calls: vec![ToolCall { id: "c1".into(), name: "get_task".into(), arguments: "{}".into() }],
            refusal: None,
        });
        messages.push(Message::Tool {
            tool_call_id: "c1".into(),
            name: "get_task".into(),
            content: long,
            is_error: false,
        });
        assert_eq!(counter.estimate(&messages), estimate_prompt_tokens(&messages, &tools));
        if let Message::Tool { content, .. } = &mut messages[3] {
            *content = "dropped".into();
        }
        counter.reset();
        assert_eq!(counter.estimate(&messages), estimate_prompt_tokens(&messages, &tools));
    }

    #[test]
    fn reasoning_is_stripped() {
        let cases = [
            ("<think>let me see</think>There are 3 open tasks.", "There are 3 open tasks."),
            ("Before <think>a</think>middle<think>b</think> after", "Before middle after"),
            ("<think>cut off at the output cap", ""),
            ("reasoning the template opened</think>\n\nThe answer.", "The answer."),
            ("No reasoning here.", "No reasoning here."),
        ];
        for (text, expected) in cases {
            assert_eq!(strip_reasoning(text), expected, "{text:?}");
        }
    }

    #[test]
    fn retry_decisions_follow_the_error_kind() {
        let wait = Duration::from_secs(2);
        assert_eq!(
            LlmError::RateLimited { retry_after: Some(wait), message: String::new() }.retry_decision(),
            RetryDecision::RetryAfter(wait)
        );
        assert_eq!(LlmError::Timeout { timeout_ms: 1 }.retry_decision(), RetryDecision::Retry);
        assert_eq!(LlmError::ContextLength { message: String::new() }.retry_decision(), RetryDecision::Stop);
    }
}
