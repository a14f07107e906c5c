//! One run: from a request the router accepted to a finished record.
//!
//! A run does, in order: acknowledge (a task run moves its task to `in_progress`, so people see
//! the agent took it) → read what the prompt needs → render it → record its start (the prompt,
//! for an exact resume) and flush the state to disk → the model loop → save the session, the
//! spend and the run's end. In direct mode (`workspaces.direct`) a run of a task with a
//! repository hands the task to its coding agent after the acknowledgement, with no model loop
//! (`crate::direct`). A scheduled firing's run ([`RunKind::Schedule`]) takes the same path with
//! what its firing read: a standup's digest over read-only tools and no stored conversation, a
//! prompt in its named session, a stale check's nudges with no model (`crate::nudge`); it ends by
//! recording how the firing went. Nothing here calls back into the router: the router spawns
//! [`execute`] and hears its [`RunDone`].
//!
//! Invariants:
//! - the start record is written and [`State::sync`] has returned before the model loop starts,
//!   so no tool call (the run's first chance to act on the board) happens on a record a crash or
//!   a power cut could take back;
//! - a resumed run sends the model its stored request again, with the history it had, so the
//!   same calls get the same idempotency keys and land once; its stored fence too, so what it
//!   renders afresh (the system prompt, tool descriptions and results) is fenced as before;
//! - every run ends with a status and, if it failed, did nothing or was stopped, one notice for
//!   people; a run cut short by a shutdown stays `running` in the database and resumes at the
//!   next start.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::answer::{RunPosts, answer_text, ask_again, post_answer};
use crate::guard::{Answering, Asked, Steering};
use crate::metrics::Metrics;
use crate::prompt::{system_prompt, user_prompt};
use crate::record::{RunStart, StoredRun};
use picogent_agent::{RunOutcome, RunOutput, RunRecord};
use picogent_config::Config;
use picogent_llm::Message;
use picogent_notices::{NoticeContext, OwnBudget, RunLimits, TokenBudget, failure_notice};
use picogent_prompts::Fence;
use picogent_schedule::firing::{Firing, FiringWork};
use picogent_state::{FinishRun, FiringOutcome, RunStatus, State, StateError};
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{TaskOut, TaskStatus, UpdateTask};
use picogent_tracker::session::SessionKey;

use crate::request::{RunDone, RunError, RunKind, RunRequest, RunServices};

/// Runs one request to its end. Never panics and never returns an error: every failure becomes
/// a failed status with a notice for people and a recorded reason.
pub async fn execute(
    services: Arc<RunServices>,
    run_id: String,
    request: RunRequest,
    cancel: CancellationToken,
    steer: mpsc::UnboundedReceiver<Steering>,
) -> RunDone {
    let started = Instant::now();
    if let (Some(coding), Some(choice)) = (services.coding.as_deref(), &request.coding) {
        coding.runs().choose(&run_id, choice.clone());
    }
    let ended = match drive(&services, &run_id, &request, &cancel, steer).await {
        Ok(ended) => ended,
        Err(error) => {
            tracing::error!(%error, "run failed before the model loop");
            let finish = FinishRun { error: Some(error.to_string()), ..FinishRun::new(RunStatus::Failed) };
            if let Err(error) = services.state.finish_run(&run_id, &finish).await {
                tracing::error!(%error, "cannot record the end of the run");
            }
            let notice = picogent_notices::run::could_not_start(&error, &ask_again(&request.kind));
            Ended { status: RunStatus::Failed, notice: Some(notice), steering_consumed: 0 }
        }
    };
    // What the run kept of its coding work went into its record; nothing of it stays here.
    if let Some(coding) = services.coding.as_deref() {
        coding.runs().take(&run_id);
    }
    if let RunKind::Schedule { firing } = &request.kind {
        record_firing_end(&services, &run_id, firing, ended.status).await;
    }
    let RunRequest { session, kind, .. } = request;
    RunDone {
        run_id,
        session,
        kind,
        status: ended.status,
        notice: ended.notice,
        duration: started.elapsed(),
        steering_consumed: ended.steering_consumed,
    }
}

