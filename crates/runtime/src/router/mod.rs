//! The router: one closed event loop over [`Input`] that decides, for every event, whether the
//! agent acts, and keeps one run at a time per session.
//!
//! Invariants:
//! - an event is recorded as processed (by id) before anything acts on it, and a message or an
//!   assignment is claimed in the state database before a run starts for it, so a reconnect, a
//!   replay and a reconciliation together still handle each thing once;
//! - the agent never reacts to its own messages, nor to other bots not in `allowed_bots`;
//! - at most one run per session: input for a busy session steers the running run;
//! - every run goes through the run queue in the state (`picogent_state::RunQueue`), for a
//!   single copy as for replicas: queued with its claim, claimed by the process that runs it,
//!   resumed by a claim of its lapsed lease; what differs between one copy and several (which
//!   store, whether to poll, who else may hold a lease) is chosen where the agent is assembled;
//! - at most `limits.max_concurrent_runs` runs in this process; the rest wait in the queue, in order;
//! - every failed or stopped run leaves exactly one short notice where it was asked, never a stack
//!   trace (claimed by run id before it is posted);
//! - a task that waits for others (`blocked_by:` labels) starts only once they are all done, and a
//!   parent of the agent's is rolled up as its sub-tasks finish (`tree.rs`).

// Public only to the benches, which time the filters on their own.
#[cfg(any(test, feature = "test-support"))]
pub mod filter;
#[cfg(not(any(test, feature = "test-support")))]
mod filter;
mod outcome;
mod queue;
mod reconcile;
mod runs;
mod tree;

pub use queue::QueueSetup;
pub use reconcile::Reconciliation;
pub use runs::{CreateRefused, NotRecorded, StartRefused};

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::guard::{Asked, Asker, Steering};
use crate::metrics::{EventName, Metrics};
use crate::refusal::Refusal;
use crate::request::{RunDone, RunKind, RunRequest, RunServices, Trigger};
use crate::status::StatusBoard;
use filter::{MessageFacts, MessageFate};
use outcome::{EventFate, MessageOutcome, Source, TaskOutcome};
use picogent_config::Config;
use picogent_inspector::startup::{ReconcileReport, StartupReport, counts_line};
use picogent_mcp::host::SkillCall;
use picogent_state::{ClaimKind, RunQueue, State};
use picogent_tracker::TrackerClient;
use picogent_tracker::model::{Event, MemberKind, MessageOut, ReceivedEvent, TaskOut};
use picogent_tracker::session::SessionKey;
use picogent_tracker::stream::{LinkStatus, StreamItem};

/// Everything the router reacts to, in one channel: the event stream puts its items here
/// directly ([`picogent_tracker::stream::spawn_into`]), runs send their end, MCP and the CLI their
/// commands.
#[derive(Debug)]
pub enum Input {
    Stream(Box<StreamItem>),
    /// A run ended (its task sends this as its last act).
    RunDone(Box<RunDone>),
    /// What a REST reconciliation found after a (re)connect.
    Reconciled(Box<Reconciliation>),
    /// Start a run now (the MCP `start_run` tool, the CLI).
    StartRun {
        request: Box<RunRequest>,
        reply: tokio::sync::oneshot::Sender<Result<String, StartRefused>>,
    },
    /// Create a task assigned to the agent and start a run on it (`start_run` with a project and
    /// a title). Here, not in the caller, so the task's own `task.assigned` event, which can only
    /// be read after this input, finds the run and starts no second one.
    CreateAndStart {
        task: Box<picogent_tracker::model::CreateTask>,
        coding: Option<picogent_workspace::CodingChoice>,
        reply: tokio::sync::oneshot::Sender<Result<String, runs::CreateRefused>>,
    },
    /// Stop the run of a session, or a run by id.
    StopRun {
        run_id: String,
        reply: tokio::sync::oneshot::Sender<bool>,
    },
    /// A run began waiting for a person and gave its slot back: a queued run may start.
    SlotFreed,
}

impl From<StreamItem> for Input {
    fn from(item: StreamItem) -> Input {
        Input::Stream(Box::new(item))
    }
}

/// A run in flight.
struct ActiveRun {
    run_id: String,
    cancel: CancellationToken,
    /// Steering for the run's next turn. Every input is in the queue too: the run reports how
    /// many it took in, and the rest (arrived after its last turn) goes to a follow-up run.
    steer: mpsc::UnboundedSender<Steering>,
    /// Why it was cancelled, once it was: said once when it ends.
    stop_reason: Option<String>,
    /// The last of the run's inputs in the queue handed to it.
    inputs_seen: i64,
    /// Another replica took the run over; its end here is not the run's end.
    lost: bool,
}

