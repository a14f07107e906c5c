//! The offline model endpoint: an OpenAI-compatible `POST /v1/chat/completions` (and
//! `GET /v1/models`) served on loopback by picogent itself, so the demo and the tests exercise the
//! very same HTTP path as production with no network. It is not an LLM: it answers with either
//!
//! - the *planner* ([`planner`]): a deterministic, rule-based stand-in that works a task or
//!   answers a mention from what the request says, or
//! - a *script* ([`script`]): a fixture replayed turn by turn, checking each request.
//!
//! Answers carry `usage`, counted with o200k by the same rule as
//! [`picogent_llm::estimate_prompt_tokens`], so the loop's estimate and the server's count agree.
//! Faults can be switched on by [`Faults`] (429 bursts with `Retry-After`, 500s, truncated JSON
//! bodies, invalid tool arguments, endless tool calling), and every request is recorded so tests
//! can look at what the loop sent.
//!
//! The wire shapes are parsed here with small serde structs of its own: the server side is a
//! separate implementation of the format, and async-openai stays inside `llm::openai`.
//!
//! Invariants:
//! - it is never a dependency of the agent's library crates: only the binary (the demo, `eval`)
//!   and the tests start it, and it is named the offline model endpoint wherever it is shown;
//! - the planner is deterministic (the same request gets the same answer), and a script refuses
//!   a request that is not the one it expects, saying how it differs, rather than answer it.

pub mod planner;
pub mod script;
mod stream;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde::Deserialize;
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use picogent_llm::{Message, TOOL_ERROR_PREFIX, ToolSpec, count_text_tokens, estimate_prompt_tokens};
use planner::PlannedTurn;
use script::Script;

/// The model name the endpoint reports in `/v1/models`; any name is accepted in requests.
pub const MODEL_NAME: &str = "offline-planner";

/// How the endpoint answers.
#[derive(Debug, Clone)]
pub enum Mode {
    /// The rule-based planner ([`planner::plan`]).
    Planner,
    /// Replays a script ([`script`]).
    Script(Script),
}

/// Faults to inject, for tests of the loop's misbehaviour handling. Bursts apply to the first
/// requests, in this order: 429s, then 500s, then truncated bodies.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// The first N requests get `429` with `Retry-After: retry_after_secs`.
    pub rate_limit_burst: u32,
    pub retry_after_secs: u64,
    /// The next N requests get `500`.
    pub server_error_burst: u32,
    /// The next N requests get `200` with a JSON body cut in half.
    pub truncated_body_burst: u32,
    /// The first N planner turns with tool calls send the first call's arguments as broken JSON.
    pub invalid_arguments: u32,
    /// The planner never answers with text: each turn asks for two more tool calls.
    pub endless_tool_calls: bool,
    /// The planner answers mentions in plain text instead of with a reply tool, as many real
    /// models do.
    pub plain_text_replies: bool,
}

#[derive(Debug, Clone)]
pub struct OfflineModelOptions {
    /// Where to listen; `127.0.0.1:0` picks a free port.
    pub listen: SocketAddr,
    pub mode: Mode,
    /// Every answer is sent this much later (for load benchmarks and deadline tests).
    pub delay: Duration,
    pub faults: Faults,
    /// Leave `usage` out of answers, as some servers do (the client then counts with tiktoken).
    pub omit_usage: bool,
}

impl OfflineModelOptions {
    /// The planner on a free loopback port, no delay, no faults.
    pub fn planner() -> OfflineModelOptions {
        OfflineModelOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            mode: Mode::Planner,
            delay: Duration::ZERO,
            faults: Faults::default(),
            omit_usage: false,
        }
    }

    /// A script on a free loopback port.
    pub fn script(script: Script) -> OfflineModelOptions {
        OfflineModelOptions { mode: Mode::Script(script), ..OfflineModelOptions::planner() }
    }
}

/// A running endpoint. Dropping it does not stop the server; call [`OfflineModelHandle::shutdown`].
pub struct OfflineModelHandle {
    address: SocketAddr,
    state: Arc<ServerState>,
    stop: CancellationToken,
    task: tokio::task::JoinHandle<()>,
}