/// What [`drive`] reports back.
struct Ended {
    status: RunStatus,
    notice: Option<String>,
    steering_consumed: usize,
}

/// The conversation a run starts from, as [`begin`] settled it.
struct Begun {
    system: String,
    history: Vec<Message>,
    start: RunStart,
    /// The run's fence, stored in `start`: its tool descriptions, results and steering use it.
    fence: Fence,
}

async fn drive(
    services: &RunServices,
    run_id: &str,
    request: &RunRequest,
    cancel: &CancellationToken,
    steer: mpsc::UnboundedReceiver<Steering>,
) -> Result<Ended, RunError> {
    // A follow-up run's task was acknowledged by the run it follows (and may be in review now).
    let task = match request.prompt {
        None => acknowledge(&services.client, &request.kind).await,
        Some(_) => None,
    };
    if let RunKind::Schedule { firing } = &request.kind
        && let FiringWork::Stale { days, tasks, .. } = &firing.work
    {
        let posts = RunPosts::new(services.post_guard.clone(), Arc::new(answering_of(request)));
        let end = crate::nudge::post_nudges(services, run_id, *days, tasks, &posts, cancel).await;
        return Ok(Ended { status: end.status, notice: end.notice, steering_consumed: 0 });
    }
    if let Some((coding, asked)) = crate::direct::direct_task(services, request) {
        let task = task.as_ref().unwrap_or(asked);
        let posts = RunPosts::new(services.post_guard.clone(), Arc::new(answering_of(request)));
        let end = crate::direct::work(services, coding, task, run_id, request, &posts, cancel).await;
        return Ok(Ended { status: end.status, notice: end.notice, steering_consumed: 0 });
    }
    let begun = begin(services, run_id, request, task).await?;
    let answering = Arc::new(answering_of(request));
    let posts = Arc::new(RunPosts::new(services.post_guard.clone(), answering.clone()));
    // Steering goes on to the loop as text; what it came from is noted for what posts answer,
    // before the loop can take it in.
    let (to_loop, loop_steering) = mpsc::unbounded_channel();
    let mut steer = steer;
    // What was sent before the start is the loop's at its first turn, as if sent to it directly.
    while let Ok(Steering { text, asked }) = steer.try_recv() {
        answering.steered(asked);
        let _ = to_loop.send(text);
    }
    let forwarding =
        tokio::spawn(forward_steering(steer, answering.clone(), to_loop, services.slots.clone(), run_id.to_string()));
    let (output, token_budget) =
        model_loop(services, run_id, request, &begun, posts.clone(), cancel, loop_steering).await;
    forwarding.abort();
    if output.record.outcome == RunOutcome::Completed {
        // picogent's own lines under the model's words: the coding work's branch and commit, or
        // a digest's tasks, each linked.
        let own = match &request.kind {
            RunKind::Schedule { firing } => match &firing.work {
                FiringWork::Standup { digest, .. } => Some(digest.lines()),
                FiringWork::Stale { .. } | FiringWork::Prompt { .. } => None,
            },
            _ => services.coding.as_ref().and_then(|coding| coding.runs().work(run_id)).map(|work| work.describe()),
        };
        let text = answer_text(&output.record, &services.config.limits, services.config.llm.price.as_ref(), own);
        let steering_taken = output.record.steering_inputs;
        post_answer(&services.client, &posts, &request.session, run_id, &request.kind, text, steering_taken).await;
        crate::review::hand_off_work(services, run_id, &request.kind, posts.as_ref()).await;
    }
    let ended = finish(services, run_id, &request.session, &request.kind, begun.start, output, token_budget).await;
    // The replies taken as answers were sent as steering too: taken in, so none starts a follow-up.
    Ok(Ended { steering_consumed: ended.steering_consumed + answering.taken_as_answers(), ..ended })
}

/// Whether a run of `kind` goes on from its session's conversation and saves it: every run but
/// a scheduled standup's, whose digest is complete in itself (and whose history would only cost
/// tokens at each firing).
fn keeps_conversation(kind: &RunKind) -> bool {
    match kind {
        RunKind::Schedule { firing } => matches!(firing.work, FiringWork::Prompt { .. }),
        RunKind::Task { .. } | RunKind::Message { .. } | RunKind::Prompt { .. } => true,
    }
}

