//! The offline model endpoint: the two model APIs picogent speaks, and Google's Gemini API a
//! coding agent may speak, served on loopback by picogent itself, so the demo and the tests
//! exercise the very same HTTP path as production with no network:
//!
//! - OpenAI's `POST /v1/chat/completions` (and `GET /v1/models`), in [`openai`];
//! - Anthropic's Messages API, `POST /v1/messages` (version 2023-06-01), in [`messages`];
//! - Google's Gemini API, `POST /v1beta/models/{model}:generateContent` (and
//!   `:streamGenerateContent`, `:countTokens`), in [`google`];
//! - OpenAI's Responses API, `POST /v1/responses` (as Codex CLI calls it), in [`responses`].
//!
//! It is not an LLM: each answers with either
//!
//! - the *planner* ([`planner`]): a deterministic, rule-based stand-in that works a task or
//!   answers a mention from what the request says, or
//! - a *script* ([`script`]): a fixture replayed turn by turn, checking each request.
//!
//! Each API's module reads its wire request into the project's own types
//! ([`picogent_llm::Message`], [`picogent_llm::ToolSpec`]), so the planner, the script's checks,
//! the faults and the record of requests are one and the same for both; only the wire shapes (of
//! requests, answers, streams and errors) differ, and each has its one home.
//!
//! Answers carry usage, counted with o200k by the same rule as
//! [`picogent_llm::estimate_prompt_tokens`], so the loop's estimate and the server's count agree.
//! A prompt cache is simulated for each API ([`cache`]): the Messages API's explicit
//! `cache_control` breakpoints (`cache_read_input_tokens`, `cache_creation_input_tokens`) and
//! OpenAI's automatic prefix caching (`prompt_tokens_details.cached_tokens`), so cache accounting
//! can be exercised offline. Faults can be switched on by [`Faults`] (429 bursts with
//! `Retry-After`, overloaded bursts, 500s, truncated bodies, invalid tool arguments, endless tool
//! calling), and every request is recorded (its body, its path, the Messages API's headers) so
//! tests can look at what the loop sent.
//!
//! The wire shapes are parsed here with small serde structs of its own: the server side is a
//! separate implementation of each format, and the client's types stay inside `picogent-llm`.
//!
//! Codemap:
//! - `lib.rs`: options, the handle, the shared state, and what the APIs share: the faults, the
//!   planner's or the script's turn, the output cap;
//! - [`openai`]: chat completions (`openai/stream.rs`: its server-sent events);
//! - [`messages`]: the Messages API (`messages/stream.rs`: its server-sent events);
//! - [`google`]: the Gemini API (`google/stream.rs`: its streamed chunks);
//! - [`responses`]: the Responses API (`responses/stream.rs`: its server-sent events);
//! - `arrival.rs`: what every API's handler shares (the request recorded, counted in flight,
//!   decided before the delay);
//! - [`cache`]: the prompt-cache simulation;
//! - [`planner`], [`script`]: what answers.
//!
//! Invariants:
//! - it is never a dependency of the agent's library crates: only the binary (the demo, `eval`)
//!   and the tests start it, and it is named the offline model endpoint wherever it is shown;
//! - the planner is deterministic (the same request gets the same answer), and a script refuses
//!   a request that is not the one it expects, saying how it differs, rather than answer it;
//! - an API key it receives is kept for [`OfflineModelHandle::request_headers`] and never logged
//!   or printed.
//!
//! Where things are: the scripts it replays are `fixtures/llm/*.json`.

mod arrival;
pub mod cache;
pub mod google;
pub mod messages;
pub mod openai;
pub mod planner;
pub mod responses;
pub mod script;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context as _;
use axum::Router;
use axum::body::Bytes;
use axum::extract::DefaultBodyLimit;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use serde_json::{Value, json};
use tokio_util::sync::CancellationToken;

