//! The Anthropic Messages API adapter (`llm.api: "anthropic"`): the only module that knows that
//! wire format. `POST {base_url}/messages` with `x-api-key` and `anthropic-version`, `system` and
//! `tools` (with `input_schema`) apart from the conversation, `tool_use` and `tool_result`
//! blocks, `max_tokens` always sent (the API requires it), and streaming read from its events
//! (put together in `anthropic/stream.rs`).
//!
//! The wire types are this module's own, small serde structs of what picogent sends and reads: the
//! Rust clients of the API on the registry are young and each brings its own HTTP client and
//! retry, where the loop needs the project's retry policy and the `Retry-After` of a failed
//! answer (as with async-openai, whose HTTP client is not used either).
//!
//! Prompt caching (`llm.prompt_cache`, on by default): `cache_control` breakpoints on the last
//! tool, on the system prompt and on the last block of the conversation. The API caches the
//! prefix up to each breakpoint, in the order tools → system → messages; a run's next turn
//! resends that prefix byte for byte and reads it from the cache (the API looks back from the
//! moved breakpoint to the one before). Three breakpoints of the four allowed.
//!
//! Usage: the API's `input_tokens` leaves out the tokens read from or written to the cache; they
//! are added back, so [`Usage::prompt_tokens`] means the same on both APIs.

mod stream;

use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::LlmConfig;
use crate::http::Transport;
use crate::{ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Message, ToolCall, ToolSpec, Usage};
use picogent_support::retry::{RetryConfig, with_retry};
use picogent_support::secret::Secret;

/// The API version picogent speaks; the shapes here are that version's.
pub(crate) const ANTHROPIC_VERSION: &str = "2023-06-01";

/// A model behind the Messages API: Anthropic's, or a server that speaks it (llama.cpp's).
#[derive(Debug, Clone)]
pub struct AnthropicChat {
    transport: Transport,
    /// `{base_url}/messages` is called.
    base_url: String,
    model: String,
    api_key: Option<Secret>,
    temperature: Option<f32>,
    max_output_tokens: u32,
    parallel_tool_calls: Option<bool>,
    prompt_cache: bool,
    retry: RetryConfig,
}

impl AnthropicChat {
    /// Builds the client with an explicit key (or none, for a local server).
    pub fn new(config: &LlmConfig, api_key: Option<Secret>) -> Result<AnthropicChat, LlmError> {
        Ok(AnthropicChat {
            transport: Transport::new(config)?,
            base_url: config.base_url.trim_end_matches('/').to_string(),
            model: config.model.clone(),
            api_key,
            temperature: config.temperature,
            max_output_tokens: config.max_output_tokens.unwrap_or(crate::config::DEFAULT_MAX_OUTPUT_TOKENS),
            parallel_tool_calls: config.parallel_tool_calls,
            prompt_cache: config.prompt_cache,
            retry: config.retry.clone(),
        })
    }

    async fn attempt(&self, body: &bytes::Bytes, request: &ChatRequest<'_>) -> Result<ChatResponse, LlmError> {
        let _slot = self.transport.slot().await?;
        let mut post = self
            .transport
            .post(&format!("{}/messages", self.base_url), body)
            .header("anthropic-version", ANTHROPIC_VERSION);
        if let Some(key) = &self.api_key {
            post = post.header("x-api-key", key.expose());
        }
        let response = self.transport.send(post, classify_error).await?;
        let answer = if self.transport.stream {
            let mut answer = stream::Streamed::default();
            self.transport.events(response, |data| answer.add_event(data)).await?;
            answer.into_answer()?
        } else {
            let bytes = self.transport.body(response).await?;
            serde_json::from_slice::<WireAnswer>(&bytes)
                .map_err(|e| LlmError::BadResponse { message: format!("not a Messages API answer: {e}") })?
        };
        answer.into_response(request)
    }