impl OfflineModelHandle {
    /// The OpenAI base URL, `http://127.0.0.1:PORT/v1`.
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Every chat request body received so far, in order (faulted ones included).
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.state.requests).clone()
    }

    /// How many chat requests have arrived (counted on arrival, before any delay).
    pub fn request_count(&self) -> usize {
        lock(&self.state.requests).len()
    }

    /// Script mismatches (and requests past the end of the script); empty when all matched.
    pub fn mismatches(&self) -> Vec<String> {
        lock(&self.state.mismatches).clone()
    }

    /// Prompt and completion tokens of every answer so far, as counted for `usage` (also when
    /// `omit_usage` leaves it out of the answers).
    pub fn tokens_counted(&self) -> (u64, u64) {
        let counters = lock(&self.state.counters);
        (counters.prompt_tokens, counters.completion_tokens)
    }

    /// Script turns answered so far.
    /// The most requests that were being answered at once.
    pub fn max_in_flight(&self) -> usize {
        lock(&self.state.counters).max_in_flight
    }

    pub fn script_position(&self) -> usize {
        lock(&self.state.counters).script_position
    }

    pub async fn shutdown(self) {
        self.stop.cancel();
        let _ = self.task.await;
    }
}

fn lock<T>(mutex: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // A panic while holding one of these locks leaves plain data behind; keep serving.
    mutex.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

struct ServerState {
    options: OfflineModelOptions,
    requests: Mutex<Vec<Value>>,
    mismatches: Mutex<Vec<String>>,
    counters: Mutex<Counters>,
}

#[derive(Default)]
struct Counters {
    rate_limited: u32,
    server_errors: u32,
    truncated: u32,
    invalid_arguments: u32,
    script_position: usize,
    answers: u64,
    /// Requests being answered now, and the most there ever were at once.
    in_flight: usize,
    max_in_flight: usize,
    prompt_tokens: u64,
    completion_tokens: u64,
}

/// Starts the endpoint and returns once it is listening.
pub async fn start(options: OfflineModelOptions) -> anyhow::Result<OfflineModelHandle> {
    let listener = tokio::net::TcpListener::bind(options.listen)
        .await
        .with_context(|| format!("cannot listen on {}", options.listen))?;
    let address = listener.local_addr().context("cannot read the listening address")?;
    let state = Arc::new(ServerState {
        options,
        requests: Mutex::new(Vec::new()),
        mismatches: Mutex::new(Vec::new()),
        counters: Mutex::new(Counters::default()),
    });
    let router = Router::new()
        .route("/v1/chat/completions", post(chat_completions))
        .route("/v1/models", get(models))
        .layer(DefaultBodyLimit::max(64 * 1024 * 1024))
        .with_state(state.clone());
    let stop = CancellationToken::new();
    let stopped = stop.clone();
    let task = tokio::spawn(async move {
        let served = axum::serve(listener, router).with_graceful_shutdown(stopped.cancelled_owned()).await;
        if let Err(error) = served {
            tracing::error!(%error, "the offline model endpoint stopped");
        }
    });
    tracing::info!(url = %format!("http://{address}/v1"), "offline model endpoint listening");
    Ok(OfflineModelHandle { address, state, stop, task })
}

/// `picogent offline-model`: serves until Ctrl-C.
pub async fn run_cli(listen: SocketAddr, script: Option<PathBuf>, delay_ms: u64) -> anyhow::Result<ExitCode> {
    let mode = match script {
        Some(path) => Mode::Script(Script::from_file(&path)?),
        None => Mode::Planner,
    };
    let options =
        OfflineModelOptions { listen, mode, delay: Duration::from_millis(delay_ms), ..OfflineModelOptions::planner() };
    let handle = start(options).await?;
    println!("offline model endpoint (rule-based, not an LLM) at {}", handle.url());
    tokio::signal::ctrl_c().await.context("cannot wait for Ctrl-C")?;
    handle.shutdown().await;
    Ok(ExitCode::SUCCESS)
}

async fn models() -> Response {
    axum::Json(json!({
        "object": "list",
        "data": [{"id": MODEL_NAME, "object": "model", "created": 0, "owned_by": "picogent"}]
    }))
    .into_response()
}

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
    #[serde(default)]
    stream: bool,
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
                let name = messages.iter().rev().find_map(|m| match m {
                    Message::Assistant { tool_calls, .. } => {
                        tool_calls.iter().find(|c| c.id == tool_call_id).map(|c| c.name.clone())
                    }
                    _ => None,
                });
                let Some(name) = name else {
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
        .map(|tool| ToolSpec {
            name: tool.function.name.clone(),
            description: tool.function.description.clone().unwrap_or_default(),
            parameters: std::sync::Arc::new(match &tool.function.parameters {
                Some(Value::Object(schema)) => schema.clone(),
                _ => serde_json::Map::new(),
            }),
        })
        .collect();
    Ok((messages, tools))
}

fn error_response(status: StatusCode, kind: &str, code: Option<&str>, message: &str) -> Response {
    let body = json!({"error": {"message": message, "type": kind, "param": null, "code": code}});
    (status, axum::Json(body)).into_response()
}

/// What the request gets, decided before the delay.
/// One answer of the model: its text, its tool calls (name, arguments as text), a refusal.
#[derive(Debug, Default)]
struct Reply {
    content: Option<String>,
    tool_calls: Vec<(String, String)>,
    refusal: Option<String>,
    /// The finish reason to send whatever the cap (a script's `finish_reason`).
    finish: Option<String>,
}

enum Answer {
    Turn(Reply),
    Fault(Response),
}

async fn chat_completions(State(state): State<Arc<ServerState>>, body: Bytes) -> Response {
    let parsed: Result<WireRequest, _> = serde_json::from_slice(&body);
    let stream = parsed.as_ref().is_ok_and(|request| request.stream);
    lock(&state.requests).push(
        serde_json::from_slice(&body).unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&body).into_owned())),
    );
    let in_flight = InFlight::new(state.clone());
    let answer = decide(&state, parsed);
    // A streamed answer spreads the delay over its chunks instead: its bytes keep coming.
    if !state.options.delay.is_zero() && !stream {
        tokio::time::sleep(state.options.delay).await;
    }
    let response = match answer {
        Ok((Answer::Fault(response), _)) => response,
        Ok((Answer::Turn(reply), (model, prompt_tokens, max_tokens))) => {
            let body = render(&state, &model, reply, prompt_tokens, max_tokens);
            if stream {
                // In flight until its last chunk is out.
                return stream::sse(body, state.options.delay, in_flight);
            }
            axum::Json(body).into_response()
        }
        Err(response) => *response,
    };
    drop(in_flight);
    response
}

