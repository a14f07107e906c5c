//! A run's life as the router keeps it: queued, claimed and started when a slot is free,
//! stopped with a reason said once, finished with its notice, followed up with input that came
//! too late for it, and resumed when its lease lapsed (after a restart, or its replica died).
//! One path for a single copy and for replicas: the queue behind it is the only difference.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::outcome::{EventFate, MessageOutcome};
use super::queue::{NotRunnable, QueuedRequest};
use super::{ActiveRun, Input, Router};
use crate::guard::Steering;
use crate::metrics::EventName;
use crate::refusal::Refusal;
use crate::request::{RunDone, RunKind, RunRequest, Trigger, trigger_of};
use picogent_state::{ClaimKind, ClaimedRun, Enqueued, InputKind, QueuedRun, RunStatus, StateError};
use picogent_tracker::model::{MessageOut, SendMessage};
use picogent_tracker::session::SessionKey;

/// Why a run was not queued.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StartRefused {
    #[error("session {session} is busy with run {run_id}")]
    Busy { session: SessionKey, run_id: String },
    #[error("the daily token budget is spent (limits.max_tokens_per_day); new runs start again tomorrow (UTC)")]
    DailyBudget,
    #[error("the agent is shutting down")]
    ShuttingDown,
    #[error("it was handled already; no second run was started")]
    AlreadyHandled,
    #[error("the run could not be recorded in the state database: {cause}")]
    State { cause: NotRecorded },
}

/// Why `start_run` could not create its task, or, once created, start on it.
#[derive(Debug, thiserror::Error)]
pub enum CreateRefused {
    #[error("the task could not be created: {0}")]
    Tracker(#[from] picogent_tracker::TrackerError),
    #[error("task {task_key} was created, but no run started: {refused}")]
    NotStarted { task_key: String, refused: StartRefused },
}

/// Why a run could not be recorded: the state database failed, its request could not be
/// written down, or each run the message was to steer ended before it could take it.
#[derive(Debug, Clone, thiserror::Error)]
pub enum NotRecorded {
    #[error(transparent)]
    State(Arc<StateError>),
    #[error(transparent)]
    Unstorable(Arc<serde_json::Error>),
    #[error("the session's runs kept ending")]
    KeptEnding,
}

/// How many times a message is offered again when the run it was to steer ended in between.
const STEER_ATTEMPTS: usize = 3;

impl Router {
    /// Stops every run of `session`, queued or running, here or on another replica, remembering
    /// why so it is said once when each ends.
    pub(super) async fn stop(&mut self, session: &SessionKey, reason: &str) -> bool {
        let mut stopped = false;
        if let Some(run) = self.active.get_mut(session) {
            tracing::info!(%session, run_id = %run.run_id, reason, "stopping run");
            run.stop_reason.get_or_insert_with(|| reason.to_string());
            run.cancel.cancel();
            stopped = true;
        }
        let runs = match self.queue.session_runs(session).await {
            Ok(runs) => runs,
            Err(error) => {
                tracing::error!(%error, %session, "cannot read the session's runs to stop them");
                return stopped;
            }
        };
        for (run_id, status) in runs {
            if self.active.get(session).is_some_and(|run| run.run_id == run_id) {
                continue;
            }
            stopped |= self.stop_run(&run_id, status, reason).await;
        }
        stopped
    }

    /// Stops the run `run_id`: this process's at once, a queued one before it starts (recorded
    /// as stopped and said once where it was asked), one running elsewhere by a stop sent to it.
    pub(super) async fn stop_run(&mut self, run_id: &str, status: RunStatus, reason: &str) -> bool {
        if let Some(run) = self.active.values_mut().find(|run| run.run_id == run_id) {
            tracing::info!(run_id, reason, "stopping run");
            run.stop_reason.get_or_insert_with(|| reason.to_string());
            run.cancel.cancel();
            return true;
        }
        if status == RunStatus::Queued
            && let Ok(Some(request)) = self.queue.stop_queued(run_id, reason).await
        {
            tracing::info!(run_id, reason, "stopped a run before it started");
            self.metrics.run_finished(RunStatus::Stopped, Duration::ZERO);
            self.publish_waiting().await;
            // What it was for counts as handled, as after any stopped run: reconciliation does
            // not take the task up again, and its messages were claimed when they were queued.
            if let Ok(QueuedRequest { kind, .. }) = serde_json::from_str(&request) {
                let _ = self.run_notice(&kind, run_id, &picogent_notices::run::stopped_before_start(reason)).await;
            }
            return true;
        }
        match self.queue.send_input(run_id, InputKind::Stop, reason, None).await {
            Ok(sent) => sent.is_some(),
            Err(error) => {
                tracing::error!(%error, run_id, "cannot send a stop through the state database");
                false
            }
        }
    }