/// Records how a firing's run ended, for the schedules' page and the next firings, and counts it.
/// A run cut short by a shutdown is left `queued`: it resumes at the next start.
async fn record_firing_end(services: &RunServices, run_id: &str, firing: &Firing, status: RunStatus) {
    let outcome = match status {
        RunStatus::Completed => FiringOutcome::Posted,
        RunStatus::Stopped => FiringOutcome::Stopped,
        RunStatus::Interrupted | RunStatus::Queued | RunStatus::Running => return,
        RunStatus::Failed | RunStatus::DidNothing => FiringOutcome::Failed,
    };
    let detail = firing.work.detail();
    let recorded = services.state.record_firing(&firing.job, firing.fire_at_ms, outcome, Some(run_id), &detail).await;
    if let Err(error) = recorded {
        tracing::warn!(%error, schedule = %firing.job, "cannot record how a firing ended");
    }
    // A digest posted: the next one reports what changed after what this one read.
    if let (FiringOutcome::Posted, FiringWork::Standup { digest, .. }) = (outcome, &firing.work)
        && let Some(seen) = digest.seen_ms
        && let Err(error) = services.state.advance_schedule_seen(&firing.job, seen).await
    {
        tracing::warn!(%error, schedule = %firing.job, "cannot record how far the digest read the board");
    }
    services.metrics.firing(&firing.job, outcome);
}

/// What the run answers: the message it was asked with (for a message run), and who asked.
fn answering_of(request: &RunRequest) -> Answering {
    let trigger = match (&request.prompt, &request.kind) {
        (Some(_), _) => request.prompt_from.clone(),
        (None, RunKind::Message { message }) => Some(Asked { message_id: message.id.clone(), asker: request.asker }),
        (None, RunKind::Task { .. } | RunKind::Prompt { .. } | RunKind::Schedule { .. }) => None,
    };
    Answering::new(request.session.clone(), request.asker, trigger)
}

/// Hands each steering input to the loop, noting first what it came from. While the run waits
/// for a person (`crate::waits`), steering is held until the wait ends (the loop could not take
/// it in before anyway): the reply taken as the answer came as steering too (a mention, a reply
/// in a chat thread), and is dropped here, counted in `answering` as taken in, so the model reads
/// it once, as the answer.
async fn forward_steering(
    mut steer: mpsc::UnboundedReceiver<Steering>,
    answering: Arc<Answering>,
    to_loop: mpsc::UnboundedSender<String>,
    waits: Arc<crate::waits::RunSlots>,
    run_id: String,
) {
    while let Some(Steering { text, asked }) = steer.recv().await {
        waits.not_waiting(&run_id).await;
        if asked.as_ref().is_some_and(|asked| waits.took_as_answer(&run_id, &asked.message_id)) {
            answering.taken_as_answer();
            continue;
        }
        answering.steered(asked);
        if to_loop.send(text).is_err() {
            return;
        }
    }
}

/// Moves a task run's task to `in_progress` if it is not started yet: the person who assigned it
/// sees the agent took it. Returns the task as the tracker then answered, for the prompt; `None`
/// when nothing was sent or the update failed (the prompt then reads the task afresh).
async fn acknowledge(client: &TrackerClient, kind: &RunKind) -> Option<TaskOut> {
    let RunKind::Task { task, .. } = kind else { return None };
    if !matches!(task.status, TaskStatus::Backlog | TaskStatus::Todo) {
        return None;
    }
    let update = UpdateTask { status: Some(TaskStatus::InProgress), ..UpdateTask::default() };
    client
        .update_task(&task.id, &update)
        .await
        .inspect_err(|error| tracing::warn!(%error, "could not move the task to in_progress"))
        .ok()
}

