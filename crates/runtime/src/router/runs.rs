//! A run's life as the router keeps it: started at once or queued for a slot, stopped with a
//! reason said once, finished with its notice, followed up with input that came too late for
//! it, and resumed after a restart.

use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::{ActiveRun, Input, Router};
use crate::guard::Steering;
use crate::refusal::Refusal;
use crate::request::{RunDone, RunKind, RunRequest};
use picogent_state::{ClaimKind, FinishRun, RunStatus};
use picogent_tracker::model::SendMessage;
use picogent_tracker::session::SessionKey;

/// Why a run was not started at once.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StartRefused {
    #[error("session {session} is busy with run {run_id}")]
    Busy { session: SessionKey, run_id: String },
    #[error("all {max} run slots are busy (limits.max_concurrent_runs); try again when a run ends")]
    NoSlot { max: u32 },
    #[error("the daily token budget is spent (limits.max_tokens_per_day); new runs start again tomorrow (UTC)")]
    DailyBudget,
    #[error("the agent is shutting down")]
    ShuttingDown,
    #[error("it was handled already; no second run was started")]
    AlreadyHandled,
    #[error("the run could not be recorded in the state database: {message}")]
    State { message: String },
}

/// What became of a request the router took.
pub(super) enum Started {
    /// Running, with this id.
    Now(String),
    /// Waiting for a free slot; it starts when a run ends.
    Queued,
    /// In the replicas' queue in the database, with this id; a replica with a free slot takes it.
    Enqueued(String),
}

impl Router {
    /// Cancels the run of `session` (on whichever replica runs it), remembering why so it is said
    /// once when the run ends.
    pub(super) async fn stop(&mut self, session: &SessionKey, reason: &str) -> bool {
        // Every run of the session waiting for a slot (or behind its running run) stops too.
        let (stopping, kept): (Vec<RunRequest>, Vec<RunRequest>) =
            self.waiting.drain(..).partition(|request| &request.session == session);
        self.waiting = kept.into();
        let stopped_waiting = !stopping.is_empty();
        if stopped_waiting {
            self.waiting_sessions.remove(session);
            self.publish_waiting();
        }
        for request in stopping {
            self.stop_before_start(request, reason).await;
        }
        match self.active.get_mut(session) {
            Some(run) => {
                tracing::info!(%session, run_id = %run.run_id, reason, "stopping run");
                run.stop_reason.get_or_insert_with(|| reason.to_string());
                run.cancel.cancel();
                true
            }
            None if stopped_waiting => true,
            None => self.stop_anywhere(session, reason).await,
        }
    }

    /// Starts `request` now, or says why not: its session is busy, no slot is free, the day's
    /// budget is spent (the MCP `start_run` tool, which does not queue).
    pub(super) async fn start_now(&mut self, request: RunRequest) -> Result<String, StartRefused> {
        if self.replicas.is_some() {
            return match self.start_or_queue(request).await? {
                Started::Now(run_id) | Started::Enqueued(run_id) => Ok(run_id),
                Started::Queued => Err(StartRefused::NoSlot { max: self.config.limits.max_concurrent_runs }),
            };
        }
        if let Some(active) = self.active.get(&request.session) {
            return Err(StartRefused::Busy { session: request.session.clone(), run_id: active.run_id.clone() });
        }
        if !self.slot_free() {
            return Err(StartRefused::NoSlot { max: self.config.limits.max_concurrent_runs });
        }
        match self.start_or_queue(request).await? {
            Started::Now(run_id) | Started::Enqueued(run_id) => Ok(run_id),
            // A slot was free just above, and nothing ran in between.
            Started::Queued => Err(StartRefused::NoSlot { max: self.config.limits.max_concurrent_runs }),
        }
    }

    /// Queues `request` behind the run its session has (a reconciled mention: a question of its
    /// own); it starts when that run ends and a slot is free. The daily budget is asked now, as
    /// for any new run.
    pub(super) async fn queue_behind(&mut self, request: RunRequest) -> Result<Started, StartRefused> {
        if self.shutdown.is_cancelled() {
            return Err(StartRefused::ShuttingDown);
        }
        if !self.spend_allows(&request).await {
            return Err(StartRefused::DailyBudget);
        }
        self.waiting_sessions.insert(request.session.clone());
        self.waiting.push_back(request);
        self.publish_waiting();
        Ok(Started::Queued)
    }

