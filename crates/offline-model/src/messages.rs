//! Anthropic's Messages API, `POST /v1/messages` (version 2023-06-01): the wire request read into
//! the project's types, the answer (a message, or its server-sent events with `"stream": true`,
//! in `messages/stream.rs`), the API's error shape, and its explicit prompt caching
//! (`cache_control` breakpoints, see [`crate::cache`]).
//!
//! The request becomes the same [`Message`] list the chat-completions path makes, so the planner,
//! the script's checks, the faults and the record are shared: the system text (a string, or each
//! text block) becomes a [`Message::System`]; in a user message each `tool_result` becomes a
//! [`Message::Tool`] (its tool's name taken from the earlier `tool_use` with that id) and each
//! text block a [`Message::User`], in their order; an assistant message becomes one
//! [`Message::Assistant`] (its texts joined), its `tool_use` inputs serialized as the calls' JSON
//! text. This is the inverse of how a client folds its messages into the API's alternating turns,
//! so the prompt's token count here is the client's estimate.
//!
//! Deliberate differences from the real API:
//! - `usage` is always sent, also with `omit_usage` (the Messages API always sends it), with
//!   real counts;
//! - a tool call whose arguments are not a JSON object (the `invalid_arguments` fault, a script's
//!   `raw_arguments`) cannot be a `tool_use.input`, which is always an object. A whole message
//!   sends `{"__raw_arguments": "<the text>"}`, so the call still fails at dispatch (no tool
//!   takes that argument) and the model reads why; a stream sends the broken text itself as the
//!   `input_json_delta` pieces, as a stream with fine-grained tool streaming can, so the client's
//!   parse of the joined pieces meets it;
//! - a missing `x-api-key` is recorded, not refused (offline there is no key to check); a missing
//!   `anthropic-version` is refused, as the real API does.

mod stream;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::cache::{self, CacheUse, Unit};
use crate::script::ScriptFault;
use crate::{Capped, Fault, Finish, InFlight, MODEL_NAME, Reply, ServerState};
use picogent_llm::{Message, TOOL_ERROR_PREFIX, ToolCall, ToolSpec, estimate_prompt_tokens};

/// Where the Messages API is served.
pub const PATH: &str = "/v1/messages";

/// The real API's most `cache_control` breakpoints in one request.
const MAX_BREAKPOINTS: usize = 4;

/// The message the real API sends for an over-long prompt, the default of a scripted
/// `context_length_exceeded`.
const PROMPT_TOO_LONG: &str = "prompt is too long: 250000 tokens > 200000 maximum";

// The request shape, as much of it as the endpoint reads; each element of a list is read on its
// own (`read_request`), so an error can say which one is wrong and the cache can hash it as sent.
#[derive(Deserialize)]
struct WireRequest {
    #[serde(default)]
    model: String,
    #[serde(default)]
    max_tokens: Option<u64>,
    #[serde(default)]
    system: Option<Value>,
    #[serde(default)]
    messages: Option<Vec<Value>>,
    #[serde(default)]
    tools: Vec<Value>,
    #[serde(default)]
    temperature: Option<f64>,
}

#[derive(Deserialize)]
struct WireMessage {
    role: String,
    content: Value,
}

#[derive(Deserialize)]
struct WireTool {
    name: String,
    #[serde(default)]
    description: Option<String>,
    input_schema: Value,
    #[serde(default)]
    cache_control: Option<CacheControl>,
}

/// A content block, as much of it as the endpoint reads.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireBlock {
    Text {
        text: String,
        #[serde(default)]
        cache_control: Option<CacheControl>,
    },
    ToolUse {
        id: String,
        name: String,
        input: Value,
        #[serde(default)]
        cache_control: Option<CacheControl>,
    },
    ToolResult {
        tool_use_id: String,
        #[serde(default)]
        content: Option<Value>,
        #[serde(default)]
        is_error: bool,
        #[serde(default)]
        cache_control: Option<CacheControl>,
    },
}

