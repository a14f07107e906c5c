//! Google's Gemini API, `POST /v1beta/models/{model}:generateContent`, `:streamGenerateContent`
//! (server-sent events with `?alt=sse`, in `google/stream.rs`; a JSON array of the same chunks
//! without) and `:countTokens`: the wire request read into the project's types (in
//! `google/request.rs`), the answer as `candidates[0].content.parts` (`text`, `functionCall`)
//! with its `finishReason` and `usageMetadata`, and the API's error shape
//! (`{"error": {"code", "message", "status"}}`). Prompt caching is the implicit kind, counted as
//! OpenAI's automatic prefix caching is ([`crate::cache`]) and reported as
//! `cachedContentTokenCount`.
//!
//! Deliberate differences from the real API:
//! - a function call whose arguments are not a JSON object (the `invalid_arguments` fault, a
//!   script's `raw_arguments`) cannot be `functionCall.args`, which is always an object: it sends
//!   `{"__raw_arguments": "<the text>"}`, so the call still fails at dispatch;
//! - each function call carries an `id` (`call_<answer>_<index>`), which the real API may leave
//!   out; a request's calls and responses are tied by it, or else by name (`google/request.rs`);
//! - a refusal is its text with `finishReason: "SAFETY"`;
//! - the key (`x-goog-api-key`, or `?key=`) is recorded, not checked.

mod request;
mod stream;

use std::collections::HashMap;
use std::sync::Arc;

use axum::body::Bytes;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use crate::cache::{self, CacheUse, Unit};
use crate::script::ScriptFault;
use crate::{Capped, Fault, Finish, MODEL_NAME, Reply, ServerState};
use picogent_llm::{Message, ToolSpec, count_text_tokens, estimate_prompt_tokens};
use request::{Malformed, read_request};

/// Where the Gemini API's model methods are served: `{PATH}/{model}:{method}`.
pub const PATH: &str = "/v1beta/models";

/// The message of a scripted `context_length_exceeded`, as the real API words it.
const PROMPT_TOO_LONG: &str = "The input token count (1250000) exceeds the maximum number of tokens allowed (1048576).";

/// What a readable request gets, decided before the delay.
struct Decided {
    reply: Reply,
    model: String,
    prompt_tokens: u64,
    max_tokens: Option<u64>,
    cache_use: CacheUse,
}

/// What a path asks for.
enum Method {
    Generate,
    Stream,
    CountTokens,
}

pub(crate) async fn models(
    State(state): State<Arc<ServerState>>,
    Path(action): Path<String>,
    Query(query): Query<HashMap<String, String>>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    let path = format!("{PATH}/{action}");
    let parsed = crate::received(&state, &path, &headers, &body, query.get("key").cloned());
    let (model, method) = action.rsplit_once(':').unwrap_or((action.as_str(), ""));
    let method = match method {
        "generateContent" => Method::Generate,
        "streamGenerateContent" => Method::Stream,
        "countTokens" => Method::CountTokens,
        _ => {
            let message = format!("Method {method:?} of models/{model} is not found (offline endpoint)");
            return error_response(StatusCode::NOT_FOUND, &message);
        }
    };
    if let Method::CountTokens = method {
        return count_tokens(parsed);
    }
    let stream = matches!(method, Method::Stream);
    let sse = query.get("alt").map(String::as_str) == Some("sse");
    crate::answer(
        &state,
        stream,
        || decide(&state, model, parsed),
        fault_response,
        |decided, in_flight| {
            let answer = render(&state, decided);
            match (stream, sse) {
                // In flight until its last chunk is out.
                (true, true) => stream::sse(&answer, state.options.delay, in_flight),
                (true, false) => axum::Json(Value::Array(stream::chunks(&answer))).into_response(),
                (false, _) => axum::Json(answer.to_json()).into_response(),
            }
        },
    )
    .await
}

/// `:countTokens`: the prompt's tokens, counted as answers count them.
fn count_tokens(parsed: Result<Value, serde_json::Error>) -> Response {
    let read = parsed.map_err(Malformed::NotARequest).and_then(|body| {
        // The request is `{contents}` or `{generateContentRequest: {…}}`.
        let inner = body.get("generateContentRequest").cloned().unwrap_or(body);
        read_request(&inner)
    });
    match read {
        Ok(request) => axum::Json(json!({"totalTokens": estimate_prompt_tokens(&request.messages, &request.tools)}))
            .into_response(),
        Err(malformed) => error_response(StatusCode::BAD_REQUEST, &malformed.to_string()),
    }
}

