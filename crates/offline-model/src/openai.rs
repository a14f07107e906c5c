//! OpenAI's chat completions, `POST /v1/chat/completions`: the wire request read into the
//! project's types, the answer (a chat completion, or its chunks with `"stream": true`, in
//! `openai/stream.rs`), OpenAI's error shape, and its automatic prompt caching
//! (`usage.prompt_tokens_details.cached_tokens`, see [`crate::cache`]).

mod stream;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::cache::{self, CacheUse, Unit};
use crate::{Capped, Fault, Finish, MODEL_NAME, Reply, ServerState};
use picogent_llm::{Message, TOOL_ERROR_PREFIX, ToolSpec, estimate_prompt_tokens};

/// Where chat completions are served.
pub const PATH: &str = "/v1/chat/completions";

// The request shape, as much of it as the endpoint reads.
#[derive(Deserialize)]
struct WireRequest {
    #[serde(default)]
    model: String,
    messages: Vec<WireMessage>,
    #[serde(default)]
    tools: Vec<WireTool>,
    #[serde(default)]
    max_completion_tokens: Option<u64>,
    #[serde(default)]
    max_tokens: Option<u64>,
}

#[derive(Deserialize)]
struct WireMessage {
    role: String,
    #[serde(default)]
    content: Option<Value>,
    #[serde(default)]
    refusal: Option<String>,
    #[serde(default)]
    tool_calls: Vec<WireToolCall>,
    #[serde(default)]
    tool_call_id: Option<String>,
}

#[derive(Deserialize)]
struct WireToolCall {
    id: String,
    function: WireFunctionCall,
}

#[derive(Deserialize)]
struct WireFunctionCall {
    name: String,
    #[serde(default)]
    arguments: String,
}

#[derive(Deserialize)]
struct WireTool {
    function: WireFunction,
}

#[derive(Deserialize)]
struct WireFunction {
    name: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    parameters: Option<Value>,
}

