//! One run: from a request the router accepted to a finished record. Builds the prompt from the
//! templates and fresh tracker data, continues the session's conversation, drives the LLM loop,
//! and persists the session, the run record and the day's spend.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::prompts::{MessageNewVars, MessageView, Prompts, SystemVars, TaskAssignedVars, TaskView};
use crate::runtime::metrics::Metrics;
use crate::runtime::status::StatusBoard;
use crate::session::SessionKey;
use crate::state::State;
use crate::tools::ToolSource;
use crate::tracker::TrackerClient;
use crate::tracker::model::{MessageOut, MessageQuery, StepOut, TaskOut, TaskStatus};

/// What every run needs, shared by all of them.
pub struct RunServices {
    pub config: Arc<Config>,
    /// The agent's own tracker connection.
    pub client: TrackerClient,
    pub state: State,
    pub metrics: Arc<Metrics>,
    pub status: Arc<StatusBoard>,
    pub prompts: Arc<Prompts>,
    pub tools: Arc<dyn ToolSource>,
    pub model: Arc<dyn crate::llm::ChatModel>,
    /// The agent's shutdown: a run cancelled by it stays `running` and resumes at the next start.
    pub shutdown: CancellationToken,
    /// The external MCP servers: their instructions and prompt commands.
    pub host: Arc<crate::mcp::host::McpHost>,
    /// The loop guard the message tools ask before every post.
    pub post_guard: Arc<dyn crate::tools::PostGuard>,
}

/// The assignment's acknowledgement (moving the task to `in_progress`) in flight, answering with
/// the task as it then is (`None` if it failed; the failure is logged where it happens).
pub type Acknowledgement = tokio::task::JoinHandle<Option<TaskOut>>;

/// What a task run's prompt reads besides the task: its steps and its latest comments.
#[derive(Debug)]
pub struct TaskReads {
    steps: Vec<StepOut>,
    comments: Vec<MessageOut>,
}

/// A task run's reads, sent before the run starts.
pub type Prefetch = tokio::task::JoinHandle<TaskReads>;

/// The session's stored conversation, read while the run's start is recorded.
pub type SessionLoad = tokio::task::JoinHandle<Result<Option<crate::state::Session>, crate::state::StateError>>;

/// Sends a task run's reads now, so they overlap the writes that start the run (see
/// `RunRequest::prefetched`). Reads only: nothing is lost if the run never takes them.
pub fn prefetch_task_reads(client: TrackerClient, task_id: String) -> Prefetch {
    tokio::spawn(async move { task_reads(&client, &task_id).await })
}

/// Told when a run's first model request is on its way (or dropped if the run never gets that
/// far). The assignment's acknowledgement waits for it: its write on the tracker, and the
/// `task.updated` event the tracker sends back for it, then do not compete with the run's start.
pub type FirstRequest = tokio::sync::oneshot::Sender<()>;

/// The run's model, telling `signal` once the first request has been handed to the HTTP client
/// (its first poll builds the request and queues it on a connection).
struct SignalFirstRequest<'m> {
    inner: &'m dyn crate::llm::ChatModel,
    signal: std::sync::Mutex<Option<FirstRequest>>,
}

impl crate::llm::ChatModel for SignalFirstRequest<'_> {
    fn complete<'a>(
        &'a self,
        request: &'a crate::llm::ChatRequest<'a>,
    ) -> futures::future::BoxFuture<'a, Result<crate::llm::ChatResponse, crate::llm::LlmError>> {
        let mut signal = self.signal.lock().ok().and_then(|mut slot| slot.take());
        let mut sending = self.inner.complete(request);
        Box::pin(std::future::poll_fn(move |cx| {
            let polled = sending.as_mut().poll(cx);
            if let Some(signal) = signal.take() {
                let _ = signal.send(());
            }
            polled
        }))
    }
}