    /// Starts the run now if a slot is free, else queues it.
    pub(super) async fn start_or_queue(&mut self, request: RunRequest) -> Result<Started, StartRefused> {
        if self.shutdown.is_cancelled() {
            return Err(StartRefused::ShuttingDown);
        }
        if request.resume_run_id.is_none() && !self.spend_allows(&request).await {
            return Err(StartRefused::DailyBudget);
        }
        if self.replicas.is_some() {
            return self.enqueue(request).await;
        }
        if !self.slot_free() {
            self.waiting_sessions.insert(request.session.clone());
            self.waiting.push_back(request);
            self.publish_waiting();
            return Ok(Started::Queued);
        }
        self.spawn_run(request).await.map(Started::Now)
    }

    /// The daily spend guard: past `max_tokens_per_day` (or `max_cost_per_day`), new runs are
    /// refused, and the person is told once a day where they asked.
    pub(super) async fn spend_allows(&mut self, request: &RunRequest) -> bool {
        let limits = &self.config.limits;
        let spent = self.state.spend_today().await.unwrap_or_default();
        let over_cost = limits.max_cost_per_day.is_some_and(|max| spent.cost >= max);
        if spent.tokens < limits.max_tokens_per_day && !over_cost {
            return true;
        }
        self.metrics.event("run", "spend_guard");
        tracing::warn!(tokens = spent.tokens, cost = spent.cost, "daily model budget reached; run refused");
        let refusal = match (over_cost, limits.max_cost_per_day) {
            (true, Some(max)) => {
                Refusal::DailyBudget { setting: "limits.max_cost_per_day", budget: format!("{max} in cost") }
            }
            _ => Refusal::DailyBudget {
                setting: "limits.max_tokens_per_day",
                budget: format!("{} tokens", limits.max_tokens_per_day),
            },
        };
        let asked = request.prompt_from.as_ref().map(|asked| asked.message_id.as_str());
        self.tell(&request.session, &refusal, asked.or(answered_message(&request.kind))).await;
        false
    }

    /// A run stopped while it waited for a slot: recorded as started and stopped at once, so
    /// what it was for counts as handled as after any stopped run (reconciliation does not take
    /// the task up again, the message is not answered later), and said once where it was asked.
    async fn stop_before_start(&mut self, request: RunRequest, reason: &str) {
        let Ok(run_id) = self.record_start(&request).await else { return };
        tracing::info!(session = %request.session, %run_id, reason, "stopped a run before it started");
        let finish = FinishRun {
            outcome: Some(format!("stopped before it started: {reason}")),
            ..FinishRun::new(RunStatus::Stopped)
        };
        if let Err(error) = self.state.finish_run(&run_id, &finish).await {
            tracing::error!(%error, %run_id, "cannot record the stopped run's end");
        }
        for message_id in &request.steering_message_ids {
            self.accepted_messages.remove(message_id);
            self.claim(ClaimKind::Message, message_id).await;
        }
        self.metrics.run_finished(RunStatus::Stopped.as_str(), Duration::ZERO);
        self.run_notice(&request.kind, &run_id, &stopped_before_start(reason)).await;
    }

    /// The one notice of the run `run_id`, posted where it was asked once its claim is taken.
    pub(super) async fn run_notice(&self, kind: &RunKind, run_id: &str, text: &str) {
        if self.claim(ClaimKind::RunNotice, run_id).await {
            self.post_notice(kind, text, &format!("notice-{run_id}")).await;
        }
    }