/// Text content may be a string or an array of `{type: "text", text}` parts.
fn content_text(content: &Option<Value>) -> Option<String> {
    match content {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(Value::Array(parts)) => {
            Some(parts.iter().filter_map(|part| part.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join(""))
        }
        Some(other) => Some(other.to_string()),
    }
}

/// Why a chat request's messages cannot be read; the message is the 400 answer's text.
#[derive(Debug, thiserror::Error)]
enum RequestError {
    /// A tool message without the id of the call it answers.
    #[error("messages[{index}]: a tool message needs `tool_call_id`")]
    NoToolCallId { index: usize },
    /// A tool message answering a call no earlier assistant message made.
    #[error("messages[{index}]: tool_call_id {tool_call_id:?} answers no earlier tool call")]
    UnknownToolCall { index: usize, tool_call_id: String },
    /// A role the chat format does not have.
    #[error("messages[{index}]: unknown role {role:?}")]
    UnknownRole { index: usize, role: String },
}

/// Reads the wire request into the project's message types (tool messages get their tool's name
/// from the call they answer).
fn read_request(request: &WireRequest) -> Result<(Vec<Message>, Vec<ToolSpec>), RequestError> {
    let mut messages: Vec<Message> = Vec::with_capacity(request.messages.len());
    for (index, message) in request.messages.iter().enumerate() {
        let text = content_text(&message.content);
        let converted = match message.role.as_str() {
            "system" | "developer" => Message::System { content: text.unwrap_or_default() },
            "user" => Message::User { content: text.unwrap_or_default() },
            "assistant" => Message::Assistant {
                content: text,
                tool_calls: message
                    .tool_calls
                    .iter()
                    .map(|call| picogent_llm::ToolCall {
                        id: call.id.clone(),
                        name: call.function.name.clone(),
                        arguments: call.function.arguments.clone(),
                    })
                    .collect(),
                refusal: message.refusal.clone(),
            },
            "tool" => {
                let Some(tool_call_id) = message.tool_call_id.clone() else {
                    return Err(RequestError::NoToolCallId { index });
                };
                let Some(name) = crate::tool_name_of_call(&messages, &tool_call_id) else {
                    return Err(RequestError::UnknownToolCall { index, tool_call_id });
                };
                let content = text.unwrap_or_default();
                let is_error = content.starts_with(TOOL_ERROR_PREFIX);
                Message::Tool { tool_call_id, name, content, is_error }
            }
            other => return Err(RequestError::UnknownRole { index, role: other.to_string() }),
        };
        messages.push(converted);
    }
    let tools = request
        .tools
        .iter()
        .map(|tool| {
            crate::tool_spec(
                &tool.function.name,
                tool.function.description.as_deref(),
                tool.function.parameters.as_ref(),
            )
        })
        .collect();
    Ok((messages, tools))
}

fn error_response(status: StatusCode, kind: &str, code: Option<&str>, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
    (status, axum::Json(body)).into_response()
}

/// What a readable request gets, decided before the delay.
struct Decided {
    reply: Reply,
    model: String,
    prompt_tokens: u64,
    max_tokens: Option<u64>,
    cache_use: CacheUse,
}

pub(crate) async fn chat_completions(
    State(state): State<Arc<ServerState>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let parsed = crate::received(&state, PATH, &headers, &body, None);
    let stream = crate::wants_stream(&parsed);
    crate::answer(
        &state,
        stream,
        || decide(&state, parsed),
        fault_response,
        |decided, in_flight| {
            let body = render(&state, decided);
            if stream {
                // In flight until its last chunk is out.
                return stream::sse(body, state.options.delay, in_flight);
            }
            axum::Json(body).into_response()
        },
    )
    .await
}

fn decide(state: &ServerState, parsed: Result<Value, serde_json::Error>) -> Result<Decided, Fault> {
    if let Some(fault) = crate::injected_fault(state) {
        return Err(fault);
    }
    let not_a_request = |error: serde_json::Error| Fault::BadRequest {
        message: format!("the request body is not a chat request: {error}"),
    };
    let body = parsed.map_err(not_a_request)?;
    let request = WireRequest::deserialize(&body).map_err(not_a_request)?;
    let (messages, tools) = read_request(&request).map_err(|error| Fault::BadRequest { message: error.to_string() })?;
    let reply = crate::answer_turn(state, &messages, &tools)?;
    let cache_use = if state.options.cache {
        let units = cache_units(&body, &messages, &tools);
        let seed = cache::seed("openai", &request.model);
        crate::lock(&state.cache).automatic(seed, &units, state.options.cache_min_tokens)
    } else {
        CacheUse::default()
    };
    Ok(Decided {
        reply,
        prompt_tokens: estimate_prompt_tokens(&messages, &tools),
        max_tokens: request.max_completion_tokens.or(request.max_tokens),
        model: request.model,
        cache_use,
    })
}

/// The prompt as automatic caching sees it: each tool, then each message, as sent.
fn cache_units(body: &Value, messages: &[Message], tools: &[ToolSpec]) -> Vec<Unit> {
    let (through_tools, through_messages) = cache::running_tokens(tools, messages);
    let wire_tools = body["tools"].as_array().map(Vec::as_slice).unwrap_or_default();
    let wire_messages = body["messages"].as_array().map(Vec::as_slice).unwrap_or_default();
    let tools = wire_tools.iter().zip(through_tools).map(|(tool, tokens)| (cache::content_hash("tool", tool), tokens));
    let messages = wire_messages
        .iter()
        .zip(through_messages)
        .enumerate()
        .map(|(index, (message, tokens))| (cache::content_hash(&format!("message {index}"), message), tokens));
    tools
        .chain(messages)
        .map(|(content_hash, tokens_through)| Unit { content_hash, tokens_through, breakpoint: false })
        .collect()
}

/// A fault in OpenAI's error shape (the Responses API's too).
pub(crate) fn fault_response(fault: &Fault) -> Response {
    match fault {
        Fault::RateLimited { retry_after_secs } => crate::with_retry_after(
            error_response(
                StatusCode::TOO_MANY_REQUESTS,
                "rate_limit_error",
                Some("rate_limit_exceeded"),
                "slow down (offline fault)",
            ),
            *retry_after_secs,
        ),
        Fault::Overloaded { retry_after_secs } => {
            let response = error_response(
                StatusCode::SERVICE_UNAVAILABLE,
                "overloaded_error",
                None,
                "the server is overloaded (offline fault)",
            );
            if *retry_after_secs == 0 { response } else { crate::with_retry_after(response, *retry_after_secs) }
        }
        Fault::ServerError { message } => {
            error_response(StatusCode::INTERNAL_SERVER_ERROR, "server_error", None, message)
        }
        Fault::TruncatedBody => crate::truncated_response(&json!({
            "id": "offline-truncated", "object": "chat.completion", "choices": [
                {"index": 0, "message": {"role": "assistant", "content": "this answer is cut short"}, "finish_reason": "stop"}
            ]
        })),
        Fault::Scripted(fault) => scripted_fault_response(fault),
        Fault::ScriptMismatch { message } => {
            error_response(StatusCode::INTERNAL_SERVER_ERROR, "script_mismatch", None, message)
        }
        Fault::BadRequest { message } => {
            error_response(StatusCode::BAD_REQUEST, "invalid_request_error", None, message)
        }
    }
}

fn scripted_fault_response(fault: &crate::script::ScriptFault) -> Response {
    let status = StatusCode::from_u16(fault.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let default_message = match fault.code.as_deref() {
        Some("context_length_exceeded") => "this model's maximum context length was exceeded (offline fault)",
        _ => "scripted fault (offline)",
    };
    let kind = if status.is_server_error() { "server_error" } else { "invalid_request_error" };
    let response =
        error_response(status, kind, fault.code.as_deref(), fault.message.as_deref().unwrap_or(default_message));
    match fault.retry_after {
        Some(seconds) => crate::with_retry_after(response, seconds),
        None => response,
    }
}

/// Builds the chat completion, honouring `max_completion_tokens` ([`crate::cap`]).
fn render(state: &ServerState, decided: Decided) -> Value {
    let Decided { reply, model, prompt_tokens, max_tokens, cache_use } = decided;
    let Capped { content, tool_calls, refusal, completion_tokens, finish } = crate::cap(reply, max_tokens);
    let answer_number = crate::count_answer(state, prompt_tokens, completion_tokens, cache_use);
    let finish_reason = match finish {
        Finish::Stop => "stop",
        Finish::ToolCalls => "tool_calls",
        Finish::Length => "length",
    };
    let calls: Vec<Value> = tool_calls
        .iter()
        .enumerate()
        .map(|(index, (name, arguments))| {
            json!({"id": format!("call_{answer_number}_{index}"), "type": "function",
                   "function": {"name": name, "arguments": arguments}})
        })
        .collect();
    let mut message = json!({"role": "assistant", "content": content});
    if !calls.is_empty() {
        message["tool_calls"] = Value::Array(calls);
    }
    if let Some(refusal) = refusal {
        message["refusal"] = Value::String(refusal);
    }
    let mut body = json!({
        "id": format!("offline-{answer_number}"),
        "object": "chat.completion",
        "created": 0,
        "model": if model.is_empty() { MODEL_NAME } else { &model },
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    });
    if !state.options.omit_usage {
        body["usage"] = json!({
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cache_use.read},
        });
    }
    body
}