async fn task_reads(client: &TrackerClient, task_id: &str) -> TaskReads {
    let comments_query =
        MessageQuery { task_id: Some(task_id.to_string()), limit: Some(20), ..MessageQuery::default() };
    let (steps, comments) = tokio::join!(client.list_steps(task_id), client.list_messages(&comments_query));
    TaskReads { steps: steps.unwrap_or_default(), comments: comments.unwrap_or_default() }
}

/// The run's tools, with one rule added: before the first call — the run's first chance to act
/// on the board — the run's start record is written and everything the agent has recorded (the
/// processed event, the claim, the run) is flushed to disk ([`State::sync`]), so neither a crash
/// nor a power cut can make it forget what it already did; and the assignment's acknowledgement
/// has landed, so it cannot overtake a change the model makes. All of these overlap the first
/// model request instead of delaying it.
struct DurableFirst<'a> {
    inner: &'a dyn ToolSource,
    state: &'a State,
    /// The write of the run's start record, still in flight.
    start_saved: std::sync::Mutex<Option<tokio::task::JoinHandle<Result<(), crate::state::StateError>>>>,
    /// The acknowledgement, if it was still in flight when the prompt was built.
    acknowledged: std::sync::Mutex<Option<Acknowledgement>>,
    /// Set by the first call: `Err` if the records could not be made safe (no tool then runs).
    ready: tokio::sync::OnceCell<Result<(), String>>,
}

impl DurableFirst<'_> {
    /// Waits for the start record's write, if no call has yet.
    async fn start_saved(&self) -> Result<(), String> {
        let pending = self.start_saved.lock().ok().and_then(|mut slot| slot.take());
        match pending {
            Some(handle) => match handle.await {
                Ok(Ok(())) => Ok(()),
                Ok(Err(error)) => Err(error.to_string()),
                Err(error) => Err(format!("saving the run's start failed: {error}")),
            },
            None => Ok(()),
        }
    }

    /// Waits for the start record's write and the acknowledgement, whichever are still out.
    async fn landed(&self) -> Result<(), String> {
        let acknowledged = self.acknowledged.lock().ok().and_then(|mut slot| slot.take());
        let acknowledged = async {
            if let Some(ack) = acknowledged {
                // Its failure is logged by the acknowledgement itself and does not stop the run.
                let _ = ack.await;
            }
        };
        let (saved, ()) = tokio::join!(self.start_saved(), acknowledged);
        saved
    }

    async fn ready(&self) -> Result<(), String> {
        self.landed().await?;
        self.state.sync().await.map_err(|e| e.to_string())
    }
}

impl ToolSource for DurableFirst<'_> {
    fn tools(&self) -> Vec<rmcp::model::Tool> {
        self.inner.tools()
    }

    fn call<'a>(
        &'a self,
        name: &'a str,
        arguments: serde_json::Value,
        context: &'a crate::tools::ToolContext,
    ) -> futures::future::BoxFuture<'a, rmcp::model::CallToolResult> {
        Box::pin(async move {
            if let Err(error) = self.ready.get_or_init(|| self.ready()).await {
                tracing::error!(%error, "not calling a tool: the run's records are not safe on disk");
                return rmcp::model::CallToolResult::error(vec![rmcp::model::ContentBlock::text(format!(
                    "not run: {error}. The agent does not act before its records are safe on disk."
                ))]);
            }
            self.inner.call(name, arguments, context).await
        })
    }
}

/// What a run is for.
#[derive(Debug, Clone)]
pub enum RunKind {
    /// Work a task assigned to the agent.
    Task { task: Box<TaskOut>, assigned_by: String },
    /// Answer a message that addressed the agent.
    Message { message: Box<MessageOut> },
    /// Answer a prompt given over MCP or the command line.
    Prompt { text: String },
}

