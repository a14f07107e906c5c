//! Anthropic's Messages API, `POST /v1/messages` (version 2023-06-01): the wire request read into
//! the project's types, the answer (a message, or its server-sent events with `"stream": true`,
//! in `messages/stream.rs`), the API's error shape, and its explicit prompt caching
//! (`cache_control` breakpoints, see [`crate::cache`]). The request is read, and refused with the
//! API's words when it is malformed, in `messages/request.rs`.
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

mod request;
mod stream;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::cache::{self, CacheUse};
use crate::script::ScriptFault;
use crate::{Capped, Fault, Finish, MODEL_NAME, Reply, ServerState};
use picogent_llm::estimate_prompt_tokens;
use request::{Malformed, read_request};

/// Where the Messages API is served.
pub const PATH: &str = "/v1/messages";

/// The message the real API sends for an over-long prompt, the default of a scripted
/// `context_length_exceeded`.
const PROMPT_TOO_LONG: &str = "prompt is too long: 250000 tokens > 200000 maximum";

/// What a readable request gets, decided before the delay.
struct Decided {
    reply: Reply,
    model: String,
    prompt_tokens: u64,
    max_tokens: u64,
    cache_use: CacheUse,
}

pub(crate) async fn messages(State(state): State<Arc<ServerState>>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed = crate::received(&state, PATH, &headers, &body, None);
    let stream = crate::wants_stream(&parsed);
    crate::answer(
        &state,
        stream,
        || decide(&state, &headers, parsed),
        fault_response,
        |decided, in_flight| {
            let answer = render(&state, decided);
            if stream {
                // In flight until its last event is out.
                return stream::sse(&answer, state.options.delay, in_flight);
            }
            axum::Json(answer.to_json()).into_response()
        },
    )
    .await
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
    let request = parsed
        .map_err(Malformed::NotARequest)
        .and_then(|body| read_request(&body))
        .map_err(|malformed| Fault::BadRequest { message: malformed.to_string() })?;
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
        crate::arguments_object(&self.arguments)
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