fn decide(state: &ServerState, model: &str, parsed: Result<Value, serde_json::Error>) -> Result<Decided, Fault> {
    if let Some(fault) = crate::injected_fault(state) {
        return Err(fault);
    }
    let body = parsed.map_err(|error| Fault::BadRequest { message: Malformed::NotARequest(error).to_string() })?;
    let request = read_request(&body).map_err(|malformed| Fault::BadRequest { message: malformed.to_string() })?;
    let reply = crate::answer_turn(state, &request.messages, &request.tools)?;
    let cache_use = if state.options.cache {
        let units = cache_units(&body, &request.messages, &request.tools);
        let seed = cache::seed("google", model);
        crate::lock(&state.cache).automatic(seed, &units, state.options.cache_min_tokens)
    } else {
        CacheUse::default()
    };
    Ok(Decided {
        reply,
        prompt_tokens: estimate_prompt_tokens(&request.messages, &request.tools),
        max_tokens: request.max_tokens,
        model: model.to_string(),
        cache_use,
    })
}

/// The prompt as implicit caching sees it: the tools and the system instruction as one unit,
/// then each content, as sent (a content may hold several of the project's messages: it counts
/// through its last).
fn cache_units(body: &Value, messages: &[Message], tools: &[ToolSpec]) -> Vec<Unit> {
    let (through_tools, through_messages) = cache::running_tokens(tools, messages);
    let system_messages = messages.iter().take_while(|message| matches!(message, Message::System { .. })).count();
    let head = json!({"tools": body.get("tools"), "systemInstruction": body.get("systemInstruction")});
    let head_tokens = match system_messages {
        0 => through_tools.last().copied().unwrap_or(0),
        count => through_messages.get(count - 1).copied().unwrap_or(0),
    };
    let mut units =
        vec![Unit { content_hash: cache::content_hash("head", &head), tokens_through: head_tokens, breakpoint: false }];
    // Each content's share of the messages is not known here; count each through a running
    // estimate of its own text, capped by the whole prompt.
    let total = through_messages.last().copied().unwrap_or(head_tokens);
    let mut running = head_tokens;
    for (index, content) in body.get("contents").and_then(Value::as_array).into_iter().flatten().enumerate() {
        running = (running + count_text_tokens(&content.to_string())).min(total);
        units.push(Unit {
            content_hash: cache::content_hash(&format!("content {index}"), content),
            tokens_through: running,
            breakpoint: false,
        });
    }
    units
}

/// The API's status name for an HTTP status.
fn status_name(status: StatusCode) -> &'static str {
    match status.as_u16() {
        400 => "INVALID_ARGUMENT",
        401 => "UNAUTHENTICATED",
        403 => "PERMISSION_DENIED",
        404 => "NOT_FOUND",
        409 => "ABORTED",
        429 => "RESOURCE_EXHAUSTED",
        499 => "CANCELLED",
        501 => "UNIMPLEMENTED",
        503 => "UNAVAILABLE",
        504 => "DEADLINE_EXCEEDED",
        500..=599 => "INTERNAL",
        _ => "FAILED_PRECONDITION",
    }
}

fn error_response(status: StatusCode, message: &str) -> Response {
    let body = json!({"error": {"code": status.as_u16(), "message": message, "status": status_name(status)}});
    (status, axum::Json(body)).into_response()
}

/// An error that says when to retry: `Retry-After`, and the API's `RetryInfo` detail.
fn retry_response(status: StatusCode, message: &str, seconds: u64) -> Response {
    let body = json!({"error": {"code": status.as_u16(), "message": message, "status": status_name(status),
        "details": [{"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": format!("{seconds}s")}]}});
    crate::with_retry_after((status, axum::Json(body)).into_response(), seconds)
}

/// A fault in the Gemini API's error shape.
fn fault_response(fault: &Fault) -> Response {
    match fault {
        Fault::RateLimited { retry_after_secs } => {
            retry_response(StatusCode::TOO_MANY_REQUESTS, "Resource exhausted (offline fault)", *retry_after_secs)
        }
        Fault::Overloaded { retry_after_secs } => {
            let message = "The model is overloaded. Please try again later. (offline fault)";
            match retry_after_secs {
                0 => error_response(StatusCode::SERVICE_UNAVAILABLE, message),
                seconds => retry_response(StatusCode::SERVICE_UNAVAILABLE, message, *seconds),
            }
        }
        Fault::ServerError { message } => error_response(StatusCode::INTERNAL_SERVER_ERROR, message),
        Fault::TruncatedBody => crate::truncated_response(&json!({"candidates": [{
            "content": {"role": "model", "parts": [{"text": "this answer is cut short"}]},
            "finishReason": "STOP", "index": 0}], "modelVersion": MODEL_NAME})),
        Fault::Scripted(fault) => scripted_fault_response(fault),
        Fault::ScriptMismatch { message } => error_response(StatusCode::INTERNAL_SERVER_ERROR, message),
        Fault::BadRequest { message } => error_response(StatusCode::BAD_REQUEST, message),
    }
}