#[derive(Debug)]
pub struct RunRequest {
    pub session: SessionKey,
    /// A short line saying what started it, recorded with the run.
    pub trigger: String,
    pub kind: RunKind,
    /// Input that arrived before the run started; handed to it at its first turn boundary.
    pub steering: Vec<String>,
    /// Set when continuing a run interrupted by a crash or restart.
    pub resume_run_id: Option<String>,
    /// The assignment's acknowledgement (move to in_progress); it overlaps the first model
    /// request, and the run's first tool call waits for it.
    pub acknowledged: Option<Acknowledgement>,
    /// A task run's prompt reads, sent when the assignment was accepted with a free slot (so they
    /// are fresh); `None` if the run waited, and then it reads when it starts.
    pub prefetched: Option<Prefetch>,
    /// A fresh run's stored conversation, read by the router while it records the run's start;
    /// `None`, and the run reads it itself.
    pub session_loaded: Option<SessionLoad>,
    /// Told when the run's first model request is on its way (see [`FirstRequest`]).
    pub first_request: Option<FirstRequest>,
    /// A claim (kind, key) written in the same transaction as the run's start, so the thing is
    /// handled once and a crash between deciding and starting loses nothing.
    pub claim: Option<(crate::state::ClaimKind, String)>,
}

impl RunRequest {
    /// A fresh run of `kind` for `session`, with nothing sent ahead for it: no steering, claim,
    /// acknowledgement, prefetched reads, preloaded session or first-request signal.
    pub fn new(session: SessionKey, trigger: String, kind: RunKind) -> RunRequest {
        RunRequest {
            session,
            trigger,
            kind,
            steering: Vec::new(),
            resume_run_id: None,
            acknowledged: None,
            prefetched: None,
            session_loaded: None,
            first_request: None,
            claim: None,
        }
    }
}

/// How a run ended, as the router needs to know it.
#[derive(Debug, Clone, PartialEq)]
pub enum RunEnd {
    Completed,
    /// Stopped by a person, an unassignment or a shutdown.
    Cancelled,
    /// Ended without doing its job; `notice` is the one short comment to leave.
    Failed {
        notice: String,
    },
}

impl RunEnd {
    pub fn outcome_word(&self) -> &'static str {
        match self {
            RunEnd::Completed => "completed",
            RunEnd::Cancelled => "cancelled",
            RunEnd::Failed { .. } => "failed",
        }
    }
}

#[derive(Debug)]
pub struct RunDone {
    pub run_id: String,
    pub session: SessionKey,
    pub kind: RunKind,
    pub end: RunEnd,
    pub duration: Duration,
    /// How many steering inputs the loop took in; the router hands the rest to a follow-up run.
    pub steering_consumed: usize,
}

/// Runs one request to its end. Never panics and never returns an error: every failure becomes
/// a `RunEnd::Failed` with a notice for people and a recorded reason.
pub async fn execute(
    services: Arc<RunServices>,
    run_id: String,
    request: RunRequest,
    cancel: CancellationToken,
    steer: mpsc::UnboundedReceiver<String>,
) -> RunDone {
    let started = Instant::now();
    let RunRequest { session, kind, acknowledged, prefetched, session_loaded, first_request, resume_run_id, .. } =
        request;
    let (end, steering_consumed) = match drive(
        &services,
        &run_id,
        &session,
        &kind,
        if resume_run_id.is_some() {
            Start::Resumed { acknowledged }
        } else {
            Start::Fresh { acknowledged, prefetched, session_loaded, first_request }
        },
        &cancel,
        steer,
    )
    .await
    {
        Ok(ended) => ended,
        Err(error) => {
            tracing::error!(%error, "run failed before the model loop");
            let _ = services
                .state
                .finish_run(
                    &run_id,
                    &crate::state::FinishRun {
                        error: Some(error.clone()),
                        ..crate::state::FinishRun::new(crate::state::RunStatus::Failed)
                    },
                )
                .await;
            let notice = format!(
                "I could not start on this: {error}. I will not retry on my own; reassign me or mention me to try again."
            );
            (RunEnd::Failed { notice }, 0)
        }
    };
    RunDone { run_id, session, kind, end, duration: started.elapsed(), steering_consumed }
}