    /// Queues `request` and returns its run id (the MCP `start_run` tool, the CLI): it starts at
    /// once when a slot is free, else when one frees; `Busy` when its session has a run.
    pub(super) async fn start_now(&mut self, request: RunRequest) -> Result<String, StartRefused> {
        self.start_or_queue(request).await
    }

    /// Creates the task, assigned to the agent, and queues a run on it before the next input (its
    /// `task.assigned` event among them) is read. The create carries an idempotency key, so the
    /// REST client's retries make one task.
    pub(super) async fn create_and_start(
        &mut self,
        mut create: picogent_tracker::model::CreateTask,
        coding: Option<picogent_workspace::CodingChoice>,
    ) -> Result<String, CreateRefused> {
        if self.shutdown.is_cancelled() {
            return Err(CreateRefused::NotStarted { task_key: String::new(), refused: StartRefused::ShuttingDown });
        }
        create.assignee_slug = Some(self.config.slug.clone());
        let key = format!("start-run-{}", uuid::Uuid::new_v4().simple());
        let task = self.client.create_task(&create, Some(&key)).await?;
        tracing::info!(task = %task.key, "created a task for start_run");
        let session = SessionKey::Task(task.id.clone());
        let trigger = Trigger::StartRun { task_key: task.key.clone() };
        let task_key = task.key.clone();
        let assigned_by = task.created_by.clone();
        let kind = RunKind::Task { task: Box::new(task), assigned_by };
        let request = RunRequest { coding, ..RunRequest::new(session, trigger, kind) };
        self.start_or_queue(request).await.map_err(|refused| CreateRefused::NotStarted { task_key, refused })
    }

    /// Queues the run, after the daily budget allows it, and starts it now if a slot is free.
    pub(super) async fn start_or_queue(&mut self, request: RunRequest) -> Result<String, StartRefused> {
        self.enqueue(request, false).await
    }

    /// Queues `request` behind the runs its session has (a reconciled mention: a question of its
    /// own); it starts when they have ended and a slot is free.
    pub(super) async fn queue_behind(&mut self, request: RunRequest) -> Result<String, StartRefused> {
        self.enqueue(request, true).await
    }

    async fn enqueue(&mut self, request: RunRequest, behind: bool) -> Result<String, StartRefused> {
        if self.shutdown.is_cancelled() {
            return Err(StartRefused::ShuttingDown);
        }
        if !self.spend_allows(&request).await {
            return Err(StartRefused::DailyBudget);
        }
        let queued = QueuedRequest {
            kind: request.kind.clone(),
            trigger: Some(request.trigger.clone()),
            prompt: request.prompt.clone(),
            prompt_from: request.prompt_from.clone(),
            coding: request.coding.clone(),
        };
        let json = serde_json::to_string(&queued)
            .map_err(|error| StartRefused::State { cause: NotRecorded::Unstorable(Arc::new(error)) })?;
        let inputs: Vec<(String, Option<String>)> = request
            .steering
            .iter()
            .map(|input| (input.text.clone(), input.asked.as_ref().map(|asked| asked.message_id.clone())))
            .collect();
        let trigger = request.trigger.to_string();
        let run = QueuedRun {
            session_key: &request.session,
            trigger: &trigger,
            request: &json,
            claim: request.claim.as_ref().map(|(kind, key)| (*kind, key.as_str())),
            inputs: &inputs,
            behind,
        };
        match self.queue.enqueue(&run).await {
            Ok(Enqueued::Queued(id)) => {
                tracing::info!(run_id = %id, session = %request.session, "run queued");
                self.claim_and_spawn().await;
                Ok(id)
            }
            Ok(Enqueued::Busy(run_id)) => Err(StartRefused::Busy { session: request.session, run_id }),
            Ok(Enqueued::Handled) => Err(StartRefused::AlreadyHandled),
            Err(error) => {
                tracing::error!(%error, "cannot queue a run in the state database");
                Err(StartRefused::State { cause: NotRecorded::State(Arc::new(error)) })
            }
        }
    }

