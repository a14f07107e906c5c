//! How the router uses the run queue over time, for a single copy and for replicas alike: the
//! runs' leases, the inputs sent to its runs from elsewhere, and its heartbeat.
//!
//! Every process runs a router. The one holding the event stream decides what each event asks
//! for, and queues the run (`picogent_state::RunQueue`: one run per session, claimed with the
//! thing it is for). A router claims queued runs, and runs whose holder is gone, while it has
//! free slots (`limits.max_concurrent_runs`): when it queues one, when one of its runs ends, at
//! its start, and on each tick. Only a queue that other processes share is polled
//! ([`QueueSetup::poll`], `replicas.poll_ms`): each tick renews the leases of the runs it
//! holds and cancels any another replica took over, hands its runs the inputs sent to them
//! (steering, stop) from wherever they were heard, claims, and beats its heartbeat. A run's end is
//! heard by the router that ran it: it posts the notice (claimed by run id, so once), and
//! queues what the run did not take in as a follow-up run.

use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::Router;
use crate::guard::{Asked, Steering};
use crate::request::{RunKind, Trigger};
use picogent_state::{Beat, InputKind, Outage};

/// How this process uses the run queue; chosen where the agent is assembled.
pub struct QueueSetup {
    /// How long a claimed run's lease lasts without a renewal.
    pub run_lease: Duration,
    /// How often to poll the queue; `None` when no other process shares it (a single copy hears
    /// everything that reaches its runs through its own router).
    pub poll: Option<Duration>,
    pub host: String,
    pub http: Option<String>,
    pub started_at_ms: i64,
    /// The state database's answers to this router's polls: one warning per outage.
    pub outage: Outage,
}

/// A queued run's request as the database keeps it (the session has a column; the trigger's
/// text has one too, for the people and tools that read it).
#[derive(Debug, Serialize, Deserialize)]
pub(super) struct QueuedRequest {
    pub kind: RunKind,
    /// What started it, as it was; absent in requests queued before it was kept, whose trigger is
    /// read back from its text.
    #[serde(default)]
    pub trigger: Option<Trigger>,
    pub prompt: Option<String>,
    /// The message `prompt` came from (a follow-up's); absent in requests queued before it was kept.
    #[serde(default)]
    pub prompt_from: Option<Asked>,
    /// The coding agent and branch `start_run` asked for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coding: Option<picogent_workspace::CodingChoice>,
}

/// Why a claimed run cannot be run.
#[derive(Debug)]
pub(crate) enum NotRunnable {
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
    /// One tick: leases, inputs, new runs, heartbeat.
    pub(super) async fn on_tick(&mut self) {
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
        let ids: Vec<String> = self.active.values().filter(|run| !run.lost).map(|run| run.run_id.clone()).collect();
        if ids.is_empty() {
            return true;
        }
        let held = match self.queue.renew_runs(&ids, self.setup.run_lease).await {
            Ok(held) => {
                self.setup.outage.answered();
                held
            }
            Err(error) => {
                self.setup.outage.failed("cannot renew the leases of this replica's runs", &error);
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

    /// Hands this process's runs what was sent to them and not handed over yet.
    pub(super) async fn forward_inputs(&mut self) {
        let ids: Vec<String> = self.active.values().filter(|run| !run.lost).map(|run| run.run_id.clone()).collect();
        if ids.is_empty() {
            return;
        }
        let inputs = match self.queue.inputs(&ids).await {
            Ok(inputs) => inputs,
            Err(error) => {
                self.setup.outage.failed("cannot read the inputs of this replica's runs", &error);
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
                    let _ = run.steer.send(steering);
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
    pub(super) async fn steering_of(&mut self, text: String, message_id: Option<String>) -> Steering {
        let Some(message_id) = message_id else { return Steering { text, asked: None } };
        let author = self.client.get_message(&message_id).await.ok().map(|message| message.author_slug);
        let kind = match author {
            Some(author) => self.member_kind(&author).await,
            None => None,
        };
        Steering { text, asked: Some(Asked { message_id, asker: super::asker_of(kind) }) }
    }

    async fn beat(&mut self) {
        let holds_stream = self.status.holds_stream();
        let runs = self.active.len() as i64;
        let setup = &mut self.setup;
        let beat = Beat {
            host: &setup.host,
            http: setup.http.as_deref(),
            started_at_ms: setup.started_at_ms,
            holds_stream,
            runs,
            slots: i64::from(self.config.limits.max_concurrent_runs),
        };
        if let Err(error) = self.queue.beat(&beat).await {
            setup.outage.failed("cannot record this replica's heartbeat", &error);
            return;
        }
        let poll = setup.poll.unwrap_or_default();
        match self.queue.others(recent(poll)).await {
            Ok(others) => {
                setup.outage.answered();
                self.status.set_replica_peers(others);
            }
            Err(error) => setup.outage.failed("cannot read the other replicas' heartbeats", &error),
        }
    }

    /// At the end of a shutdown: runs still here go back to the queue, for another replica to
    /// resume at once (or this copy at its next start), and this process's heartbeat goes.
    pub(super) async fn leave(&self) {
        let queue = &self.queue;
        match queue.release_runs().await {
            Ok(0) => {}
            Ok(released) => tracing::info!(released, "let this process's unfinished runs go, to be resumed"),
            Err(error) => {
                tracing::warn!(%error, "cannot hand unfinished runs over; they resume when their leases run out")
            }
        }
        let _ = queue.leave().await;
    }
}
