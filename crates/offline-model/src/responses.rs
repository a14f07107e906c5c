//! OpenAI's Responses API, `POST /v1/responses`, as Codex CLI calls it: the wire request (its
//! `instructions`, its `input` items and its `tools`) read into the project's types, the answer
//! (a response object, or its server-sent events with `"stream": true`, in
//! `responses/stream.rs`), OpenAI's error shape, and automatic prompt caching
//! (`usage.input_tokens_details.cached_tokens`, see [`crate::cache`]).
//!
//! Items it reads: `message` (roles `system`, `developer`, `user`, `assistant`), `function_call`
//! and `function_call_output`, `custom_tool_call` and `custom_tool_call_output` (a free-form tool,
//! its input as the call's arguments). Others (`reasoning`, web searches) carry nothing the
//! planner or a script reads and are skipped. Tools: `function` and `custom` ones; a `namespace`
//! offers its `function`s under their own names; others (`web_search`, …) are the server's own
//! tools, not the model's to call, and are skipped.

mod stream;

use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::{Value, json};

use crate::cache::{self, CacheUse, Unit};
use crate::{Capped, Fault, Finish, MODEL_NAME, Reply, ServerState};
use picogent_llm::{Message, TOOL_ERROR_PREFIX, ToolCall, ToolSpec, estimate_prompt_tokens};

/// Where responses are served.
pub const PATH: &str = "/v1/responses";

// The request shape, as much of it as the endpoint reads.
#[derive(Deserialize)]
struct WireRequest {
    #[serde(default)]
    model: String,
    #[serde(default)]
    instructions: Option<String>,
    #[serde(default)]
    input: Option<Value>,
    #[serde(default)]
    tools: Vec<Value>,
    #[serde(default)]
    max_output_tokens: Option<u64>,
}

/// Why a request's input cannot be read; the message is the 400 answer's text.
#[derive(Debug, thiserror::Error)]
enum RequestError {
    /// `input` is neither text nor a list of items.
    #[error("input: expected a string or an array of items")]
    NotInput,
    /// An item that is not an object, or lacks a field it needs.
    #[error("input[{index}]: {what}")]
    BadItem { index: usize, what: &'static str },
    /// A call's output answering a call no earlier item made.
    #[error("input[{index}]: call_id {call_id:?} answers no earlier call")]
    UnknownCall { index: usize, call_id: String },
    /// A message role the format does not have.
    #[error("input[{index}]: unknown role {role:?}")]
    UnknownRole { index: usize, role: String },
}

/// A message's or an output's text: a string, or the `text` of each part of an array.
fn text_of(content: Option<&Value>) -> Option<String> {
    match content {
        None | Some(Value::Null) => None,
        Some(Value::String(text)) => Some(text.clone()),
        Some(Value::Array(parts)) => {
            Some(parts.iter().filter_map(|part| part.get("text").and_then(Value::as_str)).collect::<Vec<_>>().join(""))
        }
        Some(other) => Some(other.to_string()),
    }
}

fn string_field<'a>(item: &'a Value, key: &str) -> Option<&'a str> {
    item.get(key).and_then(Value::as_str)
}

/// Reads the request into the project's message types: `instructions` first as a system
/// message; the calls that follow an assistant message (or each other) join its turn; an output
/// gets its tool's name from the call it answers.
fn read_request(request: &WireRequest) -> Result<(Vec<Message>, Vec<ToolSpec>), RequestError> {
    let mut messages: Vec<Message> = Vec::new();
    if let Some(instructions) = request.instructions.as_deref().filter(|text| !text.is_empty()) {
        messages.push(Message::System { content: instructions.to_string() });
    }
    match &request.input {
        None | Some(Value::Null) => {}
        Some(Value::String(text)) => messages.push(Message::User { content: text.clone() }),
        Some(Value::Array(items)) => {
            for (index, item) in items.iter().enumerate() {
                read_item(&mut messages, index, item)?;
            }
        }
        Some(_) => return Err(RequestError::NotInput),
    }
    let tools = request.tools.iter().flat_map(tool_specs).collect();
    Ok((messages, tools))
}

fn read_item(messages: &mut Vec<Message>, index: usize, item: &Value) -> Result<(), RequestError> {
    let bad = |what| RequestError::BadItem { index, what };
    if !item.is_object() {
        return Err(bad("an item must be an object"));
    }
    // A message may leave out its type (`{"role": "user", "content": "…"}`).
    let kind = string_field(item, "type").unwrap_or("message");
    match kind {
        "message" => {
            let role = string_field(item, "role").ok_or(bad("a message needs `role`"))?;
            let text = text_of(item.get("content"));
            let message = match role {
                "system" | "developer" => Message::System { content: text.unwrap_or_default() },
                "user" => Message::User { content: text.unwrap_or_default() },
                "assistant" => Message::Assistant { content: text, tool_calls: Vec::new(), refusal: None },
                other => return Err(RequestError::UnknownRole { index, role: other.to_string() }),
            };
            messages.push(message);
        }
        "function_call" | "custom_tool_call" => {
            let call_id = string_field(item, "call_id").ok_or(bad("a call needs `call_id`"))?;
            let name = string_field(item, "name").ok_or(bad("a call needs `name`"))?;
            let arguments = match kind {
                "function_call" => string_field(item, "arguments"),
                _ => string_field(item, "input"),
            };
            let call = ToolCall {
                id: call_id.to_string(),
                name: name.to_string(),
                arguments: arguments.unwrap_or("").to_string(),
            };
            match messages.last_mut() {
                Some(Message::Assistant { tool_calls, .. }) => tool_calls.push(call),
                _ => messages.push(Message::Assistant { content: None, tool_calls: vec![call], refusal: None }),
            }
        }
        "function_call_output" | "custom_tool_call_output" => {
            let call_id = string_field(item, "call_id").ok_or(bad("an output needs `call_id`"))?;
            let Some(name) = crate::tool_name_of_call(messages, call_id) else {
                return Err(RequestError::UnknownCall { index, call_id: call_id.to_string() });
            };
            let content = text_of(item.get("output")).unwrap_or_default();
            let is_error = content.starts_with(TOOL_ERROR_PREFIX);
            messages.push(Message::Tool { tool_call_id: call_id.to_string(), name, content, is_error });
        }
        // Reasoning, web searches and the like: nothing the planner or a script reads.
        _ => {}
    }
    Ok(())
}

