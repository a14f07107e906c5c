//! The router of a replica (`replicas.enabled`): runs go through the queue in the database
//! instead of this process's own queue, so any replica with a free slot runs them.
//!
//! Every replica runs a router. The one holding the event stream decides, as a single copy does,
//! what each event asks for, and queues the run (`state/queue.rs`: one run per session across
//! replicas, claimed with the thing it is for). Every router, on each tick (`replicas.poll_ms`):
//! renews the leases of the runs it holds, and cancels any another replica took over; hands its
//! runs the inputs sent to them (steering, stop) from wherever they were heard; claims queued
//! runs, and runs whose replica died, while it has free slots (`limits.max_concurrent_runs`);
//! and beats its heartbeat. A run's end is heard by the router that ran it: it posts the notice
//! (claimed by run id, so once), and queues what the run did not take in as a follow-up run.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::runs::{StartRefused, Started};
use super::{ActiveRun, Router};
use crate::guard::{Asked, Steering};
use crate::refusal::Refusal;
use crate::request::{RunKind, RunRequest};
use picogent_state::{Beat, ClaimKind, ClaimedRun, Enqueued, InputKind, Outage, QueuedRun, Replicas};
use picogent_tracker::model::MessageOut;
use picogent_tracker::session::SessionKey;

/// What a router needs to be a replica's.
pub struct ReplicaRouter {
    pub queue: Replicas,
    pub run_lease: Duration,
    pub poll: Duration,
    pub host: String,
    pub http: Option<String>,
    pub started_at_ms: i64,
    /// The state database's answers to this router's polls: one warning per outage.
    pub outage: Outage,
}

/// A queued run's request as the database keeps it (the session and trigger have columns).
#[derive(Debug, Serialize, Deserialize)]
struct QueuedRequest {
    kind: RunKind,
    prompt: Option<String>,
    /// The message `prompt` came from (a follow-up's); absent in requests queued before it was kept.
    #[serde(default)]
    prompt_from: Option<Asked>,
}

/// Why a claimed run cannot be run.
enum NotRunnable {
    /// Never: closed as `interrupted` with this reason.
    Gone(String),
    /// Not now (the tracker did not answer): handed back to the queue.
    Later(String),
}

/// How long another replica's heartbeat counts as recent in `/readyz`.
fn recent(poll: Duration) -> Duration {
    (poll * 10).max(Duration::from_secs(5))
}

impl Router {
    fn queue(&self) -> Option<&Replicas> {
        self.replicas.as_ref().map(|replicas| &replicas.queue)
    }

    /// Queues `request` in the database; a free slot here takes it at once.
    pub(super) async fn enqueue(&mut self, request: RunRequest) -> Result<Started, StartRefused> {
        let Some(queue) = self.queue().cloned() else { return Err(StartRefused::ShuttingDown) };
        let state_error = |error: &dyn std::fmt::Display| StartRefused::State { message: error.to_string() };
        let queued = QueuedRequest {
            kind: request.kind.clone(),
            prompt: request.prompt.clone(),
            prompt_from: request.prompt_from.clone(),
        };
        let json = serde_json::to_string(&queued).map_err(|error| state_error(&error))?;
        let inputs: Vec<(String, Option<String>)> = request
            .steering
            .iter()
            .map(|input| (input.text.clone(), input.asked.as_ref().map(|asked| asked.message_id.clone())))
            .collect();
        let session_key = request.session.as_string();
        let run = QueuedRun {
            session_key: &session_key,
            trigger: &request.trigger,
            request: &json,
            claim: request.claim.as_ref().map(|(kind, key)| (kind.as_str(), key.as_str())),
            inputs: &inputs,
        };
        let enqueued = queue.enqueue(&run).await;
        if let Some((_, key)) = &request.claim {
            self.accepted_messages.remove(key);
        }
        match enqueued {
            Ok(Enqueued::Queued(id)) => {
                tracing::info!(run_id = %id, session = %request.session, "run queued");
                self.claim_and_spawn().await;
                Ok(Started::Enqueued(id))
            }
            Ok(Enqueued::Busy(run_id)) => Err(StartRefused::Busy { session: request.session, run_id }),
            Ok(Enqueued::Handled) => Err(StartRefused::AlreadyHandled),
            Err(error) => {
                tracing::error!(%error, "cannot queue a run in the state database");
                Err(state_error(&error))
            }
        }
    }