/// A text block: the system's blocks and a tool result's.
#[derive(Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
enum WireTextBlock {
    Text {
        text: String,
        #[serde(default)]
        cache_control: Option<CacheControl>,
    },
}

#[derive(Deserialize)]
struct CacheControl {
    #[serde(rename = "type")]
    kind: String,
    #[serde(default)]
    ttl: Option<String>,
}

/// A readable request: the project's form of it, and its units for the cache.
struct ReadRequest {
    model: String,
    max_tokens: u64,
    messages: Vec<Message>,
    tools: Vec<ToolSpec>,
    units: Vec<Unit>,
}

/// A unit whose token count is known once the whole request is read.
struct PendingUnit {
    content_hash: u64,
    owner: Owner,
    breakpoint: bool,
}

/// What a unit's prefix counts through: a tool of the list, or one of the project's messages.
#[derive(Clone, Copy)]
enum Owner {
    Tool(usize),
    Message(usize),
}

/// The request read so far.
#[derive(Default)]
struct Reader {
    messages: Vec<Message>,
    tools: Vec<ToolSpec>,
    units: Vec<PendingUnit>,
    breakpoints: usize,
}

impl Reader {
    /// Notes a unit carrying `markers` `cache_control` markers (its own and its nested blocks');
    /// `place` and `raw` name and hash it ([`cache::content_hash`]).
    fn unit(&mut self, place: &str, raw: &Value, owner: Owner, markers: usize) {
        self.breakpoints += markers;
        let breakpoint = markers > 0;
        self.units.push(PendingUnit { content_hash: cache::content_hash(place, raw), owner, breakpoint });
    }

    /// The index the next message will have.
    fn next_message(&self) -> Owner {
        Owner::Message(self.messages.len())
    }
}

/// `cache_control` is `{type: "ephemeral"}`, with `ttl` `5m` or `1h`; anything else is refused.
fn check_cache_control(at: &str, cache_control: Option<&CacheControl>) -> Result<bool, String> {
    let Some(cache_control) = cache_control else {
        return Ok(false);
    };
    if cache_control.kind != "ephemeral" {
        return Err(format!("{at}.cache_control.type: Input should be 'ephemeral'"));
    }
    match cache_control.ttl.as_deref() {
        None | Some("5m") | Some("1h") => Ok(true),
        Some(_) => Err(format!("{at}.cache_control.ttl: Input should be '5m' or '1h'")),
    }
}

/// Reads the wire request into the project's types; the error is the 400 answer's message.
fn read_request(body: &Value) -> Result<ReadRequest, String> {
    let request = WireRequest::deserialize(body)
        .map_err(|error| format!("the request body is not a messages request: {error}"))?;
    let Some(max_tokens) = request.max_tokens else {
        return Err("max_tokens: Field required".to_string());
    };
    if max_tokens == 0 {
        return Err("max_tokens: Input should be greater than or equal to 1".to_string());
    }
    let Some(wire_messages) = &request.messages else {
        return Err("messages: Field required".to_string());
    };
    if let Some(temperature) = request.temperature
        && !(0.0..=1.0).contains(&temperature)
    {
        return Err("temperature: Input should be between 0 and 1".to_string());
    }
    let mut reader = Reader::default();
    for (index, raw) in request.tools.iter().enumerate() {
        read_tool(&mut reader, index, raw)?;
    }
    if let Some(system) = &request.system {
        read_system(&mut reader, system)?;
    }
    for (index, raw) in wire_messages.iter().enumerate() {
        read_message(&mut reader, index, raw)?;
    }
    if reader.breakpoints > MAX_BREAKPOINTS {
        return Err(format!(
            "A maximum of {MAX_BREAKPOINTS} blocks with cache_control may be provided. Found {}.",
            reader.breakpoints
        ));
    }
    let units = token_units(&reader);
    Ok(ReadRequest { model: request.model, max_tokens, messages: reader.messages, tools: reader.tools, units })
}