use arrival::{answer, received, wants_stream};
use picogent_llm::{Message, ToolSpec, count_text_tokens};
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
/// requests (of every API, counted together), in this order: 429s, then overloaded answers, then
/// 500s, then truncated bodies.
#[derive(Debug, Clone, Default)]
pub struct Faults {
    /// The first N requests get `429` with `Retry-After: retry_after_secs`.
    pub rate_limit_burst: u32,
    /// Sent as `Retry-After` by the rate-limit and the overloaded bursts (left out when zero for
    /// the overloaded ones, as an overloaded server often gives no hint).
    pub retry_after_secs: u64,
    /// The next N requests are told the server is overloaded: `529 overloaded_error` on the
    /// Messages API, `503` with type `overloaded_error` on chat completions.
    pub overloaded_burst: u32,
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
    /// Leave `usage` out of chat completions, as some OpenAI-compatible servers do (the client
    /// then counts with tiktoken). The Messages API always sends usage, so it ignores this.
    pub omit_usage: bool,
    /// Simulate a prompt cache ([`cache`]); when false every cache figure is reported as zero.
    pub cache: bool,
    /// Prefixes shorter than this many tokens are not cached: 1024 is the real APIs' minimum
    /// (Anthropic's for most models, OpenAI's for all).
    pub cache_min_tokens: u64,
}

impl OfflineModelOptions {
    /// The planner on a free loopback port, no delay, no faults, the prompt cache simulated.
    pub fn planner() -> OfflineModelOptions {
        OfflineModelOptions {
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            mode: Mode::Planner,
            delay: Duration::ZERO,
            faults: Faults::default(),
            omit_usage: false,
            cache: true,
            cache_min_tokens: cache::DEFAULT_MIN_TOKENS,
        }
    }

    /// A script on a free loopback port.
    pub fn script(script: Script) -> OfflineModelOptions {
        OfflineModelOptions { mode: Mode::Script(script), ..OfflineModelOptions::planner() }
    }
}

/// Where a request went and the Messages API's headers it carried, as recorded on arrival.
///
/// `api_key` holds the `x-api-key` value so a test can check what the client sent; it is never
/// logged, and `Debug` shows only whether it is there.
#[derive(Clone, PartialEq, Eq)]
pub struct RequestHeaders {
    /// The request's path: `/v1/chat/completions`, `/v1/messages`, `/v1/responses`, or the
    /// Gemini API's `/v1beta/models/{model}:{method}` (without its query).
    pub path: String,
    /// The `x-api-key` header's value (the Gemini API's `x-goog-api-key` or `key`), if any.
    pub api_key: Option<String>,
    /// The `anthropic-version` header's value, if any.
    pub anthropic_version: Option<String>,
}

impl std::fmt::Debug for RequestHeaders {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter
            .debug_struct("RequestHeaders")
            .field("path", &self.path)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("anthropic_version", &self.anthropic_version)
            .finish()
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
    /// The OpenAI base URL, `http://127.0.0.1:PORT/v1`; the Messages API is at `{url}/messages`.
    pub fn url(&self) -> String {
        format!("http://{}/v1", self.address)
    }

    /// The Messages API's endpoint, `http://127.0.0.1:PORT/v1/messages`.
    pub fn messages_url(&self) -> String {
        format!("{}/messages", self.url())
    }

    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// Every model request body received so far (every API), in order (faulted ones included).
    pub fn requests(&self) -> Vec<Value> {
        lock(&self.state.requests).iter().map(|request| request.body.clone()).collect()
    }

    /// The path of every request in [`OfflineModelHandle::requests`], in the same order.
    pub fn request_paths(&self) -> Vec<String> {
        lock(&self.state.requests).iter().map(|request| request.headers.path.clone()).collect()
    }

    /// The path and headers of every request in [`OfflineModelHandle::requests`], in the same
    /// order.
    pub fn request_headers(&self) -> Vec<RequestHeaders> {
        lock(&self.state.requests).iter().map(|request| request.headers.clone()).collect()
    }

    /// How many model requests have arrived (counted on arrival, before any delay).
    pub fn request_count(&self) -> usize {
        lock(&self.state.requests).len()
    }

    /// Script mismatches (and requests past the end of the script); empty when all matched.
    pub fn mismatches(&self) -> Vec<String> {
        lock(&self.state.mismatches).clone()
    }

    /// Prompt and completion tokens of every answer so far, as counted for usage (also when
    /// `omit_usage` leaves it out of the answers). The prompt tokens are every input token,
    /// cached or not.
    pub fn tokens_counted(&self) -> (u64, u64) {
        let counters = lock(&self.state.counters);
        (counters.prompt_tokens, counters.completion_tokens)
    }

