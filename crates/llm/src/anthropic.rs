//! The Anthropic Messages API adapter (`llm.api: "anthropic"`): the only module that knows that
//! wire format. `POST {base_url}/messages` with `x-api-key` and `anthropic-version`, `system` and
//! `tools` (with `input_schema`) apart from the conversation, `tool_use` and `tool_result`
//! blocks, `max_tokens` always sent (the API requires it), and streaming read from its events.
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

use std::time::Duration;

use futures::future::BoxFuture;
use serde::Deserialize;
use serde_json::{Value, json};

use crate::config::LlmConfig;
use crate::http::{MAX_STREAMED_BLOCKS, Transport};
use crate::{ChatModel, ChatRequest, ChatResponse, FinishReason, LlmError, Message, ToolCall, ToolSpec, Usage};
use picogent_support::retry::{RetryConfig, with_retry};
use picogent_support::secret::Secret;

/// The API version picogent speaks; the shapes here are that version's.
pub const ANTHROPIC_VERSION: &str = "2023-06-01";

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
            let mut answer = Streamed::default();
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
    pub fn wire_body(&self, request: &ChatRequest<'_>) -> Result<Vec<u8>, serde_json::Error> {
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

/// A streamed answer being put together from its events: `message_start` (the usage so far),
/// `content_block_start` / `_delta` / `_stop` per block, `message_delta` (the stop reason and the
/// final usage), `message_stop`; an `error` event ends it with that error. A stream that closes
/// before `message_stop` was cut short: a connection error, retried as a dropped connection is.
#[derive(Debug, Default)]
struct Streamed {
    /// By the block's index: text, or a tool call whose input arrives as JSON pieces. At most
    /// [`MAX_STREAMED_BLOCKS`]: an index past it is a protocol error, not an allocation.
    blocks: Vec<StreamedBlock>,
    stop_reason: Option<String>,
    usage: Option<WireUsage>,
    error: Option<ErrorObject>,
    /// `message_stop` arrived: the answer is whole.
    stopped: bool,
}

#[derive(Debug, Default)]
enum StreamedBlock {
    #[default]
    Other,
    Text(String),
    ToolUse {
        id: String,
        name: String,
        input: String,
    },
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Event {
    MessageStart {
        message: EventMessage,
    },
    ContentBlockStart {
        index: usize,
        content_block: WireBlock,
    },
    ContentBlockDelta {
        index: usize,
        delta: Delta,
    },
    MessageDelta {
        #[serde(default)]
        delta: MessageDelta,
        #[serde(default)]
        usage: Option<WireUsage>,
    },
    MessageStop,
    Error {
        error: ErrorObject,
    },
    #[serde(other)]
    Other,
}

#[derive(Deserialize)]
struct EventMessage {
    #[serde(default)]
    usage: Option<WireUsage>,
}

#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum Delta {
    #[serde(rename = "text_delta")]
    Text { text: String },
    #[serde(rename = "input_json_delta")]
    InputJson { partial_json: String },
    #[serde(other)]
    Other,
}

#[derive(Deserialize, Default)]
struct MessageDelta {
    #[serde(default)]
    stop_reason: Option<String>,
}

impl Streamed {
    /// Adds one event's `data`; `true` at `message_stop`.
    fn add_event(&mut self, data: &str) -> Result<bool, String> {
        let event: Event = serde_json::from_str(data).map_err(|e| format!("a streamed event is not valid: {e}"))?;
        match event {
            Event::MessageStart { message } => self.usage = message.usage,
            Event::ContentBlockStart { index, content_block } => {
                if index >= MAX_STREAMED_BLOCKS {
                    return Err(format!(
                        "a streamed content block has index {index}: an answer has at most {MAX_STREAMED_BLOCKS} blocks"
                    ));
                }
                while self.blocks.len() <= index {
                    self.blocks.push(StreamedBlock::Other);
                }
                self.blocks[index] = match content_block {
                    WireBlock::Text { text } => StreamedBlock::Text(text),
                    WireBlock::ToolUse { id, name, input } => {
                        // The input comes in the deltas; the start carries `{}`.
                        let input = if input.as_object().is_some_and(|o| !o.is_empty()) {
                            input.to_string()
                        } else {
                            String::new()
                        };
                        StreamedBlock::ToolUse { id, name, input }
                    }
                    WireBlock::Other | WireBlock::RawToolUse { .. } => StreamedBlock::Other,
                };
            }
            Event::ContentBlockDelta { index, delta } => match (self.blocks.get_mut(index), delta) {
                (Some(StreamedBlock::Text(text)), Delta::Text { text: piece }) => text.push_str(&piece),
                (Some(StreamedBlock::ToolUse { input, .. }), Delta::InputJson { partial_json }) => {
                    input.push_str(&partial_json)
                }
                _ => {}
            },
            Event::MessageDelta { delta, usage } => {
                if delta.stop_reason.is_some() {
                    self.stop_reason = delta.stop_reason;
                }
                if let Some(later) = usage {
                    self.usage.get_or_insert_with(WireUsage::default).update(later);
                }
            }
            Event::MessageStop => {
                self.stopped = true;
                return Ok(true);
            }
            Event::Error { error } => {
                self.error = Some(error);
                return Ok(true);
            }
            Event::Other => {}
        }
        Ok(false)
    }

    fn into_answer(self) -> Result<WireAnswer, LlmError> {
        if let Some(error) = self.error {
            // An error mid-stream (`overloaded_error` most often) is classified as the same
            // error before the stream would have been, with the status its type stands for.
            let status = match error.kind.as_str() {
                "overloaded_error" => 529,
                "rate_limit_error" => 429,
                _ => 500,
            };
            let body =
                serde_json::to_vec(&json!({"type": "error", "error": {"type": error.kind, "message": error.message}}))
                    .unwrap_or_default();
            return Err(classify_error(status, None, &body));
        }
        if !self.stopped {
            return Err(LlmError::Connection {
                message: "the answer's stream ended before `message_stop`: it was cut short".to_string(),
            });
        }
        let content = self
            .blocks
            .into_iter()
            .map(|block| match block {
                StreamedBlock::Text(text) => WireBlock::Text { text },
                StreamedBlock::ToolUse { id, name, input } if input.trim().is_empty() => {
                    WireBlock::ToolUse { id, name, input: json!({}) }
                }
                StreamedBlock::ToolUse { id, name, input } => match serde_json::from_str(&input) {
                    Ok(parsed) => WireBlock::ToolUse { id, name, input: parsed },
                    // Arguments that are not JSON stay the model's text, for the loop to repair
                    // (a fenced object) or refuse, as on the other API.
                    Err(_) => WireBlock::RawToolUse { id, name, arguments: input },
                },
                StreamedBlock::Other => WireBlock::Other,
            })
            .collect();
        Ok(WireAnswer { content, stop_reason: self.stop_reason, usage: self.usage })
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
mod tests {
    use super::*;
    use crate::ModelFailure;

    fn chat(cache: bool) -> AnthropicChat {
        let config = LlmConfig {
            max_output_tokens: Some(500),
            prompt_cache: cache,
            parallel_tool_calls: Some(false),
            ..LlmConfig::new("http://127.0.0.1:1/v1/", "claude-x")
        };
        AnthropicChat::new(&config, None).unwrap()
    }

    fn conversation() -> Vec<Message> {
        vec![
            Message::system("be brief"),
            Message::user("Task: TE-1"),
            Message::Assistant {
                content: Some("Looking.".into()),
                tool_calls: vec![
                    ToolCall { id: "c1".into(), name: "get_task".into(), arguments: r#"{"task_id":"TE-1"}"#.into() },
                    ToolCall { id: "call.2".into(), name: "get_task".into(), arguments: "{broken".into() },
                ],
                refusal: None,
            },
            Message::Tool { tool_call_id: "c1".into(), name: "get_task".into(), content: "{}".into(), is_error: false },
            Message::Tool {
                tool_call_id: "call.2".into(),
                name: "get_task".into(),
                content: "error: bad".into(),
                is_error: true,
            },
            Message::user("also this"),
        ]
    }

    fn tools() -> Vec<ToolSpec> {
        ["get_task", "post_message"]
            .into_iter()
            .map(|name| ToolSpec { name: name.into(), description: "d".into(), parameters: Default::default() })
            .collect()
    }

    #[test]
    fn the_body_has_the_apis_shape_and_its_breakpoints() {
        let messages = conversation();
        let tools = tools();
        let request = ChatRequest { messages: &messages, tools: &tools, max_output_tokens: Some(200) };
        let body: Value = serde_json::from_slice(&chat(true).wire_body(&request).unwrap()).unwrap();
        assert_eq!(body["max_tokens"], 200);
        assert_eq!(body["tool_choice"]["disable_parallel_tool_use"], true);
        assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
        assert!(body["tools"][0].get("cache_control").is_none());
        assert_eq!(body["tools"][1]["cache_control"]["type"], "ephemeral");
        assert_eq!(body["system"][0]["text"], "be brief");
        assert_eq!(body["system"][0]["cache_control"]["type"], "ephemeral");
        let turns = body["messages"].as_array().unwrap();
        let roles: Vec<&str> = turns.iter().map(|t| t["role"].as_str().unwrap()).collect();
        assert_eq!(roles, ["user", "assistant", "user"]);
        assert_eq!(turns[1]["content"][1]["input"]["task_id"], "TE-1");
        assert_eq!(turns[1]["content"][2]["input"], json!({}), "arguments that were not an object");
        assert_eq!(turns[1]["content"][2]["id"], "call_2");
        let last = turns[2]["content"].as_array().unwrap();
        assert_eq!(last[0]["type"], "tool_result");
        assert_eq!(last[1]["is_error"], true);
        assert_eq!(last[1]["tool_use_id"], "call_2");
        assert_eq!(last[2]["text"], "also this");
        assert_eq!(last[2]["cache_control"]["type"], "ephemeral");
        let marks = serde_json::to_string(&body).unwrap().matches("cache_control").count();
        assert_eq!(marks, 3, "at most four breakpoints are allowed");
        let uncached: Value = serde_json::from_slice(&chat(false).wire_body(&request).unwrap()).unwrap();
        assert!(!serde_json::to_string(&uncached).unwrap().contains("cache_control"));
    }

    #[test]
    fn the_prefix_is_the_same_bytes_on_the_next_turn() {
        let tools = tools();
        let mut messages = conversation();
        let first = chat(true).wire_body(&ChatRequest { messages: &messages, tools: &tools, max_output_tokens: None });
        messages.push(Message::Assistant { content: Some("done".into()), tool_calls: vec![], refusal: None });
        messages.push(Message::user("thanks"));
        let second = chat(true).wire_body(&ChatRequest { messages: &messages, tools: &tools, max_output_tokens: None });
        let (first, second) = (String::from_utf8(first.unwrap()).unwrap(), String::from_utf8(second.unwrap()).unwrap());
        let prefix = &first[..first.find(r#""messages""#).unwrap()];
        assert!(second.starts_with(prefix));
    }

    #[test]
    fn an_answer_with_tool_use_and_cache_usage_is_read() {
        let answer: WireAnswer = serde_json::from_value(json!({
            "id": "msg_1", "type": "message", "role": "assistant",
            "content": [{"type": "thinking", "thinking": "hm", "signature": ""},
                        {"type": "text", "text": "On it."},
                        {"type": "tool_use", "id": "toolu_1", "name": "get_task", "input": {"task_id": "TE-1"}}],
            "stop_reason": "tool_use",
            "usage": {"input_tokens": 10, "output_tokens": 7, "cache_read_input_tokens": 1500, "cache_creation_input_tokens": 300}
        }))
        .unwrap();
        let request = ChatRequest { messages: &[], tools: &[], max_output_tokens: None };
        let response = answer.into_response(&request).unwrap();
        assert_eq!(response.content.as_deref(), Some("On it."));
        assert_eq!(response.tool_calls[0].arguments, r#"{"task_id":"TE-1"}"#);
        assert_eq!(response.finish_reason, FinishReason::ToolCalls);
        assert_eq!(
            (response.usage.prompt_tokens, response.usage.cached_tokens, response.usage.cache_write_tokens),
            (1810, 1500, 300)
        );
    }

    #[test]
    fn streamed_events_add_up_to_one_answer() {
        let events = [
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1, "cache_read_input_tokens": 2000}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hel"}}),
            json!({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "lo"}}),
            json!({"type": "ping"}),
            json!({"type": "content_block_start", "index": 1, "content_block": {"type": "tool_use", "id": "t1", "name": "get_task", "input": {}}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "{\"task"}}),
            json!({"type": "content_block_delta", "index": 1, "delta": {"type": "input_json_delta", "partial_json": "_id\": \"TE-1\"}"}}),
            json!({"type": "content_block_stop", "index": 1}),
            json!({"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}}),
        ];
        let mut streamed = Streamed::default();
        for event in &events {
            assert!(!streamed.add_event(&event.to_string()).unwrap());
        }
        assert!(streamed.add_event(r#"{"type":"message_stop"}"#).unwrap());
        let request = ChatRequest { messages: &[], tools: &[], max_output_tokens: None };
        let response = streamed.into_answer().unwrap().into_response(&request).unwrap();
        assert_eq!(response.content.as_deref(), Some("Hello"));
        assert_eq!(response.tool_calls[0].arguments, r#"{"task_id":"TE-1"}"#);
        assert_eq!(response.finish_reason, FinishReason::Length);
        assert_eq!(
            (response.usage.prompt_tokens, response.usage.completion_tokens, response.usage.cached_tokens),
            (2005, 9, 2000)
        );
        let mut failed = Streamed::default();
        assert!(
            failed.add_event(r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#).unwrap()
        );
        assert!(matches!(failed.into_answer(), Err(LlmError::Server { .. })));
    }

    /// Feeds `events` (each an event's data) to a fresh [`Streamed`].
    fn streamed(events: &[Value]) -> Streamed {
        let mut streamed = Streamed::default();
        for event in events {
            streamed.add_event(&event.to_string()).unwrap();
        }
        streamed
    }

    fn tool_use_events(pieces: &[&str]) -> Vec<Value> {
        let mut events = vec![
            json!({"type": "message_start", "message": {"usage": {"input_tokens": 5, "output_tokens": 1}}}),
            json!({"type": "content_block_start", "index": 0, "content_block": {"type": "tool_use", "id": "t1", "name": "add_step", "input": {}}}),
        ];
        for piece in pieces {
            events.push(json!({"type": "content_block_delta", "index": 0, "delta": {"type": "input_json_delta", "partial_json": piece}}));
        }
        events.push(json!({"type": "content_block_stop", "index": 0}));
        events.push(
            json!({"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 9}}),
        );
        events.push(json!({"type": "message_stop"}));
        events
    }

    #[test]
    fn streamed_input_that_is_not_json_reaches_the_loop_as_the_models_text() {
        let request = ChatRequest { messages: &[], tools: &[], max_output_tokens: None };
        let fenced = "```json\n{\"task_id\": \"TE-1\", \"title\": \"Draft\"}\n```";
        let (head, tail) = fenced.split_at(9);
        let response =
            streamed(&tool_use_events(&[head, tail])).into_answer().unwrap().into_response(&request).unwrap();
        // As written, not as a JSON string of it: the loop repairs a fenced object.
        assert_eq!(response.tool_calls[0].arguments, fenced);
        let cut = streamed(&tool_use_events(&["{\"task_id\": \"TE", "-1\", \"ti"]));
        let response = cut.into_answer().unwrap().into_response(&request).unwrap();
        assert_eq!(response.tool_calls[0].arguments, "{\"task_id\": \"TE-1\", \"ti");
        // Valid JSON is read as before; no pieces at all is an empty object.
        let whole = streamed(&tool_use_events(&["{\"task_id\":", " \"TE-1\"}"]));
        let response = whole.into_answer().unwrap().into_response(&request).unwrap();
        assert_eq!(response.tool_calls[0].arguments, r#"{"task_id":"TE-1"}"#);
        let empty = streamed(&tool_use_events(&[]));
        assert_eq!(empty.into_answer().unwrap().into_response(&request).unwrap().tool_calls[0].arguments, "{}");
    }

    #[test]
    fn a_block_index_past_the_cap_is_a_protocol_error_not_an_allocation() {
        use picogent_support::retry::{RetryDecision, Retryable};
        let start = |index: usize| {
            json!({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}})
                .to_string()
        };
        let mut answer = Streamed::default();
        let error = answer.add_event(&start(usize::MAX / 2)).unwrap_err();
        assert!(error.contains("at most 256 blocks"), "{error}");
        assert!(answer.blocks.capacity() <= MAX_STREAMED_BLOCKS, "nothing was allocated for it");
        answer.add_event(&start(MAX_STREAMED_BLOCKS - 1)).unwrap();
        assert_eq!(answer.blocks.len(), MAX_STREAMED_BLOCKS);
        assert!(answer.add_event(&start(MAX_STREAMED_BLOCKS)).is_err());
        // The transport turns the refusal into a server failure, retried as one.
        let error = LlmError::BadResponse { message: error };
        assert_eq!(error.kind(), ModelFailure::ServerError);
        assert_eq!(error.retry_decision(), RetryDecision::Retry);
    }

    #[test]
    fn a_stream_that_closes_before_message_stop_is_a_connection_error() {
        use picogent_support::retry::{RetryDecision, Retryable};
        let mut events = tool_use_events(&["{\"task_id\": \"TE-1\"}"]);
        events.pop();
        // Everything but `message_stop`, the stop reason included: still cut short.
        let error = streamed(&events).into_answer().unwrap_err();
        assert!(matches!(error, LlmError::Connection { .. }), "{error:?}");
        assert!(error.to_string().contains("message_stop"), "{error}");
        assert_eq!(error.retry_decision(), RetryDecision::Retry, "retried as a dropped connection");
        // Nothing at all (a 200 whose body is no stream) is cut short too.
        assert!(matches!(Streamed::default().into_answer(), Err(LlmError::Connection { .. })));
    }

    #[test]
    fn errors_map_to_the_notices_causes() {
        use picogent_support::retry::{RetryDecision, Retryable};
        let body = |kind: &str, message: &str| {
            json!({"type": "error", "error": {"type": kind, "message": message}}).to_string()
        };
        let wait = Some(Duration::from_secs(3));
        let overloaded = classify_error(529, wait, body("overloaded_error", "Overloaded").as_bytes());
        assert_eq!(overloaded.retry_decision(), RetryDecision::RetryAfter(Duration::from_secs(3)));
        let limited = classify_error(429, wait, body("rate_limit_error", "slow down").as_bytes());
        assert_eq!(limited.kind(), ModelFailure::RateLimited);
        assert_eq!(limited.retry_decision(), RetryDecision::RetryAfter(Duration::from_secs(3)));
        let long = classify_error(
            400,
            None,
            body("invalid_request_error", "prompt is too long: 210000 tokens > 200000 maximum").as_bytes(),
        );
        assert_eq!(long.kind(), ModelFailure::ContextLength);
        let field = classify_error(400, None, body("invalid_request_error", "max_tokens: Field required").as_bytes());
        assert_eq!(field.kind(), ModelFailure::ParameterRefused { parameter: "max_tokens".into() });
        let key = classify_error(401, None, body("authentication_error", "invalid x-api-key").as_bytes());
        assert_eq!(key.kind(), ModelFailure::Unauthorized);
        let credit = "Your credit balance is too low to access the Anthropic API. Please go to Plans & Billing.";
        let broke = classify_error(400, None, body("invalid_request_error", credit).as_bytes());
        assert_eq!(broke.kind(), ModelFailure::Rejected);
        assert_eq!(broke.retry_decision(), RetryDecision::Stop, "waiting does not bring credit");
        assert!(broke.to_string().contains("credit balance"), "the reason is kept: {broke}");
        let choice = classify_error(
            400,
            None,
            body("invalid_request_error", "tool_choice.disable_parallel_tool_use: Extra inputs are not permitted")
                .as_bytes(),
        );
        assert_eq!(choice.kind(), ModelFailure::ParameterRefused { parameter: "tool_choice".into() });
        // llama.cpp's /v1/messages answers errors in OpenAI's shape.
        let llama = br#"{"error":{"code":400,"message":"the request exceeds the available context size, try increasing it","type":"exceed_context_size_error"}}"#;
        assert_eq!(classify_error(400, None, llama).kind(), ModelFailure::ContextLength);
    }
}
