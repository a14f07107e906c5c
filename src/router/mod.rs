//! The router: one closed event loop over [`Input`] that decides, for every event, whether the
//! agent acts, and keeps one run at a time per session.
//!
//! Invariants:
//! - an event is recorded as processed (by id) before anything acts on it, and a message or an
//!   assignment is claimed in the state database before a run starts for it, so a reconnect, a
//!   replay and a reconciliation together still handle each thing once;
//! - the agent never reacts to its own messages, nor to other bots not in `allowed_bots`;
//! - at most one run per session: input for a busy session steers the running run;
//! - at most `limits.max_concurrent_runs` runs; the rest wait in order;
//! - every failed or stopped run leaves exactly one short notice where it was asked, never a stack
//!   trace (claimed by run id before it is posted).

pub mod filter;

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use crate::config::Config;
use crate::runtime::metrics::Metrics;
use crate::runtime::run::{RunDone, RunEnd, RunKind, RunRequest, RunServices};
use crate::runtime::status::StatusBoard;
use crate::session::SessionKey;
use crate::state::{ClaimKind, State};
use crate::tracker::TrackerClient;
use crate::tracker::model::{
    Event, EventEnvelope, MemberKind, MessageOut, MessageQuery, SendMessage, TaskOut, TaskQuery, TaskStatus, UpdateTask,
};
use crate::transport::{LinkStatus, StreamItem};
use filter::{MessageFacts, MessageFate};

/// A task run's prompt reads sent ahead (`run::prefetch_task_reads`).
type EarlyReads = crate::runtime::run::Prefetch;

/// Everything the router reacts to.
#[derive(Debug)]
pub enum Input {
    Stream(Box<StreamItem>),
    /// A run ended (its task sends this as its last act).
    RunDone(Box<RunDone>),
    /// What a REST reconciliation found after a (re)connect.
    Reconciled {
        tasks: Vec<TaskOut>,
        messages: Vec<MessageOut>,
    },
    /// Start a run now (the MCP `start_run` tool, the CLI).
    StartRun {
        request: Box<RunRequest>,
        reply: tokio::sync::oneshot::Sender<Result<String, String>>,
    },
    /// Stop the run of a session, or a run by id.
    StopRun {
        run_id: String,
        reply: tokio::sync::oneshot::Sender<bool>,
    },
}

/// A run in flight.
struct ActiveRun {
    run_id: String,
    cancel: CancellationToken,
    steer: mpsc::UnboundedSender<String>,
    /// Every steering input sent to the run, in order; the run reports how many it took in, and
    /// the rest (arrived after its last turn) goes to a follow-up run instead of being lost.
    steered: Vec<String>,
    /// Why it was cancelled, once it was: said once when it ends.
    stop_reason: Option<String>,
}

pub struct Router {
    config: Arc<Config>,
    client: TrackerClient,
    state: State,
    metrics: Arc<Metrics>,
    status: Arc<StatusBoard>,
    services: Arc<RunServices>,
    inputs: mpsc::Sender<Input>,
    active: HashMap<SessionKey, ActiveRun>,
    waiting: VecDeque<RunRequest>,
    /// Sessions in `waiting`, so a second request for one steers instead of queueing twice.
    waiting_sessions: HashSet<SessionKey>,
    members: HashMap<String, MemberKind>,
    /// Messages accepted for a run that has not started yet: their durable claim is written with
    /// the run (one transaction), so a crash in between leaves them to reconciliation.
    accepted_messages: HashSet<String>,
    shutdown: CancellationToken,
}

impl Router {
    pub fn new(services: Arc<RunServices>, inputs: mpsc::Sender<Input>, shutdown: CancellationToken) -> Router {
        Router {
            config: services.config.clone(),
            client: services.client.clone(),
            state: services.state.clone(),
            metrics: services.metrics.clone(),
            status: services.status.clone(),
            services,
            inputs,
            active: HashMap::new(),
            waiting: VecDeque::new(),
            waiting_sessions: HashSet::new(),
            members: HashMap::new(),
            accepted_messages: HashSet::new(),
            shutdown,
        }
    }