    /// A message to answer: steers the session's run wherever it runs, or queues a run for it
    /// (behind the session's runs, for a mention reconciliation found). Returns the metric's fate.
    pub(super) async fn route_message(
        &mut self,
        message: MessageOut,
        session: SessionKey,
        steering: Steering,
        reconciled: bool,
    ) -> MessageOutcome {
        const EVENT: EventName = EventName::MessageNew;
        let message_id = message.id.clone();
        let fate = match reconciled && self.session_busy(&session).await {
            true => match self.queue_behind(reply_request(&session, &message)).await {
                Ok(_) => Ok(()),
                Err(refused) => Err(Steered::Refused(refused)),
            },
            false => self.steer_or_queue(&session, &message, steering).await,
        };
        let fate = match fate {
            Ok(()) => MessageOutcome::Run,
            Err(Steered::Yes) => MessageOutcome::Steered,
            Err(Steered::Refused(StartRefused::AlreadyHandled)) => MessageOutcome::Duplicate,
            Err(Steered::Refused(refused)) => {
                tracing::info!(%refused, "the reply run was not started");
                self.tell_refused(&session, &refused, Some(&message_id)).await;
                MessageOutcome::Refused
            }
            Err(Steered::StateError) => {
                self.tell(&session, &Refusal::NotRecorded, Some(&message_id)).await;
                MessageOutcome::StateError
            }
        };
        self.metrics.event(EVENT, fate.as_str());
        fate
    }

    /// Hands the message to the session's run as steering (no budget is asked: no new run), or
    /// queues a run for it when the session has none; a run that ends between the two steps
    /// refuses the input, and then the message gets a run of its own.
    async fn steer_or_queue(
        &mut self,
        session: &SessionKey,
        message: &MessageOut,
        steering: Steering,
    ) -> Result<(), Steered> {
        let mut busy = match self.active.get(session) {
            Some(run) => Some(run.run_id.clone()),
            None => match self.queue.active_run(session).await {
                Ok(run) => run.map(|(run_id, _)| run_id),
                Err(error) => {
                    tracing::error!(%error, "cannot read the session's runs");
                    return Err(Steered::StateError);
                }
            },
        };
        for _ in 0..STEER_ATTEMPTS {
            if let Some(run_id) = busy.take() {
                match self.send_steering(&run_id, steering.clone(), Some(&message.id)).await {
                    Ok(true) => return Err(Steered::Yes),
                    Ok(false) => {}
                    Err(error) => {
                        tracing::error!(%error, "cannot steer a run through the state database");
                        return Err(Steered::StateError);
                    }
                }
            }
            match self.start_or_queue(reply_request(session, message)).await {
                Ok(_) => return Ok(()),
                Err(StartRefused::Busy { run_id, .. }) => busy = Some(run_id),
                Err(refused) => return Err(Steered::Refused(refused)),
            }
        }
        Err(Steered::Refused(StartRefused::State { cause: NotRecorded::KeptEnding }))
    }