/// Reads what the request needs, renders it, and records the run's start durably.
async fn begin(
    services: &RunServices,
    run_id: &str,
    request: &RunRequest,
    task: Option<TaskOut>,
) -> Result<Begun, RunError> {
    let state = &services.state;
    let history = match keeps_conversation(&request.kind) {
        true => stored_history(state, &request.session).await?,
        false => Vec::new(),
    };
    // A resumed run repeats its first request exactly, so the same calls get the same keys.
    let stored_start = match &request.resume_run_id {
        // A damaged record is an error naming the run, not a fresh start.
        Some(_) => match state.get_run(run_id).await? {
            Some(run) => run.record_as::<RunStart>()?.filter(|start| start.history_len <= history.len()),
            None => None,
        },
        None => None,
    };
    let (start, history, fence) = match stored_start {
        Some(start) => {
            let history = history[..start.history_len].to_vec();
            let fence = start.fence.clone().unwrap_or_else(Fence::random);
            (start, history, fence)
        }
        None => {
            let fence = Fence::random();
            // A sub-task's run names its tree's parent, for the inspector's link.
            let parent = task.as_ref().and_then(picogent_tracker::tree::parent_of).map(str::to_string);
            // A task asked to break itself down links to the tree it makes.
            let delegation = &services.config.delegation;
            let breaks_down =
                task.as_ref().filter(|task| delegation.asks_for_breakdown(&task.labels)).map(|task| task.key.clone());
            let prompt = match &request.prompt {
                // Steering that came too late for the run before: its fence takes this run's token.
                Some(prompt) => fence.settle(prompt),
                None => user_prompt(services, &request.kind, task, &request.steering_message_ids, &fence).await?,
            };
            let message_words = match &request.kind {
                RunKind::Message { message } => {
                    Some(crate::record::message_words(&message.content, &services.config.slug))
                }
                RunKind::Task { .. } | RunKind::Prompt { .. } | RunKind::Schedule { .. } => None,
            };
            (
                RunStart {
                    prompt,
                    history_len: history.len(),
                    message_words,
                    parent,
                    breaks_down,
                    ..RunStart::default()
                },
                history,
                fence,
            )
        }
    };
    let system = system_prompt(&services.config, &services.prompts, services.host.instruction_sections(&fence))?;
    let start = RunStart { system_prompt: Some(system.clone()), fence: Some(fence.clone()), ..start };
    state.save_run_record(run_id, &serde_json::to_value(&start)?).await?;
    // Everything recorded so far (the event, the claim, the run, its start) must outlive a power
    // cut before the loop's first tool call acts on the board.
    state.sync().await?;
    Ok(Begun { system, history, start, fence })
}

/// The session's stored conversation; an unreadable one is started afresh rather than failing
/// every later run of the session.
async fn stored_history(state: &State, session: &SessionKey) -> Result<Vec<Message>, StateError> {
    let Some(stored) = state.load_session(session).await? else { return Ok(Vec::new()) };
    Ok(serde_json::from_value(stored.messages).unwrap_or_else(|error| {
        tracing::warn!(%error, "stored session unreadable; starting it afresh");
        Vec::new()
    }))
}