/// A request being answered: counted from its arrival until its answer is out.
struct InFlight(Arc<ServerState>);

impl InFlight {
    fn new(state: Arc<ServerState>) -> InFlight {
        {
            let mut counters = lock(&state.counters);
            counters.in_flight += 1;
            counters.max_in_flight = counters.max_in_flight.max(counters.in_flight);
        }
        InFlight(state)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        lock(&self.0.counters).in_flight -= 1;
    }
}

type RequestFacts = (String, u64, Option<u64>);

fn decide(
    state: &ServerState,
    parsed: Result<WireRequest, serde_json::Error>,
) -> Result<(Answer, RequestFacts), Box<Response>> {
    if let Some(fault) = injected_fault(state) {
        return Err(Box::new(fault));
    }
    let request = parsed.map_err(|e| {
        Box::new(error_response(
            StatusCode::BAD_REQUEST,
            "invalid_request_error",
            None,
            &format!("the request body is not a chat request: {e}"),
        ))
    })?;
    let (messages, tools) = read_request(&request).map_err(|error| {
        Box::new(error_response(StatusCode::BAD_REQUEST, "invalid_request_error", None, &error.to_string()))
    })?;
    let facts = (
        request.model.clone(),
        estimate_prompt_tokens(&messages, &tools),
        request.max_completion_tokens.or(request.max_tokens),
    );
    let answer = match &state.options.mode {
        Mode::Planner => planner_answer(state, &messages, &tools),
        Mode::Script(script) if is_unscripted_model_check(state, script, &messages, &tools) => Answer::Turn(Reply {
            tool_calls: vec![(tools[0].name.clone(), json!({"status": "ready"}).to_string())],
            ..Reply::default()
        }),
        Mode::Script(script) => script_answer(state, script, &messages, &tools)?,
    };
    Ok((answer, facts))
}