    /// Sends `steering` to the run `run_id` through the queue (claiming its message with it), and
    /// hands it over at once when the run is this process's. `false` when the run has ended.
    async fn send_steering(
        &mut self,
        run_id: &str,
        steering: Steering,
        message_id: Option<&str>,
    ) -> Result<bool, picogent_state::StateError> {
        let Some(n) = self.queue.send_input(run_id, InputKind::Steer, &steering.text, message_id).await? else {
            return Ok(false);
        };
        match self.active.values_mut().find(|run| run.run_id == run_id) {
            // Nothing in between from elsewhere: this is the next input; no need to read it back.
            Some(run) if run.inputs_seen + 1 == n => {
                run.inputs_seen = n;
                let _ = run.steer.send(steering);
            }
            Some(_) => self.forward_inputs().await,
            // Queued, or running on another replica: it is handed over where it starts or runs.
            None => {}
        }
        Ok(true)
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
        self.metrics.event(EventName::Run, EventFate::SpendGuard.as_str());
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

    /// The one notice of the run `run_id`, posted where it was asked once its claim is taken.
    /// Whether this call took the claim (and posted, or tried to).
    pub(super) async fn run_notice(&self, kind: &RunKind, run_id: &str, text: &str) -> bool {
        let claimed = self.claim(ClaimKind::RunNotice, run_id).await;
        if claimed {
            self.post_notice(kind, text, &format!("notice-{run_id}")).await;
        }
        claimed
    }

    /// Claims queued runs (and runs whose holder is gone) while slots are free, and starts them.
    pub(super) async fn claim_and_spawn(&mut self) {
        // A run waiting for a person holds no slot (`waits`).
        let free = self.services.slots.free();
        if free == 0 || self.shutdown.is_cancelled() {
            self.publish_waiting().await;
            return;
        }
        let claimed = match self.queue.claim_runs(free, self.setup.run_lease).await {
            Ok(claimed) => {
                self.setup.outage.answered();
                claimed
            }
            Err(error) => {
                self.setup.outage.failed("cannot claim queued runs", &error);
                return;
            }
        };
        for run in claimed {
            self.start_claimed(run).await;
        }
        self.publish_waiting().await;
    }

    /// Starts a run this process just claimed, with what was sent to it while it waited.
    async fn start_claimed(&mut self, run: ClaimedRun) {
        let inputs = self.queue.inputs(std::slice::from_ref(&run.id)).await.unwrap_or_default();
        let mut request = match self.request_of(&run).await {
            Ok(request) => request,
            Err(NotRunnable::Gone(reason)) => {
                tracing::info!(run_id = %run.id, %reason, "a claimed run cannot run; closing it");
                let _ = self.queue.drop_claimed(&run.id, &reason).await;
                return;
            }
            Err(NotRunnable::Later(reason)) => {
                tracing::warn!(run_id = %run.id, %reason, "a claimed run cannot start yet; handing it back");
                let _ = self.queue.hand_back(&run.id).await;
                return;
            }
        };
        let steering: Vec<_> = inputs.iter().filter(|input| input.kind == InputKind::Steer).collect();
        request.steering_message_ids = steering.iter().filter_map(|input| input.message_id.clone()).collect();
        for input in steering {
            let steered = self.steering_of(input.text.clone(), input.message_id.clone()).await;
            request.steering.push(steered);
        }
        if run.attempts > 1 {
            tracing::info!(run_id = %run.id, attempts = run.attempts, "resuming a run cut short");
        }
        let session = request.session.clone();
        self.spawn_run(run.id.clone(), request).await;
        if let Some(active) = self.active.get_mut(&session) {
            active.inputs_seen = inputs.iter().map(|input| input.n).max().unwrap_or(0);
        }
        // A stop sent while it was queued or on its way here.
        if let Some(stop) = inputs.iter().rev().find(|input| input.kind == InputKind::Stop) {
            self.stop(&session, &stop.text).await;
        }
    }

    /// The request a claimed run was queued with, its trigger as it was; for a run resumed after
    /// its holder stopped, its task read afresh (it may have been unassigned meanwhile). A run
    /// whose stored request cannot be read is `Gone`; one whose trigger cannot be read still runs,
    /// its trigger told by what it is for. Open to the crate for its tests, which claim a run
    /// themselves.
    pub(crate) async fn request_of(&self, run: &ClaimedRun) -> Result<RunRequest, NotRunnable> {
        let session = run.session_key.clone().map_err(|unknown| NotRunnable::Gone(unknown.to_string()))?;
        let mut queued = match run.request.as_deref() {
            Some(json) => Some(
                serde_json::from_str::<QueuedRequest>(json)
                    .map_err(|error| NotRunnable::Gone(format!("its stored request is unreadable: {error}")))?,
            ),
            None => None,
        };
        let kept = queued.as_mut().and_then(|queued| queued.trigger.take());
        let coding = queued.as_ref().and_then(|queued| queued.coding.clone());
        let (kind, prompt, prompt_from) = match queued {
            Some(QueuedRequest { kind: RunKind::Prompt { .. }, .. }) if run.attempts > 1 => {
                // Its prompt came from a client that is gone; nobody waits for the answer.
                return Err(NotRunnable::Gone("a prompt run is not resumed after a restart".to_string()));
            }
            Some(QueuedRequest { kind: RunKind::Task { .. }, prompt, prompt_from, .. }) if run.attempts > 1 => {
                (self.resumable_kind(&session).await?, prompt, prompt_from)
            }
            Some(QueuedRequest { kind, prompt, prompt_from, .. }) => (kind, prompt, prompt_from),
            None => (self.resumable_kind(&session).await?, None, None),
        };
        // A run queued before its request kept the trigger, or started before the queue: its
        // text; a text no version wrote is only a label, so the run is not lost for it.
        let trigger = match kept {
            Some(trigger) => trigger,
            None => run.trigger.parse::<Trigger>().unwrap_or_else(|error| {
                tracing::warn!(run_id = %run.id, %error, "a claimed run's trigger is unreadable; told by its kind");
                trigger_of(&kind)
            }),
        };
        Ok(RunRequest {
            resume_run_id: Some(run.id.clone()),
            prompt,
            prompt_from,
            coding,
            ..RunRequest::new(session, trigger, kind)
        })
    }

    /// What a resumed run of `session` is for, read afresh from the tracker: `Gone` when it is not
    /// to be resumed (the task is no longer the agent's, or nobody waits for it), `Later` when
    /// the tracker did not answer.
    async fn resumable_kind(&self, session: &SessionKey) -> Result<RunKind, NotRunnable> {
        let later = |error: picogent_tracker::TrackerError| NotRunnable::Later(error.to_string());
        match session {
            SessionKey::Task(task_id) => {
                let task = self.client.get_task(task_id).await.map_err(later)?;
                if task.assignee_slug.as_deref() == Some(self.config.slug.as_str()) {
                    Ok(RunKind::Task { assigned_by: task.created_by.clone(), task: Box::new(task) })
                } else {
                    Err(NotRunnable::Gone("task no longer assigned to the agent".to_string()))
                }
            }
            SessionKey::Prompt(_) => Err(NotRunnable::Gone("a prompt run is not resumed after a restart".to_string())),
            // A firing's run always carries its request; one without is of no firing this
            // version made.
            SessionKey::Schedule(_) => Err(NotRunnable::Gone("a scheduled run without its firing".to_string())),
            SessionKey::Thread(root) => {
                Ok(RunKind::Message { message: Box::new(self.client.get_message(root).await.map_err(later)?) })
            }
        }
    }

    /// Spawns the run `run_id`, claimed from the queue.
    async fn spawn_run(&mut self, run_id: String, mut request: RunRequest) {
        // Not a child of the shutdown token: a shutdown lets running runs finish within the grace
        // period, and only then cancels what is left (see `drain`).
        let cancel = CancellationToken::new();
        let (steer_tx, steer_rx) = mpsc::unbounded_channel();
        request.asker = self.asker_of_run(&request).await;
        for input in request.steering.drain(..) {
            let _ = steer_tx.send(input);
        }
        self.services.slots.hold(&run_id);
        self.active.insert(request.session.clone(), ActiveRun::new(run_id.clone(), cancel.clone(), steer_tx));
        self.status.set_active_runs(self.active.len());
        let services = self.services.clone();
        let inputs = self.inputs.clone();
        let span = tracing::info_span!("run", run_id = %run_id, session = %request.session);
        tokio::spawn(tracing::Instrument::instrument(
            async move {
                let done = crate::run::execute(services, run_id, request, cancel, steer_rx).await;
                let _ = inputs.send(Input::RunDone(Box::new(done))).await;
            },
            span,
        ));
    }

    pub(super) async fn finish(&mut self, done: RunDone) {
        self.services.slots.release(&done.run_id);
        let (stop_reason, lost) = match self.active.get(&done.session) {
            Some(active) if active.run_id == done.run_id => match self.active.remove(&done.session) {
                Some(active) => (active.stop_reason, active.lost),
                None => (None, false),
            },
            _ => (None, false),
        };
        self.status.set_active_runs(self.active.len());
        if lost {
            // Another replica runs it now: its end, notice and follow-up are that replica's.
            self.claim_and_spawn().await;
            return;
        }
        // What was sent, read after the run's end was written: nothing more can join it now.
        let leftover = self.leftover_of(&done.run_id, done.steering_consumed).await;
        self.metrics.run_finished(done.status, done.duration);
        let text = match (done.status, stop_reason) {
            (RunStatus::Stopped, Some(reason)) => Some(picogent_notices::run::stopped(&reason)),
            (RunStatus::Failed | RunStatus::DidNothing, _) => done.notice.clone(),
            // Completed; or cut short by the shutdown, and it resumes at the next start.
            _ => None,
        };
        if let Some(text) = text
            && self.run_notice(&done.kind, &done.run_id, &text).await
            && matches!(done.status, RunStatus::Failed | RunStatus::DidNothing)
        {
            self.tell_parent_of_failure(&done.kind, &done.run_id, &text).await;
        }
        // Input that arrived after the run's last turn boundary starts a follow-up run.
        if !leftover.is_empty() && done.status == RunStatus::Completed {
            self.follow_up(&done, leftover).await;
        }
        self.claim_and_spawn().await;
    }

    /// Queues a follow-up of the run `done` whose prompt is the first input it did not take in,
    /// or hands the inputs to the session's run if one started meanwhile.
    async fn follow_up(&mut self, done: &RunDone, leftover: Vec<Steering>) {
        let trigger = Trigger::FollowUp { run_id: done.run_id.clone() };
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
            // A run of the session started meanwhile (elsewhere, or queued behind): it takes the input.
            Err(StartRefused::Busy { run_id, .. }) => {
                for input in inputs {
                    let message_id = input.asked.as_ref().map(|asked| asked.message_id.clone());
                    if let Err(error) = self.send_steering(&run_id, input, message_id.as_deref()).await {
                        tracing::error!(%error, %run_id, "cannot hand input to the session's run");
                    }
                }
            }
            Err(refused) => {
                tracing::warn!(%refused, session = %done.session, "the follow-up run was not started");
                self.tell_refused(&done.session, &refused, asked.as_deref()).await;
            }
        }
    }