/// The prompt of a fresh request, with current tracker data, and the assignment's
/// acknowledgement if it is still in flight (for the run's first tool call to wait for).
///
/// The prompt does not wait for the acknowledgement: while it is in flight, the task is the one
/// the assignment arrived with, in the status the acknowledgement gives it; once it has landed
/// (the run waited for a free slot), the task it answered with. Without one, or if it failed,
/// the task is read afresh. The other reads go out at the same time, unless `prefetched` sent
/// them already.
pub async fn user_prompt(
    services: &RunServices,
    kind: &RunKind,
    ack: Option<Acknowledgement>,
    prefetched: Option<Prefetch>,
) -> Result<(String, Option<Acknowledgement>), String> {
    let client = &services.client;
    let prompts = &services.prompts;
    match kind {
        RunKind::Task { task, assigned_by } => {
            let (landed, in_flight) = match ack {
                Some(ack) if ack.is_finished() => (Some(ack), None),
                ack => (None, ack),
            };
            let current = async {
                if in_flight.is_some() {
                    let mut task = task.as_ref().clone();
                    task.status = TaskStatus::InProgress;
                    return Ok(task);
                }
                if let Some(ack) = landed
                    && let Ok(Some(task)) = ack.await
                {
                    return Ok(task);
                }
                client.get_task(&task.id).await
            };
            let reads = async {
                if let Some(prefetched) = prefetched
                    && let Ok(reads) = prefetched.await
                {
                    return reads;
                }
                task_reads(client, &task.id).await
            };
            let (task, reads) = tokio::join!(current, reads);
            let task = task.map_err(|e| format!("reading the task failed: {e}"))?;
            let prompt = prompts
                .task_assigned(&TaskAssignedVars {
                    task: TaskView::new(&task, &reads.steps),
                    assigned_by: assigned_by.clone(),
                    comments: reads.comments.iter().map(MessageView::new).collect(),
                })
                .map_err(|e| e.to_string())?;
            Ok((prompt, in_flight))
        }
        RunKind::Message { message } => {
            // `/mcp__<server>__<prompt> key=value ...`: the server's rendered prompt is the request.
            if let Some(expanded) = services.host.expand_prompt_command(&message.content).await {
                let prompt = expanded.map_err(|e| format!("the prompt command failed: {e}"))?;
                return Ok((
                    format!(
                        "Message id: {}\nThread id: {}\n@{} asked you to run an MCP prompt. Do what it says, then \
                         answer in the thread with reply_message (parent_id {}), once.\n\n{}",
                        message.id,
                        message.thread_root(),
                        message.author_slug,
                        message.thread_root(),
                        crate::prompts::clean_text(&prompt, crate::prompts::MAX_FIELD_CHARS)
                    ),
                    ack,
                ));
            }
            let thread_query = MessageQuery {
                parent_id: Some(message.thread_root().to_string()),
                limit: Some(20),
                ..MessageQuery::default()
            };
            let task = async {
                match &message.task_id {
                    Some(task_id) => client.get_task(task_id).await.ok().map(|t| TaskView::new(&t, &[])),
                    None => None,
                }
            };
            let (thread, task) = tokio::join!(client.list_messages(&thread_query), task);
            let thread = thread.unwrap_or_default();
            let prompt = prompts
                .message_new(&MessageNewVars {
                    message: MessageView::new(message),
                    thread: thread.iter().filter(|m| m.id != message.id).map(MessageView::new).collect(),
                    task,
                    agent_slug: services.config.slug.clone(),
                })
                .map_err(|e| e.to_string())?;
            Ok((prompt, ack))
        }
        RunKind::Prompt { text } => Ok((crate::prompts::clean_text(text, crate::prompts::MAX_FIELD_CHARS), ack)),
    }
}

pub fn system_prompt(
    config: &Config,
    prompts: &Prompts,
    extra_sections: Vec<crate::prompts::Section>,
) -> Result<String, String> {
    prompts
        .system(&SystemVars {
            name: config.name.clone(),
            slug: config.slug.clone(),
            capabilities: config.capabilities.clone(),
            extra_sections,
        })
        .map_err(|e| e.to_string())
}

/// What is stored with a run from its start, so a resumed run sends the model the same request
/// and reuses the same idempotency keys for the same calls.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct RunStart {
    prompt: String,
    history_len: usize,
}

