//! Replicas of one agent on one PostgreSQL state (`replicas.enabled`): the event stream goes to
//! whichever replica holds its lease, and moves to another within about `stream_lease_ms` when
//! that one dies, is cut off from the database, or stops. The lease itself, and why two holders
//! at once would still handle each thing once, is `picogent_state::RunQueue`'s (`state/queue.rs`);
//! the runs' side (queue, leases, inputs) is the router's, the same as a single copy's
//! (`router/runs.rs`, `router/queue.rs`).
//!
//! The keeper ([`spawn_stream_keeper`]) is a standby until it takes the lease; then it runs the
//! event stream into the router and renews the lease every third of it. It stops the stream
//! when a renewal says another replica holds the lease, or when two thirds of the lease went by
//! since the last renewal that succeeded (counted from when it was sent), so it lets go before
//! the database would give the stream to someone else. At shutdown it lets the lease go, so a
//! rolling restart hands the stream over at once.

use std::sync::Arc;
use std::time::Duration;

use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use crate::metrics::Metrics;
use crate::router::Input;
use crate::status::StatusBoard;
use picogent_config::ReplicasConfig;
use picogent_state::{Outage, RunQueue, State};
use picogent_tracker::TrackerClient;
use picogent_tracker::stream::{LinkStatus, StreamError, StreamItem, StreamOptions, StreamStart};

/// The stream's lease timing, from `replicas`.
#[derive(Debug, Clone, Copy)]
pub struct LeaseTiming {
    pub lease: Duration,
    /// How often a standby asks for the lease.
    pub poll: Duration,
}

impl LeaseTiming {
    pub fn from_config(config: &ReplicasConfig) -> LeaseTiming {
        LeaseTiming {
            lease: Duration::from_millis(config.stream_lease_ms),
            poll: Duration::from_millis(config.poll_ms),
        }
    }

    fn renew_every(self) -> Duration {
        self.lease / 3
    }

    /// How long after the last successful renewal the holder gives the stream up by itself.
    fn give_up_after(self) -> Duration {
        self.lease * 2 / 3
    }
}

/// What the keeper needs to run the stream.
pub struct StreamKeeper {
    pub replicas: RunQueue,
    pub timing: LeaseTiming,
    pub options: StreamOptions,
    pub client: TrackerClient,
    pub state: State,
    pub inputs: mpsc::Sender<Input>,
    pub status: Arc<StatusBoard>,
    pub metrics: Arc<Metrics>,
    /// The state database's answers to the lease asks: one warning per outage.
    pub outage: Outage,
}

/// Runs the keeper until `shutdown`; ends with the stream's error if the stream fails for good
/// (a refused token), like the stream task of a single copy.
pub fn spawn_stream_keeper(keeper: StreamKeeper, shutdown: CancellationToken) -> JoinHandle<Result<(), StreamError>> {
    tokio::spawn(keeper.run(shutdown))
}

/// The event stream while this replica holds it.
struct Held {
    cancel: CancellationToken,
    task: JoinHandle<Result<(), StreamError>>,
    last_renewed: Instant,
}

impl StreamKeeper {
    async fn run(mut self, shutdown: CancellationToken) -> Result<(), StreamError> {
        let mut held: Option<Held> = None;
        let result = loop {
            let wait = if held.is_some() { self.timing.renew_every() } else { self.timing.poll };
            let woke = {
                let finished = async {
                    match &mut held {
                        Some(stream) => Some((&mut stream.task).await),
                        None => std::future::pending().await,
                    }
                };
                tokio::select! {
                    _ = shutdown.cancelled() => break Ok(()),
                    ended = finished => ended,
                    _ = tokio::time::sleep(wait) => None,
                }
            };
            if let Some(ended) = woke {
                // The stream ended by itself: for good (a refused token), or by a bug.
                held = None;
                self.status.set_holds_stream(false);
                match ended {
                    Ok(Ok(())) => {}
                    Ok(Err(error)) => break Err(error),
                    Err(join) => tracing::error!(%join, "the event stream task failed; asking for the lease again"),
                }
                continue;
            }
            held = match held.take() {
                None => self.try_take().await,
                Some(stream) => self.renew(stream).await,
            };
        };
        if let Some(stream) = held {
            self.stop_stream(stream, "this replica is shutting down").await;
        }
        if let Err(error) = self.replicas.release_stream().await {
            tracing::warn!(%error, "could not let the stream's lease go; another replica takes it when it runs out");
        }
        result
    }

    /// Asks for the lease; on getting it, starts the stream.
    async fn try_take(&mut self) -> Option<Held> {
        let sent = Instant::now();
        match self.replicas.acquire_stream(self.timing.lease).await {
            Ok(Some(fencing)) => {
                self.outage.answered();
                tracing::info!(replica = self.replicas.id(), fencing, "this replica holds the event stream now");
                self.metrics.stream_takeover();
                self.status.set_holds_stream(true);
                let cancel = CancellationToken::new();
                // Whatever this process was told at start, a stream taken over resumes where the
                // agent's shared position says (a second `--from-start` would replay everything).
                let start = std::mem::replace(&mut self.options.start, StreamStart::Recorded);
                let options = StreamOptions { start, ..self.options.clone() };
                let task = picogent_tracker::stream::spawn_into(
                    options,
                    &self.client,
                    self.state.clone(),
                    self.inputs.clone(),
                    cancel.clone(),
                );
                Some(Held { cancel, task, last_renewed: sent })
            }
            Ok(None) => {
                self.outage.answered();
                None
            }
            Err(error) => {
                self.outage.failed("cannot ask the state database for the stream's lease", &error);
                None
            }
        }
    }

    /// Renews the lease; stops the stream when it is lost or cannot be renewed in time.
    async fn renew(&mut self, mut stream: Held) -> Option<Held> {
        let sent = Instant::now();
        // An answer later than the point of giving up is no use: the database waiting for a
        // connection (an outage) must not keep the stream past it.
        let in_time = self.timing.give_up_after().saturating_sub(stream.last_renewed.elapsed());
        let Ok(answer) = tokio::time::timeout(in_time, self.replicas.renew_stream(self.timing.lease)).await else {
            self.stop_stream(stream, "the stream's lease could not be renewed in time").await;
            return None;
        };
        match answer {
            Ok(true) => {
                self.outage.answered();
                stream.last_renewed = sent;
                Some(stream)
            }
            Ok(false) => {
                self.stop_stream(stream, "another replica holds the stream's lease").await;
                None
            }
            Err(error) if stream.last_renewed.elapsed() >= self.timing.give_up_after() => {
                tracing::warn!(%error, "cannot renew the stream's lease");
                self.stop_stream(stream, "the stream's lease could not be renewed in time").await;
                None
            }
            Err(error) => {
                self.outage.failed("cannot renew the stream's lease", &error);
                Some(stream)
            }
        }
    }

    async fn stop_stream(&self, stream: Held, why: &str) {
        tracing::warn!(replica = self.replicas.id(), why, "this replica stops holding the event stream");
        stream.cancel.cancel();
        let _ = tokio::time::timeout(Duration::from_secs(5), stream.task).await;
        self.status.set_holds_stream(false);
        let status = StreamItem::Status(LinkStatus::Disconnected { reason: format!("stream handed over: {why}") });
        let _ = self.inputs.send(Input::from(status)).await;
    }
}