/// Drives the agent's loop over the run's tools, within its budgets and the day's remaining
/// tokens; says which of those held the run's tokens.
async fn model_loop(
    services: &RunServices,
    run_id: &str,
    request: &RunRequest,
    begun: &Begun,
    posts: Arc<RunPosts>,
    cancel: &CancellationToken,
    steer: mpsc::UnboundedReceiver<String>,
) -> (RunOutput, TokenBudget) {
    let config = &services.config;
    let (mut limits, _) = run_limits(config, &request.kind);
    let spent_today = services.state.spend_today().await.unwrap_or_default();
    let token_budget = TokenBudget::least(
        limits.max_tokens_per_run,
        (config.limits.max_tokens_per_day.saturating_sub(spent_today.tokens), config.limits.max_tokens_per_day),
        config.limits.max_cost_per_day.map(|max| (tokens_left_by_cost(config, spent_today.cost), max)),
    );
    let token_budget = tree_budget(services, &request.kind, token_budget).await;
    limits.max_tokens_per_run = token_budget.tokens();
    let (checkpoint, saver) = spawn_checkpoints(services, run_id, &begun.start);
    let mut tool_context = picogent_tools::ToolContext::new(config.slug.clone());
    tool_context.idempotency_key = Some(format!("{run_id}-h{}", begun.start.history_len));
    tool_context.post_guard = Some(posts);
    tool_context.run_id = Some(run_id.to_string());
    tool_context.session = Some(request.session.clone());
    tool_context.fence = begun.fence.clone();
    tool_context.waits = Some(services.slots.clone());
    tool_context.requester = match &request.kind {
        RunKind::Task { assigned_by, .. } => Some(assigned_by.clone()),
        RunKind::Message { message } => Some(message.author_slug.clone()),
        RunKind::Prompt { .. } | RunKind::Schedule { .. } => None,
    };
    let setup = picogent_agent::RunSetup {
        model: services.model.as_ref(),
        tools: services.tools.as_ref(),
        offered_tools: picogent_workspace::review::offered(
            crate::review::is_review_run(services, &request.kind),
            offered_tools(
                &request.kind,
                &services.tools.tools(),
                coding_task(services, &request.kind),
                config.elicitation.ask_person,
                &config.delegation,
            ),
        ),
        limits,
        tool_context,
        cancel: cancel.clone(),
        steering: Some(steer),
        window: picogent_agent::ModelWindow::from_config(&config.llm),
        checkpoint: Some(checkpoint),
        // A task run is there to work the task on the board; a follow-up run answers the input
        // that came too late for the run before it, and may answer in words alone.
        expects_tool_calls: matches!(request.kind, RunKind::Task { .. }) && request.prompt.is_none(),
    };
    let input = picogent_agent::RunInput {
        system_prompt: begun.system.clone(),
        history: begun.history.clone(),
        prompt: begun.start.prompt.clone(),
    };
    let output = picogent_agent::run(setup, input).await;
    // The last checkpoint is written before the run's end, which replaces it.
    let _ = saver.await;
    (output, token_budget)
}

/// The limits a run of `kind` runs within, and the settings of its own turn and token limits when
/// they are not `limits`': a scheduled job's own budget, within the agent's.
fn run_limits(config: &Config, kind: &RunKind) -> (picogent_config::Limits, OwnBudget) {
    let mut limits = config.limits.clone();
    let mut own = OwnBudget::default();
    if let RunKind::Schedule { firing } = kind {
        if let Some(turns) = firing.max_turns.filter(|turns| *turns < limits.max_turns) {
            limits.max_turns = turns;
            own.turns = Some(format!("schedules.{}.max_turns", firing.job));
        }
        if let Some(tokens) = firing.max_tokens.filter(|tokens| *tokens < limits.max_tokens_per_run) {
            limits.max_tokens_per_run = tokens;
            own.tokens = Some(format!("schedules.{}.max_tokens", firing.job));
        }
    }
    (limits, own)
}

/// Keeps the run's record in the state database up to date after every turn, so the run
/// inspector shows a run as it goes. It stores what a resume needs (the start) with it, and ends
/// when the loop does.
fn spawn_checkpoints(
    services: &RunServices,
    run_id: &str,
    start: &RunStart,
) -> (tokio::sync::watch::Sender<Option<RunOutput>>, tokio::task::JoinHandle<()>) {
    let (sender, mut receiver) = tokio::sync::watch::channel(None::<RunOutput>);
    let state = services.state.clone();
    let run_id = run_id.to_string();
    let start = start.clone();
    let saver = tokio::spawn(async move {
        while receiver.changed().await.is_ok() {
            let Some(output) = receiver.borrow_and_update().clone() else { continue };
            let stored = StoredRun {
                start: start.clone(),
                record: Some(output.record),
                conversation: output.conversation,
                coding: None,
            };
            let saved = match serde_json::to_value(&stored) {
                Ok(value) => state.save_run_record(&run_id, &value).await.map_err(|error| error.to_string()),
                Err(error) => Err(error.to_string()),
            };
            if let Err(error) = saved {
                tracing::debug!(%error, "could not checkpoint the run");
            }
        }
    });
    (sender, saver)
}