/// The next of the configured bursts of faults (rate limits, server errors, cut bodies), if any
/// is left.
fn injected_fault(state: &ServerState) -> Option<Response> {
    let faults = &state.options.faults;
    let mut counters = lock(&state.counters);
    if counters.rate_limited < faults.rate_limit_burst {
        counters.rate_limited += 1;
        let mut response = error_response(
            StatusCode::TOO_MANY_REQUESTS,
            "rate_limit_error",
            Some("rate_limit_exceeded"),
            "slow down (offline fault)",
        );
        if let Ok(value) = HeaderValue::from_str(&faults.retry_after_secs.to_string()) {
            response.headers_mut().insert(header::RETRY_AFTER, value);
        }
        return Some(response);
    }
    if counters.server_errors < faults.server_error_burst {
        counters.server_errors += 1;
        // Numbered, as a transient failure's answers differ (an overloaded server, a restart);
        // a scripted fault repeats its body exactly, as a deterministic one does.
        let message =
            format!("internal error (offline fault {} of {})", counters.server_errors, faults.server_error_burst);
        return Some(error_response(StatusCode::INTERNAL_SERVER_ERROR, "server_error", None, &message));
    }
    if counters.truncated < faults.truncated_body_burst {
        counters.truncated += 1;
        let full = json!({"id": "offline-truncated", "object": "chat.completion", "choices": [
            {"index": 0, "message": {"role": "assistant", "content": "this answer is cut short"}, "finish_reason": "stop"}
        ]})
        .to_string();
        let cut = full[..full.len() / 2].to_string();
        return Some((StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], cut).into_response());
    }
    None
}

/// The planner's turn, with the configured argument faults applied.
fn planner_answer(state: &ServerState, messages: &[Message], tools: &[ToolSpec]) -> Answer {
    let faults = &state.options.faults;
    let plain_text = faults.plain_text_replies.then(|| planner::plain_text_reply(messages)).flatten();
    let planned = match plain_text {
        Some(reply) => reply,
        None if faults.endless_tool_calls => planner::endless(messages, tools),
        None => planner::plan(messages, tools),
    };
    match planned {
        PlannedTurn::Text(text) => Answer::Turn(Reply { content: Some(text), ..Reply::default() }),
        PlannedTurn::ToolCalls(mut calls) => {
            let mut counters = lock(&state.counters);
            if counters.invalid_arguments < faults.invalid_arguments {
                counters.invalid_arguments += 1;
                if let Some((_, arguments)) = calls.first_mut() {
                    // Cut before the closing brace: the JSON no longer parses.
                    arguments.truncate(arguments.len().saturating_sub(1));
                }
            }
            Answer::Turn(Reply { tool_calls: calls, ..Reply::default() })
        }
    }
}

/// Whether the request is `picogent run`'s model check at start (one tool, the check's own) and
/// the script's next turn does not expect it. Such a check is not a turn of the run the script
/// replays: it is answered as a model that calls tools answers it, and the script stays where it
/// is. A script that means to answer the check itself says so in its turn's `expect`
/// (`tools_include: ["report_status"]`), or expects nothing.
fn is_unscripted_model_check(state: &ServerState, script: &Script, messages: &[Message], tools: &[ToolSpec]) -> bool {
    if !(tools.len() == 1 && tools[0].name == picogent_llm::probe::PROBE_TOOL) {
        return false;
    }
    let position = lock(&state.counters).script_position;
    script.turns.get(position).is_none_or(|turn| !script::check(&turn.expect, messages, tools).is_empty())
}