/// What is stored with a run when it ends: its start, the loop's record and the transcript.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StoredRun {
    pub prompt: String,
    pub history_len: usize,
    #[serde(default)]
    pub record: Option<crate::agent::RunRecord>,
    #[serde(default)]
    pub conversation: Vec<crate::llm::Message>,
}

/// The tools a run of this kind is offered: fewer for a chat reply than for a task run.
fn offered_tools(kind: &RunKind, available: &[rmcp::model::Tool]) -> Vec<String> {
    let preset: Option<&[&str]> = match kind {
        RunKind::Task { .. } => Some(crate::tools::registry::TASK_RUN_TOOLS),
        RunKind::Message { message } if message.task_id.is_some() => Some(crate::tools::registry::TASK_RUN_TOOLS),
        RunKind::Message { .. } => Some(crate::tools::registry::CHAT_REPLY_TOOLS),
        RunKind::Prompt { .. } => None,
    };
    available
        .iter()
        .map(|tool| tool.name.to_string())
        .filter(|name| {
            preset.is_none_or(|preset| {
                preset.contains(&name.as_str())
                    || name.starts_with("mcp__")
                    || name == "list_mcp_resources"
                    || name == "read_mcp_resource"
            })
        })
        .collect()
}

/// How a run begins, with the assignment's acknowledgement if one is in flight.
enum Start {
    Fresh {
        acknowledged: Option<Acknowledgement>,
        prefetched: Option<Prefetch>,
        session_loaded: Option<SessionLoad>,
        first_request: Option<FirstRequest>,
    },
    /// Continuing a run a crash or a restart interrupted: its first request is read back.
    Resumed { acknowledged: Option<Acknowledgement> },
}

