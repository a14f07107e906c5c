//! The run queue: every run is queued before it runs, claimed by the process that runs it, and
//! resumed by a claim of its lapsed lease. A single copy is the one-member case: the same queue,
//! in its SQLite file (or its PostgreSQL rows) and claimed by that one process; replicas of one
//! agent share it in PostgreSQL. The event stream's lease and each process's heartbeat are here
//! too. The SQL is the stores' (`sqlite/queue.rs`, `postgres/queue.rs`); the loops that use it
//! are the router's (`runtime/router`) and, for the stream's lease, `runtime/replicas.rs`.
//!
//! Invariants:
//! - **One run per session, unless asked to wait behind it.** Queuing a run checks that no run of
//!   its session is queued or running, claims the thing it is for and inserts the run, all in one
//!   transaction (PostgreSQL takes the session's transaction lock first; SQLite's write
//!   transaction is the file's): two queuing at once get one run and one `Busy`. A run queued
//!   `behind` (a question reconciliation found while its session was busy) is not claimed before
//!   every earlier run of its session has ended.
//! - **An input reaches a run or comes back.** [`RunQueue::send_input`] adds the input only while
//!   the run is queued or running, in one transaction with the run's row; a run's end updates
//!   that row, so an input is either added before the end (and the run takes it in, or it goes to
//!   a follow-up run, read after the end) or refused after it (and the caller queues a new run).
//!   A steering message is claimed in the transaction that hands it to its run.
//! - **One clock.** In PostgreSQL every lease is timed by the database's clock, never by a
//!   replica's, so replicas whose clocks disagree still agree on when a lease ran out.
//! - **One holder.** A lease is taken only when it is free or ran out, in one statement, so of
//!   replicas asking at once exactly one gets it, and each new holder of the stream gets a higher
//!   `fencing` number. A queued run is claimed by one process (`FOR UPDATE SKIP LOCKED`), which
//!   sets itself as the holder in the statement that picks the row. A run's lease lapses only
//!   when its holder stops renewing it (died, cut off, or let it go at shutdown); another then
//!   takes it with `attempts + 1` and resumes it from its stored start under the same run id, so
//!   its writes carry the same idempotency keys and land once. A holder never takes back a run it
//!   holds itself. A copy that holds the agent's state to itself (the SQLite file's lock, or the
//!   agent's exclusive lock in PostgreSQL) lets every lease go at its start
//!   ([`RunQueue::release_all`]): whatever was running belonged to a process that is gone.
//! - **The run's own writes name the holder.** A run's end is written only while its holder
//!   holds it ([`State::for_holder`]), so a replica that lost a run cannot finish it over the one
//!   that took it.
//! - **A holder stops before its lease runs out.** The stream's holder renews every third of the
//!   lease, and stops the stream itself once two thirds went by since the last renewal it *sent*
//!   that succeeded (`runtime/replicas.rs`).
//! - **Safety never rests on a lease alone.** Each event is recorded once by id, each message and
//!   assignment is claimed, each run is queued in one transaction with its claim, and each write
//!   to the tracker carries an idempotency key.

use std::sync::Arc;
use std::time::Duration;

use crate::{ClaimKind, RunStatus, State, StateError, now_ms};
use picogent_tracker::session::{SessionKey, UnknownSessionKey};

/// What [`RunQueue::enqueue`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Enqueued {
    /// Queued under this run id.
    Queued(String),
    /// The session has this run queued or running already; nothing was written.
    Busy(String),
    /// The claim was taken before: handled already; nothing was written.
    Handled,
}

/// A run to queue.
#[derive(Debug)]
pub struct QueuedRun<'a> {
    pub session_key: &'a SessionKey,
    pub trigger: &'a str,
    /// The request as JSON, for the process that claims it.
    pub request: &'a str,
    /// A claim (kind, key) taken in the same transaction.
    pub claim: Option<(ClaimKind, &'a str)>,
    /// Steering inputs that came before it started, in order (text, message id).
    pub inputs: &'a [(String, Option<String>)],
    /// Queued behind the session's runs instead of refused as `Busy`: it is claimed once they
    /// have ended.
    pub behind: bool,
}

/// What can be sent to a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InputKind {
    /// Text for the run's next turn.
    Steer,
    /// Stop the run; the text says why.
    Stop,
}

impl InputKind {
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            InputKind::Steer => "steer",
            InputKind::Stop => "stop",
        }
    }
}

/// One input sent to a run (steering or a stop), as stored.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentInput {
    pub run_id: String,
    /// Its place among the run's inputs, from 1.
    pub n: i64,
    pub kind: InputKind,
    pub text: String,
    pub message_id: Option<String>,
}