    /// The request's JSON body: the stable prefix first (tools, then system), each tool's JSON
    /// kept per definition ([`tool_json`]), so it is the same bytes on every turn.
    fn wire_body(&self, request: &ChatRequest<'_>) -> Result<Vec<u8>, serde_json::Error> {
        let (system, messages) = wire_conversation(request.messages, self.prompt_cache);
        let max_tokens =
            request.max_output_tokens.map_or(self.max_output_tokens, |asked| asked.min(self.max_output_tokens));
        let mut head = serde_json::Map::new();
        head.insert("model".into(), json!(self.model));
        head.insert("max_tokens".into(), json!(max_tokens.max(1)));
        if let Some(temperature) = self.temperature {
            head.insert("temperature".into(), json!(temperature));
        }
        if self.transport.stream {
            head.insert("stream".into(), json!(true));
        }
        if self.parallel_tool_calls == Some(false) && !request.tools.is_empty() {
            head.insert("tool_choice".into(), json!({"type": "auto", "disable_parallel_tool_use": true}));
        }
        let mut body = serde_json::to_vec(&Value::Object(head))?;
        body.pop(); // the closing brace; the rest follows in the order the API caches it
        if !request.tools.is_empty() {
            body.extend_from_slice(br#","tools":["#);
            for (i, tool) in request.tools.iter().enumerate() {
                if i > 0 {
                    body.push(b',');
                }
                let json = tool_json(tool)?;
                if self.prompt_cache && i + 1 == request.tools.len() {
                    body.extend_from_slice(&json.as_bytes()[..json.len() - 1]);
                    body.extend_from_slice(br#","cache_control":{"type":"ephemeral"}}"#);
                } else {
                    body.extend_from_slice(json.as_bytes());
                }
            }
            body.push(b']');
        }
        if !system.is_empty() {
            body.extend_from_slice(br#","system":"#);
            body.extend_from_slice(&serde_json::to_vec(&system)?);
        }
        body.extend_from_slice(br#","messages":"#);
        body.extend_from_slice(&serde_json::to_vec(&messages)?);
        body.push(b'}');
        Ok(body)
    }
}

impl ChatModel for AnthropicChat {
    fn complete<'a>(&'a self, request: &'a ChatRequest<'a>) -> BoxFuture<'a, Result<ChatResponse, LlmError>> {
        Box::pin(async move {
            let body = self
                .wire_body(request)
                .map_err(|e| LlmError::Config { message: format!("cannot serialise the request: {e}") })?;
            let body = bytes::Bytes::from(body);
            with_retry(&self.retry, || self.attempt(&body, request)).await
        })
    }
}

/// One tool as the Messages API takes it, `{"name","description","input_schema"}`, serialised
/// once per definition ([`crate::PerDefinition`]).
fn tool_json(tool: &ToolSpec) -> Result<std::sync::Arc<str>, serde_json::Error> {
    static KNOWN: std::sync::OnceLock<crate::PerDefinition<std::sync::Arc<str>>> = std::sync::OnceLock::new();
    KNOWN.get_or_init(crate::PerDefinition::new).get(&tool.name, &tool.description, &tool.parameters, || {
        let mut schema = (*tool.parameters).clone();
        // The API requires an object schema; a tool without one takes an empty object.
        schema.entry("type").or_insert_with(|| json!("object"));
        let value = json!({"name": tool.name, "description": tool.description, "input_schema": schema});
        serde_json::to_string(&value).map(std::sync::Arc::from)
    })
}

const EPHEMERAL: &str = "ephemeral";

/// The conversation as `system` blocks and `messages`, in the API's rules: only `user` and
/// `assistant` turns, alternating, the first a user turn; a turn's content as blocks; tool
/// results in the user turn after the calls, first in it. A system message after the first turn
/// (a note the loop adds) goes in as user text, since `system` is one block at the top.
fn wire_conversation(messages: &[Message], cache: bool) -> (Vec<Value>, Vec<Value>) {
    let mut system: Vec<Value> = Vec::new();
    let mut turns: Vec<(&'static str, Vec<Value>)> = Vec::new();
    let push = |turns: &mut Vec<(&'static str, Vec<Value>)>, role: &'static str, block: Value| match turns.last_mut() {
        Some((last, blocks)) if *last == role => blocks.push(block),
        _ => turns.push((role, vec![block])),
    };
    for message in messages {
        match message {
            Message::System { content } if turns.is_empty() => system.push(json!({"type": "text", "text": content})),
            Message::System { content } => push(&mut turns, "user", text_block(content)),
            Message::User { content } => push(&mut turns, "user", text_block(content)),
            Message::Assistant { content, tool_calls, refusal } => {
                let text = content.as_deref().or(refusal.as_deref()).filter(|text| !text.trim().is_empty());
                if let Some(text) = text {
                    push(&mut turns, "assistant", text_block(text));
                }
                for call in tool_calls {
                    // The loop answered a call whose arguments were not a JSON object with an
                    // error; the API carries only objects, so it is sent as an empty one.
                    let input = match serde_json::from_str::<Value>(&call.arguments) {
                        Ok(value @ Value::Object(_)) => value,
                        _ => json!({}),
                    };
                    push(
                        &mut turns,
                        "assistant",
                        json!({"type": "tool_use", "id": tool_use_id(&call.id), "name": call.name, "input": input}),
                    );
                }
            }
            Message::Tool { tool_call_id, content, is_error, .. } => {
                let mut block = json!({"type": "tool_result", "tool_use_id": tool_use_id(tool_call_id)});
                if !content.is_empty() {
                    block["content"] = json!(content);
                }
                if *is_error {
                    block["is_error"] = json!(true);
                }
                push(&mut turns, "user", block);
            }
        }
    }
    if turns.first().is_some_and(|(role, _)| *role == "assistant") {
        turns.insert(0, ("user", vec![text_block("(the conversation so far)")]));
    }
    if cache {
        if let Some(last) = system.last_mut() {
            last["cache_control"] = json!({"type": EPHEMERAL});
        }
        if let Some(last) = turns.last_mut().and_then(|(_, blocks)| blocks.last_mut()) {
            last["cache_control"] = json!({"type": EPHEMERAL});
        }
    }
    let messages = turns.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect();
    (system, messages)
}

/// The API refuses empty text blocks.
fn text_block(text: &str) -> Value {
    let text = if text.trim().is_empty() { "(empty)" } else { text };
    json!({"type": "text", "text": text})
}

/// The API takes ids of letters, digits, `_` and `-`; a call id from another server (a resumed
/// conversation) may have others.
fn tool_use_id(id: &str) -> String {
    let id: String =
        id.chars().map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c } else { '_' }).collect();
    if id.is_empty() { "toolu_".to_string() } else { id }
}

/// A whole answer, as the API sends it without streaming.
#[derive(Debug, Default, Deserialize)]
struct WireAnswer {
    #[serde(default)]
    content: Vec<WireBlock>,
    #[serde(default)]
    stop_reason: Option<String>,
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock {
    Text {
        text: String,
    },
    ToolUse {
        id: String,
        name: String,
        #[serde(default)]
        input: Value,
    },
    /// A streamed tool use whose joined input is not JSON (a fenced object, stray text, a cut):
    /// the model's text as it came, for the loop to repair or refuse as on the other API. Never
    /// read from the wire.
    #[serde(skip)]
    RawToolUse {
        id: String,
        name: String,
        arguments: String,
    },
    /// Thinking blocks and the rest: not read (reasoning is never posted).
    #[serde(other)]
    Other,
}

#[derive(Debug, Default, Clone, Copy, Deserialize)]
struct WireUsage {
    #[serde(default)]
    input_tokens: Option<u64>,
    #[serde(default)]
    output_tokens: Option<u64>,
    #[serde(default)]
    cache_creation_input_tokens: Option<u64>,
    #[serde(default)]
    cache_read_input_tokens: Option<u64>,
}

impl WireUsage {
    /// A later event's counts over an earlier one's, field by field.
    fn update(&mut self, later: WireUsage) {
        self.input_tokens = later.input_tokens.or(self.input_tokens);
        self.output_tokens = later.output_tokens.or(self.output_tokens);
        self.cache_creation_input_tokens = later.cache_creation_input_tokens.or(self.cache_creation_input_tokens);
        self.cache_read_input_tokens = later.cache_read_input_tokens.or(self.cache_read_input_tokens);
    }
}

impl WireAnswer {
    fn into_response(self, request: &ChatRequest<'_>) -> Result<ChatResponse, LlmError> {
        let mut text: Option<String> = None;
        let mut tool_calls = Vec::new();
        for block in self.content {
            match block {
                WireBlock::Text { text: piece } => text.get_or_insert_with(String::new).push_str(&piece),
                WireBlock::ToolUse { id, name, input } => {
                    let arguments = if input.is_null() { "{}".to_string() } else { input.to_string() };
                    tool_calls.push(ToolCall { id, name, arguments });
                }
                WireBlock::RawToolUse { id, name, arguments } => tool_calls.push(ToolCall { id, name, arguments }),
                WireBlock::Other => {}
            }
        }
        let finish_reason = match self.stop_reason.as_deref() {
            Some("end_turn" | "stop_sequence") => FinishReason::Stop,
            Some("tool_use") => FinishReason::ToolCalls,
            Some("max_tokens" | "model_context_window_exceeded") => FinishReason::Length,
            Some("refusal") => FinishReason::ContentFilter,
            _ => FinishReason::Other,
        };
        let usage = match self.usage {
            Some(WireUsage {
                input_tokens: Some(input),
                output_tokens,
                cache_creation_input_tokens,
                cache_read_input_tokens,
            }) => {
                let read = cache_read_input_tokens.unwrap_or(0);
                let written = cache_creation_input_tokens.unwrap_or(0);
                Usage {
                    prompt_tokens: input + read + written,
                    completion_tokens: output_tokens.unwrap_or(0),
                    cached_tokens: read,
                    cache_write_tokens: written,
                    estimated: false,
                }
            }
            _ => crate::estimated_usage(request, text.as_deref(), None, &tool_calls),
        };
        let (content, refusal) = match finish_reason {
            FinishReason::ContentFilter => (None, text),
            _ => (text.map(|text| crate::strip_reasoning(&text)), None),
        };
        Ok(ChatResponse { content, tool_calls, refusal, finish_reason, usage })
    }
}

#[derive(Debug, Deserialize)]
struct ErrorObject {
    #[serde(rename = "type", default)]
    kind: String,
    #[serde(default)]
    message: String,
}

#[derive(Deserialize)]
struct ErrorEnvelope {
    error: ErrorObject,
}

/// The request fields picogent sends, as an `invalid_request_error` about one names it
/// (`max_tokens: Field required`, `tools.0.input_schema: …`).
const REQUEST_FIELDS: [&str; 7] = ["max_tokens", "temperature", "tool_choice", "tools", "system", "stream", "model"];

/// Maps a failed answer to the error the loop acts on, by the API's error `type`:
/// `overloaded_error` (529) and `api_error` are retried, after `retry-after` when given;
/// `rate_limit_error` waits for `retry-after`; a prompt too long is the context error; an
/// invalid request names the field it is about. A body in another shape (a server that speaks
/// the API with OpenAI's error bodies, as llama.cpp's does) is read the OpenAI way.
pub(crate) fn classify_error(status: u16, retry_after: Option<Duration>, body: &[u8]) -> LlmError {
    let Ok(ErrorEnvelope { error }) = serde_json::from_slice::<ErrorEnvelope>(body) else {
        return crate::openai::classify_error(status, retry_after, body);
    };
    let ErrorObject { kind, message } = error;
    let lower = message.to_lowercase();
    match kind.as_str() {
        "overloaded_error" => LlmError::Server { status, retry_after, message },
        "api_error" | "timeout_error" => LlmError::Server { status, retry_after, message },
        "rate_limit_error" => LlmError::RateLimited { retry_after, message },
        "authentication_error" | "permission_error" => LlmError::Unauthorized { status, message },
        "not_found_error" if lower.contains("model") => LlmError::ModelNotFound { message },
        "request_too_large" => LlmError::ContextLength { message },
        "invalid_request_error" if is_context_error(&lower) => LlmError::ContextLength { message },
        "invalid_request_error" | "not_found_error" => {
            let field = lower.split([':', ' ', '.']).next().unwrap_or_default();
            match REQUEST_FIELDS.iter().find(|known| **known == field) {
                Some(parameter) => LlmError::ParameterRefused { status, parameter: parameter.to_string(), message },
                // Out of credit ("Your credit balance is too low …") among them: never retried,
                // and its message kept in the run's record.
                None => LlmError::Rejected { status, message },
            }
        }
        _ => crate::openai::classify_error(status, retry_after, body),
    }
}

fn is_context_error(lower: &str) -> bool {
    ["prompt is too long", "exceed context limit", "context window", "context length", "too many tokens"]
        .iter()
        .any(|needle| lower.contains(needle))
}

#[cfg(test)]
mod tests;