async fn drive(
    services: &Arc<RunServices>,
    run_id: &str,
    session: &SessionKey,
    kind: &RunKind,
    start: Start,
    cancel: &CancellationToken,
    steer: mpsc::UnboundedReceiver<String>,
) -> Result<(RunEnd, usize), String> {
    let state = &services.state;
    let config = &services.config;
    let session_key = session.as_string();
    // A fresh run reads its session, the day's spend and the tracker data for its prompt at once.
    let resuming = matches!(start, Start::Resumed { .. });
    let (loaded, used_today, fresh_prompt, first_request) = match start {
        Start::Resumed { acknowledged } => {
            if let Some(ack) = acknowledged {
                let _ = ack.await;
            }
            (state.load_session(&session_key).await, state.tokens_today().await, None, None)
        }
        Start::Fresh { acknowledged, prefetched, session_loaded, first_request } => {
            let loaded = async {
                if let Some(load) = session_loaded
                    && let Ok(loaded) = load.await
                {
                    return loaded;
                }
                state.load_session(&session_key).await
            };
            let (loaded, used_today, prompt) =
                tokio::join!(loaded, state.tokens_today(), user_prompt(services, kind, acknowledged, prefetched));
            (loaded, used_today, Some(prompt), first_request)
        }
    };
    let history: Vec<crate::llm::Message> = match loaded {
        Ok(Some(stored)) => serde_json::from_value(stored.messages).unwrap_or_else(|error| {
            tracing::warn!(%error, "stored session unreadable; starting it afresh");
            Vec::new()
        }),
        Ok(None) => Vec::new(),
        Err(error) => return Err(format!("the state database failed: {error}")),
    };
    // A resumed run repeats its first request exactly, so the same calls get the same keys.
    let stored_start = if resuming {
        state
            .get_run(run_id)
            .await
            .ok()
            .flatten()
            .and_then(|run| run.record)
            .and_then(|record| serde_json::from_value::<RunStart>(record).ok())
    } else {
        None
    };
    let (prompt, history, acknowledged) = match (stored_start, fresh_prompt) {
        (Some(start), _) if start.history_len <= history.len() => {
            let history = history[..start.history_len].to_vec();
            (start.prompt, history, None)
        }
        (_, Some(fresh)) => {
            let (prompt, acknowledged) = fresh?;
            (prompt, history, acknowledged)
        }
        (_, None) => (user_prompt(services, kind, None, None).await?.0, history, None),
    };
    let start = RunStart { prompt: prompt.clone(), history_len: history.len() };
    let start_json = serde_json::to_value(&start).map_err(|e| e.to_string())?;
    let system = system_prompt(config, &services.prompts, services.host.instruction_sections())?;
    // Written while the first model request is out; the first tool call waits for it.
    let start_saved = {
        let state = state.clone();
        let run_id = run_id.to_string();
        tokio::spawn(async move { state.save_run_record(&run_id, &start_json).await })
    };

    let mut limits = config.limits.clone();
    let used_today = used_today.unwrap_or(0);
    limits.max_tokens_per_run =
        limits.max_tokens_per_run.min(config.limits.max_tokens_per_day.saturating_sub(used_today));

    // Only the names are kept: the definitions themselves are the loop's to fetch, and a list
    // held here would live as long as the run.
    let offered = offered_tools(kind, &services.tools.tools());
    let mut tool_context = crate::tools::ToolContext::new(config.slug.clone());
    tool_context.idempotency_key = Some(format!("{run_id}-h{}", history.len()));
    tool_context.post_guard = Some(services.post_guard.clone());
    tool_context.run_id = Some(run_id.to_string());
    tool_context.session = Some(session.clone());
    let tools = DurableFirst {
        inner: services.tools.as_ref(),
        state,
        start_saved: std::sync::Mutex::new(Some(start_saved)),
        acknowledged: std::sync::Mutex::new(acknowledged),
        ready: tokio::sync::OnceCell::new(),
    };
    let model = SignalFirstRequest { inner: services.model.as_ref(), signal: std::sync::Mutex::new(first_request) };
    let setup = crate::agent::RunSetup {
        model: &model,
        tools: &tools,
        offered_tools: offered,
        limits,
        tool_context,
        cancel: cancel.clone(),
        steering: Some(steer),
    };
    let output =
        crate::agent::run(setup, crate::agent::RunInput { system_prompt: system, history, prompt: prompt.clone() })
            .await;
    // A run that ended before its first model request (stopped at once, say) lets the
    // acknowledgement go now: `landed` below waits for it.
    drop(model);
    let record = output.record;
    // The start record is in before anything else is written to the run, and the acknowledgement
    // has landed before the run is reported done.
    if let Err(error) = tools.landed().await {
        return Err(format!("the state database failed: {error}"));
    }

    let shutting_down = services.shutdown.is_cancelled();
    if record.outcome == crate::agent::RunOutcome::Cancelled && shutting_down {
        // Left `running`: the next start resumes it from the same request.
        return Ok((RunEnd::Cancelled, record.steering_inputs as usize));
    }
    if let Ok(messages) = serde_json::to_value(&output.conversation)
        && let Err(error) = state.save_session(&session_key, &messages).await
    {
        tracing::error!(%error, "cannot save the session");
    }
    let total = record.total_tokens();
    let today = time::OffsetDateTime::now_utc().date();
    if let Err(error) = state.add_tokens(today, total).await {
        tracing::error!(%error, "cannot record the day's spend");
    }
    services.metrics.tokens(record.prompt_tokens, record.completion_tokens);
    for call in &record.calls {
        let outcome = serde_json::to_value(call.outcome).ok().and_then(|v| v.as_str().map(str::to_string));
        services.metrics.tool_call(&call.name, outcome.as_deref().unwrap_or("unknown"));
    }
    if record.turns > 0 {
        services.metrics.turn(Duration::from_millis(record.model_time_ms / u64::from(record.turns)));
    }
    use crate::agent::RunOutcome;
    use crate::state::RunStatus;
    let (status, end) = match record.outcome {
        RunOutcome::Completed => (RunStatus::Completed, RunEnd::Completed),
        RunOutcome::Cancelled => (RunStatus::Stopped, RunEnd::Cancelled),
        other => (RunStatus::Failed, RunEnd::Failed { notice: failure_notice(other, &record) }),
    };
    let stored = StoredRun {
        prompt,
        history_len: start.history_len,
        record: Some(record.clone()),
        conversation: output.conversation,
    };
    let finish = crate::state::FinishRun {
        status,
        turns: record.turns,
        tool_calls: record.tool_calls,
        prompt_tokens: record.prompt_tokens,
        completion_tokens: record.completion_tokens,
        model_duration: Duration::from_millis(record.model_time_ms),
        tool_duration: Duration::from_millis(record.tool_time_ms),
        outcome: Some(if record.outcome == RunOutcome::Completed {
            record.final_message.clone()
        } else {
            record.outcome.describe(&record)
        }),
        error: record.detail.clone(),
        record: serde_json::to_value(&stored).ok(),
    };
    if let Err(error) = state.finish_run(run_id, &finish).await {
        tracing::error!(%error, "cannot record the end of the run");
    }
    tracing::info!(outcome = ?record.outcome, turns = record.turns, tool_calls = record.tool_calls, tokens = total, "run ended");
    Ok((end, record.steering_inputs as usize))
}