/// A script's fault turn, as the Gemini API would send it.
fn scripted_fault_response(fault: &ScriptFault) -> Response {
    let (status, default_message) = if fault.code.as_deref() == Some("context_length_exceeded") {
        (StatusCode::BAD_REQUEST, PROMPT_TOO_LONG)
    } else {
        (StatusCode::from_u16(fault.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR), "scripted fault (offline)")
    };
    let message = fault.message.as_deref().unwrap_or(default_message);
    match fault.retry_after {
        Some(seconds) => retry_response(status, message, seconds),
        None => error_response(status, message),
    }
}

/// A function call as the answer sends it.
struct FunctionCall {
    id: String,
    name: String,
    /// The arguments' JSON text, as the planner or the script wrote it.
    arguments: String,
}

impl FunctionCall {
    /// `args`: the arguments object, or the text under `__raw_arguments` when it is none.
    fn args(&self) -> Value {
        crate::arguments_object(&self.arguments)
    }

    fn part(&self) -> Value {
        json!({"functionCall": {"id": self.id, "name": self.name, "args": self.args()}})
    }
}

/// The answer, in no shape yet: one response ([`GoogleAnswer::to_json`]) or its chunks.
struct GoogleAnswer {
    id: String,
    model: String,
    text: Option<String>,
    calls: Vec<FunctionCall>,
    finish_reason: &'static str,
    prompt_tokens: u64,
    cached_tokens: u64,
    output_tokens: u64,
}

impl GoogleAnswer {
    fn usage(&self) -> Value {
        let mut usage = json!({
            "promptTokenCount": self.prompt_tokens,
            "candidatesTokenCount": self.output_tokens,
            "totalTokenCount": self.prompt_tokens + self.output_tokens,
        });
        if self.cached_tokens > 0 {
            usage["cachedContentTokenCount"] = json!(self.cached_tokens);
        }
        usage
    }

    /// One response: `parts` of the candidate, and the rest of the answer when `last`.
    fn response(&self, parts: Vec<Value>, last: bool) -> Value {
        let mut candidate = json!({"content": {"role": "model", "parts": parts}, "index": 0});
        let mut response = json!({"modelVersion": self.model, "responseId": self.id});
        if last {
            candidate["finishReason"] = json!(self.finish_reason);
            response["usageMetadata"] = self.usage();
        }
        response["candidates"] = json!([candidate]);
        response
    }

    fn to_json(&self) -> Value {
        let texts = self.text.iter().map(|text| json!({"text": text}));
        self.response(texts.chain(self.calls.iter().map(FunctionCall::part)).collect(), true)
    }
}

/// Builds the answer, honouring `maxOutputTokens` ([`crate::cap`]).
fn render(state: &ServerState, decided: Decided) -> GoogleAnswer {
    let Decided { reply, model, prompt_tokens, max_tokens, cache_use } = decided;
    let Capped { content, tool_calls, refusal, completion_tokens, finish } = crate::cap(reply, max_tokens);
    let answer_number = crate::count_answer(state, prompt_tokens, completion_tokens, cache_use);
    let finish_reason = match finish {
        Finish::Length => "MAX_TOKENS",
        Finish::Stop if refusal.is_some() => "SAFETY",
        Finish::Stop | Finish::ToolCalls => "STOP",
    };
    let text = match (content, refusal) {
        (Some(content), Some(refusal)) => Some(format!("{content}{refusal}")),
        (content, refusal) => content.or(refusal),
    };
    let calls = tool_calls
        .into_iter()
        .enumerate()
        .map(|(index, (name, arguments))| FunctionCall { id: format!("call_{answer_number}_{index}"), name, arguments })
        .collect();
    GoogleAnswer {
        id: format!("offline-{answer_number}"),
        model: if model.is_empty() { MODEL_NAME.to_string() } else { model },
        text,
        calls,
        finish_reason,
        prompt_tokens,
        cached_tokens: cache_use.read,
        output_tokens: completion_tokens,
    }
}