    /// Records a new run's start with its claim, in one transaction (a resumed run's start is
    /// recorded already); `AlreadyHandled` when the claim was taken before.
    async fn record_start(&mut self, request: &RunRequest) -> Result<String, StartRefused> {
        let session_key = request.session.as_string();
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
                return Err(StartRefused::AlreadyHandled);
            }
            Err(error) => {
                tracing::error!(%error, "cannot record a new run; not starting it");
                return Err(StartRefused::State { message: error.to_string() });
            }
        };
        Ok(run_id)
    }

    /// Records the run's start (with its claim, in one transaction) and spawns it.
    pub(super) async fn spawn_run(&mut self, mut request: RunRequest) -> Result<String, StartRefused> {
        let run_id = self.record_start(&request).await?;
        // Not a child of the shutdown token: a shutdown lets running runs finish within the grace
        // period, and only then cancels what is left (see `drain`).
        let cancel = CancellationToken::new();
        let (steer_tx, steer_rx) = mpsc::unbounded_channel();
        request.asker = self.asker_of_run(&request).await;
        let steered: Vec<Steering> = request.steering.drain(..).collect();
        for input in &steered {
            let _ = steer_tx.send(input.clone());
        }
        self.active.insert(request.session.clone(), ActiveRun::new(run_id.clone(), cancel.clone(), steer_tx, steered));
        self.status.set_active_runs(self.active.len());
        let services = self.services.clone();
        let inputs = self.inputs.clone();
        let run_id_for_task = run_id.clone();
        let span = tracing::info_span!("run", run_id = %run_id, session = %request.session);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let done = crate::run::execute(services, run_id_for_task, request, cancel, steer_rx).await;
                let _ = inputs.send(Input::RunDone(Box::new(done))).await;
            },
            span,
        ));
        Ok(run_id)
    }

    pub(super) async fn finish(&mut self, done: RunDone) {
        let (stop_reason, steered_late, lost) = match self.active.get(&done.session) {
            Some(active) if active.run_id == done.run_id => match self.active.remove(&done.session) {
                Some(active) => {
                    let leftover = active.steered.get(done.steering_consumed..).unwrap_or_default().to_vec();
                    (active.stop_reason, leftover, active.lost)
                }
                None => (None, Vec::new(), false),
            },
            _ => (None, Vec::new(), false),
        };
        self.status.set_active_runs(self.active.len());
        if lost {
            // Another replica runs it now: its end, notice and follow-up are that replica's.
            self.claim_and_spawn().await;
            return;
        }
        let leftover = match self.replicas {
            // What was sent from anywhere, read after the run's end was written: nothing more
            // can join it now (`state/queue.rs`).
            Some(_) => self.leftover_of(&done.run_id, done.steering_consumed).await,
            None => steered_late,
        };
        self.metrics.run_finished(done.status.as_str(), done.duration);
        let text = match (done.status, stop_reason) {
            (RunStatus::Stopped, Some(reason)) => Some(format!("Stopped: {reason}.")),
            (RunStatus::Failed | RunStatus::DidNothing, _) => done.notice.clone(),
            // Completed; or cut short by the shutdown, and it resumes at the next start.
            _ => None,
        };
        if let Some(text) = text {
            self.run_notice(&done.kind, &done.run_id, &text).await;
        }
        // Input that arrived after the run's last turn boundary starts a follow-up run.
        if !leftover.is_empty() && done.status == RunStatus::Completed {
            let trigger = format!("follow-up of {}", done.run_id);
            let mut inputs = leftover.into_iter();
            let first = inputs.next();
            let request = RunRequest {
                prompt: first.as_ref().map(|input| input.text.clone()),
                prompt_from: first.and_then(|input| input.asked),
                steering: inputs.collect(),
                ..RunRequest::new(done.session.clone(), trigger, done.kind.clone())
            };
            let inputs: Vec<Steering> = request
                .prompt
                .iter()
                .map(|text| Steering { text: text.clone(), asked: request.prompt_from.clone() })
                .chain(request.steering.iter().cloned())
                .collect();
            let asked = request.prompt_from.as_ref().map(|asked| asked.message_id.clone());
            match self.start_or_queue(request).await {
                Ok(_) => {}
                // Replicas: a run of the session started elsewhere meanwhile; it takes the input.
                Err(StartRefused::Busy { run_id, .. }) if self.replicas.is_some() => {
                    self.send_all(&run_id, inputs).await
                }
                Err(refused) => {
                    tracing::warn!(%refused, session = %done.session, "the follow-up run was not started");
                    self.tell_refused(&done.session, &refused, asked.as_deref()).await;
                }
            }
        }
        if self.replicas.is_some() {
            self.claim_and_spawn().await;
        } else {
            self.start_waiting().await;
        }
    }

    /// Starts waiting runs while slots are free, in the order they came; one whose session has
    /// a run keeps its place until that run ends.
    async fn start_waiting(&mut self) {
        while self.slot_free() {
            let Some(position) = self.waiting.iter().position(|request| !self.active.contains_key(&request.session))
            else {
                break;
            };
            let Some(next) = self.waiting.remove(position) else { break };
            if !self.waiting.iter().any(|request| request.session == next.session) {
                self.waiting_sessions.remove(&next.session);
            }
            let session = next.session.clone();
            let asked = match &next.kind {
                RunKind::Message { message } if next.prompt.is_none() => Some(message.id.clone()),
                _ => next.prompt_from.as_ref().map(|asked| asked.message_id.clone()),
            };
            if let Err(refused) = self.spawn_run(next).await {
                tracing::warn!(%refused, "a waiting run was not started");
                self.tell_refused(&session, &refused, asked.as_deref()).await;
            }
        }
        self.publish_waiting();
    }

    /// Shows the runs waiting for a slot (the run inspector lists them as queued).
    pub(super) fn publish_waiting(&self) {
        let waiting = self
            .waiting
            .iter()
            .map(|request| crate::status::WaitingRun {
                session: request.session.as_string(),
                trigger: request.trigger.clone(),
            })
            .collect();
        self.status.set_waiting(waiting);
    }

    /// Posts a short notice where the run was asked for: a comment on the task, or a reply in the
    /// thread. The idempotency key makes a retried post land once.
    pub(super) async fn post_notice(&self, kind: &RunKind, text: &str, key: &str) {
        let body = match kind {
            RunKind::Task { task, .. } => {
                SendMessage { content: text.to_string(), task_id: Some(task.id.clone()), ..SendMessage::default() }
            }
            RunKind::Message { message } => SendMessage {
                content: text.to_string(),
                parent_id: Some(message.thread_root().to_string()),
                reply_to: Some(message.id.clone()),
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
    pub(super) async fn resume_interrupted_runs(&mut self) {
        let runs = match self.state.unfinished_runs().await {
            Ok(runs) => runs,
            Err(error) => {
                tracing::error!(%error, "cannot read unfinished runs");
                return;
            }
        };
        for run in runs {
            let Some(session) = SessionKey::parse(&run.session_key) else { continue };
            let kind = match self.resume_kind(&session).await {
                Ok(Ok(kind)) => kind,
                Ok(Err(reason)) => {
                    let _ = self.state.mark_interrupted(&run.id, reason).await;
                    continue;
                }
                Err(error) => {
                    tracing::warn!(%error, run_id = %run.id, "cannot load the task or thread of an interrupted run");
                    continue;
                }
            };
            tracing::info!(run_id = %run.id, session = %session, "resuming interrupted run");
            let request = RunRequest {
                resume_run_id: Some(run.id.clone()),
                ..RunRequest::new(session, run.trigger.clone(), kind)
            };
            if let Err(refused) = self.start_or_queue(request).await {
                tracing::warn!(%refused, run_id = %run.id, "the interrupted run was not resumed");
            }
        }
    }

    /// What an interrupted run of `session` is for, read afresh from the tracker; `Ok(Err(why))`
    /// when it is not to be resumed (the task is no longer the agent's, or nobody waits for it).
    pub(super) async fn resume_kind(
        &self,
        session: &SessionKey,
    ) -> Result<Result<RunKind, &'static str>, picogent_tracker::TrackerError> {
        Ok(match session {
            SessionKey::Task(task_id) => {
                let task = self.client.get_task(task_id).await?;
                if task.assignee_slug.as_deref() == Some(self.config.slug.as_str()) {
                    Ok(RunKind::Task { assigned_by: task.created_by.clone(), task: Box::new(task) })
                } else {
                    Err("task no longer assigned to the agent")
                }
            }
            // Its prompt came from a client that is gone; nobody waits for the answer.
            SessionKey::Prompt(_) => Err("a prompt run is not resumed after a restart"),
            SessionKey::Thread(root) => {
                Ok(RunKind::Message { message: Box::new(self.client.get_message(root).await?) })
            }
        })
    }
}

/// The message a run of `kind` answers, if it answers one.
fn answered_message(kind: &RunKind) -> Option<&str> {
    match kind {
        RunKind::Message { message } => Some(&message.id),
        RunKind::Task { .. } | RunKind::Prompt { .. } => None,
    }
}

/// The notice of a run stopped before it started (waiting for a slot, or queued).
pub(super) fn stopped_before_start(reason: &str) -> String {
    format!("Stopped before it started: {reason}.")
}