    /// Prompt tokens read from and written to the simulated prompt cache, over every answer so
    /// far. OpenAI's automatic caching writes for free, so its answers add to the reads only.
    pub fn cache_counted(&self) -> (u64, u64) {
        let counters = lock(&self.state.counters);
        (counters.cache_read_tokens, counters.cache_write_tokens)
    }

    /// The most requests that were being answered at once.
    pub fn max_in_flight(&self) -> usize {
        lock(&self.state.counters).max_in_flight
    }

    /// Script turns answered so far.
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
    /// One list for bodies and headers, so their orders cannot drift apart.
    requests: Mutex<Vec<RecordedRequest>>,
    mismatches: Mutex<Vec<String>>,
    counters: Mutex<Counters>,
    cache: Mutex<cache::PromptCache>,
}

struct RecordedRequest {
    body: Value,
    headers: RequestHeaders,
}

#[derive(Default)]
struct Counters {
    rate_limited: u32,
    overloaded: u32,
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
    cache_read_tokens: u64,
    cache_write_tokens: u64,
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
        cache: Mutex::new(cache::PromptCache::default()),
    });
    let router = Router::new()
        .route(openai::PATH, post(openai::chat_completions))
        .route(messages::PATH, post(messages::messages))
        .route(&format!("{}/{{action}}", google::PATH), post(google::models))
        .route(responses::PATH, post(responses::responses))
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
    println!("  OpenAI chat completions: {}/chat/completions", handle.url());
    println!("  Anthropic Messages API:  {}", handle.messages_url());
    println!("  Gemini API:              http://{}{}/MODEL:generateContent", handle.address(), google::PATH);
    println!("  OpenAI Responses API:    {}/responses", handle.url());
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

/// A tool call's arguments as the APIs that send an object (Messages' `input`, Gemini's `args`)
/// send them: the object the planner or the script wrote, or, when its text is no object (a
/// script's `raw_arguments`), that text under `__raw_arguments`.
fn arguments_object(arguments: &str) -> Value {
    match serde_json::from_str::<Value>(arguments) {
        Ok(object @ Value::Object(_)) => object,
        _ => json!({"__raw_arguments": arguments}),
    }
}

/// The body as JSON.
fn parse_body(body: &Bytes) -> Result<Value, serde_json::Error> {
    serde_json::from_slice(body)
}

/// Records a request on arrival: its body (as JSON, or as text when it is not JSON), its path and
/// the headers tests look at; the key is `x-api-key`, else the Gemini API's `x-goog-api-key` or
/// `key` (`query_key`).
fn record_request(
    state: &ServerState,
    path: &str,
    headers: &HeaderMap,
    body: &Bytes,
    parsed: Option<&Value>,
    query_key: Option<String>,
) {
    let text = |name: &str| headers.get(name).map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
    let body = parsed.cloned().unwrap_or_else(|| Value::String(String::from_utf8_lossy(body).into_owned()));
    let headers = RequestHeaders {
        path: path.to_string(),
        api_key: text("x-api-key").or_else(|| text("x-goog-api-key")).or(query_key),
        anthropic_version: text("anthropic-version"),
    };
    lock(&state.requests).push(RecordedRequest { body, headers });
}

/// The name of the tool the latest earlier call with `tool_call_id` called: a tool result's
/// name, which neither wire format carries.
fn tool_name_of_call(messages: &[Message], tool_call_id: &str) -> Option<String> {
    messages.iter().rev().find_map(|message| match message {
        Message::Assistant { tool_calls, .. } => {
            tool_calls.iter().find(|call| call.id == tool_call_id).map(|call| call.name.clone())
        }
        _ => None,
    })
}

/// A tool as offered on either wire: a schema that is not an object counts as an empty one.
fn tool_spec(name: &str, description: Option<&str>, schema: Option<&Value>) -> ToolSpec {
    ToolSpec {
        name: name.to_string(),
        description: description.unwrap_or_default().to_string(),
        parameters: Arc::new(match schema {
            Some(Value::Object(schema)) => schema.clone(),
            _ => serde_json::Map::new(),
        }),
    }
}