/// Saves what the run did: the session, the spend, the metrics and the run's end.
async fn finish(
    services: &RunServices,
    run_id: &str,
    session: &SessionKey,
    kind: &RunKind,
    start: RunStart,
    output: RunOutput,
    token_budget: TokenBudget,
) -> Ended {
    let state = &services.state;
    let record = output.record;
    let steering_consumed = record.steering_inputs as usize;
    if record.outcome == RunOutcome::Cancelled && services.shutdown.is_cancelled() {
        // Left `running`: the next start resumes it from the same request.
        return Ended { status: RunStatus::Interrupted, notice: None, steering_consumed };
    }
    if keeps_conversation(kind)
        && let Ok(messages) = serde_json::to_value(&output.conversation)
    {
        match state.save_session_of_run(run_id, session, &messages).await {
            Ok(true) => {}
            Ok(false) => tracing::info!(
                run = run_id,
                "another replica took this run over; its conversation is that replica's to save"
            ),
            Err(error) => tracing::error!(%error, "cannot save the session"),
        }
    }
    let today = time::OffsetDateTime::now_utc().date();
    let cost = services.config.llm.price.map(|price| price.cost(&record.usage()));
    let spent = picogent_state::Spend { tokens: record.total_tokens(), cost: cost.unwrap_or(0.0) };
    if let Err(error) = state.add_spend(today, spent).await {
        tracing::error!(%error, "cannot record the day's spend");
    }
    count_in_metrics(&services.metrics, &record);
    services.metrics.cost(spent.cost);
    let status = record.outcome.status();
    let notice = matches!(status, RunStatus::Failed | RunStatus::DidNothing).then(|| {
        let (limits, own_budget) = run_limits(&services.config, kind);
        let context = NoticeContext {
            llm: &services.config.llm,
            limits: RunLimits {
                max_turns: limits.max_turns,
                max_tool_calls: limits.max_tool_calls,
                run_timeout_ms: limits.run_timeout_ms,
            },
            token_budget,
            model_check: services.status.model(),
            own_budget,
            ask_again: ask_again(kind),
        };
        failure_notice(&record, &output.conversation, &context)
    });
    let finish = FinishRun {
        status,
        turns: record.turns,
        tool_calls: record.tool_calls,
        prompt_tokens: record.prompt_tokens,
        completion_tokens: record.completion_tokens,
        model_duration: Duration::from_millis(record.model_time_ms),
        tool_duration: Duration::from_millis(record.tool_time_ms),
        outcome: Some(record.final_message.clone()),
        error: record.detail.clone(),
        record: None,
        cost,
    };
    // The record moves into what is stored with the run, after the counts were taken from it.
    let stored = StoredRun {
        start,
        record: Some(record),
        conversation: output.conversation,
        coding: services.coding.as_ref().and_then(|coding| coding.runs().take(run_id)),
    };
    let finish = FinishRun { record: serde_json::to_value(&stored).ok(), ..finish };
    if let Err(error) = state.finish_run(run_id, &finish).await {
        tracing::error!(%error, "cannot record the end of the run");
    }
    Ended { status, notice, steering_consumed }
}

fn count_in_metrics(metrics: &Metrics, record: &RunRecord) {
    metrics.tokens(&record.usage());
    for call in &record.calls {
        metrics.tool_call(&call.name, call.outcome);
    }
    if record.turns > 0 {
        metrics.turn(Duration::from_millis(record.model_time_ms / u64::from(record.turns)));
    }
}

/// How many tokens the day's money budget still pays for, at the dearest of the prices.
fn tokens_left_by_cost(config: &Config, spent: f64) -> u64 {
    let (Some(max), Some(price)) = (config.limits.max_cost_per_day, config.llm.price) else { return u64::MAX };
    let per_token = price.dearest_per_million() / 1_000_000.0;
    if per_token <= 0.0 {
        return u64::MAX;
    }
    ((max - spent).max(0.0) / per_token) as u64
}