fn read_tool(reader: &mut Reader, index: usize, raw: &Value) -> Result<(), String> {
    let at = format!("tools[{index}]");
    let tool = WireTool::deserialize(raw).map_err(|error| format!("{at}: {error}"))?;
    if !tool.input_schema.is_object() {
        return Err(format!("{at}.input_schema: Input should be an object"));
    }
    let breakpoint = check_cache_control(&at, tool.cache_control.as_ref())?;
    reader.tools.push(crate::tool_spec(&tool.name, tool.description.as_deref(), Some(&tool.input_schema)));
    reader.unit("tool", raw, Owner::Tool(index), usize::from(breakpoint));
    Ok(())
}

/// `system` is a string, or a list of text blocks: each becomes a system message.
fn read_system(reader: &mut Reader, system: &Value) -> Result<(), String> {
    match system {
        Value::String(text) => {
            reader.unit("system", &text_block(text), reader.next_message(), 0);
            reader.messages.push(Message::System { content: text.clone() });
        }
        Value::Array(blocks) => {
            for (index, raw) in blocks.iter().enumerate() {
                let at = format!("system[{index}]");
                let WireTextBlock::Text { text, cache_control } =
                    WireTextBlock::deserialize(raw).map_err(|error| format!("{at}: {error}"))?;
                let breakpoint = check_cache_control(&at, cache_control.as_ref())?;
                reader.unit("system", raw, reader.next_message(), usize::from(breakpoint));
                reader.messages.push(Message::System { content: text });
            }
        }
        _ => return Err("system: Input should be a valid string or a list of text blocks".to_string()),
    }
    Ok(())
}

/// A string content as the text block it stands for, so the cache sees both forms alike.
fn text_block(text: &str) -> Value {
    json!({"type": "text", "text": text})
}

fn read_message(reader: &mut Reader, index: usize, raw: &Value) -> Result<(), String> {
    let at = format!("messages[{index}]");
    let message = WireMessage::deserialize(raw).map_err(|error| format!("{at}: {error}"))?;
    let place = format!("message {index} {}", message.role);
    let string_block;
    let blocks: &[Value] = match &message.content {
        Value::String(text) => {
            string_block = [text_block(text)];
            &string_block
        }
        Value::Array(blocks) => blocks,
        _ => return Err(format!("{at}.content: Input should be a valid string or a list of content blocks")),
    };
    match message.role.as_str() {
        "user" => read_user_blocks(reader, &at, &place, blocks),
        "assistant" => read_assistant_blocks(reader, &at, &place, blocks),
        other => Err(format!("{at}.role: Input should be 'user' or 'assistant', not {other:?}")),
    }
}

/// A user message's blocks: each tool result a tool message, each text block a user message (a
/// client sends each of its messages as one block, merged into one turn as the API's alternation
/// of roles asks).
fn read_user_blocks(reader: &mut Reader, at: &str, place: &str, blocks: &[Value]) -> Result<(), String> {
    for (index, raw) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{index}]");
        let (message, markers) = match WireBlock::deserialize(raw).map_err(|error| format!("{at}: {error}"))? {
            WireBlock::Text { text, cache_control } => {
                let markers = usize::from(check_cache_control(&at, cache_control.as_ref())?);
                (Message::User { content: text }, markers)
            }
            WireBlock::ToolResult { tool_use_id, content, is_error, cache_control } => {
                let own = usize::from(check_cache_control(&at, cache_control.as_ref())?);
                let (content, nested) = tool_result_text(&at, content.as_ref())?;
                let Some(name) = crate::tool_name_of_call(&reader.messages, &tool_use_id) else {
                    return Err(format!("{at}: tool_use_id {tool_use_id:?} answers no earlier tool_use block"));
                };
                // The flag is the wire's word for an error; the prefix is the project's.
                let is_error = is_error || content.starts_with(TOOL_ERROR_PREFIX);
                (Message::Tool { tool_call_id: tool_use_id, name, content, is_error }, own + nested)
            }
            WireBlock::ToolUse { .. } => return Err(format!("{at}: a tool_use block belongs in an assistant message")),
        };
        reader.unit(place, raw, reader.next_message(), markers);
        reader.messages.push(message);
    }
    Ok(())
}

