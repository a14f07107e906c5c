//! The interface every store of the state implements: SQLite (`SqliteStore` in `sqlite/`,
//! one agent per file) and PostgreSQL (`PostgresStore` in `postgres/`, many agents in one
//! database, each row keyed by the agent's identity).
//!
//! [`State`](crate::State) holds one store and does everything that is the same for both: it
//! turns times, counts and JSON into the stored columns and back, keeps the day's spend at hand,
//! and words the errors. A store only moves those columns in and out of its database, with the
//! guarantees written on each method; the state tests (`crates/state/src/tests.rs`) run against both.
//! The domain's words reach a store as their types (`ClaimKind`, `FiringOutcome`, `InputKind`,
//! `RunStatus`, `SessionKey`), written as text only where a statement binds them; what a store
//! reads back is columns, which `State` turns into those types again (an unknown word is a
//! corrupt row).
//!
//! Every method is keyed by the agent implicitly: a store is opened for one agent and never reads
//! or writes another's rows.
//!
//! To add an operation: declare it here with its guarantee, implement it in `sqlite/` and
//! `postgres/` (the compiler insists on both), call it from a `State` method through
//! `on_store!`, and add its test to the list in `tests.rs` that runs on both stores. The run
//! queue's operations are [`QueueStore`]'s, called through `on_queue!` and tested in
//! `queue_tests.rs`, also on both.

use crate::queue::{Beat, ClaimedColumns, Enqueued, QueuedRun, ReplicaSeen};
use crate::{ClaimKind, FiringOutcome, InputKind, RunStatus, StateError};
use picogent_tracker::session::SessionKey;

/// One input of a run as stored: (run id, n, kind, text, message id).
pub(super) type InputColumns = (String, i64, String, String, Option<String>);

#[cfg(any(test, feature = "test-support"))]
/// A run record as it is opened: `running`, started at `started_at_ms`.
pub(super) struct NewRun<'a> {
    pub id: &'a str,
    pub session_key: &'a SessionKey,
    pub trigger: &'a str,
    pub started_at_ms: i64,
}

/// The columns [`Store::finish_run`] writes, already converted from a `FinishRun`.
pub(super) struct RunEnd<'a> {
    pub status: RunStatus,
    pub turns: i64,
    pub tool_calls: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub model_duration_ms: i64,
    pub tool_duration_ms: i64,
    pub outcome: Option<&'a str>,
    pub error: Option<&'a str>,
    pub finished_at_ms: i64,
    /// `None` keeps the record stored before.
    pub record: Option<String>,
    pub cost: Option<f64>,
    /// The process writing it (`State::for_holder`): the end is written only while that process
    /// holds the run. `None`: whoever runs it (a handle that holds no queue: tests and tools).
    pub holder: Option<&'a str>,
}

/// The columns of a run, in a literal so queries stay `&'static str` (sqlx wants static SQL,
/// which keeps values out of the query text). The same names in both databases.
macro_rules! run_columns {
    () => {
        "id, session_key, trigger, status, turns, tool_calls, prompt_tokens, completion_tokens, \
         model_duration_ms, tool_duration_ms, outcome, error, started_at_ms, finished_at_ms, record, cost, waiting"
    };
}
pub(super) use run_columns;

/// One run as stored: the columns of [`run_columns!`], by the same names in either database.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct RunColumns {
    pub id: String,
    pub session_key: String,
    pub trigger: String,
    pub status: String,
    pub turns: i64,
    pub tool_calls: i64,
    pub prompt_tokens: i64,
    pub completion_tokens: i64,
    pub model_duration_ms: i64,
    pub tool_duration_ms: i64,
    pub outcome: Option<String>,
    pub error: Option<String>,
    pub started_at_ms: i64,
    pub finished_at_ms: Option<i64>,
    pub record: Option<String>,
    pub cost: Option<f64>,
    pub waiting: Option<String>,
}

