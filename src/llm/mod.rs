//! The project's own chat types: messages, tool calls, a model's answer and its errors.
//!
//! Only [`openai`] knows the OpenAI wire format (and imports async-openai); everything else —
//! the agent loop, the runtime, the stored sessions — speaks these types. They are serializable
//! because a conversation is persisted and resumed.

pub mod openai;
pub mod probe;

use std::time::Duration;

use futures::future::BoxFuture;
use serde::{Deserialize, Serialize};

use crate::retry::{RetryDecision, Retryable};

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
    /// JSON Schema of the arguments object. Shared with the tool source's definition, so offering
    /// a tool to a run, or sending it on a turn, copies no schema.
    pub parameters: std::sync::Arc<serde_json::Map<String, serde_json::Value>>,
}

/// One request to the model. Messages and tools are sent in exactly this order, so the prefix
/// (system prompt, tool list) stays byte-identical across the turns of a run.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatRequest {
    pub messages: Vec<Message>,
    pub tools: Vec<ToolSpec>,
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
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Usage {
    pub prompt_tokens: u64,
    pub completion_tokens: u64,
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
    #[error("the model server refused the request ({status}): {message}")]
    Rejected { status: u16, message: String },
    #[error("the model client is misconfigured: {message}")]
    Config { message: String },
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
            LlmError::ContextLength { .. } | LlmError::Rejected { .. } | LlmError::Config { .. } => RetryDecision::Stop,
        }
    }
}

/// A chat-completions model. [`OpenAiChat`] is the one implementation; the trait keeps the agent
/// loop independent of the wire format.
pub trait ChatModel: Send + Sync {
    /// Sends one request, retrying transient failures with the project's retry policy.
    fn complete<'a>(&'a self, request: &'a ChatRequest) -> BoxFuture<'a, Result<ChatResponse, LlmError>>;
}

/// Tokens of `text` in the o200k encoding.
pub fn count_text_tokens(text: &str) -> u64 {
    tiktoken_rs::o200k_base_singleton().encode_with_special_tokens(text).len() as u64
}

/// Overhead per message (role and separators), as OpenAI documents for its chat format.
const TOKENS_PER_MESSAGE: u64 = 4;
/// Every reply is primed with a few tokens.
const TOKENS_PER_REQUEST: u64 = 3;

/// The prompt tokens a request will cost, counted with o200k the way OpenAI documents it. The
/// offline model counts with the same rule (from its own parse of the wire), so its `usage`
/// agrees with this estimate; real servers differ a little.
pub fn estimate_prompt_tokens(messages: &[Message], tools: &[ToolSpec]) -> u64 {
    let messages: u64 = messages
        .iter()
        .map(|message| {
            let calls: u64 = match message {
                Message::Assistant { tool_calls, .. } => tool_calls
                    .iter()
                    .map(|call| count_text_tokens(&call.name) + count_text_tokens(&call.arguments))
                    .sum(),
                _ => 0,
            };
            TOKENS_PER_MESSAGE + count_text_tokens(message.text()) + calls
        })
        .sum();
    let tools: u64 =
        tools.iter().map(|tool| estimate_tool_tokens(&tool.name, &tool.description, &tool.parameters)).sum();
    messages + tools + TOKENS_PER_REQUEST
}

/// The tokens one offered tool costs in the prompt.
pub fn estimate_tool_tokens(
    name: &str,
    description: &str,
    parameters: &serde_json::Map<String, serde_json::Value>,
) -> u64 {
    // The same text as the schema's `Value::to_string()`: compact JSON, keys in order.
    let parameters = serde_json::to_string(parameters).unwrap_or_default();
    count_text_tokens(name) + count_text_tokens(description) + count_text_tokens(&parameters)
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
    fn estimate_grows_with_content() {
        let short = estimate_prompt_tokens(&[Message::user("hi")], &[]);
        let long = estimate_prompt_tokens(&[Message::user("hi there, how are you doing today?")], &[]);
        assert!(long > short);
        assert_eq!(short, TOKENS_PER_MESSAGE + count_text_tokens("hi") + TOKENS_PER_REQUEST);
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