/// A tool result's content (a string, or text blocks joined) and how many breakpoints its blocks
/// carry.
fn tool_result_text(at: &str, content: Option<&Value>) -> Result<(String, usize), String> {
    match content {
        None | Some(Value::Null) => Ok((String::new(), 0)),
        Some(Value::String(text)) => Ok((text.clone(), 0)),
        Some(Value::Array(blocks)) => {
            let mut text = String::new();
            let mut breakpoints = 0;
            for (index, raw) in blocks.iter().enumerate() {
                let at = format!("{at}.content[{index}]");
                let WireTextBlock::Text { text: part, cache_control } =
                    WireTextBlock::deserialize(raw).map_err(|error| format!("{at}: {error}"))?;
                breakpoints += usize::from(check_cache_control(&at, cache_control.as_ref())?);
                text.push_str(&part);
            }
            Ok((text, breakpoints))
        }
        Some(_) => Err(format!("{at}.content: Input should be a valid string or a list of text blocks")),
    }
}

/// An assistant message's blocks: one assistant message, its text joined, its tool uses calls.
fn read_assistant_blocks(reader: &mut Reader, at: &str, place: &str, blocks: &[Value]) -> Result<(), String> {
    let mut texts: Vec<String> = Vec::new();
    let mut tool_calls = Vec::new();
    let owner = reader.next_message();
    for (index, raw) in blocks.iter().enumerate() {
        let at = format!("{at}.content[{index}]");
        let breakpoint = match WireBlock::deserialize(raw).map_err(|error| format!("{at}: {error}"))? {
            WireBlock::Text { text, cache_control } => {
                texts.push(text);
                check_cache_control(&at, cache_control.as_ref())?
            }
            WireBlock::ToolUse { id, name, input, cache_control } => {
                if !input.is_object() {
                    return Err(format!("{at}.input: Input should be a valid dictionary"));
                }
                tool_calls.push(ToolCall { id, name, arguments: input.to_string() });
                check_cache_control(&at, cache_control.as_ref())?
            }
            WireBlock::ToolResult { .. } => {
                return Err(format!("{at}: a tool_result block belongs in a user message"));
            }
        };
        // Every block counts through the whole message: approximate inside it, exact at its end.
        reader.unit(place, raw, owner, usize::from(breakpoint));
    }
    let content = (!texts.is_empty()).then(|| texts.concat());
    reader.messages.push(Message::Assistant { content, tool_calls, refusal: None });
    Ok(())
}

/// The units with their token counts, now that every message is known.
fn token_units(reader: &Reader) -> Vec<Unit> {
    let (through_tools, through_messages) = cache::running_tokens(&reader.tools, &reader.messages);
    let last = through_messages.last().or(through_tools.last()).copied().unwrap_or(0);
    reader
        .units
        .iter()
        .map(|unit| {
            let tokens_through = match unit.owner {
                Owner::Tool(index) => through_tools.get(index),
                Owner::Message(index) => through_messages.get(index),
            };
            Unit {
                content_hash: unit.content_hash,
                tokens_through: tokens_through.copied().unwrap_or(last),
                breakpoint: unit.breakpoint,
            }
        })
        .collect()
}

/// What a readable request gets, decided before the delay.
struct Decided {
    reply: Reply,
    model: String,
    prompt_tokens: u64,
    max_tokens: u64,
    cache_use: CacheUse,
}

pub(crate) async fn messages(State(state): State<Arc<ServerState>>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed = crate::parse_body(&body);
    crate::record_request(&state, PATH, &headers, &body, parsed.as_ref().ok());
    let stream = parsed.as_ref().ok().and_then(|request| request.get("stream")).and_then(Value::as_bool) == Some(true);
    let in_flight = InFlight::new(state.clone());
    let decided = decide(&state, &headers, parsed);
    crate::delay_whole_answer(&state, stream).await;
    let response = match decided {
        Err(fault) => fault_response(&fault),
        Ok(decided) => {
            let answer = render(&state, decided);
            if stream {
                // In flight until its last event is out.
                return stream::sse(&answer, state.options.delay, in_flight);
            }
            axum::Json(answer.to_json()).into_response()
        }
    };
    drop(in_flight);
    response
}