/// The columns of a scheduled firing, in a literal as [`run_columns!`] is. The same names in
/// both databases.
macro_rules! firing_columns {
    () => {
        "job, fire_at_ms, outcome, run_id, detail, updated_at_ms"
    };
}
pub(super) use firing_columns;

/// One firing as stored: the columns of [`firing_columns!`], by the same names in either database.
#[derive(Debug, sqlx::FromRow)]
pub(super) struct FiringColumns {
    pub job: String,
    pub fire_at_ms: i64,
    pub outcome: String,
    pub run_id: Option<String>,
    pub detail: String,
    pub updated_at_ms: i64,
}

/// The columns [`Store::record_firing`] writes.
pub(super) struct FiringWrite<'a> {
    pub job: &'a str,
    pub fire_at_ms: i64,
    pub outcome: FiringOutcome,
    pub run_id: Option<&'a str>,
    pub detail: &'a str,
    pub updated_at_ms: i64,
    /// Replace a row that is there; `false` writes only where there is none.
    pub replace: bool,
}

/// What a store does. Times are Unix milliseconds (UTC), passed in by the caller.
pub(super) trait Store {
    // ---- processed events ----

    /// Inserts the event unless its id is known; returns whether it was new. The resume point
    /// moves to `seq` if that is higher, atomically with the insert.
    async fn record_event(&self, id: &str, seq: i64, name: &str, at_ms: i64) -> Result<bool, StateError>;
    #[cfg(any(test, feature = "test-support"))]
    async fn is_event_processed(&self, id: &str) -> Result<bool, StateError>;
    /// The resume point; 0 before the first event.
    async fn last_seq(&self) -> Result<i64, StateError>;
    /// Deletes events processed before `before_ms`, never the resume point; returns how many.
    async fn prune_events(&self, before_ms: i64) -> Result<u64, StateError>;

    // ---- claims ----

    /// Inserts the claim unless it exists; returns whether this call made it. Of concurrent
    /// callers exactly one gets `true`.
    async fn claim(&self, kind: ClaimKind, key: &str, at_ms: i64) -> Result<bool, StateError>;
    async fn is_claimed(&self, kind: ClaimKind, key: &str) -> Result<bool, StateError>;
    /// Deletes the claim; returns whether there was one.
    async fn release(&self, kind: ClaimKind, key: &str) -> Result<bool, StateError>;

    // ---- sessions ----

    /// The messages (JSON text) and the time they were saved.
    async fn load_session(&self, key: &str) -> Result<Option<(String, i64)>, StateError>;
    /// Inserts or replaces the whole conversation.
    async fn save_session(&self, key: &str, messages: &str, at_ms: i64) -> Result<(), StateError>;
    #[cfg(any(test, feature = "test-support"))]
    async fn delete_session(&self, key: &str) -> Result<bool, StateError>;

    // ---- spend ----

    /// Adds to the day's tokens and cost in one statement; returns the day's new totals.
    async fn add_spend(&self, day: &str, tokens: i64, cost: f64) -> Result<(i64, f64), StateError>;
    /// The day's tokens and cost, if anything was spent.
    async fn spend_on(&self, day: &str) -> Result<Option<(i64, f64)>, StateError>;

    // ---- replies, for the loop guard ----

    /// Records a reply and, in the same transaction, forgets replies before `forget_before_ms`.
    async fn record_reply(&self, thread_key: &str, at_ms: i64, forget_before_ms: i64) -> Result<(), StateError>;
    async fn replies_since(&self, thread_key: &str, since_ms: i64) -> Result<i64, StateError>;
    /// Counts the thread's replies since `since_ms` and, if fewer than `max`, records one as
    /// [`Store::record_reply`] does, in one step for every process on the store; returns the
    /// count found when it was `max` or more (nothing recorded).
    async fn record_reply_under(
        &self,
        thread_key: &str,
        at_ms: i64,
        since_ms: i64,
        max: i64,
        forget_before_ms: i64,
    ) -> Result<Option<i64>, StateError>;