    /// What the run `run_id` was sent and did not take in, after `consumed` inputs: the prompt
    /// and steering of its follow-up run.
    async fn leftover_of(&mut self, run_id: &str, consumed: usize) -> Vec<Steering> {
        let inputs = match self.queue.inputs(&[run_id.to_string()]).await {
            Ok(inputs) => inputs,
            Err(error) => {
                tracing::error!(%error, run_id, "cannot read what the run was sent; a follow-up may be missing");
                return Vec::new();
            }
        };
        let mut leftover = Vec::new();
        for input in inputs.into_iter().filter(|input| input.kind == InputKind::Steer).skip(consumed) {
            leftover.push(self.steering_of(input.text, input.message_id).await);
        }
        leftover
    }

    /// Shows the runs waiting in the queue (the run inspector lists them as queued).
    pub(super) async fn publish_waiting(&self) {
        match self.queue.queued().await {
            Ok(queued) => self.status.set_waiting(
                queued
                    .into_iter()
                    .map(|run| crate::status::WaitingRun { session: run.session_key, trigger: run.trigger })
                    .collect(),
            ),
            Err(error) => tracing::debug!(%error, "cannot read the queued runs"),
        }
    }

    /// Posts a short notice where the run was asked for: a comment on the task, a reply in the
    /// thread, or for a scheduled job's run its project's chat (where it would have posted). The
    /// idempotency key makes a retried post land once.
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
            RunKind::Schedule { firing } => match firing.chat() {
                Some(project) => SendMessage {
                    // Named as the job's: the chat holds more than this job's posts.
                    content: format!("Scheduled `{}`: {text}", firing.job),
                    chat_id: Some(project.chat_id.clone()),
                    ..SendMessage::default()
                },
                None => return,
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
}

/// What became of a message that did not get a run of its own.
enum Steered {
    /// It was handed to the session's run.
    Yes,
    Refused(StartRefused),
    /// The state database did not take it.
    StateError,
}

impl ActiveRun {
    fn new(run_id: String, cancel: CancellationToken, steer: mpsc::UnboundedSender<Steering>) -> ActiveRun {
        ActiveRun { run_id, cancel, steer, stop_reason: None, inputs_seen: 0, lost: false }
    }
}

/// The run that answers `message` in `session`, claiming it.
fn reply_request(session: &SessionKey, message: &MessageOut) -> RunRequest {
    RunRequest {
        claim: Some((ClaimKind::Message, message.id.clone())),
        ..RunRequest::new(
            session.clone(),
            Trigger::Message { message_id: message.id.clone() },
            RunKind::Message { message: Box::new(message.clone()) },
        )
    }
}

/// The message a run of `kind` answers, if it answers one.
fn answered_message(kind: &RunKind) -> Option<&str> {
    match kind {
        RunKind::Message { message } => Some(&message.id),
        RunKind::Task { .. } | RunKind::Prompt { .. } | RunKind::Schedule { .. } => None,
    }
}