pub struct Router {
    config: Arc<Config>,
    client: TrackerClient,
    state: State,
    metrics: Arc<Metrics>,
    status: Arc<StatusBoard>,
    services: Arc<RunServices>,
    inputs: mpsc::Sender<Input>,
    /// This process's runs.
    active: HashMap<SessionKey, ActiveRun>,
    members: HashMap<String, MemberKind>,
    /// How the stream began, until the first reconciliation after it completes the report.
    startup: Option<StartupReport>,
    shutdown: CancellationToken,
    /// The run queue, as this process holds it.
    queue: RunQueue,
    /// How this process uses the queue: its leases, whether it polls, what its heartbeat says.
    setup: QueueSetup,
}

impl Router {
    pub fn new(
        services: Arc<RunServices>,
        inputs: mpsc::Sender<Input>,
        shutdown: CancellationToken,
        queue: RunQueue,
        setup: QueueSetup,
    ) -> Router {
        Router {
            config: services.config.clone(),
            client: services.client.clone(),
            state: services.state.clone(),
            metrics: services.metrics.clone(),
            status: services.status.clone(),
            services,
            inputs,
            active: HashMap::new(),
            members: HashMap::new(),
            startup: None,
            shutdown,
            queue,
            setup,
        }
    }

    /// Runs until `shutdown` is cancelled and the input channel is drained of finished runs, then
    /// waits up to `limits.shutdown_grace_ms` for running runs; what is unfinished stays recorded
    /// as running and resumes at the next start (or on another replica).
    pub async fn run(mut self, mut inputs: mpsc::Receiver<Input>) {
        self.refresh_members().await;
        // Runs a crash or a shutdown cut short, and runs still queued, are claimed from the queue:
        // resumed here, or (replicas) wherever a slot is free.
        self.claim_and_spawn().await;
        // Only a queue other processes share has anything to poll for: a single copy hears
        // everything that reaches its runs through this loop.
        let polls = self.setup.poll.is_some();
        let mut tick = tokio::time::interval(self.setup.poll.unwrap_or(Duration::from_secs(3600)));
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => break,
                input = inputs.recv() => match input {
                    Some(input) => self.handle(input).await,
                    None => break,
                },
                _ = tick.tick(), if polls => self.on_tick().await,
            }
        }
        self.drain(inputs).await;
    }

    async fn drain(&mut self, mut inputs: mpsc::Receiver<Input>) {
        let grace = Duration::from_millis(self.config.limits.shutdown_grace_ms);
        tracing::info!(
            active = self.active.len(),
            grace_ms = grace.as_millis() as u64,
            "shutting down: letting runs finish"
        );
        // A run waiting for a person has nothing to finish: it stops now, stays recorded as
        // running, and asks again (the same message) when it resumes at the next start. Its
        // wait is interrupted, not stopped: the server that asked is not told `cancel`.
        self.services.slots.shut_down();
        for run in self.active.values().filter(|run| self.services.slots.is_waiting(&run.run_id)) {
            run.cancel.cancel();
        }
        let deadline = tokio::time::Instant::now() + grace;
        while !self.active.is_empty() {
            match tokio::time::timeout_at(deadline, inputs.recv()).await {
                Ok(Some(Input::RunDone(done))) => self.finish(*done).await,
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        for (session, run) in &self.active {
            // Left as `running` in the state database: found and resumed at the next start.
            tracing::warn!(%session, run_id = %run.run_id, "run still going at shutdown; it resumes at the next start");
            run.cancel.cancel();
        }
        // Cancelled runs stop at once; wait briefly so none is cut off in the middle of a write.
        let deadline = tokio::time::Instant::now() + Duration::from_secs(2);
        while !self.active.is_empty() {
            match tokio::time::timeout_at(deadline, inputs.recv()).await {
                Ok(Some(Input::RunDone(done))) => {
                    self.services.slots.release(&done.run_id);
                    self.active.remove(&done.session);
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
        self.leave().await;
    }

    async fn handle(&mut self, input: Input) {
        match input {
            Input::Stream(item) => match *item {
                StreamItem::Event(event) => {
                    let span = tracing::info_span!("event", id = %event.id, seq = event.seq, name = %event.name);
                    tracing::Instrument::instrument(self.on_event(event), span).await
                }
                StreamItem::Status(status) => self.on_link(status).await,
            },
            Input::RunDone(done) => self.finish(*done).await,
            Input::SlotFreed => self.claim_and_spawn().await,
            Input::Reconciled(found) => self.on_reconciled(*found).await,
            Input::StartRun { request, reply } => {
                let _ = reply.send(self.start_now(*request).await);
            }
            Input::CreateAndStart { task, coding, reply } => {
                let _ = reply.send(self.create_and_start(*task, coding).await);
            }
            Input::StopRun { run_id, reply } => {
                let stopped = match self.state.get_run(&run_id).await {
                    Ok(Some(run)) => self.stop_run(&run_id, run.status, "stopped over MCP").await,
                    _ => false,
                };
                let _ = reply.send(stopped);
            }
        }
    }

    async fn on_link(&mut self, status: LinkStatus) {
        match status {
            LinkStatus::Connected => {
                self.status.set_connected(true);
            }
            LinkStatus::Began { mode, from_seq, skipped } => {
                let report = StartupReport { mode, from_seq, skipped_events: skipped, reconciliation: None };
                self.status.set_startup(report.clone());
                self.startup = Some(report);
            }
            LinkStatus::CaughtUp { last_seq } => {
                tracing::info!(last_seq, "event stream caught up; reconciling through REST");
                self.spawn_reconciliation();
            }
            LinkStatus::GapAccepted { from, to } => {
                // What the missing events carried is found through REST.
                self.metrics.gap();
                tracing::warn!(from, to, "events missing from the tracker's log; reconciling through REST");
                self.spawn_reconciliation();
            }
            LinkStatus::Disconnected { reason } => {
                self.metrics.reconnect();
                self.status.set_connected(false);
                self.status.set_caught_up(false);
                tracing::warn!(%reason, "event stream disconnected");
            }
        }
    }

    async fn on_event(&mut self, received: ReceivedEvent) {
        let name = EventName::of(&received.event);
        match self.state.record_event(&received.id, received.seq, &received.name).await {
            Ok(true) => {}
            Ok(false) => {
                self.metrics.event(name, EventFate::Duplicate.as_str());
                tracing::debug!(id = %received.id, "duplicate event dropped");
                return;
            }
            Err(error) => {
                // Acting without the record could act twice later; dropping it loses nothing,
                // because reconciliation finds the task or mention again.
                tracing::error!(%error, id = %received.id, "cannot record event; skipped until reconciliation");
                self.metrics.event(name, EventFate::StateError.as_str());
                return;
            }
        }
        match received.event {
            Event::TaskAssigned(data) => {
                if !filter::works_assignment(&data.task, &self.config.slug, self.config.task_listen) {
                    self.metrics.event(name, EventFate::Ignored.as_str());
                } else if self.assignment_already_worked(&data.task, &received.ts).await {
                    // Reconciliation saw this assignment first (its event was slow to arrive) and
                    // started a run for it after it happened: that run covers it.
                    self.metrics.event(name, EventFate::AlreadyWorked.as_str());
                } else if self.held_by_blockers(&data.task).await {
                    self.metrics.event(name, EventFate::Blocked.as_str());
                } else {
                    self.metrics.event(name, EventFate::Run.as_str());
                    self.on_assignment(data.task, data.assigned_by, Source::Event).await;
                }
            }
            // The agent handed its task on itself (a review's hand-off or verdict): its run ends
            // on its own.
            Event::TaskUnassigned(data) if data.unassigned_by == self.config.slug => {
                self.metrics.event(name, EventFate::Ignored.as_str());
            }
            Event::TaskUnassigned(data) => {
                let session = SessionKey::Task(data.task.id.clone());
                let stopped = self.stop(&session, &format!("the task was unassigned by @{}", data.unassigned_by)).await;
                self.metrics.event(name, if stopped { EventFate::Stop } else { EventFate::Ignored }.as_str());
            }
            Event::MessageNew(data) => {
                self.on_message(data.message, Source::Event).await;
            }
            Event::TaskUpdated(data) => {
                let fate = self.on_task_updated(data).await;
                self.metrics.event(name, fate.as_str());
            }
            // The stream passes on known events only; an unknown one is ignored all the same.
            Event::Unknown(_) => self.metrics.event(name, EventFate::Ignored.as_str()),
        }
    }

    /// Whether `session` has a run, running or queued (here or on any replica).
    async fn session_busy(&self, session: &SessionKey) -> bool {
        // Unknown counts as busy: a second run would be worse than a late one.
        self.active.contains_key(session)
            || self.queue.active_run(session).await.map(|run| run.is_some()).unwrap_or(true)
    }

    /// Starts (or queues) a run for the task; `false` when it is already being worked or the
    /// run was refused.
    async fn on_assignment(&mut self, task: TaskOut, assigned_by: String, source: Source) -> bool {
        let session = SessionKey::Task(task.id.clone());
        if self.session_busy(&session).await {
            tracing::info!(task = %task.key, "assignment for a task already being worked");
            return false;
        }
        tracing::info!(task = %task.key, source = source.as_str(), "working assigned task");
        let trigger = Trigger::Assigned { task_key: task.key.clone() };
        let request = RunRequest::new(session.clone(), trigger, RunKind::Task { task: Box::new(task), assigned_by });
        match self.start_or_queue(request).await {
            Ok(_) => true,
            Err(refused) => {
                tracing::info!(%refused, "the task run was not started");
                self.tell_refused(&session, &refused, None).await;
                false
            }
        }
    }

    async fn assignment_already_worked(&self, task: &TaskOut, event_ts: &str) -> bool {
        let Ok(at) = time::OffsetDateTime::parse(event_ts, &time::format_description::well_known::Rfc3339) else {
            return false;
        };
        let session = SessionKey::Task(task.id.clone());
        self.state.has_run_since(&session, at).await.unwrap_or(false)
    }

    /// Takes up what a reconciliation found, counts what became of it, and reports the first
    /// one after the stream began as the startup's (logged once, shown in `/readyz`).
    async fn on_reconciled(&mut self, found: Reconciliation) {
        let Reconciliation { tasks, messages, mut report } = found;
        for task in tasks {
            match self.on_reconciled_task(task).await {
                TaskOutcome::Worked => report.tasks.worked += 1,
                reason => report.tasks.skip(reason.as_str()),
            }
        }
        for message in messages {
            match self.on_message(message, Source::Reconciled).await {
                outcome if outcome.answered() => report.mentions.answered += 1,
                reason => report.mentions.skip(reason.as_str()),
            }
        }
        self.status.set_caught_up(true);
        match self.startup.take() {
            Some(mut startup) => {
                log_startup(&startup, &report);
                startup.reconciliation = Some(report);
                self.status.set_startup(startup);
            }
            None => tracing::debug!(
                tasks_worked = report.tasks.worked,
                tasks_skipped = %counts_line(&report.tasks.skipped),
                mentions_answered = report.mentions.answered,
                mentions_skipped = %counts_line(&report.mentions.skipped),
                "reconciled"
            ),
        }
    }

    /// Starts a run for a task reconciliation found, unless something covers it already;
    /// returns `worked` or why not.
    async fn on_reconciled_task(&mut self, task: TaskOut) -> TaskOutcome {
        // What a live assignment would not start, a reconnect does not either.
        if !filter::works_assignment(&task, &self.config.slug, self.config.task_listen) {
            return TaskOutcome::NotListening;
        }
        let session = SessionKey::Task(task.id.clone());
        if self.session_busy(&session).await {
            return TaskOutcome::Running;
        }
        match self.state.has_finished_run_for(&session).await {
            Ok(false) => {}
            Ok(true) => return TaskOutcome::FinishedRun,
            Err(error) => {
                tracing::warn!(%error, "cannot check runs of a reconciled task");
                return TaskOutcome::StateError;
            }
        }
        if self.held_by_blockers(&task).await {
            self.metrics.event(EventName::TaskAssigned, EventFate::Blocked.as_str());
            return TaskOutcome::Blocked;
        }
        self.metrics.event(EventName::TaskAssigned, EventFate::Reconciled.as_str());
        let assigned_by = task.created_by.clone();
        if self.on_assignment(task, assigned_by, Source::Reconciled).await {
            TaskOutcome::Worked
        } else {
            TaskOutcome::Refused
        }
    }

    /// Answers, steers with, or drops a message; returns what became of it (the metric's fate).
    async fn on_message(&mut self, message: MessageOut, source: Source) -> MessageOutcome {
        const EVENT: EventName = EventName::MessageNew;
        tracing::debug!(id = %message.id, source = source.as_str(), "message");
        // Seen before: claimed durably (with the run that answers it, or the input that steers one).
        let seen = self.state.is_claimed(ClaimKind::Message, &message.id).await.unwrap_or(true);
        if seen {
            self.metrics.event(EVENT, MessageOutcome::Duplicate.as_str());
            return MessageOutcome::Duplicate;
        }
        let session = SessionKey::of_message(&message);
        // Stop comes first: it is obeyed even when the message would not start a run.
        if filter::is_stop_command(&message.content, &self.config.slug) && message.author_slug != self.config.slug {
            let stopped = self.stop_tree(&session, &format!("@{} asked me to stop", message.author_slug)).await;
            let outcome = if stopped { MessageOutcome::Stop } else { MessageOutcome::StopIdle };
            self.metrics.event(EVENT, outcome.as_str());
            return outcome;
        }
        let author_kind = self.member_kind(&message.author_slug).await;
        let facts = MessageFacts { author_kind, replies_to_agent: self.replies_to_agent(&message, &session).await };
        let fate = filter::message_fate(
            &message,
            facts,
            &self.config.slug,
            self.config.chat_listen,
            &self.config.allowed_bots,
        );
        let asker = asker_of(author_kind);
        if fate != MessageFate::Answer {
            self.claim(ClaimKind::Message, &message.id).await;
            self.metrics.event(EVENT, fate.as_str());
            tracing::debug!(id = %message.id, fate = fate.as_str(), "message not answered");
            // A person who asks the agent by name is told once why it does not answer.
            if fate == MessageFate::ChatOff
                && asker == Asker::Person
                && filter::mentions_agent(&message, &self.config.slug)
            {
                self.tell(&session, &Refusal::ChatOff, Some(&message.id)).await;
            }
            return MessageOutcome::NotAnswered(fate);
        }
        // The loop guard: only what answers a bot counts, and a bot's message past the cap costs
        // no model call. A person is always answered (within the budgets).
        if asker == Asker::Bot {
            match self.services.post_guard.capped(&session).await {
                Ok(None) => {}
                Ok(Some(count)) => {
                    self.claim(ClaimKind::Message, &message.id).await;
                    tracing::warn!(thread = %session, count, "thread reply cap for bots reached: not answering (loop guard)");
                    self.metrics.event(EVENT, MessageOutcome::ReplyCap.as_str());
                    self.services.post_guard.tell_people(&session, count, Some(&message.id)).await;
                    return MessageOutcome::ReplyCap;
                }
                Err(error) => tracing::warn!(%error, "cannot read the thread reply count"),
            }
        }
        // A busy session takes the message as steering: no second run. A run whose loop has
        // already ended (its channel is closed) hands what it did not take in to a follow-up
        // run when its end comes back, so the message is kept with the run either way. A
        // mention reconciliation found is a question of its own, asked while nobody heard it:
        // it waits for a run of its own, so each is answered (and named) by its own reply.
        // A skill called in the message is given with it: the run may be long past its prompt.
        let skill = self.services.host.skill_call(&message.content);
        let steering = Steering {
            text: steering_text(&message, &session, skill.as_ref()),
            asked: Some(Asked { message_id: message.id.clone(), asker }),
        };
        self.route_message(message, session, steering, source == Source::Reconciled).await
    }

    async fn replies_to_agent(&self, message: &MessageOut, session: &SessionKey) -> bool {
        let Some(parent_id) = &message.parent_id else { return false };
        let thread = SessionKey::Thread(parent_id.clone());
        if matches!(session, SessionKey::Thread(_)) {
            // Answering now, or answered before: either way the agent is in this thread.
            if self.session_busy(&thread).await {
                return true;
            }
            if matches!(self.state.load_session(&thread).await, Ok(Some(_))) {
                return true;
            }
        }
        match self.client.get_message(parent_id).await {
            Ok(parent) => parent.author_slug == self.config.slug,
            Err(_) => false,
        }
    }

    /// Who asked for a run of `kind`: the author of its message, the member who assigned its
    /// task, or a person (the operator's prompt).
    async fn asker_of_run(&mut self, request: &RunRequest) -> Asker {
        if let Some(from) = &request.prompt_from {
            return from.asker;
        }
        let slug = match &request.kind {
            RunKind::Message { message } => message.author_slug.clone(),
            RunKind::Task { assigned_by, .. } => assigned_by.clone(),
            RunKind::Prompt { .. } | RunKind::Schedule { .. } => return Asker::Person,
        };
        asker_of(self.member_kind(&slug).await)
    }

    /// Tells the person a refused start left without an answer (the daily budget tells its own
    /// notice as it refuses; a shutdown or a duplicate leaves nobody waiting).
    async fn tell_refused(&self, session: &SessionKey, refused: &StartRefused, reply_to: Option<&str>) {
        if let StartRefused::State { .. } = refused {
            self.tell(session, &Refusal::NotRecorded, reply_to).await;
        }
    }

    /// Tells `session` once in its window that `refusal` refused what was asked there.
    async fn tell(&self, session: &SessionKey, refusal: &Refusal, reply_to: Option<&str>) {
        crate::refusal::tell_once(&self.state, &self.client, session, refusal, reply_to).await;
    }

    async fn member_kind(&mut self, slug: &str) -> Option<MemberKind> {
        if !self.members.contains_key(slug)
            && let Ok(member) = self.client.get_member(slug).await
        {
            self.members.insert(member.slug.clone(), member.kind);
        }
        self.members.get(slug).copied()
    }

    async fn refresh_members(&mut self) {
        match self.client.list_members().await {
            Ok(members) => self.members = members.into_iter().map(|m| (m.slug, m.kind)).collect(),
            Err(error) => tracing::warn!(%error, "cannot list members yet; will look them up one by one"),
        }
    }

    async fn claim(&self, kind: ClaimKind, key: &str) -> bool {
        match self.state.claim(kind, key).await {
            Ok(fresh) => fresh,
            Err(error) => {
                tracing::error!(%error, kind = kind.as_str(), key, "cannot claim in the state database; not acting");
                false
            }
        }
    }

    fn spawn_reconciliation(&self) {
        let client = self.client.clone();
        let state = self.state.clone();
        let inputs = self.inputs.clone();
        let slug = self.config.slug.clone();
        let window = self.config.startup.answer_mentions_since.0;
        let busy: HashSet<SessionKey> = self.active.keys().cloned().collect();
        tokio::spawn(async move {
            let reconciler = reconcile::Reconciler { client: &client, state: &state, slug: &slug, window, busy };
            let found = reconciler.run().await;
            let _ = inputs.send(Input::Reconciled(Box::new(found))).await;
        });
    }
}

/// Who a member of `kind` is to the loop guard: a member the tracker could not tell about counts
/// as a bot, so the guard errs on the side of stopping.
fn asker_of(kind: Option<MemberKind>) -> Asker {
    match kind {
        Some(MemberKind::Human) => Asker::Person,
        Some(MemberKind::Agent) | None => Asker::Bot,
    }
}

/// The one info line of a start: how the stream began and what the first reconciliation found.
fn log_startup(startup: &StartupReport, report: &ReconcileReport) {
    tracing::info!(
        mode = startup.mode.as_str(),
        from_seq = startup.from_seq,
        skipped_events = startup.skipped_events,
        tasks_open = report.tasks.open,
        tasks_worked = report.tasks.worked,
        tasks_skipped = %counts_line(&report.tasks.skipped),
        mention_window = %report.mentions.window,
        mentions_answered = report.mentions.answered,
        mentions_skipped = %counts_line(&report.mentions.skipped),
        errors = report.errors.len(),
        "started: {}",
        match startup.mode {
            picogent_tracker::stream::StartMode::Head => "first start, at the tracker's head (past events not acted on)",
            picogent_tracker::stream::StartMode::Resume => "resumed from the recorded position",
            picogent_tracker::stream::StartMode::FromStart => "replayed the whole event log (--from-start)",
        }
    );
}

/// How a message that arrives during a run is handed to it. In a chat thread it is a new
/// request to answer, so it carries the same `Message id:`/`Thread id:` lines as
/// `prompts/message_new.md`; on a task it is extra input for the work in progress. The content
/// is fenced for the run that takes it in (`prompts::fence_pending`, settled by the run); a
/// message that calls a skill (`skill`) is given as the skill and the words after it.
fn steering_text(message: &MessageOut, session: &SessionKey, skill: Option<&SkillCall>) -> String {
    use picogent_prompts::{MAX_FIELD_CHARS, clean_name, fence_pending};
    let author = clean_name(&message.author_slug);
    let content = match skill {
        Some(call) => crate::prompt::skill_request(call, &author, fence_pending),
        None => fence_pending(&message.content, MAX_FIELD_CHARS),
    };
    match session {
        SessionKey::Thread(root) => format!(
            "Message id: {}\nThread id: {}\n@{author} wrote in this thread while you were working:\n\n{content}",
            clean_name(&message.id),
            clean_name(root)
        ),
        SessionKey::Task(_) | SessionKey::Prompt(_) | SessionKey::Schedule(_) => {
            format!("@{author} commented while you were working:\n\n{content}")
        }
    }
}