    // ---- runs ----

    #[cfg(any(test, feature = "test-support"))]
    async fn start_run(&self, run: &NewRun<'_>) -> Result<(), StateError>;
    #[cfg(any(test, feature = "test-support"))]
    /// Claims `(kind, key)` and inserts the run in one transaction; returns `false`, writing
    /// nothing, if the claim existed.
    async fn start_claimed_run(&self, kind: ClaimKind, key: &str, run: &NewRun<'_>) -> Result<bool, StateError>;
    /// Replaces the run's record; returns `false` if there is no such run.
    async fn save_run_record(&self, run_id: &str, record: &str) -> Result<bool, StateError>;
    /// Sets (JSON) or clears what the running run `run_id` waits for; whether it is running.
    async fn set_waiting(&self, run_id: &str, waiting: Option<&str>) -> Result<bool, StateError>;
    /// Writes the ending of a run still `running` (and held by `end.holder`, when it names one);
    /// returns `false` if none was (unknown, already finished, or taken over by another replica).
    async fn finish_run(&self, run_id: &str, end: &RunEnd<'_>) -> Result<bool, StateError>;
    #[cfg(any(test, feature = "test-support"))]
    /// Closes a run still `running` as `interrupted`; returns whether it did.
    async fn mark_interrupted(&self, run_id: &str, reason: &str, at_ms: i64) -> Result<bool, StateError>;
    async fn get_run(&self, run_id: &str) -> Result<Option<RunColumns>, StateError>;
    /// The latest `limit` runs, newest first (ties in start time: the later inserted first).
    async fn list_runs(&self, limit: i64) -> Result<Vec<RunColumns>, StateError>;
    /// The latest `limit` runs of the session, newest first (ties as `list_runs`).
    async fn runs_of_session(&self, session_key: &SessionKey, limit: i64) -> Result<Vec<RunColumns>, StateError>;
    /// The ids of at most `limit` runs whose id begins with `prefix` (compared as text: no
    /// character of it is a wildcard), in no set order.
    async fn run_ids_starting_with(&self, prefix: &str, limit: i64) -> Result<Vec<String>, StateError>;
    /// Runs still `running`, oldest first (ties: the earlier inserted first).
    async fn unfinished_runs(&self) -> Result<Vec<RunColumns>, StateError>;
    /// Whether a run of the session ended `completed`, `failed`, `did_nothing` or `stopped`.
    async fn has_finished_run_for(&self, session_key: &SessionKey) -> Result<bool, StateError>;
    /// Whether a run of the session started at or after `since_ms`.
    async fn has_run_since(&self, session_key: &SessionKey, since_ms: i64) -> Result<bool, StateError>;
    /// The tokens (prompt and completion) and the cost of every run of the session.
    async fn spend_of_session(&self, session_key: &SessionKey) -> Result<(i64, f64), StateError>;

    // ---- named values ----

    async fn get_value(&self, name: &str) -> Result<Option<String>, StateError>;
    /// Inserts or replaces the value.
    async fn set_value(&self, name: &str, value: &str, at_ms: i64) -> Result<(), StateError>;
    /// Inserts the value unless the name has one; returns the value stored, of concurrent callers
    /// the same one for all.
    async fn value_or_insert(&self, name: &str, value: &str, at_ms: i64) -> Result<String, StateError>;

    /// Sets the value to `value` (an integer, stored as text) unless it holds a larger one
    /// already, in one statement: of concurrent callers the largest value stays, whatever their
    /// order.
    async fn raise_value(&self, name: &str, value: i64, at_ms: i64) -> Result<(), StateError>;

    // ---- scheduled firings (`firings.rs`) ----

    /// Inserts the firing's row, or replaces one that is there when `firing.replace`. A plain
    /// write, held to no run's holder: it is not a run's end (see `firings.rs`).
    async fn record_firing(&self, firing: &FiringWrite<'_>) -> Result<(), StateError>;
    async fn get_firing(&self, job: &str, fire_at_ms: i64) -> Result<Option<FiringColumns>, StateError>;
    /// The job's firings scheduled after `after_ms`, oldest first, at most `limit`.
    async fn firings_after(&self, job: &str, after_ms: i64, limit: i64) -> Result<Vec<FiringColumns>, StateError>;
    /// The job's latest `limit` firings, newest first.
    async fn last_firings(&self, job: &str, limit: i64) -> Result<Vec<FiringColumns>, StateError>;
    /// The firing whose run is `run_id` (the latest, should there be several).
    async fn firing_of_run(&self, run_id: &str) -> Result<Option<FiringColumns>, StateError>;

    // ---- where the stream began ----

    /// Moves the resume point to `seq` if that is higher and sets the named value `value_name`
    /// to `seq` (as text), in one transaction.
    async fn record_stream_head(&self, seq: i64, value_name: &str, at_ms: i64) -> Result<(), StateError>;

    // ---- pruning: what may go and why is at the top of `retention.rs` ----

    /// Deletes the run-notice claims made before `before_ms` whose run is not `running`, and the
    /// spend- and limit-notice claims made before it whose day (the key's start) is before
    /// `oldest_day_asked`.
    async fn prune_notice_claims(&self, before_ms: i64, oldest_day_asked: &str) -> Result<u64, StateError>;
    /// Deletes the message claims made before `before_ms`.
    async fn prune_message_claims(&self, before_ms: i64) -> Result<u64, StateError>;
    /// In one transaction: deletes the runs not `running` that ended (or, unfinished, started)
    /// before `before_ms`, except the newest run of each session and its newest `completed`,
    /// `failed` or `stopped` one; then drops the record of every run not `running` that ended
    /// before it. Returns (runs deleted, records dropped).
    async fn prune_runs(&self, before_ms: i64) -> Result<(u64, u64), StateError>;
    /// Deletes the firing claims made before `before_ms` whose firing is at or before its job's
    /// watermark: the named value `{watermark_prefix}{job}`, the claim's key being
    /// `{job}@{fire_at_ms}`. A job without a watermark keeps its claims.
    async fn prune_firing_claims(&self, before_ms: i64, watermark_prefix: &str) -> Result<u64, StateError>;
    /// Deletes the firings last written before `before_ms`, except the newest firing of each job
    /// and those whose run is queued or running.
    async fn prune_firings(&self, before_ms: i64) -> Result<u64, StateError>;
    /// Deletes the sessions saved before `before_ms` that no `running` run belongs to.
    async fn prune_sessions(&self, before_ms: i64) -> Result<u64, StateError>;
    /// Deletes the replies posted before `before_ms`.
    async fn prune_replies(&self, before_ms: i64) -> Result<u64, StateError>;
    /// Deletes the spend of the days before `before_day` (`YYYY-MM-DD`).
    async fn prune_spend(&self, before_day: &str) -> Result<u64, StateError>;

    // ---- the store itself ----

    /// Returns once every commit so far survives a power cut.
    async fn sync(&self) -> Result<(), StateError>;
    /// Closes the connections, waiting for queries in flight; later calls fail.
    async fn close(&self);
}

/// The run queue, the event stream's lease and the heartbeats: what a store does for
/// `queue.rs`, in both stores.
pub(super) trait QueueStore {
    // ---- the run queue (what each guarantees is written at the top of `queue.rs`) ----
    //
    // `holder` is the process (a single copy, or one replica) asking; leases are milliseconds
    // from now by the database's clock (PostgreSQL) or the process's (SQLite, one process).

    /// Queues `run` unless its session has a run queued or running (and `run.behind` is false),
    /// or its claim was taken; in one transaction with the claim and its inputs.
    async fn enqueue(&self, run: &QueuedRun<'_>, id: &str, at_ms: i64) -> Result<Enqueued, StateError>;
    /// The session's runs that are queued or running, oldest first: (id, status).
    async fn session_runs(&self, session_key: &SessionKey) -> Result<Vec<(String, String)>, StateError>;
    /// Every queued run, oldest first: (id, session key, trigger).
    async fn queued_runs(&self) -> Result<Vec<(String, String, String)>, StateError>;
    /// Adds an input to the run if it is queued or running, and claims `message_id` with it;
    /// returns the input's place (from 1), or `None`, writing nothing, once the run has ended.
    async fn send_input(
        &self,
        run_id: &str,
        kind: InputKind,
        text: &str,
        message_id: Option<&str>,
        at_ms: i64,
    ) -> Result<Option<i64>, StateError>;
    /// The inputs of the runs, in order per run: (run id, n, kind, text, message id).
    async fn inputs(&self, run_ids: &[String]) -> Result<Vec<InputColumns>, StateError>;
    /// Closes a run still queued as `stopped` with `reason`; returns its request (empty when it
    /// has none), or `None` when it is not queued.
    async fn stop_queued(&self, run_id: &str, reason: &str) -> Result<Option<String>, StateError>;
    /// Closes a run `holder` claimed and cannot run as `interrupted` with `reason`.
    async fn drop_claimed(&self, holder: &str, run_id: &str, reason: &str, at_ms: i64) -> Result<(), StateError>;
    /// Claims up to `slots` runs for `holder`, oldest first: queued ones that no earlier run of
    /// their session is queued or running before, and running ones whose lease ran out on
    /// another holder; each gets `holder`, a lease of `lease_ms` and one more attempt.
    async fn claim_runs(&self, holder: &str, slots: i64, lease_ms: i64) -> Result<Vec<ClaimedColumns>, StateError>;
    /// Extends the leases of `holder`'s running runs among `ids`; returns the ids it still holds.
    async fn renew_runs(&self, holder: &str, ids: &[String], lease_ms: i64) -> Result<Vec<String>, StateError>;
    /// Hands a run `holder` claimed back to the queue, for any holder to claim again.
    async fn hand_back(&self, holder: &str, run_id: &str) -> Result<(), StateError>;
    /// Lets the leases of running runs go now: `holder`'s, or every holder's when `None` (a copy
    /// that holds the agent's state to itself, at its start); returns how many.
    async fn release_runs(&self, holder: Option<&str>) -> Result<u64, StateError>;

    // ---- the event stream's lease and the heartbeats (`queue.rs`) ----

    /// Takes the stream's lease for `holder` if it is free, ran out, or is `holder`'s; returns
    /// its fencing number, or `None` when another holds it.
    async fn acquire_stream(&self, holder: &str, lease_ms: i64) -> Result<Option<i64>, StateError>;
    /// Extends the stream's lease; `false` when `holder` no longer holds it.
    async fn renew_stream(&self, holder: &str, lease_ms: i64) -> Result<bool, StateError>;
    /// Lets `holder`'s lease on the stream go now.
    async fn release_stream(&self, holder: &str) -> Result<(), StateError>;
    /// The holder whose lease on the stream has not run out, and its fencing number.
    async fn stream_holder(&self) -> Result<Option<(String, i64)>, StateError>;
    /// Records `holder`'s heartbeat and forgets those silent for a day.
    async fn beat(&self, holder: &str, beat: &Beat<'_>) -> Result<(), StateError>;
    /// The other holders that beat within `within_ms`, by id.
    async fn others(&self, holder: &str, within_ms: i64) -> Result<Vec<ReplicaSeen>, StateError>;
    /// Removes `holder`'s heartbeat.
    async fn leave(&self, holder: &str) -> Result<(), StateError>;
}