/// The tools of one wire tool: a function or a custom tool is one; a namespace is its functions.
fn tool_specs(tool: &Value) -> Vec<ToolSpec> {
    let name = string_field(tool, "name");
    let description = string_field(tool, "description");
    match (string_field(tool, "type"), name) {
        (Some("function"), Some(name)) => vec![crate::tool_spec(name, description, tool.get("parameters"))],
        (Some("custom"), Some(name)) => vec![crate::tool_spec(name, description, None)],
        (Some("namespace"), _) => tool["tools"].as_array().into_iter().flatten().flat_map(tool_specs).collect(),
        _ => Vec::new(),
    }
}

/// What a readable request gets, decided before the delay.
struct Decided {
    reply: Reply,
    model: String,
    prompt_tokens: u64,
    max_tokens: Option<u64>,
    cache_use: CacheUse,
}

pub(crate) async fn responses(State(state): State<Arc<ServerState>>, headers: HeaderMap, body: Bytes) -> Response {
    let parsed = crate::received(&state, PATH, &headers, &body, None);
    let stream = crate::wants_stream(&parsed);
    crate::answer(
        &state,
        stream,
        || decide(&state, parsed),
        crate::openai::fault_response,
        |decided, in_flight| {
            let body = render(&state, decided);
            if stream {
                // In flight until its last event is out.
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
        message: format!("the request body is not a responses request: {error}"),
    };
    let body = parsed.map_err(not_a_request)?;
    let request = WireRequest::deserialize(&body).map_err(not_a_request)?;
    let (messages, tools) = read_request(&request).map_err(|error| Fault::BadRequest { message: error.to_string() })?;
    let reply = crate::answer_turn(state, &messages, &tools)?;
    let cache_use = if state.options.cache {
        let units = cache_units(&messages, &tools);
        let seed = cache::seed("responses", &request.model);
        crate::lock(&state.cache).automatic(seed, &units, state.options.cache_min_tokens)
    } else {
        CacheUse::default()
    };
    Ok(Decided {
        reply,
        prompt_tokens: estimate_prompt_tokens(&messages, &tools),
        max_tokens: request.max_output_tokens,
        model: request.model,
        cache_use,
    })
}

/// The prompt as automatic caching sees it: each tool, then each message as read (the items of
/// one turn are one message).
fn cache_units(messages: &[Message], tools: &[ToolSpec]) -> Vec<Unit> {
    let (through_tools, through_messages) = cache::running_tokens(tools, messages);
    let tools = tools.iter().zip(through_tools).map(|(tool, tokens)| {
        let wire = json!({"name": tool.name, "description": tool.description, "parameters": *tool.parameters});
        (cache::content_hash("tool", &wire), tokens)
    });
    let messages = messages.iter().zip(through_messages).enumerate().map(|(index, (message, tokens))| {
        let wire = serde_json::to_value(message).unwrap_or(Value::Null);
        (cache::content_hash(&format!("message {index}"), &wire), tokens)
    });
    tools
        .chain(messages)
        .map(|(content_hash, tokens_through)| Unit { content_hash, tokens_through, breakpoint: false })
        .collect()
}

/// Builds the response object, honouring `max_output_tokens` ([`crate::cap`]): the text as one
/// assistant message, then one `function_call` item per call.
fn render(state: &ServerState, decided: Decided) -> Value {
    let Decided { reply, model, prompt_tokens, max_tokens, cache_use } = decided;
    let Capped { content, tool_calls, refusal, completion_tokens, finish } = crate::cap(reply, max_tokens);
    let answer_number = crate::count_answer(state, prompt_tokens, completion_tokens, cache_use);
    let mut output = Vec::new();
    let mut parts = Vec::new();
    if let Some(text) = content {
        parts.push(json!({"type": "output_text", "text": text, "annotations": []}));
    }
    if let Some(refusal) = refusal {
        parts.push(json!({"type": "refusal", "refusal": refusal}));
    }
    if !parts.is_empty() {
        output.push(json!({"type": "message", "id": format!("msg_{answer_number}"), "status": "completed",
                           "role": "assistant", "content": parts}));
    }
    for (index, (name, arguments)) in tool_calls.iter().enumerate() {
        output
            .push(json!({"type": "function_call", "id": format!("fc_{answer_number}_{index}"), "status": "completed",
                           "call_id": format!("call_{answer_number}_{index}"), "name": name, "arguments": arguments}));
    }
    let (status, incomplete) = match finish {
        Finish::Stop | Finish::ToolCalls => ("completed", Value::Null),
        Finish::Length => ("incomplete", json!({"reason": "max_output_tokens"})),
    };
    json!({
        "id": format!("resp_offline_{answer_number}"),
        "object": "response",
        "created_at": 0,
        "status": status,
        "incomplete_details": incomplete,
        "error": null,
        "model": if model.is_empty() { MODEL_NAME } else { &model },
        "output": output,
        "usage": {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": cache_use.read},
            "output_tokens": completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": prompt_tokens + completion_tokens,
        },
    })
}