/// A run this process just claimed.
#[derive(Debug, Clone)]
pub struct ClaimedRun {
    pub id: String,
    /// Its session; an error when the stored key is of no kind this version knows (such a run
    /// cannot run, and is closed by whoever claimed it).
    pub session_key: Result<SessionKey, UnknownSessionKey>,
    pub trigger: String,
    /// The request it was queued with (JSON); `None` for a run started before the queue.
    pub request: Option<String>,
    /// How many times a process took it, this time included.
    pub attempts: i64,
}

/// A claimed run as stored: the columns the claim returns.
#[derive(Debug, sqlx::FromRow)]
pub(crate) struct ClaimedColumns {
    pub id: String,
    pub session_key: String,
    pub trigger: String,
    pub request: Option<String>,
    pub attempts: i64,
}

/// A run waiting in the queue.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedView {
    pub id: String,
    pub session_key: SessionKey,
    pub trigger: String,
}

/// What a process says of itself at each beat.
#[derive(Debug, Clone)]
pub struct Beat<'a> {
    pub host: &'a str,
    /// Its `http.listen`, for a person looking for it.
    pub http: Option<&'a str>,
    pub started_at_ms: i64,
    pub holds_stream: bool,
    pub runs: i64,
    pub slots: i64,
}

/// Another replica as its last heartbeat showed it.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, sqlx::FromRow)]
pub struct ReplicaSeen {
    pub id: String,
    pub host: String,
    pub http: Option<String>,
    pub holds_stream: bool,
    pub runs: i64,
    pub slots: i64,
    /// How long ago its last heartbeat was, by the database's clock.
    pub seen_ms_ago: i64,
}

/// The name of the event stream's lease.
pub(crate) const STREAM: &str = "stream";

/// How long a heartbeat row is kept after its last beat, for `/readyz`'s list.
pub(crate) const FORGET_REPLICA_AFTER_MS: i64 = 24 * 60 * 60 * 1000;

pub(crate) fn ms(duration: Duration) -> i64 {
    i64::try_from(duration.as_millis()).unwrap_or(i64::MAX)
}

/// One process's handle on the agent's run queue: the agent's rows, as holder `id`.
#[derive(Clone, Debug)]
pub struct RunQueue {
    state: State,
    holder: Arc<str>,
}

impl State {
    /// This state as the process `holder` uses it with its run queue: a run's end is written only
    /// while `holder` holds the run. `shared`: other processes (replicas) use the same rows, so
    /// the spend is read from the database each time (they add to it).
    pub fn for_holder(&self, holder: &str, shared: bool) -> (State, RunQueue) {
        let state = State { replica: Some(holder.into()), shared, ..self.clone() };
        (state.clone(), RunQueue { state, holder: holder.into() })
    }
}

impl RunQueue {
    /// This process's id.
    pub fn id(&self) -> &str {
        &self.holder
    }

    /// Queues `run` unless its session has a run queued or running (unless `run.behind`), or its
    /// claim was taken.
    pub async fn enqueue(&self, run: &QueuedRun<'_>) -> Result<Enqueued, StateError> {
        let id = uuid::Uuid::new_v4().to_string();
        on_queue!(self.state, enqueue(run, &id, now_ms()))
    }

    /// The session's runs that are queued or running, oldest first.
    pub async fn session_runs(&self, session_key: &SessionKey) -> Result<Vec<(String, RunStatus)>, StateError> {
        let rows = on_queue!(self.state, session_runs(session_key))?;
        rows.into_iter()
            .map(|(id, status)| match RunStatus::parse(&status) {
                Some(status) => Ok((id, status)),
                None => Err(StateError::Corrupt { field: "runs.status", message: format!("unknown status {status}") }),
            })
            .collect()
    }

    /// The session's oldest run that is queued or running, if any.
    pub async fn active_run(&self, session_key: &SessionKey) -> Result<Option<(String, RunStatus)>, StateError> {
        Ok(self.session_runs(session_key).await?.into_iter().next())
    }

    /// Every queued run, oldest first.
    pub async fn queued(&self) -> Result<Vec<QueuedView>, StateError> {
        on_queue!(self.state, queued_runs())?
            .into_iter()
            .map(|(id, session_key, trigger)| {
                let session_key = session_key.parse().map_err(|error: UnknownSessionKey| StateError::Corrupt {
                    field: "runs.session_key",
                    message: error.to_string(),
                })?;
                Ok(QueuedView { id, session_key, trigger })
            })
            .collect()
    }

    /// Sends an input to the run `run_id` if it is still queued or running (and claims the
    /// message it came from with it); returns its place among the run's inputs, or `None`,
    /// writing nothing, once the run has ended.
    pub async fn send_input(
        &self,
        run_id: &str,
        kind: InputKind,
        text: &str,
        message_id: Option<&str>,
    ) -> Result<Option<i64>, StateError> {
        on_queue!(self.state, send_input(run_id, kind, text, message_id, now_ms()))
    }