    /// Runs until `shutdown` is cancelled and the input channel is drained of finished runs, then
    /// waits up to `limits.shutdown_grace_ms` for running runs; what is unfinished stays recorded
    /// as running and resumes at the next start.
    pub async fn run(mut self, mut inputs: mpsc::Receiver<Input>) {
        self.refresh_members().await;
        self.resume_interrupted_runs().await;
        loop {
            tokio::select! {
                biased;
                _ = self.shutdown.cancelled() => break,
                input = inputs.recv() => match input {
                    Some(input) => self.handle(input).await,
                    None => break,
                },
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
        self.waiting.clear();
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
                    self.active.remove(&done.session);
                }
                Ok(Some(_)) => {}
                Ok(None) | Err(_) => break,
            }
        }
    }

    async fn handle(&mut self, input: Input) {
        match input {
            Input::Stream(item) => match *item {
                StreamItem::Event { envelope, .. } => {
                    let span =
                        tracing::info_span!("event", id = %envelope.id, seq = envelope.seq, name = %envelope.event);
                    tracing::Instrument::instrument(self.on_envelope(envelope), span).await
                }
                StreamItem::Status(status) => self.on_link(status).await,
            },
            Input::RunDone(done) => self.finish(*done).await,
            Input::Reconciled { tasks, messages } => {
                for task in tasks {
                    self.on_reconciled_task(task).await;
                }
                for message in messages {
                    self.on_message(message, "reconciled").await;
                }
                self.status.set_caught_up(true);
            }
            Input::StartRun { request, reply } => {
                let session = request.session.clone();
                if let Some(active) = self.active.get(&session) {
                    let _ = reply.send(Err(format!("session {session} is busy with run {}", active.run_id)));
                    return;
                }
                if !self.slot_free() {
                    let _ = reply.send(Err(format!(
                        "all {} run slots are busy (limits.max_concurrent_runs); try again when a run ends",
                        self.config.limits.max_concurrent_runs
                    )));
                    return;
                }
                match self.start_or_queue(*request).await {
                    Some(run_id) => {
                        let _ = reply.send(Ok(run_id));
                    }
                    None => {
                        let _ = reply
                            .send(Err("the run was refused (daily token budget reached, or shutting down)".into()));
                    }
                }
            }
            Input::StopRun { run_id, reply } => {
                let session = self.active.iter().find(|(_, run)| run.run_id == run_id).map(|(s, _)| s.clone());
                let stopped = match session {
                    Some(session) => self.stop(&session, "stopped over MCP"),
                    None => false,
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
            LinkStatus::CaughtUp { last_seq } => {
                tracing::info!(last_seq, "event stream caught up; reconciling through REST");
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

    async fn on_envelope(&mut self, envelope: EventEnvelope) {
        let event = Event::from_envelope(&envelope);
        // An assignment that will start a run now has its prompt's reads sent with the record,
        // not after it: GETs only, dropped if the event turns out a duplicate or already worked.
        let mut early_reads: Option<EarlyReads> = match &event {
            Ok(Event::TaskAssigned(data)) if self.starts_now(&data.task) => {
                Some(crate::runtime::run::prefetch_task_reads(self.client.clone(), data.task.id.clone()))
            }
            _ => None,
        };
        // An assignment is also checked against runs started since it happened (reconciliation
        // may have got there first): a read, sent with the record rather than after it.
        let worked_since = async {
            match &event {
                Ok(Event::TaskAssigned(data)) => self.assignment_already_worked(&data.task, &envelope.ts).await,
                _ => false,
            }
        };
        let (recorded, worked_since) =
            tokio::join!(self.state.record_event(&envelope.id, envelope.seq, &envelope.event), worked_since);
        if (!matches!(recorded, Ok(true)) || worked_since)
            && let Some(reads) = early_reads.take()
        {
            reads.abort();
        }
        match recorded {
            Ok(true) => {}
            Ok(false) => {
                self.metrics.event(&envelope.event, "duplicate");
                tracing::debug!(id = %envelope.id, "duplicate event dropped");
                return;
            }
            Err(error) => {
                // Acting without the record could act twice later; dropping it loses nothing,
                // because reconciliation finds the task or mention again.
                tracing::error!(%error, id = %envelope.id, "cannot record event; skipped until reconciliation");
                self.metrics.event(&envelope.event, "state_error");
                return;
            }
        }
        match event {
            Ok(Event::TaskAssigned(data)) => {
                if worked_since {
                    // Reconciliation saw this assignment first (its event was slow to arrive) and
                    // started a run for it after it happened: that run covers it.
                    self.metrics.event(&envelope.event, "already_worked");
                } else if filter::works_assignment(&data.task, &self.config.slug, self.config.task_listen) {
                    self.metrics.event(&envelope.event, "run");
                    self.on_assignment(data.task, data.assigned_by, "event", early_reads).await;
                } else {
                    self.metrics.event(&envelope.event, "ignored");
                }
            }
            Ok(Event::TaskUnassigned(data)) => {
                let session = SessionKey::Task(data.task.id.clone());
                let stopped = self.stop(&session, &format!("the task was unassigned by @{}", data.unassigned_by));
                self.metrics.event(&envelope.event, if stopped { "stop" } else { "ignored" });
            }
            Ok(Event::MessageNew(data)) => self.on_message(data.message, "event").await,
            Ok(Event::TaskUpdated(_)) => self.metrics.event(&envelope.event, "ignored"),
            Ok(Event::Unknown(name)) => {
                tracing::debug!(%name, "unknown event ignored");
                self.metrics.event("unknown", "ignored");
            }
            Err(error) => {
                tracing::warn!(%error, "malformed event ignored");
                self.metrics.event(&envelope.event, "malformed");
            }
        }
    }

    /// Whether an assignment of `task` would start a run at once: the agent works it, the task
    /// has no run yet and a slot is free.
    fn starts_now(&self, task: &TaskOut) -> bool {
        filter::works_assignment(task, &self.config.slug, self.config.task_listen)
            && !self.session_busy(&SessionKey::Task(task.id.clone()))
            && self.slot_free()
    }

    /// Whether `session` has a run, running or waiting for a slot.
    fn session_busy(&self, session: &SessionKey) -> bool {
        self.active.contains_key(session) || self.waiting_sessions.contains(session)
    }

    /// Whether fewer than `max_concurrent_runs` runs are running.
    fn slot_free(&self) -> bool {
        self.active.len() < self.config.limits.max_concurrent_runs as usize
    }

    /// `early_reads`: the prompt's reads, if the caller already sent them (see `starts_now`).
    async fn on_assignment(
        &mut self,
        task: TaskOut,
        assigned_by: String,
        source: &str,
        early_reads: Option<EarlyReads>,
    ) {
        let session = SessionKey::Task(task.id.clone());
        if self.session_busy(&session) {
            tracing::info!(task = %task.key, "assignment for a task already being worked");
            if let Some(reads) = early_reads {
                reads.abort();
            }
            return;
        }
        // With a slot free the run starts now: its prompt's reads go out at once (if they are not
        // out already), while the run's records are written.
        let prefetched = early_reads.or_else(|| {
            self.slot_free().then(|| crate::runtime::run::prefetch_task_reads(self.client.clone(), task.id.clone()))
        });
        // A run starting now tells the acknowledgement when its first model request is out.
        let (first_request, request_out) = prefetched.is_some().then(tokio::sync::oneshot::channel).unzip();
        // Acknowledge (moving the task to in_progress): the human sees the agent took it.
        let ack = if matches!(task.status, TaskStatus::Backlog | TaskStatus::Todo) {
            let client = self.client.clone();
            let task_id = task.id.clone();
            Some(tokio::spawn(async move {
                // After the run's first model request is out (or the run ended before it): its
                // write on the tracker, and the `task.updated` event that comes back for it, would
                // hold up the run's start, and nothing needs it sooner (the run's first tool call
                // waits for it). A run that waits for a slot does not make it wait.
                if let Some(request_out) = request_out {
                    let _ = request_out.await;
                }
                let update = UpdateTask { status: Some(TaskStatus::InProgress), ..UpdateTask::default() };
                client
                    .update_task(&task_id, &update)
                    .await
                    .inspect_err(|error| tracing::warn!(%error, "could not move the task to in_progress"))
                    .ok()
            }))
        } else {
            None
        };
        tracing::info!(task = %task.key, %source, "working assigned task");
        let trigger = format!("task.assigned {}", task.key);
        let request = RunRequest {
            acknowledged: ack,
            prefetched,
            first_request,
            ..RunRequest::new(session, trigger, RunKind::Task { task: Box::new(task), assigned_by })
        };
        self.start_or_queue(request).await;
    }

    async fn assignment_already_worked(&self, task: &TaskOut, event_ts: &str) -> bool {
        let Ok(at) = time::OffsetDateTime::parse(event_ts, &time::format_description::well_known::Rfc3339) else {
            return false;
        };
        let session = SessionKey::Task(task.id.clone()).as_string();
        self.state.has_run_since(&session, at).await.unwrap_or(false)
    }

    async fn on_reconciled_task(&mut self, task: TaskOut) {
        let session = SessionKey::Task(task.id.clone());
        if self.session_busy(&session) {
            return;
        }
        match self.state.has_finished_run_for(&session.as_string()).await {
            Ok(false) => {}
            Ok(true) => return,
            Err(error) => {
                tracing::warn!(%error, "cannot check runs of a reconciled task");
                return;
            }
        }
        // A run recorded as running belongs to resume_interrupted_runs, not to a second start.
        if let Ok(unfinished) = self.state.unfinished_runs().await
            && unfinished.iter().any(|run| run.session_key == session.as_string())
        {
            return;
        }
        self.metrics.event("task.assigned", "reconciled");
        let assigned_by = task.created_by.clone();
        self.on_assignment(task, assigned_by, "reconciliation", None).await;
    }

    async fn on_message(&mut self, message: MessageOut, source: &str) {
        const EVENT: &str = "message.new";
        tracing::debug!(id = %message.id, source, "message");
        // Seen before: claimed durably, or accepted for a run that has not started yet.
        let seen = self.accepted_messages.contains(&message.id)
            || self.state.is_claimed(ClaimKind::Message, &message.id).await.unwrap_or(true);
        if seen {
            self.metrics.event(EVENT, "duplicate");
            return;
        }
        let session = SessionKey::of_message(&message);
        // Stop comes first: it is obeyed even when the message would not start a run.
        if filter::is_stop_command(&message.content, &self.config.slug) && message.author_slug != self.config.slug {
            let stopped = self.stop(&session, &format!("@{} asked me to stop", message.author_slug));
            self.metrics.event(EVENT, if stopped { "stop" } else { "stop_idle" });
            return;
        }
        let facts = MessageFacts {
            author_kind: self.member_kind(&message.author_slug).await,
            replies_to_agent: self.replies_to_agent(&message, &session).await,
        };
        let fate = filter::message_fate(
            &message,
            facts,
            &self.config.slug,
            self.config.chat_listen,
            &self.config.allowed_bots,
        );
        let thread_key = session.as_string();
        if fate != MessageFate::Answer {
            self.claim(ClaimKind::Message, &message.id).await;
            self.metrics.event(EVENT, fate.as_str());
            tracing::debug!(id = %message.id, fate = fate.as_str(), "message not answered");
            return;
        }
        match self.state.replies_in_last_hour(&thread_key).await {
            Ok(count) if count >= self.config.limits.max_replies_per_thread_per_hour => {
                self.claim(ClaimKind::Message, &message.id).await;
                tracing::warn!(thread = %thread_key, count, "thread reply cap reached: not answering (loop guard)");
                self.metrics.event(EVENT, "reply_cap");
                return;
            }
            Ok(_) => {}
            Err(error) => tracing::warn!(%error, "cannot read the thread reply count"),
        }
        // A busy session takes the message as steering: no second run.
        let steering = steering_text(&message, &session);
        if let Some(active) = self.active.get_mut(&session)
            && active.steer.send(steering.clone()).is_ok()
        {
            active.steered.push(steering);
            self.claim(ClaimKind::Message, &message.id).await;
            self.metrics.event(EVENT, "steered");
            return;
        }
        if let Some(waiting) = self.waiting.iter_mut().find(|r| r.session == session) {
            waiting.steering.push(steering);
            self.accepted_messages.insert(message.id.clone());
            self.metrics.event(EVENT, "steered");
            return;
        }
        self.metrics.event(EVENT, "run");
        let trigger = format!("message.new {}", message.id);
        let request = RunRequest {
            claim: Some((ClaimKind::Message, message.id.clone())),
            ..RunRequest::new(session, trigger, RunKind::Message { message: Box::new(message) })
        };
        self.accepted_messages.insert(request_message_id(&request));
        self.start_or_queue(request).await;
    }

    async fn replies_to_agent(&self, message: &MessageOut, session: &SessionKey) -> bool {
        let Some(parent_id) = &message.parent_id else { return false };
        let thread = SessionKey::Thread(parent_id.clone());
        if matches!(session, SessionKey::Thread(_)) {
            // Answering now, or answered before: either way the agent is in this thread.
            if self.session_busy(&thread) {
                return true;
            }
            if matches!(self.state.load_session(&thread.as_string()).await, Ok(Some(_))) {
                return true;
            }
        }
        match self.client.get_message(parent_id).await {
            Ok(parent) => parent.author_slug == self.config.slug,
            Err(_) => false,
        }
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

    /// Cancels the run of `session`, remembering why so it is said once when the run ends.
    fn stop(&mut self, session: &SessionKey, reason: &str) -> bool {
        if let Some(pos) = self.waiting.iter().position(|r| &r.session == session) {
            self.waiting.remove(pos);
            self.waiting_sessions.remove(session);
            return true;
        }
        match self.active.get_mut(session) {
            Some(run) => {
                tracing::info!(%session, run_id = %run.run_id, reason, "stopping run");
                run.stop_reason.get_or_insert_with(|| reason.to_string());
                run.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Starts the run now if a slot is free, else queues it. Returns the run id when started.
    async fn start_or_queue(&mut self, mut request: RunRequest) -> Option<String> {
        if self.shutdown.is_cancelled() {
            return None;
        }
        if request.resume_run_id.is_none() && !self.spend_allows(&request).await {
            return None;
        }
        if !self.slot_free() {
            // Reads made now would be stale when the run starts: it reads afresh then.
            if let Some(prefetched) = request.prefetched.take() {
                prefetched.abort();
            }
            // The acknowledgement must not wait for a run that waits for it.
            request.first_request = None;
            self.waiting_sessions.insert(request.session.clone());
            self.waiting.push_back(request);
            return None;
        }
        Some(self.spawn_run(request).await)
    }

    /// The daily spend guard: past `max_tokens_per_day`, new runs are refused with one notice a day.
    async fn spend_allows(&mut self, request: &RunRequest) -> bool {
        let used = self.state.tokens_today().await.unwrap_or(0);
        if used < self.config.limits.max_tokens_per_day {
            return true;
        }
        self.metrics.event("run", "spend_guard");
        let day = time::OffsetDateTime::now_utc().date().to_string();
        tracing::warn!(used, limit = self.config.limits.max_tokens_per_day, "daily token budget reached; run refused");
        if self.claim(ClaimKind::SpendNotice, &day).await {
            let text = format!(
                "I have used my daily model budget ({} tokens) and will not start new work until tomorrow (UTC). \
                 Ask an admin to raise limits.max_tokens_per_day if this is urgent.",
                self.config.limits.max_tokens_per_day
            );
            self.post_notice(&request.kind, &text, &format!("spend-{day}")).await;
        }
        false
    }

    async fn spawn_run(&mut self, mut request: RunRequest) -> String {
        let session_key = request.session.as_string();
        // A fresh run's stored conversation is read while its start is recorded (the pool's
        // other connection), not after.
        if request.resume_run_id.is_none() {
            let state = self.state.clone();
            let key = session_key.clone();
            request.session_loaded = Some(tokio::spawn(async move { state.load_session(&key).await }));
        }
        let started = match (&request.resume_run_id, &request.claim) {
            (Some(id), _) => Ok(Some(id.clone())),
            (None, Some((kind, key))) => {
                self.accepted_messages.remove(key);
                self.state.start_claimed_run(*kind, key, &session_key, &request.trigger).await
            }
            (None, None) => self.state.start_run(&session_key, &request.trigger).await.map(Some),
        };
        let run_id = match started {
            Ok(Some(id)) => id,
            Ok(None) => {
                tracing::info!(session = %request.session, "already handled; not starting a second run");
                request.session_loaded.take().inspect(|load| load.abort());
                return String::new();
            }
            Err(error) => {
                tracing::error!(%error, "cannot record a new run; not starting it");
                request.session_loaded.take().inspect(|load| load.abort());
                return String::new();
            }
        };
        // Not a child of the shutdown token: a shutdown lets running runs finish within the grace
        // period, and only then cancels what is left (see `drain`).
        let cancel = CancellationToken::new();
        let (steer_tx, steer_rx) = mpsc::unbounded_channel();
        let steered: Vec<String> = request.steering.drain(..).collect();
        for text in &steered {
            let _ = steer_tx.send(text.clone());
        }
        self.active.insert(
            request.session.clone(),
            ActiveRun { run_id: run_id.clone(), cancel: cancel.clone(), steer: steer_tx, steered, stop_reason: None },
        );
        self.status.set_active_runs(self.active.len());
        let services = self.services.clone();
        let inputs = self.inputs.clone();
        let run_id_for_task = run_id.clone();
        let span = tracing::info_span!("run", run_id = %run_id, session = %request.session);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let done = crate::runtime::run::execute(services, run_id_for_task, request, cancel, steer_rx).await;
                let _ = inputs.send(Input::RunDone(Box::new(done))).await;
            },
            span,
        ));
        run_id
    }

    async fn finish(&mut self, done: RunDone) {
        let (stop_reason, leftover) = match self.active.get(&done.session) {
            Some(active) if active.run_id == done.run_id => match self.active.remove(&done.session) {
                Some(active) => {
                    let leftover = active.steered.get(done.steering_consumed..).unwrap_or_default().to_vec();
                    (active.stop_reason, leftover)
                }
                None => (None, Vec::new()),
            },
            _ => (None, Vec::new()),
        };
        self.status.set_active_runs(self.active.len());
        self.metrics.run_finished(done.end.outcome_word(), done.duration);
        let text = match (&done.end, stop_reason) {
            (RunEnd::Cancelled, Some(reason)) => Some(format!("Stopped: {reason}.")),
            (RunEnd::Cancelled, None) => None, // shutdown: the run resumes at the next start
            (RunEnd::Failed { notice }, _) => Some(notice.clone()),
            (RunEnd::Completed, _) => None,
        };
        if let Some(text) = text
            && self.claim(ClaimKind::RunNotice, &done.run_id).await
        {
            self.post_notice(&done.kind, &text, &format!("notice-{}", done.run_id)).await;
        }
        // Input that arrived after the run's last turn boundary starts a follow-up run.
        if !leftover.is_empty() && done.end == RunEnd::Completed {
            let trigger = format!("follow-up of {}", done.run_id);
            let request =
                RunRequest { steering: leftover, ..RunRequest::new(done.session.clone(), trigger, done.kind.clone()) };
            self.start_or_queue(request).await;
        }
        while self.slot_free() {
            let Some(next) = self.waiting.pop_front() else { break };
            self.waiting_sessions.remove(&next.session);
            if self.active.contains_key(&next.session) {
                self.waiting_sessions.insert(next.session.clone());
                self.waiting.push_back(next);
                break;
            }
            self.spawn_run(next).await;
        }
    }

    /// Posts a short notice where the run was asked for: a comment on the task, or a reply in the
    /// thread. The idempotency key makes a retried post land once.
    async fn post_notice(&self, kind: &RunKind, text: &str, key: &str) {
        let body = match kind {
            RunKind::Task { task, .. } => {
                SendMessage { content: text.to_string(), task_id: Some(task.id.clone()), ..SendMessage::default() }
            }
            RunKind::Message { message } => SendMessage {
                content: text.to_string(),
                parent_id: Some(message.thread_root().to_string()),
                ..SendMessage::default()
            },
            RunKind::Prompt { .. } => return,
        };
        // What led to the notice (its claim, the run's end) must outlive a power cut first.
        if let Err(error) = self.state.sync().await {
            tracing::error!(%error, "not posting a notice the state could not record");
            return;
        }
        if let Err(error) = self.client.send_message(&body, Some(key)).await {
            tracing::error!(%error, "could not post a notice");
        }
    }

    /// Runs left `running` by a crash or a shutdown are resumed from their sessions.
    async fn resume_interrupted_runs(&mut self) {
        let runs = match self.state.unfinished_runs().await {
            Ok(runs) => runs,
            Err(error) => {
                tracing::error!(%error, "cannot read unfinished runs");
                return;
            }
        };
        for run in runs {
            let Some(session) = SessionKey::parse(&run.session_key) else { continue };
            let kind = match &session {
                SessionKey::Task(task_id) => match self.client.get_task(task_id).await {
                    Ok(task) if task.assignee_slug.as_deref() == Some(self.config.slug.as_str()) => {
                        RunKind::Task { assigned_by: task.created_by.clone(), task: Box::new(task) }
                    }
                    Ok(_) => {
                        let _ = self.state.mark_interrupted(&run.id, "task no longer assigned to the agent").await;
                        continue;
                    }
                    Err(error) => {
                        tracing::warn!(%error, run_id = %run.id, "cannot load the task of an interrupted run");
                        continue;
                    }
                },
                SessionKey::Prompt(_) => {
                    // Its prompt came from a client that is gone; nobody waits for the answer.
                    let _ = self.state.mark_interrupted(&run.id, "a prompt run is not resumed after a restart").await;
                    continue;
                }
                SessionKey::Thread(root) => match self.client.get_message(root).await {
                    Ok(message) => RunKind::Message { message: Box::new(message) },
                    Err(error) => {
                        tracing::warn!(%error, run_id = %run.id, "cannot load the thread of an interrupted run");
                        continue;
                    }
                },
            };
            tracing::info!(run_id = %run.id, session = %session, "resuming interrupted run");
            let request = RunRequest {
                resume_run_id: Some(run.id.clone()),
                ..RunRequest::new(session, run.trigger.clone(), kind)
            };
            self.start_or_queue(request).await;
        }
    }

    fn spawn_reconciliation(&self) {
        let client = self.client.clone();
        let state = self.state.clone();
        let inputs = self.inputs.clone();
        let slug = self.config.slug.clone();
        tokio::spawn(async move {
            let (tasks, messages) = reconcile(&client, &state, &slug).await;
            let _ = inputs.send(Input::Reconciled { tasks, messages }).await;
        });
    }
}

fn request_message_id(request: &RunRequest) -> String {
    match &request.kind {
        RunKind::Message { message } => message.id.clone(),
        _ => String::new(),
    }
}

/// How a message that arrives during a run is handed to it. In a chat thread it is a new
/// request to answer, so it carries the same `Message id:`/`Thread id:` lines as
/// `prompts/message_new.md`; on a task it is extra input for the work in progress.
fn steering_text(message: &MessageOut, session: &SessionKey) -> String {
    let content = crate::prompts::clean_text(&message.content, crate::prompts::MAX_FIELD_CHARS);
    match session {
        SessionKey::Thread(root) => format!(
            "Message id: {}\nThread id: {root}\n@{} wrote in this thread while you were working:\n\n{content}",
            message.id, message.author_slug
        ),
        SessionKey::Task(_) | SessionKey::Prompt(_) => {
            format!("@{} commented while you were working:\n\n{content}", message.author_slug)
        }
    }
}

/// Asks the tracker what the event stream may have missed: open tasks assigned to the agent,
/// and messages mentioning it after the last one seen.
async fn reconcile(client: &TrackerClient, state: &State, slug: &str) -> (Vec<TaskOut>, Vec<MessageOut>) {
    let mut tasks = Vec::new();
    let mut cursor = None;
    loop {
        let query = TaskQuery {
            assignee: Some(slug.to_string()),
            status: Some("todo,in_progress".into()),
            limit: Some(200),
            cursor: cursor.clone(),
            ..TaskQuery::default()
        };
        match client.list_tasks(&query).await {
            Ok(page) => {
                tasks.extend(page.items);
                match page.next_cursor {
                    Some(next) => cursor = Some(next),
                    None => break,
                }
            }
            Err(error) => {
                tracing::warn!(%error, "reconciliation: cannot list assigned tasks");
                break;
            }
        }
    }
    let mut messages = Vec::new();
    let after = state.get_value("mention_cursor").await.ok().flatten();
    let first_start = after.is_none();
    let query = MessageQuery {
        mentioning: Some(slug.to_string()),
        after: after.clone(),
        limit: Some(200),
        ..MessageQuery::default()
    };
    match client.list_messages(&query).await {
        Ok(found) => {
            if let Some(last) = found.last() {
                let _ = state.set_value("mention_cursor", &last.id).await;
            }
            // At the very first start, old mentions are history, not requests: only the cursor moves.
            if !first_start {
                messages = found;
            }
        }
        Err(error) => tracing::warn!(%error, "reconciliation: cannot list mentions"),
    }
    (tasks, messages)
}