/// One answer of the model: its text, its tool calls (name, arguments as text), a refusal.
#[derive(Debug, Default)]
struct Reply {
    content: Option<String>,
    tool_calls: Vec<(String, String)>,
    refusal: Option<String>,
    /// The finish reason to send whatever the cap (a script's `finish_reason`).
    finish: Option<String>,
}

/// Why a request gets no turn, in no wire format: each API's module answers it in its own error
/// shape and status.
#[derive(Debug)]
enum Fault {
    /// The rate-limit burst.
    RateLimited { retry_after_secs: u64 },
    /// The overloaded burst; `retry_after_secs` zero sends no `Retry-After`.
    Overloaded { retry_after_secs: u64 },
    /// The server-error burst.
    ServerError { message: String },
    /// The truncated-body burst: a 200 whose JSON is cut in half.
    TruncatedBody,
    /// A script's fault turn.
    Scripted(script::ScriptFault),
    /// The request is not the one the script expects (or comes after its end).
    ScriptMismatch { message: String },
    /// The request cannot be read; the message says why.
    BadRequest { message: String },
}

/// The next of the configured bursts of faults (rate limits, overloads, server errors, cut
/// bodies), if any is left.
fn injected_fault(state: &ServerState) -> Option<Fault> {
    let faults = &state.options.faults;
    let mut counters = lock(&state.counters);
    if counters.rate_limited < faults.rate_limit_burst {
        counters.rate_limited += 1;
        return Some(Fault::RateLimited { retry_after_secs: faults.retry_after_secs });
    }
    if counters.overloaded < faults.overloaded_burst {
        counters.overloaded += 1;
        return Some(Fault::Overloaded { retry_after_secs: faults.retry_after_secs });
    }
    if counters.server_errors < faults.server_error_burst {
        counters.server_errors += 1;
        // Numbered, as a transient failure's answers differ (an overloaded server, a restart);
        // a scripted fault repeats its body exactly, as a deterministic one does.
        let message =
            format!("internal error (offline fault {} of {})", counters.server_errors, faults.server_error_burst);
        return Some(Fault::ServerError { message });
    }
    if counters.truncated < faults.truncated_body_burst {
        counters.truncated += 1;
        return Some(Fault::TruncatedBody);
    }
    None
}

/// A `Retry-After` header of `seconds`, on `response`.
fn with_retry_after(mut response: Response, seconds: u64) -> Response {
    if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
        response.headers_mut().insert(header::RETRY_AFTER, value);
    }
    response
}

/// A 200 whose JSON body is `full` cut in half: it no longer parses.
fn truncated_response(full: &Value) -> Response {
    let full = full.to_string();
    let cut = full[..full.len() / 2].to_string();
    (axum::http::StatusCode::OK, [(header::CONTENT_TYPE, "application/json")], cut).into_response()
}

/// The turn a readable request gets: the planner's, or the script's next (a fault turn, or a
/// mismatch, is a [`Fault`]).
fn answer_turn(state: &ServerState, messages: &[Message], tools: &[ToolSpec]) -> Result<Reply, Fault> {
    match &state.options.mode {
        Mode::Planner => Ok(planner_answer(state, messages, tools)),
        Mode::Script(script) if is_unscripted_model_check(state, script, messages, tools) => Ok(Reply {
            tool_calls: vec![(tools[0].name.clone(), json!({"status": "ready"}).to_string())],
            ..Reply::default()
        }),
        Mode::Script(script) => script_answer(state, script, messages, tools),
    }
}