    /// A message to answer, on a replica: steers the session's run wherever it runs, or queues a
    /// run for it. Returns the metric's fate.
    pub(super) async fn route_message(
        &mut self,
        message: MessageOut,
        session: SessionKey,
        steering: Steering,
    ) -> &'static str {
        const EVENT: &str = "message.new";
        let Some(queue) = self.queue().cloned() else { return "refused" };
        let message_id = message.id.clone();
        let request_for = |message: &MessageOut| RunRequest {
            claim: Some((ClaimKind::Message, message.id.clone())),
            ..RunRequest::new(
                session.clone(),
                format!("message.new {}", message.id),
                RunKind::Message { message: Box::new(message.clone()) },
            )
        };
        let busy = queue.active_run(&session.as_string()).await.ok().flatten();
        if busy.is_none() && !self.spend_allows(&request_for(&message)).await {
            return "refused";
        }
        // A run that ends between the two steps refuses the input; then the message gets a run.
        for _ in 0..3 {
            match self.enqueue(request_for(&message)).await {
                Ok(_) => {
                    self.metrics.event(EVENT, "run");
                    return "run";
                }
                Err(StartRefused::AlreadyHandled) => {
                    self.metrics.event(EVENT, "duplicate");
                    return "duplicate";
                }
                Err(StartRefused::Busy { run_id, .. }) => {
                    match queue.send_input(&run_id, InputKind::Steer, &steering.text, Some(&message_id)).await {
                        Ok(true) => {
                            self.metrics.event(EVENT, "steered");
                            return "steered";
                        }
                        Ok(false) => continue,
                        Err(error) => {
                            tracing::error!(%error, "cannot steer a run through the state database");
                            self.tell(&session, &Refusal::NotRecorded, Some(&message_id)).await;
                            return "state_error";
                        }
                    }
                }
                Err(refused) => {
                    tracing::info!(%refused, "the reply run was not started");
                    self.tell_refused(&session, &refused, Some(&message_id)).await;
                    return "refused";
                }
            }
        }
        "refused"
    }

    /// Whether the session has a run queued or running on any replica.
    pub(super) async fn busy_anywhere(&self, session: &SessionKey) -> bool {
        let Some(queue) = self.queue() else { return false };
        // Unknown counts as busy: a second run would be worse than a late one.
        queue.active_run(&session.as_string()).await.map(|run| run.is_some()).unwrap_or(true)
    }

    /// Stops the session's run on whichever replica holds it (this one's are stopped at once).
    pub(super) async fn stop_anywhere(&self, session: &SessionKey, reason: &str) -> bool {
        let Some(queue) = self.queue() else { return false };
        let Ok(Some((run_id, status))) = queue.active_run(&session.as_string()).await else { return false };
        self.stop_run_anywhere(&run_id, &status, reason).await
    }

    /// Stops the run `run_id`, queued or running elsewhere.
    pub(super) async fn stop_run_anywhere(&self, run_id: &str, status: &str, reason: &str) -> bool {
        let Some(queue) = self.queue() else { return false };
        if status == "queued"
            && let Ok(Some(request)) = queue.stop_queued(run_id, reason).await
        {
            tracing::info!(run_id, reason, "stopped a queued run");
            // Said once where it was asked, as for a run stopped while it ran.
            if let Ok(QueuedRequest { kind, .. }) = serde_json::from_str(&request) {
                self.run_notice(&kind, run_id, &super::runs::stopped_before_start(reason)).await;
            }
            return true;
        }
        match queue.send_input(run_id, InputKind::Stop, reason, None).await {
            Ok(sent) => sent,
            Err(error) => {
                tracing::error!(%error, run_id, "cannot send a stop through the state database");
                false
            }
        }
    }

    /// One tick of a replica: leases, inputs, new runs, heartbeat.
    pub(super) async fn on_tick(&mut self) {
        if self.replicas.is_none() {
            return;
        }
        if !self.renew_run_leases().await {
            // The database did not answer: the rest of the tick would only fail the same way.
            return;
        }
        self.forward_inputs().await;
        if !self.shutdown.is_cancelled() {
            self.claim_and_spawn().await;
        }
        self.beat().await;
    }

    /// Renews this replica's runs' leases and stops the runs another replica took over. Returns
    /// `false` when the database did not answer.
    async fn renew_run_leases(&mut self) -> bool {
        let Some(replicas) = &mut self.replicas else { return true };
        let ids: Vec<String> = self.active.values().filter(|run| !run.lost).map(|run| run.run_id.clone()).collect();
        if ids.is_empty() {
            return true;
        }
        let held = match replicas.queue.renew_runs(&ids, replicas.run_lease).await {
            Ok(held) => {
                replicas.outage.answered();
                held
            }
            Err(error) => {
                replicas.outage.failed("cannot renew the leases of this replica's runs", &error);
                return false;
            }
        };
        for run in self.active.values_mut().filter(|run| !run.lost && !held.contains(&run.run_id)) {
            tracing::warn!(run_id = %run.run_id, "another replica took this run over; stopping it here");
            run.lost = true;
            run.cancel.cancel();
        }
        true
    }

    /// Hands this replica's runs what was sent to them since the last tick.
    async fn forward_inputs(&mut self) {
        let Some(replicas) = &mut self.replicas else { return };
        let ids: Vec<String> = self.active.values().filter(|run| !run.lost).map(|run| run.run_id.clone()).collect();
        let inputs = match replicas.queue.inputs(&ids).await {
            Ok(inputs) => inputs,
            Err(error) => {
                replicas.outage.failed("cannot read the inputs of this replica's runs", &error);
                return;
            }
        };
        let mut stops = Vec::new();
        for input in inputs {
            let Some(seen) = self.active.values().find(|run| run.run_id == input.run_id).map(|run| run.inputs_seen)
            else {
                continue;
            };
            if input.n <= seen {
                continue;
            }
            let steering = match input.kind {
                InputKind::Steer => Some(self.steering_of(input.text.clone(), input.message_id.clone()).await),
                InputKind::Stop => None,
            };
            let Some((session, run)) = self.active.iter_mut().find(|(_, run)| run.run_id == input.run_id) else {
                continue;
            };
            run.inputs_seen = input.n;
            match steering {
                Some(steering) => {
                    let _ = run.steer.send(steering.clone());
                    run.steered.push(steering);
                }
                None => stops.push((session.clone(), input.text)),
            }
        }
        for (session, reason) in stops {
            self.stop(&session, &reason).await;
        }
    }

    /// A steering input read from the database, with who asked it: the author of its message,
    /// read afresh from the tracker (`None` asks nothing of anyone).
    async fn steering_of(&mut self, text: String, message_id: Option<String>) -> Steering {
        let Some(message_id) = message_id else { return Steering { text, asked: None } };
        let author = self.client.get_message(&message_id).await.ok().map(|message| message.author_slug);
        let kind = match author {
            Some(author) => self.member_kind(&author).await,
            None => None,
        };
        Steering { text, asked: Some(Asked { message_id, asker: super::asker_of(kind) }) }
    }

    /// Claims queued runs (and runs whose replica died) while slots are free, and starts them.
    pub(super) async fn claim_and_spawn(&mut self) {
        let free = (self.config.limits.max_concurrent_runs as usize).saturating_sub(self.active.len());
        let Some(replicas) = &mut self.replicas else { return };
        if free == 0 || self.shutdown.is_cancelled() {
            return;
        }
        let queue = replicas.queue.clone();
        let claimed = match queue.claim_runs(free, replicas.run_lease).await {
            Ok(claimed) => {
                replicas.outage.answered();
                claimed
            }
            Err(error) => {
                replicas.outage.failed("cannot claim queued runs", &error);
                return;
            }
        };
        for run in claimed {
            let inputs = queue.inputs(std::slice::from_ref(&run.id)).await.unwrap_or_default();
            match self.request_of(&run).await {
                Ok(mut request) => {
                    let steering: Vec<_> = inputs.iter().filter(|input| input.kind == InputKind::Steer).collect();
                    request.steering_message_ids =
                        steering.iter().filter_map(|input| input.message_id.clone()).collect();
                    for input in steering {
                        let steered = self.steering_of(input.text.clone(), input.message_id.clone()).await;
                        request.steering.push(steered);
                    }
                    if run.attempts > 1 {
                        tracing::info!(run_id = %run.id, attempts = run.attempts, "resuming a run another replica left");
                    }
                    let session = request.session.clone();
                    if let Err(refused) = self.spawn_run(request).await {
                        tracing::warn!(%refused, run_id = %run.id, "a claimed run was not started");
                        continue;
                    }
                    if let Some(active) = self.active.get_mut(&session) {
                        active.inputs_seen = inputs.iter().map(|input| input.n).max().unwrap_or(0);
                    }
                    // A stop sent while it was queued or on its way here.
                    if let Some(stop) = inputs.iter().rev().find(|input| input.kind == InputKind::Stop) {
                        self.stop(&session, &stop.text).await;
                    }
                }
                Err(NotRunnable::Gone(reason)) => {
                    tracing::info!(run_id = %run.id, %reason, "a claimed run cannot run; closing it");
                    let _ = queue.drop_claimed(&run.id, &reason).await;
                }
                Err(NotRunnable::Later(reason)) => {
                    tracing::warn!(run_id = %run.id, %reason, "a claimed run cannot start yet; handing it back");
                    let _ = queue.hand_back(&run.id).await;
                }
            }
        }
    }

    /// The request a claimed run was queued with; for a run resumed after its replica died, its
    /// task read afresh (it may have been unassigned meanwhile).
    async fn request_of(&self, run: &ClaimedRun) -> Result<RunRequest, NotRunnable> {
        let session = SessionKey::parse(&run.session_key)
            .ok_or_else(|| NotRunnable::Gone(format!("unknown session key {}", run.session_key)))?;
        let queued = match run.request.as_deref() {
            Some(json) => Some(
                serde_json::from_str::<QueuedRequest>(json)
                    .map_err(|error| NotRunnable::Gone(format!("its stored request is unreadable: {error}")))?,
            ),
            None => None,
        };
        let (kind, prompt, prompt_from) = match queued {
            Some(QueuedRequest { kind: RunKind::Prompt { .. }, .. }) if run.attempts > 1 => {
                return Err(NotRunnable::Gone("a prompt run is not resumed after its replica stopped".to_string()));
            }
            Some(QueuedRequest { kind: RunKind::Task { .. }, prompt, prompt_from }) if run.attempts > 1 => {
                (self.resumable_kind(&session).await?, prompt, prompt_from)
            }
            Some(QueuedRequest { kind, prompt, prompt_from }) => (kind, prompt, prompt_from),
            None => (self.resumable_kind(&session).await?, None, None),
        };
        Ok(RunRequest {
            resume_run_id: Some(run.id.clone()),
            prompt,
            prompt_from,
            ..RunRequest::new(session, run.trigger.clone(), kind)
        })
    }

    async fn resumable_kind(&self, session: &SessionKey) -> Result<RunKind, NotRunnable> {
        match self.resume_kind(session).await {
            Ok(Ok(kind)) => Ok(kind),
            Ok(Err(reason)) => Err(NotRunnable::Gone(reason.to_string())),
            Err(error) => Err(NotRunnable::Later(error.to_string())),
        }
    }

    /// What the run `run_id` was sent and did not take in, after `consumed` inputs: the prompt
    /// and steering of its follow-up run.
    pub(super) async fn leftover_of(&mut self, run_id: &str, consumed: usize) -> Vec<Steering> {
        let Some(queue) = self.queue().cloned() else { return Vec::new() };
        let inputs = match queue.inputs(&[run_id.to_string()]).await {
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

    /// Sends `inputs` to the run `run_id` (a follow-up met a run of the same session).
    pub(super) async fn send_all(&self, run_id: &str, inputs: Vec<Steering>) {
        let Some(queue) = self.queue() else { return };
        for input in inputs {
            let message_id = input.asked.as_ref().map(|asked| asked.message_id.as_str());
            if let Err(error) = queue.send_input(run_id, InputKind::Steer, &input.text, message_id).await {
                tracing::error!(%error, run_id, "cannot hand input to the session's run");
            }
        }
    }

    async fn beat(&mut self) {
        let holds_stream = self.status.holds_stream();
        let runs = self.active.len() as i64;
        let Some(replicas) = &mut self.replicas else { return };
        let beat = Beat {
            host: &replicas.host,
            http: replicas.http.as_deref(),
            started_at_ms: replicas.started_at_ms,
            holds_stream,
            runs,
            slots: i64::from(self.config.limits.max_concurrent_runs),
        };
        if let Err(error) = replicas.queue.beat(&beat).await {
            replicas.outage.failed("cannot record this replica's heartbeat", &error);
            return;
        }
        match replicas.queue.others(recent(replicas.poll)).await {
            Ok(others) => {
                replicas.outage.answered();
                self.status.set_replica_peers(others);
            }
            Err(error) => replicas.outage.failed("cannot read the other replicas' heartbeats", &error),
        }
    }

    /// At the end of a shutdown: runs still here go back to the queue for another replica to
    /// resume at once, and this replica's heartbeat goes.
    pub(super) async fn leave(&self) {
        let Some(queue) = self.queue() else { return };
        match queue.release_runs().await {
            Ok(0) => {}
            Ok(released) => tracing::info!(released, "handed this replica's unfinished runs to the other replicas"),
            Err(error) => {
                tracing::warn!(%error, "cannot hand unfinished runs over; they resume when their leases run out")
            }
        }
        let _ = queue.leave().await;
    }
}

impl ActiveRun {
    pub(super) fn new(
        run_id: String,
        cancel: tokio_util::sync::CancellationToken,
        steer: tokio::sync::mpsc::UnboundedSender<Steering>,
        steered: Vec<Steering>,
    ) -> ActiveRun {
        ActiveRun { run_id, cancel, steer, steered, stop_reason: None, inputs_seen: 0, lost: false }
    }
}