fn decide(
    state: &ServerState,
    headers: &HeaderMap,
    parsed: Result<Value, serde_json::Error>,
) -> Result<Decided, Fault> {
    if let Some(fault) = crate::injected_fault(state) {
        return Err(fault);
    }
    if !headers.contains_key("anthropic-version") {
        return Err(Fault::BadRequest { message: "anthropic-version: header is required".to_string() });
    }
    let body = parsed.map_err(|error| Fault::BadRequest {
        message: format!("the request body is not a messages request: {error}"),
    })?;
    let request = read_request(&body).map_err(|message| Fault::BadRequest { message })?;
    let reply = crate::answer_turn(state, &request.messages, &request.tools)?;
    let cache_use = if state.options.cache {
        let seed = cache::seed("anthropic", &request.model);
        crate::lock(&state.cache).explicit(seed, &request.units, state.options.cache_min_tokens)
    } else {
        CacheUse::default()
    };
    Ok(Decided {
        reply,
        prompt_tokens: estimate_prompt_tokens(&request.messages, &request.tools),
        max_tokens: request.max_tokens,
        model: request.model,
        cache_use,
    })
}

fn error_response(status: StatusCode, kind: &str, message: &str) -> Response {
    let body = json!({"type": "error", "error": {"type": kind, "message": message}});
    (status, axum::Json(body)).into_response()
}

/// 529, the Messages API's "overloaded".
fn overloaded_status() -> StatusCode {
    StatusCode::from_u16(529).unwrap_or(StatusCode::SERVICE_UNAVAILABLE)
}

/// A fault in the Messages API's error shape.
fn fault_response(fault: &Fault) -> Response {
    match fault {
        Fault::RateLimited { retry_after_secs } => crate::with_retry_after(
            error_response(StatusCode::TOO_MANY_REQUESTS, "rate_limit_error", "slow down (offline fault)"),
            *retry_after_secs,
        ),
        Fault::Overloaded { retry_after_secs } => {
            let response = error_response(overloaded_status(), "overloaded_error", "Overloaded (offline fault)");
            if *retry_after_secs == 0 { response } else { crate::with_retry_after(response, *retry_after_secs) }
        }
        Fault::ServerError { message } => error_response(StatusCode::INTERNAL_SERVER_ERROR, "api_error", message),
        Fault::TruncatedBody => crate::truncated_response(&json!({
            "id": "msg_offline_truncated", "type": "message", "role": "assistant", "model": MODEL_NAME,
            "content": [{"type": "text", "text": "this answer is cut short"}],
            "stop_reason": "end_turn", "stop_sequence": null,
        })),
        Fault::Scripted(fault) => scripted_fault_response(fault),
        Fault::ScriptMismatch { message } => {
            error_response(StatusCode::INTERNAL_SERVER_ERROR, "script_mismatch", message)
        }
        Fault::BadRequest { message } => error_response(StatusCode::BAD_REQUEST, "invalid_request_error", message),
    }
}

/// A script's fault turn, as the Messages API would send it: an over-long prompt is its 400 with
/// its message, and each status gets the error type the API gives it.
fn scripted_fault_response(fault: &ScriptFault) -> Response {
    let (status, kind, default_message) = if fault.code.as_deref() == Some("context_length_exceeded") {
        (StatusCode::BAD_REQUEST, "invalid_request_error", PROMPT_TOO_LONG)
    } else {
        let status = StatusCode::from_u16(fault.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (status, error_type(status), "scripted fault (offline)")
    };
    let response = error_response(status, kind, fault.message.as_deref().unwrap_or(default_message));
    match fault.retry_after {
        Some(seconds) => crate::with_retry_after(response, seconds),
        None => response,
    }
}

/// The Messages API's error type for a status.
fn error_type(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "authentication_error",
        403 => "permission_error",
        404 => "not_found_error",
        413 => "request_too_large",
        429 => "rate_limit_error",
        529 => "overloaded_error",
        500..=599 => "api_error",
        _ => "invalid_request_error",
    }
}