/// The one comment a failed run leaves: what happened and what to do. Never a stack trace.
fn failure_notice(outcome: crate::agent::RunOutcome, record: &crate::agent::RunRecord) -> String {
    use crate::agent::RunOutcome;
    let what_to_do = match outcome {
        RunOutcome::BudgetTurns | RunOutcome::BudgetToolCalls | RunOutcome::BudgetTokens | RunOutcome::Deadline => {
            "Mention me to continue where I stopped, or split the work into smaller tasks."
        }
        RunOutcome::ModelError => {
            "The model endpoint may be down or refusing requests; mention me to retry once it is back."
        }
        RunOutcome::EmptyAnswer | RunOutcome::Refusal => "Rephrase the request and mention me again.",
        RunOutcome::Completed | RunOutcome::Cancelled => "",
    };
    format!("{} {what_to_do}", outcome.describe(record)).trim().to_string()
}

/// One line per step of a stored run: tool calls with a one-line result, then the final answer.
pub fn timeline_lines(run: &crate::state::RunRecord) -> Vec<String> {
    let Some(stored) = run.record.clone().and_then(|r| serde_json::from_value::<StoredRun>(r).ok()) else {
        return vec![format!("({})", run.status.as_str())];
    };
    let mut lines = Vec::new();
    let mut names = std::collections::HashMap::new();
    for message in stored.conversation.iter().skip(stored.history_len + 1) {
        match message {
            crate::llm::Message::Assistant { tool_calls, .. } => {
                for call in tool_calls {
                    names.insert(call.id.clone(), format!("{}({})", call.name, one_line(&call.arguments, 90)));
                }
            }
            crate::llm::Message::Tool { tool_call_id, content, is_error, .. } => {
                let call = names.remove(tool_call_id).unwrap_or_default();
                let mark = if *is_error { "✗" } else { "→" };
                lines.push(format!("tool  {call} {mark} {}", one_line(content, 100)));
            }
            crate::llm::Message::User { content } => lines.push(format!("input {}", one_line(content, 100))),
            crate::llm::Message::System { .. } => {}
        }
    }
    if let Some(record) = &stored.record {
        lines.push(format!(
            "end   {} after {} turns, {} tool calls, {} tokens: {}",
            serde_json::to_value(record.outcome).ok().and_then(|v| v.as_str().map(str::to_string)).unwrap_or_default(),
            record.turns,
            record.tool_calls,
            record.total_tokens(),
            one_line(&record.final_message, 100)
        ));
    }
    lines
}

/// `text` on one line, whitespace folded, cut at `max_chars` with an ellipsis.
pub(crate) fn one_line(text: &str, max_chars: usize) -> String {
    let flat = text.split_whitespace().collect::<Vec<_>>().join(" ");
    if flat.chars().count() > max_chars {
        format!("{}…", flat.chars().take(max_chars).collect::<String>())
    } else {
        flat
    }
}