/// The planner's turn, with the configured argument faults applied.
fn planner_answer(state: &ServerState, messages: &[Message], tools: &[ToolSpec]) -> Reply {
    let faults = &state.options.faults;
    let plain_text = faults.plain_text_replies.then(|| planner::plain_text_reply(messages)).flatten();
    let planned = match plain_text {
        Some(reply) => reply,
        None if faults.endless_tool_calls => planner::endless(messages, tools),
        None => planner::plan(messages, tools),
    };
    match planned {
        PlannedTurn::Text(text) => Reply { content: Some(text), ..Reply::default() },
        PlannedTurn::ToolCalls(mut calls) => {
            let mut counters = lock(&state.counters);
            if counters.invalid_arguments < faults.invalid_arguments {
                counters.invalid_arguments += 1;
                if let Some((_, arguments)) = calls.first_mut() {
                    // Cut before the closing brace: the JSON no longer parses.
                    arguments.truncate(arguments.len().saturating_sub(1));
                }
            }
            Reply { tool_calls: calls, ..Reply::default() }
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
    script: &Script,
    messages: &[Message],
    tools: &[ToolSpec],
) -> Result<Reply, Fault> {
    let position = {
        let mut counters = lock(&state.counters);
        counters.script_position += 1;
        counters.script_position
    };
    let mismatch = |message: String| {
        tracing::error!(%message, "offline model script mismatch");
        lock(&state.mismatches).push(message.clone());
        Fault::ScriptMismatch { message }
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
    match (&turn.fault, &turn.reply) {
        (Some(fault), _) => Err(Fault::Scripted(fault.clone())),
        (None, Some(reply)) => Ok(Reply {
            content: reply.content.clone(),
            tool_calls: reply.tool_calls.iter().map(|c| (c.name.clone(), c.arguments_text())).collect(),
            refusal: reply.refusal.clone(),
            finish: reply.finish_reason.clone(),
        }),
        // `Script::from_json` refuses turns with neither.
        (None, None) => Ok(Reply::default()),
    }
}

/// Why an answer stopped, in no wire format.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Finish {
    /// The model said all it had to say.
    Stop,
    /// The model asks for tool calls.
    ToolCalls,
    /// The output cap cut the answer (or a script says it did).
    Length,
}

/// A reply as sent, once the output cap is applied.
struct Capped {
    content: Option<String>,
    tool_calls: Vec<(String, String)>,
    refusal: Option<String>,
    completion_tokens: u64,
    finish: Finish,
}

/// Applies the output cap (`max_tokens`): a text longer than allowed is cut (finish `Length`),
/// and tool calls that do not fit are withheld the same way. A scripted finish reason is sent as
/// it is, with the reply as it is.
fn cap(reply: Reply, max_tokens: Option<u64>) -> Capped {
    let Reply { content, tool_calls, refusal, finish } = reply;
    let calls_tokens: u64 =
        tool_calls.iter().map(|(name, arguments)| count_text_tokens(name) + count_text_tokens(arguments)).sum();
    let text_tokens = content.iter().chain(refusal.iter()).map(|t| count_text_tokens(t)).sum::<u64>();
    match (max_tokens, finish.as_deref()) {
        (_, Some(finish)) => {
            let finish = if finish == "length" { Finish::Length } else { Finish::Stop };
            Capped { content, tool_calls, refusal, completion_tokens: text_tokens + calls_tokens, finish }
        }
        (Some(max), None) if text_tokens + calls_tokens > max => {
            let cut = content.map(|text| cut_to_tokens(&text, max)).filter(|t| !t.is_empty());
            let tokens = cut.as_deref().map(count_text_tokens).unwrap_or(0);
            Capped { content: cut, tool_calls: Vec::new(), refusal, completion_tokens: tokens, finish: Finish::Length }
        }
        (_, None) => {
            let finish = if tool_calls.is_empty() { Finish::Stop } else { Finish::ToolCalls };
            Capped { content, tool_calls, refusal, completion_tokens: text_tokens + calls_tokens, finish }
        }
    }
}

fn cut_to_tokens(text: &str, max_tokens: u64) -> String {
    let bpe = tiktoken_rs::o200k_base_singleton();
    let tokens = bpe.encode_with_special_tokens(text);
    let keep = usize::try_from(max_tokens).unwrap_or(usize::MAX).min(tokens.len());
    bpe.decode(&tokens[..keep]).unwrap_or_default()
}

/// Counts an answer about to be sent and returns its number (for its ids): its prompt tokens
/// (all of them, cached or not), its completion tokens, and what the cache read and wrote.
fn count_answer(state: &ServerState, prompt_tokens: u64, completion_tokens: u64, cache_use: cache::CacheUse) -> u64 {
    let mut counters = lock(&state.counters);
    counters.answers += 1;
    counters.prompt_tokens += prompt_tokens;
    counters.completion_tokens += completion_tokens;
    counters.cache_read_tokens += cache_use.read;
    counters.cache_write_tokens += cache_use.written;
    counters.answers
}