/// A tool call as the answer sends it.
struct ToolUse {
    id: String,
    name: String,
    /// The arguments' JSON text, as the planner or the script wrote it.
    arguments: String,
}

impl ToolUse {
    /// `input`: the arguments object, or the text under `__raw_arguments` when it is none (see
    /// the module's header).
    fn input(&self) -> Value {
        match serde_json::from_str::<Value>(&self.arguments) {
            Ok(object @ Value::Object(_)) => object,
            _ => json!({"__raw_arguments": self.arguments}),
        }
    }
}

/// The answer, in no shape yet: a whole message ([`MessageAnswer::to_json`]) or its events
/// ([`stream::sse`]).
struct MessageAnswer {
    id: String,
    model: String,
    text: Option<String>,
    /// Sent as a text block after `text`, with `stop_reason: "refusal"`.
    refusal: Option<String>,
    tool_uses: Vec<ToolUse>,
    stop_reason: &'static str,
    /// Uncached input tokens: the prompt less what the cache read and wrote.
    input_tokens: u64,
    cache_use: CacheUse,
    output_tokens: u64,
}

impl MessageAnswer {
    fn texts(&self) -> impl Iterator<Item = &str> {
        self.text.iter().chain(self.refusal.iter()).map(String::as_str)
    }

    fn content(&self) -> Vec<Value> {
        let texts = self.texts().map(|text| json!({"type": "text", "text": text}));
        let tool_uses = self
            .tool_uses
            .iter()
            .map(|call| json!({"type": "tool_use", "id": call.id, "name": call.name, "input": call.input()}));
        texts.chain(tool_uses).collect()
    }

    /// The usage of a whole message, and of a stream's `message_start` (with no output yet).
    fn usage(&self, output_tokens: u64) -> Value {
        json!({
            "input_tokens": self.input_tokens,
            "cache_creation_input_tokens": self.cache_use.written,
            "cache_read_input_tokens": self.cache_use.read,
            "cache_creation": {"ephemeral_5m_input_tokens": self.cache_use.written, "ephemeral_1h_input_tokens": 0},
            "output_tokens": output_tokens,
        })
    }

    fn to_json(&self) -> Value {
        json!({
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "model": self.model,
            "content": self.content(),
            "stop_reason": self.stop_reason,
            "stop_sequence": null,
            "usage": self.usage(self.output_tokens),
        })
    }
}

/// Builds the answer, honouring `max_tokens` ([`crate::cap`]).
fn render(state: &ServerState, decided: Decided) -> MessageAnswer {
    let Decided { reply, model, prompt_tokens, max_tokens, cache_use } = decided;
    let Capped { content, tool_calls, refusal, completion_tokens, finish } = crate::cap(reply, Some(max_tokens));
    let answer_number = crate::count_answer(state, prompt_tokens, completion_tokens, cache_use);
    let stop_reason = match finish {
        Finish::Length => "max_tokens",
        Finish::ToolCalls => "tool_use",
        Finish::Stop if refusal.is_some() => "refusal",
        Finish::Stop => "end_turn",
    };
    let tool_uses = tool_calls
        .into_iter()
        .enumerate()
        .map(|(index, (name, arguments))| ToolUse { id: format!("toolu_{answer_number}_{index}"), name, arguments })
        .collect();
    MessageAnswer {
        id: format!("msg_offline_{answer_number}"),
        model: if model.is_empty() { MODEL_NAME.to_string() } else { model },
        text: content,
        refusal,
        tool_uses,
        stop_reason,
        input_tokens: prompt_tokens.saturating_sub(cache_use.read + cache_use.written),
        cache_use,
        output_tokens: completion_tokens,
    }
}