    /// The inputs of the runs `run_ids`, in order per run.
    pub async fn inputs(&self, run_ids: &[String]) -> Result<Vec<SentInput>, StateError> {
        if run_ids.is_empty() {
            return Ok(Vec::new());
        }
        Ok(on_queue!(self.state, inputs(run_ids))?
            .into_iter()
            .map(|(run_id, n, kind, text, message_id)| SentInput {
                run_id,
                n,
                kind: if kind == "stop" { InputKind::Stop } else { InputKind::Steer },
                text,
                message_id,
            })
            .collect())
    }

    /// Stops a run that is still queued, before anyone took it: `stopped`, with `reason`.
    /// Returns the request it was queued with (JSON; empty when it has none), or `None` when it
    /// is not queued (running somewhere: send it a stop instead).
    pub async fn stop_queued(&self, run_id: &str, reason: &str) -> Result<Option<String>, StateError> {
        on_queue!(self.state, stop_queued(run_id, reason))
    }

    /// Gives up a run this process claimed but cannot run (its task or thread is gone): closed
    /// as `interrupted` with `reason`.
    pub async fn drop_claimed(&self, run_id: &str, reason: &str) -> Result<(), StateError> {
        on_queue!(self.state, drop_claimed(&self.holder, run_id, reason, now_ms()))
    }

    /// Claims up to `slots` runs for this process, oldest first: queued ones (a run queued behind
    /// its session's runs waits for them), and running ones whose lease ran out on another
    /// process. Each gets this process as its holder, a lease of `lease`, and one more attempt.
    pub async fn claim_runs(&self, slots: usize, lease: Duration) -> Result<Vec<ClaimedRun>, StateError> {
        if slots == 0 {
            return Ok(Vec::new());
        }
        let slots = i64::try_from(slots).unwrap_or(i64::MAX);
        Ok(on_queue!(self.state, claim_runs(&self.holder, slots, ms(lease)))?
            .into_iter()
            .map(|run| ClaimedRun {
                session_key: run.session_key.parse(),
                id: run.id,
                trigger: run.trigger,
                request: run.request,
                attempts: run.attempts,
            })
            .collect())
    }

    /// Extends the leases of this process's running runs `ids` by `lease`; returns the ids it
    /// still holds, running or just finished (one missing from the answer was taken over).
    pub async fn renew_runs(&self, ids: &[String], lease: Duration) -> Result<Vec<String>, StateError> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        on_queue!(self.state, renew_runs(&self.holder, ids, ms(lease)))
    }

    /// Hands a run this process claimed back to the queue, to be claimed again.
    pub async fn hand_back(&self, run_id: &str) -> Result<(), StateError> {
        on_queue!(self.state, hand_back(&self.holder, run_id))
    }

    /// Lets the leases of this process's running runs go now (a shutdown that could not wait for
    /// them), so they resume at once elsewhere or at the next start; returns how many.
    pub async fn release_runs(&self) -> Result<u64, StateError> {
        on_queue!(self.state, release_runs(Some(&self.holder)))
    }

    /// Lets every running run's lease go, whoever held it: only for a copy that holds the agent's
    /// state to itself, at its start, so the runs a crash or a shutdown cut short resume now.
    pub async fn release_all(&self) -> Result<u64, StateError> {
        on_queue!(self.state, release_runs(None))
    }

    // ---- the event stream ----

    /// Takes the stream's lease for `lease` if it is free, ran out, or is this process's
    /// already; returns its fencing number, or `None` when another replica holds it.
    pub async fn acquire_stream(&self, lease: Duration) -> Result<Option<i64>, StateError> {
        on_queue!(self.state, acquire_stream(&self.holder, ms(lease)))
    }

    /// Extends the stream's lease by `lease` from now; `false` when this process no longer holds it.
    pub async fn renew_stream(&self, lease: Duration) -> Result<bool, StateError> {
        on_queue!(self.state, renew_stream(&self.holder, ms(lease)))
    }

    /// Lets the stream's lease go now (a clean stop), so another replica takes it at once. The
    /// row stays, so the fencing number keeps growing.
    pub async fn release_stream(&self) -> Result<(), StateError> {
        on_queue!(self.state, release_stream(&self.holder))
    }

    /// The process whose lease on the stream has not run out, if any, and its fencing number.
    pub async fn stream_holder(&self) -> Result<Option<(String, i64)>, StateError> {
        on_queue!(self.state, stream_holder())
    }

    // ---- heartbeats ----

    /// Records this process's heartbeat (and forgets those silent for a day).
    pub async fn beat(&self, beat: &Beat<'_>) -> Result<(), StateError> {
        on_queue!(self.state, beat(&self.holder, beat))
    }

    /// The other processes that beat within `within`, by id.
    pub async fn others(&self, within: Duration) -> Result<Vec<ReplicaSeen>, StateError> {
        on_queue!(self.state, others(&self.holder, ms(within)))
    }

    /// Removes this process's heartbeat (a clean stop).
    pub async fn leave(&self) -> Result<(), StateError> {
        on_queue!(self.state, leave(&self.holder))
    }
}