/// The script's next turn, after checking the request against what the turn expects.
fn script_answer(
    state: &ServerState,
    script: &script::Script,
    messages: &[Message],
    tools: &[ToolSpec],
) -> Result<Answer, Box<Response>> {
    let position = {
        let mut counters = lock(&state.counters);
        counters.script_position += 1;
        counters.script_position
    };
    let mismatch = |message: String| {
        tracing::error!(%message, "offline model script mismatch");
        lock(&state.mismatches).push(message.clone());
        Box::new(error_response(StatusCode::INTERNAL_SERVER_ERROR, "script_mismatch", None, &message))
    };
    let Some(turn) = script.turns.get(position - 1) else {
        return Err(mismatch(format!(
            "script mismatch: request {position} arrived but the script has only {} turns",
            script.turns.len()
        )));
    };
    let problems = script::check(&turn.expect, messages, tools);
    if !problems.is_empty() {
        return Err(mismatch(format!("script mismatch at turn {position}: {}", problems.join("; "))));
    }
    Ok(match (&turn.fault, &turn.reply) {
        (Some(fault), _) => Answer::Fault(fault_response(fault)),
        (None, Some(reply)) => Answer::Turn(Reply {
            content: reply.content.clone(),
            tool_calls: reply.tool_calls.iter().map(|c| (c.name.clone(), c.arguments_text())).collect(),
            refusal: reply.refusal.clone(),
            finish: reply.finish_reason.clone(),
        }),
        // `Script::from_json` refuses turns with neither.
        (None, None) => Answer::Turn(Reply::default()),
    })
}

fn fault_response(fault: &script::ScriptFault) -> Response {
    let status = StatusCode::from_u16(fault.status).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let default_message = match fault.code.as_deref() {
        Some("context_length_exceeded") => "this model's maximum context length was exceeded (offline fault)",
        _ => "scripted fault (offline)",
    };
    let kind = if status.is_server_error() { "server_error" } else { "invalid_request_error" };
    let mut response =
        error_response(status, kind, fault.code.as_deref(), fault.message.as_deref().unwrap_or(default_message));
    if let Some(value) = fault.retry_after.and_then(|seconds| HeaderValue::from_str(&seconds.to_string()).ok()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// Builds the chat completion, honouring `max_completion_tokens`: a text longer than allowed is
/// cut (finish reason `length`), and tool calls that do not fit are withheld the same way.
fn render(state: &ServerState, model: &str, reply: Reply, prompt_tokens: u64, max_tokens: Option<u64>) -> Value {
    let Reply { content, tool_calls, refusal, finish } = reply;
    let answer_number = {
        let mut counters = lock(&state.counters);
        counters.answers += 1;
        counters.answers
    };
    let calls_tokens: u64 =
        tool_calls.iter().map(|(name, arguments)| count_text_tokens(name) + count_text_tokens(arguments)).sum();
    let text_tokens = content.iter().chain(refusal.iter()).map(|t| count_text_tokens(t)).sum::<u64>();
    let (content, tool_calls, completion_tokens, finish_reason) = match (max_tokens, finish.as_deref()) {
        // A scripted finish reason is sent as it is, with the reply as it is.
        (_, Some(finish)) => {
            let finish: &'static str = if finish == "length" { "length" } else { "stop" };
            (content, tool_calls, text_tokens + calls_tokens, finish)
        }
        (Some(max), None) if text_tokens + calls_tokens > max => {
            let cut = content.map(|text| cut_to_tokens(&text, max)).filter(|t| !t.is_empty());
            let tokens = cut.as_deref().map(count_text_tokens).unwrap_or(0);
            (cut, Vec::new(), tokens, "length")
        }
        (_, None) => {
            let finish = if tool_calls.is_empty() { "stop" } else { "tool_calls" };
            (content, tool_calls, text_tokens + calls_tokens, finish)
        }
    };
    let calls: Vec<Value> = tool_calls
        .iter()
        .enumerate()
        .map(|(index, (name, arguments))| {
            json!({"id": format!("call_{answer_number}_{index}"), "type": "function",
                   "function": {"name": name, "arguments": arguments}})
        })
        .collect();
    {
        let mut counters = lock(&state.counters);
        counters.prompt_tokens += prompt_tokens;
        counters.completion_tokens += completion_tokens;
    }
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
        "model": if model.is_empty() { MODEL_NAME } else { model },
        "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
    });
    if !state.options.omit_usage {
        body["usage"] = json!({
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        });
    }
    body
}

fn cut_to_tokens(text: &str, max_tokens: u64) -> String {
    let bpe = tiktoken_rs::o200k_base_singleton();
    let tokens = bpe.encode_with_special_tokens(text);
    let keep = usize::try_from(max_tokens).unwrap_or(usize::MAX).min(tokens.len());
    bpe.decode(&tokens[..keep]).unwrap_or_default()
}