/// Whether this is a run of a task that has a repository: it is offered the coding tools.
fn coding_task(services: &RunServices, kind: &RunKind) -> bool {
    match (kind, &services.coding) {
        (RunKind::Task { task, .. }, Some(coding)) => coding.serves(task),
        _ => false,
    }
}

/// A sub-task's run (`parent:KEY`) gets at most what its tree has left of
/// `limits.max_tokens_per_tree`: the runs of the parent and of each of its sub-tasks, as this
/// agent's state keeps them. A tree the board cannot show now is not counted (the run's own and
/// the day's budgets still hold), and the log says so.
async fn tree_budget(services: &RunServices, kind: &RunKind, budget: TokenBudget) -> TokenBudget {
    let RunKind::Task { task, .. } = kind else {
        return budget;
    };
    let Some(parent) = picogent_tracker::tree::parent_of(task) else {
        return budget;
    };
    let per_tree = services.config.limits.max_tokens_per_tree;
    let spent = async {
        let root = services.client.get_task(parent).await?;
        let mut sessions = vec![SessionKey::Task(root.id)];
        let subtasks = picogent_tracker::tree::subtasks(&services.client, &root.project_slug, &root.key).await?;
        sessions.extend(subtasks.into_iter().map(|subtask| SessionKey::Task(subtask.id)));
        Ok::<_, anyhow::Error>(services.state.spend_of(&sessions).await?)
    };
    match spent.await {
        Ok(spent) => budget.within_tree(per_tree.saturating_sub(spent.tokens), per_tree, parent),
        Err(error) => {
            tracing::warn!(%error, task = %task.key, parent, "cannot count the tree's spend; its budget is not applied to this run");
            budget
        }
    }
}

/// The tools a run of this kind is offered: fewer for a chat reply than for a task run, the
/// coding tools only on a run of a task that has a repository (`coding`), and `plan_subtasks`
/// only on a task run, while `delegation` lets its task be broken down.
fn offered_tools(
    kind: &RunKind,
    available: &[picogent_tools::ToolDefinition],
    coding: bool,
    ask_person: bool,
    delegation: &picogent_tools::DelegationConfig,
) -> Vec<String> {
    // The tracker tools a run of this kind is offered (`None`: all), and whether the external
    // servers' and the host's tools come with them.
    let (preset, with_servers): (Option<&[&str]>, bool) = match kind {
        RunKind::Task { .. } => (Some(picogent_tools::registry::TASK_RUN_TOOLS), true),
        RunKind::Message { message } if message.task_id.is_some() => {
            (Some(picogent_tools::registry::TASK_RUN_TOOLS), true)
        }
        RunKind::Message { .. } => (Some(picogent_tools::registry::CHAT_REPLY_TOOLS), true),
        RunKind::Prompt { .. } => (None, true),
        RunKind::Schedule { firing } => match firing.work {
            // A digest may look closer, and changes nothing: picogent posts its words.
            FiringWork::Standup { .. } | FiringWork::Stale { .. } => {
                (Some(picogent_tools::registry::DIGEST_TOOLS), false)
            }
            // The operator's prompt gets what any prompt gets.
            FiringWork::Prompt { .. } => (None, true),
        },
    };
    available
        .iter()
        .map(|tool| tool.name.to_string())
        .filter(|name| {
            if picogent_workspace::CODING_TOOLS.contains(&name.as_str()) {
                return coding;
            }
            // A question needs someone who asked, and a place to ask them.
            // Off by default: its definition costs tokens on every turn of every run.
            if name == picogent_tools::question::ASK_PERSON {
                return ask_person && !matches!(kind, RunKind::Prompt { .. } | RunKind::Schedule { .. });
            }
            if name == picogent_tools::plan::PLAN_SUBTASKS {
                return matches!(kind, RunKind::Task { task, .. } if picogent_tools::plan::offered_for(task, delegation));
            }
            let from_servers = name.starts_with("mcp__") || picogent_tools::HOST_TOOLS.contains(&name.as_str());
            preset.is_none_or(|preset| preset.contains(&name.as_str()) || (with_servers && from_servers))
        })
        .collect()
}
